"""gpumine.distributed.C45Classifier against the single-process tree: the same tree, whatever the partitioning.

With whole counts (no sample weights, no value missing in a tested attribute) everything is int64 and
must equal one process bit for bit: the text, every prediction table, the probabilities. Fractional
weights are float64 sums in another order: one partition is still bit for bit, more give the same
tree up to rounding.
"""

import re

import numpy as np
import pandas as pd
import pytest

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")
dd = pytest.importorskip("dask.dataframe")

from gpumine import distributed as gd  # noqa: E402
from gpumine.counting import C45Classifier  # noqa: E402
from gpumine.data import load_covtype_sample  # noqa: E402
from tests.counting.tree.test_sibling_subtraction_and_sorted_raising_keep_the_trees import _whole_dataset  # noqa: E402
from tests.counting.tree.test_trees_equal_weka_j48 import FIXTURES, _read_arff  # noqa: E402


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0")
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def _frame_parts(X, y, n_parts):
    """A DataFrame and its labels as a dask DataFrame and a dask Series of ``n_parts`` partitions."""
    frame = X.assign(_label=y)
    parts = dd.from_pandas(frame, npartitions=n_parts)
    return parts.drop(columns="_label"), parts["_label"]


def _unsigned_zeros(text):
    """A tree's text with ``-0`` cuts printed as ``0``."""
    return re.sub(r"(?<=[<>=] )-0(?=[:\n]|$)", "0", text)


def _assert_same(one, many, X, exact=True, zero_sign=False):
    """The same tree: text, node tables and predictions (bit for bit with ``exact``, else up to rounding).

    ``zero_sign``: the data hold both zeros of a numeric column, whose distinct values one process takes
    with ``np.unique`` -- keeping whichever zero its unstable sort puts first, which depends on the order of
    all rows -- so a cut at zero may print as ``-0`` on one side and ``0`` on the other (the same number).
    """
    if zero_sign:
        assert _unsigned_zeros(many.export_text()) == _unsigned_zeros(one.export_text())
    else:
        assert many.export_text() == one.export_text()
    assert (many.n_nodes_, many.n_leaves_, many.depth_) == (one.n_nodes_, one.n_leaves_, one.depth_)
    for key in one._t:
        if exact or key in ("attr", "num", "thr", "kids", "empty"):
            assert np.array_equal(many._t[key], one._t[key]), key
        else:
            np.testing.assert_allclose(many._t[key], one._t[key], rtol=1e-12, atol=1e-12, err_msg=key)
    assert np.array_equal(many.classes_, one.classes_) and many.n_features_in_ == one.n_features_in_
    assert np.array_equal(many.predict(X), one.predict(X))
    if exact:
        assert np.array_equal(many.predict_proba(X), one.predict_proba(X))
        assert many.representations_ == ["histogram"] * len(one.representations_)


@pytest.mark.parametrize("name, n_parts", [("weather", 3), ("poker300", 1), ("poker300", 2), ("synth_nominal", 3)])
def test_weka_samples_give_the_single_process_tree(client, name, n_parts):
    # poker300 and synth_nominal are trees that subtree raising changes
    X, y = _read_arff(FIXTURES / f"{name}.arff")
    Xd, yd = _frame_parts(X, y, n_parts)
    for raising in (True, False):
        one = C45Classifier(device="cpu", subtree_raising=raising).fit(X, y)
        many = gd.C45Classifier(device="cpu", subtree_raising=raising, client=client).fit(Xd, yd)
        _assert_same(one, many, X)
    # prediction on dask input: partition by partition, the same numbers
    proba = many.predict_proba(Xd)
    assert isinstance(proba, da.Array)
    assert np.array_equal(proba.compute(), one.predict_proba(X))
    assert np.array_equal(many.predict(Xd).compute(), one.predict(X))


@pytest.mark.parametrize("n_parts, raising", [(1, True), (3, True), (2, False)])
def test_missing_values_follow_the_single_process_rules(client, n_parts, raising):
    # instances with a missing value go down every branch with fractional weights: one partition sums them in one
    # process's order (bit for bit), more in another (the same tree, numbers equal up to rounding)
    X, y = _read_arff(FIXTURES / "synth_numeric_missing.arff")
    assert X.isna().any().any()
    one = C45Classifier(device="cpu", subtree_raising=raising).fit(X, y)
    many = gd.C45Classifier(device="cpu", subtree_raising=raising, client=client).fit(*_frame_parts(X, y, n_parts))
    _assert_same(one, many, X, exact=n_parts == 1)


def test_covtype_sample_binned_tied_and_unevenly_chunked(client):
    # Covertype's integer values tie at many cuts; elevation has more values than max_bins (equal-frequency cuts from
    # the merged value counts); chunks of one row and of none
    X, y = load_covtype_sample(12, dtype=np.float64)
    X, y = X[:1500], y[:1500]
    one = C45Classifier(device="cpu", max_bins=64).fit(X, y)
    assert len(np.unique(X[:, 0])) > 64 and one.n_leaves_ > 20
    chunks = (700, 0, 1, 799)
    many = gd.C45Classifier(device="cpu", max_bins=64, client=client).fit(da.from_array(X, chunks=(chunks, 4)),
                                                                         da.from_array(y, chunks=(chunks,)))
    _assert_same(one, many, X)
    assert np.array_equal(many.predict_proba(da.from_array(X, chunks=(500, -1))).compute(), one.predict_proba(X))


