"""The kNN benchmark harness: a quick CPU run end to end, and its parts (recall, baseline, rendering)."""

import contextlib
import importlib.util
import json
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks import knn as bench_knn

ROOT = Path(__file__).resolve().parents[2]
REQUIRED_FIELDS = {"experiment", "n_ref", "n_query", "d", "k", "impl", "seconds", "recall", "ratio_vs_torch", "note"}


def _expected_impls():
    impls = {"gpumine-device", "gpumine-host", "torch"}
    if importlib.util.find_spec("sklearn") is not None:
        impls.add("sklearn")
    try:
        import faiss  # noqa: F401

        impls.add("faiss")
    except Exception:  # noqa: BLE001 - faiss is optional
        pass
    return impls


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


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench_knn")
    out, md = folder / "results.json", folder / "table.md"
    with _one_thread():
        rc = bench_knn.main(["--quick", "--device", "cpu", "--out", str(out), "--markdown", str(md)])
    return rc, folder, json.loads(out.read_text()), md.read_text()


def test_quick_run_writes_rows_for_every_implementation(quick_run):
    rc, folder, results, _ = quick_run
    assert rc == 0
    rows = results["rows"]
    assert rows and all(REQUIRED_FIELDS <= set(r) for r in rows)
    assert {r["impl"] for r in rows} == _expected_impls()
    assert {r["experiment"] for r in rows} == set(bench_knn.EXPERIMENTS)
    meta = results["meta"]
    assert meta["device"] == "cpu" and meta["quick"] is True
    assert meta["versions"]["torch"] == torch.__version__
    assert "synthetic" in meta["physics_data"]
    # every (experiment, shape) has every implementation, all measured on these tiny sizes
    shapes = {(r["experiment"], r["n_ref"], r["n_query"], r["d"], r["k"]) for r in rows}
    assert len(rows) == len(shapes) * len(_expected_impls())
    assert all(r["seconds"] is not None and r["seconds"] > 0 for r in rows), [r["note"] for r in rows if r["seconds"] is None]
    # no temporary files left beside the outputs
    assert not list(folder.glob(".*.tmp"))


def test_quick_run_gpumine_is_exact_and_ratios_refer_to_torch(quick_run):
    _, _, results, _ = quick_run
    for r in results["rows"]:
        if r["impl"].startswith("gpumine"):
            assert r["recall"] == 1.0, r
            assert r["max_dist_err"] is not None and r["max_dist_err"] < 1e-5, r
        if r["impl"] == "torch":
            assert r["ratio_vs_torch"] == pytest.approx(1.0)
        else:
            assert r["ratio_vs_torch"] > 0
        assert 0.99 <= r["recall"] <= 1.0  # every implementation is exact on uniform data


def test_quick_run_markdown_and_plots(quick_run):
    _, folder, results, text = quick_run
    assert text == bench_knn.render_markdown(results)
    assert "| n_ref | n_query | d | k |" in text
    for number in range(1, 6):
        assert f"### {number}." in text
    assert "PyTorch cdist+topk" in text and "gpumine (data on device)" in text
    assert "1.0000" in text
    if importlib.util.find_spec("matplotlib") is not None:
        assert (folder / "results_time_vs_d.png").stat().st_size > 0
        assert (folder / "results_time_vs_n.png").stat().st_size > 0


def test_recall_counts_ties_within_float32_rounding_and_rejects_bad_indices():
    ref = np.array([[0.0], [1.0], [-1.0], [2.0], [5.0]], dtype=np.float32)
    q = np.array([[0.0]], dtype=np.float32)
    kth = np.array([1.0])  # neighbours of 0 (k = 2, self excluded as for all-kNN): 1 and -1 tie at 1
    assert bench_knn.recall_at_k(np.array([[1, 2]]), None, ref, q, kth, self_ids=np.array([0]))[0] == 1.0
    assert bench_knn.recall_at_k(np.array([[2, 1]]), None, ref, q, kth, self_ids=np.array([0]))[0] == 1.0
    # self, a repeat, an out-of-range index and a too-far point are not found
    assert bench_knn.recall_at_k(np.array([[0, 1]]), None, ref, q, kth, self_ids=np.array([0]))[0] == 0.5
    assert bench_knn.recall_at_k(np.array([[1, 1]]), None, ref, q, kth, self_ids=np.array([0]))[0] == 0.5
    assert bench_knn.recall_at_k(np.array([[1, 9]]), None, ref, q, kth, self_ids=np.array([0]))[0] == 0.5
    assert bench_knn.recall_at_k(np.array([[1, 3]]), None, ref, q, kth, self_ids=np.array([0]))[0] == 0.5
    recall, err = bench_knn.recall_at_k(np.array([[1, 2]]), np.array([[1.0, 1.5]]), ref, q, kth, self_ids=np.array([0]))
    assert recall == 1.0 and err == pytest.approx(0.5)


