"""Benchmarks that reproduce the seed papers' experiments side by side with peers.

Each suite is a module with ``main(argv=None) -> int`` (what ``gpumine bench
<suite>`` and ``benchmarks/<suite>.py`` call):

* :mod:`gpumine.bench.knn` — exact kNN (CUKNN, Liang et al. 2010) against plain PyTorch,
  scikit-learn and faiss-cpu.
* :mod:`gpumine.bench.realdata` — every ADBench set: all-kNN, LOF and top-10 outliers
  against plain PyTorch (GPU) or scikit-learn (CPU), exactness against float64.

Suites are imported on demand; importing this package loads nothing heavy.
"""

__all__ = ["SUITES"]

SUITES = ("knn", "realdata")
