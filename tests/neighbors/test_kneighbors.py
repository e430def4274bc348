"""The functional kNN engine against a float64 brute-force oracle under the tie rule."""

import numpy as np
import pytest
import torch

from gpumine.neighbors import kneighbors
from gpumine.neighbors.engine._search import candidate_count
from helpers import DEVICES, skip_if_no_cuda
from knn_oracle import assert_knn_matches, brute_force_knn

METRICS = ["euclidean", "sqeuclidean", "manhattan", "chebyshev", "cosine", "inner_product"]
# working_memory values (MiB) that force many small tiles, a few tiles, and one tile
BUDGETS = [0.02, 0.5, None]


def _data(kind, n, d, seed):
    rng = np.random.default_rng(seed)
    if kind == "random":
        return rng.standard_normal((n, d)).astype(np.float32)
    if kind == "integer":  # many exact ties
        return rng.integers(0, 3, (n, d)).astype(np.float32)
    if kind == "duplicates":
        base = rng.standard_normal((n // 4, d)).astype(np.float32)
        return base[rng.integers(0, len(base), n)]
    if kind == "far":  # clustered far from the origin: the |x|^2+|y|^2-2xy expansion cancels
        return (1e4 + rng.standard_normal((n, d))).astype(np.float32)
    raise ValueError(kind)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("kind", ["random", "integer", "duplicates", "far"])
@pytest.mark.parametrize("budget", BUDGETS)
def test_matches_float64_oracle(device, metric, kind, budget):
    skip_if_no_cuda(device)
    X = _data(kind, 157, 5, seed=1)
    Q = _data(kind, 41, 5, seed=2)
    if kind in ("integer", "duplicates"):
        Q[:10] = X[:10]  # queries equal to reference points
    k = 9
    d, i = kneighbors(X, Q, k, metric=metric, device=device, working_memory=budget)
    assert d.shape == (41, k) and i.shape == (41, k)
    if kind == "integer" and metric not in ("cosine",):
        # small integers: float32 distances are exact, so indices must equal the tie-rule oracle
        ref_d, ref_i, _ = brute_force_knn(X, Q, k, metric)
        np.testing.assert_array_equal(i, ref_i)
    rtol = 1e-4 if kind == "far" else 1e-5
    assert_knn_matches(d, i, X, Q, k, metric, rtol=rtol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["random", "integer", "duplicates"])
@pytest.mark.parametrize("k", [1, 7, 156])
def test_all_knn_excludes_self(device, kind, k):
    skip_if_no_cuda(device)
    X = _data(kind, 157, 3, seed=3)
    d, i = kneighbors(X, None, k, device=device, working_memory=0.05)
    assert_knn_matches(d, i, X, X, k, exclude_self=True)
    if kind == "integer":
        np.testing.assert_array_equal(i, brute_force_knn(X, X, k, exclude_self=True)[1])


@pytest.mark.parametrize("device", DEVICES)
def test_k_equals_n_returns_every_reference_in_tie_order(device):
    skip_if_no_cuda(device)
    X = np.zeros((20, 2), np.float32)  # all distances equal: order must be 0..n-1
    d, i = kneighbors(X, X[:3], 20, device=device)
    np.testing.assert_array_equal(i, np.tile(np.arange(20), (3, 1)))
    np.testing.assert_array_equal(d, 0)


def test_minkowski_p():
    X = _data("random", 80, 4, 5)
    d, i = kneighbors(X, X[:10], 6, metric="minkowski", p=3, device="cpu")
    assert_knn_matches(d, i, X, X[:10], 6, "minkowski", p=3)


def test_results_do_not_depend_on_tiling_and_are_deterministic():
    X = _data("duplicates", 400, 6, 7)
    runs = [kneighbors(X, k=12, device="cpu", working_memory=wm) for wm in (0.03, 0.2, 1, None, None)]
    for d, i in runs[1:]:
        np.testing.assert_array_equal(i, runs[0][1])
        np.testing.assert_array_equal(d, runs[0][0])


def test_float64_input_gives_float64_results_matching_oracle_tightly():
    X = _data("far", 200, 8, 9).astype(np.float64)
    d, i = kneighbors(X, X[:20], 5, device="cpu")
    assert d.dtype == np.float64
    assert_knn_matches(d, i, X, X[:20], 5, rtol=1e-12, atol=1e-12)


def test_large_k_above_candidate_margin():
    X = _data("random", 3000, 4, 11)
    k = 2048
    assert candidate_count(k, 3000) > k
    d, i = kneighbors(X, X[:4], k, device="cpu", working_memory=8)
    assert_knn_matches(d, i, X, X[:4], k)


def test_output_kind_follows_input():
    X = _data("random", 30, 3, 12)
    d, i = kneighbors(torch.from_numpy(X), k=2, device="cpu")
    assert isinstance(d, torch.Tensor) and isinstance(i, torch.Tensor) and i.dtype == torch.int64
    d, i = kneighbors(X.tolist(), [[0.0, 0.0, 0.0]], k=2, device="cpu")
    assert isinstance(d, np.ndarray) and d.dtype == np.float64  # lists compute in float64, as scikit-learn
    ro = X.copy()
    ro.setflags(write=False)
    d2, i2 = kneighbors(ro, ro, k=2, device="cpu")
    assert isinstance(i2, np.ndarray)


def test_empty_query_gives_empty_result():
    X = _data("random", 30, 3, 13)
    d, i = kneighbors(X, np.empty((0, 3), np.float32), k=4, device="cpu")
    assert d.shape == (0, 4) and i.shape == (0, 4)


def test_zero_vectors_under_cosine_are_at_distance_one():
    X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 2.0]], np.float32)
    d, i = kneighbors(X, np.array([[0.0, 0.0]], np.float32), k=4, metric="cosine", device="cpu")
    np.testing.assert_array_equal(i, [[0, 1, 2, 3]])
    np.testing.assert_allclose(d, 1.0)


