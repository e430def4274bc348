"""The split product's L2 operand made in one pass over the data (Triton).

A split TF32 product (:mod:`._split_product`) reads each side's L2 rows
(``[x, 1]`` for queries, ``[-2y, |y|^2]`` for references, centred) split into
their leading bits and the rest: ``[hi, hi, lo]`` and ``[hi, lo, hi]``. In torch
that is the centring, the squared norms, the joined rows and the split (about
ten passes over the data and the three-times-wider result, most of a large
reference set's preparation). Here one program reads a block of rows once and
writes the split operand (padded as :func:`._split_product.split_rows` pads it)
and the squared norms.

The torch twin is :func:`split_operand_torch` (:meth:`Metric.prepare` and
:func:`._split_product.split_rows`). Both give the same operand bit for bit
except the squared norms (and the reference side's split of them): the kernel
sums the squares in float64 and rounds once, the twin in float32; either is
within the bound the split product's certificate allows for them.
"""

from __future__ import annotations

import contextlib

import torch

from ...config import triton_available
from ...core.distance import get_metric
from ...core.tiles import PRODUCT_ROW_BYTES
from ._split_product import _TF32_DROPPED_BITS, split_rows

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised on machines without triton
    triton = None
    tl = None

__all__ = ["split_operand", "split_operand_torch", "split_operand_supported", "SPLIT_OPERAND_MAX_FEATURES"]

# features a program holds in registers
SPLIT_OPERAND_MAX_FEATURES = 4095
# values per program (rows x padded features)
_BLOCK_VALUES = 4096

if triton is not None:

    @triton.jit(do_not_specialize=["n", "d", "stride_x", "width"])
    def _split_operand_kernel(X, C, OUT, SQ, n, d, stride_x, width, KEEP: tl.constexpr, HAS_CENTRE: tl.constexpr,
                              REF: tl.constexpr, BLOCK_D: tl.constexpr, ROWS: tl.constexpr, PAD: tl.constexpr):
        rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
        cols = tl.arange(0, BLOCK_D)
        inside = (rows < n)[:, None]
        feature = (cols < d)[None, :]
        m = d + 1
        x = tl.load(X + rows.to(tl.int64)[:, None] * stride_x + cols[None, :], mask=inside & feature, other=0.0)
        if HAS_CENTRE:
            centre = tl.load(C + cols, mask=cols < d, other=0.0)
            x = tl.where(feature, x - centre[None, :], 0.0)
        wide = x.to(tl.float64)
        sq = tl.sum(wide * wide, axis=1).to(tl.float32)
        if REF:
            v = tl.where(feature, -2.0 * x, sq[:, None])
        else:
            v = tl.where(feature, x, 1.0)
        hi = (v.to(tl.int32, bitcast=True) & KEEP).to(tl.float32, bitcast=True)
        lo = ((v - hi).to(tl.int32, bitcast=True) & KEEP).to(tl.float32, bitcast=True)
        at = OUT + rows.to(tl.int64)[:, None] * width + cols[None, :]
        ok = inside & (cols < m)[None, :]  # the row and its last column (|y|^2 or 1)
        tl.store(at, hi, mask=ok)
        if REF:
            tl.store(at + m, lo, mask=ok)
            tl.store(at + 2 * m, hi, mask=ok)
        else:
            tl.store(at + m, hi, mask=ok)
            tl.store(at + 2 * m, lo, mask=ok)
        pad = tl.arange(0, PAD)  # the padding (under 8 columns) may be wider than BLOCK_D at 1 or 2 features
        tl.store(OUT + rows.to(tl.int64)[:, None] * width + 3 * m + pad[None, :], tl.zeros([ROWS, PAD], tl.float32),
                 mask=inside & (pad < width - 3 * m)[None, :])
        tl.store(SQ + rows, sq, mask=rows < n)


def split_operand_supported(X: torch.Tensor) -> bool:
    """Whether :func:`split_operand` runs on its kernel: float32 rows with consecutive features, where Triton launches."""
    return (triton is not None and X.dtype == torch.float32 and X.dim() == 2 and X.shape[0] > 0
            and 0 < X.shape[1] <= SPLIT_OPERAND_MAX_FEATURES and (X.shape[1] == 1 or X.stride(1) == 1)
            and triton_available(X.device))


def split_operand_torch(X: torch.Tensor, centre: torch.Tensor | None, side: str):
    """``(split rows, squared norms)`` of float32 rows ``X`` for a split L2 product (see the module)."""
    prepared = get_metric("sqeuclidean").prepare(X, centre, side)
    return split_rows(prepared["rows"], side, padded=True), prepared["sqnorm"]


def split_operand(X: torch.Tensor, centre: torch.Tensor | None, side: str):
    """:func:`split_operand_torch` in one launch where the kernel runs (:func:`split_operand_supported`)."""
    if side not in ("query", "ref"):
        raise ValueError(f"side must be 'query' or 'ref'; got {side!r}")
    if not split_operand_supported(X):
        return split_operand_torch(X, centre, side)
    n, d = X.shape
    m = d + 1
    per_row = PRODUCT_ROW_BYTES // X.element_size()
    width = 3 * m + (-(3 * m) % per_row)  # split_rows' padding
    out = torch.empty((n, width), dtype=torch.float32, device=X.device)
    sqnorm = torch.empty(n, dtype=torch.float32, device=X.device)
    has_centre = centre is not None
    c = centre.to(device=X.device, dtype=torch.float32).contiguous() if has_centre else X
    block_d = triton.next_power_of_2(d + 1)
    rows = max(1, _BLOCK_VALUES // block_d)
    with torch.cuda.device(X.device) if X.is_cuda else contextlib.nullcontext():  # launched on the data's GPU
        _split_operand_kernel[(triton.cdiv(n, rows),)](
            X, c, out, sqnorm, n, d, X.stride(0), width, KEEP=~_TF32_DROPPED_BITS, HAS_CENTRE=has_centre,
            REF=side == "ref", BLOCK_D=block_d, ROWS=rows, PAD=triton.next_power_of_2(per_row), num_warps=4)
    return out, sqnorm
