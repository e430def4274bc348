"""C4.5 on a Dask cluster: the single-process tree grown from per-partition count tables.

:class:`C45Classifier` grows :class:`gpumine.counting.C45Classifier`'s tree breadth-first, as one
process does, but every count comes from the row partitions where they live, summed by a tree
reduce. It is not a forest of local trees: the tree is one, its split search runs on the client
over the summed tables.

* **Encoding.** Each partition finds its own distinct values (nominal categories with the first
  spelling seen, numeric values with their counts) and labels; the client merges them in partition
  order into the encoding one process would make (the same categories, levels and equal-frequency
  cuts: a cut is an order statistic of the merged value counts), and each partition maps its codes
  to the merged ones.
* **Growth.** One round per depth: every partition routes its entries (row, node, weight) by the
  previous depth's splits with the single-process routing, and counts its entries of the nodes
  that can split into a node x attribute level x class table (the histogram of
  :func:`gpumine.counting._ops.grouped_histogram`). A numeric cut depends only on the multiset of
  (value, class, weight) of the node's rows, which that table holds level by level, so the summed
  table gives one process's thresholds; the split search is the single-process function. With
  whole counts a child's class counts are rows of its parent's table, so the client knows which
  nodes can split before the round; with fractional weights the partitions send them first (a
  second round).
* **Pruning.** Collapsing and subtree replacement read the node distributions only. Subtree raising
  (J48's default) needs the training instances at each node. With whole counts (no sample weights,
  no value missing in a tested attribute) J48's recursion runs on the client, batched by height,
  and the one instance-dependent number, the class counts at the leaves of a node's largest branch
  with all of the node's rows routed down it, comes from the partitions: one pass over the rows
  gives it for every node at once (counts at a node pruned since are a pre-order range of the old
  leaves'), asked again only above and inside a raised subtree. With fractional weights the codes
  of the tested attributes, the labels and the weights are **gathered** on the client and the
  single-process pruning runs there.

Whole counts are int64 everywhere, exact in any order: the tree, its distributions and its
predictions are those of one process bit for bit, for any partitioning and number of workers.
Fractional weights (sample weights, instances with a missing value sent down several branches) are
float64 sums in another order than one process's (equal up to rounding, as the single-process
histogram backends are among themselves; one partition adds them in one process's order): the same
tree except where two candidates tie within rounding. One more difference, in print only: where a
numeric column holds both ``0.0`` and ``-0.0``, one process keeps whichever its unstable sort puts
first (``np.unique`` over all rows), so a cut at zero may print as ``0`` here and ``-0`` there.
"""

from __future__ import annotations

import copy
import math
import sys
import types

import numpy as np
import torch

from ..counting._ops import grouped_histogram, histogram_backend, level_offsets
from ..counting.tree._classifier import C45Classifier as _LocalC45
from ..counting.tree._encoding import MAX_NOMINAL_VALUES, _category_key, _Columns, _FrameColumns, encode_labels
from ..counting.tree._estimates import _SMALL, _pairwise_rows, exact_estimated_errors, prune_decision
from ..counting.tree._growth import _in_average_gain, _TreeGrower
from ..counting.tree._nodes import _branch_sums, _Nodes, recompute_depths, subtree_heights, subtree_levels
from ..counting.tree._pruning import _largest_branch, left_branch_last_codes, prune_raising
from ..counting.tree._pruning_whole import preorder_numbers
from ..counting.tree._split_search import _lnf, _LnfTable, attribute_groups, chosen_split_details
from ._inputs import is_dask, partition_futures, row_partitions
from ._knn import _client, tree_reduce

__all__ = ["C45Classifier"]


# ----------------------------------------------------------------------------- inputs
def _as_local(v):
    """A non-dask input as NumPy or pandas (torch tensors to NumPy), for splitting by rows."""
    if isinstance(v, torch.Tensor):
        return v.detach().cpu().numpy()
    if hasattr(v, "iloc") or isinstance(v, np.ndarray):
        return v
    return np.asarray(v)


def _rows(v, a, b):
    return v.iloc[a:b] if hasattr(v, "iloc") else v[a:b]


