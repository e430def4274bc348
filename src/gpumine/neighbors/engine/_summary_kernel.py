"""The facts a search checks of its data, in one pass: extremes, smallest nonzero magnitude, whole numbers.

Before a GPU search the data is checked for NaN and infinity, its magnitudes set
the range plan (:mod:`._magnitude`) and whether it holds whole numbers decides
the integer centre (:func:`._dense.integer_centre`). In torch that is
``aminmax``, ``smallest_nonzero_magnitude`` (an ``abs``, a comparison, a fill
and a reduction) and ``(X == round(X)).all()``: about eight passes over the data
and as many launches, which small searches (and the captured ones, whose graphs
check each replay's data) pay on every call. Here each program reduces a stretch
of the flattened data to five partial facts and a second, one-program launch
joins them; with ``scrub`` the same pass writes NaN and infinity as zero (what a
captured search does before its kernels read the data).

The result is float64 ``[min, max, smallest nonzero |x|, whole]``, as
:func:`data_summary_torch` (the torch twin) returns it: NaN anywhere makes the
first three NaN and ``whole`` 0; infinity counts as a whole number, as
``round`` leaves it; no nonzero value gives ``inf``. Both return the same values
(a zero extreme may differ in its sign).
"""

from __future__ import annotations

import contextlib

import torch

from ...config import triton_available
from ._magnitude import smallest_nonzero_magnitude

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised on machines without triton
    triton = None
    tl = None

__all__ = ["data_summary", "data_summary_torch", "data_summary_supported"]

# elements each program reduces (its partial facts: five values)
_BLOCK = 1024
_ITERS = 8
# the joining program reads the partials this many at a time
_JOIN_BLOCK = 1024

if triton is not None:

    @triton.jit(do_not_specialize=["numel"])
    def _summary_kernel(X, PART, numel, BLOCK: tl.constexpr, ITERS: tl.constexpr, SCRUB: tl.constexpr):
        pid = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        low = tl.full([BLOCK], float("inf"), tl.float32)
        high = tl.full([BLOCK], float("-inf"), tl.float32)
        tiny = tl.full([BLOCK], float("inf"), tl.float32)
        whole = tl.full([BLOCK], 1, tl.int32)
        nan = tl.zeros([BLOCK], tl.int32)
        base = pid.to(tl.int64) * (BLOCK * ITERS)
        for i in range(ITERS):
            at = base + i * BLOCK + offs
            inside = at < numel
            x = tl.load(X + at, mask=inside, other=0.0)
            is_nan = x != x
            counted = inside & (x == x)
            low = tl.minimum(low, tl.where(counted, x, float("inf")))
            high = tl.maximum(high, tl.where(counted, x, float("-inf")))
            size = tl.abs(x)
            tiny = tl.minimum(tiny, tl.where(counted & (size > 0.0), size, float("inf")))
            whole = tl.minimum(whole, tl.where(inside & (x != tl.floor(x)), 0, 1))
            nan = tl.maximum(nan, tl.where(inside & is_nan, 1, 0))
            if SCRUB:
                tl.store(X + at, tl.where(is_nan | (size == float("inf")), 0.0, x), mask=inside)
        out = PART + pid * 5
        tl.store(out, tl.min(low, axis=0))
        tl.store(out + 1, tl.max(high, axis=0))
        tl.store(out + 2, tl.min(tiny, axis=0))
        tl.store(out + 3, tl.min(whole, axis=0).to(tl.float32))
        tl.store(out + 4, tl.max(nan, axis=0).to(tl.float32))

    @triton.jit(do_not_specialize=["n_parts"])
    def _join_kernel(PART, OUT, n_parts, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        low = tl.full([BLOCK], float("inf"), tl.float32)
        high = tl.full([BLOCK], float("-inf"), tl.float32)
        tiny = tl.full([BLOCK], float("inf"), tl.float32)
        whole = tl.full([BLOCK], 1.0, tl.float32)
        nan = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_parts, BLOCK):
            at = start + offs
            inside = at < n_parts
            low = tl.minimum(low, tl.load(PART + at * 5, mask=inside, other=float("inf")))
            high = tl.maximum(high, tl.load(PART + at * 5 + 1, mask=inside, other=float("-inf")))
            tiny = tl.minimum(tiny, tl.load(PART + at * 5 + 2, mask=inside, other=float("inf")))
            whole = tl.minimum(whole, tl.load(PART + at * 5 + 3, mask=inside, other=1.0))
            nan = tl.maximum(nan, tl.load(PART + at * 5 + 4, mask=inside, other=0.0))
        any_nan = tl.max(nan, axis=0) > 0.0
        tl.store(OUT, tl.where(any_nan, float("nan"), tl.min(low, axis=0)).to(tl.float64))
        tl.store(OUT + 1, tl.where(any_nan, float("nan"), tl.max(high, axis=0)).to(tl.float64))
        tl.store(OUT + 2, tl.where(any_nan, float("nan"), tl.min(tiny, axis=0)).to(tl.float64))
        tl.store(OUT + 3, tl.where(any_nan, 0.0, tl.min(whole, axis=0)).to(tl.float64))


def data_summary_supported(X: torch.Tensor) -> bool:
    """Whether :func:`data_summary` runs on its kernel here: contiguous non-empty float32 data where Triton launches."""
    return (X.dtype == torch.float32 and X.numel() > 0 and X.is_contiguous() and triton is not None
            and triton_available(X.device))


def data_summary_torch(X: torch.Tensor, scrub: bool = False) -> torch.Tensor:
    """float64 ``[min, max, smallest nonzero |x|, whole]`` of non-empty ``X`` in torch (``scrub``: NaN and infinity
    then set to zero in place)."""
    whole = (X == torch.round(X)).all().to(X.dtype)
    facts = torch.stack([*torch.aminmax(X), smallest_nonzero_magnitude(X), whole]).double()
    if scrub:
        torch.nan_to_num_(X, nan=0.0, posinf=0.0, neginf=0.0)
    return facts


def data_summary(X: torch.Tensor, scrub: bool = False) -> torch.Tensor:
    """:func:`data_summary_torch` in two launches where the kernel runs (:func:`data_summary_supported`), else the twin.

    No host wait: the facts stay on the device (a captured search copies them out with its results).
    """
    if not data_summary_supported(X):
        return data_summary_torch(X, scrub)
    numel = X.numel()
    programs = triton.cdiv(numel, _BLOCK * _ITERS)
    parts = torch.empty((programs, 5), dtype=torch.float32, device=X.device)
    out = torch.empty(4, dtype=torch.float64, device=X.device)
    with torch.cuda.device(X.device) if X.is_cuda else contextlib.nullcontext():  # launched on the data's GPU
        _summary_kernel[(programs,)](X, parts, numel, BLOCK=_BLOCK, ITERS=_ITERS, SCRUB=scrub)
        _join_kernel[(1,)](parts, out, programs, BLOCK=_JOIN_BLOCK)
    return out
