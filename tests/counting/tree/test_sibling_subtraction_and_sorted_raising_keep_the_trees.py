"""C45Classifier on whole counts with one path per row: sibling subtraction, range-based raising, waits per depth.

Without sample weights and missing values every count is a whole number and every row follows one path. The
growth then derives a child's count table as its parent's minus its siblings' (on CPU devices), and subtree
raising keeps the rows sorted by leaf instead of routing them level by level. Both must give the trees of the
general paths bit for bit: against the node-by-node recursion of ``test_subtree_raising_equals_the_j48_recursion``, with the
subtraction switched off, and with the rows' leaves routed on the host instead of taken from the growth. The
growth must wait for the device a fixed number of times per depth (what costs on a GPU).
"""

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from gpumine.counting.tree import C45Classifier, _encoding, _growth
from gpumine.datasets import make_poker_hands
from tests.counting.tree.test_subtree_raising_equals_the_j48_recursion import _assert_same, _fit


def _whole_dataset(seed):
    """Mixed nominal / numeric data, no missing value, no weight (the whole-count paths), noisy enough to raise."""
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(300, 3000))
    d = int(rng.integers(2, 7))
    C = int(rng.integers(2, 9))
    cols, cat = [], []
    for j in range(d):
        if j % 2 == 0:
            cols.append(rng.integers(0, int(rng.integers(2, 12)), n).astype(float))
            cat.append(j)
        else:
            cols.append(np.round(rng.normal(size=n) * 3, int(rng.integers(0, 2))))
    X = np.column_stack(cols)
    s = (X[:, 0] * 3 + X[:, 1] * 2).astype(int)
    y = np.where(rng.random(n) < 0.35, rng.integers(0, C, n), np.abs(s) % C)
    kw = dict(categorical_features=cat if seed % 3 else [], min_samples_leaf=int(rng.integers(1, 4)),
              confidence=float(rng.choice([0.1, 0.25, 0.5])))
    return X, y, kw


@pytest.mark.parametrize("seed", range(16))
def test_whole_count_raising_equals_the_recursion(seed):
    X, y, kw = _whole_dataset(seed)
    _assert_same(_fit(X, y, None, kw), _fit(X, y, None, kw, reference=True), X)


def test_the_whole_count_datasets_exercise_raising():
    raised = 0
    for seed in range(16):
        X, y, kw = _whole_dataset(seed)
        raised += _fit(X, y, None, kw).export_text() != _fit(X, y, None, kw, subtree_raising=False).export_text()
    assert raised >= 4, raised


def _tables(tree):
    return tree.export_text(), {k: v.copy() for k, v in tree._t.items()}, (tree.n_nodes_, tree.n_leaves_, tree.depth_)


def _same(a, b):
    assert a[0] == b[0] and a[2] == b[2]
    for k in b[1]:
        np.testing.assert_array_equal(a[1][k], b[1][k], err_msg=k)


def test_rows_routed_on_the_host_equal_the_growths_leaves(monkeypatch):
    X, y = make_poker_hands(4000, seed=3)
    for cf in (None, "all"):
        want = _tables(C45Classifier(device="cpu", categorical_features=cf).fit(X, y))
        grow = C45Classifier._grow

        def forget(self, *a, grow=grow):
            grow(self, *a)
            self._row_node = None

        monkeypatch.setattr(C45Classifier, "_grow", forget)
        _same(_tables(C45Classifier(device="cpu", categorical_features=cf).fit(X, y)), want)
        monkeypatch.undo()


