"""Replicate mode's block search from a worker's device copy of the references: the same rows as one process."""

import gc

import numpy as np
import pytest
import torch

from gpumine.distributed import _knn
from gpumine.neighbors import kneighbors

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _tied_grid(n=3_000, d=3, seed=0):
    # integer values with many duplicate rows: ties at every rank
    return np.random.default_rng(seed).integers(0, 6, (n, d)).astype(np.float32)


def test_host_device_keeps_the_host_array():
    X = _tied_grid(50)
    assert _knn._device_copy(X, "cpu") is X


@pytest.mark.parametrize("first, stop", [(0, 700), (700, 2_999), (2_999, 3_000)])
def test_cpu_all_knn_block_equals_the_rows_of_one_search(first, stop):
    X = _tied_grid()
    want_d, want_i = kneighbors(X, None, 7, device="cpu")
    d, i = _knn._search_block(X, (first, stop), 7, first, "euclidean", None, "cpu", None, index_dtype=np.int32)
    assert i.dtype == np.int32
    np.testing.assert_array_equal(i, want_i[first:stop])
    np.testing.assert_array_equal(d, want_d[first:stop])


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("metric", ["euclidean", "manhattan"])
def test_gpu_blocks_from_the_device_copy_equal_one_search(metric):
    X = _tied_grid(20_000, 4)
    want_d, want_i = kneighbors(X, None, 10, metric=metric, device="cuda")
    bounds = [0, 1, 6_000, 13_333, 20_000]
    for a, b in zip(bounds[:-1], bounds[1:]):
        d, i = _knn._search_block(X, (a, b), 10, a, metric, None, "cuda", None, index_dtype=np.int32)
        assert isinstance(d, np.ndarray) and i.dtype == np.int32
        np.testing.assert_array_equal(i, want_i[a:b])
        np.testing.assert_array_equal(d, want_d[a:b])
    Q = _tied_grid(500, 4, seed=1)
    want_d, want_i = kneighbors(X, Q, 10, metric=metric, device="cuda")
    d, i = _knn._search_block(X, Q, 10, None, metric, None, "cuda", None)
    np.testing.assert_array_equal(i, want_i)
    np.testing.assert_array_equal(d, want_d)


@pytest.mark.gpu
@needs_cuda
def test_gpu_device_copy_is_made_once_and_dropped_with_its_array():
    X = _tied_grid(1_000)
    first = _knn._device_copy(X, "cuda")
    assert first.is_cuda and _knn._device_copy(X, "cuda") is first
    key = (id(X), str(first.device))
    assert key in _knn._DEVICE_COPIES
    del X, first
    gc.collect()
    assert key not in _knn._DEVICE_COPIES
