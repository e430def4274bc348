"""Small fused searches replayed as CUDA graphs: one launch for the whole first pass.

A search of a few thousand queries is set by launches, not by the GPU: the physics
search (12,000 queries x 32,768 references x 65 features, k = 7) issued ~55 launches
around its kernel, which took about half of the search with the data on the device
and a third from host NumPy to host results (BENCHMARKS.md, "Design measurements
quoted in the code").

The first pass of a one-block fused search (validation reductions, the references'
and queries' preparation, the kernel, the exact re-rank and the certificate;
:func:`~gpumine.neighbors.engine._search.first_pass`) has no host wait, so it can be
captured. A shape seen a second time is captured into a graph with its own input
buffers; later calls copy their operands into those buffers, replay the graph and
wait once for a few numbers: the data's extremes (NaN, infinity and magnitude, as
``kneighbors`` checks them) and the count of uncertified rows. Data that needs
scaling or is not finite goes the usual way (which raises or scales); uncertified
rows are settled eagerly by the engine's retries. The results are those of the
eager path bit for bit: same kernels, same launch shapes, same order.

Host operands reach the input buffers through pinned buffers of their own
(``GRAPH_STAGING``), so a captured search of host data holds its operands' size in
pinned host memory as well (at most ``GRAPH_MAX_INPUT_BYTES`` per shape).

``GRAPH_SEARCHES = False`` turns this off (same-run A/B timings);
:func:`clear_search_graphs` frees the captured graphs and their buffers.
"""

from __future__ import annotations

import collections
import copy
import threading

import numpy as np
import torch

from ...config import working_memory_bytes
from ...core.distance import Metric
from ...core.tiles import same_device
from ._search import (_References, _Retries, _range_plan, finish_scores, first_pass, fused_by_the_data, plan_search,
                      probe_open_rows)
from ._float64_order import FLOAT64_ORDER_METRICS, exact_for_range, float64_list_width, order_by_float64
from . import _dense
from ._dense import (DenseReferences, candidates_for, dense_by_size, dense_eligible, integer_centre_kind, integer_centre_on_device,
                     tile_dtype_for)
from ._exact_select import exact_select_first, exact_select_supports
from ._small_search import clear_small_graphs
from ._product_select import (FLOAT32_PROBE_MAX_OPEN, float32_products, gather_layout, probes_float32, product_block_rows,
                              product_select_first, product_select_supports, select_blocks)
from ._summary_kernel import data_summary

__all__ = ["search_with_graph", "clear_search_graphs", "GRAPH_SEARCHES"]

GRAPH_SEARCHES = True
# The dense-or-fused probe of large searches (._search._runs_dense) replayed as a graph too; False:
# launch by launch (same-run A/B timings). Same verdicts either way.
GRAPH_PROBES = True
# Searches whose operands take more than this stay eager: their launches are a small share
# of their time, and a graph keeps its input buffers and its intermediates' memory pool.
GRAPH_MAX_INPUT_BYTES = 1 << 27
GRAPH_CACHE_SIZE = 4  # shapes kept, least recently used dropped first
# A product selection over the working memory is captured as up to this many query blocks in one
# graph (its lists are final per row; a block's float32 scores count 4 bytes, not the float64
# tile's 8). One: the embedding shape (10,000 x 100,000 x 128, one block) replays, where the host's
# work between its launches took about a tenth of the search's time eagerly; searches of several
# blocks (campaign's all-kNN) stay eager: their capture took seconds, against about a tenth of a
# search saved per replay (BENCHMARKS.md, "Design measurements quoted in the code")
GRAPH_PRODUCT_MAX_BLOCKS = 1
# Host operands reach a graph's input buffers through pinned buffers of their own, filled by
# torch's multi-threaded copy, then transferred asynchronously: the physics operands (11.6 MB)
# took about a third less time that way than as pageable copies (the driver stages those with
# one thread; BENCHMARKS.md, "Design measurements quoted in the code").
GRAPH_STAGING = True

_lock = threading.Lock()
_graphs: collections.OrderedDict = collections.OrderedDict()
_seen: set = set()  # shapes met once: their eager run compiled and warmed everything up
_refused: set = set()  # shapes whose capture failed: never tried again
_ineligible: set = set()  # searches planned as something other than one fused launch
_REMEMBERED_MAX = 4096  # keys kept in each set above, so varying shapes cannot grow them forever


