"""Property-based checks of the estimators and helpers that tests/test_properties.py leaves out (issue 20).

Each property runs against a float64 NumPy/SciPy/scikit-learn/mlxtend reference or an invariant,
on valid input and on faulty input (NaN/inf, empty, wrong feature count, non-contiguous and
read-only arrays, float32/float64/int data, pandas DataFrames).

The profiles are those of tests/test_properties.py: ``GPUMINE_HYPOTHESIS=ci`` (the default, a
fixed-seed slice small enough for CI: ``_ci(n)`` caps a property at n examples there) and
``GPUMINE_HYPOTHESIS=thorough pytest -m slow tests/test_properties_estimators.py`` (10,000 per
property, derandomized too).
"""

import os
import tempfile

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

from gpumine.counting import CategoricalNB, frequent_itemsets  # noqa: E402
from gpumine.neighbors import (KNeighborsRegressor, kneighbors_graph, radius_neighbors,  # noqa: E402
                               radius_neighbors_graph)
from gpumine.outliers import LocalOutlierFactor, top_n_outliers  # noqa: E402
from gpumine.stream import SlidingWindowLOF, StreamingLOF  # noqa: E402

_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("ci", max_examples=150, derandomize=True, deadline=None, suppress_health_check=_SUPPRESS)
settings.register_profile("thorough", max_examples=10_000, derandomize=True, deadline=None,
                          suppress_health_check=_SUPPRESS)
PROFILE = os.environ.get("GPUMINE_HYPOTHESIS", "ci")
settings.load_profile(PROFILE)


def _ci(n):
    """At most n examples in the CI slice; the thorough profile keeps its own count."""
    if PROFILE == "ci":
        return settings(max_examples=n)
    return lambda f: f


METRICS = ["euclidean", "manhattan", "chebyshev"]


def _pairwise(A, B, metric):
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    diff = np.abs(A[:, None, :] - B[None, :, :])
    if metric == "euclidean":
        return np.sqrt((diff * diff).sum(-1))
    if metric == "manhattan":
        return diff.sum(-1)
    return diff.max(-1)


_grid = st.integers(-4, 4).map(float)
_float32 = st.floats(-10, 10, allow_nan=False, width=32)


@st.composite
def small_tables(draw, min_rows=2, max_rows=20, max_d=3):
    """Small tables with ties (integer grids) or without, as float32, float64 or int64."""
    d = draw(st.integers(1, max_d))
    n = draw(st.integers(min_rows, max_rows))
    dtype = draw(st.sampled_from([np.float32, np.float64, np.int64]))
    elements = st.integers(-4, 4) if dtype == np.int64 else st.one_of(_grid, _float32)
    return draw(hnp.arrays(dtype, (n, d), elements=elements))


@st.composite
def continuous(draw, min_rows=4, max_rows=30, max_d=3):
    """Gaussian float64 data: no duplicates and (almost surely) no distance ties."""
    n = draw(st.integers(min_rows, max_rows))
    d = draw(st.integers(1, max_d))
    seed = draw(st.integers(0, 2**31 - 1))
    scale = draw(st.sampled_from([1.0, 1e3]))
    return np.random.default_rng(seed).standard_normal((n, d)) * scale


def _radius_away_from_distances(D, radius):
    """Keep radii that no distance is within a float32 rounding of (sklearn computes float32 data in float32)."""
    return not np.any(np.abs(D - radius) <= 1e-5 * max(radius, 1e-30))


# -- neighbours: radius queries and graphs vs scikit-learn brute ----------------------------------------------

@_ci(60)
@given(small_tables(), st.one_of(st.none(), small_tables(1, 5)), st.sampled_from(METRICS),
       st.sampled_from([0.5, 1.0, 1.7, 2.9, 6.1]))
