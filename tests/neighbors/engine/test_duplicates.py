"""kNN through the distinct rows of references with duplicates: the same answers as without."""

import numpy as np
import pytest
import torch

from gpumine.core.distance import get_metric
from gpumine.neighbors.engine import _search as _engine
from gpumine.neighbors.engine._duplicates import UniqueRows, drop_self, expand_neighbours
from knn_oracle import brute_force_knn

CPU = torch.device("cpu")


@pytest.fixture
def always_dedupe(monkeypatch):
    monkeypatch.setattr(_engine, "DEDUP_MIN_PAIRS", 0)
    if hasattr(_engine, "CPU_TREE_SEARCH"):
        monkeypatch.setattr(_engine, "CPU_TREE_SEARCH", False)
    try:
        from gpumine.neighbors.engine import _host as _cpu_search
        monkeypatch.setattr(_cpu_search, "CPU_TREE_SEARCH", False, raising=False)
    except ImportError:
        pass


def _search(X, Q, k, metric="euclidean", dedupe=True, stats=None):
    ref = torch.from_numpy(X)
    query = ref if Q is None else torch.from_numpy(Q)
    return _engine.knn_search(ref, query, k, get_metric(metric), exclude_self=Q is None, device=CPU, budget_bytes=1 << 24,
                              result_device=CPU, backend="torch", as_distance=True, dedupe=dedupe, stats=stats)


def _duplicated_grid(n_distinct, copies, d, seed):
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 4, size=(n_distinct, d)).astype(np.float32)
    X = np.repeat(base, rng.integers(1, copies + 1, size=n_distinct), axis=0)
    return X[rng.permutation(len(X))]


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "manhattan", "chebyshev"])
@pytest.mark.parametrize("k", [1, 5, 40])
@pytest.mark.parametrize("self_search", [True, False])
def test_duplicate_heavy_integer_data_equals_float64_brute_force(always_dedupe, metric, k, self_search):
    X = _duplicated_grid(60, 30, 3, seed=k)
    Q = None if self_search else _duplicated_grid(20, 3, 3, seed=99)
    stats = {}
    dist, idx = _search(X, Q, k, metric, stats=stats)
    assert stats["distinct_rows"] < len(X)
    ref_d, ref_i, _ = brute_force_knn(X, X if Q is None else Q, k, metric, exclude_self=self_search)
    np.testing.assert_array_equal(idx.numpy(), ref_i)  # integer data: distances exact, ties by index
    np.testing.assert_allclose(dist.numpy(), ref_d, rtol=1e-6)
    # and identical to the search without deduplication
    dist2, idx2 = _search(X, Q, k, metric, dedupe=False)
    np.testing.assert_array_equal(idx.numpy(), idx2.numpy())
    np.testing.assert_array_equal(dist.numpy(), dist2.numpy())


def test_all_points_equal(always_dedupe):
    X = np.ones((500, 4), dtype=np.float32)
    dist, idx = _search(X, None, 499)
    expected = np.array([[j for j in range(500) if j != i] for i in range(500)])
    np.testing.assert_array_equal(idx.numpy(), expected)
    assert (dist.numpy() == 0).all()


def test_k_equals_n_minus_one_with_few_distinct_rows(always_dedupe):
    X = np.array([[0.0], [1.0], [0.0], [1.0], [2.0], [0.0]], dtype=np.float32)
    _, idx = _search(X, None, 5)
    _, ref_i, _ = brute_force_knn(X, X, 5, exclude_self=True)
    np.testing.assert_array_equal(idx.numpy(), ref_i)


def test_equidistant_distinct_rows_with_copies_keep_the_index_order(always_dedupe):
    # four distinct points at distance 1 from the query; copies interleave their indices
    X = np.array([[1, 0], [0, 1], [1, 0], [-1, 0], [0, -1], [-1, 0], [9, 9]], dtype=np.float32)
    Q = np.zeros((1, 2), dtype=np.float32)
    for k in range(1, 7):
        _, idx = _search(X, Q, k)
        _, ref_i, _ = brute_force_knn(X, Q, k)
        np.testing.assert_array_equal(idx.numpy(), ref_i)


def test_unique_rows_are_numbered_by_first_occurrence():
    X = torch.tensor([[3.0], [1.0], [3.0], [2.0], [1.0]])
    u = UniqueRows(X)
    assert u.rows.ravel().tolist() == [3.0, 1.0, 2.0]
    assert u.first.tolist() == [0, 1, 3]
    assert u.inverse.tolist() == [0, 1, 0, 2, 1]
    assert u.copies(3).tolist() == [[0, 2, -1], [1, 4, -1], [3, -1, -1]]
    assert UniqueRows.find(torch.arange(10.0)[:, None]) is None  # nothing repeated: not worth it


