"""J48's pessimistic error estimates: the upper confidence bound of a node's training errors.

Weka's ``Stats.addErrs`` (:func:`add_errors`) and the array forms pruning evaluates it with:
:func:`_add_errors_vec` for subtree replacement, :func:`_add_errors_exact` and
:func:`exact_estimated_errors` (the same operations in the same order as the scalar one, so that
the vectorised subtree raising is the node-by-node recursion bit for bit), and
:class:`_WholeEstimates` for whole-count class distributions.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm

__all__ = ["add_errors"]

#: Weka's ``Utils.SMALL``: J48 compares weights, gains and estimates to within this, ties included.
_SMALL = 1e-6

# the normal quantile of each confidence factor met (scipy's ppf is slow next to the arithmetic it feeds)
_Z_CACHE: dict = {}


def _z_of(cf):
    """The normal quantile of confidence ``cf`` (at most 0.5), computed once per value."""
    if cf > 0.5:
        raise ValueError(f"confidence must be at most 0.5; got {cf}")
    z = _Z_CACHE.get(cf)
    if z is None:
        z = _Z_CACHE[cf] = float(norm.ppf(1 - cf))
    return z


def add_errors(N: float, e: float, cf: float) -> float:
    """Weka's ``Stats.addErrs``: extra errors at the upper confidence bound ``cf`` of ``e`` errors in ``N``.

    Examples
    --------
    >>> round(add_errors(6, 0, 0.25), 4), round(add_errors(14, 5, 0.25), 4)
    (1.2378, 1.7611)
    """
    if cf > 0.5:
        raise ValueError(f"confidence must be at most 0.5; got {cf}")
    if e < 1:
        base = N * (1 - math.pow(cf, 1 / N))
        if e == 0:
            return base
        return base + e * (add_errors(N, 1, cf) - base)
    if e + 0.5 >= N:
        return max(N - e, 0.0)
    z = _z_of(cf)
    f = (e + 0.5) / N
    r = (f + (z * z) / (2 * N) + z * math.sqrt((f / N) - (f * f / N) + (z * z / (4 * N * N)))) / (1 + (z * z) / N)
    return (r * N) - e


def _normal_upper(N, e, z):
    """Weka's ``addErrs`` for ``1 <= e < N - 0.5``: the normal approximation of the upper confidence bound."""
    f = (e + 0.5) / N
    r = (f + (z * z) / (2 * N) + z * np.sqrt((f / N) - (f * f / N) + (z * z / (4 * N * N)))) / (1 + (z * z) / N)
    return (r * N) - e


def _add_errors_vec(N, e, cf):
    """Vectorised :func:`add_errors`."""
    z = _z_of(cf)

    def normal(N, e):
        f = (e + 0.5) / N
        root = np.sqrt(np.maximum(f / N - f * f / N + z * z / (4 * N * N), 0))
        r = (f + z * z / (2 * N) + z * root) / (1 + z * z / N)
        return r * N - e

    def upper(N, e):
        return np.where(e + 0.5 >= N, np.maximum(N - e, 0.0), normal(N, e))

    with np.errstate(divide="ignore", invalid="ignore"):
        base = N * (1 - np.power(cf, 1 / N))
        low = base + e * (upper(N, np.ones_like(e)) - base)
        return np.where(e < 1, np.where(e == 0, base, low), upper(N, e))


def _add_errors_exact(N, e, cf):
    """:func:`add_errors` over arrays with the same operations in the same order (``math.pow``), bit for bit."""
    z = _z_of(cf)

    def upper(N, e):  # e >= 1
        res = np.empty(N.shape)
        hi = e + 0.5 >= N
        d = N[hi] - e[hi]
        res[hi] = np.where(0.0 > d, 0.0, d)
        lo = ~hi
        if lo.any():
            res[lo] = _normal_upper(N[lo], e[lo], z)
        return res

    N = np.asarray(N, dtype=np.float64)
    e = np.asarray(e, dtype=np.float64)
    out = np.empty(N.shape)
    small = e < 1
    if not small.all():
        out[~small] = upper(N[~small], e[~small])
    if small.any():
        Ns, es = N[small], e[small]
        # math.pow once per distinct weight (whole counts repeat a lot): the same numbers, fewer Python calls
        xs, inv = np.unique(Ns, return_inverse=True)
        base = Ns * (1 - np.array([math.pow(cf, 1 / x) for x in xs.tolist()])[inv])
        res = base.copy()
        nz = es != 0
        if nz.any():
            res[nz] = base[nz] + es[nz] * (upper(Ns[nz], np.ones(int(nz.sum()))) - base[nz])
        out[small] = res
    return out


def _pairwise_rows(A):
    """Row sums of ``A`` (2-D), each summed as NumPy sums one contiguous row (pairwise, 8 accumulators), bit for bit."""
    A = np.asarray(A, dtype=np.float64)
    return _pairwise(A, 0, A.shape[1])


def _pairwise(A, lo, n):
    if n < 8:
        res = np.full(A.shape[0], -0.0)
        for i in range(lo, lo + n):
            res = res + A[:, i]
        return res
    if n <= 128:
        r = A[:, lo:lo + 8].copy()
        i = 8
        while i < n - n % 8:
            r += A[:, lo + i:lo + i + 8]
            i += 8
        res = ((r[:, 0] + r[:, 1]) + (r[:, 2] + r[:, 3])) + ((r[:, 4] + r[:, 5]) + (r[:, 6] + r[:, 7]))
        while i < n:
            res = res + A[:, lo + i]
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise(A, lo, n2) + _pairwise(A, lo + n2, n - n2)


