"""Exact kNN benchmark: the CUKNN paper's experiments, side by side with peers.

Reproduces the experiments of CUKNN (Liang et al. 2010, k = 7) and gpumine's own targets for
its fused kernel (a large k among them), timing in one run

* ``gpumine-device`` — :func:`gpumine.neighbors.kneighbors` on tensors already on the device;
* ``gpumine-host``   — the same from host NumPy arrays to NumPy results (copies included);
* ``gpumine-fitted`` — ``NearestNeighbors(device=...)`` fitted once on the host references
  (untimed, as an index is built), then ``kneighbors`` of the queries on the device (rows
  with queries only);
* ``torch``          — plain PyTorch, chunked ``torch.cdist`` + ``torch.topk`` in float32, the
  query chunk sized to the same working memory (the baseline every ratio refers to);
* ``sklearn``        — scikit-learn ``NearestNeighbors(algorithm="brute", n_jobs=-1)``;
* ``faiss``          — faiss-cpu ``IndexFlatL2`` (when it imports).

Experiments (``--experiments``, by name or number):

1. ``dims``    all-kNN of 262,144 uniform points, d = 4, 8, 16, 32, 64;
2. ``refs``    all-kNN of n = 8,192 … 1,048,576 uniform points (powers of two), d = 8;
3. ``queries`` 16,384 … 1,048,576 queries against 32,768 references, d = 8;
4. ``physics`` 2,000 … 12,000 queries against 32,768 × 65 references (the KDD Cup 2004
   physics shape: the real ``phy_train.dat`` with ``--physics PATH``, else a seeded
   synthetic set of that shape — the output says which);
5. ``large_k`` k = 2048, 32,768 queries against 32,768 references, d = 8;
6. ``embedding`` 10,000 queries against 100,000 uniform references at d = 128, k = 10 (the
   shape of an embedding search, issue 19's matrix-product roofline target).

Timing: a warm-up run (three for gpumine on a GPU, whose second call of a shape
captures a graph; their times are kept as ``warmup_samples``), then ``--repeats`` timed runs (stopping early once
``--row-seconds`` have been spent; rows of short calls go on until ``--min-row-seconds`` have been, at most
``_MAX_RUNS`` runs), the median reported; the GPU is
synchronised before and after each run, so a time is from call to usable
result. Rows whose work exceeds 2**28 distance pairs (2**31 for gpumine and
PyTorch on a GPU) are first timed on a slice of the queries; the slice is the
warm-up for compilation, and its time scaled to the full row is the estimate
that ``--max-seconds`` and ``--time-budget`` act on (a skipped row says so and
why; on the CPU a smaller probe comes first, and rows far over the limit by the
rate of a smaller row are skipped without a slice). gpumine and PyTorch run
first, experiment by experiment; the CPU peers follow, smallest rows first, in
the time left. Results are written after each shape (all its rows), so an interrupted run
keeps what it measured. Beside every time: recall@k against an exact
float64 brute force on a sample of at most ``--sample`` queries (a returned
neighbour counts as found when it is valid and its float64 distance is at most
the reference k-th distance times ``1 + (d + 2)·2⁻²⁴`` — ties within float32
rounding count), and ``ratio_vs_torch`` = PyTorch seconds / this row's seconds
(> 1 is faster than plain PyTorch).

Run ``python -m benchmarks.knn --help`` (or ``python benchmarks/knn.py --help``) from the repository root.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import importlib
import importlib.util
import inspect
import json
import math
import sys
import time
import zlib
from pathlib import Path
from typing import Callable

if not __package__:  # run as a script (python benchmarks/knn.py): the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks._common import DefaultsHelpFormatter, environment, format_count, format_seconds, non_negative, positive, median, save_figure, time_call, write_json, write_text  # noqa: E402

__all__ = [
    "main",
    "build_parser",
    "Case",
    "cases",
    "experiment_dims",
    "experiment_refs",
    "experiment_queries",
    "experiment_physics",
    "experiment_large_k",
    "experiment_embedding",
    "torch_knn",
    "sklearn_knn",
    "faiss_knn",
    "reference_kth",
    "recall_at_k",
    "render_markdown",
    "plot_results",
    "IMPLS",
    "EXPERIMENTS",
]

K = 7
LARGE_K = 2048
IMPLS = ("gpumine-device", "gpumine-fitted", "gpumine-triton", "gpumine-host", "torch", "sklearn", "faiss")
PEERS = ("torch", "sklearn", "faiss")
IMPL_LABELS = {
    "gpumine-device": "gpumine (data on device)",
    "gpumine-triton": "gpumine fused Triton kernel (on device)",
    "gpumine-host": "gpumine (host NumPy in/out)",
    "gpumine-fitted": "gpumine NearestNeighbors fitted (queries on device)",
    "torch": "PyTorch cdist+topk",
    "sklearn": "scikit-learn brute",
    "faiss": "faiss-cpu IndexFlatL2",
}
EXPERIMENTS = {
    "dims": "all-kNN of 262,144 uniform points, d = 4 … 64",
    "refs": "all-kNN of 8,192 … 1,048,576 uniform points, d = 8",
    "queries": "16,384 … 1,048,576 queries against 32,768 uniform references, d = 8",
    "physics": "2,000 … 12,000 queries against 32,768 × 65 references (KDD Cup 2004 physics shape)",
    "large_k": "k = 2048: 32,768 queries against 32,768 uniform references, d = 8",
    "embedding": "10,000 queries against 100,000 uniform references, d = 128, k = 10 (embedding shape)",
}
QUICK_TITLES = {
    "dims": "all-kNN of 1,024 uniform points, d = 4 … 64 (quick)",
    "refs": "all-kNN of 256 … 1,024 uniform points, d = 8 (quick)",
    "queries": "256 … 1,024 queries against 1,024 references, d = 8 (quick)",
    "physics": "128 … 384 queries against 1,024 × 65 references (quick)",
    "large_k": "k = 128: 1,024 queries against 1,024 references, d = 8 (quick)",
    "embedding": "256 queries against 1,024 references, d = 128, k = 10 (quick)",
}
_QUICK_N = 1024
_EXPERIMENT_NUMBERS = {str(i + 1): name for i, name in enumerate(EXPERIMENTS)}

# rows with more distance pairs than this are first timed on a slice of the queries (8x more for
# the GPU implementations on a GPU, so that the slice is not dominated by launch overhead)
_SLICE_PAIRS = 2**28
# on the CPU, a first probe of this many pairs skips rows far over --max-seconds cheaply
_PROBE_PAIRS = 2**23
# a full-size warm-up run is done only when the row is estimated to take at most this long
_FULL_WARMUP_MAX_S = 2.0
# warm-up calls of gpumine on a GPU: the first runs eagerly, the second captures a graph where
# the search has one (their times are kept in the row as ``warmup_samples``)
_GPU_WARMUP_CALLS = 3
_MAX_RUNS = 100  # timed runs of a short row (see --min-row-seconds)
_PHYSICS_REFS, _PHYSICS_MAX_QUERIES, _PHYSICS_D = 32_768, 12_000, 65
_EMBEDDING_REFS, _EMBEDDING_QUERIES, _EMBEDDING_D, _EMBEDDING_K = 100_000, 10_000, 128, 10


def _tau(d: int) -> float:
    """Relative tolerance of 'equal within float32 rounding' for a d-dimensional distance."""
    return (d + 2) * 2.0**-24


# ---------------------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmark row's problem: ``n_query`` queries (all-kNN: the references themselves)."""

    experiment: str
    n_ref: int
    n_query: int
    d: int
    k: int
    all_knn: bool
    data: str  # "uniform", "physics-synthetic" or "physics-real"

    @property
    def key(self) -> tuple:
        """Identity of the problem (equal keys in two experiments are measured once)."""
        return (self.n_ref, self.n_query, self.d, self.k, self.all_knn, self.data)

    @property
    def pairs(self) -> int:
        return self.n_ref * self.n_query


