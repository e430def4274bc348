"""Argument types and option groups shared by every ``gpumine`` subcommand."""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_cluster_options", "add_device_options", "add_deprecated_alias", "add_dtype_option", "add_table_options", "header_choice", "label_column",
           "check_k", "positive_int", "read_features"]


def add_device_options(parser: argparse.ArgumentParser, *, quiet_help: str = "no progress bar and no summary on stderr") -> None:
    """``--device``, ``--backend``, ``--working-memory`` and ``--quiet``, the same on every command."""
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: auto)")
    parser.add_argument("--backend", default="auto", choices=["auto", "torch", "triton"], help="kernel implementation (default: auto)")
    parser.add_argument("--working-memory", type=float, default=None, metavar="MIB", help="MiB for one tile's temporaries")
    parser.add_argument("--quiet", action="store_true", help=quiet_help)


def label_column(text):
    """A label column given on the command line: an integer index (negative from the end) or a header name."""
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return text


def positive_int(text: str) -> int:
    """argparse type for integers >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {value}")
    return value


def check_k(k: int, n_rows: int, path, *, excluding_self: bool = True) -> None:
    """Refuse ``-k`` larger than the rows of ``path`` can give (``excluding_self``: a row is not its own neighbour).

    Every command refuses rather than lowering k (as the library's LocalOutlierFactor does, after
    scikit-learn's): a run with fewer neighbours than asked would answer another question.
    """
    needed = k + 1 if excluding_self else k
    if n_rows < needed:
        why = " (a row is not its own neighbour)" if excluding_self else ""
        raise ValueError(f"-k {k} needs at least {needed} rows{why}; {path} has {n_rows}: lower -k or add rows")


class _DeprecatedAlias(argparse.Action):
    """An old spelling kept for one release: sets the new option's value and says what to use."""

    def __init__(self, option_strings, dest, new: str, value=None, **kwargs):
        self.new, self.value = new, value
        super().__init__(option_strings, dest, nargs=0 if value is not None else None, help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: {option_string} is deprecated and will be removed in the next release; use {self.new}",
              file=sys.stderr)
        setattr(namespace, self.dest, self.value if self.value is not None else values)


def add_deprecated_alias(parser: argparse.ArgumentParser, old: str, *, dest: str, new: str, value=None) -> None:
    """Accept ``old`` (hidden from --help) as ``new``; ``value``: the constant a flag without argument sets."""
    parser.add_argument(old, dest=dest, action=_DeprecatedAlias, new=new, value=value)


HEADER_CHOICES = ("auto", "yes", "no")


def header_choice(text: str) -> str:
    """``--header``: auto (detect), yes or no; the old ``infer`` means auto."""
    if text == "infer":
        print("gpumine: --header infer is deprecated and will be removed in the next release; use --header auto",
              file=sys.stderr)
        return "auto"
    if text not in HEADER_CHOICES:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(HEADER_CHOICES)}; got {text!r}")
    return text


def add_table_options(parser: argparse.ArgumentParser, *, label_help: str,
                      header_help: str = "CSV header row: auto (detect, the default), yes or no") -> None:
    """``--label-column``, ``--header`` and ``--delimiter``: how every command reads a CSV table."""
    parser.add_argument("--label-column", default=None, help=label_help)
    parser.add_argument("--header", type=header_choice, default="auto", metavar="{auto,yes,no}", help=header_help)
    parser.add_argument("--delimiter", default=None, help="CSV field separator (default: detect; ',' for .csv)")


DTYPE_CHOICES = ("auto", "float32", "float64")
_CSV_SUFFIXES = (".csv", ".tsv", ".txt", ".data", ".dat")


def add_dtype_option(parser: argparse.ArgumentParser) -> None:
    """``--dtype``: the features' precision, the same on every command that reads a feature table."""
    parser.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto",
                        help="features in float32 or float64; auto (the default): float32 for CSV and Parquet (the "
                             "GPU's fast path), a .npy/.npz array's own float dtype (float64 for integers)")


