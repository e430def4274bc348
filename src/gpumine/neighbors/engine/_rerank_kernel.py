"""Exact re-rank of candidate lists in one launch: per-pair scores, masks, best k by (score, index).

The kNN engine's re-rank turns each query's candidate list (reference rows,
``-1`` for padding, the query's own row excluded on request) into its best
``k`` by exact score, ties to the lower index. In torch that is ~25 small
launches for the masks and the packed-key selection, plus four per feature for
the exact scores at few features (and four, a gather and a broadcast reduction,
at many); on the physics search (12,000 queries) those launches, not the GPU,
set the time. Here one program owns a block of rows: it reads the caller's
exact scores, or scores the candidates itself (euclidean, sqeuclidean,
manhattan) in the order :meth:`gpumine.core.distance.Metric.exact_scores`
defines — per-feature terms summed left to right in chunks of
``EXACT_SUM_CHUNK`` (16) features, the chunk sums left to right, contraction
off — so bit for bit the torch twin's scores, packs (score, index) into int64
keys as :func:`gpumine.core.select.topk_by_score_then_index` does, and sorts
them in registers. Same keys, same order: the results equal the twin's bit for
bit.

The references come feature-major (``RT``, (d, n_ref), at most
``RERANK_MAX_FEATURES`` features: one unrolled feature loop) or row-major
(``R``, (n_ref, d), any number of features: up to 16 the same unrolled loop,
above a loop over whole chunks with an unrolled chunk inside, then the tail,
so compile time does not grow with ``d``); the kernel addresses both through
one (feature stride, row stride) pair.

The torch twin is :func:`rerank_select_torch`.
"""

from __future__ import annotations

import torch

from ...core.distance import EXACT_SUM_CHUNK, SEQUENTIAL_MAX_FEATURES
from ...core.select import PAD_INDEX, topk_by_score_then_index

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised on machines without triton
    triton = None
    tl = None

__all__ = ["rerank_select", "rerank_select_torch", "RERANK_MAX_WIDTH", "RERANK_SCORED_METRICS", "RERANK_MAX_FEATURES",
           "RERANK_ROW_MAJOR_MAX_FEATURES", "RERANK_KERNEL_AVAILABLE"]

RERANK_MAX_WIDTH = 64  # candidates per row sorted in registers
RERANK_SCORED_METRICS = ("euclidean", "sqeuclidean", "manhattan")
# Features the kernel scores from feature-major references RT (d, n_ref): as
# distance.SEQUENTIAL_MAX_FEATURES, where exact scores are summed feature by feature.
RERANK_MAX_FEATURES = SEQUENTIAL_MAX_FEATURES
# Features the kernel scores from row-major references R (n_ref, d): None, any number
# (summed in distance.EXACT_SUM_CHUNK-wide chunks, as Metric.exact_scores).
RERANK_ROW_MAJOR_MAX_FEATURES = None
# Candidates per program when scoring from row-major references (a module value for A/B timings).
# Every candidate's row is a separate cache line; a program's lines must stay in L1 across its
# features: with 12,000 rows x 32 candidates from 32,768 references, 128 lanes measured fastest
# of 2,048 / 512 / 128 at 65 features and at 17 (BENCHMARKS.md, "Design measurements quoted in the code").
ROW_MAJOR_LANES = 128

_GIVEN, _L2, _L1 = 0, 1, 2
RERANK_KERNEL_AVAILABLE = triton is not None

