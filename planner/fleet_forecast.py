"""A fleet's quarterly forecast: every quarter solved over the whole fleet in one ILP, with
commitments shared by the services and carried forward fleet-wide.

Per quarter (the fleet file's `forecast:`, the schema of a scenario's): every service's demand
grows by the quarter's growth; `prices` set a GPU type's on-demand price for every service;
`availability` caps the GPUs of a type the whole fleet can run; `reserved` commits GPUs of a type
at that quarter's committed price (on-demand × (1 − reserved_discount), or reserved_prices). With
carry_forward each quarter's fleet, all services together, is committed from the next quarter on
at the terms of the quarter it was committed in. Owned GPUs and the reservations of the fleet's
inventory hold in every quarter.

Tidy tables as for a scenario's forecast (planner.forecast_outputs' columns and data dictionary):
quarters (one row per quarter), services (one per service per quarter), types (one per GPU type
per quarter, adding up to the quarter's cost), limits (one per shared limit per quarter: the
quarter re-solved with one more GPU or GPU type allowed, and without the limit, and what each saves
through the forecast's last quarter, the quarters after it re-planned from the relaxed quarter with
carry_forward).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from planner.bounds import DEMAND_FIELDS
from planner.commitments import (
    Lot,
    above_on_demand_text,
    committed_after_end_usd,
    held,
    in_force,
    quarter_after,
    reserved_below_held,
    reserved_below_lines,
)
from planner.daily import plan_mean_served_rps
from planner.errors import InfeasibleError, InputError, PlannerError
from planner.evaluator import Measurements
from planner.files import output_folder
from planner.fleet import FleetInputs, Service, SharedGPU
from planner.fleet_plan import FleetPlan, SharedConstraint, TypeUse, cap_parts_text, make_fleet_plan
from planner.fleet_report import (
    TIED_SPLIT_TEXT,
    dropping_saves,
    limit_notes,
    not_served,
    priced_cells,
    repriced_text,
    unproven_text,
)
from planner.forecast import quarter_error

# One table format for both forecasts: the Column type, its cells and CSV writing.
from planner.forecast_outputs import (
    COMMITTED_AFTER_END,
    MEASURED_ONCE_TEXT,
    SPAN_COLUMNS,
    Column,
    _csv,
    _table,
    after_end_headline,
    after_end_text,
    certified_flag,
    datapackage,
    growth_text,
    item_column,
    model_only_lines,
    next_commitments_text,
    span_totals,
    summed,
    table_file,
    unverified_speed_lines,
    write_texts,
)
from planner.plan_json import uncertified_message
from planner.plan_objects import Plan
from planner.report import rejected_text
from planner.units import (
    HOURS_PER_MONTH,
    HOURS_PER_QUARTER,
    gpus_text,
    hours_text,
    multiplier_text,
    quarters_text,
    usd_per_million_text,
    usd_per_million_tokens,
    usd_rate_text,
    usd_text,
)
from planner.verification import unverified_speed


@dataclass(frozen=True)
class Commitment:
    """GPUs of one type committed from a quarter on, at the terms of the quarter they were priced in."""

    gpu: str
    gpus: int
    usd_per_gpu_hour: float
    terms_quarter: str  # the quarter whose prices set usd_per_gpu_hour
    basis: str  # how: "on-demand $2.99 x (1 - 0.3)" or "reserved_prices"


@dataclass(frozen=True)
class Relaxed:
    """One relaxation of a quarter's shared limit, from that quarter on (_relaxed_fleet), priced
    through the forecast's last quarter (_priced_to_end): what it saves from the quarter through the
    last (its own quarter included), and on what the commitments held in the last quarter cost after
    it; either negative where it costs more. None where the quarters after it cannot be re-planned,
    from the relaxed quarter or from the quarter as planned (`why` says which and why), or, after the
    end, where no commitment term prices it."""

    saves_to_end_usd: float | None
    saves_after_end_usd: float | None
    why: str = ""


@dataclass(frozen=True)
class ToEnd:
    """A quarter's shared limit raised by one, and dropped, priced through the forecast's last quarter.
    proven: every solve they rest on, the quarter's own and each re-plan, reached a proven optimum."""

    plus_one: Relaxed
    removed: Relaxed
    proven: bool = True


@dataclass(frozen=True)
class ServiceDay:
    """A service's day in a quarter: its mean served arrival rate over its day (requests/s), and its
    prompt + output tokens over the quarter at that rate; None where its traffic gives no mean rate."""

    mean_rps: float | None
    tokens: int | None


@dataclass(frozen=True)
class FleetQuarter:
    quarter: str
    demand_multiplier: float  # on every service's base peak
    plan: FleetPlan
    added_commitments: dict[str, int]  # GPUs committed this quarter (stated or carried forward), per type
    change_by_type: dict[str, int]  # GPUs in use against the previous quarter
    commitments: tuple[Commitment, ...] = ()  # the lots behind added_commitments
    lots: tuple[Lot, ...] = ()  # the commitments beyond the inventory's paid in the quarter, in the order made
    on_demand_price: dict[str, float] = field(default_factory=dict)  # per GPU-hour, each type's in the quarter
    reserved_below: tuple[str, ...] = ()  # types it states fewer reserved of than are held (commitments.reserved_below_held)
    to_end: dict[str, ToEnd] = field(default_factory=dict)  # its shared limits over the rest of the forecast, by name
    # the quarters after it re-planned by the model from it as planned: what its to_end rows are measured against
    replanned: _Replan | None = None

    @property
    def cost_per_hour(self) -> float:
        return self.plan.cost_per_hour

    @property
    def cost_usd(self) -> float:
        """The quarter's cost: every hour of it at the fleet's cost per hour."""
        return self.cost_per_hour * HOURS_PER_QUARTER

    def service(self, plan: Plan) -> Service:
        """The fleet's service one of the quarter's plans is of."""
        return self.plan.fleet.services[next(i for i, p in enumerate(self.plan.plans) if p is plan)]

    def service_day(self, plan: Plan) -> ServiceDay:
        """The day of one of the quarter's service plans: its own profile's mean rate (its scenario's
        day, as `planner solve` prices it; flat where it states none and its log spans no day), the
        quarter's growth included. The fleet runs at its peak size all day, so these tokens, not the
        peak's, are what its cost buys."""
        mean_rps = plan_mean_served_rps(plan, self.service(plan).inputs.traffic.profile)
        if mean_rps is None:
            return ServiceDay(None, None)
        per_request = plan.served.mean("sum_prompt") + plan.served.mean("sum_output")
        return ServiceDay(mean_rps, round(mean_rps * HOURS_PER_QUARTER * 3600 * per_request))

    @property
    def day_tokens(self) -> int | None:
        """Every service's tokens over the quarter at its day's volume (their whole tokens summed, so
        that the services table adds up to it); None where a service's volume is unknown."""
        tokens = [self.service_day(p).tokens for p in self.plan.plans]
        return None if None in tokens else sum(tokens)

    @property
    def usd_per_million_tokens(self) -> float | None:
        """The quarter's cost over its tokens at the day's volume."""
        return _at_volume(self.cost_usd, self.day_tokens)

    def paid_usd_per_million_tokens(self, plan: Plan) -> float | None:
        """A service's cost as paid over its tokens at its day's volume."""
        return _at_volume(self.plan.paid_usd_per_hour(plan) * HOURS_PER_QUARTER, self.service_day(plan).tokens)

    @property
    def usd_per_hour_by_kind(self) -> dict[str, float]:
        """on_demand, committed_used, committed_idle: the quarter's cost per hour by how it is paid."""
        types = self.plan.types
        idle = sum(t.idle_committed * t.committed_usd_per_hour / t.committed for t in types if t.committed)
        committed = sum(t.committed_usd_per_hour for t in types)
        return {"on_demand": sum(t.on_demand * t.on_demand_usd_per_gpu_hour for t in types),
                "committed_used": committed - idle, "committed_idle": idle}


@dataclass(frozen=True)
class _QuarterStart:
    """What a quarter of the forecast is planned from: the commitments in force (those it makes among
    them), the inventory they and its availability make, and its prices."""

    lots: tuple[Lot, ...]
    made: tuple[Commitment, ...]
    inventory: dict[str, SharedGPU]
    price: dict[str, float]
    below: tuple[str, ...]


