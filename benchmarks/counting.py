#!/usr/bin/env python
"""Counting-engine benchmark: bitmaps / bit-slices / histogram, NB, C4.5, itemsets.

One command runs every experiment below and writes JSON (``--out``) plus a short table:

* ``cooc_rows``     co-occurrence counts of all 256 patterns of two 16-level columns vs rows
                    (the GPU counting paper's figs 4.1-4.3): per-pattern launches vs one batched launch vs one contingency
                    pass, bitmap vs bit-slice, torch vs Triton, the histogram on codes, and NumPy
                    ("Standard-CPU": np.bincount on the row-wise codes).
* ``cooc_patterns`` the same at a fixed row count vs the number of patterns (fig 4.4).
* ``nb``            CategoricalNB fit on a USCensus1990-shaped table (2,458,285 x 68; the real file when
                    --census points at it, else a seeded generator, see ``census_table``) and on KDD Cup 99
                    10 % (real file, numeric columns binned), vs scikit-learn CategoricalNB, with the max
                    probability difference; from codes (histogram) and from resident bitmap / bit-slice stores.
* ``tree``          C45Classifier fit on PokerHand 1M (seeded generator of uniformly random hands labelled by the
                    hand rules; it reproduces the labels of the real files exactly), tested on the real test
                    prefix; and on KDD Cup 99 10 % tested on ``corrected.gz``; vs scikit-learn's entropy tree.
                    ``phases_s_auto``: one fit split into growth, pruning (host) and the rest.
* ``itemsets``      frequent itemsets vs mlxtend (identical itemsets checked) and pyfim (eclat, fpgrowth, apriori;
                    identical itemsets checked) at a support that gives >= 10,000 itemsets on a seeded
                    market-basket generator. pyfim is optional: without it its rows are skipped with a printed
                    reason (``pip install pyfim``; offline: ``pip install --no-index --find-links .whl pyfim``
                    with the sdist / wheels saved in ``.whl/``). ``speedup_vs_pyfim``: pyfim's fastest
                    algorithm's time over gpumine's.

Usage, from the repository root: ``python -m benchmarks.counting --out benchmarks/results/counting.json
[--device cuda] [--quick]`` (or ``python benchmarks/counting.py ...``).
Sections can be chosen with ``--only``. Real data is looked up in ``--data`` / ``$GPUMINE_DATA_DIR`` /
``shared/data`` beside the checkout; sections whose data is missing say so in the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

if not __package__:  # run as a script (python benchmarks/counting.py): the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import benchmarks  # noqa: E402,F401  (gpumine from src/ when it is not installed)

import torch  # noqa: E402

from gpumine.counting import (  # noqa: E402
    BitmapStore,
    BitSliceStore,
    C45Classifier,
    CategoricalNB,
    contingency_tables,
    frequent_itemsets,
    histogram_contingency,
    pattern_counts,
)
from gpumine.config import resolve_device, triton_available  # noqa: E402
from gpumine.io import atomic_open  # noqa: E402

# USCensus1990 (UCI "US Census Data (1990)", 68 categorical attributes): number of levels per attribute
# as used by the generator when the real file is absent. The 99-row sample in shared/data only gives lower
# bounds; these follow the target of "cardinalities 2-17" and the sample's observed maxima.
CENSUS_ROWS = 2_458_285


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timeit(fn, device, repeat=3, warmup=1):
    """Median wall time of ``fn()`` in seconds (device synchronised), and its last result."""
    out = None
    for _ in range(warmup):
        out = fn()
        _sync(device)
    times = []
    for _ in range(repeat):
        _sync(device)
        t = time.perf_counter()
        out = fn()
        _sync(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def _dist_version(name):
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def data_dir(arg):
    cands = [arg, os.environ.get("GPUMINE_DATA_DIR")]
    cands += [str(p / "shared" / "data") for p in Path(__file__).resolve().parents]
    for c in cands:
        if c and Path(c).is_dir():
            return Path(c)
    return None


# ----------------------------------------------------------------------------- data generators
def poker_hands(n, seed=0):
    """``n`` uniformly random 5-card hands (suit, rank) x 5 and their UCI Poker Hand class."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, 10), dtype=np.int64)
    step = 200_000
    for s in range(0, n, step):
        m = min(step, n - s)
        cards = np.argpartition(rng.random((m, 52), dtype=np.float32), 5, axis=1)[:, :5]
        rng.permuted(cards, axis=1, out=cards)
        out[s:s + m, 0::2] = cards // 13 + 1
        out[s:s + m, 1::2] = cards % 13 + 1
    return out, poker_labels(out)


