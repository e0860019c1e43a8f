"""Reading request logs as a stream of Arrow record batches (memory flat in the log's size).

Formats (chosen by extension, or `fmt`):
- Parquet (.parquet, .pq): a file, or a folder of files (hive partitions allowed),
  found with `pyarrow.dataset` and read one row group at a time, only the needed
  columns, the next row group decoding while this one is histogrammed.
- CSV (.csv): `pyarrow.dataset` with the needed columns read as text, so one bad value
  deep in the file cannot abort the scan (rows.py and timestamps.py parse them); a row
  with too few or too many fields is skipped by the parser and counted.
- JSON Lines (.jsonl, .ndjson, .json): read in chunks of lines with `pyarrow.json`; a chunk
  that pyarrow refuses (a type changing mid-chunk, a broken line, a key named twice in an
  object) is re-read line by line with the standard json module, so its good rows still count
  and its bad ones are counted (a row whose column's key is named twice among them).
  So is a chunk with a line of more than _ARROW_MAX_OPENINGS brackets: pyarrow's parser
  recurses per level of nesting and overflows the stack (a segmentation fault, measured
  at 10,000 levels with pyarrow 26), where the json module stops at its recursion limit
  and the line counts as non_numeric.

A file that is not what its extension says (a Parquet file named .csv, text named
.parquet, a JSON array named .jsonl) is refused with InputError before any reading.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import itertools
import json
import math
import re
import sys
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.dataset as ds
import pyarrow.json as pajson
import pyarrow.parquet as pq

from planner.errors import InputError, shorten
from planner.files import (
    arrow_data_files,
    arrow_readable_names,
    missing_text,
    note_input,
    path_is,
    refuse_folder_links,
)
from planner.units import counted_text
from planner.workload.columns import FORMATS, suggested

EXTENSIONS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
}
# Rows per record batch: small enough that a batch's columns stay in the CPU cache (1 MiB
# per int64 column), large enough that per-batch Python overhead is small.
BATCH_ROWS = 1 << 17
_ROW_GROUPS_AHEAD = 2  # decoded ahead while the caller works; more measured no faster (2 CPUs)
_CSV_BLOCK_BYTES = 1 << 20  # with pyarrow's fixed read-ahead of blocks, this bounds memory (~50 MB)
_JSONL_CHUNK_BYTES = 1 << 23
_JSONL_BLOCK_BYTES = 1 << 20
_SNIFF_BYTES = 4096
_BOM = b"\xef\xbb\xbf"
# Mark a JSON line that is not an object, and a CSV value that is not UTF-8 text; rows.py and
# timestamps.py read them as non_numeric.
MALFORMED_LINE = "\x00not a JSON object"
NOT_UTF8 = "\x00not UTF-8 text"
# Nesting depth is at most the count of '[' and '{' on a line; pyarrow parsed 6,000 levels
# and crashed at 10,000 (pyarrow 26), so lines with more openings than this go to json.
_ARROW_MAX_OPENINGS = 1024
_OPENINGS_AND_BREAKS = bytes(b for b in range(256) if b not in b"[{\n")


def detect_format(path: Path, fmt: str = "auto") -> str:
    """The log format of `path`: `fmt` unless 'auto', else from the extension(s).

    Every file of a folder is read (but names starting with '.' or '_'), so a file that is not
    of the folder's format is refused, not read as rows: a notes.txt with a CSV header would be
    planned for, a Parquet part read as CSV prints its bytes. With --format, files without an
    extension of another format (Hadoop's part-00000) are read as that format."""
    if fmt != "auto" and fmt not in FORMATS:
        raise InputError(f"format '{fmt}': expected one of auto, {', '.join(FORMATS)}", where=str(path))
    if not path_is(path, "any"):
        raise InputError(missing_text(path), where=str(path))
    if fmt != "auto":
        if path_is(path, "folder"):
            other = [f for f in arrow_data_files(path) if EXTENSIONS.get(f.suffix.lower(), fmt) != fmt]
            if other:
                raise InputError(f"folder holds {other[0].relative_to(path)}, a {EXTENSIONS[other[0].suffix.lower()]} "
                                 f"file, where --format says {fmt}; give a folder of one format", where=str(path))
        return fmt
    if path_is(path, "folder"):
        kinds = {f: EXTENSIONS.get(f.suffix.lower()) for f in arrow_data_files(path)}
        unknown = [f for f, kind in kinds.items() if kind is None]
        if unknown and len(unknown) < len(kinds):
            raise InputError(
                f"folder holds {unknown[0].relative_to(path)}, which is not a log file by its name "
                f"({', '.join(EXTENSIONS)}); move it out, or start its name with '_' or '.' to have it skipped",
                where=str(path),
            )
        found = set(kinds.values()) - {None}
        if len(found) != 1:
            what = "no log files" if not found else f"mixed formats ({', '.join(sorted(found))})"
            raise InputError(
                f"folder holds {what}; expected files of one format ({', '.join(EXTENSIONS)}"
                f"{_with_format(', or any names with {}')})", where=str(path),
            )
        return found.pop()
    fmt = EXTENSIONS.get(path.suffix.lower())
    if fmt is None:
        raise InputError(
            f"unknown log extension '{path.suffix}'; expected one of {', '.join(EXTENSIONS)}{_with_format(' (or pass {})', ' (rename it to one of them)')}",
            where=str(path),
        )
    return fmt


def _with_format(hint: str, otherwise: str = "") -> str:
    """`hint` naming the --format option, where the reader has one; else `otherwise` (a scenario's
    log is read by its extension)."""
    option = suggested("format")
    return otherwise if option is None else hint.format(option)


def sniff(path: Path, fmt: str, *, part: bool = False, stated: bool = False) -> None:
    """Refuse a file whose first bytes contradict its format (InputError naming the file); in a
    folder, each of its files (`part`), by name, for what its bytes are (a gzip or Parquet part of
    a CSV folder printed its bytes under the folder's name, and a gzip part of a JSON Lines folder
    was read as unusable rows); a JSON Lines part whose first line is not an object counts its
    lines as unusable rows, as a broken line does, and an empty one counts nothing (rotation leaves
    them). `stated`: the format is --format's, not the extension's (_remedy)."""
    if path.is_dir():
        for file in arrow_data_files(path):
            sniff(file, fmt, part=True, stated=stated)
        return
    where = str(path)
    if path.exists() and not path.is_file():  # a pipe or a device: opening a pipe would wait for a writer
        raise InputError("is not a regular file (a pipe or a device); give the log as a file", where=where)
    try:
        with path.open("rb") as f:
            head = f.read(_SNIFF_BYTES)
            if fmt == "parquet":
                f.seek(max(path.stat().st_size - 4, 0))
                tail = f.read(4)
    except FileNotFoundError:
        raise InputError("no such file", where=where) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or type(exc).__name__}", where=where) from None
    if not head:
        if part and fmt == "jsonl":
            return
        raise InputError("file is empty" + ("; move it out of the folder, or start its name with '_' to have it "
                                            "skipped" if part else ""), where=where)
    if head[:2] == b"\x1f\x8b":
        raise InputError(f"file is gzip-compressed, not {fmt}; decompress it first", where=where)
    if fmt == "parquet":
        if head[:4] != b"PAR1" or tail != b"PAR1":
            raise InputError(
                f"not a Parquet file (no PAR1 magic bytes){_looks_like(head, stated, path)}", where=where
            )
        return
    if head[:4] == b"PAR1":
        raise InputError(
            f"is a Parquet file, not {fmt.upper()} text; {_remedy('parquet', fmt, stated, path)}", where=where
        )
    if b"\x00" in head:
        raise InputError(f"is binary, not {fmt.upper()} text", where=where)
    # The first line must be UTF-8 (a binary file's is not); a bad value further down is one
    # row, counted as non_numeric (readers read values that are not UTF-8 as NOT_UTF8).
    line = head.split(b"\n", 1)[0]
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(line) - 4 or b"\n" in head:  # a character cut by the sniff window is fine
            raise InputError(
                f"is not UTF-8 text (byte {exc.start}), so not {fmt.upper()}", where=where
            ) from None
    first = head.removeprefix(_BOM).lstrip()[:1]
    if fmt == "csv" and first in (b"{", b"["):
        raise InputError(f"looks like JSON, not CSV; {_remedy('jsonl', fmt, stated, path)}", where=where)
    if fmt == "jsonl" and first != b"{" and not part:
        kind = "a JSON array" if first == b"[" else "text whose first line is not a JSON object"
        raise InputError(f"is {kind}, not JSON Lines (one object per line)", where=where)


