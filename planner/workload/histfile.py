"""The histogram file on disk: read it (from planner, Spark, Dask or SQL) and write it atomically.

The schema (columns, kinds of row, bin edges) is planner.histogram's: see its
HISTOGRAM_FILE_COLUMNS and the comment above it, and README.md, "Histograms at scale".
"""

from __future__ import annotations

import os
from pathlib import Path

from planner.files import atomic_output
from planner.histogram import Histogram, read_histogram_file_metadata


def read_histogram(path: str | os.PathLike) -> Histogram:
    """The Histogram in a histogram file (a Parquet file, or a folder of part files).

    Raises planner.errors.InputError naming the file when it is not one.
    """
    return Histogram.read_parquet(path)


def read_metadata(path: str | os.PathLike) -> dict:
    """The JSON metadata planner wrote into the file (sources, excluded rows, time unit); {} if none."""
    target = Path(path)
    files = (
        sorted(f for f in target.rglob("*.parquet") if not f.name.startswith((".", "_")))
        if target.is_dir()
        else [target]
    )
    try:
        return read_histogram_file_metadata(files[0]) if files else {}
    except ValueError:  # metadata written by another producer, not JSON: none of ours
        return {}


def write_histogram(hist: Histogram, path: str | os.PathLike, metadata: dict | None = None) -> None:
    """Write `hist` as a histogram file, all or nothing (temporary file, then rename)."""
    with atomic_output(path) as tmp:
        hist.write_parquet(tmp, metadata)
