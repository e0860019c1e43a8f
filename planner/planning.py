"""From a scenario to a plan: set up, solve, certify by simulation, explore around the optimum.

The stages, each its own module, in the data's order: the traffic classes and candidate configs
(planner.plan_objects, planner.plan_setup), their capacities (planner.evaluator, from
planner.capacity), the ILP's questions (planner.plan_search; planner.ilp is the only solver
code), certification (planner.certification), explorations (planner.exploration); the plan
comes back as data for the report (planner.report) and the JSON output (planner.plan_json).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable

from planner.bounds import DEMAND_FIELDS, MAX_FLEET_GPUS, OVER_FLEET_BOUND
from planner.catalog import Catalog, Model
from planner.certification import certify_plans
from planner.deployment import supported_problem
from planner.errors import InfeasibleError, InputError
from planner.evaluator import Evaluator, Measurements
from planner.exploration import explore_plan, start_context_lever
from planner.histogram import Histogram
from planner.ilp import FleetSolution, Pool, paid_per_hour
from planner.plan_objects import (
    Config,
    Outcome,
    Plan,
    PoolDetail,
    default_context_limit,
    peak_shortfall,
    precision_bits,
    traffic_classes,
)
from planner.plan_search import LazySearch, Resolver, no_plan_message, outcome_of
from planner.plan_setup import Setup, pool_details, served_traffic, setup_plan
from planner.progress import stage
from planner.requests import Requests
from planner.scenario import Scenario


def make_plan(
    scn: Scenario, catalog: Catalog, model: Model, hist: Histogram, measured_peak_rps: float,
    *, explore: bool = True, traffic_notes: Iterable[str] = (),
    reserved: dict[str, tuple[int, float]] | None = None, measured_mean_rps: float | None = None,
    keep_lp: bool = False, certify: bool | None = None, trace: Requests | None = None, use_reserved: bool = False,
    figures_ready: Callable[[Plan], None] | None = None, measurements: Measurements | None = None,
) -> Plan:
    """Evaluate, solve, certify by simulation, and (with explore) add split analysis, levers,
    alternatives and sensitivity.

    keep_lp: the plan's solution keeps the ILP's text (`plan.solution.lp_text`, for `solve --write-lp`):
    the ILP with every pair evaluated, whose optimum the lazy search found.
    certify: replay every pool through the simulator and re-plan the ones that miss (default:
    the scenario's `verify`). trace: the log's requests with their own arrivals (time already
    compressed by growth), replayed across each pool's replicas as well.
    A scenario that states its `fleet` gets that fleet checked and reported, not a new one.
    measurements: what certification measured for a forecast's earlier quarters, and where this
    plan's measurements go (planner.evaluator.Measurements); a stated fleet is audited as it stands.
    use_reserved: every reserved GPU must run (the cheapest plan that strands none).
    figures_ready: called with the plan as what its report's figures show becomes known
    (explore_plan).
    """
    if scn.fleet:
        return _given_fleet_plan(scn, catalog, model, hist, measured_peak_rps, traffic_notes=traffic_notes,
                                 measured_mean_rps=measured_mean_rps, certify=certify, trace=trace, reserved=reserved)
    # The plan every pair's evaluation would give, evaluating only the pairs it may need (LazySearch):
    # on the full candidate set of the 128k rollout, 4.3 of 4.8 CPU-s went to evaluating every pair.
    # A certified plan's explorations plan each GPU type alone, which asks for nearly every pair:
    # evaluated at once (dtype variants proved below their best, Evaluator.evaluate_all) they cost
    # less than searched type by type (the 128k rollout: 455 latency points against 662).
    certifying = scn.verify if certify is None else certify
    st = setup_plan(scn, catalog, model, hist, measured_peak_rps, traffic_notes=traffic_notes,
                    measured_mean_rps=measured_mean_rps, trace=trace, evaluate=certifying and explore,
                    measurements=measurements)
    solve = Resolver(scn, reserved)
    question = {"use_reserved": use_reserved}  # the commitments: the resolver's own
    pairs = sum(len(tcs) for tcs in st.classes.values()) * len(st.configs)
    # Without certification the worker idles while this process searches: the context-limit
    # lever, which has the least to gain from the plan's evaluations, starts now (the full candidate
    # set's worker idled 0.6 s; the lever costs it 0.5 s from nothing, 0.4 s after the plan). The
    # TTFT sweep waits: its tighter steps start from the plan's capacities (without them its chains
    # took 0.1 CPU-s more on the 128k rollout and 0.6 more on the full set, and both ran slower).
    context = None
    if explore and not certifying:
        context = start_context_lever(st, solve)
    # A pair is done when searched, or when the plan is found without it (its bound settles it).
    with stage("candidates searched", 0 if st.evals else pairs, " pairs") as step:
        search = LazySearch(st.evaluator, solve, st.classes, st.configs, progress=step.advance)
        sol = search.solve(**question)
        step.advance(len(search.bound))
        search.progress = lambda n: None  # what the explorations search is theirs
    evals, certification = search.evaluations(), None
    if not sol.pools:
        raise InfeasibleError(no_plan_message(sol, scn, st.classes, evals, solve.inventory))
    _refuse_oversized(sol)
    pools = pool_details(st.evaluator, evals, sol)
    # (A certified plan's TTFT sweep and context lever are priced by what certification measures, the
    # per-GPU plans' included: explore_plan starts them after those.)
    if certifying:
        [(evals, sol, pools, certification)] = certify_plans(
            [(st, evals, sol, pools)], lambda _: [(search.solve(**question), search.evaluations())],
            rounds=scn.simulation.max_rounds,
        )
        _refuse_oversized(sol)  # certification re-plans at lower capacities: more GPUs
    if keep_lp:
        # The model with every pair's capacity, not the lazy search's bounds; after certification, at the
        # capacities the plan was last solved with (a re-plan's solution kept no text: an empty file)
        every = st.evaluator.evaluate_all(st.classes, st.configs)
        sol = dataclasses.replace(sol, lp_text=solve(st.classes, every, keep_lp=True, **question).lp_text)
    plan = assemble_plan(st, evals, sol, pools, certification)
    return (explore_plan(st, plan, solve, context=context, search=search,
                         figures_ready=figures_ready) if explore else plan)


def _refuse_oversized(sol: FleetSolution) -> None:
    """A plan past the bound on a fleet's GPUs cannot be bought: refused, not reported. The ILP refuses
    a class past it; a split's classes, each within it, can pass it together (111.7 million GPUs)."""
    if sol.gpus > MAX_FLEET_GPUS:
        raise InfeasibleError(f"the plan needs {sol.gpus:,} GPUs ({sol.split_text}), {OVER_FLEET_BOUND}; check "
                              f"{DEMAND_FIELDS}")


def assemble_plan(st: Setup, evals, sol: FleetSolution, pools: list[PoolDetail], certification) -> Plan:
    """The plan as data, from a solution and its pools' details."""
    return _assemble(st.scn, st.model, st.catalog, st.hist, st.served, st.limit, st.measured_peak_rps, st.peak_rps,
                     st.classes, evals, sol, pools, st.traffic_notes, st.measured_mean_rps, certification)


def _assemble(scn, model, catalog, hist, served, limit, measured_peak_rps, peak, classes, evals, sol, pools,
              traffic_notes, measured_mean_rps, certification) -> Plan:
    p_mean, o_mean = served.mean("sum_prompt"), served.mean("sum_output")
    input_tph, output_tph = peak * 3600 * p_mean, peak * 3600 * o_mean
    cost = sol.cost_per_hour
    # Each pool's share of the fleet's cost (reserved GPUs included) splits by its prefill share of GPU time.
    pool_cost = {id(pool): cost * pool.cost_per_hour / sum(q.cost_per_hour for q in pools) for pool in pools}
    input_cost = sum(pool_cost[id(pool)] * pool.at_peak.prefill_share for pool in pools)
    # A fleet that cannot carry its peak (a stated fleet too small) serves fewer tokens than the
    # traffic asks for: a price per token on the asked-for tokens would be too low, and the input
    # share (prefill time at an operating point that does not exist) meaningless.
    overloaded = (any(pool.resident is None for pool in pools)
                  or bool(peak_shortfall(pools, scn.traffic.headroom, certification)))
    if overloaded:
        input_tph_priced = output_tph_priced = 0.0
    else:
        input_tph_priced, output_tph_priced = input_tph, output_tph
    return Plan(
        scenario=scn, model=model, catalog=catalog, hist=hist, served=served,
        rejected_requests=hist.requests - served.requests, context_limit=limit,
        measured_peak_rps=measured_peak_rps, peak_rps=peak, classes=classes, evaluations=evals, solution=sol,
        pools=pools, cost_per_hour=cost, tokens_per_hour=input_tph + output_tph,
        input_tokens_per_hour=input_tph, output_tokens_per_hour=output_tph,
        cost_per_million={  # no tokens of a kind, or a fleet that cannot carry them: no price (nan, shown as —)
            "blended": cost / (input_tph_priced + output_tph_priced) * 1e6 if input_tph_priced + output_tph_priced
            else math.nan,
            "input": input_cost / input_tph_priced * 1e6 if input_tph_priced else math.nan,
            "output": (cost - input_cost) / output_tph_priced * 1e6 if output_tph_priced else math.nan,
        },
        traffic_notes=tuple(traffic_notes),
        measured_mean_rps=measured_mean_rps,
        certification=certification,
    )


def _given_fleet_plan(scn, catalog, model, hist, measured_peak_rps, *, traffic_notes, measured_mean_rps, certify,
                      trace, reserved=None) -> Plan:
    """The scenario's own fleet, evaluated and checked as it stands (no solving), beside the
    cheapest plan the model finds for the same targets. reserved: committed GPUs (a forecast
    quarter's), {type: (count, price per GPU-hour)}, which its cost counts as a solved plan's does
    (ilp.paid_per_hour): every committed GPU at its price, used or not, and GPUs beyond on demand."""
    base_limit = scn.context_limit or default_context_limit(model)
    limits = sorted({p.context_limit or base_limit for p in scn.fleet})
    if len(limits) > 2:
        raise InputError(f"fleet: pools have {len(limits)} context limits ({', '.join(map(str, limits))}); a fleet "
                         "has at most two: a short pool's and a long pool's")
    limit, served, peak = served_traffic(scn, model, hist, measured_peak_rps, limits[-1])
    one_class = len(limits) == 1
    scn_fleet = scn.model_copy(update={"split_thresholds": [] if one_class else [limits[0]]})
    classes = traffic_classes(scn_fleet, served, limit, peak)
    option = "none" if one_class else str(limits[0])
    if option not in classes:
        raise InputError(f"fleet: no request falls on one side of the {limits[0]:,}-token limit; give one pool limit")
    evaluator = Evaluator(scn, catalog, model)
    prices = {c.id: c.price_per_hour(catalog.gpu(c.id).price_usd_per_hour) for c in scn.gpu_candidates}
    evals, pools = [], []
    # each entry's config and limit: two pools of one would clash (the day's mix names its variables by them)
    keys = [(q.gpu, q.tp, q.weight_dtype, q.kv_dtype, q.context_limit or base_limit) for q in scn.fleet]
    for i, fp in enumerate(scn.fleet):
        if keys[i] in keys[:i]:
            alike = sum(q.replicas for q, key in zip(scn.fleet, keys, strict=True) if key == keys[i])
            raise InputError(f"fleet[{i}]: the same GPU, tp, dtypes and context limit as fleet[{keys.index(keys[i])}]; "
                             f"give one entry with {alike} replicas")
        found = {}
        for field_name, look_up in (("gpu", catalog.gpu), ("weight_dtype", catalog.dtype), ("kv_dtype", catalog.dtype)):
            try:  # the entry and field named: with several entries, an unknown name alone does not say which
                found[field_name] = look_up(getattr(fp, field_name))
            except InputError as exc:
                raise InputError(f"fleet[{i}].{field_name}: {exc.message}") from None
        gpu = found["gpu"]
        problem = supported_problem(gpu, fp.tp, found["weight_dtype"], found["kv_dtype"], model)
        if problem:
            raise InputError(f"fleet[{i}]: {problem}")
        cfg = Config(gpu, fp.tp, fp.weight_dtype, fp.kv_dtype, prices.get(gpu.id, gpu.price_usd_per_hour),
                     precision_bits(catalog, fp.weight_dtype, fp.kv_dtype))
        lim = fp.context_limit or base_limit
        tc = next(t for t in classes[option] if t.max_model_len == lim)
        e = evaluator.evaluate(cfg, tc)
        if e.capacity is None:
            raise InputError(f"fleet[{i}]: {e.problem}")
        evals.append(e)
        pools.append(Pool(tc.name, cfg.label(lim), gpu.id, fp.replicas, fp.replicas * fp.tp, e.capacity_rps,
                          tc.rate_rps, fp.replicas * fp.tp * cfg.price_usd_per_hour))
    sol = FleetSolution("Given (the scenario's fleet, not optimised)", option, None if one_class else limits[0],
                        tuple(pools), sum(p.cost_per_hour for p in pools), sum(p.gpus for p in pools), 0.0, 0.0, "—")
    if reserved:
        paid = paid_per_hour(pools, reserved, prices)
        sol = dataclasses.replace(sol, cost_per_hour=paid.cost_per_hour, reserved_cost_per_hour=paid.reserved_cost_per_hour,
                                  on_demand_gpus=paid.on_demand)
    details = pool_details(evaluator, evals, sol, replay_covered=False)  # an audit: does it hold at the peak
    certification = None
    if scn.verify if certify is None else certify:
        setup = Setup(scn, catalog, model, hist, measured_peak_rps, limit, served, peak, evaluator, [], classes, evals,
                      tuple(traffic_notes), measured_mean_rps, trace)
        [(evals, sol, details, certification)] = certify_plans([(setup, evals, sol, details)], None, rounds=0)
    plan = _assemble(scn, model, catalog, hist, served, limit, measured_peak_rps, peak, classes, evals, sol, details,
                     traffic_notes, measured_mean_rps, certification)
    free = scn.model_copy(update={"fleet": None})
    try:
        best = make_plan(free, catalog, model, hist, measured_peak_rps, explore=False, certify=False)
        optimised = outcome_of("cheapest plan for the same targets (model, not certified)", best.solution)
    except InfeasibleError as exc:
        optimised = Outcome("cheapest plan for the same targets", False, math.inf, 0, "", str(exc))
    return dataclasses.replace(plan, given_fleet=True, optimised=optimised)

