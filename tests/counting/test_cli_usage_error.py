"""The counting commands report bad usage with the command line's one UsageError."""

import argparse

import gpumine.cli
import gpumine.counting._cli as counting_cli


def test_counting_commands_use_the_command_lines_usage_error():
    assert counting_cli.UsageError is gpumine.cli.UsageError
    assert not hasattr(counting_cli, "_UsageError")


def test_a_usage_error_raised_by_a_counting_handler_is_one_line_and_exit_2(capsys):
    parser = argparse.ArgumentParser(prog="gpumine")
    counting_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["nb", "x.csv", "--label-column", "0", "--device", "cpu"])

    @counting_cli._guard
    def _run_nb(args):
        raise gpumine.cli.UsageError("a reason")

    assert _run_nb(args) == 2
    assert capsys.readouterr().err == "gpumine nb: error: a reason\n"
