"""Running the `planner` command in-process, for the tests of its subcommands."""

from __future__ import annotations

from click.testing import CliRunner

from planner.cli import main


def run(*args):
    """`planner ARGS...` in-process (paths and numbers are passed as text); click's Result."""
    return CliRunner().invoke(main, [str(a) for a in args])
