"""Directives that generate the command-line reference from the argparse parsers.

``.. gpumine-cli:: [COMMAND]``
    One parser: the top level (no argument) or a sub-command of
    ``gpumine.cli.build_parser()``. It renders the parser's description, its usage
    line (as ``--help`` prints it, at a fixed width of 100 columns) and every argument
    with its flags, metavar, choices and default, taken from the parser itself.

``.. gpumine-cli-commands::``
    A section per sub-command that ``gpumine`` has, in the parser's order, each with
    the introduction given for it in the directive's content and its
    ``gpumine-cli`` reference. The content holds one entry per command, ``NAME:``
    at the start of a line followed by reStructuredText (continuation lines
    indented); a command without an entry gets its parser's help line. So the page
    lists exactly the commands the installed code has.
"""

from __future__ import annotations

import argparse
import os
import re

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.util.nodes import nested_parse_with_titles

__all__ = ["setup", "find_parser", "command_intros"]

WIDTH = "100"


def find_parser(words: list[str]) -> argparse.ArgumentParser:
    """The parser of ``gpumine WORDS...``; raises ``ValueError`` for a command that does not exist."""
    from gpumine.cli import build_parser

    parser = build_parser()
    for word in words:
        sub = _subparsers(parser)
        if sub is None or word not in sub.choices:
            raise ValueError(f"gpumine has no command {' '.join(words)!r}")
        parser = sub.choices[word]
    return parser


def _subparsers(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _with_width(function):
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        return function()
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def _flags(action) -> str:
    if not action.option_strings:
        return action.metavar or action.dest
    metavar = ""
    if action.nargs != 0:
        formatter = argparse.HelpFormatter("gpumine")
        metavar = " " + formatter._format_args(action, action.dest.upper())
    return ", ".join(flag + metavar for flag in action.option_strings)


def _details(action) -> str:
    """Choices and default, where the help text does not say them already."""
    text = action.help or ""
    parts = []
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction) and "{" not in _flags(action):
        parts.append("choices: " + ", ".join(str(c) for c in action.choices))
    default = action.default
    shown = default not in (None, argparse.SUPPRESS, False) and action.nargs != 0
    if shown and "default" not in text.lower():
        parts.append(f"default: {default}")
    if action.required and action.option_strings:
        parts.append("required")
    return "; ".join(parts)


def command_intros(lines) -> dict[str, str]:
    """``{command: reStructuredText}`` from a ``gpumine-cli-commands`` directive's content lines."""
    intros: dict[str, list[str]] = {}
    current = None
    for line in lines:
        match = re.match(r"([a-z][\w-]*):(\s.*|)$", line)
        if match:
            current = match.group(1)
            intros[current] = [match.group(2).strip()]
        elif current is not None:
            intros[current].append(line.strip())
    return {name: "\n".join(text).strip() for name, text in intros.items()}


class GpumineCli(Directive):
    """``.. gpumine-cli:: [command]``."""

    optional_arguments = 1
    has_content = False

    def run(self):
        words = list(self.arguments)
        try:
            parser = find_parser(words)
        except (ValueError, ImportError) as exc:
            raise self.error(f"gpumine-cli: {exc}") from exc
        usage = _with_width(parser.format_usage).strip()
        result = []
        if parser.description:
            result.append(nodes.paragraph(text=parser.description))
        result.append(nodes.literal_block(usage, usage))
        sub = _subparsers(parser)
        if sub is not None:  # the top level: the commands
            items = nodes.definition_list()
            helps = {a.dest: a.help for a in sub._choices_actions}
            for name in sub.choices:
                term = nodes.term()
                term += nodes.literal(text=f"gpumine {name}")
                items += nodes.definition_list_item("", term, nodes.definition("", nodes.paragraph(text=helps.get(name) or "")))
            result.append(items)
        for group in parser._action_groups:
            actions = [a for a in group._group_actions if a.help != argparse.SUPPRESS
                       and not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]
            if not actions:
                continue
            title = group.title or "arguments"
            result.append(nodes.rubric(text=title[:1].upper() + title[1:]))
            items = nodes.definition_list()
            for action in actions:
                term = nodes.term()
                term += nodes.literal(text=_flags(action))
                definition = nodes.definition()
                definition += nodes.paragraph(text=action.help or "")
                details = _details(action)
                if details:
                    definition += nodes.paragraph(text=f"({details})")
                items += nodes.definition_list_item("", term, definition)
            result.append(items)
        return result


class GpumineCliCommands(Directive):
    """``.. gpumine-cli-commands::`` with ``NAME: introduction`` entries as content."""

    has_content = True

    def run(self):
        parser = find_parser([])
        sub = _subparsers(parser)
        intros = command_intros(self.content)
        helps = {a.dest: a.help for a in sub._choices_actions}
        text = []
        for name in sub.choices:
            title = f"``gpumine {name}``"
            text += [title, "-" * len(title), ""]
            intro = intros.get(name) or (helps.get(name) or "").capitalize()
            text += intro.splitlines() + ["", f".. gpumine-cli:: {name}", ""]
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, StringList(text, source=self.state.document["source"]), node)
        return node.children


def setup(app):
    app.add_directive("gpumine-cli", GpumineCli)
    app.add_directive("gpumine-cli-commands", GpumineCliCommands)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
