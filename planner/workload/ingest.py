"""Logs (and histogram files) → one Histogram, streaming; the `planner histogram` pipeline.

For each input: a histogram file (Parquet in histfile.py's schema) is read and
added; a log is read batch by batch (readers.py), its token counts and times coerced
(rows.py, timestamps.py), unusable rows counted per reason, and the rest added to the
dense accumulators (accumulate.py). Because every step adds, the result equals the
histogram of one pass over the union of all inputs, however they were split.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from planner.bounds import MAX_TOKENS
from planner.errors import InputError, shorten
from planner.histogram import Histogram, total_bin
from planner.workload.accumulate import ArrivalCounter, CellAccumulator, to_histogram
from planner.workload.columns import ColumnSpec, matching_presets, suggested
from planner.workload.fingerprint import log_fingerprint
from planner.workload.histfile import (
    HISTOGRAM_FILE_CORE_COLUMNS,
    read_histogram_and_metadata,
    write_histogram,
)
from planner.workload.histmeta import combined_time_unit
from planner.workload.peaks import check_span
from planner.workload.progress import ProgressSink, log_extent
from planner.workload.readers import LogReader
from planner.workload.repeats import RepeatCounter, instants_us
from planner.workload.rows import (
    CODE_TOO_LONG,
    EXCLUSION_REASONS,
    OK,
    combine_codes,
    count_reasons,
    prompt_counts,
    token_counts,
)
from planner.workload.timestamps import MinuteConverter, TimeAssumption

_SUM_COLUMN = "{} + {}"  # the per-column count of rows whose prompt and output are each kept but not their sum


@dataclass(frozen=True)
class FileReport:
    """What one input contributed."""

    path: str
    kind: str  # 'log' or 'histogram'
    format: str
    rows_read: int  # a histogram file's: the rows its logs had when it was written (requests and excluded)
    requests: int
    excluded_rows: dict[str, int]
    time_column: str | None
    time: TimeAssumption | None
    # files of a folder without some of the columns read (their rows count as null)
    files_missing_columns: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # rows each column could not give a usable value for (a row may count under two columns)
    problems_by_column: dict[str, int] = field(default_factory=dict)
    rows_failing_time_only: int = 0  # excluded for their time alone: their lengths are fine
    # content fingerprints of the log files its requests come from (planner.workload.fingerprint): a
    # log's own files', a histogram file's recorded ones
    fingerprints: tuple[str, ...] = ()
    # a histogram file's per-minute arrival counts, which count whether or not its metadata names the
    # unit its logs' times were read in (a DuckDB, Dask or Spark recipe's file names none)
    minute_counts: bool = False
    sources: tuple[str, ...] = ()  # a histogram file's: the names of the logs it was built from
    minutes: tuple[int, int] | None = None  # its first and last arrival minutes, where it has times
    minutes_by_length: bool = True  # a histogram file's: whether it counts its arrivals per minute by length
    # a log without the (optional) time column named, that has columns whose names say time: (that
    # name, those columns), for a note (a `timestamp` header read as no times said nothing)
    time_lookalikes: tuple[str, tuple[str, ...]] | None = None

    @property
    def timed(self) -> bool:
        """Whether its requests' arrivals count in the per-minute rates."""
        return self.time is not None or self.minute_counts

    @property
    def problems_text(self) -> str:
        """Which columns the excluded rows fail on, e.g. "timestamp_ms 300"; and how many fail on
        their time alone, whose lengths are left out too (so a warning says how to keep them)."""
        named = ", ".join(f"{c} {n:,}" for c, n in self.problems_by_column.items() if n)
        if not named:
            return ""
        text = f"by column: {named}"
        if self.rows_failing_time_only:
            text += (f"; {self.rows_failing_time_only:,} of them fail on their time alone, and their lengths are "
                     "left out too (`planner histogram --no-time` reads every row's lengths)")
        return text


