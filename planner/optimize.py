"""The fleet ILP: the cheapest set of replicas that covers every traffic class at peak.

Only this module touches the solver library (PuLP). Its inputs are plain data —
the capacity of every candidate config for every class — computed beforehand by
planner.capacity; its output is data too (status, objective, runtime, the plan).
"""

from __future__ import annotations

import math
import os
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import lru_cache

import pulp

from planner.bounds import MAX_FLEET_GPUS
from planner.errors import InputError

COST_TOLERANCE_USD = 1e-6  # plans within this of the optimum's cost per hour count as equal
# HiGHS runs in process (CBC is a subprocess reading an MPS file). Measured by bench/solve.py on the
# shipped fleet with every service offered the full catalog, without simulation: 101 s end to end
# against CBC's 430 s (medians of 3 fresh processes, a loaded 2-core machine), the ILPs being most
# of it. Both find the same optima (tests/test_fleet.py, tests/test_optimize.py run both).
DEFAULT_BACKEND = "highs"
BEYOND_ANY_FLEET = "Beyond any fleet"  # status: every option needs more GPUs than exist


@dataclass(frozen=True)
class SplitOption:
    """One way to cut traffic: threshold None (one pool) or T (short: total <= T, long: > T)."""

    key: str  # "none" or the threshold as text
    threshold: int | None
    class_rates_rps: Mapping[str, float]  # class name -> rate to cover (peak x growth x headroom x share)


@dataclass(frozen=True)
class Candidate:
    """One deployment config able to serve one class of one split option."""

    option: str
    traffic_class: str
    config: str  # stable label: gpu, tp, dtypes, limit
    gpu: str
    gpus_per_replica: int
    cost_per_replica_hour: float
    capacity_rps: float


@dataclass(frozen=True)
class Pool:
    traffic_class: str
    config: str
    gpu: str
    replicas: int
    gpus: int
    capacity_rps: float  # per replica
    rate_rps: float  # the class's rate to cover
    cost_per_hour: float


@dataclass(frozen=True)
class FleetSolution:
    status: str  # PuLP status text: Optimal, Infeasible, Not Solved, ...
    option: str
    threshold: int | None
    pools: tuple[Pool, ...]
    cost_per_hour: float
    gpus: int
    solve_s: float
    build_s: float
    solver: str
    lp_text: str = field(default="", repr=False)
    reserved_cost_per_hour: float = 0.0  # committed GPUs, paid whether used or not
    on_demand_gpus: Mapping[str, int] = field(default_factory=dict)  # per GPU type, beyond the reserved ones
    problem: str = ""  # why there is no plan, when the solver was not asked (BEYOND_ANY_FLEET)


def undominated_candidates(candidates: Sequence[Candidate], *, free_types: frozenset[str] = frozenset()) -> list[Candidate]:
    """The candidates an optimal plan may need: a candidate is dropped when another of the same
    class on the same GPU type has at least its capacity per replica at no more cost and GPUs per
    replica (one strictly better, or the same and earlier in label order). Any plan that uses the
    dropped one is matched, replica for replica, by one that uses the other: it covers as much, costs
    and counts no more (inventory caps and reservations count GPUs of a type), and keeps the pools
    homogeneous. Not for plans that must use every reserved GPU (fewer GPUs may then not do), nor
    for the next-best distinct plans (a dominated plan is still a distinct one). free_types: GPU
    types no cap, commitment or rule tells apart (no cap, nothing committed, no most number of GPU
    types): among them the other may be on another type."""
    groups: dict[tuple[str, str, str], list[Candidate]] = {}
    for c in candidates:
        groups.setdefault((c.option, c.traffic_class, "" if c.gpu in free_types else c.gpu), []).append(c)
    keep = set()
    for group in groups.values():
        ordered = sorted(group, key=lambda c: (-c.capacity_rps, c.cost_per_replica_hour, c.gpus_per_replica, c.config))
        kept: list[Candidate] = []
        for c in ordered:  # every earlier one has at least its capacity
            if not any(k.cost_per_replica_hour <= c.cost_per_replica_hour and k.gpus_per_replica <= c.gpus_per_replica
                       for k in kept):
                kept.append(c)
        keep.update(id(c) for c in kept)
    return [c for c in candidates if id(c) in keep]


def _name(*parts: object) -> str:
    return _safe("_".join(str(p) for p in parts))


