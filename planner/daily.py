"""The day's load curve, priced four ways on the plan's own pools and targets.

The plan is sized for the busiest hour. Hour h of the profile carries multiplier[h] of
that hour's load (headroom included), and each way of paying for the day must hold
every hour's load with the plan's configs, at the capacity per replica the plan uses:

- peak-sized, on demand: the plan's fleet all day at on-demand prices (what a plan costs today);
- peak-sized, reserved: the same fleet committed for the whole day;
- autoscaled: each pool's replicas follow the hour's load, on demand;
- reserved + on demand: replicas reserved all day plus on-demand replicas per hour, the
  cheapest mix chosen by an ILP (planner.day_mix_ilp.solve_day_mix) whose choices include
  the two before it.

Every hour, each pool carries the share of its class's load that it carries at the peak
(its replicas × capacity over the class's), so the policies differ only in how replicas
are paid and when they run.

Scaling is scheduled on the known curve: a replica needed from time t is asked for
`scale_up_lead_min` before t and paid from then (per-second billing), and released when
its last hour ends. A pool never drops below `min_replicas` replicas (or its peak size,
when that is smaller).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from planner.day_mix_ilp import DayPool, ScaleSegment, solve_day_mix
from planner.errors import InfeasibleError
from planner.load_profile import (
    HOURS_PER_DAY,
    MINUTES_PER_HOUR,
    DailyProfile,
    busiest_hour_mean_rps,
)
from planner.plan_objects import Plan, PoolDetail
from planner.scenario import Forecast, Scenario
from planner.units import (
    HOURS_PER_MONTH,
    replicas_text,
    usd_per_million_text,
    usd_per_million_tokens,
    usd_rate_text,
    usd_text,
)

SECONDS_PER_DAY = 86_400
_COVER_TOLERANCE = 1e-9  # relative: a replica count that covers the load up to float rounding

POLICIES = (
    ("peak_on_demand", "peak-sized fleet all day, on demand"),
    ("peak_reserved", "peak-sized fleet all day, reserved"),
    ("autoscaled", "autoscaled per hour, on demand"),
    ("mixed", "reserved all day + on demand per hour (ILP)"),
)


def replica_capacity_rps(pool: PoolDetail, plan: Plan) -> float:
    """Requests/s one replica of the pool holds within every target: what the day's scaling
    sizes replicas by. The one place that reads it from the plan: the capacity the plan was
    solved with (PoolDetail.planned_by), but in a plan certified by simulation no more than the
    rate its replicas held their targets at when replayed, where that capacity is not itself a rate
    held in simulation (PoolDetail.held_where_planned: not the model's, nor a log's share). A quiet hour then runs fewer replicas, each at most as loaded as at the busiest hour:
    at the model's capacity an outside replay of a certified plan (7.20 requests/s a replica
    replayed, 8.65 the model's) missed TPOT p99 by a third in the hours that packed replicas to it.
    A stated fleet (fleet:) is audited, replayed at its peak without the headroom: it carries at least
    the rate that held there (its verdict, plan_objects.peak_shortfall, says the same), and up to that
    rate × headroom where the model has room for it (the headroom is the model's estimate, as the
    verdict says): an hour's real load, below its load × headroom, then puts no replica past what held."""
    if plan.certification is None or not plan.certification.certified or pool.held_where_planned:
        return pool.planned_rps
    if plan.scenario.fleet:
        return max(pool.replay_rps, min(pool.planned_rps, pool.replay_rps * plan.scenario.traffic.headroom))
    return min(pool.planned_rps, pool.replay_rps)


def _busiest_hour_from(plan: Plan, profile: DailyProfile) -> str:
    """Where the day's busiest-hour rate comes from, for the volume's sentence. An explicit peak the
    source's own rate lies just above is the peak (traffic.load_traffic takes it so, and says why)."""
    scn = plan.scenario
    if scn.traffic.mean_rps is not None and profile.busiest_hour_rps is None:
        return "traffic.mean_rps"
    if scn.traffic.peak.method == "explicit" and busiest_hour_mean_rps(profile, plan.measured_mean_rps) == plan.measured_peak_rps:
        return "the stated peak: the source's own rate lies within a sample's spread above it"
    return "the log's busiest hour" if profile.busiest_hour_rps is not None else "the source's mean rate over its whole minutes"


