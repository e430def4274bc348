"""Package attributes loaded on first use (the estimators pull in scikit-learn, about a second)."""

from __future__ import annotations

from importlib import import_module


def lazy_exports(package: str, names: dict[str, str], namespace: dict):
    """``(__getattr__, __dir__)`` for ``package`` whose ``names`` (name -> relative module) load lazily.

    Examples
    --------
    >>> getattr_, dir_ = lazy_exports("gpumine.neighbors", {"NearestNeighbors": "._estimators"}, {})
    >>> getattr_("NearestNeighbors").__name__
    'NearestNeighbors'
    """

    def __getattr__(name):
        if name in names:
            return getattr(import_module(names[name], package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(list(namespace) + list(names))

    return __getattr__, __dir__
