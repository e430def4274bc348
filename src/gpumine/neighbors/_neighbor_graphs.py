"""Radius queries and sparse neighbour graphs: the functional API (as ``sklearn.neighbors``)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from .._validation import check_array
from ..config import resolve_device, working_memory_bytes
from ..core.distance import get_metric
from ._radius import radius_search

__all__ = ["radius_neighbors", "radius_neighbors_graph", "kneighbors_graph", "csr_to_lists"]


def _check_mode(mode: str) -> None:
    if mode not in ("connectivity", "distance"):
        raise ValueError(f"mode must be 'connectivity' or 'distance'; got {mode!r}")


def _prepare(X_ref, X_query, metric, p):
    ref = check_array(X_ref, name="X_ref")
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


def radius_neighbors(X_ref, X_query=None, radius: float = 1.0, *, metric: str = "euclidean", p=None, device=None,
                     working_memory=None, return_distance: bool = True, sort_results: bool = False):
    """Every reference within ``radius`` of each query, exactly.

    A reference is a neighbour when its float64 exact distance is at most
    ``radius`` (see :mod:`gpumine.neighbors._radius`). ``X_query=None`` queries
    the references themselves, each point excluded from its own list (its
    duplicates are not), as scikit-learn's ``radius_neighbors(X=None)``.

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
    ref, query, metric_obj = _prepare(X_ref, X_query, metric, p)
    dev = resolve_device(device)
    indptr, indices, dist = radius_search(ref, query, radius, metric_obj, exclude_self=X_query is None, device=dev,
                                          budget_bytes=working_memory_bytes(working_memory, dev))
    dist = dist.astype(np.float32 if ref.dtype == torch.float32 else np.float64)
    dist_rows, index_rows = csr_to_lists(indptr, indices, dist)
    return (dist_rows, index_rows) if return_distance else index_rows


def radius_neighbors_graph(X, radius: float, mode: str = "connectivity", *, metric: str = "euclidean", p=None,
                           include_self: bool = False, device=None, working_memory=None):
    """Sparse (n, n) graph of the points within ``radius`` of each other (as scikit-learn's function).

    ``include_self=False`` leaves each point out of its own row; ``mode`` is
    ``"connectivity"`` (ones) or ``"distance"``.
    """
    _check_mode(mode)
    ref, _, metric_obj = _prepare(X, None, metric, p)
    dev = resolve_device(device)
    indptr, indices, dist = radius_search(ref, ref, radius, metric_obj, exclude_self=not include_self, device=dev,
                                          budget_bytes=working_memory_bytes(working_memory, dev))
    data = np.ones(len(indices)) if mode == "connectivity" else dist
    return sp.csr_matrix((data, indices, indptr), shape=(ref.shape[0], ref.shape[0]))


def kneighbors_graph(X, n_neighbors: int, mode: str = "connectivity", *, metric: str = "euclidean", p=None,
                     include_self: bool = False, device=None, working_memory=None):
    """Sparse (n, n) graph of each point's ``n_neighbors`` nearest points (as scikit-learn's function).

    ``include_self=False`` leaves each point out of its own neighbours (as
    ``kneighbors(X=None)``); True counts it as its own first neighbour at
    distance 0. Pipelines that take a precomputed sparse kNN graph (Isomap,
    TSNE, UMAP, HDBSCAN) accept the result.

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
    dist, index = kneighbors(X, X if include_self else None, n_neighbors, metric=metric, p=p, device=device,
                             working_memory=working_memory)
    dist, index = np.asarray(dist), np.asarray(index)
    n, k = index.shape
    data = np.ones(index.size) if mode == "connectivity" else dist.astype(np.float64).ravel()
    return sp.csr_matrix((data, index.ravel(), np.arange(0, n * k + 1, k)), shape=(n, n))
