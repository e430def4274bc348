"""Radius-based classification and regression, and the kNN graph transformer (scikit-learn's API).

The neighbours of a query are the training points within ``radius`` (exact,
see :mod:`gpumine.neighbors._radius`); the estimators combine their labels or
targets as scikit-learn's do. :class:`KNeighborsTransformer` turns data into the
sparse kNN graph that Isomap, TSNE, UMAP or HDBSCAN take as ``metric="precomputed"``.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from sklearn.base import ClassifierMixin, RegressorMixin, TransformerMixin
from sklearn.exceptions import DataConversionWarning
from sklearn.utils._available_if import available_if
from sklearn.utils.multiclass import check_classification_targets

from ..utils._validation import HostScoreMixin, check_labels, labels_to_output, to_output
from ._estimators import SklearnKNeighborsMixin, SklearnRadiusNeighborsMixin, _KNeighborsBase

__all__ = ["RadiusNeighborsClassifier", "RadiusNeighborsRegressor", "KNeighborsTransformer"]


def _radius_weights(dist: np.ndarray, indptr: np.ndarray, weights) -> np.ndarray | None:
    """Per-pair weights as scikit-learn's ``_get_weights`` for ragged rows (None: uniform)."""
    if weights in (None, "uniform"):
        return None
    if weights == "distance":
        with np.errstate(divide="ignore"):
            w = 1.0 / dist
        zero = dist == 0
        if zero.any():  # a query on top of training points takes those points only
            rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
            hit = np.bincount(rows[zero], minlength=len(indptr) - 1) > 0
            on_hit_rows = hit[rows]
            w[on_hit_rows] = zero[on_hit_rows].astype(np.float64)
        return w
    if callable(weights):
        return np.concatenate([np.asarray(weights(dist[a:b]), dtype=np.float64)
                               for a, b in zip(indptr[:-1], indptr[1:])]) if len(dist) else np.zeros(0)
    raise ValueError(f"weights must be 'uniform', 'distance' or a callable; got {weights!r}")


def _never(estimator) -> bool:
    return False


class _RadiusBase(_KNeighborsBase, SklearnRadiusNeighborsMixin):
    _extended_input = True

    # scikit-learn's radius estimators have no k-neighbour queries (code that asks hasattr gets False)
    kneighbors = available_if(_never)(_KNeighborsBase.kneighbors)
    kneighbors_graph = available_if(_never)(_KNeighborsBase.kneighbors_graph)

    def __init__(self, radius=1.0, *, weights="uniform", algorithm="auto", leaf_size=30, p=2, metric="minkowski",
                 metric_params=None, n_jobs=None, device="auto", backend="auto", working_memory=None, verbose=None):
        self.radius = radius
        self.weights = weights
        self.algorithm = algorithm
        self.leaf_size = leaf_size
        self.p = p
        self.metric = metric
        self.metric_params = metric_params
        self.n_jobs = n_jobs
        self.device = device
        self.backend = backend
        self.working_memory = working_memory
        self.verbose = verbose

    def _neighbours(self, X):
        indptr, indices, dist, kind = self._radius_query(X, None)
        w = _radius_weights(dist, indptr, self.weights)
        return indptr, indices, (np.ones(len(indices)) if w is None else w), kind