def _start_quarter(fleet: FleetInputs, i: int, lots: Sequence[Lot], previous_gpus: Mapping[str, int] | None) -> _QuarterStart:
    """Quarter i's commitments and inventory, after the lots held before it and (with carry_forward)
    the GPUs by type the quarter before it ran (None: the first quarter)."""
    fc, base = fleet.spec.forecast, fleet.spec.inventory
    q, where = fc.quarters[i], f"forecast.quarters[{i}]"
    lots = in_force(lots, i)  # those whose term ended last quarter are no longer paid
    if fc.carry_forward and previous_gpus is not None:
        carried = {g: n - _committed(base, lots, g) for g, n in previous_gpus.items()}
    else:
        carried = {}
    # A quarter's prices hold in that quarter (as in a scenario's forecast).
    types = sorted(set(base) | {lot.gpu for lot in lots} | set(q.prices) | set(q.availability) | set(q.reserved)
                   | {g for g, n in carried.items() if n > 0})
    price = {g: q.prices.get(g, fleet.on_demand_price(g)) for g in types}
    term = fc.commitment_term_quarters
    made: list[Commitment] = []
    for gpu, extra in carried.items():  # at the terms of the quarter they ran in
        if extra > 0:
            made.append(_commit(lots, _commitment(fleet, fc, fc.quarters[i - 1], gpu, extra), i, term))
    below = reserved_below_held(q.quarter, f"{where}.reserved", q.reserved,
                                {g: _committed(base, lots, g) for g in q.reserved})
    for gpu, n in q.reserved.items():  # at this quarter's
        extra = n - _committed(base, lots, gpu)
        if extra > 0:
            made.append(_commit(lots, _commitment(fleet, fc, q, gpu, extra), i, term))
    inventory = _quarter_inventory(base, lots, price, q.availability, types, where, fleet)
    return _QuarterStart(tuple(lots), tuple(made), inventory, price, tuple(below))


def _lots_after(fleet: FleetInputs, lots: tuple[Lot, ...]) -> tuple[Lot, ...]:
    """The lots the next quarter starts from, of those a quarter held: a quarter's reservations,
    without carry_forward or a term, are its own."""
    fc = fleet.spec.forecast
    return () if not fc.carry_forward and fc.commitment_term_quarters is None else lots


def run_fleet_forecast(fleet: FleetInputs, *, certify: bool | None = None) -> list[FleetQuarter]:
    """Each quarter of the fleet's forecast planned over the whole fleet, commitments shared. certify:
    every quarter's plan certified by simulation or not [default: the services' `verify`]. Each
    quarter's shared limits are priced (make_fleet_plan's price_limits), and with carry_forward over
    the rest of the forecast too (_priced_to_end)."""
    fc = fleet.spec.forecast
    if fc is None:
        raise InputError("the fleet file has no forecast section", where=str(fleet.path))
    out: list[FleetQuarter] = []
    lots: tuple[Lot, ...] = ()  # commitments beyond the inventory's, each for its term (planner.commitments)
    previous: FleetQuarter | None = None
    # each quarter's services start from what the quarters before measured (planner.evaluator.Measurements)
    measured: dict[int, Measurements] = {}
    for i, (q, multiplier) in enumerate(zip(fc.quarters, fc.demand_multipliers(), strict=True)):
        where = f"forecast.quarters[{i}]"
        start = _start_quarter(fleet, i, lots, previous.plan.joint.gpus_by_type if previous else None)
        try:
            plan = make_fleet_plan(fleet.with_inventory(start.inventory), explore=False, price_limits=True,
                                   relaxed_gpus=fc.carry_forward and i + 1 < len(fc.quarters), growth=multiplier,
                                   certify=certify, measurements=measured)
        except InfeasibleError as exc:
            # A quarter's availability replaces its types' inventory caps, which the message calls caps.
            blamed = sorted(g for g in q.availability if f"{g} ≤ " in exc.message)
            stated = f" ({', '.join(blamed)}: capped by {where}.availability)" if blamed else ""
            raise InfeasibleError(quarter_error(q.quarter, exc.message + stated), where=exc.where) from None
        except InputError as exc:
            if DEMAND_FIELDS not in exc.message:  # named by its own field already
                raise
            # a service's demand past a bound in this quarter, which the quarters' growth compounds
            raise InputError(quarter_error(q.quarter, exc.message), where=exc.where) from None
        plan = replace(plan, constraints=tuple(_with_forecast_source(c, fleet.spec.inventory, start.lots,
                                                                     q.availability, where)
                                               for c in plan.constraints))
        missed = [f"service '{p.scenario.name}': {m}" for p in plan.plans if (m := uncertified_message(p))]
        if missed:  # as `planner solve` refuses a fleet whose plan did not hold in simulation
            raise InfeasibleError(quarter_error(q.quarter, "; ".join(missed)), where=str(fleet.path))
        by_type = dict(plan.joint.gpus_by_type)
        before = previous.plan.joint.gpus_by_type if previous else {}
        change = {} if previous is None else {g: by_type.get(g, 0) - before.get(g, 0)
                                              for g in sorted(set(by_type) | set(before))}
        added: dict[str, int] = {}
        for made in start.made:
            added[made.gpu] = added.get(made.gpu, 0) + made.gpus
        out.append(FleetQuarter(q.quarter, multiplier, plan, added, change, start.made, start.lots, start.price,
                                start.below))
        previous = out[-1]
        lots = _lots_after(fleet, start.lots)
    return _priced_to_end(fleet, out, measured)


def _priced_to_end(fleet: FleetInputs, results: list[FleetQuarter], measured: dict[int, Measurements]) -> list[FleetQuarter]:
    """Each quarter's priced limits (SharedConstraint) priced through the forecast's last quarter too:
    with carry_forward, what a quarter runs beyond the commitments still in their term is committed
    from the next quarter on, so a limit relaxed in it changes the quarters after it. Where raising a
    limit by one, or dropping it, makes its quarter cheaper, the quarters after it are re-planned by
    the model twice, from what the relaxed quarter runs and from the quarter as planned (_replanned),
    and the difference is what the relaxation changes there, whatever the model's re-plans differ by
    from the certified plans. A limit relaxed stays relaxed where it is the same limit (_relaxed_fleet):
    one that saves nothing in its own quarter leaves that quarter's plan as it is, and so saves what
    it saves from the next quarter that keeps it, whose row prices it from there (the rows are made
    from the last quarter back). Without carry_forward, or in the last quarter, a limit changes its
    own quarter only."""
    kept_after: dict[str, tuple[str, ToEnd]] = {}  # a lasting limit's row in the nearest later quarter that keeps it
    out = []
    for i in reversed(range(len(results))):
        quarter = _QuarterToEnd(fleet, results, i, measured, kept_after)
        priced = {c.name: quarter.priced(c) for c in results[i].plan.constraints}
        kept_after.update({c.name: (results[i].quarter, priced[c.name]) for c in results[i].plan.constraints
                           if _lasting(fleet, i, c)})
        baseline = quarter.baseline if isinstance(quarter.baseline, _Replan) else None
        out.append(replace(results[i], to_end=priced, replanned=baseline))
    return out[::-1]


class _QuarterToEnd:
    """Quarter i's limits priced through the forecast's last quarter (_priced_to_end), each relaxation's
    re-plan of the quarters after it made once, against one re-plan from the quarter as planned."""

    def __init__(self, fleet: FleetInputs, results: list[FleetQuarter], i: int, measured: dict[int, Measurements],
                 kept_after: dict[str, tuple[str, ToEnd]]):
        self.fleet, self.results, self.i, self.measured, self.kept_after = fleet, results, i, measured, kept_after
        fc = fleet.spec.forecast
        self.r = results[i]
        self.later = fc.carry_forward and i + 1 < len(results)  # (make_fleet_plan keeps relaxed GPUs only then)
        self.unchanged = None if fc.commitment_term_quarters is None else 0.0  # what the quarter alone changes after the end
        relaxed = any(c.plus_one_gpus is not None or c.removed_gpus is not None for c in self.r.plan.constraints)
        self.baseline = _replanned(fleet, results, i, self.r.plan.joint.gpus_by_type, measured) if self.later and relaxed else None
        self.paths: dict[tuple, _Replan | str] = {}  # one re-plan for the relaxations that leave the same fleet and GPUs

    def priced(self, c: SharedConstraint) -> ToEnd:
        plus_one, plus_one_proven = self._relaxed(c, "plus_one", c.plus_one_usd_per_hour, c.plus_one_gpus)
        removed, removed_proven = self._relaxed(c, "removed", c.removed_usd_per_hour, c.removed_gpus)
        return ToEnd(plus_one, removed, proven=c.proven and plus_one_proven and removed_proven)

    def _relaxed(self, c: SharedConstraint, what: str, cost: float, gpus) -> tuple[Relaxed, bool]:
        """One relaxation of c priced through the last quarter, and whether the re-plans it rests on are proven."""
        own = _quarter_saving_usd(self.r, cost)
        if gpus is None:  # the quarter keeps its plan
            if not (self.later and _lasting(self.fleet, self.i, c) and c.name in self.kept_after):
                return Relaxed(own, self.unchanged), True
            quarter, row = self.kept_after[c.name]
            after = getattr(row, what)
            # a reason is said once, from the quarter whose re-plan failed (a chain of rows keeps it)
            why = (after.why if not after.why or after.why.startswith(_FROM)
                   else f"{_FROM} {quarter}, the next quarter that keeps it: {after.why}")
            saves = None if after.saves_to_end_usd is None else own + after.saves_to_end_usd
            return Relaxed(saves, after.saves_after_end_usd, why), row.proven
        baseline = self.baseline
        if isinstance(baseline, str):
            return Relaxed(None, None, f"the quarters after it cannot be re-planned by the model from the quarter as "
                                       f"planned: {baseline}"), True
        fleet, key = _relaxed_fleet(self.fleet, self.i, c, plus_one=what == "plus_one")
        if (key, gpus) not in self.paths:
            self.paths[(key, gpus)] = _replanned(fleet, self.results, self.i, dict(gpus), self.measured)
        path = self.paths[(key, gpus)]
        if isinstance(path, str):
            return Relaxed(None, None, f"the quarters after it cannot be re-planned by the model from the relaxed "
                                       f"quarter: {path}"), True
        after = None if self.unchanged is None else baseline.after_end_usd - path.after_end_usd
        later = sum(b - x for b, x in zip(baseline.usd_per_hour, path.usd_per_hour, strict=True)) * HOURS_PER_QUARTER
        return Relaxed(own + later, after), baseline.proven and path.proven


