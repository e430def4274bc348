"""Prediction: the final tree as tables on the device, and J48's class distribution of instances routed down it."""

from __future__ import annotations

import numpy as np
import torch


def prediction_tables(tree, nominal):
    """Tables of the nodes of the final tree, numbered anew in id order (root 0): ``(tables, n_nodes, n_leaves,
    depth)``.

    ``tables``: per node ``attr`` (-1 at a leaf), ``num`` (a numeric split), ``thr`` (its cut), ``kids``
    (children ids, -1 padded), ``frac`` (branch fractions for missing values), ``prob`` (class
    probabilities; an empty node's are its parent's), ``empty``, ``dist``. Collapsing and pruning
    leave most grown nodes out of the tree; tables of the tree's nodes alone are a fraction of the
    work and of the copy to the device.
    """
    maxk = tree.maxk
    levels = tree.levels(0)
    reach = np.zeros(tree.n, dtype=bool)
    reach[np.concatenate(levels)] = True
    old = np.flatnonzero(reach)
    N = old.size
    new_id = np.full(tree.n, -1, dtype=np.int64)
    new_id[old] = np.arange(N)
    nchild = tree.nchild[old]
    b = np.arange(maxk)
    kids = np.where(b[None, :] < nchild[:, None],
                    new_id[np.minimum(tree.first[old][:, None] + b[None, :], tree.n - 1)], -1)
    dist = tree.dist[old]
    tot = dist.sum(1)
    prob = np.where(tot[:, None] > 0, dist / np.where(tot > 0, tot, 1)[:, None], 0.0)
    empty = tot <= 0
    # an empty node answers with its parent's distribution (inherited itself where the parent is empty): top-down
    for level in levels[:-1]:
        parents = level[tree.nchild[level] > 0]
        child = new_id[tree.children(parents)]
        parent = np.repeat(new_id[parents], tree.nchild[parents])
        e = empty[child]
        prob[child[e]] = prob[parent[e]]
    attr = np.where(nchild > 0, tree.attr[old], -1)
    is_num = np.zeros(N, dtype=bool)
    inner = attr >= 0
    is_num[inner] = ~np.asarray(nominal)[attr[inner]]
    tables = {"attr": attr, "num": is_num, "thr": tree.thr[old], "kids": kids, "frac": tree.frac[old],
              "prob": prob, "empty": empty, "dist": dist}
    return tables, int(N), int((attr < 0).sum()), len(levels) - 1


def predict_proba_tables(tables, codes, vals, miss, n_classes, device):
    """Class probabilities ``(n, n_classes)`` float64 on ``device`` (J48's ``distributionForInstance``).

    ``tables``: :func:`prediction_tables` on the device; ``codes`` / ``vals`` / ``miss``: the
    instances' nominal codes, numeric values and missing mask (``_Columns.encode_predict``).
    An instance goes down the branch of its value; with the value missing, down every non-empty
    branch with the branch's fraction of its weight; an empty child answers with its parent's
    distribution. The leaves' distributions reached are added up by weight and normalised.
    """
    t = tables
    dev = device
    n = codes.shape[0]
    codes_t = torch.as_tensor(codes, device=dev)
    vals_t = torch.as_tensor(vals, device=dev)
    miss_t = torch.as_tensor(miss, device=dev)
    out = torch.zeros(n, n_classes, dtype=torch.float64, device=dev)
    rows = torch.arange(n, device=dev)
    node = torch.zeros(n, dtype=torch.int64, device=dev)
    w = torch.ones(n, dtype=torch.float64, device=dev)
    while rows.numel():
        attr = t["attr"][node]
        leaf = attr < 0
        if bool(leaf.any()):
            lr, ln, lw = rows[leaf], node[leaf], w[leaf]
            out.index_add_(0, lr, t["prob"][ln] * lw[:, None])
        inner = ~leaf
        rows, node, w, attr = rows[inner], node[inner], w[inner], attr[inner]
        if rows.numel() == 0:
            break
        a = attr.clamp_min(0)
        m = miss_t[rows, a]
        isnum = t["num"][node]
        br = torch.where(isnum, (vals_t[rows, a] > t["thr"][node]).to(torch.int64), codes_t[rows, a])
        br = torch.where(m, torch.zeros_like(br), br)
        child = t["kids"][node, br]
        # known values: one child; an empty child answers with this node's distribution (J48)
        kr, kc, kw = rows[~m], child[~m], w[~m]
        # missing: every non-empty child with the branch fraction
        mr, mn, mw = rows[m], node[m], w[m]
        if mr.numel():
            kids = t["kids"][mn]  # (q, maxk)
            fr = t["frac"][mn]
            okk = (kids >= 0) & ~t["empty"][kids.clamp_min(0)] & (fr > 0)
            qi, bi = okk.nonzero(as_tuple=True)
            mr2, mc2, mw2 = mr[qi], kids[qi, bi], mw[qi] * fr[qi, bi]
        else:
            mr2 = mc2 = torch.zeros(0, dtype=torch.int64, device=dev)
            mw2 = torch.zeros(0, dtype=torch.float64, device=dev)
        rows = torch.cat([kr, mr2])
        node = torch.cat([kc, mc2])
        w = torch.cat([kw, mw2])
    s = out.sum(1, keepdim=True)
    return torch.where(s > 0, out / s.clamp_min(1e-300), out)
