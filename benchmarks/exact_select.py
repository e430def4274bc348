"""The exact-selection kernel against the dense/fused paths and plain PyTorch, on every ADBench set.

All-kNN (self excluded) of each set on the GPU, data on the device, best of
``--repeats`` after a warm-up, in one run:

* ``torch``: plain PyTorch (addmm distances + topk, float32; realdata's peer);
* ``before``: ``gpumine.neighbors.kneighbors`` with the exact-selection path off;
* ``after``: the same call with it on (the default: rows in curve order);
* ``after_index_order``: with it on, rows in index order;
* ``search_curve`` / ``search_index_order``: ``exact_select_search`` itself, whatever
  the engine would choose (float64 squared distances, no finishing).

``after`` and ``after_index_order`` are compared with ``before`` bit for bit.

    python -m benchmarks.exact_select --data .devdata/adbench --out results.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import environment, synchronize, write_json  # noqa: E402
from benchmarks.realdata import torch_knn  # noqa: E402


def _best(fn, device, repeats, budget):
    synchronize(device)
    t0 = time.perf_counter()
    out = fn()
    synchronize(device)
    times = [time.perf_counter() - t0]
    for _ in range(max(1, repeats)):  # at least one timed run after the warm-up (which may compile)
        if len(times) > 1 and sum(times) > budget:
            break
        t0 = time.perf_counter()
        out = fn()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    return min(times[1:]), out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="../shared/data/adbench")
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per case before repeats stop")
    parser.add_argument("--max-rows", type=int, default=None)
    parser.add_argument("--sets", default=None)
    parser.add_argument("--shapes", default=None,
                        help="kernel launch shapes to time instead of the sweep, e.g. 32x32x4,64x64x4 (block_m x block_n x warps)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    from gpumine.neighbors import kneighbors
    from gpumine.core.distance import get_metric
    from gpumine.neighbors.engine import _exact_select
    from gpumine.neighbors.engine._exact_select_kernel import exact_select

    device = torch.device("cuda")
    files = sorted(Path(args.data).glob("*.npz"), key=lambda p: np.load(p)["X"].shape[0])
    if args.sets:
        wanted = set(args.sets.split(","))
        files = [f for f in files if f.stem in wanted]
    rows = []
    for path in files:
        X_np = np.load(path)["X"].astype(np.float32)
        if args.max_rows:
            X_np = X_np[: args.max_rows]
        X = torch.tensor(X_np, device=device)
        n, d = X.shape
        k = min(args.k, n - 1)
        row = dict(set=path.stem, rows=n, d=d, k=k)
        if args.shapes:
            XT = X.T.contiguous()
            for shape in args.shapes.split(","):
                bm, bn, warps = (int(v) for v in shape.split("x"))
                try:
                    row[shape], _ = _best(lambda: exact_select(XT, XT, k, "sqeuclidean", exclude_self=True, block_m=bm,
                                                               block_n=bn, num_warps=warps), device, args.repeats, args.budget)
                except Exception as exc:
                    row[shape] = f"{type(exc).__name__}: {str(exc)[:200]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
            continue
        try:
            row["torch_s"], _ = _best(lambda: torch_knn(X, k), device, args.repeats, args.budget)
            found = {}
            for name, on, curve in (("before", False, True), ("after", True, True), ("after_index_order", True, False)):
                _exact_select.EXACT_SELECT, _exact_select.EXACT_SELECT_CURVE = on, curve
                row[name + "_s"], found[name] = _best(lambda: kneighbors(X, None, k, device=device, verbose=0), device,
                                                      args.repeats, args.budget)
            if d <= 128:
                m = get_metric("euclidean")
                for name, curve in (("search_curve", True), ("search_index_order", False)):
                    _exact_select.EXACT_SELECT_CURVE = curve
                    row[name + "_s"], _ = _best(lambda: _exact_select.exact_select_search(X, X, k, m, exclude_self=True,
                                                                                           budget_bytes=1 << 30),
                                                device, args.repeats, args.budget)
            d0, i0 = found["before"]
            for name in ("after", "after_index_order"):
                row["equal_" + name] = bool(torch.equal(d0, found[name][0]) and torch.equal(i0, found[name][1]))
            for name in ("before", "after", "after_index_order", "search_curve", "search_index_order"):
                if name + "_s" in row:
                    row[name + "_vs_torch"] = row["torch_s"] / row[name + "_s"]
        except Exception as exc:  # a failed set is recorded, the sweep goes on
            row["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            _exact_select.EXACT_SELECT, _exact_select.EXACT_SELECT_CURVE = True, True
        rows.append(row)
        print(json.dumps(row), flush=True)
        X = XT = None  # frees the set before the next
        torch.cuda.empty_cache()
    if args.out:
        write_json(args.out, dict(environment=environment(device), results=rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
