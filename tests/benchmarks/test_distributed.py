"""The Dask scale-out benchmark harness: its bookkeeping (fast) and a tiny CPU run end to end (slow: two clusters)."""

import json
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

pytest.importorskip("distributed")

from benchmarks import distributed as bench  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_phases_put_worker_times_on_the_host_clock_and_find_the_gaps():
    records = [
        {"key": "_search_shard-c55875cc-4181-4af1-a42b-9a769e4c512e", "worker": "w1", "nbytes": 10,
         "startstops": ({"action": "compute", "start": 11.0, "stop": 13.0},)},
        {"key": "_search_shard-521c38d1-7d13-4600-a41e-ae6b8d99c735", "worker": "w2", "nbytes": 10,
         "startstops": ({"action": "compute", "start": 10.5, "stop": 12.5},)},
        {"key": "_merge-7624f0c2-9c95-47b1-add3-c4d8fc36e7ff", "worker": "w2", "nbytes": 5,
         "startstops": ({"action": "transfer", "start": 13.5, "stop": 14.0},
                        {"action": "compute", "start": 14.0, "stop": 14.5})},
    ]
    # w1 stamps its times 1 s ahead: its task ran from 10 to 12 on the host's clock
    phases = bench._phases(records, wall0=9.5, wall1=15.0, delays={"w1": 1.0, "w2": 0.0})
    assert phases["tasks"]["search_shard"] == {"count": 2, "seconds_sum": 4.0, "seconds_max": 2.0, "output_bytes": 20}
    assert phases["tasks"]["merge"]["seconds_sum"] == 0.5
    assert (phases["transfers"], phases["transfer_seconds"]) == (1, 0.5)
    assert phases["before_first_task_s"] == 0.5 and phases["after_last_task_s"] == 0.5
    assert phases["tasks_span_s"] == 4.5 and phases["gaps_s"] == 1.0  # nothing ran from 12.5 to 13.5
    assert bench._phases([], 0.0, 1.0, {}) is None


def test_speedups_compare_with_one_process_and_the_one_worker_row_of_the_same_mode():
    variants = [
        {"variant": "one_process", "workers": None, "mode": None, "seconds": 8.0},
        {"variant": "dask_2_workers_shard", "workers": 2, "mode": "shard", "seconds": 4.0},
        {"variant": "dask_2_workers_replicate", "workers": 2, "mode": "replicate", "seconds": 2.0},
        {"variant": "dask_1_worker_replicate", "workers": 1, "mode": "replicate", "seconds": 5.0},
        {"variant": "dask_1_worker_shard", "workers": 1, "mode": "shard", "skipped": "skipped: time budget"},
    ]
    bench._speedups(variants)
    assert variants[1]["speedup_vs_one_process"] == 2.0
    assert variants[1]["dask_1_worker_reference"] == "dask_1_worker_replicate"  # the shard row did not run
    assert variants[2]["speedup_vs_dask_1_worker"] == 2.5
    assert "speedup_vs_dask_1_worker" not in variants[3] and "speedup_vs_one_process" not in variants[4]


def test_variants_and_parser():
    run = Namespace(args=Namespace(workers=2, one_worker_mode="both"))
    names = [name for name, _, _ in bench._variants(run, bench.MODES)]
    assert names == ["one_process", "dask_2_workers_shard", "dask_2_workers_replicate", "dask_1_worker_shard",
                     "dask_1_worker_replicate"]
    assert [name for name, _, _ in bench._variants(run, None)] == ["one_process", "dask_2_workers", "dask_1_worker"]
    args = bench.build_parser().parse_args(["--cases", "nb,knn"])
    assert args.cases == ["nb", "knn"] and args.rows == 4_000_000 and args.dask_memory_limits == "off"
    with pytest.raises(SystemExit):
        bench.build_parser().parse_args(["--cases", "knn,lof"])


def test_nb_data_are_codes_with_every_class():
    X, y = bench._nb_data(1000, 3, 16, 4, seed=0)
    assert X.dtype.name == "uint8" and X.shape == (1000, 3) and X.max() < 16
    assert set(y.tolist()) == {0, 1, 2, 3}


@pytest.mark.slow
def test_tiny_cpu_run_matches_one_process_in_every_case(tmp_path):
    out = tmp_path / "distributed.json"
    cmd = [sys.executable, "-m", "benchmarks.distributed", "--device", "cpu", "--rows", "2000", "--queries", "100",
           "--outlier-rows", "3000", "--nb-rows", "20000", "--nb-test-rows", "1000", "--repeats", "1",
           "--warmup-rows", "0", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [row["case"] for row in lines] == ["knn", "query", "nb", "outliers"]
    record = json.loads(out.read_text())
    assert record["cases"] == lines
    assert record["meta"]["workers"]["2"]["workers"] and record["meta"]["workers"]["1"]["workers"]
    for row in lines:
        variants = {v["variant"]: v for v in row["variants"]}
        assert variants["one_process"]["reference"]
        others = [v for name, v in variants.items() if name != "one_process"]
        assert len(others) == (3 if row["case"] in ("knn", "query") else 2)
        for v in others:
            assert v["identical"] is True, (row["case"], v)
            assert v["seconds"] > 0 and v["speedup_vs_one_process"] > 0 and v["phases"]["tasks"]


@pytest.mark.slow
def test_a_spent_time_budget_skips_the_cases_and_says_so():
    cmd = [sys.executable, "-m", "benchmarks.distributed", "--device", "cpu", "--cases", "knn,nb", "--rows", "100",
           "--time-budget", "0"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [row["case"] for row in lines] == ["knn", "nb"]
    assert all(row["skipped"].startswith("skipped: time budget") for row in lines)
