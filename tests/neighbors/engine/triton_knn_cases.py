"""Fused Triton kNN kernel vs its torch twin.

Collected directly on a GPU machine (``pytest tests/neighbors/engine/triton_knn_cases.py``; most of
their time is Triton compiling each case's kernels, so ``pytest -n <cores>`` with pytest-xdist runs
them in a fraction of it), and
run by ``test_triton_kernels_under_the_interpreter.py`` in a child process with ``TRITON_INTERPRET=1``
on machines without one (small shapes: the interpreter is slow).
"""

import numpy as np
import pytest
import torch

from gpumine.core.distance import get_metric
from gpumine.neighbors.engine._exact_tile_kernel import exact_tile_scores, exact_tile_scores_torch, scores_within, scores_within_torch
from gpumine.neighbors.engine._fused_kernel import ROW_ALIGN, SPLIT_MAX_WIDTH, _aligned_rows, fused_candidates, split_tf32x3
from gpumine.neighbors import kneighbors
from gpumine.neighbors.engine._search import knn_search
from knn_oracle import assert_knn_matches, brute_force_knn

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ON_GPU = DEVICE == "cuda"
SCALE = 8 if ON_GPU else 1  # larger shapes on a real GPU; the interpreter runs ~0.3 s per tile step
# one or two tile steps per program in the interpreter, irregular multi-tile shapes on the GPU
BLOCKS = dict(block_m=16, block_n=32) if ON_GPU else dict(block_m=16, block_n=64)


def slow_interpreted(*values):
    """Parameter values that run natively on a GPU, and under the interpreter only with ``-m slow``.

    The interpreter takes seconds per case: CI runs one representative of each kernel
    path, and the GPU run (or ``TRITON_INTERPRET=1 pytest -m slow``) runs them all.
    """
    if ON_GPU:
        return list(values)
    # a tuple holds the values of several comma-separated argument names
    return [pytest.param(*(value if isinstance(value, tuple) else (value,)), marks=pytest.mark.slow) for value in values]


def slow_when_interpreted(test):
    """A whole test that runs natively on a GPU, and under the interpreter only with ``-m slow``."""
    return test if ON_GPU else pytest.mark.slow(test)