def _aligned(client, v, lengths, name, n_parts_of_x, frame_x):
    """Futures of ``v`` (labels or weights) split as ``X``'s partitions (``lengths`` rows each, or ``None``:
    unknown, then ``v`` must be a dask series partitioned as ``X``)."""
    if not is_dask(v) and np.ndim(v) == 0:  # a scalar weight: every row's
        return [v] * n_parts_of_x
    if is_dask(v):
        import dask.array as da

        if frame_x and hasattr(v, "npartitions") and v.npartitions == n_parts_of_x:
            # a dask series partitioned as X: partition by partition (each partition checks its lengths)
            return partition_futures(client, v)
        if lengths is None:
            raise ValueError(f"{name} must be partitioned as X (the same number of partitions); got "
                             f"{getattr(v, 'npartitions', len(row_partitions(v)))} partitions for X's {n_parts_of_x}")
        if not isinstance(v, da.Array):
            v = v.to_dask_array(lengths=True)
        if v.ndim == 2 and v.shape[1] == 1:
            v = v.reshape(-1)
        if v.ndim != 1:
            raise ValueError(f"{name} must be 1-D (one entry per row of X); got a {v.ndim}-D dask array")
        if any(math.isnan(c) for c in v.chunks[0]):
            v = v.compute_chunk_sizes()
        if v.shape[0] != sum(lengths):
            raise ValueError(f"{name} has {v.shape[0]} entries but X has {sum(lengths)} samples; pass one per row of X")
        return partition_futures(client, v.rechunk((tuple(lengths),) + v.chunks[1:]))
    v = _as_local(v)
    if lengths is None:
        raise ValueError(f"{name} must be a dask series partitioned as X when X is a dask DataFrame of unknown "
                         "partition lengths")
    if len(v) != sum(lengths):
        raise ValueError(f"{name} has {len(v)} entries but X has {sum(lengths)} samples; pass one per row of X")
    bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return [client.scatter(_rows(v, a, b), hash=False) for a, b in zip(bounds[:-1], bounds[1:])]


def _input_parts(client, X, y, sample_weight):
    """``[(X part, y part, weight part or None)]`` in row order: a dask collection's row partitions (where they
    live), or a local input split into one block per worker and scattered."""
    if is_dask(X):
        import dask.array as da

        frame_x = not isinstance(X, da.Array)
        if not frame_x:
            if X.ndim != 2:
                raise ValueError(f"X must be 2-D (n_samples, n_features); got a {X.ndim}-D dask array")
            if any(math.isnan(c) for c in X.chunks[0]):
                X = X.compute_chunk_sizes()
            lengths = tuple(int(c) for c in X.chunks[0])
        xs = partition_futures(client, X)
        if frame_x:
            lengths = None

            def paired(v):  # a dask series partitioned as X: taken partition by partition
                return v is None or (is_dask(v) and getattr(v, "npartitions", None) == len(xs))

            if not (paired(y) and paired(sample_weight)):
                lengths = tuple(client.gather([client.submit(len, f, pure=False) for f in xs]))
        ys = _aligned(client, y, lengths, "y", len(xs), frame_x)
        ws = ([None] * len(xs) if sample_weight is None
              else _aligned(client, sample_weight, lengths, "sample_weight", len(xs), frame_x))
        return list(zip(xs, ys, ws))
    X = _as_local(X)
    if getattr(X, "ndim", 2) != 2:
        raise ValueError(f"Expected 2D array, got {X.ndim}D array instead. Reshape your data either using "
                         "array.reshape(-1, 1) if your data has a single feature or array.reshape(1, -1) "
                         "if it contains a single sample.")
    n = len(X)
    y = _as_local(y)
    if np.ndim(y) == 0 or len(y) != n:
        raise ValueError(f"y has {np.size(y)} labels but X has {n} samples; pass one label per row of X")
    w = None if sample_weight is None else _as_local(sample_weight)
    if w is not None and np.ndim(w) and len(w) != n:
        raise ValueError(f"sample_weight has shape {np.shape(w)}; expected ({n},)")
    n_workers = max(1, len(client.scheduler_info()["workers"]))
    bounds = np.linspace(0, n, max(1, min(n_workers, n)) + 1).astype(np.int64)

    def part(v, a, b):
        if v is None or np.ndim(v) == 0:
            return v
        return client.scatter(_rows(v, a, b), hash=False)

    return [(part(X, a, b), part(y, a, b), part(w, a, b)) for a, b in zip(bounds[:-1], bounds[1:])]


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


