"""The dense search (one score matrix per query block): exact under ties, bounded work, same results as the engine."""

import numpy as np
import pytest
import torch

from gpumine.core.distance import get_metric
from gpumine.core.tiles import padded_columns
from gpumine.neighbors import kneighbors
from gpumine.neighbors.engine import _dense, _exact_select, _product_select
from gpumine.neighbors.engine import _search as _engine

from knn_oracle import assert_knn_matches


def _data(name, rng):
    if name == "uniform":
        return rng.random((500, 9)).astype(np.float32)
    if name == "integer_grid":
        return rng.integers(0, 4, (400, 3)).astype(np.float32)
    if name == "duplicate_blocks_larger_than_k":
        return np.repeat(rng.random((12, 5)).astype(np.float32), 30, axis=0)
    if name == "all_equal":
        return np.full((200, 4), 7.0, np.float32)
    if name == "clusters_far_from_origin":
        centres = rng.integers(0, 5, (600, 1)) * 100.0 + 1e4
        return (centres + rng.normal(size=(600, 8)) * 1e-3).astype(np.float32)
    if name == "high_dimension":
        return rng.random((300, 100)).astype(np.float32)
    if name == "tiny_and_huge":
        return (rng.random((300, 6)) * np.array([1e-30, 1e30, 1, 1, 1, 1])).astype(np.float32)
    raise AssertionError(name)


DATA = ["uniform", "integer_grid", "duplicate_blocks_larger_than_k", "all_equal", "clusters_far_from_origin", "high_dimension"]


def _engine_order(X, Q, k, metric, exclude_self):
    """The tile engine's float64-ordered search on the host (no dense path, no host search)."""
    ref = torch.from_numpy(X)
    query = ref if Q is None else torch.from_numpy(Q)
    keys, index = _engine._search_ordered(ref, query, k, get_metric(metric), exclude_self,
                                          _engine.needs_float64_order(ref, query, get_metric(metric)),
                                          device=torch.device("cpu"), budget_bytes=1 << 24, verbose=0, stats=None,
                                          backend="torch", precision="exact", float64_order=False)
    return keys.double().numpy(), index.numpy()


@pytest.mark.parametrize("name", DATA)
@pytest.mark.parametrize("k", [1, 20])
# many blocks and radius groups with float32 products; one block with float64 products
@pytest.mark.parametrize("budget,tile_dtype", [(1 << 14, torch.float32), (1 << 26, torch.float64)])
def test_dense_all_knn_equals_the_engine_and_float64(name, k, budget, tile_dtype):
    rng = np.random.default_rng(len(name) * 7 + k)
    X = _data(name, rng)
    ref = torch.from_numpy(X)
    stats = {}
    keys, index = _dense.dense_search(ref, ref, k, get_metric("sqeuclidean"), exclude_self=True, budget_bytes=budget,
                                      stats=stats, tile_dtype=tile_dtype)
    integral = name in ("integer_grid", "all_equal")
    assert stats["scores_exact"] == integral
    assert stats["tile_dtype"] == ("float32" if integral else str(tile_dtype).replace("torch.", ""))
    assert stats["selection"] == "dense"
    _, want = _engine_order(X, None, k, "sqeuclidean", True)
    np.testing.assert_array_equal(index.numpy(), want)
    reported = keys.to(torch.float32).numpy()
    assert_knn_matches(reported, index.numpy(), X, X, k, "sqeuclidean", exclude_self=True)
    # the host search (KD-tree / BLAS) promises the same neighbours and scores
    host_d, host_i = kneighbors(X, k=k, device="cpu", metric="sqeuclidean")
    np.testing.assert_array_equal(host_i, want)
    np.testing.assert_array_equal(host_d, reported)


@pytest.mark.parametrize("name", ["uniform", "integer_grid", "clusters_far_from_origin"])
@pytest.mark.parametrize("tile_dtype", [torch.float32, torch.float64])
def test_dense_queries_apart_from_references(name, tile_dtype):
    rng = np.random.default_rng(3)
    X = _data(name, rng)
    Q = X[::7] + np.float32(0.5)
    keys, index = _dense.dense_search(torch.from_numpy(X), torch.from_numpy(Q), 9, get_metric("euclidean"),
                                      exclude_self=False, budget_bytes=1 << 15, tile_dtype=tile_dtype)
    _, want = _engine_order(X, Q, 9, "euclidean", False)
    np.testing.assert_array_equal(index.numpy(), want)


