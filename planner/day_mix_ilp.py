"""The day's mix: the cheapest replicas reserved for the whole period and started on demand hour
by hour, for a load that follows a daily (or weekly) curve (used by planner.daily).

A stream covered by several pools makes every hour a covering knapsack, whose optimum
CBC and HiGHS take minutes to prove for three pools; one pool per stream solves in
milliseconds (planner.daily gives each pool its own share of its class's load).

Sets
  P        pools; K load streams (each pool covers one, k(p)); H hours of the period
  S        scale segments: pieces of hours, each with a window W[s] of hours whose
           replicas must be running during it (scale-up lead time)
Data
  u[p]     capacity per replica (requests/s); g[p] GPUs per replica; m[p] replicas always up
  a[p]     on-demand $ per replica-hour; b[p] reserved $ per replica-hour
  L[k,h]   load of stream k in hour h (requests/s, headroom included)
  d[s]     length of segment s (hours); I[t] inventory cap on GPUs of type t (optional)
Variables
  R[p]     integer >= 0: replicas reserved for the whole period
  D[p,h]   integer >= 0: on-demand replicas serving hour h
  U[p,s]   continuous >= 0: on-demand replicas running in segment s (started ahead of need)
Objective (lexicographic, two solves)
  1. cost:  min  sum_p b[p] |H| R[p] + sum_p sum_s a[p] d[s] U[p,s]
  2. ties:  min  sum_p (sum_s d[s] U[p,s] + sum_h D[p,h])  subject to cost <= optimum + tolerance
            (at equal cost, fewer on-demand replica-hours: more reserved, fewer scaling actions,
            and no on-demand replica beyond what its hour needs)
Constraints
  cover_{k,h}:       sum_{p in k} u[p] (R[p] + D[p,h]) >= L[k,h]
  floor_{p,h}:       R[p] + D[p,h] >= m[p]
  running_{p,s,h}:   U[p,s] >= D[p,h]                 for h in W[s]
  inventory_{t,s}:   sum_{p on t} g[p] (R[p] + U[p,s]) <= I[t]
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from planner.ilp_solver import (
    DEFAULT_BACKEND,
    break_ties,
    lp_name,
    solution_status,
    solve_within,
    solver_for,
)
from planner.pulp_import import pulp


@dataclass(frozen=True)
class DayPool:
    """One pool of a plan, as the day's scaling sees it: what a replica holds and costs."""

    name: str
    stream: str  # the load it covers, alone or with other pools of the same stream
    gpu: str
    gpus_per_replica: int
    capacity_rps: float  # per replica
    min_replicas: int  # replicas that stay up in every hour
    on_demand_usd_per_replica_hour: float
    reserved_usd_per_replica_hour: float


@dataclass(frozen=True)
class ScaleSegment:
    """A stretch of one hour in which the replicas that must run are those of `window`'s hours
    (the hour itself, and the later hours whose replicas are already starting)."""

    hour: int
    hours: float  # its length
    window: tuple[int, ...]


@dataclass(frozen=True)
class DayMixSolution:
    status: str
    reserved: Mapping[str, int]  # pool -> replicas reserved for the whole period
    on_demand: Mapping[str, tuple[int, ...]]  # pool -> replicas started on demand for each hour
    cost_per_period: float
    solve_s: float
    solver: str


def solve_day_mix(
    pools: Sequence[DayPool],
    loads_rps: Mapping[str, Sequence[float]],
    segments: Sequence[ScaleSegment],
    *,
    inventory: Mapping[str, int] | None = None,
    backend: str = DEFAULT_BACKEND,
    time_limit_s: float = 60.0,
) -> DayMixSolution:
    """The cheapest mix of reserved and on-demand replicas; its formulation is the module's docstring."""
    t0 = time.perf_counter()
    hours = sorted({h for s in segments for h in s.window} | {s.hour for s in segments})
    period_h = sum(s.hours for s in segments)
    prob = pulp.LpProblem("day_mix", pulp.LpMinimize)
    r = {p.name: prob.add_variable(lp_name("reserved", p.name), lowBound=0, cat="Integer") for p in pools}
    d = {(p.name, h): prob.add_variable(lp_name("on_demand", p.name, h), lowBound=0, cat="Integer")
         for p in pools for h in hours}
    u = {(p.name, j): prob.add_variable(lp_name("running", p.name, j), lowBound=0) for p in pools for j in range(len(segments))}
    cost = (
        pulp.lpSum(p.reserved_usd_per_replica_hour * period_h * r[p.name] for p in pools)
        + pulp.lpSum(p.on_demand_usd_per_replica_hour * s.hours * u[(p.name, j)] for p in pools for j, s in enumerate(segments))
    )
    prob += cost, "cost_per_period"
    _add_constraints(prob, pools, loads_rps, segments, hours, dict(inventory or {}), r, d, u)
    solver = solver_for(backend, time_limit_s)
    solved = solve_within(prob, solver, time_limit_s)
    if solved != pulp.LpStatusOptimal:
        return DayMixSolution(pulp.LpStatus[solved], {}, {}, math.inf, time.perf_counter() - t0, solver.name)
    status = solution_status(prob)
    break_ties(prob, cost, pulp.lpSum(s.hours * u[(p.name, j)] for p in pools for j, s in enumerate(segments))
               + pulp.lpSum(d.values()), solver)
    return DayMixSolution(
        status=status,
        reserved={p.name: round(r[p.name].value() or 0.0) for p in pools},
        on_demand={p.name: tuple(round(d[(p.name, h)].value() or 0.0) for h in hours) for p in pools},
        cost_per_period=pulp.value(cost),
        solve_s=time.perf_counter() - t0,
        solver=solver.name,
    )


def _add_constraints(prob, pools, loads_rps, segments, hours, inventory, r, d, u) -> None:
    """The cover, floor, running and inventory families, one loop each (the module's docstring)."""
    for k, load in sorted(loads_rps.items()):
        members = [p for p in pools if p.stream == k]
        for h in hours:
            prob += (
                pulp.lpSum(p.capacity_rps * (r[p.name] + d[(p.name, h)]) for p in members) >= load[h],
                lp_name("cover", k, h),
            )
    for p in pools:
        for h in hours:
            prob += r[p.name] + d[(p.name, h)] >= p.min_replicas, lp_name("floor", p.name, h)
        for j, s in enumerate(segments):
            for h in s.window:
                prob += u[(p.name, j)] >= d[(p.name, h)], lp_name("running", p.name, j, h)
    for gpu, cap in sorted(inventory.items()):
        members = [p for p in pools if p.gpu == gpu]
        if members:
            for j in range(len(segments)):
                prob += (
                    pulp.lpSum(p.gpus_per_replica * (r[p.name] + u[(p.name, j)]) for p in members) <= cap,
                    lp_name("inventory", gpu, j),
                )
