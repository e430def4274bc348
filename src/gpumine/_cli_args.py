"""Argument types and option groups shared by every ``gpumine`` subcommand."""

from __future__ import annotations

import argparse

__all__ = ["add_device_options", "label_column", "positive_int"]


def add_device_options(parser: argparse.ArgumentParser, *, quiet_help: str = "no progress bar and no summary on stderr") -> None:
    """``--device``, ``--backend``, ``--working-memory`` and ``--quiet``, the same on every command."""
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: auto)")
    parser.add_argument("--backend", default="auto", choices=["auto", "torch", "triton"], help="kernel implementation (default: auto)")
    parser.add_argument("--working-memory", type=float, default=None, metavar="MIB", help="MiB for one tile's temporaries")
    parser.add_argument("--quiet", action="store_true", help=quiet_help)


def label_column(text):
    """A label column given on the command line: an integer index (negative from the end) or a header name."""
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return text


def positive_int(text: str) -> int:
    """argparse type for integers >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {value}")
    return value