def poker_labels(H):
    """Class of each hand by the poker rules of the UCI data set (0 nothing ... 9 royal flush)."""
    S, R = H[:, 0::2], H[:, 1::2]
    n = len(H)
    counts = np.zeros((n, 14), np.int64)
    np.add.at(counts, (np.repeat(np.arange(n), 5), R.ravel()), 1)
    cs = -np.sort(-counts, 1)
    top, second = cs[:, 0], cs[:, 1]
    flush = (S == S[:, :1]).all(1)
    rs = np.sort(R, 1)
    royal = (rs == np.array([1, 10, 11, 12, 13])).all(1)
    straight = (top == 1) & ((rs[:, 4] - rs[:, 0] == 4) | royal)
    y = np.zeros(n, np.int64)
    y[top == 2] = 1
    y[(top == 2) & (second == 2)] = 2
    y[top == 3] = 3
    y[straight] = 4
    y[flush] = 5
    y[(top == 3) & (second == 2)] = 6
    y[top == 4] = 7
    y[straight & flush] = 8
    y[royal & flush] = 9
    return y


def census_table(ddir, n_rows, seed=0):
    """The USCensus1990 table: the real file when present, else a seeded generator of its shape.

    The generator draws each of the 68 attributes independently with the number of levels seen in the
    99-row sample of the real file (at least 2, at most 17), skewed like survey codes (geometric-ish).
    """
    real = None
    if ddir is not None:
        for name in ("uscensus1990/USCensus1990.data.txt", "uscensus1990/USCensus1990.data.txt.gz"):
            if (ddir / name).exists():
                real = ddir / name
    if real is not None:
        import pandas as pd

        X = pd.read_csv(real).drop(columns=["caseid"]).to_numpy()[:n_rows]
        return X.astype(np.int16), f"real file {real.name}"
    cards = None
    if ddir is not None and (ddir / "uscensus1990/USCensus1990.first99rows.data.txt").exists():
        import pandas as pd

        s = pd.read_csv(ddir / "uscensus1990/USCensus1990.first99rows.data.txt").drop(columns=["caseid"])
        cards = np.clip(s.max().to_numpy() + 1, 2, 17)
    if cards is None:
        cards = np.random.default_rng(1).integers(2, 18, 68)
    rng = np.random.default_rng(seed)
    X = np.empty((n_rows, len(cards)), dtype=np.int16)
    for j, k in enumerate(cards):
        p = 0.7 ** np.arange(k)
        X[:, j] = rng.choice(int(k), size=n_rows, p=p / p.sum())
    return X, f"seeded generator, {len(cards)} attributes, cardinalities {int(cards.min())}-{int(cards.max())} (from the 99-row sample)"


def baskets(n, n_items, seed=0):
    """Seeded market-basket data (IBM-Quest-like): each transaction mixes a few frequent patterns and noise."""
    rng = np.random.default_rng(seed)
    n_pat = 200
    pats = [rng.choice(n_items, size=rng.integers(2, 7), replace=False, p=None) for _ in range(n_pat)]
    weights = rng.pareto(1.5, n_pat) + 0.05
    weights /= weights.sum()
    X = np.zeros((n, n_items), dtype=bool)
    k = rng.poisson(2, n) + 1
    choice = rng.choice(n_pat, size=int(k.sum()), p=weights)
    rows = np.repeat(np.arange(n), k)
    for r, c in zip(rows, choice):
        p = pats[c]
        keep = rng.random(len(p)) < 0.9
        X[r, p[keep]] = True
    noise = rng.random((n, n_items)) < 2.0 / n_items
    return X | noise


