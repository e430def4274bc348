"""The ``gpumine`` command line: knn, outliers, lof, stream, nb, tree, itemsets, info, demo.

Exit codes: 0 success; 2 bad usage or bad input, with a one-line reason on stderr.
Result files are written to a temporary name and renamed, so a failed run never
leaves a partial file.

The package: this module builds the parser and runs ``knn``, ``info`` and ``demo``;
``gpumine.cli._args`` is the one option set every subcommand shares (device,
table reading, cluster) and ``gpumine.cli._errors`` the one-line error reasons.
The other subcommands register from their own package's ``_cli`` module. No
library module imports this package.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time

from ._args import add_cluster_options, add_device_options, add_dtype_option, add_table_options, check_k, positive_int, read_features
from ._errors import EXPECTED_ERRORS, explain
from ._args import label_column as parse_label_column

__all__ = ["main", "build_parser"]


class UsageError(Exception):
    """Bad usage or input: reported on one line, exit code 2."""


# -- knn -------------------------------------------------------------------------------
def _add_knn(sub) -> None:
    p = sub.add_parser(
        "knn",
        help="exact k-nearest neighbours: classify, regress or list neighbours",
        description=(
            "Fit on TRAIN and answer for QUERY (or for TRAIN itself, each point excluded from its own "
            "neighbours, when QUERY is omitted). With --label-column the task is classification "
            "(or regression with --task regress); without, the neighbours themselves are written."
        ),
    )
    p.add_argument("train", help="training data: .csv[.gz], .parquet, .npy or .npz")
    p.add_argument("query", nargs="?", help="query data (same columns; its label column, if present, gives the accuracy)")
    p.add_argument("-k", "--k", type=positive_int, default=5,
                   help="neighbours per query (default 5); TRAIN needs more than k rows without QUERY, k with it")
    p.add_argument("--metric", default="euclidean",
                   help="euclidean, sqeuclidean, manhattan, chebyshev, minkowski, cosine, inner_product; also "
                        "canberra, braycurtis, correlation, hamming, haversine (2 features), nan_euclidean and the "
                        "boolean jaccard, dice, rogerstanimoto, russellrao, sokalsneath, yule (exact brute force); "
                        "seuclidean and mahalanobis need metric_params (Python API)")
    p.add_argument("--p", type=float, default=None, help="power for --metric minkowski")
    p.add_argument("--task", default="auto", choices=["auto", "classify", "regress", "neighbors"],
                   help="classify (majority vote of the neighbours' labels), regress (their mean) or neighbors "
                        "(write the neighbours); auto (the default): classify with --label-column, else neighbors")
    p.add_argument("--weights", default="uniform", choices=["uniform", "distance"],
                   help="vote weights of classify/regress: uniform (the default) or distance (1/distance, so "
                        "nearer neighbours count more)")
    add_cluster_options(p, what="the references are sharded over its workers; the neighbours are the same")
    p.add_argument("--radius", type=float, default=None, metavar="R",
                   help="every neighbour within distance R instead of the k nearest: neighbours come out one "
                        "(query, index, distance) row per pair; classify/regress vote or average within R")
    add_table_options(p, label_help="label column of TRAIN (index, negative from the end, or header name)")
    add_dtype_option(p)
    p.add_argument("-o", "--output", default=None, help="write results to .csv, .json or .npy (default: CSV on stdout)")
    p.add_argument("--precision", default="exact", choices=["exact", "tf32", "bf16"],
                   help="arithmetic of the candidate search on tensor cores; results are exact in every mode "
                        "(tf32/bf16 compute in float32)")
    p.add_argument("--tune", action="store_true",
                   help="first time the fused GPU kernel's tile shapes on this search and cache the fastest per shape "
                        "class (gpumine.neighbors.tune_knn; a few seconds of compilation, once per class and GPU)")
    add_device_options(p)
    p.set_defaults(func=_run_knn)


def _read(args, path, label_column):
    X, y = read_features(path, label_column=label_column, header=args.header, delimiter=args.delimiter, dtype=args.dtype,
                         allow_nan=args.metric == "nan_euclidean")
    return X if label_column is None else (X, y)


def _run_knn(args) -> int:
    import numpy as np

    from ..io import check_output_path, write_result
    from ..neighbors import KNeighborsClassifier, KNeighborsRegressor, NearestNeighbors

    if args.output:  # before the work: a run is not lost to a bad output path
        check_output_path(args.output)

    label_column = parse_label_column(args.label_column)
    task = args.task
    if task == "auto":
        task = "classify" if label_column is not None else "neighbors"
    if task in ("classify", "regress") and label_column is None:
        raise UsageError(f"--task {task} needs --label-column to say which TRAIN column holds the target")
    train = _read(args, args.train, label_column)
    X_train, y_train = train if label_column is not None else (train, None)
    y_query = None
    X_query = None
    if args.query is not None:
        n_features = X_train.shape[1]
        query_all = _read(args, args.query, None)
        query_all = np.atleast_2d(query_all)
        if label_column is not None and query_all.shape[1] == n_features + 1:
            query = _read(args, args.query, label_column)
            X_query, y_query = query
        else:
            X_query = query_all
    common = dict(
        n_neighbors=args.k, metric=args.metric, p=2 if args.p is None else args.p, device=args.device,
        backend=args.backend, working_memory=args.working_memory, verbose=0 if args.quiet else None,
        precision=args.precision,
    )
    if args.precision != "exact":  # the reduced precisions search float32 data
        X_train = np.asarray(X_train, dtype=np.float32)
        X_query = None if X_query is None else np.asarray(X_query, dtype=np.float32)
    if args.tune:
        _tune_knn(args, X_train, X_query)
    if args.radius is None:  # refused, not lowered: the answer would be for another k
        check_k(args.k, X_train.shape[0], args.train, excluding_self=X_query is None)
    if args.p is not None and args.metric != "minkowski":
        raise UsageError(f"--p {args.p} applies to --metric minkowski only (the metric is {args.metric}); "
                         "add --metric minkowski or drop --p")
    start = time.perf_counter()
    if args.radius is not None and not (args.radius >= 0 and np.isfinite(args.radius)):
        raise UsageError(f"--radius must be a finite number >= 0; got {args.radius}")
    if task == "neighbors" and args.radius is not None:
        model = NearestNeighbors(radius=args.radius, **common).fit(X_train)
        dist, index = model.radius_neighbors(X_query)
        counts = [len(row) for row in index]
        columns = {"query": np.repeat(np.arange(len(index)), counts),
                   "index": np.concatenate(list(index)) if len(index) else np.zeros(0, np.int64),
                   "distance": np.concatenate(list(dist)) if len(dist) else np.zeros(0)}
    elif task == "neighbors" and (args.scheduler is not None or args.workers is not None):
        dist, index, model = _distributed_knn(args, X_train, X_query, common)
        columns = {"index": index, "distance": dist}
    elif task == "neighbors":
        model = NearestNeighbors(**common).fit(X_train)
        dist, index = model.kneighbors(X_query)
        columns = {"index": index, "distance": dist}
    else:
        if X_query is None:
            raise UsageError(f"--task {task} needs a QUERY file to predict")
        if args.radius is not None:
            from ..neighbors import RadiusNeighborsClassifier, RadiusNeighborsRegressor

            radius_common = {key: value for key, value in common.items() if key not in ("n_neighbors", "precision")}
            cls = RadiusNeighborsClassifier if task == "classify" else RadiusNeighborsRegressor
            model = cls(radius=args.radius, weights=args.weights, **radius_common)
        elif args.scheduler is not None or args.workers is not None:
            model = None
        else:
            cls = KNeighborsClassifier if task == "classify" else KNeighborsRegressor
            model = cls(weights=args.weights, **common)
        if model is None:  # the distributed estimators: neighbours from the cluster, the vote here
            pred, model = _distributed_predict(args, task, X_train, y_train, X_query, common)
        else:
            model = model.fit(X_train, y_train)
            pred = model.predict(X_query)
        columns = {"prediction": pred}
        if y_query is not None:
            columns["label"] = y_query
    seconds = time.perf_counter() - start
    if args.output:
        write_result(args.output, columns)
    else:
        _write_csv_stdout(columns)
    if not args.quiet:
        n = next(iter(columns.values())).shape[0]
        reach = f"radius={args.radius}" if args.radius is not None else f"k={args.k}"
        msg = f"gpumine knn: {n} rows, {reach}, metric={model.effective_metric_}, device={model.device_}, {seconds:.3f} s"
        if y_query is not None and task == "classify":
            msg += f", accuracy={np.mean(np.asarray(pred) == np.asarray(y_query)):.4f}"
        if args.output:
            msg += f", written to {args.output}"
        print(msg, file=sys.stderr)
    return 0


def _dask_client(args, stack):
    """The Dask client of ``--scheduler ADDRESS`` or of ``--workers N`` (a local cluster), entered on ``stack``."""
    try:
        from distributed import Client
    except ImportError:
        raise UsageError(f"{'--scheduler' if args.workers is None else '--workers'} needs Dask: "
                         "pip install 'gpumine[dask]'") from None
    flag = "--scheduler" if args.workers is None else "--workers"
    # gpumine outliers has none of these options
    radius, tune, precision = (getattr(args, name, None) for name in ("radius", "tune", "precision"))
    if radius is not None or tune or precision not in (None, "exact"):
        raise UsageError(f"{flag} runs the k-nearest search only (no --radius, --tune or --precision)")
    if args.workers is not None:
        from ..distributed import local_cluster

        return stack.enter_context(Client(stack.enter_context(local_cluster(args.workers))))
    return stack.enter_context(Client(args.scheduler))


def _on_dask(args, common):
    """What the summary line says of a distributed run: ``(metric, device)``."""
    metric = common["metric"] if common["metric"] != "minkowski" or common["p"] != 2 else "euclidean"
    return metric, "dask " + (args.scheduler if args.workers is None else f"{args.workers} local workers")


def _distributed_knn(args, X_train, X_query, common):
    """``gpumine knn --scheduler`` / ``--workers``: the search on a Dask cluster (same neighbours as one process)."""
    import contextlib
    import types

    from ..distributed import NearestNeighbors as DaskNearestNeighbors

    with contextlib.ExitStack() as stack:
        client = _dask_client(args, stack)
        p = common["p"] if common["metric"] == "minkowski" else None
        model = DaskNearestNeighbors(common["n_neighbors"], metric=common["metric"], p=p, client=client,
                                     device=common["device"], working_memory=common["working_memory"]).fit(X_train)
        dist, index = model.kneighbors(X_query)
    metric, device = _on_dask(args, common)
    return dist, index, types.SimpleNamespace(effective_metric_=metric, device_=device)


def _distributed_predict(args, task, X_train, y_train, X_query, common):
    """``--task classify|regress`` with ``--scheduler`` / ``--workers``: the Dask estimators' predictions."""
    import contextlib
    import types

    from ..distributed import KNeighborsClassifier as DaskClassifier
    from ..distributed import KNeighborsRegressor as DaskRegressor

    with contextlib.ExitStack() as stack:
        client = _dask_client(args, stack)
        cls = DaskClassifier if task == "classify" else DaskRegressor
        pred = cls(weights=args.weights, client=client, **common).fit(X_train, y_train).predict(X_query)
    metric, device = _on_dask(args, common)
    return pred, types.SimpleNamespace(effective_metric_=metric, device_=device)


