"""Reading input text and writing output files, with the errors and guarantees the design asks for.

Reads turn a missing, unreadable or oversized file into an InputError naming it. Writes
are atomic: a file appears complete or not at all (design.md, "Bad input"). Writing goes
to a temporary file in the destination's folder (so the final rename stays on one
filesystem, where `os.replace` is atomic); on any error the temporary file is removed
and the destination is untouched.

This module is the one place where the operating system's refusals on output (a
read-only folder, a name too long, a folder that is a file, a full disk) become one-line
InputErrors naming the path (exit 2). A run killed mid-write cannot remove its temporary
file; the next write into the same folder does, once the process that made it is gone.

While a command runs inside `inputs_guard()`, every file it reads is remembered, and an
output path equal to one of them (or inside a folder read as input) is refused: writing
a histogram over the log it came from would destroy the log.

Inside `outputs_together()` (every command, planner.cli), the renames wait until the block
ends without an error: a command that fails after writing some of its files (a report's
figures, then its Markdown refused; the first of two scenarios' reports, then the second's)
leaves none of them (design.md: "a failed run writes nothing").
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import json
import os
import re
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from planner.errors import InputError, shorten

MAX_JSON_BYTES = 16 * 2**20  # a config.json is a few kB
_TMP_SUFFIX = ".tmp"
# Temporary names: .<target name, cut>.<host>.<pid>.<random>.tmp, so a later run can tell
# whose they are and whether that process still lives.
_HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:32] or "host"
_TMP_NAME = re.compile(r"^\..*\.(?P<host>[A-Za-z0-9-]+)\.(?P<pid>[0-9]+)\.[A-Za-z0-9_]+\.tmp$")
_NAME_ROOM = 255 - 80  # most filesystems allow 255 bytes a name; keep room for the decorations

_inputs: contextvars.ContextVar[set[Path] | None] = contextvars.ContextVar("planner_inputs", default=None)
# (temporary, destination) pairs written but not yet renamed, in the order written
_pending: contextvars.ContextVar[list[tuple[Path, Path]] | None] = contextvars.ContextVar("planner_pending", default=None)
# folders output_folder made within outputs_together's block, the deepest of each call first
_made: contextvars.ContextVar[list[Path] | None] = contextvars.ContextVar("planner_made_folders", default=None)


# ---- outputs -------------------------------------------------------------------------------
@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` when the block succeeds.

    Any OSError (making, writing or renaming the file) is an InputError naming `path`. A symbolic
    link is followed (the rename lands on the file it names and the link stays); a device, pipe or
    socket is refused, since renaming onto it would replace it with a plain file.
    """
    target = Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)
    _refuse_input(target, Path(path))
    tmp: Path | None = None
    try:
        if target.exists() and not target.is_file() and not target.is_dir():
            raise InputError("output path is a device, pipe or socket, not a file; give a file name", where=str(path))
        folder = target.parent if str(target.parent) else Path(".")
        if not folder.is_dir():
            what = "is not a folder" if folder.exists() else "does not exist"
            raise InputError(f"output folder '{folder}' {what}", where=str(target))
        if target.is_dir():
            raise InputError("output path is a folder, expected a file name", where=str(target))
        remove_stale_temporaries(folder)
        fd, tmp_name = tempfile.mkstemp(
            prefix=f".{_cut(target.name)}.{_HOST}.{os.getpid()}.", suffix=_TMP_SUFFIX, dir=folder
        )
        os.close(fd)
        tmp = Path(tmp_name)
        yield tmp
        # mkstemp makes the file private (0600); give it the mode a plain open() would
        os.chmod(tmp, 0o666 & ~_umask())
        pending = _pending.get()
        if pending is None:
            os.replace(tmp, target)
        else:
            pending.append((tmp, target))
            tmp = None  # renamed, or removed, when outputs_together's block ends
    except OSError as exc:
        raise output_error(exc, target, creating=tmp is None) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def outputs_together() -> Iterator[None]:
    """Within the block, atomic_output's files are renamed into place only when the block ends
    without an error, all together; on an error they are removed, and the destinations are untouched,
    and the folders output_folder made for them are removed again. A file written twice in the block
    ends as its last writing."""
    pending: list[tuple[Path, Path]] = []
    made: list[Path] = []
    token, made_token = _pending.set(pending), _made.set(made)
    try:
        yield
    except BaseException:
        _pending.reset(token)
        _made.reset(made_token)
        _discard(pending)
        _remove_folders(made)
        raise
    _pending.reset(token)
    _made.reset(made_token)
    # Each destination that exists is first kept under a temporary name (a second link to it, so that
    # it stays in place for anyone reading it, and os.replace stays atomic), so that a rename refused
    # part-way (a destination that cannot be replaced), or a Ctrl-C, puts every file back as it was:
    # a failed run writes nothing, whichever of its files the system refuses. Killed instead, a run
    # leaves each destination whole, old or new. A destination that can be replaced but neither
    # linked nor read (another user's private file) is replaced as before, and stays replaced.
    placed: list[tuple[Path, Path | None, bool]] = []  # (destination, its former file kept, whether it had one)
    try:
        for tmp, target in pending:
            existed = os.path.lexists(target)
            # listed before the rename: an interruption right after it still puts the former file back
            placed.append((target, _kept(target) if existed else None, existed))
            os.replace(tmp, target)
    except BaseException as exc:
        _put_back(placed)
        _discard(pending)
        _remove_folders(made)
        if isinstance(exc, OSError):
            raise output_error(exc, target) from None
        raise
    for _, former, _ in placed:
        if former is not None:
            with contextlib.suppress(OSError):
                former.unlink()


