"""``gpumine stream``: score a stream of records with StreamingLOF (or sliding-window LOF) as they arrive.

Reads CSV or JSON-lines records from a file or standard input (``-``),
scores them window by window and writes one output record per input record
(its input line number, LOF score and outlier flag, plus any ``--echo``
columns), flushing after every window. Malformed records are reported on
stderr with their line number and skipped. It ends cleanly at end of input
and on Ctrl-C (SIGINT): the partial window is scored and written, and the
detector's state is saved to ``--state`` (atomically: a temporary file
renamed), from which the next run resumes.

Exit codes: 0 after end of input or Ctrl-C; 2 for bad usage or input that
cannot be read at all (one line on stderr).

Throughput: records are read and parsed in a background thread
(:class:`_ReadAhead`, at most 32 reads of about 2 MiB ahead), which
overlaps the scoring and, at start-up, the loading of the detector (a
second thread starts the CUDA context meanwhile); the output of a window is
formatted in one go, with NumPy (:mod:`._format`). On Ctrl-C the records
already read are scored too.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import signal
import sys
import threading
import time
from pathlib import Path

from ..cli._args import add_device_options, positive_int
from ..cli._errors import EXPECTED_ERRORS, explain

# NumPy and torch are imported where a run needs them, so that --help and usage errors
# answer without loading them.

__all__ = ["register", "build_parser", "main", "run"]

_MODEL_DEFAULTS = {
    "n_neighbors": 20,
    "window_size": 2048,
    # a contamination of 10 % as PyOD's default; the running-mean rule flags 30-40 % of a real stream
    "threshold": "quantile:0.9",
    "metric": "euclidean",
    "bins_per_dim": 10,
    "decay": 0.5,
    "virtual_lrd_scale": 1.0,
    "max_bins": 2048,
    "history_size": 2048,
}
_STREAMING_ONLY = ("bins_per_dim", "decay", "virtual_lrd_scale", "max_bins")
_SLIDING_ONLY = ("history_size",)


def _nonnegative_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", nargs="?", default="-", help="CSV or JSON-lines file (.gz works), or - for standard input (default)")
    p.add_argument("--window", dest="window_size", type=positive_int, default=None, help="points per window (default 2048)")
    p.add_argument("-k", "--k", dest="n_neighbors", type=positive_int, default=None, help="LOF neighbours (default 20)")
    p.add_argument("--format", choices=["csv", "jsonl"], default=None, help="input format (default: jsonl for .jsonl/.ndjson files, else csv)")
    p.add_argument("--output-format", choices=["csv", "jsonl"], default=None, help="output format (default: the input format)")
    p.add_argument("--state", type=Path, default=None, metavar="FILE",
                   help="resume from FILE when it exists, and save the detector there at the end (atomically)")
    p.add_argument("--checkpoint-every", type=_nonnegative_int, default=0, metavar="N",
                   help="also save --state every N windows (default 0: only at the end)")
    p.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="write the scores to FILE instead of standard output; with --state a resumed run "
                        "continues it exactly once (records written after the last checkpoint are redone)")
    p.add_argument("--method", choices=["streaming", "sliding"], default=None,
                   help="streaming: StreamingLOF with a binned summary (default); sliding: SlidingWindowLOF")
    p.add_argument("--threshold", default=None,
                   help="quantile:Q flags LOF above the running Q-quantile (default quantile:0.9, a 10 %% contamination); "
                        "mean flags LOF above the running mean of all scores so far (30-40 %% of a real stream); "
                        "or an LOF value such as 1.5 flags LOF above it")
    p.add_argument("--metric", default=None, help="distance (default euclidean)")
    p.add_argument("--bins-per-dim", type=positive_int, default=None, help="streaming: intervals per dimension (default 10)")
    p.add_argument("--decay", type=float, default=None, help="streaming: fading factor in (0, 1] (default 0.5)")
    p.add_argument("--virtual-lrd-scale", type=_positive_float, default=None, help="streaming: scale of the virtual points' lrd (default 1)")
    p.add_argument("--max-bins", type=_nonnegative_int, default=None, help="streaming: most bins kept (default 2048)")
    p.add_argument("--history", dest="history_size", type=_nonnegative_int, default=None, help="sliding: past points kept (default 2048)")
    p.add_argument("--columns", default=None, help="feature columns: indices (negative from the end) or names, comma-separated (default: all not echoed)")
    p.add_argument("--echo", default=None, help="columns copied to the output verbatim (e.g. an id or label), comma-separated")
    p.add_argument("--header", choices=["auto", "yes", "no"], default="auto", help="CSV header line (default: auto-detect)")
    p.add_argument("--delimiter", default=",", help="CSV delimiter (default ,)")
    p.add_argument("--max-latency", type=_positive_float, default=None, metavar="SECONDS",
                   help="score a partial window when no record has arrived for this long (default: wait for a full window)")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                   help="precision of a new detector (default float32; a resumed one keeps its own)")
    add_device_options(p, quiet_help="no summary on stderr (malformed records are still reported)")


_DESCRIPTION = (
    "Score a stream of numeric records with streaming LOF (StreamingLOF: each window scored with a "
    "binned summary of all earlier data) or sliding-window LOF, as the records arrive. Writes one output "
    "record per input record: line,lof,outlier (plus --echo columns), flushed after every window. "
    "Malformed records are reported on stderr and skipped. Ends at end of input or on Ctrl-C (the "
    "partial window is scored); --state FILE resumes a saved detector and saves it at the end. A resumed "
    "run on the same input file skips the records already scored; with -o FILE the output is continued "
    "exactly once, even after kill -9 (see --checkpoint-every)."
)


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``stream`` command to a ``gpumine`` sub-parser collection."""
    p = subparsers.add_parser("stream", help="streaming LOF outlier scores for CSV/JSON-lines records as they arrive",
                              description=_DESCRIPTION)
    _add_arguments(p)
    p.set_defaults(func=run)
    return p


