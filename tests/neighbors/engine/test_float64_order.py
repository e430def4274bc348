"""Float32 searches are ordered by float64 distances: equal float32 scores do not fall to the index."""

import numpy as np
import pytest
import torch

from gpumine.core.distance import get_metric
from gpumine.neighbors import kneighbors
from gpumine.neighbors.engine import _search as _engine
from gpumine.neighbors.engine._float64_order import float32_scores_exact
from helpers import DEVICES, skip_if_no_cuda
from knn_oracle import brute_force_knn

# float32 squared distances from the origin both round to 2.0000005; in float64 the second is nearer
TWINS = np.array([[1.0, 1.0000002], [1.0000001, 1.0000001]], dtype=np.float32)


@pytest.fixture(autouse=True)
def tile_engine_on_the_host(monkeypatch):
    """These tests are of the tile engine, which the host's tree search would bypass."""
    from gpumine.neighbors.engine import _host as _cpu_search

    monkeypatch.setattr(_cpu_search, "CPU_TREE_SEARCH", False)


def _engine_search(X, Q, k, device="cpu", backend="torch", float64_order=True, stats=None):
    dev = torch.device(device)
    ref = torch.from_numpy(X).to(dev)
    query = ref if Q is None else torch.from_numpy(Q).to(dev)
    return _engine.knn_search(ref, query, k, get_metric("euclidean"), exclude_self=Q is None, device=dev, budget_bytes=1 << 24,
                              result_device=torch.device("cpu"), backend=backend, as_distance=True,
                              float64_order=float64_order, stats=stats)


def test_the_twins_tie_in_float32_and_differ_in_float64():
    s32 = (TWINS * TWINS).sum(1)
    s64 = (TWINS.astype(np.float64) ** 2).sum(1)
    assert s32[0] == s32[1] and s64[1] < s64[0]


@pytest.mark.parametrize("device", DEVICES)
def test_the_nearer_reference_in_float64_wins(device):
    skip_if_no_cuda(device)
    Q = np.zeros((1, 2), dtype=np.float32)
    backends = ["torch"] + (["triton"] if device == "cuda" else [])
    for backend in backends:
        _, idx = _engine_search(TWINS, Q, 1, device, backend)
        assert idx.tolist() == [[1]]
        _, idx = _engine_search(TWINS, Q, 1, device, backend, float64_order=False)
        assert idx.tolist() == [[0]]  # float32 order alone: the tie goes to the lower index
    _, idx = kneighbors(TWINS, Q, k=2, device=device)
    assert idx.tolist() == [[1, 0]]


@pytest.mark.parametrize("device", DEVICES)
def test_many_float32_ties_match_the_float64_oracle(device):
    skip_if_no_cuda(device)
    # points on a fine grid near (1, 1): many float32 scores collide, few float64 ones do
    j = np.arange(40, dtype=np.float32)
    grid = np.stack(np.meshgrid(1 + j * np.float32(2**-23), 1 + j * np.float32(2**-23)), -1).reshape(-1, 2)
    rng = np.random.default_rng(0)
    X = grid[rng.permutation(len(grid))].astype(np.float32)
    Q = np.array([[0.0, 0.0], [2.0, 2.0], [1.0, 1.0]], dtype=np.float32)
    stats = {}
    _, idx = _engine_search(X, Q, 25, device, stats=stats)
    _, ref_i, _ = brute_force_knn(X, Q, 25)
    np.testing.assert_array_equal(idx.numpy(), ref_i)
    assert stats["rows_float64_scan"] >= 1  # float32 ties across the k-th place are settled by a float64 scan


@pytest.mark.parametrize("device", DEVICES)
def test_random_data_matches_float64_without_scans(device):
    skip_if_no_cuda(device)
    X = np.random.default_rng(1).random((3000, 5), dtype=np.float32)
    stats = {}
    _, idx = _engine_search(X, None, 10, device, stats=stats)
    _, ref_i, _ = brute_force_knn(X, X, 10, exclude_self=True)
    np.testing.assert_array_equal(idx.numpy(), ref_i)
    assert stats["rows_float64_scan"] <= 3


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tree", [False, True])
def test_reported_scores_are_the_float64_scores_rounded_to_float32(device, tree, monkeypatch):
    # at 64 features float32 sums of squares are often an ulp or more off their true value;
    # every path reports the nearest float32 to the float64 score instead
    skip_if_no_cuda(device)
    from gpumine.neighbors.engine import _host as _cpu_search

    monkeypatch.setattr(_cpu_search, "CPU_TREE_SEARCH", tree)
    rng = np.random.default_rng(3)
    X = rng.standard_normal((400, 64)).astype(np.float32)
    Q = rng.standard_normal((30, 64)).astype(np.float32)
    for query in (Q, None):
        d, i = kneighbors(X, query, k=7, metric="sqeuclidean", device=device)
        rows = X if query is None else query
        true = ((rows.astype(np.float64)[:, None, :] - X.astype(np.float64)[i]) ** 2).sum(-1)
        np.testing.assert_array_equal(d, true.astype(np.float32))
        float32_sums = ((rows[:, None, :] - X[i]) ** 2).sum(-1, dtype=np.float32)
        assert (float32_sums != d).any()  # the data tells the two apart


