"""The highest rate one replica holds in simulation, and the model's view at a rate beside it.

`max_sustainable_rate` bisects on the simulator (planner.simulate) for the highest rate
that meets a Criterion (stable backlog, band targets, preemption budget): the simulator's
meaning of capacity, which certification (planner.pool_check) and the accuracy bench compare
with planner.capacity's. `predicted_point` is the analytical mean model at a rate, in the
same keys as a simulated run (planner.sim_measures.COMPARE_KEYS).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from planner.capacity import NO_TARGETS, ReplicaModel, replica_capacity
from planner.deployment import Deployment
from planner.histogram import Histogram
from planner.memory import budget_ladder, kv_token_cap
from planner.paged import TokenProfile, token_profile
from planner.requests import Requests, sample_requests, shortest_prompt_tokens
from planner.sim_measures import COMPARE_KEYS, SimResult, settle_requests
from planner.simulate import DEFAULT_WARMUP_FRACTION, simulate_replica
from planner.targets import SLO

PREEMPTION_BUDGET_PER_1000 = 10.0  # preemptions per 1,000 requests a replica may take and still hold the load


def profile_for(dep: Deployment, hist: Histogram, *, shared_prefix_tokens: int = 0) -> TokenProfile:
    """The class profile planner.capacity uses, with this deployment's block size and chunk budget."""
    return token_profile(
        hist,
        block_size=dep.block_size,
        chunk_tokens=dep.engine.max_num_batched_tokens,
        sliding_window=kv_token_cap(dep.model),
        shared_prefix_tokens=shared_prefix_tokens,
    )


def predicted_point(
    dep: Deployment,
    prof: TokenProfile | Histogram,
    rate_rps: float,
    slo: SLO | None = None,
    *,
    kv_budget_bytes: int | None = None,
) -> dict[str, float | None]:
    """The analytical mean model at `rate_rps`, with COMPARE_KEYS (None where it predicts nothing).

    N from ReplicaModel.resident_for_rate (Little's law fixed point), then
    ReplicaModel.point(N); expected sizing has no preemption figure. Latency percentiles
    per band are planner.latency's (planner.pool_check puts them beside the simulator's).
    """
    ladder = budget_ladder(dep)
    if kv_budget_bytes is not None:
        from dataclasses import replace

        from planner.units import GiB

        ladder = replace(ladder, kv_budget_gib=kv_budget_bytes / GiB)
    rm = ReplicaModel(dep, prof, slo or NO_TARGETS, ladder)
    n = rm.resident_for_rate(rate_rps, float(dep.engine.max_num_seqs))
    if n is None:
        return {"rate_rps": rate_rps, **dict.fromkeys(COMPARE_KEYS[1:])}
    return point_view(rm, n)


def point_view(rm: ReplicaModel, resident: float) -> dict[str, float | None]:
    """The model's operating point at `resident` sequences as COMPARE_KEYS (None where it predicts
    nothing). The ITL p99 is the model's gap tail (planner.latency: the chain of step lengths, a long
    prompt's later chunks, the prompts queued behind a request's own prefill), on which an ITL target
    is planned: within 13% of the simulated p99 in every shipped pool (it read 6 ms against 258 ms in
    the 128k rollout's long pool before those terms, 230 ms now). None under θ (a prompt's tokens a
    step capped), where several prompts' capped chunks share a step and the model takes every such
    step as full, up to five times the simulated value (bench/itl_tail.py): a floor that errs high
    for planning, which beside the simulation's p99 would read as a prediction; None where no
    request has a second token."""
    pt = rm.point(resident)
    capped = rm.latency.cap is not None and rm.latency.cap < rm.latency.chunk_tokens
    itl_p99 = None if capped else rm.latency_at(resident).value(0, "itl", "p99") * 1e3
    return {
        "rate_rps": pt.rate_rps,
        "resident_batch": pt.resident_batch,
        "kv_utilisation": pt.kv_utilisation,
        "itl_ms_mean": pt.itl_ms,
        "itl_ms_p99": None if itl_p99 is None or math.isnan(itl_p99) else itl_p99,  # NaN: no second token, no gap
        "preemptions_per_1000": None,
    }


