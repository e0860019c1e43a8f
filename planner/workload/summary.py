"""The workload summary `planner histogram` prints: counts, length percentiles, long-context
shares and arrival rates, from a Histogram alone (so a merged histogram file summarises
exactly like the logs it came from).

Lengths: means are exact (per-cell sums); p50/p90/p99 follow `Histogram.quantiles`
(within one fine bin, 1.1%, of numpy's on the raw rows); max is exact when the top group
holds one distinct length, otherwise an upper bound within its fine bin (the text shows it
as "≤ N"; the JSON's `max` is the same number). Shares above 8k/32k/128k
total tokens are exact (those are TOTAL_EDGES). Rates are per wall-clock minute
(peaks.py): the mean over the minutes spanned, the p99 minute and the busiest minute.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from planner.histogram import Histogram
from planner.units import tokens_text
from planner.workload.peaks import (
    clock_step_minutes,
    clock_step_text,
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
    max: int  # the longest length, or an upper bound on it within its fine bin (max_exact)
    max_exact: bool = Field(default=True, exclude=True)  # (the text's "≤"; not a key of the JSON)
    # p50/p90/p99 before the JSON's rounding to a tenth, which the text rounds once (units.tokens_text), as
    # a report rounds the same percentiles: rounded twice, 600.46 would print 601 here and 600 there
    unrounded: dict[str, float] = Field(default_factory=dict, exclude=True)


class RateStats(BaseModel):
    """Requests/s over the whole minutes of the log (its first and last are partial); None
    without arrival times or with too few whole minutes (planner.workload.peaks)."""

    model_config = ConfigDict(frozen=True)

    minutes: int  # minutes of the clock the arrivals touch, partial ones included; 0 without times
    mean: float | None
    p99_minute: float | None
    max_minute: float | None
    # the lattice every arrival falls on, where it is a quarter hour or more (peaks.clock_step_minutes): a
    # rounded clock's per-minute rates read up to that many times too high
    clock_step_minutes: int = 1


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
        unrounded={name: float(v) for name, v in zip(QUANTILES, values, strict=True)},
        max=largest,
        max_exact=hist.max_is_exact(of),
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
            clock_step_minutes=clock_step_minutes(hist),
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
        *_length_table(summary),
    ]
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
        if r.clock_step_minutes > 1:
            lines.append(f"note: {clock_step_text(r.clock_step_minutes)}")
    return "\n".join(lines)


# The narrowest each column of the length table is (its header and values right-aligned in it, the
# names left-aligned), as wide as typical lengths need; a column widens for longer values, and always
# keeps two spaces before them.
_MIN_WIDTHS = (8, 12, 10, 10, 10, 10)
_GAP = 2


def _length_table(summary: WorkloadSummary) -> list[str]:
    """The lengths table: mean, p50, p90, p99 and max of prompt, output and total tokens ("≤ N" where
    max is an upper bound, the top of the longest request's fine bin)."""
    rows = [("tokens", "mean", "p50", "p90", "p99", "max")]
    for name, stats in (("prompt", summary.prompt_tokens), ("output", summary.output_tokens),
                        ("total", summary.total_tokens)):
        rows.append((name, f"{stats.mean:,.1f}",
                     *(tokens_text(stats.unrounded.get(q, getattr(stats, q))) for q in QUANTILES),
                     f"{'' if stats.max_exact else '≤ '}{stats.max:,}"))
    widths = [max(least, *(len(row[i]) + (_GAP if i else 0) for row in rows)) for i, least in enumerate(_MIN_WIDTHS)]
    return [f"{row[0]:<{widths[0]}}" + "".join(f"{v:>{w}}" for v, w in zip(row[1:], widths[1:], strict=True))
            for row in rows]