@dataclass(frozen=True)
class IngestResult:
    """The merged histogram of all inputs, and what each input contributed."""

    histogram: Histogram
    files: tuple[FileReport, ...]
    notes: tuple[str, ...] = field(default=())
    # with keep_requests: every usable timestamped row as (prompt, output, arrival seconds), or
    # None when a log had no time column, an input was a histogram file, or there were too many
    requests: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    # rows of timed logs that repeat another's arrival time and token counts (planner.workload.repeats)
    repeats: tuple[str, ...] = ()

    @property
    def excluded_rows(self) -> dict[str, int]:
        return {r: sum(f.excluded_rows[r] for f in self.files) for r in EXCLUSION_REASONS}

    @property
    def warnings(self) -> tuple[str, ...]:
        """Times whose values contradict the unit stated for them (timestamps.MinuteConverter), one per
        log, logs read beside a histogram file built from a log of their name (_grown_logs), and rows that
        repeat others exactly (repeats): a plan's rates would be 1000× or twice off, so commands say it on
        stderr, not in a note only."""
        doubts = [f"{f.path}: {f.time.doubt}" for f in self.files if f.time is not None and f.time.doubt]
        return (*doubts, *_grown_logs(self.files), *self.repeats)

    @property
    def length_warnings(self) -> tuple[str, ...]:
        """Histogram files that drop the result's arrivals by length (_without_minutes_by_length): said by
        `planner histogram`, and by a plan whose peak is measured (an explicit one is shared out anyway)."""
        return tuple(_without_minutes_by_length(self.files, self.histogram))

    @property
    def time_unit_assumed(self) -> str | None:
        """The unit timestamps were read in; 'mixed (...)' when the inputs differ."""
        return combined_time_unit({f.path: f.time.unit for f in self.files if f.time is not None})


def ingest(
    paths: Sequence[str | os.PathLike],
    columns: ColumnSpec,
    *,
    fmt: str = "auto",
    progress: ProgressSink | None = None,
    keep_requests: int = 0,
) -> IngestResult:
    """Histogram every input into one; raises InputError when no usable row remains.

    keep_requests: also keep up to this many timestamped requests row by row (for replaying
    a log's own arrivals); more than that, or any input without timestamps, keeps none.
    progress: told each log's total (progress.py) and its position after each batch."""
    if not paths:
        raise InputError("no input logs given")
    _refuse_repeats(paths)
    cells, arrivals = CellAccumulator(), ArrivalCounter()
    reports = []
    kept: list | None = [] if keep_requests > 0 else None
    repeats = RepeatCounter()
    read_files: dict[tuple[int, int], tuple[str, str]] = {}
    counted: dict[str, str] = {}  # a log file's content fingerprint -> where its requests were counted
    zones: set[bool] = set()  # whether the logs' datetimes carry a time zone (MinuteConverter)
    for path in paths:
        reader = LogReader(path, fmt)
        _refuse_same_file(reader, read_files)
        try:
            if _is_histogram_file(reader):
                reports.append(_add_histogram_file(Path(path), cells, arrivals, counted, times=columns.time is not None))
                kept = None
            else:
                fingerprints = _count_once(reader, counted)
                reports.append(dataclasses.replace(_add_log(reader, columns, cells, arrivals, progress, kept, zones,
                                                            (repeats, len(reports))),
                                                   fingerprints=fingerprints))
                if kept is not None and (reports[-1].time_column is None or sum(k[0].size for k in kept) > keep_requests):
                    kept = None
        except InputError as exc:
            if exc.where is not None:
                raise
            raise InputError(str(exc), where=reader.where) from None
    histogram = to_histogram(cells, arrivals)
    requests = None
    if kept:
        requests = tuple(np.concatenate([k[i] for k in kept]) for i in range(3))
    repeated = repeats.repeats([r.path for r in reports], [r.requests for r in reports])
    result = IngestResult(histogram, tuple(reports), _notes(reports), requests, tuple(r.text() for r in repeated))
    names = ", ".join(str(p) for p in paths)
    if histogram.is_empty:
        excluded = ", ".join(f"{r} {n}" for r, n in result.excluded_rows.items())
        columns = "; ".join(f"{f.path}: {text}" for f in result.files if (text := f.problems_text))
        raise InputError(f"no usable row (excluded rows: {excluded}{'; ' + columns if columns else ''})", where=names)
    check_span(histogram, names)
    return result


