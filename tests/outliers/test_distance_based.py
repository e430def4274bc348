"""Top-n distance-based outliers: SolvingSet == BruteForce == float64 oracle, statistics, errors.

The oracle is a float64 all-pairs distance matrix (SciPy) on small data: weight =
sum of the k smallest distances to *other* points (k - 1 with include_self, the
point itself being the zero-distance first neighbour), top-n by weight with ties to
the lower index.
"""

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.spatial.distance import cdist
from sklearn.neighbors import NearestNeighbors

from gpumine.outliers import _distance_based, _solving_set
from gpumine.outliers._distance_based import DistanceOutliers, SolvingSetTimeout, run, top_n_outliers
from gpumine.outliers._weights import PairSpace, resolve_metric, tree_sum
from helpers import shared_file

CPU = dict(device="cpu")
SS = dict(device="cpu", method="solving_set")  # the SolvingSet machinery (auto may pick brute force)


# -- oracle ------------------------------------------------------------------------------------------
def oracle_weights(X, k, include_self=False, metric="euclidean", **kw):
    X = np.asarray(X, dtype=np.float64)
    D = cdist(X, X, metric=metric, **kw)
    np.fill_diagonal(D, np.inf)
    kk = k - 1 if include_self else k
    return np.sort(D, axis=1)[:, :kk].sum(1)


def oracle_top(weights, n):
    order = np.lexsort((np.arange(len(weights)), -weights))[:n]
    return order, weights[order]


def assert_top_matches_oracle(res, weights, n, rtol=1e-10):
    """Same top-n as the oracle: rank-by-rank weights, and indices equal except among exact ties of
    the oracle weights at the threshold (where the two sums may round differently)."""
    idx, w = np.asarray(res.indices), np.asarray(res.weights)
    o_idx, o_w = oracle_top(weights, n)
    np.testing.assert_allclose(w, o_w, rtol=rtol, atol=1e-12)
    np.testing.assert_allclose(w, weights[idx], rtol=rtol, atol=1e-12)
    assert np.all(np.diff(w) <= 0), "weights must come in descending order"
    differ = idx != o_idx
    if differ.any():
        threshold = o_w[-1]
        assert np.allclose(weights[idx[differ]], threshold, rtol=rtol)
        assert np.allclose(weights[o_idx[differ]], threshold, rtol=rtol)


