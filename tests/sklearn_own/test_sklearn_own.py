"""scikit-learn's own tests of its neighbour estimators, LOF and CategoricalNB, run on gpumine's estimators.

The test functions are those of the installed scikit-learn (nothing is copied
here): ``sklearn/neighbors/tests/test_neighbors.py``,
``sklearn/neighbors/tests/test_lof.py`` and the CategoricalNB cases of
``sklearn/tests/test_naive_bayes.py``. Each module is loaded a second time,
from its file, while ``sklearn.neighbors`` and ``sklearn.naive_bayes`` hand out
gpumine's classes (on the CPU) under scikit-learn's names, so the classes the
tests name (in their bodies and in their ``parametrize`` lists alike) are
gpumine's; scikit-learn's own modules get their attributes back right after.
The module's ``neighbors`` global then stays a copy of ``sklearn.neighbors``
with gpumine's classes in it. BallTree, KDTree, RadiusNeighborsTransformer and
the graph functions stay scikit-learn's (gpumine has no such classes; the
functions build scikit-learn estimators).

The expected failures, each with its reason, and the CI subset are in
``conftest.py`` beside this file.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import types

import sklearn.naive_bayes
import sklearn.neighbors

import gpumine.counting as _gpumine_counting
import gpumine.neighbors as _gpumine_neighbors
import gpumine.outliers as _gpumine_outliers


def _on_cpu(base):
    """``base`` with ``device="cpu"`` as its default, its signature saying so (scikit-learn's get_params reads it)."""
    signature = inspect.signature(base.__init__)
    parameters = [p.replace(default="cpu") if p.name == "device" else p for p in signature.parameters.values()]

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("device", "cpu")
        base.__init__(self, *args, **kwargs)

    __init__.__signature__ = signature.replace(parameters=parameters)
    # the same name as scikit-learn's (messages name the class), found here by pickle
    return type(base.__name__, (base,), {"__init__": __init__, "__module__": __name__, "__qualname__": base.__name__,
                                         "__doc__": base.__doc__})


NearestNeighbors = _on_cpu(_gpumine_neighbors.NearestNeighbors)
KNeighborsClassifier = _on_cpu(_gpumine_neighbors.KNeighborsClassifier)
KNeighborsRegressor = _on_cpu(_gpumine_neighbors.KNeighborsRegressor)
RadiusNeighborsClassifier = _on_cpu(_gpumine_neighbors.RadiusNeighborsClassifier)
RadiusNeighborsRegressor = _on_cpu(_gpumine_neighbors.RadiusNeighborsRegressor)
KNeighborsTransformer = _on_cpu(_gpumine_neighbors.KNeighborsTransformer)
LocalOutlierFactor = _on_cpu(_gpumine_outliers.LocalOutlierFactor)
CategoricalNB = _on_cpu(_gpumine_counting.CategoricalNB)

SWAPS = {
    "sklearn.neighbors": {cls.__name__: cls for cls in (NearestNeighbors, KNeighborsClassifier, KNeighborsRegressor,
                                                        RadiusNeighborsClassifier, RadiusNeighborsRegressor,
                                                        KNeighborsTransformer, LocalOutlierFactor)},
    "sklearn.naive_bayes": {"CategoricalNB": CategoricalNB},
}


def load_with_gpumine(module_name: str) -> types.ModuleType:
    """A fresh copy of scikit-learn's test module ``module_name`` that names gpumine's classes."""
    # scikit-learn's modules as they are now: the test modules' top levels rebind some of their functions
    # (test_neighbors wraps kneighbors_graph in ignore_warnings), for this session's other tests too otherwise
    saved = {name: dict(vars(sys.modules[name])) for name in SWAPS}
    try:
        # the original first: every module it imports is then loaded with scikit-learn's own classes,
        # so only the copy's own top level runs while the swapped classes are in place
        original = importlib.import_module(module_name)
        for name, classes in SWAPS.items():
            for attr, cls in classes.items():
                setattr(sys.modules[name], attr, cls)
        spec = importlib.util.spec_from_file_location(f"gpumine_sklearn_own.{module_name}", original.__file__)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        # what the copy's top level made of sklearn.neighbors (gpumine's classes, its wrapped functions)
        seen = dict(vars(sklearn.neighbors))
    finally:
        for name, contents in saved.items():
            namespace = vars(sys.modules[name])
            for added in set(namespace) - set(contents):
                if not isinstance(namespace[added], types.ModuleType):  # imported submodules stay bound
                    del namespace[added]
            namespace.update(contents)
    if isinstance(getattr(module, "neighbors", None), types.ModuleType):
        view = types.ModuleType("sklearn.neighbors")
        view.__dict__.update(seen)
        module.neighbors = view
    return module


def _tests(module: types.ModuleType) -> dict:
    """The module's test functions, as static methods of a test class (pytest resolves their fixtures alike)."""
    return {name: staticmethod(obj) for name, obj in vars(module).items()
            if name.startswith("test") and inspect.isfunction(obj)}


_NEIGHBORS = load_with_gpumine("sklearn.neighbors.tests.test_neighbors")
_LOF = load_with_gpumine("sklearn.neighbors.tests.test_lof")
_NAIVE_BAYES = load_with_gpumine("sklearn.tests.test_naive_bayes")

TestNeighbors = type("TestNeighbors", (), _tests(_NEIGHBORS))
TestLOF = type("TestLOF", (), _tests(_LOF))
TestCategoricalNB = type("TestCategoricalNB", (), _tests(_NAIVE_BAYES))

assert sklearn.neighbors.NearestNeighbors.__module__.startswith("sklearn.")  # scikit-learn's own classes are back
assert sklearn.naive_bayes.CategoricalNB.__module__.startswith("sklearn.")