def _quarter_saving_usd(r: FleetQuarter, cost_usd_per_hour: float) -> float:
    """What a quarter priced at `cost_usd_per_hour` instead of its plan's saves over the quarter."""
    return (r.cost_per_hour - cost_usd_per_hour) * HOURS_PER_QUARTER


_FROM = "priced as from"


def _lasting(fleet: FleetInputs, i: int, c: SharedConstraint) -> bool:
    """Whether limit c of quarter i is one that holds in other quarters too: max_gpu_types, or a cap of
    the inventory (not the quarter's availability)."""
    return c.gpu is None or c.gpu not in fleet.spec.forecast.quarters[i].availability


def _relaxed_fleet(fleet: FleetInputs, i: int, c: SharedConstraint, *, plus_one: bool) -> tuple[FleetInputs, tuple]:
    """The fleet the quarters after quarter i are re-planned on once c is relaxed there, and a key
    for it: a cap of the inventory (owned + reserved + max_new) and max_gpu_types hold in every
    quarter, so they stay raised by one, or dropped, in those that keep them; a quarter's availability
    is its own, so the quarters after it keep theirs (the fleet as it is, key ())."""
    spec = fleet.spec
    if not _lasting(fleet, i, c):
        return fleet, ()
    if c.gpu is None:
        update = {"max_gpu_types": c.limit + 1 if plus_one else None}
    else:
        held = spec.inventory[c.gpu]
        raised = held.model_copy(update={"max_new": held.max_new + 1 if plus_one else None})
        update = {"inventory": {**spec.inventory, c.gpu: raised}}
    return replace(fleet, spec=spec.model_copy(update=update)), (c.name, plus_one)


@dataclass(frozen=True)
class _Replan:
    usd_per_hour: tuple[float, ...]  # each later quarter's cost
    after_end_usd: float  # what the commitments held in the last quarter cost after it (0 without a term)
    proven: bool  # every re-plan reached a proven optimum


def _replanned(fleet: FleetInputs, results: list[FleetQuarter], i: int, gpus: Mapping[str, int],
               measured: dict[int, Measurements]) -> _Replan | str:
    """The quarters after quarter i re-planned by the model, quarter i having run `gpus` (carried
    forward), at the capacities certification measured (not simulated themselves); or, where a later
    quarter cannot be planned so (a commitment past its availability, no plan within its caps), why."""
    fc = fleet.spec.forecast
    lots, previous, costs, proven = _lots_after(fleet, results[i].lots), gpus, [], True
    for j in range(i + 1, len(results)):
        try:
            start = _start_quarter(fleet, j, lots, previous)
            plan = make_fleet_plan(fleet.with_inventory(start.inventory), explore=False, price_limits=False,
                                   growth=results[j].demand_multiplier, certify=False, measurements=measured)
        except _CommittedOverCap as exc:
            return f"carried forward, {fc.quarters[j].quarter} would hold {exc.over}"
        except PlannerError as exc:
            return f"{fc.quarters[j].quarter}: {exc.message}"
        except ValidationError as exc:  # an inventory a relaxed cap took past what one may state
            return f"{fc.quarters[j].quarter}: {exc.errors()[0]['msg']}"
        costs.append(plan.cost_per_hour)
        proven = proven and plan.joint.status == "Optimal"
        previous, lots = plan.joint.gpus_by_type, _lots_after(fleet, start.lots)
    after = committed_after_end_usd(start.lots, len(results) - 1, fc.commitment_term_quarters)
    return _Replan(tuple(costs), after or 0.0, proven)


def _with_forecast_source(c: SharedConstraint, base: dict[str, SharedGPU], lots: Sequence[Lot], availability: dict[str, int],
                          where: str) -> SharedConstraint:
    """A quarter's priced limit named by where its cap comes from: the quarter's availability, or the
    fleet file's inventory, whose new GPUs the forecast's own commitments count against (the quarter's
    inventory, _quarter_inventory, holds those as reserved, and would read '94 reserved + 2 new')."""
    if c.gpu is None:
        return c
    if c.gpu in availability:
        committed = _committed(base, lots, c.gpu)
        text = f"{where}.availability" + (f"; {committed:,} owned or committed" if committed else "")
    else:
        text = cap_parts_text(base[c.gpu]) + " in the inventory"
        extra = held(lots, c.gpu)
        if extra:
            text += f", {extra:,} of the {base[c.gpu].max_new:,} new already committed by the forecast"
    return replace(c, limit_text=text)


def _commitment(fleet: FleetInputs, fc, q, gpu: str, gpus: int) -> Commitment:
    """`gpus` of `gpu` committed at quarter q's terms: what one costs an hour, for as long as the
    forecast runs (reserved_prices, else q's on-demand price less reserved_discount)."""
    if gpu in fc.reserved_prices:
        return Commitment(gpu, gpus, fc.reserved_prices[gpu], q.quarter, "reserved_prices")
    on_demand = q.prices.get(gpu, fleet.on_demand_price(gpu))
    return Commitment(gpu, gpus, on_demand * (1 - fc.reserved_discount), q.quarter,
                      f"on demand {usd_rate_text(on_demand)} × (1 − {fc.reserved_discount:g})")


def _commit(lots: list[Lot], made: Commitment, start: int, term: int | None) -> Commitment:
    """Add what `made` commits to the lots held, from the quarter of index `start` for `term`; returns it."""
    lots.append(Lot(made.gpu, made.gpus, made.usd_per_gpu_hour, start, term))
    return made


def _committed(base, lots: list[Lot], gpu: str) -> int:
    shared = base.get(gpu)
    return (shared.committed if shared else 0) + held(lots, gpu)


class _CommittedOverCap(InputError):
    """A quarter's commitments past its cap of the type; `over` says so without the advice on the fleet
    file (for a re-plan the forecast itself carried there: _replanned)."""

    def __init__(self, message: str, *, where: str, over: str):
        super().__init__(message, where=where)
        self.over = over


def _quarter_inventory(base, lots, price, availability, types, where, fleet) -> dict[str, SharedGPU]:
    """The inventory of a quarter: the base's owned and reserved GPUs, the commitments made since
    (their mean price kept per type), the quarter's prices, and its availability as the type's cap."""
    out = {}
    for g in types:
        shared = base.get(g, SharedGPU())
        extra = [lot for lot in lots if lot.gpu == g]
        reserved = shared.reserved + held(extra, g)
        reserved_cost = shared.reserved * (shared.reserved_usd_per_hour or 0.0) + sum(lot.gpus * lot.usd_per_gpu_hour
                                                                                        for lot in extra)
        committed = shared.owned + reserved
        cap = shared.cap
        if g in availability:
            if availability[g] < committed:
                raise _CommittedOverCap(f"{where}.availability: {committed:,} {g} GPUs are committed but availability "
                                        f"is {availability[g]:,}", where=str(fleet.path),
                                        over=f"{committed:,} {g} GPUs committed, over its availability of {availability[g]:,}")
            cap = availability[g]  # the quarter's availability replaces the inventory's cap
        elif cap is not None and committed > cap:  # committed GPUs the cap would keep idle, paid all the same
            raise _CommittedOverCap(f"{where}: {committed:,} {g} GPUs are committed but the inventory allows {cap:,} "
                                    "(owned + reserved + max_new); a commitment is not given back: state this quarter's "
                                    f"availability of {g} or raise its max_new", where=str(fleet.path),
                                    over=f"{committed:,} {g} GPUs committed, over the inventory's {cap:,} (owned + "
                                    "reserved + max_new)")
        out[g] = SharedGPU(
            owned=shared.owned, owned_usd_per_hour=shared.owned_usd_per_hour, reserved=reserved,
            reserved_usd_per_hour=reserved_cost / reserved if reserved else None,
            max_new=None if cap is None else max(0, cap - committed), price_usd_per_hour=price[g],
        )
    return out


# ------------------------------------------------------------------ tables


def _kind(kind: str, per: float = 1.0):
    return lambda r: r.usd_per_hour_by_kind[kind] * per