@lru_cache(maxsize=1 << 16)
def _safe(raw: str) -> str:
    """An LP-file-safe name (the same labels recur in every re-solve of a plan)."""
    return "".join(ch if ch.isalnum() else "_" for ch in raw)


@dataclass(frozen=True)
class ServiceModel:
    """One service's part of a joint ILP: its split options and candidates, and its own rules."""

    name: str  # a prefix of its variable and constraint names ("" for a plan of one service)
    options: Sequence[SplitOption]
    candidates: Sequence[Candidate]
    inventory: Mapping[str, int] = field(default_factory=dict)  # the service's own caps per GPU type
    min_replicas: int = 1
    homogeneous: bool = True
    forbid: Sequence[frozenset[tuple[str, str, str]]] = ()  # plans of this service to exclude


@dataclass(frozen=True)
class JointSolution:
    """Several services solved together: each one's plan and the fleet's totals."""

    status: str
    services: tuple[FleetSolution, ...]  # in the order given; pools priced at their candidates' prices
    cost_per_hour: float  # the fleet's: committed GPUs (used or not) + on-demand GPUs
    gpus: int
    gpus_by_type: Mapping[str, int]
    on_demand_gpus: Mapping[str, int]  # per committed GPU type, beyond the committed ones
    reserved_cost_per_hour: float
    solve_s: float
    build_s: float
    solver: str
    lp_text: str = field(default="", repr=False)


def solve_fleet(
    options: Sequence[SplitOption],
    candidates: Sequence[Candidate],
    *,
    inventory: Mapping[str, int] | None = None,
    min_replicas: int = 1,
    homogeneous: bool = True,
    backend: str = DEFAULT_BACKEND,
    time_limit_s: float = 60.0,
    forbid: Sequence[frozenset[tuple[str, str, str]]] = (),
    reserved: Mapping[str, tuple[int, float]] | None = None,
    reserved_pools: bool = True,
    use_reserved: bool = False,
    keep_lp: bool = False,
    tie_break: bool = True,
) -> FleetSolution:
    """The cheapest plan of one service (solve_services with one service and its caps as the
    shared ones); its formulation is solve_services'."""
    joint = solve_services(
        [ServiceModel("", options, candidates, {}, min_replicas, homogeneous, forbid)], inventory=inventory,
        backend=backend, time_limit_s=time_limit_s, reserved=reserved, reserved_pools=reserved_pools,
        use_reserved=use_reserved, keep_lp=keep_lp, tie_break=tie_break,
    )
    sol = joint.services[0]
    if not sol.pools:
        return sol
    # The one service carries the commitments, used or not.
    return replace(sol, cost_per_hour=joint.cost_per_hour, reserved_cost_per_hour=joint.reserved_cost_per_hour,
                   on_demand_gpus=joint.on_demand_gpus)


