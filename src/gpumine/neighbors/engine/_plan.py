"""How a search runs, decided before any work: backend, candidate counts, tile plans (:class:`SearchPlan`)."""

from __future__ import annotations

import dataclasses

import torch

from ...config import get_config, resolve_backend
from ...core.distance import Metric
from ...core.tiles import DEVICE_BUFFERS, TilePlan, fits_on_device, plan_tiles, same_device
from ._exact_tile_kernel import EXACT_TILE_MAX_FEATURES, EXACT_TILE_METRICS
from ._fused_kernel import FUSED_METRICS, MAX_FUSED_CANDIDATES, ROW_ALIGN, split_form_width

__all__ = ["SearchPlan", "plan_search", "candidate_count", "fused_candidate_count", "fused_unsupported", "choose_backend",
           "auto_prefers_fused", "exact_tiles_apply"]


def candidate_count(k: int, n_ref: int, precision: str = "exact") -> int:
    """Candidates kept per query before the exact re-rank (k plus a margin).

    Reduced-precision searches keep a wider margin: their larger error bound
    needs a larger gap between the k-th and the last kept score to certify.
    """
    margin = max(16, k // 4) if precision == "exact" else max(64, k)
    return min(n_ref, k + margin)


# queries per fused launch: 1M x 32,768 x 8 ran as four launches of 2^18 with ~100 small
# torch ops each around them (re-rank, certificate), measured at nearly half of the search
_FUSED_QUERY_ROWS = 1 << 20


# candidates per query of the fused kernel, as a multiple of k + 1, by search precision
_FUSED_MARGIN = {"exact": 1, "tf32": 4, "bf16": 8}


# Searches of at most this many (query, reference) pairs keep twice the candidates: a retry
# round (a host wait and ~100 launches, even for one row) costs more than the wider
# list. Measured at k = 7 with 16 instead of 8 candidates: the physics search (12,000 x 32,768
# x 65, one row retried at 8) took about 40 % less time; of the larger searches 1M x 32,768 x 8
# and all-kNN of 262,144 x 64 were 6-7 % slower (no row retried against ~1,800), all-kNN of
# 262,144 x 8 4 % faster (BENCHMARKS.md, "Design measurements quoted in the code").
_FUSED_WIDE_MAX_PAIRS = 1 << 33


def fused_candidate_count(k: int, n_ref: int, precision: str = "exact", n_query: int | None = None) -> int:
    """The fused kernel keeps a power of two of candidates, at least k + 1.

    A smaller margin than the torch path's: every kept candidate costs the
    kernel registers and insertions, the (k+1)-th best is enough for the
    certificate on most rows of continuous data, and an uncertified row is
    still answered exactly by the retry. Reduced precisions keep 4x (tf32) or
    8x (bf16) more, and searches of up to ``_FUSED_WIDE_MAX_PAIRS`` pairs
    (``n_query`` given) twice as many, where a retry round costs more than
    the wider list.
    """
    margin = _FUSED_MARGIN[precision]
    count = max(2, 1 << (min(n_ref, margin * (k + 1)) - 1).bit_length())
    if n_query is not None and n_query * n_ref <= _FUSED_WIDE_MAX_PAIRS:
        wide = max(2, 1 << (min(n_ref, 2 * margin * (k + 1)) - 1).bit_length())
        if wide <= MAX_FUSED_CANDIDATES:  # else the register budget allows only the usual list
            count = wide
    return count


# the kernel's dot-product arithmetic for each search precision (see _fused_kernel)
_KERNEL_PRECISION = {"exact": None, "tf32": "tf32", "bf16": "bf16"}


def fused_unsupported(metric: Metric, dtype: torch.dtype, k: int, n_ref: int, precision: str = "exact") -> str | None:
    """Why the fused Triton kernel cannot run a search, or None when it can."""
    if metric.name not in FUSED_METRICS:
        return f"metric {metric.name!r} has no Triton kernel (supported: {', '.join(sorted(FUSED_METRICS))})"
    if dtype != torch.float32:
        return "the Triton kernels compute in float32 and the data is float64"
    if fused_candidate_count(k, n_ref, precision) > MAX_FUSED_CANDIDATES:
        return (f"k={k} needs more candidates than the kernel's register budget ({MAX_FUSED_CANDIDATES}) at precision={precision!r}; "
                "larger k runs on the torch selection")
    return None


# Where backend="auto" takes the fused kernel, by measurement (BENCHMARKS.md, "Design
# measurements quoted in the code"): on all-kNN of 262,144 uniform points at k = 7 the fused
# kernel beat the torch engine at every d from 8 to 80 (about 3.5x at d = 8, 1.7x at d = 64
# once |y|^2 became a bias, knn.BIAS_MIN_FEATURES; 1.6x at d = 80 with the features past 64 as
# FMAs, knn.MAX_DOT_TAIL), and 3.4x on 1M x 10 at k = 20. Above 80 several tl.dot steps
# return, unmeasured. Small searches are launch- and compile-bound.
AUTO_FUSED_METRICS = ("euclidean", "sqeuclidean", "cosine", "inner_product")


AUTO_FUSED_MAX_FEATURES = 80


AUTO_FUSED_MIN_PAIRS = 1 << 26


def auto_prefers_fused(metric: Metric, dtype: torch.dtype, k: int, n_query: int, n_ref: int, n_features: int,
                       precision: str = "exact") -> bool:
    """Whether ``backend="auto"`` runs this search on the fused kernel (see ``AUTO_FUSED_*``)."""
    return (metric.name in AUTO_FUSED_METRICS and n_features <= AUTO_FUSED_MAX_FEATURES
            and n_query * n_ref >= AUTO_FUSED_MIN_PAIRS and fused_unsupported(metric, dtype, k, n_ref, precision) is None)


def choose_backend(backend, device: torch.device, metric: Metric, dtype: torch.dtype, k: int, n_ref: int) -> str:
    """Resolve ``backend`` for the searches of one call.

    Returns ``"torch"``, ``"triton"``, or ``"auto"`` where the Triton kernel is
    available and the choice depends on each search's shape, which
    :func:`knn_search` makes with :func:`auto_prefers_fused`.
    """
    resolved = resolve_backend(backend, device, has_triton_kernel=True)
    requested = backend if backend is not None else get_config()["backend"]
    if resolved == "triton" and requested == "auto":
        return "auto"
    return resolved


def _fits_resident(ref: torch.Tensor, device: torch.device) -> bool:
    """Whether the references stay on the device (with room for their prepared copies) rather than stream."""
    return same_device(ref.device, device) or fits_on_device(3 * ref.numel() * ref.element_size(), device)


@dataclasses.dataclass(frozen=True)
class SearchPlan:
    """How one search runs, decided by :func:`plan_search` before any work.

    Attributes
    ----------
    k : int
        Neighbours per query.
    metric : Metric
        The metric the search ranks by.
    device : torch.device
        Where the tiles are scored.
    backend : str
        ``"torch"`` or ``"triton"`` after resolving ``"auto"``.
    precision : str
        Arithmetic of the candidate products: ``"exact"``, ``"tf32"`` or ``"bf16"``.
    c : int
        Candidates kept per query in the first pass.
    fused : bool
        The candidate phase runs as one fused Triton kernel.
    direct : bool
        The fused kernel scores by direct differences (low-dimensional L2, manhattan).
    tile_select : bool
        Exact score tiles with a Triton selection (large ``k``) instead of candidates.
    kernel_rerank : bool
        The re-rank's selection may run on the Triton kernel.
    plan : TilePlan
        Query and reference rows per tile of the first pass.
    retry_plan : TilePlan
        The tile plan of the retries (rows the certificate left open).
    resident : bool
        The references stay on the device for the whole search.
    n_ref : int
        Number of references.
    spare : int
        Trailing list entries the certificate does not settle (0 or 1): a row is
        final when its first ``k - spare`` are, and the search also reports a
        bound on every reference left out of its list (see :func:`plan_search`).
    """

    k: int
    metric: Metric
    device: torch.device
    backend: str
    precision: str
    c: int
    fused: bool
    direct: bool
    tile_select: bool
    kernel_rerank: bool
    plan: TilePlan
    retry_plan: TilePlan
    resident: bool
    n_ref: int
    spare: int = 0


def plan_search(ref: torch.Tensor, query: torch.Tensor, k: int, metric: Metric, *, device: torch.device, budget_bytes: int,
                backend: str = "torch", precision: str = "exact", spare: int = 0) -> SearchPlan:
    """Decide how :func:`knn_search` runs a search (no GPU work, no host wait).

    ``spare``: the list's last entry is wanted only as a bound (the float64
    order's (k+1)-th: a float32 score below every reference left out of the
    first k). The certificate then settles the first ``k - 1`` entries against
    the kernel's floor of the references left out, so the fused kernel keeps
    ``k`` candidates where it would keep ``k + 1`` (16 slots become 8 at k = 8).
    """
    if spare not in (0, 1) or spare >= k:
        raise ValueError(f"spare must be 0, or 1 with k >= 2; got spare={spare}, k={k}")
    n_query, d = query.shape
    n_ref = ref.shape[0]
    dtype = ref.dtype
    if not metric.uses_matmul:  # scored by direct differences: no product for precision to round
        precision = "exact"
    c = candidate_count(k, n_ref, precision)
    # the kernel scores low-dimensional L2 by direct differences too
    fused_precision = "exact" if _scores_directly(metric, d) else precision
    # above the fused kernel's register budget, Triton selects from exact score tiles
    # the re-rank's selection runs on the Triton kernel for any search that may use Triton
    # (backend="torch" stays pure torch): bit for bit the torch path's results, one launch
    # instead of ~100 at few features (StreamingLOF's windows: 372 launches per window in all)
    kernel_rerank = backend in ("auto", "triton") and device.type == "cuda"
    tile_select = backend in ("auto", "triton") and exact_tiles_apply(metric, dtype, k, n_ref, d)
    if tile_select:
        backend = "triton"
    elif backend == "auto":
        backend = "triton" if auto_prefers_fused(metric, dtype, k, n_query, n_ref, d, fused_precision) else "torch"
    elif backend == "triton":
        reason = fused_unsupported(metric, dtype, k, n_ref, fused_precision)
        if reason:
            raise ValueError(f"backend='triton' cannot run this search: {reason}; use backend='torch' or 'auto'")
    fused = backend == "triton" and not tile_select
    direct = fused and _scores_directly(metric, d)
    if fused:
        precision = fused_precision
        c = max(k, fused_candidate_count(k - spare, n_ref, precision, n_query))
    plan = retry_plan = plan_tiles(n_query, n_ref, d, c, ref.element_size(), budget_bytes)
    resident = _fits_resident(ref, device)
    if fused:
        # the fused kernel keeps only (queries x c) candidates and no tile: one block holds
        # many queries, and resident references go to one launch as a whole where the
        # launch's copies of them fit the budget
        plan = TilePlan(query_rows=min(n_query, _FUSED_QUERY_ROWS),
                        ref_rows=fused_launch_rows(n_ref, d, budget_bytes, streamed=not resident),
                        budget_bytes=budget_bytes)
    return SearchPlan(k=k, metric=metric, device=device, backend=backend, precision=precision, c=c, fused=fused, direct=direct,
                       tile_select=tile_select, kernel_rerank=kernel_rerank, plan=plan, retry_plan=retry_plan,
                       resident=resident, n_ref=n_ref, spare=spare)


def fused_launch_rows(n_ref: int, d: int, budget_bytes: int, streamed: bool = False) -> int:
    """References per fused launch: all of them where the launch's copies of them fit
    ``budget_bytes``, else as many as fit (at least ``_FUSED_MIN_LAUNCH_ROWS``).

    ``streamed``: the references come from the host a tile at a time, so a tile
    also holds its ``DEVICE_BUFFERS`` staging buffers on the device and its prepared rows. Wide
    tiles matter there: each costs a launch, a merge of the candidate lists and
    a host wait for its staging buffer, and the score-tile plan's tiles (sized
    for score blocks the fused kernel never forms) were narrow enough for those
    to set the pace instead of the copies.
    """
    per_row = _fused_launch_bytes_per_row(d)
    if streamed:
        per_row += DEVICE_BUFFERS * 4 * d + 4 * (d + 1)
    if n_ref * per_row <= budget_bytes:
        return n_ref
    return min(n_ref, max(_FUSED_MIN_LAUNCH_ROWS, budget_bytes // per_row))


def _fused_launch_bytes_per_row(d: int) -> int:
    """What one launch copies of each resident reference row.

    The prepared rows in curve order (d + 1 float32), the operand the kernel
    reads (the split tf32x3 form, or rows padded to ``ROW_ALIGN``), the bias,
    and the curve's permutation and inverse (int64). A launch over all the
    references at once holds these for every row, which is what the budget
    must bound: they are several times the references' own size.
    """
    operand = split_form_width(d, True) or -(-(d + 1) // ROW_ALIGN) * ROW_ALIGN
    return 4 * ((d + 1) + operand + 1) + 16


# fewest references per launch when the budget is small: narrower launches cost more in
# launches and candidate merges than the memory they save
_FUSED_MIN_LAUNCH_ROWS = 1 << 16


def exact_tiles_apply(metric: Metric, dtype: torch.dtype, k: int, n_ref: int, d: int) -> bool:
    """Whether a Triton search selects from exact score tiles (:func:`_exact_tile_topk`).

    For k beyond the fused kernel's register budget, at few features (where the
    exact form is as cheap as a tile product), float32, and at least k + 2
    references (k + 1 left after excluding a query itself).
    """
    return (metric.name in EXACT_TILE_METRICS and dtype == torch.float32 and 0 < d <= EXACT_TILE_MAX_FEATURES
            and k >= EXACT_TILES_MIN_K and n_ref >= k + 2 and fused_unsupported(metric, dtype, k, n_ref) is not None)


# Smallest k for exact tiles (beyond the fused kernel's budget anyway); a knob for same-run A/B
# timings against the candidate path: the threshold selection measured faster from k = 256
# (slightly, at 32,768^2, d = 8) to k = 2048 (twice as fast) (BENCHMARKS.md)
EXACT_TILES_MIN_K = 256


def _scores_directly(metric: Metric, d: int) -> bool:
    """Whether the fused kernel scores this search by direct differences (see ``DIRECT_L2_MAX_FEATURES``)."""
    return not metric.uses_matmul or (metric.name in ("euclidean", "sqeuclidean") and d <= DIRECT_L2_MAX_FEATURES)


# At this many features or fewer the fused kernel scores L2 by direct differences, whose error
# is relative to the distance itself. The tile form's error grows with |x|^2 + max |y|^2:
# all-kNN of 1M 2-d Gaussian points failed that certificate on 65-94 % of the rows (k-th
# squared distances ~1e-5 against a bound ~4e-5), and the torch retries took seconds.
DIRECT_L2_MAX_FEATURES = 3
