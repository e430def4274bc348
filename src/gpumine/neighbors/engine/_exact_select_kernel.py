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
from ...core.tiles import unit_row_stride

__all__ = ["exact_select", "exact_select_checked", "placed_supported", "exact_select_torch", "exact_select_available", "EXACT_SELECT_METRICS", "EXACT_SELECT_MAX_K",
           "EXACT_SELECT_MAX_FEATURES"]

EXACT_SELECT_METRICS = ("euclidean", "sqeuclidean", "manhattan")
# per-query lists live in registers (C = the power of two at or above k)
EXACT_SELECT_MAX_K = 128
# the feature loop is unrolled (one load of each feature per tile); wider data runs elsewhere
EXACT_SELECT_MAX_FEATURES = 128
# offsets of operands with this many elements or more are computed in 64 bits
_WIDE_FROM = 2**31
_PLACED_MAX_COMPARISONS = 1 << 13
# float32 data in curve order is screened in float32 first: the float64 scores of a tile are formed
# only where a lane may enter its row's list (exact_select's ``screen``; False: every tile in
# float64, for same-run A/B timings)
EXACT_SELECT_SCREEN = True
# the screen runs at up to this many features: its unrolled float32 pass doubles the unrolled body of
# the kernel, whose compilation then grows out of proportion at many features (BENCHMARKS.md, "Design
# measurements quoted in the code")
EXACT_SELECT_SCREEN_MAX_FEATURES = 32
# above this many features default_blocks gives more queries per program (WIDE_BLOCKS)
SMALL_BLOCK_MAX_FEATURES = 32
WIDE_BLOCKS = (2, 64, 1)


def exact_select_available() -> bool:
    """Whether :func:`exact_select` can run (the 'triton' package is installed)."""
    return triton is not None


