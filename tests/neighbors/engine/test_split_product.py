"""Float32 products from split rows (three TF32 products in one): the split, and the stated error bound
against float64 on data built to round badly, on the CPU and (marked gpu) on TF32 tensor cores."""

import numpy as np
import pytest
import torch

from gpumine.neighbors.engine._split_product import (SPLIT_FLUSHED, SPLIT_ROUNDOFF, SPLIT_SUM_ROUNDING, split_product,
                                                     split_rows, split_terms)


def _awkward(n, m, seed, scale=1.0):
    """Values with long mantissas and mixed signs: the split drops much and sums cancel."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0x3F7FE000, 0x3F800000, size=(n, m), dtype=np.int64).astype(np.int32)
    X = bits.view(np.float32) * np.float32(scale) * rng.choice([-1.0, 1.0], size=(n, m)).astype(np.float32)
    X *= rng.uniform(0.5, 2.0, size=(n, m)).astype(np.float32)
    return torch.from_numpy(X)


def _check_bound(X, Y, device):
    S = split_product(split_rows(X.to(device), "query"), split_rows(Y.to(device), "ref")).cpu().double()
    X64, Y64 = X.double(), Y.double()
    exact = X64 @ Y64.T
    absolute = X64.abs() @ Y64.abs().T
    # the dropped parts, and a sum of 3m terms (each under 1.001 |x_f| |y_f|) as _dense.block_scores
    # bounds it (Metric.bounds' four unit roundoffs per term, times the tensor cores' factor)
    terms = split_terms(X.shape[1])
    bound = (SPLIT_ROUNDOFF * absolute + SPLIT_SUM_ROUNDING * 4.0 * (terms + 4) * 2.0**-24 * 1.001 * absolute
             + terms * SPLIT_FLUSHED)
    assert ((S - exact).abs() <= bound).all()


def test_split_parts_are_tf32_values_and_add_up():
    X = _awkward(37, 11, 0, scale=1e3)
    Q, R = split_rows(X, "query"), split_rows(X, "ref")
    assert Q.shape == (37, 33) and R.shape == (37, 33)
    assert ((Q.view(torch.int32) & 0x1FFF) == 0).all() and ((R.view(torch.int32) & 0x1FFF) == 0).all()
    hi, lo = R[:, :11], R[:, 11:22]
    assert torch.equal(Q[:, :11], hi) and torch.equal(Q[:, 22:], lo) and torch.equal(R[:, 22:], hi)
    left = X.double() - hi.double() - lo.double()
    assert (left.abs() <= 2.0**-20 * X.double().abs()).all()
    assert (lo.double().abs() <= 2.0**-10 * X.double().abs()).all()


def test_split_product_error_is_within_the_bound_on_the_cpu():
    for seed, scale in ((1, 1.0), (2, 1e-20), (3, 1e15)):
        _check_bound(_awkward(64, 57, seed, scale), _awkward(48, 57, seed + 10, 1.0), "cpu")


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="float32"):
        split_rows(torch.zeros((3, 2), dtype=torch.float64), "query")
    with pytest.raises(ValueError, match="side"):
        split_rows(torch.zeros((3, 2)), "left")


@pytest.mark.gpu
def test_split_product_error_is_within_the_bound_on_tensor_cores():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    for seed, (n, m, d) in enumerate(((300, 500, 3), (1000, 777, 63), (257, 129, 385), (64, 4000, 1556))):
        _check_bound(_awkward(n, d, seed), _awkward(m, d, seed + 100), "cuda")


@pytest.mark.parametrize("mode", ["split", "rounded", "plain"])
@pytest.mark.parametrize("far", [False, True])
def test_block_scores_are_within_their_slack_of_the_exact_scores(mode, far):
    """|S + offset - exact score| <= slack for every pair: what the search's certificate relies on."""
    from gpumine.core.distance import get_metric
    from gpumine.neighbors.engine._dense import DenseReferences, block_scores

    L2 = get_metric("sqeuclidean")
    rng = np.random.default_rng(5)
    X = _awkward(90, 23, 7, scale=3.0).numpy()
    if far:  # a cloud far from the origin, and two rows farther still: large norms beside small distances
        X = X * 1e-3 + 50.0
        X[[4, 60]] = 900.0
    ref = torch.from_numpy(X)
    query = torch.from_numpy(X[::4] + rng.standard_normal((23, 23)).astype(np.float32))
    kind = dict(split=dict(tile_dtype=torch.float32, split=True), rounded=dict(tile_dtype=torch.float64, rounded=True),
                plain=dict(tile_dtype=torch.float32))[mode]
    refs = DenseReferences(ref, 5, L2, exclude_self=False, **kind)
    S, offset, slack = block_scores(refs, query)
    assert S.dtype == (torch.float64 if mode == "plain" and kind["tile_dtype"] == torch.float64 else torch.float32)
    exact = L2.exact_scores(query.double(), ref.double()[None])
    error = (S.double() + offset[:, None] - exact).abs()
    assert (error <= slack[:, None]).all()


@pytest.mark.parametrize("side", ["query", "ref"])
@pytest.mark.parametrize("m", [1, 8, 11, 129])
def test_padded_parts_are_the_joined_parts_then_zero_columns(side, m):
    from gpumine.core.tiles import padded_columns

    X = _awkward(5, m, 3, scale=7.0)
    padded = split_rows(X, side, padded=True)
    assert torch.equal(padded, padded_columns(split_rows(X, side)))
    assert padded.shape[1] % 8 == 0 and (padded[:, 3 * m :] == 0).all()
