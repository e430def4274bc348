"""The exact kNN engine (CUKNN): tensors in, ``(scores, indices)`` out.

For each block of queries the engine walks the references tile by tile:

1. **distances** of the tile by the metric's fast form (matrix products on
   centred data for L2/cosine/inner product);
2. **local best c** of the tile (c = k plus a margin), merged into the block's
   running candidate list — the paper's local-k / global-k phases;
3. **exact re-rank**: the candidates' exact per-pair scores are recomputed
   (independent of tiling) and sorted by (score, index);
4. **certificate**: a row is final when the best excluded tile score, less its
   error bound, exceeds the k-th exact score — then no excluded reference can be
   among the true k nearest. Rows that fail (many
   exact ties or duplicates at the boundary) are redone by an exact scan that
   uses the per-pair form for every reference.

So results are exact float32 (ranked by per-pair values, ties to the lower
index) whatever the tile sizes or the device, while the bulk of the work runs
as matrix products. The plan is made in :mod:`._plan`, the tiles come from
:mod:`._references`, steps 3 and 4 and the exact scan are :mod:`._rerank`;
this module runs the blocks, the retries and the choice of path.

On a GPU, L2 searches whose queries' score blocks fit the working memory run
**dense** instead (:mod:`._dense`: one product, selection, float64 re-score and
radius pass per block, bounded whatever the ties); larger ones run dense when
their references are the distinct rows of duplicated data or when the fused
kernel's first pass leaves more than a few rows of a sample open
(:func:`_runs_dense`), and on this engine otherwise. Of the searches that run
dense, large ones at few features run on the exact-selection kernel instead
(:mod:`._exact_select`: float64 scores selected in one launch, no certificate).
Before any of these choices, small and mid-size L2 searches go straight to the
exact-selection kernel at up to 32 features (tiny ones at up to 128) and to the product selection past
that (:mod:`._product_select`: one product and one or two selection launches per query
block, its certificate inside the kernel).
"""

from __future__ import annotations

import functools
import math
import threading
import weakref

import torch

from ...utils._progress import Progress
from ...core.distance import Metric
from ...core.select import PAD_INDEX
from ...core.tiles import (TilePlan, copy_to_device, copy_to_host, evenly_spread_rows, iter_row_chunks, plan_tiles, same_device,
                           tile_bytes)
from ._curve import _curve_applies
from ._dense import dense_by_size, dense_eligible, dense_search, integer_centre, tensor_state
from ._exact_select import (exact_select_applies, exact_select_first, exact_select_preferred, exact_select_search,
                            exact_select_supports, exact_select_tiny)
from ._product_select import (product_select_first, product_select_if_integral, product_select_search,
                              product_select_supports)
from ._duplicates import DEDUP_MAX_FRACTION, DEDUP_METRICS, UniqueRows, drop_self, expand_neighbours
from ._exact_tile_kernel import exact_tile_scores, scores_within
from ._float64_order import (FLOAT64_ORDER_METRICS, certified_rows, float64_list_width, needs_float64_order, order_by_float64,
                             ranked_by_float64)
from ._fused_kernel import fused_candidates
from ._host_summary import observe_copy
from ._magnitude import arithmetic, magnitudes
from ._plan import _KERNEL_PRECISION, SearchPlan, _fits_resident, _scores_directly, candidate_count, plan_search
from ._references import _References
from ._verdicts import TensorVerdicts
from ._rerank import _exact_scan, _rerank

__all__ = ["knn_search"]


def _range_plan(ref: torch.Tensor, query: torch.Tensor, largest: float | None = None, tiniest: float | None = None):
    """``(dtype to compute in, power-of-two scale or None)`` for this data (see :mod:`._magnitude`).

    ``largest``/``tiniest``: the data's largest and smallest nonzero magnitudes, when the caller has them.
    """
    if largest is None or (tiniest is None and ref.dtype != torch.float64):
        largest, tiniest = magnitudes(ref) if query is ref else magnitudes(ref, query)
    return arithmetic(ref.dtype, largest, math.inf if tiniest is None else tiniest)


def _mask_self(scores: torch.Tensor, query_ids: torch.Tensor, r0: int) -> None:
    """Set the (query i, reference i) entries of a tile to +inf (``query_ids``: global row ids)."""
    cols = query_ids - r0
    inside = (cols >= 0) & (cols < scores.shape[1])
    rows = torch.arange(scores.shape[0], device=scores.device)
    # out-of-tile rows write to a harmless column and keep their value
    cols = torch.where(inside, cols, torch.zeros_like(cols))
    current = scores[rows, cols]
    scores[rows, cols] = torch.where(inside, torch.full_like(current, float("inf")), current)


_GROUP = 8  # columns per group in the hierarchical tile selection


def _tile_candidates(S: torch.Tensor, c: int):
    """The ``c`` smallest entries of each row of a tile, as (values, columns), in any order.

    Hierarchical, so the expensive top-k runs on a small array: the columns are
    cut into groups of 8 (column ``g + m * n_groups`` belongs to group ``g``, so
    the minimum is a coalesced reduction), the ``c`` smallest group minima are
    found the same way recursively, and the best ``c`` entries are taken inside
    those groups. Every entry left out is at least the c-th value kept, which
    is all the certificate needs.
    """
    q, r = S.shape
    if c >= r:  # every column is kept: no top-k
        return S, torch.arange(r, device=S.device).expand(q, r)
    if r <= max(16 * c, 2048):  # small enough that one top-k beats more launches
        return torch.topk(S, min(c, r), dim=1, largest=False, sorted=False)
    n_groups = r // _GROUP
    body = n_groups * _GROUP
    minima = S[:, :body].view(q, _GROUP, n_groups).amin(1)
    _, groups = _tile_candidates(minima, c)
    cols = _group_columns(groups, n_groups, r)
    values, pos = torch.topk(S.gather(1, cols), c, dim=1, largest=False, sorted=False)
    return values, cols.gather(1, pos)


def _group_columns(groups: torch.Tensor, n_groups: int, r: int) -> torch.Tensor:
    """Tile columns of the chosen strided groups, plus the tail columns no group covers."""
    q = groups.shape[0]
    members = torch.arange(_GROUP, device=groups.device) * n_groups
    cols = (groups[:, :, None] + members).reshape(q, -1)
    body = n_groups * _GROUP
    if body < r:
        cols = torch.cat([cols, torch.arange(body, r, device=groups.device).expand(q, r - body)], dim=1)
    return cols


