"""All-kNN (k = 20, self excluded) of ADBench sets on the GPU, with the engine's counters.

Shows where exactness costs time on real data: rows retried, rows given an exact
scan, rows given a float64 scan, distinct rows searched; plain PyTorch (addmm +
topk, float32) in the same run. Usage (on a GPU machine):

    python benchmarks/knn_ties_profile.py --data DIR --sets 32_shuttle,11_donors --out profile.json
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

if not __package__:  # run as a script (python benchmarks/knn_ties_profile.py): the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchmarks  # noqa: E402,F401  (gpumine from src/ when it is not installed)

from gpumine.core.distance import get_metric  # noqa: E402
from gpumine.neighbors.engine import knn_search  # noqa: E402


def _plain_torch(X: torch.Tensor, k: int) -> torch.Tensor:
    sq = (X * X).sum(1)
    step = max(1, (1 << 29) // (4 * X.shape[0]))
    found = []
    for s in range(0, X.shape[0], step):
        D = torch.addmm(sq[s : s + step, None] + sq[None, :], X[s : s + step], X.T, alpha=-2)
        rows = torch.arange(D.shape[0], device=X.device)
        D[rows, rows + s] = float("inf")
        found.append(torch.topk(D, k, largest=False).indices)
    return torch.cat(found)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="../shared/data/adbench", help="folder of ADBench *.npz files")
    parser.add_argument("--sets", required=True, help="comma-separated set names")
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--out", default=None, help="JSON file to write")
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    metric = get_metric("euclidean")
    results = {}
    for name in args.sets.split(","):
        X = torch.from_numpy(np.load(os.path.join(args.data, f"{name}.npz"))["X"].astype(np.float32)).to(device)
        record = {"n": X.shape[0], "d": X.shape[1]}
        for _ in range(2):  # the second call is timed (the first compiles)
            stats = {}
            torch.cuda.synchronize()
            start = time.perf_counter()
            knn_search(X, X, args.k, metric, exclude_self=True, device=device, budget_bytes=1 << 30, result_device=device,
                       stats=stats, backend="auto", as_distance=True)
            torch.cuda.synchronize()
            record["gpumine_s"] = time.perf_counter() - start
        record["stats"] = {key: value if isinstance(value, (int, float, str, bool)) else str(value) for key, value in stats.items()}
        _plain_torch(X, args.k)
        torch.cuda.synchronize()
        start = time.perf_counter()
        _plain_torch(X, args.k)
        torch.cuda.synchronize()
        record["plain_torch_s"] = time.perf_counter() - start
        print(name, json.dumps(record), flush=True)
        results[name] = record
    if args.out:
        from gpumine.io import atomic_open

        with atomic_open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