def test_expansion_and_self_drop():
    X = torch.tensor([[0.0], [0.0], [1.0]])
    u = UniqueRows(X)
    scores = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    distinct = torch.tensor([[0, 1], [1, 0]])
    s, i = expand_neighbours(u, scores, distinct, 3, 1 << 20)
    assert i.tolist() == [[0, 1, 2], [2, 0, 1]]
    s2, i2 = drop_self(s[u.inverse], i[u.inverse], torch.arange(3), 2)
    assert i2.tolist() == [[1, 2], [0, 2], [0, 1]]


def test_dedup_is_skipped_for_cosine(always_dedupe):
    X = np.repeat(np.eye(3, dtype=np.float32), 10, axis=0)
    stats = {}
    _search(X, None, 3, "cosine", stats=stats)
    assert "distinct_rows" not in stats


@pytest.mark.gpu
@pytest.mark.parametrize("self_search", [True, False])
def test_gpu_duplicate_heavy_search_equals_the_oracle(always_dedupe, self_search):
    from gpumine.neighbors import kneighbors

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine (run the gpu tier on the device machine)")
    X = _duplicated_grid(400, 40, 4, seed=5)
    Q = None if self_search else X[:300] + 1
    for backend in ("torch", "triton", "auto"):
        dist, idx = kneighbors(torch.from_numpy(X).cuda(), None if Q is None else torch.from_numpy(Q).cuda(), k=20,
                               device="cuda", backend=backend)
        ref_d, ref_i, _ = brute_force_knn(X, X if Q is None else Q, 20, exclude_self=self_search)
        np.testing.assert_array_equal(idx.cpu().numpy(), ref_i)
        np.testing.assert_allclose(dist.cpu().numpy(), ref_d, rtol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("d", [3, 9, 20])
def test_gpu_exact_scan_of_equidistant_integer_points(monkeypatch, d):
    """No duplicates, but large groups of equidistant points: one retry, then the exact scan (kernel up to 16 features)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine (run the gpu tier on the device machine)")
    rng = np.random.default_rng(d)
    X = np.unique(rng.integers(0, 3, size=(4000, d)).astype(np.float32), axis=0)
    X = X[rng.permutation(len(X))]
    for backend in ("torch", "triton"):
        stats = {}
        t = torch.from_numpy(X).cuda()
        dist, idx = _engine.knn_search(t, t, 20, get_metric("euclidean"), exclude_self=True, device=torch.device("cuda"),
                                       budget_bytes=1 << 26, result_device=CPU, backend=backend, as_distance=True, stats=stats)
        _, ref_i, _ = brute_force_knn(X, X, 20, exclude_self=True)
        np.testing.assert_array_equal(idx.numpy(), ref_i)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("high, d", [(3, 4), (5, 6), (2, 12), (1000, 2)])
def test_row_hashes_count_the_distinct_rows_of_integer_grids(dtype, high, d):
    from gpumine.neighbors.engine._duplicates import distinct_hashes

    X = torch.from_numpy(np.random.default_rng(high).integers(0, high, (20_000, d)).astype(dtype))
    assert distinct_hashes(X) == torch.unique(X, dim=0).shape[0]


def test_row_hashes_take_signed_zeros_as_equal():
    from gpumine.neighbors.engine._duplicates import distinct_hashes

    X = torch.tensor([[0.0, 1.0], [-0.0, 1.0], [0.0, -0.0]])
    assert distinct_hashes(X) == torch.unique(X, dim=0).shape[0] == 2


def test_mostly_distinct_rows_are_not_sorted_when_their_hashes_say_so(monkeypatch):
    from gpumine.neighbors.engine import _duplicates

    X = torch.from_numpy(np.random.default_rng(3).random((5_000, 4)).astype(np.float32))
    X[:100] = X[100]  # a few copies: well under the fraction that pays
    monkeypatch.setattr(_duplicates, "DEDUP_HASH_FROM_ROWS", 1_000)

    def no_sort(self, X):
        raise AssertionError("the rows were sorted")

    monkeypatch.setattr(_duplicates.UniqueRows, "__init__", no_sort)
    assert _duplicates.UniqueRows.find(X) is None
    monkeypatch.undo()
    monkeypatch.setattr(_duplicates, "DEDUP_HASH_FROM_ROWS", 1_000)
    X[: 4_000] = X[0]  # mostly copies: found
    assert _duplicates.UniqueRows.find(X).rows.shape[0] == torch.unique(X, dim=0).shape[0]
