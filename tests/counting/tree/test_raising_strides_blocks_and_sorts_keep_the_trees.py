"""The shortcuts of the whole-count pruning with subtree raising leave its trees unchanged.

The routing down the largest branches takes several steps between drops of the rows at leaves (a leaf leads to
itself), bounded by the nodes' initial heights, in blocks of rows; the leaf estimates come from one table-backed
function, in blocks of rows, that also returns the rows' sums; the rows are sorted by leaf with torch's stable
sort when there are many, and their codes padded to rows NumPy copies as one item when they are narrow enough.
Trees must equal the node-by-node recursion of ``test_subtree_raising_equals_the_j48_recursion`` bit for bit whatever the stride, the
block sizes and the sort, on numeric, nominal and mixed data, with rows padded or not.
"""

import numpy as np
import pytest

from gpumine.counting.tree import _estimates, _pruning_whole
from gpumine.counting.tree._estimates import _WholeEstimates, _add_errors_exact
from tests.counting.tree.test_subtree_raising_equals_the_j48_recursion import _assert_same, _fit
from tests.counting.tree.test_sibling_subtraction_and_sorted_raising_keep_the_trees import _whole_dataset


@pytest.mark.parametrize("cf", [0.1, 0.25, 0.5])
def test_whole_estimates_are_those_of_add_errors(cf):
    rng = np.random.default_rng(7)
    D = rng.integers(0, 40, (500, 6)).astype(float)
    D[:40] = 0.0  # empty rows estimate 0
    D[40:80, 1:] = 0.0  # pure rows (no error)
    D[80:120] = rng.integers(0, 2, (40, 6))  # few instances: the e + 0.5 >= N branch
    N = D.sum(1)
    e = N - D.max(1)
    want = np.zeros(N.size)
    ok = N >= 1
    want[ok] = e[ok] + _add_errors_exact(N[ok], e[ok], cf)
    est = _WholeEstimates(cf, int(N.max()))
    for _ in range(2):  # the second time from the filled table
        tot, got = est(D, totals=True)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(tot, N)
    np.testing.assert_array_equal(est(D[::-1]), want[::-1])


@pytest.mark.parametrize("stride", [1, 2, 5])
@pytest.mark.parametrize("cats", ["mixed", "numeric", "nominal"])
@pytest.mark.parametrize("seed", [0, 4, 7])
def test_routing_stride_leaves_the_tree_as_the_recursion(monkeypatch, stride, cats, seed):
    X, y, kw = _whole_dataset(seed)
    if cats != "mixed":
        kw = dict(kw, categorical_features=[] if cats == "numeric" else "all")
    monkeypatch.setattr(_pruning_whole, "ROUTE_STRIDE", stride)
    _assert_same(_fit(X, y, None, kw), _fit(X, y, None, kw, reference=True), X)


@pytest.mark.parametrize("cats", ["mixed", "numeric", "nominal"])
@pytest.mark.parametrize("seed", [1, 4, 9])
def test_blocks_and_torch_sort_leave_the_tree_as_the_recursion(monkeypatch, cats, seed):
    X, y, kw = _whole_dataset(seed)
    if cats != "mixed":
        kw = dict(kw, categorical_features=[] if cats == "numeric" else "all")
    want = _fit(X, y, None, kw, reference=True)
    # blocks of a few rows (many per routing and per estimate), and torch's sort of the rows by leaf
    monkeypatch.setattr(_pruning_whole, "ROUTE_BLOCK", 7)
    monkeypatch.setattr(_estimates, "EST_BLOCK", 5)
    monkeypatch.setattr(_pruning_whole, "TORCH_SORT_MIN", 16)
    _assert_same(_fit(X, y, None, kw), want, X)


@pytest.mark.parametrize("cats", ["mixed", "numeric", "nominal"])
def test_unpadded_wide_rows_leave_the_tree_as_the_recursion(cats):
    # more than 32 one-byte codes a row: the rows are not padded (and a nominal leaf's step reads no padding)
    X, y, kw = _whole_dataset(3)
    rng = np.random.default_rng(5)
    X = np.column_stack([X] + [rng.integers(0, 3, X.shape[0]).astype(float) for _ in range(36)])
    cat = {"mixed": list(range(0, X.shape[1], 2)), "numeric": [], "nominal": "all"}[cats]
    kw = dict(kw, categorical_features=cat)
    _assert_same(_fit(X, y, None, kw), _fit(X, y, None, kw, reference=True), X)


@pytest.mark.parametrize("bound", [7, 1 << 16, 431_000, 1 << 31])
def test_stable_sort_is_argsort(bound):
    key = np.random.default_rng(bound % 89).integers(0, bound, 70_000)
    for k in (key, key.astype(np.int32)):
        order, sorted_key = _pruning_whole._stable_sort(k, bound)
        want = np.argsort(k, kind="stable")
        np.testing.assert_array_equal(order, want)
        np.testing.assert_array_equal(sorted_key, k[want])
