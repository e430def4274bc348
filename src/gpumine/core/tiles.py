"""Tile plans from a memory budget, and host-to-device streaming through pinned staging buffers.

Nothing in gpumine allocates a (queries x references) matrix: work is cut into
tiles whose temporaries fit ``working_memory``. When data lives in host memory
and the work runs on a GPU, :func:`iter_row_chunks` copies the next chunks
through pinned staging buffers on a side stream while the GPU computes on
chunk i (the CUDA-streams overlap of the CUKNN paper), and :func:`copy_to_device`
moves a whole large host tensor the same way. Results leave the GPU the other
way through :func:`copy_to_host`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
import os
import threading
from typing import Iterator

import torch

__all__ = ["TilePlan", "plan_tiles", "padded_columns", "PRODUCT_ROW_BYTES", "tile_bytes", "iter_row_chunks", "fits_on_device", "same_device",
           "copy_to_host", "copy_to_device", "unit_row_stride", "evenly_spread_rows"]

_INDEX_BYTES = 8
# rows of matrix-product operands are padded to a multiple of this many bytes (padded_columns):
# cuBLAS ran products of 63- and 129-column rows well below the speed of padded ones
# (BENCHMARKS.md, "Design measurements quoted in the code")
PRODUCT_ROW_BYTES = 32


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


def unit_row_stride(X: torch.Tensor) -> torch.Tensor:
    """``X`` with consecutive elements along each row (what a kernel's row pointer arithmetic assumes); a copy only if not."""
    return X if X.stride(1) == 1 else X.contiguous()


def padded_columns(X: torch.Tensor, row_bytes: int | None = None) -> torch.Tensor:
    """``X`` (n, m) with zero columns appended up to a multiple of ``row_bytes`` (default
    ``PRODUCT_ROW_BYTES``) per row (``X`` itself if none are needed).

    A matrix product's operands whose rows start on such boundaries get the
    library's fast kernels (vectorised loads); zero columns add exact zeros to
    every dot product.
    """
    per_row = max(1, (row_bytes or PRODUCT_ROW_BYTES) // X.element_size())
    extra = -X.shape[1] % per_row
    return torch.nn.functional.pad(X, (0, extra)) if extra else X


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


def evenly_spread_rows(n: int, m: int, device) -> torch.Tensor:
    """``m <= n`` row numbers spread evenly over ``n`` rows, first and last included (int64 on ``device``).

    Integer arithmetic keeps them distinct and in range at any count: float positions round past the
    last row from 2^24 rows.
    """
    return torch.arange(m, device=device) * (n - 1) // max(1, m - 1)


def iter_row_chunks(X: torch.Tensor, chunk_rows: int, device: torch.device) -> Iterator[tuple[int, torch.Tensor]]:
    """Yield ``(start_row, chunk_on_device)`` over the rows of ``X``.

    When ``X`` is already on ``device`` the chunks are views. When ``X`` is in
    host memory and ``device`` is a GPU, chunks are staged through pinned
    buffers by host threads and copied on a side stream, ahead of the consumer
    (:class:`_StagedTransfers`); a yielded chunk is valid until the consumer
    asks for the next one: queue all work on a chunk before that.
    """
    n = X.shape[0]
    chunk_rows = max(1, min(chunk_rows, n)) if n else 1
    # one chunk: nothing to overlap its copy with, and staging buffers would cost more than they save
    if same_device(X.device, device) or device.type != "cuda" or chunk_rows >= n:
        for start in range(0, n, chunk_rows):
            yield start, X[start : start + chunk_rows].to(device)
        return
    yield from _StagedTransfers(X, chunk_rows, device).chunks()


def copy_to_device(X: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``X.to(device)``, fast for large host tensors: staged through pinned buffers as
    :func:`iter_row_chunks` streams them, straight into one device tensor.

    A pageable host-to-device copy runs at a fraction of a pinned one's rate
    (BENCHMARKS.md); small tensors, and everything not host-to-GPU, take ``X.to(device)``.
    """
    device = torch.device(device)
    if (X.device.type != "cpu" or device.type != "cuda" or X.dim() == 0 or not X.shape[0]
            or X.numel() * X.element_size() < STAGED_COPY_MIN_BYTES):
        return X.to(device)
    row_bytes = max(1, X[0].numel() * X.element_size())
    chunk_rows = max(1, STAGED_COPY_CHUNK_BYTES // row_bytes)
    dest = torch.empty(X.shape, dtype=X.dtype, device=device)
    for _ in _StagedTransfers(X, chunk_rows, device, dest=dest).chunks():
        pass
    return dest


# Host tensors of at least this many bytes go to a GPU through copy_to_device's staging, in
# chunks of STAGED_COPY_CHUNK_BYTES (also the most any stream stages at a time); below it the
# staging buffers cost more than they save
STAGED_COPY_MIN_BYTES = 1 << 26
STAGED_COPY_CHUNK_BYTES = 1 << 25
# Pinned buffers (of up to STAGED_COPY_CHUNK_BYTES) filled ahead of the transfers, and device
# buffers: the chunk the consumer works on and DEVICE_BUFFERS - 1 being filled ahead of it
STAGING_BUFFERS = 4
DEVICE_BUFFERS = 3
# Host threads that fill the pinned buffers, a chunk each (torch's copy spreads one chunk over the
# cores itself); two let concurrent searches stage at once. Pinning the caller's own pages
# (cudaHostRegister) instead of copying them ran at half the copy's rate (BENCHMARKS.md).
STAGING_THREADS = 2
_staging_pool_lock = threading.Lock()
_staging_pool: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _staging_pool
    with _staging_pool_lock:
        if _staging_pool is None:
            _staging_pool = ThreadPoolExecutor(STAGING_THREADS, thread_name_prefix="gpumine-staging")
        return _staging_pool


def _forget_pool_in_child() -> None:
    # a forked child has the parent's pool object but none of its threads: tasks would never run
    global _staging_pool, _staging_pool_lock
    _staging_pool, _staging_pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def _fill(after: "torch.cuda.Event | None", dst: torch.Tensor, src: torch.Tensor) -> None:
    if after is not None:
        after.synchronize()  # the transfer that last read this staging buffer is done
    dst.copy_(src)


class _StagedTransfers:
    """Host rows to a GPU in chunks, with neither the host copy nor the link waiting for the other
    or for the consumer: host threads copy pieces of the rows ahead into pinned buffers, a
    transfer thread queues each piece's copy on a side stream as soon as it is staged (up to two
    chunks ahead of the one the consumer works on), and the consumer's stream waits for its
    chunk's copies on the device. A consumer that waits for the GPU after each chunk would
    otherwise hold back the copies of the next ones. Rows already in pinned memory are
    transferred from where they are.

    Chunks are staged in pieces of at most ``STAGED_COPY_CHUNK_BYTES``: the host's copy into
    pinned memory ran faster in pieces of that size than in whole chunks of hundreds of MB
    (BENCHMARKS.md).

    ``dest``: a device tensor of ``X``'s shape; chunks are copied into its rows instead of the
    reused device buffers.
    """

    def __init__(self, X: torch.Tensor, chunk_rows: int, device: torch.device, dest: torch.Tensor | None = None):
        self.X, self.chunk_rows, self.dest = X, chunk_rows, dest
        device = torch.device(device)
        # the transfer thread has its own current device: name it
        self.device = device if device.index is not None else torch.device("cuda", torch.cuda.current_device())
        n, tail = X.shape[0], tuple(X.shape[1:])
        self.starts = list(range(0, n, chunk_rows))
        self.direct = X.is_pinned()
        row_bytes = max(1, X[0].numel() * X.element_size()) if n else 1
        piece_rows = chunk_rows if self.direct else max(1, min(chunk_rows, STAGED_COPY_CHUNK_BYTES // row_bytes))
        # (first row, rows) of each piece, and each chunk's pieces
        self.pieces, self.chunk_pieces = [], []
        for i, start in enumerate(self.starts):
            first = len(self.pieces)
            self.pieces += [(start + a, min(piece_rows, self._rows(i) - a)) for a in range(0, self._rows(i), piece_rows)]
            self.chunk_pieces.append(range(first, len(self.pieces)))
        self.n_staging = 0 if self.direct else min(STAGING_BUFFERS, len(self.pieces))
        self.n_device = min(DEVICE_BUFFERS, len(self.starts))
        self.pinned = [torch.empty((piece_rows, *tail), dtype=X.dtype, pin_memory=True) for _ in range(self.n_staging)]
        self.on_device = None if dest is not None else [
            torch.empty((chunk_rows, *tail), dtype=X.dtype, device=self.device) for _ in range(self.n_device)]
        self.copy_stream = torch.cuda.Stream(self.device)
        self.compute_stream = torch.cuda.current_stream(self.device)
        self.read = [None] * self.n_staging  # per staging buffer: the transfer that last read it
        self.copied = [None] * self.n_device  # per device buffer: its chunk's last copy
        self.consumed = [None] * self.n_device  # per device buffer: the consumer's work on its chunk
        self.staged: dict = {}
        self.queued = [threading.Event() for _ in self.starts]  # the chunk's copies are on the side stream
        self.released = [threading.Event() for _ in self.starts]  # the consumer's work on it is queued
        self.failure: BaseException | None = None
        self.stopping = False

    def _rows(self, i: int) -> int:
        return min(self.chunk_rows, self.X.shape[0] - self.starts[i])

    def _stage(self, p: int) -> None:
        slot, (start, rows) = p % self.n_staging, self.pieces[p]
        self.staged[p] = _pool().submit(_fill, self.read[slot], self.pinned[slot][:rows], self.X[start : start + rows])

    def _transfer(self, i: int) -> None:
        """Queue chunk ``i``'s copy to the device, piece by piece as the host threads stage them."""
        dslot, chunk_start = i % self.n_device, self.starts[i]
        for p in self.chunk_pieces[i]:
            start, rows = self.pieces[p]
            if self.direct:
                source = self.X[start : start + rows]
            else:
                self.staged.pop(p).result()
                source = self.pinned[p % self.n_staging][:rows]
            if self.dest is not None:
                target = self.dest[start : start + rows]
            else:
                target = self.on_device[dslot][start - chunk_start : start - chunk_start + rows]
            with torch.cuda.stream(self.copy_stream):
                if self.consumed[dslot] is not None and p == self.chunk_pieces[i][0]:
                    self.copy_stream.wait_event(self.consumed[dslot])  # the device buffer's last reader is done
                target.copy_(source, non_blocking=True)
                event = torch.cuda.Event()
                event.record(self.copy_stream)
            if not self.direct:
                self.read[p % self.n_staging] = event
                if p + self.n_staging < len(self.pieces):
                    self._stage(p + self.n_staging)
        self.copied[dslot] = event

    def _transfer_all(self) -> None:
        """The transfer thread: every chunk in order, once its device buffer's last chunk is released."""
        try:
            with torch.cuda.device(self.device):
                for i in range(len(self.starts)):
                    if self.dest is None and i >= self.n_device:
                        self.released[i - self.n_device].wait()
                    if self.stopping:
                        return
                    self._transfer(i)
                    self.queued[i].set()
        except BaseException as failure:  # handed to the consumer's thread
            self.failure = failure
        finally:
            for queued in self.queued:
                queued.set()

    def chunks(self):
        thread = threading.Thread(target=self._transfer_all, name="gpumine-transfers", daemon=True)
        try:
            for p in range(self.n_staging):
                self._stage(p)
            thread.start()
            for i, start in enumerate(self.starts):
                self.queued[i].wait()
                if self.failure is not None:
                    raise self.failure
                dslot, rows = i % self.n_device, self._rows(i)
                self.compute_stream.wait_event(self.copied[dslot])
                yield start, (self.dest[start : start + rows] if self.dest is not None else self.on_device[dslot][:rows])
                if self.dest is None:
                    # the consumer asks for chunk i + 1: its work on chunk i is all queued
                    self.consumed[dslot] = torch.cuda.Event()
                    self.consumed[dslot].record(self.compute_stream)
                self.released[i].set()
        finally:  # abandoned early or failed: no thread may still write into the buffers afterwards
            self.stopping = True
            for released in self.released:
                released.set()
            if thread.ident is not None:
                thread.join()
            pending = list(self.staged.values())
            for fill in pending:
                fill.cancel()
            wait(pending)


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
