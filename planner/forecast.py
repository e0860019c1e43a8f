"""Quarterly fleet and cost-per-token forecasts: the ILP per quarter, with commitments carried forward."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from planner.bounds import DEMAND_FIELDS, held_past_bound
from planner.commitments import Lot, held, in_force, reserved_below_held
from planner.daily import (
    DayCosts,
    DayTerms,
    capacity_planned_by,
    day_costs,
    reserved_discount,
    with_pool_prices,
)
from planner.errors import InfeasibleError, InputError
from planner.evaluator import Measurements
from planner.ilp import FleetSolution
from planner.inputs import Inputs, plan_inputs
from planner.load_profile import HOURS_PER_DAY
from planner.plan_json import uncertified_message
from planner.plan_objects import Plan
from planner.scenario import GPUCandidate, QuarterSpec, Scenario


@dataclass(frozen=True)
class PoolRow:
    """One pool of a quarter's fleet at the prices its GPUs are paid, or (kind 'idle_reserved')
    the reserved GPUs of one type that no pool uses. The rows of a quarter add up to its cost."""

    kind: str  # "serving" or "idle_reserved"
    pool: str  # traffic class ("" for idle GPUs)
    gpu: str
    tp: int | None
    weight_dtype: str
    kv_dtype: str
    context_limit: int | None
    replicas: int
    gpus: int
    reserved_gpus: int  # of `gpus`, those paid as commitments
    on_demand_usd_per_gpu_hour: float
    reserved_usd_per_gpu_hour: float | None  # the type's mean committed price (None: no commitment)
    capacity_rps_per_replica: float | None
    capacity_planned_by: str | None  # where that capacity comes from (daily.capacity_planned_by)
    mixed_reserved_replicas: int | None  # the day's reserved + on-demand mix: replicas reserved all day
    planned_rps_per_replica: float | None  # what the plan sized the pool with (PoolDetail.planned_rps)

    @property
    def on_demand_gpus(self) -> int:
        return self.gpus - self.reserved_gpus

    @property
    def reserved_usd_per_hour(self) -> float:
        return self.reserved_gpus * (self.reserved_usd_per_gpu_hour or 0.0)

    @property
    def on_demand_usd_per_hour(self) -> float:
        return self.on_demand_gpus * self.on_demand_usd_per_gpu_hour

    @property
    def usd_per_hour(self) -> float:
        return self.reserved_usd_per_hour + self.on_demand_usd_per_hour


@dataclass(frozen=True)
class IdleReserved:
    """Reserved GPUs a quarter's plan leaves idle, and the cheapest plan that runs them all."""

    gpus: dict[str, int]
    usd_per_hour: float
    use_them_usd_per_hour: float | None  # None: no plan can run them all
    use_them_summary: str  # the plan that runs them, or why none can


@dataclass(frozen=True)
class UnusedPrice:
    """A price a quarter states for a GPU type its plan does not run, and why: the cheapest plan on
    that type alone for the quarter's load at its on-demand prices, beside the cheapest plan of all
    at the same prices, both with no commitment and certified as the quarter's plan is."""

    gpu: str
    usd_per_gpu_hour: float
    alone: FleetSolution | None  # None: no plan on the type alone carries the load
    why_none: str  # where alone is None: why
    cheapest: FleetSolution


