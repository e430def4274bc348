"""The matrix-product path of the host kNN search: candidates from BLAS products, certified or completed from a band of possible ties.

Products of float32 (data centred: :func:`_reference_centre`) or float64 rows, or
exact integer products, propose each query's candidates (:class:`_Products`
bounds how far a product score may be from the exact one); a cheap grouped
selection (:func:`_smallest`) keeps the smallest product scores (how many:
:class:`_Candidates`, more where blocks leave many rows open). Rows whose
bound does not certify the candidates take every reference whose product score
may reach their K-th score; rows whose band is wide are redone with float64
products, and rows still wide scan every distinct reference (:mod:`._host_exact`).
At many features a certified row's first K candidates are scored exactly first,
and its list cut where the largest of those scores rules out the rest
(``NARROW_MIN_FEATURES``).
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from ...core.distance import Metric
from ._host_exact import (_by_width, _exact_dense, _exact_pairs, _feature_major, _first_columns, _kth_scores, _nonzero,
                          _padded_positions, _Results, _row_counts, _rows_per_block, _scan)
from ._host_threads import _PARALLEL_MIN_GEMM, _run_blocks, _split, _thread_pool

_U32 = 2.0**-24
_U64 = 2.0**-53
# the spacing of subnormal numbers: a product or sum below the normal range rounds by up to half of it
_TINY32 = 2.0**-149
_TINY64 = 2.0**-1074


# Rows (about, strided) the heavy-tail tests read and the median is taken over, and how far the mean squared
# distance to a centre must exceed most rows' for the median centre to be tried (_reference_centre)
_CENTRE_TEST_ROWS = 64
_CENTRE_SAMPLE_ROWS = 256
_CENTRE_TAIL = 4.0
# Searches of fewer (query, reference) pairs keep the mean untested: the tests' cost on rows not yet in the
# cache is about a percent of such a search, more than the few heavy-tailed sets gain there
_CENTRE_TEST_MIN_PAIRS = 1 << 22


def _reference_centre(U: np.ndarray, n_query: int) -> np.ndarray:
    """The point the L2 products are centred at: the reference mean, or where a few far rows pull the mean
    away from most of them, the coordinate-wise median of a row sample.

    Any centre keeps the results exact (the bounds of :class:`_Products` are
    stated for the centred rows); it sets how tight they are. A product score
    errs by up to ``g (3 |x|^2 + 2 s)`` with ``|x|`` the query's distance to the
    centre, so a row's candidates are certified where that is small beside the
    gaps between its neighbours' distances. Heavy-tailed features (counts,
    lengths, money) leave the mean far from the typical row. A small strided
    sample of rows tells: most of it under a ``_CENTRE_TAIL``-th of its mean
    squared distance to the mean (its own far rows pull the mean), or its own
    mean that far from the reference mean (far rows it missed pull it). Then
    the median of a larger sample is taken if it at least halves the typical
    (median) squared distance (35_SpamBase: to an eighth; BENCHMARKS.md,
    "Design measurements quoted in the code"). The median is formed only where
    the sample tells of a tail, and only searches of at least
    ``_CENTRE_TEST_MIN_PAIRS`` pairs are tested.
    """
    mean = U.mean(0)
    if U.shape[0] * n_query < _CENTRE_TEST_MIN_PAIRS:
        return mean
    test = U[:: max(1, U.shape[0] // _CENTRE_TEST_ROWS)]
    off = test - mean
    sq = np.einsum("ij,ij->i", off, off)
    spread = sq.mean()
    drift = mean - test.mean(0)
    if not (2 * np.count_nonzero(_CENTRE_TAIL * sq < spread) > sq.size or _CENTRE_TAIL * (drift @ drift) > spread):
        return mean
    sample = U[:: max(1, U.shape[0] // _CENTRE_SAMPLE_ROWS)]
    median = np.median(sample, 0)
    to_mean, to_median = (np.einsum("ij,ij->i", sample - c, sample - c) for c in (mean, median))
    half = sample.shape[0] // 2
    return median if np.partition(to_median, half)[half] < 0.5 * np.partition(to_mean, half)[half] else mean


class _Products:
    """Reference rows for the products, and how far a product score can be from the exact one.

    ``offset[i] + (Q @ YT + bias)[i, j]`` approximates the exact score of query i
    and reference j, in float32 or float64. L2 is centred (:func:`_reference_centre`: no
    cancellation far from the origin), except for integers small enough that the
    products are exact: in float32 (``exact32``), else in float64 (``exact64``).
    Inner products of such integers run float64 products only; L2 (``int_l2``)
    proposes candidates from centred float32 products (half the cost of float64
    ones) and scores them exactly from their integer dot products
    (:func:`_integer_l2_dense`), float64 products (uncentred: exact) taking the
    rows the float32 bound leaves open. Reference columns are padded to a multiple
    of 8 per selection level with a bias of +inf, so the selection needs no tail.
    """

    def __init__(self, metric: Metric, U: np.ndarray, Qu: np.ndarray, c: int):
        self.name = metric.name
        n_u, self.d = U.shape
        self.n_u = n_u
        self.l2 = self.name in ("euclidean", "sqeuclidean")
        largest = _integer_magnitude(U, Qu) if self.l2 or self.name == "inner_product" else None
        # integer L2 partial sums stay below 4 d M^2, inner products below d M^2
        bits = None if largest is None else 4.0 * self.d * largest * largest
        self.exact32 = bits is not None and bits < 2.0**24
        self.exact64 = bits is not None and bits < 2.0**53
        self.int_l2 = self.l2 and self.exact64 and not self.exact32
        self.centre = _reference_centre(U, Qu.shape[0]) if self.l2 and not self.exact64 else None
        self.centre32 = _reference_centre(U, Qu.shape[0]) if self.int_l2 else self.centre  # the float32 products' rows
        self.yy = (U * U).sum(1) if self.int_l2 else None  # exact: integer partial sums below 2^53
        Y, ynorm = self._rows(U, self.centre)
        self.levels = _select_levels(n_u, c)
        step = _GROUP**self.levels
        self.n_pad = -(-n_u // step) * step
        bias = np.full(self.n_pad, np.inf)
        sq = np.einsum("ij,ij->i", Y, Y) if self.l2 else None
        bias[:n_u] = sq if self.l2 else 0.0
        self.bias64 = torch.from_numpy(bias)
        self._YT64 = None  # formed where float64 products or scores run (YT64)
        self._own = (U, Y, ynorm, sq)  # the references' rows, reused where the queries are the references
        self.YT32 = self.bias32 = None
        if not self.exact64 or self.exact32 or self.int_l2:  # float32 products run
            # the reference rows as the products' operand (-2 y or -y rounded to float32), padded row-major
            # (the products take the transposed view: no strided copy); int_l2: centred rows
            Yp32 = np.zeros((self.n_pad, self.d), dtype=np.float32)
            rows32 = self._rows(U, self.centre32)[0] if self.int_l2 else Y
            np.multiply(rows32, -2.0 if self.l2 else -1.0, out=Yp32[:n_u], casting="same_kind")
            self.YT32 = Yp32.T
            bias32 = bias.copy()
            if self.l2:  # the squared norms of the rows the products see (-2 y, halved exactly)
                bias32[:n_u] = 0.25 * np.einsum("ij,ij->i", Yp32[:n_u], Yp32[:n_u], dtype=np.float64)
            self.bias32 = bias32.astype(np.float32)
        self.max_norm = float(ynorm.max()) if self.name == "inner_product" else 0.0

    def _rows(self, X: np.ndarray, centre):
        if centre is not None:
            return X - centre, None
        norm = np.sqrt((X * X).sum(1))
        if self.name == "cosine":
            return X / np.where(norm > 0, norm, 1.0)[:, None], norm
        return X, norm

    def float32_finite(self, offset: np.ndarray) -> bool:
        """Whether the float32 products stay finite: every squared norm they see (the references' ``bias32``,
        the queries' ``offset``) below ``_FLOAT32_MAX_NORM``. An overflowed product is NaN or infinite, and a
        NaN compares as no candidate: data this wide takes the float64 products instead."""
        return bool(self.bias32[: self.n_u].max(initial=0.0) < _FLOAT32_MAX_NORM
                    and offset.max(initial=0.0) < _FLOAT32_MAX_NORM)

    def passes(self):
        """The precisions to try in turn (float64: True)."""
        if self.exact32:
            return (False,)
        return (True,) if self.exact64 and not self.int_l2 else (False, True)

    def query(self, Q: np.ndarray, float64: bool):
        """Query rows (float64) for the float64 or float32 products, per-row offset, and the per-row scale of the error bound."""
        own = Q is self._own[0] and (float64 or self.centre32 is self.centre)  # the queries are the references
        rows, norm, sq = self._own[1:] if own else (*self._rows(Q, self.centre if float64 else self.centre32), None)
        if self.l2:
            sq = (rows * rows).sum(1) if sq is None else sq
            return rows, sq, sq
        if self.name == "cosine":
            return rows, np.ones(len(Q)), np.ones(len(Q))
        return rows, np.zeros(len(Q)), norm * self.max_norm

    @property
    def YT64(self) -> torch.Tensor:
        """The float64 products' reference rows (-2 y or -y; int_l2: the integer rows), padded, transposed view.

        Formed on first use: the search's thread forms it before its blocks
        (:func:`_gemm_pass`) where float64 products or scores run."""
        if self._YT64 is None:
            Yp = np.zeros((self.n_pad, self.d))
            np.multiply(self._own[1], -2.0 if self.l2 else -1.0, out=Yp[: len(self._own[1])])
            self._YT64 = torch.from_numpy(Yp).T
        return self._YT64

    def own_rows(self, Qu: np.ndarray) -> bool:
        """Whether the queries ``Qu`` are the references, whose float32 product rows are ``YT32``'s halved by -2:
        L2 centred at :func:`_reference_centre` (float32 products first; not :attr:`int_l2`, whose float32 rows are centred apart)."""
        return self.centre is not None and Qu is self._own[0]

    def bound_scale(self, scale: np.ndarray, float64: bool) -> np.ndarray:
        """``scale`` (of :meth:`query`) for :meth:`lower`/:meth:`upper`/:meth:`reach` with the products' absolute
        error beside their relative one: products and sums below the normal range round by up to half a
        subnormal step each, whatever their size (float32 data near 1e-22 has no normal products)."""
        g = self.gamma(float64)
        if g == 0.0:  # exact products
            return scale
        tiny = (2 * self.d + 4) * (_TINY64 if float64 else _TINY32)
        return scale + tiny / ((3.0 if self.l2 else 2.0) * g)  # the bounds multiply the scale by 3 g or 2 g

    def gamma(self, float64: bool) -> float:
        """Relative error of one product score: the rounding of both rows (the data may be
        float64, products float32) and of the d-term sums, 2 (d + 6) units, doubled."""
        if self.exact32 or (float64 and self.exact64):
            return 0.0
        return 4.0 * (self.d + 6) * (_U64 if float64 else _U32)

    def scores(self, Q: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``Q @ YT + bias`` into ``out``: float64 by torch, float32 by NumPy's BLAS (OpenBLAS's float32
        products ran 1.1-2.4x as fast as torch's on the host measured: BENCHMARKS.md, design measurements)."""
        if out.dtype == torch.float64:
            return torch.addmm(self.bias64, Q, self.YT64, out=out)
        A = out.numpy()
        np.matmul(Q.numpy(), self.YT32, out=A)
        A += self.bias32
        return out

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


# Squared norms below this keep the float32 products finite: |x.y| <= |x| |y|, so a query's product row
# plus a reference's bias stays below 2^126 (float32's largest value is about 2^128)
_FLOAT32_MAX_NORM = 2.0**124


def _integer_magnitude(U: np.ndarray, Q: np.ndarray) -> float | None:
    """The largest magnitude of the rows when every value is an integer, else None."""
    if U.size and not (np.array_equal(U[0], np.round(U[0])) and np.array_equal(Q[0], np.round(Q[0]))):
        return None  # the first row tells for most data
    if not (np.array_equal(U, np.round(U)) and (Q is U or np.array_equal(Q, np.round(Q)))):
        return None
    return max(float(np.abs(U).max()), float(np.abs(Q).max())) if U.size else 0.0


_GROUP = 8


def _select_levels(n: int, c: int) -> int:
    """How many times _smallest groups ``n`` columns by eight before its threshold or its partition.

    Up to ``_MASK_MAX_COLUMNS`` columns (a threshold): while the groups stay at
    least half as many again as ``c`` (the c-th smallest group minimum is then
    still close above each row's c-th entry: about 1.5 c entries at or below it
    where the values are spread) and the padding of the columns to a multiple of
    the group size stays within 1/32 of them. Above (a partition of the minima):
    until at most ``max(16 c, _PARTITION_COLUMNS)`` minima are left.
    """
    levels, size = 0, 1
    if n > _MASK_MAX_COLUMNS:
        while n > max(16 * c, _PARTITION_COLUMNS):
            n = -(-n // _GROUP)
            levels += 1
        return levels
    while 2 * -(-n // (size * _GROUP)) >= 3 * c and -(-n // (size * _GROUP)) * size * _GROUP - n <= max(_GROUP, n // 32):
        levels, size = levels + 1, size * _GROUP
    return levels


# Rows of up to this many columns: _smallest compares every entry with a threshold from the
# group minima (one pass over the scores); longer rows: a partition of the group minima and
# of the chosen groups' members, level by level (no pass over the scores but the minima's)
_MASK_MAX_COLUMNS = 8192
# the partition of the minima runs on at most this many columns (or 16 c): a partition costs a
# few ns per column and row, the group minima a fraction of that
_PARTITION_COLUMNS = 1024
# Rows with more entries at or below their threshold than this many per kept entry (wide
# ties) are selected by a partition of the whole row instead
_SURVIVORS_PER_KEPT = 4


def _smallest(A: torch.Tensor, c: int, levels: int):
    """At least the ``c`` smallest entries of each row of ``A``, ascending: NumPy (values, int64 columns, kept).

    Row i keeps ``kept[i] >= c`` entries, padded to a common width with +inf (and
    column 0); every entry left out is at least the largest value kept (ties in
    any order).
    The columns (a multiple of ``8 ** levels``) are cut into 8 strided groups
    (column ``g + j * n_groups`` in group ``g``) and the group minima taken,
    ``levels`` times over.

    Up to ``_MASK_MAX_COLUMNS`` columns, the c-th smallest of the last minima,
    ``t``, is at least each row's c-th smallest entry (``c`` groups hold an entry
    at or below it): the entries at or below ``t`` (one pass over ``A``; about
    1.5 c where the values are spread) are sorted and kept: beyond the c-th they
    cost nothing more, and they certify rows whose c-th product score is close to
    their K-th. Rows with more than ``_SURVIVORS_PER_KEPT * c`` of them (wide ties)
    keep the ``c`` of a partition of the whole row instead. Above,
    :func:`_smallest_by_groups` (``c`` each).
    """
    b, n = A.shape
    X = A.numpy()
    if c >= n:
        return (*_sorted_by_value(X, np.broadcast_to(np.arange(n), (b, n))), np.full(b, n))
    if n > _MASK_MAX_COLUMNS:
        return (*_sorted_by_value(*_smallest_by_groups(A, c, levels)), np.full(b, c))
    M = A
    for _ in range(levels):
        M = M.view(b, _GROUP, M.shape[1] // _GROUP).amin(1)
    M = M.numpy()
    t = np.partition(M, c - 1, axis=1)[:, c - 1 : c] if M.shape[1] > c else M.max(1, keepdims=True)
    flat = np.flatnonzero(X <= t)
    rows = flat // n
    counts = np.bincount(rows, minlength=b)
    heavy = np.flatnonzero((counts > _SURVIVORS_PER_KEPT * c) | (counts < c))  # fewer: NaN scores
    if heavy.size:
        keep = np.ones(b, dtype=bool)
        keep[heavy] = False
        keep = keep[rows]
        flat, rows = flat[keep], rows[keep]
        counts[heavy] = 0
    width = max(int(counts.max()), c)
    kept = counts.copy()
    kept[heavy] = c
    dest = _padded_positions(counts, width)
    cols = flat - rows * n
    if X.dtype == np.float32 and n < 1 << 32:  # one padded array of 64-bit keys, sorted as integers
        key = np.full(b * width, _INF_KEY, dtype=np.uint64)  # padding: +inf, column 0
        key[dest] = _sort_keys(X.reshape(-1)[flat], cols)
        key = key.reshape(b, width)
        if heavy.size:
            key[heavy, :c] = _sort_keys(*_first_columns(X[heavy], c))
        key.sort(axis=1)
        return (*_from_sort_keys(key), kept)
    V = np.full(b * width, np.inf, dtype=X.dtype)
    C = np.zeros(b * width, dtype=np.int64)
    V[dest], C[dest] = X.reshape(-1)[flat], cols
    V, C = V.reshape(b, width), C.reshape(b, width)
    if heavy.size:
        V[heavy, :c], C[heavy, :c] = _first_columns(X[heavy], c)
    order = np.argsort(V, axis=1)
    return np.take_along_axis(V, order, 1), np.take_along_axis(C, order, 1), kept


def _smallest_by_groups(A: torch.Tensor, c: int, levels: int):
    """The ``c`` smallest entries of each row of ``A`` (any order): NumPy (values, int64 columns).

    Every entry left out is at least the largest value kept. The group minima
    of :func:`_smallest`, ``levels`` times over; the selection runs on the last
    minima, then inside the ``c`` chosen groups of each level down: its ``c``
    groups of smallest minimum hold the ``c`` smallest entries below them, and
    every group left out has a minimum at least the largest kept.
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


def _sort_keys(values: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """float32 values and their columns (below 2^32) as 64-bit keys whose integer order is the values' order."""
    bits = values.view(np.uint32)
    key = np.where(bits >= np.uint32(1 << 31), ~bits, bits | np.uint32(1 << 31)).astype(np.uint64) << np.uint64(32)
    key |= cols.astype(np.uint64)
    return key


_INF_KEY = np.uint64(0xFF800000 << 32)  # _sort_keys of (+inf, column 0)


def _from_sort_keys(key: np.ndarray):
    high = (key >> np.uint64(32)).astype(np.uint32)
    bits = np.where(high >= np.uint32(1 << 31), high & np.uint32((1 << 31) - 1), ~high)
    return bits.view(np.float32), (key & np.uint64(0xFFFFFFFF)).astype(np.int64)


def _sorted_by_value(values: np.ndarray, cols: np.ndarray):
    """Each row of ``values`` ascending, ``cols`` alongside (ties in any order).

    float32 values and their columns are packed into one 64-bit key (the value's
    bits mapped to an unsigned order, the column below) and sorted as integers:
    about half the time of an argsort and two gathers.
    """
    if values.dtype != np.float32 or values.shape[1] == 0 or int(cols.max()) >= 1 << 32:
        order = np.argsort(values, axis=1)
        return np.take_along_axis(values, order, 1), np.take_along_axis(cols, order, 1)
    key = _sort_keys(values, cols)
    key.sort(axis=1)
    return _from_sort_keys(key)


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


# A block with at least this share of its rows left open (their band of possible ties taken from every
# column) raises the candidates the blocks still to start keep (_Candidates)
_WIDEN_OPEN_SHARE = 0.25
# ... to this percentile of the open rows' band widths, at most twice the first count
_WIDEN_PERCENTILE = 75


class _Candidates:
    """How many candidates each block of a pass keeps from its products (``c``) and the selection's levels.

    Starts at ``K + GEMM_MARGIN``. A row is certified when what it left out
    cannot reach its K-th score; rows that are not take a band of every column
    that can (:func:`_band`: a pass over the row, its pairs scored one by one).
    Where a block leaves many rows open, the blocks still to start keep about
    as many candidates as those rows' bands held (``_WIDEN_PERCENTILE``, at most
    twice the first count): most rows are then certified from the selection's
    own candidates, which the certified rows' scoring takes in dense blocks
    (8_celeba: ties of binary features; BENCHMARKS.md, "Design measurements
    quoted in the code"). The count changes the work, not the results: each
    block selects, certifies and completes its rows with its own count.
    """

    def __init__(self, c: int, n_u: int, levels: int):
        self._first, self._n_u, self._max_levels = c, n_u, levels
        self._now = (c, levels)
        self._lock = threading.Lock()

    def now(self) -> tuple[int, int]:
        """``(c, levels)`` for a block starting now (levels: at most the products' padding allows)."""
        return self._now

    def seen(self, band_widths: np.ndarray) -> None:
        """A finished block's open rows' band widths (references each may need)."""
        want = min(self._n_u, 2 * self._first, int(np.ceil(np.percentile(band_widths, _WIDEN_PERCENTILE))))
        with self._lock:
            if want > self._now[0]:
                self._now = (want, min(self._max_levels, _select_levels(self._n_u, want)))


def _gemm_search(U, Qu, K, metric, refs, budget_bytes, counters, workers, prod=None, float32_scores=False):
    """Candidates from products, certified or completed from a band of possible ties, then exact scores.

    ``float32_scores``: the results are returned in float32 (where certified,
    float64 product scores stand in for exact ones: :func:`_certified_scores`).
    """
    if prod is None:
        prod = _Products(metric, U, Qu, min(U.shape[0], K + GEMM_MARGIN))
    results = _Results(Qu.shape[0], K, refs)
    own, UT = None, None  # own: the references' products with themselves (_symmetric_products)
    if prod.d >= SYMMETRIC_MIN_FEATURES and prod.own_rows(Qu):
        own, UT = _symmetric_products(prod, U.shape[0], budget_bytes * workers, workers, lambda: _feature_major(metric, U))
    else:
        UT = _feature_major(metric, U)
    wide = np.arange(Qu.shape[0])
    for float64 in prod.passes():
        if not wide.size:
            break
        Q, offset, scale = prod.query(Qu, float64)
        if not float64 and not prod.float32_finite(offset):
            continue  # the float64 products take every row
        wide = _gemm_pass(prod, Q, offset, scale, wide, float64, Qu, U, UT, metric, results, budget_bytes, counters,
                          workers, float32_scores, None if float64 else own)
        own = None  # the float32 pass read it: its memory goes before the next pass's buffers
    counters["rows_exact_scan"] += wide.size
    _scan(results, wide, Qu, U, UT, metric, budget_bytes)
    return results.result()


def _gemm_pass(prod, Q, offset, scale, rows_in, float64, Qu, U, UT, metric, results, budget_bytes, counters, workers,
               float32_scores=False, own=None):
    """Settle the query rows ``rows_in`` from float32 or float64 products; returns the rows left wide.

    ``own``: :func:`_symmetric_products` of every query row (the references themselves, float32 products),
    its rows scaled in place here.
    """
    n_u = U.shape[0]
    K = results.K
    candidates = _Candidates(min(n_u, K + GEMM_MARGIN), n_u, prod.levels)
    g = prod.gamma(float64)
    dtype = torch.float64 if float64 else torch.float32
    itemsize = 8 if float64 else 4
    block = _rows_per_block(budget_bytes, (itemsize + 2) * prod.n_pad, min(4 * _GEMM_ROWS, max(_GEMM_ROWS, _GEMM_BLOCK_SCORES // prod.n_pad)))
    all_rows = rows_in.size == Q.shape[0] and np.array_equal(rows_in, np.arange(rows_in.size))  # blocks are slices
    assert own is None or all_rows
    Qt = None if own is not None else torch.from_numpy(Q if float64 else Q.astype(np.float32))
    # float32 L2 results where a candidate's float64 product score may stand in for its exact score
    certify = float32_scores and prod.l2 and not prod.int_l2 and prod.d >= ESTIMATE_MIN_FEATURES
    if float64 or certify:
        prod.YT64  # noqa: B018  (formed once here, not by the threads)
    local = threading.local()
    give_up = threading.Event()  # float32: the bound is too loose, float64 takes the rest

    def plain_exact(cand, X, query_rows):
        """Exact scores of query rows ``X`` (block rows ``query_rows``) against candidates ``cand``."""
        if prod.l2 and Qu is U and prod.d >= SELF_SKIP_MIN_FEATURES and np.array_equal(cand[:, 0], query_rows):
            # each row's first candidate is itself: its score is 0
            S = np.zeros(cand.shape)
            S[:, 1:] = _exact_dense(metric, X, U, UT, cand[:, 1:], budget_bytes)
            return S
        return _exact_dense(metric, X, U, UT, cand, budget_bytes)

    def work(span):
        rows = rows_in[span[0] : span[1]]
        if give_up.is_set():
            return rows, 0
        b = rows.size
        if own is not None:  # this block's rows of the symmetric products, scaled and shifted in place
            A = own[span[0] : span[1]]
            # (-2 y) . (-2 x) / -2 = -2 x . y: exact, but for subnormal products (within the bounds' absolute term)
            np.multiply(A, -0.5, out=A)
            A += prod.bias32
            A = torch.from_numpy(A)
        else:
            if getattr(local, "buffer", None) is None:
                local.buffer = torch.empty((block, prod.n_pad), dtype=dtype)
            A = prod.scores(Qt[span[0] : span[1]] if all_rows else Qt[torch.from_numpy(rows)], local.buffer[:b])
        c, levels = candidates.now()
        values, cols, kept = _smallest(A, c, levels)
        q, off = (scale[span[0] : span[1]], offset[span[0] : span[1]]) if all_rows else (scale[rows], offset[rows])
        approx = values.astype(np.float64) + off[:, None]  # ascending: adding one value per row keeps the order
        qb = prod.bound_scale(q, float64)
        kth = prod.upper(_kth_scores(approx, cols, K, results.refs, ascending=True), qb, g)  # at least the exact K-th score
        reach = prod.reach(kth, qb, g)  # product scores of pairs that may score up to it
        if c >= n_u:
            certified = np.ones(b, dtype=bool)
        else:  # what was left out has a product score of at least the largest kept one
            certified = (prod.lower(approx[np.arange(b), kept - 1], qb, g) > kth) | (kept >= n_u)
        cert = np.flatnonzero(certified)
        every = cert.size == b  # every row certified (most blocks): slices, no copies
        need = ((approx if every else approx[cert]) <= reach[cert, None]).sum(1)
        first = None  # exact scores of each certified row's first K candidates, where they narrow its list
        if (_NARROW and g > 0.0 and not prod.int_l2 and not certify and results.refs.identity
                and prod.d >= NARROW_MIN_FEATURES and int((need - K).sum()) >= max(_NARROW_MIN_EXTRA * cert.size,
                                                                             _NARROW_MIN_TERMS // prod.d)):
            X = Qu[span[0] : span[1]] if every and all_rows else Qu[rows[cert]]
            first = plain_exact(cols[:, :K] if every else cols[cert, :K], X, rows[cert])
            # K references score at most their largest exact score: the K-th does too. Each of the K has a
            # product score within reach of it where the bound holds; at least K stay where it does not
            need = np.maximum(((approx if every else approx[cert]) <= prod.reach(first.max(1), qb[cert], g)[:, None]).sum(1), K)
        for part, width in _by_width(need, cert, _SPARE_TERMS // prod.d):
            width = min(width, cols.shape[1])
            whole = part.size == b and all_rows  # the block's own rows, in order
            cand = cols[:, :width] if part.size == b else cols[part, :width]  # ascending product scores: about the exact order
            if g == 0.0:  # exact products (integers: every partial sum exact, in any order) are exact_scores' values
                results.nearly_sorted(rows[part], cand, approx[:, :width] if part.size == b else approx[part, :width])
                continue
            X = Qu[span[0] : span[1]] if whole else Qu[rows[part]]
            short = kept[part] < width
            padding = (np.arange(width) >= kept[part, None]) if short.any() else None  # a row's entries past its kept ones (column 0)
            if first is not None:  # the first K scored already (kept >= K: none of them is padding)
                S = np.empty(cand.shape)
                S[:, :K] = first if part.size == cert.size else first[np.searchsorted(cert, part)]
                if width > K:
                    S[:, K:] = _exact_dense(metric, X, U, UT, cand[:, K:], budget_bytes)
            elif prod.int_l2:
                S = _integer_l2_dense(X, U, prod.yy, cand)
            elif certify:
                sub = slice(span[0], span[1]) if whole else rows[part]
                scores = approx[:, :width] if part.size == b else approx[part, :width]
                S = _certified_scores(prod, Q[sub], q[part], cand, scores, float64, padding, metric, Qu, U, UT,
                                      rows[part], budget_bytes)
            else:
                S = plain_exact(cand, X, rows[part])
            if padding is not None:
                S[padding] = np.inf
            results.nearly_sorted(rows[part], cand, S)
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
        if open_rows.size >= _WIDEN_OPEN_SHARE * b:
            widths = np.bincount(r, minlength=b)[open_rows]
            widths = widths[widths > 0]  # rows too wide for a band (0 here) are the float64 pass's
            if widths.size:
                candidates.seen(widths)
        if g == 0.0:
            S = a + off[r]
        elif certify and r.size:
            S = _certified_pairs(prod, Q, q[r], r, u, A.numpy()[r, u] + off[r], float64, metric, Qu, U, UT, rows[r],
                                 budget_bytes)
        else:
            S = _exact_pairs(metric, Qu, U, UT, rows[r], u, budget_bytes)
        results.pairs(rows[r], u, S)
        if not float64 and too_wide.size > _WIDE_SHARE * b:
            give_up.set()
        return rows[too_wide], open_rows.size

    if rows_in.size * prod.n_pad * prod.d < _PARALLEL_MIN_GEMM:
        workers = 1
    done = _run_blocks(work, _split(rows_in.size, block, workers), workers)
    counters["rows_tie_complete"] += sum(n for _, n in done)
    return np.concatenate([w for w, _ in done])


# From this many features an L2 search of the references against themselves forms its float32 products
# as one symmetric matrix (_symmetric_products: half the multiply-adds); below, the row blocks' own
# products cost no more (BENCHMARKS.md, "Design measurements quoted in the code")
SYMMETRIC_MIN_FEATURES = 256
# Rows per block of the symmetric products' lower triangle
_SYMMETRIC_ROWS = 256
# The symmetric products use the reference rows (-2 y) on both sides, four times the query's products:
# squared norms below this keep every partial sum finite in float32
_SYMMETRIC_MAX_NORM = 2.0**124


def _symmetric_products(prod: _Products, n: int, budget_bytes: int, workers: int, side):
    """``(products, side())``: ``Yp @ Yp.T`` of the references' float32 product rows ``Yp`` (``-2 y``,
    :attr:`_Products.YT32`), (n, n_pad) with the padding columns 0, or None where it does not fit
    ``budget_bytes`` or may overflow; ``side`` runs on the calling thread while the pool forms the blocks.

    The lower triangle is formed in row blocks over ``workers`` threads, each
    block copying its part transposed into the upper one (the blocks write
    disjoint parts). A block of rows scaled by -1/2 plus ``bias32`` is then the
    float32 products of those queries against every reference: the left operand
    ``-2 y / -2`` is a rounding of the query row as ``y``'s own float32 is (the
    same one where ``-2 y`` is a normal float32), within the products' bound.
    """
    n_pad = prod.n_pad
    if n * n_pad * 4 > budget_bytes or not float(prod.bias32[:n].max()) < _SYMMETRIC_MAX_NORM:
        return None, side()
    Yp = prod.YT32.T  # (n_pad, d), row-major
    S = np.empty((n, n_pad), dtype=np.float32)
    S[:, n:] = 0.0  # padding columns: +inf once the bias is added

    def lower(span):
        s, e = span
        np.matmul(Yp[s:e], Yp[:e].T, out=S[s:e, :e])
        S[:s, s:e] = S[s:e, :s].T

    blocks = [(s, min(n, s + _SYMMETRIC_ROWS)) for s in range(0, n, _SYMMETRIC_ROWS)][::-1]  # the widest first
    if workers <= 1:
        for span in blocks:
            lower(span)
        return S, side()
    pending = [_thread_pool(workers).submit(lower, span) for span in blocks]
    # on the calling thread: its large allocations reuse its heap, where a pool thread's are mapped afresh
    beside = side()
    for job in pending:
        job.result()
    return S, beside


# From this many features, where a block's certified rows hold candidates past their first K that their
# bounds could not rule out (at least _NARROW_MIN_EXTRA per row and _NARROW_MIN_TERMS terms in all), the
# first K are scored exactly first and each list cut where the largest of those scores rules out the rest;
# below, a pair's exact score costs less than the second scoring call's fixed costs, and with fewer extra
# candidates the cut saves little (BENCHMARKS.md, "Design measurements quoted in the code")
NARROW_MIN_FEATURES = 160
_NARROW_MIN_EXTRA = 2
_NARROW_MIN_TERMS = 1 << 16
# False: lists are not narrowed (same-run A/B timings)
_NARROW = True
# Scored terms (pairs x features) a second group of candidate widths would cost in fixed costs (_by_width)
_SPARE_TERMS = 1 << 16
# From this many features a self-search row's own pair (0) is left out of its exact scores; below, its
# few terms save no more than the copies that leave it out cost (BENCHMARKS.md, "Design measurements
# quoted in the code")
SELF_SKIP_MIN_FEATURES = 160
# Query rows per block of _integer_l2_dense (their candidates' rows stay in the cache)
_INTEGER_ROWS = 64


# Features from which float32 results take a candidate's float64 product score where its bound
# certifies the result (_certified_scores): below, the exact scores of the candidates cost no more
# than the gathered products and their checks (BENCHMARKS.md, "Design measurements quoted in the code")
ESTIMATE_MIN_FEATURES = 96
# Query rows per block of the gathered products (their candidates' rows stay in the cache), fewer
# where the budget holds fewer
_ESTIMATE_ROWS = 32
# A float32 step relative to a value (its unit in the last place is at least this much of it)
_F32_STEP = 2.0**-24


def _certified_scores(prod: _Products, Q: np.ndarray, q: np.ndarray, cand: np.ndarray, scores: np.ndarray,
                      float64: bool, padding: np.ndarray | None, metric: Metric, Qu: np.ndarray, U: np.ndarray, UT,
                      rows: np.ndarray, budget_bytes: int) -> np.ndarray:
    """Scores of query rows against candidates ``cand`` (b, w) that order and round to float32 as their exact scores.

    For results returned in float32 (L2): a pair's float64 product score ``E``
    (``scores`` where ``float64``, else a dot product of its centred rows, ``Q``
    and ``prod``'s) lies within
    ``prod.lower``/``prod.upper`` of its exact score (:meth:`Metric.exact_scores`;
    the bound's factor of two over the products' own error covers the chunked sum's
    rounding). Where that interval is apart from every other candidate's of the row
    and both its ends round to one float32, the product score stands in for the
    exact one: it compares with every other score of the row as the exact score
    does (ties included: an equal pair's intervals meet) and rounds to the same
    float32. The other pairs (near ties, duplicates, exact zeros) are scored
    exactly. ``padding`` marks entries past a row's kept candidates (left as they
    are: the caller sets them to +inf). Where ``scores`` are the float32
    products' (``E`` to be formed), rows whose bound is wider than a float32
    step of their largest score (queries far from the products' centre against
    their neighbours' distances) cannot settle a pair and are scored exactly
    without the products.
    """
    b, w = cand.shape
    g = prod.gamma(True)
    if float64:
        E = scores
    else:
        E = np.full((b, w), np.nan)  # NaN: no interval settles, the pair is scored exactly
        largest = np.where(padding, -np.inf, scores).max(1) if padding is not None else scores.max(1)
        live = np.flatnonzero(6.0 * g * q < _F32_STEP * largest)
        Yp = prod.YT64.T.numpy()  # -2 y (centred), row-major
        bias = prod.bias64.numpy()
        step = max(1, min(_ESTIMATE_ROWS, budget_bytes // (8 * w * prod.d)))
        for s0 in range(0, live.size, step):
            at = live[s0 : s0 + step]
            c = cand[at]
            G = np.take(Yp, c.reshape(-1), axis=0, mode="clip").reshape(*c.shape, -1)
            E[at] = np.matmul(G, Q[at, :, None])[..., 0] + bias[c] + q[at, None]  # q: the offset of L2 rows
    qb = prod.bound_scale(q, True)[:, None]
    lo, hi = prod.lower(E, qb, g), prod.upper(E, qb, g)
    if padding is not None:
        lo[padding], hi[padding] = np.inf, np.inf
    order = np.argsort(E if padding is None else np.where(padding, np.inf, E), axis=1)
    lo_s, hi_s = np.take_along_axis(lo, order, 1), np.take_along_axis(hi, order, 1)
    apart = np.ones((b, w), dtype=bool)
    apart[:, 1:] = lo_s[:, 1:] > np.maximum.accumulate(hi_s, axis=1)[:, :-1]  # above every interval before
    apart[:, :-1] &= hi_s[:, :-1] < np.minimum.accumulate(lo_s[:, ::-1], axis=1)[:, ::-1][:, 1:]  # below every one after
    settled = np.empty_like(apart)
    np.put_along_axis(settled, order, apart, 1)
    settled &= lo.astype(np.float32) == hi.astype(np.float32)
    if padding is not None:
        settled |= padding
    r, j = _nonzero(~settled)
    S = E.copy() if float64 else E  # the caller's scores stay as they are
    if Qu is U and r.size:  # a query row against itself: exactly 0
        own = cand[r, j] == rows[r]
        S[r[own], j[own]] = 0.0
        r, j = r[~own], j[~own]
    if r.size:
        S[r, j] = _exact_pairs(metric, Qu, U, UT, rows[r], cand[r, j], budget_bytes)
    S[S <= 0.0] = 0.0  # L2 scores are never negative: a settled pair's product score below 0 is +0 exactly
    return S


def _certified_pairs(prod: _Products, Q: np.ndarray, q: np.ndarray, r: np.ndarray, u: np.ndarray, scores: np.ndarray,
                     float64: bool, metric: Metric, Qu: np.ndarray, U: np.ndarray, UT, rows: np.ndarray,
                     budget_bytes: int) -> np.ndarray:
    """:func:`_certified_scores` of flat pairs (block row ``r``, reference ``u``; ``r`` ascending, every entry of a row)."""
    present, first, counts = np.unique(r, return_index=True, return_counts=True)
    at = np.arange(r.size) - np.repeat(first, counts)  # each pair's place in its row
    slot = np.repeat(np.arange(present.size), counts)
    cand = np.zeros((present.size, int(counts.max())), dtype=np.int64)
    cand[slot, at] = u
    padding = np.arange(cand.shape[1]) >= counts[:, None]
    dense_scores = np.full(cand.shape, np.inf)
    dense_scores[slot, at] = scores
    S = _certified_scores(prod, Q[rows[first]], q[first], cand, dense_scores, float64, padding if padding.any() else None,
                          metric, Qu, U, UT, rows[first], budget_bytes)
    return S[slot, at]


def _integer_l2_dense(X: np.ndarray, U: np.ndarray, yy: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Exact L2 scores of query ``X[i]`` against references ``idx[i, j]`` for integer rows (``_Products.int_l2``): (b, w).

    ``|x|^2 + |y|^2 - 2 x.y`` from a dot product of each candidate pair: every
    partial sum an integer below 2^53, so each step is exact in any order and the
    score is the exact squared distance, as ``exact_scores`` forms it.
    """
    b, w = idx.shape
    out = np.empty((b, w))
    for s0 in range(0, b, _INTEGER_ROWS):
        x = X[s0 : s0 + _INTEGER_ROWS]
        cand = idx[s0 : s0 + _INTEGER_ROWS]
        dots = np.matmul(np.take(U, cand.reshape(-1), axis=0, mode="clip").reshape(*cand.shape, -1), x[:, :, None])[..., 0]
        out[s0 : s0 + _INTEGER_ROWS] = ((x * x).sum(1)[:, None] + yy[cand]) - 2.0 * dots
    return out


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
