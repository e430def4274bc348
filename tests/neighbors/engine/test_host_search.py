"""The host kNN path (KD-tree / BLAS, gpumine.neighbors.engine._host) against a float64 oracle."""

import threading
import time

import numpy as np
import pytest
import torch

import gpumine.neighbors.engine._host as cpu_path
from gpumine.core.distance import get_metric
from gpumine.neighbors import NearestNeighbors, kneighbors
from gpumine.neighbors.engine._host import cpu_search
from gpumine.neighbors.engine._host_exact import _every_pair, _exact_dense, _exact_pairs, _feature_major, _first_columns
import gpumine.neighbors.engine._host_gemm as host_gemm
import gpumine.neighbors.engine._host_threshold as host_threshold
from gpumine.neighbors.engine._host_gemm import _sorted_by_value
from gpumine.outliers import LocalOutlierFactor
from knn_oracle import assert_knn_matches, brute_force_knn

METRICS = ["euclidean", "sqeuclidean", "manhattan", "chebyshev", "cosine", "inner_product"]
BUDGET = 1 << 30


def exact_oracle(X_ref, X_query, k, metric, exclude_self=False):
    """The contract itself: float64 ``Metric.exact_scores``, stable sort (ties to the lower index)."""
    m = get_metric(metric)
    R = torch.from_numpy(np.asarray(X_ref, dtype=np.float64))
    Q = torch.from_numpy(np.asarray(X_query, dtype=np.float64))
    S = m.exact_scores(Q, R[None]).numpy()
    if exclude_self:
        np.fill_diagonal(S, np.inf)
    order = np.argsort(S, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(S, order, 1), order


def search(X, Q, k, metric, exclude_self=False, budget=BUDGET, stats=None):
    R = torch.from_numpy(X)
    Qt = R if exclude_self else torch.from_numpy(Q)
    found = cpu_search(R, Qt, k, get_metric(metric), exclude_self=exclude_self, budget_bytes=budget, stats=stats)
    assert found is not None
    scores, index = found
    assert scores.dtype == R.dtype and index.dtype == torch.int64 and scores.shape == (Qt.shape[0], k)
    return scores.numpy(), index.numpy()


def check_exact(X, Q, k, metric, exclude_self=False, budget=BUDGET):
    """Indices equal the exact oracle's and scores equal its float64 scores cast to the input dtype."""
    stats = {}
    scores, index = search(X, Q, k, metric, exclude_self, budget, stats)
    ref_s, ref_i = exact_oracle(X, X if exclude_self else Q, k, metric, exclude_self)
    np.testing.assert_array_equal(index, ref_i)
    np.testing.assert_array_equal(scores, ref_s.astype(X.dtype))
    return stats


def _blocked_products_only(monkeypatch):
    """Small searches on the blocked products path (_host_gemm), not the threshold pass that takes them first."""
    monkeypatch.setattr(host_threshold, "THRESHOLD_MAX_PAIRS", 0)


def _data(kind, n, d, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    if kind == "random":
        X = rng.standard_normal((n, d))
    elif kind == "integer":  # many exact ties
        X = rng.integers(0, 3, (n, d))
    elif kind == "duplicates":  # blocks of copies larger than k
        X = np.repeat(rng.standard_normal((-(-n // 25), d)), 25, axis=0)[rng.permutation(n)]
    elif kind == "far":  # clustered far from the origin: |x|^2 + |y|^2 - 2xy cancels
        X = 1e6 + rng.standard_normal((n, d)) * 1e-2
    elif kind == "shifted_integer":  # exact ties, too large for exact float32 products
        X = 1e6 + rng.integers(0, 3, (n, d))
    else:
        raise ValueError(kind)
    return X.astype(dtype)


# d = 3 runs on the KD-tree, d = 24 on the matrix products (L1 and L-inf: the tree)
@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("d", [3, 24])
@pytest.mark.parametrize("kind", ["random", "integer", "duplicates", "far", "shifted_integer"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_the_float64_exact_oracle(metric, d, kind, dtype):
    X = _data(kind, 200, d, seed=1, dtype=dtype)
    Q = np.concatenate([X[:20], _data(kind, 30, d, seed=2, dtype=dtype)])  # some queries equal to references
    check_exact(X, Q, 9, metric)
    check_exact(X, None, 9, metric, exclude_self=True)


@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "cosine"])
@pytest.mark.parametrize("d", [3, 24])
def test_small_budget_and_the_cdist_oracle(metric, d):
    X = _data("integer", 150, d, seed=3).astype(np.float32)
    for budget in (1 << 12, BUDGET):  # one row per block, and one block
        scores, index = search(X, X[:40], 7, metric, budget=budget)
        if metric != "cosine":  # small integers: cdist's distances are exact too
            np.testing.assert_array_equal(index, brute_force_knn(X, X[:40], 7, metric)[1])
        dist = np.sqrt(scores) if metric == "euclidean" else scores
        assert_knn_matches(dist, index, X, X[:40], 7, metric)


@pytest.mark.parametrize("d", [2, 24])
@pytest.mark.parametrize("kind", ["integer", "duplicates"])
def test_k_extremes_and_self_exclusion_with_duplicates(d, kind):
    X = _data(kind, 60, d, seed=4)
    for k in (1, 59):  # k = n - 1 with the point itself excluded
        check_exact(X, None, k, "euclidean", exclude_self=True)
    check_exact(X, X, 60, "euclidean")  # k = n
    check_exact(X, X[:5], 1, "euclidean")
    # a duplicate of the query is its nearest neighbour, the query itself is not
    _, index = search(X, None, 1, "euclidean", exclude_self=True)
    assert not (index[:, 0] == np.arange(60)).any()


def test_single_row_and_all_equal_rows():
    check_exact(np.zeros((1, 3)), np.ones((4, 3)), 1, "euclidean")
    check_exact(np.ones((5, 30)), None, 4, "euclidean", exclude_self=True)
    check_exact(np.ones((5, 30)), None, 4, "cosine", exclude_self=True)


def test_read_only_input_through_kneighbors():
    X = _data("integer", 300, 4, seed=5)
    X.setflags(write=False)
    dist, index = kneighbors(X, None, 5, device="cpu")
    np.testing.assert_array_equal(index, brute_force_knn(X, X, 5, exclude_self=True)[1])
    Y = _data("random", 300, 30, seed=5)
    Y.setflags(write=False)
    dist, index = kneighbors(Y, Y[:50], 5, device="cpu")
    assert_knn_matches(dist, index, Y, Y[:50], 5)


@pytest.mark.parametrize("kind", ["random", "integer"])
def test_tree_products_and_probe_agree(monkeypatch, kind):
    # 12 features and enough queries: the probe times both paths; each must give the same answer
    X = _data(kind, 4200, 12, seed=11)
    found = {}
    for name, always, most in (("tree", 16, 16), ("products", 0, 0), ("probe", 8, 16)):
        monkeypatch.setattr(cpu_path, "TREE_ALWAYS_FEATURES", always)
        monkeypatch.setattr(cpu_path, "TREE_MAX_FEATURES", most)
        stats = {}
        found[name] = search(X, None, 10, "euclidean", exclude_self=True, stats=stats)
        assert stats["selection"] == {"tree": "tree", "products": "gemm"}.get(name, stats["selection"])
    for name in ("products", "probe"):
        np.testing.assert_array_equal(found[name][1], found["tree"][1])
        np.testing.assert_array_equal(found[name][0], found["tree"][0])
    pick = np.arange(0, 4200, 37)
    S = get_metric("euclidean").exact_scores(torch.from_numpy(X[pick]), torch.from_numpy(X)[None]).numpy()
    S[np.arange(pick.size), pick] = np.inf
    np.testing.assert_array_equal(found["tree"][1][pick], np.argsort(S, axis=1, kind="stable")[:, :10])


@pytest.mark.parametrize("slower", ["tree", "products"])
def test_probe_stops_the_tree_early_where_it_is_clearly_slower(monkeypatch, slower):
    import scipy.spatial

    queried = []
    pause = {"tree": 0.05 if slower == "tree" else 0.0, "products": 0.2 if slower == "products" else 0.0}

    class TimedTree(scipy.spatial.cKDTree):
        def query(self, x, *args, **kwargs):
            queried.append(len(x))
            time.sleep(pause["tree"])
            return super().query(x, *args, **kwargs)

    smallest = cpu_path._smallest
    monkeypatch.setattr(scipy.spatial, "cKDTree", TimedTree)
    monkeypatch.setattr(cpu_path, "_smallest", lambda *a: time.sleep(pause["products"]) or smallest(*a))
    X = _data("random", 4200, 12, seed=13)
    path, built = cpu_path._probe(X, X, 6, get_metric("euclidean"))
    first = -(-cpu_path._PROBE_ROWS // cpu_path._PROBE_FIRST_STRIDE)
    assert queried[0] == 2  # an untimed first call
    if slower == "tree":  # its first rows already cost over twice the products: the rest is not run
        assert (path, queried[1:]) == ("gemm", [first])
    else:
        assert (path, queried[1:]) == ("tree", [first, cpu_path._PROBE_ROWS - first])
        assert isinstance(built, TimedTree)


def test_torch_thread_setting_is_restored():
    before = torch.get_num_threads()
    search(_data("random", 3000, 30, seed=12), None, 5, "euclidean", exclude_self=True)
    assert torch.get_num_threads() == before


def test_blas_threads_are_limited_while_searches_run_and_restored_after_overlaps():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from gpumine.neighbors.engine._host_threads import _one_torch_thread

    def blas():
        return [lib["num_threads"] for lib in threadpoolctl.threadpool_info() if lib["user_api"] == "blas"]

    start = blas()
    if not start:
        pytest.skip("no BLAS found by threadpoolctl")
    entered, main_left = threading.Event(), threading.Event()
    inside = []

    def worker():  # enters after the main thread and leaves last
        with _one_torch_thread():
            entered.set()
            main_left.wait()
            inside.append(blas())

    outer = _one_torch_thread()
    outer.__enter__()
    thread = threading.Thread(target=worker)
    thread.start()
    entered.wait()
    assert blas() == [1] * len(start)
    outer.__exit__(None, None, None)
    main_left.set()
    thread.join()
    assert inside == [[1] * len(start)] and blas() == start
    thread = threading.Thread(target=lambda: search(_data("random", 3000, 30, seed=12), None, 5, "euclidean",
                                                    exclude_self=True))
    thread.start()
    thread.join()
    assert blas() == start
    with threadpoolctl.threadpool_limits(1, user_api="blas"):  # the user's own limit still holds afterwards
        assert blas() == [1] * len(start)
    assert blas() == start


def test_minkowski_is_left_to_the_engine():
    X = _data("random", 50, 3, seed=6)
    assert cpu_search(torch.from_numpy(X), torch.from_numpy(X), 3, get_metric("minkowski", 3), exclude_self=True,
                      budget_bytes=BUDGET) is None


# -- worst cases ---------------------------------------------------------------------------------

@pytest.mark.parametrize("d", [3, 24])
def test_all_points_equal(d):
    n, k = 20_000, 20
    X = np.full((n, d), 7.0)
    scores, index = search(X, None, k, "euclidean", exclude_self=True)
    first = np.arange(k + 1)[None, :].repeat(n, 0)
    expected = np.where(first >= np.arange(n)[:, None], first + 1, first)[:, :k]  # the first k rows other than i
    np.testing.assert_array_equal(index, expected)
    assert (scores == 0).all()


@pytest.mark.parametrize("d", [3, 24])
def test_duplicate_blocks_larger_than_k(d):
    copies, k = 50, 20
    base = np.random.default_rng(7).standard_normal((100, d))
    X = np.repeat(base, copies, axis=0)  # rows 50 j .. 50 j + 49 are copies of base[j]
    scores, index = search(X, None, k, "euclidean", exclude_self=True)
    i = np.arange(len(X))
    first = (i // copies * copies)[:, None] + np.arange(k + 1)
    expected = np.where(first >= i[:, None], first + 1, first)[:, :k]  # the block's first k rows other than i
    np.testing.assert_array_equal(index, expected)
    assert (scores == 0).all()


def _sampled_rows_match(X, k, metric="euclidean", rows=300, seed=0):
    _, index = search(X, None, k, metric, exclude_self=True)
    pick = np.random.default_rng(seed).choice(len(X), rows, replace=False)
    S = get_metric(metric).exact_scores(torch.from_numpy(X[pick].astype(np.float64)),
                                        torch.from_numpy(X.astype(np.float64))[None]).numpy()
    S[np.arange(rows), pick] = np.inf
    np.testing.assert_array_equal(index[pick], np.argsort(S, axis=1, kind="stable")[:, :k])


def test_integer_grid():
    axis = np.arange(21.0)
    X = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), -1).reshape(-1, 3)  # 9,261 points
    for k in (5, 20):
        _sampled_rows_match(X, k)
        _sampled_rows_match(X, k, "manhattan")


def test_clustered_far_from_the_origin():
    rng = np.random.default_rng(8)
    X = 1e6 + rng.standard_normal((5000, 3)) * 1e-3
    _sampled_rows_match(X, 10)
    _sampled_rows_match((1e6 + rng.standard_normal((3000, 30))).astype(np.float32), 10)


def _float32_ties(d, seed):
    """float32 rows full of exact and near ties: permuted copies (equal norms summed in other orders, equal or an
    ulp apart in float64), a grid of eighths (exact ties), zero rows and a far cluster."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((100, d)).astype(np.float32)
    permuted = np.stack([row[rng.permutation(d)] for row in base for _ in range(3)])
    grid = (rng.integers(0, 9, (200, d)) / 8).astype(np.float32)
    far = (1e3 + rng.standard_normal((100, d)) * 1e-2).astype(np.float32)
    X = np.concatenate([base, permuted, grid, np.zeros((2, d), np.float32), far])
    Q = np.concatenate([X[:30], np.zeros((1, d), np.float32), grid[:20] + np.float32(0.0625), far[:20],
                        rng.standard_normal((30, d)).astype(np.float32)])
    return X, Q


@pytest.mark.parametrize("d", [96, 130, 170, 300])
def test_float32_results_from_certified_product_scores_match_the_oracle(monkeypatch, d):
    # float32 L2 results take a pair's float64 product score where its bound settles its order and its
    # float32 value (_certified_scores); the ties here must fall back to exact scores
    X, Q = _float32_ties(d, seed=31)
    fallback = []
    exact_pairs = host_gemm._exact_pairs
    monkeypatch.setattr(host_gemm, "_exact_pairs", lambda *a: fallback.append(len(a[4])) or exact_pairs(*a))
    for k in (7, 30):
        assert check_exact(X, Q, k, "sqeuclidean")["selection"] == "gemm"
        assert check_exact(X, None, k, "euclidean", exclude_self=True)["selection"] == "gemm"
    assert sum(fallback) > 0


def test_float32_results_on_spread_data_need_few_exact_scores(monkeypatch):
    _blocked_products_only(monkeypatch)
    rng = np.random.default_rng(32)
    X = rng.random((700, 100)).astype(np.float32)
    exact = []
    exact_pairs = host_gemm._exact_pairs
    monkeypatch.setattr(host_gemm, "_exact_pairs", lambda *a: exact.append(len(a[4])) or exact_pairs(*a))

    def refuse(*args):
        raise AssertionError("exact scores of every candidate: the product scores should have settled them")

    monkeypatch.setattr(host_gemm, "_exact_dense", refuse)
    check_exact(X, X[:50] + np.float32(0.01), 9, "euclidean")
    check_exact(X, None, 12, "sqeuclidean", exclude_self=True)
    assert sum(exact) < 0.01 * 750 * 12  # a few near ties of the float32 pass's open rows at most
    with pytest.raises(AssertionError, match="settled"):  # float64 results still score every candidate exactly
        check_exact(X.astype(np.float64), None, 12, "sqeuclidean", exclude_self=True)


@pytest.mark.parametrize("scale", [1e-22, 1e-30, 1e-40])
@pytest.mark.parametrize("d", [20, 120])
def test_products_that_underflow_stay_within_the_bounds(d, scale):
    # float32 data so small that its products fall below float32's normal range (rounding by an
    # absolute half step, not a relative one) on a direct call, without the public API's scaling
    X = (np.random.default_rng(34).random((700, d)) * scale).astype(np.float32)
    check_exact(X, None, 5, "sqeuclidean", exclude_self=True)
    check_exact(X, X[:40] * np.float32(1.5), 5, "euclidean")


def test_float32_results_keep_zero_distances_positive(monkeypatch):
    _blocked_products_only(monkeypatch)  # the certified float32 scores' clamp at zero
    # centred rows so small that the products' bound is below float32's least step: a settled self pair's
    # product score may be just below 0, and is reported as +0 as its exact score is
    X = (np.random.default_rng(33).standard_normal((800, 100)) * 1e-20).astype(np.float32)
    scores, index = search(X, X, 3, "sqeuclidean")
    assert (index[:, 0] == np.arange(800)).all()
    assert not np.signbit(scores).any()
    check_exact(X, X, 3, "sqeuclidean")


def _best_time(fn, repeats=3):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@pytest.mark.parametrize("shape,kinds", [((4096, 3), ["full_grid", "integer_grid", "duplicates", "equal", "far"]),
                                         ((3000, 24), ["integer", "shifted_integer", "duplicates"])])
def test_tie_heavy_input_costs_a_small_factor_over_random(shape, kinds):
    n, d = shape
    rng = np.random.default_rng(9)
    uniform = rng.random(shape)
    axis = np.arange(16.0)
    tie_heavy = {"full_grid": np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), -1).reshape(-1, 3),  # 16^3 points
                 "far": 1e6 + rng.random(shape) * 1e-3,
                 "integer_grid": rng.integers(0, 6, shape).astype(np.float64),
                 "integer": rng.integers(0, 3, shape).astype(np.float64),
                 "shifted_integer": 1e6 + rng.integers(0, 3, shape),
                 "duplicates": np.repeat(rng.random((n // 50, d)), 50, axis=0),
                 "equal": np.ones(shape)}
    metric = get_metric("euclidean")

    def run(X):
        T = torch.from_numpy(X)
        return lambda: cpu_search(T, T, 20, metric, exclude_self=True, budget_bytes=BUDGET)

    run(uniform)()  # warm up (imports)
    base = _best_time(run(uniform))
    for kind in kinds:
        ratio = _best_time(run(tie_heavy[kind])) / base
        assert ratio < 5, f"{kind}: {ratio:.1f}x the time of uniform random data"


# -- through the public API, with and without the host path ---------------------------------------

def _tie_heavy(n=600, d=4, seed=10):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 3, (n, d)).astype(np.float64)
    X[::7] = X[0]  # a large duplicate block as well
    return X


@pytest.mark.parametrize("d", [4, 24])
def test_public_api_indices_equal_the_engine(monkeypatch, d):
    X = _tie_heavy(d=d)
    Q = X[:100] + 0.0
    with_path = kneighbors(X, None, 10, device="cpu"), kneighbors(X, Q, 10, device="cpu")
    nn = NearestNeighbors(n_neighbors=10, device="cpu").fit(X)
    nn_with = nn.kneighbors(Q)[1], nn.kneighbors()[1]
    lof_with = LocalOutlierFactor(n_neighbors=10, device="cpu").fit(X).negative_outlier_factor_
    monkeypatch.setattr(cpu_path, "CPU_TREE_SEARCH", False)
    without = kneighbors(X, None, 10, device="cpu"), kneighbors(X, Q, 10, device="cpu")
    for (d_a, i_a), (d_b, i_b) in zip(with_path, without):
        np.testing.assert_array_equal(i_a, i_b)
        np.testing.assert_allclose(d_a, d_b, rtol=1e-12, atol=0)
    nn = NearestNeighbors(n_neighbors=10, device="cpu").fit(X)
    np.testing.assert_array_equal(nn_with[0], nn.kneighbors(Q)[1])
    np.testing.assert_array_equal(nn_with[1], nn.kneighbors()[1])
    lof_without = LocalOutlierFactor(n_neighbors=10, device="cpu").fit(X).negative_outlier_factor_
    np.testing.assert_allclose(lof_with, lof_without, rtol=1e-12)


def test_engine_reports_the_host_path():
    from gpumine.neighbors.engine._search import knn_search

    X = torch.from_numpy(_tie_heavy())
    stats = {}
    _, index = knn_search(X, X, 5, get_metric("euclidean"), exclude_self=True, device=torch.device("cpu"), budget_bytes=BUDGET,
                          result_device=torch.device("cpu"), stats=stats)
    assert stats["backend"] == "cpu_tree"
    np.testing.assert_array_equal(index.numpy(), brute_force_knn(X.numpy(), X.numpy(), 5, exclude_self=True)[1])


# -- fixed costs of small searches: each fast path against the general one ---------------------------

def _irregular(kind, n, d, rng, dtype):
    if kind == "random":
        X = rng.standard_normal((n, d)) * 10.0 ** rng.uniform(-3, 3, d)
    elif kind == "integer":
        X = rng.integers(0, 3, (n, d))
    elif kind == "rounded":  # near and exact ties
        X = np.round(rng.standard_normal((n, d)), 1)
    elif kind == "far":
        X = 1e6 + rng.standard_normal((n, d)) * 1e-2
    else:  # a few exact copies (searched as rows of their own) and signed zeros (distinct bytes)
        X = np.round(rng.standard_normal((n, d)), 2)
        X[rng.integers(0, n, max(1, n // 60))] = X[0]
        X[rng.random((n, d)) < 0.1] = -0.0
    return np.ascontiguousarray(X.astype(dtype))


def _both_paths(monkeypatch, R, Q, k, metric, exclude_self, budget=BUDGET):
    """cpu_search with every pair scored (the direct path), with products and the pairs they leave (the direct
    path at short lists), with the products' threshold per row (small L2 searches), and with candidates (tree
    or blocked products)."""
    from gpumine.neighbors.engine import _host_exact

    found = {}
    for direct, limit, products, threshold in (("direct", 1 << 62, 0, 0), ("direct_products", 1 << 62, 1 << 62, 0),
                                               ("threshold", 0, 0, 1 << 62), ("candidates", 0, 0, 0)):
        monkeypatch.setattr(cpu_path, "DIRECT_MAX_TERMS", limit)
        monkeypatch.setattr(_host_exact, "DIRECT_PRODUCTS_MAX_PAIRS", products)
        monkeypatch.setattr(host_threshold, "THRESHOLD_MAX_PAIRS", threshold)
        stats = {}
        Rt = torch.from_numpy(R)
        result = cpu_search(Rt, Rt if Q is None else torch.from_numpy(Q), k, get_metric(metric),
                            exclude_self=exclude_self, budget_bytes=budget, stats=stats)
        if result is None:  # not a host search (L1 and L-inf above 64 features: the engine)
            return None
        found[direct] = result[0].numpy(), result[1].numpy(), stats
    return found


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "manhattan", "chebyshev"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_direct_small_path_equals_the_candidate_paths_on_irregular_shapes(monkeypatch, metric, dtype):
    rng = np.random.default_rng(20)
    shapes = [(2, 1), (5, 3), (17, 2), (40, 7), (63, 16), (64, 17), (97, 33), (150, 9), (33, 70), (120, 40)]
    for n, d in shapes:
        for kind in ("random", "integer", "rounded", "far", "copies"):
            X = _irregular(kind, n, d, rng, dtype)
            Q = np.concatenate([X[: n // 3], _irregular(kind, int(rng.integers(1, 30)), d, rng, dtype)])
            for k in sorted({1, max(1, n // 2), n - 1} - {0}):
                for R, queries, exclude_self in ((X, None, True), (X, Q, False)):
                    found = _both_paths(monkeypatch, R, queries, k, metric, exclude_self)
                    if found is None:
                        assert metric in ("manhattan", "chebyshev") and d > cpu_path.TREE_ONLY_MAX_FEATURES
                        continue
                    a, b = found["direct"], found["candidates"]
                    assert b[2]["backend"] != "cpu_direct"
                    if a[2]["backend"] != "cpu_direct":  # many copies: collapsed, not a direct search
                        assert a[2]["distinct_references"] < n
                    for other in (b, found["direct_products"], found["threshold"]):
                        np.testing.assert_array_equal(a[1], other[1], err_msg=f"{kind} {n}x{d} k={k}")
                        np.testing.assert_array_equal(a[0].view(np.uint8), other[0].view(np.uint8))
            # and both against the contract itself
            ref_s, ref_i = exact_oracle(X, X, min(5, n - 1) or 1, metric, exclude_self=True) if n > 1 else (None, None)
            if ref_i is not None and (metric not in ("manhattan", "chebyshev") or d <= cpu_path.TREE_ONLY_MAX_FEATURES):
                for direct in (1 << 62, 0):
                    monkeypatch.setattr(cpu_path, "DIRECT_MAX_TERMS", direct)
                    scores, index = search(X, None, ref_i.shape[1], metric, exclude_self=True)
                    np.testing.assert_array_equal(index, ref_i)
                    np.testing.assert_array_equal(scores, ref_s.astype(dtype))


@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "chebyshev", "cosine", "inner_product"])
@pytest.mark.parametrize("kind", ["integer", "rounded", "copies"])
def test_small_sets_on_the_candidate_paths_match_the_oracle(monkeypatch, metric, kind):
    # small searches take the direct path or the threshold pass by default: the tree and the blocked products
    # keep their coverage here
    monkeypatch.setattr(cpu_path, "DIRECT_MAX_TERMS", 0)
    _blocked_products_only(monkeypatch)
    rng = np.random.default_rng(21)
    for n, d in ((60, 3), (120, 12), (90, 24)):
        X = _irregular(kind, n, d, rng, np.float32)
        check_exact(X, None, 7, metric, exclude_self=True)
        check_exact(X, X[::3] + np.float32(0.5), 4, metric)


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "manhattan", "chebyshev"])
def test_numpy_exact_scores_are_exact_scores_bit_for_bit(metric):
    rng = np.random.default_rng(22)
    m = get_metric(metric)
    # from _ROW_GATHER_MIN_FEATURES features the candidates' rows are gathered whole, features by chunk position
    for d in (1, 2, 15, 16, 17, 31, 32, 33, 47, 64, 100, 143, 159, 160, 161, 175, 256, 257, 271, 1555):
        U = (rng.standard_normal((60, d)) * 10.0 ** rng.uniform(-4, 4, d)).astype(np.float32).astype(np.float64)
        Q = (rng.standard_normal((9, d)) * 10.0 ** rng.uniform(-4, 4, d)).astype(np.float32).astype(np.float64)
        U[5] = Q[2]  # a zero distance
        UT = _feature_major(m, U)
        idx = rng.integers(0, 60, (9, 13))
        want = m.exact_scores(torch.from_numpy(Q), torch.from_numpy(U[idx])).numpy()
        for budget in (1 << 10, BUDGET):  # one pair per block, and one block
            np.testing.assert_array_equal(_exact_dense(m, Q, U, UT, idx, budget).view(np.int64), want.view(np.int64))
            pairs = _exact_pairs(m, Q, U, UT, np.repeat(np.arange(9), 13), idx.ravel(), budget)
            np.testing.assert_array_equal(pairs.reshape(9, 13).view(np.int64), want.view(np.int64))
            # the queries are the references (their rows come from the references' copy)
            own = _exact_pairs(m, U, U, UT, np.repeat(np.arange(9), 13), idx.ravel(), budget)
            want_own = m.exact_scores(torch.from_numpy(U[:9]), torch.from_numpy(U[idx])).numpy()
            np.testing.assert_array_equal(own.reshape(9, 13).view(np.int64), want_own.view(np.int64))
        every = m.exact_scores(torch.from_numpy(Q), torch.from_numpy(U)[None]).numpy()
        np.testing.assert_array_equal(_every_pair(metric, Q, np.ascontiguousarray(U.T)).view(np.int64), every.view(np.int64))


def test_row_groups_by_hash_equal_the_byte_sort(monkeypatch):
    rng = np.random.default_rng(23)

    def by_sort(X):
        monkeypatch.setattr(cpu_path, "_row_hashes", lambda rows: None)  # the byte sort of the rows
        try:
            return cpu_path._Groups(X)
        finally:
            monkeypatch.undo()

    for trial in range(60):
        n, d = int(rng.integers(1, 200)), int(rng.integers(1, 9))
        dtype = (np.float32, np.float64)[trial % 2]
        base = rng.integers(0, 3, (max(1, n // int(rng.integers(1, 6))), d)).astype(dtype)
        X = base[rng.integers(0, len(base), n)]
        X[rng.random(X.shape) < 0.1] = -0.0  # 0.0 and -0.0: different bytes, different rows
        if trial % 3 == 0:
            X = np.asfortranarray(X)
        a, b = cpu_path._Groups(X), by_sort(X)
        for name in ("n_unique", "identity", "first", "inverse", "counts", "members", "starts"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    # a shared hash of different rows (a collision) falls back to the byte sort
    X = rng.integers(0, 3, (100, 3)).astype(np.float32)
    monkeypatch.setattr(cpu_path, "_row_hashes", lambda rows: np.zeros(rows.shape[0], dtype=np.uint64))
    collided = cpu_path._Groups(X)
    monkeypatch.undo()
    expected = by_sort(X)
    for name in ("n_unique", "first", "inverse", "counts", "members", "starts"):
        np.testing.assert_array_equal(getattr(collided, name), getattr(expected, name), err_msg=name)


@pytest.mark.parametrize("d", [3, 24])
def test_few_copies_searched_as_rows_equal_collapsed_copies(monkeypatch, d):
    rng = np.random.default_rng(24)
    X = rng.standard_normal((700, d))
    X[rng.integers(0, 700, 8)] = X[rng.integers(0, 700, 8)]  # a few pairs of copies
    Q = np.concatenate([X[:50], X[:10]])  # repeated queries too
    found = {}
    for name, share in (("rows", 0.98), ("collapsed", 2.0)):  # a share above 1: always collapse
        monkeypatch.setattr(cpu_path, "_DEDUPE_MIN_SHARE", share)
        monkeypatch.setattr(cpu_path, "DIRECT_MAX_TERMS", 0)
        stats = {}
        found[name] = (search(X, None, 10, "euclidean", exclude_self=True, stats=stats),
                       search(X, Q, 10, "euclidean"), stats["distinct_references"])
    assert found["rows"][2] == 700 and found["collapsed"][2] < 700
    for a, b in zip(found["rows"][:2], found["collapsed"][:2]):
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(a[0], b[0])


def test_selection_helpers_keep_the_tie_rule():
    rng = np.random.default_rng(25)
    for _ in range(50):
        b, m = int(rng.integers(1, 30)), int(rng.integers(1, 60))
        X = rng.integers(0, 4, (b, m)).astype(np.float64)  # many ties
        c = int(rng.integers(1, m + 1))
        values, cols = _first_columns(X, c)
        order = np.lexsort((np.broadcast_to(np.arange(m), X.shape), X), axis=-1)[:, :c]  # (value, column)
        np.testing.assert_array_equal(np.sort(cols, axis=1), np.sort(order, axis=1))
        assert (np.diff(cols, axis=1) > 0).all()  # columns ascending
        np.testing.assert_array_equal(values, np.take_along_axis(X, cols, 1))
        v32 = (X - 1.5).astype(np.float32)
        v32[:, ::4] = -0.0
        sv, sc = _sorted_by_value(v32, np.broadcast_to(np.arange(m), X.shape) + 7)
        np.testing.assert_array_equal(sv, np.sort(v32, axis=1))
        np.testing.assert_array_equal(np.take_along_axis(v32, sc - 7, 1), sv)


@pytest.mark.parametrize("kind", ["uniform", "integers", "duplicates", "far", "huge", "tiny", "zeros"])
@pytest.mark.parametrize("same", [True, False])
@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean"])
def test_direct_products_equal_every_pairs_exact_scores(kind, same, metric):
    """The small search from products and the exact scores of the pairs they cannot rule out gives every pair's
    exact-score lists bit for bit, ties, duplicates and magnitudes far from one included."""
    from gpumine.neighbors.engine._host_exact import _direct_products_search, _direct_search, direct_products_apply

    rng = np.random.default_rng(3)
    n, d = 150, 13
    X = {"uniform": lambda: rng.random((n, d)),
         "integers": lambda: rng.integers(0, 3, (n, d)).astype(np.float64),
         "duplicates": lambda: np.repeat(rng.random((n // 10, d)), 10, axis=0),
         "far": lambda: 1e6 + rng.random((n, d)) * 1e-4,
         "huge": lambda: rng.random((n, d)) * 1e150,  # products past float64's range: every pair's scores
         "tiny": lambda: rng.random((n, d)) * 1e-160,
         "zeros": lambda: np.zeros((n, d))}[kind]()
    Q = X if same else X[rng.permutation(n)[:70]] + rng.standard_normal((70, d)) * X.std()
    m = get_metric(metric)
    for K in (1, 6, 8):
        assert direct_products_apply(m, Q.shape[0], n, d, K) == (K <= 6)
        got = _direct_products_search(X, Q, K, m, BUDGET)
        want = _direct_search(X, Q, K, m, BUDGET)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])
    assert not direct_products_apply(m, 400, 400, d, 6)  # more pairs: the passes over every pair's product
    assert not direct_products_apply(m, n, 60, d, 6)  # few references per neighbour
    assert not direct_products_apply(get_metric("manhattan"), n, n, d, 6)


def _count_symmetric(monkeypatch):
    """Lower the symmetric products' feature threshold to these tests' sizes; a list of their results' shapes."""
    formed = []
    symmetric = host_gemm._symmetric_products
    monkeypatch.setattr(host_gemm, "SYMMETRIC_MIN_FEATURES", 1)

    def spy(*args, **kwargs):
        found = symmetric(*args, **kwargs)
        S = found[0]
        formed.append(None if S is None else S.shape)
        return found

    monkeypatch.setattr(host_gemm, "_symmetric_products", spy)
    return formed


@pytest.mark.parametrize("kind", ["random", "duplicates", "far"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_self_searches_on_symmetric_products_match_the_oracle(monkeypatch, kind, dtype):
    _blocked_products_only(monkeypatch)
    # 600 distinct rows (random): three blocks of the lower triangle, two of them mirrored into the upper one
    formed = _count_symmetric(monkeypatch)
    X = _data(kind, 600, 24, seed=41, dtype=dtype)
    distinct = len(np.unique(X, axis=0))
    for k in (1, 7, 40):
        assert check_exact(X, None, k, "sqeuclidean", exclude_self=True)["selection"] == "gemm"
    assert check_exact(X, None, 5, "euclidean", exclude_self=True)["selection"] == "gemm"
    assert formed and all(shape is not None and shape[0] == distinct for shape in formed)
    formed.clear()  # over the budget: row blocks instead
    check_exact(X, None, 7, "sqeuclidean", exclude_self=True, budget=distinct * distinct)
    assert formed == [None]


@pytest.mark.parametrize("scale", [1e-22, 1e-40])
def test_symmetric_products_that_underflow_stay_within_the_bounds(monkeypatch, scale):
    # float32 rows whose products are subnormal (1e-22: halving them rounds), or the rows themselves (1e-40)
    formed = _count_symmetric(monkeypatch)
    X = (np.random.default_rng(42).random((600, 20)) * scale).astype(np.float32)
    check_exact(X, None, 5, "sqeuclidean", exclude_self=True)
    assert formed and formed[0] is not None


def test_symmetric_products_mirror_the_lower_triangle_and_refuse_what_may_overflow():
    X = np.random.default_rng(43).standard_normal((700, 30))
    prod = host_gemm._Products(get_metric("sqeuclidean"), X, X, 20)
    S, side = host_gemm._symmetric_products(prod, 700, BUDGET, 2, side=lambda: "side")
    assert side == "side"
    Yp = prod.YT32.T.astype(np.float64)
    assert S.shape == (700, prod.n_pad) and not S[:, 700:].any()
    np.testing.assert_allclose(S[:, :700], Yp[:700] @ Yp[:700].T, rtol=1e-4, atol=1e-3)
    block = host_gemm._SYMMETRIC_ROWS
    apart = np.arange(700)[:, None] // block != np.arange(700)[None, :] // block  # pairs of rows in two blocks
    np.testing.assert_array_equal(S[:, :700][apart], S[:, :700].T[apart])
    assert host_gemm._symmetric_products(prod, 700, 700 * prod.n_pad * 4 - 1, 2, list)[0] is None  # over the budget
    big = host_gemm._Products(get_metric("sqeuclidean"), X * 2.0**61, X * 2.0**61, 20)
    assert np.isfinite(big.bias32[:700]).all() and big.bias32[:700].max() >= host_gemm._SYMMETRIC_MAX_NORM
    assert host_gemm._symmetric_products(big, 700, BUDGET, 2, list)[0] is None  # 4 |y|^2 may pass float32's range


@pytest.mark.parametrize("kind", ["random", "duplicates", "far"])
def test_a_self_search_row_leaves_its_own_pair_unscored(monkeypatch, kind):
    _blocked_products_only(monkeypatch)
    # float64 results (float32 ones from 96 features settle pairs from product scores instead)
    X = _data(kind, 500, 24, seed=44)
    scored = []
    exact_dense = host_gemm._exact_dense
    monkeypatch.setattr(host_gemm, "_exact_dense", lambda *a: scored.append(a[4].size) or exact_dense(*a))
    for threshold in (1 << 30, 1):
        monkeypatch.setattr(host_gemm, "SELF_SKIP_MIN_FEATURES", threshold)
        scored.clear()
        for k in (1, 9):
            check_exact(X, None, k, "sqeuclidean", exclude_self=True)
        counts = sum(scored)
        if threshold > 1:
            every = counts
    distinct = len(np.unique(X, axis=0))
    assert every - counts >= distinct  # each distinct row's own pair, in each of the two searches, at most once unscored


def _heavy_tailed(n, d, seed):
    """Most rows in [0, 1), a few with a handful of features in the thousands (counts, lengths): the
    mean sits far from most rows, the median among them."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    far = rng.choice(n, n // 20, replace=False)
    X[far[:, None], np.arange(3)] = rng.lognormal(7.0, 1.0, (far.size, 3))
    return X


def test_the_products_centre_at_the_median_only_where_a_heavy_tail_pulls_the_mean_away():
    X = _heavy_tailed(3000, 20, seed=50)
    sample = X[:: 3000 // host_gemm._CENTRE_SAMPLE_ROWS]
    np.testing.assert_array_equal(host_gemm._reference_centre(X, 3000), np.median(sample, 0))
    # a search too small to pay for the tests keeps the mean
    np.testing.assert_array_equal(host_gemm._reference_centre(X, host_gemm._CENTRE_TEST_MIN_PAIRS // 3000 - 1), X.mean(0))
    for Y in (np.random.default_rng(51).random((3000, 20)), _data("far", 3000, 20, seed=52)):
        np.testing.assert_array_equal(host_gemm._reference_centre(Y, 3000), Y.mean(0))


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean"])
def test_heavy_tailed_data_matches_the_oracle_and_certifies_more_rows_about_the_median(monkeypatch, metric):
    _blocked_products_only(monkeypatch)
    monkeypatch.setattr(host_gemm, "_CENTRE_TEST_MIN_PAIRS", 0)
    X = _heavy_tailed(1200, 20, seed=53)
    Q = np.concatenate([X[:40], _heavy_tailed(60, 20, seed=54)])
    about_median = check_exact(X, None, 20, metric, exclude_self=True)
    check_exact(X, Q, 7, metric)
    monkeypatch.setattr(host_gemm, "_reference_centre", lambda U, n_query: U.mean(0))
    about_mean = check_exact(X, None, 20, metric, exclude_self=True)
    # rows whose candidates the products' bound left open, completed from a band of the whole row
    assert about_median["rows_tie_complete"] < about_mean["rows_tie_complete"] / 4


def test_blocks_after_one_with_many_open_rows_keep_more_candidates_and_stay_exact(monkeypatch):
    _blocked_products_only(monkeypatch)
    monkeypatch.setattr(host_gemm, "_PARALLEL_MIN_GEMM", 1 << 62)  # one thread: blocks in order
    X = np.random.default_rng(55).integers(0, 2, (1500, 30)).astype(np.float64)  # binary: ties at every K-th
    kept = []
    smallest = host_gemm._smallest
    monkeypatch.setattr(host_gemm, "_smallest", lambda A, c, levels: kept.append(c) or smallest(A, c, levels))
    check_exact(X, None, 20, "euclidean", exclude_self=True, budget=1 << 20)
    first = 20 + 1 + host_gemm.GEMM_MARGIN  # K counts the row itself, then the margin
    assert len(kept) > 4 and kept[0] == first
    assert first < max(kept) <= 2 * first and kept == sorted(kept)
    # the count changes the work, not the results
    monkeypatch.setattr(host_gemm, "_WIDEN_OPEN_SHARE", 2.0)
    kept.clear()
    check_exact(X, None, 20, "euclidean", exclude_self=True, budget=1 << 20)
    assert set(kept) == {first}


def _count_exact_pairs(monkeypatch):
    scored = []
    exact_dense = host_gemm._exact_dense
    monkeypatch.setattr(host_gemm, "_exact_dense", lambda *a: scored.append(a[4].size) or exact_dense(*a))
    return scored


@pytest.mark.parametrize("kind", ["random", "integer", "duplicates", "far"])
def test_lists_cut_at_the_first_k_exact_scores_match_the_oracle(monkeypatch, kind):
    _blocked_products_only(monkeypatch)
    monkeypatch.setattr(host_gemm, "_NARROW_MIN_EXTRA", 0)
    monkeypatch.setattr(host_gemm, "_NARROW_MIN_TERMS", 0)
    X = _data(kind, 300, host_gemm.NARROW_MIN_FEATURES + 40, seed=60)
    X[:5] = X[5:10]  # a few copies among the rows
    for narrow in (True, False):
        monkeypatch.setattr(host_gemm, "_NARROW", narrow)
        check_exact(X, None, 20, "sqeuclidean", exclude_self=True)
        check_exact(X, X[::7], 9, "euclidean")


def test_lists_cut_at_the_first_k_exact_scores_score_fewer_pairs_where_the_bound_is_loose(monkeypatch):
    # many features (a loose float32 bound) and spread distances near the K-th: the exact K-th score
    # rules out most candidates the bound left
    _blocked_products_only(monkeypatch)
    scored = _count_exact_pairs(monkeypatch)
    X = np.random.default_rng(61).random((400, 2000))
    counts = {}
    for narrow in (True, False):
        monkeypatch.setattr(host_gemm, "_NARROW", narrow)
        scored.clear()
        check_exact(X, None, 20, "euclidean", exclude_self=True)
        counts[narrow] = sum(scored)
    assert counts[True] < 0.9 * counts[False]
