"""Dask inputs as row partitions: dask arrays (by row chunks), dask DataFrames/Series (by partition), bags.

Every partition is computed under a key of its own (``pure=False``): a content key
released by an earlier call just as a new call asks for it again was lost to that
call's tasks (see :func:`gpumine.distributed._knn._computed`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["is_dask", "row_partitions", "gather_rows", "as_input_kind"]


def is_dask(X) -> bool:
    """Whether ``X`` is a dask collection (array, DataFrame, Series, bag)."""
    try:
        from dask import is_dask_collection
    except ImportError:  # pragma: no cover - dask comes with distributed
        return False
    return is_dask_collection(X)


def _is_dask_array(X) -> bool:
    import dask.array as da

    return isinstance(X, da.Array)


def row_partitions(X) -> list:
    """The delayed row partitions of a dask collection, in row order (a dask array's columns in one chunk)."""
    if _is_dask_array(X):
        if X.ndim == 2 and len(X.chunks[1]) > 1:
            X = X.rechunk({1: -1})  # a row partition holds whole rows
        return list(X.to_delayed().ravel())
    return list(X.to_delayed())


def _same(part):
    return part


def partition_futures(client, X, func=_same, *args) -> list:
    """Futures of ``func(partition, *args)`` for every row partition of the dask collection ``X``, in order."""
    from dask import delayed

    return [client.compute(delayed(func, pure=False)(part, *args)) for part in row_partitions(X)]


def _concat(parts):
    import pandas as pd

    if parts and isinstance(parts[0], (pd.DataFrame, pd.Series)):
        return pd.concat(parts)
    if parts and isinstance(parts[0], list):  # a bag's partitions
        return [item for part in parts for item in part]
    return np.concatenate(parts) if parts else np.zeros((0,))


def gather_rows(client, X):
    """``(local X, row lengths)``: a dask collection gathered on the client in row order (pandas stays pandas),
    with each partition's row count; anything else as it is, with ``None``."""
    if not is_dask(X):
        return X, None
    parts = client.gather(partition_futures(client, X))
    return _concat(parts), tuple(len(part) for part in parts)


def as_input_kind(result, rows):
    """``result`` (an array or a tuple of arrays) as dask arrays chunked by ``rows`` when the input was dask
    (``rows``: its partitions' row counts), else as it is."""
    if rows is None:
        return result
    if isinstance(result, (tuple, list)):  # (distances, indices), or one probability array per output
        return type(result)(as_input_kind(r, rows) for r in result)
    if not isinstance(result, np.ndarray):
        return result
    import dask.array as da

    return da.from_array(result, chunks=(rows,) + tuple(-1 for _ in result.shape[1:]))
