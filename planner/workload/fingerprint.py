"""A log file's content fingerprint, so that the same requests are not counted twice when they
come in by two routes: a copy of a log beside the log, or a histogram built from a log and given
again with that log (`planner histogram last_quarter.parquet jan.csv ...` where last_quarter was
built from jan.csv). Paths and inodes (planner.workload.ingest) catch a log given twice by two
names of one file; a copy or a histogram is another file.

The fingerprint is SHA-256 over the file's size and its bytes: all of them up to WHOLE_BYTES,
beyond that SAMPLES evenly spaced runs of SAMPLE_BYTES, first and last included (a log of many
gigabytes is not read twice). Two logs sorted alike (by prompt length, say) that share their first
and last rows still differ in the middle runs, unless they differ only within less than a sample's
spacing (a fifteenth of the file): a log edited in one place, which no one gives beside the
original. A file that holds no request (an empty Parquet part
of a dataset, a CSV of its header alone: an hour with no traffic) has none: such files are often
byte for byte alike, and count nothing either way.
"""

from __future__ import annotations

import hashlib
import io
import os

WHOLE_BYTES = 16 << 20
SAMPLES = 16
SAMPLE_BYTES = 1 << 16


def log_fingerprint(path: str | os.PathLike, fmt: str) -> str | None:
    """The log file's content fingerprint, 64 hex digits; None where it holds no row (module
    docstring). fmt: its format (planner.workload.readers: parquet, csv or jsonl)."""
    if fmt == "parquet" and _parquet_rows(path) == 0:
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        digest.update(size.to_bytes(8, "little"))
        if size <= WHOLE_BYTES:
            data = f.read()
            if fmt != "parquet" and _text_rows_at_most(data, 1 if fmt == "csv" else 0):
                return None
            digest.update(data)
        else:
            for k in range(SAMPLES):
                f.seek((size - SAMPLE_BYTES) * k // (SAMPLES - 1))
                digest.update(f.read(SAMPLE_BYTES))
    return digest.hexdigest()


def _parquet_rows(path: str | os.PathLike) -> int | None:
    """Rows the Parquet file's footer states; None where it cannot be read (reading the log says why)."""
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path).metadata.num_rows
    except (OSError, ValueError):  # (pyarrow's ArrowInvalid is a ValueError) the log's reader reports it
        return None


def _text_rows_at_most(data: bytes, header_lines: int) -> bool:
    """Whether a text log's bytes hold no more non-blank lines than its header: read until one more
    is found, not split whole (a log of 16 MiB has hundreds of thousands of lines)."""
    lines = 0
    for line in io.BytesIO(data):
        if line.strip():
            lines += 1
            if lines > header_lines:
                return False
    return True