def outputs_waiting() -> bool:
    """Whether files written in outputs_together's block wait for its end to be put in place."""
    return bool(_pending.get())


def _kept(target: Path) -> Path | None:
    """A second name, a temporary one beside it (remove_stale_temporaries knows it), for an existing
    destination: a hard link, or a copy where the file system has none; None where neither can be
    made (a file this process may replace but not read)."""
    fd, name = tempfile.mkstemp(prefix=f".{_cut(target.name)}.{_HOST}.{os.getpid()}.", suffix=_TMP_SUFFIX,
                                dir=target.parent)
    os.close(fd)
    os.unlink(name)  # os.link makes the name itself
    try:
        os.link(target, name)
    except OSError:
        try:
            shutil.copy2(target, name)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(name)
            return None
    return Path(name)


def _put_back(placed: list[tuple[Path, Path | None, bool]]) -> None:
    """Undo outputs_together's renames, the last first: each destination as it was before (one whose
    former file could not be kept stays as it is)."""
    for target, former, existed in reversed(placed):
        with contextlib.suppress(OSError):
            if former is not None:
                # a link onto another link of the same file (the rename never happened) changes
                # nothing and leaves the name: removed below
                os.replace(former, target)
            elif not existed:
                target.unlink(missing_ok=True)
        if former is not None:
            with contextlib.suppress(OSError):
                former.unlink(missing_ok=True)


def _remove_folders(made: list[Path]) -> None:
    """Folders output_folder made for outputs that never came, taken away again (only while empty)."""
    for folder in made:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _discard(pending: list[tuple[Path, Path]]) -> None:
    for tmp, _ in pending:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def output_folder(path: str | os.PathLike) -> Path:
    """`path` as a folder for outputs, made (with its parents) if missing; InputError if it cannot be."""
    folder = Path(path)
    try:
        # deepest first; from the absolute path, so that 'new/../reports' never names reports/
        absolute = Path(os.path.abspath(folder))
        missing = [f for f in (absolute, *absolute.parents) if not f.exists()]
        absolute.mkdir(parents=True, exist_ok=True)  # (folder's own 'new/..' would make new/ on the way)
    except OSError as exc:
        raise output_error(exc, folder, what="cannot make the output folder", creating=True) from None
    made = _made.get()
    if made is not None:
        made.extend(missing)
    return folder


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write `text` (UTF-8) to `path` all-or-nothing."""
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` all-or-nothing."""
    with atomic_output(path) as tmp:
        tmp.write_bytes(data)


_REASONS = {
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "the file system is read-only",
    errno.ENAMETOOLONG: "the file name is too long",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EEXIST: "a file of that name is in the way",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EISDIR: "the path is a folder",
    errno.ENOENT: "a folder on the path does not exist",
    errno.ELOOP: "too many levels of symbolic links",
}
# What the system says of a path a command reads (not of the machine: a full disk is no bad input).
INPUT_ERRNOS = frozenset({errno.ENOENT, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG, errno.ENOTDIR, errno.ELOOP,
                          errno.EISDIR})


def output_error(exc: OSError, path: Path, *, what: str = "cannot write", creating: bool = False) -> InputError:
    """An OSError on output as the one-line error the command line prints. "No such file" where the
    folder to write in is there is no missing folder: `creating` a file or folder there, a file system
    that takes no new entries (/proc answers so; an outside probe was told a folder on
    /proc/h.parquet's path did not exist); else, the file being written went while it was (another
    process removed it, or the folder was made again)."""
    reason = _REASONS.get(exc.errno, exc.strerror or type(exc).__name__)
    if exc.errno == errno.ENOENT and Path(path).parent.is_dir():
        reason = (f"the folder {Path(path).parent} takes no new files (its file system refused one)" if creating else
                  "the file being written was removed before it was put in place (by another process, or with its folder)")
    return InputError(f"{what}: {reason}", where=str(path))


