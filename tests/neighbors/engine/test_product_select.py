"""Searches at many features by one product and the product-selection kernel: routing, and on a GPU the
same results as the dense path and the host, bit for bit, on tie-heavy wide data."""

import numpy as np
import pytest
import torch

from gpumine.core.distance import get_metric
from gpumine.neighbors import kneighbors
from gpumine.neighbors.engine import _product_select
from gpumine.neighbors.engine._product_select import product_select_first, product_select_if_integral
from gpumine.neighbors.engine._search import knn_search


def test_taken_first_by_shape():
    assert not product_select_first(4207, 4207, 32)  # few features: the exact-selection kernel
    assert product_select_first(4207, 4207, 57)
    assert product_select_first(1966, 1966, 1555)
    assert product_select_first(41_188, 41_188, 62)  # mid-size, one block of scores per query block
    assert not product_select_first(202_599, 202_599, 39)  # large: here only if its products are exact
    assert product_select_if_integral(202_599, 202_599, 39) and not product_select_if_integral(202_599, 202_599, 9)
    assert not product_select_if_integral(4207, 4207, 57)  # taken first already
    assert product_select_first(49_534, 49_534, 27)  # large at more than one chunk of features
    assert not product_select_first(19_020, 19_020, 27)  # mid-size at 17-32 features: the exact selection
    assert not product_select_first(49_534, 49_534, 16)


def test_launch_shape_by_rows_and_references(monkeypatch):
    from gpumine.neighbors.engine import _product_select_kernel as kernel

    monkeypatch.setattr(kernel, "_multiprocessors", lambda device: 132)
    gpu, cpu = torch.device("cuda"), torch.device("cpu")
    # many rows: one program each; the finish apart from the scan
    assert kernel.default_product_splits(41_188, 41_188, 1, 128, gpu) == 1
    assert kernel.default_finish_apart(41_188, 1, gpu)
    # one to two waves of programs: neither split nor apart
    assert kernel.default_product_splits(7_603, 7_603, 1, 128, gpu) == 1
    assert not kernel.default_finish_apart(7_603, 1, gpu)
    # few rows over many references: the references split (and the finish then always apart)
    assert kernel.default_product_splits(2_000, 100_000, 1, 128, gpu) == 2  # the split grid within one wave
    assert kernel.default_product_splits(1_000, 100_000, 1, 128, gpu) == 4
    assert kernel.default_product_splits(100, 4_207, 1, 128, gpu) == 2  # each split at least 16 tiles
    assert kernel.default_product_splits(4_207, 4_207, 1, 128, gpu) == 1  # rows fill over half a wave
    assert kernel.default_product_splits(2_112, 100_000, 1, 128, gpu) == 2
    assert kernel.default_product_splits(2_113, 100_000, 1, 128, gpu) == 1
    assert kernel.default_product_splits(0, 100_000, 1, 128, gpu) == 1
    assert kernel.default_product_splits(1_966, 1_966, 1, 128, gpu) == 1
    assert kernel.default_product_splits(2_000, 100_000, 1, 128, cpu) == 1
    # reads of the first pass: narrower for unsplit grids under FINISH_APART_PROGRAMS per multiprocessor
    few, wide = kernel.SCAN_COLUMNS_FEW_ROWS, kernel.SCAN_COLUMNS
    assert few < wide
    assert kernel.default_scan_columns(64, 3_062, 1, gpu) == max(64, few)
    assert kernel.default_scan_columns(128, 132 * 64 - 1, 1, gpu) == max(128, few)
    assert kernel.default_scan_columns(128, 132 * 64, 1, gpu) == wide  # e.g. the physics and embedding searches
    assert kernel.default_scan_columns(128, 2_000, 2, gpu) == wide  # split grids
    assert kernel.default_scan_columns(128, 3_062, 1, cpu) == wide
    assert kernel.default_scan_columns(128) == wide
    assert kernel.default_scan_columns(512, 3_062, 1, gpu) == 512  # at least block_n
    assert not kernel.default_finish_apart(41_188, 1, cpu)
    monkeypatch.setattr(kernel, "FINISH_APART", False)
    assert not kernel.default_finish_apart(41_188, 1, gpu)


