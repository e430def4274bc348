"""Data summary Triton kernel vs its torch twin and NumPy.

Collected directly on a GPU machine (``pytest tests/neighbors/engine/triton_data_summary_cases.py``),
and run by ``test_triton_kernels_under_the_interpreter.py`` in a child process with ``TRITON_INTERPRET=1``
on machines without one (small shapes: the interpreter is slow).
"""

import numpy as np
import pytest
import torch

from gpumine.neighbors.engine._summary_kernel import data_summary, data_summary_supported, data_summary_torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ON_GPU = DEVICE == "cuda"
SCALE = 16 if ON_GPU else 1


def _values(kind, shape, rng):
    if kind == "normal":
        return rng.standard_normal(shape).astype(np.float32) * 1e3
    if kind == "integers":
        return rng.integers(-50, 50, shape).astype(np.float32)
    if kind == "zeros_and_signs":  # zeros of both signs beside whole numbers and halves
        return rng.choice(np.array([0.0, -0.0, 1.0, -2.0, 0.5], np.float32), shape)
    if kind == "all_zero":
        return np.zeros(shape, np.float32)
    if kind == "subnormal":  # values under float32's least normal number beside ordinary ones
        return rng.choice(np.array([1e-40, -3e-42, 0.0, 2.0, 7.5e-39], np.float32), shape)
    if kind == "huge":
        return rng.choice(np.array([3e38, -3.4e38, 1.0, 0.0], np.float32), shape)
    raise ValueError(kind)


def _numpy(X):
    """[min, max, smallest nonzero |x|, whole] as the twin defines them (NaN anywhere: NaN, NaN, NaN, 0)."""
    if np.isnan(X).any():
        return np.array([np.nan, np.nan, np.nan, 0.0])
    size = np.abs(X.astype(np.float64))
    nonzero = size[size > 0]
    whole = bool(np.all(X == np.round(X)))
    return np.array([X.min(), X.max(), nonzero.min() if nonzero.size else np.inf, float(whole)], np.float64)


SHAPES = [(1, 1), (3, 7), (129, 8), (1000, 33), (SCALE * 700, 17)]
KINDS = ["normal", "integers", "zeros_and_signs", "all_zero", "subnormal", "huge"]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("special", [None, "nan", "inf", "-inf"])
@pytest.mark.parametrize("scrub", [False, True])
def test_kernel_equals_its_twin_and_numpy(shape, kind, special, scrub):
    rng = np.random.default_rng(sum(shape) + len(kind))
    X = _values(kind, shape, rng)
    if special is not None:
        X.reshape(-1)[rng.integers(0, X.size)] = float(special)
    want = _numpy(X)
    on_kernel = torch.tensor(X, device=DEVICE)
    on_twin = on_kernel.clone()
    assert data_summary_supported(on_kernel)
    got = data_summary(on_kernel, scrub=scrub).cpu().numpy()
    twin = data_summary_torch(on_twin, scrub=scrub).cpu().numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(twin, want)
    scrubbed = np.where(np.isfinite(X), X, np.float32(0.0)) if scrub else X
    np.testing.assert_array_equal(on_kernel.cpu().numpy(), scrubbed)
    np.testing.assert_array_equal(on_twin.cpu().numpy(), scrubbed)


def test_unsupported_data_takes_the_twin():
    X = torch.arange(6, dtype=torch.float64, device=DEVICE).reshape(2, 3)
    assert not data_summary_supported(X) and not data_summary_supported(X.float().T)
    np.testing.assert_array_equal(data_summary(X).cpu().numpy(), [0.0, 5.0, 1.0, 1.0])
    np.testing.assert_array_equal(data_summary(X.float().T).cpu().numpy(), [0.0, 5.0, 1.0, 1.0])