def _refuse_repeats(paths: Sequence[str | os.PathLike]) -> None:
    """A log given twice (by any path to the same file) would count its requests twice."""
    seen: dict[str, int] = {}
    for i, path in enumerate(paths):
        key = os.path.realpath(path)
        if key in seen:
            raise InputError(f"given twice (as input {seen[key] + 1} and input {i + 1}); its requests would count "
                             "twice", where=str(path))
        seen[key] = i


def _refuse_same_file(reader: LogReader, read_files: dict[tuple[int, int], tuple[str, str]]) -> None:
    """A file of this log that is a file already read (a hard link, a link inside a folder, or a file
    also given within its folder, which the paths given do not show) would count its requests twice.
    read_files: the files read so far, by device and inode, with the input each came in; this log's
    are added."""
    for file in reader.data_files():
        try:
            st = os.stat(file)
        except OSError:
            continue  # reading it says what is wrong with it
        if not st.st_ino:  # a file system without inode numbers: nothing to compare
            continue
        key = (st.st_dev, st.st_ino)
        if key in read_files:
            first, given = read_files[key]
            what = (f"is read twice, in {given} and in {reader.where}" if os.path.abspath(first) == os.path.abspath(file)
                    else f"is the same file as {first} (a link to it)")
            raise InputError(f"{what}; its requests would count twice", where=str(file))
        read_files[key] = (str(file), reader.where)


def _count_once(reader: LogReader, counted: dict[str, str]) -> tuple[str, ...]:
    """The content fingerprints of the log's files, each refused where a file of the same contents
    was counted already (a copy of a log given beside it, or a log a histogram given was built
    from); they are added to `counted`."""
    out = []
    for file in reader.data_files():
        try:
            fingerprint = log_fingerprint(file, reader.format)
        except OSError:
            continue  # reading it says what is wrong with it
        if fingerprint is None:  # no row: nothing to count twice
            continue
        if fingerprint in counted:
            raise InputError(f"holds the same contents as {counted[fingerprint]}; its requests would count twice",
                             where=str(file))
        counted[fingerprint] = str(file)
        out.append(fingerprint)
    return tuple(out)


def is_histogram_file(path: str | os.PathLike) -> bool:
    """Whether `path` (a file, or a folder of parts) is a histogram file rather than a request log."""
    return _is_histogram_file(LogReader(path, "auto"))


def _is_histogram_file(reader: LogReader) -> bool:
    """Whether the input is a histogram file (or a folder of its parts) rather than a log.

    Decided for every file of a folder, so that the answer cannot depend on which file
    comes first; a folder holding both kinds is refused as a whole (its histogram parts
    would otherwise be read as a log whose rows all lack the token columns, or the other
    way round)."""
    if reader.format != "parquet":
        return False
    kinds = {
        file: set(HISTOGRAM_FILE_CORE_COLUMNS) <= set(names) for file, names in reader.file_columns().items()
    }
    if all(kinds.values()):
        return True
    if any(kinds.values()):
        histogram = next(f for f, is_hist in kinds.items() if is_hist)
        log = next(f for f, is_hist in kinds.items() if not is_hist)
        raise InputError(
            f"folder holds both histogram files ({Path(histogram).name}) and logs ({Path(log).name}); "
            "give them as separate inputs",
            where=reader.where,
        )
    return False


