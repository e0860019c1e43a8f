"""From a scenario to a plan: estimate every candidate's capacity, solve, and explore around the optimum.

Three stages kept apart (SkyPilot's optimizer does the same): capacities into a
plain table (planner.capacity), the ILP (planner.optimize, the only solver code),
and the plan as data for the report (planner.report) and the JSON output.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from planner.capacity import SLO, Capacity, ReplicaModel, replica_capacity
from planner.catalog import GPU, Catalog, Model
from planner.deployment import Deployment, make_deployment, supported_problem
from planner.errors import InfeasibleError, InputError
from planner.histogram import TOTAL_EDGES, Histogram
from planner.optimize import Candidate, FleetSolution, SplitOption, solve_fleet
from planner.paged import token_profile
from planner.scenario import Scenario
from planner.units import HOURS_PER_MONTH, quantile_label

SENSITIVITY = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)


@dataclass(frozen=True)
class TrafficClass:
    """Requests of one pool under one split option."""

    option: str
    name: str  # "all", "short", "long"
    label: str  # for people: "≤ 8,192 tokens"
    hist: Histogram
    max_model_len: int
    share: float  # of served requests
    rate_rps: float  # to cover: peak x headroom x share
    peak_rps: float  # at peak, without headroom
    slo: SLO
    ttft_bands: tuple[str, ...]


@dataclass(frozen=True)
class Config:
    gpu: GPU
    tp: int
    weight_dtype: str
    kv_dtype: str
    price_usd_per_hour: float

    @property
    def key(self) -> tuple:
        return (self.gpu.id, self.tp, self.weight_dtype, self.kv_dtype)

    def label(self, limit: int) -> str:
        return f"{self.gpu.id} tp{self.tp} w:{self.weight_dtype} kv:{self.kv_dtype} ctx:{limit}"


@dataclass(frozen=True)
class Evaluation:
    """One config for one class: its capacity, or why it cannot serve the class."""

    config: Config
    traffic_class: TrafficClass
    capacity: Capacity | None
    problem: str = ""

    @property
    def capacity_rps(self) -> float:
        return self.capacity.max_rps if self.capacity else 0.0


@dataclass(frozen=True)
class PoolDetail:
    traffic_class: TrafficClass
    config: Config
    deployment: Deployment
    replicas: int
    gpus: int
    cost_per_hour: float
    capacity: Capacity
    at_peak: object  # OperatingPoint at the peak rate per replica
    rate_per_replica_rps: float  # the peak (before headroom) each replica of the pool carries


@dataclass(frozen=True)
class Outcome:
    """A solved variant (lever, split option, sensitivity point, alternative)."""

    name: str
    feasible: bool
    cost_per_hour: float
    gpus: int
    summary: str
    why_not: str = ""
    solution: FleetSolution | None = None


@dataclass(frozen=True)
class Plan:
    scenario: Scenario
    model: Model
    catalog: Catalog
    hist: Histogram
    served: Histogram
    rejected_requests: int
    context_limit: int
    measured_peak_rps: float
    peak_rps: float  # x growth
    classes: dict[str, list[TrafficClass]]
    evaluations: list[Evaluation]
    solution: FleetSolution
    pools: list[PoolDetail]
    cost_per_hour: float
    tokens_per_hour: float
    input_tokens_per_hour: float
    output_tokens_per_hour: float
    cost_per_million: dict[str, float]
    split_analysis: list[Outcome] = field(default_factory=list)
    levers: list[Outcome] = field(default_factory=list)
    alternatives: list[Outcome] = field(default_factory=list)
    sensitivity: list[Outcome] = field(default_factory=list)
    traffic_notes: tuple[str, ...] = ()
    measured_mean_rps: float | None = None  # mean arrival rate of the log, before growth

    @property
    def mean_rps(self) -> float | None:
        return None if self.measured_mean_rps is None else self.measured_mean_rps * self.scenario.traffic.growth

    @property
    def capacity_rps(self) -> float:
        """Requests/s the fleet serves at its ceilings, all pools together."""
        return sum(pd.replicas * pd.capacity.max_rps for pd in self.pools)

    @property
    def cost_per_month(self) -> float:
        return self.cost_per_hour * HOURS_PER_MONTH


# ------------------------------------------------------------------ traffic classes


def edge_at_most(limit: int) -> int:
    """The largest total-length bin edge at or below `limit`: the exact 'fits the limit' cut."""
    edges = [int(e) for e in TOTAL_EDGES if e <= limit]
    if not edges:
        raise InputError(f"context limit {limit} is below the smallest histogram edge {int(TOTAL_EDGES[0])}")
    return edges[-1]


def _class_slo(scn: Scenario, hist: Histogram) -> tuple[SLO, tuple[str, ...]]:
    """Targets of a pool: the strictest ITL of the bands it holds, and a TTFT check per band."""
    spec, q = scn.slo, scn.slo.ttft_prompt_quantile
    long = spec.long_context
    bands = [("", hist, spec.itl_ms, spec.ttft_s)]
    if long is not None:
        edge = long.above_tokens
        bands = [
            (f"≤ {edge:,}", hist.select_total(at_most=edge), spec.itl_ms, spec.ttft_s),
            (f"> {edge:,}", hist.select_total(above=edge), long.itl_ms or spec.itl_ms, long.ttft_s or spec.ttft_s),
        ]
    itls = [itl for _, h, itl, _ in bands if not h.is_empty and itl is not None]
    checks, names = [], []
    for name, h, _, ttft in bands:
        if h.is_empty or ttft is None:
            continue
        pq = token_profile(h, prompt_quantile=q).prompt_quantile_tokens
        checks.append((pq, ttft))
        names.append(f"{name} {quantile_label(q)} prompt {pq:,.0f} tokens: TTFT ≤ {ttft:g} s".strip())
    return SLO(itl_ms=min(itls) if itls else None, ttft_checks=tuple(checks)), tuple(names)


def traffic_classes(scn: Scenario, served: Histogram, limit: int, peak_rps: float) -> dict[str, list[TrafficClass]]:
    """Classes per split option: 'none' -> [all]; 'T' -> [short (≤ T, limit T), long (> T, limit L)]."""
    total = served.requests
    rate = peak_rps * scn.traffic.headroom

    def make(option: str, name: str, label: str, hist: Histogram, class_limit: int) -> TrafficClass:
        share = hist.requests / total
        slo, bands = _class_slo(scn, hist)
        return TrafficClass(option, name, label, hist, class_limit, share, rate * share, peak_rps * share, slo, bands)

    out = {"none": [make("none", "all", f"all (≤ {limit:,} tokens)", served, limit)]}
    for t in scn.split_thresholds:
        if t >= limit:
            continue
        short, long = served.select_total(at_most=t), served.select_total(above=t)
        if short.is_empty or long.is_empty:
            continue
        out[str(t)] = [
            make(str(t), "short", f"short (≤ {t:,} tokens)", short, t),
            make(str(t), "long", f"long ({t:,} < tokens ≤ {limit:,})", long, limit),
        ]
    return out


# ------------------------------------------------------------------ candidates


def candidate_configs(scn: Scenario, catalog: Catalog, model: Model, weight_dtypes, kv_dtypes) -> list[Config]:
    """Every supported config of the scenario's GPU candidates and tp degrees with these dtypes."""
    out = []
    for cand in scn.gpu_candidates:
        gpu = catalog.gpu(cand.id)
        price = cand.price_per_hour(gpu.price_usd_per_hour)
        for tp in scn.tp:
            for w in weight_dtypes:
                for kv in kv_dtypes:
                    if supported_problem(gpu, tp, catalog.dtype(w), catalog.dtype(kv), model) is None:
                        out.append(Config(gpu, tp, w, kv, price))
    return out


