"""Subcommands ``gpumine nb``, ``gpumine tree`` and ``gpumine itemsets``.

``register(subparsers)`` adds the three parsers; each handler returns 0 on
success and 2 on bad usage or input, with a one-line reason on stderr. Output
files are written to a temporary file in the target folder and renamed.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np
import pandas as pd

from ..cli import UsageError  # the command line's one usage error (exit code 2, one line)
from ..cli._args import add_cluster_options, add_deprecated_alias, add_device_options, add_table_options
from ..cli._errors import EXPECTED_ERRORS, explain

__all__ = ["register"]

#: Lines of the tree that ``gpumine tree`` prints by default (``--tree full``: all; a tree on a large table has
#: thousands).
TREE_SUMMARY_LINES = 40


#: What ``-o`` / ``--rules-output`` write, chosen by the suffix: a table as CSV or JSON (the writers of the other
#: commands), or plain text (.txt: the table's lines as these commands always wrote them).
OUTPUT_SUFFIXES = (".csv", ".json", ".txt")


def _atomic_write_text(path: str, text: str) -> None:
    from ..io import atomic_open  # the one writer: complete files only, ordinary permissions

    with atomic_open(path, "w", newline="") as fh:
        fh.write(text)


def _write_output(path: str, columns: dict, text) -> None:
    """Write a result table to ``path`` by its suffix: .csv and .json through :func:`gpumine.io.write_result`,
    .txt as ``text()``."""
    from ..io import write_result

    if path.lower().endswith(".txt"):
        _atomic_write_text(path, text())
    else:
        write_result(path, columns)


def _read_table(path, header: bool, delimiter) -> pd.DataFrame:
    """A CSV table as a DataFrame of its cells' own kinds (numbers, text), read as every command reads a table.

    The file goes through :mod:`gpumine.io`'s delimited-text reader: the same delimiter detection (comma, tab,
    semicolon, pipe, else whitespace; ``--delimiter`` to say it), gzip by its magic bytes, and errors that name
    the file's line (a row with a different number of fields, text that is not UTF-8, an empty file). Unlike the
    numeric readers the cells keep their kind: categorical tables hold text. ``header``: the first non-blank line
    holds the column names (else the columns are numbered from 0).
    """
    from pathlib import Path

    from ..io._delimited import _check_delimiter, _read_frame, _scan

    if not os.path.exists(path):
        raise UsageError(f"file not found: {path}")
    layout = _scan(Path(path), delimiter=_check_delimiter(delimiter), header=header, encoding="utf-8")
    try:
        frame = _read_frame(layout, {}, None)  # no dtypes: pandas gives each column its kind
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path} as CSV: {exc}".splitlines()[0]) from None
    if len(frame) != layout.n_rows:  # as the io reader: never guess
        raise UsageError(f"{path}: read {len(frame)} data rows but counted {layout.n_rows} non-blank lines; the file "
                         "probably holds quoted fields that span lines, which are not supported")
    for c in frame.columns:
        if frame[c].dtype == object:  # text cells as the old reader's skipinitialspace, and trailing space too
            frame[c] = frame[c].str.strip()
    if layout.names is not None:
        frame.columns = _unique_names(layout.names)
    return frame


def _unique_names(names) -> list[str]:
    """Header names with repeats told apart as pandas does (``a``, ``a.1``, ...)."""
    seen, out = {}, []
    for name in names:
        k = seen.get(name, 0)
        seen[name] = k + 1
        out.append(name if k == 0 else f"{name}.{k}")
    return out


def _label_column(frame: pd.DataFrame, label: str):
    if label in frame.columns:
        return label
    if label.lstrip("-").isdigit():
        i = int(label)
        if -frame.shape[1] <= i < frame.shape[1]:
            return frame.columns[i]
    raise UsageError(f"label column {label!r} not found; columns are {[str(c) for c in frame.columns][:20]}")


def _split(frame, label):
    col = _label_column(frame, label)
    y = frame[col].to_numpy()
    X = frame.drop(columns=[col])
    if X.shape[1] == 0:
        raise UsageError("the table has no feature columns besides the label")
    if len(y) == 0:
        raise UsageError("the training file has no data rows")
    empty = np.flatnonzero(pd.isna(frame[col]).to_numpy())
    if empty.size:
        # an empty class label is no class: fitting would fail deep inside on mixed float/str labels
        raise UsageError(f"label column {str(col)!r} is empty in {empty.size} of {len(y)} training rows (first: row "
                          f"{int(empty[0])}, counting data rows from 0); fill in or drop those rows")
    return X, y, col


def _warn(args, message: str) -> None:
    """A warning on stderr in the command line's words, as ``gpumine COMMAND: warning: ...``."""
    print(f"gpumine {args.command}: warning: {message}", file=sys.stderr)


