"""StreamingLOF / SlidingWindowLOF: equality with batch LOF, the binned summary, purity, state, devices."""

import warnings

import numpy as np
import pytest
import torch
from sklearn.neighbors import LocalOutlierFactor as SkLOF

from gpumine.outliers._lof import DuplicatesWarning
from gpumine.outliers._lof_estimator import LocalOutlierFactor
from gpumine.stream._binning import BinnedSummary
from gpumine.stream._streaming import SlidingWindowLOF, StreamingLOF, load_detector
from gpumine.stream._synthetic import make_drifting_stream
from gpumine.stream._threshold import Threshold, parse_threshold
from helpers import DEVICES, skip_if_no_cuda

CPU = torch.device("cpu")


def _blobs(n, d=2, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, d)) * np.linspace(1, 2, d)).astype(dtype)


# -- equality with batch LOF -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-10), (np.float32, 1e-5)])
def test_first_window_equals_batch_lof_and_sklearn(dtype, rtol):
    X = _blobs(500, d=4, dtype=dtype)
    scores, flags = StreamingLOF(20, 500, device="cpu").process(X)
    batch = LocalOutlierFactor(20, device="cpu").fit(X).outlier_scores_
    np.testing.assert_array_equal(scores, batch)
    np.testing.assert_allclose(scores, -SkLOF(n_neighbors=20).fit(X).negative_outlier_factor_, rtol=rtol)
    assert scores.dtype == dtype and flags.dtype == bool


def test_no_summary_scores_every_window_as_batch_lof():
    X = _blobs(900, d=3, seed=1)
    det = StreamingLOF(10, 300, max_bins=0, device="cpu")
    tumbling = SlidingWindowLOF(10, 300, history_size=0, device="cpu")
    for start in range(0, 900, 300):
        w = X[start : start + 300]
        batch = LocalOutlierFactor(10, device="cpu").fit(w).outlier_scores_
        np.testing.assert_array_equal(det.process(w)[0], batch)
        np.testing.assert_array_equal(tumbling.process(w)[0], batch)
    assert det.summary_ is None and det.n_windows_ == 3


def test_sliding_window_equals_batch_lof_on_window_plus_history():
    X = _blobs(700, d=2, seed=2)
    det = SlidingWindowLOF(15, 200, history_size=250, device="cpu")
    det.process(X[:300])
    det.process(X[300:500])
    history = det.history_.numpy()
    np.testing.assert_array_equal(history, X[250:500])
    scores, _ = det.process(X[500:700])
    joint = LocalOutlierFactor(15, device="cpu").fit(np.concatenate([X[500:700], history])).outlier_scores_
    np.testing.assert_allclose(scores, joint[:200], rtol=1e-12)


def test_learn_one_equals_process_and_learn_many_splits_windows():
    X = _blobs(230, seed=3)
    a = StreamingLOF(8, 50, device="cpu")
    for row in X[:100]:
        a.learn_one(row)
    b = StreamingLOF(8, 50, device="cpu")
    s1, _ = b.process(X[:50])
    s2, _ = b.process(X[50:100])
    np.testing.assert_array_equal(a.last_scores_.numpy(), s2)
    torch.testing.assert_close(a.summary_.counts, b.summary_.counts)
    c = StreamingLOF(8, 50, device="cpu")
    c.learn_many(X)
    assert c.n_windows_ == 4 and c.n_buffered_ == 30 and c.n_seen_ == 200
    scores, flags = c.flush()
    assert scores.shape == (30,) and c.n_buffered_ == 0 and c.n_windows_ == 5


def test_dict_records_use_the_first_records_key_order():
    det = StreamingLOF(2, 3, device="cpu")
    for i in range(3):
        det.learn_one({"a": float(i), "b": 2.0 * i})
    assert det.feature_names_ == ["a", "b"] and det.n_windows_ == 1
    assert det.score_one({"b": 0.0, "a": 0.0}) == pytest.approx(det.score_one(np.array([0.0, 0.0])))
    with pytest.raises(ValueError, match="lacks feature 'b'"):
        det.learn_one({"a": 1.0})


# -- purity of scoring -------------------------------------------------------------------------------
def _snapshot(det):
    s = det.summary_
    return (det.n_windows_, det.n_seen_, det.n_buffered_, det._threshold.n, float(det._threshold.total),
            s.keys.clone(), s.counts.clone(), s.means.clone(), s.lo.clone(), s.hi.clone())