@dataclass(frozen=True)
class Criterion:
    """When a simulated run counts as holding the load (the simulator's meaning of capacity).

    - stable: the backlog (requests arrived, not finished) does not trend upwards by
      more than STABILITY_TOLERANCE of the arrival rate over the window - the
      throughput/roofline ceiling, and at a full cache the memory ceiling, where
      admission waits for blocks and the queue grows (max_sustainable_rate reads a rate
      that fails on this alone again on a run SETTLE_FACTOR times as long);
    - every band's TTFT, TPOT and ITL at its statistic within its limit (planner.targets);
    - the attainment goal, when the SLO states one;
    - preemptions per 1,000 requests <= the budget - the memory ceiling: expected sizing
      lets the mean footprint fill the budget, and what that costs is preemptions
      (and queueing at admission, which TTFT sees).
    """

    slo: SLO = NO_TARGETS
    preemption_budget_per_1000: float = PREEMPTION_BUDGET_PER_1000

    def failures(self, r: SimResult) -> list[str]:
        out = []
        if not r.stable:
            out.append("unstable")
        lat = r.latencies
        for band in self.slo.bands:
            for kind in ("ttft", "tpot", "itl"):
                target = getattr(band, kind)
                if target is not None and lat is not None:
                    value = lat.statistic(band, kind, target.stat)
                    if value > target.limit_s:  # NaN (no request of the band) is no miss
                        out.append(kind if len(self.slo.bands) == 1 else f"{kind} ({band.name})")
        if self.slo.attainment is not None and lat is not None and lat.attainment(self.slo) < self.slo.attainment:
            out.append("attainment")
        if not r.preemptions_per_1000 <= self.preemption_budget_per_1000:
            out.append("preemption")
        return out


@dataclass(frozen=True)
class SustainableRate:
    """The highest simulated rate that held (bisection), with the runs that decided it."""

    rate_rps: float
    result: SimResult | None  # the run that judged rate_rps (on the longer sample, where one was drawn)
    binding: str  # what failed just above it
    # (rate, failures) in the order tried; a rate that passed on the short sample and is read again on
    # the longer one appears twice (the rate that drew the longer sample once, with the longer run's failures)
    evaluations: tuple[tuple[float, tuple[str, ...]], ...]
    bracket: tuple[float, float]
    longer_requests: int = 0  # the longer sample's requests, where a rate failing on its backlog alone drew it

    @property
    def runs(self) -> int:
        """Runs simulated: one an evaluation, and one more for the rate that drew the longer sample
        (run on both samples within one evaluation)."""
        return len(self.evaluations) + (1 if self.longer_requests else 0)


class _NotWanted(Exception):
    """The caller of max_sustainable_rate no longer wants its answer (its `wanted`)."""


