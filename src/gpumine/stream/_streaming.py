"""Streaming LOF: LOF_GPU (windows + a binned summary of the past) and plain sliding-window LOF.

Both detectors score a stream window by window. A window's points are scored
together with a *reference set* standing for the past:

* :class:`StreamingLOF` (LOF_GPU, Yu 2017) — the virtual points of a binned summary
  of everything seen (:class:`~gpumine.stream._binning.BinnedSummary`), with
  decay of bins the stream has left;
* :class:`SlidingWindowLOF` — the last ``history_size`` raw points (the
  baseline the seed compares with; ``history_size=0`` scores each window on
  its own).

Per window W with reference points V (all on the device):

1. all-kNN of R = W ∪ V (each point excluded from its own list) on the exact
   kNN engine; k = ``n_neighbors`` (fewer when R is smaller);
2. k-distances of all of R (the duplicates rule of
   :mod:`gpumine.outliers._lof` applies where a k-distance is 0);
3. lrd of every point of R from its reach-distances — the window's points'
   lrd is final; a virtual point v gets a *synthetic* lrd (below);
4. LOF of the window's points: mean lrd of their neighbours (window or
   virtual) over their own lrd (the seed's Eq. 3 erratum fixed: lrd(o)
   inside the sum);
5. threshold (:mod:`gpumine.stream._threshold`) and flags;
6. the past is updated with the window (summary update / history append).

A window of a few thousand points makes a hundred or more small launches after
its kNN search, which cost the host more than the GPU: on CUDA, steps 2-5 and
the summary's merge each replay as one CUDA graph once their shapes repeat
(:mod:`gpumine.utils._graph_replay`), with the same results bit for bit.

Synthetic lrd of a virtual point: the seed's Eq. 4 is ``alpha * log C``,
which is 0 for a bin of one point, negative once decay takes a count below
1, and has no length unit while lrd is 1/length. gpumine uses::

    lrd(v) = virtual_lrd_scale * lrd_ref * log(1 + C_v) / mean_bins log(1 + C)

``lrd_ref`` is the median lrd of the window's real points (the last full
window's when scoring new points with ``score_one``/``score_many``), so the
synthetic lrd is in the data's units; ``log(1 + C)`` keeps the seed's idea
(more points in the bin, denser) and is positive for every count > 0; the
mean over the kept bins normalises an average bin to the typical real
density. A virtual point therefore stands for "typical density was seen
here": a window point near it is an inlier only if it is about as dense
itself. ``virtual_lrd_scale`` (the seed's first "α") is separate from
``decay`` (its second "α", the fading factor of
:class:`~gpumine.stream._binning.BinnedSummary`). (An alternative that
gives each virtual point its own lrd among R, times the count factor, was
measured worse on the drifting stream of :func:`make_drifting_stream`: it
makes the trail of faded bins look normal.)

With an empty past (the first window, ``max_bins=0`` or ``history_size=0``)
the scores of a window are exactly the batch LOF of that window
(:class:`gpumine.outliers._lof_estimator.LocalOutlierFactor`).

Streaming API (as River): ``learn_one(x)`` buffers a point and processes the
window when ``window_size`` points are buffered; ``learn_many(X)`` does the
same for many; ``score_one(x)`` / ``score_many(X)`` are pure: they score new
points as novelty queries (LOF's novelty mode: a query is nobody's neighbour)
against the set a full window is scored in, changing nothing, so that the
scores do not depend on how full the buffer is. Its real points are the last
``window_size`` points learned (the buffered ones, topped up with the most
recent processed ones; all of them while fewer were learned); for
:class:`SlidingWindowLOF` the last ``max(history_size + n_buffered_,
window_size)`` (the history is among them). :class:`StreamingLOF` adds the
virtual points of its current summary (of everything processed, so the
processed part of the real points is also in the bins), with their synthetic
lrd. Without virtual points (``max_bins=0``, :class:`SlidingWindowLOF`) the
scores are scikit-learn's ``LocalOutlierFactor(novelty=True)`` fitted on the
real points. With fewer than 2 points learned every score is 1.0. (Earlier
versions scored against the buffered points and the virtual points alone:
right after a window was processed, with no real points around, the virtual
points' k-distances are bin spacings while their synthetic lrd is the real
points' density, and ordinary inliers scored 5-50.) ``process(window)``
scores and learns one window and returns ``(scores, flags)``. Scores are LOF
values (larger is more outlying, about 1 for inliers). Memory is bounded by
twice ``window_size`` (the buffer and the last points) plus ``max_bins`` (or
``history_size``) points.
"""

from __future__ import annotations

import abc
import json
import math
import numbers
import os
import warnings
from pathlib import Path

import numpy as np
import torch

