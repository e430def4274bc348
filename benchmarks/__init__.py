"""Benchmarks that reproduce published GPU data-mining experiments side by side with peers.

Not part of the installed gpumine package: run them from a source checkout, at the repository
root, as ``python -m benchmarks.<suite> --help`` or ``python benchmarks/<suite>.py --help``.
Each suite is a module with ``main(argv=None) -> int``:

* :mod:`benchmarks.knn` — exact kNN (CUKNN, Liang et al. 2010) against plain PyTorch,
  scikit-learn and faiss-cpu.
* :mod:`benchmarks.outliers` — top-n distance-based outliers (GPU SolvingSet, Angiulli et al.)
  against scikit-learn and PyOD.
* :mod:`benchmarks.stream` — streaming LOF (LOF_GPU, Yu 2017): throughput, detection quality,
  batch LOF against scikit-learn.
* :mod:`benchmarks.realdata` — every ADBench set: all-kNN, LOF and top-10 outliers
  against plain PyTorch (GPU) or scikit-learn (CPU), exactness against float64.
* :mod:`benchmarks.radius` — radius queries, kNN graphs and radius graphs against plain PyTorch
  (same device) and scikit-learn (CPU), exactness against float64.
* :mod:`benchmarks.counting` — the counting engine: bitmaps, bit-slices and histograms, Naive
  Bayes, C4.5 and frequent itemsets against NumPy, scikit-learn, mlxtend and pyfim.

Scripts beside them: ``cpu_knn.py``, ``knn_small_profile.py``, ``knn_ties_profile.py`` (profiles
of the kNN engine) and ``make_samples.py`` (the data samples shipped with gpumine).

gpumine is imported from ``src/`` of this checkout when it is not installed. Importing this
package loads nothing heavy.
"""

import importlib.util
import sys
from pathlib import Path

__all__ = ["SUITES"]

SUITES = ("knn", "outliers", "stream", "realdata", "radius", "counting")

if importlib.util.find_spec("gpumine") is None:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
