"""Certification of a plan by simulation: every pool replayed (planner.pool_check), and the
pools that miss re-planned at their simulated capacity until all hold or the rounds are spent.
"""

from __future__ import annotations

import dataclasses
import math
import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import numpy as np

from planner.errors import InfeasibleError
from planner.ilp import FleetSolution
from planner.plan_objects import (
    Certification,
    Evaluation,
    PoolDetail,
    edge_at_most,
)
from planner.plan_setup import Setup, pool_details
from planner.pool_check import (
    CONFIRM_RUNS,
    PoolCheck,
    PoolSetting,
    capacity_on_every_run,
    check_pool,
    fresh_seed,
    requests_for,
    settling_requests,
)
from planner.progress import stage
from planner.requests import Requests
from planner.scenario import Scenario
from planner.targets import SLO
from planner.units import usd_text

# A pool that missed at its rate is planned at least this share below it: the simulated capacity
# is bisected to 2% (pool_check.capacity_on_every_run), and a re-plan at the rate that missed would
# meet the same check again.
REPLAN_STEP = 0.02
# A plan without the class's ratio that saves less than this an hour is no reason to measure its configs.
CHALLENGER_MIN_SAVING_USD = 0.005
# Rounds of challengers a certified plan meets at most (each measures configs not measured before).
CHALLENGER_ROUNDS = 3


def pool_setting(pool: PoolDetail, scn: Scenario, pools: list[PoolDetail], trace: Requests | None) -> PoolSetting:
    """What certification needs of a pool: its replica, traffic, rate, model, and its share of the log."""
    tc = pool.traffic_class
    mine = None
    if trace is not None:
        total = trace.prompt_tokens + trace.output_tokens
        lo = 0 if tc.name != "long" else int(tc.option)
        in_class = np.flatnonzero((total > lo) & (total <= edge_at_most(tc.max_model_len)))
        index, parts = _log_share(pool, pools)
        take = in_class[_dealt_to(in_class.size, parts) == index]
        if take.size:
            mine = Requests(trace.arrival_s[take], trace.prompt_tokens[take], trace.output_tokens[take])
    return PoolSetting(tc.name, tc.label, pool.config.label(tc.max_model_len), pool.deployment, tc.hist, pool.replicas,
                       pool.replay_rps, pool.model, pool.replay_resident, scn.traffic.shared_prefix_tokens, mine)