# ----------------------------------------------------------------------------- sections
def bench_cooc(device, rows_list, card_pairs, quick):
    res = []
    backends = ["torch"] + (["triton"] if triton_available(device) else [])
    for n, card in [(n, 16) for n in rows_list] + [(card_pairs[1], c) for c in card_pairs[0]]:
        rng = np.random.default_rng(n + card)
        X = rng.integers(0, card, size=(n, 2)).astype(np.int16)
        codes = torch.from_numpy(X).to(device)
        pats = np.array([[0, a, 1, b] for a in range(card) for b in range(card)])
        row = {"rows": n, "cardinality": card, "patterns": card * card, "device": str(device), "times_s": {}}
        t, ref = timeit(lambda: np.bincount(X[:, 0].astype(np.int64) * card + X[:, 1], minlength=card * card), torch.device("cpu"), repeat=1 if n > 4e6 else 3)
        row["times_s"]["numpy_bincount_cpu"] = t
        ref = ref.reshape(card, card)
        t, h = timeit(lambda: histogram_contingency(codes[:, :1], [card], codes[:, 1], card), device)
        row["times_s"]["histogram"] = t
        assert np.array_equal(h.cpu().numpy(), ref)
        for cls in (BitmapStore, BitSliceStore):
            t, store = timeit(lambda: cls.from_codes(codes, [card, card]), device, repeat=1)
            row["times_s"][f"{cls.kind}_build"] = t
            for be in backends:
                tag = f"{cls.kind}_{be}"
                t, c = timeit(lambda: pattern_counts(store, pats, backend=be), device)
                row["times_s"][f"{tag}_batched"] = t
                assert np.array_equal(c.cpu().numpy().reshape(card, card), ref)
                t, c = timeit(lambda: contingency_tables(store, 1, cols=[0], backend=be), device)
                row["times_s"][f"{tag}_contingency"] = t
                assert np.array_equal(c.cpu().numpy(), ref)
                if card * card <= 256 and not (quick and n > 1e6):
                    # non-batched: one launch per pattern (the paper's baseline)
                    def one_by_one():
                        return [pattern_counts(store, pats[i:i + 1], backend=be) for i in range(len(pats))]

                    t, _ = timeit(one_by_one, device, repeat=1)
                    row["times_s"][f"{tag}_per_pattern"] = t
        res.append(row)
        print(f"cooc rows={n:>10,} card={card:>3}: " + ", ".join(f"{k}={v * 1e3:.2f}ms" for k, v in row["times_s"].items()), flush=True)
    return res


def bench_nb(device, ddir, quick, peers):
    from sklearn.naive_bayes import CategoricalNB as SkNB

    out = []
    n = 200_000 if quick else CENSUS_ROWS
    X, source = census_table(ddir, n)
    y = X[:, 0].astype(np.int64)  # class: the first attribute (dAge); the 67 others are features
    F = X[:, 1:]
    entry = {"dataset": "USCensus1990-shaped", "source": source, "rows": int(F.shape[0]), "features": int(F.shape[1]),
             "label": "column 0 (dAge)", "times_s": {}}
    if peers:
        t0 = time.perf_counter()
        sk = SkNB().fit(F, y)
        entry["times_s"]["sklearn_fit_cpu"] = time.perf_counter() - t0
    codes = torch.from_numpy(F).to(device)
    yt = torch.from_numpy(y).to(device)
    t, m = timeit(lambda: CategoricalNB(device=device, representation="histogram").fit(codes, yt), device)
    entry["times_s"]["gpumine_fit_from_codes_histogram"] = t
    ncat = [int(v) + 1 for v in F.max(0)]
    for cls in (BitmapStore, BitSliceStore):
        t, store = timeit(lambda: cls.from_codes(codes, ncat), device, repeat=1)
        entry["times_s"][f"{cls.kind}_store_build"] = t
        entry[f"{cls.kind}_store_mib"] = store.memory_bytes / 2**20
        for be in ["torch"] + (["triton"] if triton_available(device) else []):
            t, m2 = timeit(lambda: CategoricalNB(device=device, backend=be).fit(store, yt), device)
            entry["times_s"][f"gpumine_fit_from_{cls.kind}_store_{be}"] = t
    if peers:
        Xt = F[:20000]
        entry["max_abs_proba_diff_vs_sklearn"] = float(np.abs(m.predict_proba(Xt) - sk.predict_proba(Xt)).max())
        entry["max_abs_proba_diff_store_vs_sklearn"] = float(np.abs(m2.predict_proba(Xt) - sk.predict_proba(Xt)).max())
        best = min(v for k, v in entry["times_s"].items() if k.startswith("gpumine_fit"))
        entry["speedup_best_vs_sklearn"] = entry["times_s"]["sklearn_fit_cpu"] / best
    out.append(entry)
    print("nb census: " + ", ".join(f"{k}={v * 1e3:.1f}ms" for k, v in entry["times_s"].items()), flush=True)
    kdd = _kdd(ddir, quick)
    if kdd is not None:
        import pandas as pd

        from gpumine.counting import encode_table

        Xtr, ytr, Xte, yte = kdd
        schema = {c: ({"kind": "numeric", "bins": 16} if pd.api.types.is_numeric_dtype(Xtr[c]) else "categorical") for c in Xtr.columns}
        table = encode_table(Xtr, schema)
        codes = table.codes.to(device)
        cls_, ycodes = np.unique(ytr, return_inverse=True)
        e = {"dataset": "KDD Cup 99 10%", "rows": len(Xtr), "times_s": {}}
        t, m = timeit(lambda: CategoricalNB(device=device).fit(codes, ycodes), device)
        e["times_s"]["gpumine_fit_from_codes"] = t
        te_codes = table.encode(Xte, handle_unknown="ignore")
        te_codes = np.where(te_codes < 0, np.asarray(m.n_categories_)[None, :], te_codes)
        m.set_params(handle_unknown="ignore")
        pred = cls_[np.asarray(m.predict(te_codes))]
        e["test_accuracy_corrected"] = float(np.mean(pred == yte))
        if peers:
            tc = table.codes.numpy().astype(np.int64)
            t0 = time.perf_counter()
            sk = SkNB(min_categories=np.asarray(m.n_categories_)).fit(tc, ycodes)
            e["times_s"]["sklearn_fit_cpu"] = time.perf_counter() - t0
            e["max_abs_proba_diff_vs_sklearn"] = float(np.abs(m.predict_proba(tc[:20000]) - sk.predict_proba(tc[:20000])).max())
        out.append(e)
        print(f"nb kdd: {e}", flush=True)
    return out