def test_radius_neighbors_equals_float64_numpy_and_scikit_learn_brute(ref, query, metric, radius):
    from sklearn.neighbors import NearestNeighbors as SkNN

    if query is not None:
        assume(query.shape[1] == ref.shape[1])
    D = _pairwise(ref, ref if query is None else query, metric).T
    assume(_radius_away_from_distances(D, radius))
    dist, idx = radius_neighbors(ref, query, radius, metric=metric, device="cpu")
    if query is None:
        np.fill_diagonal(D, np.inf)
    sk = SkNN(radius=radius, metric=metric, algorithm="brute").fit(ref)
    sk_dist, sk_idx = sk.radius_neighbors(query)
    both32 = ref.dtype == np.float32 and (query is None or query.dtype == np.float32)
    out_dtype = np.float32 if both32 else np.float64
    assert len(idx) == len(dist) == D.shape[0]
    for i in range(D.shape[0]):
        want = np.flatnonzero(D[i] <= radius)
        assert set(idx[i].tolist()) == set(want.tolist()) == set(sk_idx[i].tolist())
        assert dist[i].dtype == out_dtype
        np.testing.assert_allclose(dist[i], D[i, idx[i]], rtol=4e-7 if out_dtype == np.float32 else 1e-12)
        # ordered by (distance, index)
        order = np.lexsort((idx[i], D[i, idx[i]]))
        assert np.array_equal(order, np.arange(len(order)))


@_ci(50)
@given(continuous(3, 25), st.data())
def test_kneighbors_graph_equals_scikit_learn(X, data):
    from sklearn.neighbors import kneighbors_graph as sk_graph

    include_self = data.draw(st.booleans())
    k = data.draw(st.integers(1, X.shape[0] - 1))
    mode = data.draw(st.sampled_from(["connectivity", "distance"]))
    metric = data.draw(st.sampled_from(METRICS))
    G = kneighbors_graph(X, k, mode=mode, metric=metric, include_self=include_self, device="cpu")
    S = sk_graph(X, k, mode=mode, metric=metric, include_self=include_self)
    assert G.shape == S.shape == (X.shape[0], X.shape[0])
    assert np.array_equal(G.indptr, S.indptr) and G.getnnz() == X.shape[0] * k
    np.testing.assert_allclose(G.toarray(), S.toarray(), rtol=1e-9, atol=0)
    if mode == "distance":  # vs float64 NumPy, tighter than scikit-learn's own Gram-matrix distances
        D = _pairwise(X, X, metric)
        rows = np.repeat(np.arange(X.shape[0]), np.diff(G.indptr))
        np.testing.assert_allclose(G.data, D[rows, G.indices], rtol=1e-12, atol=0)
    else:
        assert set(np.unique(G.data).tolist()) <= {1.0}


@_ci(50)
@given(small_tables(), st.sampled_from(METRICS), st.sampled_from([0.5, 1.0, 2.9, 6.1]), st.booleans(),
       st.sampled_from(["connectivity", "distance"]))
def test_radius_neighbors_graph_equals_scikit_learn(X, metric, radius, include_self, mode):
    from sklearn.neighbors import radius_neighbors_graph as sk_graph

    D = _pairwise(X, X, metric)
    assume(_radius_away_from_distances(D, radius))
    G = radius_neighbors_graph(X, radius, mode=mode, metric=metric, include_self=include_self, device="cpu")
    S = sk_graph(X, radius, mode=mode, metric=metric, include_self=include_self)
    want = D <= radius
    if not include_self:
        np.fill_diagonal(want, False)
    pattern = np.zeros_like(want)
    rows = np.repeat(np.arange(X.shape[0]), np.diff(G.indptr))
    pattern[rows, G.indices] = True
    assert np.array_equal(pattern, want)
    S_pattern = np.zeros_like(want)
    S = S.tocsr()
    S_pattern[np.repeat(np.arange(X.shape[0]), np.diff(S.indptr)), S.indices] = True
    assert np.array_equal(pattern, S_pattern)
    if mode == "distance":
        np.testing.assert_allclose(G.data, D[rows, G.indices], rtol=4e-7, atol=0)
    else:
        assert set(np.unique(G.data).tolist()) <= {1.0}


@_ci(50)
@given(continuous(3, 25), st.data())
def test_kneighbors_regressor_equals_scikit_learn(X, data):
    from sklearn.neighbors import KNeighborsRegressor as SkReg

    weights = data.draw(st.sampled_from(["uniform", "distance"]))
    k = data.draw(st.integers(1, X.shape[0]))
    metric = data.draw(st.sampled_from(METRICS))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31 - 1)))
    y = rng.standard_normal((X.shape[0], data.draw(st.sampled_from([1, 2]))))
    if data.draw(st.booleans()):
        y = y[:, 0]
    Q = rng.standard_normal((data.draw(st.integers(1, 6)), X.shape[1])) * np.abs(X).max()
    ours = KNeighborsRegressor(n_neighbors=k, weights=weights, metric=metric, device="cpu").fit(X, y)
    theirs = SkReg(n_neighbors=k, weights=weights, metric=metric, algorithm="brute").fit(X, y)
    # on new points, and on the training points themselves (distance 0: the point's own target)
    for q in (Q, X):
        got = ours.predict(q)
        assert got.shape == theirs.predict(q).shape
        # scikit-learn's euclidean distances (Gram matrix) are good to ~1e-8 relative; the weights follow
        np.testing.assert_allclose(got, theirs.predict(q), rtol=1e-6, atol=1e-9)
    if weights == "distance":
        np.testing.assert_allclose(ours.predict(X), y, rtol=1e-12, atol=0)


