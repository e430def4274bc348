"""The split search (criterion and splitter): J48's gain ratio over the count tables of one depth.

Every splittable node of a depth gets a ``(levels, classes)`` table of counts per attribute, all
of them in one ``(nodes, levels of all attributes, classes)`` tensor whose last level per
attribute holds its missing values. From it the search evaluates, vectorised over the nodes and
over the attributes of one kind and number of levels (:func:`attribute_groups`), every nominal
attribute's multiway split and every numeric attribute's best binary cut (prefix sums over the
levels give every cut's gain at once), and picks each node's attribute by J48's rule: the best
gain ratio among the attributes whose information gain is at least the average (minus 1e-3).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ._estimates import _SMALL

_LN2 = math.log(2.0)


def _lnf(x):
    """``x * log(x)``, 0 below J48's tolerance (an empty branch or class adds nothing to an entropy)."""
    return torch.where(x < _SMALL, torch.zeros_like(x), x * torch.log(x.clamp_min(1e-300)))


class _LnfTable:
    """:func:`_lnf` of whole counts by one gather from a table of ``_lnf(0 .. n)``.

    The split search evaluates ``x log x`` on every cell of the per-depth count
    tables (six passes and a log each); unweighted counts are integers at most
    ``n``, so a lookup gives the same values (the table holds ``_lnf`` of the same
    float64 numbers) in one pass.
    """

    def __init__(self, n, device):
        self.table = _lnf(torch.arange(int(n) + 1, dtype=torch.float64, device=device))

    def __call__(self, x):
        x = x.to(torch.int64)
        return self.table.index_select(0, x.reshape(-1)).reshape(x.shape)


def _ratio(gain, split_ent, total):
    """Gain ratio: the gain over the split information (per unit of weight); 0 where either is none."""
    denom = split_ent / total.clamp_min(1e-300)
    return torch.where((split_ent.abs() < _SMALL) | (gain <= 0), torch.zeros_like(gain), gain / denom)


class _AttrGroups:
    """The attribute groups of the split search: ``exact`` (one number of levels each), ``whole`` (int64 tables),
    and ``pick``, those of :func:`chosen_split_details`."""

    def __init__(self, exact, whole, pick):
        self.exact, self.whole, self.pick = exact, whole, pick


def attribute_groups(columns, offsets, device):
    """The attributes in groups of one kind (nominal or numeric) and one number of known levels.

    The split search runs once per group on a ``(nodes, attributes, levels, classes)``
    view of the counts instead of once per attribute: fewer, larger tensor ops (kernel
    launches on a GPU), each attribute's values computed by the same operations as alone.
    ``offsets``: each attribute's first level in the count table. Returns ``[(nominal, k,
    attribute indices, level indices of the count table, attribute indices as a list, None)]``
    as ``exact``, and as ``whole`` the groups for int64 (whole) count tables, where numeric
    attributes of similar numbers of levels share one group padded with empty levels (see
    :func:`_merge_numeric_groups`).
    """
    keys = {}
    for j in range(len(columns.n_known)):
        keys.setdefault((bool(columns.nominal[j]), int(columns.n_known[j])), []).append(j)
    groups = []
    for (nom, k), attrs in keys.items():
        attr_index = np.asarray(attrs, dtype=np.int64)
        levels = (np.asarray(offsets, dtype=np.int64)[attr_index][:, None] + np.arange(k)[None, :]).reshape(-1)
        groups.append((nom, k, torch.as_tensor(attr_index, device=device), torch.as_tensor(levels, device=device),
                       list(attrs), None))
    # the gather of the chosen splits' details needs one group per width of the details: every numeric attribute
    # in one, the nominal ones by number of values; with each a table of the attributes' positions in it
    d = len(columns.n_known)
    pick = [(True, k, attrs) for (nom, k), attrs in keys.items() if nom]
    numeric = [j for j in range(d) if not columns.nominal[j]]
    if numeric:
        pick.append((False, 2, numeric))
    tables = []
    for nom, k, attrs in pick:
        where = np.full(d, -1, dtype=np.int64)
        where[attrs] = np.arange(len(attrs))
        tables.append((nom, k, attrs, torch.as_tensor(where, device=device)))
    return _AttrGroups(groups, _merge_numeric_groups(groups, offsets, device), tables)


