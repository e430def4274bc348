"""Device/backend/working-memory selection and input validation: every error names the fix."""

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import torch

import gpumine
from gpumine.utils._validation import check_array, check_labels, check_n_features, check_n_neighbors, output_kind, to_output
from gpumine.config import resolve_backend, resolve_device, working_memory_bytes


def test_config_context_restores_settings():
    before = gpumine.get_config()
    with gpumine.config_context(device="cpu", working_memory=12, verbose=0):
        assert gpumine.get_config()["working_memory"] == 12
        assert working_memory_bytes() == 12 * 2**20
        assert resolve_device() == torch.device("cpu")
    assert gpumine.get_config() == before


def test_config_rejects_bad_settings():
    with pytest.raises(ValueError, match="backend must be one of"):
        gpumine.set_config(backend="cuda")
    with pytest.raises(ValueError, match="working_memory must be a positive, finite number"):
        with gpumine.config_context(working_memory=-1):
            pass
    with pytest.raises(TypeError, match="unknown setting"):
        with gpumine.config_context(dev="cpu"):
            pass
    with pytest.raises(ValueError, match="not a device name"):
        resolve_device("gpu0")
    with pytest.raises(TypeError, match="device must be"):
        resolve_device(3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU behaviour")
def test_explicit_gpu_without_gpu_raises_never_downgrades():
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match="torch sees no CUDA GPU"):
        resolve_device("cuda:0")
    assert resolve_backend("auto", torch.device("cpu")) == "torch"


def test_triton_backend_rules(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="Triton cannot run there"):
        resolve_backend("triton", cpu)
    with pytest.raises(ValueError, match="has no Triton kernel"):
        resolve_backend("triton", cpu, has_triton_kernel=False)
    assert resolve_backend("torch", cpu) == "torch"


@pytest.mark.gpu
def test_auto_picks_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    assert resolve_device("auto").type == "cuda"
    with pytest.raises(ValueError, match="CUDA device"):
        resolve_device(f"cuda:{torch.cuda.device_count()}")


@pytest.mark.parametrize(
    "X, dtype",
    [
        (np.ones((3, 2), np.float64), torch.float64),
        (np.ones((3, 2), np.float32), torch.float32),
        # integers, booleans and lists are computed in float64, as scikit-learn does
        (np.ones((3, 2), np.int64), torch.float64),
        (np.ones((3, 2), np.float16), torch.float32),
        ([[1, 2], [3, 4]], torch.float64),
        ([[1.5, 2], [3, 4]], torch.float64),
        (pd.DataFrame({"a": [1.0, 2.0], "b": [3.0, 4.0]}), torch.float64),
        (pd.DataFrame({"a": [1, 2], "b": [3.0, 4.0]}), torch.float64),
        (pd.DataFrame({"a": np.float32([1, 2]), "b": np.float32([3.0, 4.0])}), torch.float32),
        (torch.ones(3, 2, dtype=torch.float64), torch.float64),
        (torch.ones(3, 2, dtype=torch.float32), torch.float32),
        (torch.ones(3, 2, dtype=torch.int32), torch.float64),
        (torch.ones(3, 2, dtype=torch.bool), torch.float64),
    ],
)
def test_check_array_dtypes(X, dtype):
    assert check_array(X).dtype == dtype


def test_integers_past_float32_are_not_rounded():
    from gpumine.neighbors import kneighbors

    d, i = kneighbors([[0.0], [1.0]], [[16777217]], k=1, device="cpu")
    assert d.tolist() == [[16777216.0]] and d.dtype == np.float64
    d, _ = kneighbors(np.array([[0], [1]], dtype=np.int32), np.array([[16777217]]), k=1, device="cpu")
    assert d.tolist() == [[16777216.0]]


def test_complex_dataframes_are_refused():
    with pytest.raises(ValueError, match="Complex"):
        check_array(pd.DataFrame({"a": [1 + 2j, 3j]}))


def test_check_array_keeps_readonly_memmap_without_copy(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.arange(12, dtype=np.float32).reshape(4, 3))
    mm = np.load(path, mmap_mode="r")
    t = check_array(mm)
    assert t.shape == (4, 3) and float(t[3, 2]) == 11.0


@pytest.mark.parametrize(
    "X, error, match",
    [
        (np.array([[1.0, np.nan]]), ValueError, "X contains NaN or infinity .* first at row 0"),
        (np.array([[1.0], [np.inf]]), ValueError, "first at row 1"),
        (np.ones(3), ValueError, r"must be 2-D .* Reshape your data"),
        (np.ones((2, 2, 2)), ValueError, "got 3-D"),
        (np.empty((0, 3)), ValueError, "X is empty"),
        (np.empty((3, 0)), ValueError, "0 feature"),
        (np.array([[1 + 2j]]), ValueError, "Complex data not supported"),
        (np.array([["a", "b"]]), ValueError, "non-numeric values"),
        ([[1, 2], [3]], ValueError, "could not be read as an array|non-numeric"),
        (sp.csr_matrix(np.eye(2)), TypeError, "sparse input"),
        (pd.DataFrame({"a": ["x", "y"]}), ValueError, "non-numeric columns"),
        (None, ValueError, "X is None"),
        (torch.ones(2, 2, dtype=torch.complex64), ValueError, "Complex data not supported"),
    ],
)
def test_check_array_errors(X, error, match):
    with pytest.raises(error, match=match):
        check_array(X)


def test_check_labels_and_counts():
    assert check_labels(["a", "b"], 2).tolist() == ["a", "b"]
    with pytest.raises(ValueError, match="y has 1 labels but X has 2 samples"):
        check_labels([1], 2)
    with pytest.raises(ValueError, match="y contains NaN"):
        check_labels([1.0, np.nan], 2)
    with pytest.raises(ValueError, match="n_neighbors must be at least 1"):
        check_n_neighbors(0, 5)
    with pytest.raises(ValueError, match="n_neighbors = 6, n_samples_fit = 5"):
        check_n_neighbors(6, 5)
    with pytest.raises(ValueError, match="X has 3 features, but Foo is expecting 2"):
        check_n_features(torch.ones(1, 3), 2, "Foo")


def test_outputs_return_in_the_callers_kind():
    t = torch.arange(3)
    assert isinstance(to_output(t, output_kind(np.zeros(1))), np.ndarray)
    assert isinstance(to_output(t, output_kind(torch.zeros(1))), torch.Tensor)
