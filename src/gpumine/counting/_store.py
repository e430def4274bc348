"""Columnar stores of integer-coded columns packed into 64-bit words on a device.

:class:`BitmapStore` keeps one bit-vector per level of every column (the seed's
"bitmaps", O'Neil & Quass's value-list index); :class:`BitSliceStore` keeps one
bit-vector per bit of the binary code (the seed's "bit-slices"). Both hold all
their bit-vectors in one ``(n_vectors, n_words)`` int64 tensor, rows of a column
contiguous, and convert into each other without the source data.
"""

from __future__ import annotations

import numpy as np
import torch

from ..config import resolve_device
from ._bits import n_words_for, pack_bool, pack_groups, tail_mask, unpack
from ._encode import ColumnInfo, EncodedTable, columns_from_levels, encode_table

__all__ = ["BitmapStore", "BitSliceStore", "build_store"]


class _BitStore:
    kind = "?"

    def __init__(self, words: torch.Tensor, columns: list[ColumnInfo], n_rows: int, widths: list[int]):
        self.words = words
        self.columns = list(columns)
        self.n_rows = int(n_rows)
        self.widths = [int(w) for w in widths]
        self.offsets = np.concatenate([[0], np.cumsum(self.widths)]).astype(np.int64).tolist()
        self._tail = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_data(cls, data, schema=None, *, device=None):
        """Encode ``data`` (DataFrame, 2-D array, or CSV path) with ``schema`` and pack it.

        See :func:`gpumine.counting.encode_table` for the schema.
        """
        return cls.from_encoded(encode_table(data, schema), device=device)

    @classmethod
    def from_csv(cls, path, schema=None, *, device=None, **read_csv_kwargs):
        """Read a CSV with :func:`pandas.read_csv` (``read_csv_kwargs`` passed on, pandas' own header and
        delimiter defaults) and pack it.

        This library entry keeps pandas' reader so that every pandas option works; the command line reads its
        tables through :mod:`gpumine.io` (delimiter detection, gzip by content, errors naming the file's line).
        To read a file that way, read it first and pass the frame to :meth:`from_data`.
        """
        import pandas as pd

        return cls.from_data(pd.read_csv(path, **read_csv_kwargs), schema, device=device)

    @classmethod
    def from_encoded(cls, table: EncodedTable, *, device=None):
        return cls.from_codes(table.codes, table.columns, device=device)

    @classmethod
    def from_codes(cls, codes, columns=None, *, device=None):
        """Pack integer codes ``(n_rows, n_cols)`` whose column ``j`` lies in ``[0, n_levels[j])``.

        ``columns`` is a list of :class:`ColumnInfo` or of level counts
        (``None``: ``max + 1`` per column).
        """
        codes = torch.as_tensor(np.asarray(codes) if not isinstance(codes, torch.Tensor) else codes)
        if codes.ndim != 2:
            raise ValueError(f"codes must be 2-D (n_rows, n_cols); got shape {tuple(codes.shape)}")
        if codes.is_complex():
            raise ValueError("codes must be integers; got complex values")
        if codes.is_floating_point():
            finite = torch.isfinite(codes)
            if not bool(finite.all()):
                raise ValueError("codes must be integers; got NaN or infinity (encode missing values as a level of their own)")
            whole = codes == torch.round(codes)
            if not bool(whole.all()):
                value = float(codes[~whole][0])
                raise ValueError(f"codes must be integers; got {value!r} (round or encode the values first)")
        if codes.is_floating_point() or codes.dtype == torch.bool:
            codes = codes.to(torch.int64)
        dev = resolve_device(device) if device is not None else (codes.device if codes.device.type != "cpu" else resolve_device("cpu"))
        codes = codes.to(dev)
        if columns is None:
            top = codes.amax(dim=0).tolist() if codes.shape[0] else [0] * codes.shape[1]
            columns = columns_from_levels([int(t) + 1 for t in top])
        elif len(columns) and not isinstance(columns[0], ColumnInfo):
            columns = columns_from_levels([int(k) for k in columns])
        if len(columns) != codes.shape[1]:
            raise ValueError(f"got {len(columns)} column infos for {codes.shape[1]} code columns")
        if codes.numel():
            lo = codes.amin(dim=0)
            hi = codes.amax(dim=0)
            nl = torch.tensor([c.n_levels for c in columns], device=dev)
            bad = (lo < 0) | (hi.to(torch.int64) >= nl)
            if bool(bad.any()):
                j = int(bad.nonzero()[0, 0])
                raise ValueError(
                    f"codes of column {columns[j].name!r} must lie in [0, {columns[j].n_levels}); "
                    f"got values in [{int(lo[j])}, {int(hi[j])}]"
                )
        return cls._pack(codes, columns)

    # ------------------------------------------------------------------ basics
    @property
    def device(self) -> torch.device:
        return self.words.device

    @property
    def n_words(self) -> int:
        return int(self.words.shape[1])

    @property
    def n_columns(self) -> int:
        return len(self.columns)

    @property
    def n_levels(self) -> list[int]:
        return [c.n_levels for c in self.columns]

    @property
    def memory_bytes(self) -> int:
        """Bytes held by the packed bit-vectors."""
        return int(self.words.numel() * self.words.element_size())

    @property
    def tail(self) -> torch.Tensor:
        """The all-rows bitmap (ones for real rows, zeros in the padding of the last word)."""
        if self._tail is None or self._tail.device != self.device:
            self._tail = tail_mask(self.n_rows, self.device)
        return self._tail

    def column_index(self, col) -> int:
        """Index of a column given by position or name."""
        if isinstance(col, (int, np.integer)) and not isinstance(col, bool):
            if not -self.n_columns <= int(col) < self.n_columns:
                raise ValueError(f"column index {col} is out of range for a store of {self.n_columns} columns")
            return int(col) % self.n_columns
        for j, c in enumerate(self.columns):
            if c.name == str(col):
                return j
        raise ValueError(f"unknown column {col!r}; columns are {[c.name for c in self.columns]}")

    def code(self, col, value) -> int:
        """The level code of a raw value in a column."""
        return self.columns[self.column_index(col)].code_of(value)

    def to(self, device):
        """A copy of the store on another device."""
        dev = resolve_device(device)
        out = type(self).__new__(type(self))
        _BitStore.__init__(out, self.words.to(dev), self.columns, self.n_rows, self.widths)
        return out

    def __repr__(self):
        return (f"{type(self).__name__}(n_rows={self.n_rows}, n_columns={self.n_columns}, "
                f"n_vectors={self.words.shape[0]}, memory_bytes={self.memory_bytes}, device={self.device})")

    # convenience: count ops on raw values
    def element_count(self, col, value, mask=None, *, backend="auto") -> int:
        """Rows whose ``col`` equals ``value`` (a raw value), under an optional row mask."""
        from ._ops import element_count

        j = self.column_index(col)
        return element_count(self, j, self.code(j, value), mask, backend=backend)

    def co_occurrence_count(self, col1, value1, col2, value2, mask=None, *, backend="auto") -> int:
        """Rows where ``col1 == value1`` and ``col2 == value2`` (raw values)."""
        from ._ops import co_occurrence_count

        j1, j2 = self.column_index(col1), self.column_index(col2)
        return co_occurrence_count(self, j1, self.code(j1, value1), j2, self.code(j2, value2), mask, backend=backend)

    def range_count(self, col, lo, hi, mask=None, *, backend="auto") -> int:
        """Rows whose level code in ``col`` lies in ``[lo, hi]`` (codes; for integer columns codes are values)."""
        from ._ops import range_count

        return range_count(self, self.column_index(col), lo, hi, mask, backend=backend)


