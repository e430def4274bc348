"""Radius queries and sparse neighbour graphs: the functional API (as ``sklearn.neighbors``).

The engine's metrics (euclidean, sqeuclidean, manhattan, chebyshev, minkowski
with ``p >= 1``, cosine; inner product for the kNN graph) on dense input are
searched here directly. Everything else the estimators take -- scikit-learn's
other metrics with their ``metric_params`` (seuclidean, mahalanobis, haversine,
correlation, canberra, braycurtis, hamming, nan_euclidean, the boolean ones,
callables, DistanceMetric objects), minkowski with ``p < 1`` or weights ``w``,
``metric="precomputed"`` and scipy.sparse input -- goes through a
:class:`~gpumine.neighbors.NearestNeighbors` fitted on ``X``, as scikit-learn's
own functions do, so the functions and the estimators give the same answers.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from ..utils._validation import check_array
from ..config import resolve_device, working_memory_bytes
from ..core.distance import get_metric, is_engine_metric
from ._radius import radius_search

__all__ = ["radius_neighbors", "radius_neighbors_graph", "kneighbors_graph", "csr_to_lists"]


def _check_mode(mode: str) -> None:
    if mode not in ("connectivity", "distance"):
        raise ValueError(f'Unsupported mode, must be one of "connectivity", or "distance" but got "{mode}" instead: '
                         "mode must be 'connectivity' (ones) or 'distance'")


def _include_self(include_self, mode: str) -> bool:
    """scikit-learn's ``include_self``: a bool, or ``"auto"`` (True for connectivity, False for distance)."""
    if isinstance(include_self, str) and include_self == "auto":
        return mode == "connectivity"
    if not isinstance(include_self, (bool, np.bool_)):
        raise ValueError(f"include_self must be True, False or 'auto'; got {include_self!r}")
    return bool(include_self)


def _on_engine(metric, p, metric_params, *arrays) -> bool:
    """Whether the engine searches this directly: one of its metrics by name, ``p >= 1``, no metric_params, dense data."""
    if not is_engine_metric(metric) or metric_params or any(sp.issparse(a) for a in arrays):
        return False
    if metric.lower() == "minkowski" and p is not None:
        return isinstance(p, (int, float, np.integer, np.floating)) and not isinstance(p, bool) and float(p) >= 1
    return True


def _estimator(X, metric, p, metric_params, device, working_memory, **params):
    """A :class:`NearestNeighbors` fitted on ``X``: the search the estimators run, for every other metric and input."""
    from ._estimators import NearestNeighbors  # scikit-learn's import cost only when needed

    return NearestNeighbors(algorithm="brute", metric=metric, p=p, metric_params=metric_params, device=device,
                            working_memory=working_memory, **params).fit(X)


def _prepare(X_ref, X_query, metric, p, ref_name: str = "X_ref"):
    ref = check_array(X_ref, name=ref_name)
    if X_query is None:
        query = ref
    else:
        query = check_array(X_query, name="X_query", allow_empty=True)
        if query.shape[1] != ref.shape[1]:
            raise ValueError(f"X_query has {query.shape[1]} features but X_ref has {ref.shape[1]}; "
                             "queries need the same columns as the reference set")
    dtype = torch.float64 if torch.float64 in (ref.dtype, query.dtype) else torch.float32
    same = query is ref
    ref = ref.to(dtype)
    return ref, ref if same else query.to(dtype), get_metric(metric, p)


def csr_to_lists(indptr, indices, distances):
    """scikit-learn's radius output: object arrays of per-row distance and index arrays."""
    n = len(indptr) - 1
    dist_rows = np.empty(n, dtype=object)
    index_rows = np.empty(n, dtype=object)
    for i in range(n):
        dist_rows[i] = distances[indptr[i] : indptr[i + 1]]
        index_rows[i] = indices[indptr[i] : indptr[i + 1]]
    return dist_rows, index_rows


def radius_neighbors(X_ref, X_query=None, radius: float = 1.0, *, metric="euclidean", p=None, metric_params=None,
                     device=None, working_memory=None, return_distance: bool = True, sort_results: bool = False,
                     n_jobs=None):
    """Every reference within ``radius`` of each query, exactly.

    A reference is a neighbour when its float64 exact distance is at most
    ``radius`` (see :mod:`gpumine.neighbors._radius`). ``X_query=None`` queries
    the references themselves, each point excluded from its own list (its
    duplicates are not), as scikit-learn's ``radius_neighbors(X=None)``.
    The same as ``NearestNeighbors(radius=radius, metric=metric, p=p,
    metric_params=metric_params).fit(X_ref).radius_neighbors(X_query)``:
    ``metric`` is any metric the estimators take (see
    :func:`gpumine.neighbors.kneighbors`), ``metric_params`` its parameters
    (``{"V": ...}`` for seuclidean, ``{"VI": ...}`` or ``{"V": ...}`` for
    mahalanobis, ``{"w": ...}`` for weighted minkowski, keyword arguments of a
    callable). ``n_jobs`` is accepted without effect.

    Returns
    -------
    distances, indices : object arrays of length n_queries
        Row i holds the distances (the data's dtype) and indices of query i's
        neighbours, ordered by (distance, index) whatever ``sort_results`` says
        (accepted for scikit-learn compatibility).

    Examples
    --------
    >>> import numpy as np
    >>> d, i = radius_neighbors(np.array([[0.0], [1.0], [3.0]]), np.array([[0.9]]), radius=1.0, device="cpu")
    >>> i[0], d[0]
    (array([1, 0]), array([0.1, 0.9]))
    """
    if _on_engine(metric, p, metric_params, X_ref, X_query):
        ref, query, metric_obj = _prepare(X_ref, X_query, metric, p)
        dev = resolve_device(device)
        indptr, indices, dist = radius_search(ref, query, radius, metric_obj, exclude_self=X_query is None, device=dev,
                                              budget_bytes=working_memory_bytes(working_memory, dev))
        dist = dist.astype(np.float32 if ref.dtype == torch.float32 else np.float64)
    else:
        nn = _estimator(X_ref, metric, p, metric_params, device, working_memory)
        indptr, indices, dist, _ = nn._radius_query(X_query, radius)
        dist = dist.astype(nn._out_dtype)
    dist_rows, index_rows = csr_to_lists(indptr, indices, dist)
    return (dist_rows, index_rows) if return_distance else index_rows


