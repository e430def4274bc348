"""The vectorised subtree-raising pruning of C45Classifier against the node-by-node recursion it replaced.

``_reference_prune_raising`` is the former ``C45Classifier._prune_raising`` (a faithful port of Weka J48's
``C45PruneableClassifierTree.prune``); the vectorised one must give the same trees bit for bit (distributions,
missing-value fractions, predictions) on data with and without missing values, weights and many classes.
"""

import types

import numpy as np
import pytest

from gpumine.counting.tree import C45Classifier
from gpumine.counting.tree._estimates import _SMALL, _add_errors_exact, _pairwise_rows, add_errors


def _reference_prune_raising(self, codes, y, w):
    """The node-by-node recursion of ``_prune_raising`` before vectorisation (git history), kept as the reference."""
    import sys

    T = self._tree
    cf = float(self.confidence)
    C = T.C
    n_known = self._cols.n_known
    nominal = self._cols.nominal
    inner = np.flatnonzero(T.nchild[:T.n] > 0)
    used = np.unique(T.attr[inner]) if inner.size else np.zeros(0, dtype=np.int64)
    col = {int(j): codes[:, int(j)].cpu().numpy() for j in used}
    yh = y.cpu().numpy()
    n = yh.shape[0]
    w0 = np.ones(n) if w is None else w.cpu().numpy().astype(np.float64)

    def est(dist):
        tot = float(dist.sum())
        if abs(tot) < _SMALL:
            return 0.0
        e = tot - float(dist.max())
        return e + add_errors(tot, e, cf)

    def thr_level(v):
        bmax = self._cols.bin_max[int(T.attr[v])]
        return max(int(T.thrc[v]), int(np.searchsorted(bmax, T.thr[v], side="right")) - 1)

    def kids(v):
        f = int(T.first[v])
        return range(f, f + int(T.nchild[v]))

    def split(v, rows, wts):
        a, k = int(T.attr[v]), int(T.nchild[v])
        c = col[a][rows].astype(np.int64)
        miss = c >= n_known[a]
        # numeric: the cut is at the real threshold (a training value of the whole data, perhaps beyond the
        # node's own values), so instances routed from elsewhere compare with it as J48's C45Split does
        br = c if nominal[a] else (c > thr_level(v)).astype(np.int64)
        br = np.where(miss, k, br)
        bags = np.bincount(br, wts, minlength=k + 1)
        known = bags[:k].sum()
        frac = bags[:k] / known if abs(known) >= _SMALL else np.full(k, 1.0 / k)
        per_bag = bags[:k] + bags[k] * frac
        order = np.argsort(br, kind="stable")
        bounds = np.r_[0, np.cumsum(np.bincount(br, minlength=k + 1))]
        mr, mw = rows[order[bounds[k]:]], wts[order[bounds[k]:]]
        parts = []
        for i in range(k):
            sel = order[bounds[i]:bounds[i + 1]]
            r, ww = rows[sel], wts[sel]
            if mr.size and frac[i] > _SMALL:
                r, ww = np.concatenate([r, mr]), np.concatenate([ww, mw * frac[i]])
            parts.append((r, ww))
        return parts, frac, per_bag

    def est_branch(v, rows, wts):
        if rows.size == 0:
            return 0.0
        if not T.nchild[v]:
            return est(np.bincount(yh[rows], wts, minlength=C))
        parts, _, _ = split(v, rows, wts)
        return sum(est_branch(c, r, ww) for c, (r, ww) in zip(kids(v), parts))

    def est_tree(v):
        if not T.nchild[v]:
            return est(T.dist[v])
        return sum(est_tree(c) for c in kids(v))

    def new_distribution(v, rows, wts):
        T.dist[v] = np.bincount(yh[rows], wts, minlength=C) if rows.size else 0.0
        if T.nchild[v]:
            parts, frac, _ = split(v, rows, wts)
            T.frac[v] = 0.0
            T.frac[v, :frac.size] = frac
            for c, (r, ww) in zip(kids(v), parts):
                new_distribution(c, r, ww)

    def prune(v, rows, wts):
        while T.nchild[v]:
            parts, _, per_bag = split(v, rows, wts)
            ks = list(kids(v))
            for c, (r, ww) in zip(ks, parts):
                prune(c, r, ww)
            big, mx = -1, 0.0
            for i, b in enumerate(per_bag):  # Weka's Distribution.maxBag: the last within 1e-6 of the max
                if b - mx > -_SMALL:
                    big, mx = i, b
            e_branch = est_branch(ks[big], rows, wts)
            e_leaf = est(T.dist[v])
            e_tree = est_tree(v)
            if e_leaf - (e_tree + 0.1) < _SMALL and e_leaf - (e_branch + 0.1) < _SMALL:
                T.nchild[v] = 0
                return
            if not e_branch - (e_tree + 0.1) < _SMALL:
                return
            b = ks[big]
            T.attr[v], T.thr[v], T.thrc[v] = T.attr[b], T.thr[b], T.thrc[b]
            T.first[v], T.nchild[v] = T.first[b], T.nchild[b]
            T.parent[list(kids(v))] = v
            new_distribution(v, rows, wts)

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 4 * int(T.depth[:T.n].max()) + 200))
    try:
        prune(0, np.arange(n), w0)
    finally:
        sys.setrecursionlimit(old)
    # raising moves subtrees up: recompute depths of the nodes still reachable
    frontier = np.array([0])
    T.depth[0] = 0
    while frontier.size:
        nc = T.nchild[frontier]
        par = frontier[nc > 0]
        if par.size == 0:
            break
        k = T.nchild[par]
        ch = np.repeat(T.first[par], k) + (np.arange(k.sum()) - np.repeat(np.cumsum(k) - k, k))
        T.parent[ch] = np.repeat(par, k)
        T.depth[ch] = np.repeat(T.depth[par], k) + 1
        frontier = ch



