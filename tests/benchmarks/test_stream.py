"""The streaming LOF benchmark harness: a quick CPU run end to end, and its markdown."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import stream as bench_stream
from helpers import shared_data_dir

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench_stream")
    argv = ["--quick", "--device", "cpu", "--out-dir", str(folder)]
    data = shared_data_dir()
    if data is not None and (data / "adbench").is_dir():
        argv += ["--data-dir", str(data / "adbench")]
    rc = bench_stream.main(argv)
    return rc, folder, json.loads((folder / "stream.json").read_text()), (folder / "stream.md").read_text()


def test_quick_run_covers_every_experiment(quick_run):
    rc, folder, results, md = quick_run
    assert rc == 0
    rows = results["rows"]
    assert {r["experiment"] for r in rows} == set(bench_stream.EXPERIMENTS)
    tp = [r for r in rows if r["experiment"] == "throughput"]
    assert tp and all(r["points_per_s"] > 0 for r in tp)
    assert {r["method"] for r in tp} == {"StreamingLOF", "SlidingWindowLOF"}
    cli = [r for r in rows if r["experiment"] == "cli"]
    assert cli and cli[0]["points_per_s"] > 0
    batch = [r for r in rows if r["experiment"] == "batch"]
    measured = [r for r in batch if r.get("max_rel_diff_vs_sklearn") is not None]
    assert measured and measured[0]["max_rel_diff_vs_sklearn"] < 1e-5
    assert any("extrapolation" in r.get("note", "") for r in batch)
    assert results["meta"]["device"] == "cpu" and results["meta"]["quick"] is True
    assert not list(folder.glob(".*.tmp"))


def test_quick_run_reports_auc_for_every_method_on_the_drifting_stream(quick_run):
    _, _, results, md = quick_run
    drift = [r for r in results["rows"] if r["experiment"] == "quality" and r["dataset"] == "drift"]
    methods = {r["method"].split(" (")[0] for r in drift}
    assert {"StreamingLOF", "SlidingWindowLOF", "batch LOF, whole data"} <= methods
    assert all(r["auc"] is not None and 0.5 < r["auc"] <= 1 for r in drift if "River" not in r["method"])
    assert "Detection quality" in md and "ROC-AUC" in md
    # the labelled ADBench streams are either scored or skipped with a reason
    for name in bench_stream.ADBENCH_STREAMS:
        rows = [r for r in results["rows"] if r["experiment"] == "quality" and r["dataset"] == name]
        assert rows and (all("skipped" in r["note"] for r in rows) or any(r["method"] for r in rows))


def test_script_help():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "stream.py"), "--help"], capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT / "src"), "PATH": ""}, timeout=120)
    assert out.returncode == 0 and "--data-dir" in out.stdout


def test_bad_arguments_exit_2(tmp_path):
    assert bench_stream.main(["--data-dir", str(tmp_path / "nope"), "--device", "cpu"]) == 2
    with pytest.raises(SystemExit):
        bench_stream.main(["--experiments", "speed"])
