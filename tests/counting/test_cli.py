"""The nb / tree / itemsets subcommands, driven through argparse as the main CLI does."""

import argparse

import pytest

from gpumine.counting._cli import register

WEATHER = """outlook,temperature,humidity,windy,play
sunny,85,85,FALSE,no
sunny,80,90,TRUE,no
overcast,83,86,FALSE,yes
rainy,70,96,FALSE,yes
rainy,68,80,FALSE,yes
rainy,65,70,TRUE,no
overcast,64,65,TRUE,yes
sunny,72,95,FALSE,no
sunny,69,70,FALSE,yes
rainy,75,80,FALSE,yes
sunny,75,70,TRUE,yes
overcast,72,90,TRUE,yes
overcast,81,75,FALSE,yes
rainy,71,91,TRUE,no
"""


def run(argv):
    parser = argparse.ArgumentParser(prog="gpumine")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.fixture
def weather(tmp_path):
    p = tmp_path / "weather.csv"
    p.write_text(WEATHER)
    return p


def test_tree_prints_j48_tree_and_accuracy(weather, tmp_path, capsys):
    out = tmp_path / "pred.csv"
    assert run(["tree", str(weather), str(weather), "--label-column", "play", "--device", "cpu",
                "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "|   humidity <= 75: yes (2.0)" in text
    assert "test accuracy: 1.0000 (14 rows)" in text
    lines = out.read_text().splitlines()
    assert lines[0] == "prediction" and len(lines) == 15
    assert not list(tmp_path.glob(".gpumine-*"))  # no temporary file left behind


def test_nb_accuracy_and_label_by_index(weather, capsys):
    assert run(["nb", str(weather), str(weather), "--label-column", "-1", "--device", "cpu"]) == 0
    assert "test accuracy:" in capsys.readouterr().out


def test_nb_unseen_category_is_a_usage_error(weather, tmp_path, capsys):
    test = tmp_path / "test.csv"
    test.write_text(WEATHER.replace("overcast,83", "foggy,83"))
    assert run(["nb", str(weather), str(test), "--label-column", "play", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "foggy" in err and "--handle-unknown" in err and len(err.strip().splitlines()) == 1
    assert run(["nb", str(weather), str(test), "--label-column", "play", "--device", "cpu",
                "--handle-unknown", "ignore"]) == 0


def test_bad_inputs_exit_2_with_one_line(weather, tmp_path, capsys):
    assert run(["tree", str(tmp_path / "missing.csv"), "--label-column", "play"]) == 2
    assert run(["tree", str(weather), "--label-column", "nope", "--device", "cpu"]) == 2
    assert run(["tree", str(weather), "--label-column", "play", "--categorical", "zzz", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("gpumine tree: error:") for line in err)


def test_itemsets_baskets_and_onehot(tmp_path, capsys):
    b = tmp_path / "b.txt"
    b.write_text("milk bread\nbread butter\nmilk bread butter\nmilk\n")
    out = tmp_path / "fi.csv"
    rules = tmp_path / "rules.csv"
    assert run(["itemsets", str(b), "--min-support", "0.5", "--rules", "--min-threshold", "0.6", "--device", "cpu",
                "--output", str(out), "--rules-output", str(rules)]) == 0
    text = capsys.readouterr().out
    assert "5 frequent itemsets" in text and "4 rules" in text
    assert "0.5,bread butter" in out.read_text()
    assert rules.read_text().startswith("antecedents,consequents")
    oh = tmp_path / "oh.csv"
    oh.write_text("milk,bread,butter\n1,1,0\n0,1,1\n1,1,1\n1,0,0\n")
    assert run(["itemsets", str(oh), "--min-support", "0.5", "--device", "cpu"]) == 0
    assert "5 frequent itemsets" in capsys.readouterr().out
    assert run(["itemsets", str(b), "--min-support", "3"]) == 2
    assert run(["itemsets", str(tmp_path / "none.txt"), "--min-support", "0.5"]) == 2


def test_tree_unseen_category_is_a_usage_error(weather, tmp_path, capsys):
    test = tmp_path / "test.csv"
    test.write_text(WEATHER.replace("overcast,83", "foggy,83"))
    assert run(["tree", str(weather), str(test), "--label-column", "play", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "'foggy'" in err and "'outlook'" in err and "--handle-unknown missing" in err
    assert len(err.strip().splitlines()) == 1
    assert run(["tree", str(weather), str(test), "--label-column", "play", "--device", "cpu",
                "--handle-unknown", "missing", "--no-tree"]) == 0
    assert "test accuracy:" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["nb", "tree"])
def test_empty_class_labels(command, weather, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text(WEATHER.replace("rainy,68,80,FALSE,yes", "rainy,68,80,FALSE,"))
    assert run([command, str(bad), "--label-column", "play", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "label column 'play' is empty in 1 of 14 training rows" in err[0]
    assert "row 4" in err[0] and "fill in or drop" in err[0]
    # in the test file an empty label only leaves that row out of the accuracy
    assert run([command, str(weather), str(bad), "--label-column", "play", "--device", "cpu"]) == 0
    assert "(13 rows; 1 rows without a label left out)" in capsys.readouterr().out


def test_too_many_categories(tmp_path, capsys, monkeypatch):
    import gpumine.counting.tree._encoding as c45
    import gpumine.counting._encode as enc

    # the real limit is 32768 levels; a small one keeps the file small
    monkeypatch.setattr(enc, "MAX_LEVELS", 20)
    monkeypatch.setattr(c45, "MAX_NOMINAL_VALUES", 20)
    p = tmp_path / "ids.csv"
    p.write_text("id,color,label\n" + "".join(f"id{i},{'rgb'[i % 3]},{'ab'[i % 2]}\n" for i in range(30)))
    assert run(["nb", str(p), "--label-column", "label", "--device", "cpu"]) == 2
    assert run(["tree", str(p), "--label-column", "label", "--device", "cpu"]) == 2
    assert run(["tree", str(p), "--label-column", "label", "--device", "cpu", "--categorical", "id"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3
    assert all("column 'id' has 30 distinct values, more than the 20" in line for line in err)
    assert "drop the column" in err[0] and "categories a feature may have" in err[0]
    assert "values a nominal split may have" in err[1] and "--categorical" in err[2]
