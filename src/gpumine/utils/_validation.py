"""Every user input becomes a tensor here, with errors that name the parameter and the fix.

Accepted: NumPy arrays (read-only ones and memmaps too, without a copy where
the dtype already fits), torch tensors on any device, pandas DataFrames and
Series, nested lists, and GPU (or host) arrays of other libraries: anything
with ``__dlpack__``/``__dlpack_device__`` (CuPy, JAX, ...) is wrapped by
:func:`torch.from_dlpack` and anything with ``__cuda_array_interface__``
(Numba) by :func:`torch.as_tensor`, without a copy and on their own device; a
cuDF frame is read with its ``to_cupy`` (a copy on the GPU, never through the
host). Floating data keeps float64 when given float64 and becomes float32
otherwise (the exactness contract is float32 by default).

:func:`output_kind` remembers what the caller passed and :func:`to_output`
hands a result back as the configured ``output_type`` (:mod:`gpumine.config`),
by default the caller's kind: NumPy in, NumPy out; a (CUDA) tensor in, a tensor
on that device out; CuPy (or cuDF) in, CuPy out; Numba in, Numba out; an array
with an array-API namespace (JAX) in, that namespace's ``from_dlpack`` of the
result out; other DLPack objects in, a torch tensor on their device out.
Fitted attributes are converted by :func:`to_attribute`: always the input's
kind, whatever ``output_type`` says (see :mod:`gpumine.config`).
"""

from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from .. import config as _config  # a leaf module: read at every result, so imported once here

__all__ = [
    "check_array",
    "check_labels",
    "check_n_neighbors",
    "check_n_features",
    "output_kind",
    "to_output",
    "to_outputs",
    "to_attribute",
    "labels_to_output",
    "result_device",
    "is_device_array",
    "device_array_to_tensor",
    "HostScoreMixin",
    "OutputKind",
]


@dataclass(frozen=True)
class OutputKind:
    """What the caller passed, so a result can go back in that kind (see :func:`to_output`).

    ``kind`` is ``"numpy"`` (NumPy, lists, pandas and anything else read on
    the host), ``"torch"`` (a tensor on ``device``; also DLPack objects of no
    known library), ``"cupy"`` (CuPy, cuDF), ``"numba"`` (a Numba device
    array) or ``"array_api"`` (an array whose ``__array_namespace__()`` --
    the module named ``namespace`` -- has ``from_dlpack``, e.g. JAX).
    ``device`` is where the input lay (``None`` for host kinds, or where it
    could not be told).
    """

    kind: str
    device: torch.device | None = None
    namespace: str | None = None  # a module name, not the module: estimators keep their kind and pickle


# DLPack device types (dlpack.h): kDLCPU, kDLCUDA, kDLCUDAHost, kDLROCM, kDLCUDAManaged
_DLPACK_HOST = (1, 3)
_DLPACK_GPU = (2, 10, 13)


def _library(X) -> str:
    return type(X).__module__.split(".")[0]


def is_device_array(X) -> bool:
    """Whether ``X`` is an array of another library that gpumine reads through DLPack, the CUDA array interface
    or cuDF (NumPy arrays and torch tensors are not: they have their own paths)."""
    if isinstance(X, (np.ndarray, torch.Tensor)):
        return False
    return _library(X) == "cudf" or hasattr(X, "__dlpack__") or hasattr(X, "__cuda_array_interface__")


def _array_device(X) -> torch.device | None:
    """Where a DLPack / CUDA-array-interface object lies, without converting it; None when unknown."""
    try:
        if hasattr(X, "__dlpack_device__"):
            dev_type, dev_id = X.__dlpack_device__()
            if int(dev_type) in _DLPACK_GPU:
                return torch.device("cuda", int(dev_id))
            return torch.device("cpu") if int(dev_type) in _DLPACK_HOST else None
        if hasattr(X, "__cuda_array_interface__") and torch.cuda.is_available():
            return torch.as_tensor(X).device  # wraps, copies nothing
    except Exception:  # output_kind never raises: check_array reports what is wrong with X
        return None
    return None


def _namespace_name(X) -> str | None:
    """The module name of ``X.__array_namespace__()`` when that namespace can build arrays with ``from_dlpack``."""
    get = getattr(X, "__array_namespace__", None)
    if get is None:
        return None
    try:
        namespace = get()
    except Exception:
        return None
    name = getattr(namespace, "__name__", None)
    return name if name and hasattr(namespace, "from_dlpack") else None


