"""Command-line faults end in one clear line and exit code 2 (or quietly when the output reader leaves)."""

import gzip
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from gpumine.cli import main


@pytest.fixture()
def files(tmp_path):
    rng = np.random.default_rng(0)
    pd.DataFrame(rng.random((300, 3)), columns=["a", "b", "c"]).to_csv(tmp_path / "x.csv", index=False)
    table = pd.DataFrame({"a": rng.integers(0, 3, 3000), "b": rng.integers(0, 4, 3000), "y": rng.integers(0, 2, 3000)})
    packed = gzip.compress(table.to_csv(index=False).encode())
    (tmp_path / "cut.csv.gz").write_bytes(packed[: len(packed) // 2])
    (tmp_path / "garbage.csv").write_bytes(rng.integers(0, 256, 4000, dtype=np.uint8).tobytes())
    return tmp_path


def _one_clear_line(capsys, expected):
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err)
    assert expected in err[-1], err


# nb and tree read their tables through gpumine.io, which words it its own way
@pytest.mark.parametrize("argv,expected", [
    (["nb", "{d}/cut.csv.gz", "--label-column", "y"], "the gzip stream is damaged or cut short"),
    (["tree", "{d}/cut.csv.gz", "--label-column", "y"], "the gzip stream is damaged or cut short"),
    (["itemsets", "{d}/cut.csv.gz", "--min-support", "0.5"], "the input is truncated or corrupt")])
def test_a_truncated_gzip_input_is_one_clear_error(files, capsys, argv, expected):
    assert main([a.format(d=files) for a in argv] + ["--device", "cpu"]) == 2
    _one_clear_line(capsys, expected)


@pytest.mark.parametrize("command", ["knn", "outliers", "lof"])
def test_binary_garbage_is_one_clear_error(files, capsys, command):
    assert main([command, str(files / "garbage.csv"), "--device", "cpu"]) == 2
    _one_clear_line(capsys, "error:")


def test_a_stream_scores_and_saves_what_it_read_before_a_truncated_input(files, capsys):
    state = files / "state.npz"
    out = files / "scores.csv"
    with open(out, "w") as sink:
        old = sys.stdout
        sys.stdout = sink
        try:
            code = main(["stream", str(files / "cut.csv.gz"), "--state", str(state), "--device", "cpu", "--window", "256"])
        finally:
            sys.stdout = old
    assert code == 2
    _one_clear_line(capsys, "the input is truncated or corrupt")
    scored = pd.read_csv(out)
    assert len(scored) > 0 and state.exists()
    from gpumine.stream import StreamingLOF

    assert StreamingLOF.load(state).n_seen_ == len(scored)


def test_a_closed_output_pipe_ends_quietly(files):
    # far more output than a pipe buffers, so the writer meets the closed pipe
    pd.DataFrame(np.random.default_rng(1).random((20000, 3))).to_csv(files / "big.csv", index=False)
    proc = subprocess.Popen([sys.executable, "-m", "gpumine", "knn", str(files / "big.csv"), "-k", "3", "--device", "cpu"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    proc.stdout.readline()
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "Broken pipe" not in err and "Traceback" not in err


def test_output_through_a_symlink_replaces_its_target_and_keeps_the_link(files, capsys):
    target = files / "real.csv"
    target.write_text("old\n")
    link = files / "link.csv"
    link.symlink_to(target)
    assert main(["knn", str(files / "x.csv"), "-k", "2", "--device", "cpu", "-o", str(link)]) == 0
    assert link.is_symlink() and os.path.realpath(link) == str(target)
    assert target.read_text().startswith("index_0")


def test_output_to_a_device_node_is_written_through():
    from gpumine.io import atomic_open

    with atomic_open("/dev/null") as fh:
        fh.write("discarded\n")
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


@pytest.mark.parametrize("command", [["nb", "{d}/t.csv", "{d}/t.csv", "--label-column", "y"]])
def test_counting_outputs_get_ordinary_permissions(files, command, capsys):
    pd.DataFrame({"a": [0, 1, 1, 0] * 5, "y": [0, 1, 1, 0] * 5}).to_csv(files / "t.csv", index=False)
    out = files / "pred.csv"
    assert main([a.format(d=files) for a in command] + ["--device", "cpu", "--output", str(out)]) == 0
    mask = os.umask(0)
    os.umask(mask)
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~mask)


@pytest.mark.parametrize("command", ["nb", "tree"])
def test_output_without_test_is_a_usage_error(files, command, capsys):
    pd.DataFrame({"a": [0, 1, 1, 0] * 5, "y": [0, 1, 1, 0] * 5}).to_csv(files / "t.csv", index=False)
    assert main([command, str(files / "t.csv"), "--label-column", "y", "--device", "cpu",
                 "--output", str(files / "p.csv")]) == 2
    _one_clear_line(capsys, "pass a TEST file after TRAIN")


def test_version_exits_0(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.startswith("gpumine ")


@pytest.mark.parametrize("command", [["knn", "{d}/x.csv"], ["lof", "{d}/x.csv"], ["outliers", "{d}/x.csv"],
                                     ["nb", "{d}/t.csv", "{d}/t.csv", "--label-column", "y"],
                                     ["itemsets", "{d}/t.csv", "--min-support", "0.5"]])
@pytest.mark.parametrize("output,expected", [("no/such/p.csv", "does not exist"), ("p.xlsx", "unknown extension")])
def test_outputs_are_checked_before_the_work(files, capsys, command, output, expected, monkeypatch):
    pd.DataFrame({"a": [0, 1, 1, 0] * 5, "y": [0, 1, 1, 0] * 5}).to_csv(files / "t.csv", index=False)
    monkeypatch.chdir(files)
    import gpumine.neighbors.engine._search as engine

    def no_search(*args, **kwargs):  # the work must not start
        raise AssertionError("searched before checking the output path")

    monkeypatch.setattr(engine, "knn_search", no_search)
    assert main([a.format(d=files) for a in command] + ["--device", "cpu", "-o", output]) == 2
    _one_clear_line(capsys, expected)


def test_old_spellings_still_work_and_say_what_to_use(files, capsys):
    pd.DataFrame({"a": [0, 1, 1, 0] * 5, "y": [0, 1, 1, 0] * 5}).to_csv(files / "t.csv", index=False)
    assert main(["nb", str(files / "t.csv"), "--label", "y", "--sep", ",", "--device", "cpu"]) == 0
    err = capsys.readouterr().err
    assert "--label is deprecated" in err and "use --label-column" in err and "use --delimiter" in err
    assert main(["knn", str(files / "x.csv"), "--header", "infer", "-k", "1", "--device", "cpu", "-o",
                 str(files / "o.csv")]) == 0
    assert "use --header auto" in capsys.readouterr().err