@dataclass(frozen=True)
class QuarterResult:
    """One quarter: its plan, what was committed, its pools at the prices paid, what stays
    idle, and the day's load curve priced four ways (planner.daily)."""

    quarter: str
    demand_multiplier: float  # on the base scenario's peak
    plan: Plan
    reserved_gpus: dict[str, int]
    reserved_price: dict[str, float]
    gpus_by_type: dict[str, int]
    change_by_type: dict[str, int]  # against the previous quarter
    pool_rows: tuple[PoolRow, ...]
    idle: IdleReserved | None
    day: DayCosts
    unused_prices: tuple[UnusedPrice, ...] = ()
    lots: tuple[Lot, ...] = ()  # the commitments paid in the quarter, in the order made (planner.commitments)
    on_demand_price: dict[str, float] = dataclasses.field(default_factory=dict)  # per GPU-hour, each type's in the quarter
    reserved_below: tuple[str, ...] = ()  # types it states fewer reserved of than are held (commitments.reserved_below_held)

    @property
    def gpus(self) -> int:
        """GPUs in the quarter's fleet, all types together."""
        return sum(self.gpus_by_type.values())

    @property
    def gpus_paid_for(self) -> int:
        """GPUs the quarter pays for: its fleet's, and the reserved ones it leaves idle."""
        return self.gpus + (sum(self.idle.gpus.values()) if self.idle is not None else 0)

    @property
    def peak_rps(self) -> float:
        return self.plan.peak_rps

    @property
    def mean_rps(self) -> float | None:
        """The day's mean served arrival rate (the profile's mean, growth included)."""
        return self.day.mean_rps

    @property
    def cost_per_hour(self) -> float:
        return self.plan.cost_per_hour

    @property
    def cost_per_month(self) -> float:
        return self.plan.cost_per_month

    @property
    def tokens_per_hour(self) -> float:
        """At the peak rate."""
        return self.plan.tokens_per_hour

    @property
    def cost_per_million(self) -> dict[str, float]:
        """At the peak rate."""
        return self.plan.cost_per_million

    @property
    def usd_per_hour_by_kind(self) -> dict[str, float]:
        """on_demand, reserved_used, reserved_idle: the quarter's cost per hour, split by how it is paid."""
        serving = [r for r in self.pool_rows if r.kind == "serving"]
        return {
            "on_demand": sum(r.on_demand_usd_per_hour for r in serving),
            "reserved_used": sum(r.reserved_usd_per_hour for r in serving),
            "reserved_idle": sum(r.usd_per_hour for r in self.pool_rows if r.kind == "idle_reserved"),
        }

    @property
    def tokens_per_hour_at_volume(self) -> float | None:
        """The day's real token volume, per hour."""
        day = self.day.tokens_per_day
        return None if day is None else day / HOURS_PER_DAY

    @property
    def cost_per_million_at_volume(self) -> dict[str, float] | None:
        """The quarter's cost over the day's real token volume (blended, input, output)."""
        tph = self.tokens_per_hour_at_volume
        if not tph:
            return None
        scale = tph / self.plan.tokens_per_hour  # input and output tokens scale alike
        return {k: v / scale for k, v in self.plan.cost_per_million.items()}

    @property
    def utilisation(self) -> dict[str, float | None]:
        """Peak and the day's mean rate over the fleet's planned capacity (Plan.capacity_rps: the model's,
        or the capacity certification measured in simulation). Not over the day's rates (daily.replica_capacity_rps): where a
        replica's is the rate it was replayed at, the peak × headroom, that would read 1 / headroom of
        every such fleet, whatever room it has."""
        capacity = self.plan.capacity_rps
        mean = self.mean_rps
        return {"peak": self.plan.peak_rps / capacity, "mean": None if mean is None else mean / capacity}


def _check_gpus(scn: Scenario, inputs: Inputs, q: QuarterSpec, i: int) -> None:
    known = {g.id for g in scn.gpu_candidates}
    for field_name in ("prices", "availability", "reserved"):
        for gpu in getattr(q, field_name):
            if gpu not in known:
                try:
                    inputs.catalog.gpu(gpu)
                except InputError as exc:
                    raise InputError(f"forecast.quarters[{i}].{field_name}: {exc}", where=str(inputs.path)) from None
                raise InputError(
                    f"forecast.quarters[{i}].{field_name}: GPU '{gpu}' is not among the scenario's candidate gpus "
                    f"({', '.join(sorted(known))})", where=str(inputs.path),
                )


def quarter_scenario(scn: Scenario, q: QuarterSpec, multiplier: float) -> Scenario:
    """The base scenario with this quarter's demand, limit, prices and availability."""
    gpus = []
    for cand in scn.gpu_candidates:
        update = {}
        if cand.id in q.prices:
            update["price_usd_per_hour"] = q.prices[cand.id]
        if cand.id in q.availability:
            update["max_gpus"] = q.availability[cand.id]
        gpus.append(GPUCandidate(**{**cand.model_dump(), **update}))
    traffic = scn.traffic.model_copy(update={"growth": scn.traffic.growth * multiplier})
    update = {"gpus": gpus, "traffic": traffic}
    if q.context_limit is not None:
        update["context_limit"] = q.context_limit
    return scn.model_copy(update=update)


