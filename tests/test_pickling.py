"""Fitted estimators pickle in host memory and load where their GPU is missing (on the CPU, same results)."""

import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch

from gpumine.counting import C45Classifier, CategoricalNB
from gpumine.neighbors import KNeighborsClassifier, NearestNeighbors
from gpumine.outliers import DistanceOutlierDetector, LocalOutlierFactor

X = np.random.default_rng(0).integers(0, 4, (60, 3)).astype(np.float64)
y = (X[:, 0] > 1).astype(int)


def _fitted(device):
    return [NearestNeighbors(n_neighbors=3, device=device).fit(X), KNeighborsClassifier(3, device=device).fit(X, y),
            LocalOutlierFactor(n_neighbors=5, novelty=True, device=device).fit(X),
            DistanceOutlierDetector(device=device).fit(X), CategoricalNB(device=device).fit(X.astype(int), y),
            C45Classifier(device=device).fit(X.astype(int), y)]


def _tensors(state):
    found = []

    def walk(v):
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        elif hasattr(v, "__dict__") and type(v).__module__.startswith("gpumine."):
            walk(vars(v))

    walk(state)
    return found


@pytest.mark.parametrize("index", range(6))
def test_a_model_fitted_on_a_missing_gpu_loads_on_the_cpu_with_the_same_results(index):
    model = _fitted("cpu")[index]
    expected = _outputs(model)
    for name in ("device_", "_device"):  # as if fitted on a GPU this machine lacks
        if hasattr(model, name):
            setattr(model, name, torch.device("cuda", 7))
    blob = pickle.dumps(model)
    with pytest.warns(UserWarning, match="loaded on the CPU"):
        loaded = pickle.loads(blob)
    assert all(t.device.type == "cpu" for t in _tensors(loaded.__getstate__()))
    for got, want in zip(_outputs(loaded), expected):
        np.testing.assert_array_equal(got, want)


def _outputs(model):
    if isinstance(model, NearestNeighbors):
        return model.kneighbors(X[:5])
    if isinstance(model, (LocalOutlierFactor, DistanceOutlierDetector)):
        return [model.decision_function(X[:5])]
    if isinstance(model, (CategoricalNB, C45Classifier)):
        return [model.predict_proba(X[:5].astype(int))]
    return [model.predict_proba(X[:5])]


@pytest.mark.gpu
def test_a_gpu_fitted_model_loads_in_a_process_without_cuda(tmp_path):
    models = _fitted("cuda")
    for model in models:
        assert all(t.device.type == "cpu" for t in _tensors(model.__getstate__()))
    path = tmp_path / "models.pkl"
    path.write_bytes(pickle.dumps(models))
    code = (f"import pickle, warnings; warnings.simplefilter('ignore'); ms = pickle.load(open({str(path)!r}, 'rb')); "
            "print(all(str(getattr(m, 'device_', getattr(m, '_device', 'cpu'))) == 'cpu' for m in ms))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr
