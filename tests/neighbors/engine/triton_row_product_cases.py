"""Row-product Triton kernel (``A @ B.T``) vs float64 on irregular shapes, and its launcher's checks.

Collected directly on a GPU machine (``pytest tests/neighbors/engine/triton_row_product_cases.py``),
and run by ``test_triton_kernels_under_the_interpreter.py`` in a child process with ``TRITON_INTERPRET=1``
on machines without one.
"""

import numpy as np
import pytest
import torch

from gpumine.neighbors.engine._row_product_kernel import row_product, row_product_torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SMALL = dict(block_m=32, block_n=32, block_k=16) if DEVICE == "cpu" else {}


def _operands(m, n, k, dtype, seed):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m, k)) * rng.choice([1e-3, 1.0, 1e3], size=(m, 1))
    B = rng.standard_normal((n, k))
    return torch.tensor(A, dtype=dtype, device=DEVICE), torch.tensor(B, dtype=dtype, device=DEVICE)


@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (37, 45, 19), (70, 33, 58), (5, 130, 3), (300, 20, 7)])
@pytest.mark.parametrize("dtype, out_dtype", [(torch.float64, None), (torch.float64, torch.float32), (torch.float32, None)])
def test_within_the_rounding_bound_of_float64(m, n, k, dtype, out_dtype):
    # (300 rows: more row blocks than a group of programs walks together)
    A, B = _operands(m, n, k, dtype, m + n + k)
    C = row_product(A, B, out_dtype=out_dtype, **SMALL)
    assert C.shape == (m, n) and C.dtype == (out_dtype or dtype)
    exact = A.double().cpu() @ B.double().cpu().T
    size = A.double().abs().cpu() @ B.double().abs().cpu().T
    u = 2.0**-53 if dtype == torch.float64 else 2.0**-24
    bound = (k + 1) * u * size
    if out_dtype == torch.float32:  # then rounded once to the nearest float32
        bound = bound + 2.0**-24 * exact.abs()
    assert ((C.double().cpu() - exact).abs() <= bound).all()
    if out_dtype == torch.float32:  # float64 products rounded once: the twin's, where they agree in float64
        assert (C.cpu() == (A.cpu() @ B.cpu().T).float()).float().mean() > 0.9
    twin = row_product_torch(A, B, out_dtype)
    assert twin.dtype == C.dtype and ((twin.double().cpu() - exact).abs() <= bound).all()


def test_empty_operands():
    A, B = _operands(4, 3, 5, torch.float64, 0)
    assert row_product(A[:0], B).shape == (0, 3)
    assert torch.equal(row_product(A[:, :0], B[:, :0]).cpu(), torch.zeros((4, 3), dtype=torch.float64))


def test_bad_input_is_refused():
    A, B = _operands(4, 3, 5, torch.float64, 0)
    with pytest.raises(ValueError, match="same number of columns"):
        row_product(A, B[:, :4])
    with pytest.raises(ValueError, match="must both be float32 or both float64"):
        row_product(A, B.float())
    with pytest.raises(ValueError, match="out_dtype"):
        row_product(A.float(), B.float(), out_dtype=torch.float64)
