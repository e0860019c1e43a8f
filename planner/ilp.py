"""The fleet ILP: the cheapest set of replicas that covers every traffic class of every service at peak.

Only this module and planner.day_mix_ilp touch the solver library (PuLP, through
planner.ilp_solver). Its inputs are plain data, the capacity of every candidate config for
every class, computed beforehand by planner.capacity (planner.evaluator); its output is data
too (status, objective, runtime, the plan).

The formulation (solve_services; solve_fleet is one service of it):

Sets
  S        services; for each s:
  O(s)     its split options (no split, and each threshold T)
  K(o)     traffic classes of option o (one, or short and long)
  C(o,k)   candidate configs with positive capacity for class k of option o; where nothing but
           the split ties the classes together (no caps, commitments, rule on GPU types or excluded
           plan, one pool a class), only those whose pool alone costs the class's least: every plan
           at the optimum's cost takes such pools (cheapest_of_class). The model --write-lp writes
           keeps them all (the same optimum; among plans tied on every term, the solver may pick
           another GPU type of the same price there).
  G        GPU types
Data
  r[o,k]   rate to cover (requests/s); u[c] capacity per replica (requests/s)
  p[c]     cost of one replica per hour (price x GPUs); g[c] GPUs per replica
  I[g]     shared inventory cap on GPUs of type g (optional); I[s,g] service s's own cap
  m[s]     minimum replicas per pool of service s; D most GPU types the fleet may use (optional)
  R[g], q[g] committed (reserved or owned) GPUs of type g and their price per GPU-hour (optional)
  Rsv      the committed types {g : R[g] > 0}
  d[g]     on-demand price per GPU-hour of type g (= p[c] / g[c] for c on g, the same in every service)
Variables
  y[o]     binary: option o is chosen (of its service)
  z[c]     binary: config c forms a pool (of its class)
  x[c]     integer >= 0: replicas of config c
  od[g]    continuous >= 0: GPUs of a committed type g used beyond the committed ones
  t[g]     binary: the fleet uses GPU type g (only with D)
Objective (lexicographic: two solves, then a rule)
  1. cost:  min  sum_{c not on a committed type} p[c] x[c]  +  sum_g (R[g] q[g] + d[g] od[g])
     (committed GPUs are paid whether used or not, so R[g] q[g] is a constant)
  2. ties:  min  (|C| + 1)(N + 1) sum_c g[c] x[c]  +  (N + 1) sum_c z[c]  +  sum_o rank(o) y[o]
     subject to cost <= optimum + tolerance: fewer GPUs, then fewer pools, then no split or
     the lowest threshold (rank 0 for no split, then thresholds in increasing order, within
     each service; N = sum_s (|O(s)| - 1), the most the ranks can add up to), so that the
     split decision does not depend on the solver. Exact, unlike epsilon weights on the
     cost, which solver tolerances swallow: each term stays below one step of the term
     before it, and every coefficient is an integer, so the objective is integral and the
     solver may prune a node whose bound is not a whole unit below the best plan's (the
     catalog-wide fleet of bench/solve.py: this solve took 1.75 s, against 2.52 s with the
     terms scaled to one GPU, 1 / ((|C| + 1)(N + 1)) its smallest step). Skipped with
     tie_break=False (when only the optimum's cost is wanted: the cost of a constraint).
  3. among plans tied on both, each class served by one pool takes the config on its GPU type
     that serves it with the same GPUs at the same cost with the more precise weights, then KV
     cache, then the most requests/s, then the first label (canonical_ties, after the solves: the
     solver's own pick among exact ties follows its search path, which another set of candidates
     changes). Skipped where tie_break is; a plan to exclude stays excluded.
Constraints (per service s; names carry the service's name)
  one_split:            sum_{o in O(s)} y[o] = 1
  cover_{o,k}:          sum_{c in C(o,k)} u[c] x[c] >= r[o,k] y[o]
  pool_exists_{o,k}:    sum_{c in C(o,k)} z[c] >= y[o]          (a chosen option's classes get pools)
  homogeneous_{o,k}:    sum_{c in C(o,k)} z[c] <= y[o]          (one config per pool; optional)
    with reserved_pools, committed GPUs are already paid and must not be stranded by
    homogeneity: the sum runs over c not on a committed type, and
  homogeneous_{o,k,g}:  sum_{c in C(o,k) on g} z[c] <= y[o]     for g in Rsv (one pool per committed type;
                        and for the service's pool_types, a fleet service re-solved alone)
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
                        (a fleet service re-solved alone: g over the types the other services do
                        not run, and D less the types they run, which count whatever it chooses)
"""

