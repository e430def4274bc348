"""The exact kNN search engine behind every kNN-based estimator in gpumine.

One entry point, :func:`knn_search`: the ``k`` nearest references of every
query row, exact under the tie rule (equal scores: lower reference index), on
any device. Everything else here decides how a search runs or runs one part
of it; estimators, outlier detectors and streams import only the names below.

How a search runs (each module holds one part, its Triton kernels beside their
torch twins):

* ``_plan``: how a search runs, decided before any work (:class:`SearchPlan`:
  backend, candidate counts, tile plans).
* ``_search``: :func:`knn_search` and the choice between the paths below; the
  tile engine (candidates per tile of references, merged top-k, re-rank with
  exact scores, certificate, retries for rows it cannot certify).
* ``_host``: searches on the CPU (a KD-tree or BLAS products with a cheap
  selection, then exact float64 scores): the chooser and duplicate rows, with
  ``_host_tree`` (the KD-tree), ``_host_gemm`` (matrix products),
  ``_host_exact`` (exact scores, selection under the tie rule) and
  ``_host_threads`` (thread pool and blocks).
* ``_dense``: L2 searches on a GPU from one product per block of queries, a
  float64 re-score of the candidates and a radius pass for rows with ties.
* ``_exact_select`` / ``_exact_select_kernel``: L2 searches at few features
  on a GPU, float64 scores selected in one launch (no certificate): small
  searches (``_small_search``: checked and run in one launch,
  :func:`search_small`, replayed as a CUDA graph when repeated), mid-size ones
  and large tie-heavy ones.
* ``_product_select`` / ``_product_select_kernel``: L2 searches past 32
  features on a GPU, one product and one or two selection launches per query
  block (the best candidates by tile score re-scored in float64 and certified
  in-kernel; large grids finish in a second launch, few rows split their
  references over programs).
* ``_float64_order``: the order by float64 exact scores for float32 data.
* ``_duplicates``: exact duplicate rows collapsed before a search.
* ``_magnitude``: data near the ends of the float range scaled or widened.
* ``_graphs``: repeated small searches captured and replayed as CUDA graphs.
* ``_routes``: :func:`search_validated`, the cheapest of these routes for data
  its caller has validated (what estimators, detectors and streams call).
* ``_fused_kernel`` / ``_fused_tuning``: the fused Triton candidate kernel and
  its tile-shape tuning; ``_rerank_kernel``: the re-rank and selection in one
  launch; ``_exact_tile_kernel``: exact score tiles for large ``k``, and every
  reference within a score threshold (:func:`scores_within`, which radius
  queries use to propose candidates).
* ``_host_summary``: facts about host references, taken in one pass through
  the GPU or gathered by the search from the tiles it streams.
"""

from ._dense import ReferenceMemo
from ._exact_tile_kernel import exact_tile_available, scores_within, scores_within_torch
from ._fused_tuning import tuning
from ._graphs import clear_search_graphs, search_with_graph
from ._host_summary import assumptions_held, facts_of, gather_facts, summarise_on_device
from ._magnitude import finite_magnitudes, smallest_nonzero_magnitude
from ._summary_kernel import data_summary
from ._plan import SearchPlan, choose_backend, fused_unsupported, plan_search
from ._routes import search_validated
from ._search import knn_search
from ._small_search import clear_small_graphs, search_small

__all__ = ["knn_search", "SearchPlan", "plan_search", "choose_backend", "fused_unsupported", "search_with_graph",
           "clear_search_graphs", "finite_magnitudes", "smallest_nonzero_magnitude", "data_summary", "tuning", "scores_within", "scores_within_torch",
           "exact_tile_available", "summarise_on_device", "gather_facts", "facts_of", "assumptions_held",
           "search_small", "clear_small_graphs", "search_validated", "ReferenceMemo"]