def _data(kind, n, d, seed):
    rng = np.random.default_rng(seed)
    if kind == "random":
        return rng.standard_normal((n, d)).astype(np.float32)
    if kind == "integer":
        return rng.integers(0, 3, (n, d)).astype(np.float32)
    base = rng.standard_normal((max(n // 4, 1), d)).astype(np.float32)
    return base[rng.integers(0, len(base), n)]


def _twin_scores(metric, Q, R):
    m = get_metric(metric)
    if metric in ("cosine", "inner_product"):
        Qp, Rp = m.prepare(Q, None, "query"), m.prepare(R, None, "ref")
        return Qp["rows"], Rp["rows"], (Qp["rows"][:, None, :] * Rp["rows"][None]).sum(-1)
    return Q, R, m.exact_scores(Q, R.unsqueeze(0))


@pytest.mark.parametrize("metric", ["euclidean", "cosine", *slow_interpreted("manhattan", "inner_product")])
@pytest.mark.parametrize("shape", [(37, 203, 5), (1, 1, 1), (17, 33, 65)] if ON_GPU else [(9, 77, 5), (1, 1, 1), (5, 20, 65)])
@pytest.mark.parametrize("c", [1, 8, 16] if ON_GPU else [1, 16])
def test_candidates_are_the_c_smallest_scores(metric, shape, c):
    n_q, n_r, d = (shape[0] * SCALE, shape[1] * SCALE, shape[2])
    Q = torch.from_numpy(_data("random", n_q, d, 1)).to(DEVICE)
    R = torch.from_numpy(_data("random", n_r, d, 2)).to(DEVICE)
    Qk, Rk, scores = _twin_scores(metric, Q, R)
    v, i = fused_candidates(Qk, Rk, c, metric_name=metric, **BLOCKS)
    C = v.shape[1]
    expected = torch.sort(scores, dim=1).values[:, : min(C, n_r)]
    torch.testing.assert_close(v[:, : min(C, n_r)], expected, rtol=1e-5, atol=1e-5)
    real = i[:, : min(C, n_r)]
    torch.testing.assert_close(scores.gather(1, real), v[:, : min(C, n_r)], rtol=1e-5, atol=1e-5)
    if C > n_r:
        assert (i[:, n_r:] == -1).all() and torch.isinf(v[:, n_r:]).all()


def test_ties_go_to_the_lower_index_and_self_is_excluded():
    X = torch.zeros((50 * SCALE if ON_GPU else 20, 3), device=DEVICE)
    v, i = fused_candidates(X, X, 8, metric_name="euclidean", exclude_self=True, block_m=16, block_n=16)
    expected = torch.stack([torch.tensor([j for j in range(9) if j != r][:8]) for r in range(X.shape[0])]).to(DEVICE)
    assert torch.equal(i, expected)


@pytest.mark.parametrize("kind", ["duplicates", *slow_interpreted("random", "integer")])
@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "manhattan", "cosine", "inner_product"] if ON_GPU else ["euclidean", "cosine"])
@pytest.mark.parametrize("d", [2, 4])  # L2 at d = 2 is scored by direct differences, at 4 by tl.dot
def test_search_with_fused_kernel_equals_torch_twin(kind, metric, d):
    X = _data(kind, 150 * SCALE if ON_GPU else 40, d, 3)
    for k in (1, 7):
        fused = kneighbors(X, k=k, metric=metric, device=DEVICE, backend="triton")
        twin = kneighbors(X, k=k, metric=metric, device=DEVICE, backend="torch")
        np.testing.assert_array_equal(fused[1], twin[1])
        np.testing.assert_array_equal(fused[0], twin[0])
    assert_knn_matches(*fused, X, X, 7, metric, exclude_self=True)


def test_k_equals_n_and_d_one():
    X = _data("integer", 20, 1, 4)
    d, i = kneighbors(X, X[:3], 20, device=DEVICE, backend="triton")
    np.testing.assert_array_equal(i, brute_force_knn(X, X[:3], 20)[1])


def test_float64_or_large_k_is_refused_explicitly_and_falls_back_on_auto():
    X = _data("random", 300, 3, 5)
    with pytest.raises(ValueError, match="float64"):
        kneighbors(X.astype(np.float64), k=3, device=DEVICE, backend="triton")
    with pytest.raises(ValueError, match="register budget"):  # no exact tiles for cosine
        kneighbors(X, k=290, metric="cosine", device=DEVICE, backend="triton")
    if DEVICE == "cuda":
        stats = {}
        t = torch.from_numpy(X)
        knn_search(t, t, 3, get_metric("chebyshev"), exclude_self=True, device=torch.device(DEVICE),
                   budget_bytes=2**26, result_device=torch.device("cpu"), stats=stats)
        assert stats["backend"] == "torch"


@pytest.mark.parametrize("kind", ["integer", *slow_interpreted("random", "duplicates")])
@pytest.mark.parametrize("metric", ["euclidean", *slow_interpreted("cosine")])
def test_search_over_many_references_equals_torch_twin(kind, metric):
    # more references than one program's tile step, and k up to the register budget
    X = _data(kind, 8400 if ON_GPU else 600, 3, 8)
    Q = X[: 40 * SCALE if ON_GPU else 16]
    for k in (1, 9, 200) if ON_GPU else (1, 30):
        fused = kneighbors(X, Q, k, metric=metric, device=DEVICE, backend="triton")
        twin = kneighbors(X, Q, k, metric=metric, device=DEVICE, backend="torch")
        np.testing.assert_array_equal(fused[1], twin[1])
        np.testing.assert_array_equal(fused[0], twin[0])
    if ON_GPU:
        own = kneighbors(X, None, 5, metric=metric, device=DEVICE, backend="triton", working_memory=4)
        assert_knn_matches(*own, X, X, 5, metric, exclude_self=True)


@pytest.mark.parametrize("d", [1, 65, *slow_interpreted(17, 40)])
@pytest.mark.parametrize("splits", [1, 3])
def test_prepared_l2_rows_and_reference_splits(d, splits):
    # prepared L2 rows are scored by tl.dot, raw rows by direct differences; splits merge per-split lists
    n_q, n_r = 21 * SCALE, 150 * SCALE
    m = get_metric("euclidean")
    Q = torch.from_numpy(_data("random", n_q, d, 9)).to(DEVICE)
    R = torch.from_numpy(_data("random", n_r, d, 10)).to(DEVICE)
    centre = m.centre(R)
    Qp, Rp = m.prepare(Q, centre, "query"), m.prepare(R, centre, "ref")
    scores = Qp["rows"] @ Rp["rows"].T
    v, i = fused_candidates(Qp["rows"], Rp["rows"], 8, metric_name="euclidean", prepared=True, splits=splits, **BLOCKS)
    torch.testing.assert_close(v, torch.sort(scores, dim=1).values[:, :8], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(scores.gather(1, i), v, rtol=1e-4, atol=1e-4)
    raw_v, raw_i = fused_candidates(Q, R, 8, metric_name="euclidean", splits=splits, **BLOCKS)
    exact = m.exact_scores(Q, R.unsqueeze(0))
    torch.testing.assert_close(raw_v, torch.sort(exact, dim=1).values[:, :8], rtol=1e-5, atol=1e-5)


@slow_when_interpreted
def test_lof_on_the_fused_kernel_equals_torch_twin():
    from gpumine.outliers import LocalOutlierFactor

    X = _data("random", 300 * SCALE if ON_GPU else 120, 4, 11)
    fused = LocalOutlierFactor(n_neighbors=7, device=DEVICE, backend="triton").fit(X)
    twin = LocalOutlierFactor(n_neighbors=7, device=DEVICE, backend="torch").fit(X)
    np.testing.assert_array_equal(fused.negative_outlier_factor_, twin.negative_outlier_factor_)
    novelty = LocalOutlierFactor(n_neighbors=7, novelty=True, device=DEVICE, backend="triton").fit(X[:80])
    twin_novelty = LocalOutlierFactor(n_neighbors=7, novelty=True, device=DEVICE, backend="torch").fit(X[:80])
    np.testing.assert_array_equal(novelty.score_samples(X[80:]), twin_novelty.score_samples(X[80:]))


@slow_when_interpreted
def test_low_dimensional_l2_is_certified_with_relative_bounds():
    # a dense 2-d cluster and a few far points (as Gaussian tails): the tile form's absolute error
    # bound (|x|^2 + max |y|^2) dwarfs the cluster's neighbour distances, the direct form's relative
    # bound does not
    rng = np.random.default_rng(12)
    X = (rng.standard_normal((3000 if ON_GPU else 400, 2)) * 1e-3).astype(np.float32)
    X[:5] = rng.standard_normal((5, 2)) * 100.0
    Xt = torch.from_numpy(X).to(DEVICE)
    stats = {}
    d_f, i_f = knn_search(Xt, Xt, 5, get_metric("euclidean"), exclude_self=True, device=torch.device(DEVICE),
                          budget_bytes=2**26, result_device=torch.device(DEVICE), stats=stats, backend="triton")
    assert stats["rows_retried"] <= X.shape[0] // 50, stats
    d_t, i_t = knn_search(Xt, Xt, 5, get_metric("euclidean"), exclude_self=True, device=torch.device(DEVICE),
                          budget_bytes=2**26, result_device=torch.device(DEVICE), backend="torch")
    assert torch.equal(i_f, i_t) and torch.equal(d_f, d_t)
    assert_knn_matches(d_f.sqrt().cpu().numpy(), i_f.cpu().numpy(), X, X, 5, "euclidean", exclude_self=True)


@pytest.mark.parametrize("metric", ["cosine", *slow_interpreted("euclidean", "manhattan")])
def test_retries_after_the_fused_kernel_give_the_torch_twins_results(metric, monkeypatch):
    # integer data: ties at the k-th place fail the certificate; the first retries (2x, then
    # 8x the candidates) run on the kernel, later ones on the torch selection's reference
    # tiles sized by the budget, not the fused kernel's single tile
    import gpumine.neighbors.engine._plan as plan

    monkeypatch.setattr(plan, "_FUSED_WIDE_MAX_PAIRS", 0)  # the usual k + 1 candidates: rows fail
    X = torch.from_numpy(_data("integer", 600 if ON_GPU else 200, 3, 8)).to(DEVICE)  # the interpreter: ~1 min at 600
    dev = torch.device(DEVICE)
    stats = {}
    fused = knn_search(X, X, 9, get_metric(metric), exclude_self=True, device=dev, budget_bytes=50_000,
                       result_device=dev, stats=stats, backend="triton")
    twin = knn_search(X, X, 9, get_metric(metric), exclude_self=True, device=dev, budget_bytes=50_000,
                      result_device=dev, backend="torch")
    assert stats["rows_retried"] > 0
    assert torch.equal(fused[1], twin[1]) and torch.equal(fused[0], twin[0])


@pytest.mark.parametrize("precision", ["exact", *slow_interpreted("tf32", "bf16")])
@pytest.mark.parametrize("metric", ["euclidean", "cosine", *slow_interpreted("inner_product")])
@pytest.mark.parametrize("kind", ["integer", *slow_interpreted("random")])
@pytest.mark.parametrize("d", [12, 64])  # 64: L2's |y|^2 goes to the kernel as a per-reference bias
def test_reduced_precision_kernel_gives_the_exact_results(precision, metric, kind, d):
    # exact (tf32x3), one TF32 product / bfloat16 operands in the kernel, wider candidate lists and the
    # widened certificate: the results must equal the exact torch engine's bit for bit
    if precision == "bf16" and not ON_GPU:
        pytest.skip("the Triton 3.x interpreter has no bfloat16 arithmetic (tl.dot of bf16 operands gave values "
                    "off by 1e9 there); this case runs on the GPU")
    X = torch.from_numpy(_data(kind, 150 * SCALE, d, 5)).to(DEVICE)
    Q = torch.from_numpy(_data(kind, 40 * SCALE, d, 6)).to(DEVICE)
    dev = torch.device(DEVICE)
    for k in (1, 7):
        stats = {}
        fused = knn_search(X, Q, k, get_metric(metric), exclude_self=False, device=dev, budget_bytes=1 << 24,
                           result_device=dev, stats=stats, backend="triton", precision=precision)
        exact = knn_search(X, Q, k, get_metric(metric), exclude_self=False, device=dev, budget_bytes=1 << 24,
                           result_device=dev, backend="torch")
        assert stats["backend"] == "triton" and stats["precision"] == precision
        assert torch.equal(fused[1], exact[1]) and torch.equal(fused[0], exact[0])


def test_reference_bias_equals_the_augmented_feature():
    # L2's |y|^2 passed as a per-reference bias must select what the (d + 1)-th feature did
    X = torch.from_numpy(_data("random", 70 * SCALE, 16, 7)).to(DEVICE)
    Q = torch.from_numpy(_data("random", 20 * SCALE, 16, 8)).to(DEVICE)
    m = get_metric("euclidean")
    centre = m.centre(X)
    Qr, Rr = m.prepare(Q, centre, "query")["rows"], m.prepare(X, centre, "ref")["rows"]
    v_aug, i_aug = fused_candidates(Qr, Rr, 8, metric_name="euclidean", prepared=True, **BLOCKS)
    v_bias, i_bias = fused_candidates(Qr[:, :-1], Rr[:, :-1], 8, metric_name="euclidean", prepared=True,
                                      ref_bias=Rr[:, -1], **BLOCKS)
    torch.testing.assert_close(v_bias, v_aug, rtol=1e-5, atol=1e-5)
    assert (i_bias == i_aug).float().mean() > 0.95  # near-equal scores may swap places
    with pytest.raises(ValueError, match="ref_bias"):
        fused_candidates(Qr, Rr, 8, metric_name="euclidean", prepared=True, ref_bias=Rr[:5, -1])


@pytest.mark.parametrize("metric", ["euclidean", "manhattan"])
@pytest.mark.parametrize("d", [1, 16, *slow_interpreted(3, 8)])
def test_exact_tiles_equal_the_torch_twin_bit_for_bit(metric, d):
    Q = torch.from_numpy(_data("random", 37 * SCALE, d, 11) * 3).to(DEVICE)
    R = torch.from_numpy(_data("duplicates", 203 * SCALE, d, 12)).to(DEVICE)
    QT, RT = Q.T.contiguous(), R.T.contiguous()
    for self_offset in (0, 5, -3):
        fast = exact_tile_scores(QT, RT[:, 2:], metric, exclude_self=True, self_offset=self_offset)  # a strided slice
        twin = exact_tile_scores_torch(QT, RT[:, 2:], metric, exclude_self=True, self_offset=self_offset)
        assert torch.equal(fast, twin)
        assert torch.isinf(fast).sum() == Q.shape[0] - max(0, -self_offset)
    # the twin is the engine's exact per-pair form
    assert torch.equal(exact_tile_scores_torch(QT, RT, metric), get_metric(metric).exact_scores(Q, R.unsqueeze(0)))


def test_scores_within_a_threshold_equal_the_torch_twin_bit_for_bit():
    Q = torch.from_numpy(_data("random", 37 * SCALE, 4, 14) * 2).to(DEVICE)
    R = torch.from_numpy(_data("duplicates", 203 * SCALE, 4, 15)).to(DEVICE)
    QT, RT = Q.T.contiguous(), R.T.contiguous()
    threshold = torch.rand(Q.shape[0], generator=torch.Generator().manual_seed(3)).to(DEVICE) * 12
    threshold[1] = float("nan")  # keeps nothing
    for metric in ("euclidean", "manhattan"):
        for cap in (3, 64, R.shape[0]):  # overflowing and roomy slots
            fast = scores_within(QT, RT, threshold, cap, metric, exclude_self=True, self_offset=2)
            twin = scores_within_torch(QT, RT, threshold, cap, metric, exclude_self=True, self_offset=2)
            for a, b in zip(fast, twin):
                assert torch.equal(a, b)
            scores, index, count = fast
            assert count[1] == 0 and ((count > cap).any() or cap == R.shape[0])
            used = index >= 0
            assert torch.equal(used.sum(1), count.clamp(max=cap))
            assert (scores[used] <= threshold[:, None].expand_as(scores)[used]).all()


@pytest.mark.parametrize("path", ["threshold", "tiles"])
@pytest.mark.parametrize("kind", ["duplicates", *slow_interpreted("random", "integer")])
@pytest.mark.parametrize("metric", ["sqeuclidean", *slow_interpreted("manhattan")])
def test_large_k_selects_from_exact_tiles_with_the_torch_twins_results(path, kind, metric):
    # k beyond the fused kernel's register budget; the threshold kernel runs when k is small
    # against the references, else whole exact tiles are scored and selected
    k = 300 if ON_GPU else 260
    n = (4000 if ON_GPU else 1100) if path == "threshold" else (1000 if ON_GPU else 500)
    X = _data(kind, n, 3, 13)
    t = torch.from_numpy(X).to(DEVICE)
    # one reference tile, then several merged (the interpreter is slow: on random data only)
    for budget in (2**30, 2**15) if path == "tiles" and (ON_GPU or kind == "random") else (2**30,):
        stats = {}
        got = knn_search(t, t, k, get_metric(metric), exclude_self=True, device=torch.device(DEVICE), budget_bytes=budget,
                         result_device=torch.device("cpu"), stats=stats, backend="triton")
        assert stats["selection"] == "exact_tiles"
        if budget < 2**20:
            assert stats["ref_rows"] < n
        twin = knn_search(t, t, k, get_metric(metric), exclude_self=True, device=torch.device(DEVICE), budget_bytes=budget,
                          result_device=torch.device("cpu"), backend="torch")
        assert torch.equal(got[1], twin[1]) and torch.equal(got[0], twin[0])
        if kind == "random":
            # distinct scores settle a row in the tiles; float32 squares tie now and then
            assert stats["rows_retried"] < 0.02 * n
        elif path == "tiles":
            # ties in whole tiles go through the candidates, or (few rows) to the float64 order's scan
            assert stats["rows_retried"] + stats["rows_deferred"] > 0
    assert_knn_matches(got[0].numpy(), got[1].numpy(), X, X, k, metric, exclude_self=True)


@pytest.mark.parametrize("with_bias", [False, True])
def test_split_operands_reproduce_the_product_within_the_tf32x3_error(with_bias):
    # [q_hi, q_hi, q_lo] . [r_hi, r_lo, r_hi] (+ 1.b_hi + 1.b_lo): only q_lo.r_lo and the
    # rounding of the low halves are lost, each at most 2^-22 |q||r|
    rng = np.random.default_rng(21)
    Q = torch.from_numpy(rng.standard_normal((40, 8)).astype(np.float32) * 3)
    R = torch.from_numpy(rng.standard_normal((50, 8)).astype(np.float32))
    bias = (R * R).sum(1) if with_bias else None
    Q3, R3 = split_tf32x3(Q, R, bias, SPLIT_MAX_WIDTH)
    assert Q3.shape == (40, SPLIT_MAX_WIDTH) and R3.shape == (50, SPLIT_MAX_WIDTH)
    for M in (Q3, R3):  # every part is a TF32 value: the tensor cores read it without rounding
        assert not (M.view(torch.int32) & 0x1FFF).any()
    got = Q3.double() @ R3.double().T
    exact = Q.double() @ R.double().T + (bias.double()[None, :] if with_bias else 0)
    scale = Q.double().norm(dim=1)[:, None] * R.double().norm(dim=1)[None, :] + (bias.double()[None, :] if with_bias else 0)
    assert ((got - exact).abs() <= 3 * 2.0**-22 * scale).all()


@pytest.mark.parametrize("d", [4, 8, 10])
def test_split_form_with_a_bias_selects_the_augmented_rows_candidates(d):
    # d <= 10: L2 rows run as one TF32 product of split operands (3 d + 2 <= 32 columns)
    X = torch.from_numpy(_data("random", 90 * SCALE, d, 23)).to(DEVICE)
    Q = torch.from_numpy(_data("random", 30 * SCALE, d, 24)).to(DEVICE)
    m = get_metric("euclidean")
    centre = m.centre(X)
    Qr, Rr = m.prepare(Q, centre, "query")["rows"], m.prepare(X, centre, "ref")["rows"]
    scores = Qr.double() @ Rr.double().T
    v, i = fused_candidates(Qr[:, :-1], Rr[:, :-1], 8, metric_name="euclidean", prepared=True, ref_bias=Rr[:, -1], **BLOCKS)
    torch.testing.assert_close(v.double(), torch.sort(scores, dim=1).values[:, :8], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(scores.gather(1, i), v.double(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("offsets", [(0, 0), (5, 3), (40, 0), (0, 70)])
def test_self_exclusion_with_offsets_masks_only_the_own_pair(offsets):
    # the kernel masks only tiles that cross the block's own rows: every offset must still
    # drop exactly pair (i, i + self_offset - ref_offset)
    self_offset, ref_offset = offsets
    X = torch.from_numpy(_data("integer", 120 * SCALE, 3, 25)).to(DEVICE)
    Q = X[self_offset - ref_offset :] if self_offset >= ref_offset else X
    m = get_metric("euclidean")
    centre = m.centre(X)
    for prepared in (False, True):
        Qk = m.prepare(Q, centre, "query")["rows"] if prepared else Q
        Rk = m.prepare(X, centre, "ref")["rows"] if prepared else X
        v, i = fused_candidates(Qk, Rk, 8, metric_name="euclidean", prepared=prepared, exclude_self=True,
                                self_offset=self_offset, ref_offset=ref_offset, **BLOCKS)
        scores = (Qk.double() @ Rk.double().T) if prepared else m.exact_scores(Q, X.unsqueeze(0)).double()
        own = torch.arange(Q.shape[0], device=DEVICE) + self_offset - ref_offset
        inside = (own >= 0) & (own < X.shape[0])
        scores[inside.nonzero().squeeze(1), own[inside]] = float("inf")
        assert not (i == (own + ref_offset)[:, None]).any()
        torch.testing.assert_close(v.double(), torch.sort(scores, dim=1).values[:, :8], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("prepared", [False, True])
def test_rotated_visits_keep_the_c_best_and_skip_each_rows_own_column(prepared):
    # anchors start each block's scan anywhere and wrap around; self_cols name each row's own
    # reference in any order: the kept scores are still the C smallest of the others
    X = torch.from_numpy(_data("random", 150 * SCALE, 5, 27)).to(DEVICE)
    n = X.shape[0]
    perm = torch.from_numpy(np.random.default_rng(28).permutation(n)).to(DEVICE)
    Q = X[perm]
    m = get_metric("euclidean")
    centre = m.centre(X)
    Qk = m.prepare(Q, centre, "query")["rows"] if prepared else Q
    Rk = m.prepare(X, centre, "ref")["rows"] if prepared else X
    anchors = torch.from_numpy(np.random.default_rng(29).integers(0, n, n)).to(DEVICE)
    for splits in (1, 2):
        v, i = fused_candidates(Qk, Rk, 8, metric_name="euclidean", prepared=prepared, self_cols=perm, anchors=anchors,
                                splits=splits, **BLOCKS)
        scores = (Qk.double() @ Rk.double().T) if prepared else m.exact_scores(Q, X.unsqueeze(0)).double()
        scores[torch.arange(n, device=DEVICE), perm] = float("inf")
        assert not (i == perm[:, None]).any()
        torch.testing.assert_close(v.double(), torch.sort(scores, dim=1).values[:, :8], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(scores.gather(1, i), v.double(), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="anchors"):
        fused_candidates(Qk, Rk, 8, metric_name="euclidean", prepared=prepared, anchors=anchors[:3])


@pytest.mark.parametrize("d", [65, 81, *slow_interpreted(71, 80)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_features_past_one_dot_step_are_added_as_fmas(d, with_bias):
    # 65-80 dot features: one 64-wide tl.dot step and the last d - 64 as FMAs; 81 takes 16-wide steps
    X = torch.from_numpy(_data("random", 70 * SCALE, d, 31)).to(DEVICE)
    Q = torch.from_numpy(_data("random", 19 * SCALE, d, 32)).to(DEVICE)
    bias = (X * X).sum(1) if with_bias else None
    for splits in (1, 2):
        v, i = fused_candidates(Q, -2.0 * X, 8, metric_name="euclidean", prepared=True, ref_bias=bias, splits=splits, **BLOCKS)
        scores = Q.double() @ (-2.0 * X.double()).T + (bias.double()[None, :] if with_bias else 0)
        torch.testing.assert_close(v.double(), torch.sort(scores, dim=1).values[:, :8], rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(scores.gather(1, i), v.double(), rtol=1e-5, atol=1e-4)


def test_dot_operands_are_aligned_and_their_layout_does_not_change_the_candidates():
    X = torch.from_numpy(_data("random", 70 * SCALE, 66, 34)).to(DEVICE)
    A = _aligned_rows(X[:, :65])
    assert A.stride() == (80, 1) and torch.equal(A, X[:, :65]) and A.data_ptr() % (4 * ROW_ALIGN) == 0
    assert _aligned_rows(A) is A
    Q = torch.from_numpy(_data("random", 19 * SCALE, 65, 35)).to(DEVICE)
    bias = (X[:, :65] * X[:, :65]).sum(1)
    # a strided view (rows 66 apart), a transposed copy and a contiguous copy: the same candidates
    layouts = [(Q, X[:, :65]), (Q.T.contiguous().T, X[:, :65].T.contiguous().T), (Q.contiguous(), X[:, :65].contiguous())]
    results = [fused_candidates(q, r, 8, metric_name="euclidean", prepared=True, ref_bias=bias, **BLOCKS) for q, r in layouts]
    for v, i in results[1:]:
        assert torch.equal(v, results[0][0]) and torch.equal(i, results[0][1])


@pytest.mark.parametrize("metric", ["euclidean", *slow_interpreted("cosine")])
@pytest.mark.parametrize("d", [65, *slow_interpreted(72)])
def test_searches_past_one_dot_step_equal_the_torch_twin(metric, d):
    X = _data("duplicates", 90 * SCALE if ON_GPU else 40, d, 33)
    for query in (None, X[:7]):
        fused = kneighbors(X, query, 5, metric=metric, device=DEVICE, backend="triton")
        twin = kneighbors(X, query, 5, metric=metric, device=DEVICE, backend="torch")
        np.testing.assert_array_equal(fused[1], twin[1])
        np.testing.assert_array_equal(fused[0], twin[0])


@slow_when_interpreted
def test_tuning_records_a_shape_per_class_and_keeps_the_results(tmp_path, monkeypatch):
    from gpumine.neighbors.engine import _fused_tuning as knn_tuning
    from gpumine.neighbors import tune_knn

    monkeypatch.setenv(knn_tuning.CACHE_ENV, str(tmp_path))
    X = _data("random", 200 * SCALE if ON_GPU else 30, 6, 35)
    tuned = tune_knn(X, None, 3, device=DEVICE)
    assert len(tuned) == 1
    (key, entry), = tuned.items()
    assert entry["blocks"] in knn_tuning.candidate_blocks(True, 8) and len(entry["ms"]) >= 2
    assert knn_tuning.lookup(key) == entry["blocks"]
    assert tune_knn(X, None, 3, device=DEVICE) == {}  # cached: nothing to tune
    tuned_result = kneighbors(X, k=3, device=DEVICE, backend="triton")
    twin = kneighbors(X, k=3, device=DEVICE, backend="torch")
    np.testing.assert_array_equal(tuned_result[1], twin[1])
    np.testing.assert_array_equal(tuned_result[0], twin[0])


def _left_out_minimum(exact, index, exclude_self):
    kept = torch.zeros_like(exact, dtype=torch.bool)
    kept.scatter_(1, index.clamp(min=0), index >= 0)
    if exclude_self:
        kept.fill_diagonal_(True)
    return torch.where(kept, torch.inf, exact).amin(1)


@pytest.mark.parametrize("mode", ["merged", "anchored"])
def test_the_floor_bounds_every_reference_left_out_of_merged_or_rotated_lists(mode):
    # integer data scored by direct differences: the kernel's scores are the exact ones
    n_q, n_r, d = 21 * SCALE, 150 * SCALE, 6
    R = torch.from_numpy(_data("integer", n_r, d, 42)).to(DEVICE)
    Q = torch.from_numpy(_data("integer", n_q, d, 41)).to(DEVICE)
    opts = dict(metric_name="euclidean", floor=True, **BLOCKS)
    if mode == "merged":  # three splits' lists merged to the best 8: what the merge drops is left out too
        v, i, floor = fused_candidates(Q, R, 8, splits=3, **opts)
    else:  # each query block starts at its own tile and wraps around
        anchors = torch.from_numpy(np.random.default_rng(3).integers(0, n_r, n_q)).to(DEVICE)
        v, i, floor = fused_candidates(Q, R, 8, splits=1, anchors=anchors, **opts)
    least = _left_out_minimum(get_metric("euclidean").exact_scores(Q, R.unsqueeze(0)), i, False)
    assert torch.all(floor <= least) and torch.all(floor >= v[:, -1])
    if mode == "anchored":  # one list: the floor is the least score left out
        assert torch.equal(floor, least)


def test_the_certificates_bound_covers_what_merged_launches_dropped(monkeypatch):
    # references in several launches whose lists are merged (see the test below): every reference
    # left out of the merged list, by a launch or by the merge, scores at least the bound
    from gpumine.neighbors.engine import _plan, _search

    X = _data("integer", 300, 2, 44)  # two features: scored by direct differences, exactly
    Q = X[:16] + np.float32(0.5)
    found = []
    real = _search._candidates_fused

    def keep(Qb, *args, **kwargs):
        out = real(Qb, *args, **kwargs)
        found.append((Qb, out[1], out[2]))
        return out

    monkeypatch.setattr(_search, "_candidates_fused", keep)
    monkeypatch.setattr(_plan, "_FUSED_MIN_LAUNCH_ROWS", 100)
    monkeypatch.setattr(_plan, "_fused_launch_bytes_per_row", lambda d: 1 << 30)
    kneighbors(X, Q, 6, device=DEVICE, backend="triton")
    assert found
    R = torch.from_numpy(X).to(DEVICE)
    for Qb, index, bound in found:
        exact = get_metric("euclidean").exact_scores(Qb, R.unsqueeze(0))
        assert torch.all(bound <= _left_out_minimum(exact, index, False))


@pytest.mark.parametrize("exclude_self", [False, True])
def test_unmerged_split_lists_hold_each_splits_best_and_bound_the_rest(exclude_self):
    from gpumine.core.select import topk_by_score_then_index

    n_q, n_r, d, splits = 21 * SCALE, 150 * SCALE, 6, 3
    R = torch.from_numpy(_data("integer", n_r, d, 42)).to(DEVICE)  # integer data: tied scores
    Q = R if exclude_self else torch.from_numpy(_data("integer", n_q, d, 41)).to(DEVICE)
    opts = dict(metric_name="euclidean", splits=splits, exclude_self=exclude_self, **BLOCKS)
    merged = fused_candidates(Q, R, 8, **opts)
    v, i, floor = fused_candidates(Q, R, 8, merge_splits=False, floor=True, **opts)
    assert v.shape == (Q.shape[0], splits * 8)  # 150 references: three splits of whole tiles
    blocks = v.view(Q.shape[0], splits, 8)
    assert torch.all(blocks[..., 1:] >= blocks[..., :-1])  # each split's block ascending
    merged_again = topk_by_score_then_index(v, i, 8)
    assert torch.equal(merged_again[0], merged[0]) and torch.equal(merged_again[1], merged[1])
    # the floor is the least score left out of every split's list: the bound the certificate uses
    exact = get_metric("euclidean").exact_scores(Q, R.unsqueeze(0))
    torch.testing.assert_close(_left_out_minimum(exact, i, exclude_self), floor, rtol=1e-6, atol=1e-6)
    assert torch.all(floor >= v.view(Q.shape[0], splits, 8).amax(2).amin(1))  # no looser than the old bound


@pytest.mark.parametrize("kind", slow_interpreted("random", "duplicates"))
def test_search_with_unmerged_reference_splits_equals_the_torch_twin(kind):
    # few queries against enough references that the launcher splits the references
    X = _data(kind, 8800 if ON_GPU else 2100, 65, 43)  # >= 2 splits of 8 tiles of 128 references
    stats = {}
    Xt = torch.from_numpy(X).to(DEVICE)
    dev = torch.device(DEVICE)
    for query in (Xt[:100], None) if ON_GPU else (Xt[:100],):
        q = Xt if query is None else query
        fused = knn_search(Xt, q, 7, get_metric("euclidean"), exclude_self=query is None, device=dev, budget_bytes=2**28,
                           result_device=dev, stats=stats, backend="triton")
        twin = knn_search(Xt, q, 7, get_metric("euclidean"), exclude_self=query is None, device=dev, budget_bytes=2**28,
                          result_device=dev, backend="torch")
        assert stats["selection"] == "fused"
        assert torch.equal(fused[1], twin[1]) and torch.equal(fused[0], twin[0])


def _candidate_lists(n, width, n_ref, seed, pad_share=0.15):
    g = torch.Generator().manual_seed(seed)
    index = torch.stack([torch.randperm(n_ref, generator=g)[:width] for _ in range(n)]) if n else torch.empty((0, width), dtype=torch.int64)
    pad = torch.rand(index.shape, generator=g) < pad_share
    return torch.where(pad, torch.full_like(index, -1), index).to(DEVICE)


@pytest.mark.parametrize("metric,d", [("euclidean", 1), ("manhattan", 3), *slow_interpreted(("sqeuclidean", 5), ("euclidean", 16))])
@pytest.mark.parametrize("width,k", [(8, 7), (64, 20), *slow_interpreted((13, 13), (32, 5))])
@pytest.mark.parametrize("own", [False, True])
def test_rerank_kernel_scores_and_selects_as_the_torch_twin_bit_for_bit(metric, d, width, k, own):
    from gpumine.neighbors.engine._rerank_kernel import rerank_select, rerank_select_torch

    n, n_ref = 37 * SCALE, 90
    RT = torch.from_numpy(_data("integer", n_ref, d, 51).T.copy()).to(DEVICE)  # tied scores
    RT[0, 4] = -0.0
    Q = torch.from_numpy(_data("integer", n, d, 52)).to(DEVICE)
    index = _candidate_lists(n, width, n_ref, 53)
    mine = index[:, 0].clamp(min=0).contiguous() if own else None
    kw = dict(Q=Q, RT=RT, metric_name=metric, own=mine)
    got, twin = rerank_select(index, k, **kw), rerank_select_torch(index, k, **kw)
    assert torch.equal(got[1], twin[1])
    assert torch.equal(got[0].view(torch.int32), twin[0].view(torch.int32))
    if own:
        assert not (got[1] == mine[:, None]).any()


def test_rerank_kernel_with_given_scores_orders_nan_zero_signs_and_padding_as_the_twin():
    from gpumine.neighbors.engine._rerank_kernel import rerank_select, rerank_select_torch

    n, width = 29, 24
    index = _candidate_lists(n, width, 500, 54, pad_share=0.3)
    g = torch.Generator().manual_seed(55)
    scores = (torch.randn((n, width), generator=g) * 4).round().to(DEVICE)  # many equal scores
    scores[0, :3] = torch.tensor([float("nan"), -0.0, 0.0])
    scores[1] = float("inf")
    for k in (1, 10, width):
        got, twin = rerank_select(index, k, scores=scores), rerank_select_torch(index, k, scores=scores)
        assert torch.equal(got[1], twin[1])
        assert torch.equal(got[0].view(torch.int32), twin[0].view(torch.int32))
    empty = rerank_select(index[:0], 3, scores=scores[:0])
    assert empty[0].shape == (0, 3) and empty[1].shape == (0, 3)
    with pytest.raises(ValueError, match="k must be between 1 and the 24"):
        rerank_select(index, 25, scores=scores)
    with pytest.raises(ValueError, match="exceed the kernel's 64"):
        wide = _candidate_lists(3, 65, 500, 56)
        rerank_select(wide, 3, scores=torch.zeros(wide.shape, device=DEVICE))
    with pytest.raises(ValueError, match="pass scores"):
        rerank_select(index, 3, metric_name="cosine")


def _references(X, layout):
    """Row-major references (n_ref, d) on the device as a contiguous, transposed or column-sliced tensor."""
    X = torch.from_numpy(X).to(DEVICE)
    if layout == "transposed":  # feature stride 1 no more: strides (1, n_ref)
        return X.T.contiguous().T
    if layout == "sliced":  # row stride 2 d
        return torch.cat([X, X + 1.0], 1)[:, : X.shape[1]]
    return X.contiguous()


@pytest.mark.parametrize("metric,d,width,k,own,kind,layout", [
    ("euclidean", 17, 8, 7, True, "integer", "contiguous"),
    ("manhattan", 33, 13, 13, False, "random", "transposed"),
    ("sqeuclidean", 65, 32, 5, True, "random", "contiguous"),
    ("euclidean", 65, 64, 20, False, "integer", "sliced"),
    ("manhattan", 16, 8, 3, True, "random", "sliced"),
    ("euclidean", 5, 13, 4, False, "random", "transposed"),
])
def test_rerank_kernel_scores_row_major_references_at_any_d_as_the_torch_twin_bit_for_bit(metric, d, width, k, own, kind, layout):
    # random data: the summation order shows in the last bits at d > 16 (torch's sum(-1) would not do)
    from gpumine.neighbors.engine._rerank_kernel import rerank_select, rerank_select_torch

    n, n_ref = 37 * SCALE, 90
    X = _data(kind, n_ref, d, 61)
    X[4, 0] = -0.0
    R = _references(X, layout)
    Q = torch.from_numpy(_data(kind, n, d, 62)).to(DEVICE)
    Q[0, 0] = -0.0
    index = _candidate_lists(n, width, n_ref, 63)
    mine = index[:, 0].clamp(min=0).contiguous() if own else None
    kw = dict(Q=Q, R=R, metric_name=metric, own=mine)
    got, twin = rerank_select(index, k, **kw), rerank_select_torch(index, k, **kw)
    assert torch.equal(got[1], twin[1])
    assert torch.equal(got[0].view(torch.int32), twin[0].view(torch.int32))
    # the twin's scores are Metric.exact_scores of the gathered rows
    ok = twin[1] >= 0
    rows = R.index_select(0, twin[1].clamp(min=0).reshape(-1)).view(n, k, d)
    exact = get_metric(metric).exact_scores(Q, rows)
    assert torch.equal(torch.where(ok, exact, torch.inf).view(torch.int32), twin[0].view(torch.int32))
    if own:
        assert not (got[1] == mine[:, None]).any()
    if d <= 16:  # feature-major and row-major references give the same result
        from_rt = rerank_select(index, k, Q=Q, RT=R.T, metric_name=metric, own=mine)
        assert torch.equal(from_rt[1], got[1]) and torch.equal(from_rt[0].view(torch.int32), got[0].view(torch.int32))


def test_rerank_reference_arguments_are_checked_with_the_fix_named():
    from gpumine.neighbors.engine._rerank_kernel import RERANK_MAX_FEATURES, RERANK_ROW_MAJOR_MAX_FEATURES, rerank_select, rerank_select_torch

    assert RERANK_MAX_FEATURES == 16 and RERANK_ROW_MAJOR_MAX_FEATURES is None
    index = _candidate_lists(3, 8, 40, 64)
    Q = torch.zeros((3, 17), device=DEVICE)
    R = torch.zeros((40, 17), device=DEVICE)
    for fn in (rerank_select, rerank_select_torch):
        with pytest.raises(ValueError, match="pass row-major references R"):
            fn(index, 3, Q=Q, RT=R.T, metric_name="euclidean")
        with pytest.raises(ValueError, match="exactly one of RT .* and R"):
            fn(index, 3, Q=Q, RT=R.T, R=R, metric_name="euclidean")
        with pytest.raises(ValueError, match="exactly one of RT .* and R"):
            fn(index, 3, Q=Q, metric_name="euclidean")
        with pytest.raises(ValueError, match="R must be row-major"):
            fn(index, 3, Q=Q, R=R.T, metric_name="euclidean")
        with pytest.raises(ValueError, match="float32 references R"):
            fn(index, 3, Q=Q, R=R.double(), metric_name="euclidean")


@pytest.mark.parametrize("prepared", [False, True])
def test_wide_offsets_give_the_same_candidates(prepared, monkeypatch):
    # the 64-bit offset variant (operands of 2^31 elements or more) forced on small operands
    from gpumine.neighbors.engine import _fused_kernel as fused

    X = torch.from_numpy(_data("duplicates", 90 * SCALE, 5, 51)).to(DEVICE)
    Q = X[: 21 * SCALE]
    m = get_metric("euclidean")
    if prepared:
        centre = m.centre(X)
        Q, X = m.prepare(Q, centre, "query")["rows"], m.prepare(X, centre, "ref")["rows"]
    narrow = fused_candidates(Q, X, 8, metric_name="euclidean", prepared=prepared, exclude_self=True, splits=2, **BLOCKS)
    monkeypatch.setattr(fused, "WIDE_OFFSETS_FROM", 0)
    wide = fused_candidates(Q, X, 8, metric_name="euclidean", prepared=prepared, exclude_self=True, splits=2, **BLOCKS)
    assert torch.equal(narrow[0], wide[0]) and torch.equal(narrow[1], wide[1])


@pytest.mark.parametrize("with_bias", [False, True])
def test_split_operands_written_in_row_chunks_equal_one_chunk(with_bias, monkeypatch):
    from gpumine.neighbors.engine import _fused_kernel

    rng = np.random.default_rng(31)
    Q = torch.from_numpy(rng.standard_normal((23, 5)).astype(np.float32)).to(DEVICE)
    R = torch.from_numpy(rng.standard_normal((37, 5)).astype(np.float32) * 1e3).to(DEVICE)
    bias = (R * R).sum(1) if with_bias else None
    whole = split_tf32x3(Q, R, bias, 32)
    monkeypatch.setattr(_fused_kernel, "SPLIT_CHUNK_ROWS", 7)
    chunked = split_tf32x3(Q, R, bias, 32)
    for a, b in zip(whole, chunked):
        assert torch.equal(a, b)


def test_resident_references_over_the_budget_run_in_several_launches_with_one_launchs_results(monkeypatch):
    # the budget bounds each launch's copies of the resident references (split operands, curve
    # order): past it the references go in several launches whose lists are merged
    from gpumine.neighbors.engine import _plan, _search

    X = _data("duplicates", 300, 8, 41)
    Q = X[:16] + np.float32(0.25)
    one = kneighbors(X, Q, 6, device=DEVICE, backend="triton")
    launches = []
    real = _search.fused_candidates

    def counting(*args, **kwargs):
        launches.append(args[1].shape[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(_search, "fused_candidates", counting)
    monkeypatch.setattr(_plan, "_FUSED_MIN_LAUNCH_ROWS", 100)
    monkeypatch.setattr(_plan, "_fused_launch_bytes_per_row", lambda d: 1 << 30)
    several = kneighbors(X, Q, 6, device=DEVICE, backend="triton")
    assert launches and max(launches) <= 100 and sum(launches) >= 300
    np.testing.assert_array_equal(several[1], one[1])
    np.testing.assert_array_equal(several[0], one[0])
    twin = kneighbors(X, Q, 6, device=DEVICE, backend="torch")
    np.testing.assert_array_equal(several[1], twin[1])


def test_launch_rows_fit_the_budget():
    from gpumine.neighbors.engine._plan import _FUSED_MIN_LAUNCH_ROWS, _fused_launch_bytes_per_row, fused_launch_rows

    per_row = _fused_launch_bytes_per_row(8)
    assert fused_launch_rows(1000, 8, 1000 * per_row) == 1000
    rows = fused_launch_rows(50_000_000, 8, 1 << 30)
    assert _FUSED_MIN_LAUNCH_ROWS <= rows < 50_000_000 and rows * per_row <= 1 << 30
    assert fused_launch_rows(50_000_000, 8, 1) == _FUSED_MIN_LAUNCH_ROWS


@pytest.mark.parametrize("deferred_max", [0, 10**6])
def test_rows_a_spare_search_leaves_open_are_settled_by_retries_or_the_float64_scan(deferred_max, monkeypatch):
    # a grid of tenths (not whole numbers, so the float64 order runs, its k + 1 lists with a
    # spare entry) with repeated points: the first pass leaves tied rows open, which go to the
    # retries, or (up to SPARE_DEFERRED_MAX_ROWS of them) straight to the float64 order's scan
    from gpumine.neighbors.engine import _search

    monkeypatch.setattr(_search, "SPARE_DEFERRED_MAX_ROWS", deferred_max)
    rng = np.random.default_rng(7)
    X = (rng.integers(0, 3, (60 * SCALE, 4)) * 0.1).astype(np.float32)
    Xt, dev, metric = torch.from_numpy(X).to(DEVICE), torch.device(DEVICE), get_metric("euclidean")
    stats = {}
    found = knn_search(Xt, Xt, 3, metric, exclude_self=True, device=dev, budget_bytes=2**28, result_device=dev, stats=stats,
                       backend="triton", as_distance=True)
    assert stats["selection"] == "fused"
    assert (stats["rows_deferred"] > 0) == (deferred_max > 0) and (stats["rows_retried"] > 0) == (deferred_max == 0)
    twin = knn_search(Xt, Xt, 3, metric, exclude_self=True, device=dev, budget_bytes=2**28, result_device=dev,
                      backend="torch", as_distance=True)
    assert torch.equal(found[1], twin[1]) and torch.equal(found[0], twin[0])
    ref_d, ref_i, _ = brute_force_knn(X.astype(np.float64), X.astype(np.float64), 3, exclude_self=True)
    np.testing.assert_array_equal(found[1].cpu().numpy(), ref_i)
    np.testing.assert_array_equal(found[0].cpu().numpy(), ref_d.astype(np.float32))
