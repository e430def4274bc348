"""float32 data at the edges of float32's range: exact answers (float64 where float32 cannot), never wrong ones."""

import math

import numpy as np
import pytest
import torch

from gpumine.neighbors import kneighbors
from gpumine.neighbors.engine._magnitude import FLOAT32_HIGH, FLOAT32_LOW, arithmetic, magnitudes
from gpumine.outliers import LocalOutlierFactor
from helpers import DEVICES, skip_if_no_cuda
from knn_oracle import brute_force_knn

F32 = torch.float32


def test_data_inside_the_window_is_searched_as_is():
    assert arithmetic(F32, 1.0, 1e-3) == (F32, None)
    assert arithmetic(F32, 0.0, math.inf) == (F32, None)  # all zeros
    assert arithmetic(F32, FLOAT32_HIGH, FLOAT32_LOW) == (F32, None)


@pytest.mark.parametrize("largest,tiniest", [(1e20, 1e-3), (3e38, 1e20), (3e-42, 1e-42), (1e-25, 1.4e-45), (2.0**41, 2.0**-37)])
def test_data_of_moderate_spread_is_scaled_into_the_window_by_a_float32_power_of_two(largest, tiniest):
    dtype, scale = arithmetic(F32, largest, tiniest)
    assert dtype == F32 and scale is not None
    assert math.log2(scale) == round(math.log2(scale))
    assert float(torch.tensor(scale, dtype=F32)) == scale  # representable: the data is scaled exactly
    assert FLOAT32_LOW <= tiniest * scale and largest * scale <= FLOAT32_HIGH


@pytest.mark.parametrize("largest,tiniest", [(1.0, 1e-30), (1e30, 1.0), (1.0, 1.4e-45)])
def test_data_spread_wider_than_float32_can_square_goes_to_float64(largest, tiniest):
    assert arithmetic(F32, largest, tiniest) == (torch.float64, None)


def test_float64_data_keeps_its_rule():
    assert arithmetic(torch.float64, 1.0, 1e-300) == (torch.float64, None)
    assert arithmetic(torch.float64, 1e100, 1.0)[1] == 2.0**-332


def test_magnitudes_skip_zeros_and_read_every_array():
    a = torch.tensor([[0.0, -3.0], [2e-30, 0.0]])
    assert magnitudes(a, torch.tensor([[-5.0]])) == (5.0, float(torch.tensor(2e-30)))
    assert magnitudes(torch.zeros(3, 2)) == (0.0, math.inf)
    assert magnitudes(torch.zeros(0, 2)) == (0.0, math.inf)


CASES = {
    # references, queries (None: all-kNN)
    "subnormal": (np.array([[0, 0], [1e-42, 1e-42], [3e-42, 0], [5e-42, 2e-42]]), None),
    "one huge query row": (np.array([[0.001], [0.002], [0.5]]), np.array([[0.0], [1e20]])),
    "mixed magnitudes": (np.array([[0], [1e-30], [3e-30], [1]]), np.array([[2e-30]])),
    "huge": (np.random.default_rng(0).random((40, 3)) * 1e20, None),
    "huge and small": (np.concatenate([np.random.default_rng(1).random((20, 2)) * 1e25,
                                       np.random.default_rng(2).random((20, 2)) * 1e-5]), None),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "cosine"])
@pytest.mark.parametrize("host_tree", [True, False])
def test_knn_at_extreme_magnitudes_equals_the_float64_oracle(device, case, metric, host_tree, monkeypatch):
    skip_if_no_cuda(device)
    if host_tree and device != "cpu":
        pytest.skip("the host tree search runs on the CPU only")
    from gpumine.neighbors.engine import _host as _cpu_search

    monkeypatch.setattr(_cpu_search, "CPU_TREE_SEARCH", host_tree)
    R, Q = CASES[case]
    R = R.astype(np.float32)
    Q = None if Q is None else Q.astype(np.float32)
    k = 2
    dist, idx = kneighbors(R, Q, k=k, metric=metric, device=device)
    ref_d, ref_i, _ = brute_force_knn(R, R if Q is None else Q, k, metric, exclude_self=Q is None)
    np.testing.assert_array_equal(idx, ref_i)
    assert dist.dtype == np.float32 and np.isfinite(dist).all()
    # cosine distances are 1 - cos in float32: absolute rounding of float32's 1
    np.testing.assert_allclose(dist, ref_d.astype(np.float32), rtol=2e-6, atol=1e-6 if metric == "cosine" else 0)


@pytest.mark.parametrize("device", DEVICES)
def test_squared_distances_beyond_float32_come_back_infinite_and_distances_finite(device):
    skip_if_no_cuda(device)
    R = np.array([[0.0], [1e20], [3e20]], dtype=np.float32)
    d, i = kneighbors(R, k=1, metric="euclidean", device=device)
    np.testing.assert_allclose(d.ravel(), [1e20, 1e20, 2e20], rtol=1e-6)
    d2, i2 = kneighbors(R, k=1, metric="sqeuclidean", device=device)
    assert np.isinf(d2).all() and np.array_equal(i, i2)


@pytest.mark.parametrize("device", DEVICES)
def test_scaled_squared_distances_are_unscaled_without_leaving_float32s_range(device):
    """Data scaled by 2^66 (tiny values beside one at 2^-105) has squared distances near 1e-19: the scale's
    square (2^132) is beyond float32, the results are not; and a duplicate of huge data scores 0, not NaN."""
    skip_if_no_cuda(device)
    rng = np.random.default_rng(3)
    X = (rng.uniform(0.5, 1, (60, 3)) * 2.0**-30).astype(np.float32)
    X[0, 0] = np.float32(2.0**-105)
    d, i = kneighbors(X, k=3, metric="sqeuclidean", device=device)
    ref_d, ref_i, _ = brute_force_knn(X, X, 3, "sqeuclidean", exclude_self=True)
    np.testing.assert_array_equal(i, ref_i)
    assert (d > 0).all()
    np.testing.assert_allclose(d, ref_d.astype(np.float32), rtol=2e-7)
    Y = (rng.uniform(0.5, 1, (30, 2)) * 2.0**37).astype(np.float32)
    Y[:, 1] = (rng.uniform(0.5, 1, 30) * 2.0**116).astype(np.float32)
    Y[5] = Y[4]
    d2, i2 = kneighbors(Y, k=2, metric="sqeuclidean", device=device)
    assert not np.isnan(d2).any() and d2[4, 0] == 0 and d2[5, 0] == 0


def _lof_float64(X, k):
    """Textbook LOF (scikit-learn's definition) in float64 by direct differences."""
    _, nb, D = brute_force_knn(X, X, k, exclude_self=True)
    X = np.asarray(X, dtype=np.float64)
    kdist = np.take_along_axis(D, nb, 1)[:, -1]
    reach = np.maximum(np.take_along_axis(D, nb, 1), kdist[nb])
    lrd = 1.0 / reach.mean(1)
    return -(lrd[nb].mean(1) / lrd)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scale", [1e20, 1e-35, 1.0])
def test_lof_is_right_at_extreme_magnitudes(device, scale):
    skip_if_no_cuda(device)
    X = np.random.default_rng(4).random((60, 3))
    Xs = (X * scale).astype(np.float32)
    got = LocalOutlierFactor(n_neighbors=5, device=device).fit(Xs).negative_outlier_factor_
    np.testing.assert_allclose(got, _lof_float64(Xs, 5), rtol=1e-5)
