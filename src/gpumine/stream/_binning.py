"""The binned statistical summary of LOF_GPU (seed 001, §3.2 and §3.4), as tensor operations.

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

1. widen the running range with the window; if it widened, re-map the kept
   bins by the new bin of their mean and merge bins that now coincide
   (counts added, means count-weighted). Points of one old bin that would
   now fall into different bins cannot be split (only their mean is kept);
2. count the window's points per bin (``torch.unique`` + segment sums);
3. decay: a kept bin whose count in this window is below
   ``sparse_ratio`` times the mean count of the window's non-empty bins
   (absent bins included) gets ``C <- decay * C``;
4. merge: ``C <- c + C``, ``M <- (c * mu + C * M) / (c + C)``;
5. bound memory: drop bins with ``C < min_count``, then keep the
   ``max_bins`` largest counts (ties to the lower key).

Counts and means are float64; all work stays on the summary's device, and
the per-bin sums are segment reductions over key-sorted rows (no atomics), so
the summary is the same run to run.
"""

from __future__ import annotations

import torch

__all__ = ["BinnedSummary"]

_MAX_CODE = 2**62


def _segment_sums(values: torch.Tensor, inverse: torch.Tensor, n: int) -> torch.Tensor:
    """Sums of ``values`` rows grouped by ``inverse`` (0..n-1), in a fixed order on every device.

    (``index_add_`` on a GPU adds with atomics, in an order that changes run to run.)
    """
    order = torch.argsort(inverse, stable=True)
    lengths = torch.bincount(inverse, minlength=n)
    return torch.segment_reduce(values[order], "sum", lengths=lengths, axis=0)


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
        if not self.row_keys:
            self._radix = self.bins_per_dim ** torch.arange(self.n_features, dtype=torch.int64, device=device)
        self.n_remaps = 0

    def __len__(self) -> int:
        return self.counts.shape[0]

    @property
    def width(self) -> torch.Tensor:
        """Per-dimension bin width (max - min) / bins_per_dim in the original units."""
        return (self.hi - self.lo).clamp(min=0) / self.bins_per_dim

    # -- codes -------------------------------------------------------------------
    def intervals(self, X: torch.Tensor) -> torch.Tensor:
        """Interval number 0..bins_per_dim-1 of every coordinate (int64), under the current range."""
        span = self.hi - self.lo
        safe = torch.where(span > 0, span, torch.ones_like(span))
        unit = (X.to(torch.float64) - self.lo) / safe
        unit = torch.where(span > 0, unit, torch.zeros_like(unit))
        return torch.floor(unit * self.bins_per_dim).clamp_(0, self.bins_per_dim - 1).to(torch.int64)

    def codes(self, X: torch.Tensor) -> torch.Tensor:
        """Bin keys of the rows of ``X``: mixed-radix int64 codes, or interval rows when those overflow."""
        intervals = self.intervals(X)
        if self.row_keys:
            return intervals
        return (intervals * self._radix).sum(1)

    @staticmethod
    def _unique(keys: torch.Tensor):
        if keys.ndim == 2:
            return torch.unique(keys, dim=0, sorted=True, return_inverse=True)
        return torch.unique(keys, sorted=True, return_inverse=True)

    # -- update ------------------------------------------------------------------------
    def _merge_same_keys(self, keys, counts, sums):
        """Merge rows with equal keys: counts added, count-weighted sums added."""
        uniq, inverse = self._unique(keys)
        n = uniq.shape[0]
        return uniq, _segment_sums(counts, inverse, n), _segment_sums(sums, inverse, n)

    def widen(self, X: torch.Tensor) -> bool:
        """Widen the running range with ``X``; re-map the bins if it changed. Returns whether it did."""
        Xd = X.to(torch.float64)
        lo = torch.minimum(self.lo, Xd.amin(0))
        hi = torch.maximum(self.hi, Xd.amax(0))
        changed = bool(((lo != self.lo) | (hi != self.hi)).any())
        if not changed:
            return False
        self.lo, self.hi = lo, hi
        if len(self):
            keys = self.codes(self.means)
            self.keys, self.counts, sums = self._merge_same_keys(keys, self.counts, self.means * self.counts[:, None])
            self.means = sums / self.counts[:, None]
            self.n_remaps += 1
        return True

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
        X = X.to(self.device)
        self.widen(X)
        Xd = X.to(torch.float64)
        window_keys, inverse = self._unique(self.codes(Xd))
        n_window_bins = window_keys.shape[0]
        c_w = torch.bincount(inverse, minlength=n_window_bins).to(torch.float64)
        s_w = _segment_sums(Xd, inverse, n_window_bins)
        m = len(self)
        if m == 0:
            keys, counts, sums = window_keys, c_w, s_w
        else:
            # align old bins and window bins on the union of their keys
            union, pos = self._unique(torch.cat([self.keys, window_keys]))
            pos_old, pos_new = pos[:m], pos[m:]
            n = union.shape[0]
            c_here = torch.zeros(n, dtype=torch.float64, device=self.device).index_add_(0, pos_new, c_w)
            old_counts = self.counts.clone()
            # under-populated in this window (absent bins have count 0): fade
            sparse = c_here[pos_old] < sparse_ratio * c_w.mean()
            old_counts = torch.where(sparse, old_counts * decay, old_counts)
            counts = c_here.index_add_(0, pos_old, old_counts)
            sums = torch.zeros((n, self.n_features), dtype=torch.float64, device=self.device)
            sums.index_add_(0, pos_new, s_w).index_add_(0, pos_old, self.means * old_counts[:, None])
            keys = union
        keep = counts >= min_count if min_count > 0 else torch.ones_like(counts, dtype=torch.bool)
        if max_bins is not None and int(keep.sum()) > max_bins:
            # the max_bins largest counts; a stable sort keeps the lower key first among equal counts
            order = torch.sort(torch.where(keep, counts, torch.full_like(counts, -1.0)), descending=True, stable=True).indices
            chosen = torch.zeros_like(keep)
            chosen[order[:max_bins]] = True
            keep = chosen
        if not bool(keep.all()):
            keys, counts, sums = keys[keep], counts[keep], sums[keep]
        self.keys, self.counts = keys, counts
        self.means = sums / counts[:, None] if counts.numel() else sums

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
        s.n_remaps = int(state.get("n_remaps", 0))
        return s
