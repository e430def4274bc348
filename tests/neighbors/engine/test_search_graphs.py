"""Small fused and dense searches replayed as CUDA graphs give the eager path's results (GPU tier)."""

import numpy as np
import pytest
import torch

from gpumine.neighbors import kneighbors
from gpumine.neighbors.engine import _exact_select, _product_select

from helpers import skip_if_no_cuda

pytestmark = pytest.mark.gpu

N = 8192 + 64  # fused searches (backend="triton"); backend="auto" probes L2 searches of this size eagerly
N_DENSE = 1500  # a dense search (gpumine.neighbors.engine._dense)


@pytest.fixture
def graphs(monkeypatch):
    skip_if_no_cuda("cuda")
    import gpumine.neighbors.engine._graphs as graphs

    graphs.clear_search_graphs()
    yield graphs
    graphs.clear_search_graphs()


def _eager(graphs, monkeypatch, *args, **kwargs):
    monkeypatch.setattr(graphs, "GRAPH_SEARCHES", False)
    try:
        return kneighbors(*args, **kwargs)
    finally:
        monkeypatch.setattr(graphs, "GRAPH_SEARCHES", True)


def _datasets(kind, d, n_query, seed, n=N):
    rng = np.random.default_rng(seed)
    for _ in range(4):  # new data of the same shape on every call: the replay must read it
        if kind == "ties":  # few distinct values: certificates fail and rows go to the retries
            R = rng.integers(0, 3, (n, d)).astype(np.float32)
            Q = rng.integers(0, 3, (n_query, d)).astype(np.float32)
        else:
            R = (rng.standard_normal((n, d)) * 10.0 ** rng.uniform(-1, 2, d)).astype(np.float32)
            Q = (rng.standard_normal((n_query, d)) * 10.0 ** rng.uniform(-1, 2, d)).astype(np.float32)
        yield R, Q


@pytest.mark.parametrize("kind,d,n_query,self_search", [
    ("gauss", 65, N, False), ("gauss", 8, N, False), ("gauss", 65, N, True), ("ties", 8, N, False), ("ties", 20, N, True),
])
@pytest.mark.parametrize("on_device", [False, True])
def test_replayed_searches_equal_the_eager_path_on_new_data_each_call(graphs, monkeypatch, kind, d, n_query, self_search,
                                                                     on_device):
    outputs = []
    for R, Q in _datasets(kind, d, n_query, seed=d + n_query):
        if on_device:
            R, Q = torch.from_numpy(R).cuda(), torch.from_numpy(Q).cuda()
        args = (R,) if self_search else (R, Q)
        got = kneighbors(*args, k=7, device="cuda", backend="triton")
        want = _eager(graphs, monkeypatch, *args, k=7, device="cuda")
        if on_device:
            assert got[0].is_cuda and got[1].is_cuda
            outputs.append((got, tuple(t.clone() for t in got)))
            got, want = tuple(t.cpu().numpy() for t in got), tuple(t.cpu().numpy() for t in want)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0].view(np.int32), want[0].view(np.int32))
    assert len(graphs._graphs) == 1  # captured on the second call, replayed after
    for got, kept in outputs:  # results handed out are never the graph's own buffers
        assert all(torch.equal(a, b) for a, b in zip(got, kept))


def test_host_operands_staged_through_pinned_buffers_give_the_pageable_copies_results(graphs, monkeypatch):
    results = {}
    for staging in (True, False):
        monkeypatch.setattr(graphs, "GRAPH_STAGING", staging)
        graphs.clear_search_graphs()
        for R, Q in _datasets("gauss", 65, N, seed=5):  # new host data each call: the staging buffers are refilled
            results.setdefault(staging, []).append(kneighbors(R, Q, k=7, device="cuda", backend="triton"))
        (entry,) = graphs._graphs.values()
        assert bool(entry.staging) == staging
    for got, want in zip(results[True], results[False]):
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0].view(np.int32), want[0].view(np.int32))


def test_estimators_replay_graphs_with_the_eager_paths_results(graphs, monkeypatch):
    from gpumine.neighbors import KNeighborsClassifier, NearestNeighbors

    rng = np.random.default_rng(3)
    R = (rng.standard_normal((N, 65)) * 10.0 ** rng.uniform(-1, 2, 65)).astype(np.float32)
    y = (R[:, 0] > 0).astype(int)
    nn = NearestNeighbors(n_neighbors=7, device="cuda", backend="triton").fit(R)
    clf = KNeighborsClassifier(n_neighbors=7, device="cuda", backend="triton").fit(R, y)

    def results():
        return nn.kneighbors(Q), nn.kneighbors(), clf.predict_proba(Q)

    for _ in range(3):  # new queries each call; the training-set search repeats its own
        Q = (rng.standard_normal((N, 65)) * 10.0 ** rng.uniform(-1, 2, 65)).astype(np.float32)
        got = results()
        monkeypatch.setattr(graphs, "GRAPH_SEARCHES", False)
        want = results()
        monkeypatch.setattr(graphs, "GRAPH_SEARCHES", True)
        for g, w in zip(got[:2], want[:2]):
            np.testing.assert_array_equal(g[1], w[1])
            np.testing.assert_array_equal(g[0].view(np.int32), w[0].view(np.int32))
        np.testing.assert_array_equal(got[2], want[2])
    assert len(graphs._graphs) == 2  # the query search and the training set's own