if triton is not None:

    @triton.jit
    def _term(q_at, ref_at, f, stride_ref_f, row_ok, inside, SCORE: tl.constexpr):
        """Feature ``f``'s term of every (row, candidate) pair: (x - y)^2 (SCORE 1) or |x - y|."""
        q = tl.load(q_at + f, mask=row_ok, other=0.0)
        r = tl.load(ref_at + f * stride_ref_f, mask=inside, other=0.0)
        diff = q[:, None] - r
        if SCORE == 1:
            return diff * diff
        return tl.abs(diff)

    @triton.jit(do_not_specialize=["n_rows", "width", "k", "d", "n_chunks"])
    def _rerank_select_kernel(
        S, IDX, OWN, Q, REF, OUT_V, OUT_I,
        n_rows, width, k, d, n_chunks,
        stride_s, stride_idx, stride_q, stride_ref_f, stride_ref_r, stride_out,
        D: tl.constexpr, CHUNK: tl.constexpr, SCORE: tl.constexpr, HAS_OWN: tl.constexpr, BLOCK_ROWS: tl.constexpr,
        W: tl.constexpr,
    ):
        # Reference feature f of row r is REF[f * stride_ref_f + r * stride_ref_r] (RT: (stride, 1),
        # R: (1, stride) when contiguous). D > 0: D features, one unrolled left-to-right sum (one
        # chunk, D <= CHUNK). D == 0: d features at run time, n_chunks = d // CHUNK whole chunks.
        rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        cols = tl.arange(0, W)
        row_ok = rows < n_rows
        col_ok = cols < width
        inside = row_ok[:, None] & col_ok[None, :]
        idx = tl.load(IDX + rows[:, None] * stride_idx + cols[None, :], mask=inside, other=-1)
        invalid = idx < 0
        if HAS_OWN:
            own = tl.load(OWN + rows, mask=row_ok, other=-1)
            invalid = invalid | (idx == own[:, None])
        if SCORE == 0:
            s = tl.load(S + rows[:, None] * stride_s + cols[None, :], mask=inside, other=float("inf"))
        else:
            ref_at = REF + tl.where(idx < 0, 0, idx) * stride_ref_r
            q_at = Q + rows * stride_q
            s = tl.zeros((BLOCK_ROWS, W), tl.float32)
            if D > 0:
                for f in tl.static_range(D):
                    s = s + _term(q_at, ref_at, f, stride_ref_f, row_ok, inside, SCORE)
            else:
                # whole chunks: each summed left to right from 0.0 (0.0 + t == t for the
                # non-negative terms), then added to the running total
                for c in range(0, n_chunks):
                    part = tl.zeros((BLOCK_ROWS, W), tl.float32)
                    for j in tl.static_range(CHUNK):
                        part = part + _term(q_at, ref_at, c * CHUNK + j, stride_ref_f, row_ok, inside, SCORE)
                    s = s + part
                # the tail chunk (empty: s + 0.0 == s)
                part = tl.zeros((BLOCK_ROWS, W), tl.float32)
                for f in range(n_chunks * CHUNK, d):
                    part = part + _term(q_at, ref_at, f, stride_ref_f, row_ok, inside, SCORE)
                s = s + part
        s = tl.where(invalid, float("inf"), s)
        s = tl.where(s == 0.0, 0.0, s)  # -0.0 and +0.0 tie
        col = tl.where(invalid, -1, idx)
        bits = s.to(tl.int32, bitcast=True)
        ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)
        key = (ordered.to(tl.int64) << 32) | (col & 0xFFFFFFFF)
        key = tl.where(col_ok[None, :], key, 0x7FFFFFFFFFFFFFFF)  # lanes past the list sort last
        key = tl.sort(key, 1)
        low = key & 0xFFFFFFFF
        out_index = tl.where(low == 0xFFFFFFFF, -1, low)
        high = (key >> 32).to(tl.int32)
        out_score = (high ^ ((high >> 31) & 0x7FFFFFFF)).to(tl.float32, bitcast=True)
        out = rows[:, None] * stride_out + cols[None, :]
        keep = row_ok[:, None] & (cols[None, :] < k)
        tl.store(OUT_V + out, out_score, mask=keep)
        tl.store(OUT_I + out, out_index, mask=keep)


def _check(index, k, scores, Q, RT, R, metric_name, own):
    if index.dim() != 2 or index.dtype != torch.int64:
        raise ValueError(f"index must be a 2-D int64 tensor of candidate rows; got {index.dtype} of shape {tuple(index.shape)}")
    if not 1 <= k <= index.shape[1]:
        raise ValueError(f"k must be between 1 and the {index.shape[1]} candidates per row; got {k}")
    if scores is not None:
        if scores.shape != index.shape or scores.dtype != torch.float32:
            raise ValueError(f"scores must be float32 of the index's shape {tuple(index.shape)}; got {scores.dtype} {tuple(scores.shape)}")
        if Q is not None or RT is not None or R is not None:
            raise ValueError("pass either scores or Q with RT or R, not both")
    else:
        if metric_name not in RERANK_SCORED_METRICS:
            raise ValueError(f"metric {metric_name!r} is not scored here (one of {RERANK_SCORED_METRICS}); pass scores")
        if (RT is None) == (R is None):
            raise ValueError("without scores, pass exactly one of RT (feature-major references, (d, n_ref)) and "
                             "R (row-major references, (n_ref, d))" + ("; got both" if RT is not None else ""))
        refs, name = (RT, "RT") if RT is not None else (R, "R")
        if Q is None or Q.dtype != torch.float32 or refs.dtype != torch.float32:
            raise ValueError(f"without scores, pass float32 queries Q (n, d) and float32 references {name}; got "
                             f"{None if Q is None else Q.dtype} and {refs.dtype}")
        if Q.dim() != 2 or refs.dim() != 2 or Q.shape[0] != index.shape[0] or Q.shape[1] == 0:
            raise ValueError(f"Q must be (n, d) with the index's {index.shape[0]} rows and d >= 1 features, {name} 2-D; "
                             f"got {tuple(Q.shape)} and {tuple(refs.shape)}")
        d = Q.shape[1]
        if RT is not None:
            if RT.shape[0] != d:
                raise ValueError(f"RT must be feature-major (d, n_ref) with Q's {d} features; got {tuple(RT.shape)}")
            if d > RERANK_MAX_FEATURES:
                raise ValueError(f"feature-major RT is scored at most at {RERANK_MAX_FEATURES} features; got {d}: "
                                 "pass row-major references R (n_ref, d) instead (any number of features), or scores")
        elif R.shape[1] != d:
            raise ValueError(f"R must be row-major (n_ref, d) with Q's {d} features; got {tuple(R.shape)}")
    if own is not None and own.shape != (index.shape[0],):
        raise ValueError(f"own must hold one row per query ({index.shape[0]}); got shape {tuple(own.shape)}")