def certify_plans(parts, resolve, *, rounds: int) -> list[tuple[list[Evaluation], FleetSolution, list[PoolDetail], Certification]]:
    """Replay every pool of every plan; where one misses, plan its config for that class at its
    simulated capacity and solve again, until every pool holds or `rounds` re-plans are spent.

    parts: (setup, evaluations, solution, pool details) per plan; plans solved together (the
    services of a fleet) are re-solved together: resolve(evaluations per part, as they were before
    the re-plan) gives each part's new solution and the evaluations it rests on, read with the
    simulated capacities (refreshed). Returns each part's evaluations, solution, pools (with their
    checks) and certification."""
    state = [[st, evals, sol, pools, []] for st, evals, sol, pools in parts]
    # The re-plans each part's own pools caused (a fleet re-solves every service when one misses).
    own_rounds = [0] * len(state)

    spent = 0
    while True:
        keyed, missing = _replay_all(state, "certification" if not spent else f"certification, re-plan {spent}")
        if not any(missing) or spent == rounds:
            break
        spent += 1
        for i, miss in enumerate(missing):
            own_rounds[i] += bool(miss)
        for (st, evals, _, pools, changes), miss in zip(state, missing, strict=True):
            for pool, check in miss:
                tc = pool.traffic_class
                config = pool.config.label(tc.max_model_len)
                if not check.problems:  # held at its planned rate with Poisson arrivals, not under the log's bursts
                    # a replica's share below the rate its replicas carried, so the class takes one more: a
                    # share below the capacity left the count as it was where the pool had slack (an outside
                    # probe: 2 replicas at 11.845 and at 7.897 alike, the same miss, a round lost)
                    new = pool.replay_rps * pool.replicas / (pool.replicas + 1)
                    why = "the log's own arrivals: " + "; ".join(check.replay.problems)
                else:
                    # The capacity on the first runs the verdict pooled (CONFIRM_RUNS at most): each must
                    # hold (the pooled p99 is no worse than the worst run's). The worst of four runs lies
                    # about a run's spread above their mean, so the pooled value lands about two of four
                    # runs' standard errors below the limit: at the edge of the undecided band, which the
                    # next round's check may widen to more runs (pool_check), and where sixteen runs leave
                    # it undecided, miss again, so the round after plans lower still (each round at least
                    # REPLAN_STEP lower, up to max_rounds). Every run of sixteen holding would set it by
                    # the worst of sixteen, further below. And below the rate that missed, so a round
                    # changes the plan.
                    new = _measured_capacity(st, pool, pools, check)
                    why = "; ".join(check.problems)
                st.evaluator.record_simulated(_evaluation(evals, pool), new, calibrates=bool(check.problems))
                # the rate the miss was read at: the pool's replay rate, not the capacity it was planned at (a
                # reader took "planned at 7.707 instead of 8.652" to mean the TPOT beside it was read at 8.652)
                changes.append(f"round {spent}: {tc.label} on {config} missed ({why}) replayed at {pool.replay_rps:,.3f} "
                               f"req/s a replica; planned at {new:,.3f} instead of {pool.planned_rps:,.3f} req/s per replica")
        _resolve_into(state, resolve)
    replanned = [len(part[4]) for part in state]  # the rounds' changes; a challenger's follow
    if resolve is not None and not any(missing):
        keyed = _challenge(state, resolve, keyed)
    out = []
    for (st, evals, sol, pools, changes), pairs, own, rounds_told in zip(state, keyed, own_rounds, replanned,
                                                                          strict=True):
        sim = st.scn.simulation
        checks = [st.evaluator.checks[k] for _, k in pairs]
        certified = all(check.holds for check in checks)
        pools = [dataclasses.replace(pool, check=check) for pool, check in zip(pools, checks, strict=True)]
        out.append((evals, sol, pools, Certification(certified, own, tuple(changes[:rounds_told]), sim.requests,
                                                     sim.band_requests, sim.seed, joint_rounds=spent,
                                                     challenges=tuple(changes[rounds_told:]))))
    return out


def _replay_all(state, label: str):
    """Replay every part's pools not replayed before (the plan's, the per-GPU plans' and those started
    ahead are kept); returns each part's (pool, replay key) pairs and its pools that miss."""
    keyed = [[(pool, _replay_key(pool, pools, st.trace)) for pool in pools] for st, _, _, pools, _ in state]
    todo = []
    for (st, _, _, pools, _), pairs in zip(state, keyed, strict=True):
        fresh = {k: pool for pool, k in pairs if k not in st.evaluator.checks}
        todo += [(st, k, pool_setting(pool, st.scn, pools, st.trace)) for k, pool in fresh.items()]
    # The simulator's loop releases the GIL: pools replay side by side, one thread each.
    done = []
    with (ThreadPoolExecutor(max_workers=max(1, min(len(todo), os.cpu_count() or 1))) as workers,
          stage(label, len(todo), " pools") as step):
        started = [st.evaluator.replays.pop(k, None) or workers.submit(_replay, st, p) for st, k, p in todo]
        for future in started:
            done.append(future.result())
            step.advance()
    for (st, k, _), check in zip(todo, done, strict=True):
        st.evaluator.checks[k] = check
    missing = [[(pool, st.evaluator.checks[k]) for pool, k in pairs if not st.evaluator.checks[k].holds]
               for (st, *_), pairs in zip(state, keyed, strict=True)]
    return keyed, missing


