"""Re-rank and certificate of a search's candidates, and the bounded exact scan.

Candidates are re-scored exactly and ordered by (score, index); a row is certified when
nothing left out of its list can reach its k-th score, else it is left for a retry.
"""

from __future__ import annotations

import torch

from ...core.distance import Metric
from ...core.select import PAD_INDEX, merge_topk, topk_by_score_then_index, topk_smallest
from ._exact_tile_kernel import EXACT_TILE_MAX_FEATURES, EXACT_TILE_METRICS, exact_tile_available, exact_tile_scores
from ._references import _References
from ._rerank_kernel import (RERANK_KERNEL_AVAILABLE, RERANK_MAX_FEATURES, RERANK_MAX_WIDTH, RERANK_SCORED_METRICS,
                             rerank_select)


def _rerank(Q, Qp, cth, cand_index, refs, metric, k, c, n_ref, query_ids, exclude_self, plan, direct=False,
            precision="exact", on_kernel=False, spare=0):
    """Exact scores of the candidates, the best k by (score, index), which rows are certified, and ``outside``.

    ``cth``: per row, a candidate-phase score that every reference left out
    reaches. ``spare`` (0 or 1): a row is certified when its first ``k - spare``
    entries are final; ``outside`` (with ``spare``, else None) is then, per row,
    a float64 lower bound on the exact score of every reference not in its k
    (the last entry's own, or below it the bound on those left out). ``direct``: the candidate scores are direct-difference sums (the
    fused kernel's low-dimensional L2), whose error bound is relative to the score.
    ``on_kernel``: a search that may use Triton, whose selection (and at few
    features the exact scoring) runs as one launch (:mod:`gpumine.neighbors.engine._rerank_kernel`),
    with the torch path's results bit for bit.
    """
    q, d = Q.shape
    # exact per-pair scores of the candidates, in query sub-blocks that fit the budget
    itemsize = Q.element_size()
    sub = max(1, min(q, plan.budget_bytes // max(1, 3 * cand_index.shape[1] * (d + 4) * itemsize)))
    one_block = sub >= q  # the block's selection is the result: no output to assemble
    if not one_block:
        scores = torch.empty((q, k), dtype=Q.dtype, device=Q.device)
        index = torch.empty((q, k), dtype=torch.int64, device=Q.device)
    select_on_kernel = (on_kernel and RERANK_KERNEL_AVAILABLE and Q.dtype == torch.float32
                        and cand_index.shape[1] <= RERANK_MAX_WIDTH)
    # the kernel scores L2/L1 candidates itself at any d, in Metric.exact_scores' order: from the
    # feature-major copy at few features, else from the rows (at 65 features the torch gather and
    # broadcast were a measurable share of the physics search; BENCHMARKS.md)
    score_on_kernel = select_on_kernel and refs.resident and metric.name in RERANK_SCORED_METRICS
    references = {"RT": refs._feature_major()} if score_on_kernel and d <= RERANK_MAX_FEATURES else {"R": refs.data}
    for s in range(0, q, sub):
        ci = cand_index[s : s + sub]
        if select_on_kernel:
            own = query_ids[s : s + sub] if exclude_self else None
            if score_on_kernel:
                v, i = rerank_select(ci, k, Q=Q[s : s + sub], metric_name=metric.name, own=own, **references)
            else:
                v, i = rerank_select(ci, k, scores=refs.exact_scores(Q[s : s + sub], ci), own=own)
        else:
            exact = refs.exact_scores(Q[s : s + sub], ci)
            invalid = ci < 0
            if exclude_self:
                own = query_ids[s : s + sub, None]
                invalid |= ci == own
            exact = torch.where(invalid, torch.full_like(exact, float("inf")), exact)
            v, i = topk_by_score_then_index(exact, torch.where(invalid, torch.full_like(ci, PAD_INDEX), ci), k)
        if one_block:
            scores, index = v, i
        else:
            scores[s : s + sub], index[s : s + sub] = v, i
    # Every reference left out has a tile score >= cth, so an exact score >= cth + offset - low;
    # when that is above the exact k-th score, nothing left out can be among the k nearest,
    # ties included (in float64, so the test itself does not round). An infinite or NaN largest
    # candidate can only come from overflow (padding means every reference is a candidate,
    # handled below), so it must not certify a row.
    if direct:  # direct sums are exact scores up to rounding: no offset
        low, offset, offset_error = metric.relative_bounds(d, cth, cth)[0], 0.0, 0.0
    else:
        low = metric.bounds(Qp, refs.scale, d, Q.device, cth, cth, precision)[0]
        offset, offset_error = (t.double() for t in metric.tile_offset(Qp, d))
    reached = cth.double() + offset - low.double() - offset_error
    certified = reached > scores[:, k - 1 - spare].double()
    outside = None
    if spare:
        last = scores[:, k - 1].double()
        # every reference was a candidate: the list holds the exact best k, nothing outside beats the last
        outside = last if c >= n_ref else torch.minimum(reached, last)
    if c >= n_ref:
        certified = torch.ones_like(certified)
    return scores, index, certified, outside


def _exact_scan(Q: torch.Tensor, query_ids: torch.Tensor, refs: _References, metric: Metric, k: int, exclude_self: bool, budget_bytes: int):
    """Top-k by per-pair exact scores over every reference (for rows the certificate could not settle).

    One pass over the references whatever the ties: each (query block x
    reference part) score tile is reduced to its best k by (score, index) and
    merged into the running lists. On a GPU with Triton the tiles come from the
    exact-tile kernel (float32, up to ``EXACT_TILE_MAX_FEATURES`` features, bit
    for bit ``Metric.exact_scores``), which needs no (pairs x features) temporaries.
    """
    q, d = Q.shape
    best_v = torch.full((q, k), float("inf"), dtype=Q.dtype, device=Q.device)
    best_i = torch.full((q, k), PAD_INDEX, dtype=torch.int64, device=Q.device)
    if q == 0:
        return best_v, best_i
    on_kernel = (Q.device.type == "cuda" and Q.dtype == torch.float32 and metric.name in EXACT_TILE_METRICS
                 and 0 < d <= EXACT_TILE_MAX_FEATURES and exact_tile_available())
    # the kernel's tiles hold scores only; the torch form holds (pairs x features) temporaries
    pair_budget = max(1, budget_bytes // ((3 if on_kernel else 3 * (d + 2)) * Q.element_size()))
    q_block = min(q, max(1, pair_budget // max(4 * k, 1024)))
    step = max(1, pair_budget // q_block)
    tiles = refs.feature_major_tiles() if on_kernel else refs.raw_tiles()
    for r0, R in tiles:
        n_part = R.shape[1] if on_kernel else R.shape[0]
        for s0 in range(0, n_part, step):
            part = R[:, s0 : s0 + step] if on_kernel else R[s0 : s0 + step]
            width = part.shape[1] if on_kernel else part.shape[0]
            start = r0 + s0
            for b0 in range(0, q, q_block):
                Qb, ids = Q[b0 : b0 + q_block], query_ids[b0 : b0 + q_block]
                S = exact_tile_scores(Qb.T, part, metric.name) if on_kernel else metric.exact_scores(Qb, part.unsqueeze(0))
                if exclude_self:
                    cols = ids - start
                    inside = (cols >= 0) & (cols < width)
                    rows = inside.nonzero().squeeze(1)
                    S[rows, cols[rows]] = float("inf")
                v, col = topk_smallest(S, min(k, width))
                idx = col + start
                if exclude_self:  # a masked own entry is padding, never a neighbour
                    idx = torch.where(torch.isinf(v) & (idx == ids[:, None]), torch.full_like(idx, PAD_INDEX), idx)
                best_v[b0 : b0 + q_block], best_i[b0 : b0 + q_block] = merge_topk(
                    best_v[b0 : b0 + q_block], best_i[b0 : b0 + q_block], v, idx, k)
    return best_v, best_i
