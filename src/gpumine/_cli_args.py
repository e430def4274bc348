"""Argument types and option groups shared by every ``gpumine`` subcommand."""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_device_options", "add_deprecated_alias", "add_table_options", "header_choice", "label_column", "positive_int"]


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


class _DeprecatedAlias(argparse.Action):
    """An old spelling kept for one release: sets the new option's value and says what to use."""

    def __init__(self, option_strings, dest, new: str, value=None, **kwargs):
        self.new, self.value = new, value
        super().__init__(option_strings, dest, nargs=0 if value is not None else None, help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: {option_string} is deprecated and will be removed in the next release; use {self.new}",
              file=sys.stderr)
        setattr(namespace, self.dest, self.value if self.value is not None else values)


def add_deprecated_alias(parser: argparse.ArgumentParser, old: str, *, dest: str, new: str, value=None) -> None:
    """Accept ``old`` (hidden from --help) as ``new``; ``value``: the constant a flag without argument sets."""
    parser.add_argument(old, dest=dest, action=_DeprecatedAlias, new=new, value=value)


HEADER_CHOICES = ("auto", "yes", "no")


def header_choice(text: str) -> str:
    """``--header``: auto (detect), yes or no; the old ``infer`` means auto."""
    if text == "infer":
        print("gpumine: --header infer is deprecated and will be removed in the next release; use --header auto",
              file=sys.stderr)
        return "auto"
    if text not in HEADER_CHOICES:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(HEADER_CHOICES)}; got {text!r}")
    return text


def add_table_options(parser: argparse.ArgumentParser, *, label_help: str) -> None:
    """``--label-column``, ``--header`` and ``--delimiter``: how every command reads a CSV table."""
    parser.add_argument("--label-column", default=None, help=label_help)
    parser.add_argument("--header", type=header_choice, default="auto", metavar="{auto,yes,no}",
                        help="CSV header row: auto (detect, the default), yes or no")
    parser.add_argument("--delimiter", default=None, help="CSV field separator (default: detect; ',' for .csv)")
