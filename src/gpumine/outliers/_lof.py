"""Local Outlier Factor as plain tensor functions over exact kNN results.

Breunig et al. (2000), with k = ``n_neighbors``, N_k(p) the k nearest
neighbours of p (ties to the lower index, as every kNN result in gpumine):

* k-distance(o)          = distance from o to its k-th nearest neighbour
* reach-dist_k(p, o)     = max(d(p, o), k-distance(o))
* lrd(p)                 = 1 / mean_{o in N_k(p)} reach-dist_k(p, o)
* LOF(p)                 = mean_{o in N_k(p)} lrd(o) / lrd(p)

(The LOF_GPU seed's Eq. 3 writes lrd(p) inside the sum; it is lrd(o).)

Everything after the kNN search is O(n k) work on the device that holds the
kNN result; it runs in float64 whatever the input precision (it costs nothing
next to the search and keeps float32 results within float32 rounding of the
exact LOF). Nothing here builds an n x n matrix.

Duplicates
----------
A point with at least k exact duplicates has k-distance 0, and when its
neighbours are duplicates too every reach-distance is 0: lrd = 1/0 = inf, and
the LOF of every point that has such a point as a neighbour is inf as well.
Two rules are offered (``duplicates=``):

``"distinct"`` (default)
    Where the k-distance of a point is 0, the reach-distances to it use its
    *k-distinct-distance* instead: the distance from its location to the k-th
    nearest *other distinct location* in the data (Breunig et al. 2000, §7,
    suggest k-distinct-distances for exactly this case). A group of >= k+1
    identical points then behaves like one dense point: its members get
    LOF = 1, and a point beside the group is compared with the spacing of the
    group's distinct neighbours, so its score is finite and means what LOF
    means. Where no point has k-distance 0 nothing changes: the scores are the
    textbook LOF (scikit-learn's up to its 1e-10 guard, below). A warning says
    how many points were affected. Only when the data hold a single distinct
    location is there no scale at all: those points keep k-distance 0, their
    LOF is defined as 1, and a novelty query elsewhere gets LOF = inf.

``"sklearn"``
    scikit-learn's rule: 1e-10 is added to the mean reach-distance, so
    lrd <= 1e10. It is finite, but a point next to a duplicate group gets
    LOF ~ 1e10 x (its distance to the group), which drowns every other score
    (scikit-learn warns "Duplicate values are leading to incorrect results"
    when some score is below -1e7; so does this rule). Use it to reproduce
    scikit-learn bit for bit on data with duplicates.

On data without duplicates the two rules differ only by that 1e-10 in the
mean reach-distance: a relative difference of about 1e-10 / (mean
reach-distance) in lrd, which cancels to first order in the LOF ratio.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from ..core.distance import Metric
from ..neighbors.engine import search_validated

__all__ = [
    "DUPLICATE_RULES",
    "LOFFit",
    "check_lof_metric",
    "k_distances",
    "local_reachability_density",
    "local_outlier_factor",
    "lof_from_knn",
    "lof_fit",
    "lof_score",
    "DuplicatesWarning",
]

DUPLICATE_RULES = ("distinct", "sklearn")
_SKLEARN_EPS = 1e-10


class DuplicatesWarning(UserWarning):
    """Points with at least ``n_neighbors`` exact duplicates were found (infinite lrd without a rule)."""


def check_lof_metric(metric: Metric) -> Metric:
    """LOF needs a distance (>= 0, 0 for identical points); reject similarities."""
    if metric.name == "inner_product":
        raise ValueError(
            "metric='inner_product' is a similarity, not a distance, and LOF's reach-distances "
            "need distances; use metric='cosine' (1 - cosine similarity) or 'euclidean'"
        )
    return metric


def check_duplicates_rule(duplicates) -> str:
    if duplicates not in DUPLICATE_RULES:
        raise ValueError(f"duplicates must be one of {DUPLICATE_RULES}; got {duplicates!r}")
    return duplicates


@dataclass
class LOFFit:
    """LOF of a reference set, as tensors on one device.

    Attributes
    ----------
    distances, indices : (n, k) tensors
        The exact kNN result (self excluded), distances in float64.
    k_distance : (n,) float64
        The k-distance of each point as used in reach-distances (after the
        duplicates rule: k-distinct-distance where the k-distance was 0).
    lrd : (n,) float64
        Local reachability densities.
    lof : (n,) float64
        Local outlier factors (positive; larger is more outlying).
    n_duplicate_points : int
        Points whose k-distance was 0 (at least k exact duplicates).
    """

    distances: torch.Tensor
    indices: torch.Tensor
    k_distance: torch.Tensor
    lrd: torch.Tensor
    lof: torch.Tensor
    n_duplicate_points: int
    duplicates: str = "distinct"

    @property
    def n_neighbors(self) -> int:
        return self.indices.shape[1]


def _k_distinct_distance(
    ref: torch.Tensor,
    rows: torch.Tensor,
    k: int,
    metric: Metric,
    *,
    device: torch.device,
    budget_bytes: int,
    backend: str = "torch",
) -> torch.Tensor:
    """Distance from each point ``ref[rows]`` to the k-th nearest other distinct location in ``ref``.

    Searches the distinct rows of ``ref`` only (``torch.unique``), so a group of
    a million identical points costs one search row. Returns float64 on
    ``device``; 0 where ``ref`` holds no other location at a positive distance,
    and the farthest positive distance where fewer than k exist.
    """
    data = ref.to(device)
    distinct, inverse = torch.unique(data, dim=0, return_inverse=True)
    locations, back = torch.unique(inverse[rows.to(device)], return_inverse=True)
    n_distinct = distinct.shape[0]
    queries = distinct[locations]
    out = torch.zeros(locations.shape[0], dtype=torch.float64, device=device)
    pending = torch.arange(locations.shape[0], device=device)
    # identical rows are one distinct row, so one extra neighbour covers the location
    # itself; metrics with zero distances between different rows (cosine: parallel
    # vectors) may need more, found by doubling
    want = min(k + 1, n_distinct)
    # the doubled counts may pass the Triton kernel's: "auto" picks the kernel per search
    backend = "auto" if backend == "triton" else backend
    while pending.numel():
        found, _ = search_validated(distinct, queries[pending], want, metric, exclude_self=False, device=device,
                                    budget_bytes=budget_bytes, result_device=device, backend=backend, verbose=0)
        dist = found.to(torch.float64)
        positive = dist > 0
        n_positive = positive.sum(1)
        enough = n_positive >= k
        exhausted = want >= n_distinct
        done = enough | exhausted
        # the k-th positive distance (the list is ascending, zeros first), or the farthest one
        n_zero = want - n_positive
        col = torch.where(enough, n_zero + k - 1, torch.full_like(n_zero, want - 1))
        value = dist.gather(1, col[:, None]).squeeze(1)
        value = torch.where(n_positive > 0, value, torch.zeros_like(value))
        out[pending[done]] = value[done]
        pending = pending[~done]
        want = min(2 * want, n_distinct)
    return out[back]


def k_distances(
    dist: torch.Tensor,
    ref: torch.Tensor | None = None,
    metric: Metric | None = None,
    *,
    duplicates: str = "distinct",
    device: torch.device | None = None,
    budget_bytes: int = 256 * 2**20,
    backend: str = "torch",
) -> tuple[torch.Tensor, int]:
    """k-distances from an all-kNN distance array ``dist`` (n, k), with the duplicates rule.

    Returns ``(k_distance, n_zero)``: the float64 k-distances to use in
    reach-distances, and how many points had k-distance 0. With
    ``duplicates="distinct"`` those points get their k-distinct-distance
    (needs ``ref`` and ``metric``; ``backend`` runs that search); with
    ``"sklearn"`` they stay 0.

    Examples
    --------
    >>> d = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [3.0, 3.0]])
    >>> ref = torch.tensor([[0.0], [0.0], [0.0], [3.0]])
    >>> from gpumine.core.distance import get_metric
    >>> k_distances(d, ref, get_metric("euclidean"))
    (tensor([3., 3., 3., 3.], dtype=torch.float64), 3)
    """
    kdist = dist[:, -1].to(torch.float64)
    zero = kdist == 0
    n_zero = int(zero.sum())
    if n_zero and duplicates == "distinct":
        if ref is None or metric is None:
            raise ValueError("duplicates='distinct' needs the reference rows and the metric")
        rows = zero.nonzero().squeeze(1)
        dev = kdist.device if device is None else device
        floor = _k_distinct_distance(ref, rows, dist.shape[1], metric, device=dev, budget_bytes=budget_bytes,
                                     backend=backend)
        kdist = kdist.clone()
        kdist[rows.to(kdist.device)] = floor.to(kdist.device)
    return kdist, n_zero


def local_reachability_density(dist: torch.Tensor, indices: torch.Tensor, k_distance: torch.Tensor, *, duplicates: str = "distinct") -> torch.Tensor:
    """lrd of each query row: 1 / mean over its neighbours o of max(d(p, o), k-distance(o)).

    ``dist``/``indices`` are the queries' kNN among the reference points,
    ``k_distance`` the references' (float64). ``duplicates="sklearn"`` adds
    scikit-learn's 1e-10 to the mean.
    """
    reach = torch.maximum(dist.to(torch.float64), k_distance[indices])
    mean = reach.mean(1)
    if duplicates == "sklearn":
        mean = mean + _SKLEARN_EPS
    return torch.reciprocal(mean)


def local_outlier_factor(lrd_query: torch.Tensor, indices: torch.Tensor, lrd_ref: torch.Tensor) -> torch.Tensor:
    """LOF of each query row: mean lrd of its neighbours over its own lrd.

    inf / inf (a point and all its neighbours at one location with no
    distinct location anywhere) is defined as 1.

    Examples
    --------
    >>> local_outlier_factor(torch.tensor([1.0, 0.5]), torch.tensor([[1], [0]]), torch.tensor([1.0, 0.5]))
    tensor([0.5000, 2.0000])
    """
    ratio = lrd_ref[indices].mean(1) / lrd_query
    return torch.nan_to_num(ratio, nan=1.0, posinf=float("inf"), neginf=float("-inf"))


def lof_from_knn(
    dist: torch.Tensor,
    indices: torch.Tensor,
    ref: torch.Tensor | None = None,
    metric: Metric | None = None,
    *,
    duplicates: str = "distinct",
    device: torch.device | None = None,
    budget_bytes: int = 256 * 2**20,
    backend: str = "torch",
) -> LOFFit:
    """LOF of every point from its all-kNN result (self excluded), distances as true distances.

    ``ref`` and ``metric`` are needed by ``duplicates="distinct"`` only when
    some k-distance is 0.
    """
    check_duplicates_rule(duplicates)
    dist = dist.to(torch.float64)
    kdist, n_zero = k_distances(dist, ref, metric, duplicates=duplicates, device=device, budget_bytes=budget_bytes,
                                backend=backend)
    lrd = local_reachability_density(dist, indices, kdist, duplicates=duplicates)
    lof = local_outlier_factor(lrd, indices, lrd)
    return LOFFit(dist, indices, kdist, lrd, lof, n_zero, duplicates)


def lof_fit(
    X: torch.Tensor,
    n_neighbors: int,
    metric: Metric,
    *,
    device: torch.device,
    budget_bytes: int,
    duplicates: str = "distinct",
    verbose=None,
    warn: bool = True,
    backend: str = "torch",
    working_memory=None,
    replay: bool = False,
) -> LOFFit:
    """LOF of every row of ``X`` among the others, on ``device`` (the exact kNN engine does the search).

    ``X`` may live in host memory; it streams to the device in tiles when it
    does not fit there. Results stay on ``device``. ``replay``: a repeated small
    search on a GPU replays a captured graph as ``kneighbors`` does (same results
    bit for bit); ``working_memory`` is the setting ``budget_bytes`` came from.
    """
    check_lof_metric(metric)
    check_duplicates_rule(duplicates)
    # distances straight from the engine: squared scores of large data may overflow the data's dtype
    dist, indices = search_validated(X, X, n_neighbors, metric, exclude_self=True, device=device,
                                     budget_bytes=budget_bytes, result_device=device, backend=backend, graphs=replay,
                                     working_memory=working_memory, verbose=verbose)
    fit = lof_from_knn(dist, indices, X, metric, duplicates=duplicates, device=device, budget_bytes=budget_bytes,
                       backend=backend)
    if warn:
        warn_duplicates(fit, stacklevel=3)
    return fit


def warn_duplicates(fit: LOFFit, stacklevel: int = 2) -> None:
    """Warn when the duplicates rule was needed (or, for the sklearn rule, when scores blew up)."""
    if fit.duplicates == "sklearn":
        if fit.lof.numel() and float(fit.lof.max()) > 1e7:
            warnings.warn(
                "Duplicate values are leading to incorrect results. Increase the number of neighbors "
                "for more accurate results (or use duplicates='distinct').",
                DuplicatesWarning, stacklevel=stacklevel,
            )
        return
    if fit.n_duplicate_points:
        warnings.warn(
            f"{fit.n_duplicate_points} point(s) have at least n_neighbors={fit.n_neighbors} exact "
            "duplicates (k-distance 0, so lrd would be infinite); their reach-distances use the "
            "k-distinct-distance instead (duplicates='distinct'). Scores stay finite; see the "
            "LocalOutlierFactor docs. duplicates='sklearn' reproduces scikit-learn instead.",
            DuplicatesWarning, stacklevel=stacklevel,
        )


def lof_score(
    query_dist: torch.Tensor,
    query_indices: torch.Tensor,
    fit: LOFFit,
    *,
    lrd_ref: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Novelty LOF of queries against a fitted reference set (queries are not neighbours of anything).

    ``query_dist``/``query_indices`` are the queries' k nearest reference points
    (the same k as the fit). ``lrd_ref`` overrides the references' lrd (the
    streaming detector gives its virtual points a synthetic one). Returns
    ``(lof, lrd)`` of the queries, float64.
    """
    lrd_ref = fit.lrd if lrd_ref is None else lrd_ref
    lrd = local_reachability_density(query_dist, query_indices, fit.k_distance, duplicates=fit.duplicates)
    return local_outlier_factor(lrd, query_indices, lrd_ref), lrd
