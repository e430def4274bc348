"""Tile scores reduced to group minima in one kernel: the first stage of the kNN selection.

The torch engine scores a (queries x references) tile with one matrix product
and then takes, for every group of 8 strided columns (column ``g + m * G``
belongs to group ``g``), the minimum: the hierarchical selection only ever
needs those minima and the columns of the best groups. This kernel computes the
eight products of a group tile in registers (float32, IEEE: no TF32) and writes
only their element-wise minimum, so the full score tile never reaches global
memory — an eighth of the writes and no second pass.

Torch twin: ``(Q @ R.T)[:, :8G].view(q, 8, G).amin(1)`` — equal up to the
rounding of the dot products (summation order), which the engine's error bound
covers.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - machines without triton
    triton = None
    tl = None

__all__ = ["group_minima", "group_minima_torch", "GROUP"]

GROUP = 8

if triton is not None:

    @triton.jit
    def _group_minima_kernel(
        Q, R, OUT,
        n_query, n_groups, n_features,
        stride_q, stride_r, stride_out,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_SIZE: tl.constexpr,
    ):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        groups = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        row_ok = rows < n_query
        group_ok = groups < n_groups
        feats = tl.arange(0, BLOCK_K)
        best = tl.full((BLOCK_M, BLOCK_N), float("inf"), tl.float32)
        for m in tl.static_range(GROUP_SIZE):
            cols = groups + m * n_groups
            acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
            for k0 in range(0, n_features, BLOCK_K):
                f = k0 + feats
                f_ok = f < n_features
                q = tl.load(Q + rows[:, None] * stride_q + f[None, :], mask=row_ok[:, None] & f_ok[None, :], other=0.0)
                r = tl.load(R + cols[None, :] * stride_r + f[:, None], mask=group_ok[None, :] & f_ok[:, None], other=0.0)
                acc += tl.dot(q, r, input_precision="ieee")
            best = tl.minimum(best, acc)
        out = OUT + rows[:, None] * stride_out + groups[None, :]
        tl.store(out, best, mask=row_ok[:, None] & group_ok[None, :])


def group_minima_torch(Q: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    """The torch twin: minima over the strided groups of ``Q @ R.T`` (first ``8 * (n_ref // 8)`` columns)."""
    n_groups = R.shape[0] // GROUP
    S = Q @ R[: GROUP * n_groups].T
    return S.view(Q.shape[0], GROUP, n_groups).amin(1)


def group_minima(Q: torch.Tensor, R: torch.Tensor, *, block_m: int = 64, block_n: int = 64, block_k: int = 16) -> torch.Tensor:
    """Minima over the strided column groups of ``Q @ R.T`` without materialising the product.

    Parameters
    ----------
    Q : (n_query, K) float32, row-major
    R : (n_ref, K) float32, row-major
        Prepared rows whose dot products are the tile scores (see
        ``gpumine.core.distance.Metric.prepare``).

    Returns
    -------
    (n_query, n_ref // 8) float32: entry ``(i, g)`` is the smallest of
    ``Q[i] . R[g + m * (n_ref // 8)]`` over ``m = 0..7``. Columns past
    ``8 * (n_ref // 8)`` are not covered (the caller scores that tail itself).
    """
    if triton is None:
        raise ValueError("group_minima needs the 'triton' package; use backend='torch'")
    if Q.dtype != torch.float32 or R.dtype != torch.float32:
        raise ValueError("group_minima computes in float32; use backend='torch' for float64 data")
    if Q.shape[1] != R.shape[1]:
        raise ValueError(f"Q has {Q.shape[1]} features but R has {R.shape[1]}")
    Q, R = Q.contiguous(), R.contiguous()
    n_query, n_features = Q.shape
    n_groups = R.shape[0] // GROUP
    out = torch.empty((n_query, n_groups), dtype=torch.float32, device=Q.device)
    if n_query == 0 or n_groups == 0:
        return out
    grid = (triton.cdiv(n_query, block_m), triton.cdiv(n_groups, block_n))
    _group_minima_kernel[grid](
        Q, R, out,
        n_query, n_groups, n_features,
        Q.stride(0), R.stride(0), out.stride(0),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_SIZE=GROUP,
    )
    return out
