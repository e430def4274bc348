"""Counting engine: encoding, stores, count ops (torch vs a NumPy oracle), Triton vs torch."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from gpumine.counting import (
    BitmapStore,
    BitSliceStore,
    co_occurrence_count,
    contingency_table,
    contingency_tables,
    element_count,
    encode_table,
    histogram_contingency,
    pattern_counts,
    range_count,
    range_counts,
)
from gpumine.counting import _bits, _ops

HERE = Path(__file__).resolve().parent
STORES = [BitmapStore, BitSliceStore]
SHAPES = [(1, [1]), (63, [2, 5]), (64, [17, 1, 3]), (65, [4, 4]), (777, [5, 17, 3, 33, 2])]


def _oracle_table(X, cards, labels, n_classes, mask=None):
    m = np.ones(len(X), bool) if mask is None else mask
    return np.concatenate([
        np.stack([np.bincount(X[m & (labels == c), j], minlength=k) for c in range(n_classes)], 1)
        for j, k in enumerate(cards)
    ])



@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Many small torch ops under 2 OpenMP threads on a busy 2-core CI box slow down 10-30x
    (measured: C4.5 on Poker 25K fits in 0.5 s with 1 thread, 5-18 s with 2); restore afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

# ----------------------------------------------------------------------------- bits
def test_popcount_and_packing_match_python():
    rng = np.random.default_rng(0)
    words = torch.tensor(rng.integers(-(2**63), 2**63 - 1, 500, dtype=np.int64))
    ref = [bin(int(w) & (2**64 - 1)).count("1") for w in words.tolist()]
    assert _bits.popcount64(words).tolist() == ref
    assert _bits.popcount64_swar(words).tolist() == ref
    b = torch.tensor(rng.random(130) < 0.5)
    packed = _bits.pack_bool(b)
    assert packed.shape == (3,)
    assert torch.equal(_bits.unpack(packed, 130), b)
    assert int(_bits.popcount_sum(_bits.tail_mask(130))) == 130
    assert _bits.tail_mask(128).tolist() == [-1, -1]


def test_pack_groups_is_one_bitmap_per_group():
    g = torch.tensor([0, 2, 2, -1, 1, 0])
    bm = _bits.pack_groups(g, 3, 6)
    assert [_bits.unpack(bm[i], 6).nonzero()[:, 0].tolist() for i in range(3)] == [[0, 5], [4], [1, 2]]


# ----------------------------------------------------------------------------- encoding
def test_encode_table_schema_kinds_and_missing():
    df = pd.DataFrame({
        "c": ["b", "a", None, "b"],
        "i": [3, 0, 1, 3],
        "x": [0.1, 0.5, np.nan, 0.9],
    })
    t = encode_table(df, {"x": {"kind": "numeric", "bins": 2, "strategy": "equal_width"}})
    assert [c.kind for c in t.columns] == ["categorical", "integer", "numeric"]
    assert t.codes[:, 0].tolist() == [1, 0, 2, 1]  # missing is the last level
    assert t.columns[0].has_missing and t.columns[0].n_levels == 3
    assert t.codes[:, 1].tolist() == [3, 0, 1, 3] and t.columns[1].n_levels == 4
    assert t.codes[:, 2].tolist() == [0, 1, 2, 1]
    assert t.encode(pd.DataFrame({"c": ["a"], "i": [1], "x": [0.2]})).tolist() == [[0, 1, 0]]
    with pytest.raises(ValueError, match="not seen when the encoding was built"):
        t.encode(pd.DataFrame({"c": ["zzz"], "i": [1], "x": [0.2]}))
    assert t.encode(pd.DataFrame({"c": ["zzz"], "i": [1], "x": [0.2]}), handle_unknown="ignore")[0, 0] == -1


def test_encode_table_equal_frequency_and_errors():
    x = np.arange(100, dtype=float)
    t = encode_table(pd.DataFrame({"x": x}), {"x": {"kind": "numeric", "bins": 4}})
    assert np.bincount(t.codes[:, 0].numpy()).tolist() == [25, 25, 25, 25]
    with pytest.raises(ValueError, match="declared 'integer'"):
        encode_table(pd.DataFrame({"x": [-1, 2]}), ["integer"])
    with pytest.raises(ValueError, match="kind must be one of"):
        encode_table(pd.DataFrame({"x": [1]}), ["float"])
    with pytest.raises(ValueError, match="names column"):
        encode_table(pd.DataFrame({"x": [1]}), {"y": "integer"})


def test_store_from_csv(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("color,size\nred,1\nblue,2\nred,2\n")
    s = BitmapStore.from_csv(p, device="cpu")
    assert s.element_count("color", "red") == 2
    assert s.co_occurrence_count("color", "red", "size", 2) == 1


# ----------------------------------------------------------------------------- stores
@pytest.mark.parametrize("cls", STORES)
@pytest.mark.parametrize("n,cards", SHAPES)
def test_store_roundtrip_and_conversion(cls, n, cards):
    X = np.random.default_rng(n).integers(0, cards, size=(n, len(cards)))
    s = cls.from_codes(X, cards, device="cpu")
    assert np.array_equal(s.codes().numpy(), X)
    other = s.to_bitslice() if cls is BitmapStore else s.to_bitmap()
    assert np.array_equal(other.codes().numpy(), X)
    back = other.to_bitmap() if cls is BitmapStore else other.to_bitslice()
    assert torch.equal(back.words, s.words)
    assert s.memory_bytes == s.words.numel() * 8
    # padding bits never set
    pad = ~_bits.tail_mask(n)
    assert not bool((s.words & pad).any())


def test_store_sizes_follow_the_representation():
    X = np.random.default_rng(0).integers(0, 16, size=(1000, 3))
    bm = BitmapStore.from_codes(X, [16, 16, 16])
    bs = BitSliceStore.from_codes(X, [16, 16, 16])
    assert bm.words.shape == (48, 16) and bs.words.shape == (12, 16)
    assert bs.memory_bytes * 4 == bm.memory_bytes


# ----------------------------------------------------------------------------- ops vs oracle
@pytest.mark.parametrize("cls", STORES)
@pytest.mark.parametrize("n,cards", SHAPES)
def test_ops_match_numpy_oracle(cls, n, cards):
    rng = np.random.default_rng(n + 1)
    X = rng.integers(0, cards, size=(n, len(cards)))
    s = cls.from_codes(X, cards, device="cpu")
    mask = rng.random(n) < 0.5
    mt = torch.tensor(mask)
    d = len(cards)
    for _ in range(10):
        j1, j2 = rng.integers(0, d, 2)
        v1, v2 = rng.integers(0, cards[j1]), rng.integers(0, cards[j2])
        assert element_count(s, j1, int(v1)) == int((X[:, j1] == v1).sum())
        assert element_count(s, j1, int(v1), mt) == int(((X[:, j1] == v1) & mask).sum())
        assert co_occurrence_count(s, j1, int(v1), j2, int(v2), mt) == int(((X[:, j1] == v1) & (X[:, j2] == v2) & mask).sum())
        lo, hi = sorted(rng.integers(0, cards[j1], 2))
        assert range_count(s, j1, int(lo), int(hi), mt) == int(((X[:, j1] >= lo) & (X[:, j1] <= hi) & mask).sum())
    labels = X[:, -1]
    ct = contingency_tables(s, torch.tensor(labels), mask=mt)
    assert np.array_equal(ct.numpy(), _oracle_table(X, cards, labels, cards[-1], mask))
    one = contingency_table(s, 0, d - 1)
    assert np.array_equal(one.numpy(), _oracle_table(X[:, :1], cards[:1], labels, cards[-1]))


def test_batched_patterns_and_ranges_edge_cases():
    X = np.array([[0, 1], [1, 1], [1, 0], [3, 1]])
    for cls in STORES:
        s = cls.from_codes(X, [4, 2])
        got = pattern_counts(s, [[0, 1, 1, 1], [0, 1, -1, 0], [1, 1, -1, 0], [0, 2, 1, 0]]).tolist()
        assert got == [1, 2, 3, 0]
        assert pattern_counts(s, [[0, 3], [1, 0]]).tolist() == [1, 1]
        # lo > hi is empty, out-of-range ends are clipped
        assert range_counts(s, [[0, 2, 1], [0, -5, 99], [0, 1, 3]]).tolist() == [0, 4, 3]
        with pytest.raises(ValueError, match="level code"):
            element_count(s, 0, 4)
        with pytest.raises(TypeError, match="integer level code"):
            element_count(s, 0, "a")
        with pytest.raises(ValueError, match="shape"):
            pattern_counts(s, [[0, 1, 2]])
        with pytest.raises(ValueError, match="boolean mask"):
            element_count(s, 0, 1, mask=torch.ones(3, dtype=torch.bool))


def test_histogram_contingency_equals_bitmap_and_weights():
    rng = np.random.default_rng(5)
    X = rng.integers(0, [3, 6, 2], size=(300, 3))
    y = rng.integers(0, 4, 300)
    h = histogram_contingency(torch.tensor(X), [3, 6, 2], torch.tensor(y), 4)
    b = contingency_tables(BitmapStore.from_codes(X, [3, 6, 2]), torch.tensor(y))
    assert torch.equal(h, b)
    w = rng.random(300)
    hw = histogram_contingency(torch.tensor(X), [3, 6, 2], torch.tensor(y), 4, torch.tensor(w))
    ref = np.concatenate([np.stack([np.bincount(X[y == c, j], w[y == c], k) for c in range(4)], 1) for j, k in enumerate([3, 6, 2])])
    np.testing.assert_allclose(hw.numpy(), ref, rtol=1e-12)


def test_working_memory_chunking_gives_same_counts():
    import gpumine

    rng = np.random.default_rng(9)
    X = rng.integers(0, [7, 9], size=(5000, 2))
    s = BitmapStore.from_codes(X, [7, 9])
    y = torch.tensor(X[:, 0] % 3)
    full = contingency_tables(s, y)
    with gpumine.config_context(working_memory=0.01):  # ~10 KiB: forces many chunks
        small = contingency_tables(s, y)
        pats = pattern_counts(s, [[0, i % 7, 1, i % 9] for i in range(40)])
    assert torch.equal(full, small)
    assert pats.tolist() == [int(((X[:, 0] == i % 7) & (X[:, 1] == i % 9)).sum()) for i in range(40)]


def test_choose_representation_on_cpu_is_histogram():
    # measured: packing 10 columns into bitmaps costs ~10x a bincount over them, so arrays go by histogram
    assert _ops.choose_representation(10**6, [8] * 10, 2, device="cpu") == "histogram"


# ----------------------------------------------------------------------------- Triton
@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU machine the gpu tier runs the kernels natively")
def test_triton_kernels_match_torch_in_interpreter():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    src = str(HERE.parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, str(HERE / "triton_cases.py"), "cpu"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "match torch" in proc.stdout


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["case_and_count_matrix", "case_bitslice_level_counts", "case_store_ops",
                                  "case_histogram", "case_itemsets", "case_estimators"])
def test_triton_kernels_match_torch_on_gpu(case):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine (run the gpu tier on the device machine)")
    pytest.importorskip("triton")
    sys.path.insert(0, str(HERE))
    import triton_cases

    getattr(triton_cases, case)("cuda")


@pytest.mark.gpu
def test_gpu_store_ops_equal_cpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine")
    rng = np.random.default_rng(2)
    X = rng.integers(0, [5, 17, 3, 64], size=(100_003, 4))
    for cls in STORES:
        cpu = cls.from_codes(X, [5, 17, 3, 64], device="cpu")
        gpu = cls.from_codes(X, [5, 17, 3, 64], device="cuda")
        assert torch.equal(gpu.words.cpu(), cpu.words)
        y = torch.tensor(X[:, 2])
        for be in ("torch", "triton"):
            assert torch.equal(contingency_tables(gpu, y.cuda(), backend=be).cpu(), contingency_tables(cpu, y))
            assert range_counts(gpu, [[3, 5, 40], [1, 0, 16]], backend=be).cpu().tolist() == range_counts(cpu, [[3, 5, 40], [1, 0, 16]]).tolist()


# ----------------------------------------------------------------------------- histogram backends, auto by cost
def test_histogram_backend_dispatch():
    import gpumine

    cpu = torch.device("cpu")
    assert _ops.histogram_backend("torch", cpu) == "torch"
    assert _ops.histogram_backend("auto", cpu) == "torch"
    with gpumine.config_context(backend="torch"):
        assert _ops.histogram_backend(None, cpu) == "torch"
    with pytest.raises(ValueError, match="backend must be one of|backend"):
        _ops.histogram_backend("cuda", cpu)
    if os.environ.get("TRITON_INTERPRET") != "1":
        # the interpreter is never picked by itself: an explicit "triton" on the CPU is an error naming the fix
        with pytest.raises(ValueError, match="use backend='torch' or 'auto'"):
            histogram_contingency(torch.zeros(3, 1, dtype=torch.int64), [1], torch.zeros(3, dtype=torch.int64), 1,
                                  backend="triton")


def test_histogram_contingency_empty_and_grouped_torch():
    y0 = torch.zeros(0, dtype=torch.int64)
    assert histogram_contingency(torch.zeros(0, 2, dtype=torch.int64), [3, 1], y0, 2).tolist() == [[0, 0]] * 4
    w = histogram_contingency(torch.zeros(0, 2, dtype=torch.int64), [3, 1], y0, 2, torch.zeros(0, dtype=torch.float64))
    assert w.dtype == torch.float64 and w.shape == (4, 2)
    X = torch.tensor([[0, 1], [1, 1], [1, 0]])
    y = torch.tensor([1, 1, 0])
    g = _ops.grouped_histogram(X, [2, 2], y, 2, torch.tensor([0, 2, 2]), torch.tensor([1, 0, 1]), 2)
    assert g[0].tolist() == [[0, 0], [1, 0], [1, 0], [0, 0]]
    assert g[1].tolist() == [[0, 1], [1, 0], [1, 0], [0, 1]]


def test_choose_representation_follows_measured_costs(monkeypatch):
    key = ("cpu", "torch", "torch")
    monkeypatch.setitem(_ops._COSTS, key, {"word": 1e-12, "entry": 1e-6, "pack": 1e-12})
    assert _ops.choose_representation(10**6, [8] * 10, 2, device="cpu") == "bitmap"
    monkeypatch.setitem(_ops._COSTS, key, {"word": 1e-6, "entry": 1e-12, "pack": 1e-6})
    assert _ops.choose_representation(10**6, [8] * 10, 2, device="cpu", store_built=True) == "histogram"
    est = _ops.representation_costs(640, [2, 3], 4, costs={"word": 1.0, "entry": 10.0, "pack": 100.0})
    assert est == {"bitmap": 1.0 * 10 * 5 * 4 + 100.0 * 640 * 2, "histogram": 10.0 * 640 * 2}


@pytest.mark.parametrize("bad,match", [([[1.7, 0], [0, 1]], "1.7"), ([[np.nan, 0], [0, 1]], "NaN"),
                                       ([[1 + 1j, 0], [0, 1]], "complex")])
def test_codes_that_are_not_integers_are_refused_with_the_value_named(bad, match):
    for cls in STORES:
        with pytest.raises(ValueError, match=match):
            cls.from_codes(np.array(bad))
    assert BitmapStore.from_codes(np.array([[1.0, 0.0], [0.0, 1.0]])).n_rows == 2  # whole floats are codes
