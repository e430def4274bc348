"""kNN classification and regression on a Dask cluster: the single-process estimators' answers.

:class:`KNeighborsClassifier` and :class:`KNeighborsRegressor` are the
single-process estimators (:mod:`gpumine.neighbors`) with one method replaced:
the neighbour query, which runs :func:`gpumine.distributed.kneighbors` (the
references sharded or replicated over the workers) and returns the same
(distances, indices) one process finds. Everything after the query (vote
weights, the vote or the weighted mean, probabilities, ``score``) is the
single-process code, run on the client on the estimator's ``device_`` as there,
so predictions are bit-identical to one process.

Inputs: NumPy, pandas or torch (kept on the client, split over the workers per
query), or dask: a dask array chunked by rows, a dask DataFrame (each partition
converted where it lives, rows in partition order). A dask ``X`` in ``fit`` is
converted to the fitted dtype and kept on the workers (futures held by the
estimator). A dask ``X`` at query time is gathered on the client (queries are
broadcast to every worker) and the results come back as dask arrays chunked
like its rows; ``y`` is gathered on the client (the vote needs it there).

``radius_neighbors`` and ``radius_neighbors_graph`` run
:func:`gpumine.distributed.radius_neighbors` over the same shards and return
one process's lists (object arrays or a sparse matrix, on the client).
"""

from __future__ import annotations

import numpy as np
import torch

from ..neighbors._estimators import KNeighborsClassifier as _LocalClassifier
from ..neighbors._estimators import KNeighborsRegressor as _LocalRegressor
from ._inputs import as_input_kind, gather_rows, is_dask, partition_futures
from ._knn import _client, _kneighbors_arrays

__all__ = ["KNeighborsClassifier", "KNeighborsRegressor"]


def _rows_as(part, dtype):
    """A row partition (NumPy block or pandas frame) as a 2-D array of the fitted dtype, read as
    :func:`gpumine.utils._validation.check_array` reads it (pandas: through float64, NaN for missing)."""
    if hasattr(part, "to_numpy") and hasattr(part, "dtypes"):
        part = part.to_numpy(dtype=np.float64, na_value=np.nan)
    part = np.asarray(part)
    return np.ascontiguousarray(part.reshape(len(part), -1) if part.ndim != 2 else part, dtype=dtype)


def _finite_summary(block):
    """(rows, non-finite values, first row holding one or -1) of a block."""
    bad = ~np.isfinite(block)
    rows = np.flatnonzero(bad.any(1))
    return block.shape[0], int(bad.sum()), int(rows[0]) if rows.size else -1


def _head(X):
    """A one-row stand-in of a dask ``X`` with its columns and dtypes (nothing computed), for validation."""
    if hasattr(X, "_meta_nonempty") and hasattr(X, "columns"):  # a dask DataFrame: a non-empty pandas stand-in
        return X._meta_nonempty.iloc[:1]
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n_samples, n_features); got a {X.ndim}-D dask array")
    return np.zeros((1, X.shape[1]), dtype=X.dtype)


