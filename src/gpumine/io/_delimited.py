"""Delimited text (plain or gzip) read into NumPy arrays, with errors that name the line and column.

Delimited text is read in two passes. A light first pass finds the
delimiter, the header and any row whose number of fields differs from the
first row's (vectorised over blocks of bytes), so that errors can name the
exact line a text editor shows. The second pass hands the file to pandas' C
parser for speed; when it refuses a cell, the cell is located and reported by
line and column. :func:`_read_delimited` is the shared body of
:func:`gpumine.io.read_csv` and the dataset loaders.
"""

from __future__ import annotations

import codecs
import collections
import csv
import gzip
import os
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

WHITESPACE = r"\s+"
_GZIP_MAGIC = b"\x1f\x8b"
# Rows after the first one that the header sniffer looks at.
_SNIFF_ROWS = 20
# Cells that mark a missing value: pandas' defaults. They say nothing about
# whether the first row is a header, and they become NaN in feature columns.
_MISSING_MARKERS = frozenset(
    ["", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
     "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"]
)

ColumnSpec = int | str


@dataclass(frozen=True)
class _Layout:
    """What the first pass learned about a delimited file."""

    path: Path
    encoding: str
    compressed: bool
    delimiter: str | None  # None: runs of whitespace
    n_fields: int
    header_line: int | None  # 1-based line number of the header row
    names: list[str] | None
    n_rows: int


# --------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------


def _is_gzip(path: Path) -> bool:
    # Check the magic bytes rather than the suffix: ``covtype.data`` files are
    # sometimes gzip-compressed under their plain name after a download.
    with open(path, "rb") as fh:
        return fh.read(2) == _GZIP_MAGIC


def _sniff_delimiter(line: str) -> str | None:
    for candidate in (",", "\t", ";", "|"):
        if candidate in line:
            return candidate
    return None


def _split_fields(line: str, delimiter: str | None) -> list[str]:
    if delimiter is None:
        return line.split()
    if '"' in line:
        return next(csv.reader([line], delimiter=delimiter))
    return line.split(delimiter)


def _count_fields(line: str, delimiter: str | None) -> int:
    # The fast path (count the delimiter) is exact whenever no field is
    # quoted; quoted lines go through the csv module.
    if delimiter is None:
        return len(line.split())
    if '"' in line:
        return len(next(csv.reader([line], delimiter=delimiter)))
    return line.count(delimiter) + 1


def _looks_numeric(cell: str) -> bool:
    cell = cell.strip()
    if cell in _MISSING_MARKERS:
        return True
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _infer_header(rows: list[list[str]]) -> bool:
    """Decide whether the first of ``rows`` is a header.

    The first row is a header when one of its cells is text while every
    following sampled row holds a number in that column. Comparing with later
    rows (not just "is the first row numeric?") keeps files such as KDD Cup
    99, whose data rows hold text columns, from losing their first row.
    """
    first, rest = rows[0], rows[1:]
    text_columns = [j for j, cell in enumerate(first) if not _looks_numeric(cell)]
    if not text_columns:
        return False
    if not rest:
        return len(text_columns) == len(first)
    return any(all(j < len(row) and _looks_numeric(row[j]) for row in rest) for j in text_columns)


def _describe_delimiter(delimiter: str | None) -> str:
    names = {",": "comma", "\t": "tab", ";": "semicolon", "|": "pipe", " ": "space"}
    if delimiter is None:
        return "whitespace"
    return names.get(delimiter, repr(delimiter))


def _check_delimiter(delimiter) -> str | None:
    if delimiter is None or delimiter == WHITESPACE:
        return delimiter
    if isinstance(delimiter, str) and len(delimiter) == 1 and delimiter not in "\r\n\"":
        return delimiter
    raise ValueError(
        f"delimiter must be None (detect), r'\\s+' (runs of whitespace) or one character "
        f"other than a quote or newline; got {delimiter!r}."
    )