def run_forecast(inputs: Inputs, *, certify: bool | None = None) -> list[QuarterResult]:
    """Each quarter of the scenario's forecast planned, priced and carried into the next. certify:
    the quarters' plans certified by simulation or not [default: the scenario's `verify`], as the
    plan whose report embeds the forecast was (solve --verify/--no-verify)."""
    scn = inputs.scenario if certify is None else inputs.scenario.model_copy(update={"verify": certify})
    fc = scn.forecast
    if fc is None:
        raise InputError("the scenario has no forecast section", where=str(inputs.path))
    results: list[QuarterResult] = []
    previous = None
    # A lot keeps the price it was committed at, whatever on-demand prices do later, for its term.
    lots: list[Lot] = []
    term = fc.commitment_term_quarters
    commit_price_before: dict[str, float] = {}
    discount, _ = reserved_discount(scn)
    measured = Measurements()  # each quarter's plans start from what the quarters before measured
    for i, q in enumerate(fc.quarters):  # every quarter's GPU names, before the first is planned
        _check_gpus(scn, inputs, q, i)
    for i, (q, multiplier) in enumerate(zip(fc.quarters, fc.demand_multipliers(), strict=True)):
        qscn = quarter_scenario(scn, q, multiplier)
        od_price = {g.id: g.price_per_hour(inputs.catalog.gpu(g.id).price_usd_per_hour) for g in qscn.gpu_candidates}
        commit_price = {g: fc.reserved_prices.get(g, od_price[g] * (1 - discount)) for g in od_price}
        lots = in_force(lots, i)  # those whose term ended last quarter are no longer paid
        if fc.carry_forward and previous is not None:
            # Last quarter's fleet is committed: what ran on demand joins at last quarter's terms.
            for gpu, n in previous.gpus_by_type.items():
                extra = n - held(lots, gpu)
                if extra > 0:
                    lots.append(Lot(gpu, extra, commit_price_before[gpu], i, term))
        below = reserved_below_held(q.quarter, f"forecast.quarters[{i}].reserved", q.reserved,
                                    {g: held(lots, g) for g in q.reserved})
        for gpu, n in q.reserved.items():
            extra = n - held(lots, gpu)
            if extra > 0:
                lots.append(Lot(gpu, extra, commit_price[gpu], i, term))
        types = sorted({lot.gpu for lot in lots})
        reserved = {g: held(lots, g) for g in types}
        price = {g: sum(lot.gpus * lot.usd_per_gpu_hour for lot in lots if lot.gpu == g) / reserved[g] for g in types}
        plan = _quarter_plan(inputs, qscn, q, reserved, price, measured)
        commit_price = with_pool_prices(commit_price, plan, 1 - discount)
        terms = DayTerms(
            scn.autoscaling.scale_up_lead_min, scn.autoscaling.min_replicas or scn.min_replicas_per_pool, commit_price,
            f"this quarter's commitment price, on-demand × (1 − {discount:g})"
            + (" or forecast.reserved_prices" if fc.reserved_prices else ""),
        )
        day = day_costs(plan, inputs.traffic.profile, terms)
        idle = _idle_reserved(inputs, qscn, plan, reserved, price, measured)
        result = _quarter_result(q.quarter, multiplier, plan, reserved, price, previous, day, idle)
        unused = _unused_prices(inputs, qscn, q, result.gpus_by_type, measured)
        results.append(dataclasses.replace(result, unused_prices=unused, lots=tuple(lots), on_demand_price=od_price,
                                           reserved_below=below))
        previous = results[-1]
        commit_price_before = commit_price
        if not fc.carry_forward and term is None:  # a quarter's reservations, without a term, are its own
            lots = []
    return results


def quarter_error(quarter: str, message: str) -> str:
    """A forecast quarter's planning error, the quarter named. Where it blames the traffic's growth,
    the forecast's own growth is named too: a quarter's demand compounds the quarters' growth on the
    scenario's, and either can be what took it past a bound."""
    hint = " (in a forecast, the quarters' growth too: forecast.quarters[].growth)" if DEMAND_FIELDS in message else ""
    return f"forecast quarter {quarter}: {message}{hint}"


