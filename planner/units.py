"""Unit constants and the only place bytes, GiB and GB are converted.

Bytes are integers throughout the package. GiB = 2**30 bytes (what runtimes and
`nvidia-smi` report), GB = 10**9 bytes (what datasheets and seed 003 print).
"""

from __future__ import annotations

KiB = 1024
MiB = 1024**2
GiB = 1024**3
GB = 10**9
TB = 10**12
TERA = 10**12
SECONDS_PER_HOUR = 3600
HOURS_PER_MONTH = 730  # 8,760 hours a year / 12, the convention of cloud price sheets


def bytes_to_gib(n_bytes: float) -> float:
    return n_bytes / GiB


def gib_to_bytes(gib: float) -> int:
    return round(gib * GiB)


def bytes_to_gb(n_bytes: float) -> float:
    return n_bytes / GB
