"""The histogram file's schema metadata: what its producer recorded beside the counts.

planner writes, under HISTOGRAM_FILE_METADATA_KEY, a JSON object: the format, the bin
edges, the logs it came from, the rows they excluded per reason and how their timestamps
were read (planner.workload.ingest.write_histogram_file). Spark, Dask or SQL parts written
with `histogram_table` carry the format and the edges only, and a file written by SQL may
carry none. Every key is optional; a key that is present must hold what planner writes,
or the file is refused naming the file and the key: the counts are read into reports
(a count of -5 excluded rows, or "lots", would be printed or crash the summary).

A folder of part files is read as one histogram, so every part's metadata counts: the
excluded rows add up, every part's edges are checked, and the time units combine.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from planner.errors import InputError, shown_value
from planner.histogram import FINE_EDGES, LENGTH_EDGES, TOTAL_EDGES
from planner.workload.columns import TIME_UNITS
from planner.workload.rows import EXCLUSION_REASONS
from planner.workload.timestamps import DATETIME
from planner.yamlio import validation_message

HISTOGRAM_FILE_METADATA_KEY = "planner.histogram"
ExclusionReason = Literal[EXCLUSION_REASONS]  # type: ignore[valid-type]
RowCount = Annotated[int, Field(ge=0, le=2**63 - 1)]  # rows of the logs, counted in int64
_MIXED = "mixed ("


def _one_line(text: str) -> str:
    """Text printed in a note or summary line: one line, no control characters (a crafted
    "ms\nerror: fake" printed a line of its own)."""
    if not text.isprintable():
        raise ValueError("must be one line of printable text")
    return text


def _time_unit(text: str) -> str:
    """A unit timestamps were read in, or several parts' 'mixed (...)' (combined_time_unit)."""
    if text in (DATETIME, *TIME_UNITS) or (text.startswith(_MIXED) and text.endswith(")") and text.isprintable()):
        return text
    raise ValueError(f"expected one of {', '.join((DATETIME, *TIME_UNITS))} or 'mixed (...)'")


OneLine = Annotated[str, AfterValidator(_one_line)]
# A source file's content fingerprint (planner.workload.fingerprint): 64 lowercase hex digits.
Fingerprint = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


def combined_time_unit(units: Mapping[str, str]) -> str | None:
    """The unit several inputs' timestamps were read in (by path): theirs where they agree, else
    'mixed (a.csv: ms; b.csv: s)', each named by its file name, or by its path below the folder
    the inputs share where two names are the same (hive parts: day=1/part-0.parquet)."""
    if len(set(units.values())) <= 1:
        return next(iter(units.values()), None)
    names = [Path(p).name for p in units]
    if len(set(names)) < len(names):
        common = os.path.commonpath([os.path.abspath(p) for p in units])
        names = [os.path.relpath(os.path.abspath(p), common) for p in units]
    return _MIXED + "; ".join(f"{name}: {u}" for name, u in zip(names, units.values(), strict=True)) + ")"


