"""Exactly-once resume of ``gpumine stream``: where a run got to in its input and its output.

A state file saved by the command line holds, beside the detector, a *progress*
record: which input it read (its path and a hash of its first bytes), the input
line of the last record the detector has learned, and, when the scores go to a
file (``--output``), that file and its length when the state was saved. Both are
written together at every checkpoint, after the output is flushed to disk, so
the state always describes a prefix of the input and exactly the output that
prefix produced.

A resumed run on the same input skips every record through that line (they are
in the detector and in the output already); with ``--output`` the output file is
cut back to the saved length first (records written after the last checkpoint,
whose learning the state does not hold, are scored again). So after ``kill -9``
at any point and a resume, every record is in the output once and the scores
are those of an uninterrupted run. Standard input cannot be recognised again:
a resumed run on it continues learning and skips nothing (and says so).
"""

from __future__ import annotations

import hashlib
import os
import sys

__all__ = ["input_fingerprint", "ResumePoint", "OutputSink"]

_HEAD_BYTES = 1 << 16


def input_fingerprint(source) -> dict | None:
    """Path and a hash of the first 64 KiB of a regular input file; None for standard input or a pipe."""
    if source in (None, "-") or not os.path.isfile(source):
        return None
    with open(source, "rb") as fh:
        head = fh.read(_HEAD_BYTES)
    return {"path": os.path.realpath(source), "head_sha256": hashlib.sha256(head).hexdigest(), "head_bytes": len(head)}


def _same_input(saved: dict | None, current: dict | None) -> bool:
    if not saved or not current or saved.get("path") != current["path"]:
        return False
    # the file may have grown since (a log): compare the bytes the saved hash covered
    n = int(saved.get("head_bytes", _HEAD_BYTES))
    with open(current["path"], "rb") as fh:
        return hashlib.sha256(fh.read(n)).hexdigest() == saved.get("head_sha256")


class ResumePoint:
    """What a run skips and where its output continues, from a loaded detector's progress record."""

    def __init__(self, progress: dict | None, source, output):
        self.fingerprint = input_fingerprint(source)
        self.skip_through = 0  # input lines up to this one are done
        self.output_bytes = None  # cut the output back to this length and append
        self.note = None
        if progress is None:
            return
        if self.fingerprint is None:
            self.note = "reading standard input or a pipe: the resumed detector continues learning; no records are skipped"
            return
        if not _same_input(progress.get("input"), self.fingerprint):
            self.note = "the state was saved on another input: the resumed detector continues learning on this one"
            return
        self.skip_through = int(progress.get("last_line", 0))
        saved_output = progress.get("output")
        if output is not None and saved_output and saved_output.get("path") == os.path.realpath(output) \
                and os.path.isfile(output):
            self.output_bytes = int(saved_output["bytes"])
        self.note = f"resuming after input line {self.skip_through} (records through it were scored by an earlier run)"
        if output is not None and self.output_bytes is None:
            self.note += f"; {output} was not the earlier run's output, so it starts anew"

    def progress(self, last_line: int, output: "OutputSink") -> dict:
        """The record to save with the state now (the output must be flushed first)."""
        record = {"input": self.fingerprint, "last_line": int(last_line)}
        if output.path is not None:
            record["output"] = {"path": os.path.realpath(output.path), "bytes": output.size()}
        return record


class OutputSink:
    """Standard output, or ``--output FILE``: started anew, or cut back to a resume point and appended to."""

    def __init__(self, path, resume_bytes: int | None):
        self.path = path
        self.appending = False
        if path is None:
            self.stream = sys.stdout
            return
        if resume_bytes is not None:
            with open(path, "r+b") as fh:  # drop what was written after the last checkpoint
                fh.truncate(resume_bytes)
            self.appending = resume_bytes > 0
            self.stream = open(path, "a", encoding="utf-8", newline="")
        else:
            folder = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(folder):
                raise FileNotFoundError(f"cannot write {path}: folder {folder} does not exist; create it first")
            self.stream = open(path, "w", encoding="utf-8", newline="")

    def durable(self) -> None:
        """Everything written so far is on disk (before a state that counts it is saved)."""
        if self.path is None:
            try:
                self.stream.flush()
            except (BrokenPipeError, ValueError):  # the reader has gone: nothing more can be delivered
                pass
            return
        self.stream.flush()
        os.fsync(self.stream.fileno())

    def size(self) -> int:
        return os.fstat(self.stream.fileno()).st_size if self.path is not None else 0

    def close(self) -> None:
        if self.path is not None:
            self.stream.close()
