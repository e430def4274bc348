"""Writers that never leave a partly written file behind.

Everything goes through the package's one atomic writer,
:func:`~gpumine.utils._atomic.atomic_open`: a temporary file in the destination
folder, renamed over the destination only once complete, so a crash or an
exception mid-write leaves the previous file (or no file) in place, never a
truncated one.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..utils._atomic import atomic_open

__all__ = ["write_result", "write_array", "check_output_path"]

# Rows converted to text and written per step; small enough to bound memory
# for large results (text is ~10x the binary size).
_CHUNK_ROWS = 65_536


def _check_columns(columns) -> dict[str, np.ndarray]:
    if not isinstance(columns, Mapping) or not columns:
        raise ValueError(
            "columns must be a non-empty dict of name -> array, e.g. "
            "{'index': idx, 'distance': dist}."
        )
    checked: dict[str, np.ndarray] = {}
    n_rows = None
    for name, values in columns.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"column names must be non-empty strings; got {name!r}.")
        array = np.asarray(values)
        if array.ndim not in (1, 2):
            raise ValueError(
                f"column {name!r} must be 1-D or 2-D (one row per result row); got shape "
                f"{array.shape}."
            )
        if n_rows is None:
            n_rows = len(array)
        elif len(array) != n_rows:
            first = next(iter(checked))
            raise ValueError(
                f"column {name!r} has {len(array)} rows but {first!r} has {n_rows}; all "
                "columns must have the same number of rows."
            )
        checked[name] = array
    return checked


def _cells(array: np.ndarray) -> np.ndarray:
    """Text of each cell. NumPy prints floats with the shortest repr that round-trips."""
    if array.dtype.kind == "O":
        return np.vectorize(str, otypes=[object])(array) if array.size else array.astype(str)
    return array.astype(str)


def check_output_path(path, suffixes=(".csv", ".json", ".npy")) -> Path:
    """Refuse an output path before any work is done: a missing or read-only folder, an unknown suffix.

    A long run that fails only when it writes its result loses the run; commands
    call this first. ``suffixes``: the extensions the writer knows (None: any).

    Examples
    --------
    >>> check_output_path("no/such/folder/out.csv")
    Traceback (most recent call last):
    ...
    FileNotFoundError: cannot write no/such/folder/out.csv: folder no/such/folder does not exist; create it first.
    """
    path = Path(os.fspath(path))
    if suffixes is not None and path.suffix.lower() not in suffixes and not (path.exists() and not path.is_file()):
        raise ValueError(f"cannot write {path}: unknown extension {path.suffix or '(none)'!r}; use one of "
                         f"{', '.join(suffixes)}")
    folder = path.parent
    if not folder.is_dir():
        raise FileNotFoundError(f"cannot write {path}: folder {folder} does not exist; create it first.")
    if not os.access(folder, os.W_OK | os.X_OK) and not (path.exists() and os.access(path, os.W_OK)):
        raise PermissionError(f"cannot write {path}: folder {folder} is not writable")
    return path


def write_result(path, columns: Mapping[str, np.ndarray]) -> Path:
    """Write named result columns atomically as CSV, JSON or ``.npy``.

    Parameters
    ----------
    path : str or path-like
        Destination; the extension picks the format:

        ``.csv``
            A header row, then one line per result row. A 2-D column
            ``name`` of width m becomes m columns ``name_0 ... name_{m-1}``.
            Floats use the shortest text that reads back to the same value;
            NaN is written ``nan``.
        ``.json``
            One object mapping each column name to a list (a 2-D column to a
            list of lists). NaN and infinities become ``null``.
        ``.npy``
            With a single column, that array as is (e.g. a 2-D ``(n, k)``
            array of indices). With several, a structured array with one
            field per column (a 2-D column becomes a sub-array field of shape
            ``(m,)``); read it back with ``np.load(path)[name]``.
    columns : dict of str to array-like
        1-D or 2-D arrays with the same number of rows.

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    ValueError
        For an unknown extension, mismatched row counts, bad shapes, or (for
        ``.npy``) Python-object columns.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "knn.csv"
    >>> _ = write_result(target, {"id": np.array([0, 1]),
    ...                           "dist": np.array([[0.5, 1.25], [2.0, 3.0]], np.float32)})
    >>> print(target.read_text(), end="")
    id,dist_0,dist_1
    0,0.5,1.25
    1,2.0,3.0
    """
    path = Path(os.fspath(path))
    columns = _check_columns(columns)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        with atomic_open(path, "w", newline="") as fh:
            _write_csv(fh, columns)
    elif suffix == ".json":
        with atomic_open(path, "w") as fh:
            _write_json(fh, columns)
    elif suffix == ".npy":
        array = _as_npy_array(columns)
        with atomic_open(path, "wb") as fh:
            np.save(fh, array, allow_pickle=False)
    else:
        raise ValueError(
            f"cannot tell the output format of {path}: use a .csv, .json or .npy extension."
        )
    return path


def _write_csv(fh, columns: dict[str, np.ndarray]) -> None:
    writer = csv.writer(fh, lineterminator="\n")
    header = []
    for name, array in columns.items():
        header += [name] if array.ndim == 1 else [f"{name}_{j}" for j in range(array.shape[1])]
    writer.writerow(header)
    n_rows = len(next(iter(columns.values())))
    for start in range(0, n_rows, _CHUNK_ROWS):
        stop = min(start + _CHUNK_ROWS, n_rows)
        parts = [_cells(array[start:stop]).reshape(stop - start, -1) for array in columns.values()]
        writer.writerows(np.concatenate(parts, axis=1).tolist())


def _json_cells(array: np.ndarray) -> np.ndarray:
    kind = array.dtype.kind
    if kind == "f":
        text = array.astype(str)
        text[~np.isfinite(array)] = "null"  # JSON has no NaN or infinity
        return text
    if kind in "iu":
        return array.astype(str)
    if kind == "b":
        return np.where(array, "true", "false")
    return np.vectorize(_json_scalar, otypes=[object])(array) if array.size else array.astype(str)


def _json_scalar(value) -> str:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return "null"
    return json.dumps(value if isinstance(value, bool | int | float | type(None)) else str(value))


def _write_json(fh, columns: dict[str, np.ndarray]) -> None:
    fh.write("{")
    for position, (name, array) in enumerate(columns.items()):
        fh.write(("" if position == 0 else ", ") + json.dumps(name) + ": [")
        for start in range(0, len(array), _CHUNK_ROWS):
            cells = _json_cells(array[start : start + _CHUNK_ROWS])
            if array.ndim == 2:
                rows = ["[" + ",".join(row) + "]" for row in cells.tolist()]
            else:
                rows = cells.tolist()
            fh.write(("" if start == 0 else ",") + ",".join(rows))
        fh.write("]")
    fh.write("}\n")


def _as_npy_array(columns: dict[str, np.ndarray]) -> np.ndarray:
    for name, array in columns.items():
        if array.dtype.kind == "O":
            raise ValueError(
                f"column {name!r} holds Python objects, which .npy cannot store without "
                "pickling; convert it (e.g. to str or a number dtype) or write .csv/.json."
            )
    if len(columns) == 1:
        return next(iter(columns.values()))
    n_rows = len(next(iter(columns.values())))
    dtype = np.dtype([(name, array.dtype, array.shape[1:]) for name, array in columns.items()])
    table = np.empty(n_rows, dtype=dtype)
    for name, array in columns.items():
        table[name] = array
    return table


def write_array(path, array) -> Path:
    """Write one array atomically: ``.npy`` (any dtype but objects) or ``.csv``.

    ``.csv`` takes a 1-D or 2-D array and writes one row per line, no
    header, floats in their shortest exact text.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "a.npy"
    >>> _ = write_array(target, np.arange(3))
    >>> np.load(target).tolist()
    [0, 1, 2]
    """
    path = Path(os.fspath(path))
    array = np.asarray(array)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        if array.dtype.kind == "O":
            raise ValueError("an array of Python objects cannot be saved as .npy without pickling.")
        with atomic_open(path, "wb") as fh:
            np.save(fh, array, allow_pickle=False)
    elif suffix == ".csv":
        if array.ndim not in (1, 2):
            raise ValueError(f"a .csv file holds a 1-D or 2-D array; got shape {array.shape}.")
        with atomic_open(path, "w", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            for start in range(0, len(array), _CHUNK_ROWS):
                block = array[start : start + _CHUNK_ROWS]
                writer.writerows(_cells(block).reshape(len(block), -1).tolist())
    else:
        raise ValueError(f"write_array writes .npy or .csv; got {path.name!r}.")
    return path