# -- outliers --------------------------------------------------------------------------------------------------

@_ci(40)
@given(continuous(6, 30), st.data())
def test_lof_sklearn_duplicates_rule_equals_scikit_learn_in_both_modes(X, data):
    from sklearn.neighbors import LocalOutlierFactor as SkLOF

    k = data.draw(st.integers(1, X.shape[0] - 1))
    metric = data.draw(st.sampled_from(METRICS))
    ours = LocalOutlierFactor(n_neighbors=k, metric=metric, duplicates="sklearn", device="cpu").fit(X)
    theirs = SkLOF(n_neighbors=k, metric=metric, algorithm="brute").fit(X)
    np.testing.assert_allclose(ours.negative_outlier_factor_, theirs.negative_outlier_factor_, rtol=1e-6)
    assert ours.n_neighbors_ == theirs.n_neighbors_
    # novelty: scores of new points
    Q = np.random.default_rng(data.draw(st.integers(0, 2**31 - 1))).standard_normal((5, X.shape[1])) * np.abs(X).max()
    ours_n = LocalOutlierFactor(n_neighbors=k, metric=metric, duplicates="sklearn", novelty=True, device="cpu").fit(X)
    theirs_n = SkLOF(n_neighbors=k, metric=metric, algorithm="brute", novelty=True).fit(X)
    np.testing.assert_allclose(ours_n.score_samples(Q), theirs_n.score_samples(Q), rtol=1e-6)
    margin = np.abs(theirs_n.decision_function(Q)) > 1e-6 * np.abs(theirs_n.offset_)
    assert np.array_equal(ours_n.predict(Q)[margin], theirs_n.predict(Q)[margin])


def _weights_oracle(X, k, metric, include_self):
    D = _pairwise(X, X, metric)
    if not include_self:
        np.fill_diagonal(D, np.inf)
    near = np.sort(D, axis=1)[:, :k]  # include_self: the point itself at 0 and its k - 1 nearest others
    return near.sum(1)


@_ci(50)
@given(st.one_of(continuous(3, 30), small_tables(3, 30)), st.data())
def test_top_n_outliers_solving_set_equals_brute_force_and_numpy(X, data):
    n = X.shape[0]
    include_self = data.draw(st.booleans())
    k = data.draw(st.integers(2 if include_self else 1, n - 1))
    n_out = data.draw(st.integers(1, n))
    metric = data.draw(st.sampled_from(METRICS))
    seed = data.draw(st.integers(0, 10))
    kw = dict(n_outliers=n_out, k=k, metric=metric, include_self=include_self, device="cpu")
    ss = top_n_outliers(X, method="solving_set", random_state=seed, n_candidates=data.draw(st.sampled_from([2, 5, "auto"])),
                        **kw)
    bf = top_n_outliers(X, method="brute_force", **kw)
    w = _weights_oracle(X, k, metric, include_self)
    want = np.sort(w)[::-1][:n_out]
    for res in (ss, bf):
        assert res.indices.shape == res.weights.shape == (n_out,)
        assert len(set(res.indices.tolist())) == n_out
        np.testing.assert_allclose(res.weights, want, rtol=1e-12, atol=0)
        np.testing.assert_allclose(res.weights, w[res.indices], rtol=1e-12, atol=0)
    np.testing.assert_allclose(ss.weights, bf.weights, rtol=1e-12, atol=0)
    if np.unique(w).size == n:  # no ties in weight: the same points, in the same order
        assert np.array_equal(ss.indices, bf.indices)
        assert np.array_equal(bf.indices, np.argsort(-w, kind="stable")[:n_out])


# -- streams ---------------------------------------------------------------------------------------------------