def capacity_planned_by(pool: PoolDetail, plan: Plan) -> str:
    """Where replica_capacity_rps comes from, in PoolDetail.planned_by's words: "replayed" where it is
    set by the rate certification replayed the pool at (× headroom for a stated fleet, replayed at its
    peak) rather than the capacity the plan was solved with."""
    return "replayed" if replica_capacity_rps(pool, plan) != pool.planned_rps else pool.planned_by


def capacity_source(pool: PoolDetail, plan: Plan) -> str:
    """Where replica_capacity_rps comes from, when it is not the rate the plan was solved with."""
    rate = replica_capacity_rps(pool, plan)
    if rate == pool.planned_rps:
        return ""
    solved_with = {"calibration": "the model's capacity scaled by certification's ratio",
                   "bound": "the bound it was solved with",
                   "log": "a replica's share below the rate the log's arrivals missed at"}.get(pool.planned_by,
                                                                                              "the model's capacity")
    untested = "was not judged at that rate as certification judges a pool" if pool.planned_by == "log" else "was not simulated"
    held = "the rate its replicas held their targets at in simulation"
    if rate > pool.planned_rps:
        return f" ({held}, above {solved_with}, {pool.planned_rps:,.3f})"
    if rate > pool.replay_rps:  # a stated fleet's: replayed at its peak, the headroom the model's
        return (f" ({held} at the peak, {pool.replay_rps:,.3f}, × headroom {plan.scenario.traffic.headroom:g}, the "
                f"model's estimate; {solved_with}, {pool.planned_rps:,.3f}, {untested})")
    return f" ({held}; {solved_with}, {pool.planned_rps:,.3f}, {untested})"


@dataclass(frozen=True)
class DayTerms:
    """The settings of the day's policies."""

    lead_min: float  # scale-up lead time, minutes
    min_replicas: int  # replicas each pool keeps in every hour (at most its peak size)
    reserved_usd_per_gpu_hour: Mapping[str, float]  # a GPU reserved for the whole period, per type
    reserved_terms: str  # for the report: where the reserved prices come from


def reserved_discount(scn: Scenario, fleet_forecast: Forecast | None = None) -> tuple[float, str]:
    """The scenario's one reserved discount (Scenario._one_reserved_discount refuses two) and the
    field it comes from; it prices the day's curve and the forecast's commitments alike. A fleet's
    service states no forecast of its own: where it states no discount either, its fleet's forecast
    (`fleet_forecast`) gives the terms the fleet reserves at."""
    if scn.autoscaling.reserved_discount is not None:
        return scn.autoscaling.reserved_discount, "autoscaling.reserved_discount"
    if scn.forecast is not None:
        return scn.forecast.reserved_discount, "forecast.reserved_discount"
    if fleet_forecast is not None and "reserved_discount" in fleet_forecast.model_fields_set:
        return fleet_forecast.reserved_discount, "the fleet's forecast.reserved_discount"
    return 0.0, "no reserved discount stated"


def scenario_terms(scn: Scenario, on_demand_usd_per_gpu_hour: Mapping[str, float], *,
                   fleet_forecast: Forecast | None = None) -> DayTerms:
    """The scenario's autoscaling settings; reserved prices from its one statement of reserved terms
    (for a fleet's service that states none, its fleet's forecast's: reserved_discount)."""
    a = scn.autoscaling
    fc, source = scn.forecast, "forecast.reserved_prices"
    if fc is None and a.reserved_discount is None and fleet_forecast is not None:
        fc, source = fleet_forecast, "the fleet's forecast.reserved_prices"
    reserved_prices = dict(fc.reserved_prices) if fc is not None else {}
    reserved_prices = {g: p for g, p in reserved_prices.items() if g in on_demand_usd_per_gpu_hour}  # its own types
    discount, where = reserved_discount(scn, fleet_forecast)
    prices = {g: reserved_prices.get(g, p * (1 - discount)) for g, p in on_demand_usd_per_gpu_hour.items()}
    terms = f"on-demand × (1 − {discount:g}) ({where})"
    if reserved_prices:
        terms += "; " + ", ".join(f"{g} {usd_rate_text(p)}" for g, p in sorted(reserved_prices.items())) + f" ({source})"
    return DayTerms(a.scale_up_lead_min, a.min_replicas or scn.min_replicas_per_pool, prices, terms)