def _challenge(state, resolve, keyed):
    """Certified plans against the configs their classes' ratios priced.

    A pool that misses calibrates its class: every other config of it is planned at its model
    capacity times the least simulated / model ratio found (Evaluator.record_simulated), and no
    simulation checks those unless they are planned. Where the model is optimistic on one config
    and not on another, that prices the second too high, and the certified plan need not be the
    cheapest certifiable one (finance_2027's 2027Q3 with H200 at $3.20: 23 x H100 at $68.77/hour
    certified, where 21 x H200 at $67.20/hour certified planned alone). So the parts are solved
    again with no ratio (each config at its model capacity, or its own simulated one), and where
    that plan costs less, with a ratio-priced pool (_priced_by_ratio), it is replayed as any plan
    is. If every pool holds, each pool's rate is recorded as the rate its config held at
    (Evaluator.record_simulated's held: calibrating nothing else) and the parts are solved
    again with their ratios: the plan is now feasible at its cost, which no plan with ratios can
    beat, so it stands certified. If a pool misses, its capacity is measured as a miss's is, and the
    parts are solved with the ratios and what was measured: a plan cheaper than the certified one is
    replayed and kept where every pool holds (the explorations read the same measurements, and
    would otherwise show plans cheaper than the plan); else the certified plan stands. Each round
    measures configs not measured before, up to CHALLENGER_ROUNDS. Returns the replay keys of the plans that stand."""
    for challenge in range(1, CHALLENGER_ROUNDS + 1):
        before, keyed_before = [(part[1], part[2], part[3]) for part in state], keyed
        with ExitStack() as ratios_off:
            for st, *_ in state:
                ratios_off.enter_context(st.evaluator.without_ratios())
            bounds = resolve([part[1] for part in state])
        if not any(b.pools and b.cost_per_hour < part[2].cost_per_hour - CHALLENGER_MIN_SAVING_USD
                   and _priced_by_ratio(part[0].evaluator, b, evals)
                   for part, (b, evals) in zip(state, bounds, strict=True)):
            break
        for part, (b, evals) in zip(state, bounds, strict=True):
            if b.pools:
                part[1], part[2], part[3] = evals, b, pool_details(part[0].evaluator, evals, b)
        _, missing = _replay_all(state, f"certification, challenger {challenge}")
        for part, (_, old_sol, _), miss in zip(state, before, missing, strict=True):
            st, evals, sol, pools, changes = part
            if sol is old_sol:
                continue
            for pool, check in miss:
                tc, config = pool.traffic_class, pool.config.label(pool.traffic_class.max_model_len)
                new = _measured_capacity(st, pool, pools, check)
                st.evaluator.record_simulated(_evaluation(evals, pool), new, calibrates=False, from_log=False)
                changes.append(challenger_text(challenge, tc.label, config, check, new))
            if not any(missing):
                for pool in pools:
                    if st.evaluator.calibration_of(pool.traffic_class) < 1.0 and not st.evaluator.knows_simulated(
                            pool.config, pool.traffic_class):
                        st.evaluator.record_simulated(_evaluation(evals, pool), pool.replay_rps, calibrates=False,
                                                      from_log=False, held=True)
                changes.append(_replaced_text(challenge, sol.cost_per_hour, old_sol.cost_per_hour))
        if any(missing):
            # With what was measured, the ratios back: a plan cheaper than the certified one is
            # replayed too (else the explorations, which read the same measurements, would show
            # plans cheaper than the plan), and kept where every pool holds.
            try:
                _resolve_into(state, resolve)
            except InfeasibleError:
                # A challenger measured on a pair the certified plan runs, below the rate it holds
                # there, can leave no plan under an inventory cap: the certified plan, replayed and
                # holding, stands.
                _restore(state, before)
                for part in state:
                    part[4].append(f"challenger {challenge}: with what was measured no plan is found; "
                                   "the certified plan stands")
                break
            cheaper = any(part[2].cost_per_hour < sol.cost_per_hour - CHALLENGER_MIN_SAVING_USD
                          for part, (_, sol, _) in zip(state, before, strict=True))
            if cheaper:
                measured_keyed, missing = _replay_all(state, f"certification, challenger {challenge}")
            if not cheaper or any(missing):
                _restore(state, before)
            else:
                for part, (_, sol, _) in zip(state, before, strict=True):
                    part[4].append(f"challenger {challenge}: with what was measured the plan costs "
                                   f"{usd_text(part[2].cost_per_hour)}/hour against {usd_text(sol.cost_per_hour)}/hour, "
                                   "and every pool holds in simulation at its rate: it replaces the plan")
                keyed = measured_keyed
            continue
        _resolve_into(state, resolve)  # with the ratios again, and the challenger's pools at the rates they held
        keyed, missing = _replay_all(state, f"certification, challenger {challenge}")
        if any(missing):
            # A plan of the same cost that the re-solve preferred, and that missed: the certified plan
            # stands (the challenger's, which held, rests on evaluations read with no ratio, which the
            # report and the explorations must not take for the plan's).
            _restore(state, before)
            for part in state:
                part[4].append(f"challenger {challenge}: solved again with the ratios, the plan chosen missed; "
                               "the certified plan stands")
            keyed = keyed_before
    return keyed


