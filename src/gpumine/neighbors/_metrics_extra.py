"""The metrics scikit-learn users reach for beyond the kNN engine's, searched by exact float64 brute force.

The kNN engine (:mod:`gpumine.neighbors.engine`) certifies fast tile scores
against exact ones for euclidean, sqeuclidean, manhattan, chebyshev,
minkowski, cosine and inner product. The metrics here have no such bound
worth having, so every (query, reference) pair is scored exactly in float64,
a block of query rows at a time (see
:func:`gpumine.neighbors._precomputed.blocked_kneighbors`), with torch on the
data's device. Each is scikit-learn's ``NearestNeighbors(algorithm="brute",
metric=...)`` definition:

================  ======================================================================
``seuclidean``    ``sqrt(sum_j (x_j - y_j)^2 / V_j)``; ``metric_params={"V": variances}``
``mahalanobis``   ``sqrt((x - y)^T VI (x - y))``; ``{"VI": inverse covariance}`` or
                  ``{"V": covariance}`` (inverted once, as scikit-learn's BallTree); a
                  negative form (VI not positive semi-definite, with a warning) is NaN
``haversine``     great-circle distance on the unit sphere of (latitude, longitude) in
                  radians: ``2 arcsin(sqrt(sin^2(dlat/2) + cos lat1 cos lat2 sin^2(dlon/2)))``
``correlation``   ``1 - cos`` of the rows centred on their own means (SciPy's; NaN for a
                  constant row)
``canberra``      ``sum_j |x_j - y_j| / (|x_j| + |y_j|)``, terms with a zero denominator left out
``braycurtis``    ``sum_j |x_j - y_j| / sum_j |x_j + y_j|`` (0 when the denominator is 0)
``hamming``       the fraction of features that differ
``nan_euclidean`` scikit-learn's ``nan_euclidean_distances``: NaN features are left out and
                  the squared sum is scaled by ``n_features / n_present`` (NaN when no
                  feature is present in both rows)
boolean           ``jaccard``, ``dice``, ``rogerstanimoto``, ``russellrao``, ``sokalsneath``,
                  ``yule``: SciPy's definitions on ``x != 0`` (scikit-learn converts the data
                  to booleans for them, with a ``DataConversionWarning``)
callable          ``metric(a, b, **metric_params) -> float`` called on every pair of 1-D
                  NumPy rows, on the host (as scikit-learn's brute force)
DistanceMetric    a :class:`sklearn.metrics.DistanceMetric` instance, its ``pairwise`` on
                  the host
================  ======================================================================

Distances are ranked in float64 and equal values fall to the lower reference
index (the project's tie rule); NaN distances rank after every number, as
NumPy's sort puts them. Where scikit-learn ranks a reduced form (the squared
sum of seuclidean, mahalanobis and nan_euclidean, haversine's ``sin^2`` sum)
so does this module, and reports the distance of it. Per-feature sums run
feature by feature, left to right, as scikit-learn's ``DistanceMetric`` loops.

Cost: O(queries x references x features) arithmetic (mahalanobis: times
features again), in blocks of ``working_memory``; no queries x references
matrix is built beyond one block.
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np
import torch

from ..core.distance import sqrt_rounded

__all__ = [
    "EXTRA_METRICS",
    "BOOLEAN_METRICS",
    "ExtraMetricForm",
    "check_backend",
    "check_extra_params",
    "check_tree_algorithm",
    "extra_kneighbors",
    "is_extra_metric",
    "make_extra_form",
    "metric_label",
    "warn_boolean_conversion",
]

BOOLEAN_METRICS = ("jaccard", "dice", "rogerstanimoto", "russellrao", "sokalsneath", "yule")
EXTRA_METRICS = ("seuclidean", "mahalanobis", "haversine", "correlation", "canberra", "braycurtis", "hamming",
                 "nan_euclidean") + BOOLEAN_METRICS

# scikit-learn's trees take these of the metrics above (sklearn.neighbors.VALID_METRICS); an explicit
# algorithm="kd_tree"/"ball_tree" with another one raises there, and here, though the search is brute force
# whatever the algorithm
_TREE_METRICS = {
    "ball_tree": {"seuclidean", "mahalanobis", "haversine", "canberra", "braycurtis", "hamming", "jaccard", "dice",
                  "rogerstanimoto", "russellrao", "sokalsneath"},
    "kd_tree": set(),
}

# The keys each metric takes from metric_params (seuclidean needs V; mahalanobis one of VI and V)
_PARAMS = {"seuclidean": ("V",), "mahalanobis": ("VI", "V")}

# Bytes per (query, reference) entry of a block, temporaries included: blocked_kneighbors sizes its blocks by it
_ENTRY_BYTES = 8 * 6


def is_extra_metric(metric) -> bool:
    """Whether ``metric`` is searched here: a name of :data:`EXTRA_METRICS`, a callable or a DistanceMetric."""
    if isinstance(metric, str):
        return metric in EXTRA_METRICS
    return callable(metric) or _is_distance_metric(metric)


def _is_distance_metric(metric) -> bool:
    try:
        from sklearn.metrics import DistanceMetric
    except ImportError:  # pragma: no cover - scikit-learn is a dependency of the estimators
        return False
    return isinstance(metric, DistanceMetric)


def metric_label(metric) -> str:
    """A name for messages: the string, or the callable's or DistanceMetric's class name."""
    if isinstance(metric, str):
        return metric
    return getattr(metric, "__name__", type(metric).__name__)


def check_tree_algorithm(metric, algorithm: str) -> None:
    """scikit-learn's errors for a tree ``algorithm`` its trees cannot run ``metric`` with."""
    if callable(metric) and not isinstance(metric, str):
        if algorithm == "kd_tree":
            raise ValueError(f"kd_tree does not support callable metric '{metric}'Function call overhead will result"
                             "in very poor performance.")
        return
    if isinstance(metric, str) and algorithm in _TREE_METRICS and metric not in _TREE_METRICS[algorithm]:
        raise ValueError(f"Metric '{metric}' not valid. Use sorted(sklearn.neighbors.VALID_METRICS['{algorithm}']) "
                         "to get valid options. Metric can also be a callable function.")


