"""mlxtend's apriori / fpgrowth / association_rules expectations, asserted on gpumine's (see README.md here).

mlxtend's ``test_fpbase.py`` holds what every one of its miners must do with a
one-hot DataFrame (column indices unless ``use_colnames``, frozensets, sparse
frames, bool or 0/1 values and nothing else, ``min_support`` in (0, 1],
``max_len``, an empty table); ``test_apriori.py`` adds apriori's own cases.
gpumine's ``frequent_itemsets`` and ``association_rules`` are checked here
against a float64 NumPy oracle that enumerates every itemset (support = the
fraction of rows holding all its items) and, where mlxtend is installed (the
test extra), against mlxtend itself.
"""

import inspect
import time
from itertools import combinations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal

from gpumine.counting import association_rules, frequent_itemsets
from gpumine.counting._itemsets import _join_pairs

# a small shop: at min_support=0.5 (3 of 6 baskets) bread, butter and milk are frequent
# together, so the longest frequent itemset has three items
ITEMS = ["bread", "butter", "cheese", "eggs", "flour", "jam", "milk", "tea"]
BASKETS = [
    ["bread", "butter", "milk", "tea"],
    ["bread", "butter", "jam", "milk"],
    ["bread", "milk", "eggs"],
    ["butter", "cheese", "flour"],
    ["bread", "butter", "milk"],
    ["eggs", "tea", "jam"],
]


def _one_hot(baskets=BASKETS, items=ITEMS, dtype=np.int64):
    return pd.DataFrame([[item in b for item in items] for b in baskets], columns=items).astype(dtype)


def _mine(table, min_support=0.5, **kwargs):
    return frequent_itemsets(table, min_support, device="cpu", **kwargs)


def _oracle(values, min_support, max_len=None):
    """Every itemset of column indices with its support, by enumeration, in float64."""
    values = np.asarray(values, dtype=bool)
    n, m = values.shape
    found = {}
    for size in range(1, (max_len or m) + 1):
        for items in combinations(range(m), size):
            support = values[:, list(items)].all(axis=1).sum() / n
            if support >= min_support:
                found[items] = support
    return found


def _as_dict(result, labels=None):
    """{sorted tuple of items: support}; with labels, column names are mapped back to indices."""
    out = {}
    for itemset, support in zip(result["itemsets"], result["support"]):
        items = [labels.index(i) for i in itemset] if labels is not None else list(itemset)
        out[tuple(sorted(items))] = support
    return out


# -- results ------------------------------------------------------------------------------------------------
def test_default_reports_column_indices_with_exact_supports():
    table = _one_hot()
    result = _mine(table)
    assert list(result.columns) == ["support", "itemsets"]
    assert result["support"].dtype == np.float64
    assert all(isinstance(i, int) for s in result["itemsets"] for i in s)
    assert _as_dict(result) == _oracle(table, 0.5)


def test_use_colnames_reports_column_names():
    table = _one_hot()
    result = _mine(table, use_colnames=True)
    assert {frozenset(s) for s in result["itemsets"]} == {
        frozenset(ITEMS[i] for i in items) for items in _oracle(table, 0.5)}
    assert _as_dict(result, ITEMS) == _oracle(table, 0.5)


@pytest.mark.parametrize("use_colnames", [False, True])
def test_itemsets_are_frozensets(use_colnames):
    result = _mine(_one_hot(), use_colnames=use_colnames)
    assert len(result) > 0
    assert all(isinstance(s, frozenset) for s in result["itemsets"])


def test_rows_can_be_selected_by_set_or_frozenset():
    result = _mine(_one_hot(), use_colnames=True)
    assert result.shape == _mine(_one_hot()).shape
    assert result[result["itemsets"] == "nothing"].shape == (0, 2)
    for key in ({"milk", "bread"}, frozenset(["milk", "bread"]), frozenset(["bread", "milk"])):
        assert result[result["itemsets"] == key].shape == (1, 2)


