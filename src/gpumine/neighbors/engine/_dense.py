"""Dense searches: one score matrix per query block and a fixed number of launches.

For searches small enough that a block of queries can hold its scores against
every reference, the candidate machinery of the tile engine (tile merges,
retries, exact scans) costs more in launches and host waits than the work
itself. Here each block of queries runs, whatever the data:

1. **one product**: the block's scores against all references (the metric's
   matrix-product form, within :meth:`Metric.bounds` of the true scores);
2. **one top-c** (c = k plus a margin) of those scores;
3. **one float64 re-score** of the c candidates and a sort by (float64 score,
   index) — the result order the engine promises for float32 data;
4. **one certificate**: a row is final when its float64 k-th score is below the
   least true score any reference left out can have (the c-th tile score less
   the bound);
5. **one radius pass** for the rows left open (ties or near-ties across the
   k-th place): every reference whose tile score can be at or under the row's
   float64 k-th score is collected from the same score matrix, re-scored in
   float64 and sorted. Each true neighbour is among them, so the row is final.

Bound: per block one (queries x references) product and selection, (queries x
c) float64 re-scores, and for the open rows at most one float64 re-score of
every reference they collect — never more than one float64 pass over those
rows' pairs, however many ties the data has. Host waits: one per block (the
open rows), plus one per group of open rows (their widest collection).

Results equal the engine's float64-ordered search bit for bit: the same float64
per-pair scores (:meth:`Metric.exact_scores`, in its fixed summation order),
ordered by (score, index), reported rounded to the data's dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...core.distance import Metric, ieee_product, tf32_product
from ...core.select import PAD_INDEX
from ...core.tiles import PRODUCT_ROW_BYTES, padded_columns
from ._row_product_kernel import row_product, row_product_available, row_product_torch
from ._split_operand_kernel import split_operand
from ._split_product import SPLIT_FLUSHED, SPLIT_ROUNDOFF, SPLIT_SUM_ROUNDING, split_product, split_terms

__all__ = ["DENSE_METRICS", "DENSE_MAX_PAIRS", "DENSE_MIN_FEATURES_ALWAYS", "dense_applies", "dense_by_size", "dense_eligible",
           "dense_search", "DenseReferences", "ReferenceMemo", "tensor_state", "block_scores", "first_pass", "settle", "integer_centre", "integer_centre_kind", "integer_centre_on_device", "tile_dtype_for", "candidates_for"]

# metrics with a matrix-product tile form whose error Metric.bounds states
DENSE_METRICS = ("euclidean", "sqeuclidean")
# Searches of at most this many (query, reference) pairs run dense on a GPU, and so do those at
# more features than the fused kernel takes (DENSE_MIN_FEATURES_ALWAYS). Larger ones are probed
# (gpumine.neighbors.engine._search): the fused kernel, whose threshold keeps most pairs out of any
# selection, where it certifies a sample of the queries, else dense.
DENSE_MAX_PAIRS = 1 << 26
DENSE_MIN_FEATURES_ALWAYS = 81
# candidates per row beyond k: enough that continuous data certifies nearly every row
DENSE_MARGIN = 16
# Integer data scored exactly keeps every reference as a candidate up to this many: its rows are
# certified at once, and the radius pass (a host wait and its launches) never runs on small
# tie-heavy data; with no re-score, the wider selection costs little. Float data keeps k + margin.
DENSE_ALL_CANDIDATES = 1024


def candidates_for(k: int, available: int, exact: bool) -> int:
    """Candidates kept per row of a dense search over ``available`` references."""
    if exact and available <= DENSE_ALL_CANDIDATES:
        return available
    return min(available, k + DENSE_MARGIN)
# float32 and float64 relative rounding of a sum of d non-negative terms (see _float64_order)
_REL32 = 2.0**-24
_REL64 = 2.0**-53


def dense_eligible(metric: Metric, dtype: torch.dtype, device: torch.device, backend: str, precision: str) -> bool:
    """Whether a search may run dense at all: a GPU, the automatic backend, exact products, an L2 metric."""
    return (device.type == "cuda" and backend == "auto" and precision == "exact" and metric.name in DENSE_METRICS
            and dtype in (torch.float32, torch.float64))


def dense_by_size(n_query: int, n_ref: int, d: int) -> bool:
    """Whether a search's shape alone sends it dense (see ``DENSE_MAX_PAIRS``); larger ones are probed."""
    return n_ref > 0 and d > 0 and (n_query * n_ref <= DENSE_MAX_PAIRS or d >= DENSE_MIN_FEATURES_ALWAYS)


