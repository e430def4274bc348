"""Training and prediction data to integer codes: per feature, ordered levels (numeric) or categories (nominal).

Every feature is encoded into ``n_known`` level codes plus one more, the last, for a missing
value. A numeric feature's levels are its distinct values in order, or, with more than
``max_bins`` of them, equal-frequency bins; a nominal feature's are its categories in
:func:`_category_key` order. Labels become codes of ``classes_``.

The general paths sort and look up values one by one; faster ones give the same values and codes
where they apply: counting for small whole numbers (:func:`_small_int_codes`,
:func:`_small_int_matrix_codes`), hashing for other floats and strings (:func:`_float_codes`,
:func:`_str_codes`), and DataFrame columns read one by one without boxing (:class:`_FrameColumns`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import column_or_1d

from .._encode import MAX_LEVELS

#: Most distinct values of a nominal feature (the store's limit on levels of one column).
MAX_NOMINAL_VALUES = MAX_LEVELS


class _Columns:
    """Per-feature encoding of a training matrix into ordered / nominal codes.

    Attributes (lists, one entry per feature): ``values`` (a nominal feature's categories, object
    array; a numeric one's distinct values, or ``("binned", cuts)``), ``n_known`` (its codes
    ``0 .. n_known - 1``; code ``n_known`` is a missing value), ``n_levels`` (``n_known + 1``),
    ``has_missing``, and for numeric features ``bin_max`` / ``bin_min`` (each level's largest and
    smallest training value: J48's cut lies between two of them); ``nominal`` (bool mask), ``names``.
    """

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
                        # or searching all of the column
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
        """Codes ``(n, d)`` int32 of training data (of ``X`` as given to the constructor, found then where they
        could be)."""
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
            # strings match only the categories whose key is a string (_category_key), by one hash lookup in C
            keys = {}
            for i, x in enumerate(v.tolist()):
                kind, key = _category_key(x)
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
            lookup = {_category_key(x): i for i, x in enumerate(v.tolist())}
            codes = np.fromiter((lookup.get(_category_key(x), -1) for x in col[known].tolist()), dtype=np.int64,
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

    def encode_predict(self, X, handle_unknown):
        """Codes, numeric values and missing mask, each ``(n, d)``, of prediction data ``X`` (a matrix from
        the estimator's input check); nominal codes of categories fit never saw raise, or are missing with
        ``handle_unknown="missing"``."""
        if isinstance(X, _FrameColumns):
            X.nominal = np.asarray(self.nominal, dtype=bool)
        n, d = X.shape
        codes = np.empty((n, d), dtype=np.int64)
        vals = np.zeros((n, d))
        miss = np.zeros((n, d), dtype=bool)
        for j in range(d):
            col = _column(X, j)
            m = _isna(col)
            if self.nominal[j]:
                c = self.encode_col(col, j, unknown="error" if handle_unknown == "error" else "missing")
                codes[:, j] = c
                m = m | (c >= self.n_known[j])
            else:
                codes[:, j] = 0
                v = np.where(m, 0.0, col).astype(np.float64)
                vals[:, j] = v
            miss[:, j] = m
        return codes, vals, miss


def encode_labels(y, n_samples):
    """``(classes, codes)`` of the class labels ``y``, one per row of ``X`` (``n_samples``), checked as labels."""
    y = column_or_1d(y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else y, warn=True)
    if y.shape[0] != n_samples:
        raise ValueError(f"y has {y.shape[0]} labels but X has {n_samples} samples; pass one label per row of X")
    if not (y.dtype.kind in "biu" or _only_str(y)):
        # whole numbers and strings are always classes; sklearn's check would sort all of y to say so
        check_classification_targets(y)
    if y.dtype.kind == "f" and not np.isfinite(y).all():
        raise ValueError("y contains NaN or infinity")
    return _classes(y)


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
    dozen per column. Returns the list of each column's sorted distinct values (float64) and the
    codes. ``None`` where the values of ``X`` span more than ``max(2**16, n)`` (each column's range
    is then its own; the per-column paths take it) or the table of counts would outgrow ``X``.
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

    The passes over all of ``X`` are memory-bound, which a GPU's memory does many times faster than
    the fit's host, copies included (BENCHMARKS.md, "Design measurements quoted in the code").
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
    """The distinct values of object ``known`` in :func:`_category_key` order and each value's index among them,
    or ``None``.

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
    """Column ``j`` of a matrix or of :class:`_FrameColumns`."""
    return X.column(j) if isinstance(X, _FrameColumns) else X[:, j]


def _isna(col):
    """The missing values of one column: NaN, and ``None`` / ``pd.NA`` / ``NaT`` of object columns."""
    if col.dtype.kind == "f":
        return np.isnan(col)
    if col.dtype.kind in "biu":
        return np.zeros(col.shape[0], dtype=bool)
    return np.asarray(pd.isna(col), dtype=bool)


def _category_key(v):
    """The key that identifies and orders a category: booleans, then numbers by value (``1`` and ``1.0`` are one
    category), then everything else by its ``str``."""
    if isinstance(v, (bool, np.bool_)):
        return ("b", bool(v))
    if isinstance(v, (int, float, np.integer, np.floating)):
        return ("n", float(v))
    return ("s", str(v))


def _all_numbers(v):
    """Whether every category of ``v`` is a number (not a bool): float input is then looked up by value."""
    return all(isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))
               for x in v.tolist())


def _sorted_unique(known):
    """The distinct values by :func:`_category_key` in key order, each as first seen."""
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
        seen.setdefault(_category_key(x), x)
    keys = sorted(seen)
    arr = np.empty(len(keys), dtype=object)
    arr[:] = [seen[k] for k in keys]
    return arr