def test_blocks_of_one_search_read_as_the_whole_search(monkeypatch):
    # a large search cut into query blocks keeps the large search's reads (the rule counts all its rows)
    from types import SimpleNamespace

    seen = []

    def record(S, offset, slack, QT, RT, k, **kw):
        seen.append((S.shape[0], kw["search_rows"], kw["self_offset"]))
        return torch.zeros((S.shape[0], k), dtype=torch.float64), torch.zeros((S.shape[0], k), dtype=torch.int64)

    monkeypatch.setattr(_product_select, "product_select", record)
    monkeypatch.setattr(_product_select, "block_scores", lambda refs, q: (torch.zeros((q.shape[0], 3)),) + (torch.zeros(q.shape[0]),) * 2)
    refs = SimpleNamespace(k=2, exact=True, tile_dtype=torch.float64, d=4, exclude_self=False)
    query = torch.zeros((10, 4))
    _product_select.select_blocks(refs, query, query.T, torch.zeros((4, 3)), 4)
    assert seen == [(4, 10, 0), (4, 10, 4), (2, 10, 8)]
    seen.clear()
    _product_select.select_blocks(refs, query, query.T, torch.zeros((4, 3)), 10)
    assert seen == [(10, None, 0)]

    kernel = pytest.importorskip("gpumine.neighbors.engine._product_select_kernel")
    if not kernel.product_select_available():
        pytest.skip("triton is not installed")
    asked = []

    class Stop(Exception):
        pass

    def scan_columns(block_n, row_blocks, splits, device):
        asked.append(row_blocks)
        raise Stop

    monkeypatch.setattr(kernel, "default_scan_columns", scan_columns)
    S, zeros = torch.zeros((5, 40)), torch.zeros(5, dtype=torch.float64)
    for search_rows, blocks in ((None, 5), (3, 5), (9_000, 9_000)):
        with pytest.raises(Stop):
            kernel.product_select(S, zeros, zeros, torch.zeros((2, 5)), torch.zeros((2, 40)), 3, exact=True, rel_tile=0.0,
                                  rel64=0.0, search_rows=search_rows)
        assert asked.pop() == blocks


