"""SolvingSet's sparse tile merge (only the pairs below the heaps' k-th scores) equals the dense one.

The sparse merge selects the pairs of a tile that can change a heap, sorts them and merges each
row's and each column's group; the dense merge takes a top-k over every row and column. Both
must leave bit-identical heaps and upper bounds, so a whole run gives the same solving set,
statistics and scores whichever runs, on data with exact duplicates and masses of tied distances.
"""

import numpy as np
import pytest
import torch

from gpumine.outliers import _solving_set
from gpumine.outliers._distance_based import check_candidates, top_n_outliers
from gpumine.outliers._solving_set import _update_tile, auto_candidates
from gpumine.outliers._weights import PairSpace, resolve_metric

SS = dict(device="cpu", method="solving_set")  # the SolvingSet machinery (auto may pick brute force)


def _data(name, n=600, seed=0):
    rng = np.random.default_rng(seed)
    if name == "duplicates":  # every row 4 times, duplicated outliers
        base = rng.standard_normal((n // 4, 3))
        base[:3] *= 8
        return np.repeat(base, 4, axis=0)
    if name == "integers":  # a small grid: masses of tied distances (exact float32 tiles)
        return rng.integers(0, 6, (n, 3)).astype(np.float64)
    if name == "large_integers":  # exact float64 tiles, like Covertype
        return rng.integers(0, 5000, (n, 4)).astype(np.float64)
    if name == "clustered":  # inexact tiles whose |x|^2 expansion cancels: bounds matter
        centres = rng.uniform(-1, 1, (4, 4)) * 10 + 5000
        X = centres[rng.integers(0, 4, n)] + rng.standard_normal((n, 4)) * 0.01
        X[:5] += rng.standard_normal((5, 4)) * 2
        return np.vstack([X, X[:40]])  # and exact duplicates
    if name == "uniform":
        return rng.random((n, 6))
    raise KeyError(name)


def _run(monkeypatch, X, k, fraction, **kw):
    monkeypatch.setitem(_solving_set.SPARSE_FRACTION, "cpu", fraction)
    return top_n_outliers(X, 7, k, n_candidates=kw.pop("n_candidates", 48), **SS, **kw)


def _assert_same_run(a, b):
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.weights, b.weights)  # bit for bit
    np.testing.assert_array_equal(a.solving_set, b.solving_set)
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.scores_exact, b.scores_exact)
    assert a.threshold == b.threshold
    assert a.iterations == b.iterations
    assert a.distances_computed == b.distances_computed
    assert a.stats["trace"] == b.stats["trace"]


@pytest.mark.parametrize("name", ["duplicates", "integers", "large_integers", "clustered", "uniform"])
@pytest.mark.parametrize("k", [1, 5, 30])
def test_sparse_merge_run_equals_dense_run(monkeypatch, name, k):
    X = _data(name)
    dense = _run(monkeypatch, X, k, 0.0)
    sparse = _run(monkeypatch, X, k, 1.0)
    _assert_same_run(sparse, dense)
    assert dense.stats["sparse_tiles"] == 0 and sparse.stats["sparse_tiles"] > 0


@pytest.mark.parametrize("metric", ["manhattan", "chebyshev", "cosine"])
def test_sparse_merge_with_canonical_tiles(monkeypatch, metric):
    X = _data("duplicates", n=400, seed=3)
    dense = _run(monkeypatch, X, 6, 0.0, metric=metric)
    sparse = _run(monkeypatch, X, 6, 1.0, metric=metric)
    _assert_same_run(sparse, dense)


def test_sparse_merge_small_tiles_and_default_fraction(monkeypatch):
    """Many narrow tiles (small working memory), and the default fraction (a mix of both merges)."""
    X = _data("integers", n=900, seed=5)
    dense = _run(monkeypatch, X, 12, 0.0, working_memory=0.05, n_candidates=64)
    sparse = _run(monkeypatch, X, 12, 1.0, working_memory=0.05, n_candidates=64)
    mixed = _run(monkeypatch, X, 12, 1 / 16, working_memory=0.05, n_candidates=64)
    _assert_same_run(sparse, dense)
    _assert_same_run(mixed, dense)
    assert 0 < mixed.stats["sparse_tiles"] < sparse.stats["sparse_tiles"]


def _random_state(space, n, k, rows, cols, seed):
    """Heaps as a run could leave them: the k smallest scores to a random subset of points, with
    some heaps not full (+inf padded) and some points never compared."""
    g = torch.Generator().manual_seed(seed)
    heap = torch.full((n, k), float("inf"), dtype=torch.float64)
    seen = torch.rand(n, n, generator=g) < 0.3
    full = space.canonical(torch.arange(n)[:, None], torch.arange(n)[None, :])
    full = torch.where(seen, full, torch.full_like(full, float("inf")))
    full.fill_diagonal_(float("inf"))
    heap = torch.sort(full, dim=1).values[:, :k].contiguous()
    heap[rows[:2]] = float("inf")  # two candidates and a few columns with fewer than k entries
    heap[cols[:3], k // 2:] = float("inf")
    ub = space.weight(heap)
    return heap, ub


@pytest.mark.parametrize("name", ["duplicates", "integers", "clustered"])
@pytest.mark.parametrize("columns", [True, False])
def test_update_tile_sparse_equals_dense_on_one_tile(monkeypatch, name, columns):
    X = torch.from_numpy(_data(name, n=240, seed=11))
    space = PairSpace(X, resolve_metric())
    n, k = X.shape[0], 8
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(2))
    rows, cols = torch.sort(perm[:40]).values, torch.sort(perm[40:]).values
    heap0, ub0 = _random_state(space, n, k, rows, cols, seed=4)
    S = space.tile(rows, cols)
    out = {}
    for fraction in (0.0, 1.0):
        monkeypatch.setitem(_solving_set.SPARSE_FRACTION, "cpu", fraction)
        heap, ub = heap0.clone(), ub0.clone()
        stats = {"rows_recomputed": 0, "sparse_tiles": 0}
        _update_tile(space, heap, ub, rows, S.clone(), cols, k, 16, stats, columns=columns)
        out[fraction] = heap, ub, stats["sparse_tiles"]
    assert out[0.0][2] == 0 and out[1.0][2] == 1
    assert torch.equal(out[0.0][0], out[1.0][0])
    assert torch.equal(out[0.0][1], out[1.0][1])
    # and both are the k smallest of the old heap and every canonical score of the tile
    ref = heap0.clone()
    full = space.canonical(rows[:, None], cols[None, :])
    ref[rows] = torch.sort(torch.cat([heap0[rows], full], 1), 1).values[:, :k]
    if columns:
        ref[cols] = torch.sort(torch.cat([heap0[cols], full.T], 1), 1).values[:, :k]
    assert torch.equal(out[1.0][0], ref)


def test_auto_candidates_rule():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert auto_candidates(cuda, 10**6, 2) == 256 and auto_candidates(cuda, 10**6, 3) == 256
    assert auto_candidates(cuda, 10**6, 10) == 4096
    assert auto_candidates(cpu, 10**6, 2) == 256 and auto_candidates(cpu, 10**6, 10) == 1024
    assert auto_candidates(cuda, 10**6) == 1024 and auto_candidates(cpu, 10**6) == 256  # dimension unknown
    assert auto_candidates(cuda, 1000, 10) == 1000
    assert check_candidates("auto", cpu, 5000, 10) == 1024 and check_candidates(77, cpu, 5000, 10) == 77
    res = top_n_outliers(np.random.default_rng(0).random((3000, 5)), 3, 4, **SS)
    assert res.n_candidates == 1024
