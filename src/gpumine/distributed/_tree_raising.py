"""J48's subtree raising for the distributed C4.5 with whole counts: on the client, counts from the partitions."""

from __future__ import annotations

import numpy as np

from ..counting.tree._estimates import _SMALL, _pairwise_rows, exact_estimated_errors, prune_decision
from ..counting.tree._nodes import _branch_sums, subtree_heights, subtree_levels
from ..counting.tree._pruning import _largest_branch
from ..counting.tree._pruning_whole import preorder_numbers


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
