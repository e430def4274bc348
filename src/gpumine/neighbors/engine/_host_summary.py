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
from ._magnitude import smallest_nonzero_magnitude

__all__ = ["HostSummary", "summarise_on_device", "summary_of", "SUMMARY_TILE_ROWS"]

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
    lows, highs, tiniest, integral = [], [], [], []
    total = None
    for _, tile in iter_row_chunks(X, tile_rows, device):
        low, high = torch.aminmax(tile)  # NaN and infinity survive both
        lows.append(low)
        highs.append(high)
        tiniest.append(smallest_nonzero_magnitude(tile))
        integral.append((tile == torch.round(tile)).all())
        for start in range(0, tile.shape[0], CENTRE_BLOCK_ROWS):
            block = tile[start : start + CENTRE_BLOCK_ROWS].sum(0, dtype=torch.float64)
            total = block if total is None else total.add_(block)
    if total is None:  # no rows
        summary = HostSummary(X._version, True, 0.0, 0.0, math.inf, True,
                              torch.zeros(X.shape[1], dtype=torch.float64, device=device))
    else:
        found = torch.stack([torch.stack(lows).amin().double(), torch.stack(highs).amax().double(),
                             torch.stack(tiniest).amin().double(), torch.stack(integral).all().double()]).cpu()
        low, high, tiny, whole = (float(v) for v in found)  # the one host wait
        finite = math.isfinite(low) and math.isfinite(high)
        summary = HostSummary(X._version, finite, low, high, tiny, finite and whole == 1.0, total)
    X._gpumine_summary = summary
    return summary
