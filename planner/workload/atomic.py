"""Atomic output: a file appears complete or not at all (design.md, "Bad input").

Writing goes to a temporary file in the destination's folder (so the final rename stays
on one filesystem, where `os.replace` is atomic); on any error the temporary file is
removed and the destination is untouched.
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


def _umask() -> int:
    mask = os.umask(0)  # reading the umask means setting it; restore it at once
    os.umask(mask)
    return mask
