"""Exact per-pair distances, weights, and the tile form the solving set runs on.

Every distance that ends up in an outlier weight is computed here in one
*canonical* form: in float64 from the input values, each feature's term by
separate element-wise subtract / multiply operations (no fused multiply-add),
the terms added by a fixed pairwise tree over the features in column order
(terms 0+1, 2+3, ..., an odd last term carried up a level), never by a
reduction kernel whose order depends on the shape of the batch. So the same
pair always gets bit-for-bit the same value, whichever algorithm (brute force
or solving set), tile, batch or device computed it, and weights of the same
neighbour multiset are identical. On a GPU, and for small batches on the CPU,
a batch of pairs takes a few operations per tree level (:func:`_tree_over_rows`);
larger CPU batches make the terms feature by feature from contiguous columns and
add them as they come by a running binary counter (:func:`_running_tree`), which
builds the same tree in O(log d) memory.

A weight is the sum of the k smallest distances, added in ascending order by a
fixed pairwise tree (:func:`tree_sum`). Rounding is monotone, so the tree sum of
a point's current k-NN heap (whose i-th entry is never below the i-th true
nearest distance) is never below the point's exact weight: the solving set's
upper bounds are exact bounds with no slack.

Large tiles (candidates x data) use a fast form: for the Euclidean metrics one
float64 matrix product on centred rows, whose error is bounded per row and per
column (:attr:`PairSpace.gamma`); the entries that can matter are then
recomputed in the canonical form and certified (see
``gpumine.outliers._solving_set``). For integer-valued data whose products
stay below 2**53 the product is exact (no centring, no bound). The other
metrics compute tiles in the canonical form directly.
"""

from __future__ import annotations

import functools
import math

import torch

from ..core.distance import Metric, get_metric, ieee_product, sqrt_rounded

__all__ = ["SUPPORTED_METRICS", "resolve_metric", "PairSpace", "tree_sum"]

SUPPORTED_METRICS = ("euclidean", "sqeuclidean", "manhattan", "chebyshev", "minkowski", "cosine")

_U64 = 2.0**-53

#: Bytes of float64 feature values one batch of canonical pairs may hold on a GPU (the batch never
#: changes the values, only how many pairs one launch computes).
_CANONICAL_BATCH_BYTES = 1 << 26
#: Device types whose canonical pairs take every feature at once (:meth:`PairSpace._batched`); the
#: others go feature by feature (:meth:`PairSpace._by_feature`). Both give the same bits.
_BATCHED_DEVICE_TYPES = ("cuda",)
#: Elsewhere (the CPU), batches of at most this many bytes of feature values take every feature at
#: once too: a few operations in all instead of a few per feature, which is what small searches pay
#: for; larger ones go feature by feature (contiguous columns, O(log d) partial sums held).
_SMALL_BATCHED_BYTES = 1 << 22


def resolve_metric(metric: str = "euclidean", p: float | None = None) -> Metric:
    """A :class:`~gpumine.core.distance.Metric` usable for weights (a non-negative dissimilarity).

    ``inner_product`` is refused: similarities can be negative, so a sum of
    them is no outlier weight.
    """
    m = get_metric(metric, p)
    if m.name not in SUPPORTED_METRICS:
        raise ValueError(
            f"metric={metric!r} cannot define an outlier weight (a sum of non-negative distances); "
            f"use one of {', '.join(SUPPORTED_METRICS)}"
        )
    return m


def _ieee_float32_matmul(device: torch.device) -> bool:
    """True when float32 matrix products on ``device`` round like IEEE float32 (no TF32/BF16 inputs)."""
    if torch.get_float32_matmul_precision() != "highest":
        return False
    return device.type != "cuda" or not torch.backends.cuda.matmul.allow_tf32


def _rows(index: torch.Tensor, start: int, end: int) -> torch.Tensor:
    """Rows ``start:end`` of an index tensor broadcast along its first dimension (all of it when that is 1)."""
    return index if index.shape[0] == 1 else index[start:end]


