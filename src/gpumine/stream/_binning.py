"""The binned statistical summary of LOF_GPU (Yu 2017, §3.2 and §3.4), as tensor operations.

Every dimension is normalised by its running minimum and maximum into [0, 1]
and cut into ``bins_per_dim`` equal intervals, so dimension j has its own
width (max_j - min_j) / bins_per_dim (the seed's Δ sums the widths over the
dimensions: an erratum). A point's bin is the mixed-radix code
``sum_j I_j * bins_per_dim**j`` of its interval numbers ``I_j`` (0-based;
when ``bins_per_dim**d`` does not fit in 63 bits the rows of interval numbers
themselves are the keys). Only non-empty bins are kept, sorted by key, each
with a (decayed) count ``C`` and the mean vector ``M`` of its points in the
original coordinates — the virtual points.

Update after each window (:meth:`BinnedSummary.update`):

1. widen the running range with the window; if it widened, the kept bins are
   re-mapped by the new bin of their mean, and bins that now coincide merge
   below (counts added, means count-weighted). Points of one old bin that
   would now fall into different bins cannot be split (only their mean is
   kept);
2. count the window's points per bin;
3. decay: a kept bin whose count in this window is below
   ``sparse_ratio`` times the mean count of the window's non-empty bins
   (absent bins included) gets ``C <- decay * C``;
4. merge: ``C <- c + C``, ``M <- (c * mu + C * M) / (c + C)``;
5. bound memory: drop bins with ``C < min_count``, then keep the
   ``max_bins`` largest counts (ties to the lower key).

Counts and means are float64; all work stays on the summary's device. One
stable sort of the old bins' keys together with the window's codes groups
both (old bins first within a bin), and one segment reduction over the
key-sorted rows gives the window's per-bin sums and the old bins' weighted
sums at once (no atomics on floats, so the summary is the same run to run).
The update waits for the device once, to learn how many bins are kept; the
"did the range widen" test, the decay and the pruning stay on the device.
When the range widens, old bins that come to share a bin are decayed one by
one and then added (rather than added, then decayed): equal up to rounding.
"""

from __future__ import annotations

import torch

__all__ = ["BinnedSummary"]

_MAX_CODE = 2**62


def _sorted_groups(words: torch.Tensor):
    """Group equal keys: ``(order, segment)`` for keys given as int64 ``words`` (n, n_words).

    ``order`` sorts the rows by their words lexicographically (first word most
    significant), stably, so equal keys keep their input order;
    ``segment[i]`` is the group number (0, 1, ... in key order) of the row
    ``order[i]``. No host synchronisation.
    """
    n, n_words = words.shape
    if n_words == 1:
        ranked, order = torch.sort(words[:, 0], stable=True)
        differs = ranked[1:] != ranked[:-1]
    else:
        order = None
        for j in reversed(range(n_words)):  # least significant word first (LSD radix order)
            column = words[:, j] if order is None else words[order, j]
            step = torch.sort(column, stable=True).indices
            order = step if order is None else order[step]
        ranked = words[order]
        differs = (ranked[1:] != ranked[:-1]).any(1)
    segment = torch.zeros(n, dtype=torch.int64, device=words.device)
    torch.cumsum(differs, 0, out=segment[1:])
    return order, segment