@dataclass(frozen=True)
class Policy:
    """One way to pay for the period: replicas reserved all period and on demand per hour."""

    key: str
    name: str
    reserved: Mapping[str, int]  # pool -> replicas reserved for the whole period
    on_demand: Mapping[str, tuple[int, ...]]  # pool -> on-demand replicas serving each hour
    usd_per_period: float
    gpu_hours_per_period: float
    days: int

    @property
    def usd_per_day(self) -> float:
        return self.usd_per_period / self.days

    @property
    def usd_per_hour(self) -> float:
        return self.usd_per_day / HOURS_PER_DAY

    @property
    def usd_per_month(self) -> float:
        return self.usd_per_hour * HOURS_PER_MONTH

    @property
    def gpu_hours_per_day(self) -> float:
        return self.gpu_hours_per_period / self.days

    def serving(self, pool: str, hour: int) -> int:
        """Replicas of `pool` serving `hour`."""
        return self.reserved.get(pool, 0) + self.on_demand[pool][hour]


def mean_served_rps(busiest_hour_rps: float | None, profile: DailyProfile, growth: float,
                    served_share: float) -> float | None:
    """The period's mean served arrival rate, requests/s: the busiest hour's mean rate (before growth)
    × the profile's mean hour over its busiest × growth × the share of requests served (the rest are
    past the context limit); None where the busiest hour's rate is unknown (no timestamps and no
    traffic.mean_rps). A fleet sized for the peak is paid every hour, so this rate, not the peak,
    sets what a token of the day costs."""
    if busiest_hour_rps is None:
        return None
    return busiest_hour_rps * profile.mean_multiplier * growth * served_share


def served_share(plan: Plan) -> float:
    """The share of the log's requests the plan's context limit serves."""
    return plan.served.requests / plan.hist.requests


def plan_mean_served_rps(plan: Plan, profile: DailyProfile) -> float | None:
    """mean_served_rps of a plan's traffic over the profile's period, from the factors day_costs reads."""
    return mean_served_rps(busiest_hour_mean_rps(profile, plan.measured_mean_rps), profile,
                           plan.scenario.traffic.growth, served_share(plan))


@dataclass(frozen=True)
class DayCosts:
    profile: DailyProfile
    terms: DayTerms
    pools: tuple[DayPool, ...]
    peak_replicas: Mapping[str, int]  # pool -> replicas in the plan (or its busiest hour's need, where more)
    class_loads_rps: Mapping[str, tuple[float, ...]]  # traffic class -> load per hour, headroom included
    loads_rps: Mapping[str, tuple[float, ...]]  # pool -> its share of its class's load per hour
    headroom: float
    input_tokens_per_request: float
    output_tokens_per_request: float
    policies: tuple[Policy, ...]
    solver_status: str
    # pool -> (replicas in the plan, its busiest hour's need) where a stated fleet has fewer than it needs
    short_pools: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    # GPU type -> (its cap, the GPUs its pools' busiest hour needs) where a stated fleet needs more than
    # the scenario's max_gpus: every policy prices what it needs, the cap set aside
    caps_set_aside: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    # What mean_rps is made of (the report shows the product): the busiest hour's mean arrival rate
    # (requests/s, before growth; None: unknown) and where it comes from, the scenario's growth, the
    # share served
    busiest_hour_rps: float | None = None
    busiest_hour_from: str = ""
    growth: float = 1.0
    served_share: float = 1.0
    # pool -> where its per-replica rate comes from, where it is not the plan's (capacity_source)
    capacity_sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def mean_rps(self) -> float | None:
        """The period's mean served arrival rate (growth included), requests/s; None when unknown."""
        return mean_served_rps(self.busiest_hour_rps, self.profile, self.growth, self.served_share)

    @property
    def tokens_per_day(self) -> float | None:
        if self.mean_rps is None:
            return None
        return self.mean_rps * SECONDS_PER_DAY * (self.input_tokens_per_request + self.output_tokens_per_request)

    def policy(self, key: str) -> Policy:
        return next(p for p in self.policies if p.key == key)

    @property
    def mean_rps_text(self) -> str:
        """mean_rps as the product the report can be checked by: the busiest hour's mean rate (which
        the sizing peak, a short-term peak, need not equal), the profile's mean multiplier, and the
        growth and served share where they are not 1, each to six significant digits, so that the
        printed factors give the printed mean to its cent (finance_2027's 400.83 × 0.6667 read
        267.23 where the mean is 267.22)."""
        text = (f"the busiest hour's mean rate, {self.busiest_hour_rps:,.6g} requests/s ({self.busiest_hour_from}), "
                f"× {self.profile.mean_multiplier:.6g} (the period's mean ÷ its busiest hour's)")
        if self.growth != 1:
            text += f", × growth {self.growth:g}"
        if self.served_share < 1:
            text += f", × {self.served_share:.6g} (the share of requests served; the rest are past the context limit)"
        return text

    @property
    def short_pools_text(self) -> str:
        """The pools a stated fleet has fewer replicas in than its busiest hour needs, as the report says them."""
        return "; ".join(f"{name}: {need} replicas where the fleet states {n}" for name, (n, need) in self.short_pools.items())

    def usd_per_million_tokens(self, key: str) -> float | None:
        """The policy's cost over the period's real token volume."""
        tokens = self.tokens_per_day
        return usd_per_million_tokens(self.policy(key).usd_per_day, tokens)

    def capacity_rps(self, key: str, traffic_class: str, hour: int) -> float:
        """What the policy's serving replicas of a class hold in an hour."""
        pol = self.policy(key)
        return sum(p.capacity_rps * pol.serving(p.name, hour) for p in self.pools
                   if self.pool_class[p.name] == traffic_class)

    @property
    def pool_class(self) -> dict[str, str]:
        return {p.name: p.name.split(":", 1)[0] for p in self.pools}


