"""Seeded synthetic data for benchmarks and tests.

All generators use :func:`numpy.random.default_rng` with the given seed, so a
(seed, shape) pair always gives the same data on every machine.
"""

from __future__ import annotations

import numpy as np

__all__ = ["make_uniform", "make_gaussian_blobs", "make_poker_hands"]

# Hands generated per step in make_poker_hands: bounds the 52-card scratch array.
_POKER_CHUNK = 1 << 17


def _check_count(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int; got {type(value).__name__} {value!r}.")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value}.")
    return int(value)


def _check_float_dtype(dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64; got {dtype}.")
    return dtype


def make_uniform(n: int, d: int, seed=0, *, dtype=np.float32) -> np.ndarray:
    """Points drawn uniformly from the unit cube ``[0, 1)^d``.

    Parameters
    ----------
    n, d : int
        Number of points and dimensions.
    seed : int or numpy.random.Generator, default 0
    dtype : {float32, float64}, default float32

    Returns
    -------
    ndarray of shape (n, d)

    Examples
    --------
    >>> X = make_uniform(4, 3, seed=1)
    >>> X.shape, X.dtype, bool((X >= 0).all() and (X < 1).all())
    ((4, 3), dtype('float32'), True)
    """
    n, d = _check_count(n, "n"), _check_count(d, "d")
    dtype = _check_float_dtype(dtype)
    return np.random.default_rng(seed).random((n, d), dtype=dtype)


def make_gaussian_blobs(
    n: int,
    d: int,
    centers=3,
    seed=0,
    *,
    cluster_std: float = 1.0,
    center_box: tuple[float, float] = (-10.0, 10.0),
    shuffle: bool = True,
    return_labels: bool = False,
    dtype=np.float32,
):
    """Isotropic Gaussian clusters, like scikit-learn's ``make_blobs`` (NumPy Generator seeding).

    Parameters
    ----------
    n, d : int
        Number of points and dimensions.
    centers : int or array-like of shape (n_centers, d), default 3
        Number of clusters (centres drawn uniformly from ``center_box``), or
        the centres themselves.
    seed : int or numpy.random.Generator, default 0
    cluster_std : float, default 1.0
        Standard deviation of every cluster.
    center_box : (float, float), default (-10, 10)
    shuffle : bool, default True
        Shuffle the rows; otherwise they come cluster by cluster.
    return_labels : bool, default False
        Also return each point's cluster index.
    dtype : {float32, float64}, default float32

    Returns
    -------
    X : ndarray of shape (n, d)
    labels : ndarray of shape (n,), int64
        Only with ``return_labels=True``. Clusters get ``n // n_centers``
        points each, the first ``n % n_centers`` one more.

    Examples
    --------
    >>> X, labels = make_gaussian_blobs(10, 2, centers=[[0, 0], [5, 5]], seed=0,
    ...                                 return_labels=True)
    >>> X.shape, X.dtype, sorted(set(labels.tolist()))
    ((10, 2), dtype('float32'), [0, 1])
    """
    n, d = _check_count(n, "n"), _check_count(d, "d")
    dtype = _check_float_dtype(dtype)
    if not cluster_std >= 0:
        raise ValueError(f"cluster_std must be >= 0; got {cluster_std}.")
    rng = np.random.default_rng(seed)
    if isinstance(centers, int | np.integer) and not isinstance(centers, bool):
        k = _check_count(centers, "centers")
        low, high = center_box
        center_points = rng.uniform(low, high, size=(k, d))
    else:
        center_points = np.asarray(centers, dtype=np.float64)
        if center_points.ndim != 2 or center_points.shape[1] != d or len(center_points) == 0:
            raise ValueError(
                f"centers must be an int or an array of shape (n_centers, {d}); got shape "
                f"{center_points.shape}."
            )
        k = len(center_points)
    sizes = np.full(k, n // k)
    sizes[: n % k] += 1
    labels = np.repeat(np.arange(k, dtype=np.int64), sizes)
    X = rng.standard_normal((n, d), dtype=dtype)
    X *= dtype.type(cluster_std)
    X += center_points[labels].astype(dtype)
    if shuffle:
        order = rng.permutation(n)
        X, labels = X[order], labels[order]
    return (X, labels) if return_labels else X


def make_poker_hands(n: int, seed=0, *, dtype=np.int64):
    """Random poker hands labelled by the rules, distributed like UCI Poker Hand's test set.

    The UCI test set is a million hands dealt uniformly at random (five
    distinct cards, in deal order) and labelled by the standard hand ranks,
    so this generator reproduces its distribution at any size.

    Parameters
    ----------
    n : int
        Number of hands.
    seed : int or numpy.random.Generator, default 0
    dtype : NumPy dtype, default int64
        Dtype of ``X``.

    Returns
    -------
    X : ndarray of shape (n, 10)
        S1, C1, ..., S5, C5: suit 1-4 and rank 1-13 (1 = ace) of each card,
        as in UCI's files.
    y : ndarray of shape (n,), int64
        0 nothing, 1 one pair, 2 two pairs, 3 three of a kind, 4 straight,
        5 flush, 6 full house, 7 four of a kind, 8 straight flush, 9 royal
        flush. Straights run ace-low (A-2-3-4-5) or ace-high (10-J-Q-K-A).

    Examples
    --------
    >>> X, y = make_poker_hands(1000, seed=0)
    >>> X.shape, int(X[:, 0::2].max()), int(X[:, 1::2].max())
    ((1000, 10), 4, 13)
    """
    n = _check_count(n, "n")
    rng = np.random.default_rng(seed)
    X = np.empty((n, 10), dtype=dtype)
    deck = np.arange(52, dtype=np.int8)
    for start in range(0, n, _POKER_CHUNK):
        m = min(_POKER_CHUNK, n - start)
        # Shuffle a deck per hand and deal the top five: an ordered, uniform deal.
        cards = rng.permuted(np.broadcast_to(deck, (m, 52)), axis=1)[:, :5].astype(np.int64)
        X[start : start + m, 0::2] = cards // 13 + 1
        X[start : start + m, 1::2] = cards % 13 + 1
    return X, poker_hand_labels(X)


def poker_hand_labels(X) -> np.ndarray:
    """Hand class (0-9) of each row of suits and ranks laid out as in UCI Poker Hand."""
    X = np.asarray(X)
    suits, ranks = X[:, 0::2], X[:, 1::2]
    flush = (suits == suits[:, :1]).all(axis=1)
    counts = np.zeros((len(X), 14), dtype=np.int64)
    np.add.at(counts, (np.arange(len(X))[:, None], ranks.astype(np.int64)), 1)
    by_size = -np.sort(-counts, axis=1)
    largest, second = by_size[:, 0], by_size[:, 1]
    distinct = largest == 1
    span = ranks.max(axis=1) - ranks.min(axis=1)
    ace_high = distinct & (counts[:, [1, 10, 11, 12, 13]] == 1).all(axis=1)
    straight = (distinct & (span == 4)) | ace_high
    y = np.zeros(len(X), dtype=np.int64)
    y[(largest == 2) & (second == 1)] = 1
    y[(largest == 2) & (second == 2)] = 2
    y[(largest == 3) & (second == 1)] = 3
    y[straight & ~flush] = 4
    y[flush & ~straight] = 5
    y[(largest == 3) & (second == 2)] = 6
    y[largest == 4] = 7
    y[straight & flush & ~ace_high] = 8
    y[flush & ace_high] = 9
    return y