def test_max_len_caps_itemset_length():
    table = _one_hot()
    assert _mine(table)["itemsets"].map(len).max() == 3
    assert _mine(table, max_len=2)["itemsets"].map(len).max() == 2
    singles = _mine(table, max_len=1)
    assert set(singles["itemsets"].map(len)) == {1}
    assert _as_dict(singles) == _oracle(table, 0.5, max_len=1)


def test_min_support_one_keeps_items_of_every_transaction():
    table = pd.DataFrame({"A": [1, 1, 1], "B": [1, 1, 1], "C": [0, 1, 0]})
    result = _mine(table, 1.0, use_colnames=True)
    assert _as_dict(result, ["A", "B", "C"]) == {(0,): 1.0, (1,): 1.0, (0, 1): 1.0}


def test_no_frequent_item_gives_an_empty_frame_with_both_columns():
    result = _mine(pd.DataFrame({"A": [1, 0], "B": [0, 1]}), 1.0, use_colnames=True)
    assert list(result.columns) == ["support", "itemsets"]
    assert result.empty
    # the itemsets column holds sets, empty or not (as mlxtend's)
    assert result["itemsets"].dtype == object
    assert result["support"].dtype == np.float64


def test_table_without_items_gives_an_empty_frame():
    # mlxtend's test_empty: one transaction, no item columns
    result = _mine(pd.DataFrame([[]]))
    assert list(result.columns) == ["support", "itemsets"]
    assert result.empty
    assert result["itemsets"].dtype == object


def test_singleton_baskets_at_tiny_min_support():
    # mlxtend's Ex2/Ex3: four baskets, one of them with two items; every item and the pair at 0.25
    baskets = [["a"], ["b"], ["c", "d"], ["e"]]
    table = _one_hot(baskets, ["a", "b", "c", "d", "e"], bool)
    expected = {(0,): 0.25, (1,): 0.25, (2,): 0.25, (3,): 0.25, (4,): 0.25, (2, 3): 0.25}
    assert _as_dict(_mine(table, 0.001)) == expected
    # the baskets themselves (gpumine's own input) give the same itemsets, by item
    direct = _mine(baskets, 0.001)
    assert _as_dict(direct, ["a", "b", "c", "d", "e"]) == expected


# -- input kinds --------------------------------------------------------------------------------------------
def test_bool_and_zero_one_tables_give_the_same_result():
    pd.testing.assert_frame_equal(_mine(_one_hot(dtype=bool)), _mine(_one_hot(dtype=np.int64)))
    pd.testing.assert_frame_equal(_mine(_one_hot(dtype=np.float64)), _mine(_one_hot(dtype=np.int64)))


@pytest.mark.parametrize("convert", [
    pytest.param(lambda t: t.astype({"bread": bool, "milk": bool}), id="bool-and-int-columns"),
    pytest.param(lambda t: t.astype(bool).astype(object), id="object-bools"),
    pytest.param(lambda t: t.astype("boolean"), id="nullable-boolean"),
    pytest.param(lambda t: t.astype("Int64"), id="nullable-Int64"),
])
def test_mixed_and_object_columns_of_bools_and_zero_one(convert):
    # mlxtend takes any table whose cells are True, False, 0 or 1, whatever the column dtypes
    table = _one_hot()
    pd.testing.assert_frame_equal(_mine(convert(table), use_colnames=True), _mine(table, use_colnames=True))


@pytest.mark.parametrize("fill_value", [0, False])
def test_sparse_dataframe_gives_the_dense_result(fill_value):
    table = _one_hot()
    sparse = table.astype(pd.SparseDtype(type(fill_value), fill_value=fill_value))
    pd.testing.assert_frame_equal(_mine(sparse, use_colnames=True), _mine(table, use_colnames=True))