def _tune_knn(args, X_train, X_query) -> None:
    import numpy as np

    from ..config import resolve_device, triton_available
    from ..neighbors import tune_knn

    device = resolve_device(args.device)
    if not triton_available(device):
        raise UsageError(f"--tune times the fused GPU kernel, which cannot run on {device}; drop --tune or pass --device cuda")
    tuned = tune_knn(np.asarray(X_train, dtype=np.float32), None if X_query is None else np.asarray(X_query, dtype=np.float32),
                     args.k, metric=args.metric, p=args.p, device=args.device, working_memory=args.working_memory,
                     precision=args.precision)
    if args.quiet:
        return
    if not tuned:
        print("gpumine knn --tune: every shape class of this search was already tuned (or it runs no fused kernel)",
              file=sys.stderr)
    for key, entry in tuned.items():
        print(f"gpumine knn --tune: {key}: block {entry['blocks']} "
              f"({', '.join(f'{shape} {ms:.3g} ms' for shape, ms in entry['ms'].items())})", file=sys.stderr)


def _write_csv_stdout(columns) -> None:
    import numpy as np

    names, blocks = [], []
    for name, values in columns.items():
        values = np.asarray(values)
        if values.ndim == 1:
            names.append(name)
            blocks.append(values[:, None])
        else:
            names.extend(f"{name}_{j}" for j in range(values.shape[1]))
            blocks.append(values)
    out = sys.stdout
    out.write(",".join(names) + "\n")
    n = blocks[0].shape[0]
    for i in range(n):
        out.write(",".join(str(v) for block in blocks for v in block[i].tolist()) + "\n")


