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
* matrix products (float32 on data centred at the reference mean, or exact
  integer products): every reference left out has a product score of at least
  the largest kept one, and a product score is within a floating-point error
  bound of the exact score (:class:`_Products`). Rows that fail take every
  reference whose product score may reach their k-th score (the band); rows
  whose band is wide are redone with float64 products (a bound 2^29 times
  smaller), and rows still wide with every distinct reference.

Exact scores in NumPy. For euclidean, sqeuclidean, manhattan and chebyshev the
exact scores are formed in NumPy from a feature-major float64 copy of the
references, in ``exact_scores``' order bit for bit (one IEEE operation per term
and per addition, no contraction; tests/test_cpu_search.py compares them);
cosine and inner product keep the torch form. Small torch operations cost
5-10 us each and a NumPy pass over a few thousand values a fraction of that.

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
(tests/test_cpu_search.py checks the ratio). It grows only where many distinct
references are (nearly) equidistant from many queries, e.g. points on a circle
queried from its axis, and is then at most one exact scan of the distinct
references per such query (the cost of an exact brute force for those rows).
Memory: row blocks within ``budget_bytes``, the tree or the reference rows in
float32 and float64, and the distinct rows in float64.

Threads. The search splits its row blocks over torch's intra-op thread count
itself (small searches run them in turn) and runs every torch operation on one
thread meanwhile (restored after): many short operations split over threads
each end in a barrier, and on a busy host a descheduled worker holds every
barrier for milliseconds.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import math
import threading
import time

import numpy as np
import torch

from ...core.distance import EXACT_SUM_CHUNK, Metric

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
# Above TREE_MAX_FEATURES, L1 and L-inf have no matrix-product form: they stay on the
# tree up to this many features and go to the engine beyond.
TREE_ONLY_MAX_FEATURES = 64

_TREE_P = {"euclidean": 2.0, "sqeuclidean": 2.0, "manhattan": 1.0, "chebyshev": math.inf}  # cKDTree's p
_GEMM_METRICS = ("euclidean", "sqeuclidean", "cosine", "inner_product")

# Relative distance between the tree's float64 distances and exact float64 scores that
# is never exceeded: both sum at most a few hundred non-negative float64 terms, each
# within a few units of 2^-53 of its value, so they agree to ~1e-13 at 64 features.
TOLERANCE = 1e-9

_U32 = 2.0**-24
_NUMPY_DTYPE = {torch.float32: np.float32, torch.float64: np.float64}
_U64 = 2.0**-53


def cpu_search(ref: torch.Tensor, query: torch.Tensor, k: int, metric: Metric, *, exclude_self: bool, budget_bytes: int,
               stats: dict | None = None):
    """Exact k nearest references of each query on the host, or None where this path does not apply.

    Returns ``(scores, index)``: metric scores (see :class:`~gpumine.core.distance.Metric`;
    squared distances for L2), ascending, ``(n_query, k)``, in ``ref``'s dtype, and
    int64 reference indices, ties to the lower index. ``exclude_self``: ``query`` is
    ``ref`` and reference i is left out of row i's list (other copies of it are not).
    ``stats``, when given, receives which path ran and how many rows needed the
    tie-complete second step.
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
    if refs.identity and metric.name in _NUMPY_EXACT and Qu.shape[0] * U.shape[0] * d <= direct_limit:
        path = "direct"  # small: every pair's exact score, no candidates, no torch
        scores, index = _direct_search(U, Qu, K, metric, budget_bytes)
    else:
        workers = max(1, torch.get_num_threads())
        with _one_torch_thread():  # the blocks are split over `workers` threads here instead
            built = None
            if path == "probe":
                path, built = _probe(U, Qu, K, metric)
            search = _tree_search if path == "tree" else _gemm_search
            scores, index = search(U, Qu, K, metric, refs, budget_bytes // workers, counters, workers, built)
    scores, index = _expand_queries(scores, index, queries, k, exclude_self)
    if stats is not None:
        backend = {"tree": "cpu_tree", "direct": "cpu_direct"}.get(path, "cpu_blas")
        stats.update(backend=backend, selection=path, distinct_references=refs.n_unique, distinct_queries=queries.n_unique,
                     **counters)
    # the rounding to float32 in NumPy: a torch conversion of this size would split over threads
    return torch.from_numpy(scores.astype(_NUMPY_DTYPE[ref.dtype], copy=False)), torch.from_numpy(index)


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
    features. The choice may differ between runs; the results do not.
    """
    from scipy.spatial import cKDTree

    sample = Qu[np.linspace(0, Qu.shape[0] - 1, _PROBE_ROWS).astype(np.int64)]
    start = time.perf_counter()
    tree = cKDTree(U, leafsize=16, balanced_tree=False, compact_nodes=False, copy_data=False)
    build = time.perf_counter() - start
    start = time.perf_counter()
    tree.query(sample, k=min(U.shape[0], K + TREE_MARGIN), p=_TREE_P[metric.name], workers=1)
    tree_cost = build + (time.perf_counter() - start) * Qu.shape[0] / _PROBE_ROWS
    start = time.perf_counter()
    prod = _Products(metric, U, Qu, min(U.shape[0], K + GEMM_MARGIN))
    build = time.perf_counter() - start
    float64 = prod.passes()[0]
    Q = torch.from_numpy(prod.query(sample)[0]).to(torch.float64 if float64 else torch.float32)
    out = torch.empty((_PROBE_ROWS, prod.n_pad), dtype=Q.dtype)
    start = time.perf_counter()
    _smallest(prod.scores(Q, out), min(U.shape[0], K + GEMM_MARGIN), prod.levels)
    gemm_cost = build + (time.perf_counter() - start) * Qu.shape[0] / _PROBE_ROWS
    return ("tree", tree) if tree_cost <= gemm_cost else ("gemm", prod)


