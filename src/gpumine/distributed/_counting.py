"""Counting on a Dask cluster: per-partition contingency tables, summed (integers: exact in any order).

:class:`CategoricalNB` counts every row partition where it lives (on the worker's
GPU when it has one) with the single-process estimator's ``partial_fit``, and
sums the class and category counts; the model built from the sums has the same
fitted attributes and probabilities as one process fitted on all rows.
"""

from __future__ import annotations

import numpy as np

from ._knn import _client, _computed, tree_reduce

__all__ = ["CategoricalNB"]


def _aligned_blocks(X, y, n_blocks: int):
    """Pairs of (X rows, y rows) blocks: a dask array's row chunks (y rechunked alike), or NumPy row blocks."""
    import dask.array as da

    if isinstance(X, da.Array):
        if len(X.chunks[1]) > 1:
            X = X.rechunk({1: -1})
        y = y if isinstance(y, da.Array) else da.from_array(np.asarray(y), chunks=-1)
        y = y.rechunk((X.chunks[0],))
        return list(zip(X.to_delayed().ravel(), y.to_delayed().ravel()))
    X = np.asarray(X.to_numpy() if hasattr(X, "to_numpy") else X)
    y = np.asarray(y.to_numpy() if hasattr(y, "to_numpy") else y)
    if len(y) != len(X):
        raise ValueError(f"y has {len(y)} labels but X has {len(X)} samples; pass one label per row of X")
    bounds = np.linspace(0, len(X), max(1, min(n_blocks, len(X))) + 1).astype(np.int64)
    return [(X[a:b], y[a:b]) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _labels(y_block):
    return np.unique(np.asarray(y_block))


def _partition_counts(X_block, y_block, classes, params):
    """One partition's counts with the single-process estimator: (n_features, class counts, category counts)."""
    from gpumine.counting import CategoricalNB as LocalNB

    X_block, y_block = np.asarray(X_block), np.asarray(y_block)
    if len(X_block) == 0:
        return None
    nb = LocalNB(**params).partial_fit(X_block, y_block, classes=classes)
    return nb.n_features_in_, nb.class_count_, nb.category_count_, nb.representation_


def _sum_counts(a, b):
    if a is None or b is None:
        return a if b is None else b
    if a[0] != b[0]:
        raise ValueError(f"partitions have {a[0]} and {b[0]} features; every partition needs the same columns")
    categories = []
    for left, right in zip(a[2], b[2]):
        width = max(left.shape[1], right.shape[1])
        total = np.zeros((left.shape[0], width))
        total[:, : left.shape[1]] += left
        total[:, : right.shape[1]] += right
        categories.append(total)
    return a[0], a[1] + b[1], categories, a[3]


class CategoricalNB:
    """Categorical Naive Bayes fitted on a Dask cluster: :class:`gpumine.counting.CategoricalNB`'s model.

    Parameters are the single-process estimator's (``alpha``, ``fit_prior``,
    ``class_prior``, ``min_categories``, ``device``, ...) plus ``client``.
    ``fit(X, y)`` takes dask arrays chunked by rows (``y`` is rechunked to ``X``'s
    rows) or NumPy arrays (split over the workers) and returns a fitted
    single-process :class:`gpumine.counting.CategoricalNB` in ``model_``, whose
    ``predict``/``predict_proba`` this estimator forwards.
    """

    def __init__(self, *, alpha=1.0, force_alpha=True, fit_prior=True, class_prior=None, min_categories=None,
                 handle_unknown="error", device="auto", backend="auto", client=None):
        self.handle_unknown = handle_unknown
        self.alpha = alpha
        self.force_alpha = force_alpha
        self.fit_prior = fit_prior
        self.class_prior = class_prior
        self.min_categories = min_categories
        self.device = device
        self.backend = backend
        self.client = client

    def _local_params(self, device):
        return dict(alpha=self.alpha, force_alpha=self.force_alpha, fit_prior=self.fit_prior,
                    class_prior=self.class_prior, min_categories=self.min_categories, handle_unknown=self.handle_unknown,
                    device=device, backend=self.backend)

    def fit(self, X, y):
        """Count every partition on the cluster, sum, and build the model."""
        from gpumine.config import resolve_device
        from gpumine.counting import CategoricalNB as LocalNB

        client = _client(self.client)
        n_workers = max(1, len(client.scheduler_info()["workers"]))
        # a dask array's blocks are computed where the scheduler puts them; NumPy blocks are scattered
        blocks = [(client.scatter(xb, hash=False) if isinstance(xb, np.ndarray) else _computed(client, xb),
                   client.scatter(yb, hash=False) if isinstance(yb, np.ndarray) else _computed(client, yb))
                  for xb, yb in _aligned_blocks(X, y, n_workers)]
        labels = client.gather([client.submit(_labels, y_block, pure=False) for _, y_block in blocks])
        classes = np.unique(np.concatenate(labels)) if labels else np.zeros(0)
        params = self._local_params(self.device)
        parts = [client.submit(_partition_counts, X_block, y_block, classes, params, pure=False) for X_block, y_block in blocks]
        total = tree_reduce(client, parts, _sum_counts)
        del blocks
        if total is None:
            raise ValueError("X is empty: at least one row is required")
        n_features, class_count, category_count, representation = total
        model = LocalNB(**params)
        model._check_params()
        model._device = resolve_device(model.device)
        model.classes_ = classes
        model.n_features_in_ = int(n_features)
        model.class_count_ = class_count
        model.category_count_ = category_count
        model.n_categories_ = np.array([c.shape[1] for c in category_count], dtype=np.int64)
        model.representation_ = representation
        model._update_model()
        self.model_ = model
        for name in ("classes_", "n_features_in_", "class_count_", "category_count_", "n_categories_",
                     "feature_log_prob_", "class_log_prior_"):
            setattr(self, name, getattr(model, name))
        return self

    def predict(self, X):
        return self.model_.predict(X)

    def predict_proba(self, X):
        return self.model_.predict_proba(X)

    def predict_log_proba(self, X):
        return self.model_.predict_log_proba(X)