# A categorical column with more distinct values than this share of the rows (and than _MANY_VALUES) is
# probably continuous or an identifier: nearly every value is a category of its own.
_VALUE_SHARE = 0.5
_MANY_VALUES = 20


def _continuous_like(X, columns) -> list[tuple[str, str]]:
    """``(name, why)`` for each of ``columns`` that a categorical model would count value by value to no use:
    non-integer numbers, or more distinct values than half the rows (and than 20)."""
    found = []
    for c in columns:
        col = X[c]
        if pd.api.types.is_float_dtype(col):
            values = col.to_numpy(dtype=np.float64, na_value=np.nan)
            values = values[np.isfinite(values)]
            if (values != np.round(values)).any():
                found.append((str(c), "non-integer numbers"))
                continue
        k = int(col.nunique(dropna=True))
        if k > _MANY_VALUES and k > _VALUE_SHARE * len(col):
            found.append((str(c), f"{k} distinct values in {len(col)} rows"))
    return found


def _warn_continuous(args, found, what, fix) -> None:
    """One warning naming the columns :func:`_continuous_like` found."""
    if not found:
        return
    shown = ", ".join(f"{name!r} ({why})" for name, why in found[:5])
    more = f", ... ({len(found)} columns in all)" if len(found) > 5 else ""
    _warn(args, f"{'column' if len(found) == 1 else 'columns'} {shown}{more} look continuous: {what}; {fix}")


def _too_many_values(X, columns, limit, what, fix):
    """Usage error for the first of ``columns`` with more than ``limit`` distinct values."""
    for c in columns:
        k = int(X[c].nunique(dropna=True))
        if k > limit:
            raise UsageError(f"column {str(c)!r} has {k} distinct values, more than the {limit} {what}; {fix}")


def _predictions_text(pred) -> str:
    return "prediction\n" + "\n".join(str(p) for p in pred) + "\n"


def _common(p):
    # the files as knn, lof and outliers take them: TRAIN [TEST]
    p.add_argument("train_file", nargs="?", metavar="train", help="training CSV file (may be .gz)")
    p.add_argument("test_file", nargs="?", metavar="test",
                   help="test CSV file with the same columns (accuracy is printed when it has the label)")
    p.set_defaults(train=None, test=None)
    add_deprecated_alias(p, "--train", dest="train", new="TRAIN as the first argument")
    add_deprecated_alias(p, "--test", dest="test", new="TEST as the second argument")
    # categorical tables hold text everywhere, so a header cannot be told from data by its cells' kind
    add_table_options(p, label_help="label column (required): a header name, or an index (negative counts from the end)",
                      header_help="CSV header row: auto (the default) and yes read the first row as the column "
                                  "names; no reads it as data")
    add_deprecated_alias(p, "--label", dest="label_column", new="--label-column")
    add_deprecated_alias(p, "--no-header", dest="header", new="--header no", value="no")
    add_deprecated_alias(p, "--sep", dest="delimiter", new="--delimiter")
    p.add_argument("--representation", default="auto", choices=["auto", "histogram", "bitmap", "bitslice"],
                   help="how counts are taken: auto (the fastest for the data, the default), histogram, bitmap "
                        "or bitslice (identical results; bitmap and bitslice are for GPUs: on the CPU they are "
                        "several times slower)")
    add_device_options(p, quiet_help="no timing summary")
    p.add_argument("-o", "--output", help="write the predictions for TEST to this file: .csv, .json or .txt (one a line)")


