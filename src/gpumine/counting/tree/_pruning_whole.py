"""Subtree raising for whole counts with one path per row (no sample weights, no missing value in a tested attribute).

Every node's rows are then the rows under it and its distribution is their class count, so nothing
needs routing but the rows a largest branch does not hold. The rows are kept sorted by the
pre-order number of their leaf: the rows of a node are one range of that order (read off a table
of row counts by pre-order number), a node's largest branch is a sub-range, and the rest of the
node's range are the rows routed down that branch. A branch's estimate is its finished one plus the
changes of the leaves those rows reach (the recursion's nested sums are formed only where a
decision could turn within their rounding). Raising re-sorts the raised node's range (and recounts
its part of the table), and a raised subtree is counted and decided again only where rows arrived.
All counts are whole numbers, so sums in any order are those of the recursion bit for bit.

Each round decides all nodes whose children are final, the changed nodes of raised subtrees among
them: the recursion raises a subtree and prunes it again before anything above it, but nothing
outside a subtree reads or changes what is in it (its nodes, its rows' range of the row order), so
the nodes of disjoint subtrees are decided in any order with the same results.
"""

from __future__ import annotations

import numpy as np
import torch

from ._estimates import _SMALL, _pairwise_rows, _WholeEstimates, prune_decision
from ._nodes import _branch_sums, subtree_heights, subtree_levels

#: Keys from which :func:`_stable_sort` sorts with torch rather than NumPy (below, the call's fixed cost counts).
TORCH_SORT_MIN = 1 << 16


def _stable_sort(key, bound, device=None):
    """``(order, key[order])`` for ``order = np.argsort(key, kind="stable")``, non-negative integers below ``bound``.

    Torch sorts 32-bit integer keys stably by radix on all cores (several times faster than NumPy's
    two passes on a million keys), or on ``device`` where that is a GPU (faster still, copies
    included; BENCHMARKS.md, "Design measurements quoted in the code"); the stable order is
    unique, so every one gives the same.
    """
    if key.size >= TORCH_SORT_MIN and bound <= 1 << 31:
        keys = torch.from_numpy(key.astype(np.int32, copy=False))
        if device is not None and torch.device(device).type == "cuda":
            keys, order = torch.sort(keys.to(device), stable=True)
            return order.cpu().numpy(), keys.cpu().numpy()
        keys, order = torch.sort(keys, stable=True)
        return order.numpy(), keys.numpy()
    order = _stable_order(key, bound)
    return order, key[order]


def _stable_order(key, bound):
    """``np.argsort(key, kind="stable")`` for non-negative integers below ``bound``.

    NumPy sorts 16-bit keys by radix and wider ones by comparison; below ``2**32`` two stable
    radix passes (low 16 bits, then high) give the same order several times faster.
    """
    if bound <= 1 << 16:
        return np.argsort(key.astype(np.uint16), kind="stable")
    if bound <= 1 << 32:
        low = np.argsort((key & 0xFFFF).astype(np.uint16), kind="stable")
        return low[np.argsort((key[low] >> 16).astype(np.uint16), kind="stable")]
    return np.argsort(key, kind="stable")


def preorder_numbers(tree):
    """``(pre, end, levels)``: pre-order numbers, the subtree of node x holding the numbers ``pre[x] .. end[x] - 1``,
    and the tree's levels (:meth:`_Nodes.levels`)."""
    n_nodes = tree.n
    levels = tree.levels(0)
    # each level is the children of the inner nodes of the one above, parent by parent: a node's size is
    # one plus the sum of its children's range, its children's numbers follow its own, each after the
    # subtrees of its elder siblings (an exclusive running sum within the parent's range)
    inner_by_level = [level[tree.nchild[level] > 0] for level in levels[:-1]]
    starts = [np.cumsum(tree.nchild[parents]) - tree.nchild[parents] for parents in inner_by_level]
    size = np.zeros(n_nodes, dtype=np.int64)
    size[levels[-1]] = 1
    for level, parents, first, kids in reversed(list(zip(levels[:-1], inner_by_level, starts, levels[1:]))):
        size[level] = 1
        size[parents] += np.add.reduceat(size[kids], first)
    pre = np.zeros(n_nodes, dtype=np.int64)
    for parents, first, kids in zip(inner_by_level, starts, levels[1:]):
        kid_size = size[kids]
        elder = np.cumsum(kid_size) - kid_size
        pre[kids] = np.repeat(pre[parents] + 1 - elder[first], tree.nchild[parents]) + elder
    return pre, pre + size, levels