def _looks_like(head: bytes, stated: bool, path: Path) -> str:
    text = head.lstrip()[:1]
    if text == b"{":
        looks, name = "jsonl", "JSON Lines"
    elif head and b"\x00" not in head and b"," in head.split(b"\n", 1)[0]:
        looks, name = "csv", "CSV"
    else:
        return ""
    return f"; it looks like {name}{'; ' if stated else ': '}{_remedy(looks, 'parquet', stated, path)}"


def _remedy(looks: str, fmt: str, stated: bool, path: Path) -> str:
    """What to do about a file read as `fmt` whose bytes are `looks`: name it so, where its extension
    chose `fmt`; where --format stated `fmt`, the option is what contradicts the file (told to rename a
    file that already had the right name, the user was sent the wrong way), and dropping it helps only
    where the file's name says `looks` (JSON in a .csv file, dropped, was told to rename it)."""
    if not stated:
        return f"name it .{looks}"
    option = suggested("format") or "the format"
    drop = f"drop {option}, or " if EXTENSIONS.get(path.suffix.lower()) == looks else ""
    return f"{option} {fmt} contradicts the content: {drop}give {option} {looks}"


class LogReader:
    """One log (file or folder): its column names, then its rows in record batches.

    `skipped` counts rows the parser itself dropped, per exclusion reason (CSV rows with
    too few fields are 'null', with too many 'non_numeric').
    """

    def __init__(self, path: str | Path, fmt: str = "auto"):
        self.path = Path(path)
        self.where = str(path)
        note_input(self.path)
        self.format = detect_format(self.path, fmt)
        if self.format != "parquet" and self.path.is_dir():
            refuse_folder_links(self.path, self.format)
        sniff(self.path, self.format, stated=fmt != "auto")
        arrow_readable_names(self.path)
        self.skipped = {"null": 0, "non_numeric": 0}
        # files of a folder that lack columns the others have (read as nulls), filled in as they are read
        self.files_missing_columns: dict[str, tuple[str, ...]] = {}
        self.columns = self._discover_columns()

    # ---- columns ----------------------------------------------------------------
    def _discover_columns(self) -> list[str]:
        """Every column some file of the log has (a folder's: the union over its files, each file's
        own columns first to last, then hive partition keys). Not the first file's alone: a column
        that some files lack (a time column, say) would then be read or ignored by which file sorts
        first. A file without a column that is read has its rows counted as null (excluded) and is
        named in `files_missing_columns`, whatever the format."""
        names = [name for columns in self.file_columns().values() for name in columns]
        if self.format == "parquet":
            names += self._parquet_dataset.schema.names  # (its partition keys, for a hive folder)
        return list(dict.fromkeys(names))

    def find_late_columns(self, names: Sequence[str]) -> None:
        """Add to the columns those of `names` that a JSON Lines log first writes past a file's first
        chunk, whose keys alone are its columns (reading every key of a large log would parse it twice):
        a field logging started to record partway was taken as missing, a time column silently dropped,
        or "no column" refused. The rest of the log's bytes are searched once, for every such name
        together, and a chunk holding one is parsed to be sure; the column is then read as one that
        some rows lack."""
        missing = [name for name in dict.fromkeys(names) if name not in self.columns]
        if self.format != "jsonl" or not missing:
            return
        # each key as most writers write it (UTF-8), and as Python's json does (non-ASCII escaped)
        needles = {name: {json.dumps(name, ensure_ascii=False).encode(), json.dumps(name).encode()} for name in missing}
        for file in self._files:
            for i, chunk in enumerate(_line_chunks(file, _JSONL_CHUNK_BYTES)):
                found = [n for n in missing if i and any(needle in chunk for needle in needles[n])]
                keys = _chunk_keys(chunk) if found else ()
                for name in (n for n in found if n in keys):
                    missing.remove(name)
                    self.columns.append(name)
                    self._file_columns[str(file)].append(name)
                if not missing:
                    return

    def file_columns(self) -> dict[str, list[str]]:
        """The column names of each file of the log (one entry for a single file); a JSON Lines
        file's are the keys of its first chunk of lines."""
        return self._file_columns

    @functools.cached_property
    def _file_columns(self) -> dict[str, list[str]]:
        try:
            if self.format == "parquet":
                return {
                    fragment.path: list(pq.read_schema(fragment.open()).names)
                    for fragment in self._parquet_dataset.get_fragments()
                }
            if self.format == "csv":
                quiet = pacsv.ParseOptions(invalid_row_handler=lambda row: "skip")
                with _undecodable_rows_fail_quietly():
                    dataset = ds.dataset(self.where, format=ds.CsvFileFormat(parse_options=quiet))
                    return {fragment.path: list(fragment.physical_schema.names) for fragment in dataset.get_fragments()}
            return {str(file): _jsonl_columns(file) for file in self._files}
        except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
            raise InputError(_unreadable(self.format, exc), where=self.where) from None

    def data_files(self) -> list[str]:
        """The files the log's rows come from (one for a single file)."""
        if self.format == "parquet":
            return list(self._parquet_dataset.files)
        return [str(f) for f in self._files]

    @functools.cached_property
    def _files(self) -> list[Path]:
        return arrow_data_files(self.path) if self.path.is_dir() else [self.path]

    @functools.cached_property
    def _parquet_dataset(self) -> ds.Dataset:
        partitioning = "hive" if self.path.is_dir() else None
        return ds.dataset(self.where, format="parquet", partitioning=partitioning)

    # ---- rows -------------------------------------------------------------------
    def batches(self, names: tuple[str, ...]) -> Iterator[dict[str, pa.Array | np.ndarray]]:
        """Each batch as {column name: Arrow array, or object array on the JSON fallback}."""
        try:
            if self.format == "parquet":
                yield from self._parquet_batches(names)
            elif self.format == "csv":
                with _undecodable_rows_fail_quietly():
                    yield from self._csv_batches(names)
            else:
                yield from self._jsonl_batches(names)
        except (pa.ArrowException, OSError) as exc:
            raise InputError(_unreadable(self.format, exc), where=self.where) from None

    def _parquet_batches(self, names: tuple[str, ...]) -> Iterator[dict[str, pa.Array]]:
        """Row group by row group, decoded in one helper thread while the caller works on
        the previous one: memory is a few row groups, whatever the log's length.

        Each row group is decoded by pyarrow's single-threaded Parquet reader. For these
        few integer columns, pyarrow's multi-threaded scan spends about twice the CPU
        time (measured with bench/ingest.py on 2 CPUs), which the caller needs for its own
        work. One thread, too, because a ParquetFile is not safe to read from two at once
        (measured: "ReadRangeCache did not find matching cache entry"). A dataset Scanner
        over the whole log reads ahead of a slow consumer without bound: measured, its
        buffers grew with the log. A row group at a time does not.
        """
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="planner-read") as pool:
            ahead: deque[Future] = deque()
            for read in self._row_group_reads(names):
                ahead.append(pool.submit(read))
                if len(ahead) > _ROW_GROUPS_AHEAD:
                    yield from _table_batches(ahead.popleft().result(), names)
            while ahead:
                yield from _table_batches(ahead.popleft().result(), names)

    def _row_group_reads(self, names: tuple[str, ...]) -> Iterator[Callable[[], pa.Table]]:
        """One call per row group of the log, each returning the row group's `names` columns.

        Every file is read in its own column types (rows.py and timestamps.py coerce them
        batch by batch, counting what they cannot use). A column a file lacks is a value
        of the folder's hive partitioning if it is one, else nulls (its rows then count
        as null, and `files_missing_columns` names the file).
        """
        for fragment in self._parquet_dataset.get_fragments():
            file = pq.ParquetFile(fragment.open())
            present = [n for n in names if n in file.schema_arrow.names]
            constants = {n: None for n in names if n not in present}
            if constants:
                constants.update(
                    (n, v)
                    for n, v in ds.get_partition_keys(fragment.partition_expression).items()
                    if n in constants
                )
                missing = tuple(n for n, v in constants.items() if v is None)
                if missing:
                    self.files_missing_columns[fragment.path] = missing
            for i in range(file.num_row_groups):
                yield functools.partial(_read_row_group, file, i, present, constants)

    def _csv_batches(self, names: tuple[str, ...]) -> Iterator[dict[str, pa.Array]]:
        def count_bad_row(row) -> str:
            self.skipped[
                "null" if row.actual_columns < row.expected_columns else "non_numeric"
            ] += 1
            return "skip"

        text = {name: pa.string() for name in names}
        file_format = ds.CsvFileFormat(
            # a quoted value may span lines (a logged prompt's text), across the reader's blocks too: without
            # it such a log past a block read "CSV parser got out of sync with chunker" (a sixth more scan time)
            parse_options=pacsv.ParseOptions(invalid_row_handler=count_bad_row, newlines_in_values=True),
            # (no include_columns: the dataset projects the columns itself, and both at once
            # make pyarrow see every column twice)
            # (check_utf8 off: one value that is not UTF-8 must not abort the scan; _utf8 marks it)
            convert_options=pacsv.ConvertOptions(
                column_types=text, strings_can_be_null=True, check_utf8=False
            ),
            read_options=pacsv.ReadOptions(block_size=_CSV_BLOCK_BYTES),
        )
        for file, columns in self.file_columns().items():  # the dataset reads their values as nulls
            missing = tuple(n for n in names if n not in columns)
            if missing:
                self.files_missing_columns[file] = missing
        # An explicit schema stops pyarrow inferring types (and re-parsing the first block).
        dataset = ds.dataset(self.where, format=file_format, schema=pa.schema(text))
        counted, timed = names[:2], (names[2] if len(names) > 2 else None)  # ingest's order: counts, then time
        for fragment in dataset.get_fragments():  # file by file, to check each one's rows against its lines
            rows, bad_before = 0, sum(self.skipped.values())
            try:
                for batch in fragment.to_batches(schema=dataset.schema, columns=list(names), batch_readahead=1):
                    if batch.num_rows:
                        rows += batch.num_rows
                        yield {name: _utf8(batch.column(name)) for name in names}
            except pa.ArrowInvalid:
                # past a block, an open quote puts pyarrow's parser "out of sync with its chunker": the quote
                # is the reason to give, where it opens (the rest of pyarrow's errors stand)
                _refuse_swallowed_rows(fragment.path, counted, timed)
                raise
            _check_open_quote(fragment.path, rows + sum(self.skipped.values()) - bad_before, counted, timed)

    def _jsonl_batches(self, names: tuple[str, ...]) -> Iterator[dict[str, pa.Array | np.ndarray]]:
        """Chunk by chunk; a file none of whose objects has a column read is named in
        `files_missing_columns` (its rows count as null, as a CSV or Parquet file's would)."""
        for file in self._files:
            seen: set[str] = set()  # the columns read that some object of the file has
            has_objects = False
            for chunk in _line_chunks(file, _JSONL_CHUNK_BYTES):
                try:
                    table = _read_json_chunk(chunk)
                    typed = [n for n in names if n in table.column_names
                             and pa.types.is_timestamp(table.schema.field(n).type)]
                    if typed:  # read again as text: arrow's own typing drops each time's zone
                        table = _read_json_chunk(chunk, as_text=typed)
                    _check_exact(table, names)
                except (pa.ArrowInvalid, _TooNested):
                    batch, keys = _python_json_batch(chunk, names)
                    seen.update(keys or ())
                    has_objects = has_objects or keys is not None
                else:
                    n = table.num_rows
                    batch = {
                        name: table.column(name) if name in table.column_names else pa.nulls(n)
                        for name in names
                    }
                    seen.update(name for name in names if name in table.column_names)
                    has_objects = has_objects or n > 0
                if len(next(iter(batch.values()))):
                    yield batch
            missing = tuple(n for n in names if n not in seen)
            if has_objects and missing:
                self.files_missing_columns[str(file)] = missing