def _check_header(header) -> str | bool:
    if header == "infer" or isinstance(header, bool):
        return header
    if header is None:
        return False
    raise ValueError(f"header must be 'infer', True or False; got {header!r}.")


# --------------------------------------------------------------------------
# pass 1: structure
# --------------------------------------------------------------------------

# Bytes that str.split() and str.strip() treat as whitespace in ASCII text.
_WHITESPACE_BYTES = np.zeros(256, dtype=bool)
_WHITESPACE_BYTES[list(b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f")] = True
# Encodings in which every ASCII byte means its ASCII character, so counting
# delimiter and newline bytes counts characters.
_ASCII_COMPATIBLE = frozenset(
    ["utf-8", "utf-8-sig", "ascii", "latin-1", "iso8859-1", "iso8859-15", "cp1252"]
)
_BLOCK_BYTES = 1 << 22


def _binary_stream(path: Path, compressed: bool):
    return gzip.open(path, "rb") if compressed else open(path, "rb")


def _read_head(path: Path, encoding: str, compressed: bool) -> list[tuple[int, str]]:
    """The first non-blank lines (up to 1 + _SNIFF_ROWS) with their line numbers."""
    head: list[tuple[int, str]] = []
    with _binary_stream(path, compressed) as fh:
        for lineno, raw in enumerate(fh, start=1):
            line = raw.decode(encoding, errors="replace").rstrip("\r\n")
            if lineno == 1 and line.startswith("\ufeff"):  # byte-order mark
                line = line[1:]
            if line.strip():
                head.append((lineno, line))
                if len(head) > _SNIFF_ROWS:
                    break
    return head


def _blocks(stream):
    """Yield chunks of the byte stream that end at a newline (the last may not)."""
    carry = b""
    while chunk := stream.read(_BLOCK_BYTES):
        data = carry + chunk
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            carry = data
            continue
        carry = data[cut:]
        yield data[:cut]
    if carry:
        yield carry


def _block_field_counts(block: bytes, delimiter: str | None) -> tuple[np.ndarray, np.ndarray]:
    """Per line of ``block``: number of fields, and whether the line is non-blank.

    Vectorised: find the positions of the bytes that matter (delimiters,
    whitespace) and count them per line by binary search against the line
    ends. Valid for ASCII-compatible encodings and blocks without quotes.
    """
    data = np.frombuffer(block, dtype=np.uint8)
    ends = np.flatnonzero(data == 10)
    if not block.endswith(b"\n"):
        ends = np.append(ends, data.size)
    starts = np.concatenate(([0], ends[:-1] + 1))

    def per_line(positions: np.ndarray) -> np.ndarray:
        return np.searchsorted(positions, ends) - np.searchsorted(positions, starts)

    space = _WHITESPACE_BYTES[data]
    nonblank = (ends - starts) - per_line(np.flatnonzero(space)) > 0
    if delimiter is None:
        # A field starts at a non-space byte that follows a space (or the block start).
        field_starts = ~space
        field_starts[1:] &= space[:-1]
        return per_line(np.flatnonzero(field_starts)), nonblank
    return per_line(np.flatnonzero(data == ord(delimiter))) + 1, nonblank


def _text_field_counts(text: str, delimiter: str | None) -> tuple[np.ndarray, np.ndarray]:
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    nonblank = np.array([bool(line.strip()) for line in lines], dtype=bool)
    counts = np.array(
        [
            _count_fields(line.rstrip("\r"), delimiter) if keep else 0
            for line, keep in zip(lines, nonblank)
        ],
        dtype=np.int64,
    )
    return counts, nonblank


def _count_rows(path, compressed, encoding, delimiter, n_fields, first_line) -> int:
    """Count non-blank lines, raising at the first whose field count differs from line 1's."""
    vectorised = codecs.lookup(encoding).name in _ASCII_COMPATIBLE and (
        delimiter is None or len(delimiter.encode(encoding)) == 1
    )
    lines_before = 0
    n_nonblank = 0
    with _binary_stream(path, compressed) as stream:
        for block in _blocks(stream):
            try:
                text = block.decode(encoding)
            except UnicodeDecodeError as exc:
                line = lines_before + block.count(b"\n", 0, exc.start) + 1
                raise ValueError(
                    f"{path}, line {line}: not valid {encoding} text ({exc.reason}); pass "
                    "encoding= with the file's real encoding (e.g. encoding='latin-1')."
                ) from None
            if vectorised and b'"' not in block:
                counts, nonblank = _block_field_counts(block, delimiter)
            else:
                counts, nonblank = _text_field_counts(text, delimiter)
            ragged = np.flatnonzero(nonblank & (counts != n_fields))
            if ragged.size:
                line = lines_before + int(ragged[0]) + 1
                raise ValueError(
                    f"{path}, line {line}: found {int(counts[ragged[0]])} fields but line "
                    f"{first_line} has {n_fields} ({_describe_delimiter(delimiter)}-separated). "
                    f"Every row needs the same number of fields: fix or delete line {line}, or "
                    "pass the right delimiter= if the file uses another separator."
                )
            n_nonblank += int(nonblank.sum())
            lines_before += len(counts)
    return n_nonblank


def _scan(path: Path, *, delimiter, header, encoding: str) -> _Layout:
    if codecs.lookup(encoding).name.startswith(("utf-16", "utf-32")):
        # Lines are found by their b"\n" bytes, which these encodings do not keep whole.
        raise ValueError(
            f"encoding={encoding!r} is not supported for {path}; convert the file to UTF-8 "
            "(e.g. iconv -f UTF-16 -t UTF-8)."
        )
    compressed = _is_gzip(path)
    try:
        head = _read_head(path, encoding, compressed)
        if not head:
            raise ValueError(
                f"{path}: the file is empty (no non-blank lines); expected rows of delimited "
                "numbers."
            )
        first_line, first_text = head[0]
        if delimiter is None:
            delimiter = _sniff_delimiter(first_text)
        elif delimiter == WHITESPACE:
            delimiter = None
        sample = [_split_fields(text, delimiter) for _, text in head]
        n_fields = len(sample[0])
        n_nonblank = _count_rows(path, compressed, encoding, delimiter, n_fields, first_line)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise ValueError(
            f"{path}: the gzip stream is damaged or cut short ({exc}); download the file again."
        ) from None

    has_header = _infer_header(sample) if header == "infer" else header
    names = [name.strip() for name in sample[0]] if has_header else None
    n_rows = n_nonblank - (1 if has_header else 0)
    if n_rows == 0:
        raise ValueError(
            f"{path}: line {first_line} is a header ({', '.join(names[:5])}"
            f"{', ...' if len(names) > 5 else ''}) and no data rows follow it; add data rows, "
            "or pass header=False if that line is data."
        )
    return _Layout(
        path=path,
        encoding=encoding,
        compressed=compressed,
        delimiter=delimiter,
        n_fields=n_fields,
        header_line=first_line if has_header else None,
        names=names,
        n_rows=n_rows,
    )


def _line_of_row(layout: _Layout, row: int) -> int:
    """1-based line number of data row ``row`` (0-based), counting blank lines."""
    seen = -1
    with _binary_stream(layout.path, layout.compressed) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip() or lineno == layout.header_line:
                continue
            seen += 1
            if seen == row:
                return lineno
    raise RuntimeError(f"row {row} not found in {layout.path}")  # unreachable after _scan


# --------------------------------------------------------------------------
# pass 2: values
# --------------------------------------------------------------------------


def _read_frame(layout: _Layout, dtypes: Mapping[int, object], na_values) -> pd.DataFrame:
    return pd.read_csv(
        layout.path,
        sep=WHITESPACE if layout.delimiter is None else layout.delimiter,
        header=None,
        names=list(range(layout.n_fields)),
        # skiprows counts raw lines: the header line and any blank lines above it.
        skiprows=layout.header_line or 0,
        dtype=dtypes,
        na_values=na_values,
        encoding=layout.encoding,
        compression="gzip" if layout.compressed else None,
        skip_blank_lines=True,
        low_memory=False,
        engine="c",
    )


# Past this many columns pandas' per-column frame construction dominates (seconds per 10,000
# columns); NumPy's reader builds one 2-D array instead.
_WIDE_FIELDS = 4096


def _read_wide(layout: _Layout) -> np.ndarray | None:
    """All columns of a very wide, all-numeric file as float64, or None to take the pandas path.

    Anything NumPy's reader refuses or reads differently from the first pass (a text or empty
    cell, quotes, a row count that disagrees) returns None: the pandas path then reads the file
    and reports the problem with its line and column.
    """
    opener = gzip.open if layout.compressed else open
    try:
        with opener(layout.path, "rt", encoding=layout.encoding, newline="") as fh:
            values = np.loadtxt(fh, delimiter=layout.delimiter, dtype=np.float64, ndmin=2, comments=None,
                                skiprows=layout.header_line or 0)
    except (ValueError, OSError, EOFError, zlib.error, UnicodeDecodeError):
        return None
    return values if values.shape == (layout.n_rows, layout.n_fields) else None


def _column_label(layout: _Layout, column: int) -> str:
    label = f"column index {column}"
    if layout.names is not None:
        label += f" ({layout.names[column]!r})"
    return label


def _resolve_column(spec, layout: _Layout, parameter: str) -> int:
    n = layout.n_fields
    if isinstance(spec, bool) or not isinstance(spec, int | np.integer | str):
        raise TypeError(
            f"{parameter} must be a column index (int) or a header name (str); got "
            f"{type(spec).__name__} {spec!r}."
        )
    if isinstance(spec, str):
        if layout.names is None:
            raise ValueError(
                f"{parameter}={spec!r} names a column, but {layout.path} has no header row "
                "(header=False, or its first line looks like data); pass the column's integer "
                "index instead, or header=True if the first line is a header."
            )
        matches = [j for j, name in enumerate(layout.names) if name == spec]
        if not matches:
            shown = ", ".join(repr(name) for name in layout.names[:12])
            more = f", ... ({len(layout.names)} in all)" if len(layout.names) > 12 else ""
            raise ValueError(
                f"{parameter}={spec!r} is not a column of {layout.path}; its header has "
                f"{shown}{more}. Pass one of these names or an integer index."
            )
        if len(matches) > 1:
            raise ValueError(
                f"{parameter}={spec!r} matches columns {matches} of {layout.path}; pass the "
                "integer index of the one you mean."
            )
        return matches[0]
    index = int(spec)
    if not -n <= index < n:
        raise ValueError(
            f"{parameter}={index} is out of range: {layout.path} has {n} columns, so valid "
            f"indices are {-n}..{n - 1}."
        )
    return index % n


def _first_bad_cell(layout: _Layout, columns: Sequence[int], na_values, exc: Exception):
    """Find the first non-numeric cell after pandas refused to parse a float column."""
    try:
        frame = _read_frame(layout, {c: str for c in columns}, na_values)
    except ValueError:  # not a number problem after all (e.g. a quote left open)
        return ValueError(f"{layout.path}: {exc}")
    best = None
    for column in columns:
        text = frame[column]
        numbers = pd.to_numeric(text.str.strip(), errors="coerce")
        bad = np.flatnonzero((numbers.isna() & text.notna()).to_numpy())
        if bad.size and (best is None or bad[0] < best[0]):
            best = (int(bad[0]), column, text.iloc[bad[0]])
    if best is None:
        return ValueError(f"{layout.path}: {exc}")
    row, column, value = best
    return ValueError(
        f"{layout.path}, line {_line_of_row(layout, row)}, {_column_label(layout, column)}: "
        f"{value!r} is not a number. Feature columns must be numeric: pick this column as "
        "label_column, encode it with categorical_columns={index: [categories...]}, or fix "
        "the file."
    )


def _labels_from_text(text: pd.Series, where) -> np.ndarray:
    """Labels as their natural dtype: int64 if all integral, float64, else str."""
    missing = np.flatnonzero(text.isna().to_numpy())
    if missing.size:
        raise ValueError(
            f"{where(int(missing[0]))}: the label cell is empty or a missing-value marker; "
            "every row needs a label (fill it in, or drop the row)."
        )
    stripped = text.str.strip()
    try:
        # errors="raise" stops at the first text label, fast for "normal." etc.
        numbers = pd.to_numeric(stripped)
    except (ValueError, TypeError):
        return np.asarray(stripped.to_numpy(dtype=object), dtype=str)
    return _integral_if_possible(numbers.to_numpy())


def _integral_if_possible(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind in "iu":
        return values.astype(np.int64, copy=False)
    values = values.astype(np.float64, copy=False)
    if (
        values.size
        and np.isfinite(values).all()
        and np.abs(values).max() < 2.0**63
        and (values == np.round(values)).all()
    ):
        return values.astype(np.int64)
    return values


class _FeatureMatrix:
    """Collects feature columns into ``X`` of the requested dtype.

    Columns go into a Fortran-order array (contiguous writes) and one final
    copy makes it C-contiguous; filling a C-order array column by column is
    several times slower. Integer dtypes are checked to lose nothing.
    """

    def __init__(self, n_rows: int, n_columns: int, dtype, describe: str):
        self.dtype = np.dtype(dtype)
        if self.dtype.kind not in "fiub":
            raise ValueError(f"dtype must be a float or integer NumPy dtype; got {self.dtype}.")
        self.describe = describe
        self.values = np.empty((n_rows, n_columns), dtype=self.dtype, order="F")

    def set(self, position: int, column: np.ndarray, name: str) -> None:
        if self.dtype.kind != "f" and (
            not np.isfinite(column).all() or (column != np.round(column)).any()
        ):
            raise ValueError(
                f"{self.describe}, {name}: dtype={self.dtype} asks for integers but the column "
                "holds missing or fractional values; use a float dtype."
            )
        if self.dtype.kind in "iu" and column.size:
            limits = np.iinfo(self.dtype)
            if column.min() < limits.min or column.max() > limits.max:
                raise ValueError(
                    f"{self.describe}, {name}: values span {column.min():g}..{column.max():g}, "
                    f"outside dtype={self.dtype} ({limits.min}..{limits.max}); use a wider dtype."
                )
        self.values[:, position] = column

    def result(self) -> np.ndarray:
        return np.ascontiguousarray(self.values)


def _read_delimited(
    path,
    *,
    label_column=None,
    header="infer",
    delimiter=None,
    dtype=np.float32,
    categorical_columns=None,
    na_values=None,
    encoding="utf-8",
    expected_fields: int | None = None,
    what: str | None = None,
):
    """Shared body of :func:`read_csv` and the dataset loaders.

    ``expected_fields`` and ``what`` let a loader say "covtype.data has 55
    columns" instead of a generic out-of-range message.
    """
    path = Path(os.fspath(path))
    layout = _scan(
        path,
        delimiter=_check_delimiter(delimiter),
        header=_check_header(header),
        encoding=encoding,
    )
    if expected_fields is not None and layout.n_fields != expected_fields:
        raise ValueError(
            f"{path}: expected {expected_fields} {_describe_delimiter(layout.delimiter)}-"
            f"separated columns as in {what}, found {layout.n_fields}; is this the right file?"
        )
    label = None if label_column is None else _resolve_column(label_column, layout, "label_column")
    categories: dict[int, list[str]] = {}
    for spec, cats in (categorical_columns or {}).items():
        column = _resolve_column(spec, layout, "categorical_columns")
        if column == label:
            raise ValueError(
                f"categorical_columns names column {column}, which is also label_column; the "
                "label is returned as is, so leave it out of categorical_columns."
            )
        categories[column] = [str(c) for c in cats]

    features = [j for j in range(layout.n_fields) if j != label]
    numeric = [j for j in features if j not in categories]
    # numbers by default: one entry per text column only (a dict entry per column made a
    # 100,000-column file spend seconds in pandas' per-column dtype handling)
    dtypes: dict[int, object] = collections.defaultdict(lambda: np.float64, {j: str for j in categories})
    if label is not None:
        dtypes[label] = str
    if not categories and np.dtype(dtype).kind == "f" and na_values is None and layout.n_fields > _WIDE_FIELDS:
        wide = _read_wide(layout)
        if wide is not None and (label is None or not np.isnan(wide[:, label]).any()):
            X = np.ascontiguousarray(wide[:, features].astype(dtype, copy=False))
            return X if label is None else (X, _integral_if_possible(wide[:, label]))
    try:
        frame = _read_frame(layout, dtypes, na_values)
    except ValueError as exc:
        raise _first_bad_cell(layout, numeric, na_values, exc) from None
    if len(frame) != layout.n_rows:  # pandas and the scan disagree on rows: never guess
        raise ValueError(
            f"{path}: read {len(frame)} data rows but counted {layout.n_rows} non-blank lines; "
            "the file probably holds quoted fields that span lines, which are not supported."
        )

    def where(row: int) -> str:
        return f"{path}, line {_line_of_row(layout, row)}"

    if not categories and np.dtype(dtype).kind == "f":  # all numeric into floats: one conversion
        X = frame[features].to_numpy(dtype=np.float64, na_value=np.nan).astype(dtype, copy=False)
        X = np.ascontiguousarray(X)
        return X if label is None else (X, _labels_from_text(frame[label], where))
    X = _FeatureMatrix(layout.n_rows, len(features), dtype, str(path))
    for position, column in enumerate(features):
        if column in categories:
            values = _encode_categories(
                frame[column], categories[column], where, _column_label(layout, column)
            )
        else:
            values = frame[column].to_numpy(dtype=np.float64, na_value=np.nan)
        X.set(position, values, _column_label(layout, column))
    X = X.result()
    if label is None:
        return X
    return X, _labels_from_text(frame[label], where)


def _encode_categories(text: pd.Series, categories: list[str], where, column: str) -> np.ndarray:
    codes = pd.Index(categories).get_indexer(text.str.strip())
    unknown = np.flatnonzero(codes < 0)
    if unknown.size:
        row = int(unknown[0])
        shown = ", ".join(repr(c) for c in categories[:10])
        more = f", ... ({len(categories)} in all)" if len(categories) > 10 else ""
        raise ValueError(
            f"{where(row)}, {column}: {text.iloc[row]!r} is not one of the known categories "
            f"({shown}{more}); add it to that column's categories."
        )
    return codes


def locate_feature_cell(path, row: int, feature: int, *, label_column=None, header="infer", delimiter=None,
                        encoding: str = "utf-8") -> tuple[int, str, str]:
    """Where a cell of the ``X`` that :func:`gpumine.io.read_csv` returned sits in the file.

    ``row`` and ``feature`` are 0-based indices into ``X``; the other arguments are the ones
    ``read_csv`` was given. Returns ``(line, column, text)``: the 1-based line a text editor
    shows, the column's description (index, and header name when there is one) and the
    cell's text as written (e.g. ``'n/a'``). Used to report a missing value where it is.
    """
    path = Path(os.fspath(path))
    layout = _scan(path, delimiter=_check_delimiter(delimiter), header=_check_header(header), encoding=encoding)
    label = None if label_column is None else _resolve_column(label_column, layout, "label_column")
    column = [j for j in range(layout.n_fields) if j != label][feature]
    line = _line_of_row(layout, row)
    with _binary_stream(layout.path, layout.compressed) as fh:
        for lineno, raw in enumerate(fh, start=1):
            if lineno == line:
                text = raw.decode(encoding, errors="replace").rstrip("\r\n").lstrip("\ufeff")
                break
    return line, _column_label(layout, column), _split_fields(text, layout.delimiter)[column].strip()