#: Safety factor on the rounding bound within which whole-count pruning forms the recursion's nested sums of
#: estimates to decide (see :meth:`_WholeCountRaising._decide_batch`). At 1 the bound is that of sums of
#: non-negative numbers; the factor covers the shortcuts of its derivation.
BRANCH_SLACK = 4.0

#: Steps the routing takes between drops of the rows that reached a leaf (see :meth:`_WholeCountRaising._route_down`):
#: a drop costs about a step, and a row at a leaf stays there.
ROUTE_STRIDE = 3

#: Rows the routing routes at a time (see :meth:`_WholeCountRaising._route_down`): many, so that a step's fixed cost
#: does not count, and few, so that its temporaries stay in cache and are reused rather than freshly mapped.
ROUTE_BLOCK = 1 << 17


def prune_raising_whole(tree, columns, codes, labels, confidence, left_last_code, *, row_node=None,
                        sort_device=None):
    """:func:`gpumine.counting.tree._pruning.prune_raising` for whole counts and one path per row; in place.

    ``codes``: ``(n, d)`` level codes (none missing in a tested attribute), ``labels``: int64
    class codes, ``left_last_code``: see :func:`~gpumine.counting.tree._pruning.left_branch_last_codes`;
    ``row_node``: the growth's deepest node of every row, or ``None`` (the rows are then routed to
    their leaves); ``sort_device``: where the rows are sorted by leaf.
    """
    _WholeCountRaising(tree, columns, codes, labels, confidence, left_last_code, row_node, sort_device).prune()


