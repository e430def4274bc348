"""Pairwise distances by metric: a fast tile form, an exact per-pair form, and error bounds between them.

Every metric has two ways to score a (query, reference) pair; smaller scores are
closer for every metric (the inner product is negated):

* ``tile_scores`` — fast, for whole tiles: matrix products for euclidean,
  cosine and inner product (data centred on the reference mean first, so the
  ``|x|^2 + |y|^2 - 2 x.y`` expansion does not cancel for data far from the
  origin), ``torch.cdist`` for the others.
* ``exact_scores`` — per pair, by direct differences reduced over the pair's
  own features (in a defined order for euclidean, sqeuclidean and manhattan:
  see :meth:`Metric.exact_scores`), so a pair's value does not depend on
  tiling or batch size: this is the value results are ranked by and reported from.

``bounds`` gives, per query row, how far a tile score can be from the exact
score (standard floating-point error bounds for dot products, with a safety
factor); the kNN engine uses it to certify that a candidate list holds the
true k nearest neighbours (see ``gpumine.neighbors.engine._search``).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
import threading

import torch

__all__ = ["METRICS", "PRECISIONS", "TF32_SWITCH", "ieee_product", "tf32_product", "Metric", "get_metric", "is_engine_metric", "pairwise_distances", "check_precision",
           "sqrt_rounded"]

# Up to this many features, exact scores add the per-feature terms one feature at a time
# (see Metric.exact_scores_by_feature); above, cosine and inner product take one contiguous
# reduction per pair, while euclidean, sqeuclidean and manhattan sum in chunks of
# EXACT_SUM_CHUNK features (see Metric.exact_scores).
SEQUENTIAL_MAX_FEATURES = 16
# Euclidean, sqeuclidean and manhattan exact scores at any number of features: the per-feature
# terms are summed in chunks of this many consecutive features, each chunk left to right from its
# first term, and the chunk sums are added left to right. One chunk up to SEQUENTIAL_MAX_FEATURES,
# so there it is the feature-by-feature order. A defined order (torch's sum(-1) has none) lets the
# Triton re-rank kernel (gpumine.neighbors.engine._rerank_kernel) reproduce these scores bit for bit at any d.
EXACT_SUM_CHUNK = SEQUENTIAL_MAX_FEATURES
# rows per float64 partial sum of Metric.centre (callers that sum elsewhere use the same blocks)
CENTRE_BLOCK_ROWS = 65536
_CHUNKED_METRICS = ("euclidean", "sqeuclidean", "manhattan")
_SEQUENTIAL_METRICS = ("euclidean", "sqeuclidean", "manhattan", "cosine", "inner_product")

_ALIASES = {
    "euclidean": "euclidean",
    "l2": "euclidean",
    "sqeuclidean": "sqeuclidean",
    "manhattan": "manhattan",
    "cityblock": "manhattan",
    "l1": "manhattan",
    "chebyshev": "chebyshev",
    "linf": "chebyshev",
    "cosine": "cosine",
    "inner_product": "inner_product",
    "ip": "inner_product",
    "minkowski": "minkowski",
}
METRICS = ("euclidean", "sqeuclidean", "manhattan", "chebyshev", "minkowski", "cosine", "inner_product")


# Search precisions (``precision=`` of the kNN API): how a tile's dot products may be computed.
# "exact" uses the data's own arithmetic; "tf32" and "bf16" round the operands first (TF32
# operands can be truncated to 10 fraction bits by the tensor cores, bf16 ones are rounded to
# 7), so their tile scores carry a larger, still bounded error that :meth:`Metric.bounds` adds.
PRECISIONS = ("exact", "tf32", "bf16")
_OPERAND_ROUNDOFF = {"exact": 0.0, "tf32": 2.0**-10, "bf16": 2.0**-8}
# Held while torch's process-wide TF32 switch is set for one product (precision="tf32" tiles, the
# split products of gpumine.neighbors.engine._split_product), and by the library's float32 products
# on CUDA that must not run in TF32 (ieee_product): no such product runs under another thread's switch.
TF32_SWITCH = threading.Lock()


def ieee_product(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``A @ B.T``, on CUDA float32 operands while no other thread of the library holds TF32 on."""
    with TF32_SWITCH if A.is_cuda and A.dtype == torch.float32 else nullcontext():
        return A @ B.T


