"""Count operations over bitmap / bit-slice stores, and the histogram-on-codes path.

Two layers:

* **Kernels** (``and_count_matrix``, ``bitslice_level_counts``, ``term_counts``,
  ``bitslice_range_counts``): tensor → tensor, each with a torch version here and a
  Triton version of the same signature in :mod:`._triton`; ``backend`` picks one.
* **Ops** on a store: :func:`element_count`, :func:`co_occurrence_count`,
  :func:`range_count`, their batched forms :func:`pattern_counts` and
  :func:`range_counts` (many patterns in one launch), and
  :func:`contingency_table` / :func:`contingency_tables` (one attribute, or all
  attributes, × a set of row sets such as the class bitmaps, in one pass).

Values in these functions are *level codes* (see :meth:`BitmapStore.code`); every
op takes an optional row ``mask`` (a packed ``(n_words,)`` int64 bitmap, or a
boolean ``(n_rows,)`` tensor) — the seed's existential bitmap.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from ..config import resolve_backend, working_memory_bytes
from ._bits import pack_bool, pack_codes, popcount_sum
from ._store import BitmapStore, _BitStore

__all__ = [
    "and_count_matrix",
    "bitslice_level_counts",
    "term_counts",
    "bitslice_range_counts",
    "element_count",
    "co_occurrence_count",
    "range_count",
    "pattern_counts",
    "range_counts",
    "contingency_table",
    "contingency_tables",
    "histogram_contingency",
    "grouped_histogram",
    "histogram_backend",
    "level_offsets",
    "row_sets",
    "choose_representation",
    "measured_costs",
    "representation_costs",
]


def _budget(device) -> int:
    return max(working_memory_bytes(None, device), 1 << 20)


def _backend(backend, device) -> str:
    return resolve_backend(backend, device, has_triton_kernel=True)


def _tri():
    from . import _triton

    return _triton


# ----------------------------------------------------------------------------- kernels (torch)
def _and_count_matrix_torch(A: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    na, nw = A.shape
    nr = R.shape[0]
    out = torch.zeros(na, nr, dtype=torch.int64, device=A.device)
    if na == 0 or nr == 0 or nw == 0:
        return out
    budget = _budget(A.device) // 32  # int64 elements of the (a, r, w) temporary, with headroom
    ca = max(1, min(na, budget // max(1, nr * min(nw, 4096))))
    cw = max(1, min(nw, budget // max(1, ca * nr)))
    for a0 in range(0, na, ca):
        a = A[a0:a0 + ca]
        acc = out[a0:a0 + ca]
        for w0 in range(0, nw, cw):
            acc += popcount_sum(a[:, None, w0:w0 + cw] & R[None, :, w0:w0 + cw], -1)
    return out


def _bitslice_level_counts_torch(slices: torch.Tensor, n_levels: int, R: torch.Tensor) -> torch.Tensor:
    nb, nw = slices.shape
    nr = R.shape[0]
    out = torch.zeros(n_levels, nr, dtype=torch.int64, device=slices.device)
    if nw == 0 or nr == 0 or n_levels == 0:
        return out
    levels = torch.arange(n_levels, device=slices.device)
    bits = [((levels >> k) & 1).bool()[:, None] for k in range(nb)]
    cw = max(1, min(nw, _budget(slices.device) // (32 * max(1, n_levels * max(nr, 2)))))
    for w0 in range(0, nw, cw):
        sl = slices[:, w0:w0 + cw]
        eq = torch.full((n_levels, sl.shape[1]), -1, dtype=torch.int64, device=slices.device)
        for k in range(nb):
            eq &= torch.where(bits[k], sl[k][None, :], ~sl[k][None, :])
        out += _and_count_matrix_torch(eq, R[:, w0:w0 + cw])
    return out


def _term_counts_torch(words, rows, neg, mask):
    P, T = rows.shape
    nw = words.shape[1]
    out = torch.zeros(P, dtype=torch.int64, device=words.device)
    if P == 0 or nw == 0:
        return out
    valid = rows >= 0
    safe = rows.clamp_min(0)
    flip = torch.where(neg, -1, 0).to(torch.int64)[:, :, None]
    cp = max(1, min(P, _budget(words.device) // (32 * max(1, T * min(nw, 4096)))))
    cw = max(1, min(nw, _budget(words.device) // (32 * max(1, cp * T))))
    for p0 in range(0, P, cp):
        r, v, f = safe[p0:p0 + cp], valid[p0:p0 + cp], flip[p0:p0 + cp]
        for w0 in range(0, nw, cw):
            acc = mask[None, w0:w0 + cw].expand(r.shape[0], -1).clone()
            for t in range(T):
                x = words[r[:, t], w0:w0 + cw] ^ f[:, t]
                acc &= torch.where(v[:, t:t + 1], x, torch.full_like(x, -1))
            out[p0:p0 + cp] += popcount_sum(acc, -1)
    return out


def _bitslice_range_counts_torch(words, offs, nbits, lo, hi, mask):
    P = offs.shape[0]
    nw = words.shape[1]
    out = torch.zeros(P, dtype=torch.int64, device=words.device)
    if P == 0 or nw == 0:
        return out
    maxb = int(nbits.max())
    cw = max(1, min(nw, _budget(words.device) // (64 * max(1, P))))
    for w0 in range(0, nw, cw):
        m = mask[None, w0:w0 + cw]
        ones = torch.full((P, m.shape[1]), -1, dtype=torch.int64, device=words.device)
        lt_lo, eq_lo = torch.zeros_like(ones), ones.clone()
        lt_hi, eq_hi = torch.zeros_like(ones), ones.clone()
        for k in range(maxb - 1, -1, -1):
            valid = (k < nbits)[:, None]
            s = words[(offs + k).clamp_max(words.shape[0] - 1), w0:w0 + cw]
            s = torch.where(valid, s, torch.zeros_like(s))
            for c, lt, eq in ((lo, lt_lo, eq_lo), (hi, lt_hi, eq_hi)):
                b = ((c >> k) & 1).bool()[:, None]
                lt |= torch.where(b, eq & ~s, torch.zeros_like(s))
                eq &= torch.where(b, s, ~s)
        res = (lt_hi | eq_hi) & ~lt_lo & m
        out += popcount_sum(res, -1)
    return out


# ----------------------------------------------------------------------------- kernels (dispatch)
def and_count_matrix(A: torch.Tensor, R: torch.Tensor, *, backend="auto") -> torch.Tensor:
    """``out[i, j] = popcount(A[i] & R[j])`` summed over words; ``(n_a, n_r)`` int64."""
    if _backend(backend, A.device) == "triton":
        return _tri().and_count_matrix(A, R)
    return _and_count_matrix_torch(A, R)


def bitslice_level_counts(slices: torch.Tensor, n_levels: int, R: torch.Tensor, *, backend="auto") -> torch.Tensor:
    """``out[v, j] = popcount(EQ_v & R[j])`` where ``EQ_v`` selects code ``v`` of a bit-sliced column.

    ``R`` must have zero padding bits (the negated slices set them).
    """
    if _backend(backend, slices.device) == "triton":
        return _tri().bitslice_level_counts(slices, n_levels, R)
    return _bitslice_level_counts_torch(slices, n_levels, R)


def term_counts(words, rows, neg, mask, *, backend="auto") -> torch.Tensor:
    """``out[p] = popcount(mask & AND_t (words[rows[p, t]] ^ (neg[p, t] ? ~0 : 0)))``; ``rows < 0`` is no term."""
    if _backend(backend, words.device) == "triton":
        return _tri().term_counts(words, rows, neg, mask)
    return _term_counts_torch(words, rows, neg, mask)


def bitslice_range_counts(words, offs, nbits, lo, hi, mask, *, backend="auto") -> torch.Tensor:
    """Rows with ``lo[p] <= code <= hi[p]`` in the bit-sliced column at ``offs[p]`` of ``nbits[p]`` slices.

    O'Neil & Quass's bit-sliced comparison (most significant slice first); needs
    ``0 <= lo <= hi < 2**nbits``.
    """
    if _backend(backend, words.device) == "triton":
        return _tri().bitslice_range_counts(words, offs, nbits, lo, hi, mask)
    return _bitslice_range_counts_torch(words, offs, nbits, lo, hi, mask)


# ----------------------------------------------------------------------------- helpers
def _check_store(store):
    if not isinstance(store, _BitStore):
        raise TypeError(f"store must be a BitmapStore or BitSliceStore; got {type(store).__name__}")


def _mask_words(store, mask) -> torch.Tensor:
    if mask is None:
        return store.tail
    mask = torch.as_tensor(mask, device=store.device)
    if mask.dtype == torch.bool:
        if mask.shape != (store.n_rows,):
            raise ValueError(f"a boolean mask must have shape ({store.n_rows},); got {tuple(mask.shape)}")
        return pack_bool(mask)
    if mask.dtype != torch.int64 or mask.shape != (store.n_words,):
        raise ValueError(
            f"mask must be a boolean (n_rows,) tensor or a packed int64 ({store.n_words},) bitmap; "
            f"got dtype {mask.dtype} shape {tuple(mask.shape)}"
        )
    return mask & store.tail


def _check_level(store, j, v, what="value"):
    n = store.columns[j].n_levels
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{what} must be an integer level code; got {v!r}; use store.code(col, value) for a raw value")
    if not 0 <= int(v) < n:
        raise ValueError(f"{what}={v} is not a level code of column {store.columns[j].name!r} (0..{n - 1})")
    return int(v)


def row_sets(store, by, mask=None) -> torch.Tensor:
    """Row sets ``(R, n_words)`` for contingency tables, ANDed with ``mask``.

    ``by`` is a column of the store (its level bitmaps), a 1-D tensor/array of
    integer labels ``0..R-1`` per row (packed into one bitmap per label), or a
    ``(R, n_words)`` int64 tensor of bitmaps.
    """
    m = _mask_words(store, mask)
    if isinstance(by, (int, str, np.integer)) and not isinstance(by, bool):
        j = store.column_index(by)
        sets = store.bitmaps(j) if isinstance(store, BitmapStore) else store.level_bitmaps(j)
        return sets & m
    t = torch.as_tensor(np.asarray(by) if not isinstance(by, torch.Tensor) else by, device=store.device)
    if t.ndim == 1:
        if t.shape[0] != store.n_rows:
            raise ValueError(f"labels have {t.shape[0]} entries but the store has {store.n_rows} rows")
        t = t.to(torch.int64)
        n = int(t.max()) + 1 if t.numel() else 0
        return pack_codes(t, n) & m
    if t.ndim != 2 or t.shape[1] != store.n_words or t.dtype != torch.int64:
        raise ValueError(f"row sets must be int64 of shape (R, {store.n_words}); got {t.dtype} {tuple(t.shape)}")
    return t & m


# ----------------------------------------------------------------------------- ops
def pattern_counts(store, patterns, mask=None, *, backend="auto") -> torch.Tensor:
    """Counts of many patterns in one launch.

    ``patterns`` is ``(P, 2)`` of ``[col, code]`` (element counts) or ``(P, 4)``
    of ``[col1, code1, col2, code2]`` (co-occurrence counts; ``col2 = -1`` for
    none). Returns ``(P,)`` int64 on the store's device.
    """
    _check_store(store)
    pat = torch.as_tensor(np.asarray(patterns) if not isinstance(patterns, torch.Tensor) else patterns).to(torch.int64).cpu()
    if pat.ndim != 2 or pat.shape[1] not in (2, 4):
        raise ValueError(f"patterns must have shape (P, 2) or (P, 4); got {tuple(pat.shape)}")
    if pat.shape[1] == 2:
        pat = torch.cat([pat, torch.full_like(pat, -1)], 1)
    m = _mask_words(store, mask)
    P = pat.shape[0]
    nlev = torch.tensor(store.n_levels + [1])
    offs = torch.tensor(store.offsets[:-1] + [0])
    widths = torch.tensor(store.widths + [0])
    cols = pat[:, [0, 2]]
    vals = pat[:, [1, 3]]
    if P and (bool((cols[:, 0] < 0).any()) or bool((cols >= store.n_columns).any()) or bool((cols < -1).any())):
        raise ValueError(f"pattern columns must lie in [0, {store.n_columns}) (col2 may be -1)")
    cidx = torch.where(cols < 0, torch.full_like(cols, store.n_columns), cols)
    present = cols >= 0
    if P and bool(((vals < 0) | (vals >= nlev[cidx]))[present].any()):
        raise ValueError("pattern codes must lie in [0, n_levels) of their column")
    if isinstance(store, BitmapStore):
        rows = torch.where(present, offs[cidx] + vals, torch.full_like(vals, -1))
        neg = torch.zeros_like(rows, dtype=torch.bool)
    else:
        maxb = max(store.widths)
        k = torch.arange(maxb)
        rows = offs[cidx][:, :, None] + k  # (P, 2, maxb)
        ok = present[:, :, None] & (k < widths[cidx][:, :, None])
        rows = torch.where(ok, rows, torch.full_like(rows, -1)).reshape(P, -1)
        neg = (((vals[:, :, None] >> k) & 1) == 0).reshape(P, -1)
    return term_counts(store.words, rows.to(store.device), neg.to(store.device), m, backend=backend)


def element_count(store, col, value, mask=None, *, backend="auto") -> int:
    """Rows whose column ``col`` has level code ``value`` (under ``mask``)."""
    j = store.column_index(col)
    v = _check_level(store, j, value)
    return int(pattern_counts(store, [[j, v]], mask, backend=backend)[0])


def co_occurrence_count(store, col1, value1, col2, value2, mask=None, *, backend="auto") -> int:
    """Rows where ``col1`` has code ``value1`` and ``col2`` has code ``value2`` (under ``mask``)."""
    j1, j2 = store.column_index(col1), store.column_index(col2)
    v1, v2 = _check_level(store, j1, value1, "value1"), _check_level(store, j2, value2, "value2")
    return int(pattern_counts(store, [[j1, v1, j2, v2]], mask, backend=backend)[0])


def range_counts(store, ranges, mask=None, *, backend="auto") -> torch.Tensor:
    """Batched range counts: ``ranges`` is ``(P, 3)`` of ``[col, lo, hi]`` (inclusive codes)."""
    _check_store(store)
    r = torch.as_tensor(np.asarray(ranges) if not isinstance(ranges, torch.Tensor) else ranges).to(torch.int64).cpu()
    if r.ndim != 2 or r.shape[1] != 3:
        raise ValueError(f"ranges must have shape (P, 3) of [col, lo, hi]; got {tuple(r.shape)}")
    m = _mask_words(store, mask)
    P = r.shape[0]
    if P == 0:
        return torch.zeros(0, dtype=torch.int64, device=store.device)
    if bool((r[:, 0] < 0).any()) or bool((r[:, 0] >= store.n_columns).any()):
        raise ValueError(f"range columns must lie in [0, {store.n_columns})")
    nlev = torch.tensor(store.n_levels)[r[:, 0]]
    lo = r[:, 1].clamp_min(0)
    hi = torch.minimum(r[:, 2], nlev - 1)
    empty = lo > hi
    if isinstance(store, BitmapStore):
        # disjoint bitmaps: the count of a range is the sum of the element counts
        total = torch.zeros(P, dtype=torch.int64, device=store.device)
        counts = contingency_tables(store, m[None, :], backend=backend)[:, 0]
        offs = torch.tensor(store.offsets[:-1])[r[:, 0]]
        cs = torch.cat([torch.zeros(1, dtype=torch.int64, device=store.device), counts.cumsum(0)])
        a = (offs + lo).to(store.device)
        b = (offs + hi + 1).to(store.device)
        total = torch.where(empty.to(store.device), total, cs[b.clamp_min(a)] - cs[a])
        return total
    offs = torch.tensor(store.offsets[:-1])[r[:, 0]]
    nbits = torch.tensor(store.widths)[r[:, 0]]
    hi = torch.where(empty, lo, hi)
    out = bitslice_range_counts(store.words, offs.to(store.device), nbits.to(store.device), lo.to(store.device),
                                hi.to(store.device), m, backend=backend)
    return torch.where(empty.to(store.device), torch.zeros_like(out), out)


def range_count(store, col, lo, hi, mask=None, *, backend="auto") -> int:
    """Rows whose code in ``col`` lies in ``[lo, hi]`` (bit-slice comparison logic on a BitSliceStore)."""
    j = store.column_index(col)
    return int(range_counts(store, [[j, int(lo), int(hi)]], mask, backend=backend)[0])


def contingency_table(store, col, by, mask=None, *, backend="auto") -> torch.Tensor:
    """``(n_levels(col), R)`` counts of each level of ``col`` in each row set of ``by`` (see :func:`row_sets`).

    Examples
    --------
    >>> s = BitmapStore.from_codes([[0, 1], [1, 1], [1, 0], [0, 1]], device="cpu")
    >>> contingency_table(s, 0, 1).tolist()
    [[0, 2], [1, 1]]
    """
    _check_store(store)
    j = store.column_index(col)
    R = row_sets(store, by, mask)
    if isinstance(store, BitmapStore):
        return and_count_matrix(store.bitmaps(j), R, backend=backend)
    return bitslice_level_counts(store.slices(j), store.columns[j].n_levels, R, backend=backend)


def contingency_tables(store, by, cols=None, mask=None, *, backend="auto") -> torch.Tensor:
    """All attributes × row sets in one pass: ``(sum of n_levels over cols, R)`` stacked in column order.

    Row ``store.offsets[j] + v`` (for ``cols=None``) holds level ``v`` of column ``j``
    on a BitmapStore; use :func:`level_offsets` for the layout of any ``cols``.
    """
    _check_store(store)
    R = by if (isinstance(by, torch.Tensor) and by.ndim == 2 and mask is None) else row_sets(store, by, mask)
    cols = list(range(store.n_columns)) if cols is None else [store.column_index(c) for c in cols]
    be = _backend(backend, store.device)
    if isinstance(store, BitmapStore):
        if cols == list(range(store.n_columns)):
            return and_count_matrix(store.words, R, backend=be)
        idx = torch.cat([torch.arange(store.offsets[j], store.offsets[j + 1]) for j in cols]).to(store.device)
        return and_count_matrix(store.words[idx], R, backend=be)
    if be == "triton":
        return _tri().bitslice_contingency(store.words, [store.offsets[j] for j in cols], [store.widths[j] for j in cols],
                                           [store.columns[j].n_levels for j in cols], R)
    return torch.cat([_bitslice_level_counts_torch(store.slices(j), store.columns[j].n_levels, R) for j in cols], 0)


def level_offsets(n_levels) -> list[int]:
    """Start row of each column in a stacked contingency table (and the total at the end)."""
    return np.concatenate([[0], np.cumsum(n_levels)]).astype(np.int64).tolist()


# ----------------------------------------------------------------------------- histogram path
def histogram_contingency(codes: torch.Tensor, n_levels, labels: torch.Tensor, n_classes: int,
                          weights: torch.Tensor | None = None, *, backend="auto") -> torch.Tensor:
    """All attributes × class by one bincount over integer codes: ``(sum(n_levels), n_classes)``.

    ``codes`` is ``(n, d)`` with column ``j`` in ``[0, n_levels[j])``; ``labels``
    ``(n,)`` in ``[0, n_classes)``. Counts are int64, or float64 with ``weights``.
    ``backend``: see :func:`histogram_backend`.

    Examples
    --------
    >>> histogram_contingency(torch.tensor([[0, 1], [1, 1], [1, 0]]), [2, 2], torch.tensor([1, 1, 0]), 2).tolist()
    [[0, 1], [1, 1], [1, 0], [0, 2]]
    """
    out = grouped_histogram(codes, n_levels, labels, n_classes, None, None, 1, weights, backend=backend)
    return out[0]


#: What ``backend="auto"`` runs for the histogram path on a CUDA device. Torch until the Triton
#: histogram has been timed against ``torch.bincount`` on a GPU (BENCHMARKS.md, counting engine).
HISTOGRAM_AUTO_BACKEND = "torch"


def histogram_backend(backend, device) -> str:
    """``"torch"`` or ``"triton"`` for the histogram path.

    ``"torch"`` / ``"triton"`` are taken as asked (``"triton"`` raises where Triton
    cannot run, as everywhere); ``"auto"`` (or ``None``: the configured default)
    gives :data:`HISTOGRAM_AUTO_BACKEND` on a CUDA device where Triton runs, else
    torch. The bitmap kernels' ``"auto"`` is Triton on CUDA; the histogram's is
    separate because ``torch.bincount`` is itself a tuned GPU histogram.
    """
    if backend is None:
        from ..config import get_config

        backend = get_config()["backend"]
    if backend == "auto":
        return "triton" if HISTOGRAM_AUTO_BACKEND == "triton" and _backend("auto", device) == "triton" else "torch"
    return _backend(backend, device)


def grouped_histogram(codes, n_levels, labels, n_classes, rows, group, n_groups, weights=None, *,
                      backend="auto") -> torch.Tensor:
    """Like :func:`histogram_contingency` for many row groups at once: ``(n_groups, sum(n_levels), n_classes)``.

    The entries ``i`` are rows ``rows[i]`` (``None``: all rows) of group ``group[i]``
    (``None``: group 0) with weight ``weights[i]`` (``None``: 1). A row may appear in
    several groups. ``backend``: see :func:`histogram_backend`; both versions give the
    same int64 counts (float64 sums with ``weights``, equal up to the order of additions).
    """
    if histogram_backend(backend, codes.device) == "triton":
        return _tri().grouped_histogram(codes, n_levels, labels, n_classes, rows, group, n_groups, weights)
    return _grouped_histogram_torch(codes, n_levels, labels, n_classes, rows, group, n_groups, weights)


def _grouped_histogram_torch(codes, n_levels, labels, n_classes, rows, group, n_groups, weights=None) -> torch.Tensor:
    device = codes.device
    d = codes.shape[1]
    L = int(sum(n_levels))
    C = int(n_classes)
    offs = torch.tensor(level_offsets(n_levels)[:-1], dtype=torch.int64, device=device)
    floating = weights is not None
    out = torch.zeros(n_groups * L * C, dtype=torch.float64 if floating else torch.int64, device=device)
    m = codes.shape[0] if rows is None else rows.shape[0]
    if m == 0 or d == 0:
        return out.reshape(n_groups, L, C)
    chunk = max(1, _budget(device) // (24 * d))
    lab = labels.to(torch.int64)
    for s in range(0, m, chunk):
        e = min(m, s + chunk)
        r = slice(s, e) if rows is None else rows[s:e]
        c = codes[r].to(torch.int64)
        y = lab[r]
        base = y if group is None else group[s:e].to(torch.int64) * (L * C) + y
        idx = ((c + offs) * C + base[:, None]).reshape(-1)
        if floating:
            w = weights[s:e].to(torch.float64)[:, None].expand(-1, d).reshape(-1)
            out += torch.bincount(idx, weights=w, minlength=out.shape[0])
        else:
            out += torch.bincount(idx, minlength=out.shape[0])
    return out.reshape(n_groups, L, C)


# ----------------------------------------------------------------------------- auto by measurement
_COSTS: dict = {}


def measured_costs(device, backend="torch", histogram_backend="torch") -> dict:
    """Seconds per unit of work on ``device``, measured once per (device, backends) and cached.

    ``word``: one AND+popcount of a 64-bit word against one row set (bitmap kernels on ``backend``);
    ``entry``: one (row, column) entry of a histogram (on ``histogram_backend``);
    ``pack``: one (row, column) entry scattered into a bitmap store.

    The measurement times small passes (16K rows x 8 columns on a CPU, 1M x 16 on a
    GPU), a small fraction of a second, plus the Triton compilation when a backend
    is Triton.
    """
    key = (str(device), backend, histogram_backend)
    if key in _COSTS:
        return _COSTS[key]
    device = torch.device(device)
    g = torch.Generator().manual_seed(0)
    n, d = (1 << 14, 8) if device.type == "cpu" else (1 << 20, 16)
    codes = torch.randint(0, 8, (n, d), generator=g).to(device)
    y = torch.randint(0, 4, (n,), generator=g).to(device)
    A = torch.randint(-(2**62), 2**62, (d * 8, n // 64), generator=g).to(device)
    R = torch.randint(-(2**62), 2**62, (4, n // 64), generator=g).to(device)

    def timeit(fn):
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            best = min(best, time.perf_counter() - t)
        return best

    t_word = timeit(lambda: and_count_matrix(A, R, backend=backend)) / (A.numel() * R.shape[0])
    t_entry = timeit(lambda: histogram_contingency(codes, [8] * d, y, 4, backend=histogram_backend)) / (n * d)
    t_pack = timeit(lambda: BitmapStore.from_codes(codes, [8] * d)) / (n * d)
    _COSTS[key] = {"word": t_word, "entry": t_entry, "pack": t_pack}
    return _COSTS[key]


def representation_costs(n_rows, n_levels, n_sets, *, n_entries=None, store_built=False, costs) -> dict:
    """Estimated seconds of one contingency pass by ``"bitmap"`` and by ``"histogram"``.

    ``bitmap``: AND + popcount of every level bitmap with every row set, plus
    packing the store when it is not built yet; ``histogram``: one bincount over
    ``n_entries`` rows (default ``n_rows``) of codes.
    """
    d = len(n_levels)
    words = (int(n_rows) + 63) // 64
    m = int(n_rows) if n_entries is None else int(n_entries)
    bitmap = costs["word"] * words * int(sum(n_levels)) * max(1, int(n_sets))
    if not store_built:
        bitmap += costs["pack"] * int(n_rows) * d
    return {"bitmap": bitmap, "histogram": costs["entry"] * m * d}


def choose_representation(n_rows, n_levels, n_sets, *, store_built=False, device=None, backend="torch",
                          histogram_backend="torch") -> str:
    """``"bitmap"`` or ``"histogram"``, whichever the measured costs (:func:`measured_costs`) say is cheaper.

    The costs are measured once per process and device (a small fixed cost).
    Packing the store is counted when it is not built yet, so for arrays the
    histogram normally wins (packing is itself a pass of the same size); with a
    built store and few row sets, bitmaps can win on a GPU.
    """
    dev = torch.device(device) if device is not None else torch.device("cpu")
    c = measured_costs(dev, backend, histogram_backend)
    est = representation_costs(n_rows, n_levels, n_sets, store_built=store_built, costs=c)
    return "bitmap" if est["bitmap"] < est["histogram"] else "histogram"