from __future__ import annotations

import itertools
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from planner.bounds import DEMAND_FIELDS, MAX_FLEET_GPUS, OVER_FLEET_BOUND
from planner.ilp_solver import (
    COST_TOLERANCE_USD,
    DEFAULT_BACKEND,
    break_ties,
    lp_name,
    lp_text,
    solution_status,
    solve_within,
    solver_for,
)
from planner.pulp_import import pulp
from planner.units import usd_text

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
    precision_bits: tuple[float, float] = (0.0, 0.0)  # (weights, KV cache): among exact ties, the more precise is kept


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

    @property
    def split_text(self) -> str:
        """The deployment in words: "no split", or "split at 16,384" (the threshold in tokens)."""
        return "no split" if self.threshold is None else f"split at {self.threshold:,}"

    @property
    def gpus_by_type(self) -> dict[str, int]:
        """The pools' GPUs per GPU type, by type name."""
        used: dict[str, int] = {}
        for pool in self.pools:
            used[pool.gpu] = used.get(pool.gpu, 0) + pool.gpus
        return dict(sorted(used.items()))


def undominated_candidates(candidates: Sequence[Candidate], *, free_types: frozenset[str] = frozenset(),
                           protected: frozenset[tuple[str, str, str]] = frozenset()) -> list[Candidate]:
    """The candidates an optimal plan may need: a candidate is dropped when another of the same
    class on the same GPU type has at least its capacity per replica at no more cost and GPUs per
    replica (one strictly better, or the same and earlier in label order). Any plan that uses the
    dropped one is matched, replica for replica, by one that uses the other: it covers as much, costs
    and counts no more (inventory caps and reservations count GPUs of a type), and keeps the pools
    homogeneous. Not for plans that must use every reserved GPU (fewer GPUs may then not do).
    free_types: GPU types no cap, commitment or rule tells apart (no cap, nothing committed, no most
    number of GPU types): among them the other may be on another type.

    protected: the (option, class, config) of the pools of the plans to exclude (the next-best
    distinct plans), which drop nothing: a candidate beaten only by those may form the next-best
    plan (an excluded plan with one config swapped for a worse one is a distinct plan). One beaten
    by another is dropped: that other is in no excluded plan, so the plan it makes in the dropped
    one's place is not excluded either."""
    groups: dict[tuple[str, str, str], list[Candidate]] = {}
    for c in candidates:
        groups.setdefault((c.option, c.traffic_class, "" if c.gpu in free_types else c.gpu), []).append(c)
    keep = set()
    for group in groups.values():
        ordered = sorted(group, key=lambda c: (-c.capacity_rps, c.cost_per_replica_hour, c.gpus_per_replica, c.config))
        beaters: list[Candidate] = []  # the kept ones that may drop a later one
        for c in ordered:  # every earlier one has at least its capacity
            if not any(k.cost_per_replica_hour <= c.cost_per_replica_hour and k.gpus_per_replica <= c.gpus_per_replica
                       for k in beaters):
                keep.add(id(c))
                if (c.option, c.traffic_class, c.config) not in protected:
                    beaters.append(c)
    return [c for c in candidates if id(c) in keep]


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
    # GPU types on which a class may keep a pool of its own beside its other pool, as on committed
    # types with reserved_pools (a fleet service re-solved alone: the fleet's committed types)
    pool_types: frozenset[str] = frozenset()


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


@dataclass(frozen=True)
class Paid:
    """What pools cost an hour with commitments (paid_per_hour)."""

    cost_per_hour: float
    reserved_cost_per_hour: float  # every committed GPU, used or not
    used: dict[str, int]  # GPUs the pools run per type (each committed type listed, 0 where unused)
    on_demand: dict[str, int]  # of those, beyond the type's commitment


