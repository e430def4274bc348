"""LOF: tensor functions, the estimator against scikit-learn, duplicates, novelty, devices."""

import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.neighbors import LocalOutlierFactor as SkLOF
from sklearn.utils.estimator_checks import parametrize_with_checks

from gpumine.core.distance import get_metric
from gpumine.datasets import load_covtype_sample
from gpumine.outliers._lof import (
    DuplicatesWarning,
    k_distances,
    lof_fit,
    lof_from_knn,
    local_outlier_factor,
)
from gpumine.outliers._lof_estimator import LocalOutlierFactor
from helpers import DEVICES, skip_if_no_cuda

CPU = torch.device("cpu")


def _data(n=400, d=5, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    X = np.concatenate([rng.standard_normal((n - 20, d)) * 3.0, rng.uniform(-15, 15, (20, d))])
    return X.astype(dtype)


# -- tensor functions --------------------------------------------------------------------------------
def test_lof_from_knn_by_hand():
    # 1-D points 0, 1, 2, 10 with k = 1
    X = torch.tensor([[0.0], [1.0], [2.0], [10.0]], dtype=torch.float64)
    dist = torch.tensor([[1.0], [1.0], [1.0], [8.0]], dtype=torch.float64)
    idx = torch.tensor([[1], [0], [1], [2]])
    fit = lof_from_knn(dist, idx, X, get_metric("euclidean"))
    # k-distances 1,1,1,8; reach(0,1)=1, reach(1,0)=1, reach(2,1)=1, reach(10,2)=8
    torch.testing.assert_close(fit.lrd, torch.tensor([1.0, 1.0, 1.0, 1 / 8], dtype=torch.float64))
    torch.testing.assert_close(fit.lof, torch.tensor([1.0, 1.0, 1.0, 8.0], dtype=torch.float64))
    assert fit.n_duplicate_points == 0


def test_lof_uses_lrd_of_the_neighbours_not_of_the_point():
    # the seed's Eq. 3 erratum: with lrd(p) inside the sum every LOF would be 1
    lrd = torch.tensor([1.0, 4.0])
    out = local_outlier_factor(lrd, torch.tensor([[1], [0]]), lrd)
    torch.testing.assert_close(out, torch.tensor([4.0, 0.25]))


def test_k_distinct_distance_for_duplicate_groups():
    # a group of 4 identical points at 0 (k = 2: each has k-distance 0) and points at 1, 3, 7
    ref = torch.tensor([[0.0], [0.0], [0.0], [0.0], [1.0], [3.0], [7.0]])
    dist = torch.tensor([[0.0, 0.0]] * 4 + [[1.0, 1.0], [2.0, 3.0], [4.0, 6.0]])
    kd, n_zero = k_distances(dist, ref, get_metric("euclidean"))
    assert n_zero == 4
    # the 2nd nearest other distinct location from 0 is 3
    torch.testing.assert_close(kd, torch.tensor([3.0, 3.0, 3.0, 3.0, 1.0, 3.0, 6.0], dtype=torch.float64))
    kd_sk, _ = k_distances(dist, ref, get_metric("euclidean"), duplicates="sklearn")
    assert kd_sk[:4].eq(0).all()


def test_k_distinct_distance_with_cosine_parallel_vectors():
    # parallel vectors are at cosine distance 0 without being identical rows (power-of-two
    # scales keep the normalised vectors bit-identical, so the distances are exactly 0)
    rng = np.random.default_rng(3)
    base = rng.standard_normal((1, 4))
    group = base * 2.0 ** np.arange(-6, 6)[:, None]
    others = rng.standard_normal((40, 4))
    X = torch.as_tensor(np.concatenate([group, others]))
    with pytest.warns(DuplicatesWarning):
        fit = lof_fit(X, 5, get_metric("cosine"), device=CPU, budget_bytes=2**24)
    assert torch.isfinite(fit.lof).all() and (fit.k_distance > 0).all()
    torch.testing.assert_close(fit.lof[:12], torch.ones(12, dtype=torch.float64))


# -- against scikit-learn ------------------------------------------------------------------------------
@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "chebyshev", "cosine"])
@pytest.mark.parametrize("k", [1, 5, 20])
def test_negative_outlier_factor_equals_sklearn_float64(metric, k):
    X = _data()
    ref = SkLOF(n_neighbors=k, metric=metric, algorithm="brute").fit(X)
    # duplicates="sklearn" adds scikit-learn's 1e-10 to the mean reach-distance: equal to 1e-10
    # whatever the distance scale
    ours = LocalOutlierFactor(k, metric=metric, device="cpu", duplicates="sklearn").fit(X)
    assert ours.negative_outlier_factor_.dtype == np.float64
    np.testing.assert_allclose(ours.negative_outlier_factor_, ref.negative_outlier_factor_, rtol=1e-10)
    # the default rule leaves that 1e-10 out: the difference is ~1e-10 / (mean reach-distance),
    # below 1e-10 at this data scale for true distances; cosine distances here are ~1e-3
    ours = LocalOutlierFactor(k, metric=metric, device="cpu").fit(X)
    rtol = 1e-6 if metric == "cosine" else 1e-10
    np.testing.assert_allclose(ours.negative_outlier_factor_, ref.negative_outlier_factor_, rtol=rtol)
    assert ours.n_neighbors_ == ref.n_neighbors_ and ours.offset_ == ref.offset_
    np.testing.assert_array_equal(ours.fit_predict(X), ref.fit_predict(X))
    np.testing.assert_allclose(ours.outlier_scores_, -ref.negative_outlier_factor_, rtol=rtol)


