"""Arrival rates from per-minute counts, and the peak rate a plan is sized for.

Per-minute counts come from a Histogram (its `minute`/`minute_count` arrays: minutes with
arrivals) or are given directly. Minutes between the first and the last arrival that had
none count as zero: a quiet minute is data, not a gap. A rate is count / 60 requests/s.

design.md, "Workload": the planning peak is a chosen quantile of per-minute rates, their
maximum, or an explicit value, times the scenario's growth factor.
"""

from __future__ import annotations

import datetime
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from planner.errors import InputError, did_you_mean
from planner.histogram import Histogram
from planner.roots import increasing_root
from planner.workload.columns import suggested

SECONDS_PER_MINUTE = 60
PEAK_METHODS = ("quantile", "max", "explicit")
# 2200-01-01 in minutes since the epoch: no serving log is dated later; relative times start near 0.
LAST_PLAUSIBLE_MINUTE = 120_968_640
MAX_SPAN_MINUTES = 1 << 23  # ~16 years: beyond it, the logs mix clocks (relative and epoch times)


def per_minute_counts(hist_or_minutes: Histogram | Sequence[int] | np.ndarray) -> np.ndarray:
    """Arrivals in every minute from the first arrival's to the last's, zeros included.

    A Histogram gives its sparse minutes; a sequence is taken as consecutive minutes' counts.
    """
    if not isinstance(hist_or_minutes, Histogram):
        counts = np.asarray(hist_or_minutes, dtype=np.float64)
        if counts.ndim != 1:
            raise InputError("per-minute counts must be a flat sequence")
        if (counts < 0).any() or not np.isfinite(counts).all():
            raise InputError("per-minute counts must be finite and >= 0")
        return counts
    minute, count = hist_or_minutes.minute, hist_or_minutes.minute_count
    if not minute.size:
        return np.zeros(0)
    check_span(hist_or_minutes)
    span = int(minute[-1] - minute[0]) + 1
    dense = np.zeros(span)
    dense[minute - minute[0]] = count
    return dense


def check_span(hist: Histogram, where: str | None = None) -> None:
    """InputError (naming `where`) when the arrivals span more than MAX_SPAN_MINUTES, or fall
    after LAST_PLAUSIBLE_MINUTE (microseconds read as milliseconds land in the year 55,970)."""
    if not hist.minute.size:
        return
    first, last = int(hist.minute[0]), int(hist.minute[-1])
    span = last - first + 1
    if span > MAX_SPAN_MINUTES:
        raise InputError(
            f"arrival times span {span / 525_960:.0f} years ({minute_text(first)} to {minute_text(last)}); do the "
            f"logs mix relative and epoch timestamps, or seconds and milliseconds (see {suggested('time_unit')}), or "
            "is one row far from the rest (a default time such as 1970-01-01)?",
            where=where,
        )
    if last > LAST_PLAUSIBLE_MINUTE:
        # past the calendar, a minute's number says nothing: its year does (epoch ms read as s: 55,905)
        up_to = minute_text(last)
        if up_to.startswith("minute"):
            up_to = f"the year {1970 + last // 525_960:,}"
        raise InputError(
            f"arrival times fall after {minute_text(LAST_PLAUSIBLE_MINUTE)[:4]} (up to {up_to}); are they in a finer "
            "unit than they were read in: milliseconds read as seconds, or microseconds as milliseconds? (see "
            f"{suggested('time_unit')})",
            where=where,
        )


COARSE_CLOCK_MINUTES = 15  # a clock rounded to a quarter hour or more (an hour, a day) measures no minute
# Distinct minutes with arrivals a lattice is read from: by chance, four minutes fall on a lattice of 15 or
# more about once in 500 (the sum over d >= 15 of d^-3, over zeta(3)); it only ever warns.
COARSE_CLOCK_MIN_MINUTES = 4


def clock_step_minutes(hist: Histogram) -> int:
    """The step in minutes of the lattice a log's arrivals all fall on, where it is
    COARSE_CLOCK_MINUTES or more, else 1: the greatest common divisor of the minutes between them,
    over COARSE_CLOCK_MIN_MINUTES distinct minutes or more. A clock rounded to the hour puts each
    hour's requests in one minute (a per-minute p99 of 11.9 requests/s for a log of 0.35); traffic
    in bursts on a schedule (a job every hour) falls on such a lattice too, its minutes measured
    right, which per-minute counts cannot tell apart: planner.traffic warns, and refuses nothing."""
    minute = hist.minute[hist.minute_count > 0] if hist.minute.size else hist.minute
    if minute.size < COARSE_CLOCK_MIN_MINUTES:
        return 1
    step = int(np.gcd.reduce((minute[1:] - minute[0]).astype(np.int64)))
    return step if step >= COARSE_CLOCK_MINUTES else 1


