"""Exact k-nearest-neighbour search, classification and regression (CUKNN)."""

from ._api import kneighbors
from ._estimators import KNeighborsClassifier, KNeighborsRegressor, NearestNeighbors

__all__ = ["kneighbors", "NearestNeighbors", "KNeighborsClassifier", "KNeighborsRegressor"]
