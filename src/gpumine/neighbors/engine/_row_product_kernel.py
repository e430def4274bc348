"""Products of row-major blocks, ``A @ B.T``, for score blocks with few columns (Triton).

The score blocks of the product search have a short inner dimension (the
features) and a large output (queries x references), written once and read once
by the selection. This kernel loads a program's rows once and writes its output
tile once, in float32 or float64 arithmetic as its operands (``tl.dot`` with
``input_precision="ieee"``); float64 operands may be stored as float32, each
product rounded once to nearest, which halves the bytes the selection reads and
keeps a bound near float64's (BENCHMARKS.md, "Design measurements quoted in the
code", for where it beat cuBLAS).

The torch twin is ``A @ B.T`` (:func:`row_product_torch`); the two agree within
the products' rounding bound, not bit for bit.
"""

from __future__ import annotations

import torch

from ...core.distance import ieee_product

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised on machines without triton
    triton = None
    tl = None

__all__ = ["row_product", "row_product_torch", "row_product_available", "default_row_product_blocks"]
# outputs with this many elements or more are addressed in 64 bits
_WIDE_FROM = 2**31


def row_product_available() -> bool:
    """Whether :func:`row_product` can run (the 'triton' package is installed)."""
    return triton is not None


if triton is not None:

    @triton.jit(do_not_specialize=["M", "N"])
    def _row_product_kernel(A, B, C, M, N, K, stride_a, stride_b, stride_c,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            GROUP_M: tl.constexpr, WIDE: tl.constexpr):
        # programs in groups of GROUP_M row blocks walk the column blocks together, so a group's
        # B tiles are read from L2 while they are hot
        pid = tl.program_id(0)
        blocks_m = tl.cdiv(M, BLOCK_M)
        blocks_n = tl.cdiv(N, BLOCK_N)
        in_group = GROUP_M * blocks_n
        first_m = (pid // in_group) * GROUP_M
        group_rows = tl.minimum(blocks_m - first_m, GROUP_M)
        pid_m = first_m + (pid % in_group) % group_rows
        pid_n = (pid % in_group) // group_rows
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        if WIDE:
            rows = rows.to(tl.int64)
            cols = cols.to(tl.int64)
        inner = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), A.dtype.element_ty)
        for k0 in range(0, K, BLOCK_K):
            ks = k0 + inner
            a = tl.load(A + rows[:, None] * stride_a + ks[None, :], mask=(rows < M)[:, None] & (ks < K)[None, :], other=0.0)
            b = tl.load(B + cols[:, None] * stride_b + ks[None, :], mask=(cols < N)[:, None] & (ks < K)[None, :], other=0.0)
            acc = tl.dot(a, tl.trans(b), acc, input_precision="ieee", out_dtype=A.dtype.element_ty)
        # a float32 output of float64 operands is each product rounded once, to nearest
        tl.store(C + rows[:, None] * stride_c + cols[None, :], acc.to(C.dtype.element_ty),
                 mask=(rows < M)[:, None] & (cols < N)[None, :])


def row_product_torch(A: torch.Tensor, B: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The torch twin of :func:`row_product`: ``A @ B.T`` in the operands' dtype, then rounded to ``out_dtype``."""
    _check(A, B, out_dtype)
    return ieee_product(A, B).to(out_dtype or A.dtype)


def _check(A, B, out_dtype):
    if A.dim() != 2 or B.dim() != 2 or A.shape[1] != B.shape[1]:
        raise ValueError(f"A and B must be matrices with the same number of columns; got {tuple(A.shape)} and {tuple(B.shape)}")
    if A.dtype != B.dtype or A.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"A and B must both be float32 or both float64; got {A.dtype} and {B.dtype}")
    if A.device != B.device:
        raise ValueError(f"A and B must be on one device; got {A.device} and {B.device}")
    out_dtype = out_dtype or A.dtype
    if out_dtype not in (torch.float32, torch.float64) or torch.finfo(out_dtype).bits > torch.finfo(A.dtype).bits:
        raise ValueError(f"out_dtype must be float32 or the operands' dtype; got {out_dtype} for {A.dtype} operands")


def default_row_product_blocks(dtype: torch.dtype) -> tuple[int, int, int, int, int]:
    """(block_m, block_n, block_k, num_warps, num_stages) for the operands' dtype."""
    if dtype == torch.float64:
        return 64, 128, 16, 4, 3
    return 128, 128, 32, 8, 3


def row_product(A: torch.Tensor, B: torch.Tensor, *, out_dtype: torch.dtype | None = None, block_m: int | None = None,
                block_n: int | None = None, block_k: int | None = None, num_warps: int | None = None,
                num_stages: int | None = None) -> torch.Tensor:
    """``A @ B.T`` of row-major CUDA matrices in one launch (see the module docstring).

    Parameters
    ----------
    A, B : (M, K) and (N, K) tensors, both float32 or both float64, on one CUDA device
    out_dtype : torch.dtype, optional
        The output's dtype (default the operands'); float32 for float64 operands
        rounds each float64 product to the nearest float32.
    block_m, block_n, block_k, num_warps, num_stages : int, optional
        Launch shape (default :func:`default_row_product_blocks`).

    Returns
    -------
    (M, N) tensor of ``out_dtype``
    """
    if triton is None:
        raise ValueError("row_product needs the 'triton' package; use row_product_torch")
    _check(A, B, out_dtype)
    A, B = A.contiguous(), B.contiguous()
    M, K = A.shape
    N = B.shape[0]
    C = torch.empty((M, N), dtype=out_dtype or A.dtype, device=A.device)
    if M == 0 or N == 0:
        return C
    if K == 0:
        return C.zero_()
    bm, bn, bk, warps, stages = default_row_product_blocks(A.dtype)
    bm, bn, bk = block_m or bm, block_n or bn, block_k or bk
    warps, stages = num_warps or warps, num_stages or stages
    wide = max(M * N, M * K, N * K) >= _WIDE_FROM
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    _row_product_kernel[grid](A, B, C, M, N, K, A.stride(0), B.stride(0), C.stride(0), BLOCK_M=bm, BLOCK_N=bn,
                              BLOCK_K=bk, GROUP_M=8, WIDE=wide, num_warps=warps,
                              num_stages=stages)
    return C
