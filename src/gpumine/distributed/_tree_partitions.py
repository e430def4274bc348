"""The distributed C4.5's work on each row partition where it lives, and the sums of its results.

Each partition reads its rows as one process would and summarises its own
encoding (:func:`_summarize`); the summaries merge, in partition order, into the
encoding one process makes (:func:`_merge_summaries`, :func:`_merged_columns`),
which each partition then applies (:func:`_encode`). Per depth of the growth a
partition routes its entries and counts its node x attribute level x class table
(:func:`_step`); for the pruning with whole counts it counts the rows outside
each node's largest branch (:func:`_branch_extras`). The client sums the
partitions' results (:func:`_summed`: gathered, or a tree reduce on the cluster).
"""

from __future__ import annotations

import copy
import sys
import types

import numpy as np
import torch

from ..counting._ops import grouped_histogram, histogram_backend
from ..counting.tree._classifier import C45Classifier as _LocalC45
from ..counting.tree._encoding import MAX_NOMINAL_VALUES, _category_key, _Columns, _FrameColumns, encode_labels
from ..counting.tree._growth import _TreeGrower
from ._knn import tree_reduce


#: Partition results are gathered and added on the client while they hold at most this many bytes in all (one hop
#: from the round to its result); larger ones are summed by a tree reduce on the cluster.
GATHER_MAX_BYTES = 32 << 20


def _summed(client, futures, combine, nbytes):
    """``combine`` over the partitions' results ``futures`` (``nbytes`` each, about), in order."""
    if len(futures) > 1 and nbytes * len(futures) > GATHER_MAX_BYTES:
        return tree_reduce(client, futures, combine)
    results = client.gather(futures)
    out = results[0] if results else None
    for r in results[1:]:
        out = combine(out, r)
    return out


# ----------------------------------------------------------------------------- one partition, on its worker
class _Partition:
    """One row partition where it lives: its codes (first its own, then the merged encoding's), labels,
    weights, and the entries (row, node of the depth, weight) of the growth."""


def _summarize(X_block, y_block, w_block, params):
    """Read one partition as the single-process fit reads X, y and sample_weight (the same checks and
    messages); returns a :class:`_Partition` with its own encoding and, in ``summary``, what the merge needs."""
    local = _LocalC45(**params)
    p = _Partition()
    rows = len(X_block)
    if rows == 0:
        p.summary = None
        return p
    arr, is_num, names = local._to_frame(X_block, reset=True)
    classes, ycodes = encode_labels(y_block, arr.shape[0])
    n, d = arr.shape
    w = None
    all_one, any_positive = True, True
    if w_block is not None:
        w = np.asarray(w_block, dtype=np.float64)
        if w.ndim == 0:
            w = np.full(n, float(w))
        if w.shape != (n,):
            raise ValueError(f"sample_weight has shape {w.shape}; expected ({n},)")
        if not np.isfinite(w).all() or (w < 0).any():
            raise ValueError("sample_weight must be finite and non-negative")
        all_one, any_positive = bool(np.all(w == 1.0)), bool((w > 0).any())
        if (w == 0).any():
            # zero weight is the same as absent: such rows must not shape the encoding either
            keep = w > 0
            arr = arr.take(keep) if isinstance(arr, _FrameColumns) else arr[keep]
            ycodes, w = ycodes[keep], w[keep]
            n = arr.shape[0]
    nominal = local._nominal_mask(is_num, d)
    if isinstance(arr, _FrameColumns):
        arr.nominal = nominal
    col_names = names or [f"x{j}" for j in range(d)]
    if n:
        # this partition's own levels: every distinct value (no binning: the cuts are the merged data's)
        cols = _Columns(arr, nominal, sys.maxsize, col_names)
        codes = cols.encode_train(arr)
        values, has_missing = cols.values, cols.has_missing
    else:
        codes = np.zeros((0, d), dtype=np.int32)
        values = [np.empty(0, dtype=object) if nominal[j] else np.empty(0) for j in range(d)]
        has_missing = [False] * d
    columns = []
    for j in range(d):
        if nominal[j]:
            # key -> the value as first seen in this partition (the merge keeps the first partition's)
            columns.append({_category_key(v): v for v in values[j].tolist()})
        else:
            counts = np.bincount(codes[:, j], minlength=len(values[j]) + 1)[:len(values[j])]
            columns.append((np.asarray(values[j], dtype=np.float64), counts.astype(np.int64)))
    p.local_codes, p.local_values, p.local_classes = codes, values, classes
    p.local_y, p.w = ycodes.astype(np.int64, copy=False), w
    p.summary = {
        "n": n, "d": d, "names": names, "nominal": nominal,
        "feature_names": getattr(local, "feature_names_in_", None),
        "classes": classes, "all_one": all_one, "any_positive": any_positive,
        "columns": columns, "has_missing": list(has_missing),
    }
    return p