def _input_facts(inputs):
    """Per input of a captured search, as tensors: ``[min, max]``, ``[whole]`` and ``[smallest nonzero |x|]`` (one
    pass each, see :func:`._summary_kernel.data_summary`), NaN and infinity then set to zero in place."""
    facts = [data_summary(t, scrub=True) for t in inputs]
    return [f[:2] for f in facts], [f[3:4] for f in facts], [f[2:3] for f in facts]


class _CapturedSearch:
    """A captured first pass with its input buffers and outputs (valid after each replay).

    With ``to_host`` the graph also copies the flags and the results into pinned
    host buffers, so one stream wait brings everything back.
    """

    def __init__(self, sp, ref_shape, query_shape, k: int, exclude_self: bool, to_host: bool):
        device = sp.device
        self.lock = threading.Lock()
        self.sp, self.exclude_self, self.to_host = sp, exclude_self, to_host
        self.ref_in = torch.empty(ref_shape, dtype=torch.float32, device=device)
        self.query_in = None if exclude_self else torch.empty(query_shape, dtype=torch.float32, device=device)
        self.staging = {}  # pinned copies of host operands, made on first use
        # extremes, integrality and smallest nonzero magnitude of each input, open rows
        n_flags = 4 * (1 if exclude_self else 2) + 1
        self.host_flags = torch.empty(n_flags, dtype=torch.float64, pin_memory=True)
        n_query = query_shape[0]
        self.host_scores = torch.empty((n_query, k), dtype=torch.float32, pin_memory=True) if to_host else None
        self.host_index = torch.empty((n_query, k), dtype=torch.int64, pin_memory=True) if to_host else None
        self.graph = torch.cuda.CUDAGraph()

    def load(self, ref: torch.Tensor, query: torch.Tensor) -> None:
        # queries first: their transfer runs while the larger references are staged
        if self.query_in is not None:
            self._put(self.query_in, query)
        self._put(self.ref_in, ref)

    def _put(self, buffer: torch.Tensor, data: torch.Tensor) -> None:
        """Copy ``data`` into the device ``buffer``; host data through a pinned buffer (see ``GRAPH_STAGING``)."""
        if data.device.type != "cpu" or not GRAPH_STAGING:
            buffer.copy_(data)
            return
        pinned = self.staging.get(id(buffer))
        if pinned is None:
            pinned = self.staging[id(buffer)] = torch.empty(buffer.shape, dtype=buffer.dtype, pin_memory=True)
        # the previous transfer out of ``pinned`` has finished: every run waits for its stream
        pinned.copy_(data)
        buffer.copy_(pinned, non_blocking=True)

    def _build(self):
        sp = self.sp
        query = self.ref_in if self.query_in is None else self.query_in
        inputs = (self.ref_in,) if self.query_in is None else (self.ref_in, query)
        # extremes, smallest nonzero magnitude and whole numbers (float32 scores exact? see _float64_order),
        # checked after the replay; NaN and infinity scrubbed meanwhile, so nothing turns them into an index
        extremes, integral, tiniest = _input_facts(inputs)
        refs = _References(self.ref_in, sp.metric, sp.plan.ref_rows, sp.device, resident=True)
        scores, index, certified, Qp, ids, outside = first_pass(sp, refs, query, 0, self.exclude_self)
        open_rows = (~certified).sum()
        flags = [torch.cat(extremes).double(), torch.cat(integral).double(), torch.cat(tiniest).double(),
                 open_rows.double()[None]]
        self.host_flags.copy_(torch.cat(flags), non_blocking=True)
        if self.to_host:
            self.host_scores.copy_(scores, non_blocking=True)
            self.host_index.copy_(index, non_blocking=True)
        self.refs, self.query, self.scores, self.index, self.certified, self.Qp, self.ids = refs, query, scores, index, certified, Qp, ids
        self.outside = outside  # with a spare entry (the float64 order's), its bound

    def capture(self) -> None:
        device = self.sp.device
        # warm-up on a side stream first, as torch.cuda.graph asks (allocator, library handles)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            self._build()
        torch.cuda.current_stream(device).wait_stream(side)
        with torch.cuda.graph(self.graph):
            self._build()

    def run(self, ref: torch.Tensor, query: torch.Tensor, result_device: torch.device, on_device: bool = False):
        """Replay on new operands: ``(scores, index)`` on ``result_device``, or None for the eager path.

        ``on_device``: the graph's own result tensors instead (valid until the next replay).
        """
        self.load(ref, query)
        self.graph.replay()
        torch.cuda.current_stream(self.sp.device).synchronize()  # the one host wait
        flags = self.host_flags.numpy()
        n_inputs = (len(flags) - 1) // 4
        extremes, open_rows = flags[: 2 * n_inputs], int(flags[-1])
        self.integral = bool((flags[2 * n_inputs : 3 * n_inputs] == 1.0).all())
        tiniest = float(flags[3 * n_inputs : 4 * n_inputs].min())
        self.span = (float(extremes[0::2].min()), float(extremes[1::2].max()))
        if not np.isfinite(extremes).all():
            return None
        # data to scale or to search in float64 goes the eager way (see gpumine.neighbors.engine._magnitude)
        if _range_plan(self.ref_in, self.query, float(np.abs(extremes).max()), tiniest) != (torch.float32, None):
            return None
        # the float64 order follows (_ordered) unless the replay's float32 scores are exact
        self.float64_next = not (self.integral and exact_for_range(self.sp.metric, self.ref_in.shape[1], *self.span))
        self.deferred = 0
        if open_rows:
            # a copy of the references: what the retries cache on it must not outlive this replay
            retries = _Retries(self.sp, copy.copy(self.refs), self.ref_in, self.exclude_self)
            failed = (~self.certified).nonzero().squeeze(1)
            retries.settle(self.query, self.Qp, self.ids, self.scores, self.index, failed, self.sp.c, self.outside,
                           float64_next=self.float64_next)
            self.deferred = retries.n_deferred  # rows left to the float64 order's scan
        if on_device:
            return self.scores, self.index
        if self.to_host and not open_rows:
            # the pinned buffers are the graph's: the scores leave them through finish_scores
            # (a new tensor for distances), the indices by a copy
            return self.host_scores, torch.from_numpy(self.host_index.numpy().copy())
        return self.scores.to(result_device, copy=True), self.index.to(result_device, copy=True)


