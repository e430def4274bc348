"""Triton when it is installed, else stand-ins that let kernel modules import.

Triton is an optional extra: the CPU build of torch does not bring it, and
importing any module of the package (doctest collection imports them all) must
not need it. Kernels decorated with the stand-in ``jit`` raise a clear
``ImportError`` only when launched; the host-side helpers the launchers use
(``cdiv``, ``next_power_of_2``) keep working.
"""

from __future__ import annotations

import functools

__all__ = ["HAVE_TRITON", "triton", "tl"]

_MISSING = ("this operation runs a Triton kernel and the 'triton' package is not installed; "
            "install it (pip install 'gpumine[gpu]') or use backend='torch'")

try:
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:
    HAVE_TRITON = False

    class _UnavailableKernel:
        """A kernel that cannot run without Triton: launching it (``kernel[grid](...)``) raises."""

        def __init__(self, fn):
            functools.update_wrapper(self, fn)

        def __getitem__(self, grid):
            raise ImportError(_MISSING)

        def __call__(self, *args, **kwargs):
            raise ImportError(_MISSING)

    class _MissingTriton:
        """The parts of the ``triton`` module used at import time and by host-side launch code."""

        @staticmethod
        def jit(fn=None, **options):
            if fn is None:
                return _UnavailableKernel
            return _UnavailableKernel(fn)

        @staticmethod
        def cdiv(a: int, b: int) -> int:
            return -(-a // b)

        @staticmethod
        def next_power_of_2(n: int) -> int:
            return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()

    triton = _MissingTriton()
    tl = None
