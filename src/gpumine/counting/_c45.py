"""C4.5 decision trees built from counts (De Silva 2019, sections 3.5.3-3.5.5), with Weka J48's rules.

The tree grows breadth-first. All nodes of one depth are counted together: a
one-column pass gives every node's class distribution, and one contingency pass
gives, for every node that can still split (not pure, not too small) × attribute
level × class, the (weighted) count — by AND + popcount of level bitmaps with node-and-class row bitmaps
(``representation="bitmap"``/``"bitslice"``), or by one bincount over integer
codes (``"histogram"``); ``"auto"`` picks per depth by measured cost. Node
partitions stay on the device (row lists and, for the bitmap path, row bitmaps
made by one scatter per depth), and so does the split search, vectorised over all
nodes of the depth and over the attributes of one kind and number of levels
(per-node × level × class tables and their cumulative sums give every numeric
cut's gain at once, without sorting). The host looks at each depth twice: the
nodes' class distributions, then the chosen splits; the node tables that route
the rows are built on the device from the latter. While counts are whole
numbers (no sample weights, no missing value routed) the tables stay int64, and
on the CPU a child with more rows than its siblings gets its table as its
parent's minus theirs.

J48 rules followed (weka.classifiers.trees.j48, C4.5 release 8): gain ratio
among attributes whose information gain is at least the average (minus 1e-3);
multiway splits on nominal attributes, binary ``<=`` splits on numeric ones with
the MDL correction ``log2(#candidate cuts) / N`` and the minimum split size
``clip(0.1 * N / n_classes, min_samples_leaf, 25)``; at least two branches with
``min_samples_leaf`` instances; missing values: gain scaled by the known
fraction, split information with the unknowns as an extra branch, instances
with a missing value sent down every branch with fractional weights, and the
same at prediction time; collapsing and pessimistic (confidence-bound) pruning
by subtree replacement and, as J48 by default, subtree raising (a node may be
replaced by its largest branch, the training instances of the other branches
re-distributed into it; ``subtree_raising=False`` is ``J48 -S``). Not done:
Laplace leaves, reduced-error pruning.

Numeric attributes with more than ``max_bins`` distinct values are cut into
``max_bins`` equal-frequency bins first (cut points only between bins; exact
J48 otherwise).
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import pandas as pd
import torch
from scipy.stats import norm
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d

from .._validation import output_kind, to_output
from ..config import resolve_backend, resolve_device
from ._bits import pack_codes, pack_groups
from ._ops import (
    and_count_matrix,
    contingency_tables,
    grouped_histogram,
    histogram_backend,
    level_offsets,
    measured_costs,
    representation_costs,
)
from ._encode import MAX_LEVELS
from ._store import BitmapStore
from .._device_state import HostPickleMixin

__all__ = ["C45Classifier", "add_errors"]

_SMALL = 1e-6
_LN2 = math.log(2.0)
_REPRESENTATIONS = ("auto", "bitmap", "bitslice", "histogram")

#: Most distinct values of a nominal feature (the store's limit on levels of one column).
MAX_NOMINAL_VALUES = MAX_LEVELS


_Z_CACHE: dict = {}

#: A child's count table is derived from its parent's when that saves counting at least this many times
#: ``levels x classes / attributes`` rows: the subtraction touches every cell of the table, the count every
#: (row, attribute) entry.
SIBLING_MIN_SAVED = 1.0


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


def _lnf(x):
    return torch.where(x < _SMALL, torch.zeros_like(x), x * torch.log(x.clamp_min(1e-300)))


class _LnfTable:
    """:func:`_lnf` of whole counts by one gather from a table of ``_lnf(0 .. n)``.

    The split search evaluates ``x log x`` on every cell of the per-depth count
    tables (six passes and a log each); unweighted counts are integers at most
    ``n``, so a lookup gives the same values (the table holds ``_lnf`` of the same
    float64 numbers) in one pass.
    """

    def __init__(self, n, device):
        self.table = _lnf(torch.arange(int(n) + 1, dtype=torch.float64, device=device))

    def __call__(self, x):
        x = x.to(torch.int64)
        return self.table.index_select(0, x.reshape(-1)).reshape(x.shape)


class _Columns:
    """Per-feature encoding of a training matrix into ordered / nominal codes."""

    def __init__(self, X: np.ndarray, nominal: np.ndarray, max_bins: int, names, device=None):
        self.nominal = nominal
        self.names = names
        self.n_known, self.has_missing, self.values, self.bin_max, self.bin_min = [], [], [], [], []
        # codes of X found while finding its values (small whole numbers, strings), for encode_train(X): per column,
        # or, for an integer matrix, all of them at once as the (n, d) matrix encode_train returns
        self._source, self._codes, self._matrix = X, {}, None
        if isinstance(X, np.ndarray) and X.dtype.kind in "iu":
            found = None
            if device is not None and torch.device(device).type == "cuda" and X.dtype in _CUDA_ENCODED_TYPES:
                found = _small_int_matrix_codes_cuda(X, torch.device(device))
            if found is None:
                found = _small_int_matrix_codes(X)
            if found is None:
                X = X.astype(np.float64)  # the per-column paths read float64 values
            else:
                matrix_values, self._matrix = found
        if isinstance(X, _FrameColumns):
            column = X.column
        else:
            # one column at a time: a contiguous copy of a numeric matrix's columns reads faster than strided columns
            column = (_transposed(X) if X.dtype.kind == "f" else X.T).__getitem__
        for j in range(X.shape[1]):
            strings = X.string_codes(j) if isinstance(X, _FrameColumns) and nominal[j] else None
            if strings is not None:
                col, miss, fast = strings
            elif self._matrix is not None:
                miss, fast = np.zeros(X.shape[0], dtype=bool), (matrix_values[j], None)
            else:
                col = column(j)
                miss = _isna(col)
                known = col[~miss] if miss.any() else col
                fast = _small_int_codes(known)
                if fast is None:
                    fast = _float_codes(known)
            if nominal[j]:
                if fast is None:
                    fast = _str_codes(known)
                if fast is None:
                    vals = _sorted_unique(known)
                elif fast[0].dtype == object:
                    vals = fast[0]
                else:
                    vals = np.empty(fast[0].size, dtype=object)
                    vals[:] = fast[0].tolist()
                if len(vals) > MAX_NOMINAL_VALUES:
                    # a multiway split into this many branches is never useful, and the per-depth count table
                    # (nodes x levels x classes) would grow with it
                    raise ValueError(
                        f"nominal feature {names[j]!r} has {len(vals)} distinct values, more than the "
                        f"{MAX_NOMINAL_VALUES} a nominal split may have; drop it (an identifier?) or pass it as a "
                        "numeric feature (leave it out of categorical_features)"
                    )
                self.values.append(vals)
                self.bin_max.append(None)
                self.bin_min.append(None)
            else:
                vals = np.unique(known.astype(np.float64)) if fast is None else fast[0]
                if vals.size > max_bins:
                    # equal-frequency cuts at data values; bin c holds (cuts[c-1], cuts[c]]
                    q = np.linspace(0, 1, max_bins + 1)[1:-1]
                    if fast is None:
                        cuts = np.unique(np.quantile(known.astype(np.float64), q, method="lower"))
                    else:
                        # from the distinct values and their codes: the same cuts and bins, without partitioning
                        # or searching all of the column (KDD Cup 10 %: five such columns, 0.06 s of 0.45 s)
                        value_codes = fast[1] if self._matrix is None else self._matrix[:, j]
                        cuts = np.unique(_lower_quantiles(vals, value_codes, q))
                    while cuts.size and cuts[-1] >= vals[-1]:
                        cuts = cuts[:-1]
                    if fast is not None:
                        bin_codes = np.searchsorted(cuts, vals, side="left")[value_codes]  # encode_col's, by value
                        if self._matrix is None:
                            fast = (None, bin_codes)
                        else:
                            self._matrix[:, j] = bin_codes
                    self.values.append(("binned", cuts))
                    self.bin_max.append(np.r_[cuts, vals[-1]])
                    self.bin_min.append(np.r_[vals[0], vals[np.searchsorted(vals, cuts, side="right")]])
                else:
                    self.values.append(vals)
                    self.bin_max.append(vals)
                    self.bin_min.append(vals)
            self.n_known.append(self._n_known(j))
            self.has_missing.append(bool(miss.any()))
            if fast is not None and self._matrix is None:
                codes = np.full(col.shape[0], self.n_known[j], dtype=np.int32)  # missing code
                codes[~miss] = fast[1]
                self._codes[j] = codes
        self.n_levels = [k + 1 for k in self.n_known]  # the last level of every column is "missing"

    def _n_known(self, j):
        v = self.values[j]
        if isinstance(v, tuple):
            return int(v[1].size + 1)
        return int(len(v))

    def encode_train(self, X: np.ndarray) -> np.ndarray:
        """Codes ``(n, d)`` int32 of training data (of ``X`` as given to the constructor, found then where they could be)."""
        if X is self._source and self._matrix is not None:
            out = self._matrix
            self._source, self._codes, self._matrix = None, {}, None
            return out
        found = self._codes if X is self._source else {}
        # column by column into rows of the transpose: writing the columns of an (n, d) matrix is strided
        out = np.empty(X.shape[::-1], dtype=np.int32)
        for j in range(X.shape[1]):
            out[j] = found[j] if j in found else self.encode_col(_column(X, j), j, unknown="error")
        self._source, self._codes = None, {}
        return _transposed(out)

    def encode_col(self, col, j, unknown="error"):
        if col.dtype.kind in "iu":
            col = col.astype(np.float64)  # the categories and cuts are float64 values
        miss = _isna(col)
        out = np.full(col.shape[0], self.n_known[j], dtype=np.int32)  # missing code
        known = ~miss
        v = self.values[j]
        if self.nominal[j] and col.dtype.kind == "f" and _all_numbers(v):
            # float input and numeric categories: the lookup by key is a search in the sorted values
            fv = np.asarray(v.tolist(), dtype=np.float64)
            x = col[known]
            codes = np.searchsorted(fv, x) if fv.size else np.zeros(x.shape[0], dtype=np.int64)
            found = codes < fv.size
            found[found] = fv[codes[found]] == x[found]
            if not found.all():
                if unknown == "error":
                    raise ValueError(
                        f"feature {self.names[j]!r} has category {x[~found][0]!r} that was not seen in fit; refit with "
                        "data holding it, or use handle_unknown='missing' to treat it as a missing value"
                    )
                codes = np.where(found, codes, self.n_known[j])
            out[known] = codes
        elif self.nominal[j] and _only_str(col[known]):
            # strings match only the categories whose key is a string (_nkey), by one hash lookup in C
            keys = {}
            for i, x in enumerate(v.tolist()):
                kind, key = _nkey(x)
                if kind == "s":
                    keys[key] = i
            x = col[known]
            hit = pd.Index(list(keys), dtype=object).get_indexer(x) if keys else np.full(x.shape[0], -1)
            codes = np.where(hit >= 0, np.asarray(list(keys.values()) + [0], dtype=np.int64)[hit], -1)
            if (codes < 0).any():
                if unknown == "error":
                    raise ValueError(
                        f"feature {self.names[j]!r} has category {x[codes < 0][0]!r} that was not seen in fit; refit "
                        "with data holding it, or use handle_unknown='missing' to treat it as a missing value"
                    )
                codes = np.where(codes < 0, self.n_known[j], codes)
            out[known] = codes
        elif self.nominal[j]:
            lookup = {_nkey(x): i for i, x in enumerate(v.tolist())}
            codes = np.fromiter((lookup.get(_nkey(x), -1) for x in col[known].tolist()), dtype=np.int64,
                                count=int(known.sum()))
            if (codes < 0).any():
                if unknown == "error":
                    bad = col[known][codes < 0][0]
                    raise ValueError(
                        f"feature {self.names[j]!r} has category {bad!r} that was not seen in fit; refit with data "
                        "holding it, or use handle_unknown='missing' to treat it as a missing value"
                    )
                codes = np.where(codes < 0, self.n_known[j], codes)
            out[known] = codes
        elif isinstance(v, tuple):
            out[known] = np.searchsorted(v[1], col[known].astype(np.float64), side="left")
        else:
            out[known] = np.clip(np.searchsorted(v, col[known].astype(np.float64), side="left"), 0, len(v) - 1)
        return out


def _classes(y):
    """``np.unique(y, return_inverse=True)``, by counting for integer labels in a short range (no sort)."""
    if y.dtype.kind in "iu" and y.size:
        lo, hi = int(y.min()), int(y.max())
        if hi - lo <= max(1 << 16, y.size):
            idx = (y - y.dtype.type(lo)).astype(np.int64)
            present = np.bincount(idx) > 0
            return (np.flatnonzero(present) + lo).astype(y.dtype), (np.cumsum(present) - 1)[idx]
    if y.dtype == object:
        found = _str_codes(y)  # string labels: by hashing (sorting Python strings is the slow part of np.unique)
        if found is not None:
            return found
    return np.unique(y, return_inverse=True)


def _small_int_codes(known):
    """The sorted distinct values of float ``known`` and each value's index among them, by counting, or ``None``.

    For whole numbers in a short range (card suits and ranks, small counts) one bincount over
    ``value - min`` gives what ``np.unique`` and ``np.searchsorted`` give by sorting and searching:
    the same values and the same codes. ``None`` where that does not apply: other dtypes or values,
    a range wider than ``max(2**16, len(known))``, a negative zero (whose sign, as first seen, the
    general paths keep).
    """
    if known.dtype != np.float64 or not known.size:
        return None
    lo, hi = float(known.min()), float(known.max())
    if not (-2.0**52 < lo and hi < 2.0**52) or hi - lo > max(1 << 16, known.size):  # NaN compares False too
        return None
    off = known - lo
    idx = off.astype(np.int64)
    if not np.array_equal(idx, off) or (lo <= 0 <= hi and np.signbit(known[known == 0]).any()):
        return None
    present = np.bincount(idx) > 0
    return np.flatnonzero(present) + lo, (np.cumsum(present) - 1)[idx]


def _counts_fit(lo, hi, shape):
    """Whether whole numbers in ``lo .. hi`` of an ``(n, d)`` matrix are encoded by one table of counts: a range
    of at most ``max(2**16, n)`` values, and a table no larger than the matrix (or ``2**16``)."""
    n, d = shape
    span = hi - lo + 1
    return -2**52 < lo and hi < 2**52 and span - 1 <= max(1 << 16, n) and span * d <= max(n * d, 1 << 16)


def _small_int_matrix_codes(X):
    """:func:`_small_int_codes` of every column of integer matrix ``X`` (as float64), at once, or ``None``.

    One bincount over ``value - min + column * range`` (min and range of all of ``X``) finds every
    column's distinct values, and one lookup gives the codes of all of ``X`` as an ``(n, d)`` int32
    matrix in row order: no float64 copy and no transposes, five passes over ``X`` instead of a
    dozen per column (PokerHand, 1M x 10 on a 2-core CPU: 0.05 s instead of 0.2 s). Returns the
    list of each column's sorted distinct values (float64) and the codes. ``None`` where the values
    of ``X`` span more than ``max(2**16, n)`` (each column's range is then its own; the per-column
    paths take it) or the table of counts would outgrow ``X``.
    """
    n, d = X.shape
    if not X.size:
        return None
    lo, hi = int(X.min()), int(X.max())
    span = hi - lo + 1
    if not _counts_fit(lo, hi, X.shape):
        return None
    index = np.add(X, np.arange(d, dtype=np.int64) * span - lo, dtype=np.int64, casting="unsafe")
    present = np.bincount(index.reshape(-1), minlength=span * d).reshape(d, span) > 0
    rank = (np.cumsum(present, axis=1) - 1).astype(np.int32)
    values = [np.flatnonzero(p) + float(lo) for p in present]
    return values, rank.reshape(-1)[index]


# integer dtypes that _small_int_matrix_codes_cuda takes (torch has them all on a GPU)
_CUDA_ENCODED_TYPES = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8))


def _small_int_matrix_codes_cuda(X, device):
    """:func:`_small_int_matrix_codes` computed on a GPU, the same values and codes (host arrays), or ``None``.

    The passes over all of ``X`` are memory-bound and the fit's host is slow at them (PokerHand 1M
    x 10 int64 measured at tens of milliseconds in NumPy; BENCHMARKS.md, "Design measurements
    quoted in the code"); on the GPU they take about a millisecond, and the copies (80 MB there,
    40 MB of codes back) a few more.
    """
    n, d = X.shape
    if not X.size:
        return None
    Xt = torch.from_numpy(np.ascontiguousarray(X)).to(device)
    lo, hi = torch.stack(torch.aminmax(Xt)).tolist()
    span = hi - lo + 1
    if not _counts_fit(lo, hi, X.shape):
        return None
    index = Xt.to(torch.int64) + (torch.arange(d, dtype=torch.int64, device=device) * span - lo)
    present = torch.zeros(span * d, dtype=torch.bool, device=device)
    present[index.view(-1)] = True  # repeated indices all store True
    rank = present.view(d, span).cumsum(1, dtype=torch.int32).view(-1) - 1
    codes = rank[index].cpu().numpy()
    values = [np.flatnonzero(p) + float(lo) for p in present.view(d, span).cpu().numpy()]
    return values, codes


def _lower_quantiles(values, codes, q):
    """``np.quantile(values[codes], q, method="lower")`` for sorted distinct ``values`` and each element's index
    ``codes`` among them: the order statistics at NumPy's indexes for ``"lower"``, read off the values' counts."""
    at = np.floor((codes.size - 1) * q).astype(np.intp)
    return values[np.searchsorted(np.cumsum(np.bincount(codes, minlength=values.size)), at, side="right")]


def _float_codes(known):
    """As :func:`_small_int_codes` for any float64 values, by hashing (pandas' factorize) instead of counting.

    Sorting only the distinct values gives ``np.unique``'s values, and their ranks its codes: a
    few passes over the data instead of a sort of all of it (rates and fractions: a hundred values
    in many rows). ``None`` for other dtypes and where a negative zero is present (its sign, as
    first seen, is the general paths' to keep).
    """
    if known.dtype != np.float64 or not known.size or np.signbit(known[known == 0]).any():
        return None
    codes, uniq = pd.factorize(known)
    order = np.argsort(uniq, kind="stable")
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    return uniq[order], rank[codes]


def _only_str(x):
    """Whether every element of object array ``x`` is exactly a ``str`` (not a subclass, whose ``str()`` may differ)."""
    return x.dtype == object and set(map(type, x)) <= {str}


def _str_codes(known):
    """The distinct values of object ``known`` in :func:`_nkey` order and each value's index among them, or ``None``.

    For strings only (every key ``("s", value)``) a hash factorisation in C gives what
    :func:`_sorted_unique` and the per-element key lookup of :meth:`_Columns.encode_col` give
    in Python, a few microseconds per element: the same values (each as first seen) in the same
    order and the same codes. ``None`` for anything else (numbers, bools, mixed objects).
    """
    if not known.size or not _only_str(known):
        return None
    codes, uniq = pd.factorize(known)
    order = np.argsort(uniq, kind="stable")  # distinct strings: Python's order of str, as sorted keys
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    vals = np.empty(order.size, dtype=object)
    vals[:] = uniq[order].tolist()
    return vals, rank[codes]


class _FrameColumns:
    """The columns of a DataFrame that holds non-numeric columns, each made when asked for.

    ``DataFrame.to_numpy(dtype=object)`` boxes every cell, numbers included, and the encoding
    then reads numeric columns through Python objects (``pd.isna``, ``astype``, sorting). A
    numeric column that is not nominal is read here as float64 instead: the same numbers (the
    boxed path converts them to float64 too, NaN / NA as missing), at array speed. Nominal
    columns are the boxed ones, so their categories keep their Python types. ``nominal``: the
    nominal mask, set once known (until then every column reads boxed).
    """

    ndim = 2
    dtype = np.dtype(object)

    def __init__(self, frame, numeric, rows=None):
        self._frame, self._numeric, self._rows = frame, numeric, rows
        self.nominal = None
        n = frame.shape[0] if rows is None else rows.shape[0]
        self.shape = (n, frame.shape[1])

    def column(self, j):
        s = self._frame.iloc[:, j]
        if self._numeric[j] and self.nominal is not None and not self.nominal[j]:
            col = s.to_numpy(dtype=np.float64, na_value=np.nan)
        else:
            col = s.to_numpy(dtype=object)
        return col if self._rows is None else col[self._rows]

    def string_codes(self, j):
        """For a column of a pandas string dtype: ``(codes, missing mask, (values, codes of the known rows))``
        as the object path finds them (:func:`_str_codes`), by pandas' own factorisation (no boxing), else ``None``."""
        s = self._frame.iloc[:, j]
        if not isinstance(s.dtype, pd.StringDtype):
            return None
        codes, uniq = s.factorize(use_na_sentinel=True)
        if self._rows is not None:
            codes = codes[self._rows]
        miss = codes < 0
        uniq = np.asarray(uniq, dtype=object)
        present = np.bincount(codes[~miss], minlength=uniq.size) > 0
        if not present.all():  # values of rows dropped (zero weight) are not values of the training data
            uniq = uniq[present]
            codes = np.where(miss, -1, (np.cumsum(present) - 1)[np.maximum(codes, 0)])
        if uniq.size and set(map(type, uniq)) != {str}:
            return None
        order = np.argsort(uniq, kind="stable")  # distinct strings: Python's order of str, as sorted keys
        rank = np.empty(order.size, dtype=np.int64)
        rank[order] = np.arange(order.size)
        vals = np.empty(order.size, dtype=object)
        vals[:] = uniq[order].tolist()
        return codes, miss, (vals, rank[codes[~miss]])

    def take(self, keep):
        """The rows where bool ``keep`` is true."""
        rows = np.flatnonzero(keep) if self._rows is None else self._rows[keep]
        out = _FrameColumns(self._frame, self._numeric, rows)
        out.nominal = self.nominal
        return out


def _transposed(a):
    """``np.ascontiguousarray(a.T)`` of a 2-D numeric array, by torch's blocked copy (several times faster)."""
    if a.dtype.kind in "iuf" and min(a.strides) >= 0 and a.dtype.isnative and a.flags.writeable:
        return torch.from_numpy(a).T.contiguous().numpy()
    return np.ascontiguousarray(a.T)


def _column(X, j):
    return X.column(j) if isinstance(X, _FrameColumns) else X[:, j]


def _isna(col):
    if col.dtype.kind == "f":
        return np.isnan(col)
    if col.dtype.kind in "biu":
        return np.zeros(col.shape[0], dtype=bool)
    return np.asarray(pd.isna(col), dtype=bool)


def _nkey(v):
    if isinstance(v, (bool, np.bool_)):
        return ("b", bool(v))
    if isinstance(v, (int, float, np.integer, np.floating)):
        return ("n", float(v))
    return ("s", str(v))


def _all_numbers(v):
    return all(isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))
               for x in v.tolist())


