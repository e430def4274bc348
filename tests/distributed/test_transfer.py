"""What travels in gpumine.distributed.kneighbors: int32 indices on the wire, results collected block by block,
dask-array results left on the workers; always one process's answer, bit for bit."""

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")

from gpumine import distributed as gd  # noqa: E402
from gpumine.distributed import _knn  # noqa: E402
from gpumine.neighbors import kneighbors  # noqa: E402

# the wire dtypes of the blocks the workers sent (in-process workers: the same module, the same list)
WIRE = []
_SEARCH_BLOCK = _knn._search_block
_STRIP_KEYS = _knn._strip_keys


def _recording_search_block(*args, **kwargs):
    out = _SEARCH_BLOCK(*args, **kwargs)
    WIRE.append(out[1].dtype)
    return out


def _recording_strip_keys(*args, **kwargs):
    out = _STRIP_KEYS(*args, **kwargs)
    WIRE.append(out[1].dtype)
    return out


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None)
    with distributed.Client(cluster, set_as_default=False) as c:
        yield c
    cluster.close()


@pytest.fixture
def recorded(monkeypatch):
    monkeypatch.setattr(_knn, "_search_block", _recording_search_block)
    monkeypatch.setattr(_knn, "_strip_keys", _recording_strip_keys)
    WIRE.clear()
    yield WIRE
    WIRE.clear()


