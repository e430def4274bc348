"""The C4.5 estimator (:class:`C45Classifier`): parameters, input checks, and the fit's and prediction's steps.

The work is done in the modules beside it: :mod:`._encoding` (data to codes), :mod:`._growth`
(breadth-first growth from batched counts), :mod:`._split_search` (J48's gain ratio),
:mod:`._pruning` / :mod:`._pruning_whole` (collapsing and pessimistic pruning),
:mod:`._prediction` and :mod:`._export`.
"""

from __future__ import annotations

import numbers

import numpy as np
import pandas as pd
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from ..._device_state import HostPickleMixin
from ...utils._validation import HostScoreMixin, device_array_to_tensor, is_device_array, labels_to_output, output_kind, to_output
from ...config import resolve_backend, resolve_device
from .._ops import histogram_backend
from ._encoding import _Columns, _FrameColumns, encode_labels
from ._estimates import _SMALL
from ._export import export_text
from ._growth import _TreeGrower
from ._prediction import predict_proba_tables, prediction_tables
from ._pruning import collapse, prune_raising, prune_replacement
from ._split_search import _lnf, attribute_groups, select_splits

__all__ = ["C45Classifier"]

_REPRESENTATIONS = ("auto", "bitmap", "bitslice", "histogram")


class C45Classifier(HostPickleMixin, HostScoreMixin, ClassifierMixin, BaseEstimator):
    """C4.5 decision tree (Weka J48 rules) grown from batched counts on the GPU.

    Parameters
    ----------
    min_samples_leaf : int, default=2
        J48's ``minNumObj``: a split needs two branches with at least this weight.
    confidence : float in (0, 0.5], default=0.25
        Confidence factor of pessimistic pruning (smaller prunes more).
    max_depth : int, default=None
        Depth limit (the root has depth 0).
    prune : bool, default=True
        Pessimistic subtree-replacement pruning (``False``: J48 ``-U``).
    collapse : bool, default=True
        Collapse subtrees that do not reduce training errors (J48's default).
    subtree_raising : bool, default=True
        During pruning, also consider replacing a node by its largest branch, with
        the node's training instances routed through that branch (J48's default;
        ``False`` is ``J48 -S``: subtree replacement only). Runs on the host
        (NumPy), vectorised over the nodes of equal height, over the training
        instances of each node (:func:`gpumine.counting.tree._pruning.prune_raising`).
    categorical_features : None, "all", array of indices or bool mask, default=None
        Nominal features (multiway splits). ``None``: the non-numeric columns of a
        DataFrame; every column of an array is numeric.
    max_bins : int, default=256
        Numeric features with more distinct values are cut into this many
        equal-frequency bins (cut points between bins only).
    handle_unknown : {"error", "missing"}, default="error"
        A nominal category at predict time that fit never saw: raise, or treat as missing.
    representation : {"auto", "histogram", "bitmap", "bitslice"}, default="auto"
        How the per-depth counts are taken (see :mod:`gpumine.counting.tree`). Fractional
        weights (sample weights, missing values) always count by histogram.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
    backend : {"auto", "torch", "triton"}, default="auto"
        Kernels of the counting passes. ``"triton"`` runs the Triton kernels (bitmap
        and histogram); ``"torch"`` the torch ops; ``"auto"`` the Triton bitmap
        kernels on a CUDA device and ``torch.bincount`` for the histogram (see
        :data:`gpumine.counting._ops.HISTOGRAM_AUTO_BACKEND`).

    Attributes
    ----------
    classes_ : ndarray
    n_features_in_ : int
    feature_names_in_ : ndarray (when fit on a DataFrame with string column names)
    n_nodes_, n_leaves_, depth_ : int
    representations_ : list of str
        The representation used at each depth that had a node to split (the
        depths whose nodes are all leaves need no contingency table).

    Examples
    --------
    >>> import pandas as pd
    >>> X = pd.DataFrame({"outlook": ["sunny", "sunny", "overcast", "rainy", "rainy", "rainy", "overcast",
    ...                               "sunny", "sunny", "rainy", "sunny", "overcast", "overcast", "rainy"],
    ...                   "windy": [False, True, False, False, False, True, True,
    ...                             False, False, False, True, True, False, True]})
    >>> y = ["no", "no", "yes", "yes", "yes", "no", "yes", "no", "yes", "yes", "yes", "yes", "yes", "no"]
    >>> tree = C45Classifier(min_samples_leaf=1, device="cpu").fit(X, y)
    >>> print(tree.export_text())
    outlook = overcast: yes (4.0)
    outlook = rainy
    |   windy = False: yes (3.0)
    |   windy = True: no (2.0)
    outlook = sunny: no (5.0/2.0)
    >>> tree.predict(pd.DataFrame({"outlook": ["rainy", "overcast"], "windy": [True, True]})).tolist()
    ['no', 'yes']
    """

    def __init__(self, min_samples_leaf=2, confidence=0.25, max_depth=None, *, prune=True, collapse=True,
                 subtree_raising=True, categorical_features=None, max_bins=256, handle_unknown="error",
                 representation="auto", device="auto", backend="auto"):
        self.min_samples_leaf = min_samples_leaf
        self.confidence = confidence
        self.max_depth = max_depth
        self.prune = prune
        self.collapse = collapse
        self.subtree_raising = subtree_raising
        self.categorical_features = categorical_features
        self.max_bins = max_bins
        self.handle_unknown = handle_unknown
        self.representation = representation
        self.device = device
        self.backend = backend

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.input_tags.categorical = True
        tags.input_tags.string = True
        return tags

    # ------------------------------------------------------------------ input
    def _check_params(self):
        m = self.min_samples_leaf
        if isinstance(m, bool) or not isinstance(m, numbers.Real) or m < 1:
            raise ValueError(f"min_samples_leaf must be a number >= 1; got {m!r}")
        cf = self.confidence
        if isinstance(cf, bool) or not isinstance(cf, numbers.Real) or not 0 < cf <= 0.5:
            raise ValueError(f"confidence must be in (0, 0.5]; got {cf!r}")
        depth = self.max_depth
        if depth is not None and (isinstance(depth, bool) or not isinstance(depth, numbers.Integral) or depth < 0):
            raise ValueError(f"max_depth must be a non-negative integer or None; got {self.max_depth!r}")
        if isinstance(self.max_bins, bool) or not isinstance(self.max_bins, numbers.Integral) or self.max_bins < 2:
            raise ValueError(f"max_bins must be an integer >= 2; got {self.max_bins!r}")
        if self.handle_unknown not in ("error", "missing"):
            raise ValueError(f"handle_unknown must be 'error' or 'missing'; got {self.handle_unknown!r}")
        if self.representation not in _REPRESENTATIONS:
            raise ValueError(f"representation must be one of {_REPRESENTATIONS}; got {self.representation!r}")

    def _to_frame(self, X, reset):
        """A 2-D object, integer or float64 NumPy matrix (or :class:`_FrameColumns`), the numeric-column mask and
        the column names; sets / checks feature names and count."""
        names = None
        if isinstance(X, pd.DataFrame):
            names = [str(c) for c in X.columns]
            is_num = np.array([pd.api.types.is_numeric_dtype(X[c]) and not pd.api.types.is_bool_dtype(X[c])
                               for c in X.columns])
            if is_num.all():
                arr = X.to_numpy(dtype=np.float64, na_value=np.nan)
            else:
                # numeric float64 only where a plain NumPy / nullable dtype converts as the boxed values would
                fast = np.array([is_num[i] and getattr(t, "kind", "O") in "iuf" for i, t in enumerate(X.dtypes)],
                                dtype=bool)
                arr = _FrameColumns(X, fast)
        else:
            if is_device_array(X):  # CuPy & co.: the tree is grown and walked on the host
                X = device_array_to_tensor(X, "X")
            if isinstance(X, torch.Tensor):
                X = X.detach().cpu().numpy()
            if hasattr(X, "toarray") and hasattr(X, "nnz"):
                raise TypeError("sparse input is not supported; convert it with X.toarray()")
            arr = np.asarray(X)
            if arr.dtype.kind == "c":
                raise ValueError("Complex data not supported; pass real numbers")
            if arr.dtype.kind not in "biufOUSb":
                raise ValueError(f"X has dtype {arr.dtype}, which is not supported")
            if arr.dtype.kind == "b" or (arr.dtype.kind == "f" and arr.dtype != np.float64):
                # integers stay: their columns are read as float64 where needed (no float64 copy of all of X)
                arr = arr.astype(np.float64)
            if arr.dtype.kind in "US":
                arr = arr.astype(object)
            if arr.dtype.kind == "c":
                raise ValueError("complex data is not supported")
            is_num = np.full(arr.shape[1] if arr.ndim == 2 else 0, arr.dtype.kind in "iuf")
        if arr.ndim != 2:
            raise ValueError(f"Expected 2D array, got {arr.ndim}D array instead. Reshape your data either using "
                             "array.reshape(-1, 1) if your data has a single feature or array.reshape(1, -1) "
                             "if it contains a single sample.")
        if arr.shape[0] == 0:
            raise ValueError(f"Found array with 0 sample(s) (shape={arr.shape}) while a minimum of 1 is required.")
        if arr.shape[1] == 0:
            raise ValueError(f"Found array with 0 feature(s) (shape={arr.shape}) while a minimum of 1 is required.")
        if reset:
            self.n_features_in_ = arr.shape[1]
            if names is not None and all(isinstance(c, str) for c in X.columns):
                self.feature_names_in_ = np.asarray(names, dtype=object)
            elif hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
        else:
            if arr.shape[1] != self.n_features_in_:
                raise ValueError(f"X has {arr.shape[1]} features, but C45Classifier is expecting {self.n_features_in_} "
                                 "features as input; pass data with the same columns as in fit")
            if hasattr(self, "feature_names_in_") and names is not None and list(self.feature_names_in_) != names:
                raise ValueError("The feature names should match those that were passed during fit.")
        if arr.dtype.kind == "f" and np.isinf(arr).any():
            raise ValueError("Input X contains infinity or a value too large for dtype('float64'); "
                             "use NaN for missing values")
        return arr, is_num, names

    def _nominal_mask(self, is_num, n_features):
        cf = self.categorical_features
        if cf is None:
            return ~is_num
        if isinstance(cf, str):
            if cf != "all":
                raise ValueError(f"categorical_features must be None, 'all', indices or a bool mask; got {cf!r}")
            return np.ones(n_features, dtype=bool)
        cf = np.asarray(cf)
        if cf.size == 0:
            cf = cf.astype(np.int64)
        if cf.dtype.kind not in "biu":
            raise ValueError("categorical_features must be None, 'all', integer indices or a bool mask; "
                             f"got {cf.tolist()!r}")
        if cf.dtype == bool:
            if cf.shape != (n_features,):
                raise ValueError(f"categorical_features as a mask must have shape ({n_features},); got {cf.shape}")
            mask = cf.copy()
        else:
            mask = np.zeros(n_features, dtype=bool)
            if cf.size and (cf.min() < -n_features or cf.max() >= n_features):
                raise ValueError(f"categorical_features indices must lie in [0, {n_features}); got {cf.tolist()}")
            mask[cf] = True
        if (~mask & ~is_num).any():
            j = int(np.flatnonzero(~mask & ~is_num)[0])
            raise ValueError(f"feature {j} holds non-numeric values; list it in categorical_features")
        return mask

    # ------------------------------------------------------------------ fit
    def fit(self, X, y, sample_weight=None):
        """Grow (and prune) the tree.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features); NaN / None are missing values
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self
        """
        self._check_params()
        self._device = resolve_device(self.device)
        self._backend = resolve_backend(self.backend, self._device)
        self._hist_backend = histogram_backend(self.backend, self._device)
        arr, is_num, names = self._to_frame(X, reset=True)
        self.classes_, ycodes = encode_labels(y, arr.shape[0])
        n, d = arr.shape
        w = None
        if sample_weight is not None:
            w = np.asarray(sample_weight, dtype=np.float64)
            if w.ndim == 0:
                w = np.full(n, float(w))
            if w.shape != (n,):
                raise ValueError(f"sample_weight has shape {w.shape}; expected ({n},)")
            if not np.isfinite(w).all() or (w < 0).any():
                raise ValueError("sample_weight must be finite and non-negative")
            if not (w > 0).any():
                raise ValueError("Sample weights must contain at least one non-zero number; pass positive weights")
            if np.all(w == 1.0):
                w = None
            elif (w == 0).any():
                # zero weight is the same as absent: such rows must not shape the encoding either
                keep = w > 0
                arr = arr.take(keep) if isinstance(arr, _FrameColumns) else arr[keep]
                ycodes, w = ycodes[keep], w[keep]
                n = arr.shape[0]
        nominal = self._nominal_mask(is_num, d)
        if isinstance(arr, _FrameColumns):
            arr.nominal = nominal
        self._names = names or [f"x{j}" for j in range(d)]
        self._cols = _Columns(arr, nominal, int(self.max_bins), self._names, device=self._device)
        # host copies for the pruning, which runs on the host (on a GPU: no copies back of what was sent)
        codes_h = torch.from_numpy(self._cols.encode_train(arr))
        y_h = torch.from_numpy(ycodes.astype(np.int64, copy=False))
        w_h = None if w is None else torch.from_numpy(w)
        codes, y_t = codes_h.to(self._device), y_h.to(self._device)
        w_t = None if w is None else w_h.to(self._device)
        try:
            self._grow(codes, y_t, w_t, n)
            if self.collapse:
                self._collapse(0)
            if self.prune:
                if self.subtree_raising:
                    self._prune_raising(codes_h, y_h, w_h)
                else:
                    self._prune()
        finally:
            self._row_node = None  # the growth's leaf of every row, for the pruning only
        self._finalize()
        self._tree.trim()
        return self

    # The steps of the fit are methods, each the call of its module's function, so that one can be timed or swapped
    # for a reference implementation (the tests and benchmarks do both).

    #: Derive a child's count table from its parent's (``None``: on CPU devices only); see :mod:`._growth`.
    _sibling_subtraction = None

    def _grow(self, codes, y, w, n):
        """Grow the tree breadth-first (:class:`._growth._TreeGrower`): sets ``_tree``, ``representations_`` and
        ``_row_node`` (the growth's leaf of every row, or ``None``)."""
        # on the CPU the histogram is the larger part of a depth: a splittable child with more rows than its
        # siblings together gets its table as its parent's minus theirs (on a GPU the counting is cheap, and the
        # node map the host would send is one more wait per depth)
        subtract = self._sibling_subtraction if self._sibling_subtraction is not None else self._device.type == "cpu"
        grower = _TreeGrower(self._cols, len(self.classes_), min_leaf=self.min_samples_leaf, max_depth=self.max_depth,
                             representation=self.representation, device=self._device, backend=self._backend,
                             hist_backend=self._hist_backend, sibling_subtraction=subtract,
                             select_splits=self._select_sub)
        self.representations_ = grower.representations
        self._tree, self._row_node = grower.grow(codes, y, w, n)

    def _attr_groups(self, L_off, device):
        """The attribute groups of the split search (:func:`._split_search.attribute_groups`)."""
        return attribute_groups(self._cols, L_off, device)

    def _select_sub(self, counts, tot, total, L_off, counted, C, minobj, lnf=_lnf, groups=None):
        """The split search of one depth (:func:`._split_search.select_splits`)."""
        return select_splits(self._cols, counts, tot, total, L_off, counted, C, minobj, lnf, groups)

    def _collapse(self, root):
        """J48's collapsing of the subtree at ``root`` (:func:`._pruning.collapse`)."""
        collapse(self._tree, root)

    def _prune(self):
        """Pessimistic subtree replacement, ``J48 -S`` (:func:`._pruning.prune_replacement`)."""
        prune_replacement(self._tree, self.confidence)

    def _prune_raising(self, codes, y, w):
        """Pessimistic pruning with subtree raising, J48's default (:func:`._pruning.prune_raising`); ``codes``,
        ``y``, ``w``: the training data as host tensors."""
        prune_raising(self._tree, self._cols, codes.cpu().numpy(), y.cpu().numpy(),
                      None if w is None else w.cpu().numpy(), self.confidence,
                      row_node=getattr(self, "_row_node", None), sort_device=self._device)

    def _finalize(self):
        """Prediction tables of the final tree (:func:`._prediction.prediction_tables`), on the device too."""
        self._t, self.n_nodes_, self.n_leaves_, self.depth_ = prediction_tables(self._tree, self._cols.nominal)
        dev = self._device
        self._dev_tables = {k: torch.as_tensor(v, device=dev) for k, v in self._t.items() if k != "dist"}

    # ------------------------------------------------------------------ predict
    def _proba(self, X):
        """Class probabilities as a tensor on the device, and the output kind."""
        check_is_fitted(self, "n_nodes_")
        kind = output_kind(X)
        arr, _, _ = self._to_frame(X, reset=False)
        codes, vals, miss = self._cols.encode_predict(arr, self.handle_unknown)
        return predict_proba_tables(self._dev_tables, codes, vals, miss, len(self.classes_), self._device), kind

    def predict_proba(self, X):
        """Class probabilities ``(n_samples, n_classes)`` (J48's ``distributionForInstance``)."""
        out, kind = self._proba(X)
        return to_output(out, kind)

    def predict(self, X):
        """The most probable class (first in ``classes_`` order within 1e-6, as J48)."""
        out, kind = self._proba(X)
        p = out.detach().cpu().numpy()
        best = p.max(1, keepdims=True)
        idx = (p >= best - _SMALL).argmax(1)
        return labels_to_output(self.classes_[idx], kind)

    # ------------------------------------------------------------------ text
    def export_text(self, feature_names=None, decimals=6):
        """The tree in Weka J48's text layout: ``attr = value: class (weight/errors)``."""
        check_is_fitted(self, "n_nodes_")
        names = list(feature_names) if feature_names is not None else self._names
        return export_text(self._t, self.classes_, names, self._cols.values, decimals)