def _sorted_unique(known):
    """The distinct values by :func:`_nkey` in key order, each as first seen."""
    if known.dtype.kind == "f":
        # all keys are ("n", value): NumPy's sort, with the sign of zero as first seen
        vals = np.unique(known).tolist()
        zero = np.flatnonzero(known == 0)
        if zero.size:
            vals[vals.index(0.0)] = known[zero[0]].item()
        arr = np.empty(len(vals), dtype=object)
        arr[:] = vals
        return arr
    seen = {}
    for x in known.tolist():
        seen.setdefault(_nkey(x), x)
    keys = sorted(seen)
    arr = np.empty(len(keys), dtype=object)
    arr[:] = [seen[k] for k in keys]
    return arr


class C45Classifier(HostPickleMixin, ClassifierMixin, BaseEstimator):
    """C4.5 decision tree (Weka J48 rules) grown from batched counts on the GPU.

    Parameters
    ----------
    min_samples_leaf : int, default=2
        J48's ``minNumObj``: a split needs two branches with at least this weight.
    confidence : float in (0, 0.5], default=0.25
        Confidence factor of pessimistic pruning (smaller prunes more).
    max_depth : int, default=None
        Depth limit (the root has depth 0).
    prune : bool, default=True
        Pessimistic subtree-replacement pruning (``False``: J48 ``-U``).
    collapse : bool, default=True
        Collapse subtrees that do not reduce training errors (J48's default).
    subtree_raising : bool, default=True
        During pruning, also consider replacing a node by its largest branch, with
        the node's training instances routed through that branch (J48's default;
        ``False`` is ``J48 -S``: subtree replacement only). Runs on the host
        (NumPy), vectorised over the nodes of equal height, over the training
        instances of each node.
    categorical_features : None, "all", array of indices or bool mask, default=None
        Nominal features (multiway splits). ``None``: the non-numeric columns of a
        DataFrame; every column of an array is numeric.
    max_bins : int, default=256
        Numeric features with more distinct values are cut into this many
        equal-frequency bins (cut points between bins only).
    handle_unknown : {"error", "missing"}, default="error"
        A nominal category at predict time that fit never saw: raise, or treat as missing.
    representation : {"auto", "histogram", "bitmap", "bitslice"}, default="auto"
        How the per-depth counts are taken (see the module doc). Fractional
        weights (sample weights, missing values) always count by histogram.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
    backend : {"auto", "torch", "triton"}, default="auto"
        Kernels of the counting passes. ``"triton"`` runs the Triton kernels (bitmap
        and histogram); ``"torch"`` the torch ops; ``"auto"`` the Triton bitmap
        kernels on a CUDA device and ``torch.bincount`` for the histogram (see
        :data:`gpumine.counting._ops.HISTOGRAM_AUTO_BACKEND`).

    Attributes
    ----------
    classes_ : ndarray
    n_features_in_ : int
    feature_names_in_ : ndarray (when fit on a DataFrame with string column names)
    n_nodes_, n_leaves_, depth_ : int
    representations_ : list of str
        The representation used at each depth that had a node to split (the
        depths whose nodes are all leaves need no contingency table).

    Examples
    --------
    >>> import pandas as pd
    >>> X = pd.DataFrame({"outlook": ["sunny", "sunny", "overcast", "rainy", "rainy", "rainy", "overcast",
    ...                               "sunny", "sunny", "rainy", "sunny", "overcast", "overcast", "rainy"],
    ...                   "windy": [False, True, False, False, False, True, True,
    ...                             False, False, False, True, True, False, True]})
    >>> y = ["no", "no", "yes", "yes", "yes", "no", "yes", "no", "yes", "yes", "yes", "yes", "yes", "no"]
    >>> tree = C45Classifier(min_samples_leaf=1, device="cpu").fit(X, y)
    >>> print(tree.export_text())
    outlook = overcast: yes (4.0)
    outlook = rainy
    |   windy = False: yes (3.0)
    |   windy = True: no (2.0)
    outlook = sunny: no (5.0/2.0)
    """

    #: Derive a child's count table from its parent's (``None``: on CPU devices only); see :meth:`_grow`.
    _sibling_subtraction = None

    def __init__(self, min_samples_leaf=2, confidence=0.25, max_depth=None, *, prune=True, collapse=True,
                 subtree_raising=True, categorical_features=None, max_bins=256, handle_unknown="error", representation="auto",
                 device="auto", backend="auto"):
        self.min_samples_leaf = min_samples_leaf
        self.confidence = confidence
        self.max_depth = max_depth
        self.prune = prune
        self.collapse = collapse
        self.subtree_raising = subtree_raising
        self.categorical_features = categorical_features
        self.max_bins = max_bins
        self.handle_unknown = handle_unknown
        self.representation = representation
        self.device = device
        self.backend = backend

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.input_tags.categorical = True
        tags.input_tags.string = True
        return tags

    # ------------------------------------------------------------------ input
    def _check_params(self):
        m = self.min_samples_leaf
        if isinstance(m, bool) or not isinstance(m, numbers.Real) or m < 1:
            raise ValueError(f"min_samples_leaf must be a number >= 1; got {m!r}")
        if isinstance(self.confidence, bool) or not isinstance(self.confidence, numbers.Real) or not 0 < self.confidence <= 0.5:
            raise ValueError(f"confidence must be in (0, 0.5]; got {self.confidence!r}")
        if self.max_depth is not None and (isinstance(self.max_depth, bool) or not isinstance(self.max_depth, numbers.Integral)
                                           or self.max_depth < 0):
            raise ValueError(f"max_depth must be a non-negative integer or None; got {self.max_depth!r}")
        if isinstance(self.max_bins, bool) or not isinstance(self.max_bins, numbers.Integral) or self.max_bins < 2:
            raise ValueError(f"max_bins must be an integer >= 2; got {self.max_bins!r}")
        if self.handle_unknown not in ("error", "missing"):
            raise ValueError(f"handle_unknown must be 'error' or 'missing'; got {self.handle_unknown!r}")
        if self.representation not in _REPRESENTATIONS:
            raise ValueError(f"representation must be one of {_REPRESENTATIONS}; got {self.representation!r}")

    def _to_frame(self, X, reset):
        """A 2-D object, integer or float64 NumPy matrix (or :class:`_FrameColumns`), the numeric-column mask and
        the column names; sets / checks feature names and count."""
        names = None
        if isinstance(X, pd.DataFrame):
            names = [str(c) for c in X.columns]
            is_num = np.array([pd.api.types.is_numeric_dtype(X[c]) and not pd.api.types.is_bool_dtype(X[c]) for c in X.columns])
            if is_num.all():
                arr = X.to_numpy(dtype=np.float64, na_value=np.nan)
            else:
                # numeric float64 only where a plain NumPy / nullable dtype converts as the boxed values would
                fast = np.array([is_num[i] and getattr(t, "kind", "O") in "iuf" for i, t in enumerate(X.dtypes)],
                                dtype=bool)
                arr = _FrameColumns(X, fast)
        else:
            if isinstance(X, torch.Tensor):
                X = X.detach().cpu().numpy()
            if hasattr(X, "toarray") and hasattr(X, "nnz"):
                raise TypeError("sparse input is not supported; convert it with X.toarray()")
            arr = np.asarray(X)
            if arr.dtype.kind == "c":
                raise ValueError("Complex data not supported; pass real numbers")
            if arr.dtype.kind not in "biufOUSb":
                raise ValueError(f"X has dtype {arr.dtype}, which is not supported")
            if arr.dtype.kind == "b" or (arr.dtype.kind == "f" and arr.dtype != np.float64):
                # integers stay: their columns are read as float64 where needed (no float64 copy of all of X)
                arr = arr.astype(np.float64)
            if arr.dtype.kind in "US":
                arr = arr.astype(object)
            if arr.dtype.kind == "c":
                raise ValueError("complex data is not supported")
            is_num = np.full(arr.shape[1] if arr.ndim == 2 else 0, arr.dtype.kind in "iuf")
        if arr.ndim != 2:
            raise ValueError(f"Expected 2D array, got {arr.ndim}D array instead. Reshape your data either using "
                             "array.reshape(-1, 1) if your data has a single feature or array.reshape(1, -1) "
                             "if it contains a single sample.")
        if arr.shape[0] == 0:
            raise ValueError(f"Found array with 0 sample(s) (shape={arr.shape}) while a minimum of 1 is required.")
        if arr.shape[1] == 0:
            raise ValueError(f"Found array with 0 feature(s) (shape={arr.shape}) while a minimum of 1 is required.")
        if reset:
            self.n_features_in_ = arr.shape[1]
            if names is not None and all(isinstance(c, str) for c in X.columns):
                self.feature_names_in_ = np.asarray(names, dtype=object)
            elif hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
        else:
            if arr.shape[1] != self.n_features_in_:
                raise ValueError(f"X has {arr.shape[1]} features, but C45Classifier is expecting {self.n_features_in_} "
                                 "features as input; pass data with the same columns as in fit")
            if hasattr(self, "feature_names_in_") and names is not None and list(self.feature_names_in_) != names:
                raise ValueError("The feature names should match those that were passed during fit.")
        if arr.dtype.kind == "f" and np.isinf(arr).any():
            raise ValueError("Input X contains infinity or a value too large for dtype('float64'); "
                             "use NaN for missing values")
        return arr, is_num, names

    def _nominal_mask(self, is_num, n_features):
        cf = self.categorical_features
        if cf is None:
            return ~is_num
        if isinstance(cf, str):
            if cf != "all":
                raise ValueError(f"categorical_features must be None, 'all', indices or a bool mask; got {cf!r}")
            return np.ones(n_features, dtype=bool)
        cf = np.asarray(cf)
        if cf.size == 0:
            cf = cf.astype(np.int64)
        if cf.dtype.kind not in "biu":
            raise ValueError(f"categorical_features must be None, 'all', integer indices or a bool mask; got {cf.tolist()!r}")
        if cf.dtype == bool:
            if cf.shape != (n_features,):
                raise ValueError(f"categorical_features as a mask must have shape ({n_features},); got {cf.shape}")
            mask = cf.copy()
        else:
            mask = np.zeros(n_features, dtype=bool)
            if cf.size and (cf.min() < -n_features or cf.max() >= n_features):
                raise ValueError(f"categorical_features indices must lie in [0, {n_features}); got {cf.tolist()}")
            mask[cf] = True
        if (~mask & ~is_num).any():
            j = int(np.flatnonzero(~mask & ~is_num)[0])
            raise ValueError(f"feature {j} holds non-numeric values; list it in categorical_features")
        return mask

    # ------------------------------------------------------------------ fit
    def fit(self, X, y, sample_weight=None):
        """Grow (and prune) the tree.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features); NaN / None are missing values
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self
        """
        self._check_params()
        self._device = resolve_device(self.device)
        self._backend = resolve_backend(self.backend, self._device)
        self._hist_backend = histogram_backend(self.backend, self._device)
        arr, is_num, names = self._to_frame(X, reset=True)
        y = column_or_1d(y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else y, warn=True)
        if y.shape[0] != arr.shape[0]:
            raise ValueError(f"y has {y.shape[0]} labels but X has {arr.shape[0]} samples; pass one label per row of X")
        if not (y.dtype.kind in "biu" or _only_str(y)):
            # whole numbers and strings are always classes; sklearn's check would sort all of y to say so
            check_classification_targets(y)
        if y.dtype.kind == "f" and not np.isfinite(y).all():
            raise ValueError("y contains NaN or infinity")
        self.classes_, ycodes = _classes(y)
        n, d = arr.shape
        w = None
        if sample_weight is not None:
            w = np.asarray(sample_weight, dtype=np.float64)
            if w.ndim == 0:
                w = np.full(n, float(w))
            if w.shape != (n,):
                raise ValueError(f"sample_weight has shape {w.shape}; expected ({n},)")
            if not np.isfinite(w).all() or (w < 0).any():
                raise ValueError("sample_weight must be finite and non-negative")
            if not (w > 0).any():
                raise ValueError("Sample weights must contain at least one non-zero number; pass positive weights")
            if np.all(w == 1.0):
                w = None
            elif (w == 0).any():
                # zero weight is the same as absent: such rows must not shape the encoding either
                keep = w > 0
                arr = arr.take(keep) if isinstance(arr, _FrameColumns) else arr[keep]
                ycodes, w = ycodes[keep], w[keep]
                n = arr.shape[0]
        nominal = self._nominal_mask(is_num, d)
        if isinstance(arr, _FrameColumns):
            arr.nominal = nominal
        self._names = names or [f"x{j}" for j in range(d)]
        self._cols = _Columns(arr, nominal, int(self.max_bins), self._names, device=self._device)
        # host copies for the pruning, which runs on the host (on a GPU: no copies back of what was sent)
        codes_h = torch.from_numpy(self._cols.encode_train(arr))
        y_h = torch.from_numpy(ycodes.astype(np.int64, copy=False))
        w_h = None if w is None else torch.from_numpy(w)
        codes, y_t = codes_h.to(self._device), y_h.to(self._device)
        w_t = None if w is None else w_h.to(self._device)
        try:
            self._grow(codes, y_t, w_t, n)
            if self.collapse:
                self._collapse(0)
            if self.prune:
                if self.subtree_raising:
                    self._prune_raising(codes_h, y_h, w_h)
                else:
                    self._prune()
        finally:
            self._row_node = None  # the growth's leaf of every row, for the pruning only
        self._finalize()
        self._tree.trim()
        return self

    def _grow(self, codes, y, w, n):
        """Grow the tree breadth-first, one depth per pass.

        The host waits for the device twice per depth: once for the class
        distributions of the depth's nodes (which can split, how many entries each
        holds) and once for the chosen splits with their details; everything else
        (the node tables that route the rows, the compaction of the rows of the nodes
        that split) stays on the device, sized by what the host already knows. The
        histogram of the count table may wait inside ``torch.bincount`` (see
        :func:`gpumine.counting._ops.grouped_histogram`).
        """
        dev = self._device
        cols = self._cols
        C = len(self.classes_)
        d = codes.shape[1]
        L_off = level_offsets(cols.n_levels)
        n_levels = cols.n_levels
        minobj = float(self.min_samples_leaf)
        multival = all(cols.n_known[j] >= 0.3 * n for j in range(d) if cols.nominal[j])
        counted = np.array([(not cols.nominal[j]) or multival or cols.n_known[j] < 0.3 * n for j in range(d)])
        counted_t = torch.as_tensor(counted, device=dev)
        n_known = np.asarray(cols.n_known, dtype=np.int64)
        nominal = np.asarray(cols.nominal, dtype=bool)
        has_missing = np.asarray(cols.has_missing, dtype=bool)
        maxk = int(max([2] + [cols.n_known[j] for j in range(d) if cols.nominal[j]]))
        T = self._tree = _Nodes(C, maxk, capacity=n)  # PokerHand 1M grows ~400k nodes
        self.representations_ = []
        # per-attribute constants on the device: the routing tables of a depth are built there from the chosen splits
        n_known_t = torch.as_tensor(n_known, device=dev)
        nominal_t = torch.as_tensor(nominal, device=dev)
        rows = torch.arange(n, device=dev)
        group = torch.zeros(n, dtype=torch.int64, device=dev)
        weight = w
        level_nodes = T.add(np.array([-1]), 0)
        store = None
        class_bits = None
        depth = 0
        # counts are whole numbers until fractional weights appear (sample weights, missing values); then the
        # count tables stay int64 and x log x is a table lookup
        lnf_int = _LnfTable(n, dev) if w is None else None
        groups = self._attr_groups(L_off, dev)
        # the node of every row at the deepest depth it reaches (its leaf), for the pruning; it names one node per
        # row only while no row has been sent down several branches (missing values)
        row_node = torch.zeros(n, dtype=torch.int64, device=dev) if w is None else None
        copied = False
        # on the CPU the histogram is the larger part of a depth: a splittable child with more rows than its
        # siblings together gets its table as its parent's minus theirs (on a GPU the counting is cheap, and the
        # node map the host would send is one more wait per depth)
        subtract = self._sibling_subtraction if self._sibling_subtraction is not None else dev.type == "cpu"
        prev = None  # (count table, first child, number of children, table row) of the previous depth's splits
        while level_nodes.size:
            G = level_nodes.size
            n0 = int(level_nodes[0])  # the nodes of a depth have consecutive ids
            if row_node is not None and not copied:
                row_node[rows] = group + n0
            # the class distribution of every node first (one count over the entries): most nodes of a deep level
            # are leaves (pure or too small), and the full node x level x class table is counted only for the others
            if weight is None:
                tot = _bincount(group * C + y[rows], G * C).reshape(G, C).to(torch.float64)
                cnt = None  # the entries of a node are its (whole) total
            else:
                tot = grouped_histogram(codes[:, :1], n_levels[:1], y, C, rows, group, G, weight,
                                        backend=self._hist_backend).to(torch.float64).sum(1)
                cnt = _bincount(group, G).to(torch.float64)
            total = tot.sum(1)
            splittable = (total >= 2 * minobj - _SMALL) & ((total - tot.max(1).values) > _SMALL)
            if self.max_depth is not None and depth >= self.max_depth:
                splittable = torch.zeros_like(splittable)
            # the host's one look at the depth before the split search
            view = [tot, splittable[:, None].to(torch.float64)] + ([] if cnt is None else [cnt[:, None]])
            host = torch.cat(view, 1).cpu().numpy()
            T.dist[level_nodes] = host[:, :C]
            split_h = host[:, C] > 0
            entries_h = host[:, C + 1] if cnt is not None else host[:, :C].sum(1)
            sel_h = np.flatnonzero(split_h)
            Gs = int(sel_h.size)
            if Gs == 0:
                break
            plan = None
            if prev is not None:
                plan = _sibling_plan(split_h, entries_h, *prev[1:], min_saved=SIBLING_MIN_SAVED * L_off[-1] * C / d)
            if plan is not None:
                rep = self._pick_rep(plan["entries"], n, d, plan["n_groups"], C, False, store is not None)
                if rep != "histogram":  # bitmap passes cost per row set, derived or not
                    plan = None
            if plan is not None:
                # the nodes in table order (counted ones first, then derived ones); rows of the others to a dropped group
                sel_h = plan["order"]
                sel = torch.as_tensor(sel_h, device=dev)
                group_s = torch.as_tensor(plan["group"], device=dev)[group]
                n_groups = plan["n_groups"]
                keep = group_s < n_groups - 1
                rows_c, group_s = _compact(keep, torch.cumsum(keep, 0) - 1, plan["entries"], rows, group_s)
            else:
                if Gs < G:
                    # the entries of the other nodes are counted into one extra group (Gs) that is dropped: no compaction
                    slot = torch.cumsum(splittable, 0) - 1
                    sel = _compact(splittable, slot, Gs, torch.arange(G, device=dev))
                    group_s = torch.where(splittable[group], slot[group], Gs)
                else:
                    sel, group_s = torch.arange(G, device=dev), group
                n_groups = Gs + (Gs < G)
                rep = self._pick_rep(rows.shape[0], n, d, n_groups, C, weight is not None, store is not None)
            self.representations_.append(rep)
            if rep == "histogram":
                counts = grouped_histogram(codes, n_levels, y, C, rows if plan is None else rows_c, group_s, n_groups,
                                           weight, backend=self._hist_backend)
            else:
                if store is None:
                    store = BitmapStore.from_codes(codes, n_levels)
                    if rep == "bitslice":
                        store = store.to_bitslice()
                    class_bits = pack_codes(y, C)
                counts = self._bitmap_counts(store, class_bits, rows, group_s, n_groups, C, n)
            if plan is not None:
                # a derived node's table: its parent's minus its siblings' (whole counts: exact)
                n1, nD = plan["n_counted"], plan["parent"].size
                derived = counts[n1:n1 + nD]
                derived.copy_(prev[0][torch.as_tensor(plan["parent"], device=dev)])
                derived.index_add_(0, torch.as_tensor(plan["sib_of"], device=dev),
                                   counts[torch.as_tensor(plan["sib_group"], device=dev)], alpha=-1)
            # counts: (Gs, L, C) weighted counts of splittable node x attribute level x class (int64 while whole)
            counts = counts[:Gs] if weight is None else counts[:Gs].to(torch.float64)
            best_s, infos = self._select_sub(counts, tot[sel], total[sel], L_off, counted_t, C, minobj,
                                             _lnf if weight is not None else lnf_int, groups)
            chosen = self._chosen(best_s, infos, groups, maxk)
            # the host's second look: the chosen attribute of every splittable node and its split's details
            det = torch.cat([best_s[:, None].to(torch.float64), chosen], 1).cpu().numpy()
            ba = np.full(G, -1, dtype=np.int64)
            ba[sel_h] = det[:, 0].astype(np.int64)
            S = np.flatnonzero(ba >= 0)
            if S.size == 0:
                break
            at = np.full(G, -1, dtype=np.int64)
            at[sel_h] = np.arange(Gs)
            R = at[S]  # the rows of det of the nodes that split
            attrs = ba[S]
            k_S = np.where(nominal[attrs], n_known[attrs], 2)
            n_before = T.n
            kids = T.add(np.repeat(level_nodes[S], k_S), depth + 1)
            first = n_before + np.cumsum(k_S) - k_S
            par = level_nodes[S]
            T.attr[par] = attrs
            T.first[par] = first
            T.nchild[par] = k_S
            frac_tab = np.zeros((G, maxk))
            for j in np.unique(attrs):
                m = attrs == j
                Sj, Rj = S[m], R[m]
                bags = det[Rj, 3:3 + (n_known[j] if nominal[j] else 2)]
                known = bags.sum(1, keepdims=True)
                frac = np.where(known > 0, bags / np.where(known > 0, known, 1), 1.0 / bags.shape[1])
                frac_tab[Sj, :bags.shape[1]] = frac
                T.frac[level_nodes[Sj], :bags.shape[1]] = frac
                if not nominal[j]:
                    t = det[Rj, 1].astype(np.int64)
                    T.thrc[level_nodes[Sj]] = t
                    T.thr[level_nodes[Sj]] = self._thresholds(j, t, det[Rj, 2].astype(np.int64))
            # the routing tables of the depth, built on the device from the chosen splits (as the host's above)
            thr = chosen[:, 0].to(torch.int64)
            if Gs == G and plan is None:  # the table holds every node, in order
                best = best_s
            else:
                best = torch.full((G,), -1, dtype=torch.int64, device=dev).index_copy_(0, sel, best_s)
                thr = torch.zeros(G, dtype=torch.int64, device=dev).index_copy_(0, sel, thr)
            bc = best.clamp_min(0)
            k_t = torch.where(best >= 0, torch.where(nominal_t[bc], n_known_t[bc], 2), 0)
            is_num = (best >= 0) & ~nominal_t[bc]
            missing = bool(has_missing[attrs].any())
            rows, group, weight = self._route(codes, rows, group, weight, best, torch.cumsum(k_t, 0) - k_t, thr, is_num,
                                              int(entries_h[S].sum()), missing, frac_tab, k_S, S)
            copied |= missing
            # the next depth may derive a child's table from this one (its rows are then split exactly among the children)
            prev = None
            if subtract and weight is None and not missing:
                prev = (counts, np.cumsum(k_S) - k_S, k_S, R)
            # children without entries are empty leaves: they stay in the next depth, where they do not split
            level_nodes = kids
            depth += 1
        self._row_node = row_node if row_node is not None and not copied else None

    def _thresholds(self, j, t, nxt):
        """J48's cut: the largest training value <= the midpoint of the node's two adjacent values."""
        bmax = self._cols.bin_max[j]
        lo = bmax[t]
        hi = self._cols.bin_min[j][nxt]
        mid = (lo + hi) / 2
        mid = np.where(mid == hi, lo, mid)
        i = np.searchsorted(bmax, mid, side="right") - 1
        return bmax[np.maximum(i, t)]

    def _pick_rep(self, m, n, d, G, C, weighted, built):
        rep = self.representation
        if weighted:
            return "histogram"
        if rep != "auto":
            return rep
        c = measured_costs(self._device, self._backend, self._hist_backend)
        # the node bitmaps of this depth are packed in any case (one scatter of m entries); the store only once
        est = representation_costs(n, self._cols.n_levels, G * C, n_entries=m, store_built=built, costs=c)
        est["bitmap"] += c["pack"] * m
        return "bitmap" if est["bitmap"] < est["histogram"] else "histogram"

    def _bitmap_counts(self, store, class_bits, rows, group, G, C, n):
        masks = pack_groups(group, G, n, rows=rows)  # node existential bitmaps, one scatter
        nw = masks.shape[1]
        L = sum(store.n_levels)
        out = torch.zeros(G, L, C, dtype=torch.int64, device=masks.device)
        from ..config import working_memory_bytes

        chunk = max(1, working_memory_bytes(None, masks.device) // (8 * 4 * max(1, C * nw)))
        for g0 in range(0, G, chunk):
            R = (masks[g0:g0 + chunk, None, :] & class_bits[None, :, :]).reshape(-1, nw)
            if isinstance(store, BitmapStore):
                cnt = and_count_matrix(store.words, R, backend=self._backend)
            else:
                cnt = contingency_tables(store, R, backend=self._backend)
            out[g0:g0 + chunk] = cnt.reshape(L, -1, C).permute(1, 0, 2)
        return out

    def _chosen(self, best, infos, groups, maxk):
        """The details of every node's chosen split, gathered on the device: ``(G, 2 + maxk)`` float64.

        Column 0 is the numeric cut (the last level code of the left branch), column 1
        the next level with values, columns ``2 ..`` the branch weights (``k`` of a
        nominal split, 2 of a numeric one); zeros where the node does not split.
        ``infos`` as :meth:`_select_sub` returns them (tensors or arrays).
        """
        G = best.shape[0]
        dev = best.device
        out = torch.zeros(G, 2 + maxk, dtype=torch.float64, device=dev)
        bc = best.clamp_min(0)
        rows = torch.arange(G, device=dev)
        for nom, k, Jh, where in groups.pick:
            # the position of the chosen attribute in this group (-1: another group's or none)
            a = torch.where(best >= 0, where[bc], -1)
            mine = (a >= 0)[:, None]
            a = a.clamp_min(0)

            def pick(key, a=a):
                v = torch.stack([torch.as_tensor(infos[j][key], device=dev) for j in Jh], 1)
                return v[rows, a].to(torch.float64)

            if nom:
                out[:, 2:2 + k] = torch.where(mine, pick("bags"), out[:, 2:2 + k])
            else:
                det = torch.cat([pick("thr")[:, None], pick("next")[:, None], pick("bags")], 1)
                out[:, :4] = torch.where(mine, det, out[:, :4])
        return out

    def _attr_groups(self, L_off, device):
        """The attributes in groups of one kind (nominal or numeric) and one number of known levels.

        The split search runs once per group on a ``(nodes, attributes, levels, classes)``
        view of the counts instead of once per attribute: fewer, larger tensor ops (kernel
        launches on a GPU), each attribute's values computed by the same operations as alone.
        Returns ``[(nominal, k, attribute indices, level indices of the count table,
        attribute indices as a list)]`` as ``exact``, and as ``whole`` the groups for int64
        (whole) count tables, where numeric attributes of similar numbers of levels share one
        group padded with empty levels (see :func:`_merge_numeric_groups`).
        """
        cols = self._cols
        keys = {}
        for j in range(len(cols.n_known)):
            keys.setdefault((bool(cols.nominal[j]), int(cols.n_known[j])), []).append(j)
        groups = []
        for (nom, k), J in keys.items():
            Jn = np.asarray(J, dtype=np.int64)
            lv = (np.asarray(L_off, dtype=np.int64)[Jn][:, None] + np.arange(k)[None, :]).reshape(-1)
            groups.append((nom, k, torch.as_tensor(Jn, device=device), torch.as_tensor(lv, device=device), list(J),
                           None))
        # the gather of the chosen splits' details needs one group per width of the details: every numeric attribute
        # in one, the nominal ones by number of values; with each a table of the attributes' positions in it
        d = len(cols.n_known)
        pick = [(True, k, J) for (nom, k), J in keys.items() if nom]
        numeric = [j for j in range(d) if not cols.nominal[j]]
        if numeric:
            pick.append((False, 2, numeric))
        tables = []
        for nom, k, J in pick:
            where = np.full(d, -1, dtype=np.int64)
            where[J] = np.arange(len(J))
            tables.append((nom, k, J, torch.as_tensor(where, device=device)))
        return _AttrGroups(groups, _merge_numeric_groups(groups, L_off, device), tables)

    def _select_sub(self, counts, tot, total, L_off, counted, C, minobj, lnf=_lnf, groups=None):
        """Gain, gain ratio and validity of every attribute's best split at every node; the best attribute.

        ``counts``: ``(G, L, C)`` node x attribute level x class, float64 or (whole
        counts, with ``lnf`` a :class:`_LnfTable`) int64; the last level of each
        attribute holds its missing values. Attributes of one kind and number of
        levels are evaluated together (:meth:`_attr_groups`). Whole counts stay int64
        through the sums and differences (exact, as they are in float64) and become
        float64 where they meet fractions, so both give the same values bit for bit.
        Returns the best attribute per node (``-1``: leaf) on the device and, per
        attribute, the split details as device tensors: ``bags`` (the branch weights),
        and for numeric attributes ``thr`` (the cut's last level) and ``next`` (the
        next level with values).
        """
        G = counts.shape[0]
        dev = counts.device
        d = len(self._cols.n_known)
        f64 = torch.float64
        if groups is None:
            groups = self._attr_groups(L_off, dev)
        groups = groups.whole if counts.dtype == torch.int64 else groups.exact
        gains = torch.zeros(G, d, dtype=f64, device=dev)
        ratios = torch.zeros(G, d, dtype=f64, device=dev)
        valid = torch.zeros(G, d, dtype=torch.bool, device=dev)
        infos = [None] * d
        tot1 = total[:, None]
        lnf_total = lnf(total)[:, None]
        for nom, k, J, lv, Jh, pad in groups:
            A = J.shape[0]
            K = counts.index_select(1, lv).reshape(G, A, k, C)  # known levels
            if pad is not None:
                K = torch.where(pad[0], K, 0)  # levels past an attribute's own are empty
            known_c = K.sum(2)  # (G, A, C)
            known = known_c.sum(2)
            known_f = known.to(f64)
            unknown = (tot1 - known_f).clamp_min(0)
            rate = torch.where(tot1 > 0, unknown / tot1.clamp_min(1e-300), torch.zeros_like(unknown))
            old_ent = (lnf(known) - lnf(known_c).sum(2)) / _LN2
            bag = K.sum(3)  # (G, A, k)
            if nom:
                bag_f = bag.to(f64)
                new_ent = (lnf(bag).sum(2) - lnf(K).sum((2, 3))) / _LN2
                num = (1 - rate) * (old_ent - new_ent)
                gain = torch.where(num.abs() < _SMALL, torch.zeros_like(num), num / known_f.clamp_min(1e-300))
                ok = ((bag_f >= minobj - _SMALL).sum(2) >= 2) & (known > 0)
                split_ent = (-lnf(bag).sum(2) - lnf(unknown) + lnf_total) / _LN2
                ratio = _ratio(gain, split_ent, tot1)
                for a, j in enumerate(Jh):
                    infos[j] = {"bags": bag_f[:, a]}
            else:
                left_c = K[:, :, :-1].cumsum(2)  # (G, A, k-1, C): cut after level t
                left = left_c.sum(3)
                right_c = known_c[:, :, None, :] - left_c
                right = known[:, :, None] - left
                present = bag[:, :, :-1] > 0
                min_split = (0.1 * known_f / C).clamp(min=minobj, max=25.0)
                cand = present & (left >= min_split[..., None] - _SMALL) & (right >= min_split[..., None] - _SMALL)
                cand &= (known_f >= 2 * min_split - _SMALL)[..., None]
                new_ent = (lnf(left) + lnf(right) - lnf(left_c).sum(3) - lnf(right_c).sum(3)) / _LN2
                num = (1 - rate)[..., None] * (old_ent[..., None] - new_ent)
                g_t = torch.where(num.abs() < _SMALL, torch.zeros_like(num), num / known_f.clamp_min(1e-300)[..., None])
                g_t = torch.where(cand, g_t, torch.full_like(g_t, -math.inf))
                n_cand = cand.sum(2)
                if k >= 2:
                    best_g, _ = g_t.max(2)
                    # the first cut within 1e-6 of the best (J48 scans cuts in order, keeping strict improvements)
                    first = (g_t >= best_g[..., None] - _SMALL).to(torch.int8).argmax(2)
                else:
                    best_g = torch.full((G, A), -math.inf, dtype=f64, device=dev)
                    first = torch.zeros(G, A, dtype=torch.int64, device=dev)
                has = (n_cand > 0) & (best_g > _SMALL)
                gain = best_g - torch.log2(n_cand.clamp_min(1).to(f64)) / tot1.clamp_min(1e-300)
                ok = has & (gain > _SMALL)
                gain = torch.where(ok, gain, torch.zeros_like(gain))
                idx = first.clamp_max(max(k - 2, 0))
                if k >= 2:
                    lb = left.gather(2, idx[..., None])[..., 0]
                    rb = right.gather(2, idx[..., None])[..., 0]
                else:
                    lb = rb = torch.zeros_like(known)
                split_ent = (-lnf(lb) - lnf(rb) - lnf(unknown) + lnf_total) / _LN2
                ratio = _ratio(gain, split_ent, tot1)
                pos = torch.arange(k, device=dev)
                if k:
                    nxt = torch.where((bag > 0) & (pos > idx[..., None]), pos,
                                      torch.full_like(bag, k, dtype=torch.int64)).min(2).values.clamp_max(k - 1)
                    if pad is not None:
                        nxt = torch.minimum(nxt, pad[1])
                else:  # no known value anywhere (an all-missing column): no cut, never chosen (ok is False)
                    nxt = torch.zeros(G, A, dtype=torch.int64, device=dev)
                bags = torch.stack([lb, rb], 2).to(f64)
                for a, j in enumerate(Jh):
                    infos[j] = {"thr": idx[:, a], "next": nxt[:, a], "bags": bags[:, a]}
            gains[:, J] = gain
            ratios[:, J] = ratio
            valid[:, J] = ok
        use = valid & counted[None, :]
        n_use = use.sum(1)
        avg = torch.where(n_use > 0, (gains * use).sum(1) / n_use.clamp_min(1), torch.zeros_like(total))
        elig = valid & (gains >= avg[:, None] - 1e-3)
        r = torch.where(elig, ratios, torch.full_like(ratios, -math.inf))
        best_r, _ = r.max(1)
        first = (r >= best_r[:, None] - _SMALL).to(torch.int8).argmax(1)
        ok = (n_use > 0) & (best_r > _SMALL)
        best = torch.where(ok, first, torch.full_like(first, -1))
        return best, infos

    def _route(self, codes, rows, group, weight, best, child_base, thr, is_num, n_keep, missing, frac_tab, k_S, S):
        """The entries of the next depth: the rows of the nodes that split, each in its branch's child.

        ``best``, ``child_base`` (index of a node's first child in the next depth),
        ``thr`` and ``is_num`` are per-node device tables; ``n_keep`` is the number of
        entries of the nodes that split (the host knows it), so the compaction needs no
        wait for the device. ``missing``: a chosen attribute has missing values, which
        go down every branch with weight times the branch's share of the known weight
        (``frac_tab``, host) -- the only path that waits (for whether any entry is missing).
        """
        dev = codes.device
        keep = best[group] >= 0
        pos = torch.cumsum(keep, 0) - 1
        if weight is None:
            rows, group = _compact(keep, pos, n_keep, rows, group)
        else:
            rows, group, weight = _compact(keep, pos, n_keep, rows, group, weight)
        if rows.numel() == 0:
            return rows, group, weight
        attr = best[group]
        code = codes[rows, attr].to(torch.int64)
        branch = torch.where(is_num[group], (code > thr[group]).to(torch.int64), code)
        new_group = child_base[group] + branch
        if not missing:
            return rows, new_group, weight
        miss = code >= torch.as_tensor(np.asarray(self._cols.n_known, dtype=np.int64), device=dev)[attr]
        if not bool(miss.any()):
            return rows, new_group, weight
        # missing values: one entry per branch, weight times the branch's share of the known weight
        n_child = np.zeros(frac_tab.shape[0], dtype=np.int64)
        n_child[S] = k_S
        frac_t = torch.as_tensor(frac_tab, device=dev)
        w = weight if weight is not None else torch.ones(rows.shape[0], dtype=torch.float64, device=dev)
        kr, kg, kw = rows[~miss], new_group[~miss], w[~miss]
        mr, mg, mw = rows[miss], group[miss], w[miss]
        nb = torch.as_tensor(n_child, device=dev)[mg]
        rep_r = torch.repeat_interleave(mr, nb)
        rep_g = torch.repeat_interleave(mg, nb)
        starts = torch.cumsum(nb, 0) - nb
        b = torch.arange(rep_r.shape[0], device=dev) - torch.repeat_interleave(starts, nb)
        rep_w = torch.repeat_interleave(mw, nb) * frac_t[rep_g, b]
        rep_new = child_base[rep_g] + b
        pos = rep_w > 0
        rows = torch.cat([kr, rep_r[pos]])
        group = torch.cat([kg, rep_new[pos]])
        weight = torch.cat([kw, rep_w[pos]])
        return rows, group, weight

    # ------------------------------------------------------------------ pruning
    def _collapse(self, root):
        """J48's collapse: a subtree whose leaves make no fewer training errors (within 1e-3) than the node becomes a leaf.

        Level by level: the subtrees' errors bottom-up (each the sum of its branches' in
        branch order, as the recursion adds them), then the decisions top-down, where a
        collapsed node's descendants are no longer visited.
        """
        T = self._tree
        err = T.errors()
        levels = T.levels(root)
        sub = err.copy()
        for lvl in reversed(levels):
            P = lvl[T.nchild[lvl] > 0]
            if P.size:
                sub[P] = _branch_sums(T, P, sub)
        frontier = levels[0]
        while frontier.size:
            P = frontier[T.nchild[frontier] > 0]
            done = sub[P] >= err[P] - 1e-3
            T.nchild[P[done]] = 0
            frontier = T.children(P[~done])

    def _prune(self):
        """Pessimistic subtree replacement (``J48 -S``), bottom-up level by level; sums in branch order."""
        T = self._tree
        est = T.estimated_errors(float(self.confidence))
        levels = T.levels(0)
        est_sub = est.copy()
        for lvl in reversed(levels):
            P = lvl[T.nchild[lvl] > 0]
            if not P.size:
                continue
            tree = _branch_sums(T, P, est_sub)
            leaf = est[P] <= tree + 0.1 + _SMALL
            T.nchild[P[leaf]] = 0
            est_sub[P] = np.where(leaf, est[P], tree)

    def _prune_raising(self, codes, y, w):
        """J48's pessimistic pruning with subtree raising (``C45PruneableClassifierTree.prune``).

        Bottom-up: after its children are pruned, a node becomes a leaf when the
        leaf's estimated errors are within 0.1 of both the subtree's and those of
        its largest branch (the most weight, the last such on ties) with all of the
        node's training instances routed through it; otherwise, when the largest
        branch is within 0.1 of the subtree, that branch replaces the node, the
        class distributions (and missing-value fractions) of the raised subtree are
        recomputed from the node's instances, and the node is pruned again.
        Training instances of a node are rebuilt by routing its parent's, with
        fractional weights for missing values (split fractions from the routed
        instances' known values, as Weka's ``resetDistribution``).

        Vectorised, with the arithmetic of the node-by-node recursion kept to the
        bit: the instances of every node are routed once, top-down, as (row, node,
        weight) entries; the nodes are then decided in batches of equal height
        (disjoint subtrees, children first), the largest branches' estimates of all
        nodes of a batch coming from one level-by-level routing of their instances.
        Within a node, entries keep the recursion's order (known values first, then
        the missing ones, each in the parent's order), so every weighted count is
        summed in the same order; sums of estimates over branches are nested as in
        the recursion.

        Without sample weights and with no value missing in a tested attribute
        (every row on one path, whole counts) nothing is routed level by level: the
        rows are kept sorted by the pre-order number of their leaf, so a node's rows
        are one range read off a table of counts, only the rows outside a node's
        largest branch are routed (down that branch), the branch's estimate is its
        finished one plus the changes of the leaves they reach (the recursion's
        nested sums are formed only where a decision could turn within their
        rounding), and a raised subtree is counted and decided again only where
        rows arrived. There, each round decides all nodes whose children are final,
        the changed nodes of raised subtrees among them, rather than one height at
        a time and each raising's nodes in rounds of their own.
        """
        import sys

        T = self._tree
        cf = float(self.confidence)
        C = T.C
        NN = T.n
        maxk = T.maxk
        n_known = np.asarray(self._cols.n_known, dtype=np.int64)
        nominal = np.asarray(self._cols.nominal, dtype=bool)
        cod = codes.cpu().numpy()
        d = cod.shape[1]
        codf = cod.reshape(-1)
        yh = y.cpu().numpy().astype(np.int64, copy=False)
        n = yh.shape[0]
        # numeric split: the last level code of the left branch at the real threshold (as J48's C45Split)
        thrl = np.full(NN, -1, dtype=np.int64)
        inner0 = np.flatnonzero(T.nchild[:NN] > 0)
        for j in np.unique(T.attr[inner0]):
            if nominal[j]:
                continue
            sel = inner0[T.attr[inner0] == j]
            bmax = self._cols.bin_max[int(j)]
            thrl[sel] = np.maximum(T.thrc[sel], np.searchsorted(bmax, T.thr[sel], side="right") - 1)
        # no value missing in the attributes tested: every row takes one path, ending in curleaf[row]
        known_only = not any(self._cols.has_missing[j] for j in np.unique(T.attr[inner0]).tolist())
        curleaf = np.zeros(n, dtype=np.int64)
        et = np.zeros(NN)  # estimated errors of a finished subtree (J48's getEstimatedErrors)
        pos_lvl = np.zeros(NN, dtype=np.int64)
        pos_st = np.zeros(NN, dtype=np.int64)
        pos_len = np.zeros(NN, dtype=np.int64)
        slotmap = np.zeros(NN, dtype=np.int64)
        per_bag = np.zeros((NN, maxk))  # the branches' weights (Weka's perBag, missing values spread)

        def est(D):
            """Estimated errors of the class distributions ``D`` (rows), as ``est`` of one distribution."""
            tot = _pairwise_rows(D)
            e = tot - (D.max(1) if D.shape[1] else np.zeros(D.shape[0]))
            out = np.zeros(D.shape[0])
            ok = ~(np.abs(tot) < _SMALL)
            if ok.any():
                out[ok] = e[ok] + _add_errors_exact(tot[ok], e[ok], cf)
            return out

        def unique(nd):
            if nd.size * 8 < NN:
                return np.unique(nd)
            flag = np.zeros(NN, dtype=bool)
            flag[nd] = True
            return np.flatnonzero(flag)

        def split(r, nd, w, U, want_bags):
            """Route entries at inner nodes (all of ``U``, sorted unique) one level down.

            Returns the children's entries (known values first, then the missing ones with
            weight times the branch fraction, each in the given order) and, when asked or
            when values are missing, the per-node bags ``(|U|, maxk + 1)`` and fractions.
            """
            a = T.attr[nd]
            c = cod[r, a].astype(np.int64)
            miss = c >= n_known[a]
            br = np.where(nominal[a], c, c > thrl[nd])
            anymiss = bool(miss.any())
            if not anymiss and not want_bags:
                return r, T.first[nd] + br, w, None, None
            k_U = T.nchild[U]
            slotmap[U] = np.arange(U.size)
            slot = slotmap[nd]
            br = np.where(miss, k_U[slot], br)
            K1 = maxk + 1
            bags = np.bincount(slot * K1 + br, w, minlength=U.size * K1).reshape(U.size, K1)
            frac = np.zeros((U.size, maxk))
            for k in np.unique(k_U):
                g = np.flatnonzero(k_U == k)
                bk = bags[g, :k]
                known = _pairwise_rows(bk)
                good = np.abs(known) >= _SMALL
                fk = np.full(bk.shape, 1.0 / k)
                fk[good] = bk[good] / known[good, None]
                frac[g, :k] = fk
            if not anymiss:
                return r, T.first[nd] + br, w, bags, frac
            keep = ~miss
            mi = np.flatnonzero(miss)
            F = frac[slot[mi]]
            qi, bi = np.nonzero(F > _SMALL)
            mr = r[mi][qi]
            mc = T.first[nd[mi]][qi] + bi
            mw = w[mi][qi] * F[qi, bi]
            return (np.concatenate([r[keep], mr]), np.concatenate([(T.first[nd] + br)[keep], mc]),
                    np.concatenate([w[keep], mw]), bags, frac)

        def big_branch(V, per_bag):
            """Weka's ``Distribution.maxBag``: the last branch within 1e-6 of the running maximum."""
            k = T.nchild[V]
            big = np.full(V.size, -1, dtype=np.int64)
            mx = np.zeros(V.size)
            for b in range(int(k.max()) if V.size else 0):
                pb = per_bag[:, b]
                m = (b < k) & (pb - mx > -_SMALL)
                big[m] = b
                mx[m] = pb[m]
            return big

        def est_branches(starts, r, w):
            """Estimated errors of the subtrees at ``starts`` (disjoint) with the given entries routed down them."""
            val = np.zeros(NN)
            nd = starts
            steps, Ls, Ds = [], [], []
            while r.size:
                leaf = T.nchild[nd] == 0
                if leaf.any():
                    ln = nd[leaf]
                    L = unique(ln)
                    slotmap[L] = np.arange(L.size)
                    Ls.append(L)
                    Ds.append(np.bincount(slotmap[ln] * C + yh[r[leaf]], w[leaf],
                                          minlength=L.size * C).reshape(L.size, C))
                    inn = ~leaf
                    r, nd, w = r[inn], nd[inn], w[inn]
                    if not r.size:
                        break
                P = unique(nd)
                steps.append(P)
                r, nd, w, _, _ = split(r, nd, w, P, False)
            if Ls:
                val[np.concatenate(Ls)] = est(np.concatenate(Ds))
            for P in reversed(steps):
                val[P] = _branch_sums(T, P, val)
            return val

        def est_branches_known(V, bnode, big, r, w, owner):
            """:func:`est_branches` when no value is missing: the rows that went to the largest branch end in
            their current leaf; only the others are routed; the leaf counts are summed in the node's order."""
            val = np.zeros(NN)
            if not r.size:
                return val
            a = T.attr[V][owner]
            c = codf[r * d + a]
            br = np.where(nominal[a], c, c > thrl[V][owner])
            own = br == big[owner]
            leafid = np.empty(r.size, dtype=np.int64)
            leafid[own] = curleaf[r[own]]
            pos = np.flatnonzero(~own)
            rr, nd = r[pos], bnode[owner[pos]]
            while pos.size:
                leaf = T.nchild[nd] == 0
                if leaf.any():
                    leafid[pos[leaf]] = nd[leaf]
                    inn = ~leaf
                    pos, rr, nd = pos[inn], rr[inn], nd[inn]
                    if not pos.size:
                        break
                a = T.attr[nd]
                c = codf[rr * d + a]
                nd = T.first[nd] + np.where(nominal[a], c, c > thrl[nd])
            L = unique(leafid)
            slotmap[L] = np.arange(L.size)
            val[L] = est(np.bincount(slotmap[leafid] * C + yh[r], w, minlength=L.size * C).reshape(L.size, C))
            # nested sums over the current subtrees (nodes no entry reached count 0, as in the recursion)
            lv = [bnode[T.nchild[bnode] > 0]]
            while lv[-1].size:
                P = lv[-1]
                ch = T.children(P)
                lv.append(ch[T.nchild[ch] > 0])
            for P in reversed(lv[:-1]):
                val[P] = _branch_sums(T, P, val)
            return val

        def entries_of(V, levels):
            """The routed entries of the nodes ``V`` (each node's in its order) and their owners' positions in V."""
            rs, ws, os = [], [], []
            lv = pos_lvl[V]
            for L in np.unique(lv):
                g = np.flatnonzero(lv == L)
                st, ln = pos_st[V[g]], pos_len[V[g]]
                tot = int(ln.sum())
                if not tot:
                    continue
                idx = np.repeat(st - np.cumsum(ln) + ln, ln) + np.arange(tot)
                rs.append(levels[L][0][idx])
                ws.append(levels[L][1][idx])
                os.append(np.repeat(g, ln))
            if not rs:
                return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64)
            return np.concatenate(rs), np.concatenate(ws), np.concatenate(os)

        def subtree_levels(roots):
            """The subtrees' nodes level by level, all of them, and the inner ones."""
            struct = [roots]
            while True:
                P = struct[-1][T.nchild[struct[-1]] > 0]
                if not P.size:
                    break
                struct.append(T.children(P))
            allnodes = np.concatenate(struct)
            return struct, allnodes, allnodes[T.nchild[allnodes] > 0]

        def subtree_heights(struct):
            """Height of every node of the subtrees given level by level (leaves 0), indexed by node id."""
            hn = np.zeros(NN, dtype=np.int64)
            for lvl, below_lvl in reversed(list(zip(struct[:-1], struct[1:]))):
                # each level is the children of the inner nodes of the one above, parent by parent
                P = lvl[T.nchild[lvl] > 0]
                k = T.nchild[P]
                hn[P] = np.maximum.reduceat(hn[below_lvl], np.cumsum(k) - k) + 1
            return hn

        def prune_sub(roots, rows, wts, start, reset):
            """Prune the disjoint subtrees at ``roots``, the entries ``rows``/``wts`` starting at nodes ``start``
            (each root's entries in its order); ``reset``: recompute their distributions first (raising)."""
            struct, allnodes, inner = subtree_levels(roots)
            if reset:  # Weka's resetDistribution of the raised subtree (no instances: empty, even fractions)
                T.dist[allnodes] = 0.0
                T.frac[inner] = 0.0
                kin = T.nchild[inner]
                for k in np.unique(kin):
                    T.frac[inner[kin == k], :k] = 1.0 / k
            # every node's entries, top-down, grouped by node in the recursion's order
            pos_len[inner] = 0
            per_bag[inner] = 0.0
            my_levels = []
            r, nd, wt = rows, start, wts
            while r.size:
                o = np.argsort(nd, kind="stable")
                r, nd, wt = r[o], nd[o], wt[o]
                U, st, cnt = np.unique(nd, return_index=True, return_counts=True)
                if reset:
                    slotmap[U] = np.arange(U.size)
                    T.dist[U] = np.bincount(slotmap[nd] * C + yh[r], wt, minlength=U.size * C).reshape(U.size, C)
                isin = T.nchild[nd] > 0
                if known_only:
                    curleaf[r[~isin]] = nd[~isin]
                Ui = T.nchild[U] > 0
                U, st, cnt = U[Ui], st[Ui], cnt[Ui]
                r, nd, wt = r[isin], nd[isin], wt[isin]
                if not r.size:
                    break
                st = np.cumsum(cnt) - cnt
                pos_lvl[U] = len(my_levels)
                pos_st[U] = st
                pos_len[U] = cnt
                my_levels.append((r, wt))
                r2, nd2, w2, bags, frac = split(r, nd, wt, U, True)
                k = T.nchild[U]
                b = np.arange(maxk)
                pb = bags[:, :maxk] + bags[np.arange(U.size), k][:, None] * frac
                pb[b[None, :] >= k[:, None]] = 0.0
                per_bag[U] = pb
                if reset:
                    T.frac[U] = frac
                r, nd, wt = r2, nd2, w2
            leaves = allnodes[T.nchild[allnodes] == 0]
            et[leaves] = est(T.dist[leaves])
            # heights: children are decided before their parent
            hn = subtree_heights(struct)
            hi = hn[inner]
            for H in np.unique(hi):
                V = inner[hi == H]
                big = big_branch(V, per_bag[V])
                bnode = T.first[V] + big
                e_leaf = est(T.dist[V])
                e_tree = _branch_sums(T, V, et)
                r, wt, owner = entries_of(V, my_levels)
                if known_only:
                    val = est_branches_known(V, bnode, big, r, wt, owner)
                else:
                    val = est_branches(bnode[owner], r, wt)
                has = pos_len[V] > 0
                e_branch = np.where(has, val[bnode], 0.0)
                to_leaf = (e_leaf - (e_tree + 0.1) < _SMALL) & (e_leaf - (e_branch + 0.1) < _SMALL)
                keep = ~to_leaf & ~(e_branch - (e_tree + 0.1) < _SMALL)
                T.nchild[V[to_leaf]] = 0
                et[V[to_leaf]] = e_leaf[to_leaf]
                if known_only and to_leaf.any():
                    sel = np.flatnonzero(to_leaf[owner])
                    curleaf[r[sel]] = V[owner[sel]]
                et[V[keep]] = e_tree[keep]
                rs = np.flatnonzero(~to_leaf & ~keep)
                if rs.size:
                    # raising: the largest branch replaces the node, which is pruned again (all such nodes at once)
                    R, B = V[rs], bnode[rs]
                    rv, wv, ov = entries_of(R, my_levels)
                    T.attr[R], T.thr[R], T.thrc[R] = T.attr[B], T.thr[B], T.thrc[B]
                    thrl[R] = thrl[B]
                    T.first[R], T.nchild[R] = T.first[B], T.nchild[B]
                    T.parent[T.children(R)] = np.repeat(R, T.nchild[R])
                    prune_sub(R, rv, wv, R[ov], True)

        # --- whole counts, one path per row (no sample weights, no missing value in a tested attribute) ---
        # Every node's rows are then the rows under it and its distribution is their class count, so nothing
        # needs routing but the rows a largest branch does not hold. The rows are kept sorted by the pre-order
        # number of their leaf: the rows of a node are one range of that order (read off a table of row counts
        # by pre-order number), a node's largest branch is a sub-range, and the rest of the node's range are the
        # rows routed down that branch. Raising re-sorts the raised node's range (and recounts its part of the
        # table). All counts are whole numbers, so sums in any order are those of the recursion bit for bit.
        val = np.zeros(NN)

        def preorder():
            """Pre-order numbers: the subtree of node x holds the numbers ``pre[x] .. end[x] - 1``."""
            levels = T.levels(0)
            # each level is the children of the inner nodes of the one above, parent by parent: a node's size is
            # one plus the sum of its children's range, its children's numbers follow its own, each after the
            # subtrees of its elder siblings (an exclusive running sum within the parent's range)
            parents = [lvl[T.nchild[lvl] > 0] for lvl in levels[:-1]]
            starts = [np.cumsum(T.nchild[P]) - T.nchild[P] for P in parents]
            size = np.zeros(NN, dtype=np.int64)
            size[levels[-1]] = 1
            for lvl, P, st, kids in reversed(list(zip(levels[:-1], parents, starts, levels[1:]))):
                size[lvl] = 1
                size[P] += np.add.reduceat(size[kids], st)
            pre = np.zeros(NN, dtype=np.int64)
            for P, st, kids in zip(parents, starts, levels[1:]):
                sz = size[kids]
                elder = np.cumsum(sz) - sz
                pre[kids] = np.repeat(pre[P] + 1 - elder[st], T.nchild[P]) + elder
            return pre, pre + size, levels

        def row_leaves(levels, of):
            """``of[leaf]`` for the leaf of every row in the (collapsed) tree: from the growth's deepest node of each
            row, else routed."""
            row_node = getattr(self, "_row_node", None)
            if row_node is not None and row_node.shape[0] == n:
                reach = np.zeros(NN, dtype=bool)
                reach[np.concatenate(levels)] = True
                top = np.arange(NN)
                # node ids grow with depth: a node cut off by collapsing ends where its nearest kept ancestor does
                cut = np.flatnonzero(~reach)
                dep = T.depth[cut]
                for x in np.split(cut, np.flatnonzero(dep[1:] != dep[:-1]) + 1):
                    top[x] = top[T.parent[x]]
                return of[top][row_node.cpu().numpy()]
            leaf = np.empty(n, dtype=np.int64)
            r, nd = np.arange(n), np.zeros(n, dtype=np.int64)
            while r.size:
                lf = T.nchild[nd] == 0
                leaf[r[lf]] = nd[lf]
                r, nd = r[~lf], nd[~lf]
                a = T.attr[nd]
                c = codf[r * d + a]
                nd = T.first[nd] + np.where(nominal[a], c, c > thrl[nd])
            return of[leaf]

        def ranges(X):
            return below[pre[X]], below[end[X]]

        def recount_below(R, lo, rows, size, first_slot, slot):
            """Recount ``below`` within the pre-order numbers of the raised subtrees ``R`` (disjoint, in row order),
            whose rows ``lo .. lo + rows - 1`` have new keys, given as ``slot``s (see the raising); at the two ends
            of each subtree's numbers it is unchanged."""
            counted = np.cumsum(np.bincount(slot, minlength=int(size.sum())))
            inside = size - 1
            below[segments(pre[R] + 1, inside)] = (np.repeat(lo - (np.cumsum(rows) - rows), inside)
                                                   + counted[segments(first_slot, inside)])

        any_nominal, any_numeric = bool(nominal.any()), bool((~nominal).any())

        def segments(lo, ln):
            """The positions ``lo[i] .. lo[i] + ln[i] - 1``, one range after the other."""
            return np.repeat(lo - np.cumsum(ln) + ln, ln) + arange(int(ln.sum()))

        ar = np.arange(0)

        def arange(m):
            """``np.arange(m)``: a view of one range, grown as needed (numbers 0 .. m - 1 are asked for many times)."""
            nonlocal ar
            if ar.size < m:
                ar = np.arange(max(m, 2 * ar.size))
            return ar[:m]

        def branch_sums(P, vals):
            """Per node of ``P``, the rows ``vals[child]`` of its children added up (whole numbers: exact); rows
            are read with ``np.take``, several times faster than indexing for short rows."""
            if binary:
                f = T.first[P]
                return np.take(vals, f, axis=0) + np.take(vals, f + 1, axis=0)
            k, f = T.nchild[P], T.first[P]
            acc = np.zeros((P.size,) + vals.shape[1:])
            for b in range(int(k.max()) if P.size else 0):
                m = np.flatnonzero(b < k)
                acc[m] += np.take(vals, f[m] + b, axis=0)
            return acc

        touched = np.zeros(NN, dtype=bool)
        is_big, on_path = np.zeros(NN, dtype=bool), np.zeros(NN, dtype=bool)

        def route_down(seg, start, depth):
            """The leaf reached by each of the rows ``seg`` (positions in the row order) from the nodes ``start``,
            none of whose subtrees is more than ``depth`` levels deep.

            Tens of millions of row steps on large trees, so a step does only what it needs: it reads
            the node's first child, attribute and left branch's last code from tables of the current
            tree (``step_*``, kept in step with it) and a row's code straight from the codes in row
            order. A leaf leads to itself there (its own first child, and a test no code passes or a
            padding code of 0), so rows that reached one may take more steps: the rows take
            ``ROUTE_STRIDE`` steps between drops of those at leaves (a drop costs about as much as a
            step), and none once ``depth`` steps were taken. Rows take their steps independently of each
            other: they go all the way in blocks of ``ROUTE_BLOCK``, whose temporaries stay in cache (and
            are reused rather than freshly mapped).
            """
            out = np.empty(seg.size, dtype=np.int64)
            for lo in range(0, seg.size, ROUTE_BLOCK):
                hi = lo + ROUTE_BLOCK
                route_block(seg[lo:hi], start[lo:hi], depth, out[lo:hi])
            return out

        def route_block(seg, start, depth, out):
            """:func:`route_down` of the rows ``seg``, their leaves written to ``out``; the rows that reach a leaf
            before the last step are dropped, their leaves written by position (``live``)."""
            at = seg * row_len
            nd = start
            live = None
            while True:
                for _ in range(min(ROUTE_STRIDE, depth)):
                    c = codes_flat[at + step_attr[nd]]
                    if branch_is_code:
                        nd = step_first[nd] + c
                    elif not any_nominal:
                        nd = step_first[nd] + (c > step_thr[nd])
                    elif not any_numeric:
                        nd = step_first[nd] + (c & step_thr[nd])
                    else:
                        nd = step_first[nd] + np.where(step_nom[nd], c, c > step_thr[nd])
                depth -= ROUTE_STRIDE
                if depth <= 0:
                    break
                lf = step_first[nd] == nd
                done = np.flatnonzero(lf)
                if done.size == nd.size:
                    break
                if done.size:
                    if live is None:
                        live = arange(nd.size)
                    out[live[done]] = nd[done]
                    go = np.flatnonzero(~lf)
                    at, nd, live = at[go], nd[go], live[go]
            if live is None:
                out[:] = nd
            else:
                out[live] = nd

        def distinct(nd):
            """The distinct node ids of ``nd`` in no particular order, in time linear in ``nd`` (not in the tree
            size): of the positions scattered to one id, exactly one is read back."""
            pos = np.arange(nd.size)
            slotmap[nd] = pos
            return nd[slotmap[nd] == pos]

        def decide(leaf_ok, e_leaf, t_tree, e_branch):
            """J48's choice for nodes with these estimates (``t_tree``: the subtrees' plus 0.1, ``leaf_ok``: the leaf
            within it): (to a leaf, kept); neither: the largest branch is raised."""
            to_leaf = leaf_ok & (e_leaf - (e_branch + 0.1) < _SMALL)
            keep = ~to_leaf & ~(e_branch - t_tree < _SMALL)
            return to_leaf, keep

        def nested_estimates(bnode, L, new_L):
            """The largest branches' estimates as the recursion sums them: the finished estimate of every subtree no
            routed row reaches (a kept node's is the sum of its branches', as summed here), ``new_L`` at the reached
            leaves ``L``, and the sums in branch order on the paths from them up to the largest branches, children
            before parents (ascending heights)."""
            val[bnode] = et[bnode]
            is_big[bnode] = True  # the walk up stops there
            X, up = L, []
            while True:
                X = X[~is_big[X]]
                if not X.size:
                    break
                X = distinct(T.parent[X])
                X = X[~on_path[X]]
                on_path[X] = True
                up.append(X)
            is_big[bnode] = False
            inner_up = np.concatenate(up) if up else bnode[:0]
            on_path[inner_up] = False
            kids = T.children(inner_up)
            val[kids] = et[kids]
            val[L] = new_L
            h_up = heights[inner_up]
            for h in np.unique(h_up):
                P = inner_up[h_up == h]
                val[P] = _branch_sums(T, P, val)
            return val[bnode]

        def reset_raised(R, landed):
            """Weka's resetDistribution of the raised subtrees at ``R``, their rows routed down the largest branches
            to the leaves ``landed``.

            Only the nodes on the way from a root to those leaves have new rows; every other node keeps its rows,
            distribution and (final) decision, which pruning it again would repeat bit for bit, so only the changed
            nodes are counted (and later decided) again. Returns them: their leaves, their inner nodes, and which of
            those are roots.
            """
            touched[R] = True
            chain = [R]
            X = distinct(landed)
            while X.size:
                X = X[~touched[X]]
                touched[X] = True
                chain.append(X)
                X = distinct(T.parent[X])
            nodes = np.concatenate(chain)
            touched[nodes] = False
            has_kids = T.nchild[nodes] > 0
            leaves, inner = nodes[~has_kids], nodes[has_kids]
            # a leaf counts the rows of its range, an inner node its children's (children first: ascending
            # heights); branch fractions from the children's weights (even where there are none)
            lo, hi = ranges(leaves)
            ln = hi - lo
            T.dist[leaves] = np.bincount(np.repeat(np.arange(leaves.size), ln) * C + ycls[segments(lo, ln)],
                                         minlength=leaves.size * C).reshape(leaves.size, C)
            h_in = heights[inner]
            for h in np.unique(h_in):
                P = inner[h_in == h]
                T.dist[P] = branch_sums(P, T.dist)
            ntot[nodes], estd[nodes] = est_whole(np.take(T.dist, nodes, axis=0), totals=True)
            T.frac[inner] = 0.0
            kin = T.nchild[inner]
            for k in np.unique(kin):
                g = inner[kin == k]
                bk = ntot[T.first[g][:, None] + np.arange(k)]
                known = _pairwise_rows(bk)
                good = np.abs(known) >= _SMALL
                fk = np.full(bk.shape, 1.0 / k)
                fk[good] = bk[good] / known[good, None]
                T.frac[g, :k] = fk
            # the roots come first in ``nodes`` and so in ``inner``
            return leaves, inner, np.arange(inner.size) < int(has_kids[:R.size].sum())

        def decide_batch(V):
            """Decide the nodes ``V`` (disjoint subtrees, each finished below its node) as the recursion would; raise
            the subtrees that it raises (their rows re-sorted, the node taking its largest branch's test and
            children). Returns the nodes decided for good, and the raised nodes with the leaves their routed rows
            reached."""
            f = T.first[V]
            # the largest branch: the last with the most rows (big_branch's rule, for whole numbers)
            if binary:
                bnode = f + (ntot[f + 1] >= ntot[f])
                e_tree = (0.0 + et[f]) + et[f + 1]  # _branch_sums's additions
            else:
                k = T.nchild[V]
                kmax = int(k.max())
                b = np.arange(kmax)
                pb = np.where(b < k[:, None], ntot[np.minimum(f[:, None] + b, NN - 1)], -1.0)
                bnode = f + (kmax - 1 - np.argmax(pb[:, ::-1], axis=1))
                e_tree = _branch_sums(T, V, et)
            e_leaf = estd[V]
            loV, hiV = ranges(V)
            loB, hiB = ranges(bnode)
            # the node's rows outside its largest branch (before and after its range), routed down that branch;
            # a largest branch that is a leaf ends with all of the node's rows, so its estimate is the node's own
            # as a leaf (the same counts), and nothing is routed (nor ever raised: the node becomes a leaf where
            # the branch would be raised, both within 0.1 of the subtree)
            routed = T.nchild[bnode] > 0
            ln = np.zeros(2 * V.size, dtype=np.int64)
            ln[0::2][routed], ln[1::2][routed] = (loB - loV)[routed], (hiV - hiB)[routed]
            lo = np.empty(2 * V.size, dtype=np.int64)
            lo[0::2], lo[1::2] = loV, hiB
            seg = segments(lo, ln)
            n_out = ln[0::2] + ln[1::2]
            leafid = route_down(seg, np.repeat(bnode, n_out), int(heights[bnode].max(initial=0)))
            # estimates of the largest branches' subtrees holding all of the node's rows: each one's finished
            # estimate plus the changes of the leaves the routed rows reached. The recursion sums the same
            # numbers nested along the paths from those leaves; the two differ by rounding only, at most
            # ``slack`` (additions of non-negative numbers: each input passes at most ``adds`` of them). Where a
            # decision is the same at both ends of that interval it is the recursion's (the decisions are
            # monotone in the estimate); otherwise the nested sums are formed and decide.
            has = hiV > loV
            et_B = et[bnode]
            if seg.size:
                # the reached leaves, each numbered by its place in L (slotmap), and their owners (the nodes whose
                # largest branch holds them: the one with the last pre-order number not above theirs)
                if 4 * seg.size >= NN:
                    L = np.flatnonzero(np.bincount(leafid, minlength=NN))
                else:
                    at = arange(seg.size)
                    slotmap[leafid] = at
                    L = leafid[slotmap[leafid] == at]
                slotmap[L] = arange(L.size)
                by_pre = np.argsort(pre[bnode])
                o_L = by_pre[np.searchsorted(pre[bnode[by_pre]], pre[L], side="right") - 1]
                extra = np.bincount(slotmap[leafid] * C + ycls[seg], minlength=L.size * C).reshape(L.size, C)
                new_dist = np.take(T.dist, L, axis=0)  # rows by np.take: several times faster than indexing
                new_dist += extra
                new_L = est_whole(new_dist)
                et_L = et[L]
                e_branch = et_B + np.bincount(o_L, weights=new_L - et_L, minlength=V.size)
                size = et_B + np.bincount(o_L, weights=new_L + et_L, minlength=V.size)
                adds = (heights[bnode] + 1) * maxk + np.bincount(o_L, minlength=V.size) + 2
                slack = np.where(has & routed, BRANCH_SLACK * 2.0**-53 * adds * size, 0.0)
            else:
                e_branch, slack = et_B, 0.0
            e_branch = np.where(has, np.where(routed, e_branch, e_leaf), 0.0)
            t_tree = e_tree + 0.1
            leaf_ok = e_leaf - t_tree < _SMALL
            to_leaf, keep = decide(leaf_ok, e_leaf, t_tree, e_branch - slack)
            if seg.size:
                hi_leaf, hi_keep = decide(leaf_ok, e_leaf, t_tree, e_branch + slack)
                if (hi_leaf != to_leaf).any() or (hi_keep != keep).any():
                    e_branch = np.where(has, np.where(routed, nested_estimates(bnode, L, new_L), e_leaf), 0.0)
                    to_leaf, keep = decide(leaf_ok, e_leaf, t_tree, e_branch)
            VL = V[to_leaf]
            T.nchild[VL] = 0
            step_first[VL], step_attr[VL], step_thr[VL], step_nom[VL] = VL, leaf_attr, leaf_thr, False
            et[VL] = e_leaf[to_leaf]
            et[V[keep]] = e_tree[keep]
            done = V[to_leaf | keep]
            rs = np.flatnonzero(~to_leaf & ~keep)
            if not rs.size:
                return done, rs, rs
            # raising: the rows routed down the largest branch now end in its leaves; the raised nodes'
            # ranges are re-sorted by their rows' new leaves (the ranges are disjoint)
            raised = np.zeros(V.size, dtype=bool)
            raised[rs] = True
            moved = np.repeat(raised, n_out)
            key[seg[moved]] = pre[leafid[moved]]
            landed = leafid[moved]
            rs = rs[np.argsort(loV[rs])]
            lo_r, rows = loV[rs], hiV[rs] - loV[rs]
            span = segments(lo_r, rows)
            # the keys as slots in the raised subtrees' pre-order numbers laid end to end: in the same order,
            # and in fewer numbers (one radix pass where they fit in 16 bits)
            size = end[V[rs]] - pre[V[rs]]
            first_slot = np.cumsum(size) - size
            slot = key[span] - np.repeat(pre[V[rs]] - first_slot, rows)
            o = span[_stable_order(slot, int(size.sum()))]
            row_codes[span], key[span], ycls[span] = np.take(row_codes, o), key[o], ycls[o]
            recount_below(V[rs], lo_r, rows, size, first_slot, slot)
            R, B = V[rs], bnode[rs]
            T.attr[R], T.thr[R], T.thrc[R] = T.attr[B], T.thr[B], T.thrc[B]
            thrl[R] = thrl[B]
            T.first[R], T.nchild[R] = T.first[B], T.nchild[B]
            step_first[R], step_attr[R], step_thr[R], step_nom[R] = \
                step_first[B], step_attr[B], step_thr[B], step_nom[B]
            T.parent[T.children(R)] = np.repeat(R, T.nchild[R])
            return done, R, landed

        def prune_whole():
            """:func:`prune_sub` for whole counts and one path per row (see above), the whole tree.

            A node is decided once its children are final. The recursion raises a subtree and prunes it again
            before anything above it; nothing outside a subtree reads or changes what is in it (its nodes, its
            rows' range of the row order), so the nodes of disjoint subtrees are decided in any order with the
            same results. Each round decides every node whose children are final: the first rounds are the
            levels of equal height, and the nodes a raising changed are decided again (children first) in the
            same rounds as the others, not in rounds of their own.
            """
            _, allnodes, inner = subtree_levels(np.array([0]))
            leaves = allnodes[T.nchild[allnodes] == 0]
            et[leaves] = estd[leaves]
            # per undecided node, its children not yet final (undecided inner nodes)
            waiting = np.bincount(T.parent[inner[inner != 0]], minlength=NN)
            ready = inner[waiting[inner] == 0]
            while ready.size:
                done, R, landed = decide_batch(ready)
                nxt = []
                if R.size:
                    leaves, inner, is_root = reset_raised(R, landed)
                    et[leaves] = estd[leaves]
                    # a raised node waits for its changed children, decided again (it has its largest branch's
                    # children: a branch that is a leaf is never raised, but a raised leaf would be final)
                    done = np.concatenate([done, R[T.nchild[R] == 0]])
                    waiting[inner] = 0
                    np.add.at(waiting, T.parent[inner[~is_root]], 1)
                    nxt.append(inner[waiting[inner] == 0])
                up = T.parent[done]
                up = up[up >= 0]
                np.subtract.at(waiting, up, 1)
                up = distinct(up)
                nxt.append(up[waiting[up] == 0])
                ready = np.concatenate(nxt)

        old = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old, 4 * int(T.depth[:T.n].max()) + 200))
        try:
            if known_only and w is None:
                pre, end, levels0 = preorder()
                # heights (leaves 0): children are decided before their parents; pruning only removes edges and
                # raising gives a node children lower than its old ones, so a parent stays above its children
                heights = subtree_heights(levels0)
                key = row_leaves(levels0, pre.astype(np.int32))
                order, key = _stable_sort(key, NN, self._device)
                ycls = yh.astype(np.min_scalar_type(C - 1))[order]
                # the rows' codes in that order, in the narrowest type (the routing reads them by range), each row
                # padded to a size that np.take copies as one item (a void of 1 .. 32 bytes: several times faster
                # than rows of other sizes, or indexing)
                code_type = np.min_scalar_type(int(n_known.max()))
                row_bytes = d * code_type.itemsize
                row_len = d if row_bytes > 32 else (1 << (row_bytes - 1).bit_length()) // code_type.itemsize
                padded = np.zeros((n, row_len), dtype=code_type)
                padded[:, :d] = cod
                row_items = np.dtype((np.void, row_len * code_type.itemsize))
                row_codes = np.take(padded.view(row_items).reshape(n), order)  # one item per row
                del padded
                codes_flat = row_codes.view(code_type)  # a view: raising's re-sorts of row_codes show through
                # raising gives a node its largest branch's children: every inner node keeps two if all have two now
                binary = bool((T.nchild[inner0] == 2).all())
                inner_now = T.nchild[:NN] > 0
                step_first = np.where(inner_now, T.first[:NN], np.arange(NN))
                step_nom = inner_now & nominal[np.where(inner_now, T.attr[:NN], 0)]
                # a leaf reads a padding code (0) where rows are padded, so that in an all-nominal tree the branch
                # is the code itself
                leaf_attr = d if row_len > d else 0
                branch_is_code = not any_numeric and row_len > d
                step_attr = np.where(inner_now, T.attr[:NN], leaf_attr).astype(np.min_scalar_type(d))  # narrow
                # the step's test: a nominal branch is the code (else, in an all-nominal tree, the code and'ed with
                # all ones, with zero at a leaf), a numeric one whether the code is above the threshold (at a leaf
                # the largest code: never)
                all_ones = np.iinfo(code_type).max
                leaf_thr = 0 if not any_numeric else all_ones
                step_thr = np.where(inner_now, np.where(step_nom, all_ones if not any_numeric else 0, thrl),
                                    leaf_thr).astype(code_type)
                # below[p]: the number of rows whose leaf has a pre-order number under p (a node's rows are the
                # range below[pre[x]] .. below[end[x]] - 1)
                below = np.zeros(NN + 1, dtype=np.int64)
                np.cumsum(np.bincount(key, minlength=NN), out=below[1:])
                est_whole = _WholeEstimates(cf, n)
                # every node's weight and estimated errors as a leaf, kept up to date where raising recounts (those
                # of the nodes collapsing cut off are never read)
                ntot, estd = est_whole(T.dist[:NN], totals=True)
                prune_whole()
            else:
                w0 = np.ones(n) if w is None else w.cpu().numpy().astype(np.float64)
                prune_sub(np.array([0]), np.arange(n), w0, np.zeros(n, dtype=np.int64), False)
        finally:
            sys.setrecursionlimit(old)
        # raising moves subtrees up: recompute depths of the nodes still reachable
        frontier = np.array([0])
        T.depth[0] = 0
        while frontier.size:
            nc = T.nchild[frontier]
            par = frontier[nc > 0]
            if par.size == 0:
                break
            k = T.nchild[par]
            ch = T.children(par)
            T.parent[ch] = np.repeat(par, k)
            T.depth[ch] = np.repeat(T.depth[par], k) + 1
            frontier = ch

    def _finalize(self):
        """Prediction tables (on the device) of the nodes of the final tree, numbered anew in id order (root 0).

        Collapsing and pruning leave most grown nodes out of the tree (PokerHand 1M: 105k of 400k
        nominal, 108k of 431k numeric); tables of the tree's nodes alone are a quarter of the work
        and of the copy to the device.
        """
        T = self._tree
        maxk = T.maxk
        levels = T.levels(0)
        reach = np.zeros(T.n, dtype=bool)
        reach[np.concatenate(levels)] = True
        old = np.flatnonzero(reach)
        N = old.size
        new_id = np.full(T.n, -1, dtype=np.int64)
        new_id[old] = np.arange(N)
        nchild = T.nchild[old]
        b = np.arange(maxk)
        kids = np.where(b[None, :] < nchild[:, None], new_id[np.minimum(T.first[old][:, None] + b[None, :], T.n - 1)], -1)
        dist = T.dist[old]
        tot = dist.sum(1)
        prob = np.where(tot[:, None] > 0, dist / np.where(tot > 0, tot, 1)[:, None], 0.0)
        empty = tot <= 0
        # an empty node answers with its parent's distribution (inherited itself where the parent is empty): top-down
        for lvl in levels[:-1]:
            P = lvl[T.nchild[lvl] > 0]
            child = new_id[T.children(P)]
            parent = np.repeat(new_id[P], T.nchild[P])
            e = empty[child]
            prob[child[e]] = prob[parent[e]]
        attr = np.where(nchild > 0, T.attr[old], -1)
        is_num = np.zeros(N, dtype=bool)
        inner = attr >= 0
        is_num[inner] = ~np.asarray(self._cols.nominal)[attr[inner]]
        self._t = {"attr": attr, "num": is_num, "thr": T.thr[old], "kids": kids, "frac": T.frac[old],
                   "prob": prob, "empty": empty, "dist": dist}
        self.n_nodes_ = int(N)
        self.n_leaves_ = int((attr < 0).sum())
        self.depth_ = len(levels) - 1
        dev = self._device
        self._dev_tables = {k: torch.as_tensor(v, device=dev) for k, v in self._t.items() if k != "dist"}

    # ------------------------------------------------------------------ predict
    def _encode_predict(self, X):
        arr, _, _ = self._to_frame(X, reset=False)
        if isinstance(arr, _FrameColumns):
            arr.nominal = np.asarray(self._cols.nominal, dtype=bool)
        n, d = arr.shape
        codes = np.empty((n, d), dtype=np.int64)
        vals = np.zeros((n, d))
        miss = np.zeros((n, d), dtype=bool)
        for j in range(d):
            col = _column(arr, j)
            m = _isna(col)
            if self._cols.nominal[j]:
                c = self._cols.encode_col(col, j, unknown="error" if self.handle_unknown == "error" else "missing")
                codes[:, j] = c
                m = m | (c >= self._cols.n_known[j])
            else:
                codes[:, j] = 0
                v = np.where(m, 0.0, col).astype(np.float64)
                vals[:, j] = v
            miss[:, j] = m
        return codes, vals, miss

    def predict_proba(self, X):
        """Class probabilities ``(n_samples, n_classes)`` (J48's ``distributionForInstance``)."""
        check_is_fitted(self, "n_nodes_")
        kind = output_kind(X)
        codes, vals, miss = self._encode_predict(X)
        dev = self._device
        t = self._dev_tables
        n = codes.shape[0]
        codes_t = torch.as_tensor(codes, device=dev)
        vals_t = torch.as_tensor(vals, device=dev)
        miss_t = torch.as_tensor(miss, device=dev)
        C = len(self.classes_)
        out = torch.zeros(n, C, dtype=torch.float64, device=dev)
        rows = torch.arange(n, device=dev)
        node = torch.zeros(n, dtype=torch.int64, device=dev)
        w = torch.ones(n, dtype=torch.float64, device=dev)
        parent = torch.full((n,), -1, dtype=torch.int64, device=dev)
        while rows.numel():
            attr = t["attr"][node]
            leaf = attr < 0
            if bool(leaf.any()):
                lr, ln, lw = rows[leaf], node[leaf], w[leaf]
                out.index_add_(0, lr, t["prob"][ln] * lw[:, None])
            inner = ~leaf
            rows, node, w, attr = rows[inner], node[inner], w[inner], attr[inner]
            if rows.numel() == 0:
                break
            a = attr.clamp_min(0)
            m = miss_t[rows, a]
            isnum = t["num"][node]
            br = torch.where(isnum, (vals_t[rows, a] > t["thr"][node]).to(torch.int64), codes_t[rows, a])
            br = torch.where(m, torch.zeros_like(br), br)
            child = t["kids"][node, br]
            # known values: one child; an empty child answers with this node's distribution (J48)
            kr, kc, kw = rows[~m], child[~m], w[~m]
            # missing: every non-empty child with the branch fraction
            mr, mn, mw = rows[m], node[m], w[m]
            if mr.numel():
                kids = t["kids"][mn]  # (q, maxk)
                fr = t["frac"][mn]
                okk = (kids >= 0) & ~t["empty"][kids.clamp_min(0)] & (fr > 0)
                qi, bi = okk.nonzero(as_tuple=True)
                mr2, mc2, mw2 = mr[qi], kids[qi, bi], mw[qi] * fr[qi, bi]
            else:
                mr2 = mc2 = torch.zeros(0, dtype=torch.int64, device=dev)
                mw2 = torch.zeros(0, dtype=torch.float64, device=dev)
            rows = torch.cat([kr, mr2])
            node = torch.cat([kc, mc2])
            w = torch.cat([kw, mw2])
        del parent
        s = out.sum(1, keepdim=True)
        out = torch.where(s > 0, out / s.clamp_min(1e-300), out)
        return to_output(out, kind) if kind.kind == "torch" else out.cpu().numpy()

    def predict(self, X):
        """The most probable class (first in ``classes_`` order within 1e-6, as J48)."""
        proba = self.predict_proba(X)
        p = proba if isinstance(proba, np.ndarray) else proba.detach().cpu().numpy()
        best = p.max(1, keepdims=True)
        idx = (p >= best - _SMALL).argmax(1)
        pred = self.classes_[idx]
        if isinstance(proba, torch.Tensor) and pred.dtype.kind in "biuf":
            return torch.as_tensor(pred, device=proba.device)
        return pred

    # ------------------------------------------------------------------ text
    def export_text(self, feature_names=None, decimals=6):
        """The tree in Weka J48's text layout: ``attr = value: class (weight/errors)``."""
        check_is_fitted(self, "n_nodes_")
        names = list(feature_names) if feature_names is not None else self._names
        lines = []

        def fmt(v):
            if isinstance(v, (float, np.floating)):
                return f"{v:.{decimals}g}"
            return str(v)

        def leaf_text(i):
            dist = self._t["dist"][i]
            cls = self.classes_[int(np.argmax(self._t["prob"][i]))]
            tot = dist.sum()
            err = tot - dist.max() if tot > 0 else 0.0
            return f"{cls} ({_jnum(tot)}/{_jnum(err)})" if err > _SMALL else f"{cls} ({_jnum(tot)})"

        def walk(i, indent):
            j = int(self._t["attr"][i])
            kids = [k for k in self._t["kids"][i] if k >= 0]
            for b, k in enumerate(kids):
                if self._t["num"][i]:
                    thr = self._t["thr"][i]
                    cond = f"{names[j]} {'<=' if b == 0 else '>'} {fmt(thr)}"
                else:
                    cond = f"{names[j]} = {fmt(self._cols.values[j][b])}"
                prefix = "|   " * indent
                if self._t["attr"][k] < 0:
                    lines.append(f"{prefix}{cond}: {leaf_text(k)}")
                else:
                    lines.append(f"{prefix}{cond}")
                    walk(k, indent + 1)

        if self._t["attr"][0] < 0:
            return f": {leaf_text(0)}"
        walk(0, 0)
        return "\n".join(lines)