def output_kind(X) -> OutputKind:
    """Return the :class:`OutputKind` matching the caller's input ``X``."""
    if isinstance(X, torch.Tensor):
        return OutputKind("torch", X.device)
    if not is_device_array(X):
        return OutputKind("numpy")
    library = _library(X)
    if library in ("cupy", "cudf"):  # cuDF in, CuPy out: the GPU's counterpart of DataFrame in, ndarray out
        return OutputKind("cupy", _array_device(X))
    device = _array_device(X)
    if library == "numba":
        return OutputKind("numba", device)
    namespace = _namespace_name(X)
    if namespace is not None:
        return OutputKind("array_api", device, namespace)
    return OutputKind("torch", device)


def _output_type() -> str:
    return _config._settings()["output_type"]


def _effective(kind: OutputKind, output_type: str) -> str:
    return kind.kind if output_type == "input" else output_type


def result_device(kind: OutputKind, compute_device: torch.device | None = None) -> torch.device:
    """Where a function should leave its results so that :func:`to_output` moves nothing it need not."""
    target = _effective(kind, _output_type())
    if target in ("numpy", "pandas"):
        return _HOST
    if kind.kind != "numpy" and kind.device is not None:
        return kind.device
    if target == "cupy" and compute_device is not None and compute_device.type == "cuda":
        return compute_device
    return _HOST


_HOST = torch.device("cpu")  # devices are immutable: one object serves every call


def to_output(tensor: torch.Tensor, kind: OutputKind):
    """Convert a result tensor to the configured ``output_type`` (by default the caller's kind, see
    :func:`output_kind`). Every method and function result goes through here."""
    return _convert(tensor, kind, _output_type())


def to_outputs(kind: OutputKind, *tensors: torch.Tensor) -> tuple:
    """:func:`to_output` of several results of one call, the configured ``output_type`` read once."""
    output_type = _output_type()
    return tuple(_convert(t, kind, output_type) for t in tensors)


def to_attribute(tensor: torch.Tensor, kind: OutputKind):
    """Convert a fitted attribute to the kind of the data it was fitted on, whatever ``output_type`` says."""
    return _convert(tensor, kind, "input")


def labels_to_output(labels: np.ndarray, kind: OutputKind):
    """Class labels (a NumPy array of the classes seen in fit) in the configured ``output_type``.

    Labels that are not numbers (strings, objects) have no tensor or GPU array
    form: they stay a NumPy array unless ``output_type="pandas"``.
    """
    output_type = _output_type()
    target = _effective(kind, output_type)
    if target == "numpy":
        return labels
    if target == "pandas":
        return _to_pandas(labels)
    if labels.dtype.kind not in "biuf":
        return labels
    try:
        tensor = torch.as_tensor(labels)
    except (TypeError, RuntimeError):  # a dtype torch lacks
        return labels
    return _convert(tensor, kind, output_type)


def _to_pandas(arr: np.ndarray):
    import pandas as pd

    if arr.ndim == 1:
        return pd.Series(arr)
    if arr.ndim == 2:
        return pd.DataFrame(arr)
    return arr


def _import_cupy():
    try:
        import cupy
    except ImportError as exc:
        raise ImportError(
            f"output_type='cupy' needs CuPy, which did not import ({exc}); install it (e.g. pip install "
            "cupy-cuda12x) or choose another output_type: 'input', 'numpy', 'torch' or 'pandas'"
        ) from None
    return cupy


def _as_cupy(tensor: torch.Tensor, device: torch.device | None):
    cupy = _import_cupy()
    if device is not None and device.type == "cuda":
        tensor = tensor.to(device)
    tensor = tensor.detach()
    if tensor.device.type != "cuda":  # host results asked for as CuPy: one copy to the current GPU
        return cupy.asarray(tensor.cpu().numpy())
    try:
        return cupy.from_dlpack(tensor)
    except (AttributeError, TypeError, BufferError, RuntimeError, ValueError):
        return cupy.asarray(tensor)  # an older CuPy, or a dtype its DLPack import lacks: the CUDA array interface