class _DaskKNeighbors:
    """The distributed query in place of the single-process one (see the module docstring)."""

    # the engine's metrics on feature rows only: precomputed distances, sparse rows and weighted or p < 1
    # minkowski are refused with the single-process estimator's messages
    _extended_input = False

    def _fit(self, X):
        self._ref_rows = None
        if not is_dask(X):
            X_t = super()._fit(X)
            self._fit_dtype = X_t.dtype
            self._ref = X_t.detach().cpu().numpy()
            del self._fit_X  # the search runs on the workers
            return X_t
        import dask
        import dask.array as da

        from ..utils._validation import check_array

        super()._fit(_head(X))  # parameters, feature names, n_features_in_, dtype: as one process
        del self._fit_X
        self._fit_dtype = check_array(_head(X), name="X").dtype
        np_dtype = np.float32 if self._fit_dtype == torch.float32 else np.float64
        client = _client(self.client)
        blocks = partition_futures(client, X, _rows_as, np_dtype)
        summary = client.gather([client.submit(_finite_summary, block, pure=False) for block in blocks])
        lengths = [s[0] for s in summary]
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        n_bad = sum(s[1] for s in summary)
        if n_bad:
            first = next(int(start) + s[2] for start, s in zip(starts, summary) if s[2] >= 0)
            raise ValueError(f"X contains NaN or infinity ({n_bad} non-finite value(s), first at row {first}); "
                             "remove or impute them (e.g. sklearn.impute.SimpleImputer)")
        n = int(sum(lengths))
        if n == 0:
            raise ValueError(f"X is empty: found array with 0 sample(s) (shape (0, {self.n_features_in_})); a minimum "
                             "of 1 is required")
        d = self.n_features_in_
        self._ref_futures = blocks  # the blocks stay on the workers while the estimator holds them
        self._ref = da.concatenate([da.from_delayed(dask.delayed(f), shape=(m, d), dtype=np_dtype)
                                    for f, m in zip(blocks, lengths) if m])
        self._ref_rows = tuple(lengths)
        self.n_samples_fit_ = n
        return torch.empty((n, d), device="meta")  # fit() only reads the row count

    def _query(self, X, n_neighbors):
        """(distances, indices, output kind) from the distributed search, on ``device_`` as one process has them."""
        from sklearn.utils.validation import check_is_fitted

        from ..utils._validation import check_array, check_n_features, check_n_neighbors, output_kind
        from ..neighbors._estimators import _check_feature_names

        check_is_fitted(self, "n_samples_fit_")
        if n_neighbors is None:
            n_neighbors = self.n_neighbors
        if X is None:
            queries, kind, exclude_self = None, self._fit_kind, True
        else:
            if hasattr(X, "toarray") and hasattr(X, "nnz"):
                raise TypeError("sparse input is not supported by gpumine estimators; convert X with X.toarray()")
            _check_feature_names(self, X, reset=False)
            query = check_array(X, name="X", dtype=self._fit_dtype)
            check_n_features(query, self.n_features_in_, type(self).__name__)
            queries, kind, exclude_self = query.detach().cpu().numpy(), output_kind(X), False
        n_neighbors = check_n_neighbors(n_neighbors, self.n_samples_fit_, excluding_self=exclude_self)
        metric = self._metric
        dist, index = _kneighbors_arrays(self._ref, queries, n_neighbors, metric=metric.name,
                                         p=metric.p if metric.name == "minkowski" else None, mode=self.mode,
                                         client=self.client, device=self.device, working_memory=self.working_memory,
                                         batch_rows=None, backend=self.backend, precision=self.precision)
        dist = torch.from_numpy(np.ascontiguousarray(dist)).to(self.device_)
        index = torch.from_numpy(np.ascontiguousarray(index)).to(self.device_)
        return dist, index, kind

    def _local(self, X):
        """A dask ``X`` gathered on the client (with its row counts), else ``(X, None)``."""
        return gather_rows(_client(self.client), X) if is_dask(X) else (X, None)

    def _rows(self, X, rows):
        """The row counts to chunk results by: the query's, or the training set's for ``X=None``."""
        return self._ref_rows if X is None else rows

    def fit(self, X, y):
        """Keep ``X`` (a dask one on the workers) and the labels (gathered on the client)."""
        y, _ = self._local(y)
        return super().fit(X, y)

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """As the single-process estimator's (``None``: the training set, self excluded); dask in, dask out."""
        X, rows = self._local(X)
        found = super().kneighbors(X, n_neighbors, return_distance)
        return as_input_kind(found, self._rows(X, rows))

    def kneighbors_graph(self, X=None, n_neighbors=None, mode="connectivity"):
        """As the single-process estimator's (a SciPy sparse matrix on the client)."""
        return super().kneighbors_graph(self._local(X)[0], n_neighbors, mode)

    def predict(self, X):
        """As the single-process estimator's; dask in, dask out."""
        X, rows = self._local(X)
        return as_input_kind(super().predict(X), self._rows(X, rows))

    def score(self, X, y, sample_weight=None):
        """As the single-process estimator's (``X``, ``y`` and ``sample_weight`` gathered on the client)."""
        X, _ = self._local(X)
        y, _ = self._local(y)
        sample_weight, _ = self._local(sample_weight)
        return super().score(X, y, sample_weight)

    def _radius_query(self, X, radius):
        """CSR rows ``(indptr, indices, float64 distances)`` of the training points within ``radius`` and the output
        kind, from :func:`gpumine.distributed.radius_neighbors` (each shard's lists, merged and ordered by
        (distance, index) on the client: one process's rows)."""
        from sklearn.utils.validation import check_is_fitted

        from ..utils._validation import check_array, check_n_features, output_kind
        from ..neighbors._estimators import _check_feature_names
        from ._knn import _radius_arrays

        check_is_fitted(self, "n_samples_fit_")
        radius = getattr(self, "radius", None) if radius is None else radius
        if radius is None:
            raise ValueError(f"{type(self).__name__} has no radius of its own; pass radius=")
        if isinstance(radius, bool) or not isinstance(radius, (int, float, np.number)) or not 0 <= float(radius):
            raise ValueError(f"radius must be a number >= 0; got {radius!r}")
        if X is None:
            queries, kind = None, self._fit_kind
        else:
            if hasattr(X, "toarray") and hasattr(X, "nnz"):
                raise TypeError("sparse input is not supported by gpumine estimators; convert X with X.toarray()")
            _check_feature_names(self, X, reset=False)
            query = check_array(X, name="X", dtype=self._fit_dtype, allow_empty=True)
            check_n_features(query, self.n_features_in_, type(self).__name__)
            queries, kind = query.detach().cpu().numpy(), output_kind(X)
        metric = self._metric
        indptr, indices, dist, _ = _radius_arrays(self._ref, queries, radius, metric=metric.name,
                                                  p=metric.p if metric.name == "minkowski" else None, mode=self.mode,
                                                  client=self.client, device=self.device,
                                                  working_memory=self.working_memory, batch_rows=None)
        return indptr, indices, dist, kind

    def radius_neighbors(self, X=None, radius=None, return_distance=True, sort_results=False):
        """As the single-process estimator's: object arrays of per-row distances and indices (a dask ``X`` is
        gathered on the client; the lists stay there)."""
        return super().radius_neighbors(self._local(X)[0], radius, return_distance, sort_results)

    def radius_neighbors_graph(self, X=None, radius=None, mode="connectivity", sort_results=False):
        """As the single-process estimator's (a SciPy sparse matrix on the client)."""
        return super().radius_neighbors_graph(self._local(X)[0], radius, mode, sort_results)