def input_error(exc: OSError, path: Path) -> InputError:
    """An OSError (of INPUT_ERRNOS) on a path read as input, as the one-line error the command line prints."""
    reason = "no such file" if exc.errno == errno.ENOENT else _REASONS.get(exc.errno, exc.strerror)
    return InputError(f"cannot read: {reason}", where=str(path))


def missing_text(path: str | os.PathLike) -> str:
    """Why an input path names nothing to read: no such file, or a symbolic link that leads nowhere
    (a loop of links, or a link whose target is gone), which 'no such file' would misstate."""
    if os.path.islink(path):
        return "a symbolic link that leads nowhere (a loop of links, or its target is missing)"
    return "no such file"


def remove_stale_temporaries(folder: Path) -> None:
    """Remove temporary files that a killed run of this host left in `folder`.

    Only names this module makes are touched, and only when the process in the name is
    gone (a run writing into the same folder right now keeps its file).
    """
    try:
        names = [e.name for e in os.scandir(folder) if e.name.endswith(_TMP_SUFFIX) and e.name.startswith(".")]
    except OSError:
        return
    for name in names:
        match = _TMP_NAME.match(name)
        if match is None or match["host"] != _HOST or process_alive(int(match["pid"])):
            continue
        with contextlib.suppress(OSError):
            (folder / name).unlink()