@st.composite
def stream_problems(draw):
    cls = draw(st.sampled_from([StreamingLOF, SlidingWindowLOF]))
    k = draw(st.integers(1, 4))
    window = draw(st.integers(k + 1, 12))
    extra = {"history_size": draw(st.integers(1, 12))} if cls is SlidingWindowLOF else {}
    X = draw(st.one_of(continuous(0, 40, 2), small_tables(0, 40, 2)))
    Q = np.random.default_rng(draw(st.integers(0, 2**31 - 1))).standard_normal((4, X.shape[1]))
    chunks = draw(st.integers(1, 3))
    return cls(n_neighbors=k, window_size=window, device="cpu", **extra), X, Q.astype(X.dtype), chunks


@_ci(40)
@given(stream_problems())
def test_stream_scores_are_finite_consistent_and_survive_save_load(problem):
    det, X, Q, chunks = problem
    for part in np.array_split(X, chunks):
        det.learn_many(part)
    scores = det.score_many(Q)
    assert scores.shape == (Q.shape[0],) and not np.isnan(scores).any() and (scores > 0).all()
    if len(np.unique(X, axis=0)) == len(X):
        assert np.isfinite(scores).all()
    # else a query beside a reference holding only copies of one point has LOF +inf, as the batch
    # LocalOutlierFactor(n_neighbors=1, novelty=True).fit([[0], [0]]).score_samples([[-1]]) == -inf
    # score_many is read-only and row-by-row the same as score_one
    assert np.array_equal(det.score_many(Q), scores)
    one = np.array([det.score_one(q) for q in Q])
    # float32 data: score_many rounds to float32 the float64 value score_one returns
    np.testing.assert_allclose(one, scores, rtol=6e-8 if scores.dtype == np.float32 else 1e-12, atol=0)
    with tempfile.TemporaryDirectory() as tmp:
        back = type(det).load(det.save(os.path.join(tmp, "det.npz")))
    assert np.array_equal(back.score_many(Q), scores)
    # and both go on learning the same way
    more = Q[::-1] + 0.25
    det.learn_many(more)
    back.learn_many(more)
    assert np.array_equal(back.score_many(Q), det.score_many(Q))


# -- counting --------------------------------------------------------------------------------------------------

@_ci(40)
@given(hnp.arrays(np.int64, st.tuples(st.integers(2, 40), st.integers(1, 4)), elements=st.integers(0, 3)),
       st.data())