def test_sparse_dataframe_with_stored_zeros_gives_the_dense_result():
    # explicit zeros in a CSR matrix are entries that hold 0, not items
    table = _one_hot()
    values = table.to_numpy()
    matrix = sp.csr_matrix(np.ones_like(values))
    matrix.data = values.ravel().copy()  # every cell stored, zeros included
    assert matrix.nnz == values.size
    sparse = pd.DataFrame.sparse.from_spmatrix(matrix, columns=table.columns)
    pd.testing.assert_frame_equal(_mine(sparse), _mine(table))


@pytest.mark.parametrize("start", [0, 1])
def test_sparse_dataframe_with_integer_column_names(start):
    table = _one_hot()
    sparse = table.astype(pd.SparseDtype("int", 0))
    sparse.columns = list(range(start, start + len(ITEMS)))
    result = _mine(sparse, use_colnames=True)
    assert _as_dict(result, list(sparse.columns)) == _oracle(table, 0.5)


@pytest.mark.xfail(strict=True, raises=pytest.fail.Exception,
                   reason="mlxtend refuses sparse frames whose integer column names do not start at 0 (a pandas "
                          "limitation of its sparse path); gpumine reads the values and mines them (see "
                          "test_sparse_dataframe_with_integer_column_names)")
def test_sparse_integer_column_names_not_from_zero_raise():
    sparse = _one_hot().astype(pd.SparseDtype("int", 0))
    sparse.columns = list(range(1, len(ITEMS) + 1))
    with pytest.raises(ValueError):
        _mine(sparse)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_non_binary_value_raises_naming_it(sparse):
    table = _one_hot()
    table.iloc[3, 3] = 2
    if sparse:
        table = table.astype(pd.SparseDtype("int", fill_value=0))
    # mlxtend's message names the allowed values and the one found
    with pytest.raises(ValueError, match=r"only 0/1 or booleans; found 2\b"):
        _mine(table)


@pytest.mark.parametrize("bad, shown", [(0.5, "0.5"), (np.nan, "nan"), ("1", "'1'"), (None, "None")])
def test_other_non_binary_cells_raise(bad, shown):
    table = _one_hot().astype(object)
    table.iloc[2, 5] = bad
    with pytest.raises(ValueError, match=f"found {shown}"):
        _mine(table)


@pytest.mark.parametrize("min_support", [0.0, -0.1, 1.5, 2])
def test_min_support_outside_unit_interval_raises(min_support):
    with pytest.raises(ValueError, match=rf"min_support must be in \(0, 1\].*got {min_support}$"):
        _mine(_one_hot(), min_support)


# -- the level-wise join ----------------------------------------------------------------------------------
def _joined(old):
    old = np.asarray(old)
    a, b = _join_pairs(old)
    return np.concatenate([old[a], old[b, -1:]], axis=1)


def test_candidates_join_only_itemsets_sharing_a_prefix():
    assert_array_equal(_joined([[0, 1], [0, 2], [1, 2], [1, 3], [2, 3]]), [[0, 1, 2], [1, 2, 3]])


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="gpumine does not prune a joined candidate whose other subsets are infrequent: it "
                          "counts it with one AND of its parents' bitmaps and drops it by that count (the "
                          "results are the same)")
def test_candidates_with_an_infrequent_subset_are_pruned():
    assert _joined([[0, 1, 2], [0, 1, 3], [0, 2, 3]]).size == 0


# -- against mlxtend and the oracle on random tables --------------------------------------------------------
def _random_table(seed, n=60, m=10):
    rng = np.random.default_rng(seed)
    # items of different popularity, so that several itemset lengths are frequent
    return pd.DataFrame(rng.random((n, m)) < np.linspace(0.15, 0.8, m), columns=[f"i{j}" for j in range(m)])


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("min_support, max_len", [(0.1, None), (0.25, None), (0.1, 2)])
def test_random_tables_match_the_oracle(seed, min_support, max_len):
    table = _random_table(seed)
    result = _as_dict(_mine(table, min_support, max_len=max_len))
    expected = _oracle(table, min_support, max_len)
    assert result.keys() == expected.keys()
    assert_allclose([result[k] for k in expected], list(expected.values()), rtol=0, atol=0)


