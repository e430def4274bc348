"""Searches by one matrix product and the product-selection kernel per block of queries.

For L2 searches at more features than the exact-selection kernel serves well
(:mod:`._exact_select`): per query block one product gives every pair's tile
score (float64 products where the GPU runs them at full rate, see
:func:`._dense.tile_dtype_for`; float32 ones where integer data makes them exact,
see :func:`._dense.integer_centre`; on large searches, float32 scores from split
TF32 products or rounded float64 ones where a probe of a few hundred queries
finds that they certify, see ``FLOAT32_PROBE``), and one launch of
:mod:`._product_select_kernel` (two for large grids or split references, see
:func:`product_select`) selects the k best by (float64 exact score,
index): each row's best candidates by tile score are re-scored in float64 and
certified; only rows that ties or near-ties leave open read their scores again.

Bound: per block one product, at most two reads of its scores and at most one
float64 exact score per pair (where ties keep every lane within reach),
whatever the data; no retry, radius pass or host wait but the ones that decide
whether integer data's products are exact and (once per reference tensor)
which products a large search takes. Results equal
:func:`._dense.dense_search`'s bit for bit: the same float64 scores in
:meth:`Metric.exact_scores`' order, ordered by (score, index).
"""

from __future__ import annotations

import torch

from ...core.distance import Metric
from ...core.tiles import evenly_spread_rows
from ._dense import DenseReferences, ReferenceMemo, _matmul_rounds_operands, _rel, block_scores, dense_eligible, integer_centre_kind, tile_dtype_for
from ._exact_select import EXACT_SELECT_FIRST_FEATURES, feature_major
from ._product_select_kernel import PRODUCT_SELECT_MAX_K, kept_candidates, product_select, product_select_available
from ._row_product_kernel import row_product_available
from ._verdicts import TensorVerdicts

__all__ = ["product_select_supports", "product_select_first", "product_select_if_integral", "product_select_search", "select_block", "select_blocks", "PRODUCT_SELECT",
           "PRODUCT_SELECT_MIN_FEATURES", "PRODUCT_SELECT_LARGE_MIN_FEATURES", "PRODUCT_SELECT_LARGE_MIN_PAIRS",
           "PRODUCT_SELECT_MAX_PAIRS", "PRODUCT_SELECT_INTEGRAL_MAX_PAIRS", "FLOAT32_PROBE", "float32_certifies"]

# False turns the path off (same-run A/B timings)
PRODUCT_SELECT = True
# Searches go here before any other choice from PRODUCT_SELECT_MIN_FEATURES features (fewer: the
# exact-selection kernel, whose float64 terms cost less there than a product and its scores' round
# trip), and from PRODUCT_SELECT_LARGE_MIN_FEATURES features when they have at least
# PRODUCT_SELECT_LARGE_MIN_PAIRS pairs (ALOI, 49,534 x 27: half the exact-selection kernel's time),
# up to PRODUCT_SELECT_MAX_PAIRS pairs. Larger ones come here up to PRODUCT_SELECT_INTEGRAL_MAX_PAIRS
# pairs when their products are exact (integer data, see _dense.integer_centre: celeba, 202,599 x
# 39, ran in half the time of its other path); continuous data that large ran faster on the fused
# kernel (uniform 100,000 x 48). BENCHMARKS.md, "Design measurements quoted in the code".
PRODUCT_SELECT_MIN_FEATURES = EXACT_SELECT_FIRST_FEATURES + 1
PRODUCT_SELECT_LARGE_MIN_FEATURES = 17
PRODUCT_SELECT_LARGE_MIN_PAIRS = 1 << 30
PRODUCT_SELECT_MAX_PAIRS = 1 << 32
PRODUCT_SELECT_INTEGRAL_MAX_PAIRS = 1 << 36
# Where the device's products would be float64 (tile_dtype_for), searches of at least
# FLOAT32_PROBE_MIN_PAIRS pairs first run FLOAT32_PROBE_ROWS of their queries, spread over the set,
# on float32 scores, and keep them when the certificate leaves at most FLOAT32_PROBE_MAX_OPEN of those
# rows open: split TF32 products first (SPLIT_PRODUCTS), then float64 products rounded to float32
# (ROUNDED_PRODUCTS). Their scores take half the bytes of float64 ones and their products ran in less
# time (BENCHMARKS.md, "Design measurements quoted in the code"), but their error (about 2^-24 of the
# squared norms, times the terms summed for the split ones) leaves most rows open on data whose norms
# dwarf its distances (counts, money), and nothing about the data tells the kinds apart before a
# search. A probe costs one host wait and a few hundred rows' search, once per reference tensor (see
# _VERDICTS: references copied to the device for each search are new tensors each time); the results
# are the same bit for bit whatever it finds. False: no probe (same-run A/B timings).
FLOAT32_PROBE = True
FLOAT32_PROBE_MIN_PAIRS = 1 << 28
FLOAT32_PROBE_ROWS = 256
FLOAT32_PROBE_MAX_OPEN = 1 / 8
# float32 scores only for references whose centred squared norms are under this (a score is at
# most |x|^2 + 2 max |y|^2 in magnitude: far from float32's largest value)
FLOAT32_SCORE_MAX_SQNORM = 2.0**100
# True: the selection gathers a candidate's features from the row-major data in place (contiguous
# per candidate, no feature-major copy of the references); False: from feature-major copies
# (consecutive candidates side by side, as a rescan reads them). Same results either way.
ROW_MAJOR_GATHERS = True
# True: split products are probed first (._split_product: one TF32 tensor-core product of split rows,
# the quicker of the two at many features); False: not (same-run A/B timings)
SPLIT_PRODUCTS = True
# True: where split products leave too many rows open, float64 products rounded to float32 are
# probed next (._row_product_kernel; a bound near float64's at few features); False: float64
# scores there (same-run A/B timings)
ROUNDED_PRODUCTS = True


