"""The functional kNN API: validation, device choice and output kind around the engine."""

from __future__ import annotations

import math

import numpy as np
import torch

from ..utils._validation import (all_finite, check_array, check_n_neighbors, non_finite_error, output_kind, result_device,
                           to_output, to_outputs)
from ..config import resolve_device, working_memory_bytes
from ..core.distance import check_precision, get_metric
from ..core.tiles import copy_to_device, fits_on_device, same_device
from ._metrics_extra import EXTRA_METRICS, check_backend, extra_kneighbors, is_extra_metric, make_extra_form
from .engine import (assumptions_held, choose_backend, data_summary, facts_of, finite_magnitudes, gather_facts, knn_search,
                     search_small, search_with_graph, summarise_on_device)

__all__ = ["kneighbors", "tune_knn"]


def _common_dtype(*tensors: torch.Tensor) -> torch.dtype:
    for t in tensors:
        if t.dtype == torch.float64:
            return torch.float64
    return torch.float32


def _to_device_checked(arrays: dict, device: torch.device, gather: tuple = ()):
    """Validated tensors on a GPU, checked for NaN/inf there; their largest and smallest nonzero magnitudes,
    and whether they hold whole numbers only (None where an array was not checked here).

    ``arrays`` maps parameter names to tensors (the same tensor once). Host data
    that fits is copied first and checked on the device: one min/max reduction
    per array tells finiteness (NaN and infinity survive it) and the magnitude
    the engine's range scaling needs, behind a single host wait. On the host,
    NumPy's isfinite, min and max of the physics search's 12,000 + 32,768 rows
    x 65 took nearly a third of the search. Host data too large to copy is
    summarised in one pass through the GPU (``engine._host_summary``): the
    search then reads its facts instead of the host data. With ``gather``, host
    references too large to copy are not summarised first: the search gathers
    their facts from the tiles it streams (``engine.gather_facts``), and the
    returned magnitudes are those of the other arrays only.
    """
    moved, extremes, host_ends = {}, [], []
    unknown = False  # magnitudes of data left where it is and not summarised
    for name, tensor in arrays.items():
        if not same_device(tensor.device, device):
            if tensor.device.type != "cpu" or not fits_on_device(3 * tensor.numel() * tensor.element_size(), device):
                moved[name] = tensor
                if not tensor.numel():
                    continue
                if tensor.device.type == "cpu" and tensor.dim() == 2:
                    if name in gather:  # the search's own pass gathers the facts (see engine._host_summary)
                        gather_facts(tensor)
                        continue
                    # one pass through the GPU instead of the host's (see engine._host_summary)
                    summary = summarise_on_device(tensor, device)
                    if not summary.finite:
                        raise non_finite_error(tensor, name)
                    host_ends.append((summary.largest, summary.tiniest))
                    continue
                if not all_finite(tensor):
                    raise non_finite_error(tensor, name)
                unknown = True
                continue
            tensor = copy_to_device(tensor, device)
        moved[name] = tensor
        if tensor.numel():
            # [min, max, smallest nonzero |x|, whole numbers only (1) or not (0)] in one pass: float data
            # then skips the search's integer-centre check
            extremes.append(data_summary(tensor))
    if extremes:
        found = torch.stack(extremes).cpu().numpy()  # the one host wait
        low_high = found[:, :2]
        if not np.isfinite(low_high).all():
            for name, tensor in moved.items():
                if tensor.device.type != "cpu" and tensor.numel() and not bool(torch.isfinite(tensor).all()):
                    raise non_finite_error(tensor, name)
        largest, tiniest = float(np.abs(low_high).max()), float(found[:, 2].min())
    else:
        largest, tiniest = 0.0, float("inf")
    for high, tiny in host_ends:
        largest, tiniest = max(largest, high), min(tiniest, tiny)
    # integrality is known when every array went through the pass above
    integral = bool((found[:, 3] == 1.0).all()) if extremes and len(extremes) == len(arrays) else None
    return moved, (None, None) if unknown else (largest, tiniest), integral