QUARTER_COLUMNS: tuple[Column, ...] = (
    Column("quarter", "string", "calendar quarter, e.g. 2027Q1", lambda r: r.quarter),
    Column("demand_multiplier", "number", "every service's demand over its base scenario's", lambda r: r.demand_multiplier),
    Column("services", "integer", "services planned", lambda r: len(r.plan.plans)),
    Column("gpus", "integer", "GPUs the fleet runs", lambda r: r.plan.gpus),
    Column("on_demand_gpus", "integer", "of those, GPUs paid on demand", lambda r: sum(t.on_demand for t in r.plan.types)),
    Column("committed_gpus", "integer", "owned and reserved GPUs, in use or idle", lambda r: sum(t.committed for t in r.plan.types)),
    Column("committed_idle_gpus", "integer", "committed GPUs no service uses (paid all the same)",
           lambda r: sum(t.idle_committed for t in r.plan.types)),
    Column("on_demand_usd_per_hour", "number", "on-demand GPUs at on-demand prices, USD per hour", _kind("on_demand")),
    Column("committed_used_usd_per_hour", "number", "committed GPUs in use at their committed prices, USD per hour",
           _kind("committed_used")),
    Column("committed_idle_usd_per_hour", "number", "idle committed GPUs at their committed prices, USD per hour",
           _kind("committed_idle")),
    Column("total_usd_per_hour", "number", "the fleet's cost: the three above together, USD per hour", lambda r: r.cost_per_hour),
    Column("total_usd_per_month", "number", f"the fleet's cost per month ({HOURS_PER_MONTH} hours), USD",
           lambda r: r.cost_per_hour * HOURS_PER_MONTH),
    Column("total_usd", "number", f"the fleet's cost over the {{period}} ({HOURS_PER_QUARTER:,} hours a quarter), USD",
           lambda r: r.cost_per_hour * HOURS_PER_QUARTER, total=True),
    # The services' whole tokens summed, so that the services table adds up to this column (each
    # rounded on its own, the total rounded on its own was a token off their sum).
    Column("tokens_per_hour_at_peak", "number", "prompt + output tokens per hour, every service at its peak rate "
           "(services.tokens_per_hour_at_peak summed)", lambda r: sum(round(p.tokens_per_hour) for p in r.plan.plans),
           digits=0),
    Column("usd_per_million_tokens_at_peak", "number", "total cost / all services' tokens at their peak rates, USD per million",
           lambda r: usd_per_million_tokens(r.cost_per_hour, sum(p.tokens_per_hour for p in r.plan.plans))),
    Column("tokens", "number", "prompt + output tokens over the {period} at the day's real volume, every service at its "
           "day's mean served rate (services.tokens summed; empty where a service's mean rate is unknown)",
           lambda r: r.day_tokens, digits=0, total=True),
    Column("usd_per_million_tokens", "number", "total_usd / tokens: USD per million tokens at the day's real volume",
           lambda r: r.usd_per_million_tokens),
)

SERVICE_COLUMNS: tuple[Column, ...] = (
    Column("quarter", "string", "calendar quarter (quarters.quarter)", lambda x: x[0].quarter),
    Column("service", "string", "the service (its scenario's name)", lambda x: x[1].scenario.name),
    Column("model", "string", "the model it serves (catalog id)", lambda x: x[1].model.id),
    item_column("peak_rps", "number", "its planning peak, served requests/s (growth included, before headroom)"),
    Column("split_threshold", "integer", "total-token threshold of its long-context split (empty: one pool)",
           lambda x: x[1].solution.threshold),
    Column("pools", "string", "its pools: replicas × config", lambda x: "; ".join(
        f"{p.traffic_class}: {p.replicas:,} x {p.config}" for p in x[1].solution.pools)),
    Column("gpus", "integer", "GPUs it runs", lambda x: x[1].solution.gpus),
    item_column("own_usd_per_hour", "number", "its GPUs at its candidates' on-demand prices, USD per hour", "cost_per_hour"),
    Column("paid_usd_per_hour", "number", "its GPUs at what a GPU in use of each type costs the fleet on average "
           "(types.paid_usd_per_gpu_hour: the type's committed and on-demand GPUs together, its idle commitments "
           "aside); with the types table's idle commitments they add up to quarters.total_usd_per_hour",
           lambda x: x[0].plan.paid_usd_per_hour(x[1])),
    Column("tokens_per_hour_at_peak", "number", "prompt + output tokens per hour at its peak rate",
           lambda x: x[1].tokens_per_hour, digits=0),
    Column("paid_usd_per_million_tokens_at_peak", "number", "paid cost / its tokens at its peak rate, USD per million",
           lambda x: usd_per_million_tokens(x[0].plan.paid_usd_per_hour(x[1]), x[1].tokens_per_hour)),
    Column("day_profile", "string", "the day (or week) its day_mean_rps is read over: as its scenario states it, "
           "measured from its log, or flat (none stated and no log spanning a day)",
           lambda x: x[0].service(x[1]).inputs.traffic.profile.source),
    Column("day_mean_rps", "number", "its mean served arrival rate over its day (or week), requests/s: its busiest "
           "hour's mean rate (traffic.mean_rps where stated, else its source's) × its day's mean hour over its busiest "
           "(1 for a flat day) × its traffic.growth × the quarter's demand_multiplier × the share of its requests "
           "served (empty: no timestamps and no traffic.mean_rps)", lambda x: x[0].service_day(x[1]).mean_rps),
    Column("tokens", "number", "prompt + output tokens over the quarter at day_mean_rps, each request at the mean "
           "prompt and output of its served requests (empty where day_mean_rps is)",
           lambda x: x[0].service_day(x[1]).tokens, digits=0),
    Column("paid_usd_per_million_tokens", "number", "paid_usd_per_hour over the quarter / tokens: USD per million "
           "tokens at its day's real volume (empty where tokens is)", lambda x: x[0].paid_usd_per_million_tokens(x[1])),
    Column("rejected_share", "number", "share of its requests longer than its context limit: not served, so not in "
           "its peak, tokens or cost", lambda x: x[1].rejected_share),
)


def _at_volume(usd: float, tokens: int | None) -> float | None:
    """USD per million tokens at the day's volume; None where the volume is unknown."""
    return None if tokens is None else usd_per_million_tokens(usd, tokens)


def _total_usd_per_million_tokens(t: dict) -> float | None:
    """The total row's cost over its tokens at the day's volume."""
    return _at_volume(t["total_usd"], t["tokens"])


TYPE_COLUMNS: tuple[Column, ...] = (
    Column("quarter", "string", "calendar quarter (quarters.quarter)", lambda x: x[0].quarter),
    item_column("gpu", "string", "GPU type"),
    item_column("committed_gpus", "integer", "owned and reserved GPUs of the type", "committed"),
    item_column("gpus", "integer", "GPUs of the type the services run", "used"),
    item_column("on_demand_gpus", "integer", "of those, beyond the committed ones", "on_demand"),
    item_column("idle_committed_gpus", "integer", "committed GPUs no service uses", "idle_committed"),
    item_column("cap", "integer", "most GPUs of the type the fleet may run (empty: no cap)"),
    Column("cap_binds", "boolean", "the fleet runs as many GPUs of the type as the cap allows",
           lambda x: _binds(x[1])),
    item_column("on_demand_usd_per_gpu_hour", "number", "the quarter's on-demand price, USD per GPU-hour"),
    item_column("committed_usd_per_hour", "number", "all committed GPUs of the type, used or not, USD per hour"),
    item_column("paid_usd_per_gpu_hour", "number", "what a GPU of the type in use costs the fleet on average: committed "
           "and on-demand GPUs together, idle commitments aside, USD per GPU-hour (empty: none in use)"),
    item_column("usd_per_hour", "number", "committed + on-demand GPUs of the type, USD per hour; a quarter's rows add up "
           "to quarters.total_usd_per_hour"),
)

def _to_end(relaxation: str | None, field_name: str) -> Callable[[tuple[FleetQuarter, SharedConstraint]], Any]:
    """A limit's row's cell: a field of its ToEnd, or of one relaxation's (Relaxed); a reason that is
    none is null."""
    def cell(x: tuple[FleetQuarter, SharedConstraint]):
        priced = x[0].to_end.get(x[1].name)
        if priced is None:
            return None
        value = getattr(priced if relaxation is None else getattr(priced, relaxation), field_name)
        return None if value == "" else value
    return cell


