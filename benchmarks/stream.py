#!/usr/bin/env python
"""Streaming LOF benchmark (seed 001, LOF_GPU): throughput, ROC-AUC on labelled streams, batch LOF vs scikit-learn.

A thin wrapper around :func:`gpumine.bench.stream.main`; see
``python benchmarks/stream.py --help``. Works from a source checkout without
installing: ``src/`` is put on the path when gpumine is not importable.
"""

import sys
from pathlib import Path

try:
    from gpumine.bench.stream import main
except ModuleNotFoundError as exc:  # running from a checkout without `pip install -e .`
    if exc.name not in ("gpumine", "gpumine.bench", "gpumine.bench.stream"):
        raise
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from gpumine.bench.stream import main

if __name__ == "__main__":
    sys.exit(main(prog="benchmarks/stream.py"))