def test_bad_or_extreme_data_in_a_captured_shape_goes_the_eager_way(graphs):
    rng = np.random.default_rng(5)
    R = rng.standard_normal((N, 12)).astype(np.float32)
    Q = rng.standard_normal((N, 12)).astype(np.float32)
    for _ in range(3):
        base = kneighbors(R, Q, 5, device="cuda", backend="triton")
    assert len(graphs._graphs) == 1
    bad = Q.copy()
    bad[11, 3] = np.nan
    for _ in range(2):
        with pytest.raises(ValueError, match=r"X_query contains NaN or infinity \(1 non-finite value\(s\), first at row 11\)"):
            kneighbors(R, bad, 5, device="cuda", backend="triton")
    big = kneighbors(R * 2.0**100, Q * 2.0**100, 5, device="cuda", backend="triton")  # scaled by the eager path, same order
    np.testing.assert_array_equal(big[1], base[1])
    np.testing.assert_array_equal(kneighbors(R, Q, 5, device="cuda", backend="triton")[1], base[1])


def test_graph_cache_keeps_the_most_recent_shapes(graphs, monkeypatch):
    monkeypatch.setattr(graphs, "GRAPH_CACHE_SIZE", 2)
    rng = np.random.default_rng(6)
    shapes = [(N, 9), (N + 64, 9), (N + 128, 9)]
    for n, d in shapes:
        R = rng.standard_normal((n, d)).astype(np.float32)
        for _ in range(2):
            kneighbors(R, R[:N], 3, device="cuda", backend="triton")
    assert len(graphs._graphs) == 2
    assert [key[1] for key in graphs._graphs] == [tuple(s) for s in shapes[1:]]
    graphs.clear_search_graphs()
    assert not graphs._graphs


def test_torch_searches_are_not_captured(graphs):
    X = np.random.default_rng(7).standard_normal((500, 8)).astype(np.float32)
    for _ in range(3):
        kneighbors(np.tile(X, (17, 1)), k=3, device="cuda", backend="torch")
        kneighbors(X, X, 3, device="cuda", metric="manhattan")  # no dense form: the torch engine
    assert not graphs._graphs


@pytest.mark.parametrize("kind,d,self_search", [("gauss", 9, True), ("gauss", 57, False), ("ties", 6, True),
                                                ("ties", 20, False), ("mixed", 9, True), ("integer_then_float", 9, True)])
@pytest.mark.parametrize("on_device", [False, True])
def test_replayed_dense_searches_equal_the_eager_path(graphs, monkeypatch, kind, d, self_search, on_device):
    """Integer data captured as exact float32 scores, other data with float64 products; each replay on new data.

    ``mixed``: captured on float data, replayed on integer and float data. ``integer_then_float``:
    captured on integer data; float data then sends the shape the eager way for good.
    """
    # shapes the exact-selection kernel would take first (one launch, no graph) run dense here
    monkeypatch.setattr(_exact_select, "EXACT_SELECT_FIRST_PAIRS", 0)
    monkeypatch.setattr(_exact_select, "EXACT_SELECT_MANY_PAIRS", 0)
    monkeypatch.setattr(_exact_select, "EXACT_SELECT_TINY_TERMS", 0)
    monkeypatch.setattr(_product_select, "PRODUCT_SELECT", False)  # wider ones on the product selection
    kinds = {"mixed": ["ties", "gauss", "ties", "gauss"], "integer_then_float": ["ties", "ties", "gauss", "gauss"]}
    for call, data_kind in enumerate(kinds.get(kind, [kind] * 4)):
        R, Q = list(_datasets(data_kind, d, 700, seed=d + call, n=N_DENSE))[0]
        if on_device:
            R, Q = torch.from_numpy(R).cuda(), torch.from_numpy(Q).cuda()
        args = (R,) if self_search else (R, Q)
        got = kneighbors(*args, k=20, device="cuda")
        want = _eager(graphs, monkeypatch, *args, k=20, device="cuda")
        host = kneighbors(*(a.cpu().numpy() if on_device else a for a in args), k=20, device="cpu")
        got, want = tuple(np.asarray(t.cpu()) if on_device else t for t in got), tuple(
            np.asarray(t.cpu()) if on_device else t for t in want)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0].view(np.int32), want[0].view(np.int32))
        np.testing.assert_array_equal(got[1], host[1])
        # distances: the same float32 squared distances; the GPU's float32 square root may differ by an ulp
        np.testing.assert_allclose(got[0], host[0], rtol=2.0**-22, atol=0)
    if kind == "integer_then_float":
        assert not graphs._graphs
        return
    assert len(graphs._graphs) == 1
    (key,) = graphs._graphs
    assert key[-1] == "dense"


