"""The distributed SolvingSet and radius queries against one process: equal arrays, whatever the workers or chunks.

SolvingSet: the outliers, weights, threshold, solving set, iterations and every bound outside the
solving set equal one process's ``method="solving_set"`` (its tile form on the CPU); the solving-set
points flagged exact carry the brute-force weights, the others bounds below the threshold.
"""

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")

from gpumine import distributed as gd  # noqa: E402
from gpumine.distributed._knn import radius_neighbors as distributed_radius_neighbors  # noqa: E402
from gpumine.neighbors import KNeighborsClassifier, radius_neighbors  # noqa: E402
from gpumine.outliers import top_n_outliers  # noqa: E402

CPU = dict(device="cpu")


def _cluster(n_workers):
    return distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=False, dashboard_address=":0")


@pytest.fixture(scope="module")
def client():
    with _cluster(2) as cluster, distributed.Client(cluster, set_as_default=False) as c:
        yield c


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda n: f"{n}-workers")
def any_client(request):
    with _cluster(request.param) as cluster, distributed.Client(cluster, set_as_default=False) as c:
        yield c


def _data(kind, n=300, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "gaussian":
        X = rng.standard_normal((n, 3)).astype(np.float32)
        X[:4] *= 6  # a few clear outliers
        return X
    if kind == "integer grid":  # massive distance and weight ties
        return rng.integers(0, 5, (n, 3)).astype(np.float32)
    if kind == "duplicates":  # every row 4 times, outliers duplicated too
        base = rng.standard_normal((n // 4, 2))
        base[:3] *= 8
        return np.repeat(base, 4, axis=0).astype(np.float32)
    if kind == "float32 ties":  # float32 distances that tie and differ in float64
        j = np.arange(n, dtype=np.float32)
        return np.stack([1 + (j % 23) * np.float32(2**-23), 1 + (j // 23) * np.float32(2**-23)], 1)
    raise KeyError(kind)


def assert_same_outliers(many, one, brute):
    """``many`` (distributed) equals ``one`` (one process's solving set); exact scores are brute force's weights."""
    np.testing.assert_array_equal(many.indices, one.indices)
    np.testing.assert_array_equal(many.weights, one.weights)
    assert many.threshold == one.threshold
    np.testing.assert_array_equal(many.indices, brute.indices)
    if one.metric == "minkowski":  # one process's two methods differ in the last bit there (not ours to settle)
        np.testing.assert_allclose(many.weights, brute.weights, rtol=1e-14)
        return
    assert many.threshold == brute.threshold
    np.testing.assert_array_equal(many.weights, brute.weights)
    np.testing.assert_array_equal(many.solving_set, one.solving_set)
    assert many.iterations == one.iterations and many.n_candidates == one.n_candidates
    outside = np.ones(one.n_samples, dtype=bool)
    outside[one.solving_set] = False
    np.testing.assert_array_equal(many.scores[outside], one.scores[outside])
    assert not many.scores_exact[outside].any()
    exact = many.scores_exact
    np.testing.assert_array_equal(many.scores[exact], brute.scores[exact])
    bounds = many.scores[~exact]
    assert np.all(bounds >= brute.scores[~exact]) and np.all(bounds <= many.threshold)
    assert many.method == "solving_set" and many.stats["trace"][-1]["eligible"] == 0


def _compare(X, client, *, chunks=None, **kwargs):
    kwargs = {"n_outliers": 8, "k": 6, **kwargs}
    one = top_n_outliers(X, method="solving_set", **kwargs, **CPU)
    brute = top_n_outliers(X, method="brute_force", **{k: v for k, v in kwargs.items() if k != "random_state"}, **CPU)
    data = X if chunks is None else da.from_array(X, chunks=(chunks, -1))
    many = gd.top_n_outliers(data, client=client, **kwargs, **CPU)
    assert_same_outliers(many, one, brute)
    return many


# -- SolvingSet ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["gaussian", "integer grid", "duplicates", "float32 ties"])
def test_solving_set_equals_one_process_on_1_2_3_workers(any_client, kind):
    many = _compare(_data(kind), any_client, n_candidates=32)
    assert many.iterations > 1  # several rounds of candidates, bounds and pruning


@pytest.mark.parametrize("chunks", [(7, 140, 1, 152), 150])  # uneven, a single row, chunks smaller than k
def test_dask_chunks_are_the_shards_and_change_nothing(client, chunks):
    _compare(_data("integer grid"), client, chunks=chunks, n_candidates=64, k=9)


@pytest.mark.parametrize("kwargs", [
    dict(n_outliers=1, k=1),
    dict(n_outliers=200, k=3),  # every point an outlier: every point becomes a candidate
    dict(n_outliers=5, k=199),  # k = n - 1: every other point is a neighbour
    dict(n_outliers=6, k=4, include_self=True),
    dict(n_outliers=2, k=4, n_candidates=6),
    dict(n_outliers=6, k=4, random_state=7),
], ids=["n=1,k=1", "n=all", "k=n-1", "include_self", "one-candidate", "seed"])
def test_n_outliers_and_k_edge_cases(client, kwargs):
    X = _data("duplicates", n=200)
    kwargs.setdefault("n_candidates", 40)
    _compare(X, client, **kwargs)


def test_constant_data_two_points_and_all_ties_go_to_the_lowest_indices(client):
    many = _compare(np.ones((50, 2)), client, n_outliers=5, k=3, n_candidates=8)
    np.testing.assert_array_equal(many.indices, np.arange(5))
    assert not many.weights.any()
    _compare(np.array([[0.0], [3.0]]), client, n_outliers=2, k=1)


@pytest.mark.parametrize("metric, p", [("manhattan", None), ("chebyshev", None), ("cosine", None),
                                       ("minkowski", 3), ("sqeuclidean", None)])
def test_other_metrics(client, metric, p):
    _compare(_data("gaussian", n=240), client, metric=metric, p=p, n_candidates=32, chunks=(100, 30, 110))


def test_real_covertype_sample_equals_one_process(client):
    from gpumine.data import load_covtype_sample

    X = load_covtype_sample()[0][:2500]  # integer-valued features: exact float64 tiles, many ties
    many = _compare(X, client, n_outliers=10, k=5, n_candidates=256, chunks=800)
    assert many.distance_fraction < 0.8  # pruning works across the shards


def test_default_method_is_solving_set_and_brute_force_stays(client):
    X = _data("gaussian", n=200)
    default = gd.top_n_outliers(X, 5, 4, client=client, **CPU)
    assert default.method == "solving_set" and default.n_candidates == 200  # "auto": 256 for 3 features, at most n
    brute = gd.top_n_outliers(X, 5, 4, method="brute_force", mode="shard", client=client, **CPU)
    one = top_n_outliers(X, 5, 4, method="brute_force", **CPU)
    for got in (default, brute):
        np.testing.assert_array_equal(got.indices, one.indices)
        np.testing.assert_array_equal(got.weights, one.weights)
    np.testing.assert_array_equal(brute.scores, one.scores)


@pytest.mark.slow
def test_worker_processes_give_the_same_answer():
    X = _data("float32 ties", n=500)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            distributed.Client(cluster, set_as_default=False) as c:
        _compare(X, c, chunks=130, n_candidates=40)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(method="fast"), ValueError, "method must be one of"),
    (dict(n_candidates=0), ValueError, "n_candidates must be 'auto' or a positive integer"),
    (dict(k=0), ValueError, "k must be at least 1"),
    (dict(n_outliers=0), ValueError, "n_outliers must be between 1 and n_samples"),
    (dict(k=1, include_self=True), ValueError, "include_self=True makes every weight 0"),
    (dict(metric="inner_product"), ValueError, "cannot define an outlier weight"),
    (dict(include_self=1), TypeError, "include_self must be True or False"),
    (dict(backend="triton"), ValueError, "backend='triton'"),
])
def test_bad_arguments_name_the_parameter(client, kwargs, error, match):
    with pytest.raises(error, match=match):
        gd.top_n_outliers(_data("gaussian", n=20), client=client, **{"n_outliers": 3, "k": 2, **kwargs}, **CPU)


def test_bad_data_is_refused(client):
    with pytest.raises(ValueError, match="need at least 2 points"):
        gd.top_n_outliers(np.zeros((1, 2)), 1, 1, client=client, **CPU)
    X = _data("gaussian", n=40)
    X[31, 1] = np.nan
    for data in (X, da.from_array(X, chunks=(10, -1))):
        with pytest.raises(ValueError, match=r"X contains NaN or infinity \(1 non-finite value\(s\).*row 31\)"):
            gd.top_n_outliers(data, 3, 2, client=client, **CPU)


# -- the command line ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["solving_set", "brute_force"])
def test_outliers_command_on_a_cluster_writes_the_one_process_file(client, tmp_path, method, capsys):
    import pandas as pd

    from gpumine.cli import main

    X = _data("integer grid", n=200)
    pd.DataFrame(X, columns=["a", "b", "c"]).to_csv(tmp_path / "x.csv", index=False)
    common = ["outliers", str(tmp_path / "x.csv"), "--top", "6", "-k", "4", "--method", method, "--candidates", "32",
              "--device", "cpu"]
    assert main(common + ["-o", str(tmp_path / "one.csv"), "--solving-set", str(tmp_path / "s1.csv")]) == 0
    assert main(common + ["--scheduler", client.scheduler.address, "-o", str(tmp_path / "many.csv"),
                          "--solving-set", str(tmp_path / "s2.csv")]) == 0
    assert "dask (" in capsys.readouterr().err
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "many.csv"), pd.read_csv(tmp_path / "one.csv"))
    s1, s2 = pd.read_csv(tmp_path / "s1.csv"), pd.read_csv(tmp_path / "s2.csv")
    np.testing.assert_array_equal(s2["index"], s1["index"])


def test_outliers_command_on_n_local_workers(tmp_path, monkeypatch, capsys):
    import pandas as pd

    from gpumine.cli import main

    started = []
    real = gd.local_cluster

    def threads(n_workers=None, **kwargs):  # thread workers: no process start-up in the test
        started.append(n_workers)
        return real(n_workers, gpus=False, processes=False, dashboard_address=":0", **kwargs)

    monkeypatch.setattr(gd, "local_cluster", threads)
    X = _data("duplicates", n=160)
    np.save(tmp_path / "x.npy", X)
    assert main(["outliers", str(tmp_path / "x.npy"), "--top", "4", "-k", "3", "--device", "cpu", "--workers", "2",
                 "--quiet", "-o", str(tmp_path / "o.csv")]) == 0
    assert started == [2]
    got = pd.read_csv(tmp_path / "o.csv")
    one = top_n_outliers(X, 4, 3, **CPU)
    np.testing.assert_array_equal(got["index"], one.indices)
    np.testing.assert_array_equal(got["weight"], one.weights)
    with pytest.raises(SystemExit) as exit_:
        main(["outliers", str(tmp_path / "x.npy"), "--workers", "2", "--scheduler", "tcp://127.0.0.1:1"])
    assert exit_.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


# -- radius queries --------------------------------------------------------------------------------------------------


def _assert_same_lists(got, want):
    assert len(got[0]) == len(want[0])
    for g, w in zip(got[0], want[0]):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("metric, radius", [("euclidean", 1.0), ("manhattan", 2), ("cosine", 0.05),
                                            ("chebyshev", 1.0), ("minkowski", 1.5)])
@pytest.mark.parametrize("mode", ["shard", "replicate"])
def test_radius_neighbors_equal_one_process(client, metric, radius, mode):
    X = _data("integer grid", n=150)  # many references exactly at the radius
    Q = np.random.default_rng(1).uniform(0, 4, (30, 3))  # float64 queries: both sides in float64, as one process
    p = 3 if metric == "minkowski" else None
    for queries in (None, Q):
        want = radius_neighbors(X, queries, radius, metric=metric, p=p, **CPU)
        for ref in (X, da.from_array(X, chunks=((40, 1, 60, 49), -1))):
            got = distributed_radius_neighbors(ref, queries, radius, metric=metric, p=p, mode=mode, client=client,
                                               batch_rows=64, **CPU)
            _assert_same_lists(got, want)


def test_radius_estimators_equal_one_process(client):
    X = _data("duplicates", n=120)
    y = np.arange(120) % 3
    want = radius_neighbors(X, None, 0.5, **CPU)
    nn = gd.NearestNeighbors(radius=0.5, client=client, mode="shard", **CPU).fit(da.from_array(X, chunks=(50, -1)))
    _assert_same_lists(nn.radius_neighbors(), want)
    index = nn.radius_neighbors(X[:9], radius=0.3, return_distance=False)
    for got, expected in zip(index, radius_neighbors(X, X[:9], 0.3, return_distance=False, **CPU)):
        np.testing.assert_array_equal(got, expected)
    graph = nn.radius_neighbors_graph(X[:9], mode="distance")
    assert graph.shape == (9, 120) and graph.nnz == sum(len(r) for r in radius_neighbors(X, X[:9], 0.5, **CPU)[1])
    one = KNeighborsClassifier(3, **CPU).fit(X, y)
    many = gd.KNeighborsClassifier(3, client=client, mode="shard", **CPU).fit(da.from_array(X, chunks=(45, -1)), y)
    _assert_same_lists(many.radius_neighbors(radius=0.5), one.radius_neighbors(radius=0.5))
    queries = da.from_array(X[:20], chunks=(8, -1))
    _assert_same_lists(many.radius_neighbors(queries, radius=0.7), one.radius_neighbors(X[:20], radius=0.7))
    assert (many.radius_neighbors_graph(X[:20], radius=0.7) != one.radius_neighbors_graph(X[:20], radius=0.7)).nnz == 0


def test_radius_errors(client):
    X = _data("gaussian", n=20)
    with pytest.raises(ValueError, match="radius must be a number >= 0"):
        distributed_radius_neighbors(X, None, -1.0, client=client, **CPU)
    with pytest.raises(ValueError, match="radius queries support the metrics"):
        distributed_radius_neighbors(X, None, 1.0, metric="inner_product", client=client, **CPU)
    with pytest.raises(ValueError, match="X_query has 2 features but X_ref has 3"):
        distributed_radius_neighbors(X, X[:, :2], 1.0, client=client, **CPU)
    nn = gd.NearestNeighbors(client=client, **CPU).fit(X)
    with pytest.raises(ValueError, match="return_distance must be True if sort_results is True"):
        nn.radius_neighbors(return_distance=False, sort_results=True)
    clf = gd.KNeighborsClassifier(3, client=client, **CPU).fit(X, np.arange(20) % 2)
    with pytest.raises(ValueError, match="no radius of its own; pass radius="):
        clf.radius_neighbors(X[:2])
    empty = distributed_radius_neighbors(X, X[:0], 1.0, client=client, **CPU)
    assert len(empty[0]) == len(empty[1]) == 0