def _wide(kind, n, d, rng):
    if kind == "grid":  # integer features (pixels, counts): exact float32 products, ties everywhere
        return rng.integers(0, 17, size=(n, d)).astype(np.float32)
    if kind == "duplicates":  # float rows repeated in blocks far larger than k
        X = rng.standard_normal((n, d)).astype(np.float32)
        X[: n // 3] = X[0]
        return X
    if kind == "far":  # clusters far from the origin: the products' error dwarfs the distances
        return (1e4 + rng.standard_normal((n, d)) * 1e-2).astype(np.float32)
    return rng.standard_normal((n, d)).astype(np.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["grid", "duplicates", "far", "float"])
@pytest.mark.parametrize("k", [1, 20, 100])
def test_equals_the_dense_path_and_the_host(kind, k, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    X = _wide(kind, 3000, 57, np.random.default_rng(0))
    ref = torch.from_numpy(X).cuda()
    m = get_metric("euclidean")
    found = {}
    for on in (True, False):
        monkeypatch.setattr(_product_select, "PRODUCT_SELECT", on)
        stats = {}
        found[on] = knn_search(ref, ref, k, m, exclude_self=True, device=ref.device, budget_bytes=1 << 28,
                               result_device=ref.device, backend="auto", stats=stats, dedupe=False)
        assert stats["selection"] == ("product_select" if on else "dense")
    assert torch.equal(found[True][0], found[False][0]) and torch.equal(found[True][1], found[False][1])
    monkeypatch.setattr(_product_select, "PRODUCT_SELECT", True)
    gpu_d, gpu_i = kneighbors(X, k=k, device="cuda")
    cpu_d, cpu_i = kneighbors(X, k=k, device="cpu")
    np.testing.assert_array_equal(gpu_i, cpu_i)
    np.testing.assert_array_equal(gpu_d, cpu_d)


@pytest.mark.gpu
def test_query_blocks_of_a_small_working_memory_and_other_queries():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    rng = np.random.default_rng(1)
    R = torch.from_numpy(_wide("float", 5000, 100, rng)).cuda()
    Q = torch.from_numpy(_wide("float", 700, 100, rng)).cuda()
    m = get_metric("sqeuclidean")
    for query, self_search in ((R, True), (Q, False)):
        whole = knn_search(R, query, 5, m, exclude_self=self_search, device=R.device, budget_bytes=1 << 28,
                           result_device=R.device, backend="auto", dedupe=False)
        stats = {}
        blocks = knn_search(R, query, 5, m, exclude_self=self_search, device=R.device, budget_bytes=1 << 20,
                            result_device=R.device, backend="auto", dedupe=False, stats=stats)
        assert stats["query_rows"] < query.shape[0]
        assert torch.equal(whole[0], blocks[0]) and torch.equal(whole[1], blocks[1])


@pytest.mark.gpu
def test_float64_data_and_k_equal_to_the_references():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    X = 1e6 + np.random.default_rng(2).standard_normal((120, 40))
    gpu_d, gpu_i = kneighbors(X, k=119, device="cuda")
    cpu_d, cpu_i = kneighbors(X, k=119, device="cpu")
    np.testing.assert_array_equal(gpu_i, cpu_i)
    np.testing.assert_array_equal(gpu_d, cpu_d)


@pytest.mark.gpu
@pytest.mark.parametrize("kinds", [["float", "far", "float"], ["grid", "grid", "float", "float"]])
def test_replayed_graphs_equal_the_eager_path(kinds, monkeypatch):
    """Small calls replay a captured product and selection; integer captures send float data the eager way."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    from gpumine.neighbors.engine import _graphs

    _graphs.clear_search_graphs()
    rng = np.random.default_rng(3)
    for call, kind in enumerate(kinds):
        X = _wide(kind, 900, 40, rng)
        Q = _wide(kind, 300, 40, rng)
        for args in ((X,), (X, Q)):
            got = kneighbors(*args, k=7, device="cuda")
            monkeypatch.setattr(_graphs, "GRAPH_SEARCHES", False)
            want = kneighbors(*args, k=7, device="cuda")
            monkeypatch.setattr(_graphs, "GRAPH_SEARCHES", True)
            host = kneighbors(*args, k=7, device="cpu")
            for a, b, c in zip(got, want, host):
                np.testing.assert_array_equal(a, b)
                np.testing.assert_array_equal(a, c)
    if "grid" not in kinds:  # an integer capture meeting float data is dropped (the shape goes eager)
        assert any(key[-1] == "product" for key in _graphs._graphs), "the repeated calls captured no product search"


@pytest.mark.gpu
def test_replayed_graphs_take_the_probed_float32_products_and_drop_them_where_rows_stay_open(monkeypatch):
    """A captured product search takes the float32 products its probe chose on the capture's data; a replay
    whose data leaves many rows to rescan (a duplicate block) is exact all the same and sends the shape the
    eager way."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    from gpumine.neighbors.engine import _graphs

    _graphs.clear_search_graphs()
    monkeypatch.setattr(_product_select, "FLOAT32_PROBE_MIN_PAIRS", 0)  # small shapes probe too
    rng = np.random.default_rng(5)
    try:
        for call, kind in enumerate(["float", "float", "float", "duplicates", "float"]):
            X = _wide(kind, 900, 40, rng)
            got = kneighbors(X, k=7, device="cuda")
            want = kneighbors(X, k=7, device="cpu")
            np.testing.assert_array_equal(got[1], want[1])
            np.testing.assert_array_equal(got[0], want[0])
            products = [entry.products for key, entry in _graphs._graphs.items() if key[-1] == "product"]
            if call == 2:  # captured on the second call, replayed on the third
                assert len(products) == 1 and (products[0].get("split") or products[0].get("rounded"))
        assert not any(key[-1] == "product" for key in _graphs._graphs)
    finally:
        _graphs.clear_search_graphs()


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["float", "grid"])
def test_data_known_not_whole_skips_the_integer_centre(kind, monkeypatch):
    """kneighbors' check on the device tells whether the data holds whole numbers only: float data skips
    the integer-centre check, integer data still takes its exact products; results equal the host's."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    from gpumine.neighbors.engine import _graphs

    monkeypatch.setattr(_graphs, "GRAPH_SEARCHES", False)
    calls = []
    real = _product_select.integer_centre_kind
    monkeypatch.setattr(_product_select, "integer_centre_kind", lambda *a: calls.append(1) or real(*a))
    rng = np.random.default_rng(6)
    X, Q = _wide(kind, 2000, 57, rng), _wide(kind, 500, 57, rng)
    for args in ((X,), (X, Q), (torch.from_numpy(X).cuda(), torch.from_numpy(Q).cuda())):
        calls.clear()
        got = kneighbors(*args, k=9, device="cuda")
        want = kneighbors(*(np.asarray(a.cpu()) if torch.is_tensor(a) else a for a in args), k=9, device="cpu")
        for a, b in zip(got, want):
            np.testing.assert_array_equal(np.asarray(a.cpu()) if torch.is_tensor(a) else a, b)
        assert len(calls) == (1 if kind == "grid" else 0)


def test_reference_memo_holds_for_the_same_tensor_unchanged_only():
    """Entries hold for the tensor they were made from as it was; a write, another tensor or a pickle clears them."""
    import pickle

    from gpumine.neighbors.engine import ReferenceMemo

    memo, ref = ReferenceMemo(), torch.arange(12.0).reshape(4, 3)
    assert memo.get(ref, "x") is None
    memo.put(ref, ("operands", "a"), 1)
    memo.put(ref, ("operands", "b"), 2, replaces=lambda name: name[0] == "operands")  # one set of operands at a time
    assert memo.get(ref, ("operands", "a")) is None and memo.get(ref, ("operands", "b")) == 2
    assert memo.get(ref.clone(), ("operands", "b")) is None  # another tensor
    assert memo.get(ref.T, ("operands", "b")) is None  # another layout of the same storage
    assert memo.ref_whole(ref)
    ref[0, 0] = 0.5  # a write through torch moves the version counter
    assert memo.get(ref, ("operands", "b")) is None
    assert not memo.ref_whole(ref)
    memo.put(ref, "y", 3)
    again = pickle.loads(pickle.dumps(memo))
    assert again.get(ref, "y") is None and memo.get(ref, "y") == 3
    from gpumine._device_state import move_tensors

    moved = move_tensors({"memo": memo}, torch.device("cpu"))["memo"]  # how estimators pickle their state
    assert isinstance(moved, ReferenceMemo) and moved.get(ref, "y") is None and memo.get(ref, "y") == 3
    with torch.inference_mode():  # inference tensors have no version counter: nothing is kept for them
        frozen = torch.arange(6.0).reshape(3, 2)
        memo.put(frozen, "z", 4)
        assert memo.get(frozen, "z") is None and memo.ref_whole(frozen)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["float", "grid", "far"])
def test_fitted_estimators_prepare_their_own_references_once(kind, monkeypatch):
    """An estimator's own GPU copy of its training data has its product operands prepared once for every
    search, and learns once that it is not whole numbers; a write to it starts over; results equal the host's."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    from gpumine.core.distance import Metric
    from gpumine.neighbors import NearestNeighbors
    from gpumine.neighbors.engine import _graphs

    monkeypatch.setattr(_graphs, "GRAPH_SEARCHES", False)
    from gpumine.neighbors.engine import _dense

    prepared, centres = [], []
    real_prepare, real_centre, real_operand = Metric.prepare, _product_select.integer_centre_kind, _dense._l2_operand
    monkeypatch.setattr(Metric, "prepare", lambda self, X, c, side: prepared.append(side) or real_prepare(self, X, c, side))
    monkeypatch.setattr(_dense, "_l2_operand", lambda X, c, side, *a: prepared.append(side) or real_operand(X, c, side, *a))
    monkeypatch.setattr(_product_select, "integer_centre_kind", lambda *a: centres.append(1) or real_centre(*a))
    rng = np.random.default_rng(7)
    X, Q = _wide(kind, 2000, 57, rng), _wide(kind, 300, 57, rng)
    nn = NearestNeighbors(n_neighbors=9, device="cuda").fit(X)
    host = NearestNeighbors(n_neighbors=9, device="cpu").fit(X)
    for call in range(3):
        prepared.clear(), centres.clear()
        for args in ((Q,), ()):
            for a, b in zip(nn.kneighbors(*args), host.kneighbors(*args)):
                np.testing.assert_array_equal(a, b)
        # integer data takes exact products: the integer centre comes with each search's queries
        want_ref = 0 if call and kind != "grid" else 2 if kind == "grid" else 1
        assert prepared.count("ref") == want_ref, (call, prepared)
        assert len(centres) == (2 if kind == "grid" else 0)
    nn._fit_X[0] += 1.0  # a write to the fitted copy: prepared again, results those of the new data
    prepared.clear()
    X2 = X.copy()
    X2[0] += 1.0
    for a, b in zip(nn.kneighbors(Q), NearestNeighbors(n_neighbors=9, device="cpu").fit(X2).kneighbors(Q)):
        np.testing.assert_array_equal(a, b)
    assert prepared.count("ref") == 1
    # the caller's own GPU tensor is not the estimator's to keep operands for
    assert NearestNeighbors(n_neighbors=9, device="cuda").fit(torch.from_numpy(X).cuda())._reference_memo is None


@pytest.mark.gpu
def test_larger_searches_come_here_only_with_exact_products(monkeypatch):
    """Past PRODUCT_SELECT_MAX_PAIRS pairs integer data runs here (equal to the path it would take otherwise);
    continuous data goes on to the fused-or-dense choice."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    g = torch.Generator(device="cuda").manual_seed(4)
    ref = torch.randint(0, 4, (1 << 17, 17), device="cuda", generator=g).float()
    query = ref[: (1 << 15) + 1] + 1.0
    assert query.shape[0] * ref.shape[0] > _product_select.PRODUCT_SELECT_MAX_PAIRS
    m = get_metric("euclidean")
    found = {}
    for on in (True, False):
        monkeypatch.setattr(_product_select, "PRODUCT_SELECT", on)
        stats = {}
        found[on] = knn_search(ref, query, 5, m, exclude_self=False, device=ref.device, budget_bytes=1 << 30,
                               result_device=ref.device, backend="auto", stats=stats)
        assert (stats["selection"] == "product_select") == on
    assert torch.equal(found[True][0], found[False][0]) and torch.equal(found[True][1], found[False][1])
    monkeypatch.setattr(_product_select, "PRODUCT_SELECT", True)
    stats = {}
    knn_search(ref + 0.5 * torch.rand(ref.shape, device="cuda", generator=g), query, 5, m, exclude_self=False,
               device=ref.device, budget_bytes=1 << 30, result_device=ref.device, backend="auto", stats=stats)
    assert stats.get("selection") != "product_select"


def test_probe_verdicts_are_remembered_per_unchanged_reference_tensor():
    from gpumine.neighbors.engine._product_select import _VERDICTS, _VERDICTS_KEPT, _remember_verdict, _remembered_verdict

    _VERDICTS.clear()
    ref = torch.zeros((5, 3))
    other = torch.ones((5, 3))
    _remember_verdict(ref, ref, 4, "split")
    assert _remembered_verdict(ref, ref, 4) == "split"
    assert _remembered_verdict(ref, ref, 5) is None  # another k
    assert _remembered_verdict(ref, other, 4) is None  # other queries than the references
    assert _remembered_verdict(ref[:4], ref[:4], 4) is None  # a view is another tensor
    _remember_verdict(ref, ref, 4, "float64")  # re-remembered: replaced, nothing else evicted
    assert _remembered_verdict(ref, ref, 4) == "float64" and len(_VERDICTS) == 1
    ref.add_(1.0)  # changed in place
    assert _remembered_verdict(ref, ref, 4) is None
    freed = torch.zeros((2, 2))
    _remember_verdict(freed, freed, 1, "rounded")
    del freed
    _remember_verdict(other, other, 4, "rounded")  # entries of freed tensors are dropped
    assert len(_VERDICTS) == 2
    kept = [torch.zeros(1) for _ in range(_VERDICTS_KEPT + 3)]
    for t in kept:
        _remember_verdict(t, t, 1, "split")
    assert len(_VERDICTS) == _VERDICTS_KEPT and _remembered_verdict(kept[-1], kept[-1], 1) == "split"
    _VERDICTS.clear()