LIMIT_COLUMNS: tuple[Column, ...] = (
    Column("quarter", "string", "calendar quarter (quarters.quarter)", lambda x: x[0].quarter),
    Column("constraint", "string", "the shared limit: a GPU type's cap ('h100-sxm GPUs') or the most GPU types the "
           "fleet may run ('GPU types', max_gpu_types); as `planner solve --json` names its constraints",
           lambda x: x[1].name),
    Column("gpu", "string", "the GPU type a cap limits (empty: the limit on GPU types)", lambda x: x[1].gpu),
    Column("limit", "integer", "most GPUs of the type (or GPU types) the quarter's fleet may run", lambda x: x[1].limit),
    Column("source", "string", "where the limit comes from: the inventory's GPUs (and those the forecast committed), "
           "a quarter's availability, or max_gpu_types", lambda x: x[1].limit_text),
    Column("used", "integer", "GPUs of the type (or GPU types) the quarter's fleet runs", lambda x: x[1].used),
    Column("binds", "boolean", "the fleet runs all the limit allows", lambda x: x[1].binds),
    Column("fleet_usd_per_hour", "number", "the quarter's fleet cost as planned (quarters.total_usd_per_hour), USD per "
           "hour", lambda x: x[0].cost_per_hour),
    Column("plus_one_usd_per_hour", "number", "the quarter's fleet re-solved with one more GPU (or GPU type) allowed, "
           "by the model (at the capacities certification measured, where it ran; not simulated itself; with the "
           "quarters after it: plus_one_saves_to_end_usd), USD per hour", lambda x: x[1].plus_one_usd_per_hour),
    Column("removed_usd_per_hour", "number", "the quarter's fleet re-solved without the limit, as "
           "plus_one_usd_per_hour is, USD per hour", lambda x: x[1].removed_usd_per_hour),
    Column("proven", "boolean", "every solve the two costs rest on, the quarter's own too, reached a proven optimum "
           "(false: one stopped at solver.time_limit_s, and a saving is partly the solver's gap)", lambda x: x[1].proven),
    Column("plus_one_saves_to_end_usd", "number", "what one more GPU (or GPU type) allowed from the quarter on saves "
           "from it through the forecast's last quarter, the quarter's own saving included, USD (negative: it costs "
           "more): with carry_forward, each later quarter re-planned by the model from what the quarter before it "
           "runs, against the same re-plan from the quarter as planned, a cap of the inventory or max_gpu_types kept "
           "raised in the later quarters that keep it (a quarter's availability is raised in that quarter alone); "
           "such a lasting limit that saves nothing in its own quarter leaves that quarter's plan as it is, and takes "
           "the amount of its row in the next quarter that keeps it; without carry_forward, the quarter's own saving. "
           "Rows are not to be added: a row counts the later quarters' relief from the same limit too (empty: the "
           "later quarters cannot be re-planned; plus_one_to_end_why says why)",
           _to_end("plus_one", "saves_to_end_usd")),
    Column("plus_one_saves_after_end_usd", "number", "what one more allowed saves on the commitments held in the "
           "forecast's last quarter, over the rest of their term after it, outside the forecast's total "
           "(total.committed_after_end_usd), USD (negative: they cost more; empty: no commitment term prices them, "
           "or the later quarters cannot be re-planned)", _to_end("plus_one", "saves_after_end_usd")),
    Column("plus_one_to_end_why", "string", "why plus_one_saves_to_end_usd is empty: which later quarter cannot be "
           "re-planned, and why", _to_end("plus_one", "why")),
    Column("removed_saves_to_end_usd", "number", "what the limit dropped from the quarter on saves through the "
           "forecast's last quarter, as plus_one_saves_to_end_usd is, USD", _to_end("removed", "saves_to_end_usd")),
    Column("removed_saves_after_end_usd", "number", "what the limit dropped saves on the commitments held in the last "
           "quarter, after it, as plus_one_saves_after_end_usd is, USD", _to_end("removed", "saves_after_end_usd")),
    Column("removed_to_end_why", "string", "why removed_saves_to_end_usd is empty, as plus_one_to_end_why says",
           _to_end("removed", "why")),
    Column("to_end_proven", "boolean", "every solve the four savings rest on, the quarter's own and each re-plan of a "
           "later quarter, reached a proven optimum (false: one stopped at solver.time_limit_s)",
           _to_end(None, "proven")),
)

# One row: the quarters' cost summed as written, and what the forecast's commitments cost after its end,
# which that sum leaves out (the Markdown's headline says both).
TOTAL_COLUMNS: tuple[Column, ...] = (
    *SPAN_COLUMNS, *summed(QUARTER_COLUMNS),
    Column("usd_per_million_tokens", "number", "total_usd / tokens: USD per million tokens at the day's real volume "
           "over the {period}", _total_usd_per_million_tokens),
    COMMITTED_AFTER_END,
)

TABLES = {"quarters": QUARTER_COLUMNS, "services": SERVICE_COLUMNS, "types": TYPE_COLUMNS, "limits": LIMIT_COLUMNS,
          "total": TOTAL_COLUMNS}


def _total_row(results: list[FleetQuarter], quarters: list[list[str]]) -> dict:
    """The total table's row: the quarters' cost summed as written (`quarters`: their table), and what
    the commitments cost after the last quarter."""
    after = committed_after_end_usd(results[-1].lots, len(results) - 1, _term(results[-1].plan.fleet))
    return span_totals(quarters, QUARTER_COLUMNS, after)


def fleet_forecast_tables(results: list[FleetQuarter]) -> dict[str, str]:
    quarters = _table(QUARTER_COLUMNS, results)
    rows: dict[str, list] = {
        "services": [(r, p) for r in results for p in r.plan.plans],
        "types": [(r, t) for r in results for t in r.plan.types],
        "limits": [(r, c) for r in results for c in r.plan.constraints],
        "total": [_total_row(results, quarters)],
    }
    return {"quarters": _csv(quarters), **{name: _csv(_table(TABLES[name], rows[name])) for name in rows}}


def _binds(t: TypeUse) -> bool:
    return t.cap is not None and t.used >= t.cap


def _gpus(t: TypeUse) -> str:
    return f"{t.used:,} {t.gpu}"


def _term(fleet: FleetInputs) -> int | None:
    """The forecast's commitment term in quarters (None: a commitment is held to the end, unpriced after it)."""
    fc = fleet.spec.forecast
    return None if fc is None else fc.commitment_term_quarters


def _unpriced_at_the_end(results: list[FleetQuarter], fleet: FleetInputs) -> float:
    """What the forecast's own commitments cost per hour at its end where they run on unpriced
    (Forecast.unpriced_after_end; the inventory's are the fleet's, said apart)."""
    fc = fleet.spec.forecast
    return sum(lot.usd_per_hour for lot in results[-1].lots) if fc is not None and fc.unpriced_after_end else 0.0


def fleet_forecast_markdown(name: str, results: list[FleetQuarter], fleet: FleetInputs) -> str:
    """The forecast for a person: the quarters' totals first, then the commitments and their terms,
    the GPU types (caps that bind), what each quarter's shared limits cost, and what each service
    costs as paid, with what that means."""
    first, last = results[0], results[-1]
    total = sum(r.cost_per_hour * HOURS_PER_QUARTER for r in results)
    per_million = _total_usd_per_million_tokens(_total_row(results, _table(QUARTER_COLUMNS, results)))
    lines = [
        f"# Forecast: {name}",
        "",
        (f"**{first.quarter}: fleet {_fleet_gpus(first)}, {usd_text(total)} for the quarter" if len(results) == 1 else
         f"**{first.quarter} → {last.quarter}: fleet {_fleet_gpus(first)} → {_fleet_gpus(last)}, "
         f"{usd_text(first.cost_per_hour * HOURS_PER_QUARTER)} → {usd_text(last.cost_per_hour * HOURS_PER_QUARTER)} per "
         f"quarter; {quarters_text(len(results))} cost {usd_text(total)}")
        + (f", {usd_per_million_text(per_million)} per million tokens at the day's real volume"
           + _flat_by_default_text(results) if per_million is not None else "")
        + after_end_headline(committed_after_end_usd(results[-1].lots, len(results) - 1, _term(fleet)), last.quarter,
                             _unpriced_at_the_end(results, fleet))
        + ".**",
        "",
        *not_served(first.plan.plans),
        *model_only_lines([p for r in results for p in r.plan.plans], services=True),
        *unverified_speed_lines([(r.quarter, p) for r in results for p in r.plan.plans], services=True),
        "Every quarter is one ILP over every service, commitments shared, planned afresh: a service may move to other "
        "GPU types from one quarter to the next.",
        "",
        "| Quarter | Demand × base | GPUs in use (change) | Committed: in use / idle | $/hour: on demand + committed in use "
        "+ idle = total | $/quarter | $/M tokens at peak | $/M tokens at the day's volume |",
        "|---|---:|---|---|---|---:|---:|---:|",
    ]
    for r in results:
        gpus = ", ".join(_gpus(t) + (f" ({r.change_by_type[t.gpu]:+,d})" if r.change_by_type.get(t.gpu) else "")
                         for t in r.plan.types if t.used)
        committed = ", ".join(f"{t.committed - t.idle_committed:,} / {t.idle_committed:,} {t.gpu}"
                              for t in r.plan.types if t.committed) or "—"
        k = r.usd_per_hour_by_kind
        tokens = sum(p.tokens_per_hour for p in r.plan.plans)
        lines.append(
            f"| {r.quarter} | {multiplier_text(r.demand_multiplier)} | {gpus} | {committed} | {usd_text(k['on_demand'])} + "
            f"{usd_text(k['committed_used'])} + {usd_text(k['committed_idle'])} = {usd_text(r.cost_per_hour)} | "
            f"{usd_text(r.cost_per_hour * HOURS_PER_QUARTER)} | {usd_per_million_text(usd_per_million_tokens(r.cost_per_hour, tokens))} | "
            f"{usd_per_million_text(r.usd_per_million_tokens)} |"
        )
    lines.append(f"| **Total** | | | | | **{usd_text(total)}** | | **{usd_per_million_text(per_million)}** |")
    idle = [f"- **{r.quarter}: " + ", ".join(f"{t.idle_committed:,} {t.gpu}" for t in r.plan.types if t.idle_committed)
            + f" committed GPU(s) idle**, {usd_text(r.usd_per_hour_by_kind['committed_idle'])}/hour paid whether used or not."
            for r in results if r.usd_per_hour_by_kind["committed_idle"] > 0]
    if idle:
        lines += ["", *idle]
    budget = fleet.spec.budget_usd_per_month
    if budget is not None:  # enforced on every quarter (a fleet over it exits 3), so said where it is close
        tight = min(results, key=lambda r: budget - r.plan.cost_per_month)
        lines += ["", f"Budget: {usd_text(budget)} per month (`budget_usd_per_month`), every quarter's fleet within it; "
                  f"the closest, {tight.quarter}, leaves {usd_text(budget - tight.plan.cost_per_month)} of it a month."]
    lines += reserved_below_lines(text for r in results for text in r.reserved_below)
    limits = _limits_section(results, fleet)
    lines += ["", *_commitments_section(results, fleet), "", *_types_section(results, fleet), "",
              *([*limits, ""] if limits else []), *_services_section(results)]
    lines += [
        "",
        f"{hours_text(quarters=True)} Amounts are US dollars. Demand × base "
        f"multiplies every service's base peak by the quarters' growth, {growth_text(fleet.spec.forecast)}. Each service is planned at its peak "
        "as in `planner solve` (certification by simulation as its scenario asks)."
        + (f" {MEASURED_ONCE_TEXT}" if any(p.certification is not None for p in results[0].plan.plans) else "")
        + " $/M tokens at peak divides the "
        "quarter's cost by the tokens of every service at its peak at once: a floor on the price per token, since no "
        f"service runs at its peak all day. {_day_volume_text(first)} The tables are in "
        + ", ".join(f"`{table_file(name, t)}`" for t in TABLES) + f", their columns described in "
        f"`{name}_forecast_datapackage.json`.",
    ]
    return "\n".join(lines) + "\n"


