"""What scikit-learn users reach for next: precomputed distances, metric_params and p < 1, sparse input, multi-output y.

Each is compared with scikit-learn itself. Where distances tie, scikit-learn's
order among the tied points is whatever its partial sort left (not the lower
index), so those cases are checked against a float64 oracle that orders ties by
index, and against scikit-learn's distances.
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn.neighbors as skn
import torch
from sklearn.metrics import pairwise_distances
from sklearn.utils.estimator_checks import parametrize_with_checks

from gpumine.neighbors import (KNeighborsClassifier, KNeighborsRegressor, KNeighborsTransformer, NearestNeighbors,
                               RadiusNeighborsClassifier, RadiusNeighborsRegressor)
from gpumine.neighbors import _estimators, _sparse
from gpumine.outliers import LocalOutlierFactor

RNG = np.random.default_rng(23)


def _oracle(D, k, exclude_self=False):
    """k smallest of each row of D, ties by the lower column (the point itself left out when asked)."""
    D = np.array(D, dtype=np.float64)
    if exclude_self:
        np.fill_diagonal(D, np.inf)
    cols = np.arange(D.shape[1])
    index = np.array([np.lexsort((cols, row))[:k] for row in D])
    return np.take_along_axis(D, index, 1), index


def _sets(rows):
    return [sorted(r.tolist()) for r in rows]


def _grid(n, d, high=3):
    """Integer points: many equal distances and exact duplicates."""
    return RNG.integers(0, high, (n, d)).astype(np.float64)


# -- metric="precomputed" ----------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_precomputed_distances_give_scikit_learns_neighbours(dtype):
    X, Q = RNG.random((120, 4)), RNG.random((30, 4))
    D, DQ = pairwise_distances(X).astype(dtype), pairwise_distances(Q, X).astype(dtype)
    ours = NearestNeighbors(n_neighbors=5, metric="precomputed", device="cpu").fit(D)
    ref = skn.NearestNeighbors(n_neighbors=5, metric="precomputed").fit(D)
    assert ours.effective_metric_ == "precomputed" and ours.n_features_in_ == 120
    for query in (DQ, None):
        d, i = ours.kneighbors(query)
        rd, ri = ref.kneighbors(query)
        assert np.array_equal(i, ri) and d.dtype == rd.dtype == dtype
        np.testing.assert_allclose(d, rd, rtol=0)
    got, want = ours.radius_neighbors(DQ, radius=0.4), ref.radius_neighbors(DQ, radius=0.4)
    assert _sets(got[1]) == _sets(want[1])
    a = ours.radius_neighbors_graph(None, radius=0.4, mode="distance")
    b = ref.radius_neighbors_graph(None, radius=0.4, mode="distance")
    assert (a != b).nnz == 0


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_precomputed_estimators_predict_as_scikit_learn(weights):
    X, Q = RNG.random((100, 3)), RNG.random((25, 3))
    D, DQ = pairwise_distances(X), pairwise_distances(Q, X)
    y = (X[:, 0] + X[:, 1] > 1).astype(int)
    for ours, ref in [
        (KNeighborsClassifier(4, weights=weights, metric="precomputed", device="cpu"),
         skn.KNeighborsClassifier(4, weights=weights, metric="precomputed")),
        (RadiusNeighborsClassifier(0.4, weights=weights, metric="precomputed", outlier_label="most_frequent", device="cpu"),
         skn.RadiusNeighborsClassifier(0.4, weights=weights, metric="precomputed", outlier_label="most_frequent")),
    ]:
        ours.fit(D, y)
        ref.fit(D, y)
        assert np.array_equal(ours.predict(DQ), ref.predict(DQ))
        np.testing.assert_allclose(ours.predict_proba(DQ), ref.predict_proba(DQ), rtol=1e-12)
    for ours, ref in [(KNeighborsRegressor(4, weights=weights, metric="precomputed", device="cpu"),
                       skn.KNeighborsRegressor(4, weights=weights, metric="precomputed")),
                      (RadiusNeighborsRegressor(0.4, weights=weights, metric="precomputed", device="cpu"),
                       skn.RadiusNeighborsRegressor(0.4, weights=weights, metric="precomputed"))]:
        np.testing.assert_allclose(ours.fit(D, X[:, 2]).predict(DQ), ref.fit(D, X[:, 2]).predict(DQ), rtol=1e-12)
    # the precomputed transformer gives scikit-learn's graph of the same matrix
    a = KNeighborsTransformer(n_neighbors=4, metric="precomputed", device="cpu").fit(D).transform(DQ)
    b = skn.KNeighborsTransformer(n_neighbors=4, metric="precomputed").fit(D).transform(DQ)
    assert a.nnz == b.nnz and abs(a - b).max() == 0


def test_precomputed_ties_go_to_the_lower_index_and_match_the_feature_search():
    X, Q = _grid(150, 3), _grid(40, 3)
    D, DQ = pairwise_distances(X, metric="manhattan"), pairwise_distances(Q, X, metric="manhattan")
    ours = NearestNeighbors(n_neighbors=6, metric="precomputed", device="cpu").fit(D)
    features = NearestNeighbors(n_neighbors=6, metric="manhattan", device="cpu").fit(X)
    ref = skn.NearestNeighbors(n_neighbors=6, metric="precomputed").fit(D)
    for query, exclude in ((DQ, False), (None, True)):
        d, i = ours.kneighbors(query)
        od, oi = _oracle(D if query is None else DQ, 6, exclude_self=exclude)
        assert np.array_equal(i, oi) and np.array_equal(d, od)
        fd, fi = features.kneighbors(None if query is None else Q)
        assert np.array_equal(i, fi) and np.array_equal(d, fd)  # the same rule as the engine, duplicates included
        np.testing.assert_array_equal(d, ref.kneighbors(query)[0])  # scikit-learn: same distances, ties in any order


def test_precomputed_training_queries_leave_out_only_the_point_itself():
    # fewer duplicates than k + 1: scikit-learn's rule and gpumine's agree
    X = np.array([[0.0], [0.0], [1.0], [3.0], [3.5]])
    D = pairwise_distances(X)
    d, i = NearestNeighbors(n_neighbors=2, metric="precomputed", device="cpu").fit(D).kneighbors()
    rd, ri = skn.NearestNeighbors(n_neighbors=2, metric="precomputed").fit(D).kneighbors()
    assert np.array_equal(i, ri) and np.array_equal(d, rd)
    # more: each point's nearest other points by index, as the feature search (scikit-learn drops a neighbour
    # instead of the point when the point is not among its k + 1 first: [1, 0, 1] here)
    ones = np.zeros((3, 3))
    i = NearestNeighbors(n_neighbors=1, metric="precomputed", device="cpu").fit(ones).kneighbors(return_distance=False)
    assert i.ravel().tolist() == [1, 0, 0]


def test_the_blocked_selection_is_exact_with_ties_exclusion_and_any_block_size():
    from gpumine.neighbors._precomputed import blocked_kneighbors, blocked_radius

    D = RNG.integers(0, 4, (37, 37)).astype(np.float64)  # heavy ties, zeros off the diagonal
    T = torch.from_numpy(D)
    for k in (1, 5, 36):
        for exclude in (False, True):
            if exclude or k < 37:
                want_d, want_i = _oracle(D, k, exclude_self=exclude)
                for budget in (1, 37 * 27 * 4, 1 << 30):  # one row per block, a few blocks, one block
                    d, i = blocked_kneighbors(37, 37, k, lambda a, b: T[a:b], exclude_self=exclude, budget_bytes=budget)
                    assert np.array_equal(i.numpy(), want_i) and np.array_equal(d.numpy(), want_d)
    indptr, index, dist = blocked_radius(37, 37, 1.0, lambda a, b: T[a:b], exclude_self=True, budget_bytes=37 * 18 * 3)
    for r in range(37):
        want = [c for c in np.lexsort((np.arange(37), D[r])) if D[r, c] <= 1.0 and c != r]
        assert index[indptr[r]:indptr[r + 1]].tolist() == want


def test_the_torch_minkowski_sums_equal_the_host_ones():
    from gpumine.neighbors._precomputed import MinkowskiForm

    Q, R = torch.from_numpy(RNG.random((9, 6))), torch.from_numpy(RNG.random((15, 6)))
    for p, w in ((0.5, None), (3.0, RNG.random(6))):
        form = MinkowskiForm(p, w)
        torch.testing.assert_close(form._rdist_torch(Q, R), form.rdist(Q, R), rtol=1e-14, atol=0)


@pytest.mark.parametrize("fmt", ["csr", "lil", "coo"])
def test_a_precomputed_sparse_graph_searches_only_its_stored_entries(fmt):
    X, Q = RNG.random((80, 3)), RNG.random((20, 3))
    graph_of = skn.NearestNeighbors(n_neighbors=7).fit(X)
    G = graph_of.kneighbors_graph(X, mode="distance").asformat(fmt)  # each row: itself (explicit 0) and 6 others
    GQ = graph_of.kneighbors_graph(Q, mode="distance").asformat(fmt)
    ours = NearestNeighbors(n_neighbors=4, metric="precomputed", device="cpu").fit(G)
    ref = skn.NearestNeighbors(n_neighbors=4, metric="precomputed").fit(G)
    for query in (GQ, None):
        d, i = ours.kneighbors(query)
        rd, ri = ref.kneighbors(query)
        assert np.array_equal(i, ri)
        np.testing.assert_allclose(d, rd, rtol=0)
    got, want = ours.radius_neighbors(GQ, radius=0.3), ref.radius_neighbors(GQ, radius=0.3)
    assert _sets(got[1]) == _sets(want[1])
    y = (X[:, 0] > 0.5).astype(int)
    clf = KNeighborsClassifier(4, metric="precomputed", device="cpu").fit(G, y)
    np.testing.assert_array_equal(clf.predict(GQ), skn.KNeighborsClassifier(4, metric="precomputed").fit(G, y).predict(GQ))
    with pytest.raises(ValueError, match="8 neighbors per samples are required, but some samples have only 7"):
        ours.kneighbors(GQ, n_neighbors=8)


def test_precomputed_input_errors_are_scikit_learns():
    D = pairwise_distances(RNG.random((6, 2)))
    nn = NearestNeighbors(n_neighbors=2, metric="precomputed", device="cpu")
    with pytest.raises(ValueError, match="Precomputed matrix must be square. Input is a 6x5 matrix."):
        nn.fit(D[:, :5])
    with pytest.raises(ValueError, match="Negative values in data passed to X"):
        nn.fit(-D)
    with pytest.raises(ValueError, match="NaN or infinity"):
        nn.fit(np.where(D > 0.5, np.nan, D))
    nn.fit(D)
    with pytest.raises(ValueError, match=r"Precomputed metric requires shape \(n_queries, n_indexed\). Got \(2, 5\) for 6 indexed."):
        nn.kneighbors(D[:2, :5])
    with pytest.raises(ValueError, match="Negative values in data passed to X"):
        nn.kneighbors(-D[:2])
    with pytest.raises(ValueError, match="Negative values in data passed to precomputed distance matrix"):
        nn.kneighbors(sp.csr_matrix(-D[:2]))
    with pytest.raises(TypeError, match="'dok' format is not supported due to its handling of explicit zeros"):
        nn.kneighbors(sp.dok_matrix(D[:2]))


# -- metric_params and minkowski with p < 1 ----------------------------------------------------
@pytest.mark.parametrize("p, weighted", [(0.5, False), (0.3, True), (1.0, True), (3.0, True)])
def test_minkowski_p_below_one_and_weights_give_scikit_learns_bits(p, weighted):
    X, Q = RNG.random((90, 5)), RNG.random((20, 5))
    params = {"w": RNG.random(5) + 0.1} if weighted else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # scikit-learn's and gpumine's p < 1 warning
        ours = NearestNeighbors(n_neighbors=5, p=p, metric_params=params, device="cpu").fit(X)
        ref = skn.NearestNeighbors(n_neighbors=5, p=p, metric_params=params, algorithm="brute").fit(X)
    assert ours.effective_metric_ == ref.effective_metric_ == "minkowski"
    for query in (Q, None):
        d, i = ours.kneighbors(query)
        rd, ri = ref.kneighbors(query)
        assert np.array_equal(i, ri)
        np.testing.assert_allclose(d, rd, rtol=1e-14)  # the same float64 sums; pow may differ in the last bit
    r = float(np.median(ref.kneighbors(Q)[0][:, -1]))
    assert _sets(ours.radius_neighbors(Q, radius=r)[1]) == _sets(ref.radius_neighbors(Q, radius=r)[1])
    d32, i32 = NearestNeighbors(n_neighbors=5, p=p, metric_params=params, device="cpu").fit(
        X.astype(np.float32)).kneighbors(Q.astype(np.float32))
    rd32, ri32 = ref.fit(X.astype(np.float32)).kneighbors(Q.astype(np.float32))
    assert d32.dtype == np.float32 and np.array_equal(i32, ri32)
    np.testing.assert_allclose(d32, rd32, rtol=1e-6)


def test_minkowski_p_below_one_breaks_ties_by_index_on_a_grid():
    X, Q = _grid(120, 3), _grid(30, 3)
    diff = np.abs(Q[:, None, :] - X[None, :, :])
    D = (diff ** 0.5).sum(-1) ** 2.0  # distinct sums stay distinct; equal multisets of terms tie exactly
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ours = KNeighborsRegressor(6, p=0.5, device="cpu").fit(X, X[:, 0])
        ref = skn.KNeighborsRegressor(6, p=0.5, algorithm="brute").fit(X, X[:, 0])
    d, i = ours.kneighbors(Q)
    od, oi = _oracle(D, 6)
    assert np.array_equal(i, oi)
    np.testing.assert_allclose(d, od, rtol=1e-14)
    np.testing.assert_allclose(d, ref.kneighbors(Q)[0], rtol=1e-14)


def test_metric_params_and_p_follow_scikit_learns_rules():
    X = RNG.random((20, 3))
    with pytest.warns(SyntaxWarning, match="Parameter p is found in metric_params"):
        nn = NearestNeighbors(n_neighbors=3, metric_params={"p": 3}, device="cpu").fit(X)
    assert nn.effective_metric_ == "minkowski" and nn.effective_metric_params_ == {"p": 3, "w": None}
    ref = skn.NearestNeighbors(n_neighbors=3, p=3, algorithm="brute").fit(X)
    np.testing.assert_array_equal(nn.kneighbors(X[:4])[1], ref.kneighbors(X[:4])[1])
    with pytest.warns(UserWarning, match="for 0 < p < 1, Minkowski metrics are not distance metrics"):
        KNeighborsClassifier(p=0.1, device="cpu").fit(X, np.arange(20) % 2)
    for algorithm in ("kd_tree", "ball_tree"):
        with pytest.raises(ValueError, match=f'algorithm="{algorithm}" does not support 0 < p < 1'):
            NearestNeighbors(p=0.5, algorithm=algorithm, device="cpu").fit(X)
    with pytest.raises(ValueError, match="algorithm='kd_tree' is not valid for metric='minkowski' with a weight"):
        NearestNeighbors(algorithm="kd_tree", metric_params={"w": np.ones(3)}, device="cpu").fit(X)
    for p in (0, -1, "a"):
        with pytest.raises(ValueError, match=r"The 'p' parameter of NearestNeighbors must be a float in the range \(0.0, inf\]"):
            NearestNeighbors(p=p, device="cpu").fit(X)
    with pytest.raises(ValueError, match=r"the size of w must match the number of features \(3\). Currently len\(w\)=2"):
        NearestNeighbors(metric_params={"w": [1.0, 2.0]}, device="cpu").fit(X)
    with pytest.raises(ValueError, match="w cannot contain negative weights"):
        NearestNeighbors(metric_params={"w": [1.0, -2.0, 1.0]}, device="cpu").fit(X)
    with pytest.raises(ValueError, match=r"metric_params \['V'\] are not supported with metric='euclidean'.*X / np.sqrt\(V\)"):
        NearestNeighbors(metric="euclidean", metric_params={"V": np.ones(3)}, device="cpu").fit(X)
    with pytest.raises(ValueError, match="LocalOutlierFactor supports metric='minkowski' with p >= 1"):
        LocalOutlierFactor(p=0.5, device="cpu").fit(X)
    # scikit-learn's semantics for the documented equivalences
    w = RNG.random(3) + 0.5
    weighted = NearestNeighbors(n_neighbors=4, p=2, metric_params={"w": w}, device="cpu").fit(X).kneighbors(X[:5])
    scaled = NearestNeighbors(n_neighbors=4, device="cpu").fit(X * np.sqrt(w)).kneighbors(X[:5] * np.sqrt(w))
    assert np.array_equal(weighted[1], scaled[1])
    np.testing.assert_allclose(weighted[0], scaled[0], rtol=1e-12)


# -- sparse input ------------------------------------------------------------------------------------
def _sparse_data(n, d, density=0.3):
    X = RNG.random((n, d))
    X[RNG.random((n, d)) > density] = 0.0
    return X


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("metric, p", [("minkowski", 2), ("manhattan", 2), ("cosine", 2), ("chebyshev", 2), ("minkowski", 0.5)])
def test_sparse_input_gives_the_dense_results(fmt, metric, p, monkeypatch):
    X, Q = _sparse_data(70, 12), _sparse_data(33, 12)
    X[5] = X[9]  # a duplicate
    # blocks of 5 query rows: the sparse queries are densified in several blocks
    blocks = _estimators.iter_dense_blocks
    monkeypatch.setattr(_estimators, "iter_dense_blocks", lambda X, budget: blocks(X, 12 * 8 * 5))
    params = dict(n_neighbors=4, metric=metric, p=p, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        dense = NearestNeighbors(**params).fit(X)
        sparse = NearestNeighbors(**params).fit(sp.csr_matrix(X).asformat(fmt))
    Qs = sp.csr_matrix(Q).asformat(fmt)
    for a, b in ((sparse.kneighbors(Qs), dense.kneighbors(Q)), (sparse.kneighbors(), dense.kneighbors())):
        assert np.array_equal(a[1], b[1]) and np.array_equal(a[0], b[0])
    r = float(np.median(dense.kneighbors(Q)[0][:, -1]))
    got, want = sparse.radius_neighbors(Qs, radius=r), dense.radius_neighbors(Q, radius=r)
    assert all(np.array_equal(u, v) for u, v in zip(got[1], want[1]))
    assert all(np.array_equal(u, v) for u, v in zip(got[0], want[0]))


def test_sparse_estimators_equal_scikit_learn():
    X, Q = _sparse_data(90, 8, density=0.7), _sparse_data(30, 8, density=0.7)  # no distance ties
    y = (X.sum(1) > np.median(X.sum(1))).astype(int)
    Xs, Qs = sp.csr_matrix(X), sp.csr_matrix(Q)
    for ours, ref in [(KNeighborsClassifier(5, weights="distance", device="cpu"), skn.KNeighborsClassifier(5, weights="distance")),
                      (RadiusNeighborsClassifier(0.6, outlier_label="most_frequent", device="cpu"),
                       skn.RadiusNeighborsClassifier(0.6, outlier_label="most_frequent"))]:
        ours.fit(Xs, y)
        ref.fit(Xs, y)
        np.testing.assert_array_equal(ours.predict(Qs), ref.predict(Qs))
        np.testing.assert_allclose(ours.predict_proba(Qs), ref.predict_proba(Qs), rtol=1e-12)
    np.testing.assert_allclose(KNeighborsRegressor(5, device="cpu").fit(Xs, X[:, 0]).predict(Qs),
                               skn.KNeighborsRegressor(5).fit(Xs, X[:, 0]).predict(Qs), rtol=1e-12)
    a = KNeighborsTransformer(n_neighbors=5, device="cpu").fit_transform(Xs)
    b = skn.KNeighborsTransformer(n_neighbors=5).fit_transform(Xs)
    assert a.nnz == b.nnz and abs(a - b).max() < 1e-12
    assert NearestNeighbors(n_neighbors=2, device="cpu").fit(Xs.astype(np.float32)).kneighbors(Qs)[0].dtype == np.float32


def test_sparse_input_errors_say_what_to_do(monkeypatch):
    X = sp.random(50, 40, density=0.1, format="csr", random_state=0)
    monkeypatch.setattr(_sparse, "_free_host_bytes", lambda: 1000)
    with pytest.raises(MemoryError, match=r"densifying it needs .* GiB while .* GiB of host memory is free; reduce the features"):
        NearestNeighbors(device="cpu").fit(X)
    monkeypatch.undo()
    nn = NearestNeighbors(n_neighbors=2, device="cpu").fit(X)
    with pytest.raises(ValueError, match="X has 3 features, but NearestNeighbors is expecting 40"):
        nn.kneighbors(sp.csr_matrix(np.ones((2, 3))))
    with pytest.raises(ValueError, match="NaN or infinity"):
        nn.kneighbors(sp.csr_matrix(np.full((2, 40), np.nan)))


# -- multi-output y -------------------------------------------------------------------------------------
@pytest.mark.parametrize("weights", ["uniform", "distance", lambda d: 1.0 / (1.0 + d)])
def test_multi_output_classification_equals_scikit_learn(weights):
    X, Q = RNG.random((80, 4)), RNG.random((25, 4))
    y = np.c_[RNG.integers(0, 3, 80), RNG.integers(5, 7, 80), RNG.choice([-1, 4, 9, 2], 80)]
    ours = KNeighborsClassifier(5, weights=weights, device="cpu").fit(X, y)
    ref = skn.KNeighborsClassifier(5, weights=weights).fit(X, y)
    assert isinstance(ours.classes_, list) and all(np.array_equal(a, b) for a, b in zip(ours.classes_, ref.classes_))
    pred = ours.predict(Q)
    assert pred.shape == (25, 3) and np.array_equal(pred, ref.predict(Q))
    proba, ref_proba = ours.predict_proba(Q), ref.predict_proba(Q)
    assert isinstance(proba, list) and len(proba) == 3
    for a, b in zip(proba, ref_proba):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    single = [KNeighborsClassifier(5, weights=weights, device="cpu").fit(X, y[:, o]) for o in range(3)]
    assert np.array_equal(pred, np.column_stack([m.predict(Q) for m in single]))


def test_multi_output_vote_ties_and_string_labels():
    X = np.array([[-1.0], [1.0], [3.0]])
    y = np.array([["b", "x"], ["a", "y"], ["c", "z"]])
    clf = KNeighborsClassifier(2, device="cpu").fit(X, y)
    assert clf.predict([[0.0]]).tolist() == [["a", "x"]]  # each output's tie goes to its smallest label
    ref = skn.KNeighborsClassifier(2).fit(X, y)
    assert np.array_equal(clf.predict([[0.0], [2.0]]), ref.predict([[0.0], [2.0]]))
    with pytest.warns(Warning, match="column-vector y"):
        one = KNeighborsClassifier(2, device="cpu").fit(X, y[:, :1])
    assert not one.outputs_2d_ and one.predict([[0.0]]).shape == (1,)


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_multi_output_regression_equals_scikit_learn(weights):
    X, Q = RNG.random((80, 4)), RNG.random((25, 4))
    y = RNG.random((80, 3))
    np.testing.assert_allclose(KNeighborsRegressor(5, weights=weights, device="cpu").fit(X, y).predict(Q),
                               skn.KNeighborsRegressor(5, weights=weights).fit(X, y).predict(Q), rtol=1e-12)
    np.testing.assert_allclose(RadiusNeighborsRegressor(0.5, weights=weights, device="cpu").fit(X, y).predict(Q),
                               skn.RadiusNeighborsRegressor(0.5, weights=weights).fit(X, y).predict(Q), rtol=1e-12)


def test_multi_output_radius_classification_equals_scikit_learn():
    X, Q = RNG.random((80, 2)), np.r_[RNG.random((20, 2)), [[5.0, 5.0]]]
    y = np.c_[RNG.integers(0, 3, 80), RNG.integers(5, 7, 80)]
    for label in ("most_frequent", [1, 6], 7):
        ours = RadiusNeighborsClassifier(0.2, outlier_label=label, device="cpu").fit(X, y)
        ref = skn.RadiusNeighborsClassifier(0.2, outlier_label=label).fit(X, y)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # 7 is not a class
            assert np.array_equal(ours.predict(Q), ref.predict(Q))
            for a, b in zip(ours.predict_proba(Q), ref.predict_proba(Q)):
                np.testing.assert_allclose(a, b, rtol=1e-12)
    with pytest.raises(ValueError, match="The length of outlier_label"):
        RadiusNeighborsClassifier(0.2, outlier_label=[1, 2, 3], device="cpu").fit(X, y)


# -- smaller scikit-learn habits -------------------------------------------------------------------------
def test_fitting_on_a_fitted_estimator_or_tree_uses_its_training_rows():
    X, Q = RNG.random((40, 3)), RNG.random((5, 3))
    want = NearestNeighbors(n_neighbors=3, device="cpu").fit(X).kneighbors(Q)
    for source in (NearestNeighbors(device="cpu").fit(X), skn.NearestNeighbors().fit(X), skn.BallTree(X), skn.KDTree(X)):
        got = KNeighborsClassifier(3, device="cpu").fit(source, np.arange(40) % 3).kneighbors(Q)
        assert np.array_equal(got[1], want[1]) and np.array_equal(got[0], want[0])


def test_brute_force_searches_report_scikit_learns_fit_method_and_mode_errors():
    X = RNG.random((10, 2))
    with pytest.warns(UserWarning, match="0 < p < 1"):
        assert KNeighborsRegressor(p=0.1, device="cpu").fit(X, X[:, 0])._fit_method == "brute"
    assert NearestNeighbors(metric="precomputed", device="cpu").fit(pairwise_distances(X))._fit_method == "brute"
    nn = NearestNeighbors(device="cpu").fit(X)
    assert not hasattr(nn, "_fit_method")  # the engine chooses its own method per search
    for method in (nn.kneighbors_graph, nn.radius_neighbors_graph):
        with pytest.raises(ValueError, match='Unsupported mode, must be one of "connectivity", or "distance" but got "blah"'):
            method(X, mode="blah")


# -- scikit-learn's estimator checks on the new forms ------------------------------------------------
@parametrize_with_checks([NearestNeighbors(metric="precomputed", device="cpu"),
                          KNeighborsClassifier(metric="precomputed", device="cpu"),
                          KNeighborsRegressor(p=0.5, metric_params={"w": None}, device="cpu")])
def test_sklearn_estimator_checks_on_the_new_forms(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        check(estimator)
