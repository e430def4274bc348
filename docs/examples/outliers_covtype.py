"""Outliers in the Covertype sample: LOF against scikit-learn, and the top-n distance-based outliers.

* :class:`gpumine.outliers.LocalOutlierFactor` scores the 6,000 rows of the
  shipped Covertype sample; its ``negative_outlier_factor_`` is compared with
  scikit-learn's ``LocalOutlierFactor`` (equal to float32 rounding on data
  without duplicate rows, which this sample is).
* :func:`gpumine.outliers.top_n_outliers` finds the 10 points with the largest
  sum of distances to their 5 nearest neighbours, by SolvingSet and by brute
  force: the same indices and weights, SolvingSet computing a fraction of the
  pairwise distances.

Run: ``python docs/examples/outliers_covtype.py [--device cpu|cuda|auto]``
"""

import argparse
import sys

import numpy as np


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default auto)")
    args = parser.parse_args(argv)

    from sklearn.neighbors import LocalOutlierFactor as SklearnLOF

    from gpumine.datasets import load_covtype_sample
    from gpumine.outliers import LocalOutlierFactor, top_n_outliers

    X, _ = load_covtype_sample(n_features=10)
    X = (X - X.mean(axis=0)) / X.std(axis=0)

    # -- LOF, as scikit-learn's outlier detection on the training set (novelty=False)
    lof = LocalOutlierFactor(n_neighbors=20, device=args.device, verbose=0)
    labels = lof.fit_predict(X)  # -1 outlier, +1 inlier
    sk = SklearnLOF(n_neighbors=20)
    sk_labels = sk.fit_predict(X)
    gap = np.max(np.abs(lof.negative_outlier_factor_ - sk.negative_outlier_factor_))
    print(f"LOF on {lof.device_}: {np.sum(labels == -1)} outliers (offset {lof.offset_}); "
          f"largest LOF {lof.outlier_scores_.max():.3f}")
    print(f"scikit-learn: same labels {np.array_equal(labels, sk_labels)}, "
          f"largest score difference {gap:.2e}")

    # -- top-n distance-based outliers: weight = sum of distances to the k nearest neighbours
    ss = top_n_outliers(X, n_outliers=10, k=5, method="solving_set", device=args.device)
    bf = top_n_outliers(X, n_outliers=10, k=5, method="brute_force", device=args.device)
    print(f"top 10 by SolvingSet: {ss.indices.tolist()}")
    print(f"  weights {np.round(ss.weights, 3).tolist()}")
    print(f"  {ss.iterations} iterations, solving set of {len(ss.solving_set)} points, "
          f"{ss.distance_fraction:.1%} of the pairwise distances computed")
    same = np.array_equal(ss.indices, bf.indices) and np.array_equal(ss.weights, bf.weights)
    print(f"brute force gives the same outliers and weights: {same}")
    return 0 if same and np.array_equal(labels, sk_labels) else 1


if __name__ == "__main__":
    sys.exit(main())
