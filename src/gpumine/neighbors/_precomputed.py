"""Neighbours from explicit distance blocks: ``metric="precomputed"`` and the minkowski forms the engine lacks.

The kNN engine (:mod:`gpumine.neighbors.engine._search`) searches feature rows under
its own metrics. Three inputs bypass it and come here, all exact:

* a dense precomputed distance matrix (``metric="precomputed"``): each row's
  k smallest entries, equal values ordered by the lower column index;
* a sparse precomputed graph (CSR/CSC/COO/LIL, as scikit-learn): only the
  stored entries (explicit zeros included) are candidates;
* minkowski with ``0 < p < 1`` (a semi-metric) or with weights ``w``:
  ``rdist = sum_j w_j |x_j - y_j| ** p`` accumulated in float64 feature by
  feature (scikit-learn's order; NumPy's ``pow`` on the host, torch's on a GPU,
  each within a unit in the last place of the other and of scikit-learn's),
  ranked by ``rdist`` and reported as ``rdist ** (1 / p)``. Brute force:
  O(queries x references x features).

scikit-learn's other metrics (:mod:`gpumine.neighbors._metrics_extra`) score
their blocks there and select them here, with the same tie rule.

Blocks of query rows are sized to ``budget_bytes``. Training-set queries
(``X=None``) exclude each point's own column, not its duplicates (zeros
elsewhere in its row), the rule of the kNN engine. On a sparse graph this
needs k stored entries besides the point's own; scikit-learn instead takes the
first k + 1 stored entries and drops the point, or the first entry when the
point is not stored (then it asks for k + 1 entries and loses a true
neighbour). Results equal scikit-learn's wherever its tie order and this rule
agree: on distinct distances, and with fewer than k + 1 zero-distance
duplicates.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import torch

from ..utils._validation import check_array

__all__ = [
    "check_precomputed",
    "check_precomputed_query",
    "MinkowskiForm",
    "blocked_kneighbors",
    "blocked_radius",
    "graph_kneighbors",
    "graph_radius",
]

_GRAPH_FORMATS = ("csr", "csc", "coo", "lil")


# -- validation -----------------------------------------------------------------------
def _check_graph(X, name: str):
    if X.format not in _GRAPH_FORMATS:
        raise TypeError(f"Sparse matrix in {X.format!r} format is not supported due to its handling of explicit "
                        "zeros; pass it as CSR (X.tocsr() keeps explicit zeros only from CSR/CSC/COO/LIL)")
    graph = X.tocsr(copy=True) if X.format != "csr" else X.copy()
    if graph.dtype.kind not in "biuf":
        raise ValueError(f"{name} has dtype {graph.dtype}, which is not numeric; pass distances")
    if graph.dtype not in (np.float32, np.float64):
        graph = graph.astype(np.float64)
    if not np.isfinite(graph.data).all():
        raise ValueError(f"{name} contains NaN or infinity; a precomputed distance graph needs finite distances")
    if (graph.data < 0).any():
        raise ValueError("Negative values in data passed to precomputed distance matrix.")
    graph.sum_duplicates()
    return graph


def check_precomputed(X, *, name: str = "X"):
    """A fitted precomputed matrix: a square non-negative float tensor, or a sorted CSR graph when sparse."""
    if sp.issparse(X):
        graph = _check_graph(X, name)
        if graph.shape[0] != graph.shape[1]:
            raise ValueError(f"Precomputed matrix must be square. Input is a {graph.shape[0]}x{graph.shape[1]} matrix.")
        return graph
    D = check_array(X, name=name)
    if bool((D < 0).any()):
        raise ValueError(f"Negative values in data passed to {name}.")
    if D.shape[0] != D.shape[1]:
        raise ValueError(f"Precomputed matrix must be square. Input is a {D.shape[0]}x{D.shape[1]} matrix.")
    return D


def check_precomputed_query(X, n_indexed: int, dtype: torch.dtype, *, name: str = "X", estimator: str = "the estimator",
                            allow_empty: bool = True):
    """Query distances ``(n_queries, n_indexed)`` to the fitted points: a tensor, or a CSR graph when sparse."""
    if sp.issparse(X):
        graph = _check_graph(X, name)
    else:
        graph = check_array(X, name=name, dtype=dtype, allow_empty=allow_empty)
        if bool((graph < 0).any()):
            raise ValueError(f"Negative values in data passed to {name}.")
    if graph.shape[1] != n_indexed:
        raise ValueError(f"{name} has {graph.shape[1]} features, but {estimator} is expecting {n_indexed} features as "
                         f"input (its distances to the {n_indexed} fitted points). Precomputed metric requires shape "
                         f"(n_queries, n_indexed). Got ({graph.shape[0]}, {graph.shape[1]}) for {n_indexed} indexed.")
    return graph


# -- minkowski semi-metrics and weights ----------------------------------------------------
class MinkowskiForm:
    """``sum_j w_j |x_j - y_j| ** p`` (``w`` None: all ones) and its distance ``rdist ** (1 / p)``."""

    def __init__(self, p: float, w: np.ndarray | None):
        self.p = float(p)
        self.w = None if w is None else np.asarray(w, dtype=np.float64)

    def rdist(self, Q: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
        """float64 ``(len(Q), len(R))`` reduced distances, summed over features in order."""
        if Q.device.type == "cpu" and R.device.type == "cpu":
            q = Q.detach().numpy().astype(np.float64, copy=False)
            r = R.detach().numpy().astype(np.float64, copy=False)
            acc = np.zeros((q.shape[0], r.shape[0]))
            term = np.empty_like(acc)
            for j in range(q.shape[1]):
                np.subtract(q[:, j, None], r[None, :, j], out=term)
                np.abs(term, out=term)
                np.power(term, self.p, out=term)
                if self.w is not None:
                    term *= self.w[j]
                acc += term
            return torch.from_numpy(acc)
        return self._rdist_torch(Q, R)

    def _rdist_torch(self, Q: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
        """The same sums with torch operations (on a GPU)."""
        q, r = Q.to(torch.float64), R.to(device=Q.device, dtype=torch.float64)
        w = None if self.w is None else torch.as_tensor(self.w, device=q.device)
        acc = torch.zeros((q.shape[0], r.shape[0]), dtype=torch.float64, device=q.device)
        for j in range(q.shape[1]):
            term = (q[:, j, None] - r[None, :, j]).abs_().pow_(self.p)
            acc += term if w is None else term * w[j]
        return acc

    def to_distance(self, rdist: torch.Tensor) -> torch.Tensor:
        if rdist.device.type == "cpu":
            return torch.from_numpy(np.power(rdist.numpy(), 1.0 / self.p))
        return rdist.pow(1.0 / self.p)


# -- selection from dense blocks ------------------------------------------------------
def _block_rows(n_cols: int, budget_bytes: int, per_entry: int) -> int:
    return max(1, int(budget_bytes // max(1, per_entry * max(1, n_cols))))


def select_smallest(block: torch.Tensor, k: int, own: torch.Tensor | None = None):
    """The k smallest entries of each row of ``block`` and their columns, ordered by (value, column).

    ``own``: for each row, a column that is not a candidate (the point itself).
    Exact: the k-th value is found by ``topk``; every smaller entry is kept and
    the entries equal to it are taken by ascending column. NaN entries (an
    undefined distance, e.g. correlation of a constant row) rank after every
    number, by column among themselves, as NumPy's sort places NaN; they are
    returned as NaN.
    """
    b, n = block.shape
    if b == 0:
        return block.new_zeros((0, k)), torch.zeros((0, k), dtype=torch.int64, device=block.device)
    nan = torch.isnan(block)
    if bool(nan.any()):
        # rare (undefined distances): a full stable sort by value, then by tier (numbers, NaN, the point itself)
        tier = nan.to(torch.int8)
        if own is not None:
            tier[torch.arange(b, device=block.device), own] = 2
        order = torch.sort(block.masked_fill(nan, math.inf), dim=1, stable=True).indices
        order = order.gather(1, torch.sort(tier.gather(1, order), dim=1, stable=True).indices)
        cols = order[:, :k]
        return block.gather(1, cols), cols
    valid = None
    if own is not None:
        valid = torch.ones_like(block, dtype=torch.bool)
        valid[torch.arange(b, device=block.device), own] = False
        block = block.masked_fill(~valid, math.inf)
    kth = torch.topk(block, k, dim=1, largest=False, sorted=True).values[:, -1:]
    less = block < kth
    equal = block == kth
    if valid is not None:
        equal &= valid
    room = k - less.sum(1, keepdim=True)
    keep = less | (equal & (torch.cumsum(equal, 1) <= room))
    cols = keep.nonzero()[:, 1].view(b, k)  # row-major: ascending columns
    vals = block.gather(1, cols)
    order = torch.sort(vals, dim=1, stable=True).indices
    return vals.gather(1, order), cols.gather(1, order)


def blocked_kneighbors(n_query: int, n_ref: int, k: int, block_fn, *, exclude_self: bool, budget_bytes: int,
                       to_distance=None, entry_bytes: int = 0):
    """k nearest of each query from ``block_fn(start, stop)`` (the (rows, n_ref) ranking values).

    Returns ``(values, indices)`` tensors; ``to_distance`` maps the ranked values to the reported ones.
    ``entry_bytes``: bytes ``block_fn`` itself holds per (query, reference) entry, beyond the selection's.
    """
    rows = _block_rows(n_ref, budget_bytes, 8 + 8 + 8 + 3 + entry_bytes)
    dists, indices = [], []
    for start in range(0, n_query, rows):
        stop = min(n_query, start + rows)
        block = block_fn(start, stop)
        own = torch.arange(start, stop, device=block.device) if exclude_self else None
        vals, cols = select_smallest(block, k, own)
        dists.append(vals if to_distance is None else to_distance(vals))
        indices.append(cols)
    if not dists:
        return torch.zeros((0, k), dtype=torch.float64), torch.zeros((0, k), dtype=torch.int64)
    return torch.cat(dists), torch.cat(indices)


def blocked_radius(n_query: int, n_ref: int, radius: float, block_fn, *, exclude_self: bool, budget_bytes: int,
                   to_distance=None, entry_bytes: int = 0):
    """CSR ``(indptr, indices, distances)`` of the entries ``<= radius`` of each query row, ordered by (distance, index).

    ``block_fn(start, stop)`` gives the (rows, n_ref) distances (or ranking values
    that ``to_distance`` maps to distances, compared with ``radius`` after it); ``entry_bytes`` as in
    :func:`blocked_kneighbors`. NaN distances are never within the radius.
    """
    rows = _block_rows(n_ref, budget_bytes, 8 + 8 + 2 + entry_bytes)
    found_rows, found_cols, found_dist = [], [], []
    for start in range(0, n_query, rows):
        stop = min(n_query, start + rows)
        block = block_fn(start, stop)
        dist = block if to_distance is None else to_distance(block)
        hit = dist <= radius
        if exclude_self:
            hit[torch.arange(stop - start, device=hit.device), torch.arange(start, stop, device=hit.device)] = False
        qi, ri = hit.nonzero(as_tuple=True)
        found_rows.append((qi + start).cpu().numpy())
        found_cols.append(ri.cpu().numpy())
        found_dist.append(dist[qi, ri].cpu().numpy())
    return _csr_rows(n_query, found_rows, found_cols, found_dist)


def _csr_rows(n_query, found_rows, found_cols, found_dist):
    if found_rows:
        rows = np.concatenate(found_rows).astype(np.int64)
        cols = np.concatenate(found_cols).astype(np.int64)
        dist = np.concatenate(found_dist)
    else:
        rows = cols = np.zeros(0, np.int64)
        dist = np.zeros(0)
    order = np.lexsort((cols, dist, rows))
    indptr = np.zeros(n_query + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n_query), out=indptr[1:])
    return indptr, cols[order], dist[order]


# -- sparse precomputed graphs ---------------------------------------------------------------
def _graph_entries(graph: sp.csr_matrix, exclude_self: bool):
    rows = np.repeat(np.arange(graph.shape[0]), np.diff(graph.indptr))
    cols = graph.indices.astype(np.int64)
    data = graph.data
    if exclude_self:
        keep = rows != cols
        rows, cols, data = rows[keep], cols[keep], data[keep]
    return rows, cols, data


def graph_kneighbors(graph: sp.csr_matrix, k: int, *, exclude_self: bool):
    """k nearest of each row among its stored entries, ordered by (distance, column); NumPy arrays."""
    rows, cols, data = _graph_entries(graph, exclude_self)
    n = graph.shape[0]
    counts = np.bincount(rows, minlength=n)
    if n and counts.min() < k:
        raise ValueError(f"{k} neighbors per samples are required, but some samples have only {counts.min()} "
                         "neighbors in precomputed graph matrix. Decrease number of neighbors used or recompute "
                         "the graph with more neighbors.")
    order = np.lexsort((cols, data, rows))
    starts = np.zeros(n, np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    take = (starts[:, None] + np.arange(k)[None, :]).ravel()
    chosen = order[take]
    return data[chosen].reshape(n, k), cols[chosen].reshape(n, k)


def graph_radius(graph: sp.csr_matrix, radius: float, *, exclude_self: bool):
    """CSR rows of the stored entries ``<= radius``, ordered by (distance, column)."""
    rows, cols, data = _graph_entries(graph, exclude_self)
    hit = data <= radius
    return _csr_rows(graph.shape[0], [rows[hit]], [cols[hit]], [data[hit]])
