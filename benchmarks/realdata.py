#!/usr/bin/env python
"""Real-data sweep over the ADBench sets: gpumine vs plain PyTorch (GPU) or scikit-learn (CPU), exactness vs float64.

A thin wrapper around :func:`gpumine.bench.realdata.main` (also ``gpumine bench realdata``);
see ``python benchmarks/realdata.py --help``. Works from a source checkout without
installing: ``src/`` is put on the path when gpumine is not importable.
"""

import sys
from pathlib import Path

try:
    from gpumine.bench.realdata import main
except ModuleNotFoundError as exc:  # running from a checkout without `pip install -e .`
    if exc.name not in ("gpumine", "gpumine.bench", "gpumine.bench.realdata"):
        raise
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from gpumine.bench.realdata import main

if __name__ == "__main__":
    sys.exit(main(prog="benchmarks/realdata.py"))
