"""C45Classifier's faster paths against the general ones they shortcut: the same trees bit for bit.

* DataFrames with non-numeric columns: numeric columns read as float64 and string columns factorised by pandas
  (``_FrameColumns``), instead of every cell boxed into one object matrix;
* distinct values and codes by hashing (``_float_codes``, ``_str_codes``, string labels) instead of sorting;
* integer matrices encoded all at once by counting (``_small_int_matrix_codes``), without a float64 copy;
* binned columns' cuts and bins from their distinct values (``_lower_quantiles``) instead of partitioning and
  searching all of the column;
* numeric attributes of similar numbers of levels searched in one padded group on whole counts;
* whole-count pruning deciding from the largest branches' estimates to within rounding, forming the recursion's
  nested sums only where a decision could turn within it (``BRANCH_SLACK``);
* the stable radix order of the pruning's row keys.
"""

import numpy as np
import pandas as pd
import pytest
import torch

from gpumine.counting.tree import C45Classifier, _encoding, _pruning_whole, _split_search
from gpumine.counting.tree._encoding import _Columns
from gpumine.counting.tree._split_search import _LnfTable
from gpumine.counting._ops import level_offsets
from gpumine.datasets import make_poker_hands
from tests.counting.tree.test_subtree_raising_equals_the_j48_recursion import _assert_same


