"""Radius queries, radius estimators and the kNN graph transformer against scikit-learn and a float64 brute force."""

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn.neighbors as skn
from sklearn.utils.estimator_checks import parametrize_with_checks

from gpumine.neighbors import (KNeighborsTransformer, NearestNeighbors, RadiusNeighborsClassifier,
                               RadiusNeighborsRegressor, kneighbors_graph, radius_neighbors, radius_neighbors_graph)
from gpumine.neighbors.engine import _host as _cpu_search
from knn_oracle import full_distances

RNG = np.random.default_rng(0)


def _as_sets(index_rows):
    return [sorted(row.tolist()) for row in index_rows]


@pytest.mark.parametrize("d", [2, 24])  # the KD-tree path and the tiled exact path
@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "chebyshev", "cosine"])
@pytest.mark.parametrize("kind", ["random", "integer"])
def test_radius_neighbors_are_every_point_within_the_radius_in_float64(d, metric, kind):
    X = RNG.random((200, d)) if kind == "random" else RNG.integers(0, 3, (200, d)).astype(np.float64)
    Q = X[:15] + (0.01 if kind == "random" else 0.0)
    D = full_distances(X, Q, metric)
    r = float(np.quantile(D, 0.05)) if kind == "random" else float(np.unique(D)[1])  # integer: ties at the radius
    dist, index = radius_neighbors(X, Q, radius=r, metric=metric, device="cpu")
    for i in range(len(Q)):
        want = np.flatnonzero(D[i] <= r)
        want = want[np.lexsort((want, D[i, want]))]
        np.testing.assert_array_equal(index[i], want)  # ordered by (distance, index)
        np.testing.assert_allclose(dist[i], D[i, want], rtol=1e-12, atol=1e-12)


def test_radius_neighbors_of_the_training_set_exclude_only_the_point_itself():
    X = np.array([[0.0], [0.0], [1.0], [5.0]])
    _, index = radius_neighbors(X, radius=1.0, device="cpu")
    assert _as_sets(index) == [[1, 2], [0, 2], [0, 1], []]
    ours = NearestNeighbors(radius=1.0, device="cpu").fit(X).radius_neighbors()
    theirs = skn.NearestNeighbors(radius=1.0).fit(X).radius_neighbors()
    assert _as_sets(ours[1]) == _as_sets(theirs[1])


def test_graph_functions_equal_scikit_learns():
    X = RNG.random((80, 3))
    for mode in ("connectivity", "distance"):
        for include_self in (False, True):
            a = kneighbors_graph(X, 4, mode=mode, include_self=include_self, device="cpu")
            b = skn.kneighbors_graph(X, 4, mode=mode, include_self=include_self)
            assert abs(a - b).max() < 1e-12 and (a != 0).nnz == (b != 0).nnz or mode == "distance"
            a = radius_neighbors_graph(X, 0.3, mode=mode, include_self=include_self, device="cpu")
            b = skn.radius_neighbors_graph(X, 0.3, mode=mode, include_self=include_self)
            assert sp.issparse(a) and abs(a - b).max() < 1e-12


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_radius_classifier_and_regressor_equal_scikit_learn(weights):
    X = RNG.random((150, 3))
    y = (X[:, 0] + X[:, 1] > 1).astype(int)
    Q = RNG.random((40, 3))
    clf = RadiusNeighborsClassifier(radius=0.35, weights=weights, outlier_label="most_frequent", device="cpu").fit(X, y)
    ref = skn.RadiusNeighborsClassifier(radius=0.35, weights=weights, outlier_label="most_frequent").fit(X, y)
    np.testing.assert_array_equal(clf.predict(Q), ref.predict(Q))
    np.testing.assert_allclose(clf.predict_proba(Q), ref.predict_proba(Q), rtol=1e-12)
    reg = RadiusNeighborsRegressor(radius=0.35, weights=weights, device="cpu").fit(X, X[:, 2])
    sk_reg = skn.RadiusNeighborsRegressor(radius=0.35, weights=weights).fit(X, X[:, 2])
    np.testing.assert_allclose(reg.predict(Q), sk_reg.predict(Q), rtol=1e-12)


