"""
Streaming LOF on a drifting stream
==================================

The stream (:func:`gpumine.stream.make_drifting_stream`) has clusters that
move, appear and vanish, and 1 % labelled outliers.
:class:`gpumine.stream.StreamingLOF` (a binned summary of the past) and
:class:`gpumine.stream.SlidingWindowLOF` (the raw recent past) score it window
by window with ``process``; the ROC-AUC of their scores against the labels is
printed and the scores are drawn over the stream and against each other. Then the River-style API:
``learn_one`` feeds points one at a time, ``score_one`` scores a new point
without changing the detector, and ``save`` /
:func:`gpumine.stream.load_detector` restore it exactly.

Run as a script: ``python docs/examples/streaming_lof.py [--device
cpu|cuda|auto] [-n N] [--figures DIR]``. It exits with a non-zero status when a
check fails.
"""

# %%
# Set-up
# ------
# ``--device`` picks where gpumine computes (``auto``: a CUDA GPU when there is
# one); ``--figures DIR`` writes the figures as PNG files when run as a script.
import argparse
import sys
import tempfile
from pathlib import Path

import matplotlib

if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # a script (or the gallery build) draws into files, never a window
import matplotlib.pyplot as plt
import numpy as np

parser = argparse.ArgumentParser(description="StreamingLOF against sliding-window LOF on a drifting stream.")
parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default auto)")
parser.add_argument("-n", type=int, default=10_000, help="points in the stream (default 10,000)")
parser.add_argument("--figures", metavar="DIR", help="write the figures as PNG files into DIR")
args = parser.parse_args([] if "ipykernel" in sys.modules else None)  # a notebook's argv is the kernel's
checks = {}  # name -> whether it holds; the last cell fails when one does not

# %%
# The stream
# ----------
# Points arrive in order, two features each; ``y`` marks the outliers. Four
# snapshots of 1,000 consecutive points show the clusters drifting.
from sklearn.metrics import roc_auc_score

from gpumine.stream import SlidingWindowLOF, StreamingLOF, load_detector, make_drifting_stream

X, y = make_drifting_stream(args.n, seed=0)  # (n, 2) float32 in arrival order; y = 1 for outliers
window = 1000
print(f"{len(X)} points, {y.sum()} of them labelled outliers; windows of {window}")

starts = np.linspace(0, len(X) - window, 4).astype(int) // window * window
fig, axes = plt.subplots(1, 4, figsize=(12, 3.2), sharex=True, sharey=True)
for ax, start in zip(axes, starts):
    part = slice(start, start + window)
    ax.scatter(*X[part][y[part] == 0].T, s=3, color="C0", alpha=0.5)
    ax.scatter(*X[part][y[part] == 1].T, s=16, color="C3", marker="x")
    ax.set(title=f"points {start:,}-{start + window - 1:,}", xlabel="x0")
axes[0].set_ylabel("x1")
fig.suptitle("the drifting stream (red: labelled outliers)")
fig.tight_layout()

# %%
# Window by window: StreamingLOF against SlidingWindowLOF
# -------------------------------------------------------
# ``process`` scores a window against the past, then learns it. Both detectors
# keep the same amount of the past: 1,000 weighted bins, or the last 1,000 raw
# points. The threshold is the 99 % quantile of the scores seen so far.
detectors = {
    "StreamingLOF": StreamingLOF(n_neighbors=20, window_size=window, max_bins=1000, threshold="quantile:0.99",
                                 device=args.device),
    "SlidingWindowLOF": SlidingWindowLOF(n_neighbors=20, window_size=window, history_size=1000,
                                         threshold="quantile:0.99", device=args.device),
}
scores = {}
for name, detector in detectors.items():
    parts, flags = [], []
    for start in range(0, len(X), window):
        s, f = detector.process(X[start : start + window])  # score the window with the past, then learn it
        parts.append(s)
        flags.append(f)
    scores[name], flags = np.concatenate(parts), np.concatenate(flags)
    print(f"{name:17s} ROC-AUC {roc_auc_score(y, scores[name]):.4f}; flagged {flags.mean():.2%} of the points, "
          f"{flags[y == 1].mean():.0%} of the outliers")