# -- metric_params ----------------------------------------------------------------------------
def _float_array(value, key: str, metric: str):
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"metric_params['{key}'] of metric='{metric}' must be an array of numbers; got "
                         f"{type(value).__name__}") from None
    if not np.isfinite(array).all():
        raise ValueError(f"metric_params['{key}'] of metric='{metric}' contains NaN or infinity; pass finite values")
    return array


def _check_variances(V, n_features: int) -> np.ndarray:
    V = _float_array(V, "V", "seuclidean")
    if V.ndim != 1 or V.shape[0] != n_features:
        raise ValueError(f"metric_params['V'] of metric='seuclidean' must hold one variance per feature, shape "
                         f"({n_features},); got shape {V.shape}")
    if (V <= 0).any():
        raise ValueError(f"metric_params['V'] of metric='seuclidean' must hold positive variances; got "
                         f"{V[V <= 0][0]!r} at feature {int(np.flatnonzero(V <= 0)[0])}")
    return V


def _check_inverse_covariance(params: dict, n_features: int) -> np.ndarray:
    given = [key for key in ("VI", "V") if key in params]
    if len(given) != 1:
        raise ValueError("metric='mahalanobis' needs exactly one of metric_params['VI'] (the inverse covariance "
                         "matrix) or metric_params['V'] (the covariance matrix, inverted once); got "
                         f"{sorted(params) or 'neither'}")
    key = given[0]
    M = _float_array(params[key], key, "mahalanobis")
    if M.shape != (n_features, n_features):
        raise ValueError(f"metric_params['{key}'] of metric='mahalanobis' must be a square matrix of shape "
                         f"({n_features}, {n_features}) (one row and column per feature); got shape {M.shape}")
    if key == "V":
        try:
            M = np.linalg.inv(M)
        except np.linalg.LinAlgError:
            raise ValueError("metric_params['V'] of metric='mahalanobis' is singular and cannot be inverted; pass "
                             "the inverse covariance as metric_params['VI'] (np.linalg.pinv(V)) instead") from None
    # scikit-learn and SciPy take any matrix; a form with a negative direction gives pairs a negative squared
    # distance, whose distance is NaN there and here: say so once rather than leave it to be found
    lowest = float(np.linalg.eigvalsh((M + M.T) / 2.0).min()) if n_features else 0.0
    scale = float(np.abs(M).max()) if M.size else 0.0
    if lowest < -1e-10 * max(scale, 1e-300):
        warnings.warn(f"metric_params['{key}'] of metric='mahalanobis' is not positive semi-definite (smallest "
                      f"eigenvalue {lowest:.3g}): pairs whose quadratic form is negative get NaN distances, ranked "
                      "last (as SciPy's); pass a covariance matrix or its inverse", UserWarning, stacklevel=5)
    return M