if triton is not None:

    # the float32 score of a tile: the screen's first pass (its error is bounded in _screen_bound)
    from ._exact_tile_kernel import _exact_block

    @triton.jit
    def _lower(s1, i1, s2, i2):
        """The lesser of two (score, id) pairs: by score, then id (a reduction's combine)."""
        first = (s1 < s2) | ((s1 == s2) & (i1 < i2))
        return tl.where(first, s1, s2), tl.where(first, i1, i2)

    @triton.jit
    def _higher(s1, i1, s2, i2):
        """The greater of two (score, id) pairs."""
        first = (s1 > s2) | ((s1 == s2) & (i1 > i2))
        return tl.where(first, s1, s2), tl.where(first, i1, i2)

    @triton.jit
    def _insert(best, best_id, worst, worst_id, acc, ids):
        """Every lane of ``acc`` that beats its row's worst entry by (score, id) replaces it, best lanes first.

        ``ids``: each lane's id, one per row and lane. Ids are distinct among a row's slots
        (unfilled ones hold distinct negative ids), so the worst entry is found by its id alone.
        """
        later = (acc > worst[:, None]) | ((acc == worst[:, None]) & (ids > worst_id[:, None]))
        acc = tl.where(later, float("inf"), acc)
        low, low_id = tl.reduce((acc, ids), 1, _lower)
        while tl.max((low < float("inf")).to(tl.int32), 0) > 0:
            put = (best_id == worst_id[:, None]) & (low < float("inf"))[:, None]
            best = tl.where(put, low[:, None], best)
            best_id = tl.where(put, low_id[:, None], best_id)
            worst, worst_id = tl.reduce((best, best_id), 1, _higher)
            taken = ids == low_id[:, None]
            later = (acc > worst[:, None]) | ((acc == worst[:, None]) & (ids > worst_id[:, None]))
            acc = tl.where(taken | later, float("inf"), acc)
            low, low_id = tl.reduce((acc, ids), 1, _lower)
        return best, best_id, worst, worst_id

    @triton.jit
    def _places(best, best_id, K):
        """Each slot's place in its row's list by (score, id), counting the first ``K`` slots only."""
        kept = tl.arange(0, best.shape[1]) < K
        before = (best[:, None, :] < best[:, :, None]) | (
            (best[:, None, :] == best[:, :, None]) & (best_id[:, None, :] < best_id[:, :, None]))
        return tl.sum((before & kept[None, None, :]).to(tl.int32), 2)

    @triton.jit
    def _extremes(XT, start, step, n, stride_feat, D: tl.constexpr, BLOCK: tl.constexpr):
        """(non-finite values, largest finite magnitude, smallest nonzero magnitude) of rows start, start + step, ..."""
        bad = tl.zeros((BLOCK,), tl.float32)
        high = tl.zeros((BLOCK,), tl.float32)
        tiny = tl.full((BLOCK,), float("inf"), tl.float32)
        for r0 in range(start, n, step):
            rows = r0 + tl.arange(0, BLOCK)
            ok = rows < n
            for f in tl.static_range(D):
                x = tl.abs(tl.load(XT + f * stride_feat + rows, mask=ok, other=0.0).to(tl.float32))
                finite = x < float("inf")  # NaN compares false too
                bad += tl.where(finite, 0.0, 1.0)
                high = tl.maximum(high, tl.where(finite, x, 0.0))
                tiny = tl.minimum(tiny, tl.where(finite & (x > 0.0), x, float("inf")))
        return tl.sum(bad, 0), tl.max(high, 0), tl.min(tiny, 0)

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

    @triton.jit
    def _screen_bound(worst, D: tl.constexpr):
        """Per row, the float32 screen score above which a pair's float64 score is surely above ``worst``.

        A screen score of D nonnegative float32 terms (one rounded difference, one rounded
        square, D - 1 rounded additions) is within (1 + u)^(D + 2) - 1 < (D + 4) u relative of
        the float64 score (u = 2^-24). Where subnormals are flushed to zero, each term moves
        by under 2^-125 absolute (a difference under 2^-103 squares to under 2^-205) or, over
        that, by under 4u relative (a flushed input moves the difference by under 2^-126).
        The bound keeps (2D + 16) u relative and D 2^-124 absolute: over those, and over
        its own rounding to float32, with room. Bounds at float32's top (an overflowed
        screen score says nothing) and unfilled lists (+inf) screen nothing out.
        """
        bound = worst * (1.0 + (2 * D + 16) * 5.960464477539063e-08) + D * 4.70197740328915e-38
        return tl.where(bound < 3.0e38, bound, float("inf")).to(tl.float32)

    @triton.jit(do_not_specialize=["n_query", "n_ref", "refs_per_split", "self_offset", "K"])
    def _exact_select_kernel(
        QT, RT, REF_ID, QUERY_ID, FIRST_TILE, OUT_SCORE, OUT_INDEX, EXTREMES,
        n_query, n_ref, refs_per_split, self_offset, K,
        stride_q_feat, stride_r_feat, stride_out,
        D: tl.constexpr, CHUNK: tl.constexpr, MANHATTAN: tl.constexpr, EXCLUDE_SELF: tl.constexpr,
        REORDERED: tl.constexpr, C: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, WIDE: tl.constexpr,
        PLACED: tl.constexpr, CHECK: tl.constexpr, OUT32: tl.constexpr, AS_DISTANCE: tl.constexpr,
        SCREEN: tl.constexpr,
    ):
        pid_m = tl.program_id(0)
        if CHECK > 0:
            # this program's share of the inputs' extremes (CHECK 1: the references, 2: the queries too),
            # each program a stride of rows, so together they read every value once
            n_prog = tl.num_programs(0)
            bad, high, tiny = _extremes(RT, pid_m * BLOCK_N, n_prog * BLOCK_N, n_ref, stride_r_feat, D, BLOCK_N)
            if CHECK == 2:
                bad_q, high_q, tiny_q = _extremes(QT, pid_m * BLOCK_N, n_prog * BLOCK_N, n_query, stride_q_feat, D, BLOCK_N)
                bad += bad_q
                high = tl.maximum(high, high_q)
                tiny = tl.minimum(tiny, tiny_q)
            tl.store(EXTREMES + pid_m * 3, bad)
            tl.store(EXTREMES + pid_m * 3 + 1, high)
            tl.store(EXTREMES + pid_m * 3 + 2, tiny)
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
        worst, worst_id = tl.reduce((best, best_id), 1, _higher)
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
            valid = col_ok[None, :]
            if EXCLUDE_SELF:
                valid = valid & (ids[None, :] != own[:, None])
            if SCREEN:
                # float32 data: a float32 score per pair first, the float64 one only for tiles where
                # some lane may reach its row's worst entry (NaN is never screened out)
                rough = _exact_block(QT, RT, rows, cols, row_ok, col_ok, 0, stride_q_feat, stride_r_feat,
                                     D, MANHATTAN, False, BLOCK_M, BLOCK_N)
                may = valid & ~(rough > _screen_bound(worst, D)[:, None])
                scored = tl.max(tl.max(may.to(tl.int32), 1), 0) > 0
            else:
                scored = True
            if scored:
                acc = _exact64_block(QT, RT, rows, cols, row_ok, col_ok, stride_q_feat, stride_r_feat,
                                     D, CHUNK, MANHATTAN, BLOCK_M, BLOCK_N)
                acc = tl.where(valid, acc, float("inf"))
                # the common case: no lane of any row reaches its worst entry, one reduction
                if tl.max((tl.min(acc, 1) <= worst).to(tl.int32), 0) > 0:
                    # lanes that cannot enter (after the worst by (score, id); +inf never does) drop out
                    id_grid = ids[None, :] + tl.zeros((BLOCK_M, BLOCK_N), tl.int32)
                    best, best_id, worst, worst_id = _insert(best, best_id, worst, worst_id, acc, id_grid)
        if PLACED:
            # one list per row: each entry goes straight to its place, (score, id) ascending,
            # unfilled entries as padding (+inf, -1)
            unfilled = best_id < 0
            out = rows[:, None] * stride_out + _places(best, best_id, K)
            keep = row_ok[:, None] & (slots < K)[None, :]
            value = tl.where(unfilled, float("inf"), best)
            if OUT32:
                # the score rounded to float32 (as the engine reports float32 data), its distance
                # the IEEE square root of that (as torch.sqrt on the GPU)
                value = value.to(tl.float32)
                if AS_DISTANCE:
                    value = tl.sqrt_rn(value)
            tl.store(OUT_SCORE + out, value, mask=keep)
            tl.store(OUT_INDEX + out, tl.where(unfilled, -1, best_id).to(tl.int64), mask=keep)
        else:
            out = rows[:, None] * stride_out + split * C + slots[None, :]
            tl.store(OUT_SCORE + out, best, mask=row_ok[:, None])
            tl.store(OUT_INDEX + out, best_id.to(tl.int64), mask=row_ok[:, None])


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


