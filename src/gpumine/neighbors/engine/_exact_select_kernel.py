"""Exact k-selection in one launch: float64 scores in the engine's summation order, selected in registers.

Each program owns ``BLOCK_M`` queries and streams the references ``BLOCK_N``
at a time in column order. Every (query, reference) score is formed in float64
exactly as :meth:`Metric.exact_scores` forms it for the float64 copy of the
data — the per-feature terms ``(x_f - y_f)^2`` (``|x_f - y_f|``) added left to
right within chunks of ``EXACT_SUM_CHUNK`` features, the chunk sums added left
to right, contraction off — so each score equals the engine's float64 re-score
bit for bit. Selection keeps the ``C`` best (score, column) pairs per query in
registers with the worst of them (largest score, among equal scores the
largest index) as a threshold: per tile one row minimum and one compare, and an
insertion loop only for rows the tile really improves. Every comparison is by
(score, index), so the kept set is exactly the k smallest by (float64 score,
index) in any visiting order — which lets rows given in a space-filling curve's
order (``ref_ids``/``query_ids``/``anchors``) start each query block's scan at its
own neighbourhood, where thresholds tighten within a few tiles and later tiles
rarely enter the insertion loop.

Why it exists: the float32 candidate phase needs a certificate, and ties (integer
features, duplicates, tight clusters) leave rows uncertified. Here the selected
scores are final. Work is one float64 score per pair plus the insertions, for
any data: no certificate, no retry, no radius pass. A lane tied with a row's
worst entry costs an insertion step only when its index is lower.

Small query sets split the references over ``splits`` programs per query block,
each keeping its own ``C`` best; :func:`exact_select` merges them by (score,
index).

The torch twin is :func:`exact_select_torch` (the whole score matrix by
``Metric.exact_scores`` and a sort by (score, index)); both return the same
scores and indices bit for bit.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised on machines without triton
    triton = None
    tl = None

from ...core.distance import EXACT_SUM_CHUNK
from ...core.select import PAD_INDEX, pad_topk, topk_by_score_then_index

__all__ = ["exact_select", "exact_select_torch", "exact_select_available", "EXACT_SELECT_METRICS", "EXACT_SELECT_MAX_K",
           "EXACT_SELECT_MAX_FEATURES"]

EXACT_SELECT_METRICS = ("euclidean", "sqeuclidean", "manhattan")
# per-query lists live in registers (C = the power of two at or above k)
EXACT_SELECT_MAX_K = 128
# the feature loop is unrolled (one load of each feature per tile); wider data runs elsewhere
EXACT_SELECT_MAX_FEATURES = 128
# offsets of operands with this many elements or more are computed in 64 bits
_WIDE_FROM = 2**31


def exact_select_available() -> bool:
    """Whether :func:`exact_select` can run (the 'triton' package is installed)."""
    return triton is not None


if triton is not None:

    @triton.jit
    def _exact64_block(QT, RT, rows, cols, row_ok, col_ok, stride_q_feat, stride_r_feat,
                       D: tl.constexpr, CHUNK: tl.constexpr, MANHATTAN: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        # chunks of CHUNK features, each summed left to right from its first term, chunk sums
        # added left to right (Metric.exact_scores' order); 0 + t is t, so starting at zero is exact
        total = tl.zeros((BLOCK_M, BLOCK_N), tl.float64)
        for c0 in tl.static_range(0, D, CHUNK):
            part = tl.zeros((BLOCK_M, BLOCK_N), tl.float64)
            for f in tl.static_range(c0, min(c0 + CHUNK, D)):
                q = tl.load(QT + f * stride_q_feat + rows, mask=row_ok, other=0.0).to(tl.float64)
                r = tl.load(RT + f * stride_r_feat + cols, mask=col_ok, other=0.0).to(tl.float64)
                diff = q[:, None] - r[None, :]
                if MANHATTAN:
                    part = part + tl.abs(diff)
                else:
                    part = part + diff * diff
            total = total + part
        return total

    @triton.jit(do_not_specialize=["n_query", "n_ref", "refs_per_split", "self_offset", "K"])
    def _exact_select_kernel(
        QT, RT, REF_ID, QUERY_ID, FIRST_TILE, OUT_SCORE, OUT_INDEX,
        n_query, n_ref, refs_per_split, self_offset, K,
        stride_q_feat, stride_r_feat, stride_out,
        D: tl.constexpr, CHUNK: tl.constexpr, MANHATTAN: tl.constexpr, EXCLUDE_SELF: tl.constexpr,
        REORDERED: tl.constexpr, C: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, WIDE: tl.constexpr,
    ):
        pid_m = tl.program_id(0)
        split = tl.program_id(1)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        first = split * refs_per_split
        if WIDE:
            rows = rows.to(tl.int64)
            first = first.to(tl.int64)
        row_ok = rows < n_query
        slots = tl.arange(0, C)
        lanes = tl.arange(0, BLOCK_N)
        NONE: tl.constexpr = 2147483647  # an id above every reference's
        # Each list holds the K best by (score, id) seen so far; the worst entry (largest score,
        # among equal scores the largest id) is the one replaced. Slots past K hold -inf and are
        # never the worst; unfilled slots hold +inf with distinct negative ids.
        best = tl.where(slots[None, :] < K, float("inf"), float("-inf")) + tl.zeros((BLOCK_M, C), tl.float64)
        best_id = tl.zeros((BLOCK_M, C), tl.int32) - 1 - slots[None, :]
        worst = tl.max(best, 1)
        worst_id = tl.max(tl.where(best == worst[:, None], best_id, -NONE), 1)
        last = tl.minimum(first + refs_per_split, n_ref)
        n_tiles = tl.cdiv(last - first, BLOCK_N)
        if REORDERED:
            # rows and references in curve order: a query's own id, and the block starts at the
            # tile of its neighbourhood, wrapping around (thresholds tighten within a few tiles)
            own = tl.load(QUERY_ID + rows, mask=row_ok, other=-1)
            tile0 = tl.minimum(tl.maximum(tl.load(FIRST_TILE + pid_m) - first // BLOCK_N, 0), n_tiles - 1)
        else:
            own = rows + self_offset
            tile0 = 0
        for t in range(0, n_tiles):
            tile = tile0 + t
            tile = tl.where(tile >= n_tiles, tile - n_tiles, tile)
            start = first + tile * BLOCK_N
            cols = start + lanes
            col_ok = cols < last
            if REORDERED:
                ids = tl.load(REF_ID + cols, mask=col_ok, other=NONE)
            else:
                ids = cols.to(tl.int32)
            acc = _exact64_block(QT, RT, rows, cols, row_ok, col_ok, stride_q_feat, stride_r_feat,
                                 D, CHUNK, MANHATTAN, BLOCK_M, BLOCK_N)
            valid = col_ok[None, :]
            if EXCLUDE_SELF:
                valid = valid & (ids[None, :] != own[:, None])
            acc = tl.where(valid, acc, float("inf"))
            # the common case: no lane of any row reaches its worst entry, one reduction
            if tl.max((tl.min(acc, 1) <= worst).to(tl.int32), 0) > 0:
                # lanes that cannot enter (after the worst by (score, id); +inf never does) drop out
                later = (acc > worst[:, None]) | ((acc == worst[:, None]) & (ids[None, :] > worst_id[:, None]))
                acc = tl.where(later, float("inf"), acc)
                low = tl.min(acc, 1)
                while tl.max((low < float("inf")).to(tl.int32), 0) > 0:
                    # the row's best remaining lane by (score, id) replaces its worst entry
                    low_id = tl.min(tl.where(acc == low[:, None], ids[None, :], NONE), 1)
                    enters = low < float("inf")
                    put = (best == worst[:, None]) & (best_id == worst_id[:, None]) & enters[:, None]
                    best = tl.where(put, low[:, None], best)
                    best_id = tl.where(put, low_id[:, None], best_id)
                    worst = tl.max(best, 1)
                    worst_id = tl.max(tl.where(best == worst[:, None], best_id, -NONE), 1)
                    taken = ids[None, :] == low_id[:, None]
                    later = (acc > worst[:, None]) | ((acc == worst[:, None]) & (ids[None, :] > worst_id[:, None]))
                    acc = tl.where(taken | later, float("inf"), acc)
                    low = tl.min(acc, 1)
        out = rows[:, None] * stride_out + split * C + slots[None, :]
        tl.store(OUT_SCORE + out, best, mask=row_ok[:, None])
        tl.store(OUT_INDEX + out, best_id, mask=row_ok[:, None])


def _check(QT: torch.Tensor, RT: torch.Tensor, k: int, metric_name: str):
    if metric_name not in EXACT_SELECT_METRICS:
        raise ValueError(f"metric {metric_name!r} has no exact selection kernel; use one of {EXACT_SELECT_METRICS}")
    if QT.dtype not in (torch.float32, torch.float64) or RT.dtype != QT.dtype:
        raise ValueError(f"QT and RT must both be float32 or both float64; got {QT.dtype} and {RT.dtype}")
    if QT.dim() != 2 or RT.dim() != 2 or QT.shape[0] != RT.shape[0]:
        raise ValueError(f"QT and RT must be feature-major (d, n) with the same d; got {tuple(QT.shape)} and {tuple(RT.shape)}")
    if not 0 < QT.shape[0] <= EXACT_SELECT_MAX_FEATURES:
        raise ValueError(f"exact selection takes 1 to {EXACT_SELECT_MAX_FEATURES} features; got {QT.shape[0]}")
    if not 1 <= k <= EXACT_SELECT_MAX_K:
        raise ValueError(f"k must be between 1 and {EXACT_SELECT_MAX_K} for the exact selection kernel; got {k}")


def exact_select_torch(QT: torch.Tensor, RT: torch.Tensor, k: int, metric_name: str, *, exclude_self: bool = False,
                       self_offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The torch twin of :func:`exact_select` (same arguments, same result bit for bit)."""
    from ...core.distance import get_metric

    _check(QT, RT, k, metric_name)
    Q64, R64 = QT.T.to(torch.float64), RT.T.to(torch.float64)
    scores = get_metric(metric_name).exact_scores(Q64, R64[None])
    if exclude_self:
        rows = torch.arange(Q64.shape[0], device=QT.device) + self_offset
        inside = (rows >= 0) & (rows < R64.shape[0])
        scores[inside.nonzero().squeeze(1), rows[inside]] = float("inf")
    index = torch.arange(R64.shape[0], device=QT.device).expand(Q64.shape[0], -1)
    index = torch.where(torch.isinf(scores), PAD_INDEX, index)  # masked and missing entries are padding
    return pad_topk(*topk_by_score_then_index(scores, index, k), k)