def test_score_one_and_score_many_change_nothing():
    X = _blobs(400, seed=4)
    det = StreamingLOF(10, 100, device="cpu")
    det.learn_many(X[:330])
    before = _snapshot(det)
    far = np.array([[30.0, -30.0]])
    one = det.score_one(far[0])
    many = det.score_many(np.concatenate([far, X[330:340]]))
    after = _snapshot(det)
    for x, y in zip(before, after):
        if isinstance(x, torch.Tensor):
            assert torch.equal(x, y)
        else:
            assert x == y
    assert many[0] == pytest.approx(one) and one > 5
    assert np.median(many[1:]) < 2
    # scoring is a novelty query against the last window_size points + virtual points: deterministic
    assert det.score_one(far[0]) == one


def test_score_before_any_data_is_neutral():
    det = SlidingWindowLOF(5, 10, device="cpu")
    assert det.score_one([1.0, 2.0]) == 1.0
    assert det.n_features_in_ is None  # scoring changes nothing: the first point learned fixes the features


# -- the binned summary ------------------------------------------------------------------------------------
def _oracle_bins(X, lo, hi, b):
    span = np.where(hi > lo, hi - lo, 1.0)
    idx = np.clip(np.floor((X - lo) / span * b), 0, b - 1).astype(np.int64)
    idx[:, hi <= lo] = 0
    codes = (idx * b ** np.arange(X.shape[1])).sum(1)
    keys, inv = np.unique(codes, return_inverse=True)
    counts = np.bincount(inv).astype(float)
    means = np.stack([np.bincount(inv, weights=X[:, j]) for j in range(X.shape[1])], 1) / counts[:, None]
    return keys, counts, means


def test_summary_codes_counts_and_means_equal_numpy_oracle():
    rng = np.random.default_rng(5)
    X = rng.uniform([0, -100, 5], [1, 100, 6], size=(1000, 3))  # very different ranges per dimension
    s = BinnedSummary(3, 7, CPU)
    s.update(torch.as_tensor(X), decay=0.5)
    keys, counts, means = _oracle_bins(X, X.min(0), X.max(0), 7)
    np.testing.assert_array_equal(s.keys.numpy(), keys)
    np.testing.assert_array_equal(s.counts.numpy(), counts)
    np.testing.assert_allclose(s.means.numpy(), means, rtol=1e-12)
    # per-dimension widths (the seed's Δ sums them over the dimensions)
    np.testing.assert_allclose(s.width.numpy(), (X.max(0) - X.min(0)) / 7)
    assert len(np.unique(s.intervals(torch.as_tensor(X))[:, 0].numpy())) == 7


def test_summary_decay_merge_and_pruning():
    s = BinnedSummary(1, 4, CPU)
    first = torch.tensor([[0.0]] * 8 + [[1.0]] * 8 + [[2.0]] * 8 + [[3.0]] * 8 + [[4.0]])
    s.update(first, decay=0.5, sparse_ratio=0.5)
    assert s.counts.tolist() == [8.0, 8.0, 8.0, 9.0]
    # window 2: bins 0 and 3 well populated, bin 1 sparse (1 point < 0.5 * mean), bin 2 absent
    second = torch.tensor([[0.5]] * 10 + [[1.5]] + [[3.5]] * 10)
    s.update(second, decay=0.5, sparse_ratio=0.5)
    np.testing.assert_allclose(s.counts.numpy(), [18.0, 1 + 4.0, 4.0, 19.0])
    # means are count-weighted: bin 1 = (1 * 1.5 + 4 * 1.0) / 5
    assert s.means[1, 0].item() == pytest.approx((1.5 + 4.0) / 5)
    # min_count drops faded bins; max_bins keeps the largest counts (ties to the lower key)
    s.update(torch.tensor([[0.1]] * 30), decay=0.1, sparse_ratio=0.5, min_count=1.0, max_bins=2)
    assert s.counts.tolist() == pytest.approx([48.0, 1.9])
    assert s.keys.tolist() == [0, 3]


def test_summary_remaps_bins_when_the_range_widens():
    s = BinnedSummary(2, 4, CPU)
    X = torch.tensor([[0.0, 0.0], [0.3, 0.0], [0.6, 0.0], [1.0, 1.0]], dtype=torch.float64)
    s.update(X, decay=1.0)
    assert len(s) == 4
    total, weighted = s.counts.sum().item(), (s.means * s.counts[:, None]).sum(0)
    s.update(torch.tensor([[10.0, 10.0]], dtype=torch.float64), decay=1.0, sparse_ratio=0.0)
    assert s.n_remaps == 1
    # [0, 1] now lies in the first interval of [0, 10]: the four old bins merged into one
    assert len(s) == 2 and s.counts.tolist() == [4.0, 1.0]
    assert s.counts.sum().item() == total + 1
    torch.testing.assert_close((s.means * s.counts[:, None]).sum(0), weighted + torch.tensor([10.0, 10.0], dtype=torch.float64))
    np.testing.assert_allclose(s.lo.numpy(), [0, 0]) and np.testing.assert_allclose(s.hi.numpy(), [10, 10])


def test_row_keys_for_many_dimensions_group_like_codes():
    rng = np.random.default_rng(6)
    X = torch.as_tensor(np.round(rng.uniform(0, 1, (300, 25)), 1))
    wide = BinnedSummary(25, 10, CPU)  # 10**25 does not fit in int64: interval rows are the keys
    assert wide.row_keys and wide.keys.ndim == 2
    wide.update(X, decay=0.5)
    narrow = BinnedSummary(2, 10, CPU)
    narrow.update(X[:, :2], decay=0.5)
    assert wide.counts.sum().item() == 300
    # grouping by interval rows equals grouping by their tuples
    tuples = {tuple(r) for r in wide.intervals(X).tolist()}
    assert len(wide) == len(tuples)


def _oracle_summary(windows, b, decay, sparse_ratio, min_count, max_bins):
    """The summary update of the module docstring, bin by bin in plain Python (float64)."""
    d = windows[0].shape[1]
    lo, hi = np.full(d, np.inf), np.full(d, -np.inf)
    bins = {}  # code -> (count, mean)

    def code(P):
        span = hi - lo
        unit = np.where(span > 0, (P - lo) / np.where(span > 0, span, 1.0), 0.0)
        idx = np.clip(np.floor(unit * b), 0, b - 1).astype(np.int64)
        return (idx * b ** np.arange(d)).sum(-1)

    for X in windows:
        lo, hi = np.minimum(lo, X.min(0)), np.maximum(hi, X.max(0))
        old = [(int(code(mean)), count, mean) for count, mean in bins.values()]
        codes = code(X)
        here = {int(c): (codes == c).sum() for c in np.unique(codes)}
        mean_c = X.shape[0] / len(here)
        counts, sums = {}, {}
        for c in here:
            counts[c], sums[c] = float(here[c]), X[codes == c].sum(0)
        for c, count, mean in old:
            faded = count * decay if here.get(c, 0) < sparse_ratio * mean_c else count
            counts[c] = counts.get(c, 0.0) + faded
            sums[c] = sums.get(c, np.zeros(d)) + mean * faded
        kept = sorted(c for c in counts if counts[c] >= min_count)
        if len(kept) > max_bins:
            kept = sorted(sorted(kept, key=lambda c: (-counts[c], c))[:max_bins])
        bins = {c: (counts[c], sums[c] / counts[c]) for c in kept}
    keys = np.array(sorted(bins))
    return keys, np.array([bins[c][0] for c in keys]), np.array([bins[c][1] for c in keys])


def test_summary_over_many_windows_equals_a_plain_oracle():
    rng = np.random.default_rng(12)
    # a cluster that moves (the range widens: bins are re-mapped and merge) and one that stays
    windows = [np.concatenate([rng.normal(0, 1, (150, 2)) + 1.5 * t, rng.normal(-4, 0.3, (50, 2))]) for t in range(8)]
    s = BinnedSummary(2, 12, CPU)
    for X in windows:
        s.update(torch.as_tensor(X), decay=0.5, sparse_ratio=0.3, min_count=0.2, max_bins=30)
    keys, counts, means = _oracle_summary(windows, 12, 0.5, 0.3, 0.2, 30)
    assert s.n_remaps == 7 and len(s) == 30
    np.testing.assert_array_equal(s.keys.numpy(), keys)
    np.testing.assert_allclose(s.counts.numpy(), counts, rtol=1e-12)
    np.testing.assert_allclose(s.means.numpy(), means, rtol=1e-12)


def test_multiword_row_keys_group_like_unique_rows():
    from gpumine.stream._binning import _sorted_groups

    rng = np.random.default_rng(13)
    rows = torch.as_tensor(rng.integers(0, 3, (400, 40)))
    rows[200:] = rows[:200]  # many equal keys
    s = BinnedSummary(40, 3, CPU)  # 3**40 > 2**62: rows packed into two words
    assert s.row_keys and s._n_words == 2
    order, segment = _sorted_groups(s._words(rows))
    uniq, inverse = torch.unique(rows, dim=0, sorted=True, return_inverse=True)
    ranked = rows[order]
    assert int(segment[-1]) + 1 == uniq.shape[0]
    assert torch.equal(ranked[torch.searchsorted(segment, torch.arange(uniq.shape[0]))], uniq)
    assert torch.equal(segment, inverse[order])
    # stable: equal keys keep their input order
    for g in range(5):
        members = order[segment == g]
        assert torch.equal(members, members.sort().values)


@pytest.mark.parametrize("n_features, bins_per_dim", [(2, 12), (1, 4), (25, 10), (40, 3)])
@pytest.mark.parametrize("min_count, max_bins, extra", [(0.2, 30, 17), (0.0, None, 17), (0.0, 7, 17), (0.0, 30, None)])
def test_padded_merge_equals_the_unpadded_one(n_features, bins_per_dim, min_count, max_bins, extra):
    # padding rows (the graph replay's fixed shapes) must change nothing: same keys, bit-identical
    # counts and means, same remap count, from the first window (no bins yet) on
    rng = np.random.default_rng(n_features)
    windows = [np.concatenate([rng.normal(0, 1, (90, n_features)) + 1.5 * t, rng.normal(-4, 0.3, (30, n_features))])
               for t in range(6)]
    windows.append(windows[-1][:10])  # a short window: most bins absent, so they decay
    plain, padded = BinnedSummary(n_features, bins_per_dim, CPU), BinnedSummary(n_features, bins_per_dim, CPU)
    for X in windows:
        X = torch.as_tensor(X)
        plain.update(X, decay=0.5, sparse_ratio=0.3, min_count=min_count, max_bins=max_bins)
        # extra None: padded to max_bins, as on CUDA
        pad_to = max_bins if extra is None else len(plain) + extra
        padded.update(X, decay=0.5, sparse_ratio=0.3, min_count=min_count, max_bins=max_bins, pad_to=pad_to)
        assert torch.equal(padded.keys, plain.keys)
        assert torch.equal(padded.counts, plain.counts) and torch.equal(padded.means, plain.means)
        assert padded.n_remaps == plain.n_remaps
    assert plain.n_remaps > 0


@pytest.mark.parametrize("cls, kwargs", [(StreamingLOF, {"max_bins": 40}), (SlidingWindowLOF, {"history_size": 40})])
def test_detectors_pickle_and_copy_after_windows(cls, kwargs):
    import copy
    import pickle

    X = make_drifting_stream(900, seed=8)[0]
    det = cls(10, 300, device="cpu", **kwargs)
    det.process(X[:300])
    det.process(X[300:600])
    twins = [pickle.loads(pickle.dumps(det)), copy.deepcopy(det)]
    a, fa = det.process(X[600:])
    for twin in twins:
        b, fb = twin.process(X[600:])
        np.testing.assert_array_equal(b, a)
        np.testing.assert_array_equal(fb, fa)


def test_graph_replay_runs_eagerly_off_cuda():
    from gpumine.utils._graph_replay import GraphReplay

    calls = []

    def double(x, *, scale):
        calls.append(x.shape)
        return (x * scale,)

    replay = GraphReplay(double)
    for _ in range(3):
        (out,) = replay(torch.arange(4.0), scale=2.0)
        assert out.tolist() == [0.0, 2.0, 4.0, 6.0]
    assert len(calls) == 3 and replay.n_captures == 0 and replay.n_replays == 0
    assert not replay.may_replay(torch.device("cpu"), 0)  # so the summary is not padded off CUDA