class _CapturedDense(_CapturedSearch):
    """A captured dense search (:mod:`._dense`): one block's product, selection, re-score and certificate.

    ``exact``: captured for integer data scored exactly in float32 (an integer
    centre computed on the device); a replay whose data does not qualify goes
    the eager way. Open rows are settled after the replay by the eager radius pass.
    ``block_rows``: a product selection's queries per block (its lists are final
    per row, so its blocks can follow one another in one graph).
    """

    def __init__(self, ref_shape, query_shape, k: int, metric: Metric, exclude_self: bool, to_host: bool, device, exact: bool,
                 product: bool = False, products: dict | None = None, tensor_cores: bool = False,
                 block_rows: int | None = None):
        self.metric, self.k, self.exact, self.device, self.product = metric, k, exact, device, product
        self.block_rows = block_rows or query_shape[0]
        # exact integer products on tensor cores (captured so: a replay's data must qualify for them too)
        self.tensor_cores = tensor_cores
        # the product selection's float32 products (DenseReferences' keywords), chosen by a probe at capture
        self.products = products or {}
        self.unsuited = False
        sp = _DenseCapturePlan(device)
        super().__init__(sp, ref_shape, query_shape, k, exclude_self, to_host)
        self.host_flags = torch.empty(self.host_flags.numel() + 1, dtype=torch.float64, pin_memory=True)

    def _build(self):
        query = self.ref_in if self.query_in is None else self.query_in
        inputs = (self.ref_in,) if self.query_in is None else (self.ref_in, query)
        extremes, integral, tiniest = _input_facts(inputs)  # as _CapturedSearch's (NaN and infinity scrubbed)
        if self.exact:
            # each feature's extremes, of the scrubbed data (a replay with NaN or infinity goes eager)
            ends = [torch.aminmax(t, dim=0) for t in inputs]
            centre, qualifies, tensor_cores = integer_centre_on_device(self.ref_in, query, torch.cat(integral).bool().all(),
                                                                       ends)
            if self.tensor_cores:
                qualifies = qualifies & tensor_cores
        else:
            centre, qualifies = None, torch.ones((), dtype=torch.bool, device=self.device)
        kind = dict(tile_dtype=tile_dtype_for(self.device))
        if not self.exact:
            kind.update(self.products)
        refs = DenseReferences(self.ref_in, self.k, self.metric, exclude_self=self.exclude_self, centre=centre,
                               tensor_cores=self.tensor_cores, **kind)
        if self.product:  # the product-selection kernel's lists are final; open rows only count (see run)
            RT, QT = gather_layout(self.ref_in, query)
            counted = {}
            # blocks one after another: the graph's pool holds one block's scores
            keys, index = select_blocks(refs, query, QT, RT, self.block_rows, counted)
            block, open_rows = None, counted["rows_rescanned"].reshape(())
        else:
            block = _dense.first_pass(refs, query, 0)
            open_rows = (~block.certified).sum()
            keys, index = block.keys, block.index
        flags = [torch.cat(extremes).double(), torch.cat(integral).double(), torch.cat(tiniest).double(),
                 qualifies.double()[None], open_rows.double()[None]]
        self.host_flags.copy_(torch.cat(flags), non_blocking=True)
        self.scores = keys[:, : self.k].to(torch.float32)
        self.index = index[:, : self.k]
        if self.to_host:
            self.host_scores.copy_(self.scores, non_blocking=True)
            self.host_index.copy_(self.index, non_blocking=True)
        self.refs, self.block, self.query = refs, block, query

    def run(self, ref, query, result_device, on_device: bool = False, working_memory=None):
        """Replay on new operands: ``(float32 scores, index)`` on ``result_device``, or None for the eager path."""
        self.load(ref, query)
        self.graph.replay()
        torch.cuda.current_stream(self.device).synchronize()  # the one host wait
        flags = self.host_flags.numpy()
        n_inputs = (len(flags) - 2) // 4
        extremes, qualifies, open_rows = flags[: 2 * n_inputs], flags[-2] == 1.0, int(flags[-1])
        tiniest = float(flags[3 * n_inputs : 4 * n_inputs].min())
        if not np.isfinite(extremes).all():
            return None
        if not qualifies:  # float data after an exact integer capture: likely to come again, go eager for good
            self.unsuited = True
            return None
        if _range_plan(self.ref_in, self.query, float(np.abs(extremes).max()), tiniest) != (torch.float32, None):
            return None  # data to scale: this call goes the eager way
        if self.product:
            # the lists are final; float32 products that left many rows to rescan (data unlike the
            # capture's) send later searches of this shape the eager way, which probes its data
            self.unsuited = bool(self.products) and open_rows > FLOAT32_PROBE_MAX_OPEN * self.scores.shape[0]
        elif open_rows:
            _dense.settle(self.refs, self.block, working_memory_bytes(working_memory, self.device))
            return self.block.keys[:, : self.k].to(device=result_device, dtype=torch.float32), \
                self.block.index[:, : self.k].to(result_device, copy=True)
        if self.to_host:
            return self.host_scores, torch.from_numpy(self.host_index.numpy().copy())
        return self.scores.to(result_device, copy=True), self.index.to(result_device, copy=True)