def test_dense_k_equal_to_every_other_reference_lists_them_all():
    X = np.random.default_rng(1).integers(0, 3, (40, 2)).astype(np.float32)
    keys, index = _dense.dense_search(torch.from_numpy(X), torch.from_numpy(X), 39, get_metric("sqeuclidean"),
                                      exclude_self=True, budget_bytes=1 << 20)
    assert (np.sort(index.numpy(), axis=1) == np.array([[j for j in range(40) if j != i] for i in range(40)])).all()
    _, want = _engine_order(X, None, 39, "sqeuclidean", True)
    np.testing.assert_array_equal(index.numpy(), want)


def test_dense_float64_order_beats_float32_ties():
    # two references whose float32 distances to the query round alike but differ in float64
    base = np.float32(1.0)
    X = np.array([[0.0], [base + np.float32(2.0**-23)], [base]], np.float32)
    Q = np.zeros((1, 1), np.float32) + np.float32(2.0**-24)
    keys, index = _dense.dense_search(torch.from_numpy(X), torch.from_numpy(Q), 3, get_metric("sqeuclidean"),
                                      exclude_self=False, budget_bytes=1 << 20)
    ref_d = ((X.astype(np.float64) - Q.astype(np.float64)) ** 2).ravel()
    np.testing.assert_array_equal(index.numpy()[0], np.lexsort((np.arange(3), ref_d)))


def test_integer_data_is_scored_exactly_only_within_float32_integers():
    small = torch.tensor([[0.0, 3.0], [-2.0, 1.0]])
    assert _dense.integer_centre(small, small) is not None
    assert _dense.integer_centre(small + 0.5, small + 0.5) is None
    wide = torch.tensor([[0.0], [4096.0]])  # shifted reach 2048: 4 * 2048^2 = 2^24
    assert _dense.integer_centre(wide, wide) is None
    assert _dense.integer_centre(wide - 1, wide - 2) is None
    assert _dense.integer_centre(wide / 2, wide / 2) is not None
    assert _dense.integer_centre(small.double(), small.double()) is None  # float64 data: no float32 products


def _tensor_core_kind(X):
    """(centre found, tensor cores taken) for X against itself, as a GPU search decides them (the CPU answers False)."""
    centre, exact, tensor_cores = _dense.integer_centre_on_device(X, X)
    return bool(exact), bool(tensor_cores)


def test_tensor_cores_take_integers_whose_operands_and_sums_tf32_keeps():
    if not torch.cuda.is_available():  # the decision is the device's: on the CPU never
        X = torch.tensor([[0.0, 3.0], [-2.0, 1.0]])
        assert _tensor_core_kind(X) == (True, False)
        return
    cuda = lambda rows: torch.tensor(rows, dtype=torch.float32, device="cuda")  # noqa: E731
    assert _tensor_core_kind(cuda([[0.0, 3.0], [-2.0, 1.0]])) == (True, True)
    assert _tensor_core_kind(cuda([[-1023.0], [1023.0]])) == (True, True)  # 4 * 1023^2 < 2^22: -2y under 2^11
    assert _tensor_core_kind(cuda([[-1024.0], [1024.0]])) == (True, False)  # 4 * 1024^2 = 2^22: float32 only
    # reach 600 in eight features: 4 * 8 * 600^2 > 2^22 (float32's 2^24 still holds)
    assert _tensor_core_kind(cuda([[-600.0] * 8, [600.0] * 8])) == (True, False)
    assert _tensor_core_kind(cuda([[0.5, 1.0]])) == (False, False)


@pytest.mark.parametrize("tensor_cores", [False, True])
@pytest.mark.parametrize("tile_dtype", [torch.float32, torch.float64])
def test_self_queries_are_prepared_from_the_references_operand(tensor_cores, tile_dtype):
    """The queries' rows of a self-search, made from the references' operand, equal their own preparation bit for bit."""
    rng = np.random.default_rng(3)
    integral = tensor_cores or tile_dtype == torch.float32
    X = rng.integers(-9, 9, (70, 13)).astype(np.float32) if integral else rng.normal(size=(70, 13)).astype(np.float32) * 1e3
    ref = torch.from_numpy(X)
    centre = _dense.integer_centre(ref, ref) if integral else None
    refs = _dense.DenseReferences(ref, 5, get_metric("sqeuclidean"), exclude_self=True, tile_dtype=tile_dtype, centre=centre,
                                  tensor_cores=tensor_cores)
    own = refs.self_query_prepared()
    rows, sqnorm = _dense._l2_operand(ref.to(refs.tile_dtype), refs.centre, "query", tensor_cores)
    assert torch.equal(own["rows"], rows) and torch.equal(own["sqnorm"], sqnorm)
    # and the joined, padded rows of Metric.prepare
    prepared = get_metric("sqeuclidean").prepare(ref.to(refs.tile_dtype), refs.centre, "query")
    if not tensor_cores:
        assert torch.equal(rows, padded_columns(prepared["rows"]))
    # the block's scores are the exact ones for integers, through the split norm columns too
    S, offset, slack = _dense.block_scores(refs, ref)
    if integral:
        X64 = X.astype(np.float64)
        want = ((X64[:, None, :] - X64[None, :, :]) ** 2).sum(-1)
        np.testing.assert_array_equal(S.double().numpy() + offset.numpy()[:, None], want)
        assert (slack == 0).all()


