"""Tensor-to-tensor building blocks: distances, top-k selection, tiling and bit operations."""

from .distance import METRICS, get_metric, pairwise_distances
from .select import merge_topk, topk_smallest
from .tiles import plan_tiles

__all__ = ["METRICS", "get_metric", "pairwise_distances", "merge_topk", "topk_smallest", "plan_tiles"]