class _CapturedProbe(_CapturedSearch):
    """A captured dense-or-fused probe (:func:`._search._runs_dense`): the fused first pass of a sample of
    queries against the references and, with ``check64``, the float64 order's certificate; one number
    comes back, the sample's open rows. Its verdict only routes the search: results are the same either way."""

    def __init__(self, sp, ref_shape, sample_shape, width: int, metric: Metric, check64: bool, budget_bytes: int):
        self.metric, self.width, self.check64, self.budget_bytes = metric, width, check64, budget_bytes
        super().__init__(sp, ref_shape, sample_shape, width, False, False)
        self.host_flags = torch.empty(1, dtype=torch.float64, pin_memory=True)

    def _build(self):
        refs = _References(self.ref_in, self.metric, self.sp.plan.ref_rows, self.sp.device, resident=True)
        n_open = probe_open_rows(self.sp, refs, self.ref_in, self.query_in, self.width, self.metric, self.check64,
                                 self.budget_bytes)
        self.host_flags.copy_(n_open.double()[None], non_blocking=True)

    def run(self, ref: torch.Tensor, sample: torch.Tensor) -> int:
        self.load(ref, sample)
        self.graph.replay()
        torch.cuda.current_stream(self.sp.device).synchronize()  # the one host wait
        return int(self.host_flags[0])


