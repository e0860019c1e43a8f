"""The workload summary `planner histogram` prints: counts, length percentiles, long-context
shares and arrival rates, from a Histogram alone (so a merged histogram file summarises
exactly like the logs it came from).

Lengths: means are exact (per-cell sums); p50/p90/p99 follow `Histogram.quantiles`
(within one fine bin, 1.1%, of numpy's on the raw rows); max is exact when the top group
holds one distinct length, otherwise an upper bound within its fine bin. Shares above 8k/32k/128k
total tokens are exact (those are TOTAL_EDGES). Rates are per wall-clock minute
(peaks.py): the mean over the minutes spanned, the p99 minute and the busiest minute.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from planner.histogram import Histogram
from planner.workload.peaks import (
    mean_rate_rps,
    minute_rate_quantile_rps,
    per_minute_counts,
    whole_minutes,
)
from planner.workload.rows import EXCLUSION_REASONS

SHARE_THRESHOLDS_TOKENS = (8_192, 32_768, 131_072)
QUANTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99}


class LengthStats(BaseModel):
    model_config = ConfigDict(frozen=True)

    mean: float
    p50: float
    p90: float
    p99: float
    max: int


class RateStats(BaseModel):
    """Requests/s over the whole minutes of the log (its first and last are partial); None
    without arrival times or with too few whole minutes (planner.workload.peaks)."""

    model_config = ConfigDict(frozen=True)

    minutes: int  # minutes of the clock the arrivals touch, partial ones included; 0 without times
    mean: float | None
    p99_minute: float | None
    max_minute: float | None


class WorkloadSummary(BaseModel):
    """The `--json` of `planner histogram`; key names are part of the CLI contract."""

    model_config = ConfigDict(frozen=True)

    requests: int
    excluded_rows: dict[str, int]
    prompt_tokens: LengthStats
    output_tokens: LengthStats
    total_tokens: LengthStats
    share_above: dict[str, float]
    rate_rps: RateStats
    time_unit_assumed: str | None


def _length_stats(hist: Histogram, of: str) -> LengthStats:
    values, largest = hist.quantiles_and_max(of, list(QUANTILES.values()))
    return LengthStats(
        mean=round(hist.mean_tokens(of), 3),
        **{name: round(float(v), 1) for name, v in zip(QUANTILES, values, strict=True)},
        max=largest,
    )


def summarize(
    hist: Histogram,
    excluded_rows: dict[str, int] | None = None,
    time_unit_assumed: str | None = None,
) -> WorkloadSummary:
    """Summary of a non-empty histogram."""
    counts = per_minute_counts(hist)  # once: it spans every minute of the log
    has_times = counts.size > 0
    whole = whole_minutes(counts)

    def rate(value: float | None) -> float | None:
        return round(value, 4) if value is not None else None

    return WorkloadSummary(
        requests=hist.requests,
        excluded_rows={r: int((excluded_rows or {}).get(r, 0)) for r in EXCLUSION_REASONS},
        prompt_tokens=_length_stats(hist, "prompt"),
        output_tokens=_length_stats(hist, "output"),
        total_tokens=_length_stats(hist, "total"),
        share_above={str(t): round(hist.share_above(t), 6) for t in SHARE_THRESHOLDS_TOKENS},
        rate_rps=RateStats(
            minutes=int(counts.size),
            mean=rate(mean_rate_rps(counts)),
            p99_minute=rate(minute_rate_quantile_rps(counts, 0.99)),
            max_minute=rate(float(whole.max()) / 60 if whole.size else None),
        ),
        time_unit_assumed=time_unit_assumed if has_times else None,
    )


def format_summary(summary: WorkloadSummary) -> str:
    """The human-readable summary (a few aligned lines, every figure with its unit)."""
    excluded = summary.excluded_rows
    dropped = sum(excluded.values())
    lines = [
        f"requests: {summary.requests:,}"
        + (
            f"  (excluded rows: {', '.join(f'{r} {n:,}' for r, n in excluded.items())})"
            if dropped
            else "  (no rows excluded)"
        ),
        f"{'tokens':<8}{'mean':>12}{'p50':>10}{'p90':>10}{'p99':>10}{'max':>10}",
    ]
    for name, stats in (
        ("prompt", summary.prompt_tokens),
        ("output", summary.output_tokens),
        ("total", summary.total_tokens),
    ):
        lines.append(
            f"{name:<8}{stats.mean:>12,.1f}{stats.p50:>10,.0f}{stats.p90:>10,.0f}{stats.p99:>10,.0f}{stats.max:>10,}"
        )
    shares = ", ".join(f"> {int(t):,}: {100 * s:.2f}%" for t, s in summary.share_above.items())
    lines.append(f"share of requests by total tokens: {shares}")
    r = summary.rate_rps
    if not r.minutes:
        lines.append("arrival rate: no timestamps")
    elif r.mean is None:
        lines.append(f"arrival rate: the arrivals touch {r.minutes} minute(s) of the clock, too few whole minutes "
                     "to measure a rate")
    else:
        # histogram parts written by Spark, Dask or SQL hold minutes, not how times were read
        unit = summary.time_unit_assumed
        lines.append(
            f"arrival rate (req/s): mean {r.mean:.3f}, p99 minute {r.p99_minute:.3f}, max minute {r.max_minute:.3f}"
            + (f"  (timestamps read as {unit})" if unit else "  (per-minute counts of histogram files)")
        )
    return "\n".join(lines)