def cases(experiment: str, quick: bool = False, physics_data: str = "physics-synthetic") -> list[Case]:
    """The rows of one experiment (``quick``: tiny sizes for CI smoke runs)."""
    if experiment == "dims":
        n = _QUICK_N if quick else 262_144
        return [Case("dims", n, n, d, K, True, "uniform") for d in (4, 8, 16, 32, 64)]
    if experiment == "refs":
        sizes = [256, 512, _QUICK_N] if quick else [2**p for p in range(13, 21)]
        return [Case("refs", n, n, 8, K, True, "uniform") for n in sizes]
    if experiment == "queries":
        n_ref = _QUICK_N if quick else 32_768
        sizes = [256, 512, 1024] if quick else [2**p for p in range(14, 21)]
        return [Case("queries", n_ref, q, 8, K, False, "uniform") for q in sizes]
    if experiment == "physics":
        n_ref = _QUICK_N if quick else _PHYSICS_REFS
        sizes = range(128, 385, 128) if quick else range(2000, 12_001, 2000)
        return [Case("physics", n_ref, q, _PHYSICS_D, K, False, physics_data) for q in sizes]
    if experiment == "large_k":
        n, k = (_QUICK_N, 128) if quick else (32_768, LARGE_K)
        return [Case("large_k", n, n, 8, k, False, "uniform")]
    if experiment == "embedding":
        n_ref, n_query = (_QUICK_N, 256) if quick else (_EMBEDDING_REFS, _EMBEDDING_QUERIES)
        return [Case("embedding", n_ref, n_query, _EMBEDDING_D, _EMBEDDING_K, False, "uniform")]
    raise ValueError(f"unknown experiment {experiment!r}; expected one of {list(EXPERIMENTS)}")


def _seed(*parts) -> int:
    return zlib.crc32(":".join(map(str, parts)).encode())


def _uniform(n: int, d: int, role: str) -> np.ndarray:
    """Seeded uniform points in [0, 1)^d (the same draw as ``gpumine.datasets.make_uniform``)."""
    return np.random.default_rng(_seed(role, n, d)).random((n, d), dtype=np.float32)


def physics_synthetic(n_rows: int, d: int = _PHYSICS_D, seed: int = 2004) -> np.ndarray:
    """A seeded stand-in for the physics data: two Gaussian classes, heterogeneous feature scales.

    Features have scales 10**U(-1, 2) and offsets of a few scales from the
    origin (physical quantities in mixed units); 30 % of them shift with the class.
    """
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n_rows)
    scale = 10.0 ** rng.uniform(-1, 2, d)
    offset = rng.normal(0.0, 3.0, d) * scale
    shift = rng.normal(0.0, 1.0, d) * (rng.random(d) < 0.3)
    Z = rng.standard_normal((n_rows, d))
    X = (Z + shift * y[:, None]) * scale + offset
    return np.ascontiguousarray(X, dtype=np.float32)


def _physics_columns(X: np.ndarray, n: int) -> list[int]:
    """Choose ``n`` feature columns: first those without the missing-value codes 999/9999 and not constant."""
    missing = np.isin(X, (999.0, 9999.0)).any(axis=0)
    constant = X.min(axis=0) == X.max(axis=0)
    good = [j for j in range(X.shape[1]) if not missing[j] and not constant[j]]
    rest = [j for j in range(X.shape[1]) if j not in set(good)]
    return sorted((good + rest)[:n])