# -- data ----------------------------------------------------------------------------------------------
def _data(name, n=1200, seed=0):
    rng = np.random.default_rng(seed)
    if name == "gaussian":
        return rng.standard_normal((n, 3)).astype(np.float32)
    if name == "clustered":  # tight clusters far from the origin: the |x|^2 expansion cancels here
        centres = rng.uniform(-1, 1, (4, 4)) * 10 + 5000
        X = centres[rng.integers(0, 4, n)] + rng.standard_normal((n, 4)) * 0.01
        X[:5] += rng.standard_normal((5, 4)) * 2  # a few outliers
        return X.astype(np.float32)
    if name == "duplicates":  # every row 4 times, plus duplicated outliers
        base = rng.standard_normal((n // 4, 2))
        base[:3] *= 8
        return np.repeat(base, 4, axis=0).astype(np.float32)
    if name == "integers":  # a small grid: massive distance and weight ties
        return rng.integers(0, 6, (n, 3)).astype(np.float32)
    raise KeyError(name)


DATASETS = ["gaussian", "clustered", "duplicates", "integers"]


@pytest.mark.parametrize("name", DATASETS)
@pytest.mark.parametrize("k", [1, 6, 25])
def test_solving_set_equals_brute_force_and_oracle(name, k):
    X = _data(name)
    weights = oracle_weights(X, k)
    ss = top_n_outliers(X, 10, k, method="solving_set", n_candidates=64, **CPU)
    bf = top_n_outliers(X, 10, k, method="brute_force", **CPU)
    assert_top_matches_oracle(ss, weights, 10)
    assert_top_matches_oracle(bf, weights, 10)
    # the two methods sum the same canonical distances: identical, bit for bit
    np.testing.assert_array_equal(ss.indices, bf.indices)
    np.testing.assert_array_equal(ss.weights, bf.weights)
    assert ss.threshold == bf.threshold == ss.weights[-1]


@pytest.mark.parametrize("n_candidates", [1, 5, 37, "auto", 5000])
def test_any_candidate_batch_size_gives_the_same_answer(n_candidates):
    X = _data("clustered", n=700, seed=3)
    weights = oracle_weights(X, 9)
    res = top_n_outliers(X, 15, 9, n_candidates=n_candidates, **SS)
    assert_top_matches_oracle(res, weights, 15)


@pytest.mark.parametrize("name", ["gaussian", "duplicates"])
@pytest.mark.parametrize("method", ["solving_set", "brute_force"])
def test_include_self_is_the_papers_convention(name, method):
    X = _data(name, n=600, seed=1)
    paper = top_n_outliers(X, 8, 7, method=method, include_self=True, n_candidates=50, **CPU)
    assert_top_matches_oracle(paper, oracle_weights(X, 7, include_self=True), 8)
    # p counted as its own zero-distance neighbour: the same weights as k - 1 other points
    other = top_n_outliers(X, 8, 6, method=method, n_candidates=50, **CPU)
    np.testing.assert_array_equal(paper.indices, other.indices)
    np.testing.assert_array_equal(paper.weights, other.weights)
    assert paper.include_self and paper.n_neighbors == 7


def test_every_point_an_outlier_and_tiny_inputs():
    X = np.array([[0.0], [1.0], [2.0]])
    for method in ("solving_set", "brute_force"):
        res = top_n_outliers(X, 3, 2, method=method, **CPU)
        np.testing.assert_array_equal(res.indices, [0, 2, 1])  # 3, 3, 2: the tie goes to the lower index
        np.testing.assert_allclose(res.weights, [3.0, 3.0, 2.0])
    assert res.distance_fraction == 1.0
    two = top_n_outliers([[0.0, 0.0], [3.0, 4.0]], 1, 1, **SS)
    np.testing.assert_array_equal(two.indices, [0])
    np.testing.assert_allclose(two.weights, [5.0])


def test_constant_data_all_weights_zero_ties_to_lowest_indices():
    X = np.ones((300, 2), dtype=np.float32)
    for method in ("solving_set", "brute_force"):
        res = top_n_outliers(X, 5, 4, method=method, n_candidates=16, **CPU)
        np.testing.assert_array_equal(res.indices, np.arange(5))
        np.testing.assert_array_equal(res.weights, np.zeros(5))


@pytest.mark.parametrize(
    "metric, scipy_metric, kw",
    [("manhattan", "cityblock", {}), ("chebyshev", "chebyshev", {}), ("minkowski", "minkowski", {"p": 3}),
     ("cosine", "cosine", {}), ("sqeuclidean", "sqeuclidean", {})],
)
def test_other_metrics_match_scipy(metric, scipy_metric, kw):
    X = _data("gaussian", n=500, seed=4) + np.float32(0.1)
    weights = oracle_weights(X, 5, metric=scipy_metric, **kw)
    for method in ("solving_set", "brute_force"):
        res = top_n_outliers(X, 6, 5, method=method, metric=metric, p=kw.get("p"), n_candidates=40, **CPU)
        assert_top_matches_oracle(res, weights, 6, rtol=1e-6 if method == "brute_force" else 1e-10)
        assert res.metric == metric


def test_weights_equal_pyod_knn_mean_times_k():
    pyod_knn = pytest.importorskip("pyod.models.knn", reason="PyOD is not installed (pip install pyod)")
    X = _data("gaussian", n=800, seed=5).astype(np.float64)
    k = 7
    pyod_weights = pyod_knn.KNN(n_neighbors=k, method="mean").fit(X).decision_scores_ * k
    bf = top_n_outliers(X, 800, k, method="brute_force", **CPU)  # every point ranked
    np.testing.assert_allclose(bf.scores, pyod_weights, rtol=1e-12)
    ss = top_n_outliers(X, 12, k, **SS)
    exact = np.asarray(ss.scores_exact)
    np.testing.assert_allclose(np.asarray(ss.scores)[exact], pyod_weights[exact], rtol=1e-12)
    assert_top_matches_oracle(ss, pyod_weights, 12)


def test_weights_equal_sklearn_nearest_neighbors_sums():
    """What PyOD's KNN runs: scikit-learn's kneighbors() without the point itself, summed."""
    X = _data("duplicates", n=800, seed=6).astype(np.float64)
    k = 5
    dist, _ = NearestNeighbors(n_neighbors=k).fit(X).kneighbors()
    reference = dist.sum(1)
    bf = top_n_outliers(X, len(X), k, method="brute_force", **CPU)
    np.testing.assert_allclose(bf.scores, reference, rtol=1e-12, atol=1e-12)
    assert_top_matches_oracle(top_n_outliers(X, 10, k, **SS), reference, 10)


def test_scores_are_exact_or_upper_bounds_below_threshold():
    X = _data("gaussian", n=2000, seed=7)
    weights = oracle_weights(X, 10)
    res = top_n_outliers(X, 10, 10, n_candidates=64, **SS)
    scores, exact = np.asarray(res.scores), np.asarray(res.scores_exact)
    assert exact[np.asarray(res.indices)].all()
    np.testing.assert_allclose(scores[exact], weights[exact], rtol=1e-10)
    assert np.all(scores >= weights * (1 - 1e-12))  # upper bounds
    assert np.all(scores[~exact] < res.threshold)  # that is all the algorithm needs
    in_s = np.zeros(len(X), bool)
    in_s[np.asarray(res.solving_set)] = True
    assert len(np.unique(res.solving_set)) == len(res.solving_set)
    assert exact.sum() < len(X) and not exact[~in_s].any()


def test_solving_set_property_of_the_model():
    """Definition III.3: every point outside the solving set S has w_k(y, S) below w* (the n-th weight)."""
    X = _data("clustered", n=1500, seed=8)
    k = 8
    res = top_n_outliers(X, 10, k, n_candidates=40, **SS)
    S = np.asarray(res.solving_set)
    outside = np.setdiff1d(np.arange(len(X)), S)
    assert len(outside) > 0
    D = cdist(X[outside].astype(np.float64), X[S].astype(np.float64))
    w_against_s = np.sort(D, axis=1)[:, :k].sum(1)
    assert np.all(w_against_s < res.threshold)
    assert set(np.asarray(res.indices)) <= set(S.tolist())


def test_erratum_every_candidate_is_offered_to_top(monkeypatch):
    """The paper's Fig. 2 calls Top.updateMax once, after the candidate loop, with the last candidate only.
    Replaying that bug loses outliers that arrive together in one candidate batch; the fixed algorithm does not."""
    rng = np.random.default_rng(9)
    X = np.vstack([rng.standard_normal((400, 2)) * 0.5, [[20.0, 0.0], [0.0, 25.0], [-30.0, 0.0]]]).astype(np.float32)
    weights = oracle_weights(X, 5)
    fixed = top_n_outliers(X, 3, 5, n_candidates=500, **SS)  # one iteration: all points are candidates
    assert_top_matches_oracle(fixed, weights, 3)
    np.testing.assert_array_equal(np.sort(fixed.indices), [400, 401, 402])

    real_merge = _solving_set._merge_top

    def fig2_update(top_w, top_i, w, i, n_out):  # only the candidate loop's last Q reaches Top
        return real_merge(top_w, top_i, w[-1:], i[-1:], n_out)

    monkeypatch.setattr(_solving_set, "_merge_top", fig2_update)
    buggy = top_n_outliers(X, 3, 5, n_candidates=500, **SS)
    assert not np.array_equal(np.sort(buggy.indices), [400, 401, 402])


def test_reported_distances_are_the_pairs_the_tiles_computed(monkeypatch):
    X = _data("gaussian", n=900, seed=10)
    pairs = set()
    real_tile = PairSpace.tile

    def recording_tile(self, rows, cols):
        r, c = rows.tolist(), cols.tolist()
        pairs.update((min(a, b), max(a, b)) for a in r for b in c if a != b)
        return real_tile(self, rows, cols)

    monkeypatch.setattr(PairSpace, "tile", recording_tile)
    res = top_n_outliers(X, 10, 6, n_candidates=50, **SS)
    n = len(X)
    assert res.distances_computed == len(pairs)  # each pair computed once, none uncounted
    assert res.distance_fraction == pytest.approx(len(pairs) / (n * (n - 1) / 2))
    assert 0 < res.distance_fraction < 0.5
    assert res.iterations >= 2 and len(res.solving_set) >= 50


def test_fraction_of_distances_and_summary():
    X = _data("gaussian", n=3000, seed=11)
    ss = top_n_outliers(X, 10, 10, n_candidates=100, **SS)
    bf = top_n_outliers(X, 10, 10, method="brute_force", **CPU)
    assert bf.distance_fraction == 1.0 and bf.distances_computed == 3000 * 2999 // 2 and bf.iterations == 1
    assert len(bf.solving_set) == 3000
    assert ss.distance_fraction < 0.25
    assert ss.distances_computed == round(ss.distance_fraction * 3000 * 2999 / 2)
    assert "solving_set" in ss.summary() and "% of all pairs" in ss.summary()
    assert isinstance(ss, DistanceOutliers) and ss.n_candidates == 100


def test_small_working_memory_and_random_state_do_not_change_the_answer():
    X = _data("clustered", n=1000, seed=12)
    reference = top_n_outliers(X, 10, 12, n_candidates=64, **SS)
    tiny = top_n_outliers(X, 10, 12, n_candidates=64, working_memory=0.05, **SS)
    other_seed = top_n_outliers(X, 10, 12, n_candidates=64, random_state=123, **SS)
    for res in (tiny, other_seed):
        np.testing.assert_array_equal(res.indices, reference.indices)
        np.testing.assert_array_equal(res.weights, reference.weights)
    again = top_n_outliers(X, 10, 12, n_candidates=64, **SS)
    np.testing.assert_array_equal(again.solving_set, reference.solving_set)  # deterministic for a seed
    assert not np.array_equal(np.sort(other_seed.solving_set), np.sort(reference.solving_set))


def _split_by_iteration(res):
    """The solving set cut into the candidate batches of successive iterations."""
    sizes = [t["candidates"] for t in res.stats["trace"]]
    return np.split(np.asarray(res.solving_set), np.cumsum(sizes)[:-1])


def first_divergence(a, b) -> str:
    """Where two SolvingSet runs on the same data part ways (for failure messages)."""
    for i, (ta, tb, ca, cb) in enumerate(zip(a.stats["trace"], b.stats["trace"], _split_by_iteration(a),
                                             _split_by_iteration(b))):
        if ta != tb or not np.array_equal(ca, cb):
            return (f"iteration {i + 1}: trace {ta} vs {tb}; candidates differ: "
                    f"{np.setdiff1d(ca, cb)[:10].tolist()} vs {np.setdiff1d(cb, ca)[:10].tolist()}")
    return f"no divergence in {min(a.iterations, b.iterations)} common iteration(s); iterations {a.iterations} vs {b.iterations}"


def test_solving_set_is_independent_of_tie_order_and_tiles(monkeypatch):
    """On an integer grid (masses of tied distances and tied upper bounds) the solving set depends
    neither on how torch.topk orders equal values (which differs between CPU and CUDA kernels) nor
    on the tile width (working memory): candidates are chosen by (upper bound, lower index) and the
    arithmetic is exact. Only the count of distances depends on the tiles (a candidate's liveness is
    re-checked once per tile of inactive points)."""
    X = _data("integers", n=800, seed=15)
    reference = top_n_outliers(X, 10, 12, n_candidates=64, **SS)
    tiles = top_n_outliers(X, 10, 12, n_candidates=64, working_memory=0.05, **SS)
    np.testing.assert_array_equal(tiles.solving_set, reference.solving_set, err_msg=first_divergence(tiles, reference))
    real_topk = torch.topk
    g = torch.Generator().manual_seed(0)

    def topk_with_shuffled_ties(x, k, dim=-1, largest=True, sorted=True):
        # the same k values, but equal values come back in a random order of their columns
        if x.dim() != 2 or dim not in (1, -1) or x.shape[1] == 0:
            return real_topk(x, k, dim=dim, largest=largest, sorted=sorted)
        perm = torch.randperm(x.shape[1], generator=g).to(x.device)
        values, cols = real_topk(x.index_select(1, perm), k, dim=1, largest=largest, sorted=sorted)
        return torch.return_types.topk((values, perm[cols]))

    monkeypatch.setattr(torch, "topk", topk_with_shuffled_ties)
    shuffled = top_n_outliers(X, 10, 12, n_candidates=64, **SS)
    np.testing.assert_array_equal(shuffled.solving_set, reference.solving_set,
                                  err_msg=first_divergence(shuffled, reference))
    assert shuffled.distances_computed == reference.distances_computed
    np.testing.assert_array_equal(shuffled.indices, reference.indices)
    np.testing.assert_array_equal(shuffled.weights, reference.weights)


def test_inexact_tiles_are_certified_and_recomputed():
    """Float data goes through the float64 product + canonical re-rank; a point with more exact
    duplicates than the candidate margin cannot be certified and is recomputed in full."""
    rng = np.random.default_rng(13)
    X = np.vstack([np.repeat(rng.standard_normal((1, 2)), 60, axis=0), rng.standard_normal((300, 2))])
    X = X.astype(np.float32) + np.float32(0.3)
    space = PairSpace(torch.from_numpy(X), resolve_metric())
    assert not space.exact
    out = run(torch.from_numpy(X), 5, 20, method="solving_set", n_candidates=400, metric=resolve_metric(), seed=0,
              device=torch.device("cpu"), budget=2**26, backend=None)
    assert out["rows_recomputed"] > 0
    weights = oracle_weights(X, 20)
    o_idx, o_w = oracle_top(weights, 5)
    np.testing.assert_allclose(out["top_weights"].numpy(), o_w, rtol=1e-10)
    exact = PairSpace(torch.from_numpy(np.round(X * 10)), resolve_metric())
    assert exact.exact and exact.gamma == 0.0


def test_tree_sum_is_order_fixed_and_monotone():
    v = torch.tensor([[1e16, 1.0, -1e16, 1.0, 3.0]], dtype=torch.float64)
    assert float(tree_sum(v)) == float(((1e16 + 1.0) + (-1e16 + 1.0)) + (3.0 + 0.0))
    a = torch.rand(50, 7, dtype=torch.float64).sort(1).values
    assert torch.all(tree_sum(a + 1e-9) >= tree_sum(a))
    assert tree_sum(torch.empty(3, 0, dtype=torch.float64)).tolist() == [0.0, 0.0, 0.0]


def test_deadline_raises_with_statistics():
    X = _data("gaussian", n=500)
    with pytest.raises(SolvingSetTimeout, match="time limit") as info:
        run(torch.from_numpy(X), 5, 5, method="solving_set", n_candidates=10, metric=resolve_metric(), seed=0,
            device=torch.device("cpu"), budget=2**26, backend=None, deadline=0.0)
    assert info.value.stats["iterations"] == 0


# -- inputs and outputs ----------------------------------------------------------------------------------
def test_output_kinds_follow_the_input():
    X = _data("gaussian", n=200, seed=14)
    ref = top_n_outliers(X, 4, 3, **SS)
    assert isinstance(ref.indices, np.ndarray) and ref.indices.dtype == np.int64
    assert ref.weights.dtype == np.float64
    t = top_n_outliers(torch.from_numpy(X), 4, 3, **SS)
    assert isinstance(t.indices, torch.Tensor) and isinstance(t.solving_set, torch.Tensor)
    np.testing.assert_array_equal(t.indices.numpy(), ref.indices)
    df = top_n_outliers(pd.DataFrame(X), 4, 3, **SS)
    lst = top_n_outliers(X.tolist(), 4, 3, **SS)
    ro = X.copy()
    ro.setflags(write=False)
    for res in (df, lst, top_n_outliers(ro, 4, 3, **SS)):
        np.testing.assert_array_equal(res.indices, ref.indices)
    f64 = top_n_outliers(X.astype(np.float64), 4, 3, **SS)
    np.testing.assert_allclose(f64.weights, ref.weights, rtol=1e-12)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(X=[[np.nan, 1.0], [0.0, 0.0]]), ValueError, "NaN or infinity"),
        (dict(X=[1.0, 2.0, 3.0]), ValueError, "must be 2-D"),
        (dict(X=np.empty((0, 2))), ValueError, "empty"),
        (dict(X=[[1.0, 2.0]]), ValueError, "at least 2 points"),
        (dict(k=0), ValueError, "k must be at least 1"),
        (dict(k=2.5), TypeError, "k must be a positive integer"),
        (dict(k=50), ValueError, r"Expected k <= 19 \(n_samples - 1\), but k = 50 and n_samples = 20"),
        (dict(k=21, include_self=True), ValueError, r"Expected k <= 20 \(n_samples\)"),
        (dict(k=1, include_self=True), ValueError, "every weight 0"),
        (dict(n_outliers=0), ValueError, "n_outliers must be between 1 and n_samples = 20"),
        (dict(n_outliers=21), ValueError, "n_outliers must be between 1"),
        (dict(n_outliers="3"), TypeError, "n_outliers must be a positive integer"),
        (dict(method="nested_loop"), ValueError, "method must be one of"),
        (dict(metric="inner_product"), ValueError, "cannot define an outlier weight"),
        (dict(metric="hamming"), ValueError, "Unknown metric"),
        (dict(n_candidates=0), ValueError, "n_candidates must be 'auto' or a positive integer"),
        (dict(n_candidates="many"), ValueError, "n_candidates must be 'auto'"),
        (dict(include_self="yes"), TypeError, "include_self must be True or False"),
        (dict(random_state="seed"), TypeError, "random_state must be"),
        (dict(working_memory=-1), ValueError, "working_memory must be a positive, finite number"),
        (dict(backend="cuda"), ValueError, "backend must be one of"),
    ],
)
def test_bad_input_errors(kwargs, error, match):
    args = dict(X=_data("gaussian", n=20), n_outliers=3, k=3, device="cpu")
    args.update(kwargs)
    with pytest.raises(error, match=match):
        top_n_outliers(**args)