def _flat_by_default(r: FleetQuarter) -> list[Plan]:
    """The quarter's service plans priced flat because their scenario states no day (and their log spans none)."""
    return [p for p in r.plan.plans if r.service(p).inputs.scenario.traffic.profile is None
            and r.service(p).inputs.traffic.profile.is_flat and r.service_day(p).mean_rps is not None]


def _flat_by_default_text(results: list[FleetQuarter]) -> str:
    """For the headline: the share of the forecast's tokens whose day is an assumption the files do not state."""
    flat = sum(r.service_day(p).tokens for r in results for p in _flat_by_default(r))
    if not flat:
        return ""
    share = flat / sum(r.day_tokens for r in results)
    return f" ({share:.0%} of those tokens of services that state no day, priced flat)"


def _day_volume_text(r: FleetQuarter) -> str:
    """What the day's volume is made of, what the quarter's cost paid over it assumes, and the services
    whose day is flat (with their share of the tokens) or unknown."""
    text = ("$/M tokens at the day's volume divides it by the tokens every service serves at its day's mean rate "
            "(`services.day_mean_rps`: its busiest hour's mean rate × its day's mean hour over its busiest × growth × "
            "the share of its requests served), the quarter paid as this forecast pays it: the fleet at its peak size, "
            "with any idle commitments, every hour. Releasing on-demand GPUs in quiet hours would cost less: the day "
            "sections of the fleet's `planner solve` report price each service's day four ways, as if it ran alone.")
    tokens = r.day_tokens

    def named(plans: list[Plan]) -> str:
        return ", ".join(p.scenario.name + (f" ({r.service_day(p).tokens / tokens:.0%} of the tokens)" if tokens else "")
                         for p in plans)

    unknown = [p for p in r.plan.plans if r.service_day(p).mean_rps is None]
    default = _flat_by_default(r)
    # (by identity: plans compared by value would compare their arrays)
    stated = [p for p in r.plan.plans if r.service(p).inputs.traffic.profile.is_flat
              and all(p is not q for q in (*unknown, *default))]
    if stated:
        text += f" Flat as stated, every hour at its busiest hour's rate: {named(stated)}."
    if default:
        text += (f" Flat because no day is stated and its log spans none, every hour at its busiest hour's rate (an "
                 f"assumption: state `traffic.profile`): {named(default)}.")
    if unknown:
        text += (f" No day's volume (no timestamps and no traffic.mean_rps), so no fleet figure: "
                 f"{', '.join(p.scenario.name for p in unknown)}.")
    return text


def _commitments_section(results: list[FleetQuarter], fleet: FleetInputs) -> list[str]:
    """The commitments the forecast makes, each at its price and the terms it was priced at, and
    what the total leaves out: a commitment's term beyond the last quarter."""
    out = ["## Commitments", ""]
    held = [f"{s.owned:,} {g} owned at {usd_rate_text(s.owned_usd_per_hour)}" for g, s in fleet.spec.inventory.items() if s.owned]
    held += [f"{s.reserved:,} {g} reserved at {usd_rate_text(s.reserved_usd_per_hour)}"
             for g, s in fleet.spec.inventory.items() if s.reserved]
    if held:
        out += ["Held in every quarter (the fleet's inventory), per GPU-hour: " + ", ".join(held) + ".", ""]
    lots = [(r.quarter, c) for r in results for c in r.commitments]
    if not lots:
        return [*out, "No commitments beyond the inventory's.", "", _held_at_the_end(results, fleet)]
    fc = fleet.spec.forecast
    carried = fc is not None and fc.carry_forward
    term = _term(fleet)
    if term is not None:
        how = (f"Made by the forecast: from the quarter it starts, a commitment is paid for {term} "
               f"quarter{'s' if term != 1 else ''}, used or not (forecast.commitment_term_quarters); the inventory's "
               "are held in every quarter." + (" With carry_forward a quarter commits, from the next quarter on, the "
                                               "GPUs the fleet ran beyond its commitments, at the terms of the quarter "
                                               "they ran in." if carried else ""))
    elif carried:
        how = ("Made by the forecast: from the quarter it starts, a commitment is paid in every quarter to the "
               "forecast's end, used or not. With carry_forward a quarter commits, from the next quarter on, the GPUs "
               "the fleet ran beyond its commitments, at the terms of the quarter they ran in.")
    else:
        how = ("Made by the forecast: without carry_forward, a commitment a quarter states (`reserved`) holds in that "
               "quarter only, paid used or not.")
    if term is None:
        out += [how, "", "| From | GPUs committed | $/GPU-hour | Priced at | Terms of |", "|---|---|---:|---|---|"]
        out += [f"| {quarter} | +{c.gpus:,} {c.gpu} | {usd_rate_text(c.usd_per_gpu_hour)} | {c.basis} | {c.terms_quarter} |"
                for quarter, c in lots]
    else:
        out += [how, "", "| From | Through | GPUs committed | $/GPU-hour | Priced at | Terms of |",
                "|---|---|---|---:|---|---|"]
        out += [f"| {quarter} | {quarter_after(quarter, term - 1)} | +{c.gpus:,} {c.gpu} | "
                f"{usd_rate_text(c.usd_per_gpu_hour)} | {c.basis} | {c.terms_quarter} |" for quarter, c in lots]
        out += ["", after_end_text([r.quarter for r in results], results[-1].lots, term)
                + (" The inventory's own commitments have no term in the fleet file: they are held in every quarter, "
                   "and what they cost after the forecast is not in this figure." if any(
                       s.committed for s in fleet.spec.inventory.values()) else "")]
    above = above_on_demand_text(results)
    if above:
        out += ["", above]
    if term is None and carried:
        out += ["", f"The total counts each commitment to {results[-1].quarter} only: whatever term it runs beyond "
                "(a one-year reservation made late in the forecast) is spend this forecast does not show "
                "(forecast.commitment_term_quarters states the term and prices it)."]
    return [*out, "", _held_at_the_end(results, fleet)]


def _held_at_the_end(results: list[FleetQuarter], fleet: FleetInputs) -> str:
    """What the last quarter leaves committed (the inventory's and the forecast's), and what
    carry_forward would commit next at the last quarter's terms: spend past the forecast's end."""
    last = results[-1]
    committed = [t for t in last.plan.types if t.committed]
    usd = sum(t.committed_usd_per_hour for t in committed)
    fc, term = fleet.spec.forecast, _term(fleet)
    # With a term the forecast's lots fall away after the end: no quarter's run rate to quote.
    text = (f"Held at the end of {last.quarter}: " + ", ".join(f"{t.committed:,} {t.gpu}" for t in committed)
            + f", {usd_text(usd)}/hour" + ("" if term else f" ({usd_text(usd * HOURS_PER_QUARTER)} a quarter)")
            + ", owned and reserved together." if committed else f"Nothing is committed at the end of {last.quarter}.")
    # What stays committed into the next quarter: the inventory's, and the forecast's lots (every one
    # without a term, those still in theirs with one).
    staying = in_force(last.lots, len(results))
    base = fleet.spec.inventory
    kept = {t.gpu: _committed(base, staying, t.gpu) for t in last.plan.types}
    beyond = {t.gpu: t.used - kept[t.gpu] for t in last.plan.types if t.used > kept[t.gpu]}
    kept_usd = sum(s.committed_usd_per_hour for s in base.values()) + sum(lot.usd_per_hour for lot in staying)
    if fc is not None and fc.carry_forward and beyond:
        lots = [_commitment(fleet, fc, fc.quarters[-1], gpu, n) for gpu, n in beyond.items()]
        more = sum(c.gpus * c.usd_per_gpu_hour for c in lots)
        text += next_commitments_text(last.quarter, [(c.gpus, c.gpu, usd_rate_text(c.usd_per_gpu_hour)) for c in lots],
                                      more, kept_usd + more, term=term)
    return text


