"""Fitted estimators pickle their state in host memory and load on any machine.

A model fitted on a GPU holds CUDA tensors; pickled as they are, it could only be
loaded where CUDA is (and would pin the device it was fitted on). As cuML does,
``__getstate__`` moves every tensor of the fitted state to the host; on load the
tensors go back to the fitted device when it exists there, else the model stays
on the CPU (``device_`` says so) with a warning. Results are the same on either.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings

import torch

__all__ = ["HostPickleMixin", "move_tensors"]


def move_tensors(value, device: torch.device, _seen=None):
    """``value`` with every tensor inside it (dicts, lists, tuples, dataclasses, plain objects) on ``device``."""
    if _seen is None:
        _seen = {}
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (str, bytes, int, float, bool, type(None), torch.device, torch.dtype)):
        return value
    key = id(value)
    if key in _seen:
        return _seen[key]
    if isinstance(value, dict):
        moved = type(value)((k, move_tensors(v, device, _seen)) for k, v in value.items())
    elif isinstance(value, list):
        moved = [move_tensors(v, device, _seen) for v in value]
    elif isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        moved = type(value)(*(move_tensors(v, device, _seen) for v in value))
    elif isinstance(value, tuple):
        moved = tuple(move_tensors(v, device, _seen) for v in value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        moved = copy.copy(value)
        for field in dataclasses.fields(value):
            object.__setattr__(moved, field.name, move_tensors(getattr(value, field.name), device, _seen))
    elif getattr(type(value), "_cache_only", False):  # a cache (its contents are rebuilt on use)
        moved = type(value)()
    elif type(value).__module__.startswith("gpumine.") and hasattr(value, "__dict__"):
        moved = copy.copy(value)
        moved.__dict__.update({k: move_tensors(v, device, _seen) for k, v in vars(value).items()})
    else:
        return value
    _seen[key] = moved
    return moved


class HostPickleMixin:
    """Pickles the fitted state with its tensors in host memory (see the module docstring)."""

    def __getstate__(self):
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__.copy()
        return move_tensors(state, torch.device("cpu"))

    def __setstate__(self, state):
        device = state.get("device_", state.get("_device"))
        if isinstance(device, torch.device) and device.type == "cuda":
            index = device.index or 0
            if torch.cuda.is_available() and index < torch.cuda.device_count():
                state = move_tensors(state, device)
            else:
                warnings.warn(f"{type(self).__name__} was fitted on {device}, which this machine lacks; it is loaded "
                              "on the CPU (same results)", UserWarning, stacklevel=2)
                state = dict(state)
                for name in ("device_", "_device"):
                    if isinstance(state.get(name), torch.device):
                        state[name] = torch.device("cpu")
        if hasattr(super(), "__setstate__"):
            super().__setstate__(state)
        else:
            self.__dict__.update(state)
