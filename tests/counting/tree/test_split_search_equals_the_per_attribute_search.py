"""The batched split search and node counting of C45Classifier against the per-attribute / all-node forms they replaced.

``_reference_select_sub`` is the former ``C45Classifier._select_sub`` (one attribute at a time, ``x log x``
computed directly); the current one evaluates attributes in groups of one kind and number of levels and, for
whole counts, looks ``x log x`` up in a table. Both must choose the same splits with the same details bit for
bit, on weighted (fractional) and whole counts; whole trees must not change either (missing values, weights,
numeric and nominal attributes of several numbers of levels). The growth counts the full node x level x class
table only for nodes that can split; every node's class distribution must still be the count of its rows.
"""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from gpumine.counting.tree import C45Classifier
from gpumine.counting.tree._encoding import _Columns
from gpumine.counting.tree._estimates import _SMALL
from gpumine.counting.tree._split_search import _LN2, _lnf, _LnfTable, _ratio
from gpumine.counting._ops import level_offsets


def _reference_select_sub(self, counts, tot, total, L_off, counted, C, minobj, lnf=None, groups=None):
    """The per-attribute split search before batching (git history), kept as the reference."""
    cols = self._cols
    G = counts.shape[0]
    dev = counts.device
    d = len(cols.n_known)
    gains = torch.zeros(G, d, dtype=torch.float64, device=dev)
    ratios = torch.zeros(G, d, dtype=torch.float64, device=dev)
    valid = torch.zeros(G, d, dtype=torch.bool, device=dev)
    infos = []
    for j in range(d):
        k = cols.n_known[j]
        K = counts[:, L_off[j]:L_off[j] + k, :]
        known_c = K.sum(1)
        known = known_c.sum(1)
        unknown = (total - known).clamp_min(0)
        rate = torch.where(total > 0, unknown / total.clamp_min(1e-300), torch.zeros_like(total))
        old_ent = (_lnf(known) - _lnf(known_c).sum(1)) / _LN2
        if cols.nominal[j]:
            per_bag = K.sum(2)
            new_ent = (_lnf(per_bag).sum(1) - _lnf(K).sum((1, 2))) / _LN2
            num = (1 - rate) * (old_ent - new_ent)
            gain = torch.where(num.abs() < _SMALL, torch.zeros_like(num), num / known.clamp_min(1e-300))
            ok = ((per_bag >= minobj - _SMALL).sum(1) >= 2) & (known > 0)
            split_ent = (-_lnf(per_bag).sum(1) - _lnf(unknown) + _lnf(total)) / _LN2
            ratio = _ratio(gain, split_ent, total)
            infos.append({"bags": per_bag.cpu().numpy()})
        else:
            left_c = K.cumsum(1)[:, :-1, :]
            left = left_c.sum(2)
            right_c = known_c[:, None, :] - left_c
            right = known[:, None] - left
            present = K.sum(2)[:, :-1] > 0
            min_split = (0.1 * known / C).clamp(min=minobj, max=25.0)
            cand = present & (left >= min_split[:, None] - _SMALL) & (right >= min_split[:, None] - _SMALL)
            cand &= (known >= 2 * min_split - _SMALL)[:, None]
            new_ent = (_lnf(left) + _lnf(right) - _lnf(left_c).sum(2) - _lnf(right_c).sum(2)) / _LN2
            num = (1 - rate)[:, None] * (old_ent[:, None] - new_ent)
            g_t = torch.where(num.abs() < _SMALL, torch.zeros_like(num), num / known.clamp_min(1e-300)[:, None])
            g_t = torch.where(cand, g_t, torch.full_like(g_t, -math.inf))
            n_cand = cand.sum(1)
            if g_t.shape[1]:
                best_g, _ = g_t.max(1)
                first = (g_t >= best_g[:, None] - _SMALL).to(torch.int8).argmax(1)
            else:
                best_g = torch.full((G,), -math.inf, dtype=torch.float64, device=dev)
                first = torch.zeros(G, dtype=torch.int64, device=dev)
            has = (n_cand > 0) & (best_g > _SMALL)
            gain = best_g - torch.log2(n_cand.clamp_min(1).to(torch.float64)) / total.clamp_min(1e-300)
            ok = has & (gain > _SMALL)
            gain = torch.where(ok, gain, torch.zeros_like(gain))
            idx = first.clamp_max(max(k - 2, 0))
            if g_t.shape[1]:
                lb = left.gather(1, idx[:, None])[:, 0]
                rb = right.gather(1, idx[:, None])[:, 0]
            else:
                lb = rb = torch.zeros_like(known)
            split_ent = (-_lnf(lb) - _lnf(rb) - _lnf(unknown) + _lnf(total)) / _LN2
            ratio = _ratio(gain, split_ent, total)
            pos = torch.arange(k, device=dev)
            pres_all = K.sum(2) > 0
            if k:
                nxt = torch.where(pres_all & (pos[None, :] > idx[:, None]), pos[None, :],
                                  torch.full_like(pres_all, k, dtype=torch.int64)).min(1).values.clamp_max(k - 1)
            else:
                nxt = torch.zeros(G, dtype=torch.int64, device=dev)
            infos.append({"thr": idx.cpu().numpy(), "next": nxt.cpu().numpy(),
                          "bags": torch.stack([lb, rb], 1).cpu().numpy()})
        gains[:, j] = gain
        ratios[:, j] = ratio
        valid[:, j] = ok
    use = valid & counted[None, :]
    n_use = use.sum(1)
    avg = torch.where(n_use > 0, (gains * use).sum(1) / n_use.clamp_min(1), torch.zeros_like(total))
    elig = valid & (gains >= avg[:, None] - 1e-3)
    r = torch.where(elig, ratios, torch.full_like(ratios, -math.inf))
    best_r, _ = r.max(1)
    first = (r >= best_r[:, None] - _SMALL).to(torch.int8).argmax(1)
    ok = (n_use > 0) & (best_r > _SMALL)
    best = torch.where(ok, first, torch.full_like(first, -1))
    return best, infos