class BitmapStore(_BitStore):
    """One bit-vector per level of every column.

    Build with :meth:`from_data` (DataFrame / array / CSV + schema),
    :meth:`from_csv` or :meth:`from_codes`.

    Examples
    --------
    >>> import pandas as pd
    >>> s = BitmapStore.from_data(pd.DataFrame({"c": ["a", "b", "a"], "n": [1, 0, 1]}), device="cpu")
    >>> s.element_count("c", "a"), s.co_occurrence_count("c", "a", "n", 1)
    (2, 2)
    >>> s.to_bitslice().to_bitmap().words.equal(s.words)
    True
    """

    kind = "bitmap"

    @classmethod
    def _pack(cls, codes, columns):
        n, d = codes.shape
        widths = [c.n_levels for c in columns]
        offs = torch.tensor(np.concatenate([[0], np.cumsum(widths)[:-1]]), dtype=torch.int64, device=codes.device)
        group = (codes.to(torch.int64) + offs).reshape(-1)
        rows = torch.arange(n, device=codes.device).repeat_interleave(d)
        words = pack_groups(group, int(sum(widths)), n, rows=rows)
        return cls(words, columns, n, widths)

    def bitmaps(self, col) -> torch.Tensor:
        """The ``(n_levels, n_words)`` bitmaps of one column (a view)."""
        j = self.column_index(col)
        return self.words[self.offsets[j]:self.offsets[j + 1]]

    level_bitmaps = bitmaps

    def codes(self) -> torch.Tensor:
        """Decode the store back to ``(n_rows, n_cols)`` int codes."""
        out = torch.zeros(self.n_rows, self.n_columns, dtype=torch.int32, device=self.device)
        for j in range(self.n_columns):
            bits = unpack(self.bitmaps(j), self.n_rows)  # (levels, n)
            out[:, j] = bits.to(torch.int8).argmax(dim=0).to(torch.int32) if bits.shape[0] else 0
        return out

    def to_bitslice(self) -> "BitSliceStore":
        """Convert without the source data: slice k = OR of the bitmaps of levels with bit k set."""
        slabs, widths = [], []
        for j, c in enumerate(self.columns):
            nb = BitSliceStore.bits_for(c.n_levels)
            bm = self.bitmaps(j)
            sl = torch.zeros(nb, self.n_words, dtype=torch.int64, device=self.device)
            for v in range(c.n_levels):
                for k in range(nb):
                    if (v >> k) & 1:
                        sl[k] |= bm[v]
            slabs.append(sl)
            widths.append(nb)
        return BitSliceStore(torch.cat(slabs, 0), self.columns, self.n_rows, widths)


