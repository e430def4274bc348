"""Route choices remembered by reference tensor: searches of the same unchanged tensor decide once.

Some route choices cost a pass over the data before the search (the float32
products' probe, the dense-or-fused probe, the duplicate check). Their verdicts
only choose how a search runs, never what it returns, so a search against the
same tensor, unchanged since (:func:`._dense.tensor_state`: version counter,
storage, layout), may reuse one: a fitted estimator's data on the device, a
repeated search. A stale verdict (a tensor written from outside torch, which
leaves the version counter as it was) costs time only. Inference tensors have no
version counter and are never remembered.
"""

from __future__ import annotations

import threading
import weakref

import torch

from ._dense import tensor_state

__all__ = ["TensorVerdicts"]


class TensorVerdicts:
    """One verdict per tensor (the latest), under a key the caller chooses (what else the verdict depends on), for
    at most ``kept`` tensors; safe to share between threads."""

    def __init__(self, kept: int = 16):
        self.kept = kept
        self._entries: dict = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def get(self, tensor: torch.Tensor, key):
        """The verdict remembered for ``tensor`` as it is now and ``key``, or None."""
        if tensor.is_inference():
            return None
        with self._lock:
            entry = self._entries.get(id(tensor))
        if entry is None or entry[0]() is not tensor or entry[1] != (tensor_state(tensor), key):
            return None
        return entry[2]

    def put(self, tensor: torch.Tensor, key, verdict) -> None:
        """Remember ``verdict`` for ``tensor`` as it is now and ``key`` (replacing the tensor's earlier one)."""
        if tensor.is_inference():
            return
        entry = (weakref.ref(tensor), (tensor_state(tensor), key), verdict)
        with self._lock:
            self._entries.pop(id(tensor), None)
            for ident in [ident for ident, held in self._entries.items() if held[0]() is None]:  # tensors since freed
                del self._entries[ident]
            if len(self._entries) >= self.kept:
                self._entries.pop(next(iter(self._entries)))
            self._entries[id(tensor)] = entry
