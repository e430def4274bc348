"""Stream sources and the ``gpumine stream`` command: parsing, malformed records, pipes, Ctrl-C, state."""

import argparse
import gzip
import io
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gpumine.stream._cli import _Writer, build_parser, main, register
from gpumine.stream._format import csv_rows, score_texts
from gpumine.stream._sources import iter_records
from gpumine.stream._streaming import StreamingLOF, load_detector
from gpumine.stream._synthetic import make_drifting_stream

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
       "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
CMD = [sys.executable, "-m", "gpumine.stream"]


def _csv(X) -> str:
    return "".join(",".join(repr(float(v)) for v in row) + "\n" for row in X)


# -- sources ---------------------------------------------------------------------------------------------
def test_csv_records_with_header_malformed_and_blank_lines():
    text = b"x,y,label\n1,2,a\n3,4\n5,x,b\n\n7,8,c\n9,inf,d\n\"11\",12,\"e,f\"\n"
    batches = list(iter_records(io.BytesIO(text), columns="x,y", echo="label"))
    X = np.concatenate([b.X for b in batches])
    lines = np.concatenate([b.lines for b in batches])
    errors = [e for b in batches for e in b.errors]
    echo = [e for b in batches for e in b.echo]
    np.testing.assert_array_equal(X, [[1, 2], [7, 8], [11, 12]])
    assert lines.tolist() == [2, 6, 8]
    assert [e[0] for e in errors] == [3, 4, 7]
    assert "expected 3 fields, got 2" in errors[0][1] and "not a finite number" in errors[1][1]
    assert echo == [["a"], ["c"], ["e,f"]]


def test_csv_fast_path_equals_line_by_line_and_selects_columns(tmp_path):
    X = np.random.default_rng(0).standard_normal((500, 4))
    path = tmp_path / "data.csv.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(_csv(X))
    got = np.concatenate([b.X for b in iter_records(path, columns="0,-1", header="no")])
    np.testing.assert_array_equal(got, X[:, [0, 3]])
    with pytest.raises(ValueError, match="column 'z' is a name, but the CSV has no header"):
        list(iter_records(path, columns="z"))


def test_csv_blocks_parse_like_line_by_line_with_every_kind_of_odd_line():
    from gpumine.stream._sources import CsvParser, _parse_lines

    rng = np.random.default_rng(1)
    odd = [b"", b"   ", b"1,2", b"1,2,3,4", b"nan,1,2", b"1,inf,2", b"x,1,2", b'"1",2,3', b'"1,5",2,3', b"1_0,2,3",
           b"1,,3", b"1,2,3\r", b"\r", b" 1, 2 ,3", b"1e400,0,0", b"-0,1e-5,+2"]
    lines = [b"a,b,c"]
    for i in range(3000):
        lines.append(odd[rng.integers(len(odd))] if rng.random() < 0.05 else b"%.6f,%.6f,%.6f" % tuple(rng.normal(size=3)))
    text = b"\n".join(lines) + b"\n"
    for columns in (None, "c,a"):
        batches = list(iter_records(io.BytesIO(text), columns=columns))  # 64 KiB reads: several blocks
        ref = _parse_lines(CsvParser(columns=columns), text[:-1].split(b"\n"), 0)[0]
        X = np.concatenate([b.X for b in batches])
        np.testing.assert_array_equal(X, ref.X)
        assert np.concatenate([b.lines for b in batches]).tolist() == ref.lines.tolist()
        assert [e for b in batches for e in b.errors] == ref.errors
        assert len(ref.errors) > 50 and X.shape[0] > 2800