def _kdd(ddir, quick):
    if ddir is None or not (ddir / "kddcup99/kddcup.data_10_percent.gz").exists():
        return None
    import pandas as pd

    tr = pd.read_csv(ddir / "kddcup99/kddcup.data_10_percent.gz", header=None, nrows=100_000 if quick else None)
    te_path = ddir / "kddcup99/corrected.gz"
    te = pd.read_csv(te_path, header=None, nrows=50_000 if quick else None) if te_path.exists() else None
    ytr = tr.pop(41).to_numpy()
    if te is None:
        return tr, ytr, tr.iloc[:0], ytr[:0]
    yte = te.pop(41).to_numpy()
    tr.columns = te.columns = [str(c) for c in tr.columns]
    return tr, ytr, te, yte


def c45_phases(model, X, y, device):
    """Seconds of one ``model.fit(X, y)`` by part: growth (device counting and split search), pruning (host
    NumPy: collapse, subtree replacement / raising) and the rest (encoding, tables), device synchronised."""
    spent = {"grow": 0.0, "prune": 0.0}

    def timed(fn, part):
        def run(*args):
            _sync(device)
            t0 = time.perf_counter()
            try:
                return fn(*args)
            finally:
                _sync(device)
                spent[part] += time.perf_counter() - t0
        return run

    # instance attributes shadow the methods for this one fit
    model._grow = timed(model._grow, "grow")
    for name in ("_collapse", "_prune", "_prune_raising"):
        setattr(model, name, timed(getattr(model, name), "prune"))
    _sync(device)
    t0 = time.perf_counter()
    model.fit(X, y)
    _sync(device)
    total = time.perf_counter() - t0
    return {"total": total, **spent, "rest": total - spent["grow"] - spent["prune"]}