def solve_services(
    services: Sequence[ServiceModel],
    *,
    inventory: Mapping[str, int] | None = None,
    reserved: Mapping[str, tuple[int, float]] | None = None,
    reserved_pools: bool = True,
    use_reserved: bool = False,
    max_gpu_types: int | None = None,
    backend: str = DEFAULT_BACKEND,
    time_limit_s: float = 60.0,
    keep_lp: bool = False,
    tie_break: bool = True,
) -> JointSolution:
    """Minimise the cost per hour of a fleet of services that share GPU inventory and commitments.

    Sets
      S        services; for each s:
      O(s)     its split options (no split, and each threshold T)
      K(o)     traffic classes of option o (one, or short and long)
      C(o,k)   candidate configs with positive capacity for class k of option o
      G        GPU types
    Data
      r[o,k]   rate to cover (requests/s); u[c] capacity per replica (requests/s)
      p[c]     cost of one replica per hour (price x GPUs); g[c] GPUs per replica
      I[g]     shared inventory cap on GPUs of type g (optional); I[s,g] service s's own cap
      m[s]     minimum replicas per pool of service s; D most GPU types the fleet may use (optional)
      R[g], q[g] committed (reserved or owned) GPUs of type g and their price per GPU-hour (optional)
      d[g]     on-demand price per GPU-hour of type g (= p[c] / g[c] for c on g, the same in every service)
    Variables
      y[o]     binary: option o is chosen (of its service)
      z[c]     binary: config c forms a pool (of its class)
      x[c]     integer >= 0: replicas of config c
      od[g]    continuous >= 0: GPUs of a committed type g used beyond the committed ones
      t[g]     binary: the fleet uses GPU type g (only with D)
      Rsv      the committed types {g : R[g] > 0}
    Objective (lexicographic, two solves)
      1. cost:  min  sum_{c not on a committed type} p[c] x[c]  +  sum_g (R[g] q[g] + d[g] od[g])
         (committed GPUs are paid whether used or not, so R[g] q[g] is a constant)
      2. ties:  min  sum_c g[c] x[c]  +  sum_c z[c] / (|C| + 1)  +  sum_o rank(o) y[o] / ((|C| + 1)(N + 1))
         subject to cost <= optimum + tolerance: fewer GPUs, then fewer pools, then no split or
         the lowest threshold (rank 0 for no split, then thresholds in increasing order, within
         each service; N = sum_s (|O(s)| - 1), the most the ranks can add up to), so that the
         split decision does not depend on the solver. Exact, unlike epsilon weights on the
         cost, which solver tolerances swallow: each term stays below one step of the term
         before it, and the last term's steps, 1 / ((|C| + 1)(N + 1)), are far above the
         solvers' absolute gaps (HiGHS 1e-6, CBC 1e-9 here) at catalog scale. Skipped with
         tie_break=False (when only the optimum's cost is wanted: the cost of a constraint).
    Constraints (per service s; names carry the service's name)
      one_split:            sum_{o in O(s)} y[o] = 1
      cover_{o,k}:          sum_{c in C(o,k)} u[c] x[c] >= r[o,k] y[o]
      pool_exists_{o,k}:    sum_{c in C(o,k)} z[c] >= y[o]          (a chosen option's classes get pools)
      homogeneous_{o,k}:    sum_{c in C(o,k)} z[c] <= y[o]          (one config per pool; optional)
        with reserved_pools, committed GPUs are already paid and must not be stranded by
        homogeneity: the sum runs over c not on a committed type, and
      homogeneous_{o,k,g}:  sum_{c in C(o,k) on g} z[c] <= y[o]     for g in Rsv (one pool per committed type)
      only_chosen_{c}:      z[c] <= y[o(c)]
      replicas_if_pool_{c}: x[c] <= M[c] z[c],  M[c] = max(m, ceil(r/u[c]))  (no replicas without a pool)
      min_replicas_{c}:     x[c] >= m[s] z[c]                       (N+1 when m = 2)
      inventory_{s,g}:      sum_{c of s on g} g[c] x[c] <= I[s,g]
      exclude_{j}:          sum_{(o,k,c) in plan j} z[c] <= |plan j| - 1  (next-best distinct plans)
    Constraints shared by the services
      inventory_{g}:        sum_{c on g} g[c] x[c] <= I[g]
      on_demand_{g}:        od[g] >= sum_{c on g} g[c] x[c] - R[g]
      use_reserved_{g}:     sum_{c on g} g[c] x[c] >= R[g]          (use_reserved: every committed GPU runs;
                            M[c] then also admits ceil(R[g] / g[c]) replicas)
      uses_type_{c}:        z[c] <= t[g(c)];   gpu_types:  sum_g t[g] <= D   (with D)
    """
    t0 = time.perf_counter()
    inventory = dict(inventory or {})
    prob = pulp.LpProblem("fleet", pulp.LpMinimize)
    reserved = {g: r for g, r in (reserved or {}).items() if r[0] > 0}
    parts = [_ServiceVars(prob, sv, reserved, reserved_pools, use_reserved) for sv in services]
    if any(not part.servable for part in parts):  # no config for some class of every option, or too many GPUs
        status = BEYOND_ANY_FLEET if any(part.oversized for part in parts) else "Infeasible"
        empty = tuple(FleetSolution(BEYOND_ANY_FLEET if part.oversized else "Infeasible", "", None, (), math.inf, 0,
                                    0.0, time.perf_counter() - t0, backend, problem=part.oversized) for part in parts)
        return JointSolution(status, empty, math.inf, 0, {}, {}, 0.0, 0.0, time.perf_counter() - t0, backend)
    members = [(part, i) for part in parts for i in part.keep]

    def on_type(g: str):
        return [(part, i) for part, i in members if part.cands[i].gpu == g]

    def gpus_of(pairs):
        return pulp.lpSum(part.cands[i].gpus_per_replica * part.x[i] for part, i in pairs)

    od_price = _on_demand_prices([part.cands[i] for part, i in members], reserved)
    od = {g: prob.add_variable(_name("on_demand", g), lowBound=0) for g in sorted(od_price)}
    reserved_cost = sum(n * price for n, price in reserved.values())
    cost = (
        pulp.lpSum(part.cands[i].cost_per_replica_hour * part.x[i] for part, i in members
                   if part.cands[i].gpu not in reserved)
        + pulp.lpSum(od_price[g] * od[g] for g in od)
        + reserved_cost
    )
    prob += cost, "cost_per_hour"
    for part in parts:
        part.add_constraints()
    for gpu, cap in sorted(inventory.items()):
        pairs = on_type(gpu)
        if pairs:
            prob += gpus_of(pairs) <= cap, _name("inventory", gpu)
    for g in od:
        prob += od[g] >= gpus_of(on_type(g)) - reserved[g][0], _name("on_demand", g)
        if use_reserved:
            prob += gpus_of(on_type(g)) >= reserved[g][0], _name("use_reserved", g)
    if max_gpu_types is not None:
        types = sorted({part.cands[i].gpu for part, i in members})
        used = {g: prob.add_variable(_name("uses", g), cat="Binary") for g in types}
        for part, i in members:
            prob += part.z[i] <= used[part.cands[i].gpu], _name("uses_type", part.prefix, *part.label[i])
        prob += pulp.lpSum(used.values()) <= max_gpu_types, "gpu_types"

    lp_text = _lp_text(prob) if keep_lp else ""
    build_s = time.perf_counter() - t0
    solver = _solver(backend, time_limit_s)
    t1 = time.perf_counter()
    prob.solve(solver)
    status = pulp.LpStatus[prob.status]
    if prob.status != pulp.LpStatusOptimal or prob.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        solve_s = time.perf_counter() - t1
        empty = FleetSolution(status, "", None, (), math.inf, 0, solve_s, build_s, solver.name, lp_text)
        return JointSolution(status, tuple(empty for _ in services), math.inf, 0, {}, {}, 0.0, solve_s, build_s,
                             solver.name, lp_text)
    # CBC stopped by its time limit with a plan in hand reports "Optimal" with an
    # integer-feasible solution: say that it is not proven optimal.
    status = "Optimal" if prob.sol_status == pulp.LpSolutionOptimal else "Feasible (time limit, not proven optimal)"
    if tie_break:
        optimum = pulp.value(cost)
        first = {v.name: v.varValue for v in prob.variables()}
        prob += cost <= optimum + COST_TOLERANCE_USD, "cost_at_optimum"
        all_z = [part.z[i] for part, i in members]
        # The ranks summed over the services stay below ranks + 1, so the last term never outweighs one pool.
        ranks = sum(len(part.servable) - 1 for part in parts)
        ranked = [(rank, part.y[o.key]) for part in parts
                  for rank, o in enumerate(sorted(part.servable, key=lambda o: -1 if o.threshold is None else o.threshold))]
        prob.setObjective(gpus_of(members) + pulp.lpSum(all_z) / (len(all_z) + 1)
                          + pulp.lpSum(rank * y for rank, y in ranked) / ((len(all_z) + 1) * (ranks + 1)))
        prob.solve(solver)
        if prob.status != pulp.LpStatusOptimal:  # e.g. the time limit: the cost-optimal solution stands
            prob.assignVarsVals(first)
    solve_s = time.perf_counter() - t1
    pools = [part.pools() for part in parts]
    used = {}
    for ps in pools:
        for p in ps[1]:
            used[p.gpu] = used.get(p.gpu, 0) + p.gpus
    for g in reserved:
        used.setdefault(g, 0)
    on_demand = {g: max(0, used[g] - reserved.get(g, (0, 0.0))[0]) for g in sorted(used)}
    on_demand_cost = sum(p.cost_per_hour for _, ps in pools for p in ps if p.gpu not in reserved) + sum(
        od_price.get(g, 0.0) * on_demand[g] for g in reserved)
    fleet_cost = reserved_cost + on_demand_cost
    # Each service's plan is priced at its candidates' prices; the commitments are the fleet's.
    solutions = [
        FleetSolution(status=status, option=option.key, threshold=option.threshold, pools=tuple(ps),
                      cost_per_hour=sum(p.cost_per_hour for p in ps), gpus=sum(p.gpus for p in ps), solve_s=solve_s,
                      build_s=build_s, solver=solver.name, lp_text=lp_text)
        for option, ps in pools
    ]
    return JointSolution(status, tuple(solutions), fleet_cost, sum(used.values()),
                         {g: n for g, n in sorted(used.items()) if n}, on_demand, reserved_cost, solve_s, build_s,
                         solver.name, lp_text)


