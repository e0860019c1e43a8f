"""Published nccl-tests all-reduce measurements (data/measured/nccl_allreduce_published.csv) and
the all-reduce latencies they give per interconnect family and GPU count: the range the fitted
latencies of roofline.allreduce_call_s are checked against (bench/calibration.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.calibration.measured import _read_rows, measured_dir

NCCL_FILE = "nccl_allreduce_published.csv"
# The large-message protocol's region of a published curve: from 1 MiB (below it NCCL's tuner
# picks its low-latency protocols) to the first size whose bus bandwidth reaches PLATEAU_SHARE of
# the table's largest; beyond it time is bytes / bandwidth and says nothing of the fixed cost.
BULK_MIN_BYTES = 2**20
PLATEAU_SHARE = 0.9
# A range is the intercept +- RANGE_SE standard errors: the curves bend (bus bandwidth still
# climbs through the region), and the spread of the residuals is how well a table pins its
# intercept.
RANGE_SE = 2.0
# The small-message region: messages up to 16 KiB, whose bytes take under 1% of a call's time on
# NVLink (16 KiB at 100 GB/s: 0.16 us of 15), so the time is the latency; on curves run with the
# algorithm NCCL's tuner picks there (its default, or ring, with the LL protocol the tuner takes
# for small messages): a curve forced to NVLS at every size, or whose algorithm is not known,
# does not measure it.
SMALL_MAX_BYTES = 16 * 2**10
SMALL_ALGORITHMS = ("Ring", "NCCL default")


@dataclass(frozen=True)
class NcclRow:
    """One row of nccl_allreduce_published.csv; `line` is its 1-based data row number."""

    line: int
    gpu: str
    n_gpus: int
    interconnect_family: str
    message_bytes: int
    busbw_gb_s: float
    time_us: float
    algorithm: str
    nccl_version: str
    cuda_graphs: str
    source_url: str
    source_ref: str

    @property
    def table(self) -> tuple[str, int, str]:
        """(GPU, GPU count, source): the rows of one published curve."""
        return self.gpu, self.n_gpus, self.source_url


def load_nccl_rows(path: Path | None = None) -> list[NcclRow]:
    return _read_rows(NcclRow, path or measured_dir() / NCCL_FILE, {})


def bus_bytes(message_bytes: float | np.ndarray, n_gpus: int) -> float | np.ndarray:
    """The bytes an all-reduce of `message_bytes` over `n_gpus` moves through each GPU's link
    (reduce-scatter + all-gather): 2(n - 1)/n x size, the factor nccl-tests' bus bandwidth applies
    (nccl-tests doc/PERFORMANCE.md, "AllReduce")."""
    return 2.0 * (n_gpus - 1) / n_gpus * np.asarray(message_bytes, float)


@dataclass(frozen=True)
class AlphaBeta:
    """time = alpha + bus_bytes / busbw fitted on one curve's sizes from first_bytes to last_bytes."""

    alpha_us: float
    alpha_se_us: float  # standard error of the intercept (nan with two points)
    busbw_gb_s: float
    n_points: int
    first_bytes: int
    last_bytes: int
    shortest_us: float  # the quickest call fitted: no fixed cost exceeds it


def alpha_beta_fit(message_bytes: Sequence[float], time_us: Sequence[float], n_gpus: int) -> AlphaBeta:
    """The alpha-beta (Hockney) model of one collective, time = alpha + bus_bytes / busbw, by least
    squares on the measured times relative to each time (Hockney, "The communication challenge for
    MPP", Parallel Computing 20, 1994; bus bytes as nccl-tests counts them: bus_bytes). alpha is the
    fixed cost of a call, the quantity roofline.allreduce_call_s's latency terms stand for.

    Relative, not absolute, residuals: the times of a curve span two or three decades, and plain
    least squares lets the largest messages (and the bend of the bandwidth curve towards its
    plateau) set the intercept, which then exceeded the whole 1 MiB call on four of the five
    shipped curves. Its standard error is the weighted least-squares one, sqrt(s^2 (X'WX)^-1)[0, 0]
    with W = diag(1/t^2) and s^2 the weighted residual variance."""
    size = np.asarray(message_bytes, float)
    t = np.asarray(time_us, float)
    if len(size) < 2 or len(set(size)) < 2:
        raise ValueError(f"an alpha-beta fit needs two message sizes or more, got {sorted({int(s) for s in size})}")
    x = np.column_stack([np.ones_like(size), bus_bytes(size, n_gpus)])
    coef, *_ = np.linalg.lstsq(x / t[:, None], np.ones_like(t), rcond=None)
    dof = len(t) - 2
    se = float("nan")
    if dof > 0:
        resid = (t - x @ coef) / t
        w = 1.0 / t**2
        se = float(np.sqrt(np.linalg.inv(x.T @ (x * w[:, None]))[0, 0] * (resid @ resid) / dof))
    return AlphaBeta(float(coef[0]), se, float(1e-3 / coef[1]), len(t), int(size.min()), int(size.max()),
                     float(t.min()))


