"""A scenario's traffic section → the joint histogram and the measured peak rate."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

import numpy as np

from planner.errors import InputError
from planner.files import path_is
from planner.histogram import Histogram
from planner.load_profile import (
    FLAT,
    MINUTES_PER_HOUR,
    DailyProfile,
    busiest_hour_mean_rps,
    traffic_profile,
)
from planner.requests import Requests
from planner.scenario import Scenario, resolve
from planner.silence import longest_silence, silence_note, silence_text

LOG_PEAK_WARNING = 1.5  # a source's own p99 minute this many times a stated peak's (Poisson) is warned of
# A headroom above this is warned of: most likely a percentage written as the multiplier (20 for 1.2),
# which plans 20 times the peak without a word.
HEADROOM_WARNING = 3.0
_Z99 = NormalDist().inv_cdf(0.99)
SAMPLED_MEAN_SPREAD = 0.02  # a source's mean within this share above a stated peak is taken as the peak's sample
REPLAY_MAX_REQUESTS = 200_000  # a log longer than this is planned from its histogram but not replayed


@dataclass(frozen=True)
class Traffic:
    hist: Histogram
    peak_rps: float  # measured (or explicit), before growth
    mean_rps: float | None  # measured over the log's span, or the scenario's mean_rps; before growth
    notes: tuple[str, ...]
    profile: DailyProfile = FLAT  # the day's load curve (planner.load_profile)
    requests: Requests | None = None  # a timestamped log's requests with their own arrivals (from 0 s)
    # notes a command also prints as warnings (the log's rows left out, a long silence in a log whose span
    # sets the day's mean rate): a plan made from a small part of a log, or from a day mostly idle, must
    # not pass unnoticed
    warnings: tuple[str, ...] = ()

    def requests_at_growth(self, growth: float) -> Requests | None:
        """The log's requests with arrivals compressed by `growth` (1.5: 50% more requests a second)."""
        if self.requests is None:
            return None
        r = self.requests
        return Requests(r.arrival_s / growth, r.prompt_tokens, r.output_tokens)


