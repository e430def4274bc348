"""Exact-selection Triton kernel vs its torch twin and a float64 NumPy oracle.

Collected directly on a GPU machine (``pytest tests/neighbors/engine/triton_exact_select_cases.py``),
and run by ``test_triton_kernels_under_the_interpreter.py`` in a child process with ``TRITON_INTERPRET=1``
on machines without one (small shapes: the interpreter is slow).
"""

import numpy as np
import pytest
import torch

from gpumine.neighbors.engine._exact_select_kernel import (EXACT_SELECT_MAX_K, exact_select, exact_select_checked, exact_select_torch,
                                                          placed_supported)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ON_GPU = DEVICE == "cuda"
SCALE = 16 if ON_GPU else 1


def _oracle(X, Y, k, metric, exclude_self=False, self_offset=0):
    """float64 NumPy: terms summed left to right per 16-feature chunk, chunks left to right; ties by index."""
    X64, Y64 = X.astype(np.float64), Y.astype(np.float64)
    terms = X64[:, None, :] - Y64[None, :, :]
    terms = np.abs(terms) if metric == "manhattan" else terms * terms
    total = np.zeros(terms.shape[:2])
    for c0 in range(0, X.shape[1], 16):
        part = np.zeros(terms.shape[:2])
        for f in range(c0, min(c0 + 16, X.shape[1])):
            part = part + terms[:, :, f]
        total = total + part
    if exclude_self:
        for i in range(X.shape[0]):
            if 0 <= i + self_offset < Y.shape[0]:
                total[i, i + self_offset] = np.inf
    order = np.lexsort((np.broadcast_to(np.arange(Y.shape[0]), total.shape), total), axis=1)[:, :k]
    scores = np.take_along_axis(total, order, 1)
    index = np.where(np.isinf(scores), -1, order)
    if k > Y.shape[0]:
        pad = k - Y.shape[0]
        scores = np.hstack([scores, np.full((X.shape[0], pad), np.inf)])
        index = np.hstack([index, np.full((X.shape[0], pad), -1)])
    return scores, index


def _check(X, Y, k, metric, **kw):
    QT = torch.tensor(X.T.copy(), device=DEVICE)
    RT = torch.tensor(Y.T.copy(), device=DEVICE)
    scores, index = exact_select(QT, RT, k, metric, **kw)
    same = {key: kw[key] for key in ("exclude_self", "self_offset") if key in kw}
    twin_scores, twin_index = exact_select_torch(QT, RT, k, metric, **same)
    want_scores, want_index = _oracle(X, Y, k, metric, **same)
    assert torch.equal(index.cpu(), twin_index.cpu())
    assert torch.equal(scores.cpu(), twin_scores.cpu())
    np.testing.assert_array_equal(index.cpu().numpy(), want_index)
    np.testing.assert_array_equal(scores.cpu().numpy(), want_scores)


@pytest.mark.parametrize("metric", ["sqeuclidean", "manhattan"])
def test_integer_grid_with_duplicates_self_excluded(metric):
    rng = np.random.default_rng(0)
    X = rng.integers(0, 3, size=(37 * SCALE, 3)).astype(np.float32)  # many exact ties and duplicate rows
    _check(X, X, 5, metric, exclude_self=True, block_m=16, block_n=32)


def test_more_than_one_chunk_of_features_float64_data():
    rng = np.random.default_rng(1)
    X = (1e6 + rng.standard_normal((29 * SCALE, 19))).astype(np.float64)
    Y = (1e6 + rng.standard_normal((45 * SCALE, 19))).astype(np.float64)
    _check(X, Y, 7, "euclidean", block_m=16, block_n=32)


def test_splits_merge_and_k_above_the_references():
    rng = np.random.default_rng(2)
    X = rng.integers(-2, 2, size=(5, 2)).astype(np.float32)
    Y = rng.integers(-2, 2, size=(70, 2)).astype(np.float32)
    _check(X, Y, 9, "sqeuclidean", splits=3, block_m=16, block_n=32)
    _check(X, Y[:6], 9, "sqeuclidean", block_m=16, block_n=32)