def read_features(path, *, label_column=None, header: str = "auto", delimiter=None, dtype: str = "auto",
                  allow_nan: bool = False):
    """``(X, y)`` from a data file, read the one way every command reads its table (``y`` None without a label).

    ``header`` is ``--header`` (auto, yes, no) and ``delimiter`` ``--delimiter``, both for CSV files;
    ``dtype`` is ``--dtype``. A missing or infinite feature value is refused here, with the file
    line and the cell's text (the estimators could only name a 0-based row of ``X``), unless
    ``allow_nan`` (a metric that skips NaN) lets NaN through.
    """
    import numpy as np

    from ..io import read_table

    kwargs = {} if label_column is None else {"label_column": label_column}
    name = str(path).lower()
    csv_file = (name[:-3] if name.endswith(".gz") else name).endswith(_CSV_SUFFIXES)
    if csv_file:
        kwargs["header"] = {"auto": "infer", "yes": True, "no": False}[header]
        kwargs["dtype"] = np.float32 if dtype == "auto" else np.dtype(dtype)
        if delimiter is not None:
            kwargs["delimiter"] = delimiter
    elif name.endswith((".parquet", ".pq")) and dtype != "auto":
        kwargs["dtype"] = np.dtype(dtype)
    if delimiter is not None and not csv_file:
        raise ValueError(f"--delimiter applies to CSV files; {path} is read by its format: drop --delimiter")
    out = read_table(path, **kwargs)
    X, y = out if label_column is not None else (out, None)
    X = np.asarray(X)
    if dtype != "auto":
        X = X.astype(dtype, copy=False)
    elif X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    if X.dtype.kind == "f":
        bad = ~np.isfinite(X) if not allow_nan else np.isinf(X)
        if bad.any():
            raise ValueError(_not_finite(path, X, bad, csv_file, kwargs, label_column))
    return X, None if y is None else np.asarray(y)


def _not_finite(path, X, bad, csv_file: bool, kwargs: dict, label_column) -> str:
    """The reason for refusing the first missing or infinite value of ``X``, where the user can find it."""
    import numpy as np

    rows, columns = np.nonzero(bad.reshape(len(X), -1))
    row, column = int(rows[0]), int(columns[0])
    value = X.reshape(len(X), -1)[row, column]
    total = f" ({len(rows)} such cells in all)" if len(rows) > 1 else ""
    fix = "every feature cell must be a number: fill it in or drop the row"
    if not csv_file:
        what = "NaN (a missing value)" if np.isnan(value) else f"{value} (infinite)"
        return f"{path}, row {row} (0-based), feature column {column}: {what}{total}; {fix}"
    from ..io._delimited import locate_feature_cell

    line, where, text = locate_feature_cell(path, row, column, label_column=label_column,
                                            header=kwargs.get("header", "infer"), delimiter=kwargs.get("delimiter"))
    try:
        written = float(text)
    except ValueError:
        written = float("nan")
    if np.isfinite(written):  # a finite number that the dtype cannot hold
        return (f"{path}, line {line} (data row {row + 1}), {where}: {text!r} is beyond the range of {X.dtype}{total}; "
                "pass --dtype float64")
    what = "is infinite" if np.isinf(written) else "is empty (a missing value)" if not text else "marks a missing value"
    return f"{path}, line {line} (data row {row + 1}), {where}: {text!r} {what}{total}; {fix}"


def add_cluster_options(parser: argparse.ArgumentParser, *, what: str) -> None:
    """``--scheduler ADDRESS`` or ``--workers N`` (not both): run on a Dask cluster; ``what`` says what runs there."""
    cluster = parser.add_mutually_exclusive_group()
    cluster.add_argument("--scheduler", default=None, metavar="ADDRESS",
                         help=f"run on this Dask cluster (e.g. tcp://host:8786; needs gpumine[dask]): {what}")
    cluster.add_argument("--workers", type=positive_int, default=None, metavar="N",
                         help="as --scheduler, on a local Dask cluster of N workers started for this run (one per "
                              "GPU when there are GPUs; needs gpumine[dask]); not with --scheduler")
