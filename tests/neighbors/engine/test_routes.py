"""engine.search_validated: the cheapest route for validated data, equal bit for bit to knn_search.

The library's estimators, outlier detectors and streams search through it; each route (one checked
launch for small GPU searches, a captured graph, knn_search) must give knn_search's own results,
scores and distances alike, on tie-heavy data too.
"""

import numpy as np
import pytest
import torch

from gpumine.core.distance import get_metric
from gpumine.neighbors.engine import choose_backend, knn_search, search_validated


def _data(kind, n, d, device, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "integers":  # ties everywhere
        X = rng.integers(0, 4, size=(n, d))
    elif kind == "duplicates":
        X = np.repeat(rng.normal(size=(n // 8 + 1, d)), 8, axis=0)[:n]
    else:
        X = rng.normal(size=(n, d)) * 10.0 + 1000.0
    return torch.tensor(X, dtype=torch.float32, device=device)


def _both(ref, query, k, metric, exclude_self, device, as_distance, **extra):
    common = dict(exclude_self=exclude_self, device=device, budget_bytes=64 << 20, result_device=device)
    backend = choose_backend(None, device, metric, ref.dtype, k, ref.shape[0])
    stats = {}
    got = search_validated(ref, query, k, metric, backend=backend, as_distance=as_distance, stats=stats, **common,
                           **extra)
    want = knn_search(ref, query, k, metric, backend=backend, as_distance=as_distance, **common)
    return got, want, stats


def _equal(got, want):
    assert torch.equal(got[1], want[1])
    assert torch.equal(got[0], want[0])


@pytest.mark.parametrize("kind", ["integers", "duplicates", "clustered"])
@pytest.mark.parametrize("as_distance", [True, False])
def test_cpu_route_is_knn_search(kind, as_distance):
    cpu = torch.device("cpu")
    X = _data(kind, 300, 5, cpu)
    got, want, stats = _both(X, X, 9, get_metric("euclidean"), True, cpu, as_distance)
    _equal(got, want)
    assert stats["route"] == "search"


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["integers", "duplicates", "clustered"])
@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "manhattan"])
@pytest.mark.parametrize("as_distance", [True, False])
@pytest.mark.parametrize("self_search", [True, False])
def test_gpu_routes_equal_knn_search(kind, metric, as_distance, self_search):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    cuda = torch.device("cuda")
    ref = _data(kind, 1037, 7, cuda)
    query = ref if self_search else _data(kind, 301, 7, cuda, seed=1)
    got, want, stats = _both(ref, query, 13, get_metric(metric), self_search, cuda, as_distance)
    _equal(got, want)
    # L2 metrics take the one-launch route; manhattan has no such kernel
    assert stats["route"] == ("small" if metric != "manhattan" else "search")


@pytest.mark.gpu
def test_gpu_graph_route_repeats_equal_knn_search():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    cuda = torch.device("cuda")
    ref = _data("integers", 2048, 6, cuda)
    metric = get_metric("manhattan")  # no one-launch kernel: repeated searches may replay a graph
    for _ in range(3):
        got, want, stats = _both(ref, ref, 10, metric, True, cuda, True, graphs=True, working_memory=64)
        _equal(got, want)
    assert stats["route"] in ("graph", "search")
