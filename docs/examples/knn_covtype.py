"""
Exact kNN classification of the Covertype sample
================================================

Loads the 6,000-row sample of the real UCI Covertype data shipped with gpumine
(10 quantitative features, cover types 1-7), classifies a held-out fifth with
:class:`gpumine.neighbors.KNeighborsClassifier` and checks the exactness
contract: the neighbours equal those of a float64 brute force, ties ordered by
the lower index. scikit-learn's classifier runs beside it, for every ``k`` of
an accuracy curve, and the decision regions of a two-feature model are drawn.

Run as a script: ``python docs/examples/knn_covtype.py [--device cpu|cuda|auto]
[-k K] [--figures DIR]``. It exits with a non-zero status when a check fails.
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

parser = argparse.ArgumentParser(description="Exact kNN classification of the Covertype sample.")
parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default auto)")
parser.add_argument("-k", type=int, default=5, help="neighbours per query (default 5)")
parser.add_argument("--figures", metavar="DIR", help="write the figures as PNG files into DIR")
args = parser.parse_args([] if "ipykernel" in sys.modules else None)  # a notebook's argv is the kernel's
checks = {}  # name -> whether it holds; the last cell fails when one does not

# %%
# The data
# --------
# The features' scales differ by a factor of 1000 (elevation in metres,
# hillshade 0-255), so they are standardised; a fixed permutation holds out a
# fifth for testing.
from sklearn.neighbors import KNeighborsClassifier as SklearnKNN

from gpumine.datasets import load_covtype_sample
from gpumine.neighbors import KNeighborsClassifier, kneighbors

X, y = load_covtype_sample(n_features=10)  # float32 (6000, 10), classes 1-7
X = (X - X.mean(axis=0)) / X.std(axis=0)
order = np.random.default_rng(0).permutation(len(X))
train, test = order[:4800], order[4800:]
print(f"{len(train)} training rows, {len(test)} test rows; cover types {np.unique(y).tolist()}")

# %%
# Classification, and the neighbours against a float64 brute force
# ------------------------------------------------------------------
# The classifier takes scikit-learn's parameters plus ``device``. The
# functional :func:`~gpumine.neighbors.kneighbors` gives the same search; its
# neighbours must equal a NumPy float64 brute force whose sort is stable (equal
# distances keep the lower index first).
clf = KNeighborsClassifier(n_neighbors=args.k, weights="distance", device=args.device, verbose=0)
clf.fit(X[train], y[train])
predicted = clf.predict(X[test])
print(f"gpumine on {clf.device_}: accuracy {np.mean(predicted == y[test]):.4f} "
      f"({len(test)} test rows, k={args.k}, distance-weighted vote)")


def float64_reference(X_ref, X_query, k, block=256):
    """The k nearest references of each query by a float64 brute force (ties: lower index)."""
    R = X_ref.astype(np.float64)
    found = []
    for start in range(0, len(X_query), block):
        Q = X_query[start : start + block].astype(np.float64)
        D = np.sqrt(((Q[:, None, :] - R[None, :, :]) ** 2).sum(axis=2))
        found.append(np.argsort(D, axis=1, kind="stable")[:, :k])  # stable: equal distances keep index order
    return np.concatenate(found)


dist, idx = kneighbors(X[train], X[test], k=args.k, device=args.device)
checks["float32 in, float32 distances and int64 indices out"] = dist.dtype == np.float32 and idx.dtype == np.int64
checks["the functional API finds the classifier's neighbours"] = np.array_equal(
    idx, clf.kneighbors(X[test], return_distance=False))
checks["neighbours equal the float64 brute force"] = np.array_equal(idx, float64_reference(X[train], X[test], args.k))
print(f"neighbours equal to the float64 brute force: {checks['neighbours equal the float64 brute force']}")

sk = SklearnKNN(n_neighbors=args.k, weights="distance").fit(X[train], y[train])
sk_predicted = sk.predict(X[test])
print(f"scikit-learn: accuracy {np.mean(sk_predicted == y[test]):.4f}; "
      f"same predictions as gpumine for {np.mean(sk_predicted == predicted):.2%} of the rows")

# %%
# Accuracy against k
# ------------------
# The same estimator for every ``k`` (``set_params``, as in a scikit-learn grid
# search), gpumine's curve drawn over scikit-learn's: with exact neighbours the
# two lie on each other.
ks = [1, 2, 3, 5, 7, 10, 15, 20, 30, 50]
accuracy = {"gpumine": [], "scikit-learn": []}
for k in ks:
    for name, model in (("gpumine", clf), ("scikit-learn", sk)):
        model.set_params(n_neighbors=k).fit(X[train], y[train])
        accuracy[name].append(np.mean(model.predict(X[test]) == y[test]))
print("k:            " + " ".join(f"{k:6d}" for k in ks))
for name, values in accuracy.items():
    print(f"{name:13s} " + " ".join(f"{a:6.3f}" for a in values))

fig, ax = plt.subplots(figsize=(6.4, 4))
ax.plot(ks, accuracy["scikit-learn"], "o-", lw=4, ms=9, color="0.8", label="scikit-learn")
ax.plot(ks, accuracy["gpumine"], "s--", color="C0", label=f"gpumine ({clf.device_})")
ax.set(xscale="log", xlabel="k (neighbours, log scale)", ylabel="test accuracy",
       title="Covertype sample: distance-weighted kNN")
ax.set_xticks(ks, [str(k) for k in ks])
ax.legend()
fig.tight_layout()

# %%
# Decision regions of two features
# --------------------------------
# A model on the two most telling features, elevation and the horizontal
# distance to roadways, predicts every point of a 200 x 200 grid (40,000
# queries): the coloured regions are the cover type it predicts, the dots the
# test rows in the colour of their true cover type.
pair = [0, 5]
names = ["elevation (standardised)", "horizontal distance to roadways (standardised)"]
two = KNeighborsClassifier(n_neighbors=15, weights="distance", device=args.device).fit(X[train][:, pair], y[train])
lo, hi = X[:, pair].min(axis=0), X[:, pair].max(axis=0)
g0, g1 = np.meshgrid(np.linspace(lo[0], hi[0], 200), np.linspace(lo[1], hi[1], 200))
grid = np.column_stack([g0.ravel(), g1.ravel()]).astype(np.float32)
regions = two.predict(grid).reshape(g0.shape)
print(f"two features, k=15: test accuracy {np.mean(two.predict(X[test][:, pair]) == y[test]):.4f}")

cmap = matplotlib.colors.ListedColormap([plt.cm.tab10(i) for i in range(7)])
fig, ax = plt.subplots(figsize=(6.4, 4.8))
ax.pcolormesh(g0, g1, regions, cmap=cmap, vmin=0.5, vmax=7.5, alpha=0.35, shading="auto")
points = ax.scatter(X[test, 0], X[test, 5], c=y[test], cmap=cmap, vmin=0.5, vmax=7.5, s=8, edgecolors="k",
                    linewidths=0.2)
fig.colorbar(points, ax=ax, ticks=range(1, 8), label="cover type")
ax.set(xlabel=names[0], ylabel=names[1], title="kNN decision regions (k=15, distance-weighted)")
fig.tight_layout()

# %%
# Checks
# ------
# Run as a script, a failed check ends it with a non-zero status; in the
# documentation build it stops the build.
if args.figures:
    Path(args.figures).mkdir(parents=True, exist_ok=True)
    for number in plt.get_fignums():
        plt.figure(number).savefig(Path(args.figures) / f"knn_covtype_{number}.png", dpi=100)
for name, holds in checks.items():
    print(f"{'ok    ' if holds else 'FAILED'} {name}")
failed = [name for name, holds in checks.items() if not holds]
if failed:
    raise RuntimeError(f"{len(failed)} check(s) failed: {'; '.join(failed)}")