class KNeighborsClassifier(_DaskKNeighbors, _LocalClassifier):
    """:class:`gpumine.neighbors.KNeighborsClassifier` with its neighbour search on a Dask cluster.

    Parameters are the single-process estimator's plus ``mode`` (``"auto"``,
    ``"shard"`` or ``"replicate"``, see :func:`gpumine.distributed.kneighbors`)
    and ``client`` (default: the current one). ``fit``, ``predict``,
    ``predict_proba``, ``score``, ``kneighbors`` and the fitted attributes are
    the single-process estimator's, with the same values (see the module
    docstring for dask inputs and outputs).

    Examples
    --------
    >>> import numpy as np, distributed  # doctest: +SKIP
    >>> with distributed.Client(processes=False) as client:  # doctest: +SKIP
    ...     X = np.array([[0.0], [1.0], [2.0], [10.0], [11.0]])
    ...     clf = KNeighborsClassifier(n_neighbors=3, device="cpu").fit(X, ["a", "a", "a", "b", "b"])
    ...     clf.predict(np.array([[0.5], [10.5]]))
    array(['a', 'b'], dtype='<U1')
    """

    def __init__(self, n_neighbors=5, *, weights="uniform", algorithm="auto", leaf_size=30, p=2, metric="minkowski",
                 metric_params=None, n_jobs=None, device="auto", backend="auto", working_memory=None, verbose=None,
                 precision="exact", mode="auto", client=None):
        super().__init__(n_neighbors, weights=weights, algorithm=algorithm, leaf_size=leaf_size, p=p, metric=metric,
                         metric_params=metric_params, n_jobs=n_jobs, device=device, backend=backend,
                         working_memory=working_memory, verbose=verbose, precision=precision)
        self.mode = mode
        self.client = client

    def predict_proba(self, X):
        """As the single-process estimator's; dask in, dask out."""
        X, rows = self._local(X)
        return as_input_kind(super().predict_proba(X), self._rows(X, rows))


class KNeighborsRegressor(_DaskKNeighbors, _LocalRegressor):
    """:class:`gpumine.neighbors.KNeighborsRegressor` with its neighbour search on a Dask cluster.

    Parameters and methods as :class:`KNeighborsClassifier` (``predict``,
    ``score``, ``kneighbors``); predictions equal one process's bit for bit.
    """

    def __init__(self, n_neighbors=5, *, weights="uniform", algorithm="auto", leaf_size=30, p=2, metric="minkowski",
                 metric_params=None, n_jobs=None, device="auto", backend="auto", working_memory=None, verbose=None,
                 precision="exact", mode="auto", client=None):
        super().__init__(n_neighbors, weights=weights, algorithm=algorithm, leaf_size=leaf_size, p=p, metric=metric,
                         metric_params=metric_params, n_jobs=n_jobs, device=device, backend=backend,
                         working_memory=working_memory, verbose=verbose, precision=precision)
        self.mode = mode
        self.client = client
