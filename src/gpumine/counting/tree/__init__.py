"""C4.5 decision trees built from counts (De Silva 2019, sections 3.5.3-3.5.5), with Weka J48's rules.

The tree grows breadth-first. All nodes of one depth are counted together: a
one-column pass gives every node's class distribution, and one contingency pass
gives, for every node that can still split (not pure, not too small) × attribute
level × class, the (weighted) count — by AND + popcount of level bitmaps with node-and-class row bitmaps
(``representation="bitmap"``/``"bitslice"``), or by one bincount over integer
codes (``"histogram"``); ``"auto"`` picks per depth by measured cost. Node
partitions stay on the device (row lists and, for the bitmap path, row bitmaps
made by one scatter per depth), and so does the split search, vectorised over all
nodes of the depth and over the attributes of one kind and number of levels
(per-node × level × class tables and their cumulative sums give every numeric
cut's gain at once, without sorting). The host looks at each depth twice: the
nodes' class distributions, then the chosen splits; the node tables that route
the rows are built on the device from the latter. While counts are whole
numbers (no sample weights, no missing value routed) the tables stay int64, and
on the CPU a child with more rows than its siblings gets its table as its
parent's minus theirs.

J48 rules followed (weka.classifiers.trees.j48, C4.5 release 8): gain ratio
among attributes whose information gain is at least the average (minus 1e-3);
multiway splits on nominal attributes, binary ``<=`` splits on numeric ones with
the MDL correction ``log2(#candidate cuts) / N`` and the minimum split size
``clip(0.1 * N / n_classes, min_samples_leaf, 25)``; at least two branches with
``min_samples_leaf`` instances; missing values: gain scaled by the known
fraction, split information with the unknowns as an extra branch, instances
with a missing value sent down every branch with fractional weights, and the
same at prediction time; collapsing and pessimistic (confidence-bound) pruning
by subtree replacement and, as J48 by default, subtree raising (a node may be
replaced by its largest branch, the training instances of the other branches
re-distributed into it; ``subtree_raising=False`` is ``J48 -S``). Not done:
Laplace leaves, reduced-error pruning.

Numeric attributes with more than ``max_bins`` distinct values are cut into
``max_bins`` equal-frequency bins first (cut points only between bins; exact
J48 otherwise).

Modules, one step each:

* ``_classifier``: the estimator (parameters, input checks, the steps of fit and predict);
* ``_encoding``: training and prediction data, and labels, to integer codes;
* ``_growth``: breadth-first growth from per-depth count tables;
* ``_split_search``: J48's gain-ratio split search over a depth's count tables;
* ``_nodes``: the tree as node arrays, and walks over it;
* ``_estimates``: J48's pessimistic error estimates and the pruning decision;
* ``_pruning``: collapsing, subtree replacement, subtree raising (any data);
* ``_pruning_whole``: subtree raising for whole counts with one path per row;
* ``_prediction``: the final tree's tables and the class distribution of instances;
* ``_export``: J48's text layout.
"""

from ._classifier import C45Classifier
from ._encoding import MAX_NOMINAL_VALUES
from ._estimates import add_errors

__all__ = ["C45Classifier", "MAX_NOMINAL_VALUES", "add_errors"]