def test_inner_product_returns_similarities_largest_first():
    X = np.array([[1.0, 0.0], [2.0, 0.0], [0.5, 0.0]], np.float32)
    d, i = kneighbors(X, np.array([[1.0, 0.0]], np.float32), k=3, metric="ip", device="cpu")
    np.testing.assert_array_equal(i, [[1, 0, 2]])
    np.testing.assert_allclose(d, [[2.0, 1.0, 0.5]])


def test_bad_input_errors():
    X = _data("random", 10, 3, 14)
    with pytest.raises(ValueError, match="k <= n_samples_fit"):
        kneighbors(X, X, 11, device="cpu")
    with pytest.raises(ValueError, match="each query is excluded"):
        kneighbors(X, None, 10, device="cpu")
    with pytest.raises(ValueError, match="X_query has 2 features but X_ref has 3"):
        kneighbors(X, X[:, :2], 2, device="cpu")
    with pytest.raises(ValueError, match="Unknown metric 'no-such-metric'"):
        kneighbors(X, X, 2, metric="no-such-metric", device="cpu")
    with pytest.raises(ValueError, match="X_query contains NaN"):
        kneighbors(X, np.full((1, 3), np.nan), 2, device="cpu")
    with pytest.raises(ValueError, match="X_ref is empty"):
        kneighbors(np.empty((0, 3)), X, 1, device="cpu")
    with pytest.raises(TypeError, match="k must be a positive integer"):
        kneighbors(X, X, 2.5, device="cpu")
    with pytest.raises(ValueError, match="working_memory=.* is too small"):
        kneighbors(X, X, 2, device="cpu", working_memory=1e-6)
    with pytest.raises(ValueError, match="p must be a number >= 1"):
        kneighbors(X, X, 2, metric="minkowski", p=0.5, device="cpu")


