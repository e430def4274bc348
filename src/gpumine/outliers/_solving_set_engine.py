"""SolvingSet with its candidate comparisons run as kNN searches on the engine.

The same iteration as :func:`gpumine.outliers._solving_set.solving_set` (candidates of
largest upper bound, heaps that only improve, a cutoff that only rises, every
candidate's weight offered to ``Top``), with the candidates x points work done
by :func:`~gpumine.neighbors.engine._search.knn_search` instead of float64 tiles:

1. once ``Top`` is full, **candidates among themselves**: their heaps take each
   other, and those whose bound falls below the cutoff die (as the tile form's
   candidates that stop being live);
2. **live candidates against every point**: each one's k nearest other points by
   canonical distance (:func:`~gpumine.outliers._canonical_knn.canonical_knn`, as
   brute force), so its weight is exact at once, and ``Top`` and the cutoff are
   updated before the points are visited;
3. **points that may still enter Top against the candidates**: each such point's
   k nearest candidates join its heap (canonical distances, the k smallest
   kept), and its upper bound falls.

On a GPU both searches run on the fused kernel (``backend="auto"``), where a
float32 distance costs a fraction of the float64 tile's and no tile is written
to memory. The price is more pairs than the tile form: a live candidate meets
every point, and a (candidate, active point) pair is computed from both sides.

Top-n weights are the canonical ones, bit for bit those of brute force and of
the tile form. Upper bounds hold for any k neighbours, whichever the engine's
float32 ranking picked.
"""

from __future__ import annotations

import math

import torch

from ..utils._progress import Progress
from ..neighbors.engine import search_validated
from ._canonical_knn import canonical_knn, search_backend
from ._solving_set import SolvingState, _merge_sorted_heaps
from ._weights import PairSpace

__all__ = ["solving_set_on_engine"]

_INF = float("inf")


def _canonical_heaps(space: PairSpace, rows: torch.Tensor, partners: torch.Tensor, budget_bytes: int) -> torch.Tensor:
    """Ascending canonical scores of ``rows`` against their ``partners`` (r, c), in chunks within the budget."""
    r, c = partners.shape
    out = torch.empty((r, c), dtype=torch.float64, device=partners.device)
    step = max(1, budget_bytes // max(1, 6 * 8 * max(c, 1)))
    for s in range(0, r, step):
        out[s : s + step] = torch.sort(space.canonical(rows[s : s + step, None], partners[s : s + step]), dim=1).values
    return out


def _merge_neighbours(space: PairSpace, heap, ub, rows, partners, k: int, budget_bytes: int) -> None:
    """Merge the canonical scores of ``rows`` against ``partners`` (r, c) into their heaps and bounds."""
    merged = _merge_sorted_heaps(heap.index_select(0, rows), _canonical_heaps(space, rows, partners, budget_bytes), k)
    heap[rows] = merged
    ub[rows] = space.weight(merged)


def solving_set_on_engine(
    X: torch.Tensor,
    space: PairSpace,
    k: int,
    n_outliers: int,
    n_candidates: int,
    *,
    seed: int,
    budget_bytes: int,
    backend: str,
    verbose=None,
    deadline: float | None = None,
) -> dict:
    """Run SolvingSet with engine searches (see the module docstring).

    ``X`` is the data on the device in its own dtype (what the engine searches),
    ``space`` the same points in float64 (canonical distances). ``backend`` is
    the engine's (``"torch"``, ``"triton"`` or ``"auto"``). Returns the dict of
    :func:`~gpumine.outliers._solving_set.solving_set`.
    """
    n, dev = space.n, space.device
    st = SolvingState(n, k, n_outliers, n_candidates, seed=seed, device=dev, deadline=deadline)
    heap, ub, stats = st.heap, st.ub, st.stats
    cand = st.first
    with Progress(total=n, desc="solving set", verbose=verbose) as bar:
        while cand is not None:
            st.start_iteration(cand)
            mc = cand.numel()
            # 1. with a cutoff: candidates among themselves, so that those whose bound falls below
            # it skip the search against every point (their weights cannot enter Top). Measured
            # faster on ADBench cover (most of a batch falls below the cutoff), never slower on
            # G2d/G3d/Poker (BENCHMARKS.md, "Design measurements quoted in the code")
            live = cand
            if math.isfinite(st.cutoff) and mc > 1:
                kc = min(k, mc - 1)
                Xc = X.index_select(0, cand)
                _, nb = search_validated(Xc, Xc, kc, space.metric, exclude_self=True, device=dev,
                                         budget_bytes=budget_bytes, result_device=dev, verbose=False, as_distance=False,
                                         backend=search_backend(backend, X, space, kc, mc))
                _merge_neighbours(space, heap, ub, cand, cand[nb], k, budget_bytes)
                stats["distances"] += mc * (mc - 1)
                live = cand[st.may_enter(cand)]
            # 2. live candidates x all points: exact weights, then Top and the cutoff
            if live.numel():
                heap[live] = canonical_knn(X, space, k, ids=live, device=dev, budget_bytes=budget_bytes,
                                           backend=backend, verbose=False)
                ub[live] = space.weight(heap.index_select(0, live))
                st.exact_w[live] = True
                stats["distances"] += live.numel() * (n - 1)
                st.offer(live)
            # 3. points that may still enter x candidates: their heaps and bounds
            st.check_time()
            act = (~st.in_s & st.may_enter()).nonzero().squeeze(1)
            if act.numel():
                kc = min(k, mc)
                _, nb = search_validated(X.index_select(0, cand), X.index_select(0, act), kc, space.metric,
                                         exclude_self=False, device=dev, budget_bytes=budget_bytes, result_device=dev,
                                         verbose=False, as_distance=False, backend=search_backend(backend, X, space, kc, mc))
                _merge_neighbours(space, heap, ub, act, cand[nb], k, budget_bytes)
                stats["distances"] += act.numel() * mc
            cand = st.finish_iteration(bar, {"candidates": mc, "active": int(act.numel()), "live_at_end": int(live.numel())},
                                       {"inactive": (~st.in_s).sum() - act.numel()})
    return st.result()
