"""Distributed SolvingSet (Angiulli, Basta, Lodi & Sartori): the top-n outliers with rows sharded over Dask workers.

The supervisor (the client) runs the iteration of
:func:`gpumine.outliers._solving_set.solving_set`; every worker holds a row
shard of ``X`` (scattered once) with its rows' k-NN heaps and upper bounds.
One iteration:

1. the supervisor broadcasts the candidates (global indices and rows; random
   at first, as one process draws them for the seed);
2. every worker compares them with its own rows, in the tile form of one
   process (float64 tiles certified against the canonical pair form, heaps of
   canonical scores, :func:`~gpumine.outliers._solving_set._update_tile`):

   * with its rows that are current candidates (each candidate's heap only);
   * with its *active* rows (those that may still enter ``Top`` under the
     cutoff and tie rule of the previous iteration): both sides' heaps, so its
     rows' upper bounds fall;
   * with its *inactive* rows: only the candidates that may still enter ``Top``
     by the worker's own bound (its part of the candidate's heap plus the
     distances to the other workers' candidates), re-checked tile by tile;

   and returns each candidate's partial heap (the k smallest canonical scores
   to its rows; a candidate that lives on this worker also brings its row's
   heap, which holds its distances to the earlier candidates) and whether the
   candidate met all its rows;
3. the supervisor merges the partial heaps in a tree on the cluster (the k
   smallest values of a multiset union: associative and commutative, so any
   worker count, chunking or completion order gives the same heaps), turns
   them into weights by the fixed float64 tree sum (:class:`PairSpace`), offers
   **every** candidate to ``Top`` and raises the cutoff;
4. every worker marks its rows that can no longer enter ``Top`` inactive and
   proposes its eligible rows of largest upper bound; the supervisor keeps the
   best ``n_candidates`` by (bound, index), as one process does, until no
   worker has an eligible row left.

Each pair is counted once in every heap it belongs to: (candidate, row) by the
row's worker, (candidate, earlier candidate) by the row heap of whichever of
the two was a row then. So a candidate that met every row on every worker has
its exact weight, the canonical float64 weight of one process, bit for bit.

**What equals one process.** The indices, weights and threshold are those of
:func:`gpumine.outliers.top_n_outliers` (any ``method``); so are the solving
set, the iteration count and the upper bounds of the points outside the solving
set, compared with one process's tile form (``method="solving_set"`` on the CPU,
or on a GPU where it runs tiles): the candidates, the active rows and every
heap outside the candidates are the same, whatever the worker count or chunks.
What differs: one process stops comparing a candidate with the inactive points
as soon as its bound drops below the cutoff, at a tile boundary; here each
worker decides with its own bound. So ``scores`` and ``scores_exact`` of the
solving-set points that could not enter ``Top`` may differ (both are upper
bounds below ``threshold`` there), and so may ``distances_computed``. On a
GPU, one process's engine form (:mod:`~gpumine.outliers._solving_set_engine`)
chooses its active points after the cutoff rises and may pick other candidates:
the outliers and weights are still the same.

Memory: a worker holds its rows in float64, their heaps (rows x k float64) and,
per iteration, the float64 tile form of its rows with the candidates (a few
copies of its shard). Only host arrays travel: candidates' rows, heaps of
candidates x k and proposals.
"""

from __future__ import annotations

import functools
import math
import time

import numpy as np
import torch

__all__ = ["solving_set_outliers"]

_INF = float("inf")
#: Extra tile entries re-ranked in the canonical form per row (``_merge``'s margin in one process).
_MARGIN = 16
#: Candidate rows (bytes) above which they are scattered to every worker once per iteration rather than
#: sent with each worker's task.
BROADCAST_BYTES = 1 << 20


class _Shard:
    """A worker's rows and their SolvingSet state: heaps, upper bounds, which rows joined the solving set.

    Tasks never change a shard: :func:`_compare` returns a new one (its heaps copied, the rows shared),
    so a task that Dask runs again sees the same input.
    """

    def __init__(self, X64, first_row, heap, ub, in_s, metric, device, budget):
        self.X64, self.first_row, self.heap, self.ub, self.in_s = X64, first_row, heap, ub, in_s
        self.metric, self.device, self.budget = metric, device, budget
        self.ids = torch.arange(first_row, first_row + X64.shape[0], device=device)
        self.report = None


