"""``gpumine lof``: Local Outlier Factor scores of a data file (outlier detection, or novelty against --train).

Writes one row per data row: ``lof`` (the LOF, larger is more outlying),
``outlier`` (1 when ``negative_outlier_factor_ < offset_``, else 0) and the
label when ``--label-column`` is given; a summary on stderr (with the
ROC-AUC when the labels are 0/1). Output files are written atomically.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from ..cli._args import add_deprecated_alias, add_device_options, add_dtype_option, add_table_options, check_k, positive_int, read_features
from ..cli._args import label_column as parse_label_column
from ..cli._errors import in_flag_words

__all__ = ["register", "run"]


def _contamination(text):
    if text == "auto":
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a number in (0, 0.5], got {text!r}") from None
    if not 0 < value <= 0.5:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a number in (0, 0.5], got {value}")
    return value


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``lof`` command to a ``gpumine`` sub-parser collection."""
    p = subparsers.add_parser(
        "lof",
        help="Local Outlier Factor scores of a data file (exact, GPU or CPU)",
        description=(
            "Score every row of DATA with the Local Outlier Factor among the other rows (as scikit-learn's "
            "LocalOutlierFactor(novelty=False)), or, with --train, against the rows of TRAIN (novelty=True). "
            "Writes lof,outlier[,label] per row to --output (.csv, .json, .npy) or CSV on stdout."
        ),
    )
    p.add_argument("data", help="data file: .csv[.gz], .parquet, .npy or .npz")
    p.add_argument("--train", default=None, help="fit on this file and score DATA as new data (novelty detection)")
    p.add_argument("-k", "--k", type=positive_int, default=20,
                   help="neighbours of each row (default 20); the fitted rows (DATA, or TRAIN) must number more "
                        "than k: the command refuses a larger k, where the Python LocalOutlierFactor, as "
                        "scikit-learn's, lowers it to the rows - 1 with a warning")
    p.add_argument("--contamination", type=_contamination, default="auto", help="'auto' (offset -1.5) or the expected outlier share")
    p.add_argument("--metric", default="euclidean", help="euclidean, sqeuclidean, manhattan, chebyshev, minkowski, cosine")
    p.add_argument("--p", type=float, default=None, help="power for --metric minkowski")
    p.add_argument("--duplicates", choices=["distinct", "sklearn"], default="distinct",
                   help="rule for points with >= k exact duplicates (default distinct: k-distinct-distance)")
    add_table_options(p, label_help="label column (index, negative from the end, header name; 'y' for ADBench .npz)")
    add_dtype_option(p)
    add_deprecated_alias(p, "--float64", dest="dtype", new="--dtype float64", value="float64")
    p.add_argument("-o", "--output", default=None, help="write results to .csv, .json or .npy (default: CSV on stdout)")
    add_device_options(p)
    p.set_defaults(func=run)
    return p


def run(args) -> int:
    """Handler of ``gpumine lof``."""
    import warnings

    from ..io import check_output_path, write_result
    from ._lof import DuplicatesWarning
    from ._lof_estimator import LocalOutlierFactor

    if args.output:  # before the work: a run is not lost to a bad output path
        check_output_path(args.output)

    label_column = parse_label_column(args.label_column)
    X, y = read_features(args.data, label_column=label_column, header=args.header, delimiter=args.delimiter,
                         dtype=args.dtype)
    model = LocalOutlierFactor(
        args.k, metric=args.metric, p=2 if args.p is None else args.p, contamination=args.contamination,
        novelty=args.train is not None, duplicates=args.duplicates, device=args.device, backend=args.backend,
        working_memory=args.working_memory, verbose=0 if args.quiet else None,
    )
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DuplicatesWarning)
        if args.train is None:
            check_k(args.k, X.shape[0], args.data)
            labels = model.fit_predict(X)
            lof = np.asarray(model.outlier_scores_, dtype=np.float64)
        else:
            train, _ = read_features(args.train, header=args.header, delimiter=args.delimiter, dtype=args.dtype)
            check_k(args.k, train.shape[0], args.train)
            model.fit(train)
            lof = -np.asarray(model.score_samples(X), dtype=np.float64)
            labels = model.predict(X)
    seconds = time.perf_counter() - start
    for w in caught:
        print(f"gpumine lof: warning: {in_flag_words(str(w.message))}", file=sys.stderr)
    columns = {"lof": lof, "outlier": (np.asarray(labels) == -1).astype(np.int64)}
    if y is not None:
        columns["label"] = y
    if args.output:
        write_result(args.output, columns)
    else:
        out = sys.stdout
        names = list(columns)
        out.write(",".join(names) + "\n")
        for row in zip(*(columns[n].tolist() for n in names)):
            out.write(",".join(format(v, ".9g") if isinstance(v, float) else str(v) for v in row) + "\n")
    if not args.quiet:
        msg = (f"gpumine lof: {len(lof)} rows, k={model.n_neighbors_}, {int(columns['outlier'].sum())} outliers "
               f"(offset {model.offset_:.4g}), device={model.device_}, {seconds:.3f} s")
        if y is not None:
            yy = np.asarray(y)
            if yy.dtype.kind in "biuf" and set(np.unique(yy).tolist()) <= {0, 1} and 0 < yy.sum() < len(yy):
                from sklearn.metrics import roc_auc_score

                msg += f", ROC-AUC={roc_auc_score(yy, lof):.4f}"
        if args.output:
            msg += f", written to {args.output}"
        print(msg, file=sys.stderr)
    return 0