def paid_per_hour(pools: Sequence[Pool], reserved: Mapping[str, tuple[int, float]],
                  on_demand_usd_per_gpu_hour: Mapping[str, float]) -> Paid:
    """The hourly cost of pools where some GPU types are committed ({type: (GPUs, price per
    GPU-hour)}): every committed GPU at its committed price, used or not; a committed type's GPUs
    beyond its commitment at the type's on-demand price; the pools of other types at their own
    (on-demand) cost. The ILP's objective (this module's docstring) read back at a solution, and
    the price of a fleet a scenario states."""
    used: dict[str, int] = {}
    for p in pools:
        used[p.gpu] = used.get(p.gpu, 0) + p.gpus
    for g in reserved:
        used.setdefault(g, 0)
    on_demand = {g: max(0, used[g] - reserved.get(g, (0, 0.0))[0]) for g in sorted(used)}
    reserved_cost = sum(n * price for n, price in reserved.values())
    on_demand_cost = sum(p.cost_per_hour for p in pools if p.gpu not in reserved) + sum(
        on_demand_usd_per_gpu_hour.get(g, 0.0) * on_demand[g] for g in reserved)
    return Paid(reserved_cost + on_demand_cost, reserved_cost, used, on_demand)


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
    tie_break: bool | Callable[[JointSolution], bool] = True,
    pool_types: frozenset[str] = frozenset(),
    max_gpu_types: int | None = None,
    types_in_use: frozenset[str] = frozenset(),
) -> FleetSolution:
    """The cheapest plan of one service (solve_services with one service and its caps as the
    shared ones); the formulation is the module's docstring. max_gpu_types, types_in_use: a fleet's
    rule on GPU types, with the types its other services run (a fleet service re-solved alone)."""
    joint = solve_services(
        [ServiceModel("", options, candidates, {}, min_replicas, homogeneous, forbid, pool_types)], inventory=inventory,
        backend=backend, time_limit_s=time_limit_s, reserved=reserved, reserved_pools=reserved_pools,
        use_reserved=use_reserved, keep_lp=keep_lp, tie_break=tie_break, max_gpu_types=max_gpu_types,
        types_in_use=types_in_use,
    )
    sol = joint.services[0]
    if not sol.pools:
        return sol
    # The one service carries the commitments, used or not.
    return replace(sol, cost_per_hour=joint.cost_per_hour, reserved_cost_per_hour=joint.reserved_cost_per_hour,
                   on_demand_gpus=joint.on_demand_gpus)


# What a reader of --write-lp's file needs to rebuild the plan from it: the steps outside the model it
# holds (a plan's kv:bf16 pool had no variable there, its kv:fp8 twin of equal cost had).
LP_HEADER = """\\ planner's fleet ILP, its cost stage (the formulation: planner/ilp.py's docstring), at the capacities
\\ known once the plan was made: certification's simulated ones, where it measured a config (a plan it kept
\\ from before its last measurements, a challenger's that missed, may then cost other than this optimum, or
\\ this model have no solution).
\\ Candidates: each class's configs with positive capacity, less dominated ones (of dtype variants on the
\\ same GPUs, only the one of highest capacity). Not in this file: the second solve, among plans of the
\\ optimum's cost, for fewer GPUs, then fewer pools, then no split or the lowest threshold; the rule that
\\ breaks exact ties after it (canonical_ties); and the dtype variant each pool then runs, the most precise
\\ that covers it with the same replicas at the same cost (plan_search.prefer_precise): the report may name
\\ another config of this file's optimum cost than its solution does (kv:bf16 for its kv:fp8, say).
"""