class _WholeCountRaising:
    """The state of one :func:`prune_raising_whole`: the rows sorted by the pre-order number of their leaf, the
    node tables the routing steps read, and every node's weight and estimates."""

    def __init__(self, tree, columns, codes, labels, confidence, left_last_code, row_node, sort_device):
        n_nodes = tree.n
        n, d = codes.shape
        C = tree.C
        n_known = np.asarray(columns.n_known, dtype=np.int64)
        nominal = np.asarray(columns.nominal, dtype=bool)
        self.tree = tree
        self.n_classes = C
        self.n_nodes = n_nodes
        self.left_last_code = left_last_code
        self.any_nominal, self.any_numeric = bool(nominal.any()), bool((~nominal).any())
        # scratch: each node's position in the set being worked on
        self.slot = np.zeros(n_nodes, dtype=np.int64)
        self._range = np.arange(0)
        self.pre, self.pre_end, levels = preorder_numbers(tree)
        # heights (leaves 0): children are decided before their parents; pruning only removes edges and
        # raising gives a node children lower than its old ones, so a parent stays above its children
        self.heights = subtree_heights(tree, levels)
        leaf_pre = self._row_leaves(levels, self.pre.astype(np.int32), codes, nominal, row_node)
        order, self.row_key = _stable_sort(leaf_pre, n_nodes, sort_device)  # the row key: its leaf's pre-order number
        self.row_labels = labels.astype(np.min_scalar_type(C - 1))[order]
        # the rows' codes in that order, in the narrowest type (the routing reads them by range), each row
        # padded to a size that np.take copies as one item (a void of 1 .. 32 bytes: several times faster
        # than rows of other sizes, or indexing)
        code_type = np.min_scalar_type(int(n_known.max()))
        row_bytes = d * code_type.itemsize
        self.row_len = d if row_bytes > 32 else (1 << (row_bytes - 1).bit_length()) // code_type.itemsize
        padded = np.zeros((n, self.row_len), dtype=code_type)
        padded[:, :d] = codes
        row_items = np.dtype((np.void, self.row_len * code_type.itemsize))
        self.row_codes = np.take(padded.view(row_items).reshape(n), order)  # one item per row
        del padded
        self.sorted_codes = self.row_codes.view(code_type)  # a view: raising's re-sorts of row_codes show through
        self._step_tables(tree, nominal, d, code_type)
        # rows_before[p]: the number of rows whose leaf has a pre-order number under p (a node's rows are the
        # range rows_before[pre[x]] .. rows_before[pre_end[x]] - 1)
        self.rows_before = np.zeros(n_nodes + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.row_key, minlength=n_nodes), out=self.rows_before[1:])
        self.estimate = _WholeEstimates(confidence, n)
        # every node's weight and estimated errors as a leaf, kept up to date where raising recounts (those
        # of the nodes collapsing cut off are never read)
        self.node_weight, self.leaf_estimate = self.estimate(tree.dist[:n_nodes], totals=True)
        # estimated errors of a finished subtree (J48's getEstimatedErrors)
        self.subtree_estimate = np.zeros(n_nodes)
        self.nested = np.zeros(n_nodes)  # the nested sums of estimates, where formed
        self.touched = np.zeros(n_nodes, dtype=bool)
        self.is_largest, self.on_path = np.zeros(n_nodes, dtype=bool), np.zeros(n_nodes, dtype=bool)

    def _step_tables(self, tree, nominal, d, code_type):
        """The node tables one routing step reads (``step_*``), kept in step with the tree as it is pruned."""
        n_nodes = self.n_nodes
        # raising gives a node its largest branch's children: every inner node keeps two if all have two now
        self.binary = bool((tree.nchild[np.flatnonzero(tree.nchild[:n_nodes] > 0)] == 2).all())
        inner_now = tree.nchild[:n_nodes] > 0
        self.step_first = np.where(inner_now, tree.first[:n_nodes], np.arange(n_nodes))
        self.step_nom = inner_now & nominal[np.where(inner_now, tree.attr[:n_nodes], 0)]
        # a leaf reads a padding code (0) where rows are padded, so that in an all-nominal tree the branch
        # is the code itself
        self.leaf_attr = d if self.row_len > d else 0
        self.branch_is_code = not self.any_numeric and self.row_len > d
        self.step_attr = np.where(inner_now, tree.attr[:n_nodes], self.leaf_attr).astype(np.min_scalar_type(d))
        # the step's test: a nominal branch is the code (else, in an all-nominal tree, the code and'ed with
        # all ones, with zero at a leaf), a numeric one whether the code is above the threshold (at a leaf
        # the largest code: never)
        all_ones = np.iinfo(code_type).max
        self.leaf_thr = 0 if not self.any_numeric else all_ones
        self.step_thr = np.where(inner_now, np.where(self.step_nom, all_ones if not self.any_numeric else 0,
                                                     self.left_last_code), self.leaf_thr).astype(code_type)

    def _row_leaves(self, levels, of, codes, nominal, row_node):
        """``of[leaf]`` for the leaf of every row in the (collapsed) tree: from the growth's deepest node of each
        row, else routed."""
        tree, n_nodes, n = self.tree, self.n_nodes, codes.shape[0]
        if row_node is not None and row_node.shape[0] == n:
            reach = np.zeros(n_nodes, dtype=bool)
            reach[np.concatenate(levels)] = True
            top = np.arange(n_nodes)
            # node ids grow with depth: a node cut off by collapsing ends where its nearest kept ancestor does
            cut = np.flatnonzero(~reach)
            depth = tree.depth[cut]
            for x in np.split(cut, np.flatnonzero(depth[1:] != depth[:-1]) + 1):
                top[x] = top[tree.parent[x]]
            return of[top][row_node.cpu().numpy()]
        d = codes.shape[1]
        codes_flat = codes.reshape(-1)
        leaf = np.empty(n, dtype=np.int64)
        r, nd = np.arange(n), np.zeros(n, dtype=np.int64)
        while r.size:
            at_leaf = tree.nchild[nd] == 0
            leaf[r[at_leaf]] = nd[at_leaf]
            r, nd = r[~at_leaf], nd[~at_leaf]
            a = tree.attr[nd]
            c = codes_flat[r * d + a]
            nd = tree.first[nd] + np.where(nominal[a], c, c > self.left_last_code[nd])
        return of[leaf]

    # ------------------------------------------------------------------ row ranges
    def _ranges(self, nodes):
        """The first row and the end of the rows of each of ``nodes`` in the row order."""
        return self.rows_before[self.pre[nodes]], self.rows_before[self.pre_end[nodes]]

    def _arange(self, m):
        """``np.arange(m)``: a view of one range, grown as needed (numbers 0 .. m - 1 are asked for many times)."""
        if self._range.size < m:
            self._range = np.arange(max(m, 2 * self._range.size))
        return self._range[:m]

    def _segments(self, lo, lengths):
        """The positions ``lo[i] .. lo[i] + lengths[i] - 1``, one range after the other."""
        return np.repeat(lo - np.cumsum(lengths) + lengths, lengths) + self._arange(int(lengths.sum()))

    def _recount_below(self, raised, lo, rows, size, first_slot, slot):
        """Recount ``rows_before`` within the pre-order numbers of the raised subtrees (disjoint, in row order),
        whose rows ``lo .. lo + rows - 1`` have new keys, given as ``slot``s (see :meth:`_raise`); at the two ends
        of each subtree's numbers it is unchanged."""
        counted = np.cumsum(np.bincount(slot, minlength=int(size.sum())))
        inside = size - 1
        self.rows_before[self._segments(self.pre[raised] + 1, inside)] = (
            np.repeat(lo - (np.cumsum(rows) - rows), inside) + counted[self._segments(first_slot, inside)])

    def _distinct(self, nodes):
        """The distinct node ids of ``nodes`` in no particular order, in time linear in ``nodes`` (not in the tree
        size): of the positions scattered to one id, exactly one is read back."""
        pos = np.arange(nodes.size)
        self.slot[nodes] = pos
        return nodes[self.slot[nodes] == pos]

    def _branch_sums(self, parents, vals):
        """Per node of ``parents``, the rows ``vals[child]`` of its children added up (whole numbers: exact); rows
        are read with ``np.take``, several times faster than indexing for short rows."""
        tree = self.tree
        if self.binary:
            f = tree.first[parents]
            return np.take(vals, f, axis=0) + np.take(vals, f + 1, axis=0)
        k, f = tree.nchild[parents], tree.first[parents]
        acc = np.zeros((parents.size,) + vals.shape[1:])
        for b in range(int(k.max()) if parents.size else 0):
            m = np.flatnonzero(b < k)
            acc[m] += np.take(vals, f[m] + b, axis=0)
        return acc

    # ------------------------------------------------------------------ routing
    def _route_down(self, positions, start, depth):
        """The leaf reached by each of the rows at ``positions`` in the row order from the nodes ``start``, none of
        whose subtrees is more than ``depth`` levels deep.

        Tens of millions of row steps on large trees, so a step does only what it needs: it reads
        the node's first child, attribute and left branch's last code from tables of the current
        tree (``step_*``, kept in step with it) and a row's code straight from the codes in row
        order. A leaf leads to itself there (its own first child, and a test no code passes or a
        padding code of 0), so rows that reached one may take more steps: the rows take
        ``ROUTE_STRIDE`` steps between drops of those at leaves (a drop costs about as much as a
        step), and none once ``depth`` steps were taken. Rows take their steps independently of each
        other: they go all the way in blocks of ``ROUTE_BLOCK``, whose temporaries stay in cache (and
        are reused rather than freshly mapped).
        """
        out = np.empty(positions.size, dtype=np.int64)
        for lo in range(0, positions.size, ROUTE_BLOCK):
            hi = lo + ROUTE_BLOCK
            self._route_block(positions[lo:hi], start[lo:hi], depth, out[lo:hi])
        return out

    def _route_block(self, positions, start, depth, out):
        """:meth:`_route_down` of the rows at ``positions``, their leaves written to ``out``; the rows that reach a
        leaf before the last step are dropped, their leaves written by position (``live``)."""
        sorted_codes, step_attr, step_first = self.sorted_codes, self.step_attr, self.step_first
        step_thr, step_nom = self.step_thr, self.step_nom
        branch_is_code, any_nominal, any_numeric = self.branch_is_code, self.any_nominal, self.any_numeric
        at = positions * self.row_len
        nd = start
        live = None
        while True:
            for _ in range(min(ROUTE_STRIDE, depth)):
                c = sorted_codes[at + step_attr[nd]]
                if branch_is_code:
                    nd = step_first[nd] + c
                elif not any_nominal:
                    nd = step_first[nd] + (c > step_thr[nd])
                elif not any_numeric:
                    nd = step_first[nd] + (c & step_thr[nd])
                else:
                    nd = step_first[nd] + np.where(step_nom[nd], c, c > step_thr[nd])
            depth -= ROUTE_STRIDE
            if depth <= 0:
                break
            at_leaf = step_first[nd] == nd
            done = np.flatnonzero(at_leaf)
            if done.size == nd.size:
                break
            if done.size:
                if live is None:
                    live = self._arange(nd.size)
                out[live[done]] = nd[done]
                go = np.flatnonzero(~at_leaf)
                at, nd, live = at[go], nd[go], live[go]
        if live is None:
            out[:] = nd
        else:
            out[live] = nd

    # ------------------------------------------------------------------ estimates and decisions
    def _nested_estimates(self, largest_node, reached, reached_estimate):
        """The largest branches' estimates as the recursion sums them: the finished estimate of every subtree no
        routed row reaches (a kept node's is the sum of its branches', as summed here), ``reached_estimate`` at the
        reached leaves ``reached``, and the sums in branch order on the paths from them up to the largest
        branches, children before parents (ascending heights)."""
        tree, val, estimate = self.tree, self.nested, self.subtree_estimate
        val[largest_node] = estimate[largest_node]
        self.is_largest[largest_node] = True  # the walk up stops there
        frontier, up = reached, []
        while True:
            frontier = frontier[~self.is_largest[frontier]]
            if not frontier.size:
                break
            frontier = self._distinct(tree.parent[frontier])
            frontier = frontier[~self.on_path[frontier]]
            self.on_path[frontier] = True
            up.append(frontier)
        self.is_largest[largest_node] = False
        inner_up = np.concatenate(up) if up else largest_node[:0]
        self.on_path[inner_up] = False
        kids = tree.children(inner_up)
        val[kids] = estimate[kids]
        val[reached] = reached_estimate
        h_up = self.heights[inner_up]
        for h in np.unique(h_up):
            parents = inner_up[h_up == h]
            val[parents] = _branch_sums(tree, parents, val)
        return val[largest_node]

    def _largest_branches(self, nodes):
        """Each node's largest branch, the last with the most rows (Weka's ``maxBag`` for whole numbers), and the
        estimate of its subtree (summed as :func:`_branch_sums` adds)."""
        tree, node_weight, estimate = self.tree, self.node_weight, self.subtree_estimate
        f = tree.first[nodes]
        if self.binary:
            largest_node = f + (node_weight[f + 1] >= node_weight[f])
            e_tree = (0.0 + estimate[f]) + estimate[f + 1]  # _branch_sums's additions
        else:
            k = tree.nchild[nodes]
            kmax = int(k.max())
            b = np.arange(kmax)
            weight = np.where(b < k[:, None], node_weight[np.minimum(f[:, None] + b, self.n_nodes - 1)], -1.0)
            largest_node = f + (kmax - 1 - np.argmax(weight[:, ::-1], axis=1))
            e_tree = _branch_sums(tree, nodes, estimate)
        return largest_node, e_tree

    def _decide_batch(self, nodes):
        """Decide ``nodes`` (disjoint subtrees, each finished below its node) as the recursion would; raise the
        subtrees that it raises (see :meth:`_raise`). Returns the nodes decided for good, and the raised nodes with
        the leaves their routed rows reached."""
        tree, C, estimate = self.tree, self.n_classes, self.subtree_estimate
        largest_node, e_tree = self._largest_branches(nodes)
        e_leaf = self.leaf_estimate[nodes]
        lo_node, hi_node = self._ranges(nodes)
        lo_big, hi_big = self._ranges(largest_node)
        # the node's rows outside its largest branch (before and after its range), routed down that branch;
        # a largest branch that is a leaf ends with all of the node's rows, so its estimate is the node's own
        # as a leaf (the same counts), and nothing is routed (nor ever raised: the node becomes a leaf where
        # the branch would be raised, both within the margin of the subtree)
        routed = tree.nchild[largest_node] > 0
        lengths = np.zeros(2 * nodes.size, dtype=np.int64)
        lengths[0::2][routed], lengths[1::2][routed] = (lo_big - lo_node)[routed], (hi_node - hi_big)[routed]
        lo = np.empty(2 * nodes.size, dtype=np.int64)
        lo[0::2], lo[1::2] = lo_node, hi_big
        outside = self._segments(lo, lengths)  # positions in the row order
        n_outside = lengths[0::2] + lengths[1::2]
        landed = self._route_down(outside, np.repeat(largest_node, n_outside),
                                  int(self.heights[largest_node].max(initial=0)))
        # estimates of the largest branches' subtrees holding all of the node's rows: each one's finished
        # estimate plus the changes of the leaves the routed rows reached. The recursion sums the same
        # numbers nested along the paths from those leaves; the two differ by rounding only, at most
        # ``slack`` (additions of non-negative numbers: each input passes at most ``adds`` of them). Where a
        # decision is the same at both ends of that interval it is the recursion's (the decisions are
        # monotone in the estimate); otherwise the nested sums are formed and decide.
        has = hi_node > lo_node
        e_big = estimate[largest_node]
        if outside.size:
            # the reached leaves, each numbered by its place in ``reached`` (slot), and their owners (the nodes whose
            # largest branch holds them: the one with the last pre-order number not above theirs)
            if 4 * outside.size >= self.n_nodes:
                reached = np.flatnonzero(np.bincount(landed, minlength=self.n_nodes))
            else:
                at = self._arange(outside.size)
                self.slot[landed] = at
                reached = landed[self.slot[landed] == at]
            self.slot[reached] = self._arange(reached.size)
            by_pre = np.argsort(self.pre[largest_node])
            owner = by_pre[np.searchsorted(self.pre[largest_node[by_pre]], self.pre[reached], side="right") - 1]
            extra = np.bincount(self.slot[landed] * C + self.row_labels[outside],
                                minlength=reached.size * C).reshape(reached.size, C)
            new_dist = np.take(tree.dist, reached, axis=0)  # rows by np.take: several times faster than indexing
            new_dist += extra
            reached_estimate = self.estimate(new_dist)
            old_estimate = estimate[reached]
            e_branch = e_big + np.bincount(owner, weights=reached_estimate - old_estimate, minlength=nodes.size)
            size = e_big + np.bincount(owner, weights=reached_estimate + old_estimate, minlength=nodes.size)
            adds = (self.heights[largest_node] + 1) * tree.maxk + np.bincount(owner, minlength=nodes.size) + 2
            slack = np.where(has & routed, BRANCH_SLACK * 2.0**-53 * adds * size, 0.0)
        else:
            e_branch, slack = e_big, 0.0
        e_branch = np.where(has, np.where(routed, e_branch, e_leaf), 0.0)
        to_leaf, keep = prune_decision(e_leaf, e_tree, e_branch - slack)
        if outside.size:
            hi_leaf, hi_keep = prune_decision(e_leaf, e_tree, e_branch + slack)
            if (hi_leaf != to_leaf).any() or (hi_keep != keep).any():
                nested = self._nested_estimates(largest_node, reached, reached_estimate)
                e_branch = np.where(has, np.where(routed, nested, e_leaf), 0.0)
                to_leaf, keep = prune_decision(e_leaf, e_tree, e_branch)
        made_leaves = nodes[to_leaf]
        tree.nchild[made_leaves] = 0
        self.step_first[made_leaves], self.step_attr[made_leaves] = made_leaves, self.leaf_attr
        self.step_thr[made_leaves], self.step_nom[made_leaves] = self.leaf_thr, False
        estimate[made_leaves] = e_leaf[to_leaf]
        estimate[nodes[keep]] = e_tree[keep]
        done = nodes[to_leaf | keep]
        raise_at = np.flatnonzero(~to_leaf & ~keep)
        if not raise_at.size:
            return done, raise_at, raise_at
        raised, landed = self._raise(nodes, raise_at, largest_node, outside, n_outside, landed, lo_node, hi_node)
        return done, raised, landed

    def _raise(self, nodes, raise_at, largest_node, outside, n_outside, landed, lo_node, hi_node):
        """Raise the largest branches of ``nodes[raise_at]``: the rows routed down the largest branch now end in its
        leaves, the raised nodes' ranges are re-sorted by their rows' new leaves (the ranges are disjoint), and each
        node takes its branch's test and children. Returns the raised nodes and the leaves their routed rows reached.
        """
        tree, pre, key = self.tree, self.pre, self.row_key
        raised = np.zeros(nodes.size, dtype=bool)
        raised[raise_at] = True
        moved = np.repeat(raised, n_outside)
        key[outside[moved]] = pre[landed[moved]]
        landed = landed[moved]
        raise_at = raise_at[np.argsort(lo_node[raise_at])]
        lo_r, rows = lo_node[raise_at], hi_node[raise_at] - lo_node[raise_at]
        span = self._segments(lo_r, rows)
        # the keys as slots in the raised subtrees' pre-order numbers laid end to end: in the same order,
        # and in fewer numbers (one radix pass where they fit in 16 bits)
        roots = nodes[raise_at]
        size = self.pre_end[roots] - pre[roots]
        first_slot = np.cumsum(size) - size
        slot = key[span] - np.repeat(pre[roots] - first_slot, rows)
        o = span[_stable_order(slot, int(size.sum()))]
        self.row_codes[span], key[span], self.row_labels[span] = np.take(self.row_codes, o), key[o], self.row_labels[o]
        self._recount_below(roots, lo_r, rows, size, first_slot, slot)
        branch = largest_node[raise_at]
        tree.attr[roots], tree.thr[roots], tree.thrc[roots] = tree.attr[branch], tree.thr[branch], tree.thrc[branch]
        self.left_last_code[roots] = self.left_last_code[branch]
        tree.first[roots], tree.nchild[roots] = tree.first[branch], tree.nchild[branch]
        self.step_first[roots], self.step_attr[roots], self.step_thr[roots], self.step_nom[roots] = \
            self.step_first[branch], self.step_attr[branch], self.step_thr[branch], self.step_nom[branch]
        tree.parent[tree.children(roots)] = np.repeat(roots, tree.nchild[roots])
        return roots, landed

    def _reset_raised(self, raised, landed):
        """Weka's resetDistribution of the raised subtrees at ``raised``, their rows routed down the largest
        branches to the leaves ``landed``.

        Only the nodes on the way from a root to those leaves have new rows; every other node keeps its rows,
        distribution and (final) decision, which pruning it again would repeat bit for bit, so only the changed
        nodes are counted (and later decided) again. Returns them: their leaves, their inner nodes, and which of
        those are roots.
        """
        tree, C = self.tree, self.n_classes
        touched = self.touched
        touched[raised] = True
        chain = [raised]
        frontier = self._distinct(landed)
        while frontier.size:
            frontier = frontier[~touched[frontier]]
            touched[frontier] = True
            chain.append(frontier)
            frontier = self._distinct(tree.parent[frontier])
        nodes = np.concatenate(chain)
        touched[nodes] = False
        has_kids = tree.nchild[nodes] > 0
        leaves, inner = nodes[~has_kids], nodes[has_kids]
        # a leaf counts the rows of its range, an inner node its children's (children first: ascending
        # heights); branch fractions from the children's weights (even where there are none)
        lo, hi = self._ranges(leaves)
        lengths = hi - lo
        tree.dist[leaves] = np.bincount(np.repeat(np.arange(leaves.size), lengths) * C
                                        + self.row_labels[self._segments(lo, lengths)],
                                        minlength=leaves.size * C).reshape(leaves.size, C)
        inner_height = self.heights[inner]
        for h in np.unique(inner_height):
            parents = inner[inner_height == h]
            tree.dist[parents] = self._branch_sums(parents, tree.dist)
        self.node_weight[nodes], self.leaf_estimate[nodes] = self.estimate(np.take(tree.dist, nodes, axis=0),
                                                                           totals=True)
        tree.frac[inner] = 0.0
        n_children = tree.nchild[inner]
        for k in np.unique(n_children):
            g = inner[n_children == k]
            bk = self.node_weight[tree.first[g][:, None] + np.arange(k)]
            known = _pairwise_rows(bk)
            good = np.abs(known) >= _SMALL
            fk = np.full(bk.shape, 1.0 / k)
            fk[good] = bk[good] / known[good, None]
            tree.frac[g, :k] = fk
        # the roots come first in ``nodes`` and so in ``inner``
        return leaves, inner, np.arange(inner.size) < int(has_kids[:raised.size].sum())

    def prune(self):
        """Prune the whole tree: each round decides every node whose children are final. The first rounds are the
        levels of equal height, and the nodes a raising changed are decided again (children first) in the same
        rounds as the others, not in rounds of their own."""
        tree, n_nodes = self.tree, self.n_nodes
        _, nodes, inner = subtree_levels(tree, np.array([0]))
        leaves = nodes[tree.nchild[nodes] == 0]
        self.subtree_estimate[leaves] = self.leaf_estimate[leaves]
        # per undecided node, its children not yet final (undecided inner nodes)
        waiting = np.bincount(tree.parent[inner[inner != 0]], minlength=n_nodes)
        ready = inner[waiting[inner] == 0]
        while ready.size:
            done, raised, landed = self._decide_batch(ready)
            nxt = []
            if raised.size:
                leaves, inner, is_root = self._reset_raised(raised, landed)
                self.subtree_estimate[leaves] = self.leaf_estimate[leaves]
                # a raised node waits for its changed children, decided again (it has its largest branch's
                # children: a branch that is a leaf is never raised, but a raised leaf would be final)
                done = np.concatenate([done, raised[tree.nchild[raised] == 0]])
                waiting[inner] = 0
                np.add.at(waiting, tree.parent[inner[~is_root]], 1)
                nxt.append(inner[waiting[inner] == 0])
            up = tree.parent[done]
            up = up[up >= 0]
            np.subtract.at(waiting, up, 1)
            up = self._distinct(up)
            nxt.append(up[waiting[up] == 0])
            ready = np.concatenate(nxt)
