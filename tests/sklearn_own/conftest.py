"""Fixtures, expected failures and the CI subset for scikit-learn's own tests run on gpumine (see the test file).

``pytest tests/sklearn_own`` runs every case; CI (``-m "not slow"``) leaves out
the heaviest parametrisations listed in ``SLOW_CASES`` (about half the time).
Of the CategoricalNB module only the CategoricalNB cases run; the others test
scikit-learn's own naive Bayes classes and are deselected. float32 cases are
skipped unless ``SKLEARN_RUN_FLOAT32_TESTS=1``, and ``global_random_seed`` is 42
unless ``SKLEARN_TESTS_GLOBAL_RANDOM_SEED`` says otherwise, as in scikit-learn.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import numpy as np
import pytest


# -- what scikit-learn's conftest gives its tests ---------------------------------------------------
@pytest.fixture(params=[pytest.param(np.float32, marks=pytest.mark.skipif(
    os.environ.get("SKLEARN_RUN_FLOAT32_TESTS", "0") != "1",
    reason="Set SKLEARN_RUN_FLOAT32_TESTS=1 to run float32 dtype tests")), np.float64])
def global_dtype(request):
    return request.param


def _random_seeds() -> list[int]:
    """scikit-learn's SKLEARN_TESTS_GLOBAL_RANDOM_SEED: 42 by default, 'all', 'a-b' or one seed."""
    value = os.environ.get("SKLEARN_TESTS_GLOBAL_RANDOM_SEED")
    if value is None:
        return [42]
    if value == "all":
        return list(range(100))
    if "-" in value:
        start, stop = value.split("-")
        return list(range(int(start), int(stop) + 1))
    return [int(value)]


def pytest_generate_tests(metafunc):
    if "global_random_seed" in metafunc.fixturenames:
        metafunc.parametrize("global_random_seed", _random_seeds())


def pytest_configure(config):
    for line in ("thread_unsafe: scikit-learn's mark for tests not run in parallel threads",
                 "parallel_threads(n): scikit-learn's mark for tests run in n threads",
                 "iterations(n): scikit-learn's mark for tests run n times per thread"):
        config.addinivalue_line("markers", line)


# -- expected failures: (test class, test function, parameter-id glob or None for all) -> reason ------------
# Each is a private attribute, a message's wording, a documented convention or an input gpumine takes that
# scikit-learn refuses (or the reverse); none is a wrong neighbour or score. They are strict: one that starts
# passing fails the run, so the list stays honest.
_PRIVATE = "private attribute: "
_MESSAGE = "message text: "
_CONVENTION = "documented gpumine convention: "
_SUPERSET = "gpumine takes what scikit-learn refuses: "
_UNSUPPORTED = "not supported: "
EXPECTED_FAILURES = {
    ("TestNeighbors", "test_auto_algorithm", "X[1-4]-*"):
        _PRIVATE + "_fit_method names the algorithm scikit-learn would pick (kd_tree, ball_tree); gpumine picks its "
        "own exact method, so the engine's searches have no _fit_method and the brute-force ones say 'brute'",
    ("TestNeighbors", "test_precomputed_sparse_invalid", None):
        _CONVENTION + "on a precomputed sparse graph, X=None excludes the point itself and needs k other stored "
        "entries (1 here); scikit-learn takes the first k + 1 stored entries and so asks for 2",
    ("TestNeighbors", "test_neighbors_validate_parameters", None):
        _SUPERSET + "sparse input is densified, so metric='haversine' takes it (scikit-learn: 'Metric ... not valid "
        "for sparse input'); the test's other checks pass (tests/test_sklearn_parity.py runs them)",
    ("TestNeighbors", "test_predict_sparse_ball_kd_tree", None):
        _SUPERSET + "sparse queries are densified whatever the algorithm (scikit-learn's trees refuse them)",
    ("TestNeighbors", "test_k_and_radius_neighbors_train_is_not_query", None):
        _CONVENTION + "radius neighbours always come ordered by (distance, index); the test expects scikit-learn's "
        "unsorted brute-force order (by index) for sort_results=False",
    ("TestNeighbors", "test_k_and_radius_neighbors_duplicates", None):
        _CONVENTION + "radius neighbours always come ordered by (distance, index); the test expects scikit-learn's "
        "unsorted order (by index) for sort_results=False",
    ("TestNeighbors", "test_radius_neighbors_parallel_array_radius", None):
        _UNSUPPORTED + "a radius per query (an array radius); gpumine takes one number",
    ("TestNeighbors", "test_sparse_metric_callable", None):
        _CONVENTION + "sparse input is densified, so a callable metric receives dense 1-D rows, not sparse matrices",
    ("TestLOF", "test_lof_error_n_neighbors_too_large", None):
        _MESSAGE + "gpumine's n_neighbors errors say 'needs at least 2 samples' and 'Expected n_neighbors <= "
        "n_samples_fit ... only 1 other points', not scikit-learn's exact sentence",
    ("TestLOF", "test_lof_duplicate_samples", None):
        _CONVENTION + "the default duplicates='distinct' gives duplicate groups finite scores and warns with its own "
        "message (a DuplicatesWarning, a UserWarning); duplicates='sklearn' reproduces scikit-learn and its warning",
    ("TestCategoricalNB", "test_discretenb_provide_prior", "*CategoricalNB*"):
        _CONVENTION + "a failed fit keeps the previous model: after fit(..., [0, 1, 2]) fails on the 2-class prior, "
        "classes_ is still [0, 1], which partial_fit(classes=[0, 1, 1]) matches (scikit-learn's sorted distinct labels "
        "rule, as gpumine's); scikit-learn's failed fit leaves classes_ = [0, 1, 2] behind, so there it raises",
}