def clock_step_text(step: int, advice: str = "") -> str:
    """What a lattice of arrivals means for per-minute rates, as a clause, with `advice` on what to
    state instead where the rates are used; '' for step 1."""
    if step <= 1:
        return ""
    return (f"all arrivals fall on a lattice of {step:,} minutes ({step:,}, {2 * step:,}, ... minutes apart): if the "
            f"log's clock was rounded, each step's requests land in one minute, and its per-minute rates read up to "
            f"{step:,} times too high{f' ({advice})' if advice else ''}; if the traffic comes in bursts on that "
            "schedule, they are right")


def minute_text(minute: int) -> str:
    """A minute since the epoch as a UTC date and time ('2023-11-16 18:10'), or as minutes when no
    calendar holds it."""
    try:
        return (datetime.datetime(1970, 1, 1) + datetime.timedelta(minutes=minute)).strftime("%Y-%m-%d %H:%M")
    except OverflowError:
        return f"minute {minute:,}"


MIN_WHOLE_MINUTES = 2  # a per-minute rate needs whole minutes to measure


class NoPeakError(InputError):
    """A per-minute peak of 0 requests/s: the log's measured minutes hold (almost) no arrival."""


class ShortSpanError(InputError):
    """Arrivals over too few minutes of the clock to measure a per-minute peak: a log's message, which a
    caller whose source is no log (a synthetic draw: planner.traffic) says in its own settings' words."""


def whole_minutes(counts: np.ndarray) -> np.ndarray:
    """The minutes a log covers whole: without its first and last, which it starts and ends
    within (a log of 250 s touches 5 minutes, the last with 10 s of traffic; counting it as
    a full minute understates the mean by 17%; a log of 20 s at 1,000 req/s would read as
    333 req/s). Empty when fewer than MIN_WHOLE_MINUTES remain: no rate can be measured."""
    whole = counts[1:-1]
    return whole if whole.size >= MIN_WHOLE_MINUTES else whole[:0]


def mean_rate_rps(hist_or_minutes: Histogram | Sequence[int] | np.ndarray) -> float | None:
    """Mean arrival rate over the whole minutes spanned (None without arrival times)."""
    counts = whole_minutes(per_minute_counts(hist_or_minutes))
    return float(counts.mean()) / SECONDS_PER_MINUTE if counts.size else None


def minute_rate_quantile_rps(
    hist_or_minutes: Histogram | Sequence[int] | np.ndarray, q: float
) -> float | None:
    """A quantile (numpy 'linear') of per-minute rates (None without arrival times)."""
    counts = whole_minutes(per_minute_counts(hist_or_minutes))
    return float(np.quantile(counts, q)) / SECONDS_PER_MINUTE if counts.size else None