def _convert(tensor: torch.Tensor, kind: OutputKind, output_type: str):
    target = _effective(kind, output_type)
    if target == "numpy":
        return tensor.detach().cpu().numpy()
    if target == "pandas":
        return _to_pandas(tensor.detach().cpu().numpy())
    device = kind.device if kind.kind != "numpy" else None
    if target == "cupy":
        return _as_cupy(tensor, device)
    if target == "torch":  # where the input lay: host data gives a host tensor, GPU arrays a tensor on their GPU
        if kind.kind == "numpy":
            return tensor.cpu()
        return tensor if device is None else tensor.to(device)
    on_device = tensor.detach() if device is None else tensor.detach().to(device)
    if target == "numba":
        from numba import cuda

        return cuda.as_cuda_array(on_device)
    if target == "array_api":
        namespace = importlib.import_module(kind.namespace)
        try:
            return namespace.from_dlpack(on_device)
        except Exception as exc:
            raise TypeError(
                f"the result could not be returned as {kind.namespace} ({kind.namespace}.from_dlpack failed: {exc}); "
                "set gpumine.set_config(output_type='torch') (or 'numpy') to receive it as a tensor"
            ) from None
    raise ValueError(f"unknown output kind {target!r}")  # pragma: no cover - config validates output_type


def _host(values):
    """Labels or weights as NumPy when they are a tensor or another library's array (scikit-learn's metrics read
    host arrays); anything else unchanged."""
    if isinstance(values, torch.Tensor):
        return values.detach().cpu().numpy()
    if is_device_array(values) and _library(values) != "cudf":
        values = _to_numpy_or_tensor(values, "y")
        return values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else values
    return values


class HostScoreMixin:
    """``score`` as scikit-learn's classifier and regressor mixins compute it, on NumPy predictions whatever
    ``output_type`` is and whatever kind ``X`` is (scikit-learn's metrics take host arrays). It precedes those
    mixins among an estimator's bases."""

    def score(self, X, y, sample_weight=None):
        """scikit-learn's score of ``predict(X)`` against ``y``: the mean accuracy for a classifier, R^2 for a
        regressor (``sample_weight`` weights the rows). ``X`` and ``y`` may be of any accepted kind."""
        from ..config import config_context

        with config_context(output_type="numpy"):
            return super().score(X, _host(y), sample_weight=_host(sample_weight))


def _type_name(X) -> str:
    return f"{type(X).__module__}.{type(X).__name__}".replace("builtins.", "")


def _to_numpy_or_tensor(X, name: str):
    """Bring any accepted container to a NumPy array or a torch tensor, without copying where possible."""
    if isinstance(X, torch.Tensor):
        return X
    if _library(X) == "cudf":  # before pandas: cuDF frames have to_numpy too, which copies to the host
        return device_array_to_tensor(X, name)
    if hasattr(X, "toarray") and hasattr(X, "nnz"):  # scipy.sparse
        raise TypeError(
            f"{name}: sparse input ({_type_name(X)}) is not supported; convert it with {name}.toarray()"
        )
    if hasattr(X, "to_numpy") and hasattr(X, "dtypes"):  # pandas DataFrame / Series
        dtypes = list(X.dtypes) if hasattr(X.dtypes, "__iter__") else [X.dtypes]
        if any(getattr(t, "kind", "") == "c" for t in dtypes):
            raise ValueError(f"Complex data not supported: {name} has complex columns; pass real numbers")
        # float32 columns only: float32, as a float32 array would be; else float64, as scikit-learn
        all_float32 = all(str(t) in ("float32", "Float32", "float16") for t in dtypes)
        try:
            arr = X.to_numpy(dtype=np.float64, na_value=np.nan)
            return arr.astype(np.float32) if all_float32 else arr
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"{name}: the DataFrame has non-numeric columns ({exc}); encode them as numbers "
                "first (e.g. pandas.get_dummies or an OrdinalEncoder)"
            ) from None
    if isinstance(X, np.ndarray):
        return X
    if hasattr(X, "__cuda_array_interface__") or (hasattr(X, "__dlpack__") and hasattr(X, "__dlpack_device__")):
        return device_array_to_tensor(X, name)
    try:
        arr = np.asarray(X)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{name} could not be read as an array ({exc}); pass a 2-D array with rows of equal length"
        ) from None
    return arr


def _gpu_without_cuda(X, name: str) -> ValueError:
    return ValueError(
        f"{name} ({_type_name(X)}) lies in GPU memory but torch sees no CUDA GPU (torch {torch.__version__}); "
        f"install a CUDA build of torch, or copy {name} to the host first (e.g. cupy.asnumpy({name}))"
    )


def _has_negative_strides(X) -> bool:
    strides = getattr(X, "strides", None)
    if strides is None and hasattr(X, "__cuda_array_interface__"):
        try:
            strides = X.__cuda_array_interface__.get("strides")
        except Exception:
            strides = None
    try:
        return strides is not None and any(int(s) < 0 for s in strides)
    except (TypeError, ValueError):
        return False


