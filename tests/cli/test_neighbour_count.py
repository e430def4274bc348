"""-k larger than the data allows: knn, lof and outliers all refuse it the same way (exit 2, in flag words)."""

import numpy as np
import pytest

from gpumine.cli import main


@pytest.fixture
def three_rows(tmp_path):
    path = tmp_path / "three.csv"
    path.write_text("1,2\n3,4\n5,6\n")
    return path


@pytest.mark.parametrize("command", ["knn", "lof", "outliers"])
def test_k_above_the_rows_is_refused_in_flag_words(command, three_rows, capsys):
    assert main([command, str(three_rows), "-k", "20", "--device", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"gpumine {command}: error: -k 20 needs at least 21 rows (a row is not its own neighbour); "
                   f"{three_rows} has 3: lower -k or add rows")


def test_lof_with_train_counts_the_train_rows(three_rows, tmp_path, capsys):
    np.save(tmp_path / "new.npy", np.zeros((50, 2)))
    assert main(["lof", str(tmp_path / "new.npy"), "--train", str(three_rows), "-k", "3", "--device", "cpu",
                 "--quiet"]) == 2
    assert "-k 3 needs at least 4 rows" in capsys.readouterr().err


def test_the_largest_k_the_rows_allow_still_runs(three_rows, capsys):
    assert main(["lof", str(three_rows), "-k", "2", "--device", "cpu", "--quiet"]) == 0
    assert main(["knn", str(three_rows), str(three_rows), "-k", "3", "--device", "cpu", "--quiet"]) == 0
    assert main(["outliers", str(three_rows), "-k", "3", "--top", "1", "--include-self", "--device", "cpu",
                 "--quiet"]) == 0


def test_outliers_top_above_the_rows_is_refused_in_flag_words(three_rows, capsys):
    assert main(["outliers", str(three_rows), "-k", "1", "--top", "10", "--device", "cpu", "--quiet"]) == 2
    assert "--top 10 asks for more outliers than" in capsys.readouterr().err
