"""CategoricalNB vs scikit-learn, C4.5 vs hand-worked J48 trees and scikit-learn, itemsets vs mlxtend."""

import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.naive_bayes import CategoricalNB as SkCategoricalNB
from sklearn.utils.estimator_checks import parametrize_with_checks

from gpumine.counting import (
    BitmapStore,
    BitSliceStore,
    C45Classifier,
    CategoricalNB,
    association_rules,
    frequent_itemsets,
)
from gpumine.counting.tree._estimates import _add_errors_vec, add_errors

# Checks expected to fail, with the reason. A stale entry makes scikit-learn's runner fail.
EXPECTED_FAILED_CHECKS = {"CategoricalNB": {}, "C45Classifier": {}}


def shared_data(relative):
    """A file under shared/data ($GPUMINE_DATA_DIR, or found walking up from this file); skip when absent."""
    roots = []
    if os.environ.get("GPUMINE_DATA_DIR"):
        roots.append(Path(os.environ["GPUMINE_DATA_DIR"]))
    here = Path(__file__).resolve()
    roots += [p / "shared" / "data" for p in here.parents]
    for r in roots:
        if (r / relative).exists():
            return r / relative
    pytest.skip(f"shared data file {relative} not found (set GPUMINE_DATA_DIR or place shared/data beside the checkout)")


@parametrize_with_checks(
    [CategoricalNB(device="cpu"), C45Classifier(device="cpu")],
    expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS.get(type(est).__name__, {}),
)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)



@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Many small torch ops under 2 OpenMP threads on a busy 2-core CI box slow down 10-30x
    (measured: C4.5 on Poker 25K fits in 0.5 s with 1 thread, 5-18 s with 2); restore afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

