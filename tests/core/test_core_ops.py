"""Core ops: distances vs SciPy float64, top-k tie rule, associative merge, tile plans."""

import itertools

import numpy as np
import pytest
import torch

from gpumine.core import get_metric, merge_topk, pairwise_distances, plan_tiles, topk_smallest
from gpumine.core.select import sort_by_score_then_index
from gpumine.core.tiles import iter_row_chunks, same_device
from knn_oracle import full_distances


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "manhattan", "chebyshev", "cosine", "inner_product"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pairwise_distances_vs_scipy(metric, dtype):
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((13, 5)), rng.standard_normal((7, 5))
    got = pairwise_distances(torch.tensor(X, dtype=dtype), torch.tensor(Y, dtype=dtype), metric).numpy()
    ref = full_distances(Y, X, metric)
    if metric == "inner_product":
        ref = -ref
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("metric", ["euclidean", "cosine", "inner_product", "manhattan"])
def test_tile_scores_within_reported_error_bounds(metric):
    rng = np.random.default_rng(1)
    X = torch.tensor(1e3 + rng.standard_normal((40, 17)), dtype=torch.float32)
    Y = torch.tensor(1e3 + rng.standard_normal((60, 17)), dtype=torch.float32)
    m = get_metric(metric)
    centre = m.centre(Y)
    Qp, Rp = m.prepare(X, centre, "query"), m.prepare(Y, centre, "ref")
    tile = m.tile_scores(Qp, Rp)
    if metric == "euclidean":
        tile = tile + Qp["sqnorm"][:, None]  # the tile form leaves out a per-row constant
    if metric == "cosine":
        tile = tile + 1.0
    exact = m.exact_scores(X, Y.unsqueeze(0))
    kth = tile.max(1).values
    low, high = m.bounds(Qp, m.ref_scale(Rp), 17, torch.device("cpu"), kth, kth)
    assert ((tile - exact).abs() <= torch.maximum(low, high)[:, None]).all()


def test_topk_tie_rule_and_k_equals_n():
    s = torch.tensor([[3.0, 1.0, 1.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0, 2.0]])
    v, i = topk_smallest(s, 3)
    assert i.tolist() == [[3, 1, 2], [0, 1, 2]]
    v, i = topk_smallest(s, 5)
    assert i.tolist() == [[3, 1, 2, 4, 0], [0, 1, 2, 3, 4]]
    v, i = topk_smallest(s[:0], 2)
    assert v.shape == (0, 2)


def test_topk_random_ties_match_stable_argsort():
    rng = np.random.default_rng(2)
    s = rng.integers(0, 4, (50, 37)).astype(np.float32)
    for k in (1, 5, 36, 37):
        v, i = topk_smallest(torch.from_numpy(s), k)
        ref = np.argsort(s, axis=1, kind="stable")[:, :k]
        np.testing.assert_array_equal(i.numpy(), ref)


def test_merge_is_associative_and_pads():
    rng = np.random.default_rng(3)
    scores = torch.from_numpy(rng.integers(0, 5, (6, 30)).astype(np.float32))
    k = 7
    parts = [(scores[:, a:b], torch.arange(a, b).expand(6, -1)) for a, b in [(0, 4), (4, 17), (17, 30)]]
    parts = [sort_by_score_then_index(v, i) for v, i in parts]
    parts = [(v[:, :k], i[:, :k]) for v, i in parts]
    results = []
    for order in itertools.permutations(range(3)):
        acc = (torch.full((6, 0), 0.0), torch.full((6, 0), 0, dtype=torch.int64))
        for j in order:
            acc = merge_topk(*acc, *parts[j], k)
        results.append(acc)
    ref = topk_smallest(scores, k)
    for v, i in results:
        assert torch.equal(i, ref[1]) and torch.equal(v, ref[0])
    v, i = merge_topk(*parts[0], *(torch.empty(6, 0), torch.empty(6, 0, dtype=torch.int64)), 6)
    assert (i[:, 4:] == -1).all() and torch.isinf(v[:, 4:]).all()


