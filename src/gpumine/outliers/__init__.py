"""Outlier detection: top-n distance-based outliers (BruteForce and SolvingSet) and LOF.

* :func:`top_n_outliers` / :class:`DistanceOutlierDetector` — the n points whose
  summed distance to their k nearest neighbours is largest, exactly, by brute
  force on the kNN engine or by the SolvingSet algorithm (seed 003), whose
  solving set then predicts whether new points are outliers;
* :class:`LocalOutlierFactor` / :func:`lof_scores` — LOF with scikit-learn's
  conventions, on the kNN engine, with a deliberate rule for duplicates (seed 001).
"""

from ._distance_based import DistanceOutliers, top_n_outliers
from ._distance_detector import DistanceOutlierDetector
from ._lof import DuplicatesWarning
from ._lof_estimator import LocalOutlierFactor, lof_scores

__all__ = [
    "top_n_outliers",
    "DistanceOutliers",
    "DistanceOutlierDetector",
    "LocalOutlierFactor",
    "lof_scores",
    "DuplicatesWarning",
]
