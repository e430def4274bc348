"""Exact kNN classification of the Covertype sample shipped with gpumine.

Loads the 6,000-row sample of the real UCI Covertype data (10 quantitative
features, cover types 1-7), classifies a held-out fifth with
:class:`gpumine.neighbors.KNeighborsClassifier` and checks the exactness
contract: the neighbours equal those of a float64 brute force, ties ordered by
the lower index. scikit-learn's classifier runs beside it for comparison.

Run: ``python docs/examples/knn_covtype.py [--device cpu|cuda|auto]``
"""

import argparse
import sys

import numpy as np


def float64_reference(X_ref, X_query, k, block=256):
    """The k nearest references of each query by a float64 brute force (ties: lower index)."""
    R = X_ref.astype(np.float64)
    found = []
    for start in range(0, len(X_query), block):
        Q = X_query[start : start + block].astype(np.float64)
        D = np.sqrt(((Q[:, None, :] - R[None, :, :]) ** 2).sum(axis=2))
        found.append(np.argsort(D, axis=1, kind="stable")[:, :k])  # stable: equal distances keep index order
    return np.concatenate(found)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default auto)")
    parser.add_argument("-k", type=int, default=5, help="neighbours per query (default 5)")
    args = parser.parse_args(argv)

    from sklearn.neighbors import KNeighborsClassifier as SklearnKNN

    from gpumine.datasets import load_covtype_sample
    from gpumine.neighbors import KNeighborsClassifier, kneighbors

    X, y = load_covtype_sample(n_features=10)  # float32 (6000, 10), classes 1-7
    X = (X - X.mean(axis=0)) / X.std(axis=0)  # the features' scales differ by 1000x
    order = np.random.default_rng(0).permutation(len(X))
    train, test = order[:4800], order[4800:]

    clf = KNeighborsClassifier(n_neighbors=args.k, weights="distance", device=args.device, verbose=0)
    clf.fit(X[train], y[train])
    predicted = clf.predict(X[test])
    print(f"gpumine on {clf.device_}: accuracy {np.mean(predicted == y[test]):.4f} "
          f"({len(test)} test rows, k={args.k}, distance-weighted vote)")

    # the neighbours themselves: the functional API gives the same search
    dist, idx = kneighbors(X[train], X[test], k=args.k, device=args.device)
    assert dist.dtype == np.float32 and idx.dtype == np.int64  # float32 in, float32 out
    assert np.array_equal(idx, clf.kneighbors(X[test], return_distance=False))
    reference = float64_reference(X[train], X[test], args.k)
    print(f"neighbours equal to the float64 brute force: {np.array_equal(idx, reference)}")

    sk = SklearnKNN(n_neighbors=args.k, weights="distance").fit(X[train], y[train])
    sk_predicted = sk.predict(X[test])
    print(f"scikit-learn: accuracy {np.mean(sk_predicted == y[test]):.4f}; "
          f"same predictions as gpumine for {np.mean(sk_predicted == predicted):.2%} of the rows")
    return 0 if np.array_equal(idx, reference) else 1


if __name__ == "__main__":
    sys.exit(main())
