"""The matrix-product path's selection pieces (gpumine.neighbors.engine._host_gemm, _host_exact) on their own."""

import numpy as np
import pytest
import torch

import gpumine.neighbors.engine._host_gemm as host_gemm
from gpumine.core.distance import get_metric
from gpumine.neighbors.engine._host import _Groups
from gpumine.neighbors.engine._host_exact import _Results
from gpumine.neighbors.engine._host_gemm import _GROUP, _integer_l2_dense, _select_levels, _smallest


def _check_smallest(A: np.ndarray, c: int, levels: int):
    """_smallest's contract: at least c entries per row, ascending, padded with (+inf, 0), none left out below the largest kept."""
    b, n = A.shape
    values, cols, kept = _smallest(torch.from_numpy(A), c, levels)
    assert values.dtype == A.dtype and cols.dtype == np.int64 and kept.shape == (b,)
    assert (kept >= min(c, n)).all() and (kept <= values.shape[1]).all()
    for i in range(b):
        v, col = values[i, : kept[i]], cols[i, : kept[i]]
        assert (np.diff(v) >= 0).all()
        np.testing.assert_array_equal(v, A[i, col])
        assert len(np.unique(col)) == col.size
        assert (values[i, kept[i] :] == np.inf).all() and (cols[i, kept[i] :] == 0).all()
        left = np.ones(n, dtype=bool)
        left[col] = False
        assert (A[i, left] >= v[-1]).all()  # nothing left out below the largest kept


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["spread", "ties", "constant", "negative"])
def test_smallest_keeps_the_smallest_entries(dtype, kind):
    rng = np.random.default_rng(7)
    for n, c in [(40, 29), (64, 14), (352, 29), (1984, 14), (4224, 29), (8320, 29)]:
        levels = _select_levels(n, c)
        n_pad = -(-n // _GROUP**levels) * _GROUP**levels
        b = 37
        if kind == "spread":
            A = rng.standard_normal((b, n_pad))
        elif kind == "ties":  # many equal values: rows with wide ties at the threshold
            A = rng.integers(0, 3, (b, n_pad)).astype(np.float64)
        elif kind == "constant":
            A = np.ones((b, n_pad))
        else:
            A = -np.abs(rng.standard_normal((b, n_pad))) * 1e3
        A[:, n:] = np.inf  # the padding columns of _Products
        _check_smallest(np.ascontiguousarray(A.astype(dtype)), c, levels)


def test_smallest_takes_wide_ties_from_the_whole_row():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((20, 512)).astype(np.float32)
    A[::2] = 0.0  # every entry tied: the threshold keeps the whole row, the partition exactly c
    _check_smallest(A, 29, _select_levels(512, 29))


def test_integer_l2_dense_is_the_exact_score():
    rng = np.random.default_rng(11)
    metric = get_metric("sqeuclidean")
    for d, M in [(166, 335), (24, 1_000_000)]:
        U = rng.integers(-M, M + 1, (300, d)).astype(np.float64)
        Q = U[:40]
        idx = rng.integers(0, 300, (40, 17))
        got = _integer_l2_dense(Q, U, (U * U).sum(1), idx)
        want = metric.exact_scores(torch.from_numpy(Q), torch.from_numpy(U[idx])).numpy()
        np.testing.assert_array_equal(got, want)


def test_nearly_sorted_equals_the_full_sort():
    rng = np.random.default_rng(5)
    for _ in range(30):
        b, w, K = int(rng.integers(1, 40)), int(rng.integers(3, 30)), None
        K = int(rng.integers(1, w + 1))
        refs = _Groups(np.arange(300, dtype=np.float64)[:, None])
        S = np.round(rng.random((b, w)) * 4) / 4  # ties
        idx = np.stack([rng.permutation(300)[:w] for _ in range(b)])
        approx_order = np.argsort(S + rng.standard_normal((b, w)) * 0.05, axis=1)  # about sorted
        S, idx = np.take_along_axis(S, approx_order, 1), np.take_along_axis(idx, approx_order, 1)
        rows = np.sort(rng.permutation(60)[:b])
        a, e = _Results(60, K, refs), _Results(60, K, refs)
        a.nearly_sorted(rows, idx, S)
        e.dense(rows, idx, S)
        np.testing.assert_array_equal(a.scores[rows], e.scores[rows])
        np.testing.assert_array_equal(a.index[rows], e.index[rows])


def test_select_levels_pads_little():
    for n in [1, 7, 80, 351, 1000, 3062, 4207, 8192, 8193, 50_000]:
        for c in [2, 14, 29, 60]:
            levels = _select_levels(n, c)
            step = _GROUP**levels
            n_pad = -(-n // step) * step
            if n <= host_gemm._MASK_MAX_COLUMNS:
                assert n_pad - n <= max(_GROUP, n // 32)
                assert levels == 0 or 2 * (n_pad // step) >= 3 * c
