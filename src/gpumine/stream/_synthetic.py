"""A labelled, drifting 2-D stream in the spirit of the LOF_GPU seed's Figure 1.

Normal points come from Gaussian clusters that move, appear, disappear or
recur rarely; outliers are isolated points drawn uniformly over the box and
kept only where no active cluster is near (so the labels are unambiguous).
Seeded: the same arguments give the same stream on every machine.
"""

from __future__ import annotations

import numpy as np

__all__ = ["make_drifting_stream", "DRIFT_CLUSTERS"]

# (name, weight, start, end, centre at t=start, centre at t=end, std, motion)
# times are fractions of the stream; "circle" moves on a circle of radius 4 around the origin
DRIFT_CLUSTERS = (
    ("moving", 0.35, 0.0, 1.0, (-6.0, -1.0), (6.0, 1.0), 0.45, "line"),
    ("circling", 0.30, 0.0, 1.0, (4.0, 0.0), None, 0.35, "circle"),
    ("appearing", 0.25, 0.5, 1.0, (0.0, 6.0), (0.0, 6.0), 0.40, "line"),
    ("vanishing", 0.25, 0.0, 0.3, (-6.0, -6.0), (-6.0, -6.0), 0.50, "line"),
    # rare but normal: a few points per window, every window (seed Fig. 1: an outlier in the
    # current window may be an inlier given the history)
    ("rare", 0.004, 0.0, 1.0, (6.5, -6.5), (6.5, -6.5), 0.25, "line"),
)


def _centre(spec, t):
    _, _, start, end, c0, c1, _, motion = spec
    u = np.clip((t - start) / max(end - start, 1e-12), 0.0, 1.0)
    if motion == "circle":
        angle = 2 * np.pi * 1.5 * t  # one and a half turns over the stream
        return np.stack([4.0 * np.cos(angle), 4.0 * np.sin(angle)], axis=-1)
    c0, c1 = np.asarray(c0), np.asarray(c1)
    return c0 + (c1 - c0) * u[..., None]


def make_drifting_stream(n: int = 100_000, *, outlier_fraction: float = 0.01, seed=0, dtype=np.float32):
    """A drifting 2-D stream with labelled outliers, in arrival order.

    Parameters
    ----------
    n : int
        Points in the stream.
    outlier_fraction : float
        Share of isolated outliers (label 1).
    seed : int or numpy.random.Generator

    Returns
    -------
    X : ndarray of shape (n, 2)
    y : ndarray of shape (n,), int64
        1 for an outlier, 0 for a normal point.

    Notes
    -----
    Clusters (see :data:`DRIFT_CLUSTERS`): one moving across the box, one
    circling the origin, one appearing half-way, one vanishing at 30 %, and
    a rare recurring one (0.4 % of the points) that a window sees only a few
    points of at a time. Outliers are uniform in [-10, 10]^2, at least 4
    standard deviations from every active cluster centre.

    Examples
    --------
    >>> X, y = make_drifting_stream(1000, seed=1)
    >>> X.shape, int(y.sum())
    ((1000, 2), 10)
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer; got {n!r}")
    if not 0 <= outlier_fraction < 1:
        raise ValueError(f"outlier_fraction must be in [0, 1); got {outlier_fraction}")
    rng = np.random.default_rng(seed)
    t = np.arange(n) / n
    y = np.zeros(n, dtype=np.int64)
    n_out = int(round(outlier_fraction * n))
    out_pos = np.sort(rng.choice(n, size=n_out, replace=False)) if n_out else np.empty(0, dtype=np.int64)
    y[out_pos] = 1
    X = np.empty((n, 2), dtype=np.float64)
    normal = np.flatnonzero(y == 0)
    # which cluster each normal point comes from, among those active at its time
    active = np.stack([(t[normal] >= s[2]) & (t[normal] < s[3]) for s in DRIFT_CLUSTERS], axis=1)
    weights = np.array([s[1] for s in DRIFT_CLUSTERS]) * active
    weights /= weights.sum(1, keepdims=True)
    choice = (rng.random(len(normal))[:, None] > np.cumsum(weights, 1)).sum(1)
    for c, spec in enumerate(DRIFT_CLUSTERS):
        rows = normal[choice == c]
        X[rows] = _centre(spec, t[rows]) + rng.normal(scale=spec[6], size=(len(rows), 2))
    for i in out_pos:
        while True:
            p = rng.uniform(-10, 10, size=2)
            ok = True
            for spec in DRIFT_CLUSTERS:
                if spec[2] <= t[i] < spec[3] and np.linalg.norm(p - _centre(spec, np.array(t[i]))) < 4 * spec[6] + 0.5:
                    ok = False
                    break
            if ok:
                X[i] = p
                break
    return X.astype(dtype), y