def test_explicit_triton_backend_for_the_solving_set_raises():
    with pytest.raises(ValueError, match="triton"):
        top_n_outliers(_data("gaussian", n=20), 3, 3, backend="triton", device="cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised when no GPU is present")
def test_explicit_cuda_without_gpu_raises():
    with pytest.raises(ValueError, match="no CUDA GPU"):
        top_n_outliers(_data("gaussian", n=20), 3, 3, method="solving_set", device="cuda")


# -- real data ---------------------------------------------------------------------------------------------
def _adbench(name):
    from gpumine.datasets import load_adbench

    path = shared_file(f"adbench/{name}.npz")
    X, y = load_adbench(name, path=path)
    return X, y


def _sklearn_reference(X, k):
    dist, _ = NearestNeighbors(n_neighbors=k, algorithm="kd_tree").fit(X.astype(np.float64)).kneighbors()
    return dist.sum(1)


def test_real_adbench_mammography_solving_set_equals_reference():
    X, _ = _adbench("23_mammography")  # 11,183 x 6, real measurements with duplicate rows
    k = 10
    reference = _sklearn_reference(X, k)
    ss = top_n_outliers(X, 10, k, **SS)
    assert_top_matches_oracle(ss, reference, 10, rtol=1e-9)
    assert ss.distance_fraction < 0.5


