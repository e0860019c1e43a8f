"""Typed errors. The command line turns them into one-line messages and exit codes.

Exit codes (design.md, "Command line"): 0 success, 2 bad input or usage,
3 infeasible (no configuration can serve a traffic class).
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterable, Iterator

EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3


class PlannerError(Exception):
    """Base class: a user-facing problem with a one-line message."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, *, where: str | None = None):
        self.where = where
        self.message = message  # without the place, for a caller that adds context before it
        super().__init__(f"{where}: {message}" if where else message)


class InputError(PlannerError):
    """Bad input: a file, field or argument that is wrong. Exit 2."""


class InfeasibleError(PlannerError):
    """No configuration can serve a traffic class. Exit 3."""

    exit_code = EXIT_INFEASIBLE


@contextlib.contextmanager
def located(where: str) -> Iterator[None]:
    """Errors raised in the block that name no place get `where` (the scenario being solved,
    say: of several on one command line, the user must know which one failed)."""
    try:
        yield
    except PlannerError as exc:
        if exc.where is not None:
            raise
        raise type(exc)(str(exc), where=where) from None


def shorten(text: str, most: int = 80, *, characters: int | None = None) -> str:
    """`text` cut to a readable length for a one-line message (a 5,000-character value is no name),
    saying how long it was: `characters` of it, or of what it quotes (a string's repr)."""
    count = len(text) if characters is None else characters
    return text if len(text) <= most else f"{text[: most - 20]}... ({count:,} characters)"


def shown_value(value: object) -> str:
    """A value as a message quotes it (repr), cut like `shorten`; a cut string says how many
    characters it has, not its quoted form."""
    return shorten(repr(value), characters=len(value) if isinstance(value, str) else None)


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name nearest to `name` by edit similarity, or None when none is close."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.5)
    return close[0] if close else None


def did_you_mean(name: str, known: Iterable[str], *, what: str, among: str = "") -> str:
    """The message for an unknown name: the closest match if any, and the known names. among: the
    names are a selection ("the scenario's gpus"), so the name is said to be missing from it, not
    unknown (a GPU of the catalog that a scenario does not offer is not an unknown GPU)."""
    known = sorted(known)
    # The name in another case ('BF16' -> 'bf16') first: an edit-distance neighbour of the name as
    # typed may be another name ('fp16'). Then a name that starts the way it was typed ('h100' ->
    # 'h100-sxm'), which beats an edit-distance neighbour ('h200').
    folded = [k for k in known if k.casefold() == name.casefold()]
    # (of those, the nearest: 'h100' is nearer 'h100-sxm' than 'h100-pcie', which sorts first)
    starts = {k.casefold(): k for k in known if k.casefold().startswith(name.casefold())}
    prefixed = [starts[k] for k in difflib.get_close_matches(name.casefold(), list(starts), n=1, cutoff=0.0)]
    close = (folded or prefixed or [closest(name, known)])[0]
    hint = f"did you mean '{close}'? " if close is not None else ""
    if among:
        return f"{what} '{shorten(name)}' is not among {among}; {hint}they are: {', '.join(known)}"
    return f"unknown {what} '{shorten(name)}'; {hint}known: {', '.join(known)}"
