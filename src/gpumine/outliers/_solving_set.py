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
1.5x of the paper's (m = 256: 0.13-0.16 %, 0.27-0.80 %, 6.1-9.9 %).
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
Once heaps are full most pairs of a tile can change no heap: when the pairs below the
heaps' k-th scores are few (:data:`SPARSE_FRACTION` of the tile), only those are merged
(their canonical scores grouped by row and by column, :func:`_update_tile`), with the
same heaps as the dense merge.
"""

from __future__ import annotations

import math
import time

import torch

from ..utils._progress import Progress
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


def auto_candidates(device: torch.device, n: int, d: int | None = None, form: str = "tiles") -> int:
    """Default candidates per iteration (the paper's m = 100 was tuned for one CPU core), at most n.

    ============  =====  ===================================================
    device        d      m
    ============  =====  ===================================================
    GPU           <= 3   256
    GPU           >= 4   4096
    GPU           None   1024 (the dimension unknown: the earlier default)
    CPU           <= 3   256
    CPU           other  1024
    ============  =====  ===================================================

    From the candidate-batch sweep in ``BENCHMARKS.md`` (``benchmarks/outliers.py
    --sweep-candidates 256,1024,4096``; k = 5 / 10 / 50; timings in "Design
    measurements quoted in the code"): on G2d 1M x 2, m = 256 was fastest (fraction
    of pairs 0.13-0.16 % / 0.41 % / 1.5 % at m = 256 / 1024 / 4096); on G3d 500K x 3,
    256 at k = 5 and 10, 1024 at k = 50; on Covertype (ADBench, 286K x 10) and
    Poker 1M x 10, 4096, at the same fraction of pairs on Covertype (6-14 %). In
    low dimension a few candidates prune almost everything and larger batches
    only add pairs; in ten dimensions the fraction hardly depends on m, and
    fewer, larger iterations (fewer passes over all n points, fewer host
    synchronisations, wider tiles) win. On the CPU, 256 measured best on 2-d Gaussian data and 1024 on
    Covertype. ``n_candidates`` overrides it. ``form="engine"`` (SolvingSet on engine searches,
    GPU only) takes 16384 from four features on and 4096 below.
    """
    if form == "engine":
        # measured for the engine form (``_solving_set_engine``), m = 1024 / 4096 / 16384: 16384
        # fastest on ADBench cover (k = 5 and 50), 4096 on G2d 1M and G3d 500K (BENCHMARKS.md,
        # "Design measurements quoted in the code"): one candidate costs a row of a kernel
        # launch, an iteration a pass over the active points and several host syncs
        m = 16384 if d is None or d >= 4 else 4096
    elif d is None:
        m = 1024 if device.type == "cuda" else 256
    elif d <= 3:
        m = 256
    else:
        m = 4096 if device.type == "cuda" else 1024
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


#: The sparse merge of a tile runs when the pairs that can change a heap are at most this fraction of
#: the tile (per device type; 0 turns it off, 1 always uses it). The sparse merge sorts the selected
#: pairs three times (by value, then by row and by column group); the dense one makes several
#: passes over the whole tile (row and column minima, a top-k along every row, the transposed tile
#: of the columns that can improve and its top-k). On the CPU (one thread, Covertype) they cost
#: the same at about 8 % of the tile and the sparse merge loses at 16-25 % (BENCHMARKS.md,
#: "Design measurements quoted in the code"), hence 1/16 there. On a GPU the sort is a radix
#: sort and the dense top-k over rows of 10^5 columns runs one block per row, so the break-even
#: should be higher: 1/8 there is a guess, not a measurement: time a run with
#: ``SPARSE_FRACTION["cuda"]`` set to 0 (the dense merge only) and to 1/8, 1/4 (results are
#: identical whatever it is).
SPARSE_FRACTION = {"cpu": 1 / 16, "cuda": 1 / 8}


def _sparse_limit(rows: int, cols: int, device: torch.device) -> int:
    """Most selected pairs for which a (rows x cols) tile takes the sparse merge (see :data:`SPARSE_FRACTION`)."""
    return int(rows * cols * SPARSE_FRACTION.get(device.type, 1 / 16))


def _scatter_segments(seg, val, n_seg, k):
    """(n_seg, k) ascending smallest values per segment from pairs already sorted by (segment, value).

    ``seg`` (int32) is non-decreasing; positions k and later of a segment land in a discarded
    column. Segments with fewer than k values are padded with +inf.
    """
    P = seg.numel()
    seg = seg.to(torch.int64)
    counts = torch.bincount(seg, minlength=n_seg)
    start = torch.cumsum(counts, 0) - counts
    rank = torch.arange(P, device=seg.device) - start.index_select(0, seg)
    out = torch.full((n_seg, k + 1), _INF, dtype=torch.float64, device=seg.device)
    out.index_put_((seg, rank.clamp_(max=k)), val)
    return out[:, :k]


def _merge_sorted_heaps(old, new, k):
    """The k smallest of two (r, k) ascending rows (values only: equal values are interchangeable)."""
    return torch.sort(torch.cat([old, new], dim=1), dim=1).values[:, :k]


def _update_tile(space, heap, ub, rows_global, S, cols_global, k, margin, stats, *, columns: bool):
    """Merge a tile into the heaps of its rows and, with ``columns``, of its columns.

    Rows and columns are disjoint point sets. A pair can change a heap only when its score is
    below the heap's k-th score (equal scores change nothing; with an inexact tile, when its tile
    score is within the tile bound of that). Those pairs are selected first; when they are few
    (:func:`_sparse_limit`) only they are merged: their canonical scores (the tile's own when the
    tile is exact) are sorted by value, then grouped by row and by column, and each heap takes the
    k smallest of its old entries and its group. Every pair that can beat a heap's k-th entry is
    in its group, so the heap is the k smallest of its old entries and the whole tile's canonical
    scores: exactly what the dense merge (:func:`_update_rows`, :func:`_update_columns`) gives.
    Otherwise the dense merge runs.
    """
    r, T = S.shape
    kth = heap[:, k - 1]
    thr_r = kth.index_select(0, rows_global)
    thr_c = kth.index_select(0, cols_global) if columns else None
    limit = _sparse_limit(r, T, S.device)
    P = limit + 1
    rb = space.row_bounds(rows_global, cols_global)
    cb = space.col_bounds(rows_global, cols_global) if columns else None

    def select(cs):  # the pairs of the columns ``cs`` (a slice) that can change a heap
        Sc = S[:, cs]
        mask = Sc < thr_r[:, None] if rb is None else Sc <= (thr_r + rb)[:, None]
        if columns:
            mask |= Sc < thr_c[None, cs] if cb is None else Sc <= (thr_c + cb)[None, cs]
        return mask

    # estimate first (which merge runs never changes the heaps), so that a tile bound for the
    # dense merge does not pay for the full selection: on every step-th column of a wide tile,
    # else from the infinite thresholds (heaps with fewer than k entries select their whole
    # row or column)
    step = T // 512
    if step >= 4:
        estimate = select(slice(None, None, step)).sum() * step
    else:
        estimate = torch.isinf(thr_r).sum() * T
        if columns:
            estimate = estimate + torch.isinf(thr_c).sum() * r
    if int(estimate) <= 2 * limit:
        mask = select(slice(None))
        P = int(mask.sum())
    if P > limit:
        _update_rows(space, heap, ub, rows_global, S, cols_global, space.row_bounds(rows_global, cols_global), k,
                     margin, stats)
        if columns:
            _update_columns(space, heap, ub, rows_global, S, cols_global, k, margin, stats)
        return
    if P == 0:  # no pair can change a heap
        return
    stats["sparse_tiles"] += 1
    ij = mask.nonzero()
    del mask
    i, j = ij[:, 0], ij[:, 1]
    if space.exact:
        v = S[i, j].to(torch.float64)
    else:
        v = space.canonical(rows_global.index_select(0, i), cols_global.index_select(0, j))
    order = torch.argsort(v)
    v = v.index_select(0, order)
    # rows: group the value-sorted pairs by row (a stable sort keeps each group ascending)
    seg = i.index_select(0, order).to(torch.int32)
    by = torch.sort(seg, stable=True)
    new = _scatter_segments(by.values, v.index_select(0, by.indices), r, k)
    merged = _merge_sorted_heaps(heap.index_select(0, rows_global), new, k)
    heap[rows_global] = merged
    ub[rows_global] = space.weight(merged)
    if not columns:
        return
    # columns: only those where some pair beats the k-th entry (the canonical score decides)
    jv = j.index_select(0, order)
    beats = v < thr_c.index_select(0, jv)
    hit = torch.zeros(T, dtype=torch.int64, device=S.device).index_add_(0, jv, beats.to(torch.int64))
    hit_cols = (hit > 0).nonzero().squeeze(1)
    H = hit_cols.numel()
    if H == 0:
        return
    slot = torch.full((T,), H, dtype=torch.int32, device=S.device)
    slot[hit_cols] = torch.arange(H, dtype=torch.int32, device=S.device)
    by = torch.sort(slot.index_select(0, jv), stable=True)
    new = _scatter_segments(by.values, v.index_select(0, by.indices), H + 1, k)[:H]
    ids = cols_global.index_select(0, hit_cols)
    merged = _merge_sorted_heaps(heap.index_select(0, ids), new, k)
    heap[ids] = merged
    ub[ids] = space.weight(merged)


def _may_enter(ub: torch.Tensor, ids: torch.Tensor, cutoff: float, last: int) -> torch.Tensor:
    """Points whose weight could still enter ``Top``: bound above the cutoff, or equal to it with a
    lower index than the n-th outlier's (ties go to the lower index, so they could still displace it)."""
    return (ub > cutoff) | ((ub == cutoff) & (ids < last))