@pytest.mark.parametrize("case", ["poker", "poker_nominal", "mixed", "mixed_missing", "weighted", "bitmap"])
def test_sibling_subtraction_leaves_the_tree_unchanged(monkeypatch, case):
    from tests.counting.tree.test_split_search_equals_the_per_attribute_search import _mixed_data

    w = None
    kw = dict(device="cpu", min_samples_leaf=1)
    if case.startswith("poker") or case == "bitmap":
        X, y = make_poker_hands(6000, seed=5)
        kw["categorical_features"] = "all" if case == "poker_nominal" else None
        kw["representation"] = "bitmap" if case == "bitmap" else "histogram"
    else:
        X, y = _mixed_data(7, n=2500, missing=0.05 if case == "mixed_missing" else 0.0)
        if case == "weighted":
            w = np.random.default_rng(8).integers(1, 4, len(y)) * 0.5
    used = []
    plan = _growth._sibling_plan
    monkeypatch.setattr(_growth, "SIBLING_MIN_SAVED", 0.0)  # derive wherever it saves a row: the most derived tables
    monkeypatch.setattr(_growth, "_sibling_plan", lambda *a, **k: used.append(plan(*a, **k)) or used[-1])
    got = {}
    for flag in (True, False):
        monkeypatch.setattr(C45Classifier, "_sibling_subtraction", flag)
        got[flag] = _tables(C45Classifier(**kw).fit(X, y, sample_weight=w))
    _same(got[True], got[False])
    derived = sum(p["parent"].size for p in used if p is not None)
    if case in ("poker", "poker_nominal", "mixed"):
        assert derived > 20  # the comparison covers derived tables
    elif case != "bitmap":  # (bitmap passes cost per row set: the plans are made, then dropped)
        assert derived == 0  # fractional counts (weights, missing values routed) are never subtracted


def test_sibling_plan_derives_the_larger_splittable_child():
    # parents: 0 -> nodes 0-1, 1 -> nodes 2-4, 2 -> nodes 5-6
    split = np.array([True, True, False, True, False, False, True])
    entries = np.array([10.0, 40.0, 5.0, 20.0, 30.0, 3.0, 2.0])
    plan = _growth._sibling_plan(split, entries, np.array([0, 2, 5]), np.array([2, 3, 2]), np.array([7, 8, 9]))
    # parent 0: node 1 (40 rows) derived from node 0; parent 1: node 3 (20) is not above its unsplittable siblings'
    # 35 rows; parent 2: node 6 (2) is not above node 5's 3
    assert plan["order"].tolist() == [0, 3, 6, 1]
    assert plan["parent"].tolist() == [7]
    assert plan["sib_of"].tolist() == [0] and plan["sib_group"].tolist() == [0]
    assert plan["group"].tolist() == [0, 4, 4, 1, 4, 4, 2] and plan["n_groups"] == 5
    assert plan["entries"] == 10 + 20 + 2
    assert _growth._sibling_plan(split, entries, np.array([0, 2, 5]), np.array([2, 3, 2]), np.array([7, 8, 9]),
                              min_saved=100) is None


class _Waits(TorchFunctionMode):
    """The torch calls that make the host wait for a CUDA device, counted on the CPU by what they would do there.

    Reads to the host (``.cpu()``, ``.item()``, ``.tolist()``, ``bool()`` ...), copies of host data to the device
    (``torch.as_tensor`` / ``torch.tensor`` with a device), and ops whose output size depends on the data
    (``nonzero``, boolean-mask indexing, ``repeat_interleave`` without ``output_size``, ``unique``, ``masked_select``;
    ``bincount`` counts twice: CUDA's reads the minimum and the maximum back).
    """

    def __init__(self):
        super().__init__()
        self.n = 0
        self.active = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.active:
            self.n += self._waits(getattr(func, "__name__", ""), args, kwargs)
        return func(*args, **kwargs)

    @staticmethod
    def _waits(name, args, kwargs):
        def boolean(idx):
            items = idx if isinstance(idx, tuple) else (idx,)
            return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)

        if name in ("cpu", "item", "tolist", "__bool__", "__int__", "__float__", "__index__"):
            return 1
        if name in ("nonzero", "unique", "unique_consecutive", "masked_select", "argwhere"):
            return 1
        if name in ("__getitem__", "__setitem__", "index_put_", "index_put") and len(args) > 1 and boolean(args[1]):
            return 1
        if name == "repeat_interleave" and "output_size" not in kwargs and len(args) > 1 \
                and isinstance(args[1], torch.Tensor):
            return 1
        if name == "bincount":
            return 2
        if name in ("as_tensor", "tensor") and args and not isinstance(args[0], torch.Tensor) \
                and kwargs.get("device") is not None:
            return 1
        return 0


