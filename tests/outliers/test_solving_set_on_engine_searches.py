"""SolvingSet on engine searches (the GPU's form) gives brute force's top-n bit for bit.

The engine form picks neighbours by the kNN engine's exact ranking and sums their canonical
float64 distances, as brute force does, so the top-n weights must be *identical* to brute
force's, on data with duplicates (a candidate with more than k copies of lower index is not
among its own k + 1 nearest), masses of ties, float64 input, every metric and k from 1 to n - 1.
The tests run the form on the CPU, where it is not the default.
"""

import numpy as np
import pytest
import torch

from gpumine.outliers import DistanceOutlierDetector, _canonical_knn, _distance_based, top_n_outliers
from gpumine.outliers._canonical_knn import canonical_knn
from gpumine.outliers._distance_based import run
from gpumine.outliers._solving_set import SolvingSetTimeout
from gpumine.outliers._weights import PairSpace, resolve_metric

CPU = torch.device("cpu")


def _data(name, n=500, seed=0):
    rng = np.random.default_rng(seed)
    if name == "gaussian":
        X = rng.standard_normal((n, 4)).astype(np.float32)
        X[:4] *= 6
        return X
    if name == "duplicates":  # every row 6 times (more than k + 1 copies for small k)
        return np.repeat(rng.standard_normal((n // 6, 3)).astype(np.float32) * 3, 6, axis=0)
    if name == "integers":  # a small grid: masses of tied distances
        return rng.integers(0, 4, (n, 3)).astype(np.float32)
    if name == "float64":
        return rng.standard_normal((n, 5)) * 1e3 + 1e6
    raise KeyError(name)


def _both(X, k, metric="euclidean", m=64, seed=0, n_out=7):
    Xt = torch.from_numpy(X)
    kwargs = dict(n_candidates=m, metric=resolve_metric(metric), seed=seed, device=CPU, budget=1 << 22, backend="torch")
    bf = run(Xt, n_out, k, method="brute_force", **kwargs)
    ss = run(Xt, n_out, k, method="solving_set", form_override="engine", **kwargs)
    return bf, ss


@pytest.mark.parametrize("name", ["gaussian", "duplicates", "integers", "float64"])
@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "cosine"])
@pytest.mark.parametrize("k", [1, 5, 40])
def test_engine_form_equals_brute_force(name, metric, k):
    bf, ss = _both(_data(name), k, metric)
    assert ss["form"] == "engine"
    assert torch.equal(ss["top_indices"], bf["top_indices"])
    assert torch.equal(ss["top_weights"], bf["top_weights"])
    # every solving-set point's weight is exact, every other point's score an upper bound
    exact = ss["scores_exact"]
    assert torch.equal(ss["scores"][exact], bf["scores"][exact])
    assert bool((ss["scores"][~exact] >= bf["scores"][~exact]).all())
    # exact: the candidates that could still enter Top when they were chosen (the others died)
    assert set(torch.nonzero(exact).squeeze(1).tolist()) <= set(ss["solving_set"].tolist())


def test_engine_form_with_k_equal_to_n_minus_one_and_one_candidate_batch():
    X = _data("gaussian", n=40)
    bf, ss = _both(X, 39, m=40)
    assert torch.equal(ss["top_indices"], bf["top_indices"]) and torch.equal(ss["top_weights"], bf["top_weights"])
    assert ss["iterations"] == 1 and ss["distances"] == 40 * 39


@pytest.mark.parametrize("m", [1, 7, 500])
def test_engine_form_any_candidate_batch_and_seed(m):
    X = _data("duplicates", n=300)
    for seed in (0, 3):
        bf, ss = _both(X, 4, m=m, seed=seed)
        assert torch.equal(ss["top_indices"], bf["top_indices"]) and torch.equal(ss["top_weights"], bf["top_weights"])


def test_engine_form_prunes_points():
    # clustered data with a few far points: most points leave after the first candidates
    rng = np.random.default_rng(1)
    X = rng.standard_normal((4000, 2)).astype(np.float32)
    X[:5] += 30
    _, ss = _both(X, 5, m=256, n_out=5)
    assert ss["distances"] < 0.5 * 4000 * 3999 / 2
    assert set(ss["top_indices"].tolist()) == set(range(5))
    # later candidates that fall below the cutoff among themselves skip the search over every point
    later = ss["trace"][1:]
    assert later and sum(t["live_at_end"] for t in later) < sum(t["candidates"] for t in later)


def test_engine_form_stops_at_its_deadline():
    Xt = torch.from_numpy(_data("gaussian"))
    with pytest.raises(SolvingSetTimeout):
        run(Xt, 5, 5, method="solving_set", n_candidates=8, metric=resolve_metric("euclidean"), seed=0, device=CPU,
            budget=1 << 22, backend="torch", form_override="engine", deadline=0.0)


def test_public_api_and_estimator_on_the_engine_form(monkeypatch):
    X = _data("gaussian", n=400)
    tiles = top_n_outliers(X, 5, 6, device="cpu")
    det_tiles = DistanceOutlierDetector(n_neighbors=6, n_outliers=5, device="cpu").fit(X)
    monkeypatch.setitem(_distance_based.SOLVING_SET_ENGINE_MIN_FEATURES, "cpu", 1)
    engine = top_n_outliers(X, 5, 6, device="cpu")
    np.testing.assert_array_equal(engine.indices, tiles.indices)
    np.testing.assert_allclose(engine.weights, tiles.weights, rtol=1e-12)
    det = DistanceOutlierDetector(n_neighbors=6, n_outliers=5, device="cpu").fit(X)
    np.testing.assert_array_equal(det.fit_predict(X), det_tiles.fit_predict(X))
    assert (det.predict(X[:5] * 10) == -1).all()


# -- canonical kNN: the engine's ranking re-ranked by canonical distances ------------------------
def _canonical_oracle(X, metric, k, queries=None):
    """The k smallest canonical scores by a full canonical matrix (each point excluded from its own list)."""
    space = PairSpace(torch.from_numpy(X), resolve_metric(metric), tiles=False)
    n = len(X)
    if queries is None:
        full = space.canonical(torch.arange(n)[:, None], torch.arange(n)[None, :])
        full.fill_diagonal_(float("inf"))
    else:
        full = space.canonical_to_rows(torch.from_numpy(queries), torch.arange(n)[None, :].expand(len(queries), -1))
    return torch.sort(full, dim=1).values[:, :k]


@pytest.mark.parametrize("name", ["integers", "duplicates", "gaussian"])
@pytest.mark.parametrize("metric", ["euclidean", "cosine", "chebyshev"])
@pytest.mark.parametrize("force_scan", [False, True])
def test_canonical_knn_equals_the_full_canonical_matrix(name, metric, force_scan, monkeypatch):
    X = _data(name, n=300)
    if force_scan:  # no row certifies: every row retries, then scans every reference
        monkeypatch.setattr(_canonical_knn, "canonical_lower_bound", lambda space, s, dtype: torch.full_like(s, -1.0, dtype=torch.float64))
    space = PairSpace(torch.from_numpy(X), resolve_metric(metric))
    Xt = torch.from_numpy(X)
    for k in (1, 6, 299):
        stats = {}
        got = canonical_knn(Xt, space, k, device=CPU, budget_bytes=1 << 20, backend="torch", stats=stats)
        assert torch.equal(got, _canonical_oracle(X, metric, k))
        if force_scan and k < 299 - 150:
            assert stats["canonical_rows_scanned"] == 300
        ids = torch.tensor([0, 7, 299, 150])
        sub = canonical_knn(Xt, space, k, ids=ids, device=CPU, budget_bytes=1 << 20, backend="torch")
        assert torch.equal(sub, got[ids])
    new = _data(name, n=30, seed=5)
    got = canonical_knn(Xt, space, 4, queries=torch.from_numpy(new), device=CPU, budget_bytes=1 << 20, backend="torch")
    assert torch.equal(got, _canonical_oracle(X, metric, 4, queries=new))


def test_canonical_knn_certifies_ties_that_the_float32_ranking_orders_otherwise():
    # parallel integer vectors: cosine 0 in float64, ~1e-7 in float32 for some pairs
    X = _data("integers", n=500)
    space = PairSpace(torch.from_numpy(X), resolve_metric("cosine"))
    stats = {}
    got = canonical_knn(torch.from_numpy(X), space, 1, device=CPU, budget_bytes=1 << 22, backend="torch", stats=stats)
    assert torch.equal(got, _canonical_oracle(X, "cosine", 1))
    # only rows with more than ~130 references at cosine 0 (beyond the retry) need the full scan
    assert stats["canonical_rows_retried"] > 0 and stats["canonical_rows_scanned"] < 25


def test_canonical_knn_rejects_k_outside_the_references():
    X = torch.from_numpy(_data("gaussian", n=10))
    space = PairSpace(X, resolve_metric("euclidean"))
    with pytest.raises(ValueError, match="k=10"):
        canonical_knn(X, space, 10, device=CPU, budget_bytes=1 << 20, backend="torch")


def test_form_and_candidates_by_device_dimension_and_k():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert _distance_based.solving_set_form(cuda, 10, 50) == "engine"
    assert _distance_based.solving_set_form(cuda, 2, 5) == "engine" and _distance_based.solving_set_form(cuda, 2, 50) == "tiles"
    assert _distance_based.solving_set_form(cpu, 10, 5) == "tiles"
    assert _distance_based.check_candidates("auto", cuda, 10**6, 10, 50) == 16384
    assert _distance_based.check_candidates("auto", cuda, 10**6, 2, 5) == 4096
    assert _distance_based.check_candidates("auto", cuda, 10**6, 2, 50) == 256  # tiles
    assert _distance_based.check_candidates("auto", cuda, 1000, 10, 50) == 1000