def probe_with_graph(sp, ref: torch.Tensor, sample: torch.Tensor, width: int, metric: Metric, check64: bool,
                     budget_bytes: int, backend: str, precision: str) -> int | None:
    """The open rows of :func:`._search._runs_dense`'s probe through a captured graph (its ~170 launches
    in one), or None where the eager probe must run: graphs off, operands too large, a shape met for the
    first time (its eager run warms up) or a capture that failed."""
    device = sp.device
    if not (GRAPH_SEARCHES and GRAPH_PROBES and device.type == "cuda" and ref.dtype == torch.float32 and sample.dtype == torch.float32
            and ref.device == sample.device and same_device(ref.device, device)):
        return None
    if 4 * (ref.numel() + sample.numel()) > GRAPH_MAX_INPUT_BYTES or torch.cuda.is_current_stream_capturing():
        return None
    from . import _fused_tuning as knn_tuning

    if knn_tuning.tuning_results() is not None or not (sp.fused and sp.resident and sp.plan.ref_rows >= ref.shape[0]):
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    key = ("probe", index, tuple(ref.shape), tuple(sample.shape), width, metric.name, metric.p, check64, backend, precision,
           budget_bytes, sp.plan.ref_rows, sp.plan.query_rows, sp.c)
    entry, stays_eager = _cached(key)
    if stays_eager:
        return None
    if entry is None:
        with _lock:
            if key not in _seen:
                _remember(_seen, key)
                return None
        entry = _CapturedProbe(sp, ref.shape, sample.shape, width, metric, check64, budget_bytes)
        if not _capture_and_keep(key, entry, ref, sample):
            return None
    with entry.lock:
        return entry.run(ref, sample)


class _DenseCapturePlan:
    """What :class:`_CapturedSearch` reads of a plan, for a dense capture."""

    def __init__(self, device):
        self.device = device


def _product_block_rows(ref, query, k: int, exclude_self: bool, budget: int, item: int) -> int:
    """Queries per block of a captured product selection (the eager search's rule, :func:`product_block_rows`, in
    what the graph's input buffers leave of ``budget``; 0 where not one fits)."""
    inputs = 4 * (ref.numel() + (0 if exclude_self else query.numel()))
    return product_block_rows(ref.shape[0], ref.shape[1], k, item, budget - inputs)


