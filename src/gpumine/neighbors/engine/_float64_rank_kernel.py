"""Candidate lists re-scored in float64 and ordered by (float64 score, index), in one launch.

The float64 order (:mod:`._float64_order`) takes each query's float32 top k + 1
and orders it by float64 exact scores. In torch that is a gather of every
candidate's row, its float64 copy, the score's elementwise passes and two stable
sorts (by index, then by score) with their gathers: on a million queries most of
the search's time after the candidate kernel. Here one program owns a block of
rows: it loads each candidate's features, forms the float64 score as
:meth:`gpumine.core.distance.Metric.exact_scores` does for float64 operands
(per-feature terms ``(x_f - y_f)^2`` or ``|x_f - y_f|`` added left to right in
chunks of ``EXACT_SUM_CHUNK`` features, the chunk sums left to right, contraction
off), gives each entry its place by (score, index, position in the list) —
the order of the two stable sorts — and writes it there. Padding (index ``-1``)
scores ``+inf``.

The torch twin is :func:`float64_rank_torch`; both return the same scores and
indices bit for bit.
"""

from __future__ import annotations

import torch

from ...config import triton_available
from ...core.distance import EXACT_SUM_CHUNK, Metric, get_metric
from ...core.tiles import unit_row_stride

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised on machines without triton
    triton = None
    tl = None

__all__ = ["float64_rank", "float64_rank_torch", "rescore", "float64_rank_supported", "FLOAT64_RANK_METRICS", "FLOAT64_RANK_MAX_WIDTH"]

FLOAT64_RANK_METRICS = ("euclidean", "sqeuclidean", "manhattan")
# entries per row placed by pairwise comparison in registers (width^2 per row)
FLOAT64_RANK_MAX_WIDTH = 64
# comparisons per program (rows x width x width): the block's rows follow from the width
_COMPARISONS_PER_PROGRAM = 1 << 13

if triton is not None:

    @triton.jit
    def _term64(q_at, ref_at, f, row_ok, listed, MANHATTAN: tl.constexpr):
        """Feature ``f``'s float64 term of every (row, candidate) pair (features are consecutive in memory)."""
        q = tl.load(q_at + f, mask=row_ok, other=0.0).to(tl.float64)
        r = tl.load(ref_at + f, mask=listed, other=0.0).to(tl.float64)
        diff = q[:, None] - r
        if MANHATTAN:
            return tl.abs(diff)
        return diff * diff

    @triton.jit(do_not_specialize=["n_rows", "width", "d", "n_chunks"])
    def _float64_rank_kernel(
        Q, R, IDX, OUT_S, OUT_I,
        n_rows, width, d, n_chunks,
        stride_q_r, stride_r_r, stride_idx, stride_out,
        D: tl.constexpr, CHUNK: tl.constexpr, MANHATTAN: tl.constexpr, BLOCK_ROWS: tl.constexpr, W: tl.constexpr,
    ):
        # D > 0: D <= CHUNK features, one unrolled left-to-right sum. D == 0: d features at
        # run time, n_chunks = d // CHUNK whole chunks, then the tail.
        rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        cols = tl.arange(0, W)
        row_ok = rows < n_rows
        col_ok = cols < width
        inside = row_ok[:, None] & col_ok[None, :]
        rows64 = rows.to(tl.int64)
        idx = tl.load(IDX + rows64[:, None] * stride_idx + cols[None, :], mask=inside, other=-1)
        listed = inside & (idx >= 0)  # padding reads no reference row
        ref_at = R + tl.where(idx < 0, 0, idx) * stride_r_r
        q_at = Q + rows64 * stride_q_r
        s = tl.zeros((BLOCK_ROWS, W), tl.float64)
        if D > 0:
            for f in tl.static_range(D):
                s = s + _term64(q_at, ref_at, f, row_ok, listed, MANHATTAN)
        else:
            # whole chunks, each summed left to right from 0.0 (0.0 + t == t for the
            # non-negative terms), then added to the running total
            for c in range(0, n_chunks):
                part = tl.zeros((BLOCK_ROWS, W), tl.float64)
                for j in tl.static_range(CHUNK):
                    part = part + _term64(q_at, ref_at, c * CHUNK + j, row_ok, listed, MANHATTAN)
                s = s + part
            part = tl.zeros((BLOCK_ROWS, W), tl.float64)  # the tail chunk (empty: s + 0.0 == s)
            for f in range(n_chunks * CHUNK, d):
                part = part + _term64(q_at, ref_at, f, row_ok, listed, MANHATTAN)
            s = s + part
        s = tl.where(idx < 0, float("inf"), s)
        # place of entry i: the entries j before it by (NaN last, score, index, position), the
        # order of the twin's stable sorts (a NaN score, from data the API refuses, sorts last)
        nan = s != s
        s = tl.where(nan, 0.0, s)
        s_i, s_j = s[:, :, None], s[:, None, :]
        n_i, n_j = nan[:, :, None], nan[:, None, :]
        i_i, i_j = idx[:, :, None], idx[:, None, :]
        p_i, p_j = cols[None, :, None], cols[None, None, :]
        same_kind = n_j == n_i
        before = (n_i & ~n_j) | (same_kind & ((s_j < s_i) | ((s_j == s_i) & ((i_j < i_i) | ((i_j == i_i) & (p_j < p_i))))))
        place = tl.sum((before & col_ok[None, None, :]).to(tl.int32), 2)
        out = rows64[:, None] * stride_out + place
        tl.store(OUT_S + out, tl.where(nan, float("nan"), s), mask=inside)
        tl.store(OUT_I + out, idx, mask=inside)