def load_traffic(scn: Scenario, base: Path, *, day_priced: bool = False) -> Traffic:
    """The histogram of all requests, the measured peak and mean rates, and notes for the report.
    day_priced: a forecast reads the day's volume of this traffic, though its scenario states none (a
    fleet's service, priced by the fleet's forecast)."""
    from planner.paged import prefix_disagreement
    from planner.workload.columns import read_for_a_scenario
    from planner.workload.peaks import (
        NoPeakError,
        ShortSpanError,
        bursts_tested,
        clock_step_minutes,
        clock_step_text,
        mean_rate_rps,
        peak_rate_rps,
    )

    src = scn.traffic.source
    notes: list[str] = []
    requests = None
    excluded_note = ""
    ingest_warnings: list[str] = []  # the logs' own (a time unit doubted, a grown log, minutes without lengths)
    doubts: list[str] = []  # of them, a stated time unit the values contradict, with both readings
    if src.constant is not None:
        c = src.constant
        hist = Histogram.constant(c.prompt_tokens, c.output_tokens)
        notes.append(f"Source: constant lengths, {c.prompt_tokens:,} prompt + {c.output_tokens:,} output tokens per request.")
    elif src.synthetic is not None:
        from planner.workload.synth import distribution, synthetic_histogram

        syn = src.synthetic
        hist = synthetic_histogram(syn.name, syn.requests, seed=syn.seed, rate_rps=syn.rate_rps)
        rate = distribution(syn.name).rate_rps if syn.rate_rps is None else syn.rate_rps
        notes.append(f"Source: synthetic distribution '{syn.name}', {syn.requests:,} requests, Poisson arrivals at "
                     f"{rate:g} requests/s ({syn.requests / rate / 60:,.1f} minutes), seed {syn.seed}.")
    else:
        # pyarrow's readers load only for logs and histogram files, not for synthetic traffic.
        from planner.workload.columns import resolve_columns
        from planner.workload.ingest import ingest, is_histogram_file

        paths = [src.log] if isinstance(src.log, str) else list(src.log or [])
        if src.histogram is not None:
            paths = [src.histogram]
        files = [resolve(base, p) for p in paths]
        field = "histogram" if src.histogram is not None else "log"
        seen: dict[tuple[int, int], int] = {}
        for i, (written, file) in enumerate(zip(paths, files, strict=True)):
            if not path_is(file, "any"):  # named by the scenario's field: the reader knows only the path
                raise InputError(f"source.{field}: '{written}' does not exist (paths are relative to the "
                                 "scenario's folder)")
            # said here, in the scenario's words: ingest's own refusal names the log, not the field that lists
            # it twice (a copy, which only its contents tell apart, is still refused there)
            st = os.stat(file)
            key = (st.st_dev, st.st_ino)  # the same file by any path, a symbolic or a hard link
            if key in seen:
                raise InputError(f"source.{field}: '{written}' is the file of entry {seen[key] + 1} again (entry "
                                 f"{i + 1}); its requests would count twice")
            seen[key] = i
            # ingest reads logs and histogram files alike: a log here would be planned from, and
            # the report would call it a histogram file
            if field == "histogram" and not is_histogram_file(file):
                raise InputError(f"source.histogram: '{written}' is a request log, not a histogram file; give it as "
                                 "source.log (with its preset or columns), or write its histogram with "
                                 "`planner histogram LOG -o FILE.parquet`")
        cols = src.columns
        spec = resolve_columns(
            src.preset, cols.prompt if cols else None, cols.output if cols else None,
            cols.time if cols else None, src.time_unit,
        )
        with read_for_a_scenario():
            result = ingest(files, spec, keep_requests=REPLAY_MAX_REQUESTS)
        hist = result.histogram
        requests, unreplayable = _replayable(result.requests)
        coarse = _coarse_clock(requests)
        if coarse:
            notes.append(coarse)
            requests = None
        # (a log list may hold histogram files too, which ingest merges: each is named for what it is)
        kinds = ["histogram file" if r.kind == "histogram" else "log" for r in result.files]
        if len(set(kinds)) == 1:
            source = f"{kinds[0]} " + ", ".join(_display(p, base) for p in files)
        else:
            source = ", ".join(f"{kind} {_display(p, base)}" for kind, p in zip(kinds, files, strict=True))
        notes.append(f"Source: {source} ({spec.name} columns).")
        excluded = {k: v for k, v in result.excluded_rows.items() if v}
        if excluded:
            excluded_note = ("Excluded rows: " + ", ".join(f"{n:,} {k}" for k, n in excluded.items())
                             + f" (of {sum(f.rows_read for f in result.files):,} read)." + "".join(
                                 f" {_display(Path(f.path), base)}: {f.problems_text}." for f in result.files
                                 if f.problems_text))
            notes.append(excluded_note)
        if unreplayable:
            notes.append(f"{unreplayable:,} request(s) with no output token are planned, but left out of the "
                         "replay of the log's own arrivals (the simulator replays requests that decode).")
        if result.time_unit_assumed:
            notes.append(f"Timestamps read as {result.time_unit_assumed}.")
        # ingest's notes name files by the paths read: the report names them as the scenario does
        shown = {p: _display(Path(p), base) for r in result.files for p in (r.path, *r.files_missing_columns)}
        # in one pass, longest first: a path shown could hold another path as read (base 's': 'logs/x.csv' holds 's/x.csv')
        paths = re.compile("|".join(re.escape(p) for p in sorted(shown, key=len, reverse=True))) if shown else None
        notes += [paths.sub(lambda m: shown[m.group(0)], note) if paths else note for note in result.notes]
        doubts = [f"{shown[f.path]}: {f.time.doubt}" for f in result.files if f.time is not None and f.time.doubt]
        # a file without arrivals by length matters where a class's own bursts are tested (an explicit peak, or
        # one below BURST_QUANTILE_MIN, is shared out whatever the file keeps)
        tested = bursts_tested(scn.traffic.peak.method, scn.traffic.peak.quantile)
        said = [*result.warnings, *(result.length_warnings if tested else ())]
        ingest_warnings = [paths.sub(lambda m: shown[m.group(0)], w) if paths else w for w in said]
        notes += ingest_warnings
    peak = scn.traffic.peak
    try:
        # a log's refusal names the scenario's field (traffic.source.time_unit), not `planner histogram`'s option
        with read_for_a_scenario() if src.log is not None else contextlib.nullcontext():
            measured = peak_rate_rps(hist, method=peak.method, quantile=peak.quantile, explicit_rps=peak.rps,
                                     growth=1.0)
    except ShortSpanError as exc:
        if src.synthetic is not None:  # no log, no time unit: the draw's own count is what falls short
            raise InputError(_synthetic_too_short(src.synthetic.requests, rate, hist,
                                                  peak.quantile if peak.method == "quantile" else None)) from None
        if doubts:
            # epoch seconds stated as milliseconds squeeze an hour into 3.6 s: the run fails here, where a
            # warning would never be printed (a failed run's one line is its error), so the error gives
            # both readings
            raise InputError("; ".join([exc.message, *doubts])) from None
        raise
    except NoPeakError as exc:
        if src.synthetic is not None:  # a Poisson draw has no gap in its logging nor a stray row: its rate is low
            raise InputError(_synthetic_no_peak(src.synthetic.requests, rate, hist, peak.quantile)) from None
        # a peak of 0 from a log mostly silent: the silence, which the warning names where a peak is measured
        silence = longest_silence(hist)
        if silence is None:
            raise
        raise InputError(f"{exc.message}; but {silence_text(silence)}, which the peak counts as idle minutes: a gap "
                         "in the logging or a stray row far from the rest (plan from the log without it), or a service "
                         "that idles for hours (state its peak)") from None
    if scn.traffic.mean_rps is not None and scn.traffic.mean_rps > measured * (1 + 1e-9):
        raise InputError(f"mean_rps: {scn.traffic.mean_rps:,g} req/s is above the peak, {measured:,.4g} req/s "
                         "(a mean cannot exceed the peak the plan is sized for)")
    disagreement = prefix_disagreement(hist, scn.traffic.shared_prefix_tokens)
    if disagreement:
        raise InputError(f"shared_prefix_tokens: {disagreement}")
    mean = scn.traffic.mean_rps or mean_rate_rps(hist)
    if src.constant is not None and scn.traffic.profile is not None and scn.traffic.profile.measured:
        raise InputError("profile: measured: a constant source has no arrival times to measure a day from; state "
                         "the day (profile: {hourly: [...]} or {shape: diurnal, ...}), or plan from a log")
    try:
        profile = traffic_profile(scn.traffic.profile, hist)
    except InputError as exc:
        raise InputError(f"profile: {exc}") from None
    if scn.traffic.mean_rps is not None and profile.busiest_hour_rps is not None:
        # The measured day's busiest hour sets the mean; a stated one would be read nowhere.
        raise InputError(f"mean_rps: the profile is measured from the log, whose busiest hour sets the day's mean "
                         f"({profile.busiest_hour_rps:,.4g} req/s); state the profile too (hourly or shape) for "
                         "mean_rps to be the busiest hour's rate, or drop mean_rps")
    busiest = busiest_hour_mean_rps(profile, mean)
    # where a day's volume is read (daily, forecast, a fleet's forecast)
    priced_day = not profile.is_flat or scn.forecast is not None or day_priced
    warnings = ([excluded_note] if excluded_note else []) + ingest_warnings
    if (peak.method == "explicit" and scn.traffic.mean_rps is None and priced_day and busiest is not None
            and busiest > measured * (1 + 1e-9)):
        # The day's volume is read from the source, the plan sized for the stated peak: a day at the source's
        # rate priced its tokens on traffic the plan cannot carry (a third of the peak's cost per token).
        where = "its busiest hour's mean" if profile.busiest_hour_rps is not None else "its mean over its whole minutes"
        if busiest > measured * (1 + SAMPLED_MEAN_SPREAD):
            raise InputError(f"peak: {measured:,.4g} req/s is below the source's own rate, {busiest:,.4g} req/s ({where}), "
                             "which the day's volume is read from: state traffic.mean_rps (the busiest hour's mean at "
                             "this peak), or a peak at or above the source's rate")
        # a peak stated at the source's own rate, which its sample reads a little above: the day at the peak
        above = busiest / measured - 1
        notes.append(f"The source's own rate, {busiest:,.4g} req/s ({where}), is "
                     f"{f'{above:.1%}' if above >= 0.001 else 'less than 0.1%'} above the "
                     f"stated peak, {measured:,.4g} req/s, within a sample's spread: the day's busiest hour is taken at "
                     "the peak")
        if profile.busiest_hour_rps is not None:
            profile = dataclasses.replace(profile, busiest_hour_rps=measured)
        else:
            mean = measured
    if peak.method == "explicit" and src.constant is None:
        # The source's own busiest minutes far above the stated peak: a plan sized for the statement, which
        # certification's replay of a log's arrivals then refuses (a log at 9.26 req/s in its p99 minute,
        # planned for 3 without a word by --no-verify). Against the p99 minute of Poisson arrivals at the
        # peak, which the capacity model plans for: at 0.1 req/s that alone is 2.1 times the peak.
        with contextlib.suppress(InputError):
            own = peak_rate_rps(hist, method="quantile", quantile=0.99)
            # the normal approximation (z of 0.99, rounded up a request): paged.compound_poisson_quantile is
            # exact but its grid grows with the mean, and a stated peak may be a billion requests/s
            per_minute = measured * 60
            poisson_p99 = (per_minute + _Z99 * math.sqrt(per_minute) + 1) / 60
            if own > LOG_PEAK_WARNING * max(measured, poisson_p99):
                notes.append(f"The source's own p99 minute, {own:,.4g} req/s, is {own / measured:,.1f}× the stated "
                             f"peak, {measured:,.4g} req/s, far past what Poisson arrivals at the peak reach in theirs "
                             f"({poisson_p99:,.4g} req/s): the plan is sized for the stated one (a source of a busier period, "
                             "or a peak stated too low?)")
                warnings.append(notes[-1])
    # Hours without a request lower the day's volume wherever the log's span sets its mean rate: a
    # measured day (the week's, stated as such, may idle on its weekend), or the source's own mean
    # rate under a stated or flat profile (unless the scenario states traffic.mean_rps); and a peak
    # read as a quantile of the log's minutes.
    weekly = scn.traffic.profile is not None and scn.traffic.profile.by_weekday
    measured_day = profile.busiest_hour_rps is not None and not weekly
    span_mean = profile.busiest_hour_rps is None and scn.traffic.mean_rps is None
    silence = silence_note(hist, measured_day=measured_day, mean_from_span=span_mean,
                           peak_quantile=peak.quantile if peak.method == "quantile" and not weekly else None)
    if silence and src.synthetic is None:  # a synthetic draw's silent hours are its Poisson arrivals' own, at the rate stated
        notes.append(silence)
        warnings.append(silence)
    # arrivals on a lattice (a clock rounded to the hour, or bursts on a schedule), said where they are read
    # by the minute (the peak's quantile or max) or by the hour (a measured day, from a lattice coarser)
    step = clock_step_minutes(hist)
    if peak.method != "explicit" or (measured_day and step > MINUTES_PER_HOUR):
        clock = clock_step_text(step, "state the peak with peak: {method: explicit, rps: ...}" if peak.method != "explicit"
                                else "state the day with profile: {hourly: [...]} or a shape")
        if clock:
            notes.append(f"In the log, {clock}.")
            warnings.append(notes[-1])
    headroom = scn.traffic.headroom
    if headroom > HEADROOM_WARNING:
        notes.append(f"traffic.headroom {headroom:g} plans capacity for {headroom:g}× the peak: headroom is the capacity "
                     f"planned per unit of peak (1.2 for 20% spare), not a percentage")
        warnings.append(notes[-1])
    return Traffic(hist, measured, mean, tuple(notes), profile, requests, tuple(warnings))