def test_reference_and_baselines_agree_with_float64_brute_force():
    rng = np.random.default_rng(3)
    ref = rng.random((300, 5), dtype=np.float32)
    query = rng.random((40, 5), dtype=np.float32)
    k = 4
    exact = np.sqrt(((query[:, None, :].astype(np.float64) - ref[None].astype(np.float64)) ** 2).sum(-1))
    kth = np.sort(exact, axis=1)[:, k - 1]
    np.testing.assert_allclose(bench_knn.reference_kth(ref, query, k, None, "cpu"), kth, rtol=1e-12)
    d, i = bench_knn.torch_knn(torch.from_numpy(ref), torch.from_numpy(query), k, budget_bytes=16 * 300 * 7)
    assert bench_knn.recall_at_k(i.numpy(), d.numpy(), ref, query, kth)[0] == 1.0
    # all-kNN: the baseline excludes each point itself, in every chunk
    d, i = bench_knn.torch_knn(torch.from_numpy(ref), torch.from_numpy(ref), k, exclude_self=True, budget_bytes=16 * 300 * 7)
    assert not (i.numpy() == np.arange(300)[:, None]).any()
    own = np.arange(300)
    kth_all = bench_knn.reference_kth(ref, ref, k, own, "cpu")
    assert bench_knn.recall_at_k(i.numpy(), d.numpy(), ref, ref, kth_all, self_ids=own)[0] == 1.0


def test_render_markdown_lists_skips_and_targets():
    def row(impl, seconds, recall=1.0, note=""):
        return {"experiment": "refs", "n_ref": 1_048_576, "n_query": 1_048_576, "d": 8, "k": 7, "all_knn": True,
                "data": "uniform", "impl": impl, "seconds": seconds, "recall": recall, "ratio_vs_torch": None, "note": note}

    rows = [row("gpumine-device", 0.5), row("torch", 17.6), row("sklearn", None, None, "skipped: estimated 400 s (> --max-seconds 60)")]
    rows[0]["ratio_vs_torch"], rows[1]["ratio_vs_torch"] = 35.2, 1.0
    text = bench_knn.render_markdown({"meta": {"device_name": "NVIDIA H100", "device": "cuda:0"}, "rows": rows})
    assert "NVIDIA H100" in text
    assert "| 1,048,576 | all-kNN | 8 | 7 | 500 ms ×35.20 · 1.0000 | 17.6 s ×1.00 · 1.0000 | skipped |" in text
    assert "skipped: estimated 400 s" in text
    assert "| all-kNN 1,048,576, d = 8 ≤ 0.6 s | gpumine (data on device) | 500 ms | ×35.20 | met |" in text


def test_from_json_rerenders(quick_run, tmp_path):
    _, folder, results, text = quick_run
    md = tmp_path / "again.md"
    assert bench_knn.main(["--from-json", str(folder / "results.json"), "--markdown", str(md), "--no-plots"]) == 0
    assert md.read_text() == text


def test_experiment_selection_and_sizes():
    assert bench_knn._parse_experiments("1,queries,large-k") == ["dims", "queries", "large_k"]
    with pytest.raises(Exception, match="unknown experiment"):
        bench_knn._parse_experiments("fig9")
    full = {name: bench_knn.cases(name) for name in bench_knn.EXPERIMENTS}
    assert [c.d for c in full["dims"]] == [4, 8, 16, 32, 64] and full["dims"][0].n_ref == 262_144
    assert [c.n_ref for c in full["refs"]] == [2**p for p in range(13, 21)]
    assert [c.n_query for c in full["queries"]] == [2**p for p in range(14, 21)]
    assert {c.n_ref for c in full["queries"]} == {32_768}
    assert [c.n_query for c in full["physics"]] == list(range(2000, 12_001, 2000))
    assert {(c.n_ref, c.d) for c in full["physics"]} == {(32_768, 65)}
    assert [(c.n_ref, c.n_query, c.k) for c in full["large_k"]] == [(32_768, 32_768, 2048)]
    assert [(c.n_ref, c.n_query, c.d, c.k, c.all_knn) for c in full["embedding"]] == [(100_000, 10_000, 128, 10, False)]
    assert bench_knn._parse_experiments("6") == ["embedding"]
    assert all(c.k == 7 for name in ("dims", "refs", "queries", "physics") for c in full[name])


def test_bad_usage_exits_with_two(tmp_path, capsys):
    assert bench_knn.main(["--quick", "--physics", str(tmp_path / "missing.dat")]) == 2
    for bad in ("-1", "nan", "inf"):
        with pytest.raises(SystemExit) as exit_info:
            bench_knn.main(["--quick", "--min-row-seconds", bad])
        assert exit_info.value.code == 2 and "--min-row-seconds" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert bench_knn.main(["--quick", "--device", "cuda", "--experiments", "large_k"]) == 2
        assert "--device" in capsys.readouterr().err


def test_script_help_runs(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [str(ROOT / "benchmarks" / "knn.py"), "--help"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(ROOT / "benchmarks" / "knn.py"), run_name="__main__")
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "benchmarks/knn.py" in out and "--max-seconds" in out and "--quick" in out


def test_module_help_runs_from_the_repository_root():
    out = subprocess.run([sys.executable, "-m", "benchmarks.knn", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "python -m benchmarks.knn" in out.stdout and "--max-seconds" in out.stdout


def test_short_rows_repeat_until_min_row_seconds(tmp_path):
    def runs(min_row_seconds):
        out = tmp_path / f"runs_{min_row_seconds}.json"
        args = ["--quick", "--device", "cpu", "--experiments", "large_k", "--peers", "none", "--no-host",
                "--repeats", "2", "--min-row-seconds", str(min_row_seconds), "--out", str(out)]
        with _one_thread():
            assert bench_knn.main(args) == 0
        (row,) = [r for r in json.loads(out.read_text())["rows"] if r["impl"] == "gpumine-device"]
        return row["runs"], sum(row["samples"])

    assert runs(0)[0] == 2
    n, spent = runs(0.5)
    assert n == bench_knn._MAX_RUNS or (n > 2 and spent >= 0.5)
