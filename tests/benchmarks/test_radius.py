"""The radius/graph benchmark: a tiny CPU run end to end, and its float64 checks catching wrong rows."""

import json

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from benchmarks import radius as bench


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_radius") / "radius.json"
    md = out.with_suffix(".md")
    argv = ["--rows", "3000", "--dims", "4", "--queries", "300", "--k", "5", "--device", "cpu",
            "--sklearn-rows", "2000", "--repeats", "1", "--sample", "40", "--out", str(out), "--markdown", str(md)]
    rc = bench.main(argv)
    return rc, json.loads(out.read_text()), md.read_text()


def test_every_case_and_mode_is_recorded_exact_and_timed(result):
    rc, data, _ = result
    assert rc == 0
    records = data["records"]
    assert {(r["case"], r["mode"]) for r in records} == {("radius", None)} | {
        (case, mode) for case in ("knn_graph", "radius_graph") for mode in bench.MODES}
    for r in records:
        assert r["exact"] is True, r
        assert r["check"]["mismatched_rows"] == 0 and r["check"]["rows_checked"] == 40
        assert r["gpumine_s"] > 0
        for column in ("torch", "sklearn"):
            assert r[f"{column}_s"] > 0, (r, column)
            assert r[f"{column}_ratio"] == pytest.approx(r[f"{column}_s"] / r["gpumine_s"])
        assert r["sklearn_rows"] == 2000
    assert data["meta"]["device"] == "cpu" and data["meta"]["device_name"]
    assert data["config"]["rows"] == 3000 and data["config"]["radius"] > 0


def test_radius_is_calibrated_and_subset_peer_scaled(result):
    _, data, md = result
    by_case = {(r["case"], r["mode"]): r for r in data["records"]}
    # mean other points within r is 20 on the calibration sample; the queries find themselves too
    assert 15 < by_case[("radius_graph", "distance")]["mean_neighbours"] < 25
    assert 16 < by_case[("radius", None)]["mean_neighbours"] < 26
    cfg = data["config"]
    assert cfg["sklearn_radius"] == pytest.approx(cfg["radius"] * (3000 / 2000) ** (1 / 4))
    assert by_case[("knn_graph", "distance")]["sklearn_ratio_linear"] > 0
    assert "radius_graph" in md and "(2,000 rows)" in md


def test_checks_catch_a_missing_an_extra_and_a_wrong_distance():
    X = bench.make_points(500, 3, seed=4)
    rows = np.array([0, 7, 99])
    r = 0.2
    ref = bench.reference_radius(X, X[rows], r, rows)
    good_i = [i for i, _ in ref]
    good_d = [dd for _, dd in ref]
    assert bench.check_radius_rows(ref, r, good_i, good_d)["mismatched_rows"] == 0
    far = int(np.argmax(((X - X[7]) ** 2).sum(1)))
    broken_i = [good_i[0][1:], np.append(good_i[1], far), good_i[2]]
    broken_d = [good_d[0][1:], np.append(good_d[1], 9.0), good_d[2] * (1 + 1e-4)]
    assert bench.check_radius_rows(ref, r, broken_i, broken_d)["mismatched_rows"] == 3
    assert bench.check_radius_rows(ref, r, broken_i)["mismatched_rows"] == 2  # sets only


def test_knn_graph_check_catches_a_wrong_neighbour():
    X = bench.make_points(400, 3, seed=5)
    k = 4
    G = bench.torch_knn_graph(torch.from_numpy(X), k, "connectivity")
    rows = np.arange(0, 400, 10)
    ref_d, ref_i = bench.reference_knn(X, rows, k)
    assert bench._exact(bench._check_knn_graph(X, G, rows, ref_d, ref_i, k, "connectivity"))
    H = sp.csr_matrix(G, copy=True)
    own = H.indptr[rows[3]]
    H.indices[own] = (H.indices[own] + 200) % 400
    check = bench._check_knn_graph(X, H, rows, ref_d, ref_i, k, "connectivity")
    assert check["mismatched_rows"] == 1 and not bench._exact(check)


def test_help_and_bad_case(capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--help"])
    assert exc.value.code == 0 and "--sklearn-rows" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        bench.main(["--cases", "nope"])