def _checked_magnitudes(tensor: torch.Tensor, name: str):
    """``(largest, tiniest)`` magnitudes of validated host data, from the pass that refuses NaN and infinity.

    The errors are :func:`check_array`'s. Data not in host memory is only
    checked (None: the search finds its magnitudes itself). Float64 data skips
    the smallest nonzero magnitude (``inf``): its range plan does not read it.
    """
    if tensor.numel() and tensor.device.type == "cpu":
        ends = finite_magnitudes(tensor, nonzero=tensor.dtype != torch.float64)
        if ends is None:
            raise non_finite_error(tensor, name)
        return ends
    if tensor.numel() and not all_finite(tensor):
        raise non_finite_error(tensor, name)
    return None if tensor.numel() else (0.0, math.inf)


def _joined(a, b):
    """The magnitudes of two arrays together (None when either is unknown)."""
    if a is None or b is None:
        return None
    return max(a[0], b[0]), min(a[1], b[1])


def kneighbors(
    X_ref,
    X_query=None,
    k: int = 5,
    *,
    metric="euclidean",
    p: float | None = None,
    metric_params: dict | None = None,
    device=None,
    backend=None,
    working_memory=None,
    verbose=None,
    return_distance: bool = True,
    precision: str = "exact",
):
    """Exact k nearest neighbours of each query among the reference rows.

    Parameters
    ----------
    X_ref : array-like or torch.Tensor of shape (n_ref, n_features)
        The reference set. NumPy arrays and host tensors stay in host memory and
        stream to the GPU in tiles when they do not fit there.
    X_query : array-like or torch.Tensor of shape (n_query, n_features), optional
        The queries. ``None`` queries the reference set against itself and
        excludes each point from its own neighbours (as scikit-learn's
        ``kneighbors(X=None)``).
    k : int
        Neighbours per query, ``1 <= k <= n_ref`` (``n_ref - 1`` when
        ``X_query`` is None).
    metric : str or callable
        The engine's metrics: ``"euclidean"`` (default), ``"sqeuclidean"``,
        ``"manhattan"``, ``"chebyshev"``, ``"minkowski"`` (with ``p``),
        ``"cosine"`` or ``"inner_product"``. scikit-learn's others, searched by
        an exact float64 brute force (see :mod:`gpumine.neighbors._metrics_extra`):
        ``"seuclidean"``, ``"mahalanobis"``, ``"haversine"``, ``"correlation"``,
        ``"canberra"``, ``"braycurtis"``, ``"hamming"``, ``"nan_euclidean"``
        (NaN marks missing values), the boolean ``"jaccard"``, ``"dice"``,
        ``"rogerstanimoto"``, ``"russellrao"``, ``"sokalsneath"``, ``"yule"``,
        a callable ``metric(a, b) -> float`` on 1-D NumPy rows (called for every
        pair, on the host) or a :class:`sklearn.metrics.DistanceMetric`.
    p : float, optional
        Power for ``metric="minkowski"`` (default 2).
    metric_params : dict, optional
        ``{"V": variances}`` for ``"seuclidean"``; ``{"VI": inverse
        covariance}`` or ``{"V": covariance}`` for ``"mahalanobis"``; keyword
        arguments of a callable metric. Other metrics take none.
    device : {"auto", "cpu", "cuda", "cuda:N"} or None
        Where to compute (``None``: the configured default, see :mod:`gpumine.config`).
    backend : {"auto", "torch", "triton"} or None
        ``"triton"`` runs the candidate phase as one fused Triton kernel
        (float32; euclidean, sqeuclidean, cosine, inner product and manhattan;
        k up to 255). Both backends give identical results; ``"auto"`` takes
        the kernel on CUDA where it measured faster (large searches at up to
        80 features, see ``gpumine.neighbors.engine._search.auto_prefers_fused``).
        On CUDA, ``"auto"`` and ``"triton"`` also re-rank the candidates with a
        Triton kernel (same results); ``"torch"`` runs PyTorch operations only.
    working_memory : float, optional
        MiB allowed for one tile's temporaries.
    verbose : int, optional
        ``0`` hides the progress bar shown on terminals for long runs.
    return_distance : bool
        Return ``(distances, indices)`` when True, only ``indices`` otherwise.
    precision : {"exact", "tf32", "bf16"}
        Arithmetic of the candidate search's products (float32 data only for
        the last two): ``"tf32"``/``"bf16"`` use faster, less accurate tensor
        core products and keep a wider candidate list; every candidate is then
        re-ranked by its exact distance and certified, so results are exact
        and identical in all three modes. Only the speed differs (see
        BENCHMARKS.md); on the CPU ``"tf32"`` computes as ``"exact"``.

    Returns
    -------
    distances : (n_query, k) array, ascending
        True metric distances (squared for ``"sqeuclidean"``; for
        ``"inner_product"`` the inner products, largest first, as FAISS).
    indices : (n_query, k) int64 array
        Row numbers into ``X_ref``. Equal distances are ordered by the lower index.

    Results come back in the caller's kind: NumPy in, NumPy out; a torch tensor
    in, a tensor on that tensor's device out; a CuPy array (or any array with
    ``__dlpack__`` or ``__cuda_array_interface__``) in, read without a copy
    and returned as its kind on its device. ``output_type`` in
    :func:`gpumine.config_context` asks for another kind.

    On a GPU, a small L2 search (float32, up to 32 features, ``k`` up to 64, up
    to 2^26 query-reference pairs) scores every pair in float64 and selects in
    one kernel launch that also checks the data for NaN and infinity; its work
    is set by the shape, whatever ties or duplicates the data has. With the data
    on the GPU, a shape met again replays that launch as a CUDA graph (the
    launch's host work was as long as the kernel on the smallest sets; same
    results). Other searches that
    run the fused kernel in one launch (float32, up to
    128 MiB of operands) are captured as a CUDA graph the second time their shape
    is met, and later calls of that shape replay it: one launch and one host
    wait instead of ~60, with the same results. Up to four shapes are kept;
    :func:`clear_search_graphs` frees them.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [1.0], [3.0], [1.0]])
    >>> d, i = kneighbors(X, np.array([[0.9]]), k=3, device="cpu")
    >>> i
    array([[1, 3, 0]])
    >>> kneighbors(X, k=1, device="cpu", return_distance=False).ravel()
    array([1, 3, 1, 1])
    """
    dev = resolve_device(device)
    if is_extra_metric(metric):
        return _extra_search(X_ref, X_query, k, metric, metric_params, dev, backend, working_memory,
                             return_distance, precision)
    if metric_params:
        raise ValueError(f"metric_params {sorted(metric_params)} apply to the metrics {', '.join(EXTRA_METRICS)} and "
                         f"callables; metric={metric!r} takes p only")
    on_gpu = dev.type == "cuda"  # NaN and infinity are then looked for on the device
    # on the host, the pass that finds NaN and infinity also gives the range plan's magnitudes
    ref = check_array(X_ref, name="X_ref", allow_nan=True)
    ends = None if on_gpu else _checked_magnitudes(ref, "X_ref")
    exclude_self = X_query is None
    if exclude_self:
        query, kind = ref, output_kind(X_ref)
    else:
        query = check_array(X_query, name="X_query", allow_empty=True, allow_nan=True)
        if not on_gpu:
            ends = _joined(ends, _checked_magnitudes(query, "X_query"))
        kind = output_kind(X_query)
        if query.shape[1] != ref.shape[1]:
            raise ValueError(
                f"X_query has {query.shape[1]} features but X_ref has {ref.shape[1]}; "
                "queries need the same columns as the reference set"
            )
    dtype = _common_dtype(ref, query)
    if ref.dtype != dtype:
        ref = ref.to(dtype)
    if query.dtype != dtype:
        query = query.to(dtype)
    k = check_n_neighbors(k, ref.shape[0], name="k", excluding_self=exclude_self)
    metric_obj = get_metric(metric, p)
    check_precision(precision, dtype)
    backend = choose_backend(backend, dev, metric_obj, dtype, k, ref.shape[0])
    # results are left where the output will be: the input's device for tensors and GPU arrays, else the host
    out_device = result_device(kind, dev)
    found = None
    if on_gpu:
        # small searches check the data and search in one launch (a repeated one replays it as a graph),
        # and repeated ones of other kinds replay a captured graph (see gpumine.neighbors.engine._small_search
        # and ._graphs)
        found = _search_small(ref, query, k, metric_obj, exclude_self, dev, backend, precision, out_device)
    if on_gpu and found is None:
        found = search_with_graph(ref, query, k, metric_obj, exclude_self=exclude_self, device=dev, working_memory=working_memory,
                                  backend=backend, precision=precision, result_device=out_device)
    if found is not None:
        scores, index = found
    else:
        scores, index = _search(ref, query, k, metric_obj, exclude_self, dev, working_memory_bytes(working_memory, dev),
                                out_device, verbose, backend, precision, ends)
    if not return_distance:
        return to_output(index, kind)
    return to_outputs(kind, scores, index)


