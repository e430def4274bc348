"""The host kNN path's two inner costs, each way it can be done: product blocks and candidates' exact scores.

* Products: one block of 512 query rows against every reference (``Q @ YT + bias``),
  one thread, by ``torch.addmm`` (torch's BLAS) and by ``numpy.matmul`` (NumPy's
  BLAS), float32 and float64, at ADBench shapes. The host path takes the faster
  per dtype (``_host_gemm._Products.scores``).
* Exact scores of candidate pairs (``_host_exact._exact_dense`` / ``_exact_pairs``):
  the feature-major gather against whole rows in chunk-position order, by number
  of features; ``_host_exact._ROW_GATHER_MIN_FEATURES`` is where rows start to win.
* A whole search of the references against themselves (``kneighbors(X, None, k,
  device="cpu")``, every thread) with its float32 products formed as one symmetric
  matrix and as row blocks, interleaved, by number of features;
  ``_host_gemm.SYMMETRIC_MIN_FEATURES`` is where the symmetric matrix starts to win.

    python benchmarks/host_products.py --out benchmarks/results/host_products.json [--experiments symmetric]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

if not __package__:  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchmarks  # noqa: E402,F401  (gpumine from src/ when it is not installed)

from gpumine.core.distance import get_metric  # noqa: E402
from gpumine.io import atomic_open  # noqa: E402
from gpumine.neighbors import kneighbors  # noqa: E402
from gpumine.neighbors.engine import _host_exact, _host_gemm  # noqa: E402

# (features, references): ADBench shapes (shuttle, ALOI, satellite, SpamBase, mnist, musk, InternetAds)
PRODUCT_SHAPES = [(9, 49_097), (27, 49_534), (36, 6_435), (57, 4_207), (100, 7_603), (166, 3_062), (1_555, 1_966)]
EXACT_FEATURES = [48, 64, 100, 128, 166, 256, 1_555]
# (rows, features) of uniform self-searches: InternetAds' shape and others around the threshold
SYMMETRIC_SHAPES = [(4_207, 57), (3_000, 128), (3_000, 256), (3_686, 400), (3_000, 512), (2_000, 800), (1_966, 1_555), (4_000, 1_000)]


def _best_ms(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def products(repeats: int) -> list:
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    rows = []
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1, user_api="blas"):
            for d, n in PRODUCT_SHAPES:
                for dtype in (np.float32, np.float64):
                    Q, Y = rng.random((512, d)).astype(dtype), rng.random((n, d)).astype(dtype)
                    bias, out = rng.random(n).astype(dtype), np.empty((512, n), dtype)
                    tq, tyt, tb, tout = torch.from_numpy(Q), torch.from_numpy(Y).T, torch.from_numpy(bias), torch.from_numpy(out)

                    def numpy_block():
                        np.matmul(Q, Y.T, out=out)
                        out.__iadd__(bias)

                    torch_ms = _best_ms(lambda: torch.addmm(tb, tq, tyt, out=tout), repeats)
                    numpy_ms = _best_ms(numpy_block, repeats)
                    rows.append({"experiment": "products", "features": d, "references": n, "dtype": np.dtype(dtype).name,
                                 "torch_ms": torch_ms, "numpy_ms": numpy_ms, "torch_over_numpy": torch_ms / numpy_ms})
                    print(rows[-1], flush=True)
    finally:
        torch.set_num_threads(saved)
    return rows


def exact_scores(repeats: int) -> list:
    rng = np.random.default_rng(1)
    metric = get_metric("sqeuclidean")
    rows = []
    saved = _host_exact._ROW_GATHER_MIN_FEATURES
    try:
        for d in EXACT_FEATURES:
            U = rng.random((4000, d))
            for width in (8, 30):
                idx = rng.integers(0, 4000, (2000, width))
                pair_rows = np.repeat(np.arange(2000), width)
                record = {"experiment": "exact_scores", "features": d, "candidates": width}
                for layout, threshold in (("feature_major", 1 << 30), ("rows", 1)):
                    _host_exact._ROW_GATHER_MIN_FEATURES = threshold
                    UT = _host_exact._feature_major(metric, U)
                    record[f"{layout}_dense_ms"] = _best_ms(
                        lambda: _host_exact._exact_dense(metric, U[:2000], U, UT, idx, 1 << 28), repeats)
                    record[f"{layout}_pairs_ms"] = _best_ms(
                        lambda: _host_exact._exact_pairs(metric, U, U, UT, pair_rows, idx.ravel(), 1 << 28), repeats)
                rows.append(record)
                print(record, flush=True)
    finally:
        _host_exact._ROW_GATHER_MIN_FEATURES = saved
    return rows


def symmetric(repeats: int) -> list:
    rng = np.random.default_rng(2)
    rows = []
    saved = _host_gemm.SYMMETRIC_MIN_FEATURES
    try:
        for n, d in SYMMETRIC_SHAPES:
            X = rng.random((n, d))
            for k in (5, 20):
                best = {"blocks": float("inf"), "symmetric": float("inf")}
                for _ in range(max(1, repeats)):  # interleaved: a busy moment of the host hits both alike
                    for way, threshold in (("blocks", 1 << 30), ("symmetric", 1)):
                        _host_gemm.SYMMETRIC_MIN_FEATURES = threshold
                        best[way] = min(best[way], _best_ms(lambda: kneighbors(X, None, k, device="cpu"), 1))
                rows.append({"experiment": "symmetric", "rows": n, "features": d, "k": k, "blocks_ms": best["blocks"],
                             "symmetric_ms": best["symmetric"], "blocks_over_symmetric": best["blocks"] / best["symmetric"]})
                print(rows[-1], flush=True)
    finally:
        _host_gemm.SYMMETRIC_MIN_FEATURES = saved
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--experiments", default="products,exact_scores,symmetric", help="comma-separated")
    args = parser.parse_args(argv)
    meta = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "torch": torch.__version__,
            "numpy": np.__version__}
    experiments = {"products": products, "exact_scores": exact_scores, "symmetric": symmetric}
    records = [rec for name in args.experiments.split(",") for rec in experiments[name](args.repeats)]
    with atomic_open(args.out, "w") as fh:
        json.dump({"meta": meta, "records": records}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