def scale_segments(hours: int, lead_min: float) -> list[ScaleSegment]:
    """The pieces of each hour and the hours whose replicas run in them, for a cyclic period.

    With lead L = 60 q + r minutes (0 ≤ r < 60), the replicas of hour h' run from
    60 h' − L. In the first 60 − r minutes of hour h, those of hours h … h + q run; in
    its last r minutes, also those of hour h + q + 1.
    """
    q, r = divmod(lead_min, MINUTES_PER_HOUR)
    q = int(q)
    out = []
    for h in range(hours):
        def window(n: int, h: int = h) -> tuple[int, ...]:
            return tuple(sorted({(h + i) % hours for i in range(n)}))

        out.append(ScaleSegment(h, (MINUTES_PER_HOUR - r) / MINUTES_PER_HOUR, window(q + 1)))
        if r > 0:
            out.append(ScaleSegment(h, r / MINUTES_PER_HOUR, window(q + 2)))
    return out


def period_cost(pools: Sequence[DayPool], reserved: Mapping[str, int], on_demand: Mapping[str, Sequence[int]],
                segments: Sequence[ScaleSegment]) -> tuple[float, float]:
    """(USD, GPU-hours) of a period: reserved replicas all period at the reserved price; an
    on-demand replica from its lead time before its first hour to its last hour's end."""
    hours = sum(s.hours for s in segments)
    usd = gpu_hours = 0.0
    for p in pools:
        n_res = reserved.get(p.name, 0)
        usd += p.reserved_usd_per_replica_hour * hours * n_res
        gpu_hours += p.gpus_per_replica * hours * n_res
        for s in segments:
            running = max(on_demand[p.name][h] for h in s.window)
            usd += p.on_demand_usd_per_replica_hour * s.hours * running
            gpu_hours += p.gpus_per_replica * s.hours * running
    return usd, gpu_hours


class UncarriedClassError(InfeasibleError):
    """A stated fleet carries none of a class within the targets: no policy holds its hours (exit 3
    where the day must be priced, a forecast; a note in an audit's report)."""


def _needed(load_rps: float, capacity_rps: float, floor: int) -> int:
    """Replicas of capacity_rps each that hold load_rps (the floor at least). A pool that carries
    nothing within the targets (a stated fleet's) takes no share of the load (day_costs)."""
    if load_rps <= 0:
        return floor
    return max(floor, math.ceil(load_rps / capacity_rps * (1 - _COVER_TOLERANCE)))