def register(subparsers) -> None:
    """Add the ``nb``, ``tree`` and ``itemsets`` subcommands to an argparse subparsers object."""
    p = subparsers.add_parser("nb", help="categorical Naive Bayes on a CSV (counts on the GPU)",
                              description="Fit CategoricalNB on TRAIN (every feature categorical) and report "
                                          "accuracy on TEST.")
    _common(p)
    p.add_argument("--alpha", type=float, default=1.0, help="additive smoothing (default 1)")
    p.add_argument("--handle-unknown", default="error", choices=["error", "ignore"],
                   help="a test category unseen in training: fail (default) or leave the feature out")
    p.set_defaults(func=_run_nb)

    p = subparsers.add_parser("tree", help="C4.5 decision tree (J48 rules) on a CSV",
                              description="Fit C45Classifier on TRAIN, print the tree (its first lines; --tree full "
                                          "for all of it) and the accuracy on TEST.")
    _common(p)
    p.add_argument("--min-samples-leaf", type=float, default=2, help="J48 minNumObj (default 2)")
    p.add_argument("--confidence", type=float, default=0.25, help="pruning confidence (default 0.25)")
    p.add_argument("--max-depth", type=int, default=None, help="deepest tree level (default: no limit)")
    p.add_argument("--unpruned", action="store_true", help="no pessimistic pruning (J48 -U)")
    p.add_argument("--categorical", default="auto",
                   help="'auto' (non-numeric columns), 'all', 'none', or a comma list of column names/indices")
    p.add_argument("--handle-unknown", default="error", choices=["error", "missing"],
                   help="a test category unseen in training: fail (default) or treat it as missing")
    p.add_argument("--tree", dest="tree", default="summary", choices=["summary", "full", "none"],
                   help=f"how much of the tree to print: summary (the default: its first {TREE_SUMMARY_LINES} lines and "
                        "how many more there are), full (all of it, J48's layout) or none")
    p.add_argument("--no-tree", dest="tree", action="store_const", const="none", help="as --tree none")
    add_cluster_options(p, what="the rows are split over its workers; the tree is the same")
    p.set_defaults(func=_run_tree)

    p = subparsers.add_parser("itemsets", help="frequent itemsets (and association rules) on bitmaps",
                              description="Mine frequent itemsets from baskets (one transaction per line) or a "
                                          "one-hot CSV.")
    p.add_argument("input", help="transactions file")
    p.add_argument("--format", default="auto", choices=["auto", "basket", "onehot"],
                   help="basket: items separated by --item-sep, one transaction per line; onehot: CSV with a header "
                        "and 0/1 columns (auto: onehot for .csv files whose values are all 0/1)")
    p.add_argument("--item-sep", default=None, help="basket item separator (default: whitespace, or ',' if present)")
    p.add_argument("--min-support", type=float, required=True, help="minimum support as a fraction in (0, 1]")
    p.add_argument("--max-len", type=int, default=None, help="longest itemset reported (default: no limit)")
    p.add_argument("--rules", action="store_true", help="also derive association rules")
    p.add_argument("--metric", default="confidence",
                   help="rule metric that --min-threshold applies to: confidence (default), lift, leverage, conviction, ...")
    p.add_argument("--min-threshold", type=float, default=0.8, help="smallest --metric value of a rule (default 0.8)")
    add_device_options(p, quiet_help="no timing summary")
    p.add_argument("-o", "--output", help="write the itemsets (support, itemset) to this file: .csv, .json or .txt")
    p.add_argument("--rules-output", help="write the rules to this file: .csv, .json or .txt")
    p.add_argument("--top", type=int, default=10, help="print this many itemsets (and rules) by support")
    p.set_defaults(func=_run_itemsets)


def _guard(fn):
    def wrapper(args):
        name = getattr(args, "command", None) or fn.__name__.replace("_run_", "")
        args.command = name
        from ..config import config_context

        settings = {} if getattr(args, "working_memory", None) is None else {"working_memory": args.working_memory}
        if hasattr(args, "train_file"):  # TRAIN [TEST], or the old --train/--test
            args.train = args.train_file if args.train_file is not None else args.train
            args.test = args.test_file if args.test_file is not None else args.test
            if args.train is None:
                print(f"gpumine {name}: error: the training file is required: gpumine {name} TRAIN [TEST] ...",
                      file=sys.stderr)
                return 2
        try:
            with config_context(**settings):
                return fn(args)
        except UsageError as exc:
            print(f"gpumine {name}: error: {exc}", file=sys.stderr)
            return 2
        except KeyError as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            print(f"gpumine {name}: error: {msg}", file=sys.stderr)
            return 2
        except EXPECTED_ERRORS as exc:  # the input's or the user's (a bad file, an output folder missing): one line
            print(f"gpumine {name}: error: {explain(exc) or type(exc).__name__}", file=sys.stderr)
            return 2

    wrapper.__name__ = fn.__name__
    return wrapper


def _check_outputs(*paths) -> None:
    """Output paths checked before the work (folder, permission, a suffix of :data:`OUTPUT_SUFFIXES`)."""
    from ..io import check_output_path

    for path in paths:
        if path:
            check_output_path(path, suffixes=OUTPUT_SUFFIXES)