def peak_rate_rps(
    hist_or_minutes: Histogram | Sequence[int] | np.ndarray | None,
    method: str = "quantile",
    quantile: float = 0.99,
    explicit_rps: float | None = None,
    growth: float = 1.0,
) -> float:
    """The arrival rate (requests/s) a plan must hold: the base rate × growth.

    method 'quantile': the `quantile` of per-minute rates; 'max': the busiest minute's
    rate; 'explicit': `explicit_rps` (hist_or_minutes may then be None). Raises InputError
    for an unknown method, a quantile outside (0, 1], a growth or explicit rate <= 0,
    no arrival times, or a resulting rate of zero (nothing to plan for).
    """
    if method not in PEAK_METHODS:
        raise InputError(did_you_mean(method, PEAK_METHODS, what="peak-rate method"))
    if not (np.isfinite(growth) and growth > 0):
        raise InputError(f"growth factor {growth}: expected a number > 0")
    if method == "explicit":
        if explicit_rps is None:
            raise InputError("peak-rate method 'explicit' needs a rate (explicit_rps)")
        if not (np.isfinite(explicit_rps) and explicit_rps > 0):
            raise InputError(f"explicit peak rate {explicit_rps} req/s: expected > 0")
        return float(explicit_rps) * growth
    if not 0 < quantile <= 1:
        raise InputError(f"peak quantile {quantile}: expected 0 < q <= 1")
    if hist_or_minutes is None:
        raise InputError(
            f"peak-rate method '{method}' needs arrival counts (a histogram with timestamps)"
        )
    touched = per_minute_counts(hist_or_minutes)
    if not touched.size:
        raise InputError(
            f"peak-rate method '{method}' needs arrival times, and the workload has none; "
            "give the log's time column, or use method 'explicit'"
        )
    counts = whole_minutes(touched)
    if not counts.size:
        raise ShortSpanError(
            f"the arrivals span {touched.size} minute(s) of the clock, too short to measure a per-minute peak "
            f"(the first and last are partial; {MIN_WHOLE_MINUTES + 2} are needed): give a longer log, or state "
            "the peak with peak: {method: explicit, rps: ...}; or are its times in a larger unit than they were "
            f"read in, seconds read as milliseconds? (see {suggested('time_unit')})"
        )
    base = counts.max() if method == "max" else np.quantile(counts, quantile)
    rate = float(base) / SECONDS_PER_MINUTE * growth
    if rate <= 0:
        busy = int(np.count_nonzero(counts))
        if method == "max" or not busy:  # every arrival fell in the partial first and last minutes: none measured
            raise NoPeakError(
                f"peak rate is 0 req/s: none of the log's {counts.size:,} whole minutes has an arrival (the partial "
                "first and last minutes are not measured); give a log with arrivals between them, or state the peak "
                "with peak: {method: explicit, rps: ...}"
            )
        raise NoPeakError(
            f"peak rate is 0 req/s: the {quantile:g} quantile of {counts.size:,} whole minutes has no arrival "
            f"(arrivals fall in {busy:,} of them); use a higher quantile or method 'max'"
        )
    return rate


# A class's own minutes count as bursts of its own where Poisson arrivals at its share of the peak would
# reach them in at most this share of logs as long: a thin class's own p99 minute is mostly its own
# Poisson noise (the 128k rollout's 2% over 16,384 tokens: 1.03 requests/s against 0.85 as its share, over
# 19 whole minutes), which the simulation's Poisson replay already holds.
BURST_SIGNIFICANCE = 0.01
# A peak read at a lower quantile of the minutes is a level, not a burst: below the Poisson mean for a low
# one, where a class's own quantile clears its share by noise alone (a reading: at quantile 0.3 nearly every
# class of a stationary Poisson day, the whole too, was raised), and swayed by the day's shape near the
# median. Below it, each class takes its share.
BURST_QUANTILE_MIN = 0.9
# Below this many arrivals a minute the Poisson rate is found from the gamma function's series: the
# Wilson–Hilferty approximation, within 0.8% from 50 on at tails down to 1e-8, errs by up to 40% at 5.
_EXACT_BELOW_COUNT = 50


@dataclass(frozen=True)
class ClassBursts:
    """A traffic class's own busiest minutes, by the peak's method, against Poisson arrivals."""

    own_minute_rps: float  # the class's own quantile (or busiest) minute, requests/s
    poisson_rps: float  # the rate at which Poisson arrivals reach such a minute as rarely as the method asks
    # the least rate at which Poisson arrivals reach such a minute (by the method, over as many minutes) in
    # BURST_SIGNIFICANCE of logs: a share of the peak below it cannot be the class's own rate
    least_rps: float


def gamma_lower_regularized(a: float, x: float) -> float:
    """P(a, x) = γ(a, x) / Γ(a), by its power series (Abramowitz & Stegun 6.5.29):
    x^a e^(−x) / Γ(a) · Σ_n x^n / (a (a + 1) … (a + n)); every term positive, fast where x < a + 1."""
    if x <= 0:
        return 0.0
    term = total = 1.0 / a
    n = 0
    while term > total * 1e-16 and n < 10_000:
        n += 1
        term *= x / (a + n)
        total += term
    return min(1.0, math.exp(a * math.log(x) - x - math.lgamma(a)) * total)


