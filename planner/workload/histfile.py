"""The histogram file on disk: read it (from planner, Spark, Dask or SQL) and write it atomically.

The schema (columns, kinds of row, bin edges) is planner.histogram's: see its
HISTOGRAM_FILE_COLUMNS and the comment above it, and README.md, "Histograms at scale".
"""

from __future__ import annotations

import os

from planner.files import atomic_output
from planner.histogram import Histogram, read_histogram_file_and_metadata


def read_histogram(path: str | os.PathLike) -> Histogram:
    """The Histogram in a histogram file (a Parquet file, or a folder of part files).

    Raises planner.errors.InputError naming the file when it is not one.
    """
    return Histogram.read_parquet(path)


def read_histogram_and_metadata(path: str | os.PathLike) -> tuple[Histogram, dict]:
    """`read_histogram`, and the JSON metadata planner wrote into the file (sources,
    excluded rows, time unit; {} if none), from one reading."""
    return read_histogram_file_and_metadata(path)


def write_histogram(hist: Histogram, path: str | os.PathLike, metadata: dict | None = None) -> None:
    """Write `hist` as a histogram file, all or nothing (temporary file, then rename)."""
    with atomic_output(path) as tmp:
        hist.write_parquet(tmp, metadata)