@pytest.mark.parametrize("miner", ["apriori", "fpgrowth"])
@pytest.mark.parametrize("seed", [0, 1])
def test_random_tables_match_mlxtend(miner, seed):
    frequent_patterns = pytest.importorskip("mlxtend.frequent_patterns")
    table = _random_table(seed)
    for use_colnames in (False, True):
        ours = _mine(table, 0.1, use_colnames=use_colnames)
        theirs = getattr(frequent_patterns, miner)(table, min_support=0.1, use_colnames=use_colnames)
        assert _as_dict(ours) == _as_dict(theirs)


def test_row_order_is_apriori_order():
    # by itemset length, then by column index: row for row the frame mlxtend's apriori returns
    frequent_patterns = pytest.importorskip("mlxtend.frequent_patterns")
    table = _random_table(3)
    ours = _mine(table, 0.15)
    theirs = frequent_patterns.apriori(table, min_support=0.15)
    assert [tuple(sorted(s)) for s in ours["itemsets"]] == [tuple(sorted(s)) for s in theirs["itemsets"]]
    assert_array_equal(ours["support"], theirs["support"])


def test_wide_sparse_table_within_mlxtend_time_bound():
    # mlxtend's fpgrowth must mine a 10,000 x 400 table of mostly rare items at min_support=0.01
    # within 5 seconds; the same bound here, with the result checked against the table
    rng = np.random.default_rng(7)
    n, m = 10_000, 400
    rates = np.r_[rng.uniform(1e-4, 9e-3, 360), rng.uniform(0.01, 0.1, 24), rng.uniform(0.1, 0.65, 16)]
    values = rng.random((n, m)) < rates
    table = pd.DataFrame(values, columns=[f"feature_{j:04d}" for j in range(m)])
    start = time.perf_counter()
    result = _mine(table, 0.01)
    assert time.perf_counter() - start < 5
    assert len(result) > 1000 and result["itemsets"].map(len).max() >= 3
    # the supports of a sample of the itemsets, and every frequent item and pair, from the table
    sample = rng.choice(len(result), 200, replace=False)
    supports = [values[:, sorted(s)].all(axis=1).mean() for s in result["itemsets"].iloc[sample]]
    assert_array_equal(result["support"].iloc[sample], supports)
    singles = values.mean(axis=0) >= 0.01
    found_singles = set(result["itemsets"][result["itemsets"].map(len) == 1])
    assert found_singles == {frozenset([j]) for j in np.flatnonzero(singles)}
    frequent = np.flatnonzero(singles)
    pair_counts = values[:, frequent].T.astype(np.int64) @ values[:, frequent].astype(np.int64)
    i, j = np.nonzero(np.triu(pair_counts >= 0.01 * n, k=1))
    assert set(result["itemsets"][result["itemsets"].map(len) == 2]) == {
        frozenset([frequent[a], frequent[b]]) for a, b in zip(i, j)}


# -- association rules ---------------------------------------------------------------------------------------
RULE_COLUMNS = ["antecedents", "consequents", "antecedent support", "consequent support", "support",
                "confidence", "lift", "representativity", "leverage", "conviction", "zhangs_metric", "jaccard",
                "certainty", "kulczynski"]


def _mlxtend_rules(itemsets, n_transactions, **kwargs):
    frequent_patterns = pytest.importorskip("mlxtend.frequent_patterns")
    rules = frequent_patterns.association_rules
    if "num_itemsets" in inspect.signature(rules).parameters:  # mlxtend >= 0.23.2
        return rules(itemsets, n_transactions, **kwargs)
    return rules(itemsets, **kwargs)


