"""Top-n distance-based outliers (Angiulli et al., GPU SolvingSet): brute force on the kNN engine, and SolvingSet.

The weight of a point p is the sum of the distances from p to its k nearest
neighbours (Angiulli & Pizzuti); the top-n outliers are the n points of largest
weight, ties going to the lower index.

**Is p its own neighbour?** The seed paper counts p as its own first neighbour
at distance 0 (``include_self=True``): its weight is then the sum over the
k - 1 nearest *other* points. scikit-learn, PyOD (``KNN(method="mean")`` times
k, or ``method="largest"`` for the k-th distance alone) and ELKI exclude p and
sum over its k nearest other points; that is the default here
(``include_self=False``). Exact duplicates of p are other points: they count,
at distance 0.

Weights are accumulated in float64 from canonical per-pair distances (see
:mod:`gpumine.outliers._weights`), so both methods give bit-identical weights
for the same neighbour sets, equal to a float64 reference up to float64
rounding. The brute-force neighbour *sets* come from the float32 kNN engine:
they can differ from float64 ones only where two distances lie within float32
rounding of each other, and so can the weights (by about that much).
"""

from __future__ import annotations

import numbers
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..utils._validation import check_array, output_kind, to_output
from ..config import resolve_backend, resolve_device, working_memory_bytes
from ..core.select import topk_smallest
from ..core.tiles import fits_on_device
from ..neighbors.engine import choose_backend
from ._canonical_knn import canonical_knn
from ._solving_set import SolvingSetTimeout, auto_candidates, solving_set
from ._solving_set_engine import solving_set_on_engine
from ._weights import PairSpace, resolve_metric

__all__ = ["top_n_outliers", "DistanceOutliers", "METHODS", "SolvingSetTimeout"]

METHODS = ("auto", "solving_set", "brute_force")

#: ``method="auto"`` runs brute force (one all-kNN search on the engine) on a device of this type up
#: to ``max_rows`` rows of at most ``max_features`` features (None: any), or at any size up to
#: ``few_features`` features; SolvingSet otherwise. On a GPU a SolvingSet iteration is two engine
#: searches and a few host waits, which small data sets cannot repay: brute force was faster on 35
#: of the 37 ADBench sets up to 49,534 rows (the other two within 4 %), SolvingSet on the three sets
#: measured above it (smtp, skin, cover). On the CPU the host engine's KD-tree makes brute force
#: fast at few features (donors, cover, skin, mammography), and its products at small sizes; SolvingSet
#: computes far fewer distances on large sets of more features (ALOI, campaign, InternetAds)
#: (BENCHMARKS.md, "Design measurements quoted in the code").
AUTO_BRUTE_FORCE = {
    "cuda": {"max_rows": 65536, "max_features": None, "few_features": None},
    "cpu": {"max_rows": 16384, "max_features": 32, "few_features": 10},
}


