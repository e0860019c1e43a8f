"""README.md against the command tree, in sqlite-utils' manner (its tests/test_docs.py): every
`planner COMMAND` the README shows exists, every option written with a command is that
command's, every option written on its own is some command's, every command is shown in the
README, and every command's --help carries an example whose commands and options exist.

Only code is read (fenced blocks and `inline spans`): in prose "planner" is the project's name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from clirun import run

from planner.cli import main

README = Path(__file__).resolve().parent.parent / "README.md"
HELP_OPTIONS = ("-h", "--help")
# `planner` as a command: not a path (planner/memory.py) nor a module (planner.histogram).
PLANNER = re.compile(r"(?<![\w./-])planner(?=\s|$)")
OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
# A code line run by another program (the benchmark scripts' own flags are theirs).
OTHER_PROGRAM = re.compile(r"^\s*(python|pip|pytest|\.ci/)")


@dataclass(frozen=True)
class Mention:
    line: int  # 1-based line of README.md
    text: str  # the code the mention was read from

    def __str__(self) -> str:
        return f"README.md line {self.line}: `{self.text.strip()}`"


def code_pieces(text: str) -> list[Mention]:
    """Each line of a fenced block (a trailing `\\` joins the next) and each inline code span."""
    pieces: list[Mention] = []
    fenced = [(m.start(1), m.group(1)) for m in FENCE.finditer(text)]
    for start, body in fenced:
        first = text.count("\n", 0, start) + 1
        joined, at = "", None
        for i, line in enumerate(body.splitlines()):
            at = first + i if at is None else at
            joined += line.rstrip().removesuffix("\\") + " "
            if not line.rstrip().endswith("\\"):
                pieces.append(Mention(at, joined))
                joined, at = "", None
    outside = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    for m in INLINE.finditer(outside):
        # (`\|` is a table's escaped bar)
        pieces.append(Mention(outside.count("\n", 0, m.start()) + 1, m.group(1).replace("\\|", "|")))
    return pieces


def command_options(command: click.Command) -> set[str]:
    names = {o for p in command.params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)}
    return names | set(HELP_OPTIONS)


def all_commands(group: click.Group = main, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], click.Command]:
    out: dict[tuple[str, ...], click.Command] = {path: group}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            out.update(all_commands(command, (*path, name)))
        else:
            out[(*path, name)] = command
    return out


COMMANDS = all_commands()


def strip_comment(code: str) -> str:
    """A shell comment (`  # ...`) is prose, not code."""
    return re.split(r"\s#\s", code, maxsplit=1)[0]


def invocations(piece: Mention) -> list[tuple[tuple[str, ...], str]]:
    """(command path, the text written after it) for each `planner ...` in the piece. The
    command path follows the group's words (`catalog gpus|models` counts each); options before
    a subcommand are the group's (`planner --debug solve`), checked as the group's."""
    code = strip_comment(piece.text)
    found = list(PLANNER.finditer(code))
    out = []
    for k, m in enumerate(found):
        start, end = m.end(), found[k + 1].start() if k + 1 < len(found) else len(code)
        words = code[start:end].split()
        path: tuple[str, ...] = ()
        i = 0
        while i < len(words) and isinstance(COMMANDS.get(path), click.Group):
            word = words[i]
            if word.startswith("-"):
                out.append((path, word))  # an option of the group so far
                i += 1
                continue
            names = word.split("|")
            if not all(re.fullmatch(r"[a-z][\w-]*", n) for n in names):
                break
            out.extend(((*path, n), "") for n in names[1:])
            path = (*path, names[0])
            i += 1
        out.append((path, " ".join(words[i:])))
    return out


def readme_mentions() -> tuple[list[tuple[Mention, tuple[str, ...], str]], list[tuple[Mention, str]]]:
    """(mention, command path, rest) for every `planner ...`, and for a span that starts with a
    command's name and holds an option (`catalog import-hf CONFIG.json --name ID`); (mention,
    option) for every other option written in code (lines of another program left out)."""
    commands, loose = [], []
    for piece in code_pieces(README.read_text(encoding="utf-8")):
        found = invocations(piece)
        first = piece.text.split()[0] if piece.text.split() else ""
        if not found and first in main.commands and OPTION.search(piece.text):
            found = invocations(Mention(piece.line, f"planner {piece.text}"))
        if found:
            commands += [(piece, path, rest) for path, rest in found]
        elif not OTHER_PROGRAM.match(piece.text):
            loose += [(piece, opt) for opt in OPTION.findall(strip_comment(piece.text))]
    return commands, loose


def problems(path: tuple[str, ...], rest: str) -> list[str]:
    """What is wrong with `planner PATH REST`: no such command, or options it does not have."""
    if path not in COMMANDS:
        return [f"no command 'planner {' '.join(path)}'"]
    unknown = sorted(set(OPTION.findall(rest)) - command_options(COMMANDS[path]))
    return [f"'planner {' '.join(path)}' has no option {o}" for o in unknown]


MENTIONED, LOOSE_OPTIONS = readme_mentions()


def test_the_readme_shows_commands_and_options():
    """The parser finds what the README holds (so the tests below cannot pass on nothing)."""
    paths = {path for _, path, _ in MENTIONED}
    assert {("solve",), ("capacity",), ("kv",), ("catalog", "import-hf"), ("catalog", "engines")} <= paths
    assert sum(len(OPTION.findall(rest)) for _, _, rest in MENTIONED) > 30
    assert any(opt == "--layer-kinds" for _, opt in LOOSE_OPTIONS)


@pytest.mark.parametrize(("mention", "path", "rest"), MENTIONED, ids=lambda v: str(v) if isinstance(v, Mention) else None)
def test_every_command_and_its_options_exist(mention, path, rest):
    assert not problems(path, rest), f"{mention}: {'; '.join(problems(path, rest))}"


def test_every_option_written_alone_is_some_commands():
    known = set().union(*(command_options(c) for c in COMMANDS.values()))
    unknown = [f"{m}: {opt}" for m, opt in LOOSE_OPTIONS if opt not in known]
    assert not unknown, "options no command has:\n" + "\n".join(unknown)


def test_every_command_is_in_the_readme():
    shown = {path[:k] for _, path, _ in MENTIONED for k in range(len(path) + 1)}
    missing = [" ".join(("planner", *p)) for p, c in COMMANDS.items() if p not in shown and not c.hidden]
    assert not missing, f"commands the README never shows: {', '.join(missing)}"


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=lambda p: " ".join(("planner", *p)))
def test_every_command_help_has_an_example(path):
    r = run(*path, "--help")
    assert r.exit_code == 0, r.output
    block = re.search(r"^\s*Examples?:\n((?:[ \t]+\S.*\n)+)", r.output, re.M)
    assert block, f"'planner {' '.join(path)} --help' has no 'Example:' block"
    lines = [ln for piece in code_pieces(f"```\n{block.group(1)}```\n") for ln in invocations(piece)]
    assert lines, f"'planner {' '.join(path)} --help': its example runs no planner command"
    wrong = [p for cmd, rest in lines for p in problems(cmd, rest)]
    assert not wrong, f"'planner {' '.join(path)} --help' example: {'; '.join(wrong)}"


@pytest.mark.long
def test_the_readme_s_reference_scenario_plans_as_written(tmp_path):
    """The README's scenario block, copied as it stands (its log path is the checkout's), had been
    refused twice in a row: reserved terms given both under autoscaling and forecast, then a stated
    fleet whose 16k limit the sample log's longest request (14,089 tokens) leaves empty on one side.
    It must load and plan, and its forecast run."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"^```yaml\n(name: my_service\b.*?)^```", text, re.S | re.M).group(1)
    log = "data/samples/azure_conv_2023_sample.csv"
    assert f"log: {log}" in block
    path = tmp_path / "my_service.yaml"
    path.write_text(block.replace(f"log: {log}", f"log: {README.parent / log}"), encoding="utf-8")
    solved = run("solve", path, "--no-verify", "--no-report")
    assert solved.exit_code == 0, solved.output
    assert solved.output.startswith("my_service: $")
    forecast = run("forecast", path, "--no-report")
    assert forecast.exit_code == 0, forecast.output
