"""Searches by the exact-selection kernel: final float64 scores selected in one launch per query block.

Where it applies (:func:`exact_select_applies`: a GPU, the automatic backend,
exact products, an L2 metric, few enough features and a small enough k) and
pays (:func:`exact_select_preferred`), a search that would run dense needs no candidate margin, certificate or radius pass: the kernel
(:mod:`._exact_select_kernel`) scores every pair exactly as the engine's float64
re-score does and keeps the k best by (score, index). Its work is one float64
score per (query, reference) pair, whatever ties the data has.
"""

from __future__ import annotations

import torch

from ...core.distance import Metric
from ...core.tiles import same_device
from ._curve import _CurveOrder
from ._exact_select_kernel import (EXACT_SELECT_MAX_FEATURES, EXACT_SELECT_MAX_K, exact_select, exact_select_available)

__all__ = ["exact_select_supports", "exact_select_applies", "exact_select_preferred", "exact_select_search", "EXACT_SELECT", "EXACT_SELECT_CURVE", "EXACT_SELECT_MIN_PAIRS", "EXACT_SELECT_CURVE_MIN_PAIRS",
           "EXACT_SELECT_PREFERRED_FEATURES"]

# False turns the path off, and EXACT_SELECT_CURVE its curve order (same-run A/B timings)
EXACT_SELECT = True
EXACT_SELECT_CURVE = True
# metrics searched here: those whose dense path it replaces (the float64-ordered L2 scores)
_METRICS = ("euclidean", "sqeuclidean")
# Of the searches that run dense (tie-heavy ones the fused kernel cannot certify, distinct rows
# of duplicated data, and those too small to probe), those of more than EXACT_SELECT_MIN_PAIRS
# pairs (below, the dense path replays captured graphs) and at most
# EXACT_SELECT_PREFERRED_FEATURES features run here. On the ADBench all-kNN sweep (k = 20) the
# dense path ran at about the same rate per pair whatever d up to 62, the kernel at a rate per
# pair and feature (its insertions, not its arithmetic, set the pace): ahead at 3 to 10 features
# (mammography, magic.gamma, shuttle, smtp, skin, http, donors' distinct rows), behind at 27, 39
# and 62 (ALOI, celeba, campaign). From EXACT_SELECT_CURVE_MIN_PAIRS pairs the rows go in curve
# order (about a third less time on shuttle, smtp, skin, http; at mammography's 1.25e8 pairs the
# order's own cost was more than it saved). BENCHMARKS.md, "Design measurements quoted in the code".
EXACT_SELECT_MIN_PAIRS = 1 << 26
EXACT_SELECT_CURVE_MIN_PAIRS = 1 << 28
EXACT_SELECT_PREFERRED_FEATURES = 16


def exact_select_supports(metric: Metric, dtype: torch.dtype, d: int, k: int, device: torch.device, backend: str,
                          precision: str) -> bool:
    """Whether a search of this kind can run on the exact-selection kernel (see the module docstring)."""
    return (EXACT_SELECT and exact_select_available() and device.type == "cuda" and backend == "auto" and precision == "exact"
            and metric.name in _METRICS and dtype in (torch.float32, torch.float64)
            and 0 < d <= EXACT_SELECT_MAX_FEATURES and 1 <= k <= EXACT_SELECT_MAX_K)


def exact_select_applies(ref: torch.Tensor, query: torch.Tensor, k: int, metric: Metric, device: torch.device, backend: str,
                         precision: str) -> bool:
    """:func:`exact_select_supports` for these operands, both already on ``device``."""
    return (query.dtype == ref.dtype and exact_select_supports(metric, ref.dtype, ref.shape[1], k, device, backend, precision)
            and same_device(ref.device, device) and same_device(query.device, device))


def exact_select_preferred(n_query: int, n_ref: int, d: int) -> bool:
    """Whether a search that would run dense runs here instead (see ``EXACT_SELECT_MIN_PAIRS``)."""
    return n_query * n_ref > EXACT_SELECT_MIN_PAIRS and d <= EXACT_SELECT_PREFERRED_FEATURES


def exact_select_search(ref: torch.Tensor, query: torch.Tensor, k: int, metric: Metric, *, exclude_self: bool,
                        budget_bytes: int, stats: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Top k of every query as ``(float64 scores, indices)`` by (float64 score, index), as ``dense_search`` returns them.

    ``exclude_self``: query i is reference i (the queries are the references or
    a prefix of them). ``k`` must not exceed the references available to a row.
    """
    n_query = query.shape[0]
    keys_out = torch.empty((n_query, k), dtype=torch.float64, device=ref.device)
    index_out = torch.empty((n_query, k), dtype=torch.int64, device=ref.device)
    if n_query == 0:
        return keys_out, index_out
    # rows along a space-filling curve: each query block starts its scan among its neighbours
    curve = EXACT_SELECT_CURVE and n_query * ref.shape[0] >= EXACT_SELECT_CURVE_MIN_PAIRS
    order = _CurveOrder(ref) if curve else None
    if order is None:
        ref_ids = query_ids = anchors = None
        RT = ref.T.contiguous()
        QT = RT if query is ref else query.T.contiguous()
    elif query is ref:
        ref_ids = query_ids = order.perm
        anchors = torch.arange(n_query, device=ref.device)
        RT = ref.index_select(0, order.perm).T.contiguous()
        QT = RT
    else:
        ref_ids = order.perm
        query_ids, anchors = order.place(query)
        RT = ref.index_select(0, order.perm).T.contiguous()
        QT = query.index_select(0, query_ids).T.contiguous()
    # the kernel's lists (float64 + int32 per slot, one list per reference split) and the sort's copies
    per_row = 64 * max(2, 1 << (k - 1).bit_length()) * 8
    rows = max(1, min(n_query, budget_bytes // per_row))
    for q0 in range(0, n_query, rows):
        q1 = min(n_query, q0 + rows)
        if order is None:
            keys, index = exact_select(QT[:, q0:q1], RT, k, metric.name, exclude_self=exclude_self, self_offset=q0)
            keys_out[q0:q1] = keys
            index_out[q0:q1] = index
        else:
            keys, index = exact_select(QT[:, q0:q1], RT, k, metric.name, exclude_self=exclude_self, ref_ids=ref_ids,
                                       query_ids=query_ids[q0:q1], anchors=anchors[q0:q1])
            keys_out[query_ids[q0:q1]] = keys
            index_out[query_ids[q0:q1]] = index
    if stats is not None:
        stats.update(selection="exact_select", query_rows=rows, scores_exact=True, tile_dtype="float64")
    return keys_out, index_out
