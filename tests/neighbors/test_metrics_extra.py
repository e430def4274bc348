"""scikit-learn's other metrics (seuclidean, mahalanobis, haversine, ..., callables) on the exact brute force.

Every result is checked against a float64 oracle built from SciPy's or
scikit-learn's own distance functions, with ties ordered by the lower index
(gpumine's rule; scikit-learn's order among tied points is whatever its
partial sort leaves), and against scikit-learn's estimators where no ties
blur the comparison.
"""

import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn.neighbors as skn
import torch
from scipy.spatial.distance import cdist
from sklearn.exceptions import DataConversionWarning
from sklearn.metrics import DistanceMetric
from sklearn.metrics.pairwise import haversine_distances, nan_euclidean_distances

from gpumine.neighbors import (KNeighborsClassifier, KNeighborsRegressor, KNeighborsTransformer, NearestNeighbors,
                               RadiusNeighborsClassifier, RadiusNeighborsRegressor, kneighbors)
from gpumine.neighbors._metrics_extra import EXTRA_METRICS
from gpumine.outliers import LocalOutlierFactor

RNG = np.random.default_rng(2323)
N_FEATURES = 5
V = RNG.random(N_FEATURES) + 0.2
_A = RNG.random((N_FEATURES, N_FEATURES))
VI = _A @ _A.T + 0.5 * np.eye(N_FEATURES)
BOOLEAN = ("jaccard", "dice", "rogerstanimoto", "russellrao", "sokalsneath", "yule")


def _params(metric):
    return {"seuclidean": {"V": V}, "mahalanobis": {"VI": VI}}.get(metric)


def _data(metric, n, rng=RNG, d=N_FEATURES):
    """Data each metric is meant for: radians for haversine, booleans, small integers for hamming."""
    if metric == "haversine":
        return np.c_[rng.uniform(-1.5, 1.5, n), rng.uniform(-3, 3, n)]
    if metric in BOOLEAN:
        return rng.random((n, d)) > 0.5
    if metric == "hamming":
        return rng.integers(0, 3, (n, d)).astype(np.float64)
    if metric == "nan_euclidean":
        X = rng.random((n, d))
        X[rng.random((n, d)) < 0.2] = np.nan
        return X
    return rng.random((n, d)) + 0.1  # no zero rows: braycurtis and canberra denominators stay positive


def _oracle_distances(metric, Q, X):
    """float64 distances from SciPy's or scikit-learn's own functions (the definitions matched)."""
    if metric == "haversine":
        return haversine_distances(Q, X)
    if metric == "nan_euclidean":
        return _nan_euclidean(Q, X)
    return cdist(Q, X, metric=metric, **(_params(metric) or {}))


def _nan_euclidean(Q, X):
    """scikit-learn's nan_euclidean_distances by direct differences (it expands |x|^2 + |y|^2 - 2 x.y, which
    cancels: 1e-7 relative error on close pairs), so the exact float64 value."""
    diff = Q[:, None, :] - X[None, :, :]
    present = ~np.isnan(diff)
    total = np.where(present, diff, 0.0) ** 2
    count = present.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sqrt(total.sum(-1) * Q.shape[1] / np.where(count > 0, count, np.nan))


def _oracle(D, k, exclude_self=False):
    """k smallest per row, ties by the lower column, NaN last (the point itself left out when asked)."""
    D = np.array(D, dtype=np.float64)
    key = np.where(np.isnan(D), np.inf, D)
    tier = np.isnan(D).astype(int)
    if exclude_self:
        np.fill_diagonal(tier, 2)
    cols = np.arange(D.shape[1])
    index = np.array([np.lexsort((cols, key[i], tier[i]))[:k] for i in range(D.shape[0])])
    return np.take_along_axis(D, index, 1), index


class _quiet_conversion(warnings.catch_warnings):
    """scikit-learn's and gpumine's DataConversionWarning for boolean metrics on float data, silenced."""

    def __enter__(self):
        super().__enter__()
        warnings.simplefilter("ignore", DataConversionWarning)


