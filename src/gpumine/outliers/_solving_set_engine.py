"""SolvingSet with its candidate comparisons run as two kNN searches on the engine.

The same iteration as :func:`gpumine.outliers._solving_set.solving_set` (candidates of
largest upper bound, heaps that only improve, a cutoff that only rises, every
candidate's weight offered to ``Top``), with the candidates x points work done
by :func:`~gpumine.neighbors._engine.knn_search` instead of float64 tiles:

1. **candidates against every point**: each candidate's k nearest other points,
   so its weight is exact at once (the same neighbours and the same canonical
   float64 distances as brute force, :func:`brute_force_weights`), and ``Top``
   and the cutoff are updated before the points are visited;
2. **points that may still enter Top against the candidates**: each such point's
   k nearest candidates join its heap (canonical distances, the k smallest
   kept), and its upper bound falls.

On a GPU both searches run on the fused kernel (``backend="auto"``), where a
float32 distance costs a fraction of the float64 tile's and no tile is written
to memory. The price is more pairs than the tile form: a candidate meets every
point even after its bound has fallen below the cutoff, and a (candidate,
active point) pair is computed from both sides.

The weights are brute force's: the engine's exact float32 ranking picks the
neighbours and their canonical float64 distances are summed, so top-n weights
equal :func:`brute_force_weights` bit for bit, and the exact float64 weights to
float32 rounding (as brute force does). Upper bounds hold for any k neighbours.
"""

from __future__ import annotations

import torch

from .._progress import Progress
from ..neighbors._engine import knn_search
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
            # 1. candidates x all points: exact weights, then Top and the cutoff
            heap[cand] = canonical_knn(X, space, k, ids=cand, device=dev, budget_bytes=budget_bytes,
                                       backend=backend, verbose=False)
            ub[cand] = space.weight(heap.index_select(0, cand))
            st.exact_w[cand] = True
            stats["distances"] += mc * (n - 1)
            st.offer(cand)
            # 2. points that may still enter x candidates: their heaps and bounds
            st.check_time()
            act = (~st.in_s & st.may_enter()).nonzero().squeeze(1)
            if act.numel():
                kc = min(k, mc)
                _, nb = knn_search(X.index_select(0, cand), X.index_select(0, act), kc, space.metric, exclude_self=False,
                                   device=dev, budget_bytes=budget_bytes, result_device=dev, verbose=False,
                                   backend=search_backend(backend, X, space, kc, mc))
                new = _canonical_heaps(space, act, cand[nb], budget_bytes)
                merged = _merge_sorted_heaps(heap.index_select(0, act), new, k)
                heap[act] = merged
                ub[act] = space.weight(merged)
                stats["distances"] += act.numel() * mc
            cand = st.finish_iteration(bar, {"candidates": mc, "active": int(act.numel()), "live_at_end": mc},
                                       {"inactive": (~st.in_s).sum() - act.numel()})
    return st.result()
