"""Outlier detection on data streams: LOF_GPU (windows + binned summary) and sliding-window LOF.

* :class:`StreamingLOF` — each window is scored with the virtual points of a
  binned summary of all earlier data, which fades where the stream has left
  (LOF_GPU, Yu 2017, with its errata fixed);
* :class:`SlidingWindowLOF` — the baseline: each window is scored with the
  last ``history_size`` raw points;
* :func:`load_detector` — restore either from a state file (``save``);
* :func:`iter_records` — numeric records from CSV or JSON-lines files and
  pipes, as they arrive, with malformed records reported and skipped;
* :func:`make_drifting_stream` — a labelled drifting 2-D stream.

The command line is ``gpumine stream`` (or ``python -m gpumine.stream``).
"""

from ..utils._lazy import lazy_exports

# Names are imported on first use (PEP 562), so ``python -m gpumine.stream`` can start
# reading its input while the detector's modules (the kNN engine, scikit-learn) load.
_LAZY = {
    "BinnedSummary": "._binning",
    "RecordBatch": "._sources",
    "iter_records": "._sources",
    "SlidingWindowLOF": "._streaming",
    "StreamingLOF": "._streaming",
    "load_detector": "._streaming",
    "make_drifting_stream": "._synthetic",
    "parse_threshold": "._threshold",
}

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

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