# -- every metric against its float64 oracle -------------------------------------------------------------
@pytest.mark.parametrize("metric", EXTRA_METRICS)
def test_each_metric_gives_the_float64_oracles_neighbours_ties_by_index(metric):
    X, Q = _data(metric, 150), _data(metric, 30)
    k = 6
    with _quiet_conversion():
        nn = NearestNeighbors(n_neighbors=k, metric=metric, metric_params=_params(metric), device="cpu").fit(X)
        for query, exclude in ((Q, False), (None, True)):
            d, i = nn.kneighbors(query)
            od, oi = _oracle(_oracle_distances(metric, X if query is None else Q, X), k, exclude)
            assert d.dtype == np.float64 and i.dtype == np.int64
            np.testing.assert_array_equal(i, oi)
            np.testing.assert_allclose(d, od, rtol=1e-12, atol=1e-15)
        # every radius neighbour within the median k-th distance, ordered by (distance, index)
        D = _oracle_distances(metric, Q, X)
        r = float(np.nanmedian(np.sort(np.where(np.isnan(D), np.inf, D), 1)[:, k - 1]))
        dist, index = nn.radius_neighbors(Q, radius=r)
        for row in range(len(Q)):
            want = [c for c in np.lexsort((np.arange(len(X)), D[row])) if D[row, c] <= r]
            assert index[row].tolist() == want
            np.testing.assert_allclose(dist[row], D[row, want], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("metric", ["seuclidean", "mahalanobis", "haversine", "correlation", "canberra", "braycurtis",
                                    "nan_euclidean"])
def test_scikit_learns_brute_force_gives_the_same_neighbours(metric):
    X, Q = _data(metric, 200), _data(metric, 40)  # continuous values: no distance ties
    ours = NearestNeighbors(n_neighbors=5, metric=metric, metric_params=_params(metric), device="cpu").fit(X)
    ref = skn.NearestNeighbors(n_neighbors=5, metric=metric, metric_params=_params(metric), algorithm="brute").fit(X)
    assert ours.effective_metric_ == ref.effective_metric_ == metric
    for query in (Q, None):
        d, i = ours.kneighbors(query)
        rd, ri = ref.kneighbors(query)
        np.testing.assert_array_equal(i, ri)
        # scikit-learn's nan_euclidean expands |x|^2 + |y|^2 - 2 x.y (cancellation); the rest agree to rounding
        np.testing.assert_allclose(d, rd, rtol=1e-6 if metric == "nan_euclidean" else 1e-12)


@pytest.mark.parametrize("metric", ["seuclidean", "canberra", "jaccard", "hamming"])
def test_estimators_predict_as_scikit_learn(metric):
    X, Q = _data(metric, 160), _data(metric, 50)
    y = RNG.integers(0, 3, len(X))
    target = RNG.random(len(X))
    params = dict(metric=metric, metric_params=_params(metric))
    with _quiet_conversion():
        for weights in ("uniform", "distance"):
            clf = KNeighborsClassifier(5, weights=weights, device="cpu", **params).fit(X, y)
            d, i = clf.kneighbors(Q)
            # the neighbour lists decide: scikit-learn's prediction from gpumine's lists
            ref = skn.KNeighborsClassifier(5, weights=weights, algorithm="brute", **params).fit(X, y)
            ref_d, ref_i = ref.kneighbors(Q)
            np.testing.assert_allclose(np.sort(d, 1), np.sort(ref_d, 1), rtol=1e-12, atol=1e-15)
            if np.array_equal(i, ref_i):
                np.testing.assert_array_equal(clf.predict(Q), ref.predict(Q))
                np.testing.assert_allclose(clf.predict_proba(Q), ref.predict_proba(Q), rtol=1e-12)
            reg = KNeighborsRegressor(5, weights=weights, device="cpu", **params).fit(X, target)
            w = np.ones_like(d) if weights == "uniform" else 1.0 / np.where(d > 0, d, 1.0)
            if weights == "distance" and (d == 0).any():
                w = np.where((d == 0).any(1, keepdims=True), (d == 0).astype(float), w)
            np.testing.assert_allclose(reg.predict(Q), (target[i] * w).sum(1) / w.sum(1), rtol=1e-12)
        # between two neighbours' distances where they vary continuously: no point on the boundary, where
        # rounding would decide (hamming's and jaccard's fractions are computed alike, bit for bit)
        kth = np.unique(d[:, -1])
        radius = float(kth[len(kth) // 2] + kth[len(kth) // 2 + 1]) / 2 if len(kth) > 2 else float(kth[-1])
        rclf = RadiusNeighborsClassifier(radius, outlier_label=0, device="cpu", **params).fit(X, y)
        rref = skn.RadiusNeighborsClassifier(radius, outlier_label=0, algorithm="brute", **params).fit(X, y)
        np.testing.assert_allclose(rclf.predict_proba(Q), rref.predict_proba(Q), rtol=1e-12)
        rreg = RadiusNeighborsRegressor(radius, device="cpu", **params).fit(X, target)
        rrref = skn.RadiusNeighborsRegressor(radius, algorithm="brute", **params).fit(X, target)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # queries without neighbours: NaN, with a warning
            np.testing.assert_allclose(rreg.predict(Q), rrref.predict(Q), rtol=1e-12)
        graph = KNeighborsTransformer(n_neighbors=4, device="cpu", **params).fit(X).transform(Q)
        assert graph.shape == (len(Q), len(X)) and graph.nnz == 5 * len(Q)


def test_float32_data_gives_float32_distances_of_the_float64_ones():
    X, Q = _data("canberra", 120).astype(np.float32), _data("canberra", 20).astype(np.float32)
    d, i = NearestNeighbors(n_neighbors=4, metric="canberra", device="cpu").fit(X).kneighbors(Q)
    od, oi = _oracle(cdist(Q.astype(np.float64), X.astype(np.float64), "canberra"), 4)
    assert d.dtype == np.float32
    np.testing.assert_array_equal(i, oi)
    np.testing.assert_array_equal(d, od.astype(np.float32))


def test_tensors_in_tensors_out_and_every_block_size_gives_the_same_answer():
    X, Q = _data("seuclidean", 90), _data("seuclidean", 25)
    want = NearestNeighbors(n_neighbors=7, metric="seuclidean", metric_params={"V": V}, device="cpu").fit(X).kneighbors(Q)
    for working_memory in (1e-4, 0.01, None):  # one query row a block, a few blocks, one block
        nn = NearestNeighbors(n_neighbors=7, metric="seuclidean", metric_params={"V": V}, device="cpu",
                              working_memory=working_memory).fit(torch.from_numpy(X))
        d, i = nn.kneighbors(torch.from_numpy(Q))
        assert isinstance(d, torch.Tensor) and d.dtype == torch.float64 and i.dtype == torch.int64
        np.testing.assert_array_equal(i.numpy(), want[1])
        np.testing.assert_array_equal(d.numpy(), want[0])
    M = np.c_[X, X[:, :1]]  # mahalanobis in blocks of references too
    VI6 = np.eye(6) + 0.1
    full = NearestNeighbors(n_neighbors=5, metric="mahalanobis", metric_params={"VI": VI6}, device="cpu").fit(M)
    small = NearestNeighbors(n_neighbors=5, metric="mahalanobis", metric_params={"VI": VI6}, device="cpu",
                             working_memory=1e-3).fit(M)
    for a, b in zip(full.kneighbors(), small.kneighbors()):
        np.testing.assert_array_equal(a, b)


def test_the_functional_kneighbors_takes_the_metrics_and_their_parameters():
    X, Q = _data("mahalanobis", 100), _data("mahalanobis", 10)
    d, i = kneighbors(X, Q, 4, metric="mahalanobis", metric_params={"V": np.linalg.inv(VI)}, device="cpu")
    od, oi = _oracle(cdist(Q, X, "mahalanobis", VI=VI), 4)
    np.testing.assert_array_equal(i, oi)
    np.testing.assert_allclose(d, od, rtol=1e-10)  # V inverted once: VI to rounding
    i = kneighbors(X, None, 3, metric="braycurtis", device="cpu", return_distance=False)
    np.testing.assert_array_equal(i, _oracle(cdist(X, X, "braycurtis"), 3, exclude_self=True)[1])
    with pytest.raises(ValueError, match=r"metric_params \['V'\] apply to the metrics .* metric='euclidean' takes p"):
        kneighbors(X, Q, 2, metric="euclidean", metric_params={"V": V}, device="cpu")
    with pytest.raises(ValueError, match="backend='triton' has no kernel for metric='canberra'"):
        kneighbors(X, Q, 2, metric="canberra", backend="triton", device="cpu")


def test_callables_and_distance_metric_objects():
    X, Q = _data("canberra", 40), _data("canberra", 8)
    calls = []

    def l1(a, b, scale=1.0):
        calls.append(1)
        assert a.shape == b.shape == (N_FEATURES,) and a.dtype == np.float64
        return scale * float(np.abs(a - b).sum())

    nn = NearestNeighbors(n_neighbors=3, metric=l1, metric_params={"scale": 2.0}, algorithm="ball_tree",
                          device="cpu").fit(X)
    d, i = nn.kneighbors(Q)
    od, oi = _oracle(2.0 * cdist(Q, X, "cityblock"), 3)
    np.testing.assert_array_equal(i, oi)
    np.testing.assert_allclose(d, od, rtol=1e-12)
    assert len(calls) == len(Q) * len(X) and nn.effective_metric_ is l1
    ref = skn.NearestNeighbors(n_neighbors=3, metric=l1, metric_params={"scale": 2.0}, algorithm="brute").fit(X)
    np.testing.assert_array_equal(ref.kneighbors(Q)[1], i)
    with pytest.raises(ValueError, match="kd_tree does not support callable metric"):
        NearestNeighbors(metric=l1, algorithm="kd_tree", device="cpu").fit(X)
    with pytest.raises(ValueError, match="must return one number per pair"):
        NearestNeighbors(n_neighbors=2, metric=lambda a, b: a - b, device="cpu").fit(X).kneighbors(Q)
    dm = DistanceMetric.get_metric("chebyshev")
    d, i = NearestNeighbors(n_neighbors=3, metric=dm, device="cpu").fit(X).kneighbors(Q)
    od, oi = _oracle(cdist(Q, X, "chebyshev"), 3)
    np.testing.assert_array_equal(i, oi)
    np.testing.assert_allclose(d, od, rtol=0)


def test_nan_euclidean_takes_missing_values_everywhere():
    X, Q = _data("nan_euclidean", 60), _data("nan_euclidean", 12)
    X[0] = np.nan  # no feature in common with anything: NaN distances, ranked last
    y = np.arange(60) % 3
    nn = NearestNeighbors(n_neighbors=60, metric="nan_euclidean", device="cpu").fit(X)
    d, i = nn.kneighbors(Q)
    od, oi = _oracle(_nan_euclidean(Q, X), 60)
    np.testing.assert_allclose(d, np.take_along_axis(nan_euclidean_distances(Q, X), i, 1), rtol=1e-6)
    np.testing.assert_array_equal(i, oi)
    assert np.isnan(d[i == 0]).all() and np.isnan(d[:, -1]).all()
    for row in d:  # numbers first, then the undefined distances
        assert not np.isnan(row[: np.argmax(np.isnan(row))]).any()
    np.testing.assert_allclose(d, od, rtol=1e-12)
    clf = KNeighborsClassifier(3, metric="nan_euclidean", device="cpu").fit(X, y)
    assert clf.__sklearn_tags__().input_tags.allow_nan
    np.testing.assert_array_equal(clf.predict(Q), skn.KNeighborsClassifier(3, metric="nan_euclidean").fit(X, y).predict(Q))
    with pytest.raises(ValueError, match="contains infinity"):
        nn.kneighbors(np.full((1, N_FEATURES), np.inf))
    with pytest.raises(ValueError, match="NaN or infinity"):
        NearestNeighbors(metric="canberra", device="cpu").fit(X)
    assert not NearestNeighbors(metric="canberra").__sklearn_tags__().input_tags.allow_nan


def test_undefined_distances_rank_last_by_index():
    X = np.array([[1.0, 1.0, 1.0], [0.0, 1.0, 2.0], [3.0, 3.0, 3.0], [2.0, 1.0, 0.0], [0.0, 2.0, 4.0]])
    d, i = NearestNeighbors(n_neighbors=4, metric="correlation", device="cpu").fit(X).kneighbors(X[1:2])
    # constant rows 0 and 2 have no correlation (NaN, as SciPy): after row 4 (distance 0) and row 3 (2)
    np.testing.assert_array_equal(i, [[1, 4, 3, 0]])
    assert np.isnan(d[0, -1]) and d[0, 1] == pytest.approx(0.0, abs=1e-15)


def test_sparse_input_gives_the_dense_results():
    X, Q = _data("canberra", 70), _data("canberra", 20)
    X[X < 0.5] = 0.0
    Q[Q < 0.5] = 0.0
    for metric in ("canberra", "jaccard", "hamming"):
        with _quiet_conversion():
            dense = NearestNeighbors(n_neighbors=4, metric=metric, device="cpu").fit(X)
            sparse = NearestNeighbors(n_neighbors=4, metric=metric, device="cpu").fit(sp.csr_matrix(X))
            for a, b in zip(sparse.kneighbors(sp.csr_matrix(Q)), dense.kneighbors(Q)):
                np.testing.assert_array_equal(a, b)


def test_metric_params_are_checked_and_named():
    X = _data("seuclidean", 20)
    cases = [
        ("seuclidean", None, r"metric='seuclidean' needs metric_params=\{'V': variances\}"),
        ("seuclidean", {"V": np.ones(3)}, r"metric_params\['V'\] of metric='seuclidean' must hold one variance per "
                                          r"feature, shape \(5,\); got shape \(3,\)"),
        ("seuclidean", {"V": np.r_[1.0, 0.0, 1, 1, 1]}, r"metric_params\['V'\] .* must hold positive variances"),
        ("seuclidean", {"V": np.ones(5), "VI": np.eye(5)}, r"metric_params \['VI'\] are not supported with "
                                                           r"metric='seuclidean': it takes only 'V'"),
        ("mahalanobis", None, r"metric='mahalanobis' needs metric_params=\{'VI'"),
        ("mahalanobis", {"VI": np.eye(4)}, r"metric_params\['VI'\] of metric='mahalanobis' must be a square matrix of "
                                           r"shape \(5, 5\)"),
        ("mahalanobis", {"VI": np.eye(5), "V": np.eye(5)}, "needs exactly one of metric_params\\['VI'\\]"),
        ("mahalanobis", {"V": np.zeros((5, 5))}, r"metric_params\['V'\] of metric='mahalanobis' is singular"),
        ("mahalanobis", {"VI": np.full((5, 5), np.nan)}, r"metric_params\['VI'\] .* contains NaN or infinity"),
        ("canberra", {"w": np.ones(5)}, r"metric_params \['w'\] are not supported with metric='canberra': it takes none"),
        ("haversine", None, "Haversine distance only valid in 2 dimensions"),
        ("cover_tree", None, "Unknown metric 'cover_tree'"),
    ]
    for metric, params, message in cases:
        with pytest.raises(ValueError, match=message):
            NearestNeighbors(metric=metric, metric_params=params, device="cpu").fit(X)
    with pytest.warns(UserWarning, match="is not positive semi-definite .* NaN distances"):
        NearestNeighbors(metric="mahalanobis", metric_params={"VI": -np.eye(5)}, device="cpu").fit(X)


def test_tree_algorithms_refuse_what_scikit_learns_trees_refuse():
    X = _data("canberra", 20)
    for metric, algorithm in (("canberra", "kd_tree"), ("correlation", "ball_tree"), ("yule", "ball_tree")):
        with pytest.raises(ValueError, match=f"Metric '{metric}' not valid. Use sorted\\(sklearn.neighbors.VALID_METRICS"):
            NearestNeighbors(metric=metric, algorithm=algorithm, device="cpu").fit(X)
        with pytest.raises(ValueError, match="not valid"):
            skn.NearestNeighbors(metric=metric, algorithm=algorithm).fit(X)
    nn = NearestNeighbors(metric="canberra", algorithm="ball_tree", device="cpu").fit(X)
    assert nn._fit_method == "brute"  # a brute force whatever the algorithm


def test_boolean_metrics_warn_as_scikit_learn_on_non_boolean_data():
    X = _data("canberra", 20)
    with pytest.warns(DataConversionWarning, match="Data was converted to boolean for metric jaccard"):
        NearestNeighbors(n_neighbors=2, metric="jaccard", device="cpu").fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataConversionWarning)
        NearestNeighbors(n_neighbors=2, metric="jaccard", device="cpu").fit(X > 0.5).kneighbors(X[:2] > 0.5)


def test_estimators_that_search_only_through_the_engine_refuse_the_metrics():
    class EngineOnly(NearestNeighbors):  # as the Dask estimators: the engine's metrics on feature rows only
        _extended_input = False

    with pytest.raises(ValueError, match="metric='canberra' is not supported by EngineOnly"):
        EngineOnly(metric="canberra", device="cpu").fit(_data("canberra", 10))


def test_fitted_estimators_pickle_with_their_metric():
    X = _data("mahalanobis", 30)
    nn = NearestNeighbors(n_neighbors=3, metric="mahalanobis", metric_params={"VI": VI}, device="cpu").fit(X)
    before = nn.kneighbors(X[:5])
    again = pickle.loads(pickle.dumps(nn))
    for a, b in zip(before, again.kneighbors(X[:5])):
        np.testing.assert_array_equal(a, b)


# -- LocalOutlierFactor through the same searches ---------------------------------------------------------
def test_lof_takes_precomputed_distances_sparse_rows_and_the_metrics():
    X, Q = RNG.random((90, 4)), RNG.random((15, 4))
    D, DQ = cdist(X, X), cdist(Q, X)
    Xs = np.where(X > 0.4, X, 0.0)
    for ours, ref, fit_X, query in [
        (LocalOutlierFactor(n_neighbors=8, metric="precomputed", novelty=True, device="cpu"),
         skn.LocalOutlierFactor(n_neighbors=8, metric="precomputed", novelty=True), D, DQ),
        (LocalOutlierFactor(n_neighbors=8, novelty=True, device="cpu"),
         skn.LocalOutlierFactor(n_neighbors=8, novelty=True), sp.csr_matrix(Xs), sp.csr_matrix(Q)),
        (LocalOutlierFactor(n_neighbors=8, metric="seuclidean", metric_params={"V": V[:4]}, novelty=True, device="cpu"),
         skn.LocalOutlierFactor(n_neighbors=8, metric="seuclidean", metric_params={"V": V[:4]}, novelty=True), X, Q),
    ]:
        ours.fit(fit_X)
        ref.fit(fit_X)
        # scikit-learn adds 1e-10 to each mean reach-distance (gpumine's duplicates='sklearn' rule)
        np.testing.assert_allclose(ours.negative_outlier_factor_, ref.negative_outlier_factor_, rtol=1e-8)
        np.testing.assert_allclose(ours.score_samples(query), ref.score_samples(query), rtol=1e-8)
        np.testing.assert_array_equal(ours.predict(query), ref.predict(query))
    # each row stores the point itself (an explicit 0): scikit-learn's rule and gpumine's then agree
    graph = skn.NearestNeighbors(n_neighbors=10).fit(X).kneighbors_graph(X, mode="distance")
    ours = LocalOutlierFactor(n_neighbors=5, metric="precomputed", device="cpu").fit(graph)
    ref = skn.LocalOutlierFactor(n_neighbors=5, metric="precomputed").fit(graph)
    np.testing.assert_allclose(ours.negative_outlier_factor_, ref.negative_outlier_factor_, rtol=1e-8)


def test_lof_duplicate_groups_under_a_brute_force_metric_match_the_precomputed_matrix():
    X = np.vstack([RNG.random((40, 3)) + 0.1, np.repeat([[0.5, 0.5, 0.5]], 8, 0)])
    with pytest.warns(UserWarning, match="exact duplicates"):
        by_metric = LocalOutlierFactor(n_neighbors=5, metric="canberra", device="cpu").fit(X)
    with pytest.warns(UserWarning, match="exact duplicates"):
        by_matrix = LocalOutlierFactor(n_neighbors=5, metric="precomputed", device="cpu").fit(cdist(X, X, "canberra"))
    assert by_metric.n_duplicate_points_ == by_matrix.n_duplicate_points_ == 8
    np.testing.assert_allclose(by_metric.negative_outlier_factor_, by_matrix.negative_outlier_factor_, rtol=1e-12)
    assert np.isfinite(by_metric.negative_outlier_factor_).all()
    np.testing.assert_allclose(by_metric.negative_outlier_factor_[-8:], -1.0)  # one dense location: LOF 1


def test_lof_still_refuses_minkowski_semi_metrics():
    with pytest.raises(ValueError, match="LocalOutlierFactor supports metric='minkowski' with p >= 1"):
        LocalOutlierFactor(p=0.5, device="cpu").fit(RNG.random((10, 2)))