@dataclass
class DistanceOutliers:
    """Result of :func:`top_n_outliers`.

    Array fields come back in the caller's kind (NumPy in, NumPy out; a torch
    tensor in, a tensor on its device out).

    Attributes
    ----------
    indices : (n_outliers,) int64
        Row numbers of the top-n outliers, largest weight first; equal
        weights in ascending index order.
    weights : (n_outliers,) float64
        Their weights (sums of true distances, not squared).
    solving_set : (n_solving,) int64
        Indices of the solving set, in the order the points became candidates
        (``method="brute_force"``: every row, as the whole data set is
        trivially a solving set).
    scores : (n_samples,) float64
        Every point's weight where ``scores_exact``; elsewhere an upper bound
        that is below ``threshold`` (the solving set never needs those weights
        exactly). All exact with brute force.
    scores_exact : (n_samples,) bool
    threshold : float
        The weight of the n-th outlier (the paper's w*).
    iterations : int
        SolvingSet iterations (1 for brute force).
    distances_computed : int
        Point pairs whose distance was computed (each unordered pair once).
    distance_fraction : float
        ``distances_computed / (n (n - 1) / 2)`` (brute force: 1.0; the seed
        measured 0.04 %-6.8 % for SolvingSet).
    """

    indices: object
    weights: object
    solving_set: object
    scores: object
    scores_exact: object
    threshold: float
    method: str
    n_neighbors: int
    include_self: bool
    metric: str
    n_samples: int
    n_candidates: int | None
    iterations: int
    distances_computed: int
    distance_fraction: float
    seconds: float
    device: str
    stats: dict = field(default_factory=dict)
    """Extra counters: SolvingSet's ``rows_recomputed`` (tile rows re-done in the canonical form by the
    dense merge), ``sparse_tiles`` (tiles merged through their few pairs below the heaps' k-th scores) and
    ``trace`` (per iteration: candidates, active and inactive points, live candidates at the end,
    cutoff); brute force's kNN ``engine`` statistics."""

    def summary(self) -> str:
        """One line: what was found and what it cost."""
        what = (
            f"{self.method}: top {len(self.indices)} of {self.n_samples:,} points "
            f"(k={self.n_neighbors}, include_self={self.include_self}, metric={self.metric})"
        )
        cost = (
            f"{len(self.solving_set):,} solving-set points in {self.iterations} iteration(s), "
            if self.method == "solving_set" else ""
        )
        return (
            f"{what}: {cost}{self.distances_computed:,} distances "
            f"({100 * self.distance_fraction:.3g} % of all pairs), {self.device}, {self.seconds:.3f} s"
        )


# -- validation shared with the estimator and the CLI ----------------------------------------
def check_method(method) -> str:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}; got {method!r}")
    return method


def resolve_method(method: str, device: torch.device, n_samples: int, n_features: int) -> str:
    """The method that runs: ``method`` itself, or for ``"auto"`` the one :data:`AUTO_BRUTE_FORCE` picks."""
    if method != "auto":
        return method
    rule = AUTO_BRUTE_FORCE.get(device.type)
    if rule is None:
        return "solving_set"
    few = rule["few_features"] is not None and n_features <= rule["few_features"]
    small = n_samples <= rule["max_rows"] and (rule["max_features"] is None or n_features <= rule["max_features"])
    return "brute_force" if few or small else "solving_set"


def check_include_self(include_self) -> bool:
    if not isinstance(include_self, (bool, np.bool_)):
        raise TypeError(f"include_self must be True or False; got {include_self!r}")
    return bool(include_self)


def effective_k(k, n_samples: int, include_self: bool, name: str = "k") -> int:
    """Neighbours other than the point itself that a weight sums (k, or k - 1 with include_self)."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer; got {k!r} of type {type(k).__name__}")
    k = int(k)
    if k < 1:
        raise ValueError(f"{name} must be at least 1; got {name} = {k}")
    if include_self and k == 1:
        raise ValueError(
            f"{name} = 1 with include_self=True makes every weight 0 (the only neighbour is the point "
            f"itself); use {name} >= 2, or include_self=False"
        )
    k_other = k - 1 if include_self else k
    if k_other > n_samples - 1:
        limit = n_samples if include_self else n_samples - 1
        raise ValueError(
            f"Expected {name} <= {limit} (n_samples{'' if include_self else ' - 1'}), but {name} = {k} and "
            f"n_samples = {n_samples}: a weight needs {k_other} other point(s); lower {name} or add data"
        )
    return k_other


def check_n_outliers(n_outliers, n_samples: int) -> int:
    if isinstance(n_outliers, bool) or not isinstance(n_outliers, numbers.Integral):
        raise TypeError(f"n_outliers must be a positive integer; got {n_outliers!r} of type {type(n_outliers).__name__}")
    n_outliers = int(n_outliers)
    if not 1 <= n_outliers <= n_samples:
        raise ValueError(
            f"n_outliers must be between 1 and n_samples = {n_samples}; got n_outliers = {n_outliers}"
        )
    return n_outliers


def check_candidates(n_candidates, device: torch.device, n_samples: int, n_features: int | None = None,
                     k: int | None = None) -> int:
    """Candidates per SolvingSet iteration; ``"auto"`` follows :func:`auto_candidates` (by device and,
    when given, the number of features and the form that ``k`` neighbours run in)."""
    if isinstance(n_candidates, str) and n_candidates == "auto":
        form = solving_set_form(device, n_features, k) if n_features is not None and k is not None else "tiles"
        return auto_candidates(device, n_samples, n_features, form)
    if isinstance(n_candidates, bool) or not isinstance(n_candidates, numbers.Integral) or n_candidates < 1:
        raise ValueError(f"n_candidates must be 'auto' or a positive integer; got {n_candidates!r}")
    return int(min(n_candidates, n_samples))


def seed_from(random_state) -> int:
    """An integer seed from ``random_state`` (int, None for fresh entropy, or a NumPy generator)."""
    if random_state is None:
        return int(np.random.SeedSequence().entropy % 2**63)
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        return int(random_state) % 2**63
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(2**31 - 1))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(2**63 - 1))
    raise TypeError(f"random_state must be None, an int or a NumPy random generator; got {random_state!r}")


def engine_backend(backend, device, metric, dtype, k, n_ref) -> str:
    """The kNN engine's kernel for one search (Triton where it applies under 'auto')."""
    return choose_backend(backend, device, metric, dtype, k, n_ref)