def _quarter_plan(inputs: Inputs, qscn: Scenario, q: QuarterSpec, reserved, price, measured: Measurements) -> Plan:
    """The quarter's plan; an infeasible quarter says which quarter, and flags reservations
    that the quarter's cap on their type contradicts (its availability, else the scenario's
    max_gpus): committed GPUs the cap keeps idle would be paid while the plan buys others."""
    caps = {c.id: c.max_gpus for c in qscn.gpu_candidates if c.max_gpus is not None}
    fc = qscn.forecast
    for gpu, n in reserved.items():
        cap = caps.get(gpu)
        if cap is not None and n > cap:
            stated = q.reserved.get(gpu, 0)
            # Earlier quarters' GPUs: still in their term where one is stated (carried forward or
            # reserved then), else carried forward (without either, a quarter's reservations are its own).
            if n <= stated:
                earlier = ""
            elif fc.commitment_term_quarters is not None:
                earlier = (f" ({n - stated:,} committed in earlier quarters and still in their term, "
                           f"forecast.commitment_term_quarters: {fc.commitment_term_quarters}, and {stated:,} reserved in "
                           "this quarter)")
            else:
                earlier = (f" ({n - stated:,} carried forward from earlier quarters, forecast.carry_forward: true, and "
                           f"{stated:,} reserved in this quarter)")
            what = "availability is" if gpu in q.availability else "its max_gpus (the scenario's gpus) is"
            fix = ("raise this quarter's availability" if gpu in q.availability else
                   f"raise {gpu}'s max_gpus or state this quarter's availability")
            raise InputError(
                f"forecast quarter {q.quarter}: {n:,} {gpu} GPUs are committed{earlier} but {what} {cap:,}; "
                f"a commitment is not given back: {fix}"
                + ((" or shorten the term" if fc.commitment_term_quarters is not None else
                    " or set forecast.carry_forward: false") if earlier else " or reserve fewer"),
                where=str(inputs.path),
            )
    try:
        plan = plan_inputs(inputs, qscn, explore=False, reserved={g: (n, price[g]) for g, n in reserved.items()},
                           measurements=measured)
    except (InfeasibleError, InputError) as exc:  # a quarter's own context limit or demand: name the quarter
        raise type(exc)(quarter_error(q.quarter, exc.message), where=exc.where or str(inputs.path)) from None
    # A quarter no plan of which held in simulation is refused, as `planner solve` refuses its plan: a
    # reviewer found the forecast priced it as any other (a stated fleet's audit is shown, as solve shows it).
    missed = uncertified_message(plan)
    if missed and not plan.given_fleet:
        raise InfeasibleError(quarter_error(q.quarter, missed), where=str(inputs.path))
    carried = [f for f, on in (("forecast.carry_forward", fc.carry_forward),
                               ("forecast.commitment_term_quarters", fc.commitment_term_quarters)) if on]
    held = held_past_bound(plan.solution.gpus, sum(_idle_gpus(plan, reserved).values()),
                           ", ".join(["forecast.quarters[].reserved", *carried]))
    if held:  # each type's reservations are within the bound; two of 90 million each held 180 million
        raise InfeasibleError(quarter_error(q.quarter, held), where=str(inputs.path))
    return plan


def _unused_prices(inputs: Inputs, qscn: Scenario, q: QuarterSpec, used: dict[str, int],
                   measured: Measurements) -> tuple[UnusedPrice, ...]:
    """Each price the quarter states for a GPU type its plan leaves out (UnusedPrice): a price cut
    that changes nothing would otherwise read as a premise the forecast ignored (finance_2027's H200
    at half price from 2027Q3, whose plan keeps the H100s it has committed). Both plans are
    certified as the quarter's own is (qscn's verify, which run_forecast's certify sets): by the
    model alone, 2027Q3's cheapest plan was 22 H100s, which the quarter's own certification found
    to miss its TPOT target, and the H200 read as the dearer type where simulation finds it the
    cheaper."""
    unused = sorted(g for g in q.prices if g not in used)
    if not unused:
        return ()
    free = qscn.model_copy(update={"fleet": None})  # a stated fleet's quarter too: the cheapest plans, not its own
    try:
        cheapest = plan_inputs(inputs, free, explore=False, measurements=measured).solution
    except (InfeasibleError, InputError):  # (the quarter's own plan was found: a safeguard)
        return ()
    out = []
    for gpu in unused:
        on_it = free.model_copy(update={"gpus": [c for c in free.gpu_candidates if c.id == gpu]})
        try:
            alone, why = plan_inputs(inputs, on_it, explore=False, measurements=measured).solution, ""
        except (InfeasibleError, InputError) as exc:  # no config of the type, or none that carries the load
            alone, why = None, exc.message
        out.append(UnusedPrice(gpu, q.prices[gpu], alone, why, cheapest))
    return tuple(out)