def test_jsonl_records_objects_and_arrays():
    text = (b'{"a": 1, "b": 2.5, "id": "p"}\n{"a": 2, "b": "x"}\nnope\n{"b": 1}\n'
            b'{"a": 3, "b": 4, "id": 7}\n[1, 2]\n')
    batches = list(iter_records(io.BytesIO(text), format="jsonl", echo="id"))
    X = np.concatenate([b.X for b in batches])
    errors = [e for b in batches for e in b.errors]
    np.testing.assert_array_equal(X, [[1, 2.5], [3, 4]])
    assert [e[0] for e in errors] == [2, 3, 4, 6]
    assert "not a finite number" in errors[0][1] and "not valid JSON" in errors[1][1] and "missing key" in errors[2][1]
    assert [e for b in batches for e in b.echo] == [["p"], [7]]
    arrays = list(iter_records(io.BytesIO(b"[1, 2, 3]\n[4, 5, 6]\n"), format="jsonl", columns="0,2"))
    np.testing.assert_array_equal(arrays[0].X, [[1, 3], [4, 6]])


def test_source_errors():
    with pytest.raises(ValueError, match="format must be"):
        list(iter_records(io.BytesIO(b""), format="xml"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        list(iter_records("/no/such/file.csv"))


# -- the command, in process -------------------------------------------------------------------------------
def test_command_scores_every_record_and_matches_process(tmp_path, capsys):
    X = make_drifting_stream(700, seed=1)[0].astype(np.float64)
    text = _csv(X[:300]) + "oops,1\n" + _csv(X[300:])
    path = tmp_path / "in.csv"
    path.write_text(text)
    rc = main([str(path), "--window", "200", "-k", "10", "--device", "cpu", "--threshold", "quantile:0.9"])
    out = capsys.readouterr()
    assert rc == 0
    rows = out.out.strip().split("\n")
    assert rows[0] == "line,lof,outlier" and len(rows) == 701
    lines = [int(r.split(",")[0]) for r in rows[1:]]
    assert lines == list(range(1, 301)) + list(range(302, 702))
    scores = np.array([float(r.split(",")[1]) for r in rows[1:]])
    det = StreamingLOF(10, 200, device="cpu", threshold="quantile:0.9")
    ref = np.concatenate([det.process(X[i : i + 200].astype(np.float32))[0] for i in range(0, 700, 200)])
    np.testing.assert_allclose(scores, ref, rtol=1e-6)
    assert "line 301:" in out.err and "700 records scored in 4 windows" in out.err


def test_command_jsonl_output_and_echo(tmp_path, capsys):
    records = [{"id": f"r{i}", "x": float(i % 7), "y": float(i % 5)} for i in range(30)] + [{"id": "far", "x": 90.0, "y": 90.0}]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main([str(path), "--window", "31", "-k", "5", "--echo", "id", "--device", "cpu", "--quiet"]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.strip().split("\n")]
    assert len(out) == 31 and out[-1]["id"] == "far" and out[-1]["outlier"] is True
    assert out[-1]["lof"] == max(o["lof"] for o in out)


def test_state_resumes_where_the_last_run_stopped(tmp_path, capsys):
    X = make_drifting_stream(800, seed=2)[0]
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    first.write_text(_csv(X[:400]))
    second.write_text(_csv(X[400:]))
    whole = tmp_path / "all.csv"
    whole.write_text(_csv(X))
    state = tmp_path / "state.npz"
    common = ["--window", "200", "-k", "10", "--device", "cpu", "--quiet"]
    assert main([str(first), "--state", str(state), *common]) == 0
    assert main([str(second), "--state", str(state), "--window", "200", "--device", "cpu", "--quiet"]) == 0
    split = capsys.readouterr().out.strip().split("\n")
    assert main([str(whole), *common]) == 0
    together = capsys.readouterr().out.strip().split("\n")
    scores_split = [r.split(",")[1:] for r in split if not r.startswith("line")]
    scores_together = [r.split(",")[1:] for r in together if not r.startswith("line")]
    assert scores_split == scores_together
    assert load_detector(state).n_seen_ == 800
    # resuming with conflicting parameters is refused with a reason
    assert main([str(second), "--state", str(state), "-k", "5", "--device", "cpu"]) == 2
    assert "was saved with -k 10 but -k 5" in capsys.readouterr().err


def test_usage_errors_exit_2_with_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "missing.csv"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "does not exist" in err
    assert main(["-", "--method", "sliding", "--decay", "0.5", "--device", "cpu"]) == 2
    assert "--decay do not apply to --method sliding" in capsys.readouterr().err


def test_reader_errors_reach_the_command_and_the_package_loads_lazily(tmp_path, capsys):
    path = tmp_path / "in.csv"
    path.write_text("1,2\n3,4\n")
    assert main([str(path), "--columns", "z", "--device", "cpu"]) == 2  # raised in the reading thread
    assert "column 'z' is a name, but the CSV has no header" in capsys.readouterr().err
    code = ("import sys, gpumine.stream as s; assert 'gpumine.stream._streaming' not in sys.modules; "
            "assert s.StreamingLOF.__name__ == 'StreamingLOF' and 'gpumine.stream._streaming' in sys.modules; "
            "assert 'make_drifting_stream' in dir(s)\n"
            "try:\n    s.nope\nexcept AttributeError:\n    pass\nelse:\n    raise SystemExit(1)")
    subprocess.run([sys.executable, "-c", code], env=ENV, check=True)


def test_register_adds_the_stream_command():
    parser = argparse.ArgumentParser(prog="gpumine")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    args = parser.parse_args(["stream", "-", "--window", "64", "-k", "7", "--format", "jsonl", "--state", "s.npz"])
    assert args.window_size == 64 and args.n_neighbors == 7 and args.format == "jsonl" and callable(args.func)
    assert "--max-latency" in build_parser().format_help()


def _float32_scores(rng, n, low=-4.5, high=9.5):
    """Float32 values spread over the decades around [1e-4, 1e9), plus the float32 neighbours
    of each power of ten there (where the exponent and a rounding carry change)."""
    x = (10.0 ** rng.uniform(low, high, n)).astype(np.float32)
    edges = []
    for k in range(-4, 10):
        for direction in (np.float32(0), np.float32(np.inf)):
            v = np.float32(10.0**k)
            for _ in range(60):
                edges.append(v)
                v = np.nextafter(v, direction)
    return np.concatenate([x, np.array(edges, np.float32)]).astype(np.float64)


def test_vectorised_output_text_is_byte_identical_to_percent_format():
    rng = np.random.default_rng(0)
    x = _float32_scores(rng, 200_000)
    inside = x[(x >= 1e-4) & (x < 9.99999950e8)]  # below the float32 that %.9g rounds up to 1e+09
    lines = rng.integers(1, 10 ** rng.integers(1, 16, inside.size), inside.size)
    flags = rng.random(inside.size) < 0.3
    inside[::997], inside[5::1009] = np.inf, np.nan
    expected = "".join("%d,%.9g,%d\n" % row for row in zip(lines.tolist(), inside.tolist(), flags.astype(int).tolist()))
    assert csv_rows(lines, inside, flags) == expected
    assert score_texts(inside) == ["%.9g" % v for v in inside.tolist()]
    integers = np.arange(1.0, 300_001.0)
    assert score_texts(integers) == ["%.9g" % v for v in integers.tolist()]
    assert csv_rows(np.array([0, 9, 10]), np.array([1.0, np.inf, 0.5]), np.array([True, False, True])) == "0,1,1\n9,inf,0\n10,0.5,1\n"
    # what %.9g writes in exponent notation, float64 scores and -inf are left to Python
    for scores in ([5e-5], [1e9], [np.float32(999999968.0)], [0.0], [0.1], [1.5, -np.inf], [-2.0]):
        assert csv_rows(np.ones(len(scores), np.int64), np.array(scores, np.float64), np.zeros(len(scores), bool)) is None
        assert score_texts(np.array(scores, np.float64)) is None
    assert csv_rows(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, bool)) is None


@pytest.mark.parametrize("fmt, echo", [("csv", False), ("csv", True), ("jsonl", False), ("jsonl", True)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_writer_output_is_the_per_record_format(fmt, echo, dtype):
    rng = np.random.default_rng(1)
    n = 3000
    scores = (0.5 + rng.gamma(2.0, 0.4, n)).astype(dtype).astype(np.float64)
    scores[::401], scores[7::577] = np.inf, np.nan
    lines = np.arange(1, n + 1, dtype=np.int64) + np.repeat([0, 5, 90_000], [1000, 1000, 1000])
    flags = scores > 1.5
    echoes = [[f"r{i}", "a,b" if i % 250 == 0 else 'q"t' if i % 333 == 0 else "x"] for i in range(n)] if echo else None
    out = io.StringIO()
    writer = _Writer(out, fmt, ["id", "tag"] if echo else [])
    for start in range(0, n, 1024):
        window = slice(start, start + 1024)
        writer.write(lines[window], scores[window], flags[window], echoes[window] if echo else None)
    expected = ["line,lof,outlier" + (",id,tag" if echo else "")] if fmt == "csv" else []
    for i in range(n):
        s, f = scores[i], bool(flags[i])
        text = format(s, ".9g") if np.isfinite(s) else ("inf" if s > 0 else "nan")
        if fmt == "csv":
            cells = ['"' + v.replace('"', '""') + '"' if any(c in v for c in ',"') else v for v in echoes[i]] if echo else []
            expected.append(",".join([str(lines[i]), text, str(int(f))] + cells))
        else:
            extra = "".join(f", {json.dumps(k)}: {json.dumps(v)}" for k, v in zip(["id", "tag"], echoes[i])) if echo else ""
            lof = "null" if text in ("inf", "nan") else text
            expected.append(f'{{"line": {lines[i]}, "lof": {lof}, "outlier": {"true" if f else "false"}{extra}}}')
    assert out.getvalue() == "\n".join(expected) + "\n"


def test_help_and_usage_errors_start_without_torch_or_numpy():
    code = ("import sys, runpy\n"
            "for argv in (['--help'], ['-', '--window', '0']):\n"
            "    sys.argv = ['gpumine.stream', *argv]\n"
            "    try:\n        runpy.run_module('gpumine.stream', run_name='__main__')\n"
            "    except SystemExit:\n        pass\n"
            "loaded = [m for m in ('torch', 'numpy', 'pandas') if m in sys.modules]\n"
            "assert not loaded, loaded\n")
    proc = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "--max-latency" in proc.stdout and "--window: must be a positive integer" in proc.stderr


# -- the command as a process on a pipe ---------------------------------------------------------------------
def _read_lines(proc, n, timeout=60.0):
    """Read n lines from proc.stdout, failing if they do not come within timeout."""
    got = []
    deadline = time.monotonic() + timeout
    buf = b""
    fd = proc.stdout.fileno()
    while len(got) < n:
        left = deadline - time.monotonic()
        assert left > 0, f"only {len(got)} of {n} lines arrived: {got}"
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        assert chunk, f"output ended after {got}"
        buf += chunk
        *complete, buf = buf.split(b"\n")
        got.extend(line.decode() for line in complete)
    assert buf == b""
    return got


def test_pipe_that_stays_open_gets_answers_per_window(tmp_path):
    rows = make_drifting_stream(10, seed=3)[0]
    proc = subprocess.Popen([*CMD, "-", "--window", "4", "-k", "2", "--device", "cpu", "--quiet"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    try:
        for row in rows[:4]:  # a slow writer: one record at a time, the pipe stays open
            proc.stdin.write(_csv([row]).encode())
            proc.stdin.flush()
            time.sleep(0.05)
        first = _read_lines(proc, 5)  # header + the first window, before the input ends
        assert first[0] == "line,lof,outlier" and [r.split(",")[0] for r in first[1:]] == ["1", "2", "3", "4"]
        proc.stdin.write(_csv(rows[4:6]).encode())
        proc.stdin.write(b"bad,record\n")
        proc.stdin.close()
        rest = proc.stdout.read().decode().strip().split("\n")
        assert [r.split(",")[0] for r in rest] == ["5", "6"]  # the final partial window
        assert proc.wait(timeout=60) == 0
        assert "line 7:" in proc.stderr.read().decode()
    finally:
        proc.kill()


def test_ctrl_c_scores_the_partial_window_and_saves_state(tmp_path):
    rows = make_drifting_stream(10, seed=4)[0]
    state = tmp_path / "state.npz"
    proc = subprocess.Popen([*CMD, "-", "--window", "4", "-k", "2", "--device", "cpu", "--state", str(state)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    try:
        proc.stdin.write(_csv(rows[:6]).encode())
        proc.stdin.flush()
        assert len(_read_lines(proc, 5)) == 5  # the full window is out; 2 records wait in a partial window
        time.sleep(0.3)  # let the reader block on the open pipe
        proc.send_signal(signal.SIGINT)
        rest = proc.stdout.read().decode().strip().split("\n")
        assert [r.split(",")[0] for r in rest] == ["5", "6"]
        assert proc.wait(timeout=60) == 0
        err = proc.stderr.read().decode()
        assert "stopped by Ctrl-C" in err and "Traceback" not in err
    finally:
        proc.kill()
    assert load_detector(state).n_seen_ == 6


def test_ctrl_c_while_scoring_scores_everything_read_so_far(tmp_path):
    rows = make_drifting_stream(3000, seed=6)[0]
    state = tmp_path / "state.npz"
    proc = subprocess.Popen([*CMD, "-", "--window", "500", "-k", "5", "--device", "cpu", "--state", str(state)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    try:
        proc.stdin.write(_csv(rows).encode())  # all at once; the pipe stays open
        proc.stdin.flush()
        first = _read_lines(proc, 501)
        proc.send_signal(signal.SIGINT)
        rest = proc.stdout.read().decode().strip().split("\n")
        assert proc.wait(timeout=60) == 0
        err = proc.stderr.read().decode()
        assert "stopped by Ctrl-C" in err and "Traceback" not in err
    finally:
        proc.kill()
    numbers = [int(r.split(",")[0]) for r in first[1:] + [r for r in rest if r]]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 500  # one record out per record in, in order
    assert load_detector(state).n_seen_ == len(numbers)


def test_max_latency_scores_a_partial_window_when_input_stalls():
    rows = make_drifting_stream(5, seed=5)[0]
    proc = subprocess.Popen([*CMD, "-", "--window", "1000", "-k", "2", "--device", "cpu", "--quiet", "--max-latency", "0.3"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    try:
        proc.stdin.write(_csv(rows[:3]).encode())
        proc.stdin.flush()
        got = _read_lines(proc, 4)
        assert [r.split(",")[0] for r in got[1:]] == ["1", "2", "3"]
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()


def test_gpumine_stream_through_the_main_command_exits_cleanly_with_all_output():
    # `gpumine stream` leaves with os._exit after flushing: every record must still be written
    lines = "".join(f"{i % 7},{(i * 3) % 5}\n" for i in range(50)).encode()
    proc = subprocess.run([sys.executable, "-m", "gpumine", "stream", "-", "--window", "8", "-k", "2", "--device", "cpu",
                           "--quiet"], input=lines, capture_output=True, env=ENV, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode().strip().splitlines()
    assert out[0] == "line,lof,outlier" and len(out) == 51


def test_a_stream_where_nothing_scores_fails_and_names_the_column_flag(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("a,b,name\n1,2,x\n3,4,y\n5,6,z\n")
    assert main([str(tmp_path / "t.csv"), "--device", "cpu"]) == 2
    assert "--columns" in capsys.readouterr().err


def test_the_default_threshold_flags_about_a_tenth_and_says_so(tmp_path, capsys):
    rng = np.random.default_rng(0)
    np.savetxt(tmp_path / "u.csv", rng.random((4000, 3)), delimiter=",", header="a,b,c", comments="")
    assert main([str(tmp_path / "u.csv"), "--device", "cpu", "--window", "1000"]) == 0
    out, err = capsys.readouterr()
    flagged = np.loadtxt(out.splitlines()[1:], delimiter=",")[:, 2]
    assert 0.05 < flagged.mean() < 0.15  # uniform noise: ~10 %, not the seed rule's 30-40 %
    assert "flagged (" in err and "%)" in err