def max_sustainable_rate(
    dep: Deployment,
    hist: Histogram,
    slo: SLO | None = None,
    *,
    preemption_budget_per_1000: float = PREEMPTION_BUDGET_PER_1000,
    n_requests: int = 20000,
    seed: int = 0,
    rel_tol: float = 0.02,
    initial_rate_rps: float | None = None,
    kv_budget_bytes: int | None = None,
    shared_prefix_tokens: int = 0,
    warmup_fraction: float = DEFAULT_WARMUP_FRACTION,
    max_evaluations: int = 24,
    simulate: Callable[..., SimResult] | None = None,
    search_above: bool = True,
    widen: float = 1.5,
    wanted: Callable[[], bool] | None = None,
) -> SustainableRate:
    """Bisection on the simulator for the highest rate that meets the Criterion.

    One set of requests is sampled (seed) and its Poisson arrivals rescaled to each rate
    tried (common random numbers), so the pass/fail outcome is close to monotone in the
    rate. The bracket starts at the analytical capacity (or `initial_rate_rps`) and is
    widened by factors of `widen` until it holds a pass and a fail; bisection stops when
    its width is below rel_tol of the upper end. search_above=False: a pass at the initial rate
    is the answer (a caller that needs no rate above it is spared the search upwards).
    The first rate whose run fails on a growing backlog alone is run again on SETTLE_FACTOR times
    the requests (sampled with the same seed; at most MAX_SIMULATED_REQUESTS), which decides it and
    every rate tried after it, and the answer is read on it too (a rate that passed on the short
    sample is read again, and the search goes on below it where it fails there): a short run's trend
    reads a replica still filling as growth (planner.sim_measures), and its percentiles are as unsettled.
    wanted: with search_above=False only (so that being asked means the first rate missed), asked
    before each rate simulated after the first; False ends the search there, its answer 0 with the
    binding "not wanted": a caller that no longer needs the answer (capacity_on_every_run's later
    seeds) stops spending runs.
    """
    if wanted is not None and search_above:
        raise ValueError("wanted is asked only of a search below its first rate (search_above=False)")
    slo = slo or NO_TARGETS
    crit = Criterion(slo, preemption_budget_per_1000)
    if initial_rate_rps is None:
        initial_rate_rps = replica_capacity(dep, profile_for(dep, hist, shared_prefix_tokens=shared_prefix_tokens), slo).max_rps
    guess = float(initial_rate_rps) if initial_rate_rps > 0 else 1.0  # the model found none: start at 1 rps

    def sample(n: int) -> Requests:
        return sample_requests(hist, 1.0, n, seed, max_total_tokens=dep.max_model_len,
                               min_prompt_tokens=shortest_prompt_tokens(shared_prefix_tokens, dep.block_size))

    samples = [sample(n_requests)]  # and the longer one, once drawn (docstring)
    longer_n = settle_requests(n_requests)
    run = simulate or simulate_replica
    cache: dict[float, tuple[SimResult, list[str], int]] = {}  # rate -> (run, failures, the sample's index)
    order: list[tuple[float, tuple[str, ...]]] = []

    def simulated(rate: float) -> tuple[SimResult, list[str]]:
        r = run(dep, samples[-1].at_rate(rate), kv_budget_bytes=kv_budget_bytes,
                shared_prefix_tokens=shared_prefix_tokens, warmup_fraction=warmup_fraction)
        return r, crit.failures(r)

    def evaluate(rate: float) -> list[str]:
        if rate not in cache:
            if order and wanted is not None and not wanted():
                raise _NotWanted
            r, failed = simulated(rate)
            if failed == ["unstable"] and len(samples) == 1 and longer_n is not None:  # perhaps still filling
                samples.append(sample(longer_n))
                r, failed = simulated(rate)
            cache[rate] = (r, failed, len(samples) - 1)
            order.append((rate, tuple(failed)))
        return cache[rate][1]

    def found(rate: float, result: SimResult | None, binding: str, bracket: tuple[float, float]) -> SustainableRate:
        return SustainableRate(rate, result, binding, tuple(order), bracket, samples[-1].n if len(samples) > 1 else 0)

    def down(lo: float, hi: float) -> tuple[float, float]:
        """From a failing lo, widen down to a pass (or the evaluations' budget)."""
        while evaluate(lo) and len(order) < max_evaluations:
            hi, lo = lo, lo / widen
        return lo, hi

    def bisect(lo: float, hi: float) -> tuple[float, float]:
        while hi - lo > rel_tol * hi and len(order) < max_evaluations:
            mid = 0.5 * (lo + hi)
            if evaluate(mid):
                hi = mid
            else:
                lo = mid
        return lo, hi

    def nothing_holds(lo: float) -> SustainableRate:
        """Every rate tried down to lo failed (the evaluations' budget spent widening): none holds."""
        return found(0.0, None, ",".join(cache[lo][1]), (0.0, lo))

    def search() -> SustainableRate:
        lo, hi = guess, guess
        if evaluate(guess):
            lo, hi = down(lo, hi)
            if evaluate(lo):
                return nothing_holds(lo)
        elif not search_above:
            return found(guess, cache[guess][0], "not searched above", (guess, guess))
        else:
            while not evaluate(hi) and len(order) < max_evaluations:
                lo, hi = hi, hi * widen
        lo, hi = bisect(lo, hi)
        while cache[lo][2] < len(samples) - 1 and len(order) < max_evaluations:  # lo passed, on the short sample
            del cache[lo]  # read it again on the longer one
            if not evaluate(lo):
                break
            lo, hi = down(lo, lo)
            if evaluate(lo):
                return nothing_holds(lo)
            lo, hi = bisect(lo, hi)
        return found(lo, cache[lo][0], ",".join(cache[hi][1]) if hi in cache and cache[hi][1] else "not bracketed", (lo, hi))

    try:
        return search()
    except _NotWanted:
        return found(0.0, None, "not wanted", (0.0, guess))
