"""gpumine on a Dask cluster: several GPUs or machines, the same exact answers as one process.

Needs ``dask[distributed]`` (``pip install 'gpumine[dask]'``); on GPUs, dask-cuda's
``LocalCUDACluster`` gives one worker per GPU. See :func:`kneighbors`.
"""

from ._cluster import local_cluster
from ._counting import CategoricalNB
from ._itemsets import frequent_itemsets
from ._knn import NearestNeighbors, kneighbors, radius_neighbors
from ._outliers import LocalOutlierFactor, top_n_outliers

__all__ = ["kneighbors", "radius_neighbors", "NearestNeighbors", "KNeighborsClassifier", "KNeighborsRegressor", "LocalOutlierFactor",
           "top_n_outliers", "CategoricalNB", "C45Classifier", "frequent_itemsets", "local_cluster"]

from ..utils._lazy import lazy_exports

# the kNN estimators and the tree need scikit-learn (about a second to import): loaded on first use
_LAZY = {"KNeighborsClassifier": "._estimators", "KNeighborsRegressor": "._estimators", "C45Classifier": "._tree"}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
