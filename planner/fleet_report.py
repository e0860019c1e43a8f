"""The Markdown report and JSON of a fleet plan: fleet totals first, what each shared constraint
costs, then one section per service, which is that service's own report (planner.report) one
heading level down."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from planner.files import write_text_atomic
from planner.fleet_plan import FleetPlan, SharedConstraint, TypeUse
from planner.ilp_solver import COST_TOLERANCE_USD
from planner.inputs import report_sections
from planner.plan_json import plan_json
from planner.plan_objects import Plan
from planner.report import (
    REPLAY_TESTS,
    block_quote,
    figure_files,
    one_replica_pools,
    pools_text,
    rejected_text,
    render,
    routing_notes,
    start_figures,
    write_figures,
)
from planner.report_latency import tail_note
from planner.units import (
    HOURS_PER_MONTH,
    gpu_types_text,
    gpus_text,
    hours_text,
    usd_per_million_text,
    usd_per_million_tokens,
    usd_rate_text,
    usd_text,
)
from planner.verification import UNVERIFIED_WHAT, unverified_speed

# The joint ILP ranks equal-cost fleets by GPUs, then pools, then split thresholds; fleets equal on
# all of these but dividing the types otherwise between services are the solver's pick, which its
# path decides: the same code gave the shipped fleet forecast's 2027Q2 on two machines with 2
# h100-sxm moved from chat_8b to 128k_rollout and 2 h200 back. A third solve to rank them took
# 5 s on the catalog-wide fleet (bench/solve.py), more than the other two together. A solve without
# simulation keeps the first solve's twin where its explorations started from it (ilp_solver._twin);
# a certified solve and a forecast take the second's.
TIED_SPLIT_TEXT = ("Fleets of equal cost, GPUs and pools may divide the types otherwise between services; which one "
                   "the solver returns sets each service's share, not the fleet's totals, and two commands on the same "
                   "demand (a solve with simulation and one without, a forecast's quarter) may return different ones.")


def demote(markdown: str) -> str:
    """Every heading one level down (a report becomes a section of another)."""
    return re.sub(r"^(#+) ", r"#\1 ", markdown, flags=re.MULTILINE)


def service_section(fp: FleetPlan, index: int, figures: dict[str, str] | None = None) -> str:
    """The service's own report (planner.report.render), one heading level down, its day reserved at
    the fleet's forecast's terms where it states none; where it prices its day and the fleet commits
    GPUs of a type it runs, a note that its day is priced as if alone."""
    plan, svc = fp.plans[index], fp.fleet.services[index]
    sections = report_sections(plan, svc.inputs, forecast=False, fleet_forecast=fp.fleet.spec.forecast).texts
    committed = sorted({t.gpu for t in fp.types if t.committed} & {pool.config.gpu.id for pool in plan.pools})
    if sections and committed:
        sections = (*sections, _day_alone_note(fp, plan, committed))
    return demote(render(plan, figures=figures, sections=sections))


def _day_alone_note(fp: FleetPlan, plan, committed: list[str]) -> str:
    """Why a service's day curve in a fleet is not what the fleet pays for it (an outside probe: 8 reserved
    H100s, 3 idle, and a section pricing its day on demand at $4,365.40 a month, recommending autoscaling
    to save 22.6%, where the fleet pays $3,058.70 for it and autoscaling frees no committed GPU)."""
    return (f"In this fleet, the day above is priced as if {plan.scenario.name} ran alone, at its own on-demand prices: the "
            f"fleet holds committed {_names(committed)} GPUs, which this service runs on and which are paid all day "
            "whether used or not (autoscaling saves nothing on them); as the fleet pays, the service costs "
            f"{usd_text(fp.paid_usd_per_hour(plan))}/hour at its peak (the fleet's totals).\n")


def render_fleet(fp: FleetPlan, *, figures: list[dict[str, str]] | None = None) -> str:
    spec = fp.fleet.spec
    out: list[str] = [f"# Fleet plan: {spec.name}", ""]
    if spec.description:
        out += [block_quote(spec.description), ""]
    out += [_totals(fp), "", _constraints(fp), ""]
    for i in range(len(fp.plans)):
        out += [service_section(fp, i, figures[i] if figures else None).rstrip("\n"), ""]
    return "\n".join(out)


def _verdict(fp: FleetPlan) -> str:
    certified = fp.certified
    if certified is None:
        return ("No service was certified by simulation (`verify: false` or `planner solve --no-verify`): every pool "
                "rests on the model.")
    if certified:
        rounds = fp.certification_rounds
        again = (f", after {rounds} re-solve{'s' if rounds > 1 else ''} of the fleet at simulated capacities (each "
                 "service's section names its own re-plans)") if rounds else ""
        return ("Certified by simulation: every pool of every service meets its bands' targets when replayed at the "
                f"rate it is planned to carry (its share of its service's peak × headroom){again}. {REPLAY_TESTS}")
    return "**This fleet does NOT hold every target in simulation**: see the services' sections."


def not_served(plans) -> list[str]:
    """The services that turn requests away (over their context limit), which no cost or token
    figure counts: a line and a blank one, or nothing."""
    rejecting = sorted((p for p in plans if p.rejected_requests), key=lambda p: -p.rejected_share)
    if not rejecting:
        return []
    return ["Not served, so in neither the costs nor the tokens: the requests over a service's context limit ("
            + ", ".join(f"{p.scenario.name} {rejected_text(p)}" for p in rejecting) + ").", ""]


def _certified_cell(plan: Plan) -> str:
    """The service's certification, qualified where the simulator replays a speed no measurement
    backs: it replays the model's step times, so it cannot catch the speed model's own error."""
    cert = plan.certification
    if cert is None:
        return "—"
    if not cert.certified:
        return "**no**"
    return "yes, on unverified speed" if unverified_speed(plan) else "yes"


def to_act_on(plans) -> list[str]:
    """What the services' sections ask of whoever runs the fleet, named where the fleet's totals lead:
    the services whose classes must be routed by weight (report.routing_notes), those whose long
    prompts read over a target on their own (report_latency.tail_note), and those with a pool of one
    replica, which a single failure stops (report.one_replica_pools). A line and a blank one, or
    nothing."""
    routed = [p.scenario.name for p in plans if routing_notes(p)]
    tails = [p.scenario.name for p in plans if tail_note(p)]
    single = [p.scenario.name for p in plans if one_replica_pools(p)]
    said = ([f"route the classes of {_names(routed)} by weight (each runs on several GPU types; its pools table gives "
             "the weights)"] if routed else [])
    said += ([f"in {_names(tails)}, requests past a prompt length miss a target on their own where their band holds it "
              "(each decision says which)"] if tails else [])
    said += ([f"{_names(single)} run{'s' if len(single) == 1 else ''} a pool on one replica, which a single failure "
              "stops (each decision says which; min_replicas_per_pool: 2 buys a spare)"] if single else [])
    return [f"**To act on, in the services' sections**: {'; '.join(said)}.", ""] if said else []


def unverified_services(plans) -> list[str]:
    """The services whose speed no measurement backs (planner.verification): a line and a blank one,
    or nothing; their sections say why."""
    found = [(p.scenario.name, u) for p in plans for u in unverified_speed(p)]
    if not found:
        return []
    exposed = fleet_exposure(plans)
    more = ""
    if exposed:
        gpus, usd = exposed["extra_gpus"], exposed["extra_usd_per_hour"]
        more = (f"; if the speed model overstates the throughput of {', '.join(exposed['services'])} by the median error "
                f"measured on published mixture-of-experts rows ({exposed['speed_overstated_pct']:.0f}%), "
                + (f"covering the rates they plan for takes {gpus_text(gpus)} more (+{usd_text(usd)}/hour at on-demand "
                   "prices) on throughput alone" if gpus else
                   "their spare capacity still covers the rates they plan for on throughput alone")
                + (" (fewer where a class is counted at the rate its pool held its targets at in simulation, below a "
                   "limit no search found)" if gpus and exposed["held_classes"] else ""))
    return ["**Speed not backed by a measurement of its own**: "
            + ", ".join(f"{name} ({u.id}, {UNVERIFIED_WHAT[u.kind]})" for name, u in found)
            + more + "; their sections say how far the model may be off.", ""]


def fleet_exposure(plans) -> dict[str, Any] | None:
    """The services on a mixture of experts and what their plans lack, summed, if the speed model is
    as optimistic as the published MoE rows' median (verification.throughput_exposure); None without one."""
    exposed = [(p.scenario.name, u.exposure) for p in plans for u in unverified_speed(p) if u.exposure is not None]
    if not exposed:
        return None
    return {"services": [name for name, _ in exposed], "speed_overstated_pct": exposed[0][1].overstated_pct,
            "extra_gpus": sum(e.extra_gpus for _, e in exposed),
            "extra_usd_per_hour": sum(e.extra_usd_per_hour for _, e in exposed),
            "held_classes": sum(e.held_classes for _, e in exposed)}