# %%
# The scores over the stream (log scale): the labelled outliers (red) stand
# out of the bulk of the points in both detectors, through every drift.
fig, axes = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True, sharey=True)
arrival = np.arange(len(X))
for ax, (name, s) in zip(axes, scores.items()):
    ax.scatter(arrival[y == 0], s[y == 0], s=2, color="C0", alpha=0.4, label="normal points")
    ax.scatter(arrival[y == 1], s[y == 1], s=14, color="C3", marker="x", label="labelled outliers")
    ax.set(yscale="log", ylabel="LOF", title=f"{name}: ROC-AUC {roc_auc_score(y, s):.4f}", xlim=(0, len(X)))
    for start in range(window, len(X), window):
        ax.axvline(start, color="0.85", lw=0.8, zorder=0)
axes[0].legend(loc="upper right", fontsize=8)
axes[1].set_xlabel("arrival index (grey lines: window boundaries)")
fig.tight_layout()

# %%
# Point by point, the binned summary's scores against the raw window's: the
# bulk of the points near 1 in both, along the line y = x, and the labelled
# outliers high in both.
a, b = scores["SlidingWindowLOF"], scores["StreamingLOF"]
fig, ax = plt.subplots(figsize=(5.2, 5))
span = [min(a.min(), b.min()) * 0.9, max(a.max(), b.max()) * 1.1]
ax.plot(span, span, color="0.6", lw=1, zorder=0, label="y = x")
ax.scatter(a[y == 0], b[y == 0], s=3, alpha=0.4, color="C0", label="normal points")
ax.scatter(a[y == 1], b[y == 1], s=16, color="C3", marker="x", label="labelled outliers")
ax.set(xscale="log", yscale="log", xlim=span, ylim=span, xlabel="SlidingWindowLOF: LOF",
       ylabel="StreamingLOF: LOF", title="the two detectors, point by point")
ax.legend(loc="upper left")
fig.tight_layout()

# %%
# One point at a time, as River's API
# -----------------------------------
# ``learn_one`` buffers points; every 500th completes a window, which is then
# processed. ``score_one`` scores without learning.
detector = StreamingLOF(n_neighbors=20, window_size=500, device=args.device)
for x in X[:2250]:
    detector.learn_one(x)
print(f"after 2,250 learn_one calls: {detector.n_windows_} windows processed, {detector.n_buffered_} points "
      f"buffered, {len(detector.summary_)} bins kept")
far, near = np.array([9.5, -9.5], np.float32), X[2250]  # X[2250] is the stream's next (normal) point
print(f"score_one: a point far from the data {detector.score_one(far):.2f}, "
      f"the next point of the stream {detector.score_one(near):.2f}")

# %%
# Save and load
# -------------
# The state file holds arrays and JSON, no pickle; the restored detector scores
# exactly as the original.
with tempfile.TemporaryDirectory() as folder:
    path = Path(folder) / "detector.npz"
    detector.save(path)
    restored = load_detector(path, device=args.device)
    same = restored.score_one(far) == detector.score_one(far)
checks["the restored detector scores the same"] = same
print(f"restored from its state file, the detector scores the same: {same}")

# %%
# Checks
# ------
# Run as a script, a failed check ends it with a non-zero status; in the
# documentation build it stops the build.
if args.figures:
    Path(args.figures).mkdir(parents=True, exist_ok=True)
    for number in plt.get_fignums():
        plt.figure(number).savefig(Path(args.figures) / f"streaming_lof_{number}.png", dpi=100)
for name, holds in checks.items():
    print(f"{'ok    ' if holds else 'FAILED'} {name}")
failed = [name for name, holds in checks.items() if not holds]
if failed:
    raise RuntimeError(f"{len(failed)} check(s) failed: {'; '.join(failed)}")
