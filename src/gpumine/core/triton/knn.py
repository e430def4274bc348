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
entry, the kept set is exactly the ``C`` smallest by (score, column).

Small query sets are split over references as well (``splits`` programs per
query block, each keeping its own ``C`` best) and merged afterwards, so the
GPU is filled when there are few queries (the 12,000-query physics case).

The torch twin is ``gpumine.neighbors._engine._candidates``: both return, per
query, ``C`` candidates whose excluded references all score at least the
C-th kept one; the engine's exact re-rank and certificate then give identical
final results for either.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised on machines without triton
    triton = None
    tl = None

from ..select import topk_by_score_then_index

__all__ = ["fused_candidates", "FUSED_METRICS", "MAX_FUSED_CANDIDATES", "DOT_PRECISION"]

FUSED_METRICS = ("euclidean", "sqeuclidean", "manhattan", "cosine", "inner_product")
MAX_FUSED_CANDIDATES = 256  # per-query lists live in registers; larger k runs on the torch selection
# Dot products of prepared rows run on tensor cores as three TF32 products (the
# operands split into high and low halves): float32-class accuracy, within the
# engine's error bound 4 (d + 4) u |x| |y|, at several times the FP32-core rate
DOT_PRECISION = "tf32x3"

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
    def _tile_scores(Q, R, BIAS, rows, cols, row_ok, col_ok, stride_q_row, stride_q_feat, stride_r_row, stride_r_feat,
                     D: tl.constexpr, SCORE: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, PRECISION: tl.constexpr):
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        if SCORE == 2:
            feats = tl.arange(0, BLOCK_K)
            for k0 in range(0, D, BLOCK_K):
                f = k0 + feats
                f_ok = f < D
                q = tl.load(Q + rows[:, None] * stride_q_row + f[None, :] * stride_q_feat,
                            mask=row_ok[:, None] & f_ok[None, :], other=0.0)
                r = tl.load(R + cols[None, :] * stride_r_row + f[:, None] * stride_r_feat,
                            mask=col_ok[None, :] & f_ok[:, None], other=0.0)
                if PRECISION == "bf16":
                    acc += tl.dot(q.to(tl.bfloat16), r.to(tl.bfloat16))
                else:
                    acc += tl.dot(q, r, input_precision=PRECISION)
            if HAS_BIAS:
                acc += tl.load(BIAS + cols, mask=col_ok, other=0.0)[None, :]
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
    # other (1-2 s of compilation) landed inside a benchmark's timed slice
    @triton.jit(do_not_specialize=["n_query", "n_ref", "refs_per_split", "ref_offset", "self_offset"])
    def _fused_candidates_kernel(
        Q, R, BIAS, OUT_SCORE, OUT_INDEX,
        n_query, n_ref, refs_per_split, ref_offset, self_offset,
        stride_q_row, stride_q_feat, stride_r_row, stride_r_feat, stride_out,
        D: tl.constexpr, SCORE: tl.constexpr, HAS_BIAS: tl.constexpr, EXCLUDE_SELF: tl.constexpr,
        C: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        pid_m = tl.program_id(0)
        split = tl.program_id(1)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_query
        slots = tl.arange(0, C)
        lanes = tl.arange(0, BLOCK_N)
        best = tl.full((BLOCK_M, C), float("inf"), tl.float32)
        # distinct negative placeholders, so "the worst slot" is always exactly one slot
        best_col = tl.zeros((BLOCK_M, C), tl.int32) - 1 - slots[None, :]
        worst = tl.full((BLOCK_M,), float("inf"), tl.float32)
        first = split * refs_per_split
        last = tl.minimum(first + refs_per_split, n_ref)
        for start in range(first, last, BLOCK_N):
            cols = start + lanes
            col_ok = cols < last
            acc = _tile_scores(Q, R, BIAS, rows, cols, row_ok, col_ok, stride_q_row, stride_q_feat, stride_r_row,
                               stride_r_feat, D, SCORE, HAS_BIAS, BLOCK_M, BLOCK_N, BLOCK_K, PRECISION)
            valid = col_ok[None, :] & row_ok[:, None]
            if EXCLUDE_SELF:
                valid = valid & ((cols[None, :] + ref_offset) != (rows[:, None] + self_offset))
            acc = tl.where(valid, acc, float("inf"))
            # the common case: no row's tile minimum beats its threshold, one reduction
            improves = tl.max((tl.min(acc, 1) < worst).to(tl.int32), 0)
            while improves > 0:
                low, low_lane = tl.min(acc, 1, return_indices=True)  # ties: the lower column
                enters = low < worst
                # the entry to replace: the worst score, and among equal worst scores the
                # highest column (every earlier column is lower than this tile's)
                evict = tl.argmax(tl.where(best == worst[:, None], best_col, -(1 << 30)), 1)
                put = (slots[None, :] == evict[:, None]) & enters[:, None]
                best = tl.where(put, low[:, None], best)
                best_col = tl.where(put, (start + low_lane)[:, None], best_col)
                worst = tl.max(best, 1)
                acc = tl.where(lanes[None, :] == low_lane[:, None], float("inf"), acc)
                improves = tl.max((tl.min(acc, 1) < worst).to(tl.int32), 0)
        found = best_col >= 0
        keys = tl.sort(tl.where(found, _order_key(best + 0.0, best_col + ref_offset), 0x7FFFFFFFFFFFFFFF), 1)
        missing = keys == 0x7FFFFFFFFFFFFFFF
        scores = tl.where(missing, float("inf"), _key_score(keys))
        index = tl.where(missing, -1, keys & 0xFFFFFFFF)
        out = rows[:, None] * stride_out + split * C + slots[None, :]
        tl.store(OUT_SCORE + out, scores, mask=row_ok[:, None])
        tl.store(OUT_INDEX + out, index, mask=row_ok[:, None])


def _next_pow2(x: int) -> int:
    return 1 << max(0, (int(x) - 1).bit_length())


def _score_kind(metric_name: str, prepared: bool, d: int) -> int:
    if metric_name == "manhattan":
        return _SCORE_L1
    if metric_name in ("euclidean", "sqeuclidean") and not prepared:
        return _SCORE_L2
    return _SCORE_DOT


def default_blocks(d: int, C: int, score: int) -> tuple[int, int, int]:
    """(block_m, block_n, num_warps) for a shape class: measured on an H200 (BENCHMARKS.md).

    Dot scoring: 64 x 64 with 4 warps was fastest of eight shapes for all-kNN of
    262,144 x 8 at C = 8 (76 ms; 32 x 32: 171 ms, 64 x 128 x 8 warps: 182 ms), and
    ran k = 20 (C = 32) at 1M x 10 in 1.37 s. At C = 64 (k = 50, 286,048 x 10) 32 x 64
    took 248 ms on uniform data and 64 x 64 227 ms on ADBench cover: not compared on
    the same data, so the smaller register footprint is kept. Direct scoring: 32 x 32 tiles were fastest at d = 8 (0.14 s;
    64 x 64 took 0.43 s and 128 x 128 3.8 s, likely register spills).
    """
    if score == _SCORE_DOT:
        return (64, 64, 4) if C <= 32 else (32, 64, 4)
    return (32, 32, 4) if C <= 64 else (16, 32, 4)


def default_block_k(d: int) -> int:
    """Features per ``tl.dot`` step for ``d`` prepared features.

    All features in one step up to 64 (at least 16, tl.dot's smallest): on an H200
    (2026-11-21, all-kNN 262,144 points, kernel only) 17 and 25 prepared features
    took 97 ms in one 32-wide step against 386-392 ms in two 16-wide ones, and 33
    took 150 ms in one 64-wide step against 531 ms (16) and 1.13 s (32). Above 64,
    16-wide steps were the least slow (65 features: 0.79 s against 1.5-2.5 s).
    """
    if d > 64:
        return 16
    return max(16, 1 << (d - 1).bit_length())


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
        in five 16-wide ones.
    exclude_self : bool
        Skip the pair (query ``i``, reference ``j``) when
        ``i + self_offset == j + ref_offset``.
    block_m, block_n, num_warps, splits, block_k : int, optional
        Launch shape; by default from :func:`default_blocks`, and ``splits``
        so that small query sets still give every SM work.
    precision : {"tf32x3", "ieee", "tf32", "bf16"}, optional
        How prepared rows' dot products are computed (default ``DOT_PRECISION``).
        The first two are float32-accurate; ``"tf32"`` (one TF32 product) and
        ``"bf16"`` (bfloat16 operands) are faster and less accurate: the engine
        bounds their error (``Metric.bounds(precision=...)``).

    Returns
    -------
    scores, index : (n_query, C) float32 and int64, ascending by (score, index);
        missing entries are ``(+inf, -1)``.
    """
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
    n_query, d = Q.shape
    n_ref = R.shape[0]
    score = _score_kind(metric_name, prepared, d)
    if ref_bias is not None and (score != _SCORE_DOT or ref_bias.shape != (n_ref,) or ref_bias.dtype != torch.float32):
        raise ValueError("ref_bias must be a float32 vector with one entry per reference, for dot-product scoring")
    bm, bn, warps = default_blocks(d, C, score)
    block_m, block_n, num_warps = block_m or bm, block_n or bn, num_warps or warps
    if score == _SCORE_DOT:
        block_m, block_n = max(block_m, 16), max(block_n, 16)  # tl.dot's smallest tile
        Q, R = Q.contiguous(), R.contiguous()  # row-major: a tile is a (rows x features) block
        q_strides, r_strides = (Q.stride(0), 1), (R.stride(0), 1)
    else:
        # feature-major copies make each feature's column a contiguous, coalesced load
        QT, RT = Q.T.contiguous(), R.T.contiguous()
        # with d == 1 the transpose is a view of the caller's (possibly NumPy-backed)
        # memory; the kernel only reads it, but the CPU interpreter wants resizable storage
        Q = QT.clone() if QT.data_ptr() == Q.data_ptr() else QT
        R = RT.clone() if RT.data_ptr() == R.data_ptr() else RT
        q_strides, r_strides = (1, Q.stride(0)), (1, R.stride(0))
    q_blocks = triton.cdiv(max(n_query, 1), block_m)
    if splits is None:
        sms = torch.cuda.get_device_properties(Q.device).multi_processor_count if Q.is_cuda else 1
        # about four programs per SM, never a split shorter than a few tiles
        splits = max(1, min(4 * sms // q_blocks, n_ref // (8 * block_n)))
    refs_per_split = block_n * triton.cdiv(triton.cdiv(max(n_ref, 1), splits), block_n)
    splits = triton.cdiv(max(n_ref, 1), refs_per_split)
    scores = torch.empty((n_query, splits * C), dtype=torch.float32, device=Q.device)
    index = torch.empty((n_query, splits * C), dtype=torch.int64, device=Q.device)
    if n_query == 0:
        return scores[:, :C], index[:, :C]
    _fused_candidates_kernel[(q_blocks, splits)](
        Q, R, R if ref_bias is None else ref_bias.contiguous(), scores, index,
        n_query, n_ref, refs_per_split, ref_offset, self_offset,
        *q_strides, *r_strides, scores.stride(0),
        D=d, SCORE=score, HAS_BIAS=ref_bias is not None, EXCLUDE_SELF=exclude_self,
        C=C, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k or default_block_k(d), PRECISION=precision or DOT_PRECISION, num_warps=num_warps,
    )
    if splits > 1:
        scores, index = topk_by_score_then_index(scores, index, C)
    return scores, index