class Evaluator:
    """Capacities of (config, class) pairs, computed once and reused by every variant."""

    def __init__(self, scn: Scenario, catalog: Catalog, model: Model):
        self.scn, self.catalog, self.model = scn, catalog, model
        self._cache: dict[tuple, Evaluation] = {}
        self._profiles: dict[tuple, object] = {}

    def deployment(self, cfg: Config, limit: int) -> Deployment:
        return make_deployment(
            self.catalog, model=self.model, gpu=cfg.gpu, tp=cfg.tp, weight_dtype=cfg.weight_dtype,
            kv_dtype=cfg.kv_dtype, max_model_len=limit, engine=self.scn.engine,
            memory_fraction=self.scn.gpu_memory_utilization, overhead_gib_per_gpu=self.scn.overhead_gib,
        )

    def profile(self, tc: TrafficClass, dep: Deployment):
        key = (tc.option, tc.name, id(tc.hist), dep.block_size, dep.engine.max_num_batched_tokens)
        if key not in self._profiles:
            self._profiles[key] = token_profile(
                tc.hist, block_size=dep.block_size, chunk_tokens=dep.engine.max_num_batched_tokens,
                sliding_window=self.model.sliding_window, shared_prefix_tokens=self.scn.traffic.shared_prefix_tokens,
                prompt_quantile=self.scn.slo.ttft_prompt_quantile,
            )
        return self._profiles[key]

    def evaluate(self, cfg: Config, tc: TrafficClass) -> Evaluation:
        key = (*cfg.key, tc.option, tc.name, tc.max_model_len, id(tc.hist))
        if key in self._cache:
            return self._cache[key]
        try:
            dep = self.deployment(cfg, tc.max_model_len)
            cap = replica_capacity(
                dep, self.profile(tc, dep), tc.slo, sizing=self.scn.sizing.mode, quantile=self.scn.sizing.quantile
            )
            problem = "" if cap.max_rps > 0 else f"{cap.binding}: " + ("; ".join(cap.notes) or "no rate meets it")
            ev = Evaluation(cfg, tc, cap, problem)
        except InputError as exc:
            ev = Evaluation(cfg, tc, None, str(exc))
        self._cache[key] = ev
        return ev

    def evaluate_all(self, classes: dict[str, list[TrafficClass]], configs: Sequence[Config]) -> list[Evaluation]:
        """Every config for every class of every split option."""
        return [self.evaluate(cfg, tc) for tcs in classes.values() for tc in tcs for cfg in configs]