def _search_small(ref, query, k, metric_obj, exclude_self, dev, backend, precision, result_device):
    """``(distances, indices)`` of a small GPU search checked in its own launch, or None (see ``engine.search_small``)."""
    found = search_small(ref, query, k, metric_obj, exclude_self=exclude_self, device=dev, backend=backend, precision=precision)
    if found is None:
        return None
    scores, index, finite = found
    if not finite:
        for name, tensor in (("X_ref", ref), ("X_query", query)):
            if tensor.numel() and not all_finite(tensor):
                raise non_finite_error(tensor, name)
        return None  # the kernel's count and the check disagree: the eager path decides
    return scores.to(result_device), index.to(result_device)


def _extra_search(X_ref, X_query, k, metric, metric_params, dev, backend, working_memory, return_distance, precision):
    """``kneighbors`` for the metrics of :mod:`gpumine.neighbors._metrics_extra`: exact float64 brute force."""
    check_backend(backend, metric)
    allow_nan = metric == "nan_euclidean"
    ref = check_array(X_ref, name="X_ref", allow_nan=allow_nan)
    exclude_self = X_query is None
    if exclude_self:
        query, kind = ref, output_kind(X_ref)
    else:
        query = check_array(X_query, name="X_query", allow_empty=True, allow_nan=allow_nan)
        kind = output_kind(X_query)
        if query.shape[1] != ref.shape[1]:
            raise ValueError(f"X_query has {query.shape[1]} features but X_ref has {ref.shape[1]}; "
                             "queries need the same columns as the reference set")
    for name, tensor in (("X_ref", ref), ("X_query", query)):
        if tensor.numel() and bool(torch.isinf(tensor).any()):
            raise ValueError(f"{name} contains infinity; pass finite values (NaN marks a missing value for "
                             "metric='nan_euclidean' only)")
    dtype = _common_dtype(ref, query)
    ref, query = ref.to(dtype), query.to(dtype)
    k = check_n_neighbors(k, ref.shape[0], name="k", excluding_self=exclude_self)
    check_precision(precision)  # the brute force is exact float64 whatever the precision asked for
    budget = working_memory_bytes(working_memory, dev)
    form = make_extra_form(metric, metric_params, ref.shape[1], budget_bytes=budget)
    dist, index = extra_kneighbors(ref, query, k, form, exclude_self=exclude_self, device=dev, budget_bytes=budget)
    index_out = to_output(index, kind)
    if not return_distance:
        return index_out
    return to_output(dist, kind), index_out


