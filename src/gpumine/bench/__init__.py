"""Benchmarks that reproduce the seed papers' experiments side by side with peers.

Each suite is a module with ``main(argv=None) -> int`` (what ``gpumine bench
<suite>`` and ``benchmarks/<suite>.py`` call):

* :mod:`gpumine.bench.knn` — exact kNN (seed 000, CUKNN) against plain PyTorch,
  scikit-learn and faiss-cpu.

Suites are imported on demand; importing this package loads nothing heavy.
"""

__all__ = ["SUITES"]

SUITES = ("knn",)