def _init_shard(block, first_row, k, metric, p, device, working_memory, backend):
    """A worker's shard from its block of ``X`` (read as one process reads the whole ``X``)."""
    from gpumine.utils._validation import all_finite, check_array
    from gpumine.config import resolve_backend, resolve_device, working_memory_bytes
    from gpumine.outliers._weights import resolve_metric

    dev = resolve_device(device)
    # the tile form runs torch kernels only (as one process's solving set in its tile form)
    resolve_backend(backend, dev, has_triton_kernel=False)
    X = check_array(block, name="X", allow_nan=True)
    if not all_finite(X):  # the error names the row of the whole X, not of the block
        bad = (~torch.isfinite(X)).nonzero()
        raise ValueError(f"X contains NaN or infinity ({bad.shape[0]} non-finite value(s) in rows {first_row}-"
                         f"{first_row + X.shape[0] - 1}, first at row {first_row + int(bad[0, 0])}); remove or impute "
                         "them (e.g. sklearn.impute.SimpleImputer)")
    X64 = X.to(dev).to(torch.float64)
    n = X64.shape[0]
    heap = torch.full((n, k), _INF, dtype=torch.float64, device=dev)
    ub = torch.full((n,), _INF, dtype=torch.float64, device=dev)
    in_s = torch.zeros(n, dtype=torch.bool, device=dev)
    return _Shard(X64, int(first_row), heap, ub, in_s, resolve_metric(metric, p), dev,
                  working_memory_bytes(working_memory, dev))


def _device_type(shard) -> str:
    return shard.device.type


def _rows(shard, ids):
    """``(global indices, float64 rows)`` of the rows of ``ids`` that live in this shard."""
    ids = np.asarray(ids, dtype=np.int64)
    local = ids[(ids >= shard.first_row) & (ids < shard.first_row + shard.X64.shape[0])]
    pos = torch.from_numpy(local - shard.first_row).to(shard.device)
    return local, shard.X64.index_select(0, pos).cpu().numpy()


def _compare(shard, cand_ids, cand_rows, cutoff, last, k):
    """Step 2 of the module docstring: a new shard (heaps updated) whose ``report`` is
    ``(candidate heaps (m, k), met all rows (m,), counters)``."""
    from gpumine.outliers._solving_set import (
        _may_enter,
        _merge_sorted_heaps,
        _tile_columns,
        _update_tile,
    )
    from gpumine.outliers._weights import PairSpace

    dev, n_l, first = shard.device, shard.X64.shape[0], shard.first_row
    cand = torch.from_numpy(np.asarray(cand_ids, dtype=np.int64)).to(dev)
    m = cand.numel()
    is_local = (cand >= first) & (cand < first + n_l)
    local_pos = cand[is_local] - first
    # the shard's rows then the candidates, in one pair space: the tile form of one process with
    # its own centring and exactness test over exactly the values compared here
    space = PairSpace(torch.cat([shard.X64, torch.from_numpy(np.asarray(cand_rows)).to(dev, torch.float64)]),
                      shard.metric)
    cpos = torch.arange(n_l, n_l + m, device=dev)
    # new heaps and bounds (the shard's stay as they were): its rows, then the candidates
    heap_y = torch.cat([shard.heap, torch.full((m, k), _INF, dtype=torch.float64, device=dev)])
    # a local candidate's row heap holds its distances to every earlier candidate (it was an active
    # row of this worker in each earlier iteration): they enter its weight here, and only here
    heap_y[cpos[is_local]] = shard.heap.index_select(0, local_pos)
    ub_y = torch.cat([shard.ub, space.weight(heap_y[n_l:])])
    in_s = shard.in_s.clone()
    stats = {"rows_recomputed": 0, "sparse_tiles": 0}
    distances = 0
    remaining = ~in_s
    remaining[local_pos] = False
    active = remaining & _may_enter(shard.ub, shard.ids, cutoff, last)
    act_idx = active.nonzero().squeeze(1)
    inact_idx = (remaining & ~active).nonzero().squeeze(1)
    # candidates x this worker's candidates (only the candidates' heaps; each pair once per heap)
    if local_pos.numel():
        own = torch.full((m,), -1, dtype=torch.int64, device=dev)  # a candidate's own column, if here
        own[is_local] = torch.arange(local_pos.numel(), device=dev)
        found = _smallest(space, cpos, local_pos, own, k, shard.budget)
        heap_y[cpos] = _merge_sorted_heaps(heap_y[cpos], found, k)
        ub_y[cpos] = space.weight(heap_y[cpos])
        distances += m * local_pos.numel() - local_pos.numel()
    # the other workers' candidates: for this worker's bound on each candidate only (their
    # pairs enter the heaps on the worker holding each of them)
    others = cpos[~is_local]
    cc_heap = torch.full((m, k), _INF, dtype=torch.float64, device=dev)
    if others.numel() and inact_idx.numel():
        own = torch.full((m,), -1, dtype=torch.int64, device=dev)
        own[~is_local] = torch.arange(others.numel(), device=dev)
        cc_heap = _smallest(space, cpos, others, own, k, shard.budget)
        distances += m * others.numel() - others.numel()
    T = _tile_columns(shard.budget, m, k, _MARGIN, space.d)
    # candidates x active rows: both sides' heaps
    for t0 in range(0, act_idx.numel(), T):
        cols = act_idx[t0 : t0 + T]
        _update_tile(space, heap_y, ub_y, cpos, space.tile(cpos, cols), cols, k, _MARGIN, stats, columns=True)
        distances += m * cols.numel()
    # candidates that may still enter x inactive rows: the candidates' heaps only
    skipped = torch.zeros(m, dtype=torch.bool, device=dev)
    for t0 in range(0, inact_idx.numel(), T):
        bound = space.weight(_merge_sorted_heaps(heap_y[cpos], cc_heap, k))
        live = _may_enter(bound, cand, cutoff, last)
        skipped |= ~live
        rows = cpos[live]
        if rows.numel() == 0:
            break
        cols = inact_idx[t0 : t0 + T]
        _update_tile(space, heap_y, ub_y, rows, space.tile(rows, cols), cols, k, _MARGIN, stats, columns=False)
        distances += rows.numel() * cols.numel()
    in_s[local_pos] = True
    out = _Shard(shard.X64, first, heap_y[:n_l], ub_y[:n_l], in_s, shard.metric, dev, shard.budget)
    counters = dict(stats, distances=distances, active=int(act_idx.numel()), inactive=int(inact_idx.numel()))
    out.report = (heap_y[n_l:].cpu().numpy(), (~skipped).cpu().numpy(), counters)
    return out