def test_self_offset_of_a_query_block():
    rng = np.random.default_rng(3)
    Y = rng.standard_normal((50, 4)).astype(np.float32)
    _check(Y[20:33], Y, 4, "sqeuclidean", exclude_self=True, self_offset=20, block_m=16, block_n=32)


def test_all_points_equal_and_largest_k():
    X = np.ones((40, 2), np.float32)
    _check(X, X, EXACT_SELECT_MAX_K if ON_GPU else 33, "sqeuclidean", exclude_self=True, block_m=16, block_n=32)


def test_argument_errors():
    QT = torch.zeros((2, 3), device=DEVICE)
    with pytest.raises(ValueError, match="metric"):
        exact_select(QT, QT, 1, "cosine")
    with pytest.raises(ValueError, match="k must be"):
        exact_select(QT, QT, EXACT_SELECT_MAX_K + 1, "sqeuclidean")
    with pytest.raises(ValueError, match="feature-major"):
        exact_select(QT, torch.zeros((3, 3), device=DEVICE), 1, "sqeuclidean")


def _reordered(X, Y, k, metric, exclude_self, seed, **blocks):
    """exact_select over rows given in a shuffled order, with ids and anchors: results in the original order."""
    rng = np.random.default_rng(seed)
    r_perm = rng.permutation(Y.shape[0])
    q_perm = r_perm if exclude_self else rng.permutation(X.shape[0])
    anchors = rng.integers(0, Y.shape[0], size=X.shape[0])
    as_ids = lambda a: torch.tensor(a, dtype=torch.int32, device=DEVICE)  # noqa: E731
    scores, index = exact_select(torch.tensor(X[q_perm].T.copy(), device=DEVICE), torch.tensor(Y[r_perm].T.copy(), device=DEVICE),
                                 k, metric, exclude_self=exclude_self, ref_ids=as_ids(r_perm), query_ids=as_ids(q_perm),
                                 anchors=as_ids(anchors), **blocks)
    back = torch.empty_like(index)  # rows come back in the order given: to the original order
    back_scores = torch.empty_like(scores)
    back[torch.as_tensor(q_perm, device=DEVICE)] = index
    back_scores[torch.as_tensor(q_perm, device=DEVICE)] = scores
    return back_scores, back


@pytest.mark.parametrize("exclude_self", [True, False])
def test_rows_in_another_order_give_the_same_result(exclude_self):
    rng = np.random.default_rng(4)
    X = rng.integers(0, 3, size=(45 * SCALE, 2)).astype(np.float32)  # ties everywhere: the id rule decides
    Y = X if exclude_self else rng.integers(0, 3, size=(70 * SCALE, 2)).astype(np.float32)
    scores, index = _reordered(X, Y, 6, "sqeuclidean", exclude_self, 5, block_m=16, block_n=32)
    want_scores, want_index = _oracle(X, Y, 6, "sqeuclidean", exclude_self)
    np.testing.assert_array_equal(index.cpu().numpy(), want_index)
    np.testing.assert_array_equal(scores.cpu().numpy(), want_scores)


def test_reordered_rows_need_ids_and_anchors_together():
    QT = torch.zeros((2, 3), device=DEVICE)
    with pytest.raises(ValueError, match="go together"):
        exact_select(QT, QT, 1, "sqeuclidean", ref_ids=torch.arange(3, device=DEVICE))