def dense_applies(metric: Metric, dtype: torch.dtype, device: torch.device, backend: str, precision: str, n_query: int,
                  n_ref: int, d: int) -> bool:
    """Whether ``knn_search`` runs this search dense by its shape (see the module docstring)."""
    return dense_eligible(metric, dtype, device, backend, precision) and dense_by_size(n_query, n_ref, d)


def tile_dtype_for(device: torch.device) -> torch.dtype:
    """The dtype of the dense score matrix: float64 where the device multiplies it at full speed.

    Float64 products bound the matrix's error at about 2^-53 of the squared
    norms instead of 2^-24, so real data whose norms dwarf its distances
    (counts, money, pixel sums) still certifies nearly every row. Data-centre
    GPUs (compute capability x.0, from 6.0 to 10.0) run float64 products at half
    or more of float32's rate; others at 1/32 or less.
    """
    if device.type != "cuda":
        return torch.float32
    major, minor = torch.cuda.get_device_capability(device)
    # x.0 parts from Pascal to Blackwell's data-centre B200 (10.0); consumer Blackwell is 12.x
    return torch.float64 if 6 <= major <= 10 and minor == 0 else torch.float32


def integer_centre(ref: torch.Tensor, query: torch.Tensor) -> torch.Tensor | None:
    """An integer centre for integer-valued data whose float32 dense scores are then exact, else None.

    With every feature shifted by a whole number, each term, partial sum and
    score of the product form ``|y|^2 - 2 x.y`` (and the score ``|x - y|^2``)
    is an integer under 2^24 when ``4 sum_f m_f^2 < 2^24`` (``m_f`` the largest
    shifted magnitude of feature f): float32 represents all of them exactly, in
    any summation order. Not where the user set TF32 or reduced-precision products for float32
    (operands may lose bits); the library's own tensor-core products take data it checked
    (:func:`integer_centre_kind`).
    """
    return integer_centre_kind(ref, query)[0]


def integer_centre_kind(ref: torch.Tensor, query: torch.Tensor) -> tuple[torch.Tensor | None, bool]:
    """:func:`integer_centre` and whether its products are exact on tensor cores too (see
    ``TENSOR_CORE_INTEGERS``, ``_TENSOR_CORE_INTEGER_LIMIT``): one host wait."""
    if ref.dtype != torch.float32 or _matmul_rounds_operands(ref.device):
        return None, False
    centre, exact, tensor_cores = integer_centre_on_device(ref, query)
    exact, tensor_cores = torch.stack([exact, tensor_cores]).tolist()
    return (centre, bool(tensor_cores)) if exact else (None, False)