def _summary_of(p):
    return p.summary


def _has_rows(p):
    return p.summary is not None and p.summary["n"] > 0


def _merge_summaries(a, b):
    """Two partitions' summaries as one (``a``'s rows first): associative, so a tree reduce merges them all."""
    if a is None or b is None:
        return a if b is None else b
    if a["d"] != b["d"]:
        raise ValueError(f"partitions have {a['d']} and {b['d']} features; every partition needs the same columns")
    if a["names"] != b["names"]:
        raise ValueError("partitions have different column names; every partition needs the same columns")
    if not np.array_equal(a["nominal"], b["nominal"]):
        raise ValueError("partitions have columns of different kinds (numeric in one, not in another); give every "
                         "partition the same dtypes, or list the nominal columns in categorical_features")
    columns = []
    for ca, cb, nom in zip(a["columns"], b["columns"], a["nominal"]):
        if nom:
            merged = dict(ca)
            for k, v in cb.items():
                merged.setdefault(k, v)  # the value as first seen in row order
            columns.append(merged)
        else:
            vals, inv = np.unique(np.concatenate([ca[0], cb[0]]), return_inverse=True)
            counts = np.zeros(vals.size, dtype=np.int64)
            np.add.at(counts, inv.reshape(-1), np.concatenate([ca[1], cb[1]]))
            columns.append((vals, counts))
    return {
        "n": a["n"] + b["n"], "d": a["d"], "names": a["names"], "nominal": a["nominal"],
        "feature_names": a["feature_names"],
        "classes": np.unique(np.concatenate([a["classes"], b["classes"]])),
        "all_one": a["all_one"] and b["all_one"], "any_positive": a["any_positive"] or b["any_positive"],
        "columns": columns, "has_missing": [x or y for x, y in zip(a["has_missing"], b["has_missing"])],
    }


def _merged_columns(summary, max_bins):
    """The encoding one process makes of all rows (:class:`_Columns`), from the merged summary."""
    d, names, nominal = summary["d"], summary["names"], np.asarray(summary["nominal"], dtype=bool)
    names = names or [f"x{j}" for j in range(d)]
    cols = _Columns.__new__(_Columns)
    cols.nominal, cols.names = nominal, names
    cols._source, cols._codes, cols._matrix = None, {}, None
    cols.n_known, cols.has_missing, cols.values, cols.bin_max, cols.bin_min = [], [], [], [], []
    for j in range(d):
        entry = summary["columns"][j]
        if nominal[j]:
            keys = sorted(entry)
            if len(keys) > MAX_NOMINAL_VALUES:
                raise ValueError(
                    f"nominal feature {names[j]!r} has {len(keys)} distinct values, more than the "
                    f"{MAX_NOMINAL_VALUES} a nominal split may have; drop it (an identifier?) or pass it as a "
                    "numeric feature (leave it out of categorical_features)"
                )
            vals = np.empty(len(keys), dtype=object)
            vals[:] = [entry[k] for k in keys]
            cols.values.append(vals)
            cols.bin_max.append(None)
            cols.bin_min.append(None)
            cols.n_known.append(len(keys))
        else:
            vals, counts = entry
            if vals.size > max_bins:
                # equal-frequency cuts at data values, as _Columns cuts them: NumPy's "lower" quantiles, read off the
                # merged value counts (order statistics depend on the multiset of values only)
                q = np.linspace(0, 1, max_bins + 1)[1:-1]
                at = np.floor((int(counts.sum()) - 1) * q).astype(np.intp)
                cuts = np.unique(vals[np.searchsorted(np.cumsum(counts), at, side="right")])
                while cuts.size and cuts[-1] >= vals[-1]:
                    cuts = cuts[:-1]
                cols.values.append(("binned", cuts))
                cols.bin_max.append(np.r_[cuts, vals[-1]])
                cols.bin_min.append(np.r_[vals[0], vals[np.searchsorted(vals, cuts, side="right")]])
                cols.n_known.append(int(cuts.size + 1))
            else:
                cols.values.append(vals)
                cols.bin_max.append(vals)
                cols.bin_min.append(vals)
                cols.n_known.append(int(vals.size))
        cols.has_missing.append(bool(summary["has_missing"][j]))
    cols.n_levels = [k + 1 for k in cols.n_known]
    return cols


