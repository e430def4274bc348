"""Split-operand Triton kernel vs its torch twin and float64 NumPy.

Collected directly on a GPU machine (``pytest tests/neighbors/engine/triton_split_operand_cases.py``),
and run by ``test_triton_kernels_under_the_interpreter.py`` in a child process with ``TRITON_INTERPRET=1``
on machines without one (small shapes: the interpreter is slow).
"""

import numpy as np
import pytest
import torch

from gpumine.neighbors.engine._split_operand_kernel import split_operand, split_operand_supported, split_operand_torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ON_GPU = DEVICE == "cuda"
SCALE = 16 if ON_GPU else 1


def _norm_columns(d, side):
    """Columns of the split operand that hold parts of the squared norm (the reference side's last column)."""
    m = d + 1
    return [d, m + d, 2 * m + d] if side == "ref" else []


@pytest.mark.parametrize("n,d", [(1, 1), (4, 2), (5, 7), (6, 10), (77, 31), (SCALE * 64, 128), (9, 1555)])
@pytest.mark.parametrize("side", ["query", "ref"])
@pytest.mark.parametrize("centred", [False, True])
@pytest.mark.parametrize("strided", [False, True])
def test_kernel_equals_its_twin_and_float64(n, d, side, centred, strided, monkeypatch):
    empty = torch.empty  # fresh buffers full of NaN: every column the kernel must write shows if it does not
    monkeypatch.setattr(torch, "empty", lambda *a, **k: empty(*a, **k).fill_(float("nan")))
    rng = np.random.default_rng(n * 7 + d)
    wide = (rng.standard_normal((n, d + 3)) * 10.0 ** rng.uniform(-3, 3, d + 3)).astype(np.float32)
    X = torch.tensor(wide, device=DEVICE)[:, :d] if strided else torch.tensor(wide[:, :d].copy(), device=DEVICE)
    centre = torch.tensor(wide[:, :d].mean(0), device=DEVICE) if centred else None
    assert split_operand_supported(X)
    rows, sqnorm = split_operand(X, centre, side)
    twin_rows, twin_sqnorm = split_operand_torch(X, centre, side)
    assert rows.shape == twin_rows.shape and rows.dtype == twin_rows.dtype == torch.float32
    keep = [j for j in range(rows.shape[1]) if j not in _norm_columns(d, side)]
    np.testing.assert_array_equal(rows[:, keep].cpu().numpy(), twin_rows[:, keep].cpu().numpy())
    # the squared norms: float64 sums rounded once (the twin's float32 sums are within their rounding)
    Xc = wide[:, :d].astype(np.float64) - (wide[:, :d].mean(0).astype(np.float32).astype(np.float64) if centred else 0.0)
    exact = (Xc * Xc).sum(1)
    np.testing.assert_allclose(sqnorm.cpu().numpy(), exact, rtol=2.0**-22)
    np.testing.assert_allclose(twin_sqnorm.cpu().numpy(), exact, rtol=(d + 2) * 2.0**-23)
    # the split parts add up to the joined row: hi + lo within TF32's dropped bits of each value
    m = d + 1
    parts = rows.double().cpu().numpy()
    joined = parts[:, :m] + (parts[:, m : 2 * m] if side == "ref" else parts[:, 2 * m : 3 * m])
    want = np.concatenate([(-2.0 if side == "ref" else 1.0) * Xc, (exact if side == "ref" else np.ones(n))[:, None]], 1)
    np.testing.assert_allclose(joined, want, rtol=2.0**-20, atol=1e-30)
    assert (rows[:, 3 * m :] == 0).all()


def test_unsupported_input_takes_the_twin():
    X = torch.ones((3, 2), dtype=torch.float64, device=DEVICE)
    assert not split_operand_supported(X)
    with pytest.raises(ValueError, match="side"):
        split_operand(X.float(), None, "both")
