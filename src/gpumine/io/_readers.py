"""Readers for tabular files: delimited text (plain or gzip), Parquet, NumPy.

Every reader returns NumPy arrays, never tensors: turning data into tensors on
a device is the estimators' job (see ``gpumine.utils._validation``).

Delimited text is read in two passes (a first for the structure, a second for
the values); both, and the error locator that names the line and column of a
cell pandas refuses, are :mod:`gpumine.io._delimited`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ._delimited import WHITESPACE  # noqa: F401  - re-exported for the dataset loaders
from ._delimited import ColumnSpec, _FeatureMatrix, _integral_if_possible, _Layout, _read_delimited, _resolve_column

__all__ = ["read_csv", "read_parquet", "read_npy", "read_npz", "read_table"]


# --------------------------------------------------------------------------
# public readers
# --------------------------------------------------------------------------


def read_csv(
    path,
    *,
    label_column: ColumnSpec | None = None,
    header="infer",
    delimiter: str | None = None,
    dtype=np.float32,
    categorical_columns: Mapping[ColumnSpec, Sequence[str]] | None = None,
    na_values: Sequence[str] | None = None,
    encoding: str = "utf-8",
):
    """Read a delimited text file (optionally gzip-compressed) into NumPy arrays.

    Parameters
    ----------
    path : str or path-like
        The file. Gzip compression is recognised by its magic bytes, so both
        ``x.csv.gz`` and a compressed file without the suffix work.
    label_column : int or str, optional
        The column holding the labels: an index (negative counts from the
        end) or a header name. When given, it is left out of ``X`` and
        returned as ``y``.
    header : {"infer", True, False}, default "infer"
        Whether the first non-blank line is a header. ``"infer"`` treats it as
        a header when one of its cells is text while the rows below hold
        numbers in that column (so files whose data rows contain text, like
        KDD Cup 99, are read without losing a row).
    delimiter : str, optional
        One character, or ``r"\\s+"`` for runs of whitespace. Default: the
        first of comma, tab, semicolon and ``|`` found on the first line, else
        whitespace.
    dtype : NumPy dtype, default float32
        Dtype of ``X``. Integer dtypes are allowed when every value is integral.
    categorical_columns : mapping of column to list of str, optional
        Text columns to encode as integer codes: the code of a value is its
        position in the given list. A value not in the list is an error.
    na_values : sequence of str, optional
        Extra markers of missing values (e.g. ``["?"]``), on top of pandas'
        defaults (empty cell, ``NA``, ``nan``, ...). Missing feature cells
        become NaN; the estimators reject NaN, so impute or drop them first.
    encoding : str, default "utf-8"
        Text encoding.

    Returns
    -------
    X : ndarray of shape (n_rows, n_features)
        C-contiguous, of ``dtype``.
    y : ndarray of shape (n_rows,)
        Only when ``label_column`` is given: int64 if every label is an
        integer, float64 if numeric otherwise, else str (e.g. ``"normal."``).

    Raises
    ------
    ValueError
        Naming the file and the 1-based line, as a text editor shows it, for
        ragged rows, non-numeric feature cells, unknown categories, empty
        files, header-only files, missing labels; and for unknown label names
        or out-of-range indices.

    Notes
    -----
    Cells reading ``True``/``False`` in feature columns are parsed as 1/0
    (pandas' parser does so). Quoted fields may contain the delimiter but not
    line breaks.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "toy.csv").write_text("x,y,kind\\n1,2,a\\n3,4,b\\n")
    >>> X, y = read_csv(folder / "toy.csv", label_column="kind")
    >>> X
    array([[1., 2.],
           [3., 4.]], dtype=float32)
    >>> y.tolist()
    ['a', 'b']
    """
    return _read_delimited(
        path,
        label_column=label_column,
        header=header,
        delimiter=delimiter,
        dtype=dtype,
        categorical_columns=categorical_columns,
        na_values=na_values,
        encoding=encoding,
    )


def _labels_from_typed(series: pd.Series, describe) -> np.ndarray:
    missing = np.flatnonzero(series.isna().to_numpy())
    if missing.size:
        raise ValueError(
            f"{describe}, row {int(missing[0])} (0-based): the label is missing; every row "
            "needs a label."
        )
    if isinstance(series.dtype, pd.CategoricalDtype):
        series = series.astype(str)
    if pd.api.types.is_bool_dtype(series.dtype):
        return series.to_numpy(dtype=bool)
    if pd.api.types.is_numeric_dtype(series.dtype):
        return _integral_if_possible(series.to_numpy())
    return np.asarray(series.to_numpy(dtype=object), dtype=str)


def read_parquet(path, *, label_column: ColumnSpec | None = None, dtype=np.float32):
    """Read a Parquet file into NumPy arrays (needs pyarrow).

    Parameters
    ----------
    path : str or path-like
        The file.
    label_column : int or str, optional
        Label column by name or index (negative counts from the end).
    dtype : NumPy dtype, default float32
        Dtype of ``X``.

    Returns
    -------
    X : ndarray of shape (n_rows, n_features)
    y : ndarray of shape (n_rows,)
        Only when ``label_column`` is given. Strings and categoricals become
        str, integral numbers int64, other numbers float64, booleans bool.

    Raises
    ------
    ValueError
        If a feature column is not numeric or boolean, or the label column is
        unknown or has missing values.
    """
    path = Path(os.fspath(path))
    try:
        frame = pd.read_parquet(path)
    except ImportError as exc:
        raise ImportError(
            f"reading {path} needs pyarrow: pip install 'gpumine[parquet]' (or pip install pyarrow)"
        ) from exc
    names = [str(name) for name in frame.columns]
    layout = _Layout(path, "", False, ",", len(names), 0, names, len(frame))
    label = None if label_column is None else _resolve_column(label_column, layout, "label_column")
    features = [j for j in range(len(names)) if j != label]
    for j in features:
        column_dtype = frame.dtypes.iloc[j]
        if not (
            pd.api.types.is_numeric_dtype(column_dtype) or pd.api.types.is_bool_dtype(column_dtype)
        ):
            raise ValueError(
                f"{path}: column {j} ({names[j]!r}) has dtype {column_dtype}, not a number. "
                "Feature columns must be numeric: pick it as label_column, or encode it first."
            )
    X = _FeatureMatrix(len(frame), len(features), dtype, str(path))
    for position, j in enumerate(features):
        values = frame.iloc[:, j].to_numpy(dtype=np.float64, na_value=np.nan)
        X.set(position, values, f"column {j} ({names[j]!r})")
    X = X.result()
    if label is None:
        return X
    return X, _labels_from_typed(frame.iloc[:, label], f"{path}, column {names[label]!r}")


def _split_label(array: np.ndarray, label_column, path: Path):
    """Split a label column (2-D array: index; structured array: field name) off ``array``."""
    if array.dtype.names is not None:
        if label_column not in array.dtype.names:
            raise ValueError(
                f"label_column={label_column!r} is not a field of {path}; its fields are "
                f"{list(array.dtype.names)}."
            )
        from numpy.lib import recfunctions

        rest = [name for name in array.dtype.names if name != label_column]
        X = recfunctions.structured_to_unstructured(array[rest])
        return X, np.asarray(array[label_column])
    if array.ndim != 2:
        raise ValueError(
            f"label_column needs a 2-D array, but {path} holds shape {array.shape}; store the "
            "labels separately."
        )
    if isinstance(label_column, bool) or not isinstance(label_column, int | np.integer):
        raise TypeError(
            f"label_column for a plain .npy array must be a column index; got {label_column!r}."
        )
    n = array.shape[1]
    if not -n <= int(label_column) < n:
        raise ValueError(
            f"label_column={label_column} is out of range: {path} has {n} columns, so valid "
            f"indices are {-n}..{n - 1}."
        )
    column = int(label_column) % n
    return np.delete(array, column, axis=1), np.array(array[:, column])


def read_npy(path, *, mmap: bool = True, label_column: ColumnSpec | None = None):
    """Read a ``.npy`` file, memory-mapped read-only by default.

    Parameters
    ----------
    path : str or path-like
        The ``.npy`` file.
    mmap : bool, default True
        Map the file read-only instead of loading it: nothing is read until
        used, and arrays larger than memory work. Estimators accept read-only
        input.
    label_column : int or str, optional
        For a 2-D array, the index of the label column; for a structured
        array, the label field's name (the other fields become ``X``). The
        split copies the data into memory.

    Returns
    -------
    X : ndarray or numpy.memmap
        The stored dtype, unchanged (estimators cast it).
    y : ndarray
        Only when ``label_column`` is given.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "a.npy"
    >>> np.save(path, np.eye(2, dtype=np.float32))
    >>> X = read_npy(path)
    >>> X.flags.writeable, X.shape
    (False, (2, 2))
    """
    path = Path(os.fspath(path))
    try:
        array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except ValueError as exc:
        raise ValueError(
            f"{path}: cannot read it as a .npy array ({exc}); object arrays are refused for "
            "safety, and .npz archives go through read_npz."
        ) from None
    if isinstance(array, np.lib.npyio.NpzFile):
        array.close()
        raise ValueError(f"{path} is an .npz archive; use read_npz(path, key=...).")
    if label_column is None:
        return array
    return _split_label(array, label_column, path)


def read_npz(path, key: str | None = None, *, label_key: str | None = None):
    """Read one array (and optionally its labels) from an ``.npz`` archive.

    Parameters
    ----------
    path : str or path-like
        The archive. Members are loaded into memory (NumPy cannot map them).
    key : str, optional
        The array to return. Default: the only array, else ``"X"`` if present.
    label_key : str, optional
        A second array to return as labels, e.g. ``"y"`` in ADBench files.

    Returns
    -------
    X : ndarray
    y : ndarray
        Only when ``label_key`` is given.

    Raises
    ------
    ValueError
        If a key is not in the archive (the message lists the keys) or the
        label array's length differs from the data's.
    """
    path = Path(os.fspath(path))
    try:
        archive = np.load(path, allow_pickle=False)
    except ValueError as exc:
        raise ValueError(f"{path}: cannot read it as an .npz archive ({exc}).") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError(f"{path} is a single .npy array, not an .npz archive; use read_npy.")
    with archive:
        keys = list(archive.files)
        if key is None:
            if len(keys) == 1:
                key = keys[0]
            elif "X" in keys:
                key = "X"
            else:
                raise ValueError(
                    f"{path} holds several arrays ({', '.join(keys)}); pass key= to pick one."
                )
        for name, parameter in ((key, "key"), (label_key, "label_key")):
            if name is not None and name not in keys:
                raise ValueError(
                    f"{parameter}={name!r} is not in {path}; it holds "
                    f"{', '.join(keys) or 'nothing'}."
                )
        X = archive[key]
        if label_key is None:
            return X
        y = archive[label_key]
    if len(y) != len(X):
        raise ValueError(
            f"{path}: {label_key!r} has {len(y)} entries but {key!r} has {len(X)} rows."
        )
    return X, y


_TEXT_SUFFIXES = (".csv", ".tsv", ".txt", ".data", ".dat")


def read_table(path, **kwargs):
    """Read a data file, choosing the reader from its extension.

    ========================================================  =================
    extension                                                 reader
    ========================================================  =================
    ``.csv .tsv .txt .data .dat`` (each also with ``.gz``)    :func:`read_csv`
    ``.parquet .pq``                                          :func:`read_parquet`
    ``.npy``                                                  :func:`read_npy`
    ``.npz``                                                  :func:`read_npz`
    ========================================================  =================

    ``label_column`` works for every format; for ``.npz`` it names the label
    array (``label_key``). Other keyword arguments go to the reader.

    Raises
    ------
    ValueError
        For an extension not in the table.
    """
    path = Path(os.fspath(path))
    name = path.name.lower()
    stem = name[:-3] if name.endswith(".gz") else name
    if stem.endswith(_TEXT_SUFFIXES):
        return read_csv(path, **kwargs)
    if name.endswith((".parquet", ".pq")):
        return read_parquet(path, **kwargs)
    if name.endswith(".npy"):
        return read_npy(path, **kwargs)
    if name.endswith(".npz"):
        if "label_column" in kwargs:
            kwargs["label_key"] = kwargs.pop("label_column")
        return read_npz(path, **kwargs)
    raise ValueError(
        f"cannot tell the format of {path} from its extension; supported: "
        ".csv/.tsv/.txt/.data/.dat (optionally .gz), .parquet/.pq, .npy, .npz. Rename it or "
        "call read_csv/read_parquet/read_npy/read_npz directly."
    )