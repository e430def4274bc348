"""LOF and top-n distance-based outliers from the distributed all-kNN.

The all-kNN runs on the cluster (:func:`gpumine.distributed.kneighbors`); the
(n x k) neighbour lists come back to the client, which computes what one process
computes from them: LOF (k-distances, lrd, LOF, with the same duplicates rule)
and the brute-force outlier weights (canonical float64 distances to the k
nearest, summed by the fixed tree), so both equal the single-process results.
The lists and the data are gathered on the client: suited to data that fits one
host's memory while its all-kNN needs several GPUs. The distributed SolvingSet
(candidates broadcast each round, bounds tightened on every node) is not there yet.
"""

from __future__ import annotations

import warnings

import numpy as np

from ._knn import _as_numpy, kneighbors

__all__ = ["LocalOutlierFactor", "top_n_outliers"]


def top_n_outliers(X, n_outliers: int = 10, k: int = 5, *, include_self: bool = False, metric: str = "euclidean", p=None,
                   mode: str = "auto", client=None, device="auto", working_memory=None):
    """The top-n distance-based outliers by brute force on a Dask cluster (as ``method="brute_force"``).

    Returns the same :class:`~gpumine.outliers.DistanceOutliers` (indices, weights, threshold, every
    point's weight in ``scores``) as :func:`gpumine.outliers.top_n_outliers` in one process.
    """
    import torch

    from .._validation import check_array
    from ..outliers._distance_based import DistanceOutliers, check_n_outliers, effective_k, top_n_from_weights
    from ..outliers._weights import PairSpace, resolve_metric

    data = _as_numpy(X)
    Xt = check_array(data, name="X")
    n = Xt.shape[0]
    if n < 2:
        raise ValueError(f"X has n_samples = {n}; distance-based outliers need at least 2 points")
    metric_obj = resolve_metric(metric, p)
    k_other = effective_k(k, n, bool(include_self))
    n_outliers = check_n_outliers(n_outliers, n)
    _, index = kneighbors(X, None, k_other, metric=metric, p=p, mode=mode, client=client, device=device,
                          working_memory=working_memory)
    index = torch.from_numpy(np.asarray(index))
    space = PairSpace(Xt, metric_obj, tiles=False)
    scores = space.canonical(torch.arange(n)[:, None], index)
    weights = space.weight(torch.sort(scores, dim=1).values)
    idx, w = top_n_from_weights(weights, n_outliers)
    return DistanceOutliers(
        indices=idx.numpy(), weights=w.numpy(), solving_set=np.arange(n), scores=weights.numpy(),
        scores_exact=np.ones(n, dtype=bool), threshold=float(w[-1]), method="brute_force", n_neighbors=int(k),
        include_self=bool(include_self), metric=metric_obj.name, n_samples=n, n_candidates=None, iterations=1,
        distances_computed=n * (n - 1) // 2, distance_fraction=1.0, seconds=float("nan"), device=f"dask ({device})",
        stats={},
    )


class LocalOutlierFactor:
    """LOF of every training point on a Dask cluster: :class:`gpumine.outliers.LocalOutlierFactor`'s scores.

    ``fit(X)`` sets ``negative_outlier_factor_``, ``n_neighbors_``, ``offset_`` and
    ``n_duplicate_points_`` as the single-process estimator does (outlier detection
    on the training set; novelty scoring is not offered here).
    """

    def __init__(self, n_neighbors=20, *, contamination="auto", duplicates="distinct", metric="euclidean", p=None,
                 mode="auto", client=None, device="auto", working_memory=None):
        self.n_neighbors = n_neighbors
        self.contamination = contamination
        self.duplicates = duplicates
        self.metric = metric
        self.p = p
        self.mode = mode
        self.client = client
        self.device = device
        self.working_memory = working_memory

    def fit(self, X, y=None):
        """All-kNN on the cluster, then k-distances, lrd and LOF from the lists."""
        import torch

        from .._validation import check_array
        from ..core.distance import get_metric
        from ..outliers._lof import check_duplicates_rule, check_lof_metric, lof_from_knn, warn_duplicates

        check_duplicates_rule(self.duplicates)
        metric_obj = get_metric(self.metric, self.p)
        check_lof_metric(metric_obj)
        Xt = check_array(_as_numpy(X), name="X")
        n = Xt.shape[0]
        if n < 2:
            raise ValueError(f"LocalOutlierFactor needs at least 2 samples (n_samples = {n})")
        if self.n_neighbors > n:
            warnings.warn(f"n_neighbors ({self.n_neighbors}) is greater than the total number of samples ({n}). "
                          "n_neighbors will be set to (n_samples - 1) for estimation.", stacklevel=2)
        self.n_neighbors_ = max(1, min(int(self.n_neighbors), n - 1))
        dist, index = kneighbors(X, None, self.n_neighbors_, metric=self.metric, p=self.p, mode=self.mode,
                                 client=self.client, device=self.device, working_memory=self.working_memory)
        fit = lof_from_knn(torch.from_numpy(np.asarray(dist)), torch.from_numpy(np.asarray(index)), Xt, metric_obj,
                           duplicates=self.duplicates, device=torch.device("cpu"))
        warn_duplicates(fit, stacklevel=2)
        nof = -fit.lof.to(Xt.dtype)
        self.n_duplicate_points_ = fit.n_duplicate_points
        self.negative_outlier_factor_ = nof.numpy()
        self.offset_ = -1.5 if self.contamination == "auto" else float(
            np.percentile(self.negative_outlier_factor_, 100.0 * self.contamination))
        return self

    def fit_predict(self, X, y=None):
        """-1 for outliers (``negative_outlier_factor_ < offset_``), +1 otherwise."""
        self.fit(X)
        return np.where(self.negative_outlier_factor_ < self.offset_, -1, 1)