def test_tensor_core_references_need_exact_integer_float32_data():
    X = torch.zeros((4, 2))
    with pytest.raises(ValueError, match="tensor-core"):
        _dense.DenseReferences(X, 1, get_metric("sqeuclidean"), exclude_self=True, tile_dtype=torch.float32, tensor_cores=True)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["binary_wide", "small_integers", "reach_1023", "near_the_sum_limit"])
def test_tensor_core_products_equal_ieee_products_on_the_gpu(name, monkeypatch):
    """Integer data on TF32 tensor cores: the same lists, bit for bit, as IEEE float32 products and a float64 oracle."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    rng = np.random.default_rng(17)
    X = {"binary_wide": lambda: rng.integers(0, 2, (900, 700)),
         "small_integers": lambda: rng.integers(-8, 9, (2000, 64)),
         "reach_1023": lambda: rng.choice([-1023, -1022, 0, 1022, 1023], (1500, 1)),  # ties: five values
         # 4 * sum of squared reaches just under 2^22: partial sums near 2^21
         "near_the_sum_limit": lambda: rng.integers(-511, 512, (1200, 4)),
         }[name]().astype(np.float32)
    ref = torch.from_numpy(X).cuda()
    m = get_metric("sqeuclidean")
    found = {}
    for on in (True, False):
        monkeypatch.setattr(_dense, "TENSOR_CORE_INTEGERS", on)
        for k in (1, 20):
            stats = {}
            keys, index = _product_select.product_select_search(ref, ref, k, m, exclude_self=True, budget_bytes=1 << 28,
                                                                stats=stats)
            assert stats["products"] == ("tensor_cores" if on else "plain")
            found[on, k] = keys.cpu(), index.cpu()
            dense_keys, dense_index = _dense.dense_search(ref, ref, k, m, exclude_self=True, budget_bytes=1 << 28)
            assert torch.equal(dense_index.cpu(), index.cpu()) and torch.equal(dense_keys.cpu(), keys.cpu())
    for k in (1, 20):
        assert torch.equal(found[True, k][0], found[False, k][0]) and torch.equal(found[True, k][1], found[False, k][1])
    # integer data: float64 scores are exact, ties go to the lower index
    X64 = X.astype(np.float64)
    D = ((X64[:, None, :] - X64[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(D, np.inf)
    order = np.lexsort((np.broadcast_to(np.arange(len(X)), D.shape), D), axis=1)
    for k in (1, 20):
        np.testing.assert_array_equal(found[True, k][1].numpy(), order[:, :k])
        np.testing.assert_array_equal(found[True, k][0].numpy(), np.take_along_axis(D, order[:, :k], 1))


@pytest.mark.parametrize("budget", [1 << 22, 1 << 14])  # a row's whole tie group at once / a slice at a time
def test_dense_radius_pass_is_bounded_on_ties(budget):
    """All-equal points leave every row open; the pass collects each row's references once."""
    n = _dense.DENSE_ALL_CANDIDATES + 500  # more references than integer data keeps as candidates
    X = np.zeros((n, 3), np.float32)
    stats = {}
    keys, index = _dense.dense_search(torch.from_numpy(X), torch.from_numpy(X), 5, get_metric("sqeuclidean"),
                                      exclude_self=True, budget_bytes=budget, stats=stats)
    assert stats["rows_radius_pass"] == n
    want = np.array([[j for j in range(6) if j != i][:5] for i in range(n)])
    np.testing.assert_array_equal(index.numpy(), want)
    assert (keys.numpy() == 0).all()