def test_integer_data_skips_the_float64_order():
    metric = get_metric("euclidean")
    ints = torch.randint(0, 100, (50, 4)).float()
    assert float32_scores_exact(ints, ints, metric)
    assert not float32_scores_exact(ints + 0.5, ints, metric)
    assert not float32_scores_exact(ints * 1e5, ints, metric)  # squares past 2^24: rounded
    assert not float32_scores_exact(ints, ints, get_metric("cosine"))


@pytest.mark.gpu
def test_gpu_graph_replays_give_the_eager_results_on_tie_heavy_float_data():
    """Replays order by float64 like the eager path; a shape whose rows need many float64 scans goes eager."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine (run the gpu tier on the device machine)")
    from gpumine.neighbors.engine import _graphs

    rng = np.random.default_rng(3)
    base = (rng.integers(0, 6, size=(300, 3)) * 0.1 + 0.05).astype(np.float32)
    clean = rng.random((3000, 3), dtype=np.float32)
    for data in (np.repeat(base, 10, axis=0)[rng.permutation(3000)], clean):
        _graphs.clear_search_graphs()
        results = []
        for _ in range(4):  # eager, capture, replays
            d, i = kneighbors(data, data[:500], k=7, device="cuda", backend="triton")
            results.append((d, i))
        _graphs.GRAPH_SEARCHES = False
        try:
            want_d, want_i = kneighbors(data, data[:500], k=7, device="cuda", backend="triton")
        finally:
            _graphs.GRAPH_SEARCHES = True
        _, ref_i, _ = brute_force_knn(data, data[:500], 7)
        np.testing.assert_array_equal(want_i, ref_i)
        for d, i in results:
            np.testing.assert_array_equal(i, want_i)
            np.testing.assert_array_equal(d.view(np.int32), want_d.view(np.int32))


def _kernel_path_equals_the_torch_path(X, Q, k, kernel: str, flag: str, monkeypatch):
    """A GPU search through ``_float64_order``'s ``kernel`` (which must run) against the same search with ``flag``
    off: equal lists and scores, and the float64 oracle's indices."""
    from gpumine.neighbors.engine import _float64_order

    calls = []
    real = getattr(_float64_order, kernel)
    monkeypatch.setattr(_float64_order, kernel, lambda *a: calls.append(a[2].shape) or real(*a))
    got = _engine_search(X, Q, k, "cuda", backend="triton")
    assert calls
    monkeypatch.setattr(_float64_order, flag, False)
    want = _engine_search(X, Q, k, "cuda", backend="triton")
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    _, oracle_i, _ = brute_force_knn(X, X if Q is None else Q, k, exclude_self=Q is None)
    np.testing.assert_array_equal(got[1].numpy(), oracle_i)


@pytest.mark.gpu
@pytest.mark.parametrize("self_search", [True, False])
@pytest.mark.parametrize("d", [2, 40])
def test_gpu_float64_scans_on_the_exact_selection_kernel_equal_the_torch_scan(self_search, d, monkeypatch):
    """Rows the float64 order leaves open are scanned in one exact-selection launch on a GPU (a self-search's
    own row left out by id); lists and scores equal the torch scan's and the float64 oracle's, duplicates included."""
    skip_if_no_cuda("cuda")
    rng = np.random.default_rng(5)
    # a fine grid far from the origin: float32 scores collide where float64 ones differ
    X = (1.0 + rng.integers(0, 40, size=(3000, d)) * np.float32(2**-23)).astype(np.float32)
    X[100:140] = X[7]  # duplicate rows beyond k, the own row among them
    Q = None if self_search else X[rng.permutation(3000)[:700]] + np.float32(2**-22)
    _kernel_path_equals_the_torch_path(X, Q, 9, "_exact_select_scan", "FLOAT64_SCAN_ON_KERNEL", monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("self_search", [True, False])
@pytest.mark.parametrize("d", [3, 20])
def test_gpu_float64_rank_kernel_gives_the_torch_twins_searches(self_search, d, monkeypatch):
    """The float64 re-score and order in one launch: the same lists and scores as the torch twin's, and the oracle's."""
    skip_if_no_cuda("cuda")
    rng = np.random.default_rng(6)
    X = (1e3 + rng.standard_normal((2500, d)) * 1e-3).astype(np.float32)  # float32 near-ties
    X[50:70] = X[3]
    Q = None if self_search else (1e3 + rng.standard_normal((600, d)) * 1e-3).astype(np.float32)
    _kernel_path_equals_the_torch_path(X, Q, 6, "float64_rank", "FLOAT64_RANK_ON_KERNEL", monkeypatch)


def test_cpu_engine_with_the_automatic_backend_orders_by_float64_without_triton_kernels():
    """A CPU search that reaches the float64 order with backend="auto" (a prefix self-search, which the host
    search declines) keeps to torch: Triton is installed for the tests but cannot launch on the CPU."""
    rng = np.random.default_rng(8)
    X = (1e3 + rng.standard_normal((900, 5)) * 1e-3).astype(np.float32)
    t = torch.from_numpy(X)
    d, i = _engine.knn_search(t, t[:500], 5, get_metric("euclidean"), exclude_self=True, device=torch.device("cpu"),
                              budget_bytes=1 << 24, result_device=torch.device("cpu"), backend="auto", as_distance=True)
    _, oracle_i, _ = brute_force_knn(X, X[:500], 5, exclude_self=True)
    np.testing.assert_array_equal(i.numpy(), oracle_i)
