"""Exact score tiles for large k: every (query, reference) score of a tile, as the engine's exact form.

Above the fused kernel's register budget (k of a few hundred and more) the kNN
engine selects from whole score tiles. At few features a tile can be scored by
the exact per-pair form itself — the per-feature terms ``(x - y)^2`` or
``|x - y|`` added left to right, as ``Metric.exact_scores_by_feature`` does —
so the selected scores are final: no candidate margin, no gather of candidate
rows, no exact re-rank. Each program writes one ``BLOCK_M x BLOCK_N`` block;
floating-point contraction is off, so ``diff * diff + total`` rounds twice as
the torch twin's separate operations do, and every score equals the twin's bit
for bit.

The torch twin is :func:`exact_tile_scores_torch` (``Metric.exact_scores`` of
the tile, plus the self mask).
"""

from __future__ import annotations

import torch

from ...core.tiles import unit_row_stride

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised on machines without triton
    triton = None
    tl = None

__all__ = ["exact_tile_available", "exact_tile_scores", "exact_tile_scores_torch", "scores_within", "scores_within_torch", "EXACT_TILE_METRICS",
           "EXACT_TILE_MAX_FEATURES"]

EXACT_TILE_METRICS = ("euclidean", "sqeuclidean", "manhattan")
EXACT_TILE_MAX_FEATURES = 16  # as distance.SEQUENTIAL_MAX_FEATURES: the exact form sums feature by feature up to here


def exact_tile_available() -> bool:
    """Whether :func:`exact_tile_scores` can run (the 'triton' package is installed)."""
    return triton is not None