def test_categorical_nb_probabilities_sum_to_one_and_equal_scikit_learn(X, data):
    from sklearn.naive_bayes import CategoricalNB as SkNB

    y = data.draw(hnp.arrays(np.int64, X.shape[0], elements=st.integers(0, 2)))
    fit_prior = data.draw(st.booleans())
    n_cat = np.full(X.shape[1], 4)
    kw = dict(alpha=data.draw(st.sampled_from([1.0, 0.5, 1e-10])), fit_prior=fit_prior, min_categories=n_cat)
    ours = CategoricalNB(device="cpu", **kw).fit(X, y)
    theirs = SkNB(**kw).fit(X, y)
    T = data.draw(hnp.arrays(np.int64, (data.draw(st.integers(1, 8)), X.shape[1]), elements=st.integers(0, 3)))
    P = ours.predict_proba(T)
    assert P.shape == (T.shape[0], np.unique(y).size)
    np.testing.assert_allclose(P.sum(1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(P, theirs.predict_proba(T), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ours.predict_log_proba(T), theirs.predict_log_proba(T), rtol=1e-9, atol=1e-9)
    assert np.array_equal(ours.classes_, theirs.classes_)


@_ci(40)
@given(st.lists(st.lists(st.sampled_from("abcdef"), min_size=0, max_size=5, unique=True), min_size=1, max_size=25),
       st.sampled_from([0.1, 0.25, 0.5, 1.0]), st.sampled_from([None, 1, 2]))
def test_frequent_itemsets_of_baskets_equal_mlxtend(baskets, min_support, max_len):
    pd = pytest.importorskip("pandas")
    mlxtend = pytest.importorskip("mlxtend.frequent_patterns")
    from mlxtend.preprocessing import TransactionEncoder

    assume(any(baskets))
    te = TransactionEncoder()
    frame = pd.DataFrame(te.fit(baskets).transform(baskets), columns=te.columns_)
    ours = frequent_itemsets(baskets, min_support, max_len=max_len, device="cpu")
    theirs = mlxtend.apriori(frame, min_support=min_support, use_colnames=True, max_len=max_len)
    as_set = lambda df: {(frozenset(s), round(float(v), 12)) for v, s in zip(df["support"], df["itemsets"])}  # noqa: E731
    assert as_set(ours) == as_set(theirs)
    # the support of an itemset is the fraction of baskets holding it; never above a subset's
    sets = {frozenset(s): v for v, s in zip(ours["support"], ours["itemsets"])}
    for s, v in sets.items():
        assert v == pytest.approx(sum(s <= set(b) for b in baskets) / len(baskets), rel=1e-12)
        for item in s:
            if len(s) > 1:
                assert sets[s - {item}] >= v


# -- faulty and unusual input, for every estimator ------------------------------------------------------------

def _nb_codes(X):
    return np.abs(np.asarray(X, dtype=np.float64)).astype(np.int64) % 3


# name -> (fit-and-score on X returning arrays, parameter name in the non-finite message, scorer on new X or None)
def _radius(X):
    d, i = radius_neighbors(X, None, 2.5, device="cpu")
    return [np.concatenate([np.asarray(a, dtype=np.float64) for a in d] + [np.zeros(0)]),
            np.concatenate([np.asarray(a) for a in i] + [np.zeros(0, int)])]


def _stream(cls, **kw):
    def run(X):
        det = cls(n_neighbors=2, window_size=5, device="cpu", **kw)
        det.learn_many(X)
        return [det.score_many(X)]
    return run


CASES = {
    "radius_neighbors": (_radius, "X_ref", lambda X, Q: radius_neighbors(X, Q, 1.0, device="cpu")),
    "kneighbors_graph": (lambda X: [kneighbors_graph(X, 2, mode="distance", device="cpu").toarray()], "X", None),
    "radius_neighbors_graph": (lambda X: [radius_neighbors_graph(X, 2.5, mode="distance", device="cpu").toarray()],
                               "X", None),
    "KNeighborsRegressor": (
        lambda X: [KNeighborsRegressor(n_neighbors=2, weights="distance", device="cpu")
                   .fit(X, np.arange(len(X), dtype=float)).predict(X)], "X",
        lambda X, Q: KNeighborsRegressor(n_neighbors=2, device="cpu").fit(X, np.arange(len(X), dtype=float)).predict(Q)),
    "LocalOutlierFactor": (
        lambda X: [LocalOutlierFactor(n_neighbors=2, duplicates="sklearn", device="cpu").fit(X).negative_outlier_factor_],
        "X", lambda X, Q: LocalOutlierFactor(n_neighbors=2, novelty=True, device="cpu").fit(X).score_samples(Q)),
    "top_n_outliers": (lambda X: [top_n_outliers(X, 2, k=2, device="cpu").weights], "X", None),
    "StreamingLOF": (_stream(StreamingLOF), "X", None),
    "SlidingWindowLOF": (_stream(SlidingWindowLOF, history_size=4), "X", None),
    "CategoricalNB": (
        lambda X: [CategoricalNB(device="cpu").fit(_nb_codes(X), np.arange(len(X)) % 2).predict_proba(_nb_codes(X))],
        "X", lambda X, Q: CategoricalNB(device="cpu").fit(_nb_codes(X), np.arange(len(X)) % 2).predict_proba(_nb_codes(Q))),
}

# known wrong messages, each xfail(strict) with its minimal example until fixed
_MESSAGE_XFAIL: dict[str, str] = {}


def _case_params(names):
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=_MESSAGE_XFAIL[n])) if n in _MESSAGE_XFAIL
            else n for n in names]


def _ready(X):
    return np.asarray(X, dtype=np.float64)


@pytest.mark.parametrize("name", _case_params([n for n in CASES if n != "CategoricalNB"]))
@_ci(8)
@given(small_tables(4, 12), st.sampled_from([np.nan, np.inf, -np.inf]), st.data())
def test_non_finite_input_is_refused_naming_the_array(name, X, bad, data):
    run, param, score = CASES[name]
    X = _ready(X)
    X[data.draw(st.integers(0, X.shape[0] - 1)), data.draw(st.integers(0, X.shape[1] - 1))] = bad
    with pytest.raises(ValueError, match=rf"^{param}\b.*(NaN|infinity)"):
        run(X)
    if score is not None:  # non-finite queries, named as the query parameter
        good = np.zeros((5, X.shape[1]))
        qname = "X_query" if name == "radius_neighbors" else "X"
        with pytest.raises(ValueError, match=rf"^{qname}\b.*(NaN|infinity)"):
            score(good + np.arange(5)[:, None], X)


