"""The host kNN path (KD-tree / BLAS, gpumine.neighbors.engine._host) against a float64 oracle."""

import time

import numpy as np
import pytest
import torch

import gpumine.neighbors.engine._host as cpu_path
from gpumine.core.distance import get_metric
from gpumine.neighbors import NearestNeighbors, kneighbors
from gpumine.neighbors.engine._host import cpu_search
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


def test_torch_thread_setting_is_restored():
    before = torch.get_num_threads()
    search(_data("random", 3000, 30, seed=12), None, 5, "euclidean", exclude_self=True)
    assert torch.get_num_threads() == before


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