def _add_log(
    reader: LogReader,
    spec: ColumnSpec,
    cells: CellAccumulator,
    arrivals: ArrivalCounter,
    progress: ProgressSink | None,
    kept: list | None = None,
    zones: set[bool] | None = None,
    repeats: tuple[RepeatCounter, int] | None = None,
) -> FileReport:
    """repeats: the counter of the timed rows read so far, and this log's number in it."""
    time_col = _check_columns(reader, spec)
    names = (spec.prompt, spec.output) + ((time_col,) if time_col else ())
    converter = MinuteConverter(spec.time_unit, zones, time_col) if time_col else None

    def prepare_batch(batch: dict) -> _Prepared:
        prompt, output = prompt_counts(batch[spec.prompt]), token_counts(batch[spec.output])
        when = converter.times(batch[time_col]) if converter else None
        # the sum within MAX_TOKENS too: total lengths past the last total edge read as garbage (a
        # log of 8M-token prompts and outputs had its total p50 at 45M, over any row's sum)
        over = (prompt.values + output.values) > MAX_TOKENS  # (a row with another problem holds 0s)
        lengths = combine_codes(prompt.codes, output.codes,
                                np.where(over, CODE_TOO_LONG, OK).astype(np.uint8) if over.any() else None)
        codes = combine_codes(lengths, when.codes if when else None)
        keep = None if codes is None else codes == OK
        p, o = (
            (prompt.values, output.values)
            if keep is None
            else (prompt.values[keep], output.values[keep])
        )
        seconds = times = None
        if when is not None and (kept is not None or repeats is not None):
            values = when.values if keep is None else when.values[keep]
            if kept is not None:
                seconds = values.astype(np.float64) * (60.0 / when.per_minute)
            if repeats is not None:
                times = instants_us(values, when.per_minute)
        problems = {name: 0 if c is None else int(np.count_nonzero(c))
                    for name, c in ((spec.prompt, prompt.codes), (spec.output, output.codes),
                                    (time_col, when.codes if when else None)) if name}
        problems[_SUM_COLUMN.format(spec.prompt, spec.output)] = int(np.count_nonzero(over))
        time_only = 0
        if when is not None and when.codes is not None:
            time_only = int(np.count_nonzero((when.codes != OK) & (True if lengths is None else lengths == OK)))
        return _Prepared(
            prompt=p,
            output=o,
            minute_counts=when.minute_counts(keep) if when else None,
            minute_bin_counts=when.minute_bin_counts(keep, total_bin(p + o)) if when else None,
            excluded=count_reasons(codes),
            rows=prompt.values.size,
            seconds=seconds,
            times=times,
            problems=problems,
            time_only=time_only,
        )

    excluded = dict.fromkeys(EXCLUSION_REASONS, 0)
    problems = dict.fromkeys((*names, _SUM_COLUMN.format(spec.prompt, spec.output)), 0)
    rows = requests = time_only = 0
    first_minute, last_minute = None, None
    extent = log_extent(reader.format, reader.data_files()) if progress else None
    if progress:
        progress.start(Path(reader.where).name, extent.total, extent.unit)
    for prepared in (prepare_batch(batch) for batch in reader.batches(names)):
        cells.add(prepared.prompt, prepared.output)
        if kept is not None and prepared.seconds is not None:
            kept.append((prepared.prompt, prepared.output, prepared.seconds))
        if prepared.times is not None:
            repeats[0].add(repeats[1], prepared.times, prepared.prompt, prepared.output)
        if prepared.minute_counts is not None:
            arrivals.add(prepared.minute_counts, prepared.minute_bin_counts)
            minute = prepared.minute_counts[0]
            if minute.size:  # sorted in each batch; batches need not be
                first_minute = int(minute[0]) if first_minute is None else min(first_minute, int(minute[0]))
                last_minute = int(minute[-1]) if last_minute is None else max(last_minute, int(minute[-1]))
        for reason, count in prepared.excluded.items():
            excluded[reason] += count
        for name, count in prepared.problems.items():
            problems[name] += count
        time_only += prepared.time_only
        rows += prepared.rows
        requests += prepared.prompt.size
        if progress:
            progress.advance(extent.advance(prepared.rows))
    if progress:
        progress.advance(extent.done())
    for reason, count in reader.skipped.items():
        excluded[reason] += count
        rows += count
    return FileReport(
        path=reader.where,
        kind="log",
        format=reader.format,
        rows_read=rows,
        requests=requests,
        excluded_rows=excluded,
        time_column=time_col,
        time=converter.assumption if converter else None,
        files_missing_columns=dict(reader.files_missing_columns),
        problems_by_column=problems,
        rows_failing_time_only=time_only,
        minutes=None if first_minute is None else (first_minute, last_minute),
        time_lookalikes=_time_lookalikes(reader, spec) if time_col is None else None,
    )


