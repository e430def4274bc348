"""Frequent itemsets on a Dask cluster by count distribution: the single-process itemsets and supports.

Every row partition packs its transactions into item bitmaps once, where it lives
(kept on its worker as host words). Each pass broadcasts the candidate itemsets
(all items, then the joins of the last level's frequent itemsets sharing all but
their last item, in :func:`gpumine.counting.frequent_itemsets`'s order); every
partition counts the rows holding each candidate (AND of its items' bitmaps and a
popcount, :func:`gpumine.counting._ops.term_counts`) and the integer counts are
summed in a tree. Integer sums are exact in any order and the frequency test and
supports are computed from the totals as one process computes them, so the
result equals the single-process one for any partitioning.
"""

from __future__ import annotations

import numpy as np

from ._inputs import is_dask, partition_futures
from ._knn import _client, tree_reduce

__all__ = ["frequent_itemsets"]


def _basket_items(baskets) -> set:
    """The distinct items of a partition of baskets (a string basket is one item, as one process reads it)."""
    return {i for b in baskets for i in ([b] if isinstance(b, (str, bytes)) else b)}


def _item_union(a, b):
    return a | b


def _bitmaps(part, items, device):
    """A partition's item bitmaps as host words ``(n_items, n_words)`` in the global item order, and its row count.

    ``items``: the sorted item universe for baskets, ``None`` for a one-hot table (its columns are the items).
    """
    import pandas as pd
    import torch

    from gpumine.counting._itemsets import transactions_to_bitmaps

    if not isinstance(part, (pd.DataFrame, np.ndarray, torch.Tensor)):
        part = list(part)
    if len(part) == 0:
        return None, 0
    words, labels, n = transactions_to_bitmaps(part, device)
    words = words.cpu().numpy()
    if items is not None:  # local item order -> the global one
        where = {item: j for j, item in enumerate(items)}
        out = np.zeros((len(items), words.shape[1]), dtype=words.dtype)
        out[[where[label] for label in labels]] = words
        words = out
    return words, int(n)


def _count(bitmaps, candidates, device, backend):
    """Rows of a partition holding every item of each candidate ``(m, k)``: int64 ``(m,)``, exact."""
    import torch

    from gpumine.config import resolve_backend, resolve_device
    from gpumine.counting._bits import tail_mask
    from gpumine.counting._ops import term_counts

    words, n = bitmaps
    if words is None:
        return None
    dev = resolve_device(device)
    words = torch.from_numpy(words).to(dev)
    rows = torch.from_numpy(np.ascontiguousarray(candidates, dtype=np.int64)).to(dev)
    neg = torch.zeros(rows.shape, dtype=torch.bool, device=dev)
    return term_counts(words, rows, neg, tail_mask(n, dev), backend=resolve_backend(backend, dev)).cpu().numpy()


def _shape(bitmaps):
    """(rows, items) of a partition's bitmaps (items -1 for an empty partition)."""
    words, n = bitmaps
    return n, -1 if words is None else words.shape[0]


def _add(a, b):
    if a is None or b is None:
        return a if b is None else b
    return a + b