# -- info ------------------------------------------------------------------------------
def _add_info(sub) -> None:
    p = sub.add_parser("info", help="devices, backends and versions")
    p.set_defaults(func=_run_info)


def _version(module: str) -> str:
    try:
        return importlib.import_module(module).__version__
    except Exception:  # noqa: BLE001 - any import failure means "not available"
        return "not installed"


def _run_info(args) -> int:
    import torch

    from .. import __version__
    from ..config import get_config, resolve_backend, resolve_device

    print(f"gpumine {__version__}")
    print(f"python {platform.python_version()} on {platform.system()} {platform.machine()}")
    for module in ("torch", "triton", "numpy", "scipy", "pandas", "sklearn"):
        print(f"{module:8s} {_version(module)}")
    print(f"cuda     {'available' if torch.cuda.is_available() else 'not available'} (torch built with CUDA {torch.version.cuda})")
    for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        prop = torch.cuda.get_device_properties(i)
        print(f"  cuda:{i} {prop.name}, {prop.total_memory / 2**30:.1f} GiB, {prop.multi_processor_count} SMs")
    device = resolve_device("auto")
    print(f"auto device: {device}; kNN backend: {resolve_backend('auto', device, has_triton_kernel=False)}")
    print(f"config: {get_config()}")
    return 0


