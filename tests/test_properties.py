"""Property-based checks of the public API against float64 NumPy and the peers, valid and faulty input.

CI runs a fixed-seed slice (``GPUMINE_HYPOTHESIS=ci``, the default: a few hundred
cases per property); ``GPUMINE_HYPOTHESIS=thorough pytest -m slow tests/test_properties.py``
runs 10,000 per property.
"""

import os

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

from gpumine.counting import BitmapStore, CategoricalNB, contingency_table, frequent_itemsets  # noqa: E402
from gpumine.neighbors import kneighbors  # noqa: E402
from gpumine.outliers import LocalOutlierFactor  # noqa: E402

settings.register_profile("ci", max_examples=150, derandomize=True, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("thorough", max_examples=10_000, derandomize=True, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("GPUMINE_HYPOTHESIS", "ci"))

FLOAT64_ORDERED = ["euclidean", "sqeuclidean", "manhattan", "chebyshev"]

# magnitudes a user's data may have: integer grids (ties), ordinary floats, and the edges of float32
_values = st.one_of(
    st.integers(-3, 3).map(float),
    st.floats(-1e3, 1e3, allow_nan=False, width=32),
    st.sampled_from([0.0, 1e-42, -3e-42, 1e-30, 2e-30, 1e20, -1e20, 3e38, 1.0, -1.0]),
)


@st.composite
def knn_problems(draw):
    d = draw(st.integers(1, 4))
    n_ref = draw(st.integers(2, 24))
    dtype = draw(st.sampled_from([np.float32, np.float64, np.int64]))
    elements = _values if dtype != np.int64 else st.integers(-50, 50)
    ref = draw(hnp.arrays(dtype, (n_ref, d), elements=elements))
    if draw(st.booleans()):  # duplicate blocks
        ref[draw(st.integers(0, n_ref - 1)):] = ref[0]
    self_search = draw(st.booleans())
    query = None if self_search else draw(hnp.arrays(dtype, (draw(st.integers(1, 6)), d), elements=elements))
    k = draw(st.integers(1, n_ref - 1 if self_search else n_ref))
    metric = draw(st.sampled_from(FLOAT64_ORDERED))
    return ref, query, k, metric


def _oracle(ref, query, metric):
    R = np.asarray(ref, dtype=np.float64)
    Q = R if query is None else np.asarray(query, dtype=np.float64)
    diff = np.abs(Q[:, None, :] - R[None, :, :])
    if metric in ("euclidean", "sqeuclidean"):
        D = (diff * diff).sum(-1)
        D = np.sqrt(D) if metric == "euclidean" else D
    elif metric == "manhattan":
        D = diff.sum(-1)
    else:
        D = diff.max(-1)
    if query is None:
        np.fill_diagonal(D, np.inf)
    return D


@given(knn_problems())
def test_kneighbors_equals_a_float64_brute_force_under_the_tie_rule(problem):
    ref, query, k, metric = problem
    dist, idx = kneighbors(ref, query, k=k, metric=metric, device="cpu")
    D = _oracle(ref, query, metric)
    assert idx.shape == (D.shape[0], k) and (idx >= 0).all() and (idx < D.shape[1]).all()
    got = np.take_along_axis(D, idx, 1)
    want = np.sort(D, axis=1)[:, :k]
    # the k nearest by float64 distance (equal up to the last bit of a differently ordered sum)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    # ascending, and equal distances by index
    for row_d, row_i in zip(got, idx):
        for j in range(k - 1):
            assert row_d[j] <= row_d[j + 1] * (1 + 1e-12)
            if row_d[j] == row_d[j + 1]:
                assert row_i[j] < row_i[j + 1]
    out_dtype = np.float32 if np.asarray(ref).dtype == np.float32 else np.float64
    assert dist.dtype == out_dtype
    expected = want.astype(out_dtype)
    rtol = 4e-7 if out_dtype == np.float32 else 1e-12
    np.testing.assert_allclose(dist, expected, rtol=rtol, atol=np.finfo(out_dtype).smallest_subnormal * 4)


@given(st.integers(8, 40), st.integers(1, 4), st.data())
def test_lof_equals_scikit_learn_on_continuous_data(n, d, data):
    from sklearn.neighbors import LocalOutlierFactor as SkLOF

    seed = data.draw(st.integers(0, 2**31 - 1))
    scale = data.draw(st.sampled_from([1.0, 1e-3, 1e6]))
    X = np.random.default_rng(seed).standard_normal((n, d)) * scale
    k = data.draw(st.integers(1, n - 1))
    got = LocalOutlierFactor(n_neighbors=k, device="cpu").fit(X).negative_outlier_factor_
    # exact: the textbook LOF on float64 distances by direct differences
    D = _oracle(X, None, "euclidean")
    nb = np.argsort(D, axis=1, kind="stable")[:, :k]
    kdist = np.take_along_axis(D, nb, 1)[:, -1]
    lrd = 1.0 / np.maximum(np.take_along_axis(D, nb, 1), kdist[nb]).mean(1)
    np.testing.assert_allclose(got, -(lrd[nb].mean(1) / lrd), rtol=1e-9)
    # scikit-learn adds 1e-10 to every mean reach-distance (lrd = 1 / (mean + 1e-10)): on points
    # 1e-3 apart that moved an LOF of 1,762 by 3e-4 of itself; at unit scale and above it is noise
    if scale >= 1.0:
        np.testing.assert_allclose(got, SkLOF(n_neighbors=k).fit(X).negative_outlier_factor_, rtol=1e-5)


@given(hnp.arrays(np.int64, st.tuples(st.integers(1, 60), st.integers(2, 4)), elements=st.integers(0, 4)))
def test_contingency_tables_equal_numpy_counts(codes):
    store = BitmapStore.from_codes(codes, [5] * codes.shape[1], device="cpu")
    table = contingency_table(store, 0, 1).numpy()
    expected = np.zeros((5, 5), dtype=np.int64)
    np.add.at(expected, (codes[:, 0], codes[:, 1]), 1)
    assert np.array_equal(table, expected)


@given(hnp.arrays(np.int64, st.tuples(st.integers(2, 50), st.integers(1, 4)), elements=st.integers(0, 3)), st.data())
def test_categorical_nb_equals_scikit_learn(X, data):
    from sklearn.naive_bayes import CategoricalNB as SkNB

    y = data.draw(hnp.arrays(np.int64, X.shape[0], elements=st.integers(0, 2)))
    alpha = data.draw(st.sampled_from([1.0, 0.5]))
    ours = CategoricalNB(alpha=alpha, device="cpu").fit(X, y)
    theirs = SkNB(alpha=alpha, min_categories=X.max(0) + 1).fit(X, y)
    np.testing.assert_allclose(ours.predict_proba(X), theirs.predict_proba(X), rtol=1e-9, atol=1e-12)


@given(hnp.arrays(bool, st.tuples(st.integers(1, 30), st.integers(1, 6))), st.sampled_from([0.1, 0.3, 0.5, 1.0]))
def test_frequent_itemsets_equal_mlxtend(onehot, min_support):
    pd = pytest.importorskip("pandas")
    mlxtend = pytest.importorskip("mlxtend.frequent_patterns")
    frame = pd.DataFrame(onehot, columns=[f"i{j}" for j in range(onehot.shape[1])])
    ours = frequent_itemsets(frame, min_support, device="cpu")  # both default to column indices
    theirs = mlxtend.apriori(frame, min_support=min_support)
    as_set = lambda df: {(frozenset(s), round(float(v), 12)) for v, s in zip(df["support"], df["itemsets"])}  # noqa: E731
    assert as_set(ours) == as_set(theirs)


# -- faulty input: a clear error naming the parameter, never a wrong answer ----------------------------------

@given(knn_problems(), st.sampled_from([np.nan, np.inf, -np.inf]), st.data())
def test_non_finite_input_is_refused_naming_the_array(problem, bad, data):
    ref, query, k, metric = problem
    ref = np.asarray(ref, dtype=np.float64).copy()
    ref[data.draw(st.integers(0, ref.shape[0] - 1)), data.draw(st.integers(0, ref.shape[1] - 1))] = bad
    with pytest.raises(ValueError, match="X_ref"):
        kneighbors(ref, query, k=k, metric=metric, device="cpu")


@given(knn_problems(), st.integers(1, 5))
def test_too_many_neighbours_or_wrong_features_are_refused(problem, extra):
    ref, query, k, metric = problem
    n_allowed = ref.shape[0] - (1 if query is None else 0)
    with pytest.raises(ValueError, match="k|n_neighbors"):
        kneighbors(ref, query, k=n_allowed + extra, metric=metric, device="cpu")
    wrong = np.zeros((2, ref.shape[1] + extra))
    with pytest.raises(ValueError, match="features"):
        kneighbors(ref, wrong, k=1, metric=metric, device="cpu")


@pytest.mark.slow
def test_thorough_profile_runs_ten_thousand_cases_per_property():
    from helpers import run_thorough_profile

    run_thorough_profile(__file__)
