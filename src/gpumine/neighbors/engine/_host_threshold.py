"""Small L2 searches on the host: float32 products, one threshold per row, exact scores of the pairs under it.

Where the whole (queries x references) matrix of float32 product scores fits in
the cache (``THRESHOLD_MAX_PAIRS``), one threshold per query row replaces the
candidate machinery of the blocked products path (:mod:`._host_gemm`: sorted
candidates, a certificate per row, bands for the rows it leaves open):

1. ``A = Q @ YT + bias`` in float32 (:class:`._host_gemm._Products`: rows centred
   at the reference mean or a sample median, or exact integers), ``a = offset + A`` within a proved
   bound of each pair's exact score.
2. ``t``: the K-th smallest of the row's minima over groups of eight columns
   (:func:`._host_gemm._smallest`'s first level), or of the row itself where
   :class:`._host_gemm._Products` groups no columns. K groups hold an entry at or
   below it, so at least K product scores are at most ``t``, and the row's K-th
   exact score is at most ``upper(t + offset)``.
3. Every pair whose product score may reach that bound (``reach``) is scored
   exactly (:func:`._host_exact._exact_dense`) and the row's pairs are ordered by
   (exact score, index); a pair above ``reach`` scores above the K-th exactly and
   cannot be among the K, whatever the ties.

Rows under their threshold hold about K to 2K pairs where the values are spread.
A search with a row holding more than ``THRESHOLD_MAX_WIDTH_PER_NEIGHBOUR * K``
(wide ties) or fewer than K (NaN scores), data whose float32 products could
overflow, or a score matrix over the memory budget returns None: the blocked
path then runs it, so the work stays within this pass plus that path's.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from ...core.distance import Metric
from ._host_exact import _exact_dense, _feature_major, _first_of_rows, _padded_positions
from ._host_gemm import _GROUP, _Products

# At most this many (query, padded reference) pairs: the float32 score matrix (4 MiB, kept per thread) and the
# passes over it stay in the cache; larger searches run in row blocks (_host_gemm). Measured
# against the blocked path on ADBench sets and their uniform twins (BENCHMARKS.md, "Design
# measurements quoted in the code")
THRESHOLD_MAX_PAIRS = 1 << 20
# and at most this many neighbours per row (K): past it the threshold from the group minima is loose
# enough that the exact scores under it cost more than the blocked path's sorted candidates
THRESHOLD_MAX_K = 16
# a row with more pairs under its threshold than this many per neighbour leaves the search to the blocked path
THRESHOLD_MAX_WIDTH_PER_NEIGHBOUR = 4


_scratch = threading.local()


def _score_buffers(n: int):
    """This thread's float32 scores and their mask, ``n`` entries each, kept between searches: fresh
    buffers of this size are mapped anew by the allocator on every call, and their page faults cost
    more than the search's passes over them (``THRESHOLD_MAX_PAIRS`` entries and the references'
    padding at most)."""
    scores = getattr(_scratch, "scores", None)
    if scores is None or scores.size < n:
        _scratch.scores = scores = np.empty(n, dtype=np.float32)
        _scratch.mask = np.empty(n, dtype=bool)
    return scores[:n], _scratch.mask[:n]


def threshold_search_applies(metric: Metric, n_q: int, n_u: int, K: int) -> bool:
    """Whether a search of this shape runs :func:`threshold_search` first (L2, the whole score matrix small)."""
    return (metric.name in ("euclidean", "sqeuclidean") and K <= THRESHOLD_MAX_K and K < n_u
            and n_q * n_u <= THRESHOLD_MAX_PAIRS)


def threshold_search(U: np.ndarray, Qu: np.ndarray, K: int, metric: Metric, budget_bytes: int):
    """The first K references of each query row by (exact score, index), or None (see the module docstring).

    ``U``, ``Qu``: float64 rows, every reference row searched as its own. Returns
    (n_q, K) float64 scores and int64 indices, as :func:`._host_exact._direct_search`.
    """
    n_q = Qu.shape[0]
    if n_q == 0:
        return None
    prod = _Products(metric, U, Qu, K)
    Q, offset, scale = prod.query(Qu, False)
    n_pad = prod.n_pad
    if not prod.float32_finite(offset) or 5 * n_q * n_pad > budget_bytes:
        return None  # the blocked path: float64 products, or row blocks within the budget
    A, below = (b.reshape(n_q, n_pad) for b in _score_buffers(n_q * n_pad))
    prod.scores(torch.from_numpy(Q.astype(np.float32)), torch.from_numpy(A))
    M = A
    # one level of groups (more leave a looser threshold): group g holds columns g, g + n_pad / 8, ...; the
    # minimum of the eight column slabs is cheaper than _smallest's strided reduction at this size only
    if prod.levels:
        slabs = A.reshape(n_q, _GROUP, -1)
        M = np.minimum(slabs[:, 0], slabs[:, 1])
        for j in range(2, _GROUP):
            np.minimum(M, slabs[:, j], out=M)
    t = np.partition(M, K - 1, axis=1)[:, K - 1].astype(np.float64)
    g = prod.gamma(False)
    qb = prod.bound_scale(scale, False)
    reach = prod.reach(prod.upper(t + offset, qb, g), qb, g) - offset
    # the least float32 at or above each reach: A <= it exactly where A <= reach
    limit = reach.astype(np.float32)
    low = limit < reach
    limit[low] = np.nextafter(limit[low], np.float32(np.inf))
    if not np.isfinite(limit).all():  # NaN rows: the blocked path
        return None
    np.less_equal(A, limit[:, None], out=below)  # NaN compares false
    flat = np.flatnonzero(below)
    rows = flat // n_pad
    counts = np.bincount(rows, minlength=n_q)
    width = int(counts.max())
    if int(counts.min()) < K or width > THRESHOLD_MAX_WIDTH_PER_NEIGHBOUR * K:
        return None
    idx = np.zeros(n_q * width, dtype=np.int64)  # padding: column 0, scored +inf below
    idx[_padded_positions(counts, width)] = flat - rows * n_pad  # a row's columns ascending
    idx = idx.reshape(n_q, width)
    S = _exact_dense(metric, Qu, U, _feature_major(metric, U), idx, budget_bytes)
    if flat.size < n_q * width:
        S[np.arange(width) >= counts[:, None]] = np.inf  # the padding, after each row's own pairs
    return _first_of_rows(S, idx, counts, K)