class _ServiceVars:
    """One service's variables and constraints in a joint problem (solve_services)."""

    def __init__(self, prob, sv: ServiceModel, reserved, reserved_pools: bool, use_reserved: bool):
        self.prob, self.sv, self.prefix = prob, sv, sv.name
        self.reserved, self.reserved_pools, self.use_reserved = reserved, reserved_pools, use_reserved
        self.cands = sv.candidates
        self.rates = {(o.key, k): r for o in sv.options for k, r in o.class_rates_rps.items()}
        self.by_class: dict[tuple[str, str], list[int]] = {key: [] for key in self.rates}
        for i, c in enumerate(self.cands):
            if c.capacity_rps <= 0:
                raise ValueError("candidates must have positive capacity")
            if (c.option, c.traffic_class) not in self.by_class:
                raise ValueError(f"candidate for unknown class {c.option}/{c.traffic_class}")
            self.by_class[(c.option, c.traffic_class)].append(i)
        self.servable = [o for o in sv.options if all(self.by_class[(o.key, k)] for k in o.class_rates_rps)]
        # An option with a class that needs more GPUs than exist is no plan: a solver would spend
        # minutes on its huge coefficients and return a fleet nobody can buy.
        oversized = {o.key: _oversized(o, self.cands, self.by_class) for o in self.servable}
        self.oversized = next(iter(oversized.values()), "") if all(oversized.values()) else ""
        self.servable = [o for o in self.servable if not oversized[o.key]]
        if not self.servable:
            return

        def name(*parts):
            return _name(*([self.prefix] if self.prefix else []), *parts)

        self.name = name
        self.y = {o.key: prob.add_variable(name("use_split", o.key), cat="Binary") for o in self.servable}
        self.keep = [i for i, c in enumerate(self.cands) if c.option in self.y]
        self.label = {i: (self.cands[i].option, self.cands[i].traffic_class, self.cands[i].config) for i in self.keep}
        self.z = {i: prob.add_variable(name("pool", *self.label[i]), cat="Binary") for i in self.keep}
        self.x = {i: prob.add_variable(name("replicas", *self.label[i]), lowBound=0, cat="Integer") for i in self.keep}

    def add_constraints(self) -> None:
        prob, sv, name, cands, reserved = self.prob, self.sv, self.name, self.cands, self.reserved
        y, z, x = self.y, self.z, self.x
        prob += pulp.lpSum(y.values()) == 1, name("one_split")
        for o in self.servable:
            for k in o.class_rates_rps:
                members = self.by_class[(o.key, k)]
                rate = self.rates[(o.key, k)]
                prob += (
                    pulp.lpSum(cands[i].capacity_rps * x[i] for i in members) >= rate * y[o.key],
                    name("cover", o.key, k),
                )
                prob += pulp.lpSum(z[i] for i in members) >= y[o.key], name("pool_exists", o.key, k)
                if sv.homogeneous:
                    own = set(reserved) if self.reserved_pools else set()
                    shared = [i for i in members if cands[i].gpu not in own]
                    prob += pulp.lpSum(z[i] for i in shared) <= y[o.key], name("homogeneous", o.key, k)
                    for g in sorted(own & {cands[i].gpu for i in members}):
                        on_g = [i for i in members if cands[i].gpu == g]
                        prob += pulp.lpSum(z[i] for i in on_g) <= y[o.key], name("homogeneous", o.key, k, g)
        for i in self.keep:
            c = cands[i]
            big_m = max(sv.min_replicas, math.ceil(self.rates[(c.option, c.traffic_class)] / c.capacity_rps - 1e-12))
            if self.use_reserved and c.gpu in reserved:
                big_m = max(big_m, math.ceil(reserved[c.gpu][0] / c.gpus_per_replica))
            prob += z[i] <= y[c.option], name("only_chosen", *self.label[i])
            prob += x[i] <= big_m * z[i], name("replicas_if_pool", *self.label[i])
            prob += x[i] >= sv.min_replicas * z[i], name("min_replicas", *self.label[i])
        for gpu, cap in sorted(sv.inventory.items()):
            members = [i for i in self.keep if cands[i].gpu == gpu]
            if members:
                prob += pulp.lpSum(cands[i].gpus_per_replica * x[i] for i in members) <= cap, name("inventory", gpu)
        index = {(c.option, c.traffic_class, c.config): i for i, c in enumerate(cands)}
        for j, plan in enumerate(sv.forbid):
            members = [index[key] for key in plan if key in index and index[key] in z]
            if len(members) == len(plan):
                prob += pulp.lpSum(z[i] for i in members) <= len(members) - 1, name("exclude", j)

    def pools(self) -> tuple[SplitOption, list[Pool]]:
        """The chosen option and its pools, from the solved variables."""
        chosen = max(self.y, key=lambda k: self.y[k].value() or 0.0)
        option = next(o for o in self.servable if o.key == chosen)
        pools = []
        for i in self.keep:
            replicas = round(self.x[i].value() or 0.0)
            if replicas <= 0:
                continue
            c = self.cands[i]
            pools.append(Pool(
                traffic_class=c.traffic_class, config=c.config, gpu=c.gpu, replicas=replicas,
                gpus=replicas * c.gpus_per_replica, capacity_rps=c.capacity_rps,
                rate_rps=self.rates[(c.option, c.traffic_class)], cost_per_hour=replicas * c.cost_per_replica_hour,
            ))
        pools.sort(key=lambda p: (list(option.class_rates_rps).index(p.traffic_class), p.config))
        return option, pools