class _Nodes:
    """Growable node arrays; the children of a node are the ids ``first .. first + nchild - 1``."""

    def __init__(self, C, maxk, capacity=64):
        self.C, self.maxk, self.n = C, maxk, 0
        self._alloc(max(64, int(capacity)))

    def _alloc(self, cap):
        # zeros are mapped lazily and the -1 fields are written by add(): a capacity never reached costs no
        # memory, and a generous first one spares the copies of growing (PokerHand 1M: six, 30 ms)
        old = {k: getattr(self, k) for k in ("dist", "parent", "attr", "thr", "thrc", "first", "nchild", "frac", "depth")} \
            if hasattr(self, "dist") else None
        self.dist = np.zeros((cap, self.C))
        self.parent = np.empty(cap, dtype=np.int64)
        self.attr = np.empty(cap, dtype=np.int64)
        self.thr = np.zeros(cap)
        self.thrc = np.empty(cap, dtype=np.int64)  # numeric split: the last level code of the left branch
        self.first = np.zeros(cap, dtype=np.int64)
        self.nchild = np.zeros(cap, dtype=np.int64)
        self.frac = np.zeros((cap, self.maxk))
        self.depth = np.zeros(cap, dtype=np.int64)
        if old:
            for k, v in old.items():
                getattr(self, k)[:self.n] = v[:self.n]

    def trim(self):
        """Views of the ``n`` nodes only: a fitted model pickles its tree, not the capacity left over."""
        for k in ("dist", "parent", "attr", "thr", "thrc", "first", "nchild", "frac", "depth"):
            setattr(self, k, getattr(self, k)[:self.n])

    def add(self, parents, depth):
        m = len(parents)
        if self.n + m > self.dist.shape[0]:
            self._alloc(max(2 * self.dist.shape[0], self.n + m))
        ids = np.arange(self.n, self.n + m)
        self.parent[ids] = parents
        self.attr[ids] = -1
        self.thrc[ids] = -1
        self.depth[ids] = depth
        self.n += m
        return ids

    def children(self, parents):
        """Ids of the children of ``parents``, parent by parent, each parent's in order."""
        k = self.nchild[parents]
        return np.repeat(self.first[parents], k) + (np.arange(k.sum()) - np.repeat(np.cumsum(k) - k, k))

    def levels(self, root):
        """The subtree under ``root`` as arrays of node ids, one per depth, top-down."""
        levels = [np.array([root])]
        while True:
            parents = levels[-1][self.nchild[levels[-1]] > 0]
            if not parents.size:
                return levels
            levels.append(self.children(parents))

    def errors(self):
        d = self.dist[:self.n]
        return d.sum(1) - d.max(1)

    def estimated_errors(self, cf):
        d = self.dist[:self.n]
        N = d.sum(1)
        e = N - d.max(1)
        out = np.zeros(self.n)
        pos = N >= _SMALL
        out[pos] = e[pos] + _add_errors_vec(N[pos], e[pos], cf)
        return out