# ---------------------------------------------------------------------------------------
# implementations
# ---------------------------------------------------------------------------------------
def torch_knn(ref: torch.Tensor, query: torch.Tensor, k: int, *, exclude_self: bool = False, budget_bytes: int = 2**30):
    """Plain PyTorch kNN: ``torch.cdist`` + ``torch.topk`` over query chunks (the baseline).

    The chunk holds ``budget_bytes // (16 · n_ref)`` queries (the distance block
    plus top-k scratch, as gpumine's tile plan counts it). With
    ``exclude_self`` the queries are the references and each point's own entry
    is set to +inf before the top-k.
    """
    n_query, n_ref = query.shape[0], ref.shape[0]
    rows = max(1, min(n_query, budget_bytes // (16 * n_ref)))
    dist = torch.empty((n_query, k), dtype=ref.dtype, device=ref.device)
    index = torch.empty((n_query, k), dtype=torch.int64, device=ref.device)
    for q0 in range(0, n_query, rows):
        Q = query[q0 : q0 + rows]
        D = torch.cdist(Q, ref)
        if exclude_self:
            i = torch.arange(Q.shape[0], device=D.device)
            D[i, i + q0] = float("inf")
        v, j = torch.topk(D, k, dim=1, largest=False)
        dist[q0 : q0 + rows] = v
        index[q0 : q0 + rows] = j
        del D
    return dist, index


def sklearn_knn(ref: np.ndarray, query: np.ndarray | None, k: int, *, exclude_self: bool = False):
    """scikit-learn brute-force kNN on all cores (``query=None`` with ``exclude_self``: all-kNN)."""
    from sklearn.neighbors import NearestNeighbors

    nn = NearestNeighbors(n_neighbors=k, algorithm="brute", n_jobs=-1).fit(ref)
    return nn.kneighbors(None if exclude_self else query)


def faiss_knn(ref: np.ndarray, query: np.ndarray | None, k: int, *, exclude_self: bool = False):
    """faiss-cpu exact L2 search; all-kNN searches k + 1 and drops each point itself."""
    import faiss

    index = faiss.IndexFlatL2(ref.shape[1])
    index.add(ref)
    if not exclude_self:
        D, I = index.search(query, k)
    else:
        n = ref.shape[0]
        D, I = index.search(ref, k + 1)
        own = I == np.arange(n)[:, None]
        own[~own.any(axis=1), -1] = True  # self not returned (duplicates): drop the farthest
        keep = ~own
        D, I = D[keep].reshape(n, k), I[keep].reshape(n, k)
    return np.sqrt(np.maximum(D, 0)), I


def _gpumine_knn(ref, query, k, *, exclude_self, device, working_memory, backend="auto"):
    from gpumine.neighbors import kneighbors

    return kneighbors(ref, None if exclude_self else query, k, device=device, working_memory=working_memory,
                      verbose=0, backend=backend)


@contextlib.contextmanager
def _engine_stats(stats: dict):
    """Collect the kNN engine's counters (rows redone by the exact scan, tile plan) during one call."""
    try:
        api = importlib.import_module("gpumine.neighbors._api")
        original = getattr(api, "knn_search", None)
        wants = original is not None and "stats" in inspect.signature(original).parameters
    except Exception:  # noqa: BLE001 - counters are optional
        wants = False
    if not wants:
        yield
        return

    def counted(*args, **kwargs):
        if kwargs.get("stats") is None:  # the routes pass theirs (None) by name
            kwargs["stats"] = stats
        return original(*args, **kwargs)

    # kneighbors calls it from the API module, the estimators through the engine's routes
    routes = importlib.import_module("gpumine.neighbors.engine._routes")
    api.knn_search = routes.knn_search = counted
    try:
        yield
    finally:
        api.knn_search = routes.knn_search = original


# ---------------------------------------------------------------------------------------
# exact reference and recall
# ---------------------------------------------------------------------------------------
def reference_kth(ref: np.ndarray, queries: np.ndarray, k: int, self_ids: np.ndarray | None, device) -> np.ndarray:
    """Exact float64 distance to the k-th nearest reference of each query (brute force, direct differences).

    ``self_ids`` (all-kNN) gives each query's own reference row, which is excluded.
    """
    device = torch.device(device)
    R = torch.as_tensor(ref).to(device=device, dtype=torch.float64)
    Q = torch.as_tensor(queries).to(device=device, dtype=torch.float64)
    s, n = Q.shape[0], R.shape[0]
    chunk = max(k, 2**25 // max(1, s))  # s x chunk float64 <= 256 MiB
    own = None if self_ids is None else torch.as_tensor(self_ids, device=device)
    best = torch.empty((s, 0), dtype=torch.float64, device=device)
    for r0 in range(0, n, chunk):
        D = torch.cdist(Q, R[r0 : r0 + chunk], compute_mode="donot_use_mm_for_euclid_dist")
        if own is not None:
            col = own - r0
            rows = ((col >= 0) & (col < D.shape[1])).nonzero().squeeze(1)
            D[rows, col[rows]] = float("inf")
        both = torch.cat([best, D], dim=1)
        best = torch.topk(both, min(k, both.shape[1]), dim=1, largest=False, sorted=True).values
    return best[:, k - 1].cpu().numpy()


def recall_at_k(
    indices: np.ndarray,
    distances: np.ndarray | None,
    ref: np.ndarray,
    queries: np.ndarray,
    kth: np.ndarray,
    self_ids: np.ndarray | None = None,
) -> tuple[float, float | None]:
    """Recall@k of returned neighbours against the float64 reference, and the worst distance error.

    A returned neighbour counts as found when its index is valid (in range,
    not repeated in the row, not the query itself for all-kNN) and its exact
    float64 distance is at most ``kth · (1 + (d + 2)·2⁻²⁴)`` (ties with the
    k-th reference distance within float32 rounding count as found). The
    distance error is ``max |returned − exact| / kth`` over valid entries.

    Examples
    --------
    >>> ref = np.array([[0.0], [1.0], [2.0], [3.0]])
    >>> q = np.array([[0.1]])
    >>> recall_at_k(np.array([[0, 1]]), np.array([[0.1, 0.9]]), ref, q, np.array([0.9]))
    (1.0, 0.0)
    >>> recall_at_k(np.array([[0, 2]]), None, ref, q, np.array([0.9]))[0]
    0.5
    """
    idx = np.asarray(indices, dtype=np.int64)
    s, k = idx.shape
    n_ref, d = ref.shape
    valid = (idx >= 0) & (idx < n_ref)
    if self_ids is not None:
        valid &= idx != np.asarray(self_ids)[:, None]
    order = np.argsort(idx, axis=1, kind="stable")
    srt = np.take_along_axis(idx, order, axis=1)
    dup_sorted = np.zeros_like(valid)
    dup_sorted[:, 1:] = srt[:, 1:] == srt[:, :-1]
    dup = np.zeros_like(valid)
    np.put_along_axis(dup, order, dup_sorted, axis=1)
    valid &= ~dup
    exact = np.empty((s, k), dtype=np.float64)
    step = max(1, 2**22 // max(1, k * d))
    safe = np.clip(idx, 0, max(n_ref - 1, 0))
    for a in range(0, s, step):
        diff = ref[safe[a : a + step]].astype(np.float64) - queries[a : a + step, None, :].astype(np.float64)
        exact[a : a + step] = np.sqrt(np.einsum("skd,skd->sk", diff, diff))
    kth = np.asarray(kth, dtype=np.float64)
    found = valid & (exact <= kth[:, None] * (1.0 + _tau(d)))
    recall = float(found.sum()) / float(s * k)
    err = None
    if distances is not None and valid.any():
        dist = np.asarray(distances, dtype=np.float64)
        scale = np.maximum(kth, np.finfo(np.float64).tiny)[:, None]
        err = float(np.max(np.abs(dist - exact)[valid] / np.broadcast_to(scale, (s, k))[valid]))
    return recall, err


@dataclasses.dataclass
class _Reference:
    rows: np.ndarray  # sampled query rows
    kth: np.ndarray  # their exact float64 k-th distances


# ---------------------------------------------------------------------------------------
# the runner
# ---------------------------------------------------------------------------------------
class _Data:
    """A case's arrays in host memory, with device copies made on first use."""

    def __init__(self, ref: np.ndarray, query: np.ndarray | None, device: torch.device):
        self.ref, self.query, self.device = ref, query, device
        self._dev: dict[str, torch.Tensor] = {}

    def queries(self) -> np.ndarray:
        return self.ref if self.query is None else self.query

    def on_device(self, which: str) -> torch.Tensor:
        """``"ref"`` or ``"query"`` (the references for all-kNN) as a tensor on the device."""
        if which == "query" and self.query is None:
            which = "ref"
        if which not in self._dev:
            array = self.ref if which == "ref" else self.query
            self._dev[which] = torch.from_numpy(array).to(self.device)
        return self._dev[which]


class KnnBench:
    """Runs cases, keeps rows, writes results. One instance per ``main()`` call."""

    def __init__(self, args, device: torch.device, out_json: Path | None, out_md: Path | None, argv=None):
        from gpumine.config import working_memory_bytes

        self.args = args
        self.device = device
        self.out_json, self.out_md = out_json, out_md
        self.budget_bytes = working_memory_bytes(args.working_memory, device)
        self.start = time.perf_counter()
        self.deadline = None if args.time_budget is None else self.start + args.time_budget
        self._rows: dict[tuple, dict] = {}
        self._measured: dict[tuple, dict] = {}
        self._references: dict[tuple, _Reference] = {}
        self._physics = None
        self._rates: dict[tuple, float] = {}
        self._warmed: set[str] = set()
        self.failures = 0
        self.meta = environment(device)
        self.meta.update(
            argv=list(sys.argv[1:] if argv is None else argv),
            benchmark="knn",
            seed_paper="000 CUKNN (Liang et al. 2010), experiments of section 5 with k = 7",
            quick=bool(args.quick),
            repeats=args.repeats,
            row_seconds=args.row_seconds,
            min_row_seconds=args.min_row_seconds,
            max_seconds=args.max_seconds,
            time_budget=args.time_budget,
            working_memory_bytes=self.budget_bytes,
            recall_sample=args.sample,
            recall_definition=(
                "fraction of the k returned neighbours (valid, distinct, not the query itself for all-kNN) whose "
                "exact float64 distance is <= the float64 reference k-th distance * (1 + (d+2)*2^-24); reference by "
                "float64 brute force (direct differences) on <= recall_sample sampled query rows"
            ),
            ratio_definition="ratio_vs_torch = torch seconds / this row's seconds (> 1: faster than plain PyTorch)",
            timing=(
                "wall clock from call to usable result, GPU synchronised before and after; warm-up first "
                "(full size, or a query slice for rows estimated over 2 s; with --quick only the first row of "
                "each implementation); median of `repeats` runs, "
                "stopping once `row_seconds` are spent, and of more runs for short rows until `min_row_seconds` "
                f"are spent (at most {_MAX_RUNS})"
            ),
            torch_baseline="torch.cdist + torch.topk(largest=False), float32, query chunks of "
            "working_memory_bytes // (16 * n_ref) rows, own entry set to +inf for all-kNN",
            impls={name: IMPL_LABELS[name] for name in IMPLS},
            experiments={},
            peers_unavailable={},
        )

    # -- bookkeeping -------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def log(self, message: str) -> None:
        print(message, flush=True)

    def rows(self) -> list[dict]:
        rows = [dict(self._rows[key]) for key in sorted(self._rows)]
        torch_time = {
            (r["experiment"], r["n_ref"], r["n_query"], r["d"], r["k"], r["all_knn"]): r["seconds"]
            for r in rows
            if r["impl"] == "torch" and r["seconds"]
        }
        for r in rows:
            t = torch_time.get((r["experiment"], r["n_ref"], r["n_query"], r["d"], r["k"], r["all_knn"]))
            r["ratio_vs_torch"] = None if (t is None or not r["seconds"]) else t / r["seconds"]
        return rows

    def results(self) -> dict:
        meta = dict(self.meta, total_seconds=round(self.elapsed(), 1))
        return {"meta": meta, "rows": self.rows()}

    def save(self) -> None:
        results = self.results()
        if self.out_json is not None:
            write_json(self.out_json, results)
        if self.out_md is not None:
            write_text(self.out_md, render_markdown(results))

    # -- data --------------------------------------------------------------------------
    def physics(self) -> tuple[np.ndarray, np.ndarray]:
        """(references, queries) of the physics experiment, loaded or generated once."""
        if self._physics is None:
            n_ref = _QUICK_N if self.args.quick else _PHYSICS_REFS
            n_q = 384 if self.args.quick else _PHYSICS_MAX_QUERIES
            if self.args.physics:
                from gpumine.datasets import load_physics

                X, _ = load_physics(self.args.physics)
                if X.shape[0] < n_ref + n_q:
                    raise ValueError(
                        f"--physics {self.args.physics} has {X.shape[0]} rows; the experiment needs "
                        f"{n_ref + n_q} ({n_ref} references + {n_q} queries)"
                    )
                cols = _physics_columns(X, _PHYSICS_D)
                n_features = X.shape[1]
                X = np.ascontiguousarray(X[:, cols])
                source = (
                    f"real KDD Cup 2004 phy_train.dat ({self.args.physics}): references = rows 0..{n_ref - 1}, "
                    f"queries = the next rows; {len(cols)} of {n_features} feature columns "
                    f"(those without the 999/9999 missing-value codes first): {cols}"
                )
                self.meta["physics_columns"] = cols
            else:
                X = physics_synthetic(n_ref + n_q)
                source = (
                    f"synthetic, matched to the physics shape ({n_ref:,} × {_PHYSICS_D} references, up to "
                    f"{n_q:,} queries): two Gaussian classes, feature scales 10^U(-1,2), offsets ~3 scales "
                    "(pass --physics PATH/phy_train.dat for the real data)"
                )
            self.meta["physics_data"] = source
            self._physics = (X[:n_ref], X[n_ref : n_ref + n_q])
        return self._physics

    def data(self, case: Case) -> _Data:
        if case.data == "uniform":
            ref = _uniform(case.n_ref, case.d, "ref")
            query = None if case.all_knn else _uniform(case.n_query, case.d, "query")
        else:
            ref, queries = self.physics()
            query = np.ascontiguousarray(queries[: case.n_query])
        return _Data(ref, query, self.device)

    def reference(self, case: Case, data: _Data) -> _Reference:
        if case.key not in self._references:
            s = min(self.args.sample, case.n_query)
            rng = np.random.default_rng(_seed("sample", *case.key))
            rows = np.sort(rng.choice(case.n_query, size=s, replace=False))
            kth = reference_kth(data.ref, data.queries()[rows], case.k, rows if case.all_knn else None, self.device)
            self._references[case.key] = _Reference(rows, kth)
        return self._references[case.key]

    # -- one implementation on one case -------------------------------------------------
    def _runner(self, impl: str, case: Case, data: _Data, n_slice: int | None = None) -> Callable[[], tuple]:
        """A zero-argument call that runs ``impl`` on the case (or on its first ``n_slice`` queries)."""
        k, all_knn = case.k, case.all_knn and n_slice is None
        wm = self.args.working_memory
        if impl in ("gpumine-device", "gpumine-triton", "torch"):
            ref = data.on_device("ref")
            query = data.on_device("query")[:n_slice] if n_slice else (None if all_knn else data.on_device("query"))
            if impl == "torch":
                q = ref if query is None else query
                return lambda: torch_knn(ref, q, k, exclude_self=all_knn, budget_bytes=self.budget_bytes)
            backend = "triton" if impl == "gpumine-triton" else "auto"
            return lambda: _gpumine_knn(ref, query, k, exclude_self=all_knn, device=self.device, working_memory=wm, backend=backend)
        if impl == "gpumine-fitted":
            from gpumine.neighbors import NearestNeighbors

            index = NearestNeighbors(n_neighbors=k, device=self.device, working_memory=wm).fit(data.ref)
            query = data.on_device("query")[:n_slice] if n_slice else data.on_device("query")
            return lambda: index.kneighbors(query)
        ref = data.ref
        query = np.ascontiguousarray(data.queries()[:n_slice]) if n_slice else data.query
        if impl == "gpumine-host":
            return lambda: _gpumine_knn(ref, query, k, exclude_self=all_knn, device=self.device, working_memory=wm)
        if impl == "sklearn":
            return lambda: sklearn_knn(ref, query, k, exclude_self=all_knn)
        if impl == "faiss":
            return lambda: faiss_knn(ref, query, k, exclude_self=all_knn)
        raise ValueError(f"unknown implementation {impl!r}")

    def _row(self, case: Case, impl: str, **fields) -> dict:
        row = {
            "experiment": case.experiment,
            "n_ref": case.n_ref,
            "n_query": case.n_query,
            "d": case.d,
            "k": case.k,
            "all_knn": case.all_knn,
            "data": case.data,
            "impl": impl,
            "seconds": None,
            "recall": None,
            "ratio_vs_torch": None,
            "note": "",
        }
        row.update(fields)
        return row

    def measure(self, case: Case, impl: str, data: _Data) -> dict:
        """Time one implementation on one case; a row (skipped or failed rows say why in ``note``)."""
        if impl == "gpumine-triton":
            from gpumine.core.distance import get_metric
            from gpumine.neighbors.engine import fused_unsupported

            why = fused_unsupported(get_metric("euclidean"), torch.float32, case.k, case.n_ref)
            if why:
                return self._row(case, impl, note=f"n/a: {why}")
        if impl == "gpumine-fitted" and case.all_knn:
            return self._row(case, impl, note="n/a: all-kNN (the fitted row is for queries against an index)")
        cached = self._measured.get((case.key, impl))
        if cached is not None:
            row = dict(cached, experiment=case.experiment)
            row["reused_from"] = cached["experiment"]
            return row
        args = self.args
        if self.deadline is not None and time.perf_counter() >= self.deadline:
            return self._row(case, impl, note=f"skipped: time budget of {args.time_budget:g} s spent")
        try:
            row = self._measure(case, impl, data)
        except Exception as exc:  # noqa: BLE001 - one failing row must not lose the others
            self.failures += impl.startswith("gpumine")
            row = self._row(case, impl, note=f"failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        finally:
            self._release(case)
        if row["seconds"] is not None:
            self._measured[(case.key, impl)] = row
        return row

    def _measure(self, case: Case, impl: str, data: _Data) -> dict:
        args, device = self.args, self.device
        estimate = None
        rate = self._rates.get((impl, case.d, case.k))
        if rate is not None and rate * case.pairs > 4 * args.max_seconds:
            # far beyond the limit by the rate of a smaller row: skip without timing a slice
            return self._row(case, impl, note=f"skipped: estimated {_fmt_estimate(rate * case.pairs)} (> --max-seconds {args.max_seconds:g}) from a smaller row")
        on_gpu = device.type == "cuda" and impl in ("gpumine-device", "gpumine-fitted", "gpumine-triton", "gpumine-host", "torch")
        slice_pairs = _SLICE_PAIRS * (8 if on_gpu else 1)
        if case.pairs > slice_pairs and not on_gpu and case.pairs > 16 * _PROBE_PAIRS:
            # CPU: a small probe first, so that rows far over the limit cost little to skip
            m = max(16, _PROBE_PAIRS // case.n_ref)
            probe = self._runner(impl, case, data, n_slice=m)
            time_call(probe, device)
            t_probe, _ = time_call(probe, device)
            rough = t_probe * case.n_query / m
            if rough > 4 * args.max_seconds:
                return self._row(case, impl, note=f"skipped: estimated {_fmt_estimate(rough)} (> --max-seconds {args.max_seconds:g}) from a {m:,}-query probe")
        if case.pairs > slice_pairs:
            m = max(64, min(case.n_query, slice_pairs // case.n_ref))
            sliced = self._runner(impl, case, data, n_slice=m)
            time_call(sliced, device)  # warm-up: compilation, caches, thread pools
            t_slice, _ = time_call(sliced, device)
            estimate = t_slice * case.n_query / m
            if t_slice >= 0.25:
                self._note_rate(impl, case, estimate)
            if estimate > args.max_seconds:
                return self._row(case, impl, note=f"skipped: estimated {_fmt_estimate(estimate)} (> --max-seconds {args.max_seconds:g}) from a {m:,}-query slice")
        if self.deadline is not None and estimate is not None and time.perf_counter() + estimate > self.deadline:
            return self._row(case, impl, note=f"skipped: estimated {_fmt_estimate(estimate)} would overrun the time budget of {args.time_budget:g} s")
        run = self._runner(impl, case, data)
        # --quick warms each implementation up once (its rows are too small for one-off costs to matter)
        warm = not (args.quick and impl in self._warmed)
        first_calls = []
        if warm and (estimate is None or estimate <= _FULL_WARMUP_MAX_S):
            # gpumine on a GPU captures a graph on a shape's second call (see
            # gpumine.neighbors.engine._graphs): warmed up to that point, and the calls' times kept
            for _ in range(_GPU_WARMUP_CALLS if impl.startswith("gpumine") and on_gpu else 1):
                t, out = time_call(run, device)
                first_calls.append(round(t, 6))
                del out
        self._warmed.add(impl)
        samples: list[float] = []
        stats: dict = {}
        out = None
        while True:
            out = None
            t, out = time_call(run, device)
            samples.append(t)
            if sum(samples) >= args.row_seconds:
                break
            # short rows go on past --repeats to --min-row-seconds: a few ms call is moved by the
            # host's state (other threads winding down, clocks), which a handful of runs leaves in the median
            if len(samples) >= max(1, args.repeats) and (sum(samples) >= args.min_row_seconds or len(samples) >= _MAX_RUNS):
                break
            if self.deadline is not None and time.perf_counter() + t > self.deadline:
                break
        if impl.startswith("gpumine") and (self.deadline is None or time.perf_counter() + samples[-1] <= self.deadline):
            # the engine's counters from one more call, untimed: asking for them adds host waits
            del out
            with _engine_stats(stats):
                out = run()
        seconds = median(samples)
        self._note_rate(impl, case, seconds)
        dist, idx = out
        expected = (case.n_query, case.k)
        if tuple(idx.shape) != expected:
            return self._row(case, impl, seconds=seconds, note=f"failed: result shape {tuple(idx.shape)}, expected {expected}")
        ref_info = self.reference(case, data)
        idx_s, dist_s = _sample_rows(idx, ref_info.rows), _sample_rows(dist, ref_info.rows)
        del out, dist, idx
        recall, err = recall_at_k(
            idx_s, dist_s, data.ref, data.queries()[ref_info.rows], ref_info.kth,
            ref_info.rows if case.all_knn else None,
        )
        notes = []
        if estimate is not None and estimate > _FULL_WARMUP_MAX_S:
            notes.append("warm-up on a query slice")
        if stats.get("rows_exact_scan"):
            notes.append(f"exact scan redid {stats['rows_exact_scan']:,} of {case.n_query:,} rows")
        row = self._row(case, impl, seconds=seconds, recall=recall, note="; ".join(notes))
        row.update(runs=len(samples), samples=[round(t, 6) for t in samples], max_dist_err=err, warmup_samples=first_calls)
        if stats:
            row["stats"] = {k: (v if isinstance(v, (int, float, str, bool)) or v is None else str(v)) for k, v in stats.items()}
        return row

    def _note_rate(self, impl: str, case: Case, seconds: float) -> None:
        """Remember the lowest seconds per distance pair seen for (impl, d, k)."""
        if seconds < 0.25:  # small rows are dominated by fixed costs: their rate would overestimate
            return
        key = (impl, case.d, case.k)
        rate = seconds / max(1, case.pairs)
        self._rates[key] = min(rate, self._rates.get(key, rate))

    def _release(self, case: Case) -> None:
        """Give memory back between measurements of large rows (a full gc is too slow for small ones)."""
        if case.pairs >= _SLICE_PAIRS:
            gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # -- a case: every implementation ----------------------------------------------------
    def run_case(self, index: int, case: Case, impls: list[str]) -> list[dict]:
        data = self.data(case)
        rows = []
        for impl in impls:
            row = self.measure(case, impl, data)
            self._rows[(list(EXPERIMENTS).index(case.experiment), index, IMPLS.index(impl))] = row
            self.log(f"[{self.elapsed():5.0f} s] " + _describe(row))
            rows.append(row)
        del data
        self._release(case)
        self.save()
        return rows

    def experiment_cases(self, name: str) -> list[Case]:
        physics_data = "physics-real" if self.args.physics else "physics-synthetic"
        self.meta["experiments"][name] = (QUICK_TITLES if self.args.quick else EXPERIMENTS)[name]
        if name == "physics" and self._physics is None:
            self.physics()
            self.log(f"[physics] data: {self.meta['physics_data']}")
        return cases(name, self.args.quick, physics_data)

    def run_experiment(self, name: str, impls: list[str]) -> list[dict]:
        rows = []
        for i, case in enumerate(self.experiment_cases(name)):
            rows += self.run_case(i, case, impls)
        return rows

    def run_cheapest_first(self, names: list[str], impls: list[str]) -> list[dict]:
        """All cases of the experiments, smallest work first (so a time budget cuts the largest rows)."""
        todo = [(name, i, case) for name in names for i, case in enumerate(self.experiment_cases(name))]
        todo.sort(key=lambda t: t[2].pairs * (t[2].d + 4 * math.log2(t[2].k + 1)))
        rows = []
        for _name, i, case in todo:
            rows += self.run_case(i, case, impls)
        return rows


def _fmt_estimate(seconds: float) -> str:
    return f"{seconds:,.0f} s" if seconds >= 100 else f"{seconds:.3g} s"


def _sample_rows(values, rows: np.ndarray) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        return values[torch.as_tensor(rows, device=values.device)].cpu().numpy()
    return np.asarray(values)[rows]


def _describe(row: dict) -> str:
    shape = f"n_ref={row['n_ref']:,} " + ("all-kNN" if row["all_knn"] else f"n_query={row['n_query']:,}")
    head = f"[{row['experiment']}] {shape} d={row['d']} k={row['k']}  {row['impl']:<15s}"
    if row["seconds"] is None:
        return f"{head} {row['note']}"
    recall = "" if row["recall"] is None else f"  recall {row['recall']:.4f}"
    runs = f" ({row.get('runs', 1)} run{'s' if row.get('runs', 1) != 1 else ''})"
    reused = f" (= {row['reused_from']} row)" if row.get("reused_from") else ""
    note = f"  [{row['note']}]" if row["note"] else ""
    return f"{head} {format_seconds(row['seconds']):>9s}{runs}{reused}{recall}{note}"


# experiment functions (one per experiment of the paper) --------------------------------
def experiment_dims(bench: KnnBench, impls) -> list[dict]:
    """Experiment 1 (paper Fig. 5): all-kNN of 262,144 uniform points for d = 4, 8, 16, 32, 64."""
    return bench.run_experiment("dims", list(impls))


def experiment_refs(bench: KnnBench, impls) -> list[dict]:
    """Experiment 2 (paper Figs. 6-7): all-kNN of 8K … 1M uniform points at d = 8."""
    return bench.run_experiment("refs", list(impls))


def experiment_queries(bench: KnnBench, impls) -> list[dict]:
    """Experiment 3 (paper Fig. 8): 16K … 1M queries against 32,768 references at d = 8."""
    return bench.run_experiment("queries", list(impls))


def experiment_physics(bench: KnnBench, impls) -> list[dict]:
    """Experiment 4 (paper Table 1): 2,000 … 12,000 queries against 32,768 × 65 physics references."""
    return bench.run_experiment("physics", list(impls))


def experiment_large_k(bench: KnnBench, impls) -> list[dict]:
    """Experiment 5 (not in the paper): a large k, k = 2048 on 32,768 × 32,768 at d = 8."""
    return bench.run_experiment("large_k", list(impls))


def experiment_embedding(bench: KnnBench, impls) -> list[dict]:
    """Experiment 6 (not in the paper): an embedding-like search, 10,000 × 100,000 at d = 128, k = 10."""
    return bench.run_experiment("embedding", list(impls))


EXPERIMENT_FUNCTIONS = {
    "dims": experiment_dims,
    "refs": experiment_refs,
    "queries": experiment_queries,
    "physics": experiment_physics,
    "large_k": experiment_large_k,
    "embedding": experiment_embedding,
}


# ---------------------------------------------------------------------------------------
# rendering
# ---------------------------------------------------------------------------------------
# (label, experiment, n_ref, n_query, d, k, impl, goal seconds or None for "not slower than torch")
TARGETS = (
    ("all-kNN 262,144 × d = 8 ≤ 40 ms", "dims", 262_144, 262_144, 8, 7, "gpumine-device", 0.040),
    ("all-kNN 262,144 × d = 64 ≤ 160 ms", "dims", 262_144, 262_144, 64, 7, "gpumine-device", 0.160),
    ("1,048,576 queries × 32,768 refs, d = 8 ≤ 25 ms", "queries", 32_768, 1_048_576, 8, 7, "gpumine-device", 0.025),
    ("12,000 × 32,768 × 65, host NumPy → host ≤ 3 ms", "physics", 32_768, 12_000, 65, 7, "gpumine-host", 0.003),
    ("all-kNN 1,048,576, d = 8 ≤ 0.6 s", "refs", 1_048_576, 1_048_576, 8, 7, "gpumine-device", 0.6),
    ("k = 2048 not slower than PyTorch", "large_k", 32_768, 32_768, 8, 2048, "gpumine-device", None),
    ("10,000 × 100,000 × 128, k = 10 ≤ 6 ms (on an H100)", "embedding", 100_000, 10_000, 128, 10, "gpumine-device", 0.006),
)


def _cell(row: dict | None) -> str:
    if row is None:
        return ""
    if row["seconds"] is None:
        return "failed" if row["note"].startswith("failed") else "skipped"
    ratio = "" if row.get("ratio_vs_torch") is None else f" ×{row['ratio_vs_torch']:.2f}"
    recall = "" if row.get("recall") is None else f" · {row['recall']:.4f}"
    return f"{format_seconds(row['seconds'])}{ratio}{recall}"


def render_markdown(results: dict) -> str:
    """The results as markdown: a header with the device and versions, one table per experiment, targets."""
    meta, rows = results.get("meta", {}), results.get("rows", [])
    versions = meta.get("versions", {})
    out = ["## Exact kNN (CUKNN experiments)", ""]
    device = meta.get("device_name") or meta.get("device", "?")
    vers = ", ".join(f"{name} {v}" for name, v in versions.items() if v)
    out.append(f"Device: **{device}** ({meta.get('device', '?')}); {meta.get('cpu_count', '?')} CPU cores ({meta.get('cpu', '?')}). Date: {meta.get('date', '?')}.")
    out.append(f"Versions: {vers}.")
    if meta.get("quick"):
        out.append("**Quick smoke run (tiny sizes): not a measurement to quote.**")
    unavailable = meta.get("peers_unavailable") or {}
    if unavailable:
        out.append("Not run: " + "; ".join(f"{name} ({why})" for name, why in unavailable.items()) + ".")
    out += [
        "",
        "Each cell: median time · speed-up over plain PyTorch (×, > 1 is faster) · recall@k against an exact "
        f"float64 brute force on ≤ {meta.get('recall_sample', 1000):,} sampled queries. "
        "gpumine (device): inputs already on the device; gpumine (host): NumPy in, NumPy out, copies included.",
        "",
    ]
    experiments = meta.get("experiments") or {}
    names = [e for e in EXPERIMENTS if any(r["experiment"] == e for r in rows)]
    for number, name in enumerate(EXPERIMENTS, 1):
        if name not in names:
            continue
        sub = [r for r in rows if r["experiment"] == name]
        impls = [i for i in IMPLS if any(r["impl"] == i for r in sub)]
        out.append(f"### {number}. {experiments.get(name, EXPERIMENTS[name])}")
        if name == "physics" and meta.get("physics_data"):
            out.append("")
            out.append(f"Data: {meta['physics_data']}.")
        out.append("")
        out.append("| n_ref | n_query | d | k | " + " | ".join(IMPL_LABELS[i] for i in impls) + " |")
        out.append("|---:|---:|---:|---:|" + "---|" * len(impls))
        shapes: list[tuple] = []
        for r in sub:
            shape = (r["n_ref"], r["n_query"], r["d"], r["k"], r.get("all_knn", False))
            if shape not in shapes:
                shapes.append(shape)
        notes = []
        for shape in shapes:
            by_impl = {r["impl"]: r for r in sub if (r["n_ref"], r["n_query"], r["d"], r["k"], r.get("all_knn", False)) == shape}
            n_ref, n_query, d, k, all_knn = shape
            cells = [format_count(n_ref), "all-kNN" if all_knn else format_count(n_query), str(d), str(k)]
            cells += [_cell(by_impl.get(i)) for i in impls]
            out.append("| " + " | ".join(cells) + " |")
            for i in impls:
                r = by_impl.get(i)
                if r is not None and r.get("note"):
                    where = f"n_ref = {n_ref:,}, " + ("all-kNN" if all_knn else f"n_query = {n_query:,}") + f", d = {d}, k = {k}"
                    notes.append(f"- {IMPL_LABELS[i]}, {where}: {r['note']}")
        if notes:
            out.append("")
            out += notes
        out.append("")
    targets = _render_targets(rows)
    if targets:
        out += targets
    return "\n".join(out).rstrip() + "\n"


def _render_targets(rows: list[dict]) -> list[str]:
    def find(exp, n_ref, n_query, d, k, impl):
        for r in rows:
            if (r["experiment"], r["n_ref"], r["n_query"], r["d"], r["k"], r["impl"]) == (exp, n_ref, n_query, d, k, impl):
                return r
        return None

    lines = []
    for label, exp, n_ref, n_query, d, k, impl, goal in TARGETS:
        r = find(exp, n_ref, n_query, d, k, impl)
        if r is None:
            continue
        if r["seconds"] is None:
            status = "not measured"
        elif goal is None:
            ratio = r.get("ratio_vs_torch")
            status = "—" if ratio is None else ("met" if ratio >= 1 else "missed")
        else:
            status = "met" if r["seconds"] <= goal else f"missed ({r['seconds'] / goal:.1f}× the goal)"
        if r.get("recall") is not None and r["recall"] < 1:
            status += f", recall {r['recall']:.4f} < 1"
        ratio = "" if r.get("ratio_vs_torch") is None else f"×{r['ratio_vs_torch']:.2f}"
        lines.append(f"| {label} | {IMPL_LABELS[impl]} | {format_seconds(r['seconds'])} | {ratio} | {status} |")
    slower = [
        r for r in rows
        if r["impl"] == "gpumine-device" and r.get("ratio_vs_torch") is not None and r["ratio_vs_torch"] < 1
    ]
    inexact = [r for r in rows if r["impl"].startswith("gpumine") and r.get("recall") is not None and r["recall"] < 1]
    if not lines and not slower and not inexact:
        return []
    out = ["### Targets and exactness checks", ""]
    if lines:
        out += ["| target | implementation | time | vs PyTorch | status |", "|---|---|---:|---:|---|"] + lines + [""]
    measured = [r for r in rows if r["impl"] == "gpumine-device" and r.get("ratio_vs_torch") is not None]
    out.append(
        f"- gpumine (device) slower than plain PyTorch on {len(slower)} of {len(measured)} rows"
        + ("." if not slower else ": " + "; ".join(
            f"{r['experiment']} n_ref={r['n_ref']:,} n_query={r['n_query']:,} d={r['d']} k={r['k']} (×{r['ratio_vs_torch']:.2f})"
            for r in slower))
    )
    out.append(
        "- gpumine recall below 1: "
        + ("none." if not inexact else "; ".join(
            f"{r['impl']} {r['experiment']} n_ref={r['n_ref']:,} n_query={r['n_query']:,} d={r['d']}: {r['recall']:.6f}"
            for r in inexact))
    )
    return out + [""]


def plot_results(results: dict, folder, stem: str = "knn") -> list[Path]:
    """Time vs d (experiment 1) and time vs n (experiments 2-4) as PNGs in ``folder``.

    Returns the files written; an empty list when matplotlib does not import
    or there is nothing to plot.
    """
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001 - plots are optional
        return []
    rows = [r for r in results.get("rows", []) if r.get("seconds")]
    written = []
    panels_d = [("dims", "d", "all-kNN, n = 262,144, k = 7", "dimensions d")]
    panels_n = [
        ("refs", "n_ref", "all-kNN, d = 8, k = 7", "points n"),
        ("queries", "n_query", "32,768 references, d = 8, k = 7", "queries"),
        ("physics", "n_query", "32,768 × 65 references, k = 7", "queries"),
    ]
    if results.get("meta", {}).get("quick"):
        panels_d = [(e, x, QUICK_TITLES[e], xl) for e, x, _, xl in panels_d]
        panels_n = [(e, x, QUICK_TITLES[e], xl) for e, x, _, xl in panels_n]
    device = results.get("meta", {}).get("device_name", "")
    for suffix, panels in (("time_vs_d", panels_d), ("time_vs_n", panels_n)):
        panels = [p for p in panels if any(r["experiment"] == p[0] for r in rows)]
        if not panels:
            continue
        fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
        for ax, (exp, xkey, title, xlabel) in zip(axes[0], panels):
            for impl in IMPLS:
                pts = sorted((r[xkey], r["seconds"]) for r in rows if r["experiment"] == exp and r["impl"] == impl)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=IMPL_LABELS[impl])
            if exp != "physics":  # the paper's physics table steps linearly in queries
                ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel(xlabel)
            ax.set_ylabel("seconds (median)")
            ax.set_title(title, fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
        axes[0][0].legend(fontsize=8)
        fig.suptitle(f"gpumine exact kNN — {device}", fontsize=11)
        written.append(save_figure(fig, Path(folder) / f"{stem}_{suffix}.png"))
        plt.close(fig)
    return written


# ---------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------
def _parse_experiments(text: str) -> list[str]:
    if text.strip().lower() in ("all", ""):
        return list(EXPERIMENTS)
    chosen = []
    for part in text.split(","):
        part = part.strip().lower().replace("-", "_")
        name = _EXPERIMENT_NUMBERS.get(part, part)
        if name not in EXPERIMENTS:
            raise argparse.ArgumentTypeError(
                f"unknown experiment {part!r}; use names {', '.join(EXPERIMENTS)} or numbers 1-{len(EXPERIMENTS)}"
            )
        if name not in chosen:
            chosen.append(name)
    return sorted(chosen, key=list(EXPERIMENTS).index)


def _parse_peers(text: str) -> list[str]:
    if text.strip().lower() in ("", "none"):
        return []
    chosen = []
    for part in text.split(","):
        part = part.strip().lower()
        part = {"scikit-learn": "sklearn", "pytorch": "torch", "faiss-cpu": "faiss"}.get(part, part)
        if part not in PEERS:
            raise argparse.ArgumentTypeError(f"unknown peer {part!r}; choose from {', '.join(PEERS)} (or 'none')")
        if part not in chosen:
            chosen.append(part)
    return chosen


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Exact kNN benchmark: the CUKNN paper's experiments (k = 7), gpumine side by side with plain "
        "PyTorch, scikit-learn and faiss-cpu, with recall against a float64 reference.",
        formatter_class=DefaultsHelpFormatter,
    )
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--quick", action="store_true", help="tiny sizes (CI smoke run; every row well under a second on a CPU)")
    p.add_argument("--experiments", type=_parse_experiments, default=list(EXPERIMENTS),
                   help="comma-separated subset: " + ", ".join(f"{i + 1}={e}" for i, e in enumerate(EXPERIMENTS)) + ", or all")
    p.add_argument("--peers", type=_parse_peers, default=list(PEERS), help="comma-separated peers to time: torch,sklearn,faiss or none")
    p.add_argument("--out", type=Path, help="results JSON (written atomically after every row; PNG plots go beside it)")
    p.add_argument("--markdown", type=Path, help="markdown table for BENCHMARKS.md")
    p.add_argument("--out-dir", type=Path, help="folder for knn.json, knn.md and the PNGs (sets --out/--markdown when not given)")
    p.add_argument("--repeats", type=positive(int), default=None, help="timed runs per row, median reported (default 5; 1 with --quick)")
    p.add_argument("--min-row-seconds", type=non_negative(float), default=None,
                   help=f"repeat short rows past --repeats until their timed runs add up to this, at most {_MAX_RUNS} runs "
                   "(default 0.25; 0 with --quick)")
    p.add_argument("--row-seconds", type=positive(float), default=10.0, help="stop repeating a row once its timed runs add up to this")
    p.add_argument("--max-seconds", type=positive(float), default=60.0,
                   help="skip an implementation on a row estimated (from a query slice) to take longer than this per run")
    p.add_argument("--time-budget", type=positive(float), default=None,
                   help="total seconds: rows that would overrun it are skipped (gpumine and PyTorch are run first, "
                   "then the CPU peers with the time left)")
    p.add_argument("--working-memory", type=positive(float), default=None,
                   help="MiB per tile for gpumine and for the PyTorch chunk (default: gpumine's, a quarter of free GPU memory up to 4 GiB)")
    p.add_argument("--sample", type=positive(int), default=1000, help="queries sampled for the float64 recall reference")
    p.add_argument("--physics", type=Path, help="path to the real KDD Cup 2004 phy_train.dat (else synthetic data of that shape)")
    p.add_argument("--no-host", action="store_true", help="skip the gpumine host-NumPy rows")
    p.add_argument("--no-plots", action="store_true", help="do not write PNG plots")
    p.add_argument("--from-json", type=Path, help="render --markdown / plots from an existing results JSON and exit")
    return p


def _peer_available(name: str) -> str | None:
    """None when the peer can run, else why not."""
    module = {"torch": "torch", "sklearn": "sklearn", "faiss": "faiss"}[name]
    if importlib.util.find_spec(module) is None:
        return f"{module} is not installed"
    if name == "faiss":
        try:
            importlib.import_module("faiss")
        except Exception as exc:  # noqa: BLE001
            return f"faiss does not import: {exc}"
    return None


def _outputs(args) -> tuple[Path | None, Path | None]:
    out, md = args.out, args.markdown
    if args.out_dir is not None:
        out = out or args.out_dir / "knn.json"
        md = md or args.out_dir / "knn.md"
    return out, md


def main(argv=None, prog: str | None = None) -> int:
    """Run the benchmark; returns 0, 1 when a gpumine row failed, 2 on bad usage."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    out_json, out_md = _outputs(args)
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
            folder = (out_json or args.from_json).parent
            for path in plot_results(results, folder, (out_json or args.from_json).stem):
                print(f"wrote {path}")
        print(text)
        return 0
    if args.repeats is None:
        args.repeats = 1 if args.quick else 5
    if args.min_row_seconds is None:
        args.min_row_seconds = 0.0 if args.quick else 0.25
    if args.physics is not None and not Path(args.physics).is_file():
        print(f"error: --physics {args.physics}: no such file; give the path to phy_train.dat or leave it out for synthetic data", file=sys.stderr)
        return 2
    from gpumine.config import resolve_device

    try:
        device = resolve_device(args.device)
    except (ValueError, TypeError) as exc:
        print(f"error: --device: {exc}", file=sys.stderr)
        return 2
    for path in (out_json, out_md):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
    bench = KnnBench(args, device, out_json, out_md, argv)
    peers = []
    for name in args.peers:
        why = _peer_available(name)
        if why is None:
            peers.append(name)
        else:
            bench.meta["peers_unavailable"][name] = why
            bench.log(f"note: {name} not run: {why}")
    fused = ["gpumine-triton"] if device.type == "cuda" and importlib.util.find_spec("triton") else []
    fitted = ["gpumine-fitted"] if device.type == "cuda" else []
    primary = (["gpumine-device"] + fitted + fused + ([] if args.no_host else ["gpumine-host"])
               + [p for p in peers if p == "torch"])
    cpu_peers = [p for p in peers if p != "torch"]
    bench.log(f"gpumine kNN benchmark on {bench.meta['device_name']} ({device}); experiments: {', '.join(args.experiments)}")
    try:
        # gpumine and the PyTorch baseline first, experiment by experiment; then the CPU peers with
        # whatever time is left, smallest rows first
        if primary:
            for name in args.experiments:
                EXPERIMENT_FUNCTIONS[name](bench, primary)
        if cpu_peers:
            bench.run_cheapest_first(args.experiments, cpu_peers)
    except ValueError as exc:  # bad --physics file and similar input problems
        print(f"error: {exc}", file=sys.stderr)
        bench.save()
        return 2
    except KeyboardInterrupt:
        bench.log("interrupted: writing the rows measured so far")
        bench.save()
        return 130
    bench.save()
    results = bench.results()
    if out_json is not None:
        bench.log(f"wrote {out_json}")
        if not args.no_plots:
            for path in plot_results(results, out_json.parent, out_json.stem):
                bench.log(f"wrote {path}")
    if out_md is not None:
        bench.log(f"wrote {out_md}")
    print()
    print(render_markdown(results))
    bench.log(f"total {bench.elapsed():.1f} s")
    if bench.failures:
        print(f"error: {bench.failures} gpumine row(s) failed; see the notes above", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(prog="python -m benchmarks.knn" if __package__ else "benchmarks/knn.py"))