def _search(ref, query, k, metric_obj, exclude_self, dev, budget_bytes, result_device, verbose, backend, precision,
            ends=None):
    """The eager search: GPU operands copied and checked first, then the engine.

    ``ends``: the host data's ``(largest, tiniest)`` magnitudes from its finiteness check (see
    :func:`_checked_magnitudes`), or None.
    """
    magnitude = tiniest = integral = None
    if dev.type == "cuda":
        arrays, (magnitude, tiniest), integral = _to_device_checked(
            {"X_ref": ref} if exclude_self else {"X_ref": ref, "X_query": query}, dev, gather=("X_ref",))
        ref = arrays["X_ref"]
        query = ref if exclude_self else arrays["X_query"]
    common = dict(exclude_self=exclude_self, device=dev, budget_bytes=budget_bytes, result_device=result_device,
                  verbose=verbose, backend=backend, as_distance=True, precision=precision)
    gathering = facts_of(ref) is not None  # host references streamed once, their facts gathered on the way
    if dev.type != "cuda" and ends is not None and not gathering:
        magnitude, tiniest = ends
        if ref.dtype == torch.float64:
            tiniest = None  # float64's range plan reads the largest magnitude only
    try:
        found = knn_search(ref, query, k, metric_obj, magnitude=magnitude, tiniest=tiniest, integral=integral, **common)
    except Exception:
        if gathering and not assumptions_held(ref, magnitude, tiniest)[0] and not summarise_on_device(ref, dev).finite:
            raise non_finite_error(ref, "X_ref") from None  # what failed the search
        raise
    if not gathering:
        return found
    held, facts = assumptions_held(ref, magnitude, tiniest)
    if held:
        return found
    # the one-pass assumptions did not hold: refuse non-finite values; otherwise (data near the ends of
    # the float range, rows the search did not see) summarise and search again
    summary = facts if facts is not None and not facts.finite else summarise_on_device(ref, dev)
    if not summary.finite:
        raise non_finite_error(ref, "X_ref")
    magnitude, tiniest = max(magnitude, summary.largest), min(tiniest, summary.tiniest)
    return knn_search(ref, ref if exclude_self else query, k, metric_obj, magnitude=magnitude, tiniest=tiniest, **common)


