"""Certification of a plan by simulation: every pool replayed (planner.pool_check), and the
pools that miss re-planned at their simulated capacity until all hold or the rounds are spent.
"""

from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor

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
    requests_for,
)
from planner.progress import stage
from planner.requests import Requests
from planner.scenario import Scenario
from planner.targets import SLO

# A pool that missed at its rate is planned at least this share below it: the simulated capacity
# is bisected to 2% (pool_check.capacity_on_every_run), and a re-plan at the rate that missed would
# meet the same check again.
REPLAN_STEP = 0.02


def pool_setting(pool: PoolDetail, scn: Scenario, pools: list[PoolDetail], trace: Requests | None) -> PoolSetting:
    """What certification needs of a pool: its replica, traffic, rate, model, and its share of the log."""
    tc = pool.traffic_class
    mine = None
    if trace is not None:
        total = trace.prompt_tokens + trace.output_tokens
        lo = 0 if tc.name != "long" else int(tc.option)
        in_class = np.flatnonzero((total > lo) & (total <= edge_at_most(tc.max_model_len)))
        offset, class_replicas = _log_share(pool, pools)
        replica = np.arange(in_class.size) % class_replicas
        take = in_class[(replica >= offset) & (replica < offset + pool.replicas)]
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
        # Each plan's pools with their replay keys, this round. Replays already run for a scenario
        # are kept (the plan's, the per-GPU plans'), and those started ahead are waited for.
        keyed = [[(pool, _replay_key(pool, pools, st.trace)) for pool in pools] for st, _, _, pools, _ in state]
        todo = []
        for (st, _, _, pools, _), pairs in zip(state, keyed, strict=True):
            fresh = {k: pool for pool, k in pairs if k not in st.evaluator.checks}
            todo += [(st, k, pool_setting(pool, st.scn, pools, st.trace)) for k, pool in fresh.items()]
        # The simulator's loop releases the GIL: pools replay side by side, one thread each.
        done = []
        with (ThreadPoolExecutor(max_workers=max(1, min(len(todo), os.cpu_count() or 1))) as workers,
              stage("certification" if not spent else f"certification, re-plan {spent}", len(todo), " pools") as step):
            started = [st.evaluator.replays.pop(k, None) or workers.submit(_replay, st, p) for st, k, p in todo]
            for future in started:
                done.append(future.result())
                step.advance()
        for (st, k, _), check in zip(todo, done, strict=True):
            st.evaluator.checks[k] = check
        missing = [[(pool, st.evaluator.checks[k]) for pool, k in pairs if not st.evaluator.checks[k].holds]
                   for (st, *_), pairs in zip(state, keyed, strict=True)]
        if not any(missing) or spent == rounds:
            break
        spent += 1
        for i, miss in enumerate(missing):
            own_rounds[i] += bool(miss)
        for (st, evals, _, pools, changes), miss in zip(state, missing, strict=True):
            slo, sim = st.scn.slo.to_slo(), st.scn.simulation
            for pool, check in miss:
                tc = pool.traffic_class
                config = pool.config.label(tc.max_model_len)
                if not check.problems:  # held at its planned rate with Poisson arrivals, not under the log's bursts
                    new = pool.planned_rps * pool.replicas / (pool.replicas + 1)
                    why = "the log's own arrivals: " + "; ".join(check.replay.problems)
                else:
                    setting = pool_setting(pool, st.scn, pools, None)
                    # The capacity on the first runs the verdict pooled (CONFIRM_RUNS at most): each must
                    # hold (the pooled p99 is no worse than the worst run's). The worst of four runs lies
                    # about a run's spread above their mean, so the pooled value lands about two of four
                    # runs' standard errors below the limit: at the edge of the undecided band, which the
                    # next round's check may widen to more runs (pool_check), and where sixteen runs leave
                    # it undecided, miss again, so the round after plans lower still (each round at least
                    # REPLAN_STEP lower, up to max_rounds). Every run of sixteen holding would set it by
                    # the worst of sixteen, further below. And below the rate that missed, so a round
                    # changes the plan.
                    n = _requests(setting, slo, sim)
                    new = min(capacity_on_every_run(setting, slo, requests=n, seeds=tuple(check.seeds[:CONFIRM_RUNS])),
                              pool.replay_rps * (1 - REPLAN_STEP))
                    why = "; ".join(check.problems)
                st.evaluator.record_simulated(next(e for e in evals if e.key == (tc.option, tc.name, config)), new,
                                              calibrates=bool(check.problems))
                changes.append(f"round {spent}: {tc.label} on {config} missed ({why}); planned at {new:,.3f} instead "
                               f"of {pool.planned_rps:,.3f} req/s per replica")
        answers = resolve([part[1] for part in state])
        if any(not sol.pools for sol, _ in answers):
            raise InfeasibleError("no plan holds its targets in simulation: "
                                  + " | ".join(c for part in state for c in part[4]))
        for part, (sol, evals) in zip(state, answers, strict=True):
            part[1], part[2], part[3] = evals, sol, pool_details(part[0].evaluator, evals, sol)
    out = []
    for (st, evals, sol, pools, changes), pairs, own in zip(state, keyed, own_rounds, strict=True):
        sim = st.scn.simulation
        checks = [st.evaluator.checks[k] for _, k in pairs]
        certified = all(check.holds for check in checks)
        pools = [dataclasses.replace(pool, check=check) for pool, check in zip(pools, checks, strict=True)]
        out.append((evals, sol, pools, Certification(certified, own, tuple(changes), sim.requests, sim.band_requests,
                                                     sim.seed, joint_rounds=spent)))
    return out


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


def _log_share(pool: PoolDetail, pools: list[PoolDetail]) -> tuple[int, int]:
    """Which of its class's requests a pool replays from a log: a plain load balancer deals them to
    the class's replicas in turn, whatever each can carry, so the pool takes the replicas from
    `offset` on, of `class_replicas` in all (its siblings in the class come first, in plan order)."""
    siblings = [q for q in pools if q.traffic_class is pool.traffic_class]
    return sum(q.replicas for q in siblings[: siblings.index(pool)]), sum(q.replicas for q in siblings)


def _replay_key(pool: PoolDetail, pools: list[PoolDetail], trace: Requests | None) -> tuple:
    """What a replay's answer depends on: the pool's class, config, replicas and rate, and with a
    log, which share of it the pool is dealt. Two plans' pools alike in all but their siblings (the
    plan's pool beside another config, the same pool alone in a per-GPU plan) take different
    requests of the log, so they do not share a replay."""
    tc = pool.traffic_class
    key = (tc.option, tc.name, pool.config.label(tc.max_model_len), pool.replicas, round(pool.replay_rps, 9))
    return key if trace is None else (*key, *_log_share(pool, pools))


def _replay(st: Setup, p: PoolSetting) -> PoolCheck:
    slo, sim = st.scn.slo.to_slo(), st.scn.simulation
    return check_pool(p, slo, requests=_requests(p, slo, sim), seed=sim.seed)


def _requests(p: PoolSetting, slo: SLO, sim) -> int:
    return requests_for(p.hist, slo, most=sim.requests, per_band=sim.band_requests)