def test_negative_outlier_factor_equals_sklearn_float32():
    X = _data(dtype=np.float32, n=1000, d=8)
    ours = LocalOutlierFactor(20, device="cpu").fit(X)
    ref = SkLOF(n_neighbors=20).fit(X)
    assert ours.negative_outlier_factor_.dtype == np.float32
    np.testing.assert_allclose(ours.negative_outlier_factor_, ref.negative_outlier_factor_, rtol=1e-5)


def test_minkowski_p_and_sqeuclidean_equal_sklearn():
    X = _data(n=300, d=3)
    for kwargs in ({"metric": "minkowski", "p": 3}, {"metric": "sqeuclidean"}):
        ours = LocalOutlierFactor(10, device="cpu", **kwargs).fit(X)
        ref = SkLOF(n_neighbors=10, algorithm="brute", **kwargs).fit(X)
        np.testing.assert_allclose(ours.negative_outlier_factor_, ref.negative_outlier_factor_, rtol=1e-9)


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-10), (np.float32, 1e-5)])
def test_novelty_scores_equal_sklearn(dtype, rtol):
    X = _data(n=600, dtype=dtype)
    train, new = X[:450], X[450:]
    ours = LocalOutlierFactor(15, novelty=True, device="cpu").fit(train)
    ref = SkLOF(n_neighbors=15, novelty=True).fit(train)
    np.testing.assert_allclose(ours.score_samples(new), ref.score_samples(new), rtol=rtol)
    np.testing.assert_allclose(ours.decision_function(new), ref.decision_function(new), rtol=rtol, atol=1e-6)
    np.testing.assert_array_equal(ours.predict(new), ref.predict(new))
    # a training point queried as new data counts itself among its neighbours, as in scikit-learn
    np.testing.assert_allclose(ours.score_samples(train[:10]), ref.score_samples(train[:10]), rtol=rtol)


def test_contamination_offset_and_labels_equal_sklearn():
    X = _data(n=500)
    ours = LocalOutlierFactor(20, contamination=0.05, device="cpu")
    ref = SkLOF(n_neighbors=20, contamination=0.05)
    np.testing.assert_array_equal(ours.fit_predict(X), ref.fit_predict(X))
    assert ours.offset_ == pytest.approx(ref.offset_, rel=1e-10)
    assert (ours.fit_predict(X) == -1).sum() == 25


