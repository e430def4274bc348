"""Frequent itemsets on vertical bitmaps (AND + popcount) and association rules."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd
import torch

from ..utils._progress import Progress
from ..config import resolve_backend, resolve_device, working_memory_bytes
from ._bits import n_words_for, pack_bool, pack_groups, popcount_sum, tail_mask
from ._ops import and_count_matrix, term_counts

__all__ = ["frequent_itemsets", "association_rules", "transactions_to_bitmaps"]


def transactions_to_bitmaps(transactions, device=None):
    """Item bitmaps ``(n_items, n_words)`` of transactions, with the item labels and the row count.

    ``transactions`` is a one-hot pandas DataFrame (bool or 0/1; labels are the
    column names), a 2-D bool/0-1 array or tensor (labels are column indices), or
    an iterable of baskets (iterables of hashable items; labels are the sorted items).
    """
    dev = resolve_device(device)
    if isinstance(transactions, pd.DataFrame):
        vals = transactions.to_numpy()
        if vals.dtype == object:  # bool and 0/1 columns side by side, object or nullable columns
            vals = _object_onehot(vals)
        _check_onehot(vals)
        labels = list(transactions.columns)
        mat = torch.from_numpy(np.ascontiguousarray(vals.astype(bool)))
        return pack_bool(mat.T.to(dev)), labels, vals.shape[0]
    if isinstance(transactions, torch.Tensor) or (isinstance(transactions, np.ndarray) and transactions.ndim == 2):
        t = transactions if isinstance(transactions, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(transactions))
        if t.ndim != 2:
            raise ValueError(f"a one-hot transaction matrix must be 2-D; got shape {tuple(t.shape)}")
        if t.dtype != torch.bool:
            _check_onehot(t.cpu().numpy())
        return pack_bool(t.to(dev).bool().T), list(range(t.shape[1])), t.shape[0]
    if isinstance(transactions, (str, bytes)):
        raise TypeError("transactions must be baskets (a list of lists of items) or a one-hot table, not a string")
    if isinstance(transactions, np.ndarray) and transactions.ndim != 2:
        raise ValueError(f"a one-hot transaction matrix must be 2-D (transactions x items); got shape {transactions.shape}. "
                         "One transaction of items is [[...]]; a one-hot row is X.reshape(1, -1)")
    baskets = [list(dict.fromkeys(b)) if not isinstance(b, (str, bytes)) else [b] for b in transactions]
    items = sorted({i for b in baskets for i in b}, key=lambda v: (str(type(v)), v))
    index = {v: k for k, v in enumerate(items)}
    lens = [len(b) for b in baskets]
    rows = torch.repeat_interleave(torch.arange(len(baskets)), torch.tensor(lens, dtype=torch.int64)) if baskets else torch.zeros(0, dtype=torch.int64)
    cols = torch.tensor([index[i] for b in baskets for i in b], dtype=torch.int64)
    words = pack_groups(cols.to(dev), len(items), len(baskets), rows=rows.to(dev))
    return words, items, len(baskets)


def _check_onehot(vals):
    if vals.dtype == bool:
        return
    if vals.dtype.kind not in "biuf":
        raise ValueError("a one-hot transaction table must hold booleans or 0/1; got non-numeric values")
    bad = ~np.isin(vals, (0, 1))
    if bad.any():
        _raise_not_onehot(vals[bad].ravel()[0])


def _raise_not_onehot(value):
    # the value as the user wrote it: 2, not np.int64(2)
    shown = value.item() if isinstance(value, np.generic) else value
    raise ValueError(
        f"a one-hot transaction table must hold only 0/1 or booleans; found {shown!r}. "
        "Encode baskets with mlxtend's TransactionEncoder or pass a list of baskets"
    )


def _object_onehot(vals: np.ndarray) -> np.ndarray:
    """The cells of an object array as booleans, when each is a bool or a number equal to 0 or 1.

    A DataFrame gives an object array when bool and integer columns stand side by
    side, or for object and pandas' nullable ("boolean", "Int64") columns; mlxtend
    takes those tables, so they are read cell by cell rather than refused.
    Missing values (None, NaN, pd.NA) and strings raise.
    """
    flat = vals.ravel()
    number = (bool, int, float, np.bool_, np.integer, np.floating)
    numeric = np.fromiter((isinstance(v, number) for v in flat), bool, flat.size)
    if not numeric.all():
        _raise_not_onehot(flat[~numeric][0])
    values = flat.astype(np.float64)
    bad = ~np.isin(values, (0.0, 1.0))
    if bad.any():
        _raise_not_onehot(flat[bad][0])
    return (values == 1.0).reshape(vals.shape)


def check_itemset_arguments(min_support, max_len) -> None:
    """Validate ``min_support`` (a fraction in (0, 1]) and ``max_len`` (a positive integer or None)."""
    if isinstance(min_support, bool) or not isinstance(min_support, (int, float, np.floating, np.integer)):
        raise TypeError(f"min_support must be a number in (0, 1]; got {min_support!r}")
    if not 0.0 < float(min_support) <= 1.0:
        raise ValueError(f"min_support must be in (0, 1] (a fraction of the transactions); got {min_support}")
    if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, (int, np.integer)) or max_len < 1):
        raise ValueError(f"max_len must be a positive integer or None; got {max_len!r}")


def frequent_itemsets(transactions, min_support=0.5, *, max_len=None, use_colnames=None, device="auto",
                      backend="auto", verbose=None) -> pd.DataFrame:
    """All itemsets whose support (fraction of transactions holding them) is at least ``min_support``.

    Level-wise mining over vertical bitmaps: frequent ``(k-1)``-itemsets sharing a
    ``(k-2)``-prefix are joined, the candidate's bitmap is the AND of the two
    parents' bitmaps and its support a popcount (Eclat's tidset intersection in
    bitmap form, one batched launch per chunk of candidates). Results equal
    mlxtend's ``apriori(..., use_colnames=...)``.

    Parameters
    ----------
    transactions : one-hot DataFrame, 2-D bool array/tensor, or iterable of baskets
    min_support : float in (0, 1]
    max_len : int, default=None
        Longest itemset to report.
    use_colnames : bool, default=None
        True: report item labels (column names / basket items); False: column
        indices. None: as mlxtend's ``apriori`` for one-hot tables (column
        indices), the items themselves for baskets (they have no columns).
    device, backend : see :mod:`gpumine.config`

    Returns
    -------
    pandas.DataFrame with columns ``support`` (float) and ``itemsets`` (frozenset),
    ordered by itemset length, then lexicographically by item index.

    Examples
    --------
    >>> baskets = [["milk", "bread"], ["bread", "butter"], ["milk", "bread", "butter"], ["milk"]]
    >>> df = frequent_itemsets(baskets, min_support=0.5, device="cpu")
    >>> [(sorted(s), v) for s, v in zip(df.itemsets, df.support)]
    [(['bread'], 0.75), (['butter'], 0.5), (['milk'], 0.75), (['bread', 'butter'], 0.5), (['bread', 'milk'], 0.5)]
    """
    check_itemset_arguments(min_support, max_len)
    dev = resolve_device(device)
    be = resolve_backend(backend, dev)
    words, labels, n = transactions_to_bitmaps(transactions, dev)
    if n == 0:
        raise ValueError("transactions are empty: at least one transaction is required")
    ms = float(min_support)
    counts = and_count_matrix(words, tail_mask(n, dev)[None, :], backend=be)[:, 0]
    freq = ((counts.to(torch.float64) / n) >= ms).nonzero()[:, 0]
    levels_items = [freq.cpu().numpy()[:, None]]
    levels_counts = [counts[freq].cpu().numpy()]
    B = words[freq]
    budget = working_memory_bytes(None, dev)
    nw = n_words_for(n)
    k = 1
    with Progress(total=max_len or 0, desc="itemsets", verbose=verbose) as bar:
        while B.shape[0] > 1 and (max_len is None or k < max_len):
            items = levels_items[-1]
            a, b = _join_pairs(items)
            if a.size == 0:
                break
            # count candidates in chunks; keep bitmaps of frequent ones only
            new_items, new_counts, new_B = [], [], []
            chunk = max(1, budget // (8 * max(nw, 1) * 4))
            at = torch.as_tensor(a, device=dev)
            bt = torch.as_tensor(b, device=dev)
            for s in range(0, a.size, chunk):
                rows = torch.stack([at[s:s + chunk], bt[s:s + chunk]], 1)
                if be == "torch":  # bitmaps have zero padding: no tail mask needed
                    c = popcount_sum(B[rows[:, 0]] & B[rows[:, 1]], 1)
                else:
                    c = term_counts(B, rows, torch.zeros_like(rows, dtype=torch.bool), tail_mask(n, dev), backend=be)
                keep = ((c.to(torch.float64) / n) >= ms).nonzero()[:, 0]
                if keep.numel():
                    ka, kb = rows[keep, 0], rows[keep, 1]
                    new_B.append(B[ka] & B[kb])
                    kn = keep.cpu().numpy() + s
                    new_items.append(np.concatenate([items[a[kn]], items[b[kn], -1:]], 1))
                    new_counts.append(c[keep].cpu().numpy())
            if not new_items:
                break
            levels_items.append(np.concatenate(new_items, 0))
            levels_counts.append(np.concatenate(new_counts, 0))
            B = torch.cat(new_B, 0)
            k += 1
            bar.update()
    if use_colnames is None:
        use_colnames = not (isinstance(transactions, (pd.DataFrame, np.ndarray, torch.Tensor)))
    sets, sups = [], []
    for its, cs in zip(levels_items, levels_counts):
        for row, c in zip(its.tolist(), cs.tolist()):
            sets.append(frozenset(labels[i] for i in row) if use_colnames else frozenset(row))
            sups.append(c / n)
    # an object column even when empty, as mlxtend's (an empty list alone makes pandas choose float64)
    return pd.DataFrame({"support": np.asarray(sups, dtype=np.float64), "itemsets": pd.Series(sets, dtype=object)})


def _join_pairs(items: np.ndarray):
    """Index pairs ``(i, j), i < j`` of sorted itemsets sharing all but the last item."""
    m, k = items.shape
    if m < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if k == 1:
        ends = np.full(m, m, np.int64)
    else:
        pre = items[:, :-1]
        new = np.r_[True, np.any(pre[1:] != pre[:-1], axis=1)]
        gid = np.cumsum(new) - 1
        gstart = np.flatnonzero(new)
        gend = np.r_[gstart[1:], m]
        ends = gend[gid]
    partners = ends - np.arange(m) - 1
    total = int(partners.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    a = np.repeat(np.arange(m), partners)
    first = np.cumsum(partners) - partners
    b = a + 1 + (np.arange(total) - np.repeat(first, partners))
    return a, b


_METRICS = ("antecedent support", "consequent support", "support", "confidence", "lift", "representativity",
            "leverage", "conviction", "zhangs_metric", "jaccard", "certainty", "kulczynski")


def association_rules(itemsets: pd.DataFrame, metric="confidence", min_threshold=0.8, *, support_only=False) -> pd.DataFrame:
    """Rules ``A → C`` from the output of :func:`frequent_itemsets` (as mlxtend's ``association_rules``).

    Every frequent itemset of two or more items is split into every non-empty
    antecedent / consequent pair; rules whose ``metric`` is at least
    ``min_threshold`` are kept. Columns: ``antecedents``, ``consequents`` and the
    metrics ``antecedent support``, ``consequent support``, ``support``,
    ``confidence``, ``lift``, ``representativity``, ``leverage``, ``conviction``,
    ``zhangs_metric``, ``jaccard``, ``certainty``, ``kulczynski``.

    Examples
    --------
    >>> baskets = [["milk", "bread"], ["bread", "butter"], ["milk", "bread", "butter"], ["milk"]]
    >>> rules = association_rules(frequent_itemsets(baskets, 0.5, device="cpu"), "confidence", 0.6)
    >>> [(sorted(a), sorted(c), round(x, 3)) for a, c, x in zip(rules.antecedents, rules.consequents, rules.confidence)]
    [(['bread'], ['butter'], 0.667), (['butter'], ['bread'], 1.0), (['bread'], ['milk'], 0.667), (['milk'], ['bread'], 0.667)]
    """
    if not isinstance(itemsets, pd.DataFrame) or not {"support", "itemsets"} <= set(itemsets.columns):
        raise ValueError("itemsets must be a DataFrame with columns 'support' and 'itemsets' (from frequent_itemsets)")
    if metric not in _METRICS:
        raise ValueError(f"metric must be one of {_METRICS}; got {metric!r}")
    if support_only:
        metric = "support"
    support = {frozenset(s): float(v) for s, v in zip(itemsets["itemsets"], itemsets["support"])}
    ants, cons, sAC, sA, sC = [], [], [], [], []
    for s, v in support.items():
        if len(s) < 2:
            continue
        items = sorted(s, key=lambda x: (str(type(x)), x))
        for r in range(len(items) - 1, 0, -1):
            for a in combinations(items, r):
                a = frozenset(a)
                c = s - a
                if support_only:
                    av, cv = np.nan, np.nan
                else:
                    if a not in support or c not in support:
                        raise KeyError(
                            "some antecedent/consequent supports are missing from `itemsets` (was it filtered?); "
                            "use support_only=True or pass all frequent itemsets"
                        )
                    av, cv = support[a], support[c]
                ants.append(a)
                cons.append(c)
                sAC.append(v)
                sA.append(av)
                sC.append(cv)
    sAC, sA, sC = (np.asarray(x, dtype=np.float64) for x in (sAC, sA, sC))
    with np.errstate(divide="ignore", invalid="ignore"):
        conf = sAC / sA
        lift = conf / sC
        lev = sAC - sA * sC
        conv = np.full(conf.shape, np.inf)
        lt = conf < 1.0
        conv[lt] = (1 - sC[lt]) / (1 - conf[lt])
        zden = np.maximum(sAC * (1 - sA), sA * (sC - sAC))
        zhang = np.where(zden == 0, 0.0, lev / zden)
        jac = sAC / (sA + sC - sAC)
        cden = 1 - sC
        cert = np.where(cden == 0, 0.0, (conf - sC) / cden)
        kulc = (conf + sAC / sC) / 2
    out = pd.DataFrame({
        "antecedents": ants, "consequents": cons, "antecedent support": sA, "consequent support": sC,
        "support": sAC, "confidence": conf, "lift": lift, "representativity": np.ones_like(sAC), "leverage": lev,
        "conviction": conv, "zhangs_metric": zhang, "jaccard": jac, "certainty": cert, "kulczynski": kulc,
    })
    if len(out) == 0:
        return out
    keep = out[metric].to_numpy() >= min_threshold
    return out[keep].reset_index(drop=True)