def _mixed_data(seed, n=400, missing=0.0):
    """Nominal attributes of 1, 2, 3, 3 and 5 values, numeric ones of 1, 2, 4, 4 and 9 distinct values."""
    rng = np.random.default_rng(seed)
    cols = {}
    for i, k in enumerate((1, 2, 3, 3, 5)):
        cols[f"n{i}"] = rng.choice(np.array([f"v{v}" for v in range(k)], dtype=object), n)
    for i, k in enumerate((1, 2, 4, 4, 9)):
        cols[f"x{i}"] = rng.integers(0, k, n).astype(np.float64) * 1.5
    X = pd.DataFrame(cols)
    y = (X["x4"].to_numpy() / 1.5 + (X["n4"] == "v1") * 3 + (X["x2"] > 2) * 2 + rng.integers(0, 3, n)).astype(int) % 4
    if missing:
        for c in X.columns:
            m = rng.random(n) < missing
            X.loc[m, c] = np.nan if X[c].dtype.kind == "f" else None
    return X, y


def _host(v):
    return v.cpu().numpy() if isinstance(v, torch.Tensor) else v


def _same_infos(a, b):
    assert len(a) == len(b)
    for fa, fb in zip(a, b):
        assert fa.keys() == fb.keys()
        for key in fa:
            assert _host(fa[key]).dtype == _host(fb[key]).dtype, key
            np.testing.assert_array_equal(_host(fa[key]), _host(fb[key]))