# -- the two methods on tensors -----------------------------------------------------------------
def brute_force_weights(X: torch.Tensor, space: PairSpace, k_other: int, *, device, budget, verbose, backend, stats=None):
    """Exact weights of every point: all-kNN on the engine, re-ranked by canonical float64 distances."""
    scores = canonical_knn(X, space, k_other, device=device, budget_bytes=budget, verbose=verbose, backend=backend,
                           stats=stats)
    return space.weight(scores)


def weights_against(ref_X: torch.Tensor, ref_space: PairSpace, queries: torch.Tensor, k_other: int, *, device, budget,
                    verbose, backend) -> torch.Tensor:
    """Weights of new points against a reference set (their ``k_other`` nearest reference points)."""
    if queries.shape[0] == 0:
        return torch.empty(0, dtype=torch.float64, device=device)
    scores = canonical_knn(ref_X, ref_space, k_other, queries=queries, device=device, budget_bytes=budget,
                           verbose=verbose, backend=backend)
    return ref_space.weight(scores)


def top_n_from_weights(weights: torch.Tensor, n_outliers: int):
    """Indices and weights of the ``n_outliers`` largest weights, ties to the lower index."""
    _, idx = topk_smallest(-weights[None, :], n_outliers)
    idx = idx[0]
    return idx, weights.index_select(0, idx)


#: How SolvingSet compares candidates with points, per device type: on engine searches (two kNN
#: searches per iteration, on the fused float32 kernel on a GPU:
#: :mod:`~gpumine.outliers._solving_set_engine`) from this many features on, or at any dimension
#: up to :data:`SOLVING_SET_ENGINE_MAX_K` neighbours; otherwise (and where ``None``) by float64 tiles
#: merged pair by pair with pruning (:mod:`~gpumine.outliers._solving_set`). The same top-n and
#: weights either way. Measured (BENCHMARKS.md, "Design measurements quoted in the code"): the
#: engine form won at k = 5 on every set (cover, Poker, G2d, G3d) and at k = 50 on cover (d = 10);
#: the tiles won at k = 50 in two or three dimensions, where a few candidates prune nearly every
#: point and the tile form's float64 merges cost less than the kernel's k-selection.
SOLVING_SET_ENGINE_MIN_FEATURES = {"cuda": 4, "cpu": None}
SOLVING_SET_ENGINE_MAX_K = 16


def solving_set_form(device: torch.device, n_features: int, k: int) -> str:
    """``"engine"`` or ``"tiles"``: how SolvingSet runs (see :data:`SOLVING_SET_ENGINE_MIN_FEATURES`)."""
    least = SOLVING_SET_ENGINE_MIN_FEATURES.get(device.type)
    if least is None:
        return "tiles"
    return "engine" if n_features >= least or k <= SOLVING_SET_ENGINE_MAX_K else "tiles"


