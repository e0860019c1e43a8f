"""Around a solved plan: each split option, the next-best plans, the peak's sensitivity, the
levers, the best certified plan per GPU type and what the TTFT target costs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from planner.certification import certify_plans, hold_certified_rates, replay_ahead
from planner.errors import InfeasibleError
from planner.evaluator import Evaluator, job_evaluator
from planner.histogram import TOTAL_EDGES
from planner.plan_objects import (
    Config,
    Outcome,
    Plan,
    TrafficClass,
    candidate_configs,
    edge_at_most,
    option_name,
    traffic_classes,
)
from planner.plan_search import LazySearch, Resolver, infeasible_message, lazy_solve, outcome_of
from planner.plan_setup import Setup, pool_details
from planner.progress import stage
from planner.units import share_text
from planner.worker_pool import claimed_here, start_claimable

SENSITIVITY = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)


def explore_plan(st: Setup, plan: Plan, solve: Resolver, *, alone: bool = False,
                 sweep: StartedSweep | None = None,
                 context: Callable[[], Outcome | None] | None = None, search: LazySearch | None = None,
                 figures_ready: Callable[[Plan], None] | None = None) -> Plan:
    """The plan's explorations: the best certified plan per GPU type, each split option, the
    next-best distinct plans, the peak's sensitivity, the levers and the TTFT target's cost.
    `solve` answers the re-solves (its scenario's inventory caps and its commitments apply). alone:
    the plan was made by other rules than `solve`'s (a fleet service's, by the fleet's ILP, which
    prices the fleet's commitments and shares its caps): the plan `solve` makes is found first, and
    the rows are measured against it (Plan.alone), so that its own x1 rows read the same.

    A certified plan's per-GPU plans are certified first: every row after them is priced by the
    model scaled by what certification measured, and their replays measure configs the plan does not
    run (a GPU type's own limit, and its class's least ratio). Priced before them, a row could plan a
    config at a capacity the per-GPU table beside it shows it does not hold (the shipped fleet's
    chat_8b planned alone on 4 l40s at 5.8 requests/s each, while its certified l40s-only plan needed
    27 for 145 requests/s: under 5.6 each).

    sweep, context: the TTFT sweep and the context-limit lever already started (start_ttft_sweep,
    start_context_lever) [default: started now; a certified plan's, after its per-GPU plans].
    search: the plan's own lazy search, whose searched pairs and bounds the re-solves start from
    [default: one over the plan's evaluator]. figures_ready: called with the plan as soon as what
    its report's figures show is known, so that the command starts drawing them in a worker while
    this process plans on: once the split options and levers are known (the TTFT sweep not yet),
    and again with the sweep (a figure started twice is drawn once: worker_pool.start)."""
    scn, classes, inventory = st.scn, st.classes, solve.inventory
    least = scn.min_replicas_per_pool  # what a re-solve's no-plan message may blame
    search = search or LazySearch(st.evaluator, solve, classes, st.configs)
    if plan.certification:
        if sweep is not None or context is not None:
            raise ValueError("a certified plan's TTFT sweep and context lever start after its per-GPU plans are certified")
        per_gpu_plans = _per_gpu_plans(st, solve)
        replay_ahead([(st, details) for *_, details in per_gpu_plans])  # every type's replays side by side
        per_gpu = _per_gpu(st, per_gpu_plans, inventory, solve)
        if plan.certification.certified:  # (one that is not is refused, or a stated fleet's, never explored)
            hold_certified_rates(st, plan.evaluations, plan.pools)
    else:
        per_gpu = []
    # In a worker, while the others run here; the context lever first (the levers read it before
    # the sweep is read), each run here instead when the worker has not begun it by then.
    if context is None:
        context = start_context_lever(st, solve)
    if sweep is None:
        sweep = start_ttft_sweep(st, solve)
    sol = search.solve() if alone else plan.solution
    if not sol.pools:  # the fleet's plan is one the service can make alone, so this is a safeguard
        alone, sol = False, plan.solution
    with stage("explorations", 5, " steps") as step:
        split = []
        for k in classes:
            # The chosen option's row is the plan itself: a re-solve restricted to it has the same
            # cost but may break a tie between equal-cost configs the other way, and the report
            # would then show two different fleets for one decision.
            res = sol if k == sol.option else search.solve(options=[k])
            split.append(outcome_of(option_name(k), res,
                                    "" if res.pools else infeasible_message({k: classes[k]}, search.evaluations(),
                                                                            inventory, min_replicas=least,
                                                                            type_rule=solve.type_rule)))
        step.advance()
        alternatives, forbid, last = [], [], sol
        for i in range(2):
            forbid.append(frozenset((last.option, p.traffic_class, p.config) for p in last.pools))
            last = search.solve(forbid=tuple(forbid))
            if not last.pools:
                break
            alternatives.append(outcome_of(f"next best #{i + 1}", last))
        step.advance()
        sensitivity = []
        for m in SENSITIVITY:
            res = sol if m == 1 else search.solve(rate_scale=m)
            sensitivity.append(outcome_of(f"peak x {m:g}", res, "" if res.pools else infeasible_message(
                classes, search.evaluations(), inventory, rate_scale=m, min_replicas=least,
                type_rule=solve.type_rule)))
        step.advance()
        levers = _levers(scn, st.catalog, st.model, st.served, st.limit, st.peak_rps, st.evaluator, st.configs, classes,
                         search, sol, inventory, solve, context, st.hist.requests)
        step.advance()
        if figures_ready is not None:  # the worker draws these while the sweep's last chains run here
            figures_ready(dataclasses.replace(plan, split_analysis=split, levers=levers))
        swept = sweep()
        step.advance()
    # A re-solve's pool may run a dtype variant the plan's evaluations hold unsized (plan_search.prefer_precise).
    sized = {e.key: e for e in search.evaluations() if e.capacity is not None}
    evaluations = [sized.get(e.key, e) if e.unsized else e for e in plan.evaluations]
    explored = dataclasses.replace(plan, evaluations=evaluations, split_analysis=split, alternatives=alternatives,
                                   sensitivity=sensitivity, levers=levers, ttft_sweep=swept, per_gpu=per_gpu,
                                   alone=outcome_of("alone", sol) if alone else None,
                                   alone_caps=dict(inventory) if alone else None,
                                   alone_committed=solve.pool_types if alone else frozenset(),
                                   alone_type_rule=solve.type_rule if alone else None)
    if figures_ready is not None:
        figures_ready(explored)
    return explored


TTFT_SWEEP = (0.5, 0.75, 1.0, 1.5, 2.0)  # multipliers on every band's TTFT limit


def _per_gpu_plans(st: Setup, solve) -> list[tuple]:
    """The cheapest plan on each candidate GPU type alone, by the model: (name, evaluations,
    solution or None when no config runs on it, its pools' details)."""
    out, classes = [], st.classes
    for cand in st.scn.gpu_candidates:
        cfgs = [c for c in st.configs if c.gpu.id == cand.id]
        if not cfgs:
            out.append((f"{cand.id} only", None, None, []))
            continue
        search = LazySearch(st.evaluator, solve, classes, cfgs)
        res = search.solve()
        evs = search.evaluations()
        out.append((f"{cand.id} only", search, res, pool_details(st.evaluator, evs, res) if res.pools else []))
    return out


def _per_gpu(st: Setup, plans: list[tuple], inventory, solve) -> list[Outcome]:
    """Each GPU type's own plan (_per_gpu_plans), certified by simulation as the plan is: what
    committing to one type costs, with latencies checked, not only modelled."""
    out, classes = [], st.classes
    for name, search, res, details in plans:
        if res is None:
            out.append(Outcome(name, False, math.inf, 0, "", "no supported config on it"))
            continue
        if not res.pools:
            out.append(outcome_of(name, res, infeasible_message(
                classes, search.evaluations(), inventory, min_replicas=st.scn.min_replicas_per_pool,
                type_rule=solve.type_rule)))
            continue
        try:
            [(_, res, _, cert)] = certify_plans(
                [(st, search.evaluations(), res, details)],
                lambda _, search=search: [(search.solve(), search.evaluations())],
                rounds=st.scn.simulation.max_rounds)
        except InfeasibleError as exc:
            out.append(Outcome(name, False, math.inf, 0, "", str(exc)))
            continue
        if cert.certified:
            out.append(outcome_of(name, res))
        else:
            out.append(Outcome(name, False, math.inf, 0, "", f"no plan on it held its targets in simulation after "
                               f"{cert.rounds} re-plans"))
    return out


def start_ttft_sweep(st: Setup, solve: Resolver) -> StartedSweep:
    """ttft_sweep of the plan, started in a worker (planner.worker_pool).

    The sweep is calibrated by what certification has measured when it starts (explore_plan starts a
    certified plan's once its per-GPU plans are certified, as the other explorations are priced):
    the calibration is taken now, so the sweep's answer does not depend on where it runs. A class's
    calibration travels keyed by its option, name and context limit (Evaluator.class_calibration),
    and a measured pair's own ratio by its config too (Evaluator.measured_ratios)."""
    calibration, measured = sweep_calibration(st)
    if not any(b.ttft_s for b in st.scn.slo.bands):
        return StartedSweep(())
    known = st.evaluator.known(st.configs, st.classes)
    # Its chains (_SWEEP_CHAINS) depend on nothing of each other: a job each, those the worker has
    # not begun by the time the sweep is read run here (StartedSweep.__call__).
    return StartedSweep(tuple(
        start_claimable("exploration:ttft_sweep", scn=st.scn, catalog=st.catalog, model=st.model,
                        configs=st.configs, classes=st.classes, inventory=solve.inventory,
                        calibration=calibration, measured=measured, known=known, multipliers=chain,
                        token=st.evaluator._token, reserved=solve.reserved, pool_types=solve.pool_types,
                        type_rule=solve.type_rule,
                        here=lambda chain=chain: _ttft_sweep(st.scn, st.catalog, st.model, st.configs, st.classes,
                                                             solve.inventory, st.evaluator, calibration, measured,
                                                             chain, solve.reserved, solve.pool_types,
                                                             solve.type_rule))
        for chain in _SWEEP_CHAINS))


@dataclasses.dataclass(frozen=True)
class StartedSweep:
    """A TTFT sweep's chains, started (start_ttft_sweep): call it for the sweep's rows, or drop it."""

    chains: tuple[Callable[[], list[tuple[float, Outcome]]], ...]

    def __call__(self) -> list[tuple[float, Outcome]]:
        # Every chain the worker has not begun is this process's now, run here one after another; the
        # worker's, read after them. The worker goes on to the figures queued behind the chains (the
        # cost figure, started before the sweep is read): claimed one at a time, the worker had begun
        # the next chain while this process ran its first, and drew the figures only after it, while
        # this process waited with nothing of its own to do (the 128k rollout without simulation:
        # 1.030 s against 1.003 s, medians of 8 alternating fresh runs, 2026-12-06). (Reading from the
        # last, this process ran the shortest, then waited for the next, which the worker had begun.)
        mine = [chain for chain in self.chains if claimed_here(chain)]
        ordered = [*mine, *(chain for chain in self.chains if chain not in mine)]
        rows = dict(row for chain in ordered for row in chain())
        return [(m, rows[m]) for m in TTFT_SWEEP if m in rows]

    def drop(self) -> None:
        """The sweep is not wanted: every chain the worker has not begun is claimed here and never
        run (the worker skips it); one it has begun runs to its end there, unread."""
        for chain in self.chains:
            claimed_here(chain)


def sweep_calibration(st: Setup) -> tuple[dict, dict]:
    """What the TTFT sweep takes of certification: each class's ratio and each measured pair's."""
    return st.evaluator.class_calibration(st.classes), st.evaluator.measured_ratios(st.configs, st.classes)


def ttft_sweep(scn, catalog, model, configs, classes, inventory, calibration, measured=None, known=None,
               multipliers=TTFT_SWEEP, token: str | None = None, reserved=None,
               pool_types=frozenset(), type_rule=None) -> list[tuple[float, Outcome]]:
    """_ttft_sweep from the scenario alone (a worker's job): its own evaluator, with the plan's
    calibration per class and per measured pair, and holding the plan's evaluations and bounds (Evaluator.known) where
    given. Those only steer the lazy searches (their guesses and bounds), never the answer: without
    them the worker found the same plans with a sixth more latency points (the 128k rollout's sweep:
    972 against 846, 0.4 CPU-s). token: the plan's evaluator's, whose profiles and replica models
    the worker's jobs share (evaluator.job_evaluator). reserved, pool_types, type_rule: the rules of its
    re-solves (Resolver)."""
    if token is None:
        evaluator = Evaluator(scn, catalog, model)
    else:
        evaluator, classes = job_evaluator(token, scn, catalog, model, classes)
    if known:
        evaluator.take_known(known, configs, classes)
    return _ttft_sweep(scn, catalog, model, configs, classes, inventory, evaluator, calibration, measured, multipliers,
                       reserved, pool_types, type_rule)


def _ttft_sweep(scn, catalog, model, configs, classes, inventory, evaluator, calibration, measured=None,
                multipliers=TTFT_SWEEP, reserved=None, pool_types=frozenset(),
                type_rule=None) -> list[tuple[float, Outcome]]:
    """The plan re-solved with every band's TTFT limit scaled (by `multipliers` of TTFT_SWEEP), by
    the model (calibrated where certification measured a class or a config): what a stricter or looser TTFT
    target costs."""
    slo = scn.slo
    if not any(b.ttft_s for b in slo.bands):
        return []
    out = {}
    # Each chain from its loosest limit down: a tighter TTFT limit never raises a capacity, so each
    # step's capacities (or bounds) bound the next one's (with 2% to spare for the waiting-time grid,
    # which spans twice the limit). The tighter chain starts from the targets as stated; the looser
    # one's first step (its loosest) bounds from the ceilings, and bounds the steps after it (the
    # 128k rollout's x1.5: 288 latency points from the ceilings, 148 from x2's capacities).
    for order in (sorted((x for x in multipliers if x < 1.0), reverse=True),
                  sorted((x for x in multipliers if x > 1.0), reverse=True)):
        above, above_m = evaluator, 1.0
        for m in order:
            bands = [b.model_copy(update={"ttft_s": (b.ttft_s[0] or slo.statistic, b.ttft_s[1] * m)}) if b.ttft_s else b
                     for b in slo.bands]
            scaled = scn.model_copy(update={"slo": slo.model_copy(update={"bands": bands})})
            # The last step's bounds are the nearest guesses for this one's searches.
            swept = Evaluator(scaled, catalog, model, like=above)
            scaled_classes = {k: [dataclasses.replace(tc, slo=scaled.slo.to_slo()) for tc in tcs]
                              for k, tcs in classes.items()}
            swept.calibrate(calibration, scaled_classes, measured, configs)  # what simulation showed of the model applies here too
            prior = _bound_from(above) if m < above_m else None
            res, evs = lazy_solve(swept, Resolver(scaled, reserved, pool_types, type_rule), scaled_classes, configs, prior=prior)
            out[m] = outcome_of(f"TTFT targets x {m:g}", res, "" if res.pools else
                              infeasible_message(scaled_classes, evs, inventory,
                                                 min_replicas=scn.min_replicas_per_pool, type_rule=type_rule))
            above, above_m = swept, m
    return [(m, out[m]) for m in TTFT_SWEEP if m in out]


# The sweep's jobs (start_ttft_sweep), each a chain (_ttft_sweep): the looser limits, whose loosest
# step bounds the next; and each tighter limit alone, bounded by the stated targets' capacities. A
# tighter step bounded by the one above it instead knows only what that step searched (a bound priced
# the rest out): the full candidate set's x0.5 took 1,525 latency points after x0.75, 350 alone.
# The worker begins the first job, the longest: the first step of the looser chain bounds from the
# ceilings alone.
_SWEEP_CHAINS = (tuple(x for x in TTFT_SWEEP if x > 1.0), *((x,) for x in sorted(x for x in TTFT_SWEEP if x < 1.0)))


def _bound_from(looser: Evaluator):
    """An upper bound on a pair's model capacity under tighter TTFT limits: its capacity, or its
    proven bound, under `looser` limits (2% over, for the waiting-time grid)."""

    def prior(cfg: Config, tc: TrafficClass) -> float:
        key = looser.pair_key(cfg, tc)
        found = looser._cache.get(key)
        if found is not None and found.capacity is not None:
            return found.capacity.max_rps * 1.02
        return looser.upper.get(key, math.inf) * 1.02

    return prior


def _levers(scn, catalog, model, served, limit, peak, evaluator, configs, classes, search: LazySearch, sol, inventory,
            solve, context, all_requests: int) -> list[Outcome]:
    """Re-solve with each lever switched (design.md, "The optimisation"); the levers multiply."""
    out, least = [], scn.min_replicas_per_pool

    def with_dtypes(name: str, weights, kvs, *, narrows: bool) -> None:
        cfgs = candidate_configs(scn, catalog, model, weights, kvs)
        if not cfgs:
            out.append(Outcome(name, False, math.inf, 0, "", "no GPU candidate supports it", narrows=narrows))
            return
        res, evs = lazy_solve(evaluator, solve, classes, cfgs)
        out.append(outcome_of(name, res, "" if res.pools else infeasible_message(classes, evs, inventory,
                                                                                 min_replicas=least,
                                                                                 type_rule=solve.type_rule),
                              narrows=narrows))

    for kind, allowed in (("KV cache", scn.kv_dtypes), ("weights", scn.weight_dtypes)):
        if "fp8" in allowed:
            switched, name = [d for d in allowed if d != "fp8"], f"fp8 {kind} off"
            if not switched:
                continue
        else:
            switched, name = [*allowed, "fp8"], f"fp8 {kind} on"
        w, k = (scn.weight_dtypes, switched) if kind == "KV cache" else (switched, scn.kv_dtypes)
        with_dtypes(name, w, k, narrows=set(switched) <= set(allowed))
    if len(classes) > 1:
        res = search.solve(options=["none"])
        out.append(outcome_of("split forced off", res, "" if res.pools else
                              infeasible_message({"none": classes["none"]}, search.evaluations(), inventory,
                                                 min_replicas=least, type_rule=solve.type_rule), narrows=True))
    for gpu_id in sorted({p.gpu for p in sol.pools}):
        keep = [c for c in configs if c.gpu.id != gpu_id]
        if not keep:
            out.append(Outcome(f"without {gpu_id}", False, math.inf, 0, "", "no other GPU candidate", narrows=True))
            continue
        res, evs = lazy_solve(evaluator, solve, classes, keep)
        out.append(outcome_of(f"without {gpu_id}", res, "" if res.pools else infeasible_message(
            classes, evs, inventory, min_replicas=least, type_rule=solve.type_rule), narrows=True))
    lowered = context() if context is not None else context_lever(scn, catalog, model, served, limit, peak, configs,
                                                                    inventory, evaluator=evaluator, solve=solve,
                                                                    all_requests=all_requests)
    return out if lowered is None else [*out, lowered]


def start_context_lever(st: Setup, solve: Resolver) -> Callable[[], Outcome | None]:
    """context_lever of the plan, started in a worker; run here instead when its answer is asked for
    before the worker has begun it. Its classes are new, but a class of the lower limit with the
    requests, limit and targets of one of the plan's (a short class at the lower limit) is that
    class, and takes the calibration certification has measured for it when the lever starts (a
    certified plan's, once its per-GPU plans are certified: explore_plan); a plan not certified has
    none, so the lever can start while the plan is searched."""
    known = st.evaluator.known(st.configs, st.classes)
    calibration, measured = sweep_calibration(st)
    return start_claimable("exploration:context_lever", scn=st.scn, catalog=st.catalog, model=st.model,
                           served=st.served, limit=st.limit, peak=st.peak_rps, configs=st.configs,
                           inventory=solve.inventory, classes=st.classes, known=known, token=st.evaluator._token,
                           reserved=solve.reserved, pool_types=solve.pool_types, type_rule=solve.type_rule,
                           all_requests=st.hist.requests, calibration=calibration, measured=measured,
                           here=lambda: context_lever(st.scn, st.catalog, st.model, st.served, st.limit, st.peak_rps,
                                                      st.configs, solve.inventory, classes=st.classes, known=known,
                                                      evaluator=st.evaluator, all_requests=st.hist.requests,
                                                      calibration=calibration, measured=measured,
                                                      solve=Resolver(st.scn, solve.reserved, solve.pool_types,
                                                                     solve.type_rule)))


def context_lever(scn, catalog, model, served, limit, peak, configs, inventory, *, classes=None, known=None,
                  token: str | None = None, evaluator: Evaluator | None = None,
                  solve: Resolver | None = None, reserved=None, pool_types=frozenset(), type_rule=None,
                  all_requests: int | None = None, calibration=None, measured=None) -> Outcome | None:
    """The plan re-solved at the lower context limit (the scenario's, or half the limit), its
    rejected requests named (an infeasible row where it serves none); None when the limit has no
    lower edge. Without `evaluator` and `solve` (a worker's job), its own. known: the plan's model evaluations and bounds
    (Evaluator.known) for its `classes`; a lower class with the same requests, limit and targets as
    a plan's class (a short class of a threshold below the lower limit) starts from them, which
    steers the search and never its answer, and is priced by that class's calibration and measured
    pairs (calibration, measured: sweep_calibration's), as the plan's other explorations are; the
    other lower classes are new, and no simulation has measured them. token, reserved, pool_types,
    type_rule: as for ttft_sweep. all_requests: the histogram's requests, the served ones and those
    the limit already rejects (default: the served ones); the lever's name gives the share of them
    it would reject."""
    lower = scn.lower_context_limit or edge_at_most(max(limit // 2, int(TOTAL_EDGES[0])))
    if lower >= limit:
        return None
    lowered = served.select_total(at_most=lower)  # a histogram edge: the scenario's (validated) or edge_at_most's
    if lowered.is_empty:  # a row that says so: a lever the scenario asks for does not vanish without a word
        return Outcome(f"context limit {lower:,} (rejects every request)", False, math.inf, 0, "",
                       f"no request fits {lower:,} tokens: every one served at {limit:,} is longer")
    lost = served.requests - lowered.requests
    lower_classes = traffic_classes(scn, lowered, lower, peak * lowered.requests / served.requests)
    if evaluator is None and token is not None:
        evaluator, lower_classes = job_evaluator(token, scn, catalog, model, lower_classes)
    evaluator = evaluator or Evaluator(scn, catalog, model)
    if known:
        evaluator.take_known(known, configs, _same_classes(lower_classes, classes or {}))
    if calibration or measured:
        evaluator.calibrate(*_twins_measured(lower_classes, classes or {}, calibration or {}, measured or {}),
                            configs)
    solve = solve or Resolver(scn, reserved, pool_types, type_rule)
    res, evs = lazy_solve(evaluator, solve, lower_classes, configs)
    total = all_requests or served.requests
    rejected_before = total - served.requests
    name = f"context limit {lower:,} (rejects {share_text((rejected_before + lost) / total)} of requests" + (
        f", against {share_text(rejected_before / total)} at {limit:,})" if rejected_before else ")")
    return outcome_of(name, res, "" if res.pools else infeasible_message(lower_classes, evs, inventory,
                                                                         min_replicas=scn.min_replicas_per_pool,
                                                                         type_rule=solve.type_rule))


def _twins_measured(lower_classes, classes, calibration: dict, measured: dict):
    """(calibration, classes, measured) for Evaluator.calibrate: the plan's class calibration and
    measured pair ratios (sweep_calibration's), keyed for each class of the lower limit that is one
    of the plan's classes in all but its option and name: the same requests, context limit and
    targets, so the same capacities (the plan's short class of a split at the lower limit is the
    lower limit's one class; inventory_mixed's lever had planned its l40s at 6.51 requests/s where
    certification measured 5.99)."""
    plan_classes = [tc for tcs in classes.values() for tc in tcs]
    twin_calibration, twin_measured, twins = {}, {}, {}
    for k, tcs in lower_classes.items():
        for tc in tcs:
            twin = next((o for o in plan_classes if o.max_model_len == tc.max_model_len and o.slo == tc.slo
                         and o.hist == tc.hist), None)
            if twin is None:
                continue
            mine, theirs = (tc.option, tc.name, tc.max_model_len), (twin.option, twin.name, twin.max_model_len)
            twins.setdefault(k, []).append(tc)
            if theirs in calibration:
                twin_calibration[mine] = calibration[theirs]
            twin_measured.update({(cfg, mine): ratio for (cfg, key), ratio in measured.items() if key == theirs})
    return twin_calibration, twins, twin_measured


def _same_classes(classes, others) -> dict[str, list[TrafficClass]]:
    """The classes of `classes` that one of `others` matches in option, name, context limit, targets
    and requests: their capacities are the same."""
    by_key = {(tc.option, tc.name, tc.max_model_len): tc for tcs in others.values() for tc in tcs}
    out: dict[str, list[TrafficClass]] = {}
    for k, tcs in classes.items():
        for tc in tcs:
            other = by_key.get((tc.option, tc.name, tc.max_model_len))
            if other is not None and other.slo == tc.slo and other.hist == tc.hist:
                out.setdefault(k, []).append(tc)
    return out