def _branch_sums(T, P, vals):
    """``sum(vals[c] for c in children(p))`` for every inner node ``p`` of ``P``, added in branch order."""
    k = T.nchild[P]
    f = T.first[P]
    acc = np.zeros(P.size)
    for b in range(int(k.max()) if P.size else 0):
        m = b < k
        acc[m] = acc[m] + vals[f[m] + b]
    return acc


def _add_errors_vec(N, e, cf):
    """Vectorised :func:`add_errors`."""
    z = _z_of(cf)

    def normal(N, e):
        f = (e + 0.5) / N
        r = (f + z * z / (2 * N) + z * np.sqrt(np.maximum(f / N - f * f / N + z * z / (4 * N * N), 0))) / (1 + z * z / N)
        return r * N - e

    def upper(N, e):
        return np.where(e + 0.5 >= N, np.maximum(N - e, 0.0), normal(N, e))

    with np.errstate(divide="ignore", invalid="ignore"):
        base = N * (1 - np.power(cf, 1 / N))
        low = base + e * (upper(N, np.ones_like(e)) - base)
        return np.where(e < 1, np.where(e == 0, base, low), upper(N, e))


def _stable_sort(key, bound, device=None):
    """``(order, key[order])`` for ``order = np.argsort(key, kind="stable")``, non-negative integers below ``bound``.

    Torch sorts 32-bit integer keys stably by radix on all cores (several times faster than NumPy's
    two passes on a million keys), or on ``device`` where that is a GPU (faster still, copies
    included; BENCHMARKS.md, "Design measurements quoted in the code"); the stable order is
    unique, so every one gives the same.
    """
    if key.size >= TORCH_SORT_MIN and bound <= 1 << 31:
        keys = torch.from_numpy(key.astype(np.int32, copy=False))
        if device is not None and torch.device(device).type == "cuda":
            keys, order = torch.sort(keys.to(device), stable=True)
            return order.cpu().numpy(), keys.cpu().numpy()
        keys, order = torch.sort(keys, stable=True)
        return order.numpy(), keys.numpy()
    order = _stable_order(key, bound)
    return order, key[order]