def _load_train_test(args):
    if getattr(args, "output", None) and not args.test:
        raise UsageError("--output writes the predictions for TEST; pass a TEST file after TRAIN (or drop --output)")
    _check_outputs(getattr(args, "output", None))
    if args.label_column is None:
        raise UsageError("--label-column is required: the column of TRAIN that holds the class")
    # every cell of a categorical table may be text, so the first row cannot be told a header by its cells' kind
    # (as --header auto does for numeric tables): auto means yes here
    no_header = args.header == "no"
    train = _read_table(args.train, not no_header, args.delimiter)
    Xtr, ytr, col = _split(train, str(args.label_column))
    test = None
    if args.test:
        test = _read_table(args.test, not no_header, args.delimiter)
        if no_header and test.shape[1] == train.shape[1] - 1:
            Xte, yte = test, None
        elif col in test.columns:
            Xte, yte = test.drop(columns=[col]), test[col].to_numpy()
        else:
            Xte, yte = test, None
        if list(Xte.columns) != list(Xtr.columns):
            raise UsageError("the test file's feature columns differ from the training file's")
        test = (Xte, yte)
    return Xtr, ytr, test


def _report(name, model, test, args, fit_s):
    print(f"{name}: fit in {fit_s:.3f} s on {model._device}")
    if test is None:
        return
    Xte, yte = test
    pred = model.predict(Xte)
    pred = np.asarray(pred.cpu() if hasattr(pred, "cpu") else pred)
    if yte is not None:
        labelled = ~np.asarray(pd.isna(yte), dtype=bool)
        yte_c = yte.astype(model.classes_.dtype, copy=False) if model.classes_.dtype.kind in "iuf" and yte.dtype.kind in "iuf" else yte
        if labelled.any():
            acc = float(np.mean(pred[labelled] == yte_c[labelled]))
            note = "" if labelled.all() else f"; {int((~labelled).sum())} rows without a label left out"
            print(f"test accuracy: {acc:.4f} ({int(labelled.sum())} rows{note})")
        else:
            print(f"test accuracy: none (the label column is empty in all {len(yte)} test rows)")
    if args.output:
        _write_output(args.output, {"prediction": pred}, lambda: _predictions_text(pred))
        print(f"predictions written to {args.output}")


@_guard
def _run_nb(args):
    import time

    from ._encode import MAX_LEVELS, encode_table
    from ._nb import CategoricalNB

    Xtr, ytr, test = _load_train_test(args)
    _too_many_values(Xtr, Xtr.columns, MAX_LEVELS, "categories a feature may have",
                     "drop the column from the CSV (an identifier?) or bin its values first")
    _warn_continuous(args, _continuous_like(Xtr, Xtr.columns),
                     "Naive Bayes counts every distinct value as a category of its own (a test value unseen in "
                     "training tells it nothing)",
                     "bin them into a few ranges first, or use gpumine tree, which splits numeric columns at thresholds")
    table = encode_table(Xtr, ["categorical"] * Xtr.shape[1])
    model = CategoricalNB(alpha=args.alpha, representation=args.representation, device=args.device,
                          backend=args.backend, handle_unknown=args.handle_unknown)
    t = time.perf_counter()
    model.fit(table.codes.to(torch_int64()), ytr)
    fit_s = time.perf_counter() - t
    if test is not None:
        codes = table.encode(test[0], handle_unknown="ignore")
        if args.handle_unknown == "error" and (codes < 0).any():
            r, j = np.argwhere(codes < 0)[0]
            raise UsageError(f"test row {r} has category {test[0].iloc[r, j]!r} in column {Xtr.columns[j]!r} "
                              "unseen in training; use --handle-unknown ignore")
        unseen = codes < 0
        codes = np.where(unseen, np.asarray(model.n_categories_)[None, :], codes)  # beyond the fitted categories
        test = (codes, test[1])
        model.handle_unknown = "ignore" if unseen.any() else model.handle_unknown
    _report("nb", model, test, args, fit_s)
    return 0


def torch_int64():
    import torch

    return torch.int64