def test_explicit_triton_backend_is_refused_where_triton_cannot_run(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    X = _data("random", 10, 3, 15)
    with pytest.raises(ValueError, match="backend='triton'"):
        kneighbors(X, X, 2, device="cpu", backend="triton")


@pytest.mark.gpu
def test_streamed_references_match_resident(monkeypatch):
    skip_if_no_cuda("cuda")
    import gpumine.neighbors.engine._plan as plan

    X = _data("duplicates", 5000, 7, 16)
    Q = _data("random", 700, 7, 17)
    resident = kneighbors(X, Q, 10, device="cuda", working_memory=4)
    import gpumine.neighbors._api as api

    monkeypatch.setattr(plan, "fits_on_device", lambda *a, **k: False)
    monkeypatch.setattr(api, "fits_on_device", lambda *a, **k: False)  # host data stays on the host
    streamed = kneighbors(X, Q, 10, device="cuda", working_memory=4)
    np.testing.assert_array_equal(streamed[1], resident[1])
    np.testing.assert_array_equal(streamed[0], resident[0])
    assert_knn_matches(*streamed, X, Q, 10)


@pytest.mark.gpu
@pytest.mark.parametrize("stays_on_host", [False, True])
def test_non_finite_input_for_a_gpu_is_refused_with_its_name_and_row(monkeypatch, stays_on_host):
    skip_if_no_cuda("cuda")
    import gpumine.neighbors._api as api

    if stays_on_host:  # too large to copy: checked on the host before streaming
        monkeypatch.setattr(api, "fits_on_device", lambda *a, **k: False)
    X = _data("random", 50, 3, 18)
    bad = X.copy()
    bad[7, 1] = np.inf
    bad[9, 0] = np.nan
    for ref, query, name in ((bad, X, "X_ref"), (X, bad, "X_query"), (bad, None, "X_ref")):
        with pytest.raises(ValueError, match=rf"{name} contains NaN or infinity \(2 non-finite value\(s\), first at row 7\)"):
            kneighbors(ref, query, 3, device="cuda")
        with pytest.raises(ValueError, match=f"{name} contains NaN"):
            kneighbors(torch.from_numpy(ref).cuda(), None if query is None else torch.from_numpy(query).cuda(), 3, device="cuda")
    # huge values are scaled, not refused, and empty queries pass
    big = X * 2.0**100  # a power of two: the same order
    d, i = kneighbors(big, big[:5], 3, device="cuda")
    np.testing.assert_array_equal(i, kneighbors(X, X[:5], 3, device="cuda")[1])
    assert kneighbors(X, X[:0], 3, device="cuda")[1].shape == (0, 3)


@pytest.mark.gpu
def test_gpu_equals_cpu_bitwise_indices():
    skip_if_no_cuda("cuda")
    X = _data("integer", 3000, 4, 18)
    cpu = kneighbors(X, k=16, device="cpu")
    gpu = kneighbors(X, k=16, device="cuda")
    np.testing.assert_array_equal(cpu[1], gpu[1])
    t = torch.from_numpy(X).cuda()
    d, i = kneighbors(t, k=16, device="cuda")
    assert d.is_cuda and i.is_cuda
    np.testing.assert_array_equal(i.cpu().numpy(), cpu[1])


@pytest.mark.parametrize("kind", ["random", "duplicates", "integer"])
@pytest.mark.parametrize("budget", [0.3, None])
def test_two_stage_tile_selection_matches_oracle(kind, budget):
    # enough references that tiles use the group-minimum stage, and a ragged tail
    X = _data(kind, 2003, 3, seed=21)
    Q = _data(kind, 60, 3, seed=22)
    d, i = kneighbors(X, Q, 5, device="cpu", working_memory=budget)
    assert_knn_matches(d, i, X, Q, 5)
    if kind == "integer":
        np.testing.assert_array_equal(i, brute_force_knn(X, Q, 5)[1])


def test_heavy_ties_take_one_retry_then_the_exact_scan(monkeypatch):
    import gpumine.neighbors.engine._search as engine
    from gpumine.core.distance import get_metric
    from gpumine.neighbors.engine import _host as _cpu_search

    monkeypatch.setattr(_cpu_search, "CPU_TREE_SEARCH", False)  # the tile engine's retries, not the host tree

    def run(X):
        stats = {}
        t = torch.from_numpy(X)
        d, i = engine.knn_search(t, t, 4, get_metric("euclidean"), exclude_self=True, device=torch.device("cpu"),
                                 budget_bytes=2**26, result_device=torch.device("cpu"), stats=stats)
        np.testing.assert_array_equal(i.numpy(), brute_force_knn(X, X, 4, exclude_self=True)[1])
        return stats

    random_stats = run(_data("random", 1000, 4, 23))
    assert random_stats["rows_retried"] == 0 and random_stats["rows_exact_scan"] == 0
    # every distance ties: one wider retry (bounded work), then one exact scan settles every row
    monkeypatch.setattr(engine, "DEDUP_MIN_PAIRS", 1 << 40)
    tied = run(np.zeros((1000, 2), np.float32))
    assert tied["rows_retried"] == 1000 and tied["rows_exact_scan"] == 1000
    # searched through the distinct rows, the same data needs neither
    monkeypatch.setattr(engine, "DEDUP_MIN_PAIRS", 0)
    deduped = run(np.zeros((1000, 2), np.float32))
    assert deduped["distinct_rows"] == 1 and deduped["rows_retried"] == 0 and deduped["rows_exact_scan"] == 0


@pytest.mark.parametrize("scale", [1e-24, 1e-15, 1e15, 3e19])
@pytest.mark.parametrize("metric", ["euclidean", "cosine", "manhattan"])
def test_data_near_the_ends_of_the_float32_range(scale, metric):
    # squares of such values overflow or underflow float32; the engine rescales by a power of two
    rng = np.random.default_rng(24)
    X = (rng.standard_normal((40, 3)) * scale).astype(np.float32)
    Q = (rng.standard_normal((2, 3)) * scale).astype(np.float32)
    d, i = kneighbors(X, Q, 3, metric=metric, device="cpu")
    ref_d, ref_i, _ = brute_force_knn(X, Q, 3, metric)
    np.testing.assert_array_equal(i, ref_i)
    np.testing.assert_allclose(d, ref_d, rtol=1e-5)


def test_overflowing_tile_scores_do_not_certify_a_wrong_row():
    ref = np.zeros((26, 2), np.float32)
    ref[:5] = np.random.RandomState(0).randn(5, 2)
    ref[5:15, 1], ref[15:25, 1], ref[25] = 1.9e19, -1.9e19, [2.0e19, 0]
    d, i = kneighbors(ref, np.array([[2.0e19, 0]], np.float32), k=1, device="cpu")
    assert i.tolist() == [[25]] and d.tolist() == [[0.0]]


def test_fortran_order_and_reversed_inputs_keep_the_tie_rule():
    rng = np.random.default_rng(25)
    base = rng.standard_normal((40, 17))
    X = np.repeat(base[:1], 3000, 0)
    X[:50] = rng.standard_normal((50, 17)) * 5
    Q = base[:1] + 0.01 * rng.standard_normal((30, 17))
    c_order = kneighbors(X.astype(np.float32), Q.astype(np.float32), 5, device="cpu")
    f_order = kneighbors(np.asfortranarray(X.astype(np.float32)), Q.astype(np.float32), 5, device="cpu")
    np.testing.assert_array_equal(c_order[1], f_order[1])
    np.testing.assert_array_equal(c_order[1][:, 0], 50)
    reversed_view = X.astype(np.float32)[::-1]
    d, i = kneighbors(reversed_view, Q.astype(np.float32), 5, device="cpu")
    assert i.shape == (30, 5)


def test_minkowski_duplicates_tie_whatever_the_tiling():
    rng = np.random.default_rng(26)
    base = rng.standard_normal((20, 3)).astype(np.float32)
    ref = np.concatenate([base] * 5)
    q = rng.standard_normal((6, 3)).astype(np.float32)
    runs = [kneighbors(ref, q, 7, metric="minkowski", p=3, device="cpu", working_memory=wm)[1] for wm in (1024, 0.01)]
    np.testing.assert_array_equal(runs[0], runs[1])
    np.testing.assert_array_equal(runs[0], brute_force_knn(ref, q, 7, "minkowski", p=3)[1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("precision", ["tf32", "bf16"])
@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "cosine", "inner_product"])
@pytest.mark.parametrize("kind", ["random", "integer", "duplicates", "far"])
def test_reduced_precision_search_gives_the_exact_results(device, precision, metric, kind):
    # tf32/bf16 only change the candidate search; the exact re-rank and the widened
    # certificate must give bit-identical results to precision="exact"
    skip_if_no_cuda(device)
    X = _data(kind, 301, 12, seed=3)
    Q = _data(kind, 53, 12, seed=4)
    if kind in ("integer", "duplicates"):
        Q[:10] = X[:10]
    for k, budget in ((1, None), (9, 0.05), (40, None)):
        exact = kneighbors(X, Q, k, metric=metric, device=device, working_memory=budget)
        reduced = kneighbors(X, Q, k, metric=metric, device=device, working_memory=budget, precision=precision)
        np.testing.assert_array_equal(reduced[1], exact[1])
        np.testing.assert_array_equal(reduced[0], exact[0])
        assert_knn_matches(*reduced, X, Q, k, metric)


def test_reduced_precision_keeps_a_wider_candidate_list():
    assert candidate_count(7, 10_000, "bf16") > candidate_count(7, 10_000, "exact")
    assert candidate_count(7, 30, "tf32") == 30


@pytest.mark.parametrize("bad", ["fp8", "float32", None, 16])
def test_precision_is_validated(bad):
    X = np.zeros((4, 2), np.float32)
    with pytest.raises(ValueError, match="precision must be one of"):
        kneighbors(X, k=1, device="cpu", precision=bad)


def test_reduced_precision_needs_float32_data():
    X = np.random.default_rng(0).random((20, 3))  # float64
    with pytest.raises(ValueError, match="precision='tf32'.*float64.*precision='exact'"):
        kneighbors(X, k=2, device="cpu", precision="tf32")
    from gpumine.neighbors import NearestNeighbors

    with pytest.raises(ValueError, match="precision='bf16'"):
        NearestNeighbors(n_neighbors=2, device="cpu", precision="bf16").fit(X)
    model = NearestNeighbors(n_neighbors=2, device="cpu", precision="bf16").fit(X.astype(np.float32))
    np.testing.assert_array_equal(model.kneighbors()[1], kneighbors(X.astype(np.float32), k=2, device="cpu")[1])


@pytest.mark.parametrize("d", [1, 3, 8, 20])
def test_curve_codes_interleave_the_quantised_features_bit_by_bit(d):
    from gpumine.neighbors.engine._curve import _CurveOrder

    X = torch.from_numpy(_data("random", 300, d, 19))
    order = _CurveOrder(X)
    Q = X[:50] * 1.5  # partly outside the references' range: clamped to the end levels
    levels = 1 << order.bits
    q = ((Q[:, order.dims] - order.lo) / order.span * levels).floor().clamp(0, levels - 1).long().tolist()
    dims = len(order.dims)
    expected = [sum(((row[j] >> b) & 1) << (b * dims + dims - 1 - j) for j in range(dims) for b in range(order.bits)) for row in q]
    assert order.codes(Q).tolist() == expected
    assert torch.equal(order.sorted_codes, torch.sort(order.codes(X)).values)


@pytest.mark.gpu
@pytest.mark.parametrize("on_device", [False, True])
def test_references_past_two_to_the_31_bytes_search_exactly(on_device):
    # 70,000,000 x 8 float32 (2.24 GB): the fused kernel's aligned operand passes 2^31 elements,
    # where 32-bit offsets wrapped and killed the CUDA context
    skip_if_no_cuda("cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    R = torch.rand((70_000_000, 8), generator=gen, device="cuda")
    Q = R[-64:] + 1e-3
    ref = R if on_device else R.cpu()
    d, i = kneighbors(ref, Q if on_device else Q.cpu(), k=10, device="cuda", backend="auto")
    values, index = [], []
    for s0 in range(0, R.shape[0], 5_000_000):  # float64 oracle in chunks (the whole matrix is 36 GB)
        found = torch.cdist(Q.double(), R[s0 : s0 + 5_000_000].double()).topk(10, largest=False)
        values.append(found.values)
        index.append(found.indices + s0)
    best = torch.cat(values, 1).topk(10, largest=False)
    assert torch.equal(i.to("cuda"), torch.cat(index, 1).gather(1, best.indices))
    torch.testing.assert_close(d.to("cuda").double(), best.values, rtol=1e-5, atol=1e-6)


def test_curve_codes_in_row_blocks_equal_the_whole(monkeypatch):
    """Curve codes formed a few rows at a time (bounded temporaries) give the same order."""
    from gpumine.neighbors.engine import _curve

    X = torch.from_numpy(np.random.default_rng(3).random((5000, 5), dtype=np.float32))
    whole = _curve._CurveOrder(X)
    monkeypatch.setattr(_curve, "CODE_ROWS", 333)
    blocks = _curve._CurveOrder(X)
    assert torch.equal(whole.sorted_codes, blocks.sorted_codes) and torch.equal(whole.perm, blocks.perm)
    assert torch.equal(whole.codes(X[:700]), blocks.codes(X[:700]))