@pytest.mark.parametrize("seed", [7, 8])
def test_subtree_raising_on_noisy_whole_counts(client, seed):
    # data on which raising changes the tree (raised subtrees are counted and pruned again on the partitions)
    X, y, kw = _whole_dataset(seed)
    one = C45Classifier(device="cpu", **kw).fit(X, y)
    assert one.export_text() != C45Classifier(device="cpu", subtree_raising=False, **kw).fit(X, y).export_text()
    many = gd.C45Classifier(device="cpu", client=client, **kw).fit(da.from_array(X, chunks=(len(X) // 3 + 1, -1)), y)
    _assert_same(one, many, X, zero_sign=True)


def test_local_inputs_are_scattered_and_one_worker_gives_the_same_tree(client):
    X, y = _read_arff(FIXTURES / "poker300.arff")
    one = C45Classifier(device="cpu", min_samples_leaf=1).fit(X, y)
    _assert_same(one, gd.C45Classifier(device="cpu", min_samples_leaf=1, client=client).fit(X, list(y)), X)
    # NumPy codes with nominal columns named by index, and labels as integers
    Xn = np.column_stack([pd.factorize(X[c], sort=True)[0] for c in X.columns]).astype(float)
    yn = pd.factorize(y, sort=True)[0]
    kw = dict(device="cpu", categorical_features=[0, 2, 4], max_depth=3)
    one = C45Classifier(**kw).fit(Xn, yn)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as c1, \
            distributed.Client(c1) as single:
        _assert_same(one, gd.C45Classifier(**kw, client=single).fit(da.from_array(Xn, chunks=(100, -1)), yn), Xn)
    # client=None: the current client
    with client.as_current():
        _assert_same(one, gd.C45Classifier(**kw).fit(Xn, da.from_array(yn, chunks=77)), Xn)


def test_sample_weights_zero_rows_and_unseen_values(client):
    X, y = _read_arff(FIXTURES / "synth_nominal.arff")
    w = np.tile([1.0, 2.0, 0.0, 0.5], len(y) // 4 + 1)[:len(y)]
    # a category held only by zero-weight rows is no category of the training data
    X = X.copy()
    X.iloc[2, 0] = "only-here"
    one = C45Classifier(device="cpu").fit(X, y, sample_weight=w)
    Xd, yd = _frame_parts(X, y, 1)
    _assert_same(one, gd.C45Classifier(device="cpu", client=client).fit(Xd, yd, sample_weight=w), X.iloc[w > 0])
    many = gd.C45Classifier(device="cpu", client=client).fit(*_frame_parts(X, y, 3), sample_weight=da.from_array(w))
    _assert_same(one, many, X.iloc[w > 0], exact=False)


def test_parameters_and_inputs_are_checked(client):
    X, y = _read_arff(FIXTURES / "weather.arff")
    with pytest.raises(ValueError, match="min_samples_leaf"):
        gd.C45Classifier(min_samples_leaf=0, client=client).fit(X, y)
    with pytest.raises(ValueError, match="confidence"):
        gd.C45Classifier(confidence=0.9, client=client).fit(X, y)
    with pytest.raises(ValueError, match="labels but X has"):
        gd.C45Classifier(device="cpu", client=client).fit(X, y[:-1])
    with pytest.raises(ValueError, match="sample_weight"):
        gd.C45Classifier(device="cpu", client=client).fit(X, y, sample_weight=-np.ones(len(y)))
    with pytest.raises(ValueError, match="categorical_features"):
        gd.C45Classifier(device="cpu", categorical_features="some", client=client).fit(X, y)
    with pytest.raises(ValueError, match="non-zero"):
        gd.C45Classifier(device="cpu", client=client).fit(X, y, sample_weight=np.zeros(len(y)))
    fitted = gd.C45Classifier(device="cpu", client=client).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        fitted.predict(X.iloc[:, :2])
    assert set(gd.C45Classifier().get_params()) == set(C45Classifier().get_params()) | {"client"}
    assert "C45Classifier" in gd.__all__


def test_cli_tree_on_a_scheduler(client, tmp_path, capsys):
    from gpumine.cli import main

    X, y = _read_arff(FIXTURES / "synth_nominal.arff")
    path = tmp_path / "train.csv"
    X.assign(cls=y).to_csv(path, index=False)
    assert main(["tree", str(path), "--label-column", "cls", "--device", "cpu"]) == 0
    alone = capsys.readouterr().out
    assert main(["tree", str(path), "--label-column", "cls", "--device", "cpu",
                 "--scheduler", client.scheduler.address]) == 0
    on_dask = capsys.readouterr().out
    assert on_dask.split("\nleaves:")[0] == alone.split("\nleaves:")[0]  # the same tree printed
    with pytest.raises(SystemExit):  # one cluster or the other
        main(["tree", str(path), "--label-column", "cls", "--scheduler", "x", "--workers", "2"])