def _replaced_text(challenge: int, new_usd: float, old_usd: float) -> str:
    """The change a challenger that replaced a part's plan makes. In a fleet every service is solved
    again together when one's plan gets cheaper, and another's may cost the same or more (the fleet
    less): "$37.80/hour against $37.80/hour ... it replaces the plan" read as a change for nothing."""
    tail = "and every pool holds in simulation at its rate: it replaces the plan"
    if new_usd < old_usd - CHALLENGER_MIN_SAVING_USD:
        return (f"challenger {challenge}: with no class's simulated / model ratio the plan costs {usd_text(new_usd)}/hour "
                f"against {usd_text(old_usd)}/hour, {tail}")
    how = (f"the same, {usd_text(new_usd)}/hour" if abs(new_usd - old_usd) <= CHALLENGER_MIN_SAVING_USD
           else f"{usd_text(new_usd)}/hour against {usd_text(old_usd)}/hour")
    return (f"challenger {challenge}: the fleet was solved again with no class's simulated / model ratio, for another "
            f"service's cheaper plan; this one's plan costs {how}, {tail}")


def _priced_by_ratio(evaluator, sol: FleetSolution, evals: list[Evaluation]) -> bool:
    """Whether a pool of `sol` is planned at its class's ratio, on a config certification did not
    measure. The ratio was found on another config, and need not hold for this one, on another GPU
    type or on the same one: the 128k rollout's long pool missed on a bf16 cache (ratio 0.86), and
    the fp8 cache, priced by that ratio, held at its model capacity, which a challenge limited to
    other GPU types never tried (28 H100s at $83.72/hour certified alone, 26 at $77.74 in the fleet,
    where another service's challenge re-solved it). The challenge costs its plan's replays (the
    certified 128k rollout: 7.2 s to 10.5 s)."""
    by_key = {e.key: e for e in evals}
    for pool in sol.pools:
        e = by_key[(sol.option, pool.traffic_class, pool.config)]
        tc = e.traffic_class
        if evaluator.calibration_of(tc) < 1.0 and not evaluator.knows_simulated(e.config, tc):
            return True
    return False


def _restore(state, plans) -> None:
    """Put each part's (evaluations, solution, pool details) back."""
    for part, (evals, sol, pools) in zip(state, plans, strict=True):
        part[1], part[2], part[3] = evals, sol, pools


# Steps of REPLAN_STEP a simulated capacity is lowered by at most while the pooled verdict at it misses.
CONFIRM_STEPS = 8


def _measured_capacity(st: Setup, pool: PoolDetail, pools: list[PoolDetail], check: PoolCheck) -> float:
    """A missed pool's simulated capacity: the rate each of the first runs its verdict pooled
    (CONFIRM_RUNS at most) holds on its own, by bisection, below the rate that missed by REPLAN_STEP
    at least (so that planning at it changes the plan), then judged there as certification judges a
    pool (check_pool: runs pooled while undecided), on seeds the verdict and the bisection did not run
    (fresh_seed), and lowered by REPLAN_STEP while that verdict misses, each lower rate on seeds past
    the last verdict's. Where all CONFIRM_STEPS verdicts miss, the rate returned, one step below the
    last, is one no run judged (the plan at it is still judged at its own rate).
    Each run judged alone reads a p99 low: chat_8b_h100 at a peak of 36 was planned at a bisected 8.154
    a replica, where sixteen pooled runs read TPOT p99 52.6 ms against 50 (an outside replay), and the
    report and the day's scaling took that capacity for one that holds. The highest rate some seeds'
    runs hold at is where those seeds read low, so their runs pooled confirm it too readily (fresh_seed)."""
    slo, sim = st.scn.slo.to_slo(), st.scn.simulation
    setting = pool_setting(pool, st.scn, pools, None)
    rate = min(capacity_on_every_run(setting, slo, requests=run_requests(setting, slo, sim),
                                     seeds=tuple(check.seeds[:CONFIRM_RUNS])),
               pool.replay_rps * (1 - REPLAN_STEP))
    n_max = float(pool.deployment.engine.max_num_seqs)
    seed = fresh_seed(check.seeds)
    for _ in range(CONFIRM_STEPS):
        if rate <= 0:
            break
        at = dataclasses.replace(setting, rate_rps=rate, resident=pool.model.resident_for_rate(rate, n_max))
        confirmed = check_pool(at, slo, requests=run_requests(at, slo, sim), seed=seed)
        if confirmed.holds:
            break
        # the lower rate is judged on seeds past these, so that no seeds both stop the descent and confirm
        seed = fresh_seed(confirmed.seeds)
        rate *= 1 - REPLAN_STEP
    return rate


