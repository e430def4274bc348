"""Exact radius neighbours: every reference within a distance of each query.

A reference is a neighbour of a query when its float64 exact distance (the
metric's :meth:`~gpumine.core.distance.Metric.exact_scores` of the float64 rows,
as the kNN engine orders by, turned into a distance in float64) is at most
``radius``. Rows come back sorted by (distance, index), so every device and
chunking gives the same lists.

On the host at up to 16 features a KD-tree (SciPy's ``cKDTree``) proposes the
references within ``radius`` times ``1 + 1e-9`` (its own float64 distances are
within that of the exact ones) and the exact distances decide. Elsewhere the
exact distances of every (query, reference) pair are computed in tiles that fit
``budget_bytes``: brute force, O(queries x references x features) in float64.
On a GPU, float32 L2 and manhattan searches at up to 16 features first keep the
references whose float32 exact score (the kNN engine's ``scores_within`` kernel,
no score tile in memory) is within the radius widened by that score's error
bound, and the float64 distances of those alone decide: the same neighbours,
with float32 work for every pair and float64 work for the candidates only.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..core.distance import Metric
from ..core.tiles import iter_row_chunks

__all__ = ["radius_search", "RADIUS_METRICS"]

RADIUS_METRICS = ("euclidean", "sqeuclidean", "manhattan", "chebyshev", "minkowski", "cosine")
_TREE_P = {"euclidean": 2.0, "sqeuclidean": 2.0, "manhattan": 1.0, "chebyshev": math.inf}
_TREE_MAX_FEATURES = 16
_TREE_SLACK = 1e-9


def radius_search(ref: torch.Tensor, query: torch.Tensor, radius: float, metric: Metric, *, exclude_self: bool,
                  device: torch.device, budget_bytes: int):
    """``(indptr, indices, distances)`` of every reference within ``radius`` of each query (CSR rows).

    ``exclude_self``: ``query`` is ``ref`` and reference i is not a neighbour of
    query i (its duplicates are). Distances are float64 (the caller rounds
    them to the data's dtype); each row is ordered by (distance, index).
    """
    if metric.name not in RADIUS_METRICS:
        raise ValueError(f"radius queries support the metrics {RADIUS_METRICS}; got {metric.name!r}")
    radius = float(radius)
    if not radius >= 0:  # NaN fails too; infinity (every reference) is allowed, as in scikit-learn
        raise ValueError(f"radius must be a number >= 0; got {radius!r}")
    n_query = query.shape[0]
    if n_query == 0 or ref.shape[0] == 0:
        return np.zeros(n_query + 1, np.int64), np.zeros(0, np.int64), np.zeros(0)
    on_host = device.type == "cpu" and ref.device.type == "cpu"
    ordered = False  # rows by (query, distance, index)
    if on_host and metric.name in _TREE_P and ref.shape[1] <= _TREE_MAX_FEATURES:
        rows, cols = _tree_candidates(ref, query, radius, metric)
        dist = _pair_distances(ref, query, torch.from_numpy(rows), torch.from_numpy(cols), metric, budget_bytes).numpy()
        keep = dist <= radius
        rows, cols, dist = rows[keep], cols[keep], dist[keep]
    elif _prefilter_applies(ref, query, radius, metric, device):
        rows, cols, dist = _prefiltered(ref, query, radius, metric, device, budget_bytes)  # already ordered
        ordered = True
    else:
        rows, cols, dist = _tiled(ref, query, radius, metric, device, budget_bytes)
    if exclude_self:
        own = rows == cols
        rows, cols, dist = rows[~own], cols[~own], dist[~own]
    if not ordered:
        order = np.lexsort((cols, dist, rows))
        rows, cols, dist = rows[order], cols[order], dist[order]
    indptr = np.zeros(n_query + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n_query), out=indptr[1:])
    return indptr, cols, dist


def _distance64(metric: Metric, scores: torch.Tensor) -> torch.Tensor:
    return metric.to_distance(scores.to(torch.float64))


def _tree_candidates(ref, query, radius, metric):
    from scipy.spatial import cKDTree

    R = ref.detach().numpy().astype(np.float64, copy=False)
    Q = R if query is ref else query.detach().numpy().astype(np.float64, copy=False)
    # the tree compares its own float64 distances: squared euclidean radii become distances
    reach = math.sqrt(radius) if metric.name == "sqeuclidean" else radius
    reach = reach * (1 + _TREE_SLACK) + 1e-300
    found = cKDTree(R).query_ball_point(Q, reach, p=_TREE_P[metric.name], workers=-1)
    counts = np.fromiter((len(f) for f in found), dtype=np.int64, count=len(found))
    rows = np.repeat(np.arange(len(found)), counts)
    cols = np.fromiter((j for f in found for j in f), dtype=np.int64, count=int(counts.sum()))
    return rows, cols


def _pair_distances(ref, query, rows, cols, metric, budget_bytes):
    """float64 exact distances of the pairs (``query[rows[i]]``, ``ref[cols[i]]``), a tensor beside ``rows``."""
    out = torch.empty(rows.shape[0], dtype=torch.float64, device=rows.device)
    step = max(1, budget_bytes // (8 * 4 * (ref.shape[1] + 16)))
    for s0 in range(0, rows.shape[0], step):
        r, c = rows[s0 : s0 + step], cols[s0 : s0 + step]
        scores = metric.exact_scores(query[r].to(torch.float64), ref[c].to(torch.float64).unsqueeze(1))[:, 0]
        out[s0 : s0 + step] = _distance64(metric, scores)
    return out


# Prefilter (see the module docstring): float32 data of magnitude at most PREFILTER_MAX_MAGNITUDE
# (its squared differences cannot overflow float32), first PREFILTER_CAP slots per query
PREFILTER_METRICS = ("euclidean", "sqeuclidean", "manhattan")
PREFILTER_MAX_FEATURES = 16
PREFILTER_MAX_MAGNITUDE = 2.0**40
PREFILTER_CAP = 64


def _prefilter_applies(ref, query, radius, metric, device) -> bool:
    from .engine import exact_tile_available

    return (device.type == "cuda" and exact_tile_available() and metric.name in PREFILTER_METRICS
            and ref.dtype == torch.float32 and query.dtype == torch.float32 and 0 < ref.shape[1] <= PREFILTER_MAX_FEATURES
            and math.isfinite(radius) and _largest(ref, query) <= PREFILTER_MAX_MAGNITUDE)


def _largest(ref, query) -> float:
    return max(float(t.abs().max()) if t.numel() else 0.0 for t in ((ref,) if query is ref else (ref, query)))


def _score_bound(radius: float, metric: Metric, d: int) -> float:
    """A float32 score that every pair within ``radius`` (by float64 distance) scores at most.

    The float32 exact score is a sum of ``d`` rounded terms (each a rounded
    difference, squared for L2): relative error at most ``(2 d + 4) 2^-24``,
    plus underflow's absolute error below the smallest normal float32 per term.
    """
    score = radius * radius if metric.name == "euclidean" else radius
    bound = score * (1 + (2 * d + 8) * 2.0**-24) + d * 2.0**-126
    wide = torch.tensor(bound, dtype=torch.float32)
    if float(wide) < bound:  # round up
        wide = torch.nextafter(wide, torch.tensor(math.inf))
    return float(wide)


def _prefiltered(ref, query, radius, metric, device, budget_bytes):
    """``(rows, cols, float64 distances)`` within ``radius``: float32 scores propose, float64 decides."""
    from .engine import scores_within

    same = query is ref
    R = ref.to(device)
    Q = R if same else query.to(device)
    RT = R.T.contiguous()
    QT = RT if same else Q.T.contiguous()
    d, n_query = QT.shape
    bound = _score_bound(radius, metric, d)
    # the kernel's lists (float32 + int32 per slot) of a block of queries, and the wider second pass
    q_rows = max(1, budget_bytes // (8 * PREFILTER_CAP * 4))
    found_rows, found_cols = [], []
    for q0 in range(0, n_query, q_rows):
        q1 = min(n_query, q0 + q_rows)
        threshold = torch.full((q1 - q0,), bound, dtype=torch.float32, device=device)
        _, index, count = scores_within(QT[:, q0:q1], RT, threshold, PREFILTER_CAP, metric.name)
        full = (count > PREFILTER_CAP).nonzero().squeeze(1)
        qi, slot = (index >= 0).nonzero(as_tuple=True)
        keep = count[qi] <= PREFILTER_CAP  # rows over the cap are listed again, whole, below
        found_rows.append(qi[keep] + q0)
        found_cols.append(index[qi[keep], slot[keep]].long())
        if full.numel():
            cap = int(count[full].max())
            step = max(1, budget_bytes // (8 * cap * 4))
            for f0 in range(0, full.numel(), step):
                part = full[f0 : f0 + step]
                _, index, _ = scores_within(QT[:, q0 + part], RT, threshold[part], cap, metric.name)
                pi, slot = (index >= 0).nonzero(as_tuple=True)
                found_rows.append(part[pi] + q0)
                found_cols.append(index[pi, slot].long())
    rows = torch.cat(found_rows) if found_rows else torch.zeros(0, dtype=torch.int64, device=device)
    cols = torch.cat(found_cols) if found_cols else torch.zeros(0, dtype=torch.int64, device=device)
    # the float64 exact distances of the candidates decide (as _tiled's of every pair would)
    dist = _pair_distances(R, Q, rows, cols, metric, budget_bytes)
    keep = dist <= radius
    rows, cols, dist = rows[keep], cols[keep], dist[keep]
    # ordered by (query, distance, index) here: stable sorts by the last key first, as np.lexsort
    for key in (1, 2, 0):
        order = torch.sort((rows, cols, dist)[key], stable=True).indices
        rows, cols, dist = rows[order], cols[order], dist[order]
    return rows.cpu().numpy(), cols.cpu().numpy(), dist.cpu().numpy()


def _tiled(ref, query, radius, metric, device, budget_bytes):
    d = ref.shape[1]
    per_pair = 8 * (d + 20)
    ref_rows = max(1, min(ref.shape[0], budget_bytes // (per_pair * 64)))
    query_rows = max(1, budget_bytes // (per_pair * ref_rows))
    found_rows, found_cols, found_dist = [], [], []
    for r0, R in iter_row_chunks(ref, ref_rows, device):
        R64 = R.to(torch.float64)
        for q0, Q in iter_row_chunks(query, query_rows, device):
            dist = _distance64(metric, metric.exact_scores(Q.to(torch.float64), R64.unsqueeze(0)))
            qi, ri = (dist <= radius).nonzero(as_tuple=True)
            found_rows.append((qi + q0).cpu().numpy())
            found_cols.append((ri + r0).cpu().numpy())
            found_dist.append(dist[qi, ri].cpu().numpy())
    if not found_rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    return (np.concatenate(found_rows).astype(np.int64), np.concatenate(found_cols).astype(np.int64),
            np.concatenate(found_dist))