@pytest.mark.parametrize("curve", [True, False])
@pytest.mark.parametrize("self_search", [True, False])
def test_engine_search_in_query_blocks_equals_the_oracle(curve, self_search, monkeypatch):
    from gpumine.core.distance import get_metric
    from gpumine.neighbors.engine import _exact_select

    monkeypatch.setattr(_exact_select, "EXACT_SELECT_CURVE", curve)
    monkeypatch.setattr(_exact_select, "EXACT_SELECT_CURVE_MIN_PAIRS", 0)  # the curve order at any size
    rng = np.random.default_rng(6)
    Y = (rng.integers(0, 4, size=(60 * SCALE, 3)) + 1e3).astype(np.float32)
    X = Y if self_search else Y[: 33 * SCALE] + np.float32(0.5)
    ref = torch.tensor(Y, device=DEVICE)
    query = ref if self_search else torch.tensor(X, device=DEVICE)
    # a working memory of a few query rows per block
    keys, index = _exact_select.exact_select_search(ref, query, 5, get_metric("euclidean"), exclude_self=self_search,
                                                    budget_bytes=64 * 32 * 8 * 7)
    want_scores, want_index = _oracle(X, Y, 5, "sqeuclidean", self_search)
    np.testing.assert_array_equal(index.cpu().numpy(), want_index)
    np.testing.assert_array_equal(keys.cpu().numpy(), want_scores)


def _reported(scores64, metric):
    """What the engine reports for float32 data: the float64 score rounded, its IEEE square root for euclidean."""
    scores = scores64.astype(np.float32)
    return np.sqrt(scores) if metric == "euclidean" else scores


@pytest.mark.parametrize("metric, kind, k", [("euclidean", "ties", 7), ("sqeuclidean", "float", 1), ("euclidean", "float", 16),
                                             ("euclidean", "wide", 5), ("euclidean", "narrow", 20), ("sqeuclidean", "narrow_ties", 30)])
@pytest.mark.parametrize("self_search", [True, False])
def test_checked_search_equals_the_oracle_and_reads_the_extremes(metric, kind, k, self_search, monkeypatch):
    from gpumine.neighbors.engine import _exact_select_kernel

    monkeypatch.setattr(_exact_select_kernel, "CHECKED_NARROW_MIN_QUERIES", 1)  # the narrow tiles at this size
    rng = np.random.default_rng(3)
    # narrow: the tiles of 32 references (checked_blocks)
    n, d = 29 * SCALE + 3, {"ties": 3, "float": 5, "wide": 35, "narrow": 12, "narrow_ties": 20}[kind]
    if kind in ("ties", "narrow_ties"):  # integer grid with duplicate rows: many exact ties
        Y = rng.integers(-2, 2, size=(n, d)).astype(np.float32)
    else:
        Y = (rng.standard_normal((n, d)) * 1e3).astype(np.float32)
    X = Y if self_search else (Y[: 11 * SCALE] + np.float32(0.25))
    RT = torch.tensor(Y.T.copy(), device=DEVICE)
    QT = RT if self_search else torch.tensor(X.T.copy(), device=DEVICE)
    scores, index, extremes = exact_select_checked(QT, RT, k, metric, exclude_self=self_search, as_distance=True)
    want_scores, want_index = _oracle(X, Y, k, metric, exclude_self=self_search)
    np.testing.assert_array_equal(index.cpu().numpy(), want_index)
    np.testing.assert_array_equal(scores.cpu().numpy(), _reported(want_scores, metric))
    values = np.abs(np.concatenate([Y.ravel(), X.ravel()]))
    found = extremes.cpu().numpy()
    assert found[:, 0].sum() == 0
    assert found[:, 1].max() == values.max()
    assert found[:, 2].min() == values[values > 0].min()


def test_checked_search_counts_every_non_finite_value():
    X = np.ones((21, 4), dtype=np.float32)
    X[3, 1], X[20, 3], X[7, 0] = np.nan, np.inf, -np.inf
    RT = torch.tensor(X.T.copy(), device=DEVICE)
    Q = np.zeros((5, 4), dtype=np.float32)
    Q[4, 2] = np.nan
    _, _, extremes = exact_select_checked(torch.tensor(Q.T.copy(), device=DEVICE), RT, 3, "sqeuclidean")
    assert extremes[:, 0].sum().item() == 4
    assert extremes[:, 1].max().item() == 1.0  # the largest finite magnitude