def test_real_data_covertype_sample_agrees_with_sklearn():
    """The shipped Covertype sample (real UCI rows): integer attributes, so some distances tie."""
    X, _ = load_covtype_sample(n_features=10, dtype=np.float64)
    X = X[:2500]
    X = (X - X.mean(0)) / X.std(0)
    ours = LocalOutlierFactor(20, duplicates="sklearn", device="cpu").fit(X).negative_outlier_factor_
    ref = SkLOF(n_neighbors=20, algorithm="brute").fit(X).negative_outlier_factor_
    close = np.isclose(ours, ref, rtol=1e-10, atol=0)
    # rows may differ only where distance ties make the k-neighbourhood ambiguous
    assert close.mean() > 0.97
    order_ours, order_ref = np.argsort(np.argsort(ours)), np.argsort(np.argsort(ref))
    assert np.corrcoef(order_ours, order_ref)[0, 1] > 0.999


# -- duplicates -------------------------------------------------------------------------------------------
def _with_duplicate_group(seed=1, copies=30):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((300, 2))
    group = np.repeat([[0.3, 0.2]], copies, axis=0)
    far = np.array([[9.0, 9.0]])
    return np.concatenate([X, group, far])


def test_duplicates_default_rule_is_finite_meaningful_and_warns():
    X = _with_duplicate_group()
    k = 10
    with pytest.warns(DuplicatesWarning, match="30 point"):
        model = LocalOutlierFactor(k, device="cpu").fit(X)
    lof = model.outlier_scores_
    assert model.n_duplicate_points_ == 30
    assert np.isfinite(lof).all()
    np.testing.assert_allclose(lof[300:330], 1.0)  # a dense group of identical points is an inlier
    assert np.argmax(lof) == 330  # the isolated point is still the top outlier
    assert lof[:300].max() < 10  # no blow-up around the group
    # scikit-learn's rule: neighbours of the group get scores around 1e9 and it warns
    with pytest.warns(UserWarning, match="Duplicate values"):
        ref = SkLOF(n_neighbors=k).fit(X)
    assert -ref.negative_outlier_factor_.min() > 1e7
    with pytest.warns(DuplicatesWarning, match="Duplicate values"):
        sk_rule = LocalOutlierFactor(k, duplicates="sklearn", device="cpu").fit(X)
    np.testing.assert_allclose(sk_rule.negative_outlier_factor_, ref.negative_outlier_factor_, rtol=1e-9)


