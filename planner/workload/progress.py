"""How far an ingest has read into each log: a total known before reading, a position after
each batch, for a progress bar with an ETA (`planner histogram` draws it, on a terminal only).

- Parquet: rows; the total is the row count in the files' footers, read before the scan.
- CSV, JSON Lines: bytes; the total is the files' size. The scan yields rows, not byte
  offsets, so the position is the rows read × the mean row length of the first MiB,
  kept below the total until the log is done, when it is the total.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

_SAMPLE_BYTES = 1 << 20


class ProgressSink(Protocol):
    """What ingest reports to: one `start` per log, then `advance` after each batch."""

    def start(self, label: str, total: int | None, unit: str) -> None: ...

    def advance(self, position: int) -> None: ...


@dataclass
class LogExtent:
    """One log's total (rows or bytes) and how a count of rows read maps onto it."""

    total: int | None  # None: unknown (a file whose footer or size could not be read)
    unit: str  # 'rows' or 'B'
    bytes_per_row: float = 1.0  # for text logs; 1 for rows
    rows_read: int = 0

    def advance(self, rows: int) -> int:
        """The position after `rows` more rows (below the total: only `done` reaches it)."""
        self.rows_read += rows
        position = self.rows_read if self.unit == "rows" else round(self.rows_read * self.bytes_per_row)
        return position if self.total is None else min(position, max(self.total - 1, 0))

    def done(self) -> int:
        return self.total if self.total is not None else self.advance(0)


def log_extent(fmt: str, files: list[str]) -> LogExtent:
    """The extent of a log of format `fmt` made of `files` (LogReader.format, .data_files()).

    A file that cannot be measured leaves the total unknown: the scan that follows reports
    the fault itself, with its located message."""
    import pyarrow as pa

    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return LogExtent(sum(pq.read_metadata(f).num_rows for f in files), "rows")
        size = sum(os.path.getsize(f) for f in files)
        return LogExtent(size, "B", _mean_row_bytes(files[0]) if files else 1.0)
    except (pa.ArrowException, OSError):
        return LogExtent(None, "rows" if fmt == "parquet" else "B")


def _mean_row_bytes(path: str) -> float:
    """Bytes per line in the first MiB of `path` (the whole sample when it holds no line break)."""
    with open(path, "rb") as f:
        sample = f.read(_SAMPLE_BYTES)
    return len(sample) / max(sample.count(b"\n"), 1)
