"""Estimators: scikit-learn's estimator checks, and predictions equal to scikit-learn's."""

import numpy as np
import pandas as pd
import pytest
import sklearn.neighbors as skn
import torch
from sklearn.utils.estimator_checks import parametrize_with_checks

from gpumine.datasets import load_covtype, load_covtype_sample
from gpumine.neighbors import KNeighborsClassifier, KNeighborsRegressor, NearestNeighbors
from helpers import shared_file

# Checks expected to fail, with the reason. A stale entry (a check that now passes)
# makes scikit-learn's runner fail, so this list stays honest.
EXPECTED_FAILED_CHECKS = {}


@parametrize_with_checks(
    [NearestNeighbors(device="cpu"), KNeighborsClassifier(device="cpu"), KNeighborsRegressor(device="cpu")],
    expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS.get(type(est).__name__, {}),
)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def _boundary_tie_rows(X_train, X_test, k):
    """Rows whose k-th and (k+1)-th float64 distances tie: their neighbour set is ambiguous."""
    nn = skn.NearestNeighbors(n_neighbors=k + 1, algorithm="brute").fit(X_train)
    d, _ = nn.kneighbors(X_test)
    return np.isclose(d[:, k - 1], d[:, k], rtol=1e-9, atol=0)


def _real_classification_data():
    """The shipped Covertype sample (real UCI rows): 10 quantitative attributes, scaled, float64."""
    X, y = load_covtype_sample(n_features=10, dtype=np.float64)
    X = (X - X.mean(0)) / X.std(0)
    order = np.random.default_rng(0).permutation(len(X))
    X, y = X[order], y[order]
    return X[:4000], y[:4000], X[4000:], y[4000:]


def test_classifier_on_the_full_shared_covertype_file_when_present():
    path = shared_file("covertype/covtype.ramp16pct.reconstructed.data.gz")
    X, y = load_covtype(path, n_features=10, dtype=np.float64)
    X = (X - X.mean(0)) / X.std(0)
    Xtr, ytr, Xte = X[:20000], y[:20000], X[20000:22000]
    ours = KNeighborsClassifier(5, device="cpu").fit(Xtr, ytr).predict(Xte)
    ref = skn.KNeighborsClassifier(5, algorithm="brute").fit(Xtr, ytr).predict(Xte)
    ambiguous = _boundary_tie_rows(Xtr, Xte, 5)
    np.testing.assert_array_equal(ours[~ambiguous], ref[~ambiguous])


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_classifier_predictions_equal_sklearn_on_real_data(weights):
    Xtr, ytr, Xte, yte = _real_classification_data()
    k = 7
    ours = KNeighborsClassifier(k, weights=weights, device="cpu").fit(Xtr, ytr)
    ref = skn.KNeighborsClassifier(k, weights=weights, algorithm="brute").fit(Xtr, ytr)
    ambiguous = _boundary_tie_rows(Xtr, Xte, k)
    assert ambiguous.mean() < 0.05
    np.testing.assert_array_equal(ours.predict(Xte)[~ambiguous], ref.predict(Xte)[~ambiguous])
    np.testing.assert_allclose(ours.predict_proba(Xte)[~ambiguous], ref.predict_proba(Xte)[~ambiguous], rtol=1e-9, atol=1e-12)
    assert abs(ours.score(Xte, yte) - ref.score(Xte, yte)) < 0.01


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_regressor_predictions_equal_sklearn_on_real_data(weights):
    Xtr, ytr, Xte, _ = _real_classification_data()
    target = Xtr[:, 0] * 3.0 + ytr  # elevation-driven target
    Xtr, Xte = Xtr[:, 1:], Xte[:, 1:]
    k = 5
    ours = KNeighborsRegressor(k, weights=weights, device="cpu").fit(Xtr, target)
    ref = skn.KNeighborsRegressor(k, weights=weights, algorithm="brute").fit(Xtr, target)
    ambiguous = _boundary_tie_rows(Xtr, Xte, k)
    np.testing.assert_allclose(ours.predict(Xte)[~ambiguous], ref.predict(Xte)[~ambiguous], rtol=1e-9)


