"""Small searches on a GPU, checked and run in one launch; a repeated one replays that launch as a graph.

A search of a few thousand rows takes the GPU tens of microseconds, and the host
about as long again to launch it: ``kneighbors`` skips the planning's host waits
and runs it as one launch of the exact-selection kernel
(:func:`~._exact_select_kernel.exact_select_checked`), which also reads the
data's extremes (NaN, infinity, magnitudes) for the one host wait. Even so, the
launch's own host work — the operands' feature-major copies, three output
allocations and Triton's binding of some thirty arguments — was as long as the
kernel on the smallest ADBench sets. A shape met again (the same operands' shapes,
strides and device, the same settings) replays it all as one CUDA graph
(:class:`~gpumine.utils._graph_replay.GraphReplay`): one copy of the operands
into the graph's buffers, one replay, the outputs cloned out and the extremes
read through a pinned buffer. The results are those of the launch bit for bit:
same kernel, same launch shape.

Per device one lock covers a replay from its input copy to the extremes' read,
so threads searching the same device take turns (a graph has one set of
buffers). ``SMALL_GRAPHS = False`` runs every small search eagerly (same-run A/B
timings); :func:`clear_small_graphs` frees the graphs.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from ...core.distance import Metric
from ...core.tiles import fits_on_device, same_device
from ...utils._graph_replay import GraphReplay
from ._exact_select import _exact_select_small, exact_select_supports, feature_major
from ._exact_select_kernel import exact_select_checked, placed_supported
from ._magnitude import arithmetic

__all__ = ["search_small", "clear_small_graphs", "SMALL_GRAPHS", "SMALL_MIN_QUERIES", "SMALL_MAX_UNSPLIT_REFERENCES",
           "SMALL_MAX_ROWS", "SMALL_GRAPH_MAX_BYTES"]

# search_small keeps each query's references in one program (its lists are written in order): it
# takes searches of at least SMALL_MIN_QUERIES queries, or of at most SMALL_MAX_UNSPLIT_REFERENCES
# references; fewer queries over more references leave most of the GPU idle unsplit
SMALL_MIN_QUERIES = 256
SMALL_MAX_UNSPLIT_REFERENCES = 8192
SMALL_MAX_ROWS = 1 << 24
# False: every small search launches eagerly (same-run A/B timings)
SMALL_GRAPHS = True
# Searches whose graph would hold more than this many bytes launch eagerly: the launch's host work is
# then a small share of the kernel's time, and each kept graph holds its operands twice (input and
# feature-major buffers) and its outputs
SMALL_GRAPH_MAX_BYTES = 1 << 24
# shapes kept per device (least recently used dropped first); a dropped shape is not captured again
# (each capture synchronises the device and empties torch's allocator cache, so a program cycling
# through more shapes would pay one per call), and past SMALL_GRAPH_MAX_CAPTURES captures per device
# no new shape is
SMALL_GRAPH_CACHE_SIZE = 4
SMALL_GRAPH_MAX_CAPTURES = 256


def _checked_launch(ref: torch.Tensor, query: torch.Tensor | None, *, k: int, metric_name: str, exclude_self: bool,
                    as_distance: bool):
    """The operands' feature-major copies and the checked launch (no host wait): what a replay repeats.

    ``query`` None: the queries are the references (one copy, ``QT is RT``).
    """
    RT, QT = feature_major(ref, ref if query is None else query)
    return exact_select_checked(QT, RT, k, metric_name, exclude_self=exclude_self, as_distance=as_distance)


class _DeviceGraphs:
    """One device's small-search graphs, the lock its replays take, and a pinned buffer for the extremes."""

    def __init__(self):
        self.lock = threading.Lock()
        self.replay = GraphReplay(_checked_launch, cache_size=SMALL_GRAPH_CACHE_SIZE, max_captures=SMALL_GRAPH_MAX_CAPTURES,
                                  recapture=False)
        self.pinned: torch.Tensor | None = None

    def read(self, extremes: torch.Tensor) -> np.ndarray:
        """A copy of ``extremes`` on the host, through the pinned buffer (waits for the device)."""
        n = extremes.numel()
        if self.pinned is None or self.pinned.numel() < n:
            self.pinned = torch.empty(max(n, 3 * 1024), dtype=extremes.dtype, pin_memory=True)
        host = self.pinned[:n]
        host.copy_(extremes.reshape(-1), non_blocking=True)
        torch.cuda.current_stream(extremes.device).synchronize()
        return host.numpy().reshape(extremes.shape).copy()


_device_graphs: dict = {}
_device_graphs_lock = threading.Lock()


def _graphs_of(device: torch.device) -> _DeviceGraphs:
    index = device.index if device.index is not None else torch.cuda.current_device()
    found = _device_graphs.get(index)
    if found is None:
        with _device_graphs_lock:
            found = _device_graphs.setdefault(index, _DeviceGraphs())
    return found


def clear_small_graphs() -> None:
    """Free the small searches' graphs (and their buffers) on every device; later searches capture anew."""
    with _device_graphs_lock:
        for graphs in _device_graphs.values():
            with graphs.lock:
                graphs.replay.clear()
                graphs.pinned = None


