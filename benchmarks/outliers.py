#!/usr/bin/env python
"""Top-n distance-based outliers benchmark (seed 003): gpumine SolvingSet and BruteForce vs scikit-learn and PyOD.

A thin wrapper around :func:`gpumine.bench.outliers.main` (``gpumine bench outliers`` once registered);
see ``python benchmarks/outliers.py --help``. Works from a source checkout without installing:
``src/`` is put on the path when gpumine is not importable.
"""

import sys
from pathlib import Path

try:
    from gpumine.bench.outliers import main
except ModuleNotFoundError as exc:  # running from a checkout without `pip install -e .`
    if exc.name not in ("gpumine", "gpumine.bench", "gpumine.bench.outliers"):
        raise
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from gpumine.bench.outliers import main

if __name__ == "__main__":
    sys.exit(main(prog="benchmarks/outliers.py"))
