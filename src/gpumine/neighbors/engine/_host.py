"""Exact kNN on the host: a KD-tree at few features, blocked matrix products above.

The torch tile engine (:mod:`gpumine.neighbors.engine._search`) is built for GPUs; on the
host a KD-tree (SciPy's ``cKDTree``) or a BLAS brute force with a cheap
selection does the same search many times faster. :func:`cpu_search` runs one
of the two, or returns None where neither applies (the engine then runs).
Small searches (at most ``DIRECT_MAX_TERMS`` query x reference x feature terms)
skip both: the exact score of every pair costs less than their fixed costs.

Exactness. Results are those of a float64 brute force: every candidate's score
is ``metric.exact_scores`` of the float64 query row against the float64
reference row, candidates are ordered by (score, reference index), and only
equal float64 scores fall to the tie rule (lower index first). Neither the tree
nor the matrix products decide the order; they only propose candidates, and a
row is accepted only when nothing they left out can reach its k-th score
(the direct small search scores every pair and needs no such proof):

* tree: every reference the tree did not return is at least as far as its
  last returned one by the tree's own float64 distance, which is within a
  relative ``TOLERANCE`` of the exact score. Rows whose last returned distance
  is not clearly beyond the k-th collect every reference within the k-th
  distance times ``1 + TOLERANCE`` (``query_ball_point``) and are ranked from
  that complete set.
* matrix products (float32 on data centred at the reference mean, or at a
  sample median where heavy tails pull the mean off; or exact integer
  products): every reference left out has a product score of at least
  the largest kept one, and a product score is within a floating-point error
  bound of the exact score (:class:`_Products`). Rows that fail take every
  reference whose product score may reach their k-th score (the band); rows
  whose band is wide are redone with float64 products (a bound 2^29 times
  smaller), and rows still wide with every distinct reference.
* small L2 searches on the products (whole score matrix within
  ``THRESHOLD_MAX_PAIRS``, short lists) first take one threshold per row from
  the float32 products' group minima and score exactly every pair under its
  reach (:mod:`._host_threshold`): nothing above it can reach the k-th score,
  so no row needs a certificate. A search whose rows hold too many pairs under
  their threshold (wide ties) is left to the blocked products, so its work is
  that pass plus theirs.

Exact scores in NumPy. For euclidean, sqeuclidean, manhattan and chebyshev the
exact scores are formed in NumPy from a feature-major float64 copy of the
references, in ``exact_scores``' order bit for bit (one IEEE operation per term
and per addition, no contraction; tests/neighbors/engine/test_host_search.py compares them);
cosine and inner product keep the torch form. A small torch operation's fixed
cost is larger than a NumPy pass over a few thousand values.

Duplicates. Exact duplicate rows (byte-identical, found by a 64-bit hash of each
row checked byte for byte) are collapsed first: the search runs over distinct
rows, each distinct neighbour then stands for its original rows in index order,
of which at most k (k + 1 when a query excludes itself) are ever needed.
Identical query rows share one search. So ``n`` copies of one point cost as
little as one point, and duplicate blocks larger than k do not widen any
candidate list. Where copies are few (at most one row in 50 a copy, none in
more than 4 copies) every row is searched as its own: the copies cost nothing
there, and the selection for lists with copies is not needed.

Worst case. The work per query is its candidate list plus every distinct
reference whose score ties the query's k-th score (within ``TOLERANCE`` on the
tree, within the product bound on the products; small integers, whose products
are exact, only need the first k tied references). For all-equal data,
duplicate blocks, integer grids and clustered data far from the origin this
stays within a small constant factor of uniform random data of the same shape
(tests/neighbors/engine/test_host_search.py checks the ratio). It grows only where many distinct
references are (nearly) equidistant from many queries, e.g. points on a circle
queried from its axis, and is then at most one exact scan of the distinct
references per such query (the cost of an exact brute force for those rows).
Memory: row blocks within ``budget_bytes``, the tree or the reference rows in
float32 and float64, and the distinct rows in float64.

Threads. The search splits its row blocks over torch's intra-op thread count
itself (small searches run them in turn) and runs every torch operation and
NumPy's BLAS (the float32 products) on one thread meanwhile (restored after):
many short operations split over threads each end in a barrier, and on a busy
host a descheduled worker holds every barrier for milliseconds.

Layout. This module chooses the path and collapses duplicate rows; the KD-tree
path is :mod:`._host_tree`, the matrix-product path :mod:`._host_gemm` (and its
small searches' threshold pass :mod:`._host_threshold`), the exact
scores, the selection under the tie rule and the direct small search
:mod:`._host_exact`, and the threads :mod:`._host_threads`.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np
import torch

from ...core.distance import Metric
from ._host_exact import _NUMPY_EXACT, _direct_products_search, _direct_search, direct_products_apply
from ._host_gemm import GEMM_MARGIN, _gemm_search, _Products, _smallest
from ._host_threads import _one_torch_thread
from ._host_threshold import threshold_search, threshold_search_applies
from ._host_tree import _TREE_P, TREE_MARGIN, _tree_search

__all__ = ["cpu_search", "CPU_TREE_SEARCH", "TREE_ALWAYS_FEATURES", "TREE_MAX_FEATURES"]

# Module switch: False sends every host search to the torch engine (tests compare both).
CPU_TREE_SEARCH = True

# L2 searches run on the KD-tree up to TREE_ALWAYS_FEATURES features, on matrix products
# above TREE_MAX_FEATURES, and in between on whichever is faster on a sample of the
# queries (_probe); cosine and inner product always run on products. By measurement
# against scikit-learn (benchmarks/cpu_knn.py): the tree's cost grows with the data's
# intrinsic dimension, which the feature count does not tell (real sets of 10 to 16
# features ran faster on the tree, uniform data of 10 or more on the products), the
# products' with n^2 d.
TREE_ALWAYS_FEATURES = 8
TREE_MAX_FEATURES = 16
# the probe's sample, and the fewest queries for which it runs (below: products)
_PROBE_ROWS = 256
_PROBE_MIN_QUERIES = 4096
# The tree times every _PROBE_FIRST_STRIDE-th sample row first and stops there when that
# estimate is over _PROBE_CLEAR times the products': where the data's intrinsic dimension is
# high, the tree's whole sample cost about a third of the search the products then ran
# (BENCHMARKS.md, "Design measurements quoted in the code").
_PROBE_FIRST_STRIDE = 8
_PROBE_CLEAR = 2.0
# The tree's estimate counts at this weight against the products': of the whole searches, the
# tree's took 0.48-0.73 of its estimate and the products' 0.58-1.5 of theirs (their estimate leaves
# out the exact scores and the certificate), and the weight that picked the faster path on every
# set measured lay between 0.60 and 0.77 (BENCHMARKS.md, "Design measurements quoted in the code")
_PROBE_TREE_WEIGHT = 0.68
# Above TREE_MAX_FEATURES, L1 and L-inf have no matrix-product form: they stay on the
# tree up to this many features and go to the engine beyond.
TREE_ONLY_MAX_FEATURES = 64

_GEMM_METRICS = ("euclidean", "sqeuclidean", "cosine", "inner_product")

_NUMPY_DTYPE = {torch.float32: np.float32, torch.float64: np.float64}


# Searches of at most this many (query, reference, feature) terms (twice as many where the
# KD-tree would run) score every pair exactly (_direct_search): below it that costs less than
# the candidates, their selection and the certificate of the other paths (measured against
# both on ADBench and uniform sets of 80-1,500 rows and 3-33 features; benchmarks/cpu_small_sets.py).
DIRECT_MAX_TERMS = 1 << 19


def cpu_search(ref: torch.Tensor, query: torch.Tensor, k: int, metric: Metric, *, exclude_self: bool, budget_bytes: int,
               stats: dict | None = None):
    """Exact k nearest references of each query on the host, or None where this path does not apply.

    Returns ``(scores, index)``: metric scores (see :class:`~gpumine.core.distance.Metric`;
    squared distances for L2), ascending, ``(n_query, k)``, in ``ref``'s dtype, and
    int64 reference indices, ties to the lower index. ``exclude_self``: ``query`` is
    ``ref`` and reference i is left out of row i's list (other copies of it are not).
    ``stats``, when given, receives which path ran and how many rows needed the
    tie-complete second step. The data's squared distances must be finite in its
    dtype (:func:`knn_search`'s range plan searches wider data in float64); products
    that underflow are within the bounds.
    """
    if not CPU_TREE_SEARCH or ref.device.type != "cpu" or query.device.type != "cpu":
        return None
    if exclude_self and query is not ref:  # query i is reference i of a prefix: the engine's case
        return None
    if ref.dtype not in (torch.float32, torch.float64) or ref.ndim != 2 or query.ndim != 2:
        return None
    n_ref, d = ref.shape
    n_query = query.shape[0]
    K = k + (1 if exclude_self else 0)
    if d == 0 or n_query == 0 or not 1 <= k or K > n_ref:
        return None
    path = _choose_path(metric, d, n_query)
    if path is None:
        return None
    R = ref.detach().numpy()
    refs = _Groups(R, every_row_if_few=True)
    queries = refs if exclude_self or query is ref else _Groups(query.detach().numpy(), every_row_if_few=True)
    U = _float64_rows(R, refs.first)
    Qu = U if queries is refs else _float64_rows(query.detach().numpy(), queries.first)
    counters = {"rows_tie_complete": 0, "rows_exact_scan": 0}
    direct_limit = DIRECT_MAX_TERMS * (2 if path == "tree" else 1)  # a small tree costs more than small products
    if refs.identity and direct_products_apply(metric, Qu.shape[0], U.shape[0], d, K):
        path = "direct"  # small and short lists: products, and the exact scores of the pairs they leave
        scores, index = _direct_products_search(U, Qu, K, metric, budget_bytes)
    elif refs.identity and metric.name in _NUMPY_EXACT and Qu.shape[0] * U.shape[0] * d <= direct_limit:
        path = "direct"  # small: every pair's exact score, no candidates, no torch
        scores, index = _direct_search(U, Qu, K, metric, budget_bytes)
    else:
        workers = max(1, torch.get_num_threads())
        # a search on the products first tries the threshold pass: one block, so torch keeps its
        # threads there (run with one thread, as the blocks below are, it was slower)
        found = _threshold_first(U, Qu, K, metric, refs, budget_bytes) if path == "gemm" else None
        # the row blocks below split over `workers` threads themselves, one torch thread each
        with contextlib.nullcontext() if found is not None else _one_torch_thread():
            built = None
            if path == "probe":
                path, built = _probe(U, Qu, K, metric)
                if path == "gemm":
                    found = _threshold_first(U, Qu, K, metric, refs, budget_bytes)
            if found is not None:
                path = "threshold"
                scores, index = found
            elif path == "tree":
                scores, index = _tree_search(U, Qu, K, metric, refs, budget_bytes // workers, counters, workers, built)
            else:
                scores, index = _gemm_search(U, Qu, K, metric, refs, budget_bytes // workers, counters, workers, built,
                                             float32_scores=ref.dtype == torch.float32)
    scores, index = _expand_queries(scores, index, queries, k, exclude_self)
    if stats is not None:
        backend = {"tree": "cpu_tree", "direct": "cpu_direct"}.get(path, "cpu_blas")
        stats.update(backend=backend, selection=path, distinct_references=refs.n_unique, distinct_queries=queries.n_unique,
                     **counters)
    # the rounding to float32 in NumPy: a torch conversion of this size would split over threads
    return torch.from_numpy(scores.astype(_NUMPY_DTYPE[ref.dtype], copy=False)), torch.from_numpy(index)


def _threshold_first(U, Qu, K, metric, refs, budget_bytes):
    """:func:`threshold_search` where it applies (every reference row its own), else None (as when it declines)."""
    if refs.identity and threshold_search_applies(metric, Qu.shape[0], U.shape[0], K):
        return threshold_search(U, Qu, K, metric, budget_bytes)  # None: ties too wide, left to the blocks
    return None


def _choose_path(metric: Metric, d: int, n_query: int) -> str | None:
    """"tree", "gemm", "probe" (time both on a sample) or None (the engine)."""
    # Minkowski (other p) is left to the engine: torch's float64 pow rounds a pair's terms
    # differently by their position in a batch, so its exact score is not one value per pair
    if metric.name not in _GEMM_METRICS:
        return "tree" if metric.name in _TREE_P and d <= TREE_ONLY_MAX_FEATURES else None
    if metric.name not in _TREE_P or d > TREE_MAX_FEATURES:
        return "gemm"
    if d <= TREE_ALWAYS_FEATURES:
        return "tree"
    return "probe" if n_query >= _PROBE_MIN_QUERIES else "gemm"


def _probe(U: np.ndarray, Qu: np.ndarray, K: int, metric: Metric):
    """Time the tree and the products on a sample of queries; the faster path and what it built.

    Which is faster depends on the data's intrinsic dimension, not only on its
    features. The products are timed first, then the tree on every
    ``_PROBE_FIRST_STRIDE``-th sample row, and on the rest of the sample only where
    that does not already put it over ``_PROBE_CLEAR`` times the products; the
    tree's estimate is weighted by ``_PROBE_TREE_WEIGHT``. The choice may differ
    between runs; the results do not.
    """
    from scipy.spatial import cKDTree

    n = Qu.shape[0]
    sample = Qu[np.linspace(0, n - 1, _PROBE_ROWS).astype(np.int64)]
    c = min(U.shape[0], K + GEMM_MARGIN)
    start = time.perf_counter()
    prod = _Products(metric, U, Qu, c)
    build = time.perf_counter() - start
    float64 = prod.passes()[0]
    Q = torch.from_numpy(prod.query(sample, float64)[0]).to(torch.float64 if float64 else torch.float32)
    out = torch.empty((_PROBE_ROWS, prod.n_pad), dtype=Q.dtype)
    out.zero_()  # its pages mapped before the timing: the search's own buffers are reused block after block
    start = time.perf_counter()
    _smallest(prod.scores(Q, out), c, prod.levels)
    gemm_cost = build + (time.perf_counter() - start) * n / _PROBE_ROWS
    start = time.perf_counter()
    tree = cKDTree(U, leafsize=16, balanced_tree=False, compact_nodes=False, copy_data=False)
    build = time.perf_counter() - start
    first = np.zeros(_PROBE_ROWS, dtype=bool)
    first[::_PROBE_FIRST_STRIDE] = True
    k_tree = min(U.shape[0], K + TREE_MARGIN)
    tree.query(sample[1:3], k=k_tree, p=_TREE_P[metric.name], workers=1)  # untimed: a first call's set-up, not scaled up
    queried = 0
    spent = 0.0
    for part in (sample[first], sample[~first]):
        start = time.perf_counter()
        tree.query(part, k=k_tree, p=_TREE_P[metric.name], workers=1)
        spent += time.perf_counter() - start
        queried += part.shape[0]
        tree_cost = _PROBE_TREE_WEIGHT * (build + spent * n / queried)
        if tree_cost > _PROBE_CLEAR * gemm_cost:
            break
    return ("tree", tree) if tree_cost <= gemm_cost else ("gemm", prod)


def _float64_rows(X: np.ndarray, rows: np.ndarray) -> np.ndarray:
    if len(rows) == len(X):  # every row distinct: rows is 0..n-1
        return np.ascontiguousarray(X, dtype=np.float64)
    return np.ascontiguousarray(X[rows], dtype=np.float64)

_ROW_HASH_SEED = 0x9E3779B97F4A7C15
_hash_multipliers_cache: dict = {}


def _row_hashes(rows: np.ndarray) -> np.ndarray | None:
    """A 64-bit hash of each row's bytes (``rows`` C-contiguous), or None where the rows are no whole 32-bit words.

    The sum of the row's 32-bit words times fixed odd 64-bit multipliers, modulo
    2^64: equal rows hash alike, so distinct hashes are distinct rows.
    """
    if rows.dtype.itemsize * rows.shape[1] % 4:
        return None
    words = rows.view(np.uint32)
    width = words.shape[1]
    multipliers = _hash_multipliers_cache.get(width)
    if multipliers is None:
        rng = np.random.default_rng(_ROW_HASH_SEED)
        multipliers = rng.integers(0, 2**63, width, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        _hash_multipliers_cache[width] = multipliers
    n = rows.shape[0]
    h = np.empty(n, dtype=np.uint64)
    step = max(1, (1 << 18) // width)
    for s0 in range(0, n, step):
        np.matmul(words[s0 : s0 + step].astype(np.uint64), multipliers, out=h[s0 : s0 + step])  # wraps modulo 2^64
    return h


class _Groups:
    """Distinct rows of a matrix, numbered by first occurrence, with their original rows.

    Rows are distinct when their bytes differ (so 0.0 and -0.0 are two rows, which
    costs nothing but a little sharing). ``first[u]`` is the lowest original row of
    distinct row ``u`` (increasing in ``u``), ``inverse[i]`` the distinct row of
    original row ``i``, and ``members[starts[u]:starts[u] + counts[u]]`` its
    original rows, ascending.

    The rows are grouped by a 64-bit hash of their bytes (a sort of n integers, not
    of n rows), each group's rows checked byte for byte against its first one; a
    hash shared by different rows (a collision) falls back to a sort of the rows.
    """

    def __init__(self, X: np.ndarray, every_row_if_few: bool = False):
        n = X.shape[0]
        rows = np.ascontiguousarray(X)
        found = self._by_hash(rows, every_row_if_few) if n > 1 else (np.arange(n), np.arange(n), np.ones(n, dtype=np.int64))
        if found is None:  # a collision, or rows of no whole 32-bit words
            keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
            _, first, inverse, counts = np.unique(keys, return_index=True, return_inverse=True, return_counts=True)
            found = first, inverse.reshape(-1), counts
        first, inverse, counts = found
        # every_row_if_few: few copies are searched as rows of their own (see _DEDUPE_MIN_SHARE)
        few = every_row_if_few and len(first) >= _DEDUPE_MIN_SHARE * n and int(counts.max()) <= _DEDUPE_MIN_COPIES
        self.n_unique = n if few else len(first)
        self.identity = self.n_unique == n
        if self.identity:
            self.first = np.arange(n)
            self.inverse = self.first
            self.counts = np.ones(n, dtype=np.int64)
            self.members = self.first
            self.starts = self.first
            return
        by_first = np.argsort(first, kind="stable")
        rank = np.empty_like(by_first)
        rank[by_first] = np.arange(self.n_unique)
        self.first = first[by_first]
        self.inverse = rank[inverse]
        self.counts = counts[by_first].astype(np.int64)
        self.members = np.argsort(self.inverse, kind="stable")
        self.starts = np.concatenate([[0], np.cumsum(self.counts)[:-1]])

    @staticmethod
    def _by_hash(rows: np.ndarray, every_row_if_few: bool):
        """(first, inverse, counts) of the distinct rows in any group order, as np.unique gives them; None on a collision.

        With ``every_row_if_few``, few copies by hash are every row (the copies by
        bytes are no more, a collision only merges groups): no check needed.
        """
        n = rows.shape[0]
        h = _row_hashes(rows)
        if h is None:
            return None
        order = np.argsort(h, kind="stable")  # equal hashes: ascending original rows
        h = h[order]
        new = np.empty(n, dtype=bool)
        new[0] = True
        np.not_equal(h[1:], h[:-1], out=new[1:])
        if new.all():
            return np.arange(n), np.arange(n), np.ones(n, dtype=np.int64)
        starts = np.flatnonzero(new)
        if every_row_if_few and starts.size >= _DEDUPE_MIN_SHARE * n and np.diff(np.append(starts, n)).max() <= _DEDUPE_MIN_COPIES:
            return np.arange(n), np.arange(n), np.ones(n, dtype=np.int64)
        group = np.cumsum(new) - 1  # per sorted position
        first = order[starts]  # the lowest original row of each group
        words = rows.view(np.uint32)
        shared = np.flatnonzero(~new)  # rows after their group's first: each must equal it byte for byte
        if not np.array_equal(words[order[shared]], words[first[group[shared]]]):
            return None
        inverse = np.empty(n, dtype=np.int64)
        inverse[order] = group
        return first, inverse, np.diff(np.append(starts, n))


# Exact duplicates are collapsed only where they save work: with at most 1 row in
# 1 / (1 - _DEDUPE_MIN_SHARE) a copy and no row in more than _DEDUPE_MIN_COPIES copies, every
# row is searched (copies are candidates as any other row; a copy tied at a row's K-th score
# fits the candidate margins) and the selection for lists with copies is not needed.
_DEDUPE_MIN_SHARE = 0.98
_DEDUPE_MIN_COPIES = 4


def _expand_queries(scores: np.ndarray, index: np.ndarray, queries: _Groups, k: int, exclude_self: bool):
    """Per-distinct-query lists of K = k (+1) entries to the original queries' k."""
    if not queries.identity:
        scores, index = scores[queries.inverse], index[queries.inverse]
    if not exclude_self:
        return np.ascontiguousarray(scores[:, :k]), np.ascontiguousarray(index[:, :k])
    n, K = index.shape
    if np.array_equal(index[:, 0], np.arange(n)):  # each row first in its own list (the usual case)
        return np.ascontiguousarray(scores[:, 1:]), np.ascontiguousarray(index[:, 1:])
    own = index == np.arange(n)[:, None]
    own[~own.any(1), K - 1] = True  # not in the list: drop the last entry instead
    keep = ~own
    return scores[keep].reshape(n, k), index[keep].reshape(n, k)
