"""Exact k-nearest-neighbour search, classification and regression (CUKNN)."""

from ._api import kneighbors

__all__ = ["kneighbors", "NearestNeighbors", "KNeighborsClassifier", "KNeighborsRegressor"]

_ESTIMATORS = ("NearestNeighbors", "KNeighborsClassifier", "KNeighborsRegressor")


def __getattr__(name):
    # the estimators need scikit-learn (about a second to import): loaded on first use,
    # so the engine alone (streaming CLI, kneighbors) starts without it
    if name in _ESTIMATORS:
        from . import _estimators

        return getattr(_estimators, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_ESTIMATORS))