def _ties(n=300, d=2):
    """Tie-heavy data: a small integer grid with duplicates, and float32 distances that tie and differ in float64."""
    j = np.arange(n, dtype=np.float32)
    grid = np.stack([j % 7, (j // 7) % 5], 1)
    fine = np.stack([1 + (j % 23) * np.float32(2**-23), 1 + (j // 23) * np.float32(2**-23)], 1)
    return np.concatenate([grid, fine])[:, :d].astype(np.float32)


def _compare(got, want):
    dist, index = (np.asarray(a) for a in got)
    assert index.dtype == want[1].dtype == np.int64
    assert dist.dtype == want[0].dtype
    np.testing.assert_array_equal(index, want[1])
    np.testing.assert_array_equal(dist, want[0])


@pytest.mark.parametrize("mode", ["replicate", "shard"])
@pytest.mark.parametrize("limit_over_n_ref", [0, 1, 2])  # at the threshold: int64; above it: int32
@pytest.mark.parametrize("queries", ["all", "numpy", "dask"])
def test_wire_indices_near_the_int32_threshold_give_one_process_answer(client, recorded, monkeypatch, mode,
                                                                       limit_over_n_ref, queries):
    X = _ties()
    n_ref = len(X)
    monkeypatch.setattr(_knn, "INT32_WIRE_LIMIT", n_ref + limit_over_n_ref)
    monkeypatch.setattr(_knn, "REPLICATE_MIN_BLOCK_ROWS", 16)  # several query blocks per worker
    Q = None if queries == "all" else X[::3] + np.float32(0.5)
    want = kneighbors(X, Q, k=9, device="cpu")
    Xd = da.from_array(X, chunks=((97, 3, 200, n_ref - 300), -1))  # uneven row chunks
    query = None if Q is None else (da.from_array(Q, chunks=(41, -1)) if queries == "dask" else Q)
    got = gd.kneighbors(Xd, query, k=9, mode=mode, client=client, device="cpu", batch_rows=70)
    if queries != "numpy":
        got = client.gather(client.compute(got))
    _compare(got, want)
    wire = np.int64 if limit_over_n_ref == 0 else np.int32
    assert WIRE and set(WIRE) == {np.dtype(wire)}
    if mode == "replicate":  # several blocks per worker, each collected on its own
        assert len(WIRE) > 2
    else:  # one reduction per query batch of 70 rows
        assert len(WIRE) == -(-len(want[1]) // 70)


def test_the_wire_dtype_follows_the_module_constant(monkeypatch):
    assert _knn._wire_index_dtype(2**31 - 1) is np.int32
    assert _knn._wire_index_dtype(2**31) is np.int64
    monkeypatch.setattr(_knn, "INT32_WIRE_LIMIT", 10)
    assert _knn._wire_index_dtype(9) is np.int32 and _knn._wire_index_dtype(10) is np.int64


def test_replicate_blocks_are_several_per_worker_only_when_large():
    spans = _knn._replicate_spans(4_000_000, 2)
    assert len(spans) == 2 * _knn.REPLICATE_BLOCKS_PER_WORKER
    assert spans[0][0] == 0 and spans[-1][1] == 4_000_000
    assert all(b == c for (_, b), (c, _) in zip(spans[:-1], spans[1:]))
    assert len(_knn._replicate_spans(1000, 2)) == 2  # small: one block per worker
    assert len(_knn._replicate_spans(3 * _knn.REPLICATE_MIN_BLOCK_ROWS, 1)) == 3
    assert _knn._replicate_spans(1, 3) == [(0, 1)] and _knn._replicate_spans(0, 2) == []


@pytest.mark.parametrize("mode", ["replicate", "shard"])
@pytest.mark.parametrize("return_distance", [True, False])
def test_dask_queries_give_dask_results_computed_on_the_workers(client, mode, return_distance):
    X = _ties(n=200)
    Q = X[5:130]
    want = kneighbors(X, Q, k=4, device="cpu")
    Qd = da.from_array(Q, chunks=((60, 0, 1, 64), -1))  # uneven, an empty chunk
    got = gd.kneighbors(X, Qd, k=4, mode=mode, client=client, device="cpu", return_distance=return_distance)
    arrays = got if return_distance else (got,)
    for a in arrays:
        assert isinstance(a, da.Array) and a.chunks == (Qd.chunks[0], (4,))
        assert distributed.futures_of(a)  # the chunks are futures on the cluster, not data sent from the client
    computed = client.gather(client.compute(list(arrays)))
    if return_distance:
        _compare(computed, want)
    else:
        assert computed[0].dtype == np.int64
        np.testing.assert_array_equal(computed[0], want[1])


def test_all_knn_of_a_dask_array_stays_on_the_workers(client):
    X = _ties(n=150)
    want = kneighbors(X, k=5, device="cpu")
    Xd = da.from_array(X, chunks=(40, -1))
    dist, index = gd.kneighbors(Xd, k=5, mode="replicate", client=client, device="cpu")
    assert distributed.futures_of(index) and index.chunks[0] == dist.chunks[0] == Xd.chunks[0]
    _compare(client.gather(client.compute([dist, index])), want)


def test_numpy_queries_give_numpy_results(client):
    X = _ties(n=120)
    got = gd.kneighbors(X, X[:30], k=3, mode="replicate", client=client, device="cpu")
    assert all(isinstance(a, np.ndarray) for a in got)
    _compare(got, kneighbors(X, X[:30], k=3, device="cpu"))


def _failing(*args, **kwargs):
    raise RuntimeError("this block failed")


@pytest.mark.parametrize("mode", ["replicate", "shard"])
@pytest.mark.parametrize("dask_input", [False, True])
def test_a_failing_block_raises_on_the_client(client, monkeypatch, mode, dask_input):
    monkeypatch.setattr(_knn, "_search_block" if mode == "replicate" else "_strip_keys", _failing)
    X = _ties(n=60)
    with pytest.raises(RuntimeError, match="this block failed"):
        gd.kneighbors(da.from_array(X, chunks=(50, -1)) if dask_input else X, k=3, mode=mode, client=client,
                      device="cpu")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["replicate", "shard"])
@pytest.mark.parametrize("limit_over_n_ref", [0, 1])
def test_worker_processes_with_int32_and_int64_wire_indices(monkeypatch, mode, limit_over_n_ref):
    X = _ties(n=500)
    # decided on the client and passed with the tasks, so the patched constant reaches worker processes
    monkeypatch.setattr(_knn, "INT32_WIRE_LIMIT", len(X) + limit_over_n_ref)
    monkeypatch.setattr(_knn, "REPLICATE_MIN_BLOCK_ROWS", 32)
    want = kneighbors(X, k=8, device="cpu")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster, set_as_default=False) as c:
        _compare(gd.kneighbors(X, k=8, mode=mode, client=c, device="cpu", batch_rows=120), want)
        dask_got = gd.kneighbors(da.from_array(X, chunks=(77, -1)), k=8, mode=mode, client=c, device="cpu")
        _compare(c.gather(c.compute(list(dask_got))), want)
