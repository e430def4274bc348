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

Layout: this module holds the estimator and its growth driver; the inputs are split into row
partitions in :mod:`._tree_inputs`, each partition's work and the sums of its results are
:mod:`._tree_partitions`, and the pruning with whole counts is :mod:`._tree_raising`.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import torch

from ..counting._ops import histogram_backend, level_offsets
from ..counting.tree._classifier import C45Classifier as _LocalC45
from ..counting.tree._estimates import _SMALL
from ..counting.tree._growth import _in_average_gain, _TreeGrower
from ..counting.tree._nodes import _Nodes, recompute_depths
from ..counting.tree._pruning import left_branch_last_codes, prune_raising
from ..counting.tree._split_search import _lnf, _LnfTable, attribute_groups, chosen_split_details
from ._inputs import is_dask, row_partitions
from ._knn import _client, tree_reduce
from ._tree_inputs import _input_parts
from ._tree_partitions import (_add, _add_step, _children_counts, _encode, _has_rows, _merge_summaries, _merged_columns,
                               _query_extras, _release_growth, _step, _step_summary, _summarize, _summary_of, _summed,
                               _tested_columns)
from ._tree_raising import _CountedRaising

__all__ = ["C45Classifier"]


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
