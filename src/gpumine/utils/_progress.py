"""A dependency-free progress bar for long work, shown only on a terminal.

It draws to stderr when stderr is a TTY and ``verbose > 0``; otherwise it does
nothing, so pipes, CI logs and notebooks stay clean.
"""

from __future__ import annotations

import sys
import time

from ..config import verbosity


class Progress:
    """Counts finished units of work and redraws one status line at most 10 times a second.

    Use as a context manager::

        with Progress(total=n_chunks, desc="knn") as bar:
            for chunk in chunks:
                ...
                bar.update()
    """

    def __init__(self, total: int, desc: str = "", verbose=None, stream=None):
        self.total = max(int(total), 0)
        self.desc = desc
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", lambda: False)
        self.enabled = verbosity(verbose) > 0 and self.total > 1 and bool(isatty())
        self.done = 0
        self._start = time.perf_counter()
        self._last_draw = 0.0

    def __enter__(self):
        return self

    def update(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self._last_draw >= 0.1 or self.done >= self.total:
            self._last_draw = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        frac = min(self.done / self.total, 1.0) if self.total else 1.0
        width = 30
        filled = int(round(frac * width))
        elapsed = now - self._start
        eta = elapsed / frac - elapsed if frac > 0 else float("nan")
        line = f"\r{self.desc} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {elapsed:.1f}s eta {eta:.1f}s"
        self.stream.write(line)
        self.stream.flush()

    def __exit__(self, *exc):
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
        return False