def _stable_order(key, bound):
    """``np.argsort(key, kind="stable")`` for non-negative integers below ``bound``.

    NumPy sorts 16-bit keys by radix and wider ones by comparison; below ``2**32`` two stable
    radix passes (low 16 bits, then high) give the same order several times faster.
    """
    if bound <= 1 << 16:
        return np.argsort(key.astype(np.uint16), kind="stable")
    if bound <= 1 << 32:
        low = np.argsort((key & 0xFFFF).astype(np.uint16), kind="stable")
        return low[np.argsort((key[low] >> 16).astype(np.uint16), kind="stable")]
    return np.argsort(key, kind="stable")


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


def _z_of(cf):
    """The normal quantile of confidence ``cf`` (at most 0.5), computed once per value."""
    if cf > 0.5:
        raise ValueError(f"confidence must be at most 0.5; got {cf}")
    z = _Z_CACHE.get(cf)
    if z is None:
        z = _Z_CACHE[cf] = float(norm.ppf(1 - cf))
    return z


def _normal_upper(N, e, z):
    """Weka's ``addErrs`` for ``1 <= e < N - 0.5``: the normal approximation of the upper confidence bound."""
    f = (e + 0.5) / N
    r = (f + (z * z) / (2 * N) + z * np.sqrt((f / N) - (f * f / N) + (z * z / (4 * N * N)))) / (1 + (z * z) / N)
    return (r * N) - e


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
            # block by block: a block's temporaries stay in cache, and are reused rather than freshly mapped
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