def test_checked_search_argument_errors():
    RT = torch.zeros((3, 10), device=DEVICE)
    with pytest.raises(ValueError, match="float32"):
        exact_select_checked(RT.double(), RT.double(), 2, "euclidean")
    with pytest.raises(ValueError, match="at least k"):
        exact_select_checked(RT, RT, 11, "euclidean")
    assert placed_supported(64) and not placed_supported(EXACT_SELECT_MAX_K)


def _near_ties(rng, n, d):
    """Rows 1 + e (e a few float32 steps): float32 scores from the origin tie where the float64 ones differ."""
    return (1.0 + rng.integers(0, 8, size=(n, d)) * np.float32(2.0**-23)).astype(np.float32)


@pytest.mark.parametrize("kind, d, screen", [(kind, 4, screen) for kind in ("near_ties", "overflowing_squares", "subnormal", "mixed_scales")
                                             for screen in (True, False)] + [("near_ties", 17, True), ("near_ties", 32, True)])
def test_float32_screen_keeps_every_pair_that_may_enter(kind, d, screen):
    rng = np.random.default_rng(8)
    n = 40 * SCALE + 5
    if kind == "near_ties":
        Y = _near_ties(rng, n, d)
        X = np.vstack([np.zeros((3, d), np.float32), _near_ties(rng, 9, d) * np.float32(0.5)])
    elif kind == "overflowing_squares":  # float32 squares overflow, float64 ones do not
        Y = (rng.integers(1, 9, size=(n, d)) * 1e19).astype(np.float32)
        X = np.vstack([Y[:7], -Y[7:12], np.zeros((2, d), np.float32)])
    elif kind == "subnormal":  # float32 terms in (or flushed from) the subnormal range
        Y = (rng.integers(0, 6, size=(n, d)) * 1e-40).astype(np.float32)
        X = Y[:11] + np.float32(1e-45)
    else:  # a few huge rows among small ones: unfilled, overflowing and tight bounds in one search
        Y = rng.standard_normal((n, d)).astype(np.float32)
        Y[::7] *= np.float32(3e19)
        X = Y[:13]
    for metric in ("sqeuclidean", "manhattan") if d == 4 else ("sqeuclidean",):  # wider: the interpreter is slow
        _check(X, Y, 6, metric, block_m=2, block_n=16, screen=screen)
        _check(Y, Y, 6, metric, exclude_self=True, block_m=2, block_n=16, screen=screen)
    scores, index = _reordered(Y, Y, 6, "sqeuclidean", True, 9, block_m=2, block_n=16)  # screened by default
    want_scores, want_index = _oracle(Y, Y, 6, "sqeuclidean", exclude_self=True)
    np.testing.assert_array_equal(index.cpu().numpy(), want_index)
    np.testing.assert_array_equal(scores.cpu().numpy(), want_scores)


@pytest.mark.parametrize("screen", [True, False])
def test_float32_screen_keeps_a_pair_whose_float32_score_rounds_above_the_worst(screen):
    # rows 1 + m 2^-12, scored from the origin: the better one's float64 score is the lower
    # (7.98608822 against 7.98608845), but its float32 sum (7.9860888) is above the worse one's
    # score rounded to float32 (7.9860883): a bound without margin would screen it out
    better = 1 + np.array([-17, -15, -38, 6, 20, -27, 12, 30]) * 2.0**-12
    worse = 1 + np.array([-28, 11, -35, 4, 2, 7, 36, -26]) * 2.0**-12
    far = np.full((10, 8), 5.0)
    # the worse rows fill each list in the first tile of 16 references, the better ones come in the second
    Y = np.vstack([[worse] * 6, far, [better] * 3, far]).astype(np.float32)
    X = np.zeros((3, 8), np.float32)
    _check(X, Y, 6, "sqeuclidean", block_m=2, block_n=16, screen=screen)
