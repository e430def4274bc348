"""Tile plans from a memory budget, and pinned, double-buffered host-to-device streaming.

Nothing in gpumine allocates a (queries x references) matrix: work is cut into
tiles whose temporaries fit ``working_memory``. When data lives in host memory
and the work runs on a GPU, :func:`iter_row_chunks` copies chunk i+1 through a
pinned staging buffer on a side stream while the GPU computes on chunk i (the
CUDA-streams overlap of the CUKNN paper). Results leave the GPU the other way
through :func:`copy_to_host`.
"""

from __future__ import annotations

from dataclasses import dataclass
import threading
from typing import Iterator

import torch

__all__ = ["TilePlan", "plan_tiles", "tile_bytes", "iter_row_chunks", "fits_on_device", "same_device",
           "copy_to_host"]

_INDEX_BYTES = 8


@dataclass(frozen=True)
class TilePlan:
    """Rows of queries and of references processed together in one tile."""

    query_rows: int
    ref_rows: int
    budget_bytes: int

    def tile_bytes(self, n_features: int, n_candidates: int, itemsize: int) -> int:
        return tile_bytes(self.query_rows, self.ref_rows, n_features, n_candidates, itemsize)


def tile_bytes(q: int, r: int, d: int, c: int, itemsize: int) -> int:
    """Bytes of temporaries for a tile of ``q`` queries x ``r`` references with ``c`` candidates each."""
    # the score tile, its group minima and their top-k scratch (values + indices,
    # an eighth of the tile: see gpumine.neighbors.engine._search._tile_candidates), the
    # running and new candidate lists, and the rows themselves
    scores = q * r * (itemsize + (2 * itemsize + _INDEX_BYTES) // 8)
    candidates = 4 * q * c * (itemsize + _INDEX_BYTES)
    rows = (q + r) * (d + 2) * itemsize
    return scores + candidates + rows


# Wide reference tiles keep the per-tile fixed costs (candidate merges) small
# next to the tile's own work; queries are cut to fit the budget first.
_MAX_REF_ROWS = 65536
_MAX_QUERY_ROWS = 8192


def plan_tiles(n_query: int, n_ref: int, n_features: int, n_candidates: int, itemsize: int, budget_bytes: int) -> TilePlan:
    """Choose tile sizes so one tile's temporaries stay under ``budget_bytes``.

    References are taken in wide tiles (up to 65,536 rows) and queries are cut
    to fit; only when even a few queries do not fit are reference tiles narrowed.

    Examples
    --------
    >>> plan = plan_tiles(10_000, 50_000, 8, 16, 4, 64 * 2**20)
    >>> plan.tile_bytes(8, 16, 4) <= 64 * 2**20
    True
    """
    n_query, n_ref = max(n_query, 1), max(n_ref, 1)
    c = min(n_candidates, n_ref)
    min_ref = min(n_ref, max(c, 1))
    if tile_bytes(1, min_ref, n_features, c, itemsize) > budget_bytes:
        need = tile_bytes(1, min_ref, n_features, c, itemsize) / 2**20
        raise ValueError(
            f"working_memory={budget_bytes / 2**20:.3g} MiB is too small for even one query against "
            f"{min_ref} references with {n_features} features; raise working_memory to at least {need:.3g} MiB"
        )
    q_cap = min(n_query, _MAX_QUERY_ROWS)
    r = min(n_ref, max(_MAX_REF_ROWS, min_ref))
    while True:
        q = _largest_fitting_queries(q_cap, r, n_features, c, itemsize, budget_bytes)
        # narrow the reference tile only when fewer than 64 queries would fit
        if q >= min(q_cap, 64) or r == min_ref:
            break
        r = max(min_ref, r // 2)
    return TilePlan(query_rows=max(q, 1), ref_rows=r, budget_bytes=budget_bytes)


def _largest_fitting_queries(q_cap: int, r: int, d: int, c: int, itemsize: int, budget: int) -> int:
    lo, hi = 0, q_cap  # binary search: tile bytes grow with q
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if tile_bytes(mid, r, d, c, itemsize) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def fits_on_device(n_bytes: int, device: torch.device, fraction: float = 0.5) -> bool:
    """True when ``n_bytes`` fit in ``fraction`` of the device's free memory (always true on the CPU)."""
    if device.type != "cuda":
        return True
    free, _ = torch.cuda.mem_get_info(device)
    return n_bytes <= fraction * free


def same_device(a: torch.device, b: torch.device) -> bool:
    """Whether two devices are the same one: ``cuda`` without an index is the current GPU.

    (``torch.device("cuda:0") == torch.device("cuda")`` is False: a search given ``"cuda"`` for data
    on ``cuda:0`` once staged its resident reference tiles through the two reused buffers of the
    host-streaming path, and every tile but the last two read the wrong rows.)
    """
    if a.type != b.type:
        return False
    if a.type != "cuda" or a.index == b.index:
        return True
    if a.index is not None and b.index is not None:
        return False
    current = torch.cuda.current_device()
    return (current if a.index is None else a.index) == (current if b.index is None else b.index)


def iter_row_chunks(X: torch.Tensor, chunk_rows: int, device: torch.device) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield ``(start_row, chunk_on_device)`` over the rows of ``X``.

    When ``X`` is already on ``device`` the chunks are views. When ``X`` is in
    host memory and ``device`` is a GPU, chunks are staged through two pinned
    buffers and copied on a side stream, one chunk ahead of the consumer; a
    yielded chunk is valid until the consumer asks for the next-but-one.
    """
    n = X.shape[0]
    chunk_rows = max(1, min(chunk_rows, n)) if n else 1
    # one chunk: nothing to overlap its copy with, and staging buffers would cost more than they save
    if same_device(X.device, device) or device.type != "cuda" or chunk_rows >= n:
        for start in range(0, n, chunk_rows):
            yield start, X[start : start + chunk_rows].to(device)
        return
    yield from _pinned_double_buffer(X, chunk_rows, device)


def _pinned_double_buffer(X: torch.Tensor, chunk_rows: int, device: torch.device):
    n, shape_tail = X.shape[0], tuple(X.shape[1:])
    starts = list(range(0, n, chunk_rows))
    copy_stream = torch.cuda.Stream(device)
    compute_stream = torch.cuda.current_stream(device)
    pinned = [torch.empty((chunk_rows, *shape_tail), dtype=X.dtype, pin_memory=True) for _ in range(2)]
    on_device = [torch.empty((chunk_rows, *shape_tail), dtype=X.dtype, device=device) for _ in range(2)]
    copied: list[torch.cuda.Event | None] = [None, None]
    consumed: list[torch.cuda.Event | None] = [None, None]

    def issue(i: int) -> None:
        slot, start = i % 2, starts[i]
        rows = min(chunk_rows, n - start)
        if copied[slot] is not None:
            copied[slot].synchronize()  # the staging buffer is free once its last copy finished
        pinned[slot][:rows].copy_(X[start : start + rows])
        with torch.cuda.stream(copy_stream):
            if consumed[slot] is not None:
                copy_stream.wait_event(consumed[slot])  # the device buffer's last reader is done
            on_device[slot][:rows].copy_(pinned[slot][:rows], non_blocking=True)
            event = torch.cuda.Event()
            event.record(copy_stream)
            copied[slot] = event

    if not starts:
        return
    issue(0)
    for i, start in enumerate(starts):
        slot = i % 2
        rows = min(chunk_rows, n - start)
        compute_stream.wait_event(copied[slot])
        yield start, on_device[slot][:rows]
        # the consumer has queued its work on this chunk: stage the next one while the GPU runs it
        event = torch.cuda.Event()
        event.record(compute_stream)
        consumed[slot] = event
        if i + 1 < len(starts):
            issue(i + 1)


# Device results bound for host memory cross in pieces of this many bytes through two pinned
# buffers (kept per GPU): a copy from device memory straight into pageable memory, and one that
# also changes the dtype, ran several times slower than the staged copy (BENCHMARKS.md, "Design
# measurements quoted in the code"); smaller results are copied directly.
HOST_COPY_STAGE_BYTES = 1 << 24
_host_copy_staging: dict = {}
_host_copy_lock = threading.Lock()


def copy_to_host(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``dst.copy_(src)`` for a host ``dst`` and a GPU ``src``, fast: the dtype converted on the GPU, the
    bytes staged through two pinned buffers (the copy of one piece overlaps the host's copy of the last).

    Other devices, and non-contiguous destinations, take ``dst.copy_(src)``. Returns ``dst``.
    """
    if src.device.type != "cuda" or dst.device.type != "cpu":
        return dst.copy_(src)
    src = src.to(dst.dtype)
    step = HOST_COPY_STAGE_BYTES // src.element_size()
    n = src.numel()
    if n <= step or not dst.is_contiguous():
        return dst.copy_(src)
    flat_src, flat_dst = src.contiguous().view(-1), dst.view(-1)
    stream = torch.cuda.current_stream(src.device)
    with _host_copy_lock:  # one set of staging buffers per GPU, shared by the threads of a process
        key = (src.device, src.dtype, step)  # the piece size is part of the key: it can be changed between calls
        staging = _host_copy_staging.get(key)
        if staging is None:
            staging = _host_copy_staging[key] = [torch.empty(step, dtype=src.dtype, pin_memory=True) for _ in range(2)]
        copied = [None, None]

        def issue(i: int) -> None:
            start = i * step
            rows = min(step, n - start)
            staging[i % 2][:rows].copy_(flat_src[start : start + rows], non_blocking=True)
            copied[i % 2] = torch.cuda.Event()
            copied[i % 2].record(stream)

        pieces = -(-n // step)
        issue(0)
        for i in range(pieces):
            if i + 1 < pieces:  # its buffer's last piece was copied out on the host before this one
                issue(i + 1)
            copied[i % 2].synchronize()
            start = i * step
            rows = min(step, n - start)
            flat_dst[start : start + rows].copy_(staging[i % 2][:rows])
    return dst
