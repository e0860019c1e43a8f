"""Reading input text and writing output files, with the errors and guarantees the design asks for.

Reads turn a missing or unreadable file into an InputError naming it. Writes are
atomic: a file appears complete or not at all (design.md, "Bad input"). Writing goes to
a temporary file in the destination's folder (so the final rename stays on one
filesystem, where `os.replace` is atomic); on any error the temporary file is removed
and the destination is untouched.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from planner.errors import InputError


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` when the block succeeds."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"output folder '{folder}' does not exist", where=str(target))
    if target.is_dir():
        raise InputError("output path is a folder, expected a file name", where=str(target))
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        # mkstemp makes the file private (0600); give it the mode a plain open() would
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write `text` (UTF-8) to `path` all-or-nothing."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def read_text(path: str | os.PathLike, kind: str) -> str:
    """The UTF-8 text of `path`; a missing, unreadable or binary file is an InputError naming it."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("file not found", where=str(path)) from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read as {kind} text ({exc.__class__.__name__})", where=str(path)) from None


def _umask() -> int:
    mask = os.umask(0)  # reading the umask means setting it; restore it at once
    os.umask(mask)
    return mask