#: Numeric attributes share a padded group when the group's most levels are at most this many times its fewest:
#: a group costs a fixed number of tensor ops per depth, and padding costs work in proportion to the empty levels.
MERGE_LEVELS_RATIO = 1.5


def _merge_numeric_groups(groups, offsets, device):
    """``groups`` with the numeric ones of similar numbers of levels merged, for whole (int64) count tables.

    Each group costs some forty tensor ops per depth, and numeric attributes come with many different
    numbers of levels (KDD Cup 99: 24 numeric groups, most of one attribute). A merged group pads each
    attribute to the group's ``k`` levels with empty ones (``pad``: the mask of real levels, ``(A, k, 1)``, and
    each attribute's last real level, ``(A,)``). With whole counts that changes no value: sums and prefix
    sums over levels are exact in int64, an empty level after the last one is no candidate cut (nothing
    right of it), the best cut and its gain are maxima over the same candidates, and the next level with
    values is clipped at the attribute's own last level. Fractional counts keep the exact groups: their
    float sums over levels could be added in another order. Groups of fewer than two levels stay apart.
    """
    out = [g for g in groups if g[0] or g[1] < 2]
    num = sorted((g for g in groups if not g[0] and g[1] >= 2), key=lambda g: g[1])
    buckets = []
    for g in num:
        if buckets and g[1] <= MERGE_LEVELS_RATIO * buckets[-1][0][1]:
            buckets[-1].append(g)
        else:
            buckets.append([g])
    offsets = np.asarray(offsets, dtype=np.int64)
    for b in buckets:
        if len(b) == 1:
            out.append(b[0])
            continue
        k = b[-1][1]
        attrs = [j for g in b for j in g[4]]
        own_levels = np.asarray([g[1] for g in b for _ in g[4]], dtype=np.int64)
        pos = np.arange(k)[None, :]
        real = pos < own_levels[:, None]
        # padded levels read the attribute's first level (any valid index), masked to zero
        levels = (offsets[np.asarray(attrs)][:, None] + np.where(real, pos, 0)).reshape(-1)
        pad = (torch.as_tensor(real[:, :, None], device=device), torch.as_tensor(own_levels - 1, device=device))
        out.append((False, k, torch.as_tensor(np.asarray(attrs, dtype=np.int64), device=device),
                    torch.as_tensor(levels, device=device), attrs, pad))
    return out


