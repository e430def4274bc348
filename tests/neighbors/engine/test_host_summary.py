"""The one-pass summary of host references (finite, magnitudes, integrality, column sums) against the checks it replaces."""

import math

import numpy as np
import pytest
import torch

from gpumine.core.distance import CENTRE_BLOCK_ROWS, get_metric
from gpumine.neighbors.engine._float64_order import float32_scores_exact
from gpumine.neighbors.engine._host_summary import summarise_on_device, summary_of
from gpumine.neighbors.engine._magnitude import magnitudes

CPU = torch.device("cpu")


def _direct(X):
    """The facts computed without the summary (the checks it stands in for)."""
    largest, tiniest = magnitudes(X)
    return dict(finite=bool(torch.isfinite(X).all()), largest=largest, tiniest=tiniest,
                integral=bool((X == torch.round(X)).all()))


@pytest.mark.parametrize("kind", ["uniform", "integers", "subnormal", "zeros", "mixed"])
def test_summary_equals_the_direct_checks(kind):
    rng = np.random.default_rng(5)
    X = {"uniform": lambda: rng.random((3000, 5)),
         "integers": lambda: rng.integers(-4, 9, (3000, 5)),
         "subnormal": lambda: rng.random((3000, 5)) * 1e-42,
         "zeros": lambda: np.zeros((3000, 5)),
         "mixed": lambda: rng.standard_normal((3000, 5)) * np.array([1e-30, 1, 1e30, 0, 7])}[kind]()
    X = torch.from_numpy(np.asarray(X, dtype=np.float32))
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