@pytest.mark.parametrize("whole", [False, True])
def test_grouped_select_equals_per_attribute_select(whole):
    X, y = _mixed_data(0, missing=0.05)
    tree = C45Classifier(device="cpu").fit(X, y)  # sets the column encoding
    cols = tree._cols
    L_off = level_offsets(cols.n_levels)
    L, C = L_off[-1], 4
    rng = np.random.default_rng(1)
    G = 300
    # sparse tables of small counts (ties, empty levels, empty nodes), whole or fractional
    raw = rng.integers(0, 4, (G, L, C)) * (rng.random((G, L, C)) < 0.4)
    counts = torch.as_tensor(raw if whole else raw * rng.random((G, L, C)) * 1.7, dtype=torch.float64)
    counts[:5] = 0.0
    counts[5:10, :, 1:] = 0.0  # pure nodes
    tot = counts[:, L_off[0]:L_off[1], :].sum(1)
    total = tot.sum(1)
    counted = torch.as_tensor(np.r_[True, False, True, True, True, True, True, False, True, True])
    lnf = _LnfTable(int(counts.sum()), torch.device("cpu")) if whole else _lnf
    for minobj in (1.0, 2.0):
        want = _reference_select_sub(tree, counts, tot, total, L_off, counted, C, minobj)
        # whole counts are searched as int64 tables (as the growth passes them) and as float64 ones
        for table in [counts] + ([counts.to(torch.int64)] if whole else []):
            got = tree._select_sub(table, tot, total, L_off, counted, C, minobj, lnf)
            torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
            _same_infos(got[1], want[1])
        assert (want[0] >= 0).sum() > 20  # the comparison covers real splits


def test_lnf_table_equals_lnf():
    x = torch.as_tensor(np.random.default_rng(2).integers(0, 5000, (7, 13, 5)), dtype=torch.float64)
    got = _LnfTable(5000, torch.device("cpu"))(x[:, 1:-1])
    torch.testing.assert_close(got, _lnf(x[:, 1:-1]), rtol=0, atol=0)


def _tables(tree):
    return tree.export_text(), {k: v.copy() for k, v in tree._t.items()}


@pytest.mark.parametrize("missing,weighted,cf", [(0.0, False, None), (0.1, False, None), (0.0, True, None),
                                                 (0.1, True, None), (0.0, False, "all"), (0.1, True, "all")])
def test_tree_unchanged_by_batched_select(monkeypatch, missing, weighted, cf):
    X, y = _mixed_data(3, n=1500, missing=missing)
    if cf == "all":
        X = X.astype(object)
    w = np.random.default_rng(4).integers(1, 4, len(y)).astype(np.float64) * 0.5 if weighted else None
    kw = dict(device="cpu", min_samples_leaf=2, categorical_features=None if cf is None else "all")
    got = C45Classifier(**kw).fit(X, y, sample_weight=w)
    # the growth passes whole counts as int64 tables; the reference searches them in float64, as it always did
    monkeypatch.setattr(C45Classifier, "_select_sub",
                        lambda self, counts, *a, **k: _reference_select_sub(self, counts.to(torch.float64), *a, **k))
    want = C45Classifier(**kw).fit(X, y, sample_weight=w)
    assert got.export_text() == want.export_text()
    assert got.n_nodes_ > 10
    for key, v in want._t.items():
        np.testing.assert_array_equal(got._t[key], v, err_msg=key)
    np.testing.assert_array_equal(got.predict_proba(X), want.predict_proba(X))


def test_node_distributions_are_the_counts_of_their_rows():
    """Only splittable nodes get the full table; every node's distribution is still its rows' class counts."""
    X, y = _mixed_data(5, n=2000)
    tree = C45Classifier(device="cpu", prune=False, collapse=False, min_samples_leaf=3).fit(X, y)
    T, cols = tree._tree, tree._cols
    codes = cols.encode_train(X.to_numpy(dtype=object))
    thr = T.thrc
    assert T.n > 50
    rows = np.arange(len(y))
    node = np.zeros(len(y), dtype=np.int64)
    seen = np.zeros((T.n, T.C))
    while rows.size:
        np.add.at(seen, (node, y[rows]), 1.0)
        inner = T.nchild[node] > 0
        rows, v = rows[inner], node[inner]
        c = codes[rows, T.attr[v]]
        br = np.where(np.asarray(cols.nominal)[T.attr[v]], c, (c > thr[v]).astype(np.int64))
        node = T.first[v] + br
    np.testing.assert_array_equal(T.dist[:T.n], seen)


