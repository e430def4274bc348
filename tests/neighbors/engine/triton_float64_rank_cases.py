"""Float64 rank Triton kernel vs its torch twin and a float64 NumPy oracle.

Collected directly on a GPU machine (``pytest tests/neighbors/engine/triton_float64_rank_cases.py``),
and run by ``test_triton_kernels_under_the_interpreter.py`` in a child process with ``TRITON_INTERPRET=1``
on machines without one (small shapes: the interpreter is slow).
"""

import numpy as np
import pytest
import torch

from gpumine.neighbors.engine._float64_rank_kernel import (FLOAT64_RANK_MAX_WIDTH, float64_rank, float64_rank_supported,
                                                           float64_rank_torch)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ON_GPU = DEVICE == "cuda"
SCALE = 16 if ON_GPU else 1


def _oracle(Q, R, index, metric):
    """float64 NumPy: terms left to right per 16-feature chunk, chunks left to right; order by (score, index, position)."""
    rows = R[np.clip(index, 0, None)].astype(np.float64)
    terms = Q.astype(np.float64)[:, None, :] - rows
    terms = np.abs(terms) if metric == "manhattan" else terms * terms
    total = np.zeros(index.shape)
    for c0 in range(0, Q.shape[1], 16):
        part = np.zeros(index.shape)
        for f in range(c0, min(c0 + 16, Q.shape[1])):
            part = part + terms[:, :, f]
        total = total + part
    total = np.where(index < 0, np.inf, total)
    position = np.broadcast_to(np.arange(index.shape[1]), index.shape)
    order = np.lexsort((position, index, total), axis=1)
    return np.take_along_axis(total, order, 1), np.take_along_axis(index, order, 1)


def _lists(rng, n, n_ref, width, padded):
    index = np.stack([rng.choice(n_ref, size=width, replace=False) for _ in range(n)])
    if padded:
        cut = rng.integers(0, width + 1, size=n)
        index = np.where(np.arange(width)[None, :] >= cut[:, None], -1, index)
    return index


def _check(Q, R, index, metric, ref_view=None):
    q, r, i = (torch.tensor(a, device=DEVICE) for a in (Q, R, index))
    r = r if ref_view is None else ref_view(r)
    assert float64_rank_supported(q, r, i, metric)
    got = float64_rank(q, r, i, metric)
    twin = float64_rank_torch(q, r, i, metric)
    want = _oracle(Q, R, index, metric)
    for g, t, w in zip(got, twin, want):
        assert torch.equal(g.cpu(), t.cpu())
        np.testing.assert_array_equal(g.cpu().numpy(), w)


@pytest.mark.parametrize("metric", ["sqeuclidean", "manhattan"])
@pytest.mark.parametrize("d, width", [(1, 2), (3, 8), (8, 5), (16, 33), (17, 8), (40, 64)])
def test_rank_equals_the_twin_and_the_oracle(metric, d, width):
    rng = np.random.default_rng(d * 100 + width)
    R = rng.random((300, d), dtype=np.float32)
    Q = rng.random((37 * SCALE, d), dtype=np.float32)
    _check(Q, R, _lists(rng, Q.shape[0], 300, width, padded=True), metric)


@pytest.mark.parametrize("metric", ["euclidean", "manhattan"])
def test_ties_go_to_the_lower_index_and_padding_keeps_its_place(metric):
    # duplicated references and integer data: many equal float64 scores in every list
    rng = np.random.default_rng(1)
    base = rng.integers(0, 3, size=(20, 4)).astype(np.float32)
    R = np.concatenate([base] * 10)
    Q = rng.integers(0, 3, size=(29 * SCALE, 4)).astype(np.float32)
    _check(Q, R, _lists(rng, Q.shape[0], R.shape[0], 24, padded=True), metric)


def test_float32_ties_are_split_by_float64_and_strides_do_not_matter():
    # references whose float32 distances round alike but differ in float64, far from the origin
    rng = np.random.default_rng(2)
    R = (1e3 + rng.standard_normal((200, 6)) * 1e-3).astype(np.float32)
    Q = (1e3 + rng.standard_normal((19 * SCALE, 6)) * 1e-3).astype(np.float32)
    index = _lists(rng, Q.shape[0], 200, 16, padded=False)
    _check(Q, R, index, "sqeuclidean")
    _check(Q, R, index, "sqeuclidean", ref_view=lambda r: r.T.contiguous().T)  # feature-major storage


def test_empty_rows_and_arguments_checked_with_the_fix_named():
    q = torch.zeros((0, 3), device=DEVICE)
    r = torch.zeros((5, 3), device=DEVICE)
    scores, index = float64_rank(q, r, torch.zeros((0, 4), dtype=torch.int64, device=DEVICE), "sqeuclidean")
    assert scores.shape == (0, 4) and index.shape == (0, 4) and scores.dtype == torch.float64
    wide = torch.zeros((2, FLOAT64_RANK_MAX_WIDTH + 1), dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError, match="float64_rank_torch"):
        float64_rank(torch.zeros((2, 3), device=DEVICE), r, wide, "sqeuclidean")
    with pytest.raises(ValueError, match="float64_rank_torch"):
        float64_rank(torch.zeros((2, 3), device=DEVICE), r, wide[:, :3], "cosine")
    with pytest.raises(ValueError, match="int64"):
        float64_rank(torch.zeros((2, 3), device=DEVICE), r, wide[:, :3].int(), "sqeuclidean")


def test_one_entry_strided_queries_repeated_candidates_and_nan_scores():
    rng = np.random.default_rng(3)
    R = rng.random((50, 5), dtype=np.float32)
    Q = rng.random((9 * SCALE, 5), dtype=np.float32)
    _check(Q, R, _lists(rng, Q.shape[0], 50, 1, padded=True), "sqeuclidean")  # one entry per row
    index = _lists(rng, Q.shape[0], 50, 6, padded=False)
    index[:, 3] = index[:, 1]  # a candidate listed twice: its copies keep their order
    _check(Q, R, index, "manhattan")
    q, r, i = torch.tensor(Q, device=DEVICE), torch.tensor(R, device=DEVICE), torch.tensor(index, device=DEVICE)
    strided = torch.tensor(np.asfortranarray(Q), device=DEVICE).T.contiguous().T  # features not consecutive
    for got, want in zip(float64_rank(strided, r, i, "sqeuclidean"), float64_rank_torch(q, r, i, "sqeuclidean")):
        assert torch.equal(got.cpu(), want.cpu())
    # a NaN score (data the API refuses) sorts last, as in the twin's sorts
    r[7, 2] = float("nan")
    i[:, 0] = 7
    for got, want in zip(float64_rank(q, r, i, "sqeuclidean"), float64_rank_torch(q, r, i, "sqeuclidean")):
        assert torch.equal(got.cpu(), want.cpu()) or torch.allclose(got.cpu().double(), want.cpu().double(), equal_nan=True)
    assert (float64_rank(q, r, i, "sqeuclidean")[1][:, -1] == 7).all()
