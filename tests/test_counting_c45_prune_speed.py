"""The shortcuts of the whole-count pruning with subtree raising leave its trees unchanged.

The routing down the largest branches takes several steps between drops of the rows at leaves (a leaf leads to
itself), bounded by the nodes' initial heights; the leaf estimates come from one table-backed function that also
returns the rows' sums. Trees must equal the node-by-node recursion of ``test_counting_c45_pruning`` bit for bit
whatever the stride, on numeric, nominal and mixed data.
"""

import numpy as np
import pytest

from gpumine.counting import _c45
from gpumine.counting._c45 import _WholeEstimates, _add_errors_exact
from test_counting_c45_pruning import _assert_same, _fit
from test_counting_c45_whole import _whole_dataset


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
    monkeypatch.setattr(_c45, "ROUTE_STRIDE", stride)
    _assert_same(_fit(X, y, None, kw), _fit(X, y, None, kw, reference=True), X)
