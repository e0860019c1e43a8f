"""Published small-message all-reduce latencies (data/measured/allreduce_small_published.csv): one
row per cited figure, and the range of one call's time each interconnect family's rows give, which
the fitted all-reduce latency is kept within (joint_fit.small_latency_bounds) and checked against
(bench/calibration.py)."""

from __future__ import annotations

import csv
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from planner.calibration.measured import measured_dir

SMALL_FILE = "allreduce_small_published.csv"
# Decode-sized messages: one token's hidden state per sequence of a decode batch (an 8192-wide
# bf16 row is 16 KiB, 16 such rows 256 KiB); above this the bytes, not the call, set the time.
SMALL_MESSAGE_MAX_BYTES = 256 * 2**10
CUDA_GRAPHS = ("y", "n", "unknown")
COLUMNS = (
    "family", "gpu", "n_gpus", "min_bytes", "max_bytes", "time_us", "kernel", "library", "nccl_version",
    "cuda_graphs", "source_url", "source_ref", "licence", "note",
)  # fmt: skip
REQUIRED = ("family", "gpu", "n_gpus", "min_bytes", "max_bytes", "time_us", "kernel", "library", "cuda_graphs",
            "source_url", "source_ref", "licence")  # fmt: skip


@dataclass(frozen=True)
class SmallAllreduceRow:
    """One cited figure: the time of one all-reduce of `min_bytes`-`max_bytes` over `n_gpus` GPUs;
    `line` is its 1-based data row number."""

    line: int
    family: str
    gpu: str
    n_gpus: int
    min_bytes: int
    max_bytes: int
    time_us: float
    kernel: str
    library: str
    nccl_version: str
    cuda_graphs: str
    source_url: str
    source_ref: str
    licence: str
    note: str


def _parse(path: Path, line: int, raw: Mapping[str, str | None], families: Collection[str] | None) -> SmallAllreduceRow:
    where = f"{path.name} data row {line}"
    missing = [c for c in REQUIRED if not (raw.get(c) or "").strip()]
    if missing:
        raise ValueError(f"{where}: empty or missing {', '.join(missing)}")
    text = {k: (raw.get(k) or "").strip() for k in COLUMNS}
    if families is not None and text["family"] not in families:
        raise ValueError(f"{where}: family '{text['family']}' is not one of {', '.join(families)}")
    if text["cuda_graphs"] not in CUDA_GRAPHS:
        raise ValueError(f"{where}: cuda_graphs '{text['cuda_graphs']}' is not one of {', '.join(CUDA_GRAPHS)}")
    try:
        ints = {k: int(text[k]) for k in ("n_gpus", "min_bytes", "max_bytes")}
        time_us = float(text["time_us"])
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if ints["n_gpus"] < 2:
        raise ValueError(f"{where}: n_gpus must be 2 or more (an all-reduce over one GPU is no call), got {ints['n_gpus']}")
    if not 1 <= ints["min_bytes"] <= ints["max_bytes"] <= SMALL_MESSAGE_MAX_BYTES:
        raise ValueError(f"{where}: min_bytes {ints['min_bytes']} and max_bytes {ints['max_bytes']} must satisfy "
                         f"1 <= min_bytes <= max_bytes <= {SMALL_MESSAGE_MAX_BYTES} (decode-sized messages)")
    if not (math.isfinite(time_us) and time_us > 0):
        raise ValueError(f"{where}: time_us must be a positive number, got '{text['time_us']}'")
    for k in (*ints, "time_us"):
        text.pop(k)
    return SmallAllreduceRow(line=line, time_us=time_us, **ints, **text)


def load_small_rows(path: Path | None = None, families: Collection[str] | None = None) -> list[SmallAllreduceRow]:
    """Rows of the small-message file; ValueError naming the file and row for a malformed one (and,
    with `families`, for a family not among them)."""
    path = path or measured_dir() / SMALL_FILE
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        absent = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if absent:
            raise ValueError(f"{path.name}: missing columns {', '.join(absent)}")
        return [_parse(path, i, r, families) for i, r in enumerate(reader, start=1)]


@dataclass(frozen=True)
class CitedRange:
    """(low, high) of one call's published time for an interconnect family: the least and greatest
    `time_us` of its rows (and of the rows it borrows), with those rows."""

    family: str
    low_us: float
    high_us: float
    rows: tuple[SmallAllreduceRow, ...]
    borrowed_from: str | None = None

    @property
    def citation(self) -> str:
        """Where the ends of the range come from, and every source counted."""

        def end(r: SmallAllreduceRow) -> str:
            size = f"{r.min_bytes} B" if r.min_bytes == r.max_bytes else f"{r.min_bytes}-{r.max_bytes} B"
            return f"{r.time_us:g} us: {r.gpu} x{r.n_gpus}, {size}, {r.kernel} ({r.source_url})"

        lo = min(self.rows, key=lambda r: (r.time_us, r.line))
        hi = max(self.rows, key=lambda r: (r.time_us, -r.line))
        sources = sorted({r.source_url for r in self.rows})
        borrowed = f"; with {self.borrowed_from}'s rows" if self.borrowed_from else ""
        return (f"low {end(lo)}; high {end(hi)}; {len(self.rows)} rows of data/measured/{SMALL_FILE} from "
                f"{len(sources)} sources{borrowed}")


def cited_ranges(
    rows: Sequence[SmallAllreduceRow], families: Sequence[str], borrows: Mapping[str, str] | None = None
) -> dict[str, CitedRange | None]:
    """Family -> the CitedRange of its rows, widened by the rows of the family it borrows from
    (`borrows`: family -> lender); None for a family without any."""
    borrows = borrows or {}
    out: dict[str, CitedRange | None] = {}
    for f in families:
        lender = borrows.get(f)
        mine = [r for r in rows if r.family == f or (lender is not None and r.family == lender)]
        if not mine:
            out[f] = None
            continue
        times = [r.time_us for r in mine]
        out[f] = CitedRange(f, min(times), max(times), tuple(mine), lender if any(r.family == lender for r in mine) else None)
    return out