from ..utils._graph_replay import GraphReplay
from ..utils._validation import check_array, output_kind, to_output
from ..config import resolve_backend, resolve_device, working_memory_bytes
from ..core.distance import get_metric
from ..neighbors.engine import choose_backend, knn_search
from ..outliers._lof import (
    DuplicatesWarning,
    LOFFit,
    check_duplicates_rule,
    check_lof_metric,
    k_distances,
    local_outlier_factor,
    local_reachability_density,
    lof_score,
)
from ._binning import BinnedSummary
from ._threshold import Threshold, parse_threshold

__all__ = ["StreamingLOF", "SlidingWindowLOF", "load_detector"]

_STATE_VERSION = 1


def _finite_median(values: torch.Tensor) -> torch.Tensor:
    """Median (the lower one for an even count) of the finite values, NaN when none; no host round trip."""
    return torch.nanmedian(torch.where(values.abs() < float("inf"), values, float("nan")))


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer >= {minimum}; got {value!r} of type {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value}")
    return int(value)


def _check_float(value, name: str, low: float, high: float, *, low_open: bool, high_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise TypeError(f"{name} must be a finite number; got {value!r}")
    value = float(value)
    bad_low = value <= low if low_open else value < low
    bad_high = value >= high if high_open else value > high
    if bad_low or bad_high:
        lo_b = "(" if low_open else "["
        hi_b = ")" if high_open else "]"
        raise ValueError(f"{name} must be in {lo_b}{low}, {high}{hi_b}; got {value}")
    return value


class _WindowedLOF(abc.ABC):
    """Windowing, buffering, scoring and thresholds shared by the two detectors."""

    def __init__(self, n_neighbors, window_size, *, threshold, metric, p, duplicates, device, backend, working_memory):
        self.n_neighbors = _check_int(n_neighbors, "n_neighbors", 1)
        self.window_size = _check_int(window_size, "window_size", 1)
        parse_threshold(threshold)
        self.threshold = threshold
        self.metric = metric
        self.p = p
        self._metric = check_lof_metric(get_metric(metric, p))
        self.duplicates = check_duplicates_rule(duplicates)
        self.device = device
        self.backend = backend
        self.working_memory = working_memory
        self.device_ = resolve_device(device)
        resolve_backend(backend, self.device_, has_triton_kernel=False)
        self._budget = working_memory_bytes(working_memory, self.device_)
        self._threshold = Threshold(threshold, self.device_)
        self.n_features_in_: int | None = None
        self.feature_names_: list | None = None
        self.dtype_: torch.dtype | None = None
        self.n_windows_ = 0
        self.n_seen_ = 0
        self.n_duplicate_points_ = 0
        self._warned_duplicates = False
        self._buffer: list[torch.Tensor] = []
        self._buffered = 0
        # the last points processed (at most _recent_size()), the real points of score_one's reference
        # beside the buffer; None when none are kept
        self._recent: torch.Tensor | None = None
        self._cache = None
        self.last_scores_ = None
        self.last_flags_ = None
        # median lrd of the last window's points (more than k of them), a 0-d device tensor
        # (NaN: no finite lrd yet) so that setting it does not wait for the device
        self._lrd_ref: torch.Tensor | None = None
        self._lrd_ref_finite = False  # known (on the host) to hold a finite value
        self._tail: GraphReplay | None = None  # the window's scoring after its kNN, replayed on CUDA

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_tail"] = None  # captured graphs do not copy or pickle; rebuilt on the next window
        return state

    # -- parameters and subclass hooks ---------------------------------------------------
    def _params(self) -> dict:
        return {
            "n_neighbors": self.n_neighbors,
            "window_size": self.window_size,
            "threshold": list(self.threshold) if isinstance(self.threshold, tuple) else self.threshold,
            "metric": self.metric,
            "p": self.p,
            "duplicates": self.duplicates,
        }

    def get_params(self) -> dict:
        """Constructor parameters (device and memory settings included)."""
        params = self._params()
        params.update(device=self.device, backend=self.backend, working_memory=self.working_memory)
        return params

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({shown})"

    @abc.abstractmethod
    def _reference_points(self) -> torch.Tensor:
        """Points standing for the past, (m, d) on the device, in the detector's dtype."""

    def _reference_lrd(self, natural_lrd: torch.Tensor, lrd_ref: torch.Tensor, counts: torch.Tensor | None,
                       ref_finite: bool) -> torch.Tensor:
        """lrd of the reference points given their lrd computed as real points (no host wait)."""
        return natural_lrd

    @abc.abstractmethod
    def _learn_window(self, X: torch.Tensor) -> None:
        """Fold a scored window into the state (the summary or the history)."""

    def _recent_size(self) -> int:
        """How many of the last processed points to keep for ``score_one`` (0: none)."""
        return self.window_size

    def _novelty_past(self):
        """``(tail, reference)``: the processed points that precede the buffer in ``score_one``'s
        reference (None for none) and the reference points of the past."""
        tail = None if self._recent is None else self._recent[-(self.window_size - self._buffered):]
        return tail, self._reference_points()

    @property
    def threshold_(self) -> float:
        """The current LOF cut-off (inf before any score with the running kinds)."""
        return float(self._threshold.value())

    @property
    def lrd_ref_(self) -> float | None:
        """Median lrd of the last full window's points (None before any), for the virtual points' lrd."""
        if self._lrd_ref is None:
            return None
        value = float(self._lrd_ref)
        return None if math.isnan(value) else value

    @property
    def n_buffered_(self) -> int:
        """Points waiting in the ``learn_one`` buffer for their window to fill."""
        return self._buffered

    # -- input ---------------------------------------------------------------------------
    def _as_rows(self, X, name: str = "X", learning: bool = True) -> torch.Tensor:
        """Validated rows; the first rows learned fix the features (scoring fixes nothing)."""
        if isinstance(X, dict):
            X = [X]
        if isinstance(X, (list, tuple)) and X and isinstance(X[0], dict):
            names = self.feature_names_ if self.feature_names_ is not None else list(X[0].keys())
            known = set(names)
            for row in X:
                extra = [key for key in row if key not in known]
                if extra:
                    raise ValueError(f"{name}: a record has feature(s) {extra} the detector does not know; every record "
                                     f"needs exactly the keys {names} (drop the others first)")
            try:
                X = [[row[key] for key in names] for row in X]
            except KeyError as exc:
                raise ValueError(f"{name}: a record lacks feature {exc.args[0]!r}; every record needs the keys {names}") from None
            if learning and self.feature_names_ is None:
                self.feature_names_ = names
        rows = check_array(X, name=name, allow_empty=True, dtype=self.dtype_)
        if self.n_features_in_ is None:
            if rows.shape[0] == 0 or not learning:
                return rows.to(self.device_)
            self.n_features_in_ = rows.shape[1]
            self.dtype_ = rows.dtype
        elif rows.shape[1] != self.n_features_in_:
            raise ValueError(
                f"{name} has {rows.shape[1]} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input; pass rows with the same columns as before"
            )
        return rows.to(self.device_)

    def _one(self, x, learning: bool = True) -> torch.Tensor:
        if isinstance(x, dict):
            return self._as_rows([x], "x", learning)
        if isinstance(x, torch.Tensor):
            return self._as_rows(x.reshape(1, -1), "x", learning)
        arr = np.asarray(x)
        if arr.ndim != 1:
            raise ValueError(f"x must be one point (a 1-D array of features or a dict); got shape {arr.shape}")
        return self._as_rows(arr.reshape(1, -1), "x", learning)

    # -- scoring -------------------------------------------------------------------------
    def _knn(self, ref: torch.Tensor, query: torch.Tensor, k: int, exclude_self: bool):
        backend = choose_backend(self.backend, self.device_, self._metric, ref.dtype, k, ref.shape[0])
        # knn_search itself, not search_validated: the small route's host wait would stall the
        # windows' pipelined launches (StreamingLOF measured slower through it)
        return knn_search(ref, query, k, self._metric, exclude_self=exclude_self, device=self.device_,
                          budget_bytes=self._budget, result_device=self.device_, verbose=0, backend=backend,
                          as_distance=True)

    def _neighbourhoods(self, R: torch.Tensor, k: int):
        """``(dist, index, kdist, n_zero)``: all-kNN of R (each point excluded from its own list), its
        k-distances and how many of them were 0."""
        dist, index = self._knn(R, R, k, exclude_self=True)
        kdist, n_zero = k_distances(dist, R, self._metric, duplicates=self.duplicates, device=self.device_,
                                    budget_bytes=self._budget)
        if n_zero:
            self._note_duplicates(n_zero)
        return dist, index, kdist, n_zero

    def _densities(self, dist, index, kdist, counts, lrd_ref, *, n_real: int, update_ref: bool, ref_finite: bool):
        """``(natural, lrd, lrd_ref)`` of the set whose first ``n_real`` rows are real points (no host wait).

        ``natural``: every row's lrd as a real point; ``lrd``: the same with the reference rows'
        synthetic lrd (:meth:`_reference_lrd`, from the virtual points' ``counts``); ``lrd_ref``: the
        median lrd of the real points where ``update_ref`` and one is finite, else the one given.
        """
        natural = local_reachability_density(dist, index, kdist, duplicates=self.duplicates)
        if update_ref:
            median = _finite_median(natural[:n_real])  # NaN when no lrd is finite: keep the last one
            lrd_ref = torch.where(torch.isnan(median), lrd_ref, median)
        lrd = natural
        if dist.shape[0] > n_real:
            lrd = torch.cat([natural[:n_real], self._reference_lrd(natural[n_real:], lrd_ref, counts, ref_finite)])
        return natural, lrd, lrd_ref

    def _fit_reference(self, R: torch.Tensor, n_real: int):
        """LOF quantities of the novelty reference R whose first ``n_real`` rows are real points.

        Returns ``(fit, lrd)`` where ``lrd`` has the reference rows' synthetic lrd,
        or None when R has fewer than 2 points.
        """
        k = min(self.n_neighbors, R.shape[0] - 1)
        if k < 1:
            return None
        dist, index, kdist, n_zero = self._neighbourhoods(R, k)
        natural, lrd, _ = self._densities(dist, index, kdist, self._virtual_counts(), self._known_lrd_ref(),
                                          n_real=n_real, update_ref=False, ref_finite=self._ref_finite())
        fit = LOFFit(dist.to(torch.float64), index, kdist, natural, torch.empty(0), n_zero, self.duplicates)
        return fit, lrd

    def _known_lrd_ref(self) -> torch.Tensor:
        """The median lrd of the last window as a 0-d tensor (NaN: none yet)."""
        if self._lrd_ref is None:
            return torch.full((), float("nan"), dtype=torch.float64, device=self.device_)
        return self._lrd_ref

    def _ref_finite(self) -> bool:
        """Whether the median lrd is known to be finite (asked of the device until it is: once finite
        it stays finite, since a NaN median keeps the last value)."""
        if not self._lrd_ref_finite and self._lrd_ref is not None and self._virtual_counts() is not None:
            self._lrd_ref_finite = bool(torch.isfinite(self._lrd_ref))
        return self._lrd_ref_finite

    def _virtual_counts(self) -> torch.Tensor | None:
        """The counts behind the reference points' synthetic lrd (None: the reference points are real)."""
        return None

    def _note_duplicates(self, n_zero: int) -> None:
        self.n_duplicate_points_ += n_zero
        if not self._warned_duplicates:
            self._warned_duplicates = True
            warnings.warn(
                f"{type(self).__name__}: {n_zero} point(s) in a window have at least n_neighbors="
                f"{self.n_neighbors} exact duplicates; their reach-distances use the k-distinct-distance "
                "(duplicates='distinct'; see gpumine.outliers._lof). Warned once; the running count is "
                "in n_duplicate_points_.",
                DuplicatesWarning, stacklevel=4,
            )

    def process(self, window):
        """Score one window with the past, update the threshold and the past; return ``(scores, flags)``.

        Parameters
        ----------
        window : array-like of shape (n_points, n_features)
            Any number of points (normally ``window_size``). The ``learn_one``
            buffer is not involved.

        Returns
        -------
        scores : array of shape (n_points,)
            LOF of each point (larger is more outlying, about 1 for inliers), in
            the detector's precision.
        flags : bool array of shape (n_points,)
            ``scores > threshold_`` (the threshold after this window's update).
        """
        kind = output_kind(window)
        X = self._as_rows(window, "window")
        if X.shape[0] == 0:
            empty = torch.empty(0, dtype=self.dtype_ or torch.float32)
            return to_output(empty, kind), to_output(empty.bool(), kind)
        lof, flags = self._process(X)
        return to_output(lof.to(self.dtype_), kind), to_output(flags, kind)

    def _process(self, X: torch.Tensor):
        lof, flags = self._score_window(X)
        self._learn_window(X)
        self._remember(X)
        self.n_windows_ += 1
        self.n_seen_ += X.shape[0]
        self._cache = None
        self.last_scores_, self.last_flags_ = lof, flags
        return lof, flags

    def _score_window(self, X: torch.Tensor):
        """LOF (float64) of the window's rows scored with the reference set, and their flags after the
        threshold's update."""
        V = self._reference_points()
        R = torch.cat([X, V]) if V.shape[0] else X
        k = min(self.n_neighbors, R.shape[0] - 1)
        threshold = self._threshold
        if k < 1:
            lof = torch.ones(X.shape[0], dtype=torch.float64, device=self.device_)
            threshold.update(lof)
            return lof, threshold.flags(lof)
        dist, index, kdist, _ = self._neighbourhoods(R, k)
        if self._tail is None:
            # on CUDA the sixty-odd small launches from the densities to the flags replay as one graph
            self._tail = GraphReplay(self._window_tail)
        w = X.shape[0]
        lof, flags, lrd_ref, count, total, hist = self._tail(
            dist, index, kdist, self._virtual_counts(), self._known_lrd_ref(), threshold.count, threshold.total,
            threshold.hist, w=w, update_ref=w > self.n_neighbors, ref_finite=self._ref_finite(),
            constants=(self.duplicates, getattr(self, "virtual_lrd_scale", None), threshold.kind, threshold.param))
        if self._tail.replayed:  # a replay's outputs are overwritten by the next one
            lof, flags, lrd_ref, count, total = lof.clone(), flags.clone(), lrd_ref.clone(), count.clone(), total.clone()
            hist = None if hist is None else hist.clone()
        if w > self.n_neighbors:
            self._lrd_ref = lrd_ref
        threshold.count, threshold.total, threshold.hist = count, total, hist
        return lof, flags

    def _window_tail(self, dist, index, kdist, counts, lrd_ref, count, total, hist, *, w: int, update_ref: bool,
                     ref_finite: bool, constants=None):
        """From a window's neighbourhoods to its LOF and flags, with no host wait (so it can be captured).

        ``constants``: the parameters the function reads from the detector, only so that a graph
        replayed for it is keyed by them too (a changed parameter captures anew).

        Returns ``(lof, flags, lrd_ref, count, total, hist)``: the window's LOF (float64), its flags
        under the updated threshold, the new median lrd and the threshold's new statistics.
        """
        _, lrd, lrd_ref = self._densities(dist, index, kdist, counts, lrd_ref, n_real=w, update_ref=update_ref,
                                          ref_finite=ref_finite)
        lof = local_outlier_factor(lrd[:w], index[:w], lrd)
        count, total, hist = self._threshold.advanced(lof, count, total, hist)
        flags = lof > self._threshold.cut(count, total, hist)
        return lof, flags, lrd_ref, count, total, hist

    def _remember(self, X: torch.Tensor) -> None:
        """Keep the last ``_recent_size()`` processed points (a copy: the caller's tensor may change)."""
        size = self._recent_size()
        if size == 0:
            self._recent = None
        elif self._recent is None or X.shape[0] >= size:
            self._recent = X[-size:].clone()
        else:
            self._recent = torch.cat([self._recent, X])[-size:].clone()

    # -- River-style streaming API ------------------------------------------------------------
    def learn_one(self, x) -> None:
        """Buffer one point (a 1-D array or a dict of features); a full buffer is processed as a window."""
        self._learn_rows(self._one(x))

    def learn_many(self, X) -> None:
        """Buffer many points; every time ``window_size`` points are buffered they are processed."""
        self._learn_rows(self._as_rows(X))

    def _learn_rows(self, rows: torch.Tensor) -> None:
        if rows.shape[0] == 0:
            return
        self._cache = None
        start = 0
        while start < rows.shape[0]:
            take = min(self.window_size - self._buffered, rows.shape[0] - start)
            self._buffer.append(rows[start : start + take])
            self._buffered += take
            start += take
            if self._buffered == self.window_size:
                self.flush()

    def flush(self):
        """Process the buffered points (a partial window) now; returns ``(scores, flags)`` as tensors."""
        if not self._buffered:
            empty = torch.empty(0, dtype=torch.float64, device=self.device_)
            return empty, empty.bool()
        X = torch.cat(self._buffer) if len(self._buffer) > 1 else self._buffer[0]
        self._buffer, self._buffered = [], 0
        return self._process(X)

    def _novelty_reference(self):
        """The set a full window is scored in: the last points learned, then the past's reference points."""
        if self._cache is None:
            tail, V = self._novelty_past()
            real = ([tail] if tail is not None and tail.shape[0] else []) + self._buffer
            n_real = sum(part.shape[0] for part in real)
            parts = real + ([V] if V.shape[0] or not real else [])
            R = torch.cat(parts) if len(parts) > 1 else parts[0]
            fitted = self._fit_reference(R, n_real)
            self._cache = (R, fitted)
        return self._cache

    def _score_rows(self, rows: torch.Tensor) -> torch.Tensor:
        R, fitted = self._novelty_reference()
        if fitted is None:
            return torch.ones(rows.shape[0], dtype=torch.float64, device=self.device_)
        fit, lrd = fitted
        dist, index = self._knn(R, rows, fit.n_neighbors, exclude_self=False)
        lof, _ = lof_score(dist, index, fit, lrd_ref=lrd)
        return lof

    def score_one(self, x) -> float:
        """LOF of one new point as a novelty query against the last points learned and the past.

        The reference is the set a full window is scored in (see the module
        docstring), whatever the buffer's fill level; changes nothing; 1.0
        before 2 points were learned.
        """
        rows = self._one(x, learning=False)
        return float(self._score_rows(rows)[0])

    def score_many(self, X):
        """LOF of new points as :meth:`score_one` does (each scored alone; changes nothing)."""
        kind = output_kind(X)
        rows = self._as_rows(X, learning=False)
        if rows.shape[0] == 0:
            return to_output(torch.empty(0, dtype=torch.float64), kind)
        return to_output(self._score_rows(rows).to(self.dtype_), kind)

    # -- state -------------------------------------------------------------------------------
    @abc.abstractmethod
    def _state_arrays(self) -> dict:
        """The subclass's state as named arrays, for ``save``."""

    @abc.abstractmethod
    def _load_arrays(self, arrays: dict) -> None:
        """Restore what ``_state_arrays`` wrote."""

    def save(self, path, *, progress: dict | None = None) -> Path:
        """Write the detector's state to ``path`` atomically (an ``.npz`` of arrays plus JSON; no pickle).

        Restore it with :func:`load_detector` or ``type(self).load(path)``.
        ``progress``: a JSON-able record of how far a run got into its input and
        output (``gpumine stream`` resumes exactly once from it); kept in the
        file and restored as ``stream_progress_``.
        """
        from ..io import atomic_open

        path = Path(os.fspath(path))
        meta = {
            "format": "gpumine.stream",
            "version": _STATE_VERSION,
            "class": type(self).__name__,
            "params": self._params(),
            "n_features": self.n_features_in_,
            "feature_names": self.feature_names_,
            "dtype": None if self.dtype_ is None else str(self.dtype_).replace("torch.", ""),
            "n_windows": self.n_windows_,
            "n_seen": self.n_seen_,
            "n_duplicate_points": self.n_duplicate_points_,
            "lrd_ref": self.lrd_ref_,
            "threshold_state": {"n": self._threshold.n, "total": float(self._threshold.total)},
            "progress": progress,
        }
        arrays = {"meta": np.array(json.dumps(meta))}
        if self._threshold.hist is not None:
            arrays["threshold_hist"] = self._threshold.hist.cpu().numpy()
        buffer = torch.cat(self._buffer).cpu().numpy() if self._buffered else np.empty((0, self.n_features_in_ or 0))
        arrays["buffer"] = buffer
        if self._recent is not None:
            arrays["recent"] = self._recent.cpu().numpy()
        for key, value in self._state_arrays().items():
            arrays[key] = value.cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
        if not path.parent.is_dir():
            raise FileNotFoundError(f"cannot write the state {path}: folder {path.parent} does not exist; create it first")
        with atomic_open(path, "wb") as fh:
            np.savez(fh, **arrays)
        return path

    @classmethod
    def load(cls, path, *, device=None, backend=None, working_memory=None):
        """Restore a detector saved with :meth:`save` (``device`` etc. default to the saved ones)."""
        detector = load_detector(path, device=device, backend=backend, working_memory=working_memory)
        if not isinstance(detector, cls):
            raise ValueError(f"{path} holds a {type(detector).__name__}, not a {cls.__name__}")
        return detector

    def _restore(self, meta: dict, arrays: dict) -> None:
        self.n_features_in_ = meta["n_features"]
        self.feature_names_ = meta["feature_names"]
        dtype = meta["dtype"]
        if dtype not in (None, "float32", "float64"):
            raise ValueError(f"unsupported dtype {dtype!r} in the state file")
        self.dtype_ = None if dtype is None else getattr(torch, dtype)
        self.n_windows_ = int(meta["n_windows"])
        self.n_seen_ = int(meta["n_seen"])
        self.n_duplicate_points_ = int(meta.get("n_duplicate_points", 0))
        self.stream_progress_ = meta.get("progress")
        lrd_ref = meta.get("lrd_ref")
        self._lrd_ref = None if lrd_ref is None else torch.tensor(float(lrd_ref), dtype=torch.float64, device=self.device_)
        self._lrd_ref_finite = False
        thr = dict(meta["threshold_state"])
        if "threshold_hist" in arrays:
            thr["hist"] = arrays["threshold_hist"]
        self._threshold.load_state(thr)
        buffer = arrays["buffer"]
        if buffer.shape[0]:
            if self.n_features_in_ is None or buffer.ndim != 2 or buffer.shape[1] != self.n_features_in_ or buffer.shape[0] >= self.window_size:
                raise ValueError("the buffered points in the state file do not match the detector; the file is damaged")
            self._buffer = [torch.as_tensor(buffer).to(self.device_, self.dtype_)]
            self._buffered = buffer.shape[0]
        recent = arrays.get("recent")  # absent from files of earlier versions: score_one then uses buffer + past
        if recent is not None:
            if (self.n_features_in_ is None or recent.ndim != 2 or recent.shape[1] != self.n_features_in_
                    or not 0 < recent.shape[0] <= self._recent_size()):
                raise ValueError("the last points in the state file do not match the detector; the file is damaged")
            self._recent = torch.as_tensor(recent).to(self.device_, self.dtype_)
        self._load_arrays(arrays)


class StreamingLOF(_WindowedLOF):
    """LOF_GPU: LOF over stream windows, with a binned summary of all past data as virtual points.

    Parameters
    ----------
    n_neighbors : int, default=20
        k of LOF.
    window_size : int, default=2048
        Points per window for ``learn_one``/``learn_many`` (``process`` takes
        windows of any size).
    bins_per_dim : int, default=10
        Equal intervals per dimension of the running [min, max] range.
    decay : float in (0, 1], default=0.5
        Fading factor: a bin that is absent from a window, or much less
        populated there than the window's average bin, has its count
        multiplied by ``decay`` (the seed's second "α"). 1 never fades.
    virtual_lrd_scale : float > 0, default=1.0
        Multiplier of the virtual points' synthetic lrd (the seed's first "α";
        see the module docstring for the formula).
    threshold : "mean", "quantile:Q", ("quantile", Q) or float, default="mean"
        How flags are set (:mod:`gpumine.stream._threshold`).
    max_bins : int >= 0, default=2048
        Most bins (virtual points) kept; the largest counts win. 0 keeps no
        summary (each window is scored alone).
    sparse_ratio : float >= 0, default=0.1
        "Much smaller than the mean": a bin decays when its count in the
        window is below ``sparse_ratio`` times the mean count of the window's
        non-empty bins (absent bins always decay when ``sparse_ratio > 0``).
    min_count : float >= 0, default=0.1
        Bins whose decayed count falls below this are dropped.
    metric, p : distance (default euclidean), as :func:`gpumine.neighbors.kneighbors`
    duplicates : {"distinct", "sklearn"}, default="distinct"
        The rule for points with >= k exact duplicates (see :mod:`gpumine.outliers._lof`).
    device, backend, working_memory : as every gpumine estimator.

    Attributes
    ----------
    summary_ : BinnedSummary or None
        The bins (``keys``, ``counts``, ``means``, running ``lo``/``hi``).
    threshold_ : float
    n_windows_, n_seen_, n_features_in_, n_duplicate_points_, last_scores_, last_flags_

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> det = StreamingLOF(n_neighbors=10, window_size=200, device="cpu")
    >>> scores, flags = det.process(rng.normal(size=(200, 2)))
    >>> scores.shape, flags.dtype, len(det.summary_) > 0
    ((200,), dtype('bool'), True)
    >>> det.score_one([8.0, 8.0]) > 2  # far from everything seen
    True
    """

    def __init__(
        self,
        n_neighbors=20,
        window_size=2048,
        *,
        bins_per_dim=10,
        decay=0.5,
        virtual_lrd_scale=1.0,
        threshold="mean",
        max_bins=2048,
        sparse_ratio=0.1,
        min_count=0.1,
        metric="euclidean",
        p=None,
        duplicates="distinct",
        device="auto",
        backend="auto",
        working_memory=None,
    ):
        super().__init__(n_neighbors, window_size, threshold=threshold, metric=metric, p=p, duplicates=duplicates,
                         device=device, backend=backend, working_memory=working_memory)
        self.bins_per_dim = _check_int(bins_per_dim, "bins_per_dim", 1)
        self.decay = _check_float(decay, "decay", 0.0, 1.0, low_open=True)
        self.virtual_lrd_scale = _check_float(virtual_lrd_scale, "virtual_lrd_scale", 0.0, math.inf, low_open=True, high_open=True)
        self.max_bins = _check_int(max_bins, "max_bins", 0)
        self.sparse_ratio = _check_float(sparse_ratio, "sparse_ratio", 0.0, math.inf, low_open=False, high_open=True)
        self.min_count = _check_float(min_count, "min_count", 0.0, math.inf, low_open=False, high_open=True)
        self.summary_: BinnedSummary | None = None

    def _params(self) -> dict:
        params = super()._params()
        params.update(bins_per_dim=self.bins_per_dim, decay=self.decay, virtual_lrd_scale=self.virtual_lrd_scale,
                      max_bins=self.max_bins, sparse_ratio=self.sparse_ratio, min_count=self.min_count)
        return params

    def _reference_points(self) -> torch.Tensor:
        if self.summary_ is None or not len(self.summary_):
            d = self.n_features_in_ or 0
            return torch.empty((0, d), dtype=self.dtype_ or torch.float32, device=self.device_)
        return self.summary_.means.to(self.dtype_)

    def _reference_lrd(self, natural_lrd, lrd_ref, counts, ref_finite):
        if not ref_finite:
            # no finite lrd of a window of real points yet: the virtual points' own median (1 if none)
            fallback = torch.nan_to_num(_finite_median(natural_lrd), nan=1.0)
            lrd_ref = torch.where(torch.isfinite(lrd_ref), lrd_ref, fallback)
        weight = torch.log1p(counts)
        return (self.virtual_lrd_scale * lrd_ref) * weight / weight.mean()

    def _virtual_counts(self):
        return self.summary_.counts if self.summary_ is not None and len(self.summary_) else None

    def _learn_window(self, X: torch.Tensor) -> None:
        if self.max_bins == 0:
            return
        if self.summary_ is None:
            self.summary_ = BinnedSummary(X.shape[1], self.bins_per_dim, self.device_)
        self.summary_.update(X, decay=self.decay, sparse_ratio=self.sparse_ratio, min_count=self.min_count,
                             max_bins=self.max_bins)

    @property
    def n_bins_(self) -> int:
        return 0 if self.summary_ is None else len(self.summary_)

    def _state_arrays(self) -> dict:
        if self.summary_ is None:
            return {}
        state = self.summary_.state_dict()
        return {f"summary_{k}": v for k, v in state.items() if isinstance(v, torch.Tensor)} | {
            "summary_n_remaps": np.array(state["n_remaps"])
        }

    def _load_arrays(self, arrays: dict) -> None:
        if "summary_counts" not in arrays:
            return
        if self.n_features_in_ is None:
            raise ValueError("the state file has a summary but no feature count; the file is damaged")
        state = {k[len("summary_"):]: arrays[k] for k in arrays if k.startswith("summary_")}
        state.update(n_features=self.n_features_in_, bins_per_dim=self.bins_per_dim)
        self.summary_ = BinnedSummary.from_state(state, self.device_)
        if len(self.summary_) > self.max_bins:
            raise ValueError("the state file holds more bins than max_bins; the file is damaged")


class SlidingWindowLOF(_WindowedLOF):
    """Sliding-window LOF: each window is scored together with the last ``history_size`` raw points.

    The baseline of LOF_GPU (Yu 2017): no summary, the past is forgotten once it
    leaves the history. With ``history_size=0`` each window is scored alone
    (batch LOF per window). The past is ``history_size`` points, so
    ``SlidingWindowLOF(w, history_size=m)`` and ``StreamingLOF(w, max_bins=m)``
    keep pasts of equal size. ``score_one`` scores against the last
    ``max(history_size + n_buffered_, window_size)`` points learned (a
    history shorter than a window keeps the last ``window_size`` points
    beside it for that). Memory: the buffer, the history and, when the
    history is shorter, ``window_size`` points.

    Parameters
    ----------
    n_neighbors, window_size, threshold, metric, p, duplicates, device, backend, working_memory
        As :class:`StreamingLOF`.
    history_size : int >= 0, default=2048
        Past points kept (the most recent).

    Examples
    --------
    >>> import numpy as np
    >>> det = SlidingWindowLOF(n_neighbors=5, window_size=50, history_size=100, device="cpu")
    >>> det.learn_many(np.random.default_rng(0).normal(size=(120, 3)))
    >>> det.n_windows_, det.n_buffered_, det.history_.shape[0]
    (2, 20, 100)
    """

    def __init__(
        self,
        n_neighbors=20,
        window_size=2048,
        *,
        history_size=2048,
        threshold="mean",
        metric="euclidean",
        p=None,
        duplicates="distinct",
        device="auto",
        backend="auto",
        working_memory=None,
    ):
        super().__init__(n_neighbors, window_size, threshold=threshold, metric=metric, p=p, duplicates=duplicates,
                         device=device, backend=backend, working_memory=working_memory)
        self.history_size = _check_int(history_size, "history_size", 0)
        self.history_ = None

    def _params(self) -> dict:
        params = super()._params()
        params.update(history_size=self.history_size)
        return params

    def _reference_points(self) -> torch.Tensor:
        if self.history_ is None:
            d = self.n_features_in_ or 0
            return torch.empty((0, d), dtype=self.dtype_ or torch.float32, device=self.device_)
        return self.history_

    def _recent_size(self) -> int:
        # a history of window_size points or more holds the last window_size points already
        return self.window_size if self.history_size < self.window_size else 0

    def _novelty_past(self):
        if self._recent is None:  # the history (or nothing yet) precedes the buffer
            return None, self._reference_points()
        need = max(self.history_size, self.window_size - self._buffered)
        return self._recent[-need:], self._reference_points()[:0]

    def _learn_window(self, X: torch.Tensor) -> None:
        if self.history_size == 0:
            return
        past = X if self.history_ is None else torch.cat([self.history_, X])
        self.history_ = past[-self.history_size :].clone()

    def _state_arrays(self) -> dict:
        return {} if self.history_ is None else {"history": self.history_}

    def _load_arrays(self, arrays: dict) -> None:
        if "history" not in arrays:
            return
        history = arrays["history"]
        if self.n_features_in_ is None or history.ndim != 2 or history.shape[1] != self.n_features_in_ or history.shape[0] > self.history_size:
            raise ValueError("the history in the state file does not match the detector; the file is damaged")
        self.history_ = torch.as_tensor(history).to(self.device_, self.dtype_)


_CLASSES = {"StreamingLOF": StreamingLOF, "SlidingWindowLOF": SlidingWindowLOF}


def load_detector(path, *, device=None, backend=None, working_memory=None):
    """Restore a :class:`StreamingLOF` or :class:`SlidingWindowLOF` saved with ``save`` (no pickle is read).

    Raises ``ValueError`` for a file that is not a gpumine stream state or is damaged.
    """
    path = Path(os.fspath(path))
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except FileNotFoundError:
        raise
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{path} is not a readable gpumine stream state ({exc}); pass a file written by save() / --state") from None
    try:
        meta = json.loads(str(arrays.pop("meta")))
        if meta.get("format") != "gpumine.stream":
            raise ValueError("not a gpumine stream state")
        if meta.get("version") != _STATE_VERSION:
            raise ValueError(f"state format version {meta.get('version')} is not supported (this gpumine reads {_STATE_VERSION})")
        cls = _CLASSES[meta["class"]]
        params = dict(meta["params"])
        if isinstance(params.get("threshold"), list):
            params["threshold"] = tuple(params["threshold"])
        n_neighbors, window_size = params.pop("n_neighbors"), params.pop("window_size")
        detector = cls(n_neighbors, window_size, **params,
                       device="auto" if device is None else device,
                       backend="auto" if backend is None else backend, working_memory=working_memory)
        detector._restore(meta, arrays)
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a valid gpumine stream state (missing or bad field: {exc})") from None
    return detector