def test_float_nominal_encoding_equals_generic_lookup():
    rng = np.random.default_rng(6)
    Xf = rng.integers(-3, 4, (500, 3)).astype(np.float64) * 0.5
    Xf[rng.random((500, 3)) < 0.1] = np.nan
    Xf[:7, 0] = -0.0  # the first zero seen keeps its sign, as in the generic path
    nominal = np.ones(3, dtype=bool)
    fast = _Columns(Xf, nominal, 256, ["a", "b", "c"])
    gen = _Columns(Xf.astype(object), nominal, 256, ["a", "b", "c"])
    for j in range(3):
        assert [(type(v), v, math.copysign(1, v)) for v in fast.values[j]] == \
               [(type(v), v, math.copysign(1, v)) for v in gen.values[j]]
    np.testing.assert_array_equal(fast.encode_train(Xf), gen.encode_train(Xf.astype(object)))
    unseen = np.array([0.5, 7.0, np.nan, -1.5])
    with pytest.raises(ValueError, match=r"feature .a. has category \S*7\.0\S* that was not seen in fit"):
        fast.encode_col(unseen, 0)
    np.testing.assert_array_equal(fast.encode_col(unseen, 0, unknown="missing"),
                                  gen.encode_col(unseen.astype(object), 0, unknown="missing"))


def _reference_collapse(self, root):
    """The node-by-node ``_collapse`` before vectorisation (git history)."""
    T = self._tree
    err = T.errors()

    def kids(v):
        return range(int(T.first[v]), int(T.first[v]) + int(T.nchild[v]))

    def postorder(root):
        out, stack = [], [(root, False)]
        while stack:
            v, done = stack.pop()
            if done:
                out.append(v)
                continue
            stack.append((v, True))
            for c in reversed(kids(v)):
                stack.append((c, False))
        return out

    sub = {}
    for v in postorder(root):
        sub[v] = sum(sub[c] for c in kids(v)) if T.nchild[v] else err[v]
    stack = [root]
    while stack:
        v = stack.pop()
        if not T.nchild[v]:
            continue
        if sub[v] >= err[v] - 1e-3:
            T.nchild[v] = 0
        else:
            stack.extend(kids(v))
    self._ref_postorder = postorder
    self._ref_kids = kids


def _reference_prune(self):
    """The node-by-node subtree replacement (``J48 -S``) before vectorisation (git history)."""
    T = self._tree
    est = T.estimated_errors(float(self.confidence))
    est_sub = {}
    for v in self._ref_postorder(0):
        if not T.nchild[v]:
            est_sub[v] = est[v]
            continue
        tree = sum(est_sub[c] for c in self._ref_kids(v))
        if est[v] <= tree + 0.1 + _SMALL:
            T.nchild[v] = 0
            est_sub[v] = est[v]
        else:
            est_sub[v] = tree


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("raising", [False, True])
def test_collapse_and_replacement_equal_the_recursion(monkeypatch, seed, raising):
    X, y = _mixed_data(10 + seed, n=1200, missing=0.05 * (seed % 2))
    w = np.random.default_rng(seed).integers(1, 3, len(y)).astype(np.float64) if seed >= 2 else None
    kw = dict(device="cpu", subtree_raising=raising, confidence=(0.1, 0.25, 0.4, 0.5)[seed])
    got = C45Classifier(**kw).fit(X, y, sample_weight=w)
    monkeypatch.setattr(C45Classifier, "_collapse", _reference_collapse)
    monkeypatch.setattr(C45Classifier, "_prune", _reference_prune)
    want = C45Classifier(**kw).fit(X, y, sample_weight=w)
    unpruned = C45Classifier(device="cpu", prune=False, collapse=False).fit(X, y, sample_weight=w)
    assert unpruned.n_nodes_ > want.n_nodes_ > 1  # pruning did something
    assert got.export_text() == want.export_text()
    for key, v in want._t.items():
        np.testing.assert_array_equal(got._t[key], v, err_msg=key)
