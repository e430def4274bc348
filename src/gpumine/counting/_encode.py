"""Schema and integer coding of columns: the first step of every store.

Every column becomes small non-negative integer *codes* (its *levels*):

* ``"categorical"``: the distinct non-missing values, sorted, are levels ``0..k-1``.
* ``"integer"``: non-negative integers keep their value as the code, so bit-slices
  hold the binary value (as in the seed) and ranges are value ranges.
* ``"numeric"``: binned by ``"equal_width"`` or ``"equal_frequency"`` edges
  (``bins`` of them), or ``"unique"`` (one level per distinct value); levels keep
  the order of the values.

A missing value (NaN / None / pandas NA) gets its own level, the last one,
when the column has any at build time. Codes of values unseen at build time are
``-1`` (:meth:`ColumnInfo.encode` with ``handle_unknown="ignore"``) or an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import numpy as np
import pandas as pd
import torch

__all__ = ["ColumnInfo", "EncodedTable", "encode_table", "KINDS", "STRATEGIES"]

KINDS = ("categorical", "integer", "numeric")
STRATEGIES = ("equal_width", "equal_frequency", "unique")
MAX_LEVELS = 1 << 15


@dataclass
class ColumnInfo:
    """How one column maps values to levels.

    Attributes
    ----------
    name : str
    kind : {"categorical", "integer", "numeric"}
    n_levels : int
        Number of levels, the missing level included.
    has_missing : bool
        Whether the last level stands for missing values.
    categories : ndarray or None
        Categorical: the value of each known level.
    edges : ndarray or None
        Numeric: ``n_bins + 1`` bin edges (``unique``: the distinct values).
    bin_min, bin_max : ndarray or None
        Numeric: the smallest / largest training value in each bin.
    """

    name: str
    kind: str
    n_levels: int
    has_missing: bool = False
    categories: np.ndarray | None = None
    edges: np.ndarray | None = None
    strategy: str | None = None
    bin_min: np.ndarray | None = None
    bin_max: np.ndarray | None = None
    _lookup: dict = field(default=None, repr=False, compare=False)

    @property
    def n_known(self) -> int:
        """Levels that stand for values (the missing level excluded)."""
        return self.n_levels - int(self.has_missing)

    @property
    def missing_code(self) -> int:
        """The code of the missing level, or -1 when the column has none."""
        return self.n_levels - 1 if self.has_missing else -1

    @property
    def ordered(self) -> bool:
        return self.kind in ("integer", "numeric")

    def level_value(self, code: int):
        """A printable value for a level (category, integer, or bin interval)."""
        if self.has_missing and code == self.missing_code:
            return None
        if self.kind == "categorical":
            return self.categories[code]
        if self.kind == "integer":
            return int(code)
        if self.strategy == "unique":
            return self.edges[code]
        return (self.edges[code], self.edges[code + 1])

    def code_of(self, value) -> int:
        """The level code of one raw value; raises ``ValueError`` for a value never seen."""
        codes = self.encode(np.asarray([value], dtype=object), handle_unknown="ignore")
        if codes[0] < 0:
            raise ValueError(f"column {self.name!r} has no level for value {value!r}")
        return int(codes[0])

    def encode(self, values, handle_unknown: str = "error") -> np.ndarray:
        """Codes (int64) of ``values`` under this column's levels.

        ``handle_unknown="error"`` raises ``ValueError`` on a value outside the
        levels (or a missing value when the column had none at build time);
        ``"ignore"`` gives code ``-1`` instead.
        """
        values = np.asarray(values)
        miss = _missing_mask(values)
        out = np.full(values.shape[0], -1, dtype=np.int64)
        known = ~miss
        if self.kind == "categorical":
            if self._lookup is None:
                self._lookup = {_key(v): i for i, v in enumerate(self.categories.tolist())}
            lk = self._lookup
            vals = values[known]
            out[known] = np.fromiter((lk.get(_key(v), -1) for v in vals.tolist()), dtype=np.int64, count=vals.shape[0])
        elif self.kind == "integer":
            vals = _as_float(values[known], self.name)
            ok = (vals == np.round(vals)) & (vals >= 0) & (vals < self.n_known)
            out_k = np.where(ok, vals, -1).astype(np.int64)
            out[known] = out_k
        else:
            vals = _as_float(values[known], self.name)
            if self.strategy == "unique":
                idx = np.searchsorted(self.edges, vals)
                idx_c = np.minimum(idx, len(self.edges) - 1)
                ok = self.edges[idx_c] == vals
                out[known] = np.where(ok, idx_c, -1)
            else:
                # values beyond the outer edges fall into the outer bins
                idx = np.searchsorted(self.edges[1:-1], vals, side="right")
                out[known] = idx
                bad = ~np.isfinite(vals)
                out[np.flatnonzero(known)[bad]] = -1
        if self.has_missing:
            out[miss] = self.missing_code
        if handle_unknown == "error":
            bad = out < 0
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                what = "a missing value" if miss[i] else f"value {values[i]!r}"
                raise ValueError(
                    f"column {self.name!r} got {what} at row {i} that was not seen when the "
                    f"encoding was built ({int(bad.sum())} such value(s)); rebuild with data that "
                    "holds it, or use handle_unknown='ignore'"
                )
        return out


def _key(v):
    # make 1 and 1.0 and np.int64(1) the same category, keep strings apart
    if isinstance(v, (bool, np.bool_)):
        return ("b", bool(v))
    if isinstance(v, (int, float, np.integer, np.floating)):
        f = float(v)
        return ("n", f)
    return ("s", str(v))


def _missing_mask(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind == "f":
        return np.isnan(values)
    if values.dtype.kind in "biu":
        return np.zeros(values.shape[0], dtype=bool)
    return np.asarray(pd.isna(values), dtype=bool)


def _as_float(values: np.ndarray, name: str) -> np.ndarray:
    try:
        out = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"column {name!r} holds non-numeric values but its kind needs numbers; declare it "
            "'categorical' in the schema"
        ) from None
    return out


def _build_column(values: np.ndarray, name: str, spec) -> tuple[ColumnInfo, np.ndarray]:
    kind, opts = _parse_spec(spec, name)
    miss = _missing_mask(values)
    has_missing = bool(miss.any())
    known = values[~miss]
    if kind == "categorical":
        keys = [_key(v) for v in known.tolist()]
        uniq = {}
        for k, v in zip(keys, known.tolist()):
            uniq.setdefault(k, v)
        order = sorted(uniq, key=lambda k: (k[0], k[1]))
        cats = np.empty(len(order), dtype=object)
        cats[:] = [uniq[k] for k in order]
        if all(isinstance(c, (int, float, np.integer, np.floating)) and not isinstance(c, bool) for c in cats):
            cats = np.asarray(cats.tolist())
        info = ColumnInfo(name, "categorical", len(cats) + has_missing, has_missing, categories=cats)
    elif kind == "integer":
        vals = _as_float(known, name)
        if vals.size and (np.any(vals != np.round(vals)) or np.any(vals < 0)):
            raise ValueError(
                f"column {name!r} was declared 'integer' but holds negative or fractional values; "
                "declare it 'categorical' or 'numeric'"
            )
        top = int(vals.max()) + 1 if vals.size else 1
        info = ColumnInfo(name, "integer", top + has_missing, has_missing)
    else:
        vals = _as_float(known, name)
        if not np.all(np.isfinite(vals)):
            raise ValueError(f"column {name!r} contains infinity; remove it or use NaN for missing")
        strategy = opts.get("strategy", "equal_frequency")
        bins = int(opts.get("bins", 16))
        if strategy not in STRATEGIES:
            raise ValueError(f"column {name!r}: strategy must be one of {STRATEGIES}; got {strategy!r}")
        if strategy == "unique":
            edges = np.unique(vals)
            if edges.size == 0:
                edges = np.zeros(1)
            info = ColumnInfo(name, "numeric", len(edges) + has_missing, has_missing, edges=edges, strategy="unique")
        else:
            if bins < 1:
                raise ValueError(f"column {name!r}: bins must be >= 1; got {bins}")
            lo, hi = (float(vals.min()), float(vals.max())) if vals.size else (0.0, 1.0)
            if strategy == "equal_width":
                edges = np.linspace(lo, hi, bins + 1)
            else:
                edges = np.unique(np.quantile(vals, np.linspace(0, 1, bins + 1))) if vals.size else np.array([0.0, 1.0])
                if edges.size < 2:
                    edges = np.array([lo, hi if hi > lo else lo + 1.0])
            info = ColumnInfo(name, "numeric", len(edges) - 1 + has_missing, has_missing, edges=edges, strategy=strategy)
    if info.n_levels > MAX_LEVELS:
        raise ValueError(
            f"column {name!r} has {info.n_levels} levels, more than the {MAX_LEVELS} a store holds; "
            "declare it 'numeric' with bins, or drop it"
        )
    codes = info.encode(values, handle_unknown="error")
    if info.kind == "numeric":
        k = info.n_known
        mn = np.full(k, np.nan)
        mx = np.full(k, np.nan)
        sel = codes[~miss]
        if sel.size:
            v = _as_float(known, name)
            order = np.lexsort((v, sel))
            s, vs = sel[order], v[order]
            first = np.r_[True, s[1:] != s[:-1]]
            last = np.r_[s[1:] != s[:-1], True]
            mn[s[first]] = vs[first]
            mx[s[last]] = vs[last]
        info.bin_min, info.bin_max = mn, mx
    return info, codes


def _parse_spec(spec, name):
    if isinstance(spec, ColumnInfo):
        raise TypeError("pass a kind string or dict as a schema entry, not a ColumnInfo")
    if isinstance(spec, str):
        kind, opts = spec, {}
    elif isinstance(spec, dict):
        opts = dict(spec)
        kind = opts.pop("kind", "numeric")
    elif isinstance(spec, tuple) and spec:
        kind, opts = spec[0], dict(spec[1]) if len(spec) > 1 else {}
    else:
        raise TypeError(
            f"schema entry for column {name!r} must be a kind string {KINDS}, a dict like "
            f"{{'kind': 'numeric', 'bins': 16, 'strategy': 'equal_width'}}, or (kind, options); got {spec!r}"
        )
    if kind not in KINDS:
        raise ValueError(f"schema entry for column {name!r}: kind must be one of {KINDS}; got {kind!r}")
    return kind, opts


def _infer_spec(values: np.ndarray, max_integer_levels: int = 4096):
    if values.dtype.kind in "biu":
        if values.size and values.min() >= 0 and values.max() < max_integer_levels:
            return "integer"
        return "categorical"
    if values.dtype.kind == "f":
        known = values[~np.isnan(values)]
        if known.size and np.all(known == np.round(known)) and known.min() >= 0 and known.max() < max_integer_levels:
            return "integer"
        return "numeric"
    return "categorical"


@dataclass
class EncodedTable:
    """Integer codes of a table, ``(n_rows, n_cols)``, with the column infos that made them."""

    codes: torch.Tensor
    columns: list[ColumnInfo]

    @property
    def n_rows(self) -> int:
        return int(self.codes.shape[0])

    @property
    def n_levels(self) -> list[int]:
        return [c.n_levels for c in self.columns]

    def encode(self, data, handle_unknown: str = "error") -> np.ndarray:
        """Codes of new data under the same columns (``(n, n_cols)`` int64 NumPy)."""
        frame = _as_frame(data, [c.name for c in self.columns])
        if frame.shape[1] != len(self.columns):
            raise ValueError(
                f"data has {frame.shape[1]} columns but the encoding has {len(self.columns)}; pass the same columns"
            )
        return np.stack(
            [c.encode(frame.iloc[:, j].to_numpy(), handle_unknown) for j, c in enumerate(self.columns)], axis=1
        ) if len(frame) else np.zeros((0, len(self.columns)), dtype=np.int64)


def _as_frame(data, names=None) -> pd.DataFrame:
    if isinstance(data, pd.DataFrame):
        return data
    if isinstance(data, torch.Tensor):
        data = data.detach().cpu().numpy()
    arr = np.asarray(data) if not isinstance(data, np.ndarray) else data
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2:
        raise ValueError(f"data must be 2-D (n_rows, n_columns); got shape {arr.shape}")
    cols = names if names is not None and len(names) == arr.shape[1] else [str(i) for i in range(arr.shape[1])]
    return pd.DataFrame({c: arr[:, j] for j, c in enumerate(cols)}, columns=cols)


def code_dtype(max_levels: int) -> torch.dtype:
    return torch.int16 if max_levels <= MAX_LEVELS else torch.int32


def encode_table(data, schema=None, *, max_integer_levels: int = 4096) -> EncodedTable:
    """Encode a table into integer codes.

    Parameters
    ----------
    data : pandas.DataFrame, 2-D array-like, or str/path of a CSV file
        A path is read with :func:`pandas.read_csv` and its defaults (first line the header, comma-separated);
        for other layouts read the file yourself and pass the frame.
    schema : None, dict name → spec, or list of specs (one per column)
        A spec is ``"categorical"``, ``"integer"``, ``"numeric"`` (binned, 16
        equal-frequency bins) or a dict such as ``{"kind": "numeric", "bins": 8,
        "strategy": "equal_width"}``. ``None`` infers: non-numeric → categorical,
        non-negative integers below ``max_integer_levels`` → integer, other
        floats → numeric.

    Examples
    --------
    >>> import pandas as pd
    >>> t = encode_table(pd.DataFrame({"a": ["x", "y", "x"], "b": [0, 2, 1]}))
    >>> t.codes.tolist(), t.n_levels
    ([[0, 0], [1, 2], [0, 1]], [2, 3])
    """
    if isinstance(data, (str, bytes)) or hasattr(data, "__fspath__"):
        data = pd.read_csv(data)
    frame = _as_frame(data)
    if frame.shape[1] == 0:
        raise ValueError("data has 0 columns; at least 1 is required")
    names = [str(c) for c in frame.columns]
    if schema is None:
        specs = [_infer_spec(frame.iloc[:, j].to_numpy(), max_integer_levels) for j in range(len(names))]
    elif isinstance(schema, dict):
        unknown = set(map(str, schema)) - set(names)
        if unknown:
            raise ValueError(f"schema names column(s) {sorted(unknown)} that the data does not have; columns are {names}")
        specs = [schema.get(n, schema.get(frame.columns[j])) or _infer_spec(frame.iloc[:, j].to_numpy(), max_integer_levels)
                 for j, n in enumerate(names)]
    else:
        specs = list(schema)
        if len(specs) != len(names):
            raise ValueError(f"schema has {len(specs)} entries but the data has {len(names)} columns")
    infos, codes = [], []
    for j, (n, s) in enumerate(zip(names, specs)):
        info, c = _build_column(frame.iloc[:, j].to_numpy(), n, s)
        infos.append(info)
        codes.append(c)
    mat = np.stack(codes, axis=1) if codes else np.zeros((0, 0), dtype=np.int64)
    dt = code_dtype(max(i.n_levels for i in infos))
    return EncodedTable(torch.from_numpy(mat.astype(np.int32)).to(dt), infos)


def columns_from_levels(n_levels, names=None) -> list[ColumnInfo]:
    """Column infos for data that is already integer codes ``0..n_levels[j]-1``."""
    names = names or [str(j) for j in range(len(n_levels))]
    return [ColumnInfo(str(n), "integer", int(k)) for n, k in zip(names, n_levels)]

