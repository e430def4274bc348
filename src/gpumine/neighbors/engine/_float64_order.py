"""Float32 searches ordered by float64 distances: the truly nearer reference wins.

The engine ranks float32 data by per-pair float32 exact scores, so two references
whose float32 scores round to the same value (or cross) are ordered by index even
when their float64 distances differ. For the metrics here the search runs for
k + 1 neighbours; the k + 1 are re-scored in float64 and sorted by (float64 score,
index); a row is final when its float64 k-th score is below anything a reference
left out can score in float64 (the float32 (k+1)-th less its rounding bound).
Rows left open (float32 ties or near-ties across the k-th place) get one float64
exact scan over every reference. Data whose float32 scores are exact (integers
of a small enough range) need none of this: float32 and float64 agree.

Work: the k + 1 search, (queries x (k + 1)) float64 re-scores, and for the open
rows one float64 pass over the references.
"""

from __future__ import annotations

import torch

from ...core.distance import Metric
from ...core.tiles import iter_row_chunks
from ._host_summary import facts_of, summary_of

__all__ = ["FLOAT64_ORDER_METRICS", "float32_scores_exact", "exact_for_range", "needs_float64_order", "rescore", "certified_rows",
           "Float64Tiles"]

# metrics whose float32 exact scores have a relative error bound (non-negative sums or maxima)
FLOAT64_ORDER_METRICS = ("euclidean", "sqeuclidean", "manhattan", "chebyshev", "minkowski")
_EXACT_SPAN_LIMIT = 2.0**24  # integers below this add and multiply exactly in float32


def float32_scores_exact(ref: torch.Tensor, query: torch.Tensor, metric: Metric) -> bool:
    """Whether every float32 exact score of this data equals its true value (integer data, small range)."""
    if metric.name not in ("euclidean", "sqeuclidean", "manhattan", "chebyshev"):
        return False
    lows, highs = [], []
    for X in (ref,) if query is ref else (ref, query):
        if X.numel() == 0:
            continue
        if facts_of(X) is not None:  # facts still being gathered by this search: not known to be exact
            return False
        summary = summary_of(X)
        if summary is not None:  # host references summarised on the GPU
            if not summary.integral:
                return False
            lows.append(summary.low)
            highs.append(summary.high)
            continue
        if not bool((X == torch.round(X)).all()):
            return False
        low, high = torch.aminmax(X)
        lows.append(float(low))
        highs.append(float(high))
    return not lows or exact_for_range(metric, ref.shape[1], min(lows), max(highs))


def exact_for_range(metric: Metric, d: int, low: float, high: float) -> bool:
    """Whether float32 exact scores of integer data in [low, high] are exact (see :func:`float32_scores_exact`)."""
    if metric.name not in ("euclidean", "sqeuclidean", "manhattan", "chebyshev"):
        return False
    span = high - low
    largest = {"chebyshev": span, "manhattan": d * span}.get(metric.name, d * span * span)
    return largest < _EXACT_SPAN_LIMIT


def needs_float64_order(ref: torch.Tensor, query: torch.Tensor, metric: Metric) -> bool:
    """Whether a search of this data is re-ordered by float64 scores."""
    return (ref.dtype == torch.float32 and metric.name in FLOAT64_ORDER_METRICS
            and not float32_scores_exact(ref, query, metric))


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


def certified_rows(scores64: torch.Tensor, last32: torch.Tensor, k: int, metric: Metric, d: int) -> torch.Tensor:
    """Rows whose float64 k-th score is below what any reference outside the list scores in float64.

    ``last32``: per row, the float32 exact score of the last listed reference; every
    reference left out scores at least that in float32, so at least
    ``last32 * (1 - rel32) - tiny`` in float64 and in truth. Relative bounds: the
    float32 sums of d non-negative terms (differences, squares, additions) are
    within ``(2 d + 8) 2^-24`` of the true value, float64 ones within ``(2 d + 8)
    2^-53``; ``tiny`` covers terms that fall below float32's normal range.
    """
    rel32 = (2 * d + 8) * 2.0**-24
    rel64 = (2 * d + 8) * 2.0**-53
    tiny = (d + 1) * 2.0**-148
    kth = scores64[:, k - 1]
    least_outside = last32.double() * (1.0 - rel32) - tiny
    return kth * (1.0 + rel64) < least_outside


class Float64Tiles:
    """Reference rows in float64 chunks on the device, for the engine's exact scan."""

    def __init__(self, ref: torch.Tensor, rows_per_tile: int, device: torch.device):
        self.ref, self.rows_per_tile, self.device = ref, rows_per_tile, device

    def raw_tiles(self):
        for start, chunk in iter_row_chunks(self.ref, self.rows_per_tile, self.device):
            yield start, chunk.double()
