"""A long silence in a log whose span sets the day's mean rate, and the warning it gets.

The day's volume (what cost per million tokens "at the day's volume" divides by) is a mean
rate over the log's whole minutes: the measured day's busiest hour (planner.load_profile), or,
under a stated or flat profile, the source's mean rate (planner.workload.peaks.mean_rate_rps).
Either way, hours without a request count as idle hours. A run of SILENCE_WARNING_HOURS or
more is a gap in the logging, a stray row far from the rest, or a service that idles for
hours, which only its owner can tell apart; so it is not dropped, but named (where it lies,
and the mean rate with and without it), with what would change the number: the log without
the gap, or a stated mean rate. A measured week is left alone (its weekend may idle).

The peak of method 'quantile' (planner.workload.peaks.minute_rate_quantile_rps) counts those
minutes too: each silent minute pushes the quantile down the busy minutes' rates (a 0.99 quantile
over a log half silent is its busy minutes' 0.98), so a gap in the logging sizes the fleet for
less than the service's peak. The warning gives the peak with and without the silence as well.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.histogram import Histogram
from planner.load_profile import HOURS_PER_DAY, MINUTES_PER_HOUR
from planner.workload.peaks import SECONDS_PER_MINUTE, minute_text, per_minute_counts, whole_minutes

# In a log of 1,499 rows over five minutes, one more row a day and a half later took the cost per
# million tokens at the day's volume from about $0.05 to $29.77: six idle hours in a row already
# take a quarter off a day's volume.
SILENCE_WARNING_HOURS = 6


@dataclass(frozen=True)
class Silence:
    """The longest run of whole minutes without a request, and the log's mean rate with and without it."""

    start_minute: int  # the first silent minute (minutes since the epoch, or the trace's start)
    end_minute: int  # the minute the next request arrives in (or the log's last, partial, minute)
    log_minutes: int  # the log's whole minutes
    mean_rps: float  # over the log's whole minutes
    mean_without_rps: float  # over them, the silent ones left out
    peak_rps: float | None = None  # with a peak quantile: that quantile of the whole minutes' rates
    peak_without_rps: float | None = None  # the same quantile, the silent minutes left out

    @property
    def hours(self) -> float:
        return (self.end_minute - self.start_minute) / MINUTES_PER_HOUR


def longest_silence(hist: Histogram, peak_quantile: float | None = None) -> Silence | None:
    """The log's longest silence among its whole minutes, when it lasts SILENCE_WARNING_HOURS or
    more; else None (and None without arrival times). peak_quantile: the peak's quantile of
    per-minute rates, read with and without the silence (numpy's 'linear', as the peak is)."""
    counts = whole_minutes(per_minute_counts(hist))
    if not counts.size:
        return None
    first = int(hist.minute[0]) + 1  # the first whole minute (whole_minutes drops the partial first)
    busy = np.flatnonzero(counts > 0)
    edges = np.concatenate([[-1], busy, [counts.size]])
    runs = np.diff(edges) - 1  # silent minutes before each busy minute (and after the last)
    i = int(np.argmax(runs))
    silent = int(runs[i])
    if silent < SILENCE_WARNING_HOURS * MINUTES_PER_HOUR:
        return None
    arrivals = float(counts.sum())
    peaks = {}
    if peak_quantile is not None:
        kept = np.concatenate([counts[: edges[i] + 1], counts[edges[i + 1]:]])
        peaks = {"peak_rps": float(np.quantile(counts, peak_quantile)) / SECONDS_PER_MINUTE,
                 "peak_without_rps": float(np.quantile(kept, peak_quantile)) / SECONDS_PER_MINUTE}
    return Silence(
        start_minute=first + int(edges[i]) + 1,
        end_minute=first + int(edges[i + 1]),
        log_minutes=int(counts.size),
        mean_rps=arrivals / counts.size / SECONDS_PER_MINUTE,
        mean_without_rps=arrivals / max(counts.size - silent, 1) / SECONDS_PER_MINUTE,
        **peaks,
    )


# Minutes since the epoch at 2000-01-01: timestamps before it count from the log's own start (a trace's
# relative seconds), which a calendar date would misname as January 1970.
_CALENDAR_FROM_MINUTE = 10_957 * HOURS_PER_DAY * MINUTES_PER_HOUR


def silence_text(silence: Silence) -> str:
    """'the log holds no request for 7.0 hours in a row, from ... to ...', the silence named."""
    return f"the log holds no request for {silence.hours:,.1f} hours in a row, {_span_text(silence)}"


def _span_text(silence: Silence) -> str:
    """Where the silence lies: UTC dates and times, or hours:minutes on a relative log's own clock."""
    if silence.start_minute >= _CALENDAR_FROM_MINUTE:
        return f"from {minute_text(silence.start_minute)} to {minute_text(silence.end_minute)} UTC"
    start, end = (_clock_text(m) for m in (silence.start_minute, silence.end_minute))
    return f"from {start} to {end} on its own clock (h:mm from its time 0)"


def _clock_text(minute: int) -> str:
    """A minute of a relative log's clock as h:mm, signed (a stray row before its time 0 is at -h:mm)."""
    hours, minutes = divmod(abs(minute), MINUTES_PER_HOUR)
    return f"{'-' if minute < 0 else ''}{hours}:{minutes:02d}"


def silence_note(hist: Histogram, *, measured_day: bool, mean_from_span: bool,
                 peak_quantile: float | None = None) -> str:
    """A warning naming the log's longest silence (SILENCE_WARNING_HOURS or more) and what it does
    to the day's volume and the peak; '' when there is none, or when it changes neither.
    `measured_day`: the day's curve is measured from the log; `mean_from_span`: the source's mean
    rate over the log's span sets the day's volume; peak_quantile: the peak is that quantile of the
    log's per-minute rates."""
    silence = longest_silence(hist, peak_quantile)
    if silence is None:
        return ""
    lowers_peak = silence.peak_without_rps is not None and silence.peak_without_rps > silence.peak_rps
    if not (measured_day or mean_from_span or lowers_peak):
        return ""
    text = silence_text(silence)
    parts = [f"{text[0].upper()}{text[1:]}, of its "
             f"{silence.log_minutes / (HOURS_PER_DAY * MINUTES_PER_HOUR):,.1f} days of whole minutes: its mean rate is {silence.mean_rps:,.4g} requests/s over its whole minutes, "
             f"{silence.mean_without_rps:,.4g} requests/s without those hours."]
    if measured_day:
        parts.append("The measured day counts them as idle, which lowers the day's volume and raises its cost per "
                     "million tokens; if the log has a gap or a stray row, plan from the log without it, or state the "
                     "busiest hour's mean rate (traffic.mean_rps) with the day's curve (traffic.profile: hourly or a "
                     "shape).")
    elif mean_from_span:
        parts.append("The day's volume is read from that mean rate, so it counts them as idle too, which lowers the "
                     "day's volume and raises its cost per million tokens; if the log has a gap or a stray row, plan "
                     "from the log without it, or state the busiest hour's mean rate (traffic.mean_rps).")
    if lowers_peak:
        parts.append(f"The peak, the {peak_quantile:g} quantile of its per-minute rates, counts them too: "
                     f"{silence.peak_rps:,.4g} requests/s, {silence.peak_without_rps:,.4g} without those hours; if they "
                     "are a gap in the logging, the fleet is sized for less than the service's peak: plan from the log "
                     "without it, or state the peak (traffic.peak: {method: explicit, rps: ...}).")
    return " ".join(parts)
