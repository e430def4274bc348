"""Fused distance + k-selection kernel: the candidate phase of the kNN engine in one launch.

Each program owns ``BLOCK_M`` queries and streams the references through
registers ``BLOCK_N`` at a time. A tile's scores are computed in registers —
feature by feature by direct differences for L2/L1 (no cancellation), or as a
dot product of prepared rows (cosine, inner product, and L2 at high dimension
on rows centred by the engine) — and never reach global memory.

Selection keeps, per query, the ``C`` best (score, column) pairs seen so far in
registers with their largest score as a threshold. Per tile the common case is
one row minimum and one compare: only when a row's tile minimum beats its
threshold is that minimum extracted (arg-min), inserted in place of the row's
worst entry, removed from the tile, and the next minimum tried — so a tile
costs one reduction unless it really improves some row. Because references are
visited in increasing column order and equal scores never displace an earlier
entry, the kept set is exactly the ``C`` smallest by (score, column). With
``anchors`` each block starts at its own neighbourhood's tile and wraps around
(the engine orders rows along a space-filling curve): far fewer insertions, and
the kept set is the ``C`` smallest by (score, visit order).

Up to 16 features past one 64-wide ``tl.dot`` step are added as FMAs on FP32
cores (``TAIL``), so 65-80 features cost one tensor-core step, not five.

Prepared rows' products run in tf32x3 accuracy: as one TF32 product of
operands split on the host (:func:`split_tf32x3`) where that reads fewer
columns (:func:`split_form_width`), else as Triton's three in-kernel products.

Small query sets are split over references as well (``splits`` programs per
query block, each keeping its own ``C`` best), so the GPU is filled when there
are few queries (the 12,000-query physics case); the split lists are merged
afterwards, or handed over side by side (``merge_splits=False``) to a caller
whose exact re-rank sorts them anyway.

The torch twin is ``gpumine.neighbors.engine._search._candidates``: both return, per
query, ``C`` candidates whose excluded references all score at least the
C-th kept one; the engine's exact re-rank and certificate then give identical
final results for either.
"""

from __future__ import annotations

import functools
import time

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised on machines without triton
    triton = None
    tl = None

from ...core.select import topk_by_score_then_index
from . import _fused_tuning as knn_tuning

__all__ = ["fused_candidates", "FUSED_METRICS", "MAX_FUSED_CANDIDATES", "DOT_PRECISION"]

FUSED_METRICS = ("euclidean", "sqeuclidean", "manhattan", "cosine", "inner_product")
MAX_FUSED_CANDIDATES = 256  # per-query lists live in registers; larger k runs on the torch selection
# Dot products of prepared rows run on tensor cores as three TF32 products (the
# operands split into high and low halves): float32-class accuracy, within the
# engine's error bound 4 (d + 4) u |x| |y|, at several times the FP32-core rate
DOT_PRECISION = "tf32x3"
# tf32x3 as ONE tf32 product of pre-split operands [q_hi, q_hi, q_lo] . [r_hi, r_lo, r_hi] when
# the three copies (and a bias's two halves) fit this width and fewer columns than Triton's three
# in-kernel products (split_form_width). Measured on all-kNN of 262,144 points: about 30 % less
# time at d = 8, 16 and 20 (64 columns vs three 32-wide products), but slower at d = 10 in 64
# columns instead of 32 (BENCHMARKS.md, "Design measurements quoted in the code")
SPLIT_MAX_WIDTH = 64
# The split operands are built for every launch, a pass of several elementwise steps over a copy
# of the references three times their width: it pays only where each reference row meets many
# queries. A launch of fewer than one query per SPLIT_MIN_REFS_PER_QUERY references multiplies
# in the kernel: streamed tiles of 13.6M references with 10-100 queries took about a quarter
# less time so, 1,000 queries against 4M references the same (BENCHMARKS.md).
SPLIT_MIN_REFS_PER_QUERY = 1024
# From this many features a reference bias (L2's |y|^2) starts the accumulator rather than
# riding as one more feature; below it (and outside the split form) it is appended as a
# feature, as measured faster (adding the bias after the dot cost more; BENCHMARKS.md)
BIAS_MIN_FEATURES = 64
# Dot scoring of up to ONE_STEP_WIDTH + MAX_DOT_TAIL features: one tl.dot step of
# ONE_STEP_WIDTH, the rest as FMAs (d = 65, L2 at 65 raw features, was five 16-wide
# steps: about five times the time of all-kNN at d = 64)
ONE_STEP_WIDTH = 64
MAX_DOT_TAIL = 16