def _smallest(space, rows, cols, own, k, budget):
    """The k smallest canonical scores of each of ``rows`` against ``cols`` (positions in ``space``), ascending,
    +inf padded; ``own[i]``: the column holding row i's own point (left out), or -1. In row blocks within
    ``budget`` bytes."""
    c = cols.numel()
    out = torch.full((rows.numel(), k), _INF, dtype=torch.float64, device=rows.device)
    step = max(1, budget // (8 * 4 * max(1, c)))
    take = min(k, c)
    for r0 in range(0, rows.numel(), step):
        S = space.canonical(rows[r0 : r0 + step, None], cols[None, :])
        o = own[r0 : r0 + step]
        mine = (o >= 0).nonzero().squeeze(1)
        S[mine, o[mine]] = _INF  # a point is not its own neighbour
        out[r0 : r0 + step, :take] = torch.topk(S, take, dim=1, largest=False, sorted=True).values
    return out


def _report(shard):
    return shard.report


def _merge_reports(a, b, k):
    """Two workers' reports as one: the k smallest of each candidate's scores (a multiset merge, associative and
    commutative), whether it met every row of both, counters summed."""
    heap = np.sort(np.concatenate([a[0], b[0]], axis=1), axis=1, kind="stable")[:, :k]
    counters = {key: a[2][key] + b[2][key] for key in a[2]}
    return heap, a[1] & b[1], counters


def _propose(shard, cutoff, last, m):
    """This worker's eligible rows (not in the solving set, may still enter ``Top``): their count and the best
    ``m`` by (-upper bound, index), with their rows."""
    from gpumine.core.select import topk_smallest
    from gpumine.outliers._solving_set import _may_enter

    eligible = ~shard.in_s & _may_enter(shard.ub, shard.ids, cutoff, last)
    n_eligible = int(eligible.sum())
    take = min(m, n_eligible)
    if take == 0:
        return np.zeros(0), np.zeros(0, np.int64), np.zeros((0, shard.X64.shape[1])), n_eligible
    key = torch.where(eligible, -shard.ub, torch.full_like(shard.ub, _INF))
    _, pos = topk_smallest(key[None, :], take)
    pos = pos[0]
    return (key.index_select(0, pos).cpu().numpy(), shard.ids.index_select(0, pos).cpu().numpy(),
            shard.X64.index_select(0, pos).cpu().numpy(), n_eligible)


def _merge_proposals(a, b, m):
    """The best ``m`` of two proposals by (key, index), eligible counts summed: associative and commutative."""
    keys, ids = np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]])
    rows = np.concatenate([a[2], b[2]])
    order = np.lexsort((ids, keys))[:m]
    return keys[order], ids[order], rows[order], a[3] + b[3]