def test_queries_without_neighbours_raise_or_get_the_outlier_label_or_nan():
    X = np.array([[0.0], [0.1], [5.0]])
    with pytest.raises(ValueError, match="No neighbors found for test samples \\[0\\]"):
        RadiusNeighborsClassifier(radius=0.5, device="cpu").fit(X, [0, 0, 1]).predict([[2.5]])
    assert RadiusNeighborsClassifier(radius=0.5, outlier_label=7, device="cpu").fit(X, [0, 0, 1]).predict([[2.5]]).tolist() == [7]
    with pytest.warns(UserWarning, match="predicting NaN"):
        assert np.isnan(RadiusNeighborsRegressor(radius=0.5, device="cpu").fit(X, [1.0, 2.0, 3.0]).predict([[2.5]])[0])


def test_the_transformer_gives_scikit_learns_graph():
    X = RNG.random((60, 4))
    for mode in ("distance", "connectivity"):
        a = KNeighborsTransformer(n_neighbors=5, mode=mode, device="cpu").fit_transform(X)
        b = skn.KNeighborsTransformer(n_neighbors=5, mode=mode).fit_transform(X)
        assert a.shape == b.shape and a.nnz == b.nnz and abs(a - b).max() < 1e-12


def test_the_transformer_feeds_a_precomputed_pipeline():
    from sklearn.manifold import Isomap
    from sklearn.pipeline import make_pipeline

    X = RNG.random((100, 3))
    ours = make_pipeline(KNeighborsTransformer(n_neighbors=8, device="cpu"), Isomap(n_neighbors=8, metric="precomputed"))
    theirs = make_pipeline(skn.KNeighborsTransformer(n_neighbors=8), Isomap(n_neighbors=8, metric="precomputed"))
    np.testing.assert_allclose(np.abs(ours.fit_transform(X)), np.abs(theirs.fit_transform(X)), rtol=1e-6, atol=1e-8)


@parametrize_with_checks([RadiusNeighborsClassifier(radius=1.0, outlier_label="most_frequent", device="cpu"),
                          RadiusNeighborsRegressor(device="cpu"),
                          KNeighborsTransformer(device="cpu"), NearestNeighbors(device="cpu")])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_the_knn_command_lists_and_classifies_within_a_radius(tmp_path, capsys):
    import pandas as pd

    from gpumine.cli import main

    X = RNG.random((120, 2))
    pd.DataFrame(X, columns=["a", "b"]).to_csv(tmp_path / "x.csv", index=False)
    assert main(["knn", str(tmp_path / "x.csv"), "--radius", "0.1", "--device", "cpu", "-o", str(tmp_path / "r.csv")]) == 0
    pairs = pd.read_csv(tmp_path / "r.csv")
    _, index = radius_neighbors(X, radius=0.1, device="cpu")
    assert list(pairs.columns) == ["query", "index", "distance"]
    assert len(pairs) == sum(len(row) for row in index)
    assert pairs.groupby("query")["index"].apply(list).to_dict() == {i: row.tolist() for i, row in enumerate(index) if len(row)}
    labelled = pd.DataFrame({"a": X[:, 0], "b": X[:, 1], "y": (X[:, 0] > 0.5).astype(int)})
    labelled.to_csv(tmp_path / "t.csv", index=False)
    assert main(["knn", str(tmp_path / "t.csv"), str(tmp_path / "t.csv"), "--label-column", "y", "--radius", "0.2",
                 "--device", "cpu", "-o", str(tmp_path / "p.csv")]) == 0
    assert "accuracy=" in capsys.readouterr().err


def test_an_infinite_radius_lists_every_point_as_scikit_learn():
    X = RNG.random((30, 3))
    ours = NearestNeighbors(radius=np.inf, device="cpu").fit(X)
    dist, index = ours.radius_neighbors(X[:4])
    assert all(sorted(row.tolist()) == list(range(30)) for row in index)
    assert all(np.all(np.diff(row) >= 0) for row in dist)
    assert _as_sets(ours.radius_neighbors()[1]) == _as_sets(skn.NearestNeighbors(radius=np.inf).fit(X).radius_neighbors()[1])
    with pytest.raises(ValueError, match="return_distance must be True if sort_results is True"):
        ours.radius_neighbors(X[:2], sort_results=True, return_distance=False)
    with pytest.raises(ValueError, match="radius must be a number >= 0"):
        NearestNeighbors(radius=float("nan"), device="cpu").fit(X)



