"""The command line end to end: knn, info, demo; exit codes and atomic outputs."""

import argparse
import importlib
import json
import subprocess
import sys

import numpy as np
import pytest
from sklearn.neighbors import KNeighborsClassifier as SkKNN

from gpumine.cli import _BUILTIN_COMMANDS, _COMMAND_MODULES, build_parser, main


@pytest.fixture
def labelled_csv(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((120, 3))
    y = (X[:, 0] + 0.3 * X[:, 1] > 0).astype(int)
    train, query = tmp_path / "train.csv", tmp_path / "query.csv"
    for path, rows in ((train, slice(0, 90)), (query, slice(90, 120))):
        with open(path, "w") as f:
            f.write("a,b,c,label\n")
            for xi, yi in zip(X[rows], y[rows]):
                f.write(",".join(f"{v:.17g}" for v in xi) + f",{yi}\n")
    return train, query, X, y


def test_knn_classify_writes_predictions_and_reports_accuracy(labelled_csv, tmp_path, capsys):
    train, query, X, y = labelled_csv
    out = tmp_path / "pred.json"
    code = main(["knn", str(train), str(query), "--label-column", "label", "-k", "3", "--device", "cpu", "-o", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    expected = SkKNN(3, algorithm="brute").fit(X[:90], y[:90]).predict(X[90:])
    assert result["prediction"] == expected.tolist()
    assert result["label"] == y[90:].tolist()
    assert "accuracy=" in capsys.readouterr().err


def test_knn_neighbors_of_training_set_to_npy_and_stdout(labelled_csv, tmp_path, capsys):
    train, _, X, _ = labelled_csv
    out = tmp_path / "nn.npy"
    assert main(["knn", str(train), "--label-column", "-1", "--task", "neighbors", "-k", "2", "--device", "cpu", "-o", str(out), "--quiet"]) == 0
    arr = np.load(out)
    assert arr["index"].shape == (90, 2)
    assert not (arr["index"] == np.arange(90)[:, None]).any()
    assert main(["knn", str(train), "--label-column", "label", "--task", "neighbors", "-k", "1", "--device", "cpu", "--quiet"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "index_0,distance_0" and len(lines) == 91


def test_knn_precision_modes_give_the_same_neighbours(labelled_csv, tmp_path):
    train, _, _, _ = labelled_csv
    results = {}
    for precision in ("exact", "tf32", "bf16"):
        out = tmp_path / f"nn_{precision}.npy"
        argv = ["knn", str(train), "--label-column", "-1", "--task", "neighbors", "-k", "3", "--device", "cpu",
                "--precision", precision, "-o", str(out), "--quiet"]
        assert main(argv) == 0
        results[precision] = np.load(out)
    for precision in ("tf32", "bf16"):
        np.testing.assert_array_equal(results[precision]["index"], results["exact"]["index"])
        np.testing.assert_allclose(results[precision]["distance"], results["exact"]["distance"], rtol=1e-6)


@pytest.mark.parametrize(
    "argv, reason",
    [
        (["knn", "missing.csv"], "missing.csv"),
        (["knn", "{train}", "{query}", "--label-column", "nope"], "nope"),
        (["knn", "{train}", "{query}", "--label-column", "label", "-k", "500"], "-k 500 needs at least 500 rows"),
        (["knn", "{train}", "{query}", "--label-column", "label", "--metric", "no-such-metric"], "Unknown metric"),
        (["knn", "{train}", "--task", "classify"], "needs --label-column"),
        (["knn", "{train}", "{query}", "--label-column", "label", "--device", "cuda:7"], "cuda"),
        (["knn", "{bad}"], "line 3"),
    ],
)
def test_bad_input_exits_2_with_one_line_reason(labelled_csv, tmp_path, capsys, argv, reason):
    train, query, _, _ = labelled_csv
    bad = tmp_path / "bad.csv"
    bad.write_text("1,2,3\n4,5,6\n7,8\n")
    argv = [a.format(train=train, query=query, bad=bad) for a in argv]
    code = main(argv + ["--quiet"] if argv[0] == "knn" else argv)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and reason in err


def test_failed_run_leaves_no_partial_output(labelled_csv, tmp_path):
    train, query, _, _ = labelled_csv
    out = tmp_path / "never.csv"
    assert main(["knn", str(train), str(query), "--label-column", "label", "-k", "1000", "-o", str(out), "--quiet"]) == 2
    assert list(tmp_path.glob("never*")) == []


def test_usage_error_exit_code_via_subprocess():
    proc = subprocess.run([sys.executable, "-m", "gpumine", "knn"], capture_output=True, text=True)
    assert proc.returncode == 2 and "usage" in proc.stderr


def test_info_lists_versions(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "torch" in out and "auto device" in out


def test_demo_classifies_the_shipped_sample(capsys):
    assert main(["demo", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    gpumine_line = next(line for line in out.splitlines() if line.startswith("gpumine cpu"))
    sklearn_line = next(line for line in out.splitlines() if line.startswith("scikit-learn"))
    assert gpumine_line.split()[2] == sklearn_line.split()[2]  # same accuracy as scikit-learn


@pytest.mark.parametrize("argv", [["bench"], ["bench", "--help"], ["bench", "knn", "--quick"]])
def test_bench_points_to_the_benchmarks_folder(argv, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("gpumine bench: error: benchmarks live in the repository's benchmarks/ folder: "
                                   "python -m benchmarks.<suite> from a source checkout")
    assert "bench" not in build_parser()._subparsers._group_actions[0].choices


def test_command_table_matches_what_each_module_registers():
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert list(commands) == [*_BUILTIN_COMMANDS, *_COMMAND_MODULES]
    for module in set(_COMMAND_MODULES.values()):
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(sub)
        assert sorted(sub.choices) == sorted(c for c, m in _COMMAND_MODULES.items() if m == module)


def test_a_command_imports_only_its_own_module_and_gpumine_imports_no_torch():
    code = ("import sys, gpumine\n"
            "assert 'torch' not in sys.modules and callable(gpumine.set_config) and gpumine.__version__\n"
            "from gpumine.cli import _parser_for\n"
            "args = _parser_for(['stream', '-', '-k', '3']).parse_args(['stream', '-', '-k', '3'])\n"
            "assert args.n_neighbors == 3\n"
            "loaded = [m for m in ('torch', 'pandas', 'gpumine.counting', 'gpumine.outliers') if m in sys.modules]\n"
            "assert not loaded, loaded\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_knn_tune_needs_a_device_that_runs_the_kernel(labelled_csv, monkeypatch, capsys):
    train, _, _, _ = labelled_csv
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    code = main(["knn", str(train), "--label-column", "label", "--task", "neighbors", "--device", "cpu", "--tune", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--tune" in err and "--device cuda" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("command", ["knn", "lof", "outliers"])
def test_feature_commands_share_delimiter_and_dtype(command, tmp_path, capsys):
    # one reader and one option set: a semicolon CSV read with --delimiter, float64 with --dtype
    X = np.array([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0], [5.0, 5.0], [0.5, 0.25], [1.0, 0.0]]) + 1e8
    text = "\n".join(";".join(repr(float(v)) for v in row) for row in X) + "\n"
    (tmp_path / "semi.csv").write_text("a;b\n" + text)
    np.save(tmp_path / "x.npy", X)
    extra = {"knn": ["-k", "2"], "lof": ["-k", "2"], "outliers": ["--top", "1", "-k", "2"]}[command]
    assert main([command, str(tmp_path / "semi.csv"), "--delimiter", ";", "--dtype", "float64", "--device", "cpu",
                 "-o", str(tmp_path / "a.json"), "--quiet", *extra]) == 0
    assert main([command, str(tmp_path / "x.npy"), "--device", "cpu", "-o", str(tmp_path / "b.json"), "--quiet",
                 *extra]) == 0
    # the float64 CSV and the float64 array (auto keeps its dtype) give the same answer
    assert json.loads((tmp_path / "a.json").read_text()) == json.loads((tmp_path / "b.json").read_text())
    assert main([command, str(tmp_path / "x.npy"), "--delimiter", ";", "--device", "cpu", *extra]) == 2
    assert "--delimiter applies to CSV files" in capsys.readouterr().err


def test_lof_float64_flag_still_works_and_names_its_replacement(tmp_path, capsys):
    np.savetxt(tmp_path / "d.csv", np.random.default_rng(0).random((30, 2)), delimiter=",")
    assert main(["lof", str(tmp_path / "d.csv"), "--float64", "--device", "cpu", "--quiet", "-o",
                 str(tmp_path / "old.npy")]) == 0
    assert "use --dtype float64" in capsys.readouterr().err
    assert main(["lof", str(tmp_path / "d.csv"), "--dtype", "float64", "--device", "cpu", "--quiet", "-o",
                 str(tmp_path / "new.npy")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "old.npy"), np.load(tmp_path / "new.npy"))
