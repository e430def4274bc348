"""Exact k-selection over a block of matrix-product scores, re-scoring in float64 only what can enter.

For L2 searches at many features, where one matrix product per query block is
the cheapest way to see every pair. The caller forms a block's tile scores ``S``
(``|y|^2 - 2 x.y`` of centred rows, see :meth:`Metric.prepare`) and per row the
offset that completes them (``|x|^2``) and their error bound (``slack``,
:meth:`Metric.bounds` plus the offset's own). Each program owns ``BLOCK_M``
queries; per row, in registers, with the insertion step of the exact-selection
kernel (:mod:`._exact_select_kernel`: every comparison by (score, id)):

1. one pass over its tile scores keeps the ``KEEP`` best (``s + offset``, id)
   pairs (:func:`kept_candidates`: k and a margin): per window of
   ``SCAN_WINDOW_TILES`` reads it keeps each read's least score, then walks
   the reads in ascending order of those while one can still enter the list;
2. those references alone are scored exactly, in float64 in
   :meth:`Metric.exact_scores`' summation order (per-feature terms left to right
   within ``EXACT_SUM_CHUNK`` features, chunk sums left to right, contraction
   off; their features gathered), and the k best of them kept;
3. the certificate: a reference left out has a tile score at or above the
   farthest kept one's, so its true score is at least that less the slack; a row
   whose k-th exact score, grown by its own rounding, is under that is final.
   Only rows it leaves open (ties or near-ties across the margin) read their
   scores again, scoring exactly each lane whose lower bound reaches the row's
   worst entry.

Few rows (small sets, few queries) leave most of the GPU idle with one program
per row block: then ``splits`` programs share a row's references in step 1
(:func:`default_product_splits`), each keeping its split's ``KEEP`` best, and a
second launch merges those lists (the merged list is the row's ``KEEP`` best)
and runs steps 2 and 3.

``EXACT``: the tile scores plus the offset are the exact scores (integer data
centred on an integer, see :func:`._dense.integer_centre`): step 1 is the result.

Bound: one read of the block's scores, at most ``KEEP`` reads walked again per
window (more only where their least scores tie with a list's worst entry), so
at most ``KEEP``^2 insertions per window whatever the order of the scores, and
``KEEP`` exact scores per row; a
second read for the open rows, with at most one float64 exact score per pair
(reached only where every lane stays within reach: all points equal, say). No
host wait, retry or radius pass: the kept lists are final.

The torch twin is :func:`product_select_torch` (exact scores of every pair, or
the tile scores plus offset under ``exact``, and a sort by (score, index)); both
return the same scores and indices bit for bit whenever ``slack`` bounds the
tile scores' error.
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
from ._exact_select_kernel import _PLACED_MAX_COMPARISONS, EXACT_SELECT_MAX_K, _multiprocessors

__all__ = ["product_select", "product_select_torch", "product_select_available", "PRODUCT_SELECT_MAX_K",
           "default_product_blocks", "default_scan_columns", "default_product_splits", "default_finish_apart", "kept_candidates"]

# per-query lists live in registers (C = the power of two at or above k)
PRODUCT_SELECT_MAX_K = EXACT_SELECT_MAX_K
# offsets of operands with this many elements or more are computed in 64 bits
_WIDE_FROM = 2**31
# a launch grid's second dimension holds at most this many programs
_MAX_SPLITS = 65535
# scan tiles whose least scores a first pass keeps before walking them (a power of two: a one-warp
# program holds them in four registers per lane at 128)
SCAN_WINDOW_TILES = 128
# default_product_splits: programs per multiprocessor (one program of one warp per row: the
# multiprocessor's limit on resident programs) that a row's references are split over several
# programs to reach, as far as the split grid stays within one such wave, and the fewest tiles a
# split scans; splitting grids of one to two such waves (mnist, landsat at k = 20) ran slower, the
# extra lists' insertions outweighing the fuller GPU, and so did SpamBase's grid of just under one
# wave split in two (BENCHMARKS.md, "Design measurements quoted in the code")
SPLIT_TARGET_PROGRAMS = 32
SPLIT_MIN_TILES = 16
# True: grids of at least FINISH_APART_PROGRAMS programs per multiprocessor run the first pass and
# the finish (steps 2 and 3) as two launches, so the finish's registers do not limit the scan's
# occupancy (campaign, ALOI); False: one launch (same-run A/B timings)
FINISH_APART = True
FINISH_APART_PROGRAMS = 64
# columns of one first-pass read: a one-warp program reading BLOCK_N columns at a time had too few
# bytes in flight to keep memory busy; a tile is walked BLOCK_N columns at a time only where its
# least score can enter a list
SCAN_COLUMNS = 256
# unsplit searches of fewer than FINISH_APART_PROGRAMS programs per multiprocessor (the sets of a few
# thousand rows; all query blocks of a search counted) read SCAN_COLUMNS_FEW_ROWS columns at a time:
# on the ADBench sets of that size taking the product selection, 0.92-1.01 of the time with wider
# reads (16 cases, same results); larger searches and split grids keep SCAN_COLUMNS (not measured
# with narrower reads under the windowed walk; BENCHMARKS.md, "Design measurements quoted in the code")
SCAN_COLUMNS_FEW_ROWS = 128


def product_select_available() -> bool:
    """Whether :func:`product_select` can run (the 'triton' package is installed)."""
    return triton is not None


if triton is not None:
    from ._exact_select_kernel import _higher, _insert, _places

    @triton.jit
    def _exact64(QT, RT, rows, ids, row_ok, ref_ok, D, stride_q_feat, stride_q_row, stride_r_feat, stride_r_row,
                 CHUNK: tl.constexpr, WIDE: tl.constexpr):
        # Metric.exact_scores' order at any d: chunks of CHUNK features, each summed left to right
        # from zero (0 + t is t), chunk sums added left to right; features past D add +0.0, which
        # leaves a non-negative sum as it is. `ids` (one per row and lane) are the references
        # scored; only those in `ref_ok` are read.
        total = tl.zeros(ids.shape, tl.float64)
        if WIDE:
            ids = ids.to(tl.int64)
        for c0 in range(0, D, CHUNK):
            part = tl.zeros(ids.shape, tl.float64)
            for j in tl.static_range(CHUNK):
                f = c0 + j
                if WIDE:
                    f = f.to(tl.int64)
                q = tl.load(QT + f * stride_q_feat + rows * stride_q_row, mask=row_ok & ((rows * 0 + f) < D),
                            other=0.0).to(tl.float64)
                r = tl.load(RT + f * stride_r_feat + ids * stride_r_row, mask=ref_ok & ((ids * 0 + f) < D),
                            other=0.0).to(tl.float64)
                diff = q[:, None] - r
                part = part + diff * diff
            total = total + part
        return total

    @triton.jit
    def _scan_read(S, rows, row_ok, own, first_tile, t, n_tiles, n_ref, stride_s, EXCLUDE_SELF: tl.constexpr,
                   SCAN_N: tl.constexpr):
        # scan tile first_tile + t of each row (+inf past the references, the split's tiles, or at
        # its own column): a read wholly inside the references takes a mask alike across its
        # columns, so that it is made of vector loads (a mask per column splits it into one load
        # per element)
        cols = (first_tile + t) * SCAN_N + tl.arange(0, SCAN_N)
        ptrs = S + rows[:, None] * stride_s + cols[None, :]
        if (t < n_tiles) & (first_tile + t < n_ref // SCAN_N):  # (first_tile + t + 1) * SCAN_N could pass 2^31
            s = tl.load(ptrs, mask=tl.broadcast_to(row_ok[:, None], ptrs.shape), other=float("inf"))
        else:
            s = tl.load(ptrs, mask=row_ok[:, None] & ((cols < n_ref) & ((cols * 0 + t) < n_tiles))[None, :], other=float("inf"))
        if EXCLUDE_SELF:
            s = tl.where(cols[None, :] != own[:, None], s, float("inf"))
        return s

    @triton.jit
    def _least_read(minima, offset, WINDOW: tl.constexpr):
        # per row: the least of a window's read minima, its slot (the lowest of tied ones) and, as an
        # approximate score, that least plus the row's offset
        slots = tl.arange(0, WINDOW)
        least = tl.min(minima, 1)
        pick = tl.min(tl.where(minima == least[:, None], slots[None, :], WINDOW), 1)
        return least, pick, least.to(tl.float64) + offset

    @triton.jit(do_not_specialize=["n_query", "n_ref", "self_offset", "K", "D", "tiles_per_split", "n_split"])
    def _product_select_kernel(
        S, OFFSET, SLACK, MARGINS, QT, RT, OUT_SCORE, OUT_INDEX, OPEN_ROWS, CAND_SCORE, CAND_ID,
        n_query, n_ref, self_offset, K, D, tiles_per_split, n_split,
        stride_s, stride_q_feat, stride_q_row, stride_r_feat, stride_r_row, stride_out,
        CHUNK: tl.constexpr, EXACT: tl.constexpr, EXCLUDE_SELF: tl.constexpr, C: tl.constexpr, KEEP: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SCAN_N: tl.constexpr, WIDE: tl.constexpr, PLACED: tl.constexpr, WINDOW: tl.constexpr,
        STAGE: tl.constexpr, RESCAN: tl.constexpr,
    ):
        # STAGE 0: the whole search of a row in one program. STAGE 1: program (row block, split)
        # keeps the KEEP best of its split's tiles (columns split * tiles_per_split * SCAN_N, ...)
        # in CAND_*; STAGE 2 merges a row's lists and goes on from step 2. The merged list is the
        # row's KEEP best: each list holds its split's KEEP best.
        pid_m = tl.program_id(0)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        if WIDE:
            rows = rows.to(tl.int64)
        row_ok = rows < n_query
        lanes = tl.arange(0, BLOCK_N)
        offset = tl.load(OFFSET + rows, mask=row_ok, other=0.0).to(tl.float64)
        own = rows + self_offset
        # 1. the KEEP best (approximate score, id) of each row from its tile scores alone
        keep_slots = tl.arange(0, KEEP)
        near = tl.full((BLOCK_M, KEEP), float("inf"), tl.float64)
        near_id = tl.zeros((BLOCK_M, KEEP), tl.int32) - 1 - keep_slots[None, :]
        far, far_id = tl.reduce((near, near_id), 1, _higher)
        if STAGE == 2:
            lists = rows[:, None] * (n_split * KEEP) + keep_slots[None, :]
            for part in range(0, n_split):
                part_score = tl.load(CAND_SCORE + lists + part * KEEP, mask=row_ok[:, None], other=float("inf"))
                part_id = tl.load(CAND_ID + lists + part * KEEP, mask=row_ok[:, None], other=-1)
                near, near_id, far, far_id = _insert(near, near_id, far, far_id, part_score, part_id)
        else:
            # Two steps per window of WINDOW scan tiles (SCAN_N columns each, read in one load so
            # that enough bytes are in flight to keep memory busy; each step loads the next tile
            # before working on this one). (a) The scan keeps only each tile's least score.
            # (b) The tiles are walked in ascending order of those minima, BLOCK_N columns at a
            # time, by the insertion step, while a tile's minimum can still enter the row's list:
            # once KEEP tiles are walked, the list holds their KEEP minima, so only a tile tied
            # with its worst entry is visited after that (and walked only where it starts before
            # that entry's id). A list therefore takes at most KEEP^2 insertions per window
            # whatever the order of the scores; inserting as the scan met
            # them took one per element where scores fall along the row (sorted references),
            # twenty times the time of random scores. Every comparison is by (score, id), so the
            # lists do not depend on the order of the walk.
            first_tile = tl.program_id(1) * tiles_per_split
            n_tiles = tl.minimum(tiles_per_split, tl.cdiv(n_ref, SCAN_N) - first_tile)
            window_slots = tl.arange(0, WINDOW)
            minima = tl.full((BLOCK_M, WINDOW), float("inf"), S.dtype.element_ty)
            s = _scan_read(S, rows, row_ok, own, first_tile, 0, n_tiles, n_ref, stride_s, EXCLUDE_SELF, SCAN_N)
            for t in range(0, n_tiles):
                next_s = _scan_read(S, rows, row_ok, own, first_tile, t + 1, n_tiles, n_ref, stride_s, EXCLUDE_SELF, SCAN_N)
                slot = t % WINDOW
                minima = tl.where(window_slots[None, :] == slot, tl.min(s, 1)[:, None], minima)
                if (slot == WINDOW - 1) | (t == n_tiles - 1):
                    window_tile = first_tile + t - slot
                    # adding a row's offset (rounded) keeps the order of its scores, so a tile's least
                    # approximate score is its least score plus the offset. Rounding can make the
                    # minima of several tiles equal approximately where their scores differ, so the
                    # walk goes on through every tile tied with the worst entry, walking those that
                    # start before that entry's id (only they can hold a tied entry of lower id)
                    least, pick, low = _least_read(minima, offset, WINDOW)
                    walk_tile = window_tile + pick
                    go = row_ok & (least < float("inf")) & (low <= far)
                    while tl.max(go.to(tl.int32), 0) > 0:
                        walk = go & ((low < far) | (walk_tile * SCAN_N < far_id))
                        for part in range(0, SCAN_N // BLOCK_N):
                            part_cols = (walk_tile * SCAN_N + part * BLOCK_N)[:, None] + lanes[None, :]
                            part_valid = walk[:, None] & (part_cols < n_ref)
                            if EXCLUDE_SELF:
                                part_valid = part_valid & (part_cols != own[:, None])
                            part_s = tl.load(S + rows[:, None] * stride_s + part_cols, mask=part_valid, other=0.0)
                            approx = tl.where(part_valid, part_s.to(tl.float64) + offset[:, None], float("inf"))
                            if tl.max((tl.min(approx, 1) <= far).to(tl.int32), 0) > 0:
                                near, near_id, far, far_id = _insert(near, near_id, far, far_id, approx, part_cols.to(tl.int32))
                        minima = tl.where((window_slots[None, :] == pick[:, None]) & go[:, None], float("inf"), minima)
                        least, pick, low = _least_read(minima, offset, WINDOW)
                        walk_tile = window_tile + pick
                        go = go & (least < float("inf")) & (low <= far)
                    minima = tl.full((BLOCK_M, WINDOW), float("inf"), S.dtype.element_ty)
                s = next_s
        if STAGE == 1:
            lists = rows[:, None] * (n_split * KEEP) + tl.program_id(1) * KEEP + keep_slots[None, :]
            tl.store(CAND_SCORE + lists, near, mask=row_ok[:, None])
            tl.store(CAND_ID + lists, near_id, mask=row_ok[:, None])
        else:
            # 2. the kept references scored exactly (their features gathered), then the K best of them
            member = near_id >= 0
            if EXACT:  # the tile scores plus the offset are the exact scores
                exact = near
            else:
                exact = _exact64(QT, RT, rows, near_id, row_ok, member, D, stride_q_feat, stride_q_row, stride_r_feat,
                                 stride_r_row, CHUNK, WIDE)
                exact = tl.where(member, exact, float("inf"))
            slots = tl.arange(0, C)
            best = tl.where(slots[None, :] < K, float("inf"), float("-inf")) + tl.zeros((BLOCK_M, C), tl.float64)
            best_id = tl.zeros((BLOCK_M, C), tl.int32) - 1 - slots[None, :]
            worst, worst_id = tl.reduce((best, best_id), 1, _higher)
            best, best_id, worst, worst_id = _insert(best, best_id, worst, worst_id, exact, near_id)
            if not EXACT:
                # 3. certificate: a reference left out has a tile score at or above the farthest kept
                # one's, so its true score is at least `least_out`; a row whose K-th exact score
                # (grown by its own rounding) is under that is final. Others rescan their scores,
                # scoring exactly each lane within reach of their worst entry (ties, near-ties).
                slack = tl.load(SLACK + rows, mask=row_ok, other=0.0).to(tl.float64)
                # the relative rounding bounds, read as float64 (scalar arguments would be float32,
                # where 1 + rel64 is 1)
                rel_tile = tl.load(MARGINS).to(tl.float64)
                grow = 1.0 + tl.load(MARGINS + 1).to(tl.float64)
                # a row whose kept list is not full holds every reference: final as it is
                full = far < float("inf")
                least_out = tl.where(full, far, 0.0) - slack
                least_out = least_out - tl.abs(least_out) * rel_tile
                open_row = row_ok & full & ~(worst * grow < least_out)
                if tl.max(open_row.to(tl.int32), 0) > 0:
                    tl.atomic_add(OPEN_ROWS, tl.sum(open_row.to(tl.int32), 0))
                    for start in range(0, n_ref if RESCAN else 0, BLOCK_N):
                        rescan_cols = start + lanes
                        ids = rescan_cols.to(tl.int32)[None, :] + tl.zeros((BLOCK_M, BLOCK_N), tl.int32)
                        rescan_valid = open_row[:, None] & (rescan_cols < n_ref)[None, :]
                        if EXCLUDE_SELF:
                            rescan_valid = rescan_valid & (rescan_cols[None, :] != own[:, None])
                        rescan_s = tl.load(S + rows[:, None] * stride_s + rescan_cols[None, :], mask=rescan_valid, other=0.0)
                        approx = rescan_s.to(tl.float64) + offset[:, None]
                        # the kept references are in the list already
                        kept = (approx < far[:, None]) | ((approx == far[:, None]) & (ids <= far_id[:, None]))
                        low = approx - slack[:, None]
                        low = low - tl.abs(low) * rel_tile
                        maybe = rescan_valid & ~kept & (low <= worst[:, None] * grow)
                        if tl.max(tl.max(maybe.to(tl.int32), 1), 0) > 0:
                            # the lanes any of the block's rows needs
                            need = (tl.max(maybe.to(tl.int32), 0) > 0)[None, :] & row_ok[:, None]
                            acc = _exact64(QT, RT, rows, ids, row_ok, need, D, stride_q_feat, stride_q_row, stride_r_feat,
                                           stride_r_row, CHUNK, WIDE)
                            acc = tl.where(maybe, acc, float("inf"))
                            if tl.max((tl.min(acc, 1) <= worst).to(tl.int32), 0) > 0:
                                best, best_id, worst, worst_id = _insert(best, best_id, worst, worst_id, acc, ids)
            if PLACED:
                # one list per row: each entry goes straight to its place, (score, id) ascending,
                # unfilled entries as padding (+inf, -1)
                unfilled = best_id < 0
                out = rows[:, None] * stride_out + _places(best, best_id, K)
                keep = row_ok[:, None] & (slots < K)[None, :]
                tl.store(OUT_SCORE + out, tl.where(unfilled, float("inf"), best), mask=keep)
                tl.store(OUT_INDEX + out, tl.where(unfilled, -1, best_id).to(tl.int64), mask=keep)
            else:
                out = rows[:, None] * stride_out + slots[None, :]
                tl.store(OUT_SCORE + out, best, mask=row_ok[:, None])
                tl.store(OUT_INDEX + out, best_id.to(tl.int64), mask=row_ok[:, None])


def default_product_blocks(C: int) -> tuple[int, int, int]:
    """(block_m, block_n, num_warps) for ``C`` kept candidates: one query per program, so no row waits on
    another's insertions. Measured fastest of eight shapes on the wide ADBench sets (BENCHMARKS.md,
    "Design measurements quoted in the code")."""
    if C <= 16:
        return 1, 64, 1
    return (1, 128, 1) if C <= 32 else (1, 128, 2)


def default_scan_columns(block_n: int, row_blocks: int | None = None, splits: int = 1,
                         device: torch.device | None = None) -> int:
    """Columns of a first-pass read, at least ``block_n``: ``SCAN_COLUMNS``, or ``SCAN_COLUMNS_FEW_ROWS``
    for an unsplit search of ``row_blocks`` programs (all its query blocks together) under
    ``FINISH_APART_PROGRAMS`` per multiprocessor of ``device``; ``splits`` as asked, before the
    launcher caps it at the reads there are."""
    few = (row_blocks is not None and splits == 1 and device is not None and device.type == "cuda"
           and row_blocks < _multiprocessors(device) * FINISH_APART_PROGRAMS)
    return max(block_n, SCAN_COLUMNS_FEW_ROWS if few else SCAN_COLUMNS)


def default_product_splits(n_query: int, n_ref: int, block_m: int, block_n: int, device: torch.device) -> int:
    """Programs per row in the first pass: as many as keep the split grid within one wave of
    ``SPLIT_TARGET_PROGRAMS`` per multiprocessor (one where the rows alone fill more than half
    of it), each of at least ``SPLIT_MIN_TILES`` tiles."""
    if device.type != "cuda" or n_query == 0:
        return 1
    target = _multiprocessors(device) * SPLIT_TARGET_PROGRAMS
    return max(1, min(target // -(-n_query // block_m), -(-n_ref // block_n) // SPLIT_MIN_TILES))


def default_finish_apart(n_query: int, block_m: int, device: torch.device) -> bool:
    """Whether an unsplit search runs its finish as a second launch (see ``FINISH_APART``)."""
    return FINISH_APART and device.type == "cuda" and -(-n_query // block_m) >= _multiprocessors(device) * FINISH_APART_PROGRAMS


def kept_candidates(k: int) -> int:
    """Candidates a row keeps by its tile scores (a power of two): k and a margin for the certificate."""
    return 1 << (k + max(4, k // 4) - 1).bit_length()


def _span(X: torch.Tensor) -> int:
    """One past the largest element offset of ``X`` (any strides)."""
    return 1 + sum((n - 1) * abs(st) for n, st in zip(X.shape, X.stride()))


def _check(S, offset, slack, QT, RT, k):
    n_query, n_ref = S.shape
    if S.dim() != 2 or S.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"S must be a float32 or float64 matrix (queries x references); got {S.dtype} {tuple(S.shape)}")
    if offset.shape != (n_query,) or slack.shape != (n_query,):
        raise ValueError(f"offset and slack need one entry per query ({n_query}); got {tuple(offset.shape)} and "
                         f"{tuple(slack.shape)}")
    if QT.dim() != 2 or RT.dim() != 2 or QT.shape[0] != RT.shape[0] or QT.shape[1] != n_query or RT.shape[1] != n_ref:
        raise ValueError(f"QT and RT must be feature-major (d, n_query) and (d, n_ref) matching S {tuple(S.shape)}; "
                         f"got {tuple(QT.shape)} and {tuple(RT.shape)}")
    if n_ref >= 2**31:
        raise ValueError(f"product selection takes fewer than 2^31 references (32-bit ids); got {n_ref}")
    if not 1 <= k <= PRODUCT_SELECT_MAX_K:
        raise ValueError(f"k must be between 1 and {PRODUCT_SELECT_MAX_K} for the product selection kernel; got {k}")


def product_select_torch(S: torch.Tensor, offset: torch.Tensor, slack: torch.Tensor, QT: torch.Tensor, RT: torch.Tensor,
                         k: int, *, exact: bool, rel_tile: float, rel64: float, exclude_self: bool = False,
                         self_offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The torch twin of :func:`product_select` (same arguments, same result bit for bit)."""
    from ...core.distance import get_metric

    _check(S, offset, slack, QT, RT, k)
    if exact:
        scores = S.to(torch.float64) + offset.to(torch.float64)[:, None]
    else:
        scores = get_metric("sqeuclidean").exact_scores(QT.T.to(torch.float64), RT.T.to(torch.float64)[None])
    if exclude_self:
        rows = torch.arange(S.shape[0], device=S.device) + self_offset
        inside = (rows >= 0) & (rows < S.shape[1])
        scores[inside.nonzero().squeeze(1), rows[inside]] = float("inf")
    index = torch.arange(S.shape[1], device=S.device).expand(S.shape[0], -1)
    index = torch.where(torch.isinf(scores), PAD_INDEX, index)
    return pad_topk(*topk_by_score_then_index(scores, index, k), k)