def test_small_exactly_scored_searches_keep_every_reference_and_certify_at_once():
    X = np.zeros((300, 3), np.float32)
    stats = {}
    _, index = _dense.dense_search(torch.from_numpy(X), torch.from_numpy(X), 5, get_metric("sqeuclidean"),
                                   exclude_self=True, budget_bytes=1 << 16, stats=stats)
    assert stats["rows_radius_pass"] == 0 and stats["candidates"] == 299
    np.testing.assert_array_equal(index.numpy(), [[j for j in range(6) if j != i][:5] for i in range(300)])


def test_dense_is_routed_for_small_float32_gpu_searches_only():
    m = get_metric("euclidean")
    cuda = torch.device("cuda")
    assert _dense.dense_applies(m, torch.float32, cuda, "auto", "exact", 1000, 1000, 8)
    assert not _dense.dense_applies(m, torch.float32, torch.device("cpu"), "auto", "exact", 1000, 1000, 8)
    assert not _dense.dense_applies(m, torch.float32, cuda, "torch", "exact", 1000, 1000, 8)
    assert not _dense.dense_applies(m, torch.float32, cuda, "auto", "tf32", 1000, 1000, 8)
    assert not _dense.dense_applies(get_metric("cosine"), torch.float32, cuda, "auto", "exact", 1000, 1000, 8)
    assert not _dense.dense_applies(m, torch.float32, cuda, "auto", "exact", 1 << 20, 1 << 20, 8)
    assert _dense.dense_applies(m, torch.float32, cuda, "auto", "exact", 1 << 20, 1 << 20, _dense.DENSE_MIN_FEATURES_ALWAYS)


