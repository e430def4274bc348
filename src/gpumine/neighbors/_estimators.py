"""scikit-learn compatible estimators over the exact kNN engine.

Parameter names follow scikit-learn's ``NearestNeighbors``,
``KNeighborsClassifier`` and ``KNeighborsRegressor`` so they are drop-in
replacements; ``device``, ``backend``, ``working_memory`` and ``verbose`` are
added. ``algorithm`` accepts scikit-learn's values (``"auto"``, ``"ball_tree"``,
``"kd_tree"``, ``"brute"``) and ``leaf_size`` and ``n_jobs`` are accepted, all
without effect: gpumine chooses its own exact method (a KD-tree or matrix
products on the host, tiles or a fused kernel on the GPU), and every choice gives
the same neighbours.

Beyond the engine's metrics they take what scikit-learn users reach for:
``metric="precomputed"`` (a square distance matrix to fit, (n_queries,
n_samples_fit) distances to query, or a sparse precomputed graph whose stored
entries are the only candidates), minkowski with ``0 < p < 1`` or weights
``metric_params={"w": ...}`` (exact float64 brute force, see
:mod:`gpumine.neighbors._precomputed`), scikit-learn's other metrics
(seuclidean, mahalanobis, haversine, correlation, canberra, braycurtis,
hamming, nan_euclidean, the boolean ones, callables and DistanceMetric
objects; exact float64 brute force, see :mod:`gpumine.neighbors._metrics_extra`),
scipy.sparse input (densified: the training set whole, queries in blocks of
``working_memory``; see :mod:`gpumine.neighbors._sparse`) and 2-D ``y``
(several outputs).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import DataConversionWarning
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from ..utils._validation import (HostScoreMixin, check_array, check_labels, check_n_features, check_n_neighbors,
                           labels_to_output, output_kind, to_attribute, to_output)
from ..config import resolve_backend, resolve_device, working_memory_bytes
from ..core.distance import METRICS, check_precision, get_metric, is_engine_metric
from ..core.tiles import fits_on_device
from .engine import ReferenceMemo, choose_backend, search_validated
from ._neighbor_graphs import csr_to_lists
from ._radius import radius_search
from .._device_state import HostPickleMixin
from ._precomputed import (MinkowskiForm, blocked_kneighbors, blocked_radius, check_precomputed,
                           check_precomputed_query, graph_kneighbors, graph_radius)
from ._metrics_extra import (EXTRA_METRICS, check_backend, check_extra_params, check_tree_algorithm, is_extra_metric,
                             make_extra_form, metric_label, warn_boolean_conversion)
from ._sparse import densify, iter_dense_blocks

try:  # keeps feature-name checks identical to scikit-learn's own estimators
    from sklearn.utils.validation import _check_feature_names
except ImportError:  # pragma: no cover - very old scikit-learn
    def _check_feature_names(estimator, X, *, reset):
        return None

try:  # scikit-learn's own type checks (``isinstance(est, KNeighborsMixin)``) then know these estimators
    from sklearn.neighbors._base import KNeighborsMixin as SklearnKNeighborsMixin
    from sklearn.neighbors._base import RadiusNeighborsMixin as SklearnRadiusNeighborsMixin
except ImportError:  # pragma: no cover - a scikit-learn that moved them: only those checks are lost
    class SklearnKNeighborsMixin:
        pass

    class SklearnRadiusNeighborsMixin:
        pass

__all__ = ["NearestNeighbors", "KNeighborsClassifier", "KNeighborsRegressor"]


def _check_weights(w, n_features: int) -> np.ndarray:
    """Minkowski weights ``w`` as scikit-learn checks them: one finite non-negative weight per feature."""
    try:
        w = np.asarray(w, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"metric_params['w'] must be an array of {n_features} numbers; got {w!r}") from None
    if w.ndim != 1 or w.shape[0] != n_features:
        raise ValueError(f"MinkowskiDistance: the size of w must match the number of features ({n_features}). "
                         f"Currently len(w)={w.size}.")
    if not np.isfinite(w).all():
        raise ValueError("metric_params['w'] contains NaN or infinity; pass finite weights")
    if (w < 0).any():
        raise ValueError("w cannot contain negative weights")
    return w


def _reject_infinity(X: torch.Tensor, name: str) -> None:
    """Infinity has no distance under the metrics of ``_metrics_extra`` (NaN is checked, or allowed, before)."""
    if X.numel() and bool(torch.isinf(X).any()):
        raise ValueError(f"{name} contains infinity; pass finite values (NaN marks a missing value for "
                         "metric='nan_euclidean' only)")


def _fitted_data(X):
    """The training rows of a fitted neighbours estimator or tree passed as ``X`` (scikit-learn accepts them)."""
    from sklearn.neighbors import BallTree, KDTree

    if isinstance(X, (BallTree, KDTree)):
        return np.asarray(X.data)
    if isinstance(X, _KNeighborsBase):
        check_is_fitted(X, "n_samples_fit_")
        return X._fit_X if sp.issparse(X._fit_X) else to_attribute(X._fit_X, X._fit_kind)
    if isinstance(X, BaseEstimator) and hasattr(X, "kneighbors"):
        check_is_fitted(X)
        return X._fit_X
    return X


class _KNeighborsBase(HostPickleMixin, BaseEstimator):
    """Fitting, validation and neighbour queries shared by the three estimators."""

    def __init__(
        self,
        n_neighbors=5,
        *,
        algorithm="auto",
        leaf_size=30,
        metric="minkowski",
        p=2,
        metric_params=None,
        n_jobs=None,
        device="auto",
        backend="auto",
        working_memory=None,
        verbose=None,
        precision="exact",
    ):
        self.n_neighbors = n_neighbors
        self.algorithm = algorithm
        self.leaf_size = leaf_size
        self.metric = metric
        self.p = p
        self.metric_params = metric_params
        self.n_jobs = n_jobs
        self.device = device
        self.backend = backend
        self.working_memory = working_memory
        self.verbose = verbose
        self.precision = precision

    # Precomputed distances, sparse input and minkowski with p < 1 or weights ``w``: the estimators of this
    # module and the radius ones take them; subclasses that search only through the engine (LOF) do not.
    _extended_input = False

    # -- fitting -----------------------------------------------------------------
    def _resolve_metric(self):
        """Validate ``metric``, ``p`` and ``metric_params`` (scikit-learn's rules) and choose the search.

        Sets ``_mode`` ("engine", "precomputed" or "minkowski": the exact float64
        tiles of :class:`MinkowskiForm` for ``0 < p < 1`` or weights ``w``),
        ``_metric`` (the engine's, None otherwise), ``effective_metric_`` and
        ``effective_metric_params_``. Returns the weights ``w`` (checked against
        the features in ``_fit``).
        """
        name = type(self).__name__
        p = self.p
        if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating))
                              or not 0 < float(p) <= math.inf):
            raise ValueError(f"The 'p' parameter of {name} must be a float in the range (0.0, inf] or None. "
                             f"Got {p!r} instead.")
        params = self.metric_params
        if params is not None and not isinstance(params, dict):
            raise ValueError(f"metric_params must be a dict or None; got {type(params).__name__}")
        params = dict(params or {})
        if "p" in params:
            if self.p is not None:
                warnings.warn("Parameter p is found in metric_params. The corresponding parameter from __init__ "
                              "is ignored.", SyntaxWarning, stacklevel=4)
            p = params.pop("p")
            if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)) or not 0 < float(p) <= math.inf:
                raise ValueError(f"metric_params['p'] must be a float in the range (0.0, inf]; got {p!r}")
        metric = self.metric
        extended = self._extended_input
        if is_extra_metric(metric):
            label = metric_label(metric)
            if not extended:
                raise ValueError(f"metric={label!r} is not supported by {name}; use one of the kNN engine's metrics "
                                 "(euclidean, sqeuclidean, manhattan, chebyshev, minkowski, cosine)")
            check_tree_algorithm(metric, self.algorithm)
            check_backend(self.backend, metric)
            self._extra_params = check_extra_params(metric, params)
            self._mode, self._metric, self._form = "extra", None, None
            self.effective_metric_, self.effective_metric_params_ = metric, dict(params)
            return None
        if not isinstance(metric, str) or (metric != "precomputed" and not is_engine_metric(metric)):
            raise ValueError(f"Unknown metric {metric!r}; use one of {', '.join(METRICS)}, {', '.join(EXTRA_METRICS)}, "
                             "'precomputed', a callable metric(a, b) -> float or a sklearn.metrics.DistanceMetric")
        w = params.pop("w", None) if metric == "minkowski" else None
        if params:
            raise ValueError(
                f"metric_params {sorted(params)} are not supported with metric={metric!r}: gpumine takes 'p' and, for "
                "metric='minkowski', the weights 'w'. Variances V: use metric='seuclidean' (the same neighbours as "
                "X / np.sqrt(V) with metric='euclidean'); an inverse covariance VI: metric='mahalanobis'"
            )
        if metric == "precomputed":
            if not extended:
                raise ValueError(f"metric='precomputed' is not supported by {name}; pass the feature matrix and a metric")
            self._mode, self._metric, self._form = "precomputed", None, None
            self.effective_metric_, self.effective_metric_params_ = "precomputed", {}
            return None
        p = 2 if p is None else p
        if metric == "minkowski" and (float(p) < 1 or w is not None):
            if not extended:
                raise ValueError(f"{name} supports metric='minkowski' with p >= 1 and no weights 'w'; got p={p!r}"
                                 + ("" if w is None else " and w"))
            if float(p) < 1:
                if self.algorithm in ("kd_tree", "ball_tree"):
                    raise ValueError(f'algorithm="{self.algorithm}" does not support 0 < p < 1 for the Minkowski '
                                     'metric. To resolve this problem either set p >= 1 or algorithm="brute".')
                warnings.warn("Mind that for 0 < p < 1, Minkowski metrics are not distance metrics. Continuing the "
                              "execution with `algorithm='brute'`.", UserWarning, stacklevel=4)
            if w is not None and self.algorithm == "kd_tree":
                raise ValueError("algorithm='kd_tree' is not valid for metric='minkowski' with a weight parameter 'w': "
                                 "try algorithm='ball_tree' or algorithm='brute' instead.")
            if w is not None and float(p) == math.inf:
                raise ValueError("MinkowskiDistance requires finite p. For p=inf, use ChebyshevDistance.")
            self._mode, self._metric = "minkowski", None
            self.effective_metric_, self.effective_metric_params_ = "minkowski", {"p": p, "w": w}
            return w
        self._metric = get_metric(metric, p if metric == "minkowski" else None)
        self._mode, self._form = "engine", None
        self.effective_metric_ = self._metric.name
        self.effective_metric_params_ = {"p": p, "w": None} if self._metric.name == "minkowski" else {}
        return None

    def _fit(self, X):
        if self.algorithm not in ("auto", "ball_tree", "kd_tree", "brute"):
            raise ValueError(
                f"algorithm must be 'auto', 'ball_tree', 'kd_tree' or 'brute' (scikit-learn's values; gpumine "
                f"chooses its own exact method whatever the value); got {self.algorithm!r}"
            )
        w = self._resolve_metric()
        if self._extended_input:
            X = _fitted_data(X)
        self.device_ = resolve_device(self.device)
        resolve_backend(self.backend, self.device_, has_triton_kernel=True)
        working_memory_bytes(self.working_memory, self.device_)  # validates the parameter
        if sp.issparse(X) and not self._extended_input:
            raise TypeError("sparse input is not supported by gpumine estimators; convert X with X.toarray()")
        _check_feature_names(self, X, reset=True)
        if self._mode == "precomputed":
            X_t = check_precomputed(X, name="X")
        else:
            X_t = check_array(densify(X, "X") if sp.issparse(X) else X, name="X", allow_nan=self._allows_nan())
            if self._mode == "extra":
                _reject_infinity(X_t, "X")
                warn_boolean_conversion(self.metric, X)
        if self._mode == "engine":
            check_precision(getattr(self, "precision", "exact"), X_t.dtype)
        else:
            check_precision(getattr(self, "precision", "exact"))
        if self._mode == "minkowski":
            self._form = MinkowskiForm(self.effective_metric_params_["p"],
                                       None if w is None else _check_weights(w, X_t.shape[1]))
        elif self._mode == "extra":
            self._form = make_extra_form(self.metric, self._extra_params, X_t.shape[1],
                                         budget_bytes=working_memory_bytes(self.working_memory, self.device_))
        n_neighbors = getattr(self, "n_neighbors", None)  # radius estimators have none
        if isinstance(n_neighbors, (int, np.integer)) and not isinstance(n_neighbors, bool):
            if n_neighbors < 1:
                raise ValueError(f"n_neighbors must be at least 1; got {n_neighbors}")
        elif n_neighbors is not None:
            raise TypeError(f"n_neighbors must be a positive integer; got {n_neighbors!r}")
        radius = getattr(self, "radius", None)
        if radius is not None and (isinstance(radius, bool) or not isinstance(radius, (int, float, np.number))
                                   or not 0 <= float(radius)):
            raise ValueError(f"radius must be a number >= 0; got {radius!r}")
        self._fit_kind = output_kind(X)
        if sp.issparse(X_t):  # a precomputed graph stays a host CSR matrix
            self._fit_X, self._out_dtype = X_t, X_t.dtype.type
        else:
            nbytes = X_t.numel() * X_t.element_size()
            self._fit_X = X_t.to(self.device_) if fits_on_device(3 * nbytes, self.device_) else X_t
            self._out_dtype = np.float32 if X_t.dtype == torch.float32 else np.float64
        # a GPU copy of its own (not the caller's tensor): searches keep its prepared operands
        owned = (not sp.issparse(X_t) and self._fit_X.is_cuda and self._fit_X.data_ptr() != X_t.data_ptr()
                 and not self._fit_X.is_inference())
        self._reference_memo = ReferenceMemo() if owned else None
        if self._mode == "engine":
            self.__dict__.pop("_fit_method", None)
        else:  # scikit-learn's name for the method: these searches are brute force
            self._fit_method = "brute"
        self.n_features_in_ = X_t.shape[1]
        self.n_samples_fit_ = X_t.shape[0]
        return X_t

    # -- queries -------------------------------------------------------------------
    def _budget(self) -> int:
        return working_memory_bytes(self.working_memory, self.device_)

    def _check_query(self, X, *, allow_empty: bool):
        """Validated queries: a tensor (features or precomputed distances), or a CSR matrix
        (sparse features, or a precomputed graph), and the output kind."""
        _check_feature_names(self, X, reset=False)
        kind = output_kind(X)
        if self._mode == "precomputed":
            dtype = torch.float32 if self._out_dtype == np.float32 else torch.float64
            return check_precomputed_query(X, self.n_samples_fit_, dtype, name="X", estimator=type(self).__name__,
                                           allow_empty=allow_empty), kind
        if sp.issparse(X):
            if not self._extended_input:
                raise TypeError("sparse input is not supported by gpumine estimators; convert X with X.toarray()")
            if X.dtype.kind not in "biuf":
                raise ValueError(f"X has dtype {X.dtype}, which is not numeric; pass numbers")
            check_n_features(X, self.n_features_in_, type(self).__name__)
            if X.shape[0] == 0 and not allow_empty:
                raise ValueError(f"X is empty: found array with 0 sample(s) (shape {X.shape}); a minimum of 1 is required")
            return X.tocsr(), kind
        query = check_array(X, name="X", dtype=self._fit_X.dtype, allow_empty=allow_empty, allow_nan=self._allows_nan())
        check_n_features(query, self.n_features_in_, type(self).__name__)
        if self._mode == "extra":
            _reject_infinity(query, "X")
            warn_boolean_conversion(self.metric, X)
        return query, kind

    def _allows_nan(self) -> bool:
        """NaN marks missing features for metric='nan_euclidean'; every other metric rejects it."""
        return self._mode == "extra" and isinstance(self.metric, str) and self.metric == "nan_euclidean"

    def _dense_blocks(self, query):
        """``(start, dense rows)`` of validated queries: one block, or blocks of a sparse matrix within the budget."""
        if not sp.issparse(query):
            yield 0, query
            return
        for start, block in iter_dense_blocks(query, self._budget()):
            yield start, check_array(block, name="X", dtype=self._fit_X.dtype, allow_empty=True,
                                     allow_nan=self._allows_nan())

    def _query(self, X, n_neighbors):
        """(distances, indices, output kind) for X (None: the training set, self excluded)."""
        check_is_fitted(self, "n_samples_fit_")
        if n_neighbors is None:
            n_neighbors = self.n_neighbors
        if X is None:
            query, kind, exclude_self = self._fit_X, self._fit_kind, True
        else:
            (query, kind), exclude_self = self._check_query(X, allow_empty=False), False
        n_neighbors = check_n_neighbors(n_neighbors, self.n_samples_fit_, excluding_self=exclude_self)
        if self._mode == "precomputed":
            if sp.issparse(query):
                dist, index = graph_kneighbors(query, n_neighbors, exclude_self=exclude_self)
                dist, index = torch.from_numpy(dist), torch.from_numpy(index)
            else:
                dist, index = blocked_kneighbors(
                    query.shape[0], self.n_samples_fit_, n_neighbors,
                    lambda a, b: query[a:b].to(self.device_), exclude_self=exclude_self, budget_bytes=self._budget())
            return dist.to(self.device_), index.to(self.device_), kind
        found = [self._search_rows(rows, n_neighbors, exclude_self) for _, rows in self._dense_blocks(query)]
        if len(found) == 1:
            return found[0][0], found[0][1], kind
        return torch.cat([d for d, _ in found]), torch.cat([i for _, i in found]), kind

    def _search_rows(self, query, n_neighbors, exclude_self):
        """The exact k nearest training points of dense query rows (``exclude_self``: query is the training set)."""
        if self._mode in ("minkowski", "extra"):  # exact float64 brute force (see _precomputed, _metrics_extra)
            ref = self._fit_X.to(self.device_)
            form = self._form
            dist, index = blocked_kneighbors(
                query.shape[0], self.n_samples_fit_, n_neighbors,
                lambda a, b: form.rdist(query[a:b].to(self.device_), ref), exclude_self=exclude_self,
                budget_bytes=self._budget(), to_distance=form.to_distance, entry_bytes=getattr(form, "entry_bytes", 0))
            return dist.to(device=self.device_, dtype=self._fit_X.dtype), index.to(self.device_)
        backend = choose_backend(self.backend, self.device_, self._metric, self._fit_X.dtype, n_neighbors, self.n_samples_fit_)
        # small searches in one checked launch, repeated ones through a captured graph, as kneighbors
        return search_validated(self._fit_X, query, n_neighbors, self._metric, exclude_self=exclude_self,
                                device=self.device_, budget_bytes=self._budget(), result_device=self.device_,
                                backend=backend, precision=self.precision, graphs=True,
                                working_memory=self.working_memory, verbose=self.verbose,
                                memo=getattr(self, "_reference_memo", None))

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """Find the k nearest training points of each row of ``X``.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_queries, n_features), optional
            (n_queries, n_samples_fit) distances for ``metric="precomputed"``.
            ``None`` queries the training set, excluding each point itself
            (not its exact duplicates: they are other points at distance 0,
            listed first by index). scikit-learn instead drops the point itself
            only when it is among its k + 1 nearest, else the first neighbour
            listed, so its answer depends on how ties were ordered: for
            ``np.ones((3, 1))`` and k = 1 it gives ``[1, 0, 1]``, gpumine
            ``[1, 0, 0]`` (each point's nearest other point, lower index first).
            With ``metric="precomputed"`` the point itself is its own column of
            the fitted matrix, by the same rule.
        n_neighbors : int, optional
            Defaults to the ``n_neighbors`` given at construction.
        return_distance : bool
            Return ``(distances, indices)`` when True, else only ``indices``.

        Returns
        -------
        distances : ndarray of shape (n_queries, n_neighbors)
            Ascending; equal distances ordered by the lower training index.
        indices : ndarray of shape (n_queries, n_neighbors), int64
        """
        dist, index, kind = self._query(X, n_neighbors)
        if return_distance:
            return to_output(dist, kind), to_output(index, kind)
        return to_output(index, kind)

    def _radius_query(self, X, radius):
        """CSR rows ``(indptr, indices, distances)`` of the training points within ``radius``, and the output kind.

        Distances are float64 (the data's values for precomputed ones); rows are ordered by (distance, index).
        """
        check_is_fitted(self, "n_samples_fit_")
        radius = self.radius if radius is None else radius
        if isinstance(radius, bool) or not isinstance(radius, (int, float, np.number)) or not 0 <= float(radius):
            raise ValueError(f"radius must be a number >= 0; got {radius!r}")
        if X is None:
            query, kind, exclude_self = self._fit_X, self._fit_kind, True
        else:
            (query, kind), exclude_self = self._check_query(X, allow_empty=True), False
        budget = self._budget()
        if self._mode == "precomputed":
            if sp.issparse(query):
                indptr, indices, dist = graph_radius(query, radius, exclude_self=exclude_self)
            else:
                indptr, indices, dist = blocked_radius(query.shape[0], self.n_samples_fit_, radius,
                                                       lambda a, b: query[a:b].to(self.device_),
                                                       exclude_self=exclude_self, budget_bytes=budget)
            return indptr, indices, dist.astype(np.float64), kind
        pieces = []
        for _, rows in self._dense_blocks(query):
            if self._mode in ("minkowski", "extra"):
                ref, form = self._fit_X.to(self.device_), self._form
                pieces.append(blocked_radius(rows.shape[0], self.n_samples_fit_, radius,
                                             lambda a, b: form.rdist(rows[a:b].to(self.device_), ref),
                                             exclude_self=exclude_self, budget_bytes=budget,
                                             to_distance=form.to_distance, entry_bytes=getattr(form, "entry_bytes", 0)))
            else:
                pieces.append(radius_search(self._fit_X, rows, radius, self._metric, exclude_self=exclude_self,
                                            device=self.device_, budget_bytes=budget))
        if len(pieces) == 1:
            return (*pieces[0], kind)
        offsets = np.cumsum([0] + [p[0][-1] for p in pieces[:-1]])
        indptr = np.concatenate([[0]] + [p[0][1:] + o for p, o in zip(pieces, offsets)])
        return indptr, np.concatenate([p[1] for p in pieces]), np.concatenate([p[2] for p in pieces]), kind

    def radius_neighbors(self, X=None, radius=None, return_distance=True, sort_results=False):
        """Every training point within ``radius`` of each row of ``X`` (``None``: the training set, self excluded).

        Returns object arrays of per-row distances and indices, as scikit-learn;
        rows are always ordered by (distance, index) (``sort_results`` is accepted
        for compatibility). A point is within the radius when its float64 exact
        distance is at most ``radius``.
        """
        if sort_results and not return_distance:
            raise ValueError("return_distance must be True if sort_results is True.")
        indptr, indices, dist, _ = self._radius_query(X, radius)
        dist = dist.astype(self._out_dtype)
        dist_rows, index_rows = csr_to_lists(indptr, indices, dist)
        return (dist_rows, index_rows) if return_distance else index_rows

    def radius_neighbors_graph(self, X=None, radius=None, mode="connectivity", sort_results=False):
        """Sparse (n_queries, n_samples_fit) graph of the training points within ``radius`` (as scikit-learn)."""
        if mode not in ("connectivity", "distance"):
            raise ValueError(f'Unsupported mode, must be one of "connectivity", or "distance" but got "{mode}" instead')
        indptr, indices, dist, _ = self._radius_query(X, radius)
        data = np.ones(len(indices)) if mode == "connectivity" else dist
        return sp.csr_matrix((data, indices, indptr), shape=(len(indptr) - 1, self.n_samples_fit_))

    def kneighbors_graph(self, X=None, n_neighbors=None, mode="connectivity"):
        """Sparse (n_queries, n_samples_fit) graph of the k nearest neighbours (as scikit-learn)."""
        if mode not in ("connectivity", "distance"):
            raise ValueError(f'Unsupported mode, must be one of "connectivity", or "distance" but got "{mode}" instead')
        dist, index, _ = self._query(X, n_neighbors)
        index = index.cpu().numpy()
        n_queries, k = index.shape
        data = np.ones(index.size) if mode == "connectivity" else dist.cpu().numpy().astype(np.float64).ravel()
        indptr = np.arange(0, n_queries * k + 1, k)
        return sp.csr_matrix((data, index.ravel(), indptr), shape=(n_queries, self.n_samples_fit_))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = self._extended_input and isinstance(self.metric, str) and self.metric == "nan_euclidean"
        if self._extended_input:
            tags.input_tags.sparse = True
            tags.input_tags.pairwise = self.metric == "precomputed"
            tags.input_tags.positive_only = tags.input_tags.pairwise
        return tags


# The scikit-learn mixins come last among the bases: every method they define is overridden by
# _KNeighborsBase's, which precedes them in the method resolution order.
class NearestNeighbors(_KNeighborsBase, SklearnKNeighborsMixin, SklearnRadiusNeighborsMixin):
    """Exact nearest-neighbour search on the GPU or CPU (drop-in for scikit-learn's).

    Parameters
    ----------
    n_neighbors : int, default=5
        Neighbours returned by :meth:`kneighbors` when not given there.
    algorithm : {"auto", "ball_tree", "kd_tree", "brute"}, default="auto"
        Accepted for compatibility; no effect: gpumine chooses its own exact
        method (the neighbours are the same whatever it chooses).
    leaf_size : int, default=30
        Accepted for compatibility; no effect.
    metric : str, callable or DistanceMetric, default="minkowski"
        The kNN engine's metrics (tiles certified exact, on the GPU the fused
        kernel): ``"euclidean"`` (``"l2"``), ``"sqeuclidean"``,
        ``"manhattan"`` (``"cityblock"``, ``"l1"``), ``"chebyshev"``,
        ``"minkowski"`` (with ``p``), ``"cosine"``, ``"inner_product"``.
        scikit-learn's other metrics, each an exact float64 brute force on the
        data's device (see :mod:`gpumine.neighbors._metrics_extra`):
        ``"seuclidean"`` and ``"mahalanobis"`` (their ``metric_params``),
        ``"haversine"`` (2 features: latitude, longitude in radians),
        ``"correlation"``, ``"canberra"``, ``"braycurtis"``, ``"hamming"``,
        ``"nan_euclidean"`` (NaN marks missing values, as scikit-learn's
        ``nan_euclidean_distances``), the boolean ``"jaccard"``, ``"dice"``,
        ``"rogerstanimoto"``, ``"russellrao"``, ``"sokalsneath"``, ``"yule"``
        (on ``X != 0``, as scikit-learn converts the data), a callable
        ``metric(a, b, **metric_params) -> float`` called on every pair of 1-D
        rows on the host, or a :class:`sklearn.metrics.DistanceMetric`. With
        ``algorithm="kd_tree"`` or ``"ball_tree"`` these raise where
        scikit-learn's trees do (the search is brute force either way).
        ``"precomputed"``: ``fit`` takes a square (n, n) distance matrix (dense,
        or a sparse graph whose stored entries are the only candidates) and the
        queries their (n_queries, n) distances to the fitted points.
    p : float, default=2
        Minkowski power, ``0 < p <= inf`` (2: euclidean, 1: manhattan). Below 1
        (a semi-metric, with scikit-learn's warning) the search is an exact
        float64 brute force. Ignored by the other metrics.
    metric_params : dict, optional
        ``{"p": ...}`` (overrides ``p``, with scikit-learn's warning); for
        ``metric="minkowski"``, weights ``{"w": array of n_features}``:
        ``(sum_j w_j |x_j - y_j| ** p) ** (1 / p)``, exact float64 brute
        force; for ``"seuclidean"`` ``{"V": variances}`` (required, positive,
        one per feature); for ``"mahalanobis"`` ``{"VI": inverse covariance}``
        or ``{"V": covariance}`` (required, n_features square; one that is
        not positive semi-definite warns: pairs with a negative form get NaN
        distances, ranked last, as SciPy's); for a callable, its keyword
        arguments. Other keys raise a ValueError naming them.
    n_jobs : int, optional
        Accepted for compatibility; no effect.
    device : {"auto", "cpu", "cuda", "cuda:N"}, default="auto"
    backend : {"auto", "torch", "triton"}, default="auto"
    working_memory : float, optional
        MiB for one tile's temporaries (see :mod:`gpumine.config`).
    verbose : int, optional
        0 hides the progress bar.
    precision : {"exact", "tf32", "bf16"}, default="exact"
        Arithmetic of the candidate search (see :func:`gpumine.neighbors.kneighbors`);
        results are exact in every mode.

    Attributes
    ----------
    n_features_in_ : int
    n_samples_fit_ : int
    effective_metric_ : str
    device_ : torch.device

    Examples
    --------
    >>> import numpy as np
    >>> from gpumine.neighbors import NearestNeighbors
    >>> nn = NearestNeighbors(n_neighbors=2, device="cpu").fit(np.array([[0.0], [1.0], [5.0]]))
    >>> nn.kneighbors(np.array([[0.9]]))
    (array([[0.1, 0.9]]), array([[1, 0]]))
    """

    def __init__(
        self,
        *,
        n_neighbors=5,
        radius=1.0,
        algorithm="auto",
        leaf_size=30,
        metric="minkowski",
        p=2,
        metric_params=None,
        n_jobs=None,
        device="auto",
        backend="auto",
        working_memory=None,
        verbose=None,
        precision="exact",
    ):
        super().__init__(n_neighbors, algorithm=algorithm, leaf_size=leaf_size, metric=metric, p=p,
                         metric_params=metric_params, n_jobs=n_jobs, device=device, backend=backend,
                         working_memory=working_memory, verbose=verbose, precision=precision)
        self.radius = radius

    _extended_input = True

    def fit(self, X, y=None):
        """Store the training set on the device. ``y`` is ignored."""
        self._fit(X)
        return self


def _neighbor_weights(dist: torch.Tensor, weights) -> torch.Tensor | None:
    """Vote weights as scikit-learn's ``_get_weights``: None (uniform), 1/d, or a callable."""
    if weights in (None, "uniform"):
        return None
    if weights == "distance":
        dist = dist.to(torch.float64)
        with np.errstate(divide="ignore"):
            inv = 1.0 / dist
        exact_hit = torch.isinf(inv)
        hit_rows = exact_hit.any(1)
        # a query that coincides with training points takes their labels only
        inv[hit_rows] = exact_hit[hit_rows].to(inv.dtype)
        return inv
    if callable(weights):
        w = weights(dist.cpu().numpy())
        return torch.as_tensor(np.asarray(w, dtype=np.float64), device=dist.device)
    raise ValueError(f"weights must be 'uniform', 'distance' or a callable; got {weights!r}")


class _WeightedKNeighbors(_KNeighborsBase):
    """Adds ``weights`` (uniform, distance or a callable) for the estimators that combine neighbours."""

    _extended_input = True

    def __init__(
        self,
        n_neighbors=5,
        *,
        weights="uniform",
        algorithm="auto",
        leaf_size=30,
        p=2,
        metric="minkowski",
        metric_params=None,
        n_jobs=None,
        device="auto",
        backend="auto",
        working_memory=None,
        verbose=None,
        precision="exact",
    ):
        super().__init__(
            n_neighbors, algorithm=algorithm, leaf_size=leaf_size, metric=metric, p=p,
            metric_params=metric_params, n_jobs=n_jobs, device=device, backend=backend,
            working_memory=working_memory, verbose=verbose, precision=precision,
        )
        self.weights = weights


class KNeighborsClassifier(HostScoreMixin, ClassifierMixin, _WeightedKNeighbors, SklearnKNeighborsMixin):
    """k-nearest-neighbour classifier by (weighted) majority vote, exact on GPU or CPU.

    Parameters are those of :class:`NearestNeighbors` plus ``weights``
    (``"uniform"``, ``"distance"`` or a callable on the distance array). Vote
    ties go to the smallest label, as in scikit-learn. ``y`` may be 2-D
    (n_samples, n_outputs): each output is voted on separately, ``predict``
    returns (n_queries, n_outputs) and ``predict_proba`` a list with one array
    per output.

    Attributes
    ----------
    classes_ : ndarray, or list of ndarray for 2-D ``y``
        The class labels seen in ``fit``, sorted (per output).
    outputs_2d_ : bool
        Whether ``y`` was 2-D.

    Examples
    --------
    >>> import numpy as np
    >>> from gpumine.neighbors import KNeighborsClassifier
    >>> X = np.array([[0.0], [1.0], [2.0], [10.0], [11.0]])
    >>> clf = KNeighborsClassifier(n_neighbors=3, device="cpu").fit(X, ["a", "a", "a", "b", "b"])
    >>> clf.predict(np.array([[0.5], [10.5]]))
    array(['a', 'b'], dtype='<U1')
    """

    def fit(self, X, y):
        """Store the training set and its labels (``y`` 2-D: one column per output)."""
        X_t = self._fit(X)
        y = check_labels(y, X_t.shape[0])
        if y.ndim == 2 and y.shape[1] == 1:
            warnings.warn(
                "A column-vector y was passed when a 1d array was expected; it was raveled. "
                "Pass y as shape (n_samples,)", DataConversionWarning, stacklevel=2,
            )
            y = y.ravel()
        self.outputs_2d_ = y.ndim == 2
        y2 = y.reshape(len(y), -1)
        check_classification_targets(y)
        classes, codes = [], np.empty(y2.shape, dtype=np.int64)
        for o in range(y2.shape[1]):
            found, codes[:, o] = np.unique(y2[:, o], return_inverse=True)
            classes.append(found)
        self.classes_ = classes if self.outputs_2d_ else classes[0]
        self._y = torch.as_tensor(codes if self.outputs_2d_ else codes[:, 0], device=self.device_)
        _neighbor_weights(torch.ones(1, 1), self.weights)  # validates ``weights``
        return self

    def _votes(self, X) -> tuple[list[torch.Tensor], object]:
        """Per output, the (n_queries, n_classes) float64 (weighted) votes; and the output kind."""
        dist, index, kind = self._query(X, None)
        w = _neighbor_weights(dist, self.weights)
        if w is None:
            w = torch.ones(index.shape, dtype=torch.float64, device=index.device)
        w = w.to(index.device)
        if callable(self.weights) and bool((w.sum(1) == 0).any()):
            raise ValueError("All neighbors of some sample is getting zero weights. Please modify 'weights' to avoid "
                             "this case if you are using a user-defined function.")
        codes = self._y if self.outputs_2d_ else self._y[:, None]
        classes = self.classes_ if self.outputs_2d_ else [self.classes_]
        votes = []
        for o, found in enumerate(classes):
            labels = codes[:, o][index]
            v = torch.zeros((labels.shape[0], len(found)), dtype=torch.float64, device=labels.device)
            votes.append(v.scatter_add_(1, labels, w))
        return votes, kind

    def predict(self, X):
        """Class labels of ``X`` (ties go to the smallest label); (n_queries, n_outputs) for 2-D ``y``."""
        votes, kind = self._votes(X)
        classes = self.classes_ if self.outputs_2d_ else [self.classes_]
        # argmax returns the first maximum: the smallest label
        columns = [found[torch.argmax(v, dim=1).cpu().numpy()] for found, v in zip(classes, votes)]
        if self.outputs_2d_:
            labels = np.empty((len(columns[0]), len(columns)), dtype=classes[0].dtype)
            for o, column in enumerate(columns):
                labels[:, o] = column
        else:
            labels = columns[0]
        return labels_to_output(labels, kind)

    def predict_proba(self, X):
        """Class probabilities of ``X``: the normalised (weighted) votes, columns in ``classes_`` order
        (a list of such arrays, one per output, for 2-D ``y``)."""
        votes, kind = self._votes(X)
        probas = []
        for v in votes:
            total = v.sum(1, keepdim=True)
            probas.append(to_output(v / torch.where(total > 0, total, torch.ones_like(total)), kind))
        return probas if self.outputs_2d_ else probas[0]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags


class KNeighborsRegressor(HostScoreMixin, RegressorMixin, _WeightedKNeighbors, SklearnKNeighborsMixin):
    """k-nearest-neighbour regression by the (weighted) mean of the neighbours' targets.

    Parameters are those of :class:`KNeighborsClassifier`. ``y`` may be 2-D for
    several outputs; predictions are float64 as in scikit-learn.

    Examples
    --------
    >>> import numpy as np
    >>> from gpumine.neighbors import KNeighborsRegressor
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
    >>> KNeighborsRegressor(n_neighbors=2, device="cpu").fit(X, [0.0, 0.0, 1.0, 1.0]).predict([[1.6]])
    array([0.5])
    """

    def fit(self, X, y):
        """Store the training set and its targets."""
        X_t = self._fit(X)
        y = check_labels(y, X_t.shape[0])
        if y.dtype.kind not in "biuf":
            try:
                y = y.astype(np.float64)
            except ValueError:
                raise ValueError("y must be numeric for KNeighborsRegressor; encode string targets first") from None
        self._y_ndim = y.ndim
        self._y = torch.as_tensor(y.astype(np.float64).reshape(len(y), -1), device=self.device_)
        _neighbor_weights(torch.ones(1, 1), self.weights)
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def predict(self, X):
        """Mean target of the neighbours of each row of ``X`` (weighted by 1/distance if asked)."""
        dist, index, kind = self._query(X, None)
        targets = self._y[index]  # (n, k, n_outputs)
        w = _neighbor_weights(dist, self.weights)
        if w is None:
            pred = targets.mean(1)
        else:
            w = w.to(targets.device)
            pred = (targets * w[:, :, None]).sum(1) / w.sum(1, keepdim=True)
        if self._y_ndim == 1:
            pred = pred[:, 0]
        return to_output(pred, kind)