def lp_header(reserved: Mapping[str, tuple[int, float]] | None) -> str:
    """LP_HEADER, and where GPUs are committed, the constant the objective leaves out: a re-solve of
    the file read $86.71 for the shipped fleet's $314.18 (an outside probe), its commitments' $227.47."""
    committed = sum(n * price for n, price in (reserved or {}).values())
    if not committed:
        return LP_HEADER
    return LP_HEADER + (f"\\ The objective leaves out the committed GPUs' cost, {usd_text(committed)} per hour, paid "
                        "whether used or not (a constant):\n\\ add it to this file's optimum for the plan's cost.\n")


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
    tie_break: bool | Callable[[JointSolution], bool] = True,
    types_in_use: frozenset[str] = frozenset(),
    keep_twin: bool = False,
) -> JointSolution:
    """Minimise the cost per hour of a fleet of services that share GPU inventory and commitments;
    the formulation (sets, data, variables, objective, constraints) is the module's docstring.
    types_in_use: GPU types that count against max_gpu_types whatever the plan runs.
    tie_break: break ties (the objective's second solve, then canonical_ties), or not; or a test of
    the cost-optimal solution that says whether to. The test's answer equals a second call with
    tie_break=True without building and solving the cost ILP again: that solve is deterministic, so
    it would find the same cost optimum on the same model. keep_twin: the cost optimum stands where it
    ties with the tie-break's optimum on every term (ilp_solver.break_ties), for a caller that has
    acted on it already."""
    t0 = time.perf_counter()
    # (a service's own rules are checked where its part is built)
    cheapest_only = nothing_shared(inventory, reserved, max_gpu_types, types_in_use)
    model = (services, inventory, reserved, reserved_pools, use_reserved, max_gpu_types, types_in_use)
    prob, parts, joint = _build(*model, cheapest_only=cheapest_only)
    if joint is None:  # no config for some class of every option, or too many GPUs
        return _unservable(parts, backend, t0)
    # The text is the model with every candidate, for a reader; the one solved is the same with only
    # those an optimum can use, whether the text is kept or not (or the plan could change with it).
    lp = lp_header(reserved) + lp_text(_build(*model)[0] if cheapest_only else prob) if keep_lp else ""
    build_s = time.perf_counter() - t0
    solver = solver_for(backend, time_limit_s)
    t1 = time.perf_counter()
    solved_status = solve_within(prob, solver, time_limit_s)
    if solved_status != pulp.LpStatusOptimal or prob.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        status, solve_s = pulp.LpStatus[solved_status], time.perf_counter() - t1
        empty = FleetSolution(status, "", None, (), math.inf, 0, solve_s, build_s, solver.name, lp)
        return JointSolution(status, tuple(empty for _ in services), math.inf, 0, {}, {}, 0.0, solve_s, build_s,
                             solver.name, lp)
    status = solution_status(prob)
    if callable(tie_break):
        tie_break = tie_break(joint.solution(status, time.perf_counter() - t1, build_s, solver.name, lp))
    if not tie_break:
        return joint.solution(status, time.perf_counter() - t1, build_s, solver.name, lp)
    break_ties(prob, joint.cost, joint.ties(), solver, keep_twin=keep_twin)
    solved = joint.solution(status, time.perf_counter() - t1, build_s, solver.name, lp)
    return replace(solved, services=tuple(canonical_ties(sol, sv.candidates, sv.min_replicas, sv.forbid)
                                          for sol, sv in zip(solved.services, services, strict=True)))


def canonical_ties(sol: FleetSolution, candidates: Sequence[Candidate], min_replicas: int,
                   forbid: Sequence[frozenset[tuple[str, str, str]]] = ()) -> FleetSolution:
    """The plan among those tied on every term of the ILP's objective (cost, GPUs, pools, split) that
    does not depend on the candidates the solver was given: each class served by one pool takes, of
    the configs on the same GPU type that serve it alone with the same GPUs at the same cost, the
    one with the more precise weights, then KV cache (a tie is no reason to quantise), then the one
    that carries the most requests/s (the most headroom over the class's peak), then the first label.

    Which tied optimum a solver returns follows its search path, which another candidate set
    changes: the lazy search (lazy_solve), which bounds the pairs it has not searched, would
    otherwise show in an exploration's row another fleet than the plan's at the same cost. A pool
    moved to a pair the lazy search only bounds is searched there like any pair a plan uses, so its
    answer is the full evaluation's. The GPU type and its count stay, so caps, commitments and the
    other classes' pools are untouched; a class with several pools is left as solved, and so are
    ties across GPU types (equal prices per GPU, or committed types both inside their reservations).
    A plan of `forbid` (the next-best plans' exclusions) is never the answer: the best combination of
    the classes' tied configs that none forbids is (the solver's own is one)."""

    def rank(c_bits: tuple[float, float], carried_rps: float, label: str) -> tuple:
        return (-c_bits[0], -c_bits[1], -carried_rps, label)

    pools_of: dict[str, int] = {}
    for p in sol.pools:
        pools_of[p.traffic_class] = pools_of.get(p.traffic_class, 0) + 1
    bits = {(c.option, c.traffic_class, c.config): c.precision_bits for c in candidates}
    choices = []  # per pool: the tied configs, best first
    for p in sol.pools:
        tied = {p.config: (rank(bits.get((sol.option, p.traffic_class, p.config), (0.0, 0.0)), p.replicas * p.capacity_rps,
                                p.config), p)}
        if pools_of[p.traffic_class] == 1:
            for c in candidates:
                if (c.option, c.traffic_class, c.gpu) != (sol.option, p.traffic_class, p.gpu) or c.capacity_rps <= 0:
                    continue
                replicas = replicas_to_cover(p.rate_rps, c.capacity_rps, min_replicas)
                cost = replicas * c.cost_per_replica_hour
                if (c.config not in tied and replicas * c.gpus_per_replica == p.gpus
                        and math.isclose(cost, p.cost_per_hour, rel_tol=1e-12)):
                    tied[c.config] = (rank(c.precision_bits, replicas * c.capacity_rps, c.config),
                                      replace(p, config=c.config, replicas=replicas, capacity_rps=c.capacity_rps,
                                              cost_per_hour=cost))
        choices.append([q for _, q in sorted(tied.values(), key=lambda t: t[0])])
    # The best combination no exclusion forbids (exclude_{j}: every pool of plan j); the solver's is one.
    for pools in itertools.product(*choices):
        chosen = {(sol.option, p.traffic_class, p.config) for p in pools}
        if not any(plan <= chosen for plan in forbid):
            break
    return sol if all(a is b for a, b in zip(pools, sol.pools, strict=True)) else replace(sol, pools=tuple(pools))