def test_fewer_than_k_duplicates_need_no_rule():
    rng = np.random.default_rng(2)
    X = np.concatenate([rng.standard_normal((200, 3)), np.repeat(rng.standard_normal((1, 3)), 5, axis=0)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", DuplicatesWarning)
        ours = LocalOutlierFactor(10, device="cpu").fit(X)
    ref = SkLOF(n_neighbors=10).fit(X)
    assert ours.n_duplicate_points_ == 0
    np.testing.assert_allclose(ours.negative_outlier_factor_, ref.negative_outlier_factor_, rtol=1e-9)


def test_all_points_identical_give_lof_one():
    X = np.ones((25, 3))
    with pytest.warns(DuplicatesWarning):
        model = LocalOutlierFactor(5, device="cpu").fit(X)
    np.testing.assert_array_equal(model.negative_outlier_factor_, -1.0)
    novel = LocalOutlierFactor(5, novelty=True, device="cpu")
    with pytest.warns(DuplicatesWarning):
        novel.fit(X)
    scores = novel.score_samples(np.array([[1.0, 1.0, 1.0], [2.0, 1.0, 1.0]]))
    assert scores[0] == -1.0 and scores[1] == -np.inf  # no scale at all: any other point is infinitely far out


def test_novelty_scores_near_duplicates_are_finite():
    X = _with_duplicate_group()
    with pytest.warns(DuplicatesWarning):
        model = LocalOutlierFactor(10, novelty=True, device="cpu").fit(X)
    s = model.score_samples(np.array([[0.3, 0.2], [0.35, 0.2], [8.0, -8.0]]))
    assert np.isfinite(s).all()
    assert s[0] == pytest.approx(-1.0) and s[2] < -5


# -- API conventions --------------------------------------------------------------------------------------
def test_novelty_mode_errors_match_sklearn():
    X = _data(n=60)
    plain = LocalOutlierFactor(5, device="cpu").fit(X)
    for name in ("predict", "score_samples", "decision_function"):
        assert not hasattr(plain, name)
        with pytest.raises(AttributeError) as info:
            getattr(plain, name)
        # scikit-learn's available_if chains the reason, exactly as for its own LocalOutlierFactor
        assert f"{name} is not available when novelty=False" in str(info.value.__cause__)
    novel = LocalOutlierFactor(5, novelty=True, device="cpu")
    assert not hasattr(novel, "fit_predict")
    with pytest.raises(AttributeError) as info:
        novel.fit_predict(X)
    assert "fit_predict is not available when novelty=True" in str(info.value.__cause__)
    with pytest.raises(AttributeError) as sk_info:
        SkLOF(5).fit(X).predict(X)
    assert type(sk_info.value.__cause__) is AttributeError


def test_parameter_and_input_errors():
    X = _data(n=50)
    with pytest.raises(ValueError, match="inner_product"):
        LocalOutlierFactor(metric="inner_product", device="cpu").fit(X)
    with pytest.raises(ValueError, match="contamination"):
        LocalOutlierFactor(contamination=0.7, device="cpu").fit(X)
    with pytest.raises(ValueError, match="duplicates"):
        LocalOutlierFactor(duplicates="ignore", device="cpu").fit(X)
    with pytest.raises(ValueError, match="at least 2 samples"):
        LocalOutlierFactor(device="cpu").fit(X[:1])
    with pytest.warns(UserWarning, match="n_neighbors will be set to"):
        model = LocalOutlierFactor(80, device="cpu").fit(X)
    assert model.n_neighbors_ == 49
    novel = LocalOutlierFactor(5, novelty=True, device="cpu").fit(X)
    with pytest.raises(ValueError, match="X has 3 features, but LocalOutlierFactor is expecting 5"):
        novel.score_samples(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="NaN or infinity"):
        novel.predict(np.full((1, 5), np.nan))
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            LocalOutlierFactor(device="cuda").fit(X)


def test_output_kinds_follow_input():
    X = _data(n=120, dtype=np.float32)
    model = LocalOutlierFactor(10, novelty=True, device="cpu").fit(torch.from_numpy(X))
    assert isinstance(model.negative_outlier_factor_, torch.Tensor)
    assert model.negative_outlier_factor_.dtype == torch.float32
    out = model.predict(torch.from_numpy(X[:5]))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.int64
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(5)])
    model = LocalOutlierFactor(10, novelty=True, device="cpu").fit(frame)
    assert model.feature_names_in_.tolist() == list(frame.columns)
    assert isinstance(model.score_samples(frame), np.ndarray)
    # read-only input (memmaps) works
    ro = X.copy()
    ro.setflags(write=False)
    np.testing.assert_allclose(LocalOutlierFactor(10, device="cpu").fit(ro).negative_outlier_factor_,
                               LocalOutlierFactor(10, device="cpu").fit(X).negative_outlier_factor_)


def test_kneighbors_is_available_like_sklearn():
    X = _data(n=80)
    ours = LocalOutlierFactor(5, device="cpu").fit(X)
    ref = SkLOF(n_neighbors=5).fit(X)
    d, i = ours.kneighbors()
    rd, ri = ref.kneighbors()
    np.testing.assert_array_equal(i, ri)
    np.testing.assert_allclose(d, rd, rtol=1e-12)


def test_working_memory_does_not_change_results():
    X = _data(n=700, dtype=np.float32)
    a = LocalOutlierFactor(20, device="cpu", working_memory=0.25).fit(X).negative_outlier_factor_
    b = LocalOutlierFactor(20, device="cpu").fit(X).negative_outlier_factor_
    np.testing.assert_array_equal(a, b)


@parametrize_with_checks([LocalOutlierFactor(device="cpu"), LocalOutlierFactor(novelty=True, device="cpu")])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


# -- devices -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_devices_give_the_same_scores(device):
    skip_if_no_cuda(device)
    X = _data(n=3000, d=10, dtype=np.float32, seed=5)
    cpu = LocalOutlierFactor(20, device="cpu").fit(X).negative_outlier_factor_
    dev = LocalOutlierFactor(20, device=device).fit(X).negative_outlier_factor_
    np.testing.assert_allclose(dev, cpu, rtol=1e-6)
    ref = SkLOF(n_neighbors=20).fit(X).negative_outlier_factor_
    np.testing.assert_allclose(dev, ref, rtol=1e-5)


