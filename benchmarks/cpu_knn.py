"""All-kNN on the host: gpumine (device="cpu") against scikit-learn's NearestNeighbors.

For every ADBench set (first ``--max-rows`` rows) and for uniform random data of the
same shape, times ``kneighbors(X, None, k, device="cpu")`` and scikit-learn's
``NearestNeighbors(n_jobs=-1).fit(X).kneighbors(n_neighbors=k)`` (default algorithm),
checks that the indices agree up to ties (pairs whose float64 distances are equal to
rounding), and writes one JSON record per (set, k).

    python benchmarks/cpu_knn.py --out benchmarks/results/cpu_knn.json
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
from sklearn.neighbors import NearestNeighbors

if not __package__:  # run as a script (python benchmarks/cpu_knn.py): the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchmarks  # noqa: E402,F401  (gpumine from src/ when it is not installed)

from gpumine.io import atomic_open  # noqa: E402
from gpumine.neighbors import kneighbors  # noqa: E402


def _default_data_dir() -> str:
    here = Path(__file__).resolve()
    for parent in here.parents:
        cand = parent / "shared" / "data" / "adbench"
        if cand.is_dir():
            return str(cand)
    return "../shared/data/adbench"


# a call quicker than this is timed in blocks after untimed ones for at least _SETTLE_S (see _best_of)
_QUICK_S = 0.25
_SETTLE_S = 0.01
_BLOCK_CALLS = 3


def _best_of(fns, repeats: int, min_total: float = 2.0, interleave: bool = False):
    """Best time of each function over ``repeats`` alternating rounds (quick ones: more rounds,
    until ``min_total`` seconds passed), so a busy moment of the host hits both alike.

    In each round each function runs a block of calls. Where every function was
    quick (under ``_QUICK_S``) the round before, each block is untimed calls for
    ``_SETTLE_S``, then ``_BLOCK_CALLS`` timed ones; else one timed call each, as
    the first round. The untimed calls absorb what the other library leaves running:
    OpenMP workers (scikit-learn's and torch's, GNU libgomp here) keep spinning on the
    cores a while after a call returns, which on a small host slows whatever runs
    next (libgomp's spin is short; an OpenMP runtime that spins 200 ms would need a
    longer settle). ``interleave``: one timed call each, call by call (the earlier
    way: the second library of each pair pays for the first).
    """
    best, results, total, runs = [float("inf")] * len(fns), [None] * len(fns), 0.0, 0
    while runs < repeats or (total < min_total and runs < 3 * repeats):
        quick = not interleave and max(best) < _QUICK_S  # the same treatment for every function
        for i, fn in enumerate(fns):
            if quick:
                settle = time.perf_counter() + _SETTLE_S
                while time.perf_counter() < settle:
                    results[i] = fn()
            for _ in range(_BLOCK_CALLS if quick else 1):
                t0 = time.perf_counter()
                results[i] = fn()
                elapsed = time.perf_counter() - t0
                best[i], total = min(best[i], elapsed), total + elapsed
        runs += 1
    return best, results


def _agreement(X, k, ours, theirs):
    """Rows whose index lists differ beyond ties, judged by float64 distances."""
    (d_ours, i_ours), (d_theirs, i_theirs) = ours, theirs
    if np.array_equal(i_ours, i_theirs):
        return {"index_equal": True, "rows_differ": 0, "rows_differ_beyond_ties": 0}
    X64 = np.asarray(X, dtype=np.float64)
    rows = np.flatnonzero((i_ours != i_theirs).any(1))
    # exact float64 distances of both lists, recomputed the same way for both
    def dist(index):
        diff = X64[rows, None, :] - X64[index[rows]]
        return np.sqrt((diff * diff).sum(-1))
    a, b = np.sort(dist(i_ours), 1), np.sort(dist(i_theirs), 1)
    scale = np.maximum(np.abs(b), 1e-300)
    beyond = (np.abs(a - b) > 1e-9 * scale + 1e-12).any(1)
    return {"index_equal": False, "rows_differ": int(rows.size), "rows_differ_beyond_ties": int(beyond.sum())}


def run_one(name, X, k, repeats, interleave=False):
    n, d = X.shape
    (ours_t, sk_t), (ours, theirs) = _best_of([lambda: kneighbors(X, None, k, device="cpu", verbose=0),
                                               lambda: NearestNeighbors(n_jobs=-1).fit(X).kneighbors(n_neighbors=k)], repeats,
                                              interleave=interleave)
    record = {"set": name, "rows": n, "features": d, "k": k, "gpumine_s": ours_t, "sklearn_s": sk_t,
              "speedup": sk_t / ours_t if ours_t > 0 else None, "distinct_rows": int(np.unique(X, axis=0).shape[0])}
    record.update(_agreement(X, k, ours, theirs))
    return record


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--data-dir", default=_default_data_dir(), help="folder of ADBench .npz files")
    parser.add_argument("--max-rows", type=int, default=50_000)
    parser.add_argument("--k", type=int, nargs="+", default=[5, 20])
    parser.add_argument("--repeats", type=int, default=2, help="best of this many alternating rounds per timing")
    parser.add_argument("--interleave", action="store_true",
                        help="time call by call, alternating the libraries (no untimed call before a quick one's block)")
    parser.add_argument("--sets", nargs="*", help="only these set names (file stems)")
    parser.add_argument("--no-random", action="store_true", help="skip the uniform random twins")
    parser.add_argument("--dtype", choices=["float64", "float32"], default="float64",
                        help="the data's dtype (ADBench stores float64; float32 results take another route)")
    args = parser.parse_args(argv)

    files = sorted(glob.glob(os.path.join(args.data_dir, "*.npz")), key=lambda p: int(Path(p).stem.split("_")[0]))
    if args.sets:
        files = [p for p in files if Path(p).stem in args.sets]
    records = []
    warm = np.random.default_rng(1).random((64, 3))  # imports and first-call set-up, for both
    kneighbors(warm, None, 3, device="cpu", verbose=0)
    kneighbors(np.random.default_rng(1).random((64, 40)), None, 3, device="cpu", verbose=0)
    NearestNeighbors(n_jobs=-1).fit(warm).kneighbors(n_neighbors=3)
    meta = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "max_rows": args.max_rows, "repeats": args.repeats, "dtype": args.dtype,
            "timing": "interleaved calls" if args.interleave else
            f"blocks: quick calls untimed for {_SETTLE_S} s, then {_BLOCK_CALLS} timed"}
    for path in files:
        X = np.load(path)["X"][: args.max_rows]
        if X.dtype != args.dtype:
            X = X.astype(args.dtype)
        variants = [(Path(path).stem, X)]
        if not args.no_random:
            rng = np.random.default_rng(0)
            variants.append((Path(path).stem + ":uniform", rng.random(X.shape).astype(args.dtype)))
        for name, data in variants:
            for k in args.k:
                if k >= data.shape[0]:
                    continue
                rec = run_one(name, data, k, args.repeats, args.interleave)
                records.append(rec)
                print(f"{name:28s} n={rec['rows']:6d} d={rec['features']:5d} k={k:3d} gpumine {rec['gpumine_s']:8.3f}s "
                      f"sklearn {rec['sklearn_s']:8.3f}s ratio {rec['speedup']:6.2f}x differ {rec['rows_differ']}"
                      f"/{rec['rows_differ_beyond_ties']}", flush=True)
                with atomic_open(args.out, "w") as fh:
                    json.dump({"meta": meta, "records": records}, fh, indent=1)


if __name__ == "__main__":
    main()
