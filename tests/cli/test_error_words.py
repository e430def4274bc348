"""Errors that reach a command line user name its flags (--label-column, --delimiter, --header ...), not Python parameters."""

import numpy as np
import pytest

from gpumine.cli import main
from gpumine.cli._errors import in_flag_words
from gpumine.io import read_csv

PYTHON_WORDS = ("label_column", "delimiter=", "header=", "categorical_columns", "n_neighbors", "n_samples_fit",
                "sklearn.impute", "encoding=")


@pytest.fixture
def files(tmp_path):
    (tmp_path / "text.csv").write_text("a,b,c\n1,2,3\n4,x,6\n7,8,9\n")
    (tmp_path / "ragged.csv").write_text("a,b\n1,2\n3\n")
    (tmp_path / "header_only.csv").write_text("a,b\n")
    (tmp_path / "plain.csv").write_text("1,2,3\n4,5,6\n7,8,9\n")
    return tmp_path


@pytest.mark.parametrize("command", ["knn", "lof", "outliers"])
@pytest.mark.parametrize("file, extra, expected", [
    ("text.csv", [], "pick this column as --label-column, replace its text by numbers, or fix the file"),
    ("ragged.csv", [], "or pass the right --delimiter if the file uses another separator"),
    ("text.csv", ["--label-column", "nosuch"], "--label-column nosuch is not a column of"),
    ("text.csv", ["--label-column", "9"], "--label-column 9 is out of range"),
    ("plain.csv", ["--label-column", "a"], "has no header row (--header no, or its first line looks like data)"),
    ("header_only.csv", [], "or pass --header no if that line is data"),
    ("text.csv", ["--delimiter", "ab"], "--delimiter must be one character other than a quote or newline"),
])
def test_input_errors_name_the_flags(command, file, extra, expected, files, capsys):
    assert main([command, str(files / file), "-k", "1", "--top", "1"][: 4 if command != "outliers" else 6]
                + extra + ["--device", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert expected in err, err
    assert not any(word in err for word in PYTHON_WORDS), err


def test_the_library_keeps_its_python_words(files):
    with pytest.raises(ValueError, match="label_column='nosuch' is not a column"):
        read_csv(files / "text.csv", label_column="nosuch")
    with pytest.raises(ValueError, match="categorical_columns="):
        read_csv(files / "text.csv")


@pytest.mark.parametrize("message, expected", [
    ("min_support must be in (0, 1] (a fraction of the transactions); got 2.0",
     "--min-support must be in (0, 1] (a fraction of the transactions); got 2.0"),
    ("min_samples_leaf must be a number >= 1; got -1.0", "--min-samples-leaf must be a number >= 1; got -1.0"),
    ("max_depth must be a non-negative integer or None; got -2", "--max-depth must be a non-negative integer or None; got -2"),
    ("handle_unknown must be 'error' or 'ignore'; got 'x'", "--handle-unknown must be 'error' or 'ignore'; got 'x'"),
    ("representation='bitmap' counts rows by popcount", "--representation bitmap counts rows by popcount"),
    ("X contains NaN or infinity (1 non-finite value(s), first at row 0); remove or impute them "
     "(e.g. sklearn.impute.SimpleImputer)",
     "X contains NaN or infinity (1 non-finite value(s), first at row 0); remove or impute them"),
    ("Expected n_neighbors <= n_samples_fit, but n_neighbors = 20, n_samples_fit = 3: only 2 other points exist; "
     "lower n_neighbors or add data",
     "-k 20 needs more rows than the 3 there are: only 2 other points exist; lower -k or add data"),
    ("the n_neighbors_fit_ attribute", "the n_neighbors_fit_ attribute"),  # a longer name is not a parameter
])
def test_parameter_names_become_flags(message, expected):
    assert in_flag_words(message) == expected


def test_lof_warnings_name_the_flags(tmp_path, capsys):
    X = np.vstack([np.zeros((6, 2)), np.random.default_rng(0).random((20, 2))])
    np.save(tmp_path / "x.npy", X)
    assert main(["lof", str(tmp_path / "x.npy"), "-k", "3", "--device", "cpu", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "gpumine lof: warning:" in err and "(--duplicates distinct)" in err and "n_neighbors" not in err
