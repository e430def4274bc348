"""The outliers benchmark harness: a quick CPU run end to end, its checks and its report."""

import importlib.util
import json
import queue
import sys

import joblib
import numpy as np
import pytest

from benchmarks import outliers as bench

FIELDS = {"dataset", "n", "d", "k", "impl", "seconds", "iterations", "solving_set", "fraction", "top_indices",
          "top_weights", "match_bf", "match_reference", "note"}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench_outliers")
    out, md = folder / "o.json", folder / "o.md"
    rc = bench.main(["--quick", "--device", "cpu", "--datasets", "g2d,covtype", "--k", "5,10", "--peer-k", "5",
                     "--impls", "ss,bf,ss-cpu,sklearn", "--sweep-candidates", "16,200", "--out", str(out), "--markdown", str(md), "--no-plots"])
    return rc, folder, json.loads(out.read_text()), md.read_text()


def test_quick_run_rows_and_checks(quick_run):
    rc, folder, results, _ = quick_run
    assert rc == 0
    rows = results["rows"]
    assert rows and all(FIELDS <= set(r) for r in rows)
    assert {(r["dataset"], r["k"], r["impl"]) for r in rows} >= {
        ("g2d", 5, "ss"), ("g2d", 5, "bf"), ("g2d", 5, "ss-cpu"), ("g2d", 5, "sklearn"),
        ("g2d", 10, "ss"), ("g2d", 10, "bf"), ("covtype", 5, "ss"), ("covtype", 5, "sklearn")}
    assert not any(r["impl"] == "sklearn" and r["k"] == 10 for r in rows)  # --peer-k 5
    assert sorted(r["n_candidates"] for r in rows if r["impl"] == "ss-sweep" and r["dataset"] == "g2d" and r["k"] == 5) == [16, 200]
    for r in rows:
        assert r["seconds"] is not None and r["seconds"] > 0, r
        if r["impl"] == "sklearn":
            # every point's weight, not just the top n, equals gpumine BruteForce's; on every core
            assert r["weights_match_bf"] is True and r["weights_vs_bf"] < 1e-12 and r["weights_differ_bf"] == 0, r
            assert r["n_jobs"] == joblib.effective_n_jobs(-1), r
        if r["impl"] in ("ss", "ss-sweep"):
            assert r["match_bf"] is True, r
            assert 0 < r["fraction"] <= 1 and r["iterations"] >= 1 and r["solving_set"] >= 1
            if r["k"] == 5:
                assert r["match_reference"] is True, r
    meta = results["meta"]
    assert meta["quick"] is True and meta["device"] == "cpu" and meta["n_outliers"] == 10
    assert "G2d" in meta["datasets"]["g2d"] and "cover" in meta["datasets"]["covtype"].lower()
    assert not list(folder.glob(".*.tmp"))


def test_quick_run_markdown(quick_run):
    _, _, results, text = quick_run
    assert text == bench.render_markdown(results)
    assert "| data | n | d | k | SolvingSet |" in text
    assert "BF ✓" in text and "ref ✓" in text
    assert "Targets:" in text and "SolvingSet top-n == BruteForce top-n on" in text
    assert "| data | n | k | m = 16 | m = 200 |" in text


def test_from_json_rerenders(quick_run, tmp_path, capsys):
    _, folder, results, text = quick_run
    md = tmp_path / "again.md"
    assert bench.main(["--from-json", str(folder / "o.json"), "--markdown", str(md), "--no-plots"]) == 0
    assert md.read_text() == text


def test_same_top_is_tie_aware():
    assert bench._same_top([3, 1, 2], [5.0, 4.0, 3.0], [3, 1, 2], [5.0, 4.0, 3.0])
    assert bench._same_top([3, 1, 2], [5.0, 4.0, 3.0], [3, 1, 9], [5.0, 4.0, 3.0])  # tie at the threshold
    assert not bench._same_top([3, 1, 2], [5.0, 4.0, 3.0], [3, 9, 2], [5.0, 4.0, 3.0])
    assert not bench._same_top([3, 1, 2], [5.0, 4.0, 3.0], [3, 1, 2], [5.0, 4.0, 3.1])


