"""Exact scores and the selection under the tie rule, shared by the host kNN paths.

The exact float64 score of a (query, reference) pair, bit for bit
``metric.exact_scores`` (formed in NumPy for the L2, L1 and L-inf metrics); the
first K originals of each query row by (exact score, original index) from dense
or flat candidates (:class:`_Results`); the bounded fallback that scores every
distinct reference (:func:`_scan`); and the small-search path that scores every
pair (:func:`_direct_search`). The candidate paths (:mod:`._host_tree`,
:mod:`._host_gemm`) propose candidates; everything here decides the order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from ...core.distance import EXACT_SUM_CHUNK, Metric

if TYPE_CHECKING:
    from ._host import _Groups


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


def _terms_in_place(name: str, G: np.ndarray) -> None:
    """Per-feature differences to per-feature terms: |x - y| for L1 and L-inf, (x - y)^2 else."""
    if name in ("manhattan", "chebyshev"):
        np.abs(G, out=G)
    else:
        np.multiply(G, G, out=G)


def _reduce_terms(name: str, G: np.ndarray) -> np.ndarray:
    """Exact scores from the per-feature differences ``G`` (features first; overwritten)."""
    _terms_in_place(name, G)
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


# From this many features the candidates' rows are gathered whole (one copy of each row) and
# reduced chunk by chunk across every pair at once (_reduce_rows); below, the feature-major gather
# and its one pass per feature (_reduce_terms) cost less (BENCHMARKS.md, "Design measurements
# quoted in the code")
_ROW_GATHER_MIN_FEATURES = 160


def _chunk_positions(d: int) -> np.ndarray:
    """The feature order of :func:`_feature_major`'s row copy: position 0 of every ``EXACT_SUM_CHUNK`` chunk, then
    position 1, ..., then the last chunk's features where it is short."""
    full = d // EXACT_SUM_CHUNK
    by_position = np.arange(full * EXACT_SUM_CHUNK).reshape(full, EXACT_SUM_CHUNK).T.reshape(-1)
    return np.concatenate([by_position, np.arange(full * EXACT_SUM_CHUNK, d)])