def _expected_failure(item) -> str | None:
    callspec = getattr(item, "callspec", None)
    for (cls, name, ids), reason in EXPECTED_FAILURES.items():
        if item.parent.name == cls and getattr(item, "originalname", None) == name and (
                ids is None or (callspec is not None and fnmatch.fnmatchcase(callspec.id, ids))):
            return reason
    return None


# -- the CI subset: the heaviest parametrisations run under -m slow only -------------------------------------
# (test function, parameter-id glob) of the cases left out of CI. The full set takes about twice the CI time.
SLOW_CASES = (
    # radius estimators on 1,000 points whose radius covers every point: 100,000 pairs a fit, four fits a case
    ("test_neigh_predictions_algorithm_agnosticity", "*Radius*-1000-5-100"),
    # the middle of the three (n_neighbors, radius) pairs: CI keeps the smallest and the largest
    ("test_neigh_predictions_algorithm_agnosticity", "*-50-500-*"),
    # 100 features, k = 100, training set as queries
    ("test_unsupervised_kneighbors", "*-100-100-10-100"),
)
# test_radius_neighbors_brute_backend (2,000 x 30 per metric) runs in CI for these metrics only: one of the
# engine's, and brute-force ones of every kind (per-feature sums, matrix forms, boolean counts)
_CI_RADIUS_BRUTE = ("euclidean", "seuclidean", "mahalanobis", "correlation", "nan_euclidean", "jaccard")


def _is_slow(item) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return False
    name = getattr(item, "originalname", None)
    if name == "test_radius_neighbors_brute_backend":
        return callspec.params.get("metric") not in _CI_RADIUS_BRUTE
    return any(name == slow and fnmatch.fnmatchcase(callspec.id, ids) for slow, ids in SLOW_CASES)


# -- which cases run ---------------------------------------------------------------------------------------
def _is_categorical_nb_case(item) -> bool:
    """The CategoricalNB parts of test_naive_bayes.py: its own tests, and the shared ones run on CategoricalNB."""
    name = getattr(item, "originalname", item.name)
    if "categorical" in name.lower() or name == "test_alpha":  # test_alpha's third part is CategoricalNB's
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    return any(getattr(value, "__name__", None) == "CategoricalNB" for value in params.values())


def pytest_collection_modifyitems(config, items):
    # the hook sees the whole session's items: only this directory's are touched
    here = Path(__file__).parent
    kept, deselected = [], []
    for item in items:
        if item.path.parent != here:
            kept.append(item)
        elif item.parent.name == "TestCategoricalNB" and not _is_categorical_nb_case(item):
            deselected.append(item)  # tests of scikit-learn's other naive Bayes classes
        else:
            kept.append(item)
            reason = _expected_failure(item)
            if reason is not None:
                item.add_marker(pytest.mark.xfail(reason=reason, strict=True))
            if _is_slow(item):
                item.add_marker(pytest.mark.slow)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