def _oversized(option: SplitOption, candidates: Sequence[Candidate], by_class) -> str:
    """Why `option` needs more than MAX_FLEET_GPUS GPUs for one of its classes, or ''."""
    for k, rate in option.class_rates_rps.items():
        members = [candidates[i] for i in by_class[(option.key, k)]]
        fewest = min(
            (math.ceil(rate / c.capacity_rps) * c.gpus_per_replica if math.isfinite(rate) else math.inf, c.config)
            for c in members
        )
        if fewest[0] > MAX_FLEET_GPUS:
            shown = "infinitely many" if math.isinf(fewest[0]) else f"{fewest[0]:,}"
            return (
                f"class '{k}' needs {shown} GPUs to serve {rate:,.4g} requests/s even on its best config "
                f"({fewest[1]}), more than the {MAX_FLEET_GPUS:,} that bound any fleet (26 times the "
                "data-center GPUs shipped in 2023); check traffic.peak, traffic.growth and traffic.headroom"
            )
    return ""


def _on_demand_prices(candidates: Sequence[Candidate], reserved) -> dict[str, float]:
    """On-demand price per GPU-hour of each reserved GPU type, from its candidates."""
    prices: dict[str, float] = {}
    for g in reserved:
        seen = {round(c.cost_per_replica_hour / c.gpus_per_replica, 9) for c in candidates if c.gpu == g}
        if len(seen) > 1:
            raise ValueError(f"GPU type {g} has several on-demand prices {sorted(seen)}; reservations need one")
        prices[g] = seen.pop() if seen else 0.0
    return prices


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
    """The cheapest mix of replicas reserved for the whole period and replicas started on
    demand hour by hour, for a load that follows a daily (or weekly) curve.

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
    t0 = time.perf_counter()
    inventory = dict(inventory or {})
    hours = sorted({h for s in segments for h in s.window} | {s.hour for s in segments})
    period_h = sum(s.hours for s in segments)
    prob = pulp.LpProblem("day_mix", pulp.LpMinimize)
    r = {p.name: prob.add_variable(_name("reserved", p.name), lowBound=0, cat="Integer") for p in pools}
    d = {(p.name, h): prob.add_variable(_name("on_demand", p.name, h), lowBound=0, cat="Integer")
         for p in pools for h in hours}
    u = {(p.name, j): prob.add_variable(_name("running", p.name, j), lowBound=0) for p in pools for j in range(len(segments))}
    cost = (
        pulp.lpSum(p.reserved_usd_per_replica_hour * period_h * r[p.name] for p in pools)
        + pulp.lpSum(p.on_demand_usd_per_replica_hour * s.hours * u[(p.name, j)] for p in pools for j, s in enumerate(segments))
    )
    prob += cost, "cost_per_period"
    for k, load in sorted(loads_rps.items()):
        members = [p for p in pools if p.stream == k]
        for h in hours:
            prob += (
                pulp.lpSum(p.capacity_rps * (r[p.name] + d[(p.name, h)]) for p in members) >= load[h],
                _name("cover", k, h),
            )
    for p in pools:
        for h in hours:
            prob += r[p.name] + d[(p.name, h)] >= p.min_replicas, _name("floor", p.name, h)
        for j, s in enumerate(segments):
            for h in s.window:
                prob += u[(p.name, j)] >= d[(p.name, h)], _name("running", p.name, j, h)
    for gpu, cap in sorted(inventory.items()):
        members = [p for p in pools if p.gpu == gpu]
        if members:
            for j in range(len(segments)):
                prob += (
                    pulp.lpSum(p.gpus_per_replica * (r[p.name] + u[(p.name, j)]) for p in members) <= cap,
                    _name("inventory", gpu, j),
                )
    solver = _solver(backend, time_limit_s)
    prob.solve(solver)
    if prob.status != pulp.LpStatusOptimal:
        return DayMixSolution(pulp.LpStatus[prob.status], {}, {}, math.inf, time.perf_counter() - t0, solver.name)
    status = "Optimal" if prob.sol_status == pulp.LpSolutionOptimal else "Feasible (time limit, not proven optimal)"
    first = {v.name: v.varValue for v in prob.variables()}
    prob += cost <= pulp.value(cost) + COST_TOLERANCE_USD, "cost_at_optimum"
    prob.setObjective(
        pulp.lpSum(s.hours * u[(p.name, j)] for p in pools for j, s in enumerate(segments)) + pulp.lpSum(d.values())
    )
    prob.solve(solver)
    if prob.status != pulp.LpStatusOptimal:
        prob.assignVarsVals(first)
    return DayMixSolution(
        status=status,
        reserved={p.name: round(r[p.name].value() or 0.0) for p in pools},
        on_demand={p.name: tuple(round(d[(p.name, h)].value() or 0.0) for h in hours) for p in pools},
        cost_per_period=pulp.value(cost),
        solve_s=time.perf_counter() - t0,
        solver=solver.name,
    )


_HIGHS_BANNER_SILENCED = False


@contextmanager
def _quiet_stdout():
    """Send file descriptor 1 to /dev/null for a moment (C code that prints, not Python)."""
    try:
        sys.stdout.flush()
        saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError):  # no usable stdout: nothing to silence
        yield
        return
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


if hasattr(pulp, "HiGHS") and pulp.HiGHS().available():
    class _QuietHiGHS(pulp.HiGHS):
        """PuLP's HiGHS interface. HiGHS prints its banner on stdout when a process builds its first
        solver object, before any option can turn output off, which would break `--json` output:
        that first object is built with stdout silenced."""

        def createAndConfigureSolver(self, lp):
            global _HIGHS_BANNER_SILENCED
            if _HIGHS_BANNER_SILENCED:
                return super().createAndConfigureSolver(lp)
            with _quiet_stdout():
                super().createAndConfigureSolver(lp)
            _HIGHS_BANNER_SILENCED = True
            return None

else:  # highspy is not installed
    _QuietHiGHS = None


def _solver(backend: str, time_limit_s: float):
    if backend == "highs":
        if _QuietHiGHS is None:
            raise InputError("solver.backend 'highs' (the default) needs the highspy package, a dependency of planner: "
                             "pip install highspy, or set solver: {backend: cbc}")
        return _QuietHiGHS(msg=False, timeLimit=time_limit_s, gapRel=0.0)
    if backend != "cbc":
        raise InputError(f"unknown solver backend '{backend}' (cbc, highs)")
    # PuLP 3.x warns that the bundled CBC goes away in 4.0; the project pins <4 precisely to keep it.
    # No `threads` option: with it the bundled CBC sometimes waits 10 s for a worker thread to
    # start ("Thread 0 used 0 times, waiting to start 10.000155" in its log) on a model it
    # solves in milliseconds.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s, gapRel=0.0, gapAbs=1e-9)


def _lp_text(prob: pulp.LpProblem) -> str:
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".lp")
    os.close(fd)
    try:
        prob.writeLP(path)
        with open(path, encoding="utf-8") as f:
            return f.read()
    finally:
        os.unlink(path)
