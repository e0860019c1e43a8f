"""A log file's content fingerprint, so that the same requests are not counted twice when they
come in by two routes: a copy of a log beside the log, or a histogram built from a log and given
again with that log (`planner histogram last_quarter.parquet jan.csv ...` where last_quarter was
built from jan.csv). Paths and inodes (planner.workload.ingest) catch a log given twice by two
names of one file; a copy or a histogram is another file.

The fingerprint is SHA-256 over the file's size and its first and last FINGERPRINT_BYTES: two
different logs agree in neither their first rows nor their last, and a log of many gigabytes
is fingerprinted without reading it twice (a file no longer than 2 × FINGERPRINT_BYTES is read
whole).
"""

from __future__ import annotations

import hashlib
import os

FINGERPRINT_BYTES = 1 << 16


def file_fingerprint(path: str | os.PathLike) -> str:
    """The file's content fingerprint: 64 hex digits (module docstring)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        digest.update(size.to_bytes(8, "little"))
        digest.update(f.read(FINGERPRINT_BYTES))
        if size > 2 * FINGERPRINT_BYTES:
            f.seek(size - FINGERPRINT_BYTES)
        digest.update(f.read(FINGERPRINT_BYTES))
    return digest.hexdigest()
