"""An explicit bitmap / bit-slice representation on the CPU is slower than the histogram for the same tree:
the estimator warns once per fit, naming the faster choice, and ``gpumine tree`` says so in its own words."""

import warnings

import numpy as np
import pytest

from gpumine.counting import C45Classifier
from tests.counting.test_cli import run as _run


def _data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    return X, (X[:, 0] + X[:, 1] > 0).astype(int)


@pytest.mark.parametrize("representation", ["bitmap", "bitslice"])
def test_an_explicit_bit_representation_on_the_cpu_warns_once_naming_the_faster_one(representation):
    X, y = _data()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        slow = C45Classifier(representation=representation, device="cpu").fit(X, y)
    mine = [w for w in caught if "representation=" in str(w.message)]
    assert len(mine) == 1 and issubclass(mine[0].category, UserWarning)
    message = str(mine[0].message)
    assert representation in message and "'histogram'" in message and "'auto'" in message
    assert mine[0].filename == __file__  # points at the caller's fit
    fast = C45Classifier(representation="histogram", device="cpu").fit(X, y)
    assert slow.export_text() == fast.export_text()


@pytest.mark.parametrize("representation", ["auto", "histogram"])
def test_auto_and_histogram_do_not_warn(representation):
    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        C45Classifier(representation=representation, device="cpu").fit(X, y)


def test_gpumine_tree_says_it_once_in_command_line_words(tmp_path, capsys):
    X, y = _data()
    path = tmp_path / "t.csv"
    path.write_text("a,b,c,label\n" + "".join(f"{r[0]},{r[1]},{r[2]},{c}\n" for r, c in zip(X, y)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _run(["tree", str(path), "--label-column", "label", "--device", "cpu",
                     "--representation", "bitmap", "--no-tree"]) == 0
    assert not [w for w in caught if "representation=" in str(w.message)]  # not twice, not in Python words
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "warning" in line]
    assert len(lines) == 1 and lines[0].startswith("gpumine tree: warning: --representation bitmap")
    assert "--representation auto" in lines[0] and "histogram" in lines[0]
    assert _run(["tree", str(path), "--label-column", "label", "--device", "cpu", "--no-tree"]) == 0
    assert "warning" not in capsys.readouterr().err