def process_alive(pid: int) -> bool:
    """Whether process `pid` of this host still runs (this process does; so, when asking is not
    allowed, does someone else's)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # someone else's live process (or a number too large to ask about)
    return True


def _cut(name: str) -> str:
    """A file name short enough to carry the temporary decorations within 255 bytes."""
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) <= _NAME_ROOM:
        return name
    return raw[:_NAME_ROOM].decode("utf-8", "ignore")


def _umask() -> int:
    mask = os.umask(0)  # reading the umask means setting it; restore it at once
    os.umask(mask)
    return mask


# ---- inputs --------------------------------------------------------------------------------
@contextlib.contextmanager
def inputs_guard() -> Iterator[None]:
    """Within the block, files read through this module (and `note_input`) may not be written, and a
    pipe read through read_text gives the same bytes each time it is read."""
    token, pipes = _inputs.set(set()), _pipes_read.set({})
    try:
        yield
    finally:
        _inputs.reset(token)
        _pipes_read.reset(pipes)


def arrow_data_files(folder: Path) -> list[Path]:
    """The files of a folder that pyarrow's dataset readers read, sorted: every file under it, but
    names starting with '.' or '_' (_SUCCESS, .crc), which pyarrow.dataset skips, and so do we.
    Links to folders are not followed (pyarrow's CSV reader follows them: refuse_folder_links)."""
    return sorted(
        f
        for f in folder.rglob("*")
        if f.is_file() and not any(part[0] in "._" for part in f.relative_to(folder).parts)
    )


def refuse_folder_links(folder: Path, fmt: str) -> None:
    """Refuse (InputError naming it) a link to a folder inside a CSV or JSON Lines log folder, whose
    files arrow_data_files lists: pyarrow's CSV reader follows the link where that list, which the
    checks against reading a log twice use, does not (a link back to the folder read a CSV log 41
    times over, and planned for 41 times its peak), and the JSON Lines reader, which reads that
    list, left the linked logs out without a word. pyarrow's own Parquet listing, which its checks
    use too, follows such links alike."""
    for f in folder.rglob("*"):
        if f.is_symlink() and f.is_dir() and not any(part[0] in "._" for part in f.relative_to(folder).parts):
            why = ("which the CSV reader would follow where the checks against reading a log twice do not"
                   if fmt == "csv" else "whose logs would be left out (links to folders are not followed)")
            raise InputError(f"holds '{f.relative_to(folder)}', a link to a folder, {why}: remove the link (or start "
                             "its name with '_' to have it skipped), and give the folder it leads to as an input of "
                             "its own if its logs belong here", where=str(folder))


def arrow_readable_names(path: str | os.PathLike) -> None:
    """Refuse, naming it, a log or histogram (or a file of its folder that pyarrow reads) whose path
    is not UTF-8: pyarrow's readers take paths as UTF-8 text, and failed on such a name with a
    traceback or a codec error about a file that is fine (planner's writers hand pyarrow open files
    instead)."""
    folder = Path(path)
    for name in (path, *(arrow_data_files(folder) if folder.is_dir() else ())):
        text = os.fsdecode(name)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise InputError("its name is not UTF-8, and the log and histogram readers (pyarrow) open only "
                             "UTF-8 names: rename it", where=shown) from None


def note_input(path: str | os.PathLike) -> None:
    """Remember `path` (a file or a folder of parts) as an input of the running command."""
    seen = _inputs.get()
    if seen is not None:
        with contextlib.suppress(OSError, RuntimeError):
            seen.add(Path(path).resolve())


def _refuse_input(target: Path, given: Path) -> None:
    """Refuse writing `target`, the file the output path `given` names (where a link leads), when it is
    an input of the command or lies in an input folder. The message names the output as given, and
    where its link leads: naming the input alone read as a complaint about the input."""
    seen = _inputs.get()
    if not seen:
        return
    try:
        resolved = target.resolve()
    except (OSError, RuntimeError):
        return
    link = f"is a link to {target}, which is " if given != target else ""
    for source in seen:
        if resolved == source:
            raise InputError(f"{link or 'is also '}an input of this command; write the output to another file",
                             where=str(given))
        if source in resolved.parents:
            raise InputError(
                f"{link or 'is '}inside the input folder '{source.name}', where the next reading would take it for "
                "a part of the input; write the output elsewhere",
                where=str(given),
            )


def path_is(path: Path, kind: str) -> bool:
    """Whether `path` is a file (kind 'file'), a folder ('folder') or either ('any'). A name the
    system refuses as too long (over 255 bytes a part) is no file, as a missing one is: Python
    3.11's exists, is_file and is_dir return False for a missing path but raise for that one."""
    ask = {"file": path.is_file, "folder": path.is_dir, "any": path.exists}[kind]
    try:
        return ask()
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return False
        raise


# What each pipe given as a file (a shell's <(...), /dev/stdin) held when first read in this command
# (inputs_guard): a command reads a scenario twice (planner.fleet.is_fleet_file, then its loader), and
# a pipe's second reading is empty. Keyed by the pipe itself, and forgotten with the command: a later
# command in the same process (a test's, a notebook's) may be given other bytes by the same name.
_pipes_read: contextvars.ContextVar[dict[tuple[int, int], bytes] | None] = contextvars.ContextVar(
    "pipes_read", default=None)


def read_text(path: str | os.PathLike, kind: str, *, max_bytes: int | None = None) -> str:
    """The UTF-8 text of `path`; a missing, unreadable, binary or oversized file is an InputError naming it.

    The limit is kept by reading at most one byte past it, not by the file's stated size: a device or
    a pipe (/dev/zero, a shell's <(...)) states 0 bytes, and read whole it would fill the memory."""
    path = Path(path)
    note_input(path)
    try:
        status, kept = path.stat(), _pipes_read.get()
        if max_bytes is not None and status.st_size > max_bytes:
            raise InputError(
                f"file is {status.st_size:,} bytes; a {kind} file here is at most {max_bytes:,}", where=str(path)
            )
        pipe = (status.st_dev, status.st_ino) if kept is not None and stat.S_ISFIFO(status.st_mode) else None
        if pipe is not None and pipe in kept:  # a pipe reads once: read again, it gives what it gave
            raw = kept[pipe]
        else:
            with path.open("rb") as f:
                raw = f.read() if max_bytes is None else f.read(max_bytes + 1)
            if pipe is not None:
                kept[pipe] = raw
        if max_bytes is not None and len(raw) > max_bytes:
            raise InputError(f"more than {max_bytes:,} bytes; a {kind} file here is at most {max_bytes:,}",
                             where=str(path))
        # utf-8-sig: a leading byte-order mark (Windows editors write one) is no part of the text
        return raw.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")  # text mode's universal newlines
    except FileNotFoundError:
        raise InputError("file not found", where=str(path)) from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read as {kind} text ({exc.__class__.__name__})", where=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or type(exc).__name__}", where=str(path)) from None


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object hook refusing a key given twice (RFC 8259: names SHOULD be unique; Python keeps the last)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def load_json(path: str | os.PathLike, kind: str = "JSON", *, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """The JSON value in `path`; invalid JSON, nesting past the interpreter's recursion limit
    and integers past Python's 4,300-digit limit are InputErrors naming the file (and line)."""
    text = read_text(path, kind, max_bytes=max_bytes)
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise InputError(f"invalid JSON: key '{shorten(exc.key, 40)}' appears twice in one object (JSON readers keep "
                         "one of them silently)", where=str(path)) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"line {exc.lineno} column {exc.colno}: invalid JSON: {exc.msg}", where=str(path)) from None
    except RecursionError:
        raise InputError("invalid JSON: nested too deeply", where=str(path)) from None
    except ValueError as exc:  # int('1' * 5000)
        raise InputError(f"invalid JSON: {str(exc).split(';')[0]}", where=str(path)) from None