# ----------------------------------------------------------------------------- pruning with whole counts
class _CountedRaising:
    """J48's subtree raising (``C45PruneableClassifierTree.prune``) on the client, with whole counts (each row on one
    path), the instance counts it needs from the partitions: the arithmetic of
    :func:`gpumine.counting.tree._pruning.prune_raising_routed`, batched by height.

    A node's largest branch is estimated with all of the node's rows: those already in it end where the
    tree's distributions say, the others where :func:`_branch_extras` routes them. ``query(tables, largest, base,
    pre, size)`` returns those counts, summed over the partitions; one query serves every node of a pruning
    pass (its counts at a node cut to a leaf since are the sum of its old leaves', a pre-order range), and is
    asked again only for the nodes above a raised subtree (whose structure changed) and for the raised subtrees.
    """

    def __init__(self, tree, columns, confidence, left_last_code, query):
        self.tree, self.confidence, self.query = tree, confidence, query
        self.nominal = np.asarray(columns.nominal, dtype=bool)
        self.left_last_code = left_last_code
        n = tree.n
        self.estimate = np.zeros(n)
        # per node: the query holding its largest branch's counts (-1: none or stale), its block's first row, its
        # largest branch as then; per query: pre-order numbers and ends, and the counts summed along the rows
        self.source = np.full(n, -1, dtype=np.int64)
        self.offset = np.zeros(n, dtype=np.int64)
        self.branch_of = np.zeros(n, dtype=np.int64)
        self.snapshots = []

    def _estimate(self, dist):
        return exact_estimated_errors(dist, self.confidence)

    def _tables(self):
        tree = self.tree
        n = tree.n
        inner = tree.nchild[:n] > 0
        attr = np.where(inner, tree.attr[:n], 0)
        return (attr, tree.first[:n].copy(), tree.nchild[:n].copy(), self.left_last_code.copy(),
                inner & self.nominal[attr])

    def _largest(self, nodes):
        """Each node's largest branch (Weka's ``maxBag``): by its children's weights, its rows that go down them."""
        tree = self.tree
        k = tree.nchild[nodes]
        b = np.arange(tree.maxk)
        child = np.minimum(tree.first[nodes][:, None] + b, tree.n - 1)
        weights = np.where(b < k[:, None], tree.dist[child].sum(2), 0.0)
        return tree.first[nodes] + _largest_branch(tree, nodes, weights)

    def _refresh(self, nodes):
        """Count, for every one of ``nodes``, its rows outside its largest branch at that branch's leaves."""
        tree = self.tree
        pre, pre_end, _ = preorder_numbers(tree)
        big = self._largest(nodes)
        size = pre_end[big] - pre[big]
        offset = np.cumsum(size) - size
        largest = np.full(tree.n, -1, dtype=np.int64)
        largest[nodes] = big
        base = np.zeros(tree.n, dtype=np.int64)
        base[nodes] = offset - pre[big]
        total = int(size.sum())
        counts = self.query(self._tables(), largest, base, pre, total)
        summed = np.zeros((total + 1, tree.C), dtype=np.int64)
        np.cumsum(counts, axis=0, out=summed[1:])
        self.source[nodes] = len(self.snapshots)
        self.offset[nodes] = offset
        self.branch_of[nodes] = big
        self.snapshots.append((pre, pre_end, summed))
        # the counts no node reads any more
        live = np.zeros(len(self.snapshots), dtype=bool)
        live[self.source[self.source >= 0]] = True
        for s in np.flatnonzero(~live).tolist():
            self.snapshots[s] = None

    def _extra(self, owner, v):
        """The counts of ``owner``'s rows outside its largest branch that end under node ``v`` (arrays)."""
        out = np.zeros((v.size, self.tree.C))
        src = self.source[owner]
        for s in np.unique(src):
            m = src == s
            pre, pre_end, summed = self.snapshots[s]
            x, w = owner[m], v[m]
            start = self.offset[x] - pre[self.branch_of[x]]
            out[m] = summed[start + pre_end[w]] - summed[start + pre[w]]
        return out

    def _owned(self, tops):
        """The nodes of the subtrees at ``tops`` (disjoint) with the position in ``tops`` of the subtree of each."""
        tree = self.tree
        level, own = tops, np.arange(tops.size)
        nodes, owners = [level], [own]
        while True:
            inner = tree.nchild[level] > 0
            parents, own = level[inner], own[inner]
            if not parents.size:
                break
            level, own = tree.children(parents), np.repeat(own, tree.nchild[parents])
            nodes.append(level)
            owners.append(own)
        return nodes, owners

    def prune(self, roots):
        """Prune the disjoint subtrees at ``roots``, children first (J48's recursion, a height at a time)."""
        tree, estimate = self.tree, self.estimate
        levels, nodes, inner = subtree_levels(tree, roots)
        leaves = nodes[tree.nchild[nodes] == 0]
        estimate[leaves] = self._estimate(tree.dist[leaves])
        if not inner.size:
            return
        self._refresh(inner)
        height = subtree_heights(tree, levels)
        inner_height = height[inner]
        for h in np.unique(inner_height):
            batch = inner[inner_height == h]
            if (self.source[batch] < 0).any():
                # a raising below changed their largest branches: these and the others above, in one query
                self._refresh(inner[(inner_height >= h) & (self.source[inner] < 0)])
            largest_node = self._largest(batch)
            e_leaf = self._estimate(tree.dist[batch])
            e_tree = _branch_sums(tree, batch, estimate)
            # the largest branches' estimates with all of their nodes' rows, summed as the recursion sums them
            val = np.zeros(tree.n)
            sub, owners = self._owned(largest_node)
            sub_nodes, sub_owner = np.concatenate(sub), np.concatenate(owners)
            at_leaf = tree.nchild[sub_nodes] == 0
            v, x = sub_nodes[at_leaf], batch[sub_owner[at_leaf]]
            val[v] = self._estimate(tree.dist[v] + self._extra(x, v))
            for level in reversed(sub[:-1]):
                parents = level[tree.nchild[level] > 0]
                if parents.size:
                    val[parents] = _branch_sums(tree, parents, val)
            has = tree.dist[batch].sum(1) > 0
            e_branch = np.where(has, val[largest_node], 0.0)
            to_leaf, keep = prune_decision(e_leaf, e_tree, e_branch)
            tree.nchild[batch[to_leaf]] = 0
            estimate[batch[to_leaf]] = e_leaf[to_leaf]
            estimate[batch[keep]] = e_tree[keep]
            raise_at = np.flatnonzero(~to_leaf & ~keep)
            if raise_at.size:
                self._raise(batch[raise_at], largest_node[raise_at])

    def _raise(self, raised, branch):
        """The largest branches replace their nodes, whose subtrees get the nodes' rows (Weka's
        ``resetDistribution``) and are pruned again (all at once)."""
        tree = self.tree
        sub, owners = self._owned(branch)
        below = np.concatenate(sub[1:]) if len(sub) > 1 else branch[:0]
        dist = tree.dist[below] + self._extra(raised[np.concatenate(owners[1:])], below) if below.size else None
        tree.attr[raised], tree.thr[raised], tree.thrc[raised] = tree.attr[branch], tree.thr[branch], tree.thrc[branch]
        self.left_last_code[raised] = self.left_last_code[branch]
        tree.first[raised], tree.nchild[raised] = tree.first[branch], tree.nchild[branch]
        tree.parent[tree.children(raised)] = np.repeat(raised, tree.nchild[raised])
        if below.size:
            tree.dist[below] = dist
        # missing-value fractions from the children's weights (even shares where there is none)
        _, _, inner = subtree_levels(tree, raised)
        n_children = tree.nchild[inner]
        for k in np.unique(n_children):
            g = inner[n_children == k]
            bk = tree.dist[tree.first[g][:, None] + np.arange(k)].sum(2)
            known = _pairwise_rows(bk)
            good = np.abs(known) >= _SMALL
            fk = np.full(bk.shape, 1.0 / k)
            fk[good] = bk[good] / known[good, None]
            tree.frac[g] = 0.0
            tree.frac[g, :k] = fk
        # the nodes above now route their largest branches' rows through the raised subtrees
        up = tree.parent[raised]
        while up.size:
            up = up[up >= 0]
            self.source[up] = -1
            up = np.unique(tree.parent[up])
        self.prune(raised)


