"""Sparse (scipy.sparse) feature input for the neighbour estimators: dense rows, in blocks for queries.

The exact engine works on dense rows, so sparse input is densified: the
training set whole (it is searched for every query; an error says how much
memory it needs when that is more than the host has free), the queries in
blocks of rows that fit the tile budget (``working_memory``). Results equal
those of the same data passed dense: the values are the same numbers.
"""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

__all__ = ["dense_bytes", "densify", "iter_dense_blocks"]


def _itemsize(X) -> int:
    return 4 if X.dtype in (np.float32, np.float16) else 8


def dense_bytes(X) -> int:
    """Bytes of ``X`` as a dense float array (float32 stays float32; everything else float64)."""
    return int(X.shape[0]) * int(X.shape[1]) * _itemsize(X)


def _free_host_bytes() -> int | None:
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return None


def _check_sparse_dtype(X, name: str) -> None:
    if X.dtype.kind not in "biuf":
        raise ValueError(f"{name} has dtype {X.dtype}, which is not numeric; pass numbers")


def densify(X, name: str = "X") -> np.ndarray:
    """The whole sparse matrix as a dense array, or a MemoryError that says what it would take."""
    _check_sparse_dtype(X, name)
    need = dense_bytes(X)
    free = _free_host_bytes()
    if free is not None and need > free:
        raise MemoryError(
            f"{name} is sparse {X.shape[0]} x {X.shape[1]}: gpumine searches dense rows, and densifying it needs "
            f"{need / 2**30:.1f} GiB while {free / 2**30:.1f} GiB of host memory is free; reduce the features "
            "first (e.g. sklearn.decomposition.TruncatedSVD) or use scikit-learn's sparse brute force"
        )
    dense = X.toarray()
    return dense if dense.dtype.kind == "f" else dense.astype(np.float64)


def iter_dense_blocks(X, budget_bytes: int, name: str = "X"):
    """``(start, dense_rows)`` over the rows of a sparse matrix, each block within ``budget_bytes``."""
    _check_sparse_dtype(X, name)
    X = X.tocsr() if X.format != "csr" else X
    n = X.shape[0]
    rows = max(1, int(budget_bytes // max(1, int(X.shape[1]) * _itemsize(X))))
    if n == 0:
        yield 0, np.zeros((0, X.shape[1]), dtype=np.float32 if _itemsize(X) == 4 else np.float64)
        return
    for start in range(0, n, rows):
        block = X[start : start + rows].toarray()
        yield start, block if block.dtype.kind == "f" else block.astype(np.float64)


def is_sparse(X) -> bool:
    return sp.issparse(X)
