"""Categorical Naive Bayes from one contingency pass (De Silva 2019, section 3.5.1)."""

from __future__ import annotations

import numbers
import warnings

import numpy as np
import torch
from scipy.special import logsumexp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data

from ..utils._validation import HostScoreMixin, device_array_to_tensor, is_device_array, labels_to_output, output_kind, to_output
from ..config import resolve_backend, resolve_device
from ._ops import choose_representation, contingency_tables, histogram_backend, histogram_contingency, level_offsets
from ._bits import pack_codes
from ._store import BitmapStore, BitSliceStore, _BitStore
from .._device_state import HostPickleMixin

__all__ = ["CategoricalNB"]

_REPRESENTATIONS = ("auto", "bitmap", "bitslice", "histogram")

#: Largest number of categories (largest code + 1) of one feature given as an array.
MAX_CATEGORIES = 1 << 20


class CategoricalNB(HostPickleMixin, HostScoreMixin, ClassifierMixin, BaseEstimator):
    """Naive Bayes for categorical features, counted on the GPU with bitmaps, bit-slices or a histogram.

    Same model and probabilities as :class:`sklearn.naive_bayes.CategoricalNB`:
    ``P(x_i = t | y = c) = (N_tic + alpha) / (N_c + alpha * n_categories_i)``. The
    counts ``N_tic`` of all features × classes come from one pass over the data
    (one launch): a bincount over integer codes (``representation="histogram"``) or
    AND + popcount of level bitmaps with class bitmaps (``"bitmap"`` /
    ``"bitslice"``). ``fit`` also takes a :class:`BitmapStore` /
    :class:`BitSliceStore` as ``X`` (data already packed on the device); its
    columns are the features. Counts are additive, so :meth:`partial_fit` works.

    Parameters
    ----------
    alpha : float, default=1.0
        Additive (Laplace/Lidstone) smoothing.
    force_alpha : bool, default=True
        When False, an ``alpha`` below 1e-10 is raised to 1e-10 (as scikit-learn).
    fit_prior : bool, default=True
        Learn class priors; when False use a uniform prior.
    class_prior : array-like of shape (n_classes,), default=None
        Fixed priors (override ``fit_prior``).
    min_categories : int or array-like of shape (n_features,), default=None
        Minimum number of categories per feature.
    handle_unknown : {"error", "ignore"}, default="error"
        A category at predict time beyond those seen in fit: ``"error"`` raises
        ``ValueError``; ``"ignore"`` leaves that feature out of that row's likelihood.
    representation : {"auto", "histogram", "bitmap", "bitslice"}, default="auto"
        How counts are taken. ``"auto"`` uses a given store as it is, and for
        arrays picks by measured cost (packing bitmaps for a single pass costs
        about as much as a histogram, so arrays normally go through the histogram).
        ``sample_weight`` needs ``"histogram"`` or ``"auto"``.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
    backend : {"auto", "torch", "triton"}, default="auto"
        Kernels of the counting passes. ``"triton"`` runs the Triton kernels (bitmap
        and histogram); ``"torch"`` the torch ops; ``"auto"`` the Triton bitmap
        kernels on a CUDA device and ``torch.bincount`` for the histogram (see
        :data:`gpumine.counting._ops.HISTOGRAM_AUTO_BACKEND`).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    class_count_ : ndarray of shape (n_classes,)
    class_log_prior_ : ndarray of shape (n_classes,)
    category_count_ : list of ndarray of shape (n_classes, n_categories_i)
    feature_log_prob_ : list of ndarray of shape (n_classes, n_categories_i)
    n_categories_ : ndarray of shape (n_features,)
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
    representation_ : str
        The representation the last fit used.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0, 1], [1, 1], [1, 0], [0, 0], [2, 1]])
    >>> y = np.array([0, 0, 1, 1, 0])
    >>> clf = CategoricalNB(device="cpu").fit(X, y)
    >>> clf.predict([[2, 1], [1, 0]]).tolist()
    [0, 1]
    >>> np.round(clf.predict_proba([[1, 0]]), 3).tolist()
    [[0.25, 0.75]]
    """

    def __init__(self, *, alpha=1.0, force_alpha=True, fit_prior=True, class_prior=None, min_categories=None,
                 handle_unknown="error", representation="auto", device="auto", backend="auto"):
        self.alpha = alpha
        self.force_alpha = force_alpha
        self.fit_prior = fit_prior
        self.class_prior = class_prior
        self.min_categories = min_categories
        self.handle_unknown = handle_unknown
        self.representation = representation
        self.device = device
        self.backend = backend

    # ------------------------------------------------------------------ validation
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.categorical = True
        tags.input_tags.sparse = False
        tags.input_tags.positive_only = True
        return tags

    def _check_params(self):
        if self.representation not in _REPRESENTATIONS:
            raise ValueError(f"representation must be one of {_REPRESENTATIONS}; got {self.representation!r}")
        if self.handle_unknown not in ("error", "ignore"):
            raise ValueError(f"handle_unknown must be 'error' or 'ignore'; got {self.handle_unknown!r}")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, numbers.Real) or not np.isfinite(self.alpha):
            raise ValueError(f"alpha must be a non-negative finite number; got {self.alpha!r}")
        if self.alpha < 0:
            raise ValueError(f"alpha must be non-negative; got {self.alpha}")

    def _alpha(self):
        if self.alpha < 1e-10 and not self.force_alpha:
            warnings.warn(f"alpha too small will result in numeric errors, setting alpha = {1e-10:.1e}. "
                          "Use force_alpha=True to keep alpha unchanged.", stacklevel=3)
            return 1e-10
        return float(self.alpha)

    def _codes(self, X, reset: bool):
        """Validated non-negative integer codes as a tensor on the fit device (plus the caller's output kind)."""
        kind = output_kind(X)
        if is_device_array(X):
            X = device_array_to_tensor(X, "X")  # CuPy & co.: a tensor on their device, no copy
        if isinstance(X, torch.Tensor):
            if X.ndim != 2:  # scikit-learn's words first, then the shape and the fix
                said = ("Expected 2D array, got 1D array instead" if X.ndim == 1 else
                        "Expected 2D array, got scalar array instead" if X.ndim == 0 else
                        f"Found array with dim {X.ndim}, while dim <= 2 is required")
                raise ValueError(f"X must be 2-D (n_samples, n_features); got shape {tuple(X.shape)}: {said}. Reshape "
                                 "it to one row per sample and one column per feature")
            if X.shape[0] == 0:
                raise ValueError(f"X is empty: Found array with 0 sample(s) (shape={tuple(X.shape)}) while a minimum of 1 is "
                                 "required; pass at least one row")
            if X.is_floating_point() and not bool(torch.isfinite(X).all()):
                raise ValueError("X contains NaN or infinity; CategoricalNB needs integer category codes")
            codes = X.to(torch.int64) if X.dtype not in (torch.int16, torch.int32, torch.int64, torch.uint8, torch.int8) else X
            if reset:
                self.n_features_in_ = int(X.shape[1])
                if hasattr(self, "feature_names_in_"):
                    del self.feature_names_in_
            elif X.shape[1] != self.n_features_in_:
                raise ValueError(f"X has {X.shape[1]} features, but CategoricalNB is expecting {self.n_features_in_} features as input")
        else:
            try:
                arr = validate_data(self, X, dtype="int", accept_sparse=False, ensure_all_finite=True, reset=reset)
            except ValueError as exc:
                if "could not convert" not in str(exc) and "invalid literal" not in str(exc):
                    raise
                raise ValueError(f"X holds values that are not integer category codes ({exc}); encode them first, e.g. "
                                 "with sklearn.preprocessing.OrdinalEncoder or DataFrame.apply(lambda c: c.cat.codes)") from None
            top = int(arr.max()) if arr.size else 0
            small = np.int16 if top < 2**15 else (np.int32 if top < 2**31 else np.int64)
            codes = torch.from_numpy(np.ascontiguousarray(arr.astype(small, copy=False)))
        if codes.numel() and int(codes.min()) < 0:
            raise ValueError("Negative values in data passed to CategoricalNB (input X); categories must be codes 0..n-1 "
                             "(e.g. from sklearn.preprocessing.OrdinalEncoder)")
        return codes.to(self._device), kind

    # ------------------------------------------------------------------ fitting
    def fit(self, X, y, sample_weight=None):
        """Fit from scratch: ``X`` is ``(n_samples, n_features)`` category codes, or a bitmap/bit-slice store.

        Parameters
        ----------
        X : array-like, torch.Tensor, BitmapStore or BitSliceStore
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self

        A fit that raises leaves the previous model exactly as it was (its
        attributes, private state and device tables included); scikit-learn's
        CategoricalNB may keep parts of the failed fit (its ``classes_``, say).
        """
        # the whole state, private attributes too (_device and the device table of the last model)
        saved = dict(vars(self))
        for name in [name for name in saved if name.endswith("_") and not name.startswith("_")]:
            delattr(self, name)
        try:
            return self._partial_fit(X, y, classes=None, sample_weight=sample_weight, reset=True)
        except BaseException:
            vars(self).clear()
            vars(self).update(saved)
            raise

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        """Add the counts of a batch (counts are additive). ``classes`` is required on the first call.

        A later call may pass ``classes`` again; as in scikit-learn, its sorted
        distinct labels must equal ``classes_`` (order and repeats do not matter),
        else it raises.
        """
        first = not hasattr(self, "classes_")
        if first and classes is None:
            raise ValueError("classes must be passed on the first call to partial_fit. Pass every label that can "
                             "occur, e.g. classes=np.unique(y_all)")
        if not first and classes is not None and not np.array_equal(self.classes_, _labels(classes)):
            # scikit-learn's check (sklearn.utils.multiclass._check_partial_fit_first_call) and its words
            raise ValueError("`classes=%r` is not the same as on last call to partial_fit, was: %r; pass the same "
                             "classes on later calls, or none" % (classes, self.classes_))
        return self._partial_fit(X, y, classes=classes, sample_weight=sample_weight, reset=first)

    def _partial_fit(self, X, y, classes, sample_weight, reset):
        self._check_params()
        self._device = resolve_device(self.device)
        resolve_backend(self.backend, self._device)  # raises on an unmeetable explicit request
        is_store = isinstance(X, _BitStore)
        if is_store:
            if reset:
                self.n_features_in_ = X.n_columns
                if hasattr(self, "feature_names_in_"):
                    del self.feature_names_in_
            elif X.n_columns != self.n_features_in_:
                raise ValueError(f"store has {X.n_columns} columns, but CategoricalNB is expecting {self.n_features_in_}")
            n = X.n_rows
            n_cat_X = np.asarray(X.n_levels, dtype=np.int64)
        else:
            codes, _ = self._codes(X, reset=reset)
            n = codes.shape[0]
            n_cat_X = (codes.amax(dim=0).cpu().numpy().astype(np.int64) + 1) if n else np.zeros(codes.shape[1], np.int64)
            if n_cat_X.size and n_cat_X.max() > MAX_CATEGORIES:
                j = int(n_cat_X.argmax())
                # the count table has one row per category code up to the largest: a code of 10**9 would
                # allocate gigabytes before anything fails, so refuse it with the fix
                raise ValueError(
                    f"feature {j} has category code {int(n_cat_X[j]) - 1} ({int(n_cat_X[j])} categories), more than the "
                    f"{MAX_CATEGORIES} categories "
                    "CategoricalNB counts per feature (codes must be 0..n_categories-1); re-encode it with "
                    "sklearn.preprocessing.OrdinalEncoder, bin it, or drop it (an identifier?)"
                )
        y_dev = None
        if isinstance(y, torch.Tensor) and y.ndim == 1 and not y.is_floating_point() and y.dtype != torch.bool:
            # labels already on a device: classes and codes without a host round trip of the labels
            if y.shape[0] != n:
                raise ValueError(f"y has {y.shape[0]} labels but X has {n} samples; pass one label per row of X")
            y_dev = y.to(self._device)
            if reset:
                cls = torch.unique(y_dev) if classes is None else torch.unique(torch.as_tensor(np.asarray(classes), device=self._device))
                self.classes_ = cls.cpu().numpy()
            cls_t = torch.as_tensor(self.classes_, device=self._device).to(y_dev.dtype)
            ycodes = torch.searchsorted(cls_t, y_dev)
            C0 = len(self.classes_)
            bad = (ycodes >= C0) | (cls_t[ycodes.clamp_max(C0 - 1)] != y_dev)
            if bool(bad.any()):
                raise ValueError(f"y holds label(s) {torch.unique(y_dev[bad])[:5].tolist()} not in classes "
                                 f"{self.classes_.tolist()}; pass all labels in `classes` on the first partial_fit call")
        else:
            y = column_or_1d(y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else y, warn=True)
            if y.shape[0] != n:
                raise ValueError(f"y has {y.shape[0]} labels but X has {n} samples; pass one label per row of X")
            check_classification_targets(y)
            if reset:
                self.classes_ = np.unique(y) if classes is None else np.unique(np.asarray(classes))
        if reset:
            C = len(self.classes_)
            self.class_count_ = np.zeros(C, dtype=np.float64)
            self.category_count_ = [np.zeros((C, 0)) for _ in range(self.n_features_in_)]
        C = len(self.classes_)
        if y_dev is None:
            ycodes = np.searchsorted(self.classes_, y)
            bad = (ycodes >= C) | (self.classes_[np.minimum(ycodes, C - 1)] != y)
            if bad.any():
                raise ValueError(f"y holds label(s) {np.unique(y[bad])[:5].tolist()} not in classes {self.classes_.tolist()}; "
                                 "pass all labels in `classes` on the first partial_fit call")
        n_cat = self._n_categories(n_cat_X)
        w = None
        if sample_weight is not None:
            w = np.asarray(sample_weight.detach().cpu().numpy() if isinstance(sample_weight, torch.Tensor) else sample_weight,
                           dtype=np.float64)
            if w.ndim == 0:
                w = np.full(n, float(w))
            if w.shape != (n,):
                raise ValueError(f"sample_weight has shape {w.shape}; expected ({n},)")
            if not np.all(np.isfinite(w)) or (w < 0).any():
                raise ValueError("sample_weight must be finite and non-negative")
            if n and not (w > 0).any():
                raise ValueError("Sample weights must contain at least one non-zero number; pass positive weights")
        counts, rep = self._count(X if is_store else codes, is_store, ycodes, C, n_cat, w)
        self.representation_ = rep
        counts = counts.cpu().numpy().astype(np.float64)  # (sum n_cat, C)
        offs = level_offsets(n_cat)
        cls_counts = counts[offs[0]:offs[1]].sum(0)
        self.class_count_ += cls_counts
        for i in range(self.n_features_in_):
            block = counts[offs[i]:offs[i + 1]].T  # (C, n_cat_i)
            old = self.category_count_[i]
            k = max(old.shape[1], block.shape[1])
            new = np.zeros((C, k))
            new[:, :old.shape[1]] += old
            new[:, :block.shape[1]] += block
            self.category_count_[i] = new
        self.n_categories_ = np.array([cc.shape[1] for cc in self.category_count_], dtype=np.int64)
        self._update_model()
        return self

    def _n_categories(self, n_cat_X):
        n_cat = np.asarray(n_cat_X, dtype=np.int64)
        if self.min_categories is not None:
            mc = np.asarray(self.min_categories)
            if not np.issubdtype(mc.dtype, np.signedinteger):
                raise ValueError(f"'min_categories' should have integral type. Got {mc.dtype} instead.")
            n_cat = np.maximum(n_cat, mc, dtype=np.int64)
            if n_cat.shape != n_cat_X.shape:
                raise ValueError(f"'min_categories' should have shape ({len(n_cat_X)},) when an array-like is provided. "
                                 f"Got {mc.shape} instead.")
        return n_cat

    def _count(self, X, is_store, ycodes, C, n_cat, w):
        dev = self._device
        backend = resolve_backend(self.backend, dev)
        rep = self.representation
        if is_store:
            store = X.to(dev) if X.device != dev else X
            if rep == "histogram":
                raise ValueError("representation='histogram' needs integer codes, not a store; pass X as an array")
            if w is not None:
                raise ValueError("sample_weight needs counts by histogram; pass X as an array with representation='auto' or 'histogram'")
            if rep == "bitmap" and isinstance(store, BitSliceStore):
                store = store.to_bitmap()
            elif rep == "bitslice" and isinstance(store, BitmapStore):
                store = store.to_bitslice()
            counts = contingency_tables(store, pack_codes(torch.as_tensor(ycodes, device=dev), C) & store.tail, backend=backend)
            counts = _pad_levels(counts, store.n_levels, n_cat)
            return counts, store.kind
        if rep == "auto":
            rep = "histogram" if w is not None else choose_representation(
                X.shape[0], n_cat, C, device=dev, backend=backend,
                histogram_backend=histogram_backend(self.backend, dev))
        if rep in ("bitmap", "bitslice"):
            if w is not None:
                raise ValueError(f"representation={rep!r} counts rows by popcount and cannot apply sample_weight; "
                                 "use representation='histogram' or 'auto'")
            store = (BitmapStore if rep == "bitmap" else BitSliceStore).from_codes(X, [int(k) for k in n_cat])
            return contingency_tables(store, pack_codes(torch.as_tensor(ycodes, device=dev), C), backend=backend), rep
        yt = torch.as_tensor(ycodes, device=dev)
        wt = None if w is None else torch.as_tensor(w, device=dev)
        return histogram_contingency(X, [int(k) for k in n_cat], yt, C, wt, backend=self.backend), "histogram"

    def _update_model(self):
        alpha = self._alpha()
        self.feature_log_prob_ = []
        for cc in self.category_count_:
            smoothed = cc + alpha
            with np.errstate(divide="ignore", invalid="ignore"):
                self.feature_log_prob_.append(np.log(smoothed) - np.log(smoothed.sum(axis=1).reshape(-1, 1)))
        C = len(self.classes_)
        if self.class_prior is not None:
            prior = np.asarray(self.class_prior, dtype=np.float64)
            if len(prior) != C:
                raise ValueError("Number of priors must match number of classes.")
            self.class_log_prior_ = np.log(prior)
        elif self.fit_prior:
            with np.errstate(divide="ignore", invalid="ignore"):
                self.class_log_prior_ = np.log(self.class_count_) - np.log(self.class_count_.sum())
        else:
            self.class_log_prior_ = np.full(C, -np.log(C))
        flp = np.concatenate([f.T for f in self.feature_log_prob_], axis=0) if self.feature_log_prob_ else np.zeros((0, C))
        self._flp_cache = (torch.as_tensor(flp, device=self._device),
                           torch.as_tensor(level_offsets(self.n_categories_)[:-1], device=self._device))

    # ------------------------------------------------------------------ prediction
    def _table(self):
        return self._flp_cache

    def _joint_log_likelihood_t(self, X):
        check_is_fitted(self)
        codes, kind = self._codes(X, reset=False)
        codes = codes.to(torch.int64)
        flp, offs = self._table()
        ncat = torch.as_tensor(self.n_categories_, device=self._device)
        unknown = codes >= ncat
        if bool(unknown.any()):
            if self.handle_unknown == "error":
                r, j = (int(v) for v in unknown.nonzero()[0])
                raise ValueError(
                    f"X has category {int(codes[r, j])} in feature {j} (row {r}) that was not seen in fit "
                    f"(feature {j} has categories 0..{int(self.n_categories_[j]) - 1}); refit with data holding it, "
                    "set min_categories, or use handle_unknown='ignore'"
                )
        jll = torch.zeros(codes.shape[0], len(self.classes_), dtype=torch.float64, device=self._device)
        for i in range(codes.shape[1]):
            idx = torch.where(unknown[:, i], 0, codes[:, i]) + offs[i]
            contrib = flp[idx]
            if self.handle_unknown == "ignore":
                contrib = torch.where(unknown[:, i:i + 1], 0.0, contrib)
            jll += contrib
        jll += torch.as_tensor(self.class_log_prior_, device=self._device)
        return jll, kind

    def predict_joint_log_proba(self, X):
        """Joint log probability ``log P(x, c)`` per class, ``(n_samples, n_classes)``."""
        jll, kind = self._joint_log_likelihood_t(X)
        return to_output(jll, kind)

    def predict_log_proba(self, X):
        """Log of :meth:`predict_proba`."""
        jll, kind = self._joint_log_likelihood_t(X)
        return to_output(jll - torch.logsumexp(jll, dim=1, keepdim=True), kind)

    def predict_proba(self, X):
        """Class probabilities, ``(n_samples, n_classes)``, columns in the order of ``classes_``."""
        jll, kind = self._joint_log_likelihood_t(X)
        if kind.kind == "numpy":  # NumPy input: scipy's logsumexp, as scikit-learn
            j = jll.cpu().numpy()
            return to_output(torch.from_numpy(np.exp(j - logsumexp(j, axis=1)[:, None])), kind)
        return to_output(torch.exp(jll - torch.logsumexp(jll, dim=1, keepdim=True)), kind)

    def predict(self, X):
        """The most probable class of each row (the first in ``classes_`` order on ties)."""
        jll, kind = self._joint_log_likelihood_t(X)
        return labels_to_output(self.classes_[jll.argmax(dim=1).cpu().numpy()], kind)


def _labels(classes) -> np.ndarray:
    """The sorted distinct labels of ``classes`` (a list, an array or a tensor), as scikit-learn's ``unique_labels``."""
    if isinstance(classes, torch.Tensor):
        classes = classes.detach().cpu().numpy()
    return np.unique(np.asarray(classes))


def _pad_levels(counts, have, want):
    """Re-lay a stacked table with ``have[j]`` levels per column into ``want[j] >= have[j]`` levels."""
    have = [int(h) for h in have]
    want = [int(w) for w in want]
    if have == want:
        return counts
    out = torch.zeros(sum(want), counts.shape[1], dtype=counts.dtype, device=counts.device)
    ho, wo = level_offsets(have), level_offsets(want)
    for j in range(len(have)):
        out[wo[j]:wo[j] + have[j]] = counts[ho[j]:ho[j + 1]]
    return out

