"""Fixed costs of the host kNN path on small real sets: gpumine (device="cpu") against scikit-learn, CPU time.

For each ADBench set (``X`` as C-contiguous float32, the first ``--max-rows`` rows, as the
real-data sweep ``benchmarks/realdata.py`` loads it) times all-kNN with each point excluded
from its own list, as the sweep's CPU columns call it:

* gpumine: ``kneighbors(X, None, k, device="cpu", verbose=0)``;
* scikit-learn: ``NearestNeighbors(n_neighbors=k, n_jobs=--sklearn-jobs).fit(X).kneighbors()``
  (default algorithm; the sweep uses ``n_jobs=-1``).

``--baseline FILE`` also times an older copy of ``gpumine/neighbors/engine/_host.py`` (e.g.
``git show REV:src/gpumine/neighbors/engine/_host.py > old_host.py``), loaded beside the
current one and swapped in for its calls, and checks that both return the same distances and
indices bit for bit.

Timing: CPU time of the process (``time.process_time``: every thread's time, so work spread
over threads or spinning in a thread pool counts in full), the best of the rounds. A round
visits every set and calls baseline, gpumine and scikit-learn on it in turn, each after a
``--pause`` (idle OpenMP workers of the previous call spin for milliseconds and would count
against the next); rounds repeat, at least ``--min-rounds`` and at most ``--rounds``, until
``--seconds`` have passed. So each set's samples are spread over the whole run and a busy spell
of a shared host hits every column of a set alike. The thread settings are left as they are
(the sweep sets none; set ``OMP_NUM_THREADS`` before the run to change them). Output: a
Markdown table on stdout, ``--out`` a JSON list of records.

    git show HEAD~1:src/gpumine/neighbors/engine/_host.py > /tmp/old_host.py
    python benchmarks/cpu_small_sets.py --baseline /tmp/old_host.py --out cpu_small_sets.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

if not __package__:  # run as a script (python benchmarks/cpu_small_sets.py): the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchmarks  # noqa: E402,F401  (gpumine from src/ when it is not installed)

import torch  # noqa: E402
from sklearn.neighbors import NearestNeighbors  # noqa: E402

import gpumine.neighbors.engine._host as host  # noqa: E402
from gpumine.core.distance import get_metric  # noqa: E402
from gpumine.neighbors import kneighbors  # noqa: E402

SMALL = ("Ionosphere", "WBC", "WDBC", "Hepatitis", "Lymphography", "glass", "wine", "vertebral", "Stamps", "Pima",
         "breastw", "WPBC", "yeast", "vowels", "cardio", "SpamBase", "fault", "thyroid", "Waveform", "optdigits", "musk")
LARGER = ("shuttle", "mammography", "satellite")


def _default_data_dir() -> Path:
    root = Path(__file__).resolve().parents[1]
    for cand in (root / ".devdata" / "adbench", root.parent / "shared" / "data" / "adbench"):
        if cand.is_dir():
            return cand
    return root / ".devdata" / "adbench"


def _find(folder: Path, name: str) -> Path:
    for path in folder.glob("*.npz"):
        if path.stem == name or path.stem.split("_", 1)[-1].lower() == name.lower():
            return path
    raise SystemExit(f"no set {name!r} in {folder}")


def _load_baseline(path: str):
    """An older _host.py as a module of the same package (its relative imports resolve)."""
    spec = importlib.util.spec_from_file_location("gpumine.neighbors.engine._host_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cpu_time(fn, pause: float):
    time.sleep(pause)  # the previous call's idle worker threads stop spinning (their CPU time would count here)
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def _calls(X: np.ndarray, k: int, jobs: int, baseline) -> dict:
    """The timed calls on one set, in the order of a round."""
    current = host.cpu_search

    def ours():
        return kneighbors(X, None, k, device="cpu", verbose=0)

    def old():
        host.cpu_search = baseline.cpu_search  # the engine imports cpu_search from the module at each call
        try:
            return kneighbors(X, None, k, device="cpu", verbose=0)
        finally:
            host.cpu_search = current

    def sklearn():
        return NearestNeighbors(n_neighbors=k, n_jobs=jobs).fit(X).kneighbors()

    fns = {"gpumine": ours, "sklearn": sklearn}
    return {"baseline": old, **fns} if baseline is not None else fns


def _record(name: str, X: np.ndarray, k: int, best: dict, out: dict, rounds: int, baseline) -> dict:
    record = {"set": name, "rows": X.shape[0], "features": X.shape[1], "rounds": rounds}
    record.update({f"{fn}_cpu_ms": 1e3 * t for fn, t in best.items()})
    record["ratio"] = best["sklearn"] / best["gpumine"]  # > 1: gpumine faster
    T = torch.from_numpy(X)
    for key, module in (("path", host), ("baseline_path", baseline)):
        if module is not None:  # the path each takes (the working memory does not change it)
            found = {}
            module.cpu_search(T, T, k, get_metric("euclidean"), exclude_self=True, budget_bytes=1 << 30, stats=found)
            record[key] = found.get("selection")
    if baseline is not None:
        record["baseline_ratio"] = best["sklearn"] / best["baseline"]
        record["identical_to_baseline"] = bool(all(np.array_equal(a, b) for a, b in zip(out["gpumine"], out["baseline"])))
    return record


def render(records: list, baseline: bool) -> str:
    head = "| set | rows x features | path before -> after |" if baseline else "| set | rows x features | path |"
    head += (" before ms | after ms | scikit-learn ms | before ratio | after ratio | identical |" if baseline
             else " gpumine ms | scikit-learn ms | ratio |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for rec in records:
        shape = f"{rec['rows']:,} x {rec['features']}"
        if baseline:
            lines.append(f"| {rec['set']} | {shape} | {rec['baseline_path']} -> {rec['path']} | {rec['baseline_cpu_ms']:.2f} | "
                         f"{rec['gpumine_cpu_ms']:.2f} | {rec['sklearn_cpu_ms']:.2f} | {rec['baseline_ratio']:.2f} | "
                         f"{rec['ratio']:.2f} | {'yes' if rec['identical_to_baseline'] else 'NO'} |")
        else:
            lines.append(f"| {rec['set']} | {shape} | {rec['path']} | {rec['gpumine_cpu_ms']:.2f} | {rec['sklearn_cpu_ms']:.2f} | "
                         f"{rec['ratio']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=_default_data_dir(), help="folder of ADBench .npz files")
    parser.add_argument("--sets", nargs="+", default=list(SMALL + LARGER), help="set names (file stems or without the number)")
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--max-rows", type=int, default=20_000, help="the first rows of larger sets")
    parser.add_argument("--rounds", type=int, default=30, help="rounds over all sets at most; the best CPU time of each counts")
    parser.add_argument("--min-rounds", type=int, default=5, help="rounds at least")
    parser.add_argument("--seconds", type=float, default=600.0, help="no new round after this long")
    parser.add_argument("--sklearn-jobs", type=int, default=-1, help="n_jobs of NearestNeighbors (the sweep: -1)")
    parser.add_argument("--pause", type=float, default=0.1,
                        help="seconds of sleep before each timed call (idle OpenMP workers of the previous one stop spinning)")
    parser.add_argument("--baseline", help="an older gpumine/neighbors/engine/_host.py to time beside the current one")
    parser.add_argument("--out", help="JSON file of the records")
    args = parser.parse_args(argv)

    baseline = _load_baseline(args.baseline) if args.baseline else None
    warm = np.random.default_rng(1).random((64, 40)).astype(np.float32)  # imports and first-call set-up, for all
    for d in (3, 40):
        kneighbors(warm[:, :d], None, 3, device="cpu", verbose=0)
        NearestNeighbors(n_neighbors=3, n_jobs=args.sklearn_jobs).fit(warm[:, :d]).kneighbors()
    meta = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "k": args.k,
            "rounds": args.rounds, "min_rounds": args.min_rounds, "seconds": args.seconds, "sklearn_jobs": args.sklearn_jobs,
            "timer": "process_time", "pause_s": args.pause}
    sets = []
    for name in args.sets:
        path = _find(args.data_dir, name)
        with np.load(path) as data:
            X = np.ascontiguousarray(data["X"][: args.max_rows], dtype=np.float32)
        calls = _calls(X, args.k, args.sklearn_jobs, baseline)
        sets.append((path.stem, X, calls, dict.fromkeys(calls, float("inf")), {}))
    start, rounds = time.perf_counter(), 0
    while rounds < args.rounds and (rounds < args.min_rounds or time.perf_counter() - start < args.seconds):
        for _, _, calls, best, out in sets:
            for fn_name, fn in calls.items():
                elapsed, out[fn_name] = _cpu_time(fn, args.pause)
                best[fn_name] = min(best[fn_name], elapsed)
        rounds += 1
        print(f"round {rounds}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    records = [_record(name, X, args.k, best, out, rounds, baseline) for name, X, _, best, out in sets]
    meta["rounds_run"] = rounds
    print(f"<!-- {json.dumps(meta)} -->")
    print(render(records, baseline is not None))
    if args.out:
        Path(args.out).write_text(json.dumps({"meta": meta, "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
