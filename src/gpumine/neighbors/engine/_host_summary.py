"""What the engine checks of host references, found in one pass through the GPU.

References too large to stay on the GPU are streamed from the host a tile at
a time. Before the search the engine needs facts about all of them: that they
are finite, their largest and smallest nonzero magnitudes (the range plan of
:mod:`._magnitude`), whether they are integers (the float32-exact test of
:mod:`._float64_order`), and their column sums (the L2 centre of
:meth:`Metric.centre`). Taken on the host these are single-threaded passes
over the whole data, several times slower than copying it to the GPU, and they
set the pace of a streamed search. :func:`summarise_on_device` streams the rows
to the GPU once and takes them all there, behind one host wait; the summary is
kept on the tensor (with its version, so an in-place change drops it) and
:func:`summary_of` gives it to the checks that would otherwise read the host
data.

The column sums add the rows in blocks of ``CENTRE_BLOCK_ROWS`` in order,
exactly as :meth:`Metric.centre` does on the device, so the centre is the same
bit for bit as that of the same rows kept resident.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ...core.distance import CENTRE_BLOCK_ROWS
from ...core.tiles import iter_row_chunks
from ._magnitude import arithmetic, smallest_nonzero_magnitude

__all__ = ["HostSummary", "summarise_on_device", "summary_of", "SUMMARY_TILE_ROWS", "TileFacts", "gather_facts",
           "facts_of", "observe_copy", "assumptions_held"]

# rows per streamed tile: a multiple of the centre's blocks, and a few hundred MB of wide data at most
SUMMARY_TILE_ROWS = 64 * CENTRE_BLOCK_ROWS


@dataclasses.dataclass(frozen=True)
class HostSummary:
    """One pass's facts about a host tensor (see the module docstring)."""

    version: int
    finite: bool
    low: float
    high: float
    tiniest: float
    integral: bool
    column_sums: torch.Tensor  # float64, on the device of the pass

    @property
    def largest(self) -> float:
        return max(abs(self.low), abs(self.high))


def summary_of(X: torch.Tensor) -> HostSummary | None:
    """The summary :func:`summarise_on_device` kept on ``X``, unless ``X`` changed in place since."""
    found = getattr(X, "_gpumine_summary", None)
    return found if found is not None and found.version == X._version else None


def summarise_on_device(X: torch.Tensor, device: torch.device, tile_rows: int = SUMMARY_TILE_ROWS) -> HostSummary:
    """Stream the rows of host ``X`` (n, d) through ``device`` once and keep their :class:`HostSummary` on ``X``."""
    tile_rows = max(CENTRE_BLOCK_ROWS, tile_rows // CENTRE_BLOCK_ROWS * CENTRE_BLOCK_ROWS)
    facts = TileFacts(X)
    total = None
    for start, tile in iter_row_chunks(X, tile_rows, device):
        facts.observe(start, tile)
        for row in range(0, tile.shape[0], CENTRE_BLOCK_ROWS):
            block = tile[row : row + CENTRE_BLOCK_ROWS].sum(0, dtype=torch.float64)
            total = block if total is None else total.add_(block)  # Metric.centre's order, bit for bit
    if total is None:  # no rows
        total = torch.zeros(X.shape[1], dtype=torch.float64, device=device)
    summary = dataclasses.replace(facts.settle(), column_sums=total)
    X._gpumine_summary = summary
    return summary


class TileFacts:
    """Finiteness, magnitudes and integrality of host rows, gathered from the tiles a search streams.

    Each tile is reduced on the device where it is; nothing waits for the host
    until :meth:`settle`. Tiles are keyed by their first row, so a second pass
    over the rows (a retry, another query block) adds nothing.
    """

    def __init__(self, X: torch.Tensor):
        self.version = X._version
        self.rows = X.shape[0]
        self._tiles: dict[int, tuple] = {}

    def observe(self, start: int, tile: torch.Tensor) -> None:
        if start in self._tiles or not tile.shape[0]:
            return
        low, high = torch.aminmax(tile)  # NaN and infinity survive both
        self._tiles[start] = (tile.shape[0], low, high, smallest_nonzero_magnitude(tile),
                              (tile == torch.round(tile)).all())

    def _chain(self) -> list | None:
        """The observed tiles covering rows 0 .. n in order, or None where some rows were not seen."""
        chain, at = [], 0
        while at < self.rows:
            tile = self._tiles.get(at)
            if tile is None:
                return None
            chain.append(tile)
            at += tile[0]
        return chain

    def settle(self) -> HostSummary | None:
        """The facts of all rows (column sums left out), or None where the search did not see every row."""
        chain = self._chain()
        if chain is None:
            return None
        if not chain:
            return HostSummary(self.version, True, 0.0, 0.0, math.inf, True, torch.zeros(0, dtype=torch.float64))
        found = torch.stack([torch.stack([t[1] for t in chain]).amin().double(),
                             torch.stack([t[2] for t in chain]).amax().double(),
                             torch.stack([t[3] for t in chain]).amin().double(),
                             torch.stack([t[4] for t in chain]).all().double()]).cpu()
        low, high, tiny, whole = (float(v) for v in found)  # the one host wait
        finite = math.isfinite(low) and math.isfinite(high)
        return HostSummary(self.version, finite, low, high, tiny, finite and whole == 1.0, torch.zeros(0, dtype=torch.float64))


def gather_facts(X: torch.Tensor) -> TileFacts:
    """Start gathering the facts of host ``X`` from the tiles a search streams (see the module docstring)."""
    facts = TileFacts(X)
    X._gpumine_tile_facts = facts
    return facts


def facts_of(X: torch.Tensor) -> TileFacts | None:
    """The :class:`TileFacts` being gathered on ``X``, unless ``X`` changed in place since."""
    found = getattr(X, "_gpumine_tile_facts", None)
    return found if found is not None and found.version == X._version else None


# rows reduced at a time when the facts come from a whole copy on the device (bounds the temporaries)
OBSERVE_ROWS = 1 << 22


def observe_copy(X: torch.Tensor, on_device: torch.Tensor) -> None:
    """Where the facts of host ``X`` are being gathered, take them from ``on_device``, a whole copy of it."""
    facts = facts_of(X)
    if facts is None:
        return
    for start in range(0, on_device.shape[0], OBSERVE_ROWS):
        facts.observe(start, on_device[start : start + OBSERVE_ROWS])


def assumptions_held(X: torch.Tensor, largest: float, tiniest: float) -> tuple[bool, HostSummary | None]:
    """Whether a search that gathered the facts of ``X`` ran on assumptions that hold: ``(held, facts)``.

    ``largest``/``tiniest``: the magnitudes the search was planned with (those of
    the other operands). They held when every row was seen, all are finite and
    the rows' magnitudes give the same range plan (:func:`._magnitude.arithmetic`).
    Stops the gathering either way.
    """
    facts = facts_of(X)
    X._gpumine_tile_facts = None
    found = None if facts is None else facts.settle()
    if found is None or not found.finite:
        return False, found
    largest, tiniest = (0.0 if largest is None else largest), (math.inf if tiniest is None else tiniest)
    planned = arithmetic(X.dtype, largest, tiniest)
    actual = arithmetic(X.dtype, max(largest, found.largest), min(tiniest, found.tiniest))
    return planned == actual, found