def _keep_best(values, index, new_values, new_index, c):
    """Best ``c`` of two candidate lists by tile score (ties arbitrary: the exact re-rank settles them)."""
    values = torch.cat([values, new_values], dim=1)
    index = torch.cat([index, new_index], dim=1)
    if values.shape[1] <= c:  # all kept: no top-k
        return values, index
    values, pos = torch.topk(values, c, dim=1, largest=False, sorted=False)
    return values, index.gather(1, pos)


def knn_search(
    ref: torch.Tensor,
    query: torch.Tensor,
    k: int,
    metric: Metric,
    *,
    exclude_self: bool,
    device: torch.device,
    budget_bytes: int,
    result_device: torch.device,
    verbose=None,
    stats: dict | None = None,
    backend: str = "torch",
    as_distance: bool = False,
    precision: str = "exact",
    magnitude: float | None = None,
    tiniest: float | None = None,
    dedupe: bool = True,
    float64_order: bool = True,
    integral: bool | None = None,
    memo=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact k nearest references of every query row.

    Returns ``(scores, indices)`` on ``result_device``, ascending by metric
    score (smaller = closer; see :class:`~gpumine.core.distance.Metric`), ties
    to the lower index. ``exclude_self`` drops reference i from query i's list
    (queries are the references). ``stats``, when given, receives counters
    (rows redone by the exact scan, tile plan). ``backend="triton"`` runs the
    candidate phase as one fused kernel (see :func:`fused_unsupported`);
    ``"auto"`` (from :func:`choose_backend`) picks it by :func:`auto_prefers_fused`.
    ``as_distance=True`` returns the metric's distances instead of scores.
    Data whose magnitudes are near the ends of the float range is scaled by a
    power of two first (exact) and the results scaled back; float32 data whose
    magnitudes span more than float32 can square exactly is searched in float64
    and its results rounded to float32 (see :mod:`._magnitude`). ``precision``
    (``"exact"``, ``"tf32"``, ``"bf16"``) is the arithmetic of the candidate
    phase's products; the re-rank and certificate keep results exact in all.
    ``magnitude``/``tiniest``: the largest and the smallest nonzero absolute
    value in ``ref`` and ``query`` when the caller has them (saves passes over
    the data). ``integral``: whether ``ref`` and ``query`` hold whole numbers only,
    when the caller knows (float data then skips the integer-centre check).
    ``memo``: the :class:`~._dense.ReferenceMemo` of references their owner keeps
    on the device (product searches take their prepared operands from it).
    """
    n_query = query.shape[0]
    dtype = ref.dtype
    compute_dtype, scale = _range_plan(ref, query, magnitude, tiniest)
    if compute_dtype != dtype:
        wide_ref = ref.to(compute_dtype)
        scores, index = knn_search(
            wide_ref, wide_ref if query is ref else query.to(compute_dtype), k, metric, exclude_self=exclude_self,
            device=device, budget_bytes=budget_bytes, result_device=result_device, verbose=verbose, stats=stats,
            backend="auto" if backend == "triton" else backend, as_distance=as_distance, dedupe=dedupe,
            float64_order=float64_order)
        return scores.to(dtype), index
    if scale is not None:
        integral = memo = None  # scaled data is new data
        same = query is ref
        ref = ref * scale
        query = ref if same else query * scale
    out_scores = torch.empty((n_query, k), dtype=dtype, device=result_device)
    out_index = torch.empty((n_query, k), dtype=torch.int64, device=result_device)
    if n_query == 0:
        return out_scores, out_index
    # every path honours the same working-memory floor (the tile plan raises a clear error below it)
    plan_tiles(n_query, ref.shape[0], ref.shape[1], candidate_count(k, ref.shape[0]), ref.element_size(), budget_bytes)
    # Final float64 scores whatever the ties, with no float64-order check, duplicate search, probe
    # or certificate first: wide data, and large searches at more than one chunk of features, on
    # one product and one or two selection launches per query block (._product_select); the others at few
    # features, and tiny ones at up to 128, in one launch (._exact_select).
    first = None
    if memo is not None and not same_device(ref.device, device):
        memo = None  # references copied for each search: nothing to keep
    if _runs_first(ref, query, device, float64_order):
        exact_here = exact_select_supports(metric, ref.dtype, ref.shape[1], k, device, backend, precision)
        tiny = exact_here and exact_select_tiny(query.shape[0], ref.shape[0], ref.shape[1])
        product = False if tiny else _product_select_first(ref, query, k, metric, device, backend, precision)
        if product is not False and integral is None and memo is not None and not memo.ref_whole(ref):
            integral = False  # what the references' owner learned once: no integer centre to seek
        if product is None:  # a larger search whose data decides: exact (integer) products run there
            ref, query = _resident(ref, query, device)
            product = integral is not False and integer_centre(ref, query) is not None
        if product:
            first = functools.partial(product_select_search, integral=integral, memo=memo)
        elif exact_here and exact_select_first(query.shape[0], ref.shape[0], ref.shape[1]):
            first = exact_select_search
    if first is not None:
        ref, query = _resident(ref, query, device)
        keys, index = first(ref, query, k, metric, exclude_self=exclude_self, budget_bytes=budget_bytes, stats=stats)
        scores = finish_scores(keys.to(out_scores.dtype), metric, as_distance, scale)
        return copy_to_host(out_scores, scores), copy_to_host(out_index, index)
    # host searches: KD-tree or BLAS (see _cpu_search); a self-search of part of the references
    # (query i is reference i of a prefix) stays on the engine
    # the metrics whose order is float64 on every path (cosine and inner product are float32-ordered)
    if (device.type == "cpu" and backend != "triton" and (query is ref or not exclude_self)
            and metric.name in FLOAT64_ORDER_METRICS):
        from ._host import cpu_search

        found = cpu_search(ref, query, k, metric, exclude_self=exclude_self, budget_bytes=budget_bytes, stats=stats)
        if found is not None:  # float64 exact scores rounded to the data's dtype, as the engine reports them
            return finish_scores(found[0].to(result_device), metric, as_distance, scale), found[1].to(result_device)
    engine = dict(device=device, budget_bytes=budget_bytes, verbose=verbose, stats=stats, backend=backend, precision=precision)
    order64 = float64_order and needs_float64_order(ref, query, metric)
    if _dense_eligible(ref, metric, float64_order, device, backend, precision) and not same_device(ref.device, device):
        ref, query = _resident(ref, query, device)  # dense searches keep the references on the device
    unique = _distinct_rows(ref) if dedupe and _dedup_applies(ref, query, k, metric, device, exclude_self) else None
    if unique is not None:  # the distinct rows' search decides for itself whether it runs dense
        keys, index = _search_unique(unique, query, k, metric, exclude_self=exclude_self, order64=order64,
                                     float64_order=float64_order, **engine)
    else:
        dense = _runs_dense(ref, query, k, metric, exclude_self, order64, float64_order, engine)
        if not order64 and not dense:
            _engine_search(ref, query, k, metric, exclude_self, out_scores, out_index, **engine)
            return finish_scores(out_scores, metric, as_distance, scale), out_index
        keys, index = _search_ordered(ref, query, k, metric, exclude_self, order64, float64_order=float64_order, dense=dense,
                                      **engine)
    # reported values: the float64 exact scores rounded to the data's dtype where the order is
    # float64 (the nearest float32 to the true score), else the engine's exact scores
    # distances formed where the keys are (the GPU's IEEE square root), then one staged copy each
    scores = finish_scores(keys.to(out_scores.dtype), metric, as_distance, scale)
    return copy_to_host(out_scores, scores), copy_to_host(out_index, index)


def _engine_search(ref, query, k, metric, exclude_self, out_scores, out_index, *, device, budget_bytes, verbose, stats, backend,
                   precision, out_outside=None) -> None:
    """The tile/fused engine: top k by (float32 or float64 exact score, index) into ``out_scores``/``out_index``.

    ``out_outside`` (float64, one entry per query): the lists' last entry is a spare
    (see :func:`plan_search`), and this receives each row's bound on every reference
    outside its list.
    """
    n_query = query.shape[0]
    if n_query == 0:
        return
    sp = plan_search(ref, query, k, metric, device=device, budget_bytes=budget_bytes, backend=backend, precision=precision,
                     spare=0 if out_outside is None else 1)
    refs = _References(ref, metric, sp.plan.ref_rows, device, resident=sp.resident)
    retries = _Retries(sp, refs, ref, exclude_self)
    n_blocks = -(-n_query // sp.plan.query_rows)
    result_device = out_scores.device
    with Progress(total=n_blocks, desc="kneighbors", verbose=verbose) as bar:
        for q0, Q in iter_row_chunks(query, sp.plan.query_rows, device):
            if sp.tile_select:
                Qp = metric.prepare(Q, refs.centre, "query")
                ids = torch.arange(q0, q0 + Q.shape[0], device=device)
                scores, index, failed = _exact_tile_topk(Q, refs, k, q0, exclude_self)
                c_tried = 0  # no candidate list yet: rows with tied scores start from the usual c
                # exact lists (the failed rows' are replaced): nothing outside beats the last entry
                outside = scores[:, k - 1].double() if sp.spare else None
            else:
                scores, index, certified, Qp, ids, outside = first_pass(sp, refs, Q, q0, exclude_self)
                failed = (~certified).nonzero().squeeze(1)
                c_tried = sp.c
            retries.settle(Q, Qp, ids, scores, index, failed, c_tried, outside, float64_next=out_outside is not None)
            out_scores[q0 : q0 + Q.shape[0]] = scores.to(result_device)
            out_index[q0 : q0 + Q.shape[0]] = index.to(result_device)
            if out_outside is not None:
                out_outside[q0 : q0 + Q.shape[0]] = outside.to(out_outside.device)
            bar.update()
    if stats is not None:
        retries.report(stats)


def _resident(ref: torch.Tensor, query: torch.Tensor, device: torch.device):
    """``(ref, query)`` on ``device`` (``query is ref`` kept), host references' copy observed for their facts."""
    same = query is ref
    if not same_device(ref.device, device):
        host, ref = ref, copy_to_device(ref, device)
        observe_copy(host, ref)  # the facts a search of streamed references gathers (see _host_summary)
    return ref, ref if same else (query if same_device(query.device, device) else copy_to_device(query, device))


def _runs_first(ref, query, device, float64_order) -> bool:
    """Whether a search may go to the exact-selection or product-selection kernel before any other choice:
    its order is by float64 scores, both operands share a dtype and the references fit on the device."""
    return ((float64_order or ref.dtype == torch.float64) and query.dtype == ref.dtype
            and (same_device(ref.device, device) or _fits_resident(ref, device)))


def _product_select_first(ref, query, k, metric, device, backend, precision) -> bool | None:
    """Whether a search (:func:`_runs_first`) runs on the product-selection kernel (see :func:`product_select_first`).

    None: if its products are exact (:func:`product_select_if_integral`).
    """
    if not product_select_supports(metric, ref.dtype, ref.shape[1], k, device, backend, precision):
        return False
    n_query, n_ref, d = query.shape[0], ref.shape[0], ref.shape[1]
    if product_select_first(n_query, n_ref, d):
        return True
    # only float32 data can have exact products (see integer_centre), and the queries must fit too
    return None if (product_select_if_integral(n_query, n_ref, d) and ref.dtype == torch.float32
                    and (query is ref or same_device(query.device, device) or _fits_resident(query, device))) else False


def _dense_eligible(ref, metric, float64_order, device, backend, precision) -> bool:
    """Whether a search may run dense (:mod:`._dense`): its order is by float64 scores and the references fit."""
    return ((float64_order or ref.dtype == torch.float64) and dense_eligible(metric, ref.dtype, device, backend, precision)
            and (same_device(ref.device, device) or _fits_resident(ref, device)))


def _runs_dense(ref, query, k, metric, exclude_self, order64, float64_order, engine, deduplicated: bool = False) -> bool:
    """Whether this search runs dense: by its shape, for distinct rows of duplicated data, or by a probe.

    Large searches are the fused kernel's where its first pass certifies nearly
    every row (continuous data without duplicates); where ties or near-ties leave
    rows open (integer data, duplicates, clusters), its retries cost more than
    one dense pass, whose work is bounded whatever the ties. A strided sample of
    ``DENSE_PROBE_ROWS`` queries through the fused first pass tells which (one
    launch over the references for the sample). Searches of fewer than
    ``DENSE_PROBE_MIN_REFERENCES`` references run dense unprobed up to
    ``DENSE_UNPROBED_MAX_PAIRS`` pairs; past that their probe also counts the rows
    the float64 order would leave open.
    """
    device, backend, precision = engine["device"], engine["backend"], engine["precision"]
    if not _dense_eligible(ref, metric, float64_order, device, backend, precision) or not same_device(ref.device, device):
        return False
    n_query = query.shape[0]
    if deduplicated or dense_by_size(n_query, ref.shape[0], ref.shape[1]):
        return True
    few_references = ref.shape[0] < DENSE_PROBE_MIN_REFERENCES
    if few_references and n_query * ref.shape[0] <= DENSE_UNPROBED_MAX_PAIRS:
        return True
    if ref.shape[0] >= DENSE_PROBE_SKIP_REFS_PER_QUERY * n_query:
        return False  # the probe's pass over the references would cost about what the search does
    # the verdict is the data's: remembered for the same unchanged tensor (see ._verdicts), the queries'
    # with the references' identity and state beside (a stale one would cost time, never a result)
    key = (k, metric.name, metric.p, exclude_self, order64, float64_order, backend, precision, engine["budget_bytes"],
           deduplicated, DENSE_PROBE_ROWS, DENSE_PROBE_MAX_OPEN)
    owner = query
    if query is not ref:
        key += (id(ref), tensor_state(ref))
    remembered = _DENSE_VERDICTS.get(owner, key)
    if remembered is not None:
        if engine["stats"] is not None:
            engine["stats"].update(probe_remembered=True)
        return remembered
    picks = probe_sample_rows(n_query, query.device)
    sample = query.index_select(0, picks).to(device)  # host queries (they stream to the search) sampled onto the device
    # a self-search's sample keeps its own rows: one neighbour more (and one more for the float64 order)
    width = min(k + (1 if exclude_self else 0) + (1 if order64 else 0), ref.shape[0])
    probe_backend = backend
    if few_references:
        # many queries against few references: the sample alone is too small for the automatic
        # backend to run fused, so it runs fused where the whole search would
        if not plan_search(ref, query, width, metric, device=device, budget_bytes=engine["budget_bytes"], backend=backend,
                           precision=precision).fused:
            return True
        probe_backend = "triton"
    # the float64 order's extra entry is a spare, as in the search (see plan_search)
    spare = 1 if order64 and width == k + (1 if exclude_self else 0) + 1 else 0
    sp = plan_search(ref, sample, width, metric, device=device, budget_bytes=engine["budget_bytes"], backend=probe_backend,
                     precision=precision, spare=spare)
    if not (sp.fused and sp.plan.query_rows >= sample.shape[0]):
        return True  # the tile engine's selection costs more than a dense pass
    # and, with few references, the float64 order's certificate (see order_by_float64): data whose
    # float32 scores tie where float64 ones differ (clusters far from the origin) passes the first
    # pass's certificate, then leaves its rows to float64 scans, several times the dense search's time
    check64 = few_references and order64 and width < ref.shape[0]
    from ._graphs import probe_with_graph  # (the graphs module builds on this one)

    n_open = probe_with_graph(sp, ref, sample, width, metric, check64, engine["budget_bytes"], probe_backend, precision)
    if n_open is None:  # the eager probe: the same passes, launch by launch
        refs = _References(ref, metric, sp.plan.ref_rows, device, resident=sp.resident)
        n_open = int(probe_open_rows(sp, refs, ref, sample, width, metric, check64, engine["budget_bytes"]))
    if engine["stats"] is not None:
        engine["stats"].update(probe_rows=int(sample.shape[0]), probe_rows_open=n_open)
    verdict = n_open > DENSE_PROBE_MAX_OPEN * sample.shape[0]
    _DENSE_VERDICTS.put(owner, key, verdict)
    return verdict


def fused_by_the_data(ref, query, k, metric, exclude_self, device, backend, precision, budget_bytes) -> bool:
    """Whether :func:`knn_search` (float64 order) would run this search of device operands on the fused kernel.

    That is: no product selection first (whatever the data), no duplicate rows to
    search apart, and :func:`_runs_dense`'s probe (or its remembered verdict) says
    fused. The graphs module asks before it replays a fused search for
    ``backend="auto"``; the probe and the duplicate check are the eager path's own,
    so a later eager search of the same tensor finds their verdicts remembered.
    """
    if not (same_device(ref.device, device) and same_device(query.device, device)):
        return False
    if _runs_first(ref, query, device, True) and _product_select_first(ref, query, k, metric, device, backend,
                                                                        precision) is not False:
        return False
    if _dedup_applies(ref, query, k, metric, device, exclude_self) and _distinct_rows(ref, hand_on=True) is not None:
        return False
    engine = dict(device=device, budget_bytes=budget_bytes, verbose=0, stats=None, backend=backend, precision=precision)
    return not _runs_dense(ref, query, k, metric, exclude_self, needs_float64_order(ref, query, metric), True, engine)


# The dense-or-fused probe's verdicts, by query tensor (see ._verdicts): an all-kNN of the same
# unchanged tensor probes once, and so do searches of the same unchanged queries and references
_DENSE_VERDICTS = TensorVerdicts()
# The duplicate check's "too few copies", by reference tensor; never the distinct rows it finds,
# which a write from outside torch would make wrong rather than slow
_FEW_COPIES = TensorVerdicts()


def _distinct_rows(ref: torch.Tensor, hand_on: bool = False) -> UniqueRows | None:
    """``UniqueRows.find(ref)``, skipped where the same unchanged tensor was found to hold too few copies.

    ``hand_on``: distinct rows found here are kept for the next call in this
    thread (the eager search that follows the graphs module's check,
    :func:`fused_by_the_data`), which takes them where it asks about the same
    unchanged tensor instead of finding them again, and drops them otherwise.
    """
    handed, _handed.value = getattr(_handed, "value", None), None
    if _FEW_COPIES.get(ref, DEDUP_MAX_FRACTION):
        return None
    if handed is not None and handed[0]() is ref and handed[1] == tensor_state(ref):
        return handed[2]
    found = UniqueRows.find(ref)
    if found is None:
        _FEW_COPIES.put(ref, DEDUP_MAX_FRACTION, True)
    elif hand_on and not ref.is_inference():
        _handed.value = (weakref.ref(ref), tensor_state(ref), found)
    return found


# Distinct rows found by fused_by_the_data, for the eager search right after it in the same thread
_handed = threading.local()


# Queries sampled to choose between the fused kernel and a dense search (see _runs_dense), and
# the share of them left open by the fused kernel's first pass above which the search runs dense.
# On the real-data sweep the sets whose sample the first pass certified all but 1-2 % of (no
# duplicates) ran faster fused; the others dense (BENCHMARKS.md, "Design measurements quoted in
# the code").
DENSE_PROBE_ROWS = 1024
DENSE_PROBE_MAX_OPEN = 0.02
# Searches with at least this many references per query go to the fused kernel unprobed (its
# bounded retries settle the rows its first pass leaves open): there the probe's own pass over the
# references cost about what the search did (100 and 1,000 queries x 300M references took over
# half again as long probed), while at 4,000 references per query the probe still pays (clusters
# far from the origin ran more than twice as long fused as probed and dense) (BENCHMARKS.md,
# "Design measurements quoted in the code")
DENSE_PROBE_SKIP_REFS_PER_QUERY = 1 << 16
# Few queries are sampled at most a quarter of (but at least this many): a probe of every query
# ran the whole first pass once more before the search (1,000 queries x 50M references)
DENSE_PROBE_MIN_ROWS = 64


def probe_rows(n_query: int) -> int:
    """Queries the dense-or-fused probe samples from ``n_query`` (see ``DENSE_PROBE_ROWS``)."""
    return min(n_query, DENSE_PROBE_ROWS, max(DENSE_PROBE_MIN_ROWS, n_query // 4))


def probe_sample_rows(n_query: int, device) -> torch.Tensor:
    """The rows the probe samples (see :func:`evenly_spread_rows`)."""
    return evenly_spread_rows(n_query, probe_rows(n_query), device)


def probe_open_rows(sp: SearchPlan, refs: "_References", ref: torch.Tensor, sample: torch.Tensor, width: int, metric: Metric,
                    check64: bool, budget_bytes: int) -> torch.Tensor:
    """The probe's count of sample rows left open (a 0-d tensor, no host wait): the fused first pass's
    certificate and, with ``check64``, the float64 order's (see :func:`_runs_dense`)."""
    scores, index, certified, _, _, outside = first_pass(sp, refs, sample, 0, False)
    open_rows = ~certified
    if check64:
        keys = ranked_by_float64(sample, ref, index, metric, budget_bytes, kernel=True)[0]
        last = scores.amax(1) if outside is None else outside
        open_rows |= ~certified_rows(keys, last, width - 1, metric, ref.shape[1])
    return open_rows.sum()


# Below this many references the dense pass measured faster than the fused kernel on every
# real set (magic.gamma 19,020 rows: even), continuous or not; those were all-kNN searches of up to
# DENSE_UNPROBED_MAX_PAIRS pairs. Many queries against few references are probed whatever the
# references: 1,048,576 uniform queries x 32,768 references at d = 8 ran 3.6 times as long dense
# (on the exact-selection kernel) as fused, and the probe's sample is a thousandth of the queries
# (BENCHMARKS.md, "Design measurements quoted in the code")
DENSE_PROBE_MIN_REFERENCES = 1 << 16
DENSE_UNPROBED_MAX_PAIRS = 1 << 32


def _search_ordered(ref, query, k, metric, exclude_self, order64, *, device, budget_bytes, verbose, stats, backend, precision,
                    float64_order=True, dense=None, deduplicated=False):
    """Top k on ``device`` as ``(keys, index)``: keys are float64 scores when ``order64`` (see :mod:`._float64_order`).

    ``dense``: run dense (:mod:`._dense`); None decides by :func:`_runs_dense`
    (``deduplicated``: ``ref`` are the distinct rows of duplicated data).
    """
    engine = dict(device=device, budget_bytes=budget_bytes, verbose=verbose, stats=stats, backend=backend, precision=precision)
    if dense is None:
        dense = _runs_dense(ref, query, k, metric, exclude_self, order64, float64_order, engine, deduplicated)
    if dense:
        query = query if same_device(query.device, device) else query.to(device)
        if (exact_select_applies(ref, query, k, metric, device, backend, precision)
                and exact_select_preferred(query.shape[0], ref.shape[0], ref.shape[1])):
            return exact_select_search(ref, query, k, metric, exclude_self=exclude_self, budget_bytes=budget_bytes, stats=stats)
        # float32 scores that are not exact (order64) rule out exactly scored integer data
        return dense_search(ref, query, k, metric,
                            exclude_self=exclude_self, budget_bytes=budget_bytes, stats=stats, maybe_integral=not order64)
    width = float64_list_width(k, ref.shape[0], exclude_self) if order64 else k
    scores = torch.empty((query.shape[0], width), dtype=ref.dtype, device=device)
    index = torch.empty((query.shape[0], width), dtype=torch.int64, device=device)
    # the (k+1)-th entry is wanted only as the float64 order's bound: a spare (see plan_search)
    outside = torch.empty(query.shape[0], dtype=torch.float64, device=device) if width > k else None
    _engine_search(ref, query, width, metric, exclude_self, scores, index, **engine, out_outside=outside)
    if not order64:
        return scores, index
    keys, index, _ = order_by_float64(ref, query, scores, index, k, metric, exclude_self, budget_bytes, device, stats,
                                      kernel=backend in ("auto", "triton"), outside=outside)
    return keys, index


# Searches of fewer (query, reference) pairs skip the duplicate check: the sort costs more
# than the ties it could save. Above DEDUP_MAX_K the (k x k) expansion outgrows the search.
DEDUP_MIN_PAIRS = 1 << 26
DEDUP_MAX_K = 256


def _dedup_applies(ref, query, k, metric: Metric, device: torch.device, exclude_self: bool) -> bool:
    """Whether to look for duplicate reference rows first (see :mod:`._duplicates`)."""
    return (metric.name in DEDUP_METRICS and k <= DEDUP_MAX_K and same_device(ref.device, device)
            and query.shape[0] * ref.shape[0] >= DEDUP_MIN_PAIRS)


def _search_unique(unique: UniqueRows, query, k, metric, *, exclude_self, order64, device, budget_bytes, verbose, stats, backend,
                   precision, float64_order=True):
    """Top k as ``(keys, index)`` through the distinct rows (see :mod:`._duplicates`)."""
    m = unique.rows.shape[0]
    width = k + 1 if exclude_self else k  # a query's own row is dropped after the expansion
    queries = unique.rows if exclude_self else query
    inner = dict(device=device, budget_bytes=budget_bytes, backend=backend, precision=precision)
    k_u = min(m, width)
    inner_stats = {} if stats is not None else None
    found_s, found_d = _search_ordered(unique.rows, queries, k_u, metric, False, order64, verbose=verbose, stats=inner_stats,
                                       float64_order=float64_order, deduplicated=True, **inner)
    scores, index = expand_neighbours(unique, found_s, found_d, width, budget_bytes)
    if exclude_self:
        originals = unique.inverse
        scores, index = drop_self(scores[originals], index[originals], torch.arange(unique.n, device=originals.device), k)
    if stats is not None:
        stats.update(inner_stats)
        stats.update(distinct_rows=m)
    return scores, index


def finish_scores(scores: torch.Tensor, metric: Metric, as_distance: bool, scale: float | None) -> torch.Tensor:
    """Scores as returned: distances on request, and unscaled when the data was scaled by ``scale``."""
    if as_distance:
        # distances are formed before unscaling: a tiny distance survives where its square would not
        scores = metric.to_distance(scores)
    if scale is not None:
        # in float64: the power of the scale can leave float32's range where the result does not
        # (dividing by a power of two is exact; the one rounding is to the data's dtype)
        power = metric.distance_power if as_distance else metric.scale_power
        scores = (scores.double() / scale**power).to(scores.dtype)
    return scores


def first_pass(sp: SearchPlan, refs: "_References", Q: torch.Tensor, q0: int, exclude_self: bool):
    """Candidates, exact re-rank and certificate of one query block, with no host wait.

    Returns ``(scores, index, certified, Qp, ids, outside)``: the best k by exact
    score, which rows are certified final, the prepared queries and their global
    ids (for the retries of the others), and with ``sp.spare`` a bound per row on
    every reference outside its list (see :func:`_rerank`; else None). Not for
    exact-tile searches.
    """
    metric, device = sp.metric, Q.device
    Qp = metric.prepare(Q, refs.centre, "query")
    ids = torch.arange(q0, q0 + Q.shape[0], device=device)
    if sp.fused:
        cand_scores, cand_index, cth = _candidates_fused(Q, Qp, refs, ids, sp.c, exclude_self, sp.precision)
    else:
        cand_scores, cand_index = _candidates(Qp, refs, ids, sp.c, exclude_self, sp.precision)
        cth = cand_scores.amax(1)
    scores, index, certified, outside = _rerank(Q, Qp, cth, cand_index, refs, metric, sp.k, sp.c, sp.n_ref, ids, exclude_self,
                                                sp.plan, direct=sp.direct, precision=sp.precision,
                                                on_kernel=sp.fused or sp.kernel_rerank, spare=sp.spare)
    return scores, index, certified, Qp, ids, outside


class _Retries:
    """Settles the rows a block's certificate left open: wider candidate lists, then an exact scan."""

    def __init__(self, sp: SearchPlan, refs: "_References", ref: torch.Tensor, exclude_self: bool):
        self.sp, self.refs, self.ref, self.exclude_self = sp, refs, ref, exclude_self
        self.retry_refs = None  # retries on the torch selection run on its own (narrower) reference tiles
        self.n_fallback = self.n_retried = self.n_deferred = 0

    def _retry_refs(self):
        if self.retry_refs is None:
            sp = self.sp
            self.retry_refs = _retry_references(self.refs, self.ref, sp.retry_plan, sp.plan, sp.metric, sp.device)
        return self.retry_refs

    def settle(self, Q, Qp, ids, scores, index, failed, c_tried, outside=None, float64_next=False) -> None:
        """Make ``scores``/``index`` final in place for the rows ``failed`` (the others are), and
        ``outside`` (a spare entry's bound, see :func:`_rerank`) where given.

        ``float64_next``: the float64 order follows (see :mod:`._float64_order`), and
        up to ``SPARE_DEFERRED_MAX_ROWS`` failed rows are left to its exact scan
        instead (their ``outside`` set to -inf, so its certificate leaves them open).
        """
        sp, refs, exclude_self = self.sp, self.refs, self.exclude_self
        if float64_next and outside is not None and 0 < failed.numel() <= SPARE_DEFERRED_MAX_ROWS:
            outside[failed] = float("-inf")
            self.n_deferred += failed.numel()
            return
        metric, k, c, n_ref, plan, d = sp.metric, sp.k, sp.c, sp.n_ref, sp.plan, Q.shape[1]
        # rows the certificate could not settle (close calls, exact ties or duplicates
        # around the k-th place): ONE retry with a wider list (it settles near-ties of
        # continuous data), then an exact scan. Tie-heavy rows (equidistant integer points,
        # clusters of equal distances) fail any width short of their whole tie group, and
        # widening rounds each cost a pass over every reference: the bound is the first pass,
        # one retry pass and one exact scan of the rows still open.
        rounds = 0
        while failed.numel() and rounds < MAX_RETRY_ROUNDS:
            rounds += 1
            on_kernel = sp.fused and refs.rows_per_tile >= n_ref
            growth = FUSED_RETRY_GROWTH if on_kernel and c_tried == c else 8
            c_retry = min(n_ref, growth * c_tried if c_tried else c, _MAX_RETRY_CANDIDATES)
            if c_retry <= c_tried:  # no wider list left to try
                break
            c_tried = c_retry
            self.n_retried += failed.numel()
            if on_kernel and c_retry <= _FUSED_RETRY_MAX_CANDIDATES:
                # on the kernel, all rows in one launch: the torch selection's (rows x
                # references) tiles and top-k took a fifth of a 1M-query search
                Qf, Qpf = Q[failed], _take_rows(Qp, failed)
                _, ci, cth_f = _candidates_fused(Qf, Qpf, refs, ids[failed], c_retry, exclude_self, sp.precision)
                f_scores, f_index, ok, f_outside = _rerank(Qf, Qpf, cth_f, ci, refs, metric, k, c_retry, n_ref, ids[failed],
                                                           exclude_self, plan, direct=sp.direct, precision=sp.precision,
                                                           on_kernel=True, spare=sp.spare)
                settled = failed[ok]
                scores[settled], index[settled] = f_scores[ok], f_index[ok]
                if outside is not None:
                    outside[settled] = f_outside[ok]
                failed = failed[~ok]
                continue
            retry_refs = self._retry_refs()
            # more candidates per row: fewer rows at a time, so the tile stays in budget
            step = max(1, plan.budget_bytes // tile_bytes(1, sp.retry_plan.ref_rows, d, c_retry, Q.element_size()))
            still_failed = []
            for s0 in range(0, failed.numel(), step):
                rows = failed[s0 : s0 + step]
                Qf, Qpf = Q[rows], _take_rows(Qp, rows)
                cs, ci = _candidates(Qpf, retry_refs, ids[rows], c_retry, exclude_self, sp.precision)
                f_scores, f_index, ok, f_outside = _rerank(Qf, Qpf, cs.amax(1), ci, retry_refs, metric, k, c_retry, n_ref, ids[rows],
                                                           exclude_self, plan, precision=sp.precision,
                                                           on_kernel=sp.kernel_rerank, spare=sp.spare)
                settled = rows[ok]
                scores[settled], index[settled] = f_scores[ok], f_index[ok]
                if outside is not None:
                    outside[settled] = f_outside[ok]
                still_failed.append(rows[~ok])
            failed = torch.cat(still_failed)
        if failed.numel():
            self.n_fallback += failed.numel()
            f_scores, f_index = _exact_scan(Q[failed], ids[failed], self._retry_refs(), metric, k, exclude_self, plan.budget_bytes)
            scores[failed] = f_scores
            index[failed] = f_index
            if outside is not None:  # exact lists: every reference outside scores at least the last entry
                outside[failed] = f_scores[:, k - 1].double()

    def report(self, stats: dict) -> None:
        sp = self.sp
        stats.update(rows_exact_scan=self.n_fallback, rows_retried=self.n_retried, rows_deferred=self.n_deferred,
                     query_rows=sp.plan.query_rows,
                     ref_rows=sp.plan.ref_rows, candidates=sp.c, references_resident=self.refs.resident, backend=sp.backend,
                     precision=sp.precision, selection="exact_tiles" if sp.tile_select else ("fused" if sp.fused else "tiles"))


_MAX_RETRY_CANDIDATES = 16384
# Rows of a spare search (the float64 order's, see plan_search) whose certificate fails are left,
# up to this many, to the float64 order's exact scan, which runs anyway for its own open rows
# (one launch): a retry round is a host wait, a fused launch and its re-rank for them (1M x
# 32,768 x 8 leaves two rows open; BENCHMARKS.md, "Design measurements quoted in the code")
SPARE_DEFERRED_MAX_ROWS = 32
# widening rounds before the exact scan (see _Retries.settle)
MAX_RETRY_ROUNDS = 1
# How much the first retry on the fused kernel widens the candidate list (later ones: 8x). A
# retry's cost grows with the list: 2x measured faster than 8x on the retries of 1M x 32,768 x 8
# (1,718 rows) and all-kNN 262,144 x 8 (820 rows) (BENCHMARKS.md, "Design measurements quoted
# in the code").
FUSED_RETRY_GROWTH = 2
# Wider retries run on the torch selection: the kernel inserts candidates one at a time, and a
# list of 256 on tie-heavy rows took minutes under the CPU interpreter (600 integer points);
# on a GPU a 64-wide retry of those 1,718 rows already took about a tenth of the whole search
_FUSED_RETRY_MAX_CANDIDATES = 64


def _retry_references(refs: _References, ref: torch.Tensor, retry_plan: TilePlan, plan: TilePlan, metric: Metric, device):
    """References for the torch selection's retries: its own (narrower) tiles where they differ."""
    return refs if retry_plan.ref_rows == plan.ref_rows else _References(ref, metric, retry_plan.ref_rows, device)


# references sampled to set each query's threshold in _within_threshold_topk
_THRESHOLD_SAMPLE = 4096


def _within_threshold_topk(QT: torch.Tensor, refs: _References, k: int, q0: int, exclude_self: bool):
    """:func:`_exact_tile_topk` with no score tile in memory, for resident references.

    Each query's threshold is a score that somewhat more than k + 1 references
    beat, estimated from a fixed random sample of references (its ``j``-th
    smallest sample score, ``j`` four standard deviations above the expected
    count of the k + 1 best in the sample); the kernel then keeps every
    reference at or under the threshold (slots for four deviations more) and
    only those are sorted. Everything left out scores above every kept
    score, so the kept references' order by (score, index) is final, ties
    included; a query that kept fewer than k or overflowed its slots is
    answered by the caller. The sample only sets the speed: what is kept is
    decided by exact scores.
    """
    by_feature = refs._feature_major()
    n_ref = by_feature.shape[1]
    metric = refs.metric.name
    S = exact_tile_scores(QT, refs.threshold_sample(_THRESHOLD_SAMPLE), metric)
    n_sample = S.shape[1]
    expected = (k + 1) / n_ref * n_sample
    j = min(n_sample, math.ceil(expected + 4.0 * math.sqrt(expected)) + 1)
    threshold = torch.topk(S, j, dim=1, largest=False, sorted=False).values.amax(1)
    del S
    # about j n_ref / n_sample references are kept, with a spread of about sqrt(j) n_ref / n_sample
    cap = min(n_ref, math.ceil((j + 4.0 * math.sqrt(j) + 1) * n_ref / n_sample))
    scores, index, count = scores_within(QT, by_feature, threshold, cap, metric, exclude_self=exclude_self, self_offset=q0)
    width = max(int(count.clamp(max=cap).amax()), k)  # the one host wait: sort only the used slots
    # slots are filled in column order, so a stable sort by score is the order by (score, index)
    values, order = torch.sort(scores[:, :width], dim=1, stable=True)
    values = values[:, :k]
    index = index.gather(1, order[:, :k]).to(torch.int64)
    # everything left out scores above the threshold, so above every kept score: no tie to settle
    failed = ((count < k) | (count > cap)).nonzero().squeeze(1)
    return values.contiguous(), index, failed


def _exact_tile_topk(Q: torch.Tensor, refs: _References, k: int, q0: int, exclude_self: bool):
    """Top-k from exact score tiles: ``(scores, index, tied_rows)``.

    Tile scores are the exact per-pair scores, so each tile's k + 1 smallest
    (``torch.topk``, sorted) are final values; only the order among equal
    scores is open. A row whose k + 1 best scores are all distinct has one
    answer, ties at the k-th place included (the (k+1)-th is strictly worse);
    the other rows (``tied_rows``) must be settled under the tie rule by the
    caller. Across tiles the per-tile lists are merged the same way: a
    reference a tile left out is at least that tile's (k+1)-th score, which
    either leaves it out of the final k + 1 or shows up as a tie.
    """
    QT = Q.T.contiguous()
    if refs.resident and 2 * (k + 1) <= refs.data.shape[0] // 2:
        return _within_threshold_topk(QT, refs, k, q0, exclude_self)
    values = index = None
    for r0, RT in refs.feature_major_tiles():
        S = exact_tile_scores(QT, RT, refs.metric.name, exclude_self=exclude_self, self_offset=q0 - r0)
        v, i = torch.topk(S, min(k + 1, S.shape[1]), dim=1, largest=False, sorted=True)
        del S
        i += r0
        if values is not None:
            v, pos = torch.topk(torch.cat([values, v], dim=1), k + 1, dim=1, largest=False, sorted=True)
            i = torch.cat([index, i], dim=1).gather(1, pos)
        values, index = v, i
    tied = ((values[:, 1:] == values[:, :-1]).any(1) | torch.isnan(values).any(1)).nonzero().squeeze(1)
    return values[:, :k].contiguous(), index[:, :k].contiguous(), tied


def _take_rows(prepared: dict, rows: torch.Tensor) -> dict:
    return {name: value[rows] for name, value in prepared.items()}


def _candidates(Qp: dict, refs: _References, query_ids: torch.Tensor, c: int, exclude_self: bool, precision: str = "exact"):
    q = Qp["rows"].shape[0]
    values = index = None
    for r0, Rp in refs.prepared_tiles():
        S = refs.metric.tile_scores(Qp, Rp, precision)
        if exclude_self:
            _mask_self(S, query_ids, r0)
        v, pos = _tile_candidates(S, c)
        pos = pos + r0
        values, index = (v, pos) if values is None else _keep_best(values, index, v, pos, c)
    if values.shape[1] < c:  # fewer references than candidates in the first tile: pad
        pad = c - values.shape[1]
        values = torch.cat([values, values.new_full((q, pad), float("inf"))], dim=1)
        index = torch.cat([index, index.new_full((q, pad), PAD_INDEX)], dim=1)
    return values, index


def _candidates_fused(Q, Qp, refs: _References, query_ids: torch.Tensor, c: int, exclude_self: bool, precision: str = "exact"):
    """The Triton twin of :func:`_candidates`, one launch per reference tile: ``(scores, index, cth)``.

    ``cth`` is, per query, a score that every reference left out reaches (the
    kernel's floor: the least score of those it left out, see ``fused_candidates``),
    which is what the certificate needs.

    Manhattan, and L2 at up to ``DIRECT_L2_MAX_FEATURES`` features, are scored
    from raw rows by direct differences; L2, cosine and inner product otherwise
    from the prepared rows (one dot product per pair, on data centred by the
    engine, as the torch path's tiles). Resident L2/L1 references are visited in
    space-filling-curve order from each query block's neighbourhood on
    (:class:`_CurveOrder`).
    """
    direct = _scores_directly(refs.metric, Q.shape[1])
    # L2's prepared rows end in the constant 1 (query) and |y|^2 (reference): the kernel takes
    # |y|^2 as a per-reference bias and decides its form (``fused_candidates``' ref_bias)
    split_bias = not direct and refs.metric.name in ("euclidean", "sqeuclidean")
    queries = Q if direct else (Qp["rows"][:, :-1] if split_bias else Qp["rows"])
    # a generator: streamed references must not all be on the device at once
    tiles = refs.raw_tiles() if direct else ((r0, R["rows"]) for r0, R in refs.prepared_tiles())
    kernel_precision = _KERNEL_PRECISION[precision]
    # split lists side by side rather than merged (~30 launches) while re-ranking them stays cheap
    merge_splits = c > _UNMERGED_MAX_CANDIDATES
    one_tile = refs.resident and refs.rows_per_tile >= refs.data.shape[0]
    if one_tile and _curve_applies(refs.metric, Q.shape[1], Q.shape[0], refs.data.shape[0]):
        order = refs.curve_order()
        R = next(tiles)[1][order.perm]
        bias = None
        if split_bias:
            R, bias = R[:, :-1], R[:, -1].contiguous()
        q_perm, anchors = order.place(Q)
        self_cols = order.inverse[query_ids[q_perm]] if exclude_self else None
        v, i, fl = fused_candidates(queries[q_perm], R, c, metric_name=refs.metric.name, prepared=not direct,
                                    precision=kernel_precision, ref_bias=bias, self_cols=self_cols, anchors=anchors,
                                    merge_splits=merge_splits, floor=True)
        values, index, floor = torch.empty_like(v), torch.empty_like(i), torch.empty_like(fl)
        values[q_perm] = v
        index[q_perm] = torch.where(i >= 0, order.perm[i.clamp(min=0)], i)
        floor[q_perm] = fl
        return values, index, _left_out_bound(values, floor)
    if one_tile:
        R = next(tiles)[1]
        bias = None
        if split_bias:
            R, bias = R[:, :-1], R[:, -1].contiguous()
        values, index, floor = fused_candidates(queries, R, c, metric_name=refs.metric.name, prepared=not direct,
                                                self_cols=query_ids if exclude_self else None, precision=kernel_precision,
                                                ref_bias=bias, merge_splits=merge_splits, floor=True)
        return values, index, _left_out_bound(values, floor)
    values = index = floor = None
    for r0, R in tiles:
        bias = None
        if split_bias:
            R, bias = R[:, :-1], R[:, -1]
        v, i, fl = fused_candidates(queries, R, c, metric_name=refs.metric.name, prepared=not direct, ref_offset=r0,
                                    self_cols=query_ids - r0 if exclude_self else None, precision=kernel_precision, ref_bias=bias,
                                    floor=True)
        if values is None:
            values, index, floor = v, i, fl
        else:
            values, index = _keep_best(values, index, v, i, c)
            # what the merge dropped scores at least the largest entry it kept
            floor = torch.minimum(torch.minimum(floor, fl), values.amax(1))
    return values, index, _left_out_bound(values, floor)


def _left_out_bound(values: torch.Tensor, floor: torch.Tensor) -> torch.Tensor:
    """The kernel's floor as the certificate's ``cth``, or where it is infinite (nothing scored finite was left
    out: every reference kept, or left out only by an overflow) the largest kept score, which bounds those too
    and keeps an overflowed score from certifying a row (see :func:`_rerank`)."""
    return torch.where(torch.isfinite(floor), floor, values.amax(1))


# Candidates per query up to which the fused kernel's split lists go to the re-rank unmerged.
# Splits exist only for small query sets (about four programs per SM), so the extra exact
# scores number about 4 SMs x block_m x c in all: ~0.27M at c = 8 on a 132-SM GPU, cheaper than
# the merge's launches; at c = 256 they would be ~9M.
_UNMERGED_MAX_CANDIDATES = 32