def check_solving_set_backend(backend, device: torch.device, n_features: int, k: int) -> None:
    """Refuse ``backend='triton'`` where SolvingSet runs in the tile form (no Triton kernel there)."""
    resolve_backend(backend, device, has_triton_kernel=solving_set_form(device, n_features, k) == "engine")


def run(X: torch.Tensor, n_outliers: int, k_other: int, *, method: str, n_candidates: int, metric, seed: int,
        device: torch.device, budget: int, backend, verbose=None, deadline=None, form_override=None) -> dict:
    """Both methods on a validated tensor; returns a dict of tensors on ``device`` and statistics.

    ``form_override`` (``"engine"`` or ``"tiles"``) overrides :func:`solving_set_form`.
    """
    n = X.shape[0]
    Xd = X.to(device)
    # brute force reads canonical pairs only: no tile form (its preparation waits on the device twice)
    space = PairSpace(Xd, metric, tiles=method != "brute_force")
    if method == "brute_force":
        eb = engine_backend(backend, device, metric, X.dtype, k_other, n)
        engine_stats: dict = {}
        weights = brute_force_weights(Xd, space, k_other, device=device, budget=budget, verbose=verbose,
                                      backend=eb, stats=engine_stats)
        idx, w = top_n_from_weights(weights, n_outliers)
        return {
            "top_indices": idx, "top_weights": w,
            "solving_set": torch.arange(n, device=device), "scores": weights,
            "scores_exact": torch.ones(n, dtype=torch.bool, device=device),
            "threshold": float(w[-1]), "iterations": 1, "distances": n * (n - 1) // 2,
            "engine": engine_stats, "space": space, "X": Xd,
        }
    form = form_override or solving_set_form(device, X.shape[1], k_other)
    if form == "engine":
        out = solving_set_on_engine(Xd, space, k_other, n_outliers, n_candidates, seed=seed, budget_bytes=budget,
                                    backend=engine_backend(backend, device, metric, X.dtype, k_other + 1, n),
                                    verbose=verbose, deadline=deadline)
    else:
        out = solving_set(space, k_other, n_outliers, n_candidates, seed=seed, budget_bytes=budget, verbose=verbose,
                          deadline=deadline)
    out["form"] = form
    out.update(space=space, X=Xd)
    return out


def _check_space_fits(n: int, d: int, k_other: int, device: torch.device) -> None:
    need = n * (8 * k_other + 8 * (3 * d + 6) + 24)
    if device.type == "cuda" and not fits_on_device(need, device, fraction=0.8):
        raise ValueError(
            f"the solving set keeps per-point k-NN heaps and the data in float64 on {device} "
            f"({need / 2**30:.1f} GiB for n={n}, d={d}, k={k_other}), more than the GPU has free; "
            "use method='brute_force' (which streams the data) or device='cpu'"
        )


