"""Certify a pool by simulation: one replica replayed at its planned rate against its band targets.

The analytical model (planner.capacity, planner.latency) sizes every candidate; the
simulator (planner.simulate) is the judge of the plan the solver returns. A pool is
certified when one of its replicas, fed the pool's own traffic class with Poisson
arrivals at the rate the plan has it carry (its share of the peak × headroom: the headroom a
plan states is then there in simulation, not only in the model: README.md gives how far above the
rate certification re-planned them at the shipped plans' pools that missed had been planned; a stated
fleet's, of the peak itself), keeps every band's
TTFT, TPOT and ITL at their statistics within their limits, meets the attainment goal, stays
stable and preempts within budget. A pool that misses gets its simulated capacity (the
highest rate at which each of its verdict's first runs, four at most, holds on its own, by
bisection over the same requests rescaled: common random numbers; and at least 2% below the
rate that missed; then judged there as this module judges a pool, and lowered while it misses:
certification._measured_capacity) and planner.planning solves again with it.

When the traffic came from a log with timestamps, the pool is also replayed with the
log's own arrivals (time compressed by the scenario's growth): a class's requests dealt to its
pools by their parts of its rate (certification._log_share), and each pool's to its replicas in
turn (round robin: IPVS-mode kube-proxy's default, and most load balancers'): bursts above the
planned peak count there, on the latencies and on the preemption budget. A Kubernetes Service in
kube-proxy's default iptables mode picks a replica at random instead: Poisson arrivals so dealt
are Poisson again at each replica, as the sampled runs have them, but a log's bursts dealt at
random fall unevenly, and no run replays that.

A percentile read off one run moves with its seed: finance_2027's TPOT p99 at its peak rate
was 34.8, 25.2, 29.4, 26.5 and 28.1 ms over seeds 0-4 of 5,556 sampled requests (27-29 ms
over 100,000), for a queue's slow requests come in bursts, not one by one. A verdict within
CLOSE_SHARE of its limit, either side (wider for a percentile that few requests lie beyond:
close_window), is therefore read again on CONFIRM_RUNS runs of as
many requests (seeds seed, seed + 1, ...) pooled, which the report says. Four runs pooled still
move: 70b_enterprise's TPOT p99 was 97.3 ms pooled over seeds 0-3 against a 100 ms limit, 101.9 ms
over seeds 3-6, and about 91 ms over more than a million requests; a verdict taken there was a coin
toss that chose between 15 and 16 replicas. So while a pooled value lies within UNDECIDED_ERRORS
standard errors of its limit (the standard error from the spread of the runs' own values: the
pooled percentile of k runs moves about as the mean of theirs), CONFIRM_RUNS more runs are pooled,
up to MOST_RUNS, and the report shows its standard error. Two errors estimated from four runs
(three degrees of freedom) hold the pooled value's true one about 86% of the time (Student's t),
from sixteen about 94%: a wide band at four runs only asks for more runs. A value that sixteen runs
still leave within two errors of its limit cannot be told from it, and counts as a miss on either
side (the pool is re-planned below the rate): fleet_2027q1's summarise_3b held at 79.0 ± 1.6 ms
against 80 ms, whose true value lies above the limit about a quarter of the time (Student's t, 15
degrees of freedom), and a replay 1% above its planned rate read 81.8 ms. A plan the report calls
certified then holds with some margin, not on a coin toss. On a pool 4% over its
limit the rule passed 3-5% of seeds, against 19-25% for four runs pooled (the tests' 8B pool, over
1,024 seeds). The plans explored beside the plan (one GPU type each) are certified in the same way.

Where slow requests come in long bursts, a short run reads a percentile low, and more runs as short
do not mend it: finance_2027's pool (28.6 req/s a replica, TPOT p99 limit 50 ms, long-run value
49.6-49.8 ms) read its p99 10% low on average, by 17% from seed to seed, on runs of 5,556 requests (3
minutes of arrivals), and four such runs pooled 4.5% low. Runs of 5,556 requests, pooled up to sixteen,
certified such a pool 26-45% of the time where its long-run value lay 3-8% over the limit. So a
run spans at least RUN_SPAN_S of arrivals (half an hour; at most the scenario's `simulation.requests`), and
a run's measured requests are those of its settled window (planner.sim_measures.settled_window: they
decode while arrivals go on, not in the drain after the last one). On that pool (150 blocks of seeds, check_pool itself)
the rule then certified 11%, 5% and 2% of pools 3%, 5% and 8% over their limit, and 71%, 85% and 97%
of those as far under (75%, 81% and 91% before).

A queue that the runs read as growing (their mean backlog trend over the tolerance) is read again
on one run SETTLE_FACTOR times as long, which decides: a short run's warm-up can end before a replica
started empty has filled, and pooling more runs as short would read the filling as often
(planner.sim_measures gives the measurements).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from planner.bounds import MAX_SEED, MIN_RPS
from planner.capacity import ReplicaModel
from planner.deployment import Deployment
from planner.histogram import LENGTH_EDGES, Histogram
from planner.requests import Requests, sample_requests, shortest_prompt_tokens
from planner.sim_capacity import (
    PREEMPTION_BUDGET_PER_1000,
    max_sustainable_rate,
    point_view,
)
from planner.sim_measures import (
    STABILITY_TOLERANCE,
    RequestLatencies,
    SimResult,
    backlog_growth,
    merged_latencies,
    settle_requests,
    settling_time_s,
)
from planner.simulate import DEFAULT_WARMUP_FRACTION, simulate_replica
from planner.targets import SLO, Band, statistic_quantile
from planner.worker_pool import side_by_side

CLOSE_SHARE = 0.85  # a simulated value within 15% of its limit, either side, is a close call
# ... or within TAIL_WINDOW / sqrt(k) of it, for a percentile that k requests lie beyond: one run's
# reading of a heavy tail resting on few requests spreads wider than 15% (close_window); at most
# MOST_CLOSE (k = 9 and fewer), where a reading two-thirds under its limit was re-read as "within 133%".
TAIL_WINDOW = 1.5
MOST_CLOSE = 0.5
CONFIRM_RUNS = 4  # runs pooled to judge a close call, and added at a time while it stays undecided
UNDECIDED_ERRORS = 2.0  # a pooled value this many standard errors or fewer from its limit is undecided
# A log replay's share shorter than this is judged on its latencies, not on its queue's trend: on the
# Azure trace's pool, stable at 80% of its planned rate, 28% of Poisson runs of 300 requests read a
# trend over STABILITY_TOLERANCE, and none of 1,000 or more (60 seeds each).
MIN_TREND_REQUESTS = 1_000
MOST_RUNS = 16  # runs pooled at most: a value still within UNDECIDED_ERRORS of its limit then counts as a miss
# A run spans at least half an hour of the pool's arrivals: a queue's slow requests come in bursts, and a
# run of a few minutes holds too few of them. finance_2027's pool (28.6 req/s a replica) read its TPOT
# p99 10% low on average, by 17% from seed to seed, on runs of 5,556 requests (3 minutes), 2.2% low by
# 10% on runs of 22,224 (13 minutes) and 1.2% low by 6% on runs of 88,896 (52 minutes); four runs
# pooled, 4.5%, 1.2% and 0.0% low. At the shipped pools' rates half an hour is 150-90,000 requests,
# which the simulator replays in 0.1 s at most; an hour made certifying the shipped scenarios 2-4 times slower.
RUN_SPAN_S = 1800.0
KINDS = ("ttft", "tpot", "itl")


@dataclass(frozen=True)
class TargetCheck:
    """One target of one band: its limit, the model's prediction and the simulator's value (seconds)."""

    kind: str  # ttft, tpot, itl
    stat: str
    limit_s: float
    predicted_s: float
    simulated_s: float  # NaN when the band had no request in the run
    # of simulated_s, from the spread of the pooled runs' own values (NaN: one run, or fewer than
    # two runs with a value)
    standard_error_s: float = math.nan
    # the simulated values it rests on: a TPOT only the requests with a second output token give
    # (None: ITL, over the pool's decode tokens, or no simulation)
    samples: int | None = None

    @property
    def undecided(self) -> bool:
        return undecided(self.simulated_s, self.limit_s, self.standard_error_s)

    @property
    def holds(self) -> bool:
        """The simulated value is not over its limit (NaN: no value, nothing missed)."""
        return not self.simulated_s > self.limit_s

    @property
    def passes(self) -> bool:
        """The target is met as certification judges it: not over its limit, nor undecided there."""
        return self.holds and not self.undecided


def undecided(value: float, limit: float, standard_error: float) -> bool:
    """Whether a pooled value lies within UNDECIDED_ERRORS standard errors of its limit (never
    where the error is unknown: one run, or fewer than two with a value)."""
    return bool(abs(value - limit) <= UNDECIDED_ERRORS * standard_error)  # (numpy scalars in: --json needs a bool)


@dataclass(frozen=True)
class BandCheck:
    band: Band
    requests: int  # measured requests of the band in the run
    checks: tuple[TargetCheck, ...]

    @property
    def holds(self) -> bool:
        return all(c.passes for c in self.checks)


@dataclass(frozen=True)
class PoolCheck:
    """One pool's replica in simulation beside the model's prediction."""

    pool: str  # traffic class name
    label: str
    config: str
    replicas: int
    rate_rps: float  # per replica, at the peak
    bands: tuple[BandCheck, ...]
    attainment: tuple[float, float, float] | None  # (goal, predicted, simulated)
    predicted: dict[str, float | None]  # the mean model (simulate.COMPARE_KEYS)
    simulated: dict[str, float | None]
    problems: tuple[str, ...]
    requests: int  # sampled a run
    seed: int  # of the first run
    replay: TraceReplay | None = None
    latencies: RequestLatencies | None = field(default=None, repr=False, compare=False)
    # pooled for the verdict: CONFIRM_RUNS when the first run's was a close call, more while undecided
    runs: int = 1
    attainment_error: float = math.nan  # the standard error of the simulated attainment, as TargetCheck's
    # why more runs were pooled, for people: the first run's value near a limit, or its preemptions
    pooled_because: str = ""
    queue_settling: QueueSettling | None = None  # the longer run that decided a growing queue the runs read

    @property
    def seeds(self) -> list[int]:
        """The seeds of the runs pooled for the verdict."""
        return confirm_seeds(self.seed, self.runs)

    @property
    def holds(self) -> bool:
        return not self.problems and (self.replay is None or self.replay.holds)

    @property
    def misses(self) -> tuple[str, ...]:
        """Everything that fails the pool: its runs' problems, then its log replay's, so named."""
        replayed = () if self.replay is None else tuple(f"the log's own arrivals: {p}" for p in self.replay.problems)
        return self.problems + replayed

    @property
    def undecided(self) -> bool:
        """Whether a target's (or the attainment's) pooled value still lies within UNDECIDED_ERRORS
        standard errors of its limit after MOST_RUNS runs: a miss (problems says so), on either side."""
        goal, _, simulated = self.attainment or (None, None, None)
        return _any_undecided(self.bands, goal, simulated, self.attainment_error)


def _any_undecided(bands: tuple[BandCheck, ...], goal: float | None, attained: float | None, error: float) -> bool:
    """Whether a target's pooled value, or the attainment's (against its goal, where one is set),
    lies within UNDECIDED_ERRORS standard errors of its limit."""
    return any(c.undecided for b in bands for c in b.checks) or (
        goal is not None and undecided(attained, goal, error))


@dataclass(frozen=True)
class TraceReplay:
    """The pool's share of a log replayed with its own arrivals across the pool's replicas."""

    requests: int
    span_s: float
    bands: tuple[BandCheck, ...]
    problems: tuple[str, ...]

    @property
    def holds(self) -> bool:
        return not self.problems


def band_checks(slo: SLO, rm: ReplicaModel | None, n: float | None, lat: RequestLatencies | None,
                runs: tuple[RequestLatencies, ...] = ()) -> tuple[BandCheck, ...]:
    """Per band: each target's limit, the model's value at resident count n, and the simulated value;
    runs: the runs pooled in `lat`, whose own values give the simulated value's standard error."""
    pt = rm.latency_at(n) if rm is not None and n is not None else None
    out = []
    for index, band in enumerate(slo.bands):
        checks = []
        for kind in KINDS:
            target = getattr(band, kind)
            if target is None:
                continue
            predicted = pt.value(index, kind, target.stat) if pt is not None else math.nan
            simulated = lat.statistic(band, kind, target.stat) if lat is not None else math.nan
            error = standard_error([run.statistic(band, kind, target.stat) for run in runs])
            samples = lat.of(band, kind).size if lat is not None and kind != "itl" else None
            checks.append(TargetCheck(kind, target.stat, target.limit_s, predicted, simulated, error, samples))
        requests = lat.requests_in(band) if lat is not None else 0
        out.append(BandCheck(band, requests, tuple(checks)))
    return tuple(out)