def _build(services, inventory, reserved, reserved_pools, use_reserved, max_gpu_types, types_in_use=frozenset(), *,
           cheapest_only: bool = False):
    """The problem, each service's part of it, and what they share (None when some service cannot
    be served: the parts then say why). cheapest_only: no rule is shared between the services (no
    caps, commitments or rule on GPU types), so a service with no rule of its own between its
    classes keeps only their cheapest candidates (_ServiceVars)."""
    prob = pulp.LpProblem("fleet", pulp.LpMinimize)
    reserved = {g: r for g, r in (reserved or {}).items() if r[0] > 0}
    parts = [_ServiceVars(prob, sv, reserved, reserved_pools, use_reserved, cheapest_only=cheapest_only)
             for sv in services]
    if any(not part.servable for part in parts):
        return prob, parts, None
    joint = _JointProblem(prob, parts, reserved)
    joint.add_constraints(dict(inventory or {}), use_reserved, max_gpu_types, types_in_use)
    return prob, parts, joint


def cost_bound_using_more(
    services: Sequence[ServiceModel],
    gpu: str,
    at_least: int,
    *,
    inventory: Mapping[str, int] | None = None,
    reserved: Mapping[str, tuple[int, float]] | None = None,
    max_gpu_types: int | None = None,
    backend: str = DEFAULT_BACKEND,
    time_limit_s: float = 60.0,
) -> float:
    """A lower bound on the cost per hour of every plan (of solve_services with these rules) that
    uses at least `at_least` GPUs of type `gpu`: the optimum of its linear relaxation (replicas and
    pools fractional) with that floor added as the constraint at_least_<gpu>; inf when none can,
    -inf when the solver stops before proving the relaxation's optimum (no bound).
    What an inventory cap costs needs no second ILP when this bound, for one GPU over the cap, is
    no lower than the plan's cost: no plan the cap forbids is cheaper."""
    prob, _, joint = _build(services, inventory, reserved, True, False, max_gpu_types)
    if joint is None:
        return math.inf
    on_type = joint.on_type(gpu)
    if not on_type:
        return math.inf
    prob += joint.gpus_of(on_type) >= at_least, lp_name("at_least", gpu)
    status = solve_within(prob, solver_for(backend, time_limit_s, relaxation=True), time_limit_s)
    if status == pulp.LpStatusInfeasible:
        return math.inf
    if status != pulp.LpStatusOptimal or prob.sol_status != pulp.LpSolutionOptimal:
        return -math.inf  # stopped early (a time limit): no bound, the ILPs decide
    return float(pulp.value(joint.cost))


