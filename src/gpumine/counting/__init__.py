"""Bitmap / bit-slice counting engine (De Silva 2019) and the algorithms built on counts.

* Stores: :class:`BitmapStore` (one bit-vector per level), :class:`BitSliceStore`
  (one bit-vector per bit of the code), built from NumPy / pandas / CSV with a
  schema (:func:`encode_table`), convertible into each other.
* Count ops (torch and Triton, same signature): :func:`element_count`,
  :func:`co_occurrence_count`, :func:`range_count`, batched :func:`pattern_counts`,
  :func:`range_counts`, :func:`contingency_table`, :func:`contingency_tables`, and
  the histogram-on-codes path :func:`histogram_contingency`.
* Algorithms: :class:`CategoricalNB`, :class:`C45Classifier`,
  :func:`frequent_itemsets`, :func:`association_rules`.
"""

from ._encode import ColumnInfo, EncodedTable, encode_table
from ._store import BitmapStore, BitSliceStore, build_store
from ._ops import (
    and_count_matrix,
    choose_representation,
    co_occurrence_count,
    contingency_table,
    contingency_tables,
    element_count,
    histogram_contingency,
    pattern_counts,
    range_count,
    range_counts,
)

__all__ = [
    "ColumnInfo",
    "EncodedTable",
    "encode_table",
    "BitmapStore",
    "BitSliceStore",
    "build_store",
    "and_count_matrix",
    "choose_representation",
    "element_count",
    "co_occurrence_count",
    "range_count",
    "pattern_counts",
    "range_counts",
    "contingency_table",
    "contingency_tables",
    "histogram_contingency",
]

from ..utils._lazy import lazy_exports
from ._itemsets import association_rules, frequent_itemsets

__all__ += ["CategoricalNB", "C45Classifier", "frequent_itemsets", "association_rules"]

# the estimators need scikit-learn (about a second to import): loaded on first use, so
# commands that do not count (the streaming CLI) start without it
_LAZY = {"CategoricalNB": "._nb", "C45Classifier": ".tree"}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