def _reduce_rows(name: str, G: np.ndarray) -> np.ndarray:
    """Exact scores from per-feature differences ``G``, one row per pair, features in :func:`_chunk_positions` order
    (overwritten).

    The order of :func:`_reduce_terms`: the chunks' terms left to right (one NumPy
    pass per position in the chunk, over a contiguous run of every chunk of every
    pair), then the chunk sums left to right (over the pairs, contiguous).
    """
    _terms_in_place(name, G)
    if name == "chebyshev":
        return G.max(1)
    pairs, d = G.shape
    full = d // EXACT_SUM_CHUNK
    total = None
    if full:
        part = np.add(G[:, :full], G[:, full : 2 * full])
        for j in range(2, EXACT_SUM_CHUNK):
            part += G[:, j * full : (j + 1) * full]
        by_chunk = np.ascontiguousarray(part.T)
        total = by_chunk[0].copy()
        for c in range(1, full):
            total += by_chunk[c]
    c0 = full * EXACT_SUM_CHUNK
    if d > c0:
        last = np.ascontiguousarray(G[:, c0:].T)
        tail = last[0].copy() if d - c0 == 1 else np.add(last[0], last[1])
        for f in range(2, d - c0):
            tail += last[f]
        total = tail if total is None else np.add(total, tail, out=total)
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
    """The references' copy for the NumPy exact scores (float64), or None (torch form).

    Feature by feature, (d, n); from ``_ROW_GATHER_MIN_FEATURES`` features row by
    row, (n, d), with the features in :func:`_chunk_positions` order (the rows are
    gathered whole and :func:`_reduce_rows` adds contiguous runs).
    """
    if metric.name not in _NUMPY_EXACT:
        return None
    if U64.shape[1] >= _ROW_GATHER_MIN_FEATURES:
        return np.take(U64, _chunk_positions(U64.shape[1]), axis=1)
    return np.ascontiguousarray(U64.T)


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
    if UT is not None and Q64.shape[1] >= _ROW_GATHER_MIN_FEATURES:
        step = _numpy_pairs_per_block(Q64.shape[1], budget_bytes)
        positions = None if Q64 is U64 else _chunk_positions(Q64.shape[1])  # the queries are the references: UT
        for s0 in range(0, len(rows), step):
            G = np.take(UT, uids[s0 : s0 + step], axis=0, mode="clip")
            if positions is None:
                G -= np.take(UT, rows[s0 : s0 + step], axis=0)
            else:
                G -= np.take(np.take(Q64, rows[s0 : s0 + step], axis=0), positions, axis=1)
            out[s0 : s0 + step] = _reduce_rows(metric.name, G)
        return out
    if UT is not None:
        step = _numpy_pairs_per_block(Q64.shape[1], budget_bytes)
        for s0 in range(0, len(rows), step):
            G = np.take(UT, uids[s0 : s0 + step], axis=1, mode="clip")  # in range: clip only skips the check
            if Q64 is U64:  # the queries are the references: gathered from UT too, in G's layout
                G -= np.take(UT, rows[s0 : s0 + step], axis=1, mode="clip")
            else:
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
    d = Q64.shape[1]
    if UT is not None and d >= _ROW_GATHER_MIN_FEATURES:
        step = max(1, _numpy_pairs_per_block(d, budget_bytes) // w)
        positions = _chunk_positions(d)
        for s0 in range(0, b, step):
            # (rows, candidates, features): each candidate's row copied whole
            G = np.take(UT, idx[s0 : s0 + step], axis=0, mode="clip")
            G -= np.take(Q64[s0 : s0 + step], positions, axis=1)[:, None, :]
            out[s0 : s0 + step] = _reduce_rows(metric.name, G.reshape(-1, d)).reshape(-1, w)
        return out
    if UT is not None:
        step = max(1, _numpy_pairs_per_block(Q64.shape[1], budget_bytes) // w)
        for s0 in range(0, b, step):
            # (features, rows, candidates); the indices are in range: "clip" only skips their check
            G = np.take(UT, idx[s0 : s0 + step], axis=1, mode="clip")
            G -= Q64[s0 : s0 + step].T[:, :, None]
            out[s0 : s0 + step] = _reduce_terms(metric.name, G)
        return out
    step = max(1, _pairs_per_chunk(Q64.shape[1], budget_bytes) // w)
    for s0 in range(0, b, step):
        S = metric.exact_scores(torch.from_numpy(Q64[s0 : s0 + step]), torch.from_numpy(U64[idx[s0 : s0 + step]]))
        out[s0 : s0 + step] = S.numpy()
    return out


def _by_width(counts: np.ndarray, rows: np.ndarray, spare_pairs: int = 0):
    """``rows`` (with ``counts`` candidates each, ascending first) as (rows, width) groups to score.

    Rows needing few candidates (most) are scored apart from the few with near
    ties, whose longer lists would otherwise set the width of all; unless one
    group of the widest width costs at most ``spare_pairs`` more pairs (a second
    group's fixed cost is larger than that many pairs' scores).
    """
    if not rows.size:
        return []
    narrow = int(np.min(counts)) + 1
    few = counts <= narrow
    if few.all():
        return [(rows, narrow)]
    n_wide = rows.size - int(np.count_nonzero(few))
    widest = int(counts.max())
    if (widest - narrow) * (rows.size - n_wide) <= spare_pairs:
        return [(rows, widest)]
    return [(rows[few], narrow), (rows[~few], widest)]


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

    def nearly_sorted(self, rows: np.ndarray, idx: np.ndarray, S: np.ndarray) -> None:
        """As :meth:`dense`, for candidates already in about the order of their scores (by close approximations).

        Rows whose first K entries are in (score, index) order with every later entry
        after the K-th (most rows: only near ties reorder) are taken as they are, the
        others sorted by :meth:`dense`.
        """
        if not rows.size:
            return
        K = self.K
        if not self.refs.identity or idx.shape[1] < K:
            self.dense(rows, idx, S)
            return
        s, i = S[:, :K], idx[:, :K]
        ok = (s[:, 1:] > s[:, :-1]).all(1)  # strictly ascending: no tie to look at
        if idx.shape[1] > K:
            ok &= (S[:, K:] > s[:, K - 1 : K]).all(1)
        bad = np.flatnonzero(~ok)
        if bad.size:  # ties in index order pass too
            sb, ib, Sb, Ib = s[bad], i[bad], S[bad], idx[bad]
            ok = ((sb[:, 1:] > sb[:, :-1]) | ((sb[:, 1:] == sb[:, :-1]) & (ib[:, 1:] > ib[:, :-1]))).all(1)
            if idx.shape[1] > K:
                last_s, last_i = sb[:, -1:], ib[:, -1:]
                ok &= ((Sb[:, K:] > last_s) | ((Sb[:, K:] == last_s) & (Ib[:, K:] > last_i))).all(1)
            bad = bad[~ok]
        if rows[-1] - rows[0] == rows.size - 1 and (np.diff(rows) == 1).all():  # consecutive rows: one copy
            self.scores[rows[0] : rows[-1] + 1], self.index[rows[0] : rows[-1] + 1] = s, i
        else:
            self.scores[rows], self.index[rows] = s, i
        if bad.size:
            self.dense(rows[bad], idx[bad], S[bad])

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
    if rows.size and UT is not None and U64.shape[1] >= _ROW_GATHER_MIN_FEATURES:  # the row copy: by feature here
        UT = np.ascontiguousarray(U64.T)
    for s0 in range(0, rows.size, step):
        chunk = rows[s0 : s0 + step]
        if UT is not None:
            S = _every_pair(metric.name, Q64[chunk], UT)
        else:
            S = metric.exact_scores(torch.from_numpy(Q64[chunk]), torch.from_numpy(U64)[None]).numpy()
        results.dense(chunk, np.broadcast_to(everything, S.shape), S, ascending=True)


# -- small searches: every pair (below _host.DIRECT_MAX_TERMS) ------------------------------------

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


# _direct_products_search: up to this many (query, reference) pairs and (query, reference,
# feature) terms, at most this many neighbours per row, and at least this many references per
# neighbour. There the products and the exact scores of a few pairs per row cost less than every
# pair's exact score (or the products path's candidate machinery); with longer lists the pairs'
# gathered scores cost more, and with more pairs the passes over the whole score matrix
# (BENCHMARKS.md, "Design measurements quoted in the code")
DIRECT_PRODUCTS_MAX_PAIRS = 1 << 16
DIRECT_PRODUCTS_MAX_TERMS = 1 << 21
DIRECT_PRODUCTS_MAX_K = 6
DIRECT_PRODUCTS_REFS_PER_NEIGHBOUR = 12
_U64 = 2.0**-53
_SUBNORMAL_STEP = 2.0**-1074  # each rounding below float64's normal range errs by at most half of it


def direct_products_apply(metric: Metric, n_q: int, n_u: int, d: int, K: int) -> bool:
    """Whether a small L2 search runs :func:`_direct_products_search` (see ``DIRECT_PRODUCTS_MAX_TERMS``)."""
    return (metric.name in ("euclidean", "sqeuclidean") and n_q * n_u <= DIRECT_PRODUCTS_MAX_PAIRS
            and n_q * n_u * d <= DIRECT_PRODUCTS_MAX_TERMS and K <= DIRECT_PRODUCTS_MAX_K
            and K * DIRECT_PRODUCTS_REFS_PER_NEIGHBOUR <= n_u)


def _direct_products_search(U: np.ndarray, Qu: np.ndarray, K: int, metric: Metric, budget_bytes: int):
    """:func:`_direct_search` for L2, from float64 products and the exact scores of the pairs they cannot rule out.

    With centred rows ``x' = fl(x - m)``, ``y' = fl(y - m)`` (``m`` the reference
    mean), the product score ``a = fl(|x'|^2 + |y'|^2 - 2 x'.y')`` and a pair's
    exact score ``e`` (:meth:`Metric.exact_scores`, float64) differ by at most
    ``E = 4 (d + 6) (u R^2 + t)`` (``u = 2^-53``, ``R = |x'| + |y'|``, ``t`` the
    least subnormal, for roundings below the normal range): the centring moves the
    true score ``s`` by at most ``3 u R^2``, the products' sums (any order) err by at
    most ``gamma_{d+2} R^2``, and ``e`` by ``gamma_{d+2} s``. Per row, with
    ``R`` taken at the largest reference norm, the K-th exact score is at most the
    K-th product score plus ``E``; a reference whose product score is above that
    plus ``E`` scores above it exactly and cannot be among the K. The others (at
    least K per row) are scored exactly and ordered by (score, index): the same
    lists and scores as every pair's exact scores, whatever the ties.
    """
    n_q = Qu.shape[0]
    centre = U.mean(0)
    Uc = U - centre
    Qc = Uc if Qu is U else Qu - centre
    uu = np.einsum("ij,ij->i", Uc, Uc)
    qq = uu if Qc is Uc else np.einsum("ij,ij->i", Qc, Qc)
    A = Qc @ Uc.T
    A *= -2.0
    A += qq[:, None]
    A += uu[None, :]
    reach = np.sqrt(qq) + np.sqrt(uu.max())
    E = 4.0 * (Qu.shape[1] + 6) * (_U64 * reach * reach + _SUBNORMAL_STEP)
    if not (np.isfinite(A).all() and np.isfinite(E).all()):  # products beyond float64's range: every pair
        return _direct_search(U, Qu, K, metric, budget_bytes)
    kth = np.partition(A, K - 1, axis=1)[:, K - 1]
    rows, cols = _nonzero(A <= (kth + 2.0 * E)[:, None])
    S = _exact_pairs(metric, Qu, U, _feature_major(metric, U), rows, cols, budget_bytes)
    return _first_of_rows(S, cols, np.bincount(rows, minlength=n_q), K)


def _first_of_rows(S: np.ndarray, cols: np.ndarray, counts: np.ndarray, K: int):
    """The first ``K`` pairs of each row by (score, column): pairs listed row by row, a row's columns
    ascending, row i holding ``counts[i] >= K`` of them. Returns (rows, K) scores and columns.

    The rows are padded to the longest (+inf, after a row's own pairs) and sorted stably
    by score: equal scores keep their columns' ascending order. Rows of K pairs each
    (no ties at a bound) need no padding, nor do ``S``/``cols`` given as (rows, longest
    row) arrays already padded that way (as :func:`._host_threshold.threshold_search` does).
    """
    n, width = counts.size, int(counts.max(initial=K))
    if S.size == n * width:
        S, cols = S.reshape(n, width), cols.reshape(n, width)
    else:
        where = _padded_positions(counts, width)
        padded = np.full(n * width, np.inf)
        padded[where] = S
        S = padded.reshape(n, width)
        padded = np.zeros(n * width, dtype=cols.dtype)
        padded[where] = cols
        cols = padded.reshape(n, width)
    order = np.argsort(S, axis=1, kind="stable")[:, :K]
    return np.take_along_axis(S, order, 1), np.take_along_axis(cols, order, 1)


def _padded_positions(counts: np.ndarray, width: int) -> np.ndarray:
    """``row * width + rank`` of each of ``counts.sum()`` entries listed row by row (row i holding ``counts[i]``):
    their places in a (rows, width) array, each row's entries first, in their order."""
    starts = np.cumsum(counts) - counts
    return np.arange(int(counts.sum())) + np.repeat(np.arange(0, counts.size * width, width) - starts, counts)


def _nonzero(mask: np.ndarray):
    """np.nonzero of a boolean matrix (rows, columns: int64, row-major), from the flat positions (several times faster)."""
    flat = np.flatnonzero(mask)
    rows = flat // max(1, mask.shape[1])
    return rows, flat - rows * mask.shape[1]


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


def _row_counts(mask: np.ndarray) -> np.ndarray:
    """True entries per row of a boolean matrix (a byte sum: twice as fast as count_nonzero along rows)."""
    return mask.view(np.uint8).sum(1, dtype=np.int64)