def bench_tree(device, ddir, quick, peers):
    from sklearn.tree import DecisionTreeClassifier

    out = []
    n = 100_000 if quick else 1_000_000
    X, y = poker_hands(n, seed=0)
    test = None
    if ddir is not None and (ddir / "poker_hand/poker-hand-testing.first99999.data.gz").exists():
        d = np.loadtxt(ddir / "poker_hand/poker-hand-testing.first99999.data.gz", delimiter=",", dtype=np.int64)
        test = (d[:, :10], d[:, 10], "real test prefix (99,999 rows)")
    else:
        Xt, yt = poker_hands(100_000, seed=1)
        test = (Xt, yt, "generated (seed 1)")
    Xf = X.astype(np.float64)
    for cf in (None, "all"):
        e = {"dataset": f"PokerHand generated {n:,}", "test": test[2], "attributes": "numeric" if cf is None else "nominal",
             "times_s": {}, "accuracy": {}}
        if peers and cf is None:
            t0 = time.perf_counter()
            sk = DecisionTreeClassifier(criterion="entropy", random_state=0).fit(Xf, y)
            e["times_s"]["sklearn_entropy_tree_cpu"] = time.perf_counter() - t0
            e["accuracy"]["sklearn_entropy_tree_cpu"] = float((sk.predict(test[0].astype(float)) == test[1]).mean())
        reps = ["auto", "histogram", "bitmap"] if device.type == "cuda" else ["auto"]
        for rep in reps:
            t, m = timeit(lambda: C45Classifier(categorical_features=cf, representation=rep, device=device).fit(Xf, y), device,
                          repeat=1 if quick else 2)
            e["times_s"][f"gpumine_c45_{rep}"] = t
            e["accuracy"][f"gpumine_c45_{rep}"] = float((np.asarray(m.predict(test[0].astype(float))) == test[1]).mean())
            e[f"leaves_{rep}"] = m.n_leaves_
            e[f"representations_{rep}"] = sorted(set(m.representations_))
        e["phases_s_auto"] = c45_phases(C45Classifier(categorical_features=cf, device=device), Xf, y, device)
        out.append(e)
        print(f"tree poker ({e['attributes']}): {e['times_s']} {e['accuracy']}; one fit by part "
              f"{ {k: round(v, 3) for k, v in e['phases_s_auto'].items()} }", flush=True)
    kdd = _kdd(ddir, quick)
    if kdd is not None:
        Xtr, ytr, Xte, yte = kdd
        e = {"dataset": "KDD Cup 99 10% -> corrected", "rows": len(Xtr), "times_s": {}, "accuracy": {}}
        t0 = time.perf_counter()
        m = C45Classifier(device=device, handle_unknown="missing").fit(Xtr, ytr)
        e["times_s"]["gpumine_c45_auto"] = time.perf_counter() - t0
        if len(Xte):
            e["accuracy"]["gpumine_c45_auto"] = float((np.asarray(m.predict(Xte)) == yte).mean())
        if peers:
            from sklearn.preprocessing import OrdinalEncoder

            enc = OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1)
            A = Xtr.copy()
            A[["1", "2", "3"]] = enc.fit_transform(A[["1", "2", "3"]])
            t0 = time.perf_counter()
            sk = DecisionTreeClassifier(criterion="entropy", random_state=0).fit(A, ytr)
            e["times_s"]["sklearn_entropy_tree_cpu"] = time.perf_counter() - t0
            if len(Xte):
                B = Xte.copy()
                B[["1", "2", "3"]] = enc.transform(B[["1", "2", "3"]])
                e["accuracy"]["sklearn_entropy_tree_cpu"] = float((sk.predict(B) == yte).mean())
        out.append(e)
        print(f"tree kdd: {e['times_s']} {e['accuracy']}", flush=True)
    return out