class _AttrGroups:
    """The attribute groups of the split search: ``exact`` (one number of levels each), ``whole`` (int64 tables),
    and ``pick``, those of :meth:`C45Classifier._chosen`."""

    def __init__(self, exact, whole, pick):
        self.exact, self.whole, self.pick = exact, whole, pick


#: Safety factor on the rounding bound within which whole-count pruning forms the recursion's nested sums of
#: estimates to decide (see ``prune_whole`` in :meth:`C45Classifier._prune_raising`). At 1 the bound is that of
#: sums of non-negative numbers; the factor covers the shortcuts of its derivation. Errors measured on Poker Hand
#: and KDD Cup 99 trees stay below a third of the bound at 1.
BRANCH_SLACK = 4.0

#: Steps the whole-count pruning's routing takes between drops of the rows that reached a leaf (see
#: ``route_down`` in :meth:`C45Classifier._prune_raising`): a drop costs about a step, a row at a leaf stays there.
ROUTE_STRIDE = 3

#: Keys from which :func:`_stable_sort` sorts with torch rather than NumPy (below, the call's fixed cost counts).
TORCH_SORT_MIN = 1 << 16

#: Rows :class:`_WholeEstimates` estimates at a time (the temporaries of a block stay in cache).
EST_BLOCK = 1 << 13