def _dense_graph(ref, query, k, metric, exclude_self, device, backend, precision, working_memory, to_host, result_device,
                 as_distance, product: bool = False):
    """:func:`search_with_graph` for searches that run dense, or on the product selection (``product``): the result,
    or None for the eager path."""
    key = _key(ref, query, k, metric, exclude_self, device, backend, precision, working_memory, to_host) + (
        "product" if product else "dense",)
    entry, stays_eager = _cached(key)
    if stays_eager:
        return None
    if entry is None:
        budget = working_memory_bytes(working_memory, device)
        available = ref.shape[0] - (1 if exclude_self else 0)
        item = 8 if tile_dtype_for(device) == torch.float64 else 4
        # one block: every score row and the candidates' re-score temporaries within the budget
        block_rows = None
        if product:  # up to GRAPH_PRODUCT_MAX_BLOCKS blocks, one after another in the graph
            block_rows = _product_block_rows(ref, query, k, exclude_self, budget, item)
            fits = block_rows > 0 and -(-query.shape[0] // block_rows) <= GRAPH_PRODUCT_MAX_BLOCKS
        else:
            fits = query.shape[0] * (ref.shape[0] * item * 2 + candidates_for(k, available, True) * (ref.shape[1] + 4) * 24) <= budget
        with _lock:
            if not fits:
                _remember(_ineligible, key)
                return None
            if key not in _seen:
                _remember(_seen, key)
                return None
        on_device_ref = ref.to(device)
        on_device_query = on_device_ref if exclude_self else query.to(device)
        centre, tensor_cores = integer_centre_kind(on_device_ref, on_device_query)
        exact = centre is not None
        products = None
        if product and not exact and probes_float32(query.shape[0], ref.shape[0], device):
            products = float32_products(on_device_ref, on_device_query, k, metric, exclude_self)
            if products:  # float32 scores: blocks of twice the rows where the plan counted float64 ones
                block_rows = _product_block_rows(ref, query, k, exclude_self, budget, 4)
        entry = _CapturedDense(ref.shape, query.shape, k, metric, exclude_self, to_host, device, exact, product, products,
                               tensor_cores, block_rows)
        if not _capture_and_keep(key, entry, ref, query):
            return None
    with entry.lock:
        found = entry.run(ref, query, result_device, working_memory=working_memory)
        if entry.unsuited:
            _forget(key)
        if found is None:
            return None
        scores = finish_scores(found[0], metric, as_distance, None)
        if scores is entry.host_scores:  # no new tensor (scores wanted, or a metric's distances are its scores)
            scores = scores.clone()
    return scores, found[1]


# A replay whose float64 order leaves more rows open than this goes to the eager path (which
# searches duplicate-heavy data through its distinct rows), and its shape stays eager after
_GRAPH_MAX_OPEN_ROWS = 64


def _ordered(entry: _CapturedSearch, found, k: int, metric: Metric, exclude_self: bool, budget_bytes: int,
             result_device: torch.device):
    """The top k of a replay's k + 1 lists as the eager path orders them (float64, unless scores are exact).

    None when too many rows need a float64 scan (see ``_GRAPH_MAX_OPEN_ROWS``).
    """
    scores, index = found
    if not entry.float64_next:  # decided by the replay (rows it left open were settled for this)
        return scores[:, :k].to(result_device, copy=True), index[:, :k].to(result_device, copy=True)
    # the rows the replay left to its scan come on top of the float64 order's own open rows
    ordered = order_by_float64(entry.ref_in, entry.query, scores, index, k, metric, exclude_self, budget_bytes,
                               entry.sp.device, max_open=_GRAPH_MAX_OPEN_ROWS + entry.deferred, kernel=True,
                               outside=entry.outside)
    if ordered is None:
        return None
    _, index, scores = ordered
    return scores.to(result_device, copy=True), index.to(result_device, copy=True)


def _key(ref, query, k, metric, exclude_self, device, backend, precision, working_memory, to_host):
    index = device.index if device.index is not None else torch.cuda.current_device()
    return (index, tuple(ref.shape), tuple(query.shape), k, metric.name, metric.p, exclude_self, backend, precision,
            working_memory, to_host)


def _remember(keys: set, key) -> None:
    if len(keys) >= _REMEMBERED_MAX:  # forgetting only costs an eager call or a re-plan
        keys.clear()
    keys.add(key)


def _cached(key):
    """``(captured entry or None, whether the shape stays eager)``; a found entry becomes the most recent."""
    with _lock:
        entry = _graphs.get(key)
        if entry is not None:
            _graphs.move_to_end(key)
            return entry, False
        return None, key in _refused or key in _ineligible


def _capture_and_keep(key, entry, ref, query) -> bool:
    """Capture ``entry`` on these operands (the warm-up runs on real data: a kernel's work depends on
    it) and cache it under ``key``; False (the shape stays eager) when the pass cannot be captured."""
    try:
        with entry.lock:
            entry.load(ref, query)
            entry.capture()
    except RuntimeError:
        with _lock:
            _refused.add(key)
        return False
    with _lock:
        _graphs[key] = entry
        while len(_graphs) > GRAPH_CACHE_SIZE:
            _graphs.popitem(last=False)
    return True


def _forget(key) -> None:
    """Drop a captured shape for good: its searches go the eager way."""
    with _lock:
        _graphs.pop(key, None)
        _refused.add(key)


def clear_search_graphs() -> None:
    """Free every captured search graph (and its buffers), the small searches' too; later searches capture anew."""
    clear_small_graphs()
    with _lock:
        _graphs.clear()
        _seen.clear()
        _refused.clear()
        _ineligible.clear()


def search_with_graph(ref: torch.Tensor, query: torch.Tensor, k: int, metric: Metric, *, exclude_self: bool,
                      device: torch.device, working_memory, backend: str, precision: str, result_device: torch.device,
                      as_distance: bool = True):
    """``knn_search``'s result through a captured graph, or None where the eager path must run.

    ``ref``/``query``: validated float tensors, in host memory or on ``device``
    (``query is ref`` when ``exclude_self``). None when graphs are off, the
    search is not a one-block fused search of small operands, the shape is met
    for the first time (its eager run warms up), or the data is not finite or
    needs scaling (the eager path raises or scales). A search seen before is
    looked up without planning it again (no free-memory queries, each a driver call).
    """
    if not (GRAPH_SEARCHES and device.type == "cuda" and ref.dtype == torch.float32 and query.dtype == torch.float32):
        return None
    n_query, n_ref = query.shape[0], ref.shape[0]
    operand_bytes = 4 * (ref.numel() + (0 if exclude_self else query.numel()))
    if n_query == 0 or operand_bytes > GRAPH_MAX_INPUT_BYTES or torch.cuda.is_current_stream_capturing():
        return None
    from . import _fused_tuning as knn_tuning

    if knn_tuning.tuning_results() is not None:  # tuning times launches one by one
        return None
    if exact_select_supports(metric, torch.float32, ref.shape[1], k, device, backend, precision) and exact_select_first(
            n_query, n_ref, ref.shape[1]):
        return None  # one launch already, whatever the data (see ._exact_select)
    to_host = result_device.type == "cpu"
    if product_select_supports(metric, torch.float32, ref.shape[1], k, device, backend, precision) and product_select_first(
            n_query, n_ref, ref.shape[1]):
        # one product and one selection launch, final whatever the data (see ._product_select)
        return _dense_graph(ref, query, k, metric, exclude_self, device, backend, precision, working_memory, to_host,
                            result_device, as_distance, product=True)
    if dense_eligible(metric, torch.float32, device, backend, precision):
        if dense_by_size(n_query, n_ref, ref.shape[1]):
            return _dense_graph(ref, query, k, metric, exclude_self, device, backend, precision, working_memory, to_host,
                                result_device, as_distance)
        # larger searches choose between the fused kernel and a dense pass by the data (a probe,
        # duplicates; see gpumine.neighbors.engine._search._runs_dense), asked here as the eager path
        # asks: the fused ones replay, the others run eagerly
        if not fused_by_the_data(ref, query, k, metric, exclude_self, device, backend, precision,
                                 working_memory_bytes(working_memory, device)):
            return None
    # float32 lists one longer, for the float64 order (see gpumine.neighbors.engine._float64_order)
    width = float64_list_width(k, n_ref, exclude_self) if metric.name in FLOAT64_ORDER_METRICS else k
    key = _key(ref, query, width, metric, exclude_self, device, backend, precision, working_memory, to_host and width == k)
    entry, stays_eager = _cached(key)
    if stays_eager:
        return None
    if entry is None:
        sp = plan_search(ref, query, width, metric, device=device, budget_bytes=working_memory_bytes(working_memory, device),
                         backend=backend, precision=precision, spare=1 if width > k else 0)
        with _lock:
            if not (sp.fused and sp.resident and sp.plan.query_rows >= n_query and sp.plan.ref_rows >= n_ref):
                _remember(_ineligible, key)
                return None
            if key not in _seen:
                _remember(_seen, key)
                return None
        entry = _CapturedSearch(sp, ref.shape, query.shape, width, exclude_self, to_host and width == k)
        if not _capture_and_keep(key, entry, ref, query):
            return None
    with entry.lock:
        found = entry.run(ref, query, result_device, on_device=width > k)
        if found is None:
            return None
        if width > k:
            found = _ordered(entry, found, k, metric, exclude_self, working_memory_bytes(working_memory, device), result_device)
            if found is None:
                _forget(key)
                return None
        scores = finish_scores(found[0], metric, as_distance, None)
        if scores is entry.host_scores:  # no new tensor (scores wanted, or a metric's distances are its scores)
            scores = scores.clone()
    return scores, found[1]