def bulk_region(rows: Sequence[NcclRow]) -> list[NcclRow]:
    """The rows of one curve that the large-message term describes: sizes from BULK_MIN_BYTES up
    to and including the first whose bus bandwidth reaches PLATEAU_SHARE of the curve's largest."""
    rows = sorted(rows, key=lambda r: r.message_bytes)
    peak = max(r.busbw_gb_s for r in rows)
    out = []
    for r in rows:
        if r.message_bytes < BULK_MIN_BYTES:
            continue
        out.append(r)
        if r.busbw_gb_s >= PLATEAU_SHARE * peak:
            break
    return out


@dataclass(frozen=True)
class TableFit:
    """One published curve's alpha-beta fit, with what it was measured on."""

    gpu: str
    n_gpus: int
    family: str
    algorithm: str
    nccl_version: str
    source_url: str
    fit: AlphaBeta


@dataclass(frozen=True)
class PublishedRange:
    """The range of an all-reduce latency the published curves of one family and GPU count give."""

    family: str
    n_gpus: int
    low_us: float
    high_us: float
    tables: tuple[TableFit, ...]

    def contains(self, us: float) -> bool:
        return self.low_us <= us <= self.high_us

    @property
    def citation(self) -> str:
        return "; ".join(
            f"{t.gpu} x{t.n_gpus} {t.algorithm} NCCL {t.nccl_version}: alpha {t.fit.alpha_us:.1f} +- {t.fit.alpha_se_us:.1f} us, "
            f"busbw {t.fit.busbw_gb_s:.0f} GB/s on {t.fit.first_bytes / 2**20:g}-{t.fit.last_bytes / 2**20:g} MiB "
            f"({t.fit.n_points} sizes; {t.source_url})"
            for t in self.tables
        )


def _tables(rows: Sequence[NcclRow]) -> dict[tuple[str, int, str], list[NcclRow]]:
    out: dict[tuple[str, int, str], list[NcclRow]] = {}
    for r in rows:
        out.setdefault(r.table, []).append(r)
    return out


def published_bulk_ranges(rows: Sequence[NcclRow]) -> dict[tuple[str, int], PublishedRange]:
    """(family, GPU count) -> the large-message all-reduce latency its published curves give: each
    curve's alpha_beta_fit on its bulk_region, the range alpha +- RANGE_SE standard errors within
    [0, the curve's quickest call there], widened over every curve of that family and count."""
    fits: dict[tuple[str, int], list[TableFit]] = {}
    for (gpu, n, url), table in sorted(_tables(rows).items()):
        region = bulk_region(table)
        if len(region) < 3:  # two points fit exactly: no error to give a range
            continue
        ab = alpha_beta_fit([r.message_bytes for r in region], [r.time_us for r in region], n)
        first = region[0]
        fits.setdefault((first.interconnect_family, n), []).append(
            TableFit(gpu, n, first.interconnect_family, first.algorithm, first.nccl_version, url, ab)
        )
    ranges = {}
    for (family, n), tables in sorted(fits.items()):
        # A fixed cost lies between 0 and the quickest call its curve measured.
        low = min(max(t.fit.alpha_us - RANGE_SE * t.fit.alpha_se_us, 0.0) for t in tables)
        high = max(min(t.fit.alpha_us + RANGE_SE * t.fit.alpha_se_us, t.fit.shortest_us) for t in tables)
        ranges[(family, n)] = PublishedRange(family, n, low, high, tuple(tables))
    return ranges


@dataclass(frozen=True)
class SmallRange:
    """Measured time of one all-reduce of a decode-sized message, per family and GPU count."""

    family: str
    n_gpus: int
    low_us: float
    high_us: float
    citation: str

    def contains(self, us: float) -> bool:
        return self.low_us <= us <= self.high_us


def published_small_ranges(rows: Sequence[NcclRow]) -> dict[tuple[str, int], SmallRange]:
    """(family, GPU count) -> the lowest and highest time of a message up to SMALL_MAX_BYTES on the
    curves run with an algorithm of SMALL_ALGORITHMS (NCCL's own choice there): what one NCCL call
    of the small-message protocol costs, without the engines' custom all-reduce kernels."""
    out: dict[tuple[str, int], list[NcclRow]] = {}
    for r in rows:
        if r.message_bytes <= SMALL_MAX_BYTES and r.algorithm in SMALL_ALGORITHMS:
            out.setdefault((r.interconnect_family, r.n_gpus), []).append(r)
    ranges = {}
    for (family, n), mine in sorted(out.items()):
        sources = sorted({f"{r.gpu} x{r.n_gpus} {r.algorithm} NCCL {r.nccl_version}, {r.source_url}" for r in mine})
        sizes = sorted({r.message_bytes for r in mine})
        ranges[(family, n)] = SmallRange(
            family, n, min(r.time_us for r in mine), max(r.time_us for r in mine),
            f"nccl-tests all_reduce_perf, {sizes[0]:g} B-{sizes[-1] / 2**10:g} KiB, no CUDA graphs: " + "; ".join(sources),
        )  # fmt: skip
    return ranges