def predicted_bands(pool) -> tuple[BandCheck, ...]:
    """A planned pool's (plan_objects.PoolDetail) band checks by the model alone, at the rate
    certification replays it at (its replay_rps: the rate it is planned to carry), so that a plan
    predicts the same numbers with certification on or off."""
    return band_checks(pool.traffic_class.slo, pool.model, pool.replay_resident, None)


# A simulated percentile with fewer requests than this beyond it is an order statistic near the
# sample's maximum, not an estimate a verdict can lean on: the report says which one it is.
FEW_BEYOND = 10


def few_beyond(requests: int, stat: str) -> bool:
    """Whether a percentile `stat` of `requests` simulated values rests on fewer than FEW_BEYOND of
    them beyond it (a mean never does)."""
    q = statistic_quantile(stat)
    return q is not None and round(requests * (1 - q), 9) < FEW_BEYOND  # 100 x (1 - 0.9) reads 9.999...


@dataclass(frozen=True)
class TailPart:
    """A band's requests with prompts at or over a split threshold, in a pool that serves prompts on
    both sides of it: a percentile target is over the band's requests together, so a minority of long
    prompts can sit in the share it lets through and miss the limit on their own (code_32b's one band,
    TPOT p99 <= 50 ms, held by a pool whose prompts of 8,192 tokens and more read 60 ms in simulation).
    Their value at the pool's replayed rate, by the model and, where the pool was certified, in the
    same simulation, on `requests` of them."""

    band: Band  # the band the target is stated for
    part: Band  # its requests with prompts at or over the threshold's prompt edge
    share: float  # of the band's requests in the pool (the class histogram's prompt bins)
    kind: str
    stat: str
    limit_s: float
    predicted_s: float
    simulated_s: float  # NaN: no simulation
    requests: int  # the part's simulated values of this kind (a TPOT needs a second token; 0: no simulation)
    band_holds: bool  # the band's own verdict on this target (simulated where certified)

    @property
    def measured(self) -> bool:
        """The simulated value rests on enough requests to judge by (few_beyond)."""
        return math.isfinite(self.simulated_s) and not few_beyond(self.requests, self.stat)

    @property
    def close_call(self) -> bool:
        """The simulated value it is judged by lies within 1 - CLOSE_SHARE of the limit, either side (a
        label, not a re-read: a part's window is not widened for its few requests, or a part read 20% over
        its limit, its model's value twice it, was called a close call):
        the part's requests are not run again as a band's are, so another seed may read the other way."""
        return self.measured and _close(self.simulated_s, self.limit_s)

    @property
    def judged_s(self) -> float:
        """The value the part is judged by: the simulated one where it is measured on enough
        requests, else the model's."""
        return self.simulated_s if self.measured else self.predicted_s

    @property
    def misses(self) -> bool:
        """The part misses where the band holds (judged_s over the limit). A band that misses says so
        itself, in its own row."""
        return self.band_holds and self.judged_s > self.limit_s