def _totals(fp: FleetPlan) -> str:
    spec, joint = fp.fleet.spec, fp.joint
    by_type = ", ".join(f"{t.used:,} {t.gpu}" for t in fp.types if t.used)
    lines = [
        "## Fleet totals",
        "",
        f"**{len(fp.plans)} service{'' if len(fp.plans) == 1 else 's'} on {gpus_text(fp.gpus)} in use ({by_type}"
        + (f"; {fp.gpus + fp.idle_committed:,} paid for" if fp.idle_committed else "")
        + f"): {usd_text(fp.cost_per_hour)} per hour, "
        f"{usd_text(fp.cost_per_month)} per month.**",
        "",
        *not_served(fp.plans),
        *unverified_services(fp.plans),
        f"One ILP over every service (solver: {joint.solver}, status {joint.status}); each service keeps its own split "
        "decision, levers and targets, and shares the GPU types below. " + _verdict(fp),
        "",
        *to_act_on(fp.plans),
        "| GPU type | Committed (owned + reserved) | In use | of which committed / on demand | Idle committed | Cap "
        "| On-demand $/GPU-hour | Committed $/hour (used or not) | $/hour |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for t in fp.types:
        s = spec.inventory.get(t.gpu)
        committed = f"{t.committed:,} ({s.owned:,} + {s.reserved:,})" if s and t.committed else "—"
        cap = "—" if t.cap is None else f"{t.cap:,}"
        lines.append(
            f"| {t.gpu} | {committed} | {t.used:,} | {t.used - t.on_demand:,} / {t.on_demand:,} | {f'{t.idle_committed:,}' if t.idle_committed else '—'} | {cap} "
            f"| {usd_rate_text(t.on_demand_usd_per_gpu_hour)} | "
            + (f"{usd_text(t.committed_usd_per_hour)} ({usd_rate_text(t.committed_usd_per_hour / t.committed)}/GPU-hour)"
               if t.committed else "—") + " "
            f"| {usd_text(t.usd_per_hour)} |"
        )
    lines.append(f"| **Total** | {sum(t.committed for t in fp.types):,} | **{fp.gpus:,}** | | "
                 f"{sum(t.idle_committed for t in fp.types):,} | | | | **{usd_text(fp.cost_per_hour)}** |")
    lines += reservations_worth_adding(fp)
    lines += [
        "",
        "| Service | Model | Peak req/s served | Rejected (over its context limit) | Decision | GPUs "
        "| $/hour at its own prices | $/hour as the fleet pays | $/M tokens as paid, at the peak | Certified |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for plan in fp.plans:
        sol = plan.solution
        pools = pools_text(sol)
        paid = fp.paid_usd_per_hour(plan)
        lines.append(
            f"| {plan.scenario.name} | `{plan.model.id}` | {plan.peak_rps:,.2f} | {rejected_text(plan)} | {sol.split_text}: {pools} | {sol.gpus:,} "
            f"| {usd_text(plan.cost_per_hour)} | {usd_text(paid)} | {usd_per_million_text(usd_per_million_tokens(paid, plan.tokens_per_hour))} "
            f"| {_certified_cell(plan)} |"
        )
    idle = fp.idle_committed_usd_per_hour
    lines.append(f"| Idle committed GPUs | | | | | | | {usd_text(idle)} | | |")
    lines.append(f"| **Fleet** | | | | | **{fp.gpus:,}** | | **{usd_text(fp.cost_per_hour)}** | | |")
    lines += [
        "",
        "A service's own prices are its candidates' on-demand prices: its GPUs above at those prices, as its "
        "section's decision quotes them (alone, a service may choose other GPUs; its section says so where it would). "
        "The peak counts the requests a service serves; those longer than its context limit are rejected, not "
        "planned for. As the fleet pays, a GPU of a committed type costs its share of the type's commitments "
        "and on-demand GPUs; committed GPUs no service uses are the fleet's, so the services and the idle line add "
        "up to the fleet's cost (before each is rounded to the cent). $/M tokens as paid, at the peak: that cost over "
        "the tokens (input and output) the service serves in an hour at its peak rate: a floor on what its tokens "
        "cost, since no service runs at its peak all day (the fleet's totals price no day curve; a service's section "
        "prices its own day, where it states a profile or a mean rate, as if it ran alone). "
        f"{TIED_SPLIT_TEXT} {hours_text(quarters=False)} Amounts are US dollars.",
    ]
    own = sum(plan.cost_per_hour for plan in fp.plans)
    if abs(own - fp.cost_per_hour) >= 0.005:  # a cent, as the rows show
        # a budget summed from the sections would price commitments at on-demand prices, idle ones not at all
        side = "more" if own > fp.cost_per_hour else "less"
        lines += ["", f"Each service's section quotes its GPUs at its own (on-demand) prices, as its own report "
                  f"would: summed, {usd_text(own)} per hour ({usd_text(own * HOURS_PER_MONTH)} per month), "
                  f"{usd_text(abs(own - fp.cost_per_hour))} per hour {side} than the fleet pays "
                  f"({usd_text(fp.cost_per_hour)}, at its commitments' prices and with its idle commitments). For a "
                  "budget, take the fleet's cost."]
    notes = []
    runnable = {cand.id for plan in fp.plans for cand in plan.scenario.gpu_candidates}
    for t in fp.types:
        if t.committed and t.gpu not in runnable:  # a forgotten `gpus:` entry, not the optimiser's choice
            notes.append(f"{t.gpu}: {t.committed:,} committed GPUs no service can run (none lists {t.gpu} among its "
                         f"`gpus`): idle, {usd_text(t.committed_usd_per_hour)} per hour. List it in a service's "
                         "`gpus` to plan on them.")
    if spec.max_gpu_types is not None:
        notes.append(f"Rule: at most {gpu_types_text(spec.max_gpu_types)} across the fleet ({len(fp.joint.gpus_by_type)} used).")
    if spec.budget_usd_per_month is not None:
        notes.append(f"Budget: {usd_text(spec.budget_usd_per_month)} per month; the plan leaves "
                     f"{usd_text(spec.budget_usd_per_month - fp.cost_per_month)} of it.")
    if notes:
        lines += ["", *notes]
    return "\n".join(lines)


def reservation_savings(fp: FleetPlan) -> list[tuple[TypeUse, float, float]]:
    """The GPU types with reservations that the fleet runs on demand beyond its commitments, where the
    inventory's reserved price is below the on-demand one: (the type's use, that reserved price, what one
    of its on-demand GPUs saves an hour reserved). An owned GPU's price is no offer of more at that price
    (it may be sunk: $0 is allowed), so owned-only types are left out."""
    out = []
    for t in fp.types:
        s = fp.fleet.spec.inventory.get(t.gpu)
        if s is not None and t.on_demand and s.reserved and s.reserved_usd_per_hour < t.on_demand_usd_per_gpu_hour:
            out.append((t, s.reserved_usd_per_hour, t.on_demand_usd_per_gpu_hour - s.reserved_usd_per_hour))
    return out


def reservations_worth_adding(fp: FleetPlan) -> list[str]:
    """What the on-demand GPUs of a reserved type would cost reserved instead: this fleet, unchanged, at
    the reserved price, so a re-plan with those reservations can only find a cheaper one (a bound read
    off the types table, where the constraints table prices only the caps; the cap counts reservations
    in, so it never tightens). A blank line and a line, or nothing."""
    found = reservation_savings(fp)
    if not found:
        return []
    parts = []
    for t, price, each in found:
        every = "it" if t.on_demand == 1 else f"all {t.on_demand:,}"
        parts.append(f"{t.gpu} runs {gpus_text(t.on_demand)} on demand at {usd_rate_text(t.on_demand_usd_per_gpu_hour)}"
                     f"/GPU-hour beside its {t.committed:,} committed; each reserved at the inventory's reserved price "
                     f"({usd_rate_text(price)}/GPU-hour) would save {usd_rate_text(each)} an hour, "
                     f"{usd_text(each * t.on_demand)} an hour for {every} ({usd_text(each * t.on_demand * HOURS_PER_MONTH)} "
                     "a month)")
    term = ("`planner forecast` on this file prices the terms over its quarters, at the forecast's own prices for "
            "new reservations" if fp.fleet.spec.forecast is not None else
            "a `forecast` section added to this file has `planner forecast` price the terms over quarters")
    return ["", "**Reservations worth adding**: " + "; ".join(parts) + ". That is this fleet, unchanged, at the "
            "reserved price, its GPUs running every hour as this peak-sized fleet does: re-planned with those "
            "reservations, the fleet costs no more. A reservation is paid whether its GPU runs or not, for its "
            "whole term, while quiet hours need fewer GPUs than the peak (a service's section prices its own day): "
            f"{term}, as demand grows and commitments expire."]


def _no_rule_text(fp: FleetPlan) -> str:
    """That no fleet-wide rule binds a service's plan: none is set, or only a budget, which refuses a
    plan over it and never changes the cheapest one."""
    if fp.fleet.spec.budget_usd_per_month is None:
        return "no fleet-wide rule is set"
    return "the fleet-wide budget, its one rule, refuses a fleet over it and never changes the cheapest one"


def _constraints(fp: FleetPlan) -> str:
    lines = ["## What the shared constraints cost", ""]
    if not fp.constraints:
        if fp.fleet.commitments:
            # Sunk GPUs are shared too: a service runs on them where alone it would buy others.
            return "\n".join([*lines, f"No shared cap: no shared GPU type has a cap and {_no_rule_text(fp)}. The "
                              "fleet's committed GPUs are paid whether used or not, so a service's plan may differ "
                              "from the one it would make alone; its section says where it does."])
        return "\n".join([*lines, f"No shared limit: no shared GPU type has a cap and {_no_rule_text(fp)}, so "
                          "every service's plan is the one it would make alone."])
    lines += [
        f"Each shared limit re-solved with one more GPU (or GPU type) allowed, and without it, {repriced_text(fp.plans)}",
        "",
        "| Constraint | Limit | Used | Binds | Fleet $/hour, one more allowed | Saves | Fleet $/hour without it | Saves |",
        "|---|---|---:|---|---:|---:|---:|---:|",
    ]
    base = fp.cost_per_hour
    for c in fp.constraints:
        unit = "" if c.gpu is None else " GPUs"
        lines.append(f"| {c.name} | ≤ {c.limit:,}{unit} ({c.limit_text}) | {c.used:,} | {'yes' if c.binds else 'no'} "
                     f"| {priced_cells(c, base)} |")
    if not all(c.proven for c in fp.constraints):
        lines += ["", unproven_text("the plan's solve", fp.fleet.spec.solver.time_limit_s,
                                    ended=f"the plan: {fp.joint.status}")]
    lines += limit_notes([("", c, base) for c in fp.constraints], type_rule=bool(fp.fleet.spec.max_gpu_types))
    return "\n".join(lines)


def dropping_saves(c: SharedConstraint, base_usd_per_hour: float) -> bool:
    """Whether the plan priced at `base_usd_per_hour` is dearer than with the limit dropped (beyond the
    solver's tolerance): the limit costs something. A proven limit raised by one saves no more."""
    return base_usd_per_hour - c.removed_usd_per_hour >= COST_TOLERANCE_USD


def priced_cells(c: SharedConstraint, base_usd_per_hour: float) -> str:
    """A priced limit's four cells against the plan's cost: one more allowed and its saving, without
    it and its saving, each marked † where a solve they rest on is not proven optimal."""
    mark = "" if c.proven else " †"
    return " | ".join(f"{usd_text(x)}{mark}" for x in (
        c.plus_one_usd_per_hour, base_usd_per_hour - c.plus_one_usd_per_hour,
        c.removed_usd_per_hour, base_usd_per_hour - c.removed_usd_per_hour))


def unproven_text(whose_solve: str, time_limit_s: float, *, ended: str) -> str:
    """The note on a table of priced limits where a solve stopped at its time limit (a † row):
    `whose_solve` names the plan's own solve, `ended` says how it ended."""
    return (f"† Not proven: {whose_solve} or a re-solve stopped at `solver.time_limit_s` ({time_limit_s:g} s) before "
            f"proving its optimum ({ended}). Each cost is the best plan found in time (a re-solve never above the plan, "
            "which every relaxed limit still allows), so a saving shown is partly the gap to the optimum, not the "
            "limit's price; raise the time limit to price the limit.")


def limit_notes(rows: list[tuple[str, SharedConstraint, float]], *, type_rule: bool, in_quarter: bool = False) -> list[str]:
    """What a table of priced limits needs said, each line after a blank one: the limits that bind and
    cost nothing, and those the plan stays under that still cost. rows: (where, the limit, the cost of
    the plan it was priced against); `where` goes before a limit's name ("2027Q2 " in a forecast).
    type_rule: the fleet sets max_gpu_types. in_quarter: a forecast's, whose limits can cost in later
    quarters what they do not in their own. Only proven costs are explained: an unproven saving may be
    the solver's gap alone."""
    proven = [(where, c, base) for where, c, base in rows if c.proven]
    free = [f"{where}{c.name}" for where, c, base in proven if c.binds and not dropping_saves(c, base)]
    lines = []
    if free:
        one = len(free) == 1
        lines += ["", f"Binds: the plan uses all the limit allows. {_names(free)} {'binds' if one else 'bind'} and "
                  f"{'costs' if one else 'cost'} nothing: dropping {'it' if one else 'them'} finds no cheaper fleet"
                  + (f" in {'its quarter' if one else 'their quarters'}." if in_quarter else ".")]
    # A limit the plan stays under can still cost: what it rules out is a plan with more of the type
    # (or more types) than it allows, not the plan's own use of it.
    for where, c, base in proven:
        if c.binds or not dropping_saves(c, base):
            continue
        if c.gpu is None:
            why = "the cheaper fleet it rules out runs more GPU types than it allows"
        else:
            why = ("the cheaper fleet it rules out runs more of the type than it allows (a pool on it larger than the "
                   "cap" + (", or another choice of types within the most GPU types allowed" if type_rule else "") + ")")
        lines += ["", f"The {where}{c.name} limit does not bind, yet dropping it saves: the plan uses less than it "
                  f"allows, and {why}."]
    return lines


def repriced_text(plans) -> str:
    """How a shared limit's re-solves are priced (SharedConstraint): by the model, at the capacities
    certification measured where it ran, and which way that errs."""
    measured = ("capacities as certification measured them" if any(p.certification for p in plans)
                else "no service was certified by simulation")
    # When the shipped fleet's H100 cap was 80, dropping it read $52.26 an hour saved where a certified re-solve
    # of the fleet saved $58.24. (The fleet forecast's 2027Q2 H100 cap, dropped and certified, cost what it read.)
    errs = (" A config that certification did not replay is priced at the lowest ratio of simulated to model "
            "capacity its class showed, which errs high: a certified re-solve of a relaxed limit can cost less, and "
            "save more than shown (in probes of the example fleet, scenarios/fleet_2027q1.yaml, by the price of a GPU "
            "or two an hour)."
            if any(p.certification for p in plans) else "")
    return f"by the model ({measured}; these re-solves are not simulated themselves).{errs}"


def _names(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def gpus_in_use_text(fp: FleetPlan) -> str:
    """The command line's words for a fleet's GPUs: '143 GPUs (96 h100-sxm, 16 h200, 31 l40s)'."""
    return f"{gpus_text(fp.gpus)} ({', '.join(f'{t.used:,} {t.gpu}' for t in fp.types if t.used)})"


def idle_committed_text(fp: FleetPlan) -> str:
    """'; committed idle: 1 l40s, $0.70/hour of the cost' where the plan leaves committed GPUs idle (paid,
    in its cost), else ''."""
    idle = ", ".join(f"{t.idle_committed:,} {t.gpu}" for t in fp.types if t.idle_committed)
    return f"; committed idle: {idle}, {usd_text(fp.idle_committed_usd_per_hour)}/hour of the cost" if idle else ""


def write_fleet_report(fp: FleetPlan, out_dir: Path) -> Path:
    """Write reports/<fleet>.md and every service's figures (named <fleet>_<service>_*.png)."""
    prefix = f"{fp.fleet.spec.name}_"
    started = [start_figures(plan, prefix=prefix) for plan in fp.plans]
    text = render_fleet(fp, figures=figure_files(*started))  # while the worker draws
    write_figures(out_dir, *started)
    path = out_dir / f"{fp.fleet.spec.name}.md"
    write_text_atomic(path, text)
    return path


def fleet_json(fp: FleetPlan) -> dict[str, Any]:
    """The fleet plan as data: totals, GPU types, shared constraints, and each service's plan
    (the keys of a single scenario's JSON, plus what the fleet pays for it)."""
    saves = {t.gpu: each * t.on_demand for t, _, each in reservation_savings(fp)}
    services = []
    for plan in fp.plans:
        entry = plan_json(plan)
        entry["paid_usd_per_hour"] = fp.paid_usd_per_hour(plan)
        services.append(entry)
    return {
        "fleet": fp.fleet.spec.name,
        "cost_usd_per_hour": fp.cost_per_hour,
        "cost_usd_per_month": fp.cost_per_month,
        "gpus": fp.gpus,
        "gpus_paid_for": fp.gpus + fp.idle_committed,
        "gpus_by_type": dict(fp.joint.gpus_by_type),
        "gpu_types": [
            {"gpu": t.gpu, "committed": t.committed, "used": t.used, "on_demand": t.on_demand,
             "idle_committed": t.idle_committed, "cap": t.cap, "on_demand_usd_per_gpu_hour": t.on_demand_usd_per_gpu_hour,
             "committed_usd_per_hour": t.committed_usd_per_hour, "usd_per_hour": t.usd_per_hour,
             "on_demand_reserved_saves_usd_per_hour": saves.get(t.gpu)}
            for t in fp.types
        ],
        "idle_committed_usd_per_hour": fp.idle_committed_usd_per_hour,
        "budget_usd_per_month": fp.fleet.spec.budget_usd_per_month,
        "budget_left_usd_per_month": (None if fp.fleet.spec.budget_usd_per_month is None
                                      else fp.fleet.spec.budget_usd_per_month - fp.cost_per_month),
        "solver": fp.joint.solver,
        "solver_status": fp.joint.status,
        "certified": fp.certified,
        # re-solves of the joint ILP at simulated capacities (each service's own: its certification_rounds)
        "certification_rounds": fp.certification_rounds,
        "moe_exposure": fleet_exposure(fp.plans),
        "constraints": [
            {"constraint": c.name, "limit": c.limit, "used": c.used, "binds": c.binds,
             "plus_one_usd_per_hour": _finite(c.plus_one_usd_per_hour), "removed_usd_per_hour": _finite(c.removed_usd_per_hour),
             "proven": c.proven}
            for c in fp.constraints
        ],
        "services": services,
    }


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