_MULTIPROCESSORS: dict = {}


def _multiprocessors(device: torch.device) -> int:
    """The device's multiprocessor count, asked once (a driver query per search showed in small searches' profiles)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    count = _MULTIPROCESSORS.get(index)
    if count is None:
        count = _MULTIPROCESSORS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return count


def splits_to_fill(programs: int, target: int, most: int) -> int:
    """Reference splits that bring ``programs`` query blocks up to ``target`` programs: one where they
    reach it already, else at most ``most`` (and at least one)."""
    return 1 if programs >= target else max(1, min(-(-target // programs), most))


def default_splits(n_query: int, n_ref: int, block_m: int, block_n: int, device: torch.device, num_warps: int = 4) -> int:
    """Reference splits per query block: enough programs to fill the GPU, each split at least a few tiles."""
    if device.type != "cuda":
        return 1
    # about sixteen warps per multiprocessor, however many a program has
    target = _multiprocessors(device) * max(1, 16 // num_warps)
    return splits_to_fill(-(-n_query // block_m), target, n_ref // (8 * block_n))


def default_blocks(C: int, d: int = 1) -> tuple[int, int, int]:
    """(block_m, block_n, num_warps): one warp per program, one to four queries each.

    A program's queries walk the references in lockstep, and a block's insertion
    step runs until its last row is done: with one or two queries per program no
    row waits on another's insertions, and the selection's reductions stay within
    one warp (no shared-memory barrier). At many features the reference tile's
    loads, shared by the block's queries, set the pace instead: more queries per
    program. Measured fastest of nine shapes on the ADBench all-kNN sets
    (BENCHMARKS.md, "Design measurements quoted in the code").
    """
    if d > SMALL_BLOCK_MAX_FEATURES:
        return WIDE_BLOCKS
    if C <= 32:
        return 1, 64, 1
    return 2, 128, 1


# exact_select_checked's searches of 17 to 32 neighbours at CHECKED_NARROW_MIN_FEATURES to
# SMALL_BLOCK_MAX_FEATURES features and at least CHECKED_NARROW_MIN_QUERIES queries take tiles of
# 32 references: a query's scan tightens its threshold in smaller steps where a score costs many
# terms. With fewer queries than that the GPU holds every program at once and each program's
# serial scan sets the time: twice the tiles, more time (kernel times on ADBench sets;
# BENCHMARKS.md, "Design measurements quoted in the code")
CHECKED_NARROW_MIN_FEATURES = 10
CHECKED_NARROW_MIN_QUERIES = 1024


def checked_blocks(C: int, d: int, n_query: int) -> tuple[int, int, int]:
    """:func:`default_blocks` for :func:`exact_select_checked` (see ``CHECKED_NARROW_MIN_FEATURES``)."""
    if (16 < C <= 32 and CHECKED_NARROW_MIN_FEATURES <= d <= SMALL_BLOCK_MAX_FEATURES
            and n_query >= CHECKED_NARROW_MIN_QUERIES):
        return 1, 32, 1
    return default_blocks(C, d)


def exact_select(QT: torch.Tensor, RT: torch.Tensor, k: int, metric_name: str, *, exclude_self: bool = False,
                 self_offset: int = 0, ref_ids: torch.Tensor | None = None, query_ids: torch.Tensor | None = None,
                 anchors: torch.Tensor | None = None, splits: int | None = None, block_m: int | None = None,
                 block_n: int | None = None, num_warps: int | None = None,
                 screen: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
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
    screen : bool, optional
        Score float32 data in float32 first and form a tile's float64 scores only where a
        lane may enter its row's list. Default: where the rows come in another order
        (``ref_ids``), whose thresholds tighten within a few tiles; in the given order most
        tiles still hold a lane that enters, and the screen's own work is not repaid.
        Results are the same either way; float64 data is never screened. At most
        ``EXACT_SELECT_SCREEN_MAX_FEATURES`` features (``screen=True`` above raises).

    Returns
    -------
    scores : (n_query, k) float64, ascending; ``+inf`` where a query has fewer than k references
    index : (n_query, k) int64 reference positions (their ids when reordered), ``-1`` padding
    """
    if triton is None:
        raise ValueError("exact selection on the GPU needs the 'triton' package; use exact_select_torch")
    _check(QT, RT, k, metric_name)
    reordered = ref_ids is not None
    screened = screens(QT.dtype, QT.shape[0], reordered, screen)
    if reordered != (query_ids is not None) or reordered != (anchors is not None):
        raise ValueError("ref_ids, query_ids and anchors go together: give all three or none")
    d, n_query = QT.shape
    n_ref = RT.shape[1]
    if n_query == 0 or n_ref == 0:
        return pad_topk(QT.new_empty((n_query, 0), dtype=torch.float64), QT.new_empty((n_query, 0), dtype=torch.int64), k)
    QT = unit_row_stride(QT)
    RT = unit_row_stride(RT)
    C = max(2, 1 << (min(k, n_ref) - 1).bit_length())
    bm, bn, warps = default_blocks(C, d)
    bm, bn, warps = block_m or bm, block_n or bn, num_warps or warps
    if splits is None:
        splits = default_splits(n_query, n_ref, bm, bn, QT.device, warps)
    refs_per_split = -(-(-(-n_ref // splits)) // bn) * bn
    splits = -(-n_ref // refs_per_split)
    # one list per row: the kernel writes it in order (no sort after it) where the placement's
    # (block_m x C x C) comparisons stay small
    placed = splits == 1 and bm * C * C <= _PLACED_MAX_COMPARISONS
    scores = torch.empty((n_query, splits * C), dtype=torch.float64, device=QT.device)
    index = torch.empty((n_query, splits * C), dtype=torch.int64, device=QT.device)
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
        QT, RT, ref_ids, query_ids, first_tiles, scores, index, scores, n_query, n_ref, refs_per_split, self_offset, min(k, C),
        QT.stride(0), RT.stride(0), scores.stride(0),
        D=d, CHUNK=EXACT_SUM_CHUNK, MANHATTAN=metric_name == "manhattan", EXCLUDE_SELF=exclude_self, REORDERED=reordered,
        C=C, BLOCK_M=bm, BLOCK_N=bn, WIDE=wide, PLACED=placed, CHECK=0, OUT32=False, AS_DISTANCE=False,
        SCREEN=screened,
        num_warps=warps, enable_fp_fusion=False,
    )
    if placed:
        kept = min(k, C)
        return pad_topk(scores[:, :kept], index[:, :kept], k)
    unused = index < 0  # placeholders: +inf of a list not yet full, -inf of the slots past k
    index = torch.where(unused, PAD_INDEX, index)
    scores = torch.where(unused, float("inf"), scores)
    return pad_topk(*topk_by_score_then_index(scores, index, k), k)


def screens(dtype: torch.dtype, d: int, reordered: bool, screen: bool | None) -> bool:
    """Whether :func:`exact_select` screens in float32 first (its ``screen``; see there)."""
    if screen and dtype == torch.float32 and d > EXACT_SELECT_SCREEN_MAX_FEATURES:
        raise ValueError(f"screen=True takes at most {EXACT_SELECT_SCREEN_MAX_FEATURES} features; got {d}: "
                         "leave screen=None (the default) or pass False")
    wanted = reordered and EXACT_SELECT_SCREEN if screen is None else screen
    return bool(wanted) and dtype == torch.float32 and d <= EXACT_SELECT_SCREEN_MAX_FEATURES


def placed_supported(k: int, d: int = 1) -> bool:
    """Whether :func:`exact_select_checked` takes this ``k`` at ``d`` features (lists written in order)."""
    C = max(2, 1 << (k - 1).bit_length())
    return 1 <= k <= EXACT_SELECT_MAX_K and default_blocks(C, d)[0] * C * C <= _PLACED_MAX_COMPARISONS


def exact_select_checked(QT: torch.Tensor, RT: torch.Tensor, k: int, metric_name: str, *, exclude_self: bool = False,
                         as_distance: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`exact_select` for float32 data that also reads the data's extremes, as reported results, in one launch.

    For small searches, where launches and host waits set the time: one program
    per query block, the references never split, each list written in order.
    ``QT is RT`` for a self-search (``exclude_self``).

    Returns
    -------
    scores : (n_query, k) float32
        The float64 scores rounded to float32, or with ``as_distance`` (euclidean)
        their IEEE square roots: what the engine reports for float32 data.
    index : (n_query, k) int64, ``-1`` padding
    extremes : (programs, 3) float32
        Per program: non-finite values seen, the largest finite magnitude and the
        smallest nonzero one; the rows together cover every value of both inputs.
    """
    if triton is None:
        raise ValueError("exact selection on the GPU needs the 'triton' package; use exact_select_torch")
    _check(QT, RT, k, metric_name)
    if QT.dtype != torch.float32:
        raise ValueError(f"exact_select_checked takes float32 data; got {QT.dtype}")
    d, n_query = QT.shape
    n_ref = RT.shape[1]
    if n_query == 0 or n_ref == 0 or k > n_ref:
        raise ValueError(f"exact_select_checked needs queries and at least k = {k} references; got {n_query} and {n_ref}")
    QT = unit_row_stride(QT)
    RT = unit_row_stride(RT)
    C = max(2, 1 << (k - 1).bit_length())
    bm, bn, warps = checked_blocks(C, d, n_query)
    if bm * C * C > _PLACED_MAX_COMPARISONS:
        raise ValueError(f"k = {k} is too large for lists written in order; use exact_select")
    programs = triton.cdiv(n_query, bm)
    scores = torch.empty((n_query, k), dtype=torch.float32, device=QT.device)
    index = torch.empty((n_query, k), dtype=torch.int64, device=QT.device)
    extremes = torch.empty((programs, 3), dtype=torch.float32, device=QT.device)
    wide = max(QT.stride(0) * d, RT.stride(0) * d, n_query * k) >= _WIDE_FROM
    _exact_select_kernel[(programs, 1)](
        QT, RT, index, index, index, scores, index, extremes, n_query, n_ref, n_ref, 0, k,
        QT.stride(0), RT.stride(0), scores.stride(0),
        D=d, CHUNK=EXACT_SUM_CHUNK, MANHATTAN=metric_name == "manhattan", EXCLUDE_SELF=exclude_self, REORDERED=False,
        C=C, BLOCK_M=bm, BLOCK_N=bn, WIDE=wide, PLACED=True, CHECK=1 if QT is RT else 2, OUT32=True,
        AS_DISTANCE=as_distance and metric_name == "euclidean", SCREEN=False, num_warps=warps, enable_fp_fusion=False,
    )
    return scores, index, extremes
