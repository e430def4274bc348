"""Triton kernels of the counting engine, each with the signature of its torch twin in :mod:`._ops`.

All kernels stream 64-bit words in tiles of ``BW`` words, AND them, count bits
with a SWAR popcount (exact for signed int64 with arithmetic shifts, and it runs
in the CPU interpreter too), reduce per program, and add the partial sums into
the output with ``atomic_add``: the word range is split over several programs
so that a few patterns over many rows still fill the GPU. Integer atomics make
the result exact and deterministic.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["and_count_matrix", "bitslice_level_counts", "bitslice_contingency", "term_counts", "bitslice_range_counts"]

_TARGET_PROGRAMS = 1024


@triton.jit
def _popc(x):
    x = x - ((x >> 1) & 0x5555555555555555)
    x = (x & 0x3333333333333333) + ((x >> 2) & 0x3333333333333333)
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0F
    return (x * 0x0101010101010101) >> 56


def _split(nw: int, bw: int, programs: int) -> tuple[int, int]:
    """(number of word segments, words per segment as a multiple of ``bw``)."""
    tiles = max(1, triton.cdiv(nw, bw))
    n_split = max(1, min(tiles, _TARGET_PROGRAMS // max(1, programs)))
    seg = triton.cdiv(tiles, n_split) * bw
    return triton.cdiv(nw, seg) if nw else 1, seg


# ----------------------------------------------------------------------------- and_count_matrix
@triton.jit
def _and_count_kernel(a_ptr, r_ptr, out_ptr, na, nr, nw, seg,
                      BA: tl.constexpr, BR: tl.constexpr, BW: tl.constexpr):
    pa = tl.program_id(0)
    pr = tl.program_id(1)
    ps = tl.program_id(2)
    ia = (pa * BA + tl.arange(0, BA)).to(tl.int64)
    ir = (pr * BR + tl.arange(0, BR)).to(tl.int64)
    ma = ia < na
    mr = ir < nr
    acc = tl.zeros((BA, BR), dtype=tl.int64)
    w_start = ps.to(tl.int64) * seg
    for w0 in range(0, seg, BW):
        w = w_start + w0 + tl.arange(0, BW)
        mw = w < nw
        a = tl.load(a_ptr + ia[:, None] * nw + w[None, :], mask=ma[:, None] & mw[None, :], other=0)
        r = tl.load(r_ptr + ir[:, None] * nw + w[None, :], mask=mr[:, None] & mw[None, :], other=0)
        x = a[:, None, :] & r[None, :, :]
        acc += tl.sum(_popc(x), axis=2)
    tl.atomic_add(out_ptr + ia[:, None] * nr + ir[None, :], acc, mask=ma[:, None] & mr[None, :])


def and_count_matrix(A: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    A = A.contiguous()
    R = R.contiguous()
    na, nw = A.shape
    nr = R.shape[0]
    out = torch.zeros(na, nr, dtype=torch.int64, device=A.device)
    if na == 0 or nr == 0 or nw == 0:
        return out
    BA, BR, BW = 16, 16, 32
    ga, gr = triton.cdiv(na, BA), triton.cdiv(nr, BR)
    n_split, seg = _split(nw, BW, ga * gr)
    _and_count_kernel[(ga, gr, n_split)](A, R, out, na, nr, nw, seg, BA=BA, BR=BR, BW=BW)
    return out


# ----------------------------------------------------------------------------- bit-slice contingency
@triton.jit
def _bitslice_cont_kernel(words_ptr, offs_ptr, nbits_ptr, nlev_ptr, outoff_ptr, r_ptr, out_ptr, nr, nw, seg, n_rsplit,
                          BV: tl.constexpr, BR: tl.constexpr, BW: tl.constexpr):
    col = tl.program_id(0)
    pv = tl.program_id(1)
    pz = tl.program_id(2)
    pr = pz % n_rsplit
    ps = pz // n_rsplit
    off = tl.load(offs_ptr + col)
    nb = tl.load(nbits_ptr + col)
    nl = tl.load(nlev_ptr + col)
    oo = tl.load(outoff_ptr + col)
    v = (pv * BV + tl.arange(0, BV)).to(tl.int64)
    ir = (pr * BR + tl.arange(0, BR)).to(tl.int64)
    mv = v < nl
    mr = ir < nr
    acc = tl.zeros((BV, BR), dtype=tl.int64)
    w_start = ps.to(tl.int64) * seg
    for w0 in range(0, seg, BW):
        w = w_start + w0 + tl.arange(0, BW)
        mw = w < nw
        eq = tl.full((BV, BW), -1, tl.int64)
        for k in range(0, nb):
            s = tl.load(words_ptr + (off + k) * nw + w, mask=mw, other=0)
            bit = ((v >> k) & 1) != 0
            eq = eq & tl.where(bit[:, None], s[None, :], s[None, :] ^ -1)
        r = tl.load(r_ptr + ir[:, None] * nw + w[None, :], mask=mr[:, None] & mw[None, :], other=0)
        x = eq[:, None, :] & r[None, :, :]
        acc += tl.sum(_popc(x), axis=2)
    tl.atomic_add(out_ptr + (oo + v)[:, None] * nr + ir[None, :], acc, mask=mv[:, None] & mr[None, :])


def bitslice_contingency(words, offs, nbits, nlevels, R) -> torch.Tensor:
    """Stacked ``(sum(nlevels), R)`` level × row-set counts of several bit-sliced columns in one launch."""
    words = words.contiguous()
    R = R.contiguous()
    dev = words.device
    nw = words.shape[1]
    nr = R.shape[0]
    total = int(sum(nlevels))
    out = torch.zeros(total, nr, dtype=torch.int64, device=dev)
    if total == 0 or nr == 0 or nw == 0 or len(offs) == 0:
        return out
    outoff = [0]
    for n in nlevels[:-1]:
        outoff.append(outoff[-1] + int(n))
    t = lambda x: torch.tensor([int(i) for i in x], dtype=torch.int64, device=dev)  # noqa: E731
    BV, BR, BW = 16, 16, 32
    gv = triton.cdiv(max(nlevels), BV)
    gr = triton.cdiv(nr, BR)
    n_split, seg = _split(nw, BW, len(offs) * gv * gr)
    _bitslice_cont_kernel[(len(offs), gv, gr * n_split)](
        words, t(offs), t(nbits), t(nlevels), t(outoff), R, out, nr, nw, seg, gr, BV=BV, BR=BR, BW=BW)
    return out


def bitslice_level_counts(slices: torch.Tensor, n_levels: int, R: torch.Tensor) -> torch.Tensor:
    return bitslice_contingency(slices, [0], [slices.shape[0]], [int(n_levels)], R)


# ----------------------------------------------------------------------------- term counts (patterns)
@triton.jit
def _term_kernel(words_ptr, rows_ptr, neg_ptr, mask_ptr, out_ptr, P, T, nw, seg,
                 BP: tl.constexpr, BW: tl.constexpr):
    pp = tl.program_id(0)
    ps = tl.program_id(1)
    p = (pp * BP + tl.arange(0, BP)).to(tl.int64)
    mp = p < P
    cnt = tl.zeros((BP,), dtype=tl.int64)
    w_start = ps.to(tl.int64) * seg
    for w0 in range(0, seg, BW):
        w = w_start + w0 + tl.arange(0, BW)
        mw = w < nw
        acc = tl.load(mask_ptr + w, mask=mw, other=0)[None, :] & tl.full((BP, BW), -1, tl.int64)
        for t in range(0, T):
            row = tl.load(rows_ptr + p * T + t, mask=mp, other=-1)
            ng = tl.load(neg_ptr + p * T + t, mask=mp, other=0)
            valid = row >= 0
            x = tl.load(words_ptr + row[:, None] * nw + w[None, :], mask=valid[:, None] & mw[None, :], other=0)
            x = x ^ tl.where(ng != 0, -1, 0).to(tl.int64)[:, None]
            acc = acc & tl.where(valid[:, None], x, -1)
        cnt += tl.sum(_popc(acc), axis=1)
    tl.atomic_add(out_ptr + p, cnt, mask=mp)


def term_counts(words, rows, neg, mask) -> torch.Tensor:
    words = words.contiguous()
    P, T = rows.shape
    nw = words.shape[1]
    out = torch.zeros(P, dtype=torch.int64, device=words.device)
    if P == 0 or nw == 0:
        return out
    rows = rows.to(torch.int64).contiguous()
    neg8 = neg.to(torch.int8).contiguous()
    BP, BW = 16, 64
    gp = triton.cdiv(P, BP)
    n_split, seg = _split(nw, BW, gp)
    _term_kernel[(gp, n_split)](words, rows, neg8, mask.contiguous(), out, P, T, nw, seg, BP=BP, BW=BW)
    return out


# ----------------------------------------------------------------------------- bit-slice ranges
@triton.jit
def _range_kernel(words_ptr, offs_ptr, nbits_ptr, lo_ptr, hi_ptr, mask_ptr, out_ptr, P, maxb, nw, seg,
                  BP: tl.constexpr, BW: tl.constexpr):
    pp = tl.program_id(0)
    ps = tl.program_id(1)
    p = (pp * BP + tl.arange(0, BP)).to(tl.int64)
    mp = p < P
    off = tl.load(offs_ptr + p, mask=mp, other=0)
    nb = tl.load(nbits_ptr + p, mask=mp, other=0)
    lo = tl.load(lo_ptr + p, mask=mp, other=0)
    hi = tl.load(hi_ptr + p, mask=mp, other=0)
    cnt = tl.zeros((BP,), dtype=tl.int64)
    w_start = ps.to(tl.int64) * seg
    for w0 in range(0, seg, BW):
        w = w_start + w0 + tl.arange(0, BW)
        mw = w < nw
        lt_lo = tl.zeros((BP, BW), dtype=tl.int64)
        lt_hi = tl.zeros((BP, BW), dtype=tl.int64)
        eq_lo = tl.full((BP, BW), -1, tl.int64)
        eq_hi = tl.full((BP, BW), -1, tl.int64)
        for kk in range(0, maxb):
            k = maxb - 1 - kk
            valid = (k < nb) & mp
            s = tl.load(words_ptr + (off + k)[:, None] * nw + w[None, :], mask=valid[:, None] & mw[None, :], other=0)
            ns = s ^ -1
            blo = (((lo >> k) & 1) != 0)[:, None]
            bhi = (((hi >> k) & 1) != 0)[:, None]
            lt_lo = lt_lo | tl.where(blo, eq_lo & ns, 0)
            eq_lo = eq_lo & tl.where(blo, s, ns)
            lt_hi = lt_hi | tl.where(bhi, eq_hi & ns, 0)
            eq_hi = eq_hi & tl.where(bhi, s, ns)
        m = tl.load(mask_ptr + w, mask=mw, other=0)[None, :]
        res = (lt_hi | eq_hi) & (lt_lo ^ -1) & m
        cnt += tl.sum(_popc(res), axis=1)
    tl.atomic_add(out_ptr + p, cnt, mask=mp)


def bitslice_range_counts(words, offs, nbits, lo, hi, mask) -> torch.Tensor:
    words = words.contiguous()
    P = offs.shape[0]
    nw = words.shape[1]
    out = torch.zeros(P, dtype=torch.int64, device=words.device)
    if P == 0 or nw == 0:
        return out
    c = lambda x: x.to(torch.int64).contiguous()  # noqa: E731
    BP, BW = 16, 64
    gp = triton.cdiv(P, BP)
    n_split, seg = _split(nw, BW, gp)
    _range_kernel[(gp, n_split)](words, c(offs), c(nbits), c(lo), c(hi), mask.contiguous(), out, P, int(nbits.max()),
                                 nw, seg, BP=BP, BW=BW)
    return out