def tail_parts(pool, thresholds: Iterable[int]) -> list[TailPart]:
    """The TailPart of each band, percentile target and split threshold inside the band's prompt
    range that has prompts of the pool on both sides of it (plan_objects.PoolDetail). A threshold
    between prompt edges (bands end at prompt-length histogram edges) is taken at the next edge up,
    so that the band the report suggests can be stated. The predicted values come from the pool's
    replica model with the band cut there, each part keeping the band's targets."""
    slo, rm, check, hist = pool.traffic_class.slo, pool.model, pool.check, pool.traffic_class.hist
    out = []
    if pool.replay_resident is None:
        return out
    own = rm.latency_at(pool.replay_resident)
    lat = check.latencies if check is not None else None
    starts = LENGTH_EDGES[hist.prompt_bin]  # each cell's prompt bin begins at an edge
    for edge in sorted({int(LENGTH_EDGES[np.searchsorted(LENGTH_EDGES, t)]) for t in thresholds
                        if t <= LENGTH_EDGES[-1]}):
        for index, band in enumerate(slo.bands):
            hi = band.prompt_below_tokens
            if not band.prompt_min_tokens < edge < (hi if hi is not None else math.inf):
                continue
            below = Band(band.name, band.prompt_min_tokens, edge, band.ttft, band.tpot, band.itl)
            part = Band(band.name, edge, hi, band.ttft, band.tpot, band.itl)
            in_band = float(hist.count[band.holds(starts)].sum())
            share = float(hist.count[part.holds(starts)].sum()) / in_band if in_band else 0.0
            targets = [(kind, getattr(band, kind)) for kind in ("ttft", "tpot")]
            targets = [(kind, t) for kind, t in targets if t is not None and t.exceed_share is not None]
            if not 0 < share < 1 or not targets:
                continue
            cut = SLO((*slo.bands[:index], below, part, *slo.bands[index + 1:]), slo.attainment)
            point = rm.with_slo(cut).latency_at(pool.replay_resident)
            for kind, target in targets:
                c = next((c for c in check.bands[index].checks if c.kind == kind), None) if check is not None else None
                if c is not None and math.isfinite(c.simulated_s):
                    band_holds = c.passes
                else:  # no simulation, or no simulated request of the band: the model's verdict, as its row's
                    band_holds = not own.value(index, kind, target.stat) > target.limit_s
                out.append(TailPart(band, part, share, kind, target.stat, target.limit_s,
                                    point.value(index + 1, kind, target.stat),
                                    lat.statistic(part, kind, target.stat) if lat is not None else math.nan,
                                    lat.of(part, kind).size if lat is not None else 0, band_holds))
    return out