@pytest.mark.parametrize("d,product", [(6, False), (57, True)])
def test_replays_captured_on_tensor_cores_send_wider_integers_the_eager_way(graphs, monkeypatch, d, product):
    """Captured on small integers (exact TF32 tensor-core products), replayed on integers whose products are exact in
    IEEE float32 only: those replays go the eager way, with its results, and the shape stays eager after."""
    from gpumine.neighbors.engine import _dense

    monkeypatch.setattr(_exact_select, "EXACT_SELECT_FIRST_PAIRS", 0)
    monkeypatch.setattr(_exact_select, "EXACT_SELECT_MANY_PAIRS", 0)
    monkeypatch.setattr(_exact_select, "EXACT_SELECT_TINY_TERMS", 0)
    monkeypatch.setattr(_product_select, "PRODUCT_SELECT", product)
    rng = np.random.default_rng(d)
    reach = {6: 700, 57: 200}[d]  # 4 d reach^2 between 2^22 (tensor cores) and 2^24 (float32)
    for call, wide in enumerate((False, False, True, True)):
        X = (rng.integers(-reach, reach + 1, (N_DENSE, d)) if wide else rng.integers(0, 3, (N_DENSE, d))).astype(np.float32)
        ref = torch.from_numpy(X).cuda()
        assert bool(_dense.integer_centre_on_device(ref, ref)[2]) is not wide
        got = kneighbors(X, k=20, device="cuda")
        want = _eager(graphs, monkeypatch, X, k=20, device="cuda")
        host = kneighbors(X, k=20, device="cpu")
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0].view(np.int32), want[0].view(np.int32))
        np.testing.assert_array_equal(got[1], host[1])
        if call == 1:  # captured on the second call of the shape
            assert len(graphs._graphs) == 1 and next(iter(graphs._graphs.values())).tensor_cores
    assert not graphs._graphs


@pytest.mark.parametrize("kind", ["uniform", "ties", "far"])
@pytest.mark.parametrize("self_search", [True, False])
def test_captured_probe_counts_the_open_rows_of_the_eager_probe(graphs, monkeypatch, kind, self_search):
    """The dense-or-fused probe replayed as a graph finds the eager probe's open rows (new data on every call),
    also with the float64 order's certificate of few references; the searches' results are the same."""
    from gpumine.core.distance import get_metric
    from gpumine.neighbors.engine import _search as _engine

    # few references probed (with the float64 certificate) from 2^26 pairs; a self-search of 65,536 rows is not few
    monkeypatch.setattr(_engine, "DENSE_UNPROBED_MAX_PAIRS", 1 << 26)
    monkeypatch.setattr(_exact_select, "EXACT_SELECT_FIRST_PAIRS", 0)  # these shapes would run there, unprobed
    monkeypatch.setattr(_exact_select, "EXACT_SELECT_MANY_PAIRS", 0)
    monkeypatch.setattr(_exact_select, "EXACT_SELECT_TINY_TERMS", 0)
    n_ref, n_query = (1 << 16, None) if self_search else (8192, 16384)
    rng = np.random.default_rng(len(kind))

    def data(n):
        if kind == "uniform":
            return rng.random((n, 8), dtype=np.float32)
        if kind == "ties":  # an integer grid with few duplicate rows (those would be searched as distinct rows)
            return rng.integers(0, 16, (n, 8)).astype(np.float32)
        # clusters far from the origin (spread enough that float32 keeps most rows distinct)
        return (1e4 + rng.integers(0, 3, (n, 1)) + 0.05 * rng.standard_normal((n, 8))).astype(np.float32)

    def search(ref, query):
        stats = {}
        found = _engine.knn_search(ref, query, 9, get_metric("euclidean"), exclude_self=self_search, device=ref.device,
                                   budget_bytes=1 << 30, result_device=ref.device, backend="auto", stats=stats)
        return found, stats

    for call in range(3):  # eager (warm-up), captured, replayed
        ref = torch.from_numpy(data(n_ref)).cuda()
        query = ref if self_search else torch.from_numpy(data(n_query)).cuda()
        got, got_stats = search(ref, query)
        monkeypatch.setattr(graphs, "GRAPH_SEARCHES", False)
        ref2 = ref.clone()  # a new tensor: a self-search's verdict is remembered per tensor
        want, want_stats = search(ref2, ref2 if self_search else query)
        monkeypatch.setattr(graphs, "GRAPH_SEARCHES", True)
        assert "probe_rows_open" in want_stats and got_stats["probe_rows_open"] == want_stats["probe_rows_open"]
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert any(key[0] == "probe" for key in graphs._graphs)


