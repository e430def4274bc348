"""A local Dask cluster laid out for this machine: one worker per GPU, else CPU workers."""

from __future__ import annotations

import os

__all__ = ["local_cluster"]


def _gpu_count() -> int:
    """GPUs visible to this process, counted without creating a CUDA context (which would pin workers to GPU 0)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    try:
        import pynvml  # nvidia-ml-py: counts devices through the driver, no CUDA context

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML: fall back to torch, which counts without a context too
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0


def local_cluster(n_workers: int | None = None, *, gpus: bool | None = None, **kwargs):
    """A ``distributed`` cluster for this machine: one worker per GPU, or CPU workers.

    With GPUs (``gpus=None``: when there are any), dask-cuda's ``LocalCUDACluster``
    when it is installed, else one Nanny per GPU with its own
    ``CUDA_VISIBLE_DEVICES`` (a ``SpecCluster``); ``n_workers`` takes the first
    ``n_workers`` GPUs. Without, a ``LocalCluster`` of
    ``n_workers`` single-threaded processes (default: the CPU count). Call it
    before anything creates a CUDA context in this process. ``kwargs`` go to the
    cluster class. Use it as ``with local_cluster() as cluster, Client(cluster): ...``.
    """
    import distributed

    n_gpus = _gpu_count()
    if gpus is None:
        gpus = n_gpus > 0
    if gpus:
        if n_gpus == 0:
            raise ValueError("gpus=True but no GPU is visible (CUDA_VISIBLE_DEVICES / the driver); use gpus=False")
        try:
            from dask_cuda import LocalCUDACluster

            if n_workers is not None:  # the first n_workers GPUs
                kwargs.setdefault("n_workers", n_workers)
            return LocalCUDACluster(**kwargs)
        except ImportError:
            pass
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        devices = [d.strip() for d in visible.split(",")] if visible else [str(i) for i in range(n_gpus)]
        chosen = devices[: n_workers or len(devices)]
        # Each worker gets its share of the host: a Nanny's default memory limit is the host's
        # memory times its threads over all cores (1/32 of it on a 32-core host, below what the
        # float64 keys of a large shard's neighbour lists take on the host), and the worker's
        # host-side steps (merge keys, counts) may use its share of the cores.
        from distributed.system import MEMORY_LIMIT

        cores = str(max(1, (os.cpu_count() or 1) // len(chosen)))
        workers = {f"gpu-{d}": {"cls": distributed.Nanny,
                                "options": {"nthreads": 1, "memory_limit": MEMORY_LIMIT // len(chosen),
                                            "env": {"CUDA_VISIBLE_DEVICES": d}}}
                   for d in chosen}
        scheduler = {"cls": distributed.Scheduler, "options": {"dashboard_address": kwargs.pop("dashboard_address", None)}}
        # thread counts go in before a worker process starts (torch reads them at import; set in
        # a Nanny's env they come too late); Dask's own pre-spawn default is one thread
        import dask

        spawn_env = {f"distributed.nanny.pre-spawn-environ.{name}": cores for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
        with dask.config.set(spawn_env):
            return distributed.SpecCluster(workers=workers, scheduler=scheduler, **kwargs)
    kwargs.setdefault("dashboard_address", None)
    return distributed.LocalCluster(n_workers=n_workers or os.cpu_count() or 1, threads_per_worker=1, **kwargs)
