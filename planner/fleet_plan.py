"""A fleet's plan: every service solved in one ILP over the inventory they share, certified
together, each service explored alone with the rest of the fleet as planned, and what each shared
constraint costs.

Stages as for one scenario (planner.planning): each service's candidates are evaluated on its
own; ilp.solve_services is the only solver code; the plan comes back as data for the report
(planner.fleet_report) and the JSON output.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from planner.bounds import DEMAND_FIELDS, MAX_FLEET_GPUS, OVER_FLEET_BOUND, held_past_bound
from planner.certification import certify_plans, refreshed
from planner.errors import InfeasibleError, InputError, PlannerError
from planner.evaluator import Measurements
from planner.exploration import StartedSweep, explore_plan, start_ttft_sweep
from planner.fleet import FleetInputs, Service, SharedGPU, refuse_mixed_verify
from planner.ilp import JointSolution, cost_bound_using_more, solve_services
from planner.ilp_solver import COST_TOLERANCE_USD
from planner.plan_objects import Plan
from planner.plan_search import (
    CAPS_WORDS,
    Resolver,
    no_plan_message,
    prefer_precise,
    scenario_caps,
    service_model,
)
from planner.plan_setup import Setup, pool_details, setup_plan
from planner.planning import assemble_plan
from planner.progress import stage
from planner.scenario import Scenario
from planner.units import HOURS_PER_MONTH, gpu_types_text, gpus_text, usd_text
from planner.worker_pool import side_by_side


@dataclass(frozen=True)
class SharedConstraint:
    """A fleet-wide limit, what the plan uses of it, and the fleet's cost with it relaxed (re-solved
    by the model, with the capacities certification measured)."""

    gpu: str | None  # the GPU type a cap limits (None: the limit on GPU types, max_gpu_types)
    limit: int
    used: int
    limit_text: str  # how the limit is made up (in a forecast, where its quarter's cap comes from)
    plus_one_usd_per_hour: float  # the limit raised by one (inf: still no plan)
    removed_usd_per_hour: float  # the limit dropped
    # Every solve the two costs rest on (the plan's too) reached a proven optimum: else one stopped at
    # solver.time_limit_s, and the difference is partly the gap to the optimum, not the limit's price.
    proven: bool = True
    # The GPUs by type the fleet runs with the limit raised by one, and dropped, where that costs less
    # than the plan and they were kept (make_fleet_plan's relaxed_gpus; None: not cheaper, or not
    # kept): what a forecast carries forward from the relaxed quarter.
    plus_one_gpus: tuple[tuple[str, int], ...] | None = None
    removed_gpus: tuple[tuple[str, int], ...] | None = None

    @property
    def name(self) -> str:
        """'h100-sxm GPUs', or 'GPU types'."""
        return "GPU types" if self.gpu is None else f"{self.gpu} GPUs"

    @property
    def binds(self) -> bool:
        return self.used >= self.limit


@dataclass(frozen=True)
class TypeUse:
    """One GPU type across the fleet: committed, in use, bought on demand, and the prices paid."""

    gpu: str
    committed: int
    used: int
    on_demand: int
    idle_committed: int
    cap: int | None
    on_demand_usd_per_gpu_hour: float
    committed_usd_per_hour: float  # all committed GPUs of the type, used or not

    @property
    def usd_per_hour(self) -> float:
        return self.committed_usd_per_hour + self.on_demand * self.on_demand_usd_per_gpu_hour

    @property
    def paid_usd_per_gpu_hour(self) -> float | None:
        """What a GPU in use costs the fleet, the type's idle commitments aside; None where none is in use
        (0 read as a free GPU in the forecast's CSV, where the type's idle commitments are paid)."""
        if not self.used:
            return None
        idle = self.idle_committed * self.committed_usd_per_hour / self.committed if self.committed else 0.0
        return (self.usd_per_hour - idle) / self.used


@dataclass(frozen=True)
class FleetPlan:
    fleet: FleetInputs
    plans: tuple[Plan, ...]  # one per service, as its own report shows it (at its candidates' prices)
    joint: JointSolution
    types: tuple[TypeUse, ...]
    constraints: tuple[SharedConstraint, ...]

    @property
    def cost_per_hour(self) -> float:
        return self.joint.cost_per_hour

    @property
    def cost_per_month(self) -> float:
        return self.cost_per_hour * HOURS_PER_MONTH

    @property
    def gpus(self) -> int:
        return sum(t.used for t in self.types)

    @property
    def idle_committed(self) -> int:
        """Committed GPUs no service uses: paid for, not in use."""
        return sum(t.idle_committed for t in self.types)

    @property
    def idle_committed_usd_per_hour(self) -> float:
        return sum(t.idle_committed * t.committed_usd_per_hour / t.committed for t in self.types if t.committed)

    def paid_usd_per_hour(self, plan: Plan) -> float:
        """A service's GPUs at what a GPU in use of each type costs the fleet on average
        (TypeUse.paid_usd_per_gpu_hour: the type's committed and on-demand GPUs together, its idle
        commitments aside); the services' figures and the idle commitments add up to the fleet's cost."""
        paid = {t.gpu: t.paid_usd_per_gpu_hour for t in self.types}  # a pool's type is in use: never None
        return sum(pool.gpus * paid[pool.config.gpu.id] for pool in plan.pools)

    @property
    def certified(self) -> bool | None:
        certs = [p.certification for p in self.plans]
        return None if any(c is None for c in certs) else all(c.certified for c in certs)

    @property
    def certification_rounds(self) -> int | None:
        """Re-solves of the joint ILP at simulated capacities (each service's own re-plans: its
        certification's rounds); None where not every service was certified."""
        return None if self.certified is None else max(p.certification.joint_rounds for p in self.plans)


def make_fleet_plan(fleet: FleetInputs, *, explore: bool = True, certify: bool | None = None,
                    price_limits: bool | None = None, relaxed_gpus: bool = False, keep_lp: bool = False, growth: float = 1.0,
                    on_set_up: Callable[[Sequence[Setup]], None] | None = None,
                    figures_ready: Callable[[Plan], None] | None = None,
                    measurements: dict[int, Measurements] | None = None) -> FleetPlan:
    """Solve every service of the fleet in one ILP, certify every pool of every service by
    simulation (each service's `verify`, or `certify` for all), explore each service alone with the
    rest of the fleet as planned, and price each shared constraint by re-solving without it.
    price_limits: price the shared constraints [default: explore]; a forecast's quarter prices them
    without exploring its services (every shared limit of that quarter, binding or not).
    relaxed_gpus: keep the GPUs each relaxed re-solve that saves runs (SharedConstraint.plus_one_gpus,
    removed_gpus), its ties broken as the plan's are: a forecast with carry_forward commits them.
    growth: a multiplier on every service's demand (the fleet's forecast quarters). on_set_up: called with every service's setup, before the joint ILP; figures_ready: with each
    service's plan as what its figures show becomes known (explore_plan; the CLI starts the
    report's figures then, in the worker, while this process plans on). measurements: what
    certification measured for a forecast's earlier quarters, by service index, and where this plan's
    go (planner.evaluator.Measurements)."""
    if certify is None:
        refuse_mixed_verify(fleet.services)
    setups = [_setup(svc, growth, None if measurements is None else measurements.setdefault(svc.index, Measurements()))
              for svc in fleet.services]
    if on_set_up is not None:
        on_set_up(setups)

    def solve(evals_per_service, **kw) -> JointSolution:
        return _solve(fleet, setups, evals_per_service, keep_lp=keep_lp, **kw)

    wants = [st.scn.verify if certify is None else certify for st in setups]
    early = _EarlySweeps(fleet, setups) if explore and not any(wants) and fleet.spec.solver.backend == "highs" else None
    try:
        return _planned(fleet, setups, solve, wants, early, explore, explore if price_limits is None else price_limits, relaxed_gpus,
                        figures_ready)
    finally:
        if early is not None:
            early.drop_rest()  # an error stopped the plan before its sweeps were taken


def _planned(fleet: FleetInputs, setups: list[Setup], solve, wants: list[bool], early: _EarlySweeps | None,
             explore: bool, price_limits: bool, relaxed_gpus: bool, figures_ready) -> FleetPlan:
    """make_fleet_plan once its services are set up: the joint ILP, certification, explorations."""
    with stage("fleet ILP", 1, " solve") as step:
        joint = solve([st.evals for st in setups], tie_break=True if early is None else early.start, keep_twin=early is not None)
        step.advance()
    if not joint.services[0].pools:
        raise InfeasibleError(_no_fleet_message(fleet, setups, joint), where=str(fleet.path))
    _refuse_oversized(fleet, joint)  # before certifying a fleet no one can buy
    joint, evals_per_service = _precise(setups, joint, [st.evals for st in setups])
    parts = [(st, evals, sol, pool_details(st.evaluator, evals, sol))
             for st, evals, sol in zip(setups, evals_per_service, joint.services, strict=True)]
    if any(wants):
        # Every joint solution certification was given, by its services' plans: certification may keep
        # an earlier one than its last re-solve (a challenger that missed, certification._challenge),
        # and the fleet's totals, types and constraints are those of the plans it keeps.
        solved = {id(joint.services[0]): joint}

        def resolve(evals_per_service):
            evals_per_service = [refreshed(st.evaluator, evals) for st, evals in zip(setups, evals_per_service, strict=True)]
            answer, evals_per_service = _precise(setups, solve(evals_per_service), evals_per_service)
            solved[id(answer.services[0])] = answer
            return list(zip(answer.services, evals_per_service, strict=True))

        try:
            done = certify_plans(parts, resolve, rounds=max(st.scn.simulation.max_rounds for st in setups))
        except InfeasibleError as exc:
            raise InfeasibleError(str(exc), where=str(fleet.path)) from None
        joint = solved[id(done[0][1])]
        assert all(sol is kept for (_, sol, _, _), kept in zip(done, joint.services, strict=True))
    else:
        done = [(evals, sol, pools, None) for _, evals, sol, pools in parts]
    plans = [assemble_plan(st, evals, sol, pools, cert) for st, (evals, sol, pools, cert) in zip(setups, done, strict=True)]
    types = _types(fleet, joint)
    _refuse_oversized(fleet, joint, types)  # certification plans at lower capacities: more GPUs
    if explore:
        used = [plan.solution.gpus_by_type for plan in plans]
        alone = [_alone(fleet, setups, used, i) for i in range(len(plans))]
        # Every service's TTFT sweep goes to the worker at once, while the others run here (without
        # certification and with HiGHS, each started while the ILP broke its ties where the plan
        # leaves the service what that start assumed: _EarlySweeps); a certified service's once its
        # per-GPU plans are certified (explore_plan).
        sweeps = [None if plan.certification else (early is not None and early.take(i, solve)) or start_ttft_sweep(st, solve)
                  for i, ((st, solve), plan) in enumerate(zip(alone, plans, strict=True))]
        if early is not None:
            early.drop_rest()  # those started with rules the plan does not leave: the worker skips them
        plans = [dataclasses.replace(explore_plan(st, plan, solve, alone=True, sweep=sweep, figures_ready=figures_ready),
                                     alone_shared_caps=frozenset(fleet.shared_caps))
                 for (st, solve), plan, sweep in zip(alone, plans, sweeps, strict=True)]
    constraints = _constraints(fleet, setups, [p.evaluations for p in plans], joint, types, relaxed_gpus) if price_limits else ()
    result = FleetPlan(fleet, tuple(plans), joint, types, constraints)
    budget = fleet.spec.budget_usd_per_month
    if budget is not None and result.cost_per_month > budget + 1e-6:
        over = result.cost_per_month - budget
        # A budget stated past the cent is shown as stated, and a shortfall under a cent said so: both
        # to the cent read "$0.00 over the budget of" the fleet's own cost.
        stated = usd_text(budget) if abs(budget * 100 - round(budget * 100)) < 1e-6 else f"${budget:,}"
        raise InfeasibleError(
            f"budget_usd_per_month: the cheapest fleet costs {usd_text(result.cost_per_month)} per month, "
            f"{usd_text(over) if over >= 0.005 else 'less than a cent'} over the budget of {stated}",
            where=str(fleet.path))
    return result


def _precise(setups: list[Setup], joint: JointSolution, evals_per_service):
    """The joint plan with each service's pools on their most precise tied dtype variants
    (plan_search.prefer_precise), and each service's evaluations with those variants searched."""
    services, evals_out = [], []
    for st, sol, evals in zip(setups, joint.services, evals_per_service, strict=True):
        precise, found = prefer_precise(sol, st.evaluator, st.classes, st.configs, st.scn.min_replicas_per_pool)
        services.append(precise)
        evals_out.append([found.get(st.evaluator.pair_key(e.config, e.traffic_class), e) for e in evals])
    return dataclasses.replace(joint, services=tuple(services)), evals_out


def _setup(svc: Service, growth: float, measurements: Measurements | None) -> Setup:
    inputs = svc.inputs
    scn = inputs.scenario
    if scn.fleet:
        raise InputError("fleet: a service of a fleet file is planned, not given; drop its `fleet:` section",
                         where=svc.where)
    if growth != 1.0:
        scn = scn.model_copy(update={"traffic": scn.traffic.model_copy(update={"growth": scn.traffic.growth * growth})})
    t = inputs.traffic
    trace = t.requests_at_growth(scn.traffic.growth) if t.requests is not None else None
    try:
        return setup_plan(scn, inputs.catalog, inputs.model, t.hist, t.peak_rps, traffic_notes=t.notes,
                          measured_mean_rps=t.mean_rps, trace=trace, measurements=measurements)
    except PlannerError as exc:
        if exc.where is not None:
            raise
        raise type(exc)(str(exc), where=svc.where) from None


def _solve(fleet: FleetInputs, setups: list[Setup], evals_per_service, *, keep_lp=False, caps=None,
           max_gpu_types=-1, tie_break=True, keep_twin=False) -> JointSolution:
    """The joint ILP; caps and max_gpu_types replace the fleet's (for the cost of a constraint, which
    needs no tie-break among plans of equal cost)."""
    spec = fleet.spec
    caps = fleet.shared_caps if caps is None else caps
    max_gpu_types = spec.max_gpu_types if max_gpu_types == -1 else max_gpu_types
    return solve_services(
        _models(fleet, setups, evals_per_service, caps, max_gpu_types), inventory=caps, reserved=fleet.commitments,
        max_gpu_types=max_gpu_types, backend=spec.solver.backend, time_limit_s=spec.solver.time_limit_s,
        keep_lp=keep_lp, tie_break=tie_break, keep_twin=keep_twin,
    )


def _bound_over(fleet: FleetInputs, setups: list[Setup], evals_per_service, gpu: str, at_least: int) -> float:
    """A lower bound on the fleet's cost with at least `at_least` GPUs of type `gpu` and its cap dropped."""
    caps = {k: v for k, v in fleet.shared_caps.items() if k != gpu}
    spec = fleet.spec
    return cost_bound_using_more(_models(fleet, setups, evals_per_service, caps, spec.max_gpu_types), gpu,
                                 at_least, inventory=caps, reserved=fleet.commitments, max_gpu_types=spec.max_gpu_types,
                                 backend=spec.solver.backend, time_limit_s=spec.solver.time_limit_s)


def _models(fleet: FleetInputs, setups: list[Setup], evals_per_service, caps, max_gpu_types):
    """Each service's part of the joint ILP under these caps (they decide which candidates dominate)."""
    bound = None if max_gpu_types is not None else {*caps, *fleet.commitments}
    return [service_model(st.scn, st.classes, evals, name=svc.name if len(setups) > 1 else "",
                          inventory=scenario_caps(st.scn), bound_types=bound)
            for svc, st, evals in zip(fleet.services, setups, evals_per_service, strict=True)]


def _refuse_oversized(fleet: FleetInputs, joint: JointSolution, types: Sequence[TypeUse] = ()) -> None:
    """Refuse a fleet past the bound on a fleet's GPUs (ilp refuses one service past it, not services
    that pass it together): the GPUs its services run, and with `types`, those it holds committed and
    idle besides (a quarter's reservations are bounded type by type only)."""
    if joint.gpus > MAX_FLEET_GPUS:
        largest = sorted(zip(fleet.services, joint.services, strict=True), key=lambda pair: -pair[1].gpus)[:3]
        raise InfeasibleError(
            f"the fleet needs {joint.gpus:,} GPUs ({', '.join(f'{svc.name} {sol.gpus:,}' for svc, sol in largest)}"
            f"{', ...' if len(fleet.services) > 3 else ''}), {OVER_FLEET_BOUND}; check its services' {DEMAND_FIELDS}",
            where=str(fleet.path))
    held = held_past_bound(joint.gpus, sum(t.idle_committed for t in types),
                           "the inventory's owned and reserved GPUs (in a forecast, with what its quarters reserve: "
                           "forecast.quarters[].reserved, carry_forward, commitment_term_quarters)")
    if held:
        raise InfeasibleError(held, where=str(fleet.path))


def _no_fleet_message(fleet: FleetInputs, setups, joint: JointSolution) -> str:
    """Why the joint ILP has no plan: a service that cannot be served even with every shared cap to
    itself (named, with its class and ceiling), or the shared rules, with the GPUs each service's
    cheapest plan alone within them takes."""
    alone = []
    for svc, st in zip(fleet.services, setups, strict=True):
        # The fleet's rule for committed types, as its ILP and the services' re-solves have it: without it
        # a service that the fleet could serve read as one that cannot be served at all.
        solve = Resolver(_within_caps(st.scn, fleet.shared_caps), pool_types=frozenset(fleet.commitments))
        sol = solve(st.classes, st.evals)
        if not sol.pools:
            why = no_plan_message(sol, st.scn, st.classes, st.evals, solve.inventory)
            # (only where the message blames the caps: a latency target's, say, does not)
            return (f"service '{svc.name}': {why}"
                    + (_caps_source(scenario_caps(st.scn), fleet.shared_caps, solve.inventory)
                       if CAPS_WORDS in why else ""))
        alone.append((svc.name, sol))
    if joint.status == "Not Solved":
        return (f"no fleet plan found within the solver's time limit of {fleet.spec.solver.time_limit_s:g} s; raise "
                "solver.time_limit_s in the fleet file")
    rules = [f"{g} ≤ {gpus_text(n)}" for g, n in sorted(fleet.shared_caps.items())]
    if fleet.spec.max_gpu_types is not None:
        n = fleet.spec.max_gpu_types
        rules.append(f"at most {gpu_types_text(n)}")
    takes = [f"{name} {' + '.join(f'{n:,} {g}' for g, n in sol.gpus_by_type.items())}" for name, sol in alone]
    return (f"every service can be served alone within the shared caps, but the shared rules ({', '.join(rules)}) "
            f"leave no fleet that covers every service's peak; alone (each within the caps, the rules aside), the "
            f"cheapest plans take {'; '.join(takes)}")


def _caps_source(own: dict[str, int], shared: dict[str, int], caps: dict[str, int]) -> str:
    """Which of a fleet service's caps are its own (its gpus' max_gpus) rather than the fleet's
    inventory: a message naming "the inventory caps" did not say which file to change."""
    mine = [f"{g} ≤ {gpus_text(n)}" + (f" (the fleet's inventory allows {gpus_text(shared[g])})" if g in shared else "")
            for g, n in sorted(caps.items()) if g in own and own[g] <= shared.get(g, own[g])]
    if not mine:
        return ""
    return f"; of those caps, {', '.join(mine)} {'is' if len(mine) == 1 else 'are'} the service's own (its gpus' max_gpus)"


def _within_caps(scn: Scenario, caps: dict[str, int]) -> Scenario:
    """The scenario with each GPU candidate's max_gpus at most its type's cap in `caps`."""
    gpus = []
    for cand in scn.gpu_candidates:
        if cand.id in caps:
            left = caps[cand.id]
            gpus.append(cand.model_copy(update={"max_gpus": left if cand.max_gpus is None else min(cand.max_gpus, left)}))
        else:
            gpus.append(cand)
    return scn.model_copy(update={"gpus": gpus})


def _types(fleet: FleetInputs, joint: JointSolution) -> tuple[TypeUse, ...]:
    used = dict(joint.gpus_by_type)
    for g, s in fleet.spec.inventory.items():
        if s.committed:
            used.setdefault(g, 0)
    out = []
    for g in sorted(used):
        s = fleet.spec.inventory.get(g)
        committed = s.committed if s else 0
        out.append(TypeUse(
            gpu=g, committed=committed, used=used[g], on_demand=max(0, used[g] - committed),
            idle_committed=max(0, committed - used[g]), cap=s.cap if s else None,
            on_demand_usd_per_gpu_hour=_price(fleet, g), committed_usd_per_hour=s.committed_usd_per_hour if s else 0.0,
        ))
    return tuple(out)


def _price(fleet: FleetInputs, gpu: str) -> float:
    """The on-demand price the services pay for a GPU type (shared types: the fleet's one price)."""
    if gpu in fleet.spec.inventory:
        return fleet.on_demand_price(gpu)
    for svc in fleet.services:
        for cand in svc.inputs.scenario.gpu_candidates:
            if cand.id == gpu:
                return cand.price_per_hour(svc.inputs.catalog.gpu(gpu).price_usd_per_hour)
    return fleet.catalog.gpu(gpu).price_usd_per_hour


def _alone(fleet: FleetInputs, setups: list[Setup], used: Sequence[Mapping[str, int]], i: int) -> tuple[Setup, Resolver]:
    """Service i alone with the rest of the fleet as planned (`used`: each service's GPUs per type),
    for its explorations: a shared type's cap is what the other services leave of it, at its
    candidates' on-demand prices, and a class may keep a pool of its own on each of the fleet's
    committed types, as in the fleet's ILP (so the fleet's plan for it, 4 x h100-sxm + 3 x h200 in
    one class, stays one it can make). Alone it may choose otherwise than the fleet does for it (the
    fleet's committed GPUs are paid whether used or not); its section says so (report.render,
    Plan.alone). Pricing its re-solves with the commitments the others leave instead made their ILPs
    ten times slower (a weak relaxation: sunk GPUs fill fractional replicas for nothing): the
    catalog-wide fleet took 17.6 s against 12.3. A fleet's max_gpu_types holds too: alone, the
    service may run the types the others run and as many more as the rule leaves (else its section
    compared with a plan the fleet could not run)."""
    others: Counter[str] = Counter()
    for j, theirs in enumerate(used):
        if j != i:
            others.update(theirs)
    scn = _within_caps(setups[i].scn, {g: max(0, cap - others.get(g, 0)) for g, cap in fleet.shared_caps.items()})
    most = fleet.spec.max_gpu_types
    rule = None if most is None else (most, frozenset(g for g, n in others.items() if n > 0))
    return dataclasses.replace(setups[i], scn=scn), Resolver(scn, pool_types=frozenset(fleet.commitments), type_rule=rule)


def _rules_of(solve: Resolver) -> tuple:
    """What a service's re-solves alone take of the other services' plans (_alone): its GPU
    candidates with their caps, and the rule on GPU types. A cap on a type it cannot run, or above
    its own max_gpus, is no part of it."""
    return tuple(solve.scn.gpu_candidates), solve.type_rule


class _EarlySweeps:
    """Each service's TTFT sweep, started in the worker while the joint ILP's second solve breaks
    the ties of the first's optimum: with the caps that optimum's plans leave each service, which
    the plans after the tie-break (and the dtype variants after them) leave it too as a rule; a
    service they leave other caps or types (_rules_of) has its sweep dropped and started again.
    The worker would otherwise wait through that solve with nothing to do (the catalog-wide fleet
    of bench/solve.py: 2.6 s of its 3.6 s ILP, every sweep taken; 15.1 s end to end against
    16.1 s, medians of 3 alternating fresh runs, 2026-12-07; the shipped fleet solved without
    simulation: every sweep taken). A sweep's answer depends on nothing
    else the plan adds meanwhile: the evaluations it is handed steer its searches only
    (Evaluator.known); nothing is measured without certification, and a certified plan's sweeps
    start after its per-GPU plans. (Starting them, 0.04-0.1 s, counts in the ILP's solve time.)
    With HiGHS only: with CBC, its first optimum often left a service other caps than the final
    plan did (sweeps taken: 6 of 8 on the shipped fleet, 4 of 8 on the catalog-wide one), and the
    catalog-wide fleet took 20.6 s against 19.3 s without the early start (alternating fresh runs):
    the sweeps started again queue behind those taken, so this process claims and runs them, and a
    run with CBC is bound by waiting on its subprocesses, not by work."""

    def __init__(self, fleet: FleetInputs, setups: list[Setup]):
        self.fleet, self.setups = fleet, setups
        self.started: dict[int, tuple[tuple, StartedSweep]] = {}

    def start(self, optimum: JointSolution) -> bool:
        """solve_services's tie_break test: start the sweeps, and break the ties."""
        if optimum.services[0].pools:
            used = [sol.gpus_by_type for sol in optimum.services]
            for i in range(len(self.setups)):
                st, solve = _alone(self.fleet, self.setups, used, i)
                self.started[i] = (_rules_of(solve), start_ttft_sweep(st, solve))
        return True

    def take(self, i: int, solve: Resolver) -> StartedSweep | None:
        """Service i's sweep, if it was started with the rules of `solve`, its re-solves alone."""
        found = self.started.get(i)
        if found is None or found[0] != _rules_of(solve):
            return None
        del self.started[i]
        return found[1]

    def drop_rest(self) -> None:
        for _, sweep in self.started.values():
            sweep.drop()
        self.started.clear()


def _constraints(fleet: FleetInputs, setups, evals_per_service, joint: JointSolution, types,
                 relaxed_gpus: bool = False) -> tuple[SharedConstraint, ...]:
    """Each shared limit that a plan can reach, and the fleet's cost with it raised by one and dropped.

    Dropping a cap only admits plans with more GPUs of its type than the cap: when the linear
    relaxation of those costs no less than the plan (ilp.cost_bound_using_more), neither change
    saves anything and no ILP is solved. Otherwise the cost with the limit dropped bounds the cost
    with it raised by one from below, the plan's cost from above: when dropping the limit saves
    nothing, neither does raising it (no second re-solve).

    The limits are priced side by side, in threads (worker_pool.side_by_side: HiGHS's solve releases
    the GIL), each a whole fleet's ILP or two. Measured on a fleet of 50 services on two cores, three
    GPU types, caps binding on two: the two limits' re-solves took 47 s one after the other and 29 s
    side by side, with the same answers.

    relaxed_gpus (make_fleet_plan): a re-solve that saves breaks its ties as the plan does before its
    GPUs are kept. Without the tie-break the ILP counts cost alone, and a committed GPU, free in the
    quarter, may be counted in use though idle: carried forward, a lot expiring there would be
    committed again for nothing."""
    used = {t.gpu: t.used for t in types}
    caps = fleet.shared_caps

    def relaxed(plus: dict, free: dict, over: tuple[str, int] | None = None) -> tuple:
        cost, planned = joint.cost_per_hour, joint.status == "Optimal"
        if over is not None and _bound_over(fleet, setups, evals_per_service, *over) >= cost - COST_TOLERANCE_USD:
            return cost, cost, planned, None, None
        ties = (lambda s: _cheaper(s, cost)) if relaxed_gpus else False
        without = _solve(fleet, setups, evals_per_service, tie_break=ties, **free)
        # The plan stays within a relaxed limit, so a re-solve stopped by its time limit on a dearer
        # plan has not found the relaxed optimum: the plan's cost is nearer it.
        dropped = min(without.cost_per_hour, cost)
        if without.status == "Optimal" and without.cost_per_hour >= cost - COST_TOLERANCE_USD:
            return cost, dropped, planned, None, None
        one_more = _solve(fleet, setups, evals_per_service, tie_break=ties, **plus)
        proven = planned and without.status == "Optimal" and one_more.status == "Optimal"
        kept = [_gpus_if_cheaper(s, cost) if relaxed_gpus else None for s in (one_more, without)]
        return min(one_more.cost_per_hour, cost), dropped, proven, *kept

    rows, questions = [], []
    for g, cap in sorted(caps.items()):
        rows.append((g, cap, used.get(g, 0), cap_parts_text(fleet.spec.inventory[g])))
        questions.append(({"caps": {**caps, g: cap + 1}}, {"caps": {k: v for k, v in caps.items() if k != g}}, (g, cap + 1)))
    limit = fleet.spec.max_gpu_types
    if limit is not None:
        rows.append((None, limit, len(joint.gpus_by_type), "max_gpu_types"))
        questions.append(({"max_gpu_types": limit + 1}, {"max_gpu_types": None}, None))
    answers = side_by_side(lambda question: relaxed(*question), questions)
    return tuple(SharedConstraint(*row, *answer) for row, answer in zip(rows, answers, strict=True))


def _cheaper(solution: JointSolution, cost: float) -> bool:
    """Whether a re-solve costs less than the plan's `cost`, beyond the solver's tolerance."""
    return solution.cost_per_hour < cost - COST_TOLERANCE_USD


def _gpus_if_cheaper(solution: JointSolution, cost: float) -> tuple[tuple[str, int], ...] | None:
    """A re-solve's GPUs by type, where it costs less than the plan (else the plan is kept, as its cost is)."""
    return tuple(sorted(solution.gpus_by_type.items())) if _cheaper(solution, cost) else None


def cap_parts_text(s: SharedGPU) -> str:
    """What a type's cap is made of: '32 owned + 96 new', '64 reserved + 32 new'."""
    parts = [f"{s.owned:,} owned"] if s.owned else []
    parts += [f"{s.reserved:,} reserved"] if s.reserved else []
    parts.append(f"{s.max_new:,} new")
    return " + ".join(parts)