def _fleet_gpus(r: FleetQuarter) -> str:
    """GPUs in use, and those paid for where committed ones stand idle."""
    idle = r.plan.idle_committed
    return f"{gpus_text(r.plan.gpus)} in use" + (f" ({r.plan.gpus + idle:,} paid for)" if idle else "")


def _types_section(results: list[FleetQuarter], fleet: FleetInputs) -> list[str]:
    out = ["## GPU types", "",
           "| Quarter | Type | Committed | In use | On demand | Cap | $/GPU-hour on demand | $/GPU-hour as paid |",
           "|---|---|---:|---:|---:|---|---:|---:|"]
    for r in results:
        for t in r.plan.types:
            cap = "—" if t.cap is None else f"{t.cap:,}" + (" (binds)" if _binds(t) else "")
            # as the prices it averages are shown (usd_rate_text): all committed h200s at $4.445 read $4.45
            paid = usd_rate_text(t.paid_usd_per_gpu_hour) if t.used else "—"
            out.append(f"| {r.quarter} | {t.gpu} | {t.committed:,} | {t.used:,} | {t.on_demand:,} | {cap} | "
                       f"{usd_rate_text(t.on_demand_usd_per_gpu_hour)} | {paid} |")
    binding = [f"{r.quarter} {t.gpu}" for r in results for t in r.plan.types if _binds(t)]
    if binding:
        out += ["", "At its cap (" + ", ".join(binding) + "), the fleet runs no more GPUs of the type and serves the "
                "rest on other types: a higher cap may make that quarter cheaper (what one more GPU, and no cap, "
                "would save there: below)." + _committed_at_caps(results, fleet)]
    return out


def _limits_section(results: list[FleetQuarter], fleet: FleetInputs) -> list[str]:
    """What each quarter's shared limits cost (make_fleet_plan's price_limits; the limits table has
    every one): the rows of those that bind, cost, or are not proven to cost nothing; the others are
    counted."""
    priced = [(r, c) for r in results for c in r.plan.constraints]
    if not priced:
        return []
    out = ["## What the shared limits cost", ""]
    rows = [(r, c) for r, c in priced if c.binds or not c.proven or dropping_saves(c, r.cost_per_hour)]
    if not rows:
        return [*out, "No shared limit binds in any quarter or rules out a cheaper fleet: re-solved without each, "
                "every quarter's fleet costs the same."]
    carried = fleet.spec.forecast.carry_forward
    # those that save in their quarter, or after it (a lasting limit the quarter does not reach yet)
    saving = [(r, c) for r, c in priced if c.proven and (dropping_saves(c, r.cost_per_hour) or _saves_after(r, c))]
    out += ["Each quarter's shared limits that bind or cost, re-solved for that quarter alone with one more GPU (or "
            "GPU type) allowed and without the limit, " + repriced_text([p for r in results for p in r.plan.plans])
            + (f" With carry_forward, what a re-solved quarter runs beyond the commitments still in their term would be "
               f"committed from the next quarter on: the table after this one prices each relaxation through "
               f"{results[-1].quarter}." if carried and saving else
               "" if carried else " Without carry_forward, a quarter's limit changes that quarter only.")
            + (f" The other limits ({len(priced) - len(rows)} of {len(priced)} across the quarters) neither bind nor "
               "cost anything in their own quarter" + _later_only_text(len([x for x in saving if x not in rows])) + "."
               if len(rows) < len(priced) else ""),
            "",
            "| Quarter | Limit | Used | Binds | Fleet $/hour | Fleet $/hour, one more allowed | Saves | "
            "Fleet $/hour without it | Saves |",
            "|---|---|---:|---|---:|---:|---:|---:|---:|"]
    for r, c in rows:
        out.append(f"| {r.quarter} | {c.name} ≤ {c.limit:,} ({c.limit_text}) | {c.used:,} | {'yes' if c.binds else 'no'} "
                   f"| {usd_text(r.cost_per_hour)} | {priced_cells(c, r.cost_per_hour)} |")
    if saving and carried:
        out += ["", *_to_end_table(saving, results, _term(fleet))]
    elif saving:  # the rest of the forecast counts in quarters
        out += ["", f"Over its quarter ({HOURS_PER_QUARTER:,} hours), what each saves: " + "; ".join(
            f"{r.quarter} {c.name}, {usd_text(_quarter_saving_usd(r, c.plus_one_usd_per_hour))} with one more allowed "
            f"and {usd_text(_quarter_saving_usd(r, c.removed_usd_per_hour))} without it"
            for r, c in saving) + "."]
    # one status a quarter, however many of its rows are unproven
    unproven = {r.quarter: r.plan.joint.status for r, c in rows if not c.proven}
    if unproven:
        out += ["", unproven_text("the quarter's solve", fleet.spec.solver.time_limit_s, ended="how each quarter's own "
                                  "solve ended: " + "; ".join(f"{q} {status}" for q, status in unproven.items()))]
    return out + limit_notes([(f"{r.quarter} ", c, r.cost_per_hour) for r, c in rows],
                             type_rule=bool(fleet.spec.max_gpu_types), in_quarter=carried)


def _later_only_text(n: int) -> str:
    """Of the limits that cost nothing in their own quarter, those that do from a later quarter on."""
    if not n:
        return ""
    return f" ({n:,} of them {'costs' if n == 1 else 'cost'} from a later quarter on: the table after this one)"


def _saves_after(r: FleetQuarter, c: SharedConstraint) -> bool:
    """Whether a relaxation of c changes the quarters after r's, or what is held after the last, by a
    cent or more, or cannot be priced there."""
    priced = r.to_end.get(c.name)
    if priced is None:
        return False
    return any(x.saves_to_end_usd is None or abs(x.saves_to_end_usd - _quarter_saving_usd(r, cost)) >= 0.005
               or abs(x.saves_after_end_usd or 0.0) >= 0.005
               for x, cost in ((priced.plus_one, c.plus_one_usd_per_hour), (priced.removed, c.removed_usd_per_hour)))


def _to_end_table(saving: list[tuple[FleetQuarter, SharedConstraint]], results: list[FleetQuarter],
                  term: int | None) -> list[str]:
    """The limits that cost, priced through the forecast's last quarter (ToEnd): in their quarter,
    from it through the last (its own included), and (with a term) on the commitments held after it;
    then what the re-plans they are measured against cost beside the forecast's own quarters."""
    last = results[-1].quarter
    after = term is not None
    out = [f"What each relaxation saves from its quarter through {last} ({HOURS_PER_QUARTER:,} hours a quarter), that "
           "quarter's saving included: the quarters after it are re-planned by the model twice, from what the relaxed "
           "quarter runs and from the quarter as planned, and the difference is what the relaxation changes there. A "
           "cap of the inventory, raised by one (or dropped), stays so in the later quarters that keep it, as "
           "max_gpu_types does: from its quarter on; a quarter's availability is its own, and the later quarters keep "
           "theirs. So a row counts the later quarters' own relief from the same limit too: rows are not to be added. "
           "Such a limit that saves nothing in its own quarter leaves that quarter's plan as it is, and saves what it "
           "saves from the next quarter that keeps it."
           + (f" After {last}: what it saves on the commitments still held then, over the rest of their {term}-quarter "
              f"term, outside the forecast's total; the whole effect is that and the amount through {last} together."
              if after else "")
           + " A negative amount is a cost: commitments carried from a cheaper quarter can cost the later ones more.",
           "",
           f"| Quarter | Limit | One more allowed: its quarter | from its quarter through {last}"
           + (f" | after {last}" if after else "")
           + f" | Without it: its quarter | from its quarter through {last}" + (f" | after {last}" if after else "") + " |",
           "|---|---|" + "---:|" * (6 if after else 4)]
    reasons: dict[str, tuple[int, list[str]]] = {}  # each reason once, numbered as met, with the rows it is of
    unproven = False
    for r, c in saving:
        priced = r.to_end[c.name]
        mark = "" if priced.proven else " ‡"  # † is the first table's: its quarter's own solves
        unproven = unproven or not priced.proven
        cells = []
        for x, cost in ((priced.plus_one, c.plus_one_usd_per_hour), (priced.removed, c.removed_usd_per_hour)):
            cells.append(usd_text(_quarter_saving_usd(r, cost)))
            if x.saves_to_end_usd is None:
                n, rows = reasons.setdefault(x.why, (len(reasons) + 1, []))
                if f"{r.quarter} {c.name}" not in rows:
                    rows.append(f"{r.quarter} {c.name}")
                cells.append(f"— ({n})")
            else:
                cells.append(usd_text(x.saves_to_end_usd) + mark)
            if after:
                cells.append("—" if x.saves_after_end_usd is None else usd_text(x.saves_after_end_usd) + mark)
        out.append(f"| {r.quarter} | {c.name} | " + " | ".join(cells) + " |")
    if reasons:
        out += ["", *(f"({n}) {', '.join(rows)}: {why}." for why, (n, rows) in reasons.items())]
    out += _replanned_lines(saving, results, term)
    if unproven:
        out += ["", "‡ A solve the row rests on (a later quarter's re-solve of the same limit, or a re-plan of a later "
                "quarter) stopped at `solver.time_limit_s` before proving its optimum: the amount is partly the solver's "
                "gap, not the limit's price."]
    return out