@pytest.fixture
def prefilter_on_cpu(monkeypatch):
    """The GPU's prefilter path on the CPU, with the kernel's torch twin (same results bit for bit)."""
    import torch

    import gpumine.neighbors.engine as engine
    from gpumine.neighbors import _radius

    monkeypatch.setattr(_radius, "_prefilter_applies",
                        lambda ref, query, radius, metric, device: ref.dtype == torch.float32 and ref.shape[1] <= 16
                        and metric.name in _radius.PREFILTER_METRICS and np.isfinite(radius))
    calls = []
    monkeypatch.setattr(engine, "scores_within", lambda *args, **kw: calls.append(1) or engine.scores_within_torch(*args, **kw))
    monkeypatch.setattr(_radius, "_TREE_MAX_FEATURES", 0)  # the host's KD-tree path stands aside
    return _radius, calls


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "manhattan"])
@pytest.mark.parametrize("kind", ["grid", "random", "duplicates"])
@pytest.mark.parametrize("cap", [64, 2])
def test_prefiltered_radius_search_equals_the_float64_tiles(prefilter_on_cpu, monkeypatch, metric, kind, cap):
    import torch

    from gpumine.core.distance import get_metric

    _radius, calls = prefilter_on_cpu
    monkeypatch.setattr(_radius, "PREFILTER_CAP", cap)  # rows past the cap take the second, wider pass
    rng = np.random.default_rng(7)
    X = {"grid": lambda: rng.integers(0, 4, (300, 3)).astype(np.float32),
         "random": lambda: rng.standard_normal((300, 5)).astype(np.float32) * 1e3,
         "duplicates": lambda: np.repeat(rng.random((60, 4)).astype(np.float32), 5, axis=0)}[kind]()
    R = torch.from_numpy(X)
    Q = torch.from_numpy(X[:40] + np.float32(0.5))
    m = get_metric(metric)
    cpu = torch.device("cpu")
    # radii exactly at grid distances (ties at the radius) and in between
    for radius in (1.0, 2.0, float(np.sqrt(2.0)), 0.75 * float(np.abs(X).max())):
        for query, own in ((Q, False), (R, True)):
            got = _radius.radius_search(R, query, radius, m, exclude_self=own, device=cpu, budget_bytes=1 << 20)
            with monkeypatch.context() as plain:
                plain.setattr(_radius, "_prefilter_applies", lambda *args: False)
                want = _radius.radius_search(R, query, radius, m, exclude_self=own, device=cpu, budget_bytes=1 << 20)
            for a, b in zip(got, want):
                np.testing.assert_array_equal(a, b)
    assert calls  # the prefilter ran


def test_score_bound_rounds_up_and_covers_the_float64_radius():
    from gpumine.core.distance import get_metric
    from gpumine.neighbors._radius import _score_bound

    for radius in (0.1, 1.0, 3.0, 1e-20, 1e15):
        bound = _score_bound(radius, get_metric("euclidean"), 16)
        assert bound >= radius * radius and np.float32(bound) == bound
        assert _score_bound(radius, get_metric("manhattan"), 16) >= radius


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("metric", ["euclidean", "manhattan"])
def test_gpu_prefiltered_radius_search_equals_the_float64_tiles(monkeypatch, metric):
    import torch

    from gpumine.core.distance import get_metric
    from gpumine.neighbors import _radius

    rng = np.random.default_rng(8)
    X = np.concatenate([rng.integers(0, 6, (20_000, 8)), rng.standard_normal((5_000, 8)) * 3]).astype(np.float32)
    R = torch.from_numpy(X).cuda()
    cuda = torch.device("cuda")
    calls = []
    real = _radius._prefiltered
    monkeypatch.setattr(_radius, "_prefiltered", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(_radius, "PREFILTER_CAP", 16)  # crowded rows take the second pass
    for radius in (1.0, 2.0, 3.5):
        got = _radius.radius_search(R, R, radius, get_metric(metric), exclude_self=True, device=cuda, budget_bytes=1 << 28)
        with monkeypatch.context() as plain:
            plain.setattr(_radius, "_prefilter_applies", lambda *args: False)
            want = _radius.radius_search(R, R, radius, get_metric(metric), exclude_self=True, device=cuda, budget_bytes=1 << 28)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    assert len(calls) == 3