def test_datasets_and_bad_usage(tmp_path, capsys):
    X, what = bench.load_dataset("poker", n=1000)
    assert X.shape == (1000, 10) and X.dtype == np.float32 and "Poker" in what
    X, what = bench.load_dataset("g3d", n=900)
    assert X.shape == (900, 3)
    X, what = bench.load_dataset("covtype", quick=True, data_dir=tmp_path)  # empty folder: the shipped sample
    assert X.shape[1] == 10 and "shipped" in what
    assert bench.main(["--data-dir", str(tmp_path / "nope")]) == 2
    assert bench.main(["--device", "cuda:99"]) == 2
    with pytest.raises(SystemExit):
        bench.main(["--datasets", "iris"])


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib is not installed")
def test_plot_of_the_scaling_rows(tmp_path):
    rows = [{"dataset": "scaling", "n": n, "d": 2, "k": 50, "impl": impl, "seconds": s, "fraction": f}
            for n, s, f in ((1000, 0.1, 0.2), (2000, 0.15, 0.1)) for impl in ("ss", "sklearn")]
    paths = bench.plot_results({"meta": {"device_name": "test"}, "rows": rows}, tmp_path)
    assert [p.name for p in paths] == ["outliers_scaling.png"] and paths[0].stat().st_size > 0


def test_cases_option_selects_data_set_and_k_pairs():
    assert bench._cases_arg("covtype:50, g2d:50,covtype:5") == [("covtype", 50), ("g2d", 50), ("covtype", 5)]
    for bad in ("covtype", "iris:5", "g2d:0", "scaling:50", "g2d:x", ""):
        with pytest.raises(Exception):
            bench._cases_arg(bad)


@pytest.mark.parametrize("impl", ["sklearn", "pyod"])
def test_peer_worker_weights_equal_gpumine_on_every_point(impl, tmp_path):
    """The peer's weights (PyOD: decision_scores_ x k) equal gpumine brute force's, self excluded."""
    if impl == "pyod":
        pytest.importorskip("pyod", reason="PyOD is not installed (pip install pyod)")
    from gpumine.outliers import top_n_outliers

    X = np.random.default_rng(5).standard_normal((700, 3)).astype(np.float32)
    X[10] = X[11]  # a duplicate: the other copy is a neighbour at distance 0, the point itself is not
    np.save(tmp_path / "x.npy", X)
    results = queue.Queue()
    bench._peer_worker(impl, str(tmp_path / "x.npy"), 7, 10, results, str(tmp_path / "w.npy"))
    result = results.get_nowait()
    assert "error" not in result, result
    weights = np.load(tmp_path / "w.npy")
    ours = top_n_outliers(X, 10, 7, method="brute_force", device="cpu")
    assert bench.max_relative_difference(weights, np.asarray(ours.scores)) < 1e-12
    np.testing.assert_array_equal(result["indices"], ours.indices)
    assert result["n_jobs"] == joblib.effective_n_jobs(-1)
    if impl == "pyod":
        assert result["algorithm"] == "kd_tree" and "import" in result


def test_pyod_knn_imports_without_numba(monkeypatch):
    """PyOD's package __init__ imports numba, which its KNN does not use: without numba the same
    pyod.models.knn module is imported, and it runs."""
    pytest.importorskip("pyod", reason="PyOD is not installed (pip install pyod)")
    saved = {name: mod for name, mod in sys.modules.items() if name == "pyod" or name.startswith("pyod.")}
    for name in saved:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba -> ModuleNotFoundError
    try:
        KNN, how = bench.import_pyod_knn()
        assert "numba is not installed" in how
        X = np.random.default_rng(6).standard_normal((300, 2))
        scores = KNN(n_neighbors=4, method="mean").fit(X).decision_scores_
        from sklearn.neighbors import NearestNeighbors

        dist, _ = NearestNeighbors(n_neighbors=4).fit(X).kneighbors()
        np.testing.assert_allclose(scores * 4, dist.sum(1), rtol=1e-12)
    finally:
        for name in [m for m in sys.modules if m == "pyod" or m.startswith("pyod.")]:
            del sys.modules[name]
        sys.modules.update(saved)
