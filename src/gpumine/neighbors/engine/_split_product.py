"""Float32 matrix products from TF32 tensor cores: each operand split in two, three products in one.

GPUs with TF32 tensor cores multiply TF32 values (float32 with 10 explicit
mantissa bits) at several times the float32 rate, and a product of two TF32
values is exact in float32. Each float32 value ``x`` is split into ``x_hi``, its
leading mantissa bits (the low 13 bits cleared, so a tensor core reads it
exactly), and ``x_lo``, the remainder ``x - x_hi`` (exact in float32) cleared the
same way. Then

    x . y  ~  x_hi . y_hi + x_hi . y_lo + x_lo . y_hi,

one product of rows ``[x_hi, x_hi, x_lo]`` and ``[y_hi, y_lo, y_hi]`` (three times
the inner dimension, one output). Per term the dropped parts (``x_lo y_lo``, and
what clearing took from ``x - x_hi`` and ``y - y_hi``) are each under
``2^-20 |x| |y|``: :data:`SPLIT_ROUNDOFF` (``2^-18``) bounds their sum, so a
product's error is at most ``SPLIT_ROUNDOFF * sum_f |x_f| |y_f|``, plus the
rounding of a sum of three times as many terms, plus per term what flushing a
subnormal product to zero loses (:data:`SPLIT_FLUSHED`). Tensor cores sum
without IEEE rounding to nearest (addends aligned and truncated): the sum's
bound is taken at :data:`SPLIT_SUM_ROUNDING` times float32's. Where the product
runs without tensor cores (a CPU) the split terms are multiplied in float32
exactly, and the same bound holds.

The TF32 products are asked of cuBLAS through torch's process-wide switch
(:func:`gpumine.core.distance.tf32_product`: set for the one product under
:data:`gpumine.core.distance.TF32_SWITCH` and restored). The library's float32
products that must not run in TF32 take the same lock
(:func:`gpumine.core.distance.ieee_product`); a float32 product that code outside
the library runs in another thread at that moment may run in TF32.
"""

from __future__ import annotations

import torch

from ...core.distance import tf32_product
from ...core.tiles import PRODUCT_ROW_BYTES

__all__ = ["SPLIT_ROUNDOFF", "SPLIT_SUM_ROUNDING", "SPLIT_FLUSHED", "split_rows", "split_product", "split_terms"]

# bound on the dropped parts of one split product, relative to |x| |y| (3 * 2^-20 and a margin)
SPLIT_ROUNDOFF = 2.0**-18
# the tensor cores' sum: truncation after aligning its addends loses up to twice what rounding to
# nearest does per addition; four times float32's bound leaves a margin
SPLIT_SUM_ROUNDING = 4.0
# per term, what a subnormal product flushed to zero can lose (under float32's least normal number)
SPLIT_FLUSHED = 2.0**-126
# the float32 bits a TF32 tensor core ignores
_TF32_DROPPED_BITS = (1 << 13) - 1


def split_rows(rows: torch.Tensor, side: str, padded: bool = False) -> torch.Tensor:
    """Float32 ``rows`` (n, m) as (n, 3m): ``[hi, hi, lo]`` for ``side="query"``, ``[hi, lo, hi]`` for ``"ref"``.

    ``padded``: zero columns appended as :func:`gpumine.core.tiles.padded_columns` appends them,
    the parts written into that buffer directly (no copy of the joined rows).
    """
    if rows.dtype != torch.float32 or rows.dim() != 2:
        raise ValueError(f"split_rows takes a float32 matrix; got {rows.dtype} {tuple(rows.shape)}")
    if side not in ("query", "ref"):
        raise ValueError(f"side must be 'query' or 'ref'; got {side!r}")
    rows = rows.contiguous()
    n, m = rows.shape
    width = 3 * m
    if padded:
        width += -width % max(1, PRODUCT_ROW_BYTES // rows.element_size())
    out = torch.empty((n, width), dtype=torch.float32, device=rows.device)
    hi, lo, other_hi = (out[:, :m], out[:, 2 * m : 3 * m], out[:, m : 2 * m]) if side == "query" else (
        out[:, :m], out[:, m : 2 * m], out[:, 2 * m : 3 * m])
    # hi: the leading bits; lo: what is left (exact in float32), its trailing bits cleared the same way
    torch.bitwise_and(rows.view(torch.int32), ~_TF32_DROPPED_BITS, out=hi.view(torch.int32))
    torch.sub(rows, hi, out=lo)
    lo.view(torch.int32).bitwise_and_(~_TF32_DROPPED_BITS)
    other_hi.copy_(hi)
    out[:, 3 * m :].zero_()
    return out


def split_terms(m: int) -> int:
    """Terms a split product sums for an inner dimension of ``m`` (for its rounding bound)."""
    return 3 * m


def split_product(query_rows: torch.Tensor, ref_rows: torch.Tensor) -> torch.Tensor:
    """``query_rows @ ref_rows.T`` of split rows (:func:`split_rows`) on TF32 tensor cores where there are some."""
    return tf32_product(query_rows, ref_rows)
