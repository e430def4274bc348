"""
Naive Bayes and C4.5 on nominal attributes of the Covertype sample
==================================================================

The shipped Covertype sample codes two nominal attributes one-hot: the
wilderness area (4 columns) and the soil type (40 columns). They are turned
back into two nominal columns here, beside the 10 quantitative ones.

* :class:`gpumine.counting.CategoricalNB` takes category codes: the
  quantitative columns are cut into 8 equal-frequency bins first. Its
  probabilities are compared with scikit-learn's ``CategoricalNB``.
* :class:`gpumine.counting.C45Classifier` takes the DataFrame itself: the text
  columns are nominal (multiway splits), the numeric ones get binary splits,
  as Weka's J48.

Run as a script: ``python docs/examples/nb_c45_covtype.py [--device
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

parser = argparse.ArgumentParser(description="Naive Bayes and C4.5 on nominal attributes of the Covertype sample.")
parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default auto)")
parser.add_argument("--figures", metavar="DIR", help="write the figures as PNG files into DIR")
args = parser.parse_args([] if "ipykernel" in sys.modules else None)  # a notebook's argv is the kernel's
checks = {}  # name -> whether it holds; the last cell fails when one does not

# %%
# A table with nominal columns
# ----------------------------
# 10 numeric columns, and the wilderness area and soil type as text.
import pandas as pd
from sklearn.naive_bayes import CategoricalNB as SklearnNB

from gpumine.counting import C45Classifier, CategoricalNB
from gpumine.datasets import load_covtype_sample

QUANTITATIVE = ["elevation", "aspect", "slope", "horizontal_distance_to_hydrology",
                "vertical_distance_to_hydrology", "horizontal_distance_to_roadways", "hillshade_9am",
                "hillshade_noon", "hillshade_3pm", "horizontal_distance_to_fire_points"]
WILDERNESS = ["Rawah", "Neota", "Comanche Peak", "Cache la Poudre"]

X, y = load_covtype_sample(n_features=54)
table = pd.DataFrame(X[:, :10], columns=QUANTITATIVE)
table["wilderness"] = np.array(WILDERNESS)[X[:, 10:14].argmax(axis=1)]
table["soil"] = [f"soil {i + 1}" for i in X[:, 14:54].argmax(axis=1)]
order = np.random.default_rng(0).permutation(len(table))
train, test = order[:4800], order[4800:]
print(table[["elevation", "slope", "wilderness", "soil"]].head())

# %%
# Naive Bayes on category codes, against scikit-learn
# ---------------------------------------------------
# The numeric columns are binned, the text columns coded. ``min_categories``
# counts every category of the whole sample, so test rows never meet an unseen
# one. The class probabilities must equal scikit-learn's to floating-point
# rounding.
codes = pd.DataFrame({name: pd.qcut(table[name], 8, labels=False, duplicates="drop") for name in QUANTITATIVE})
for name in ("wilderness", "soil"):
    codes[name] = pd.Categorical(table[name]).codes
codes = codes.to_numpy(np.int64)
n_categories = codes.max(axis=0) + 1
nb = CategoricalNB(alpha=1.0, min_categories=n_categories, device=args.device).fit(codes[train], y[train])
sk = SklearnNB(alpha=1.0, min_categories=n_categories).fit(codes[train], y[train])
proba, sk_proba = nb.predict_proba(codes[test]), sk.predict_proba(codes[test])
nb_predicted = nb.predict(codes[test])
checks["CategoricalNB probabilities equal scikit-learn's"] = np.allclose(proba, sk_proba, rtol=1e-6, atol=1e-9)
print(f"CategoricalNB ({nb.representation_} counts): accuracy {np.mean(nb_predicted == y[test]):.4f}; "
      f"largest probability difference from scikit-learn {np.max(np.abs(proba - sk_proba)):.1e}")

# %%
# C4.5 on the DataFrame itself
# ----------------------------
# Text columns are nominal attributes (one branch per value), numeric columns
# get binary threshold splits; the tree prints in J48's layout.
tree = C45Classifier(device=args.device).fit(table.iloc[train], y[train])
tree_predicted = tree.predict(table.iloc[test])
print(f"C45Classifier: accuracy {np.mean(tree_predicted == y[test]):.4f}; "
      f"{tree.n_nodes_} nodes, {tree.n_leaves_} leaves, depth {tree.depth_}")
print("the tree's first lines, in J48's layout:")
print("\n".join(tree.export_text().splitlines()[:8]))

# %%
# Accuracy per cover type
# -----------------------
# The share of each cover type's test rows that each classifier gets right
# (its recall), with the number of test rows of the type under its label. The
# tree is ahead on types 1 and 2, which make up most of the rows; the recalls
# of the rare types, a few dozen test rows or fewer, are noisy.
classes = np.unique(y)
support = np.array([np.sum(y[test] == c) for c in classes])
recall = {name: np.array([np.mean(p[y[test] == c] == c) if n else np.nan for c, n in zip(classes, support)])
          for name, p in (("CategoricalNB", nb_predicted), ("C45Classifier", tree_predicted))}
fig, left = plt.subplots(figsize=(7, 4.2))
for shift, (name, r), p in zip((-0.2, 0.2), recall.items(), (nb_predicted, tree_predicted)):
    left.bar(np.arange(len(classes)) + shift, r, width=0.4,
             label=f"{name} (accuracy {np.mean(p == y[test]):.3f})")
left.set_xticks(np.arange(len(classes)), [f"{c}\n({n})" for c, n in zip(classes, support)])
left.set(xlabel="cover type (test rows)", ylabel="recall", ylim=(0, 1.15), title="accuracy per cover type")
left.legend(loc="upper right", fontsize=8)
fig.tight_layout()

# %%
# Every class probability of every test row, gpumine's against scikit-learn's:
# they lie on the line y = x.
fig, right = plt.subplots(figsize=(5, 5))
right.plot([0, 1], [0, 1], color="0.6", lw=1, zorder=0, label="y = x")
right.scatter(sk_proba.ravel(), proba.ravel(), s=4, alpha=0.4)
right.set(xlabel="scikit-learn CategoricalNB: probability", ylabel="gpumine CategoricalNB: probability",
          title=f"{proba.size:,} class probabilities\nlargest difference {np.max(np.abs(proba - sk_proba)):.1e}",
          aspect="equal")
right.legend(loc="upper left")
fig.tight_layout()

# %%
# Checks
# ------
# Run as a script, a failed check ends it with a non-zero status; in the
# documentation build it stops the build.
if args.figures:
    Path(args.figures).mkdir(parents=True, exist_ok=True)
    for number in plt.get_fignums():
        plt.figure(number).savefig(Path(args.figures) / f"nb_c45_covtype_{number}.png", dpi=100)
for name, holds in checks.items():
    print(f"{'ok    ' if holds else 'FAILED'} {name}")
failed = [name for name, holds in checks.items() if not holds]
if failed:
    raise RuntimeError(f"{len(failed)} check(s) failed: {'; '.join(failed)}")