# -- demo ------------------------------------------------------------------------------
def _add_demo(sub) -> None:
    p = sub.add_parser("demo", help="classify a shipped real data sample (Covertype) and time each device")
    p.add_argument("-k", "--k", type=positive_int, default=5, help="neighbours per vote (default 5)")
    p.add_argument("--device", action="append", default=None, help="device(s) to time (default: cpu and every GPU)")
    p.set_defaults(func=_run_demo)


def _run_demo(args) -> int:
    import numpy as np
    import torch
    from sklearn.neighbors import KNeighborsClassifier as SkKNN

    from ..datasets import load_covtype_sample
    from ..neighbors import KNeighborsClassifier

    X, y = load_covtype_sample(n_features=10)
    X = (X - X.mean(0)) / X.std(0)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(X))
    cut = int(0.8 * len(X))
    tr, te = order[:cut], order[cut:]
    devices = args.device or ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    print(f"Covertype sample (UCI, CC BY 4.0): {len(tr)} training and {len(te)} test rows, 10 features, "
          f"{len(np.unique(y))} classes; k={args.k}, exact euclidean kNN")
    print(f"{'implementation':28s} {'accuracy':>9s} {'fit+predict':>12s}")
    def best_of(model, repeats=3):
        """Predictions and the best fit+predict time of ``repeats`` calls after a warm-up (one noisy call decides nothing)."""
        model.fit(X[tr], y[tr]).predict(X[te][:10])  # warm-up (allocations, kernels)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            pred = model.fit(X[tr], y[tr]).predict(X[te])
            times.append(time.perf_counter() - start)
        return pred, min(times)

    for device in devices:
        model = KNeighborsClassifier(args.k, device=device, verbose=0)
        pred, seconds = best_of(model)
        print(f"{'gpumine ' + str(model.device_):28s} {np.mean(pred == y[te]):9.4f} {seconds * 1e3:10.1f} ms")
    # scikit-learn as its users run it: the default algorithm, all cores, timed the same way
    pred, seconds = best_of(SkKNN(args.k, n_jobs=-1))
    print(f"{'scikit-learn cpu':28s} {np.mean(pred == y[te]):9.4f} {seconds * 1e3:10.1f} ms")
    print("timings: the best of 3 calls of each, after a warm-up call; scikit-learn with its default algorithm on all cores")
    return 0