def select_splits(columns, counts, tot, total, offsets, in_average, n_classes, min_leaf, lnf=_lnf, groups=None):
    """Gain, gain ratio and validity of every attribute's best split at every node; the best attribute.

    ``counts``: ``(G, L, C)`` node x attribute level x class, float64 or (whole
    counts, with ``lnf`` a :class:`_LnfTable`) int64; the last level of each
    attribute holds its missing values. ``tot`` / ``total``: the nodes' class
    distributions and weights; ``in_average``: the attributes whose gains make the
    average a chosen attribute's gain must reach (J48 leaves out nominal attributes
    with many values unless all have many); ``min_leaf``: J48's ``minNumObj``.
    Attributes of one kind and number of levels are evaluated together
    (:func:`attribute_groups`). Whole counts stay int64 through the sums and
    differences (exact, as they are in float64) and become float64 where they meet
    fractions, so both give the same values bit for bit. Returns the best attribute
    per node (``-1``: leaf) on the device and, per attribute, the split details as
    device tensors: ``bags`` (the branch weights), and for numeric attributes ``thr``
    (the cut's last level) and ``next`` (the next level with values).
    """
    n_nodes = counts.shape[0]
    dev = counts.device
    n_attrs = len(columns.n_known)
    f64 = torch.float64
    C = n_classes
    if groups is None:
        groups = attribute_groups(columns, offsets, dev)
    groups = groups.whole if counts.dtype == torch.int64 else groups.exact
    gains = torch.zeros(n_nodes, n_attrs, dtype=f64, device=dev)
    ratios = torch.zeros(n_nodes, n_attrs, dtype=f64, device=dev)
    valid = torch.zeros(n_nodes, n_attrs, dtype=torch.bool, device=dev)
    infos = [None] * n_attrs
    tot1 = total[:, None]
    lnf_total = lnf(total)[:, None]
    for nom, k, attrs, level_index, attr_list, pad in groups:
        group_size = attrs.shape[0]
        # (nodes, attributes, known levels, classes)
        K = counts.index_select(1, level_index).reshape(n_nodes, group_size, k, C)
        if pad is not None:
            K = torch.where(pad[0], K, 0)  # levels past an attribute's own are empty
        known_c = K.sum(2)  # (G, A, C)
        known = known_c.sum(2)
        known_f = known.to(f64)
        unknown = (tot1 - known_f).clamp_min(0)
        rate = torch.where(tot1 > 0, unknown / tot1.clamp_min(1e-300), torch.zeros_like(unknown))
        old_ent = (lnf(known) - lnf(known_c).sum(2)) / _LN2
        bag = K.sum(3)  # (G, A, k)
        if nom:
            bag_f = bag.to(f64)
            new_ent = (lnf(bag).sum(2) - lnf(K).sum((2, 3))) / _LN2
            num = (1 - rate) * (old_ent - new_ent)
            gain = torch.where(num.abs() < _SMALL, torch.zeros_like(num), num / known_f.clamp_min(1e-300))
            ok = ((bag_f >= min_leaf - _SMALL).sum(2) >= 2) & (known > 0)
            split_ent = (-lnf(bag).sum(2) - lnf(unknown) + lnf_total) / _LN2
            ratio = _ratio(gain, split_ent, tot1)
            for a, j in enumerate(attr_list):
                infos[j] = {"bags": bag_f[:, a]}
        else:
            left_c = K[:, :, :-1].cumsum(2)  # (G, A, k-1, C): cut after level t
            left = left_c.sum(3)
            right_c = known_c[:, :, None, :] - left_c
            right = known[:, :, None] - left
            present = bag[:, :, :-1] > 0
            min_split = (0.1 * known_f / C).clamp(min=min_leaf, max=25.0)
            cand = present & (left >= min_split[..., None] - _SMALL) & (right >= min_split[..., None] - _SMALL)
            cand &= (known_f >= 2 * min_split - _SMALL)[..., None]
            new_ent = (lnf(left) + lnf(right) - lnf(left_c).sum(3) - lnf(right_c).sum(3)) / _LN2
            num = (1 - rate)[..., None] * (old_ent[..., None] - new_ent)
            g_t = torch.where(num.abs() < _SMALL, torch.zeros_like(num), num / known_f.clamp_min(1e-300)[..., None])
            g_t = torch.where(cand, g_t, torch.full_like(g_t, -math.inf))
            n_cand = cand.sum(2)
            if k >= 2:
                best_g, _ = g_t.max(2)
                # the first cut within 1e-6 of the best (J48 scans cuts in order, keeping strict improvements)
                first = (g_t >= best_g[..., None] - _SMALL).to(torch.int8).argmax(2)
            else:
                best_g = torch.full((n_nodes, group_size), -math.inf, dtype=f64, device=dev)
                first = torch.zeros(n_nodes, group_size, dtype=torch.int64, device=dev)
            has = (n_cand > 0) & (best_g > _SMALL)
            # the MDL correction: log2(#candidate cuts) / N
            gain = best_g - torch.log2(n_cand.clamp_min(1).to(f64)) / tot1.clamp_min(1e-300)
            ok = has & (gain > _SMALL)
            gain = torch.where(ok, gain, torch.zeros_like(gain))
            idx = first.clamp_max(max(k - 2, 0))
            if k >= 2:
                lb = left.gather(2, idx[..., None])[..., 0]
                rb = right.gather(2, idx[..., None])[..., 0]
            else:
                lb = rb = torch.zeros_like(known)
            split_ent = (-lnf(lb) - lnf(rb) - lnf(unknown) + lnf_total) / _LN2
            ratio = _ratio(gain, split_ent, tot1)
            pos = torch.arange(k, device=dev)
            if k:
                nxt = torch.where((bag > 0) & (pos > idx[..., None]), pos,
                                  torch.full_like(bag, k, dtype=torch.int64)).min(2).values.clamp_max(k - 1)
                if pad is not None:
                    nxt = torch.minimum(nxt, pad[1])
            else:  # no known value anywhere (an all-missing column): no cut, never chosen (ok is False)
                nxt = torch.zeros(n_nodes, group_size, dtype=torch.int64, device=dev)
            bags = torch.stack([lb, rb], 2).to(f64)
            for a, j in enumerate(attr_list):
                infos[j] = {"thr": idx[:, a], "next": nxt[:, a], "bags": bags[:, a]}
        gains[:, attrs] = gain
        ratios[:, attrs] = ratio
        valid[:, attrs] = ok
    use = valid & in_average[None, :]
    n_use = use.sum(1)
    avg = torch.where(n_use > 0, (gains * use).sum(1) / n_use.clamp_min(1), torch.zeros_like(total))
    eligible = valid & (gains >= avg[:, None] - 1e-3)
    r = torch.where(eligible, ratios, torch.full_like(ratios, -math.inf))
    best_r, _ = r.max(1)
    first = (r >= best_r[:, None] - _SMALL).to(torch.int8).argmax(1)
    ok = (n_use > 0) & (best_r > _SMALL)
    best = torch.where(ok, first, torch.full_like(first, -1))
    return best, infos