def missing_tail_parts(pool, thresholds: Iterable[int]) -> list[TailPart]:
    """The tail parts that miss (TailPart.misses), one per band and kind of target: the lowest
    threshold's, whose part holds the most requests (a band that spans the standard edges, 4,096 to
    65,536, would otherwise name each edge's part in turn)."""
    seen, out = set(), []
    for t in tail_parts(pool, thresholds):
        if t.misses and (t.band.name, t.kind) not in seen:
            seen.add((t.band.name, t.kind))
            out.append(t)
    return out


def apart_text(value_s: float, limit_s: float, kind: str) -> str:
    """A latency beside its limit with as many more digits as it takes to tell the two apart
    ("50.04 ms" had read "50.0 ms" against a 50 ms limit), in the kind's unit; "—" for no value."""
    if not math.isfinite(value_s):
        return "—"
    least, scale, unit = _units(kind)
    value, limit = value_s * scale, limit_s * scale
    shown = f"{limit:g}"
    least = _limit_decimals(limit_s, kind)  # never fewer decimals than the limit's
    digits = next((d for d in range(least, least + 6) if f"{value:,.{d}f}" != f"{limit:,.{d}f}"), None)
    if digits is None:  # equal to six more digits
        side = "just over" if value > limit else "just under" if value < limit else "at"
        return f"{side} {shown} {unit}"
    return f"{value:,.{digits}f} {unit}"


def standard_error(values: list[float]) -> float:
    """The standard error of a statistic pooled over runs, from the runs' own values: their sample
    standard deviation over the square root of their number (NaN with fewer than two values). A
    percentile of k runs pooled has about the variance of the mean of the runs' percentiles (each
    run's estimate is asymptotically normal around the same quantile: Serfling 1980, section 2.3,
    the sample quantiles)."""
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < 2:
        return math.nan
    return float(np.std(finite, ddof=1)) / math.sqrt(len(finite))


def _units(kind: str) -> tuple[int, float, str]:
    """How a latency of this kind reads: (decimals, scale from seconds, unit): TTFT in s to 0.01,
    TPOT and ITL in ms to 0.1."""
    return (2, 1.0, "s") if kind == "ttft" else (1, 1e3, "ms")


def limit_text(limit_s: float, kind: str) -> str:
    """A latency limit in its kind's unit and decimals, or in as many more as it was stated with."""
    _, scale, unit = _units(kind)
    return f"{limit_s * scale:,.{_limit_decimals(limit_s, kind)}f} {unit}"


def _limit_decimals(limit_s: float, kind: str) -> int:
    """The kind's decimals, or as many more as the limit was stated with (0.085 s: three)."""
    least, scale, _ = _units(kind)
    shown = f"{limit_s * scale:g}"
    return max(least, len(shown.split(".")[1]) if "." in shown and "e" not in shown else 0)


def latency_text(seconds: float, kind: str, error_s: float = math.nan) -> str:
    """A latency for people, in its kind's unit, with its standard error where known ("79.0 ± 1.6 ms")."""
    digits, scale, unit = _units(kind)
    error = f" ± {error_s * scale:,.{digits}f}" if math.isfinite(error_s) else ""
    return f"{seconds * scale:,.{digits}f}{error} {unit}"


def miss_text(band: str, check: TargetCheck, value_s: float) -> str:
    """A target missed, for people: "chat: TPOT p99 61.2 ms > 60 ms" (the simulated or the predicted
    value), with as many more digits as it takes to tell it from the limit (apart_text)."""
    _, scale, unit = _units(check.kind)
    return (f"{band}: {check.kind.upper()} {check.stat} {apart_text(value_s, check.limit_s, check.kind)} > "
            f"{check.limit_s * scale:g} {unit}")


def undecided_phrase(of: str) -> str:
    """Why a value counts as undecided, for people: "within 2 standard errors of {of} after 16 runs"."""
    return f"within {UNDECIDED_ERRORS:g} standard errors of {of} after {MOST_RUNS} runs"