def poisson_rate_reaching(count: float, tail: float) -> float:
    """The Poisson mean λ (arrivals a minute) at which a minute of `count` or more arrivals has
    probability `tail`. For N ~ Poisson(λ), P(N ≥ c) = P(c, λ), the regularized lower incomplete gamma
    function (Abramowitz & Stegun 26.4.21: the Poisson sum as a chi-square, that is gamma, tail), so λ
    is the gamma distribution's `tail` quantile at shape c: below _EXACT_BELOW_COUNT by bisection on
    the series (gamma_lower_regularized; roots.increasing_root), above by the Wilson–Hilferty cube-root normal approximation
    (Wilson & Hilferty, "The distribution of chi-square", PNAS 17, 1931): c (1 − 1/(9c) + z/(3√c))³,
    z the standard normal's `tail` quantile. 0 for no arrivals."""
    if count <= 0:
        return 0.0
    if count >= _EXACT_BELOW_COUNT:
        base = 1 - 1 / (9 * count) + NormalDist().inv_cdf(tail) / (3 * math.sqrt(count))
        return count * base**3 if base > 0 else 0.0
    return increasing_root(lambda rate: gamma_lower_regularized(count, rate) - tail, 0.0,
                           count + 10 * math.sqrt(count) + 10, xtol=0.0, rtol=1e-10, f_lo=-tail)


def minutes_at_or_above(n: int, method: str, quantile: float) -> int:
    """How many of n minutes must reach a count for their quantile (numpy's linear) or busiest minute to:
    the quantile lies between the sorted counts at ⌊h⌋ and ⌊h⌋ + 1, h = (n − 1) q, so the minute above
    it must reach, and every minute after (the one at ⌊h⌋ too where h is whole)."""
    if method == "max":
        return 1
    h = (n - 1) * quantile
    lo = math.floor(h)
    return max(1, n - lo - (1 if h > lo else 0))


@functools.lru_cache(maxsize=64)  # a source's classes share n and k: a month's minutes take 432 terms a step
def binomial_tail_reached(n: int, k: int, share: float) -> float:
    """The per-trial probability p at which k or more of n trials succeed with probability `share`:
    P(Bin(n, p) ≥ k) = share, by bisection on p over the binomial terms below k (their sum falls as p
    grows; roots.increasing_root); 1 − (1 − share)^(1/n) for k = 1."""
    if k <= 1:
        return 1 - (1 - share) ** (1 / n)
    log_choose = [math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) for j in range(k)]

    def at_least_k(p: float) -> float:
        return 1 - sum(math.exp(c + j * math.log(p) + (n - j) * math.log1p(-p)) for j, c in enumerate(log_choose))

    # P = 0 at p = 0 and 1 at p = 1, where the logs are not defined: the ends are given
    return increasing_root(lambda p: at_least_k(p) - share, 0.0, 1.0, xtol=0.0, rtol=1e-10, f_lo=-share,
                           f_hi=1 - share)


def bursts_tested(method: str, quantile: float) -> bool:
    """Whether a class's own minutes are tested for bursts under this peak: read at its busiest minute or
    at a quantile of BURST_QUANTILE_MIN or above; a lower quantile, or a stated peak, is shared out."""
    return method == "max" or (method == "quantile" and quantile >= BURST_QUANTILE_MIN)


def class_bursts(hist: Histogram, method: str, quantile: float) -> ClassBursts | None:
    """A class's (a selection of a histogram's total bins) own minutes by the peak's method ('quantile'
    or 'max'), and the Poisson rates that reach them: the rate its arrivals call for where they come
    in bursts of their own (documents sent together in a quiet minute), which the whole's peak times
    the class's share does not see. The tail is 1 − quantile, or 1 / n for the busiest of n whole
    minutes (n minutes measure no tail thinner than 1 / n). The least rate is the one at which, in
    BURST_SIGNIFICANCE of logs of n minutes, as many minutes reach the class's own as its quantile
    needs (minutes_at_or_above; the chance the quantile reaches it is at most that: a bound, which calls
    fewer classes bursty). None where the class's own minutes were not kept (Histogram.own_minute_counts)
    or do not measure a rate, and where the peak's method tests none (bursts_tested)."""
    if not bursts_tested(method, quantile):
        return None
    own = hist.own_minute_counts()
    if own is None:
        return None
    counts = whole_minutes(own)
    if not counts.size:
        return None
    n = counts.size
    count = float(counts.max() if method == "max" else np.quantile(counts, quantile))
    tail = max(1.0 / n, 0.0 if method == "max" else 1.0 - quantile)
    least_tail = binomial_tail_reached(n, minutes_at_or_above(n, method, quantile), BURST_SIGNIFICANCE)
    return ClassBursts(count / SECONDS_PER_MINUTE, poisson_rate_reaching(count, tail) / SECONDS_PER_MINUTE,
                       poisson_rate_reaching(count, least_tail) / SECONDS_PER_MINUTE)