def _encode(p, columns, classes, weighted, device, backend):
    """The partition in the merged encoding: each own level mapped to the merged one (by value, as
    :meth:`_Columns.encode_col` encodes a value), labels to codes of ``classes``; the growth's first entries."""
    q = copy.copy(p)
    codes = np.empty(p.local_codes.shape, dtype=np.int32)
    for j in range(codes.shape[1]):
        own = p.local_values[j]
        lut = np.empty(len(own) + 1, dtype=np.int32)
        lut[:-1] = columns.encode_col(np.asarray(own), j) if len(own) else np.zeros(0, dtype=np.int32)
        lut[-1] = columns.n_known[j]  # missing
        codes[:, j] = lut[p.local_codes[:, j]]
    at = np.searchsorted(classes, p.local_classes)
    q.codes_h, q.y_h = codes, at.astype(np.int64)[p.local_y]
    q.w_h = None if not weighted else (p.w if p.w is not None else np.ones(codes.shape[0]))
    del q.local_codes, q.local_values, q.local_classes, q.local_y, q.w
    dev = _worker_device(device)
    q.device, q.hist_backend, q.n_levels, q.n_known = dev, histogram_backend(backend, dev), columns.n_levels, \
        np.asarray(columns.n_known, dtype=np.int64)
    q.n_classes = len(classes)
    q.codes, q.y = torch.from_numpy(codes).to(dev), torch.from_numpy(q.y_h).to(dev)
    n = codes.shape[0]
    q.rows = torch.arange(n, device=dev)
    q.group = torch.zeros(n, dtype=torch.int64, device=dev)
    q.weight = None if q.w_h is None else torch.from_numpy(q.w_h).to(dev)
    q.entries = None
    return q


def _worker_device(device):
    from ..config import resolve_device

    return resolve_device(device)


def _step(p, plan, n_level, count_plan, want_tot):
    """One round of the growth on a partition: route its entries by the previous depth's splits (``plan``, or
    ``None``), then, as asked, its nodes' class counts (``want_tot``) and the count table of the nodes that can
    split (``count_plan``: each node's table, the number of groups counted and of tables kept); in ``summary``."""
    q = copy.copy(p)
    if plan is not None:
        dev = p.device
        best, first_child, thr, is_num, branch_frac, n_children, splitting, missing = plan
        n_keep = int(p.entries[splitting].sum())
        # the single-process routing itself (it reads only the columns' known levels from its grower)
        stub = types.SimpleNamespace(columns=types.SimpleNamespace(n_known=p.n_known))
        q.rows, q.group, q.weight = _TreeGrower._route(
            stub, p.codes, p.rows, p.group, p.weight, torch.as_tensor(best, device=dev),
            torch.as_tensor(first_child, device=dev), torch.as_tensor(thr, device=dev),
            torch.as_tensor(is_num, device=dev), n_keep, missing, branch_frac, n_children, splitting)
        q.entries = torch.bincount(q.group, minlength=n_level).cpu().numpy()
    elif q.entries is None:
        q.entries = np.array([q.rows.shape[0]], dtype=np.int64)
    C = q.n_classes
    tot = counts = None
    if want_tot:
        if q.weight is None:
            tot = torch.bincount(q.group * C + q.y[q.rows], minlength=n_level * C).reshape(n_level, C).cpu().numpy()
        else:
            # as one process counts fractional weights: by level of the first attribute (summed over its levels on
            # the client), so that one partition gives one process's sums bit for bit
            tot = grouped_histogram(q.codes[:, :1], q.n_levels[:1], q.y, C, q.rows, q.group, n_level, q.weight,
                                    backend=q.hist_backend).to(torch.float64).cpu().numpy()
    if count_plan is not None:
        table_group, n_groups, n_tables = count_plan
        group = torch.as_tensor(table_group, device=q.device)[q.group]
        counts = grouped_histogram(q.codes, q.n_levels, q.y, C, q.rows, group, n_groups, q.weight,
                                   backend=q.hist_backend)[:n_tables].cpu().numpy()
    q.summary = (tot, counts, q.weight is not None)
    return q