_SCORE_L2, _SCORE_L1, _SCORE_DOT = 0, 1, 2

if triton is not None:

    @triton.jit
    def _order_key(score, col):
        # float32 -> int32 with the same order (negative floats reversed), then (key << 32) + col
        bits = score.to(tl.int32, bitcast=True)
        ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)
        return (ordered.to(tl.int64) << 32) + col.to(tl.int64)

    @triton.jit
    def _key_score(key):
        ordered = (key >> 32).to(tl.int32)
        bits = ordered ^ ((ordered >> 31) & 0x7FFFFFFF)
        return bits.to(tl.float32, bitcast=True)

    @triton.jit
    def _load_query_block(Q, rows, row_ok, feats, f_ok, stride_row, stride_feat):
        return tl.load(Q + rows[:, None] * stride_row + feats[None, :] * stride_feat,
                       mask=row_ok[:, None] & f_ok[None, :], other=0.0)

    @triton.jit
    def _load_ref_block(R, cols, col_ok, feats, f_ok, stride_row, stride_feat):
        # (features x columns): the right operand of tl.dot
        return tl.load(R + cols[None, :] * stride_row + feats[:, None] * stride_feat,
                       mask=col_ok[None, :] & f_ok[:, None], other=0.0)

    @triton.jit
    def _dot(q, r, acc, PRECISION: tl.constexpr):
        # one return: Triton generates code after a returning constexpr branch too
        if PRECISION == "bf16":
            out = tl.dot(q.to(tl.bfloat16), r.to(tl.bfloat16), acc)
        else:
            out = tl.dot(q, r, acc, input_precision=PRECISION)
        return out

    @triton.jit
    def _tile_scores(Q, R, BIAS, rows, cols, row_ok, col_ok, stride_q_row, stride_q_feat, stride_r_row, stride_r_feat,
                     D: tl.constexpr, SCORE: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, PRECISION: tl.constexpr):
        # the loop form: several feature steps, or direct differences feature by feature
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        if HAS_BIAS:  # as the accumulator's start, so the bias costs no pass over the tile
            acc += tl.load(BIAS + cols, mask=col_ok, other=0.0)[None, :]
        if SCORE == 2:
            feats = tl.arange(0, BLOCK_K)
            for k0 in range(0, D, BLOCK_K):
                f = k0 + feats
                f_ok = f < D
                q = _load_query_block(Q, rows, row_ok, f, f_ok, stride_q_row, stride_q_feat)
                r = _load_ref_block(R, cols, col_ok, f, f_ok, stride_r_row, stride_r_feat)
                acc = _dot(q, r, acc, PRECISION)
        else:
            for j in tl.static_range(D):
                qj = tl.load(Q + rows * stride_q_row + j * stride_q_feat, mask=row_ok, other=0.0)
                rj = tl.load(R + cols * stride_r_row + j * stride_r_feat, mask=col_ok, other=0.0)
                if SCORE == 0:
                    diff = qj[:, None] - rj[None, :]
                    acc += diff * diff
                else:
                    acc += tl.abs(qj[:, None] - rj[None, :])
        return acc

    # sizes and offsets are not specialised on (divisibility by 16 is Triton's default): every
    # query count would otherwise pick one of two compiled variants, and a first call of the
    # other (a compilation) landed inside a benchmark's timed slice
    @triton.jit(do_not_specialize=["n_query", "n_ref", "refs_per_split", "ref_offset"])
    def _fused_candidates_kernel(
        Q, R, BIAS, SELF, FIRST_TILE, OUT_SCORE, OUT_INDEX, OUT_FLOOR,
        n_query, n_ref, refs_per_split, ref_offset,
        stride_q_row, stride_q_feat, stride_r_row, stride_r_feat, stride_out,
        D: tl.constexpr, TAIL: tl.constexpr, SCORE: tl.constexpr, HAS_BIAS: tl.constexpr, EXCLUDE_SELF: tl.constexpr,
        ROTATE: tl.constexpr, C: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr, PRECISION: tl.constexpr, WIDE: tl.constexpr, FLOOR: tl.constexpr,
    ):
        pid_m = tl.program_id(0)
        split = tl.program_id(1)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        first = split * refs_per_split
        if WIDE:
            # operands of 2^31 elements or more: row x stride offsets in 64 bits (32-bit ones
            # wrapped around and read outside the tensors)
            rows = rows.to(tl.int64)
            first = first.to(tl.int64)
        row_ok = rows < n_query
        slots = tl.arange(0, C)
        lanes = tl.arange(0, BLOCK_N)
        best = tl.full((BLOCK_M, C), float("inf"), tl.float32)
        # distinct negative placeholders, so "the worst slot" is always exactly one slot
        best_col = tl.zeros((BLOCK_M, C), tl.int32) - 1 - slots[None, :]
        worst = tl.full((BLOCK_M,), float("inf"), tl.float32)
        # FLOOR: the least score of every reference left out (evicted entries and tile scores
        # that never entered), a tighter bound on them than the C-th kept score
        floor = tl.full((BLOCK_M,), float("inf"), tl.float32)
        last = tl.minimum(first + refs_per_split, n_ref)
        n_tiles = tl.cdiv(last - first, BLOCK_N)
        # Tiles are visited from the block's own neighbourhood on (FIRST_TILE, when the
        # caller ordered rows along a space-filling curve), wrapping around: thresholds
        # tighten after a few tiles and later tiles rarely enter the selection loop.
        # The kept set is then the C best by (score, visit order); every reference left
        # out still scores at least the C-th kept one, all the engine relies on.
        tile0 = 0
        if ROTATE:
            tile0 = tl.minimum(tl.maximum(tl.load(FIRST_TILE + pid_m) - first // BLOCK_N, 0), n_tiles - 1)
        if EXCLUDE_SELF:
            # each row's own reference (a column of R, -1: none); masking is needed only on
            # tiles inside the block's [lowest, highest] own column, and on the last tile
            self_col = tl.load(SELF + rows, mask=row_ok, other=-1)
            self_lo = tl.min(tl.where(self_col >= 0, self_col, 1 << 30), 0)
            self_hi = tl.max(self_col, 0)
        # One feature step: the query block is loaded once and the next reference tile is
        # requested before this tile's selection, so its latency hides behind that work
        # (with the edge-only masking below, a fifth less time on all-kNN of 262,144 x 8; BENCHMARKS.md)
        # (the last TAIL features, past one step's width, are added by FMAs on FP32 cores)
        ONE_STEP: tl.constexpr = SCORE == 2 and D - TAIL <= BLOCK_K
        feats = tl.arange(0, BLOCK_K)
        f_ok = feats < D - TAIL
        if ONE_STEP:
            q_block = _load_query_block(Q, rows, row_ok, feats, f_ok, stride_q_row, stride_q_feat)
            ahead = first + tile0 * BLOCK_N + lanes
            r_next = _load_ref_block(R, ahead, ahead < last, feats, f_ok, stride_r_row, stride_r_feat)
        for t in range(0, n_tiles):
            tile = tile0 + t
            tile = tl.where(tile >= n_tiles, tile - n_tiles, tile)
            start = first + tile * BLOCK_N
            cols = start + lanes
            col_ok = cols < last
            if ONE_STEP:
                acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
                if HAS_BIAS:
                    acc += tl.load(BIAS + cols, mask=col_ok, other=0.0)[None, :]
                acc = _dot(q_block, r_next, acc, PRECISION)
                for j in tl.static_range(D - TAIL, D):
                    qj = tl.load(Q + rows * stride_q_row + j * stride_q_feat, mask=row_ok, other=0.0)
                    rj = tl.load(R + cols * stride_r_row + j * stride_r_feat, mask=col_ok, other=0.0)
                    acc += qj[:, None] * rj[None, :]
                following = tile + 1
                following = tl.where(following >= n_tiles, following - n_tiles, following)
                ahead = first + following * BLOCK_N + lanes
                r_next = _load_ref_block(R, ahead, ahead < last, feats, f_ok, stride_r_row, stride_r_feat)
            else:
                acc = _tile_scores(Q, R, BIAS, rows, cols, row_ok, col_ok, stride_q_row, stride_q_feat, stride_r_row,
                                   stride_r_feat, D, SCORE, HAS_BIAS, BLOCK_M, BLOCK_N, BLOCK_K, PRECISION)
            # masking elsewhere was a quarter of the kernel's time; rows past n_query score
            # zero-padded queries and are never stored
            needs_mask = start + BLOCK_N > last
            if EXCLUDE_SELF:
                needs_mask = needs_mask | ((start <= self_hi) & (self_lo < start + BLOCK_N))
            if needs_mask:
                valid = col_ok[None, :]
                if EXCLUDE_SELF:
                    valid = valid & (cols[None, :] != self_col[:, None])
                acc = tl.where(valid, acc, float("inf"))
            # the common case: no row's tile minimum beats its threshold, one reduction
            tile_low = tl.min(acc, 1)
            improves = tl.max((tile_low < worst).to(tl.int32), 0)
            while improves > 0:
                low, low_lane = tl.min(acc, 1, return_indices=True)  # ties: the lower column
                enters = low < worst
                if FLOOR:  # what leaves: the evicted entry, or (the row is done) the tile's least
                    floor = tl.minimum(floor, tl.where(enters, worst, low))
                # the entry to replace: the worst score, and among equal worst scores the
                # highest column (in index order every earlier column is lower than this
                # tile's; rotated, any equal one will do)
                evict = tl.argmax(tl.where(best == worst[:, None], best_col, -(1 << 30)), 1)
                put = (slots[None, :] == evict[:, None]) & enters[:, None]
                best = tl.where(put, low[:, None], best)
                best_col = tl.where(put, (start + low_lane).to(tl.int32)[:, None], best_col)
                worst = tl.max(best, 1)
                acc = tl.where(lanes[None, :] == low_lane[:, None], float("inf"), acc)
                tile_low = tl.min(acc, 1)
                improves = tl.max((tile_low < worst).to(tl.int32), 0)
            if FLOOR:  # what stays in the tile never entered
                floor = tl.minimum(floor, tile_low)
        found = best_col >= 0
        keys = tl.sort(tl.where(found, _order_key(best + 0.0, best_col + ref_offset), 0x7FFFFFFFFFFFFFFF), 1)
        missing = keys == 0x7FFFFFFFFFFFFFFF
        scores = tl.where(missing, float("inf"), _key_score(keys))
        index = tl.where(missing, -1, keys & 0xFFFFFFFF)
        out = rows[:, None] * stride_out + split * C + slots[None, :]
        tl.store(OUT_SCORE + out, scores, mask=row_ok[:, None])
        tl.store(OUT_INDEX + out, index, mask=row_ok[:, None])
        if FLOOR:
            tl.store(OUT_FLOOR + rows * tl.num_programs(1) + split, floor, mask=row_ok)


def _next_pow2(x: int) -> int:
    return 1 << max(0, (int(x) - 1).bit_length())


# Row strides of dot-scored operands are rounded up to this many float32 (64 bytes): Triton then
# knows every row starts aligned and loads a tile's rows as vectors. The physics kernel (12,000 x
# 32,768, 65 prepared features) measured 8-9 % faster with rows 80 floats apart than with the
# previous contiguous copy (BENCHMARKS.md, "Design measurements quoted in the code").
ROW_ALIGN = 16
# Operands (after alignment and splitting) of at least this many elements get 64-bit offsets
# in the kernel (a second compiled variant); below it the 32-bit offsets cannot overflow.
WIDE_OFFSETS_FROM = 2**31


def _aligned_rows(X: torch.Tensor) -> torch.Tensor:
    """``X`` with unit feature stride and a row stride that is a multiple of ``ROW_ALIGN`` (a padded copy if needed)."""
    n, d = X.shape
    if X.stride(1) == 1 and (X.stride(0) % ROW_ALIGN == 0 or n <= 1) and X.data_ptr() % (4 * ROW_ALIGN) == 0:
        return X
    width = -(-d // ROW_ALIGN) * ROW_ALIGN
    out = X.new_empty((n, width))[:, :d]
    out.copy_(X)
    return out


def _score_kind(metric_name: str, prepared: bool, d: int) -> int:
    if metric_name == "manhattan":
        return _SCORE_L1
    if metric_name in ("euclidean", "sqeuclidean") and not prepared:
        return _SCORE_L2
    return _SCORE_DOT


def default_blocks(d: int, C: int, score: int) -> tuple[int, int, int]:
    """(block_m, block_n, num_warps) for a shape class, as measured (timings in BENCHMARKS.md,
    "Design measurements quoted in the code").

    Dot scoring at 64 features (C = 8): 64 x 128 was fastest, ahead of 128 x 64,
    64 x 64 and 64 x 32. Below 64 features, 64 x 64 with 4 warps was fastest of
    eight shapes for all-kNN of 262,144 x 8 at C = 8 (32 x 32 and 64 x 128 x 8 warps
    took more than twice as long). At C = 64 (k = 50, 286,048 x 10) 32 x 64 and
    64 x 64 were not compared on the same data, so the smaller register footprint
    is kept. Direct scoring: 32 x 32 tiles were fastest at d = 8 (64 x 64 took three
    times as long and 128 x 128 over twenty times, likely register spills).
    """
    if score == _SCORE_DOT:
        if d >= BIAS_MIN_FEATURES and C <= 32:
            return (64, 128, 4)
        return (64, 64, 4) if C <= 32 else (32, 64, 4)
    return (32, 32, 4) if C <= 64 else (16, 32, 4)


def default_block_k(d: int) -> int:
    """Features per ``tl.dot`` step for ``d`` prepared features.

    All features in one step up to 64 (at least 16, tl.dot's smallest): on all-kNN of
    262,144 points (kernel only), 17 and 25 prepared features took a quarter of the
    time in one 32-wide step as in two 16-wide ones, and 33 under a third in one
    64-wide step as in 16- or 32-wide steps. Above 64, 16-wide steps were the least
    slow; up to ``ONE_STEP_WIDTH + MAX_DOT_TAIL`` features the launcher runs one
    64-wide step and the rest as FMAs instead (at 65 features over four times faster
    than 16-wide steps). Timings in BENCHMARKS.md, "Design measurements quoted in the code".
    """
    if d > 64:
        return 16
    return max(16, 1 << (d - 1).bit_length())


def _tf32_round(x: torch.Tensor) -> torch.Tensor:
    """Round float32 to TF32 (10 fraction bits), to nearest with ties away, as ``cvt.rna.tf32``."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & -0x2000).view(torch.float32)


def split_form_width(d: int, has_bias: bool) -> int | None:
    """Columns of the split tf32x3 operands for ``d`` features, or None where the three
    in-kernel products read fewer (or the split would exceed ``SPLIT_MAX_WIDTH``)."""
    width = _next_pow2(max(16, 3 * d + (2 if has_bias else 0)))  # tl.dot needs K >= 16 (Triton 3.6)
    in_kernel = 3 * (_next_pow2(d) if has_bias and d >= BIAS_MIN_FEATURES else default_block_k(d + (1 if has_bias else 0)))
    return width if width <= SPLIT_MAX_WIDTH and width < in_kernel else None


def split_tf32x3(Q: torch.Tensor, R: torch.Tensor, ref_bias: torch.Tensor | None, width: int):
    """Operands whose plain TF32 product equals tf32x3's three products, in ``width`` columns.

    ``q . r`` becomes ``q_hi.r_hi + q_hi.r_lo + q_lo.r_hi`` (TF32 halves, products exact in
    float32), and a reference bias ``b`` two more columns ``1.b_hi + 1.b_lo``. Error: the
    dropped ``q_lo.r_lo`` and the rounding of the low halves, each at most 2^-22 |q||r|, as
    Triton's own tf32x3; zero columns pad to ``width``.
    """
    d = Q.shape[1]

    def split_into(M: torch.Tensor, bias: torch.Tensor | None, query: bool) -> torch.Tensor:
        # written part by part, SPLIT_CHUNK_ROWS rows at a time, into one padded buffer: for
        # resident references it is the largest copy a search makes, and assembling it from
        # whole parts (concatenate, then pad) held about three times more at its peak
        out = M.new_zeros((M.shape[0], width))
        for r0 in range(0, M.shape[0], SPLIT_CHUNK_ROWS):
            rows, part = M[r0 : r0 + SPLIT_CHUNK_ROWS], out[r0 : r0 + SPLIT_CHUNK_ROWS]
            hi = _tf32_round(rows)
            lo = _tf32_round(rows - hi)
            # queries [hi, hi, lo], references [hi, lo, hi]
            part[:, :d] = hi
            part[:, d : 2 * d] = hi if query else lo
            part[:, 2 * d : 3 * d] = lo if query else hi
            if query and bias is not None:
                part[:, 3 * d : 3 * d + 2] = 1.0
            elif bias is not None:
                b = bias[r0 : r0 + SPLIT_CHUNK_ROWS]
                b_hi = _tf32_round(b)
                part[:, 3 * d] = b_hi
                part[:, 3 * d + 1] = _tf32_round(b - b_hi)
        return out

    return split_into(Q, ref_bias, True), split_into(R, ref_bias, False)


# rows of one operand split at a time (bounds the split's temporaries)
SPLIT_CHUNK_ROWS = 1 << 22


def _check_fused_arguments(Q: torch.Tensor, R: torch.Tensor, c: int, metric_name: str, precision: str | None) -> int:
    """:func:`fused_candidates`' argument checks; returns ``C``, ``c`` rounded up to a power of two."""
    if triton is None:
        raise ValueError("the fused kNN kernel needs the 'triton' package; use backend='torch'")
    if Q.dtype != torch.float32 or R.dtype != torch.float32:
        raise ValueError("the fused kNN kernel computes in float32; use backend='torch' for float64 data")
    if metric_name not in FUSED_METRICS:
        raise ValueError(f"metric {metric_name!r} has no fused kernel; use backend='torch'")
    if Q.shape[1] != R.shape[1]:
        raise ValueError(f"Q has {Q.shape[1]} features but R has {R.shape[1]}")
    C = _next_pow2(max(c, 2))
    if precision not in (None, "tf32x3", "ieee", "tf32", "bf16"):
        raise ValueError(f"precision must be 'tf32x3', 'ieee', 'tf32' or 'bf16'; got {precision!r}")
    if C > MAX_FUSED_CANDIDATES:
        raise ValueError(f"c={c} exceeds the fused kernel's register budget ({MAX_FUSED_CANDIDATES}); use backend='torch'")
    return C


def _prepare_operands(Q: torch.Tensor, R: torch.Tensor, C: int, metric_name: str, prepared: bool, ref_offset: int,
                      exclude_self: bool, self_offset: int, precision: str | None, block_k: int | None,
                      ref_bias: torch.Tensor | None, self_cols: torch.Tensor | None, anchors: torch.Tensor | None):
    """:func:`fused_candidates`' operands as its kernel reads them, and the launch's fixed settings.

    The score kind; dot-scored rows in the split TF32 form, with the reference
    bias as a last feature where the features are few, or as they are,
    row-major and aligned; difference-scored rows feature-major. The queries'
    own reference rows (``self_cols``) where self-pairs are skipped, the
    default launch shape, and the dot's step and tail width.
    """
    n_query, d = Q.shape
    n_ref = R.shape[0]
    score = _score_kind(metric_name, prepared, d)
    if ref_bias is not None and (score != _SCORE_DOT or ref_bias.shape != (n_ref,) or ref_bias.dtype != torch.float32):
        raise ValueError("ref_bias must be a float32 vector with one entry per reference, for dot-product scoring")
    precision = precision or DOT_PRECISION
    bm, bn, warps = default_blocks(d, C, score)
    if score == _SCORE_DOT:
        width = (split_form_width(d, ref_bias is not None)
                 if precision == "tf32x3" and block_k is None and n_query * SPLIT_MIN_REFS_PER_QUERY >= n_ref else None)
        if width is not None:
            Q, R = split_tf32x3(Q, R, ref_bias, width)
            ref_bias, precision, d, block_k = None, "tf32", width, width
        elif ref_bias is not None and d < BIAS_MIN_FEATURES:
            Q = torch.cat([Q, Q.new_ones((n_query, 1))], 1)
            R = torch.cat([R, ref_bias[:, None]], 1)
            ref_bias, d = None, d + 1
    tail = 0
    if score == _SCORE_DOT and block_k is None and ONE_STEP_WIDTH < d <= ONE_STEP_WIDTH + MAX_DOT_TAIL:
        block_k, tail = ONE_STEP_WIDTH, d - ONE_STEP_WIDTH
    if score == _SCORE_DOT:
        Q, R = _aligned_rows(Q), _aligned_rows(R)  # row-major: a tile is a (rows x features) block
        q_strides, r_strides = (Q.stride(0), 1), (R.stride(0), 1)
    else:
        # feature-major copies make each feature's column a contiguous, coalesced load
        QT, RT = Q.T.contiguous(), R.T.contiguous()
        # with d == 1 the transpose is a view of the caller's (possibly NumPy-backed)
        # memory; the kernel only reads it, but the CPU interpreter wants resizable storage
        Q = QT.clone() if QT.data_ptr() == Q.data_ptr() else QT
        R = RT.clone() if RT.data_ptr() == R.data_ptr() else RT
        q_strides, r_strides = (1, Q.stride(0)), (1, R.stride(0))
    exclude_self = exclude_self or self_cols is not None
    if self_cols is None and exclude_self:
        self_cols = torch.arange(n_query, device=Q.device) + (self_offset - ref_offset)
    if self_cols is not None:
        if self_cols.shape != (n_query,):
            raise ValueError(f"self_cols must hold one reference row per query ({n_query}); got shape {tuple(self_cols.shape)}")
        self_cols = torch.where((self_cols >= 0) & (self_cols < n_ref), self_cols, -1).to(torch.int32)
    if anchors is not None and anchors.shape != (n_query,):
        raise ValueError(f"anchors must hold one reference row per query ({n_query}); got shape {tuple(anchors.shape)}")
    block_k = block_k or default_block_k(d)
    return (Q, R, ref_bias, precision, d, block_k, tail, score, (bm, bn, warps), q_strides, r_strides, exclude_self,
            self_cols)


def fused_candidates(
    Q: torch.Tensor,
    R: torch.Tensor,
    c: int,
    *,
    metric_name: str,
    prepared: bool = False,
    ref_offset: int = 0,
    exclude_self: bool = False,
    self_offset: int = 0,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    splits: int | None = None,
    precision: str | None = None,
    block_k: int | None = None,
    ref_bias: torch.Tensor | None = None,
    self_cols: torch.Tensor | None = None,
    anchors: torch.Tensor | None = None,
    merge_splits: bool = True,
    floor: bool = False,
):
    """Best ``C >= c`` candidates of every query among the rows of ``R``, in one launch.

    Parameters
    ----------
    Q, R : float32 tensors (n_query, d) and (n_ref, d) on the same device
        Raw rows for L2/L1 (scored by direct differences), or prepared rows
        (``prepared=True`` for L2; always for cosine/inner product) whose score
        is their plain dot product (see ``gpumine.core.distance.Metric.prepare``).
    c : int
        Candidates wanted; rounded up to a power of two ``C`` (at most
        ``MAX_FUSED_CANDIDATES``).
    ref_offset : int
        Added to reference positions in the returned indices.
    ref_bias : float32 tensor (n_ref,), optional
        Added to every score of a reference (dot scoring only): the engine's
        L2 rows ``[x, 1] . [-2y, |y|^2]`` pass ``|y|^2`` here instead of as a
        last feature, so 64 features fit one 64-wide ``tl.dot`` step, not 65
        in five 16-wide ones, and the split form (:func:`split_tf32x3`) needs
        two columns for it, not three.
    exclude_self : bool
        Skip the pair (query ``i``, reference ``j``) when
        ``i + self_offset == j + ref_offset``, or, with ``self_cols``, when
        ``j == self_cols[i]`` (``-1``: no reference to skip).
    self_cols : int tensor (n_query,), optional
        Each query's own row of ``R`` (implies ``exclude_self``), for callers
        that reorder queries and references (see ``anchors``).
    anchors : int tensor (n_query,), optional
        A row of ``R`` near which each query's neighbours lie, for queries and
        references ordered along a space-filling curve: each block of queries
        starts at its anchor's tile and wraps around, so its thresholds tighten
        early. The candidates then are the ``C`` best by (score, visit order):
        every reference left out still scores at least the ``C``-th kept one,
        but among equal scores at that place the lower index is not guaranteed.
    block_m, block_n, num_warps, splits, block_k : int, optional
        Launch shape; by default the shape recorded for this shape class by
        tuning (:mod:`gpumine.neighbors.engine._fused_tuning`), else :func:`default_blocks`,
        and ``splits`` so that small query sets still give every SM work.
    precision : {"tf32x3", "ieee", "tf32", "bf16"}, optional
        How prepared rows' dot products are computed (default ``DOT_PRECISION``).
        The first two are float32-accurate; ``"tf32"`` (one TF32 product) and
        ``"bf16"`` (bfloat16 operands) are faster and less accurate: the engine
        bounds their error (``Metric.bounds(precision=...)``).

    merge_splits : bool
        With ``False`` the lists of the reference splits come back side by side,
        ``(n_query, splits * C)``, each ``C`` wide block ascending: every
        reference left out scores at least the largest entry of its own block.
        Saves the merge's ~30 small launches where the caller re-ranks anyway.
    floor : bool
        Also return, per query, the least score of the references left out of
        its lists (``+inf``: none): a bound on them that is usually well above
        the largest kept score, so a certificate can settle the C-th place too.

    Returns
    -------
    scores, index : (n_query, C) float32 and int64, ascending by (score, index);
        missing entries are ``(+inf, -1)``.
    floor : (n_query,) float32, with ``floor=True`` only
        A score every reference left out of the returned lists reaches.
    """
    C = _check_fused_arguments(Q, R, c, metric_name, precision)
    n_query, n_ref = Q.shape[0], R.shape[0]
    (Q, R, ref_bias, precision, d, block_k, tail, score, (bm, bn, warps), q_strides, r_strides, exclude_self,
     self_cols) = _prepare_operands(Q, R, C, metric_name, prepared, ref_offset, exclude_self, self_offset, precision,
                                    block_k, ref_bias, self_cols, anchors)

    def launch(block_m: int, block_n: int, num_warps: int):
        if score == _SCORE_DOT:
            block_m, block_n = max(block_m, 16), max(block_n, 16)  # tl.dot's smallest tile
        q_blocks = triton.cdiv(max(n_query, 1), block_m)
        first_tiles = None
        if anchors is not None:
            middle = torch.clamp(torch.arange(q_blocks, device=Q.device) * block_m + block_m // 2, max=max(n_query - 1, 0))
            first_tiles = (anchors[middle].clamp(0, max(n_ref - 1, 0)) // block_n).to(torch.int32)
        n_splits = splits
        if n_splits is None:
            sms = torch.cuda.get_device_properties(Q.device).multi_processor_count if Q.is_cuda else 1
            # about four programs per SM, never a split shorter than a few tiles
            n_splits = max(1, min(4 * sms // q_blocks, n_ref // (8 * block_n)))
        refs_per_split = block_n * triton.cdiv(triton.cdiv(max(n_ref, 1), n_splits), block_n)
        n_splits = triton.cdiv(max(n_ref, 1), refs_per_split)
        scores = torch.empty((n_query, n_splits * C), dtype=torch.float32, device=Q.device)
        index = torch.empty((n_query, n_splits * C), dtype=torch.int64, device=Q.device)
        floors = torch.empty((n_query, n_splits), dtype=torch.float32, device=Q.device) if floor else None
        if n_query == 0:
            return (scores[:, :C], index[:, :C]) + ((floors[:, 0],) if floor else ())
        _fused_candidates_kernel[(q_blocks, n_splits)](
            Q, R, R if ref_bias is None else ref_bias.contiguous(), self_cols if exclude_self else index,
            index if first_tiles is None else first_tiles, scores, index, scores if floors is None else floors,
            n_query, n_ref, refs_per_split, ref_offset,
            *q_strides, *r_strides, scores.stride(0),
            D=d, TAIL=tail, SCORE=score, HAS_BIAS=ref_bias is not None, EXCLUDE_SELF=exclude_self,
            ROTATE=first_tiles is not None, C=C, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
            PRECISION=precision, WIDE=max(Q.numel(), R.numel(), scores.numel()) >= WIDE_OFFSETS_FROM, FLOOR=floor,
            num_warps=num_warps,
        )
        if n_splits > 1 and merge_splits:
            scores, index = topk_by_score_then_index(scores, index, C)
            if floor:  # what the merge drops scores at least the merged list's last entry
                floors = torch.minimum(floors.amin(1, keepdim=True), scores[:, -1:])
        if not floor:
            return scores, index
        return scores, index, floors[:, 0] if n_splits == 1 else floors.amin(1)

    blocks = (block_m or bm, block_n or bn, num_warps or warps)
    if block_m is None and block_n is None and num_warps is None and n_query:
        device_name = _device_name(Q.device)
        key = knn_tuning.shape_class(
            device_name, triton.__version__, score=score, features=d, block_k=block_k, tail=tail, candidates=C,
            precision=precision, has_bias=ref_bias is not None, exclude_self=exclude_self, rotate=anchors is not None,
            n_query=n_query)
        tuned = knn_tuning.lookup(key)
        if tuned is None and knn_tuning.tuning_results() is not None:
            tuned = _tune(launch, key, score == _SCORE_DOT, C, Q.device)
        blocks = tuned or blocks
    return launch(*blocks)


@functools.lru_cache(maxsize=None)
def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def _tune(launch, key: str, dot_scoring: bool, C: int, device: torch.device) -> tuple[int, int, int]:
    """Time each candidate shape of a launch (best of three after a compiling run) and record the fastest."""
    timings: dict[str, float] = {}
    failures: dict[str, str] = {}
    for shape in knn_tuning.candidate_blocks(dot_scoring, C):
        name = "x".join(map(str, shape))
        try:
            launch(*shape)  # compiles
            best = float("inf")
            for _ in range(3):
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
                launch(*shape)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                best = min(best, time.perf_counter() - start)
            timings[name] = round(best * 1e3, 4)
        except Exception as exc:  # a shape this GPU cannot compile (registers, shared memory) drops out
            failures[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
    if not timings:
        raise RuntimeError(f"no tile shape of the fused kNN kernel ran for {key}: {failures}")
    winner = min(timings, key=timings.get)
    blocks = tuple(int(v) for v in winner.split("x"))
    knn_tuning.record(key, blocks, timings)
    knn_tuning.tuning_results()[key] = {"blocks": blocks, "ms": timings, "failed": failures}
    return blocks
