"""The float64 order's spare list entry: certified up to k, the (k+1)-th only a bound.

A search for the float64 order lists k + 1 neighbours, and the last one is wanted only
as a bound on the references left out (see ``_float64_order``). With ``spare=1`` the
certificate settles the first k entries, the fused kernel keeps k + 1 candidates
instead of the next power of two above, and the search reports a bound per row.
"""

import pytest
import torch

from gpumine.core.distance import get_metric
from gpumine.core.tiles import TilePlan
from gpumine.neighbors.engine._plan import plan_search
from gpumine.neighbors.engine._references import _References
from gpumine.neighbors.engine._rerank import _rerank

CPU = torch.device("cpu")


def _rerank_one_query(cand_index, cth, k, spare):
    metric = get_metric("sqeuclidean")
    ref = torch.tensor([[0.0], [1.0], [2.0], [3.0], [50.0], [100.0]])
    Q = torch.zeros((1, 1))
    refs = _References(ref, metric, ref.shape[0], CPU, resident=True)
    Qp = metric.prepare(Q, refs.centre, "query")
    return _rerank(Q, Qp, torch.tensor([cth]), torch.tensor([cand_index]), refs, metric, k, len(cand_index), ref.shape[0],
                   torch.tensor([0]), False, TilePlan(1, ref.shape[0], 1 << 20), direct=True, spare=spare)


def test_a_spare_entry_is_bounded_by_what_the_candidates_left_out():
    # candidates 0, 1, 2 and 5 (score 10,000); 3 (score 9) and 4 were left out, which the
    # candidate phase bounds by 9: the first three are final, the fourth listed is not the
    # fourth nearest, and the bound on what lies outside the list is 9, not 10,000
    scores, index, certified, outside = _rerank_one_query([0, 1, 2, 5], 9.0, 4, spare=1)
    assert index.tolist() == [[0, 1, 2, 5]] and bool(certified[0])
    assert 8.99 < float(outside[0]) <= 9.0
    # without the spare the list's last entry must be final too: not certified, and no bound
    _, _, certified, outside = _rerank_one_query([0, 1, 2, 5], 9.0, 4, spare=0)
    assert not bool(certified[0]) and outside is None


def test_a_spare_entrys_bound_is_the_last_entry_when_every_reference_was_a_candidate():
    scores, index, certified, outside = _rerank_one_query([5, 4, 3, 2, 1, 0], float("inf"), 4, spare=1)
    assert index.tolist() == [[0, 1, 2, 3]] and bool(certified[0]) and float(outside[0]) == 9.0


def _shapes(n_query, n_ref, d=8):
    # broadcast views: the plan reads shapes, dtype and device only
    return torch.zeros(d).expand(n_ref, d), torch.zeros(d).expand(n_query, d)


@pytest.mark.parametrize("k, spare, expected", [(8, 0, 16), (8, 1, 8), (5, 1, 8), (9, 1, 16), (2, 1, 2)])
def test_the_fused_kernel_keeps_k_candidates_for_a_list_with_a_spare(k, spare, expected):
    ref, query = _shapes(1 << 20, 1 << 15)
    sp = plan_search(ref, query, k, get_metric("euclidean"), device=CPU, budget_bytes=1 << 30, backend="triton", spare=spare)
    assert sp.fused and sp.spare == spare and sp.c == expected


def test_a_spare_needs_a_list_of_two_or_more():
    ref, query = _shapes(100, 100)
    for k, spare in ((1, 1), (4, 2), (4, -1)):
        with pytest.raises(ValueError, match="spare"):
            plan_search(ref, query, k, get_metric("euclidean"), device=CPU, budget_bytes=1 << 30, spare=spare)


def test_an_infinite_floor_gives_way_to_the_largest_kept_score():
    # nothing finite left out (every reference kept, or an overflowed score): the kept maximum bounds it,
    # and an infinite bound never certifies a row
    from gpumine.neighbors.engine._search import _left_out_bound

    values = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    bound = _left_out_bound(values, torch.tensor([float("inf"), 2.5]))
    assert bound.tolist() == [3.0, 2.5]
