"""nb / tree / itemsets ``-o`` choose the format by the suffix, as knn, lof and outliers do (.csv, .json; .txt for
the text layout), and refuse a bad output path before any work."""

import json

import pytest

from tests.counting.test_cli import WEATHER
from tests.counting.test_cli import run as _run


@pytest.fixture
def weather(tmp_path):
    path = tmp_path / "weather.csv"
    path.write_text(WEATHER)
    return path


def _predict(command, weather, out):
    return _run([command, str(weather), str(weather), "--label-column", "play",
                 "--device", "cpu", "-o", str(out)] + (["--no-tree"] if command == "tree" else []))


@pytest.mark.parametrize("command", ["nb", "tree"])
def test_predictions_as_json_csv_and_text_agree(command, weather, tmp_path, capsys):
    assert _predict(command, weather, tmp_path / "p.json") == 0
    assert _predict(command, weather, tmp_path / "p.csv") == 0
    assert _predict(command, weather, tmp_path / "p.txt") == 0
    capsys.readouterr()
    predictions = json.loads((tmp_path / "p.json").read_text())["prediction"]
    assert len(predictions) == 14 and set(predictions) <= {"yes", "no"}
    csv_lines = (tmp_path / "p.csv").read_text().splitlines()
    assert csv_lines == ["prediction"] + predictions
    assert (tmp_path / "p.txt").read_text().splitlines() == csv_lines


@pytest.mark.parametrize("command", ["nb", "tree"])
def test_an_unknown_suffix_or_missing_folder_is_refused_before_the_work(command, weather, tmp_path, capsys):
    for bad, words in [(tmp_path / "p.parquet", "use one of .csv, .json, .txt"),
                       (tmp_path / "nodir" / "p.csv", "does not exist")]:
        assert _predict(command, weather, bad) == 2
        out, err = capsys.readouterr()
        assert words in err and len(err.strip().splitlines()) == 1
        assert "fit in" not in out  # nothing was fitted


def test_itemsets_and_rules_as_json(tmp_path, capsys):
    baskets = tmp_path / "b.txt"
    baskets.write_text("milk bread\nbread butter\nmilk bread butter\nmilk\n")
    items, rules = tmp_path / "fi.json", tmp_path / "rules.json"
    assert _run(["itemsets", str(baskets), "--min-support", "0.5", "--rules", "--min-threshold", "0.6",
                 "--device", "cpu", "-o", str(items), "--rules-output", str(rules)]) == 0
    capsys.readouterr()
    fi = json.loads(items.read_text())
    assert sorted(fi) == ["itemset", "support"] and len(fi["support"]) == 5
    assert dict(zip(fi["itemset"], fi["support"]))["bread butter"] == 0.5
    r = json.loads(rules.read_text())
    assert len(r["antecedents"]) == 4 and {"consequents", "confidence", "lift"} <= set(r)
    # .txt keeps the text layout these commands always wrote
    text = tmp_path / "fi.txt"
    assert _run(["itemsets", str(baskets), "--min-support", "0.5", "--device", "cpu", "-o", str(text)]) == 0
    assert text.read_text().splitlines()[0] == "support,itemset" and "0.5,bread butter" in text.read_text()


def test_itemsets_refuses_a_bad_rules_output_before_the_work(tmp_path, capsys):
    baskets = tmp_path / "b.txt"
    baskets.write_text("milk bread\nbread butter\n")
    assert _run(["itemsets", str(baskets), "--min-support", "0.5", "--rules", "--device", "cpu",
                 "--rules-output", str(tmp_path / "r.npy")]) == 2
    out, err = capsys.readouterr()
    assert "use one of .csv, .json, .txt" in err and "frequent itemsets" not in out