def bench_itemsets(device, quick, peers, sizes=None, target=10_000):
    """Frequent itemsets: gpumine vs pyfim (eclat, fpgrowth, apriori) and mlxtend (apriori, fpgrowth) on one host.

    The support is the highest of a few that gives at least ``target`` itemsets (the
    comparison point; ``target_reached`` says whether one did). Every peer's itemsets and supports
    are checked against gpumine's. pyfim (``import fim``) is optional: without it its rows are
    skipped with the reason in ``pyfim`` and a printed note. ``sizes``: (transactions, items).
    """
    import pandas as pd

    n, m = sizes or ((20_000, 200) if quick else (100_000, 500))
    X = baskets(n, m, seed=0)
    # the highest support (of a few) giving >= target itemsets
    chosen = None
    for s in [0.05, 0.03, 0.02, 0.015, 0.01, 0.007, 0.005, 0.003, 0.002, 0.001]:
        k = len(frequent_itemsets(X, s, device=device))
        chosen = (s, k)
        if k >= target:
            break
    s, k = chosen
    e = {"transactions": n, "items": m, "min_support": s, "itemsets": k, "target_itemsets": target,
         "target_reached": k >= target, "times_s": {}, "device": str(device)}
    if k < target:
        print(f"itemsets: no support tried gives {target:,} itemsets ({k:,} at {s}); timing that", flush=True)
    t, ours = timeit(lambda: frequent_itemsets(X, s, device=device, use_colnames=False), device, repeat=2)
    e["times_s"]["gpumine"] = t
    # the same with the bitmaps already packed on the device (data resident, as the targets are stated)
    from gpumine.counting._itemsets import transactions_to_bitmaps

    e["times_s"]["gpumine_pack_bitmaps"], _ = timeit(lambda: transactions_to_bitmaps(X, device=device), device, repeat=2)
    if peers:
        try:
            import fim  # pyfim (Borgelt's C implementations), optional
        except ImportError as exc:
            e["pyfim"] = f"skipped: not installed ({exc}); pip install pyfim"
            print(f"itemsets: pyfim rows skipped: not installed ({exc}); pip install pyfim", flush=True)
        else:
            e["pyfim"] = f"pyfim {_dist_version('pyfim')}"
            # pyfim takes transactions as item lists (built once, outside the timing)
            tracts = [np.flatnonzero(r).tolist() for r in X]
            min_count = int(np.ceil(s * n - 1e-9))  # support >= s as a fraction == count >= ceil(s * n)
            ref = {frozenset(k): c / n for k, c in zip(ours.itemsets, (ours.support * n).round().astype(int))}
            for algo in ("eclat", "fpgrowth", "apriori"):
                fn = getattr(fim, algo)
                t, r = timeit(lambda: fn(tracts, target="s", supp=-min_count, zmin=1, report="a"), torch.device("cpu"),
                              repeat=2)
                e["times_s"][f"pyfim_{algo}_cpu"] = t
                got = {frozenset(k): c / n for k, c in r}
                e[f"pyfim_{algo}_identical"] = got == ref
            e["pyfim_itemsets"] = len(r)
            best = min(("eclat", "fpgrowth", "apriori"), key=lambda a: e["times_s"][f"pyfim_{a}_cpu"])
            e["pyfim_best"] = best
            # > 1: gpumine is faster than pyfim's fastest algorithm on this host (with / without packing the bitmaps)
            e["speedup_vs_pyfim"] = e["times_s"][f"pyfim_{best}_cpu"] / e["times_s"]["gpumine"]
            print(f"itemsets: {k:,} itemsets at support {s}: gpumine {e['times_s']['gpumine']:.4f} s, pyfim {best} "
                  f"{e['times_s'][f'pyfim_{best}_cpu']:.4f} s (x{e['speedup_vs_pyfim']:.2f} for gpumine)", flush=True)
        try:
            from mlxtend.frequent_patterns import apriori, fpgrowth

            df = pd.DataFrame(X, columns=[f"i{j}" for j in range(m)])
            t0 = time.perf_counter()
            ref = apriori(df, min_support=s, use_colnames=False, low_memory=True)
            e["times_s"]["mlxtend_apriori_cpu"] = time.perf_counter() - t0
            got = frequent_itemsets(X, s, device=device, use_colnames=False)
            e["identical_to_mlxtend"] = dict(zip(got.itemsets, got.support)) == dict(zip(ref.itemsets, ref.support))
            t0 = time.perf_counter()
            fpgrowth(df, min_support=s, use_colnames=False)
            e["times_s"]["mlxtend_fpgrowth_cpu"] = time.perf_counter() - t0
        except ImportError:
            e["mlxtend"] = "not installed"
    print(f"itemsets: {e}", flush=True)
    return [e]


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.counting" if __package__ else "benchmarks/counting.py", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--device", default="auto")
    p.add_argument("--data", default=None, help="shared data folder (default: $GPUMINE_DATA_DIR or shared/data)")
    p.add_argument("--only", default="cooc,nb,tree,itemsets", help="comma list of sections")
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke test on the CPU)")
    p.add_argument("--no-peers", action="store_true", help="skip scikit-learn / mlxtend / pyfim")
    args = p.parse_args(argv)
    device = resolve_device(args.device)
    ddir = data_dir(args.data)
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    result = {
        "benchmark": "counting",
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "quick": args.quick,
        "data_dir": str(ddir) if ddir else None,
        "sections": {},
    }
    peers = not args.no_peers
    if "cooc" in sections:
        if args.quick:
            rows, pat = [100_000, 1_000_000], ([4, 16, 32], 1_000_000)
        elif device.type == "cuda":
            rows, pat = [1_000_000, 4_000_000, 16_000_000, 64_000_000], ([2, 4, 8, 16, 32, 64], 16_000_000)
        else:
            rows, pat = [1_000_000, 4_000_000], ([4, 16, 64], 4_000_000)
        result["sections"]["cooc"] = bench_cooc(device, rows, pat, args.quick)
    if "nb" in sections:
        result["sections"]["nb"] = bench_nb(device, ddir, args.quick, peers)
    if "tree" in sections:
        result["sections"]["tree"] = bench_tree(device, ddir, args.quick, peers)
    if "itemsets" in sections:
        result["sections"]["itemsets"] = bench_itemsets(device, args.quick, peers)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(out, "w") as fh:
        json.dump(result, fh, indent=2, default=float)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
