"""Float64 NumPy/SciPy brute-force kNN under the tie rule, and a tie-aware comparison."""

import numpy as np
from scipy.spatial.distance import cdist

SCIPY_METRIC = {
    "euclidean": "euclidean",
    "sqeuclidean": "sqeuclidean",
    "manhattan": "cityblock",
    "chebyshev": "chebyshev",
    "cosine": "cosine",
}


def full_distances(X_ref, X_query, metric, p=None):
    """Float64 distance matrix; for inner_product the negated products (smaller = closer)."""
    R = np.asarray(X_ref, dtype=np.float64)
    Q = np.asarray(X_query, dtype=np.float64)
    if metric == "inner_product":
        return -(Q @ R.T)
    if metric == "minkowski":
        return cdist(Q, R, "minkowski", p=p)
    if metric == "cosine":
        # scipy gives nan for zero vectors; scikit-learn (and gpumine) use similarity 0
        nq = np.linalg.norm(Q, axis=1)[:, None]
        nr = np.linalg.norm(R, axis=1)[None, :]
        denom = nq * nr
        sim = np.divide(Q @ R.T, denom, out=np.zeros((len(Q), len(R))), where=denom > 0)
        return 1.0 - sim
    return cdist(Q, R, SCIPY_METRIC[metric])


def brute_force_knn(X_ref, X_query, k, metric="euclidean", p=None, exclude_self=False):
    D = full_distances(X_ref, X_query, metric, p)
    if exclude_self:
        np.fill_diagonal(D, np.inf)
    order = np.argsort(D, axis=1, kind="stable")[:, :k]  # stable: ties to the lower index
    return np.take_along_axis(D, order, 1), order, D


def assert_knn_matches(dist, index, X_ref, X_query, k, metric="euclidean", p=None, exclude_self=False, rtol=1e-5, atol=1e-6):
    """Indices must equal the float64 reference except where two reference distances are
    within float32 rounding of each other; distances must equal the float64 ones."""
    dist = np.asarray(dist, dtype=np.float64)
    index = np.asarray(index)
    ref_d, ref_i, D = brute_force_knn(X_ref, X_query, k, metric, p, exclude_self)
    if metric == "inner_product":
        dist = -dist
    assert index.shape == ref_i.shape and index.dtype == np.int64
    # every returned index is a real, distinct reference
    assert (index >= 0).all() and (index < D.shape[1]).all()
    assert all(len(set(row)) == len(row) for row in index.tolist())
    if exclude_self:
        assert not (index == np.arange(len(index))[:, None]).any()
    got = np.take_along_axis(D, index, 1)
    scale = np.maximum(np.abs(ref_d), 1.0)
    np.testing.assert_allclose(got, ref_d, rtol=rtol, atol=atol * scale.max())
    reported = dist if metric != "sqeuclidean" else dist
    np.testing.assert_allclose(reported, ref_d, rtol=rtol, atol=atol * scale.max())
    mismatch = index != ref_i
    if mismatch.any():
        # allowed only between near-equal distances
        near = np.abs(got - ref_d) <= rtol * scale + atol
        assert near[mismatch].all(), f"{mismatch.sum()} index mismatches beyond float32 rounding"
    return ref_d, ref_i