def _float64_rows(X: np.ndarray, rows: np.ndarray) -> np.ndarray:
    if len(rows) == len(X):  # every row distinct: rows is 0..n-1
        return np.ascontiguousarray(X, dtype=np.float64)
    return np.ascontiguousarray(X[rows], dtype=np.float64)


_THREADS_LOCK = threading.Lock()
_threads_state = {"active": 0, "saved": None}


@contextlib.contextmanager
def _one_torch_thread():
    """Torch's intra-op threads set to one while any search runs (the first in saves the
    setting, the last out restores it, so overlapping searches from several threads
    leave it as they found it)."""
    with _THREADS_LOCK:
        if _threads_state["active"] == 0:
            _threads_state["saved"] = torch.get_num_threads()
            if _threads_state["saved"] != 1:
                torch.set_num_threads(1)
        _threads_state["active"] += 1
    try:
        yield
    finally:
        with _THREADS_LOCK:
            _threads_state["active"] -= 1
            if _threads_state["active"] == 0 and _threads_state["saved"] not in (None, 1):
                torch.set_num_threads(_threads_state["saved"])


_POOL_LOCK = threading.Lock()
_pool_state = {"pool": None, "workers": 0}


def _thread_pool(workers: int) -> concurrent.futures.ThreadPoolExecutor:
    """One executor kept for every search: starting threads per call cost milliseconds on a busy host."""
    with _POOL_LOCK:
        if _pool_state["pool"] is None or _pool_state["workers"] < workers:
            _pool_state["pool"] = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="gpumine-cpu-search")
            _pool_state["workers"] = workers
        return _pool_state["pool"]


def _run_blocks(work, blocks, workers: int) -> list:
    """``[work(b) for b in blocks]``, on up to ``workers`` threads (torch and SciPy release the GIL)."""
    if workers <= 1 or len(blocks) <= 1:
        return [work(b) for b in blocks]
    return list(_thread_pool(workers).map(work, blocks))


# Tree searches of fewer (query rows x neighbours) run on one thread: blocks of a few
# milliseconds gain less from a second thread than they lose to the GIL
_PARALLEL_MIN_TREE = 1 << 14
# Product searches of fewer multiply-adds (query rows x padded references x features) run
# on one thread likewise
_PARALLEL_MIN_GEMM = 1 << 24