class BitSliceStore(_BitStore):
    """One bit-vector per bit of every column's binary code (``ceil(log2(n_levels))`` per column).

    Examples
    --------
    >>> s = BitSliceStore.from_codes([[17, 7], [3, 7], [17, 2]], [32, 8], device="cpu")
    >>> s.widths, s.element_count(0, 17), s.co_occurrence_count(0, 17, 1, 7), s.range_count(0, 4, 31)
    ([5, 3], 2, 1, 2)
    """

    kind = "bitslice"

    @staticmethod
    def bits_for(n_levels: int) -> int:
        return max(1, int(n_levels - 1).bit_length())

    @classmethod
    def _pack(cls, codes, columns):
        n = codes.shape[0]
        widths = [cls.bits_for(c.n_levels) for c in columns]
        slabs = []
        c64 = codes.to(torch.int64)
        for j, nb in enumerate(widths):
            shifts = torch.arange(nb, device=codes.device)
            bits = ((c64[:, j:j + 1] >> shifts) & 1).to(torch.bool).T  # (nb, n)
            slabs.append(pack_bool(bits) if n else torch.zeros(nb, 0, dtype=torch.int64, device=codes.device))
        words = torch.cat(slabs, 0) if slabs else torch.zeros(0, n_words_for(n), dtype=torch.int64)
        return cls(words, columns, n, widths)

    def slices(self, col) -> torch.Tensor:
        """The ``(n_bits, n_words)`` slices of one column, least significant bit first (a view)."""
        j = self.column_index(col)
        return self.words[self.offsets[j]:self.offsets[j + 1]]

    def level_bitmaps(self, col, levels=None) -> torch.Tensor:
        """Equality bitmaps ``(len(levels), n_words)`` of the given levels (default: all)."""
        j = self.column_index(col)
        if levels is None:
            levels = torch.arange(self.columns[j].n_levels, device=self.device)
        levels = torch.as_tensor(levels, device=self.device, dtype=torch.int64).reshape(-1)
        sl = self.slices(j)
        out = self.tail.expand(levels.shape[0], self.n_words).clone()
        for k in range(sl.shape[0]):
            bit = ((levels >> k) & 1).bool()[:, None]
            out &= torch.where(bit, sl[k][None, :], ~sl[k][None, :])
        return out

    def codes(self) -> torch.Tensor:
        out = torch.zeros(self.n_rows, self.n_columns, dtype=torch.int32, device=self.device)
        for j in range(self.n_columns):
            bits = unpack(self.slices(j), self.n_rows).to(torch.int32)
            out[:, j] = (bits << torch.arange(bits.shape[0], device=self.device, dtype=torch.int32)[:, None]).sum(0)
        return out

    def to_bitmap(self) -> BitmapStore:
        """Convert without the source data: bitmap of level v = AND over k of (slice k or its negation)."""
        slabs = [self.level_bitmaps(j) for j in range(self.n_columns)]
        return BitmapStore(torch.cat(slabs, 0), self.columns, self.n_rows, [c.n_levels for c in self.columns])


def build_store(data, schema=None, representation="bitmap", *, device=None):
    """Build a :class:`BitmapStore` or :class:`BitSliceStore` from data (or wrap an existing store)."""
    if isinstance(data, _BitStore):
        store = data
    else:
        table = data if isinstance(data, EncodedTable) else encode_table(data, schema)
        store = BitmapStore.from_encoded(table, device=device) if representation == "bitmap" else None
        if store is None:
            if representation != "bitslice":
                raise ValueError(f"representation must be 'bitmap' or 'bitslice'; got {representation!r}")
            store = BitSliceStore.from_encoded(table, device=device)
    if representation == "bitmap" and isinstance(store, BitSliceStore):
        return store.to_bitmap()
    if representation == "bitslice" and isinstance(store, BitmapStore):
        return store.to_bitslice()
    return store

