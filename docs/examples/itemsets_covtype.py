"""Frequent itemsets and association rules on the Covertype sample.

Each row of the shipped Covertype sample becomes a transaction of items such
as ``wilderness=Rawah``, ``soil=29``, ``elevation=high`` and ``cover=2``.
:func:`gpumine.counting.frequent_itemsets` mines every itemset with support at
least 5 % on bitmaps (AND + popcount); :func:`gpumine.counting.association_rules`
derives the rules. When mlxtend is installed, its ``apriori`` runs on the same
one-hot table for comparison (the same itemsets and supports).

Run: ``python docs/examples/itemsets_covtype.py [--device cpu|cuda|auto]``
"""

import argparse
import sys

import numpy as np

WILDERNESS = ["Rawah", "Neota", "Comanche Peak", "Cache la Poudre"]


def transactions(X, y):
    """One-hot DataFrame of items: wilderness area, soil type, elevation and slope terciles, cover type."""
    import pandas as pd

    items = pd.DataFrame({
        "wilderness": np.array(WILDERNESS)[X[:, 10:14].argmax(axis=1)],
        "soil": X[:, 14:54].argmax(axis=1) + 1,
        "elevation": pd.qcut(X[:, 0], 3, labels=["low", "mid", "high"]),
        "slope": pd.qcut(X[:, 2], 3, labels=["gentle", "moderate", "steep"]),
        "cover": y,
    })
    return pd.get_dummies(items.astype(str), prefix_sep="=").astype(bool)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default auto)")
    parser.add_argument("--min-support", type=float, default=0.05, help="smallest support (default 0.05)")
    args = parser.parse_args(argv)

    from gpumine.counting import association_rules, frequent_itemsets
    from gpumine.datasets import load_covtype_sample

    X, y = load_covtype_sample(n_features=54)
    onehot = transactions(X, y)
    print(f"{len(onehot)} transactions over {onehot.shape[1]} items")

    found = frequent_itemsets(onehot, min_support=args.min_support, use_colnames=True, device=args.device)
    sizes = found["itemsets"].map(len).value_counts().sort_index()
    print(f"{len(found)} frequent itemsets (by size: {dict(sizes.items())})")

    rules = association_rules(found, metric="confidence", min_threshold=0.8)
    rules = rules.sort_values(["confidence", "support"], ascending=False)
    print(f"{len(rules)} rules with confidence >= 0.8; the strongest:")
    for row in rules.head(5).itertuples():
        print(f"  {', '.join(sorted(row.antecedents))} -> {', '.join(sorted(row.consequents))}: "
              f"confidence {row.confidence:.3f}, support {row.support:.3f}, lift {row.lift:.2f}")

    try:
        from mlxtend.frequent_patterns import apriori
    except ImportError:
        print("mlxtend is not installed: no comparison")
        return 0
    theirs = apriori(onehot, min_support=args.min_support, use_colnames=True)
    same = dict(zip(found["itemsets"], found["support"])) == dict(zip(theirs["itemsets"], theirs["support"]))
    print(f"mlxtend's apriori finds the same itemsets with the same supports: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
