"""The `planner` command's entry point: a command that draws its report's figures in a worker
process (planner.worker_pool) has that worker started before the command line is imported, so
that the worker's imports overlap the planner's own."""

from __future__ import annotations

import sys

from planner.startup import begin_imports, end_imports, prepare_process, standard_streams

# The commands that write a report through worker_processes (solve, forecast).
_WITH_WORKERS = ("solve", "forecast")


def run() -> None:
    standard_streams()
    prepare_process()
    try:
        begin_imports()
        if uses_workers(sys.argv[1:]):
            from planner.worker_pool import prestart

            prestart()
        from planner.cli import run as run_command_line

        end_imports()
    except KeyboardInterrupt:  # Ctrl-C while the libraries load: as click says it later, not a traceback
        print("Aborted!", file=sys.stderr)
        sys.exit(1)
    run_command_line()


def uses_workers(args: list[str]) -> bool:
    """Whether the command line runs a command that starts a worker, as far as its words tell before
    click parses them (the first word that is no option names the command). A wrong guess costs a
    worker started for nothing, or started later: never another answer."""
    command = next((a for a in args if not a.startswith("-")), None)
    return command in _WITH_WORKERS and not {"--no-report", "--help", "-h"} & set(args)
