"""Real-data sweep: every ADBench set, gpumine side by side with a peer, exactness against float64.

For each ``*.npz`` set of the data folder (``X`` as float32, ``y`` unused) one run times

* ``knn5`` / ``knn20`` — all-kNN (each point excluded from its own neighbours) with
  :func:`gpumine.neighbors.kneighbors`;
* ``lof``   — :class:`gpumine.outliers.LocalOutlierFactor` ``(n_neighbors=20).fit(X)``;
* ``top10`` — :func:`gpumine.outliers.top_n_outliers` ``(X, n_outliers=10, k=5)``;

against the peer of the run's device:

* on a GPU, plain PyTorch with the data already on the device, float32: squared distances
  ``||x||² + ||y||² − 2 x·y`` by ``torch.addmm`` over query chunks of about ``--torch-chunk-mib``,
  the diagonal set to +inf, ``torch.topk(k, largest=False)`` per chunk (LOF and the top-10 are
  then the textbook formulas on that kNN). gpumine gets a CUDA tensor too; a second column
  times it from host NumPy in to NumPy out;
* on the CPU, scikit-learn with its default algorithm on all cores:
  ``NearestNeighbors(n_neighbors=k, n_jobs=-1)``, ``LocalOutlierFactor(n_neighbors=20, n_jobs=-1)``
  and the top-10 from ``kneighbors`` sums; sets over ``--cpu-max-rows`` are cut to their first
  rows.

Timing: a warm-up run, then the best of up to ``--repeats`` runs (wall clock, the GPU
synchronised before and after each); the repeats stop once the timed runs add up to
``--skip-slow-after`` seconds, a warm-up longer than ``--warmup-only-after`` is the only run
(``gpumine_runs = 0``), and a gpumine run over ``--skip-slow-after`` skips the host column.
Where both gpumine's and the peer's best runs are under ``--quick-below`` seconds, they then run
``--quick-rounds`` more rounds, alternating call by call, and the best of all their runs counts
(``gpumine_runs`` and ``peer_runs`` include them; the host column and the uniform set then get as
many more runs, so their ratios compare like with like):
a sub-millisecond call's best of a few runs in a row moves by a third between sweeps (host
jitter), and runs taken in turn meet the same moments of the host.
``--set-cap`` and ``--time-budget`` skip the remaining cases of a slow set or of the sweep
(recorded as skipped). ``speedup = peer_s / gpumine_s``.

Exactness: a fixed sample of up to ``--sample`` rows is searched in float64 against all rows
(candidates by a chunked float64 product on the run's device, then every candidate's distance
in NumPy by direct differences, sorted stably by distance and index; rows where rounding could
have left out a nearer point are searched again with every row near their k-th distance). A row
of gpumine's kNN is *mismatched* when an index is invalid or differs from that reference where
the two float64 distances differ by more than 1e-6 relative (ties may come in any order). The
peer's result gets a recall against the same reference (a returned neighbour counts when its
float64 distance is within 1e-6 of the k-th reference distance). LOF is compared with the
peer's scores, and with a float64 LOF on sets up to ``--lof-exact-max-rows`` rows, on the rows
whose score neither gpumine's rule for duplicate points nor a near-tie at a k-th neighbour can
change. The top-10 is checked on the union of gpumine's and the peer's outliers: their float64
weights (sums of the 5 float64 nearest distances) must rank gpumine's first, ties allowed.

A uniform random set of the same shape (seed 0) is timed for knn20: ``ratio_to_uniform`` is the
real set's gpumine time over the uniform set's (the target is at most 2).

Output: ``--out`` a JSON list of records (one per set and case; the run's environment goes to
``<out>.meta.json`` beside it), ``--markdown`` one table per device, ``--plot`` a bar chart of
the speedups; all written atomically, after every set. ``--from-json`` renders saved results.

``python -m benchmarks.realdata --help`` (or ``python benchmarks/realdata.py --help``) from the repository root.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
import time
import traceback
import warnings
from functools import partial
from pathlib import Path

if not __package__:  # run as a script (python benchmarks/realdata.py): the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks._common import DefaultsHelpFormatter, environment, format_count, format_seconds, positive, save_figure, time_call, write_json, write_text  # noqa: E402

__all__ = [
    "main",
    "build_parser",
    "CASES",
    "find_sets",
    "load_set",
    "reference_knn",
    "check_knn",
    "knn_recall",
    "torch_knn",
    "torch_lof",
    "torch_top_n",
    "sklearn_knn",
    "sklearn_lof",
    "sklearn_top_n",
    "render_markdown",
    "plot_speedups",
    "summarize",
]

CASES = ("knn5", "knn20", "lof", "top10")
CASE_LABELS = {"knn5": "all-kNN k=5", "knn20": "all-kNN k=20", "lof": "LOF k=20", "top10": "top-10 outliers k=5"}
CASE_K = {"knn5": 5, "knn20": 20, "lof": 20, "top10": 5}
N_OUTLIERS = 10
RTOL = 1e-6  # distances this close (relative) count as tied
LOF_RTOL = 1e-4  # gpumine's LOF comes from float32 distances: float32 rounding, amplified by the ratios
BIG_ROWS = 20_000  # sets at least this large carry the 3x target
_DEFAULT_DATA = Path("../shared/data/adbench")
# $GPUMINE_DATA_DIR holds the shared data on machines without ../shared beside the checkout
_DATA_DIR_VARIABLE = "GPUMINE_DATA_DIR"
_EPS64 = 2.0**-52
# the float64 reference's distances are exact to this (relative), far inside RTOL: a point left out
# of a row's candidates can be nearer than its k-th distance by at most this much
_REF_SLACK = 1e-9


# ---------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------
def _natural_key(name: str):
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", name)]


def find_sets(folder, names=None) -> list[Path]:
    """The ``*.npz`` files of ``folder``, in natural name order; ``names`` filters them.

    A name matches a file's stem (``"4_breastw"``) or the stem without its number
    (``"breastw"``), ignoring case. Unknown names raise ``ValueError``.
    """
    folder = Path(folder)
    paths = sorted(folder.glob("*.npz"), key=lambda p: _natural_key(p.stem))
    if names is None:
        return paths
    chosen = []
    for name in names:
        want = name.strip().lower()
        if want.endswith(".npz"):
            want = want[:-4]
        hits = [p for p in paths if p.stem.lower() == want or p.stem.lower().split("_", 1)[-1] == want]
        if not hits:
            known = ", ".join(p.stem for p in paths) or "none"
            raise ValueError(f"no set {name!r} in {folder} (sets there: {known})")
        chosen += [p for p in hits if p not in chosen]
    return chosen


def _rows_of(path) -> int:
    """Rows of a set without loading it (the header of X in the .npz), for the run order."""
    try:
        with np.load(path, mmap_mode="r") as data:
            return int(data["X"].shape[0])
    except Exception:  # noqa: BLE001 - an unreadable file sorts first and fails there, recorded
        return 0


def load_set(path, max_rows: int | None = None) -> tuple[np.ndarray, int]:
    """``X`` of an ADBench ``.npz`` as C-contiguous float32 (first ``max_rows`` rows), and its full row count."""
    with np.load(path) as data:
        X = data["X"]
    n_full = X.shape[0]
    if max_rows is not None:
        X = X[:max_rows]
    X = np.ascontiguousarray(X, dtype=np.float32)
    if X.ndim != 2:
        raise ValueError(f"{path}: X has shape {X.shape}; expected (rows, features)")
    if not np.isfinite(X).all():
        raise ValueError(f"{path}: X holds NaN or infinite values (after the cast to float32)")
    return X, n_full


def uniform_like(n: int, d: int, seed: int = 0) -> np.ndarray:
    """Uniform random points in [0, 1)^d, float32: the shape-matched comparison set."""
    return np.random.default_rng(seed).random((n, d), dtype=np.float32)


def sample_rows(n: int, size: int, seed: int = 0) -> np.ndarray:
    """A fixed sample of ``min(size, n)`` distinct row numbers, ascending."""
    size = min(size, n)
    if size == n:
        return np.arange(n, dtype=np.int64)
    return np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False)).astype(np.int64)


# ---------------------------------------------------------------------------------------
# float64 reference
# ---------------------------------------------------------------------------------------
def _exact_sq(X64: np.ndarray, rows: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Squared float64 distances from ``X64[rows[i]]`` to ``X64[idx[i, j]]`` by direct differences.

    The inputs are float32 values, so the differences are exact in float64 and the
    sums are within float64 rounding of the true squared distance.
    """
    s, m = idx.shape
    d = X64.shape[1]
    out = np.empty((s, m), dtype=np.float64)
    step = max(1, 2**22 // max(1, m * d))
    for a in range(0, s, step):
        diff = X64[idx[a : a + step]] - X64[rows[a : a + step]][:, None, :]
        out[a : a + step] = np.einsum("ijk,ijk->ij", diff, diff)
    return out


def _approx_block(A, Qa, c0, c1, rows):
    """``||y||² − 2 x·y`` of the queries (``Qa = [Xc[rows], 1]``) against rows c0..c1 in one float64 product.

    ``A = [−2·Xc, ||Xc||²]``; adding the query's own ``||x||²`` would shift a whole row, so the
    ranking within a row needs none (it is added where a bound is checked). Self at +inf.
    """
    D = Qa @ A[c0:c1].T
    own = ((rows >= c0) & (rows < c1)).nonzero().squeeze(1)
    D[own, rows[own] - c0] = float("inf")
    return D


def _reference_block(X64, A, rn, rows, k, chunk_bytes, extra, strict_ties):
    n, d = X64.shape
    s = rows.shape[0]
    P = min(n - 1, k + extra)
    rows_t = torch.from_numpy(rows).to(A.device)
    Qa = torch.cat([A[rows_t, :-1] / -2.0, torch.ones((s, 1), dtype=A.dtype, device=A.device)], dim=1)
    C = max(4 * P + 4, chunk_bytes // (8 * s))
    # 1. a pool of the P smallest by the product form (on A's device, float64)
    pool_v = torch.empty((s, 0), dtype=A.dtype, device=A.device)
    pool_i = torch.empty((s, 0), dtype=torch.int64, device=A.device)
    for c0 in range(0, n, C):
        c1 = min(n, c0 + C)
        both = torch.cat([pool_v, _approx_block(A, Qa, c0, c1, rows_t)], dim=1)
        v, j = torch.topk(both, min(P, both.shape[1]), dim=1, largest=False, sorted=True)
        m = pool_i.shape[1]
        pool_i = torch.where(j < m, pool_i.gather(1, j.clamp(max=max(m - 1, 0))) if m else j, j - m + c0)
        pool_v = v
    pool_v, pool_i = pool_v.cpu().numpy(), pool_i.cpu().numpy()
    # 2. every candidate's exact distance by direct differences, stable order (ties to the lower index)
    e2 = _exact_sq(X64, rows, pool_i)
    order = np.lexsort((pool_i, e2), axis=1)
    e2, idx = np.take_along_axis(e2, order, 1), np.take_along_axis(pool_i, order, 1)
    # 3. a row left out of the pool only points whose product form is >= the pool's largest, so
    #    whose exact squared distance is >= that minus the rounding bound. Where that could be
    #    below the k-th distance by more than _REF_SLACK relative, every row near the k-th
    #    distance is gathered and ranked exactly. Without strict_ties, duplicates (k-th distance
    #    0) and ties in the pool need no second pass: the distances are already those of the true
    #    k nearest, only which of the tied indices is listed may differ. With strict_ties a row is
    #    gathered whenever a point left out could tie with its k-th, so ties go to the lowest index.
    qn = rn[rows]
    bound = (2 * d + 8) * _EPS64 * (qn + rn.max())
    kth2 = e2[:, k - 1]
    lowest_left_out = pool_v[:, -1] + qn - bound
    if strict_ties:
        redo = (P < n - 1) & (lowest_left_out <= kth2)
    else:
        redo = (P < n - 1) & (kth2 > 0) & (lowest_left_out < kth2 * (1 - _REF_SLACK))
    out_e2, out_i = e2[:, :k].copy(), idx[:, :k].copy()
    if redo.any():
        which = np.nonzero(redo)[0]
        thr = torch.from_numpy(kth2[which] - qn[which] + 2 * bound[which]).to(A.device)
        e2_r, i_r = _gather_near(X64, A, Qa[torch.from_numpy(which).to(A.device)], rows[which], thr, k, C)
        out_e2[which], out_i[which] = e2_r, i_r
    return np.sqrt(out_e2), out_i, int(redo.sum())


def _gather_near(X64, A, Qa, rows, thr, k, C):
    """Exact k nearest of each row among every row whose shifted product form is <= thr."""
    n = X64.shape[0]
    s = rows.shape[0]
    rows_t = torch.from_numpy(rows).to(A.device)
    rs, cs = [], []
    for c0 in range(0, n, C):
        c1 = min(n, c0 + C)
        D = _approx_block(A, Qa, c0, c1, rows_t)
        r_new, c_new = (D <= thr[:, None]).nonzero(as_tuple=True)
        rs.append(r_new.cpu().numpy())
        cs.append(c_new.cpu().numpy() + c0)
    r_all, i_all = np.concatenate(rs), np.concatenate(cs).astype(np.int64)
    e2 = np.empty(r_all.shape[0], dtype=np.float64)
    step = 1 << 18
    for a in range(0, r_all.shape[0], step):
        diff = X64[i_all[a : a + step]] - X64[rows[r_all[a : a + step]]]
        e2[a : a + step] = np.einsum("ij,ij->i", diff, diff)
    order = np.lexsort((i_all, e2, r_all))
    counts = np.bincount(r_all, minlength=s)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    take = order[(starts[:, None] + np.arange(k)[None, :]).ravel()].reshape(s, k)
    return e2[take], i_all[take]


def reference_knn(X, rows, k: int, *, block_rows: int = 2048, chunk_bytes: int = 2**28, extra: int = 16,
                  device=None, strict_ties: bool = False, stats: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact float64 k nearest neighbours of ``X[rows]`` among all rows of ``X``, each row excluding itself.

    Returns ``(distances, indices)``, each ``(len(rows), k)``, ascending by distance, equal
    distances in ascending index order among the candidates. Candidates come from a float64
    product ``||y||² − 2 x·y`` on ``device`` (torch; default the CPU), then every candidate's
    distance is computed in NumPy float64 by direct differences of the given values (float32
    data stay exactly those values). A row is searched again, with every row near its k-th
    distance, when rounding could have left out a point nearer than that by more than 1e-9
    relative, or with ``strict_ties`` one that could tie with it (then the indices are exactly
    the lowest among equal float64 distances); ``stats`` receives how many (``rows_regathered``).

    Examples
    --------
    >>> X = np.array([[0.0], [1.0], [1.0], [3.0]], dtype=np.float32)
    >>> d, i = reference_knn(X, np.array([0, 3]), 2)
    >>> i.tolist(), d.tolist()
    ([[1, 2], [1, 2]], [[1.0, 1.0], [2.0, 2.0]])
    """
    X64 = np.asarray(X, dtype=np.float64)
    n = X64.shape[0]
    rows = np.asarray(rows, dtype=np.int64)
    if not 1 <= k <= n - 1:
        raise ValueError(f"k = {k} needs 1 <= k <= n - 1 = {n - 1}")
    # centred for the product form: smaller norms, smaller rounding (the exact step uses X64)
    Xc = X64 - X64.mean(axis=0)
    rn = np.einsum("ij,ij->i", Xc, Xc)
    A = torch.from_numpy(np.concatenate([-2.0 * Xc, rn[:, None]], axis=1)).to(torch.device(device or "cpu"))
    dist = np.empty((rows.shape[0], k), dtype=np.float64)
    index = np.empty((rows.shape[0], k), dtype=np.int64)
    redone = 0
    for a in range(0, rows.shape[0], block_rows):
        d_b, i_b, r_b = _reference_block(X64, A, rn, rows[a : a + block_rows], k, chunk_bytes, extra, strict_ties)
        dist[a : a + block_rows], index[a : a + block_rows] = d_b, i_b
        redone += r_b
    if stats is not None:
        stats["rows_regathered"] = stats.get("rows_regathered", 0) + redone
    return dist, index


def _valid_neighbours(idx: np.ndarray, rows: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(per entry: in range and not the row itself, per row: no index repeated)."""
    valid = (idx >= 0) & (idx < n) & (idx != rows[:, None])
    srt = np.sort(idx, axis=1)
    distinct = ~(srt[:, 1:] == srt[:, :-1]).any(axis=1) if idx.shape[1] > 1 else np.ones(idx.shape[0], bool)
    return valid, distinct


def check_knn(X, rows, ref_d, ref_i, idx, dist=None, rtol: float = RTOL) -> dict:
    """Compare a kNN result on the sampled ``rows`` with the float64 reference.

    ``idx``/``dist`` hold the result's rows for ``rows`` (``(s, k)``). A row is mismatched
    when an entry is invalid (out of range, the row itself, repeated) or its index differs
    from the reference's at that position while their float64 distances differ by more
    than ``rtol`` relative. ``max_rel_dist_err``: the largest relative error of the
    returned distances against the float64 distances of the returned indices.

    Examples
    --------
    >>> X = np.array([[0.0], [1.0], [1.0], [3.0]], dtype=np.float32)
    >>> rows = np.array([0, 3])
    >>> rd, ri = reference_knn(X, rows, 2)
    >>> check_knn(X, rows, rd, ri, np.array([[2, 1], [1, 0]]))["mismatched_rows"]
    1
    """
    X64 = np.asarray(X, dtype=np.float64)
    n = X64.shape[0]
    idx = np.asarray(idx, dtype=np.int64)
    s, k = idx.shape
    valid, distinct = _valid_neighbours(idx, rows, n)
    e = np.sqrt(_exact_sq(X64, rows, np.clip(idx, 0, n - 1)))
    rd, ri = ref_d[:, :k], ref_i[:, :k]
    tied = np.abs(e - rd) <= rtol * rd
    ok = valid & ((idx == ri) | tied)
    bad = ~(ok.all(axis=1) & distinct)
    out = {"exact_rows_checked": int(s), "mismatched_rows": int(bad.sum()), "max_rel_dist_err": None}
    if dist is not None and valid.any():
        dist = np.asarray(dist, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(e > 0, np.abs(dist - e) / e, np.where(dist == 0, 0.0, np.inf))
        out["max_rel_dist_err"] = float(rel[valid].max())
    if bad.any():
        out["first_mismatched_rows"] = rows[bad][:5].tolist()
    return out


def knn_recall(X, rows, ref_d, idx, rtol: float = RTOL) -> float:
    """Fraction of returned neighbours (valid, distinct) within ``rtol`` of the k-th float64 reference distance."""
    X64 = np.asarray(X, dtype=np.float64)
    n = X64.shape[0]
    idx = np.asarray(idx, dtype=np.int64)
    s, k = idx.shape
    valid, distinct = _valid_neighbours(idx, rows, n)
    e = np.sqrt(_exact_sq(X64, rows, np.clip(idx, 0, n - 1)))
    found = valid & distinct[:, None] & (e <= ref_d[:, k - 1 : k] * (1 + rtol))
    return float(found.sum()) / float(s * k)


def reference_lof(X, k: int = 20, device=None, near_tie: float = 1e-5) -> tuple[np.ndarray, np.ndarray, dict]:
    """Textbook LOF in float64 from the exact kNN of every row, the rows it is comparable on, and counts.

    LOF(p) depends on which points are the k nearest of p and of each of its neighbours;
    where the k-th and (k+1)-th distances of one of them differ but by at most ``near_tie``
    relative, float32 rounding may pick the other point and the score moves by far more than
    rounding. Those rows are left out, as are rows whose score involves a point of k-distance
    0 (gpumine's rule for duplicates replaces it with a k-distinct-distance). Exact ties are
    kept: both sides take the lower index.
    """
    n = X.shape[0]
    d_all, i_all = reference_knn(X, np.arange(n), min(k + 1, n - 1), device=device, strict_ties=True)
    d, i = d_all[:, :k], i_all[:, :k]
    kd = d[:, -1]
    reach = np.maximum(d, kd[i])
    with np.errstate(divide="ignore", invalid="ignore"):
        lrd = 1.0 / reach.mean(axis=1)
        lof = lrd[i].mean(axis=1) / lrd
    zero = kd == 0
    touched = zero[i].any(axis=1)
    duplicates = touched | touched[i].any(axis=1)
    if d_all.shape[1] > k:
        nxt = d_all[:, k]
        shaky = (nxt > kd) & (nxt <= kd * (1 + near_tie))
    else:
        shaky = np.zeros(n, dtype=bool)
    near = shaky | shaky[i].any(axis=1)
    comparable = ~duplicates & ~near & np.isfinite(lof)
    return lof, comparable, {"rows_left_out_duplicates": int(duplicates.sum()),
                             "rows_left_out_near_ties": int((near & ~duplicates).sum())}


def _rel_diff(a, b) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.abs(a - b) / np.maximum(np.abs(b), np.finfo(np.float64).tiny)


# ---------------------------------------------------------------------------------------
# peers
# ---------------------------------------------------------------------------------------
def torch_knn(X: torch.Tensor, k: int, chunk_bytes: int = 2**31) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain PyTorch all-kNN: addmm squared distances over query chunks, own entry +inf, topk.

    A chunk's distance block is about ``chunk_bytes``; distances come back as
    ``sqrt(max(d², 0))`` of the top k.
    """
    n = X.shape[0]
    rows = max(1, min(n, chunk_bytes // (4 * n)))
    sq = (X * X).sum(dim=1)
    out_d = torch.empty((n, k), dtype=X.dtype, device=X.device)
    out_i = torch.empty((n, k), dtype=torch.int64, device=X.device)
    for q0 in range(0, n, rows):
        q1 = min(n, q0 + rows)
        D = torch.addmm(sq[None, :], X[q0:q1], X.T, beta=1.0, alpha=-2.0)
        D += sq[q0:q1, None]
        own = torch.arange(q1 - q0, device=X.device)
        D[own, own + q0] = float("inf")
        v, j = torch.topk(D, k, dim=1, largest=False)
        out_d[q0:q1] = v.clamp_min_(0).sqrt_()
        out_i[q0:q1] = j
        del D
    return out_d, out_i


def torch_lof(X: torch.Tensor, k: int = 20, chunk_bytes: int = 2**31) -> torch.Tensor:
    """Plain PyTorch LOF on :func:`torch_knn` (scikit-learn's formula); the negative outlier factors."""
    d, i = torch_knn(X, k, chunk_bytes)
    reach = torch.maximum(d, d[:, -1][i])
    lrd = 1.0 / (reach.mean(dim=1) + 1e-10)
    return -(lrd[i].mean(dim=1) / lrd)


def torch_top_n(X: torch.Tensor, n_outliers: int = N_OUTLIERS, k: int = 5, chunk_bytes: int = 2**31):
    """Plain PyTorch top-n: the largest sums of the k nearest distances; (indices, weights)."""
    d, _ = torch_knn(X, k, chunk_bytes)
    w, j = torch.topk(d.sum(dim=1), n_outliers)
    return j, w


def sklearn_knn(X: np.ndarray, k: int):
    """scikit-learn all-kNN, default algorithm, all cores (``kneighbors()`` excludes each point)."""
    from sklearn.neighbors import NearestNeighbors

    return NearestNeighbors(n_neighbors=k, n_jobs=-1).fit(X).kneighbors()


def sklearn_lof(X: np.ndarray, k: int = 20) -> np.ndarray:
    from sklearn.neighbors import LocalOutlierFactor

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its duplicates warning: the scores are compared, not used
        return LocalOutlierFactor(n_neighbors=k, n_jobs=-1).fit(X).negative_outlier_factor_


def sklearn_top_n(X: np.ndarray, n_outliers: int = N_OUTLIERS, k: int = 5):
    d, _ = sklearn_knn(X, k)
    w = d.sum(axis=1)
    order = np.lexsort((np.arange(w.shape[0]), -w))[:n_outliers]
    return order, w[order]


# ---------------------------------------------------------------------------------------
# gpumine
# ---------------------------------------------------------------------------------------
def _gpumine_knn(X, k, device):
    from gpumine.neighbors import kneighbors

    return kneighbors(X, None, k, device=device, verbose=0)


def _gpumine_lof(X, device):
    from gpumine.outliers import LocalOutlierFactor

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DuplicatesWarning: its count is recorded instead
        model = LocalOutlierFactor(n_neighbors=20, device=device, verbose=0).fit(X)
    return model.negative_outlier_factor_, int(model.n_duplicate_points_)


def _gpumine_top_n(X, device):
    from gpumine.outliers import top_n_outliers

    res = top_n_outliers(X, n_outliers=N_OUTLIERS, k=5, device=device, verbose=0)
    return res.indices, res.weights, res


def _np(a) -> np.ndarray:
    return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


def _plain(value, depth: int = 0):
    """JSON-friendly copy of engine statistics (tensors and odd objects become short strings)."""
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    if isinstance(value, dict) and depth < 3:
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and depth < 3:
        return [_plain(v, depth + 1) for v in value[:20]]
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    text = str(value)
    return text if len(text) <= 200 else text[:200] + "…"


@contextlib.contextmanager
def _knn_engine_stats(stats: dict):
    from benchmarks.knn import _engine_stats

    with _engine_stats(stats):
        yield


# ---------------------------------------------------------------------------------------
# the sweep
# ---------------------------------------------------------------------------------------
class _Skip(Exception):
    """A case not run (time budget, set cap): recorded with the reason."""


class Sweep:
    """Runs the cases of every set on one device and keeps the records."""

    def __init__(self, args, device: torch.device, argv=None):
        self.args = args
        self.device = device
        self.on_gpu = device.type == "cuda"
        self.records: list[dict] = []
        self.start = time.perf_counter()
        self.meta = environment(device)
        self.meta.update(
            benchmark="realdata",
            argv=list(sys.argv[1:] if argv is None else argv),
            data=str(args.data),
            repeats=args.repeats,
            skip_slow_after=args.skip_slow_after,
            warmup_only_after=args.warmup_only_after,
            order=args.order,
            set_cap=args.set_cap,
            time_budget=args.time_budget,
            sample=args.sample,
            max_rows=args.max_rows,
            cpu_max_rows=args.cpu_max_rows if not self.on_gpu else None,
            torch_chunk_bytes=int(args.torch_chunk_mib * 2**20),
            peer="torch" if self.on_gpu else "sklearn",
            timing="best of up to `repeats` runs after a warm-up, wall clock, GPU synchronised before and after; "
            "repeats stop once the timed runs add up to skip_slow_after; a warm-up over warmup_only_after is the only "
            "run (gpumine_runs = 0); the peer warms up on its first case of a set, the host column not at all "
            "(the device runs warmed gpumine up); where both best runs are under quick_below seconds, "
            "quick_rounds more rounds alternate gpumine and the peer call by call (best of all runs)",
            quick_below=args.quick_below,
            quick_rounds=args.quick_rounds,
            exactness=(
                "float64 all-rows reference on a fixed sample of rows; a row is mismatched where an index is invalid "
                f"or differs from the reference and the float64 distances differ by > {RTOL:g} relative; "
                f"peer_recall counts returned neighbours within {RTOL:g} of the k-th reference distance; LOF: "
                f"scores within {LOF_RTOL:g} relative of a float64 LOF (sets up to lof_exact_max_rows rows; rows "
                "untouched by duplicates and by near-ties at a k-th neighbour); top10: float64 weights of the "
                "union of gpumine's and the peer's outliers"
            ),
            lof_exact_max_rows=args.lof_exact_max_rows,
        )

    def log(self, message: str) -> None:
        print(message, flush=True)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def save(self, final: bool = False) -> None:
        """Write the JSON and markdown (after every set); the plot only at the end (it takes a second)."""
        meta = dict(self.meta, total_seconds=round(self.elapsed(), 1))
        if self.args.out is not None:
            write_json(self.args.out, self.records)
            write_json(meta_path(self.args.out), meta)
        if self.args.markdown is not None:
            write_text(self.args.markdown, render_markdown(self.records, {self.meta["device"]: meta}))
        if final and self.args.plot is not None:
            plot_speedups(self.records, self.args.plot)

    # -- timing ------------------------------------------------------------------------
    def timed(self, fn, label: str, warm_up: bool = True, extra: int = 0):
        """(best seconds, timed runs, note, last result, seconds spent) of ``fn``, after a warm-up run.

        Repeats (``--repeats`` and ``extra`` more) stop once the timed runs add up to
        ``--skip-slow-after``; a warm-up longer than ``--warmup-only-after`` is the only run
        (runs = 0: its time includes any first-call work).
        """
        slow, cap = self.args.skip_slow_after, self.args.warmup_only_after
        repeats = self.args.repeats + extra
        start = time.perf_counter()
        out = None
        if warm_up:
            t0, out = time_call(fn, self.device)
            if t0 > cap:
                note = f"{label}: the warm-up took {t0:.1f} s > --warmup-only-after {cap:g} s: it is the only run"
                return t0, 0, note, out, time.perf_counter() - start
        times = []
        for _ in range(repeats):
            out = None  # the previous result is freed before the next run allocates
            t, out = time_call(fn, self.device)
            times.append(t)
            if sum(times) >= slow:
                break
        note = ""
        if len(times) < repeats:
            note = f"{label}: {len(times)} of {repeats} runs (they add up to over {slow:g} s)"
        return min(times), len(times), note, out, time.perf_counter() - start

    def alternate(self, first, second, best_first: float, best_second: float) -> tuple[float, float, int, float]:
        """Best seconds of ``first`` and ``second`` after ``--quick-rounds`` more rounds of one call
        each, in turn (each result freed before the next call), the rounds run and the seconds spent."""
        start = time.perf_counter()
        for _ in range(self.args.quick_rounds):
            best_first = min(best_first, time_call(first, self.device)[0])
            best_second = min(best_second, time_call(second, self.device)[0])
        return best_first, best_second, self.args.quick_rounds, time.perf_counter() - start

    def warm_up(self) -> None:
        """One small search of each kind first, so imports and kernel builds land in no set's warm-up."""
        X = uniform_like(512, 8, seed=1)
        Xd = torch.from_numpy(X).to(self.device) if self.on_gpu else X
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for k in (5, 20):
                _gpumine_knn(Xd, k, self.device)
            _gpumine_lof(Xd, self.device)
            _gpumine_top_n(Xd, self.device)
            if self.on_gpu:
                torch_knn(Xd, 20)
                torch.cuda.synchronize(self.device)
            else:
                sklearn_knn(X, 5)

    # -- one set -------------------------------------------------------------------------
    def run_set(self, number: int, total: int, path: Path) -> None:
        args = self.args
        cut = args.max_rows
        if not self.on_gpu and args.cpu_max_rows is not None:
            cut = args.cpu_max_rows if cut is None else min(cut, args.cpu_max_rows)
        name = path.stem
        try:
            X, n_full = load_set(path, cut)
        except Exception as exc:  # noqa: BLE001 - a broken file is recorded, the sweep goes on
            self.log(f"[{number}/{total}] {name}: cannot load: {exc}")
            for case in args.cases:
                self.records.append(self._record(name, 0, 0, 0, case, error=f"load: {exc}"))
            return
        n, d = X.shape
        where = f"[{number}/{total}] {name} ({n:,} x {d}{'' if n == n_full else f', first {n:,} of {n_full:,} rows'})"
        ctx = {"name": name, "X": X, "n": n, "n_full": n_full, "d": d, "where": where, "gpumine_spent": 0.0,
               "peer_warm": False}
        t = time.perf_counter()
        ctx["rows"] = sample_rows(n, args.sample, args.seed)
        ref_stats: dict = {}
        kmax = max([CASE_K[c] for c in args.cases if c.startswith("knn")] + [0])
        ctx["ref"] = None
        if kmax and n > kmax:
            ctx["ref"] = reference_knn(X, ctx["rows"], kmax, device=self.device, stats=ref_stats)
        ctx["ref_seconds"] = time.perf_counter() - t
        ctx["ref_regathered"] = ref_stats.get("rows_regathered", 0)
        self.log(f"{where}: float64 reference for {len(ctx['rows']):,} rows in {ctx['ref_seconds']:.1f} s")
        ctx["Xd"] = torch.from_numpy(X).to(self.device) if self.on_gpu else None
        try:
            for case in args.cases:
                record = self._record(name, n, n_full, d, case)
                try:
                    if args.time_budget is not None and self.elapsed() > args.time_budget:
                        raise _Skip(f"skipped: --time-budget {args.time_budget:g} s spent")
                    if args.set_cap is not None and ctx["gpumine_spent"] > args.set_cap:
                        raise _Skip(f"skipped: gpumine spent {ctx['gpumine_spent']:.0f} s on this set "
                                    f"(> --set-cap {args.set_cap:g} s)")
                    if n < CASE_K[case] + 1:
                        raise _Skip(f"skipped: {n} rows are too few for k = {CASE_K[case]}")
                    self.run_case(ctx, case, record)
                except _Skip as why:
                    record["error"] = str(why)
                except Exception as exc:  # noqa: BLE001 - one failing case must not lose the others
                    record["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
                    if args.traceback:
                        traceback.print_exc()
                self.records.append(record)
                self.log(self._progress(ctx, record))
                if self.on_gpu:
                    torch.cuda.empty_cache()
        finally:
            ctx.clear()
            if self.on_gpu:
                torch.cuda.empty_cache()

    def _record(self, name, n, n_full, d, case, **extra) -> dict:
        record = {
            "set": name, "rows": n, "rows_full": n_full, "d": d, "case": case, "k": CASE_K[case],
            "device": str(self.device), "device_name": self.meta["device_name"],
            "gpumine_s": None, "gpumine_runs": None, "gpumine_host_s": None,
            "peer": self.meta["peer"], "peer_s": None, "speedup": None, "host_speedup": None,
            "exact_rows_checked": None, "mismatched_rows": None, "max_rel_dist_err": None,
            "peer_recall": None, "notes": [], "error": None,
        }
        if case == "top10":
            record["n_outliers"] = N_OUTLIERS
        record.update(extra)
        return record

    def _progress(self, ctx, r) -> str:
        head = f"{ctx['where']} {r['case']}:"
        if r["gpumine_s"] is None:
            return f"{head} {r['error'] or 'not run'}"
        parts = [f"gpumine {format_seconds(r['gpumine_s'])}"]
        if r.get("gpumine_host_s") is not None:
            parts[-1] += f" (host {format_seconds(r['gpumine_host_s'])})"
        if r.get("peer_s") is not None:
            parts.append(f"{r['peer']} {format_seconds(r['peer_s'])} -> x{r['speedup']:.2f}")
        elif r.get("peer_error"):
            parts.append(f"{r['peer']} failed: {r['peer_error'][:120]}")
        if r.get("mismatched_rows") is not None:
            parts.append(f"mismatched {r['mismatched_rows']}/{r['exact_rows_checked']:,}")
        if r.get("peer_recall") is not None:
            parts.append(f"{r['peer']} recall {r['peer_recall']:.4f}")
        if r.get("ratio_to_uniform") is not None:
            parts.append(f"vs uniform x{r['ratio_to_uniform']:.2f}")
        if r.get("error"):
            parts.append(f"error: {r['error']}")
        return f"{head} " + "; ".join(parts)

    # -- one case ------------------------------------------------------------------------
    def run_case(self, ctx, case: str, rec: dict) -> None:
        X, Xd, dev = ctx["X"], ctx["Xd"], self.device
        gin = Xd if self.on_gpu else X
        chunk = int(self.args.torch_chunk_mib * 2**20)
        if case.startswith("knn"):
            k = CASE_K[case]
            gm, host = partial(_gpumine_knn, gin, k, dev), partial(_gpumine_knn, X, k, dev)
            peer = partial(torch_knn, Xd, k, chunk) if self.on_gpu else partial(sklearn_knn, X, k)
        elif case == "lof":
            gm, host = partial(_gpumine_lof, gin, dev), partial(_gpumine_lof, X, dev)
            peer = partial(torch_lof, Xd, 20, chunk) if self.on_gpu else partial(sklearn_lof, X, 20)
        else:
            gm, host = partial(_gpumine_top_n, gin, dev), partial(_gpumine_top_n, X, dev)
            peer = partial(torch_top_n, Xd, N_OUTLIERS, 5, chunk) if self.on_gpu else partial(sklearn_top_n, X, N_OUTLIERS, 5)
        notes = rec["notes"]

        # gpumine (on the device), its engine statistics collected in the warm-up
        stats: dict = {}
        with (_knn_engine_stats(stats) if case.startswith("knn") else contextlib.nullcontext()):
            seconds, runs, note, g_out, spent = self.timed(gm, "gpumine")
        ctx["gpumine_spent"] += spent
        rec.update(gpumine_s=seconds, gpumine_runs=runs)
        if note:
            notes.append(note)
        if stats:
            rec["engine_stats"] = _plain(stats)
        slow = seconds > self.args.skip_slow_after or runs == 0

        # peer: its first case on a set warms it up for the others (no compilation, same shapes)
        p_out = None
        try:
            p_seconds, p_runs, p_note, p_out, _ = self.timed(peer, self.meta["peer"], warm_up=not ctx["peer_warm"])
            ctx["peer_warm"] = True
            rec.update(peer_s=p_seconds, peer_runs=p_runs, speedup=p_seconds / seconds if seconds > 0 else None)
            if p_note:
                notes.append(p_note)
        except Exception as exc:  # noqa: BLE001
            rec["peer_error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"

        # quick calls: more runs, taken in turn (see the module docstring)
        quick = 0
        if (rec["peer_s"] is not None and max(seconds, rec["peer_s"]) < self.args.quick_below and runs > 0
                and rec.get("peer_runs", 0) > 0):
            seconds, p_seconds, quick, spent = self.alternate(gm, peer, seconds, rec["peer_s"])
            ctx["gpumine_spent"] += spent
            rec.update(gpumine_s=seconds, peer_s=p_seconds, speedup=p_seconds / seconds if seconds > 0 else None,
                       gpumine_runs=runs + quick, peer_runs=rec["peer_runs"] + quick, quick_rounds=quick)

        # exactness
        self._check(ctx, case, rec, g_out, p_out)

        # gpumine from host NumPy to NumPy (GPU runs)
        if self.on_gpu and not self.args.no_host:
            if slow:
                notes.append("host column skipped: the device run was over --skip-slow-after")
            else:
                # the device runs have warmed gpumine up; the host path adds copies only
                h_seconds, h_runs, h_note, h_out, spent = self.timed(host, "gpumine host", warm_up=False, extra=quick)
                ctx["gpumine_spent"] += spent
                rec.update(gpumine_host_s=h_seconds,
                           host_speedup=rec["peer_s"] / h_seconds if rec["peer_s"] and h_seconds > 0 else None)
                if h_note:
                    notes.append(h_note)
                rec["host_matches_device"] = _same_result(case, g_out, h_out)
                del h_out
        del g_out, p_out

        # the uniform set of the same shape
        if case == "knn20" and self.args.uniform:
            U = uniform_like(ctx["n"], ctx["d"], seed=0)
            Ud = torch.from_numpy(U).to(dev) if self.on_gpu else U
            u_seconds, u_runs, u_note, u_out, spent = self.timed(partial(_gpumine_knn, Ud, 20, dev), "uniform", extra=quick)
            ctx["gpumine_spent"] += spent
            del u_out, Ud
            rec.update(uniform_gpumine_s=u_seconds, ratio_to_uniform=seconds / u_seconds if u_seconds > 0 else None)
            if u_note:
                notes.append(u_note)

    def _check(self, ctx, case, rec, g_out, p_out) -> None:
        X, rows, n = ctx["X"], ctx["rows"], ctx["n"]
        rows_t = torch.from_numpy(rows)
        if case.startswith("knn"):
            if ctx["ref"] is None:
                return
            ref_d, ref_i = ctx["ref"]
            k = CASE_K[case]

            def take(a):
                if isinstance(a, torch.Tensor):
                    return a[rows_t.to(a.device)].cpu().numpy()
                return np.asarray(a)[rows]

            g_d, g_i = g_out
            rec.update(check_knn(X, rows, ref_d, ref_i, take(g_i), take(g_d)))
            rec["reference_seconds"] = round(ctx["ref_seconds"], 3)
            rec["reference_rows_regathered"] = ctx["ref_regathered"]
            if p_out is not None:
                rec["peer_recall"] = knn_recall(X, rows, ref_d[:, :k], take(p_out[1]))
        elif case == "lof":
            g_nof, n_dup = g_out
            g_nof = _np(g_nof).astype(np.float64)
            rec["n_duplicate_points"] = n_dup
            if p_out is not None:
                p_nof = _np(p_out).astype(np.float64)
                both = np.isfinite(g_nof) & np.isfinite(p_nof)
                rel = _rel_diff(g_nof[both], p_nof[both])
                rec["peer_max_rel_score_diff"] = float(rel.max()) if rel.size else None
                rec["peer_score_diff_rows"] = int((rel > LOF_RTOL).sum() + (~both).sum())
            if self.args.lof_exact_max_rows and n <= self.args.lof_exact_max_rows:
                ref_lof, comparable, left_out = reference_lof(X, 20, self.device)
                rel = _rel_diff(-g_nof[comparable], ref_lof[comparable])
                rec.update(exact_rows_checked=int(comparable.sum()), mismatched_rows=int((rel > LOF_RTOL).sum()),
                           max_rel_score_err=float(rel.max()) if rel.size else None, **left_out)
                if rec["mismatched_rows"]:
                    rec["first_mismatched_rows"] = np.nonzero(comparable)[0][rel > LOF_RTOL][:5].tolist()
        else:
            g_idx, g_w, res = g_out
            g_idx, g_w = _np(g_idx).astype(np.int64), _np(g_w).astype(np.float64)
            rec["engine_stats"] = _plain({key: v for key, v in res.stats.items() if key != "trace"})
            rec["solving_set_size"] = int(len(res.solving_set))
            rec["distance_fraction"] = float(res.distance_fraction)
            p_idx = _np(p_out[0]).astype(np.int64) if p_out is not None else np.empty(0, np.int64)
            rec.update(_check_top_n(X, g_idx, g_w, p_idx, device=self.device))


def _check_top_n(X, g_idx, g_w, p_idx, k: int = 5, device=None) -> dict:
    """gpumine's top-n against float64 weights of the union of gpumine's and the peer's outliers."""
    n_out = g_idx.shape[0]
    cand = np.unique(np.concatenate([g_idx, p_idx]))
    d, _ = reference_knn(X, cand, k, device=device)
    w64 = d.sum(axis=1)
    order = np.lexsort((cand, -w64))[:n_out]
    ref_top, ref_w = cand[order], w64[order]
    w_of = dict(zip(cand.tolist(), w64.tolist()))
    g_w64 = np.array([w_of[i] for i in g_idx.tolist()])
    ok = (g_idx == ref_top) | (np.abs(g_w64 - ref_w) <= RTOL * ref_w)
    out = {
        "exact_rows_checked": int(cand.shape[0]),
        "mismatched_rows": int((~ok).sum()),
        "max_rel_dist_err": float(_rel_diff(g_w, g_w64).max()) if n_out else None,
    }
    if p_idx.size:
        p_w64 = np.array([w_of[i] for i in p_idx.tolist()])
        out["peer_recall"] = float((p_w64 >= ref_w[-1] * (1 - RTOL)).mean())
    return out


def _same_result(case, a, b) -> bool:
    try:
        if case.startswith("knn"):
            return bool(np.array_equal(_np(a[1]), _np(b[1])))
        if case == "lof":
            return bool(np.allclose(_np(a[0]), _np(b[0]), rtol=1e-6, atol=0, equal_nan=True))
        return bool(np.array_equal(_np(a[0]), _np(b[0])))
    except Exception:  # noqa: BLE001
        return False


def meta_path(out: Path) -> Path:
    out = Path(out)
    return out.with_name(out.stem + ".meta.json")


# ---------------------------------------------------------------------------------------
# summary, markdown, plot
# ---------------------------------------------------------------------------------------
def _geomean(values) -> float | None:
    values = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _by_device(records) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in records:
        out.setdefault(r.get("device", "?"), []).append(r)
    return out


def summarize(records: list[dict]) -> dict:
    """Summary of one device's records.

    A set's speedup is the geometric mean of its cases' speedups; ``sets_ge_1`` counts sets at
    or above 1.0x, ``big_sets_ge_3`` sets of at least 20,000 rows at or above 3x.
    """
    speedups = [r["speedup"] for r in records if r.get("speedup")]
    per_set: dict[str, list[float]] = {}
    rows: dict[str, int] = {}
    for r in records:
        rows[r["set"]] = r.get("rows") or 0
        if r.get("speedup"):
            per_set.setdefault(r["set"], []).append(r["speedup"])
    set_speed = {s: _geomean(v) for s, v in per_set.items()}
    big = {s: v for s, v in set_speed.items() if rows.get(s, 0) >= BIG_ROWS}
    uniform = [r["ratio_to_uniform"] for r in records if r.get("ratio_to_uniform") is not None]
    checked = [r for r in records if r.get("mismatched_rows") is not None]
    return {
        "cases": len(records),
        "cases_timed": len(speedups),
        "geomean_speedup": _geomean(speedups),
        "geomean_by_case": {c: _geomean(r["speedup"] for r in records if r["case"] == c and r.get("speedup"))
                            for c in CASES},
        "geomean_host_speedup": _geomean(r.get("host_speedup") for r in records),
        "sets": len(set_speed),
        "sets_ge_1": sum(v >= 1.0 for v in set_speed.values()),
        "big_sets": len(big),
        "big_sets_ge_3": sum(v >= 3.0 for v in big.values()),
        "uniform_checked": len(uniform),
        "uniform_within_2x": sum(v <= 2.0 for v in uniform),
        "mismatched_rows": sum(r["mismatched_rows"] for r in checked),
        "rows_checked": sum(r["exact_rows_checked"] or 0 for r in checked),
        "cases_mismatched": sum(1 for r in checked if r["mismatched_rows"]),
        "errors": sum(1 for r in records if r.get("error")),
        "slower_cases": sorted((f"{r['set']} {r['case']} x{r['speedup']:.2f}" for r in records
                                if r.get("speedup") and r["speedup"] < 1.0)),
    }


def summary_line(s: dict) -> str:
    def x(v):
        return "—" if v is None else f"x{v:.2f}"

    by_case = ", ".join(f"{c} {x(v)}" for c, v in s["geomean_by_case"].items() if v is not None)
    text = (f"geometric-mean speedup {x(s['geomean_speedup'])} over {s['cases_timed']} cases ({by_case}); "
            f"sets >= 1.0x: {s['sets_ge_1']} of {s['sets']}; sets of >= {BIG_ROWS:,} rows >= 3x: "
            f"{s['big_sets_ge_3']} of {s['big_sets']}")
    if s["uniform_checked"]:
        text += f"; knn20 within 2x of uniform: {s['uniform_within_2x']} of {s['uniform_checked']}"
    text += f"; gpumine mismatched rows: {s['mismatched_rows']:,} of {s['rows_checked']:,} checked"
    if s["geomean_host_speedup"] is not None:
        text += f"; host NumPy in/out geomean {x(s['geomean_host_speedup'])}"
    if s["errors"]:
        text += f"; {s['errors']} case(s) not run or failed"
    return text


def _speed_cell(r) -> str:
    if r is None:
        return ""
    if r.get("speedup") is None:
        if r.get("gpumine_s") is not None:
            return f"({format_seconds(r['gpumine_s'])}, no peer)"
        return "error" if r.get("error") and not r["error"].startswith("skipped") else "skipped"
    cell = f"x{r['speedup']:.2f}"
    if r.get("gpumine_runs") == 0:
        cell += "*"
    return cell


def _exact_cell(recs) -> str:
    checked = [r for r in recs if r.get("mismatched_rows") is not None]
    if not checked:
        return "—"
    bad = [r for r in checked if r["mismatched_rows"]]
    if not bad:
        return "ok (" + format_count(sum(r["exact_rows_checked"] for r in checked)) + ")"
    return "; ".join(f"{r['case']} {r['mismatched_rows']}/{r['exact_rows_checked']:,}" for r in bad)


def render_markdown(records: list[dict], metas: dict | None = None) -> str:
    """One table per device: set | rows | d | speedups per case | knn20 vs uniform | exact."""
    metas = metas or {}
    out = ["## Real-data sweep (ADBench)", ""]
    for device, recs in _by_device(records).items():
        meta = metas.get(device, {})
        name = recs[0].get("device_name") or device
        peer = recs[0].get("peer")
        peer_label = ("plain PyTorch (addmm distances + topk, float32, data on the GPU)" if peer == "torch"
                      else "scikit-learn (default algorithm, n_jobs=-1)")
        out.append(f"### {name} — gpumine vs {peer_label}")
        out.append("")
        facts = []
        if meta.get("date"):
            facts.append(f"run {meta['date']}")
        versions = meta.get("versions") or {}
        if versions:
            facts.append(", ".join(f"{k} {v}" for k, v in versions.items() if v and k in ("gpumine", "torch", "triton", "scikit-learn", "numpy")))
        if meta.get("repeats"):
            facts.append(f"best of {meta['repeats']} after a warm-up")
        if meta.get("quick_rounds"):
            facts.append(f"calls under {meta['quick_below'] * 1e3:g} ms: {meta['quick_rounds']} more rounds, "
                         "gpumine and the peer in turn")
        if meta.get("cpu_max_rows"):
            facts.append(f"sets cut to their first {meta['cpu_max_rows']:,} rows")
        if facts:
            out += ["; ".join(facts) + ".", ""]
        out.append("speedup = peer seconds / gpumine seconds (> 1: gpumine faster). "
                   "`*`: gpumine's warm-up was its only run (over --warmup-only-after).")
        out.append("")
        out.append("| set | rows | d | knn5 speedup | knn20 speedup | LOF speedup | top10 | knn20 vs uniform | exact |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        sets: dict[str, dict[str, dict]] = {}
        for r in recs:
            sets.setdefault(r["set"], {})[r["case"]] = r
        for set_name, cases in sets.items():
            any_r = next(iter(cases.values()))
            rows = f"{any_r['rows']:,}" + ("" if any_r.get("rows_full") in (None, any_r["rows"]) else f" of {any_r['rows_full']:,}")
            uni = (cases.get("knn20") or {}).get("ratio_to_uniform")
            cells = [set_name, rows, str(any_r["d"])] + [_speed_cell(cases.get(c)) for c in CASES]
            cells += ["" if uni is None else f"{uni:.2f}", _exact_cell(cases.values())]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        out.append("**Summary:** " + summary_line(summarize(recs)) + ".")
        slower = summarize(recs)["slower_cases"]
        if slower:
            out.append("")
            out.append("Slower than the peer: " + ", ".join(slower) + ".")
        notes = [f"- {r['set']} {r['case']}: {r['error']}" for r in recs if r.get("error")]
        notes += [f"- {r['set']} {r['case']}: peer failed: {r['peer_error']}" for r in recs if r.get("peer_error")]
        if notes:
            out += ["", "Not run or failed:", ""] + notes
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def plot_speedups(records: list[dict], path, quiet: bool = False) -> Path | None:
    """Bar chart of the speedup per set and case (log axis, a line at 1.0), one panel per device.

    Returns the file written, or None when matplotlib does not import or nothing was timed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001 - the plot is optional
        if not quiet:
            print("note: matplotlib does not import: no plot written", flush=True)
        return None
    devices = {dev: recs for dev, recs in _by_device(records).items() if any(r.get("speedup") for r in recs)}
    if not devices:
        return None
    n_sets = max(len({r["set"] for r in recs}) for recs in devices.values())
    fig, axes = plt.subplots(len(devices), 1, figsize=(max(8.0, 0.42 * n_sets + 2), 4.2 * len(devices)), squeeze=False)
    width = 0.8 / len(CASES)
    for ax, (dev, recs) in zip(axes[:, 0], devices.items()):
        names = list(dict.fromkeys(r["set"] for r in recs))
        by = {(r["set"], r["case"]): r.get("speedup") for r in recs}
        for j, case in enumerate(CASES):
            xs = [i + (j - (len(CASES) - 1) / 2) * width for i in range(len(names))]
            ys = [by.get((s, case)) or 0.0 for s in names]
            ax.bar(xs, [y if y > 0 else float("nan") for y in ys], width, label=CASE_LABELS[case])
        ax.set_yscale("log")
        ax.axhline(1.0, color="black", linewidth=1)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=70, ha="right", fontsize=7)
        ax.set_xlim(-0.6, len(names) - 0.4)
        ax.set_ylabel("speedup (peer s / gpumine s)")
        peer = recs[0].get("peer")
        ax.set_title(f"{recs[0].get('device_name') or dev}: gpumine vs {'plain PyTorch' if peer == 'torch' else 'scikit-learn'}",
                     fontsize=10)
        ax.grid(True, axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False)
    fig.tight_layout()
    written = save_figure(fig, path)
    plt.close(fig)
    return written


# ---------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------
def _cases_arg(text: str) -> list[str]:
    chosen = []
    for part in text.split(","):
        part = part.strip().lower()
        if part == "all":
            return list(CASES)
        if part not in CASES:
            raise argparse.ArgumentTypeError(f"unknown case {part!r}; choose from {', '.join(CASES)}")
        if part not in chosen:
            chosen.append(part)
    return [c for c in CASES if c in chosen]


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Real-data sweep over the ADBench sets: all-kNN (k = 5, 20), LOF and top-10 outliers, gpumine "
        "against plain PyTorch on a GPU or scikit-learn on the CPU, exactness checked against float64.",
        formatter_class=DefaultsHelpFormatter,
    )
    p.add_argument("--data", type=Path, default=None,
                   help=f"folder of ADBench *.npz files (default ${_DATA_DIR_VARIABLE}/adbench when set, else {_DEFAULT_DATA})")
    p.add_argument("--sets", default=None, help="comma-separated set names (e.g. 4_breastw,glass); default all")
    p.add_argument("--order", choices=("size", "name"), default="size",
                   help="run the sets smallest first (a --time-budget then cuts the largest) or by name")
    p.add_argument("--cases", type=_cases_arg, default=list(CASES), help="comma-separated: " + ",".join(CASES))
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (auto: the GPU when there is one)")
    p.add_argument("--max-rows", type=positive(int), default=None, help="cut every set to its first rows")
    p.add_argument("--cpu-max-rows", type=positive(int), default=50_000, help="on --device cpu, cut sets to their first rows")
    p.add_argument("--repeats", type=positive(int), default=3, help="timed runs after the warm-up (best reported)")
    p.add_argument("--skip-slow-after", type=positive(float), default=5.0,
                   help="seconds: repeats of a case stop once its timed runs add up to this; a gpumine run longer "
                   "than this also skips the case's host column")
    p.add_argument("--warmup-only-after", type=positive(float), default=20.0,
                   help="seconds: a warm-up run longer than this is the case's only run")
    p.add_argument("--quick-below", type=positive(float), default=0.005,
                   help="seconds: where gpumine's and the peer's best runs are both under this, they run "
                   "--quick-rounds more rounds in turn, call by call")
    p.add_argument("--quick-rounds", type=int, default=20,
                   help="alternating rounds of quick cases (0: none)")
    p.add_argument("--set-cap", type=positive(float), default=None,
                   help="seconds: once gpumine's runs on one set add up to this, its remaining cases are skipped")
    p.add_argument("--time-budget", type=positive(float), default=None,
                   help="seconds for the whole sweep: cases not started by then are recorded as skipped")
    p.add_argument("--sample", type=positive(int), default=2000, help="rows checked against the float64 reference")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampled rows")
    p.add_argument("--lof-exact-max-rows", type=int, default=12_000,
                   help="compare LOF with a float64 LOF on sets up to this many rows (0: never)")
    p.add_argument("--uniform", action=argparse.BooleanOptionalAction, default=True,
                   help="time gpumine knn20 on a uniform random set of the same shape")
    p.add_argument("--no-host", action="store_true", help="on a GPU, skip the host NumPy in/out column")
    p.add_argument("--torch-chunk-mib", type=positive(float), default=2048.0,
                   help="distance block per query chunk of the PyTorch peer")
    p.add_argument("--out", type=Path, help="results JSON (a list of records; <stem>.meta.json beside it)")
    p.add_argument("--markdown", type=Path, help="markdown tables")
    p.add_argument("--plot", type=Path, help="PNG bar chart of the speedups (needs matplotlib)")
    p.add_argument("--from-json", type=Path, nargs="+", help="render --markdown/--plot from saved results JSON files and exit")
    p.add_argument("--traceback", action="store_true", help="print the traceback of a failing case")
    return p


def _load_results(paths) -> tuple[list[dict], dict]:
    records, metas = [], {}
    for path in paths:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        recs = data.get("records", []) if isinstance(data, dict) else data
        records += recs
        mp = meta_path(path)
        if mp.is_file():
            meta = json.loads(mp.read_text(encoding="utf-8"))
            metas[meta.get("device", "?")] = meta
    return records, metas


def main(argv=None, prog: str | None = None) -> int:
    """Run the sweep; 0 when every gpumine case ran and matched, 1 otherwise, 2 on bad usage."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.quick_rounds < 0:
        parser.error(f"--quick-rounds must be 0 or more; got {args.quick_rounds}")
    if args.from_json:
        try:
            records, metas = _load_results(args.from_json)
        except (OSError, ValueError) as exc:
            print(f"error: cannot read --from-json: {exc}", file=sys.stderr)
            return 2
        text = render_markdown(records, metas)
        if args.markdown is not None:
            write_text(args.markdown, text)
        if args.plot is not None:
            plot_speedups(records, args.plot)
        print(text)
        return 0
    if args.data is None:
        root = os.environ.get(_DATA_DIR_VARIABLE)
        args.data = Path(root) / "adbench" if root else _DEFAULT_DATA
    if not Path(args.data).is_dir():
        print(f"error: --data {args.data}: no such folder", file=sys.stderr)
        return 2
    try:
        paths = find_sets(args.data, None if args.sets is None else [s for s in args.sets.split(",") if s.strip()])
    except ValueError as exc:
        print(f"error: --sets: {exc}", file=sys.stderr)
        return 2
    if not paths:
        print(f"error: no *.npz files in {args.data}", file=sys.stderr)
        return 2
    if args.order == "size":
        paths = sorted(paths, key=_rows_of)
    from gpumine.config import resolve_device

    try:
        device = resolve_device(args.device)
    except (ValueError, TypeError) as exc:
        print(f"error: --device: {exc}", file=sys.stderr)
        return 2
    sweep = Sweep(args, device, argv)
    sweep.log(f"gpumine real-data sweep on {sweep.meta['device_name']} ({device}), peer {sweep.meta['peer']}: "
              f"{len(paths)} set(s) from {args.data}, cases {','.join(args.cases)}")
    try:
        t = time.perf_counter()
        sweep.warm_up()
        sweep.log(f"warm-up {time.perf_counter() - t:.1f} s")
        for number, path in enumerate(paths, 1):
            sweep.run_set(number, len(paths), path)
            sweep.save()
    except KeyboardInterrupt:
        sweep.log("interrupted: writing the cases measured so far")
        sweep.save(final=True)
        return 130
    sweep.save(final=True)
    summary = summarize(sweep.records)
    for path in (args.out, meta_path(args.out) if args.out else None, args.markdown, args.plot):
        if path is not None and Path(path).exists():
            sweep.log(f"wrote {path}")
    sweep.log(f"summary ({sweep.meta['device_name']}): {summary_line(summary)}")
    sweep.log(f"total {sweep.elapsed():.1f} s")
    failed = [r for r in sweep.records if r.get("error") and not r["error"].startswith("skipped")]
    if failed or summary["mismatched_rows"]:
        print(f"error: {len(failed)} gpumine case(s) failed, {summary['cases_mismatched']} case(s) with mismatched rows",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(prog="python -m benchmarks.realdata" if __package__ else "benchmarks/realdata.py"))
