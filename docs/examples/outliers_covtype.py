"""
Outliers in the Covertype sample: LOF and the top-n distance-based outliers
===========================================================================

* :class:`gpumine.outliers.LocalOutlierFactor` scores the 6,000 rows of the
  shipped Covertype sample; its ``negative_outlier_factor_`` is compared with
  scikit-learn's ``LocalOutlierFactor`` (equal to float32 rounding on data
  without duplicate rows, which this sample is).
* :func:`gpumine.outliers.top_n_outliers` finds the 10 points with the largest
  sum of distances to their 5 nearest neighbours, by SolvingSet and by brute
  force: the same indices and weights, SolvingSet computing a fraction of the
  pairwise distances.

Run as a script: ``python docs/examples/outliers_covtype.py [--device
cpu|cuda|auto] [--figures DIR]``. It exits with a non-zero status when a check
fails.
"""

# %%
# Set-up
# ------
# ``--device`` picks where gpumine computes (``auto``: a CUDA GPU when there is
# one); ``--figures DIR`` writes the figures as PNG files when run as a script.
import argparse
import sys
from pathlib import Path

import matplotlib

if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # a script (or the gallery build) draws into files, never a window
import matplotlib.pyplot as plt
import numpy as np

parser = argparse.ArgumentParser(description="LOF and top-n distance-based outliers of the Covertype sample.")
parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default auto)")
parser.add_argument("--figures", metavar="DIR", help="write the figures as PNG files into DIR")
args = parser.parse_args([] if "ipykernel" in sys.modules else None)  # a notebook's argv is the kernel's
checks = {}  # name -> whether it holds; the last cell fails when one does not

# %%
# LOF against scikit-learn
# ------------------------
# Outlier detection on the training set itself (``novelty=False``), as
# scikit-learn's: ``fit_predict`` labels -1 (outlier) or +1 (inlier) with the
# same ``offset_`` rule.
from sklearn.neighbors import LocalOutlierFactor as SklearnLOF

from gpumine.datasets import load_covtype_sample
from gpumine.outliers import LocalOutlierFactor, top_n_outliers

X, _ = load_covtype_sample(n_features=10)
X = (X - X.mean(axis=0)) / X.std(axis=0)

lof = LocalOutlierFactor(n_neighbors=20, device=args.device, verbose=0)
labels = lof.fit_predict(X)  # -1 outlier, +1 inlier
sk = SklearnLOF(n_neighbors=20)
sk_labels = sk.fit_predict(X)
gap = np.max(np.abs(lof.negative_outlier_factor_ - sk.negative_outlier_factor_))
same_labels = checks["LOF labels equal scikit-learn's"] = np.array_equal(labels, sk_labels)
print(f"LOF on {lof.device_}: {np.sum(labels == -1)} outliers (offset {lof.offset_}); "
      f"largest LOF {lof.outlier_scores_.max():.3f}")
print(f"scikit-learn: same labels {same_labels}, largest score difference {gap:.2e}")

# %%
# Every point's LOF from gpumine against scikit-learn's: they lie on the line
# y = x. Most scores are close to 1; the outliers are the points whose LOF
# exceeds ``-offset_`` (1.5).
theirs, ours = -sk.negative_outlier_factor_, lof.outlier_scores_
fig, ax = plt.subplots(figsize=(5.2, 5))
span = [min(theirs.min(), ours.min()) * 0.95, max(theirs.max(), ours.max()) * 1.05]
ax.plot(span, span, color="0.6", lw=1, zorder=0, label="y = x")
ax.scatter(theirs[labels == 1], ours[labels == 1], s=6, alpha=0.5, label="inliers")
ax.scatter(theirs[labels == -1], ours[labels == -1], s=14, color="C3", label=f"outliers (LOF > {-lof.offset_:g})")
ax.set(xlim=span, ylim=span, xlabel="scikit-learn LocalOutlierFactor: LOF",
       ylabel=f"gpumine LocalOutlierFactor ({lof.device_}): LOF",
       title=f"LOF of 6,000 Covertype rows\nlargest difference {gap:.1e}")
ax.legend(loc="upper left")
fig.tight_layout()

# %%
# Top-n distance-based outliers: SolvingSet against brute force
# -------------------------------------------------------------
# The weight of a point is the sum of the distances to its ``k`` nearest
# neighbours; the top ``n`` weights are the outliers. SolvingSet reaches them
# computing only part of the ``n x n`` distances; brute force computes them
# all. Both must find the same points with the same weights.
ss = top_n_outliers(X, n_outliers=10, k=5, method="solving_set", device=args.device)
bf = top_n_outliers(X, n_outliers=10, k=5, method="brute_force", device=args.device)
print(f"top 10 by SolvingSet: {ss.indices.tolist()}")
print(f"  weights {np.round(ss.weights, 3).tolist()}")
print(f"  {ss.iterations} iterations, solving set of {len(ss.solving_set)} points, "
      f"{ss.distance_fraction:.1%} of the pairwise distances computed")
same = np.array_equal(ss.indices, bf.indices) and np.array_equal(ss.weights, bf.weights)
checks["SolvingSet finds brute force's outliers and weights"] = same
print(f"brute force gives the same outliers and weights: {same}")

# %%
# Both kinds of outliers on the data's first two principal components: grey
# the inliers, orange LOF's outliers (few neighbours nearby compared with their
# neighbours' neighbourhoods), red and numbered by rank the 10 distance-based
# outliers (far from everything). The bars give the 10 weights by both methods.
centred = X - X.mean(axis=0)
_, _, axes = np.linalg.svd(centred, full_matrices=False)
P = centred @ axes[:2].T

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.4), gridspec_kw={"width_ratios": [3, 2]})
left.scatter(P[labels == 1, 0], P[labels == 1, 1], s=4, color="0.75", label="inliers")
left.scatter(P[labels == -1, 0], P[labels == -1, 1], s=10, color="C1", label="LOF outliers")
left.scatter(P[ss.indices, 0], P[ss.indices, 1], s=60, facecolors="none", edgecolors="C3", linewidths=1.5,
             label="top 10 by distance (k=5)")
for rank, i in enumerate(ss.indices, start=1):
    left.annotate(str(rank), P[i], xytext=(4, 4), textcoords="offset points", color="C3", fontsize=8)
left.set(xlabel="first principal component", ylabel="second principal component",
         title="Covertype sample (10 standardised features)")
left.legend(loc="best", fontsize=8)

ranks = np.arange(1, 11)
right.bar(ranks - 0.2, bf.weights, width=0.4, color="0.7", label="brute force")
right.bar(ranks + 0.2, ss.weights, width=0.4, color="C3",
          label=f"SolvingSet ({ss.distance_fraction:.0%} of the distances)")
right.set(xticks=ranks, xlabel="rank", ylabel="sum of distances to 5 nearest neighbours",
          title="the top 10 weights")
right.set_ylim(0, 1.3 * bf.weights.max())
right.legend(loc="upper right", fontsize=8)
fig.tight_layout()

# %%
# Checks
# ------
# Run as a script, a failed check ends it with a non-zero status; in the
# documentation build it stops the build.
if args.figures:
    Path(args.figures).mkdir(parents=True, exist_ok=True)
    for number in plt.get_fignums():
        plt.figure(number).savefig(Path(args.figures) / f"outliers_covtype_{number}.png", dpi=100)
for name, holds in checks.items():
    print(f"{'ok    ' if holds else 'FAILED'} {name}")
failed = [name for name, holds in checks.items() if not holds]
if failed:
    raise RuntimeError(f"{len(failed)} check(s) failed: {'; '.join(failed)}")