def _unservable(parts, backend: str, t0: float) -> JointSolution:
    """No plan without asking the solver: some service has no config for a class of every option,
    or needs more GPUs than any fleet has."""
    status = BEYOND_ANY_FLEET if any(part.oversized for part in parts) else "Infeasible"
    empty = tuple(FleetSolution(BEYOND_ANY_FLEET if part.oversized else "Infeasible", "", None, (), math.inf, 0,
                                0.0, time.perf_counter() - t0, backend, problem=part.oversized) for part in parts)
    return JointSolution(status, empty, math.inf, 0, {}, {}, 0.0, 0.0, time.perf_counter() - t0, backend)


class _JointProblem:
    """What the services of a joint problem share: the cost, on-demand GPUs of committed types,
    the shared inventory caps, the most GPU types; and the joint solution read back."""

    def __init__(self, prob, parts, reserved):
        self.prob, self.parts, self.reserved = prob, parts, reserved
        self.members = [(part, i) for part in parts for i in part.keep]
        self.od_price = _on_demand_prices([part.cands[i] for part, i in self.members], reserved)
        self.od = {g: prob.add_variable(lp_name("on_demand", g), lowBound=0) for g in sorted(self.od_price)}
        self.reserved_cost = sum(n * price for n, price in reserved.values())
        self.cost = (
            pulp.lpSum(part.cands[i].cost_per_replica_hour * part.x[i] for part, i in self.members
                       if part.cands[i].gpu not in reserved)
            + pulp.lpSum(self.od_price[g] * self.od[g] for g in self.od)
            + self.reserved_cost
        )
        prob += self.cost, "cost_per_hour"

    def on_type(self, g: str):
        return [(part, i) for part, i in self.members if part.cands[i].gpu == g]

    def gpus_of(self, pairs):
        return _affine(self.gpu_terms(pairs))

    @staticmethod
    def gpu_terms(pairs) -> list[tuple]:
        """The GPUs the (service, candidate) pairs' replicas hold, as (variable, GPUs a replica) terms."""
        return [(part.x[i], part.cands[i].gpus_per_replica) for part, i in pairs]

    def add_constraints(self, inventory: Mapping[str, int], use_reserved: bool, max_gpu_types: int | None,
                        types_in_use: frozenset[str] = frozenset()) -> None:
        prob, reserved, od = self.prob, self.reserved, self.od
        for part in self.parts:
            part.add_constraints()
        # A fleet of one service names its rows without a prefix (its ILP is then the scenario's own),
        # so its own cap on a type the fleet caps too would take the shared row's name.
        own = {gpu for part in self.parts if not part.prefix for gpu in part.sv.inventory}
        for gpu, cap in sorted(inventory.items()):
            pairs = self.on_type(gpu)
            if pairs:
                _row(prob, self.gpu_terms(pairs), LE, cap, lp_name(*(["fleet"] if gpu in own else []), "inventory", gpu))
        for g in od:
            on_g = self.gpu_terms(self.on_type(g))
            _row(prob, [(od[g], 1), *((v, -n) for v, n in on_g)], GE, -reserved[g][0], lp_name("on_demand", g))
            if use_reserved:
                _row(prob, on_g, GE, reserved[g][0], lp_name("use_reserved", g))
        if max_gpu_types is not None:
            types = sorted({part.cands[i].gpu for part, i in self.members} - types_in_use)
            used = {g: prob.add_variable(lp_name("uses", g), cat="Binary") for g in types}
            for part, i in self.members:
                if part.cands[i].gpu in used:
                    _row(prob, [(part.z[i], 1), (used[part.cands[i].gpu], -1)], LE, 0,
                         lp_name("uses_type", part.prefix, *part.label[i]))
            if used:
                _row(prob, [(t, 1) for t in used.values()], LE, max_gpu_types - len(types_in_use), "gpu_types")

    def ties(self):
        """The second objective: fewer GPUs, then fewer pools, then no split or the lowest threshold,
        in integers (the module's docstring)."""
        all_z = [part.z[i] for part, i in self.members]
        # The ranks summed over the services stay below ranks + 1, so the last term never outweighs one pool.
        ranks = sum(len(part.servable) - 1 for part in self.parts)
        ranked = [(rank, part.y[o.key]) for part in self.parts
                  for rank, o in enumerate(sorted(part.servable, key=lambda o: -1 if o.threshold is None else o.threshold))]
        per_pool = ranks + 1
        per_gpu = (len(all_z) + 1) * per_pool
        return _affine([*((v, n * per_gpu) for v, n in self.gpu_terms(self.members)),
                        *((z, per_pool) for z in all_z), *((y, rank) for rank, y in ranked if rank)])

    def solution(self, status: str, solve_s: float, build_s: float, solver: str, lp: str) -> JointSolution:
        """Each service's plan, priced at its candidates' prices; the commitments are the fleet's."""
        pools = [part.pools() for part in self.parts]
        paid = paid_per_hour([p for _, ps in pools for p in ps], self.reserved, self.od_price)
        solutions = [
            FleetSolution(status=status, option=option.key, threshold=option.threshold, pools=tuple(ps),
                          cost_per_hour=sum(p.cost_per_hour for p in ps), gpus=sum(p.gpus for p in ps), solve_s=solve_s,
                          build_s=build_s, solver=solver, lp_text=lp)
            for option, ps in pools
        ]
        return JointSolution(status, tuple(solutions), paid.cost_per_hour, sum(paid.used.values()),
                             {g: n for g, n in sorted(paid.used.items()) if n}, paid.on_demand, paid.reserved_cost_per_hour,
                             solve_s, build_s, solver, lp)