def _jsonl_columns(file: Path) -> list[str]:
    """The keys of a JSON Lines file's first chunk of lines."""
    for chunk in _line_chunks(file, _JSONL_CHUNK_BYTES):
        return _chunk_keys(chunk)
    return []


def _chunk_keys(chunk: bytes) -> list[str]:
    """The keys of a chunk of JSON lines, in order of first appearance."""
    try:
        return list(_read_json_chunk(chunk).column_names)
    except (pa.ArrowInvalid, _TooNested):
        keys: dict[str, None] = {}
        for obj in _json_objects(chunk):
            if isinstance(obj, dict):
                keys.update(dict.fromkeys(obj))
        return list(keys)


def _utf8(column: pa.Array) -> pa.Array:
    """`column` (text read without UTF-8 checks) with each value that is not UTF-8 as NOT_UTF8."""
    try:
        column.validate(full=True)  # checks the UTF-8 of every value, vectorised
        return column
    except pa.ArrowInvalid:
        raw = column.cast(pa.binary()).to_pylist()
        return pa.array([None if v is None else _decoded(v) for v in raw], pa.string())


def _decoded(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return NOT_UTF8


@contextlib.contextmanager
def _undecodable_rows_fail_quietly() -> Iterator[None]:
    """Within the block, drop the 'Exception ignored' report of a CSV row that is not UTF-8.

    pyarrow decodes a malformed row to text before it calls `invalid_row_handler`; when the
    row is not UTF-8 that fails inside pyarrow's callback, which Python reports on stderr
    as an ignored exception (a traceback) while pyarrow fails the read with a parse error
    naming the row. That error is the message; the report is noise.
    """
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        if not isinstance(unraisable.exc_value, UnicodeDecodeError):
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


def _read_row_group(
    file: pq.ParquetFile, index: int, columns: list[str], constants: dict[str, object]
) -> pa.Table:
    """Row group `index` of `file`: `columns` decoded (single-threaded), and one column per
    entry of `constants` holding that value (None: nulls) in every row."""
    table = file.read_row_group(index, columns=columns, use_threads=False)
    rows = file.metadata.row_group(index).num_rows
    for name, value in constants.items():
        table = table.append_column(name, pa.nulls(rows) if value is None else pa.repeat(value, rows))
    return table


def _table_batches(table: pa.Table, names: tuple[str, ...]) -> Iterator[dict[str, pa.Array]]:
    for batch in table.to_batches(max_chunksize=BATCH_ROWS):
        if batch.num_rows:
            yield {name: batch.column(name) for name in names}


# pyarrow's wrapping around the cause, which repeats the path the message already names
_PYARROW_PREAMBLE = re.compile(
    r"Error creating dataset\. Could not read schema from '[^']*'\. Is this a '\w+' file\?: "
    r"|Could not open \w+ input source '[^']*': "
)


_QUOTE_CHECK_CHUNK_BYTES = 1 << 24
_SWALLOWED_ROWS_REFUSED = 2  # rows inside one value that refuse a file: one could be a value's own line


def _check_open_quote(path: str, records: int, counted: Sequence[str], timed: str | None = None) -> None:
    """Refuse a CSV file whose rows a '"' left open has read as one value's text. An opening quote
    that is not closed where its value ends runs on to the next quote in the file, or to its end,
    and every line between is that value's text: one stray quote at row 11 of a
    2,000-row log read as 10 requests and one row excluded; in an unread text column, as 1,000
    requests and no row excluded, without a word (an outside probe). Counting the line breaks tells
    whether any value spans lines (fewer rows than lines, the header's among them); only then is the
    file read again for such values (_swallowed_rows). records: the rows read and excluded."""
    breaks, last = 0, b""
    with open(path, "rb") as f:
        while chunk := f.read(_QUOTE_CHECK_CHUNK_BYTES):
            breaks += chunk.count(b"\n")
            last = chunk[-1:]
    # (blank lines, which no row counts, count here: they only cost the second reading)
    if records + 1 < breaks + (last not in (b"", b"\n")):
        _refuse_swallowed_rows(path, counted, timed)


def _refuse_swallowed_rows(path: str, counted: Sequence[str], timed: str | None = None) -> None:
    swallowed = _swallowed_rows(path, counted, timed)
    if swallowed is not None:
        opened, rows = swallowed
        raise InputError(f"a '\"' opened on line {opened:,} is not closed where its value ends: "
                         f"{counted_text(rows, 'line')} after it that read as rows of the file are read as its text, "
                         "and those requests would be lost; close the quote or remove it", where=path)


def _swallowed_rows(path: str, counted: Sequence[str], timed: str | None = None) -> tuple[int, int] | None:
    """The first record spanning lines that holds _SWALLOWED_ROWS_REFUSED lines or more reading as rows
    of the file, and either is not well quoted (its raw lines, read again, are not one record to
    Python's strict csv reader: a quote that runs to the end of the data, or closes with text after it,
    as a stray quote meeting the next one does) or, well quoted, holds that many rows whose arrival
    times (the `timed` column, in numbers) lie within those of the records around it, as the rows
    between two stray quotes do where the second closes a value (just before a comma or a line's
    end); (the line it opens on, those lines), or None. A value spanning lines and well quoted (a
    prompt's text, a table in it) is a value, and a quote left open in the last row loses no row. Not
    caught: two such stray quotes in a log not in time order, or with times written as dates. Memory:
    the longest value, twice (the record, then its strict reading), never a copy per line."""
    limit = csv.field_size_limit()
    csv.field_size_limit(sys.maxsize)  # an open value can run for megabytes (process-wide: restored below)
    try:
        with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if not header:
                return None
            columns = [header.index(name) for name in counted if name in header]
            at = header.index(timed) if timed in header else None
            start = reader.line_num + 1
            before = math.nan  # the time of the record before
            pending = None  # a well-quoted record's (start, rows, times around it, its rows' times), for the next one's
            for record in reader:
                end = reader.line_num
                if pending is not None:
                    found = _rows_between(*pending, _number(record, at))
                    if found is not None:
                        return found
                    pending = None
                if end > start:  # this record spans lines: which of its values' lines read as rows?
                    lines = [line for value in record for i, line in enumerate(io.StringIO(value))
                             if i and _reads_as_row(line, len(header), columns)]
                    if len(lines) >= _SWALLOWED_ROWS_REFUSED:
                        if not _well_quoted(path, start, end):
                            return start, len(lines)
                        if at is not None:
                            pending = (start, len(lines), (before, _number(record, at)),
                                       [_number(line.split(","), at) for line in lines])
                before = _number(record, at)
                start = end + 1
            if pending is not None:
                return _rows_between(*pending, math.inf)
    except csv.Error:  # a file Python's reader refuses outright: pyarrow's reading stands
        return None
    finally:
        csv.field_size_limit(limit)
    return None


def _number(fields: Sequence[str], at: int | None) -> float:
    try:
        return float(fields[at]) if at is not None and at < len(fields) else math.nan
    except ValueError:
        return math.nan


def _rows_between(start: int, rows: int, around: tuple[float, float], times: list[float],
                  after: float) -> tuple[int, int] | None:
    """A well-quoted record's lines read as rows, where enough of their times lie within the times of
    the records around it (the one before, its own, the next: its own may be the last swallowed row's,
    where the quote closes in a column before the time) (a table quoted in a prompt holds no such times)."""
    known = [t for t in (*around, after) if not math.isnan(t)]
    if len(known) < 2:
        return None
    lo, hi = min(known), max(known)
    between = sum(lo <= t <= hi for t in times)  # (NaN compares false: times not numbers say nothing)
    return (start, rows) if between >= _SWALLOWED_ROWS_REFUSED else None


def _well_quoted(path: str, first: int, last: int) -> bool:
    """Whether lines first..last of a file (from 1) are one record by the strict rules of quoting."""
    with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
        try:
            records = csv.reader(itertools.islice(f, first - 1, last), strict=True)
            return next(records, None) is not None and next(records, None) is None
        except csv.Error:
            return False


def _reads_as_row(line: str, width: int, columns: Sequence[int]) -> bool:
    """Whether a line of text is a row of the file: its number of fields, and a whole number of zero or
    more in each of `columns` (as a log writes a count: '100', or '100.0' from a column that held a NaN)."""
    fields = line.split(",")
    return len(fields) == width and all(_whole(fields[i]) for i in columns)


def _whole(text: str) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return math.isfinite(value) and value >= 0 and value.is_integer()


def _unreadable(fmt: str, exc: BaseException) -> str:
    """Why the log cannot be read: pyarrow's reason, in the log's terms where pyarrow's own words
    send the user the wrong way (a block size they cannot set, a name that is blank)."""
    text = _first_line(exc)
    if "straddling object" in text:
        return (f"cannot read as {fmt}: a row is longer than the reader's {_CSV_BLOCK_BYTES >> 20} MiB blocks (a "
                "logged prompt text, say); drop that column, or give the log as Parquet or JSON Lines")
    if "duplicate field names" in text:
        return f"cannot read as {fmt}: two of its columns share a name; rename or drop one"
    twice = re.search(r"multiple columns named ?(.*)$", text)
    if twice:
        what = (f"names column '{twice.group(1)}' twice" if twice.group(1).strip()
                else "has columns without a name (commas at the end of its line?)")
        return f"cannot read as {fmt}: its header {what}; every column needs a name of its own: rename or drop them"
    return f"cannot read as {fmt}: {text}"


def _first_line(exc: BaseException) -> str:
    """The reader's error, its first line, with what a terminal cannot show (a binary file's bytes
    quoted by pyarrow) as escapes, and no longer than a line."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    line = _PYARROW_PREAMBLE.sub("", text.splitlines()[0])
    return shorten("".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in line), 300)


def _line_chunks(path: Path, size: int) -> Iterator[bytes]:
    """The file in pieces of about `size` bytes, each ending at a line break (a UTF-8 byte
    order mark, which Windows tools write and JSON parsers refuse, left out)."""
    carry = b""
    with path.open("rb") as f:
        if f.read(len(_BOM)) != _BOM:
            f.seek(0)
        while block := f.read(size):
            block = carry + block
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                carry = block
                continue
            carry = block[cut:]
            yield block[:cut]
    if carry.strip():
        yield carry + b"\n"


class _TooNested(Exception):
    """A chunk pyarrow's JSON parser must not see (see the module docstring)."""


def _check_exact(table: pa.Table, names: tuple[str, ...]) -> None:
    """Raise ArrowInvalid when pyarrow read a needed column of JSON
    numbers as floats that may have been integers past 2**53: integers and fractions in one
    column become float64, which would round 9007199254740993 to ...992 (the json module
    keeps each integer exact)."""
    for name in names:
        if name in table.column_names and pa.types.is_floating(table.column(name).type):
            largest = pc.max(pc.abs(table.column(name))).as_py()
            if largest is not None and largest >= 2**53:
                raise pa.ArrowInvalid(f"column {name}: integers past 2**53 read as floats")


def _most_openings_per_line(chunk: bytes) -> int:
    """The most '[' and '{' on any one line of `chunk`: an upper bound on its nesting depth."""
    kept = np.frombuffer(chunk.translate(None, _OPENINGS_AND_BREAKS), np.uint8)
    if not kept.size:
        return 0
    breaks = np.flatnonzero(kept == ord("\n"))
    bounds = np.concatenate([[-1], breaks, [kept.size]])
    return int((np.diff(bounds) - 1).max())


def _read_json_chunk(chunk: bytes, as_text: Sequence[str] = ()) -> pa.Table:
    """A chunk of JSON lines as a table; `as_text`: columns read as the text they hold (datetimes,
    which arrow would convert to UTC, zone by zone, with no trace of which had a zone:
    planner.workload.timestamps reads them, and refuses a column that mixes the two)."""
    if _most_openings_per_line(chunk) > _ARROW_MAX_OPENINGS:
        raise _TooNested
    parse = pajson.ParseOptions(explicit_schema=pa.schema([pa.field(n, pa.string()) for n in as_text]),
                                unexpected_field_behavior="infer") if as_text else None
    return pajson.read_json(
        io.BytesIO(chunk), read_options=pajson.ReadOptions(block_size=_JSONL_BLOCK_BYTES), parse_options=parse
    )


class _RepeatedKeys(dict):
    """A JSON object that names some key more than once (`repeated`): the json module keeps the
    last value without a word, pyarrow refuses the chunk, and RFC 8259 leaves the meaning to the
    reader. A column read from a repeated key has no one value, so the row counts as non_numeric
    (a line with a stray second "prompt_tokens" would otherwise enter the histogram as whichever
    came last); a repeated key the planner does not read leaves the row as it is."""

    repeated: frozenset[str] = frozenset()


def _object(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object's pairs as a dict, marked (_RepeatedKeys) when a key comes twice."""
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    marked = _RepeatedKeys(obj)
    marked.repeated = frozenset(k for k, n in Counter(k for k, _ in pairs).items() if n > 1)
    return marked


def _json_objects(chunk: bytes) -> Iterator[object]:
    for line in chunk.splitlines():
        if not line.strip():
            continue  # pyarrow skips blank lines too, so both paths count the same rows
        try:
            yield json.loads(line, object_pairs_hook=_object)
        except (ValueError, RecursionError):  # broken, a 5,000-digit number, nested too deeply
            yield MALFORMED_LINE


def _python_json_batch(chunk: bytes, names: tuple[str, ...]) -> tuple[dict[str, np.ndarray], set[str] | None]:
    """The chunk's `names` columns, read line by line; and which of them some object has (None: no
    line is an object)."""
    rows = list(_json_objects(chunk))
    out: dict[str, np.ndarray] = {}
    for name in names:
        column = np.empty(len(rows), dtype=object)
        column[:] = [row.get(name) if isinstance(row, dict) and name not in getattr(row, "repeated", ())
                     else MALFORMED_LINE for row in rows]
        out[name] = column
    objects = [row for row in rows if isinstance(row, dict)]
    return out, ({n for n in names if any(n in row for row in objects)} if objects else None)
