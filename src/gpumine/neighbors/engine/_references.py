"""Reference rows as prepared tiles on the device: kept resident when they fit, else streamed from the host."""

from __future__ import annotations

import torch

from ...core.distance import Metric
from ...core.tiles import copy_to_device, iter_row_chunks
from ._curve import _CurveOrder
from ._host_summary import facts_of, observe_copy, summary_of
from ._plan import _fits_resident


def _max_scale(scales):
    """Largest of the per-tile reference scales, kept on the device (no host sync)."""
    if len(scales) == 1:
        return scales[0]
    return torch.stack(scales).amax() if scales else 0.0


class _References:
    """Reference rows as tiles on the device: kept resident when they fit, else streamed from host."""

    def __init__(self, ref: torch.Tensor, metric: Metric, rows_per_tile: int, device: torch.device, resident: bool | None = None):
        self.metric = metric
        self.rows_per_tile = rows_per_tile
        self.device = device
        self.host = ref
        self.resident = _fits_resident(ref, device) if resident is None else resident
        self.data = copy_to_device(ref, device) if self.resident else ref
        if self.resident and self.data is not ref:
            observe_copy(ref, self.data)  # the facts a search gathers (see _host_summary), from the copy
        # from the device copy when there is one: torch's float64 sums on the host are a
        # large share of a small search from NumPy
        summary = None if self.resident else summary_of(ref)
        # streamed references whose facts the search gathers as it goes (one pass over the host data,
        # see _host_summary): the L2 centre from the first tile; exact results do not depend on it
        self._facts = None if self.resident or summary is not None else facts_of(ref)
        if self._facts is not None:
            self.centre = metric.centre(self.data[:rows_per_tile].to(device))
        else:
            self.centre = metric.centre(self.data, None if summary is None else summary.column_sums)
        self._prepared = None
        self._by_feature = None
        self._sample = None
        self._curve = None
        self.scale = None
        if self.resident:
            self._prepared = [
                (start, self.metric.prepare(chunk, self.centre, "ref"))
                for start, chunk in iter_row_chunks(self.data, rows_per_tile, device)
            ]
            self.scale = _max_scale([metric.ref_scale(p) for _, p in self._prepared])

    def prepared_tiles(self):
        """Yield ``(start, prepared_rows)``; also fills ``scale`` on a streamed first pass."""
        if self._prepared is not None:
            yield from self._prepared
            return
        scales = []
        for start, chunk in self.raw_tiles():
            prepared = self.metric.prepare(chunk, self.centre, "ref")
            scales.append(self.metric.ref_scale(prepared))
            yield start, prepared
        self.scale = _max_scale(scales)

    def raw_tiles(self):
        """Yield ``(start, rows)`` on the device; streamed rows also feed the facts a search gathers."""
        for start, chunk in iter_row_chunks(self.data, self.rows_per_tile, self.device):
            if self._facts is not None:
                self._facts.observe(start, chunk)
            yield start, chunk

    def curve_order(self) -> "_CurveOrder":
        """The resident references' space-filling-curve order (computed once)."""
        if self._curve is None:
            self._curve = _CurveOrder(self.data)
        return self._curve

    def threshold_sample(self, size: int) -> torch.Tensor:
        """A fixed random sample of ``size`` resident references, feature-major (d, size)."""
        if self._sample is None or self._sample.shape[1] != min(size, self.data.shape[0]):
            n = self.data.shape[0]
            pick = torch.randperm(n, generator=torch.Generator().manual_seed(0))[: min(size, n)].sort().values
            self._sample = self._feature_major()[:, pick.to(self.device)].contiguous()
        return self._sample

    def _feature_major(self) -> torch.Tensor:
        if self._by_feature is None:
            self._by_feature = self.data.T.contiguous()
        return self._by_feature

    def feature_major_tiles(self):
        """Yield ``(start, tile)`` with each tile feature-major, (d, rows), rows contiguous."""
        if self.resident:
            by_feature = self._feature_major()
            for start in range(0, by_feature.shape[1], self.rows_per_tile):
                yield start, by_feature[:, start : start + self.rows_per_tile]
            return
        for start, chunk in self.raw_tiles():
            yield start, chunk.T.contiguous()

    def gather(self, index: torch.Tensor) -> torch.Tensor:
        """Rows at ``index`` (any shape), on the device."""
        flat = index.clamp(min=0).reshape(-1)
        if self.resident:
            rows = self.data.index_select(0, flat)
        else:
            rows = self.host.index_select(0, flat.to(self.host.device)).to(self.device)
        return rows.reshape(*index.shape, self.data.shape[1])

    def exact_scores(self, Q: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """``metric.exact_scores`` of query ``Q[i]`` against references ``index[i, j]`` (padding: any value).

        Resident references of few features are gathered one feature at a time from
        a feature-major copy and never assembled into rows: the row gather
        (``index_select``) and stacking gathered features were measured at most of
        a k = 2048 search (21M candidates of 8 floats; BENCHMARKS.md).
        """
        if not (self.resident and self.metric.sums_by_feature(Q.shape[1])):
            return self.metric.exact_scores(Q, self.gather(index))
        by_feature = self._feature_major()
        flat = index.clamp(min=0).reshape(-1)
        return self.metric.exact_scores_by_feature(Q.contiguous(), lambda f: by_feature[f].index_select(0, flat).view(index.shape))