def _tree_over_rows(v: torch.Tensor) -> torch.Tensor:
    """Sums over the first dimension of a (m, ...) tensor by a fixed pairwise tree: rows 0+1, 2+3, ..., an odd last row
    carried to the next level (as adding an exact 0 to non-negative terms would)."""
    while v.shape[0] > 1:
        m = v.shape[0]
        top = v[0 : m - 1 : 2] + v[1:m:2]
        v = torch.cat([top, v[m - 1 :]]) if m % 2 else top
    return v[0]


def _running_tree(terms):
    """The sum of an iterable of tensors by :func:`_tree_over_rows`'s tree, adding them as they
    come: a binary counter of partial sums (equal levels merge; the rest merge right to left at
    the end), at most log2(d) + 1 partial sums held."""
    stack: list = []
    for t in terms:
        level = 0
        while stack and stack[-1][0] == level:
            t = stack.pop()[1] + t
            level += 1
        stack.append((level, t))
    total = stack.pop()[1]
    while stack:
        total = stack.pop()[1] + total
    return total


def _one_minus_cosine(dot: torch.Tensor, na: torch.Tensor, nb: torch.Tensor) -> torch.Tensor:
    """1 - cos from the canonical dot product and squared norms (0 where a norm is 0)."""
    denom = torch.sqrt(na) * torch.sqrt(nb)
    positive = denom > 0
    cos = torch.where(positive, dot / torch.where(positive, denom, torch.ones_like(denom)), torch.zeros_like(dot))
    return (1.0 - cos).clamp_(min=0.0)


def tree_sum(values: torch.Tensor) -> torch.Tensor:
    """Row sums of a (rows, k) tensor by a fixed pairwise tree.

    Built from element-wise additions only (columns 0+1, 2+3, ..., odd widths
    padded with an exact 0), so every row is added in the same order on every
    device and batch shape: deterministic, and monotone in every entry.

    Examples
    --------
    >>> tree_sum(torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.25, 0.25]], dtype=torch.float64))
    tensor([6., 1.], dtype=torch.float64)
    """
    v = values
    if v.shape[1] == 0:
        return v.new_zeros(v.shape[0])
    while v.shape[1] > 1:
        if v.shape[1] % 2:
            v = torch.cat([v, v.new_zeros(v.shape[0], 1)], dim=1)
        v = v[:, 0::2] + v[:, 1::2]
    return v[:, 0].clone()