class HistogramFileMetadata(BaseModel):
    """The JSON object under HISTOGRAM_FILE_METADATA_KEY. Strict: JSON has ints and strings, so
    "5" where a count belongs is a wrong file, not a count. Keys planner does not know are kept
    (another producer may record more)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="allow")

    format: OneLine | None = None
    length_edges: list[int] | None = None
    total_edges: list[int] | None = None
    fine_edges: list[int] | None = None
    sources: list[OneLine] = []
    # the content fingerprints of the log files it was built from (and of those its histogram inputs
    # were): a log or histogram combined with it later that holds the same requests is refused
    source_fingerprints: list[Fingerprint] = []
    excluded_rows: dict[ExclusionReason, RowCount] = Field(default_factory=dict)
    time_unit_assumed: Annotated[str, AfterValidator(_time_unit)] | None = None

    def excluded(self) -> dict[str, int]:
        """Excluded rows for every reason (0 where none was recorded), in EXCLUSION_REASONS order."""
        return {r: self.excluded_rows.get(r, 0) for r in EXCLUSION_REASONS}


# The formats planner has written, oldest first; the last is today's (planner.workload.histfile). A
# file of /1, which had no fine marginals, passes here so that the column check tells it to be rebuilt.
READABLE_FORMATS = ("planner.histogram/1", "planner.histogram/2")


def parse_metadata(raw: bytes | None, where: str) -> HistogramFileMetadata:
    """The metadata of one file from its schema's raw value (None: the producer wrote none).

    Raises InputError naming `where` and the key for metadata that is not JSON, not an object,
    has a key of the wrong type or a negative count, or was built with other bin edges."""
    prefix = f"schema metadata '{HISTOGRAM_FILE_METADATA_KEY}'"
    if raw is None:
        return HistogramFileMetadata()
    try:
        data = json.loads(raw)
    except ValueError as exc:  # not JSON, or not UTF-8
        raise InputError(f"{prefix} is not JSON ({exc})", where=where) from None
    except RecursionError:  # arrays nested deeper than the parser recurses
        raise InputError(f"{prefix} is nested too deeply to be planner's metadata", where=where) from None
    if not isinstance(data, dict):
        kind = {list: "an array", str: "a string", bool: "true or false", type(None): "null"}.get(type(data), "a number")
        raise InputError(f"{prefix} is {kind}, not a JSON object of keys", where=where)
    try:
        meta = HistogramFileMetadata.model_validate(data)
    except ValidationError as exc:
        raise InputError(f"{prefix}: {validation_message(exc, HistogramFileMetadata)}", where=where) from None
    if meta.format is not None and meta.format not in READABLE_FORMATS:
        raise InputError(f"{prefix}: format {shown_value(meta.format)} is not a format planner has written "
                         f"({', '.join(READABLE_FORMATS)})", where=where)
    for key, edges in (("length_edges", LENGTH_EDGES), ("total_edges", TOTAL_EDGES), ("fine_edges", FINE_EDGES)):
        value = getattr(meta, key)
        if value is not None and value != edges.tolist():
            raise InputError(f"built with other bin edges ({key}) than planner.histogram has; rebuild it from the "
                             "logs", where=where)
    return meta


def read_file_metadata(path: str) -> HistogramFileMetadata:
    """The validated metadata in one Parquet file's schema (InputError naming the file)."""
    import pyarrow.parquet as pq

    raw = (pq.read_schema(path).metadata or {}).get(HISTOGRAM_FILE_METADATA_KEY.encode())
    return parse_metadata(raw, str(path))


def combined(parts: dict[str, HistogramFileMetadata], where: str) -> HistogramFileMetadata:
    """The metadata of a histogram read from several part files: their sources in turn, their
    excluded rows summed, and their time unit ('mixed (...)' naming each part's where they differ).
    Two parts built from logs of the same contents are refused (InputError at `where`, the folder),
    as two such inputs are: a copied part counted every request twice, and sized for twice the peak."""
    if len(parts) == 1:
        return next(iter(parts.values()))
    first_from: dict[str, str] = {}
    for path, m in parts.items():
        for fingerprint in m.source_fingerprints:
            if first_from.setdefault(fingerprint, path) != path:
                raise InputError(f"part {os.path.relpath(path, where)} was built from a log with the same contents "
                                 f"as a log part {os.path.relpath(first_from[fingerprint], where)} was built from; its "
                                 "requests would count twice", where=where)
    excluded = {r: sum(m.excluded_rows.get(r, 0) for m in parts.values()) for r in EXCLUSION_REASONS}
    unit = combined_time_unit({path: m.time_unit_assumed for path, m in parts.items() if m.time_unit_assumed is not None})
    formats = {m.format for m in parts.values()} - {None}
    # (constructed, not validated: each part's counts were, and their sum may pass one log's bound)
    return HistogramFileMetadata.model_construct(
        format=formats.pop() if len(formats) == 1 else None,
        sources=[s for m in parts.values() for s in m.sources],
        source_fingerprints=[f for m in parts.values() for f in m.source_fingerprints],
        excluded_rows={r: n for r, n in excluded.items() if n},
        time_unit_assumed=unit,
    )
