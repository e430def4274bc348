"""Every Triton kernel of gpumine.counting against its torch twin on irregular shapes.

Run in a process where Triton can run: on a CUDA device, or on the CPU with
``TRITON_INTERPRET=1`` set *before* triton is imported (that is why the CPU test
runs this file in a subprocess: ``python tests/counting/triton_cases.py cpu``).
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from gpumine.counting import BitmapStore, BitSliceStore
from gpumine.counting import _ops

# (rows, cardinalities): sizes not multiples of 64 or of the tiles, a single row, one-level columns
SHAPES = [
    (1, [1, 3]),
    (63, [2, 5, 1]),
    (64, [17, 4]),
    (200, [3, 33, 2, 9]),
    (1000, [5, 17, 3, 64, 2]),
]


def _data(n, cards, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, cards, size=(n, len(cards)))


def _rand_words(shape, seed, device):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-(2**63), 2**63 - 1, shape, generator=g, dtype=torch.int64).to(device)


def case_and_count_matrix(device):
    for seed, (na, nr, nw) in enumerate([(1, 1, 1), (17, 3, 5), (33, 20, 70), (5, 40, 3), (0, 3, 4), (2, 2, 257)]):
        A = _rand_words((na, nw), seed, device)
        R = _rand_words((nr, nw), seed + 100, device)
        a = _ops.and_count_matrix(A, R, backend="torch")
        b = _ops.and_count_matrix(A, R, backend="triton")
        assert torch.equal(a, b), ("and_count_matrix", na, nr, nw)


def case_store_ops(device):
    for seed, (n, cards) in enumerate(SHAPES):
        X = _data(n, cards, seed)
        labels = torch.as_tensor(X[:, 0], device=device)
        mask = torch.as_tensor(np.random.default_rng(seed).random(n) < 0.6, device=device)
        for cls in (BitmapStore, BitSliceStore):
            s = cls.from_codes(X, cards, device=device)
            # contingency: all attributes x class in one launch, with and without mask
            for m in (None, mask):
                a = _ops.contingency_tables(s, labels, mask=m, backend="torch")
                b = _ops.contingency_tables(s, labels, mask=m, backend="triton")
                assert torch.equal(a, b), ("contingency_tables", cls.__name__, n, cards)
            # patterns: element and co-occurrence counts, batched
            rng = np.random.default_rng(seed + 7)
            P = 37
            c1 = rng.integers(0, len(cards), P)
            c2 = rng.integers(0, len(cards), P)
            v1 = np.array([rng.integers(0, cards[c]) for c in c1])
            v2 = np.array([rng.integers(0, cards[c]) for c in c2])
            c2[::5] = -1
            pats = np.stack([c1, v1, c2, v2], 1)
            for m in (None, mask):
                a = _ops.pattern_counts(s, pats, m, backend="torch")
                b = _ops.pattern_counts(s, pats, m, backend="triton")
                assert torch.equal(a, b), ("pattern_counts", cls.__name__, n, cards)
            # ranges (bit-slice comparison logic on BitSliceStore)
            lo = np.array([rng.integers(-1, cards[c] + 1) for c in c1])
            hi = np.array([rng.integers(-1, cards[c] + 2) for c in c1])
            ranges = np.stack([c1, lo, hi], 1)
            for m in (None, mask):
                a = _ops.range_counts(s, ranges, m, backend="torch")
                b = _ops.range_counts(s, ranges, m, backend="triton")
                assert torch.equal(a, b), ("range_counts", cls.__name__, n, cards)


def case_bitslice_level_counts(device):
    for seed, (nb, nl, nr, nw) in enumerate([(1, 2, 1, 1), (3, 5, 4, 9), (6, 64, 3, 70), (4, 9, 17, 2)]):
        sl = _rand_words((nb, nw), seed, device)
        R = _rand_words((nr, nw), seed + 50, device)
        a = _ops.bitslice_level_counts(sl, nl, R, backend="torch")
        b = _ops.bitslice_level_counts(sl, nl, R, backend="triton")
        assert torch.equal(a, b), ("bitslice_level_counts", nb, nl, nr, nw)


def case_histogram(device):
    """Triton histogram on integer codes == torch bincount: irregular shapes, dtypes, weights, groups, empty input."""
    from gpumine.counting import _triton

    # (rows, cardinalities, classes): one row, a one-level column, sizes off the tiles, > 32 columns
    shapes = [(1, [1, 3], 2), (63, [2, 5, 1], 3), (129, [17, 4], 1), (300, [5, 17, 3, 64, 2], 4),
              (20, [2, 3] * 20, 3)]
    for seed, (n, cards, C) in enumerate(shapes):
        rng = np.random.default_rng(seed)
        X = rng.integers(0, cards, size=(n, len(cards)))
        y = torch.as_tensor(rng.integers(0, C, n), device=device)
        w = torch.as_tensor(rng.random(n), device=device)
        ref = _ops.histogram_contingency(torch.as_tensor(X, device=device), cards, y, C, backend="torch")
        plain = _triton.histogram_reference(torch.as_tensor(X, device=device), cards, y, C, None, None, 1)[0]
        assert torch.equal(ref, plain)
        # every code dtype once (the interpreter runs a program in milliseconds: keep the case list short)
        for dt in (torch.int16, torch.int32, torch.int64, torch.uint8)[seed % 4:seed % 4 + 2]:
            codes = torch.as_tensor(X, device=device).to(dt)
            got = _triton.histogram_contingency(codes, cards, y, C)
            assert got.dtype == torch.int64 and torch.equal(got, ref), ("histogram", n, cards, C, dt)
        codes = torch.as_tensor(X, device=device)
        fits = max(cards) * C <= _triton.PRIVATE_MAX_BINS
        for strategy in ("atomic", "private") if fits else ("atomic",):
            got = _triton.histogram_contingency(codes, cards, y, C, strategy=strategy)
            assert torch.equal(got, ref), ("histogram", n, cards, C, strategy)
        codes = torch.as_tensor(X, device=device)
        # the public dispatch, weights (float64 sums: equal up to the order of additions)
        assert torch.equal(_ops.histogram_contingency(codes, cards, y, C, backend="triton"), ref)
        for strategy in ("auto", "atomic") if fits else ("auto",):
            a = _ops.histogram_contingency(codes, cards, y, C, w, backend="torch")
            b = _triton.histogram_contingency(codes, cards, y, C, w, strategy=strategy)
            assert b.dtype == torch.float64 and torch.allclose(a, b, rtol=1e-12, atol=1e-12), ("weights", n, strategy)
        # a non-contiguous view of the codes (strided columns) needs no copy
        wide = torch.as_tensor(np.repeat(X, 2, axis=1), device=device)[:, ::2]
        assert torch.equal(_triton.histogram_contingency(wide, cards, y, C), ref)
        # row subsets in groups, a row in several groups, with and without weights
        m = 2 * n + 3
        rows = torch.as_tensor(rng.integers(0, n, m), device=device)
        for G in (1, 3, 40) if len(cards) <= 3 else (3,):
            group = torch.as_tensor(rng.integers(0, G, m), device=device)
            wm = torch.as_tensor(rng.random(m), device=device)
            a = _ops.grouped_histogram(codes, cards, y, C, rows, group, G, backend="torch")
            b = _ops.grouped_histogram(codes, cards, y, C, rows, group, G, backend="triton")
            assert torch.equal(a, b), ("grouped", n, G)
            a = _ops.grouped_histogram(codes, cards, y, C, rows, group, G, wm, backend="torch")
            b = _ops.grouped_histogram(codes, cards, y, C, rows, group, G, wm, backend="triton")
            assert torch.allclose(a, b, rtol=1e-12, atol=1e-12), ("grouped weights", n, G)
            if G == 1:
                a = _ops.grouped_histogram(codes, cards, y, C, rows, None, 1, backend="torch")
                assert torch.equal(a, _ops.grouped_histogram(codes, cards, y, C, rows, None, 1, backend="triton"))
    # empty input: no rows, no entries, no columns
    y0 = torch.zeros(0, dtype=torch.int64, device=device)
    for w0 in (None, torch.zeros(0, dtype=torch.float64, device=device)):
        got = _ops.histogram_contingency(torch.zeros(0, 3, dtype=torch.int64, device=device), [2, 1, 4], y0, 3, w0,
                                         backend="triton")
        assert got.shape == (7, 3) and not bool(got.any())
    X = torch.ones(5, 2, dtype=torch.int64, device=device)
    y5 = torch.zeros(5, dtype=torch.int64, device=device)
    e = torch.zeros(0, dtype=torch.int64, device=device)
    got = _ops.grouped_histogram(X, [2, 2], y5, 2, e, e, 4, backend="triton")
    assert got.shape == (4, 4, 2) and not bool(got.any())
    assert _ops.histogram_contingency(X[:, :0], [], y5, 2, backend="triton").shape == (0, 2)


def case_itemsets(device):
    from gpumine.counting import frequent_itemsets

    rng = np.random.default_rng(3)
    X = rng.random((150, 9)) < rng.random(9) * 0.7
    a = frequent_itemsets(X, 0.1, device=device, backend="torch")
    b = frequent_itemsets(X, 0.1, device=device, backend="triton")
    assert dict(zip(a.itemsets, a.support)) == dict(zip(b.itemsets, b.support))


def case_estimators(device):
    from gpumine.counting import C45Classifier, CategoricalNB

    X = _data(300, [3, 7, 2, 5], 11)
    y = (X[:, 0] + X[:, 1] % 3 + np.random.default_rng(0).integers(0, 2, 300)) % 3
    w = np.random.default_rng(1).random(300)
    p1 = CategoricalNB(representation="histogram", device=device, backend="torch").fit(X, y, sample_weight=w)
    p2 = CategoricalNB(representation="histogram", device=device, backend="triton").fit(X, y, sample_weight=w)
    assert np.allclose(p1.predict_proba(X), p2.predict_proba(X), rtol=1e-12, atol=0)
    for rep in ("histogram", "bitmap", "bitslice"):
        p1 = CategoricalNB(representation=rep, device=device, backend="torch").fit(X, y).predict_proba(X)
        p2 = CategoricalNB(representation=rep, device=device, backend="triton").fit(X, y).predict_proba(X)
        assert np.array_equal(p1, p2)
        t1 = C45Classifier(representation=rep, device=device, backend="torch").fit(X, y)
        t2 = C45Classifier(representation=rep, device=device, backend="triton").fit(X, y)
        assert t1.export_text() == t2.export_text()


CASES = [case_and_count_matrix, case_bitslice_level_counts, case_store_ops, case_histogram, case_itemsets,
         case_estimators]


def run_all(device="cpu"):
    for case in CASES:
        case(device)
    return len(CASES)


if __name__ == "__main__":
    dev = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    print(f"ok: {run_all(dev)} kernel case groups match torch on {dev}")
