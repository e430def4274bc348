"""A function of tensors replayed as a CUDA graph once its input shapes repeat.

A chain of a hundred small tensor operations on a few thousand rows is set by the
host: each launch costs the host several microseconds while the GPU finishes it
in one or two. Captured once as a CUDA graph, the chain is one launch. The
results are those of the eager function bit for bit: the graph replays the same
kernels with the same launch shapes.

:class:`GraphReplay` wraps a function whose arguments are tensors (plus
hashable settings) and whose result is a tuple of tensors, with no host wait
inside (no ``.item()``, ``nonzero``, data-dependent shapes). Per key — the
tensors' shapes, dtypes and device, and the settings — the first call runs
eagerly (it warms up allocator and libraries), the second captures a graph with
input buffers of its own, and later calls copy their tensors into those buffers
and replay. Off CUDA, or when a capture fails, the function runs eagerly.

The tensors a replay returns are the graph's own outputs (or its input buffers,
where the function returns an input as it is): valid until the next call of the
same :class:`GraphReplay`. Callers take what they keep out of them
(an index or a ``clone``). Memory: each kept graph holds its buffers and its
intermediates (at most ``cache_size`` graphs, least recently used dropped).
"""

from __future__ import annotations

import collections
import gc
import inspect
import weakref
from typing import Callable

import torch

__all__ = ["GraphReplay"]

# False: every GraphReplay runs eagerly (same-run A/B timings)
GRAPH_REPLAY = True
# Calls whose tensors take more than this run eagerly: their launches are a small share of their time,
# and a graph keeps buffers of its inputs' size and its intermediates' memory
GRAPH_REPLAY_MAX_INPUT_BYTES = 1 << 26
# keys remembered as seen once; past this the set restarts (forgetting only costs an eager call)
_SEEN_MAX = 256


def _input_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


class _Captured:
    def __init__(self, graph: torch.cuda.CUDAGraph, inputs: list, outputs: tuple):
        self.graph, self.inputs, self.outputs = graph, inputs, outputs