@pytest.mark.parametrize("cf", [None, "all"])
def test_the_growth_waits_for_the_device_five_times_per_depth(monkeypatch, cf):
    # as on a CUDA device: no sibling subtraction, the scatter count instead of torch.bincount
    monkeypatch.setattr(C45Classifier, "_sibling_subtraction", False)
    monkeypatch.setattr(_growth, "_bincount", lambda index, size: torch.zeros(size, dtype=torch.int64).scatter_add_(
        0, index, torch.ones_like(index)))
    waits = _Waits()
    grow = C45Classifier._grow

    def counted(self, *a):
        waits.active = True
        try:
            grow(self, *a)
        finally:
            waits.active = False

    monkeypatch.setattr(C45Classifier, "_grow", counted)
    X, y = make_poker_hands(20000, seed=4)
    with waits:
        tree = C45Classifier(device="cpu", categorical_features=cf, representation="histogram").fit(X, y)
    depths = len(tree.representations_) + 1  # the depths searched and the last one (all leaves)
    assert depths > (5 if cf else 20)
    # per depth: the host's two looks (distributions; chosen splits) and, inside the histogram of the count table,
    # torch.bincount's two reads and the copy of the level offsets; once: the attribute groups' index tables
    assert waits.n <= 5 * depths + 8, (waits.n, depths)


def test_small_whole_numbers_are_encoded_by_counting_as_by_sorting(monkeypatch):
    rng = np.random.default_rng(9)
    X = np.column_stack([rng.integers(1, 5, 400), rng.integers(-7, 6, 400), rng.normal(size=400),
                         rng.integers(0, 3, 400) * 0.5, np.r_[rng.integers(0, 4, 399), 10**6]]).astype(np.float64)
    X[rng.random(X.shape) < 0.1] = np.nan
    X[:3, 1] = 0.0
    for nominal in (np.zeros(5, dtype=bool), np.array([True, True, False, False, True])):
        fast = _encoding._Columns(X, nominal, 256, list("abcde"))
        codes = fast.encode_train(X)
        assert set(fast._codes) == set() and fast._source is None  # the found codes were used and let go
        monkeypatch.setattr(_encoding, "_small_int_codes", lambda known: None)
        slow = _encoding._Columns(X, nominal, 256, list("abcde"))
        monkeypatch.undo()
        np.testing.assert_array_equal(codes, slow.encode_train(X))
        for a, b in zip(fast.values, slow.values):
            assert type(a) is type(b)
            if isinstance(a, tuple):  # binned: ("binned", cuts)
                assert a[0] == b[0] and np.array_equal(a[1], b[1])
            else:
                assert a.dtype == b.dtype and [type(v) for v in a] == [type(v) for v in b] and list(a) == list(b)
    assert _encoding._small_int_codes(np.array([-0.0, 1.0])) is None  # the sign of zero as first seen: general path
    assert _encoding._small_int_codes(np.array([0.5, 1.0])) is None
    v, c = _encoding._small_int_codes(np.array([3.0, -2.0, 3.0, 7.0]))
    assert v.tolist() == [-2.0, 3.0, 7.0] and c.tolist() == [1, 0, 1, 2]
    for y in (rng.integers(-3, 5, 50), rng.integers(0, 9, 50).astype(np.uint8), np.array(["b", "a", "b"])):
        want = np.unique(y, return_inverse=True)
        got = _encoding._classes(y)
        assert got[0].dtype == want[0].dtype
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
