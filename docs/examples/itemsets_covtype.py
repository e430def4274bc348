"""
Frequent itemsets and association rules on the Covertype sample
===============================================================

Each row of the shipped Covertype sample becomes a transaction of items such
as ``wilderness=Rawah``, ``soil=29``, ``elevation=high`` and ``cover=2``.
:func:`gpumine.counting.frequent_itemsets` mines every itemset with support at
least 5 % on bitmaps (AND + popcount); :func:`gpumine.counting.association_rules`
derives the rules. When mlxtend is installed, its ``apriori`` runs on the same
one-hot table for comparison (the same itemsets and supports).

Run as a script: ``python docs/examples/itemsets_covtype.py [--device
cpu|cuda|auto] [--min-support S] [--figures DIR]``. It exits with a non-zero
status when a check fails.
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

parser = argparse.ArgumentParser(description="Frequent itemsets and association rules on the Covertype sample.")
parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default auto)")
parser.add_argument("--min-support", type=float, default=0.05, help="smallest support (default 0.05)")
parser.add_argument("--figures", metavar="DIR", help="write the figures as PNG files into DIR")
args = parser.parse_args([] if "ipykernel" in sys.modules else None)  # a notebook's argv is the kernel's
checks = {}  # name -> whether it holds; the last cell fails when one does not

# %%
# Transactions
# ------------
# A one-hot DataFrame of items: wilderness area, soil type, elevation and
# slope terciles, cover type.
import pandas as pd

from gpumine.counting import association_rules, frequent_itemsets
from gpumine.datasets import load_covtype_sample

WILDERNESS = ["Rawah", "Neota", "Comanche Peak", "Cache la Poudre"]

X, y = load_covtype_sample(n_features=54)
items = pd.DataFrame({
    "wilderness": np.array(WILDERNESS)[X[:, 10:14].argmax(axis=1)],
    "soil": X[:, 14:54].argmax(axis=1) + 1,
    "elevation": pd.qcut(X[:, 0], 3, labels=["low", "mid", "high"]),
    "slope": pd.qcut(X[:, 2], 3, labels=["gentle", "moderate", "steep"]),
    "cover": y,
})
onehot = pd.get_dummies(items.astype(str), prefix_sep="=").astype(bool)
print(f"{len(onehot)} transactions over {onehot.shape[1]} items")

# %%
# Frequent itemsets and rules
# ---------------------------
# The result is a DataFrame of ``support`` and ``itemsets`` (frozensets), as
# mlxtend's; the rules carry mlxtend's metrics.
found = frequent_itemsets(onehot, min_support=args.min_support, use_colnames=True, device=args.device)
sizes = found["itemsets"].map(len).value_counts().sort_index()
print(f"{len(found)} frequent itemsets (by size: {dict(sizes.items())})")

rules = association_rules(found, metric="confidence", min_threshold=0.8)
rules = rules.sort_values(["confidence", "support"], ascending=False)
print(f"{len(rules)} rules with confidence >= 0.8; the strongest:")
for row in rules.head(5).itertuples():
    print(f"  {', '.join(sorted(row.antecedents))} -> {', '.join(sorted(row.consequents))}: "
          f"confidence {row.confidence:.3f}, support {row.support:.3f}, lift {row.lift:.2f}")

# %%
# Against mlxtend
# ---------------
# mlxtend's ``apriori`` on the same table must find the same itemsets with the
# same supports (skipped when mlxtend is not installed).
try:
    from mlxtend.frequent_patterns import apriori
except ImportError:
    theirs = None
    print("mlxtend is not installed: no comparison")
else:
    theirs = apriori(onehot, min_support=args.min_support, use_colnames=True)
    same = dict(zip(found["itemsets"], found["support"])) == dict(zip(theirs["itemsets"], theirs["support"]))
    checks["mlxtend's apriori finds the same itemsets and supports"] = same
    print(f"mlxtend's apriori finds the same itemsets with the same supports: {same}")

# %%
# The most frequent itemsets of each size
# ---------------------------------------
# The six most frequent itemsets of two, three and four items, their supports
# as bars, with mlxtend's support of the same itemset as a black tick on each
# bar.
size = found["itemsets"].map(len)
top = pd.concat([found[size == n].nlargest(6, "support") for n in sorted(set(size) - {1})])
top = top.iloc[::-1]  # barh draws bottom up: pairs at the top, the largest itemsets at the bottom
labels = [" & ".join(sorted(s)) for s in top["itemsets"]]
fig, ax = plt.subplots(figsize=(8.5, 6))
for n in sorted(set(top["itemsets"].map(len))):
    mine = (top["itemsets"].map(len) == n).to_numpy()
    ax.barh(np.flatnonzero(mine), top["support"][mine], color=f"C{n - 2}", label=f"{n} items")
ax.set_yticks(np.arange(len(top)), labels, fontsize=7)
if theirs is not None:
    mlxtend_support = dict(zip(theirs["itemsets"], theirs["support"]))
    ax.scatter([mlxtend_support.get(s, np.nan) for s in top["itemsets"]], np.arange(len(top)), marker="|", s=120,
               color="k", label="mlxtend's support", zorder=3)
ax.set(xlabel="support (fraction of the 6,000 transactions)", title="the most frequent itemsets of each size")
ax.legend(loc="lower right")
fig.tight_layout()

# %%
# The rules
# ---------
# Every rule with confidence at least 0.8, by support and confidence, coloured
# by lift (how many times more often the consequent holds with the antecedent
# than without knowing it).
fig, ax = plt.subplots(figsize=(6.4, 4.4))
points = ax.scatter(rules["support"], rules["confidence"], c=rules["lift"], s=18, cmap="viridis")
fig.colorbar(points, ax=ax, label="lift")
ax.set(xlabel="support", ylabel="confidence", title=f"{len(rules)} association rules (confidence >= 0.8)")
fig.tight_layout()

# %%
# Checks
# ------
# Run as a script, a failed check ends it with a non-zero status; in the
# documentation build it stops the build.
if args.figures:
    Path(args.figures).mkdir(parents=True, exist_ok=True)
    for number in plt.get_fignums():
        plt.figure(number).savefig(Path(args.figures) / f"itemsets_covtype_{number}.png", dpi=100)
for name, holds in checks.items():
    print(f"{'ok    ' if holds else 'FAILED'} {name}")
failed = [name for name, holds in checks.items() if not holds]
if failed:
    raise RuntimeError(f"{len(failed)} check(s) failed: {'; '.join(failed)}")
