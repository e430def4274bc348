"""Stream sources: numeric records from CSV or JSON-lines files and pipes, as they arrive.

:func:`iter_records` reads raw bytes as soon as the operating system has them
(``os.read`` on the file descriptor, so a pipe that stays open delivers each
line when it is written, not when a buffer fills), cuts complete lines, and
parses them in batches: CSV blocks are cut into lines and checked (field
counts, blank lines) with NumPy over the raw bytes and parsed by pandas' C
reader in one call per block; only the lines that are odd (a wrong field
count, a value that is not a finite number, quotes) go through a
line-by-line parse, so each malformed record is named with its line number
and reason and skipped while the rest go on. With ``max_latency`` it also says when no record has
arrived for that long, so a caller can score a partial window.

Formats
-------
``csv``
    Delimited numbers, one record per line. ``header="auto"`` treats the
    first non-blank line as a header when one of its fields is not a number.
    ``columns`` picks the feature columns (indices, negative from the end,
    or header names); by default every column not echoed. ``echo`` columns
    are carried through verbatim (e.g. an id or a label). Quoted fields work
    (line by line).
``jsonl``
    One JSON object (or array) per line. Features are the ``columns`` keys
    (indices for arrays); by default the keys of the first record whose
    values are numbers, in order. ``echo`` keys are carried through as JSON
    values.

Malformed records: a wrong number of fields, a missing key, a value that is
not a finite number, text that is not JSON. Blank lines are skipped silently.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import os
import select
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

__all__ = ["RecordBatch", "iter_records", "open_source", "CsvParser", "JsonlParser", "parse_columns"]

_CHUNK = 1 << 16
_BATCH = 1 << 21  # bytes gathered into one parse when they are already available


@dataclass
class RecordBatch:
    """Records parsed from one read: features, line numbers, echoed values and malformed lines.

    ``idle`` is True for the empty batch yielded when no data arrived within
    ``max_latency`` seconds.
    """

    X: np.ndarray
    lines: np.ndarray
    echo: list | None = None
    errors: list = field(default_factory=list)
    idle: bool = False

    def __len__(self) -> int:
        return self.X.shape[0]


def parse_columns(spec) -> list | None:
    """``"0,2,-1"`` / ``"a,b"`` / a list → a list of ints and names (None for None or empty).

    Examples
    --------
    >>> parse_columns("0, 2,-1,label")
    [0, 2, -1, 'label']
    """
    if spec is None:
        return None
    if isinstance(spec, str):
        items = [s.strip() for s in spec.split(",") if s.strip()]
    else:
        items = list(spec)
    out = []
    for item in items:
        if isinstance(item, str):
            try:
                item = int(item)
            except ValueError:
                pass
        out.append(item)
    return out or None


def _finite_float(text) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("not a finite number")
    return value


def _preview(line: bytes) -> str:
    text = line.decode("utf-8", "replace")
    return text if len(text) <= 60 else text[:57] + "..."


class CsvParser:
    """Parses CSV lines into features; resolves the header and column choice on the first record."""

    def __init__(self, *, columns=None, echo=None, header="auto", delimiter=","):
        if header not in ("auto", "yes", "no", True, False):
            raise ValueError(f"header must be 'auto', 'yes' or 'no'; got {header!r}")
        if not isinstance(delimiter, str) or len(delimiter) != 1:
            raise ValueError(f"delimiter must be one character; got {delimiter!r}")
        self.header = {True: "yes", False: "no"}.get(header, header)
        self.delimiter = delimiter
        self._delim = delimiter.encode()
        self.columns_spec = parse_columns(columns)
        self.echo_spec = parse_columns(echo) or []
        self.names: list[str] | None = None
        self.n_fields: int | None = None
        self.features: list[int] | None = None
        self.echo: list[int] = []

    @property
    def feature_names(self) -> list[str]:
        if self.features is None:
            return []
        return [self.names[j] if self.names else f"x{j}" for j in self.features]

    @property
    def echo_names(self) -> list[str]:
        names = []
        for j, spec in zip(self.echo, self.echo_spec):
            names.append(self.names[j] if self.names else (spec if isinstance(spec, str) else f"col{j}"))
        return names

    def _resolve(self, spec, n_fields: int) -> int:
        if isinstance(spec, int):
            j = spec + n_fields if spec < 0 else spec
            if not 0 <= j < n_fields:
                raise ValueError(f"column {spec} does not exist: the records have {n_fields} fields")
            return j
        if self.names is None:
            raise ValueError(f"column {spec!r} is a name, but the CSV has no header; use a column number or --header yes")
        if spec not in self.names:
            raise ValueError(f"column {spec!r} is not in the header {self.names}")
        return self.names.index(spec)

    def _setup(self, n_fields: int) -> None:
        self.n_fields = n_fields
        self.echo = [self._resolve(s, n_fields) for s in self.echo_spec]
        if self.columns_spec is None:
            self.features = [j for j in range(n_fields) if j not in self.echo]
        else:
            self.features = [self._resolve(s, n_fields) for s in self.columns_spec]
        if not self.features:
            raise ValueError("no feature columns are left (every column is echoed); choose features with --columns")

    def _fields(self, line: bytes) -> list[str]:
        return next(csv.reader([line.decode("utf-8", "replace")], delimiter=self.delimiter))

    def parse(self, lines: list[bytes], numbers: np.ndarray) -> RecordBatch:
        """Parse non-blank lines (numbered ``numbers``); blank lines must already be removed."""
        errors: list = []
        if self.n_fields is None and lines:
            lines, numbers = self._first(lines, numbers, errors)
        d = len(self.features) if self.features is not None else 0
        if not lines:
            return RecordBatch(np.empty((0, d)), np.empty(0, dtype=np.int64), [] if self.echo else None, errors)
        fast = self._parse_fast(lines, numbers)
        if fast is not None:
            fast.errors = errors
            return fast
        return self._parse_slow(lines, numbers, errors)

    def parse_block(self, block: bytes, line_no: int) -> tuple[RecordBatch, int]:
        """Parse the complete lines of ``block`` (no final newline) that follow line ``line_no``.

        Returns the batch and the number of the block's last line. Well-formed
        lines are parsed by one vectorised call; odd lines one by one (blank
        lines skipped silently, malformed ones reported).
        """
        if self.n_fields is None:
            # the first non-blank line settles the header and the columns; the rest goes on as usual
            pos = 0
            while True:
                end = block.find(b"\n", pos)
                if block[pos : len(block) if end < 0 else end].strip() or end < 0:
                    break
                pos = end + 1
            if end < 0:
                return _parse_lines(self, block.split(b"\n"), line_no)
            head, line_no = _parse_lines(self, block[:end].split(b"\n"), line_no)
            rest, line_no = self.parse_block(block[end + 1 :], line_no)
            return _join_batches(head, rest), line_no
        if not self.echo:
            parsed = self._parse_block_fast(block, line_no)
            if parsed is not None:
                return parsed
        return _parse_lines(self, block.split(b"\n"), line_no)

    def _parse_block_fast(self, block: bytes, line_no: int) -> tuple[RecordBatch, int] | None:
        """The vectorised parse of a block and its last line number, or None where it does not apply."""
        if b'"' in block or (b"\r" in block and block.count(b"\r") != block.count(b"\r\n")):
            return None  # quoted fields, or a carriage return that does not end a line
        # fields per line from the delimiter count of each line (one pass over the bytes)
        raw = np.frombuffer(block + b"\n", dtype=np.uint8)
        ends = np.flatnonzero(raw == 10)
        n_lines = ends.shape[0]
        starts = np.empty(n_lines, dtype=np.int64)
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
        is_delim = (raw == self._delim[0]).view(np.uint8)
        n_delim = np.add.reduceat(is_delim, starts, dtype=np.int64)
        n_delim[ends == starts] = -1  # empty lines (reduceat does not give 0 for them)
        good = n_delim == self.n_fields - 1
        numbers = np.arange(line_no + 1, line_no + n_lines + 1, dtype=np.int64)
        lines = None
        if good.all():
            data = self._read_numbers(block, n_lines)
            if data is None:
                return None
            finite = np.isfinite(data).all(1)
            if finite.all():  # the common case: every line a record
                return RecordBatch(data, numbers, None, []), line_no + n_lines
        else:
            lines = block.split(b"\n")
            kept = np.flatnonzero(good)
            data = self._read_numbers(b"\n".join([lines[i] for i in kept.tolist()]), kept.size) if kept.size else None
            if kept.size and data is None:
                return None
            finite = np.isfinite(data).all(1) if kept.size else np.zeros(0, dtype=bool)
        X = np.empty((n_lines, len(self.features)), dtype=np.float64)
        ok = good.copy()
        if data is not None:
            X[good] = data
            ok[np.flatnonzero(good)[~finite]] = False
        # the odd lines, one by one: blank ones are skipped silently, the others parsed or reported
        errors: list = []
        if lines is None:
            lines = block.split(b"\n")
        odd_lines, odd_index = [], []
        for i in np.flatnonzero(~ok).tolist():
            line = lines[i][:-1] if lines[i].endswith(b"\r") else lines[i]
            if line.strip():
                odd_lines.append(line)
                odd_index.append(i)
        if odd_lines:
            slow = self._parse_slow(odd_lines, numbers[odd_index], errors)
            X[slow.lines - line_no - 1] = slow.X
            ok[slow.lines - line_no - 1] = True
        return RecordBatch(X[ok], numbers[ok], None, errors), line_no + n_lines

    def _read_numbers(self, text: bytes, n_rows: int) -> np.ndarray | None:
        """The feature columns of well-formed CSV ``text`` as float64 (NaN for an empty or "nan" field)."""
        usecols = sorted(set(self.features))
        try:
            import pandas as pd
        except ImportError:  # NumPy's reader: slower, same results
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # "empty input" for a block of blank lines
                    data = np.loadtxt(io.BytesIO(text), delimiter=self.delimiter, dtype=np.float64,
                                      usecols=self.features, ndmin=2, comments=None)
            except ValueError:
                return None
            return data if data.shape == (n_rows, len(self.features)) else None
        try:
            frame = pd.read_csv(io.BytesIO(text + b"\n"), header=None, names=list(range(self.n_fields)), index_col=False,
                                sep=self.delimiter, usecols=usecols if len(usecols) < self.n_fields else None,
                                dtype=np.float64, engine="c", skip_blank_lines=False, quoting=csv.QUOTE_NONE)
        except (ValueError, pd.errors.ParserError):
            return None  # a field that is not a number: line by line
        if frame.shape != (n_rows, len(usecols)):
            return None
        data = frame.to_numpy(dtype=np.float64)
        if usecols != self.features:
            data = data[:, [usecols.index(j) for j in self.features]]
        return np.ascontiguousarray(data)  # (pandas hands out column-major blocks)

    def _first(self, lines, numbers, errors):
        first = self._fields(lines[0])
        is_header = self.header == "yes"
        if self.header == "auto":
            try:
                [float(v) for v in first]
            except ValueError:
                is_header = True
        if is_header:
            self.names = [v.strip() for v in first]
            self._setup(len(first))
            return lines[1:], numbers[1:]
        self._setup(len(first))
        return lines, numbers

    def _parse_fast(self, lines, numbers) -> RecordBatch | None:
        delim = self._delim
        if any(line.count(delim) != self.n_fields - 1 for line in lines):
            return None
        data = self._read_numbers(b"\n".join(lines), len(lines))
        if data is None:
            return None
        if not np.isfinite(data).all():
            return None
        echo = None
        if self.echo:
            echo = []
            for line in lines:
                parts = line.split(delim)
                echo.append([parts[j].decode("utf-8", "replace") for j in self.echo])
        return RecordBatch(np.ascontiguousarray(data), np.asarray(numbers, dtype=np.int64), echo)

    def _parse_slow(self, lines, numbers, errors) -> RecordBatch:
        rows, kept, echo = [], [], []
        for line, number in zip(lines, numbers):
            try:
                fields = self._fields(line)
            except csv.Error as exc:
                errors.append((int(number), f"not valid CSV ({exc}): {_preview(line)!r}"))
                continue
            if len(fields) != self.n_fields:
                errors.append((int(number), f"expected {self.n_fields} fields, got {len(fields)}: {_preview(line)!r}"))
                continue
            try:
                row = [_finite_float(fields[j]) for j in self.features]
            except ValueError:
                bad = next(j for j in self.features if not _is_finite_number(fields[j]))
                errors.append((int(number), f"field {bad + 1} ({fields[bad]!r}) is not a finite number: {_preview(line)!r}"))
                continue
            rows.append(row)
            kept.append(int(number))
            if self.echo:
                echo.append([fields[j] for j in self.echo])
        d = len(self.features)
        X = np.asarray(rows, dtype=np.float64).reshape(len(rows), d)
        return RecordBatch(X, np.asarray(kept, dtype=np.int64), echo if self.echo else None, errors)


def _join_batches(a: RecordBatch, b: RecordBatch) -> RecordBatch:
    echo = None if a.echo is None and b.echo is None else (a.echo or []) + (b.echo or [])
    return RecordBatch(np.concatenate([a.X, b.X]) if len(a) else b.X, np.concatenate([a.lines, b.lines]), echo,
                       a.errors + b.errors)


def _is_finite_number(text) -> bool:
    try:
        _finite_float(text)
        return True
    except (TypeError, ValueError):
        return False


class JsonlParser:
    """Parses JSON-lines records (objects or arrays) into features."""

    def __init__(self, *, columns=None, echo=None):
        self.columns_spec = parse_columns(columns)
        self.echo_spec = parse_columns(echo) or []
        self.kind: str | None = None  # "object" or "array"
        self.features: list | None = None
        self.echo: list = list(self.echo_spec)

    @property
    def feature_names(self) -> list[str]:
        return [str(f) for f in self.features or []]

    @property
    def echo_names(self) -> list[str]:
        return [str(e) for e in self.echo]

    def _setup(self, record) -> None:
        if isinstance(record, dict):
            self.kind = "object"
            if self.columns_spec is None:
                self.features = [key for key, value in record.items()
                                 if key not in self.echo and isinstance(value, (int, float)) and not isinstance(value, bool)]
            else:
                self.features = [str(c) for c in self.columns_spec]
            self.echo = [str(e) for e in self.echo_spec]
        elif isinstance(record, list):
            self.kind = "array"
            n = len(record)
            for spec in (self.columns_spec or []) + self.echo_spec:
                if not isinstance(spec, int) or not -n <= spec < n:
                    raise ValueError(f"column {spec!r} does not exist: the JSON arrays have {n} elements")
            self.echo = [e % n for e in self.echo_spec]
            self.features = ([c % n for c in self.columns_spec] if self.columns_spec is not None
                             else [j for j in range(n) if j not in self.echo])
            self.n_fields = n
        else:
            raise ValueError("the first JSON record is neither an object nor an array")
        if not self.features:
            raise ValueError("the first JSON record has no numeric fields to use as features; choose them with --columns")

    def parse(self, lines: list[bytes], numbers: np.ndarray) -> RecordBatch:
        rows, kept, echo, errors = [], [], [], []
        for line, number in zip(lines, numbers):
            number = int(number)
            try:
                record = json.loads(line)
            except ValueError as exc:
                errors.append((number, f"not valid JSON ({exc.args[0] if exc.args else exc}): {_preview(line)!r}"))
                continue
            if self.kind is None:
                if not isinstance(record, (dict, list)):
                    errors.append((number, f"expected a JSON object or array: {_preview(line)!r}"))
                    continue
                self._setup(record)
            try:
                row, extra = self._record(record)
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                errors.append((number, f"{exc.args[0] if exc.args else exc}: {_preview(line)!r}"))
                continue
            rows.append(row)
            kept.append(number)
            if self.echo:
                echo.append(extra)
        d = len(self.features) if self.features is not None else 0
        X = np.asarray(rows, dtype=np.float64).reshape(len(rows), d)
        return RecordBatch(X, np.asarray(kept, dtype=np.int64), echo if self.echo else None, errors)

    def _record(self, record):
        if self.kind == "object":
            if not isinstance(record, dict):
                raise TypeError("expected a JSON object like the first record")
            missing = [key for key in self.features if key not in record]
            if missing:
                raise KeyError(f"missing key(s) {missing}")
        else:
            if not isinstance(record, list):
                raise TypeError("expected a JSON array like the first record")
            if len(record) != self.n_fields:
                raise ValueError(f"expected {self.n_fields} elements, got {len(record)}")
        row = []
        for key in self.features:
            value = record[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"field {key!r} ({json.dumps(value)}) is not a finite number")
            row.append(float(value))
        extra = [record.get(key) if isinstance(record, dict) else record[key] for key in self.echo]
        return row, extra


def open_source(source):
    """``(binary stream, close_when_done, fd)`` for a path, ``"-"`` (stdin) or an open binary stream.

    ``fd`` is the descriptor to ``os.read`` directly (stdin and plain files
    opened here), or None to read through the stream's own ``read1``/``read``.
    """
    if source is None or source == "-":
        stream = sys.stdin.buffer
        try:
            return stream, False, stream.fileno()
        except (AttributeError, OSError, io.UnsupportedOperation):
            return stream, False, None
    if isinstance(source, (str, os.PathLike)):
        path = Path(os.fspath(source))
        if not path.exists():
            raise FileNotFoundError(f"input file {path} does not exist")
        if path.is_dir():
            raise IsADirectoryError(f"input {path} is a folder; pass a file or '-' for standard input")
        if path.suffix == ".gz":
            return gzip.open(path, "rb"), True, None
        stream = open(path, "rb", buffering=0)
        return stream, True, stream.fileno()
    if isinstance(source, io.TextIOBase):
        if hasattr(source, "buffer"):
            return source.buffer, False, None
        raise TypeError("pass a binary stream (e.g. sys.stdin.buffer), a path or '-'; got a text stream without a buffer")
    return source, False, None


def _read_chunks(stream, fd, max_latency, waiting) -> Iterator[bytes | None]:
    """Bytes as they arrive (None after ``max_latency`` idle seconds); ends at EOF.

    ``waiting`` (a one-element list, optional) is set to True while blocked
    waiting for input, so a signal handler knows it may interrupt safely.
    """
    if waiting is None:
        waiting = [False]
    if fd is not None:
        pollable = max_latency is not None and os.name == "posix"
        while True:
            waiting[0] = True
            try:
                if pollable:
                    ready, _, _ = select.select([fd], [], [], max_latency)
                    if not ready:
                        waiting[0] = False
                        yield None
                        continue
                chunk = os.read(fd, _CHUNK)
            finally:
                waiting[0] = False
            if not chunk:
                return
            # take whatever else is already there (a pipe holds at most 64 KiB at a time), so
            # records are parsed in large batches when they come fast and at once when they trickle
            eof = False
            if os.name == "posix":
                parts = [chunk]
                size = len(chunk)
                while size < _BATCH and select.select([fd], [], [], 0)[0]:
                    more = os.read(fd, _CHUNK)
                    if not more:
                        eof = True
                        break
                    parts.append(more)
                    size += len(more)
                chunk = b"".join(parts) if len(parts) > 1 else chunk
            yield chunk
            if eof:
                return
    reader = getattr(stream, "read1", None) or stream.read
    while True:
        waiting[0] = True
        try:
            chunk = reader(_CHUNK)
        finally:
            waiting[0] = False
        if not chunk:
            return
        if isinstance(chunk, str):
            chunk = chunk.encode()
        yield chunk


def iter_records(
    source="-",
    *,
    format: str = "csv",
    columns=None,
    echo=None,
    header="auto",
    delimiter: str = ",",
    max_latency: float | None = None,
    waiting: list | None = None,
) -> Iterator[RecordBatch]:
    """Yield :class:`RecordBatch` es of parsed records from a file, ``"-"`` (stdin) or a binary stream.

    Each batch holds the complete lines that arrived in one read (so records
    flow as they are written), with the malformed ones listed in
    ``errors`` as ``(line_number, reason)``. Line numbers count from 1 and
    include the header and blank lines. With ``max_latency`` (seconds; pipes
    and files on POSIX) an empty batch with ``idle=True`` is yielded whenever
    nothing arrives for that long. ``waiting``, a one-element list, is set
    to ``[True]`` while the reader is blocked waiting for input (the command
    line's Ctrl-C handler interrupts only then).

    Examples
    --------
    >>> import io
    >>> batches = list(iter_records(io.BytesIO(b"a,b\\n1,2\\n3,x\\n\\n5,6\\n")))
    >>> [b.X.tolist() for b in batches], [b.lines.tolist() for b in batches], batches[0].errors[0][0]
    ([[[1.0, 2.0], [5.0, 6.0]]], [[2, 5]], 3)
    """
    if format not in ("csv", "jsonl"):
        raise ValueError(f"format must be 'csv' or 'jsonl'; got {format!r}")
    if max_latency is not None and not max_latency > 0:
        raise ValueError(f"max_latency must be a positive number of seconds; got {max_latency!r}")
    parser = CsvParser(columns=columns, echo=echo, header=header, delimiter=delimiter) if format == "csv" else JsonlParser(columns=columns, echo=echo)
    stream, close, fd = open_source(source)
    tail = b""
    line_no = 0
    try:
        for chunk in _read_chunks(stream, fd, max_latency, waiting):
            if chunk is None:
                yield RecordBatch(np.empty((0, len(parser.features or []))), np.empty(0, dtype=np.int64), idle=True)
                continue
            data = tail + chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                tail = data
                continue
            tail = data[cut + 1 :]
            batch, line_no = _parse_block(parser, data[:cut], line_no)
            if len(batch) or batch.errors:
                yield batch
        if tail:
            batch, line_no = _parse_block(parser, tail, line_no)
            if len(batch) or batch.errors:
                yield batch
    finally:
        if close:
            stream.close()


def _parse_block(parser, block: bytes, line_no: int):
    if isinstance(parser, CsvParser):
        return parser.parse_block(block, line_no)
    return _parse_lines(parser, block.split(b"\n"), line_no)


def _parse_lines(parser, raw_lines: list[bytes], line_no: int):
    lines, numbers = [], []
    for offset, line in enumerate(raw_lines, start=line_no + 1):
        if line.endswith(b"\r"):
            line = line[:-1]
        if line.strip():
            lines.append(line)
            numbers.append(offset)
    batch = parser.parse(lines, np.asarray(numbers, dtype=np.int64))
    return batch, line_no + len(raw_lines)