def device_array_to_tensor(X, name: str = "X"):
    """A torch tensor sharing the memory of ``X`` (``__dlpack__`` or ``__cuda_array_interface__``), on its device.

    DLPack is preferred (it carries the device and orders the producer's
    stream before torch's); the CUDA array interface serves objects that have
    only it (Numba). A host DLPack object gives a host tensor. Views with
    negative strides, which torch cannot wrap, are first copied by the array's
    own ``copy()`` (on its device). A cuDF frame is read by :func:`_from_cudf`. A
    host object that torch cannot import comes back as a NumPy array.
    """
    if _library(X) == "cudf":
        return _from_cudf(X, name)
    if _has_negative_strides(X):
        if not hasattr(X, "copy"):
            raise ValueError(f"{name} ({_type_name(X)}) has negative strides, which torch cannot wrap; pass a "
                             f"contiguous copy of it")
        X = X.copy()
    if hasattr(X, "__dlpack__") and hasattr(X, "__dlpack_device__"):
        try:
            dev_type = int(X.__dlpack_device__()[0])
        except Exception as exc:
            raise ValueError(f"{name} ({_type_name(X)}) did not say where it lies (__dlpack_device__ failed: {exc}); "
                             "pass a NumPy array or a torch tensor") from None
        if dev_type in _DLPACK_GPU and not torch.cuda.is_available():
            raise _gpu_without_cuda(X, name)
        try:
            return torch.from_dlpack(X)
        except (BufferError, RuntimeError, TypeError, ValueError) as exc:
            if dev_type in _DLPACK_HOST and hasattr(X, "__array__"):
                return np.asarray(X)  # a host array torch cannot import: read it as NumPy (the caller converts)
            if not hasattr(X, "__cuda_array_interface__"):
                raise ValueError(f"{name} ({_type_name(X)}) could not be shared with torch through DLPack ({exc}); "
                                 "pass a torch tensor, a CuPy array or a NumPy array") from None
    if not torch.cuda.is_available():
        raise _gpu_without_cuda(X, name)
    try:
        return torch.as_tensor(X)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise ValueError(f"{name} ({_type_name(X)}) could not be shared with torch through the CUDA array interface "
                         f"({exc}); pass a torch tensor, a CuPy array or a NumPy array") from None


def _from_cudf(X, name: str) -> torch.Tensor:
    """A cuDF DataFrame or Series as a tensor on its GPU: float32 when every column is, else float64 (as pandas)."""
    dtypes = list(X.dtypes) if hasattr(X.dtypes, "__iter__") else [X.dtypes]
    if any(getattr(t, "kind", "") == "c" for t in dtypes):
        raise ValueError(f"Complex data not supported: {name} has complex columns; pass real numbers")
    target = np.float32 if all(str(t) in ("float32", "float16") for t in dtypes) else np.float64
    try:
        arr = X.to_cupy(dtype=target, na_value=np.nan)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{name}: the cuDF frame could not be read as numbers ({exc}); encode non-numeric columns as numbers first"
        ) from None
    return device_array_to_tensor(arr, name)


def all_finite(tensor: torch.Tensor) -> bool:
    """Whether every value is finite; host float data is checked by NumPy.

    On the host NumPy's ``isfinite`` is much faster than torch's, and this check
    is a fixed cost of every call that takes NumPy input (BENCHMARKS.md, "Design
    measurements quoted in the code").
    """
    if tensor.device.type == "cpu" and tensor.dtype in (torch.float32, torch.float64):
        return bool(np.isfinite(tensor.detach().numpy()).all())
    return bool(torch.isfinite(tensor).all())


def _numpy_to_float(arr: np.ndarray, name: str, dtype) -> np.ndarray:
    if np.iscomplexobj(arr):
        raise ValueError(f"Complex data not supported: {name} is complex; pass real numbers (e.g. {name}.real)")
    if arr.dtype.kind in "OUS":
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise type(exc)(
                f"{name} holds non-numeric values ({exc}); encode strings/categories as numbers first"
            ) from None
    elif arr.dtype.kind not in "biuf":
        raise ValueError(f"{name} has dtype {arr.dtype}, which is not numeric; pass numbers")
    target = dtype or (np.float32 if arr.dtype in (np.float32, np.float16) else np.float64)
    if arr.dtype != target:
        arr = arr.astype(target)
    return arr


# NumPy dtypes check_array wraps as they are (native byte order: torch cannot wrap swapped bytes)
_NATIVE_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_NUMPY_OF = {torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64)}