def tune_knn(X_ref, X_query=None, k: int = 5, *, metric: str = "euclidean", p: float | None = None, device=None,
             working_memory=None, precision: str = "exact") -> dict:
    """Measure the fused kernel's tile shapes on one search and cache the fastest.

    Runs ``kneighbors(X_ref, X_query, k, backend="triton", ...)`` once; every
    kernel launch of a shape class (features, candidates per query, precision,
    self-exclusion, query-count class, GPU and Triton version) not yet in the
    cache times a few ``(block_m, block_n, num_warps)`` shapes on the real
    operands and records the fastest in ``$GPUMINE_CACHE_DIR/knn_tiles.json``
    (default ``~/.cache/gpumine``). Later searches of those classes, in any
    process, use the recorded shapes; results are identical whatever the shape.
    Tuning compiles every candidate shape once (about a second each);
    untuned classes keep the measured defaults and compile one shape.

    Parameters are those of :func:`kneighbors` (float32 data, a metric with a
    Triton kernel, a CUDA device; a CPU runs the kernel under
    ``TRITON_INTERPRET=1`` only).

    Returns
    -------
    dict
        ``{shape_class: {"blocks": (block_m, block_n, num_warps), "ms": {shape: ms},
        "failed": {shape: error}}}`` for each class tuned by this call (empty
        when every class was already cached, or when the search used no fused
        launch, e.g. k above the kernel's register budget).
    """
    from .engine import tuning

    with tuning() as tuned:
        kneighbors(X_ref, X_query, k, metric=metric, p=p, device=device, backend="triton", working_memory=working_memory,
                   verbose=0, return_distance=False, precision=precision)
    return dict(tuned)