class _ServiceVars:
    """One service's variables and constraints in a joint problem (solve_services)."""

    def __init__(self, prob, sv: ServiceModel, reserved, reserved_pools: bool, use_reserved: bool, *,
                 cheapest_only: bool = False):
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
        if cheapest_only and not (sv.inventory or sv.forbid or sv.pool_types) and sv.homogeneous:
            self.by_class = {key: cheapest_of_class(members, self.cands, self.rates[key], sv.min_replicas)
                             for key, members in self.by_class.items()}

        def name(*parts):
            return lp_name(*([self.prefix] if self.prefix else []), *parts)

        self.name = name
        self.y = {o.key: prob.add_variable(name("use_split", o.key), cat="Binary") for o in self.servable}
        kept = {i for members in self.by_class.values() for i in members}
        self.keep = [i for i, c in enumerate(self.cands) if c.option in self.y and i in kept]
        self.label = {i: (self.cands[i].option, self.cands[i].traffic_class, self.cands[i].config) for i in self.keep}
        self.z = {i: prob.add_variable(name("pool", *self.label[i]), cat="Binary") for i in self.keep}
        self.x = {i: prob.add_variable(name("replicas", *self.label[i]), lowBound=0, cat="Integer") for i in self.keep}

    def add_constraints(self) -> None:
        prob, sv, name, cands, reserved = self.prob, self.sv, self.name, self.cands, self.reserved
        y, z, x = self.y, self.z, self.x
        _row(prob, [(v, 1) for v in y.values()], EQ, 1, name("one_split"))
        for o in self.servable:
            for k in o.class_rates_rps:
                members = self.by_class[(o.key, k)]
                rate, chosen = self.rates[(o.key, k)], y[o.key]
                _row(prob, [*((x[i], cands[i].capacity_rps) for i in members), (chosen, -rate)], GE, 0,
                     name("cover", o.key, k))
                _row(prob, [*((z[i], 1) for i in members), (chosen, -1)], GE, 0, name("pool_exists", o.key, k))
                if sv.homogeneous:
                    own = (set(reserved) | sv.pool_types) if self.reserved_pools else set()
                    shared = [i for i in members if cands[i].gpu not in own]
                    _row(prob, [*((z[i], 1) for i in shared), (chosen, -1)], LE, 0, name("homogeneous", o.key, k))
                    for g in sorted(own & {cands[i].gpu for i in members}):
                        on_g = [i for i in members if cands[i].gpu == g]
                        _row(prob, [*((z[i], 1) for i in on_g), (chosen, -1)], LE, 0, name("homogeneous", o.key, k, g))
        for i in self.keep:
            c = cands[i]
            big_m = replicas_to_cover(self.rates[(c.option, c.traffic_class)], c.capacity_rps, sv.min_replicas)
            if self.use_reserved and c.gpu in reserved:
                big_m = max(big_m, math.ceil(reserved[c.gpu][0] / c.gpus_per_replica))
            label = self.label[i]
            _row(prob, [(z[i], 1), (y[c.option], -1)], LE, 0, name("only_chosen", *label))
            _row(prob, [(x[i], 1), (z[i], -big_m)], LE, 0, name("replicas_if_pool", *label))
            _row(prob, [(x[i], 1), (z[i], -sv.min_replicas)], GE, 0, name("min_replicas", *label))
        for gpu, cap in sorted(sv.inventory.items()):
            members = [i for i in self.keep if cands[i].gpu == gpu]
            if members:
                _row(prob, [(x[i], cands[i].gpus_per_replica) for i in members], LE, cap, name("inventory", gpu))
        index = {(c.option, c.traffic_class, c.config): i for i, c in enumerate(cands)}
        for j, plan in enumerate(sv.forbid):
            # sorted: a frozenset's order follows the process's string-hash seed, and so would the row's
            members = [index[key] for key in sorted(plan) if key in index and index[key] in z]
            if len(members) == len(plan):
                _row(prob, [(z[i], 1) for i in members], LE, len(members) - 1, name("exclude", j))

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


