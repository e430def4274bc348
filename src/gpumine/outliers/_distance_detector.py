"""``DistanceOutlierDetector``: top-n distance-based outliers as a scikit-learn estimator.

A thin adapter over :mod:`gpumine.outliers._distance_based` (validation,
fitted attributes, output kinds). The fitted model is the *solving set*: a
subset S of the training points, with their weights, such that every training
point outside S has a weight against S below the cutoff (Angiulli, Basta &
Pizzuti 2006). It decides for new points whether they would be top-n
outliers by comparing them with S only.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.base import BaseEstimator, OutlierMixin
from sklearn.utils.validation import check_is_fitted

from ..utils._validation import check_array, check_n_features, output_kind, to_attribute, to_output
from ..config import resolve_device, working_memory_bytes
from ._distance_based import (
    check_candidates,
    check_include_self,
    check_method,
    check_n_outliers,
    check_solving_set_backend,
    effective_k,
    engine_backend,
    resolve_method,
    run,
    seed_from,
    weights_against,
)
from ._weights import PairSpace, resolve_metric
from .._device_state import HostPickleMixin

try:  # keeps feature-name checks identical to scikit-learn's own estimators
    from sklearn.utils.validation import _check_feature_names
except ImportError:  # pragma: no cover - very old scikit-learn
    def _check_feature_names(estimator, X, *, reset):
        return None

__all__ = ["DistanceOutlierDetector"]


def _row_keys(X: np.ndarray) -> np.ndarray:
    """One opaque key per row: equal keys exactly when the rows are equal (-0.0 is 0.0)."""
    X = np.ascontiguousarray(X) + X.dtype.type(0)  # turns -0.0 into +0.0
    return X.view(np.dtype((np.void, X.dtype.itemsize * X.shape[1]))).ravel()


class DistanceOutlierDetector(HostPickleMixin, OutlierMixin, BaseEstimator):
    """Top-n distance-based outliers (sum of distances to the k nearest neighbours), exact, on GPU or CPU.

    ``fit(X)`` finds the ``n_outliers`` points of ``X`` with the largest
    weight w(p) = sum of the distances from p to its ``n_neighbors`` nearest
    neighbours, by SolvingSet or brute force (see
    :func:`gpumine.outliers.top_n_outliers`); they get label -1. The
    solving set is kept as the model that ``predict`` uses. With brute force
    (which ``method="auto"`` runs at sizes that depend on the device) it is
    every training point, and new points' weights are exact; a SolvingSet
    model's weights of new points are upper bounds (it labels an outlier every
    point brute force labels one). So under ``"auto"``, ``predict`` and
    ``score_samples`` on new points may differ between devices: pin ``method``
    for the same model everywhere.

    Parameters
    ----------
    n_neighbors : int, default=5
        k.
    n_outliers : int, optional
        How many training points are outliers. When None, as many as
        scikit-learn, PyOD and gpumine's LOF label with ``contamination``
        (the points strictly beyond the interpolated percentile):
        ``ceil(contamination * (n_samples - 1))``, at least 1.
    contamination : float in (0, 0.5], default=0.1
        Fraction of outliers, used when ``n_outliers`` is None.
    method : {"auto", "solving_set", "brute_force"}, default="auto"
        Both find the same outliers with the same weights. With brute force the
        model is the whole training set (trivially a solving set). ``"auto"``
        picks as :func:`gpumine.outliers.top_n_outliers` does (brute force on
        a GPU up to 65,536 rows; on the CPU at few features or small sizes);
        ``method_`` says which ran.
    n_candidates : int or "auto", default="auto"
        Candidates per SolvingSet iteration (1024 on a GPU, 256 on the CPU).
    include_self : bool, default=False
        Count each point as its own first neighbour at distance 0, as the
        seed paper does (a weight then sums the k - 1 nearest other points).
        The default excludes it, as scikit-learn, PyOD and ELKI.
    metric : str, default="euclidean"
        ``"euclidean"``, ``"sqeuclidean"``, ``"manhattan"``, ``"chebyshev"``,
        ``"minkowski"`` (with ``p``) or ``"cosine"``.
    p : float, optional
        Minkowski power.
    random_state : int, None or NumPy generator, default=0
        Seeds the first SolvingSet candidates (changes the solving set, never
        the outliers).
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
    backend : {"auto", "torch", "triton"}, default="auto"
        Kernels of the kNN engine (brute force and ``predict``); the
        solving-set tiles run torch operations, so ``"triton"`` with
        ``method="solving_set"`` raises.
    working_memory : float, optional
        MiB for one tile's temporaries.
    verbose : int, optional
        0 hides the progress bar.

    Attributes
    ----------
    labels_ : ndarray (n_samples,) of int
        -1 for the top-n outliers of the training set, +1 for the others.
    outlier_indices_ : ndarray (n_outliers_,) of int64
        The outliers, largest weight first (ties: lower index first).
    outlier_scores_ : ndarray (n_samples,) of float64
        Weights of the training points. Exact for the outliers, for every
        point that was compared with all others, and for all points with
        brute force; for the other points (``outlier_scores_exact_`` False)
        an upper bound of the weight below ``threshold_``, which is all the
        solving set ever needs to know about them.
    outlier_scores_exact_ : ndarray (n_samples,) of bool
    threshold_ : float
        Weight of the n-th outlier (the paper's w*).
    offset_ : float
        ``-threshold_`` raised by one float64 step, so that
        ``decision_function < 0`` exactly when the weight reaches
        ``threshold_``.
    n_outliers_ : int
    solving_set_ : ndarray of int64
        Training indices of the solving set, in the order they became
        candidates (all indices with brute force).
    method_ : str
        ``"solving_set"`` or ``"brute_force"``: the method that ran.
    n_iter_ : int
    distances_computed_ : int
    distance_fraction_ : float
        Computed pairs over all n(n-1)/2 pairs.
    n_features_in_ : int
    feature_names_in_ : ndarray of str (when fitted on a DataFrame)

    Notes
    -----
    **What ``predict`` computes.** Rows of ``X`` are weighed against the
    solving set S, never against the whole training set:

    * a row *equal* (bit for bit) to a point of S *is* that training point:
      it gets that point's stored weight (its weight in the training set);
    * every other row is a new point q: its weight is the sum of distances
      to its k nearest points of S (with ``include_self=True``, q is its own
      zero-distance first neighbour and the k - 1 nearest points of S follow).

    A row is an outlier (-1) when its weight reaches ``threshold_``. On the
    training set this reproduces ``labels_`` (up to ties at the threshold,
    which ``labels_`` breaks by index): a training point outside S has a
    weight against S below the threshold (the defining property of a solving
    set), and the outliers are in S with their exact weights. For a new point
    the weight against S bounds its weight against the training set from
    above, so an inlier verdict is certain and an outlier verdict means "would
    at least be close to the top n" (the paper's prediction rule).

    ``score_samples`` is the negated weight (larger = more normal) and
    ``decision_function = score_samples - offset_``, as scikit-learn.
    """

    def __init__(
        self,
        n_neighbors=5,
        *,
        n_outliers=None,
        contamination=0.1,
        method="auto",
        n_candidates="auto",
        include_self=False,
        metric="euclidean",
        p=None,
        random_state=0,
        device="auto",
        backend="auto",
        working_memory=None,
        verbose=None,
    ):
        self.n_neighbors = n_neighbors
        self.n_outliers = n_outliers
        self.contamination = contamination
        self.method = method
        self.n_candidates = n_candidates
        self.include_self = include_self
        self.metric = metric
        self.p = p
        self.random_state = random_state
        self.device = device
        self.backend = backend
        self.working_memory = working_memory
        self.verbose = verbose

    # -- fitting -----------------------------------------------------------------------
    def _resolve_n_outliers(self, n_samples: int) -> int:
        if self.n_outliers is not None:
            return check_n_outliers(self.n_outliers, n_samples)
        c = self.contamination
        if isinstance(c, bool) or not isinstance(c, numbers.Real) or not 0.0 < c <= 0.5:
            raise ValueError(
                f"contamination must be a float in (0, 0.5]; got {c!r} (or set n_outliers to an int)"
            )
        # points beyond the interpolated (n_samples - 1) * c position of the sorted scores
        return max(1, min(n_samples, math.ceil(float(c) * (n_samples - 1) - 1e-9)))

    def fit(self, X, y=None):
        """Find the top-n outliers of ``X`` and keep the solving set as the model."""
        method = check_method(self.method)
        include_self = check_include_self(self.include_self)
        metric = resolve_metric(self.metric, self.p)
        dev = resolve_device(self.device)
        budget = working_memory_bytes(self.working_memory, dev)
        if sp.issparse(X):
            raise TypeError("sparse input is not supported by gpumine estimators; convert X with X.toarray()")
        _check_feature_names(self, X, reset=True)
        Xt = check_array(X, name="X")
        n = Xt.shape[0]
        if n < 2:
            raise ValueError(
                f"Found array with n_samples = {n} while a minimum of 2 is required: a weight needs at least "
                "one other point"
            )
        k_other = effective_k(self.n_neighbors, n, include_self, name="n_neighbors")
        n_out = self._resolve_n_outliers(n)
        method = resolve_method(method, dev, n, Xt.shape[1])
        if method == "solving_set":
            check_solving_set_backend(self.backend, dev, Xt.shape[1], k_other)
        m = check_candidates(self.n_candidates, dev, n, Xt.shape[1], k_other)
        out = run(Xt, n_out, k_other, method=method, n_candidates=m, metric=metric, seed=seed_from(self.random_state),
                  device=dev, budget=budget, backend=self.backend, verbose=self.verbose)
        kind = output_kind(X)
        self._fit_kind = kind
        self._k_other = k_other
        self._metric = metric
        self.device_ = dev
        self.method_ = method
        self.effective_metric_ = metric.name
        self.n_features_in_ = Xt.shape[1]
        self.n_samples_fit_ = n
        self.n_outliers_ = n_out
        solving = out["solving_set"]
        labels = torch.ones(n, dtype=torch.int64, device=dev)
        labels[out["top_indices"]] = -1
        # fitted attributes keep the kind of X whatever output_type says (see gpumine.config)
        self._labels = labels
        self.labels_ = to_attribute(labels, kind)
        self.outlier_indices_ = to_attribute(out["top_indices"], kind)
        self.outlier_scores_ = to_attribute(out["scores"], kind)
        self.outlier_scores_exact_ = to_attribute(out["scores_exact"], kind)
        self.threshold_ = float(out["threshold"])
        self.offset_ = float(np.nextafter(-self.threshold_, np.inf))
        self.solving_set_ = to_attribute(solving, kind)
        self.n_iter_ = int(out["iterations"])
        self.distances_computed_ = int(out["distances"])
        self.distance_fraction_ = out["distances"] / (n * (n - 1) / 2)
        # the model: the solving set's points, their weights, and a lookup of their rows
        X_s = out["X"].index_select(0, solving)
        self._model_X = X_s
        self._model_space = PairSpace(X_s, metric, tiles=False)
        self._model_weights = out["scores"].index_select(0, solving)
        exact = out["scores_exact"].index_select(0, solving).cpu().numpy()
        keys = _row_keys(X_s.cpu().numpy())
        first = np.lexsort((np.arange(len(keys)), ~exact))  # exact weights first, then lower index
        order = first[np.argsort(keys[first], kind="stable")]
        self._model_keys = keys[order]
        self._model_order = order
        return self

    def fit_predict(self, X, y=None):
        """Fit and return ``labels_``: -1 for the top-n outliers of ``X``, +1 otherwise (as ``output_type`` says)."""
        self.fit(X)
        return to_output(self._labels, self._fit_kind)

    # -- scoring new data -----------------------------------------------------------------
    def _weights(self, X):
        check_is_fitted(self, "labels_")
        if sp.issparse(X):
            raise TypeError("sparse input is not supported by gpumine estimators; convert X with X.toarray()")
        _check_feature_names(self, X, reset=False)
        Xq = check_array(X, name="X", dtype=self._model_X.dtype, allow_empty=True)
        check_n_features(Xq, self.n_features_in_, type(self).__name__)
        kind = output_kind(X)
        dev = self.device_
        q = Xq.shape[0]
        weights = torch.empty(q, dtype=torch.float64, device=dev)
        if q:
            keys = _row_keys(Xq.cpu().numpy())
            pos = np.searchsorted(self._model_keys, keys)
            pos_c = np.minimum(pos, len(self._model_keys) - 1)
            matched = (pos < len(self._model_keys)) & (self._model_keys[pos_c] == keys)
            if matched.any():
                rows = torch.from_numpy(np.flatnonzero(matched)).to(dev)
                members = torch.from_numpy(self._model_order[pos_c[matched]]).to(dev)
                weights[rows] = self._model_weights.index_select(0, members)
            if not matched.all():
                rows = torch.from_numpy(np.flatnonzero(~matched)).to(dev)
                queries = Xq.to(dev).index_select(0, rows)
                budget = working_memory_bytes(self.working_memory, dev)
                eb = engine_backend(self.backend, dev, self._metric, self._model_X.dtype, self._k_other,
                                    self._model_X.shape[0])
                weights[rows] = weights_against(self._model_X, self._model_space, queries, self._k_other,
                                                device=dev, budget=budget, verbose=self.verbose, backend=eb)
        return weights, kind

    def score_samples(self, X):
        """Negated weight of each row against the solving set (larger = more normal); see the class notes."""
        weights, kind = self._weights(X)
        return to_output(-weights, kind)

    def decision_function(self, X):
        """``score_samples(X) - offset_``: negative exactly for rows whose weight reaches ``threshold_``."""
        weights, kind = self._weights(X)
        return to_output(-weights - self.offset_, kind)

    def predict(self, X):
        """-1 for rows whose weight against the solving set reaches ``threshold_`` (outliers), +1 otherwise."""
        weights, kind = self._weights(X)
        labels = torch.where(-weights - self.offset_ < 0, -1, 1).to(torch.int64)
        return to_output(labels, kind)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags
