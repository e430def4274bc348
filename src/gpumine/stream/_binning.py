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

Everything before that wait is one function of tensors with no host wait, so
on CUDA it replays as one CUDA graph (:mod:`gpumine.utils._graph_replay`)
instead of about a hundred launches that cost the host more than the GPU. For
its shapes to repeat while the number of bins varies, the old bins enter it
padded to ``max_bins`` rows: rows with count 0 and mean 0 that sort after every
bin (their sort words are above every code's), form the last group and are never kept. The summary is the same
with or without padding, bit for bit.
"""

from __future__ import annotations

import torch

from ..utils._graph_replay import GraphReplay

__all__ = ["BinnedSummary"]

_MAX_CODE = 2**62
# the sort key of padding rows: above every word of a code (codes and words stay below _MAX_CODE)
_PADDING_KEY = 2**63 - 1


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
        self._merge: GraphReplay | None = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_merge"] = None  # captured graphs do not copy or pickle; rebuilt on the next update
        return state

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
        return self._intervals_in(X, self.lo, self.hi)

    def codes(self, X: torch.Tensor) -> torch.Tensor:
        """Bin keys of the rows of ``X``: mixed-radix int64 codes, or interval rows when those overflow."""
        return self._codes_in(X, self.lo, self.hi)

    def _intervals_in(self, X: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
        span = hi - lo
        spread = span > 0
        # a dimension without spread (so far) is all in interval 0
        unit = (X.to(torch.float64) - lo) / torch.where(spread, span, 1.0) * spread
        return torch.floor(unit * self.bins_per_dim).clamp_(0, self.bins_per_dim - 1).to(torch.int64)

    def _codes_in(self, X: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
        intervals = self._intervals_in(X, lo, hi)
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
        pad_to: int | None = None,
    ) -> None:
        """Add a window ``X`` (on the summary's device) to the summary; see the module docstring.

        ``pad_to``: the old bins enter the merge padded to this many rows (inert rows that sort
        last and are never kept), so that its shapes repeat while the number of bins varies and
        the merge replays as one graph; the summary is the same with and without. It defaults to
        ``max_bins`` where the merge can replay as a graph (CUDA, within the replay's size cap).
        """
        if X.shape[0] == 0:
            return
        if self._merge is None:
            # on CUDA the merge's hundred small launches replay as one graph once a shape repeats
            self._merge = GraphReplay(self._merged_groups)
        m = len(self)
        if pad_to is None and max_bins is not None:
            # padding costs a merge of max_bins rows whatever the bins: only where a graph can replay it
            padded_bytes = max_bins * (2 * self.n_features + 2) * 8 + X.numel() * X.element_size()
            pad_to = max_bins if self._merge.may_replay(X.device, padded_bytes) else None
        means, counts, keys = self.means, self.counts, self.keys
        if pad_to is not None and pad_to > m:
            pad = pad_to - m
            means = torch.cat([means, means.new_zeros((pad, self.n_features))])
            counts = torch.cat([counts, counts.new_zeros(pad)])
            keys = torch.cat([keys, keys.new_zeros((pad,) + tuple(keys.shape[1:]))])
        n_valid = torch.full((), m, dtype=torch.int64, device=self.device)
        lo, hi, n_remaps, all_keys, order, segment, counts, totals, keep = self._merge(
            means, counts, keys, n_valid, self.lo, self.hi, self._n_remaps, X,
            decay=float(decay), sparse_ratio=float(sparse_ratio), min_count=float(min_count), max_bins=max_bins)
        # a replayed graph's outputs are overwritten by its next replay: keep copies or gathers only
        self.lo, self.hi, self._n_remaps = lo.clone(), hi.clone(), n_remaps.clone()
        kept = keep.nonzero().squeeze(1)  # the one wait for the device
        # a group's key is the key of its first sorted row (segment ids ascend)
        self.keys = all_keys[order[torch.searchsorted(segment, kept)]]
        self.counts = counts[kept]
        self.means = totals[kept] / self.counts[:, None]

    def _merged_groups(self, means, old_counts, old_keys, n_valid, old_lo, old_hi, n_remaps, X, *, decay: float,
                       sparse_ratio: float, min_count: float, max_bins: int | None):
        """Steps 1-5 of the update up to the kept-bins mask, with no host wait (so it can be captured).

        The first ``n_valid`` (a device scalar) of the ``m`` old rows are bins; the rest are padding,
        given a key above every code so that they form the last group, with count 0, never kept.
        Returns ``(lo, hi, n_remaps, all_keys, order, segment, counts, totals, keep)``: the widened
        range, the remap counter, the keys of the old rows and the window's points (in that order),
        their stable key order and group numbers, each group's count and coordinate sums, and which
        groups are kept.
        """
        Xd = X.to(self.device, torch.float64)
        w, d = Xd.shape
        m = old_counts.shape[0]
        # 1. widen the range; the old bins' keys are their means' codes under the new range
        #    where it widened (decided on the device: no host round trip)
        low, high = torch.aminmax(Xd, dim=0)
        lo, hi = torch.minimum(old_lo, low), torch.maximum(old_hi, high)
        changed = ((lo != old_lo) | (hi != old_hi)).any()
        if m:
            all_keys = self._codes_in(torch.cat([means, Xd]), lo, hi)
            all_keys = torch.cat([torch.where(changed, all_keys[:m], old_keys), all_keys[m:]])
            n_remaps = n_remaps + (changed & (n_valid > 0))
        else:
            all_keys = self._codes_in(Xd, lo, hi)
        # 2. group old bins and window points by key (old bins first within a group)
        n = m + w
        words = self._words(all_keys)
        if m:
            padding = torch.arange(n, device=self.device) >= n_valid
            padding[m:] = False
            words = torch.where(padding[:, None], _PADDING_KEY, words)
        order, segment = _sorted_groups(words)
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
            faded = torch.where(sparse, old_counts * decay, old_counts)
            rows[:m, d : 2 * d] = means * faded[:, None]
            rows[:m, 2 * d] = faded
            # the padding's group (the last one, when there is padding) is not a bin
            last = segment[-1] - (n_valid < m).to(torch.int64)
        else:
            c = lengths.to(torch.float64)
            last = segment[-1]
        # 4. per-group sums of the key-sorted rows: [window sums | old weighted sums | old counts]
        sums = torch.segment_reduce(rows[order], "sum", lengths=lengths, axis=0, unsafe=True)
        counts = c + sums[:, 2 * d]
        totals = sums[:, :d] + sums[:, d : 2 * d]
        # 5. bound memory: groups past the last bin are empty or padding; min_count; the max_bins largest counts
        keep = torch.arange(n, device=self.device) <= last
        if min_count > 0:
            keep &= counts >= min_count
        if max_bins is not None and max_bins < n:
            # a stable sort keeps the lower key first among equal counts
            ranked = torch.sort(torch.where(keep, counts, -1.0), descending=True, stable=True).indices
            keep &= torch.zeros_like(keep).index_fill_(0, ranked[:max_bins], True)
        return lo, hi, n_remaps, all_keys, order, segment, counts, totals, keep

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
