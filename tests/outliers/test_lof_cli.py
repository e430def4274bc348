"""``gpumine lof``: the command handler registered on a parser, against the estimator."""

import argparse

import numpy as np
import pytest

from gpumine.outliers import _lof_cli
from gpumine.outliers._lof_estimator import LocalOutlierFactor


def _run(argv):
    parser = argparse.ArgumentParser(prog="gpumine")
    sub = parser.add_subparsers(dest="command")
    _lof_cli.register(sub)
    args = parser.parse_args(["lof", *argv])
    return args.func(args)


def _data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.standard_normal((n - 5, 3)), rng.uniform(-8, 8, (5, 3))])


def test_lof_command_writes_scores_equal_to_the_estimator(tmp_path, capsys):
    X = _data()
    y = np.r_[np.zeros(295, int), np.ones(5, int)]
    path = tmp_path / "data.csv"
    np.savetxt(path, np.c_[X, y], delimiter=",", fmt="%.17g")
    assert _run([str(path), "-k", "15", "--label-column", "-1", "--header", "no", "--device", "cpu", "--float64"]) == 0
    out = capsys.readouterr()
    rows = out.out.strip().split("\n")
    assert rows[0] == "lof,outlier,label" and len(rows) == 301
    got = np.array([[float(v) for v in r.split(",")] for r in rows[1:]])
    ref = LocalOutlierFactor(15, device="cpu").fit(X)
    np.testing.assert_allclose(got[:, 0], ref.outlier_scores_, rtol=1e-8)
    np.testing.assert_array_equal(got[:, 1], (ref.fit_predict(X) == -1).astype(int))
    assert "ROC-AUC=" in out.err


def test_lof_command_novelty_mode_and_output_file(tmp_path, capsys):
    train, new = _data(seed=1), _data(n=40, seed=2)
    np.save(tmp_path / "train.npy", train)
    np.save(tmp_path / "new.npy", new)
    out = tmp_path / "scores.json"
    assert _run([str(tmp_path / "new.npy"), "--train", str(tmp_path / "train.npy"), "-k", "10", "--device", "cpu",
                 "-o", str(out), "--quiet"]) == 0
    import json

    result = json.loads(out.read_text())
    ref = LocalOutlierFactor(10, novelty=True, device="cpu").fit(train.astype(np.float32))
    np.testing.assert_allclose(result["lof"], -ref.score_samples(new.astype(np.float32)), rtol=1e-6)
    assert capsys.readouterr().err == ""


def test_lof_command_bad_arguments():
    with pytest.raises(SystemExit):
        _run(["x.csv", "--contamination", "0.9"])
    with pytest.raises(FileNotFoundError):
        _run(["/no/such.csv", "--device", "cpu"])