def tf32_product(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``A @ B.T`` with TF32 tensor-core products on CUDA: torch's process-wide switch set for this
    product alone, under :data:`TF32_SWITCH`, and restored (elsewhere the plain product)."""
    if not A.is_cuda:
        return A @ B.T
    with TF32_SWITCH:
        previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return A @ B.T
        finally:
            torch.backends.cuda.matmul.allow_tf32 = previous


def sqrt_rounded(x: torch.Tensor) -> torch.Tensor:
    """``sqrt(x)`` correctly rounded to ``x``'s dtype on every device: the distance a float64 reference reports.

    CUDA's ``sqrt`` is IEEE-rounded; torch's vectorised CPU ``sqrt`` is not (it
    misrounds a share of float32 and float64 inputs by one unit in the last
    place, depending on the CPU's instruction set), so on the CPU NumPy's
    (IEEE) square root is used. A new tensor; ``x`` is left as it is.
    """
    if x.device.type != "cpu" or x.requires_grad:
        return torch.sqrt(x)
    import numpy as np

    return torch.from_numpy(np.sqrt(x.contiguous().numpy()))


def check_precision(precision, dtype: torch.dtype | None = None) -> str:
    """Validate a ``precision`` argument (see ``PRECISIONS``) and return it."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(repr(p) for p in PRECISIONS)}; got {precision!r}")
    if precision != "exact" and dtype is not None and dtype != torch.float32:
        raise ValueError(
            f"precision={precision!r} searches float32 data on tensor cores but the data is {str(dtype).replace('torch.', '')}; "
            "convert it to float32 or use precision='exact'"
        )
    return precision


def operand_roundoff(precision: str) -> float:
    """Relative error of one operand of a tile product under ``precision`` (0 for "exact")."""
    return _OPERAND_ROUNDOFF[precision]


def _unit_roundoff(dtype: torch.dtype, device: torch.device, via_matmul: bool) -> float:
    """Unit roundoff of the arithmetic that produced a tile, honouring a user's TF32/BF16 matmul setting."""
    u = 2.0**-53 if dtype == torch.float64 else 2.0**-24
    if via_matmul and dtype == torch.float32:
        precision = torch.get_float32_matmul_precision()
        tf32 = device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32
        if precision == "medium":
            u = 2.0**-8
        elif precision == "high" or tf32:
            u = 2.0**-11
    return u


@dataclass(frozen=True)
class Metric:
    """A distance metric as the kNN engine sees it (see the module docstring)."""

    name: str
    p: float = 2.0

    @property
    def scale_power(self) -> int:
        """How scores scale with the data: scores(s * X) = s ** scale_power * scores(X)."""
        if self.name in ("euclidean", "sqeuclidean", "inner_product"):
            return 2
        return 0 if self.name == "cosine" else 1

    @property
    def distance_power(self) -> int:
        """How distances scale with the data: distance(s * X) = s ** distance_power * distance(X)."""
        if self.name in ("sqeuclidean", "inner_product"):
            return 2
        return 0 if self.name == "cosine" else 1

    @property
    def uses_matmul(self) -> bool:
        return self.name in ("euclidean", "sqeuclidean", "cosine", "inner_product")

    # -- preparation -------------------------------------------------------
    def centre(self, X_ref: torch.Tensor, column_sums: torch.Tensor | None = None) -> torch.Tensor | None:
        """The shift applied to both sides before tile products (the reference mean, for L2).

        ``column_sums``: the float64 sums of ``X_ref``'s columns, added in blocks of
        ``CENTRE_BLOCK_ROWS`` rows in order, when the caller has them.
        """
        if self.name in ("euclidean", "sqeuclidean") and X_ref.shape[0]:
            total = column_sums
            if total is None:
                # summed in float64 a block of rows at a time: no full float64 copy of the data
                # (one block: one launch, for the launch-bound small searches)
                total = X_ref[:CENTRE_BLOCK_ROWS].sum(0, dtype=torch.float64)
                for start in range(CENTRE_BLOCK_ROWS, X_ref.shape[0], CENTRE_BLOCK_ROWS):
                    total += X_ref[start : start + CENTRE_BLOCK_ROWS].sum(0, dtype=torch.float64)
            return (total / X_ref.shape[0]).to(X_ref.dtype)
        return None

    def prepare(self, X: torch.Tensor, centre: torch.Tensor | None, side: str) -> dict:
        """Per-row quantities reused by every tile that involves these rows.

        ``side`` is ``"query"`` or ``"ref"``. For the matrix-product metrics the
        rows are laid out so that one product gives the tile scores with no
        further pass: L2 uses ``[x, 1] . [-2y, |y|^2]``, cosine and inner
        product negate the reference side.
        """
        if self.name in ("euclidean", "sqeuclidean"):
            Xc = X - centre.to(X.device) if centre is not None else X
            sqnorm = (Xc * Xc).sum(1)
            if side == "ref":
                rows = torch.cat([-2.0 * Xc, sqnorm[:, None]], dim=1)
            else:
                rows = torch.cat([Xc, torch.ones_like(sqnorm)[:, None]], dim=1)
            return {"rows": rows, "sqnorm": sqnorm}
        if self.name == "cosine":
            norm = torch.linalg.vector_norm(X, dim=1)
            safe = torch.where(norm > 0, norm, torch.ones_like(norm))
            unit = X / safe[:, None]
            return {"rows": -unit if side == "ref" else unit, "norm": norm}
        if self.name == "inner_product":
            return {"rows": -X if side == "ref" else X, "norm": torch.linalg.vector_norm(X, dim=1)}
        return {"rows": X}

    # -- fast tile scores ----------------------------------------------------
    def tile_scores(self, Q: dict, R: dict, precision: str = "exact") -> torch.Tensor:
        """Scores of a (queries x references) tile from prepared rows (smaller = closer).

        Exact up to a constant per query row (|q|^2 for L2, 1 for cosine), which
        changes neither the order nor the score differences within a row, and up
        to the error :meth:`bounds` allows. ``precision="bf16"`` multiplies
        bfloat16 copies of the rows; ``"tf32"`` lets CUDA use TF32 tensor cores.
        """
        if self.uses_matmul:
            if precision == "bf16":
                return (Q["rows"].to(torch.bfloat16) @ R["rows"].to(torch.bfloat16).T).to(Q["rows"].dtype)
            if precision == "tf32":
                return tf32_product(Q["rows"], R["rows"])
            return ieee_product(Q["rows"], R["rows"])
        p = {"manhattan": 1.0, "chebyshev": float("inf")}.get(self.name, self.p)
        return torch.cdist(Q["rows"], R["rows"], p=p, compute_mode="donot_use_mm_for_euclid_dist")

    # -- exact per-pair scores -----------------------------------------------
    def exact_scores(self, Q: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """Exact scores of query ``Q[i]`` against each candidate ``Y[i, j]``.

        ``Q`` is (q, d), ``Y`` is (q, c, d) (or (1, c, d) to share candidates);
        the result is (q, c). Each pair is reduced over its own features only,
        so its value does not depend on which other pairs share the batch
        (tiling, chunking, candidate lists); where the order below is spelled
        out it is fixed by ``d`` alone, whatever the batch's shape ((1, c, d)
        or (q, c, d)) or the operands' memory layout:

        * euclidean, sqeuclidean, manhattan: the per-feature terms
          ``t_f = (x_f - y_f)^2`` (``|x_f - y_f|``) are summed in chunks of
          ``EXACT_SUM_CHUNK`` (16) consecutive features, each chunk left to
          right from its first term, and the chunk sums are added left to
          right: ``((t_0 + ... + t_15) + (t_16 + ... + t_31)) + ... + (t_{16m}
          + ... + t_{d-1})``. Up to 16 features that is one chunk, the
          feature-by-feature order of :meth:`exact_scores_by_feature`; the
          Triton re-rank kernel (:mod:`gpumine.neighbors.engine._rerank_kernel`) sums in the
          same order, so it reproduces these scores bit for bit at any ``d``.
        * cosine, inner product: feature by feature up to
          ``SEQUENTIAL_MAX_FEATURES``, above by one contiguous reduction per pair.
        * chebyshev, minkowski: one contiguous reduction per pair.
        """
        # C-contiguous operands keep each pair's reduction order independent of the
        # caller's memory layout (Fortran-order input changed the order and broke ties)
        Q, Y = Q.contiguous(), Y.contiguous()
        if self.sums_by_feature(Q.shape[1]):
            return self.exact_scores_by_feature(Q, lambda f: Y[..., f])
        if self.name in _CHUNKED_METRICS and Q.shape[1] > EXACT_SUM_CHUNK:
            return self._chunked_exact_scores(Q, Y)
        Qb = Q[:, None, :]
        if self.name in ("cosine", "inner_product"):
            dot = (Qb * Y).sum(-1)
            if self.name == "inner_product":
                return -dot
            denom = torch.sqrt((Q * Q).sum(-1))[:, None] * torch.sqrt((Y * Y).sum(-1))
            positive = denom > 0
            cos = torch.where(positive, dot / torch.where(positive, denom, torch.ones_like(denom)), torch.zeros_like(dot))
            return (1.0 - cos).clamp_(0.0, 2.0)  # as scikit-learn: rounding can leave 1 - cos just below 0
        diff = Qb - Y
        if self.name in ("euclidean", "sqeuclidean"):
            return (diff * diff).sum(-1)
        diff = diff.abs_()
        if self.name == "manhattan":
            return diff.sum(-1)
        if self.name == "chebyshev":
            return diff.amax(-1)
        # float64 powers: torch's vectorised float32 pow rounds differently in a batch's
        # body and tail, which made a pair's value depend on its position
        return diff.to(torch.float64).pow_(self.p).sum(-1).pow_(1.0 / self.p).to(Q.dtype)

    def _chunked_exact_scores(self, Q: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
        """:meth:`exact_scores` of euclidean, sqeuclidean and manhattan at more than one chunk of features."""
        # On a GPU launches, not arithmetic, set the time here (a launch outweighs its few
        # flops): a loop over features would take ~3 d launches (~200 at 65 features). So the terms of every pair
        # are formed by broadcast over (q, c, features) into a buffer padded with +0.0 to whole
        # chunks (x + 0.0 == x exactly for the non-negative terms, so the padding leaves the tail
        # chunk's sum as it is), the 16 positions of every chunk are added left to right over a
        # (q, c, n_chunks, 16) view (15 elementwise adds for all chunks at once), then the
        # n_chunks chunk sums left to right: ~18 + n_chunks launches whatever d. Separate
        # elementwise IEEE operations (no contraction across launches) round every pair alike
        # whatever the batch's shape or layout. Peak temporaries: the padded terms, at most
        # d + 15 values per pair (the plain form held two d-wide temporaries).
        d = Q.shape[1]
        n_chunks = -(-d // EXACT_SUM_CHUNK)
        shape = torch.broadcast_shapes(Q.shape[:1] + (1,), Y.shape[:-1])
        terms = torch.empty((*shape, n_chunks * EXACT_SUM_CHUNK), dtype=torch.promote_types(Q.dtype, Y.dtype),
                            device=Q.device)
        terms[..., d:].zero_()
        torch.sub(Q[:, None, :], Y, out=terms[..., :d])
        if self.name == "manhattan":
            terms.abs_()
        else:
            terms.mul_(terms)
        chunks = terms.view(*shape, n_chunks, EXACT_SUM_CHUNK)
        sums = chunks[..., 0] + chunks[..., 1]
        for j in range(2, EXACT_SUM_CHUNK):
            sums.add_(chunks[..., j])
        total = sums[..., 0] + sums[..., 1]
        for i in range(2, n_chunks):
            total.add_(sums[..., i])
        return total

    def sums_by_feature(self, d: int) -> bool:
        """Whether :meth:`exact_scores` sums this metric's ``d`` per-feature terms one feature at a time."""
        return 0 < d <= SEQUENTIAL_MAX_FEATURES and self.name in _SEQUENTIAL_METRICS

    def exact_scores_by_feature(self, Q: torch.Tensor, column) -> torch.Tensor:
        """:meth:`exact_scores` with the candidates given feature by feature, bit for bit.

        ``column(f)`` returns feature ``f`` of every candidate, shaped (q, c) or
        (1, c). The per-feature terms are added left to right, one elementwise
        operation each, so the value of a pair is fixed by its own features and
        the kNN engine can gather candidates one feature at a time from a
        feature-major copy (stacking gathered features into rows was measured at
        nearly half of a k = 2048 search). Euclidean, sqeuclidean and manhattan
        take any ``d``, in :meth:`exact_scores`' chunked order (left to right
        within each ``EXACT_SUM_CHUNK`` features, then the chunk sums left to
        right; one chunk up to 16 features); cosine and inner product only
        where :meth:`sums_by_feature`.
        """
        d = Q.shape[1]
        if self.name in ("cosine", "inner_product"):
            dot = q_sq = y_sq = None
            for f in range(d):
                x, y = Q[:, f, None], column(f)
                dot = x * y if dot is None else dot + x * y
                if self.name == "cosine":
                    q_sq = x * x if q_sq is None else q_sq + x * x
                    y_sq = y * y if y_sq is None else y_sq + y * y
            if self.name == "inner_product":
                return -dot
            denom = torch.sqrt(q_sq) * torch.sqrt(y_sq)
            positive = denom > 0
            cos = torch.where(positive, dot / torch.where(positive, denom, torch.ones_like(denom)), torch.zeros_like(dot))
            return (1.0 - cos).clamp_(0.0, 2.0)  # as scikit-learn: rounding can leave 1 - cos just below 0
        total = part = None
        for f in range(d):
            diff = Q[:, f, None] - column(f)
            term = diff * diff if self.name != "manhattan" else diff.abs_()
            part = term if part is None else part + term
            if (f + 1) % EXACT_SUM_CHUNK == 0 or f + 1 == d:  # a chunk ends: add its sum
                total = part if total is None else total + part
                part = None
        return total

    def to_distance(self, scores: torch.Tensor) -> torch.Tensor:
        """Turn ranking scores into the distances users see."""
        if self.name == "euclidean":
            return sqrt_rounded(scores)
        if self.name == "inner_product":
            return -scores  # similarities, largest first (as FAISS IndexFlatIP)
        return scores

    # -- error bounds ------------------------------------------------------------
    def bounds(self, Q: dict, ref_scale, d: int, device: torch.device, kth: torch.Tensor, cth: torch.Tensor,
               precision: str = "exact"):
        """Per-row bounds (low, high) on |tile score - exact score|.

        ``kth``/``cth`` are the k-th and the largest kept candidate tile scores
        of each row (used by metrics whose error is relative to the score).
        ``ref_scale`` is the largest squared norm (L2) or norm (IP) of a prepared
        reference row. The factor 4 covers both the tile's and the exact form's
        rounding, with room to spare. A reduced ``precision`` adds ``4 u_op``
        times a bound on the sum of |products| (two rounded operands, a rounded
        bf16 result, and slack): ``|x|^2 + 2 max|y|^2`` for the prepared L2 rows
        ``[x, 1] . [-2y, |y|^2]``, 1 for unit cosine rows, ``|x| max|y|`` for IP.
        """
        u = _unit_roundoff(kth.dtype, device, self.uses_matmul)
        gamma = 4.0 * (d + 4) * u
        reduced = 4.0 * operand_roundoff(precision)
        if self.name in ("euclidean", "sqeuclidean"):
            b = gamma * (Q["sqnorm"] + ref_scale)
            if reduced:
                b = b + reduced * (Q["sqnorm"] + 2.0 * ref_scale)
            return b, b
        if self.name == "cosine":
            b = torch.full_like(kth, gamma * 2.0 + reduced)
            return b, b
        if self.name == "inner_product":
            b = (gamma + reduced) * Q["norm"] * ref_scale
            return b, b
        return gamma * cth.abs(), gamma * kth.abs()

    def tile_offset(self, Q: dict, d: int):
        """Per-row ``(offset, error)`` with exact score ~ tile score + offset, from prepared query rows.

        The constant :meth:`tile_scores` leaves out (``|x|^2`` of the centred
        row for L2, 1 for cosine, else 0); ``error`` bounds the rounding of the
        computed ``|x|^2`` (``d`` products and sums, doubled), the rest of the
        tile-to-exact difference being :meth:`bounds`'.
        """
        rows = Q["rows"]
        zero = torch.zeros(rows.shape[0], dtype=rows.dtype, device=rows.device)
        if self.name in ("euclidean", "sqeuclidean"):
            sqnorm = Q["sqnorm"]
            return sqnorm, 2.0 * (d + 2) * _unit_roundoff(sqnorm.dtype, sqnorm.device, False) * sqnorm
        if self.name == "cosine":
            return zero + 1.0, zero
        return zero, zero

    def relative_bounds(self, d: int, kth: torch.Tensor, cth: torch.Tensor):
        """Per-row bounds (low, high) for scores summed from direct per-feature terms.

        Each term (a difference, squared or absolute) is non-negative with a
        relative rounding error, so a float32 sum of ``d`` of them is within
        ``(d + 2) u`` of its value relative to itself; the factor 4 (as in
        :meth:`bounds`) covers both the candidate's and the exact form's rounding.
        """
        gamma = 4.0 * (d + 4) * _unit_roundoff(kth.dtype, kth.device, False)
        return gamma * cth.abs(), gamma * kth.abs()

    def ref_scale(self, R: dict) -> torch.Tensor:
        """The reference-side quantity ``bounds`` needs: a 0-d tensor on the rows' device
        (max over the given prepared rows), so no host synchronisation is needed."""
        rows = R["rows"]
        if self.name in ("euclidean", "sqeuclidean"):
            values = R["sqnorm"]
        elif self.name == "inner_product":
            values = R["norm"]
        else:
            return torch.zeros((), dtype=rows.dtype, device=rows.device)
        return values.amax() if values.numel() else torch.zeros((), dtype=rows.dtype, device=rows.device)


def is_engine_metric(metric) -> bool:
    """Whether ``metric`` names one of :data:`METRICS` (or an alias :func:`get_metric` accepts).

    Examples
    --------
    >>> is_engine_metric("L2"), is_engine_metric("seuclidean")
    (True, False)
    """
    return isinstance(metric, str) and metric.lower() in _ALIASES


def get_metric(metric: str = "euclidean", p: float | None = None) -> Metric:
    """Look up a metric by name (scikit-learn and FAISS spellings are accepted).

    ``"minkowski"`` with ``p=2`` is euclidean and with ``p=1`` manhattan, as in
    scikit-learn; ``p`` must be at least 1.

    Examples
    --------
    >>> get_metric("minkowski", p=1).name
    'manhattan'
    """
    if not isinstance(metric, str) or metric.lower() not in _ALIASES:
        raise ValueError(
            f"Unknown metric {metric!r}; use one of {', '.join(METRICS)} "
            "(aliases: l2, l1, cityblock, linf, ip)"
        )
    name = _ALIASES[metric.lower()]
    if name == "minkowski":
        p = 2.0 if p is None else p
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not p >= 1:
            raise ValueError(f"p must be a number >= 1 for metric='minkowski'; got p={p!r}")
        if p == 1:
            return Metric("manhattan", 1.0)
        if p == 2:
            return Metric("euclidean", 2.0)
        if p == float("inf"):
            return Metric("chebyshev", float("inf"))
        return Metric("minkowski", float(p))
    return Metric(name)


def pairwise_distances(X: torch.Tensor, Y: torch.Tensor | None = None, metric: str = "euclidean", p: float | None = None) -> torch.Tensor:
    """All distances between rows of ``X`` and rows of ``Y`` (exact per-pair form).

    This materialises an (n, m) matrix: it is for small inputs and tests. The kNN
    engine never builds one; use :func:`gpumine.neighbors.kneighbors` for search.

    Examples
    --------
    >>> X = torch.tensor([[0.0, 0.0], [3.0, 4.0]])
    >>> pairwise_distances(X)
    tensor([[0., 5.],
            [5., 0.]])
    """
    m = get_metric(metric, p)
    Y = X if Y is None else Y
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"X has {X.shape[1]} features but Y has {Y.shape[1]}; both need the same columns")
    return m.to_distance(m.exact_scores(X, Y.unsqueeze(0)))
