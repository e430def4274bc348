"""``gpumine tree`` prints a bounded summary of the tree by default; --tree full prints all of it (the old default),
--tree none / --no-tree none."""

import numpy as np
import pytest

from gpumine.counting import C45Classifier
from gpumine.counting._cli import TREE_SUMMARY_LINES
from tests.counting.test_cli import WEATHER
from tests.counting.test_cli import run as _run


@pytest.fixture
def big(tmp_path):
    # an unpruned tree on labels that alternate along a column: far more lines than the summary
    rng = np.random.default_rng(0)
    X = rng.integers(0, 50, size=(2000, 4))
    y = X[:, 0] % 2  # one leaf per value of a
    path = tmp_path / "big.csv"
    path.write_text("a,b,c,d,label\n" + "".join(",".join(map(str, r)) + f",{int(c)}\n" for r, c in zip(X, y)))
    full = C45Classifier(prune=False, device="cpu").fit(X.astype(float), y).export_text().split("\n")
    assert len(full) > TREE_SUMMARY_LINES + 20
    return path


def _args(path, *more):
    return ["tree", str(path), "--label-column", "label", "--device", "cpu", "--unpruned", *more]


def test_the_default_prints_a_bounded_summary_with_a_note(big, capsys):
    assert _run(_args(big)) == 0
    summary = capsys.readouterr().out.splitlines()
    assert _run(_args(big, "--tree", "full")) == 0
    full = capsys.readouterr().out.splitlines()
    tree = [line for line in full if not line.startswith(("leaves:", "tree: fit"))]
    assert len(tree) > TREE_SUMMARY_LINES + 20
    assert summary[:TREE_SUMMARY_LINES] == tree[:TREE_SUMMARY_LINES]
    note = summary[TREE_SUMMARY_LINES]
    assert note == f"... ({len(tree) - TREE_SUMMARY_LINES} more lines; --tree full prints the whole tree)"
    assert summary[TREE_SUMMARY_LINES + 1].startswith("leaves:")
    assert len(summary) == TREE_SUMMARY_LINES + 3


@pytest.mark.parametrize("flags", [["--tree", "none"], ["--no-tree"]])
def test_none_prints_no_tree(big, capsys, flags):
    assert _run(_args(big, *flags)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("leaves:") and len(out) == 2


def test_a_small_tree_is_printed_whole_without_a_note(tmp_path, capsys):

    path = tmp_path / "weather.csv"
    path.write_text(WEATHER)
    assert _run(["tree", str(path), "--label-column", "play", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "|   humidity <= 75: yes (2.0)" in out and "more line" not in out
