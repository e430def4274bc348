"""The fixed-cost paths of a small kneighbors call give what the general paths give."""

import math

import numpy as np
import pytest
import torch

import gpumine
from gpumine.neighbors import kneighbors
from gpumine.neighbors.engine import knn_search
from gpumine.neighbors.engine._magnitude import finite_magnitudes, magnitudes
from gpumine.core.distance import get_metric
from gpumine.utils._validation import check_array, output_kind, to_output, to_outputs


def _cases():
    rng = np.random.default_rng(3)
    plain = rng.normal(size=(40, 5))
    plain[::3, 1] = 0.0  # zeros do not count as the smallest magnitude
    yield plain
    yield np.zeros((4, 3))
    yield np.array([[0.0, 1e-30], [3e-30, 1.0], [-2.0, 0.0]])  # float32 searches these in float64
    yield np.array([[0.0, 2.0**-60], [2.0**-50, 2.0**-45]])  # scaled into float32's window
    yield np.array([[1e30, -3e29], [0.0, 1e31]])
    yield np.array([[1e-42, 0.0], [-1e-44, 1.0]])  # float32 subnormals


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_finite_magnitudes_are_the_range_plans(dtype):
    for values in _cases():
        X = torch.as_tensor(values, dtype=dtype)
        assert finite_magnitudes(X) == magnitudes(X)
        assert finite_magnitudes(X, nonzero=False) == (magnitudes(X)[0], math.inf)
        assert finite_magnitudes(X.t()) == magnitudes(X.t())  # another layout, the same values
    assert finite_magnitudes(torch.zeros(0, 3, dtype=dtype)) == (0.0, math.inf)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_finite_magnitudes_refuse_non_finite_data(bad):
    X = torch.ones(5, 2)
    X[3, 1] = bad
    assert finite_magnitudes(X) is None
    assert finite_magnitudes(X.double(), nonzero=False) is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [1, 3])
def test_searches_planned_from_the_check_equal_the_engines_own_plan(dtype, k):
    metric = get_metric("euclidean", None)
    cpu = torch.device("cpu")
    for values in _cases():
        X = np.ascontiguousarray(np.vstack([values, values[::-1] * 0.5]), dtype=dtype)
        Q = np.ascontiguousarray(X[:3] * 1.5)
        for query in (None, Q):
            if query is None and k >= X.shape[0]:
                continue
            d, i = kneighbors(X, query, k, device="cpu", verbose=0)
            ref = torch.from_numpy(X)
            qt = ref if query is None else torch.from_numpy(query)
            ed, ei = knn_search(ref, qt, k, metric, exclude_self=query is None, device=cpu, budget_bytes=1 << 28,
                                result_device=cpu, as_distance=True)
            assert d.dtype == X.dtype
            np.testing.assert_array_equal(i, ei.numpy())
            assert d.tobytes() == ed.numpy().tobytes()


def test_mixed_dtypes_search_in_float64():
    rng = np.random.default_rng(0)
    X = rng.random((30, 4)).astype(np.float32)
    Q = rng.random((5, 4))
    d, i = kneighbors(X, Q, 4, device="cpu")
    d64, i64 = kneighbors(X.astype(np.float64), Q, 4, device="cpu")
    assert d.dtype == np.float64
    np.testing.assert_array_equal(i, i64)
    np.testing.assert_array_equal(d, d64)


@pytest.mark.parametrize("where", ["X_ref", "X_query"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_non_finite_input_is_refused_with_the_row(where, bad, dtype):
    X = np.ones((6, 3), dtype=dtype)
    Q = np.ones((4, 3), dtype=dtype)
    (X if where == "X_ref" else Q)[2, 1] = bad
    (X if where == "X_ref" else Q)[4 if where == "X_ref" else 3, 0] = bad
    with pytest.raises(ValueError, match=rf"^{where} contains NaN or infinity \(2 non-finite value\(s\), first at row 2\)"):
        kneighbors(X, Q, 2, device="cpu")
    if where == "X_ref":
        with pytest.raises(ValueError, match=r"^X_ref contains NaN or infinity"):
            kneighbors(X, None, 2, device="cpu")


def test_reference_errors_come_before_query_errors():
    X = np.ones((6, 3))
    X[0, 0] = np.nan
    with pytest.raises(ValueError, match="^X_ref contains NaN"):
        kneighbors(X, np.ones((2, 4)), 2, device="cpu")
    with pytest.raises(ValueError, match="^X_query has 4 features"):
        kneighbors(np.ones((6, 3)), np.ones((2, 4)), 2, device="cpu")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_check_array_wraps_plain_arrays_as_the_general_path(dtype):
    X = np.arange(12, dtype=dtype).reshape(4, 3)
    t = check_array(X)
    assert t.dtype == (torch.float32 if dtype == np.float32 else torch.float64)
    assert t.data_ptr() == X.ctypes.data  # no copy
    assert check_array(X.T).data_ptr() == X.ctypes.data  # a transposed view: still no copy
    assert check_array(X, dtype=torch.float64).dtype == torch.float64
    assert check_array(X, dtype=torch.float32).dtype == torch.float32
    readonly = X.copy()
    readonly.flags.writeable = False
    np.testing.assert_array_equal(check_array(readonly).numpy(), X)
    np.testing.assert_array_equal(check_array(X[::-1]).numpy(), X[::-1])
    swapped = X.astype(X.dtype.newbyteorder(">"))
    np.testing.assert_array_equal(check_array(swapped).numpy(), X)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_check_array_errors_are_unchanged_for_plain_arrays(dtype):
    X = np.ones((3, 2), dtype=dtype)
    X[1, 1] = np.nan
    with pytest.raises(ValueError, match=r"^X contains NaN or infinity \(1 non-finite value\(s\), first at row 1\)"):
        check_array(X)
    assert torch.isnan(check_array(X, allow_nan=True)).any()
    with pytest.raises(ValueError, match="X is empty"):
        check_array(np.ones((0, 2), dtype=dtype))
    with pytest.raises(ValueError, match="0 feature"):
        check_array(np.ones((2, 0), dtype=dtype))
    with pytest.raises(ValueError, match="Expected 2D array, got 1D"):
        check_array(np.ones(3, dtype=dtype))


@pytest.mark.parametrize("output_type", ["input", "numpy", "torch", "pandas"])
def test_to_outputs_is_to_output(output_type):
    scores, index = torch.rand(4, 2), torch.arange(8).reshape(4, 2)
    kind = output_kind(np.ones((1, 1)))
    with gpumine.config_context(output_type=output_type):
        together = to_outputs(kind, scores, index)
        alone = (to_output(scores, kind), to_output(index, kind))
    for a, b in zip(together, alone):
        assert type(a) is type(b)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