class BinnedSummary:
    """Non-empty bins of everything seen so far: keys, decayed counts and mean vectors.

    Parameters
    ----------
    n_features : int
    bins_per_dim : int
        Intervals per dimension (>= 1).
    device : torch.device

    Examples
    --------
    >>> s = BinnedSummary(2, bins_per_dim=2, device=torch.device("cpu"))
    >>> s.update(torch.tensor([[0.0, 0.0], [0.25, 0.0], [1.0, 1.0]]), decay=0.5)
    >>> s.counts.tolist(), s.means.tolist()
    ([2.0, 1.0], [[0.125, 0.0], [1.0, 1.0]])
    """

    def __init__(self, n_features: int, bins_per_dim: int, device: torch.device):
        self.n_features = int(n_features)
        self.bins_per_dim = int(bins_per_dim)
        self.device = device
        self.row_keys = self.bins_per_dim ** self.n_features > _MAX_CODE
        self.lo = torch.full((self.n_features,), float("inf"), dtype=torch.float64, device=device)
        self.hi = torch.full((self.n_features,), float("-inf"), dtype=torch.float64, device=device)
        key_shape = (0, self.n_features) if self.row_keys else (0,)
        self.keys = torch.empty(key_shape, dtype=torch.int64, device=device)
        self.counts = torch.empty(0, dtype=torch.float64, device=device)
        self.means = torch.empty((0, self.n_features), dtype=torch.float64, device=device)
        if self.row_keys:
            # interval rows are packed into int64 words of `per` digits each, the first
            # dimension most significant, so the words sort like the rows (lexicographically)
            per = 1
            while self.bins_per_dim ** (per + 1) <= _MAX_CODE:
                per += 1
            self._per_word = per
            self._n_words = -(-self.n_features // per)
            self._word_radix = self.bins_per_dim ** torch.arange(per - 1, -1, -1, dtype=torch.int64, device=device)
        else:
            self._radix = self.bins_per_dim ** torch.arange(self.n_features, dtype=torch.int64, device=device)
        self._n_remaps = torch.zeros((), dtype=torch.int64, device=device)

    def __len__(self) -> int:
        return self.counts.shape[0]

    @property
    def n_remaps(self) -> int:
        """How many updates re-mapped the kept bins because the range widened."""
        return int(self._n_remaps)

    @property
    def width(self) -> torch.Tensor:
        """Per-dimension bin width (max - min) / bins_per_dim in the original units."""
        return (self.hi - self.lo).clamp(min=0) / self.bins_per_dim

    # -- codes -------------------------------------------------------------------
    def intervals(self, X: torch.Tensor) -> torch.Tensor:
        """Interval number 0..bins_per_dim-1 of every coordinate (int64), under the current range."""
        span = self.hi - self.lo
        spread = span > 0
        # a dimension without spread (so far) is all in interval 0
        unit = (X.to(torch.float64) - self.lo) / torch.where(spread, span, 1.0) * spread
        return torch.floor(unit * self.bins_per_dim).clamp_(0, self.bins_per_dim - 1).to(torch.int64)

    def codes(self, X: torch.Tensor) -> torch.Tensor:
        """Bin keys of the rows of ``X``: mixed-radix int64 codes, or interval rows when those overflow."""
        intervals = self.intervals(X)
        if self.row_keys:
            return intervals
        return (intervals * self._radix).sum(1)

    def _words(self, keys: torch.Tensor) -> torch.Tensor:
        """Keys as (n, n_words) int64 words that sort and compare like the keys."""
        if not self.row_keys:
            return keys[:, None]
        n = keys.shape[0]
        pad = self._n_words * self._per_word - self.n_features
        if pad:
            keys = torch.cat([keys, keys.new_zeros((n, pad))], 1)
        return (keys.reshape(n, self._n_words, self._per_word) * self._word_radix).sum(2)

    # -- update ------------------------------------------------------------------------
    def update(
        self,
        X: torch.Tensor,
        *,
        decay: float,
        sparse_ratio: float = 0.1,
        min_count: float = 0.0,
        max_bins: int | None = None,
    ) -> None:
        """Add a window ``X`` (on the summary's device) to the summary; see the module docstring."""
        if X.shape[0] == 0:
            return
        Xd = X.to(self.device, torch.float64)
        w, d = Xd.shape
        m = len(self)
        # 1. widen the range; the old bins' keys are their means' codes under the new range
        #    where it widened (decided on the device: no host round trip)
        low, high = torch.aminmax(Xd, dim=0)
        lo, hi = torch.minimum(self.lo, low), torch.maximum(self.hi, high)
        changed = ((lo != self.lo) | (hi != self.hi)).any()
        self.lo, self.hi = lo, hi
        if m:
            all_keys = self.codes(torch.cat([self.means, Xd]))
            old_keys = torch.where(changed, all_keys[:m], self.keys)
            all_keys = torch.cat([old_keys, all_keys[m:]])
            self._n_remaps += changed
        else:
            all_keys = self.codes(Xd)
        # 2. group old bins and window points by key (old bins first within a group)
        n = m + w
        order, segment = _sorted_groups(self._words(all_keys))
        ones = torch.ones(n, dtype=torch.int64, device=self.device)
        lengths = torch.zeros(n, dtype=torch.int64, device=self.device).index_add_(0, segment, ones)
        rows = torch.zeros((n, 2 * d + 1), dtype=torch.float64, device=self.device)
        rows[m:, :d] = Xd
        if m:
            # 3. decay: old bins under-populated in this window (absent ones: count 0)
            position = torch.empty_like(order).scatter_(0, order, torch.arange(n, device=self.device))
            old_group = segment[position[:m]]
            n_old = torch.zeros(n, dtype=torch.int64, device=self.device).index_add_(0, old_group, ones[:m])
            c = (lengths - n_old).to(torch.float64)  # window points per group (exact)
            mean_c = c.sum() / (c > 0).sum()  # mean count of the window's non-empty bins
            sparse = c[old_group] < sparse_ratio * mean_c
            faded = torch.where(sparse, self.counts * decay, self.counts)
            rows[:m, d : 2 * d] = self.means * faded[:, None]
            rows[:m, 2 * d] = faded
        else:
            c = lengths.to(torch.float64)
        # 4. per-group sums of the key-sorted rows: [window sums | old weighted sums | old counts]
        sums = torch.segment_reduce(rows[order], "sum", lengths=lengths, axis=0, unsafe=True)
        counts = c + sums[:, 2 * d]
        totals = sums[:, :d] + sums[:, d : 2 * d]
        # 5. bound memory: groups past the last one are empty; min_count; the max_bins largest counts
        keep = torch.arange(n, device=self.device) <= segment[-1]
        if min_count > 0:
            keep &= counts >= min_count
        if max_bins is not None and max_bins < n:
            # a stable sort keeps the lower key first among equal counts
            ranked = torch.sort(torch.where(keep, counts, -1.0), descending=True, stable=True).indices
            chosen = torch.zeros_like(keep)
            chosen[ranked[:max_bins]] = True
            keep &= chosen
        kept = keep.nonzero().squeeze(1)  # the one wait for the device
        # a group's key is the key of its first sorted row (segment ids ascend)
        self.keys = all_keys[order[torch.searchsorted(segment, kept)]]
        self.counts = counts[kept]
        self.means = totals[kept] / self.counts[:, None]

    # -- state -------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "n_features": self.n_features,
            "bins_per_dim": self.bins_per_dim,
            "lo": self.lo.cpu(),
            "hi": self.hi.cpu(),
            "keys": self.keys.cpu(),
            "counts": self.counts.cpu(),
            "means": self.means.cpu(),
            "n_remaps": self.n_remaps,
        }

    @classmethod
    def from_state(cls, state: dict, device: torch.device) -> "BinnedSummary":
        s = cls(int(state["n_features"]), int(state["bins_per_dim"]), device)
        keys = torch.as_tensor(state["keys"], dtype=torch.int64)
        counts = torch.as_tensor(state["counts"], dtype=torch.float64)
        means = torch.as_tensor(state["means"], dtype=torch.float64)
        lo = torch.as_tensor(state["lo"], dtype=torch.float64)
        hi = torch.as_tensor(state["hi"], dtype=torch.float64)
        m, d = counts.shape[0], s.n_features
        expected_keys = (m, d) if s.row_keys else (m,)
        if tuple(keys.shape) != expected_keys or tuple(means.shape) != (m, d) or lo.shape != (d,) or hi.shape != (d,):
            raise ValueError("the summary in the state file has inconsistent shapes; the file is damaged")
        if m and not bool((counts > 0).all() and torch.isfinite(means).all()):
            raise ValueError("the summary in the state file holds non-positive counts or non-finite means")
        s.keys, s.counts, s.means = keys.to(device), counts.to(device), means.to(device)
        s.lo, s.hi = lo.to(device), hi.to(device)
        s._n_remaps = torch.tensor(int(state.get("n_remaps", 0)), dtype=torch.int64, device=device)
        return s