def day_costs(plan: Plan, profile: DailyProfile, terms: DayTerms) -> DayCosts:
    """The four policies for the plan's pools over the profile's period."""
    scn = plan.scenario
    hours = profile.hours
    names = {id(pool): f"{pool.traffic_class.name}: {pool.config.label(pool.traffic_class.max_model_len)}" for pool in plan.pools}
    per_replica = {id(pool): replica_capacity_rps(pool, plan) for pool in plan.pools}
    pools = tuple(
        DayPool(
            name=names[id(pool)], stream=names[id(pool)], gpu=pool.config.gpu.id,
            gpus_per_replica=pool.config.tp, capacity_rps=per_replica[id(pool)],
            min_replicas=min(terms.min_replicas, pool.replicas),
            on_demand_usd_per_replica_hour=pool.config.price_usd_per_hour * pool.config.tp,
            reserved_usd_per_replica_hour=terms.reserved_usd_per_gpu_hour[pool.config.gpu.id] * pool.config.tp,
        )
        for pool in plan.pools
    )
    rates = {pool.traffic_class.name: pool.traffic_class.rate_rps for pool in plan.pools}
    class_loads = {k: tuple(rate * m for m in profile.multipliers) for k, rate in rates.items()}
    held = {k: sum(per_replica[id(pool)] * pool.replicas for pool in plan.pools if pool.traffic_class.name == k) for k in rates}
    carried_by_none = [k for k, rps in held.items() if rps <= 0 and rates[k] > 0]
    if carried_by_none:  # a stated fleet whose every pool of a class holds nothing: no replica count carries an hour
        raise UncarriedClassError(f"the day's policies cannot be priced: no replica of the fleet carries any of class "
                                  f"{', '.join(repr(k) for k in carried_by_none)} within the targets (capacity 0 "
                                  "req/s), so no number of them holds an hour's load")
    loads = {
        names[id(pool)]: tuple(load * per_replica[id(pool)] * pool.replicas / held[pool.traffic_class.name]
                             for load in class_loads[pool.traffic_class.name])
        for pool in plan.pools
    }
    segments = scale_segments(hours, terms.lead_min)

    def policy(key: str, reserved: Mapping[str, int], on_demand: Mapping[str, tuple[int, ...]]) -> Policy:
        usd, gpu_hours = period_cost(pools, reserved, on_demand, segments)
        return Policy(key, dict(POLICIES)[key], dict(reserved), dict(on_demand), usd, gpu_hours, profile.days)

    none = {p.name: (0,) * hours for p in pools}
    scaled = {p.name: tuple(_needed(load, p.capacity_rps, p.min_replicas) for load in loads[p.name]) for p in pools}
    # A plan covers its busiest hour, so its pools hold what any hour needs; a stated fleet (fleet:) may
    # not, and a peak-sized policy at its size would price a day it cannot serve below those that serve it.
    stated = {names[id(pool)]: pool.replicas for pool in plan.pools}
    peak = {name: max(n, *scaled[name]) for name, n in stated.items()}
    all_day = {p.name: (peak[p.name],) * hours for p in pools}
    # A stated fleet short of its busiest hour is priced at what it needs, as its peak-sized policies
    # are, caps aside: under a cap its mix had no answer and the audit failed. One that carries its
    # peak within the caps needs no more than them in any hour, so nothing changes for it.
    inventory = {} if plan.given_fleet else {g.id: g.max_gpus for g in scn.gpu_candidates if g.max_gpus is not None}
    mix = solve_day_mix(pools, loads, segments, inventory=inventory, backend=scn.solver.backend,
                        time_limit_s=scn.solver.time_limit_s)
    if not mix.reserved:
        # Every hour's need is within the plan's (or priced past a stated fleet's caps), so a mix exists:
        # a solve that ends without one ran out of time (Not Solved: ilp_solver.solve_within reads CBC's
        # "Integer infeasible" after its limit so), whatever status it gives.
        raise InfeasibleError(f"the day's reserved + on-demand mix: the solver ended with status '{mix.status}' "
                              f"within solver.time_limit_s = {scn.solver.time_limit_s:g} s; raise solver.time_limit_s")
    policies = (
        policy("peak_on_demand", {}, all_day),
        policy("peak_reserved", peak, none),
        policy("autoscaled", {}, scaled),
        policy("mixed", mix.reserved, mix.on_demand),
    )
    return DayCosts(
        profile=profile, terms=terms, pools=pools, peak_replicas=peak, class_loads_rps=class_loads, loads_rps=loads,
        headroom=scn.traffic.headroom,
        busiest_hour_rps=busiest_hour_mean_rps(profile, plan.measured_mean_rps),
        busiest_hour_from=_busiest_hour_from(plan, profile),
        growth=scn.traffic.growth, served_share=served_share(plan),
        capacity_sources={names[id(pool)]: capacity_source(pool, plan) for pool in plan.pools},
        input_tokens_per_request=plan.served.mean("sum_prompt"), output_tokens_per_request=plan.served.mean("sum_output"),
        policies=policies, solver_status=mix.status,
        short_pools={name: (n, peak[name]) for name, n in stated.items() if peak[name] > n},
        caps_set_aside=_caps_set_aside(scn, pools, {name: max(need) for name, need in scaled.items()})
        if plan.given_fleet else {},
    )


