"""The tree as arrays of nodes: what growth writes, collapsing and pruning rewrite, prediction tables read."""

from __future__ import annotations

import numpy as np

from ._estimates import _SMALL, _add_errors_vec


class _Nodes:
    """Growable node arrays; the children of a node are the ids ``first .. first + nchild - 1``.

    Per node id: ``dist`` (class distribution of its training weight, ``(n, C)``), ``parent`` (-1 at
    the root), ``depth``, ``attr`` (the tested attribute, -1 for a node never split), ``nchild``
    (0: a leaf; collapsing and pruning make leaves by setting it to 0, the subtree stays in the
    arrays), ``first`` (the first child's id), ``thr`` (a numeric split's cut value), ``thrc`` (its
    level code: the last level of the left branch among the node's own values), ``frac`` (the
    branches' shares of the known weight, ``(n, maxk)``: where a missing value goes). ``C``:
    classes, ``maxk``: most children of a node, ``n``: nodes in use.
    """

    _FIELDS = ("dist", "parent", "attr", "thr", "thrc", "first", "nchild", "frac", "depth")

    def __init__(self, C, maxk, capacity=64):
        self.C, self.maxk, self.n = C, maxk, 0
        self._alloc(max(64, int(capacity)))

    def _alloc(self, cap):
        # zeros are mapped lazily and the -1 fields are written by add(): a capacity never reached costs no
        # memory, and a generous first one spares the copies of growing
        old = {k: getattr(self, k) for k in _Nodes._FIELDS} if hasattr(self, "dist") else None
        self.dist = np.zeros((cap, self.C))
        self.parent = np.empty(cap, dtype=np.int64)
        self.attr = np.empty(cap, dtype=np.int64)
        self.thr = np.zeros(cap)
        self.thrc = np.empty(cap, dtype=np.int64)  # numeric split: the last level code of the left branch
        self.first = np.zeros(cap, dtype=np.int64)
        self.nchild = np.zeros(cap, dtype=np.int64)
        self.frac = np.zeros((cap, self.maxk))
        self.depth = np.zeros(cap, dtype=np.int64)
        if old:
            for k, v in old.items():
                getattr(self, k)[:self.n] = v[:self.n]

    def trim(self):
        """Views of the ``n`` nodes only: a fitted model pickles its tree, not the capacity left over."""
        for k in _Nodes._FIELDS:
            setattr(self, k, getattr(self, k)[:self.n])

    def add(self, parents, depth):
        """New nodes, children of ``parents`` (in order) at ``depth``; their ids (consecutive)."""
        m = len(parents)
        if self.n + m > self.dist.shape[0]:
            self._alloc(max(2 * self.dist.shape[0], self.n + m))
        ids = np.arange(self.n, self.n + m)
        self.parent[ids] = parents
        self.attr[ids] = -1
        self.thrc[ids] = -1
        self.depth[ids] = depth
        self.n += m
        return ids

    def children(self, parents):
        """Ids of the children of ``parents``, parent by parent, each parent's in order."""
        k = self.nchild[parents]
        return np.repeat(self.first[parents], k) + (np.arange(k.sum()) - np.repeat(np.cumsum(k) - k, k))

    def levels(self, root):
        """The subtree under ``root`` as arrays of node ids, one per depth, top-down."""
        levels = [np.array([root])]
        while True:
            parents = levels[-1][self.nchild[levels[-1]] > 0]
            if not parents.size:
                return levels
            levels.append(self.children(parents))

    def errors(self):
        """Training errors of every node as a leaf."""
        d = self.dist[:self.n]
        return d.sum(1) - d.max(1)

    def estimated_errors(self, cf):
        """J48's estimated errors of every node as a leaf (training errors plus their confidence bound)."""
        d = self.dist[:self.n]
        N = d.sum(1)
        e = N - d.max(1)
        out = np.zeros(self.n)
        pos = N >= _SMALL
        out[pos] = e[pos] + _add_errors_vec(N[pos], e[pos], cf)
        return out


def _branch_sums(tree, parents, vals):
    """``sum(vals[c] for c in children(p))`` for every inner node ``p`` of ``parents``, added in branch order."""
    k = tree.nchild[parents]
    f = tree.first[parents]
    acc = np.zeros(parents.size)
    for b in range(int(k.max()) if parents.size else 0):
        m = b < k
        acc[m] = acc[m] + vals[f[m] + b]
    return acc



def subtree_levels(tree, roots):
    """The subtrees at ``roots`` level by level (each level the children of the inner nodes of the one above, parent
    by parent), all of their nodes, and the inner ones."""
    levels = [roots]
    while True:
        parents = levels[-1][tree.nchild[levels[-1]] > 0]
        if not parents.size:
            break
        levels.append(tree.children(parents))
    nodes = np.concatenate(levels)
    return levels, nodes, nodes[tree.nchild[nodes] > 0]


def subtree_heights(tree, levels):
    """Height of every node of the subtrees given level by level (leaves 0), indexed by node id."""
    height = np.zeros(tree.n, dtype=np.int64)
    for level, below in reversed(list(zip(levels[:-1], levels[1:]))):
        # each level is the children of the inner nodes of the one above, parent by parent
        parents = level[tree.nchild[level] > 0]
        k = tree.nchild[parents]
        height[parents] = np.maximum.reduceat(height[below], np.cumsum(k) - k) + 1
    return height


def recompute_depths(tree):
    """Parents and depths of the nodes reachable from the root, after raising moved subtrees up."""
    frontier = np.array([0])
    tree.depth[0] = 0
    while frontier.size:
        parents = frontier[tree.nchild[frontier] > 0]
        if parents.size == 0:
            break
        k = tree.nchild[parents]
        kids = tree.children(parents)
        tree.parent[kids] = np.repeat(parents, k)
        tree.depth[kids] = np.repeat(tree.depth[parents], k) + 1
        frontier = kids
