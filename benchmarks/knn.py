#!/usr/bin/env python
"""Exact kNN benchmark (seed 000, CUKNN): gpumine vs plain PyTorch, scikit-learn and faiss-cpu.

A thin wrapper around :func:`gpumine.bench.knn.main` (also ``gpumine bench knn``);
see ``python benchmarks/knn.py --help``. Works from a source checkout without
installing: ``src/`` is put on the path when gpumine is not importable.
"""

import sys
from pathlib import Path

try:
    from gpumine.bench.knn import main
except ModuleNotFoundError as exc:  # running from a checkout without `pip install -e .`
    if exc.name not in ("gpumine", "gpumine.bench", "gpumine.bench.knn"):
        raise
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from gpumine.bench.knn import main

if __name__ == "__main__":
    sys.exit(main(prog="benchmarks/knn.py"))
