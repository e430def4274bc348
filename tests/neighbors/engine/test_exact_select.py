"""The exact-selection path of the kNN engine: when it runs, and that it gives the dense path's results."""

import numpy as np
import pytest
import torch

from gpumine.core.distance import get_metric
from gpumine.neighbors.engine import _exact_select
from gpumine.neighbors.engine._exact_select import exact_select_applies, exact_select_first, exact_select_preferred
from gpumine.neighbors.engine._search import knn_search


def test_applies_only_to_exact_l2_searches_on_a_gpu():
    X = torch.zeros((4, 3))
    m = get_metric("euclidean")
    assert not exact_select_applies(X, X, 2, m, torch.device("cpu"), "auto", "exact")
    assert not exact_select_applies(X, X, 2, get_metric("cosine"), torch.device("cuda"), "auto", "exact")
    assert not exact_select_applies(X, X, 2, m, torch.device("cuda"), "torch", "exact")
    assert not exact_select_applies(X, X, 2, m, torch.device("cuda"), "auto", "tf32")


def test_preferred_for_large_searches_at_few_features():
    assert exact_select_preferred(1 << 15, 1 << 15, 8)
    assert exact_select_preferred(1 << 15, 1 << 15, 27)
    assert not exact_select_preferred(1 << 13, 1 << 13, 8)  # small: taken first, or dense
    assert not exact_select_preferred(1 << 15, 1 << 15, 33)  # more features: dense


def test_taken_first_by_shape():
    assert exact_select_first(80, 80, 19)  # every small search at up to 32 features
    assert exact_select_first(1 << 13, 1 << 13, 32)
    assert not exact_select_first(1 << 13, 1 << 13, 33)  # more features: the matrix-product paths
    assert exact_select_first(198, 198, 33)  # unless the search is tiny (WPBC's all-kNN)
    assert exact_select_first(100, 100, 128) and not exact_select_first(100, 100, 129)  # the kernel's features
    assert not exact_select_first(1966, 1966, 1555)  # InternetAds: the products
    assert exact_select_first(49_534, 49_534, 27)  # mid-size with many queries
    assert not exact_select_first(100, 1 << 21, 8)  # few queries over many references: probed first
    assert not exact_select_first(1 << 18, 1 << 18, 8)  # large: fused or dense by a probe


def _tie_heavy(n, rng):
    grid = rng.integers(0, 6, size=(n, 3)).astype(np.float32)  # integer grid: 216 distinct points
    grid[: n // 4] = grid[0]  # a duplicate block far larger than k
    return grid + np.float32(1e4)  # far from the origin


@pytest.mark.gpu
@pytest.mark.parametrize("k", [1, 20])
@pytest.mark.parametrize("n", [10_000, 17_000])  # rows in index order, and in curve order
def test_exact_select_equals_the_dense_path_on_tie_heavy_data(k, n, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    X = torch.from_numpy(_tie_heavy(n, np.random.default_rng(0))).cuda()
    m = get_metric("euclidean")
    found = {}
    for on in (True, False):
        monkeypatch.setattr(_exact_select, "EXACT_SELECT", on)
        stats = {}
        found[on] = knn_search(X, X, k, m, exclude_self=True, device=X.device, budget_bytes=1 << 28, result_device=X.device,
                               backend="auto", stats=stats, dedupe=False)
        assert stats["selection"] == ("exact_select" if on else "dense")
    assert torch.equal(found[True][0], found[False][0])
    assert torch.equal(found[True][1], found[False][1])


@pytest.mark.gpu
def test_exact_select_in_query_blocks_of_a_small_working_memory():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    rng = np.random.default_rng(1)
    X = torch.from_numpy(_tie_heavy(17_000, rng)).cuda()
    m = get_metric("sqeuclidean")
    whole = knn_search(X, X, 5, m, exclude_self=True, device=X.device, budget_bytes=1 << 28, result_device=X.device,
                       backend="auto", dedupe=False)
    blocks = knn_search(X, X, 5, m, exclude_self=True, device=X.device, budget_bytes=1 << 22, result_device=X.device,
                        backend="auto", dedupe=False)
    assert torch.equal(whole[0], blocks[0]) and torch.equal(whole[1], blocks[1])




def test_checked_searches_take_narrow_tiles_only_with_many_queries_at_10_to_32_features():
    from gpumine.neighbors.engine._exact_select_kernel import checked_blocks, default_blocks

    assert checked_blocks(32, 21, 3443) == (1, 32, 1)  # Waveform's all-kNN at k = 20
    assert checked_blocks(32, 10, 1024) == checked_blocks(32, 32, 1024) == (1, 32, 1)  # at the edges
    for C, d, n_query in ((32, 32, 351), (32, 12, 1023), (32, 9, 5000), (8, 21, 5000), (16, 21, 5000), (32, 33, 5000)):
        assert checked_blocks(C, d, n_query) == default_blocks(C, d)


def test_the_float32_screen_runs_on_reordered_float32_rows_of_up_to_32_features():
    from gpumine.neighbors.engine._exact_select_kernel import EXACT_SELECT_SCREEN_MAX_FEATURES, screens

    most = EXACT_SELECT_SCREEN_MAX_FEATURES
    assert screens(torch.float32, most, True, None) and screens(torch.float32, 1, False, True)
    assert not screens(torch.float32, most + 1, True, None)  # the float64 order's scans at up to 128 features
    assert not screens(torch.float64, most + 1, False, True)  # float64 data is never screened: nothing to refuse
    assert not screens(torch.float32, 9, False, None) and not screens(torch.float32, 9, True, False)
    assert not screens(torch.float64, 9, True, None) and not screens(torch.float64, 9, True, True)
    with pytest.raises(ValueError, match=f"screen=True takes at most {most} features; got {most + 1}"):
        screens(torch.float32, most + 1, False, True)
