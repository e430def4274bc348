"""gpumine.distributed against one process: the same neighbours and distances, whatever the sharding."""

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")

from gpumine import distributed as gd  # noqa: E402
from gpumine.neighbors import kneighbors  # noqa: E402


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=False, dashboard_address=None)
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def _data(kind, n=500, d=4, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "integer":
        return rng.integers(0, 3, (n, d)).astype(np.float32)
    if kind == "duplicates":
        base = rng.standard_normal((n // 10, d)).astype(np.float32)
        return base[rng.integers(0, len(base), n)]
    if kind == "float32 ties":  # float32 distances that tie and differ in float64
        j = np.arange(n, dtype=np.float32)
        return np.stack([1 + (j % 23) * np.float32(2**-23), 1 + (j // 23) * np.float32(2**-23)], 1)[:, :d]
    return rng.standard_normal((n, d)).astype(np.float32)


@pytest.mark.parametrize("kind", ["random", "integer", "duplicates", "float32 ties"])
@pytest.mark.parametrize("mode", ["shard", "replicate"])
@pytest.mark.parametrize("chunks", [97, 250, 500])
def test_all_knn_equals_one_process(client, kind, mode, chunks):
    X = _data(kind, d=2 if kind == "float32 ties" else 4)
    want = kneighbors(X, k=7, device="cpu")
    got = gd.kneighbors(da.from_array(X, chunks=(chunks, -1)), k=7, mode=mode, client=client, device="cpu")
    np.testing.assert_array_equal(np.asarray(got[1]), want[1])
    np.testing.assert_array_equal(np.asarray(got[0]), want[0])


@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "cosine", "inner_product"])
def test_queries_against_sharded_references_equal_one_process(client, metric):
    X = _data("duplicates", n=800)
    Q = _data("random", n=60, seed=1)
    want = kneighbors(X, Q, k=12, metric=metric, device="cpu")
    dist, index = gd.kneighbors(da.from_array(X, chunks=(130, -1)), Q, k=12, metric=metric, mode="shard", client=client,
                                device="cpu")
    np.testing.assert_array_equal(index, want[1])
    np.testing.assert_array_equal(dist, want[0])


def test_numpy_input_is_sharded_over_the_workers_and_k_equal_n_minus_one(client):
    X = _data("integer", n=40)
    want = kneighbors(X, k=39, device="cpu")
    got = gd.kneighbors(X, k=39, mode="shard", client=client, device="cpu")
    np.testing.assert_array_equal(got[1], want[1])


def test_bad_arguments_are_refused(client):
    X = _data("random", n=10)
    with pytest.raises(ValueError, match="mode must be"):
        gd.kneighbors(X, k=2, mode="broadcast", client=client)
    with pytest.raises(ValueError, match="k=10 exceeds the 9 reference rows"):
        gd.kneighbors(X, k=10, client=client)


def test_without_a_client_the_error_says_how_to_start_one(monkeypatch):
    def none_running():
        raise ValueError("No global client found and no address provided")

    monkeypatch.setattr(distributed, "get_client", none_running)
    X = _data("random", n=10)
    with pytest.raises(ValueError, match="no Dask client"):
        gd.kneighbors(X, k=2)


def test_the_estimator_and_the_command_line_give_one_process_answer(client, tmp_path, capsys):
    import pandas as pd

    from gpumine.cli import main

    X = _data("duplicates", n=300)
    want = kneighbors(X, k=5, device="cpu")
    nn = gd.NearestNeighbors(n_neighbors=5, client=client, device="cpu", mode="shard").fit(da.from_array(X, chunks=(70, -1)))
    np.testing.assert_array_equal(np.asarray(nn.kneighbors()[1]), want[1])
    pd.DataFrame(X, columns=["a", "b", "c", "d"]).to_csv(tmp_path / "x.csv", index=False)
    address = client.scheduler.address
    assert main(["knn", str(tmp_path / "x.csv"), "-k", "5", "--device", "cpu", "--scheduler", address,
                 "-o", str(tmp_path / "n.csv")]) == 0
    got = pd.read_csv(tmp_path / "n.csv")
    np.testing.assert_array_equal(got[[f"index_{j}" for j in range(5)]].to_numpy(), want[1])


@pytest.mark.slow
def test_worker_processes_give_the_same_answer():
    X = _data("float32 ties", n=400, d=2)
    want = kneighbors(X, k=6, device="cpu")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as c:
        got = gd.kneighbors(da.from_array(X, chunks=(90, -1)), k=6, mode="shard", client=c, device="cpu")
        got = c.gather(c.compute(got))  # the chunks live on the workers: computed while the cluster runs
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("kind", ["random", "duplicates", "integer"])
def test_lof_and_top_n_outliers_equal_one_process(client, kind):
    import warnings

    from gpumine.outliers import LocalOutlierFactor, top_n_outliers

    X = _data(kind, n=400)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate-point warnings, the same on both
        want = LocalOutlierFactor(n_neighbors=10, device="cpu").fit(X).negative_outlier_factor_
        got = gd.LocalOutlierFactor(n_neighbors=10, client=client, device="cpu", mode="shard").fit(
            da.from_array(X, chunks=(90, -1))).negative_outlier_factor_
    np.testing.assert_array_equal(got, want)
    one = top_n_outliers(X, n_outliers=8, k=6, method="brute_force", device="cpu")
    many = gd.top_n_outliers(da.from_array(X, chunks=(110, -1)), n_outliers=8, k=6, client=client, device="cpu",
                             mode="shard")
    np.testing.assert_array_equal(many.indices, one.indices)
    np.testing.assert_array_equal(many.weights, one.weights)
    np.testing.assert_array_equal(many.scores, one.scores)


@pytest.mark.parametrize("chunks", [1, 3, (5, 1, 30, 4)])  # single rows, chunks smaller than k, uneven
@pytest.mark.parametrize("metric", ["euclidean", "chebyshev", "cosine"])
def test_uneven_and_tiny_chunks_change_nothing(client, chunks, metric):
    X = _data("integer", n=40)
    want = kneighbors(X, k=6, metric=metric, device="cpu")
    got = gd.kneighbors(da.from_array(X, chunks=(chunks, -1)), k=6, metric=metric, mode="shard", client=client,
                        device="cpu")
    np.testing.assert_array_equal(np.asarray(got[1]), want[1])
    np.testing.assert_array_equal(np.asarray(got[0]), want[0])


@pytest.mark.parametrize("chunks", [1000, 137, 7])
def test_categorical_nb_from_summed_partition_counts_equals_one_process(client, chunks):
    from gpumine.counting import CategoricalNB

    rng = np.random.default_rng(3)
    X = rng.integers(0, 5, (1000, 4))
    X[:, 3] = rng.integers(0, 2, 1000)
    y = rng.integers(0, 3, 1000)
    one = CategoricalNB(alpha=0.5, device="cpu").fit(X, y)
    many = gd.CategoricalNB(alpha=0.5, device="cpu", client=client).fit(da.from_array(X, chunks=(chunks, -1)),
                                                                        da.from_array(y, chunks=chunks))
    np.testing.assert_array_equal(many.class_count_, one.class_count_)
    for a, b in zip(many.category_count_, one.category_count_):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(many.predict_proba(X), one.predict_proba(X))
    np.testing.assert_array_equal(many.predict(X), one.predict(X))


def test_local_cluster_on_a_machine_without_gpus_gives_cpu_workers(monkeypatch):
    from gpumine.distributed import _cluster

    monkeypatch.setattr(_cluster, "_gpu_count", lambda: 0)
    with gd.local_cluster(2, processes=False) as cluster, distributed.Client(cluster) as c:
        assert len(c.scheduler_info()["workers"]) == 2
        X = _data("integer", n=60)
        np.testing.assert_array_equal(gd.kneighbors(X, k=3, client=c, device="cpu", mode="shard")[1],
                                      kneighbors(X, k=3, device="cpu")[1])
    with pytest.raises(ValueError, match="no GPU is visible"):
        gd.local_cluster(gpus=True)


def test_gpu_workers_each_see_one_gpu(monkeypatch):
    from gpumine.distributed import _cluster

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.setitem(__import__("sys").modules, "dask_cuda", None)  # the Nanny-per-GPU fallback
    made = {}
    monkeypatch.setattr(distributed, "SpecCluster", lambda **kwargs: made.update(kwargs) or "cluster")  # nothing starts
    assert gd.local_cluster(gpus=True) == "cluster"
    envs = sorted(spec["options"]["env"]["CUDA_VISIBLE_DEVICES"] for spec in made["workers"].values())
    assert envs == ["3", "5"] and _cluster._gpu_count() == 2
    # each worker gets half of the host's memory (a Nanny's own default is memory x 1 thread / cores)
    from distributed.system import MEMORY_LIMIT

    assert all(spec["options"]["memory_limit"] == MEMORY_LIMIT // 2 for spec in made["workers"].values())


def test_the_same_search_twice_in_a_row_is_not_lost(client):
    # identical data gives identical content keys; a key released by one call must not starve the next
    X = _data("random", n=300)
    Xd = da.from_array(X, chunks=(60, -1))
    want = kneighbors(X, X[:20], k=4, device="cpu")[1]
    for _ in range(8):
        np.testing.assert_array_equal(gd.kneighbors(Xd, X[:20], k=4, mode="shard", client=client, device="cpu")[1], want)


@pytest.mark.parametrize("batch_rows", [29, 10_000])
def test_query_batches_change_nothing(client, batch_rows):
    X = _data("duplicates", n=300)
    want = kneighbors(X, k=5, device="cpu")
    got = gd.kneighbors(da.from_array(X, chunks=(80, -1)), k=5, mode="shard", client=client, device="cpu",
                        batch_rows=batch_rows)
    np.testing.assert_array_equal(np.asarray(got[1]), want[1])
    np.testing.assert_array_equal(np.asarray(got[0]), want[0])
    with pytest.raises(ValueError, match="batch_rows"):
        gd.kneighbors(X, k=5, mode="shard", client=client, batch_rows=0)


def test_the_merge_order_by_sorts_equals_lexsort():
    """The merge's device sort (two stable sorts) orders as NumPy's lexsort, padding and ties included."""
    from gpumine.distributed._knn import _merge_order

    rng = np.random.default_rng(0)
    keys = rng.integers(0, 4, size=(50, 12)).astype(np.float64)
    keys[:, -3:] = np.inf  # padding
    index = rng.permutation(50 * 12).reshape(50, 12).astype(np.int64)
    index[:, -3:] = -1
    np.testing.assert_array_equal(_merge_order(keys, index, 7, "cpu"), np.lexsort((index, keys), axis=1)[:, :7])
