"""LOF and top-n distance-based outliers on a Dask cluster.

LOF and the brute-force outlier weights come from the distributed all-kNN
(:func:`gpumine.distributed.kneighbors`): the (n x k) neighbour lists come back
to the client, which computes what one process computes from them (k-distances,
lrd, LOF with the same duplicates rule; canonical float64 distances to the k
nearest, summed by the fixed tree), so both equal the single-process results.
The lists and the data are gathered on the client: suited to data that fits one
host's memory while its all-kNN needs several GPUs.

The top-n outliers by SolvingSet (the default) run distributed as Angiulli,
Basta, Lodi & Sartori's DistributedSolvingSet: rows sharded over the workers
(scattered once), candidates broadcast each iteration, bounds tightened on every
worker, exact weights merged on the client (see
:mod:`gpumine.distributed._solving_set`). Nothing of size n x k gathers on the
client.
"""

from __future__ import annotations

import warnings

import numpy as np

from ._knn import _as_numpy, _client, _kneighbors_arrays

__all__ = ["LocalOutlierFactor", "top_n_outliers"]


def top_n_outliers(X, n_outliers: int = 10, k: int = 5, *, method: str = "solving_set", n_candidates="auto",
                   include_self: bool = False, metric: str = "euclidean", p=None, random_state=0, mode: str = "auto",
                   client=None, device="auto", backend=None, working_memory=None, verbose=None):
    """The top-n distance-based outliers on a Dask cluster: :func:`gpumine.outliers.top_n_outliers`'s answer.

    Parameters
    ----------
    X : NumPy array, pandas DataFrame, torch tensor or dask array (chunked by rows)
        A dask array's row chunks are the shards (computed where the scheduler
        puts them); other inputs are validated on the client and split into one
        row block per worker.
    n_outliers, k, include_self, metric, p
        As :func:`gpumine.outliers.top_n_outliers`.
    method : {"auto", "solving_set", "brute_force"}, default "solving_set"
        ``"solving_set"``: the distributed SolvingSet (rows stay on the
        workers; candidates are broadcast each iteration; see
        :mod:`gpumine.distributed._solving_set`). ``"brute_force"``: the
        distributed all-kNN (``mode`` as :func:`gpumine.distributed.kneighbors`),
        then every weight on the client. Both give the same outliers, weights
        and threshold as one process, whatever the number of workers or chunks.
        ``"auto"`` is ``"solving_set"`` here.
    n_candidates : int or "auto", default "auto"
        Candidates per SolvingSet iteration; ``"auto"`` follows one process's
        table for its tile form on the workers' device
        (:func:`gpumine.outliers._solving_set.auto_candidates`).
    random_state : int, None or NumPy generator, default 0
        Seeds the first candidates, as in one process (same seed, same solving set).
    mode : {"auto", "shard", "replicate"}
        Brute force's kNN layout.
    client : distributed.Client, optional
        Default: the current client.
    device, backend, working_memory
        As in one process, resolved on each worker (``"auto"``: its GPU when it
        has one). SolvingSet runs torch tiles (``backend="triton"`` is refused,
        as one process refuses it for the tile form).
    verbose : int, optional
        A progress bar of the settled points on the client.

    Returns
    -------
    DistanceOutliers
        NumPy arrays whatever the input kind. With SolvingSet, ``solving_set``
        and the iteration count equal one process's tile form for the same
        seed; ``scores`` of solving-set points that could not enter the top n
        are upper bounds below ``threshold`` that may differ from one
        process's (see :mod:`gpumine.distributed._solving_set`).

    Examples
    --------
    >>> import numpy as np, distributed  # doctest: +SKIP
    >>> with distributed.Client(processes=False) as client:  # doctest: +SKIP
    ...     res = top_n_outliers(np.array([[0.0], [0.1], [0.2], [0.3], [5.0]]), n_outliers=1, k=2, device="cpu")
    ...     res.indices, res.weights.round(2)
    (array([4]), array([9.5]))
    """
    from ..outliers._distance_based import check_method

    method = check_method(method)
    if method in ("auto", "solving_set"):  # data spread over a cluster is past auto's brute-force sizes
        from ._solving_set import solving_set_outliers

        return solving_set_outliers(X, n_outliers, k, include_self=include_self, metric=metric, p=p,
                                    n_candidates=n_candidates, random_state=random_state, client=client,
                                    device=device, working_memory=working_memory, backend=backend, verbose=verbose)
    return _brute_force(X, n_outliers, k, include_self=include_self, metric=metric, p=p, mode=mode, client=client,
                        device=device, backend=backend, working_memory=working_memory)


def _brute_force(X, n_outliers, k, *, include_self, metric, p, mode, client, device, backend, working_memory):
    """All-kNN on the cluster, then the weights on the client (``method="brute_force"``)."""
    import torch

    from ..utils._validation import check_array
    from ..outliers._distance_based import DistanceOutliers, check_n_outliers, effective_k, top_n_from_weights
    from ..outliers._weights import PairSpace, resolve_metric

    client = _client(client)
    data = _as_numpy(X, client)
    Xt = check_array(data, name="X")
    n = Xt.shape[0]
    if n < 2:
        raise ValueError(f"X has n_samples = {n}; distance-based outliers need at least 2 points")
    metric_obj = resolve_metric(metric, p)
    k_other = effective_k(k, n, bool(include_self))
    n_outliers = check_n_outliers(n_outliers, n)
    # NumPy results whatever X's kind (a dask array's would stay on the workers)
    _, index = _kneighbors_arrays(X, None, k_other, metric=metric, p=p, mode=mode, client=client, device=device,
                                  working_memory=working_memory, batch_rows=None, backend=backend, precision="exact")
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

        from ..utils._validation import check_array
        from ..core.distance import get_metric
        from ..outliers._lof import check_duplicates_rule, check_lof_metric, lof_from_knn, warn_duplicates

        check_duplicates_rule(self.duplicates)
        metric_obj = get_metric(self.metric, self.p)
        check_lof_metric(metric_obj)
        Xt = check_array(_as_numpy(X, _client(self.client)), name="X")
        n = Xt.shape[0]
        if n < 2:
            raise ValueError(f"LocalOutlierFactor needs at least 2 samples (n_samples = {n})")
        if self.n_neighbors > n:
            warnings.warn(f"n_neighbors ({self.n_neighbors}) is greater than the total number of samples ({n}). "
                          "n_neighbors will be set to (n_samples - 1) for estimation.", stacklevel=2)
        self.n_neighbors_ = max(1, min(int(self.n_neighbors), n - 1))
        dist, index = _kneighbors_arrays(X, None, self.n_neighbors_, metric=self.metric, p=self.p, mode=self.mode,
                                         client=self.client, device=self.device, working_memory=self.working_memory,
                                         batch_rows=None, backend=None, precision="exact")
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
