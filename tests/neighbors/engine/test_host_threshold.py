"""The host's small L2 searches by one threshold per row (engine/_host_threshold.py)."""

import threading

import numpy as np
import pytest
import torch

import gpumine.neighbors.engine._host_threshold as host_threshold
from gpumine.core.distance import get_metric
from gpumine.neighbors.engine._host import cpu_search
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
    if kind == "few_copies":  # rows in up to four copies: searched as rows of their own, ties at 0
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
        if found is None:  # wide ties: the blocked path's, checked below through cpu_search
            assert kind in ("near_ties", "small_integers", "large_integers")
            continue
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
