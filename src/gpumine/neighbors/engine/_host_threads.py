"""Threads of the host kNN path: torch and BLAS held to one thread while a search runs, and row blocks split over a kept pool.

Many short torch operations split over threads each end in a barrier, and on a
busy host a descheduled worker holds every barrier for milliseconds: the host
searches (:mod:`._host`) run torch and NumPy's BLAS (the float32 products) on
one thread each and split their row blocks over threads here instead.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading

import torch


_THREADS_LOCK = threading.Lock()
_threads_state = {"active": 0, "saved": None, "blas": None}
_blas = {"controller": None, "looked": False}


def _blas_controller():
    """threadpoolctl's view of NumPy's BLAS (found once), or None where threadpoolctl is missing."""
    if not _blas["looked"]:
        _blas["looked"] = True
        try:  # NumPy (imported by the host path) has loaded its BLAS: the controller finds it
            from threadpoolctl import ThreadpoolController

            _blas["controller"] = ThreadpoolController().select(user_api="blas")
        except Exception:  # missing, too old (no ThreadpoolController) or failing: BLAS keeps its threads
            return None
    return _blas["controller"]


def _release_blas_control() -> None:
    """Let any thread set OpenBLAS's threads next: threadpoolctl hands that to the first thread that sets them
    and takes it back only when a ``with`` block of that thread ends, while a search's first thread in and
    last thread out may differ."""
    try:
        from threadpoolctl import OpenBLASController
    except ImportError:
        return
    release = getattr(OpenBLASController, "clear_controlling_thread", None)
    if release is not None:
        release(force=True)


@contextlib.contextmanager
def _one_torch_thread():
    """Torch's intra-op threads set to one while any search runs (the first in saves the
    setting, the last out restores it, so overlapping searches from several threads
    leave it as they found it)."""
    with _THREADS_LOCK:
        if _threads_state["active"] == 0:
            _threads_state["saved"] = torch.get_num_threads()
            if _threads_state["saved"] != 1:
                torch.set_num_threads(1)
            blas = _blas_controller()
            if blas is not None and blas.lib_controllers:
                _release_blas_control()
                _threads_state["blas"] = blas.limit(limits=1)
                _release_blas_control()
        _threads_state["active"] += 1
    try:
        yield
    finally:
        with _THREADS_LOCK:
            _threads_state["active"] -= 1
            if _threads_state["active"] == 0:
                if _threads_state["saved"] not in (None, 1):
                    torch.set_num_threads(_threads_state["saved"])
                if _threads_state["blas"] is not None:
                    _release_blas_control()
                    _threads_state["blas"].restore_original_limits()
                    _release_blas_control()
                    _threads_state["blas"] = None


_POOL_LOCK = threading.Lock()
_pool_state = {"pool": None, "workers": 0}


def _thread_pool(workers: int) -> concurrent.futures.ThreadPoolExecutor:
    """One executor kept for every search: starting threads per call cost milliseconds on a busy host."""
    with _POOL_LOCK:
        if _pool_state["pool"] is None or _pool_state["workers"] < workers:
            _pool_state["pool"] = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="gpumine-cpu-search")
            _pool_state["workers"] = workers
        return _pool_state["pool"]


def _run_blocks(work, blocks, workers: int) -> list:
    """``[work(b) for b in blocks]``, on up to ``workers`` threads (torch and SciPy release the GIL)."""
    if workers <= 1 or len(blocks) <= 1:
        return [work(b) for b in blocks]
    return list(_thread_pool(workers).map(work, blocks))


# Tree searches of fewer (query rows x neighbours) run on one thread: blocks of a few
# milliseconds gain less from a second thread than they lose to the GIL
_PARALLEL_MIN_TREE = 1 << 14
# Product searches of fewer multiply-adds (query rows x padded references x features) run
# on one thread likewise
_PARALLEL_MIN_GEMM = 1 << 24


def _split(n: int, block: int, workers: int, min_rows: int = 256) -> list:
    """Row ranges of at most ``block`` rows; with several workers, a few ranges each (load balance)."""
    if workers > 1:
        block = max(1, min(block, max(min_rows, -(-n // (4 * workers)))))
    return [(s, min(n, s + block)) for s in range(0, n, block)]