# torch's integer and boolean dtypes (the unsigned 16-64 bit ones arrive from DLPack and exist in newer torch)
_INTEGER_DTYPES = tuple(
    getattr(torch, name) for name in ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64")
    if hasattr(torch, name)
)


def check_array(
    X,
    *,
    name: str = "X",
    dtype: torch.dtype | None = None,
    ensure_2d: bool = True,
    allow_empty: bool = False,
    allow_nan: bool = False,
) -> torch.Tensor:
    """Validate ``X`` and return it as a floating torch tensor.

    The tensor stays where the data is (host memory for NumPy/pandas/lists,
    the input's device for tensors and GPU arrays); moving it is the caller's job, so data
    larger than the GPU can stream in tiles.

    Parameters
    ----------
    X : array-like, torch.Tensor, or an array with ``__dlpack__`` or ``__cuda_array_interface__``
        Arrays of other libraries (CuPy, JAX, Numba, cuDF) are wrapped without
        a copy, on their device (see the module docstring).
    name : str
        The parameter name used in error messages.
    dtype : torch.float32, torch.float64 or None
        ``None`` computes float32 (and float16) input as float32 and everything
        else (float64, integers, booleans, lists) as float64, as scikit-learn
        does: integers above 2^24 are not rounded.
    ensure_2d : bool
        Require a 2-D ``(n_samples, n_features)`` input.
    allow_empty : bool
        Accept zero rows.
    allow_nan : bool
        Accept NaN and infinity.

    Examples
    --------
    >>> check_array([[1, 2], [3, 4]]).dtype
    torch.float64
    >>> check_array(np.ones((2, 2), dtype=np.float32)).dtype
    torch.float32
    >>> check_array([[float("nan"), 1.0]])
    Traceback (most recent call last):
    ...
    ValueError: X contains NaN or infinity (1 non-finite value(s), first at row 0); remove or impute them (e.g. sklearn.impute.SimpleImputer)
    """
    if (type(X) is np.ndarray and X.dtype in _NATIVE_FLOATS and X.ndim == 2 and X.shape[0] and X.shape[1]
            and (dtype is None or _NUMPY_OF.get(dtype) == X.dtype) and X.flags.writeable and min(X.strides) >= 0):
        # the common input, a writable 2-D float32/float64 array, wrapped as the general path below would
        # wrap it (it passes every check there), without that path's dispatch: a fixed cost of every call
        tensor = torch.from_numpy(X)
        if not allow_nan and not all_finite(tensor):
            raise non_finite_error(tensor, name)
        return tensor
    if X is None:
        raise ValueError(f"{name} is None; pass an array of shape (n_samples, n_features)")
    data = _to_numpy_or_tensor(X, name)
    if isinstance(data, np.ndarray):
        if any(stride < 0 for stride in data.strides):  # torch cannot wrap reversed views
            data = np.ascontiguousarray(data)
        np_dtype = None if dtype is None else {torch.float32: np.float32, torch.float64: np.float64}[dtype]
        data = _numpy_to_float(data, name, np_dtype)
        with warnings.catch_warnings():
            # read-only arrays (memmaps) are wrapped without a copy; gpumine never writes to inputs
            warnings.simplefilter("ignore", UserWarning)
            tensor = torch.from_numpy(data) if data.dtype.isnative else torch.from_numpy(data.astype(data.dtype.newbyteorder("=")))
    else:
        tensor = data
        if tensor.is_complex():
            raise ValueError(f"Complex data not supported: {name} is complex; pass real numbers (e.g. {name}.real)")
        numeric = tensor.is_floating_point() or tensor.dtype in _INTEGER_DTYPES
        if not numeric:
            raise ValueError(f"{name} has dtype {tensor.dtype}, which is not numeric; pass numbers")
        target = dtype or (torch.float32 if tensor.dtype in (torch.float32, torch.float16, torch.bfloat16) else torch.float64)
        if tensor.dtype != target:
            tensor = tensor.to(target)
    # Shape errors carry scikit-learn's sentence ("Expected 2D array, got 1D array instead", "Found array with
    # 0 sample(s) ..."), which code and tests written for scikit-learn look for, after the parameter's name and
    # before the fix.
    if ensure_2d:
        if tensor.ndim == 1:
            raise ValueError(
                f"{name} must be 2-D (n_samples, n_features); got a 1-D array of shape {tuple(tensor.shape)}: "
                f"Expected 2D array, got 1D array instead. Reshape your data with {name}.reshape(-1, 1) for a "
                f"single feature or {name}.reshape(1, -1) for a single sample"
            )
        if tensor.ndim == 0:
            raise ValueError(
                f"{name} must be 2-D (n_samples, n_features); got 0-D ({tensor.item()!r}): Expected 2D array, got "
                "scalar array instead. Reshape your data: [[value]] is one sample of one feature"
            )
        if tensor.ndim != 2:
            raise ValueError(
                f"{name} must be 2-D (n_samples, n_features); got {tensor.ndim}-D of shape {tuple(tensor.shape)}: "
                f"Found array with dim {tensor.ndim}, while dim <= 2 is required. Reshape your data to one row "
                f"per sample, e.g. {name}.reshape(len({name}), -1)"
            )
        if tensor.shape[1] == 0:
            raise ValueError(
                f"{name} has 0 feature(s): Found array with 0 feature(s) (shape={tuple(tensor.shape)}) while a "
                "minimum of 1 is required. Pass at least one feature (column) per sample"
            )
    if tensor.shape[0] == 0 and not allow_empty:
        raise ValueError(
            f"{name} is empty: Found array with 0 sample(s) (shape={tuple(tensor.shape)}) while a minimum of 1 is "
            "required. Pass at least one row"
        )
    if not allow_nan and tensor.numel() and not all_finite(tensor):
        raise non_finite_error(tensor, name)
    return tensor