def integer_centre_on_device(ref: torch.Tensor, query: torch.Tensor, integral: torch.Tensor | None = None,
                             ends: list | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`integer_centre` as tensors, with no host wait: ``(centre, whether it makes the scores exact,
    whether tensor-core products are exact too)``.

    ``integral`` (whether every array holds whole numbers) and ``ends`` (each
    array's per-feature ``aminmax``), when the caller has them.
    """
    arrays = [X for X in ((ref,) if query is ref else (ref, query)) if X.numel()]
    if not arrays or ref.shape[1] == 0:  # nothing to score
        no = torch.zeros((), dtype=torch.bool, device=ref.device)
        return torch.zeros(ref.shape[1], dtype=ref.dtype, device=ref.device), no, no
    if integral is None:
        integral = torch.stack([(X == torch.round(X)).all() for X in arrays]).all()
    if ends is None:
        ends = [torch.aminmax(X, dim=0) for X in arrays]  # one pass over each array
    lows = torch.stack([low for low, _ in ends]).amin(0).double()
    highs = torch.stack([high for _, high in ends]).amax(0).double()
    centre = torch.round((lows + highs) / 2).to(ref.dtype)  # the shift the data gets, as the data's dtype
    reach = torch.maximum(highs - centre.double(), centre.double() - lows)
    bits = 4.0 * (reach * reach).sum()
    exact = integral & (bits < _EXACT_INTEGER_LIMIT)
    tensor_cores = exact & (bits < _TENSOR_CORE_INTEGER_LIMIT)
    if not TENSOR_CORE_INTEGERS or not ref.is_cuda:
        tensor_cores = torch.zeros_like(exact)
    return centre, exact, tensor_cores


_EXACT_INTEGER_LIMIT = 2.0**24
# True: integer data whose products are exact in float32 takes TF32 tensor-core products where
# they are exact too (see _TENSOR_CORE_INTEGER_LIMIT); False: IEEE float32 products (same-run A/B
# timings). Same scores either way, bit for bit. (The user's own TF32 setting still turns the float32
# path off, see _matmul_rounds_operands: it rounds operands these bounds do not cover.)
TENSOR_CORE_INTEGERS = True
# Tensor cores multiply TF32 operands (11 significant bits) exactly and add the products after
# aligning and truncating them: whole numbers lose nothing while every partial sum stays within the
# accumulator's 24 bits, which 4 sum_f m_f^2 < 2^22 keeps with a margin. It also keeps each shifted
# feature under 2^10, so the doubled reference side (-2y) is a whole number under 2^11, which TF32
# holds; the squared norms (under 2^20) enter as two columns of 11 bits each (_l2_operand).
# BENCHMARKS.md, "Design measurements quoted in the code", has the exactness checks and the times.
_TENSOR_CORE_INTEGER_LIMIT = 2.0**22
_NORM_SPLIT = 2.0**11


def _matmul_rounds_operands(device: torch.device) -> bool:
    """Whether float32 products on ``device`` may round their operands (TF32 / reduced precision)."""
    if torch.get_float32_matmul_precision() != "highest":
        return True
    return device.type == "cuda" and bool(torch.backends.cuda.matmul.allow_tf32)


def tensor_state(ref: torch.Tensor) -> tuple:
    """What identifies a tensor's contents between calls, short of reading them: its version counter (moved by
    every write through torch), storage, layout, dtype and device (inference tensors have no version counter)."""
    return (ref._version, ref.data_ptr(), tuple(ref.shape), tuple(ref.stride()), ref.dtype, ref.device)


class ReferenceMemo:
    """What searches learn and prepare from one reference tensor, kept by its owner between searches.

    An estimator that copied its training data to the device owns that copy (no
    one else can write to it) and keeps one memo beside it: searches against it
    then prepare the references' product operands once (as an index does) and
    learn once whether they hold whole numbers. An entry holds for the tensor it
    was made from, unchanged since (its version counter, storage and layout);
    anything else clears the memo. Only owned copies may have one: writes from
    outside torch (DLPack, ``.data``) would not show in the version counter, nor
    do writes to inference tensors (``torch.inference_mode``), for which nothing
    is kept. Pickled (and moved between devices) empty. It holds the operands
    (one to three times the data's size) as long as its owner holds the data.
    """

    # a cache: moved between devices or pickled as a new, empty memo (see gpumine._device_state)
    _cache_only = True

    def __init__(self):
        self._key = None
        self._entries: dict = {}

    def get(self, ref: torch.Tensor, name):
        """The entry ``name`` for ``ref`` as it is now, or None."""
        if ref.is_inference() or self._key != tensor_state(ref):
            return None
        return self._entries.get(name)

    def put(self, ref: torch.Tensor, name, value, *, replaces=None) -> None:
        """Keep ``value`` as ``name`` for ``ref`` as it is now (clearing entries of other tensors or versions,
        and those whose names ``replaces(name)`` picks: one set of prepared operands at a time)."""
        if ref.is_inference():  # no version counter to tell a write
            return
        key = tensor_state(ref)
        if self._key != key:
            self._key, self._entries = key, {}
        if replaces is not None:
            for other in [other for other in self._entries if replaces(other)]:
                del self._entries[other]
        self._entries[name] = value

    def ref_whole(self, ref: torch.Tensor) -> bool:
        """Whether ``ref`` holds whole numbers only, learned once (one pass and one host wait)."""
        whole = self.get(ref, "whole")
        if whole is None:
            whole = bool((ref == torch.round(ref)).all()) if ref.is_floating_point() else True
            self.put(ref, "whole", whole)
        return whole

    def __getstate__(self):
        return {}

    def __setstate__(self, state):
        self.__init__()


class DenseReferences:
    """The references prepared once for the blocks of a dense search.

    ``centre``: an integer centre (:func:`integer_centre`) makes the float32
    scores exact (``exact``); it may be a tensor computed on the device by a
    captured search, whose flag then says afterwards whether it held.
    ``memo``: the references' :class:`ReferenceMemo`, whose prepared operands
    are taken (or left there) for scores that are not exact.
    """

    def __init__(self, ref: torch.Tensor, k: int, metric: Metric, *, exclude_self: bool, tile_dtype: torch.dtype,
                 centre: torch.Tensor | None = None, split: bool = False, rounded: bool = False,
                 memo: ReferenceMemo | None = None, tensor_cores: bool = False):
        self.ref, self.k, self.metric, self.exclude_self = ref, k, metric, exclude_self
        self.d = ref.shape[1]
        self.available = ref.shape[0] - (1 if exclude_self else 0)
        self.c = candidates_for(k, self.available, centre is not None)
        self.exact = centre is not None
        self.tile_dtype = ref.dtype if self.exact else tile_dtype
        if split and (self.exact or self.tile_dtype != torch.float32 or metric.name not in DENSE_METRICS):
            raise ValueError("split products take float32 tiles of L2 data whose products are not exact already")
        if rounded and (self.exact or split or self.tile_dtype != torch.float64):
            raise ValueError("rounded products take float64 tiles of data whose products are not exact already")
        if tensor_cores and not (self.exact and ref.dtype == torch.float32 and metric.name in DENSE_METRICS):
            raise ValueError("tensor-core products take integer float32 data centred by integer_centre_kind")
        # float32 products as one TF32 product of split rows (see ._split_product)
        self.split = split
        # float64 products stored as float32, each rounded once (see ._row_product_kernel)
        self.rounded = rounded
        # exact integer products on TF32 tensor cores (see TENSOR_CORE_INTEGERS)
        self.tensor_cores = tensor_cores
        # the scores' dtype, as the selection reads them
        self.score_dtype = torch.float32 if rounded else self.tile_dtype
        # an integer centre comes with the queries: only other operands are kept in a memo
        name = None if memo is None or self.exact else ("operands", metric.name, self.tile_dtype, split, rounded)
        parts = None if name is None else memo.get(ref, name)
        if parts is None:
            wide = ref.to(self.tile_dtype)
            centre = centre if self.exact else _shift(metric, wide)
            if metric.name in DENSE_METRICS and not (split or rounded):  # the product operand padded as it is made
                rows, sqnorm = _l2_operand(wide, centre, "ref", tensor_cores)
                prepared = {"rows": rows, "sqnorm": sqnorm}
            elif split:  # L2 (as the split products' bound): split as it is made (one pass where the kernel runs)
                rows, sqnorm = split_operand(wide, centre, "ref")
                prepared = {"rows": rows, "sqnorm": sqnorm}
            else:
                prepared = metric.prepare(wide, centre, "ref")
                rows = padded_columns(prepared["rows"])
            parts = (centre, rows, metric.ref_scale(prepared), _FeatureSource(ref, metric, self.d), prepared.get("sqnorm"))
            if name is not None:
                memo.put(ref, name, parts, replaces=lambda other: other[0] == "operands")
        self.centre, self.rows, self.scale, self.source, self.sqnorm = parts

    def self_query_prepared(self) -> dict:
        """The prepared query rows of a search whose queries are these references, from their own
        operand (one pass instead of the queries' preparation): ``[x, 1]`` is ``[-2x, |x|^2]`` times
        -1/2 (exact: a power of two) with the last column set, and ``|x|^2`` is the references'."""
        rows = self.rows * -0.5
        _set_query_columns(rows, self.d, self.tensor_cores)
        return {"rows": rows, "sqnorm": self.sqnorm}

    def block_rows(self, budget_bytes: int) -> int:
        """Queries per block: a score row, its top-c scratch and the float64 re-score temporaries each."""
        item = torch.finfo(self.tile_dtype).bits // 8
        row_bytes = self.ref.shape[0] * item * 2 + self.c * (self.d + 4) * 8 * 3
        return max(1, budget_bytes // row_bytes)


def _shift(metric: Metric, X: torch.Tensor) -> torch.Tensor | None:
    """The shift both sides of a dense search get before their products: the float64 mean of at most
    ``_SHIFT_SAMPLE_ROWS`` evenly strided reference rows, in their dtype (one small reduction).

    Any shift serves correctness: the products' bound (:meth:`Metric.bounds`) is stated for the
    shifted rows as they are computed. A shift near the data keeps those rows short and the bound
    tight: a sample's float64 mean lands there as :meth:`Metric.centre`'s mean of every row does,
    whose float64 sums over all rows took longer than the rest of a large reference set's
    preparation (BENCHMARKS.md, "Design measurements quoted in the code").
    """
    if metric.name in DENSE_METRICS and X.shape[0]:
        sample = X[:: max(1, X.shape[0] // _SHIFT_SAMPLE_ROWS)]
        return (sample.sum(0, dtype=torch.float64) / sample.shape[0]).to(X.dtype)
    return metric.centre(X)


_SHIFT_SAMPLE_ROWS = 4096


def _l2_operand(X: torch.Tensor, centre: torch.Tensor | None, side: str, tensor_cores: bool = False):
    """The L2 product operand of the rows ``X`` and their squared centred norms: ``(rows, |x|^2)``.

    ``rows`` holds :meth:`Metric.prepare`'s L2 rows (``[x, 1]`` for queries,
    ``[-2y, |y|^2]`` for references, ``x`` and ``y`` centred), written into a
    buffer already padded as :func:`padded_columns` pads (no copies to join and
    pad them). ``tensor_cores``: ``|y|^2`` as two columns of 11 bits each,
    ``hi * 2^11 + lo``, met by ``[2^11, 1]`` on the query side: every operand a
    whole number TF32 keeps exactly.
    """
    n, d = X.shape
    extra = 2 if tensor_cores else 1
    per_row = max(1, PRODUCT_ROW_BYTES // X.element_size())
    width = d + extra + (-(d + extra) % per_row)
    rows = torch.empty((n, width), dtype=X.dtype, device=X.device)
    rows[:, d + extra :].zero_()
    if side == "query":
        Xc = torch.sub(X, centre.to(X.device), out=rows[:, :d]) if centre is not None else rows[:, :d].copy_(X)
        sqnorm = (Xc * Xc).sum(1)
        _set_query_columns(rows, d, tensor_cores)
        return rows, sqnorm
    Xc = X - centre.to(X.device) if centre is not None else X
    sqnorm = (Xc * Xc).sum(1)
    torch.mul(Xc, -2.0, out=rows[:, :d])
    if tensor_cores:  # whole numbers under 2^20: both parts exact
        high = torch.floor(sqnorm / _NORM_SPLIT)
        rows[:, d] = high
        rows[:, d + 1] = sqnorm - high * _NORM_SPLIT
    else:
        rows[:, d] = sqnorm
    return rows, sqnorm


def _set_query_columns(rows: torch.Tensor, d: int, tensor_cores: bool) -> None:
    """The query side's columns after its ``d`` features: ``1`` against ``|y|^2``, or ``[2^11, 1]`` against
    its two 11-bit parts (see :func:`_l2_operand`)."""
    if tensor_cores:
        rows[:, d].fill_(_NORM_SPLIT)
        rows[:, d + 1].fill_(1.0)
    else:
        rows[:, d].fill_(1.0)


@dataclass
class DenseBlock:
    """One query block after its first pass: sorted candidates, certificate, and what the radius pass needs."""

    S: torch.Tensor  # the block's tile scores against every reference
    keys: torch.Tensor  # candidates' float64 scores, sorted with ``index``
    index: torch.Tensor
    certified: torch.Tensor  # rows whose k best are final
    kth: torch.Tensor  # each row's float64 k-th score
    offset: torch.Tensor  # per row, what the tile scores leave out of the true score (float64)
    slack: torch.Tensor  # per row, the tile scores' error bound (float64)
    Q64: torch.Tensor | None  # the queries in float64 for the re-score (None: scores exact, no re-score)
    own: torch.Tensor | None  # each query's own reference row (self-searches)


def block_scores(refs: DenseReferences, Q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One product for a block of queries: ``(S, offset, slack)``, no host wait.

    ``S`` the tile scores against every reference; per row, ``offset`` (float64)
    completes them to the exact scores, within ``slack`` (float64; zero where the
    scores are exact).
    """
    metric, d = refs.metric, refs.d
    if refs.split:  # the split operand as it is made (see split_operand)
        rows, sqnorm = split_operand(Q.to(refs.tile_dtype), refs.centre, "query")
        Qp = {"rows": rows, "sqnorm": sqnorm}
    elif refs.rounded or metric.name not in DENSE_METRICS:
        Qp = metric.prepare(Q.to(refs.tile_dtype), refs.centre, "query")
    elif Q is refs.ref:
        Qp = refs.self_query_prepared()
    else:
        rows, sqnorm = _l2_operand(Q.to(refs.tile_dtype), refs.centre, "query", refs.tensor_cores)
        Qp = {"rows": rows, "sqnorm": sqnorm}
    if refs.split:
        S = split_product(Qp["rows"], refs.rows)
    elif refs.rounded:
        product = row_product if Q.is_cuda and row_product_available() else row_product_torch
        S = product(padded_columns(Qp["rows"]), refs.rows, out_dtype=torch.float32)
    elif refs.tensor_cores:
        S = tf32_product(Qp["rows"], refs.rows)
    else:
        S = ieee_product(padded_columns(Qp["rows"]), refs.rows)
    offset, offset_error = metric.tile_offset(Qp, d)
    offset = offset.double()
    if refs.exact:  # the tile scores plus |x|^2 are the scores: no error
        return S, offset, torch.zeros_like(offset)
    if refs.rounded:
        # the float64 products' bound, and their rounding to float32: half an ulp of a score at most
        # |x|^2 + 2 max |y|^2 in magnitude (|y|^2 - 2 x.y), or half the least subnormal step
        low = metric.bounds(Qp, refs.scale, d, Q.device, Qp["sqnorm"][:1], Qp["sqnorm"][:1])[0]
        rounding = 2.0**-24 * (Qp["sqnorm"] + 2.0 * refs.scale) + 2.0**-149
        return S, offset, low + rounding + offset_error
    if not refs.split:
        low = metric.bounds(Qp, refs.scale, d, Q.device, S[:, 0], S[:, 0])[0]
        return S, offset, low.double() + offset_error.double()
    # a sum of the split rows' terms by tensor cores, and what splitting drops: per term at most
    # SPLIT_ROUNDOFF |x_f| |y_f|, whose sum over [x, 1] . [-2y, |y|^2] is at most |x|^2 + 2 max |y|^2
    terms = split_terms(d + 1)  # the joined rows' width
    low = metric.bounds(Qp, refs.scale, terms, Q.device, S[:, 0], S[:, 0])[0].double() * SPLIT_SUM_ROUNDING
    dropped = SPLIT_ROUNDOFF * (Qp["sqnorm"].double() + 2.0 * refs.scale.double()) + terms * SPLIT_FLUSHED
    return S, offset, low + dropped + offset_error.double()


def first_pass(refs: DenseReferences, Q: torch.Tensor, q0: int) -> DenseBlock:
    """Product, top-c, (re-)score, sort and certificate of one block of queries, with no host wait."""
    d, k, c = refs.d, refs.k, refs.c
    device, b = Q.device, Q.shape[0]
    S, offset, slack = block_scores(refs, Q)
    if refs.exclude_self:
        S[:, q0 : q0 + b].diagonal().fill_(float("inf"))
    cand_scores, cand = torch.topk(S, c, dim=1, largest=False, sorted=False)
    own = torch.arange(q0, q0 + b, device=device) if refs.exclude_self else None
    if refs.exact:  # no re-score
        Q64 = None
        keys, index = _sorted(cand_scores.double() + offset[:, None], cand, own)
    else:
        Q64 = Q.to(torch.float64)
        keys, index = _sorted(refs.source.scores(Q64, cand), cand, own)
    kth = keys[:, k - 1]
    if c < refs.available:
        # every reference left out has a tile score >= the c-th kept one; with exact scores a
        # tie group reaching past the c-th place leaves its row open
        least_out = cand_scores.amax(1).double() + offset - slack
        if not refs.exact:
            least_out = least_out - least_out.abs() * _rel(refs.tile_dtype, d)
        certified = kth * (1.0 + _rel(torch.float64, d)) < least_out
    else:  # every reference is a candidate
        certified = torch.ones(b, dtype=torch.bool, device=device)
    return DenseBlock(S=S, keys=keys, index=index, certified=certified, kth=kth, offset=offset, slack=slack, Q64=Q64,
                      own=own)


def settle(refs: DenseReferences, block: DenseBlock, budget_bytes: int) -> int:
    """The radius pass for the block's open rows (host waits); returns how many rows it settled."""
    open_rows = (~block.certified).nonzero().squeeze(1)
    if not open_rows.numel():
        return 0
    d = refs.d
    # a true neighbour scores at most kth (within the float64 rounding); its tile score is then at
    # most that, less the offset, plus the tile's error
    grow = 1.0 if refs.exact else 1.0 + _rel(torch.float64, d) + _rel(refs.tile_dtype, d)
    reach = block.kth[open_rows] * grow - block.offset[open_rows] + block.slack[open_rows]
    found = _collect_within(block.S, open_rows, reach, block.offset, block.Q64, refs.source, block.own, refs.k, budget_bytes)
    block.keys[open_rows, : refs.k], block.index[open_rows, : refs.k] = found
    return int(open_rows.numel())


def dense_search(ref: torch.Tensor, query: torch.Tensor, k: int, metric: Metric, *, exclude_self: bool, budget_bytes: int,
                 stats: dict | None = None, tile_dtype: torch.dtype | None = None,
                 maybe_integral: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Top k of every query as ``(float64 scores, indices)`` on the data's device, by (float64 score, index).

    ``exclude_self``: query i is reference i (the queries are the references or
    a prefix of them) and is left out of its own list. ``k`` must not exceed the
    references available to a row. ``tile_dtype``: the score matrix's dtype
    (default :func:`tile_dtype_for` the device); integer data of a small
    enough range is scored exactly in float32 whatever it is
    (:func:`integer_centre`), and then needs no float64 re-score;
    ``maybe_integral=False`` skips that check (the caller knows the data is not
    such, one host wait less).
    """
    n_query = query.shape[0]
    device = ref.device
    keys_out = torch.empty((n_query, k), dtype=torch.float64, device=device)
    index_out = torch.empty((n_query, k), dtype=torch.int64, device=device)
    if n_query == 0:
        return keys_out, index_out
    # float64 data keeps float64 products: rounding it to float32 first would move every point by
    # up to 2^-24 of its uncentred magnitude, which the products' bound does not cover
    if ref.dtype == torch.float64:
        tile_dtype = torch.float64
    centre, tensor_cores = integer_centre_kind(ref, query) if maybe_integral else (None, False)
    refs = DenseReferences(ref, k, metric, exclude_self=exclude_self, tile_dtype=tile_dtype or tile_dtype_for(device),
                           centre=centre, tensor_cores=tensor_cores)
    rows = min(n_query, refs.block_rows(budget_bytes))
    n_open = 0
    for q0 in range(0, n_query, rows):
        block = first_pass(refs, query[q0 : q0 + rows], q0)
        n_open += settle(refs, block, budget_bytes)
        keys_out[q0 : q0 + rows] = block.keys[:, :k]
        index_out[q0 : q0 + rows] = block.index[:, :k]
    if stats is not None:
        stats.update(selection="dense", candidates=refs.c, query_rows=rows, rows_radius_pass=n_open, scores_exact=refs.exact,
                     tile_dtype=str(refs.tile_dtype).replace("torch.", ""))
    return keys_out, index_out


def _rel(dtype: torch.dtype, d: int) -> float:
    """Relative rounding bound of a sum of ``d`` non-negative terms in ``dtype`` (see :mod:`._float64_order`)."""
    return (2 * d + 8) * (2.0**-53 if dtype == torch.float64 else 2.0**-24)


class _FeatureSource:
    """The references in float64 for the re-score, in :meth:`Metric.exact_scores`' summation order."""

    def __init__(self, ref: torch.Tensor, metric: Metric, d: int):
        self.metric, self.d = metric, d
        self.by_feature = metric.sums_by_feature(d)
        self.ref = ref
        # up to one chunk of features the terms are added left to right: gathered as float64
        # rows once, then one subtraction, one product and d - 1 additions (the by-feature
        # form's values, in a quarter of its launches)
        self.rows64 = ref.to(torch.float64) if self.by_feature else None

    def scores(self, Q64: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Float64 :meth:`Metric.exact_scores` of ``Q64[i]`` against references ``index[i, j]``."""
        flat = index.reshape(-1)
        if self.by_feature:
            terms = Q64[:, None, :] - self.rows64.index_select(0, flat).view(*index.shape, self.d)
            terms = terms.mul_(terms) if self.metric.name != "manhattan" else terms.abs_()
            if self.d == 1:
                return terms[..., 0]
            total = terms[..., 0] + terms[..., 1]
            for f in range(2, self.d):
                total.add_(terms[..., f])
            return total
        rows = self.ref.index_select(0, flat).to(torch.float64).view(*index.shape, Q64.shape[1])
        return self.metric.exact_scores(Q64, rows)


def _sorted(keys, cand, own):
    """Candidates sorted by (key, index); a query's own entry is padding."""
    if own is not None:
        mine = cand == own[:, None]
        keys = keys.masked_fill(mine, float("inf"))
        cand = cand.masked_fill(mine, PAD_INDEX)
    order = torch.argsort(cand, dim=1, stable=True)
    order = order.gather(1, torch.argsort(keys.gather(1, order), dim=1, stable=True))
    return keys.gather(1, order), cand.gather(1, order)


def _collect_within(S, rows, reach, offset, Q64, source: "_FeatureSource", own, k: int, budget_bytes: int):
    """Top k of ``rows`` from every reference whose tile score is at most ``reach`` (the radius pass).

    ``Q64`` None: the tile scores plus ``offset`` are the exact scores (no re-score).
    """
    # compared in the tile's dtype, the reach rounded up so nothing at or under it is missed
    limit = reach.to(S.dtype)
    limit = torch.where(limit.double() < reach, torch.nextafter(limit, torch.full_like(limit, float("inf"))), limit)
    counts = (S[rows] <= limit[:, None]).sum(1)
    # rows collecting alike go together, so a few wide rows do not widen every group
    counts, by_count = torch.sort(counts)
    rows = rows[by_count]
    counts_host = counts.tolist()
    n = rows.numel()
    keys_out = torch.empty((n, k), dtype=torch.float64, device=S.device)
    index_out = torch.empty((n, k), dtype=torch.int64, device=S.device)
    d = source.d
    per_candidate = (d + 4) * 8 * 3 + S.element_size() * 2
    start = 0
    while start < n:
        step = max(1, budget_bytes // (per_candidate * max(k, counts_host[start])))
        # counts ascend: halve the group until its widest row fits too
        while step > 1 and step * max(k, counts_host[min(n, start + step) - 1]) * per_candidate > budget_bytes:
            step //= 2
        stop = min(n, start + step)
        width = min(S.shape[1], max(k, counts_host[stop - 1]))
        group = rows[start:stop]
        values, cand = torch.topk(S[group], width, dim=1, largest=False, sorted=False)
        mine = None if own is None else own[group]
        # a row tied with more references than the budget scores at once is re-scored a slice
        # of its candidates at a time, the best k kept across slices (same order: (key, index))
        piece = max(k, budget_bytes // (per_candidate * group.numel()))
        best = None
        for c0 in range(0, width, piece):
            part = cand[:, c0 : c0 + piece]
            if Q64 is None:
                keys = values[:, c0 : c0 + piece].double() + offset[group].double()[:, None]
            else:
                keys = source.scores(Q64[group], part)
            if best is not None:
                keys, part = torch.cat([best[0], keys], dim=1), torch.cat([best[1], part], dim=1)
            keys, index = _sorted(keys, part, mine)
            best = keys[:, :k], index[:, :k]
        keys_out[start:stop], index_out[start:stop] = best
        start = stop
    unsort = torch.empty_like(by_count)
    unsort[by_count] = torch.arange(n, device=by_count.device)
    return keys_out[unsort], index_out[unsort]
