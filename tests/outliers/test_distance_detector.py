"""DistanceOutlierDetector: scikit-learn conventions, the solving set as a model, predict on new points."""

import pickle

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.spatial.distance import cdist
from sklearn.utils.estimator_checks import parametrize_with_checks

from gpumine.outliers._distance_based import top_n_outliers
from gpumine.outliers._distance_detector import DistanceOutlierDetector

# Checks expected to fail, with the reason. A stale entry (a check that now passes) makes
# scikit-learn's runner fail (xfail_strict), so this list stays honest. None are expected.
EXPECTED_FAILED_CHECKS = {}


@parametrize_with_checks(
    [
        DistanceOutlierDetector(device="cpu"),
        DistanceOutlierDetector(device="cpu", method="brute_force"),
        DistanceOutlierDetector(n_neighbors=3, include_self=True, n_candidates=16, device="cpu"),
    ],
    expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS.get(type(est).__name__, {}),
)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def _blobs(n=600, seed=0):
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.standard_normal((n // 2, 2)), rng.standard_normal((n // 2, 2)) * 0.5 + [6, 6]])
    X[:4] = rng.uniform(-12, 18, (4, 2))  # planted outliers
    return X.astype(np.float32)


def _weights_against(Xq, ref, k):
    D = cdist(np.asarray(Xq, np.float64), np.asarray(ref, np.float64))
    return np.sort(D, axis=1)[:, :k].sum(1)


@pytest.mark.parametrize("method", ["solving_set", "brute_force"])
def test_fit_matches_top_n_outliers_and_labels(method):
    X = _blobs()
    det = DistanceOutlierDetector(n_neighbors=7, n_outliers=12, method=method, device="cpu").fit(X)
    res = top_n_outliers(X, 12, 7, method=method, device="cpu")
    np.testing.assert_array_equal(det.outlier_indices_, res.indices)
    np.testing.assert_array_equal(np.flatnonzero(det.labels_ == -1), np.sort(res.indices))
    assert det.labels_.dtype == np.int64 and set(np.unique(det.labels_)) == {-1, 1}
    assert det.threshold_ == res.threshold == res.weights[-1]
    np.testing.assert_array_equal(det.outlier_scores_[det.outlier_indices_], res.weights)
    np.testing.assert_array_equal(det.fit_predict(X), det.labels_)
    assert det.n_outliers_ == 12 and det.n_iter_ == res.iterations and det.method_ == res.method == method
    assert det.distance_fraction_ == pytest.approx(res.distance_fraction)
    assert det.effective_metric_ == "euclidean" and det.n_features_in_ == 2


@pytest.mark.parametrize("method", ["solving_set", "brute_force"])
@pytest.mark.parametrize("include_self", [False, True])
def test_predict_on_the_training_set_reproduces_labels(method, include_self):
    X = _blobs(seed=1)
    det = DistanceOutlierDetector(n_neighbors=6, contamination=0.05, method=method, include_self=include_self,
                                  n_candidates=32, device="cpu").fit(X)
    np.testing.assert_array_equal(det.predict(X), det.labels_)
    decision = det.decision_function(X)
    np.testing.assert_array_equal(decision < 0, det.labels_ == -1)
    np.testing.assert_allclose(det.score_samples(X) - det.offset_, decision)
    # the outliers' scores are their exact training weights
    np.testing.assert_array_equal(-det.score_samples(X[det.outlier_indices_]), det.outlier_scores_[det.outlier_indices_])


def test_new_points_are_weighed_against_the_solving_set():
    X = _blobs(seed=2)
    k = 5
    det = DistanceOutlierDetector(n_neighbors=k, n_outliers=10, n_candidates=32, method="solving_set", device="cpu").fit(X)
    S = X[det.solving_set_]
    assert len(det.solving_set_) < len(X)  # the model is a strict subset
    rng = np.random.default_rng(3)
    new = np.vstack([rng.standard_normal((50, 2)), [[40.0, 40.0], [-30.0, 5.0]]]).astype(np.float32)
    expected = _weights_against(new, S, k)
    np.testing.assert_allclose(-det.score_samples(new), expected, rtol=1e-10)
    pred = det.predict(new)
    np.testing.assert_array_equal(pred, np.where(expected >= det.threshold_, -1, 1))
    assert pred[-1] == -1 and pred[-2] == -1
    # against the solving set, a weight bounds the weight against the whole training set from above:
    # an inlier verdict from the solving set is certain
    bf = DistanceOutlierDetector(n_neighbors=k, n_outliers=10, method="brute_force", device="cpu").fit(X)
    np.testing.assert_allclose(-bf.score_samples(new), _weights_against(new, X, k), rtol=1e-10)
    assert bf.threshold_ == det.threshold_
    assert np.all(-det.score_samples(new) >= -bf.score_samples(new) * (1 - 1e-12))
    assert np.all(bf.predict(new)[pred == 1] == 1)


def test_include_self_for_new_points_counts_the_point_as_its_own_neighbour():
    X = _blobs(seed=4)
    det = DistanceOutlierDetector(n_neighbors=5, include_self=True, n_outliers=8, method="brute_force",
                                  device="cpu").fit(X)
    new = np.array([[0.3, 0.2], [20.0, -3.0]], dtype=np.float32)
    np.testing.assert_allclose(-det.score_samples(new), _weights_against(new, X, 4), rtol=1e-10)


def test_a_row_equal_to_a_solving_set_point_gets_its_training_weight():
    X = _blobs(seed=5)
    det = DistanceOutlierDetector(n_neighbors=4, n_outliers=6, n_candidates=32, device="cpu").fit(X)
    member = int(det.solving_set_[0])
    own = det.outlier_scores_[member]
    assert -det.score_samples(X[member : member + 1])[0] == own
    # a nearby new point is a new point: its distance to the member counts
    near = X[member : member + 1] + np.float32(1e-3)
    assert -det.score_samples(near)[0] != own


def test_weight_exactly_at_threshold_is_an_outlier():
    X = np.array([[0.0], [1.0], [2.0], [3.0], [10.0]], dtype=np.float64)
    det = DistanceOutlierDetector(n_neighbors=1, n_outliers=1, device="cpu").fit(X)
    assert det.threshold_ == 7.0 and det.outlier_indices_.tolist() == [4]
    assert det.offset_ > -7.0 and np.nextafter(det.offset_, -np.inf) == -7.0
    q = np.array([[17.0], [16.999], [-7.0]])  # weights 7 (at the threshold), just below, and 7 again
    np.testing.assert_array_equal(det.predict(q), [-1, 1, -1])
    assert np.all((det.decision_function(q) < 0) == (det.predict(q) == -1))


def test_contamination_and_n_outliers():
    X = _blobs(n=300, seed=6)
    assert DistanceOutlierDetector(contamination=0.1, device="cpu").fit(X).n_outliers_ == 30
    assert DistanceOutlierDetector(contamination=0.011, device="cpu").fit(X).n_outliers_ == 4  # ceil(3.3)
    det = DistanceOutlierDetector(n_outliers=7, contamination=0.4, device="cpu").fit(X)
    assert det.n_outliers_ == 7 and (det.labels_ == -1).sum() == 7


@pytest.mark.parametrize(
    "params, error, match",
    [
        (dict(contamination=0.7), ValueError, r"contamination must be a float in \(0, 0.5\]"),
        (dict(contamination=0.0), ValueError, "contamination must be"),
        (dict(contamination="auto"), ValueError, "contamination must be"),
        (dict(n_outliers=0), ValueError, "n_outliers must be between 1 and n_samples = 40"),
        (dict(n_outliers=2.0), TypeError, "n_outliers must be a positive integer"),
        (dict(n_neighbors=40), ValueError, r"Expected n_neighbors <= 39 \(n_samples - 1\)"),
        (dict(n_neighbors=0), ValueError, "n_neighbors must be at least 1"),
        (dict(n_neighbors=1, include_self=True), ValueError, "every weight 0"),
        (dict(method="bf"), ValueError, "method must be one of"),
        (dict(metric="inner_product"), ValueError, "cannot define an outlier weight"),
        (dict(device="tpu"), ValueError, "not a device name"),
        (dict(backend="triton"), ValueError, "triton"),
    ],
)
def test_bad_parameters(params, error, match):
    with pytest.raises(error, match=match):
        DistanceOutlierDetector(**{"device": "cpu", **params}).fit(_blobs(n=40))


def test_predict_input_errors_and_not_fitted():
    det = DistanceOutlierDetector(device="cpu")
    with pytest.raises(Exception, match="not fitted"):
        det.predict([[0.0, 0.0]])
    det.fit(_blobs(n=100))
    with pytest.raises(ValueError, match="X has 3 features, but DistanceOutlierDetector is expecting 2"):
        det.predict(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="NaN or infinity"):
        det.score_samples([[np.nan, 0.0]])
    assert det.predict(np.empty((0, 2))).shape == (0,)


def test_output_kinds_pickle_and_feature_names():
    X = _blobs(n=200, seed=7)
    df = pd.DataFrame(X, columns=["a", "b"])
    det = DistanceOutlierDetector(n_neighbors=4, n_outliers=5, device="cpu").fit(df)
    assert det.feature_names_in_.tolist() == ["a", "b"]
    with pytest.warns(UserWarning, match="does not have valid feature names"):
        out = det.score_samples(torch.from_numpy(X[:10]))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64
    np.testing.assert_array_equal(out.numpy(), det.score_samples(df.iloc[:10]))
    clone = pickle.loads(pickle.dumps(det))
    np.testing.assert_array_equal(clone.predict(df), det.predict(df))
    np.testing.assert_array_equal(clone.labels_, det.labels_)


@pytest.mark.gpu
def test_gpu_estimator_matches_cpu_and_returns_cuda_tensors():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine (run the gpu tier on the device machine)")
    X = _blobs(n=4000, seed=8)
    common = dict(n_neighbors=10, n_outliers=20, n_candidates=256, method="solving_set")
    cpu = DistanceOutlierDetector(device="cpu", **common).fit(X)
    gpu = DistanceOutlierDetector(device="cuda", **common).fit(X)
    np.testing.assert_array_equal(gpu.labels_, cpu.labels_)
    np.testing.assert_array_equal(gpu.solving_set_, cpu.solving_set_)
    new = np.random.default_rng(9).standard_normal((500, 2)).astype(np.float32) * 4
    # "auto" on a GPU: brute force at this size (the model is every point), the same outliers and
    # labels of the training set (new points' labels may differ: a solving set's predictions are
    # one-sided, every true outlier is predicted one)
    auto = DistanceOutlierDetector(n_neighbors=10, n_outliers=20, device="cuda").fit(X)
    assert auto.method_ == "brute_force" and cpu.method_ == "solving_set"
    np.testing.assert_array_equal(auto.outlier_indices_, cpu.outlier_indices_)
    np.testing.assert_array_equal(auto.threshold_, cpu.threshold_)
    np.testing.assert_array_equal(auto.labels_, cpu.labels_)
    predicted = cpu.predict(new) == -1
    assert np.all(predicted[auto.predict(new) == -1])
    np.testing.assert_allclose(gpu.score_samples(new), cpu.score_samples(new), rtol=1e-12)
    t = gpu.predict(torch.from_numpy(new).cuda())
    assert t.is_cuda and t.dtype == torch.int64
    np.testing.assert_array_equal(t.cpu().numpy(), cpu.predict(new))


@pytest.mark.parametrize("n,contamination", [(201, 0.1), (200, 0.1), (11, 0.1), (10, 0.1), (57, 0.23)])
def test_contamination_labels_as_many_outliers_as_scikit_learn(n, contamination):
    from sklearn.neighbors import LocalOutlierFactor as SkLOF

    X = np.random.default_rng(n).standard_normal((n, 2))
    ours = DistanceOutlierDetector(contamination=contamination, device="cpu").fit(X)
    theirs = SkLOF(n_neighbors=5, contamination=contamination).fit_predict(X)
    assert int((ours.labels_ == -1).sum()) == int((theirs == -1).sum())