# ----------------------------------------------------------------------------- CategoricalNB
@pytest.mark.parametrize("representation", ["auto", "histogram", "bitmap", "bitslice"])
@pytest.mark.parametrize("alpha,fit_prior", [(1.0, True), (0.3, False), (0.0, True)])
def test_nb_probabilities_equal_sklearn(representation, alpha, fit_prior):
    rng = np.random.default_rng(0)
    X = rng.integers(0, [3, 5, 2, 17, 4], size=(700, 5))
    y = rng.integers(0, 4, 700)
    Xt = rng.integers(0, [3, 5, 2, 17, 4], size=(200, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sk = SkCategoricalNB(alpha=alpha, fit_prior=fit_prior).fit(X, y)
        ours = CategoricalNB(alpha=alpha, fit_prior=fit_prior, representation=representation, device="cpu").fit(X, y)
        np.testing.assert_allclose(ours.predict_proba(Xt), sk.predict_proba(Xt), rtol=0, atol=1e-12)
        np.testing.assert_allclose(ours.predict_log_proba(Xt), sk.predict_log_proba(Xt), rtol=1e-12, atol=1e-12)
    assert np.array_equal(ours.predict(Xt), sk.predict(Xt))
    for a, b in zip(ours.category_count_, sk.category_count_):
        assert np.array_equal(a, b)


def test_nb_partial_fit_sample_weight_min_categories_and_store():
    rng = np.random.default_rng(1)
    X = rng.integers(0, [3, 6], size=(400, 2))
    y = np.array(["a", "b", "c"])[rng.integers(0, 3, 400)]
    w = rng.random(400)
    sk = SkCategoricalNB(min_categories=[4, 8]).fit(X, y, sample_weight=w)
    ours = CategoricalNB(min_categories=[4, 8], device="cpu").fit(X, y, sample_weight=w)
    np.testing.assert_allclose(ours.predict_proba(X), sk.predict_proba(X), atol=1e-12)
    # partial_fit: counts add up; categories may grow between batches
    pf = CategoricalNB(device="cpu")
    pf.partial_fit(X[X[:, 1] < 3], y[X[:, 1] < 3], classes=["a", "b", "c"])
    pf.partial_fit(X[X[:, 1] >= 3], y[X[:, 1] >= 3])
    full = SkCategoricalNB().fit(X, y)
    np.testing.assert_allclose(pf.predict_proba(X), full.predict_proba(X), atol=1e-12)
    # a packed store as X
    for cls in (BitmapStore, BitSliceStore):
        st = cls.from_codes(X, [3, 6])
        m = CategoricalNB(device="cpu").fit(st, y)
        assert m.representation_ == st.kind
        np.testing.assert_allclose(m.predict_proba(X), full.predict_proba(X), atol=1e-12)
    # labels as a tensor (classes found on the device), and a batch lacking a class under bitmaps
    yi = rng.integers(0, 3, 400)
    ref = SkCategoricalNB().fit(X, yi)
    t = CategoricalNB(device="cpu", representation="bitmap")
    t.partial_fit(X[yi < 2], torch.tensor(yi[yi < 2]), classes=[0, 1, 2])
    t.partial_fit(X[yi == 2], torch.tensor(yi[yi == 2]))
    np.testing.assert_allclose(t.predict_proba(X), ref.predict_proba(X), atol=1e-12)
    # a tensor in gives a tensor out
    proba = CategoricalNB(device="cpu").fit(torch.tensor(X), y).predict_proba(torch.tensor(X))
    assert isinstance(proba, torch.Tensor)


def test_nb_errors_name_the_fix():
    X = np.array([[0, 1], [1, 0], [1, 1]])
    y = [0, 1, 1]
    m = CategoricalNB(device="cpu").fit(X, y)
    with pytest.raises(ValueError, match="not seen in fit"):
        m.predict([[5, 0]])
    ign = CategoricalNB(device="cpu", handle_unknown="ignore").fit(X, y)
    np.testing.assert_allclose(ign.predict_proba([[5, 0]]), ign.predict_proba(np.array([[0, 0]]))[:, :] * 0 + _nb_without_feature(ign, 0, 0))
    with pytest.raises(ValueError, match="Negative values"):
        CategoricalNB(device="cpu").fit([[-1, 0]], [0])
    with pytest.raises(ValueError, match="classes must be passed"):
        CategoricalNB(device="cpu").partial_fit(X, y)
    with pytest.raises(ValueError, match="sample_weight"):
        CategoricalNB(device="cpu", representation="bitmap").fit(X, y, sample_weight=[1, 2, 1])
    with pytest.raises(ValueError, match="representation must be"):
        CategoricalNB(device="cpu", representation="dense").fit(X, y)


def _nb_without_feature(m, j, v):
    lp = m.class_log_prior_ + m.feature_log_prob_[1][:, v]
    p = np.exp(lp - lp.max())
    return p / p.sum()


def test_nb_uscensus_sample_matches_sklearn():
    path = shared_data("uscensus1990/USCensus1990.first99rows.data.txt")
    df = pd.read_csv(path)
    X = df.drop(columns=["caseid"]).to_numpy()
    y = X[:, 0]
    X = X[:, 1:]
    sk = SkCategoricalNB().fit(X, y)
    ours = CategoricalNB(device="cpu").fit(X, y)
    np.testing.assert_allclose(ours.predict_proba(X), sk.predict_proba(X), atol=1e-12)


# ----------------------------------------------------------------------------- C4.5
WEATHER = """sunny,85,85,FALSE,no
sunny,80,90,TRUE,no
overcast,83,86,FALSE,yes
rainy,70,96,FALSE,yes
rainy,68,80,FALSE,yes
rainy,65,70,TRUE,no
overcast,64,65,TRUE,yes
sunny,72,95,FALSE,no
sunny,69,70,FALSE,yes
rainy,75,80,FALSE,yes
sunny,75,70,TRUE,yes
overcast,72,90,TRUE,yes
overcast,81,75,FALSE,yes
rainy,71,91,TRUE,no"""


def _weather(nominal):
    df = pd.DataFrame([r.split(",") for r in WEATHER.split("\n")], columns=["outlook", "temperature", "humidity", "windy", "play"])
    df["temperature"] = df.temperature.astype(float)
    df["humidity"] = df.humidity.astype(float)
    if nominal:
        df["temperature"] = ["hot", "hot", "hot", "mild", "cool", "cool", "cool", "mild", "cool", "mild", "mild", "mild", "hot", "mild"]
        df["humidity"] = ["high", "high", "high", "high", "normal", "normal", "normal", "high", "normal", "normal", "normal", "high", "normal", "high"]
    return df.drop(columns="play"), df.play.to_numpy()


@pytest.mark.parametrize("representation", ["histogram", "bitmap", "bitslice"])
def test_c45_weather_numeric_is_the_j48_tree(representation):
    # Weka J48 (defaults) on weather.numeric.arff
    X, y = _weather(nominal=False)
    t = C45Classifier(representation=representation, device="cpu").fit(X, y)
    assert t.export_text() == (
        "outlook = overcast: yes (4.0)\n"
        "outlook = rainy\n"
        "|   windy = FALSE: yes (3.0)\n"
        "|   windy = TRUE: no (2.0)\n"
        "outlook = sunny\n"
        "|   humidity <= 75: yes (2.0)\n"
        "|   humidity > 75: no (3.0)"
    )
    assert t.n_leaves_ == 5 and t.n_nodes_ == 8
    assert (t.predict(X) == y).all()


def test_c45_weather_nominal_is_the_j48_tree():
    X, y = _weather(nominal=True)
    t = C45Classifier(device="cpu").fit(X, y)
    assert t.export_text() == (
        "outlook = overcast: yes (4.0)\n"
        "outlook = rainy\n"
        "|   windy = FALSE: yes (3.0)\n"
        "|   windy = TRUE: no (2.0)\n"
        "outlook = sunny\n"
        "|   humidity = high: no (3.0)\n"
        "|   humidity = normal: yes (2.0)"
    )


def test_c45_hand_worked_gain_ratio_at_the_root():
    # textbook: gain(outlook)=0.247, gain(humidity)=0.152, gain(windy)=0.048, gain(temperature)=0.029;
    # only outlook and humidity reach the average gain (0.119); gain ratios 0.156 vs 0.152 -> outlook
    X, y = _weather(nominal=True)
    t = C45Classifier(device="cpu", max_depth=0).fit(X, y)
    assert t.n_nodes_ == 1
    # the tree with max_depth=1 splits on outlook
    t1 = C45Classifier(device="cpu", max_depth=1, prune=False, collapse=False).fit(X, y)
    assert t1.export_text().splitlines()[0].startswith("outlook = ")


def test_c45_missing_values_fractional_weights():
    X, y = _weather(nominal=True)
    X = X.copy()
    X.loc[[0, 7], "outlook"] = None  # two sunny/no rows lose their outlook
    t = C45Classifier(device="cpu", min_samples_leaf=1, prune=False).fit(X, y)
    text = t.export_text()
    assert "outlook" in text and "humidity = high" in text
    # J48: the missing rows go down every outlook branch with fractional weight (non-integer leaf weights)
    assert any("." in part and not part.endswith(".0)") for part in text.replace("/", " ").split())
    assert "outlook = sunny: no (1.4)" in text  # 1 known sunny/no row + 2 x 0.2 of the missing ones
    p = t.predict_proba(pd.DataFrame({"outlook": [None], "temperature": ["hot"], "humidity": ["high"], "windy": ["FALSE"]}))
    assert p.shape == (1, 2) and abs(p.sum() - 1) < 1e-12 and 0 < p[0, 0] < 1


def test_c45_unknown_category_and_param_errors():
    X, y = _weather(nominal=True)
    t = C45Classifier(device="cpu").fit(X, y)
    bad = X.iloc[:1].copy()
    bad["outlook"] = "foggy"
    with pytest.raises(ValueError, match="not seen in fit"):
        t.predict(bad)
    tm = C45Classifier(device="cpu", handle_unknown="missing").fit(X, y)
    assert tm.predict_proba(bad).shape == (1, 2)
    with pytest.raises(ValueError, match="confidence"):
        C45Classifier(confidence=0.9, device="cpu").fit(X, y)
    with pytest.raises(ValueError, match="categorical_features"):
        C45Classifier(device="cpu", categorical_features=[]).fit(X, y)


def test_add_errors_matches_weka_values_and_vector_form():
    # Weka Stats.addErrs reference values (C4.5's pessimistic error with CF = 0.25)
    assert add_errors(6, 0, 0.25) == pytest.approx(6 * (1 - 0.25 ** (1 / 6)))
    assert add_errors(2, 1.8, 0.25) == pytest.approx(0.2)
    Ns = np.array([1.0, 2.0, 6.0, 14.0, 14.0, 100.0, 3.0])
    es = np.array([0.0, 0.5, 0.0, 5.0, 1.0, 30.0, 2.8])
    vec = _add_errors_vec(Ns, es, 0.25)
    assert np.allclose(vec, [add_errors(N, e, 0.25) for N, e in zip(Ns, es)])


def test_c45_poker_accuracy_close_to_sklearn_entropy_tree():
    from sklearn.tree import DecisionTreeClassifier

    tr = np.loadtxt(shared_data("poker_hand/poker-hand-training-true.data"), delimiter=",", dtype=np.int64)
    te = np.loadtxt(shared_data("poker_hand/poker-hand-testing.first99999.data.gz"), delimiter=",", dtype=np.int64,
                    max_rows=20000)
    Xa, ya, Xb, yb = tr[:, :10].astype(float), tr[:, 10], te[:, :10].astype(float), te[:, 10]
    sk = DecisionTreeClassifier(criterion="entropy", random_state=0).fit(Xa, ya)
    ours = C45Classifier(device="cpu").fit(Xa, ya)
    acc_sk = (sk.predict(Xb) == yb).mean()
    acc = (ours.predict(Xb) == yb).mean()
    assert acc >= acc_sk - 0.01, (acc, acc_sk)


@pytest.mark.slow
def test_c45_kddcup_accuracy_close_to_sklearn_entropy_tree():
    from sklearn.preprocessing import OrdinalEncoder
    from sklearn.tree import DecisionTreeClassifier

    df = pd.read_csv(shared_data("kddcup99/kddcup.data_10_percent.gz"), header=None)
    y = df.pop(41).to_numpy()
    idx = np.random.default_rng(0).permutation(len(df))
    tr, te = idx[:300_000], idx[300_000:]
    ours = C45Classifier(device="cpu").fit(df.iloc[tr], y[tr])
    acc = (ours.predict(df.iloc[te]) == y[te]).mean()
    Xn = df.copy()
    Xn[[1, 2, 3]] = OrdinalEncoder().fit_transform(Xn[[1, 2, 3]])
    sk = DecisionTreeClassifier(criterion="entropy", random_state=0).fit(Xn.iloc[tr], y[tr])
    acc_sk = (sk.predict(Xn.iloc[te]) == y[te]).mean()
    assert acc >= acc_sk - 0.01, (acc, acc_sk)


# ----------------------------------------------------------------------------- itemsets
def _random_onehot(seed, n=600, m=14):
    rng = np.random.default_rng(seed)
    X = rng.random((n, m)) < rng.random(m) * 0.6
    return pd.DataFrame(X, columns=[f"item{j}" for j in range(m)])


@pytest.mark.parametrize("min_support,max_len", [(0.2, None), (0.05, None), (0.03, 3), (1.0, None)])
def test_itemsets_equal_mlxtend(min_support, max_len):
    mlx = pytest.importorskip("mlxtend.frequent_patterns")
    df = _random_onehot(int(min_support * 100))
    ref = mlx.apriori(df, min_support=min_support, use_colnames=True, max_len=max_len)
    got = frequent_itemsets(df, min_support, max_len=max_len, use_colnames=True, device="cpu")
    assert dict(zip(got.itemsets, got.support)) == dict(zip(ref.itemsets, ref.support))


def test_rules_equal_mlxtend():
    mlx = pytest.importorskip("mlxtend.frequent_patterns")
    df = _random_onehot(7)
    fi = frequent_itemsets(df, 0.05, use_colnames=True, device="cpu")
    ref_fi = mlx.apriori(df, 0.05, use_colnames=True)
    ref = mlx.association_rules(ref_fi, len(df), metric="lift", min_threshold=1.1)
    got = association_rules(fi, metric="lift", min_threshold=1.1)
    cols = ["support", "confidence", "lift", "leverage", "conviction", "zhangs_metric", "jaccard", "certainty", "kulczynski"]
    a = {(x, y): r for x, y, r in zip(got.antecedents, got.consequents, got[cols].to_numpy())}
    b = {(x, y): r for x, y, r in zip(ref.antecedents, ref.consequents, ref[cols].to_numpy())}
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-12)


def test_itemset_inputs_and_errors():
    baskets = [["a", "b"], ["b", "c"], ["a", "b", "c"], ["a", "a"]]
    df = frequent_itemsets(baskets, 0.5, device="cpu")
    assert dict(zip(df.itemsets, df.support)) == {
        frozenset("a"): 0.75, frozenset("b"): 0.75, frozenset("c"): 0.5, frozenset("ab"): 0.5, frozenset("bc"): 0.5}
    arr = np.array([[1, 1, 0], [0, 1, 1], [1, 1, 1], [1, 0, 0]])
    idx = frequent_itemsets(arr, 0.5, device="cpu")
    assert frozenset({0, 1}) in set(idx.itemsets)
    with pytest.raises(ValueError, match="min_support"):
        frequent_itemsets(baskets, 0)
    with pytest.raises(ValueError, match="only 0/1"):
        frequent_itemsets(np.array([[2, 0]]), 0.5)
    with pytest.raises(ValueError, match="empty"):
        frequent_itemsets([], 0.5, device="cpu")


@pytest.mark.gpu
def test_models_on_gpu_equal_cpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine")
    rng = np.random.default_rng(0)
    X = rng.integers(0, [3, 5, 2, 17], size=(5000, 4))
    y = (X[:, 0] + X[:, 3] + rng.integers(0, 2, 5000)) % 4
    for rep in ("histogram", "bitmap", "bitslice"):
        a = CategoricalNB(representation=rep, device="cpu").fit(X, y).predict_proba(X)
        b = CategoricalNB(representation=rep, device="cuda").fit(X, y).predict_proba(X)
        np.testing.assert_allclose(a, b, atol=1e-12)
        ta = C45Classifier(representation=rep, device="cpu").fit(X, y)
        tb = C45Classifier(representation=rep, device="cuda").fit(X, y)
        assert ta.export_text() == tb.export_text()
    df = _random_onehot(3)
    a = frequent_itemsets(df, 0.05, device="cpu")
    b = frequent_itemsets(df, 0.05, device="cuda")
    assert dict(zip(a.itemsets, a.support)) == dict(zip(b.itemsets, b.support))


# ----------------------------------------------------------------------------- auto by measured cost, limits
def test_auto_representation_follows_measured_costs(monkeypatch):
    from gpumine.counting import _ops

    rng = np.random.default_rng(4)
    X = rng.integers(0, [3, 5, 2, 4], size=(400, 4))
    y = (X[:, 0] + X[:, 1] + rng.integers(0, 2, 400)) % 3
    ref_nb = CategoricalNB(device="cpu", representation="histogram").fit(X, y)
    ref_tree = C45Classifier(device="cpu", categorical_features="all", representation="histogram").fit(X, y)
    key = ("cpu", "torch", "torch")
    for costs, want in (({"word": 1e-15, "entry": 1e-3, "pack": 1e-15}, "bitmap"),
                        ({"word": 1e-3, "entry": 1e-15, "pack": 1e-3}, "histogram")):
        monkeypatch.setitem(_ops._COSTS, key, costs)
        nb = CategoricalNB(device="cpu").fit(X, y)
        assert nb.representation_ == want
        np.testing.assert_allclose(nb.predict_proba(X), ref_nb.predict_proba(X), rtol=1e-12)
        tree = C45Classifier(device="cpu", categorical_features="all").fit(X, y)
        assert set(tree.representations_) == {want}
        assert tree.export_text() == ref_tree.export_text()


def test_too_many_categories_errors_name_the_fix(monkeypatch):
    import gpumine.counting.tree._encoding as c45
    import gpumine.counting._nb as nb

    X = np.array([[0, 1], [5, 0], [2, 1]])
    monkeypatch.setattr(nb, "MAX_CATEGORIES", 4)
    msg = r"feature 0 has category code 5 \(6 categories\), more than the 4 categories.*OrdinalEncoder"
    with pytest.raises(ValueError, match=msg):
        CategoricalNB(device="cpu").fit(X, [0, 1, 0])
    monkeypatch.setattr(c45, "MAX_NOMINAL_VALUES", 2)
    with pytest.raises(ValueError, match=r"nominal feature 'x0' has 3 distinct values, more than the 2.*identifier"):
        C45Classifier(device="cpu", categorical_features="all").fit(X, [0, 1, 0])
    C45Classifier(device="cpu").fit(X, [0, 1, 0])  # numeric features have no such limit
