"""Bit-vector primitives in plain torch (the CPU path and the oracle for the Triton kernels).

A *bitmap* over ``n_rows`` rows is an int64 tensor of ``n_words = ceil(n_rows / 64)``
words; row ``r`` is bit ``r % 64`` of word ``r // 64``. Padding bits past ``n_rows``
in the last word are always zero in every stored bitmap, and every operation that
negates a bitmap ANDs the result with the tail mask, so padding bits never count.
"""

from __future__ import annotations

import numpy as np
import torch

_NP_POPCOUNT = getattr(np, "bitwise_count", None)  # NumPy >= 2.0: a native popcount on the CPU

__all__ = [
    "n_words_for",
    "tail_mask",
    "all_rows",
    "popcount64",
    "popcount_sum",
    "pack_bool",
    "pack_codes",
    "pack_groups",
    "unpack",
]

_M1 = 0x5555555555555555
_M2 = 0x3333333333333333
_M4 = 0x0F0F0F0F0F0F0F0F
_H01 = 0x0101010101010101


def n_words_for(n_rows: int) -> int:
    """Number of 64-bit words holding ``n_rows`` bits."""
    return (int(n_rows) + 63) // 64


def _word_value(bits: int) -> int:
    """A Python int with the low ``bits`` bits set, as a signed int64 value."""
    v = (1 << bits) - 1
    return v - (1 << 64) if v >= (1 << 63) else v


def tail_mask(n_rows: int, device=None) -> torch.Tensor:
    """The all-rows bitmap: ones for the ``n_rows`` real rows, zeros in the padding."""
    nw = n_words_for(n_rows)
    words = torch.full((nw,), -1, dtype=torch.int64, device=device)
    rem = n_rows % 64
    if nw and rem:
        words[-1] = _word_value(rem)
    return words


all_rows = tail_mask


def popcount64(x: torch.Tensor) -> torch.Tensor:
    """Number of set bits of every int64 word (SWAR; exact with arithmetic shifts).

    Examples
    --------
    >>> popcount64(torch.tensor([0, 1, 3, -1])).tolist()
    [0, 1, 2, 64]
    """
    if _NP_POPCOUNT is not None and x.device.type == "cpu" and not x.requires_grad:
        # torch has no popcount; NumPy's uses the CPU instruction (unsigned view: it counts |x| otherwise)
        arr = x.contiguous().numpy().view(np.uint64)
        return torch.from_numpy(_NP_POPCOUNT(arr).astype(np.int64))
    return popcount64_swar(x)


def popcount64_swar(x: torch.Tensor) -> torch.Tensor:
    """SWAR popcount in plain torch ops (any device; the formula the Triton kernels use)."""
    x = x - ((x >> 1) & _M1)
    x = (x & _M2) + ((x >> 2) & _M2)
    x = (x + (x >> 4)) & _M4
    return (x * _H01) >> 56


def popcount_sum(x: torch.Tensor, dim=-1) -> torch.Tensor:
    """Sum of set bits along ``dim`` (int64)."""
    if _NP_POPCOUNT is not None and x.device.type == "cpu" and not x.requires_grad:
        arr = x.contiguous().numpy().view(np.uint64)
        return torch.from_numpy(np.asarray(_NP_POPCOUNT(arr).sum(axis=dim, dtype=np.int64)))
    return popcount64(x).sum(dim=dim)


def pack_bool(mask: torch.Tensor) -> torch.Tensor:
    """Pack a boolean tensor ``(..., n_rows)`` into bitmaps ``(..., n_words)``."""
    n = mask.shape[-1]
    nw = n_words_for(n)
    pad = nw * 64 - n
    m = mask.to(torch.int64)
    if pad:
        m = torch.nn.functional.pad(m, (0, pad))
    m = m.reshape(*mask.shape[:-1], nw, 64)
    shifts = torch.arange(64, device=mask.device, dtype=torch.int64)
    # distinct bits: the sum equals the OR (1 << 63 wraps to the sign bit, as wanted)
    return (m << shifts).sum(dim=-1)


def pack_groups(group: torch.Tensor, n_groups: int, n_rows: int, rows: torch.Tensor | None = None) -> torch.Tensor:
    """One bitmap per group in a single O(n) scatter.

    ``group[i]`` is the group of row ``rows[i]`` (``rows`` defaults to ``arange``);
    negative groups are skipped. Each row may appear at most once per group.
    Returns ``(n_groups, n_words)`` int64.
    """
    device = group.device
    nw = n_words_for(n_rows)
    if rows is None:
        rows = torch.arange(group.shape[0], device=device)
    keep = group >= 0
    if not bool(keep.all()):
        group, rows = group[keep], rows[keep]
    out = torch.zeros(n_groups * nw, dtype=torch.int64, device=device)
    if group.numel():
        flat = group.to(torch.int64) * nw + (rows >> 6)
        bit = torch.ones_like(rows, dtype=torch.int64) << (rows & 63)
        out.scatter_add_(0, flat, bit)
    return out.reshape(n_groups, nw)


def pack_codes(codes: torch.Tensor, n_levels: int) -> torch.Tensor:
    """Bitmaps of one integer-coded column: ``(n_levels, n_words)``; codes outside ``[0, n_levels)`` set no bit."""
    codes = codes.to(torch.int64)
    g = torch.where((codes >= 0) & (codes < n_levels), codes, torch.full_like(codes, -1))
    return pack_groups(g, n_levels, codes.shape[0])


def unpack(words: torch.Tensor, n_rows: int) -> torch.Tensor:
    """Bitmaps ``(..., n_words)`` → boolean ``(..., n_rows)``."""
    shifts = torch.arange(64, device=words.device, dtype=torch.int64)
    bits = ((words.unsqueeze(-1) >> shifts) & 1).to(torch.bool)
    return bits.reshape(*words.shape[:-1], -1)[..., :n_rows]