def product_select_supports(metric: Metric, dtype: torch.dtype, d: int, k: int, device: torch.device, backend: str,
                            precision: str) -> bool:
    """Whether a search of this kind can run here: a GPU, the automatic backend, exact products, L2, k in registers."""
    return (PRODUCT_SELECT and product_select_available() and dense_eligible(metric, dtype, device, backend, precision)
            and d > 0 and 1 <= k <= PRODUCT_SELECT_MAX_K)


def product_select_first(n_query: int, n_ref: int, d: int) -> bool:
    """Whether a search of this shape runs here before any other choice (see ``PRODUCT_SELECT_MIN_FEATURES``)."""
    pairs = n_query * n_ref
    return pairs <= PRODUCT_SELECT_MAX_PAIRS and (
        d >= PRODUCT_SELECT_MIN_FEATURES or (d >= PRODUCT_SELECT_LARGE_MIN_FEATURES and pairs >= PRODUCT_SELECT_LARGE_MIN_PAIRS))


def product_select_if_integral(n_query: int, n_ref: int, d: int) -> bool:
    """Whether a search of this shape runs here when its products are exact (see ``PRODUCT_SELECT_INTEGRAL_MAX_PAIRS``)."""
    return (PRODUCT_SELECT_MAX_PAIRS < n_query * n_ref <= PRODUCT_SELECT_INTEGRAL_MAX_PAIRS
            and d >= PRODUCT_SELECT_LARGE_MIN_FEATURES)


def product_block_rows(n_ref: int, d: int, k: int, score_bytes: int, budget_bytes: int) -> int:
    """Queries per block of a product selection within ``budget_bytes`` (0 where not one fits).

    Per query: its row of scores (``score_bytes`` each), its prepared rows and
    per-row bounds (a split block's query rows: three float32 parts of d + 1
    columns, and the split's temporaries) and the kernel's candidate lists.
    """
    return max(0, budget_bytes) // (n_ref * score_bytes + (3 * d + 16) * 8 + kept_candidates(k) * 12)


