"""The one-pass summary of host references (finite, magnitudes, integrality, column sums) against the checks it replaces."""

import math

import numpy as np
import pytest
import torch

from gpumine.core.distance import CENTRE_BLOCK_ROWS, get_metric
from gpumine.neighbors.engine._float64_order import float32_scores_exact
from gpumine.neighbors.engine._host_summary import (assumptions_held, facts_of, gather_facts, summarise_on_device,
                                                    summary_of)
from gpumine.neighbors.engine._magnitude import magnitudes

CPU = torch.device("cpu")


def _direct(X):
    """The facts computed without the summary (the checks it stands in for)."""
    largest, tiniest = magnitudes(X)
    return dict(finite=bool(torch.isfinite(X).all()), largest=largest, tiniest=tiniest,
                integral=bool((X == torch.round(X)).all()))


KINDS = ["uniform", "integers", "subnormal", "zeros", "mixed"]


def _data(kind: str, seed: int) -> torch.Tensor:
    """3,000 x 5 float32 rows of one kind: the magnitudes and integrality the facts must get right."""
    rng = np.random.default_rng(seed)
    X = {"uniform": lambda: rng.random((3000, 5)),
         "integers": lambda: rng.integers(-4, 9, (3000, 5)),
         "subnormal": lambda: rng.random((3000, 5)) * 1e-42,
         "zeros": lambda: np.zeros((3000, 5)),
         "mixed": lambda: rng.standard_normal((3000, 5)) * np.array([1e-30, 1, 1e30, 0, 7])}[kind]()
    return torch.from_numpy(np.asarray(X, dtype=np.float32))


@pytest.mark.parametrize("kind", KINDS)
def test_summary_equals_the_direct_checks(kind):
    X = _data(kind, 5)
    expected = _direct(X)
    summary = summarise_on_device(X, CPU, tile_rows=CENTRE_BLOCK_ROWS)
    assert summary.finite == expected["finite"]
    assert summary.largest == expected["largest"]
    assert summary.tiniest == expected["tiniest"]
    assert summary.integral == expected["integral"]
    assert (summary.low, summary.high) == tuple(float(v) for v in torch.aminmax(X))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_data_is_reported(bad):
    X = torch.ones((200, 3))
    X[150, 2] = bad
    summary = summarise_on_device(X, CPU)
    assert not summary.finite and not summary.integral


def test_checks_read_the_summary_and_drop_it_after_an_in_place_change():
    X = torch.from_numpy(np.random.default_rng(1).integers(0, 5, (1000, 4)).astype(np.float32))
    m = get_metric("euclidean")
    summarise_on_device(X, CPU)
    assert summary_of(X) is not None
    assert float32_scores_exact(X, X, m)
    X[3, 1] = 0.5  # bumps the tensor's version
    assert summary_of(X) is None
    assert not float32_scores_exact(X, X, m)
    summarise_on_device(X, CPU)
    assert not float32_scores_exact(X, X, m)
    assert magnitudes(X) == (4.0, 0.5)


def test_centre_from_the_summary_equals_the_metrics_own_bit_for_bit():
    X = torch.from_numpy(np.random.default_rng(2).standard_normal((3 * CENTRE_BLOCK_ROWS + 123, 3)).astype(np.float32) + 1e3)
    m = get_metric("euclidean")
    summary = summarise_on_device(X, CPU, tile_rows=2 * CENTRE_BLOCK_ROWS)
    assert torch.equal(m.centre(X, summary.column_sums), m.centre(X))


def test_empty_data_has_an_empty_summary():
    summary = summarise_on_device(torch.empty((0, 3)), CPU)
    assert summary.finite and summary.largest == 0.0 and summary.tiniest == math.inf


# -- facts gathered by the search's own pass (one pass over streamed references) --------------


def _gathered(X, tile_rows, order=None):
    facts = gather_facts(X)
    starts = list(range(0, X.shape[0], tile_rows))
    for start in starts if order is None else order(starts):
        facts.observe(start, X[start : start + tile_rows])
    return facts


@pytest.mark.parametrize("kind", KINDS)
def test_gathered_facts_equal_the_summary(kind):
    X = _data(kind, 6)
    summary = summarise_on_device(X, CPU)
    # tiles seen out of order and twice (a retry) change nothing
    found = _gathered(X, 700, order=lambda s: s[::-1] + s).settle()
    for field in ("finite", "low", "high", "tiniest", "integral"):
        assert getattr(found, field) == getattr(summary, field), field


def test_facts_of_unseen_rows_are_unknown_and_a_changed_tensor_drops_them():
    X = torch.rand(1000, 3)
    facts = gather_facts(X)
    facts.observe(0, X[:400])
    facts.observe(800, X[800:])  # rows 400-799 never streamed
    assert facts.settle() is None
    assert facts_of(X) is facts
    X[0, 0] = 0.5  # an in-place change
    assert facts_of(X) is None


@pytest.mark.parametrize("scale, held", [(1.0, True), (1e-30, False), (1e30, False)])
def test_assumptions_hold_where_the_rows_need_the_planned_range(scale, held):
    X = torch.rand(2000, 4) * scale
    _gathered(X, 512)
    got, facts = assumptions_held(X, 1.0, 0.01)  # planned with the queries' magnitudes
    assert got is held and facts.finite
    assert facts_of(X) is None  # gathering stops


def test_non_finite_rows_and_unseen_rows_fail_the_assumptions():
    X = torch.rand(2000, 4)
    X[1500, 2] = float("nan")
    _gathered(X, 512)
    held, facts = assumptions_held(X, 1.0, 0.01)
    assert not held and not facts.finite
    Y = torch.rand(2000, 4)
    gather_facts(Y).observe(0, Y[:512])
    assert assumptions_held(Y, 1.0, 0.01) == (False, None)
    assert assumptions_held(torch.rand(5, 2), 1.0, 0.01) == (False, None)  # never gathered


def test_gathering_facts_says_float32_exactness_is_unknown():
    X = torch.from_numpy(np.random.default_rng(1).integers(0, 5, (300, 3)).astype(np.float32))
    metric = get_metric("euclidean")
    assert float32_scores_exact(X, X, metric)
    gather_facts(X)
    assert not float32_scores_exact(X, X, metric)  # not read from the host data while the search gathers


@pytest.mark.parametrize("tiles", ["prepared", "raw"])
def test_streamed_reference_tiles_feed_the_gathered_facts(tiles):
    from gpumine.neighbors.engine._references import _References

    X = torch.from_numpy(np.random.default_rng(8).integers(-3, 7, (5000, 4)).astype(np.float32))
    gather_facts(X)
    refs = _References(X, get_metric("euclidean"), 1200, CPU, resident=False)
    for _ in refs.prepared_tiles() if tiles == "prepared" else refs.raw_tiles():
        pass
    held, found = assumptions_held(X, 1.0, 1.0)
    summary = summarise_on_device(X, CPU)
    assert held
    for field in ("finite", "low", "high", "tiniest", "integral"):
        assert getattr(found, field) == getattr(summary, field), field
    # the centre came from the first tile (the search did not read all rows first)
    assert torch.equal(refs.centre, get_metric("euclidean").centre(X[:1200]))
