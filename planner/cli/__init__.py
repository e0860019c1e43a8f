"""The `planner` command line: a thin layer that parses, calls one library function, formats.

Library errors (planner.errors) become one line on stderr and the documented exit
code: 2 bad input, 3 infeasible. `planner --debug ...` shows the traceback instead (with the same exit code).
Usage errors (an unknown option, a value out of range) are one line too, exit 2.
While a command runs, the files it reads may not be written (planner.files.inputs_guard), and the
files it writes appear only when it succeeds (planner.files.outputs_together); a standard output
that then refuses what the command prints (a full disk) is an error of its own (_printing), the files
staying in place, whole.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
import traceback
from pathlib import Path

import click

from planner import __version__
from planner.errors import InputError, PlannerError
from planner.files import INPUT_ERRNOS, input_error, inputs_guard, outputs_together, outputs_waiting


class PlannerGroup(click.Group):
    def invoke(self, ctx: click.Context):
        printed = _HeldWithFiles(sys.stdout)
        try:
            with inputs_guard(), outputs_together(), contextlib.redirect_stdout(printed):
                result = super().invoke(ctx)
            printed.release()
            return result
        except click.exceptions.Exit:  # a subcommand's --help: what it printed is its answer
            printed.release()
            raise
        except SystemError as exc:
            # A Ctrl-C inside compiled code (the simulator's numba kernel) surfaces as a SystemError
            # raised from the KeyboardInterrupt: it ends as any Ctrl-C does ("Aborted!", exit 1).
            if _interrupt_in(exc):
                raise KeyboardInterrupt from None
            raise
        except PlannerError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                traceback.print_exc()  # the traceback asked for, and the exit code documented for the error
            else:
                click.echo(f"error: {one_line(str(exc))}", err=True)
            sys.exit(exc.exit_code)
        except OSError as exc:
            # An input path the system refused where no check of ours asked first (they ask through
            # planner.files): still bad input, one line naming the path. Faults of the machine (a
            # full disk) or of planner keep their traceback.
            if exc.filename is None or exc.errno not in INPUT_ERRNOS:
                raise
            refusal = input_error(exc, Path(os.fsdecode(exc.filename)))
            if ctx.obj and ctx.obj.get("debug"):
                traceback.print_exc()
            else:
                click.echo(f"error: {one_line(str(refusal))}", err=True)
            sys.exit(refusal.exit_code)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """click's main, but a usage error is one line (click prints the usage, a hint and the error)."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:
            click.echo(exc.ctx.get_help())  # `planner` or `planner catalog` alone asks what there is
            sys.exit(0)
        except click.ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            command = " ".join(["planner", *_subcommands(ctx)])
            hint = f" (see '{command} --help')"
            click.echo(f"error: {one_line(exc.format_message())}{hint}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def _interrupt_in(exc: BaseException) -> bool:
    """Whether a KeyboardInterrupt is among the exceptions `exc` was raised from or during."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def run() -> None:
    """The `planner` console script: `main`, then leave without the interpreter's teardown.

    pyarrow's dataset readers may still have read-ahead tasks on Arrow's I/O threads when a
    command ends (an error found in the first block of a CSV, say); if the interpreter then
    tears Arrow down around them, the C++ runtime aborts the process ("terminate called
    without an active exception", exit 134; apache/arrow#34314), after the one-line error
    was printed. Measured: 1 in 200 runs of a command failing that way. Leaving with
    os._exit once the output is flushed skips that teardown; a command's own work
    (atomic writes, solver files) is complete by then. Uncaught exceptions (a fault in planner)
    leave the normal way, with their traceback. A Ctrl-C that lands outside click's own handling
    (before it parses the command line, or after the command) ends as click ends one inside it.
    (Streams the command was started without are the null device's by now: planner.entry.)
    """
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt:
        code = "\nAborted!"  # click's words: a new line after the terminal's ^C, then its message
    else:
        code = 0
    if not isinstance(code, int):
        if code is not None:
            print(code, file=sys.stderr)
        code = 0 if code is None else 1
    for stream in (sys.stdout, sys.stderr):  # never None: planner.entry opened any the command lacked
        with contextlib.suppress(OSError, ValueError):  # a closed pipe (planner ... | head)
            stream.flush()
    os._exit(code)


class _HeldWithFiles(io.TextIOBase):
    """The command's stdout, held from the moment a file it writes waits to be put in place
    (planner.files.outputs_together) until the command succeeds: a line saying a report was written
    must not stand before the error that a later file could not be put in place, and a failed run
    prints nothing after its files are refused. Before any file waits, lines pass at once (and
    keep their order with stderr's notes)."""

    def __init__(self, stdout):
        self.stdout = stdout  # None: started with the descriptor closed
        self.held: list[str] = []

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # a text stream's answer, which click's probe for a binary one expects
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if self.held or outputs_waiting():
            self.held.append(text)
        elif self.stdout is not None:
            # through click, as before the holder: it writes UTF-8 where the stream says ASCII
            with contextlib.redirect_stdout(self.stdout), _printing():
                click.echo(text, nl=False)
        return len(text)

    def flush(self) -> None:
        if self.stdout is not None and not self.held:
            with _printing():
                self.stdout.flush()

    def release(self) -> None:
        """Print what was held (click.echo: with no stdout, nothing)."""
        text, self.held = "".join(self.held), []
        if text:
            with _printing():
                click.echo(text, nl=False)


@contextlib.contextmanager
def _printing():
    """Standard output that refuses what the command prints (`--json > plan.json` on a full disk) is
    told in one line, exit 2, as a report file that cannot be written is (planner.files); the files
    the command put in place stay, each whole. A closed pipe (`planner ... | head`) is not an error:
    it ends the command as before."""
    try:
        yield
    except OSError as exc:
        # Windows says a closed pipe with EINVAL
        if exc.errno == errno.EPIPE or (sys.platform == "win32" and exc.errno == errno.EINVAL):
            raise
        raise InputError(f"standard output: cannot write what the command prints ({exc.strerror or exc})") from None


class _CommandContext(click.Context):
    """A command's context, which a usage error raised while its options are parsed names if it names
    none: click's parser raises some without one ("Option '--out-dir' requires an argument."), and the
    hint then pointed to 'planner --help' where the other usage errors of the command point to its own.
    The innermost context that the error leaves is the command whose options were being parsed."""

    def __exit__(self, exc_type, exc_value, tb):
        if isinstance(exc_value, click.UsageError) and exc_value.ctx is None:
            exc_value.ctx, exc_value.cmd = self, self.command
        return super().__exit__(exc_type, exc_value, tb)


def _with_command_contexts(command: click.Command) -> click.Command:
    """`command` and its subcommands (a group's), each with a _CommandContext."""
    command.context_class = _CommandContext
    for sub in getattr(command, "commands", {}).values():
        _with_command_contexts(sub)
    return command


def _subcommands(ctx: click.Context | None) -> list[str]:
    """The subcommands a usage error came from (the root's own name is 'python -m planner' when run
    so, which the hint would repeat)."""
    names = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return names[::-1]


def one_line(message: str) -> str:
    """A message on one line, whatever a file name or a library put in it."""
    return " ".join(message.split())


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
        kv_cmd,
        simulate_cmd,
        solve_cmd,
        workload_cmd,
    )

    for module in (kv_cmd, capacity_cmd, catalog_cmd, workload_cmd, solve_cmd, forecast_cmd, simulate_cmd):
        for command in module.COMMANDS:
            main.add_command(_with_command_contexts(command))


_register()


if __name__ == "__main__":
    main()
