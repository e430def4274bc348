"""Dask scale-out on one machine (issue 22): gpumine.distributed with 1 and 2 workers against one process.

Cases (``--cases``, comma-separated, run in the order given; default ``knn,query,nb,outliers``):

``knn``
    all-kNN of ``--rows`` x ``--dims`` float32 uniform points in [0, 1) (default 4,000,000 x 8),
    ``--k`` = 10 neighbours, each point excluded from its own list.
``query``
    ``--queries`` (default 12,000) uniform queries against the same ``--rows`` references.
``outliers``
    ``top_n_outliers(method="solving_set")``, ``--outlier-n`` = 10 outliers, ``--k`` neighbours, on
    ``--outlier-rows`` x ``--dims`` float32 points (default 4,000,000; ``--outlier-data``: standard
    ``gaussian`` (default) or ``uniform``; SolvingSet prunes little on uniform data: at 100,000 x 8
    uniform points one process computes ~22 % of all distances against ~4 % for Gaussian ones).
``nb``
    ``CategoricalNB.fit`` on ``--nb-rows`` (default 20,000,000) rows of ``--nb-features`` = 4 integer
    codes (uint8, ``--nb-categories`` = 16 levels) with ``--nb-classes`` = 4 labels (int8), the
    codes drawn around a class-dependent centre; predictions compared on 1,000,000 fresh rows.

Variants of every case, in this order (later ones are the first to fall to ``--time-budget``):

* ``one_process``: the single-process API in this (the client) process: ``gpumine.neighbors.kneighbors``,
  ``gpumine.outliers.top_n_outliers``, ``gpumine.counting.CategoricalNB`` with ``device=`` the
  run's device;
* ``dask_<W>_workers_shard`` / ``dask_<W>_workers_replicate`` (kNN cases) or ``dask_<W>_workers``:
  ``gpumine.distributed`` on a ``local_cluster(n_workers=W)`` (``--workers``, default 2: one worker
  per GPU; on ``--device cpu`` single-threaded CPU worker processes);
* ``dask_1_worker[_<mode>]``: the same on a one-worker cluster (kNN cases: ``--one-worker-mode``,
  default ``auto``, which replicates references of up to 1 GiB: 4M x 8 float32 is 128 MiB).

Inputs are NumPy arrays made on the host with fixed seeds; results come back as NumPy arrays on
the host. A timing is the wall clock from the call to its NumPy result (with the GPU of this
process synchronised around it), as a user would time it: it includes the client's validation,
the shipping of the inputs to the workers (``client.scatter``), the tasks, the transfers between
workers and the gathering and merging of the results on the client. Each variant runs once on the
first ``--warmup-rows`` rows (compiles the kernels in that process or on those workers), then is
timed ``--repeats`` times at most (best reported; no repeat is started once ``--repeat-seconds`` of
timed runs are spent or the ``--time-budget`` is over).

Each variant row holds ``seconds`` (best), ``seconds_all``, ``repeats``; the ``one_process`` row is
the ``reference``; the others hold ``identical`` (the result equals one process's bit for bit:
``np.array_equal`` of indices and distances; of outlier indices and weights and the threshold; of
every fitted count and log probability and of the predictions and probabilities),
``speedup_vs_one_process``, ``speedup_vs_dask_1_worker`` (against the one-worker row of the same
mode when it ran in that mode, else the one-worker row) and, for Dask rows, ``phases`` from Dask's
task stream of the best run (read from the scheduler, cheap):

* ``tasks``: per task function (Dask's key prefix: kNN ``search_shard``, ``merge``, ``search_block``;
  SolvingSet ``compare``, ``report``, ``propose``, ...; NB ``partition_counts``, ``sum_counts``): count,
  the sum and the largest of their compute seconds and the bytes of their outputs;
* ``transfers`` / ``transfer_seconds``: worker-to-worker copies of task results (shard-mode merges);
* ``before_first_task_s``: from the call to the first task's start: validation on the client and
  ``client.scatter`` of the inputs (references, query batches, data shards) to the workers;
* ``after_last_task_s``: from the last task's end to the result: the (n x k) lists still travelling to
  the client (kNN: the client fills its output block by block as blocks finish, so this is about the
  last block's transfer; the earlier ones overlap the tasks), the model build (NB), the last
  supervisor step (SolvingSet);
* ``gaps_s``: time inside the span of the tasks when no task ran on any worker (client-side work
  between rounds, scatters of candidates, scheduling latency).

The workers' times are put back on this host's clock (Dask shifts them by each worker's estimate of
its offset to the scheduler, refreshed at every heartbeat); expect errors of a few milliseconds,
tens on a busy host (``after_last_task_s`` can then come out slightly negative).

Not measured: the bytes of ``client.scatter`` (they are known: shard mode sends each reference row
once and the queries to every worker; replicate mode the references to every worker and each query
once, an all-kNN's queries not at all (they are the references); NB and SolvingSet each row once),
network-level traffic, and the memory peaks of the workers. Case rows also carry ``input_bytes``,
``result_bytes`` (the NumPy result the client returns: float32 distances, int64 indices) and
``wire_result_bytes`` (what the workers send for it: indices as int32 while the reference count is
below ``gpumine.distributed._knn.INT32_WIRE_LIMIT``).

Cluster layout. Both clusters (``--workers`` workers, and one worker) are started first, before
anything creates a CUDA context in this process: gpumine's ``local_cluster`` requires it (its note:
a CUDA context in the client would pin every worker to GPU 0), and ``environment()`` of the run
record and the one-process baselines create one. So both clusters live for the whole run (the
one-worker cluster's worker shares GPU 0 with worker 0 of the other cluster and with this process;
all idle but one at any time, and every process empties its CUDA cache between variants).
``meta.workers`` lists each worker's ``CUDA_VISIBLE_DEVICES``, GPU name and UUID, threads and memory
limit, and ``meta.distinct_gpus`` whether the big cluster's workers see different GPUs.

Dask's worker memory management (spill at 60 %, pause at 80 %, kill at 95 % of a worker's memory
limit) is switched off by default (``--dask-memory-limits off``): without dask-cuda,
``local_cluster`` gives each single-threaded GPU worker Dask's ``memory_limit="auto"`` = host RAM x
1 / (CPU cores), 8 GiB on a 32-core 256 GiB host (pause at 6.4, kill at 7.6 GiB), while shard mode's
float64 merge keys of a 4M-row all-kNN gather the 4M x 11 neighbour rows in float64 (2.8 GB) and
their differences on a worker's host. ``--dask-memory-limits dask`` keeps Dask's defaults. Dask also
starts workers with ``OMP_NUM_THREADS=1`` (the workers' host-side NumPy/torch work is
single-threaded; the one-process baseline uses every core); ``--worker-threads N`` sets N instead
(recorded in ``meta.workers``).

Output: one JSON line per case on stdout as the case finishes (flushed, so a run killed by a time
limit keeps the finished cases), progress on stderr, and with ``--out`` the whole record
``{"meta", "cases"}`` rewritten atomically after every case.

Run ``python -m benchmarks.distributed --help`` from the repository root. A CPU trial with tiny sizes::

    python -m benchmarks.distributed --device cpu --rows 20000 --queries 500 --outlier-rows 20000 \\
        --nb-rows 200000 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

if not __package__:  # run as a script: the repository root on the path, not benchmarks/ (it would shadow `distributed`)
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks._common import _finite, _json_default, environment, positive, synchronize, write_json  # noqa: E402

__all__ = ["main", "build_parser", "CASES"]

CASES = ("knn", "query", "outliers", "nb")
DEFAULT_CASES = "knn,query,nb,outliers"  # the case of least certain cost last
MODES = ("shard", "replicate")


# -- helpers run on the workers (and here) ---------------------------------------------------------
def _release_memory() -> None:
    """Collect garbage and give the CUDA cache back (between variants: processes share GPU 0)."""
    import gc

    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _worker_info(dask_worker) -> dict:
    """What a worker sees: its GPU (creates its CUDA context), threads, environment and memory thresholds."""
    mm = dask_worker.memory_manager
    info = {"pid": os.getpid(), "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "torch_threads": torch.get_num_threads(),
            "memory_fractions_target_spill_pause": [mm.memory_target_fraction, mm.memory_spill_fraction,
                                                    mm.memory_pause_fraction]}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_uuid=str(getattr(props, "uuid", "")), gpus_visible=torch.cuda.device_count())
    return info


# -- the run -----------------------------------------------------------------------------------------
class _Run:
    def __init__(self, args, device: str):
        self.args = args
        self.device = device
        self.start = time.perf_counter()
        self.cases: list[dict] = []
        self.meta: dict = {}

    def log(self, message: str) -> None:
        print(f"[{self.elapsed():7.1f} s] {message}", file=sys.stderr, flush=True)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def over_budget(self) -> bool:
        return self.args.time_budget is not None and self.elapsed() > self.args.time_budget

    def budget_note(self) -> str:
        return f"skipped: time budget ({self.args.time_budget:g} s) spent after {self.elapsed():.0f} s"

    def finish_case(self, row: dict) -> None:
        self.cases.append(row)
        print(json.dumps(_finite(row), allow_nan=False, default=_json_default), flush=True)
        self.save()

    def save(self) -> None:
        if self.args.out is not None:
            write_json(self.args.out, {"meta": self.meta, "cases": self.cases})


def _scheduler_delay(dask_worker) -> float:
    """The offset a worker adds to its task-stream times (its estimate of the scheduler's clock minus its own)."""
    return float(dask_worker.scheduler_delay)


def _phases(records, wall0: float, wall1: float, delays: dict) -> dict | None:
    """Task-stream records of one call, summed per task function (see the module docstring).

    Workers stamp their times with ``time() + scheduler_delay``; the delay is taken off again here, so
    that every time is this host's clock, as ``wall0`` and ``wall1`` (one machine, one clock).
    """
    from distributed.utils import key_split

    if not records:
        return None
    tasks: dict[str, dict] = {}
    intervals = []
    transfers, transfer_seconds = 0, 0.0
    for rec in records:
        name = key_split(rec["key"])
        entry = tasks.setdefault(name, {"count": 0, "seconds_sum": 0.0, "seconds_max": 0.0, "output_bytes": 0})
        entry["count"] += 1
        entry["output_bytes"] += int(rec.get("nbytes") or 0)
        shift = delays.get(rec.get("worker"), 0.0)
        for ss in rec.get("startstops", ()):
            seconds = ss["stop"] - ss["start"]
            intervals.append((ss["start"] - shift, ss["stop"] - shift))
            if ss["action"] == "compute":
                entry["seconds_sum"] += seconds
                entry["seconds_max"] = max(entry["seconds_max"], seconds)
            elif ss["action"] == "transfer":
                transfers += 1
                transfer_seconds += seconds
    if not intervals:
        return {"tasks": tasks}
    intervals.sort()
    first, last = intervals[0][0], max(stop for _, stop in intervals)
    busy, cur_start, cur_stop = 0.0, intervals[0][0], intervals[0][1]
    for start, stop in intervals[1:]:
        if start > cur_stop:
            busy += cur_stop - cur_start
            cur_start, cur_stop = start, stop
        else:
            cur_stop = max(cur_stop, stop)
    busy += cur_stop - cur_start
    return {"tasks": tasks, "transfers": transfers, "transfer_seconds": transfer_seconds,
            "before_first_task_s": first - wall0, "after_last_task_s": wall1 - last, "tasks_span_s": last - first,
            "gaps_s": (last - first) - busy}


def _measure(run: _Run, call, warmup, client=None) -> tuple[dict, object]:
    """Warm-up, then best of the timed runs: (timing fields, result of the best run)."""
    from distributed import get_task_stream

    dev = torch.device(run.device)
    if warmup is not None:
        warmup()
        _release_everywhere(client)
    times, best, best_phases = [], None, None
    while len(times) < run.args.repeats:
        if times and (sum(times) >= run.args.repeat_seconds or run.over_budget()):
            break
        if client is None:
            synchronize(dev)
            t0 = time.perf_counter()
            out = call()
            synchronize(dev)
            seconds, phases = time.perf_counter() - t0, None
        else:
            with get_task_stream(client=client) as stream:
                wall0, t0 = time.time(), time.perf_counter()
                out = call()
                seconds, wall1 = time.perf_counter() - t0, time.time()
            phases = _phases(stream.data, wall0, wall1, client.run(_scheduler_delay))
        times.append(seconds)
        if seconds <= min(times):
            best, best_phases = out, phases
        del out
        _release_everywhere(client)
    fields = {"seconds": min(times), "seconds_all": times, "repeats": len(times)}
    if best_phases is not None:
        fields["phases"] = best_phases
    return fields, best


def _release_everywhere(client) -> None:
    _release_memory()
    if client is not None:
        client.run(_release_memory)


# -- cases -------------------------------------------------------------------------------------------
def _variants(run: _Run, modes: tuple[str, ...] | None):
    """(name, n_workers, mode) in run order: one process, the big cluster, then one worker."""
    out = [("one_process", 0, None)]
    W = run.args.workers
    for mode in (modes or (None,)):
        out.append((f"dask_{W}_workers" + (f"_{mode}" if mode else ""), W, mode))
    if modes:
        ones = MODES if run.args.one_worker_mode == "both" else (run.args.one_worker_mode,)
        out += [(f"dask_1_worker_{mode}", 1, mode) for mode in ones]
    else:
        out.append(("dask_1_worker", 1, None))
    return out


def _run_case(run: _Run, clients: dict, case: str, info: dict, modes, make_calls, compare) -> dict:
    """Every variant of a case: timings, equality with one process, speed-ups; returns the case row."""
    row = {"case": case, **info, "variants": []}
    baseline = None
    for name, n_workers, mode in _variants(run, modes):
        entry = {"variant": name, "workers": n_workers or None, "mode": mode}
        row["variants"].append(entry)
        if run.over_budget():
            entry["skipped"] = run.budget_note()
            continue
        if n_workers and clients.get(n_workers) is None:
            entry["skipped"] = run.meta["cluster_notes"].get(str(n_workers), "skipped: no cluster of this size")
            continue
        client = clients.get(n_workers) if n_workers else None
        call, warmup = make_calls(client, mode)
        try:
            fields, result = _measure(run, call, warmup, client)
        except Exception as exc:  # noqa: BLE001 - a failed variant is recorded, the run goes on
            entry["error"] = f"{type(exc).__name__}: {exc}"
            run.log(f"{case} {name}: FAILED {entry['error']}")
            _release_everywhere_safely(client)
            continue
        entry.update(fields)
        if name == "one_process":
            baseline = result
            entry["reference"] = True  # what the other rows are compared with
        elif baseline is not None:
            entry.update(compare(result, baseline))
        else:
            entry["identical"] = None  # no one-process result to compare with
        if name == "one_process":
            entry.update(result_summary(case, result))
        del result
        said = "reference" if entry.get("reference") else f"identical={entry.get('identical')}"
        run.log(f"{case} {name}: {entry['seconds']:.3f} s (best of {entry['repeats']}), {said}")
    _speedups(row["variants"])
    return row


def _release_everywhere_safely(client) -> None:
    try:
        _release_everywhere(client)
    except Exception:  # noqa: BLE001 - a broken cluster: the next variant reports it
        pass


def result_summary(case: str, result) -> dict:
    """A few facts of the one-process result (for the record)."""
    if case == "outliers":
        return {"outliers": result.indices.tolist(), "threshold": result.threshold, "iterations": result.iterations,
                "solving_set_size": int(len(result.solving_set)), "distance_fraction": result.distance_fraction}
    return {}


def _speedups(variants: list[dict]) -> None:
    timed = {v["variant"]: v for v in variants if v.get("seconds")}
    one = timed.get("one_process")
    ones = {v["mode"]: v for v in variants if v["workers"] == 1 and v.get("seconds")}
    for v in variants:
        if not v.get("seconds") or v["variant"] == "one_process":
            continue
        if one is not None:
            v["speedup_vs_one_process"] = one["seconds"] / v["seconds"]
        if v["workers"] != 1 and ones:
            ref = ones.get(v["mode"]) or next(iter(ones.values()))
            v["speedup_vs_dask_1_worker"] = ref["seconds"] / v["seconds"]
            v["dask_1_worker_reference"] = ref["variant"]


def _knn_equal(got, want) -> dict:
    dist, index = (np.asarray(a) for a in got)
    indices_equal = bool(np.array_equal(index, np.asarray(want[1])))
    distances_equal = bool(np.array_equal(dist, np.asarray(want[0])))
    out = {"identical": indices_equal and distances_equal, "indices_equal": indices_equal,
           "distances_equal": distances_equal}
    if not indices_equal and index.shape == np.asarray(want[1]).shape:
        out["index_rows_differing"] = int((index != np.asarray(want[1])).any(1).sum())
    return out


def case_knn(run: _Run, clients: dict, X: np.ndarray, Q: np.ndarray | None) -> dict:
    from gpumine import distributed as gd
    from gpumine.distributed._knn import INT32_WIRE_LIMIT, REPLICATE_MAX_BYTES
    from gpumine.neighbors import kneighbors

    k, dev, w = run.args.k, run.device, min(run.args.warmup_rows, len(X))
    case = "knn" if Q is None else "query"

    def make_calls(client, mode):
        if client is None:
            def call(R=X):
                return kneighbors(R, Q, k, device=dev)
        else:
            def call(R=X):
                return gd.kneighbors(R, Q, k, mode=mode, client=client, device=dev)
        return call, (lambda: call(X[:w])) if w > k + 1 else None

    info = {"n_ref": len(X), "n_query": len(X) if Q is None else len(Q), "d": X.shape[1], "k": k,
            "exclude_self": Q is None, "auto_mode_is": "replicate" if X.nbytes <= REPLICATE_MAX_BYTES else "shard",
            "input_bytes": X.nbytes + (0 if Q is None else Q.nbytes),
            "result_bytes": (len(X) if Q is None else len(Q)) * k * (4 + 8),
            "wire_result_bytes": (len(X) if Q is None else len(Q)) * k * (4 + (4 if len(X) < INT32_WIRE_LIMIT else 8))}
    return _run_case(run, clients, case, info, MODES, make_calls, _knn_equal)


def _outliers_equal(got, want) -> dict:
    idx = bool(np.array_equal(got.indices, want.indices))
    weights = bool(np.array_equal(got.weights, want.weights))
    threshold = bool(got.threshold == want.threshold)
    return {"identical": idx and weights and threshold, "indices_equal": idx, "weights_equal": weights,
            "threshold_equal": threshold, "iterations": got.iterations, "solving_set_size": int(len(got.solving_set)),
            "solving_set_equal": bool(np.array_equal(got.solving_set, want.solving_set))}


def case_outliers(run: _Run, clients: dict, X: np.ndarray) -> dict:
    from gpumine import distributed as gd
    from gpumine.outliers import top_n_outliers

    n_out, k, dev, w = run.args.outlier_n, run.args.k, run.device, min(run.args.warmup_rows, len(X))

    def make_calls(client, mode):
        if client is None:
            def call(D=X):
                return top_n_outliers(D, n_out, k, method="solving_set", device=dev)
        else:
            def call(D=X):
                return gd.top_n_outliers(D, n_out, k, method="solving_set", client=client, device=dev)
        return call, (lambda: call(X[:w])) if w > k + 1 else None

    info = {"n": len(X), "d": X.shape[1], "k": k, "n_outliers": n_out, "data": run.args.outlier_data,
            "input_bytes": X.nbytes}
    return _run_case(run, clients, "outliers", info, None, make_calls, _outliers_equal)


def _nb_equal(got, want, X_test) -> dict:
    g, o = getattr(got, "model_", got), want
    counts = bool(np.array_equal(g.class_count_, o.class_count_)) and len(g.category_count_) == len(o.category_count_) \
        and all(np.array_equal(a, b) for a, b in zip(g.category_count_, o.category_count_))
    logp = bool(np.array_equal(g.class_log_prior_, o.class_log_prior_)) and all(
        np.array_equal(a, b) for a, b in zip(g.feature_log_prob_, o.feature_log_prob_))
    pred = bool(np.array_equal(np.asarray(got.predict(X_test)), np.asarray(want.predict(X_test))))
    proba = bool(np.array_equal(np.asarray(got.predict_proba(X_test)), np.asarray(want.predict_proba(X_test))))
    return {"identical": counts and logp and pred and proba, "counts_equal": counts, "log_probabilities_equal": logp,
            "predictions_equal": pred, "probabilities_equal": proba}


def _nb_data(n: int, features: int, categories: int, classes: int, seed: int):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n, dtype=np.int8)
    spread = max(1, categories // 2)
    centre = (y.astype(np.int16) * (categories // classes))[:, None] + np.arange(features, dtype=np.int16)
    X = ((centre + rng.integers(0, spread, (n, features), dtype=np.int16)) % categories).astype(np.uint8)
    return X, y


def case_nb(run: _Run, clients: dict, X: np.ndarray, y: np.ndarray, X_test: np.ndarray) -> dict:
    from gpumine import distributed as gd
    from gpumine.counting import CategoricalNB

    dev, w = run.device, min(run.args.warmup_rows, len(X))

    def make_calls(client, mode):
        if client is None:
            def call(A=X, b=y):
                return CategoricalNB(device=dev).fit(A, b)
        else:
            def call(A=X, b=y):
                return gd.CategoricalNB(device=dev, client=client).fit(A, b)
        return call, (lambda: call(X[:w], y[:w])) if w > 0 else None

    info = {"n": len(X), "features": X.shape[1], "categories": run.args.nb_categories, "classes": run.args.nb_classes,
            "test_rows": len(X_test), "input_bytes": X.nbytes + y.nbytes}
    return _run_case(run, clients, "nb", info, None, make_calls, lambda got, want: _nb_equal(got, want, X_test))


# -- clusters ----------------------------------------------------------------------------------------
def _start_clusters(run: _Run, use_gpus: bool, n_gpus: int, made: dict) -> dict:
    """Fill ``made`` with ``{n_workers: (cluster, client) or None}`` (the big cluster, the one-worker one); notes."""
    import distributed

    from gpumine.distributed import local_cluster

    notes = {}
    for n_workers in dict.fromkeys((run.args.workers, 1)):
        if use_gpus and n_workers > n_gpus:
            notes[str(n_workers)] = f"skipped: {n_workers} workers need {n_workers} GPUs; {n_gpus} visible"
            made[n_workers] = None
            continue
        t0 = time.perf_counter()
        cluster = local_cluster(n_workers=n_workers, gpus=use_gpus, dashboard_address=":0")
        client = distributed.Client(cluster, set_as_default=False)
        made[n_workers] = (cluster, client)
        client.wait_for_workers(n_workers, timeout=300)
        notes[f"{n_workers}_start_seconds"] = time.perf_counter() - t0
        run.log(f"cluster of {n_workers} worker(s) up ({type(cluster).__name__}, {time.perf_counter() - t0:.1f} s)")
    return notes


def _describe_clusters(run: _Run, made: dict) -> None:
    workers, distinct = {}, None
    for n_workers, pair in made.items():
        if pair is None:
            continue
        cluster, client = pair
        info = client.run(_worker_info)
        limits = {addr: w.get("memory_limit") for addr, w in client.scheduler_info()["workers"].items()}
        workers[str(n_workers)] = {"cluster": type(cluster).__name__,
                                   "workers": [{"address": a, "memory_limit": limits.get(a), **i} for a, i in info.items()]}
        if n_workers == run.args.workers and n_workers > 1:
            uuids = [i.get("gpu_uuid") for i in info.values()]
            distinct = None if not all(uuids) else len(set(uuids)) == len(uuids)
    run.meta["workers"] = workers
    run.meta["distinct_gpus"] = distinct
    if distinct is False:
        run.log("WARNING: the workers of the big cluster share a GPU (see meta.workers)")


def _close(made: dict) -> None:
    for pair in made.values():
        if pair is None:
            continue
        cluster, client = pair
        try:
            client.close()
        finally:
            cluster.close()


# -- command line ------------------------------------------------------------------------------------
def _cases(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in CASES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown case(s) {bad}; choose from {', '.join(CASES)}")
    return names


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0; got {text}")
    return value


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Dask scale-out of gpumine on one machine: one process vs "
                                "1 and 2 Dask workers (kNN, queries, SolvingSet outliers, CategoricalNB).")
    p.add_argument("--cases", type=_cases, default=_cases(DEFAULT_CASES),
                   help=f"comma-separated, in run order (default {DEFAULT_CASES})")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                   help="auto: cuda when a GPU is visible (counted without a CUDA context); cpu: CPU workers")
    p.add_argument("--workers", type=positive(int), default=2, help="workers of the big cluster (default 2: one per GPU)")
    p.add_argument("--rows", type=positive(int), default=4_000_000,
                   help="points of the all-kNN and the references (default 4,000,000)")
    p.add_argument("--dims", type=positive(int), default=8, help="features of the kNN and outlier data (default 8)")
    p.add_argument("--queries", type=positive(int), default=12_000, help="queries of the query case (default 12,000)")
    p.add_argument("--k", type=positive(int), default=10, help="neighbours (kNN, queries, outliers; default 10)")
    p.add_argument("--one-worker-mode", default="auto", choices=("auto", "shard", "replicate", "both"),
                   help="kNN mode(s) of the one-worker rows (default auto)")
    p.add_argument("--outlier-rows", type=positive(int), default=4_000_000, help="rows of the outlier case (default 4,000,000)")
    p.add_argument("--outlier-data", default="gaussian", choices=("gaussian", "uniform"))
    p.add_argument("--outlier-n", type=positive(int), default=10, help="outliers to find (default 10)")
    p.add_argument("--nb-rows", type=positive(int), default=20_000_000,
                   help="rows of the CategoricalNB case (default 20,000,000)")
    p.add_argument("--nb-features", type=positive(int), default=4)
    p.add_argument("--nb-categories", type=positive(int), default=16)
    p.add_argument("--nb-classes", type=positive(int), default=4)
    p.add_argument("--nb-test-rows", type=positive(int), default=1_000_000, help="rows predicted to compare the models")
    p.add_argument("--repeats", type=positive(int), default=3, help="timed runs per variant at most, best reported (default 3)")
    p.add_argument("--repeat-seconds", type=float, default=20.0,
                   help="no further repeat of a variant once its timed runs took this long (default 20)")
    p.add_argument("--warmup-rows", type=_non_negative_int, default=500_000,
                   help="rows of the warm-up run before the timed ones (default 500,000; 0: none; >= the rows: full size)")
    p.add_argument("--time-budget", type=float, default=None,
                   help="seconds from the start after which remaining variants and cases are skipped (recorded as skipped)")
    p.add_argument("--dask-memory-limits", default="off", choices=("off", "dask"),
                   help="off (default): no spilling, pausing or killing of workers by memory; dask: Dask's defaults")
    p.add_argument("--worker-threads", type=positive(int), default=None,
                   help="OMP/MKL/OpenBLAS threads of each worker (default: Dask's, 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="results JSON, rewritten atomically after every case")
    return p


def main(argv=None, prog: str | None = None) -> int:
    """Run the benchmark; 0 when every variant that ran succeeded and matched one process, 1 otherwise."""
    args = build_parser(prog).parse_args(argv)
    # quiet workers: their logging is configured when they import distributed (spawned processes inherit this)
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    import dask
    import distributed  # noqa: F401 - imported before any cluster so the logging setting holds

    from gpumine.distributed._cluster import _gpu_count

    n_gpus = _gpu_count()  # through NVML / CUDA_VISIBLE_DEVICES / torch's device count: no CUDA context
    device = args.device if args.device != "auto" else ("cuda" if n_gpus else "cpu")
    if device == "cuda" and n_gpus == 0:
        print("error: --device cuda but no GPU is visible", file=sys.stderr)
        return 2
    use_gpus = device == "cuda"
    run = _Run(args, device)
    config = {}
    if args.dask_memory_limits == "off":
        config.update({f"distributed.worker.memory.{key}": False for key in ("target", "spill", "pause", "terminate")})
    if args.worker_threads is not None:
        threads = str(args.worker_threads)
        config["distributed.nanny.pre-spawn-environ"] = {
            **dask.config.get("distributed.nanny.pre-spawn-environ", {}),
            "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads}
    client_threads = torch.get_num_threads()
    made = {}
    failures = 0
    try:
        # Order matters. local_cluster() must run before this process creates a CUDA context (its contract:
        # a context in the client would pin every worker to GPU 0). environment() (get_device_properties),
        # every one-process baseline on "cuda" and the client side of the Dask calls (CategoricalNB builds its
        # model on the client's device) create one, so both clusters are started here, first, and kept up for
        # the whole run, rather than started one after the other around the baselines, where the second
        # would come after a context. Nothing before this line touches CUDA: _gpu_count() counts GPUs through
        # CUDA_VISIBLE_DEVICES / NVML / torch's device count, and the data are NumPy arrays on the host.
        with dask.config.set(config):
            notes = _start_clusters(run, use_gpus, n_gpus, made)
        # Dask's Nanny puts OMP_NUM_THREADS=1 into this process's environment; torch was imported (and its
        # thread count fixed) before, so the one-process baselines keep every core: recorded below.
        clients = {n: (pair[1] if pair else None) for n, pair in made.items()}
        run.meta = environment(torch.device(device), packages=("gpumine", "torch", "triton", "numpy", "dask",
                                                               "distributed", "dask_cuda"))
        run.meta.update(args={key: (str(v) if isinstance(v, Path) else v) for key, v in vars(args).items()},
                        gpus_visible=n_gpus, client_torch_threads_before_after_clusters=[client_threads, torch.get_num_threads()],
                        dask_config=config, cluster_notes=notes)
        _describe_clusters(run, made)
        run.save()
        rng = np.random.default_rng(args.seed)
        X = Q = None
        for case in args.cases:
            if run.over_budget():
                run.finish_case({"case": case, "skipped": run.budget_note()})
                run.log(f"{case}: {run.budget_note()}")
                continue
            run.log(f"{case}: making the data")
            if case in ("knn", "query") and X is None:
                X = rng.random((args.rows, args.dims), dtype=np.float32)
            if case == "knn":
                row = case_knn(run, clients, X, None)
            elif case == "query":
                if Q is None:
                    Q = np.random.default_rng(args.seed + 1).random((args.queries, args.dims), dtype=np.float32)
                row = case_knn(run, clients, X, Q)
            elif case == "outliers":
                r = np.random.default_rng(args.seed + 2)
                shape = (args.outlier_rows, args.dims)
                D = (r.standard_normal(shape, dtype=np.float32) if args.outlier_data == "gaussian"
                     else r.random(shape, dtype=np.float32))
                row = case_outliers(run, clients, D)
                del D
            else:
                Xn, yn = _nb_data(args.nb_rows, args.nb_features, args.nb_categories, args.nb_classes, args.seed + 3)
                Xt, _ = _nb_data(args.nb_test_rows, args.nb_features, args.nb_categories, args.nb_classes, args.seed + 4)
                row = case_nb(run, clients, Xn, yn, Xt)
                del Xn, yn, Xt
            failures += sum(1 for v in row["variants"] if v.get("error") or v.get("identical") is False)
            run.finish_case(row)
    except KeyboardInterrupt:
        run.log("interrupted: writing the cases measured so far")
        run.save()
        return 130
    finally:
        _close(made)
    run.meta["total_seconds"] = run.elapsed()
    run.save()
    _summary(run)
    return 1 if failures else 0


def _summary(run: _Run) -> None:
    run.log(f"total {run.elapsed():.1f} s")
    for case in run.cases:
        for v in case.get("variants", []):
            seconds = v.get("seconds")
            text = (f"{seconds:9.3f} s" if seconds is not None else f"{'-':>11}")
            extra = "; ".join(f"{key} {v[key]:.2f}x" for key in ("speedup_vs_one_process", "speedup_vs_dask_1_worker")
                              if key in v)
            said = "reference" if v.get("reference") else f"identical={v.get('identical')}"
            status = v.get("skipped") or v.get("error") or said
            print(f"  {case['case']:8s} {v['variant']:28s} {text}  {status}  {extra}", file=sys.stderr, flush=True)
        if "skipped" in case:
            print(f"  {case['case']:8s} {case['skipped']}", file=sys.stderr, flush=True)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(prog="python -m benchmarks.distributed" if __package__ else "benchmarks/distributed.py"))