# ------------------------------------------------------------------ solving


def _solve(scn, inventory: dict[str, int], classes, evals: Sequence[Evaluation], *, options=None, rate_scale=1.0,
           forbid=(), keep_lp=False, reserved=None):
    chosen = options if options is not None else list(classes)
    split_options = [
        SplitOption(key, None if key == "none" else int(key), {tc.name: tc.rate_rps * rate_scale for tc in classes[key]})
        for key in chosen
    ]
    cands = [
        Candidate(ev.traffic_class.option, ev.traffic_class.name, ev.config.label(ev.traffic_class.max_model_len),
                  ev.config.gpu.id, ev.config.tp, ev.config.price_usd_per_hour * ev.config.tp, ev.capacity_rps)
        for ev in _undominated(evals)
        if ev.traffic_class.option in chosen
    ]
    return solve_fleet(
        split_options, cands, inventory=inventory, min_replicas=scn.min_replicas_per_pool,
        homogeneous=scn.homogeneous_pools, backend=scn.solver.backend, time_limit_s=scn.solver.time_limit_s,
        forbid=forbid, keep_lp=keep_lp, reserved=reserved,
    )


class _Memo:
    """One plan's re-solves, with identical questions answered once (the sensitivity's x1 is
    the plan itself; 'split forced off' is the split analysis's no-split row). `keep_lp` is no
    part of the question: an answer kept with its LP text is the same answer."""

    def __init__(self, scn: Scenario):
        self.scn = scn
        self.inventory = {g.id: g.max_gpus for g in scn.gpu_candidates if g.max_gpus is not None}
        self._answers: dict[tuple, FleetSolution] = {}
        self._keep: list = []  # the keyed objects stay alive, so their ids stay unique

    def __call__(self, classes, evals, **kw) -> FleetSolution:
        key = (id(classes), id(evals), tuple(kw.get("options") or ()), kw.get("rate_scale", 1.0),
               tuple(kw.get("forbid", ())), tuple(sorted((kw.get("reserved") or {}).items())))
        if key not in self._answers:
            self._keep.append((classes, evals))
            self._answers[key] = _solve(self.scn, self.inventory, classes, evals, **kw)
        return self._answers[key]