def _merge_top(top_w, top_i, w, i, n_out):
    W = torch.cat([top_w, w])
    I = torch.cat([top_i, i])
    v, ix = sort_by_score_then_index(-W[None, :], I[None, :])
    return -v[0, :n_out], ix[0, :n_out]


class SolvingState:
    """What both SolvingSet forms carry across iterations: heaps, upper bounds, ``Top`` and its cutoff.

    ``heap`` (n, k) float64 ascending canonical scores, ``ub`` their weights (the upper bounds),
    ``in_s`` the solving set, ``exact_w`` the points whose ``ub`` is their exact weight;
    ``(cutoff, last)`` the n-th outlier's weight and index (-inf, n while ``Top`` is not full).
    """

    def __init__(self, n: int, k: int, n_outliers: int, n_candidates: int, *, seed: int, device: torch.device,
                 deadline: float | None):
        self.n, self.k, self.n_outliers, self.device, self.deadline = n, k, n_outliers, device, deadline
        self.heap = torch.full((n, k), _INF, dtype=torch.float64, device=device)
        self.ub = torch.full((n,), _INF, dtype=torch.float64, device=device)
        self.in_s = torch.zeros(n, dtype=torch.bool, device=device)
        self.exact_w = torch.zeros(n, dtype=torch.bool, device=device)
        self.top_w = torch.empty(0, dtype=torch.float64, device=device)
        self.top_i = torch.empty(0, dtype=torch.int64, device=device)
        self.cutoff, self.last = -_INF, n
        self.arange = torch.arange(n, device=device)
        self.stats = {"iterations": 0, "distances": 0, "rows_recomputed": 0, "sparse_tiles": 0, "trace": []}
        self.chosen = []
        self.m = max(1, min(n_candidates, n))
        self._settled = 0
        # random first candidates, the same for both forms and every device for a seed
        generator = torch.Generator().manual_seed(int(seed))
        self.first = torch.sort(torch.randperm(n, generator=generator)[: self.m]).values.to(device)

    def check_time(self) -> None:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise SolvingSetTimeout(dict(self.stats, solving_set_size=int(self.in_s.sum())))

    def start_iteration(self, cand: torch.Tensor) -> None:
        self.check_time()
        self.stats["iterations"] += 1
        self.in_s[cand] = True
        self.chosen.append(cand)

    def may_enter(self, ids: torch.Tensor | None = None) -> torch.Tensor:
        """Whether each point (of ``ids``, or all) could still enter ``Top`` (see :func:`_may_enter`)."""
        if ids is None:
            return _may_enter(self.ub, self.arange, self.cutoff, self.last)
        return _may_enter(self.ub.index_select(0, ids), ids, self.cutoff, self.last)

    def offer(self, cand: torch.Tensor) -> None:
        """Offer the candidates' weights to ``Top`` and raise the cutoff."""
        self.top_w, self.top_i = _merge_top(self.top_w, self.top_i, self.ub.index_select(0, cand), cand, self.n_outliers)
        if self.top_w.numel() == self.n_outliers:
            # one host read for both (indices are below 2**53: exact in float64)
            cw, ci = torch.stack([self.top_w[-1], self.top_i[-1].to(torch.float64)]).tolist()
            self.cutoff, self.last = cw, int(ci)

    def finish_iteration(self, bar, trace: dict, counts: dict | None = None) -> torch.Tensor | None:
        """Record the iteration (``trace``, plus ``counts``: 0-d tensors read with the eligible count in
        one host sync) and return the next candidates, or None when no point outside the solving set
        may enter ``Top``."""
        eligible = ~self.in_s & self.may_enter()
        names = list(counts or {})
        values = torch.stack([eligible.sum()] + [counts[name].to(torch.int64) for name in names]).tolist()
        n_eligible = int(values[0])
        trace.update({name: int(v) for name, v in zip(names, values[1:])}, cutoff=self.cutoff, eligible=n_eligible)
        self.stats["trace"].append(trace)
        settled = self.n - n_eligible
        bar.update(max(0, settled - self._settled))
        self._settled = settled
        if n_eligible == 0:
            return None
        key = torch.where(eligible, -self.ub, torch.full_like(self.ub, _INF))
        _, pos = topk_smallest(key[None, :], min(self.m, n_eligible))
        return torch.sort(pos[0]).values

    def result(self) -> dict:
        n_out = self.n_outliers
        solving = torch.cat(self.chosen) if self.chosen else torch.empty(0, dtype=torch.int64, device=self.device)
        top_w = self.top_w
        threshold = self.cutoff if top_w.numel() == n_out else (float(top_w[-1]) if top_w.numel() else math.nan)
        return {
            "top_indices": self.top_i,
            "top_weights": top_w,
            "solving_set": solving,
            "scores": self.ub,
            "scores_exact": self.exact_w,
            "threshold": threshold,
            **self.stats,
        }


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
    st = SolvingState(n, k, n_outliers, n_candidates, seed=seed, device=dev, deadline=deadline)
    heap, ub, stats = st.heap, st.ub, st.stats
    cand = st.first
    with Progress(total=n, desc="solving set", verbose=verbose) as bar:
        while cand is not None:
            st.start_iteration(cand)
            mc = cand.numel()
            T = _tile_columns(budget_bytes, mc, k, margin, space.d)
            # candidates among themselves: every candidate's heap takes all the others
            for t0 in range(0, mc, T):
                cols = cand[t0 : t0 + T]
                S = space.tile(cand, cols)
                S[torch.arange(t0, t0 + cols.numel(), device=dev) , torch.arange(cols.numel(), device=dev)] = _INF
                _update_rows(space, heap, ub, cand, S, cols, space.row_bounds(cand, cols), k, margin, stats,
                             exclude_self=True)
            stats["distances"] += mc * (mc - 1) // 2
            remaining = ~st.in_s
            active = remaining & st.may_enter()
            act_idx = active.nonzero().squeeze(1)
            inact_idx = (remaining & ~active).nonzero().squeeze(1)
            # candidates x active points: both sides' heaps
            for t0 in range(0, act_idx.numel(), T):
                st.check_time()
                cols = act_idx[t0 : t0 + T]
                S = space.tile(cand, cols)
                _update_tile(space, heap, ub, cand, S, cols, k, margin, stats, columns=True)
                stats["distances"] += mc * cols.numel()
                del S
            # candidates still live x inactive points: only the candidates' heaps
            skipped = torch.zeros(mc, dtype=torch.bool, device=dev)
            for t0 in range(0, inact_idx.numel(), T):
                st.check_time()
                live = st.may_enter(cand)
                skipped |= ~live
                rows = cand[live]
                if rows.numel() == 0:
                    break
                cols = inact_idx[t0 : t0 + T]
                S = space.tile(rows, cols)
                _update_tile(space, heap, ub, rows, S, cols, k, margin, stats, columns=False)
                stats["distances"] += rows.numel() * cols.numel()
                del S
            # every candidate's weight is offered to Top (the erratum of Fig. 2)
            st.exact_w[cand[~skipped]] = True
            st.offer(cand)
            cand = st.finish_iteration(bar, {"candidates": mc, "active": int(act_idx.numel()), "inactive": int(inact_idx.numel())},
                                       {"live_at_end": (~skipped).sum()})
    return st.result()