@pytest.mark.parametrize("kind", ["gauss", "ties", "duplicates"])
def test_automatic_backend_replays_the_fused_search_the_probe_chooses(graphs, monkeypatch, kind):
    # backend="auto" replays a captured fused search where the eager path would run it fused (its probe, no
    # duplicates), and leaves the others (dense by the probe, deduplicated) to the eager path; same results
    asked = []
    fused_by_the_data = graphs.fused_by_the_data
    monkeypatch.setattr(graphs, "fused_by_the_data", lambda *a: asked.append(fused_by_the_data(*a)) or asked[-1])
    rng = np.random.default_rng(43)
    n = (1 << 16) + 512  # references enough for the probe to decide (fewer run dense unprobed)
    for _ in range(4):  # new data of the same shape on every call
        if kind == "ties":  # integer rows, integer distances (the probe decides)
            R = rng.integers(0, 3, (n, 16)).astype(np.float32)
        else:
            R = rng.standard_normal((n // 4 if kind == "duplicates" else n, 8)).astype(np.float32)
            R = np.repeat(R, 4, axis=0) if kind == "duplicates" else R
        R = torch.from_numpy(R).cuda()
        got = kneighbors(R, k=7, device="cuda")
        want = _eager(graphs, monkeypatch, R, k=7, device="cuda")
        torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    assert len(asked) == 4 and len(set(asked)) == 1  # one verdict for data of one kind
    if kind == "gauss":
        assert asked[0] and any(isinstance(entry, graphs._CapturedSearch) for entry in graphs._graphs.values())
    if kind == "duplicates":
        assert not asked[0]



@pytest.mark.parametrize("kind,self_search", [("gauss", False), ("ties", False), ("gauss", True)])
def test_product_searches_over_the_working_memory_replay_their_blocks_in_one_graph(graphs, monkeypatch, kind, self_search):
    """A product selection whose scores exceed the working memory is captured as several query blocks, one after
    another in one graph; each replay on new data gives the eager path's results (which blocks the queries its own way).
    A self-search's blocks skip each query's own reference at their own offset."""
    monkeypatch.setattr(_exact_select, "EXACT_SELECT_FIRST_PAIRS", 0)
    monkeypatch.setattr(_exact_select, "EXACT_SELECT_MANY_PAIRS", 0)
    monkeypatch.setattr(_exact_select, "EXACT_SELECT_TINY_TERMS", 0)
    monkeypatch.setattr(_product_select, "PRODUCT_SELECT", True)
    monkeypatch.setattr(graphs, "GRAPH_PRODUCT_MAX_BLOCKS", 4)  # off by default (their capture's cost)
    for R, Q in _datasets(kind, 57, 700, seed=11, n=N_DENSE):
        args = (R,) if self_search else (R, Q)
        got = kneighbors(*args, k=10, device="cuda", working_memory=6)
        want = _eager(graphs, monkeypatch, *args, k=10, device="cuda", working_memory=6)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0].view(np.int32), want[0].view(np.int32))
    ((key, entry),) = graphs._graphs.items()
    n_query = N_DENSE if self_search else 700
    assert key[-1] == "product" and 1 < -(-n_query // entry.block_rows) <= graphs.GRAPH_PRODUCT_MAX_BLOCKS


def test_replays_that_leave_rows_to_the_float64_scan_equal_the_eager_path(graphs, monkeypatch):
    """Tenths on a small grid (not whole numbers, so the float64 order follows each replay) leave many rows open
    after the fused first pass; the replay hands them to the float64 order's scan rather than to retries."""
    from gpumine.neighbors.engine import _search

    monkeypatch.setattr(_search, "SPARE_DEFERRED_MAX_ROWS", 1 << 30)
    monkeypatch.setattr(graphs, "_GRAPH_MAX_OPEN_ROWS", 1 << 30)
    rng = np.random.default_rng(5)
    deferred = []
    for _ in range(4):
        R = (rng.integers(0, 3, (N, 8)) * 0.1).astype(np.float32)
        Q = (rng.integers(0, 3, (N, 8)) * 0.1).astype(np.float32)
        got = kneighbors(R, Q, k=7, device="cuda", backend="triton")
        want = _eager(graphs, monkeypatch, R, Q, k=7, device="cuda")
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0].view(np.int32), want[0].view(np.int32))
        deferred += [entry.deferred for entry in graphs._graphs.values()]
    assert len(graphs._graphs) == 1 and max(deferred) > 0
