"""C45Classifier against Weka J48 output stored in tests/counting/j48_fixtures (no Weka needed)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpumine.counting import C45Classifier

FIXTURES = Path(__file__).resolve().parents[1] / "j48_fixtures"
NAMES = ["weather", "poker300", "synth_nominal", "synth_numeric_missing"]


def _read_arff(path):
    """A minimal ARFF reader: nominal attributes as str (``?`` -> None), numeric as float (``?`` -> NaN)."""
    names, numeric, rows = [], [], []
    data = False
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("%"):
            continue
        low = line.lower()
        if data:
            rows.append(line.split(","))
        elif low.startswith("@attribute"):
            m = re.match(r"@attribute\s+(\S+)\s+(.*)$", line, re.I)
            names.append(m.group(1))
            numeric.append(m.group(2).strip().lower() in ("numeric", "real", "integer"))
        elif low.startswith("@data"):
            data = True
    cols = {}
    for j, (name, num) in enumerate(zip(names, numeric)):
        vals = [r[j] for r in rows]
        if num:
            cols[name] = np.array([np.nan if v == "?" else float(v) for v in vals])
        else:
            cols[name] = pd.Series([None if v == "?" else v for v in vals], dtype=object)
    df = pd.DataFrame(cols)
    return df.iloc[:, :-1], df.iloc[:, -1].to_numpy(dtype=str)


def _read_j48(path):
    """The tree text, number of leaves and tree size of a J48 output."""
    text = path.read_text()
    tree = text.split("------------------\n", 1)[1].split("\n\nNumber of Leaves", 1)[0].strip("\n")
    leaves = int(re.search(r"Number of Leaves\s*:\s*(\d+)", text).group(1))
    size = int(re.search(r"Size of the tree\s*:\s*(\d+)", text).group(1))
    return tree, leaves, size


def _leaf_table(tree):
    """(path, class, weight, errors) per leaf: the structure of the tree without the text layout."""
    out, path = [], []
    for line in tree.splitlines():
        depth = line.count("|   ")
        body = line[4 * depth:]
        path = path[:depth]
        m = re.match(r"(.*): (\S+) \(([\d.]+)(?:/([\d.]+))?\)$", body)
        if m:
            out.append((tuple(path + [m.group(1)]), m.group(2), float(m.group(3)), float(m.group(4) or 0)))
        else:
            path.append(body)
    return out


@pytest.mark.parametrize("raising", [True, False])
@pytest.mark.parametrize("name", NAMES)
def test_c45_equals_j48(name, raising):
    X, y = _read_arff(FIXTURES / f"{name}.arff")
    tree, leaves, size = _read_j48(FIXTURES / f"{name}.{'j48' if raising else 'j48_S'}.txt")
    t = C45Classifier(device="cpu", subtree_raising=raising).fit(X, y)
    ours = t.export_text()
    # structure first (split attributes and values, leaf classes, weights, errors), then the exact text
    a, b = _leaf_table(ours), _leaf_table(tree)
    assert [r[:2] for r in a] == [r[:2] for r in b]
    assert np.allclose([r[2:] for r in a], [r[2:] for r in b], atol=0.006)
    assert ours == tree
    assert (t.n_leaves_, t.n_nodes_) == (leaves, size)


@pytest.mark.parametrize("name", ["poker300", "synth_nominal", "synth_numeric_missing"])
def test_subtree_raising_changes_these_trees(name):
    # the fixtures are chosen so that J48 and J48 -S differ: the tests above exercise raising
    assert _read_j48(FIXTURES / f"{name}.j48.txt")[0] != _read_j48(FIXTURES / f"{name}.j48_S.txt")[0]


def test_subtree_raising_is_the_default_and_predictions_follow_the_tree():
    assert C45Classifier().subtree_raising is True
    X, y = _read_arff(FIXTURES / "synth_numeric_missing.arff")
    t = C45Classifier(device="cpu").fit(X, y)
    p = t.predict_proba(X)
    assert p.shape == (len(y), 3) and np.allclose(p.sum(1), 1)
    # the raised tree predicts the training data at least nearly as well as its leaf counts say
    table = _leaf_table(t.export_text())
    train_err = sum(r[3] for r in table) / len(y)
    assert (t.predict(X) != y).mean() <= train_err + 0.05