def hold_certified_rates(st: Setup, evals: list[Evaluation], pools: list[PoolDetail]) -> None:
    """A certified plan's pools held their targets at their replay rates; where a class's ratio,
    lowered since by other configs' misses (the per-GPU plans'), would price a pool's config below
    the rate it held at, that rate is recorded as the config's (held: calibrating nothing else). The
    explorations priced after the per-GPU plans then never plan the plan's own config below what it
    was certified at: the golden tiny plan's h100 held 14.4 requests/s a replica, and its l40s-only
    plan's misses (ratio 0.82) priced it at 12.8, so a lever the plan already satisfies ("fp8 KV cache
    off", the plan's cache being bf16) read 50% dearer than the plan. A config certification measured
    itself keeps its measurement."""
    for pool in pools:
        tc = pool.traffic_class
        if st.evaluator.knows_simulated(pool.config, tc):
            continue
        e = _evaluation(evals, pool)
        if e.capacity is not None and e.capacity.max_rps * st.evaluator.factor_of(pool.config, tc) < pool.replay_rps:
            st.evaluator.record_simulated(e, pool.replay_rps, calibrates=False, from_log=False, held=True)


def _evaluation(evals, pool) -> Evaluation:
    """The evaluation of a pool's config for its class among `evals`."""
    tc = pool.traffic_class
    return next(e for e in evals if e.key == (tc.option, tc.name, pool.config.label(tc.max_model_len)))


def _resolve_into(state, resolve) -> None:
    """Solve every part again (resolve reads the simulated capacities recorded) and take the answers."""
    answers = resolve([part[1] for part in state])
    for part, (sol, _) in zip(state, answers, strict=True):
        if not sol.pools and sol.problem:  # at the measured capacities a class needs more GPUs than any fleet holds
            service = f"service '{part[0].scn.name}': " if len(state) > 1 else ""  # (a fleet's services share class names)
            raise InfeasibleError(f"at the capacities simulation measured, {service}{sol.problem}")
    if any(not sol.pools for sol, _ in answers):
        raise InfeasibleError("no plan holds its targets in simulation: "
                              + " | ".join(c for part in state for c in part[4]))
    for part, (sol, evals) in zip(state, answers, strict=True):
        part[1], part[2], part[3] = evals, sol, pool_details(part[0].evaluator, evals, sol)


def refreshed(evaluator, evals: list[Evaluation]) -> list[Evaluation]:
    """Evaluations read again after certification recorded simulated capacities (a class's
    calibration, a pair's own); variants proved below a sibling stay below it (record_simulated
    scales the whole class)."""
    return [e if e.dominated_by else evaluator.evaluate(e.config, e.traffic_class) for e in evals]


def replay_ahead(parts) -> None:
    """Start now, in threads of their own, the replays certify_plans will ask of these plans first.

    parts: (setup, pool details) per plan. The simulator's loop releases the GIL, so the replays
    run beside the Python work that comes before the certification (a plan's levers), on a core
    that would otherwise wait; certify_plans takes their answers, which are those it would compute."""
    todo = {}
    for st, pools in parts:
        for pool in pools:
            k = _replay_key(pool, pools, st.trace)
            if k not in st.evaluator.checks and k not in st.evaluator.replays and (id(st.evaluator), k) not in todo:
                todo[id(st.evaluator), k] = (st, pool_setting(pool, st.scn, pools, st.trace))
    if not todo:
        return
    workers = ThreadPoolExecutor(max_workers=max(1, min(len(todo), os.cpu_count() or 1)))
    for (_, k), (st, setting) in todo.items():
        st.evaluator.replays[k] = workers.submit(_replay, st, setting)
    workers.shutdown(wait=False)  # the threads end with their replays


