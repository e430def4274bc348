"""Inputs of the distributed C4.5 (:mod:`._tree`): X, y and sample_weight as aligned row partitions.

A dask collection's row partitions stay where they live (labels and weights
rechunked or split to them); a local input is split into one block per worker
and scattered.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ._inputs import is_dask, partition_futures, row_partitions


def _as_local(v):
    """A non-dask input as NumPy or pandas (torch tensors to NumPy), for splitting by rows."""
    if isinstance(v, torch.Tensor):
        return v.detach().cpu().numpy()
    if hasattr(v, "iloc") or isinstance(v, np.ndarray):
        return v
    return np.asarray(v)


def _rows(v, a, b):
    return v.iloc[a:b] if hasattr(v, "iloc") else v[a:b]


def _aligned(client, v, lengths, name, n_parts_of_x, frame_x):
    """Futures of ``v`` (labels or weights) split as ``X``'s partitions (``lengths`` rows each, or ``None``:
    unknown, then ``v`` must be a dask series partitioned as ``X``)."""
    if not is_dask(v) and np.ndim(v) == 0:  # a scalar weight: every row's
        return [v] * n_parts_of_x
    if is_dask(v):
        import dask.array as da

        if frame_x and hasattr(v, "npartitions") and v.npartitions == n_parts_of_x:
            # a dask series partitioned as X: partition by partition (each partition checks its lengths)
            return partition_futures(client, v)
        if lengths is None:
            raise ValueError(f"{name} must be partitioned as X (the same number of partitions); got "
                             f"{getattr(v, 'npartitions', len(row_partitions(v)))} partitions for X's {n_parts_of_x}")
        if not isinstance(v, da.Array):
            v = v.to_dask_array(lengths=True)
        if v.ndim == 2 and v.shape[1] == 1:
            v = v.reshape(-1)
        if v.ndim != 1:
            raise ValueError(f"{name} must be 1-D (one entry per row of X); got a {v.ndim}-D dask array")
        if any(math.isnan(c) for c in v.chunks[0]):
            v = v.compute_chunk_sizes()
        if v.shape[0] != sum(lengths):
            raise ValueError(f"{name} has {v.shape[0]} entries but X has {sum(lengths)} samples; pass one per row of X")
        return partition_futures(client, v.rechunk((tuple(lengths),) + v.chunks[1:]))
    v = _as_local(v)
    if lengths is None:
        raise ValueError(f"{name} must be a dask series partitioned as X when X is a dask DataFrame of unknown "
                         "partition lengths")
    if len(v) != sum(lengths):
        raise ValueError(f"{name} has {len(v)} entries but X has {sum(lengths)} samples; pass one per row of X")
    bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return [client.scatter(_rows(v, a, b), hash=False) for a, b in zip(bounds[:-1], bounds[1:])]


def _input_parts(client, X, y, sample_weight):
    """``[(X part, y part, weight part or None)]`` in row order: a dask collection's row partitions (where they
    live), or a local input split into one block per worker and scattered."""
    if is_dask(X):
        import dask.array as da

        frame_x = not isinstance(X, da.Array)
        if not frame_x:
            if X.ndim != 2:
                raise ValueError(f"X must be 2-D (n_samples, n_features); got a {X.ndim}-D dask array")
            if any(math.isnan(c) for c in X.chunks[0]):
                X = X.compute_chunk_sizes()
            lengths = tuple(int(c) for c in X.chunks[0])
        xs = partition_futures(client, X)
        if frame_x:
            lengths = None

            def paired(v):  # a dask series partitioned as X: taken partition by partition
                return v is None or (is_dask(v) and getattr(v, "npartitions", None) == len(xs))

            if not (paired(y) and paired(sample_weight)):
                lengths = tuple(client.gather([client.submit(len, f, pure=False) for f in xs]))
        ys = _aligned(client, y, lengths, "y", len(xs), frame_x)
        ws = ([None] * len(xs) if sample_weight is None
              else _aligned(client, sample_weight, lengths, "sample_weight", len(xs), frame_x))
        return list(zip(xs, ys, ws))
    X = _as_local(X)
    if getattr(X, "ndim", 2) != 2:
        raise ValueError(f"Expected 2D array, got {X.ndim}D array instead. Reshape your data either using "
                         "array.reshape(-1, 1) if your data has a single feature or array.reshape(1, -1) "
                         "if it contains a single sample.")
    n = len(X)
    y = _as_local(y)
    if np.ndim(y) == 0 or len(y) != n:
        raise ValueError(f"y has {np.size(y)} labels but X has {n} samples; pass one label per row of X")
    w = None if sample_weight is None else _as_local(sample_weight)
    if w is not None and np.ndim(w) and len(w) != n:
        raise ValueError(f"sample_weight has shape {np.shape(w)}; expected ({n},)")
    n_workers = max(1, len(client.scheduler_info()["workers"]))
    bounds = np.linspace(0, n, max(1, min(n_workers, n)) + 1).astype(np.int64)

    def part(v, a, b):
        if v is None or np.ndim(v) == 0:
            return v
        return client.scatter(_rows(v, a, b), hash=False)

    return [(part(X, a, b), part(y, a, b), part(w, a, b)) for a, b in zip(bounds[:-1], bounds[1:])]
