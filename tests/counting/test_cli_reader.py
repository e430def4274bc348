"""nb / tree / itemsets read their tables through gpumine.io, as the other commands do: the same delimiter
detection, gzip by its magic bytes, and errors that name the file's line."""

import gzip

import pytest

from tests.counting.test_cli import WEATHER
from tests.counting.test_cli import run as _run


def _fit(command, path, *more):
    return _run([command, str(path), str(path), "--label-column", "play", "--device", "cpu",
                 *more] + (["--no-tree"] if command == "tree" else []))


@pytest.mark.parametrize("command", ["nb", "tree"])
def test_a_tab_separated_table_is_detected(command, tmp_path, capsys):
    path = tmp_path / "weather.csv"
    path.write_text(WEATHER.replace(",", "\t"))
    assert _fit(command, path) == 0
    assert "test accuracy:" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["nb", "tree"])
def test_a_gzip_file_is_known_by_its_bytes_not_its_name(command, tmp_path, capsys):
    path = tmp_path / "weather.csv"  # compressed under its plain name, as downloads sometimes are
    path.write_bytes(gzip.compress(WEATHER.encode()))
    assert _fit(command, path) == 0
    assert "test accuracy: " in capsys.readouterr().out


@pytest.mark.parametrize("command", ["nb", "tree"])
def test_a_short_row_is_an_error_naming_its_line(command, tmp_path, capsys):
    path = tmp_path / "weather.csv"
    path.write_text(WEATHER.replace("rainy,68,80,FALSE,yes", "rainy,68,80,yes"))  # line 6, a field short
    assert _fit(command, path) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gpumine {command}: error:") and "line 6" in err[0], err


def test_cells_keep_their_kind_and_lose_surrounding_spaces(tmp_path, capsys):
    path = tmp_path / "weather.csv"
    path.write_text(WEATHER.replace(",", ", "))
    assert _run(["tree", str(path), "--label-column", "play", "--device", "cpu", "--tree", "full"]) == 0
    out = capsys.readouterr().out
    assert "outlook = overcast" in out and "humidity <= 75" in out  # text stripped, numbers numeric


def test_header_no_numbers_the_columns(tmp_path, capsys):
    path = tmp_path / "weather.csv"
    path.write_text(WEATHER.split("\n", 1)[1])
    assert _run(["nb", str(path), str(path), "--label-column", "-1", "--header", "no",
                 "--device", "cpu"]) == 0
    assert "test accuracy: " in capsys.readouterr().out


def test_itemsets_reads_a_one_hot_table_and_falls_back_to_baskets(tmp_path, capsys):
    onehot = tmp_path / "oh.csv"
    onehot.write_text("milk;bread;butter\n1;1;0\n0;1;1\n1;1;1\n1;0;0\n")  # semicolons: detected
    assert _run(["itemsets", str(onehot), "--min-support", "0.5", "--device", "cpu"]) == 0
    assert "5 frequent itemsets" in capsys.readouterr().out
    baskets = tmp_path / "b.csv"  # comma-separated baskets of different lengths are no table
    baskets.write_text("milk,bread\nbread,butter\nmilk,bread,butter\nmilk\n")
    assert _run(["itemsets", str(baskets), "--min-support", "0.5", "--device", "cpu"]) == 0
    assert "5 frequent itemsets" in capsys.readouterr().out
    assert _run(["itemsets", str(baskets), "--format", "onehot", "--min-support", "0.5", "--device", "cpu"]) == 2
    assert "line 3" in capsys.readouterr().err
