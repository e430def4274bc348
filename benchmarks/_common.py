"""Helpers shared by the benchmark suites: timing, environment record, atomic output, formatting."""

from __future__ import annotations

import argparse

import datetime as _dt
import importlib
import importlib.metadata
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from gpumine.io import atomic_open

__all__ = [
    "synchronize",
    "time_call",
    "median",
    "environment",
    "package_version",
    "write_json",
    "write_text",
    "save_figure",
    "format_seconds",
    "format_count",
    "DefaultsHelpFormatter",
]


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work on ``device`` (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn: Callable[[], object], device: torch.device) -> tuple[float, object]:
    """Wall-clock seconds of ``fn()`` with the GPU drained before and after, and its result.

    Wall clock (not CUDA events) on purpose: the host-input paths include host
    work and copies, and the device paths end with a synchronisation, so both
    are measured the same way, from call to usable result.
    """
    synchronize(device)
    start = time.perf_counter()
    out = fn()
    synchronize(device)
    return time.perf_counter() - start, out


def median(values) -> float:
    return float(statistics.median(values))


_DISTRIBUTIONS = {
    "sklearn": ("scikit-learn",),
    "faiss": ("faiss-cpu", "faiss-gpu", "faiss-gpu-cu12", "faiss"),
}


def package_version(name: str) -> str | None:
    """Installed version of a package (by its distribution metadata, without importing it), else None."""
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__version__", None):
        return str(loaded.__version__)
    for dist in _DISTRIBUTIONS.get(name, (name,)):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: torch.device, packages=("gpumine", "torch", "triton", "numpy", "sklearn", "faiss", "matplotlib")) -> dict:
    """Device, versions and date of a benchmark run, for the ``meta`` block of its JSON."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        device_name = torch.cuda.get_device_name(device)
        gpu = {
            "name": device_name,
            "capability": ".".join(map(str, torch.cuda.get_device_capability(device))),
            "memory_gib": round(props.total_memory / 2**30, 1),
            "multiprocessors": props.multi_processor_count,
            "cuda": torch.version.cuda,
        }
    else:
        device_name = f"CPU: {_cpu_name()}"
        gpu = None
    versions = {"python": platform.python_version()}
    for name in packages:
        versions["scikit-learn" if name == "sklearn" else name] = package_version(name)
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": str(device),
        "device_name": device_name,
        "gpu": gpu,
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "versions": versions,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "argv": list(sys.argv),
    }


def write_text(path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (:func:`gpumine.io.atomic_open`); creates the folder."""
    path = Path(os.fspath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "w") as fh:
        fh.write(text)
    return path


def write_json(path, obj) -> Path:
    """Write ``obj`` as indented JSON, atomically (NaN and infinities become null)."""
    return write_text(path, json.dumps(_finite(obj), indent=1, allow_nan=False, default=_json_default) + "\n")


def _finite(obj):
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {key: _finite(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(value) for value in obj]
    return obj


def _json_default(value):
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def save_figure(fig, path) -> Path:
    """Save a matplotlib figure as PNG, atomically."""
    path = Path(os.fspath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=120, bbox_inches="tight")
    return path


def format_seconds(seconds: float | None) -> str:
    """Human-readable duration: ``"812 µs"``, ``"41.2 ms"``, ``"1.09 s"``.

    Examples
    --------
    >>> format_seconds(0.0412), format_seconds(1.0912), format_seconds(None)
    ('41.2 ms', '1.09 s', '—')
    """
    if seconds is None:
        return "—"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    if seconds < 100:
        return f"{seconds:.3g} s"
    return f"{seconds:.0f} s"


def _checked(kind, holds, requirement: str):
    """An argparse ``type`` for values of ``kind`` (int, float) for which ``holds(value)``, else "must be ``requirement``"."""
    def parse(text):
        value = kind(text)
        if not holds(value):
            raise argparse.ArgumentTypeError(f"must be {requirement}; got {text}")
        return value

    return parse


def positive(kind):
    """An argparse ``type`` for values of ``kind`` (int, float) that must be > 0."""
    return _checked(kind, lambda value: value > 0, "> 0")


def non_negative(kind):
    """An argparse ``type`` for finite values of ``kind`` (int, float) that must be >= 0."""
    return _checked(kind, lambda value: value >= 0 and math.isfinite(value), "a finite number >= 0")


def format_count(n: int) -> str:
    """``1048576 -> "1,048,576"``."""
    return f"{n:,}"


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` that states each option's default once, in words.

    argparse's own formatter appends ``(default: ...)`` to every option: also after a help text
    that already says its default, and as Python (``None``, ``False``, ``['dims', 'refs']``).
    This one skips options whose help mentions a default, those without one (None, False, a
    flag) and writes a list as ``dims, refs``.
    """

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if (text == argparse.SUPPRESS or "default" in text.lower() or default is None or default is False
                or default is argparse.SUPPRESS or action.nargs == 0
                or (not action.option_strings and action.nargs not in (argparse.OPTIONAL, argparse.ZERO_OR_MORE))):
            return text
        if isinstance(default, (list, tuple)):
            default = ", ".join(str(value) for value in default)
        return f"{text} (default: {str(default).replace('%', '%%')})"