def _replanned_lines(saving: list[tuple[FleetQuarter, SharedConstraint]], results: list[FleetQuarter],
                     term: int | None) -> list[str]:
    """For each quarter whose rows rest on a re-plan of the quarters after it from it as planned, that
    re-plan beside the forecast's own later quarters, quarter by quarter (an outside audit subtracted a
    row's saving from the forecast's total and reached a figure no plan makes: the re-plan by the model
    alone already differed from the forecast by about one GPU's price)."""
    lines = []
    for i, r in enumerate(results):  # (by identity: quarters compared by value would compare their plans' arrays)
        if r.replanned is None or not any(x is r for x, _ in saving):
            continue
        later = results[i + 1:]
        replanned = sum(r.replanned.usd_per_hour) * HOURS_PER_QUARTER
        own = sum(x.cost_per_hour for x in later) * HOURS_PER_QUARTER
        apart = "; ".join(f"{x.quarter} {usd_text((cost - x.cost_per_hour) * HOURS_PER_QUARTER)}"
                          for x, cost in zip(later, r.replanned.usd_per_hour, strict=True))
        text = (f"What {r.quarter}'s savings are measured against: from {r.quarter} as planned, the model re-plans "
                f"{later[0].quarter}" + (f"–{later[-1].quarter}" if len(later) > 1 else "")
                + f" at {usd_text(replanned)}, where this forecast's own "
                f"{'quarters cost' if len(later) > 1 else 'quarter costs'} {usd_text(own)} (apart: {apart})")
        if term is not None:
            own_after = committed_after_end_usd(results[-1].lots, len(results) - 1, term) or 0.0
            text += (f", and commits {usd_text(r.replanned.after_end_usd)} after {results[-1].quarter} where the "
                     f"forecast commits {usd_text(own_after)} ({usd_text(r.replanned.after_end_usd - own_after)} apart)")
        lines.append(text + ". Each saving is the difference between this re-plan and one from the relaxed quarter, "
                     "both by the model: it is not to be taken off this forecast's own totals, which no re-plan "
                     "reproduces exactly.")
    return ["", *lines] if lines else []


def _committed_at_caps(results: list[FleetQuarter], fleet: FleetInputs) -> str:
    """With carry_forward, what a quarter at a cap runs beyond the commitments still in their term
    after it is committed from the next quarter on: the cap's price reaches past that quarter, into
    commitments the analyst signs for (fleet_2027q1's 2027Q2 H100 cap: 2 H100s, 14 H200s and 9 L40S
    held a year). Those are the next quarter's lots at the capped quarter's terms; a quarter's own
    `reserved:` is not one of them. A cap in the last quarter commits nothing in the forecast: the
    text on what is held at the end says what carry_forward would commit next."""
    fc = fleet.spec.forecast
    if fc is None or not fc.carry_forward:
        return ""
    term = _term(fleet)
    parts = []
    for r, after in itertools.pairwise(results):
        lots = [c for c in after.commitments if c.terms_quarter == r.quarter]
        if not lots or not any(_binds(t) for t in r.plan.types):
            continue
        per_hour = sum(c.gpus * c.usd_per_gpu_hour for c in lots)
        held_for = (f"{usd_text(per_hour * HOURS_PER_QUARTER * term)} over its {term}-quarter term" if term else
                    f"{usd_text(per_hour * HOURS_PER_QUARTER)} a quarter to the forecast's end")
        parts.append(f"{r.quarter}'s " + ", ".join(f"{c.gpus:,} {c.gpu}" for c in lots)
                     + f", {usd_text(per_hour)}/hour, {held_for}")
    if not parts:
        return ""
    return (" With carry_forward, what such a quarter runs beyond the commitments still in their term after it is "
            "committed from the next quarter on (" + "; ".join(parts) + "): a higher cap there changes what is "
            "committed, not only that quarter's cost.")


def _services_section(results: list[FleetQuarter]) -> list[str]:
    names = [p.scenario.name for p in results[0].plan.plans]
    out = ["## Services, as paid", "",
           "| Service | " + " | ".join(f"{r.quarter} $/hour · $/M tokens at the day's volume" for r in results) + " | Requests over its context limit |",
           "|---|" + "---|" * len(results) + "---:|"]
    for i, service in enumerate(names):
        cells = []
        for r in results:
            plan = r.plan.plans[i]
            gpus = " + ".join(f"{n:,} {g}" for g, n in plan.solution.gpus_by_type.items())
            per_million = r.paid_usd_per_million_tokens(plan)
            shown = "—" if per_million is None else f"{usd_per_million_text(per_million)}/M"
            cells.append(f"{usd_text(r.plan.paid_usd_per_hour(plan))} ({gpus}) · {shown}")
        out.append(f"| {service} | " + " | ".join(cells) + f" | {rejected_text(results[0].plan.plans[i])} |")
    out += ["", "$/hour as paid: a service's GPUs at what a GPU of each type in use costs the fleet on average (the "
            "type's committed and on-demand GPUs together, its idle commitments aside; the types table's last "
            "column). The services and the idle commitments add up to the quarter's total (before each is rounded to "
            "the cent). $/M tokens: that cost over the service's tokens at its day's volume (idle commitments, paid "
            "by no service, are in the fleet's figure only). It is an allocation: it moves with the types the fleet gives a service each quarter and with their average price, which falls as "
            f"more of a type is committed, so a service's figure can fall while its demand grows. {TIED_SPLIT_TEXT} Peaks, tokens and "
            "costs count served requests only: those over a service's context limit are not served."]
    return out


def write_fleet_forecast(fleet: FleetInputs, results: list[FleetQuarter], out_dir: Path) -> list[Path]:
    """Every output is made before the first is written, so a failure leaves none half-made."""
    name = fleet.spec.name
    texts = {f"{name}_forecast.md": fleet_forecast_markdown(name, results, fleet)}
    texts.update({table_file(name, t): text for t, text in fleet_forecast_tables(results).items()})
    package = datapackage(name, TABLES, description="Quarterly fleet forecast (planner forecast on a fleet file). "
                          "quarters: one row per quarter; services: one row per service per quarter; types: one row "
                          "per GPU type per quarter, adding up to the quarter's cost; limits: one row per shared limit "
                          "per quarter, with the quarter re-solved with one more GPU (or GPU type) allowed and without "
                          "the limit, and what each saves through the forecast's last quarter and after it; total: the "
                          "quarters' cost summed, and what the forecast's commitments cost after its last quarter.")
    texts[f"{name}_forecast_datapackage.json"] = json.dumps(package, indent=2, ensure_ascii=False) + "\n"
    output_folder(out_dir)
    return write_texts(out_dir, texts)


def fleet_forecast_json(results: list[FleetQuarter]) -> dict:
    def row(columns, item) -> dict:
        return {c.name: c.value(item) for c in columns}

    total = _total_row(results, _table(QUARTER_COLUMNS, results))
    return {"quarters": [
        {**row(QUARTER_COLUMNS, r),
         # each service's row, and what of its speed no measurement backs, as `planner solve --json` lists it
         "services": [{**row(SERVICE_COLUMNS, (r, p)), "speed_unverified": [u.as_json() for u in unverified_speed(p)]}
                      for p in r.plan.plans],
         "types": [row(TYPE_COLUMNS, (r, t)) for t in r.plan.types],
         "limits": [row(LIMIT_COLUMNS, (r, c)) for c in r.plan.constraints],  # what each shared limit costs
         "reserved_notes": list(r.reserved_below)}  # a stated reservation below what is held (the Markdown's)
        for r in results
    ], "committed_after_end_usd": total["committed_after_end_usd"],
        "budget_usd_per_month": results[0].plan.fleet.spec.budget_usd_per_month,  # every quarter's limit (null: none)
        # each service's: every quarter's plan certified by simulation, null where certification was off
        "certified": {name: certified_flag([p for r in results for p in r.plan.plans if p.scenario.name == name])
                      for name in dict.fromkeys(p.scenario.name for p in results[0].plan.plans)},
        # the total CSV's row, the Markdown's headline (an outside probe found it only there)
        "total": row(TOTAL_COLUMNS, total),
        # each service's traffic notes, as `planner solve --json` gives them
        "traffic_notes": {p.scenario.name: list(p.traffic_notes) for p in results[0].plan.plans}}