# A synthetic rate under this multiple of _quiet_rate_rps is near it: on 2,000 requests at q 0.5 (0.0116 req/s),
# 0.0117 and 0.012 read a peak of 0 on some seeds, and 2 requests told to draw 106 at 0.0125 read 0 on 4 seeds of 10.
_NEAR_QUIET = 3.0


def _quiet_rate_rps(quantile: float) -> float:
    """The rate below which fewer than 1 − `quantile` of a Poisson source's minutes hold an arrival, so that
    its per-minute peak at that quantile is 0: a minute is empty with probability e^(−60 × rate)."""
    from planner.workload.peaks import SECONDS_PER_MINUTE

    return -math.log(quantile) / SECONDS_PER_MINUTE


def _synthetic_too_short(requests: int, rate: float, hist: Histogram, quantile: float | None) -> str:
    """Why a synthetic source's draw measures no per-minute peak, in its settings' words: too few requests
    at its rate for MIN_WHOLE_MINUTES whole minutes, and the count that spans them whatever the seed.
    Whole minutes between the first and last arrival's take (MIN_WHOLE_MINUTES + 1) minutes between
    them; the n − 1 exponential gaps between n arrivals sum to (n − 1) / rate s, sd √(n − 1) / rate,
    so ten sd of room (as planner.workload.synth leaves) takes n − 1 − 10 √(n − 1) ≥ that span × rate."""
    from planner.bounds import MAX_SYNTHETIC_REQUESTS
    from planner.workload.peaks import MIN_WHOLE_MINUTES, SECONDS_PER_MINUTE, per_minute_counts

    span_s = (MIN_WHOLE_MINUTES + 1) * SECONDS_PER_MINUTE
    needed = math.ceil((5 + math.sqrt(25 + span_s * rate)) ** 2) + 1
    more = (f"draw more, traffic.source.synthetic.requests: {needed:,} or more at this rate" if
            needed <= MAX_SYNTHETIC_REQUESTS else
            f"at this rate the most traffic.source.synthetic.requests may draw, {MAX_SYNTHETIC_REQUESTS:,}, spans too few")
    quiet = None if quantile is None else _quiet_rate_rps(quantile)
    if quiet is not None and rate <= quiet:  # more of the same would then read a peak of 0
        more = (f"raise traffic.source.synthetic.rate_rps well above {quiet:.3g} requests/s (below it fewer than "
                f"{1 - quantile:.3g} of its minutes hold an arrival, and the peak at that quantile is 0), with requests "
                "enough for several minutes")
    elif quiet is not None and rate < _NEAR_QUIET * quiet:  # near it a draw's peak reads 0 about as often as not
        more += (f" (at {rate:g} requests/s, near {quiet:.3g}, where its peak at the {quantile:g} quantile can still read "
                 f"0: a rate well above {quiet:.3g} does not)")
    return (f"the synthetic source's {requests:,} requests at {rate:g} requests/s span {per_minute_counts(hist).size} "
            f"minute(s) of the clock, too short to measure a per-minute peak (the first and last are partial; "
            f"{MIN_WHOLE_MINUTES + 2} are needed): {more}, or state the peak with peak: {{method: explicit, rps: ...}}")


