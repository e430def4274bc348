"""kNN over reference sets with duplicate rows: search the distinct rows once, then expand.

Real data repeat rows (ADBench's donors keeps 35,421 distinct rows of 619,326;
http 221,900 of 567,498). A block of equal rows around a query's k-th place is a
tie the certificate cannot settle by widening the candidate list, since every
copy scores the same: the search would fall back to exact scans. Instead the
distinct rows are searched, and each distinct neighbour stands for its copies,
ordered by original index as the tie rule wants.

Ordering. Distinct rows are numbered by their first occurrence, so the search's
tie rule on distinct numbers (equal scores: lower number first) orders equal-
scored distinct rows by their lowest original index. A query's best ``w``
originals by (score, original index) are the best ``w`` among the first ``w``
copies of its ``w`` nearest distinct rows. Why no distinct row left out can hold
one: each of the ``w`` fetched rows has a first copy scoring at most the last
fetched score ``s``, so an original from outside must beat one of those first
copies; it scores at least ``s``, so only a tie at ``s`` with a lower index
would do, but a distinct row left out at score ``s`` comes after every fetched
one at ``s`` in first-occurrence order, so all its copies have higher indices
than their first copies.

Work: one sort of the references (``torch.unique``), one search of the distinct
rows (queries are deduplicated too when they are the references) and a
(queries x w x w) expansion. Only true metrics (a row is at distance 0 from itself and only from its
copies) are deduplicated.
"""

from __future__ import annotations

import torch

from ...core.select import PAD_INDEX, topk_by_score_then_index

__all__ = ["UniqueRows", "DEDUP_METRICS", "DEDUP_MAX_FRACTION", "DEDUP_HASH_FROM_ROWS", "distinct_hashes"]

DEDUP_METRICS = ("euclidean", "sqeuclidean", "manhattan", "chebyshev", "minkowski")
# deduplicate only when at most this fraction of the rows is distinct: a few copies do not
# pay for the sort and the expansion
DEDUP_MAX_FRACTION = 0.9


# From this many rows, one hash per row is counted before the rows themselves are sorted: the
# rows' sort (torch.unique over rows) holds several copies of the data, the hashes' one 8 bytes
# a row, and data with few copies (where deduplication does not apply) stops there.
DEDUP_HASH_FROM_ROWS = 1 << 18


def distinct_hashes(X: torch.Tensor) -> int:
    """How many distinct values a hash of each row's bits takes: at most the number of distinct rows.

    Equal rows hash equally (``-0.0`` is made ``+0.0`` first, as the rows' sort
    takes them equal), so the count never exceeds the distinct rows'.
    """
    bits = (X + 0.0).contiguous()
    bits = bits.view(torch.int32 if bits.element_size() == 4 else torch.int64)
    h = torch.zeros(X.shape[0], dtype=torch.int64, device=X.device)
    for f in range(X.shape[1]):
        # xor in the feature, multiply (wrapping: int64), fold the high half down (a float's
        # bits sit high; a product only carries bits upwards)
        h.bitwise_xor_(bits[:, f]).mul_(_HASH_MULTIPLIER)
        h.bitwise_xor_(h >> 32)
    return int(torch.unique(h).numel())


_HASH_MULTIPLIER = 0x100000001B3  # the 64-bit FNV prime


class UniqueRows:
    """The distinct rows of a matrix, numbered by first occurrence, and where each row's copies are.

    Attributes: ``rows`` (m, d) distinct rows; ``inverse`` (n,) distinct number of
    each original row; ``counts`` (m,); ``first`` (m,) lowest original index of
    each; ``order`` (n,) original indices grouped by distinct number, ascending
    inside a group; ``starts`` (m,) where each group begins in ``order``.
    """

    def __init__(self, X: torch.Tensor):
        rows, inverse, counts = torch.unique(X, dim=0, return_inverse=True, return_counts=True)
        # originals grouped by (lexicographic) distinct number, ascending index inside a group
        order = torch.argsort(inverse, stable=True)
        starts = torch.cumsum(counts, 0) - counts
        first = order[starts]
        # renumber distinct rows by first occurrence
        by_first = torch.argsort(first)
        renumber = torch.empty_like(by_first)
        renumber[by_first] = torch.arange(by_first.numel(), device=by_first.device)
        self.rows = rows[by_first].contiguous()
        self.inverse = renumber[inverse]
        self.counts = counts[by_first]
        self.first = first[by_first]
        self.starts = starts[by_first]
        self.order = order
        self.n = X.shape[0]

    @classmethod
    def find(cls, X: torch.Tensor, max_fraction: float = DEDUP_MAX_FRACTION) -> "UniqueRows | None":
        """The distinct rows of ``X`` when at most ``max_fraction`` of them are distinct, else None."""
        if X.shape[0] < 2:
            return None
        if X.shape[0] >= DEDUP_HASH_FROM_ROWS and distinct_hashes(X) > max_fraction * X.shape[0]:
            return None  # at least as many distinct rows as distinct hashes: too many to pay
        found = cls(X)
        return found if found.rows.shape[0] <= max_fraction * X.shape[0] else None

    def copies(self, width: int) -> torch.Tensor:
        """(m, width): the first ``width`` original indices of each distinct row, -1 past its count."""
        offsets = torch.arange(width, device=self.order.device)
        pos = self.starts[:, None] + offsets
        valid = offsets < self.counts[:, None]
        return torch.where(valid, self.order[pos.clamp(max=self.n - 1)], torch.full_like(pos, PAD_INDEX))


def expand_neighbours(unique: UniqueRows, scores: torch.Tensor, distinct: torch.Tensor, width: int, budget_bytes: int):
    """Best ``width`` originals by (score, index) from lists of the ``width`` nearest distinct rows.

    ``scores``/``distinct``: (q, min(m, width)) results of an exact search of the
    distinct rows, ordered by (score, distinct number); see the module docstring
    for why those rows suffice. Returns ``(scores, index)``, each (q, width).
    """
    q, k_u = distinct.shape
    copies = unique.copies(width)
    out_s = torch.empty((q, width), dtype=scores.dtype, device=scores.device)
    out_i = torch.empty((q, width), dtype=torch.int64, device=scores.device)
    per_row = max(1, k_u * width * 24)
    step = max(1, min(q, budget_bytes // per_row))
    for s0 in range(0, q, step):
        s, u = scores[s0 : s0 + step], distinct[s0 : s0 + step]
        idx = copies[u.clamp(min=0)]  # (rows, k_u, width)
        idx = torch.where((u < 0)[..., None], torch.full_like(idx, PAD_INDEX), idx)
        val = s[..., None].expand(idx.shape)
        val = torch.where(idx < 0, torch.full_like(val, float("inf")), val)
        v, i = topk_by_score_then_index(val.reshape(val.shape[0], -1), idx.reshape(idx.shape[0], -1), width)
        out_s[s0 : s0 + step], out_i[s0 : s0 + step] = v, i
    return out_s, out_i


def drop_self(scores: torch.Tensor, index: torch.Tensor, query_ids: torch.Tensor, k: int):
    """From lists of k + 1 originals, drop each query's own index (or the last entry): (q, k) lists."""
    own = index == query_ids[:, None]
    own[:, -1] |= ~own.any(1)  # not listed: the (k+1)-th goes instead
    keep = torch.argsort(own.to(torch.int8), dim=1, stable=True)[:, :k]
    return scores.gather(1, keep), index.gather(1, keep)