if triton is not None:

    @triton.jit
    def _exact_block(QT, RT, rows, cols, row_ok, col_ok, self_offset, stride_q_feat, stride_r_feat,
                     D: tl.constexpr, MANHATTAN: tl.constexpr, EXCLUDE_SELF: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        # the per-feature terms added left to right, one rounding each (the kernels run with contraction off)
        total = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        for f in tl.static_range(D):
            q = tl.load(QT + f * stride_q_feat + rows, mask=row_ok, other=0.0)
            r = tl.load(RT + f * stride_r_feat + cols, mask=col_ok, other=0.0)
            diff = q[:, None] - r[None, :]
            if MANHATTAN:
                total = total + tl.abs(diff)
            else:
                total = total + diff * diff
        if EXCLUDE_SELF:
            total = tl.where(cols[None, :] == rows[:, None] + self_offset, float("inf"), total)
        return total

    @triton.jit(do_not_specialize=["n_query", "n_ref", "self_offset"])
    def _exact_tile_kernel(
        QT, RT, OUT,
        n_query, n_ref, self_offset,
        stride_q_feat, stride_r_feat, stride_out,
        D: tl.constexpr, MANHATTAN: tl.constexpr, EXCLUDE_SELF: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    ):
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        row_ok = rows < n_query
        col_ok = cols < n_ref
        total = _exact_block(QT, RT, rows, cols, row_ok, col_ok, self_offset, stride_q_feat, stride_r_feat,
                             D, MANHATTAN, EXCLUDE_SELF, BLOCK_M, BLOCK_N)
        tl.store(OUT + rows[:, None] * stride_out + cols[None, :], total, mask=row_ok[:, None] & col_ok[None, :])

    @triton.jit(do_not_specialize=["n_query", "n_ref", "cap", "self_offset"])
    def _within_threshold_kernel(
        QT, RT, TAU, OUT_SCORE, OUT_INDEX, COUNT,
        n_query, n_ref, cap, self_offset,
        stride_q_feat, stride_r_feat, stride_out,
        D: tl.constexpr, MANHATTAN: tl.constexpr, EXCLUDE_SELF: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    ):
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_query
        tau = tl.load(TAU + rows, mask=row_ok, other=float("-inf"))  # rows past the end keep nothing
        count = tl.zeros((BLOCK_M,), tl.int32)
        lanes = tl.arange(0, BLOCK_N)
        for start in range(0, n_ref, BLOCK_N):
            cols = start + lanes
            col_ok = cols < n_ref
            total = _exact_block(QT, RT, rows, cols, row_ok, col_ok, self_offset, stride_q_feat, stride_r_feat,
                                 D, MANHATTAN, EXCLUDE_SELF, BLOCK_M, BLOCK_N)
            keep = (total <= tau[:, None]) & col_ok[None, :]
            kept = keep.to(tl.int32)
            # each row's kept scores go to its next free slots, in column order
            slot = count[:, None] + tl.cumsum(kept, axis=1) - 1
            put = keep & (slot < cap)
            out = rows[:, None] * stride_out + slot
            tl.store(OUT_SCORE + out, total, mask=put)
            tl.store(OUT_INDEX + out, cols[None, :] + tl.zeros((BLOCK_M, BLOCK_N), tl.int32), mask=put)
            count += tl.sum(kept, axis=1)
        tl.store(COUNT + rows, count, mask=row_ok)


def _check(QT: torch.Tensor, RT: torch.Tensor, metric_name: str):
    if metric_name not in EXACT_TILE_METRICS:
        raise ValueError(f"metric {metric_name!r} has no exact tile kernel; use one of {EXACT_TILE_METRICS}")
    if QT.dtype != torch.float32 or RT.dtype != torch.float32:
        raise ValueError("exact score tiles are float32; float64 data runs on the engine's torch path")
    if QT.dim() != 2 or RT.dim() != 2 or QT.shape[0] != RT.shape[0]:
        raise ValueError(f"QT and RT must be feature-major (d, n) with the same d; got {tuple(QT.shape)} and {tuple(RT.shape)}")
    if not 0 < QT.shape[0] <= EXACT_TILE_MAX_FEATURES:
        raise ValueError(f"exact score tiles take 1 to {EXACT_TILE_MAX_FEATURES} features; got {QT.shape[0]}")


def exact_tile_scores_torch(QT: torch.Tensor, RT: torch.Tensor, metric_name: str, *, exclude_self: bool = False,
                            self_offset: int = 0) -> torch.Tensor:
    """The torch twin of :func:`exact_tile_scores` (same arguments, same result bit for bit)."""
    from ...core.distance import get_metric

    _check(QT, RT, metric_name)
    scores = get_metric(metric_name).exact_scores_by_feature(QT.T, lambda f: RT[f][None, :])
    if exclude_self:
        rows = torch.arange(QT.shape[1], device=QT.device) + self_offset
        inside = (rows >= 0) & (rows < RT.shape[1])
        scores[inside.nonzero().squeeze(1), rows[inside]] = float("inf")
    return scores


def exact_tile_scores(QT: torch.Tensor, RT: torch.Tensor, metric_name: str, *, exclude_self: bool = False,
                      self_offset: int = 0, block_m: int = 32, block_n: int = 128, num_warps: int = 4) -> torch.Tensor:
    """Exact scores of every query against every reference, as one (n_query, n_ref) float32 tile.

    Parameters
    ----------
    QT, RT : float32 tensors (d, n_query) and (d, n_ref), feature-major, on one device
        Feature-major so that each feature's values load contiguously.
    metric_name : {"euclidean", "sqeuclidean", "manhattan"}
        Squared differences for the first two (the engine's L2 score), absolute for manhattan.
    exclude_self, self_offset : bool, int
        Score the pair (query ``i``, reference ``i + self_offset``) ``+inf``.

    Returns
    -------
    scores : (n_query, n_ref) float32, equal bit for bit to ``Metric.exact_scores``.
    """
    if triton is None:
        raise ValueError("exact score tiles on the GPU need the 'triton' package; use exact_tile_scores_torch")
    _check(QT, RT, metric_name)
    d, n_query = QT.shape
    n_ref = RT.shape[1]
    # rows of each feature contiguous; a column slice of a feature-major copy needs no copy
    QT = unit_row_stride(QT)
    RT = unit_row_stride(RT)
    out = torch.empty((n_query, n_ref), dtype=torch.float32, device=QT.device)
    if n_query == 0 or n_ref == 0:
        return out
    grid = (triton.cdiv(n_query, block_m), triton.cdiv(n_ref, block_n))
    _exact_tile_kernel[grid](
        QT, RT, out, n_query, n_ref, self_offset, QT.stride(0), RT.stride(0), out.stride(0),
        D=d, MANHATTAN=metric_name == "manhattan", EXCLUDE_SELF=exclude_self, BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=num_warps, enable_fp_fusion=False,
    )
    return out


def _empty_lists(n_query: int, cap: int, device):
    scores = torch.full((n_query, cap), float("inf"), dtype=torch.float32, device=device)
    index = torch.full((n_query, cap), -1, dtype=torch.int32, device=device)
    return scores, index


def scores_within_torch(QT: torch.Tensor, RT: torch.Tensor, threshold: torch.Tensor, cap: int, metric_name: str, *,
                        exclude_self: bool = False, self_offset: int = 0):
    """The torch twin of :func:`scores_within` (same arguments, same result bit for bit)."""
    S = exact_tile_scores_torch(QT, RT, metric_name, exclude_self=exclude_self, self_offset=self_offset)
    keep = S <= threshold[:, None]
    slot = keep.to(torch.int64).cumsum(1) - 1
    put = keep & (slot < cap)
    scores, index = _empty_lists(S.shape[0], cap, S.device)
    rows, cols = put.nonzero(as_tuple=True)
    scores[rows, slot[rows, cols]] = S[rows, cols]
    index[rows, slot[rows, cols]] = cols.to(torch.int32)
    return scores, index, keep.sum(1, dtype=torch.int32)


def scores_within(QT: torch.Tensor, RT: torch.Tensor, threshold: torch.Tensor, cap: int, metric_name: str, *,
                  exclude_self: bool = False, self_offset: int = 0, block_m: int = 16, block_n: int = 256, num_warps: int = 4):
    """Every reference whose exact score is at most the query's threshold, without a score tile in memory.

    Scores are formed as in :func:`exact_tile_scores`; each query's kept
    references go, in column order, to its first ``cap`` slots.

    Parameters
    ----------
    QT, RT : float32 tensors (d, n_query) and (d, n_ref), feature-major, on one device
    threshold : float32 tensor (n_query,)
        Kept: score <= threshold (NaN keeps nothing).
    cap : int
        Slots per query; a query with more kept references has ``count > cap``.
    metric_name, exclude_self, self_offset
        As :func:`exact_tile_scores`.

    Returns
    -------
    scores : (n_query, cap) float32, unused slots ``+inf``
    index : (n_query, cap) int32 reference positions, unused slots ``-1``
    count : (n_query,) int32, how many references each query kept (may exceed ``cap``)
    """
    if triton is None:
        raise ValueError("scores_within on the GPU needs the 'triton' package; use scores_within_torch")
    _check(QT, RT, metric_name)
    if threshold.shape != (QT.shape[1],) or threshold.dtype != torch.float32:
        raise ValueError(f"threshold must be float32 with one entry per query ({QT.shape[1]}); got {tuple(threshold.shape)}")
    if cap < 1:
        raise ValueError(f"cap must be at least 1; got {cap}")
    d, n_query = QT.shape
    n_ref = RT.shape[1]
    QT = unit_row_stride(QT)
    RT = unit_row_stride(RT)
    scores, index = _empty_lists(n_query, cap, QT.device)
    count = torch.zeros(n_query, dtype=torch.int32, device=QT.device)
    if n_query == 0 or n_ref == 0:
        return scores, index, count
    _within_threshold_kernel[(triton.cdiv(n_query, block_m),)](
        QT, RT, threshold.contiguous(), scores, index, count, n_query, n_ref, cap, self_offset,
        QT.stride(0), RT.stride(0), scores.stride(0),
        D=d, MANHATTAN=metric_name == "manhattan", EXCLUDE_SELF=exclude_self, BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=num_warps, enable_fp_fusion=False,
    )
    return scores, index, count