def rescore(query: torch.Tensor, ref: torch.Tensor, index: torch.Tensor, metric: Metric, dtype: torch.dtype,
            budget_bytes: int) -> torch.Tensor:
    """``metric.exact_scores`` in ``dtype`` of query row i against references ``index[i]`` (padding: +inf)."""
    q, width = index.shape
    d = ref.shape[1]
    device = index.device
    out = torch.empty((q, width), dtype=dtype, device=device)
    step = max(1, min(q, budget_bytes // max(1, 4 * width * (d + 2) * torch.finfo(dtype).bits // 8)))
    for s0 in range(0, q, step):
        idx = index[s0 : s0 + step]
        flat = idx.clamp(min=0).reshape(-1)
        rows = ref.index_select(0, flat.to(ref.device)).to(device=device, dtype=dtype).view(*idx.shape, d)
        Q = query[s0 : s0 + step].to(device=device, dtype=dtype)
        scores = metric.exact_scores(Q, rows)
        out[s0 : s0 + step] = torch.where(idx < 0, torch.full_like(scores, float("inf")), scores)
    return out


def float64_rank_supported(query: torch.Tensor, ref: torch.Tensor, index: torch.Tensor, metric_name: str) -> bool:
    """Whether :func:`float64_rank` takes these operands (else use :func:`float64_rank_torch`)."""
    return (triton is not None and triton_available(index.device) and metric_name in FLOAT64_RANK_METRICS
            and query.dtype == torch.float32 and ref.dtype == torch.float32 and index.dtype == torch.int64
            and query.device == ref.device == index.device and query.dim() == ref.dim() == 2
            and query.shape[1] == ref.shape[1] >= 1 and index.dim() == 2 and index.shape[0] == query.shape[0]
            and 1 <= index.shape[1] <= FLOAT64_RANK_MAX_WIDTH)


def float64_rank_torch(query: torch.Tensor, ref: torch.Tensor, index: torch.Tensor, metric_name: str | Metric,
                       budget_bytes: int = 1 << 28) -> tuple[torch.Tensor, torch.Tensor]:
    """Row ``i``'s candidates ``index[i]`` (``-1`` padding) re-scored against ``query[i]`` in float64 and ordered
    by (float64 score, index, position): ``(scores (n, width) float64, index (n, width) int64)``.

    The torch twin of :func:`float64_rank`; ``ref`` may sit on another device than ``index``
    (results on ``index``'s device, in blocks of about ``budget_bytes``). Any metric
    (a name or a :class:`~gpumine.core.distance.Metric`), scored by ``Metric.exact_scores``.
    """
    metric = get_metric(metric_name) if isinstance(metric_name, str) else metric_name
    keys = rescore(query, ref, index, metric, torch.float64, budget_bytes)
    order = torch.argsort(index, dim=1, stable=True)
    order = order.gather(1, torch.argsort(keys.gather(1, order), dim=1, stable=True))
    return keys.gather(1, order), index.gather(1, order)


def float64_rank(query: torch.Tensor, ref: torch.Tensor, index: torch.Tensor, metric_name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`float64_rank_torch` in one launch, bit for bit.

    Parameters
    ----------
    query : float32 tensor (n, d)
    ref : float32 tensor (n_ref, d), on ``query``'s device; either at any row stride (copied where
        a row's features are not consecutive)
    index : int64 tensor (n, width)
        Each row's candidate references, ``-1`` for padding; ``width`` at most
        ``FLOAT64_RANK_MAX_WIDTH``.
    metric_name : {"euclidean", "sqeuclidean", "manhattan"}
        Squared differences for the first two (the engine's L2 score), absolute ones for manhattan.

    Returns
    -------
    scores : (n, width) float64, ascending per row; ``+inf`` for padding
    index : (n, width) int64, the candidates in that order
    """
    if triton is None:
        raise ValueError("the float64 rank kernel needs the 'triton' package; use float64_rank_torch")
    if index.dtype != torch.int64:
        raise ValueError(f"index must be int64 candidate rows; got {index.dtype}")
    if not float64_rank_supported(query, ref, index, metric_name):
        raise ValueError(
            f"float64_rank takes float32 query (n, d) and ref (n_ref, d) and int64 index (n, 1..{FLOAT64_RANK_MAX_WIDTH}) "
            f"on one device under one of {FLOAT64_RANK_METRICS}; got query {query.dtype} {tuple(query.shape)} on "
            f"{query.device}, ref {ref.dtype} {tuple(ref.shape)} on {ref.device}, index {tuple(index.shape)} on "
            f"{index.device}, metric {metric_name!r}: use float64_rank_torch")
    n, width = index.shape
    d = query.shape[1]
    scores = torch.empty((n, width), dtype=torch.float64, device=index.device)
    ordered = torch.empty((n, width), dtype=torch.int64, device=index.device)
    if n == 0:
        return scores, ordered
    index = index.contiguous()
    # features consecutive (the kernel's feature offsets stay small); rows at any stride
    query, ref = unit_row_stride(query), unit_row_stride(ref)
    if not index.is_cuda:  # the CPU interpreter wants resizable storage, not views of NumPy-backed memory
        query, ref = query.clone(), ref.clone()
    W = max(2, triton.next_power_of_2(width))
    block_rows = max(1, _COMPARISONS_PER_PROGRAM // (W * W))
    unrolled = d <= EXACT_SUM_CHUNK
    _float64_rank_kernel[(triton.cdiv(n, block_rows),)](
        query, ref, index, scores, ordered,
        n, width, d, d // EXACT_SUM_CHUNK,
        query.stride(0), ref.stride(0), index.stride(0), width,
        D=d if unrolled else 0, CHUNK=EXACT_SUM_CHUNK, MANHATTAN=metric_name == "manhattan", BLOCK_ROWS=block_rows, W=W,
        num_warps=4, enable_fp_fusion=False,
    )
    return scores, ordered