def _final(shard):
    """Upper bounds of this worker's rows (exact or not) and its first row."""
    return shard.first_row, shard.ub.cpu().numpy()


def _shard_blocks(client, X, n_workers):
    """``(futures of row blocks, first rows, n_samples, n_features)``: NumPy blocks scattered, dask blocks
    computed on the cluster."""
    import dask.array as da

    from ._knn import _computed, _row_blocks

    if isinstance(X, da.Array):
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (n_samples, n_features); got a {X.ndim}-D dask array")
        if any(math.isnan(c) for c in X.chunks[0]):
            raise ValueError("X has unknown chunk sizes; call X.compute_chunk_sizes() first")
        blocks, n = _row_blocks(X, n_workers)
        sizes = X.chunks[0]
        kept = [(s, b) for (s, b), size in zip(blocks, sizes) if size]
        return [_computed(client, b) for _, b in kept], [s for s, _ in kept], n, X.shape[1]
    from ..utils._validation import check_array

    Xt = check_array(X, name="X")  # errors name X and its row, as one process's
    data = Xt.detach().cpu().numpy()
    blocks, n = _row_blocks(data, n_workers)
    return [client.scatter(b, hash=False) for _, b in blocks], [s for s, _ in blocks], n, data.shape[1]


def solving_set_outliers(X, n_outliers, k, *, include_self, metric, p, n_candidates, random_state, client, device,
                         working_memory, backend, verbose):
    """:func:`gpumine.distributed.top_n_outliers` with ``method="solving_set"`` (see the module docstring)."""
    from ..utils._progress import Progress
    from ..outliers._distance_based import (
        DistanceOutliers,
        check_candidates,
        check_include_self,
        check_n_outliers,
        effective_k,
        seed_from,
    )
    from ..outliers._solving_set import _merge_top, auto_candidates
    from ..outliers._weights import PairSpace, resolve_metric
    from ._knn import _client

    include_self = check_include_self(include_self)
    metric_obj = resolve_metric(metric, p)
    seed = seed_from(random_state)
    client = _client(client)
    n_workers = max(1, len(client.scheduler_info()["workers"]))
    blocks, starts, n, d = _shard_blocks(client, X, n_workers)
    if n < 2:
        raise ValueError(f"X has n_samples = {n}; distance-based outliers need at least 2 points")
    k_other = effective_k(k, n, include_self)
    n_outliers = check_n_outliers(n_outliers, n)
    auto = isinstance(n_candidates, str) and n_candidates == "auto"
    if not auto:
        m = check_candidates(n_candidates, torch.device("cpu"), n)  # a bad value fails before the cluster works
    p_arg = metric_obj.p if metric_obj.name == "minkowski" else None
    shards = [client.submit(_init_shard, b, s, k_other, metric_obj.name, p_arg, device, working_memory, backend,
                            pure=False) for b, s in zip(blocks, starts)]
    # waits for every shard; a worker's error (bad values in a dask block, an unknown device) raises here
    dev_type = client.gather([client.submit(_device_type, f, pure=False) for f in shards])[0]
    # each shard's state stays on the worker that holds it: every later task on it runs there
    where = client.who_has(shards)
    homes = [sorted(where[f.key])[:1] or None for f in shards]
    if auto:  # the tile form's candidates per iteration for the workers' device (one process's table)
        m = auto_candidates(torch.device(dev_type), n, d, "tiles")
    del blocks

    def submit(func, i, *args):
        return client.submit(func, shards[i], *args, pure=False, workers=homes[i])

    # the first candidates: random, as one process draws them for this seed (SolvingState)
    generator = torch.Generator().manual_seed(int(seed))
    cand = torch.sort(torch.randperm(n, generator=generator)[:m]).values.numpy()
    found = client.gather([submit(_rows, i, cand) for i in range(len(shards))])
    ids = np.concatenate([f[0] for f in found])
    rows = np.concatenate([f[1] for f in found])
    cand_rows = rows[np.argsort(ids)]

    top_w = torch.empty(0, dtype=torch.float64)
    top_i = torch.empty(0, dtype=torch.int64)
    cutoff, last = -_INF, n
    chosen, chosen_w, chosen_exact = [], [], []
    counters = {"distances": 0, "rows_recomputed": 0, "sparse_tiles": 0}
    trace = []
    iterations = 0
    settled = 0
    start = time.perf_counter()
    with Progress(total=n, desc="solving set (dask)", verbose=verbose) as bar:
        while cand is not None:
            iterations += 1
            if cand_rows.nbytes > BROADCAST_BYTES:  # large candidate sets travel to each worker once
                ids_f = client.scatter(cand, broadcast=True, hash=False)
                rows_f = client.scatter(cand_rows, broadcast=True, hash=False)
            else:  # small ones ride with the tasks (a broadcast costs more than it saves)
                ids_f, rows_f = cand, cand_rows
            previous = shards  # held until the new shards exist (see _knn.tree_reduce)
            shards = [submit(_compare, i, ids_f, rows_f, cutoff, last, k_other) for i in range(len(shards))]
            reports = client.gather([submit(_report, i) for i in range(len(shards))])
            heaps, met, count = functools.reduce(lambda a, b: _merge_reports(a, b, k_other), reports)
            del previous, reports, ids_f, rows_f
            space = PairSpace(torch.from_numpy(cand_rows), metric_obj, tiles=False)
            weights = space.weight(torch.from_numpy(heaps))
            cand_t = torch.from_numpy(cand)
            # every candidate is offered to Top (the erratum of the paper's Fig. 2): one that did not
            # meet every row has a bound that ranks below the n-th outlier and cannot enter
            top_w, top_i = _merge_top(top_w, top_i, weights, cand_t, n_outliers)
            if top_w.numel() == n_outliers:
                cutoff, last = float(top_w[-1]), int(top_i[-1])
            chosen.append(cand)
            chosen_w.append(weights.numpy())
            chosen_exact.append(met)
            for key in counters:
                counters[key] += count[key]
            keys, ids, rows, n_eligible = functools.reduce(
                lambda a, b: _merge_proposals(a, b, m), client.gather([submit(_propose, i, cutoff, last, m)
                                                                       for i in range(len(shards))]))
            trace.append({"candidates": int(cand.size), "active": count["active"], "inactive": count["inactive"],
                          "live_at_end": int(met.sum()), "cutoff": cutoff, "eligible": int(n_eligible)})
            bar.update(max(0, n - n_eligible - settled))
            settled = n - n_eligible
            if n_eligible == 0:
                cand = None
            else:
                order = np.argsort(ids)
                cand, cand_rows = ids[order], rows[order]
        finals = client.gather([submit(_final, i) for i in range(len(shards))])
    seconds = time.perf_counter() - start
    del shards
    scores = np.empty(n, dtype=np.float64)
    for first, ub in finals:
        scores[first : first + len(ub)] = ub
    solving = np.concatenate(chosen)
    scores[solving] = np.concatenate(chosen_w)
    exact = np.zeros(n, dtype=bool)
    exact[solving] = np.concatenate(chosen_exact)
    threshold = cutoff if top_w.numel() == n_outliers else (float(top_w[-1]) if top_w.numel() else math.nan)
    pairs = n * (n - 1) // 2
    return DistanceOutliers(
        indices=top_i.numpy(), weights=top_w.numpy(), solving_set=solving, scores=scores, scores_exact=exact,
        threshold=float(threshold), method="solving_set", n_neighbors=int(k), include_self=include_self,
        metric=metric_obj.name, n_samples=n, n_candidates=m, iterations=iterations,
        distances_computed=int(counters["distances"]), distance_fraction=counters["distances"] / pairs,
        seconds=seconds, device=f"dask ({len(starts)} shards, {dev_type})",
        stats={"rows_recomputed": counters["rows_recomputed"], "sparse_tiles": counters["sparse_tiles"],
               "trace": trace, "form": "tiles", "shards": len(starts)},
    )