def undecided_text(band: str, check: TargetCheck) -> str:
    """A target held by a value that MOST_RUNS runs leave within UNDECIDED_ERRORS standard errors of
    its limit, for people: "chat: TPOT p99 79.0 ± 1.6 ms cannot be told from its 80 ms limit, ..."."""
    _, scale, unit = _units(check.kind)
    return (f"{band}: {check.kind.upper()} {check.stat} {latency_text(check.simulated_s, check.kind, check.standard_error_s)} "
            f"cannot be told from its {check.limit_s * scale:g} {unit} limit, {undecided_phrase('it')}")


def _problems(slo: SLO, bands: tuple[BandCheck, ...], lat: RequestLatencies | None,
              attainment_error: float = math.nan) -> list[str]:
    """The targets missed, and those held by a value that cannot be told from its limit (undecided)."""
    out = [miss_text(b.band.name, c, c.simulated_s) if not c.holds else undecided_text(b.band.name, c)
           for b in bands for c in b.checks if not c.holds or c.undecided]
    if slo.attainment is not None and lat is not None:
        got = lat.attainment(slo)
        if got < slo.attainment:
            out.append(f"attainment {got:.1%} < {slo.attainment:.1%}")
        elif undecided(got, slo.attainment, attainment_error):
            out.append(f"attainment {got:.1%} ± {attainment_error:.1%} cannot be told from its {slo.attainment:.1%} "
                       f"goal, {undecided_phrase('it')}")
    return out


def _growing_text(growth: float, over: str = "") -> str:
    """'the queue grows: the replica cannot keep up (its backlog rising at 7.30% of the arrival rate{over}; 2% allowed)'"""
    return f"the queue grows: the replica cannot keep up ({_rising_text(growth, over)})"


def _rising_text(growth: float, over: str = "") -> str:
    return f"its backlog rising at {_trend_text(growth)} of the arrival rate{over}; {STABILITY_TOLERANCE:.0%} allowed"


def _preemption_problems(sims: list[SimResult]) -> list[str]:
    """Preemptions over budget, judged on the runs pooled for a verdict together (their mean per
    1,000 arrivals), as their percentiles are."""
    runs = f" (the mean of {len(sims)} runs)" if len(sims) > 1 else ""
    return _over_preemption_budget(sum(s.preemptions_per_1000 for s in sims) / len(sims), runs)


def _log_preemption_problems(preemptions: int, requests: int) -> list[str]:
    """Preemptions over budget in a log's replay: its replicas' preemptions per 1,000 of their
    requests together, the budget a Poisson run is held to (a log's bursts fill a cache that the
    planned rate's steady arrivals leave room in, and a preempted request recomputes its prompt).
    Every preemption counts, those after the last arrival too, as every request's latencies do: a
    burst at the log's end preempts while its backlog drains (a run's window stops at the last
    arrival, and read 0 of 290 such preemptions)."""
    return _over_preemption_budget(1000.0 * preemptions / max(requests, 1))


def _over_preemption_budget(per_1000: float, how: str = "") -> list[str]:
    """The problem of preemptions per 1,000 requests over PREEMPTION_BUDGET_PER_1000 (how: how they were read)."""
    if per_1000 <= PREEMPTION_BUDGET_PER_1000:
        return []
    return [f"{per_1000:.1f} preemptions per 1,000 requests > {PREEMPTION_BUDGET_PER_1000:g}{how}"]


@dataclass(frozen=True)
class QueueSettling:
    """A growing queue read by a verdict's runs, read again on a run SETTLE_FACTOR times as long,
    which decides (planner.sim_measures: a short run's trend reads a replica still filling as growth).
    Its latencies and preemptions are judged too: where the short runs had not settled, neither had
    their percentiles. Trends are the backlog's least-squares slope as a fraction of the arrival rate."""

    runs_growth: float  # the verdict's runs' trend: their mean
    runs: int  # pooled for the verdict
    runs_requests: int  # sampled for each of those runs
    longer_requests: int  # sampled for the longer run
    longer_growth: float  # the longer run's trend
    misses: tuple[str, ...]  # the longer run's targets missed and preemptions over budget

    @property
    def grows(self) -> bool:
        return self.longer_growth > STABILITY_TOLERANCE

    @property
    def longer_text(self) -> str:
        """'a run of 22,224 requests, 4 times as long'"""
        return f"a run of {self.longer_requests:,} requests, {self.longer_requests / self.runs_requests:.3g} times as long"

    def text(self) -> str:
        """For people: what was read, and what decided."""
        mean = f" (the mean of {self.runs} runs)" if self.runs > 1 else ""
        verdict = ("the queue grows" if self.grows else "it levels off") + (
            (", and that run also misses: " if self.grows else ", but that run misses: ") + "; ".join(self.misses)
            if self.misses else "")
        return (f"the backlog rose at {_trend_text(self.runs_growth)} of the arrival rate{mean}, over the "
                f"{STABILITY_TOLERANCE:.0%} allowed, which a replica still filling from empty can also show; "
                f"{self.longer_text}, read {_trend_text(self.longer_growth)}: {verdict}")

    @property
    def problems(self) -> list[str]:
        """What the longer run fails the pool on: a growing queue, and its own misses, so named."""
        grows = [_growing_text(self.longer_growth, f" over {self.longer_text}")] if self.grows else []
        return grows + [f"{self.longer_text}: {miss}" for miss in self.misses]


def _trend_text(growth: float) -> str:
    """A trend to 0.01% ('2.01%', not '2.0%': the tolerance is 2%), or 'no growth (-0.1%)'."""
    return f"{growth:.2%}" if growth > 0 else f"no growth ({growth:.1%})"


