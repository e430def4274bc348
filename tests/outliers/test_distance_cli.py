"""``gpumine outliers``: the subcommand through argparse with ``register``, and through the main CLI once registered."""

import argparse
import json

import numpy as np
import pytest

from gpumine.outliers._distance_based import top_n_outliers
from gpumine.outliers._distance_cli import register


def _parser():
    parser = argparse.ArgumentParser(prog="gpumine")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    return parser


def _run(argv):
    args = _parser().parse_args(argv)
    return args.func(args)


@pytest.fixture
def data_csv(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 3))
    X[[7, 99]] += 9.0
    label = np.zeros(400, dtype=int)
    label[[7, 99]] = 1
    path = tmp_path / "data.csv"
    with open(path, "w") as fh:
        fh.write("a,b,c,label\n")
        for row, y in zip(X, label):
            fh.write(",".join(f"{v:.17g}" for v in row) + f",{y}\n")
    return path, X.astype(np.float32), label


def test_stdout_csv_matches_the_library(data_csv, capsys):
    path, X, _ = data_csv
    assert _run(["outliers", str(path), "--top", "5", "-k", "10", "--label-column", "label", "--device", "cpu"]) == 0
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert lines[0] == "rank,index,weight,label"
    rows = [line.split(",") for line in lines[1:]]
    expected = top_n_outliers(X, 5, 10, device="cpu")
    assert [int(r[1]) for r in rows] == expected.indices.tolist()
    np.testing.assert_allclose([float(r[2]) for r in rows], expected.weights, rtol=1e-15)
    assert {int(r[1]) for r in rows if r[3] == "1"} == {7, 99}
    assert f"gpumine outliers: {expected.method}: top 5 of 400 points" in err and "% of all pairs" in err


@pytest.mark.parametrize("method", ["solving_set", "brute_force", "auto"])
def test_json_output_solving_set_file_and_options(data_csv, tmp_path, capsys, method):
    path, X, _ = data_csv
    out, solving = tmp_path / "top.json", tmp_path / "solving.csv"
    argv = ["outliers", str(path), "--label-column", "-1", "--top", "3", "-k", "4", "--method", method,
            "--include-self", "--candidates", "32", "--seed", "5", "--metric", "manhattan", "-o", str(out),
            "--solving-set", str(solving), "--device", "cpu", "--quiet"]
    assert _run(argv) == 0
    assert capsys.readouterr().err == ""
    result = json.loads(out.read_text())
    expected = top_n_outliers(X, 3, 4, method=method, include_self=True, metric="manhattan", n_candidates=32,
                              random_state=5, device="cpu")
    assert result["index"] == expected.indices.tolist() and result["rank"] == [1, 2, 3]
    np.testing.assert_allclose(result["weight"], expected.weights, rtol=1e-15)
    lines = solving.read_text().strip().splitlines()
    assert lines[0] == "index,weight,exact"
    assert [int(line.split(",")[0]) for line in lines[1:]] == expected.solving_set.tolist()
    assert len(lines) - 1 == (400 if method == "brute_force" else len(expected.solving_set))
    assert not list(tmp_path.glob(".*.tmp"))


def test_npy_and_headerless_input(tmp_path):
    X = np.random.default_rng(1).standard_normal((200, 2)).astype(np.float32)
    src = tmp_path / "x.npy"
    np.save(src, X)
    out = tmp_path / "top.npy"
    assert _run(["outliers", str(src), "--top", "4", "-k", "3", "-o", str(out), "--device", "cpu", "--quiet"]) == 0
    arr = np.load(out)
    np.testing.assert_array_equal(arr["index"], top_n_outliers(X, 4, 3, device="cpu").indices)
    csv = tmp_path / "plain.csv"
    np.savetxt(csv, X, delimiter=",")
    assert _run(["outliers", str(csv), "--header", "no", "--top", "4", "-k", "3", "-o", str(tmp_path / "t.csv"),
                 "--device", "cpu", "--quiet"]) == 0


@pytest.mark.parametrize(
    "extra, error, match",
    [
        (["--top", "3"], (OSError, ValueError), "missing"),  # DATA replaced by a missing file below
        (["-k", "500"], ValueError, "-k 500 needs at least 501 rows"),
        (["--top", "401"], ValueError, "--top 401 asks for more outliers than .* has rows \\(400\\)"),
        (["--metric", "hamming"], ValueError, "Unknown metric"),
        (["--metric", "inner_product"], ValueError, "cannot define an outlier weight"),
        (["--device", "cuda:9"], ValueError, "cuda"),
        (["-o", "{tmp}/out.xlsx"], ValueError, "unknown extension"),
        (["-o", "{tmp}/no/such/folder/out.csv"], OSError, "does not exist"),
    ],
)
def test_bad_input_raises_for_the_main_cli(data_csv, tmp_path, extra, error, match):
    """The handler raises ValueError/TypeError/OSError, which gpumine.cli.main turns into exit code 2."""
    path, _, _ = data_csv
    data = tmp_path / "missing.csv" if match == "missing" else path
    argv = ["outliers", str(data), "--label-column", "label", "--quiet", *[a.format(tmp=tmp_path) for a in extra]]
    if "--device" not in argv:
        argv += ["--device", "cpu"]
    with pytest.raises(error, match=match):
        _run(argv)
    assert not list(tmp_path.glob("out.*")) and not list(tmp_path.glob(".*.tmp"))


def test_unknown_label_column_is_reported(data_csv):
    path, _, _ = data_csv
    with pytest.raises((ValueError, KeyError), match="nope"):
        _run(["outliers", str(path), "--label-column", "nope", "--device", "cpu", "--quiet"])


@pytest.mark.parametrize("argv", [["--top", "0"], ["-k", "x"], ["--candidates", "-3"], ["--method", "nested"]])
def test_argparse_rejects_bad_values(data_csv, argv, capsys):
    path, _, _ = data_csv
    with pytest.raises(SystemExit) as info:
        _parser().parse_args(["outliers", str(path), *argv])
    assert info.value.code == 2


def test_main_cli_exit_codes_once_registered(data_csv, capsys):
    from gpumine import cli

    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    if "outliers" not in commands:
        pytest.skip("gpumine.cli does not register the outliers subcommand yet")
    path, _, _ = data_csv
    assert cli.main(["outliers", str(path), "--label-column", "label", "-k", "5", "--device", "cpu", "--quiet"]) == 0
    assert cli.main(["outliers", str(path), "--label-column", "label", "-k", "5000", "--device", "cpu"]) == 2
    assert "gpumine outliers: error: -k 5000 needs at least 5001 rows" in capsys.readouterr().err