def _gpumine_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpumine")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


# -- entry point -------------------------------------------------------------------------
_BENCH_MOVED = ("gpumine bench: error: benchmarks live in the repository's benchmarks/ folder: "
                "python -m benchmarks.<suite> from a source checkout (knn, outliers, stream, realdata, counting)")
_BUILTIN_COMMANDS = ("knn", "info", "demo")
# Which module registers which command, so that a run imports only its own command's module:
# importing them all costs pandas (counting) and the kNN engine with Triton (outliers) before
# `gpumine stream` can start reading. tests/cli/test_commands.py checks this table against register().
_COMMAND_MODULES = {
    "outliers": "gpumine.outliers._distance_cli",
    "lof": "gpumine.outliers._lof_cli",
    "stream": "gpumine.stream._cli",
    "nb": "gpumine.counting._cli",
    "tree": "gpumine.counting._cli",
    "itemsets": "gpumine.counting._cli",
}


def build_parser() -> argparse.ArgumentParser:
    return _build_parser(dict.fromkeys(_COMMAND_MODULES.values()))[0]


def _build_parser(modules):
    parser = argparse.ArgumentParser(prog="gpumine", description="Exact data mining on the GPU, with the same results on the CPU.")
    parser.add_argument("--version", action="version", version=f"gpumine {_gpumine_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    _add_knn(sub)
    _add_info(sub)
    _add_demo(sub)
    for module in modules:
        try:
            commands = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module.startswith(exc.name):
                raise  # the module is there but one of its own imports is missing
            continue
        commands.register(sub)
    return parser, sub


def _parser_for(argv: list[str]) -> argparse.ArgumentParser:
    """The parser for ``argv``: only its command's module when it names one, else every command.

    The top level has no options but -h, so a command can only come first. Help, a mistyped
    command or a command whose module is missing get the full parser, whose messages list
    every command.
    """
    command = argv[0] if argv else None
    if command in _BUILTIN_COMMANDS:
        return _build_parser(())[0]
    if command in _COMMAND_MODULES:
        parser, sub = _build_parser((_COMMAND_MODULES[command],))
        if command in sub.choices:
            return parser
    return build_parser()


def main(argv=None) -> int:
    """Run the command line; returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # the former `gpumine bench SUITE`: the suites are not in the package
        print(_BENCH_MOVED, file=sys.stderr)
        return 2
    parser = _parser_for(argv)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # the reader of our output has gone (``| head``): end quietly, as Unix tools do;
        # stdout goes to devnull so the interpreter's exit-time flush cannot complain
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except UsageError as exc:
        print(f"gpumine {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except EXPECTED_ERRORS as exc:
        print(f"gpumine {args.command}: error: {explain(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"gpumine {args.command}: interrupted", file=sys.stderr)
        return 130


def console_main() -> None:
    """The ``gpumine`` console script: :func:`main`, then a fast exit after ``gpumine stream``.

    A stream's output and state file are complete when ``main`` returns; the interpreter's
    teardown of torch (and of a CUDA context) would add about a second to every piped run.
    """
    argv = sys.argv[1:]
    code = main(argv)
    if argv[:1] == ["stream"]:
        from ..stream._cli import exit_after_flush

        exit_after_flush(code)
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    console_main()
