"""The real-data sweep harness: a CPU run end to end on tiny generated sets, and its float64 checks."""

import contextlib
import json

import numpy as np
import pytest
import torch

from benchmarks import realdata

CASES = set(realdata.CASES)


@contextlib.contextmanager
def _one_thread():
    """Run single-threaded: on a loaded CI machine, 2-thread torch/OpenMP ops on tiny inputs stall."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            yield
        else:
            with threadpool_limits(1):
                yield
    finally:
        torch.set_num_threads(threads)


def _write_sets(folder):
    rng = np.random.default_rng(7)
    folder.mkdir()
    # continuous data
    X = rng.normal(size=(90, 5))
    np.savez(folder / "1_gauss.npz", X=X, y=(rng.random(90) < 0.1).astype(np.int64))
    # integer values with exact duplicate rows (ties and k-distances of 0)
    base = rng.integers(0, 4, size=(40, 3))
    Xi = np.concatenate([base, base[:25], np.repeat(base[:1], 22, axis=0)]).astype(np.int16)
    np.savez(folder / "2_intdup.npz", X=Xi, y=np.zeros(len(Xi), dtype=np.int32))
    # more rows than --cpu-max-rows: cut to the first rows
    np.savez(folder / "10_wide.npz", X=rng.random((140, 12)).astype(np.float32), y=np.zeros(140, dtype=np.int64))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench_realdata")
    data = folder / "adbench"
    _write_sets(data)
    out, md, png = folder / "res.json", folder / "table.md", folder / "ratios.png"
    argv = ["--data", str(data), "--device", "cpu", "--repeats", "1", "--cpu-max-rows", "120",
            "--sample", "50", "--quick-below", "60", "--quick-rounds", "2", "--out", str(out), "--markdown", str(md), "--plot", str(png)]
    with _one_thread():
        rc = realdata.main(argv)
    return rc, folder, json.loads(out.read_text()), md.read_text()


def test_every_set_and_case_is_recorded_and_exact(sweep):
    rc, folder, records, _ = sweep
    assert rc == 0
    assert isinstance(records, list)
    assert {(r["set"], r["case"]) for r in records} == {(s, c) for s in ("1_gauss", "2_intdup", "10_wide") for c in CASES}
    for r in records:
        assert r["error"] is None, r
        assert r["device"] == "cpu" and r["peer"] == "sklearn"
        assert r["gpumine_s"] > 0 and r["peer_s"] > 0
        assert r["speedup"] == pytest.approx(r["peer_s"] / r["gpumine_s"])
        assert r["quick_rounds"] == 2  # every case is under --quick-below here
        assert r["gpumine_runs"] == 1 + 2 and r["peer_runs"] == 1 + 2
        if r["case"] != "lof":
            assert r["mismatched_rows"] == 0, r
            assert r["exact_rows_checked"] > 0
            assert r["max_rel_dist_err"] is not None and r["max_rel_dist_err"] < 1e-5, r
            assert r["peer_recall"] == 1.0, r  # scikit-learn computes in float64
    by = {(r["set"], r["case"]): r for r in records}
    assert by[("10_wide", "knn5")]["rows"] == 120 and by[("10_wide", "knn5")]["rows_full"] == 140
    assert by[("1_gauss", "knn20")]["exact_rows_checked"] == 50
    assert by[("2_intdup", "knn5")]["exact_rows_checked"] == 50
    assert by[("1_gauss", "knn20")]["ratio_to_uniform"] > 0
    # LOF: compared with float64 on the rows gpumine's duplicates rule leaves alone
    assert by[("1_gauss", "lof")]["mismatched_rows"] == 0 and by[("1_gauss", "lof")]["exact_rows_checked"] == 90
    assert by[("2_intdup", "lof")]["mismatched_rows"] == 0
    assert by[("2_intdup", "lof")]["n_duplicate_points"] > 0
    assert by[("1_gauss", "lof")]["peer_max_rel_score_diff"] < 1e-4
    meta = json.loads((folder / "res.meta.json").read_text())
    assert meta["device"] == "cpu" and meta["peer"] == "sklearn" and meta["cpu_max_rows"] == 120
    assert meta["quick_below"] == 60 and meta["quick_rounds"] == 2
    assert not list(folder.glob(".*.tmp"))


def test_markdown_table_and_summary(sweep):
    _, folder, records, text = sweep
    assert "| set | rows | d | knn5 speedup | knn20 speedup | LOF speedup | top10 | knn20 vs uniform | exact |" in text
    for name in ("1_gauss", "2_intdup", "10_wide"):
        assert f"| {name} |" in text
    assert "120 of 140" in text
    assert "geometric-mean speedup" in text and "gpumine mismatched rows: 0 of" in text
    assert text.count("| ok (") == 3
    # rendering the saved JSON again gives the same tables
    again = folder / "again.md"
    assert realdata.main(["--from-json", str(folder / "res.json"), "--markdown", str(again)]) == 0
    assert again.read_text() == text
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert (folder / "ratios.png").stat().st_size > 0


def test_reference_matches_brute_force_float64_with_ties():
    rng = np.random.default_rng(3)
    X = rng.integers(0, 3, size=(300, 3)).astype(np.float32) + 1000  # many exact ties, far from the origin
    rows = realdata.sample_rows(300, 60, 0)
    d, i = realdata.reference_knn(X, rows, 7, chunk_bytes=2**12)
    X64 = X.astype(np.float64)
    e = np.sqrt(((X64[None] - X64[rows][:, None]) ** 2).sum(-1))
    e[np.arange(len(rows)), rows] = np.inf
    assert np.array_equal(d, np.sort(e, axis=1)[:, :7])
    assert np.array_equal(np.take_along_axis(e, i, 1), d)  # the indices carry those distances
    assert not (i == rows[:, None]).any()
    # a swapped tie passes the check, a wrong neighbour does not
    swapped = i.copy()
    tie = np.nonzero(d[:, 0] == d[:, 1])[0][0]
    swapped[tie, [0, 1]] = swapped[tie, [1, 0]]
    assert realdata.check_knn(X, rows, d, i, swapped)["mismatched_rows"] == 0
    far = np.argmax(e[tie])
    wrong = i.copy()
    wrong[tie, -1] = far
    assert realdata.check_knn(X, rows, d, i, wrong)["mismatched_rows"] == 1
    assert realdata.knn_recall(X, rows, d, wrong) == pytest.approx(1 - 1 / wrong.size)


def test_sets_filter_and_bad_usage(tmp_path, capsys):
    data = tmp_path / "adbench"
    _write_sets(data)
    assert [p.stem for p in realdata.find_sets(data)] == ["1_gauss", "2_intdup", "10_wide"]
    assert [p.stem for p in realdata.find_sets(data, ["intdup", "1_Gauss"])] == ["2_intdup", "1_gauss"]
    with pytest.raises(ValueError, match="no set"):
        realdata.find_sets(data, ["nope"])
    assert realdata.main(["--data", str(data), "--sets", "nope", "--device", "cpu"]) == 2
    assert realdata.main(["--data", str(tmp_path / "missing"), "--device", "cpu"]) == 2
    assert "error" in capsys.readouterr().err


def test_quick_cases_alternate_and_keep_the_best():
    args = realdata.build_parser().parse_args(["--device", "cpu", "--quick-rounds", "4"])
    sweep = realdata.Sweep(args, torch.device("cpu"), argv=[])
    calls = []

    def first():
        calls.append("a")

    def second():
        calls.append("b")

    best_a, best_b, rounds, spent = sweep.alternate(first, second, 10.0, 20.0)
    assert rounds == 4 and calls == ["a", "b"] * 4 and 0 < spent < 10.0
    # the earlier best is kept where no new run beats it, and replaced where one does
    assert best_a < 10.0 and best_b < 20.0
    best_a, best_b, _, _ = sweep.alternate(first, second, 0.0, 0.0)
    assert (best_a, best_b) == (0.0, 0.0)


def test_negative_quick_rounds_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        realdata.main(["--device", "cpu", "--quick-rounds", "-1"])
    assert exc.value.code == 2
    assert "--quick-rounds" in capsys.readouterr().err


def test_no_quick_rounds_where_a_warm_up_was_the_only_run(tmp_path):
    data = tmp_path / "adbench"
    _write_sets(data)
    out = tmp_path / "res.json"
    argv = ["--data", str(data), "--sets", "1_gauss", "--cases", "knn5", "--device", "cpu", "--repeats", "1",
            "--sample", "20", "--quick-below", "60", "--quick-rounds", "2", "--warmup-only-after", "1e-9",
            "--no-uniform", "--out", str(out)]
    with _one_thread():
        assert realdata.main(argv) == 0
    (record,) = json.loads(out.read_text())
    assert record["gpumine_runs"] == 0 and "quick_rounds" not in record
