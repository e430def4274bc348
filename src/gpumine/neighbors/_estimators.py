"""scikit-learn compatible estimators over the exact kNN engine.

Parameter names follow scikit-learn's ``NearestNeighbors``,
``KNeighborsClassifier`` and ``KNeighborsRegressor`` so they are drop-in
replacements; ``device``, ``backend``, ``working_memory`` and ``verbose`` are
added. ``algorithm`` accepts scikit-learn's values (``"auto"``, ``"ball_tree"``,
``"kd_tree"``, ``"brute"``) and ``leaf_size`` and ``n_jobs`` are accepted, all
without effect: gpumine chooses its own exact method (a KD-tree or matrix
products on the host, tiles or a fused kernel on the GPU), and every choice gives
the same neighbours.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import DataConversionWarning
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from .._validation import check_array, check_labels, check_n_features, check_n_neighbors, output_kind, to_output
from ..config import resolve_backend, resolve_device, working_memory_bytes
from ..core.distance import check_precision, get_metric
from ..core.tiles import fits_on_device
from ._engine import choose_backend, knn_search
from ._graphs import search_with_graph
from ._neighbor_graphs import csr_to_lists
from ._radius import radius_search
from .._device_state import HostPickleMixin

try:  # keeps feature-name checks identical to scikit-learn's own estimators
    from sklearn.utils.validation import _check_feature_names
except ImportError:  # pragma: no cover - very old scikit-learn
    def _check_feature_names(estimator, X, *, reset):
        return None

__all__ = ["NearestNeighbors", "KNeighborsClassifier", "KNeighborsRegressor"]


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

    # -- fitting -----------------------------------------------------------------
    def _fit(self, X):
        if self.algorithm not in ("auto", "ball_tree", "kd_tree", "brute"):
            raise ValueError(
                f"algorithm must be 'auto', 'ball_tree', 'kd_tree' or 'brute' (scikit-learn's values; gpumine "
                f"chooses its own exact method whatever the value); got {self.algorithm!r}"
            )
        p = self.p
        if self.metric_params:
            extra = set(self.metric_params) - {"p"}
            if extra:
                raise ValueError(f"metric_params {sorted(extra)} are not supported; only 'p' is")
            p = self.metric_params.get("p", p)
        self._metric = get_metric(self.metric, p if self.metric == "minkowski" else None)
        self.effective_metric_ = self._metric.name
        self.device_ = resolve_device(self.device)
        resolve_backend(self.backend, self.device_, has_triton_kernel=True)
        working_memory_bytes(self.working_memory, self.device_)  # validates the parameter
        if sp.issparse(X):
            raise TypeError("sparse input is not supported by gpumine estimators; convert X with X.toarray()")
        _check_feature_names(self, X, reset=True)
        X_t = check_array(X, name="X")
        check_precision(getattr(self, "precision", "exact"), X_t.dtype)
        n_neighbors = getattr(self, "n_neighbors", None)  # radius estimators have none
        if isinstance(n_neighbors, (int, np.integer)) and not isinstance(n_neighbors, bool):
            if n_neighbors < 1:
                raise ValueError(f"n_neighbors must be at least 1; got {n_neighbors}")
        elif n_neighbors is not None:
            raise TypeError(f"n_neighbors must be a positive integer; got {n_neighbors!r}")
        radius = getattr(self, "radius", None)
        if radius is not None and (isinstance(radius, bool) or not isinstance(radius, (int, float, np.number))
                                   or not 0 <= float(radius) < float("inf")):
            raise ValueError(f"radius must be a finite number >= 0; got {radius!r}")
        self._fit_kind = output_kind(X)
        nbytes = X_t.numel() * X_t.element_size()
        self._fit_X = X_t.to(self.device_) if fits_on_device(3 * nbytes, self.device_) else X_t
        self.n_features_in_ = X_t.shape[1]
        self.n_samples_fit_ = X_t.shape[0]
        return X_t

    # -- queries -------------------------------------------------------------------
    def _query(self, X, n_neighbors):
        """(scores, indices, output kind) for X (None: the training set, self excluded)."""
        check_is_fitted(self, "n_samples_fit_")
        if n_neighbors is None:
            n_neighbors = self.n_neighbors
        if X is None:
            query, kind, exclude_self = self._fit_X, self._fit_kind, True
        else:
            if sp.issparse(X):
                raise TypeError("sparse input is not supported by gpumine estimators; convert X with X.toarray()")
            _check_feature_names(self, X, reset=False)
            query = check_array(X, name="X", dtype=self._fit_X.dtype)
            check_n_features(query, self.n_features_in_, type(self).__name__)
            kind, exclude_self = output_kind(X), False
        n_neighbors = check_n_neighbors(n_neighbors, self.n_samples_fit_, excluding_self=exclude_self)
        backend = choose_backend(self.backend, self.device_, self._metric, self._fit_X.dtype, n_neighbors, self.n_samples_fit_)
        if self.device_.type == "cuda":
            # repeated small searches replay a captured graph, as kneighbors does (gpumine.neighbors._graphs)
            found = search_with_graph(self._fit_X, query, n_neighbors, self._metric, exclude_self=exclude_self,
                                      device=self.device_, working_memory=self.working_memory, backend=backend,
                                      precision=self.precision, result_device=self.device_)
            if found is not None:
                return found[0], found[1], kind
        scores, index = knn_search(
            self._fit_X,
            query,
            n_neighbors,
            self._metric,
            exclude_self=exclude_self,
            device=self.device_,
            budget_bytes=working_memory_bytes(self.working_memory, self.device_),
            result_device=self.device_,
            verbose=self.verbose,
            backend=backend,
            as_distance=True,
            precision=self.precision,
        )
        return scores, index, kind

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """Find the k nearest training points of each row of ``X``.

        Parameters
        ----------
        X : array-like of shape (n_queries, n_features), optional
            ``None`` queries the training set, excluding each point itself
            (not its exact duplicates: they are other points at distance 0,
            listed first by index). scikit-learn instead drops the point itself
            only when it is among its k + 1 nearest, else the first neighbour
            listed, so its answer depends on how ties were ordered: for
            ``np.ones((3, 1))`` and k = 1 it gives ``[1, 0, 1]``, gpumine
            ``[1, 0, 0]`` (each point's nearest other point, lower index first).
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
        """CSR rows ``(indptr, indices, float64 distances)`` of the training points within ``radius``, and the output kind."""
        check_is_fitted(self, "n_samples_fit_")
        radius = self.radius if radius is None else radius
        if X is None:
            query, kind, exclude_self = self._fit_X, self._fit_kind, True
        else:
            if sp.issparse(X):
                raise TypeError("sparse input is not supported by gpumine estimators; convert X with X.toarray()")
            _check_feature_names(self, X, reset=False)
            query = check_array(X, name="X", dtype=self._fit_X.dtype, allow_empty=True)
            check_n_features(query, self.n_features_in_, type(self).__name__)
            kind, exclude_self = output_kind(X), False
        indptr, indices, dist = radius_search(self._fit_X, query, radius, self._metric, exclude_self=exclude_self,
                                              device=self.device_,
                                              budget_bytes=working_memory_bytes(self.working_memory, self.device_))
        return indptr, indices, dist, kind

    def radius_neighbors(self, X=None, radius=None, return_distance=True, sort_results=False):
        """Every training point within ``radius`` of each row of ``X`` (``None``: the training set, self excluded).

        Returns object arrays of per-row distances and indices, as scikit-learn;
        rows are always ordered by (distance, index) (``sort_results`` is accepted
        for compatibility). A point is within the radius when its float64 exact
        distance is at most ``radius``.
        """
        indptr, indices, dist, _ = self._radius_query(X, radius)
        dist = dist.astype(np.float32 if self._fit_X.dtype == torch.float32 else np.float64)
        dist_rows, index_rows = csr_to_lists(indptr, indices, dist)
        return (dist_rows, index_rows) if return_distance else index_rows

    def radius_neighbors_graph(self, X=None, radius=None, mode="connectivity", sort_results=False):
        """Sparse (n_queries, n_samples_fit) graph of the training points within ``radius`` (as scikit-learn)."""
        if mode not in ("connectivity", "distance"):
            raise ValueError(f"mode must be 'connectivity' or 'distance'; got {mode!r}")
        indptr, indices, dist, _ = self._radius_query(X, radius)
        data = np.ones(len(indices)) if mode == "connectivity" else dist
        return sp.csr_matrix((data, indices, indptr), shape=(len(indptr) - 1, self.n_samples_fit_))

    def kneighbors_graph(self, X=None, n_neighbors=None, mode="connectivity"):
        """Sparse (n_queries, n_samples_fit) graph of the k nearest neighbours (as scikit-learn)."""
        if mode not in ("connectivity", "distance"):
            raise ValueError(f"mode must be 'connectivity' or 'distance'; got {mode!r}")
        dist, index, _ = self._query(X, n_neighbors)
        index = index.cpu().numpy()
        n_queries, k = index.shape
        data = np.ones(index.size) if mode == "connectivity" else dist.cpu().numpy().astype(np.float64).ravel()
        indptr = np.arange(0, n_queries * k + 1, k)
        return sp.csr_matrix((data, index.ravel(), indptr), shape=(n_queries, self.n_samples_fit_))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags


class NearestNeighbors(_KNeighborsBase):
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
    metric : str, default="minkowski"
        See :func:`gpumine.neighbors.kneighbors`; ``"minkowski"`` uses ``p``.
    p : float, default=2
        Minkowski power (2: euclidean, 1: manhattan).
    metric_params : dict, optional
        Only ``{"p": ...}`` is supported.
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


class KNeighborsClassifier(ClassifierMixin, _WeightedKNeighbors):
    """k-nearest-neighbour classifier by (weighted) majority vote, exact on GPU or CPU.

    Parameters are those of :class:`NearestNeighbors` plus ``weights``
    (``"uniform"``, ``"distance"`` or a callable on the distance array). Vote
    ties go to the smallest label, as in scikit-learn.

    Attributes
    ----------
    classes_ : ndarray
        The class labels seen in ``fit``, sorted.

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
        """Store the training set and its labels."""
        X_t = self._fit(X)
        y = check_labels(y, X_t.shape[0])
        if y.ndim == 2 and y.shape[1] == 1:
            warnings.warn(
                "A column-vector y was passed when a 1d array was expected; it was raveled. "
                "Pass y as shape (n_samples,)", DataConversionWarning, stacklevel=2,
            )
            y = y.ravel()
        if y.ndim != 1:
            raise ValueError(f"y must be 1-D for KNeighborsClassifier; got shape {y.shape}")
        check_classification_targets(y)
        self.classes_, encoded = np.unique(y, return_inverse=True)
        self._y = torch.as_tensor(encoded.astype(np.int64), device=self.device_)
        _neighbor_weights(torch.ones(1, 1), self.weights)  # validates ``weights``
        return self

    def _votes(self, X) -> tuple[torch.Tensor, object]:
        dist, index, kind = self._query(X, None)
        labels = self._y[index]
        w = _neighbor_weights(dist, self.weights)
        if w is None:
            w = torch.ones(labels.shape, dtype=torch.float64, device=labels.device)
        votes = torch.zeros((labels.shape[0], len(self.classes_)), dtype=torch.float64, device=labels.device)
        votes.scatter_add_(1, labels, w.to(votes.device))
        if callable(self.weights) and bool((votes.sum(1) == 0).any()):
            raise ValueError("All neighbors of some sample is getting zero weights. Please modify 'weights' to avoid "
                             "this case if you are using a user-defined function.")
        return votes, kind

    def predict(self, X):
        """Class labels of ``X`` (ties go to the smallest label)."""
        votes, kind = self._votes(X)
        winner = torch.argmax(votes, dim=1).cpu().numpy()  # argmax returns the first maximum
        labels = self.classes_[winner]
        if kind.kind == "torch" and labels.dtype.kind in "biuf":
            return torch.as_tensor(labels, device=kind.device)
        return labels

    def predict_proba(self, X):
        """Class probabilities of ``X``: the normalised (weighted) votes, columns in ``classes_`` order."""
        votes, kind = self._votes(X)
        total = votes.sum(1, keepdim=True)
        proba = votes / torch.where(total > 0, total, torch.ones_like(total))
        return to_output(proba, kind)


class KNeighborsRegressor(RegressorMixin, _WeightedKNeighbors):
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
