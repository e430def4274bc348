"""Product-selection Triton kernel vs its torch twin and a float64 NumPy oracle, and the search built on it.

Collected directly on a GPU machine (``pytest tests/neighbors/engine/triton_product_select_cases.py``),
and run by ``test_triton_kernels_under_the_interpreter.py`` in a child process with ``TRITON_INTERPRET=1``
on machines without one (small shapes: the interpreter is slow).
"""

import numpy as np
import pytest
import torch

from gpumine.core.distance import get_metric
from gpumine.neighbors.engine._dense import _rel, integer_centre
from gpumine.neighbors.engine._product_select import product_select_search
from gpumine.neighbors.engine._product_select_kernel import PRODUCT_SELECT_MAX_K, product_select, product_select_torch
from tests.neighbors.engine.triton_exact_select_cases import _oracle

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ON_GPU = DEVICE == "cuda"
SCALE = 16 if ON_GPU else 1
L2 = get_metric("sqeuclidean")


def _data(kind, n, d, rng):
    if kind == "float":
        return rng.standard_normal((n, d)).astype(np.float32)
    if kind == "grid":  # integer grid: exact float32 products, many exact ties
        return rng.integers(-2, 3, size=(n, d)).astype(np.float32)
    if kind == "duplicates":  # float rows repeated in blocks larger than k: ties the bound cannot split
        base = rng.standard_normal((max(1, n // 9), d)).astype(np.float32)
        return np.repeat(base, 9, axis=0)[:n] if n >= 9 else base[:n]
    if kind == "far":  # a tight cluster far from the origin: tile scores' error dwarfs the distances
        return (1e4 + 1e-2 * rng.standard_normal((n, d))).astype(np.float32)
    if kind == "equal":
        return np.full((n, d), 3.25, dtype=np.float32)
    raise ValueError(kind)


def _operands(X, Y, tile_dtype, k, exclude_self=False):
    """(S, offset, slack, exact) for queries X against references Y, as the search forms them."""
    ref, query = torch.tensor(Y, device=DEVICE), torch.tensor(X, device=DEVICE)
    centre = integer_centre(ref, query)
    exact = centre is not None
    dtype = torch.float32 if exact else tile_dtype
    if not exact:
        centre = L2.centre(ref.to(dtype))
    Rp = L2.prepare(ref.to(dtype), centre, "ref")
    Qp = L2.prepare(query.to(dtype), centre, "query")
    S = Qp["rows"] @ Rp["rows"].T
    offset, offset_error = L2.tile_offset(Qp, X.shape[1])
    if exact:
        slack = torch.zeros_like(offset, dtype=torch.float64)
    else:
        slack = L2.bounds(Qp, L2.ref_scale(Rp), X.shape[1], query.device, S[:, 0], S[:, 0])[0].double() + offset_error.double()
    return S, offset.double(), slack, exact, _rel(dtype, X.shape[1]), _rel(torch.float64, X.shape[1])


def _check(X, Y, k, tile_dtype=torch.float32, exclude_self=False, self_offset=0, views=False, **shape):
    S, offset, slack, exact, rel_tile, rel64 = _operands(X, Y, tile_dtype, k)
    if views:  # the row-major data read in place
        QT, RT = torch.tensor(X, device=DEVICE).T, torch.tensor(Y, device=DEVICE).T
    else:
        QT = torch.tensor(X.T.copy(), device=DEVICE)
        RT = torch.tensor(Y.T.copy(), device=DEVICE)
    kw = dict(exact=exact, rel_tile=rel_tile, rel64=rel64, exclude_self=exclude_self, self_offset=self_offset)
    stats = {}
    scores, index = product_select(S, offset, slack, QT, RT, k, **kw, **shape, stats=stats)
    twin_scores, twin_index = product_select_torch(S, offset, slack, QT, RT, k, **kw)
    want_scores, want_index = _oracle(X, Y, k, "sqeuclidean", exclude_self, self_offset)
    assert torch.equal(index.cpu(), twin_index.cpu())
    assert torch.equal(scores.cpu(), twin_scores.cpu())
    np.testing.assert_array_equal(index.cpu().numpy(), want_index)
    np.testing.assert_array_equal(scores.cpu().numpy(), want_scores)
    return exact, int(stats["rows_rescanned"])


@pytest.mark.parametrize("kind, k, exact", [("float", 5, False), ("grid", 7, True), ("duplicates", 4, False),
                                            ("far", 3, False), ("equal", 6, False)])
@pytest.mark.parametrize("tile_dtype", [torch.float32, torch.float64])
def test_kernel_equals_its_twin_and_the_oracle(kind, k, exact, tile_dtype):
    rng = np.random.default_rng(0)
    X = _data(kind, 23 * SCALE + 1, 35, rng)
    Y = _data(kind, 41 * SCALE + 2, 35, rng) if kind != "equal" else X[:30]
    found_exact, rescanned = _check(X, Y, k, tile_dtype, block_n=32)
    assert found_exact == exact  # the integer grid's products are exact
    if kind in ("duplicates", "equal"):  # ties across the margin: every row is rescanned
        assert rescanned == X.shape[0]
    elif kind == "float" or exact:
        assert rescanned == 0


@pytest.mark.parametrize("kind", ["float", "grid"])
def test_self_search_of_a_query_prefix_and_one_chunk_of_features(kind):
    rng = np.random.default_rng(1)
    Y = _data(kind, 37 * SCALE, 9, rng)
    _check(Y[3:20], Y, 5, torch.float64, exclude_self=True, self_offset=3, block_n=16)


def test_lists_past_the_placed_size_and_k_above_the_references():
    rng = np.random.default_rng(2)
    Y = _data("grid", 90, 33, rng)
    _check(Y[:7], Y, 70, torch.float64, block_n=32)  # C = 128: lists sorted after the kernel
    _check(Y[:5], Y[:6], 9, torch.float64, block_n=32)  # padding past the references
    F = _data("float", 90, 33, rng)
    _check(F[:7], F, 70, torch.float64, block_n=32)  # re-scored, lists sorted after the kernel
    _check(F[:5], F[:6], 9, torch.float64, block_n=32)


@pytest.mark.parametrize("kind, k, tile_dtype, splits", [("float", 5, torch.float64, 2), ("grid", 7, torch.float32, 3),
                                                          ("duplicates", 4, torch.float64, 7), ("far", 12, torch.float64, 1)])
def test_references_split_over_programs_then_merged(kind, k, tile_dtype, splits):
    # a self-search of a query prefix, its rows' own tiles in different splits; one split: the
    # first pass and the finish as two launches all the same
    rng = np.random.default_rng(8)
    Y = _data(kind, 61 * SCALE + 5, 34, rng)
    exact, rescanned = _check(Y[9:21], Y, k, tile_dtype, exclude_self=True, self_offset=9, block_n=16, splits=splits,
                              finish_apart=True)
    assert exact == (kind == "grid")
    # the merged lists are the one launch's: the same rows left open
    assert rescanned == _check(Y[9:21], Y, k, tile_dtype, exclude_self=True, self_offset=9, block_n=16, splits=1,
                               finish_apart=False)[1]
    # rows whose own tiles lie in the last splits: their scans wrap inside those
    _check(Y[-12:], Y, k, tile_dtype, exclude_self=True, self_offset=len(Y) - 12, block_n=16, splits=splits)
    _check(Y[:3], Y[:20], 9, tile_dtype, block_n=16, splits=splits)  # fewer tiles than splits


@pytest.mark.parametrize("kind, tile_dtype", [("float", torch.float32), ("duplicates", torch.float64)])
def test_first_pass_reads_of_several_tiles_give_the_same_lists(kind, tile_dtype):
    # reads of 4 tiles, walked one tile at a time where a list can take from them: the same lists
    # and open rows as reads of one tile, in a self-search whose rows start in a split's last read
    # and wrap, split or not, and in a plain search
    rng = np.random.default_rng(9)
    Y = _data(kind, 61 * SCALE + 5, 11, rng)
    for splits in (1, 2):
        kw = dict(exclude_self=True, self_offset=len(Y) - 6, block_n=16, splits=splits)
        assert _check(Y[-6:], Y, 6, tile_dtype, scan_n=64, **kw) == _check(Y[-6:], Y, 6, tile_dtype, scan_n=16, **kw)
    _check(Y[:3], Y, 3, tile_dtype, block_n=16, scan_n=32)


@pytest.mark.parametrize("kind", ["float", "duplicates", "equal"])
def test_reads_walked_by_their_least_scores_in_windows_give_the_same_lists(kind):
    # windows of 2 reads of 16 columns: minima kept, reads walked in ascending order of them, per
    # window; the same lists and open rows as one window over every read, split or not
    rng = np.random.default_rng(11)
    Y = _data(kind, 53 * SCALE + 7, 12, rng) if kind != "equal" else _data(kind, 53, 12, rng)
    for splits in (1, 3):
        kw = dict(exclude_self=True, self_offset=5, block_n=16, scan_n=16, splits=splits)
        assert _check(Y[5:14], Y, 5, torch.float64, window_tiles=2, **kw) == _check(Y[5:14], Y, 5, torch.float64,
                                                                                   window_tiles=64, **kw)
    _check(Y[:4], Y, 7, torch.float32, block_n=16, scan_n=32, window_tiles=1)


def test_references_in_descending_order_of_distance():
    # every reference nearer than the ones before it (sorted data read against queries past its
    # end): lists that would take each element in scan order take the same entries walked by minima
    rng = np.random.default_rng(12)
    t = np.arange(70 * SCALE, dtype=np.float32)[::-1]
    Y = (t[:, None] * rng.uniform(0.5, 1.5, 20).astype(np.float32)[None, :]
         + 0.01 * rng.standard_normal((t.size, 20)).astype(np.float32))
    X = -1.0 - rng.random((9, 20)).astype(np.float32)
    for tile_dtype in (torch.float32, torch.float64):
        _check(X, Y, 6, tile_dtype, block_n=16, scan_n=32, window_tiles=4)
        _check(X, Y, 6, tile_dtype, block_n=16)


def test_a_read_tied_with_the_worst_entry_is_walked_for_its_lower_ids():
    # read 1 (columns 16-31) holds the least score and is walked first; its other entries tie with
    # every entry of read 0, whose lower ids must then replace them: the list is 1 @ 16, 3 @ 0, 1, ...
    S = torch.full((2, 48), 3.0, device=DEVICE)
    S[:, 16] = 1.0
    S[1, 40] = 0.5  # and a row whose least score lies in a later read
    zeros = torch.zeros(2, dtype=torch.float64, device=DEVICE)
    QT, RT = torch.zeros((1, 2), device=DEVICE), torch.zeros((1, 48), device=DEVICE)
    kw = dict(exact=True, rel_tile=0.0, rel64=0.0)
    for window in (1, 2, 4):
        scores, index = product_select(S, zeros, zeros, QT, RT, 5, block_n=16, scan_n=16, window_tiles=window, **kw)
        twin_scores, twin_index = product_select_torch(S, zeros, zeros, QT, RT, 5, **kw)
        assert index.tolist() == twin_index.tolist() == [[16, 0, 1, 2, 3], [40, 16, 0, 1, 2]]
        assert torch.equal(scores.cpu(), twin_scores.cpu())


@pytest.mark.parametrize("exact", [True, False])
def test_reads_whose_minima_the_offset_rounds_to_one_value(exact):
    # scores 2^-53, 0 and 2^-54 in reads 0, 1 and 2 all become 3.0 once the offset is added: read 1
    # is walked first (least score), and read 0's lower ids must still replace its tied entries
    S = torch.empty((1, 48), dtype=torch.float64, device=DEVICE)
    S[0, :16], S[0, 16:32], S[0, 32:] = 2.0**-53, 0.0, 2.0**-54
    offset = torch.full((1,), 3.0, dtype=torch.float64, device=DEVICE)
    QT, RT = torch.zeros((1, 1), device=DEVICE), torch.ones((1, 48), device=DEVICE)
    if exact:
        slack, kw = torch.zeros_like(offset), dict(exact=True, rel_tile=0.0, rel64=0.0)
    else:  # every exact score is 1.0, within the slack of the tile scores
        slack, kw = torch.full_like(offset, 2.5), dict(exact=False, rel_tile=0.0, rel64=1e-15)
    twin = product_select_torch(S, offset, slack, QT, RT, 3, **kw)
    assert twin[1].tolist() == [[0, 1, 2]]
    for window in (1, 2, 4):
        scores, index = product_select(S, offset, slack, QT, RT, 3, block_n=16, scan_n=16, window_tiles=window, **kw)
        assert torch.equal(index.cpu(), twin[1].cpu()) and torch.equal(scores.cpu(), twin[0].cpu())


def test_random_launch_shapes_and_scores_against_the_twin():
    # rows of two to four queries in one program or two, splits, windows, self-exclusion anywhere,
    # +inf entries, rows falling along their columns, and scores the offset rounds together
    for seed in range(24):
        rng = np.random.default_rng(100 + seed)
        n_query, n_ref, k = int(rng.integers(2, 5)), int(rng.integers(20, 90)), int(rng.integers(1, 10))
        values = np.asarray([0.0, 2.0**-54, 2.0**-53, 1.0, 2.0]) if seed % 3 == 0 else np.arange(6.0)
        S = torch.tensor(rng.choice(values, (n_query, n_ref)), dtype=torch.float64, device=DEVICE)
        if seed % 2:
            S = S.sort(1, descending=True).values
        if seed % 4 == 1:
            S[torch.tensor(rng.random((n_query, n_ref)) < 0.3, device=DEVICE)] = float("inf")
        offset = torch.tensor(rng.choice([3.0, 0.0, -1.0], n_query), dtype=torch.float64, device=DEVICE)
        zeros = torch.zeros(n_query, dtype=torch.float64, device=DEVICE)
        QT, RT = torch.zeros((1, n_query), device=DEVICE), torch.zeros((1, n_ref), device=DEVICE)
        kw = dict(exact=True, rel_tile=0.0, rel64=0.0, exclude_self=bool(seed % 5 < 2),
                  self_offset=int(rng.integers(-2, n_ref)))
        shape = dict(block_m=int(rng.choice([1, 2])), block_n=16, num_warps=1, scan_n=int(rng.choice([16, 32])),
                     window_tiles=int(rng.choice([1, 2, 4])), splits=int(rng.integers(1, 4)))
        scores, index = product_select(S, offset, zeros, QT, RT, k, **kw, **shape)
        twin_scores, twin_index = product_select_torch(S, offset, zeros, QT, RT, k, **kw)
        assert torch.equal(index.cpu(), twin_index.cpu()), (seed, shape)
        assert torch.equal(scores.cpu(), twin_scores.cpu()), (seed, shape)


@pytest.mark.skipif(not ON_GPU, reason="a timing ratio: the interpreter's times say nothing of a GPU's")
def test_scores_in_descending_order_cost_a_small_multiple_of_random_ones():
    import time

    n, m = 3000, 32768
    g = torch.Generator(device=DEVICE).manual_seed(0)
    random = torch.rand((n, m), device=DEVICE, generator=g)
    QT, RT = torch.rand((8, n), device=DEVICE), torch.rand((8, m), device=DEVICE)
    zeros = torch.zeros(n, dtype=torch.float64, device=DEVICE)
    kw = dict(exact=True, rel_tile=0.0, rel64=0.0)

    def best_of(S, repeats=5):
        product_select(S, zeros, zeros, QT, RT, 7, **kw)
        times = []
        for _ in range(repeats):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            product_select(S, zeros, zeros, QT, RT, 7, **kw)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return min(times)

    descending = random.sort(1, descending=True).values
    assert best_of(descending) < 2.0 * best_of(random)


@pytest.mark.parametrize("kind", ["float", "duplicates"])
def test_row_major_data_read_in_place(kind):
    # the finish's and the rescans' gathers through a view's strides: the same lists and open rows
    rng = np.random.default_rng(10)
    Y = _data(kind, 29 * SCALE + 3, 13, rng)
    kw = dict(exclude_self=True, self_offset=4, block_n=16)
    assert _check(Y[4:15], Y, 5, torch.float32, views=True, **kw) == _check(Y[4:15], Y, 5, torch.float32, **kw)


def test_rows_holding_every_reference_are_final_without_a_rescan():
    rng = np.random.default_rng(5)
    Y = _data("float", 10, 40, rng)  # fewer references than the 16 candidates kept for k = 5
    exact, rescanned = _check(Y, Y, 5, torch.float64, exclude_self=True, block_n=32)
    assert not exact and rescanned == 0


def test_argument_errors():
    S = torch.zeros((3, 4), device=DEVICE)
    zeros = torch.zeros(3, dtype=torch.float64, device=DEVICE)
    QT, RT = torch.zeros((2, 3), device=DEVICE), torch.zeros((2, 4), device=DEVICE)
    kw = dict(exact=True, rel_tile=0.0, rel64=0.0)
    with pytest.raises(ValueError, match="k must be between 1 and"):
        product_select(S, zeros, zeros, QT, RT, PRODUCT_SELECT_MAX_K + 1, **kw)
    with pytest.raises(ValueError, match="offset and slack"):
        product_select(S, zeros[:2], zeros, QT, RT, 2, **kw)
    with pytest.raises(ValueError, match="feature-major"):
        product_select(S, zeros, zeros, QT, RT[:, :3], 2, **kw)
    with pytest.raises(ValueError, match="splits must be at least 1"):
        product_select(S, zeros, zeros, QT, RT, 2, splits=0, **kw)
    with pytest.raises(ValueError, match="scan_n must be a power of two"):
        product_select(S, zeros, zeros, QT, RT, 2, block_n=16, scan_n=48, **kw)
    with pytest.raises(ValueError, match="window_tiles must be a power of two"):
        product_select(S, zeros, zeros, QT, RT, 2, window_tiles=3, **kw)


@pytest.mark.parametrize("kind", ["float", "grid", "far"])
@pytest.mark.parametrize("self_search", [True, False])
def test_search_in_query_blocks_equals_the_oracle(kind, self_search):
    rng = np.random.default_rng(3)
    Y = _data(kind, 45 * SCALE, 37, rng)
    X = Y if self_search else _data(kind, 29 * SCALE, 37, rng)
    ref = torch.tensor(Y, device=DEVICE)
    query = ref if self_search else torch.tensor(X, device=DEVICE)
    stats = {}
    # a working memory of a few query rows per block
    keys, index = product_select_search(ref, query, 6, get_metric("euclidean"), exclude_self=self_search,
                                        budget_bytes=7 * (Y.shape[0] * 8 + 45 * 8), stats=stats)
    assert stats["selection"] == "product_select" and stats["query_rows"] < X.shape[0]
    want_scores, want_index = _oracle(X, Y, 6, "sqeuclidean", self_search)
    np.testing.assert_array_equal(index.cpu().numpy(), want_index)
    np.testing.assert_array_equal(keys.cpu().numpy(), want_scores)


def test_search_of_float64_data_far_from_the_origin():
    rng = np.random.default_rng(4)
    Y = 1e6 + rng.standard_normal((33 * SCALE, 40))
    ref = torch.tensor(Y, device=DEVICE)
    keys, index = product_select_search(ref, ref, 4, get_metric("euclidean"), exclude_self=True, budget_bytes=1 << 20)
    want_scores, want_index = _oracle(Y, Y, 4, "sqeuclidean", True)
    np.testing.assert_array_equal(index.cpu().numpy(), want_index)
    np.testing.assert_array_equal(keys.cpu().numpy(), want_scores)


def _outlier_data(n, d, rng):
    """A tight cloud and two far rows: every row's float32 bound (from the largest norm) dwarfs its distances."""
    X = (1e-2 * rng.standard_normal((n, d))).astype(np.float32)
    X[[3, n - 5]] = 3e3
    return X


@pytest.mark.parametrize("self_search", [True, False])
def test_float32_probe_keeps_float32_products_only_where_they_certify(monkeypatch, self_search):
    from gpumine.neighbors.engine import _product_select
    from gpumine.neighbors.engine._dense import DenseReferences

    monkeypatch.setattr(_product_select, "probes_float32", lambda *shape: True)
    monkeypatch.setattr(_product_select, "FLOAT32_PROBE_ROWS", 9)
    rng = np.random.default_rng(8)
    for data, certifies in ((_data("float", 24 * SCALE, 9, rng), True), (_outlier_data(24 * SCALE, 9, rng), False)):
        ref = torch.tensor(data, device=DEVICE)
        query = ref if self_search else torch.tensor(data[::3] + 1e-3, device=DEVICE)
        refs = DenseReferences(ref, 5, L2, exclude_self=self_search, tile_dtype=torch.float32)
        assert _product_select.float32_certifies(refs, query, ref.T.contiguous()) is certifies
        stats = {}
        keys, index = product_select_search(ref, query, 5, L2, exclude_self=self_search, budget_bytes=1 << 20, stats=stats)
        assert stats["float32_probe_rows"] == min(9, query.shape[0])
        assert (stats["float32_probe_open"] == 0) is certifies
        if certifies:
            assert stats["tile_dtype"] == "float32"
        want_scores, want_index = _oracle(query.cpu().numpy(), data, 5, "sqeuclidean", self_search)
        np.testing.assert_array_equal(index.cpu().numpy(), want_index)
        np.testing.assert_array_equal(keys.cpu().numpy(), want_scores)
        if not certifies:
            continue
        # the same references again: the verdict is remembered; changed in place: probed again
        again = {}
        product_select_search(ref, query, 5, L2, exclude_self=self_search, budget_bytes=1 << 20, stats=again)
        assert again["float32_probe_rows"] == 0 and again["tile_dtype"] == stats["tile_dtype"]
        ref.mul_(1.0)
        product_select_search(ref, ref if self_search else query, 5, L2, exclude_self=self_search, budget_bytes=1 << 20,
                              stats=again)
        assert again["float32_probe_rows"] == min(9, query.shape[0])


def test_without_rescan_open_rows_are_counted_and_certified_rows_final():
    rng = np.random.default_rng(12)
    Y = np.concatenate([_data("duplicates", 18 * SCALE, 35, rng), _data("float", 18 * SCALE, 35, rng)])
    S, offset, slack, exact, rel_tile, rel64 = _operands(Y, Y, torch.float32, 4)
    T = torch.tensor(Y.T.copy(), device=DEVICE)
    kw = dict(exact=exact, rel_tile=rel_tile, rel64=rel64, exclude_self=True, block_n=32)
    full, counted = {}, {}
    scores, index = product_select(S, offset, slack, T, T, 4, **kw, stats=full)
    _, index_unscanned = product_select(S, offset, slack, T, T, 4, **kw, rescan=False, stats=counted)
    assert int(counted["rows_rescanned"]) == int(full["rows_rescanned"]) > 0
    # the duplicated rows (ties across the margin) are the open ones; the rest equal the full search
    tail = slice(18 * SCALE, None)
    assert torch.equal(index_unscanned[tail].cpu(), index[tail].cpu())


def test_rounded_float64_products_where_split_ones_leave_rows_open(monkeypatch):
    from gpumine.neighbors.engine import _product_select

    monkeypatch.setattr(_product_select, "probes_float32", lambda *shape: True)
    monkeypatch.setattr(_product_select, "FLOAT32_PROBE_ROWS", 9)
    rng = np.random.default_rng(9)
    data = rng.standard_normal((24 * SCALE, 9)).astype(np.float32)
    data[[3, 20]] = 300.0  # split products' bound dwarfs the cloud's distances, rounded ones' does not
    ref = torch.tensor(data, device=DEVICE)
    stats = {}
    keys, index = product_select_search(ref, ref, 5, L2, exclude_self=True, budget_bytes=1 << 20, stats=stats)
    assert stats["float32_probes"] == 2 and stats["products"] == "rounded" and stats["score_dtype"] == "float32"
    want_scores, want_index = _oracle(data, data, 5, "sqeuclidean", True)
    np.testing.assert_array_equal(index.cpu().numpy(), want_index)
    np.testing.assert_array_equal(keys.cpu().numpy(), want_scores)
