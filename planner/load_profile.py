"""The day's load curve: how a traffic source's load moves hour by hour.

A profile is a sequence of hourly multipliers, 24 (a day) or 168 (a week, Monday 00:00
first), scaled so that the busiest hour is 1. The traffic source describes the busiest
hour: its planning peak (what the plan is sized for) and its mean rate are that hour's,
and hour h carries `multiplier[h]` times both. A profile measured from a log that spans a
day or more is the log's own mean arrival rate per hour of day (or of week).

Hours are those of the log's clock (datetimes without a zone are read as UTC; relative
times count from the trace's start). Costs do not depend on where the day starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.errors import InputError
from planner.histogram import Histogram
from planner.scenario import LoadProfileSpec
from planner.workload.peaks import SECONDS_PER_MINUTE, per_minute_counts, whole_minutes

HOURS_PER_DAY = 24
HOURS_PER_WEEK = 168
MINUTES_PER_HOUR = 60
_EPOCH_WEEKDAY = 3  # 1970-01-01 was a Thursday: Monday = 0


@dataclass(frozen=True)
class DailyProfile:
    """Hourly multipliers of the busiest hour's load (max 1), and where they come from."""

    multipliers: tuple[float, ...]
    source: str  # for the report
    busiest_hour_rps: float | None = None  # measured: the busiest hour's mean arrival rate, requests/s

    def __post_init__(self) -> None:
        if len(self.multipliers) not in (HOURS_PER_DAY, HOURS_PER_WEEK):
            raise ValueError("a profile has 24 or 168 hours")
        if not math.isclose(max(self.multipliers), 1.0, rel_tol=1e-12) or min(self.multipliers) < 0:
            raise ValueError("multipliers lie in [0, 1] with the busiest hour at 1")

    @property
    def hours(self) -> int:
        return len(self.multipliers)

    @property
    def days(self) -> int:
        return self.hours // HOURS_PER_DAY

    @property
    def mean_multiplier(self) -> float:
        """The period's mean load over its busiest hour's."""
        return float(np.mean(self.multipliers))

    @property
    def peak_to_trough(self) -> float:
        low = min(self.multipliers)
        return math.inf if low == 0 else 1.0 / low

    @property
    def is_flat(self) -> bool:
        return min(self.multipliers) == 1.0


FLAT = DailyProfile((1.0,) * HOURS_PER_DAY, "flat, as no day is stated and the log spans none (every hour carries "
                                             "the source's load)")


def diurnal_multipliers(peak_to_trough: float, peak_hour: int) -> tuple[float, ...]:
    """A cosine day: m(h) = t + (1 − t)(1 + cos(2π(h − peak_hour)/24))/2, t = 1/peak_to_trough.

    Exactly 1 at the peak hour and t twelve hours later, so the stated ratio holds exactly.
    """
    trough = 1.0 / peak_to_trough
    return tuple(
        trough + (1.0 - trough) * (1.0 + math.cos(2 * math.pi * (h - peak_hour) / HOURS_PER_DAY)) / 2
        for h in range(HOURS_PER_DAY)
    )


def _scaled(values) -> tuple[float, ...]:
    top = max(values)
    return tuple(float(v) / top for v in values)


def stated_profile(spec: LoadProfileSpec) -> DailyProfile:
    """A profile the scenario states: 24 or 168 multipliers, or a named shape."""
    if spec.hourly is not None:
        period = "day" if len(spec.hourly) == HOURS_PER_DAY else "week"
        return DailyProfile(_scaled(spec.hourly), f"stated: {len(spec.hourly)} hourly multipliers (a {period})")
    if spec.shape == "diurnal":
        return DailyProfile(
            diurnal_multipliers(spec.peak_to_trough, spec.peak_hour),
            f"stated: diurnal (cosine) day, peak {spec.peak_to_trough:g}× the trough, busiest at {spec.peak_hour:02d}:00",
        )
    return DailyProfile(FLAT.multipliers, "stated: flat (every hour carries the source's load)")


def measured_profile(hist: Histogram, *, by_weekday: bool = False) -> DailyProfile:
    """Mean arrival rate per hour of day (or of week) over the log's whole minutes.

    Each minute counts once for its hour of day; an hour's rate is its arrivals over the
    minutes observed in it, so a log of a day and a half weighs every hour alike.
    """
    counts = per_minute_counts(hist)
    first = int(hist.minute[0]) + (1 if counts.size >= 4 else 0) if hist.minute.size else 0
    counts = whole_minutes(counts)
    period = HOURS_PER_WEEK if by_weekday else HOURS_PER_DAY
    needed = period * MINUTES_PER_HOUR
    if counts.size < needed:
        span = "a week" if by_weekday else "a day"
        have = f"{counts.size / MINUTES_PER_HOUR:,.1f} hours" if counts.size else "no timestamps"
        raise InputError(f"a measured profile needs a log spanning {span} or more ({have} of whole minutes)")
    minutes = first + np.arange(counts.size, dtype=np.int64)
    hour = minutes // MINUTES_PER_HOUR
    slot = hour % HOURS_PER_DAY
    if by_weekday:
        weekday = (hour // HOURS_PER_DAY + _EPOCH_WEEKDAY) % 7
        slot = weekday * HOURS_PER_DAY + slot
    arrivals = np.bincount(slot, weights=counts, minlength=period)
    observed = np.bincount(slot, minlength=period)
    rates = arrivals / observed / SECONDS_PER_MINUTE
    if rates.max() <= 0:
        raise InputError("a measured profile needs arrivals; the log's minutes hold none")
    days = counts.size / (HOURS_PER_DAY * MINUTES_PER_HOUR)
    what = "hour of the week" if by_weekday else "hour of day"
    return DailyProfile(_scaled(rates), f"measured: mean arrivals per {what} over {days:,.1f} days of the log",
                        busiest_hour_rps=float(rates.max()))


def traffic_profile(spec: LoadProfileSpec | None, hist: Histogram) -> DailyProfile:
    """The traffic's profile: as stated, measured, or — when the scenario states none —
    measured if the log spans a day, else flat."""
    if spec is not None:
        return measured_profile(hist, by_weekday=spec.by_weekday) if spec.measured else stated_profile(spec)
    if whole_minutes(per_minute_counts(hist)).size >= HOURS_PER_DAY * MINUTES_PER_HOUR:
        return measured_profile(hist)
    return FLAT


def busiest_hour_mean_rps(profile: DailyProfile, source_mean_rps: float | None) -> float | None:
    """The busiest hour's mean arrival rate (requests/s, before growth). A measured profile knows its
    busiest hour; otherwise the source's mean rate is the busiest hour's (flat: every hour's)."""
    return profile.busiest_hour_rps if profile.busiest_hour_rps is not None else source_mean_rps
