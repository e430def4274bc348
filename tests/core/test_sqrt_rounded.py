"""Distances are correctly rounded square roots on every device (torch's vectorised CPU sqrt is not)."""

import numpy as np
import pytest
import torch

from gpumine.core.distance import get_metric, sqrt_rounded
from gpumine.neighbors import kneighbors


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cpu_sqrt_equals_the_ieee_square_root(dtype):
    x = np.random.default_rng(0).random(200_000).astype(dtype) * 3
    got = sqrt_rounded(torch.from_numpy(x.copy()))
    np.testing.assert_array_equal(got.numpy(), np.sqrt(x))
    if dtype == np.float32:  # the nearest float32 to the exact root
        np.testing.assert_array_equal(got.numpy(), np.sqrt(x.astype(np.float64)).astype(np.float32))


def test_sqrt_of_a_strided_tensor_leaves_it_unchanged():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    view = x.t()
    got = sqrt_rounded(view)
    np.testing.assert_array_equal(got.numpy(), np.sqrt(view.numpy()))
    np.testing.assert_array_equal(x.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU")])])
def test_kneighbors_distances_are_the_rounded_float64_distances(device):
    rng = np.random.default_rng(1)
    X = rng.random((3_000, 5), dtype=np.float32)
    Q = rng.random((400, 5), dtype=np.float32)
    dist, index = kneighbors(X, Q, 7, device=device)
    diff = Q[:, None, :].astype(np.float64) - X[index].astype(np.float64)
    squares = diff * diff
    score64 = squares[..., 0]
    for j in range(1, 5):  # the engine's order: feature by feature
        score64 = score64 + squares[..., j]
    # the float64 exact score rounded to float32, then its correctly rounded root
    np.testing.assert_array_equal(dist, np.sqrt(score64.astype(np.float32)))


def test_metric_to_distance_uses_the_rounded_root():
    scores = torch.from_numpy(np.random.default_rng(2).random(50_000).astype(np.float32))
    got = get_metric("euclidean").to_distance(scores)
    np.testing.assert_array_equal(got.numpy(), np.sqrt(scores.numpy()))
