"""Top-n distance-based outliers benchmark: Angiulli et al.'s GPU SolvingSet experiments, side by side with peers.

Reproduces the paper's setting (n = 10 outliers, k in {5, 10, 50}) on its data
sets and times in one run

* ``ss``      — gpumine SolvingSet on ``--device`` (the paper's GPU-SS);
* ``bf``      — gpumine brute force (all-kNN engine + top-n) on ``--device`` (GPU-BF);
* ``ss-cpu``  — the same SolvingSet code on the CPU (the paper's CPU-SS; stopped at ``--cpu-cap``);
* ``sklearn`` — scikit-learn ``NearestNeighbors(algorithm="kd_tree", n_jobs=-1)`` all-kNN and the
  sums (what PyOD's ``KNN`` runs), in float64: also the **reference** the top-n is checked against;
* ``pyod``    — PyOD ``KNN(method="mean", n_neighbors=k, n_jobs=-1)`` (its default algorithm, which
  is scikit-learn's KD-tree on these data; weights = scores x k), when PyOD is installed (numba,
  which PyOD's package ``__init__`` imports but ``KNN`` does not use, need not be: see
  :func:`import_pyod_knn`).

Peers run in a spawned, non-daemonic child process on every host core (joblib gives a daemonic
process one worker) and write every point's weight; the harness checks them against gpumine
BruteForce's weights on all points (``weights_vs_bf``: the max relative difference; PyOD rows also
against scikit-learn's, ``weights_vs_sklearn``), all self-excluded.

Data sets (``--datasets``):

* ``g2d``     1,000,000 points of a 2-d standard normal;
* ``g3d``     500,000 points, three 3-d unit-covariance Gaussians (centres seeded in [-10, 10]^3);
* ``covtype`` Covertype's 10 quantitative attributes: the full UCI file (581,012 rows) with
  ``--covtype PATH`` or ``<data-dir>/covertype/covtype.data[.gz]``, else the ADBench ``10_cover`` set
  (286,048 rows: every row of classes 2 and 4) from ``<data-dir>/adbench/``, else smaller samples;
  the output says which was used;
* ``poker``   1,000,000 random hands x 10 attributes (the UCI Poker test set is 1M uniformly
  random hands; :func:`gpumine.datasets.make_poker_hands` reproduces it, seeded);
* ``scaling`` G2d at several sizes, k = 50 (time vs n and the fraction of distances computed).

Every row records the seconds (median of ``--repeats`` after a warm-up on the device), and for
SolvingSet the iterations, the solving-set size and the fraction of all n(n-1)/2 distances computed
(the paper measured 0.04 %-6.8 %). Each row checks that SolvingSet's top-n equals brute force's
(same indices, weights to 1e-6 relative) and the float64 reference's (ties at the threshold allowed).
Peers run in a child process with a time limit (``--peer-cap``); brute force is first timed on a
slice of the queries and skipped when the full run is estimated above ``--bf-cap``.

``python -m benchmarks.outliers --help`` (or ``python benchmarks/outliers.py --help``) from the repository
root lists the options; ``--quick`` is a CPU smoke run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import multiprocessing
import queue as queue_module
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

if not __package__:  # run as a script (python benchmarks/outliers.py): the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks._common import DefaultsHelpFormatter, environment, format_seconds, save_figure, synchronize, write_json, write_text  # noqa: E402

__all__ = ["main", "build_parser", "load_dataset", "render_markdown", "plot_results", "DATASETS", "IMPLS"]

DATASETS = ("g2d", "g3d", "covtype", "poker", "scaling")
IMPLS = ("ss", "bf", "ss-cpu", "sklearn", "pyod")
IMPL_LABELS = {
    "ss": "gpumine SolvingSet",
    "bf": "gpumine BruteForce",
    "ss-cpu": "gpumine SolvingSet on CPU",
    "sklearn": "scikit-learn KD-tree",
    "pyod": "PyOD KNN",
}
KS = (5, 10, 50)
N_OUTLIERS = 10
_SEED = 2006
_FULL_SIZES = {"g2d": 1_000_000, "g3d": 500_000, "poker": 1_000_000}
_QUICK_SIZES = {"g2d": 6_000, "g3d": 4_000, "poker": 4_000, "covtype": 4_000}
_SCALING = (125_000, 250_000, 500_000, 1_000_000)
_TARGET_CASES = {("covtype", 50), ("g2d", 50)}
_QUICK_SCALING = (2_000, 4_000)


# ---------------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------------
def _covtype(data_dir: Path | None, covtype_path: Path | None, quick: bool):
    from gpumine.datasets import load_adbench, load_covtype, load_covtype_sample

    candidates = []
    if covtype_path is not None:
        candidates.append(("full", Path(covtype_path)))
    if data_dir is not None:
        for name in ("covtype.data.gz", "covtype.data"):
            candidates.append(("full", data_dir / "covertype" / name))
    for kind, path in candidates:
        if path.is_file():
            X, _ = load_covtype(path, n_features=10)
            return X, f"UCI Covertype, 10 quantitative attributes ({path.name}, {len(X):,} rows)"
    if data_dir is not None and (data_dir / "adbench" / "10_cover.npz").is_file():
        X, _ = load_adbench("10_cover", path=data_dir / "adbench")
        return X, (f"ADBench 10_cover ({len(X):,} x 10: Covertype classes 2 and 4, quantitative attributes; "
                   "the full 581,012-row file was not found)")
    if data_dir is not None and (data_dir / "covertype" / "covtype.ramp16pct.reconstructed.data.gz").is_file():
        path = data_dir / "covertype" / "covtype.ramp16pct.reconstructed.data.gz"
        X, _ = load_covtype(path, n_features=10)
        return X, f"Covertype 16 % stratified sample ({len(X):,} rows; neither the full file nor ADBench cover found)"
    X, _ = load_covtype_sample(n_features=10)
    return X, f"Covertype sample shipped with gpumine ({len(X):,} rows; no data folder found)"


def load_dataset(name: str, *, quick: bool = False, data_dir: Path | None = None, covtype: Path | None = None,
                 n: int | None = None):
    """``(X float32, description)`` for a benchmark data set (``n`` overrides the size of g2d/g3d/poker)."""
    from gpumine.datasets import make_gaussian_blobs, make_poker_hands

    sizes = _QUICK_SIZES if quick else _FULL_SIZES
    if name == "g2d":
        size = n or sizes["g2d"]
        X = np.random.default_rng(_SEED).standard_normal((size, 2), dtype=np.float32)
        return X, f"G2d: {size:,} points of a 2-d standard normal (seed {_SEED})"
    if name == "g3d":
        size = n or sizes["g3d"]
        X = make_gaussian_blobs(size, 3, centers=3, seed=_SEED)
        return X, f"G3d: {size:,} points, three 3-d unit-covariance Gaussians, centres uniform in [-10, 10]^3 (seed {_SEED})"
    if name == "poker":
        size = n or sizes["poker"]
        X, _ = make_poker_hands(size, seed=_SEED)
        return X.astype(np.float32), f"Poker: {size:,} random hands x 10 (suit, rank) attributes, seeded generator (seed {_SEED})"
    if name == "covtype":
        X, what = _covtype(data_dir, covtype, quick)
        if quick and len(X) > _QUICK_SIZES["covtype"]:
            X = X[: _QUICK_SIZES["covtype"]]
            what += f"; first {len(X):,} rows (--quick)"
        return np.ascontiguousarray(X, dtype=np.float32), what
    raise ValueError(f"unknown data set {name!r}; choose from {', '.join(DATASETS)}")


# ---------------------------------------------------------------------------------------------
# peers (run in a child process with a time limit)
# ---------------------------------------------------------------------------------------------
def _top_n(weights: np.ndarray, n: int):
    order = np.lexsort((np.arange(len(weights)), -weights))[:n]
    return order, weights[order]


def import_pyod_knn():
    """``(KNN class, how)``: PyOD's ``KNN``, also where PyOD's optional ``numba`` is missing.

    ``import pyod`` runs ``pyod/__init__.py`` and ``pyod/utils/__init__.py``, which import
    ``pyod.utils.stat_models`` and so numba (a dependency of a few other detectors; ``KNN`` runs no
    numba code: it is scikit-learn's ``NearestNeighbors`` and NumPy). When numba is not installed
    (PyOD installed from its wheel without dependencies, as on the GPU host), the two package
    modules are registered without running their ``__init__`` files and ``pyod.models.knn`` is
    imported as shipped: the same ``KNN`` code runs. ``how`` says which import was used. Raises
    ``ImportError`` when PyOD itself is not installed.
    """
    import sys
    import types

    try:
        from pyod.models.knn import KNN

        return KNN, "import pyod.models.knn"
    except ModuleNotFoundError as exc:
        if exc.name != "numba":
            raise
    for name in [m for m in sys.modules if m == "pyod" or m.startswith("pyod.")]:
        del sys.modules[name]  # the half-imported package
    spec = importlib.util.find_spec("pyod")
    root = Path(spec.submodule_search_locations[0])
    for package in ("pyod", "pyod.utils"):
        folder = root.joinpath(*package.split(".")[1:])
        module = types.ModuleType(package)
        module.__path__ = [str(folder)]
        module.__package__ = package
        module.__file__ = str(folder / "__init__.py")
        sys.modules[package] = module
    from pyod.models.knn import KNN

    return KNN, ("numba is not installed: pyod.models.knn imported without running pyod/__init__.py and "
                 "pyod/utils/__init__.py (which import numba for other detectors; KNN uses none of it)")


def _peer_worker(impl: str, path: str, k: int, n_out: int, result_queue, weights_path: str | None = None) -> None:
    try:
        X = np.load(path, mmap_mode="r").astype(np.float64)
        extra = {}
        # imports before the clock starts
        if impl == "pyod":
            KNN, how = import_pyod_knn()
            extra["import"] = how
        else:
            from sklearn.neighbors import NearestNeighbors
        from joblib import effective_n_jobs

        extra["n_jobs"] = effective_n_jobs(-1)  # the workers n_jobs=-1 gets in this process (1 in a daemon)
        start = time.perf_counter()
        if impl == "sklearn":
            # every point's k nearest *other* points (kneighbors() without X excludes the point itself)
            dist, _ = NearestNeighbors(n_neighbors=k, algorithm="kd_tree", n_jobs=-1).fit(X).kneighbors()
            weights = dist.sum(1)
        else:
            # PyOD's KNN as its users call it (its default algorithm, "auto"), on every core; the
            # score with method="mean" is the mean distance to the k nearest other points
            knn = KNN(n_neighbors=k, method="mean", n_jobs=-1).fit(X)
            weights = knn.decision_scores_ * k
            extra["algorithm"] = getattr(knn.neigh_, "_fit_method", None)
        seconds = time.perf_counter() - start
        weights = np.asarray(weights, dtype=np.float64)
        if weights_path is not None:
            np.save(weights_path, weights)
        idx, w = _top_n(weights, n_out)
        result_queue.put({"seconds": seconds, "indices": idx.tolist(), "weights": w.tolist(), **extra})
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        result_queue.put({"error": f"{type(exc).__name__}: {exc}"})


def _run_peer(impl: str, data_file: str, k: int, n_out: int, cap: float, weights_path: str | None = None) -> dict:
    ctx = multiprocessing.get_context("spawn")
    result_queue = ctx.Queue()
    # not a daemon: joblib refuses to parallelise inside a daemonic process (it warns and sets
    # n_jobs=1), which would time the peers on one core; the parent terminates it past the cap
    proc = ctx.Process(target=_peer_worker, args=(impl, data_file, k, n_out, result_queue, weights_path), daemon=False)
    proc.start()
    try:
        # the child's own clock excludes its start-up (imports); allow for that beyond the cap
        result = result_queue.get(timeout=cap + 30.0)
    except queue_module.Empty:
        result = {"error": None, "timeout": cap}
    finally:
        if proc.is_alive():
            proc.terminate()
        proc.join(10)
    if result.get("seconds") is not None and result["seconds"] > cap:
        result = {"error": None, "timeout": cap}
    return result


def max_relative_difference(a: np.ndarray, b: np.ndarray) -> float:
    """``max |a - b| / max(|b|, tiny)`` over all entries (0.0 for two empty arrays)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return math.inf
    if a.size == 0:
        return 0.0
    scale = np.maximum(np.abs(b), np.finfo(np.float64).tiny)
    return float(np.max(np.abs(a - b) / scale))


# ---------------------------------------------------------------------------------------------
# the harness
# ---------------------------------------------------------------------------------------------
def _same_top(a_idx, a_w, b_idx, b_w, rtol: float = 1e-6) -> bool:
    """Same top-n up to ties at the threshold: weights agree rank by rank, and indices differ only
    among points whose weights tie (within rtol) with the threshold."""
    a_idx, b_idx = np.asarray(a_idx), np.asarray(b_idx)
    a_w, b_w = np.asarray(a_w, dtype=np.float64), np.asarray(b_w, dtype=np.float64)
    if a_idx.shape != b_idx.shape or not np.allclose(a_w, b_w, rtol=rtol, atol=0):
        return False
    if np.array_equal(a_idx, b_idx):
        return True
    threshold = min(a_w[-1], b_w[-1])
    differ = a_idx != b_idx
    return bool(np.all(a_w[differ] <= threshold * (1 + 2 * rtol)))


class OutlierBench:
    def __init__(self, args, device: torch.device, out_json: Path | None, out_md: Path | None):
        self.args = args
        self.device = device
        self.out_json = out_json
        self.out_md = out_md
        self.start = time.perf_counter()
        self.rows: list[dict] = []
        self.meta = environment(device, packages=("gpumine", "torch", "triton", "numpy", "sklearn", "pyod", "matplotlib"))
        self.meta.update(quick=bool(args.quick), n_outliers=N_OUTLIERS, ks=list(args.k), datasets={},
                         n_candidates=args.candidates, cpu_cap=args.cpu_cap, peer_cap=args.peer_cap,
                         bf_cap=args.bf_cap, data_dir=str(args.data_dir) if args.data_dir else None, notes=[])
        self._tmp = tempfile.TemporaryDirectory(prefix="gpumine-bench-outliers-")
        # every point's weight per (dataset, n, k): gpumine brute force's and the peers', to check
        # PyOD KNN(method="mean") x k == scikit-learn's sums == gpumine's on all points, not just the top n
        self._all_weights: dict[tuple, dict[str, np.ndarray]] = {}

    def log(self, message: str) -> None:
        print(f"[{time.perf_counter() - self.start:7.1f} s] {message}", file=sys.stderr, flush=True)

    def over_budget(self) -> bool:
        return self.args.time_budget is not None and time.perf_counter() - self.start > self.args.time_budget

    def save(self) -> None:
        results = {"meta": self.meta, "rows": self.rows}
        if self.out_json is not None:
            write_json(self.out_json, results)
        if self.out_md is not None:
            write_text(self.out_md, render_markdown(results))

    # -- gpumine rows ------------------------------------------------------------------------------
    def _gpumine(self, X: np.ndarray, k: int, method: str, device: torch.device, deadline=None, candidates=None,
                 keep_scores: bool = False):
        from gpumine.outliers._distance_based import check_candidates, run
        from gpumine.outliers._weights import resolve_metric
        from gpumine.config import working_memory_bytes

        Xt = torch.from_numpy(X)
        m = check_candidates(candidates or self.args.candidates, device, len(X), X.shape[1], k)
        budget = working_memory_bytes(self.args.working_memory, device)
        synchronize(device)
        start = time.perf_counter()
        out = run(Xt, N_OUTLIERS, k, method=method, n_candidates=m, metric=resolve_metric("euclidean"),
                  seed=_SEED, device=device, budget=budget, backend=None, verbose=0, deadline=deadline)
        idx, w = out["top_indices"].cpu().numpy(), out["top_weights"].cpu().numpy()
        synchronize(device)
        seconds = time.perf_counter() - start
        n = len(X)
        info = {"iterations": int(out["iterations"]), "distances": int(out["distances"]),
                "fraction": out["distances"] / (n * (n - 1) / 2), "n_candidates": m if method == "solving_set" else None,
                "solving_set": int(out["solving_set"].numel()) if method == "solving_set" else None,
                "rows_recomputed": out.get("rows_recomputed"), "engine": out.get("engine"), "form": out.get("form")}
        if keep_scores:  # brute force: every point's exact weight
            info["scores"] = out["scores"].cpu().numpy()
        del out
        return seconds, idx, w, info

    def _timed_gpumine(self, X, k, method, device):
        times, result = [], None
        repeats = self.args.repeats if method == "solving_set" else self.args.bf_repeats
        for _ in range(repeats):
            seconds, idx, w, info = self._gpumine(X, k, method, device, keep_scores=method == "brute_force")
            times.append(seconds)
            result = (idx, w, info)
        return statistics.median(times), times, result

    def _bf_estimate(self, X: np.ndarray, k: int) -> float:
        """Seconds a full brute-force run would take, from the engine on a slice of the queries."""
        from gpumine.neighbors.engine import knn_search
        from gpumine.outliers._distance_based import engine_backend
        from gpumine.core.distance import get_metric
        from gpumine.config import working_memory_bytes

        n = len(X)
        q = min(n, max(4096, n // 64))
        if q == n:
            return 0.0
        Xt = torch.from_numpy(X).to(self.device)
        metric = get_metric("euclidean")
        budget = working_memory_bytes(self.args.working_memory, self.device)
        eb = engine_backend(None, self.device, metric, Xt.dtype, k, n)
        # warm-up on the very slice that is timed: the compiled kernel variant can depend on the
        # query count (one run timed a compilation and estimated ~108 s)
        def search():
            knn_search(Xt, Xt[:q], k, metric, exclude_self=True, device=self.device, budget_bytes=budget,
                       result_device=self.device, verbose=0, backend=eb)

        search()
        synchronize(self.device)
        start = time.perf_counter()
        search()
        synchronize(self.device)
        return (time.perf_counter() - start) * n / q

    def _row(self, dataset, X, k, impl, **fields):
        row = {"dataset": dataset, "n": int(len(X)), "d": int(X.shape[1]), "k": k, "impl": impl,
               "device": str(self.device) if impl in ("ss", "bf") else "cpu", "seconds": None, "times": None,
               "iterations": None, "solving_set": None, "n_candidates": None, "distances": None,
               "fraction": None, "top_indices": None, "top_weights": None, "match_bf": None,
               "match_reference": None, "note": ""}
        row.update(fields)
        self.rows.append(row)
        self.save()
        return row

    def run_gpumine(self, dataset: str, X: np.ndarray, k: int, impls) -> None:
        if "ss" in impls:
            try:
                seconds, times, (idx, w, info) = self._timed_gpumine(X, k, "solving_set", self.device)
                self._row(dataset, X, k, "ss", seconds=seconds, times=times, iterations=info["iterations"],
                          solving_set=info["solving_set"], n_candidates=info["n_candidates"],
                          distances=info["distances"], fraction=info["fraction"], top_indices=idx.tolist(),
                          top_weights=w.tolist(), rows_recomputed=info["rows_recomputed"])
                self.log(f"{dataset} k={k} ss: {format_seconds(seconds)}, {info['iterations']} it, "
                         f"|S|={info['solving_set']:,}, {100 * info['fraction']:.3g} % of pairs")
            except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
                self.failed = True
                self._row(dataset, X, k, "ss", note=f"failed: {type(exc).__name__}: {exc}")
                self.log(f"{dataset} k={k} ss FAILED: {traceback.format_exc()}")
        if "bf" in impls:
            try:
                estimate = self._bf_estimate(X, k)
                if estimate > self.args.bf_cap:
                    self._row(dataset, X, k, "bf", estimate=estimate,
                              note=f"not run: estimated {format_seconds(estimate)} from a query slice > --bf-cap {self.args.bf_cap:g} s")
                    self.log(f"{dataset} k={k} bf skipped (estimate {format_seconds(estimate)})")
                else:
                    seconds, times, (idx, w, info) = self._timed_gpumine(X, k, "brute_force", self.device)
                    self._all_weights.setdefault((dataset, len(X), k), {})["bf"] = info.pop("scores")
                    self._row(dataset, X, k, "bf", seconds=seconds, times=times, iterations=1, distances=info["distances"],
                              fraction=1.0, top_indices=idx.tolist(), top_weights=w.tolist(), estimate=estimate,
                              engine=info["engine"])
                    self.log(f"{dataset} k={k} bf: {format_seconds(seconds)}")
            except Exception as exc:  # noqa: BLE001
                self.failed = True
                self._row(dataset, X, k, "bf", note=f"failed: {type(exc).__name__}: {exc}")
                self.log(f"{dataset} k={k} bf FAILED: {traceback.format_exc()}")

    def run_sweep(self, dataset: str, X: np.ndarray, k: int, values) -> None:
        """SolvingSet on the device at several candidate counts (to choose the default)."""
        for m in values:
            try:
                times = []
                for _ in range(self.args.repeats):
                    seconds, idx, w, info = self._gpumine(X, k, "solving_set", self.device, candidates=m)
                    times.append(seconds)
                self._row(dataset, X, k, "ss-sweep", seconds=statistics.median(times), times=times,
                          iterations=info["iterations"], solving_set=info["solving_set"], n_candidates=m,
                          distances=info["distances"], fraction=info["fraction"], top_indices=idx.tolist(),
                          top_weights=w.tolist())
                self.log(f"{dataset} k={k} ss m={m}: {format_seconds(statistics.median(times))}, "
                         f"{info['iterations']} it, {100 * info['fraction']:.3g} % of pairs")
            except Exception as exc:  # noqa: BLE001
                self.failed = True
                self._row(dataset, X, k, "ss-sweep", n_candidates=m, note=f"failed: {type(exc).__name__}: {exc}")

    def run_cpu_ss(self, dataset: str, X: np.ndarray, k: int) -> None:
        from gpumine.outliers._solving_set import SolvingSetTimeout

        cap = self.args.cpu_cap
        try:
            seconds, idx, w, info = self._gpumine(X, k, "solving_set", torch.device("cpu"),
                                                  deadline=time.perf_counter() + cap)
            self._row(dataset, X, k, "ss-cpu", seconds=seconds, times=[seconds], iterations=info["iterations"],
                      solving_set=info["solving_set"], n_candidates=info["n_candidates"], distances=info["distances"],
                      fraction=info["fraction"], top_indices=idx.tolist(), top_weights=w.tolist())
            self.log(f"{dataset} k={k} ss-cpu: {format_seconds(seconds)}")
        except SolvingSetTimeout as exc:
            st = exc.stats
            self._row(dataset, X, k, "ss-cpu", timeout=cap,
                      note=f"stopped at --cpu-cap {cap:g} s after {st['iterations']} iteration(s), {st['distances']:,} distances")
            self.log(f"{dataset} k={k} ss-cpu: > {cap:g} s")

    def run_peer(self, dataset: str, X: np.ndarray, k: int, impl: str, data_file: str) -> None:
        cap = self.args.peer_cap
        weights_path = Path(self._tmp.name) / f"weights_{impl}_{dataset}_{len(X)}_{k}.npy"
        result = _run_peer(impl, data_file, k, N_OUTLIERS, cap, str(weights_path))
        if result.get("import"):
            note = f"PyOD: {result['import']}"
            if note not in self.meta["notes"]:
                self.meta["notes"].append(note)
        if result.get("error"):
            self._row(dataset, X, k, impl, note=f"failed: {result['error']}")
            self.log(f"{dataset} k={k} {impl} FAILED: {result['error']}")
            if impl == "pyod":
                note = ("PyOD KNN could not run here; the scikit-learn column times the KD-tree all-kNN that "
                        "PyOD's KNN runs (NearestNeighbors.kneighbors, every core)")
                if note not in self.meta["notes"]:
                    self.meta["notes"].append(note)
        elif result.get("timeout") is not None:
            self._row(dataset, X, k, impl, timeout=cap, note=f"did not finish within --peer-cap {cap:g} s")
            self.log(f"{dataset} k={k} {impl}: > {cap:g} s")
        else:
            checks = self._check_all_weights(dataset, X, k, impl, weights_path)
            self._row(dataset, X, k, impl, seconds=result["seconds"], times=[result["seconds"]],
                      top_indices=result["indices"], top_weights=result["weights"],
                      algorithm=result.get("algorithm"), n_jobs=result.get("n_jobs"), **checks)
            said = ", ".join(f"{key} {value:.3g}" for key, value in checks.items() if isinstance(value, float))
            self.log(f"{dataset} k={k} {impl}: {format_seconds(result['seconds'])} ({result.get('n_jobs')} workers)"
                     f"{'; ' + said if said else ''}")
        weights_path.unlink(missing_ok=True)

    def _check_all_weights(self, dataset, X, k, impl, weights_path: Path) -> dict:
        """Every point's weight from a peer against gpumine brute force's (and PyOD's against scikit-learn's).

        ``weights_vs_bf``: max relative difference over all points to gpumine BruteForce (whose
        neighbour sets come from the float32 kNN engine, so points with float32 near-tied neighbours
        may differ by about float32 rounding); ``weights_match_bf``: within 1e-6 relative;
        ``weights_vs_sklearn`` (PyOD rows): the same against scikit-learn's sums.
        """
        if not weights_path.is_file():
            return {}
        weights = np.load(weights_path)
        case = self._all_weights.setdefault((dataset, len(X), k), {})
        out = {}
        if case.get("bf") is not None:
            rel = max_relative_difference(weights, case["bf"])
            out["weights_vs_bf"] = rel
            out["weights_match_bf"] = bool(rel <= 1e-6)
            out["weights_differ_bf"] = int(np.count_nonzero(~np.isclose(weights, case["bf"], rtol=1e-9, atol=0)))
        if impl == "pyod" and case.get("sklearn") is not None:
            out["weights_vs_sklearn"] = max_relative_difference(weights, case["sklearn"])
        if impl == "sklearn":
            case["sklearn"] = weights
        return out

    def data_file(self, dataset: str, X: np.ndarray) -> str:
        path = Path(self._tmp.name) / f"{dataset}_{len(X)}.npy"
        if not path.exists():
            np.save(path, X)
        return str(path)

    def check_rows(self) -> None:
        """Fill ``match_bf`` / ``match_reference`` of every row from the rows of the same case."""
        cases = {}
        for r in self.rows:
            cases.setdefault((r["dataset"], r["n"], r["k"]), []).append(r)
        for case_rows in cases.values():
            impls = {r["impl"]: r for r in case_rows}
            bf, ref = impls.get("bf"), impls.get("sklearn") or impls.get("pyod")
            for r in case_rows:
                if r["top_indices"] is None:
                    continue
                if bf is not None and bf["top_indices"] is not None and r is not bf:
                    r["match_bf"] = _same_top(r["top_indices"], r["top_weights"], bf["top_indices"], bf["top_weights"])
                if ref is not None and ref["top_indices"] is not None and r is not ref:
                    r["match_reference"] = _same_top(r["top_indices"], r["top_weights"], ref["top_indices"], ref["top_weights"])


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------
def _find(rows, dataset, n, k, impl):
    for r in rows:
        if r["dataset"] == dataset and r["n"] == n and r["k"] == k and r["impl"] == impl:
            return r
    return None


def _cell(row) -> str:
    if row is None:
        return "—"
    if row.get("seconds") is None:
        if row.get("timeout") is not None:
            return f"> {row['timeout']:g} s"
        if row.get("estimate") is not None:
            return f"~{format_seconds(row['estimate'])} (est.)"
        return "failed" if row.get("note", "").startswith("failed") else "—"
    return format_seconds(row["seconds"])


def _ratio(a, b) -> str:
    if a is None or b is None or a.get("seconds") is None or b.get("seconds") is None or b["seconds"] <= 0:
        return "—"
    return f"{a['seconds'] / b['seconds']:.3g}×"


def _check(row) -> str:
    if row is None:
        return "—"
    marks = []
    for key, label in (("match_bf", "BF"), ("match_reference", "ref")):
        if row.get(key) is not None:
            marks.append(f"{label} {'✓' if row[key] else '✗'}")
    return ", ".join(marks) or "—"


def render_markdown(results: dict) -> str:
    meta, rows = results["meta"], results["rows"]
    lines = [
        "## Top-n distance-based outliers (GPU SolvingSet experiments: BruteForce and SolvingSet)",
        "",
        f"Device: **{meta.get('device_name')}** ({meta.get('device')}); CPU: {meta.get('cpu')} "
        f"({meta.get('cpu_count')} logical cores); torch {meta['versions'].get('torch')}, scikit-learn "
        f"{meta['versions'].get('scikit-learn')}, PyOD {meta['versions'].get('pyod') or 'not installed'}; "
        f"{meta.get('date')}{' — **quick smoke run, tiny sizes**' if meta.get('quick') else ''}.",
        "",
        f"n = {meta.get('n_outliers')} outliers; weight = sum of the distances to the k nearest other points "
        "(self excluded, as scikit-learn/PyOD). SolvingSet candidates per iteration: "
        f"{meta.get('n_candidates')}. Times are seconds from call to result (data in host memory, copies "
        "included); scikit-learn and PyOD use every core. *fraction* = distances SolvingSet computed / "
        "(n(n-1)/2); the paper measured 0.04 %–6.8 %. *check*: SolvingSet's top-n equals BruteForce's "
        "(BF) and the float64 scikit-learn reference's (ref).",
        "",
    ]
    for name, what in meta.get("datasets", {}).items():
        lines.append(f"- **{name}**: {what}")
    lines.append("")
    lines += [
        "| data | n | d | k | SolvingSet | iterations | solving set | fraction | BruteForce | SolvingSet CPU "
        "| scikit-learn KD-tree | PyOD KNN | BF / SS | sklearn / SS | check |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    seen = []
    for r in rows:
        key = (r["dataset"], r["n"], r["k"])
        if key not in seen:
            seen.append(key)
    for dataset, n, k in seen:
        ss = _find(rows, dataset, n, k, "ss")
        bf = _find(rows, dataset, n, k, "bf")
        cpu = _find(rows, dataset, n, k, "ss-cpu")
        sk = _find(rows, dataset, n, k, "sklearn")
        po = _find(rows, dataset, n, k, "pyod")
        d = (ss or bf or sk or po or cpu)["d"]
        it = ss.get("iterations") if ss else None
        size = ss.get("solving_set") if ss else None
        frac = ss.get("fraction") if ss else None
        lines.append(
            f"| {dataset} | {n:,} | {d} | {k} | {_cell(ss)} | {it if it is not None else '—'} | "
            f"{f'{size:,}' if size is not None else '—'} | {f'{100 * frac:.3g} %' if frac is not None else '—'} | "
            f"{_cell(bf)} | {_cell(cpu)} | {_cell(sk)} | {_cell(po)} | {_ratio(bf, ss)} | {_ratio(sk, ss)} | {_check(ss)} |"
        )
    lines += ["", *_render_targets(rows), ""]
    lines += _render_sweep(rows)
    notes = [f"- {r['dataset']} n={r['n']:,} k={r['k']} {r['impl']}: {r['note']}" for r in rows if r.get("note")]
    if notes or meta.get("notes"):
        lines += ["Notes:", "", *[f"- {n}" for n in meta.get("notes", [])], *notes, ""]
    return "\n".join(lines)


def _render_sweep(rows) -> list[str]:
    sweep = [r for r in rows if r["impl"] == "ss-sweep"]
    if not sweep:
        return []
    values = sorted({r["n_candidates"] for r in sweep if r.get("n_candidates")})
    out = ["SolvingSet time (and fraction of pairs) by candidates per iteration:", "",
           "| data | n | k | " + " | ".join(f"m = {m}" for m in values) + " |",
           "|---|---:|---:|" + "---:|" * len(values)]
    seen = []
    for r in sweep:
        if (r["dataset"], r["n"], r["k"]) not in seen:
            seen.append((r["dataset"], r["n"], r["k"]))
    for dataset, n, k in seen:
        cells = []
        for m in values:
            r = next((x for x in sweep if (x["dataset"], x["n"], x["k"], x["n_candidates"]) == (dataset, n, k, m)), None)
            if r is None or r.get("seconds") is None:
                cells.append("—")
            else:
                check = "" if r.get("match_bf") in (None, True) else " ✗"
                cells.append(f"{format_seconds(r['seconds'])} ({100 * r['fraction']:.3g} %){check}")
        out.append(f"| {dataset} | {n:,} | {k} | " + " | ".join(cells) + " |")
    return out + [""]


def _render_targets(rows) -> list[str]:
    out = ["Targets:", ""]

    def biggest(dataset, k, impl):
        found = [r for r in rows if r["dataset"] == dataset and r["k"] == k and r["impl"] == impl]
        return max(found, key=lambda r: r["n"]) if found else None

    cov_ss, cov_po = biggest("covtype", 50, "ss"), biggest("covtype", 50, "pyod") or biggest("covtype", 50, "sklearn")
    if cov_ss and cov_ss.get("seconds") is not None:
        verdict = "met" if cov_ss["seconds"] <= 1.0 else "missed"
        ratio = _ratio(cov_po, cov_ss)
        out.append(f"- Covtype (n={cov_ss['n']:,}) k=50: SolvingSet {format_seconds(cov_ss['seconds'])} (≤ 1 s: {verdict}); "
                   f"{IMPL_LABELS.get(cov_po['impl']) if cov_po else 'peer'} / SolvingSet = {ratio} (target ≥ 50×)")
    g2d = biggest("g2d", 50, "ss")
    if g2d and g2d.get("seconds") is not None:
        out.append(f"- G2d (n={g2d['n']:,}) k=50: SolvingSet {format_seconds(g2d['seconds'])} "
                   f"(≤ 0.5 s: {'met' if g2d['seconds'] <= 0.5 else 'missed'})")
    for dataset in ("g2d", "g3d", "covtype", "poker"):
        pairs = [(r, _find(rows, dataset, r["n"], r["k"], "bf")) for r in rows if r["dataset"] == dataset and r["impl"] == "ss"]
        verdicts = []
        for ss, bf in pairs:
            if ss.get("seconds") is None or bf is None:
                continue
            bf_s = bf.get("seconds") or bf.get("estimate")
            if bf_s is not None:
                verdicts.append(ss["seconds"] < bf_s)
        if verdicts:
            out.append(f"- {dataset}: SolvingSet faster than BruteForce on {sum(verdicts)}/{len(verdicts)} k values")
    for r in rows:
        if r["impl"] in ("pyod", "sklearn") and r.get("weights_vs_bf") is not None:
            what = "PyOD KNN(method='mean') x k" if r["impl"] == "pyod" else "scikit-learn k-NN distance sums"
            extra = (f"; vs scikit-learn: max relative difference {r['weights_vs_sklearn']:.3g}"
                     if r.get("weights_vs_sklearn") is not None else "")
            out.append(f"- {r['dataset']} (n={r['n']:,}) k={r['k']}: {what} vs gpumine BruteForce weights, all points: "
                       f"max relative difference {r['weights_vs_bf']:.3g} ({'≤' if r.get('weights_match_bf') else '>'} 1e-6; "
                       f"{r.get('weights_differ_bf', 0):,} points differ by more than 1e-9){extra}")
    checks = [r.get("match_bf") for r in rows if r["impl"] == "ss" and r.get("match_bf") is not None]
    refs = [r.get("match_reference") for r in rows if r["impl"] == "ss" and r.get("match_reference") is not None]
    out.append(f"- SolvingSet top-n == BruteForce top-n on {sum(checks)}/{len(checks)} rows; == float64 reference on "
               f"{sum(refs)}/{len(refs)} rows")
    return out


def plot_results(results: dict, folder, stem: str = "outliers") -> list[Path]:
    """Time vs n and fraction of distances vs n (the ``scaling`` rows); needs matplotlib."""
    if importlib.util.find_spec("matplotlib") is None:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results["rows"] if r["dataset"] == "scaling"]
    if not rows:
        return []
    fig, (ax_t, ax_f) = plt.subplots(1, 2, figsize=(11, 4.2))
    for impl in IMPLS:
        pts = sorted((r["n"], r["seconds"]) for r in rows if r["impl"] == impl and r.get("seconds") is not None)
        if pts:
            ax_t.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=IMPL_LABELS[impl])
    pts = sorted((r["n"], 100 * r["fraction"]) for r in rows if r["impl"] == "ss" and r.get("fraction") is not None)
    if pts:
        ax_f.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label="SolvingSet")
    ks = sorted({r["k"] for r in rows})
    for ax, ylabel in ((ax_t, "seconds"), (ax_f, "% of all pairwise distances computed")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("n (G2d points)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax_t.set_title(f"Top-{N_OUTLIERS} outliers, k={ks}", fontsize=10)
    ax_f.set_title("SolvingSet: fraction of distances", fontsize=10)
    fig.suptitle(f"gpumine distance-based outliers — {results['meta'].get('device_name', '')}", fontsize=11)
    path = save_figure(fig, Path(folder) / f"{stem}_scaling.png")
    plt.close(fig)
    return [path]


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------
def _csv_list(kind, allowed=None):
    def parse(text):
        items = []
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            value = kind(part)
            if allowed is not None and value not in allowed:
                raise argparse.ArgumentTypeError(f"unknown value {part!r}; choose from {', '.join(map(str, allowed))}")
            items.append(value)
        return items

    return parse


def _cases_arg(text):
    cases = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, k = part.partition(":")
        if not sep or name not in DATASETS or name == "scaling" or not k.strip().isdigit() or int(k) < 1:
            raise argparse.ArgumentTypeError(
                f"bad case {part!r}: use DATASET:K with DATASET one of {', '.join(d for d in DATASETS if d != 'scaling')}")
        cases.append((name, int(k)))
    if not cases:
        raise argparse.ArgumentTypeError("no cases given")
    return cases


def _candidates_arg(text):
    if text == "auto":
        return "auto"
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 'auto' or a positive integer")
    return value


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Top-n distance-based outliers benchmark (GPU SolvingSet experiments): gpumine SolvingSet and BruteForce on the "
        "device, SolvingSet on the CPU, scikit-learn's KD-tree and PyOD KNN, n = 10, k in {5, 10, 50}.",
        formatter_class=DefaultsHelpFormatter,
    )
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (for the ss and bf rows)")
    p.add_argument("--quick", action="store_true", help="tiny sizes: a CPU smoke run of every code path")
    p.add_argument("--datasets", type=_csv_list(str, DATASETS), default=list(DATASETS), help="comma-separated subset")
    p.add_argument("--k", type=_csv_list(int), default=list(KS), help="neighbour counts")
    p.add_argument("--impls", type=_csv_list(str, IMPLS), default=list(IMPLS), help="implementations to time")
    p.add_argument("--cases", type=_cases_arg, default=None,
                   help="only these (data set, k) pairs, e.g. covtype:50,covtype:5,g2d:50 (overrides --datasets and --k)")
    p.add_argument("--peer-k", type=_csv_list(int), default=None,
                   help="k values at which ss-cpu, scikit-learn and PyOD run (default: all of --k)")
    p.add_argument("--data-dir", type=Path, default=None,
                   help="folder holding adbench/10_cover.npz and/or covertype/covtype.data.gz (default: the shared data folder)")
    p.add_argument("--covtype", type=Path, default=None, help="the full UCI covtype.data[.gz] (581,012 rows)")
    p.add_argument("--candidates", type=_candidates_arg, default="auto", help="SolvingSet candidates per iteration")
    p.add_argument("--sweep-candidates", type=_csv_list(int), default=None,
                   help="also time SolvingSet on the device with each of these candidate counts (e.g. 256,512,1024,2048)")
    p.add_argument("--repeats", type=int, default=None, help="timed SolvingSet runs per row, median reported (default 3; 1 with --quick)")
    p.add_argument("--bf-repeats", type=int, default=1, help="timed brute-force runs per row, median reported")
    p.add_argument("--cpu-cap", type=float, default=30.0, help="seconds after which the CPU SolvingSet is stopped")
    p.add_argument("--peer-cap", type=float, default=90.0, help="seconds after which a scikit-learn/PyOD run is stopped")
    p.add_argument("--bf-cap", type=float, default=60.0, help="skip brute force when a query slice predicts more than this")
    p.add_argument("--scaling-sizes", type=_csv_list(int), default=None, help="G2d sizes of the scaling experiment")
    p.add_argument("--working-memory", type=float, default=None, help="MiB per tile (default: gpumine's)")
    p.add_argument("--time-budget", type=float, default=None,
                   help="total seconds: once spent, the remaining peer rows are skipped (gpumine rows run first)")
    p.add_argument("--out", type=Path, help="results JSON (rewritten atomically after every row)")
    p.add_argument("--markdown", type=Path, help="markdown table for BENCHMARKS.md")
    p.add_argument("--out-dir", type=Path, help="folder for outliers.json, outliers.md and the plot")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--from-json", type=Path, help="render --markdown / the plot from a results JSON and exit")
    return p


def main(argv=None, prog: str | None = None) -> int:
    """Run the benchmark; returns 0, 1 when a gpumine row failed or disagreed, 2 on bad usage."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    out_json, out_md = args.out, args.markdown
    if args.out_dir is not None:
        out_json = out_json or args.out_dir / "outliers.json"
        out_md = out_md or args.out_dir / "outliers.md"
    if args.from_json is not None:
        try:
            results = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            print(f"error: cannot read --from-json {args.from_json}: {exc}", file=sys.stderr)
            return 2
        text = render_markdown(results)
        if out_md is not None:
            write_text(out_md, text)
        if not args.no_plots:
            for path in plot_results(results, (out_json or args.from_json).parent, (out_json or args.from_json).stem):
                print(f"wrote {path}")
        print(text)
        return 0
    from gpumine.config import resolve_device
    from gpumine.datasets import find_data_dir

    try:
        device = resolve_device(args.device)
    except (ValueError, TypeError) as exc:
        print(f"error: --device: {exc}", file=sys.stderr)
        return 2
    if args.data_dir is None:
        args.data_dir = find_data_dir()
    elif not args.data_dir.is_dir():
        print(f"error: --data-dir {args.data_dir} is not a folder", file=sys.stderr)
        return 2
    if args.covtype is not None and not args.covtype.is_file():
        print(f"error: --covtype {args.covtype}: no such file", file=sys.stderr)
        return 2
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.cases is not None:
        args.datasets = list(dict.fromkeys(name for name, _ in args.cases))
        args.k = list(dict.fromkeys(k for _, k in args.cases))
    bench = OutlierBench(args, device, out_json, out_md)
    bench.failed = False
    impls = list(args.impls)
    if "pyod" in impls and importlib.util.find_spec("pyod") is None:
        impls.remove("pyod")
        bench.meta["notes"].append("PyOD is not installed: its column is empty; the scikit-learn column times the "
                                   "KD-tree all-kNN that PyOD's KNN runs (NearestNeighbors.kneighbors, every core)")
    if "sklearn" in impls and importlib.util.find_spec("sklearn") is None:  # pragma: no cover - a dependency
        impls.remove("sklearn")
    peer_k = set(args.peer_k or args.k)
    bench.log(f"gpumine outliers benchmark on {bench.meta['device_name']} ({device}); datasets: {', '.join(args.datasets)}")
    cases = []  # (dataset label, X, k)
    try:
        for name in args.datasets:
            if name == "scaling":
                sizes = args.scaling_sizes or (_QUICK_SCALING if args.quick else _SCALING)
                for size in sizes:
                    X, what = load_dataset("g2d", n=size)
                    cases.append(("scaling", X, 50 if not args.quick else 10))
                bench.meta["datasets"]["scaling"] = f"G2d at n = {', '.join(f'{s:,}' for s in sizes)}"
                continue
            X, what = load_dataset(name, quick=args.quick, data_dir=args.data_dir, covtype=args.covtype)
            bench.meta["datasets"][name] = what
            bench.log(f"{name}: {what}")
            for k in args.k:
                if args.cases is None or (name, k) in args.cases:
                    cases.append((name, X, k))
        # warm-up on the device (context, kernels) outside every timing
        if {"ss", "bf"} & set(impls):
            warm = np.random.default_rng(0).standard_normal((2048, 3), dtype=np.float32)
            for method in ("solving_set", "brute_force"):
                bench._gpumine(warm, 5, method, device)
        for name, X, k in cases:
            bench.run_gpumine(name, X, k, [i for i in impls if i in ("ss", "bf")])
        if args.sweep_candidates:
            for name, X, k in cases:
                if name != "scaling":
                    bench.run_sweep(name, X, k, args.sweep_candidates)
        # the CPU rows with the time that is left: the target rows (Covtype and G2d at k = 50)
        # first, then the smallest data first
        def order(case):
            name, X, k = case
            return (0 if (name, k) in _TARGET_CASES else 1, X.shape[0] * X.shape[1], k)

        for name, X, k in sorted(cases, key=order):
            if k not in peer_k and name != "scaling":
                continue
            for impl in ("ss-cpu", "sklearn", "pyod"):
                if impl not in impls:
                    continue
                if bench.over_budget():
                    bench._row(name, X, k, impl, note="not run: --time-budget spent")
                    continue
                if impl == "ss-cpu":
                    bench.run_cpu_ss(name, X, k)
                else:
                    bench.run_peer(name, X, k, impl, bench.data_file(name, X))
    except KeyboardInterrupt:
        bench.log("interrupted: writing the rows measured so far")
        bench.check_rows()
        bench.save()
        return 130
    bench.check_rows()
    bench.save()
    if out_json is not None and not args.no_plots:
        for path in plot_results({"meta": bench.meta, "rows": bench.rows}, out_json.parent, out_json.stem):
            bench.log(f"wrote {path}")
    text = render_markdown({"meta": bench.meta, "rows": bench.rows})
    print(text)
    disagree = [r for r in bench.rows if r["impl"] in ("ss", "bf", "ss-cpu")
                and (r.get("match_bf") is False or r.get("match_reference") is False)]
    for r in disagree:
        bench.log(f"DISAGREEMENT: {r['dataset']} n={r['n']} k={r['k']} {r['impl']}")
    return 1 if bench.failed or disagree else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(prog="python -m benchmarks.outliers" if __package__ else "benchmarks/outliers.py"))
