"""Streaming LOF on a drifting stream: StreamingLOF (binned summary) against sliding-window LOF.

The stream (:func:`gpumine.stream.make_drifting_stream`) has clusters that
move, appear and vanish, and 1 % labelled outliers. Both detectors score it
window by window with ``process``; the ROC-AUC of their scores against the
labels is printed. Then the River-style API: ``learn_one`` feeds points one at
a time, ``score_one`` scores a new point without changing the detector, and
``save`` / :func:`gpumine.stream.load_detector` restore it exactly.

Run: ``python docs/examples/streaming_lof.py [--device cpu|cuda|auto]``
"""

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default auto)")
    parser.add_argument("-n", type=int, default=10_000, help="points in the stream (default 10,000)")
    args = parser.parse_args(argv)

    from sklearn.metrics import roc_auc_score

    from gpumine.stream import SlidingWindowLOF, StreamingLOF, load_detector, make_drifting_stream

    X, y = make_drifting_stream(args.n, seed=0)  # (n, 2) float32 in arrival order; y = 1 for outliers
    window = 1000
    detectors = {
        "StreamingLOF": StreamingLOF(n_neighbors=20, window_size=window, max_bins=1000, threshold="quantile:0.99",
                                     device=args.device),
        "SlidingWindowLOF": SlidingWindowLOF(n_neighbors=20, window_size=window, history_size=1000,
                                             threshold="quantile:0.99", device=args.device),
    }
    for name, detector in detectors.items():  # equal memory: 1,000 bins or 1,000 past points
        scores, flags = [], []
        for start in range(0, len(X), window):
            s, f = detector.process(X[start : start + window])  # score the window with the past, then learn it
            scores.append(s)
            flags.append(f)
        scores, flags = np.concatenate(scores), np.concatenate(flags)
        print(f"{name:17s} ROC-AUC {roc_auc_score(y, scores):.4f}; flagged {flags.mean():.2%} of the points, "
              f"{flags[y == 1].mean():.0%} of the outliers")

    # one point at a time, as River's API
    detector = StreamingLOF(n_neighbors=20, window_size=500, device=args.device)
    for x in X[:2250]:
        detector.learn_one(x)  # every 500th point completes a window, which is then processed
    print(f"after 2,250 learn_one calls: {detector.n_windows_} windows processed, {detector.n_buffered_} points "
          f"buffered, {len(detector.summary_)} bins kept")
    far, near = np.array([9.5, -9.5], np.float32), X[2250]  # X[2250] is the stream's next (normal) point
    print(f"score_one: a point far from the data {detector.score_one(far):.2f}, "
          f"the next point of the stream {detector.score_one(near):.2f}")

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "detector.npz"
        detector.save(path)  # arrays + JSON, no pickle
        restored = load_detector(path, device=args.device)
        same = restored.score_one(far) == detector.score_one(far)
    print(f"restored from its state file, the detector scores the same: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
