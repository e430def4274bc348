"""The host's small L2 searches by one threshold per row (engine/_host_threshold.py)."""

import threading

import numpy as np
import pytest
import torch

import gpumine.neighbors.engine._host_threshold as host_threshold
from gpumine.core.distance import get_metric
from gpumine.neighbors.engine._host import cpu_search
from gpumine.neighbors.engine._host_gemm import _Products
from gpumine.neighbors.engine._host_threshold import THRESHOLD_MAX_K, THRESHOLD_MAX_PAIRS, threshold_search


def _oracle(U, Q, K, metric):
    """float64 exact scores of every pair, ordered by (score, index)."""
    S = get_metric(metric).exact_scores(torch.from_numpy(Q), torch.from_numpy(U)[None]).numpy()
    order = np.argsort(S, axis=1, kind="stable")[:, :K]
    return np.take_along_axis(S, order, 1), order


def _data(kind, n, d, seed):
    rng = np.random.default_rng(seed)
    if kind == "random":
        return rng.standard_normal((n, d))
    if kind == "far":  # clustered far from the origin: the products cancel unless centred
        return 1e6 + rng.standard_normal((n, d)) * 1e-2
    if kind == "few_copies":  # rows in three copies: searched as rows of their own, ties at 0
        base = rng.standard_normal((-(-n // 3), d))
        return np.repeat(base, 3, axis=0)[:n][rng.permutation(n)]
    if kind == "near_ties":  # float32 rounds the products of 1 + e alike, float64 scores differ
        return 1.0 + rng.integers(0, 4, (n, d)) * 2.0**-30
    if kind == "small_integers":  # exact float32 products
        return rng.integers(-50, 50, (n, d)).astype(np.float64)
    if kind == "large_integers":  # exact in float64 only: centred float32 products propose
        return rng.integers(-3000, 3000, (n, d)).astype(np.float64) * 64.0
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["random", "far", "few_copies", "near_ties", "small_integers", "large_integers"])
@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean"])
@pytest.mark.parametrize("K", [1, 6, THRESHOLD_MAX_K])
def test_results_equal_every_pair_scored_in_float64(kind, metric, K):
    U = _data(kind, 301, 24, seed=K)
    Q = np.vstack([U[:40], _data(kind, 25, 24, seed=K + 100)])
    for queries in (U, Q):
        found = threshold_search(U, queries, K, get_metric(metric), 1 << 26)
        assert found is not None  # rows under their thresholds stay within 4 K here, ties included
        scores, index = found
        want_scores, want_index = _oracle(U, queries, K, metric)
        np.testing.assert_array_equal(index, want_index)
        np.testing.assert_array_equal(scores, want_scores)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["random", "few_copies", "small_integers"])
def test_cpu_search_takes_it_for_small_lists_and_gives_the_oracle(dtype, kind):
    X = _data(kind, 351, 32, seed=7).astype(dtype)
    R = torch.from_numpy(X)
    for k in (5, THRESHOLD_MAX_K - 1, 20):  # self excluded: K = k + 1
        stats = {}
        scores, index = cpu_search(R, R, k, get_metric("sqeuclidean"), exclude_self=True, budget_bytes=1 << 26,
                                   stats=stats)
        S = get_metric("sqeuclidean").exact_scores(torch.from_numpy(X.astype(np.float64)), R.double()[None]).numpy()
        np.fill_diagonal(S, np.inf)
        order = np.argsort(S, axis=1, kind="stable")[:, :k]
        np.testing.assert_array_equal(index.numpy(), order)
        np.testing.assert_array_equal(scores.numpy(), np.take_along_axis(S, order, 1).astype(dtype))
        if kind == "random":
            assert stats["selection"] == ("threshold" if k + 1 <= THRESHOLD_MAX_K else "gemm")


def test_it_runs_with_torchs_threads_and_the_blocks_with_one(monkeypatch):
    import contextlib

    import gpumine.neighbors.engine._host as host

    entered = []

    @contextlib.contextmanager
    def one_thread():
        entered.append(True)
        yield

    monkeypatch.setattr(host, "_one_torch_thread", one_thread)
    X = torch.from_numpy(_data("random", 351, 32, seed=7))
    stats = {}
    cpu_search(X, X, 5, get_metric("euclidean"), exclude_self=True, budget_bytes=1 << 26, stats=stats)
    assert stats["selection"] == "threshold" and not entered  # one block: torch keeps its threads
    cpu_search(X, X, 20, get_metric("euclidean"), exclude_self=True, budget_bytes=1 << 26, stats=stats)
    assert stats["selection"] == "gemm" and entered  # the row blocks split over the threads themselves


def test_larger_searches_and_other_metrics_go_elsewhere():
    cosine, l2 = get_metric("cosine"), get_metric("euclidean")
    assert host_threshold.threshold_search_applies(l2, 1000, 1000, 6)
    assert not host_threshold.threshold_search_applies(l2, 1000, THRESHOLD_MAX_PAIRS // 1000 + 1, 6)
    assert not host_threshold.threshold_search_applies(l2, 300, 300, THRESHOLD_MAX_K + 1)
    assert not host_threshold.threshold_search_applies(l2, 300, 6, 6)  # K = every reference
    assert not host_threshold.threshold_search_applies(cosine, 300, 300, 6)
    X = torch.from_numpy(np.random.default_rng(3).standard_normal((1100, 24)))
    stats = {}
    cpu_search(X, X, 5, l2, exclude_self=True, budget_bytes=1 << 26, stats=stats)
    assert stats["selection"] == "gemm"


def test_wide_ties_nan_and_float32_overflow_are_left_to_the_blocked_path():
    l2 = get_metric("sqeuclidean")
    corners = np.eye(300)  # distinct rows, every pair at the same distance
    assert threshold_search(corners, corners, 6, l2, 1 << 26) is None
    assert threshold_search(corners, corners, 1, l2, 1 << 26) is not None  # each row's own pair alone
    X = np.random.default_rng(5).standard_normal((300, 12))
    with_nan = X.copy()
    with_nan[7, 3] = np.nan
    assert threshold_search(X, with_nan, 5, l2, 1 << 26) is None
    assert threshold_search(X * 1e30, X * 1e30, 5, l2, 1 << 26) is None  # float32 products overflow
    found = threshold_search(X * 1e-30, X * 1e-30, 5, l2, 1 << 26)  # centred float32 rows below the normal range
    want = _oracle(X * 1e-30, X * 1e-30, 5, "sqeuclidean")
    if found is not None:
        np.testing.assert_array_equal(found[1], want[1])
        np.testing.assert_array_equal(found[0], want[0])


def test_kept_buffers_serve_other_shapes_and_threads():
    rng = np.random.default_rng(9)
    shapes = [(300, 20), (120, 40), (500, 24), (64, 16)]
    data = [rng.standard_normal(shape) for shape in shapes]
    wrong = []

    def run(X):
        for _ in range(3):
            scores, index = threshold_search(X, X, 6, get_metric("euclidean"), 1 << 26)
            want = _oracle(X, X, 6, "euclidean")
            if not (np.array_equal(index, want[1]) and np.array_equal(scores, want[0])):
                wrong.append(X.shape)

    threads = [threading.Thread(target=run, args=(X,)) for X in data + data[::-1]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong


def test_float32_products_that_could_overflow_are_left_to_the_float64_products(monkeypatch):
    # a cluster near +1e20 on the first feature (the queries), one near -1.3e21 balancing the mean, two
    # near +-1e20 on the second feature, and 12 rows near 0: the float32 products of the first cluster's
    # pairs overflow to NaN (inf - inf), the 12 rows' stay finite, and groups 0-9 of the 20 (columns g,
    # g + 20, ...) hold none of the first cluster: their minima set a finite threshold that a NaN score
    # never meets, which would leave every true neighbour out
    rng = np.random.default_rng(12)
    X = rng.standard_normal((160, 12))
    low, high = np.flatnonzero(np.arange(160) % 20 < 10), np.flatnonzero(np.arange(160) % 20 >= 10)
    queries = high[:78]
    X[queries, 0] += 1e20
    X[low[:6], 0] -= 1.3e21
    rest = np.concatenate([low[18:], high[78:]])  # low[6:18]: the rows near 0
    X[rest[::2], 1] += 1e20
    X[rest[1::2], 1] -= 1e20
    l2 = get_metric("sqeuclidean")
    want_scores, want_index = _oracle(X, X[queries], 6, "sqeuclidean")
    assert threshold_search(X, X[queries], 6, l2, 1 << 26) is None
    monkeypatch.setattr(_Products, "float32_finite", lambda self, offset: True)  # the check this test is for
    assert not np.array_equal(threshold_search(X, X[queries], 6, l2, 1 << 26)[1], want_index)
    monkeypatch.undo()
    import gpumine.neighbors.engine._host as host
    import gpumine.neighbors.engine._host_exact as host_exact

    monkeypatch.setattr(host, "DIRECT_MAX_TERMS", 0)  # the products paths, not the direct small searches
    monkeypatch.setattr(host_exact, "DIRECT_PRODUCTS_MAX_PAIRS", 0)
    R = torch.from_numpy(X)
    for limit in (THRESHOLD_MAX_PAIRS, 0):  # the threshold pass declines; the blocked path alone
        monkeypatch.setattr(host_threshold, "THRESHOLD_MAX_PAIRS", limit)
        stats = {}
        scores, index = cpu_search(R, R[queries], 6, l2, exclude_self=False, budget_bytes=1 << 26, stats=stats)
        assert stats["selection"] == "gemm"
        np.testing.assert_array_equal(index.numpy(), want_index)
        np.testing.assert_array_equal(scores.numpy(), want_scores)


def test_a_score_matrix_over_the_budget_is_left_to_the_row_blocks():
    X = np.random.default_rng(13).standard_normal((300, 20))
    l2 = get_metric("euclidean")
    assert threshold_search(X, X, 6, l2, 5 * 300 * 304) is not None
    assert threshold_search(X, X, 6, l2, 5 * 300 * 304 - 1) is None


@pytest.mark.parametrize("K", [1, 6, THRESHOLD_MAX_K])
def test_product_scores_off_by_nine_tenths_of_their_bound_still_give_the_oracle(monkeypatch, K):
    # the bound's relative error g widened to 2^-9 and every product score moved by 0.9 of the bound, the
    # true neighbours' up and the others' down: a threshold from the others' scores needs the full margin
    # (upper, then reach) to keep every true neighbour under it
    rng = np.random.default_rng(K)
    U = rng.standard_normal((257, 10))
    Q = rng.standard_normal((70, 10))
    exact = get_metric("sqeuclidean").exact_scores(torch.from_numpy(Q), torch.from_numpy(U)[None]).numpy()
    want_scores, want_index = _oracle(U, Q, K, "sqeuclidean")
    first = np.zeros(exact.shape, dtype=bool)
    np.put_along_axis(first, want_index, True, 1)
    g = 2.0**-9
    monkeypatch.setattr(_Products, "gamma", lambda self, float64: g)
    plain_scores = _Products.scores

    def moved_scores(self, Qt, out):
        A = plain_scores(self, Qt, out).numpy()
        q = (Qt.numpy().astype(np.float64) ** 2).sum(1)  # the query rows' squared norms (the bound's scale)
        shift = 0.9 * g * (3.0 * q[:, None] + 2.0 * exact)
        A[:, : exact.shape[1]] += np.where(first, shift, -shift).astype(np.float32)
        return out

    monkeypatch.setattr(_Products, "scores", moved_scores)
    found = threshold_search(U, Q, K, get_metric("sqeuclidean"), 1 << 26)
    assert found is not None
    np.testing.assert_array_equal(found[1], want_index)
    np.testing.assert_array_equal(found[0], want_scores)