def default_splits(n_query: int, n_ref: int, block_m: int, block_n: int, device: torch.device) -> int:
    """Reference splits per query block: enough programs to fill the GPU, each split at least a few tiles."""
    if device.type != "cuda":
        return 1
    programs = -(-n_query // block_m)
    target = 4 * torch.cuda.get_device_properties(device).multi_processor_count
    if programs >= target:
        return 1
    return max(1, min(-(-target // programs), n_ref // (8 * block_n)))


def default_blocks(C: int) -> tuple[int, int, int]:
    """(block_m, block_n, num_warps): float64 lists of C entries per query share the registers with the tile."""
    if C <= 32:
        return 32, 32, 4
    if C <= 64:
        return 16, 32, 4
    return 16, 32, 8


def exact_select(QT: torch.Tensor, RT: torch.Tensor, k: int, metric_name: str, *, exclude_self: bool = False,
                 self_offset: int = 0, ref_ids: torch.Tensor | None = None, query_ids: torch.Tensor | None = None,
                 anchors: torch.Tensor | None = None, splits: int | None = None, block_m: int | None = None,
                 block_n: int | None = None, num_warps: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` nearest references of every query by (float64 exact score, index), in one kernel launch.

    Parameters
    ----------
    QT, RT : float32 or float64 tensors (d, n_query) and (d, n_ref), feature-major, on one CUDA device
    k : int
        Neighbours per query, 1 to ``EXACT_SELECT_MAX_K``.
    metric_name : {"euclidean", "sqeuclidean", "manhattan"}
        Squared differences for the first two (the engine's L2 score), absolute ones for manhattan.
    exclude_self, self_offset : bool, int
        Leave out the pair (query ``i``, reference ``i + self_offset``); with ``query_ids``,
        the pairs whose query id and reference id are equal.
    ref_ids, query_ids, anchors : int32 tensors (n_ref,), (n_query,), (n_query,), optional
        For rows given in another order (a space-filling curve's): each reference's and
        each query's id (the indices reported and the tie rule use reference ids; a
        query's own reference is the one with its id), and each query's position among
        the references, where its block starts its scan (then wrapping around). All
        three or none. Output rows stay in the order the queries are given.
    splits, block_m, block_n, num_warps : int, optional
        Launch shape (defaults: :func:`default_splits`, :func:`default_blocks`).

    Returns
    -------
    scores : (n_query, k) float64, ascending; ``+inf`` where a query has fewer than k references
    index : (n_query, k) int64 reference positions (their ids when reordered), ``-1`` padding
    """
    if triton is None:
        raise ValueError("exact selection on the GPU needs the 'triton' package; use exact_select_torch")
    _check(QT, RT, k, metric_name)
    reordered = ref_ids is not None
    if reordered != (query_ids is not None) or reordered != (anchors is not None):
        raise ValueError("ref_ids, query_ids and anchors go together: give all three or none")
    d, n_query = QT.shape
    n_ref = RT.shape[1]
    if n_query == 0 or n_ref == 0:
        return pad_topk(QT.new_empty((n_query, 0), dtype=torch.float64), QT.new_empty((n_query, 0), dtype=torch.int64), k)
    QT = QT if QT.stride(1) == 1 else QT.contiguous()
    RT = RT if RT.stride(1) == 1 else RT.contiguous()
    C = max(2, 1 << (min(k, n_ref) - 1).bit_length())
    bm, bn, warps = default_blocks(C)
    bm, bn, warps = block_m or bm, block_n or bn, num_warps or warps
    if splits is None:
        splits = default_splits(n_query, n_ref, bm, bn, QT.device)
    refs_per_split = -(-(-(-n_ref // splits)) // bn) * bn
    splits = -(-n_ref // refs_per_split)
    scores = torch.empty((n_query, splits * C), dtype=torch.float64, device=QT.device)
    index = torch.empty((n_query, splits * C), dtype=torch.int32, device=QT.device)
    wide = max(QT.stride(0) * d, RT.stride(0) * d, n_query * splits * C) >= _WIDE_FROM
    if reordered:
        if ref_ids.shape != (n_ref,) or query_ids.shape != (n_query,) or anchors.shape != (n_query,):
            raise ValueError(f"ref_ids, query_ids and anchors need one entry per reference ({n_ref}), query ({n_query}) "
                             f"and query; got {tuple(ref_ids.shape)}, {tuple(query_ids.shape)}, {tuple(anchors.shape)}")
        middle = (torch.arange(0, n_query, bm, device=QT.device) + bm // 2).clamp(max=n_query - 1)
        first_tiles = (anchors[middle].clamp(0, n_ref - 1) // bn).to(torch.int32)
        ref_ids, query_ids = ref_ids.to(torch.int32).contiguous(), query_ids.to(torch.int32).contiguous()
    else:
        ref_ids = query_ids = first_tiles = index  # unused
    grid = (triton.cdiv(n_query, bm), splits)
    _exact_select_kernel[grid](
        QT, RT, ref_ids, query_ids, first_tiles, scores, index, n_query, n_ref, refs_per_split, self_offset, min(k, C),
        QT.stride(0), RT.stride(0), scores.stride(0),
        D=d, CHUNK=EXACT_SUM_CHUNK, MANHATTAN=metric_name == "manhattan", EXCLUDE_SELF=exclude_self, REORDERED=reordered,
        C=C, BLOCK_M=bm, BLOCK_N=bn, WIDE=wide, num_warps=warps, enable_fp_fusion=False,
    )
    index = index.to(torch.int64)
    unused = index < 0  # placeholders: +inf of a list not yet full, -inf of the slots past k
    index = torch.where(unused, PAD_INDEX, index)
    scores = torch.where(unused, float("inf"), scores)
    return pad_topk(*topk_by_score_then_index(scores, index, k), k)
