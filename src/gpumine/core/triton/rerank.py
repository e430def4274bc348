"""Exact re-rank of candidate lists in one launch: per-pair scores, masks, best k by (score, index).

The kNN engine's re-rank turns each query's candidate list (reference rows,
``-1`` for padding, the query's own row excluded on request) into its best
``k`` by exact score, ties to the lower index. In torch that is ~25 small
launches for the masks and the packed-key selection, plus four per feature for
the exact scores at few features; on the physics search (12,000 queries) those
launches, not the GPU, set the time. Here one program owns a block of rows: it
reads the caller's exact scores, or scores the candidates itself feature by
feature (left to right, contraction off, so bit for bit the torch twin's
``Metric.exact_scores_by_feature``), packs (score, index) into int64 keys as
:func:`gpumine.core.select.topk_by_score_then_index` does, and sorts them in
registers. Same keys, same order: the results equal the twin's bit for bit.

The torch twin is :func:`rerank_select_torch`.
"""

from __future__ import annotations

import torch

from ..select import PAD_INDEX, topk_by_score_then_index

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised on machines without triton
    triton = None
    tl = None

__all__ = ["rerank_select", "rerank_select_torch", "RERANK_MAX_WIDTH", "RERANK_SCORED_METRICS", "RERANK_MAX_FEATURES",
           "RERANK_KERNEL_AVAILABLE"]

RERANK_MAX_WIDTH = 64  # candidates per row sorted in registers
RERANK_SCORED_METRICS = ("euclidean", "sqeuclidean", "manhattan")
RERANK_MAX_FEATURES = 16  # as distance.SEQUENTIAL_MAX_FEATURES: exact scores summed feature by feature

_GIVEN, _L2, _L1 = 0, 1, 2
RERANK_KERNEL_AVAILABLE = triton is not None

if triton is not None:

    @triton.jit(do_not_specialize=["n_rows", "width", "k"])
    def _rerank_select_kernel(
        S, IDX, OWN, Q, RT, OUT_V, OUT_I,
        n_rows, width, k,
        stride_s, stride_idx, stride_q, stride_rt, stride_out,
        D: tl.constexpr, SCORE: tl.constexpr, HAS_OWN: tl.constexpr, BLOCK_ROWS: tl.constexpr, W: tl.constexpr,
    ):
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
            ref_rows = tl.where(idx < 0, 0, idx)
            s = tl.zeros((BLOCK_ROWS, W), tl.float32)
            for f in tl.static_range(D):
                q = tl.load(Q + rows * stride_q + f, mask=row_ok, other=0.0)
                r = tl.load(RT + f * stride_rt + ref_rows, mask=inside, other=0.0)
                diff = q[:, None] - r
                if SCORE == 1:
                    s = s + diff * diff
                else:
                    s = s + tl.abs(diff)
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


def _check(index, k, scores, Q, RT, metric_name, own):
    if index.dim() != 2 or index.dtype != torch.int64:
        raise ValueError(f"index must be a 2-D int64 tensor of candidate rows; got {index.dtype} of shape {tuple(index.shape)}")
    if not 1 <= k <= index.shape[1]:
        raise ValueError(f"k must be between 1 and the {index.shape[1]} candidates per row; got {k}")
    if scores is not None:
        if scores.shape != index.shape or scores.dtype != torch.float32:
            raise ValueError(f"scores must be float32 of the index's shape {tuple(index.shape)}; got {scores.dtype} {tuple(scores.shape)}")
    else:
        if metric_name not in RERANK_SCORED_METRICS:
            raise ValueError(f"metric {metric_name!r} is not scored here (one of {RERANK_SCORED_METRICS}); pass scores")
        if Q is None or RT is None or Q.dtype != torch.float32 or RT.dtype != torch.float32:
            raise ValueError("without scores, pass float32 queries Q (n, d) and feature-major references RT (d, n_ref)")
        if Q.shape[0] != index.shape[0] or Q.shape[1] != RT.shape[0] or not 0 < Q.shape[1] <= RERANK_MAX_FEATURES:
            raise ValueError(f"Q (n, d) and RT (d, n_ref) must match the index's rows and have 1 to {RERANK_MAX_FEATURES} "
                             f"features; got {tuple(Q.shape)} and {tuple(RT.shape)}")
    if own is not None and own.shape != (index.shape[0],):
        raise ValueError(f"own must hold one row per query ({index.shape[0]}); got shape {tuple(own.shape)}")