def _split(n: int, block: int, workers: int, min_rows: int = 256) -> list:
    """Row ranges of at most ``block`` rows; with several workers, a few ranges each (load balance)."""
    if workers > 1:
        block = max(1, min(block, max(min_rows, -(-n // (4 * workers)))))
    return [(s, min(n, s + block)) for s in range(0, n, block)]


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
    own = index == np.arange(n)[:, None]
    own[~own.any(1), K - 1] = True  # not in the list: drop the last entry instead
    keep = ~own
    return scores[keep].reshape(n, k), index[keep].reshape(n, k)


# -- selection under the tie rule -------------------------------------------------------------

def _sort_pairs(rows: np.ndarray, keys: np.ndarray, scores: np.ndarray, n_rows: int):
    """Flat triples sorted by (row, score, key), and where each row starts.

    Rows of a few entries each are sorted side by side as a padded (rows x width)
    array (a per-row sort is several times faster than one sort of all triples by
    three keys); very uneven rows fall back to the flat sort.
    """
    counts = np.bincount(rows, minlength=n_rows)
    start = np.cumsum(counts) - counts
    width = int(counts.max()) if n_rows else 0
    if width * n_rows > 4 * len(rows) + 1024:
        order = np.lexsort((keys, scores, rows))
        return rows[order], keys[order], scores[order], start
    order = np.argsort(rows, kind="stable")
    rows, keys, scores = rows[order], keys[order], scores[order]
    rank = np.arange(len(rows)) - start[rows]
    S = np.full((n_rows, width), np.inf)
    U = np.full((n_rows, width), np.iinfo(np.int64).max)  # padding sorts last
    S[rows, rank] = scores
    U[rows, rank] = keys
    order = np.lexsort((U, S), axis=-1)
    valid = np.arange(width) < counts[:, None]
    return rows, np.take_along_axis(U, order, 1)[valid], np.take_along_axis(S, order, 1)[valid], start


def _select(rows: np.ndarray, uids: np.ndarray, scores: np.ndarray, n_rows: int, K: int, refs: _Groups):
    """The first K originals of each row by (exact score, original index).

    ``rows``, ``uids``, ``scores``: flat (row, distinct reference, exact score)
    triples. Precondition: each row holds every distinct reference whose score is at
    most the row's K-th original score (more may be there). Returns ``(n_rows, K)``
    float64 scores and int64 original indices.
    """
    rows, uids, scores, row_start = _sort_pairs(rows, uids, scores, n_rows)
    if refs.identity:  # distinct index = original index: the first K of each row
        take = row_start[:, None] + np.arange(K)
        return scores[take], uids[take]
    counts = np.minimum(refs.counts[uids], K)
    cum = np.cumsum(counts)
    before = np.where(row_start > 0, cum[np.maximum(row_start - 1, 0)], 0)
    within = cum - before[rows]  # originals up to and including this pair, within its row
    short = within < K
    kth_pos = row_start + np.bincount(rows[short], minlength=n_rows)
    kth = scores[kth_pos]
    less = scores < kth[rows]
    n_less_pairs = np.bincount(rows[less], minlength=n_rows)
    n_less = np.bincount(rows[less], weights=counts[less], minlength=n_rows).astype(np.int64)
    need = K - n_less  # originals still wanted from the references tied at the K-th score
    tied = scores == kth[rows]
    tied_rank = np.arange(len(rows)) - (row_start + n_less_pairs)[rows]
    # distinct rows are numbered by their first original, so among tied ones the first
    # `need` by number already hold `need` originals below any later one's
    keep = less | (tied & (tied_rank < need[rows]))
    rows, uids, scores, counts = rows[keep], uids[keep], scores[keep], counts[keep]
    take = np.where(scores < kth[rows], counts, np.minimum(counts, need[rows]))
    pair = np.repeat(np.arange(len(rows)), take)
    offset = np.arange(len(pair)) - np.repeat(np.cumsum(take) - take, take)
    orig = refs.members[refs.starts[uids[pair]] + offset]
    _, orig, e_scores, start = _sort_pairs(rows[pair], orig, scores[pair], n_rows)
    take_pos = start[:, None] + np.arange(K)
    return e_scores[take_pos], orig[take_pos]


def _kth_scores(S: np.ndarray, uids: np.ndarray, K: int, refs: _Groups, ascending: bool = False) -> np.ndarray:
    """Per row of dense candidate scores, the score of the K-th original among them.

    ``ascending``: every row of ``S`` is already sorted (no sort here).
    """
    if refs.identity:
        return S[:, K - 1].copy() if ascending else np.partition(S, K - 1, axis=1)[:, K - 1]
    if not ascending:
        order = np.argsort(S, axis=1)  # equal scores: any order, the K-th score is the same
        S, uids = np.take_along_axis(S, order, 1), np.take_along_axis(uids, order, 1)
    counts = np.minimum(refs.counts[uids], K)
    pos = (np.cumsum(counts, axis=1) < K).sum(1)
    return S[np.arange(S.shape[0]), np.minimum(pos, S.shape[1] - 1)]


# -- exact scores -------------------------------------------------------------------------------

# Metrics whose exact scores are formed here in NumPy, bit for bit ``metric.exact_scores``: the
# per-feature terms ((x_f - y_f)^2 or |x_f - y_f|; y - x squares and abs()es to the same value)
# summed left to right within each EXACT_SUM_CHUNK features and the chunk sums left to right,
# one IEEE operation per term and per addition as in the torch form (no contraction, no
# reordering); chebyshev's largest term (a maximum is exact in any order). Cosine and inner
# product (a contiguous torch reduction above 16 features) keep the torch form.
_NUMPY_EXACT = ("euclidean", "sqeuclidean", "manhattan", "chebyshev")
# Terms per NumPy block (features x pairs): a few MiB of temporaries, whose passes stay in the cache
_EXACT_BLOCK_TERMS = 1 << 19


def _reduce_terms(name: str, G: np.ndarray) -> np.ndarray:
    """Exact scores from the per-feature differences ``G`` (features first; overwritten)."""
    if name in ("manhattan", "chebyshev"):
        np.abs(G, out=G)
    else:
        np.multiply(G, G, out=G)
    if name == "chebyshev":
        return G.max(0)
    d = G.shape[0]
    total = None
    for c0 in range(0, d, EXACT_SUM_CHUNK):
        c1 = min(d, c0 + EXACT_SUM_CHUNK)
        part = G[c0] if c1 - c0 == 1 else np.add(G[c0], G[c0 + 1])
        for f in range(c0 + 2, c1):
            part += G[f]
        total = part if total is None else np.add(total, part, out=total)
    return total


def _every_pair(name: str, Q64: np.ndarray, UT: np.ndarray) -> np.ndarray:
    """Exact scores of every query row of ``Q64`` against every reference column of ``UT`` (feature-major): (b, n).

    The order of :func:`_reduce_terms`, accumulated feature by feature into (b, n)
    buffers (they stay in the cache where a (features, b, n) array of terms would not).
    """
    b, d = Q64.shape
    n = UT.shape[1]
    total = np.empty((b, n))
    part = np.empty((b, n)) if d > EXACT_SUM_CHUNK else None
    term = np.empty((b, n)) if d > 1 else None
    combine = np.maximum if name == "chebyshev" else np.add
    for c0 in range(0, d, EXACT_SUM_CHUNK):
        acc = total if c0 == 0 else part
        for f in range(c0, min(d, c0 + EXACT_SUM_CHUNK)):
            out = acc if f == c0 else term
            np.subtract(UT[f], Q64[:, f, None], out=out)
            if name in ("manhattan", "chebyshev"):
                np.abs(out, out=out)
            else:
                np.multiply(out, out, out=out)
            if f > c0:
                combine(acc, term, out=acc)
        if c0 > 0:
            combine(total, part, out=total)
    return total


def _feature_major(metric: Metric, U64: np.ndarray) -> np.ndarray | None:
    """The references feature by feature (float64) for the NumPy exact scores, or None (torch form)."""
    return np.ascontiguousarray(U64.T) if metric.name in _NUMPY_EXACT else None


def _pairs_per_chunk(d: int, budget_bytes: int) -> int:
    """Pairs scored per call: temporaries of a few MiB (the chunk sums' strided passes stay in the cache)."""
    width = -(-d // 16) * 16 + 4
    return max(1, min(budget_bytes // (4 * width * 8), (1 << 20) // width))


def _numpy_pairs_per_block(d: int, budget_bytes: int) -> int:
    return max(1, min(budget_bytes // (2 * 8 * d), _EXACT_BLOCK_TERMS // d))


def _exact_pairs(metric: Metric, Q64: np.ndarray, U64: np.ndarray, UT: np.ndarray | None, rows: np.ndarray,
                 uids: np.ndarray, budget_bytes: int) -> np.ndarray:
    """``metric.exact_scores`` (float64) of flat (query row, distinct reference) pairs.

    Each pair is scored as its own (1 x d) problem, whose value ``exact_scores``
    fixes by the pair alone, whatever the chunk. ``UT``: :func:`_feature_major`'s copy.
    """
    out = np.empty(len(rows))
    if UT is not None:
        step = _numpy_pairs_per_block(Q64.shape[1], budget_bytes)
        for s0 in range(0, len(rows), step):
            G = np.take(UT, uids[s0 : s0 + step], axis=1)
            G -= Q64[rows[s0 : s0 + step]].T
            out[s0 : s0 + step] = _reduce_terms(metric.name, G)
        return out
    step = _pairs_per_chunk(Q64.shape[1], budget_bytes)
    for s0 in range(0, len(rows), step):
        Q = torch.from_numpy(Q64[rows[s0 : s0 + step]])
        Y = torch.from_numpy(U64[uids[s0 : s0 + step]])[:, None, :]
        out[s0 : s0 + step] = metric.exact_scores(Q, Y)[:, 0].numpy()
    return out


def _exact_dense(metric: Metric, Q64: np.ndarray, U64: np.ndarray, UT: np.ndarray | None, idx: np.ndarray,
                 budget_bytes: int) -> np.ndarray:
    """``metric.exact_scores`` (float64) of query ``Q64[i]`` against references ``idx[i, j]``: (b, w).

    ``UT``: :func:`_feature_major`'s copy of the references (NumPy exact scores), else None.
    """
    b, w = idx.shape
    out = np.empty((b, w))
    if b == 0 or w == 0:
        return out
    if UT is not None:
        step = max(1, _numpy_pairs_per_block(Q64.shape[1], budget_bytes) // w)
        for s0 in range(0, b, step):
            G = np.take(UT, idx[s0 : s0 + step], axis=1)  # (features, rows, candidates)
            G -= Q64[s0 : s0 + step].T[:, :, None]
            out[s0 : s0 + step] = _reduce_terms(metric.name, G)
        return out
    step = max(1, _pairs_per_chunk(Q64.shape[1], budget_bytes) // w)
    for s0 in range(0, b, step):
        S = metric.exact_scores(torch.from_numpy(Q64[s0 : s0 + step]), torch.from_numpy(U64[idx[s0 : s0 + step]]))
        out[s0 : s0 + step] = S.numpy()
    return out


def _by_width(counts: np.ndarray, rows: np.ndarray):
    """``rows`` (with ``counts`` candidates each, ascending first) as (rows, width) groups to score.

    Rows needing few candidates (most) are scored apart from the few with near
    ties, whose longer lists would otherwise set the width of all.
    """
    if not rows.size:
        return []
    narrow = int(np.min(counts)) + 1
    few = counts <= narrow
    groups = [(rows[few], narrow)] if few.all() else [(rows[few], narrow), (rows[~few], int(counts.max()))]
    return [(r, w) for r, w in groups if r.size]


def _rows_per_block(budget_bytes: int, per_row: int, limit: int) -> int:
    return max(1, min(limit, budget_bytes // max(1, per_row)))


class _Results:
    """The first K originals of each distinct query row, gathered from dense or flat candidates.

    Every row handed in holds every distinct reference whose exact score is at most
    the row's K-th original score (and at least K originals). Blocks of rows may be
    handed in from several threads (disjoint rows).
    """

    def __init__(self, n_rows: int, K: int, refs: _Groups):
        self.K, self.refs = K, refs
        self.scores = np.empty((n_rows, K))
        self.index = np.empty((n_rows, K), dtype=np.int64)
        self.flat = []

    def dense(self, rows: np.ndarray, idx: np.ndarray, S: np.ndarray, ascending: bool = False) -> None:
        """Rows with their candidates ``idx`` (distinct references) and exact scores ``S``, (b, w).

        ``ascending``: each row of ``idx`` is in increasing order (then a stable sort
        by score alone orders ties by index).
        """
        if not rows.size:
            return
        single = None
        if not self.refs.identity:  # rows whose candidates all stand for one original each
            single = (self.refs.counts[idx] == 1).all(1)
            many = ~single
            if many.any():
                S_m, idx_m = S[many], idx[many]
                keep = S_m <= _kth_scores(S_m, idx_m, self.K, self.refs)[:, None]
                self.flat.append((np.repeat(rows[many], keep.sum(1)), idx_m[keep], S_m[keep]))
                rows, idx, S = rows[single], idx[single], S[single]
                if not rows.size:
                    return
        # each candidate is one original: sort each row by (score, original index)
        orig = idx if single is None else self.refs.first[idx]  # first[] is increasing: the order of idx
        order = (np.argsort(S, axis=1, kind="stable") if ascending else np.lexsort((orig, S), axis=-1))[:, : self.K]
        self.scores[rows] = np.take_along_axis(S, order, 1)
        self.index[rows] = np.take_along_axis(orig, order, 1)

    def pairs(self, rows: np.ndarray, uids: np.ndarray, scores: np.ndarray) -> None:
        self.flat.append((rows, uids, scores))

    def result(self):
        if self.flat:
            rows, uids, scores = (np.concatenate(part) for part in zip(*self.flat))
            present, compact = np.unique(rows, return_inverse=True)
            self.scores[present], self.index[present] = _select(compact.reshape(-1), uids.astype(np.int64, copy=False),
                                                                scores, present.size, self.K, self.refs)
        return self.scores, self.index


def _scan(results: _Results, rows: np.ndarray, Q64, U64, UT, metric: Metric, budget_bytes: int) -> None:
    """Rows answered from the exact scores of every distinct reference (the bounded fallback)."""
    n_u = U64.shape[0]
    step = _rows_per_block(budget_bytes, 4 * n_u * (U64.shape[1] + 16) * 8, max(1, rows.size))
    everything = np.arange(n_u)
    for s0 in range(0, rows.size, step):
        chunk = rows[s0 : s0 + step]
        if UT is not None:
            S = _every_pair(metric.name, Q64[chunk], UT)
        else:
            S = metric.exact_scores(torch.from_numpy(Q64[chunk]), torch.from_numpy(U64)[None]).numpy()
        results.dense(chunk, np.broadcast_to(everything, S.shape), S, ascending=True)


# -- small searches: every pair --------------------------------------------------------------------

# Searches of at most this many (query, reference, feature) terms (twice as many where the
# KD-tree would run) score every pair exactly (_direct_search): below it that costs less than
# the candidates, their selection and the certificate of the other paths (measured against
# both on ADBench and uniform sets of 80-1,500 rows and 3-33 features; benchmarks/cpu_small_sets.py).
DIRECT_MAX_TERMS = 1 << 19
# Pairs scored per block (three float64 buffers of this many scores stay in the cache)
_DIRECT_BLOCK_SCORES = 1 << 16


def _direct_search(U: np.ndarray, Qu: np.ndarray, K: int, metric: Metric, budget_bytes: int):
    """The first K references of each query row by (exact score, index), from the exact scores of every pair.

    ``metric`` one of _NUMPY_EXACT, every reference row distinct or searched as its
    own (identity groups). Returns (n_q, K) float64 scores and int64 indices.
    """
    n_q, d = Qu.shape
    n_u = U.shape[0]
    UT = np.ascontiguousarray(U.T)
    scores = np.empty((n_q, K))
    index = np.empty((n_q, K), dtype=np.int64)
    step = max(1, min(_DIRECT_BLOCK_SCORES, budget_bytes // 32) // n_u)
    for s0 in range(0, n_q, step):
        S = _every_pair(metric.name, Qu[s0 : s0 + step], UT)
        # the K smallest of each row, ties at the K-th to the lowest columns, the columns ascending:
        # a stable sort by score alone then orders them by (score, index)
        values, cols = _first_columns(S, K)
        order = np.argsort(values, axis=1, kind="stable")
        scores[s0 : s0 + step] = np.take_along_axis(values, order, 1)
        index[s0 : s0 + step] = np.take_along_axis(cols, order, 1)
    return scores, index


# -- KD-tree ------------------------------------------------------------------------------------

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


# -- matrix products --------------------------------------------------------------------------

class _Products:
    """Reference rows for the products, and how far a product score can be from the exact one.

    ``offset[i] + (Q @ YT + bias)[i, j]`` approximates the exact score of query i
    and reference j, in float32 or float64. L2 is centred at the reference mean (no
    cancellation far from the origin), except for integers small enough that the
    products are exact: in float32 (``exact32``), else in float64 (``exact64``;
    then only float64 products run). Reference columns are padded to a multiple of
    8 per selection level with a bias of +inf, so the selection needs no tail.
    """

    def __init__(self, metric: Metric, U: np.ndarray, Qu: np.ndarray, c: int):
        self.name = metric.name
        n_u, self.d = U.shape
        self.l2 = self.name in ("euclidean", "sqeuclidean")
        largest = _integer_magnitude(U, Qu) if self.l2 or self.name == "inner_product" else None
        # integer L2 partial sums stay below 4 d M^2, inner products below d M^2
        bits = None if largest is None else 4.0 * self.d * largest * largest
        self.exact32 = bits is not None and bits < 2.0**24
        self.exact64 = bits is not None and bits < 2.0**53
        self.centre = U.mean(0) if self.l2 and not self.exact64 else None
        Y, ynorm = self._rows(U)
        self.levels = _select_levels(n_u, c)
        step = _GROUP**self.levels
        self.n_pad = -(-n_u // step) * step
        YT = np.zeros((self.d, self.n_pad))
        YT[:, :n_u] = (-2.0 * Y if self.l2 else -Y).T
        bias = np.full(self.n_pad, np.inf)
        bias[:n_u] = (Y * Y).sum(1) if self.l2 else 0.0
        self.YT64, self.bias64 = torch.from_numpy(YT), torch.from_numpy(bias)
        self.YT32 = self.bias32 = None
        if not self.exact64 or self.exact32:  # float32 products run
            self.YT32 = torch.from_numpy(YT.astype(np.float32))
            bias32 = bias.copy()
            if self.l2:  # the squared norms of the rows the products see
                Y32 = Y.astype(np.float32).astype(np.float64)
                bias32[:n_u] = (Y32 * Y32).sum(1)
            self.bias32 = torch.from_numpy(bias32.astype(np.float32))
        self.max_norm = float(ynorm.max()) if self.name == "inner_product" else 0.0

    def _rows(self, X: np.ndarray):
        if self.centre is not None:
            return X - self.centre, None
        norm = np.sqrt((X * X).sum(1))
        if self.name == "cosine":
            return X / np.where(norm > 0, norm, 1.0)[:, None], norm
        return X, norm

    def passes(self):
        """The precisions to try in turn (float64: True)."""
        if self.exact32:
            return (False,)
        return (True,) if self.exact64 else (False, True)

    def query(self, Q: np.ndarray):
        """Query rows (float64), per-row offset, and the per-row scale of the error bound."""
        rows, norm = self._rows(Q)
        if self.l2:
            sq = (rows * rows).sum(1)
            return rows, sq, sq
        if self.name == "cosine":
            return rows, np.ones(len(Q)), np.ones(len(Q))
        return rows, np.zeros(len(Q)), norm * self.max_norm

    def gamma(self, float64: bool) -> float:
        """Relative error of one product score: the rounding of both rows (the data may be
        float64, products float32) and of the d-term sums, 2 (d + 6) units, doubled."""
        if self.exact32 or (float64 and self.exact64):
            return 0.0
        return 4.0 * (self.d + 6) * (_U64 if float64 else _U32)

    def scores(self, Q: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        if out.dtype == torch.float64:
            return torch.addmm(self.bias64, Q, self.YT64, out=out)
        return torch.addmm(self.bias32, Q, self.YT32, out=out)

    # Bounds on the exact score s of a pair from its product score a (all float64, per row
    # scale ``q``). L2: |a - s| <= g (|x|^2 + |y|^2) <= g (3 |x|^2 + 2 s), as |y|^2 <=
    # 2 |x|^2 + 2 |x - y|^2 (centred rows): relative to the query's own norm and the
    # distance, not to the largest reference. Cosine: g |x| |y| <= g for unit rows (2 g
    # with the normalisation). Inner product: g |x| max |y|.
    def lower(self, a, q, g):
        if self.l2:
            return (a - 3.0 * g * q) / (1.0 + 2.0 * g)
        return a - 2.0 * g * q

    def upper(self, a, q, g):
        if self.l2:
            return (a + 3.0 * g * q) / (1.0 - 2.0 * g)
        return a + 2.0 * g * q

    def reach(self, s, q, g):
        """The largest product score a pair of exact score at most ``s`` can have."""
        if self.l2:
            return s * (1.0 + 2.0 * g) + 3.0 * g * q
        return s + 2.0 * g * q


def _integer_magnitude(U: np.ndarray, Q: np.ndarray) -> float | None:
    """The largest magnitude of the rows when every value is an integer, else None."""
    if U.size and not (np.array_equal(U[0], np.round(U[0])) and np.array_equal(Q[0], np.round(Q[0]))):
        return None  # the first row tells for most data
    if not (np.array_equal(U, np.round(U)) and (Q is U or np.array_equal(Q, np.round(Q)))):
        return None
    return max(float(np.abs(U).max()), float(np.abs(Q).max())) if U.size else 0.0


_GROUP = 8
# _smallest's top-k runs on at most this many columns (or 16 c): a top-k costs a few ns per
# column and row, the group minima a fraction of that
_DIRECT_COLUMNS = 1024


def _select_levels(n: int, c: int) -> int:
    """How many times _smallest groups ``n`` columns by eight before its top-k."""
    levels = 0
    while n > max(16 * c, _DIRECT_COLUMNS):
        n = -(-n // _GROUP)
        levels += 1
    return levels


def _smallest(A: torch.Tensor, c: int, levels: int):
    """The ``c`` smallest entries of each row of ``A`` (any order): NumPy (values, int64 columns).

    Every entry left out is at least the largest value kept. The columns (a
    multiple of ``8 ** levels``) are cut into 8 strided groups (column ``g + j *
    n_groups`` in group ``g``) and the group minima taken, ``levels`` times over;
    the selection runs on the last minima, then inside the ``c`` chosen groups of each
    level down: its ``c`` groups of smallest minimum hold the ``c`` smallest entries
    below them, and every group left out has a minimum at least the largest kept.
    """
    b = A.shape[0]
    tiers = [A]
    for _ in range(levels):
        top = tiers[-1]
        tiers.append(top.view(b, _GROUP, top.shape[1] // _GROUP).amin(1))
    values, cols = _first_columns(tiers[-1].numpy(), c)
    for tier in reversed(tiers[:-1]):
        n_groups = tier.shape[1] // _GROUP
        members = (cols[:, :, None] + np.arange(_GROUP) * n_groups).reshape(b, -1)
        values, pos = _first_columns(np.take_along_axis(tier.numpy(), members, 1), c)
        cols = np.take_along_axis(members, pos, 1)
    return values, cols


def _first_columns(X: np.ndarray, c: int):
    """The ``c`` smallest entries of each row of ``X``: (values, int64 columns), columns ascending.

    Every entry left out is at least the largest kept, and of the entries tied at
    the largest kept value the lowest columns are kept. NumPy's partition of the
    values (SIMD) gives each row's ``c``-th smallest value ``t``; the entries below
    ``t`` and the first at ``t`` make up the ``c``. Several times faster than a
    top-k (or an argpartition) of a few hundred columns.
    """
    b, m = X.shape
    if c >= m:
        return X.copy(), np.broadcast_to(np.arange(m), (b, m)).copy()
    t = np.partition(X, c - 1, axis=1)[:, c - 1 : c]
    mask = X <= t
    over = np.flatnonzero(_row_counts(mask) != c)  # entries tied at t beyond the c-th
    if over.size:
        sub, t_over = X[over], t[over]
        below, tied = sub < t_over, sub == t_over
        room = c - _row_counts(below)
        mask[over] = below | (tied & (np.cumsum(tied, axis=1) <= room[:, None]))
    flat = np.flatnonzero(mask)
    values = X.reshape(-1)[flat].reshape(b, c)
    return values, flat.reshape(b, c) - (np.arange(b) * m)[:, None]


def _sorted_by_value(values: np.ndarray, cols: np.ndarray):
    """Each row of ``values`` ascending, ``cols`` alongside (ties in any order).

    float32 values and their columns are packed into one 64-bit key (the value's
    bits mapped to an unsigned order, the column below) and sorted as integers:
    about half the time of an argsort and two gathers.
    """
    if values.dtype != np.float32 or values.shape[1] == 0 or int(cols.max()) >= 1 << 32:
        order = np.argsort(values, axis=1)
        return np.take_along_axis(values, order, 1), np.take_along_axis(cols, order, 1)
    bits = values.view(np.uint32)
    negative = bits >= np.uint32(1 << 31)
    key = np.where(negative, ~bits, bits | np.uint32(1 << 31)).astype(np.uint64) << np.uint64(32)
    key |= cols.astype(np.uint64)
    key.sort(axis=1)
    high = (key >> np.uint64(32)).astype(np.uint32)
    bits = np.where(high >= np.uint32(1 << 31), high & np.uint32((1 << 31) - 1), ~high)
    return bits.view(np.float32), (key & np.uint64(0xFFFFFFFF)).astype(np.int64)


# Candidates per query from the products beyond the K needed.
GEMM_MARGIN = 8
# A failed row whose band of possible ties holds more than this many references per
# needed neighbour is left to float64 products, then to an exact scan.
_BAND_PER_NEIGHBOUR = 64
# Query rows per product block: _GEMM_ROWS, up to 4x as many while a block holds at most
# _GEMM_BLOCK_SCORES scores (which, and the selection's passes over them, stay in the cache)
_GEMM_ROWS = 512
_GEMM_BLOCK_SCORES = 1 << 21
# A float32 pass hands its remaining rows to float64 products once a block has more than
# this share of wide rows (the data's float32 bound is too loose to certify).
_WIDE_SHARE = 0.25


def _gemm_search(U, Qu, K, metric, refs, budget_bytes, counters, workers, prod=None):
    """Candidates from products, certified or completed from a band of possible ties, then exact scores."""
    if prod is None:
        prod = _Products(metric, U, Qu, min(U.shape[0], K + GEMM_MARGIN))
    Q, offset, scale = prod.query(Qu)
    results = _Results(Qu.shape[0], K, refs)
    UT = _feature_major(metric, U)
    wide = np.arange(Qu.shape[0])
    for float64 in prod.passes():
        if not wide.size:
            break
        wide = _gemm_pass(prod, Q, offset, scale, wide, float64, Qu, U, UT, metric, results, budget_bytes, counters,
                          workers)
    counters["rows_exact_scan"] += wide.size
    _scan(results, wide, Qu, U, UT, metric, budget_bytes)
    return results.result()


def _gemm_pass(prod, Q, offset, scale, rows_in, float64, Qu, U, UT, metric, results, budget_bytes, counters, workers):
    """Settle the query rows ``rows_in`` from float32 or float64 products; returns the rows left wide."""
    n_u = U.shape[0]
    K = results.K
    c = min(n_u, K + GEMM_MARGIN)
    g = prod.gamma(float64)
    dtype = torch.float64 if float64 else torch.float32
    itemsize = 8 if float64 else 4
    block = _rows_per_block(budget_bytes, (itemsize + 2) * prod.n_pad, min(4 * _GEMM_ROWS, max(_GEMM_ROWS, _GEMM_BLOCK_SCORES // prod.n_pad)))
    Qt = torch.from_numpy(Q if float64 else Q.astype(np.float32))
    all_rows = rows_in.size == Q.shape[0] and np.array_equal(rows_in, np.arange(rows_in.size))  # blocks are slices
    local = threading.local()
    give_up = threading.Event()  # float32: the bound is too loose, float64 takes the rest

    def work(span):
        rows = rows_in[span[0] : span[1]]
        if give_up.is_set():
            return rows, 0
        b = rows.size
        if getattr(local, "buffer", None) is None:
            local.buffer = torch.empty((block, prod.n_pad), dtype=dtype)
        A = prod.scores(Qt[span[0] : span[1]] if all_rows else Qt[torch.from_numpy(rows)], local.buffer[:b])
        values, cols = _sorted_by_value(*_smallest(A, c, prod.levels))
        q, off = scale[rows], offset[rows]
        approx = values.astype(np.float64) + off[:, None]  # ascending: adding one value per row keeps the order
        kth = prod.upper(_kth_scores(approx, cols, K, results.refs, ascending=True), q, g)  # at least the exact K-th score
        reach = prod.reach(kth, q, g)  # product scores of pairs that may score up to it
        if c >= n_u:
            certified = np.ones(b, dtype=bool)
        else:  # what was left out has a product score of at least the largest kept one
            certified = prod.lower(approx[:, -1], q, g) > kth
        cert = np.flatnonzero(certified)
        for part, width in _by_width((approx[cert] <= reach[cert, None]).sum(1), cert):
            if g == 0.0:  # exact products (integers: every partial sum exact, in any order) are exact_scores' values
                results.dense(rows[part], cols[part, :width], approx[part, :width])
            else:
                cand = np.sort(cols[part, :width], axis=1)
                results.dense(rows[part], cand, _exact_dense(metric, Qu[rows[part]], U, UT, cand, budget_bytes),
                              ascending=True)
        open_rows = np.flatnonzero(~certified)
        if not open_rows.size:
            return rows[:0], 0
        if 4 * open_rows.size >= b:  # many: the band of the whole block (no copy of the open rows; the others reach none)
            limit = np.full(b, -np.inf)
            limit[open_rows] = (reach - off)[open_rows]
            (r, u, a), too_wide = _band(A.numpy(), limit, g == 0.0, c, _BAND_PER_NEIGHBOUR * K)
        else:
            (r, u, a), too_wide = _band(A.numpy()[open_rows], (reach - off)[open_rows], g == 0.0, c,
                                        _BAND_PER_NEIGHBOUR * K)
            r, too_wide = open_rows[r], open_rows[too_wide]
        S = a + off[r] if g == 0.0 else _exact_pairs(metric, Qu, U, UT, rows[r], u, budget_bytes)
        results.pairs(rows[r], u, S)
        if not float64 and too_wide.size > _WIDE_SHARE * b:
            give_up.set()
        return rows[too_wide], open_rows.size

    if rows_in.size * prod.n_pad * prod.d < _PARALLEL_MIN_GEMM:
        workers = 1
    done = _run_blocks(work, _split(rows_in.size, block, workers), workers)
    counters["rows_tie_complete"] += sum(n for _, n in done)
    return np.concatenate([w for w, _ in done])


def _band(A: np.ndarray, limit: np.ndarray, exact: bool, c: int, cap: int):
    """Entries (row, column, product score) each row of ``A`` may need, and the rows too wide.

    ``limit``: per row, the largest product score that may belong to the K nearest.
    Exact products (integers): every column below the limit and the first ``c``
    columns at it (a tie at the K-th score is settled by the lowest distinct
    references). Else every column up to the limit, rows with more than ``cap``
    of them left to the caller.
    """
    lim = limit.astype(A.dtype)[:, None]  # rounded to nearest, as the product scores
    if exact:
        r_lt, u_lt = _nonzero(A < lim)
        r_eq, u_eq = _nonzero(A == lim)
        keep = np.arange(len(r_eq)) - np.searchsorted(r_eq, r_eq) < c
        rows = np.concatenate([r_lt, r_eq[keep]])
        cols = np.concatenate([u_lt, u_eq[keep]]).astype(np.int64)
        return (rows, cols, A[rows, cols].astype(np.float64)), np.zeros(0, dtype=np.int64)
    # one step up: a score that rounds onto the limit still counts
    mask = A <= np.nextafter(lim, A.dtype.type(np.inf))
    narrow = _row_counts(mask) <= cap
    r, u = _nonzero(mask if narrow.all() else mask[narrow])
    return (np.flatnonzero(narrow)[r], u, None), np.flatnonzero(~narrow)


def _row_counts(mask: np.ndarray) -> np.ndarray:
    """True entries per row of a boolean matrix (a byte sum: twice as fast as count_nonzero along rows)."""
    return mask.view(np.uint8).sum(1, dtype=np.int64)


def _nonzero(mask: np.ndarray):
    """np.nonzero of a boolean matrix (rows, columns: int64, row-major), from the flat positions (several times faster)."""
    flat = np.flatnonzero(mask)
    rows = flat // max(1, mask.shape[1])
    return rows, flat - rows * mask.shape[1]