def rerank_select_torch(index: torch.Tensor, k: int, *, scores: torch.Tensor | None = None, Q: torch.Tensor | None = None,
                        RT: torch.Tensor | None = None, R: torch.Tensor | None = None, metric_name: str | None = None,
                        own: torch.Tensor | None = None):
    """The torch twin of :func:`rerank_select` (same arguments, the same result bit for bit)."""
    from ...core.distance import get_metric

    _check(index, k, scores, Q, RT, R, metric_name, own)
    if scores is None:
        flat = index.clamp(min=0).reshape(-1)
        metric = get_metric(metric_name)
        if RT is not None:
            scores = metric.exact_scores_by_feature(Q.contiguous(), lambda f: RT[f].index_select(0, flat).view(index.shape))
        else:
            scores = metric.exact_scores(Q, R.index_select(0, flat).view(*index.shape, R.shape[1]))
    invalid = index < 0
    if own is not None:
        invalid |= index == own[:, None]
    scores = torch.where(invalid, torch.full_like(scores, float("inf")), scores)
    return topk_by_score_then_index(scores, torch.where(invalid, torch.full_like(index, PAD_INDEX), index), k)


def rerank_select(index: torch.Tensor, k: int, *, scores: torch.Tensor | None = None, Q: torch.Tensor | None = None,
                  RT: torch.Tensor | None = None, R: torch.Tensor | None = None, metric_name: str | None = None,
                  own: torch.Tensor | None = None):
    """Best ``k`` candidates of each row by (exact score, index), ascending; padding ``(+inf, -1)`` last.

    Parameters
    ----------
    index : int64 tensor (n, width)
        Candidate reference rows; ``-1`` is padding. ``width`` at most ``RERANK_MAX_WIDTH``.
    k : int
        Candidates kept, ``1 <= k <= width``.
    scores : float32 tensor (n, width), optional
        The candidates' exact scores. Without them the kernel scores the
        candidates itself from float32 queries ``Q`` (n, d) and exactly one of
        the references ``RT`` (feature-major, (d, n_ref), at most
        ``RERANK_MAX_FEATURES`` features) or ``R`` (row-major, (n_ref, d), any
        number of features: ``RERANK_ROW_MAJOR_MAX_FEATURES`` is None), under
        ``metric_name`` (``RERANK_SCORED_METRICS``), bit for bit as
        ``Metric.exact_scores`` (chunked order, see there). Any strides.
    own : int64 tensor (n,), optional
        A reference row per query that must not be selected (the query itself).

    Returns
    -------
    scores, index : (n, k) float32 and int64
    """
    if triton is None:
        raise ValueError("the re-rank kernel needs the 'triton' package; use rerank_select_torch")
    _check(index, k, scores, Q, RT, R, metric_name, own)
    n, width = index.shape
    if width > RERANK_MAX_WIDTH:
        raise ValueError(f"{width} candidates per row exceed the kernel's {RERANK_MAX_WIDTH}; use rerank_select_torch")
    W = max(2, triton.next_power_of_2(width))
    # candidates per program: scored from rows, each candidate's row is one cache line per
    # feature load, and the lines of a program must stay in L1 across its features
    lanes = ROW_MAJOR_LANES if R is not None else 2048
    block_rows = max(1, lanes // W)
    out_v = torch.empty((n, k), dtype=torch.float32, device=index.device)
    out_i = torch.empty((n, k), dtype=torch.int64, device=index.device)
    if n == 0:
        return out_v, out_i
    index = index.contiguous()
    score = _GIVEN if scores is not None else (_L1 if metric_name == "manhattan" else _L2)
    if scores is not None:
        scores = scores.contiguous()
        Q_arg, ref_arg, d = scores, scores, 1
    else:
        Q_arg, ref_arg, d = Q.contiguous(), (RT if RT is not None else R), Q.shape[1]
    if not index.is_cuda:  # the CPU interpreter wants resizable storage, not views of NumPy-backed memory
        Q_arg, ref_arg = Q_arg.clone(), ref_arg.clone()
        scores = None if scores is None else scores.clone()
    # (feature stride, row stride) of the references, whatever their layout
    stride_f, stride_r = (ref_arg.stride(0), ref_arg.stride(1)) if RT is not None else (ref_arg.stride(1), ref_arg.stride(0))
    unrolled = d <= SEQUENTIAL_MAX_FEATURES  # one chunk: fully unrolled, as before chunks existed
    _rerank_select_kernel[(triton.cdiv(n, block_rows),)](
        index if scores is None else scores, index, index if own is None else own.contiguous(), Q_arg, ref_arg, out_v, out_i,
        n, width, k, d, d // EXACT_SUM_CHUNK,
        width if scores is None else scores.stride(0), index.stride(0), Q_arg.stride(0), stride_f, stride_r, k,
        D=d if unrolled else 0, CHUNK=EXACT_SUM_CHUNK, SCORE=score, HAS_OWN=own is not None, BLOCK_ROWS=block_rows, W=W,
        num_warps=4, enable_fp_fusion=False,
    )
    return out_v, out_i
