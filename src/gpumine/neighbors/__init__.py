"""Exact k-nearest-neighbour search, classification and regression (CUKNN)."""

from .._lazy import lazy_exports
from ._api import kneighbors, tune_knn
from ._graphs import clear_search_graphs

__all__ = ["kneighbors", "tune_knn", "clear_search_graphs", "NearestNeighbors", "KNeighborsClassifier", "KNeighborsRegressor"]

# the estimators need scikit-learn (about a second to import): loaded on first use,
# so the engine alone (streaming CLI, kneighbors) starts without it
_LAZY = {name: "._estimators" for name in ("NearestNeighbors", "KNeighborsClassifier", "KNeighborsRegressor")}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
