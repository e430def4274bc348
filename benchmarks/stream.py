"""Streaming LOF benchmark (LOF_GPU, Yu 2017): throughput, detection quality, batch LOF vs scikit-learn.

Experiments (``--experiments``, comma-separated):

``throughput``
    StreamingLOF points/s processing in-memory windows (already on the
    device), k = 20, ``max_bins`` = 2048, vs window size (1,024 … 8,192 at
    d = 10) and vs d (2, 10, 32 at window 4,096), on ``--device`` and on the
    CPU (unless ``--no-cpu``); plus SlidingWindowLOF at equal memory. Data: a
    Gaussian stream whose centre drifts. Three warm-up windows (the summary
    fills), then windows are timed until ``--row-seconds``; the GPU is
    synchronised around the timed loop.
``cli``
    ``python -m gpumine.stream`` (what ``gpumine stream`` runs) reading a CSV
    pipe of N × 10 records (``--cli-n``, default 1,000,000; at most
    ``--cli-cpu-n`` = 100,000 on the CPU), window 4,096,
    k = 20, output to /dev/null: records/s over the whole run, and with the
    start-up time (a run on 10 records) subtracted.
``quality``
    ROC-AUC and average precision of the LOF scores on labelled streams in
    arrival order: ADBench ``16_http``, ``34_smtp``, ``32_shuttle`` (from
    ``--data-dir``: a folder holding the ``.npz`` files, or their
    ``adbench/`` folder) and the synthetic drifting 2-D stream
    (:func:`gpumine.stream.make_drifting_stream`), for StreamingLOF,
    SlidingWindowLOF with ``history_size`` = ``max_bins`` (equal memory),
    SlidingWindowLOF with no history (each window alone), batch LOF on the
    whole data (gpumine :class:`LocalOutlierFactor`), and River's
    ``HalfSpaceTrees`` (whole stream) and incremental ``LocalOutlierFactor``
    (first ``--river-lof-n`` = 3,000 points: it is slow, one point at a time in
    Python; the row says so) when River imports. The streaming rows of every stream come first,
    then batch LOF of each whole stream, then River (``--quality-methods``
    picks). All AUCs are reported as they come out.
``batch``
    Batch LOF of ``--batch-n`` × 10 Gaussian points (default 1,000,000), k = 20,
    on the device; scikit-learn ``LocalOutlierFactor(n_jobs=-1)`` timed on
    ``--sklearn-n`` points only (default 50,000: it is quadratic; 250,000
    took 76 s on a 16-core host), gpumine timed on the same points with the
    largest relative difference of the scores; the scikit-learn time at the
    full n is extrapolated quadratically and labelled as an estimate.

Run ``python -m benchmarks.stream --help`` (or ``python benchmarks/stream.py --help``) from the repository root.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

if not __package__:  # run as a script (python benchmarks/stream.py): the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks._common import environment, format_count, format_seconds, synchronize, write_json, write_text  # noqa: E402

__all__ = ["main", "build_parser", "render_markdown", "EXPERIMENTS", "ADBENCH_STREAMS", "drifting_gaussian"]

EXPERIMENTS = ("throughput", "batch", "cli", "quality")
ADBENCH_STREAMS = ("16_http", "34_smtp", "32_shuttle")


def drifting_gaussian(n: int, d: int, seed: int = 0) -> np.ndarray:
    """n points in d dimensions around a centre that drifts linearly (float32).

    Examples
    --------
    >>> drifting_gaussian(4, 3).shape
    (4, 3)
    """
    rng = np.random.default_rng(seed)
    drift = np.linspace(0.0, 5.0, n, dtype=np.float32)[:, None] * np.ones(d, dtype=np.float32) / np.sqrt(d)
    return rng.standard_normal((n, d), dtype=np.float32) + drift


class _Bench:
    def __init__(self, args, device: torch.device, out_json: Path | None, out_md: Path | None):
        self.args = args
        self.device = device
        self.out_json = out_json
        self.out_md = out_md
        self.start = time.perf_counter()
        self.rows: list[dict] = []
        self.meta = environment(device, packages=("gpumine", "torch", "numpy", "sklearn", "river", "pandas"))
        self.meta.update(quick=bool(args.quick), experiments=list(args.experiments), data_dir=str(args.data_dir) if args.data_dir else None)
        self.failures = 0

    def log(self, message: str) -> None:
        print(f"[{time.perf_counter() - self.start:7.1f} s] {message}", flush=True)

    def add(self, **row) -> dict:
        self.rows.append(row)
        self.save()
        return row

    def results(self) -> dict:
        return {"meta": self.meta, "rows": self.rows}

    def save(self) -> None:
        if self.out_json is not None:
            write_json(self.out_json, self.results())
        if self.out_md is not None:
            write_text(self.out_md, render_markdown(self.results()))

    def devices(self) -> list[torch.device]:
        devices = [self.device]
        if self.device.type != "cpu" and not self.args.no_cpu:
            devices.append(torch.device("cpu"))
        return devices


# -- throughput --------------------------------------------------------------------------------------
def _throughput_row(bench: _Bench, device: torch.device, method: str, window: int, d: int, k: int) -> dict:
    from gpumine.stream import SlidingWindowLOF, StreamingLOF

    n_windows_max = 40 if not bench.args.quick else 3
    warm = 3 if not bench.args.quick else 1
    X = torch.as_tensor(drifting_gaussian(window * (warm + n_windows_max), d, seed=d)).to(device)
    if method == "StreamingLOF":
        det = StreamingLOF(k, window, max_bins=bench.args.max_bins, device=device, threshold="quantile:0.99")
    else:
        det = SlidingWindowLOF(k, window, history_size=bench.args.max_bins, device=device, threshold="quantile:0.99")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(warm):
            det.process(X[i * window : (i + 1) * window])
        synchronize(device)
        t0 = time.perf_counter()
        done = 0
        for i in range(warm, warm + n_windows_max):
            det.process(X[i * window : (i + 1) * window])
            done += 1
            if time.perf_counter() - t0 > bench.args.row_seconds:
                break
        synchronize(device)
        seconds = time.perf_counter() - t0
    points = done * window
    return dict(experiment="throughput", method=method, device=str(device), window=window, d=d, k=k,
                max_bins=bench.args.max_bins, windows_timed=done, points=points, seconds=seconds,
                points_per_s=points / seconds, bins=getattr(det, "n_bins_", None))


def experiment_throughput(bench: _Bench) -> None:
    quick = bench.args.quick
    k = 10 if quick else 20
    windows = [128, 256] if quick else [1024, 2048, 4096, 8192]
    dims = [2, 4] if quick else [2, 10, 32]
    base_window = windows[-1] if quick else 4096
    base_d = 4 if quick else 10
    configs = [("StreamingLOF", w, base_d) for w in windows]
    configs += [("StreamingLOF", base_window, d) for d in dims if d != base_d]
    configs += [("SlidingWindowLOF", base_window, base_d)]
    for device in bench.devices():
        for method, window, d in configs:
            try:
                row = bench.add(**_throughput_row(bench, device, method, window, d, k))
                bench.log(f"throughput {method} {device} window={window} d={d}: {row['points_per_s']:,.0f} points/s")
            except Exception as exc:  # noqa: BLE001 - a failed row is recorded, the run goes on
                bench.failures += 1
                bench.add(experiment="throughput", method=method, device=str(device), window=window, d=d, k=k,
                          points_per_s=None, note=f"failed: {type(exc).__name__}: {exc}")
                bench.log(f"throughput {method} {device} window={window} d={d} FAILED: {exc}")


# -- CLI from a CSV pipe -----------------------------------------------------------------------------
def _cli_run(text: bytes, device: torch.device, window: int, k: int) -> float:
    import gpumine

    # the child imports the gpumine this run uses (installed, or src/ of the checkout)
    src = Path(gpumine.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(src) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "gpumine.stream", "-", "--window", str(window), "-k", str(k),
           "--device", str(device), "--quiet"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)

    def feed():
        try:
            view = memoryview(text)
            for start in range(0, len(view), 1 << 20):
                proc.stdin.write(view[start : start + (1 << 20)])
            proc.stdin.close()
        except BrokenPipeError:
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    err = proc.stderr.read()
    rc = proc.wait()
    writer.join()
    seconds = time.perf_counter() - t0
    if rc != 0:
        raise RuntimeError(f"gpumine stream exited {rc}: {err.decode(errors='replace').strip()[-500:]}")
    return seconds


def experiment_cli(bench: _Bench) -> None:
    n = bench.args.cli_n if bench.args.cli_n else (2000 if bench.args.quick else 1_000_000)
    d, window, k = (4, 256, 10) if bench.args.quick else (10, 4096, 20)
    X = drifting_gaussian(n, d, seed=7)
    bench.log(f"cli: formatting {format_count(n)} CSV records")
    body = "\n".join(",".join(f"{v:.6g}" for v in row) for row in X.tolist()).encode() + b"\n"
    for device in bench.devices():
        n_dev = n if device.type != "cpu" or bench.args.quick else min(n, bench.args.cli_cpu_n)
        text = body if n_dev == n else b"\n".join(body.split(b"\n", n_dev)[:n_dev]) + b"\n"
        try:
            startup = _cli_run(b"\n".join(body.split(b"\n", 10)[:10]) + b"\n", device, window, k)
            seconds = _cli_run(text, device, window, k)
            net = max(seconds - startup, 1e-9)
            row = bench.add(experiment="cli", method="gpumine stream (CSV pipe)", device=str(device), window=window, d=d,
                            k=k, points=n_dev, seconds=seconds, startup_seconds=startup, points_per_s=n_dev / seconds,
                            points_per_s_after_startup=n_dev / net, bytes=len(text))
            bench.log(f"cli {device}: {row['points_per_s']:,.0f} records/s ({row['points_per_s_after_startup']:,.0f} after start-up)")
        except Exception as exc:  # noqa: BLE001
            bench.failures += 1
            bench.add(experiment="cli", method="gpumine stream (CSV pipe)", device=str(device), points=n,
                      points_per_s=None, note=f"failed: {exc}")
            bench.log(f"cli {device} FAILED: {exc}")


# -- quality -------------------------------------------------------------------------------------------
def _load_stream(name: str, data_dir, n_max: int | None):
    from gpumine.datasets import load_adbench, make_gaussian_blobs  # noqa: F401
    from gpumine.stream import make_drifting_stream

    if name == "drift":
        n = n_max or 100_000
        X, y = make_drifting_stream(n, seed=0)
        return X, y, "synthetic drifting 2-D stream (gpumine.stream.make_drifting_stream, seed 0)"
    folder = None
    if data_dir is not None:
        folder = Path(data_dir)
        if (folder / "adbench").is_dir():
            folder = folder / "adbench"
    X, y = load_adbench(name, path=folder)
    note = f"ADBench {name} in file order"
    if n_max is not None and n_max < len(X):
        X, y = X[:n_max], y[:n_max]
        note += f", first {format_count(n_max)} rows"
    return np.ascontiguousarray(X, dtype=np.float32), y, note


def _scores_stream(det, X: np.ndarray, window: int, device) -> np.ndarray:
    Xt = torch.as_tensor(X).to(device)
    out = [det.process(Xt[i : i + window])[0] for i in range(0, len(X), window)]
    return torch.cat(out).double().cpu().numpy()


def _river_scores(model, X: np.ndarray) -> np.ndarray:
    scores = np.empty(len(X))
    keys = [f"x{j}" for j in range(X.shape[1])]
    for i, row in enumerate(X.tolist()):
        x = dict(zip(keys, row))
        scores[i] = model.score_one(x)
        model.learn_one(x)
    return scores


QUALITY_METHODS = ("streaming", "sliding", "tumbling", "batch", "river")


def experiment_quality(bench: _Bench) -> None:
    """Streaming rows for every stream first, then batch LOF on each whole stream, then River."""
    from sklearn.metrics import average_precision_score, roc_auc_score

    from gpumine.outliers._lof_estimator import LocalOutlierFactor
    from gpumine.stream import SlidingWindowLOF, StreamingLOF

    quick = bench.args.quick
    window = bench.args.window or (256 if quick else 2048)
    k = 10 if quick else 20
    m = bench.args.max_bins
    wanted = bench.args.quality_methods
    limits = {"drift": 3_000 if quick else 100_000, "16_http": 3_000 if quick else None,
              "34_smtp": 3_000 if quick else None, "32_shuttle": 3_000 if quick else None}
    streams = {}
    for name in ("drift",) + ADBENCH_STREAMS:
        try:
            streams[name] = _load_stream(name, bench.args.data_dir, limits[name])
        except (FileNotFoundError, ValueError) as exc:
            bench.add(experiment="quality", dataset=name, method=None, auc=None, note=f"skipped: {exc}")
            bench.log(f"quality {name}: skipped ({exc})")
    methods = [
        ("streaming", f"StreamingLOF (window {window}, max_bins {m})", lambda: StreamingLOF(k, window, max_bins=m, device=bench.device)),
        ("sliding", f"SlidingWindowLOF (window {window}, history {m})", lambda: SlidingWindowLOF(k, window, history_size=m, device=bench.device)),
        ("tumbling", f"SlidingWindowLOF (window {window}, no history)", lambda: SlidingWindowLOF(k, window, history_size=0, device=bench.device)),
    ]
    for name, (X, y, note) in streams.items():
        n_dup = len(X) - len(np.unique(X, axis=0))
        for key, method, make in methods:
            if key not in wanted:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                det = make()
                synchronize(bench.device)
                t0 = time.perf_counter()
                s = _scores_stream(det, X, window, bench.device)
                seconds = time.perf_counter() - t0
            _quality_row(bench, name, method, y, s, seconds, note, n_dup, roc_auc_score, average_precision_score,
                         duplicate_points=det.n_duplicate_points_)
    if "batch" in wanted:
        for name, (X, y, note) in streams.items():
            n_dup = len(X) - len(np.unique(X, axis=0))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                synchronize(bench.device)
                t0 = time.perf_counter()
                model = LocalOutlierFactor(k, device=bench.device, verbose=0).fit(X)
                s = np.asarray(model.outlier_scores_, dtype=np.float64)
                synchronize(bench.device)
                seconds = time.perf_counter() - t0
            _quality_row(bench, name, "batch LOF, whole data (gpumine LocalOutlierFactor)", y, s, seconds, note, n_dup,
                         roc_auc_score, average_precision_score, duplicate_points=model.n_duplicate_points_)
    if "river" not in wanted:
        return
    if importlib.util.find_spec("river") is None:
        bench.meta["river"] = "not installed: River rows skipped"
        bench.log("quality: River is not installed; its rows are skipped")
        return
    from river import anomaly

    for name, (X, y, note) in streams.items():
        n_r = min(len(X), (bench.args.river_n or len(X)) if not quick else 300)
        river_models = [("River HalfSpaceTrees", lambda: anomaly.HalfSpaceTrees(seed=0), n_r),
                        ("River LocalOutlierFactor (incremental)", lambda: anomaly.LocalOutlierFactor(n_neighbors=k),
                         min(n_r, bench.args.river_lof_n))]
        for method, make, n_use in river_models:
            Xr = X[:n_use]
            # HalfSpaceTrees expects features in [0, 1]: min-max scaling on the prefix (the box for drift)
            if name != "drift":
                lo, hi = Xr.min(0), Xr.max(0)
                Xr = (Xr - lo) / np.where(hi > lo, hi - lo, 1)
            else:
                Xr = (Xr + 10) / 20
            t0 = time.perf_counter()
            try:
                s = _river_scores(make(), Xr)
            except Exception as exc:  # noqa: BLE001
                bench.add(experiment="quality", dataset=name, method=method, auc=None, note=f"failed: {exc}")
                continue
            seconds = time.perf_counter() - t0
            extra = f"; River on the first {format_count(n_use)} points only (min-max scaled)" if n_use < len(X) else "; min-max scaled"
            _quality_row(bench, name, method, y[:n_use], s, seconds, note + extra, None, roc_auc_score, average_precision_score)


def _quality_row(bench, name, method, y, s, seconds, note, n_dup, roc_auc_score, average_precision_score, **extra):
    finite = np.isfinite(s)
    s = np.where(finite, s, np.nanmax(np.where(finite, s, -np.inf)) * 10 if finite.any() else 0.0)
    auc = float(roc_auc_score(y, s)) if 0 < y.sum() < len(y) else None
    ap = float(average_precision_score(y, s)) if 0 < y.sum() < len(y) else None
    row = bench.add(experiment="quality", dataset=name, method=method, device=str(bench.device), n=len(y),
                    outliers=int(y.sum()), auc=auc, average_precision=ap, seconds=seconds,
                    points_per_s=len(y) / seconds if seconds > 0 else None, duplicate_rows=n_dup, note=note, **extra)
    bench.log(f"quality {name} {method}: ROC-AUC {auc if auc is None else f'{auc:.4f}'} AP {ap if ap is None else f'{ap:.4f}'} ({format_seconds(seconds)})")
    return row


# -- batch LOF vs scikit-learn -----------------------------------------------------------------------
def experiment_batch(bench: _Bench) -> None:
    from sklearn.neighbors import LocalOutlierFactor as SkLOF

    from gpumine.outliers._lof_estimator import LocalOutlierFactor

    quick = bench.args.quick
    n = bench.args.batch_n or (5_000 if quick else 1_000_000)
    n_sk = bench.args.sklearn_n or (1_000 if quick else 50_000)
    d, k = 10, 20
    X = np.random.default_rng(0).standard_normal((n, d)).astype(np.float32)
    dev = bench.device
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        LocalOutlierFactor(k, device=dev, verbose=0).fit(X[: min(n, 20_000)])  # warm-up
        synchronize(dev)
        t0 = time.perf_counter()
        LocalOutlierFactor(k, device=dev, verbose=0).fit(X)
        synchronize(dev)
        seconds = time.perf_counter() - t0
    bench.add(experiment="batch", method="gpumine LocalOutlierFactor (host NumPy in/out)", device=str(dev), n=n, d=d, k=k,
              seconds=seconds, note="")
    bench.log(f"batch gpumine {dev} n={format_count(n)}: {format_seconds(seconds)}")
    sub = X[:n_sk]
    t0 = time.perf_counter()
    ref = SkLOF(n_neighbors=k, n_jobs=-1).fit(sub).negative_outlier_factor_
    sk_seconds = time.perf_counter() - t0
    synchronize(dev)
    t0 = time.perf_counter()
    ours = LocalOutlierFactor(k, device=dev, verbose=0).fit(sub).negative_outlier_factor_
    synchronize(dev)
    our_seconds = time.perf_counter() - t0
    max_rel = float(np.max(np.abs(ours / ref - 1)))
    bench.add(experiment="batch", method="scikit-learn LocalOutlierFactor(n_jobs=-1)", device="cpu", n=n_sk, d=d, k=k,
              seconds=sk_seconds, note=f"{os.cpu_count()} CPU cores")
    bench.add(experiment="batch", method="gpumine LocalOutlierFactor (host NumPy in/out)", device=str(dev), n=n_sk, d=d, k=k,
              seconds=our_seconds, speedup_vs_sklearn=sk_seconds / our_seconds, max_rel_diff_vs_sklearn=max_rel, note="")
    estimate = sk_seconds * (n / n_sk) ** 2
    bench.add(experiment="batch", method="scikit-learn LocalOutlierFactor(n_jobs=-1)", device="cpu", n=n, d=d, k=k,
              seconds=None, estimated_seconds=estimate, speedup_vs_sklearn_estimate=estimate / seconds,
              note=f"not run: quadratic extrapolation from n={format_count(n_sk)}")
    bench.log(f"batch sklearn n={format_count(n_sk)}: {format_seconds(sk_seconds)}; gpumine same n: {format_seconds(our_seconds)}; "
              f"max rel diff {max_rel:.2e}; sklearn at n={format_count(n)} estimated {format_seconds(estimate)}")


EXPERIMENT_FUNCTIONS = {"throughput": experiment_throughput, "cli": experiment_cli, "quality": experiment_quality,
                        "batch": experiment_batch}


# -- markdown -----------------------------------------------------------------------------------------
def _fmt(value, spec="{:,.0f}") -> str:
    if value is None:
        return "—"
    return spec.format(value)


def render_markdown(results: dict) -> str:
    """Tables of a results JSON (as written by ``--out``).

    Examples
    --------
    >>> print(render_markdown({"meta": {"device_name": "CPU", "device": "cpu"}, "rows": []}).splitlines()[0])
    ## Streaming LOF benchmark (LOF_GPU experiments) — CPU (cpu)
    """
    meta, rows = results["meta"], results["rows"]
    lines = [f"## Streaming LOF benchmark (LOF_GPU experiments) — {meta.get('device_name')} ({meta.get('device')})", ""]
    if meta.get("date"):
        lines += [f"Run {meta['date']}; torch {meta.get('versions', {}).get('torch')}, "
                  f"scikit-learn {meta.get('versions', {}).get('scikit-learn')}, river {meta.get('versions', {}).get('river')}; "
                  f"{meta.get('cpu_count')} CPU cores{'; --quick sizes' if meta.get('quick') else ''}.", ""]
    tp = [r for r in rows if r["experiment"] == "throughput"]
    if tp:
        lines += ["### Throughput (in-memory windows already on the device)", "",
                  "| method | device | window | d | k | max_bins / history | points/s | windows timed |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for r in tp:
            lines.append(f"| {r['method']} | {r['device']} | {r['window']} | {r['d']} | {r['k']} | {r.get('max_bins', '—')} | "
                         f"{_fmt(r.get('points_per_s'))} | {r.get('windows_timed', '—')} |")
        lines.append("")
    cli = [r for r in rows if r["experiment"] == "cli"]
    if cli:
        lines += ["### `gpumine stream` from a CSV pipe", "",
                  "| device | records | window | d | k | wall | records/s | records/s after start-up |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in cli:
            lines.append(f"| {r['device']} | {format_count(r['points'])} | {r.get('window', '—')} | {r.get('d', '—')} | {r.get('k', '—')} | "
                         f"{format_seconds(r.get('seconds'))} | {_fmt(r.get('points_per_s'))} | {_fmt(r.get('points_per_s_after_startup'))} |")
        lines.append("")
    q = [r for r in rows if r["experiment"] == "quality"]
    if q:
        lines += ["### Detection quality on labelled streams (as measured; higher is better)", "",
                  "| data | method | n | outliers | ROC-AUC | AP | time | note |", "|---|---|---:|---:|---:|---:|---:|---|"]
        for r in q:
            lines.append(f"| {r['dataset']} | {r.get('method') or '—'} | {_fmt(r.get('n'))} | {_fmt(r.get('outliers'))} | "
                         f"{_fmt(r.get('auc'), '{:.4f}')} | {_fmt(r.get('average_precision'), '{:.4f}')} | "
                         f"{format_seconds(r.get('seconds'))} | {r.get('note', '')} |")
        lines.append("")
    b = [r for r in rows if r["experiment"] == "batch"]
    if b:
        lines += ["### Batch LOF, d = 10, k = 20", "",
                  "| method | device | n | time | vs scikit-learn | max rel. diff vs scikit-learn | note |",
                  "|---|---|---:|---:|---:|---:|---|"]
        for r in b:
            t = format_seconds(r.get("seconds")) if r.get("seconds") is not None else f"~{format_seconds(r.get('estimated_seconds'))} (estimate)"
            ratio = r.get("speedup_vs_sklearn") or r.get("speedup_vs_sklearn_estimate")
            lines.append(f"| {r['method']} | {r['device']} | {format_count(r['n'])} | {t} | {_fmt(ratio, '{:.1f}×')} | "
                         f"{_fmt(r.get('max_rel_diff_vs_sklearn'), '{:.1e}')} | {r.get('note', '')} |")
        lines.append("")
    return "\n".join(lines)


# -- command line ------------------------------------------------------------------------------------
def _experiments(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in EXPERIMENTS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown experiment(s) {bad}; choose from {', '.join(EXPERIMENTS)}")
    return names


def _quality_methods(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in QUALITY_METHODS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown method(s) {bad}; choose from {', '.join(QUALITY_METHODS)}")
    return names


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Streaming LOF benchmark (LOF_GPU experiments): throughput, quality, batch LOF vs scikit-learn.")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--quick", action="store_true", help="tiny sizes (CI smoke run)")
    p.add_argument("--experiments", type=_experiments, default=list(EXPERIMENTS), help=f"comma-separated: {','.join(EXPERIMENTS)}")
    p.add_argument("--data-dir", type=Path, default=None, help="folder with 16_http.npz, 34_smtp.npz, 32_shuttle.npz (or their adbench/ folder); default: the shared data folder")
    p.add_argument("--out", type=Path, help="results JSON (written atomically after every row)")
    p.add_argument("--markdown", type=Path, help="markdown tables for BENCHMARKS.md")
    p.add_argument("--out-dir", type=Path, help="folder for stream.json and stream.md (sets --out/--markdown when not given)")
    p.add_argument("--no-cpu", action="store_true", help="on a GPU, skip the CPU rows of throughput and cli")
    p.add_argument("--row-seconds", type=float, default=None, help="time spent per throughput row (default 3; 0.5 with --quick)")
    p.add_argument("--max-bins", type=int, default=None, help="StreamingLOF max_bins = SlidingWindowLOF history_size (default 2048; 256 with --quick)")
    p.add_argument("--window", type=int, default=None, help="window for the quality experiment (default 2048)")
    p.add_argument("--cli-n", type=int, default=None, help="records piped through the CLI (default 1,000,000)")
    p.add_argument("--batch-n", type=int, default=None, help="batch LOF size (default 1,000,000)")
    p.add_argument("--sklearn-n", type=int, default=None, help="scikit-learn LOF size (default 50,000)")
    p.add_argument("--quality-methods", type=_quality_methods, default=list(QUALITY_METHODS),
                   help=f"comma-separated subset of {','.join(QUALITY_METHODS)} for the quality experiment")
    p.add_argument("--cli-cpu-n", type=int, default=100_000, help="records piped through the CLI on the CPU (default 100,000)")
    p.add_argument("--river-n", type=int, default=0, help="points given to River HalfSpaceTrees (default 0: the whole stream)")
    p.add_argument("--river-lof-n", type=int, default=3_000, help="points given to River's incremental LOF (slow)")
    return p


def main(argv=None, prog: str | None = None) -> int:
    """Run the benchmark; returns 0, 1 when a gpumine row failed, 2 on bad usage."""
    args = build_parser(prog).parse_args(argv)
    from gpumine.config import resolve_device

    if args.row_seconds is None:
        args.row_seconds = 0.5 if args.quick else 3.0
    if args.max_bins is None:
        args.max_bins = 256 if args.quick else 2048

    try:
        device = resolve_device(args.device)
    except (ValueError, TypeError) as exc:
        print(f"error: --device: {exc}", file=sys.stderr)
        return 2
    if args.data_dir is not None and not args.data_dir.is_dir():
        print(f"error: --data-dir {args.data_dir} is not a folder", file=sys.stderr)
        return 2
    out_json, out_md = args.out, args.markdown
    if args.out_dir is not None:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        out_json = out_json or args.out_dir / "stream.json"
        out_md = out_md or args.out_dir / "stream.md"
    for path in (out_json, out_md):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
    bench = _Bench(args, device, out_json, out_md)
    bench.log(f"streaming LOF benchmark on {bench.meta['device_name']} ({device}); experiments: {', '.join(args.experiments)}")
    try:
        for name in args.experiments:
            EXPERIMENT_FUNCTIONS[name](bench)
    except KeyboardInterrupt:
        bench.log("interrupted: writing the rows measured so far")
        bench.save()
        return 130
    bench.save()
    print()
    print(render_markdown(bench.results()))
    bench.log(f"total {time.perf_counter() - bench.start:.1f} s")
    return 1 if bench.failures else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(prog="python -m benchmarks.stream" if __package__ else "benchmarks/stream.py"))
