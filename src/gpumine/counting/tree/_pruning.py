"""Pruning of a grown tree, as J48 does it: collapsing, then pessimistic (error-based) pruning.

* :func:`collapse`: a subtree whose leaves make no fewer training errors than the node becomes a leaf.
* :func:`prune_replacement`: subtree replacement only (``J48 -S``): a node becomes a leaf when its
  estimated errors as a leaf are within 0.1 of its subtree's.
* :func:`prune_raising`: subtree replacement and raising (J48's default), on the training data: a node
  may also be replaced by its largest branch, the training instances of the other branches
  re-distributed into it. Two algorithms, the same trees bit for bit: :func:`prune_raising_routed`
  (any data: routed instances with fractional weights) and, for whole counts with every row on one
  path, :func:`gpumine.counting.tree._pruning_whole.prune_raising_whole`.

All of them change the tree in place (``nchild`` 0 makes a leaf; a raised node takes its largest
branch's test and children) and are vectorised over the nodes, keeping the arithmetic of J48's
node-by-node recursion to the bit (sums in branch order, estimates as :func:`add_errors`).
"""

from __future__ import annotations

import sys

import numpy as np

from ._estimates import _SMALL, SUBTREE_MARGIN, _pairwise_rows, exact_estimated_errors, prune_decision
from ._nodes import _branch_sums, recompute_depths, subtree_heights, subtree_levels
from ._pruning_whole import prune_raising_whole


def collapse(tree, root=0):
    """J48's collapse: a subtree whose leaves make no fewer training errors (within 1e-3) than the node becomes a leaf.

    Level by level: the subtrees' errors bottom-up (each the sum of its branches' in
    branch order, as the recursion adds them), then the decisions top-down, where a
    collapsed node's descendants are no longer visited.
    """
    err = tree.errors()
    levels = tree.levels(root)
    sub = err.copy()
    for level in reversed(levels):
        parents = level[tree.nchild[level] > 0]
        if parents.size:
            sub[parents] = _branch_sums(tree, parents, sub)
    frontier = levels[0]
    while frontier.size:
        parents = frontier[tree.nchild[frontier] > 0]
        done = sub[parents] >= err[parents] - 1e-3
        tree.nchild[parents[done]] = 0
        frontier = tree.children(parents[~done])


def prune_replacement(tree, confidence):
    """Pessimistic subtree replacement (``J48 -S``), bottom-up level by level; sums in branch order.

    A node becomes a leaf when its estimated errors as a leaf are at most its subtree's (the sum of its
    branches', each already pruned) plus :data:`SUBTREE_MARGIN`.
    """
    est = tree.estimated_errors(float(confidence))
    levels = tree.levels(0)
    est_sub = est.copy()
    for level in reversed(levels):
        parents = level[tree.nchild[level] > 0]
        if not parents.size:
            continue
        subtree = _branch_sums(tree, parents, est_sub)
        leaf = est[parents] <= subtree + SUBTREE_MARGIN + _SMALL
        tree.nchild[parents[leaf]] = 0
        est_sub[parents] = np.where(leaf, est[parents], subtree)


def left_branch_last_codes(tree, columns):
    """Per node of a numeric split, the last level code of the left branch at its real threshold (as J48's
    ``C45Split`` compares instances routed from elsewhere with the cut value, which may lie beyond the node's own
    values); -1 elsewhere."""
    n_nodes = tree.n
    nominal = np.asarray(columns.nominal, dtype=bool)
    out = np.full(n_nodes, -1, dtype=np.int64)
    inner = np.flatnonzero(tree.nchild[:n_nodes] > 0)
    for j in np.unique(tree.attr[inner]):
        if nominal[j]:
            continue
        sel = inner[tree.attr[inner] == j]
        bmax = columns.bin_max[int(j)]
        out[sel] = np.maximum(tree.thrc[sel], np.searchsorted(bmax, tree.thr[sel], side="right") - 1)
    return out


