"""One clear line for the errors a command line run can meet (bad input, unreadable files)."""

from __future__ import annotations

import csv
import zlib

__all__ = ["EXPECTED_ERRORS", "explain"]

# errors that are the input's or the user's, not a bug: one line and exit code 2 (ImportError:
# an optional package a file format needs, e.g. pyarrow for Parquet)
EXPECTED_ERRORS = (ValueError, TypeError, OSError, EOFError, zlib.error, csv.Error, ImportError)


def explain(exc: BaseException) -> str:
    """The error's one-line reason, with what to do where the exception alone does not say it."""
    reason = " ".join(str(exc).split())
    if isinstance(exc, (EOFError, zlib.error)):
        return f"the input is truncated or corrupt ({reason}); check the file (e.g. gzip -t FILE) or fetch it again"
    if isinstance(exc, csv.Error):
        return (f"the input is not a readable CSV file ({reason}); "
                "pass a text CSV (binary data needs .npy, .npz or .parquet)")
    return reason
