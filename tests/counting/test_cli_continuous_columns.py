"""``gpumine nb`` (and ``gpumine tree`` where it treats a column as categorical) warns once, in command line words,
about feature columns that look continuous: every distinct value would be a category of its own."""

import numpy as np
import pytest

from tests.counting.test_cli import run as _run


@pytest.fixture
def floats(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    codes = rng.integers(0, 3, size=40)
    path = tmp_path / "floats.csv"
    path.write_text("x1,x2,code,label\n" + "".join(f"{a:.6f},{b:.6f},{c},{int(a > 0)}\n"
                                                   for (a, b), c in zip(X, codes)))
    return path


def _warnings(err):
    return [line for line in err.splitlines() if ": warning:" in line]


def test_nb_warns_once_naming_the_continuous_columns_and_what_to_do(floats, capsys):
    assert _run(["nb", str(floats), str(floats), "--label-column", "label",
                 "--device", "cpu"]) == 0
    out, err = capsys.readouterr()
    assert "test accuracy: 1.0000" in out  # what the warning is about: each value memorised
    lines = _warnings(err)
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("gpumine nb: warning: columns 'x1'")
    assert "'x2'" in line and "'code'" not in line and "bin" in line
    assert "categorical_columns" not in line and "header=" not in line  # command line words


def test_nb_warns_about_many_distinct_integers_too(tmp_path, capsys):
    path = tmp_path / "ids.csv"
    path.write_text("id,colour,label\n" + "".join(f"{i},{'red' if i % 2 else 'blue'},{i % 2}\n" for i in range(60)))
    assert _run(["nb", str(path), "--label-column", "label", "--device", "cpu"]) == 0
    lines = _warnings(capsys.readouterr().err)
    assert len(lines) == 1 and "'id' (60 distinct values in 60 rows)" in lines[0] and "colour" not in lines[0]


def test_nb_on_categorical_columns_does_not_warn(tmp_path, capsys):
    rng = np.random.default_rng(1)
    path = tmp_path / "cat.csv"
    path.write_text("a,b,label\n" + "".join(f"{rng.integers(5)},{'xyz'[rng.integers(3)]},{rng.integers(2)}\n"
                                            for _ in range(100)))
    assert _run(["nb", str(path), "--label-column", "label", "--device", "cpu"]) == 0
    assert not _warnings(capsys.readouterr().err)


def test_tree_warns_only_where_it_treats_the_column_as_categorical(floats, capsys):
    # C4.5 splits numeric columns at thresholds itself: no warning by default
    assert _run(["tree", str(floats), "--label-column", "label", "--device", "cpu", "--no-tree"]) == 0
    assert not _warnings(capsys.readouterr().err)
    assert _run(["tree", str(floats), "--label-column", "label", "--device", "cpu", "--no-tree",
                 "--categorical", "x1,code"]) == 0
    lines = _warnings(capsys.readouterr().err)
    assert len(lines) == 1 and lines[0].startswith("gpumine tree: warning: column 'x1' (non-integer numbers)")
    assert "--categorical" in lines[0] and "x2" not in lines[0]