class RadiusNeighborsClassifier(HostScoreMixin, ClassifierMixin, _RadiusBase):
    """Vote among the training points within ``radius`` (exact, GPU or CPU).

    Parameters are scikit-learn's: ``radius``, ``weights`` (``"uniform"``,
    ``"distance"`` or a callable), ``outlier_label`` (None: a query without
    neighbours raises; ``"most_frequent"``; or a label), plus ``device``,
    ``backend``, ``working_memory``, ``verbose``. ``algorithm``, ``leaf_size``
    and ``n_jobs`` are accepted without effect.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [0.5], [3.0], [3.2]])
    >>> clf = RadiusNeighborsClassifier(radius=1.0, device="cpu").fit(X, [0, 0, 1, 1])
    >>> clf.predict([[0.2], [2.9]])
    array([0, 1])
    """

    def __init__(self, radius=1.0, *, weights="uniform", algorithm="auto", leaf_size=30, p=2, metric="minkowski",
                 outlier_label=None, metric_params=None, n_jobs=None, device="auto", backend="auto",
                 working_memory=None, verbose=None):
        super().__init__(radius, weights=weights, algorithm=algorithm, leaf_size=leaf_size, p=p, metric=metric,
                         metric_params=metric_params, n_jobs=n_jobs, device=device, backend=backend,
                         working_memory=working_memory, verbose=verbose)
        self.outlier_label = outlier_label

    def fit(self, X, y):
        """Store the training set and its labels (``y`` 2-D: one column per output)."""
        X_t = self._fit(X)
        y = check_labels(y, X_t.shape[0])
        if y.ndim == 2 and y.shape[1] == 1:
            warnings.warn("A column-vector y was passed when a 1d array was expected. Please change the shape of y "
                          "to (n_samples,), for example using ravel().", DataConversionWarning, stacklevel=2)
            y = y.ravel()
        check_classification_targets(y)
        self.outputs_2d_ = y.ndim == 2
        y2 = y.reshape(len(y), -1)
        classes, codes = [], np.empty(y2.shape, dtype=np.int64)
        for o in range(y2.shape[1]):
            found, codes[:, o] = np.unique(y2[:, o], return_inverse=True)
            classes.append(found)
        self._y = codes
        _radius_weights(np.ones(1), np.array([0, 1]), self.weights)  # validates ``weights``
        labels = self._outlier_labels(classes, codes)
        self.classes_ = classes if self.outputs_2d_ else classes[0]
        self.outlier_label_ = labels if self.outputs_2d_ or labels is None else labels[0]
        return self

    def _outlier_labels(self, classes, codes):
        """``outlier_label`` per output, checked as scikit-learn does (None: none given)."""
        given = self.outlier_label
        if given is None:
            return None
        if isinstance(given, str) and given == "most_frequent":
            return [found[np.bincount(codes[:, o]).argmax()] for o, found in enumerate(classes)]
        if np.ndim(given) > 0:
            if len(given) != len(classes):
                raise ValueError(f"The length of outlier_label: {given} is inconsistent with the output length: "
                                 f"{len(classes)}")
            labels = list(given)
        else:
            labels = [given] * len(classes)
        for found, label in zip(classes, labels):
            if np.ndim(label) > 0:
                raise TypeError(f"The outlier_label of classes {found} is supposed to be a scalar, got {label}.")
            if np.append(found, label).dtype != found.dtype:
                raise TypeError(f"The dtype of outlier_label {label} is inconsistent with classes {found} in y.")
        return labels

    def _probabilities(self, X):
        """Per output, the (n_queries, n_classes) probabilities, the rows without neighbours, and the output kind."""
        indptr, indices, w, kind = self._neighbours(X)
        n = len(indptr) - 1
        rows = np.repeat(np.arange(n), np.diff(indptr))
        empty = np.diff(indptr) == 0
        if empty.any() and self.outlier_label_ is None:
            raise ValueError(f"No neighbors found for test samples {np.flatnonzero(empty).tolist()}, you can try "
                             "using larger radius, giving a label for outliers, or considering removing them "
                             "from your dataset.")
        if callable(self.weights) and len(rows):
            total = np.bincount(rows, weights=w, minlength=n)
            if (total[~empty] == 0).any():
                raise ValueError("All neighbors of some sample is getting zero weights. Please modify 'weights' to "
                                 "avoid this case if you are using a user-defined function.")
        classes = self.classes_ if self.outputs_2d_ else [self.classes_]
        labels = self.outlier_label_ if self.outputs_2d_ else [self.outlier_label_]
        probas = []
        for o, found in enumerate(classes):
            votes = np.zeros((n, len(found)))
            np.add.at(votes, (rows, self._y[indices, o]), w)
            if empty.any():
                at = np.flatnonzero(found == labels[o])
                if at.size:
                    votes[empty, at[0]] = 1.0
                else:
                    warnings.warn(f"Outlier label {labels[o]} is not in training classes. All class probabilities "
                                  "of outliers will be assigned with 0.", UserWarning, stacklevel=3)
            total = votes.sum(1, keepdims=True)
            probas.append(np.divide(votes, total, out=np.zeros_like(votes), where=total > 0))
        return probas, empty, kind

    def predict_proba(self, X):
        """Class probabilities: the normalised (weighted) votes within the radius; rows without
        neighbours get all their weight on ``outlier_label`` (zeros if it is not a class). A list
        of such arrays, one per output, for 2-D ``y``."""
        probas, _, kind = self._probabilities(X)
        probas = [to_output(torch.from_numpy(p), kind) for p in probas]
        return probas if self.outputs_2d_ else probas[0]

    def predict(self, X):
        """Class labels (vote ties go to the smallest label; queries without neighbours: ``outlier_label``);
        (n_queries, n_outputs) for 2-D ``y``."""
        probas, empty, kind = self._probabilities(X)
        classes = self.classes_ if self.outputs_2d_ else [self.classes_]
        labels = self.outlier_label_ if self.outputs_2d_ else [self.outlier_label_]
        columns = []
        for o, (found, proba) in enumerate(zip(classes, probas)):
            column = found[proba.argmax(1)]
            if empty.any():
                column = column.astype(object) if not isinstance(labels[o], type(column[0])) else column
                column[empty] = labels[o]
            columns.append(column)
        if not self.outputs_2d_:
            return labels_to_output(columns[0], kind)
        out = np.empty((len(columns[0]), len(columns)), dtype=classes[0].dtype)
        for o, column in enumerate(columns):
            out[:, o] = column
        return labels_to_output(out, kind)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags


