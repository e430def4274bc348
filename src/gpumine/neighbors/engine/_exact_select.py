"""Searches by the exact-selection kernel: final float64 scores selected in one launch per query block.

Where it applies (:func:`exact_select_applies`: a GPU, the automatic backend,
exact products, an L2 metric, few enough features and a small enough k) and
pays (:func:`exact_select_preferred`), a search that would run dense needs no candidate margin, certificate or radius pass: the kernel
(:mod:`._exact_select_kernel`) scores every pair exactly as the engine's float64
re-score does and keeps the k best by (score, index). Its work is one float64
score per (query, reference) pair, whatever ties the data has. Small searches run it through
:mod:`._small_search` (checked and launched once, replayed as a graph when repeated).
"""

from __future__ import annotations

import torch

from ...core.distance import Metric
from ...core.tiles import copy_to_device, same_device
from ._curve import _CurveOrder
from ._exact_select_kernel import EXACT_SELECT_MAX_FEATURES, EXACT_SELECT_MAX_K, exact_select, exact_select_available

__all__ = ["feature_major", "exact_select_supports", "exact_select_applies", "exact_select_preferred", "exact_select_first", "exact_select_search", "EXACT_SELECT", "EXACT_SELECT_CURVE", "EXACT_SELECT_MIN_PAIRS", "EXACT_SELECT_CURVE_MIN_PAIRS",
           "EXACT_SELECT_PREFERRED_FEATURES", "EXACT_SELECT_FIRST_PAIRS", "EXACT_SELECT_FIRST_FEATURES",
           "EXACT_SELECT_MANY_PAIRS", "EXACT_SELECT_MANY_MIN_QUERIES", "EXACT_SELECT_TINY_TERMS", "exact_select_tiny"]

# False turns the path off, and EXACT_SELECT_CURVE its curve order (same-run A/B timings)
EXACT_SELECT = True
EXACT_SELECT_CURVE = True
# metrics searched here: those whose dense path it replaces (the float64-ordered L2 scores)
_METRICS = ("euclidean", "sqeuclidean")
# Searches go straight here (before any dense-or-fused choice; see exact_select_first) at up to
# EXACT_SELECT_FIRST_FEATURES features when they have at most EXACT_SELECT_FIRST_PAIRS pairs, and at
# up to EXACT_SELECT_PREFERRED_FEATURES features up to EXACT_SELECT_MANY_PAIRS pairs when they have
# at least EXACT_SELECT_MANY_MIN_QUERIES queries (enough programs to fill the GPU without splitting
# the references), and at up to the kernel's EXACT_SELECT_MAX_FEATURES when tiny (EXACT_SELECT_TINY_TERMS
# below). Of the larger searches that run dense (tie-heavy ones the fused kernel cannot
# certify, distinct rows of duplicated data), those at up to EXACT_SELECT_PREFERRED_FEATURES
# features run here too. The kernel's pace is set by its insertions and its float64 terms; the
# matrix-product paths win at many features. From EXACT_SELECT_CURVE_MIN_PAIRS pairs the rows go
# in curve order (about a third less time on shuttle, smtp, skin, http; at mammography's 1.25e8
# pairs the order's own cost was more than it saved). BENCHMARKS.md, "Design measurements quoted
# in the code".
EXACT_SELECT_MIN_PAIRS = 1 << 26
EXACT_SELECT_CURVE_MIN_PAIRS = 1 << 28
EXACT_SELECT_PREFERRED_FEATURES = 32
EXACT_SELECT_FIRST_PAIRS = 1 << 26
EXACT_SELECT_FIRST_FEATURES = 32
EXACT_SELECT_MANY_PAIRS = 1 << 32
EXACT_SELECT_MANY_MIN_QUERIES = 4096
# Searches of at most this many float64 terms (pairs x features) go here first at any number of
# features the kernel takes, ahead of the matrix-product path: the kernel's one launch against a
# product, a selection and their operands' preparation (~30 launches), which set the time of a
# search this small (WPBC's all-kNN, 198 x 33 features; BENCHMARKS.md)
EXACT_SELECT_TINY_TERMS = 1 << 24


def feature_major(ref: torch.Tensor, query: torch.Tensor, device: torch.device | None = None):
    """``(RT, QT)``: the references' and queries' (d, n) copies on ``device`` (default: where they are); ``QT is RT`` for a self-search."""
    def transposed(X):
        XT = X.T.contiguous()
        return XT if device is None or same_device(XT.device, device) else copy_to_device(XT, device)

    RT = transposed(ref)
    return RT, RT if query is ref else transposed(query)


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


def exact_select_tiny(n_query: int, n_ref: int, d: int) -> bool:
    """Whether a search is small enough to run here ahead of the matrix products (see ``EXACT_SELECT_TINY_TERMS``)."""
    return n_query * n_ref * d <= EXACT_SELECT_TINY_TERMS and d <= EXACT_SELECT_MAX_FEATURES


def _exact_select_small(n_query: int, n_ref: int, d: int) -> bool:
    """The small shapes :func:`exact_select_first` takes (and :func:`~._small_search.search_small` runs): few pairs at few
    features, or tiny at up to the kernel's features."""
    return (n_query * n_ref <= EXACT_SELECT_FIRST_PAIRS and d <= EXACT_SELECT_FIRST_FEATURES) or exact_select_tiny(n_query, n_ref, d)


def exact_select_first(n_query: int, n_ref: int, d: int) -> bool:
    """Whether a search of this shape runs here before any other choice (see ``EXACT_SELECT_FIRST_PAIRS``)."""
    return (_exact_select_small(n_query, n_ref, d)
            or (n_query * n_ref <= EXACT_SELECT_MANY_PAIRS and d <= EXACT_SELECT_PREFERRED_FEATURES
                and n_query >= EXACT_SELECT_MANY_MIN_QUERIES))


def exact_select_search(ref: torch.Tensor, query: torch.Tensor, k: int, metric: Metric, *, exclude_self: bool,
                        budget_bytes: int, stats: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Top k of every query as ``(float64 scores, indices)`` by (float64 score, index), as ``dense_search`` returns them.

    ``exclude_self``: query i is reference i (the queries are the references or
    a prefix of them). ``k`` must not exceed the references available to a row.
    """
    n_query = query.shape[0]
    if n_query == 0:
        return (torch.empty((0, k), dtype=torch.float64, device=ref.device),
                torch.empty((0, k), dtype=torch.int64, device=ref.device))
    # rows along a space-filling curve: each query block starts its scan among its neighbours
    curve = EXACT_SELECT_CURVE and n_query * ref.shape[0] >= EXACT_SELECT_CURVE_MIN_PAIRS
    order = _CurveOrder(ref) if curve else None
    if order is None:
        ref_ids = query_ids = anchors = None
        RT, QT = feature_major(ref, query)
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
    # the kernel's lists (float64 + int64 per slot, one list per reference split) and the sort's copies
    per_row = 64 * max(2, 1 << (k - 1).bit_length()) * 16
    rows = max(1, min(n_query, budget_bytes // per_row))
    if order is None and rows >= n_query:  # one block: the kernel's lists are the result
        keys_out, index_out = exact_select(QT, RT, k, metric.name, exclude_self=exclude_self)
    else:
        keys_out = torch.empty((n_query, k), dtype=torch.float64, device=ref.device)
        index_out = torch.empty((n_query, k), dtype=torch.int64, device=ref.device)
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
