"""Growth of the tree: breadth-first, one depth per pass, from batched counts on the device.

All nodes of one depth are counted together: a one-column pass gives every node's class
distribution, and one contingency pass gives, for every node that can still split (not pure,
not too small) x attribute level x class, the (weighted) count -- by AND + popcount of level
bitmaps with node-and-class row bitmaps (``"bitmap"`` / ``"bitslice"``), or by one bincount over
integer codes (``"histogram"``); ``"auto"`` picks per depth by measured cost. The node
partitions (row lists and, for the bitmap path, row bitmaps made by one scatter per depth) stay
on the device, and so does the split search (:mod:`._split_search`). The host looks at each
depth twice: the nodes' class distributions, then the chosen splits; the node tables that route
the rows are built on the device from the latter. While counts are whole numbers (no sample
weights, no missing value routed) the tables stay int64, and on the CPU a child with more rows
than its siblings gets its table as its parent's minus theirs (:func:`_sibling_plan`).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from ...config import working_memory_bytes
from .._bits import pack_codes, pack_groups
from .._ops import (
    and_count_matrix,
    contingency_tables,
    grouped_histogram,
    level_offsets,
    measured_costs,
    representation_costs,
)
from .._store import BitmapStore
from ._estimates import _SMALL
from ._nodes import _Nodes
from ._split_search import _lnf, _LnfTable, attribute_groups, chosen_split_details, numeric_thresholds

#: A child's count table is derived from its parent's when that saves counting at least this many times
#: ``levels x classes / attributes`` rows: the subtraction touches every cell of the table, the count every
#: (row, attribute) entry.
SIBLING_MIN_SAVED = 1.0


def slow_representation_message(representation, device) -> str | None:
    """Why an explicit ``"bitmap"`` / ``"bitslice"`` choice is a poor one on ``device`` (``None`` where it is not):
    on the CPU the AND + popcount passes cost several times (hundreds of times on large tables) what one bincount
    over the codes does, for the same tree."""
    if representation not in ("bitmap", "bitslice") or torch.device(device).type != "cpu":
        return None
    return (f"representation={representation!r} on the CPU counts by AND + popcount, several to hundreds of times "
            "slower than representation='histogram', which grows the same tree; pass representation='auto' (the "
            "faster per depth) or 'histogram'")


def _in_average_gain(columns, n):
    """J48's attributes whose gains make the average gain (``C45ModelSelection``): the numeric ones, and the nominal
    ones with fewer values than 0.3 x the training instances ``n`` unless every nominal one has that many."""
    d = len(columns.n_known)
    all_many_valued = all(columns.n_known[j] >= 0.3 * n for j in range(d) if columns.nominal[j])
    return np.array([(not columns.nominal[j]) or all_many_valued or columns.n_known[j] < 0.3 * n for j in range(d)])


class _TreeGrower:
    """Grows one tree (:meth:`grow`) with the estimator's settings.

    ``select_splits``: the split search, called as ``select_splits(counts, tot, total, offsets,
    in_average, n_classes, min_leaf, lnf, groups)`` (the estimator's ``_select_sub``, so that it
    can be swapped for a reference implementation). ``representations`` collects the
    representation used at each depth that had a node to split.
    """

    def __init__(self, columns, n_classes, *, min_leaf, max_depth, representation, device, backend, hist_backend,
                 sibling_subtraction, select_splits):
        self.columns = columns
        self.n_classes = n_classes
        self.min_leaf = float(min_leaf)
        self.max_depth = max_depth
        self.representation = representation
        self.device = device
        self.backend = backend
        self.hist_backend = hist_backend
        self.sibling_subtraction = sibling_subtraction
        self.select_splits = select_splits
        self.representations = []

    def grow(self, codes, y, w, n):
        """Grow the tree breadth-first, one depth per pass; returns ``(tree, row_node)``.

        ``codes``: ``(n, d)`` level codes on the device, ``y`` class codes, ``w`` sample
        weights or ``None``. ``row_node``: the node of every row at the deepest depth it
        reaches (its leaf), for the pruning; ``None`` where a row was sent down several
        branches (missing values) or weights are fractional.

        The host waits for the device twice per depth: once for the class
        distributions of the depth's nodes (which can split, how many entries each
        holds) and once for the chosen splits with their details; everything else
        (the node tables that route the rows, the compaction of the rows of the nodes
        that split) stays on the device, sized by what the host already knows. The
        histogram of the count table may wait inside ``torch.bincount`` (see
        :func:`gpumine.counting._ops.grouped_histogram`).
        """
        slow = slow_representation_message(self.representation, self.device)
        if slow is not None:
            warnings.warn(slow, UserWarning, stacklevel=4)
        dev = self.device
        cols = self.columns
        C = self.n_classes
        d = codes.shape[1]
        offsets = level_offsets(cols.n_levels)
        n_levels = cols.n_levels
        min_leaf = self.min_leaf
        in_average = torch.as_tensor(_in_average_gain(cols, n), device=dev)
        n_known = np.asarray(cols.n_known, dtype=np.int64)
        nominal = np.asarray(cols.nominal, dtype=bool)
        has_missing = np.asarray(cols.has_missing, dtype=bool)
        max_children = int(max([2] + [cols.n_known[j] for j in range(d) if cols.nominal[j]]))
        # a generous first capacity: a large training set grows a large tree, and growing the arrays copies them
        tree = _Nodes(C, max_children, capacity=n)
        # per-attribute constants on the device: the routing tables of a depth are built there from the chosen splits
        n_known_t = torch.as_tensor(n_known, device=dev)
        nominal_t = torch.as_tensor(nominal, device=dev)
        # the entries of the current depth: row, node (as its position in the depth) and weight (None: all 1)
        rows = torch.arange(n, device=dev)
        group = torch.zeros(n, dtype=torch.int64, device=dev)
        weight = w
        level_nodes = tree.add(np.array([-1]), 0)
        self._store = None
        self._class_bits = None
        depth = 0
        # while counts are whole numbers (no sample weights, no missing value routed) the count tables stay int64 and
        # x log x is a table lookup
        lnf_whole = _LnfTable(n, dev) if w is None else None
        groups = attribute_groups(cols, offsets, dev)
        # the node of every row at the deepest depth it reaches (its leaf), for the pruning; it names one node per
        # row only while no row has been sent down several branches (missing values)
        row_node = torch.zeros(n, dtype=torch.int64, device=dev) if w is None else None
        row_copied = False
        prev = None  # (count table, first child, number of children, table row) of the previous depth's splits
        while level_nodes.size:
            n_level = level_nodes.size
            first_id = int(level_nodes[0])  # the nodes of a depth have consecutive ids
            if row_node is not None and not row_copied:
                row_node[rows] = group + first_id
            # the class distribution of every node first (one count over the entries): most nodes of a deep level
            # are leaves (pure or too small), and the full node x level x class table is counted only for the others
            if weight is None:
                tot = _bincount(group * C + y[rows], n_level * C).reshape(n_level, C).to(torch.float64)
                node_entries = None  # the entries of a node are its (whole) total
            else:
                tot = grouped_histogram(codes[:, :1], n_levels[:1], y, C, rows, group, n_level, weight,
                                        backend=self.hist_backend).to(torch.float64).sum(1)
                node_entries = _bincount(group, n_level).to(torch.float64)
            total = tot.sum(1)
            splittable = (total >= 2 * min_leaf - _SMALL) & ((total - tot.max(1).values) > _SMALL)
            if self.max_depth is not None and depth >= self.max_depth:
                splittable = torch.zeros_like(splittable)
            # the host's one look at the depth before the split search
            view = [tot, splittable[:, None].to(torch.float64)]
            if node_entries is not None:
                view.append(node_entries[:, None])
            host = torch.cat(view, 1).cpu().numpy()
            tree.dist[level_nodes] = host[:, :C]
            split_h = host[:, C] > 0
            entries_h = host[:, C + 1] if node_entries is not None else host[:, :C].sum(1)
            n_splittable = int(np.count_nonzero(split_h))
            if n_splittable == 0:
                break
            counts, table_pos, table_pos_h, in_order = self._count_tables(
                codes, y, rows, group, weight, splittable, split_h, entries_h, prev, n, offsets)
            # counts: (splittable nodes, L, C) weighted counts of node x attribute level x class (int64 while whole)
            counts = counts[:n_splittable] if weight is None else counts[:n_splittable].to(torch.float64)
            best_s, infos = self.select_splits(counts, tot[table_pos], total[table_pos], offsets, in_average, C,
                                               min_leaf, _lnf if weight is not None else lnf_whole, groups)
            chosen = chosen_split_details(best_s, infos, groups, max_children)
            # the host's second look: the chosen attribute of every splittable node and its split's details
            details = torch.cat([best_s[:, None].to(torch.float64), chosen], 1).cpu().numpy()
            best_attr = np.full(n_level, -1, dtype=np.int64)
            best_attr[table_pos_h] = details[:, 0].astype(np.int64)
            splitting = np.flatnonzero(best_attr >= 0)  # positions in the depth of the nodes that split
            if splitting.size == 0:
                break
            detail_row = np.full(n_level, -1, dtype=np.int64)
            detail_row[table_pos_h] = np.arange(n_splittable)
            detail_row = detail_row[splitting]
            attrs = best_attr[splitting]
            n_children = np.where(nominal[attrs], n_known[attrs], 2)
            kids = self._add_children(tree, level_nodes, splitting, detail_row, attrs, n_children, details, depth)
            branch_frac = self._branch_fractions(tree, level_nodes, splitting, detail_row, attrs, details)
            # the routing tables of the depth, built on the device from the chosen splits (as the host's above)
            thr = chosen[:, 0].to(torch.int64)
            if in_order:
                best = best_s  # the table holds every node, in order
            else:
                best = torch.full((n_level,), -1, dtype=torch.int64, device=dev).index_copy_(0, table_pos, best_s)
                thr = torch.zeros(n_level, dtype=torch.int64, device=dev).index_copy_(0, table_pos, thr)
            best_or_0 = best.clamp_min(0)
            n_children_t = torch.where(best >= 0, torch.where(nominal_t[best_or_0], n_known_t[best_or_0], 2), 0)
            is_num = (best >= 0) & ~nominal_t[best_or_0]
            missing = bool(has_missing[attrs].any())
            first_child = torch.cumsum(n_children_t, 0) - n_children_t
            rows, group, weight = self._route(codes, rows, group, weight, best, first_child, thr, is_num,
                                              int(entries_h[splitting].sum()), missing, branch_frac, n_children,
                                              splitting)
            row_copied |= missing
            # the next depth may derive a child's table from this one (its rows are then split exactly among the
            # children)
            prev = None
            if self.sibling_subtraction and weight is None and not missing:
                prev = (counts, np.cumsum(n_children) - n_children, n_children, detail_row)
            # children without entries are empty leaves: they stay in the next depth, where they do not split
            level_nodes = kids
            depth += 1
        self._store = self._class_bits = None
        return tree, (row_node if row_node is not None and not row_copied else None)

    def _count_tables(self, codes, y, rows, group, weight, splittable, split_h, entries_h, prev, n, offsets):
        """The count table of the depth's splittable nodes: ``(counts, table_pos, table_pos_h, in_order)``,
        ``counts`` of shape ``(groups, L, C)`` whose first rows are the splittable nodes at positions ``table_pos_h``
        (host) / ``table_pos`` (device) of the depth, in that order (``in_order``: all nodes of the depth, in
        order); the other groups are dropped. A node's table is derived as its parent's minus its siblings' where
        :func:`_sibling_plan` finds that cheaper than counting it."""
        dev = self.device
        C = self.n_classes
        d = codes.shape[1]
        n_level = split_h.size
        n_splittable = int(np.count_nonzero(split_h))
        table_pos_h = np.flatnonzero(split_h)
        plan = None
        if prev is not None:
            plan = _sibling_plan(split_h, entries_h, *prev[1:], min_saved=SIBLING_MIN_SAVED * offsets[-1] * C / d)
        if plan is not None:
            rep = self._pick_representation(plan["entries"], n, d, plan["n_groups"], C, False)
            if rep != "histogram":  # bitmap passes cost per row set, derived or not
                plan = None
        if plan is not None:
            # the nodes in table order (counted ones first, then derived ones); rows of the others to a dropped group
            table_pos_h = plan["order"]
            table_pos = torch.as_tensor(table_pos_h, device=dev)
            group_s = torch.as_tensor(plan["group"], device=dev)[group]
            n_groups = plan["n_groups"]
            keep = group_s < n_groups - 1
            rows_c, group_s = _compact(keep, torch.cumsum(keep, 0) - 1, plan["entries"], rows, group_s)
        else:
            if n_splittable < n_level:
                # the entries of the other nodes are counted into one extra group (n_splittable) that is dropped: no
                # compaction
                slot = torch.cumsum(splittable, 0) - 1
                table_pos = _compact(splittable, slot, n_splittable, torch.arange(n_level, device=dev))
                group_s = torch.where(splittable[group], slot[group], n_splittable)
            else:
                table_pos, group_s = torch.arange(n_level, device=dev), group
            n_groups = n_splittable + (n_splittable < n_level)
            rep = self._pick_representation(rows.shape[0], n, d, n_groups, C, weight is not None)
        self.representations.append(rep)
        if rep == "histogram":
            counts = grouped_histogram(codes, self.columns.n_levels, y, C, rows if plan is None else rows_c, group_s,
                                       n_groups, weight, backend=self.hist_backend)
        else:
            if self._store is None:
                self._store = BitmapStore.from_codes(codes, self.columns.n_levels)
                if rep == "bitslice":
                    self._store = self._store.to_bitslice()
                self._class_bits = pack_codes(y, C)
            counts = self._bitmap_counts(self._store, self._class_bits, rows, group_s, n_groups, C, n)
        if plan is not None:
            # a derived node's table: its parent's minus its siblings' (whole counts: exact)
            n1, nD = plan["n_counted"], plan["parent"].size
            derived = counts[n1:n1 + nD]
            derived.copy_(prev[0][torch.as_tensor(plan["parent"], device=dev)])
            derived.index_add_(0, torch.as_tensor(plan["sib_of"], device=dev),
                               counts[torch.as_tensor(plan["sib_group"], device=dev)], alpha=-1)
        return counts, table_pos, table_pos_h, plan is None and n_splittable == n_level

    def _add_children(self, tree, level_nodes, splitting, detail_row, attrs, n_children, details, depth):
        """Record the chosen splits of the depth's nodes at positions ``splitting`` in ``tree`` and add their
        children (at ``depth + 1``); returns the children's ids."""
        n_before = tree.n
        parents = level_nodes[splitting]
        kids = tree.add(np.repeat(parents, n_children), depth + 1)
        tree.attr[parents] = attrs
        tree.first[parents] = n_before + np.cumsum(n_children) - n_children
        tree.nchild[parents] = n_children
        for j in np.unique(attrs):
            if not self.columns.nominal[j]:
                m = attrs == j
                at, rows = level_nodes[splitting[m]], detail_row[m]
                last_left = details[rows, 1].astype(np.int64)
                tree.thrc[at] = last_left
                tree.thr[at] = numeric_thresholds(self.columns, j, last_left, details[rows, 2].astype(np.int64))
        return kids

    def _branch_fractions(self, tree, level_nodes, splitting, detail_row, attrs, details):
        """Each splitting node's branches' shares of its known weight (where missing values go; even shares without
        known weight), written to ``tree.frac`` and returned as a ``(depth's nodes, max_children)`` table."""
        n_known, nominal = self.columns.n_known, self.columns.nominal
        branch_frac = np.zeros((level_nodes.size, tree.maxk))
        for j in np.unique(attrs):
            m = attrs == j
            at, rows = splitting[m], detail_row[m]
            bags = details[rows, 3:3 + (n_known[j] if nominal[j] else 2)]
            known = bags.sum(1, keepdims=True)
            frac = np.where(known > 0, bags / np.where(known > 0, known, 1), 1.0 / bags.shape[1])
            branch_frac[at, :bags.shape[1]] = frac
            tree.frac[level_nodes[at], :bags.shape[1]] = frac
        return branch_frac

    def _pick_representation(self, n_entries, n, d, n_groups, C, weighted):
        """The count table's representation at this depth: fractional weights count by histogram; ``"auto"`` takes
        the cheaper by the measured costs."""
        rep = self.representation
        if weighted:
            return "histogram"
        if rep != "auto":
            return rep
        c = measured_costs(self.device, self.backend, self.hist_backend)
        # the node bitmaps of this depth are packed in any case (one scatter of n_entries); the store only once
        est = representation_costs(n, self.columns.n_levels, n_groups * C, n_entries=n_entries,
                                   store_built=self._store is not None, costs=c)
        est["bitmap"] += c["pack"] * n_entries
        return "bitmap" if est["bitmap"] < est["histogram"] else "histogram"

    def _bitmap_counts(self, store, class_bits, rows, group, n_groups, C, n):
        """``(n_groups, L, C)`` int64 counts by AND + popcount of the level bitmaps with node-and-class row bitmaps."""
        masks = pack_groups(group, n_groups, n, rows=rows)  # node existential bitmaps, one scatter
        nw = masks.shape[1]
        L = sum(store.n_levels)
        out = torch.zeros(n_groups, L, C, dtype=torch.int64, device=masks.device)
        # node-and-class bitmaps in chunks of nodes that fit the working memory
        chunk = max(1, working_memory_bytes(None, masks.device) // (8 * 4 * max(1, C * nw)))
        for g0 in range(0, n_groups, chunk):
            node_class = (masks[g0:g0 + chunk, None, :] & class_bits[None, :, :]).reshape(-1, nw)
            if isinstance(store, BitmapStore):
                counted = and_count_matrix(store.words, node_class, backend=self.backend)
            else:
                counted = contingency_tables(store, node_class, backend=self.backend)
            out[g0:g0 + chunk] = counted.reshape(L, -1, C).permute(1, 0, 2)
        return out

    def _route(self, codes, rows, group, weight, best, child_base, thr, is_num, n_keep, missing, branch_frac,
               n_children, splitting):
        """The entries of the next depth: the rows of the nodes that split, each in its branch's child.

        ``best``, ``child_base`` (index of a node's first child in the next depth),
        ``thr`` and ``is_num`` are per-node device tables; ``n_keep`` is the number of
        entries of the nodes that split (the host knows it), so the compaction needs no
        wait for the device. ``missing``: a chosen attribute has missing values, which
        go down every branch with weight times the branch's share of the known weight
        (``branch_frac``, host) -- the only path that waits (for whether any entry is missing).
        """
        dev = codes.device
        keep = best[group] >= 0
        pos = torch.cumsum(keep, 0) - 1
        if weight is None:
            rows, group = _compact(keep, pos, n_keep, rows, group)
        else:
            rows, group, weight = _compact(keep, pos, n_keep, rows, group, weight)
        if rows.numel() == 0:
            return rows, group, weight
        attr = best[group]
        code = codes[rows, attr].to(torch.int64)
        branch = torch.where(is_num[group], (code > thr[group]).to(torch.int64), code)
        new_group = child_base[group] + branch
        if not missing:
            return rows, new_group, weight
        miss = code >= torch.as_tensor(np.asarray(self.columns.n_known, dtype=np.int64), device=dev)[attr]
        if not bool(miss.any()):
            return rows, new_group, weight
        # missing values: one entry per branch, weight times the branch's share of the known weight
        n_child = np.zeros(branch_frac.shape[0], dtype=np.int64)
        n_child[splitting] = n_children
        frac_t = torch.as_tensor(branch_frac, device=dev)
        w = weight if weight is not None else torch.ones(rows.shape[0], dtype=torch.float64, device=dev)
        kr, kg, kw = rows[~miss], new_group[~miss], w[~miss]
        mr, mg, mw = rows[miss], group[miss], w[miss]
        nb = torch.as_tensor(n_child, device=dev)[mg]
        rep_r = torch.repeat_interleave(mr, nb)
        rep_g = torch.repeat_interleave(mg, nb)
        starts = torch.cumsum(nb, 0) - nb
        b = torch.arange(rep_r.shape[0], device=dev) - torch.repeat_interleave(starts, nb)
        rep_w = torch.repeat_interleave(mw, nb) * frac_t[rep_g, b]
        rep_new = child_base[rep_g] + b
        pos = rep_w > 0
        rows = torch.cat([kr, rep_r[pos]])
        group = torch.cat([kg, rep_new[pos]])
        weight = torch.cat([kw, rep_w[pos]])
        return rows, group, weight


def _bincount(index, size):
    """``torch.bincount(index, minlength=size)`` for indices below ``size``, without waiting for the device.

    On a CUDA device ``torch.bincount`` reads the minimum and maximum back to the
    host (two waits per call); a scatter-add into a zeroed table of the known size
    gives the same int64 counts without them. On the CPU, bincount is the faster.
    """
    if index.device.type == "cpu":
        return torch.bincount(index, minlength=size)
    return torch.zeros(size, dtype=torch.int64, device=index.device).scatter_add_(0, index, torch.ones_like(index))


def _compact(mask, pos, m, *tensors):
    """``t[mask]`` for each of ``tensors``, in order, when the host knows ``m = mask.sum()``.

    ``pos`` is ``cumsum(mask) - 1``. Boolean indexing waits for the device to learn
    the size; a scatter to the known positions (the others to a spare slot that is
    dropped) does not. Returns one tensor, or a tuple for several.
    """
    target = torch.where(mask, pos, m)
    out = tuple(torch.empty(m + 1, dtype=t.dtype, device=t.device).scatter_(0, target, t)[:m] for t in tensors)
    return out[0] if len(out) == 1 else out


def _sibling_plan(split, entries, starts, ks, parent_row, min_saved=0.0):
    """Which nodes of a depth to count and which to derive as their parent's count table minus their siblings'.

    The depth's nodes are the children of the previous depth's splits: ``ks[p]`` of them from
    ``starts[p]`` for split ``p``, whose table is row ``parent_row[p]`` of the previous table, and
    together they hold exactly their parent's rows (whole counts, no missing value routed).
    ``split``: which nodes can split; ``entries``: their rows. Per parent, the splittable child
    with the most rows (the first such) is derived when its siblings hold fewer rows than it, so
    that counting them is cheaper than counting it; its siblings with rows are then counted too.

    Returns ``None`` when no table is derived, else a dict: ``order`` (the splittable nodes in table
    order, counted ones then derived ones), ``group`` (histogram group of every node: counted
    splittable ones first, then room for the derived tables, then the counted siblings that cannot
    split; all other rows to the last, dropped group), ``n_groups``, ``n_counted`` (splittable and
    counted), ``parent`` (previous table row of each derived node), ``sib_of`` / ``sib_group`` (each
    derived node's counted siblings) and ``entries`` (the rows counted).
    """
    G = split.size
    par = np.repeat(np.arange(ks.size), ks)
    val = np.where(split, entries, -1.0)
    most = np.maximum.reduceat(val, starts)
    first = np.minimum.reduceat(np.where(val == most[par], np.arange(G), G), starts)
    derive = most - np.add.reduceat(np.where(split, 0.0, entries), starts) > max(min_saved, 0.0)
    if not derive.any():
        return None
    D = first[derive]
    is_d = np.zeros(G, dtype=bool)
    is_d[D] = True
    counted = ~is_d & (split | (derive[par] & (entries > 0)))
    cs, helper = counted & split, counted & ~split
    n1, nD, nH = int(cs.sum()), int(D.size), int(helper.sum())
    group = np.full(G, n1 + nD + nH, dtype=np.int64)
    group[cs] = np.arange(n1)
    group[helper] = n1 + nD + np.arange(nH)
    sib = np.flatnonzero(counted & derive[par])
    owner = np.full(ks.size, -1, dtype=np.int64)
    owner[derive] = np.arange(nD)
    return {"order": np.concatenate([np.flatnonzero(cs), D]), "group": group, "n_groups": n1 + nD + nH + 1,
            "n_counted": n1, "parent": np.asarray(parent_row)[derive], "sib_of": owner[par[sib]],
            "sib_group": group[sib], "entries": int(entries[counted].sum())}
