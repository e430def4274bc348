"""One search of validated data by its cheapest route: what the library's own callers use.

:func:`knn_search` plans a search from scratch: it reads the data's magnitudes, asks the device
for free memory and chooses a path, several host waits in all. For small searches on a GPU
those waits are most of the time, and ``kneighbors`` skips them: a small search is checked and
run in one launch (:func:`~._small_search.search_small`), a repeated one replays a captured
graph (:mod:`._graphs`). Estimators, outlier detectors and streams search data they have
already validated, so :func:`search_validated` gives them the same routes, with results equal
bit for bit to :func:`knn_search`'s.
"""

from __future__ import annotations

import torch

from ...core.distance import Metric
from ._small_search import search_small
from ._graphs import search_with_graph
from ._search import knn_search

__all__ = ["search_validated"]


def search_validated(ref: torch.Tensor, query: torch.Tensor, k: int, metric: Metric, *, exclude_self: bool,
                     device: torch.device, budget_bytes: int, result_device: torch.device, backend: str,
                     as_distance: bool = True, precision: str = "exact", graphs: bool = False, working_memory=None,
                     verbose=None, stats: dict | None = None, memo=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``knn_search``'s ``(scores or distances, indices)`` on ``result_device``, by the cheapest route.

    On a GPU: a small float32 search in one checked launch; with ``graphs`` (distances only), a
    repeated search through a captured graph (``working_memory``: the setting ``budget_bytes``
    came from); otherwise, and on the CPU, :func:`knn_search`. ``ref``/``query`` hold finite values
    (the caller validated them); ``query is ref`` when ``exclude_self``. ``stats`` is filled by
    :func:`knn_search` only (``stats["route"]`` names the route taken). ``memo``: the references'
    :class:`~._dense.ReferenceMemo`, for :func:`knn_search`, where their owner keeps one.
    """
    if device.type == "cuda" and query.shape[0]:
        found = search_small(ref, query, k, metric, exclude_self=exclude_self, device=device, backend=backend,
                             precision=precision, as_distance=as_distance)
        if found is not None and found[2]:  # not finite: knn_search decides (it raises or widens)
            if stats is not None:
                stats["route"] = "small"
            return found[0].to(result_device), found[1].to(result_device)
        if graphs and as_distance:
            found = search_with_graph(ref, query, k, metric, exclude_self=exclude_self, device=device,
                                      working_memory=working_memory, backend=backend, precision=precision,
                                      result_device=result_device)
            if found is not None:
                if stats is not None:
                    stats["route"] = "graph"
                return found
    if stats is not None:
        stats["route"] = "search"
    return knn_search(ref, query, k, metric, exclude_self=exclude_self, device=device, budget_bytes=budget_bytes,
                      result_device=result_device, verbose=verbose, stats=stats, backend=backend,
                      as_distance=as_distance, precision=precision, memo=memo)