def test_graph_replay_holds_a_bound_method_weakly():
    import gc
    import weakref

    s = BinnedSummary(2, 4, CPU)
    s.update(torch.zeros(3, 2), decay=0.5)
    alive = weakref.ref(s)
    replay = s._merge
    del s
    gc.collect()
    assert alive() is None  # no cycle keeps the summary (and on CUDA its graphs) alive
    with pytest.raises(RuntimeError, match="no longer exists"):
        replay(torch.zeros(1))


def test_summary_and_threshold_wait_for_the_device_once_per_window():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Waits(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.split(".")[0] in ("_local_scalar_dense", "nonzero", "_unique2", "unique_dim", "masked_select"):
                Waits.n += 1
            return func(*args, **(kwargs or {}))

    X = make_drifting_stream(2000, seed=6)[0]
    s, t = BinnedSummary(2, 10, CPU), Threshold("quantile:0.9", CPU)
    s.update(torch.as_tensor(X[:500]), decay=0.5, min_count=0.5, max_bins=40)
    with Waits():
        for i in range(500, 2000, 500):
            s.update(torch.as_tensor(X[i : i + 500]), decay=0.5, min_count=0.5, max_bins=40)
            lof = torch.as_tensor(np.r_[np.exp(np.random.default_rng(i).normal(0, 0.3, 499)), np.inf])
            t.update(lof)
            t.flags(lof)
    assert Waits.n == 3  # the one count of kept bins per update
    assert t.n == 1497  # non-finite scores are left out of the statistics


# -- virtual points and parameters ------------------------------------------------------------------------
def test_virtual_lrd_is_positive_for_single_and_decayed_bins():
    det = StreamingLOF(3, 20, bins_per_dim=50, decay=0.1, min_count=0.0, device="cpu")
    X = _blobs(20, seed=7)
    det.process(X)
    det.process(X + 100)  # every old bin is absent: decayed to 0.1
    counts = det.summary_.counts
    assert (counts < 1).any() and (counts == 1).any()
    lrd = det._reference_lrd(torch.ones(len(counts), dtype=torch.float64), det._known_lrd_ref(), counts, det._ref_finite())
    assert (lrd > 0).all() and torch.isfinite(lrd).all()
    # monotone in the count
    order = torch.argsort(counts)
    assert (lrd[order].diff() >= 0).all()


def test_decay_and_virtual_lrd_scale_are_separate_parameters():
    X = make_drifting_stream(3000, seed=1)[0]
    runs = {}
    for name, kwargs in {"base": {}, "scale": {"virtual_lrd_scale": 3.0}, "decay": {"decay": 0.9}}.items():
        det = StreamingLOF(10, 500, device="cpu", **kwargs)
        scores = np.concatenate([det.process(X[i : i + 500])[0] for i in range(0, 3000, 500)])
        runs[name] = (scores, det.summary_.counts.clone())
    # the scale changes scores but not the summary; the decay changes the summary
    assert torch.equal(runs["base"][1], runs["scale"][1])
    assert not np.allclose(runs["base"][0][500:], runs["scale"][0][500:])
    assert not torch.equal(runs["base"][1], runs["decay"][1])
    np.testing.assert_array_equal(runs["base"][0][:500], runs["decay"][0][:500])  # first window: no summary yet


def test_memory_stays_bounded_on_a_long_stream():
    X = make_drifting_stream(8000, seed=2)[0]
    det = StreamingLOF(10, 256, max_bins=64, bins_per_dim=30, device="cpu")
    for i in range(0, 8000, 256):
        det.process(X[i : i + 256])
        assert len(det.summary_) <= 64
    assert det.summary_.n_remaps >= 1


def test_streaming_flags_a_far_point_and_not_the_recurring_rare_cluster():
    """Seed Fig. 1: points of a cluster that shows only a few points per window are inliers given the history."""
    rng = np.random.default_rng(8)
    windows = []
    for _ in range(8):
        body = rng.standard_normal((196, 2))
        rare = rng.normal([8.0, 8.0], 0.3, size=(4, 2))
        windows.append(np.concatenate([body, rare]))
    det = StreamingLOF(20, 200, device="cpu", threshold="quantile:0.98")
    tumbling = SlidingWindowLOF(20, 200, history_size=0, device="cpu")
    for w in windows:
        s_stream, _ = det.process(w)
        s_tumble, _ = tumbling.process(w)
    assert s_stream[-4:].mean() < s_tumble[-4:].mean()
    assert det.score_one([-12.0, 12.0]) > 3


def test_duplicates_in_a_stream_stay_finite_and_warn_once():
    rng = np.random.default_rng(9)
    det = StreamingLOF(5, 100, device="cpu")
    with pytest.warns(DuplicatesWarning) as record:
        for _ in range(3):
            w = np.concatenate([rng.standard_normal((60, 2)), np.zeros((40, 2))])
            scores, _ = det.process(w)
            assert np.isfinite(scores).all()
    assert len([r for r in record if issubclass(r.category, DuplicatesWarning)]) == 1
    assert det.n_duplicate_points_ >= 40


# -- thresholds -------------------------------------------------------------------------------------------
def test_threshold_specs():
    assert parse_threshold(("quantile", 0.9)) == ("quantile", 0.9)
    assert parse_threshold("1.5") == ("fixed", 1.5)
    for bad in ["median", 0, -1.0, "quantile:1.5", ("quantile", "x"), float("nan")]:
        with pytest.raises(ValueError, match="threshold"):
            parse_threshold(bad)


def test_mean_threshold_is_the_running_mean_of_all_scores():
    X = _blobs(600, seed=10)
    det = StreamingLOF(10, 200, device="cpu")
    seen = []
    for i in range(0, 600, 200):
        scores, flags = det.process(X[i : i + 200])
        seen.append(scores)
        mean = np.concatenate(seen).mean()
        assert det.threshold_ == pytest.approx(mean)
        np.testing.assert_array_equal(flags, scores > mean)


def test_quantile_threshold_flags_about_the_contamination():
    t = Threshold("quantile:0.95", CPU)
    rng = np.random.default_rng(11)
    lof = torch.as_tensor(np.exp(rng.normal(0, 0.3, 20000)))
    t.update(lof)
    q = float(np.quantile(lof.numpy(), 0.95))
    assert t.value().item() == pytest.approx(q, rel=0.005)
    assert abs(t.flags(lof).float().mean().item() - 0.05) < 0.003
    fixed = Threshold(1.5, CPU)
    assert fixed.flags(torch.tensor([1.4, 1.6])).tolist() == [False, True]


# -- state ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls,kwargs", [(StreamingLOF, {"threshold": "quantile:0.9"}), (SlidingWindowLOF, {"history_size": 150})])
def test_save_and_load_resume_exactly(tmp_path, cls, kwargs):
    X = make_drifting_stream(1300, seed=3)[0]
    a = cls(10, 200, device="cpu", **kwargs)
    a.learn_many(X[:650])  # 3 windows + 50 buffered
    path = a.save(tmp_path / "state.npz")
    with np.load(path, allow_pickle=False) as data:  # no pickle inside
        assert "meta" in data.files
    b = load_detector(path, device="cpu")
    assert type(b) is cls and b.get_params() == a.get_params() and b.n_buffered_ == 50
    a.learn_many(X[650:])
    b.learn_many(X[650:])
    np.testing.assert_array_equal(a.last_scores_.numpy(), b.last_scores_.numpy())
    assert a.threshold_ == b.threshold_
    assert a.score_one(X[0]) == b.score_one(X[0])
    assert not list(tmp_path.glob(".*.tmp"))


def test_load_rejects_damaged_or_foreign_files(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a readable gpumine stream state"):
        load_detector(bad)
    other = tmp_path / "other.npz"
    np.savez(other, meta=np.array('{"format": "x"}'))
    with pytest.raises(ValueError, match="not a gpumine stream state|not a valid"):
        load_detector(other)
    det = StreamingLOF(5, 50, device="cpu")
    det.process(_blobs(50))
    path = det.save(tmp_path / "s.npz")
    with pytest.raises(ValueError, match="holds a StreamingLOF"):
        SlidingWindowLOF.load(path)
    with pytest.raises(FileNotFoundError):
        load_detector(tmp_path / "missing.npz")


# -- validation --------------------------------------------------------------------------------------------
def test_parameter_errors_name_the_parameter():
    cases = [
        (dict(n_neighbors=0), ValueError, "n_neighbors"),
        (dict(window_size=2.5), TypeError, "window_size"),
        (dict(decay=0.0), ValueError, "decay"),
        (dict(decay=1.5), ValueError, "decay"),
        (dict(virtual_lrd_scale=0), ValueError, "virtual_lrd_scale"),
        (dict(bins_per_dim=0), ValueError, "bins_per_dim"),
        (dict(max_bins=-1), ValueError, "max_bins"),
        (dict(threshold="top"), ValueError, "threshold"),
        (dict(metric="inner_product"), ValueError, "inner_product"),
        (dict(metric="nope"), ValueError, "Unknown metric"),
    ]
    for kwargs, exc, match in cases:
        with pytest.raises(exc, match=match):
            StreamingLOF(**{"device": "cpu", **kwargs})
    det = StreamingLOF(5, 20, device="cpu")
    det.process(_blobs(20, d=2))
    with pytest.raises(ValueError, match="expecting 2 features"):
        det.process(_blobs(20, d=3))
    with pytest.raises(ValueError, match="NaN or infinity"):
        det.learn_one([np.nan, 1.0])
    with pytest.raises(ValueError, match="one point"):
        det.score_one(np.zeros((2, 2)))


def test_small_windows_use_fewer_neighbours():
    det = StreamingLOF(20, 5, device="cpu")
    scores, _ = det.process(_blobs(1))
    assert scores.tolist() == [1.0]
    scores, _ = det.process(_blobs(4, seed=1))  # 4 points + 1 virtual point: k = 4
    assert np.isfinite(scores).all()


def test_torch_input_gives_torch_output():
    det = StreamingLOF(5, 30, device="cpu")
    scores, flags = det.process(torch.as_tensor(_blobs(30, dtype=np.float32)))
    assert isinstance(scores, torch.Tensor) and scores.dtype == torch.float32 and flags.dtype == torch.bool


# -- devices ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_streaming_devices_agree(device):
    skip_if_no_cuda(device)
    X = make_drifting_stream(6000, seed=4)[0]
    ref = StreamingLOF(20, 1000, device="cpu")
    det = StreamingLOF(20, 1000, device=device)
    for i in range(0, 6000, 1000):
        a, fa = ref.process(X[i : i + 1000])
        b, fb = det.process(X[i : i + 1000])
        np.testing.assert_allclose(b, a, rtol=1e-4)
    np.testing.assert_allclose(det.summary_.counts.cpu().numpy(), ref.summary_.counts.numpy())


@pytest.mark.gpu
def test_gpu_window_synchronises_with_the_host_a_few_times():
    skip_if_no_cuda("cuda")
    X = torch.as_tensor(make_drifting_stream(5 * 4096, seed=7)[0], device="cuda")
    det = StreamingLOF(20, 4096, device="cuda")
    for i in range(3):
        det.process(X[i * 4096 : (i + 1) * 4096])
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            det.process(X[3 * 4096 : 4 * 4096])
    finally:
        torch.cuda.set_sync_debug_mode(0)
    syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
    # input check 1, kNN engine 3, k-distance zero count 1, kept bins 1 (was about 25)
    assert len(syncs) <= 8, [f"{w.filename}:{w.lineno}" for w in syncs]


@pytest.mark.gpu
@pytest.mark.parametrize("n_features, threshold, sliding", [(2, "quantile:0.95", False), (10, "mean", False),
                                                           (30, 1.5, False), (10, "quantile:0.9", True)])
def test_gpu_windows_replayed_as_graphs_equal_eager(n_features, threshold, sliding):
    # the window's scoring after its kNN and the summary's merge replay as CUDA graphs once their
    # (padded) shapes repeat; scores, flags, threshold and bins must be those of the eager run bit for bit
    skip_if_no_cuda("cuda")
    import gpumine.utils._graph_replay as replay

    rng = np.random.default_rng(n_features)
    drift = np.linspace(0.0, 4.0, 12 * 1500)[:, None] / np.sqrt(n_features)
    X = torch.as_tensor(rng.normal(size=(12 * 1500, n_features)) + drift, dtype=torch.float32, device="cuda")
    runs = []
    for on in (False, True):
        replay.GRAPH_REPLAY = on
        try:
            if sliding:
                det = SlidingWindowLOF(20, 1500, history_size=300, device="cuda", threshold=threshold)
            else:
                det = StreamingLOF(20, 1500, max_bins=300, device="cuda", threshold=threshold)
            out = [det.process(X[i : i + 1500]) for i in range(0, X.shape[0], 1500)]
        finally:
            replay.GRAPH_REPLAY = True
        runs.append((det, torch.cat([o[0] for o in out]), torch.cat([o[1] for o in out])))
    (eager, s0, f0), (graphed, s1, f1) = runs
    # in 2-D the bins stay under max_bins and their number varies: so do the tail's shapes
    assert graphed._tail.n_replays >= (1 if n_features == 2 else 8), graphed._tail.last_error
    assert torch.equal(s1, s0) and torch.equal(f1, f0)
    assert graphed.threshold_ == eager.threshold_ and graphed.lrd_ref_ == eager.lrd_ref_
    assert graphed.score_many(X[:50].cpu().numpy()).tolist() == eager.score_many(X[:50].cpu().numpy()).tolist()
    if not sliding:
        assert graphed.summary_._merge.n_replays >= 8, graphed.summary_._merge.last_error
        assert torch.equal(graphed.summary_.keys, eager.summary_.keys)
        assert torch.equal(graphed.summary_.counts, eager.summary_.counts)
        assert torch.equal(graphed.summary_.means, eager.summary_.means)


@pytest.mark.gpu
def test_gpu_graph_replay_equals_eager_and_refuses_a_host_wait():
    skip_if_no_cuda("cuda")
    from gpumine.utils._graph_replay import GraphReplay

    def chain(x, y, *, k):
        z = torch.sort(x * y + 1.0, stable=True).values
        return z[:k].cumsum(0), (z > 0).sum()

    replay = GraphReplay(chain)
    x = torch.randn(1000, device="cuda")
    for i in range(5):
        y = torch.randn(1000, device="cuda")
        got = replay(x, y, k=7)
        want = chain(x, y, k=7)
        assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert replay.n_captures == 1 and replay.n_replays == 4

    import gpumine.utils._graph_replay as replay_module

    capped = GraphReplay(chain)
    limit = replay_module.GRAPH_REPLAY_MAX_INPUT_BYTES
    replay_module.GRAPH_REPLAY_MAX_INPUT_BYTES = 4000  # two inputs of 4,000 bytes: over the cap
    try:
        for _ in range(3):
            assert all(torch.equal(a, b) for a, b in zip(capped(x, y, k=7), chain(x, y, k=7)))
    finally:
        replay_module.GRAPH_REPLAY_MAX_INPUT_BYTES = limit
    assert capped.n_captures == 0 and not capped.replayed

    waits = GraphReplay(lambda x: (x[x > 0],))  # a data-dependent shape waits for the device
    for _ in range(3):
        assert torch.equal(waits(x)[0], x[x > 0])
    assert waits.n_replays == 0 and waits.last_error


@pytest.mark.gpu
def test_gpu_streaming_from_cuda_tensors():
    skip_if_no_cuda("cuda")
    X = torch.as_tensor(make_drifting_stream(20000, seed=5)[0], device="cuda")
    det = StreamingLOF(20, 4096, device="cuda")
    for i in range(0, 20000, 4096):
        scores, flags = det.process(X[i : i + 4096])
        assert scores.is_cuda and flags.is_cuda
    assert det.summary_.counts.is_cuda and len(det.summary_) <= det.max_bins
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert det.score_one(X[0]) > 0


def test_scoring_before_learning_fixes_no_features_and_unknown_keys_are_refused():
    from gpumine.stream import StreamingLOF

    det = StreamingLOF(n_neighbors=2, window_size=4, device="cpu")
    assert det.score_one({"a": 1.0}) == 1.0  # nothing learned yet
    assert det.feature_names_ is None and det.n_features_in_ is None
    for x in ({"a": 0.0, "b": 1.0}, {"a": 1.0, "b": 0.0}, {"a": 2.0, "b": 2.0}, {"a": 0.5, "b": 0.5}):
        det.learn_one(x)
    assert det.feature_names_ == ["a", "b"]
    with pytest.raises(ValueError, match=r"feature\(s\) \['c'\] the detector does not know"):
        det.score_one({"a": 1.0, "b": 1.0, "c": 5.0})
    with pytest.raises(ValueError, match="lacks feature 'b'"):
        det.learn_one({"a": 1.0})