def _mean_growth(sims: list[SimResult]) -> float:
    """The backlog trend of runs pooled for one verdict: their mean. A queue is stable or not at a
    rate, whatever the seed: a verdict that failed on any one run's trend would fail more often the
    more runs an undecided call pools (two of inventory_mixed's once failed on one run of sixteen over
    the tolerance, where the sixteen averaged under a quarter of it)."""
    return sum(s.backlog_growth for s in sims) / len(sims)


def settle_queue(p: PoolSetting, slo: SLO, requests: int, seed: int, sims: list[SimResult]) -> QueueSettling | None:
    """Where the runs pooled for a verdict read a growing queue on their mean trend, a run of
    SETTLE_FACTOR times the requests (the first run's seed; at most MAX_SIMULATED_REQUESTS) read
    again; None where they do not, or where no longer run can be sampled (the mean trend decides).
    The longer run's targets are judged on it alone, without a close call's pooling: it errs strict
    (a value near its limit there is a miss that more runs might have cleared), and it runs only where
    the short runs read a growing queue."""
    read = _mean_growth(sims)
    n = settle_requests(requests)
    if read <= STABILITY_TOLERANCE or n is None:
        return None
    longer = _run(p, n, seed)
    lat = longer.latencies
    misses = _problems(slo, band_checks(slo, None, None, lat), lat) + _preemption_problems([longer])
    return QueueSettling(read, len(sims), requests, longer.requests, longer.backlog_growth, tuple(misses))


def _queue_problems(settling: QueueSettling | None, sims: list[SimResult]) -> list[str]:
    """A growing queue and the longer run's misses where one settled the runs' reading; else the
    runs' mean trend decides (no longer run could be sampled)."""
    if settling is not None:
        return settling.problems
    read = _mean_growth(sims)
    return [_growing_text(read, f", the mean of {len(sims)} runs" if len(sims) > 1 else "")] if read > STABILITY_TOLERANCE else []


@dataclass(frozen=True)
class PoolSetting:
    """What certify needs of a pool of the plan (planner.planning.PoolDetail provides it)."""

    name: str
    label: str
    config: str
    deployment: Deployment
    hist: Histogram
    replicas: int
    rate_rps: float  # per replica, the rate replayed (PoolDetail.replay_rps)
    model: ReplicaModel
    resident: float | None  # the model's N at that rate (None: beyond the model's roofline)
    shared_prefix_tokens: int = 0
    trace: Requests | None = None  # the pool's requests from a timestamped log, time already scaled
    notes: tuple[str, ...] = field(default=())


def band_requests(hist: Histogram, band: Band) -> int:
    """The histogram's requests whose prompt falls in the band (exact: band edges are prompt-bin edges)."""
    return int(hist.count[band.holds(LENGTH_EDGES[hist.prompt_bin])].sum())


def requests_for(hist: Histogram, slo: SLO, *, most: int, per_band: int, warmup_fraction: float = 0.1,
                 settling: int = 0, rate_rps: float = 0.0) -> int:
    """Requests to sample so that every band with a target and with requests in the pool gets
    `per_band` measured ones (after the warm-up), and that a run spans RUN_SPAN_S of arrivals at
    rate_rps, at most `most`: a p99 read off 5,000 requests rests on its 50 slowest. Band shares are
    exact: band edges are prompt-bin edges. settling: the requests expected to arrive while the
    replica settles and as long before the last arrival (settling_requests), not measured either."""
    shares = [band_requests(hist, b) / hist.requests for b in slo.bands if (b.ttft or b.tpot or b.itl)]
    smallest = min((x for x in shares if x > 0), default=1.0)
    measured = math.ceil(per_band / smallest / (1 - warmup_fraction)) + settling
    return int(min(most, max(measured, math.ceil(rate_rps * RUN_SPAN_S))))


def settling_requests(p: PoolSetting) -> int:
    """The requests a run of the pool is expected to leave unmeasured at its two ends beyond its
    warm-up share (planner.sim_measures.settled_window): those arriving in twice the settling time of
    the lifetimes the model predicts at the pool's rate (each cell's own prefill and its decode steps
    at the mean step a decoder sees), 0 where the model has no stable point there. An estimate that
    only sizes the run: the run's own lifetimes set its window."""
    if p.resident is None:
        return 0
    point = p.model.latency_at(p.resident)
    if not point.stable:
        return 0
    cells = p.model.latency.cells
    lifetimes_s = point.own_s + cells.decode_steps * point.own_mean_step
    return math.ceil(2 * p.rate_rps * settling_time_s(lifetimes_s, weights=cells.weight))


