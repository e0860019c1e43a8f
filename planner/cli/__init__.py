"""The `planner` command line: a thin layer that parses, calls one library function, formats.

Library errors (planner.errors) become one line on stderr and the documented exit
code: 2 bad input, 3 infeasible. `planner --debug ...` shows the traceback instead.
"""

from __future__ import annotations

import sys

import click

from planner import __version__
from planner.errors import PlannerError


class PlannerGroup(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except PlannerError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)


@click.group(cls=PlannerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.version_option(__version__, prog_name="planner")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Fleet capacity planning for LLM inference.

    \b
    Example:
      planner solve scenarios/128k_rollout.yaml
    """
    ctx.obj = {"debug": debug}


def _register() -> None:
    # One module per command family; each exports COMMANDS. Imported plainly: a missing
    # module is a packaging error, not a command to drop quietly.
    from planner.cli import (
        capacity_cmd,
        catalog_cmd,
        forecast_cmd,
        memory_cmd,
        simulate_cmd,
        solve_cmd,
        workload_cmd,
    )

    for module in (memory_cmd, capacity_cmd, catalog_cmd, workload_cmd, solve_cmd, forecast_cmd, simulate_cmd):
        for command in module.COMMANDS:
            main.add_command(command)


_register()


if __name__ == "__main__":
    main()
