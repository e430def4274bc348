"""The CPU all-kNN benchmark: its timing order and one set end to end."""

import json
import time

import numpy as np

from benchmarks import cpu_knn


def _recorder(calls, name, seconds=0.001):
    def fn():
        calls.append(name)
        time.sleep(seconds)
        return name
    return fn


def test_quick_calls_are_timed_in_blocks_after_untimed_ones():
    calls = []
    best, results = cpu_knn._best_of([_recorder(calls, "a"), _recorder(calls, "b")], repeats=2, min_total=0.0)
    assert results == ["a", "b"] and all(0.001 <= t < 0.25 for t in best)
    # the first round times one call each; the second runs a block of each: untimed calls for
    # _SETTLE_S, then _BLOCK_CALLS timed ones
    assert calls[:2] == ["a", "b"]
    second = calls[2:]
    switch = second.index("b")
    assert set(second[:switch]) == {"a"} and set(second[switch:]) == {"b"}
    assert switch >= cpu_knn._BLOCK_CALLS + 1 and len(second) - switch >= cpu_knn._BLOCK_CALLS + 1  # one untimed call at least


def test_slow_calls_and_interleave_take_one_call_per_round():
    calls = []
    cpu_knn._best_of([_recorder(calls, "a"), _recorder(calls, "b")], repeats=3, min_total=0.0, interleave=True)
    assert calls == ["a", "b"] * 3
    calls.clear()
    cpu_knn._best_of([_recorder(calls, "a", 0.26), _recorder(calls, "b")], repeats=2, min_total=0.0)
    # one of them over _QUICK_S: both alike, no untimed calls, one timed call a round
    assert calls == ["a", "b"] * 2


def test_one_set_end_to_end(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "1_tiny.npz", X=rng.integers(0, 4, size=(120, 3)).astype(np.float64), y=np.zeros(120))
    out = tmp_path / "cpu.json"
    cpu_knn.main(["--out", str(out), "--data-dir", str(tmp_path), "--k", "5", "--repeats", "1", "--no-random"])
    report = json.loads(out.read_text())
    (record,) = report["records"]
    assert report["meta"]["timing"].startswith("blocks")
    assert (record["set"], record["rows"], record["k"]) == ("1_tiny", 120, 5)
    assert record["rows_differ_beyond_ties"] == 0 and record["gpumine_s"] > 0 and record["sklearn_s"] > 0
