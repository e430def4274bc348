"""The k nearest neighbours by *canonical* distance: engine search, canonical re-rank, certificate.

Outlier weights sum canonical float64 distances (:mod:`gpumine.outliers._weights`). The kNN
engine ranks by its own exact per-pair scores, in the data's dtype (float32 mostly), which can
order two near-equal distances the other way round: summing the canonical distances of the
engine's k nearest then gives a weight slightly *above* the canonical one (for example, cosine
distances between parallel integer vectors are 0 in float64 and about 1e-7 in float32). So the
engine searches ``k + margin`` neighbours (at least 2 more: :func:`first_search_count`), their canonical scores are sorted, and a row is
*certified* when every reference left out is canonically no closer than the k-th kept one:

    lower(largest kept engine score) >= k-th smallest canonical score,

where ``lower`` bounds the canonical score from below given an engine score
(:func:`canonical_lower_bound`). Equal canonical values are interchangeable in a weight, so
``>=`` suffices and masses of exact duplicates certify. Rows that fail retry with 128 more
neighbours, then scan every reference in the canonical form. Brute force, both SolvingSet forms and
the solving-set model's predictions thus all give the float64 reference's weights.
"""

from __future__ import annotations

import torch

from ..neighbors.engine import fused_unsupported, search_validated
from ._weights import PairSpace

__all__ = ["canonical_knn", "canonical_lower_bound", "search_backend"]

RETRY_MARGIN = 128  # extra neighbours of a row the first search could not certify
_INF = float("inf")


def search_backend(backend: str, X: torch.Tensor, space: PairSpace, k: int, n_ref: int) -> str:
    """The engine backend for one search: an explicit ``"triton"`` runs on torch where the kernel cannot
    (more candidates than its registers hold, float64 data), as ``"auto"`` would."""
    if backend == "triton" and fused_unsupported(space.metric, X.dtype, k, n_ref) is not None:
        return "torch"
    return backend


#: Candidates the engine's fused kernel keeps beyond a search's count. It keeps a power of two
#: of candidates above the count; with only one more, masses of tied distances (integer data)
#: fail its certificate: brute force on ADBench cover retried 122,205 rows at k = 5 with 8 kept
#: for a search of 7, and ran 3-4x slower than with this slack, at k = 5 and at k = 50
#: (BENCHMARKS.md, "Design measurements quoted in the code").
KERNEL_SLACK = 8