@pytest.mark.parametrize("cls", [StreamingLOF, SlidingWindowLOF])
def test_non_finite_stream_points_are_refused(cls):
    det = cls(n_neighbors=2, window_size=4, device="cpu")
    det.learn_many(np.arange(12.0).reshape(6, 2))
    for bad in (np.nan, np.inf):
        with pytest.raises(ValueError, match=r"^X\b.*(NaN|infinity)"):
            det.score_many(np.array([[0.0, bad]]))
        with pytest.raises(ValueError, match=r"^x\b.*(NaN|infinity)"):
            det.score_one(np.array([bad, 0.0]))
        with pytest.raises(ValueError, match=r"^x\b.*(NaN|infinity)"):
            det.learn_one(np.array([bad, 0.0]))


@pytest.mark.parametrize("name", list(CASES))
def test_empty_input_is_refused(name):
    run = CASES[name][0]
    if name in ("StreamingLOF", "SlidingWindowLOF"):
        # a stream takes an empty batch as nothing to learn, and scores it as no rows
        assert run(np.empty((0, 2)))[0].shape == (0,)
        return
    with pytest.raises(ValueError, match="empty|0 sample"):
        run(np.empty((0, 2)))


@pytest.mark.parametrize("name", list(CASES))
@_ci(5)
@given(small_tables(4, 12), st.integers(1, 3))
def test_wrong_feature_count_is_refused(name, X, extra):
    run, _, score = CASES[name]
    wrong = np.zeros((3, X.shape[1] + extra))
    if score is not None:
        with pytest.raises(ValueError, match="features"):
            score(X, wrong)
    elif name in ("StreamingLOF", "SlidingWindowLOF"):
        det = (StreamingLOF if name == "StreamingLOF" else SlidingWindowLOF)(n_neighbors=2, window_size=4, device="cpu")
        det.learn_many(X)
        for call in (det.score_many, det.learn_many):
            with pytest.raises(ValueError, match="features"):
                call(wrong)
        with pytest.raises(ValueError, match="features"):
            det.score_one(wrong[0])
    else:
        pytest.skip("no second input")


def _layouts(X):
    """The same values as a non-contiguous view, a Fortran array, a read-only array, a DataFrame, a list."""
    pd = pytest.importorskip("pandas")
    wide = np.repeat(X, 2, axis=1)[:, ::2]
    assert not wide.flags.c_contiguous
    fortran = np.asfortranarray(X)
    readonly = X.copy()
    readonly.setflags(write=False)
    strided = np.repeat(X, 2, axis=0)[::2]
    return {"noncontiguous": wide, "fortran": fortran, "readonly": readonly, "row_strided": strided,
            "dataframe": pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])]), "list": X.tolist()}


@pytest.mark.parametrize("name", list(CASES))
@_ci(6)
@given(small_tables(5, 14))
def test_layouts_dtypes_and_dataframes_give_the_same_answer(name, X):
    run = CASES[name][0]
    X64 = np.ascontiguousarray(X, dtype=np.float64)
    want = run(np.ascontiguousarray(X))
    for label, variant in _layouts(np.ascontiguousarray(X)).items():
        if label == "list" and X.dtype == np.float32:
            continue  # a list of Python floats is float64 data
        got = run(variant)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w), err_msg=label)
    # integers are computed as float64 (as scikit-learn); float32 within float32 rounding of float64
    if X.dtype == np.int64:
        for g, w in zip(run(X64), want):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    got64 = run(X64)
    for g in got64:
        assert np.isfinite(np.asarray(g, dtype=np.float64)).all() or name == "LocalOutlierFactor"


@pytest.mark.parametrize("name", ["KNeighborsRegressor", "LocalOutlierFactor", "CategoricalNB"])
def test_read_only_input_is_not_written_to(name):
    X = np.arange(24.0).reshape(8, 3) % 5
    X.setflags(write=False)
    before = X.copy()
    CASES[name][0](X)
    assert np.array_equal(X, before)


@pytest.mark.slow
def test_thorough_profile_runs_ten_thousand_cases_per_property():
    from helpers import run_thorough_profile

    run_thorough_profile(__file__)