def _frame(seed, n=3000, missing=True):
    """Mixed columns of the dtypes a DataFrame brings: ints, floats, nullable ints, strings (object and pandas' string
    dtype), a categorical; with missing values (NaN, None, NA) when asked."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({
        "i": rng.integers(0, 40, n),
        "f": np.round(rng.normal(size=n), 2),
        "big": rng.integers(0, 10**6, n),  # more distinct values than max_bins: binned
        "rate": rng.integers(0, 101, n) / 100.0,
        "ni": pd.array(rng.integers(0, 5, n), dtype="Int64"),
        "s_obj": rng.choice(np.array(["tcp", "udp", "icmp"], dtype=object), n),
        "s_str": pd.array(rng.choice(["http", "smtp", "ftp", "ssh", "x"], n), dtype="string"),
        "cat": pd.Categorical(rng.choice(["a", "b", "c"], n)),
        "neg0": rng.choice([-1.5, 0.0, 2.0], n),
    })
    X.loc[:5, "neg0"] = -0.0  # a negative zero: the general paths keep its sign as first seen
    if missing:
        m = rng.random((n, 5)) < 0.05
        X.loc[m[:, 0], "f"] = np.nan
        X.loc[m[:, 1], "ni"] = pd.NA
        X.loc[m[:, 2], "s_obj"] = None
        X.loc[m[:, 3], "s_str"] = pd.NA
        X.loc[m[:, 4], "rate"] = np.nan
    y = (X["i"].to_numpy() % 3 + (X["s_obj"] == "udp").to_numpy() * 2 + rng.integers(0, 2, n)) % 4
    return X, np.array(["c%d" % v for v in y], dtype=object)


@pytest.fixture
def boxed(monkeypatch):
    """The encoding before the fast paths: every column boxed (as ``X.to_numpy(dtype=object)`` gives it), values
    and codes by sorting and per-element lookup, labels by ``np.unique``."""
    def apply():
        monkeypatch.setattr(_encoding._FrameColumns, "column", lambda self, j: (
            lambda col: col if self._rows is None else col[self._rows])(self._frame.iloc[:, j].to_numpy(dtype=object)))
        monkeypatch.setattr(_encoding._FrameColumns, "string_codes", lambda self, j: None)
        monkeypatch.setattr(_encoding, "_str_codes", lambda known: None)
        monkeypatch.setattr(_encoding, "_float_codes", lambda known: None)
        monkeypatch.setattr(_encoding, "_only_str", lambda x: False)
    return apply


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("cats", [None, ["i", "rate", "s_obj", "s_str", "cat"]])
def test_frame_columns_give_the_boxed_encoding_and_tree(boxed, seed, cats):
    X, y = _frame(seed, missing=seed % 2 == 0)
    idx = None if cats is None else [X.columns.get_loc(c) for c in cats]
    w = np.random.default_rng(seed).integers(0, 3, len(y)).astype(float) if seed >= 2 else None  # zeros drop rows
    kw = dict(device="cpu", categorical_features=idx, handle_unknown="missing", min_samples_leaf=3)
    fast = C45Classifier(**kw).fit(X, y, sample_weight=w)
    boxed()
    slow = C45Classifier(**kw).fit(X, y, sample_weight=w)
    assert fast.classes_.dtype == slow.classes_.dtype and list(fast.classes_) == list(slow.classes_)
    for a, b in zip(fast._cols.values, slow._cols.values):
        if isinstance(a, tuple):
            assert b[0] == a[0] and np.array_equal(a[1], b[1])
        else:
            assert a.dtype == b.dtype and [(type(u), u) for u in a] == [(type(v), v) for v in b]
            signs = [[np.signbit(u) for u in vals if isinstance(u, float)] for vals in (a, b)]
            assert signs[0] == signs[1]
    assert fast._cols.has_missing == slow._cols.has_missing and fast._cols.n_known == slow._cols.n_known
    assert fast.n_nodes_ > 5
    _assert_same(fast, slow, X)


def test_frame_columns_encode_as_the_object_matrix():
    X, _ = _frame(7)
    nominal = np.array([c in ("s_obj", "s_str", "cat", "i") for c in X.columns])
    numeric = np.array([pd.api.types.is_numeric_dtype(X[c]) for c in X.columns])
    frame = _encoding._FrameColumns(X, numeric)
    frame.nominal = nominal
    got = _Columns(frame, nominal, 256, list(X.columns))
    want = _Columns(X.to_numpy(dtype=object), nominal, 256, list(X.columns))
    np.testing.assert_array_equal(got.encode_train(frame), want.encode_train(X.to_numpy(dtype=object)))


def test_hashed_codes_equal_sorted_ones():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 50, 5000) / 7.0
    vals, codes = _encoding._float_codes(x)
    np.testing.assert_array_equal(vals, np.unique(x))
    np.testing.assert_array_equal(codes, np.searchsorted(np.unique(x), x))
    assert _encoding._float_codes(np.array([1.0, -0.0, 0.0])) is None
    assert _encoding._float_codes(np.array([1, 2])) is None
    s = rng.choice(np.array(["b", "a", "B", "é", "", "aa"], dtype=object), 2000)
    vals, codes = _encoding._str_codes(s)
    want = _encoding._sorted_unique(s)
    assert list(vals) == list(want)
    np.testing.assert_array_equal(vals[codes], s)
    assert _encoding._str_codes(np.array(["a", 1], dtype=object)) is None
    assert _encoding._str_codes(np.array([np.str_("a")], dtype=object)) is None
    labels = rng.choice(np.array(["normal.", "smurf.", "back."], dtype=object), 300)
    got, want = _encoding._classes(labels), np.unique(labels, return_inverse=True)
    assert got[0].dtype == want[0].dtype and list(got[0]) == list(want[0])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("bound", [7, 1 << 16, 431_000, 1 << 32])
def test_stable_order_is_argsort(bound):
    key = np.random.default_rng(bound % 97).integers(0, bound, 20_000)
    np.testing.assert_array_equal(_pruning_whole._stable_order(key, bound), np.argsort(key, kind="stable"))


def _levels_data(seed, n=3000):
    """Numeric attributes of 2 .. 10 levels (padded groups: {2, 3}, {4, 5, 6}, {7 .. 10}) and a nominal one."""
    rng = np.random.default_rng(seed)
    ks = (2, 3, 4, 5, 6, 7, 8, 9, 10, 3)
    X = np.column_stack([rng.integers(0, k, n) for k in ks]).astype(np.float64)
    y = (X[:, 3] + 2 * (X[:, 8] > 4) + X[:, 9] + rng.integers(0, 2, n)).astype(int) % 4
    return X, y


@pytest.mark.parametrize("minobj", [1.0, 2.0, 5.0])
def test_padded_groups_select_as_exact_groups(minobj):
    X, y = _levels_data(0)
    tree = C45Classifier(device="cpu", categorical_features=[9]).fit(X, y)
    cols = tree._cols
    L_off = level_offsets(cols.n_levels)
    groups = tree._attr_groups(L_off, torch.device("cpu"))
    assert sum(g[5] is not None for g in groups.whole) == 3 and len(groups.whole) == 4
    rng = np.random.default_rng(1)
    G, L, C = 200, L_off[-1], 4
    counts = torch.as_tensor(rng.integers(0, 5, (G, L, C)) * (rng.random((G, L, C)) < 0.5))
    counts[:4] = 0
    tot = counts[:, L_off[0]:L_off[1], :].sum(1).to(torch.float64)
    total = tot.sum(1)
    counted = torch.ones(len(cols.n_known), dtype=torch.bool)
    lnf = _LnfTable(int(counts.sum()), torch.device("cpu"))
    exact = _split_search._AttrGroups(groups.exact, groups.exact, groups.pick)
    want = tree._select_sub(counts, tot, total, L_off, counted, C, minobj, lnf, exact)
    got = tree._select_sub(counts, tot, total, L_off, counted, C, minobj, lnf, groups)
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
    assert (want[0] >= 0).sum() > 20
    for a, b in zip(got[1], want[1]):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].dtype == b[key].dtype
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)


def test_padded_groups_leave_the_tree_unchanged(monkeypatch):
    X, y = _levels_data(2, n=6000)
    merged = C45Classifier(device="cpu", categorical_features=[9], min_samples_leaf=1).fit(X, y)
    monkeypatch.setattr(_split_search, "MERGE_LEVELS_RATIO", 1.0)
    exact = C45Classifier(device="cpu", categorical_features=[9], min_samples_leaf=1).fit(X, y)
    assert merged.n_nodes_ > 30
    _assert_same(merged, exact, X)


@pytest.mark.parametrize("cats", [None, "all", [0, 2, 4, 6, 8]])
def test_estimates_within_rounding_decide_as_the_nested_sums(monkeypatch, cats):
    """The default slack, none (decide on the sums to within rounding alone) and an endless one (always the nested
    sums, the recursion's) give one tree."""
    X, y = make_poker_hands(40_000, seed=8)
    trees = {}
    for slack in (_pruning_whole.BRANCH_SLACK, 0.0, 1e300):
        monkeypatch.setattr(_pruning_whole, "BRANCH_SLACK", slack)
        trees[slack] = C45Classifier(device="cpu", categorical_features=cats).fit(X, y)
    assert trees[0.0].n_nodes_ > 100
    for slack in (0.0, 1e300):
        _assert_same(trees[slack], trees[_pruning_whole.BRANCH_SLACK], X[:5000])


def test_lower_quantiles_from_counts_equal_numpy():
    rng = np.random.default_rng(11)
    q = np.linspace(0, 1, 257)[1:-1]
    for x in (rng.integers(0, 5000, 20011) / 3.0, rng.normal(size=999), np.repeat([1.0, 2.0, 7.5], [5, 1, 300]),
              np.array([4.0])):
        vals, codes = np.unique(x, return_inverse=True)
        np.testing.assert_array_equal(_encoding._lower_quantiles(vals, codes, q), np.quantile(x, q, method="lower"))


def _int_matrix(rng, n=4000):
    return np.column_stack([
        rng.integers(1, 14, n),  # a card rank
        rng.integers(-3, 3, n),
        rng.integers(0, 3000, n),  # more distinct values than max_bins: binned
        rng.integers(0, 2, n),
    ])


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint16])
@pytest.mark.parametrize("wide", [False, True])
def test_integer_matrix_encodes_as_its_floats(monkeypatch, dtype, wide):
    """An integer matrix is encoded at once by counting; the same values, cuts and codes as its float64 copy through
    the per-column paths (and, too wide a range, per column itself)."""
    rng = np.random.default_rng(5)
    X = _int_matrix(rng)
    if dtype == np.uint16:
        X = X - X.min(0)
    if wide:
        X[0, 3] = 10**6 if dtype != np.uint16 else 65535  # one column's range spans too much for one count table
        if dtype == np.uint16:
            X[1, 2] = 40000
    X = X.astype(dtype)
    for nominal in (np.zeros(4, dtype=bool), np.array([True, True, False, True])):
        got = _Columns(X, nominal, 256, list("abcd"))
        assert (got._matrix is None) == wide
        codes = got.encode_train(X)
        assert codes.dtype == np.int32 and codes.flags.c_contiguous and got._matrix is None
        monkeypatch.setattr(_encoding, "_small_int_matrix_codes", lambda X: None)
        monkeypatch.setattr(_encoding, "_lower_quantiles", lambda *a: pytest.fail("binned by partitioning here"))
        monkeypatch.setattr(_encoding, "_small_int_codes", lambda known: None)
        monkeypatch.setattr(_encoding, "_float_codes", lambda known: None)
        want = _Columns(X.astype(np.float64), nominal, 256, list("abcd"))
        monkeypatch.undo()
        np.testing.assert_array_equal(codes, want.encode_train(X.astype(np.float64)))
        assert got.n_known == want.n_known and got.has_missing == want.has_missing
        for a, b in zip(got.values, want.values):
            if isinstance(a, tuple):
                assert a[0] == b[0] and np.array_equal(a[1], b[1])
            else:
                assert a.dtype == b.dtype and [(type(u), u) for u in a] == [(type(v), v) for v in b]
        for a, b in zip(got.bin_max + got.bin_min, want.bin_max + want.bin_min):
            assert (a is None and b is None) or np.array_equal(a, b)