def product_select_search(ref: torch.Tensor, query: torch.Tensor, k: int, metric: Metric, *, exclude_self: bool,
                          budget_bytes: int, stats: dict | None = None, tile_dtype: torch.dtype | None = None,
                          integral: bool | None = None, memo: ReferenceMemo | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Top k of every query as ``(float64 scores, indices)`` by (float64 score, index), as ``dense_search`` returns them.

    ``exclude_self``: query i is reference i (the queries are the references or
    a prefix of them). ``k`` must not exceed the references available to a row.
    ``tile_dtype``: the products' dtype (default :func:`tile_dtype_for` the
    device; float64 data keeps float64). ``integral=False``: the data holds
    other than whole numbers (known to the caller), so no integer centre is sought.
    ``memo``: the references' :class:`ReferenceMemo` (their owner's), which keeps
    their prepared operands between searches.
    """
    n_query, n_ref = query.shape[0], ref.shape[0]
    d = ref.shape[1]
    device = ref.device
    if n_query == 0:
        return (torch.empty((0, k), dtype=torch.float64, device=device),
                torch.empty((0, k), dtype=torch.int64, device=device))
    if ref.dtype == torch.float64:
        tile_dtype = torch.float64  # as dense_search: rounding float64 data first is outside the bound
    centre, tensor_cores = (None, False) if integral is False else integer_centre_kind(ref, query)
    RT, QT = gather_layout(ref, query)
    refs = None
    if tile_dtype is None and centre is None and probes_float32(n_query, n_ref, device):
        refs = _float32_references(ref, query, RT, k, metric, exclude_self, stats, memo)
    if refs is None:
        refs = DenseReferences(ref, k, metric, exclude_self=exclude_self, tile_dtype=tile_dtype or tile_dtype_for(device),
                               centre=centre, memo=memo, tensor_cores=tensor_cores)
    rows = max(1, min(n_query, product_block_rows(n_ref, d, k, torch.finfo(refs.score_dtype).bits // 8, budget_bytes)))
    keys_out, index_out = select_blocks(refs, query, QT, RT, rows, stats)
    if stats is not None:  # asked for: one host wait for the count of rows the certificate left open
        stats.update(selection="product_select", candidates=kept_candidates(k), query_rows=rows, scores_exact=refs.exact,
                     tile_dtype=str(refs.tile_dtype).replace("torch.", ""),
                     score_dtype=str(refs.score_dtype).replace("torch.", ""),
                     products=("split" if refs.split else "rounded" if refs.rounded else "tensor_cores" if refs.tensor_cores
                               else "plain"),
                     rows_rescanned=int(stats.get("rows_rescanned", 0)))
    return keys_out, index_out


# The probe's verdicts by reference tensor (the same tensor, unchanged since: its version counter and
# storage), k and whether the queries are the references: searches against the same device tensor (an
# estimator's fitted data on the device, repeated queries) probe once. A verdict chooses the products' precision
# only; results are exact either way, and a float32 verdict that later queries do not bear out costs
# their open rows' rescans.
_VERDICTS_KEPT = 16
_VERDICTS = TensorVerdicts(_VERDICTS_KEPT)


def _remembered_verdict(ref: torch.Tensor, query: torch.Tensor, k: int) -> str | None:
    """The probe's verdict for these references, k and kind of query (the name of the products taken,
    ``"float64"`` for none), if one is remembered."""
    return _VERDICTS.get(ref, (k, query is ref))


def _remember_verdict(ref: torch.Tensor, query: torch.Tensor, k: int, verdict: str) -> None:
    _VERDICTS.put(ref, (k, query is ref), verdict)


def _float32_references(ref, query, RT, k, metric, exclude_self, stats, memo=None) -> DenseReferences | None:
    """References for float32 scores where the probe (or its remembered verdict) takes them, else None.

    Split TF32 products first; where they leave too many rows open, float64
    products rounded to float32 (a bound about 2^-24 of the squared norms), when
    the Triton row product can run.
    """
    kinds = {}
    if SPLIT_PRODUCTS:
        kinds["split"] = dict(tile_dtype=torch.float32, split=True)
    if ROUNDED_PRODUCTS and row_product_available():
        kinds["rounded"] = dict(tile_dtype=torch.float64, rounded=True)
    verdict = _remembered_verdict(ref, query, k)
    if verdict == "float64" or verdict in kinds:
        if stats is not None:
            stats.update(float32_probe_rows=0)  # a verdict remembered for these references
        return None if verdict == "float64" else DenseReferences(ref, k, metric, exclude_self=exclude_self, memo=memo,
                                                                 **kinds[verdict])
    for name, kind in kinds.items():
        refs = DenseReferences(ref, k, metric, exclude_self=exclude_self, memo=memo, **kind)
        if float32_certifies(refs, query, RT, stats):
            _remember_verdict(ref, query, k, name)
            return refs
    _remember_verdict(ref, query, k, "float64")
    return None


def gather_layout(ref: torch.Tensor, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(RT, QT)``, the feature-major (d, n) operands the selection gathers features from: views of
    the row-major data (``ROW_MAJOR_GATHERS``), else contiguous copies."""
    if ROW_MAJOR_GATHERS:
        return ref.T, query.T
    return feature_major(ref, query)