def _synthetic_no_peak(requests: int, rate: float, hist: Histogram, quantile: float) -> str:
    """Why a synthetic source's per-minute peak is 0, in its settings' words. Its silent minutes are its
    Poisson arrivals' own, not a gap in the logging: a minute holds none with probability e^(−60 × rate),
    so the `quantile` of its minutes holds an arrival once that is below `quantile`, above −ln(quantile) / 60
    requests/s (_quiet_rate_rps; a draw near that rate, either side, reads 0 about as often as not, so the
    message asks for a rate well above it). With no arrival in any whole minute, the draw is too small."""
    from planner.workload.peaks import per_minute_counts, whole_minutes

    counts = whole_minutes(per_minute_counts(hist))
    busy = int(np.count_nonzero(counts))
    said = f"the synthetic source's {requests:,} requests at {rate:g} requests/s"
    if not busy:
        return (f"peak rate is 0 req/s: none of the {counts.size:,} whole minutes of {said} has an arrival (the "
                "partial first and last minutes are not measured): draw more, traffic.source.synthetic.requests, "
                "or state the peak with peak: {method: explicit, rps: ...}")
    least = _quiet_rate_rps(quantile)
    # Near `least` a draw reads 0 about as often as not, whichever side of it: the rate must clear it by a margin
    # (a stated rate already above it read "raise it above" a rate it exceeded: an audit, q 0.5 at 0.012 req/s).
    near = (f"at {rate:g} requests/s, near {least:.3g}, a draw's minutes with an arrival fall short of it by chance"
            if rate > least else f"below {least:.3g} requests/s fewer than {1 - quantile:.3g} of the minutes hold one")
    return (f"peak rate is 0 req/s: {said} arrive in {busy:,} of its {counts.size:,} whole minutes, too few for "
            f"their {quantile:g} quantile to hold an arrival (more than {1 - quantile:.3g} of them must; {near}): raise "
            f"traffic.source.synthetic.rate_rps well above {least:.3g} requests/s, or state the peak with peak: "
            "{method: explicit, rps: ...}")


