"""Outlier detection: top-n distance-based outliers (BruteForce and SolvingSet) and LOF.

* :func:`top_n_outliers` / :class:`DistanceOutlierDetector` — the n points whose
  summed distance to their k nearest neighbours is largest, exactly, by brute
  force on the kNN engine or by the SolvingSet algorithm (GPU form: Angiulli,
  Basta, Lodi & Sartori, "Fast Outlier Detection Using a GPU"), whose
  solving set then predicts whether new points are outliers;
* :class:`LocalOutlierFactor` / :func:`lof_scores` — LOF with scikit-learn's
  conventions, on the kNN engine, with a deliberate rule for duplicates (LOF_GPU,
  Yu 2017).
"""

from ..utils._lazy import lazy_exports
from ._distance_based import DistanceOutliers, top_n_outliers
from ._lof import DuplicatesWarning

__all__ = [
    "top_n_outliers",
    "DistanceOutliers",
    "DistanceOutlierDetector",
    "LocalOutlierFactor",
    "lof_scores",
    "DuplicatesWarning",
]

# the estimators need scikit-learn (about a second to import): loaded on first use, so
# the streaming CLI, which needs only the LOF arithmetic, starts without it
_LAZY = {"DistanceOutlierDetector": "._distance_detector", "LocalOutlierFactor": "._lof_estimator",
         "lof_scores": "._lof_estimator"}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