def non_finite_error(tensor: torch.Tensor, name: str) -> ValueError:
    """The error for a 2-D ``tensor`` known to hold NaN or infinity: how many, and the first row."""
    bad = (~torch.isfinite(tensor)).nonzero()
    return ValueError(
        f"{name} contains NaN or infinity ({bad.shape[0]} non-finite value(s), first at row "
        f"{int(bad[0, 0])}); remove or impute them (e.g. sklearn.impute.SimpleImputer)"
    )


def check_labels(y, n_samples: int, *, name: str = "y") -> np.ndarray:
    """Return ``y`` as a NumPy array of length ``n_samples`` (1-D, or 2-D for several outputs)."""
    if y is None:
        raise ValueError(f"This estimator requires y to be passed, but the target y is None; pass {name} with {n_samples} labels")
    if isinstance(y, torch.Tensor):
        y = y.detach().cpu().numpy()
    elif is_device_array(y) and _library(y) != "cudf":  # labels are sorted and counted on the host
        y = _to_numpy_or_tensor(y, name)
        y = y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else y
    elif hasattr(y, "to_numpy"):
        y = y.to_numpy()
    y = np.asarray(y)
    if y.ndim == 0 or y.ndim > 2:
        raise ValueError(f"{name} must be 1-D (n_samples,) or 2-D (n_samples, n_outputs); got shape {y.shape}")
    if y.shape[0] != n_samples:
        raise ValueError(
            f"{name} has {y.shape[0]} labels but X has {n_samples} samples; pass one label per row of X"
        )
    if y.dtype.kind == "f" and not np.isfinite(y).all():
        raise ValueError(f"{name} contains NaN or infinity; remove those rows or impute the target")
    return y


def check_n_neighbors(n_neighbors, n_reference: int, *, name: str = "n_neighbors", excluding_self: bool = False) -> int:
    """Validate a neighbour count against the size of the reference set."""
    if isinstance(n_neighbors, bool) or not isinstance(n_neighbors, (int, np.integer)):
        raise TypeError(f"{name} must be a positive integer; got {n_neighbors!r} of type {type(n_neighbors).__name__}")
    n_neighbors = int(n_neighbors)
    if n_neighbors < 1:
        raise ValueError(f"{name} must be at least 1; got {n_neighbors}")
    available = n_reference - 1 if excluding_self else n_reference
    if n_neighbors > available:
        what = "other points (each query is excluded from its own neighbours)" if excluding_self else "reference points"
        raise ValueError(
            f"Expected {name} <= n_samples_fit, but {name} = {n_neighbors}, n_samples_fit = {n_reference}: "
            f"only {available} {what} exist; lower {name} or add data"
        )
    return n_neighbors


def check_n_features(X: torch.Tensor, n_features_in: int, estimator_name: str) -> None:
    """Raise when ``X`` does not have the number of features seen in ``fit``."""
    if X.shape[1] != n_features_in:
        raise ValueError(
            f"X has {X.shape[1]} features, but {estimator_name} is expecting {n_features_in} features "
            f"as input; pass data with the same columns as in fit"
        )