def check_pool(p: PoolSetting, slo: SLO, *, requests: int, seed: int) -> PoolCheck:
    """Simulate one replica of the pool at its rate (`requests` sampled requests); compare with
    the model, band by band. A close call (close_call) is judged on CONFIRM_RUNS runs pooled, and
    CONFIRM_RUNS more at a time while a pooled value is undecided, up to MOST_RUNS (module
    docstring); a growing queue on a longer run (settle_queue); the mean model's simulated view is
    the first run's."""
    sims = [_run(p, requests, seed)]
    lat = sims[0].latencies
    bands = band_checks(slo, p.model, p.resident, lat)
    attainment_error, because = math.nan, ""
    if close_call(bands) or _close_attainment(slo, lat):
        because = f"the first came within {_widest_close(bands, slo, lat):.0%} of a limit"
    elif first_problems := _preemption_problems(sims):
        # Preemptions are a noisy reading of the rate too, pooled as a close value is; a growing queue
        # is read again on a longer run instead (settle_queue), whose warm-up more runs would not lengthen.
        because = f"the first run read {'; '.join(first_problems)}"
    if because:
        runs = CONFIRM_RUNS
        while True:
            sims += side_by_side(lambda s: _run(p, requests, s), confirm_seeds(seed, runs)[len(sims):])
            parts = tuple(s.latencies for s in sims)
            lat = merged_latencies(list(parts))
            bands = band_checks(slo, p.model, p.resident, lat, parts)
            if slo.attainment is not None:
                attainment_error = standard_error([part.attainment(slo) for part in parts])
            attained = lat.attainment(slo) if slo.attainment is not None else None
            if runs >= MOST_RUNS or not _any_undecided(bands, slo.attainment, attained, attainment_error):
                break
            runs += CONFIRM_RUNS
    sim = sims[0]
    attainment = None
    if slo.attainment is not None:
        predicted = p.model.latency_at(p.resident).attainment() if p.resident is not None else math.nan
        attainment = (slo.attainment, predicted, lat.attainment(slo))
    predicted_view = point_view(p.model, p.resident) if p.resident is not None else {}
    replay = replay_trace(p, slo) if p.trace is not None else None
    settling = settle_queue(p, slo, requests, seed, sims)
    problems = _problems(slo, bands, lat, attainment_error) + _preemption_problems(sims) + _queue_problems(settling, sims)
    return PoolCheck(p.name, p.label, p.config, p.replicas, p.rate_rps, bands, attainment, predicted_view,
                     sim.compare_view(), tuple(problems), requests, seed, replay, lat, len(sims), attainment_error,
                     because, settling)


def _run(p: PoolSetting, requests: int, seed: int) -> SimResult:
    """One replica of the pool simulated on `requests` sampled with `seed`."""
    # Below MIN_RPS (a request every 11 days) requests never overlap, so the replica's latencies
    # are those at MIN_RPS; simulated clocks at a vanishing rate would leave float range.
    reqs = sample_requests(p.hist, max(p.rate_rps, MIN_RPS), requests, seed, max_total_tokens=p.deployment.max_model_len,
                           min_prompt_tokens=shortest_prompt_tokens(p.shared_prefix_tokens, p.deployment.block_size))
    return simulate_replica(p.deployment, reqs, shared_prefix_tokens=p.shared_prefix_tokens)


def confirm_seeds(seed: int, runs: int = CONFIRM_RUNS) -> list[int]:
    """The seeds of a close call's runs: `seed` and the next ones, within the seeds a scenario or
    `planner simulate --seed` can name (so each run can be replayed on its own)."""
    return [(seed + k) % (MAX_SEED + 1) for k in range(runs)]


def fresh_seed(seeds_used: list[int]) -> int:
    """The seed after `seeds_used`, consecutive seeds as confirm_seeds gives them (wrapping within the
    seeds a scenario can name): a rate chosen because runs on some seeds held there is confirmed on
    others. Confirmed on the seeds that chose it, it shares their luck: inventory_mixed's H200 was planned at a rate the runs that bisected it held pooled (TPOT
    p99 about 47 ms), where other seeds' runs, pooled, read 49.3 ± 0.6 ms against 50 (an outside replay)."""
    if not seeds_used:
        raise ValueError("fresh_seed needs the seeds used")
    return (seeds_used[-1] + 1) % (MAX_SEED + 1)


def close_window(stat: str, samples: int | None) -> float:
    """How far from its limit, as a share of it, one run's reading is still a close call: 1 -
    CLOSE_SHARE, or TAIL_WINDOW / sqrt(k) where a percentile rests on k = samples x (1 - q) values
    beyond it (a mean, or ITL's per-token percentile over a run's every token, on CLOSE_SHARE alone).

    The count of requests beyond a percentile varies as a Poisson count does, by 1/sqrt(k) of itself,
    and a queue's slow requests come in bursts, so a run's reading moves more: the 128k rollout's long
    pool (p99 over about 5,000 requests, k = 50) read its TPOT p99 between 120 and 190 ms on single
    runs where its long-run value was 141 ms, and a pool 2% over its 150 ms limit was certified on
    one run reading 127.1 ms, 15.3% under (2 of 30 seed blocks; an outside audit). At k = 50 the
    window is 21%; it is CLOSE_SHARE's 15% from k = 100, and MOST_CLOSE at most."""
    q = statistic_quantile(stat)
    if q is None or not samples:
        return 1 - CLOSE_SHARE
    return _tail_window(samples * (1 - q))


def _tail_window(beyond: float) -> float:
    """close_window for a reading that `beyond` values (expected) lie past: requests over a percentile,
    or the misses an attainment goal allows."""
    return min(MOST_CLOSE, max(1 - CLOSE_SHARE, TAIL_WINDOW / math.sqrt(beyond))) if beyond > 0 else MOST_CLOSE


def _close(value: float, limit: float, window: float = 1 - CLOSE_SHARE) -> bool:
    return (1 - window) * limit <= value <= (1 + window) * limit


def _close_windows(bands: tuple[BandCheck, ...]) -> list[float]:
    """The close_window of each simulated value that lies within it of its limit, either side."""
    windows = [(c, close_window(c.stat, c.samples)) for b in bands for c in b.checks]
    return [w for c, w in windows if _close(c.simulated_s, c.limit_s, w)]


def close_call(bands: tuple[BandCheck, ...]) -> bool:
    """Whether a simulated value lies within its close_window of its limit, either side."""
    return bool(_close_windows(bands))


def _widest_close(bands: tuple[BandCheck, ...], slo: SLO, lat: RequestLatencies) -> float:
    """The widest window among the readings that made the first run a close call, for the report's
    "within 21% of a limit"."""
    windows = _close_windows(bands)
    if _close_attainment(slo, lat):
        windows.append(_attainment_window(slo, lat))
    return max(windows, default=1 - CLOSE_SHARE)


