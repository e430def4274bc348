"""Device, backend, working-memory and output-type selection shared by every part of gpumine.

Settings live in one process-wide dictionary; :func:`config_context` changes
them for a ``with`` block (thread-local, as scikit-learn's ``config_context``).
Every estimator also takes ``device=``/``backend=``/``working_memory=`` and
resolves them through :func:`resolve_device`, :func:`resolve_backend` and
:func:`working_memory_bytes`, so the rules below hold everywhere:

* ``device="auto"`` picks the first CUDA GPU when torch sees one, else the CPU.
  An explicit ``"cuda"`` / ``"cuda:N"`` that cannot be met raises ``ValueError``;
  it never silently falls back to the CPU.
* ``backend="auto"`` picks Triton kernels on a CUDA device when Triton imports,
  else the torch implementation. An explicit ``"triton"`` that cannot be met
  raises.
* ``working_memory`` is a budget in MiB for the temporaries of one tile of work
  (``None``: 1024 MiB on the CPU, a quarter of the free GPU memory capped at
  4096 MiB on a GPU). It bounds what grows with the tiles (score blocks,
  candidate lists, sort buffers), not the copies of the data a search keeps
  for its whole length: the outputs (queries x k distances and indices), and
  the references as the search prepares them -- on the CPU a float64 copy and
  a KD-tree or the float32 product rows (about two to three times the data's
  size); on a GPU the references kept resident with one prepared copy (about
  twice their size in all; resident only where three times their size fits
  the device, else streamed from the host in tiles of this budget), one hash
  per row while duplicates are looked for and, for dense L2 searches, a
  float64 copy. What a kernel launch copies of the references beyond that
  (split operands, a space-filling-curve order) stays within the budget: past
  it the references go in several launches. Data of float32 that float32 cannot square exactly is searched in a
  float64 copy.
* ``output_type`` is the kind of array that methods and functions return
  (only :func:`set_config` / :func:`config_context`, as cuML's). ``"input"``
  (the default) returns the caller's kind: NumPy for NumPy, lists and pandas;
  a torch tensor on the input's device for a tensor; CuPy for CuPy (and cuDF);
  for other ``__dlpack__`` / ``__cuda_array_interface__`` arrays, their own
  kind where gpumine can build it (Numba; JAX and other array-API arrays
  through their namespace's ``from_dlpack``), else a torch tensor on their
  device. ``"numpy"`` and ``"pandas"`` return host arrays (pandas: a
  DataFrame for 2-D results, a Series for 1-D ones, with a default index);
  ``"torch"`` a tensor where the input lay (host data: a CPU tensor; a GPU
  array: on its GPU); ``"cupy"`` a CuPy array (on the input's GPU, else where
  the result was computed, else the current CuPy device; needs CuPy). It
  applies to what methods and functions return (``predict``,
  ``kneighbors``, ``fit_predict``, ``score_samples``, ...), not to fitted
  attributes (``negative_outlier_factor_``, ``labels_``, ...), which keep the
  kind of the data passed to ``fit``, as before. Results that are not arrays
  of numbers keep their form: sparse graphs (SciPy), ``radius_neighbors``'
  per-row object arrays, and class labels that are strings (NumPy; a Series
  under ``"pandas"``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import threading
from typing import TYPE_CHECKING

# torch (seconds to import) is imported by the functions that use it, so ``import gpumine``
# and the command line's --help and usage errors start without it
if TYPE_CHECKING:
    import torch

__all__ = [
    "get_config",
    "set_config",
    "config_context",
    "resolve_device",
    "resolve_backend",
    "working_memory_bytes",
    "triton_available",
]

_DEFAULTS = {"device": "auto", "backend": "auto", "working_memory": None, "verbose": 1, "output_type": "input"}
_BACKENDS = ("auto", "torch", "triton")
OUTPUT_TYPES = ("input", "numpy", "torch", "cupy", "pandas")
_local = threading.local()


def _settings() -> dict:
    if not hasattr(_local, "settings"):
        _local.settings = dict(_DEFAULTS)
    return _local.settings


def get_config() -> dict:
    """Return a copy of the current settings.

    Examples
    --------
    >>> import gpumine
    >>> sorted(gpumine.get_config())
    ['backend', 'device', 'output_type', 'verbose', 'working_memory']
    """
    return dict(_settings())


def set_config(device=None, backend=None, working_memory=None, verbose=None, output_type=None) -> None:
    """Change the process-wide defaults; ``None`` leaves a setting unchanged.

    ``output_type`` is one of ``"input"`` (results in the caller's kind, the
    default), ``"numpy"``, ``"torch"``, ``"cupy"`` or ``"pandas"`` (see the
    module docstring).

    Examples
    --------
    >>> import numpy as np, torch, gpumine
    >>> from gpumine.neighbors import kneighbors
    >>> with gpumine.config_context(output_type="torch"):
    ...     kneighbors(np.array([[0.0], [1.0], [3.0]]), k=1, device="cpu", return_distance=False)
    tensor([[1],
            [0],
            [1]])
    """
    new = {"device": device, "backend": backend, "working_memory": working_memory, "verbose": verbose,
           "output_type": output_type}
    new = {k: v for k, v in new.items() if v is not None}
    if "device" in new:
        _check_device_spec(new["device"])
    if "backend" in new:
        _check_backend_spec(new["backend"])
    if "working_memory" in new:
        _check_working_memory(new["working_memory"])
    if "output_type" in new:
        _check_output_type(new["output_type"])
    _settings().update(new)


@contextlib.contextmanager
def config_context(**settings):
    """Temporarily change settings inside a ``with`` block.

    Examples
    --------
    >>> import gpumine
    >>> with gpumine.config_context(device="cpu", working_memory=64):
    ...     gpumine.get_config()["working_memory"]
    64
    """
    unknown = set(settings) - set(_DEFAULTS)
    if unknown:
        raise TypeError(
            f"config_context got unknown setting(s) {sorted(unknown)}; "
            f"expected some of {sorted(_DEFAULTS)}"
        )
    old = get_config()
    set_config(**settings)
    try:
        yield
    finally:
        _settings().clear()
        _settings().update(old)


def _check_device_spec(device) -> None:
    import torch

    if isinstance(device, torch.device):
        return
    if not isinstance(device, str):
        raise TypeError(
            f"device must be 'auto', 'cpu', 'cuda', 'cuda:N' or a torch.device; got {device!r} "
            f"of type {type(device).__name__}"
        )
    if device == "auto":
        return
    try:
        torch.device(device)
    except (RuntimeError, ValueError):
        raise ValueError(
            f"device={device!r} is not a device name; use 'auto', 'cpu', 'cuda' or 'cuda:N'"
        ) from None


def _check_backend_spec(backend) -> None:
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}; got {backend!r}")


def _check_output_type(output_type) -> None:
    if not isinstance(output_type, str) or output_type not in OUTPUT_TYPES:
        raise ValueError(f"output_type must be one of {OUTPUT_TYPES}; got {output_type!r}")
    if output_type == "cupy" and importlib.util.find_spec("cupy") is None:
        raise ImportError("output_type='cupy' needs CuPy, which is not installed; install it (e.g. pip install "
                          "cupy-cuda12x) or choose another output_type: 'input', 'numpy', 'torch' or 'pandas'")


def _check_working_memory(working_memory) -> None:
    if working_memory is None:
        return
    if (isinstance(working_memory, bool) or not isinstance(working_memory, (int, float)) or not working_memory > 0
            or not math.isfinite(working_memory)):
        raise ValueError(
            f"working_memory must be a positive, finite number of MiB or None; got {working_memory!r}"
        )


def resolve_device(device=None) -> torch.device:
    """Turn a device spec (``None`` means the configured default) into a ``torch.device``.

    Raises ``ValueError`` when an explicitly requested GPU is not available.

    Examples
    --------
    >>> resolve_device("cpu")
    device(type='cpu')
    """
    import torch

    if device is None:
        device = _settings()["device"]
    _check_device_spec(device)
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device={str(device)!r} was requested but torch sees no CUDA GPU "
                f"(torch {torch.__version__}); use device='cpu' or device='auto'"
            )
        index = torch.cuda.current_device() if dev.index is None else dev.index
        if index >= torch.cuda.device_count():
            raise ValueError(
                f"device={str(device)!r} was requested but only {torch.cuda.device_count()} "
                f"CUDA device(s) exist; use an index below {torch.cuda.device_count()}"
            )
        return torch.device("cuda", index)
    if dev.type != "cpu":
        raise ValueError(f"device={str(device)!r} is not supported; use 'auto', 'cpu', 'cuda' or 'cuda:N'")
    return dev


def triton_available(device: torch.device | None = None) -> bool:
    """True when Triton can run kernels on ``device`` (a CUDA GPU, or any device under ``TRITON_INTERPRET=1``)."""
    if importlib.util.find_spec("triton") is None:
        return False
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True
    return device is not None and device.type == "cuda"


def resolve_backend(backend=None, device: torch.device | None = None, *, has_triton_kernel: bool = True) -> str:
    """Return ``"torch"`` or ``"triton"`` for work on ``device``.

    ``has_triton_kernel`` says whether the operation at hand has a Triton
    version; ``"auto"`` then chooses Triton only on a CUDA device (the CPU
    interpreter is for tests, never picked automatically).
    """
    if backend is None:
        backend = _settings()["backend"]
    _check_backend_spec(backend)
    if backend == "torch":
        return "torch"
    if backend == "auto":
        ok = has_triton_kernel and device is not None and device.type == "cuda" and triton_available(device)
        return "triton" if ok else "torch"
    if not has_triton_kernel:
        raise ValueError("backend='triton' was requested but this operation has no Triton kernel; use backend='torch' or 'auto'")
    if not triton_available(device):
        raise ValueError(
            f"backend='triton' was requested on device {device} but Triton cannot run there "
            "(needs a CUDA GPU and the 'triton' package, or TRITON_INTERPRET=1 for the CPU "
            "interpreter); use backend='torch' or 'auto'"
        )
    return "triton"


def working_memory_bytes(working_memory=None, device: torch.device | None = None) -> int:
    """Return the tile budget in bytes (see the module docstring for the default)."""
    if working_memory is None:
        working_memory = _settings()["working_memory"]
    _check_working_memory(working_memory)
    if working_memory is not None:
        return int(working_memory * 2**20)
    if device is not None and device.type == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info(device)
        return int(min(free // 4, 4096 * 2**20))
    return 1024 * 2**20


def verbosity(verbose=None) -> int:
    """Return the verbosity level (``None``: the configured default)."""
    return int(_settings()["verbose"] if verbose is None else verbose)