# Words of a column name that say it holds an arrival time; 'time' says so only beside words of when a
# request came or with units alone ('request_time', 'time_ms'), since most '..._time' columns are
# durations (inference_time, queue_time); and words that say a latency or another instant
_ARRIVAL_WORDS = frozenset({"timestamp", "ts", "date", "datetime", "arrival", "arrived", "created", "epoch", "when",
                            "received", "sent"})
_WHEN_WORDS = frozenset({"request", "start", "started", "event", "submit", "submitted", "enqueue", "enqueued", "log",
                         "stamp"})
_UNIT_WORDS = frozenset({"ms", "s", "us", "ns", "sec", "secs", "seconds", "utc", "unix", "iso"})
_NOT_ARRIVAL_WORDS = frozenset({"response", "latency", "ttft", "tpot", "itl", "duration", "elapsed", "delay", "wait",
                                "e2e", "end", "finish", "finished", "first", "last", "token", "tokens", "inference",
                                "processing", "generation", "queue", "queued", "compute", "total", "run", "exec",
                                "prefill", "decode", "update", "updated", "modified", "birth", "expiry", "expires"})


def _name_words(name: str) -> set[str]:
    """A column name's words, split at non-letters and camelCase: 'createdAt' -> {'created', 'at'}."""
    return {w.lower() for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", name)}


def _says_arrival(name: str) -> bool:
    words = _name_words(name)
    if words & _NOT_ARRIVAL_WORDS:
        return False
    return bool(words & _ARRIVAL_WORDS) or ("time" in words and words - {"time"} <= _WHEN_WORDS | _UNIT_WORDS)


def _time_lookalikes(reader: LogReader, spec: ColumnSpec) -> tuple[str, tuple[str, ...]] | None:
    """The time column named and missing, and the log's columns whose names say arrival time, if any."""
    if spec.time is None:
        return None
    like = tuple(name for name in reader.columns if name not in (spec.prompt, spec.output) and _says_arrival(name))
    return (spec.time, like) if like else None


@dataclass(frozen=True, eq=False)
class _Prepared:
    """One batch of a log: the usable requests' token counts, arrivals per minute, exclusions."""

    prompt: np.ndarray
    output: np.ndarray
    minute_counts: tuple[np.ndarray, np.ndarray] | None
    minute_bin_counts: tuple[np.ndarray, np.ndarray] | None  # per (minute, total bin): Histogram.minute_bin_key
    excluded: dict[str, int]
    rows: int
    seconds: np.ndarray | None = None  # arrival times of the usable rows, when kept
    times: np.ndarray | None = None  # the usable rows' arrival instants in µs, for the repeat counter
    problems: dict[str, int] = field(default_factory=dict)  # rows without a usable value, per column
    time_only: int = 0  # rows whose time alone is unusable


def _check_columns(reader: LogReader, spec: ColumnSpec) -> str | None:
    """Raise InputError for a missing column (listing those that exist); the time column to use."""
    reader.find_late_columns([n for n in (spec.prompt, spec.output, spec.time) if n is not None])
    have = reader.columns
    for name, role in ((spec.prompt, "prompt"), (spec.output, "output")):
        if name not in have:
            raise InputError(_missing(name, role, have, spec, reader.format), where=reader.where)
    if spec.time is None:
        return None
    if spec.time in have:
        return spec.time
    if spec.time_required:
        raise InputError(_missing(spec.time, "time", have, spec, reader.format), where=reader.where)
    return None


_ROLE_TEXT = {"prompt": "prompt tokens", "output": "output tokens", "time": "arrival time"}


def _missing(name: str, role: str, have: list[str], spec: ColumnSpec, fmt: str) -> str:
    # A name with spaces around it (a header written "a, b") or a comma in it is quoted, so the
    # list does not show the very name that is missing.
    shown = [f"'{h}'" if h != h.strip() or "," in h else h for h in have]
    message = (f"no column '{shorten(name)}' ({_ROLE_TEXT[role]}); the file has: "
               f"{shorten(', '.join(shown), 300) or '(no columns)'}")
    if name in (h.strip() for h in have):
        message += f" ('{shorten(name)}' with spaces around it: a header's names are read as written)"
    word = next((word for sep, word in ((";", "semicolons"), ("\t", "tabs"), ("|", "bars"))
                 if fmt == "csv" and len(have) == 1 and sep in have[0]), None)
    if word is not None:  # one column whose name holds the others: another separator than the comma
        return message + f" — its header is separated by {word}, and CSV is read comma-separated: convert it"
    presets = matching_presets(have, role=role, in_use=spec.preset)
    if presets:
        message += f" — try {suggested('preset', presets[0])}"
    else:
        message += f" — name the columns with {suggested('columns')}"
    return message


def _add_histogram_file(path: Path, cells: CellAccumulator, arrivals: ArrivalCounter,
                        counted: dict[str, str], *, times: bool = True) -> FileReport:
    """times=False (`--no-time`, no time column read): its arrivals per minute are left out too, as a
    log's times are: `histogram --no-time` of a histogram file printed its rates and kept its minutes."""
    hist, meta = read_histogram_and_metadata(path)
    if not times and hist.minute.size:
        none = np.zeros(0, np.int64)
        hist = dataclasses.replace(hist, minute=none, minute_count=none, minute_bin_key=none, minute_bin_count=none,
                                   minute_bins_kept=True)  # as a log read without times is
    for fingerprint in meta.source_fingerprints:  # the logs it was built from, against those counted already
        if fingerprint in counted:
            raise InputError(f"was built from a log with the same contents as {counted[fingerprint]}; its "
                             "requests would count twice", where=str(path))
    for fingerprint in meta.source_fingerprints:
        counted[fingerprint] = f"a log {path} was built from"
    cells.add_histogram(hist)
    arrivals.add((hist.minute, hist.minute_count),
                 (hist.minute_bin_key, hist.minute_bin_count) if hist.minute_bins_kept else None)
    excluded = meta.excluded()
    unit = meta.time_unit_assumed
    return FileReport(
        path=str(path),
        kind="histogram",
        format="parquet",
        rows_read=hist.requests + sum(excluded.values()),
        requests=hist.requests,
        excluded_rows=excluded,
        time_column=None,
        time=TimeAssumption(unit, "histogram file") if unit and hist.minute.size else None,
        fingerprints=tuple(meta.source_fingerprints),
        minute_counts=bool(hist.minute.size),
        sources=tuple(meta.sources),
        minutes=(int(hist.minute[0]), int(hist.minute[-1])) if hist.minute.size else None,
        minutes_by_length=hist.minute_bins_kept,
    )


def _without_minutes_by_length(reports: Sequence[FileReport], hist: Histogram) -> list[str]:
    """Histogram files that count arrivals per minute without their lengths, where the result therefore
    keeps none (Histogram.minute_bins_kept): said where the files are merged, where a user can still
    rebuild them, and by every plan made from the result."""
    old = [r.path for r in reports if r.kind == "histogram" and r.minute_counts and not r.minutes_by_length]
    if not old or not hist.minute.size or hist.minute_bins_kept:
        return []
    return [f"{', '.join(old)} count{'s' if len(old) == 1 else ''} arrivals per minute without their lengths (written "
            "before planner kept them by length): the histogram keeps none, so each traffic class is planned at its "
            "share of the peak and a class's own bursts (long documents sent together) are not seen; rebuild "
            f"{'it' if len(old) == 1 else 'them'} from the logs with `planner histogram`"]


def _grown_logs(reports: Sequence[FileReport]) -> list[str]:
    """A log read beside a histogram file built from a log of the same name (with other contents: the
    same contents are refused): a log appended to since, the quarter's usual case ("last quarter's
    histogram and today's log"), whose earlier requests would count twice (an outside probe: 29,049
    requests for 19,366, the p99 minute 15.4 requests/s for 8.2)."""
    def overlap(a: FileReport, b: FileReport) -> bool:
        """Their arrivals share minutes past one at a boundary (a day's partition, or an event at 23:59:59 in
        the next one's, does not); where either has no times, nothing tells: the name alone is warned of."""
        if a.minutes is None or b.minutes is None:
            return True
        return a.minutes[0] < b.minutes[1] and b.minutes[0] < a.minutes[1]

    built = [(r, set(r.sources)) for r in reports if r.kind == "histogram" and r.sources]
    return [f"{h.path} was built from a log named {Path(log.path).name}, as is {log.path} read with it, and their "
            "arrivals share minutes: if that log has grown since, its requests up to then count twice; give the "
            "histogram file with only the log's newer rows, or the log alone"
            for log in reports if log.kind == "log" for h, names in built
            if Path(log.path).name in names and overlap(log, h)]


def _notes(reports: list[FileReport]) -> tuple[str, ...]:
    notes = []
    timed = [r for r in reports if r.timed]
    if timed and len(timed) < len(reports):
        untimed = ", ".join(r.path for r in reports if not r.timed)
        notes.append(f"no arrival times in {untimed}: per-minute rates count only the other inputs")
    for r in reports:
        for file, columns in r.files_missing_columns.items():
            notes.append(
                f"{file}: no column {', '.join(columns)}; its rows are counted as null (excluded)"
            )
        if r.time_lookalikes:
            missing, like = r.time_lookalikes
            named = ", ".join(repr(shorten(n)) for n in like[:3])
            notes.append(f"{r.path}: no column '{shorten(missing)}' (arrival times), so no arrival rate is read "
                         + (f"from it; it has {named}: to read it as its time, name it ({suggested('time_col', like[0])})"
                            if len(like) == 1 else
                            f"from it; it has {named}: to read one as its time, name it ({suggested('time_col')})"))
        if r.time and r.time.reason.startswith("magnitude") and r.time.unit == "s":
            # epoch seconds from 2020 on, or milliseconds from a trace's start past its 18th day: the values
            # cannot tell (timestamps.FIRST_SERVING_S)
            notes.append(f"{r.path}: timestamps read as epoch seconds ({r.time.reason}); if they are milliseconds "
                         f"counted from the log's start, say so ({suggested('time_unit', 'ms')})")
    return tuple(notes)


def write_histogram_file(result: IngestResult, path: str | os.PathLike) -> None:
    """Write the histogram file atomically, recording its sources and exclusions in its metadata."""
    metadata = {
        # a histogram file merged in passes on the logs it was built from: a log grown since is told by name
        # through a chain of files (a reading: q1 + other -> q2, then q2 beside the grown log, said nothing)
        "sources": [name for f in result.files for name in (Path(f.path).name, *f.sources)],
        "source_fingerprints": [fingerprint for f in result.files for fingerprint in f.fingerprints],
        "excluded_rows": result.excluded_rows,
        "time_unit_assumed": result.time_unit_assumed,
    }
    write_histogram(result.histogram, path, metadata)
