"""A missing or infinite feature value: reported at the file line (and data row), with the cell as written."""

import numpy as np
import pytest

from gpumine.cli import main


def _csv_with(tmp_path, cell):
    """A header, a blank line among the rows and ``cell`` in column 'b' of the 11th data row (file line 13)."""
    rng = np.random.default_rng(0)
    lines = ["a,b,c"] + [",".join(f"{v:.3f}" for v in rng.random(3)) for _ in range(14)]
    lines.insert(5, "")
    lines[12] = f"0.1,{cell},0.3"
    path = tmp_path / "data.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("command", ["knn", "lof", "outliers"])
@pytest.mark.parametrize("cell, what", [("nan", "marks a missing value"), ("n/a", "marks a missing value"),
                                        ("", "is empty (a missing value)"), ("inf", "is infinite")])
def test_missing_value_names_the_file_line_and_the_cell(command, cell, what, tmp_path, capsys):
    path = _csv_with(tmp_path, cell)
    assert main([command, str(path), "-k", "2", "--device", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"gpumine {command}: error: {path}, line 13 (data row 11), column index 1 ('b'): {cell!r} {what}; "
                   "every feature cell must be a number: fill it in or drop the row")
    assert "row 10" not in err and "NaN or infinity" not in err


def test_the_label_column_is_counted_in_the_column_named(tmp_path, capsys):
    path = tmp_path / "data.csv"
    path.write_text("label,a,b\n0,1,2\n1,3,n/a\n0,5,6\n")
    assert main(["knn", str(path), "--label-column", "label", "-k", "1", "--device", "cpu", "--quiet"]) == 2
    assert "line 3 (data row 2), column index 2 ('b'): 'n/a' marks a missing value" in capsys.readouterr().err


def test_a_number_too_large_for_float32_asks_for_float64(tmp_path, capsys):
    path = tmp_path / "data.csv"
    path.write_text("1,2\n1e300,3\n4,5\n")
    with pytest.warns(RuntimeWarning):
        assert main(["knn", str(path), "-k", "1", "--device", "cpu", "--quiet"]) == 2
    assert "line 2 (data row 2), column index 0: '1e300' is beyond the range of float32; pass --dtype float64" in \
        capsys.readouterr().err
    assert main(["knn", str(path), "-k", "1", "--dtype", "float64", "--device", "cpu", "--quiet"]) == 0


def test_an_array_file_names_the_row_and_column(tmp_path, capsys):
    X = np.ones((5, 2))
    X[3, 1] = np.nan
    np.save(tmp_path / "x.npy", X)
    assert main(["outliers", str(tmp_path / "x.npy"), "-k", "1", "--top", "1", "--device", "cpu", "--quiet"]) == 2
    assert "x.npy, row 3 (0-based), feature column 1: NaN (a missing value)" in capsys.readouterr().err


def test_nan_euclidean_still_takes_missing_values(tmp_path, capsys):
    path = _csv_with(tmp_path, "n/a")
    assert main(["knn", str(path), "-k", "2", "--metric", "nan_euclidean", "--device", "cpu", "--quiet"]) == 0
