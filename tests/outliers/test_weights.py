"""The canonical pair form: one value per pair whichever way it is evaluated.

On a GPU the features of a batch of pairs are summed at once, level by level of a pairwise tree
(``PairSpace._batched``); on the CPU feature by feature through a running binary counter
(``PairSpace._by_feature``). Both must build the same tree, so every pair gets the same bits on
every device and batch size; and the value must be a float64-accurate distance.
"""

import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist

from gpumine.outliers import _weights
from gpumine.outliers._weights import PairSpace, _running_tree, _tree_over_rows, resolve_metric

METRICS = [("euclidean", None), ("sqeuclidean", None), ("manhattan", None), ("chebyshev", None),
           ("minkowski", 3.0), ("cosine", None)]



@pytest.mark.parametrize("d", [1, 2, 3, 5, 7, 8, 13, 64, 65, 130])
def test_running_tree_is_the_level_tree(d):
    values = torch.tensor(np.random.default_rng(d).normal(size=(d, 11)) * 10.0 ** np.arange(d)[:, None] % 7.3)
    assert torch.equal(_running_tree(list(values)), _tree_over_rows(values))
    if d > 2:  # not a sequential sum: the association differs where rounding shows it
        sequential = values[0].clone()
        for row in values[1:]:
            sequential = sequential + row
        assert torch.allclose(sequential, _tree_over_rows(values), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("metric,p", METRICS)
@pytest.mark.parametrize("d", [1, 3, 8, 37, 131])
@pytest.mark.parametrize("batch_bytes", [1 << 26, 2048, 1])
def test_batched_and_by_feature_forms_agree_bit_for_bit(metric, p, d, batch_bytes, monkeypatch):
    rng = np.random.default_rng(d)
    X = np.concatenate([rng.normal(size=(40, d)) * 1e3 + 7.0, rng.integers(-3, 4, size=(25, d))])
    space = PairSpace(torch.tensor(X), resolve_metric(metric, p), tiles=False)
    rows, cols = torch.arange(0, 65, 3), torch.arange(65)
    lists = torch.tensor(rng.integers(0, 65, size=(17, 6)))
    cases = [(rows[:, None], cols[None, :]), (rows[:17, None], lists), (rows[:5], cols[:5]), (rows[:1, None], cols[None, :]),
             (torch.tensor(3), torch.tensor(9)), (rows[:0, None], cols[None, :])]
    monkeypatch.setattr(_weights, "_SMALL_BATCHED_BYTES", 0)  # the CPU's form for large batches
    by_feature = [space.canonical(a, b) for a, b in cases]
    external = space.canonical_to_rows(torch.tensor(X[:17]), lists)
    monkeypatch.setattr(_weights, "_SMALL_BATCHED_BYTES", 1 << 22)
    small = [space.canonical(a, b) for a, b in cases]  # the CPU's form for small batches
    assert all(got.shape == want.shape and torch.equal(got, want) for got, want in zip(small, by_feature))
    monkeypatch.setattr(_weights, "_CANONICAL_BATCH_BYTES", batch_bytes)
    monkeypatch.setattr(_weights, "_BATCHED_DEVICE_TYPES", ("cuda", "cpu"))  # the GPU form, on the CPU
    for (a, b), want in zip(cases, by_feature):
        got = space.canonical(a, b)
        assert got.shape == want.shape and torch.equal(got, want)
    assert torch.equal(space.canonical_to_rows(torch.tensor(X[:17]), lists), external)
    # external rows against points: the same value as the point itself
    assert torch.equal(external, space.canonical(torch.arange(17)[:, None], lists))
    # float64-accurate
    tile = by_feature[0]
    kw = {"p": p} if p else {}
    name = {"manhattan": "cityblock"}.get(metric, metric)
    ref = cdist(X[rows.numpy()], X, metric=name, **kw)
    got = space.to_distance(tile).numpy()
    if metric == "minkowski":
        got = tile.numpy() ** (1 / p)
    defined = np.isfinite(ref)  # scipy's cosine of a zero vector is NaN; here it is 1 (see _one_minus_cosine)
    assert np.all(got[~defined] == 1.0)
    np.testing.assert_allclose(got[defined], ref[defined], rtol=1e-12, atol=1e-12 * (metric == "cosine"))


def test_old_pickles_get_their_feature_major_copy():
    import pickle

    space = PairSpace(torch.tensor(np.random.default_rng(0).normal(size=(30, 4))), resolve_metric("euclidean"), tiles=False)
    state = dict(space.__dict__)
    del state["XT"]  # as pickled before the copy existed
    old = PairSpace.__new__(PairSpace)
    old.__setstate__(state)
    again = pickle.loads(pickle.dumps(old))
    idx = torch.arange(30)
    assert torch.equal(again.canonical(idx[:, None], idx[None, :]), space.canonical(idx[:, None], idx[None, :]))


def test_cpu_batches_take_every_feature_at_once_only_when_small_and_batch_invariant():
    X = torch.tensor(np.random.default_rng(1).normal(size=(30, 8)))
    space = PairSpace(X, resolve_metric("euclidean"), tiles=False)
    assert space._batched_here((30, 5))
    assert not space._batched_here((1 << 14, 1 << 6))  # 8 features x 2^20 pairs: feature by feature
    # non-integer powers round by their place in a vector on the CPU: one form for every batch
    assert not PairSpace(X, resolve_metric("minkowski", 1.5), tiles=False)._batched_here((30, 5))
    assert PairSpace(X, resolve_metric("minkowski", 3.0), tiles=False)._batched_here((30, 5))