@_guard
def _run_tree(args):
    import time

    from .tree import C45Classifier
    from .tree._encoding import MAX_NOMINAL_VALUES
    from .tree._growth import slow_representation_message

    Xtr, ytr, test = _load_train_test(args)
    cat = args.categorical
    if cat == "auto":
        cf = None
    elif cat == "all":
        cf = "all"
    elif cat == "none":
        cf = []
    else:
        names = [str(c) for c in Xtr.columns]
        cf = []
        for tok in cat.split(","):
            tok = tok.strip()
            if tok in names:
                cf.append(names.index(tok))
            elif tok.lstrip("-").isdigit() and -len(names) <= int(tok) < len(names):
                cf.append(int(tok) % len(names))
            else:
                raise UsageError(f"--categorical names unknown column {tok!r}")
    nonnum = [j for j, c in enumerate(Xtr.columns) if not pd.api.types.is_numeric_dtype(Xtr[c])]
    if cf is not None and not isinstance(cf, str):
        cf = sorted(set(cf) | set(nonnum))
    nominal = nonnum if cf is None else (range(Xtr.shape[1]) if cf == "all" else cf)
    _too_many_values(Xtr, [Xtr.columns[j] for j in nominal], MAX_NOMINAL_VALUES, "values a nominal split may have",
                     "drop the column from the CSV (an identifier?)" +
                     ("" if cat == "auto" else " or leave it out of --categorical if it is numeric"))
    found = _continuous_like(Xtr, [Xtr.columns[j] for j in nominal])
    declared = [] if cf is None else {str(Xtr.columns[j]) for j in nominal} - {str(Xtr.columns[j]) for j in nonnum}
    _warn_continuous(args, found, "the tree splits a categorical column into one branch per value",
                     ("leave the numeric ones out of --categorical (C4.5 splits numeric columns at thresholds); "
                      if any(name in declared for name, _ in found) else "") + "bin them into a few ranges, or drop "
                     "an identifier column")
    params = dict(min_samples_leaf=args.min_samples_leaf, confidence=args.confidence, max_depth=args.max_depth,
                  prune=not args.unpruned, categorical_features=cf, handle_unknown=args.handle_unknown,
                  representation=args.representation, device=args.device, backend=args.backend)
    scheduler, workers = getattr(args, "scheduler", None), getattr(args, "workers", None)
    if scheduler is None and workers is None:
        model = C45Classifier(**params)
        t = time.perf_counter()
        with warnings.catch_warnings():
            # said below in the command line's words
            warnings.filterwarnings("ignore", message=r"representation='bit(map|slice)' on the CPU", category=UserWarning)
            model.fit(Xtr, ytr)
        fit_s = time.perf_counter() - t
        if slow_representation_message(args.representation, model._device) is not None:
            _warn(args, f"--representation {args.representation} is several to hundreds of times slower on the CPU than "
                  "--representation histogram, which grows the same tree; use --representation auto (the default) "
                  "or histogram")
    else:
        model, fit_s = _fit_tree_on_dask(params, Xtr, ytr, scheduler, workers)
    if args.tree != "none":
        print(_tree_text(model.export_text(), None if args.tree == "full" else TREE_SUMMARY_LINES))
    print(f"leaves: {model.n_leaves_}, nodes: {model.n_nodes_}, depth: {model.depth_}")
    if test is not None and args.handle_unknown == "error":
        _check_tree_categories(model, test[0])
    _report("tree", model, test, args, fit_s)
    return 0


def _tree_text(text: str, max_lines: int | None) -> str:
    """The tree's text, cut to its first ``max_lines`` lines (None: all) with a note of what was left out."""
    lines = text.split("\n")
    if max_lines is None or len(lines) <= max_lines:
        return text
    rest = len(lines) - max_lines
    return "\n".join(lines[:max_lines] + [f"... ({rest} more line{'s' if rest > 1 else ''}; --tree full prints the "
                                          "whole tree)"])


def _fit_tree_on_dask(params, Xtr, ytr, scheduler, workers):
    """``gpumine tree --scheduler ADDRESS`` / ``--workers N``: the tree fitted on a Dask cluster (the same tree);
    returns the fitted model (its tree, for printing and predicting here) and the seconds of the fit."""
    import contextlib
    import time

    flag = "--scheduler" if workers is None else "--workers"
    try:
        from distributed import Client
    except ImportError:
        raise UsageError(f"{flag} needs Dask: pip install 'gpumine[dask]'") from None
    from ..distributed import C45Classifier as DaskC45Classifier

    with contextlib.ExitStack() as stack:
        if workers is not None:
            from ..distributed import local_cluster

            client = stack.enter_context(Client(stack.enter_context(local_cluster(workers))))
        else:
            client = stack.enter_context(Client(scheduler))
        model = DaskC45Classifier(**params, client=client)
        t = time.perf_counter()
        model.fit(Xtr, ytr)
        fit_s = time.perf_counter() - t
    model.client = None  # the cluster is gone: the model predicts here
    return model, fit_s