def _idle_gpus(plan: Plan, reserved: dict[str, int]) -> dict[str, int]:
    """The reserved GPUs of each type the plan leaves idle (types it leaves none of left out)."""
    used = plan.solution.gpus_by_type
    return {g: n - used.get(g, 0) for g, n in reserved.items() if n > used.get(g, 0)}


def _idle_reserved(inputs: Inputs, qscn: Scenario, plan: Plan, reserved, price,
                   measured: Measurements) -> IdleReserved | None:
    """The reserved GPUs the plan leaves idle, what they cost, and the cheapest plan that runs
    every one of them (each reserved type may then hold a pool of its own)."""
    idle = _idle_gpus(plan, reserved)
    if not idle:
        return None
    cost = sum(n * price[g] for g, n in idle.items())
    if qscn.fleet:  # planned as stated: a plan that runs them is another fleet, which is not asked for
        return IdleReserved(idle, cost, None, "the scenario states its fleet (fleet:), which leaves them idle; no "
                                              "other plan is sought")
    own_pools = qscn.model_copy(update={"forecast": qscn.forecast.model_copy(update={"reserved_pools": True})})
    try:
        alt = plan_inputs(inputs, own_pools, explore=False, reserved={g: (n, price[g]) for g, n in reserved.items()},
                          use_reserved=True, measurements=measured)
    except InfeasibleError:
        return IdleReserved(idle, cost, None, "no plan can run them all (no config of their type serves the traffic "
                                              "within the targets and caps)")
    summary = "; ".join(f"{pool.traffic_class.name}: {pool.replicas:,} × {pool.config.label(pool.traffic_class.max_model_len)}"
                        for pool in alt.pools)
    return IdleReserved(idle, cost, alt.cost_per_hour, summary)


def _pool_rows(plan: Plan, reserved, price, day: DayCosts) -> tuple[PoolRow, ...]:
    """Pools at the prices their GPUs are paid: a type's reserved GPUs go to its pools in plan
    order, the rest of each pool runs on demand; reserved GPUs left over are idle rows."""
    left = dict(reserved)
    rows = []
    mix = day.policy("mixed")
    for pool, dp in zip(plan.pools, day.pools, strict=True):
        g = pool.config.gpu.id
        n_res = min(pool.gpus, left.get(g, 0))
        left[g] = left.get(g, 0) - n_res
        rows.append(PoolRow(
            "serving", **pool.fields(), reserved_gpus=n_res, on_demand_usd_per_gpu_hour=pool.config.price_usd_per_hour,
            reserved_usd_per_gpu_hour=price.get(g), capacity_rps_per_replica=dp.capacity_rps,
            capacity_planned_by=capacity_planned_by(pool, plan),
            mixed_reserved_replicas=mix.reserved.get(dp.name, 0), planned_rps_per_replica=pool.planned_rps,
        ))
    od_price = {c.id: c.price_per_hour(plan.catalog.gpu(c.id).price_usd_per_hour) for c in plan.scenario.gpu_candidates}
    for g, n in sorted(left.items()):
        if n > 0:
            rows.append(PoolRow("idle_reserved", "", g, None, "", "", None, 0, n, n, od_price[g], price[g], None, None, None,
                                None))
    return tuple(rows)


def _quarter_result(quarter, multiplier, plan: Plan, reserved, price, previous, day, idle) -> QuarterResult:
    by_type = plan.solution.gpus_by_type
    if previous is None:  # the first quarter is the baseline: nothing to compare with
        change = {}
    else:
        before = previous.gpus_by_type
        change = {g: by_type.get(g, 0) - before.get(g, 0) for g in sorted(set(by_type) | set(before))}
    return QuarterResult(
        quarter=quarter,
        demand_multiplier=multiplier,
        plan=plan,
        reserved_gpus=dict(sorted(reserved.items())),
        reserved_price=dict(sorted(price.items())),
        gpus_by_type=by_type,
        change_by_type=change,
        pool_rows=_pool_rows(plan, reserved, price, day),
        idle=idle,
        day=day,
    )