class RadiusNeighborsRegressor(HostScoreMixin, RegressorMixin, _RadiusBase):
    """The (weighted) mean target of the training points within ``radius`` (exact, GPU or CPU).

    Queries without neighbours predict NaN with a warning, as scikit-learn.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [0.5], [3.0]])
    >>> RadiusNeighborsRegressor(radius=1.0, device="cpu").fit(X, [1.0, 2.0, 7.0]).predict([[0.2]])
    array([1.5])
    """

    def fit(self, X, y):
        """Store the training set and its targets."""
        X_t = self._fit(X)
        y = check_labels(y, X_t.shape[0])
        try:
            y = y.astype(np.float64)
        except ValueError:
            raise ValueError("y must be numeric for RadiusNeighborsRegressor; encode string targets first") from None
        self._y_ndim = y.ndim
        self._y = y.reshape(len(y), -1)
        _radius_weights(np.ones(1), np.array([0, 1]), self.weights)
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def predict(self, X):
        """Mean target of the neighbours within the radius of each row of ``X``."""
        indptr, indices, w, kind = self._neighbours(X)
        n = len(indptr) - 1
        rows = np.repeat(np.arange(n), np.diff(indptr))
        sums = np.zeros((n, self._y.shape[1]))
        np.add.at(sums, rows, self._y[indices] * w[:, None])
        total = np.bincount(rows, weights=w, minlength=n)[:, None]
        empty = np.diff(indptr) == 0
        if empty.any():
            warnings.warn("One or more samples have no neighbors within specified radius; predicting NaN.",
                          UserWarning, stacklevel=2)
        with np.errstate(invalid="ignore", divide="ignore"):
            pred = sums / total
        pred[empty] = np.nan
        return to_output(torch.from_numpy(pred[:, 0] if self._y_ndim == 1 else pred), kind)


class KNeighborsTransformer(TransformerMixin, _KNeighborsBase, SklearnKNeighborsMixin):
    """Data to its sparse kNN graph (scikit-learn's ``KNeighborsTransformer``), exact on GPU or CPU.

    ``transform(X)`` gives the (n_queries, n_samples_fit) graph of each row's
    ``n_neighbors`` nearest training points; with ``mode="distance"`` one more
    neighbour is kept, since each training point is its own first neighbour
    (scikit-learn's convention). Feed it to estimators that take
    ``metric="precomputed"`` sparse graphs (Isomap, TSNE, UMAP, HDBSCAN).

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [1.0], [3.0]])
    >>> KNeighborsTransformer(n_neighbors=1, device="cpu").fit_transform(X).toarray()
    array([[0., 1., 0.],
           [1., 0., 0.],
           [0., 2., 0.]])
    """

    _extended_input = True

    def __init__(self, *, mode="distance", n_neighbors=5, algorithm="auto", leaf_size=30, metric="minkowski", p=2,
                 metric_params=None, n_jobs=None, device="auto", backend="auto", working_memory=None, verbose=None):
        super().__init__(n_neighbors, algorithm=algorithm, leaf_size=leaf_size, metric=metric, p=p,
                         metric_params=metric_params, n_jobs=n_jobs, device=device, backend=backend,
                         working_memory=working_memory, verbose=verbose)
        self.mode = mode

    def fit(self, X, y=None):
        """Store the training set. ``y`` is ignored."""
        if self.mode not in ("connectivity", "distance"):
            raise ValueError(f"mode must be 'connectivity' or 'distance'; got {self.mode!r}")
        self._fit(X)
        self.n_features_out_ = self.n_samples_fit_  # sklearn's set_output needs the output width
        return self

    def transform(self, X):
        """The sparse kNN graph of ``X`` against the training set (CSR, float64)."""
        extra = 1 if self.mode == "distance" else 0
        return self.kneighbors_graph(X, n_neighbors=self.n_neighbors + extra, mode=self.mode)

    def fit_transform(self, X, y=None):
        return self.fit(X).transform(X)

    def get_feature_names_out(self, input_features=None):
        return np.asarray([f"kneighborstransformer{i}" for i in range(self.n_samples_fit_)], dtype=object)