@pytest.mark.parametrize("n_query, n_ref, d, c, wm", [(10, 10, 3, 5, 1), (10**6, 10**6, 64, 2560, 256), (5, 10**7, 8, 16, 64), (10**5, 300, 65, 300, 2)])
def test_tile_plan_stays_under_budget(n_query, n_ref, d, c, wm):
    budget = wm * 2**20
    plan = plan_tiles(n_query, n_ref, d, c, 4, budget)
    assert 1 <= plan.query_rows <= n_query and 1 <= plan.ref_rows <= n_ref
    assert plan.tile_bytes(d, min(c, n_ref), 4) <= budget
    assert plan.query_rows * plan.ref_rows < n_query * n_ref or n_query * n_ref < 1000


def test_tile_plan_refuses_too_small_budget():
    with pytest.raises(ValueError, match="raise working_memory to at least"):
        plan_tiles(10, 10**6, 1000, 100, 4, 1000)


def test_row_chunks_cover_all_rows():
    X = torch.arange(23.0).reshape(-1, 1)
    chunks = list(iter_row_chunks(X, 5, torch.device("cpu")))
    assert [s for s, _ in chunks] == [0, 5, 10, 15, 20]
    assert torch.equal(torch.cat([c for _, c in chunks]), X)


@pytest.mark.gpu
def test_pinned_double_buffer_streams_exact_rows():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    X = torch.randn(10_007, 9)
    chunks = [(s, c.clone()) for s, c in iter_row_chunks(X, 1000, torch.device("cuda"))]
    assert torch.equal(torch.cat([c for _, c in chunks]).cpu(), X)


def test_same_device_treats_an_unindexed_cuda_as_the_current_gpu():
    cpu, cuda0, cuda1 = torch.device("cpu"), torch.device("cuda", 0), torch.device("cuda", 1)
    assert same_device(cpu, torch.device("cpu")) and not same_device(cpu, cuda0)
    assert same_device(cuda0, torch.device("cuda:0")) and not same_device(cuda0, cuda1)
    if torch.cuda.is_available():
        current = torch.device("cuda", torch.cuda.current_device())
        assert same_device(current, torch.device("cuda")) and same_device(torch.device("cuda"), current)


@pytest.mark.gpu
def test_device_data_is_chunked_as_views_whatever_the_cuda_spelling():
    # resident reference tiles are kept in a list: staged through the two reused streaming
    # buffers (what "cuda" vs "cuda:0" once caused) all but the last two read the wrong rows
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    X = torch.randn(1000, 3, device="cuda")
    chunks = list(iter_row_chunks(X, 64, torch.device("cuda")))
    assert all(c.data_ptr() == X[s:].data_ptr() for s, c in chunks)
    assert torch.equal(torch.cat([c for _, c in chunks]), X)


@pytest.mark.parametrize("r", [20, 333, 2003, 50_001])
@pytest.mark.parametrize("ties", [False, True])
def test_hierarchical_tile_candidates_keep_the_c_smallest_values(r, ties):
    from gpumine.neighbors.engine._search import _tile_candidates

    gen = torch.Generator().manual_seed(r)
    S = torch.randint(0, 50, (7, r), generator=gen).float() if ties else torch.rand(7, r, generator=gen)
    c = 21
    values, cols = _tile_candidates(S, c)
    assert values.shape == (7, min(c, r))
    assert torch.equal(S.gather(1, cols), values)
    assert all(len(set(row)) == len(row) for row in cols.tolist())
    expected = torch.sort(S, dim=1).values[:, : min(c, r)]
    assert torch.equal(torch.sort(values, dim=1).values, expected)


def _order_sensitive(rng, n, d):
    """float32 rows of comparable terms, so the summation order shows in the last bits."""
    return rng.standard_normal((n, d)).astype(np.float32)