def check_extra_params(metric, params: dict) -> dict:
    """The metric_params ``metric`` accepts, before the data is seen: unknown keys raise, naming them."""
    if callable(metric) and not isinstance(metric, str):
        return dict(params)  # passed to the callable as keyword arguments, as scikit-learn does
    label = metric_label(metric)
    allowed = _PARAMS.get(metric, ()) if isinstance(metric, str) else ()
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        takes = (f"takes only {', '.join(repr(a) for a in allowed)}" if allowed else "takes none")
        raise ValueError(f"metric_params {unknown} are not supported with metric={label!r}: it {takes} (and 'p', "
                         "which only minkowski uses)")
    if metric == "seuclidean" and "V" not in params:
        raise ValueError("metric='seuclidean' needs metric_params={'V': variances}: one positive variance per "
                         "feature (e.g. np.var(X, axis=0, ddof=1))")
    if metric == "mahalanobis" and not ("VI" in params or "V" in params):
        raise ValueError("metric='mahalanobis' needs metric_params={'VI': inverse covariance} (e.g. "
                         "np.linalg.inv(np.cov(X.T))) or {'V': covariance}")
    return dict(params)


def make_extra_form(metric, params: dict | None, n_features: int, *, budget_bytes: int = 64 * 2**20):
    """The exact scorer of ``metric`` for data of ``n_features`` columns, its parameters checked."""
    params = check_extra_params(metric, dict(params or {}))
    if isinstance(metric, str):
        if metric == "seuclidean":
            return ExtraMetricForm(metric, {"V": _check_variances(params["V"], n_features)}, budget_bytes)
        if metric == "mahalanobis":
            return ExtraMetricForm(metric, {"VI": _check_inverse_covariance(params, n_features)}, budget_bytes)
        if metric == "haversine" and n_features != 2:
            raise ValueError(f"Haversine distance only valid in 2 dimensions: pass (latitude, longitude) in radians; "
                             f"got {n_features} features")
        return ExtraMetricForm(metric, {}, budget_bytes)
    return ExtraMetricForm(metric, params, budget_bytes)