def nothing_shared(inventory, reserved, max_gpu_types: int | None, types_in_use=frozenset()) -> bool:
    """No rule ties the services, or one service's classes, together but the choice of a split: no
    caps, no committed GPUs, no rule on GPU types. With one pool a class and no plan excluded (a
    service's own rules, _ServiceVars), the ILP then keeps each class's cheapest candidates alone
    (cheapest_of_class)."""
    return (not inventory and not any(n > 0 for n, _ in (reserved or {}).values()) and max_gpu_types is None
            and not types_in_use)


def replicas_to_cover(rate_rps: float, capacity_rps: float, min_replicas: int) -> int:
    """The replicas of `capacity_rps` each that cover `rate_rps` in a pool of their own, at least
    min_replicas (a capacity that covers the rate to a part in 10^12 counts as covering it)."""
    return max(min_replicas, math.ceil(rate_rps / capacity_rps - 1e-12))


def cheapest_of_class(members: Sequence[int], cands: Sequence[Candidate], rate_rps: float, min_replicas: int) -> list[int]:
    """The members of a class whose pool alone costs the least (within COST_TOLERANCE_USD).

    Where nothing ties the classes to each other but the choice of a split option (no caps, no
    commitments, no rule on GPU types, no plan excluded) and each class has one pool, a plan's cost
    is the sum over the chosen option's classes of one pool's, so every plan at the optimum's cost
    (within the tolerance: those the tie-break chooses among) takes each class's cheapest pool:
    the others can be left out of the model, which then has the same optimum and the same ties.
    The 128k rollout's full candidate set: a re-solve's 144 candidates become 7 to 14, and its 28
    ILPs took 0.13 s where they took 0.76 (the two that exclude plans keep all theirs)."""
    cost = {i: cands[i].cost_per_replica_hour * replicas_to_cover(rate_rps, cands[i].capacity_rps, min_replicas)
            for i in members}
    least = min(cost.values(), default=math.inf)
    return [i for i in members if cost[i] <= least + COST_TOLERANCE_USD]


LE, GE, EQ = pulp.LpConstraintLE, pulp.LpConstraintGE, pulp.LpConstraintEQ


def _row(prob, terms: list[tuple], sense: int, rhs: float, name: str) -> None:
    """The constraint sum(coefficient x variable over terms) <sense> rhs, named, added to prob: the
    same row PuLP's operators build (terms in that order, no variable twice), built in one step. The
    operators copy an expression for every term; the re-solves of a plan build thousands of rows
    (the 128k rollout: 6,300 in 50 ILPs), and building them was half the time of a small ILP."""
    prob.addConstraint(pulp.LpConstraint(_affine(terms), sense, name, rhs), name)


def _affine(terms: list[tuple]) -> pulp.LpAffineExpression:
    """sum(coefficient x variable over terms), refusing a variable named twice: PuLP keeps only the
    last coefficient of a repeated variable, where the sum would add them, and says nothing."""
    expression = pulp.LpAffineExpression(terms)
    if len(expression) != len(terms):
        seen = Counter(variable.name for variable, _ in terms)
        raise ValueError(f"ILP row names {', '.join(n for n, k in seen.items() if k > 1)} more than once")
    return expression


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
                f"({fewest[1]}), {OVER_FLEET_BOUND}; check {DEMAND_FIELDS}"
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