def _replays(ref: torch.Tensor, query: torch.Tensor, k: int, device: torch.device) -> bool:
    """Whether this search may go through a graph: both operands on ``device``, the graph's buffers small
    (see ``SMALL_GRAPH_MAX_BYTES``), and no capture under way."""
    operand_bytes = ref.numel() * ref.element_size() + (0 if query is ref else query.numel() * query.element_size())
    output_bytes = query.shape[0] * (k * (4 + 8) + 3 * 4)  # scores, indices, each program's extremes
    return (SMALL_GRAPHS and 2 * operand_bytes + output_bytes <= SMALL_GRAPH_MAX_BYTES and same_device(ref.device, device)
            and same_device(query.device, device) and not torch.cuda.is_current_stream_capturing())


def _launch(ref: torch.Tensor, query: torch.Tensor, k: int, metric_name: str, exclude_self: bool, as_distance: bool,
            device: torch.device):
    """``(scores, index, extremes on the host)`` of the checked launch, replayed where the shape repeats."""
    settings = dict(k=k, metric_name=metric_name, exclude_self=exclude_self, as_distance=as_distance)
    if not _replays(ref, query, k, device):
        with torch.cuda.device(device):  # Triton launches on the current device
            RT, QT = feature_major(ref, query, device)
            scores, index, extremes = exact_select_checked(QT, RT, k, metric_name, exclude_self=exclude_self,
                                                           as_distance=as_distance)
        return scores, index, extremes.cpu().numpy()  # the one host wait
    graphs = _graphs_of(device)
    with graphs.lock:
        scores, index, extremes = graphs.replay(ref, None if query is ref else query, **settings)
        if graphs.replay.replayed:  # the graph's own outputs: the next replay overwrites them
            scores, index = scores.clone(), index.clone()
        return scores, index, graphs.read(extremes)  # the one host wait


def search_small(ref: torch.Tensor, query: torch.Tensor, k: int, metric: Metric, *, exclude_self: bool, device: torch.device,
                 backend: str, precision: str, as_distance: bool = True):
    """A small search checked and run in one launch: ``(distances, indices, finite)`` on ``device``, or None.

    For ``kneighbors`` on a GPU, where a small search's time is its launches
    and host waits: the kernel (:func:`exact_select_checked`) also reads the
    data's extremes, so the validation's own pass and host wait go away; its one
    host wait reads them. A shape met again replays the launch as a CUDA graph
    (see the module docstring). ``finite`` False: the data holds NaN or infinity (the
    caller raises; the results mean nothing). None where the search is not small
    (see :func:`~._exact_select.exact_select_first`; every query block in one program, the
    references unsplit), or where the data's magnitudes ask for the engine's
    range widening or scaling (``._magnitude``) and the results could differ
    from that path's (float64 scores outside float32's normal range).
    ``ref``/``query``: float32, on ``device`` or in host memory; ``query is ref``
    when ``exclude_self``. Distances (``as_distance=False``: scores) as the
    engine reports them, bit for bit.
    """
    n_query, n_ref = query.shape[0], ref.shape[0]
    d = ref.shape[1]
    # small: exact_select_first's small shapes (every query block in one program)
    if not (ref.dtype == query.dtype == torch.float32 and n_query and n_ref > k - 1 + exclude_self
            and _exact_select_small(n_query, n_ref, d)
            and exact_select_supports(metric, torch.float32, d, k, device, backend, precision) and placed_supported(k, d)):
        return None
    if max(n_query, n_ref) > SMALL_MAX_ROWS:
        return None  # the kernel's extremes pass and offsets count rows in 32 bits
    if n_query < SMALL_MIN_QUERIES and n_ref > SMALL_MAX_UNSPLIT_REFERENCES:
        return None  # few queries, many references: the references split over programs (exact_select_search)
    for X in (ref, query):
        if not same_device(X.device, device) and not fits_on_device(2 * X.numel() * X.element_size(), device):
            return None
    scores, index, found = _launch(ref, query, k, metric.name, exclude_self, as_distance, device)
    if found[:, 0].any():
        return scores, index, False
    dtype, scale = arithmetic(torch.float32, float(found[:, 1].max()), float(found[:, 2].min()))
    if dtype != torch.float32 or (scale is not None and not _unscaled_equal(scores, index, query, ref,
                                                                             as_distance and metric.name == "euclidean")):
        return None
    return scores, index, True


# Outputs at least this far above zero (a distance, or a squared one) come from float64 scores in
# float32's normal range, where rounding to float32 and the IEEE square root commute with a
# power-of-two scale: the engine's range scaling (._magnitude) would report the same values.
_UNSCALED_DISTANCE_FLOOR = 2.0**-62
_UNSCALED_SCORE_FLOOR = 2.0**-124


def _unscaled_equal(scores: torch.Tensor, index: torch.Tensor, query: torch.Tensor, ref: torch.Tensor, as_distance: bool) -> bool:
    """Whether float32 results of unscaled data equal those of the engine's scaled search (one host wait).

    Scaling by a power of two is exact in float64 and, for values in float32's
    normal range, in the rounding to float32 and the square root too: every
    result must be finite and far enough from float32's subnormals, or zero for
    an exact duplicate (a nonzero score too small for float32 also rounds to
    zero). ``query``/``ref``: the queries and references, row-major (either may
    be in host memory).
    """
    floor = _UNSCALED_DISTANCE_FLOOR if as_distance else _UNSCALED_SCORE_FLOOR
    query, ref = query.to(scores.device), ref.to(scores.device)
    duplicate = (ref[index.clamp_min(0)] == query[:, None, :]).all(2)
    return bool(((torch.isfinite(scores) & (scores >= floor)) | ((scores == 0) & duplicate)).all())
