"""gpumine on a Dask cluster: several GPUs or machines, the same exact answers as one process.

Needs ``dask[distributed]`` (``pip install 'gpumine[dask]'``); on GPUs, dask-cuda's
``LocalCUDACluster`` gives one worker per GPU. See :func:`kneighbors`.
"""

from ._cluster import local_cluster
from ._counting import CategoricalNB
from ._knn import NearestNeighbors, kneighbors
from ._outliers import LocalOutlierFactor, top_n_outliers

__all__ = ["kneighbors", "NearestNeighbors", "LocalOutlierFactor", "top_n_outliers", "CategoricalNB", "local_cluster"]