def prune_raising(tree, columns, codes, y, sample_weight, confidence, *, row_node=None, sort_device=None):
    """J48's pessimistic pruning with subtree raising (``C45PruneableClassifierTree.prune``), in place.

    Bottom-up: after its children are pruned, a node becomes a leaf when the
    leaf's estimated errors are within 0.1 of both the subtree's and those of
    its largest branch (the most weight, the last such on ties) with all of the
    node's training instances routed through it; otherwise, when the largest
    branch is within 0.1 of the subtree, that branch replaces the node, the
    class distributions (and missing-value fractions) of the raised subtree are
    recomputed from the node's instances, and the node is pruned again.
    Training instances of a node are rebuilt by routing its parent's, with
    fractional weights for missing values (split fractions from the routed
    instances' known values, as Weka's ``resetDistribution``).

    Parameters
    ----------
    tree : _Nodes
        The grown (and collapsed) tree; its ``dist`` are the training class distributions.
    columns : _Columns
        The training data's encoding (``n_known``, ``nominal``, ``has_missing``, ``bin_max``).
    codes : ndarray of shape (n_samples, n_features)
        The training data's level codes (code ``n_known[j]``: missing).
    y : ndarray of shape (n_samples,)
        Class codes.
    sample_weight : ndarray of shape (n_samples,) or None
    confidence : float
        The confidence factor of the error estimates.
    row_node : tensor of shape (n_samples,), optional
        The growth's deepest node of every row; spares routing the rows to their leaves.
    sort_device : torch device, optional
        Where the whole-count path sorts the rows by leaf (a GPU sorts faster).

    Without sample weights and with no value missing in a tested attribute every row takes one
    path and every count is whole: :func:`prune_raising_whole` then works on ranges of rows sorted
    by leaf. Otherwise :func:`prune_raising_routed` routes weighted entries.
    """
    codes = np.asarray(codes)
    labels = np.asarray(y).astype(np.int64, copy=False)
    left_last_code = left_branch_last_codes(tree, columns)
    inner = np.flatnonzero(tree.nchild[:tree.n] > 0)
    # no value missing in the attributes tested: every row takes one path
    known_only = not any(columns.has_missing[j] for j in np.unique(tree.attr[inner]).tolist())
    if known_only and sample_weight is None:
        prune_raising_whole(tree, columns, codes, labels, float(confidence), left_last_code, row_node=row_node,
                            sort_device=sort_device)
    else:
        n = labels.shape[0]
        weights = np.ones(n) if sample_weight is None else np.asarray(sample_weight).astype(np.float64)
        prune_raising_routed(tree, columns, codes, labels, weights, float(confidence), left_last_code, known_only)
    # raising moves subtrees up
    recompute_depths(tree)


def prune_raising_routed(tree, columns, codes, labels, weights, confidence, left_last_code, known_only):
    """:func:`prune_raising` for any data, by entries (row, node, weight) routed down the tree; in place.

    Vectorised, with the arithmetic of the node-by-node recursion kept to the bit: the instances of
    every node are routed once, top-down, as (row, node, weight) entries; the nodes are then decided
    in batches of equal height (disjoint subtrees, children first), the largest branches' estimates
    of all nodes of a batch coming from one level-by-level routing of their instances. Within a
    node, entries keep the recursion's order (known values first, then the missing ones, each in the
    parent's order), so every weighted count is summed in the same order; sums of estimates over
    branches are nested as in the recursion. ``left_last_code``: see :func:`left_branch_last_codes`
    (updated where raising moves a test); ``known_only``: no value is missing in a tested attribute
    (each row's leaf is then tracked, and only the rows outside a largest branch are routed).
    """
    pruner = _RoutedRaising(tree, columns, codes, labels, confidence, left_last_code, known_only)
    # a raised subtree is pruned again by recursion, at most once per level of the tree
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 4 * int(tree.depth[:tree.n].max()) + 200))
    try:
        n = labels.shape[0]
        pruner.prune(np.array([0]), np.arange(n), weights, np.zeros(n, dtype=np.int64), False)
    finally:
        sys.setrecursionlimit(old)


def _largest_branch(tree, nodes, branch_weights):
    """Weka's ``Distribution.maxBag`` of each of ``nodes``: the last branch within 1e-6 of the running maximum of
    its ``branch_weights`` (rows)."""
    k = tree.nchild[nodes]
    largest = np.full(nodes.size, -1, dtype=np.int64)
    most = np.zeros(nodes.size)
    for b in range(int(k.max()) if nodes.size else 0):
        weight = branch_weights[:, b]
        m = (b < k) & (weight - most > -_SMALL)
        largest[m] = b
        most[m] = weight[m]
    return largest