def _check_tree_categories(model, Xte):
    """Usage error naming the first test value of a nominal column that the training file never had."""
    from .tree._encoding import _isna

    cols = model._cols
    for j, c in enumerate(Xte.columns):
        if not cols.nominal[j]:
            continue
        values = Xte[c].to_numpy(dtype=object)
        codes = cols.encode_col(values, j, unknown="missing")
        unseen = np.flatnonzero((codes >= cols.n_known[j]) & ~_isna(values))
        if unseen.size:
            r = int(unseen[0])
            raise UsageError(f"test row {r} has category {values[r]!r} in column {str(c)!r} unseen in training "
                              f"({unseen.size} such rows); use --handle-unknown missing to treat unseen values as missing")


def _read_transactions(args):
    path = args.input
    if not os.path.exists(path):
        raise UsageError(f"file not found: {path}")
    fmt = args.format
    frame = None
    if fmt in ("auto", "onehot") and (fmt == "onehot" or path.endswith((".csv", ".csv.gz"))):
        try:
            frame = _read_table(path, True, None)
        except (ValueError, OSError, EOFError):
            if fmt == "onehot":
                raise
            frame = None  # not a table (baskets of different lengths): read as baskets below
    if frame is not None:
        vals = frame.to_numpy()
        ok = vals.dtype == bool or (vals.dtype.kind in "biuf" and np.isin(vals, (0, 1)).all())
        if ok:
            return frame.astype(bool)
        if fmt == "onehot":
            raise UsageError("a one-hot CSV must hold only 0/1 (or true/false) values")
    import gzip

    opener = gzip.open if path.endswith(".gz") else open
    baskets = []
    with opener(path, "rt") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            sep = args.item_sep if args.item_sep is not None else ("," if "," in line else None)
            baskets.append([t.strip() for t in line.split(sep) if t.strip()])
    if not baskets:
        raise UsageError(f"{path} holds no transactions")
    return baskets


@_guard
def _run_itemsets(args):
    import time

    from ._itemsets import association_rules, frequent_itemsets

    _check_outputs(args.output, args.rules_output)

    data = _read_transactions(args)
    t = time.perf_counter()
    fi = frequent_itemsets(data, args.min_support, max_len=args.max_len, use_colnames=True, device=args.device,
                           backend=args.backend)
    dt = time.perf_counter() - t
    print(f"{len(fi)} frequent itemsets at min support {args.min_support} in {dt:.3f} s")
    order = fi.sort_values("support", ascending=False, kind="stable")

    def fmt(s):
        return " ".join(sorted(map(str, s)))

    for s, v in zip(order.itemsets[:args.top], order.support[:args.top]):
        print(f"{v:.4f}  {fmt(s)}")
    if args.output:
        support = fi.support.to_numpy(dtype=np.float64)
        names = np.array([fmt(s) for s in fi.itemsets], dtype=object)
        _write_output(args.output, {"support": support, "itemset": names},
                      lambda: "support,itemset\n" + "".join(f"{v!r},{_csv_field(n)}\n" for n, v in zip(names, support.tolist())))
    if args.rules:
        rules = association_rules(fi, metric=args.metric, min_threshold=args.min_threshold)
        print(f"{len(rules)} rules with {args.metric} >= {args.min_threshold}")
        for a, c, conf, lift in list(zip(rules.antecedents, rules.consequents, rules.confidence, rules.lift))[:args.top]:
            print(f"{fmt(a)} -> {fmt(c)}  confidence {conf:.3f} lift {lift:.3f}")
        if args.rules_output:
            out = rules.copy()
            out["antecedents"] = [fmt(a) for a in out.antecedents]
            out["consequents"] = [fmt(c) for c in out.consequents]
            _write_output(args.rules_output, {str(c): out[c].to_numpy() for c in out.columns},
                          lambda: out.to_csv(index=False))
    return 0


def _csv_field(s: str) -> str:
    return '"' + s.replace('"', '""') + '"' if any(ch in s for ch in ',"\n') else s


def main(argv=None) -> int:
    """Stand-alone entry (``python -m gpumine.counting._cli nb ...``) for testing without the main CLI."""
    parser = argparse.ArgumentParser(prog="gpumine")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
