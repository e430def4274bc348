"""The pruning steps of C45Classifier as functions of their own, on a tiny hand-made tree.

Twenty-three rows, a nominal attribute ``a`` and a numeric one ``b``; the class is ``b >= 2``. The
hand-made tree splits on ``a`` first and, under ``a = 0`` (twenty rows), on ``b <= 1``; the three
rows of ``a = 1`` are one leaf. J48 raises the ``b`` subtree to the root. Each function is checked
against numbers worked out here, against the estimator fitting the same tree (its growth replaced
by the hand-made tree), and the two subtree-raising algorithms against each other and against the
node-by-node recursion they replaced.
"""

import copy
import types

import numpy as np
import pytest
import torch

from gpumine.counting.tree import C45Classifier
from gpumine.counting.tree._encoding import _Columns
from gpumine.counting.tree._estimates import add_errors
from gpumine.counting.tree._nodes import _Nodes
from gpumine.counting.tree._prediction import prediction_tables
from gpumine.counting.tree._pruning import (
    collapse,
    left_branch_last_codes,
    prune_raising,
    prune_raising_routed,
    prune_replacement,
)
from gpumine.counting.tree._pruning_whole import prune_raising_whole
from tests.counting.tree.test_subtree_raising_equals_the_j48_recursion import _reference_prune_raising

NOMINAL = np.array([True, False])


def _data(missing=False):
    a = np.r_[np.zeros(20), np.ones(3)]
    b = np.r_[np.repeat([0.0, 1.0, 2.0, 3.0], 5), [0.0, 3.0, 3.0]]
    y = (b >= 2).astype(np.int64)
    X = np.column_stack([a, b])
    if missing:
        X[[2, 17], 1] = np.nan  # under a = 0, where b is tested
    return X, y


def _fill(tree, cols, codes, y, w):
    """The hand-made tree's class distributions and branch fractions from its rows, as J48 has them: a row with a
    missing value goes down every branch, its weight times the branch's share of the known weight."""

    def visit(node, rows, wts):
        tree.dist[node] = np.bincount(y[rows], wts, minlength=tree.C)
        k = tree.nchild[node]
        if not k:
            return
        a = tree.attr[node]
        c = codes[rows, a]
        miss = c >= cols.n_known[a]
        branch = c if cols.nominal[a] else (c > tree.thrc[node]).astype(np.int64)
        known = np.bincount(branch[~miss], wts[~miss], minlength=k)
        frac = known / known.sum() if known.sum() > 0 else np.full(k, 1.0 / k)
        tree.frac[node, :k] = frac
        for i in range(k):
            sel = ~miss & (branch == i)
            r, ww = np.r_[rows[sel], rows[miss]], np.r_[wts[sel], wts[miss] * frac[i]]
            visit(tree.first[node] + i, r[ww > 0], ww[ww > 0])

    visit(0, np.arange(len(y)), np.ones(len(y)) if w is None else w)
    return tree


def _hand_tree(cols, codes, y, w=None):
    """Root (0) tests ``a``: node 1 (a = 0) tests ``b <= 1`` (leaves 3, 4), node 2 (a = 1) is a leaf."""
    tree = _Nodes(2, 2, capacity=8)
    tree.add(np.array([-1]), 0)
    tree.add(np.array([0, 0]), 1)
    tree.attr[0], tree.first[0], tree.nchild[0] = 0, 1, 2
    tree.add(np.array([1, 1]), 2)
    tree.attr[1], tree.first[1], tree.nchild[1] = 1, 3, 2
    tree.thrc[1], tree.thr[1] = 1, 1.0  # level code of b = 1.0, and the cut
    return _fill(tree, cols, codes, y, w)


def _setup(missing=False):
    X, y = _data(missing)
    cols = _Columns(X, NOMINAL, 256, ["a", "b"])
    codes = cols.encode_train(X)
    return X, y, cols, codes


def _tables(tree, cols):
    return prediction_tables(tree, cols.nominal)


def _same_tables(got, want):
    assert got[1:] == want[1:]  # nodes, leaves, depth
    assert got[0].keys() == want[0].keys()
    for key in want[0]:
        np.testing.assert_array_equal(got[0][key], want[0][key], err_msg=key)


def _estimator_tables(monkeypatch, X, y, w, hand, **params):
    """The tables of C45Classifier fitting ``X, y`` with the hand-made tree in place of the grown one."""

    def grow(self, codes, y_, w_, n):
        self._tree = copy.deepcopy(hand)
        self.representations_ = []
        self._row_node = None

    monkeypatch.setattr(C45Classifier, "_grow", grow)
    est = C45Classifier(device="cpu", categorical_features=[0], **params).fit(X, y, sample_weight=w)
    return est._t, est.n_nodes_, est.n_leaves_, est.depth_


def test_collapse_makes_a_leaf_of_a_split_that_corrects_no_training_error():
    _, y, cols, codes = _setup()
    tree = _hand_tree(cols, codes, y)
    collapse(tree)
    # the b split corrects every error of node 1 (10 as a leaf, 0 below): kept; so is the root's (11 -> 1)
    assert tree.nchild[[0, 1]].tolist() == [2, 2]
    # leaves as wrong as their parent (10 errors): no better than node 1, and the whole tree (10 + 1) no better than
    # the root (11): the root collapses, and node 1 below it is not visited
    tree.dist[3] = [5.0, 5.0]
    tree.dist[4] = [5.0, 5.0]
    collapse(tree)
    assert tree.nchild[[0, 1]].tolist() == [0, 2]
    tree.nchild[0] = 2
    collapse(tree, root=1)  # the subtree at node 1 alone
    assert tree.nchild[[0, 1]].tolist() == [2, 0]


