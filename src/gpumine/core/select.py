"""Per-row top-k under the tie rule, and the associative merge of partial top-k lists.

Tie rule (everywhere in gpumine): equal scores are ordered by the lower
reference index. Padding entries carry index ``-1`` and score ``+inf`` and sort
after every real entry, so merging padded lists never lets padding win.
"""

from __future__ import annotations

import torch

__all__ = ["topk_smallest", "sort_by_score_then_index", "topk_by_score_then_index", "merge_topk", "pad_topk", "PAD_INDEX"]

PAD_INDEX = -1


def topk_smallest(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` smallest entries of each row, ties broken by the lower column.

    Returns ``(values, columns)``, each ``(n_rows, k)``, ascending. Exact for
    any dtype: ``torch.topk`` chooses arbitrarily among equal values, so rows
    whose k-th and (k+1)-th values tie are re-selected by column order.

    Examples
    --------
    >>> s = torch.tensor([[1.0, 0.0, 1.0, 1.0]])
    >>> topk_smallest(s, 2)
    (tensor([[0., 1.]]), tensor([[1, 0]]))
    """
    n_rows, n_cols = scores.shape
    if k > n_cols:
        raise ValueError(f"k={k} is larger than the {n_cols} columns to choose from")
    if k == n_cols or n_rows == 0:
        values, cols = torch.sort(scores, dim=1, stable=True)
        return values[:, :k], cols[:, :k]
    values, cols = torch.topk(scores, k + 1, dim=1, largest=False, sorted=True)
    boundary_tie = values[:, k - 1] == values[:, k]
    values, cols = sort_by_score_then_index(values[:, :k], cols[:, :k])
    if bool(boundary_tie.any()):
        rows = boundary_tie.nonzero().squeeze(1)
        fixed_values, fixed_cols = _topk_by_column_order(scores[rows], values[rows, k - 1 : k], k)
        values[rows] = fixed_values
        cols[rows] = fixed_cols
    return values, cols


def _topk_by_column_order(scores: torch.Tensor, kth: torch.Tensor, k: int):
    """Exact top-k for rows with a tie at the k-th value: everything below the
    k-th value, then the tied entries of lowest column until k are taken."""
    below = scores < kth
    tied = scores == kth
    needed = k - below.sum(1, keepdim=True)
    take = below | (tied & (tied.cumsum(1) <= needed))
    n_cols = scores.shape[1]
    col_ids = torch.arange(n_cols, device=scores.device).expand_as(scores)
    chosen = torch.where(take, col_ids, torch.full_like(col_ids, n_cols))
    cols = torch.topk(chosen, k, dim=1, largest=False, sorted=True).values
    values = scores.gather(1, cols)
    return sort_by_score_then_index(values, cols)


def sort_by_score_then_index(values: torch.Tensor, index: torch.Tensor):
    """Sort each row by (value, index) with padding (index -1) last among equal values."""
    key = torch.where(index < 0, torch.full_like(index, torch.iinfo(index.dtype).max), index)
    order = torch.argsort(key, dim=1, stable=True)
    values, index = values.gather(1, order), index.gather(1, order)
    order = torch.argsort(values, dim=1, stable=True)
    return values.gather(1, order), index.gather(1, order)


def _ordered_int32(values: torch.Tensor) -> torch.Tensor:
    """float32 -> int32 with the same order (negative floats reversed); -0.0 just below +0.0."""
    bits = values.contiguous().view(torch.int32)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


# Rows this short are sorted whole rather than top-k selected: torch.topk (a radix select, then
# a sort of the k) measured slower than torch.sort on 1M rows of 8 and of 32 int64 keys
# (BENCHMARKS.md, "Design measurements quoted in the code")
_SORT_MAX_COLUMNS = 32


def topk_by_score_then_index(values: torch.Tensor, index: torch.Tensor, k: int):
    """The best ``k`` of each row by (value, index), ascending; padding (index -1) last.

    For float32 one top-k over packed int64 keys (order-preserving value bits,
    then the index) does it in a single pass; float64 falls back to two stable
    sorts.
    """
    if values.dtype == torch.float32 and values.shape[1]:
        values = torch.where(values == 0, torch.zeros_like(values), values)  # -0.0 and +0.0 tie
        key = (_ordered_int32(values).to(torch.int64) << 32) | (index & 0xFFFFFFFF)
        kk = min(k, key.shape[1])
        if key.shape[1] <= _SORT_MAX_COLUMNS:  # keys are distinct or equal in full: same result
            key = torch.sort(key, dim=1).values[:, :kk]
        else:
            key = torch.topk(key, kk, dim=1, largest=False, sorted=True).values
        idx = key & 0xFFFFFFFF
        idx = torch.where(idx == 0xFFFFFFFF, torch.full_like(idx, PAD_INDEX), idx)
        ordered = (key >> 32).to(torch.int32)
        bits = ordered ^ ((ordered >> 31) & 0x7FFFFFFF)
        return bits.view(torch.float32), idx
    values, index = sort_by_score_then_index(values, index)
    return values[:, :k], index[:, :k]


def merge_topk(values_a, index_a, values_b, index_b, k: int):
    """Merge two partial top-k lists of the same rows into the best ``k`` under the tie rule.

    Associative and commutative, so tiles, chunks, GPUs and Dask partitions can
    be combined in any grouping with the same result. Lists shorter than ``k``
    are padded with ``(+inf, -1)``.

    Examples
    --------
    >>> a = (torch.tensor([[0.5, 2.0]]), torch.tensor([[7, 3]]))
    >>> b = (torch.tensor([[0.5, 1.0]]), torch.tensor([[2, 9]]))
    >>> merge_topk(*a, *b, k=3)
    (tensor([[0.5000, 0.5000, 1.0000]]), tensor([[2, 7, 9]]))
    """
    values = torch.cat([values_a, values_b], dim=1)
    index = torch.cat([index_a, index_b], dim=1)
    return pad_topk(*topk_by_score_then_index(values, index, k), k)


def pad_topk(values: torch.Tensor, index: torch.Tensor, k: int):
    """Lists of at most ``k`` entries per row, padded to ``k`` with ``(+inf, -1)``."""
    if values.shape[1] < k:
        pad = k - values.shape[1]
        values = torch.cat([values, values.new_full((values.shape[0], pad), float("inf"))], dim=1)
        index = torch.cat([index, index.new_full((index.shape[0], pad), PAD_INDEX)], dim=1)
    return values[:, :k], index[:, :k]
