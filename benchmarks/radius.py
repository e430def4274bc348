"""Radius queries and neighbour graphs: gpumine against plain PyTorch and scikit-learn, exactness against float64.

One run on ``--rows`` uniform random points in [0, 1)^``--dims`` (float32, seed ``--seed``) times

* ``radius``       — :func:`gpumine.neighbors.radius_neighbors` of ``--queries`` points (a random subset
  of the rows) against all rows, and the estimator's
  ``NearestNeighbors(radius=r).fit(X).radius_neighbors(Q)`` beside it;
* ``knn_graph``    — :func:`gpumine.neighbors.kneighbors_graph` ``(X, --k, mode, include_self=False)``
  of every row, once per mode (``connectivity``, ``distance``);
* ``radius_graph`` — :func:`gpumine.neighbors.radius_neighbors_graph` ``(X, r, mode,
  include_self=False)`` of every row, once per mode.

The radius ``r`` (unless ``--radius`` gives it) is chosen so that the mean number of other points
within ``r`` is ``--mean-neighbours`` over a sample of rows; the run prints the mean counts it got.

Peers, in the same run:

* plain PyTorch on the run's device (the data already there, float32): squared distances
  ``||x||² + ||y||² − 2 x·y`` by ``torch.addmm`` over query chunks of about ``--torch-chunk-mib``
  (2 GiB on a GPU); for radius queries a threshold at ``r²``, ``nonzero``, per-query lists on the
  host (as gpumine's output); for the kNN graph the own entry at +inf and ``torch.topk`` per chunk; the graphs are
  SciPy CSR matrices on the host, as gpumine's;
* scikit-learn on the CPU, default algorithm, all cores (``n_jobs=-1``):
  ``NearestNeighbors(radius=r).fit(X).radius_neighbors(Q)``, ``kneighbors_graph`` and
  ``radius_neighbors_graph``, data as host NumPy. With ``--sklearn-rows`` below ``--rows`` it runs on
  the first rows only, the radius scaled by ``(rows / sklearn_rows)^(1/dims)`` so the mean neighbour
  count stays the same; the record then says so (``sklearn_rows``), its ``sklearn_ratio`` compares
  the smaller problem's time (a lower bound) and, for the graphs, ``sklearn_ratio_linear`` scales it
  by ``rows / sklearn_rows`` first (an estimate).

gpumine is given the data on the run's device as a torch tensor; its results are NumPy/SciPy on
the host, as the peers'. Timing: a warm-up run, then the best of ``--repeats`` runs (wall clock, the
GPU synchronised before and after); a warm-up longer than ``--warmup-only-after`` seconds is the
only run (``runs = 0``), the repeats stop once the timed runs add up to ``--skip-slow-after``
seconds, and cases (and graph modes) not started within ``--time-budget`` seconds are recorded as
skipped.
``ratio = peer_s / gpumine_s``.

Exactness (``exact``): on ``--sample`` sampled query rows, a float64 reference computed by direct
differences on the run's device (features summed left to right). A radius row matches when its
index set is the reference's (points within 1e-12 relative of ``r`` may go either way) and every
distance is within 1e-6 relative of the float64 one; a kNN graph must have ``k`` entries per row,
its indices the float64 k nearest (ties in any order) and, in ``distance`` mode, its values within
1e-6 relative. The PyTorch peer's rows are compared with the same reference (``torch_mismatched_rows``,
information only: float32 distances move points near the radius or the k-th distance).

Output: ``--out`` a JSON object ``{"meta", "config", "records"}`` written atomically after every
record; ``--markdown`` a table.

``python -m benchmarks.radius --help`` from the repository root.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

if not __package__:  # run as a script (python benchmarks/radius.py): the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import torch  # noqa: E402

from benchmarks._common import DefaultsHelpFormatter, environment, format_count, format_seconds, positive, time_call, write_json, write_text  # noqa: E402
from benchmarks.realdata import check_knn, reference_knn, sample_rows, torch_knn  # noqa: E402

__all__ = [
    "main",
    "build_parser",
    "CASES",
    "MODES",
    "make_points",
    "calibrate_radius",
    "torch_radius",
    "torch_knn_graph",
    "torch_radius_graph",
    "reference_radius",
    "check_radius_rows",
    "render_markdown",
]

CASES = ("radius", "knn_graph", "radius_graph")
MODES = ("connectivity", "distance")
DIST_RTOL = 1e-6  # float32 distances against float64 ones
BOUNDARY_RTOL = 1e-12  # points this close to the radius may be in or out


# ---------------------------------------------------------------------------------------
# data and radius
# ---------------------------------------------------------------------------------------
def make_points(n: int, d: int, seed: int = 0) -> np.ndarray:
    """Uniform random points in [0, 1)^d, float32."""
    return np.random.default_rng(seed).random((n, d), dtype=np.float32)


def calibrate_radius(X: torch.Tensor, mean_neighbours: int, sample: int = 512, seed: int = 1) -> float:
    """A radius within which a sampled row has ``mean_neighbours`` other rows on average.

    The float32 distances of ``sample`` rows to every row, own entry excluded; the radius is the
    ``mean_neighbours * sample``-th smallest of them (taken from each row's 4 m + 16 nearest).
    """
    n = X.shape[0]
    rows = torch.from_numpy(sample_rows(n, sample, seed)).to(X.device)
    s = rows.shape[0]
    m = min(n - 1, 4 * mean_neighbours + 16)
    Q = X[rows]
    best = torch.empty((s, 0), dtype=X.dtype, device=X.device)
    step = max(m + 1, 2**26 // max(1, s))
    for c0 in range(0, n, step):
        c1 = min(n, c0 + step)
        D = torch.cdist(Q, X[c0:c1])
        own = ((rows >= c0) & (rows < c1)).nonzero().squeeze(1)
        D[own, rows[own] - c0] = float("inf")
        both = torch.cat([best, D], dim=1)
        best = torch.topk(both, min(m, both.shape[1]), dim=1, largest=False).values
    pooled = torch.sort(best.flatten()).values
    return float(pooled[min(pooled.numel(), mean_neighbours * s) - 1])


# ---------------------------------------------------------------------------------------
# plain PyTorch peers
# ---------------------------------------------------------------------------------------
def _torch_radius_csr(X: torch.Tensor, Q: torch.Tensor, radius: float, exclude_self: bool, chunk_bytes: int):
    """``(indptr, indices, distances)`` on the host: addmm squared distances <= r², per query chunk."""
    n, m = X.shape[0], Q.shape[0]
    rows = max(1, min(m, chunk_bytes // (4 * n)))
    sq, qsq = (X * X).sum(dim=1), (Q * Q).sum(dim=1)
    r2 = radius * radius
    found_i, found_j, found_d = [], [], []
    for q0 in range(0, m, rows):
        q1 = min(m, q0 + rows)
        D = torch.addmm(sq[None, :], Q[q0:q1], X.T, beta=1.0, alpha=-2.0)
        D += qsq[q0:q1, None]
        if exclude_self:
            own = torch.arange(q1 - q0, device=X.device)
            D[own, own + q0] = float("inf")
        i, j = (D <= r2).nonzero(as_tuple=True)
        found_i.append(i + q0)
        found_j.append(j)
        found_d.append(D[i, j].clamp_min_(0).sqrt_())
        del D
    i, j, dist = torch.cat(found_i), torch.cat(found_j), torch.cat(found_d)
    indptr = torch.zeros(m + 1, dtype=torch.int64, device=X.device)
    indptr[1:] = torch.cumsum(torch.bincount(i, minlength=m), 0)
    return indptr.cpu().numpy(), j.cpu().numpy(), dist.cpu().numpy()


def _split_rows(indptr, indices, dist):
    """Per-query object arrays of distances and indices, as ``radius_neighbors`` returns them."""
    m = len(indptr) - 1
    d_rows, i_rows = np.empty(m, dtype=object), np.empty(m, dtype=object)
    d_rows[:] = np.split(dist, indptr[1:-1])
    i_rows[:] = np.split(indices, indptr[1:-1])
    return d_rows, i_rows


def torch_radius(X: torch.Tensor, Q: torch.Tensor, radius: float, chunk_bytes: int = 2**31):
    """Plain PyTorch radius queries: per-query (distances, indices) object arrays on the host, unsorted."""
    return _split_rows(*_torch_radius_csr(X, Q, radius, False, chunk_bytes))


def torch_radius_graph(X: torch.Tensor, radius: float, mode: str, chunk_bytes: int = 2**31) -> sp.csr_matrix:
    """Plain PyTorch radius graph (self excluded) as a SciPy CSR matrix."""
    indptr, indices, dist = _torch_radius_csr(X, X, radius, True, chunk_bytes)
    n = X.shape[0]
    data = np.ones(len(indices)) if mode == "connectivity" else dist.astype(np.float64)
    return sp.csr_matrix((data, indices, indptr), shape=(n, n))


def torch_knn_graph(X: torch.Tensor, k: int, mode: str, chunk_bytes: int = 2**31) -> sp.csr_matrix:
    """Plain PyTorch kNN graph (self excluded): :func:`benchmarks.realdata.torch_knn`, then SciPy CSR."""
    dist, index = torch_knn(X, k, chunk_bytes)
    n = X.shape[0]
    index = index.cpu().numpy().ravel()
    data = np.ones(n * k) if mode == "connectivity" else dist.cpu().numpy().astype(np.float64).ravel()
    return sp.csr_matrix((data, index, np.arange(0, n * k + 1, k)), shape=(n, n))


# ---------------------------------------------------------------------------------------
# scikit-learn peers
# ---------------------------------------------------------------------------------------
def sklearn_radius(X: np.ndarray, Q: np.ndarray, radius: float):
    from sklearn.neighbors import NearestNeighbors

    return NearestNeighbors(radius=radius, n_jobs=-1).fit(X).radius_neighbors(Q)


def sklearn_knn_graph(X: np.ndarray, k: int, mode: str):
    from sklearn.neighbors import kneighbors_graph

    return kneighbors_graph(X, k, mode=mode, include_self=False, n_jobs=-1)


def sklearn_radius_graph(X: np.ndarray, radius: float, mode: str):
    from sklearn.neighbors import radius_neighbors_graph

    return radius_neighbors_graph(X, radius, mode=mode, include_self=False, n_jobs=-1)


# ---------------------------------------------------------------------------------------
# float64 reference and checks
# ---------------------------------------------------------------------------------------
def reference_radius(X: np.ndarray, Q: np.ndarray, radius: float, exclude: np.ndarray | None = None, *,
                     device=None, chunk_bytes: int = 2**28, slack: float = 1e-6):
    """Float64 distances of each query to every row, the rows within ``radius * (1 + slack)``.

    Distances by direct differences of the given (float32) values, summed feature by feature left
    to right. ``exclude[i]``: a row left out of query i's list (its own row), or -1.
    Returns a list of ``(indices, distances)``, one per query, ascending by index.
    """
    dev = torch.device(device or "cpu")
    XT = torch.from_numpy(np.ascontiguousarray(np.asarray(X, dtype=np.float64).T)).to(dev)
    Q64 = torch.from_numpy(np.asarray(Q, dtype=np.float64)).to(dev)
    d, n = XT.shape
    s = Q64.shape[0]
    step = max(1, chunk_bytes // (16 * n))
    reach = radius * (1 + slack)
    out = []
    for a in range(0, s, step):
        b = min(s, a + step)
        acc = None
        for f in range(d):
            t = Q64[a:b, f, None] - XT[f][None, :]
            t = t * t
            acc = t if acc is None else acc + t
        dist = acc.sqrt_()
        for r in range(b - a):
            j = (dist[r] <= reach).nonzero().squeeze(1)
            jj, dd = j.cpu().numpy(), dist[r, j].cpu().numpy()
            if exclude is not None and exclude[a + r] >= 0:
                keep = jj != exclude[a + r]
                jj, dd = jj[keep], dd[keep]
            out.append((jj, dd))
    return out


def check_radius_rows(reference, radius: float, rows_idx, rows_dist=None) -> dict:
    """Compare per-query index (and distance) arrays with :func:`reference_radius`'s rows.

    A row is mismatched when an index is missing that the reference has within ``radius``
    (beyond 1e-12 relative of it), an index is present that the reference has outside, an index
    repeats, or a distance differs from the float64 one by more than 1e-6 relative.
    """
    bad, max_err, entries = [], 0.0, 0
    lo, hi = radius * (1 - BOUNDARY_RTOL), radius * (1 + BOUNDARY_RTOL)
    for r, ((ref_i, ref_d), got_i) in enumerate(zip(reference, rows_idx)):
        got_i = np.asarray(got_i, dtype=np.int64)
        entries += len(got_i)
        must = set(ref_i[ref_d <= lo].tolist())
        may = set(ref_i[ref_d <= hi].tolist())
        got = set(got_i.tolist())
        ok = len(got) == len(got_i) and must <= got and got <= may
        if ok and rows_dist is not None and len(got_i):
            lookup = dict(zip(ref_i.tolist(), ref_d.tolist()))
            e = np.array([lookup[j] for j in got_i.tolist()])
            g = np.asarray(rows_dist[r], dtype=np.float64)
            with np.errstate(divide="ignore", invalid="ignore"):
                rel = np.where(e > 0, np.abs(g - e) / e, np.where(g == 0, 0.0, np.inf))
            err = float(rel.max())
            max_err = max(max_err, err)
            ok = err <= DIST_RTOL
        if not ok:
            bad.append(r)
    return {"rows_checked": len(reference), "entries_checked": entries, "mismatched_rows": len(bad),
            "max_rel_dist_err": max_err if rows_dist is not None else None, "first_mismatched": bad[:5]}


def _csr_rows(G: sp.csr_matrix, rows: np.ndarray):
    G = sp.csr_matrix(G)
    idx = [G.indices[G.indptr[r] : G.indptr[r + 1]] for r in rows]
    dat = [G.data[G.indptr[r] : G.indptr[r + 1]] for r in rows]
    return idx, dat


def _check_radius_graph(G, reference, rows, radius, mode, n, values: bool = True) -> dict:
    """The CSR rows ``rows`` against the reference; ``values=False`` checks the index sets only."""
    idx, dat = _csr_rows(G, rows)
    out = check_radius_rows(reference, radius, idx, dat if mode == "distance" else None)
    out["shape_ok"] = tuple(G.shape) == (n, n)
    if mode == "connectivity" and values:
        out["values_ok"] = bool(all(np.all(v == 1) for v in dat))
    return out


def _check_knn_graph(X, G, rows, ref_d, ref_i, k, mode) -> dict:
    G = sp.csr_matrix(G)
    n = X.shape[0]
    counts = np.diff(G.indptr)
    out = {"shape_ok": tuple(G.shape) == (n, n), "rows_with_k_entries": bool(np.all(counts == k))}
    if not out["rows_with_k_entries"]:
        out.update(mismatched_rows=len(rows), rows_checked=len(rows))
        return out
    idx = np.stack([G.indices[G.indptr[r] : G.indptr[r + 1]] for r in rows]).astype(np.int64)
    dat = np.stack([G.data[G.indptr[r] : G.indptr[r + 1]] for r in rows])
    # a CSR row need not list its neighbours by distance: order them as the reference does
    e = np.sqrt(((X[idx].astype(np.float64) - X[rows][:, None, :].astype(np.float64)) ** 2).sum(axis=2))
    order = np.lexsort((idx, e), axis=1)
    idx, dat = np.take_along_axis(idx, order, 1), np.take_along_axis(dat, order, 1)
    res = check_knn(X, rows, ref_d, ref_i, idx, dat if mode == "distance" else None)
    out.update(rows_checked=res["exact_rows_checked"], mismatched_rows=res["mismatched_rows"],
               max_rel_dist_err=res["max_rel_dist_err"])
    if mode == "connectivity":
        out["values_ok"] = bool(np.all(G.data == 1))
    return out


def _exact(check: dict) -> bool:
    ok = check.get("mismatched_rows", 1) == 0 and check.get("shape_ok", True) and check.get("values_ok", True)
    ok = ok and check.get("rows_with_k_entries", True)
    err = check.get("max_rel_dist_err")
    return bool(ok and (err is None or err <= DIST_RTOL))


# ---------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------
def _to_np(a) -> np.ndarray:
    return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


class Run:
    def __init__(self, args, device: torch.device):
        self.args, self.device = args, device
        self.start = time.perf_counter()
        self.records: list[dict] = []
        self.meta = environment(device)
        self.config = {}

    def log(self, message: str) -> None:
        print(message, flush=True)

    def over_budget(self) -> bool:
        return self.args.time_budget is not None and time.perf_counter() - self.start > self.args.time_budget

    def add(self, rec: dict) -> None:
        """Record ``rec`` (with the run's elapsed seconds so far), print it, save the JSON."""
        rec["run_elapsed_s"] = time.perf_counter() - self.start
        self.records.append(rec)
        self.log(_progress(rec))
        self.save()

    def save(self) -> None:
        if self.args.out:
            write_json(self.args.out, {"meta": self.meta, "config": self.config, "records": self.records})

    def timed(self, fn, device=None):
        """(best seconds, result, timed runs): a warm-up, then the best of up to --repeats runs.

        A warm-up longer than --warmup-only-after is the only run (0 timed runs); the repeats
        stop once the timed runs add up to --skip-slow-after.
        """
        device = device or self.device
        first, out = time_call(fn, device)
        if first > self.args.warmup_only_after:
            return first, out, 0
        times = []
        while len(times) < self.args.repeats and (not times or sum(times) < self.args.skip_slow_after):
            t, out = time_call(fn, device)
            times.append(t)
        return min(times), out, len(times)

    def peer(self, rec: dict, name: str, fn, device=None):
        """Time a peer into ``rec`` (``<name>_s``, ``<name>_runs``, ``<name>_ratio``); its result or None."""
        try:
            t, out, runs = self.timed(fn, device)
        except Exception as exc:  # noqa: BLE001 - a failing peer is recorded, the run goes on
            rec[f"{name}_error"] = f"{type(exc).__name__}: {exc}"
            if self.args.traceback:
                traceback.print_exc()
            return None
        rec[f"{name}_s"], rec[f"{name}_runs"] = t, runs
        if rec.get("gpumine_s"):
            rec[f"{name}_ratio"] = t / rec["gpumine_s"]
        return out


def _record(case: str, mode: str | None, n: int, d: int, **extra) -> dict:
    rec = {"case": case, "mode": mode, "rows": n, "dims": d}
    rec.update(extra)
    return rec


def _progress(rec: dict) -> str:
    parts = [f"{rec['case']}{'/' + rec['mode'] if rec['mode'] else ''}:",
             f"gpumine {format_seconds(rec.get('gpumine_s'))}"]
    for name in ("gpumine_estimator", "torch", "sklearn"):
        if f"{name}_s" in rec:
            ratio = rec.get(f"{name}_ratio")
            parts.append(f"{name} {format_seconds(rec[f'{name}_s'])}" + (f" ({ratio:.2f}x)" if ratio else ""))
        elif f"{name}_skipped" in rec or f"{name}_error" in rec:
            parts.append(f"{name} {rec.get(f'{name}_skipped') or rec.get(f'{name}_error')}")
    if rec.get("sklearn_rows") and rec["sklearn_rows"] < rec["rows"]:
        parts.append(f"[sklearn on {format_count(rec['sklearn_rows'])} rows"
                     + (f", linear est. {rec['sklearn_ratio_linear']:.2f}x" if rec.get("sklearn_ratio_linear") else "") + "]")
    parts.append(f"exact={rec.get('exact')}")
    if rec.get("mean_neighbours") is not None:
        parts.append(f"mean neighbours {rec['mean_neighbours']:.2f}")
    return "  " + " ".join(parts)


def _sklearn_columns(run: Run, rec: dict, fn, sk_rows: int, n: int, scales_with_rows: bool) -> None:
    rec["sklearn_rows"] = sk_rows
    run.peer(rec, "sklearn", fn, torch.device("cpu"))
    if sk_rows < n and rec.get("sklearn_s") and rec.get("gpumine_s") and scales_with_rows:
        rec["sklearn_ratio_linear"] = rec["sklearn_s"] * n / sk_rows / rec["gpumine_s"]


def run_all(run: Run) -> None:
    from gpumine.neighbors import NearestNeighbors, kneighbors_graph, radius_neighbors, radius_neighbors_graph

    args, device = run.args, run.device
    n, d, k = args.rows, args.dims, args.k
    X_np = make_points(n, d, args.seed)
    X = torch.from_numpy(X_np).to(device)
    radius = args.radius if args.radius is not None else calibrate_radius(X, args.mean_neighbours)
    sk_rows = min(n, args.sklearn_rows) if args.sklearn_rows else n
    sk_radius = radius * (n / sk_rows) ** (1.0 / d)
    X_sk = X_np[:sk_rows]
    chunk = int((args.torch_chunk_mib or (2048.0 if device.type == "cuda" else 256.0)) * 2**20)
    sample = sample_rows(n, args.sample, args.seed + 1)
    run.config = {"rows": n, "dims": d, "k": k, "radius": radius, "sklearn_rows": sk_rows, "sklearn_radius": sk_radius,
                  "queries": min(args.queries, n), "sample": len(sample), "repeats": args.repeats, "seed": args.seed}
    run.log(f"{format_count(n)} x {d} uniform float32 on {run.meta['device_name']}; radius {radius:.6g} "
            f"(sklearn: {format_count(sk_rows)} rows, radius {sk_radius:.6g}); k = {k}")

    if "radius" in args.cases and not run.over_budget():
        q_rows = sample_rows(n, args.queries, args.seed + 2)
        Q = X[torch.from_numpy(q_rows).to(device)]
        Q_np = X_np[q_rows]
        rec = _record("radius", None, n, d, queries=len(q_rows), radius=radius)
        run.log(f"  radius: {format_count(len(q_rows))} queries ...")
        try:
            t, (g_d, g_i), runs = run.timed(lambda: radius_neighbors(X, Q, radius, device=device))
            rec.update(gpumine_s=t, gpumine_runs=runs)
            counts = np.fromiter((len(r) for r in g_i), dtype=np.int64, count=len(g_i))
            rec["mean_neighbours"] = float(counts.mean())  # each query is a row: it finds itself too
            rec["neighbours_found"] = int(counts.sum())
            run.peer(rec, "gpumine_estimator",
                     lambda: NearestNeighbors(radius=radius, device=device).fit(X).radius_neighbors(Q))
            p_out = run.peer(rec, "torch", lambda: torch_radius(X, Q, radius, chunk))
            _sklearn_columns(run, rec, lambda: sklearn_radius(X_sk, Q_np, sk_radius), sk_rows, n, False)
            which = sample_rows(len(q_rows), args.sample, args.seed + 3)
            ref = reference_radius(X_np, Q_np[which], radius, device=device)
            rec["check"] = check_radius_rows(ref, radius, g_i[which], g_d[which])
            rec["exact"] = _exact(rec["check"])
            if p_out is not None:
                rec["torch_mismatched_rows"] = check_radius_rows(ref, radius, p_out[1][which])["mismatched_rows"]
        except Exception as exc:  # noqa: BLE001
            rec.update(error=f"{type(exc).__name__}: {exc}", exact=False)
            if args.traceback:
                traceback.print_exc()
        run.add(rec)

    if "knn_graph" in args.cases:
        ref_d, ref_i = reference_knn(X_np, sample, k, device=device)
        for mode in args.modes:
            rec = _record("knn_graph", mode, n, d, k=k)
            run.log(f"  knn_graph/{mode} ...")
            if run.over_budget():
                rec.update(skipped="time budget", exact=None)
            else:
                try:
                    t, G, runs = run.timed(lambda: kneighbors_graph(X, k, mode, include_self=False, device=device))
                    rec.update(gpumine_s=t, gpumine_runs=runs, nnz=int(G.nnz))
                    P = run.peer(rec, "torch", lambda: torch_knn_graph(X, k, mode, chunk))
                    _sklearn_columns(run, rec, lambda: sklearn_knn_graph(X_sk, k, mode), sk_rows, n, True)
                    rec["check"] = _check_knn_graph(X_np, G, sample, ref_d, ref_i, k, mode)
                    rec["exact"] = _exact(rec["check"])
                    if P is not None:
                        rec["torch_mismatched_rows"] = _check_knn_graph(X_np, P, sample, ref_d, ref_i, k, mode)[
                            "mismatched_rows"]
                except Exception as exc:  # noqa: BLE001
                    rec.update(error=f"{type(exc).__name__}: {exc}", exact=False)
                    if args.traceback:
                        traceback.print_exc()
            run.add(rec)

    if "radius_graph" in args.cases:
        ref = reference_radius(X_np, X_np[sample], radius, sample, device=device)
        for mode in args.radius_graph_modes or args.modes:
            rec = _record("radius_graph", mode, n, d, radius=radius)
            run.log(f"  radius_graph/{mode} ...")
            if run.over_budget():
                rec.update(skipped="time budget", exact=None)
            else:
                try:
                    t, G, runs = run.timed(lambda: radius_neighbors_graph(X, radius, mode, include_self=False,
                                                                           device=device))
                    rec.update(gpumine_s=t, gpumine_runs=runs, nnz=int(G.nnz), mean_neighbours=G.nnz / n)
                    P = run.peer(rec, "torch", lambda: torch_radius_graph(X, radius, mode, chunk))
                    _sklearn_columns(run, rec, lambda: sklearn_radius_graph(X_sk, sk_radius, mode), sk_rows, n, True)
                    rec["check"] = _check_radius_graph(G, ref, sample, radius, mode, n)
                    rec["exact"] = _exact(rec["check"])
                    if P is not None:
                        rec["torch_mismatched_rows"] = _check_radius_graph(P, ref, sample, radius, "connectivity",
                                                                           n, values=False)["mismatched_rows"]
                except Exception as exc:  # noqa: BLE001
                    rec.update(error=f"{type(exc).__name__}: {exc}", exact=False)
                    if args.traceback:
                        traceback.print_exc()
            run.add(rec)


# ---------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------
def _ratio(v) -> str:
    return "—" if v is None else f"{v:.2f}x"


def render_markdown(records: list[dict], meta: dict, config: dict) -> str:
    """One table: a row per case and mode, gpumine's time and each peer's time and ratio."""
    lines = [f"Device: {meta.get('device_name')} ({meta.get('device')}); {format_count(config.get('rows', 0))} x "
             f"{config.get('dims')} uniform float32, radius {config.get('radius', 0):.6g}, k = {config.get('k')}; "
             f"scikit-learn on {format_count(config.get('sklearn_rows', 0))} rows, {meta.get('cpu_count')} CPU threads.",
             "",
             "| case | mode | gpumine | PyTorch | ratio | scikit-learn | ratio | exact |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in records:
        sk = format_seconds(r.get("sklearn_s"))
        sk_ratio = _ratio(r.get("sklearn_ratio"))
        if r.get("sklearn_rows") and r["sklearn_rows"] < r["rows"] and r.get("sklearn_s"):
            sk += f" ({format_count(r['sklearn_rows'])} rows)"
            if r.get("sklearn_ratio_linear"):
                sk_ratio += f" (≈{r['sklearn_ratio_linear']:.2f}x linear)"
        lines.append(f"| {r['case']} | {r.get('mode') or '—'} | {format_seconds(r.get('gpumine_s'))} | "
                     f"{format_seconds(r.get('torch_s'))} | {_ratio(r.get('torch_ratio'))} | {sk} | {sk_ratio} | "
                     f"{r.get('exact')} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------
def _list_arg(choices):
    def parse(text: str) -> list[str]:
        parts = [p.strip() for p in text.split(",") if p.strip()]
        for part in parts:
            if part not in choices:
                raise argparse.ArgumentTypeError(f"unknown {part!r}; choose from {', '.join(choices)}")
        return parts

    return parse


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Radius queries, kNN graphs and radius graphs: gpumine against plain PyTorch (same device) and "
        "scikit-learn (CPU), exactness checked against float64.",
        formatter_class=DefaultsHelpFormatter,
    )
    p.add_argument("--rows", type=positive(int), default=1_000_000, help="points (uniform in [0, 1)^dims, float32)")
    p.add_argument("--dims", type=positive(int), default=8, help="features")
    p.add_argument("--queries", type=positive(int), default=10_000, help="radius case: queries (a random subset of the rows)")
    p.add_argument("--k", type=positive(int), default=10, help="knn_graph: neighbours per point")
    p.add_argument("--radius", type=positive(float), default=None, help="the radius (default: calibrated, see --mean-neighbours)")
    p.add_argument("--mean-neighbours", type=positive(int), default=20, help="calibrate the radius to this mean neighbour count")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (auto: the GPU when there is one)")
    p.add_argument("--sklearn-rows", type=positive(int), default=None,
                   help="run scikit-learn on the first rows only (radius scaled to the same mean count); default all")
    p.add_argument("--cases", type=_list_arg(CASES), default=list(CASES), help="comma-separated: " + ",".join(CASES))
    p.add_argument("--modes", type=_list_arg(MODES), default=list(MODES), help="graph modes: " + ",".join(MODES))
    p.add_argument("--radius-graph-modes", type=_list_arg(MODES), default=None,
                   help="radius_graph modes, when not --modes (gpumine's two modes run the same search)")
    p.add_argument("--repeats", type=positive(int), default=3, help="timed runs after the warm-up (best reported)")
    p.add_argument("--warmup-only-after", type=positive(float), default=20.0,
                   help="seconds: a warm-up run longer than this is the only run")
    p.add_argument("--skip-slow-after", type=positive(float), default=5.0,
                   help="seconds: the repeats of a column stop once its timed runs add up to this")
    p.add_argument("--time-budget", type=positive(float), default=None,
                   help="seconds for the whole run: cases and modes not started by then are recorded as skipped")
    p.add_argument("--sample", type=positive(int), default=500, help="query rows checked against the float64 reference")
    p.add_argument("--seed", type=int, default=0, help="seed of the points and samples")
    p.add_argument("--torch-chunk-mib", type=positive(float), default=None,
                   help="distance block per query chunk of the PyTorch peer (default 2048 on a GPU, 256 on the CPU)")
    p.add_argument("--out", type=Path, help="results JSON ({meta, config, records})")
    p.add_argument("--markdown", type=Path, help="markdown table")
    p.add_argument("--traceback", action="store_true", help="print the traceback of a failing case")
    return p


def main(argv=None, prog: str | None = None) -> int:
    """Run the benchmark; 0 when every case ran and was exact, 1 otherwise."""
    args = build_parser(prog).parse_args(argv)
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    run = Run(args, device)
    run_all(run)
    run.meta["elapsed_s"] = time.perf_counter() - run.start
    run.save()
    table = render_markdown(run.records, run.meta, run.config)
    print()
    print(table, end="")
    print(f"elapsed {format_seconds(run.meta['elapsed_s'])}")
    if args.markdown:
        write_text(args.markdown, table)
    ran = [r for r in run.records if "skipped" not in r]
    return 0 if ran and all(r.get("exact") for r in ran) else 1


if __name__ == "__main__":
    sys.exit(main(prog="python -m benchmarks.radius"))
