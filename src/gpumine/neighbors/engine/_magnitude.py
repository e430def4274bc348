"""Which arithmetic can search the data exactly: float32 as is, float32 scaled, or float64.

A float32 search squares differences (or multiplies values) and sums d of them.
That is exact enough only while every square is a normal float32 number and no
sum overflows. Two distinct float32 values differ by at least 2^-24 times the
smaller nonzero magnitude of the data (or by one subnormal step, which is more),
so if every nonzero magnitude lies in ``[FLOAT32_LOW, FLOAT32_HIGH] = [2^-39,
2^40]``, the smallest nonzero square is at least 2^-126 (float32's smallest
normal number) and the largest sum of squares at most 4 d 2^80, far below
float32's largest value.

The rule, for float32 data with largest magnitude ``M`` and smallest nonzero
magnitude ``m``:

* both in the window: searched as is;
* ``M / m <= FLOAT32_HIGH / FLOAT32_LOW`` (2^79): scaled by a power of two into
  the window first (exact: only exponents change), results scaled back;
* otherwise (e.g. values of 1e-30 beside values of 1, or subnormal values beside
  normal ones): searched in float64 and the results rounded to float32. Squared
  distances beyond float32's range come back as infinity; distances come back
  finite whenever they are finite float32 numbers (the square root is taken in
  float64 first).

Float64 data is scaled by a power of two when its largest magnitude is outside
``[2^-40, 2^40]``, as before this rule (float64's range is wide enough that
mixed magnitudes need values near 1e-150 to matter).
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["FLOAT32_LOW", "FLOAT32_HIGH", "magnitudes", "finite_magnitudes", "smallest_nonzero_magnitude", "arithmetic"]

FLOAT32_LOW = 2.0**-39
FLOAT32_HIGH = 2.0**40
_FLOAT64_SAFE = 2.0**40
# elements per reduction step, so no |X| copy of possibly huge data is made at once
_CHUNK = 1 << 24


def magnitudes(*arrays: torch.Tensor) -> tuple[float, float]:
    """The largest magnitude and the smallest nonzero magnitude (``inf`` when none) of the arrays."""
    largest, tiniest = 0.0, math.inf
    for X in arrays:
        if X.numel() == 0:
            continue
        if getattr(X, "_gpumine_summary", None) is not None:  # the import is a fixed cost of every call otherwise
            from ._host_summary import summary_of  # the summary module needs this one's helpers

            summary = summary_of(X)
            if summary is not None:
                largest, tiniest = max(largest, summary.largest), min(tiniest, summary.tiniest)
                continue
        if X.device.type == "cpu":  # NumPy's reductions are much faster than torch's on the host
            largest, tiniest = _host_magnitudes(X, largest, tiniest)
            continue
        flat = X.reshape(-1) if X.is_contiguous() else X.contiguous().reshape(-1)
        for start in range(0, flat.numel(), _CHUNK):
            part = flat[start : start + _CHUNK]
            largest = max(largest, float(part.abs().max()))
            tiniest = min(tiniest, float(smallest_nonzero_magnitude(part)))
    return largest, tiniest


def _host_magnitudes(X: torch.Tensor, largest: float, tiniest: float, *, stop_at_non_finite: bool = False,
                     nonzero: bool = True):
    """:func:`magnitudes` of host ``X`` folded into ``(largest, tiniest)``, in |X| pieces of ``_CHUNK`` elements.

    Works on NumPy views (no torch op per piece: each costs microseconds, which
    small searches notice). ``stop_at_non_finite``: return None at the first
    piece holding NaN or infinity (NumPy's max propagates both), so that the pass
    is the finiteness check too. ``nonzero=False`` leaves ``tiniest`` as it is
    (float64 data's range plan reads the largest magnitude only).
    """
    flat = (X.detach() if X.requires_grad else X).numpy()
    if flat.size <= _CHUNK:  # one piece (small data's common case), read in its own layout: the same values
        pieces = [flat]
    else:
        flat = flat.reshape(-1)  # C order, as torch's contiguous copy: the same pieces
        pieces = (flat[start : start + _CHUNK] for start in range(0, flat.size, _CHUNK))
    for piece in pieces:
        values = np.abs(piece)
        high = float(values.max())
        if stop_at_non_finite and not math.isfinite(high):
            return None
        largest = max(largest, high)
        if nonzero:
            values[values == 0] = np.inf
            tiniest = min(tiniest, float(values.min()))
    return largest, tiniest


def finite_magnitudes(X: torch.Tensor, *, nonzero: bool = True) -> tuple[float, float] | None:
    """:func:`magnitudes` of host ``X`` from the same pass that checks it is finite; None when it is not.

    One pass instead of a finiteness check followed by the range plan's own
    (what :func:`magnitudes` would return for ``X``, bit for bit). ``nonzero=False``
    skips the smallest nonzero magnitude (returned as ``inf``) where the caller
    needs none.
    """
    if X.numel() == 0:
        return 0.0, math.inf
    return _host_magnitudes(X, 0.0, math.inf, stop_at_non_finite=True, nonzero=nonzero)


def smallest_nonzero_magnitude(t: torch.Tensor) -> torch.Tensor:
    """``min |t|`` over the nonzero entries (``inf`` when none), as a tensor: no host wait on a GPU."""
    magnitude = t.abs()
    return magnitude.masked_fill_(magnitude == 0, math.inf).amin()


def arithmetic(dtype: torch.dtype, largest: float, tiniest: float) -> tuple[torch.dtype, float | None]:
    """``(dtype to compute in, power-of-two scale or None)`` for data of these magnitudes (see the module)."""
    if largest == 0.0 or not math.isfinite(largest):  # all zeros; non-finite data is refused elsewhere
        return dtype, None
    if dtype == torch.float64:
        if 1.0 / _FLOAT64_SAFE <= largest <= _FLOAT64_SAFE:
            return dtype, None
        return dtype, 2.0 ** (-round(math.log2(largest)))
    if FLOAT32_LOW <= tiniest and largest <= FLOAT32_HIGH:
        return dtype, None
    if largest / tiniest > FLOAT32_HIGH / FLOAT32_LOW:
        return torch.float64, None
    # the smallest exponent shift that brings both ends into the window
    if largest > FLOAT32_HIGH:
        exponent = math.floor(math.log2(FLOAT32_HIGH / largest))
    else:
        exponent = math.ceil(math.log2(FLOAT32_LOW / tiniest))
    scale = 2.0**exponent
    if not (FLOAT32_LOW <= tiniest * scale and largest * scale <= FLOAT32_HIGH):
        return torch.float64, None  # log2's rounding at the window's edge: float64 is always right
    return dtype, scale