def chosen_split_details(best, infos, groups, max_children):
    """The details of every node's chosen split, gathered on the device: ``(G, 2 + max_children)`` float64.

    Column 0 is the numeric cut (the last level code of the left branch), column 1
    the next level with values, columns ``2 ..`` the branch weights (``k`` of a
    nominal split, 2 of a numeric one); zeros where the node does not split.
    ``infos`` as :func:`select_splits` returns them (tensors or arrays).
    """
    n_nodes = best.shape[0]
    dev = best.device
    out = torch.zeros(n_nodes, 2 + max_children, dtype=torch.float64, device=dev)
    bc = best.clamp_min(0)
    rows = torch.arange(n_nodes, device=dev)
    for nom, k, attr_list, where in groups.pick:
        # the position of the chosen attribute in this group (-1: another group's or none)
        a = torch.where(best >= 0, where[bc], -1)
        mine = (a >= 0)[:, None]
        a = a.clamp_min(0)

        def pick(key, a=a):
            v = torch.stack([torch.as_tensor(infos[j][key], device=dev) for j in attr_list], 1)
            return v[rows, a].to(torch.float64)

        if nom:
            out[:, 2:2 + k] = torch.where(mine, pick("bags"), out[:, 2:2 + k])
        else:
            det = torch.cat([pick("thr")[:, None], pick("next")[:, None], pick("bags")], 1)
            out[:, :4] = torch.where(mine, det, out[:, :4])
    return out


def numeric_thresholds(columns, j, last_left, next_level):
    """J48's cut of numeric attribute ``j``: the largest training value <= the midpoint of the node's two adjacent
    values (the largest of level ``last_left`` and the smallest of level ``next_level``)."""
    bmax = columns.bin_max[j]
    lo = bmax[last_left]
    hi = columns.bin_min[j][next_level]
    mid = (lo + hi) / 2
    mid = np.where(mid == hi, lo, mid)
    i = np.searchsorted(bmax, mid, side="right") - 1
    return bmax[np.maximum(i, last_left)]