def _attainment_window(slo: SLO, lat: RequestLatencies) -> float:
    """close_window of the share of requests missing a target, against the share the goal allows: it
    rests on the misses allowed (50 at 99% of 5,000 requests), as a percentile on those beyond it."""
    return _tail_window(lat.prompt_tokens.size * (1.0 - slo.attainment))


def _close_attainment(slo: SLO, lat: RequestLatencies) -> bool:
    """Whether the share of requests missing a target lies within its window of the share allowed."""
    return slo.attainment is not None and _close(1.0 - lat.attainment(slo), 1.0 - slo.attainment,
                                                 _attainment_window(slo, lat))


def capacity_on_every_run(p: PoolSetting, slo: SLO, *, requests: int, seeds: tuple[int, ...]) -> float:
    """A rate, at most the pool's replayed rate, that one replica holds on every seed's run (within
    the bisection's 2%): the least of the seeds' simulated capacities below that rate. The first seed
    is bisected; each next one is run once at the rate found so far and bisected below it only where
    it misses there: a seed that holds there cannot lower the least. A pooled verdict's four seeds
    then cost about a bisection and three runs, not four bisections (when a long-context pool's run
    took about a second, certifying the 128k rollout at its planned rate spent 24 of 30 s bisecting).
    The bracket widens down by 1 / CLOSE_SHARE a step: a miss is most often a close call, its value
    within 1 - CLOSE_SHARE of its limit, and a first bracket as narrow takes two runs fewer to bisect."""
    def held_at(seed: int, rate: float, wanted=None) -> float:
        return max_sustainable_rate(p.deployment, p.hist, slo, n_requests=requests, seed=seed, rel_tol=0.02,
                                    initial_rate_rps=rate, shared_prefix_tokens=p.shared_prefix_tokens,
                                    search_above=False, widen=1.0 / CLOSE_SHARE, wanted=wanted).rate_rps

    rate = held_at(seeds[0], p.rate_rps) if seeds else p.rate_rps
    rest = list(seeds[1:])
    while rest and rate > 0:
        # The next seeds run side by side at the rate found so far; the first that misses there lowers
        # it, and those after it run again at the lower rate: the answer of running them one by one.
        # A seed that misses stops bisecting once an earlier one has missed too (its answer is never
        # read): 18 of the 199 runs certifying the 128k rollout went so, beside the bisection that is
        # read, slowing it wherever the cores were all busy.
        earliest = _EarliestMiss()
        found = side_by_side(lambda item, at=rate, first=earliest: held_at(item[1], at, partial(first.still, item[0])),
                             list(enumerate(rest)))
        lowered = next((i for i, r in enumerate(found) if r != rate), None)
        if lowered is None:
            break
        rate, rest = found[lowered], rest[lowered + 1:]
    return rate


class _EarliestMiss:
    """The earliest, in the seeds' order, of a round's seeds seen missing at its rate
    (capacity_on_every_run): the one whose bisection is read."""

    def __init__(self):
        self._earliest = math.inf
        self._lock = threading.Lock()

    def still(self, index: int) -> bool:
        """Whether seed `index`, which has missed (max_sustainable_rate asks only then), is still the
        earliest seen missing: none before it has."""
        with self._lock:
            self._earliest = min(self._earliest, index)
            return self._earliest == index


def replay_trace(p: PoolSetting, slo: SLO) -> TraceReplay:
    """Deal the pool's logged requests to its replicas in turn and simulate each; judge the whole."""
    tr = p.trace
    parts, trends, preempted = [], [], 0
    for r in range(p.replicas):
        idx = np.arange(r, tr.n, p.replicas)
        if idx.size == 0:
            continue
        prompt = np.maximum(tr.prompt_tokens[idx], shortest_prompt_tokens(p.shared_prefix_tokens, p.deployment.block_size))
        output = np.clip(tr.output_tokens[idx], 1, np.maximum(p.deployment.max_model_len - prompt, 1))
        mine = Requests(tr.arrival_s[idx] - tr.arrival_s[idx[0]], prompt, output)
        sim, trace = simulate_replica(p.deployment, mine, shared_prefix_tokens=p.shared_prefix_tokens, warmup_fraction=0.0,
                                      settled=False, trace=True)
        parts.append(sim)
        preempted += int(trace.preemption_steps.size)  # the drain's too: every request is judged
        # The queue's trend past the first tenth of the share's requests, as a Poisson run reads it:
        # a replica starts empty, and on a log of minutes its filling alone read as growth (a 3-minute
        # slice of the Azure log failed at any number of replicas).
        if mine.n >= MIN_TREND_REQUESTS:
            # Not the settled window: a log's load need not be steady, and its busiest stretch may be its
            # end, which the settled window leaves out (a share whose rate rose sixfold in its last 40%
            # read a 1.7% trend there, against 11.6% past its first tenth: tests/test_certify.py).
            trends.append((len(parts), backlog_growth(mine, trace, DEFAULT_WARMUP_FRACTION, settled=False)))
    lat = merged_latencies([s.latencies for s in parts])
    bands = band_checks(slo, None, None, lat)
    problems = _problems(slo, bands, lat) + _log_preemption_problems(preempted, tr.n)
    # A log cannot be run longer: each replica's share of it decides (settle_queue does not apply).
    problems += [f"replica {i}'s queue grows ({_rising_text(growth)})" for i, growth in trends
                 if growth > STABILITY_TOLERANCE]
    return TraceReplay(tr.n, float(tr.arrival_s[-1] - tr.arrival_s[0]), bands, tuple(problems))