def challenger_text(challenge: int, label: str, config: str, check, measured_rps: float) -> str:
    """What a challenger's pool that missed tells the report: every miss named, its log replay's too
    (PoolCheck.misses; a miss under the log alone had read "(the log replay)", naming no target)."""
    return (f"challenger {challenge}: {label} on {config}, planned at its model capacity, missed "
            f"({'; '.join(check.misses)}) replayed at {check.rate_rps:,.3f} req/s a replica; measured {measured_rps:,.3f} "
            "req/s per replica; the certified plan stands")


def _log_share(pool: PoolDetail, pools: list[PoolDetail]) -> tuple[int, tuple[float, ...]]:
    """Which of its class's requests a pool replays from a log: the pool's place among its class's
    pools (in plan order), and each one's part of the class's rate (PoolDetail.class_part), by which
    the class's requests are dealt to them (_dealt_to).

    Each pool is sized for its part, and the report tells the operator to route the class by these
    weights. The requests were dealt evenly over the class's replicas before, whatever each can carry:
    a mixed pool's slower replicas then missed under the log, and certification planned them lower
    round after round (an H100 beside L40S replicas, at four times the Azure sample's rate: 4 L40S at
    $8.59/hour, where 1 carries its part by weight, $4.39/hour)."""
    siblings = [q for q in pools if q.traffic_class is pool.traffic_class]
    return siblings.index(pool), tuple(q.class_part for q in siblings)


# The golden ratio's fractional part: the points j · φ mod 1 (j = 0, 1, ...) fill [0, 1) evenly at every
# length, the gaps between them taking at most three lengths (the three-distance theorem; of such
# sequences the golden ratio's is the most even: Kuipers & Niederreiter, Uniform Distribution of
# Sequences, 1974, chapter 1).
_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def _dealt_to(n: int, parts: tuple[float, ...]) -> np.ndarray:
    """The pool each of n requests (in arrival order) goes to, the pools weighted by `parts`: request j
    to the pool whose stretch of [0, 1), the parts laid end to end, holds j · φ mod 1. Each pool's
    requests are spread through the log, not taken in runs, its count within a few requests of its
    part, and the same every run. A class on one pool takes all its requests."""
    if len(parts) == 1:
        return np.zeros(n, dtype=np.int64)
    edges = np.cumsum(parts[:-1]) / sum(parts)
    return np.searchsorted(edges, np.modf(np.arange(n) * _GOLDEN)[0], side="right")


def _replay_key(pool: PoolDetail, pools: list[PoolDetail], trace: Requests | None) -> tuple:
    """What a replay's answer depends on: the pool's class, config, replicas and rate, and with a
    log, which share of it the pool is dealt. Two plans' pools alike in all but their siblings (the
    plan's pool beside another config, the same pool alone in a per-GPU plan) take different
    requests of the log, so they do not share a replay."""
    tc = pool.traffic_class
    key = (tc.option, tc.name, pool.config.label(tc.max_model_len), pool.replicas, round(pool.replay_rps, 9))
    if trace is None:
        return key
    index, parts = _log_share(pool, pools)
    return (*key, index, tuple(round(p, 12) for p in parts))


def _replay(st: Setup, p: PoolSetting) -> PoolCheck:
    slo, sim = st.scn.slo.to_slo(), st.scn.simulation
    return check_pool(p, slo, requests=run_requests(p, slo, sim), seed=sim.seed)


def run_requests(p: PoolSetting, slo: SLO, sim) -> int:
    """The requests of a pool's first run (pool_check.requests_for with the scenario's `simulation:`)."""
    return requests_for(p.hist, slo, most=sim.requests, per_band=sim.band_requests, settling=settling_requests(p),
                        rate_rps=p.rate_rps)