def top_n_outliers(
    X,
    n_outliers: int = 10,
    k: int = 5,
    *,
    method: str = "auto",
    n_candidates="auto",
    include_self: bool = False,
    metric: str = "euclidean",
    p: float | None = None,
    random_state=0,
    device=None,
    backend=None,
    working_memory=None,
    verbose=None,
) -> DistanceOutliers:
    """The top-n distance-based outliers: the n points with the largest sum of distances to their k nearest neighbours.

    Parameters
    ----------
    X : array-like or torch.Tensor of shape (n_samples, n_features)
    n_outliers : int, default 10
        How many outliers (the paper's n).
    k : int, default 5
        Neighbours per weight.
    method : {"auto", "solving_set", "brute_force"}, default "auto"
        ``"solving_set"``: SolvingSet (Angiulli, Basta & Pizzuti 2006), which
        computes a small fraction of all distances and returns a solving set
        that predicts outliers among new points (see
        :class:`DistanceOutlierDetector`). ``"brute_force"``: the exact
        all-kNN engine over every pair, then the n largest weights. Both give
        the same outliers and weights. ``"auto"``: brute force on a GPU up to
        65,536 rows (where one search costs less than SolvingSet's
        iterations); on the CPU up to 16,384 rows of at most 32 features, or at
        any size up to 10 features; SolvingSet otherwise (see
        :data:`AUTO_BRUTE_FORCE`). The result's ``method`` says which ran.
    n_candidates : int or "auto", default "auto"
        Candidates per SolvingSet iteration (the paper's m = 100). ``"auto"``:
        256 for data of at most 3 features; otherwise 4096 on a GPU and 1024
        on the CPU (from a sweep over the paper's data sets: see
        :func:`gpumine.outliers._solving_set.auto_candidates`).
    include_self : bool, default False
        Count each point as its own first neighbour at distance 0, as the seed
        paper does (its weight then sums the k - 1 nearest other points).
        The default excludes it, as scikit-learn, PyOD and ELKI do.
    metric : str, default "euclidean"
        ``"euclidean"``, ``"sqeuclidean"``, ``"manhattan"``, ``"chebyshev"``,
        ``"minkowski"`` (with ``p``) or ``"cosine"``.
    p : float, optional
        Power for ``metric="minkowski"``.
    random_state : int, None or NumPy generator, default 0
        Seeds the first (random) candidates. Only the solving set and the
        statistics depend on it, never the outliers or weights.
    device, backend, working_memory, verbose
        See :mod:`gpumine.config`. The solving-set tiles run torch kernels;
        ``backend`` also steers the kNN engine used by brute force.

    Returns
    -------
    DistanceOutliers
        ``indices``, ``weights``, ``solving_set``, ``threshold`` and the
        statistics ``iterations``, ``distances_computed``, ``distance_fraction``.

    Notes
    -----
    SolvingSet keeps a k-NN heap per point (n x k float64) and the data in
    float64 on the device; brute force streams data larger than the GPU.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [0.1], [0.2], [0.3], [5.0]])
    >>> res = top_n_outliers(X, n_outliers=1, k=2, device="cpu")
    >>> res.indices, res.weights.round(2)
    (array([4]), array([9.5]))
    """
    Xt = check_array(X, name="X")
    kind = output_kind(X)
    n, d = Xt.shape
    method = check_method(method)
    include_self = check_include_self(include_self)
    metric_obj = resolve_metric(metric, p)
    if n < 2:
        raise ValueError(f"X has n_samples = {n}; distance-based outliers need at least 2 points")
    k_other = effective_k(k, n, include_self)
    n_outliers = check_n_outliers(n_outliers, n)
    dev = resolve_device(device)
    method = resolve_method(method, dev, n, d)
    budget = working_memory_bytes(working_memory, dev)
    seed = seed_from(random_state)
    m = None
    if method == "solving_set":
        check_solving_set_backend(backend, dev, d, k_other)
        m = check_candidates(n_candidates, dev, n, d, k_other)
        _check_space_fits(n, d, k_other, dev)
    else:
        check_candidates(n_candidates, dev, n)  # validated even when unused
    start = time.perf_counter()
    out = run(Xt, n_outliers, k_other, method=method, n_candidates=m or 1, metric=metric_obj, seed=seed,
              device=dev, budget=budget, backend=backend, verbose=verbose)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    seconds = time.perf_counter() - start
    pairs = n * (n - 1) // 2
    stats = {k_: v for k_, v in out.items() if k_ in ("rows_recomputed", "sparse_tiles", "engine", "trace", "form")}
    return DistanceOutliers(
        indices=to_output(out["top_indices"], kind),
        weights=to_output(out["top_weights"], kind),
        solving_set=to_output(out["solving_set"], kind),
        scores=to_output(out["scores"], kind),
        scores_exact=to_output(out["scores_exact"], kind),
        threshold=float(out["threshold"]),
        method=method,
        n_neighbors=int(k),
        include_self=include_self,
        metric=metric_obj.name,
        n_samples=n,
        n_candidates=m,
        iterations=int(out["iterations"]),
        distances_computed=int(out["distances"]),
        distance_fraction=out["distances"] / pairs,
        seconds=seconds,
        device=str(dev),
        stats=stats,
    )