def _chunked_reference(X, Y, metric, chunk=16):
    """The chunked order of Metric.exact_scores in NumPy float32, a feature at a time: (len(X), len(Y))."""
    total = None
    for start in range(0, X.shape[1], chunk):
        part = None
        for f in range(start, min(start + chunk, X.shape[1])):
            diff = X[:, None, f] - Y[None, :, f]  # float32 arrays: each operation rounds as IEEE float32
            term = np.abs(diff) if metric == "manhattan" else diff * diff
            part = term if part is None else part + term
        total = part if total is None else total + part
    return total


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "manhattan"])
@pytest.mark.parametrize("d", [17, 31, 32, 33, 65])
def test_exact_scores_sum_in_chunks_of_16_features_above_16(metric, d):
    from gpumine.core.distance import EXACT_SUM_CHUNK, SEQUENTIAL_MAX_FEATURES

    assert EXACT_SUM_CHUNK == SEQUENTIAL_MAX_FEATURES == 16
    rng = np.random.default_rng(d)
    X, Y = _order_sensitive(rng, 11, d), _order_sensitive(rng, 23, d)
    X[0, 0], Y[0, 0] = -0.0, 0.0
    got = get_metric(metric).exact_scores(torch.from_numpy(X), torch.from_numpy(Y)[None]).numpy()
    assert got.dtype == np.float32 and got.shape == (11, 23)
    # bit for bit the chunked order ...
    expected = _chunked_reference(X, Y, metric)
    np.testing.assert_array_equal(got.view(np.int32), expected.view(np.int32))
    # ... which is not plain left to right on this data (so the comparison above has teeth;
    # at 17 features the two orders coincide: one chunk plus one term)
    plain = _chunked_reference(X, Y, metric, chunk=d)
    assert (plain != expected).any() or d == 17
    # and within float32 rounding of the float64 value: d terms, each rounded, summed (all non-negative)
    diff = X[:, None, :].astype(np.float64) - Y[None, :, :].astype(np.float64)
    exact = (np.abs(diff) if metric == "manhattan" else diff * diff).sum(-1)
    assert np.all(np.abs(got - exact) <= (d + 2) * 2.0**-24 * exact)
    # pairwise_distances goes through the same form
    dist = pairwise_distances(torch.from_numpy(X), torch.from_numpy(Y), metric).numpy()
    np.testing.assert_array_equal(dist, np.sqrt(got) if metric == "euclidean" else got)


@pytest.mark.parametrize("metric", ["euclidean", "manhattan"])
@pytest.mark.parametrize("d", [3, 16, 17, 40, 65])
def test_exact_scores_do_not_depend_on_batch_shape_layout_or_the_by_feature_form(metric, d):
    rng = np.random.default_rng(100 + d)
    X, Y = _order_sensitive(rng, 9, d), _order_sensitive(rng, 14, d)
    m = get_metric(metric)
    Q, R = torch.from_numpy(X), torch.from_numpy(Y)
    shared = m.exact_scores(Q, R[None])
    per_query = m.exact_scores(Q, R[None].expand(9, -1, -1).clone())
    fortran = m.exact_scores(torch.from_numpy(np.asfortranarray(X)), torch.from_numpy(np.asfortranarray(Y))[None])
    one_by_one = torch.cat([m.exact_scores(Q[i : i + 1], R[None]) for i in range(9)])
    reversed_rows = m.exact_scores(Q.flip(0), R.flip(0)[None]).flip(0).flip(1)
    by_feature = m.exact_scores_by_feature(Q, lambda f: R[:, f][None])
    # candidates of a (q, c, d) batch laid out feature-major in memory
    cands = R[torch.from_numpy(rng.integers(0, 14, (9, 5)))]
    gathered = m.exact_scores(Q, cands.permute(2, 0, 1).contiguous().permute(1, 2, 0))
    for other in (per_query, fortran, one_by_one, reversed_rows, by_feature):
        assert torch.equal(shared.view(torch.int32), other.view(torch.int32))
    assert torch.equal(gathered, m.exact_scores(Q, cands.contiguous()))
    assert torch.equal(gathered, m.exact_scores_by_feature(Q, lambda f: cands[..., f]))
