"""SolvingSet (Angiulli, Basta & Pizzuti 2006) on tensors: the top-n outliers with few distances.

Every point keeps a k-NN heap (a row of an (n, k) float64 tensor, ascending,
+inf padded) of canonical scores to the candidates it has been compared with;
the tree sum of its distances is an upper bound ``ub`` of its weight (+inf
while the heap holds fewer than k). ``Top`` holds the best weights found so
far; (cutoff, last) are the weight and index of its n-th entry (-inf while it
holds fewer than n). A point *may enter* ``Top`` while ``ub > cutoff``, or
``ub == cutoff`` and its index is below ``last`` (ties go to the lower index);
the others are *inactive* and stay so (bounds only fall, the cutoff only rises).
One iteration:

1. the candidates ``C`` (random at first, then the active points of largest
   upper bound, at most ``n_candidates``) join the solving set;
2. candidates x candidates: every candidate's heap takes all the others;
3. candidates x *active* points, in tiles of columns: rows update the
   candidates' heaps and columns the points' heaps (each pair once);
4. candidates x *inactive* points: only candidates that may still enter
   (*live*, re-checked before every tile) are compared, and only their heaps
   change. So a pair is skipped exactly when neither end may enter ``Top``:
   the paper's ``max(ub(p), ub(q)) >= cutoff`` rule, with the tie rule;
5. **every** candidate's weight is offered to ``Top`` (the erratum of the
   paper's Fig. 2, which updates ``Top`` once, after the candidate loop): a
   live candidate has met every point, so its weight is exact; one that died
   has a heap sum that ranks below the n-th outlier and cannot enter;
6. the cutoff becomes ``Top``'s n-th weight.

It stops when no point outside the solving set may enter ``Top``. The result
is the top-n with ties to the lower index, exactly as brute force gives it. No
candidates x data matrix outlives a tile (the paper's NDM variant); tiles are
sized from the working-memory budget.

How many distances it computes depends on how far the n-th weight w* stands above the bulk of
the weights: a point is dropped only once the solving set holds k points whose distances to it
sum below w*. On G2d, G3d and Covertype (ADBench sample) the fraction of pairs is within about
1.5x of the paper's (m = 256 on an H200: 0.13-0.16 %, 0.27-0.80 %, 6.1-9.9 %).
On uniformly random Poker hands (about 8 effective dimensions; w* only 1.28x the median weight, 99 %
of weights above 0.69 w*) it cannot: a random 20 % of the points still leaves a third of the
others active, and the fraction is 15 %-45 % whatever the candidate batch size (m = 32 to 1024
within 3 points), for the real UCI rows as for generated ones. The paper's 1.84 % for Poker is
not reproduced.

Tiles come from :meth:`PairSpace.tile`; when that form is not exact, each row
(column) keeps the ``k + margin`` smallest tile scores, recomputes them in the
canonical form, and is *certified* when no entry left out can reach the new
k-th value (``tile score - bound >= new k-th``), or when every entry that could
beat the heap was taken; rows that fail are recomputed over the whole tile in
the canonical form. So heaps always hold exact k smallest canonical scores.
"""

from __future__ import annotations

import math
import time

import torch

from .._progress import Progress
from ..core.select import sort_by_score_then_index, topk_smallest
from ._weights import PairSpace

__all__ = ["solving_set", "SolvingSetTimeout", "auto_candidates"]

_INF = float("inf")


class SolvingSetTimeout(RuntimeError):
    """Raised when the private ``deadline`` of :func:`solving_set` passes (benchmarks' time cap)."""

    def __init__(self, stats: dict):
        super().__init__(
            f"solving set stopped at its time limit after {stats['iterations']} iteration(s) "
            f"and {stats['distances']:,} distances"
        )
        self.stats = stats


def auto_candidates(device: torch.device, n: int) -> int:
    """Default candidates per iteration: 1024 on a GPU, 256 on the CPU (at most n).

    The paper's m = 100 was tuned for one CPU core. On a GPU a candidate batch
    is one tile row-block, and every iteration also pays fixed costs (choosing
    the next candidates over all n points, host synchronisations), so larger
    batches amortise better, at the price of a somewhat larger solving set. On
    the CPU, 256 measured best on 2-d Gaussian data and 1024 on Covertype; the
    GPU default is a starting point: ``benchmarks/outliers.py
    --sweep-candidates`` measures it.
    """
    m = 1024 if device.type == "cuda" else 256
    return max(1, min(m, n))


