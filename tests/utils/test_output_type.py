"""Arrays of other libraries in (DLPack, the CUDA array interface), and ``output_type`` out (issue 23).

CPU tests stand in for GPU arrays with minimal objects that expose only the
protocols (wrapping torch tensors or NumPy arrays); the ``gpu`` tests run the
same paths with CUDA tensors and, where it imports, CuPy.
"""

from __future__ import annotations

import importlib.util
import pickle
import sys
import types

import numpy as np
import pandas as pd
import pytest
import torch

import gpumine
from gpumine.utils._validation import check_array, check_labels, output_kind, to_output
from gpumine.neighbors import KNeighborsClassifier, KNeighborsRegressor, NearestNeighbors, kneighbors
from gpumine.outliers import DistanceOutlierDetector, LocalOutlierFactor

RNG = np.random.RandomState(0)
X = RNG.rand(40, 3)
Q = RNG.rand(5, 3)
Y = np.arange(40) % 3


class DLPackOnly:
    """An array that exposes only ``__dlpack__`` / ``__dlpack_device__`` (as JAX or CuPy do), over a tensor or
    NumPy array; ``strides``/``copy`` only where the wrapped array has them."""

    def __init__(self, data):
        self._data = data

    def __dlpack__(self, **kwargs):
        return self._data.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()


class StridedDLPack(DLPackOnly):
    @property
    def strides(self):
        return self._data.strides

    def copy(self):
        return StridedDLPack(self._data.copy())


class HostDLPack(DLPackOnly):
    """A host array with ``__array__`` too (DLPack may refuse it, e.g. read-only in older NumPy)."""

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self._data, dtype=dtype)


class FakeCudaDLPack(DLPackOnly):
    """Says it lies on CUDA device 0 (never exported on the CPU-only machine: the error comes first)."""

    def __dlpack_device__(self):
        return (2, 0)


class CudaArrayInterfaceOnly:
    """Only ``__cuda_array_interface__`` (as Numba's device arrays), over a CUDA tensor."""

    def __init__(self, tensor):
        self._tensor = tensor

    @property
    def __cuda_array_interface__(self):
        return self._tensor.__cuda_array_interface__


@pytest.fixture
def fake_namespace(monkeypatch):
    """A registered array-API namespace whose ``from_dlpack`` builds :class:`NamespaceArray` objects."""
    module = types.ModuleType("fake_xp")

    class NamespaceArray(DLPackOnly):
        def __array_namespace__(self, api_version=None):
            return module

    module.from_dlpack = lambda obj: NamespaceArray(torch.from_dlpack(obj))
    module.NamespaceArray = NamespaceArray
    monkeypatch.setitem(sys.modules, "fake_xp", module)
    return module


# -- input -------------------------------------------------------------------------------------


def test_dlpack_object_is_wrapped_without_a_copy():
    t = torch.tensor(X, dtype=torch.float32)
    wrapped = check_array(DLPackOnly(t))
    assert wrapped.dtype == torch.float32 and wrapped.device.type == "cpu"
    assert wrapped.data_ptr() == t.data_ptr()


def test_dlpack_object_non_contiguous_and_negative_strides():
    t = torch.tensor(X.T.copy())  # (3, 40)
    view = check_array(DLPackOnly(t.T))  # a transposed, non-contiguous view
    assert not view.is_contiguous() and view.data_ptr() == t.data_ptr()
    np.testing.assert_array_equal(view.numpy(), X)
    reversed_rows = X[::-1]
    got = check_array(StridedDLPack(reversed_rows))  # torch cannot wrap negative strides: the array's own copy
    np.testing.assert_array_equal(got.numpy(), reversed_rows)


def test_dlpack_object_dtype_rules():
    assert check_array(DLPackOnly(torch.ones(3, 2, dtype=torch.int32))).dtype == torch.float64
    assert check_array(DLPackOnly(torch.ones(3, 2, dtype=torch.bool))).dtype == torch.float64
    assert check_array(DLPackOnly(torch.ones(3, 2, dtype=torch.float16))).dtype == torch.float32
    assert check_array(DLPackOnly(torch.ones(3, 2, dtype=torch.float64))).dtype == torch.float64
    assert check_array(DLPackOnly(np.ones((3, 2), dtype=np.uint32))).dtype == torch.float64
    with pytest.raises(ValueError, match="contains NaN or infinity"):
        check_array(DLPackOnly(torch.tensor([[np.nan, 1.0]])))
    with pytest.raises(ValueError, match="must be 2-D"):
        check_array(DLPackOnly(torch.ones(3)))


def test_read_only_host_array_through_dlpack():
    ro = np.array(X)
    ro.flags.writeable = False
    got = check_array(HostDLPack(ro))
    np.testing.assert_array_equal(got.numpy(), X)
    d, i = kneighbors(HostDLPack(ro), k=2, device="cpu")
    d0, i0 = kneighbors(X, k=2, device="cpu")
    np.testing.assert_array_equal(np.asarray(i), i0)