CAPS_SET_ASIDE = "The stated fleet's busiest hour needs more GPUs of a type than its cap, which the policies set aside"


def _caps_set_aside(scn, pools: tuple[DayPool, ...], busiest: Mapping[str, int]) -> dict[str, tuple[int, int]]:
    """The GPU types whose cap (max_gpus, or a forecast quarter's availability) is below what a stated
    fleet's busiest hour needs of them: (cap, GPUs needed). busiest: each pool's replicas then."""
    needed: dict[str, int] = {}
    for p in pools:
        needed[p.gpu] = needed.get(p.gpu, 0) + busiest[p.name] * p.gpus_per_replica
    return {g.id: (g.max_gpus, needed[g.id]) for g in scn.gpu_candidates
            if g.max_gpus is not None and needed.get(g.id, 0) > g.max_gpus}


def with_pool_prices(usd_per_gpu_hour: Mapping[str, float], plan: Plan, factor: float = 1.0) -> dict[str, float]:
    """The prices of the scenario's GPU types, and of each other type the plan's pools run at its
    pools' price × factor: a stated fleet may run a type the scenario does not plan with, priced as its
    cost prices it (factor: 1 - the reserved discount, for a committed price)."""
    out = dict(usd_per_gpu_hour)
    for pool in plan.pools:
        out.setdefault(pool.config.gpu.id, pool.config.price_usd_per_hour * factor)
    return out


def day_section(plan: Plan, profile: DailyProfile, *, fleet_forecast: Forecast | None = None) -> str:
    """The report's section for a plan at the scenario's own prices and terms (a fleet's service that
    states no reserved terms: its fleet's forecast's); a note in its place where a stated fleet
    carries none of a class (the audit itself is reported: exit 0)."""
    on_demand = {c.id: c.price_per_hour(plan.catalog.gpu(c.id).price_usd_per_hour) for c in plan.scenario.gpu_candidates}
    try:
        costs = day_costs(plan, profile, scenario_terms(plan.scenario, with_pool_prices(on_demand, plan),
                                                        fleet_forecast=fleet_forecast))
    except UncarriedClassError as exc:
        return f"## The day's load curve\n\n{exc.message[0].upper()}{exc.message[1:]}.\n"
    return day_markdown(costs)


# ------------------------------------------------------------------ report


def _versus(change: float) -> str:
    """A relative change as the report prints it: "same" when it rounds to zero (never "−0.0%")."""
    return "same" if abs(change) < 0.0005 else f"{change:+.1%}".replace("-", "−")


def floor_text(stated: int, pools: Sequence[tuple[str, DayPool]]) -> str:
    """The replica floor as applied: the stated minimum, and the pools (labelled) whose busiest
    hour needs fewer (a pool keeps at most its peak size, so the floor never buys replicas no
    hour uses)."""
    capped = [f"{label} keeps {p.min_replicas}" for label, p in pools if p.min_replicas < stated]
    text = f"at least {stated} replica(s) per pool"
    if capped:
        text += (f" (at most each pool's peak size: {'; '.join(capped)}; plan N+1 with min_replicas_per_pool "
                 "to keep more)")
    return text