def _replayable(rows) -> tuple[Requests | None, int]:
    """A log's usable rows as requests the simulator can replay (at least one prompt and one
    output token each; arrivals from the first one), or None; and how many rows it leaves out."""
    if rows is None:
        return None, 0
    prompt, output, seconds = rows
    ok = (prompt >= 1) & (output >= 1) & np.isfinite(seconds)
    left_out = int(ok.size - np.count_nonzero(ok))
    if not ok.any():
        return None, left_out
    arrival = seconds[ok] - seconds[ok].min()
    return Requests(arrival, prompt[ok], output[ok]), left_out


def _coarse_clock(requests: Requests | None) -> str:
    """Why a log's arrivals cannot be replayed as they came, or "": its timestamps all fall on
    whole minutes (or on one instant), so each minute's requests would arrive at once, a burst the
    service never saw (the quantile peak reads the same per-minute counts either way)."""
    if requests is None or requests.n < 2:
        return ""
    t = requests.arrival_s
    span = float(t[-1] - t[0]) if t.size else 0.0
    if span > 0 and not (np.allclose(t / 60.0, np.round(t / 60.0), rtol=0.0, atol=1e-6)
                         and np.unique(t).size < t.size):
        return ""
    what = "one instant" if span == 0 else "whole minutes"
    return (f"The log's timestamps fall on {what}: its own arrivals are not replayed (each minute's requests "
            "would arrive at once); the pools are judged on Poisson arrivals at their planned rates.")


def _display(path: Path, base: Path) -> str:
    """A path as the scenario wrote it (relative), never an absolute path of this machine."""
    try:
        return str(path.relative_to(base))
    except ValueError:
        return path.name