def build_parser(prog: str = "gpumine stream") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=_DESCRIPTION)
    _add_arguments(p)
    p.set_defaults(func=run)
    return p


def main(argv=None, prog: str = "gpumine stream") -> int:
    """Run ``gpumine stream`` on its own (``python -m gpumine.stream``); returns the exit code."""
    args = build_parser(prog).parse_args(argv)
    try:
        return int(run(args) or 0)
    except EXPECTED_ERRORS as exc:
        print(f"{prog}: error: {explain(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


# -- detector ----------------------------------------------------------------------------------
def _requested(args) -> dict:
    params = {name: getattr(args, name, None) for name in _MODEL_DEFAULTS}
    if args.threshold is not None:
        from ._threshold import parse_threshold

        kind, value = parse_threshold(args.threshold)
        params["threshold"] = args.threshold if kind != "fixed" else value
    return {k: v for k, v in params.items() if v is not None}


def _make_detector(args):
    from ._streaming import SlidingWindowLOF, StreamingLOF, load_detector

    requested = _requested(args)
    common = dict(device=args.device, backend=args.backend, working_memory=args.working_memory)
    if args.state is not None and args.state.exists():
        detector = load_detector(args.state, **common)
        method = "sliding" if isinstance(detector, SlidingWindowLOF) else "streaming"
        if args.method is not None and args.method != method:
            raise ValueError(f"--state {args.state} holds a {method} detector; drop --method {args.method} or use another state file")
        stored = detector.get_params()
        for name, value in requested.items():
            if name in stored and _differs(stored[name], value):
                flag = {"n_neighbors": "-k", "window_size": "--window", "history_size": "--history"}.get(name, "--" + name.replace("_", "-"))
                raise ValueError(
                    f"--state {args.state} was saved with {name}={stored[name]!r} but {flag} {value!r} was given; "
                    f"drop {flag} to resume, or use a new state file"
                )
        return detector, True
    method = args.method or "streaming"
    unused = _SLIDING_ONLY if method == "streaming" else _STREAMING_ONLY
    wrong = [name for name in unused if name in requested]
    if wrong:
        raise ValueError(f"option(s) {', '.join('--' + w.replace('_', '-') for w in wrong)} do not apply to --method {method}")
    params = {k: v for k, v in _MODEL_DEFAULTS.items() if k not in unused}
    params.update(requested)
    cls = StreamingLOF if method == "streaming" else SlidingWindowLOF
    n_neighbors, window_size = params.pop("n_neighbors"), params.pop("window_size")
    return cls(n_neighbors, window_size, **params, **common), False


def _differs(stored, given) -> bool:
    if isinstance(stored, (int, float)) and isinstance(given, (int, float)):
        return float(stored) != float(given)
    return str(stored).strip().lower() != str(given).strip().lower()


# -- output ------------------------------------------------------------------------------------
def _csv_cell(value) -> str:
    text = "" if value is None else str(value)
    if "," in text or '"' in text or "\n" in text or "\r" in text:  # (a generator over the four was 3x slower)
        text = '"' + text.replace('"', '""') + '"'
    return text


class _Writer:
    def __init__(self, stream, fmt: str, echo_names: list[str]):
        self.stream = stream
        self.fmt = fmt
        self.echo_names = echo_names
        self.header_done = fmt != "csv"

    def write(self, lines, scores, flags, echo) -> None:
        """Write one window's records: NumPy arrays of line numbers, float64 scores and bool flags."""
        from ._format import csv_rows, score_texts

        parts = []
        if not self.header_done:
            parts.append(",".join(["line", "lof", "outlier"] + [_csv_cell(n) for n in self.echo_names]) + "\n")
            self.header_done = True
        if self.fmt == "csv" and not echo:
            score_text = None
        else:
            score_text = score_texts(scores)
            if score_text is None:
                score_text = [format(float(s), ".9g") if math.isfinite(s) else ("inf" if s > 0 else "nan") for s in scores.tolist()]
        if self.fmt == "csv":
            if echo:
                rows = (f"{n},{s},{int(f)}," + ",".join(_csv_cell(v) for v in e) + "\n"
                        for n, s, f, e in zip(lines.tolist(), score_text, flags.tolist(), echo))
            else:
                text = csv_rows(lines, scores, flags)
                if text is None:  # float64 scores, or ones %.9g writes with an exponent: one %-format for the window
                    fields = [None] * (3 * len(lines))
                    fields[0::3], fields[1::3], fields[2::3] = lines.tolist(), scores.tolist(), flags.astype("i1").tolist()
                    text = ("%d,%.9g,%d\n" * len(lines)) % tuple(fields)
                rows = [text]
        else:
            names = [json.dumps(n) for n in self.echo_names]

            def record(n, s, f, e):
                s = s if s not in ("inf", "nan") else "null"
                extra = "".join(f", {k}: {json.dumps(v)}" for k, v in zip(names, e)) if e is not None else ""
                return f'{{"line": {n}, "lof": {s}, "outlier": {"true" if f else "false"}{extra}}}\n'

            rows = (record(n, s, f, echo[i] if echo else None)
                    for i, (n, s, f) in enumerate(zip(lines.tolist(), score_text, flags.tolist())))
        parts.extend(rows)
        self.stream.write("".join(parts))
        self.stream.flush()


# -- the loop ------------------------------------------------------------------------------------
class _Stop:
    """SIGINT: interrupt a wait for records at once; otherwise finish the current window first."""

    def __init__(self):
        self.requested = False
        self.waiting = [False]
        self._previous = None

    def __enter__(self):
        try:
            self._previous = signal.signal(signal.SIGINT, self._handle)
        except ValueError:  # not the main thread: leave SIGINT alone
            self._previous = None
        return self

    def _handle(self, signum, frame):
        # only a wait for records is interrupted: a window being scored, written and saved
        # is finished first, however often Ctrl-C is pressed (else it could be in the state
        # and not in the output, or the reverse)
        self.requested = True
        if self.waiting[0]:
            raise KeyboardInterrupt

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
        return False


class _Failed:
    def __init__(self, exc: BaseException):
        self.exc = exc


class _ReaderFailed(Exception):
    """The input could not be read further (truncated, corrupt); ``exc`` is why."""

    def __init__(self, exc: BaseException):
        super().__init__(str(exc))
        self.exc = exc


class _ReadAhead:
    """Reads and parses records in a background thread, up to ``max_batches`` batches ahead.

    Parsing (pandas' C reader, NumPy) and waiting for input mostly run without
    the GIL, so they overlap the scoring, and at start-up the loading of the
    detector. Batches come out in order; a reader error is raised by
    :meth:`get`. Memory: at most ``max_batches`` batches (each at most one
    read of about 2 MiB of text) wait in the queue.
    """

    _END = object()

    def __init__(self, make_records, max_batches: int, may_block: bool = True):
        self.queue: queue.Queue = queue.Queue(max_batches)
        self.may_block = may_block  # the input can wait forever (a pipe, a terminal), unlike a regular file
        self.reading = [False]  # the reader is blocked waiting for input (nothing read is pending)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(make_records,), name="gpumine-stream-reader", daemon=True)
        self.thread.start()

    def _run(self, make_records) -> None:
        try:
            records = make_records(self.reading)
            try:
                for batch in records:
                    self.queue.put(batch)
                    if self.stop.is_set():
                        break
            finally:
                records.close()
        except BaseException as exc:  # handed to the consumer
            self.queue.put(_Failed(exc))
        self.queue.put(self._END)

    def get(self, waiting: list):
        """The next batch (None at the end of input); ``waiting[0]`` is True while blocked."""
        while True:
            waiting[0] = True
            try:
                item = self.queue.get(timeout=0.5)
            except queue.Empty:
                continue
            finally:
                waiting[0] = False
            if item is self._END:
                return None
            if isinstance(item, _Failed):
                if isinstance(item.exc, Exception):
                    raise _ReaderFailed(item.exc)
                raise item.exc
            return item

    def drain(self) -> list:
        """After a stop: the batches already read (queued, or being parsed), not those still to come."""
        self.stop.set()
        batches = []
        while True:
            try:
                item = self.queue.get(timeout=0.02)
            except queue.Empty:
                if ((self.reading[0] and self.may_block) or not self.thread.is_alive()) and self.queue.empty():
                    return batches
                continue
            if item is self._END or isinstance(item, _Failed):
                return batches
            batches.append(item)


_READ_AHEAD_BATCHES = 32


def _warm_device(spec) -> None:
    """Create the CUDA context and a cuBLAS handle (seconds on some hosts) while the modules load."""
    try:
        import torch

        spec = "auto" if spec is None else str(spec)
        if (spec == "auto" or spec.startswith("cuda")) and torch.cuda.is_available():
            device = torch.device("cuda" if spec == "auto" else spec)
            a = torch.ones((8, 8), device=device)
            (a @ a).sum().item()
    except Exception:  # noqa: BLE001 - only a head start: the detector reports real device errors
        pass


def run(args) -> int:
    """Handler of ``gpumine stream`` (see the module docstring)."""
    # torch first, in this thread, before the device and reader threads start: the order the
    # command always had (pandas and pyarrow load after it, in the reader), and a parse that
    # overlaps the torch import was measured not to help (the import holds the GIL)
    import torch  # noqa: F401

    # every module the reader thread and this one both reach is imported here, before the reader
    # starts: two threads importing the same module at once can see it half initialised (a CI
    # run failed with "can only concatenate str (not NoneType)" from such an import race)
    try:
        import pandas  # noqa: F401  - the reader's CSV parser
    except ImportError:
        pass
    from . import _resume, _streaming  # noqa: F401  - the detector and the output sink
    from ._sources import iter_records

    fmt = args.format
    if fmt is None:
        name = str(args.input).lower()
        fmt = "jsonl" if name.endswith((".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz")) else "csv"
    out_fmt = args.output_format or fmt
    if args.state is not None and not args.state.parent.is_dir():
        raise FileNotFoundError(f"--state {args.state}: folder {args.state.parent} does not exist; create it first")

    # the device starts, and input is read and parsed, from now on while the detector loads
    warm = threading.Thread(target=_warm_device, args=(args.device,), name="gpumine-stream-device", daemon=True)
    warm.start()
    try:
        return _run(args, fmt, out_fmt, iter_records)
    finally:
        warm.join(timeout=60)  # never leave the process while the device is starting


def _run(args, fmt, out_fmt, iter_records) -> int:
    import numpy as np

    def make_records(reading):
        return iter_records(args.input, format=fmt, columns=args.columns, echo=args.echo, header=args.header,
                            delimiter=args.delimiter, max_latency=args.max_latency, waiting=reading)

    may_block = args.input in (None, "-") or not os.path.isfile(args.input)
    reader = _ReadAhead(make_records, _READ_AHEAD_BATCHES, may_block)
    try:
        detector, resumed = _make_detector(args)
    except BaseException:
        reader.stop.set()
        raise
    from ._resume import OutputSink, ResumePoint

    dtype = np.float64 if (detector.dtype_ is not None and str(detector.dtype_) == "torch.float64") or (
        detector.dtype_ is None and args.dtype == "float64") else np.float32
    window = detector.window_size
    resume = ResumePoint(getattr(detector, "stream_progress_", None) if resumed else None, args.input, args.output)
    if resume.note and not args.quiet:
        print(f"gpumine stream: {resume.note}", file=sys.stderr, flush=True)
    sink = OutputSink(args.output, resume.output_bytes)
    out = sink.stream
    last_line = resume.skip_through
    start = time.perf_counter()
    n_in = n_bad = n_flagged = n_windows = 0
    reported = 0
    pending_X, pending_lines, pending_echo = [], [], []
    n_pending = 0
    writer = None
    broken_pipe = False
    stopped = False
    input_error = None

    def report(errors):
        nonlocal n_bad, reported
        for line, reason in errors:
            n_bad += 1
            if reported < 100 or n_bad % 1000 == 0:
                reported += 1
                note = "" if reported < 100 else f" (reporting every 1000th from now; {n_bad} so far)"
                print(f"gpumine stream: line {line}: {reason}; skipped{note}", file=sys.stderr, flush=True)

    def save_state() -> None:
        sink.durable()  # the output the state counts is on disk before the state says so
        detector.save(args.state, progress=resume.progress(last_line, sink))

    def score(take: int) -> None:
        nonlocal n_pending, pending_X, pending_lines, pending_echo, n_flagged, n_windows, n_in, writer, last_line
        X = np.concatenate(pending_X) if len(pending_X) > 1 else pending_X[0]
        lines = np.concatenate(pending_lines) if len(pending_lines) > 1 else pending_lines[0]
        echo = pending_echo
        if take < X.shape[0]:
            pending_X, pending_lines = [X[take:]], [lines[take:]]
            pending_echo = echo[take:] if echo else []
            X, lines, echo = X[:take], lines[:take], echo[:take] if echo else []
        else:
            pending_X, pending_lines, pending_echo = [], [], []
        n_pending -= X.shape[0]
        scores, flags = detector.process(X.astype(dtype, copy=False))
        n_windows += 1
        n_in += X.shape[0]
        n_flagged += int(flags.sum())
        if writer is None:
            writer = _Writer(out, out_fmt, parser_echo_names[0])
            writer.header_done = writer.header_done or sink.appending
        writer.write(lines, np.asarray(scores, dtype=np.float64), np.asarray(flags), echo or None)
        last_line = int(lines[-1])
        if args.state is not None and args.checkpoint_every and n_windows % args.checkpoint_every == 0:
            save_state()

    parser_echo_names = [[]]

    def take(batch) -> None:
        nonlocal n_pending
        if resume.skip_through and len(batch.lines) and batch.lines[0] <= resume.skip_through:
            batch = _records_after(batch, resume.skip_through)
        report([(line, reason) for line, reason in batch.errors if line > resume.skip_through])
        if batch.idle:
            if n_pending:
                score(n_pending)
        elif len(batch):
            if not parser_echo_names[0] and batch.echo is not None:
                parser_echo_names[0] = _echo_names(args)
            pending_X.append(batch.X)
            pending_lines.append(batch.lines)
            if batch.echo is not None:
                pending_echo.extend(batch.echo)
            n_pending += len(batch)
            while n_pending >= window:
                score(window)

    with _Stop() as stop:
        try:
            while True:
                batch = reader.get(stop.waiting)
                if batch is None:
                    break
                take(batch)
                if stop.requested:
                    stopped = True
                    break
        except KeyboardInterrupt:
            stopped = True
        except BrokenPipeError:
            broken_pipe = True
        except _ReaderFailed as failure:
            if not (n_in or n_pending or n_bad):  # nothing read (a missing file, say): the error alone
                reader.stop.set()
                raise failure.exc from None
            # what was read before the input broke off is scored and saved; then the error
            input_error = failure.exc
        try:
            if stopped:  # what was read before the stop is scored too
                for batch in reader.drain():
                    take(batch)
            if n_pending and not broken_pipe:
                score(n_pending)
        except BrokenPipeError:
            broken_pipe = True
        reader.stop.set()
        if args.state is not None:
            save_state()
        sink.close()
    if broken_pipe:
        # the reader of our output has gone: keep Python's exit-time flush from complaining
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    seconds = time.perf_counter() - start
    if not args.quiet:
        how = ("stopped by Ctrl-C" if stopped else "output closed" if broken_pipe
               else "input broke off" if input_error is not None else "end of input")
        rate = n_in / seconds if seconds > 0 else float("inf")
        share = f" ({100.0 * n_flagged / n_in:.1f} %)" if n_in else ""
        msg = (f"gpumine stream: {n_in} records scored in {n_windows} windows ({how}), {n_flagged} flagged{share}, "
               f"{n_bad} malformed skipped, {seconds:.2f} s ({rate:,.0f} records/s), "
               f"{type(detector).__name__} k={detector.n_neighbors} window={detector.window_size} on {detector.device_}")
        if args.state is not None:
            msg += f"; state {'resumed from and ' if resumed else ''}saved to {args.state}"
        print(msg, file=sys.stderr, flush=True)
    if input_error is not None:
        raise input_error
    if n_in == 0 and n_bad:
        print(f"gpumine stream: error: none of the {n_bad} records could be scored (a text column?); choose the "
              "numeric columns with --columns (e.g. --columns 0,2,3) and copy others with --echo", file=sys.stderr)
        return 2
    return 0


def _records_after(batch, line: int):
    """``batch`` without its records at or before input line ``line`` (done by an earlier run)."""
    import dataclasses

    keep = batch.lines > line
    echo = None if batch.echo is None else [e for e, k in zip(batch.echo, keep.tolist()) if k]
    return dataclasses.replace(batch, X=batch.X[keep], lines=batch.lines[keep], echo=echo)


def _echo_names(args) -> list[str]:
    from ._sources import parse_columns

    return [str(e) for e in parse_columns(args.echo) or []]


def exit_after_flush(code: int) -> None:
    """Flush stdout/stderr and leave without the interpreter's teardown.

    A stream's output and state file are complete when the command returns; tearing down torch
    (and a CUDA context) only adds about a second to every piped run.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # the reader of the output has gone: nothing left to deliver
            pass
    os._exit(code)