def float32_products(ref: torch.Tensor, query: torch.Tensor, k: int, metric: Metric, exclude_self: bool) -> dict | None:
    """:class:`DenseReferences`' keywords for the float32 products the probe takes for this search, or None (float64).

    For a search decided once and run again on other data of its shape (a
    captured graph): the lists stay exact whatever the products, and the count
    of rows they leave to rescan tells when to decide again.
    """
    RT, _ = gather_layout(ref, query)
    refs = _float32_references(ref, query, RT, k, metric, exclude_self, None)
    return None if refs is None else dict(tile_dtype=refs.tile_dtype, split=refs.split, rounded=refs.rounded)


def probes_float32(n_query: int, n_ref: int, device: torch.device) -> bool:
    """Whether a search of float32 data with float64 products by default tries float32 ones first (see ``FLOAT32_PROBE``)."""
    return (FLOAT32_PROBE and n_query * n_ref >= FLOAT32_PROBE_MIN_PAIRS and tile_dtype_for(device) == torch.float64
            and not _matmul_rounds_operands(device))


def float32_certifies(refs: DenseReferences, query: torch.Tensor, RT: torch.Tensor, stats: dict | None = None) -> bool:
    """Whether float32 products (``refs``) certify nearly every row of a sample of ``query`` (one host wait).

    The sample is ``FLOAT32_PROBE_ROWS`` rows spread evenly over the queries,
    searched for one neighbour more than a self-search keeps (its own row, at
    distance zero, takes the first place) with the search's certificate; at most
    ``FLOAT32_PROBE_MAX_OPEN`` of them may be left open. Open rows are counted, not
    rescanned.
    """
    n_query, n_ref = query.shape[0], refs.ref.shape[0]
    m = min(n_query, FLOAT32_PROBE_ROWS)
    picked = evenly_spread_rows(n_query, m, query.device)
    sample = query[picked]
    k = min(refs.k + (1 if refs.exclude_self else 0), PRODUCT_SELECT_MAX_K, n_ref)
    S, offset, slack = block_scores(refs, sample)
    counted: dict = {}
    product_select(S, offset, slack, gather_layout(sample, sample)[1], RT, k, exact=False, rel_tile=_rel(refs.tile_dtype, refs.d),
                   rel64=_rel(torch.float64, refs.d), search_rows=n_query, rescan=False, stats=counted)
    # float32 scores stay finite while squared norms do (the search's magnitude window keeps them
    # far inside; a direct caller's data beyond it keeps float64 scores)
    left_open, finite, scale = torch.stack([counted["rows_rescanned"].double().reshape(()),
                                            torch.isfinite(slack).all().double(),
                                            refs.scale.double().reshape(())]).tolist()
    left_open = int(left_open)
    if stats is not None:
        stats.update(float32_probe_rows=sample.shape[0], float32_probe_open=left_open,
                     float32_probes=stats.get("float32_probes", 0) + 1)
    return bool(finite) and scale < FLOAT32_SCORE_MAX_SQNORM and left_open <= FLOAT32_PROBE_MAX_OPEN * m


def select_blocks(refs: DenseReferences, query: torch.Tensor, QT: torch.Tensor, RT: torch.Tensor, rows: int,
                  stats: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`select_block` over the queries ``rows`` at a time (each block's scores freed before the next's): ``(float64
    keys, index)``, no host wait. One block's lists are the result as they come."""
    n_query = query.shape[0]
    if rows >= n_query:
        return select_block(refs, query, QT, RT, 0, stats)
    keys = torch.empty((n_query, refs.k), dtype=torch.float64, device=query.device)
    index = torch.empty((n_query, refs.k), dtype=torch.int64, device=query.device)
    for q0 in range(0, n_query, rows):
        q1 = min(n_query, q0 + rows)
        keys[q0:q1], index[q0:q1] = select_block(refs, query[q0:q1], QT[:, q0:q1], RT, q0, stats, search_rows=n_query)
    return keys, index


def select_block(refs: DenseReferences, query: torch.Tensor, QT: torch.Tensor, RT: torch.Tensor, q0: int,
                 stats: dict | None = None, search_rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One query block (queries ``q0``, ``q0 + 1``, ...; ``QT`` its feature-major copy) of a search of ``search_rows``
    queries (default: the block's): product and selection, no host wait."""
    S, offset, slack = block_scores(refs, query)
    return product_select(S, offset, slack, QT, RT, refs.k, exact=refs.exact, rel_tile=_rel(refs.tile_dtype, refs.d),
                          rel64=_rel(torch.float64, refs.d), exclude_self=refs.exclude_self, self_offset=q0,
                          search_rows=search_rows, stats=stats)