def test_gpu_arrays_without_cuda_raise_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU behaviour")
    with pytest.raises(ValueError, match="lies in GPU memory but torch sees no CUDA GPU"):
        check_array(FakeCudaDLPack(torch.ones(3, 2)), name="X_ref")

    class FakeCAI:
        __cuda_array_interface__ = {"shape": (3, 2), "typestr": "<f4", "data": (0, False), "version": 3,
                                    "strides": None}

    assert output_kind(FakeCAI()).kind == "torch"  # never raises: check_array says what is wrong
    with pytest.raises(ValueError, match="X .* lies in GPU memory"):
        check_array(FakeCAI())
    with pytest.raises(ValueError, match="torch sees no CUDA GPU"):
        kneighbors(FakeCAI(), k=1, device="cpu")


def test_labels_through_dlpack():
    y = check_labels(DLPackOnly(torch.as_tensor(Y)), len(Y))
    assert isinstance(y, np.ndarray)
    np.testing.assert_array_equal(y, Y)
    clf = KNeighborsClassifier(3, device="cpu").fit(DLPackOnly(torch.as_tensor(X)), DLPackOnly(torch.as_tensor(Y)))
    ref = KNeighborsClassifier(3, device="cpu").fit(X, Y)
    np.testing.assert_array_equal(np.asarray(clf.predict(Q)), ref.predict(Q))


# -- output in the input's kind ----------------------------------------------------------------


def test_input_kind_round_trips():
    d0, i0 = kneighbors(X, Q, k=3, device="cpu")
    d, i = kneighbors(torch.as_tensor(X), torch.as_tensor(Q), k=3, device="cpu")
    assert isinstance(d, torch.Tensor) and isinstance(i, torch.Tensor)
    np.testing.assert_array_equal(i.numpy(), i0)
    d, i = kneighbors(X, DLPackOnly(torch.as_tensor(Q)), k=3, device="cpu")
    assert isinstance(i, torch.Tensor), "a DLPack object of no known library comes back as a torch tensor"
    np.testing.assert_array_equal(i.numpy(), i0)
    np.testing.assert_allclose(d.numpy(), d0)
    assert isinstance(kneighbors(X, Q.tolist(), k=3, device="cpu")[0], np.ndarray)
    assert isinstance(kneighbors(X, pd.DataFrame(Q), k=3, device="cpu")[0], np.ndarray)


def test_array_api_namespace_builds_the_output(fake_namespace):
    q = fake_namespace.NamespaceArray(torch.as_tensor(Q))
    kind = output_kind(q)
    assert (kind.kind, kind.namespace) == ("array_api", "fake_xp")
    d, i = kneighbors(X, q, k=3, device="cpu")
    assert isinstance(d, fake_namespace.NamespaceArray) and isinstance(i, fake_namespace.NamespaceArray)
    np.testing.assert_array_equal(torch.from_dlpack(i).numpy(), kneighbors(X, Q, k=3, device="cpu")[1])
    nn = NearestNeighbors(n_neighbors=2, device="cpu").fit(q)
    assert isinstance(nn.kneighbors()[1], fake_namespace.NamespaceArray)
    # the remembered kind pickles (a module name, not the module)
    again = pickle.loads(pickle.dumps(nn))
    assert isinstance(again.kneighbors()[1], fake_namespace.NamespaceArray)
    with gpumine.config_context(output_type="numpy"):
        assert isinstance(nn.kneighbors(q)[1], np.ndarray)


# -- output_type ---------------------------------------------------------------------------------

_INPUTS = {"numpy": lambda a: a, "torch": torch.as_tensor, "dlpack": lambda a: DLPackOnly(torch.as_tensor(a))}


def _expected_type(output_type: str, input_name: str, ndim: int):
    if output_type == "input":
        return np.ndarray if input_name == "numpy" else torch.Tensor
    return {"numpy": np.ndarray, "torch": torch.Tensor,
            "pandas": pd.DataFrame if ndim == 2 else pd.Series}[output_type]


def _as_numpy(a):
    if isinstance(a, torch.Tensor):
        return a.numpy()
    return np.asarray(a)