def day_markdown(costs: DayCosts, *, heading: int = 2) -> str:
    """The report's section: the curve, the four policies, and the replicas hour by hour."""
    h = "#" * heading
    prof, terms = costs.profile, costs.terms
    base = costs.policy("peak_on_demand")
    lines = [
        f"{h} The day's load curve",
        "",
        f"Profile: {prof.source}; the busiest hour is {prof.peak_to_trough:,.2f}× the quietest"
        if math.isfinite(prof.peak_to_trough) else f"Profile: {prof.source}; the quietest hour has no load",
    ]
    lines[-1] += (
        f", and the period's mean is {prof.mean_multiplier:.0%} of the busiest hour. "
        + ("Every" if costs.short_pools else "The plan is sized for the busiest hour; every")
        + f" policy below holds each hour's load × headroom {costs.headroom:g} with the plan's configs and "
        f"targets. Scale-up lead time {terms.lead_min:g} min (replicas are paid from when they are asked for), "
        f"{floor_text(terms.min_replicas, [(p.name, p) for p in costs.pools])} in every hour; reserved prices: {terms.reserved_terms}."
    )
    if costs.short_pools:
        lines[-1] += (" The stated fleet cannot carry the busiest hour: every policy holds what it needs ("
                      f"{costs.short_pools_text}).")
    if costs.caps_set_aside:
        lines[-1] += f" {CAPS_SET_ASIDE}: " + "; ".join(
            f"{need} {gpu} against a cap of {cap}" for gpu, (cap, need) in costs.caps_set_aside.items()) + "."
    tokens = costs.tokens_per_day
    lines += [
        "",
        "| Policy | $/day | $/month | GPU-hours/day | $/M tokens at the day's volume | vs peak-sized on demand |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for pol in costs.policies:
        cpm = costs.usd_per_million_tokens(pol.key)
        vs = pol.usd_per_day / base.usd_per_day - 1
        lines.append(
            f"| {pol.name} | {usd_text(pol.usd_per_day)} | {usd_text(pol.usd_per_month)} | {pol.gpu_hours_per_day:,.1f} | "
            + usd_per_million_text(cpm) + f" | {_versus(vs) if pol.key != base.key else '—'} |"
        )
    volume = (
        f"The day's volume: {tokens:,.0f} tokens ({costs.mean_rps:,.2f} requests/s on average: {costs.mean_rps_text})."
        if tokens else "The day's volume is unknown (no timestamps and no traffic.mean_rps), so no cost per token."
    )
    if tokens and prof.is_flat:  # a stated mean under a flat day: the hours below hold the peak, not the mean
        volume += (" A flat day reaches its peak in every hour, so each hour below holds the planned peak; the "
                   "volume is the mean rate's.")
    mix = costs.policy("mixed")
    reserved = ", ".join(f"{n} × {name}" for name, n in mix.reserved.items() if n) or "none"
    lines += ["", f"{volume} The ILP reserves {reserved}; a month is {HOURS_PER_MONTH} hours.", ""]
    lines += ["Replicas serving each hour (load: the pool's share of its class's load × headroom):", ""]
    lines += [f"- Pool {i}: {p.name} — {p.capacity_rps:,.{3 if costs.capacity_sources.get(p.name) else 2}f} req/s per "
              f"replica{costs.capacity_sources.get(p.name, '')}, {replicas_text(costs.peak_replicas[p.name])} at the peak"
              for i, p in enumerate(costs.pools, 1)]
    lines += ["", "| Hour | × busiest hour | " + " | ".join(
        f"Pool {i} load req/s | Pool {i} autoscaled | Pool {i} reserved + on demand" for i in range(1, len(costs.pools) + 1)) + " |",
        "|---:|---:|" + "---:|---:|---:|" * len(costs.pools)]
    auto = costs.policy("autoscaled")
    days = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
    for hour, m in enumerate(prof.multipliers):
        label = f"{hour:d}" if prof.hours == HOURS_PER_DAY else f"{days[hour // HOURS_PER_DAY]} {hour % HOURS_PER_DAY:d}"
        cells = " | ".join(
            f"{costs.loads_rps[p.name][hour]:,.2f} | {auto.serving(p.name, hour)} | "
            f"{mix.reserved.get(p.name, 0)} + {mix.on_demand[p.name][hour]}" for p in costs.pools)
        lines.append(f"| {label} | {m:.2f} | {cells} |")
    return "\n".join(lines) + "\n"