def _dataset(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(200, 2500))
    d = int(rng.integers(2, 7))
    C = int(rng.integers(2, 12))
    cols, cat = [], []
    for j in range(d):
        if j % 2 == 0:
            cols.append(rng.integers(0, int(rng.integers(2, 16)), n).astype(float))
            cat.append(j)
        else:
            cols.append(np.round(rng.normal(size=n), int(rng.integers(0, 3))))
    X = np.column_stack(cols)
    s = (X[:, 0] * 3 + X[:, 1] * 2).astype(int)
    y = np.where(rng.random(n) < 0.3, rng.integers(0, C, n), np.abs(s) % C)
    p_miss = [0.0, 0.05, 0.2][seed % 3]
    X[rng.random(X.shape) < p_miss] = np.nan
    sw = rng.uniform(0.1, 3, n) if seed % 4 == 3 else None
    kw = dict(categorical_features=cat, min_samples_leaf=int(rng.integers(1, 4)),
              confidence=float(rng.choice([0.1, 0.25, 0.5])))
    return X, y, sw, kw


def _fit(X, y, sw, kw, reference=False, **more):
    clf = C45Classifier(device="cpu", **kw, **more)
    if reference:
        clf._prune_raising = types.MethodType(_reference_prune_raising, clf)
    return clf.fit(X, y, sample_weight=sw)


def _assert_same(a, b, X):
    assert a.export_text() == b.export_text()
    for k in b._t:
        np.testing.assert_array_equal(a._t[k], b._t[k], err_msg=k)
    assert (a.n_nodes_, a.n_leaves_, a.depth_) == (b.n_nodes_, b.n_leaves_, b.depth_)
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))


@pytest.mark.parametrize("seed", range(12))
def test_pruning_equals_the_node_by_node_recursion(seed):
    X, y, sw, kw = _dataset(seed)
    _assert_same(_fit(X, y, sw, kw), _fit(X, y, sw, kw, reference=True), X)


def test_the_random_datasets_exercise_raising_with_and_without_missing_values():
    raised = {True: 0, False: 0}
    for seed in range(12):
        X, y, sw, kw = _dataset(seed)
        a = _fit(X, y, sw, kw)
        b = _fit(X, y, sw, kw, subtree_raising=False)
        raised[bool(np.isnan(X).any())] += a.export_text() != b.export_text()
    assert raised[True] >= 2 and raised[False] >= 2, raised


def test_poker_hands_equal_the_recursion():
    from gpumine.datasets import make_poker_hands

    X, y = make_poker_hands(3000, seed=1)
    _assert_same(_fit(X, y, None, {}), _fit(X, y, None, {}, reference=True), X)


def test_pairwise_rows_sum_as_numpy_sums_a_row():
    rng = np.random.default_rng(0)
    for k in list(range(0, 40)) + [127, 128, 129, 200, 300, 1000]:
        A = rng.random((7, k)) * 10.0 ** rng.integers(-6, 6, (7, k))
        np.testing.assert_array_equal(_pairwise_rows(A), np.array([row.sum() for row in A]))


def test_add_errors_exact_is_add_errors():
    rng = np.random.default_rng(1)
    N = np.concatenate([rng.uniform(1e-6, 3, 300), rng.uniform(1, 500, 700), [1, 1.5, 2, 6, 14]])
    e = np.concatenate([rng.uniform(0, 1, 300) * rng.integers(0, 2, 300), rng.uniform(0, 1, 700) * N[300:1000],
                        [0, 1, 0.5, 0, 5]])
    e = np.minimum(e, N)
    e[::7] = np.floor(e[::7])
    for cf in (0.1, 0.25, 0.5):
        np.testing.assert_array_equal(_add_errors_exact(N, e, cf), [add_errors(a, b, cf) for a, b in zip(N, e)])


def test_an_all_missing_numeric_column_is_never_split_on():
    import pandas as pd

    from gpumine.counting import C45Classifier

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.normal(size=60), "b": np.full(60, np.nan)})
    y = (X["a"] > 0).astype(int).to_numpy()
    tree = C45Classifier(device="cpu").fit(X, y)
    assert "b" not in tree.export_text()
    np.testing.assert_array_equal(tree.predict(X), y)