@pytest.mark.parametrize("cf", [0.1, 0.25, 0.5])
def test_replacement_compares_the_estimated_errors(cf):
    _, y, cols, codes = _setup()
    tree = _hand_tree(cols, codes, y)

    def est(dist):
        n, e = float(sum(dist)), float(sum(dist) - max(dist))
        return e + add_errors(n, e, cf)

    leaves = {i: est(tree.dist[i]) for i in (2, 3, 4)}
    keep_1 = est(tree.dist[1]) > leaves[3] + leaves[4] + 0.1 + 1e-6
    subtree_1 = leaves[3] + leaves[4] if keep_1 else est(tree.dist[1])
    keep_0 = est(tree.dist[0]) > subtree_1 + leaves[2] + 0.1 + 1e-6
    prune_replacement(tree, cf)
    assert (tree.nchild[1] > 0, tree.nchild[0] > 0) == (keep_1, keep_0) == (True, True)


def test_raising_lifts_the_largest_branch_to_the_root():
    _, y, cols, codes = _setup()
    tree = _hand_tree(cols, codes, y)
    prune_raising(tree, cols, codes, y, None, 0.25)
    tables, n_nodes, n_leaves, depth = _tables(tree, cols)
    # the root now tests b <= 1 with all 23 rows: 11 of class 0 on the left, 12 of class 1 on the right
    assert (n_nodes, n_leaves, depth) == (3, 2, 1)
    assert tables["attr"].tolist() == [1, -1, -1] and tables["thr"][0] == 1.0
    assert tables["dist"].tolist() == [[11.0, 12.0], [11.0, 0.0], [0.0, 12.0]]
    np.testing.assert_array_equal(tables["frac"][0], [11 / 23, 12 / 23])
    assert tree.depth[tree.first[0]] == 1  # the raised leaves' depths follow them up


@pytest.mark.parametrize("cf", [0.1, 0.25, 0.5])
def test_the_two_raising_algorithms_and_the_recursion_give_one_tree(cf):
    _, y, cols, codes = _setup()
    hand = _hand_tree(cols, codes, y)
    whole = copy.deepcopy(hand)
    prune_raising_whole(whole, cols, codes, y, cf, left_branch_last_codes(whole, cols))
    # the growth's leaf of every row given instead of routed
    leaf_of_row = torch.as_tensor(np.where(codes[:, 0] == 1, 2, np.where(codes[:, 1] <= 1, 3, 4)))
    whole_rows = copy.deepcopy(hand)
    prune_raising_whole(whole_rows, cols, codes, y, cf, left_branch_last_codes(whole_rows, cols), row_node=leaf_of_row)
    routed = copy.deepcopy(hand)
    for known_only in (True, False):
        routed = copy.deepcopy(hand)
        prune_raising_routed(routed, cols, codes, y, np.ones(len(y)), cf, left_branch_last_codes(routed, cols),
                             known_only)
        _same_tables(_tables(routed, cols), _tables(whole, cols))
    reference = copy.deepcopy(hand)
    holder = types.SimpleNamespace(_tree=reference, _cols=cols, confidence=cf)
    _reference_prune_raising(holder, torch.from_numpy(codes), torch.from_numpy(y), None)
    _same_tables(_tables(whole, cols), _tables(reference, cols))
    _same_tables(_tables(whole_rows, cols), _tables(reference, cols))


@pytest.mark.parametrize("raising", [True, False])
@pytest.mark.parametrize("collapsing", [True, False])
def test_the_functions_give_the_estimators_tree(monkeypatch, raising, collapsing):
    X, y, cols, codes = _setup()
    hand = _hand_tree(cols, codes, y)
    tree = copy.deepcopy(hand)
    if collapsing:
        collapse(tree)
    if raising:
        prune_raising(tree, cols, codes, y, None, 0.25)
    else:
        prune_replacement(tree, 0.25)
    want = _estimator_tables(monkeypatch, X, y, None, hand, subtree_raising=raising, collapse=collapsing)
    _same_tables(_tables(tree, cols), want)


@pytest.mark.parametrize("cf", [0.1, 0.25, 0.5])
def test_routed_raising_with_weights_and_missing_values(monkeypatch, cf):
    X, y, cols, codes = _setup(missing=True)
    w = np.r_[np.full(10, 0.5), np.full(13, 2.0)]
    hand = _hand_tree(cols, codes, y, w)
    assert (hand.dist[3] % 1 != 0).any()  # the missing values' rows went down both branches, in part
    tree = copy.deepcopy(hand)
    prune_raising(tree, cols, codes, y, w, cf)  # fractional weights: the routed algorithm
    reference = copy.deepcopy(hand)
    holder = types.SimpleNamespace(_tree=reference, _cols=cols, confidence=cf)
    _reference_prune_raising(holder, torch.from_numpy(codes), torch.from_numpy(y), torch.from_numpy(w))
    _same_tables(_tables(tree, cols), _tables(reference, cols))
    _same_tables(_tables(tree, cols), _estimator_tables(monkeypatch, X, y, w, hand, collapse=False, confidence=cf))