def _step_summary(p):
    return p.summary


def _add_step(a, b):
    ta, tb = a[0], b[0]
    if ta is not None and ta.ndim != tb.ndim:
        # a partition's whole counts by node, another's fractional ones by node and level
        ta, tb = (ta, _by_level(tb, ta.shape[1])) if ta.ndim == 3 else (_by_level(ta, tb.shape[1]), tb)
    return (None if ta is None else ta + tb), (None if a[1] is None else a[1] + b[1]), a[2] or b[2]


def _by_level(tot, n_levels):
    """Whole class counts by node ``(nodes, C)`` as a table by node and level ``(nodes, n_levels, C)`` whose sum
    over the levels is ``tot`` (all in the first level)."""
    out = np.zeros((tot.shape[0], n_levels, tot.shape[1]), dtype=np.float64)
    out[:, 0] = tot
    return out


def _add(a, b):
    return a + b


def _release_growth(p):
    """The partition without the growth's device tensors (pruning reads the host codes)."""
    q = copy.copy(p)
    q.codes = q.y = q.rows = q.group = q.weight = q.summary = None
    return q


def _branch_extras(p, attr, first, nchild, left_last, nominal_node, largest, base, pre, size, C):
    """Class counts ``(size, C)`` at the leaves of largest branches of this partition's rows that do not go down
    them.

    Every row is routed from the root down the current tree; at an inner node ``x`` with ``largest[x] >= 0``
    (its largest branch) a row whose own branch is another starts a second path there, down the largest
    branch to a leaf ``v``, counted at ``base[x] + pre[v]`` (``pre``: pre-order numbers, so each node's
    block holds its largest branch's subtree in pre-order).
    """
    codes, y = p.codes_h, p.y_h
    n, d = codes.shape
    flat = codes.reshape(-1)
    out = np.zeros(size * C, dtype=np.int64)

    def down(r, nd):
        c = flat[r * d + attr[nd]]
        return first[nd] + np.where(nominal_node[nd], c, c > left_last[nd])

    r, nd = np.arange(n), np.zeros(n, dtype=np.int64)
    spawned = []
    while r.size:
        inner = nchild[nd] > 0
        r, nd = r[inner], nd[inner]
        if not r.size:
            break
        child = down(r, nd)
        to = largest[nd]
        other = (to >= 0) & (child != to)
        if other.any():
            spawned.append((r[other], base[nd[other]], to[other]))
        nd = child
    if not spawned:
        return out.reshape(size, C)
    r, key, nd = (np.concatenate(x) for x in zip(*spawned))
    while r.size:
        leaf = nchild[nd] == 0
        if leaf.any():
            out += np.bincount((key[leaf] + pre[nd[leaf]]) * C + y[r[leaf]], minlength=size * C)
            inner = ~leaf
            r, key, nd = r[inner], key[inner], nd[inner]
            if not r.size:
                break
        nd = down(r, nd)
    return out.reshape(size, C)


def _tested_columns(p, attrs):
    """This partition's codes of the columns ``attrs``, labels and weights, for the pruning on the client."""
    return np.ascontiguousarray(p.codes_h[:, attrs]), p.y_h, p.w_h


def _query_extras(p, shared, size, C):
    tables, largest, base, pre = shared
    return _branch_extras(p, *tables, largest, base, pre, size, C)


def _children_counts(counts, rows, attrs, last_left, offsets, n_known, nominal):
    """The class counts of the children of the nodes that split, in their order, from the nodes' whole count table
    ``counts`` (rows ``rows``): a nominal split's branch is one level of its attribute, a numeric one's the levels up
    to the cut (``last_left``) and those above it."""
    out = []
    for r, j, t in zip(rows.tolist(), attrs.tolist(), last_left.tolist()):
        table = counts[r, offsets[j]:offsets[j] + n_known[j]]
        if nominal[j]:
            out.append(table)
        else:
            out.append(np.stack([table[:t + 1].sum(0), table[t + 1:].sum(0)]))
    return np.concatenate(out)