class PairSpace:
    """The data (float64, on the device) with the canonical pair form and the tile form.

    Parameters
    ----------
    X : torch.Tensor (n, d), any floating dtype, on the compute device
    metric : Metric
        One of :data:`SUPPORTED_METRICS`.
    tiles : bool, default True
        Prepare the fast tile form; ``False`` keeps only what the canonical
        per-pair form needs (for a model that only recomputes neighbours).
    """

    def __init__(self, X: torch.Tensor, metric: Metric, *, tiles: bool = True):
        self.metric = metric
        self.name = metric.name
        X64 = X.to(torch.float64)
        self.n, self.d = X64.shape
        self.device = X64.device
        self.X = X64
        # feature-major: a batch of pairs gathers each feature as one contiguous row
        self.XT = X64.T.contiguous()
        self.uses_matmul = self.name in ("euclidean", "sqeuclidean")
        self.exact = True
        self.gamma = 0.0
        self.tile_dtype = torch.float64
        if self.uses_matmul and tiles:
            self._prepare_matmul(X64)
        elif self.uses_matmul:
            self.uses_matmul = False  # canonical pairs only (no tiles will be asked for)

    # -- the fast tile form (matrix product) -------------------------------------
    def _prepare_matmul(self, X64: torch.Tensor) -> None:
        n, d = X64.shape
        integral = bool(torch.equal(X64, torch.round(X64))) if n else True
        max_sq = float((X64 * X64).sum(1).max()) if n else 0.0
        # integers whose squared norms (and so every partial sum of the product) stay
        # below 2**53 / 4: the product form is exact and needs neither centring nor bound;
        # below 2**24 / 4 even a float32 product is (on IEEE float32 matrix units: no TF32),
        # which halves the bytes every tile moves
        self.exact = integral and 4.0 * max_sq < 2.0**52
        small = self.exact and 4.0 * max_sq < 2.0**24 and _ieee_float32_matmul(X64.device)
        self.tile_dtype = torch.float32 if small else torch.float64
        centre = torch.zeros(d, dtype=torch.float64, device=X64.device) if self.exact else X64.mean(0)
        Xc = X64 - centre
        sq = (Xc * Xc).sum(1)
        ones = torch.ones_like(sq)[:, None]
        # S = [a, |a|^2, 1] . [-2b, 1, |b|^2] = |a|^2 + |b|^2 - 2 a.b
        self.left = torch.cat([Xc, sq[:, None], ones], dim=1).to(self.tile_dtype)
        self.right = torch.cat([-2.0 * Xc, ones, sq[:, None]], dim=1).to(self.tile_dtype)
        self.sqnorm = sq
        # |fast - canonical| <= gamma * (|a|^2 + |b|^2) (centred norms): the product's
        # dot-product error plus the canonical form's own rounding, with room to spare
        self.gamma = 0.0 if self.exact else 8.0 * (d + 4) * _U64

    def tile(self, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """Scores of every (rows[i], cols[j]) pair, (len(rows), len(cols)), in :attr:`tile_dtype`.

        Exact (canonical) when :attr:`exact`; otherwise within the bounds of
        :meth:`row_bounds` / :meth:`col_bounds`.
        """
        if self.uses_matmul:
            return ieee_product(self.left.index_select(0, rows), self.right.index_select(0, cols))
        return self.canonical(rows[:, None], cols[None, :])

    def row_bounds(self, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor | None:
        """Per row of a tile, a bound on |tile score - canonical score| over the row (None when exact)."""
        if self.exact:
            return None
        return self.gamma * (self.sqnorm.index_select(0, rows) + self.sqnorm.index_select(0, cols).max())

    def col_bounds(self, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor | None:
        """Per column of a tile, a bound on |tile score - canonical score| over the column (None when exact)."""
        if self.exact:
            return None
        return self.gamma * (self.sqnorm.index_select(0, cols) + self.sqnorm.index_select(0, rows).max())

    # -- the canonical per-pair form ------------------------------------------------
    def canonical(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Canonical scores of the pairs (a, b): integer index tensors that broadcast together."""
        shape = torch.broadcast_shapes(a.shape, b.shape)
        if not self._batched_here(shape):
            cols = self.columns
            return self._by_feature(lambda j: cols[j][a], lambda j: cols[j][b])
        if not shape:
            return self.canonical(a.reshape(1), b.reshape(1)).reshape(())
        a = a.reshape((1,) * (len(shape) - a.dim()) + tuple(a.shape))
        b = b.reshape((1,) * (len(shape) - b.dim()) + tuple(b.shape))
        if self._over_cap(shape):  # one slice of the first dimension is over the cap: flat pairs
            fa, fb = a.expand(shape).reshape(-1), b.expand(shape).reshape(-1)
            flat = self._batched(fa.shape, lambda s, e: (self.XT[:, fa[s:e]], self.XT[:, fb[s:e]]))
            return flat.view(shape)
        return self._batched(shape, lambda s, e: (self.XT[:, _rows(a, s, e)], self.XT[:, _rows(b, s, e)]))

    def canonical_to_rows(self, A: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Canonical scores of external rows ``A`` (q, d) against the points ``b`` (q, c) indices."""
        A = A.to(device=self.device, dtype=torch.float64)
        if not self._batched_here(b.shape):
            cols = self.columns
            return self._by_feature(lambda j: A[:, j : j + 1], lambda j: cols[j][b])
        AT = A.T
        if self._over_cap(b.shape):
            fa = torch.arange(b.shape[0], device=b.device)[:, None].expand(b.shape).reshape(-1)
            fb = b.reshape(-1)
            return self._batched(fb.shape, lambda s, e: (AT[:, fa[s:e]], self.XT[:, fb[s:e]])).view(b.shape)
        return self._batched(b.shape, lambda s, e: (AT[:, s:e, None], self.XT[:, b[s:e]]))

    def _batched_here(self, shape) -> bool:
        """Whether pairs of the broadcast ``shape`` take every feature at once (:meth:`_batched`)."""
        if self.device.type in _BATCHED_DEVICE_TYPES:
            return True
        if self.name == "minkowski" and not float(self.metric.p).is_integer():
            return False  # torch's CPU pow rounds a value by where it falls in a vector: not batch-invariant
        return 8 * max(1, self.d) * math.prod(shape) <= _SMALL_BATCHED_BYTES  # bytes of the batch's feature values

    def _slice_bytes(self, shape) -> int:
        """Bytes of feature values one slice of ``shape``'s first dimension gathers."""
        return 8 * max(1, self.d) * max(1, math.prod(shape[1:]))

    def _over_cap(self, shape) -> bool:
        """Whether one slice of ``shape``'s first dimension gathers more than :data:`_CANONICAL_BATCH_BYTES`."""
        return len(shape) > 1 and self._slice_bytes(shape) > _CANONICAL_BATCH_BYTES

    def __setstate__(self, state):
        # spaces pickled before the feature-major copy existed
        self.__dict__.update(state)
        if "XT" not in state:
            self.XT = self.X.T.contiguous()

    @functools.cached_property
    def columns(self) -> tuple:
        """The features as contiguous columns (views of :attr:`XT`, made once): a feature's gathers read
        contiguously."""
        return self.XT.unbind(0)

    def _batched(self, shape, operands) -> torch.Tensor:
        """Canonical scores over the broadcast ``shape`` with every feature at once (few launches),
        in slices of its first dimension that gather at most :data:`_CANONICAL_BATCH_BYTES`.
        ``operands(start, end)`` gives a slice's two feature-major operands, (d, ...) each."""
        step = max(1, _CANONICAL_BATCH_BYTES // self._slice_bytes(shape))
        if shape[0] <= step:
            return self._reduce(*operands(0, shape[0])).expand(shape)
        out = torch.empty(shape, dtype=torch.float64, device=self.device)
        for s in range(0, shape[0], step):
            e = min(shape[0], s + step)
            out[s:e] = self._reduce(*operands(s, e))
        return out

    def _reduce(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Canonical scores of the pairs of x and y: feature-major (d, ...) float64, broadcasting together."""
        name = self.name
        if self.d == 0:
            return x.new_zeros(torch.broadcast_shapes(x.shape, y.shape)[1:])
        if name == "cosine":
            return _one_minus_cosine(_tree_over_rows(x * y), _tree_over_rows(x * x), _tree_over_rows(y * y))
        t = self._term(x - y)
        if name == "chebyshev":
            return t.amax(0)  # a maximum is exact in any order
        return _tree_over_rows(t)

    def _by_feature(self, fa, fb) -> torch.Tensor:
        """Canonical scores from one feature at a time (``fa(j)``, ``fb(j)``: feature j of the pairs'
        two sides, broadcasting together), summed by :func:`_running_tree`."""
        d = self.d
        if self.name == "cosine":
            dot = _running_tree(fa(j) * fb(j) for j in range(d))
            na = _running_tree(fa(j) * fa(j) for j in range(d))
            nb = _running_tree(fb(j) * fb(j) for j in range(d))
            return _one_minus_cosine(dot, na, nb)
        terms = (self._term(fa(j) - fb(j)) for j in range(d))
        if self.name == "chebyshev":
            acc = None
            for t in terms:
                acc = t if acc is None else torch.maximum(acc, t)
            return acc
        return _running_tree(terms)

    def _term(self, diff: torch.Tensor) -> torch.Tensor:
        """Each feature's term of a difference-based metric (a fresh tensor: never aliases the data)."""
        if self.name in ("euclidean", "sqeuclidean"):
            return diff * diff
        if self.name == "minkowski":
            return diff.abs().pow(self.metric.p)
        return diff.abs()

    # -- scores to distances and weights ------------------------------------------
    def to_distance(self, scores: torch.Tensor) -> torch.Tensor:
        """Distances users see from canonical scores (float64)."""
        if self.name == "euclidean":
            return sqrt_rounded(scores)
        if self.name == "minkowski":
            return scores.pow(1.0 / self.metric.p)
        return scores

    def weight(self, sorted_scores: torch.Tensor) -> torch.Tensor:
        """Weights from (rows, k) canonical scores sorted ascending (+inf padding gives +inf)."""
        return tree_sum(self.to_distance(sorted_scores))
