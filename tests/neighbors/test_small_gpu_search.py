"""Small GPU searches checked and run in one launch (engine.search_small) through the public API.

Each result must equal the CPU path's bit for bit (the engine's contract: the same
results on every device) and a float64 brute force under the tie rule; bad input
must still be refused with the parameter's name, and data at the ends of the float
range must still take the engine's scaled path.
"""

import numpy as np
import pytest
import torch

from gpumine.neighbors import kneighbors
from gpumine.neighbors.engine import _small_search, clear_search_graphs
from knn_oracle import brute_force_knn

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _needs_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")


@pytest.fixture
def launches(monkeypatch):
    """Counts the checked one-launch searches (launched eagerly: a replayed graph calls nothing)."""
    calls = []
    original = _small_search.exact_select_checked

    def counted(*args, **kwargs):
        calls.append(args[0].shape)
        return original(*args, **kwargs)

    monkeypatch.setattr(_small_search, "exact_select_checked", counted)
    monkeypatch.setattr(_small_search, "SMALL_GRAPHS", False)
    return calls


def _data(kind, n, d, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "integer grid":
        return rng.integers(0, 4, size=(n, d)).astype(np.float32)
    if kind == "duplicate blocks":  # blocks of equal rows larger than k
        return np.repeat(rng.standard_normal((n // 25 + 1, d)).astype(np.float32), 25, axis=0)[:n]
    if kind == "all equal":
        return np.full((n, d), 3.5, dtype=np.float32)
    if kind == "clusters far from the origin":
        centres = rng.standard_normal((4, d)) * 10 + 1e4
        return (centres[rng.integers(0, 4, n)] + rng.standard_normal((n, d)) * 1e-3).astype(np.float32)
    return rng.standard_normal((n, d)).astype(np.float32)


@pytest.mark.parametrize("kind", ["float", "integer grid", "duplicate blocks", "all equal", "clusters far from the origin"])
@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean"])
def test_self_search_equals_the_cpu_path_and_the_oracle(kind, metric, launches):
    X = _data(kind, 613, 7)
    k = 20
    d_gpu, i_gpu = kneighbors(torch.from_numpy(X).cuda(), k=k, metric=metric)
    assert launches, "the search did not take the one-launch path"
    d_cpu, i_cpu = kneighbors(X, k=k, metric=metric, device="cpu")
    np.testing.assert_array_equal(i_gpu.cpu().numpy(), i_cpu)
    np.testing.assert_array_equal(d_gpu.cpu().numpy(), d_cpu)
    if kind in ("integer grid", "duplicate blocks", "all equal"):  # float64 distances exact: indices equal the oracle's
        _, want_index, _ = brute_force_knn(X, X, k, metric, exclude_self=True)
        np.testing.assert_array_equal(i_cpu, want_index)


@pytest.mark.parametrize("k", [1, 5, 64])
def test_queries_and_numpy_in_numpy_out(k, launches):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((301, 33)).astype(np.float32)[:, :19]  # not C-contiguous
    Q = rng.standard_normal((77, 19)).astype(np.float32)
    d_gpu, i_gpu = kneighbors(X, Q, k=k, device="cuda")
    assert launches and isinstance(d_gpu, np.ndarray) and d_gpu.dtype == np.float32
    d_cpu, i_cpu = kneighbors(X, Q, k=k, device="cpu")
    np.testing.assert_array_equal(i_gpu, i_cpu)
    np.testing.assert_array_equal(d_gpu, d_cpu)


@pytest.mark.parametrize("where", ["X_ref", "X_query"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input_is_refused_by_name(where, bad, launches):
    X = np.ones((50, 4), dtype=np.float32)
    Q = np.zeros((9, 4), dtype=np.float32)
    (X if where == "X_ref" else Q)[5 if where == "X_ref" else 2, 1] = bad
    with pytest.raises(ValueError, match=where):
        kneighbors(torch.from_numpy(X).cuda(), torch.from_numpy(Q).cuda(), k=3)
    assert launches  # refused after the one-launch search found it, not by a separate check


@pytest.mark.parametrize("scale", [1e30, 1e-30])
def test_data_at_the_ends_of_the_range_takes_the_scaled_path(scale, launches):
    X = (np.random.default_rng(2).standard_normal((120, 5)) * scale).astype(np.float32)
    d_gpu, i_gpu = kneighbors(torch.from_numpy(X).cuda(), k=4)
    assert launches  # tried first: its extremes sent the search on to the scaled path
    d_cpu, i_cpu = kneighbors(X, k=4, device="cpu")
    np.testing.assert_array_equal(i_gpu.cpu().numpy(), i_cpu)
    np.testing.assert_array_equal(d_gpu.cpu().numpy(), d_cpu)
    assert np.isfinite(d_cpu).all() and (d_cpu > 0).all()


def test_data_asking_for_range_scaling_stays_on_the_one_launch_path(launches, monkeypatch):
    """Tiny nonzero values (ADBench pendigits holds 1.3e-16 beside 1.0) ask the engine to scale; the float64
    scores of the unscaled data give the same float32 results, so the call needs no second search."""
    from gpumine.neighbors import _api

    rng = np.random.default_rng(5)
    X = (rng.integers(0, 101, size=(700, 16)) / 100).astype(np.float32)
    X[rng.random(X.shape) < 0.01] = np.float32(1.3e-16)
    d_cpu, i_cpu = kneighbors(X, k=6, device="cpu")

    def eager(*args, **kwargs):
        raise AssertionError("went on to the eager path")

    monkeypatch.setattr(_api, "_search", eager)
    d_gpu, i_gpu = kneighbors(torch.from_numpy(X).cuda(), k=6)
    assert len(launches) == 1
    np.testing.assert_array_equal(i_gpu.cpu().numpy(), i_cpu)
    np.testing.assert_array_equal(d_gpu.cpu().numpy(), d_cpu)


def test_float64_data_and_large_k_go_elsewhere(launches):
    X = np.random.default_rng(3).standard_normal((200, 6))
    d64, i64 = kneighbors(torch.from_numpy(X).cuda(), k=5)
    assert d64.dtype == torch.float64 and not launches
    d_cpu, i_cpu = kneighbors(X, k=5, device="cpu")
    np.testing.assert_array_equal(i64.cpu().numpy(), i_cpu)
    X32 = X.astype(np.float32)
    kneighbors(torch.from_numpy(X32).cuda(), k=100)
    assert not launches  # lists of 128 entries are not written in order by the kernel


@pytest.mark.parametrize("shape", [(198, 33), (150, 128)])
def test_tiny_searches_past_32_features_take_the_one_launch_path(shape, launches):
    # WPBC's shape: a few thousand pairs of many features cost the kernel less than the products' launches
    X = _data("integer grid", *shape, seed=4) + np.float32(0.25) * _data("float", *shape, seed=5)
    d_gpu, i_gpu = kneighbors(torch.from_numpy(X).cuda(), k=5)
    assert launches
    d_cpu, i_cpu = kneighbors(X, k=5, device="cpu")
    np.testing.assert_array_equal(i_gpu.cpu().numpy(), i_cpu)
    np.testing.assert_array_equal(d_gpu.cpu().numpy(), d_cpu)
    launches.clear()
    kneighbors(torch.from_numpy(np.tile(X, (1, 4))[:, :129]).cuda(), k=5)
    assert not launches  # past the kernel's features


def _replays():
    return _small_search._graphs_of(torch.device("cuda")).replay


@pytest.fixture
def small_route_only(monkeypatch):
    """Fails a call that leaves the one-launch path (a replay's results must not be set aside)."""
    from gpumine.neighbors import _api

    def elsewhere(*args, **kwargs):
        raise AssertionError("the search left the one-launch path")

    monkeypatch.setattr(_api, "_search", elsewhere)
    monkeypatch.setattr(_api, "search_with_graph", elsewhere)


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean"])
@pytest.mark.parametrize("case", ["self", "queries", "k = 1", "k = n - 1", "duplicate blocks", "column-major"])
def test_a_repeated_search_replays_a_graph_with_the_launchs_results(case, metric, monkeypatch, small_route_only):
    """Each call brings new data of one shape: the replay must copy it in and give the eager launch's results."""
    clear_search_graphs()
    n, d, k = {"k = 1": (257, 5, 1), "k = n - 1": (40, 3, 39)}.get(case, (613, 7, 20))
    kind = "duplicate blocks" if case == "duplicate blocks" else "integer grid"
    for seed in range(5):
        X = torch.from_numpy(_data(kind, n, d, seed=seed) + np.float32(0.5) * _data("float", n, d, seed=seed + 9)).cuda()
        if case == "column-major":
            X = X.T.contiguous().T
        Q = None if case != "queries" else X[::3].contiguous() + 0.25
        got = kneighbors(X, Q, k=k, metric=metric)
        monkeypatch.setattr(_small_search, "SMALL_GRAPHS", False)
        want = kneighbors(X, Q, k=k, metric=metric)
        monkeypatch.setattr(_small_search, "SMALL_GRAPHS", True)
        graph_outputs = {t.data_ptr() for entry in _replays()._graphs.values() for t in entry.outputs}
        for a, b in zip(got, want):
            assert torch.equal(a, b)
            assert a.data_ptr() not in graph_outputs  # the caller's own copy
    assert _replays().n_replays == 4  # cleared above; the first call runs eagerly, the second captures and replays


def test_non_finite_data_on_a_replayed_shape_is_refused_by_name():
    clear_search_graphs()
    X = np.random.default_rng(6).standard_normal((300, 6)).astype(np.float32)
    for _ in range(3):
        kneighbors(torch.from_numpy(X).cuda(), k=4)
    before = _replays().n_replays
    X[17, 2] = np.nan
    with pytest.raises(ValueError, match="X_ref"):
        kneighbors(torch.from_numpy(X).cuda(), k=4)
    assert _replays().n_replays == before + 1  # the graph's extremes found it


def test_threads_searching_one_shape_get_their_own_results():
    from concurrent.futures import ThreadPoolExecutor

    clear_search_graphs()
    data = [torch.from_numpy(_data("integer grid", 500, 6, seed=s)).cuda() for s in range(8)]
    want = [kneighbors(X.cpu().numpy(), k=9, device="cpu") for X in data]

    def search(i):
        return [kneighbors(data[i], k=9) for _ in range(6)]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(search, range(8)))
    for (d_want, i_want), runs in zip(want, results):
        for d_got, i_got in runs:
            np.testing.assert_array_equal(i_got.cpu().numpy(), i_want)
            np.testing.assert_array_equal(d_got.cpu().numpy(), d_want)
    assert _replays().n_replays > 0


def test_clear_search_graphs_frees_the_small_searches_graphs():
    clear_search_graphs()
    X = torch.from_numpy(_data("float", 400, 5)).cuda()
    for _ in range(3):
        kneighbors(X, k=5)
    assert _replays()._graphs
    clear_search_graphs()
    assert not _replays()._graphs and _replays().n_replays == 0


def test_self_search_same_tensor_as_queries_and_a_copy_keep_their_own_graphs(request):
    """``kneighbors(X)`` excludes each row; ``kneighbors(X, X)`` and ``kneighbors(X, X.clone())`` do not, and the
    first passes one operand: three keys, each replayed with its own results."""
    clear_search_graphs()
    X = torch.from_numpy(_data("integer grid", 300, 4, seed=3)).cuda()
    host = X.cpu().numpy()
    want = {"self": kneighbors(host, k=6, device="cpu"), "same": kneighbors(host, host, k=6, device="cpu")}
    request.getfixturevalue("small_route_only")  # the CPU path above runs the eager search
    for _ in range(4):
        for form, got in (("self", kneighbors(X, k=6)), ("same", kneighbors(X, X, k=6)),
                          ("same", kneighbors(X, X.clone(), k=6))):
            np.testing.assert_array_equal(got[1].cpu().numpy(), want[form][1])
            np.testing.assert_array_equal(got[0].cpu().numpy(), want[form][0])
    assert _replays().n_captures == 3


def test_cycling_through_more_shapes_than_kept_captures_each_once():
    clear_search_graphs()
    shapes = [(300 + 20 * i, 5) for i in range(_small_search.SMALL_GRAPH_CACHE_SIZE + 2)]
    data = {shape: torch.from_numpy(_data("float", *shape, seed=shape[0])).cuda() for shape in shapes}
    want = {shape: kneighbors(X.cpu().numpy(), k=4, device="cpu") for shape, X in data.items()}
    for _ in range(5):
        for shape, X in data.items():
            d_got, i_got = kneighbors(X, k=4)
            np.testing.assert_array_equal(i_got.cpu().numpy(), want[shape][1])
            np.testing.assert_array_equal(d_got.cpu().numpy(), want[shape][0])
    assert _replays().n_captures <= len(shapes)  # a dropped shape runs eagerly, it is not captured again


def test_validated_scores_replay_like_the_eager_launch(monkeypatch):
    from gpumine.core.distance import get_metric
    from gpumine.neighbors.engine import search_validated

    clear_search_graphs()
    X = torch.from_numpy(_data("clusters far from the origin", 500, 6)).cuda()
    metric = get_metric("euclidean", None)
    kwargs = dict(exclude_self=True, device=X.device, budget_bytes=1 << 28, result_device=X.device, backend="auto",
                  as_distance=False)
    monkeypatch.setattr(_small_search, "SMALL_GRAPHS", False)
    want = search_validated(X, X, 7, metric, **kwargs)
    monkeypatch.setattr(_small_search, "SMALL_GRAPHS", True)
    for _ in range(4):
        stats = {}
        got = search_validated(X, X, 7, metric, stats=stats, **kwargs)
        assert stats["route"] == "small"
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert _replays().n_replays == 3


def test_a_graph_larger_than_the_cap_launches_eagerly(monkeypatch):
    clear_search_graphs()
    monkeypatch.setattr(_small_search, "SMALL_GRAPH_MAX_BYTES", 1 << 14)
    X = torch.from_numpy(_data("float", 400, 5)).cuda()  # 16 KB of operands, twice, over the cap
    for _ in range(4):
        kneighbors(X, k=5)
    assert _replays().n_captures == 0