#: Rows the whole-count pruning routes at a time (see ``route_down`` in :meth:`C45Classifier._prune_raising`):
#: many, so that a step's fixed cost does not count, and few, so that its temporaries stay in cache and are
#: reused rather than freshly mapped (on Poker Hand 1M, 2**15 .. 2**17 route the nominal tree's rounds of up to
#: a million rows about a third faster than one block).
ROUTE_BLOCK = 1 << 17

#: Numeric attributes share a padded group when the group's most levels are at most this many times its fewest.
MERGE_LEVELS_RATIO = 1.5


def _merge_numeric_groups(groups, L_off, device):
    """``groups`` with the numeric ones of similar numbers of levels merged, for whole (int64) count tables.

    Each group costs some forty tensor ops per depth, and numeric attributes come with many different
    numbers of levels (KDD Cup 99: 24 numeric groups, most of one attribute). A merged group pads each
    attribute to the group's ``k`` levels with empty ones (``pad``: the mask of real levels, ``(A, k, 1)``, and
    each attribute's last real level, ``(A,)``). With whole counts that changes no value: sums and prefix
    sums over levels are exact in int64, an empty level after the last one is no candidate cut (nothing
    right of it), the best cut and its gain are maxima over the same candidates, and the next level with
    values is clipped at the attribute's own last level. Fractional counts keep the exact groups: their
    float sums over levels could be added in another order. Groups of fewer than two levels stay apart.
    """
    out = [g for g in groups if g[0] or g[1] < 2]
    num = sorted((g for g in groups if not g[0] and g[1] >= 2), key=lambda g: g[1])
    buckets = []
    for g in num:
        if buckets and g[1] <= MERGE_LEVELS_RATIO * buckets[-1][0][1]:
            buckets[-1].append(g)
        else:
            buckets.append([g])
    L_off = np.asarray(L_off, dtype=np.int64)
    for b in buckets:
        if len(b) == 1:
            out.append(b[0])
            continue
        k = b[-1][1]
        J = [j for g in b for j in g[4]]
        kr = np.asarray([g[1] for g in b for _ in g[4]], dtype=np.int64)
        pos = np.arange(k)[None, :]
        real = pos < kr[:, None]
        # padded levels read the attribute's first level (any valid index), masked to zero
        lv = (L_off[np.asarray(J)][:, None] + np.where(real, pos, 0)).reshape(-1)
        pad = (torch.as_tensor(real[:, :, None], device=device), torch.as_tensor(kr - 1, device=device))
        out.append((False, k, torch.as_tensor(np.asarray(J, dtype=np.int64), device=device),
                    torch.as_tensor(lv, device=device), J, pad))
    return out


