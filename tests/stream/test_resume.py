"""gpumine stream resumes exactly once: after kill -9 at any point, every record is in the output once
and the scores equal those of an uninterrupted run."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from gpumine.cli import main


def _write_input(path, n=12_000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    X[rng.integers(0, n, 40)] *= 8  # a few outliers
    np.savetxt(path, X, delimiter=",", header="a,b,c", comments="", fmt="%.6f")


def _command(tmp_path, *extra):
    return [sys.executable, "-m", "gpumine", "stream", str(tmp_path / "in.csv"), "--window", "500", "--state",
            str(tmp_path / "s.npz"), "-o", str(tmp_path / "out.csv"), "--checkpoint-every", "2", "--device", "cpu",
            "--quiet", *extra]


def _run_killed(tmp_path, after_lines, rng):
    """Start the stream, kill -9 it once the output holds ``after_lines`` lines (or it ends)."""
    proc = subprocess.Popen(_command(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    out = tmp_path / "out.csv"
    deadline = time.time() + 120
    while proc.poll() is None and time.time() < deadline:
        if out.exists() and out.read_bytes().count(b"\n") >= after_lines:
            time.sleep(rng.uniform(0, 0.05))  # somewhere between two windows, or inside one
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    return proc.wait(timeout=60)


def _reference(tmp_path):
    ref = tmp_path / "ref"
    ref.mkdir()
    os.link(tmp_path / "in.csv", ref / "in.csv")
    assert subprocess.run(_command(ref), capture_output=True).returncode == 0
    return (ref / "out.csv").read_text()


def _kill_and_resume(tmp_path, kills, seed):
    rng = np.random.default_rng(seed)
    codes = [_run_killed(tmp_path, int(rng.integers(200, 11_000)), rng) for _ in range(kills)]
    assert -signal.SIGKILL in codes  # at least one run was killed mid-stream
    done = subprocess.run(_command(tmp_path), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return (tmp_path / "out.csv").read_text()


def test_kill_9_then_resume_gives_every_record_once_with_the_uninterrupted_scores(tmp_path):
    _write_input(tmp_path / "in.csv")
    resumed = _kill_and_resume(tmp_path, kills=2, seed=1)
    lines = resumed.splitlines()
    assert lines[0] == "line,lof,outlier" and lines.count("line,lof,outlier") == 1
    numbers = [int(row.split(",")[0]) for row in lines[1:]]
    assert numbers == list(range(2, 12_002))  # input lines 2.. (line 1 is the header): each once, in order
    assert resumed == _reference(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(10))
def test_kill_9_at_random_points_many_times(tmp_path, seed):
    _write_input(tmp_path / "in.csv", seed=seed)
    assert _kill_and_resume(tmp_path, kills=4, seed=seed) == _reference(tmp_path)


def test_a_resumed_run_on_the_same_input_skips_what_is_done_and_says_so(tmp_path, capsys):
    _write_input(tmp_path / "in.csv", n=3000)
    argv = [str(a) for a in _command(tmp_path)[3:] if a != "--quiet"]
    assert main(argv) == 0
    first = (tmp_path / "out.csv").read_text()
    capsys.readouterr()
    assert main(argv) == 0
    assert "resuming after input line 3001" in capsys.readouterr().err
    assert (tmp_path / "out.csv").read_text() == first  # nothing learned twice, nothing written twice
    from gpumine.stream import load_detector

    assert load_detector(tmp_path / "s.npz").n_seen_ == 3000


def test_a_new_input_with_an_old_state_continues_learning(tmp_path, capsys):
    _write_input(tmp_path / "in.csv", n=2000)
    argv = [str(a) for a in _command(tmp_path)[3:] if a != "--quiet"]
    assert main(argv) == 0
    _write_input(tmp_path / "in.csv", n=1000, seed=5)  # another file at the same path
    capsys.readouterr()
    assert main(argv) == 0
    assert "saved on another input" in capsys.readouterr().err
    from gpumine.stream import load_detector

    assert load_detector(tmp_path / "s.npz").n_seen_ == 3000
