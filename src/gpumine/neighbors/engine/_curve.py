"""The Morton-curve order in which a fused search visits resident references (queries start near their neighbours)."""

from __future__ import annotations

import torch

from ...core.distance import Metric


# metrics whose neighbours are near in the raw coordinates, so a curve order of the raw rows helps
_CURVE_METRICS = ("euclidean", "sqeuclidean", "manhattan")


# The curve order costs ~60 small launches and two sorts, which pays where
# the kernel's insertions are a large share (few features) or the search is large: with many
# features it measured slower, by about 30 % on the small physics search (12,000 x 32,768 x 65)
# and by 1-4 % on all-kNN of 262,144 points at d = 64 and 65 (BENCHMARKS.md).
# Module values, so benchmarks can compare both orders in one run.
CURVE_MAX_FEATURES = 16


CURVE_MIN_QUERIES = 1 << 16
# The order pays only where queries are many next to the references: sorting the references costs
# about as much as the search saves at one query per 16 references (4M references, d = 8),
# and a search of 1,000 queries against 4M references took twice as long with it (BENCHMARKS.md).
CURVE_MIN_QUERY_SHARE = 1 / 16


def _curve_applies(metric: Metric, d: int, n_query: int, n_ref: int) -> bool:
    """Whether a one-tile fused search of ``n_query`` queries (one block of them) against
    ``n_ref`` references visits them in curve order (:class:`_CurveOrder`)."""
    return (metric.name in _CURVE_METRICS and (d <= CURVE_MAX_FEATURES or n_query >= CURVE_MIN_QUERIES)
            and n_query >= CURVE_MIN_QUERY_SHARE * n_ref)


class _CurveOrder:
    """References sorted along a Morton (Z-order) curve, and where queries fall on it.

    The fused kernel keeps each query's best candidates while it streams the
    references; when the first tiles it sees hold the query's neighbours, its
    threshold is tight from the start and later tiles rarely enter the
    insertion loop. Simulated for 65,536 uniform 8-d points (64 x 64 tiles,
    C = 8): insertion-loop passes per tile 0.66 in index order, 0.15 in curve
    order from each block's own place. Codes interleave ``bits`` bits of the
    ``dims`` features of widest range, quantised over the references' range.
    """

    def __init__(self, data: torch.Tensor):
        lo, hi = data.amin(0), data.amax(0)
        self.dims = torch.argsort(hi - lo, descending=True)[: min(data.shape[1], _CURVE_MAX_DIMS)]
        self.bits = max(1, min(10, 62 // len(self.dims)))
        self.lo, self.span = lo[self.dims], (hi - lo)[self.dims].clamp(min=torch.finfo(data.dtype).tiny)
        # each level's bits spread to every len(dims)-th position: a feature's part of a code is
        # one lookup (no (rows x dims x bits) temporaries, which cost a measurable share of a 1M-query search)
        dims = len(self.dims)
        levels = torch.arange(1 << self.bits, device=data.device)
        shifts = torch.arange(self.bits, device=data.device)
        self._spread = (((levels[:, None] >> shifts) & 1) << (shifts * dims)).sum(1)
        self._offsets = dims - 1 - torch.arange(dims, device=data.device)
        codes = self.codes(data)
        self.sorted_codes, self.perm = torch.sort(codes, stable=True)
        self.inverse = torch.empty_like(self.perm)
        self.inverse[self.perm] = torch.arange(len(self.perm), device=self.perm.device)

    def codes(self, X: torch.Tensor) -> torch.Tensor:
        """Each row's curve code (int64), formed ``CODE_ROWS`` rows at a time."""
        out = torch.empty(X.shape[0], dtype=torch.int64, device=X.device)
        for start in range(0, X.shape[0], CODE_ROWS):
            out[start : start + CODE_ROWS] = self._codes(X[start : start + CODE_ROWS])
        return out

    def _codes(self, X: torch.Tensor) -> torch.Tensor:
        levels = 1 << self.bits
        # NaN (a captured search reads its data unchecked, see _graphs) must not become an index
        q = torch.nan_to_num((X[:, self.dims] - self.lo) / self.span * levels, nan=0.0).floor().clamp(0, levels - 1).long()
        # bit b of feature j goes to position b * dims + (dims - 1 - j): highest bits first
        # (disjoint bits, so the sum is their OR)
        return (self._spread[q] << self._offsets).sum(1)

    def place(self, Q: torch.Tensor):
        """Queries in curve order (``perm``), and each one's position among the references."""
        codes = self.codes(Q)
        sorted_codes, q_perm = torch.sort(codes, stable=True)
        return q_perm, torch.searchsorted(self.sorted_codes, sorted_codes)


_CURVE_MAX_DIMS = 16
# Rows whose codes are formed at once: the temporaries take ~40 bytes per row and feature
# (the whole of 50M x 8 at once peaked at ~8 GiB above the data on a GPU), so a block of
# 2^20 rows needs at most ~0.6 GiB at 16 features and stays a few launches per million rows.
CODE_ROWS = 1 << 20