# ----------------------------------------------------------------------------- prediction on dask input
def _proba_block(block, model):
    return model.predict_proba(block)


def _predict_block(block, model):
    return np.asarray(model.predict(block))


class C45Classifier(_LocalC45):
    """C4.5 decision tree (Weka J48 rules) fitted on a Dask cluster: the single-process tree, bit for bit.

    The tree of :class:`gpumine.counting.C45Classifier` on all rows, grown level by level from
    count tables computed on every row partition where it lives and summed with a tree reduce (see
    :mod:`gpumine.distributed._tree`); the split search, collapsing and pruning are the single-process
    ones, run on the client. With whole counts (no sample weights, no value missing in a tested
    attribute) the fitted tree, its distributions and predictions equal one process's bit for bit for
    any partitioning; fractional weights are float64 sums in another order (equal up to rounding).

    Parameters
    ----------
    min_samples_leaf, confidence, max_depth, prune, collapse, subtree_raising, categorical_features, max_bins, \
handle_unknown, representation, device, backend
        As :class:`gpumine.counting.C45Classifier`. ``device`` and ``backend`` are resolved on each
        worker for its counting (a worker's GPU with ``"auto"``) and on the client for the split
        search and prediction. Partitions always count by histogram (every representation gives the
        same counts); ``representations_`` says so.
    client : distributed.Client, default=None
        The cluster to fit on; ``None``: the current client (``distributed.get_client()``).

    Notes
    -----
    Input: a dask array chunked by rows (``y`` and ``sample_weight`` as dask arrays, rechunked to X's
    rows, or NumPy, split to them), a dask DataFrame (``y`` a dask Series with the same partitions, or
    any 1-D input, split by the partitions' lengths), or NumPy / pandas / torch, split into one block
    per worker and scattered.

    Traffic: per depth one round (two with fractional weights) in which every partition sends a table
    of ``(nodes that can split) x (levels of all attributes) x classes``, summed in a tree. The
    encoding sends each partition's distinct values (numeric ones with their counts: the
    equal-frequency cuts are exact order statistics) and labels, merged in a tree.

    Subtree raising with whole counts counts on the partitions: one pass over the rows per pruning
    pass, plus one per raising above or inside the raised subtrees (each returning ``(sum over inner
    nodes of their largest branches' sizes) x classes`` counts). With fractional weights (sample
    weights, or a value missing in a tested attribute) it **gathers** the codes of the tested
    attributes, the labels and the weights on the client (``n x tested attributes`` small integers)
    and runs the single-process pruning there.

    A cut at zero of a numeric column holding both ``0.0`` and ``-0.0`` may print with the other sign
    than one process's (the same number; see :mod:`gpumine.distributed._tree`).

    Attributes
    ----------
    classes_, n_features_in_, feature_names_in_, n_nodes_, n_leaves_, depth_, representations_
        As :class:`gpumine.counting.C45Classifier`.

    Examples
    --------
    >>> import dask.array as da
    >>> import distributed
    >>> import numpy as np
    >>> cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
    ...                                    dashboard_address=":0")
    >>> client = distributed.Client(cluster)
    >>> X = np.array([[0, 1], [1, 1], [2, 0], [3, 0], [4, 1], [5, 0]] * 3, dtype=float)
    >>> y = np.array([0, 0, 1, 1, 1, 1] * 3)
    >>> tree = C45Classifier(min_samples_leaf=1, device="cpu", client=client).fit(da.from_array(X, chunks=5), y)
    >>> print(tree.export_text())
    x0 <= 1: 0 (6.0)
    x0 > 1: 1 (12.0)
    >>> tree.predict(da.from_array(X[:3], chunks=2)).compute().tolist()
    [0, 0, 1]
    >>> client.close(); cluster.close()
    """

    def __init__(self, min_samples_leaf=2, confidence=0.25, max_depth=None, *, prune=True, collapse=True,
                 subtree_raising=True, categorical_features=None, max_bins=256, handle_unknown="error",
                 representation="auto", device="auto", backend="auto", client=None):
        super().__init__(min_samples_leaf=min_samples_leaf, confidence=confidence, max_depth=max_depth, prune=prune,
                         collapse=collapse, subtree_raising=subtree_raising,
                         categorical_features=categorical_features, max_bins=max_bins,
                         handle_unknown=handle_unknown, representation=representation, device=device,
                         backend=backend)
        self.client = client

    def _local_params(self):
        params = self.get_params(deep=False)
        params.pop("client")
        return params

    def __getstate__(self):
        state = super().__getstate__()
        state["client"] = None  # a client does not pickle, and the fitted tree predicts without one
        return state

    # ------------------------------------------------------------------ fit
    def fit(self, X, y, sample_weight=None):
        """Grow (and prune) the tree on the cluster.

        Parameters
        ----------
        X : dask array (chunked by rows) or dask DataFrame, or array-like / DataFrame of shape
            (n_samples, n_features); NaN / None are missing values
        y : dask array or Series, or array-like of shape (n_samples,)
        sample_weight : dask array or Series, or array-like of shape (n_samples,), default=None

        Returns
        -------
        self
        """
        from ..config import resolve_backend, resolve_device

        self._check_params()
        client = _client(self.client)
        self._device = resolve_device(self.device)
        self._backend = resolve_backend(self.backend, self._device)
        self._hist_backend = histogram_backend(self.backend, self._device)
        params = self._local_params()
        inputs = _input_parts(client, X, y, sample_weight)
        parts = [client.submit(_summarize, xb, yb, wb, params, pure=False) for xb, yb, wb in inputs]
        del inputs
        summary = tree_reduce(client, [client.submit(_summary_of, p, pure=False) for p in parts], _merge_summaries)
        if summary is None:
            raise ValueError("Found array with 0 sample(s) while a minimum of 1 is required.")
        if sample_weight is not None and not summary["any_positive"]:
            raise ValueError("Sample weights must contain at least one non-zero number; pass positive weights")
        weighted = sample_weight is not None and not summary["all_one"]
        self.n_features_in_ = summary["d"]
        if summary["feature_names"] is not None:
            self.feature_names_in_ = summary["feature_names"]
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        self.classes_ = summary["classes"]
        n = int(summary["n"])
        self._names = summary["names"] or [f"x{j}" for j in range(summary["d"])]
        self._cols = _merged_columns(summary, int(self.max_bins))
        keep = client.gather([client.submit(_has_rows, p, pure=False) for p in parts])
        shared = client.scatter(self._cols, hash=False)
        parts = [client.submit(_encode, p, shared, self.classes_, weighted, self.device, self.backend, pure=False)
                 for p, k in zip(parts, keep) if k]
        try:
            parts = self._grow_on(client, parts, n, weighted)
            if self.collapse:
                self._collapse(0)
            if self.prune:
                if self.subtree_raising:
                    self._prune_raising_on(client, parts, weighted)
                else:
                    self._prune()
        finally:
            self._row_node = None
            del parts
        self._finalize()
        self._tree.trim()
        return self

    def _grow_on(self, client, parts, n, weighted):
        """Breadth-first growth (as :meth:`gpumine.counting.tree._growth._TreeGrower.grow`) from the partitions'
        summed counts; sets ``_tree`` and ``representations_``, returns the partitions for the pruning."""
        cols = self._cols
        C = len(self.classes_)
        d = len(cols.n_known)
        dev = self._device
        f64 = torch.float64
        offsets = level_offsets(cols.n_levels)
        min_leaf = float(self.min_samples_leaf)
        in_average = torch.as_tensor(_in_average_gain(cols, n), device=dev)
        n_known = np.asarray(cols.n_known, dtype=np.int64)
        nominal = np.asarray(cols.nominal, dtype=bool)
        has_missing = np.asarray(cols.has_missing, dtype=bool)
        max_children = int(max([2] + [cols.n_known[j] for j in range(d) if cols.nominal[j]]))
        tree = _Nodes(C, max_children, capacity=min(n, 1 << 16))
        # the grower's bookkeeping of chosen splits (children, thresholds, missing-value fractions) is reused as is
        grower = _TreeGrower(cols, C, min_leaf=self.min_samples_leaf, max_depth=self.max_depth,
                             representation=self.representation, device=dev, backend=self._backend,
                             hist_backend=self._hist_backend, sibling_subtraction=False,
                             select_splits=self._select_sub)
        self.representations_ = []
        level_nodes = tree.add(np.array([-1]), 0)
        lnf_whole = _LnfTable(n, dev) if not weighted else None
        groups = attribute_groups(cols, offsets, dev)

        def run(plan, n_level, count_plan, want_tot):
            nonlocal parts
            shared = None if plan is None else client.scatter([plan], hash=False)[0]  # one future for the tuple
            parts = [client.submit(_step, p, shared, n_level, count_plan, want_tot, pure=False) for p in parts]
            nbytes = 8 * C * (n_level * (cols.n_levels[0] if fractional else 1)
                               + (0 if count_plan is None else count_plan[2] * offsets[-1]))
            return _summed(client, [client.submit(_step_summary, p, pure=False) for p in parts], _add_step, nbytes)

        plan = None  # the previous depth's splits, until the partitions route their entries by them
        tot_h = None  # the depth's class counts where the previous depth's table gives them
        fractional = weighted  # one process's ``weight is not None``
        depth = 0
        while level_nodes.size:
            n_level = level_nodes.size
            counts = None
            if tot_h is None:
                # the class counts from the partitions; at the root with whole counts, its table in the same round
                root = depth == 0 and not fractional
                tot_h, counts, routed_weight = run(plan, n_level, (np.zeros(1, dtype=np.int64), 1, 1) if root else None,
                                                   True)
                plan = None
                fractional = fractional or routed_weight
            tot = torch.as_tensor(tot_h, device=dev).to(f64)
            if tot.dim() == 3:
                tot = tot.sum(1)
            tot_h = None
            total = tot.sum(1)
            splittable = (total >= 2 * min_leaf - _SMALL) & ((total - tot.max(1).values) > _SMALL)
            if self.max_depth is not None and depth >= self.max_depth:
                splittable = torch.zeros_like(splittable)
            tree.dist[level_nodes] = tot.cpu().numpy()
            split_h = splittable.cpu().numpy()
            n_splittable = int(np.count_nonzero(split_h))
            if n_splittable == 0:
                break
            table_pos_h = np.flatnonzero(split_h)
            if counts is None:
                table_group = np.full(n_level, n_splittable, dtype=np.int64)
                table_group[table_pos_h] = np.arange(n_splittable)
                n_groups = n_splittable + (n_splittable < n_level)
                counts = run(plan, n_level, (table_group, n_groups, n_splittable), False)[1]
                plan = None
            self.representations_.append("histogram")
            counts_h = counts
            counts = torch.as_tensor(counts, device=dev)
            counts = counts.to(f64) if fractional else counts
            table_pos = torch.as_tensor(table_pos_h, device=dev)
            best_s, infos = self._select_sub(counts, tot[table_pos], total[table_pos], offsets, in_average, C,
                                             min_leaf, _lnf if fractional else lnf_whole, groups)
            chosen = chosen_split_details(best_s, infos, groups, max_children)
            details = torch.cat([best_s[:, None].to(f64), chosen], 1).cpu().numpy()
            best_attr = np.full(n_level, -1, dtype=np.int64)
            best_attr[table_pos_h] = details[:, 0].astype(np.int64)
            splitting = np.flatnonzero(best_attr >= 0)
            if splitting.size == 0:
                break
            detail_row = np.full(n_level, -1, dtype=np.int64)
            detail_row[table_pos_h] = np.arange(n_splittable)
            detail_row = detail_row[splitting]
            attrs = best_attr[splitting]
            n_children = np.where(nominal[attrs], n_known[attrs], 2)
            kids = grower._add_children(tree, level_nodes, splitting, detail_row, attrs, n_children, details, depth)
            branch_frac = grower._branch_fractions(tree, level_nodes, splitting, detail_row, attrs, details)
            # the routing tables of the depth, as the single-process growth builds them on its device
            thr = np.zeros(n_level, dtype=np.int64)
            thr[table_pos_h] = chosen[:, 0].to(torch.int64).cpu().numpy()
            best_or_0 = np.maximum(best_attr, 0)
            n_children_all = np.where(best_attr >= 0, np.where(nominal[best_or_0], n_known[best_or_0], 2), 0)
            is_num = (best_attr >= 0) & ~nominal[best_or_0]
            first_child = np.cumsum(n_children_all) - n_children_all
            plan = (best_attr, first_child, thr, is_num, branch_frac, n_children, splitting,
                    bool(has_missing[attrs].any()))
            missing_routed = any(has_missing[j] and counts_h[r, offsets[j] + n_known[j]].any()
                                 for r, j in zip(detail_row.tolist(), attrs.tolist()))
            if not fractional and not missing_routed:
                # whole counts: the children's class counts are rows of their parents' table (a missing value routed
                # would make them fractional), so the next round routes and counts at once
                tot_h = _children_counts(counts_h, detail_row, attrs, details[detail_row, 1].astype(np.int64),
                                         offsets, n_known, nominal)
            level_nodes = kids
            depth += 1
        self._tree = tree
        return [client.submit(_release_growth, p, pure=False) for p in parts]

    def _prune_raising_on(self, client, parts, weighted):
        """J48's pruning with subtree raising: on the partitions' counts with whole counts, else on the gathered
        codes of the tested attributes (see the class docstring)."""
        tree, cols = self._tree, self._cols
        inner = np.flatnonzero(tree.nchild[:tree.n] > 0)
        tested = np.unique(tree.attr[inner]).tolist()
        known_only = not any(cols.has_missing[j] for j in tested)
        if known_only and not weighted:
            C = tree.C

            def query(tables, largest, base, pre, size):
                shared = client.scatter([(tables, largest, base, pre)], hash=False)[0]
                futures = [client.submit(_query_extras, p, shared, size, C, pure=False) for p in parts]
                return _summed(client, futures, _add, 8 * size * C)

            pruner = _CountedRaising(tree, cols, float(self.confidence), left_branch_last_codes(tree, cols), query)
            old = sys.getrecursionlimit()
            sys.setrecursionlimit(max(old, 4 * int(tree.depth[:tree.n].max()) + 200))
            try:
                pruner.prune(np.array([0]))
            finally:
                sys.setrecursionlimit(old)
            recompute_depths(tree)
            return
        # fractional weights: the single-process pruning on the tested attributes' codes, gathered in row order
        used = np.unique(tree.attr[:tree.n][tree.attr[:tree.n] >= 0])
        got = client.gather([client.submit(_tested_columns, p, used, pure=False) for p in parts])
        codes = np.concatenate([g[0] for g in got]) if got else np.zeros((0, used.size), dtype=np.int32)
        labels = np.concatenate([g[1] for g in got])
        w = np.concatenate([g[2] for g in got]) if weighted else None
        position = np.full(len(cols.n_known), -1, dtype=np.int64)
        position[used] = np.arange(used.size)
        sub = types.SimpleNamespace(
            nominal=np.asarray(cols.nominal, dtype=bool)[used], n_known=[cols.n_known[j] for j in used],
            has_missing=[cols.has_missing[j] for j in used], bin_max=[cols.bin_max[j] for j in used])
        has_attr = tree.attr[:tree.n] >= 0
        tree.attr[:tree.n][has_attr] = position[tree.attr[:tree.n][has_attr]]
        try:
            prune_raising(tree, sub, codes, labels, w, float(self.confidence), sort_device=torch.device("cpu"))
        finally:
            has_attr = tree.attr[:tree.n] >= 0
            tree.attr[:tree.n][has_attr] = used[tree.attr[:tree.n][has_attr]]

    # ------------------------------------------------------------------ predict
    def _local_model(self):
        """The fitted tree as a single-process estimator (no client: it travels to the workers)."""
        local = _LocalC45(**self._local_params())
        local.__dict__.update({k: v for k, v in self.__dict__.items() if k not in self.get_params(deep=False)})
        return local

    def _map_rows(self, X, func, dtype, width):
        import dask
        import dask.array as da

        model = dask.delayed(self._local_model(), pure=True)
        if isinstance(X, da.Array):
            if X.ndim != 2:
                raise ValueError(f"X must be 2-D (n_samples, n_features); got a {X.ndim}-D dask array")
            if len(X.chunks[1]) > 1:
                X = X.rechunk({1: -1})
            rows = X.chunks[0]
        else:
            rows = None
        shape = (lambda m: (m,)) if width is None else (lambda m: (m, width))
        blocks = [da.from_delayed(dask.delayed(func)(part, model), shape=shape(rows[i] if rows else np.nan),
                                  dtype=dtype) for i, part in enumerate(row_partitions(X))]
        return da.concatenate(blocks) if blocks else da.zeros(shape(0), dtype=dtype)

    def predict_proba(self, X):
        """Class probabilities ``(n_samples, n_classes)``; a dask ``X`` gives a dask array, computed partition by
        partition where they live."""
        if is_dask(X):
            from sklearn.utils.validation import check_is_fitted

            check_is_fitted(self, "n_nodes_")
            return self._map_rows(X, _proba_block, np.float64, len(self.classes_))
        return super().predict_proba(X)

    def predict(self, X):
        """The most probable class (as the single-process estimator); a dask ``X`` gives a dask array."""
        if is_dask(X):
            from sklearn.utils.validation import check_is_fitted

            check_is_fitted(self, "n_nodes_")
            return self._map_rows(X, _predict_block, self.classes_.dtype, None)
        return super().predict(X)