def radius_neighbors_graph(X, radius: float, mode: str = "connectivity", *, metric="euclidean", p=None,
                           metric_params=None, include_self=False, n_jobs=None, device=None, working_memory=None):
    """Sparse (n, n) graph of the points within ``radius`` of each other (as scikit-learn's function).

    ``include_self=False`` leaves each point out of its own row (True keeps it,
    ``"auto"`` keeps it for connectivity only); ``mode`` is ``"connectivity"``
    (ones) or ``"distance"``. ``metric``, ``p`` and ``metric_params`` are those
    of :func:`radius_neighbors`; ``n_jobs`` is accepted without effect.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0, 1, 1], [0, 1, 0], [1, 0, 0]])
    >>> radius_neighbors_graph(X, 0.34, metric="hamming", device="cpu").toarray()
    array([[0., 1., 0.],
           [1., 0., 0.],
           [0., 0., 0.]])
    """
    _check_mode(mode)
    include_self = _include_self(include_self, mode)
    if _on_engine(metric, p, metric_params, X):
        ref, _, metric_obj = _prepare(X, None, metric, p, ref_name="X")
        dev = resolve_device(device)
        indptr, indices, dist = radius_search(ref, ref, radius, metric_obj, exclude_self=not include_self, device=dev,
                                              budget_bytes=working_memory_bytes(working_memory, dev))
        n = ref.shape[0]
    else:
        nn = _estimator(X, metric, p, metric_params, device, working_memory)
        indptr, indices, dist, _ = nn._radius_query(X if include_self else None, radius)
        n = nn.n_samples_fit_
    data = np.ones(len(indices)) if mode == "connectivity" else dist
    return sp.csr_matrix((data, indices, indptr), shape=(n, n))


def kneighbors_graph(X, n_neighbors: int, mode: str = "connectivity", *, metric="euclidean", p=None, metric_params=None,
                     include_self=False, n_jobs=None, device=None, working_memory=None):
    """Sparse (n, n) graph of each point's ``n_neighbors`` nearest points (as scikit-learn's function).

    ``include_self=False`` leaves each point out of its own neighbours (as
    ``kneighbors(X=None)``); True queries the points as new queries, so each
    counts as its own neighbour at distance 0 (``"auto"``: True for
    connectivity, False for distance, as scikit-learn). ``metric``, ``p`` and
    ``metric_params`` are those of :func:`radius_neighbors` (and
    ``"inner_product"``); ``n_jobs`` is accepted without effect. Pipelines that
    take a precomputed sparse kNN graph (Isomap, TSNE, UMAP, HDBSCAN) accept
    the result.

    Examples
    --------
    >>> import numpy as np
    >>> kneighbors_graph(np.array([[0.0], [1.0], [3.0]]), 1, device="cpu").toarray()
    array([[0., 1., 0.],
           [1., 0., 0.],
           [0., 1., 0.]])
    """
    from ._api import kneighbors

    _check_mode(mode)
    include_self = _include_self(include_self, mode)
    if _on_engine(metric, p, metric_params, X):
        check_array(X, name="X")  # errors name this function's parameter, not kneighbors' X_ref
        dist, index = kneighbors(X, X if include_self else None, n_neighbors, metric=metric, p=p, device=device,
                                 working_memory=working_memory)
        dist, index = _host(dist), _host(index)
        n, k = index.shape
        data = np.ones(index.size) if mode == "connectivity" else dist.astype(np.float64).ravel()
        return sp.csr_matrix((data, index.ravel(), np.arange(0, n * k + 1, k)), shape=(n, n))
    nn = _estimator(X, metric, p, metric_params, device, working_memory, n_neighbors=n_neighbors)
    return nn.kneighbors_graph(X if include_self else None, n_neighbors, mode=mode)


def _host(values) -> np.ndarray:
    """A result of :func:`kneighbors` (NumPy, or a tensor for tensor input) as a host array."""
    return values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
