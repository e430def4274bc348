"""Subcommand ``gpumine outliers``: the top-n distance-based outliers of a data file.

``register(subparsers)`` adds the parser; the handler returns 0, or raises
``ValueError``/``TypeError``/``OSError``, which the main CLI reports on one
line with exit code 2. Result files are written atomically.

Examples::

    gpumine outliers data.csv --top 10 -k 50
    gpumine outliers 10_cover.npz --label-column y --top 20 -k 5 --method brute_force -o top.csv
    gpumine outliers data.csv --top 10 -k 5 --scheduler tcp://host:8786
    gpumine outliers data.csv --top 10 -k 5 --workers 4

``--scheduler ADDRESS`` / ``--workers N`` run either method on a Dask cluster
(:func:`gpumine.distributed.top_n_outliers`): the same outliers and weights.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from ..cli._args import add_cluster_options, add_device_options, add_dtype_option, add_table_options, check_k, positive_int, read_features
from ..cli._args import label_column as parse_label_column

__all__ = ["register"]


def _candidates(text: str):
    return "auto" if text == "auto" else positive_int(text)


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``outliers`` subcommand to ``subparsers`` (from ``ArgumentParser.add_subparsers``)."""
    p = subparsers.add_parser(
        "outliers",
        help="top-n distance-based outliers (sum of distances to the k nearest neighbours)",
        description=(
            "Find the TOP points of DATA with the largest weight, the sum of the distances to their k "
            "nearest neighbours (each point excluded from its own neighbours unless --include-self), by "
            "SolvingSet or brute force. Writes rank, index (0-based row), weight (and the label column "
            "when given) as CSV on stdout or to -o; statistics go to stderr."
        ),
    )
    p.add_argument("data", help="data file: .csv[.gz], .tsv, .parquet, .npy or .npz")
    p.add_argument("--top", "-n", type=positive_int, default=10, help="number of outliers (default 10)")
    p.add_argument("-k", "--k", type=positive_int, default=5, help="neighbours per weight (default 5)")
    p.add_argument("--method", default="auto", choices=["auto", "solving_set", "brute_force"],
                   help="solving_set (prunes most points early, same outliers), brute_force (every point's k "
                        "nearest neighbours) or auto (the default: brute force on a GPU up to 65,536 rows, on the CPU up to "
                        "16,384 rows of at most 32 features or at any size up to 10 features, "
                        "solving_set otherwise)")
    p.add_argument("--include-self", action="store_true",
                   help="count each point as its own first neighbour at distance 0, so a weight sums the k-1 nearest "
                        "other points (as Angiulli et al.'s GPU SolvingSet paper counts; the default excludes "
                        "it, as scikit-learn and PyOD do)")
    p.add_argument("--metric", default="euclidean",
                   help="euclidean, sqeuclidean, manhattan, chebyshev, minkowski, cosine (default euclidean)")
    p.add_argument("--p", type=float, default=None, help="power for --metric minkowski")
    p.add_argument("--candidates", type=_candidates, default="auto", metavar="M",
                   help="SolvingSet candidates per iteration, or 'auto' (default)")
    p.add_argument("--seed", type=int, default=0, metavar="N",
                   help="random state that picks the first SolvingSet candidates (default 0)")
    add_table_options(p, label_help="column holding labels (index, negative from the end, or header name; for .npz "
                                    "the array name, e.g. y): left out of the distances and copied to the output")
    add_dtype_option(p)
    p.add_argument("-o", "--output", default=None, help="write the outliers to .csv, .json or .npy (default: CSV on stdout)")
    p.add_argument("--solving-set", default=None, metavar="FILE",
                   help="also write the solving set (index, weight, exact) to .csv, .json or .npy")
    add_cluster_options(p, what="the rows are sharded over its workers; the outliers and weights are the same")
    add_device_options(p, quiet_help="no progress bar and no statistics on stderr")
    p.set_defaults(func=run_outliers)
    return p


def _write_stdout(columns) -> None:
    names = list(columns)
    out = sys.stdout
    out.write(",".join(names) + "\n")
    n = len(columns[names[0]])
    for i in range(n):
        out.write(",".join(str(columns[name][i].item() if hasattr(columns[name][i], "item") else columns[name][i])
                           for name in names) + "\n")


def _on_dask(args, X, common):
    """``--scheduler`` / ``--workers``: :func:`gpumine.distributed.top_n_outliers` on that cluster."""
    import contextlib

    from ..cli import _dask_client
    from ..distributed import top_n_outliers as distributed_top_n_outliers

    with contextlib.ExitStack() as stack:
        client = _dask_client(args, stack)
        return distributed_top_n_outliers(X, args.top, args.k, client=client, **common)


def run_outliers(args) -> int:
    """Handler of ``gpumine outliers``."""
    from ..io import check_output_path, write_result
    from ._distance_based import top_n_outliers

    if args.output:  # before the work: a run is not lost to a bad output path
        check_output_path(args.output)

    X, labels = read_features(args.data, label_column=parse_label_column(args.label_column), header=args.header,
                              delimiter=args.delimiter, dtype=args.dtype)
    if X.ndim == 1:
        X = X.reshape(-1, 1)
    check_k(args.k, X.shape[0], args.data, excluding_self=not args.include_self)
    if args.top > X.shape[0]:
        raise ValueError(f"--top {args.top} asks for more outliers than {args.data} has rows ({X.shape[0]}); lower --top")
    start = time.perf_counter()
    common = dict(method=args.method, n_candidates=args.candidates, include_self=args.include_self,
                  metric=args.metric, p=args.p, random_state=args.seed, device=args.device, backend=args.backend,
                  working_memory=args.working_memory, verbose=0 if args.quiet else None)
    if getattr(args, "scheduler", None) is not None or getattr(args, "workers", None) is not None:
        result = _on_dask(args, X, common)
    else:
        result = top_n_outliers(X, args.top, args.k, **common)
    seconds = time.perf_counter() - start
    indices = np.asarray(result.indices)
    columns = {"rank": np.arange(1, len(indices) + 1), "index": indices, "weight": np.asarray(result.weights)}
    if labels is not None:
        columns["label"] = labels[indices]
    if args.output:
        write_result(args.output, columns)
    else:
        _write_stdout(columns)
    if args.solving_set:
        solving = np.asarray(result.solving_set)
        write_result(args.solving_set, {
            "index": solving,
            "weight": np.asarray(result.scores)[solving],
            "exact": np.asarray(result.scores_exact)[solving],
        })
    if not args.quiet:
        msg = f"gpumine outliers: {result.summary()} (wall {seconds:.3f} s)"
        if args.output:
            msg += f"; written to {args.output}"
        print(msg, file=sys.stderr)
    return 0
