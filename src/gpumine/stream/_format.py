"""The text of ``gpumine stream``'s output records, built for a whole window at once with NumPy.

``'%.9g' % score`` costs a C call per score, and a window's rows as one ``%``-format
still cost as much as the rest of the output path (BENCHMARKS.md, "Design
measurements quoted in the code"). Here the digits of every record are computed column by column in float64
arithmetic, laid out in a byte matrix with a mask of the bytes shown, and compressed
into the text in one call: about half the time, byte for byte the same text.

Exactness: a score that is a float32 value (the default ``--dtype``) in [1e-4, 1e9)
has a 24-bit significand, so the score times 10**j for j <= 12 (5**12 < 2**28) is an
exact float64; rounding that to an integer of 9 digits with ``rint`` (half to even) is
the correctly rounded decimal that Python prints, and that range is exactly where
``%.9g`` writes fixed-point notation. Other scores (float64 scores, ones outside the
range, -inf) make these functions return None, and the caller formats them in Python.
"""

from __future__ import annotations

import numpy as np

__all__ = ["csv_rows", "score_texts"]

_P10 = 10.0 ** np.arange(23)  # exact float64 powers of ten
_INF_NAN = np.array([[105, 110, 102], [110, 97, 110]], np.uint8)  # b"inf", b"nan"
_ZERO, _COMMA, _POINT, _NEWLINE = 48, 44, 46, 10


def _digits(values: np.ndarray, width: int):
    """Digits (most significant first, as floats) of integer-valued float64 ``values`` below 2**53,
    and for all columns but the last whether it holds a digit rather than a leading zero.

    ``floor(v / 10**k)`` is exact for such ``v``: the rounding error of the division is below
    10**-k, the least distance of an inexact quotient from an integer.
    """
    quotients = [values] + [np.floor(values / _P10[k]) for k in range(1, width)]
    digits = [quotients[k] - 10.0 * quotients[k + 1] for k in range(width - 1)] + [quotients[-1]]
    shown = [q >= 1 for q in quotients[1:]]
    return digits[::-1], shown[::-1]


class _Scores:
    """The '%.9g' layout of a window of scores: whole part, fraction digits, inf and nan."""

    def __init__(self, scores: np.ndarray):
        self.special = np.flatnonzero(~np.isfinite(scores))
        x = scores
        if self.special.size:
            x = scores.copy()
            x[self.special] = 1.0
        self.ok = bool(((x >= 1e-4) & (x < 1e9) & (x.astype(np.float32) == x)).all()) and not (scores == -np.inf).any()
        if not self.ok:
            return
        e = np.clip(np.floor(np.log10(x)), -4, 8).astype(np.intp)  # decimal exponent, maybe one off
        scaled = x * _P10[8 - e]
        e -= scaled < 1e8
        e += scaled >= 1e9
        if e.min() < -4:  # x * 10**13 would not be exact (x >= 1e-4 rules this out; the proof needs it)
            self.ok = False
            return
        m = np.rint(x * _P10[8 - e])  # the 9 significant digits, as an integer
        carry = m == 1e9
        if carry.any():
            m[carry] = 1e8
            e = e + carry
        if e.max() > 8:  # rounds up to 1e+09, which %g writes in exponent notation
            self.ok = False
            return
        emin = int(e.min())
        self.whole = np.floor(m / _P10[8 - e])
        self.frac_width = 8 - emin  # fraction digits of the row with the most
        self.frac = (m - self.whole * _P10[8 - e]) * _P10[e - emin]
        self.whole_width = len(str(int(self.whole.max())))
        if self.special.size:
            self.whole_width = max(self.whole_width, 3)  # "inf" and "nan" go in the whole-part columns
        self.nan = np.isnan(scores[self.special]).view(np.uint8)
        self.width = self.whole_width + 1 + self.frac_width

    def fill(self, out: np.ndarray, keep: np.ndarray, c: int) -> None:
        """Write the scores' text into columns ``c`` to ``c + self.width`` of ``out`` and ``keep``."""
        digits, shown = _digits(self.whole, self.whole_width)
        for k, d in enumerate(digits):
            out[:, c + k] = d
        for k, s in enumerate(shown):
            keep[:, c + k] = s
        out[:, c : c + self.whole_width] += _ZERO
        point = c + self.whole_width
        out[:, point] = _POINT
        keep[:, point] = self.frac > 0
        if self.frac_width:
            digits, _ = _digits(self.frac, self.frac_width)
            nonzero_after = np.zeros(out.shape[0], bool)  # trailing zeros are not written
            for k in range(self.frac_width - 1, -1, -1):
                nonzero_after |= digits[k] != 0
                keep[:, point + 1 + k] = nonzero_after
                out[:, point + 1 + k] = digits[k]
            out[:, point + 1 : point + 1 + self.frac_width] += _ZERO
        if self.special.size:
            keep[self.special, c : c + self.width] = False
            keep[self.special, point - 3 : point] = True
            out[self.special, point - 3 : point] = _INF_NAN[self.nan]


def _text(out: np.ndarray, keep: np.ndarray) -> str:
    return np.compress(keep.ravel(), out.ravel()).tobytes().decode("ascii")


def csv_rows(lines: np.ndarray, scores: np.ndarray, flags: np.ndarray) -> str | None:
    """``"%d,%.9g,%d\\n"`` of each (line, score, flag), or None when a score is not one this handles.

    Examples
    --------
    >>> csv_rows(np.array([1, 12]), np.array([1.0, 0.9837133288383484]), np.array([False, True]))
    '1,1,0\\n12,0.983713329,1\\n'
    """
    n = len(lines)
    if n == 0 or lines.min() < 0 or lines.max() >= 2**53:
        return None
    layout = _Scores(scores)
    if not layout.ok:
        return None
    line_width = len(str(int(lines.max())))
    out = np.empty((n, line_width + 1 + layout.width + 3), np.uint8)
    keep = np.ones(out.shape, bool)
    digits, shown = _digits(lines.astype(np.float64), line_width)
    for k, d in enumerate(digits):
        out[:, k] = d
    for k, s in enumerate(shown):
        keep[:, k] = s
    out[:, :line_width] += _ZERO
    out[:, line_width] = _COMMA
    layout.fill(out, keep, line_width + 1)
    c = line_width + 1 + layout.width
    out[:, c] = _COMMA
    out[:, c + 1] = flags
    out[:, c + 1] += _ZERO
    out[:, c + 2] = _NEWLINE
    return _text(out, keep)


def score_texts(scores: np.ndarray) -> list[str] | None:
    """``'%.9g' % s`` of each score, or None when a score is not one this handles.

    Examples
    --------
    >>> score_texts(np.array([1.25, np.inf, np.nan]))
    ['1.25', 'inf', 'nan']
    """
    if len(scores) == 0:
        return None
    layout = _Scores(scores)
    if not layout.ok:
        return None
    out = np.empty((len(scores), layout.width + 1), np.uint8)
    keep = np.ones(out.shape, bool)
    layout.fill(out, keep, 0)
    out[:, -1] = _NEWLINE
    return _text(out, keep).split("\n")[:-1]
