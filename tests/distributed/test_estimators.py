"""gpumine.distributed's kNN estimators and itemsets against one process: equal arrays, whatever the partitioning."""

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")
dd = pytest.importorskip("dask.dataframe")
db = pytest.importorskip("dask.bag")

import pandas as pd  # noqa: E402

from gpumine import distributed as gd  # noqa: E402
from gpumine.counting import frequent_itemsets  # noqa: E402
from gpumine.neighbors import KNeighborsClassifier, KNeighborsRegressor  # noqa: E402


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None)
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def _grid(n=90, d=3, seed=0, levels=3):
    """Integer grid points with many duplicate rows and tied distances, and labels with tied votes."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, levels, (n, d)).astype(np.float32), rng.integers(0, 3, n)


def _inverse_square(dist):
    return 1.0 / (1.0 + dist.astype(np.float64) ** 2)


# uneven chunks: a single row, one smaller than k, larger ones (single-row chunks throughout: below)
UNEVEN = (5, 1, 40, 3, 41)


def _equal(got, want):
    if isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _equal(g, w)
        return
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)


@pytest.mark.parametrize("weights", ["uniform", "distance", _inverse_square])
def test_classifier_on_tied_grids_equals_one_process(client, weights, chunks=UNEVEN):
    X, y = _grid()
    Q = np.vstack([_grid(30, seed=1)[0], X[:5]])  # queries on training points: infinite 1/d weights
    params = dict(n_neighbors=7, weights=weights, device="cpu")
    one = KNeighborsClassifier(**params).fit(X, y)
    many = gd.KNeighborsClassifier(**params, client=client, mode="shard").fit(da.from_array(X, chunks=(chunks, -1)),
                                                                             da.from_array(y, chunks=chunks))
    _equal(many.predict(Q), one.predict(Q))
    _equal(many.predict_proba(Q), one.predict_proba(Q))
    _equal(many.kneighbors(Q), one.kneighbors(Q))
    _equal(many.kneighbors(), one.kneighbors())  # the training set, each point excluded from its own list
    _equal(many.predict(None), one.predict(None))
    assert many.score(Q, y[:35]) == one.score(Q, y[:35])
    for name in ("classes_", "n_features_in_", "n_samples_fit_", "effective_metric_", "device_"):
        assert np.array_equal(getattr(many, name), getattr(one, name)), name


@pytest.mark.parametrize("weights", ["uniform", "distance", _inverse_square])
def test_regressor_on_tied_grids_equals_one_process(client, weights, chunks=UNEVEN):
    X, labels = _grid(seed=2)
    y = np.stack([labels * 0.1, np.sin(np.arange(len(X)))], 1)  # two outputs
    Q = np.vstack([_grid(30, seed=3)[0], X[10:15]])
    params = dict(n_neighbors=6, weights=weights, device="cpu")
    one = KNeighborsRegressor(**params).fit(X, y[:, 0])
    many = gd.KNeighborsRegressor(**params, client=client, mode="shard").fit(da.from_array(X, chunks=(chunks, -1)),
                                                                            y[:, 0])
    _equal(many.predict(Q), one.predict(Q))
    _equal(many.predict(None), one.predict(None))
    assert many.score(Q, Q[:, 0]) == one.score(Q, Q[:, 0])
    one2 = KNeighborsRegressor(**params).fit(X, y)
    many2 = gd.KNeighborsRegressor(**params, client=client).fit(X, da.from_array(y, chunks=(chunks, -1)))
    _equal(many2.predict(Q), one2.predict(Q))


@pytest.mark.parametrize("chunks", [1, 3])  # every chunk a single row / smaller than k
def test_single_row_and_smaller_than_k_chunks_change_nothing(client, chunks):
    X, y = _grid(24, seed=13)
    Q = np.vstack([_grid(6, seed=14)[0], X[:2]])
    one = KNeighborsClassifier(n_neighbors=5, weights="distance", device="cpu").fit(X, y)
    many = gd.KNeighborsClassifier(n_neighbors=5, weights="distance", device="cpu", client=client, mode="shard").fit(
        da.from_array(X, chunks=(chunks, -1)), y)
    _equal(many.predict_proba(Q), one.predict_proba(Q))
    _equal(many.kneighbors(), one.kneighbors())
    one = KNeighborsRegressor(n_neighbors=5, device="cpu").fit(X, y * 0.5)
    many = gd.KNeighborsRegressor(n_neighbors=5, device="cpu", client=client, mode="shard").fit(
        da.from_array(X, chunks=(chunks, -1)), y * 0.5)
    _equal(many.predict(Q), one.predict(Q))


@pytest.mark.parametrize("metric,p", [("minkowski", 2), ("minkowski", 1), ("minkowski", 3), ("chebyshev", 2),
                                      ("cosine", 2), ("sqeuclidean", 2)])
@pytest.mark.parametrize("mode", ["shard", "replicate"])
def test_metrics_and_modes_change_nothing(client, metric, p, mode):
    X, y = _grid(80, d=4, seed=4, levels=4)
    X = X + 1  # cosine needs no zero rows
    Q = _grid(25, d=4, seed=5, levels=4)[0] + 1
    params = dict(n_neighbors=5, weights="distance", metric=metric, p=p, device="cpu")
    one = KNeighborsClassifier(**params).fit(X, y)
    many = gd.KNeighborsClassifier(**params, client=client, mode=mode).fit(da.from_array(X, chunks=(9, -1)), y)
    assert many.effective_metric_ == one.effective_metric_
    _equal(many.predict_proba(Q), one.predict_proba(Q))
    _equal(many.kneighbors(Q), one.kneighbors(Q))


def test_dataframes_keep_row_order_and_feature_names(client):
    X, y = _grid(70, seed=6)
    Q = _grid(20, seed=7)[0]
    frame, queries = pd.DataFrame(X, columns=["a", "b", "c"]), pd.DataFrame(Q, columns=["a", "b", "c"])
    one = KNeighborsClassifier(n_neighbors=4, device="cpu").fit(frame, y)
    many = gd.KNeighborsClassifier(n_neighbors=4, device="cpu", client=client).fit(
        dd.from_pandas(frame, npartitions=6), dd.from_pandas(pd.Series(y), npartitions=3))
    assert list(many.feature_names_in_) == ["a", "b", "c"]
    got = many.predict_proba(dd.from_pandas(queries, npartitions=4))
    assert isinstance(got, da.Array) and got.chunks[0] == (5, 5, 5, 5)  # dask in, dask out: chunked as the rows
    _equal(got.compute(), one.predict_proba(queries))
    _equal(many.predict(queries), one.predict(queries))  # pandas in, NumPy out, as one process
    dist, index = many.kneighbors()
    assert isinstance(index, da.Array) and index.chunks[0] == tuple(dd.from_pandas(frame, npartitions=6)
                                                                     .map_partitions(len).compute())
    _equal((dist.compute(), index.compute()), one.kneighbors())
    predicted = many.predict(None)  # the training set, self excluded: chunked as the training rows
    assert isinstance(predicted, da.Array) and predicted.chunks == index.chunks[:1]
    _equal(predicted.compute(), one.predict(None))
    with pytest.warns(UserWarning, match="feature names"):
        many.predict(Q)  # fitted with names, asked without: scikit-learn's warning, as one process


def test_float64_and_mixed_frames_take_the_fitted_dtype(client):
    rng = np.random.default_rng(8)
    frame = pd.DataFrame({"a": rng.integers(0, 4, 60).astype(np.int8), "b": rng.integers(0, 4, 60).astype(np.float32)})
    y = rng.integers(0, 2, 60)
    Q = pd.DataFrame({"a": [1, 2, 3], "b": [0.5, 1.0, 2.0]})
    one = KNeighborsRegressor(n_neighbors=5, weights="distance", device="cpu").fit(frame, y)
    many = gd.KNeighborsRegressor(n_neighbors=5, weights="distance", device="cpu", client=client).fit(
        dd.from_pandas(frame, npartitions=4), y)
    _equal(many.kneighbors(Q), one.kneighbors(Q))
    _equal(many.predict(Q), one.predict(Q))


def test_torch_queries_come_back_as_tensors(client):
    import torch

    X, y = _grid(50, seed=9)
    Q = torch.from_numpy(_grid(10, seed=10)[0])
    one = KNeighborsClassifier(n_neighbors=3, device="cpu").fit(X, y)
    many = gd.KNeighborsClassifier(n_neighbors=3, device="cpu", client=client).fit(X, y)
    got, want = many.predict_proba(Q), one.predict_proba(Q)
    assert isinstance(got, torch.Tensor) and torch.equal(got, want)


def test_errors_are_the_single_process_ones(client):
    X, y = _grid(20, seed=11)
    many = gd.KNeighborsClassifier(n_neighbors=25, device="cpu", client=client).fit(da.from_array(X, chunks=(6, -1)), y)
    with pytest.raises(ValueError, match="n_neighbors"):
        many.predict(X)
    bad = X.copy()
    bad[13, 1] = np.nan
    with pytest.raises(ValueError, match=r"X contains NaN or infinity \(1 non-finite value\(s\), first at row 13\)"):
        gd.KNeighborsClassifier(device="cpu", client=client).fit(da.from_array(bad, chunks=(6, -1)), y)
    fitted = gd.KNeighborsClassifier(n_neighbors=3, device="cpu", client=client).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        fitted.predict(X[:, :2])
    with pytest.raises(ValueError, match="y has 19 labels but X has 20 samples"):
        gd.KNeighborsClassifier(device="cpu", client=client).fit(da.from_array(X, chunks=(6, -1)), y[:19])
    with pytest.raises(ValueError, match="precomputed"):
        gd.KNeighborsClassifier(metric="precomputed", device="cpu", client=client).fit(X @ X.T, y)
    with pytest.raises(ValueError, match="no radius of its own"):
        fitted.radius_neighbors(X)


def test_parameters_are_the_single_process_ones_plus_mode_and_client():
    one = KNeighborsClassifier().get_params()
    many = gd.KNeighborsClassifier().get_params()
    assert set(many) == set(one) | {"mode", "client"}
    assert {k: many[k] for k in one} == {k: v for k, v in one.items()}
    assert set(gd.KNeighborsRegressor().get_params()) == set(KNeighborsRegressor().get_params()) | {"mode", "client"}


# -- frequent itemsets by count distribution ----------------------------------------------------------------------


def _transactions(n=120, items=7, seed=0):
    """Correlated one-hot rows: many itemsets near the support threshold, duplicate rows."""
    rng = np.random.default_rng(seed)
    base = rng.random((n, items)) < 0.45
    base[:, 1] |= base[:, 0] & (rng.random(n) < 0.7)
    base[:, 2] |= base[:, 1] & (rng.random(n) < 0.6)
    return base


def _same_itemsets(got, want):
    pd.testing.assert_frame_equal(got, want)
    assert list(got["itemsets"]) == list(want["itemsets"])  # same order
    assert np.array_equal(got["support"].to_numpy(), want["support"].to_numpy())


@pytest.mark.parametrize("chunks", [(3, 60, 1, 56), 120])
@pytest.mark.parametrize("min_support", [0.05, 0.25, 30 / 120])  # 30/120: supports exactly at the threshold
def test_itemsets_of_a_chunked_table_equal_one_process(client, chunks, min_support):
    X = _transactions()
    want = frequent_itemsets(X, min_support, device="cpu")
    _same_itemsets(gd.frequent_itemsets(da.from_array(X, chunks=(chunks, -1)), min_support, device="cpu",
                                        client=client), want)


def test_itemsets_of_frames_baskets_and_bags_equal_one_process(client):
    X = _transactions(seed=1)
    frame = pd.DataFrame(X, columns=[f"i{j}" for j in range(X.shape[1])])
    for use_colnames in (None, True):
        want = frequent_itemsets(frame, 0.1, use_colnames=use_colnames, max_len=3, device="cpu")
        _same_itemsets(gd.frequent_itemsets(dd.from_pandas(frame, npartitions=5), 0.1, use_colnames=use_colnames,
                                            max_len=3, device="cpu", client=client), want)
        _same_itemsets(gd.frequent_itemsets(frame, 0.1, use_colnames=use_colnames, max_len=3, device="cpu",
                                            client=client), want)
    baskets = [[f"item{j}" for j in np.flatnonzero(row)] for row in X]
    baskets[3] = []  # an empty basket
    baskets[5] = baskets[5] + ["rare", "rare"]  # a repeated item counts once
    want = frequent_itemsets(baskets, 0.1, device="cpu")
    _same_itemsets(gd.frequent_itemsets(baskets, 0.1, device="cpu", client=client), want)
    bag = db.from_sequence(baskets, partition_size=13)  # uneven partitions, items first seen in different ones
    _same_itemsets(gd.frequent_itemsets(bag, 0.1, device="cpu", client=client), want)
    _same_itemsets(gd.frequent_itemsets(bag, 0.1, use_colnames=False, device="cpu", client=client),
                   frequent_itemsets(baskets, 0.1, use_colnames=False, device="cpu"))


def test_itemset_counts_are_exact_integers_for_any_partitioning(client):
    # every partitioning sums to the same integer counts: supports are count / n bit for bit
    X = _transactions(n=200, items=6, seed=2)
    want = frequent_itemsets(X, 0.02, device="cpu")
    for chunks in [(1,) * 8 + (192,), (50, 0, 150)]:  # single rows, an empty chunk
        got = gd.frequent_itemsets(da.from_array(X, chunks=(chunks, -1)), 0.02, device="cpu", client=client)
        _same_itemsets(got, want)
        assert np.array_equal(np.rint(got["support"].to_numpy() * 200).astype(int) / 200, got["support"].to_numpy())


def test_itemset_errors_are_the_single_process_ones(client):
    X = _transactions(n=10)
    with pytest.raises(ValueError, match="min_support must be in"):
        gd.frequent_itemsets(X, 0.0, client=client)
    with pytest.raises(ValueError, match="max_len"):
        gd.frequent_itemsets(X, 0.5, max_len=0, client=client)
    with pytest.raises(ValueError, match="only 0/1 or booleans"):
        gd.frequent_itemsets(da.from_array(X * 2, chunks=(3, -1)), 0.5, device="cpu", client=client)
    with pytest.raises(ValueError, match="empty"):
        gd.frequent_itemsets(da.zeros((0, 4), chunks=(1, -1), dtype=bool), 0.5, device="cpu", client=client)


# -- the command line ------------------------------------------------------------------------------------------------


def test_knn_command_on_a_local_cluster_of_n_workers(client, tmp_path, monkeypatch, capsys):
    from gpumine.cli import main
    from gpumine.neighbors import kneighbors

    started = []
    real = gd.local_cluster

    def threads(n_workers=None, **kwargs):  # thread workers: no process start-up in the test
        started.append(n_workers)
        return real(n_workers, gpus=False, processes=False, dashboard_address=":0", **kwargs)

    monkeypatch.setattr(gd, "local_cluster", threads)
    X = _grid(60, seed=12)[0]
    pd.DataFrame(X, columns=["a", "b", "c"]).to_csv(tmp_path / "x.csv", index=False)
    assert main(["knn", str(tmp_path / "x.csv"), "-k", "4", "--device", "cpu", "--workers", "2",
                 "-o", str(tmp_path / "n.csv")]) == 0
    assert started == [2] and "dask 2 local workers" in capsys.readouterr().err
    got = pd.read_csv(tmp_path / "n.csv")
    np.testing.assert_array_equal(got[[f"index_{j}" for j in range(4)]].to_numpy(), kneighbors(X, k=4, device="cpu")[1])
    for bad in (["--workers", "2", "--scheduler", client.scheduler.address], ["--workers", "0"]):
        with pytest.raises(SystemExit) as exit_:
            main(["knn", str(tmp_path / "x.csv"), "-k", "4", *bad])
        assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "not allowed with argument" in err and "must be a positive integer; got 0" in err


@pytest.mark.parametrize("task", ["classify", "regress"])
def test_knn_command_predicts_on_the_cluster_as_in_one_process(client, tmp_path, task, capsys):
    from gpumine.cli import main

    X, y = _grid(80, seed=13)[0], np.arange(80) % 3
    train = pd.DataFrame(X[:60], columns=["a", "b", "c"]).assign(y=y[:60])
    train.to_csv(tmp_path / "train.csv", index=False)
    pd.DataFrame(X[60:], columns=["a", "b", "c"]).to_csv(tmp_path / "query.csv", index=False)
    outputs = {}
    for flags in ([], ["--scheduler", client.scheduler.address]):
        out = tmp_path / f"p{len(flags)}.csv"
        assert main(["knn", str(tmp_path / "train.csv"), str(tmp_path / "query.csv"), "--label-column", "y", "--task", task,
                     "-k", "5", "--weights", "distance", "--device", "cpu", *flags, "-o", str(out)]) == 0
        outputs[len(flags)] = pd.read_csv(out)
    assert "dask " in capsys.readouterr().err
    pd.testing.assert_frame_equal(outputs[0], outputs[2])