def _undominated(evals: Sequence[Evaluation]) -> list[Evaluation]:
    """Per class, per (GPU type, price, tp): only the config of highest capacity.

    Dtype variants on the same GPUs cost the same and use the same GPUs, so a lower-
    capacity one can never be needed in an optimal plan (inventory caps count GPUs,
    which are equal too). Ties keep the first label in sort order: deterministic.
    """
    best: dict[tuple, Evaluation] = {}
    for ev in sorted(evals, key=lambda e: e.config.label(e.traffic_class.max_model_len)):
        if ev.capacity_rps <= 0:
            continue
        key = (ev.traffic_class.option, ev.traffic_class.name, ev.config.gpu.id, ev.config.price_usd_per_hour, ev.config.tp)
        if key not in best or ev.capacity_rps > best[key].capacity_rps:
            best[key] = ev
    return list(best.values())


def _infeasible_message(classes, evals: Sequence[Evaluation], inventory: dict) -> str:
    for key in ["none", *[k for k in classes if k != "none"]]:
        for tc in classes.get(key, []):
            mine = [ev for ev in evals if ev.traffic_class is tc]
            if any(ev.capacity_rps > 0 for ev in mine):
                continue
            best = _best_failed(mine)
            where = "without a split" if key == "none" else f"under split {int(key):,}"
            if best is None:
                return f"class '{tc.label}' {where}: no candidate config (check gpus, tp, dtypes)"
            return (
                f"class '{tc.label}' {where} cannot be served by any of {len(mine)} configs; the best candidate, "
                f"{best.config.label(tc.max_model_len)}, is stopped by {best.problem}"
                + (" (every split option fails too)" if key == "none" else "")
            )
    rates = ", ".join(f"'{tc.label}' {tc.rate_rps:,.4g} req/s" for tc in classes.get("none", []))
    if not inventory:
        return (f"the solver found no fleet that covers the peak ({rates}), though each class has configs "
                "that serve it; check the traffic rates and solver.time_limit_s")
    caps = ", ".join(f"{g} ≤ {n:,} GPUs" for g, n in sorted(inventory.items()))
    for tc in classes.get("none", []):
        # the most this class gets from every capped GPU type at once (None: some type is uncapped)
        most: dict[str, float] = {}
        for ev in (ev for ev in evals if ev.traffic_class is tc and ev.capacity_rps > 0):
            cap = inventory.get(ev.config.gpu.id)
            if cap is None:
                break
            most[ev.config.gpu.id] = max(most.get(ev.config.gpu.id, 0.0), cap // ev.config.tp * ev.capacity_rps)
        else:
            if sum(most.values()) < tc.rate_rps:
                return (f"class '{tc.label}' needs {tc.rate_rps:,.4g} req/s but the inventory caps ({caps}) "
                        f"allow at most {sum(most.values()):,.4g} req/s")
    return f"the inventory caps ({caps}) leave no fleet that covers every class at once ({rates})"


def _no_plan_message(sol: FleetSolution, scn: Scenario, classes, evals, inventory) -> str:
    """Why the solver returned no plan, by its status (PuLP: Infeasible, Not Solved, Undefined, Unbounded)."""
    if sol.problem:  # decided before the solver ran (a fleet larger than any that exists)
        return sol.problem
    if sol.status == "Infeasible":
        return _infeasible_message(classes, evals, inventory)
    if sol.status == "Not Solved":
        return (f"no plan found within the solver's time limit of {scn.solver.time_limit_s:g} s; "
                "raise solver.time_limit_s or offer fewer candidates")
    return f"the solver ended with status '{sol.status}' and no plan"


def _best_failed(evals: Sequence[Evaluation]) -> Evaluation | None:
    """The candidate closest to serving the class: weights fit, then the fastest prefill."""
    if not evals:
        return None
    with_cap = [ev for ev in evals if ev.capacity is not None]
    if not with_cap:
        return evals[0]
    return min(with_cap, key=lambda ev: (ev.capacity.prefill_s_at_quantile, -ev.config.tp, ev.config.label(0)))


def _summary(sol: FleetSolution) -> str:
    split = "no split" if sol.threshold is None else f"split at {sol.threshold:,}"
    pools = "; ".join(f"{p.traffic_class}: {p.replicas} x {p.config}" for p in sol.pools)
    return f"{split} — {pools}"


def _outcome(name: str, sol: FleetSolution, why: str = "") -> Outcome:
    if not sol.pools:
        return Outcome(name, False, math.inf, 0, "", why or f"infeasible ({sol.status})")
    return Outcome(name, True, sol.cost_per_hour, sol.gpus, _summary(sol), solution=sol)


# ------------------------------------------------------------------ the plan


def make_plan(
    scn: Scenario, catalog: Catalog, model: Model, hist: Histogram, measured_peak_rps: float,
    *, explore: bool = True, traffic_notes: Iterable[str] = (),
    reserved: dict[str, tuple[int, float]] | None = None, measured_mean_rps: float | None = None,
    keep_lp: bool = False,
) -> Plan:
    """Evaluate, solve, and (with explore) add split analysis, levers, alternatives and sensitivity.

    keep_lp: the plan's solution keeps the ILP's text (`plan.solution.lp_text`, for `solve --write-lp`).
    """
    limit = scn.context_limit or model.max_position_embeddings
    if limit > model.max_position_embeddings:
        raise InputError(f"context_limit {limit} exceeds '{model.id}' max_position_embeddings {model.max_position_embeddings}")
    served = hist.select_total(at_most=edge_at_most(limit))
    if served.is_empty:
        raise InputError(f"no request fits the {limit:,}-token context limit")
    if scn.traffic.shared_prefix_tokens >= limit:
        raise InputError(f"traffic.shared_prefix_tokens {scn.traffic.shared_prefix_tokens} must be below the context limit {limit}")
    # Requests above the limit are rejected, so they are not load to plan for.
    peak = measured_peak_rps * scn.traffic.growth * served.requests / hist.requests
    ev = Evaluator(scn, catalog, model)
    configs = candidate_configs(scn, catalog, model, scn.weight_dtypes, scn.kv_dtypes)
    if not configs:
        raise InputError("no candidate config: every GPU x tp x dtype combination is unsupported for this model")
    classes = traffic_classes(scn, served, limit, peak)
    evals = ev.evaluate_all(classes, configs)
    solve = _Memo(scn)
    inventory = solve.inventory
    sol = solve(classes, evals, reserved=reserved, keep_lp=keep_lp)
    if not sol.pools:
        raise InfeasibleError(_no_plan_message(sol, scn, classes, evals, inventory))

    pools = _pool_details(ev, classes, evals, sol)
    p_mean, o_mean = served.mean("sum_prompt"), served.mean("sum_output")
    input_tph, output_tph = peak * 3600 * p_mean, peak * 3600 * o_mean
    cost = sol.cost_per_hour
    # Each pool's share of the fleet's cost (reserved GPUs included) splits by its prefill share of GPU time.
    pool_cost = {id(pd): cost * pd.cost_per_hour / sum(q.cost_per_hour for q in pools) for pd in pools}
    input_cost = sum(pool_cost[id(pd)] * pd.at_peak.prefill_share for pd in pools)
    plan = Plan(
        scenario=scn, model=model, catalog=catalog, hist=hist, served=served,
        rejected_requests=hist.requests - served.requests, context_limit=limit,
        measured_peak_rps=measured_peak_rps, peak_rps=peak, classes=classes, evaluations=evals, solution=sol,
        pools=pools, cost_per_hour=cost, tokens_per_hour=input_tph + output_tph,
        input_tokens_per_hour=input_tph, output_tokens_per_hour=output_tph,
        cost_per_million={  # no tokens of a kind (prompts of 0 tokens): no price per token (nan, shown as —)
            "blended": cost / (input_tph + output_tph) * 1e6 if input_tph + output_tph else math.nan,
            "input": input_cost / input_tph * 1e6 if input_tph else math.nan,
            "output": (cost - input_cost) / output_tph * 1e6 if output_tph else math.nan,
        },
        traffic_notes=tuple(traffic_notes),
        measured_mean_rps=measured_mean_rps,
    )
    if not explore:
        return plan
    split = []
    for k in classes:
        res = solve(classes, evals, options=[k])
        split.append(_outcome("no split" if k == "none" else f"split at {int(k):,}", res,
                              "" if res.pools else _infeasible_message({k: classes[k]}, evals, inventory)))
    alternatives, forbid, last = [], [], sol
    for i in range(2):
        forbid.append(frozenset((last.option, p.traffic_class, p.config) for p in last.pools))
        last = solve(classes, evals, forbid=tuple(forbid))
        if not last.pools:
            break
        alternatives.append(_outcome(f"next best #{i + 1}", last))
    sensitivity = [
        _outcome(f"peak x {m:g}", solve(classes, evals, rate_scale=m, reserved=reserved)) for m in SENSITIVITY
    ]
    levers = _levers(scn, catalog, model, served, limit, peak, ev, configs, classes, evals, sol, inventory, solve)
    return dataclasses.replace(plan, split_analysis=split, alternatives=alternatives, sensitivity=sensitivity, levers=levers)


def _pool_details(ev: Evaluator, classes, evals, sol: FleetSolution) -> list[PoolDetail]:
    by_label = {
        (e.traffic_class.option, e.traffic_class.name, e.config.label(e.traffic_class.max_model_len)): e for e in evals
    }
    out = []
    for p in sol.pools:
        e = by_label[(sol.option, p.traffic_class, p.config)]
        tc, cfg = e.traffic_class, e.config
        dep = ev.deployment(cfg, tc.max_model_len)
        rm = ReplicaModel(dep, ev.profile(tc, dep), tc.slo, e.capacity.ladder)
        share = (p.replicas * p.capacity_rps) / sum(q.replicas * q.capacity_rps for q in sol.pools if q.traffic_class == p.traffic_class)
        per_replica = tc.peak_rps * share / p.replicas
        n = rm.resident_for_rate(per_replica, e.capacity.point.resident_batch + 1e-9) or 0.0
        out.append(PoolDetail(tc, cfg, dep, p.replicas, p.gpus, p.cost_per_hour, e.capacity, rm.point(n), per_replica))
    return out


def _levers(scn, catalog, model, served, limit, peak, ev, configs, classes, evals, sol, inventory, solve) -> list[Outcome]:
    """Re-solve with each lever switched (design.md, "The optimisation"); the levers multiply."""
    out = []

    def with_dtypes(name: str, weights, kvs) -> None:
        cfgs = candidate_configs(scn, catalog, model, weights, kvs)
        if not cfgs:
            out.append(Outcome(name, False, math.inf, 0, "", "no GPU candidate supports it"))
            return
        evs = ev.evaluate_all(classes, cfgs)
        res = solve(classes, evs)
        out.append(_outcome(name, res, "" if res.pools else _infeasible_message(classes, evs, inventory)))

    for kind, allowed in (("KV cache", scn.kv_dtypes), ("weights", scn.weight_dtypes)):
        if "fp8" in allowed:
            switched, name = [d for d in allowed if d != "fp8"], f"fp8 {kind} off"
            if not switched:
                continue
        else:
            switched, name = [*allowed, "fp8"], f"fp8 {kind} on"
        w, k = (scn.weight_dtypes, switched) if kind == "KV cache" else (switched, scn.kv_dtypes)
        with_dtypes(name, w, k)
    if len(classes) > 1:
        res = solve(classes, evals, options=["none"])
        out.append(_outcome("split forced off", res,
                            "" if res.pools else _infeasible_message({"none": classes["none"]}, evals, inventory)))
    for gpu_id in sorted({p.gpu for p in sol.pools}):
        keep = [c for c in configs if c.gpu.id != gpu_id]
        evs = ev.evaluate_all(classes, keep)
        res = solve(classes, evs) if keep else None
        out.append(_outcome(f"without {gpu_id}", res, "") if res else Outcome(f"without {gpu_id}", False, math.inf, 0, "", "no other GPU candidate"))
    lower = scn.lower_context_limit or edge_at_most(max(limit // 2, int(TOTAL_EDGES[0])))
    if lower < limit:
        lowered = served.select_total(at_most=lower)  # a histogram edge: the scenario's (validated) or edge_at_most's
        if not lowered.is_empty:
            lost = served.requests - lowered.requests
            lower_classes = traffic_classes(scn, lowered, lower, peak * lowered.requests / served.requests)
            evs = ev.evaluate_all(lower_classes, configs)
            res = solve(lower_classes, evs)
            name = f"context limit {lower:,} (rejects {lost / served.requests:.1%} of requests)"
            out.append(_outcome(name, res, "" if res.pools else _infeasible_message(lower_classes, evs, inventory)))
    return out