class GraphReplay:
    """Call ``fn(*tensors, **settings)`` eagerly, or as a replayed CUDA graph for a repeated key.

    Parameters
    ----------
    fn : callable
        ``fn(*tensors, **settings) -> tuple of tensors``; no host synchronisation inside. A
        tensor argument may be None (it is part of the key).
    cache_size : int, default=4
        Graphs kept (least recently used dropped first).
    max_captures : int, default=16
        Captures allowed over the object's life; past them, only kept graphs replay
        (keys that change at every call then cost no capture). Past the first two, a capture
        is also tried only while the graphs captured so far were replayed twice each on average.
    enabled : bool, default=True
        False: always eager (same-run A/B timings).
    recapture : bool, default=True
        False: a key whose graph was dropped (least recently used) runs eagerly from then
        on. Each capture synchronises the device and empties torch's allocator cache, so
        callers that may cycle through more keys than ``cache_size`` turn it off.

    Examples
    --------
    >>> double = GraphReplay(lambda x: (x * 2,))
    >>> double(torch.arange(3.0))[0].tolist()
    [0.0, 2.0, 4.0]
    """

    def __init__(self, fn: Callable, *, cache_size: int = 4, max_captures: int = 16, enabled: bool = True,
                 recapture: bool = True):
        # a bound method is held weakly: its object usually holds this replay, and a cycle would leave
        # the graphs to the cyclic collector, which may free them while another graph is being captured
        self._method = weakref.WeakMethod(fn) if inspect.ismethod(fn) else None
        self._function = None if self._method is not None else fn
        self.cache_size = int(cache_size)
        self.max_captures = int(max_captures)
        self.enabled = bool(enabled)
        self.recapture = bool(recapture)
        self.n_captures = 0
        self.n_replays = 0
        self.last_error: str | None = None  # why the last refused capture failed
        self.replayed = False  # whether the last call replayed a graph (its outputs are the graph's own)
        self._graphs: collections.OrderedDict = collections.OrderedDict()
        self._seen: set = set()
        self._refused: set = set()
        self._dropped: set = set()  # keys whose graphs were dropped (kept only without recapture)

    @property
    def fn(self) -> Callable:
        fn = self._function if self._method is None else self._method()
        if fn is None:
            raise RuntimeError("the object whose method this GraphReplay replays no longer exists")
        return fn

    def __call__(self, *tensors: torch.Tensor | None, **settings):
        self.replayed = False
        device = next((t.device for t in tensors if t is not None), None)
        if not (self.enabled and GRAPH_REPLAY) or device is None or device.type != "cuda":
            return self.fn(*tensors, **settings)
        # strides too: the input buffers keep the captured layout, and a kernel's reduction order may follow it
        key = (tuple(None if t is None else (tuple(t.shape), t.stride(), t.dtype, t.device) for t in tensors),
               tuple(sorted(settings.items())))
        entry = self._graphs.get(key)
        if entry is None:
            if (key in self._refused or key in self._dropped or self.n_captures >= self.max_captures
                    or not self._captures_pay() or _input_bytes(tensors) > GRAPH_REPLAY_MAX_INPUT_BYTES):
                return self.fn(*tensors, **settings)
            if key not in self._seen:
                if len(self._seen) >= _SEEN_MAX:
                    self._seen.clear()
                self._seen.add(key)
                return self.fn(*tensors, **settings)
            entry = self._capture(key, tensors, settings)
            if entry is None:
                return self.fn(*tensors, **settings)
        else:
            self._graphs.move_to_end(key)
        for buffer, value in zip(entry.inputs, tensors):
            if buffer is not None:
                buffer.copy_(value)
        if device.index == torch.cuda.current_device():
            entry.graph.replay()
        else:
            with torch.cuda.device(device):  # a graph replays on its own device's stream
                entry.graph.replay()
        self.n_replays += 1
        self.replayed = True
        return entry.outputs

    def _captures_pay(self) -> bool:
        """Whether another capture is worth trying: the first two always; later ones only while the
        graphs already captured were replayed at least twice each on average (shapes that keep
        changing would otherwise cost a capture per shape and replay rarely)."""
        return self.n_captures < 2 or self.n_replays - self.n_captures >= 2 * self.n_captures

    def _capture(self, key, tensors, settings):
        self.n_captures += 1
        device = next(t.device for t in tensors if t is not None)
        inputs = [None if t is None else t.clone() for t in tensors]
        graph = torch.cuda.CUDAGraph()
        collecting = gc.isenabled()
        gc.disable()  # nothing may free a graph during the capture (see __init__)
        try:
            with torch.cuda.device(device):
                # a warm-up on a side stream first, as torch.cuda.graph asks (allocator, library handles)
                side = torch.cuda.Stream(device)
                side.wait_stream(torch.cuda.current_stream(device))
                with torch.cuda.stream(side):
                    self.fn(*inputs, **settings)
                torch.cuda.current_stream(device).wait_stream(side)
                # thread-local: another thread's work on the device (the CLI's warm-up) may go on
                with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                    outputs = self.fn(*inputs, **settings)
        except RuntimeError as exc:
            self._refused.add(key)
            self.last_error = f"{type(exc).__name__}: {exc}"
            return None
        finally:
            if collecting:
                gc.enable()
        entry = _Captured(graph, inputs, tuple(outputs))
        self._graphs[key] = entry
        while len(self._graphs) > self.cache_size:
            dropped, _ = self._graphs.popitem(last=False)
            if not self.recapture:
                if len(self._dropped) >= _SEEN_MAX:
                    self._dropped.clear()
                self._dropped.add(dropped)
        return entry

    def may_replay(self, device: torch.device, n_bytes: int) -> bool:
        """Whether calls on ``device`` whose tensors take ``n_bytes`` can replay a graph at all (callers
        that shape their inputs for a graph do so only then)."""
        return self.enabled and GRAPH_REPLAY and device.type == "cuda" and n_bytes <= GRAPH_REPLAY_MAX_INPUT_BYTES

    def clear(self) -> None:
        """Free the kept graphs (and their buffers) and reset the counters; later calls capture anew."""
        self._graphs.clear()
        self._seen.clear()
        self._refused.clear()
        self._dropped.clear()
        self.n_captures = self.n_replays = 0