def product_select(S: torch.Tensor, offset: torch.Tensor, slack: torch.Tensor, QT: torch.Tensor, RT: torch.Tensor, k: int, *,
                   exact: bool, rel_tile: float, rel64: float, exclude_self: bool = False, self_offset: int = 0,
                   block_m: int | None = None, block_n: int | None = None, num_warps: int | None = None,
                   scan_n: int | None = None, window_tiles: int | None = None, splits: int | None = None,
                   finish_apart: bool | None = None, search_rows: int | None = None, rescan: bool = True,
                   stats: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` nearest references of every query row of ``S`` by (float64 exact score, index), in one or two launches.

    Parameters
    ----------
    S : (n_query, n_ref) float32 or float64 tensor on a CUDA device
        Tile scores: the exact score less ``offset``, within ``slack`` of it.
    offset, slack : (n_query,) tensors
        Per row, what completes a tile score and the bound on its error (float64 is best).
    QT, RT : (d, n_query) and (d, n_ref) tensors, feature-major
        The data whose float64 copies the exact scores are formed from, any
        strides: ``X.T`` of row-major data is read in place (its gathers of a
        row's features are contiguous).
    k : int
        Neighbours per query, 1 to ``PRODUCT_SELECT_MAX_K``.
    exact : bool
        ``S + offset`` are the exact scores (no re-score; ``slack`` unused).
    rel_tile, rel64 : float
        Relative rounding bounds of a tile score and of a float64 exact score.
    exclude_self, self_offset : bool, int
        Leave out the pair (query ``i``, reference ``i + self_offset``).
    block_m, block_n, num_warps : int, optional
        Launch shape (default :func:`default_product_blocks`).
    scan_n : int, optional
        Columns a program reads at once in its first pass, a power of two at
        least ``block_n`` (default :func:`default_scan_columns` for the grid).
    window_tiles : int, optional
        First-pass reads whose least scores a program keeps before walking them
        in ascending order, a power of two (default ``SCAN_WINDOW_TILES``).
    splits : int, optional
        Programs sharing a row's references in the first pass (default
        :func:`default_product_splits`); with more than one, a second launch merges
        their lists and finishes the rows.
    finish_apart : bool, optional
        Whether an unsplit search finishes its rows in a second launch (default
        :func:`default_finish_apart`).
    search_rows : int, optional
        Query rows of the whole search this block belongs to (default
        ``n_query``): the default ``scan_n`` is chosen by the search's size, not
        the block's, so a large search cut into blocks reads as it did whole.
    rescan : bool
        False: rows the certificate leaves open are counted (``stats``) but not
        rescanned, so their lists are not final (a probe of how many there are).
    stats : dict, optional
        Receives ``rows_rescanned`` (added to what it holds): a one-element device
        tensor counting the rows the certificate left open; where it holds the key
        ``kernel_registers``, that becomes (registers, spills) per launch.

    Returns
    -------
    scores : (n_query, k) float64, ascending; ``+inf`` where a query has fewer than k references
    index : (n_query, k) int64, ``-1`` padding
    """
    if triton is None:
        raise ValueError("product selection on the GPU needs the 'triton' package; use product_select_torch")
    _check(S, offset, slack, QT, RT, k)
    if splits is not None and splits < 1:
        raise ValueError(f"splits must be at least 1; got {splits}")
    n_query, n_ref = S.shape
    d = QT.shape[0]
    if n_query == 0 or n_ref == 0:
        return pad_topk(S.new_empty((n_query, 0), dtype=torch.float64), S.new_empty((n_query, 0), dtype=torch.int64), k)
    S = unit_row_stride(S)
    offset, slack = offset.to(torch.float64).contiguous(), slack.to(torch.float64).contiguous()
    C = max(2, 1 << (min(k, n_ref) - 1).bit_length())
    keep = kept_candidates(k)
    bm, bn, warps = default_product_blocks(keep)
    bm, bn, warps = block_m or bm, block_n or bn, num_warps or warps
    placed = bm * C * C <= _PLACED_MAX_COMPARISONS
    width = min(k, C) if placed else C
    scores = torch.empty((n_query, width), dtype=torch.float64, device=S.device)
    index = torch.empty((n_query, width), dtype=torch.int64, device=S.device)
    open_rows = torch.zeros(1, dtype=torch.int32, device=S.device)
    # float64 on the device, filled by kernels (no host copy: the launch may be captured in a graph)
    margins = torch.empty(2, dtype=torch.float64, device=S.device)
    margins[0].fill_(float(rel_tile))
    margins[1].fill_(float(rel64))
    if splits is None:
        splits = default_product_splits(n_query, n_ref, bm, bn, S.device)
    splits = min(int(splits), _MAX_SPLITS)
    scan = scan_n or default_scan_columns(bn, triton.cdiv(max(n_query, search_rows or 0), bm), splits, S.device)
    if scan < bn or scan % bn or scan & (scan - 1):
        raise ValueError(f"scan_n must be a power of two, at least block_n ({bn}); got {scan}")
    window = window_tiles or SCAN_WINDOW_TILES
    if window < 1 or window & (window - 1):
        raise ValueError(f"window_tiles must be a power of two; got {window}")
    tiles = triton.cdiv(n_ref, scan)
    tiles_per_split = triton.cdiv(tiles, min(splits, tiles))
    splits = triton.cdiv(tiles, tiles_per_split)
    wide = max(S.stride(0) * n_query, _span(QT), _span(RT), n_query * max(C, keep * splits)) >= _WIDE_FROM
    args = (S, offset, slack, margins, QT, RT, scores, index, open_rows)
    shape = (n_query, n_ref, self_offset, min(k, C), d, tiles_per_split, splits,
             S.stride(0), QT.stride(0), QT.stride(1), RT.stride(0), RT.stride(1), scores.stride(0))
    constants = dict(CHUNK=EXACT_SUM_CHUNK, EXACT=bool(exact), EXCLUDE_SELF=exclude_self, C=C, KEEP=keep, BLOCK_M=bm,
                     BLOCK_N=bn, SCAN_N=scan, WIDE=wide, PLACED=placed, WINDOW=window, RESCAN=bool(rescan), num_warps=warps,
                     enable_fp_fusion=False)
    row_blocks = triton.cdiv(n_query, bm)
    launched = []
    if finish_apart is None:
        finish_apart = default_finish_apart(n_query, bm, S.device)
    if splits == 1 and not finish_apart:
        launched.append(_product_select_kernel[(row_blocks, 1)](*args, scores, index, *shape, STAGE=0, **constants))
    else:
        cand_score = torch.empty((n_query, splits, keep), dtype=torch.float64, device=S.device)
        cand_id = torch.empty((n_query, splits, keep), dtype=torch.int32, device=S.device)
        launched.append(_product_select_kernel[(row_blocks, splits)](*args, cand_score, cand_id, *shape, STAGE=1, **constants))
        launched.append(_product_select_kernel[(row_blocks, 1)](*args, cand_score, cand_id, *shape, STAGE=2, **constants))
    if stats is not None and "kernel_registers" in stats:  # asked for: registers and spills per launch
        stats["kernel_registers"] = [(getattr(c, "n_regs", None), getattr(c, "n_spills", None)) for c in launched]
    if stats is not None:
        stats["rows_rescanned"] = stats.get("rows_rescanned", 0) + open_rows  # a device tensor: no host wait
    if placed:
        return pad_topk(scores, index, k)
    unused = index < 0  # placeholders: +inf of a list not yet full, -inf of the slots past k
    index = torch.where(unused, PAD_INDEX, index)
    scores = torch.where(unused, float("inf"), scores)
    return pad_topk(*topk_by_score_then_index(scores, index, k), k)