def exact_estimated_errors(dist, cf):
    """J48's estimated errors of the class distributions ``dist`` (rows): the errors of each as a leaf plus
    :func:`add_errors` of them, 0 for an empty one; each row as the recursion computes one distribution, bit for bit
    (its weight summed as NumPy sums a row, the bound by :func:`_add_errors_exact`).

    Examples
    --------
    >>> exact_estimated_errors(np.array([[4.0, 2.0], [0.0, 0.0]]), 0.25).round(4).tolist()
    [3.3213, 0.0]
    """
    total = _pairwise_rows(dist)
    errors = total - (dist.max(1) if dist.shape[1] else np.zeros(dist.shape[0]))
    out = np.zeros(dist.shape[0])
    ok = ~(np.abs(total) < _SMALL)
    if ok.any():
        out[ok] = errors[ok] + _add_errors_exact(total[ok], errors[ok], cf)
    return out


#: J48 keeps a subtree only where it is estimated to make more than this many errors fewer than the simpler
#: alternative (a leaf, or its largest branch): near ties go to the smaller tree.
SUBTREE_MARGIN = 0.1


def prune_decision(e_leaf, e_tree, e_branch):
    """J48's decision (``C45PruneableClassifierTree.prune``) for nodes with these estimated errors as a leaf, as
    their subtree and as their largest branch: ``(to_leaf, keep)``; neither: the largest branch is raised.

    Examples
    --------
    >>> to_leaf, keep = prune_decision(np.array([5.0, 9.0, 9.0]), np.array([5.0, 6.0, 6.0]), np.array([9.0, 9.0, 6.05]))
    >>> to_leaf.tolist(), keep.tolist()
    ([True, False, False], [False, True, False])
    """
    to_leaf = (e_leaf - (e_tree + SUBTREE_MARGIN) < _SMALL) & (e_leaf - (e_branch + SUBTREE_MARGIN) < _SMALL)
    keep = ~to_leaf & ~(e_branch - (e_tree + SUBTREE_MARGIN) < _SMALL)
    return to_leaf, keep


#: Rows :class:`_WholeEstimates` estimates at a time: a block's temporaries stay in cache and are reused rather than
#: freshly mapped, while a call's fixed cost is spread over many rows.
EST_BLOCK = 1 << 13


class _WholeEstimates:
    """J48's estimated errors of whole-count class distributions (rows of ``D``), bit for bit those of
    ``e + _add_errors_exact(N, e, cf)`` (0 where ``N`` is 0), with little work per call.

    Pruning estimates many batches, most of them small, where a call's fixed cost is what counts, and a
    few of hundreds of thousands of rows, estimated in blocks of ``EST_BLOCK`` rows that stay in cache.
    With whole counts a row sums exactly in any order (a plain ``sum``), the only error-free term,
    ``math.pow(cf, 1 / N)``, depends on the whole ``N`` alone and is kept in a table filled as new ``N``
    appear (no ``np.unique`` per call), and every case is evaluated for all rows and then selected.
    """

    def __init__(self, cf, n):
        self.cf = cf
        self.z = _z_of(cf)
        # math.pow(cf, 1 / N) by whole N (never 0 for 0 < cf), 0 until needed; zeros, not a fill, so that the
        # pages of the N never met are not written
        self.pow_of = np.zeros(int(n) + 1)
        self.slot = np.zeros(int(n) + 1, dtype=np.int64)  # scratch of the distinct new N

    def __call__(self, D, totals=False):
        """The estimates of the rows of ``D``; with ``totals``, also the rows' sums (first)."""
        m = D.shape[0]
        if m <= EST_BLOCK:
            N, out = self._block(D)
        else:
            N, out = np.empty(m), np.empty(m)
            for lo in range(0, m, EST_BLOCK):
                N[lo:lo + EST_BLOCK], out[lo:lo + EST_BLOCK] = self._block(D[lo:lo + EST_BLOCK])
        return (N, out) if totals else out

    def _block(self, D):
        """``(N, estimates)`` of the rows of ``D``."""
        # NumPy reduces the short rows of D several times slower than the long rows of its transpose
        by_class = np.ascontiguousarray(D.T)
        N = by_class.sum(0)
        e = N - by_class.max(0)
        has = N >= 1
        Ni = N.astype(np.int64)
        p = self.pow_of[Ni]
        new = (p == 0) & has
        if new.any():
            # the distinct new N (of the positions scattered to one N, exactly one is read back)
            xs = Ni[new]
            at = np.arange(xs.size)
            self.slot[xs] = at
            xs = xs[self.slot[xs] == at]
            self.pow_of[xs] = [math.pow(self.cf, 1 / x) for x in xs.astype(np.float64).tolist()]
            p = self.pow_of[Ni]
        with np.errstate(divide="ignore", invalid="ignore"):
            # whole counts: the largest is at least 1 where N is, so e + 0.5 < N and add_errors's other case
            # (e + 0.5 >= N) never arises
            out = e + np.where(e < 1, N * (1 - p), _normal_upper(N, e, self.z))
        return N, np.where(has, out, 0.0)