def _local_partitions(transactions, n_blocks: int):
    """NumPy, pandas, torch or baskets split into row blocks (one per worker); whether they are baskets."""
    import pandas as pd
    import torch

    if isinstance(transactions, (str, bytes)):
        raise TypeError("transactions must be baskets (a list of lists of items) or a one-hot table, not a string")
    if isinstance(transactions, pd.DataFrame) or isinstance(transactions, torch.Tensor) or (
            isinstance(transactions, np.ndarray) and transactions.ndim == 2):
        table, baskets = transactions, False
    elif isinstance(transactions, np.ndarray):
        raise ValueError(f"a one-hot transaction matrix must be 2-D (transactions x items); got shape "
                         f"{transactions.shape}. One transaction of items is [[...]]; a one-hot row is X.reshape(1, -1)")
    else:
        table, baskets = list(transactions), True
    n = len(table)
    bounds = np.linspace(0, n, max(1, min(n_blocks, n)) + 1).astype(np.int64)
    take = (lambda a, b: table.iloc[a:b]) if isinstance(table, pd.DataFrame) else (lambda a, b: table[a:b])
    return [take(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a], baskets


def frequent_itemsets(transactions, min_support=0.5, *, max_len=None, use_colnames=None, device="auto",
                      backend="auto", client=None):
    """All itemsets with support at least ``min_support``, counted on a Dask cluster (count distribution).

    The same DataFrame (``support``, ``itemsets``; rows in the same order, the same
    float supports) as :func:`gpumine.counting.frequent_itemsets` on all rows.

    Parameters
    ----------
    transactions
        A one-hot table: a dask array chunked by rows, a dask DataFrame (labels
        are its columns), a NumPy array, pandas DataFrame or torch tensor (split
        over the workers); or baskets: a dask bag of baskets, or a list of them.
        Each row partition is packed and counted where it lives.
    min_support, max_len, use_colnames, device, backend
        As :func:`gpumine.counting.frequent_itemsets` (``device`` and ``backend``
        are resolved on each worker). ``use_colnames=None``: column indices for
        one-hot tables, the items themselves for baskets.
    client : distributed.Client, optional
        Default: the current client.
    """
    import dask.array as da
    import dask.bag as db
    import dask.dataframe as dd
    import pandas as pd

    from gpumine.counting._itemsets import check_itemset_arguments  # the single-process checks and messages

    check_itemset_arguments(min_support, max_len)
    client = _client(client)
    if is_dask(transactions):
        if not isinstance(transactions, (da.Array, dd.DataFrame, db.Bag)):
            raise TypeError(f"dask transactions must be a one-hot dask array or DataFrame, or a bag of baskets; got "
                            f"{type(transactions).__name__}")
        if isinstance(transactions, da.Array) and transactions.ndim != 2:
            raise ValueError(f"a one-hot transaction matrix must be 2-D (transactions x items); got a "
                             f"{transactions.ndim}-D dask array")
        baskets = isinstance(transactions, db.Bag)
        parts = partition_futures(client, transactions)
        labels = list(transactions.columns) if isinstance(transactions, dd.DataFrame) else None
    else:
        n_workers = max(1, len(client.scheduler_info()["workers"]))
        blocks, baskets = _local_partitions(transactions, n_workers)
        parts = [client.scatter(block, hash=False) for block in blocks]
        labels = list(transactions.columns) if isinstance(transactions, pd.DataFrame) else None
    items = None
    if baskets:  # pass 0: the item universe, sorted as one process sorts it
        found = tree_reduce(client, [client.submit(_basket_items, part, pure=False) for part in parts], _item_union)
        items = sorted(found or (), key=lambda v: (str(type(v)), v))
        labels = items
        items_future = client.scatter(items, broadcast=True, hash=False)
    else:
        items_future = None
    bitmaps = [client.submit(_bitmaps, part, items_future, device, pure=False) for part in parts]
    sizes, widths = zip(*client.gather([client.submit(_shape, b, pure=False) for b in bitmaps]))
    del parts, items_future
    n = int(sum(sizes))
    if n == 0:
        raise ValueError("transactions are empty: at least one transaction is required")
    n_items = {w for w in widths if w >= 0}
    if len(n_items) > 1:
        raise ValueError(f"partitions have {sorted(n_items)} items (columns); every partition needs the same columns")
    n_items = n_items.pop()
    if labels is None:
        labels = list(range(n_items))
    ms = float(min_support)

    def totals(candidates):
        shared = client.scatter(candidates, broadcast=True, hash=False)
        counts = tree_reduce(client, [client.submit(_count, b, shared, device, backend, pure=False) for b in bitmaps],
                             _add)
        return np.zeros(len(candidates), np.int64) if counts is None else counts

    from gpumine.counting._itemsets import _join_pairs  # the single-process join: the same candidates, same order

    counts = totals(np.arange(n_items, dtype=np.int64)[:, None])
    freq = np.flatnonzero((counts.astype(np.float64) / n) >= ms)
    levels_items, levels_counts = [freq[:, None]], [counts[freq]]
    k = 1
    while levels_items[-1].shape[0] > 1 and (max_len is None or k < max_len):
        items_k = levels_items[-1]
        a, b = _join_pairs(items_k)
        if a.size == 0:
            break
        candidates = np.concatenate([items_k[a], items_k[b, -1:]], 1)
        counts = totals(candidates)
        keep = np.flatnonzero((counts.astype(np.float64) / n) >= ms)
        if keep.size == 0:
            break
        levels_items.append(candidates[keep])
        levels_counts.append(counts[keep])
        k += 1
    del bitmaps
    if use_colnames is None:
        use_colnames = baskets
    sets, sups = [], []
    for its, cs in zip(levels_items, levels_counts):
        for row, c in zip(its.tolist(), cs.tolist()):
            sets.append(frozenset(labels[i] for i in row) if use_colnames else frozenset(row))
            sups.append(c / n)
    return pd.DataFrame({"support": np.asarray(sups, dtype=np.float64), "itemsets": sets})