@pytest.mark.parametrize("input_name", sorted(_INPUTS))
@pytest.mark.parametrize("output_type", ["input", "numpy", "torch", "pandas"])
def test_output_type_on_methods_and_functions(output_type, input_name):
    wrap = _INPUTS[input_name]
    d0, i0 = kneighbors(X, Q, k=3, device="cpu")
    nn0 = NearestNeighbors(n_neighbors=3, device="cpu").fit(X)
    pred0 = KNeighborsClassifier(3, device="cpu").fit(X, Y).predict(Q)
    labels0 = LocalOutlierFactor(n_neighbors=5, device="cpu").fit_predict(X)
    with gpumine.config_context(output_type=output_type):
        d, i = kneighbors(wrap(X), wrap(Q), k=3, device="cpu")
        for got, want in ((d, d0), (i, i0)):
            assert isinstance(got, _expected_type(output_type, input_name, 2))
            np.testing.assert_allclose(_as_numpy(got), want)
        assert _as_numpy(i).dtype == np.int64
        only = kneighbors(wrap(X), wrap(Q), k=3, device="cpu", return_distance=False)
        assert isinstance(only, _expected_type(output_type, input_name, 2))

        nn = NearestNeighbors(n_neighbors=3, device="cpu").fit(wrap(X))
        for X_query in (wrap(Q), None):
            got_d, got_i = nn.kneighbors(X_query)
            want_d, want_i = nn0.kneighbors(None if X_query is None else Q)
            assert isinstance(got_i, _expected_type(output_type, input_name, 2))
            np.testing.assert_array_equal(_as_numpy(got_i), want_i)
            np.testing.assert_allclose(_as_numpy(got_d), want_d)

        clf = KNeighborsClassifier(3, device="cpu").fit(wrap(X), Y)
        pred = clf.predict(wrap(Q))
        assert isinstance(pred, _expected_type(output_type, input_name, 1))
        np.testing.assert_array_equal(_as_numpy(pred), pred0)
        proba = clf.predict_proba(wrap(Q))
        assert isinstance(proba, _expected_type(output_type, input_name, 2))
        assert clf.score(wrap(X), Y) == KNeighborsClassifier(3, device="cpu").fit(X, Y).score(X, Y)

        lof = LocalOutlierFactor(n_neighbors=5, device="cpu")
        labels = lof.fit_predict(wrap(X))
        assert isinstance(labels, _expected_type(output_type, input_name, 1))
        np.testing.assert_array_equal(_as_numpy(labels), labels0)
        # fitted attributes keep the kind of the data passed to fit, whatever output_type says
        input_kind = np.ndarray if input_name == "numpy" else torch.Tensor
        assert isinstance(lof.negative_outlier_factor_, input_kind)


def test_output_type_string_labels_and_regression():
    names = np.array(["a", "b", "c"])[Y]
    clf = KNeighborsClassifier(3, device="cpu").fit(X, names)
    with gpumine.config_context(output_type="torch"):
        assert isinstance(clf.predict(Q), np.ndarray)  # strings have no tensor form
        assert isinstance(clf.predict_proba(Q), torch.Tensor)
        reg = KNeighborsRegressor(3, device="cpu").fit(X, Y.astype(float))
        assert isinstance(reg.predict(Q), torch.Tensor)
        assert reg.score(torch.as_tensor(X), torch.as_tensor(Y.astype(float))) == pytest.approx(
            KNeighborsRegressor(3, device="cpu").fit(X, Y.astype(float)).score(X, Y.astype(float)))
    with gpumine.config_context(output_type="pandas"):
        got = clf.predict(Q)
        assert isinstance(got, pd.Series)
        np.testing.assert_array_equal(got.to_numpy(), clf.predict(Q))


def test_output_type_distance_detector_and_lof_novelty():
    det = DistanceOutlierDetector(n_outliers=3, n_neighbors=4, device="cpu")
    want = det.fit_predict(X)
    with gpumine.config_context(output_type="torch"):
        got = det.fit_predict(X)
        assert isinstance(got, torch.Tensor) and isinstance(det.labels_, np.ndarray)
        np.testing.assert_array_equal(got.numpy(), want)
        lof = LocalOutlierFactor(n_neighbors=5, novelty=True, device="cpu").fit(X)
        assert isinstance(lof.predict(Q), torch.Tensor)
        assert isinstance(lof.score_samples(Q), torch.Tensor)
    with gpumine.config_context(output_type="pandas"):
        assert isinstance(lof.decision_function(Q), pd.Series)


def test_output_type_validation():
    assert gpumine.get_config()["output_type"] == "input"
    with pytest.raises(ValueError, match=r"output_type must be one of \('input', 'numpy', 'torch', 'cupy', 'pandas'\)"):
        gpumine.set_config(output_type="jax")
    with pytest.raises(ValueError, match="output_type must be one of"):
        with gpumine.config_context(output_type=np.ndarray):
            pass
    assert gpumine.get_config()["output_type"] == "input"
    if importlib.util.find_spec("cupy") is None:
        with pytest.raises(ImportError, match="install it .*or choose another output_type"):
            gpumine.set_config(output_type="cupy")
        with pytest.raises(ImportError, match="needs CuPy"):
            to_output(torch.ones(2), _cupy_kind())
    assert gpumine.get_config()["output_type"] == "input"