def _jnum(x):
    """A weight as J48 prints it: Weka's ``Utils.roundDouble(x, 2)`` (half up) in Java's ``Double.toString``."""
    r = math.floor(float(x) * 100 + 0.5) / 100
    if r == 0 or 1e-3 <= abs(r) < 1e7:
        return repr(r)
    m, e = f"{r:.15e}".split("e")
    m = m.rstrip("0")
    return f"{m}0E{int(e)}" if m.endswith(".") else f"{m}E{int(e)}"


def _ratio(gain, split_ent, total):
    denom = split_ent / total.clamp_min(1e-300)
    return torch.where((split_ent.abs() < _SMALL) | (gain <= 0), torch.zeros_like(gain), gain / denom)


def _bincount(index, size):
    """``torch.bincount(index, minlength=size)`` for indices below ``size``, without waiting for the device.

    On a CUDA device ``torch.bincount`` reads the minimum and maximum back to the
    host (two waits per call); a scatter-add into a zeroed table of the known size
    gives the same int64 counts without them. On the CPU, bincount is the faster.
    """
    if index.device.type == "cpu":
        return torch.bincount(index, minlength=size)
    return torch.zeros(size, dtype=torch.int64, device=index.device).scatter_add_(0, index, torch.ones_like(index))


def _compact(mask, pos, m, *tensors):
    """``t[mask]`` for each of ``tensors``, in order, when the host knows ``m = mask.sum()``.

    ``pos`` is ``cumsum(mask) - 1``. Boolean indexing waits for the device to learn
    the size; a scatter to the known positions (the others to a spare slot that is
    dropped) does not. Returns one tensor, or a tuple for several.
    """
    target = torch.where(mask, pos, m)
    out = tuple(torch.empty(m + 1, dtype=t.dtype, device=t.device).scatter_(0, target, t)[:m] for t in tensors)
    return out[0] if len(out) == 1 else out


def _sibling_plan(split, entries, starts, ks, parent_row, min_saved=0.0):
    """Which nodes of a depth to count and which to derive as their parent's count table minus their siblings'.

    The depth's nodes are the children of the previous depth's splits: ``ks[p]`` of them from
    ``starts[p]`` for split ``p``, whose table is row ``parent_row[p]`` of the previous table, and
    together they hold exactly their parent's rows (whole counts, no missing value routed).
    ``split``: which nodes can split; ``entries``: their rows. Per parent, the splittable child
    with the most rows (the first such) is derived when its siblings hold fewer rows than it, so
    that counting them is cheaper than counting it; its siblings with rows are then counted too.

    Returns ``None`` when no table is derived, else a dict: ``order`` (the splittable nodes in table
    order, counted ones then derived ones), ``group`` (histogram group of every node: counted
    splittable ones first, then room for the derived tables, then the counted siblings that cannot
    split; all other rows to the last, dropped group), ``n_groups``, ``n_counted`` (splittable and
    counted), ``parent`` (previous table row of each derived node), ``sib_of`` / ``sib_group`` (each
    derived node's counted siblings) and ``entries`` (the rows counted).
    """
    G = split.size
    par = np.repeat(np.arange(ks.size), ks)
    val = np.where(split, entries, -1.0)
    most = np.maximum.reduceat(val, starts)
    first = np.minimum.reduceat(np.where(val == most[par], np.arange(G), G), starts)
    derive = most - np.add.reduceat(np.where(split, 0.0, entries), starts) > max(min_saved, 0.0)
    if not derive.any():
        return None
    D = first[derive]
    is_d = np.zeros(G, dtype=bool)
    is_d[D] = True
    counted = ~is_d & (split | (derive[par] & (entries > 0)))
    cs, helper = counted & split, counted & ~split
    n1, nD, nH = int(cs.sum()), int(D.size), int(helper.sum())
    group = np.full(G, n1 + nD + nH, dtype=np.int64)
    group[cs] = np.arange(n1)
    group[helper] = n1 + nD + np.arange(nH)
    sib = np.flatnonzero(counted & derive[par])
    owner = np.full(ks.size, -1, dtype=np.int64)
    owner[derive] = np.arange(nD)
    return {"order": np.concatenate([np.flatnonzero(cs), D]), "group": group, "n_groups": n1 + nD + nH + 1,
            "n_counted": n1, "parent": np.asarray(parent_row)[derive], "sib_of": owner[par[sib]],
            "sib_group": group[sib], "entries": int(entries[counted].sum())}