@pytest.mark.slow
@pytest.mark.parametrize("name, k", [("34_smtp", 5), ("16_http", 10), ("10_cover", 50)])
def test_real_adbench_large_sets_solving_set_equals_reference(name, k):
    """Real sets with many duplicate rows (smtp, http) and the Covertype sample; on the GPU when there is one."""
    X, _ = _adbench(name)
    reference = _sklearn_reference(X, k)
    ss = top_n_outliers(X, 10, k, method="solving_set", device="auto")
    assert_top_matches_oracle(ss, reference, 10, rtol=1e-9)
    assert ss.distance_fraction < 0.5


# -- GPU ---------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("name", DATASETS)
@pytest.mark.parametrize("method", ["solving_set", "brute_force"])
def test_gpu_equals_cpu_bit_for_bit(name, method, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine (run the gpu tier on the device machine)")
    X = _data(name, n=3000)
    # the same tile width on both (the default working memory differs by device, and with it the
    # count of distances: see test_solving_set_is_independent_of_tie_order_and_tiles)
    cpu = top_n_outliers(X, 10, 12, method=method, n_candidates=128, working_memory=16, **CPU)
    # the GPU's default SolvingSet form (engine searches): canonical weights, so the same bits
    gpu = top_n_outliers(X, 10, 12, method=method, n_candidates=128, working_memory=16, device="cuda")
    np.testing.assert_array_equal(gpu.indices, cpu.indices)
    np.testing.assert_array_equal(gpu.weights, cpu.weights)
    assert_top_matches_oracle(gpu, oracle_weights(X, 12), 10, rtol=1e-10)
    if method == "solving_set" and name != "integers":
        # the CPU's tile form on the GPU takes the same path. Not on the integer grid: on an
        # H200 (2026-11-21, twice, the same working memory on both devices) the upper bounds of
        # 588 of 3,000 points differed from the CPU's in their last bits from iteration 3 on, so
        # a different (valid) solving set was chosen; top-n and weights were bit-identical. Tie
        # order and tile width are ruled out on the CPU
        # (test_solving_set_is_independent_of_tie_order_and_tiles); the cause is not found.
        monkeypatch.setitem(_distance_based.SOLVING_SET_ENGINE_MIN_FEATURES, "cuda", None)
        tiles = top_n_outliers(X, 10, 12, method=method, n_candidates=128, working_memory=16, device="cuda")
        np.testing.assert_array_equal(tiles.solving_set, cpu.solving_set, err_msg=first_divergence(tiles, cpu))
        assert tiles.distances_computed == cpu.distances_computed
        np.testing.assert_array_equal(tiles.weights, cpu.weights)
    tensor = top_n_outliers(torch.from_numpy(X).cuda(), 10, 12, method=method, device="cuda")
    assert tensor.indices.is_cuda and tensor.weights.is_cuda
    np.testing.assert_array_equal(tensor.indices.cpu().numpy(), cpu.indices)


@pytest.mark.gpu
def test_gpu_covtype_k50_solving_set_equals_brute_force(monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine (run the gpu tier on the device machine)")
    X, _ = _adbench("10_cover")
    ss = top_n_outliers(X, 10, 50, method="solving_set", device="cuda")  # engine searches: more pairs, on the fused kernel
    bf = top_n_outliers(X, 10, 50, method="brute_force", device="cuda")
    np.testing.assert_array_equal(ss.indices, bf.indices)
    np.testing.assert_array_equal(ss.weights, bf.weights)
    assert ss.stats["form"] == "engine" and ss.distance_fraction < 0.5
    monkeypatch.setitem(_distance_based.SOLVING_SET_ENGINE_MIN_FEATURES, "cuda", None)
    tiles = top_n_outliers(X, 10, 50, method="solving_set", device="cuda")
    np.testing.assert_array_equal(tiles.indices, bf.indices)
    np.testing.assert_array_equal(tiles.weights, bf.weights)
    assert tiles.stats["form"] == "tiles" and tiles.distance_fraction < 0.2


def test_auto_method_picks_by_device_rows_and_features(monkeypatch):
    resolve = _distance_based.resolve_method
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    gpu_rows = _distance_based.AUTO_BRUTE_FORCE["cuda"]["max_rows"]
    assert resolve("auto", cuda, gpu_rows, 500) == "brute_force" and resolve("auto", cuda, gpu_rows + 1, 3) == "solving_set"
    cpu_rule = _distance_based.AUTO_BRUTE_FORCE["cpu"]
    assert resolve("auto", cpu, cpu_rule["max_rows"], cpu_rule["max_features"]) == "brute_force"
    assert resolve("auto", cpu, cpu_rule["max_rows"] + 1, cpu_rule["max_features"]) == "solving_set"
    assert resolve("auto", cpu, 10, cpu_rule["max_features"] + 1) == "solving_set"
    assert resolve("auto", cpu, 10**8, cpu_rule["few_features"]) == "brute_force"
    assert resolve("solving_set", cuda, 10, 2) == "solving_set" and resolve("brute_force", cpu, 10**9, 900) == "brute_force"
    X = np.random.default_rng(3).normal(size=(500, 40))
    auto = top_n_outliers(X, 7, 5, **CPU)  # 40 features: past the CPU's small-size rule
    assert auto.method == "solving_set"
    monkeypatch.setitem(_distance_based.AUTO_BRUTE_FORCE["cpu"], "max_features", 40)
    small = top_n_outliers(X, 7, 5, **CPU)
    assert small.method == "brute_force" and small.iterations == 1 and len(small.solving_set) == 500
    np.testing.assert_array_equal(small.indices, auto.indices)
    np.testing.assert_array_equal(small.weights, auto.weights)
    monkeypatch.setitem(_distance_based.AUTO_BRUTE_FORCE["cpu"], "max_rows", 499)
    assert top_n_outliers(X, 7, 5, method="auto", **CPU).method == "solving_set"