@pytest.mark.gpu
@pytest.mark.parametrize("name", DATA + ["tiny_and_huge"])
def test_dense_on_the_gpu_equals_the_host(name, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    # shapes the exact-selection kernel would take first (see engine._exact_select) run dense here
    monkeypatch.setattr(_exact_select, "EXACT_SELECT_FIRST_PAIRS", 0)
    monkeypatch.setattr(_exact_select, "EXACT_SELECT_MANY_PAIRS", 0)
    monkeypatch.setattr(_exact_select, "EXACT_SELECT_TINY_TERMS", 0)
    monkeypatch.setattr(_product_select, "PRODUCT_SELECT", False)  # wider ones on the product selection
    X = _data(name, np.random.default_rng(5))
    for k in (1, 20):
        stats = {}
        gpu_d, gpu_i = kneighbors(X, k=k, device="cuda")
        cpu_d, cpu_i = kneighbors(X, k=k, device="cpu")
        np.testing.assert_array_equal(gpu_i, cpu_i)
        np.testing.assert_array_equal(gpu_d, cpu_d)
        ref = torch.from_numpy(X).cuda()
        _engine.knn_search(ref, ref, k, get_metric("euclidean"), exclude_self=True, device=ref.device, budget_bytes=1 << 26,
                           result_device=ref.device, backend="auto", stats=stats)
        assert stats.get("selection") == "dense" or name == "tiny_and_huge"


@pytest.mark.gpu
def test_tie_heavy_input_costs_a_small_factor_over_random_on_the_gpu():
    """Integer grids, duplicate blocks and clusters against uniform data of the same shape (one run, a ratio)."""
    import time

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    rng = np.random.default_rng(11)
    n, d = 6000, 6
    inputs = {
        "uniform": rng.random((n, d)),
        "integer_grid": rng.integers(0, 4, (n, d)),
        "duplicate_blocks": np.repeat(rng.random((n // 100, d)), 100, axis=0),
        "clusters_far_from_origin": 1e4 + rng.integers(0, 5, (n, 1)) * 100.0 + rng.normal(size=(n, d)) * 1e-3,
    }

    def best(X):
        X = torch.as_tensor(X, dtype=torch.float32, device="cuda")
        times = []
        for _ in range(5):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            kneighbors(X, k=20, device="cuda")
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return min(times)

    base = best(inputs.pop("uniform"))
    for name, X in inputs.items():
        ratio = best(X) / base
        assert ratio < 4, f"{name}: {ratio:.1f}x the time of uniform data"


def test_float64_data_far_from_the_origin_keeps_float64_products():
    """Rounding float64 data to float32 before centring would move points beyond the products' bound."""
    rng = np.random.default_rng(3)
    X = np.array([45.0, 7.0]) + rng.random((500, 2)) * 1e-5  # float64, like latitude and longitude
    ref = torch.from_numpy(X)
    stats = {}
    _, index = _dense.dense_search(ref, ref, 5, get_metric("sqeuclidean"), exclude_self=True, budget_bytes=1 << 20,
                                   tile_dtype=torch.float32, stats=stats)
    assert stats["tile_dtype"] == "float64"
    R = ref[None, :, :].expand(500, 500, 2)
    exact = get_metric("sqeuclidean").exact_scores(ref, R).numpy()  # the float64 order's own scores
    np.fill_diagonal(exact, np.inf)
    want = np.lexsort((np.broadcast_to(np.arange(500), exact.shape), exact), axis=1)[:, :5]
    np.testing.assert_array_equal(index.numpy(), want)


def test_the_dense_probe_samples_at_most_a_quarter_of_few_queries():
    from gpumine.neighbors.engine._search import DENSE_PROBE_ROWS, probe_rows

    assert probe_rows(1000) == 250
    assert probe_rows(10) == 10
    assert probe_rows(100) == 64
    assert probe_rows(1 << 20) == DENSE_PROBE_ROWS


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["uniform", "grid", "far", "host_queries"])
def test_many_queries_against_few_references_are_probed_with_the_float64_order(kind, monkeypatch):
    """Past DENSE_UNPROBED_MAX_PAIRS pairs a search of few references is probed: continuous and integer data run
    fused, clusters far from the origin (float32 ties the float64 order must scan) dense; results equal the
    unprobed dense search's bit for bit."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    from gpumine.core.distance import get_metric
    from gpumine.neighbors.engine import _search
    from gpumine.neighbors.engine._search import knn_search

    rng = np.random.default_rng(11)
    n_ref, n_query, d = 32_768, 262_144, 8  # 2^33 pairs: past the unprobed limit, under the probe's reference count
    if kind == "grid":
        R, Q = (rng.integers(0, 9, (n, d)).astype(np.float32) for n in (n_ref, n_query))
    elif kind == "far":
        R, Q = ((1e3 + rng.standard_normal((n, d)) * 1e-3).astype(np.float32) for n in (n_ref, n_query))
    else:
        R, Q = (rng.random((n, d), dtype=np.float32) for n in (n_ref, n_query))
    # a fitted estimator's references on the device, its queries in host memory (they stream to the search)
    ref, query = torch.from_numpy(R).cuda(), torch.from_numpy(Q) if kind == "host_queries" else torch.from_numpy(Q).cuda()
    common = dict(exclude_self=False, device=torch.device("cuda"), budget_bytes=1 << 30, result_device=torch.device("cuda"),
                  backend="auto")
    stats = {}
    got = knn_search(ref, query, 7, get_metric("euclidean"), stats=stats, **common)
    assert stats["probe_rows"] == _search.DENSE_PROBE_ROWS
    fused = stats["probe_rows_open"] <= _search.DENSE_PROBE_MAX_OPEN * stats["probe_rows"]
    assert fused == (kind != "far"), stats
    monkeypatch.setattr(_search, "DENSE_UNPROBED_MAX_PAIRS", 1 << 62)
    want = knn_search(ref, query, 7, get_metric("euclidean"), **common)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_route_verdicts_are_remembered_per_unchanged_tensor(monkeypatch):
    """The duplicate check runs once for the same unchanged reference tensor when it finds too few copies
    (never remembered: the distinct rows it finds); a write through torch makes it run again."""
    from gpumine.neighbors.engine import _search
    from gpumine.neighbors.engine._duplicates import UniqueRows
    from gpumine.neighbors.engine._verdicts import TensorVerdicts

    calls = []
    real = UniqueRows.find.__func__
    monkeypatch.setattr(UniqueRows, "find", classmethod(lambda cls, X, *a: calls.append(X.shape) or real(cls, X, *a)))
    monkeypatch.setattr(_search, "_FEW_COPIES", TensorVerdicts())
    distinct = torch.from_numpy(np.random.default_rng(3).random((300, 4), dtype=np.float32))
    copies = torch.zeros((300, 4))
    assert _search._distinct_rows(distinct) is None and _search._distinct_rows(distinct) is None
    assert len(calls) == 1
    assert _search._distinct_rows(copies) is not None and _search._distinct_rows(copies) is not None
    assert len(calls) == 3  # found rows are searched every time, never remembered
    distinct[0] = 7.0  # written through torch: checked again
    assert _search._distinct_rows(distinct) is None and len(calls) == 4
    assert _search._distinct_rows(distinct[:200]) is None and len(calls) == 5  # a view is another tensor
    inference = torch.inference_mode()(lambda: torch.rand((300, 4)))()
    _search._distinct_rows(inference), _search._distinct_rows(inference)
    assert len(calls) == 7  # no version counter: never remembered
    # rows found for the graphs' check are handed to the next call only, for the same unchanged tensor
    found = _search._distinct_rows(copies, hand_on=True)
    assert _search._distinct_rows(copies) is found and len(calls) == 8
    assert _search._distinct_rows(copies) is not found and len(calls) == 9
    _search._distinct_rows(copies, hand_on=True)
    copies[0] = 1.0  # written through torch: found again
    assert _search._distinct_rows(copies) is not None and len(calls) == 11
    _search._distinct_rows(copies, hand_on=True)
    assert _search._distinct_rows(copies + 0.0) is not None and len(calls) == 13  # another tensor
    assert _search._distinct_rows(copies) is not None and len(calls) == 14  # dropped by the call between


@pytest.mark.gpu
def test_gpu_self_search_probes_once_per_unchanged_tensor():
    """An all-kNN of the same unchanged device tensor reuses the dense-or-fused probe's verdict (same results);
    after a write through torch it probes again."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    from gpumine.core.distance import get_metric
    from gpumine.neighbors.engine._search import knn_search

    X = torch.from_numpy(np.random.default_rng(12).random((1 << 17, 8), dtype=np.float32)).cuda()
    common = dict(exclude_self=True, device=torch.device("cuda"), budget_bytes=1 << 30, result_device=torch.device("cuda"),
                  backend="auto")
    runs = []
    for _ in range(2):
        stats = {}
        runs.append((knn_search(X, X, 7, get_metric("euclidean"), stats=stats, **common), stats))
    assert "probe_rows" in runs[0][1] and runs[1][1].get("probe_remembered") and "probe_rows" not in runs[1][1]
    for a, b in zip(runs[0][0], runs[1][0]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    X[0] += 1.0
    stats = {}
    knn_search(X, X, 7, get_metric("euclidean"), stats=stats, **common)
    assert "probe_rows" in stats and not stats.get("probe_remembered")


@pytest.mark.gpu
def test_gpu_search_of_unchanged_queries_and_references_probes_once():
    """The probe's verdict of a search of other queries is remembered for the same unchanged queries and
    references; a write to either probes again."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    from gpumine.core.distance import get_metric
    from gpumine.neighbors.engine._search import knn_search

    rng = np.random.default_rng(13)
    R = torch.from_numpy(rng.random((1 << 15, 8), dtype=np.float32)).cuda()
    Q = torch.from_numpy(rng.random((1 << 18, 8), dtype=np.float32)).cuda()
    common = dict(exclude_self=False, device=torch.device("cuda"), budget_bytes=1 << 30, result_device=torch.device("cuda"),
                  backend="auto")

    def probed():
        stats = {}
        found = knn_search(R, Q, 7, get_metric("euclidean"), stats=stats, **common)
        assert ("probe_rows" in stats) != bool(stats.get("probe_remembered"))
        return "probe_rows" in stats, found

    first, want = probed()
    again, got = probed()
    assert first and not again
    for a, b in zip(want, got):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    R[0] += 1.0
    assert probed()[0]
    Q[0] += 1.0
    assert probed()[0] and not probed()[0]


@pytest.mark.parametrize("n_query", [1, 2, 63, 64, 65, 4096, 1 << 24, (1 << 24) + 4, 3 * (1 << 30) + 7])
def test_probe_samples_distinct_rows_in_range(n_query):
    """Evenly spread, first and last row included, distinct, never past the last row (float positions
    rounded (2^24 + 4) - 1 up to 2^24 + 4)."""
    picks = _engine.probe_sample_rows(n_query, torch.device("cpu"))
    assert picks.numel() == _engine.probe_rows(n_query)
    assert picks[0] == 0 and picks[-1] == n_query - 1 and picks.max() < n_query
    assert bool((picks[1:] > picks[:-1]).all())


def test_shift_lands_near_the_data_far_from_the_origin():
    """The references' shift (a sample's float64 mean) sits inside a tight cluster far from the origin, where a
    float32 sum over every row would drift by more than the cluster's spread."""
    rng = np.random.default_rng(8)
    X = (1e4 + 0.01 * rng.standard_normal((200_000, 3))).astype(np.float32)
    shift = _dense._shift(get_metric("sqeuclidean"), torch.from_numpy(X))
    assert shift.dtype == torch.float32
    assert np.abs(shift.numpy() - X.astype(np.float64).mean(0)).max() < 0.005