def _cupy_kind():
    from gpumine.utils._validation import OutputKind

    return OutputKind("cupy", None)


# -- GPU ------------------------------------------------------------------------------------------


def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    return torch.device("cuda", torch.cuda.current_device())


@pytest.mark.gpu
def test_gpu_dlpack_and_cuda_array_interface_objects():
    dev = _cuda()
    t = torch.as_tensor(X, dtype=torch.float32, device=dev)
    for obj in (DLPackOnly(t), CudaArrayInterfaceOnly(t)):
        wrapped = check_array(obj)
        assert wrapped.device == dev and wrapped.data_ptr() == t.data_ptr()
        kind = output_kind(obj)
        assert kind.device == dev
        d, i = kneighbors(obj, k=3)
        assert isinstance(i, torch.Tensor) and i.device == dev
        np.testing.assert_array_equal(i.cpu().numpy(), kneighbors(X.astype(np.float32), k=3, device="cpu")[1])
    with gpumine.config_context(output_type="numpy"):
        assert isinstance(kneighbors(DLPackOnly(t), k=3)[1], np.ndarray)
    with gpumine.config_context(output_type="torch"):
        got = NearestNeighbors(n_neighbors=3).fit(X).kneighbors(Q)[1]
        assert isinstance(got, torch.Tensor) and got.device.type == "cpu"  # host data: a host tensor


@pytest.mark.gpu
def test_gpu_cupy_in_cupy_out():
    dev = _cuda()
    cupy = pytest.importorskip("cupy")
    Xc, Qc = cupy.asarray(X, dtype=cupy.float32), cupy.asarray(Q, dtype=cupy.float32)
    wrapped = check_array(Xc)
    assert wrapped.device == dev and wrapped.data_ptr() == Xc.data.ptr  # no copy
    assert check_array(cupy.asarray(X)).dtype == torch.float64
    assert check_array(cupy.asarray(Y.reshape(-1, 1))).dtype == torch.float64
    np.testing.assert_array_equal(check_array(Xc[::-1]).cpu().numpy(), X.astype(np.float32)[::-1])
    np.testing.assert_array_equal(check_array(Xc.T.copy().T).cpu().numpy(), X.astype(np.float32))  # F order
    d0, i0 = kneighbors(X.astype(np.float32), Q.astype(np.float32), k=3, device="cpu")
    d, i = kneighbors(Xc, Qc, k=3)
    assert isinstance(d, cupy.ndarray) and isinstance(i, cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(i), i0)
    np.testing.assert_allclose(cupy.asnumpy(d), d0, rtol=1e-6)

    nn = NearestNeighbors(n_neighbors=3).fit(Xc)
    assert isinstance(nn.kneighbors(Qc)[1], cupy.ndarray) and isinstance(nn.kneighbors()[1], cupy.ndarray)
    clf = KNeighborsClassifier(3).fit(Xc, cupy.asarray(Y))
    pred = clf.predict(Qc)
    assert isinstance(pred, cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(pred), KNeighborsClassifier(3, device="cpu").fit(X, Y).predict(Q))
    assert 0.0 <= clf.score(Xc, cupy.asarray(Y)) <= 1.0
    lof = LocalOutlierFactor(n_neighbors=5)
    labels = lof.fit_predict(Xc)
    assert isinstance(labels, cupy.ndarray) and isinstance(lof.negative_outlier_factor_, cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(labels),
                                  LocalOutlierFactor(n_neighbors=5, device="cpu").fit_predict(X.astype(np.float32)))

    with gpumine.config_context(output_type="numpy"):
        assert isinstance(kneighbors(Xc, Qc, k=3)[1], np.ndarray)
        assert isinstance(clf.predict(Qc), np.ndarray)
    with gpumine.config_context(output_type="torch"):
        got = kneighbors(Xc, Qc, k=3)[1]
        assert isinstance(got, torch.Tensor) and got.device == dev
    with gpumine.config_context(output_type="pandas"):
        assert isinstance(LocalOutlierFactor(n_neighbors=5).fit_predict(Xc), pd.Series)
    want = kneighbors(X, Q, k=3, device="cpu")[1]
    with gpumine.config_context(output_type="cupy"):
        for got in (kneighbors(X, Q, k=3)[1], NearestNeighbors(n_neighbors=3).fit(X).kneighbors(Q)[1],
                    KNeighborsClassifier(3).fit(X, Y).predict(Q), LocalOutlierFactor(n_neighbors=5).fit_predict(X),
                    kneighbors(torch.as_tensor(X), k=3, device="cpu")[1]):
            assert isinstance(got, cupy.ndarray)
        np.testing.assert_array_equal(cupy.asnumpy(kneighbors(X, Q, k=3, device="cpu")[1]), want)