def _tile_columns(budget_bytes: int, rows: int, k: int, margin: int, d: int) -> int:
    # per column: the score tile (8 B per row) with its reductions, the transposed tile of the
    # columns that can improve, and their top-(k + margin) with the canonical recompute
    per_column = rows * 26 + (k + margin) * 40 + (d + 2) * 16
    return max(256, int(budget_bytes // per_column))


def _merge(space: PairSpace, heap_rows, S, row_ids, col_ids, bound, k, margin, stats, exclude_self=False):
    """Merge the pairs of a tile into the heaps of its rows.

    ``S[i, j]`` scores the pair (``row_ids[i]``, ``col_ids[j]``); ``heap_rows``
    are the rows' current heaps (r, k), ascending. ``bound`` is None when
    ``S`` is exact, else a per-row bound on ``|S - canonical|``. Returns
    ``(changed, new_heaps)``: positions of rows whose heaps may change, and
    their merged heaps (the exact k smallest canonical scores).
    """
    r, T = S.shape
    thr = heap_rows[:, k - 1]
    row_min = S.amin(1)
    # rows where some entry can beat the current k-th score (equal scores change nothing)
    hit = row_min < thr if bound is None else row_min <= thr + bound
    rows = hit.nonzero().squeeze(1)
    if rows.numel() == 0:
        return rows, None
    Sr = S if rows.numel() == r else S.index_select(0, rows)
    old = heap_rows if rows.numel() == r else heap_rows.index_select(0, rows)
    if bound is None:
        vals = torch.topk(Sr, min(k, T), dim=1, largest=False, sorted=False).values.to(torch.float64)
        return rows, torch.sort(torch.cat([old, vals], dim=1), dim=1).values[:, :k]
    c = min(T, k + margin)
    approx, pos = torch.topk(Sr, c, dim=1, largest=False, sorted=False)
    ids = row_ids.index_select(0, rows)
    partners = col_ids[pos]
    exact = space.canonical(ids[:, None], partners)
    if exclude_self:
        exact = exact.masked_fill(partners == ids[:, None], _INF)
    merged = torch.sort(torch.cat([old, exact], dim=1), dim=1).values[:, :k]
    if c == T:
        return rows, merged
    # certified: every entry left out scores at least the largest one kept, so its canonical
    # score is at least that minus the bound; if that reaches the new k-th it cannot enter
    certified = approx.amax(1) - bound.index_select(0, rows) >= merged[:, k - 1]
    bad = (~certified).nonzero().squeeze(1)
    if bad.numel():
        stats["rows_recomputed"] += int(bad.numel())
        bad_ids = ids.index_select(0, bad)
        full = space.canonical(bad_ids[:, None], col_ids[None, :])
        if exclude_self:
            full = full.masked_fill(col_ids[None, :] == bad_ids[:, None], _INF)
        vals = torch.topk(full, min(k, T), dim=1, largest=False, sorted=False).values
        merged[bad] = torch.sort(torch.cat([old.index_select(0, bad), vals], dim=1), dim=1).values[:, :k]
    return rows, merged


def _update_rows(space, heap, ub, rows_global, S, cols_global, bound, k, margin, stats, exclude_self=False):
    changed, merged = _merge(space, heap.index_select(0, rows_global), S, rows_global, cols_global, bound, k, margin,
                             stats, exclude_self)
    if merged is not None:
        ids = rows_global.index_select(0, changed)
        heap[ids] = merged
        ub[ids] = space.weight(merged)


def _update_columns(space, heap, ub, rows_global, S, cols_global, k, margin, stats):
    """Merge a tile's columns into the heaps of its column points (only columns that can improve)."""
    thr = heap[:, k - 1].index_select(0, cols_global)
    bound = space.col_bounds(rows_global, cols_global)
    col_min = S.amin(0)
    hit = col_min < thr if bound is None else col_min <= thr + bound
    cols = hit.nonzero().squeeze(1)
    if cols.numel() == 0:
        return
    sub_ids = cols_global.index_select(0, cols)
    # the transposed tile of the columns that can improve, recomputed rather than gathered: a
    # column gather reads S with a stride of a whole row (slow on a GPU), a product does not.
    # Its values may round differently from S's, but within the same bound, which is all the
    # merge relies on (S above only decided which columns cannot change)
    St = space.tile(sub_ids, rows_global)
    sub_bound = None if bound is None else bound.index_select(0, cols)
    _update_rows(space, heap, ub, sub_ids, St, rows_global, sub_bound, k, margin, stats)


def _may_enter(ub: torch.Tensor, ids: torch.Tensor, cutoff: float, last: int) -> torch.Tensor:
    """Points whose weight could still enter ``Top``: bound above the cutoff, or equal to it with a
    lower index than the n-th outlier's (ties go to the lower index, so they could still displace it)."""
    return (ub > cutoff) | ((ub == cutoff) & (ids < last))


def _merge_top(top_w, top_i, w, i, n_out):
    W = torch.cat([top_w, w])
    I = torch.cat([top_i, i])
    v, ix = sort_by_score_then_index(-W[None, :], I[None, :])
    return -v[0, :n_out], ix[0, :n_out]


def solving_set(
    space: PairSpace,
    k: int,
    n_outliers: int,
    n_candidates: int,
    *,
    seed: int,
    budget_bytes: int,
    verbose=None,
    margin: int = 16,
    deadline: float | None = None,
) -> dict:
    """Run SolvingSet over ``space`` (see the module docstring).

    ``k`` is the number of neighbours *other than the point itself* that a
    weight sums. Returns a dict with ``top_indices``/``top_weights`` (n, in
    rank order), ``solving_set`` (indices in the order they became
    candidates), ``scores`` (every point's weight: exact where
    ``scores_exact``, else an upper bound below the cutoff), ``threshold``,
    ``iterations``, ``distances`` (pairs computed) and ``rows_recomputed``.
    ``deadline`` (a ``time.perf_counter()`` value) raises
    :class:`SolvingSetTimeout` when passed.
    """
    n, dev = space.n, space.device
    heap = torch.full((n, k), _INF, dtype=torch.float64, device=dev)
    ub = torch.full((n,), _INF, dtype=torch.float64, device=dev)
    in_s = torch.zeros(n, dtype=torch.bool, device=dev)
    exact_w = torch.zeros(n, dtype=torch.bool, device=dev)
    top_w = torch.empty(0, dtype=torch.float64, device=dev)
    top_i = torch.empty(0, dtype=torch.int64, device=dev)
    cutoff, last = -_INF, n  # the n-th outlier's weight and index (-inf, n while Top is not full)
    arange = torch.arange(n, device=dev)
    stats = {"iterations": 0, "distances": 0, "rows_recomputed": 0, "trace": []}
    chosen = []
    m = max(1, min(n_candidates, n))
    generator = torch.Generator().manual_seed(int(seed))
    cand = torch.sort(torch.randperm(n, generator=generator)[:m]).values.to(dev)
    settled_before = 0

    def check_time():
        if deadline is not None and time.perf_counter() > deadline:
            raise SolvingSetTimeout(dict(stats, solving_set_size=int(in_s.sum())))

    with Progress(total=n, desc="solving set", verbose=verbose) as bar:
        while cand.numel():
            check_time()
            stats["iterations"] += 1
            mc = cand.numel()
            in_s[cand] = True
            chosen.append(cand)
            T = _tile_columns(budget_bytes, mc, k, margin, space.d)
            # candidates among themselves: every candidate's heap takes all the others
            for t0 in range(0, mc, T):
                cols = cand[t0 : t0 + T]
                S = space.tile(cand, cols)
                S[torch.arange(t0, t0 + cols.numel(), device=dev) , torch.arange(cols.numel(), device=dev)] = _INF
                _update_rows(space, heap, ub, cand, S, cols, space.row_bounds(cand, cols), k, margin, stats,
                             exclude_self=True)
            stats["distances"] += mc * (mc - 1) // 2
            remaining = ~in_s
            active = remaining & _may_enter(ub, arange, cutoff, last)
            act_idx = active.nonzero().squeeze(1)
            inact_idx = (remaining & ~active).nonzero().squeeze(1)
            # candidates x active points: both sides' heaps
            for t0 in range(0, act_idx.numel(), T):
                check_time()
                cols = act_idx[t0 : t0 + T]
                S = space.tile(cand, cols)
                _update_rows(space, heap, ub, cand, S, cols, space.row_bounds(cand, cols), k, margin, stats)
                _update_columns(space, heap, ub, cand, S, cols, k, margin, stats)
                stats["distances"] += mc * cols.numel()
                del S
            # candidates still live x inactive points: only the candidates' heaps
            skipped = torch.zeros(mc, dtype=torch.bool, device=dev)
            for t0 in range(0, inact_idx.numel(), T):
                check_time()
                live = _may_enter(ub.index_select(0, cand), cand, cutoff, last)
                skipped |= ~live
                rows = cand[live]
                if rows.numel() == 0:
                    break
                cols = inact_idx[t0 : t0 + T]
                S = space.tile(rows, cols)
                _update_rows(space, heap, ub, rows, S, cols, space.row_bounds(rows, cols), k, margin, stats)
                stats["distances"] += rows.numel() * cols.numel()
                del S
            # every candidate's weight is offered to Top (the erratum of Fig. 2)
            exact_w[cand[~skipped]] = True
            top_w, top_i = _merge_top(top_w, top_i, ub.index_select(0, cand), cand, n_outliers)
            if top_w.numel() == n_outliers:
                cutoff, last = float(top_w[-1]), int(top_i[-1])
            eligible = ~in_s & _may_enter(ub, arange, cutoff, last)
            n_eligible = int(eligible.sum())
            settled = n - n_eligible
            bar.update(max(0, settled - settled_before))
            settled_before = settled
            stats["trace"].append({"candidates": mc, "active": int(act_idx.numel()), "inactive": int(inact_idx.numel()),
                                   "live_at_end": int((~skipped).sum()), "cutoff": cutoff, "eligible": n_eligible})
            if n_eligible == 0:
                break
            key = torch.where(eligible, -ub, torch.full_like(ub, _INF))
            _, pos = topk_smallest(key[None, :], min(m, n_eligible))
            cand = torch.sort(pos[0]).values
    solving = torch.cat(chosen) if chosen else torch.empty(0, dtype=torch.int64, device=dev)
    threshold = cutoff if top_w.numel() == n_outliers else (float(top_w[-1]) if top_w.numel() else math.nan)
    return {
        "top_indices": top_i,
        "top_weights": top_w,
        "solving_set": solving,
        "scores": ub,
        "scores_exact": exact_w,
        "threshold": threshold,
        **stats,
    }