def test_kneighbors_matches_sklearn_and_excludes_self():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 6))
    ours = NearestNeighbors(n_neighbors=4, device="cpu").fit(X)
    ref = skn.NearestNeighbors(n_neighbors=4).fit(X)
    d, i = ours.kneighbors()
    rd, ri = ref.kneighbors()
    np.testing.assert_array_equal(i, ri)
    np.testing.assert_allclose(d, rd, rtol=1e-12)
    g = ours.kneighbors_graph(X[:5], mode="distance").toarray()
    np.testing.assert_allclose(g, ref.kneighbors_graph(X[:5], mode="distance").toarray(), rtol=1e-12)


def test_vote_tie_goes_to_smallest_label():
    X = np.array([[-1.0], [1.0]])
    clf = KNeighborsClassifier(2, device="cpu").fit(X, ["b", "a"])
    assert clf.predict([[0.0]])[0] == "a"
    np.testing.assert_allclose(clf.predict_proba([[0.0]]), [[0.5, 0.5]])


def test_distance_weights_with_exact_hit_take_only_the_hits():
    X = np.array([[0.0], [0.0], [1.0], [1.1]])
    clf = KNeighborsClassifier(3, weights="distance", device="cpu").fit(X, [1, 1, 2, 2])
    np.testing.assert_allclose(clf.predict_proba([[0.0]]), [[1.0, 0.0]])


def test_output_types_follow_input():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((50, 3)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    clf = KNeighborsClassifier(3, device="cpu").fit(pd.DataFrame(X, columns=list("abc")), y)
    assert clf.feature_names_in_.tolist() == ["a", "b", "c"]
    assert isinstance(clf.predict(pd.DataFrame(X, columns=list("abc"))), np.ndarray)
    with pytest.warns(UserWarning, match="does not have valid feature names"):
        out = clf.predict(torch.from_numpy(X))
    assert isinstance(out, torch.Tensor)
    reg = KNeighborsRegressor(3, device="cpu").fit(X, np.c_[y, 2 * y])
    assert reg.predict(X).shape == (50, 2)


def test_estimator_parameter_errors():
    X = np.zeros((5, 2))
    with pytest.raises(ValueError, match="algorithm must be 'auto', 'ball_tree', 'kd_tree' or 'brute'"):
        NearestNeighbors(algorithm="cover_tree").fit(X)
    with pytest.raises(ValueError, match="Unknown metric"):
        NearestNeighbors(metric="no-such-metric").fit(X)
    with pytest.raises(ValueError, match="y has 3 labels but X has 5 samples"):
        KNeighborsClassifier().fit(X, [1, 2, 3])
    with pytest.raises(ValueError, match="weights must be"):
        KNeighborsClassifier(weights="gaussian", device="cpu").fit(X, [1, 2, 1, 2, 1])
    nn = NearestNeighbors(n_neighbors=2, device="cpu").fit(X)
    with pytest.raises(ValueError, match="X has 3 features, but NearestNeighbors is expecting 2"):
        nn.kneighbors(np.zeros((1, 3)))
    with pytest.raises(ValueError, match="n_samples_fit = 5"):
        nn.kneighbors(np.zeros((1, 2)), n_neighbors=6)
    with pytest.raises(ValueError, match="device='cuda' was requested but torch sees no CUDA GPU"):
        if torch.cuda.is_available():
            pytest.skip("a GPU is present")
        NearestNeighbors(device="cuda").fit(X)


@pytest.mark.parametrize("algorithm", ["auto", "ball_tree", "kd_tree", "brute"])
def test_every_scikit_learn_algorithm_value_gives_the_same_neighbours(algorithm):
    X = np.random.default_rng(0).random((40, 3))
    d, i = NearestNeighbors(n_neighbors=4, algorithm=algorithm, device="cpu").fit(X).kneighbors()
    d0, i0 = NearestNeighbors(n_neighbors=4, device="cpu").fit(X).kneighbors()
    assert np.array_equal(i, i0) and np.array_equal(d, d0)


def test_weights_callable_giving_all_zero_weights_is_refused():
    X = np.array([[0.0], [1.0], [2.0], [3.0]])
    clf = KNeighborsClassifier(2, weights=lambda d: np.zeros_like(d), device="cpu").fit(X, [0, 1, 0, 1])
    with pytest.raises(ValueError, match="zero weights"):
        clf.predict_proba(X)
