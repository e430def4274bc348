"""Naive Bayes and C4.5 on nominal attributes of the Covertype sample.

The shipped Covertype sample codes two nominal attributes one-hot: the
wilderness area (4 columns) and the soil type (40 columns). They are turned
back into two nominal columns here, beside the 10 quantitative ones.

* :class:`gpumine.counting.CategoricalNB` takes category codes: the
  quantitative columns are cut into 8 equal-frequency bins first. Its
  probabilities are compared with scikit-learn's ``CategoricalNB``.
* :class:`gpumine.counting.C45Classifier` takes the DataFrame itself: the text
  columns are nominal (multiway splits), the numeric ones get binary splits,
  as Weka's J48.

Run: ``python docs/examples/nb_c45_covtype.py [--device cpu|cuda|auto]``
"""

import argparse
import sys

import numpy as np

QUANTITATIVE = ["elevation", "aspect", "slope", "horizontal_distance_to_hydrology",
                "vertical_distance_to_hydrology", "horizontal_distance_to_roadways", "hillshade_9am",
                "hillshade_noon", "hillshade_3pm", "horizontal_distance_to_fire_points"]
WILDERNESS = ["Rawah", "Neota", "Comanche Peak", "Cache la Poudre"]


def nominal_table(X):
    """The sample's 54 columns as a DataFrame: 10 numeric columns, wilderness area and soil type as text."""
    import pandas as pd

    table = pd.DataFrame(X[:, :10], columns=QUANTITATIVE)
    table["wilderness"] = np.array(WILDERNESS)[X[:, 10:14].argmax(axis=1)]
    table["soil"] = [f"soil {i + 1}" for i in X[:, 14:54].argmax(axis=1)]
    return table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default auto)")
    args = parser.parse_args(argv)

    import pandas as pd
    from sklearn.naive_bayes import CategoricalNB as SklearnNB

    from gpumine.counting import C45Classifier, CategoricalNB
    from gpumine.datasets import load_covtype_sample

    X, y = load_covtype_sample(n_features=54)
    table = nominal_table(X)
    order = np.random.default_rng(0).permutation(len(table))
    train, test = order[:4800], order[4800:]

    # -- Naive Bayes on category codes: numeric columns binned, text columns coded
    codes = pd.DataFrame({name: pd.qcut(table[name], 8, labels=False, duplicates="drop") for name in QUANTITATIVE})
    for name in ("wilderness", "soil"):
        codes[name] = pd.Categorical(table[name]).codes
    codes = codes.to_numpy(np.int64)
    n_categories = codes.max(axis=0) + 1  # every category of the whole sample, so test rows never meet an unseen one
    nb = CategoricalNB(alpha=1.0, min_categories=n_categories, device=args.device).fit(codes[train], y[train])
    sk = SklearnNB(alpha=1.0, min_categories=n_categories).fit(codes[train], y[train])
    proba, sk_proba = nb.predict_proba(codes[test]), sk.predict_proba(codes[test])
    print(f"CategoricalNB ({nb.representation_} counts): accuracy {np.mean(nb.predict(codes[test]) == y[test]):.4f}; "
          f"largest probability difference from scikit-learn {np.max(np.abs(proba - sk_proba)):.1e}")

    # -- C4.5 (J48 rules) on the DataFrame: nominal text columns, numeric columns as they are
    tree = C45Classifier(device=args.device).fit(table.iloc[train], y[train])
    accuracy = np.mean(tree.predict(table.iloc[test]) == y[test])
    print(f"C45Classifier: accuracy {accuracy:.4f}; {tree.n_nodes_} nodes, {tree.n_leaves_} leaves, depth {tree.depth_}")
    print("the tree's first lines, in J48's layout:")
    print("\n".join(tree.export_text().splitlines()[:8]))
    return 0 if np.allclose(proba, sk_proba, rtol=1e-6, atol=1e-9) else 1


if __name__ == "__main__":
    sys.exit(main())