class _RoutedRaising:
    """The state of one :func:`prune_raising_routed`: the tree, the training data and per-node tables."""

    def __init__(self, tree, columns, codes, labels, confidence, left_last_code, known_only):
        n_nodes = tree.n
        self.tree = tree
        self.confidence = confidence
        self.n_classes = tree.C
        self.n_nodes = n_nodes
        self.max_children = tree.maxk
        self.n_known = np.asarray(columns.n_known, dtype=np.int64)
        self.nominal = np.asarray(columns.nominal, dtype=bool)
        self.codes = codes
        self.n_attrs = codes.shape[1]
        self.codes_flat = codes.reshape(-1)
        self.labels = labels
        self.left_last_code = left_last_code
        self.known_only = known_only
        # with no value missing: the leaf every row ends in
        self.leaf_of_row = np.zeros(labels.shape[0], dtype=np.int64)
        # estimated errors of a finished subtree (J48's getEstimatedErrors)
        self.subtree_estimate = np.zeros(n_nodes)
        # where a node's routed entries are: which level of entries, the first and how many
        self.entries_level = np.zeros(n_nodes, dtype=np.int64)
        self.entries_start = np.zeros(n_nodes, dtype=np.int64)
        self.entries_count = np.zeros(n_nodes, dtype=np.int64)
        # scratch: each node's position in the set being worked on
        self.slot = np.zeros(n_nodes, dtype=np.int64)
        # the branches' weights (Weka's perBag, missing values spread)
        self.branch_weights = np.zeros((n_nodes, tree.maxk))

    def _estimate(self, dist):
        return exact_estimated_errors(dist, self.confidence)

    def _unique(self, nodes):
        """``np.unique(nodes)``, by flags where that is faster."""
        if nodes.size * 8 < self.n_nodes:
            return np.unique(nodes)
        flag = np.zeros(self.n_nodes, dtype=bool)
        flag[nodes] = True
        return np.flatnonzero(flag)

    def _split(self, rows, nodes, weights, parents, want_bags):
        """Route entries at inner nodes (all of ``parents``, sorted unique) one level down.

        Returns the children's entries (known values first, then the missing ones with
        weight times the branch fraction, each in the given order) and, when asked or
        when values are missing, the per-node bags ``(|parents|, maxk + 1)`` and fractions.
        """
        tree = self.tree
        a = tree.attr[nodes]
        c = self.codes[rows, a].astype(np.int64)
        miss = c >= self.n_known[a]
        branch = np.where(self.nominal[a], c, c > self.left_last_code[nodes])
        any_missing = bool(miss.any())
        if not any_missing and not want_bags:
            return rows, tree.first[nodes] + branch, weights, None, None
        n_children = tree.nchild[parents]
        self.slot[parents] = np.arange(parents.size)
        slot = self.slot[nodes]
        branch = np.where(miss, n_children[slot], branch)  # the missing values' own bag, after the branches
        width = self.max_children + 1
        bags = np.bincount(slot * width + branch, weights, minlength=parents.size * width).reshape(parents.size, width)
        frac = np.zeros((parents.size, self.max_children))
        for k in np.unique(n_children):
            g = np.flatnonzero(n_children == k)
            bk = bags[g, :k]
            known = _pairwise_rows(bk)
            good = np.abs(known) >= _SMALL
            fk = np.full(bk.shape, 1.0 / k)
            fk[good] = bk[good] / known[good, None]
            frac[g, :k] = fk
        if not any_missing:
            return rows, tree.first[nodes] + branch, weights, bags, frac
        keep = ~miss
        mi = np.flatnonzero(miss)
        F = frac[slot[mi]]
        qi, bi = np.nonzero(F > _SMALL)
        mr = rows[mi][qi]
        mc = tree.first[nodes[mi]][qi] + bi
        mw = weights[mi][qi] * F[qi, bi]
        return (np.concatenate([rows[keep], mr]), np.concatenate([(tree.first[nodes] + branch)[keep], mc]),
                np.concatenate([weights[keep], mw]), bags, frac)

    def _estimate_branches(self, starts, rows, weights):
        """Estimated errors of the subtrees at ``starts`` (disjoint) with the given entries routed down them."""
        tree, C = self.tree, self.n_classes
        val = np.zeros(self.n_nodes)
        nodes = starts
        steps, reached, dists = [], [], []
        while rows.size:
            leaf = tree.nchild[nodes] == 0
            if leaf.any():
                at_leaf = nodes[leaf]
                leaves = self._unique(at_leaf)
                self.slot[leaves] = np.arange(leaves.size)
                reached.append(leaves)
                dists.append(np.bincount(self.slot[at_leaf] * C + self.labels[rows[leaf]], weights[leaf],
                                         minlength=leaves.size * C).reshape(leaves.size, C))
                inner = ~leaf
                rows, nodes, weights = rows[inner], nodes[inner], weights[inner]
                if not rows.size:
                    break
            parents = self._unique(nodes)
            steps.append(parents)
            rows, nodes, weights, _, _ = self._split(rows, nodes, weights, parents, False)
        if reached:
            val[np.concatenate(reached)] = self._estimate(np.concatenate(dists))
        for parents in reversed(steps):
            val[parents] = _branch_sums(tree, parents, val)
        return val

    def _estimate_branches_known(self, nodes, largest_node, largest, rows, weights, owner):
        """:meth:`_estimate_branches` when no value is missing: the rows that went to the largest branch end in
        their current leaf; only the others are routed; the leaf counts are summed in the node's order."""
        tree, C, d = self.tree, self.n_classes, self.n_attrs
        nominal, left_last_code = self.nominal, self.left_last_code
        val = np.zeros(self.n_nodes)
        if not rows.size:
            return val
        a = tree.attr[nodes][owner]
        c = self.codes_flat[rows * d + a]
        branch = np.where(nominal[a], c, c > left_last_code[nodes][owner])
        own = branch == largest[owner]
        leaf_id = np.empty(rows.size, dtype=np.int64)
        leaf_id[own] = self.leaf_of_row[rows[own]]
        pos = np.flatnonzero(~own)
        rr, nd = rows[pos], largest_node[owner[pos]]
        while pos.size:
            leaf = tree.nchild[nd] == 0
            if leaf.any():
                leaf_id[pos[leaf]] = nd[leaf]
                inner = ~leaf
                pos, rr, nd = pos[inner], rr[inner], nd[inner]
                if not pos.size:
                    break
            a = tree.attr[nd]
            c = self.codes_flat[rr * d + a]
            nd = tree.first[nd] + np.where(nominal[a], c, c > left_last_code[nd])
        leaves = self._unique(leaf_id)
        self.slot[leaves] = np.arange(leaves.size)
        val[leaves] = self._estimate(np.bincount(self.slot[leaf_id] * C + self.labels[rows], weights,
                                                 minlength=leaves.size * C).reshape(leaves.size, C))
        # nested sums over the current subtrees (nodes no entry reached count 0, as in the recursion)
        levels = [largest_node[tree.nchild[largest_node] > 0]]
        while levels[-1].size:
            kids = tree.children(levels[-1])
            levels.append(kids[tree.nchild[kids] > 0])
        for parents in reversed(levels[:-1]):
            val[parents] = _branch_sums(tree, parents, val)
        return val

    def _entries_of(self, nodes, levels):
        """The routed entries of ``nodes`` (each node's in its order) and their owners' positions in ``nodes``."""
        rows, weights, owners = [], [], []
        level_of = self.entries_level[nodes]
        for level in np.unique(level_of):
            g = np.flatnonzero(level_of == level)
            start, count = self.entries_start[nodes[g]], self.entries_count[nodes[g]]
            total = int(count.sum())
            if not total:
                continue
            idx = np.repeat(start - np.cumsum(count) + count, count) + np.arange(total)
            rows.append(levels[level][0][idx])
            weights.append(levels[level][1][idx])
            owners.append(np.repeat(g, count))
        if not rows:
            return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64)
        return np.concatenate(rows), np.concatenate(weights), np.concatenate(owners)

    def _route_entries(self, levels, nodes, inner, rows, start, weights, reset):
        """Every node's entries, top-down, grouped by node in the recursion's order: ``levels`` gets one
        ``(rows, weights)`` per depth, and each inner node where its entries are there; its branches' weights go to
        ``branch_weights``. ``reset``: each node's class distribution (and fractions) from its entries."""
        tree, C, max_children = self.tree, self.n_classes, self.max_children
        self.entries_count[inner] = 0
        self.branch_weights[inner] = 0.0
        r, nd, wt = rows, start, weights
        while r.size:
            o = np.argsort(nd, kind="stable")
            r, nd, wt = r[o], nd[o], wt[o]
            present, first, count = np.unique(nd, return_index=True, return_counts=True)
            if reset:
                self.slot[present] = np.arange(present.size)
                tree.dist[present] = np.bincount(self.slot[nd] * C + self.labels[r], wt,
                                                 minlength=present.size * C).reshape(present.size, C)
            is_inner = tree.nchild[nd] > 0
            if self.known_only:
                self.leaf_of_row[r[~is_inner]] = nd[~is_inner]
            parent = tree.nchild[present] > 0
            present, first, count = present[parent], first[parent], count[parent]
            r, nd, wt = r[is_inner], nd[is_inner], wt[is_inner]
            if not r.size:
                break
            first = np.cumsum(count) - count
            self.entries_level[present] = len(levels)
            self.entries_start[present] = first
            self.entries_count[present] = count
            levels.append((r, wt))
            r2, nd2, w2, bags, frac = self._split(r, nd, wt, present, True)
            k = tree.nchild[present]
            b = np.arange(max_children)
            per_bag = bags[:, :max_children] + bags[np.arange(present.size), k][:, None] * frac
            per_bag[b[None, :] >= k[:, None]] = 0.0
            self.branch_weights[present] = per_bag
            if reset:
                tree.frac[present] = frac
            r, nd, wt = r2, nd2, w2

    def prune(self, roots, rows, weights, start, reset):
        """Prune the disjoint subtrees at ``roots``, the entries ``rows`` / ``weights`` starting at nodes ``start``
        (each root's entries in its order); ``reset``: recompute their distributions first (raising)."""
        tree = self.tree
        estimate = self.subtree_estimate
        levels, nodes, inner = subtree_levels(tree, roots)
        if reset:  # Weka's resetDistribution of the raised subtree (no instances: empty, even fractions)
            tree.dist[nodes] = 0.0
            tree.frac[inner] = 0.0
            n_children = tree.nchild[inner]
            for k in np.unique(n_children):
                tree.frac[inner[n_children == k], :k] = 1.0 / k
        entries = []
        self._route_entries(entries, nodes, inner, rows, start, weights, reset)
        leaves = nodes[tree.nchild[nodes] == 0]
        estimate[leaves] = self._estimate(tree.dist[leaves])
        # heights: children are decided before their parent
        height = subtree_heights(tree, levels)
        inner_height = height[inner]
        for h in np.unique(inner_height):
            batch = inner[inner_height == h]
            largest = _largest_branch(tree, batch, self.branch_weights[batch])
            largest_node = tree.first[batch] + largest
            e_leaf = self._estimate(tree.dist[batch])
            e_tree = _branch_sums(tree, batch, estimate)
            r, wt, owner = self._entries_of(batch, entries)
            if self.known_only:
                val = self._estimate_branches_known(batch, largest_node, largest, r, wt, owner)
            else:
                val = self._estimate_branches(largest_node[owner], r, wt)
            has = self.entries_count[batch] > 0
            e_branch = np.where(has, val[largest_node], 0.0)
            to_leaf, keep = prune_decision(e_leaf, e_tree, e_branch)
            tree.nchild[batch[to_leaf]] = 0
            estimate[batch[to_leaf]] = e_leaf[to_leaf]
            if self.known_only and to_leaf.any():
                sel = np.flatnonzero(to_leaf[owner])
                self.leaf_of_row[r[sel]] = batch[owner[sel]]
            estimate[batch[keep]] = e_tree[keep]
            raise_at = np.flatnonzero(~to_leaf & ~keep)
            if raise_at.size:
                # raising: the largest branch replaces the node, which is pruned again (all such nodes at once)
                raised, branch = batch[raise_at], largest_node[raise_at]
                raised_rows, raised_weights, raised_owner = self._entries_of(raised, entries)
                tree.attr[raised], tree.thr[raised], tree.thrc[raised] = \
                    tree.attr[branch], tree.thr[branch], tree.thrc[branch]
                self.left_last_code[raised] = self.left_last_code[branch]
                tree.first[raised], tree.nchild[raised] = tree.first[branch], tree.nchild[branch]
                tree.parent[tree.children(raised)] = np.repeat(raised, tree.nchild[raised])
                self.prune(raised, raised_rows, raised_weights, raised[raised_owner], True)
