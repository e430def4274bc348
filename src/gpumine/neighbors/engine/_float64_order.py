"""Float32 searches ordered by float64 distances: the truly nearer reference wins.

The engine ranks float32 data by per-pair float32 exact scores, so two references
whose float32 scores round to the same value (or cross) are ordered by index even
when their float64 distances differ. For the metrics here the search runs for
k + 1 neighbours; the k + 1 are re-scored in float64 and sorted by (float64 score,
index); a row is final when its float64 k-th score is below anything a reference
left out can score in float64 (the float32 (k+1)-th less its rounding bound).
Rows left open (float32 ties or near-ties across the k-th place) get one float64
exact scan over every reference (on a GPU, one exact-selection launch). Data whose
float32 scores are exact (integers of a small enough range) need none of this:
float32 and float64 agree. :func:`order_by_float64` does it to a search's lists.

Work: the k + 1 search, (queries x (k + 1)) float64 re-scores, and for the open
rows one float64 pass over the references.
"""

from __future__ import annotations

import torch

from ...core.distance import Metric
from ...core.tiles import fits_on_device, iter_row_chunks, same_device
from ._exact_select import exact_select_supports, feature_major
from ._exact_select_kernel import exact_select
from ._float64_rank_kernel import float64_rank, float64_rank_supported, float64_rank_torch, rescore
from ._host_summary import facts_of, summary_of
from ._rerank import _exact_scan

__all__ = ["FLOAT64_ORDER_METRICS", "float32_scores_exact", "exact_for_range", "needs_float64_order", "rescore", "certified_rows",
           "Float64Tiles", "float64_list_width", "ranked_by_float64", "order_by_float64", "FLOAT64_SCAN_ON_KERNEL", "FLOAT64_RANK_ON_KERNEL"]

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


def certified_rows(scores64: torch.Tensor, last32: torch.Tensor, k: int, metric: Metric, d: int) -> torch.Tensor:
    """Rows whose float64 k-th score is below what any reference outside the list scores in float64.

    ``last32``: per row, a float32 exact score every reference left out of the list
    reaches (the last listed reference's, or the engine's bound below it), so at least
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


def float64_list_width(k: int, n_ref: int, exclude_self: bool) -> int:
    """Neighbours searched for a float64-ordered top k: one more than k where the references have it."""
    return min(k + 1, n_ref - (1 if exclude_self else 0))


def ranked_by_float64(query, ref, index, metric: Metric, budget_bytes: int, kernel: bool):
    """Lists ``index`` re-scored in float64 and ordered by (score, index): ``(scores, index)``, in one launch
    (:func:`float64_rank`) where ``kernel`` allows it and it applies, else by its torch twin."""
    if kernel and FLOAT64_RANK_ON_KERNEL and float64_rank_supported(query, ref, index, metric.name):
        return float64_rank(query, ref, index, metric.name)
    return float64_rank_torch(query, ref, index, metric, budget_bytes)


def order_by_float64(ref, query, scores, index, k, metric, exclude_self, budget_bytes, device, stats=None, max_open=None,
                     kernel: bool = False, outside: torch.Tensor | None = None):
    """Float32 top-(k+1) lists to the float64-ordered top k on ``device``.

    ``scores``/``index``: the engine's lists of :func:`float64_list_width` entries,
    ordered by (float32 exact score, index). Returns ``(keys, index, reported)``:
    float64 scores, indices, and those scores rounded to the lists' dtype (the
    values the engine reports: the nearest float32 to each true score). Rows the float64 certificate leaves open get one
    float64 exact scan (see :mod:`._float64_order`); with more than ``max_open``
    of them, None instead (the caller's other path settles them). ``kernel``: the
    re-score and the scan may run on kernels (:func:`float64_rank`, :func:`_exact_select_scan`).
    ``outside``: per row, a float32 exact score every reference left out of the list
    reaches, where the last entry is a spare (the engine's bound, see ``plan_search``);
    by default the lists are exact and their last entry is that score.
    """
    scores, index = scores.to(device), index.to(device)
    # (float64 key, index); the float32 scores are only needed for their row maximum below
    keys, index = ranked_by_float64(query, ref, index, metric, budget_bytes, kernel)
    open_rows = torch.empty(0, dtype=torch.int64, device=device)
    if index.shape[1] > k:  # else every reference is listed: nothing outside the list to beat
        last32 = scores.amax(1) if outside is None else outside.to(device)
        open_rows = (~certified_rows(keys, last32, k, metric, ref.shape[1])).nonzero().squeeze(1)
    if max_open is not None and open_rows.numel() > max_open:
        return None
    if open_rows.numel():
        found = _exact_select_scan(ref, query, open_rows, k, metric, exclude_self, device) if kernel else None
        if found is None:
            rows_per_tile = max(1, budget_bytes // (8 * 4 * max(1, ref.shape[1])))
            Q64 = query[open_rows.to(query.device)].to(device=device, dtype=torch.float64)
            found = _exact_scan(Q64, open_rows, Float64Tiles(ref, rows_per_tile, device), metric, k, exclude_self,
                                budget_bytes)
        keys[open_rows, :k], index[open_rows, :k] = found
    if stats is not None:
        stats["rows_float64_scan"] = stats.get("rows_float64_scan", 0) + int(open_rows.numel())
    keys = keys[:, :k].contiguous()
    return keys, index[:, :k].contiguous(), keys.to(scores.dtype)


# True: the float64 re-score and its order run in one launch where it applies (the torch
# twin's gathers, elementwise passes and two stable sorts took most of a million-query search's
# time after its candidate kernel: BENCHMARKS.md); False: the twin (same-run A/B timings)
FLOAT64_RANK_ON_KERNEL = True

# True: the float64 order's exact scans of open rows run on the exact-selection kernel where it
# applies (one launch; the torch scan forms every pair's terms in float64 memory, which took most
# of a wide all-kNN's time for a few hundred open rows: BENCHMARKS.md, "Design measurements quoted
# in the code"); False: the torch scan (same-run A/B timings)
FLOAT64_SCAN_ON_KERNEL = True


def _exact_select_scan(ref, query, rows, k, metric, exclude_self, device):
    """``order_by_float64``'s float64 top k of query rows ``rows`` over every reference in one exact-selection
    launch (float64 scores in ``Metric.exact_scores``' order, ties to the lower index), or None where it cannot run."""
    n_ref, d = ref.shape
    if not (FLOAT64_SCAN_ON_KERNEL and same_device(ref.device, device) and query.dtype == ref.dtype and n_ref < 2**31
            and exact_select_supports(metric, ref.dtype, d, k, device, "auto", "exact")
            and fits_on_device(2 * ref.numel() * ref.element_size(), device)):
        return None
    RT, QT = feature_major(ref, query.index_select(0, rows.to(query.device)), device)
    if not exclude_self:
        return exact_select(QT, RT, k, metric.name)
    # each row's own reference left out by id: references in their own order, each query's scan
    # starting at its own row
    ids = rows.to(device=device, dtype=torch.int32)
    return exact_select(QT, RT, k, metric.name, exclude_self=True, ref_ids=torch.arange(n_ref, dtype=torch.int32, device=device),
                        query_ids=ids, anchors=ids)
