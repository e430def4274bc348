"""Where a small all-kNN search spends its time on the GPU (fixed costs: launches, host waits).

For each ADBench set: plain PyTorch (addmm + topk, float32, data on the device), then
:func:`gpumine.kneighbors` on the same CUDA tensor called several times in a row (the
first compiles, the second captures a graph where one applies, later calls replay it),
the same calls with graphs off, and a ``torch.profiler`` summary of one eager call
(operators by host time, kernel launches, host waits). Usage (on a GPU machine):

    python benchmarks/knn_small_profile.py --data DIR --sets 4_breastw,35_SpamBase --out small.json
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

if not __package__:  # run as a script (python benchmarks/knn_small_profile.py): the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchmarks  # noqa: E402,F401  (gpumine from src/ when it is not installed)

from gpumine.io import atomic_open  # noqa: E402
from gpumine.neighbors import kneighbors  # noqa: E402
from gpumine.neighbors.engine import _graphs  # noqa: E402


def _plain_torch(X: torch.Tensor, k: int) -> torch.Tensor:
    sq = (X * X).sum(1)
    D = torch.addmm(sq[:, None] + sq[None, :], X, X.T, alpha=-2)
    D.fill_diagonal_(float("inf"))
    return torch.topk(D, k, largest=False).indices


def _timed(fn, repeats: int) -> list:
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(round((time.perf_counter() - start) * 1e3, 4))
    return times


def _profile(fn) -> dict:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = prof.key_averages()
    rows = sorted(events, key=lambda e: e.cpu_time_total, reverse=True)
    count = {e.key: e.count for e in events}
    return {
        "launches": sum(c for key, c in count.items() if key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC",
                                                                 "cuLaunchKernelEx")),
        "host_waits": sum(c for key, c in count.items() if "Synchronize" in key or key in ("cudaMemcpyAsync",)),
        "top": [(e.key, e.count, round(e.cpu_time_total / 1e3, 3)) for e in rows[:30]],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="../shared/data/adbench", help="folder of ADBench *.npz files")
    parser.add_argument("--sets", required=True, help="comma-separated set names")
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--calls", type=int, default=6)
    parser.add_argument("--out", default=None, help="JSON file to write")
    args = parser.parse_args(argv)
    results = {}
    for name in args.sets.split(","):
        X = torch.from_numpy(np.load(os.path.join(args.data, f"{name}.npz"))["X"].astype(np.float32)).cuda()
        k = min(args.k, X.shape[0] - 1)
        record = {"n": X.shape[0], "d": X.shape[1]}
        _plain_torch(X, k)
        record["plain_torch_ms"] = min(_timed(lambda: _plain_torch(X, k), 5))

        def search():
            return kneighbors(X, k=k, device="cuda")

        _graphs.clear_search_graphs()
        record["gpumine_calls_ms"] = _timed(search, args.calls)
        _graphs.GRAPH_SEARCHES = False
        try:
            record["gpumine_eager_calls_ms"] = _timed(search, args.calls)
            record["eager_profile"] = _profile(search)
        finally:
            _graphs.GRAPH_SEARCHES = True
        print(name, json.dumps({key: value for key, value in record.items() if key != "eager_profile"}), flush=True)
        results[name] = record
    if args.out:
        with atomic_open(args.out) as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
