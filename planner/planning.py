"""From a scenario to a plan: estimate every candidate's capacity, solve, and explore around the optimum.

Three stages kept apart (SkyPilot's optimizer does the same): capacities into a
plain table (planner.capacity), the ILP (planner.optimize, the only solver code),
and the plan as data for the report (planner.report) and the JSON output.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from planner.capacity import Capacity, ReplicaModel, capacity_below, replica_capacity
from planner.catalog import GPU, Catalog, Model
from planner.certify import PoolCheck, PoolSetting, check_pool, requests_for, simulated_capacity
from planner.deployment import Deployment, make_deployment, supported_problem
from planner.errors import InfeasibleError, InputError
from planner.histogram import TOTAL_EDGES, Histogram
from planner.memory import kv_token_cap
from planner.optimize import (
    Candidate,
    FleetSolution,
    Pool,
    ServiceModel,
    SplitOption,
    solve_fleet,
    undominated_candidates,
)
from planner.paged import token_profile
from planner.requests import Requests
from planner.scenario import Scenario
from planner.targets import SLO
from planner.units import HOURS_PER_MONTH

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
    simulated_rps: float | None = None  # the simulated capacity, once certification measured it
    dominated_by: str = ""  # a dtype variant on the same GPUs with certainly more capacity (not searched)
    calibration: float = 1.0  # the simulated / model capacity ratio measured on this class's other configs
    optimistic_rps: float | None = None  # a pair not searched: a proven upper bound standing in (_lazy_solve)

    @property
    def capacity_rps(self) -> float:
        """Requests/s one replica is planned for: the simulated capacity where certification
        measured one (it replaces the model's); else the model's, scaled by what simulation
        found for this class on another config when the model was optimistic there."""
        if self.optimistic_rps is not None:
            return self.optimistic_rps
        if self.simulated_rps is not None:
            return self.simulated_rps
        return self.capacity.max_rps * self.calibration if self.capacity else 0.0

    @property
    def key(self) -> tuple:
        tc = self.traffic_class
        return (tc.option, tc.name, self.config.label(tc.max_model_len))


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
    model: ReplicaModel
    resident: float | None  # the model's mean resident batch at that rate (None: beyond its roofline)
    planned_rps: float  # per replica in the ILP: the simulated capacity if certification measured one
    check: PoolCheck | None = None


@dataclass(frozen=True)
class Certification:
    """How the plan was certified by simulation (planner.certify)."""

    certified: bool
    rounds: int  # re-plans after pools missed in simulation
    changes: tuple[str, ...]  # what each round changed, for the report
    requests: int  # most sampled requests a run
    band_requests: int  # measured requests sought per band
    seed: int


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
    per_gpu: list[Outcome] = field(default_factory=list)  # the best certified plan on each GPU type alone
    ttft_sweep: list[tuple[float, Outcome]] = field(default_factory=list)  # (TTFT target multiplier, plan)
    levers: list[Outcome] = field(default_factory=list)
    alternatives: list[Outcome] = field(default_factory=list)
    sensitivity: list[Outcome] = field(default_factory=list)
    traffic_notes: tuple[str, ...] = ()
    measured_mean_rps: float | None = None  # mean arrival rate of the log, before growth
    certification: Certification | None = None
    given_fleet: bool = False  # the scenario stated its fleet; the plan checks it instead of solving
    optimised: Outcome | None = None  # beside a given fleet: the cheapest plan the model finds

    @property
    def mean_rps(self) -> float | None:
        return None if self.measured_mean_rps is None else self.measured_mean_rps * self.scenario.traffic.growth

    @property
    def capacity_rps(self) -> float:
        """Requests/s the fleet serves at its ceilings, all pools together."""
        return sum(pd.replicas * pd.planned_rps for pd in self.pools)

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


def traffic_classes(scn: Scenario, served: Histogram, limit: int, peak_rps: float) -> dict[str, list[TrafficClass]]:
    """Classes per split option: 'none' -> [all]; 'T' -> [short (≤ T, limit T), long (> T, limit L)]."""
    total = served.requests
    rate = peak_rps * scn.traffic.headroom

    slo = scn.slo.to_slo()

    def make(option: str, name: str, label: str, hist: Histogram, class_limit: int) -> TrafficClass:
        share = hist.requests / total
        return TrafficClass(option, name, label, hist, class_limit, share, rate * share, peak_rps * share, slo)

    out = {"none": [make("none", "all", f"all (≤ {limit:,} tokens)", served, limit)]}
    for t in scn.thresholds:
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
    """Every supported config of the scenario's GPU candidates and tp degrees with these dtypes
    (only GPUs with their own measured efficiency factors when the scenario says verified_only)."""
    out = []
    for cand in scn.gpu_candidates:
        gpu = catalog.gpu(cand.id)
        if scn.verified_only and not gpu.verified:
            continue
        price = cand.price_per_hour(gpu.price_usd_per_hour)
        for tp in scn.tp:
            for w in weight_dtypes:
                for kv in kv_dtypes:
                    if supported_problem(gpu, tp, catalog.dtype(w), catalog.dtype(kv), model) is None:
                        out.append(Config(gpu, tp, w, kv, price))
    return out


class Evaluator:
    """Capacities of (config, class) pairs, computed once and reused by every variant."""

    def __init__(self, scn: Scenario, catalog: Catalog, model: Model, *, like: Evaluator | None = None):
        """like: an evaluator of the same scenario but for other latency targets, whose token
        profiles and replica models (memory, step and latency tables) this one shares."""
        self.scn, self.catalog, self.model = scn, catalog, model
        self._cache: dict[tuple, Evaluation] = {}
        self._profiles: dict[tuple, object] = like._profiles if like is not None else {}
        self._models: dict[tuple, ReplicaModel] = like._models if like is not None else {}
        self._slo_models: dict[tuple, ReplicaModel] = {}
        self._like = like
        self._simulated: dict[tuple, float] = {}  # (config, class) -> simulated capacity
        self.checks: dict[tuple, PoolCheck] = {}  # (config, class, replicas, rate) -> its replay
        self._calibration: dict[tuple, float] = {}  # class -> least simulated / model ratio seen
        self.upper: dict[tuple, float] = {}  # (config, class) -> a proven upper bound on the model's capacity

    @staticmethod
    def _class_key(tc: TrafficClass) -> tuple:
        return (tc.option, tc.name, tc.max_model_len, id(tc.hist))

    def record_simulated(self, e: Evaluation, rps: float) -> None:
        """Certification measured this config's capacity for this class: use it from now on, and
        scale the model's capacity of the class's other configs by the same ratio when below 1."""
        self._simulated[(*e.config.key, *self._class_key(e.traffic_class))] = rps
        if e.capacity is not None and e.capacity.max_rps > 0:
            ck = self._class_key(e.traffic_class)
            self._calibration[ck] = min(self._calibration.get(ck, 1.0), rps / e.capacity.max_rps)

    def deployment(self, cfg: Config, limit: int) -> Deployment:
        dep = make_deployment(
            self.catalog, model=self.model, gpu=cfg.gpu, tp=cfg.tp, weight_dtype=cfg.weight_dtype,
            kv_dtype=cfg.kv_dtype, max_model_len=limit, engine=self.scn.engine,
            memory_fraction=self.scn.gpu_memory_utilization, overhead_gib_per_gpu=self.scn.overhead_gib,
        )
        cap = self.scn.long_prefill_token_threshold
        if cap is None or dep.engine.long_prefill_token_threshold is None:  # unset, or not this engine's setting
            return dep
        return dataclasses.replace(dep, engine=dep.engine.model_copy(update={"long_prefill_token_threshold": cap}))

    def profile(self, tc: TrafficClass, dep: Deployment):
        key = (tc.option, tc.name, id(tc.hist), dep.block_size, dep.engine.max_num_batched_tokens)
        if key not in self._profiles:
            self._profiles[key] = token_profile(
                tc.hist, block_size=dep.block_size, chunk_tokens=dep.engine.max_num_batched_tokens,
                sliding_window=kv_token_cap(self.model), shared_prefix_tokens=self.scn.traffic.shared_prefix_tokens,
            )
        return self._profiles[key]

    def replica_model(self, key: tuple, dep: Deployment, tc: TrafficClass) -> ReplicaModel:
        """The (config, class) pair's replica model for the class's targets; its memory, step and
        latency tables are built once for every set of targets."""
        if key not in self._slo_models:
            if key not in self._models:
                self._models[key] = ReplicaModel(dep, self.profile(tc, dep), tc.slo)
            self._slo_models[key] = self._models[key].with_slo(tc.slo)
        return self._slo_models[key]

    def evaluate(self, cfg: Config, tc: TrafficClass) -> Evaluation:
        key = (*cfg.key, *self._class_key(tc))
        ev = self._model_evaluation(key, cfg, tc)
        simulated, factor = self._simulated.get(key), self._calibration.get(self._class_key(tc), 1.0)
        if simulated is None and factor == 1.0:
            return ev
        return dataclasses.replace(ev, simulated_rps=simulated, calibration=factor)

    def _model_evaluation(self, key: tuple, cfg: Config, tc: TrafficClass, guess: float | None = None) -> Evaluation:
        if key in self._cache:
            return self._cache[key]
        if guess is None and self._like is not None:  # the bound for the unscaled targets is near
            base = self._like._cache.get(key)
            guess = base.capacity.bound_batch if base is not None and base.capacity is not None else None
        try:
            dep = self.deployment(cfg, tc.max_model_len)
            cap = replica_capacity(dep, self.profile(tc, dep), tc.slo, sizing=self.scn.sizing.mode,
                                   quantile=self.scn.sizing.quantile, model=self.replica_model(key, dep, tc),
                                   guess=guess)
            problem = "" if cap.max_rps > 0 else f"{cap.binding}: " + ("; ".join(cap.notes) or "no rate meets it")
            ev = Evaluation(cfg, tc, cap, problem)
        except InputError as exc:
            ev = Evaluation(cfg, tc, None, str(exc))
        self._cache[key] = ev
        return ev

    def evaluate_all(self, classes: dict[str, list[TrafficClass]], configs: Sequence[Config]) -> list[Evaluation]:
        """Every config for every class of every split option.

        Dtype variants on the same GPUs (same GPU type, price and tp) cost the same, and the ILP
        keeps only the one of highest capacity (_undominated). So within such a group a variant
        whose capacity is certainly below the best found so far is not searched: one latency
        point proves it (capacity.capacity_below), and its evaluation names the variant above it.
        The ILP's candidates are then exactly those of evaluating every variant."""
        pairs = [(cfg, tc) for tcs in classes.values() for tc in tcs for cfg in configs]
        groups: dict[tuple, list[tuple[Config, TrafficClass]]] = {}
        for cfg, tc in pairs:
            groups.setdefault((self._class_key(tc), cfg.gpu.id, cfg.price_usd_per_hour, cfg.tp), []).append((cfg, tc))
        found: dict[tuple, Evaluation] = {}
        for group in groups.values():
            found.update(self._evaluate_group(group))
        return [found[(*cfg.key, *self._class_key(tc))] for cfg, tc in pairs]

    def _evaluate_group(self, group: list[tuple[Config, TrafficClass]]) -> dict[tuple, Evaluation]:
        keyed = [((*cfg.key, *self._class_key(tc)), cfg, tc) for cfg, tc in group]
        out = {key: self.evaluate(cfg, tc) for key, cfg, tc in keyed if key in self._cache}
        best = max((e.capacity.max_rps for e in out.values() if e.capacity is not None), default=0.0)
        best_label = next((e.config.label(e.traffic_class.max_model_len) for e in out.values()
                           if e.capacity is not None and e.capacity.max_rps == best), "")
        todo = [(key, cfg, tc) for key, cfg, tc in keyed if key not in self._cache]
        models = {}
        for key, cfg, tc in todo:
            try:
                models[key] = self.replica_model(key, self.deployment(cfg, tc.max_model_len), tc)
            except InputError:
                models[key] = None
        sizing, quantile = self.scn.sizing.mode, self.scn.sizing.quantile

        def ceiling(key) -> float:  # (a bound on) the memory and batch ceiling's rate: most promising first
            rm = models[key]
            return math.inf if rm is None else rm.rate(rm.batch_bound(sizing, quantile))

        for key, cfg, tc in sorted(todo, key=lambda t: -ceiling(t[0])):
            guess = None
            if models[key] is not None and best > 0:
                below, guess = capacity_below(models[key], best, sizing=sizing, quantile=quantile)
                if below:
                    self.upper[key] = min(self.upper.get(key, math.inf), best)
                    out[key] = Evaluation(cfg, tc, None, f"capacity below {best_label}'s {best:,.3f} req/s on the "
                                          "same GPUs", dominated_by=best_label)
                    continue
            ev = self._model_evaluation(key, cfg, tc, guess=guess)
            out[key] = self.evaluate(cfg, tc)
            if ev.capacity is not None and ev.capacity.max_rps > best:
                best, best_label = ev.capacity.max_rps, cfg.label(tc.max_model_len)
        return out


# ------------------------------------------------------------------ solving


def service_model(scn: Scenario, classes, evals: Sequence[Evaluation], *, name: str = "", inventory=None,
                  options=None, rate_scale=1.0, forbid=(), use_reserved=False, bound_types=None) -> ServiceModel:
    """A scenario's part of an ILP: its split options, the candidates an optimal plan may use, its rules.
    inventory: its own caps per GPU type [default: none here (solve_fleet takes them as the shared caps)].
    bound_types: the GPU types a cap or commitment applies to (None: a rule on GPU types applies to
    all); a candidate beaten on another of the other types is dropped too."""
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
    if not forbid and not use_reserved:
        free = (frozenset() if bound_types is None else
                frozenset(c.gpu for c in cands) - set(bound_types) - set(inventory or ()))
        cands = undominated_candidates(cands, free_types=free)
    return ServiceModel(name, split_options, cands, dict(inventory or {}), scn.min_replicas_per_pool,
                        scn.homogeneous_pools, forbid)


def scenario_caps(scn: Scenario) -> dict[str, int]:
    """The scenario's inventory caps per GPU type."""
    return {g.id: g.max_gpus for g in scn.gpu_candidates if g.max_gpus is not None}


def _solve(scn, inventory: dict[str, int], classes, evals: Sequence[Evaluation], *, options=None, rate_scale=1.0,
           forbid=(), keep_lp=False, reserved=None, use_reserved=False, tie_break=True):
    sm = service_model(scn, classes, evals, options=options, rate_scale=rate_scale, forbid=forbid,
                       use_reserved=use_reserved, bound_types={*inventory, *(reserved or {})})
    return solve_fleet(
        sm.options, sm.candidates, inventory=inventory, min_replicas=sm.min_replicas, homogeneous=sm.homogeneous,
        backend=scn.solver.backend, time_limit_s=scn.solver.time_limit_s, forbid=sm.forbid, keep_lp=keep_lp,
        reserved=reserved, use_reserved=use_reserved,
        reserved_pools=scn.forecast.reserved_pools if scn.forecast is not None else True, tie_break=tie_break,
    )


class _Memo:
    """One plan's re-solves, with identical questions answered once (the sensitivity's x1 is
    the plan itself; 'split forced off' is the split analysis's no-split row). `keep_lp` is no
    part of the question: an answer kept with its LP text is the same answer."""

    def __init__(self, scn: Scenario):
        self.scn = scn
        self.inventory = scenario_caps(scn)
        self._answers: dict[tuple, FleetSolution] = {}
        self._keep: list = []  # the keyed objects stay alive, so their ids stay unique

    def __call__(self, classes, evals, **kw) -> FleetSolution:
        key = (id(classes), id(evals), tuple(kw.get("options") or ()), kw.get("rate_scale", 1.0),
               tuple(kw.get("forbid", ())), tuple(sorted((kw.get("reserved") or {}).items())),
               kw.get("use_reserved", False), kw.get("tie_break", True))
        if key not in self._answers:
            self._keep.append((classes, evals))
            self._answers[key] = _solve(self.scn, self.inventory, classes, evals, **kw)
        return self._answers[key]


LAZY_MIN_PAIRS = 200  # fewer pairs to evaluate than this: evaluate them all and solve once


def _lazy_solve(ev: Evaluator, solve: _Memo, classes, configs: Sequence[Config], *, prior=None):
    """solve(classes, every config evaluated for every class), searching only the pairs an optimal
    plan may need; returns the solution and the evaluations it rests on.

    A pair not searched stands in the ILP with a proven upper bound on its planned capacity (the
    rate at its memory and batch ceilings, a bound proved earlier, or `prior(config, class)`), so
    the ILP is a relaxation of the full one. When its optimum uses only searched pairs, that plan
    is feasible for the full ILP and no plan of the full ILP is better (nor, among plans of equal
    cost, has fewer GPUs or pools): it is the full ILP's optimum. Otherwise the pairs it used are
    searched and it is solved again. Between rounds each class's best searched pair sets the rate
    another pair must reach to cost no more, and one latency point (capacity.capacity_below)
    proves most pairs below it, which becomes their bound."""
    scn = ev.scn
    sizing, quantile, m = scn.sizing.mode, scn.sizing.quantile, scn.min_replicas_per_pool
    fresh = sum(1 for tcs in classes.values() for tc in tcs for cfg in configs
                if (*cfg.key, *ev._class_key(tc)) not in ev._cache)
    if fresh < LAZY_MIN_PAIRS:  # searching them all costs less than the rounds of re-solves
        evals = ev.evaluate_all(classes, configs)
        return solve(classes, evals), evals
    exact: dict[tuple, Evaluation] = {}
    bound: dict[tuple, tuple[float, Config, TrafficClass, ReplicaModel, float]] = {}
    for tcs in classes.values():
        for tc in tcs:
            cal = ev._calibration.get(ev._class_key(tc), 1.0)
            for cfg in configs:
                key = (*cfg.key, *ev._class_key(tc))
                if key in ev._cache or key in ev._simulated:
                    exact[key] = ev.evaluate(cfg, tc)
                    continue
                try:
                    rm = ev.replica_model(key, ev.deployment(cfg, tc.max_model_len), tc)
                except InputError:
                    exact[key] = ev.evaluate(cfg, tc)
                    continue
                upper = rm.rate(rm.batch_bound(sizing, quantile))
                upper = min(upper, ev.upper.get(key, math.inf), prior(cfg, tc) if prior else math.inf)
                if upper <= 0:
                    exact[key] = ev.evaluate(cfg, tc)
                else:
                    bound[key] = (upper * cal, cfg, tc, rm, cal)
    by_label = {(tc.option, tc.name, cfg.label(tc.max_model_len)): key for key, (_, cfg, tc, _, _) in bound.items()}

    def search(key) -> None:
        _, cfg, tc, _, _ = bound.pop(key)
        exact[key] = ev.evaluate(cfg, tc)

    # Seed each class with a searched pair (the one its bound prices cheapest), so that the first
    # round's bounds are already tightened against it.
    for tcs in classes.values():
        for tc in tcs:
            ck = ev._class_key(tc)
            if any(ev._class_key(e.traffic_class) == ck and e.capacity_rps > 0 for e in exact.values()):
                continue
            mine = [(cfg.price_usd_per_hour * cfg.tp * max(m, math.ceil(tc.rate_rps / u - 1e-12)), cfg.label(0), key)
                    for key, (u, cfg, other, _, _) in bound.items() if ev._class_key(other) == ck]
            if mine:
                search(min(mine)[2])
    _tighten(exact, bound, classes, m, sizing, quantile, ev, search)
    while True:
        evals = [*exact.values(), *(Evaluation(cfg, tc, None, optimistic_rps=u) for u, cfg, tc, _, _ in bound.values())]
        # Rounds that search more pairs need only the cheapest cost; the tie-break runs at the end.
        sol = solve(classes, evals, tie_break=False)
        if sol.pools and not _bounded(sol, by_label, bound):
            sol = solve(classes, evals)
        if not sol.pools and bound:  # the relaxation has no plan, so none has: search all for the message
            for key in list(bound):
                search(key)
            continue
        used = _bounded(sol, by_label, bound)
        if not used:
            return sol, evals
        for key in used:
            search(key)
        _tighten(exact, bound, classes, m, sizing, quantile, ev, search)


def _bounded(sol: FleetSolution, by_label, bound) -> list[tuple]:
    """The pairs of the solution that stand in with a bound (not searched yet)."""
    keys = [by_label.get((sol.option, p.traffic_class, p.config)) for p in sol.pools]
    return [key for key in keys if key in bound]


def _tighten(exact, bound, classes, m: int, sizing, quantile, ev: Evaluator, search) -> None:
    """For each class, the cheapest searched pair alone (replicas to cover its rate, at least m)
    sets the rate another pair must reach to cost no more; a pair proved below that rate by one
    latency point takes it as its bound, one not proved below is searched."""
    for tcs in classes.values():
        for tc in tcs:
            mine = [e for e in exact.values() if e.traffic_class.option == tc.option
                    and e.traffic_class.name == tc.name and e.traffic_class.max_model_len == tc.max_model_len]
            costs = [e.config.price_usd_per_hour * e.config.tp * max(m, math.ceil(tc.rate_rps / e.capacity_rps - 1e-12))
                     for e in mine if e.capacity_rps > 0]
            if not costs:
                continue
            best = min(costs)
            ck = ev._class_key(tc)
            for key, (u, cfg, other, rm, cal) in list(bound.items()):
                if ev._class_key(other) != ck:
                    continue
                price = cfg.price_usd_per_hour * cfg.tp
                most = math.floor(best / price + 1e-9)  # replicas affordable at the incumbent's cost
                if most < m or price * max(m, math.ceil(tc.rate_rps / u - 1e-12)) > best:
                    continue  # its bound already prices it out
                need = tc.rate_rps / most
                below, _ = capacity_below(rm, need / cal, sizing=sizing, quantile=quantile)
                if below:
                    ev.upper[key] = min(ev.upper.get(key, math.inf), need / cal)
                    bound[key] = (need, cfg, other, rm, cal)
                else:
                    search(key)


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
    return min(with_cap, key=lambda ev: (min((f.floor_s for f in ev.capacity.floors), default=0.0), -ev.config.tp,
                                         ev.config.label(0)))


def _summary(sol: FleetSolution) -> str:
    split = "no split" if sol.threshold is None else f"split at {sol.threshold:,}"
    pools = "; ".join(f"{p.traffic_class}: {p.replicas} x {p.config}" for p in sol.pools)
    return f"{split} — {pools}"


def _outcome(name: str, sol: FleetSolution, why: str = "") -> Outcome:
    if not sol.pools:
        return Outcome(name, False, math.inf, 0, "", why or f"infeasible ({sol.status})")
    return Outcome(name, True, sol.cost_per_hour, sol.gpus, _summary(sol), solution=sol)


# ------------------------------------------------------------------ the plan


@dataclass(frozen=True)
class Setup:
    """A scenario ready to solve: its served traffic, classes and every candidate's evaluation."""

    scn: Scenario
    catalog: Catalog
    model: Model
    hist: Histogram
    measured_peak_rps: float
    limit: int
    served: Histogram
    peak_rps: float
    ev: Evaluator
    configs: list[Config]
    classes: dict[str, list[TrafficClass]]
    evals: list[Evaluation]
    traffic_notes: tuple[str, ...] = ()
    measured_mean_rps: float | None = None
    trace: Requests | None = None


def setup_plan(scn: Scenario, catalog: Catalog, model: Model, hist: Histogram, measured_peak_rps: float, *,
               traffic_notes: Iterable[str] = (), measured_mean_rps: float | None = None,
               trace: Requests | None = None) -> Setup:
    """The served traffic, its classes per split option, and every candidate config's capacity for each."""
    limit, served, peak = _served(scn, model, hist, measured_peak_rps, scn.context_limit)
    ev = Evaluator(scn, catalog, model)
    configs = candidate_configs(scn, catalog, model, scn.weight_dtypes, scn.kv_dtypes)
    if not configs:
        raise InputError("no candidate config: every GPU x tp x dtype combination is unsupported for this model")
    classes = traffic_classes(scn, served, limit, peak)
    evals = ev.evaluate_all(classes, configs)
    return Setup(scn, catalog, model, hist, measured_peak_rps, limit, served, peak, ev, configs, classes, evals,
                 tuple(traffic_notes), measured_mean_rps, trace)


def make_plan(
    scn: Scenario, catalog: Catalog, model: Model, hist: Histogram, measured_peak_rps: float,
    *, explore: bool = True, traffic_notes: Iterable[str] = (),
    reserved: dict[str, tuple[int, float]] | None = None, measured_mean_rps: float | None = None,
    keep_lp: bool = False, certify: bool | None = None, trace: Requests | None = None, use_reserved: bool = False,
) -> Plan:
    """Evaluate, solve, certify by simulation, and (with explore) add split analysis, levers,
    alternatives and sensitivity.

    keep_lp: the plan's solution keeps the ILP's text (`plan.solution.lp_text`, for `solve --write-lp`).
    certify: replay every pool through the simulator and re-plan the ones that miss (default:
    the scenario's `verify`). trace: the log's requests with their own arrivals (time already
    compressed by growth), replayed across each pool's replicas as well.
    A scenario that states its `fleet` gets that fleet checked and reported, not a new one.
    use_reserved: every reserved GPU must run (the cheapest plan that strands none).
    """
    if scn.fleet:
        return _given_fleet_plan(scn, catalog, model, hist, measured_peak_rps, traffic_notes=traffic_notes,
                                 measured_mean_rps=measured_mean_rps, certify=certify, trace=trace)
    st = setup_plan(scn, catalog, model, hist, measured_peak_rps, traffic_notes=traffic_notes,
                    measured_mean_rps=measured_mean_rps, trace=trace)
    solve = _Memo(scn)
    sol = solve(st.classes, st.evals, reserved=reserved, keep_lp=keep_lp, use_reserved=use_reserved)
    if not sol.pools:
        raise InfeasibleError(_no_plan_message(sol, scn, st.classes, st.evals, solve.inventory))
    pools = _pool_details(st.ev, st.evals, sol)
    evals, certification = st.evals, None
    if scn.verify if certify is None else certify:
        [(evals, sol, pools, certification)] = certify_plans(
            [(st, st.evals, sol, pools)],
            lambda evs: [solve(st.classes, evs[0], reserved=reserved, keep_lp=keep_lp, use_reserved=use_reserved)],
            rounds=scn.simulation.max_rounds,
        )
    plan = assemble_plan(st, evals, sol, pools, certification)
    return explore_plan(st, plan, solve, reserved=reserved) if explore else plan


def explore_plan(st: Setup, plan: Plan, solve: _Memo, *, reserved=None) -> Plan:
    """The plan's explorations: each split option, the next-best distinct plans, the peak's
    sensitivity, the levers, the best certified plan per GPU type and the TTFT target's cost.
    `solve` answers the re-solves (its scenario's inventory caps apply)."""
    scn, classes, evals, sol, inventory = st.scn, st.classes, plan.evaluations, plan.solution, solve.inventory
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
    levers = _levers(scn, st.catalog, st.model, st.served, st.limit, st.peak_rps, st.ev, st.configs, classes, evals,
                     sol, inventory, solve)
    per_gpu = (_per_gpu(scn, st, st.configs, classes, inventory, solve, reserved)
               if plan.certification else [])
    sweep = _ttft_sweep(scn, st.catalog, st.model, st.configs, classes, inventory, st.ev)
    return dataclasses.replace(plan, split_analysis=split, alternatives=alternatives, sensitivity=sensitivity,
                               levers=levers, per_gpu=per_gpu, ttft_sweep=sweep)


TTFT_SWEEP = (0.5, 0.75, 1.0, 1.5, 2.0)  # multipliers on every band's TTFT limit


def _per_gpu(scn, st: Setup, configs, classes, inventory, solve, reserved) -> list[Outcome]:
    """The cheapest plan on each candidate GPU type alone, certified by simulation as the plan is:
    what committing to one type costs, with latencies checked, not only modelled."""
    out = []
    for cand in scn.gpu_candidates:
        cfgs = [c for c in configs if c.gpu.id == cand.id]
        name = f"{cand.id} only"
        if not cfgs:
            out.append(Outcome(name, False, math.inf, 0, "", "no supported config on it"))
            continue
        ev = st.ev
        evs = ev.evaluate_all(classes, cfgs)
        res = solve(classes, evs, reserved=reserved)
        if not res.pools:
            out.append(Outcome(name, False, math.inf, 0, "", _infeasible_message(classes, evs, inventory)))
            continue
        try:
            [(_, res, _, cert)] = certify_plans([(st, evs, res, _pool_details(ev, evs, res))],
                                                lambda e: [solve(classes, e[0], reserved=reserved)],
                                                rounds=scn.simulation.max_rounds)
        except InfeasibleError as exc:
            out.append(Outcome(name, False, math.inf, 0, "", str(exc)))
            continue
        if cert.certified:
            out.append(_outcome(name, res))
        else:
            out.append(Outcome(name, False, math.inf, 0, "", f"no plan on it held its targets in simulation after "
                               f"{cert.rounds} re-plans"))
    return out


def _ttft_sweep(scn, catalog, model, configs, classes, inventory, ev) -> list[tuple[float, Outcome]]:
    """The plan re-solved with every band's TTFT limit scaled, by the model (calibrated where
    certification measured a class): what a stricter or looser TTFT target costs."""
    slo = scn.slo
    if not any(b.ttft_s for b in slo.bands):
        return []
    out = {}
    # Tighter limits in turn from the targets as stated: a tighter TTFT limit never raises a
    # capacity, so each step's capacities (or bounds) bound the next one's (with 2% to spare for
    # the waiting-time grid, which spans twice the limit); looser ones bound from the ceilings.
    for order in (sorted((x for x in TTFT_SWEEP if x < 1.0), reverse=True), sorted(x for x in TTFT_SWEEP if x > 1.0)):
        above = ev
        for m in order:
            bands = [b.model_copy(update={"ttft_s": (b.ttft_s[0] or slo.statistic, b.ttft_s[1] * m)}) if b.ttft_s else b
                     for b in slo.bands]
            scaled = scn.model_copy(update={"slo": slo.model_copy(update={"bands": bands})})
            swept = Evaluator(scaled, catalog, model, like=ev)
            swept._calibration = ev._calibration  # what simulation showed of the model applies here too
            scaled_classes = {k: [dataclasses.replace(tc, slo=scaled.slo.to_slo()) for tc in tcs]
                              for k, tcs in classes.items()}
            prior = _bound_from(above) if m < 1.0 else None
            res, evs = _lazy_solve(swept, _Memo(scaled), scaled_classes, configs, prior=prior)
            out[m] = _outcome(f"TTFT targets x {m:g}", res, "" if res.pools else
                              _infeasible_message(scaled_classes, evs, inventory))
            above = swept
    return [(m, out[m]) for m in TTFT_SWEEP if m in out]


def _bound_from(looser: Evaluator):
    """An upper bound on a pair's model capacity under tighter TTFT limits: its capacity, or its
    proven bound, under `looser` limits (2% over, for the waiting-time grid)."""

    def prior(cfg: Config, tc: TrafficClass) -> float:
        key = (*cfg.key, *looser._class_key(tc))
        found = looser._cache.get(key)
        if found is not None and found.capacity is not None:
            return found.capacity.max_rps * 1.02
        return looser.upper.get(key, math.inf) * 1.02

    return prior


def _served(scn: Scenario, model: Model, hist: Histogram, measured_peak_rps: float, limit: int | None):
    """The context limit, the requests it serves, and the peak they bring (requests above the
    limit are rejected, so they are not load to plan for)."""
    limit = limit or model.max_position_embeddings
    if limit > model.max_position_embeddings:
        raise InputError(f"context_limit {limit} exceeds '{model.id}' max_position_embeddings {model.max_position_embeddings}")
    served = hist.select_total(at_most=edge_at_most(limit))
    if served.is_empty:
        raise InputError(f"no request fits the {limit:,}-token context limit")
    if scn.traffic.shared_prefix_tokens >= limit:
        raise InputError(f"traffic.shared_prefix_tokens {scn.traffic.shared_prefix_tokens} must be below the context limit {limit}")
    return limit, served, measured_peak_rps * scn.traffic.growth * served.requests / hist.requests


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
    pool_cost = {id(pd): cost * pd.cost_per_hour / sum(q.cost_per_hour for q in pools) for pd in pools}
    input_cost = sum(pool_cost[id(pd)] * pd.at_peak.prefill_share for pd in pools)
    return Plan(
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
        certification=certification,
    )


def _pool_details(ev: Evaluator, evals, sol: FleetSolution) -> list[PoolDetail]:
    by_label = {e.key: e for e in evals}
    out = []
    for p in sol.pools:
        e = by_label[(sol.option, p.traffic_class, p.config)]
        tc, cfg = e.traffic_class, e.config
        dep = ev.deployment(cfg, tc.max_model_len)
        rm = ReplicaModel(dep, ev.profile(tc, dep), tc.slo, e.capacity.ladder)
        share = (p.replicas * p.capacity_rps) / sum(q.replicas * q.capacity_rps for q in sol.pools if q.traffic_class == p.traffic_class)
        per_replica = tc.peak_rps * share / p.replicas
        n = rm.resident_for_rate(per_replica, float(dep.engine.max_num_seqs))
        out.append(PoolDetail(tc, cfg, dep, p.replicas, p.gpus, p.cost_per_hour, e.capacity, rm.point(n or 0.0),
                              per_replica, rm, n, e.capacity_rps))
    return out


def pool_setting(pd: PoolDetail, scn: Scenario, pools: list[PoolDetail], trace: Requests | None) -> PoolSetting:
    """What certification needs of a pool: its replica, traffic, rate, model, and its share of the log."""
    tc = pd.traffic_class
    mine = None
    if trace is not None:
        total = trace.prompt_tokens + trace.output_tokens
        lo = 0 if tc.name != "long" else int(tc.option)
        in_class = np.flatnonzero((total > lo) & (total <= edge_at_most(tc.max_model_len)))
        # A plain load balancer deals the class's requests to its replicas in turn, whatever each can carry.
        siblings = [q for q in pools if q.traffic_class is tc]
        offset = sum(q.replicas for q in siblings[: siblings.index(pd)])
        replica = np.arange(in_class.size) % sum(q.replicas for q in siblings)
        take = in_class[(replica >= offset) & (replica < offset + pd.replicas)]
        if take.size:
            mine = Requests(trace.arrival_s[take], trace.prompt_tokens[take], trace.output_tokens[take])
    return PoolSetting(tc.name, tc.label, pd.config.label(tc.max_model_len), pd.deployment, tc.hist, pd.replicas,
                       pd.rate_per_replica_rps, pd.model, pd.resident, scn.traffic.shared_prefix_tokens, mine)


def certify_plans(parts, resolve, *, rounds: int) -> list[tuple[list[Evaluation], FleetSolution, list[PoolDetail], Certification]]:
    """Replay every pool of every plan; where one misses, plan its config for that class at its
    simulated capacity and solve again, until every pool holds or `rounds` re-plans are spent.

    parts: (setup, evaluations, solution, pool details) per plan; plans solved together (the
    services of a fleet) are re-solved together: resolve(evaluations per part) gives each part's
    new solution. Returns each part's evaluations, solution, pools (with their checks) and
    certification."""
    state = [[st, evals, sol, pools, []] for st, evals, sol, pools in parts]

    def key(pd: PoolDetail) -> tuple:
        tc = pd.traffic_class
        return (tc.option, tc.name, pd.config.label(tc.max_model_len), pd.replicas, round(pd.rate_per_replica_rps, 9))

    def run(st: Setup, p: PoolSetting) -> PoolCheck:
        slo, sim = st.scn.slo.to_slo(), st.scn.simulation
        return check_pool(p, slo, requests=_requests(p, slo, sim), seed=sim.seed)

    spent = 0
    while True:
        # Replays already run for a scenario are kept (the plan's, the per-GPU plans').
        todo = []
        for st, _, _, pools, _ in state:
            fresh = {key(pd): pd for pd in pools if key(pd) not in st.ev.checks}
            todo += [(st, k, pool_setting(pd, st.scn, pools, st.trace)) for k, pd in fresh.items()]
        # The simulator's loop releases the GIL: pools replay side by side, one thread each.
        with ThreadPoolExecutor(max_workers=max(1, min(len(todo), os.cpu_count() or 1))) as workers:
            done = list(workers.map(lambda t: run(t[0], t[2]), todo))
        for (st, k, _), check in zip(todo, done, strict=True):
            st.ev.checks[k] = check
        missing = [[pd for pd in pools if not st.ev.checks[key(pd)].holds] for st, _, _, pools, _ in state]
        if not any(missing) or spent == rounds:
            break
        spent += 1
        for (st, evals, _, pools, changes), miss in zip(state, missing, strict=True):
            slo, sim = st.scn.slo.to_slo(), st.scn.simulation
            for pd in miss:
                check = st.ev.checks[key(pd)]
                tc = pd.traffic_class
                config = pd.config.label(tc.max_model_len)
                if not check.problems:  # held at the planned peak with Poisson arrivals, not under the log's bursts
                    new = pd.planned_rps * pd.replicas / (pd.replicas + 1)
                    why = "the log's own arrivals: " + "; ".join(check.replay.problems)
                else:
                    setting = pool_setting(pd, st.scn, pools, None)
                    new = simulated_capacity(setting, slo, requests=_requests(setting, slo, sim), seed=sim.seed).rate_rps
                    why = "; ".join(check.problems)
                st.ev.record_simulated(next(e for e in evals if e.key == (tc.option, tc.name, config)), new)
                changes.append(f"round {spent}: {tc.label} on {config} missed ({why}); planned at {new:,.3f} instead "
                               f"of {pd.planned_rps:,.3f} req/s per replica")
        for part in state:  # variants proved below a sibling stay below it (record_simulated scales the class)
            part[1] = [e if e.dominated_by else part[0].ev.evaluate(e.config, e.traffic_class) for e in part[1]]
        sols = resolve([part[1] for part in state])
        if any(not sol.pools for sol in sols):
            raise InfeasibleError("no plan holds its targets in simulation: "
                                  + " | ".join(c for part in state for c in part[4]))
        for part, sol in zip(state, sols, strict=True):
            part[2], part[3] = sol, _pool_details(part[0].ev, part[1], sol)
    out = []
    for st, evals, sol, pools, changes in state:
        sim = st.scn.simulation
        certified = all(st.ev.checks[key(pd)].holds for pd in pools)
        pools = [dataclasses.replace(pd, check=st.ev.checks[key(pd)]) for pd in pools]
        out.append((evals, sol, pools, Certification(certified, spent, tuple(changes), sim.requests, sim.band_requests,
                                                     sim.seed)))
    return out


def _requests(p: PoolSetting, slo: SLO, sim) -> int:
    return requests_for(p.hist, slo, most=sim.requests, per_band=sim.band_requests)


def _given_fleet_plan(scn, catalog, model, hist, measured_peak_rps, *, traffic_notes, measured_mean_rps, certify,
                      trace) -> Plan:
    """The scenario's own fleet, evaluated and checked as it stands (no solving), beside the
    cheapest plan the model finds for the same targets."""
    base_limit = scn.context_limit or model.max_position_embeddings
    limits = sorted({p.context_limit or base_limit for p in scn.fleet})
    if len(limits) > 2:
        raise InputError(f"fleet: pools have {len(limits)} context limits ({', '.join(map(str, limits))}); a fleet "
                         "has at most two: a short pool's and a long pool's")
    limit, served, peak = _served(scn, model, hist, measured_peak_rps, limits[-1])
    one_class = len(limits) == 1
    scn_fleet = scn.model_copy(update={"split_thresholds": [] if one_class else [limits[0]]})
    classes = traffic_classes(scn_fleet, served, limit, peak)
    option = "none" if one_class else str(limits[0])
    if option not in classes:
        raise InputError(f"fleet: no request falls on one side of the {limits[0]:,}-token limit; give one pool limit")
    ev = Evaluator(scn, catalog, model)
    prices = {c.id: c.price_per_hour(catalog.gpu(c.id).price_usd_per_hour) for c in scn.gpu_candidates}
    evals, pools = [], []
    for i, fp in enumerate(scn.fleet):
        gpu = catalog.gpu(fp.gpu)
        problem = supported_problem(gpu, fp.tp, catalog.dtype(fp.weight_dtype), catalog.dtype(fp.kv_dtype), model)
        if problem:
            raise InputError(f"fleet[{i}]: {problem}")
        cfg = Config(gpu, fp.tp, fp.weight_dtype, fp.kv_dtype, prices.get(gpu.id, gpu.price_usd_per_hour))
        lim = fp.context_limit or base_limit
        tc = next(t for t in classes[option] if t.max_model_len == lim)
        e = ev.evaluate(cfg, tc)
        if e.capacity is None:
            raise InputError(f"fleet[{i}]: {e.problem}")
        evals.append(e)
        pools.append(Pool(tc.name, cfg.label(lim), gpu.id, fp.replicas, fp.replicas * fp.tp, e.capacity_rps,
                          tc.rate_rps, fp.replicas * fp.tp * cfg.price_usd_per_hour))
    sol = FleetSolution("Given (the scenario's fleet, not optimised)", option, None if one_class else limits[0],
                        tuple(pools), sum(p.cost_per_hour for p in pools), sum(p.gpus for p in pools), 0.0, 0.0, "—")
    details = _pool_details(ev, evals, sol)
    certification = None
    if scn.verify if certify is None else certify:
        setup = Setup(scn, catalog, model, hist, measured_peak_rps, limit, served, peak, ev, [], classes, evals,
                      tuple(traffic_notes), measured_mean_rps, trace)
        [(evals, sol, details, certification)] = certify_plans([(setup, evals, sol, details)], None, rounds=0)
    plan = _assemble(scn, model, catalog, hist, served, limit, measured_peak_rps, peak, classes, evals, sol, details,
                     traffic_notes, measured_mean_rps, certification)
    free = scn.model_copy(update={"fleet": None})
    try:
        best = make_plan(free, catalog, model, hist, measured_peak_rps, explore=False, certify=False)
        optimised = _outcome("cheapest plan for the same targets (model, not certified)", best.solution)
    except InfeasibleError as exc:
        optimised = Outcome("cheapest plan for the same targets", False, math.inf, 0, "", str(exc))
    return dataclasses.replace(plan, given_fleet=True, optimised=optimised)


def _levers(scn, catalog, model, served, limit, peak, ev, configs, classes, evals, sol, inventory, solve) -> list[Outcome]:
    """Re-solve with each lever switched (design.md, "The optimisation"); the levers multiply."""
    out = []

    def with_dtypes(name: str, weights, kvs) -> None:
        cfgs = candidate_configs(scn, catalog, model, weights, kvs)
        if not cfgs:
            out.append(Outcome(name, False, math.inf, 0, "", "no GPU candidate supports it"))
            return
        res, evs = _lazy_solve(ev, solve, classes, cfgs)
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
            res, evs = _lazy_solve(ev, solve, lower_classes, configs)
            name = f"context limit {lower:,} (rejects {lost / served.requests:.1%} of requests)"
            out.append(_outcome(name, res, "" if res.pools else _infeasible_message(lower_classes, evs, inventory)))
    return out
