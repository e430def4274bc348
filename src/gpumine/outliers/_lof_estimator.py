"""``LocalOutlierFactor``: scikit-learn's LOF estimator on the exact GPU/CPU kNN engine.

A drop-in for :class:`sklearn.neighbors.LocalOutlierFactor`: the same
parameters (plus ``device``, ``backend``, ``working_memory``, ``verbose`` and
``duplicates``), the same attributes, the same outlier-detection and novelty
modes and the same "not available when novelty=..." errors. The algorithm is
the plain tensor code of :mod:`gpumine.outliers._lof`.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.base import OutlierMixin
from sklearn.utils._available_if import available_if
from sklearn.utils.validation import check_is_fitted

from ..utils._validation import check_array, check_n_features, check_n_neighbors, output_kind, to_attribute, to_output
from ..config import resolve_device, working_memory_bytes
from ..core.distance import get_metric
from ..neighbors.engine import choose_backend, search_validated
from ..neighbors._estimators import _check_feature_names, _KNeighborsBase
from ._lof import (LOFFit, check_duplicates_rule, check_lof_metric, local_outlier_factor, local_reachability_density,
                   lof_fit, lof_score, warn_duplicates)

__all__ = ["LocalOutlierFactor", "lof_scores"]


class LocalOutlierFactor(OutlierMixin, _KNeighborsBase):
    """Unsupervised outlier detection with the Local Outlier Factor (LOF), exact, on GPU or CPU.

    The LOF of a point is the mean local reachability density (lrd) of its k
    nearest neighbours divided by its own: about 1 inside a cluster, larger
    for points sparser than their neighbourhood (Breunig et al. 2000). The
    all-kNN search runs on :func:`gpumine.neighbors.kneighbors`' exact engine,
    tiled to ``working_memory``; k-distances, lrd and LOF are O(n k) tensor
    operations on the same device. Scores equal scikit-learn's
    ``negative_outlier_factor_`` to float32 rounding (float64: to about 1e-12)
    on data without distance ties or duplicates. Precomputed distances,
    scipy.sparse rows (densified) and scikit-learn's other metrics go through
    :class:`gpumine.neighbors.NearestNeighbors`' searches for them (exact
    float64 brute force, see :mod:`gpumine.neighbors._metrics_extra`).

    Parameters
    ----------
    n_neighbors : int, default=20
        k. Lowered to ``n_samples - 1`` (with a warning when larger than
        ``n_samples``), as scikit-learn.
    algorithm : {"auto", "ball_tree", "kd_tree", "brute"}, default="auto"
        Accepted for compatibility; gpumine chooses its own exact method. A
        tree with a metric scikit-learn's trees lack raises, as there.
    leaf_size : int, default=30
        Accepted for compatibility; no effect.
    metric : str, callable or DistanceMetric, default="minkowski"
        A distance: ``"minkowski"`` (with ``p >= 1``), ``"euclidean"``,
        ``"sqeuclidean"``, ``"manhattan"``, ``"chebyshev"``, ``"cosine"``;
        ``"precomputed"`` (``fit`` takes a square distance matrix or a sparse
        graph, novelty queries their distances to the training points); and
        the metrics of :class:`gpumine.neighbors.NearestNeighbors`'
        brute force: ``"seuclidean"``, ``"mahalanobis"``, ``"haversine"``,
        ``"correlation"``, ``"canberra"``, ``"braycurtis"``, ``"hamming"``,
        ``"nan_euclidean"`` (NaN marks missing values), ``"jaccard"``,
        ``"dice"``, ``"rogerstanimoto"``, ``"russellrao"``, ``"sokalsneath"``,
        ``"yule"``, a callable or a DistanceMetric. ``"inner_product"`` is a
        similarity and raises.
    p : float, default=2
        Minkowski power.
    metric_params : dict, optional
        ``{"p": ...}``; ``{"V": ...}`` for seuclidean; ``{"VI": ...}`` or
        ``{"V": ...}`` for mahalanobis; a callable's keyword arguments.
    contamination : "auto" or float in (0, 0.5], default="auto"
        ``"auto"``: ``offset_ = -1.5`` (the original paper's convention, as
        scikit-learn); a float: ``offset_`` is that percentile of the training
        scores.
    novelty : bool, default=False
        False: outlier detection on the training set (``fit_predict``,
        ``negative_outlier_factor_``). True: novelty detection on new data
        (``predict``, ``score_samples``, ``decision_function``); new points are
        never neighbours of anything.
    n_jobs : int, optional
        Accepted for compatibility; no effect.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
    backend : {"auto", "torch", "triton"}, default="auto"
        Kernel of the kNN search: ``"triton"`` the fused kernel (float32;
        euclidean, sqeuclidean, manhattan, cosine, inner product), ``"auto"``
        takes it on CUDA where it measured faster (see
        :func:`gpumine.neighbors.kneighbors`). Results are identical.
    working_memory : float, optional
        MiB for one tile's temporaries (see :mod:`gpumine.config`).
    verbose : int, optional
        0 hides the progress bar.
    duplicates : {"distinct", "sklearn"}, default="distinct"
        What to do where a point has at least ``n_neighbors`` exact duplicates
        (k-distance 0, infinite lrd). ``"distinct"`` uses the
        k-distinct-distance in those reach-distances (finite, meaningful
        scores; warns); ``"sklearn"`` adds 1e-10 to every mean
        reach-distance as scikit-learn does (then neighbours of duplicate
        groups get scores ~1e10). Identical results when no point has that
        many duplicates. See :mod:`gpumine.outliers._lof`. With precomputed
        distances a location is a distinct row of the matrix (a sparse graph:
        each row's positive stored distances).

    Attributes
    ----------
    negative_outlier_factor_ : array of shape (n_samples,)
        The opposite LOF of the training samples (larger is more normal);
        in the input's kind (NumPy, or a tensor on the input's device) and
        dtype (float32 unless given float64).
    outlier_scores_ : array of shape (n_samples,)
        The LOF itself, ``-negative_outlier_factor_``.
    n_neighbors_ : int
        The k actually used.
    offset_ : float
        ``decision_function = score_samples - offset_``; training points with
        ``negative_outlier_factor_ < offset_`` are outliers.
    n_duplicate_points_ : int
        Training points with at least ``n_neighbors_`` exact duplicates.
    effective_metric_, effective_metric_params_, n_features_in_,
    feature_names_in_, n_samples_fit_, device_

    Examples
    --------
    >>> import numpy as np
    >>> from gpumine.outliers._lof_estimator import LocalOutlierFactor
    >>> X = np.array([[-1.1], [0.2], [101.1], [0.3]])
    >>> clf = LocalOutlierFactor(n_neighbors=2, device="cpu")
    >>> clf.fit_predict(X)
    array([ 1,  1, -1,  1])
    >>> clf.negative_outlier_factor_.round(4)
    array([ -0.9821,  -1.037 , -73.3697,  -0.9821])
    """

    def __init__(
        self,
        n_neighbors=20,
        *,
        algorithm="auto",
        leaf_size=30,
        metric="minkowski",
        p=2,
        metric_params=None,
        contamination="auto",
        novelty=False,
        n_jobs=None,
        device="auto",
        backend="auto",
        working_memory=None,
        verbose=None,
        duplicates="distinct",
    ):
        super().__init__(
            n_neighbors, algorithm=algorithm, leaf_size=leaf_size, metric=metric, p=p,
            metric_params=metric_params, n_jobs=n_jobs, device=device, backend=backend,
            working_memory=working_memory, verbose=verbose,
        )
        self.contamination = contamination
        self.novelty = novelty
        self.duplicates = duplicates

    # Precomputed distances (dense or a sparse graph), sparse features and the brute-force metrics of
    # gpumine.neighbors._metrics_extra come through the base estimator's searches; minkowski with p < 1 or
    # weights does not (a semi-metric's reach-distances mean little).
    _extended_input = True

    # -- fitting -------------------------------------------------------------------
    def _resolve_metric(self):
        params = self.metric_params if isinstance(self.metric_params, dict) else {}
        p = params.get("p", self.p)
        semi = isinstance(p, numbers.Real) and not isinstance(p, bool) and 0 < float(p) < 1
        if self.metric == "minkowski" and (semi or params.get("w") is not None):
            raise ValueError(f"LocalOutlierFactor supports metric='minkowski' with p >= 1 and no weights 'w'; got "
                             f"p={p!r}" + ("" if params.get("w") is None else " and w"))
        return super()._resolve_metric()

    def _check_params(self):
        c = self.contamination
        if isinstance(c, str):
            if c != "auto":
                raise ValueError(f"contamination must be 'auto' or a float in (0, 0.5]; got {c!r}")
        elif isinstance(c, bool) or not isinstance(c, numbers.Real) or not 0 < c <= 0.5:
            raise ValueError(f"contamination must be 'auto' or a float in (0, 0.5]; got {c!r}")
        if not isinstance(self.novelty, (bool, np.bool_)):
            raise TypeError(f"novelty must be True or False; got {self.novelty!r}")
        if isinstance(self.n_neighbors, bool) or not isinstance(self.n_neighbors, numbers.Integral):
            raise TypeError(f"n_neighbors must be a positive integer; got {self.n_neighbors!r}")
        if self.n_neighbors < 1:
            raise ValueError(f"n_neighbors must be at least 1; got {self.n_neighbors}")
        check_duplicates_rule(self.duplicates)

    def fit(self, X, y=None):
        """Fit the detector on ``X`` (``y`` is ignored).

        Computes the exact kNN of every training point (itself excluded), the
        k-distances, lrd and LOF, and ``offset_``.
        """
        self._check_params()
        X_t = self._fit(X)
        if self._mode == "engine":
            check_lof_metric(self._metric)
        n_samples = X_t.shape[0]
        if n_samples < 2:
            raise ValueError(
                f"LocalOutlierFactor needs at least 2 samples (n_samples = {n_samples}): every point's "
                "neighbours are the other points; pass more data"
            )
        if self.n_neighbors > n_samples:
            warnings.warn(
                f"n_neighbors ({self.n_neighbors}) is greater than the total number of samples "
                f"({n_samples}). n_neighbors will be set to (n_samples - 1) for estimation.",
                stacklevel=2,
            )
        self.n_neighbors_ = max(1, min(int(self.n_neighbors), n_samples - 1))
        if self._mode == "engine":  # feature rows (sparse ones densified by _fit) on the exact kNN engine
            self.effective_metric_params_ = {"p": self._metric.p} if self._metric.name == "minkowski" else {}
            budget = working_memory_bytes(self.working_memory, self.device_)
            backend = choose_backend(self.backend, self.device_, self._metric, self._fit_X.dtype, self.n_neighbors_,
                                     n_samples)
            fit = lof_fit(self._fit_X, self.n_neighbors_, self._metric, device=self.device_, budget_bytes=budget,
                          duplicates=self.duplicates, verbose=self.verbose, warn=False, backend=backend,
                          working_memory=self.working_memory, replay=True)
        else:  # precomputed distances or a brute-force metric: the base estimator's all-kNN
            dist, index, _ = self._query(None, self.n_neighbors_)
            fit = self._lof_from_neighbours(dist, index)
        warn_duplicates(fit, stacklevel=2)
        # novelty scoring needs only the k-distances and lrd: drop the (n, k) kNN arrays
        self._lof_fit = LOFFit(fit.distances[:0], fit.indices[:0], fit.k_distance, fit.lrd, fit.lof,
                               fit.n_duplicate_points, fit.duplicates)
        self._dtype = torch.float32 if self._out_dtype == np.float32 else torch.float64
        self.n_duplicate_points_ = fit.n_duplicate_points
        nof = -fit.lof
        # fitted attributes keep the kind of X whatever output_type says (see gpumine.config)
        self.negative_outlier_factor_ = to_attribute(nof.to(self._dtype), self._fit_kind)
        self.outlier_scores_ = to_attribute(fit.lof.to(self._dtype), self._fit_kind)
        if self.contamination == "auto":
            self.offset_ = -1.5
        else:
            # NumPy's percentile of the float64 scores (linear interpolation, as scikit-learn)
            self.offset_ = float(np.percentile(nof.to(self._dtype).cpu().numpy(), 100.0 * self.contamination))
        return self

    # -- outlier detection on the training set ---------------------------------------
    def _check_novelty_fit_predict(self):
        if self.novelty:
            raise AttributeError(
                "fit_predict is not available when novelty=True. Use novelty=False if you want to "
                "predict on the training set."
            )
        return True

    @available_if(_check_novelty_fit_predict)
    def fit_predict(self, X, y=None):
        """Fit on ``X`` and label it: -1 for outliers, +1 for inliers.

        **Only available for outlier detection (``novelty=False``).**
        """
        self.fit(X)
        labels = torch.ones(self.n_samples_fit_, dtype=torch.int64)
        labels[(-self._lof_fit.lof.to(self._dtype)).cpu() < self.offset_] = -1
        return self._labels_out(labels, self._fit_kind)

    def _predict(self, X=None):
        """scikit-learn's private labelling: the training points' labels (``X=None``) or ``predict(X)``."""
        check_is_fitted(self, "n_samples_fit_")
        if X is None:
            labels = torch.ones(self.n_samples_fit_, dtype=torch.int64)
            labels[(-self._lof_fit.lof.to(self._dtype)).cpu() < self.offset_] = -1
            return self._labels_out(labels, self._fit_kind)
        return self.predict(X)

    @staticmethod
    def _labels_out(labels: torch.Tensor, kind):
        return to_output(labels, kind)

    # -- novelty detection -------------------------------------------------------------
    def _check_novelty_predict(self):
        if not self.novelty:
            raise AttributeError(
                "predict is not available when novelty=False, use fit_predict if you want to predict "
                "on training data. Use novelty=True if you want to use LOF for novelty detection and "
                "predict on new unseen data."
            )
        return True

    def _check_novelty_decision_function(self):
        if not self.novelty:
            raise AttributeError(
                "decision_function is not available when novelty=False. Use novelty=True if you want "
                "to use LOF for novelty detection and compute decision_function for new unseen data. "
                "Note that the opposite LOF of the training samples is always available by considering "
                "the negative_outlier_factor_ attribute."
            )
        return True

    def _check_novelty_score_samples(self):
        if not self.novelty:
            raise AttributeError(
                "score_samples is not available when novelty=False. The scores of the training "
                "samples are always available through the negative_outlier_factor_ attribute. Use "
                "novelty=True if you want to use LOF for novelty detection and compute score_samples "
                "for new unseen data."
            )
        return True

    def _novelty_scores(self, X) -> tuple[torch.Tensor, object]:
        """(-LOF of the rows of X in X's precision, on the device; output kind)."""
        check_is_fitted(self, "n_samples_fit_")
        if self._mode != "engine" or sp.issparse(X):
            # precomputed distances, brute-force metrics and sparse rows: the base estimator's query
            dtype = getattr(X, "dtype", None)
            out_dtype = torch.float32 if dtype in (np.float32, torch.float32) else torch.float64
            dist, index, kind = self._query(X, self.n_neighbors_)
            lof, _ = lof_score(dist, index, self._lof_fit)
            return (-lof).to(out_dtype), kind
        _check_feature_names(self, X, reset=False)
        query = check_array(X, name="X")
        check_n_features(query, self.n_features_in_, type(self).__name__)
        out_dtype = query.dtype  # float64 in, float64 out, whatever the fit precision
        query = query.to(self._fit_X.dtype)
        kind = output_kind(X)
        scores, index = search_validated(
            self._fit_X, query, self.n_neighbors_, self._metric, exclude_self=False, device=self.device_,
            budget_bytes=working_memory_bytes(self.working_memory, self.device_),
            result_device=self.device_, verbose=self.verbose,
            backend=choose_backend(self.backend, self.device_, self._metric, self._fit_X.dtype, self.n_neighbors_,
                                   self.n_samples_fit_),
        )
        lof, _ = lof_score(scores, index, self._lof_fit)
        return (-lof).to(out_dtype), kind

    @available_if(_check_novelty_score_samples)
    def score_samples(self, X):
        """Opposite LOF of each row of ``X`` against the training set (larger is more normal).

        **Only available for novelty detection (``novelty=True``).** A row equal
        to a training point counts that point among its neighbours; rows of
        ``X`` are never neighbours of each other.
        """
        nof, kind = self._novelty_scores(X)
        return to_output(nof, kind)

    @available_if(_check_novelty_decision_function)
    def decision_function(self, X):
        """``score_samples(X) - offset_``: negative for outliers. **Only with novelty=True.**"""
        nof, kind = self._novelty_scores(X)
        return to_output(nof - self.offset_, kind)

    @available_if(_check_novelty_predict)
    def predict(self, X=None):
        """Label new rows: -1 for outliers, +1 for inliers. **Only with novelty=True.**"""
        nof, kind = self._novelty_scores(X)
        labels = torch.ones(nof.shape[0], dtype=torch.int64)
        labels[(nof - self.offset_).cpu() < 0] = -1
        return self._labels_out(labels, kind)

    # -- LOF from neighbours found outside the engine ------------------------------------
    def _lof_from_neighbours(self, dist: torch.Tensor, index: torch.Tensor) -> LOFFit:
        """LOF of the training points from their all-kNN ``(dist, index)``, with the duplicates rule."""
        dist = dist.to(torch.float64)
        kdist = dist[:, -1].clone()
        zero = kdist == 0
        n_zero = int(zero.sum())
        if n_zero and self.duplicates == "distinct":
            rows = zero.nonzero().squeeze(1)
            kdist[rows] = self._k_distinct_distance(rows.cpu(), dist.shape[1]).to(kdist.device)
        lrd = local_reachability_density(dist, index, kdist, duplicates=self.duplicates)
        lof = local_outlier_factor(lrd, index, lrd)
        return LOFFit(dist, index, kdist, lrd, lof, n_zero, self.duplicates)

    def _k_distinct_distance(self, rows: torch.Tensor, k: int) -> torch.Tensor:
        """The k-distinct-distance (see :mod:`gpumine.outliers._lof`) of training points ``rows``, float64.

        Locations are the distinct rows of the fitted data: feature rows, or the
        rows of a dense precomputed matrix (points at one location have the same
        distances to everything). A sparse graph knows only its stored entries:
        the k-th smallest positive stored distance of the row. 0 where no
        positive distance exists, the farthest positive one where fewer than k.
        """
        X = self._fit_X
        if sp.issparse(X):
            out = torch.zeros(len(rows), dtype=torch.float64)
            for i, r in enumerate(rows.tolist()):
                stored = np.sort(X.data[X.indptr[r] : X.indptr[r + 1]].astype(np.float64))
                stored = stored[stored > 0]
                if stored.size:
                    out[i] = float(stored[min(k, stored.size) - 1])
            return out
        device = self.device_
        data = X.to(device)
        _, inverse = torch.unique(data, dim=0, return_inverse=True)
        n = data.shape[0]
        n_locations = int(inverse.max()) + 1
        first = torch.full((n_locations,), n, dtype=torch.int64, device=device)
        first.scatter_reduce_(0, inverse, torch.arange(n, device=device), reduce="amin")
        budget = working_memory_bytes(self.working_memory, device)
        step = max(1, budget // (8 * 4 * max(1, n)))
        pieces = []
        for chunk in rows.to(device).split(step):
            if self._mode == "precomputed":
                D = data[chunk].to(torch.float64)
            else:
                D = self._form.to_distance(self._form.rdist(data[chunk], data))
            D = D[:, first]
            D = D.masked_fill(~(D > 0), float("inf"))  # zeros (the location itself) and NaN left out
            ordered = torch.sort(D, dim=1).values
            n_positive = torch.isfinite(ordered).sum(1)
            at = (torch.clamp(n_positive, max=k) - 1).clamp(min=0)
            value = ordered.gather(1, at[:, None]).squeeze(1)
            pieces.append(torch.where(n_positive > 0, value, torch.zeros_like(value)))
        return torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.float64, device=device)


def lof_scores(
    X,
    n_neighbors: int = 20,
    *,
    metric: str = "euclidean",
    p: float | None = None,
    duplicates: str = "distinct",
    device=None,
    backend=None,
    working_memory=None,
    verbose=None,
):
    """Local Outlier Factor of every row of ``X`` among the other rows (the functional form).

    The same computation as ``LocalOutlierFactor(...).fit(X).outlier_scores_``:
    positive LOF values, larger is more outlying, about 1 inside clusters.
    ``n_neighbors`` must be below the number of rows. Returns the caller's kind
    (NumPy in, NumPy out; a tensor in, a tensor on its device out) in the input
    precision. Warns (:class:`~gpumine.outliers._lof.DuplicatesWarning`) when
    the duplicates rule was needed.

    Examples
    --------
    >>> import numpy as np
    >>> lof_scores(np.array([[0.0], [1.0], [2.0], [10.0]]), 1, device="cpu")
    array([1., 1., 1., 8.])
    """
    X_t = check_array(X, name="X")
    kind = output_kind(X)
    k = check_n_neighbors(n_neighbors, X_t.shape[0], name="n_neighbors", excluding_self=True)
    metric_obj = check_lof_metric(get_metric(metric, p))
    check_duplicates_rule(duplicates)
    dev = resolve_device(device)
    engine_backend = choose_backend(backend, dev, metric_obj, X_t.dtype, k, X_t.shape[0])
    fit = lof_fit(X_t, k, metric_obj, device=dev, budget_bytes=working_memory_bytes(working_memory, dev),
                  duplicates=duplicates, verbose=verbose, warn=False, backend=engine_backend, working_memory=working_memory,
                  replay=True)
    warn_duplicates(fit, stacklevel=2)
    return to_output(fit.lof.to(X_t.dtype), kind)
