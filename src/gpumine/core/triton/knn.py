"""Fused distance + k-selection kernel: the candidate phase of the kNN engine in one launch.

Each program owns ``BLOCK_M`` queries and streams every reference tile of
``BLOCK_N`` rows through registers: the tile's scores are computed feature by
feature (direct differences, so no cancellation) and compared with each
query's current C-th best; only tiles where some query improves go on to the
insertion step, which moves the tile's smallest keys into the running list one
at a time (each replacing the row's largest key) for as many rounds as the
busiest row has hits. The list is sorted once at the end. Scores never reach
global memory.

A (score, column) pair is packed into one int64 key — the float's bits mapped
to an order-preserving int32, shifted up 32 bits, plus the column — so sorting
keys orders by score and then by lower index.

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

__all__ = ["fused_candidates", "FUSED_METRICS", "MAX_FUSED_CANDIDATES"]

# metric codes the kernel understands; cosine and inner product arrive as prepared
# rows (unit / negated reference rows) and are scored by a plain dot product
FUSED_METRICS = {"euclidean": 0, "sqeuclidean": 0, "manhattan": 1, "cosine": 2, "inner_product": 2}
MAX_FUSED_CANDIDATES = 128  # running lists above this spill registers; larger k uses the torch path

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
    def _fused_candidates_kernel(
        QT, RT, OUT_SCORE, OUT_INDEX,
        n_query, n_ref, ref_offset, self_offset,
        stride_qt, stride_rt, stride_out,
        D: tl.constexpr, METRIC: tl.constexpr, EXCLUDE_SELF: tl.constexpr,
        C: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    ):
        pid = tl.program_id(0)
        rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_query
        INF_KEY: tl.constexpr = (0x7F800000 << 32) + 0xFFFFFFFF
        # distinct sentinels (score +inf, index field counting down) so "replace the
        # row's largest key" always hits exactly one slot
        best = INF_KEY - tl.zeros((BLOCK_M, C), tl.int64) - tl.arange(0, C)[None, :].to(tl.int64)
        worst = tl.max(best, 1)
        worst_score = tl.full((BLOCK_M,), float("inf"), tl.float32)
        for start in range(0, n_ref, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            col_ok = cols < n_ref
            acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
            for j in range(D):
                qj = tl.load(QT + j * stride_qt + rows, mask=row_ok, other=0.0)
                rj = tl.load(RT + j * stride_rt + cols, mask=col_ok, other=0.0)
                if METRIC == 0:
                    diff = qj[:, None] - rj[None, :]
                    acc += diff * diff
                elif METRIC == 1:
                    acc += tl.abs(qj[:, None] - rj[None, :])
                else:
                    acc += qj[:, None] * rj[None, :]
            valid = col_ok[None, :] & row_ok[:, None]
            if EXCLUDE_SELF:
                valid = valid & ((cols[None, :] + ref_offset) != (rows[:, None] + self_offset))
            # most tiles improve no row: one compare per pair decides (<= keeps equal
            # scores, whose lower index may still win on the exact key below)
            hits = valid & (acc <= worst_score[:, None])
            n_insert = tl.max(tl.sum(hits.to(tl.int32), 1))
            if n_insert > 0:
                keys = tl.where(hits, _order_key(acc, cols + ref_offset), INF_KEY)
                for _ in range(n_insert):
                    smallest = tl.min(keys, 1)
                    enters = smallest < worst
                    replace = (best == worst[:, None]) & enters[:, None]
                    best = tl.where(replace, smallest[:, None], best)
                    keys = tl.where(keys == smallest[:, None], INF_KEY, keys)
                    worst = tl.max(best, 1)
                worst_score = _key_score(worst)
        best = tl.sort(best, 1)
        scores = _key_score(best)
        index = (best & 0xFFFFFFFF).to(tl.int64)
        index = tl.where(scores == float("inf"), -1, index)
        out = rows[:, None] * stride_out + tl.arange(0, C)[None, :]
        tl.store(OUT_SCORE + out, scores, mask=row_ok[:, None])
        tl.store(OUT_INDEX + out, index, mask=row_ok[:, None])


def _next_pow2(x: int) -> int:
    return 1 << max(0, (int(x) - 1).bit_length())


def fused_candidates(
    Q: torch.Tensor,
    R: torch.Tensor,
    c: int,
    *,
    metric_name: str,
    ref_offset: int = 0,
    exclude_self: bool = False,
    self_offset: int = 0,
    block_m: int = 64,
    block_n: int = 64,
):
    """Best ``C >= c`` candidates of every query among the rows of ``R``, in one launch.

    Parameters
    ----------
    Q, R : float32 tensors (n_query, d) and (n_ref, d) on the same device
        Raw rows for L2/L1; prepared rows (unit, or negated reference rows) for
        cosine/inner product, whose score is the plain dot product.
    c : int
        Candidates wanted; rounded up to a power of two ``C`` (at most
        ``MAX_FUSED_CANDIDATES``).
    ref_offset : int
        Added to reference positions in the returned indices.
    exclude_self : bool
        Skip the pair (query ``i``, reference ``j``) when
        ``i + self_offset == j + ref_offset``.

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
    if C > MAX_FUSED_CANDIDATES:
        raise ValueError(f"c={c} exceeds the fused kernel's register budget ({MAX_FUSED_CANDIDATES}); use backend='torch'")
    n_query, d = Q.shape
    block_n = max(block_n, C)
    # feature-major copies make each feature's column a contiguous, coalesced load
    QT = Q.T.contiguous()
    RT = R.T.contiguous()
    # with d == 1 the transpose is a view of the caller's (possibly NumPy-backed) memory;
    # the kernel only reads it, but the CPU interpreter insists on resizable storage
    QT = QT.clone() if QT.data_ptr() == Q.data_ptr() else QT
    RT = RT.clone() if RT.data_ptr() == R.data_ptr() else RT
    scores = torch.empty((n_query, C), dtype=torch.float32, device=Q.device)
    index = torch.empty((n_query, C), dtype=torch.int64, device=Q.device)
    if n_query == 0:
        return scores, index
    grid = (triton.cdiv(n_query, block_m),)
    _fused_candidates_kernel[grid](
        QT, RT, scores, index,
        n_query, R.shape[0], ref_offset, self_offset,
        QT.stride(0), RT.stride(0), scores.stride(0),
        D=d, METRIC=FUSED_METRICS[metric_name], EXCLUDE_SELF=exclude_self,
        C=C, BLOCK_M=block_m, BLOCK_N=block_n,
    )
    return scores, index