def first_search_count(k: int) -> int:
    """Neighbours the first search asks for when ``k`` are needed: at least ``k + 2`` (room for the
    certificate) and as many as fit under the fused kernel's power of two with :data:`KERNEL_SLACK` left."""
    # the kernel keeps the smallest power of two above the count: a count from kept / 2 on keeps
    # ``kept``, and up to kept - KERNEL_SLACK - 1 leaves the slack
    kept = 1 << max(k + 2 + KERNEL_SLACK, 2 * KERNEL_SLACK + 1).bit_length()
    return max(k + 2, kept // 2)


def canonical_lower_bound(space: PairSpace, scores: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A float64 lower bound on the canonical score of a pair whose engine score is ``scores``.

    The engine's exact score (in ``dtype``) and the canonical one are two roundings of the same
    value: for the difference-based metrics within a relative ``(d + 2) u`` each (non-negative
    terms), for cosine within an absolute ``(2 d + 5) u``; the factor 4 leaves room, as
    :meth:`~gpumine.core.distance.Metric.bounds` does. Minkowski's engine score is the
    distance, its canonical score the p-th power.
    """
    u = torch.finfo(dtype).eps / 2
    d = space.d
    s = scores.to(torch.float64)
    if space.name == "cosine":
        return s - 8.0 * (d + 4) * u
    if space.name == "minkowski":
        p = float(space.metric.p)
        return (s * (1.0 - 4.0 * (d + 4) * u * max(1.0, p))).clamp(min=0.0).pow(p)
    return s * (1.0 - 4.0 * (d + 4) * u)


def _canonical_rows(space: PairSpace, nb: torch.Tensor, ids, queries) -> torch.Tensor:
    """Canonical scores of each query against its references ``nb`` (q, c): +inf for padding and for itself."""
    safe = nb.clamp(min=0)
    if queries is not None:
        scores = space.canonical_to_rows(queries, safe)
    else:
        scores = space.canonical(ids[:, None], safe)
    invalid = nb < 0
    if ids is not None:
        invalid |= nb == ids[:, None]
    return scores.masked_fill(invalid, _INF)


def _scan(space: PairSpace, k: int, ids, queries, budget_bytes: int) -> torch.Tensor:
    """The k smallest canonical scores over every reference (rows the certificate could not settle)."""
    q = ids.numel() if queries is None else queries.shape[0]
    best = torch.full((q, k), _INF, dtype=torch.float64, device=space.device)
    step = max(1, budget_bytes // max(1, 4 * 8 * q))
    for c0 in range(0, space.n, step):
        cols = torch.arange(c0, min(space.n, c0 + step), device=space.device)[None, :].expand(q, -1)
        part = _canonical_rows(space, cols, ids, queries)
        best = torch.sort(torch.cat([best, part], dim=1), dim=1).values[:, :k]
    return best


def canonical_knn(
    X: torch.Tensor,
    space: PairSpace,
    k: int,
    *,
    ids: torch.Tensor | None = None,
    queries: torch.Tensor | None = None,
    device: torch.device,
    budget_bytes: int,
    backend: str,
    verbose=None,
    stats: dict | None = None,
) -> torch.Tensor:
    """(q, k) ascending canonical scores of each query's k nearest references of ``X``.

    ``X`` is the reference data as the engine searches it, ``space`` the same points in float64.
    The queries are, with ``ids=None`` and ``queries=None``, every point of ``X`` (each excluded
    from its own list); with ``ids``, the points at those indices (each excluded from its own
    list); with ``queries`` (rows, any dtype), outside points. ``stats`` receives the engine's
    counters and ``canonical_rows_retried`` / ``canonical_rows_scanned``.
    """
    n = X.shape[0]
    all_points = ids is None and queries is None
    if all_points:
        ids = torch.arange(n, device=device)
    others = n - 1 if queries is None else n  # references each query may take
    if not 1 <= k <= others:
        raise ValueError(f"k={k} must be between 1 and the {others} references each query may take")
    if queries is None:
        Q = X if all_points else X.index_select(0, ids)
    else:
        Q = queries.to(device=device, dtype=X.dtype)
        queries = queries.to(device)
    q = Q.shape[0]
    if q == 0:
        return torch.empty((0, k), dtype=torch.float64, device=device)
    engine_stats: dict = {}
    retried = scanned = 0
    result = torch.empty((q, k), dtype=torch.float64, device=device)
    rows = torch.arange(q, device=device)
    for attempt in range(2):
        whole = all_points and rows.numel() == q  # all-kNN: the engine excludes each point itself
        extra = 1 if queries is None and not whole else 0  # a subset of the points drops itself
        if attempt == 0:
            search = first_search_count(k + extra)
        else:
            search = k + extra + RETRY_MARGIN
        width = min(search - extra, others)
        search = min(n, width + extra)
        sub_ids = None if ids is None else ids.index_select(0, rows)
        sub_queries = None if queries is None else queries.index_select(0, rows).to(device)
        scores, nb = search_validated(X, Q if rows.numel() == q else Q.index_select(0, rows), search, space.metric,
                                      exclude_self=whole, device=device, budget_bytes=budget_bytes,
                                      result_device=device, verbose=verbose, as_distance=False,
                                      stats=engine_stats if attempt == 0 else None,
                                      backend=search_backend(backend, X, space, search, n))
        canon = torch.sort(_canonical_rows(space, nb, sub_ids, sub_queries), dim=1).values
        if width >= others:  # every reference was kept
            certified = torch.ones(rows.numel(), dtype=torch.bool, device=device)
        else:
            last = scores[:, -1]
            certified = torch.isfinite(last) & (canonical_lower_bound(space, last, X.dtype) >= canon[:, k - 1])
        done = certified.nonzero().squeeze(1)
        result[rows.index_select(0, done)] = canon.index_select(0, done)[:, :k]
        rows = rows[~certified]
        if not rows.numel():
            break
        if attempt == 0:
            retried += rows.numel()
    if rows.numel():
        scanned = rows.numel()
        sub_ids = None if ids is None else ids.index_select(0, rows)
        sub_queries = None if queries is None else queries.index_select(0, rows).to(device)
        result[rows] = _scan(space, k, sub_ids, sub_queries, budget_bytes)
    if stats is not None:
        stats.update(engine_stats)
        stats["canonical_rows_retried"] = retried
        stats["canonical_rows_scanned"] = scanned
    return result
