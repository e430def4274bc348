"""The KD-tree path of the host kNN search: candidates from SciPy's ``cKDTree``, certified or completed by a ball query.

The tree only proposes candidates; their order is that of the exact scores
(:mod:`._host_exact`). A row is accepted when everything the tree left out is
clearly beyond its K-th score (the tree's float64 distances are within a
relative ``TOLERANCE`` of the exact scores); other rows collect every reference
within their K-th distance times ``1 + TOLERANCE``.
"""

from __future__ import annotations

import math

import numpy as np

from ...core.distance import Metric
from ._host_exact import _by_width, _exact_dense, _exact_pairs, _feature_major, _kth_scores, _Results, _rows_per_block
from ._host_threads import _PARALLEL_MIN_TREE, _run_blocks, _split

_TREE_P = {"euclidean": 2.0, "sqeuclidean": 2.0, "manhattan": 1.0, "chebyshev": math.inf}  # cKDTree's p

# Relative distance between the tree's float64 distances and exact float64 scores that
# is never exceeded: both sum at most a few hundred non-negative float64 terms, each
# within a few units of 2^-53 of its value, so they agree to ~1e-13 at 64 features.
TOLERANCE = 1e-9


def _score_of(metric: Metric, dist: np.ndarray) -> np.ndarray:
    return dist * dist if metric.name in ("euclidean", "sqeuclidean") else dist


def _dist_of(metric: Metric, score: np.ndarray) -> np.ndarray:
    return np.sqrt(score) if metric.name in ("euclidean", "sqeuclidean") else score


# Neighbours asked of the tree beyond the K needed: rows whose K-th score ties the last
# returned one take a ball query, so a small margin suffices on continuous data.
TREE_MARGIN = 2


def _tree_search(U, Qu, K, metric, refs, budget_bytes, counters, workers, tree=None):
    """Candidates from the tree, certified or completed by a ball query, then exact scores."""
    from scipy.spatial import cKDTree

    n_u, d = U.shape
    p = _TREE_P[metric.name]
    if tree is None:  # sliding-midpoint splits: faster to build, as fast to query here
        tree = cKDTree(U, leafsize=16, balanced_tree=False, compact_nodes=False, copy_data=False)
    m = min(n_u, K + TREE_MARGIN)
    UT = _feature_major(metric, U)
    n_q = Qu.shape[0]
    results = _Results(n_q, K, refs)
    low, high = 1.0 - TOLERANCE, 1.0 + TOLERANCE

    def work(span):
        q0, q1 = span
        Q = Qu[q0:q1]
        b = q1 - q0
        dist, idx = tree.query(Q, k=m, p=p, workers=1)
        ts = _score_of(metric, dist.reshape(b, m))  # the tree's scores (ascending), each within TOLERANCE of the exact one
        idx = idx.reshape(b, m).astype(np.int64)
        kth = _kth_scores(ts, idx, K, refs, ascending=True)  # the tree returns each row by ascending distance
        if m >= n_u:
            certified = np.ones(b, dtype=bool)
        else:  # what the tree left out scores at least its last returned score
            certified = ts[:, -1] * low > kth * high
        # the exact K-th score is at most kth * high: candidates that may score up to it
        limit = kth * (high * high / low)
        cert = np.flatnonzero(certified)
        for part, width in _by_width((ts[cert] <= limit[cert, None]).sum(1), cert):
            cand = np.sort(idx[part, :width], axis=1)
            results.dense(q0 + part, cand, _exact_dense(metric, Q[part], U, UT, cand, budget_bytes), ascending=True)
        open_rows = np.flatnonzero(~certified)
        if open_rows.size:
            radius = _dist_of(metric, limit[open_rows]) * high
            found = tree.query_ball_point(Q[open_rows], r=radius, p=p, workers=1, return_sorted=False)
            lengths = np.fromiter((len(f) for f in found), dtype=np.int64, count=len(found))
            uids = np.fromiter((j for f in found for j in f), dtype=np.int64, count=int(lengths.sum()))
            rows = np.repeat(q0 + open_rows, lengths)
            results.pairs(rows, uids, _exact_pairs(metric, Qu, U, UT, rows, uids, budget_bytes))
        return open_rows.size

    block = _rows_per_block(budget_bytes, 8 * m * 8, n_q)
    parallel = workers if n_q * m >= _PARALLEL_MIN_TREE else 1
    counters["rows_tie_complete"] += sum(_run_blocks(work, _split(n_q, block, parallel, 1024), parallel))
    return results.result()
