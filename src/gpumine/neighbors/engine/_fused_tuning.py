"""Measured tile shapes for the fused kNN kernel, one per shape class, cached on disk.

By default the kernel runs the shapes of :func:`gpumine.neighbors.engine._fused_kernel.default_blocks`
(measured on one GPU model, BENCHMARKS.md). Inside :func:`tuning` every launch of a shape
class not yet in the cache times a few candidate shapes on its real operands and
records the fastest; later launches of that class, in this process or any later
one on the same GPU and Triton version, use it. Tuning compiles each candidate
once (about a second each), so it is opt-in (``gpumine.neighbors.tune_knn`` or
``gpumine knn --tune``) and a plain first call compiles one shape only.

A shape class is what the kernel is compiled for plus a coarse query count:
the device's name, Triton's version, the scoring form, the features the kernel
reads, candidates per query, precision, bias, self-exclusion and visit order.
The cache is ``$GPUMINE_CACHE_DIR/knn_tiles.json`` (default
``~/.cache/gpumine``), JSON, written to a temporary name and renamed.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path

from ...utils._atomic import atomic_open

__all__ = ["cache_path", "shape_class", "lookup", "record", "tuning", "tuning_results", "candidate_blocks"]

CACHE_ENV = "GPUMINE_CACHE_DIR"
_FILE_NAME = "knn_tiles.json"

_lock = threading.Lock()
_loaded: dict | None = None
_loaded_from: Path | None = None
_state = threading.local()


def cache_path() -> Path:
    """Where the tuned shapes are kept (``$GPUMINE_CACHE_DIR`` or ``~/.cache/gpumine``)."""
    base = os.environ.get(CACHE_ENV)
    if not base:
        base = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gpumine")
    return Path(base) / _FILE_NAME


def shape_class(device_name: str, triton_version: str, *, score: int, features: int, block_k: int, tail: int,
                candidates: int, precision: str, has_bias: bool, exclude_self: bool, rotate: bool, n_query: int) -> str:
    """The cache key of one launch: everything the kernel is compiled for, and the query count's size class."""
    size_class = max(int(n_query), 1).bit_length() // 2  # a factor of four per class
    return (f"{device_name}|triton-{triton_version}|score{score}|d{features}|bk{block_k}|tail{tail}|c{candidates}|"
            f"{precision}|bias{int(has_bias)}|self{int(exclude_self)}|rotate{int(rotate)}|q{size_class}")


def _entries() -> dict:
    global _loaded, _loaded_from
    path = cache_path()
    if _loaded is None or _loaded_from != path:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            _loaded = data if isinstance(data, dict) else {}
        except (OSError, ValueError):  # absent or unreadable: tune again rather than fail a search
            _loaded = {}
        _loaded_from = path
    return _loaded


def lookup(key: str) -> tuple[int, int, int] | None:
    """The recorded ``(block_m, block_n, num_warps)`` of a shape class, or None."""
    with _lock:
        entry = _entries().get(key)
    try:
        block_m, block_n, num_warps = (int(v) for v in entry["blocks"])
    except (TypeError, KeyError, ValueError):
        return None
    return block_m, block_n, num_warps


def record(key: str, blocks: tuple[int, int, int], timings_ms: dict[str, float]) -> None:
    """Store a shape class's fastest blocks (merged into the file; temporary name, then rename)."""
    global _loaded
    path = cache_path()
    with _lock:
        _loaded = None  # re-read: another process may have added classes
        entries = dict(_entries())
        entries[key] = {"blocks": list(blocks), "ms": timings_ms}
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(path, "w") as f:
            json.dump(entries, f, indent=1, sort_keys=True)
        _loaded = entries


@contextlib.contextmanager
def tuning():
    """Within this block, launches of uncached shape classes are tuned; yields ``{key: entry}`` of those tuned."""
    previous = getattr(_state, "results", None)
    _state.results = {}
    try:
        yield _state.results
    finally:
        _state.results = previous


def tuning_results() -> dict | None:
    """The dict collecting this thread's tuned classes while :func:`tuning` is active, else None."""
    return getattr(_state, "results", None)


def candidate_blocks(dot_scoring: bool, candidates: int) -> list[tuple[int, int, int]]:
    """``(block_m, block_n, num_warps)`` shapes worth timing for a scoring form and candidate count."""
    if dot_scoring:
        shapes = [(64, 64, 4), (64, 128, 4), (128, 64, 4), (128, 64, 8), (32, 64, 4), (64, 128, 8), (32, 128, 4)]
    else:
        shapes = [(32, 32, 4), (16, 32, 4), (32, 64, 4), (64, 32, 4), (16, 64, 4), (32, 32, 2)]
    if candidates > 64:  # wide candidate lists: every row's list sits in registers
        shapes = [s for s in shapes if s[0] <= 32] + [(16, 32, 4), (16, 64, 4)]
    return list(dict.fromkeys(shapes))
