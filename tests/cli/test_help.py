"""Every sub-command's --help: each option explained, in a user's words (no internal names or history)."""

import argparse
import re

import pytest

from gpumine.cli import build_parser


def _subcommands():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


@pytest.mark.parametrize("command", sorted(_subcommands()))
def test_every_option_has_help(command):
    parser = _subcommands()[command]
    missing = [action.option_strings or [action.dest] for action in parser._actions
               if not isinstance(action, argparse._HelpAction) and action.help != argparse.SUPPRESS
               and not (action.help or "").strip()]
    assert not missing, f"gpumine {command}: options without help: {missing}"


@pytest.mark.parametrize("command", sorted(_subcommands()))
def test_help_has_no_internal_words(command):
    text = " ".join(_subcommands()[command].format_help().split())
    text = text.replace("--seed", "")  # the option of `outliers` that sets the random state
    for word in ("seed", "LOF_GPU", "issue "):
        assert not re.search(re.escape(word), text, re.IGNORECASE), f"gpumine {command} --help says {word!r}"
