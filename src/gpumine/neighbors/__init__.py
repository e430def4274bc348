"""Exact k-nearest-neighbour search, classification and regression (CUKNN)."""

from ..utils._lazy import lazy_exports
from ._api import kneighbors, tune_knn
from .engine import clear_search_graphs

__all__ = ["kneighbors", "tune_knn", "clear_search_graphs", "radius_neighbors", "kneighbors_graph", "radius_neighbors_graph",
           "NearestNeighbors", "KNeighborsClassifier", "KNeighborsRegressor", "RadiusNeighborsClassifier",
           "RadiusNeighborsRegressor", "KNeighborsTransformer"]

# the estimators need scikit-learn (about a second to import): loaded on first use,
# so the engine alone (streaming CLI, kneighbors) starts without it
_LAZY = {name: "._estimators" for name in ("NearestNeighbors", "KNeighborsClassifier", "KNeighborsRegressor")}
_LAZY.update({name: "._radius_estimators" for name in ("RadiusNeighborsClassifier", "RadiusNeighborsRegressor",
                                                         "KNeighborsTransformer")})
_LAZY.update({name: "._neighbor_graphs" for name in ("radius_neighbors", "kneighbors_graph", "radius_neighbors_graph")})

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