@pytest.mark.parametrize("cats", [None, "all"])
def test_integer_input_gives_the_tree_of_its_floats(cats):
    rng = np.random.default_rng(8)
    X = _int_matrix(rng)
    y = (X[:, 0] % 3 + (X[:, 1] > 0) + (X[:, 2] > 1500)) % 3
    kw = dict(device="cpu", categorical_features=cats)
    if cats == "all":
        X = X[:, [0, 1, 3]]
    fast = C45Classifier(**kw).fit(X, y)
    slow = C45Classifier(**kw).fit(X.astype(np.float64), y)
    assert fast.n_nodes_ > 5
    _assert_same(fast, slow, X)
    np.testing.assert_array_equal(fast.predict_proba(X.astype(np.float64)), slow.predict_proba(X))


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8])
@pytest.mark.parametrize("wide", [False, True])
def test_integer_matrix_codes_on_a_device_equal_the_host_counting(dtype, wide):
    """The GPU form of the integer encoding (run here on the CPU device: the same torch operations) gives the
    host form's values and codes, and declines the same matrices."""
    rng = np.random.default_rng(6)
    X = _int_matrix(rng)
    if dtype == np.uint8:
        X = X - X.min()
    if wide:
        if np.iinfo(dtype).max < 10**6:
            pytest.skip("no range of this type is too wide for one count table")
        X[0, 3] = 10**6  # one column's range spans too much for one count table
    X = X.astype(dtype)
    want = _encoding._small_int_matrix_codes(X)
    assert (want is None) == wide
    got = _encoding._small_int_matrix_codes_cuda(X, torch.device("cpu"))
    assert (got is None) == (want is None)
    if want is not None:
        assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(got[0], want[0]))
        assert got[1].dtype == want[1].dtype == np.int32 and np.array_equal(got[1], want[1])
    if torch.cuda.is_available():
        on_gpu = _encoding._small_int_matrix_codes_cuda(X, torch.device("cuda"))
        assert (on_gpu is None) == (want is None)
        if want is not None:
            assert np.array_equal(on_gpu[1], want[1]) and all(np.array_equal(a, b) for a, b in zip(on_gpu[0], want[0]))