def _by_rule(rules):
    key = rules.assign(_a=rules["antecedents"].map(lambda s: tuple(sorted(s))),
                       _c=rules["consequents"].map(lambda s: tuple(sorted(s))))
    return key.sort_values(["_a", "_c"]).reset_index(drop=True)


def test_rules_follow_the_metric_definitions():
    table = _one_hot()
    itemsets = _mine(table, 0.3)
    rules = association_rules(itemsets, "confidence", 0.0)
    assert list(rules.columns) == RULE_COLUMNS
    assert all(isinstance(s, frozenset) for s in rules["antecedents"])
    values = table.to_numpy().astype(bool)

    def support(items):
        return values[:, sorted(items)].all(axis=1).mean()

    sA = np.array([support(a) for a in rules["antecedents"]])
    sC = np.array([support(c) for c in rules["consequents"]])
    sAC = np.array([support(a | c) for a, c in zip(rules["antecedents"], rules["consequents"])])
    assert_allclose(rules["support"], sAC)
    assert_allclose(rules["confidence"], sAC / sA)
    assert_allclose(rules["lift"], sAC / sA / sC)
    assert_allclose(rules["leverage"], sAC - sA * sC, atol=1e-15)
    with np.errstate(divide="ignore"):
        assert_allclose(rules["conviction"], np.where(sAC / sA < 1, (1 - sC) / (1 - sAC / sA), np.inf))
    # every split of every frequent itemset of two or more items, each once
    n_rules = sum(2 ** len(s) - 2 for s in itemsets["itemsets"] if len(s) > 1)
    assert len(rules) == n_rules


@pytest.mark.parametrize("metric, threshold", [("confidence", 0.8), ("lift", 1.1), ("leverage", 0.05),
                                               ("conviction", 1.5), ("representativity", 1.0),
                                               ("jaccard", 0.5), ("kulczynski", 0.7)])
def test_rules_match_mlxtend(metric, threshold):
    frequent_patterns = pytest.importorskip("mlxtend.frequent_patterns")
    table = _one_hot(dtype=bool)
    ours = _by_rule(association_rules(_mine(table, 0.3), metric, threshold))
    theirs = _by_rule(_mlxtend_rules(frequent_patterns.apriori(table, min_support=0.3), len(table),
                                     metric=metric, min_threshold=threshold))
    assert len(ours) == len(theirs) > 0
    assert list(ours["_a"]) == list(theirs["_a"]) and list(ours["_c"]) == list(theirs["_c"])
    for column in RULE_COLUMNS[2:]:
        assert_allclose(ours[column].to_numpy(float), theirs[column].to_numpy(float), err_msg=column)


def test_rules_above_every_value_give_an_empty_frame_with_the_columns():
    rules = association_rules(_mine(_one_hot(), 0.3), "confidence", 2.0)
    assert rules.empty
    assert list(rules.columns) == RULE_COLUMNS


@pytest.mark.parametrize("columns", [["itemsets"], ["support"]])
def test_rules_need_support_and_itemsets_columns(columns):
    with pytest.raises(ValueError, match="'support' and 'itemsets'"):
        association_rules(_mine(_one_hot(), 0.3)[columns])


def test_rules_unknown_metric_raises():
    with pytest.raises(ValueError, match="metric must be one of"):
        association_rules(_mine(_one_hot(), 0.3), "unicorn")


def test_rules_take_itemsets_given_as_sets():
    itemsets = _mine(_one_hot(), 0.3)
    as_sets = itemsets.assign(itemsets=itemsets["itemsets"].map(set))
    rules = association_rules(as_sets, "confidence", 0.5)
    assert all(isinstance(s, frozenset) for s in rules["antecedents"])
    assert all(isinstance(s, frozenset) for s in rules["consequents"])
    pd.testing.assert_frame_equal(rules, association_rules(itemsets, "confidence", 0.5))