# -- the scorer ---------------------------------------------------------------------------------
class ExtraMetricForm:
    """Exact float64 ``rdist`` blocks of one metric, and the distances they stand for.

    The interface of :class:`gpumine.neighbors._precomputed.MinkowskiForm`:
    ``rdist(Q, R)`` gives the (len(Q), len(R)) float64 ranking values on
    ``Q``'s device, ``to_distance`` the reported distances (NaN kept).
    """

    entry_bytes = _ENTRY_BYTES

    def __init__(self, metric, params: dict, budget_bytes: int = 64 * 2**20):
        self.metric = metric
        self.params = params
        self.budget_bytes = int(budget_bytes)
        self.name = metric if isinstance(metric, str) else None
        self._cache = {}

    @property
    def allows_nan(self) -> bool:
        """Whether the data may hold NaN (nan_euclidean only)."""
        return self.name == "nan_euclidean"

    @property
    def on_host(self) -> bool:
        """Callables and DistanceMetric objects run on the host, whatever the device."""
        return self.name is None

    def _param(self, key: str, device: torch.device) -> torch.Tensor:
        found = self._cache.get((key, device))
        if found is None:
            found = torch.as_tensor(self.params[key], dtype=torch.float64, device=device)
            self._cache[(key, device)] = found
        return found

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_cache"] = {}  # device tensors stay behind: a pickle loads anywhere
        return state

    # -- ranking values ----------------------------------------------------------------
    def rdist(self, Q: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
        """float64 ``(len(Q), len(R))`` ranking values (reduced distances where scikit-learn ranks those)."""
        if self.on_host:
            return self._host(Q, R)
        q = Q.to(torch.float64)
        r = R.to(device=q.device, dtype=torch.float64)
        name = self.name
        if name in BOOLEAN_METRICS:
            return self._boolean(q, r)
        if name == "correlation":
            return self._correlation(q, r)
        if name == "mahalanobis":
            return self._mahalanobis(q, r)
        if name == "haversine":
            return self._haversine(q, r)
        return self._by_feature(q, r)

    def to_distance(self, rdist: torch.Tensor) -> torch.Tensor:
        if self.name in ("seuclidean", "mahalanobis", "nan_euclidean"):
            return sqrt_rounded(rdist)
        if self.name == "haversine":
            return 2.0 * torch.arcsin(torch.sqrt(rdist))
        return rdist

    def _by_feature(self, q: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """Sums over features, one feature at a time, left to right (scikit-learn's DistanceMetric order)."""
        name = self.name
        shape = (q.shape[0], r.shape[0])
        acc = torch.zeros(shape, dtype=torch.float64, device=q.device)
        d = q.shape[1]
        if name == "seuclidean":
            V = self._param("V", q.device)
            for j in range(d):
                diff = q[:, j, None] - r[None, :, j]
                acc += diff * diff / V[j]
            return acc
        if name == "canberra":
            for j in range(d):
                x, y = q[:, j, None], r[None, :, j]
                denom = x.abs() + y.abs()
                term = (x - y).abs() / denom
                acc += torch.where(denom > 0, term, torch.zeros_like(term))
            return acc
        if name == "braycurtis":
            denom = torch.zeros_like(acc)
            for j in range(d):
                x, y = q[:, j, None], r[None, :, j]
                acc += (x - y).abs()
                denom += (x + y).abs()
            return torch.where(denom > 0, acc / torch.where(denom > 0, denom, torch.ones_like(denom)),
                               torch.zeros_like(acc))
        if name == "hamming":
            for j in range(d):
                acc += q[:, j, None] != r[None, :, j]
            return acc / d
        if name == "nan_euclidean":
            present = torch.zeros_like(acc)
            for j in range(d):
                x, y = q[:, j, None], r[None, :, j]
                both = ~(torch.isnan(x) | torch.isnan(y))
                diff = torch.where(both, x - y, torch.zeros((), dtype=torch.float64, device=q.device))
                acc += diff * diff
                present += both
            scaled = acc * (d / torch.where(present > 0, present, torch.ones_like(present)))
            return torch.where(present > 0, scaled, torch.full_like(scaled, math.nan))
        raise ValueError(f"unknown metric {name!r}")  # pragma: no cover - names are checked first

    def _boolean(self, q: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """SciPy's boolean dissimilarities from exact integer counts (0/1 products are exact in float64)."""
        a = (q != 0).to(torch.float64)
        b = (r != 0).to(torch.float64)
        n = float(q.shape[1])
        ntt = a @ b.T
        ntf = a.sum(1, keepdim=True) - ntt
        nft = b.sum(1)[None, :] - ntt
        nff = n - ntt - ntf - nft
        differ = ntf + nft
        name = self.name
        if name == "jaccard":
            denom = ntt + differ
            return torch.where(denom > 0, differ / torch.where(denom > 0, denom, torch.ones_like(denom)),
                               torch.zeros_like(denom))
        if name == "dice":
            return differ / (2.0 * ntt + differ)  # 0 / 0 is NaN, as SciPy's
        if name == "rogerstanimoto":
            return 2.0 * differ / (ntt + nff + 2.0 * differ)
        if name == "russellrao":
            return (n - ntt) / n
        if name == "sokalsneath":
            return 2.0 * differ / (ntt + 2.0 * differ)  # 0 / 0 is NaN, as SciPy's
        half = ntf * nft  # yule
        return torch.where(half > 0, 2.0 * half / (ntt * nff + half), torch.zeros_like(half))

    @staticmethod
    def _correlation(q: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """SciPy's: cosine distance of the rows centred on their own means, the cosine clipped to [-1, 1]."""
        qc = q - q.mean(1, keepdim=True)
        rc = r - r.mean(1, keepdim=True)
        dot = qc @ rc.T
        norms = torch.sqrt((qc * qc).sum(1))[:, None] * torch.sqrt((rc * rc).sum(1))[None, :]
        cos = (dot / norms).clamp(-1.0, 1.0)  # clamp keeps NaN (a constant row), as SciPy
        return 1.0 - cos

    def _mahalanobis(self, q: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """``delta^T VI delta`` per pair, references in chunks that keep the (rows, refs, features) terms in budget."""
        VI = self._param("VI", q.device)
        d = q.shape[1]
        out = torch.empty((q.shape[0], r.shape[0]), dtype=torch.float64, device=q.device)
        step = max(1, self.budget_bytes // max(1, 3 * 8 * d * max(1, q.shape[0])))
        for start in range(0, r.shape[0], step):
            delta = q[:, None, :] - r[None, start : start + step, :]
            out[:, start : start + step] = (delta * (delta @ VI.T)).sum(-1)
        # a negative form has no square root: NaN, ranked last, as SciPy's sqrt gives
        return out.masked_fill_(out < 0, math.nan)

    def _haversine(self, q: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        if q.shape[1] != 2 or r.shape[1] != 2:
            raise ValueError("Haversine distance only valid in 2 dimensions: pass (latitude, longitude) in radians; "
                             f"got {q.shape[1]} features")
        sin_lat = torch.sin(0.5 * (q[:, 0, None] - r[None, :, 0]))
        sin_lon = torch.sin(0.5 * (q[:, 1, None] - r[None, :, 1]))
        return sin_lat * sin_lat + torch.cos(q[:, 0, None]) * torch.cos(r[None, :, 0]) * sin_lon * sin_lon

    def _host(self, Q: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
        """Callables and DistanceMetric objects: NumPy rows on the host, the block back on ``Q``'s device."""
        q = Q.detach().cpu().numpy()
        r = R.detach().cpu().numpy()
        metric = self.metric
        if _is_distance_metric(metric):
            dtype = np.float32 if type(metric).__name__.endswith("32") else np.float64
            block = np.asarray(metric.pairwise(q.astype(dtype, copy=False), r.astype(dtype, copy=False)),
                               dtype=np.float64)
        else:
            block = np.empty((q.shape[0], r.shape[0]))
            kwargs = self.params
            for i in range(q.shape[0]):
                row = q[i]
                for j in range(r.shape[0]):
                    value = metric(row, r[j], **kwargs)
                    if not isinstance(value, numbers.Real) and np.ndim(value) != 0:
                        raise ValueError(f"the callable metric {metric_label(metric)!r} must return one number per "
                                         f"pair of rows; got {type(value).__name__} of shape {np.shape(value)}")
                    block[i, j] = value
        return torch.from_numpy(block).to(Q.device)


def warn_boolean_conversion(metric, X) -> None:
    """scikit-learn's DataConversionWarning when a boolean metric gets data that is not boolean."""
    if metric not in BOOLEAN_METRICS:
        return
    dtype = getattr(X, "dtype", None)
    if dtype is not None and (dtype == np.bool_ or dtype == torch.bool):
        return
    from sklearn.exceptions import DataConversionWarning

    warnings.warn(f"Data was converted to boolean for metric {metric}", DataConversionWarning, stacklevel=4)


def check_backend(backend, metric) -> None:
    """An explicit ``backend="triton"`` cannot be met: these metrics have no kernel."""
    if backend == "triton":
        raise ValueError(f"backend='triton' has no kernel for metric={metric_label(metric)!r} (an exact float64 brute "
                         "force with torch); use backend='auto' or 'torch'")


def extra_kneighbors(ref: torch.Tensor, query: torch.Tensor, k: int, form: ExtraMetricForm, *, exclude_self: bool,
                     device: torch.device, budget_bytes: int):
    """The k nearest references of each query under ``form``: ``(distances, indices)`` on ``device``.

    Distances come back in the data's dtype (float32 data: the float64 distance rounded once), indices int64,
    each row ordered by (distance, index) with NaN last.
    """
    from ._precomputed import blocked_kneighbors

    ref_d = ref.to(device)
    dist, index = blocked_kneighbors(query.shape[0], ref.shape[0], k,
                                     lambda a, b: form.rdist(query[a:b].to(device), ref_d),
                                     exclude_self=exclude_self, budget_bytes=budget_bytes,
                                     to_distance=form.to_distance, entry_bytes=form.entry_bytes)
    return dist.to(device=device, dtype=ref.dtype), index.to(device)
