"""Adaptive outlier thresholds for streams: the seed's running mean, a running quantile, or a constant.

Specs (``threshold=``):

``"mean"``
    Flag LOF > the running mean of every LOF seen so far, the current window
    included (LOF_GPU, Yu 2017, §3.1: outliers are rare, so the mean LOF is a
    threshold that needs no parameter). It flags a large share of points
    (often 30-40 %): it is a coarse filter, kept for fidelity to the seed.
``"quantile:Q"`` or ``("quantile", Q)``, 0 < Q < 1
    Flag LOF > the running Q-quantile of every LOF seen so far (contamination
    1 - Q). The quantile comes from a histogram of log2(LOF) with 4,000 bins
    over [2**-10, 2**30] (0.17 % relative resolution; constant memory).
a number t > 0
    Flag LOF > t (1.5 is scikit-learn's "auto" offset).

Only finite scores update the statistics. All state stays on the device.
"""

from __future__ import annotations

import math
import numbers

import torch

__all__ = ["Threshold", "parse_threshold"]

_LOG_MIN, _LOG_MAX, _BINS = -10.0, 30.0, 4000
_WIDTH = (_LOG_MAX - _LOG_MIN) / _BINS


def parse_threshold(spec) -> tuple[str, float]:
    """``(kind, value)`` from a threshold spec; raises ``ValueError`` naming the accepted forms.

    Examples
    --------
    >>> parse_threshold("mean"), parse_threshold("quantile:0.99"), parse_threshold(1.5)
    (('mean', 0.0), ('quantile', 0.99), ('fixed', 1.5))
    """
    accepted = "'mean', 'quantile:Q' (0 < Q < 1), ('quantile', Q) or a number > 0"
    if isinstance(spec, str):
        text = spec.strip().lower()
        if text == "mean":
            return "mean", 0.0
        if text.startswith("quantile:") or text.startswith("q:"):
            spec = ("quantile", text.split(":", 1)[1])
        else:
            try:
                spec = float(text)
            except ValueError:
                raise ValueError(f"threshold must be {accepted}; got {spec!r}") from None
    if isinstance(spec, tuple) and len(spec) == 2 and spec[0] == "quantile":
        try:
            q = float(spec[1])
        except (TypeError, ValueError):
            raise ValueError(f"threshold quantile must be a number in (0, 1); got {spec[1]!r}") from None
        if not 0 < q < 1:
            raise ValueError(f"threshold quantile must be in (0, 1); got {q}")
        return "quantile", q
    if isinstance(spec, numbers.Real) and not isinstance(spec, bool):
        if not (math.isfinite(spec) and spec > 0):
            raise ValueError(f"a fixed threshold must be a finite number > 0 (an LOF value); got {spec}")
        return "fixed", float(spec)
    raise ValueError(f"threshold must be {accepted}; got {spec!r}")


class Threshold:
    """Running statistics of LOF scores and the cut-off they give (see the module docstring).

    The statistics are device tensors and :meth:`update`, :meth:`value` and
    :meth:`flags` never wait for the device (no host round trip per window).
    """

    def __init__(self, spec, device: torch.device):
        self.kind, self.param = parse_threshold(spec)
        self.device = device
        self.count = torch.zeros((), dtype=torch.int64, device=device)  # finite scores seen
        self.total = torch.zeros((), dtype=torch.float64, device=device)
        self.hist = torch.zeros(_BINS, dtype=torch.int64, device=device) if self.kind == "quantile" else None
        self._fixed = torch.full((), self.param, dtype=torch.float64, device=device) if self.kind == "fixed" else None

    @property
    def n(self) -> int:
        """How many finite scores the statistics hold."""
        return int(self.count)

    def update(self, lof: torch.Tensor) -> None:
        self.count, self.total, self.hist = self.advanced(lof, self.count, self.total, self.hist)

    def advanced(self, lof: torch.Tensor, count: torch.Tensor, total: torch.Tensor, hist: torch.Tensor | None):
        """``(count, total, hist)``: the statistics ``(count, total, hist)`` after the scores ``lof`` (new tensors)."""
        lof = lof.to(torch.float64)
        finite = lof.abs() < float("inf")  # (isfinite in two kernels instead of four)
        count = count + finite.sum()
        total = total + torch.where(finite, lof, 0.0).sum()
        if hist is not None and lof.numel():
            pos = ((torch.log2(lof.clamp(min=2.0**_LOG_MIN)) - _LOG_MIN) / _WIDTH).floor().clamp_(0, _BINS - 1)
            pos = torch.where(finite, pos, 0.0).to(torch.int64)
            hist = hist.index_add(0, pos, finite.to(torch.int64))  # integer adds: exact in any order
        return count, total, hist

    def value(self) -> torch.Tensor:
        """The current cut-off as a 0-d float64 tensor (+inf before any score for the running kinds)."""
        return self.cut(self.count, self.total, self.hist)

    def cut(self, count: torch.Tensor, total: torch.Tensor, hist: torch.Tensor | None) -> torch.Tensor:
        """The cut-off of the statistics ``(count, total, hist)`` (see :meth:`value`)."""
        if self.kind == "fixed":
            return self._fixed
        if self.kind == "mean":
            cut = total / count
        else:
            cum = torch.cumsum(hist, 0)
            target = torch.ceil(self.param * count.to(torch.float64)).to(torch.int64).clamp(min=1)
            b = torch.searchsorted(cum, target.reshape(1)).clamp(max=_BINS - 1)[0]
            cut = torch.exp2(_LOG_MIN + (b.to(torch.float64) + 1) * _WIDTH)
        return torch.where(count > 0, cut, float("inf"))

    def flags(self, lof: torch.Tensor) -> torch.Tensor:
        return lof.to(torch.float64) > self.value()

    def state_dict(self) -> dict:
        state = {"n": self.n, "total": float(self.total)}
        if self.hist is not None:
            state["hist"] = self.hist.cpu()
        return state

    def load_state(self, state: dict) -> None:
        self.count = torch.tensor(int(state["n"]), dtype=torch.int64, device=self.device)
        self.total = torch.tensor(float(state["total"]), dtype=torch.float64, device=self.device)
        if self.hist is not None:
            hist = torch.as_tensor(state.get("hist"), dtype=torch.int64)
            if hist.shape != (_BINS,):
                raise ValueError("the threshold histogram in the state file has the wrong shape; the file is damaged")
            self.hist = hist.to(self.device)