def rerank_select_torch(index: torch.Tensor, k: int, *, scores: torch.Tensor | None = None, Q: torch.Tensor | None = None,
                        RT: torch.Tensor | None = None, metric_name: str | None = None, own: torch.Tensor | None = None):
    """The torch twin of :func:`rerank_select` (same arguments, the same result bit for bit)."""
    from ..distance import get_metric

    _check(index, k, scores, Q, RT, metric_name, own)
    if scores is None:
        flat = index.clamp(min=0).reshape(-1)
        scores = get_metric(metric_name).exact_scores_by_feature(Q.contiguous(), lambda f: RT[f].index_select(0, flat).view(index.shape))
    invalid = index < 0
    if own is not None:
        invalid |= index == own[:, None]
    scores = torch.where(invalid, torch.full_like(scores, float("inf")), scores)
    return topk_by_score_then_index(scores, torch.where(invalid, torch.full_like(index, PAD_INDEX), index), k)


def rerank_select(index: torch.Tensor, k: int, *, scores: torch.Tensor | None = None, Q: torch.Tensor | None = None,
                  RT: torch.Tensor | None = None, metric_name: str | None = None, own: torch.Tensor | None = None):
    """Best ``k`` candidates of each row by (exact score, index), ascending; padding ``(+inf, -1)`` last.

    Parameters
    ----------
    index : int64 tensor (n, width)
        Candidate reference rows; ``-1`` is padding. ``width`` at most ``RERANK_MAX_WIDTH``.
    k : int
        Candidates kept, ``1 <= k <= width``.
    scores : float32 tensor (n, width), optional
        The candidates' exact scores. Without them the kernel scores the
        candidates itself from ``Q`` (n, d) and feature-major ``RT`` (d, n_ref)
        under ``metric_name`` (``RERANK_SCORED_METRICS``, at most
        ``RERANK_MAX_FEATURES`` features), as ``Metric.exact_scores_by_feature``.
    own : int64 tensor (n,), optional
        A reference row per query that must not be selected (the query itself).

    Returns
    -------
    scores, index : (n, k) float32 and int64
    """
    if triton is None:
        raise ValueError("the re-rank kernel needs the 'triton' package; use rerank_select_torch")
    _check(index, k, scores, Q, RT, metric_name, own)
    n, width = index.shape
    if width > RERANK_MAX_WIDTH:
        raise ValueError(f"{width} candidates per row exceed the kernel's {RERANK_MAX_WIDTH}; use rerank_select_torch")
    W = max(2, triton.next_power_of_2(width))
    block_rows = max(1, 2048 // W)
    out_v = torch.empty((n, k), dtype=torch.float32, device=index.device)
    out_i = torch.empty((n, k), dtype=torch.int64, device=index.device)
    if n == 0:
        return out_v, out_i
    index = index.contiguous()
    score = _GIVEN if scores is not None else (_L1 if metric_name == "manhattan" else _L2)
    if scores is not None:
        scores = scores.contiguous()
        Q_arg, RT_arg, d = scores, scores, 1
    else:
        Q_arg, RT_arg, d = Q.contiguous(), RT, Q.shape[1]
        if RT.stride(1) != 1:
            RT_arg = RT.contiguous()
    if not index.is_cuda:  # the CPU interpreter wants resizable storage, not views of NumPy-backed memory
        Q_arg, RT_arg = Q_arg.clone(), RT_arg.clone()
        scores = None if scores is None else scores.clone()
    _rerank_select_kernel[(triton.cdiv(n, block_rows),)](
        index if scores is None else scores, index, index if own is None else own.contiguous(), Q_arg, RT_arg, out_v, out_i,
        n, width, k,
        width if scores is None else scores.stride(0), index.stride(0), Q_arg.stride(0), RT_arg.stride(0), k,
        D=d, SCORE=score, HAS_OWN=own is not None, BLOCK_ROWS=block_rows, W=W, num_warps=4, enable_fp_fusion=False,
    )
    return out_v, out_i