@pytest.mark.gpu
def test_gpu_tensor_in_tensor_out_and_duplicates():
    skip_if_no_cuda("cuda")
    X = torch.as_tensor(_with_duplicate_group(), dtype=torch.float32, device="cuda")
    with pytest.warns(DuplicatesWarning):
        model = LocalOutlierFactor(10, device="cuda").fit(X)
    nof = model.negative_outlier_factor_
    assert nof.is_cuda and torch.isfinite(nof).all()
    with pytest.warns(DuplicatesWarning):
        cpu = LocalOutlierFactor(10, device="cpu").fit(X.cpu()).negative_outlier_factor_
    torch.testing.assert_close(nof.cpu(), cpu, rtol=1e-5, atol=0)


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_large_batch_agrees_with_sklearn_on_a_sample():
    skip_if_no_cuda("cuda")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200_000, 10)).astype(np.float32)
    nof = LocalOutlierFactor(20, device="cuda").fit(X).negative_outlier_factor_
    sub = X[:20_000]
    sub_ours = LocalOutlierFactor(20, device="cuda").fit(sub).negative_outlier_factor_
    sub_ref = SkLOF(n_neighbors=20, n_jobs=-1).fit(sub).negative_outlier_factor_
    np.testing.assert_allclose(sub_ours, sub_ref, rtol=1e-5)
    assert np.isfinite(nof).all() and abs(np.median(nof) + 1) < 0.1


def test_functional_lof_scores_equal_the_estimator():
    from gpumine.outliers._lof_estimator import lof_scores

    X = _data(n=200, dtype=np.float32)
    np.testing.assert_array_equal(lof_scores(X, 12, device="cpu"), LocalOutlierFactor(12, device="cpu").fit(X).outlier_scores_)
    t = lof_scores(torch.from_numpy(X), 12, metric="manhattan", device="cpu")
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32
    with pytest.raises(ValueError, match="n_neighbors"):
        lof_scores(X, 200, device="cpu")


@pytest.mark.gpu
def test_repeated_small_fits_on_the_gpu_replay_the_search_graph_with_eager_results(monkeypatch):
    """The third fit of a shape replays a captured search; its scores equal the eager path's bit for bit."""
    import torch

    from gpumine.neighbors.engine import _exact_select, _graphs
    from gpumine.outliers import LocalOutlierFactor

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    rng = np.random.default_rng(7)
    sets = [rng.integers(0, 5, size=(500, 4)).astype(np.float32) for _ in range(3)]
    # shapes the exact-selection kernel takes first run in one launch without a graph
    monkeypatch.setattr(_exact_select, "EXACT_SELECT_FIRST_PAIRS", 0)
    monkeypatch.setattr(_exact_select, "EXACT_SELECT_MANY_PAIRS", 0)
    monkeypatch.setattr(_exact_select, "EXACT_SELECT_TINY_TERMS", 0)
    _graphs.clear_search_graphs()
    graph = [LocalOutlierFactor(n_neighbors=10, device="cuda").fit(X).negative_outlier_factor_ for X in sets]
    assert _graphs._graphs, "the repeated fits captured no search graph"
    monkeypatch.setattr(_graphs, "GRAPH_SEARCHES", False)
    eager = [LocalOutlierFactor(n_neighbors=10, device="cuda").fit(X).negative_outlier_factor_ for X in sets]
    for g, e in zip(graph, eager):
        np.testing.assert_array_equal(g, e)


def test_duplicates_search_follows_the_estimators_backend_not_the_global_setting():
    import gpumine

    rng = np.random.default_rng(0)
    X = np.r_[np.zeros((10, 2)), rng.standard_normal((50, 2))].astype(np.float32)  # 10 duplicates > k
    plain = LocalOutlierFactor(n_neighbors=5, device="cpu").fit(X)
    with gpumine.config_context(backend="triton"):  # not runnable on the CPU: the estimator's "torch" wins
        with pytest.warns(DuplicatesWarning):
            ours = LocalOutlierFactor(n_neighbors=5, backend="torch", device="cpu").fit(X)
    np.testing.assert_array_equal(ours.negative_outlier_factor_, plain.negative_outlier_factor_)
    assert ours.n_duplicate_points_ == 10
