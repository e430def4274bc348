"""Outlier detection on data streams: LOF_GPU (windows + binned summary) and sliding-window LOF.

* :class:`StreamingLOF` — each window is scored with the virtual points of a
  binned summary of all earlier data, which fades where the stream has left
  (seed 001, with its errata fixed);
* :class:`SlidingWindowLOF` — the baseline: each window is scored with the
  last ``history_size`` raw points;
* :func:`load_detector` — restore either from a state file (``save``);
* :func:`iter_records` — numeric records from CSV or JSON-lines files and
  pipes, as they arrive, with malformed records reported and skipped;
* :func:`make_drifting_stream` — a labelled drifting 2-D stream.

The command line is ``gpumine stream`` (or ``python -m gpumine.stream``).
"""

from ._binning import BinnedSummary
from ._sources import RecordBatch, iter_records
from ._streaming import SlidingWindowLOF, StreamingLOF, load_detector
from ._synthetic import make_drifting_stream
from ._threshold import parse_threshold

__all__ = [
    "StreamingLOF",
    "SlidingWindowLOF",
    "BinnedSummary",
    "load_detector",
    "iter_records",
    "RecordBatch",
    "make_drifting_stream",
    "parse_threshold",
]
