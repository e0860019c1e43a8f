"""Capacities of (config, class) pairs, computed once and reused by every variant of a plan."""

from __future__ import annotations

import dataclasses
import math
import pickle
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import contextmanager

from planner.capacity import ReplicaModel, capacity_below, replica_capacity
from planner.catalog import Catalog, Model
from planner.deployment import Deployment, make_deployment
from planner.errors import InputError
from planner.memory import kv_token_cap
from planner.paged import token_profile
from planner.plan_objects import (
    Config,
    Evaluation,
    TrafficClass,
)
from planner.pool_check import PoolCheck
from planner.progress import stage
from planner.scenario import Scenario
from planner.worker_pool import shared_map


@dataclasses.dataclass
class Measurements:
    """What certification measured of (config, class) pairs, kept across the plans of one forecast:
    each quarter's plan starts from what the quarters before it measured (Evaluator.take_measurements).

    A config's simulated capacity for a class depends on the config, the class's requests, targets and
    context limit, none of which a quarter's demand or prices change. Each quarter bisected its own,
    from the rate its own plan missed at, and found another rate within the bisection's 2%:
    finance_2027's H100 pool was planned at 28.006, 28.302, 28.120 and 28.447 req/s per replica in its
    four quarters, so a GPU more or less in a quarter came from where a search started, not from the
    quarter. Keyed by config and the class's (option, name, context limit), which every quarter's
    copy of a class shares (a quarter with another context limit has other classes). Only searched
    capacities are kept: a rate lowered after a log's own arrivals missed, or a rate a challenger's
    pool held at, is the quarter's own (its replicas, its share of the rate).
    A searched capacity is kept as certification planned it (certification._measured_capacity): at
    least REPLAN_STEP under the rate that missed, and REPLAN_STEP lower again each time runs of other
    seeds miss there (CONFIRM_STEPS times at most), so it can sit up to about 17% under that rate."""

    rates: dict[tuple, float] = dataclasses.field(default_factory=dict)  # (config, class) -> searched req/s
    ratios: dict[tuple, float] = dataclasses.field(default_factory=dict)  # class -> least simulated / model ratio


class Evaluator:
    """Capacities of (config, class) pairs, computed once and reused by every variant."""

    def __init__(self, scn: Scenario, catalog: Catalog, model: Model, *, like: Evaluator | None = None,
                 measurements: Measurements | None = None):
        """like: an evaluator of the same scenario but for other latency targets, whose token
        profiles and replica models (memory, step and latency tables) this one shares. measurements:
        what earlier plans of a forecast measured (take_measurements), and where this one's go."""
        self.scn, self.catalog, self.model = scn, catalog, model
        self._cache: dict[tuple, Evaluation] = {}
        self._profiles: dict[tuple, object] = like._profiles if like is not None else {}
        self._models: dict[tuple, ReplicaModel] = like._models if like is not None else {}
        # the same scenario's deployments: only its latency targets differ
        self._deployments: dict[tuple, Deployment] = like._deployments if like is not None else {}
        self._slo_models: dict[tuple, ReplicaModel] = {}
        self._like = like
        self._simulated: dict[tuple, float] = {}  # (config, class) -> simulated capacity
        # (config, class) -> what its _simulated rate is: "simulation" (a searched limit), "log" (lowered after
        # the log's own arrivals missed) or "held" (a rate its pool held at, not a searched limit)
        self._simulated_by: dict[tuple, str] = {}
        self.checks: dict[tuple, PoolCheck] = {}  # (config, class, replicas, rate) -> its replay
        self.replays: dict[tuple, Future] = {}  # replays started ahead (certification.replay_ahead), same keys
        self._calibration: dict[tuple, float] = {}  # class -> least simulated / model ratio seen
        self._pair_calibration: dict[tuple, float] = {}  # (config, class) -> its own ratio (a TTFT sweep's, calibrate)
        self.simulated_version = 0  # record_simulated calls so far: what a LazySearch reads again after
        self.upper: dict[tuple, float] = {}  # (config, class) -> a proven upper bound on the model's capacity
        self.dominated: dict[tuple, tuple] = {}  # (config, class) -> the sibling evaluate_all proved it below
        self._token = uuid.uuid4().hex  # names this evaluator to a worker that stands in for it
        self.measurements = measurements
        self._pickled: bytes | None = None

    @staticmethod
    def _class_key(tc: TrafficClass) -> tuple:
        return (tc.option, tc.name, tc.max_model_len, id(tc.hist))

    def record_simulated(self, e: Evaluation, rps: float, *, calibrates: bool = True, from_log: bool | None = None,
                         held: bool = False) -> None:
        """Certification measured this config's capacity for this class: use it from now on, and
        (calibrates) scale the model's capacity of the class's other configs by the same ratio when
        below 1. A rate lowered after the log's own arrivals missed (from_log; the default where it
        calibrates nothing) is no simulated capacity: it calibrates nothing. A challenger's capacity
        (certification._measure_challengers) is simulated and calibrates nothing either: it was
        measured because the class's ratio may not hold for it. held: `rps` is a rate the config's pool
        held its targets at (a challenger that replaced the plan), not the limit a bisection found: it
        plans the config there, and the report says so rather than call it the config's limit."""
        key = self.pair_key(e.config, e.traffic_class)
        self._simulated[key] = rps
        self.simulated_version += 1
        self._simulated_by[key] = ("log" if (not calibrates if from_log is None else from_log)
                                   else "held" if held else "simulation")
        # A capacity of 0 (no rate held its targets in simulation: a floor the model puts under the target)
        # is this pair's alone: as the class's ratio it would price every config of the class at 0, and
        # the search's bounds and rates divide by that ratio.
        ratio = calibrates and rps > 0 and e.capacity is not None and e.capacity.max_rps > 0
        if ratio:
            ck = self._class_key(e.traffic_class)
            self._calibration[ck] = min(self._calibration.get(ck, 1.0), rps / e.capacity.max_rps)
        kept = self.measurements
        if kept is not None and self._simulated_by[key] == "simulation":
            shared = self._shared_class_key(e.traffic_class)
            kept.rates[(e.config.key, shared)] = rps
            if ratio:  # the class's least ratio here, which started from the one kept (take_measurements)
                kept.ratios[shared] = self._calibration[ck]

    def take_measurements(self, configs: Sequence[Config], classes: dict[str, list[TrafficClass]]) -> None:
        """Hold what earlier plans measured (self.measurements) of these pairs and classes as measured
        here: their simulated capacities, and each class's ratio."""
        kept = self.measurements
        if kept is None:
            return
        self.calibrate(kept.ratios, classes)
        for key, shared, _, _ in self._pairs(configs, classes):
            if shared in kept.rates:
                self._simulated[key], self._simulated_by[key] = kept.rates[shared], "simulation"
                self.simulated_version += 1

    @staticmethod
    def _shared_class_key(tc: TrafficClass) -> tuple:
        """A class's key that its copies share (another quarter's, a worker's), where _class_key holds an id."""
        return (tc.option, tc.name, tc.max_model_len)

    def knows_simulated(self, cfg: Config, tc: TrafficClass) -> bool:
        """Whether certification measured this config's capacity for this class itself."""
        return self.pair_key(cfg, tc) in self._simulated

    @contextmanager
    def without_ratios(self):
        """Plan every config at its own capacity, the model's or its simulated one, no class's ratio
        applied, inside the block (certification's challengers: what a ratio-priced config could do
        at best); the ratios come back after it, even on an error."""
        saved, self._calibration = self._calibration, {}
        try:
            yield
        finally:
            self._calibration = saved

    def knows(self, key: tuple) -> bool:
        """Whether the pair's capacity is at hand (searched, or simulated): reading it costs nothing."""
        return key in self._cache or key in self._simulated

    def calibration_of(self, tc: TrafficClass) -> float:
        """The simulated / model capacity ratio certification measured for this class (1 before any)."""
        return self._calibration.get(self._class_key(tc), 1.0)

    def factor_of(self, cfg: Config, tc: TrafficClass) -> float:
        """The ratio a pair's model capacity is planned at: its own measured one where calibrate gave
        it one (a TTFT sweep), else its class's."""
        return self._pair_calibration.get(self.pair_key(cfg, tc)) or self.calibration_of(tc)

    def class_calibration(self, classes: dict[str, list[TrafficClass]]) -> dict[tuple[str, str, int], float]:
        """The calibration of `classes` keyed by (option, name, context limit), which copies of the
        classes (another evaluator's, a worker's) share, where this evaluator's keys hold ids."""
        return {self._shared_class_key(tc): self._calibration[self._class_key(tc)]
                for tcs in classes.values() for tc in tcs if self._class_key(tc) in self._calibration}

    def measured_ratios(self, configs: Sequence[Config], classes: dict[str, list[TrafficClass]]) -> dict[tuple, float]:
        """The simulated / model capacity ratio of each pair certification measured itself, keyed as
        `known` is (config, and the class's option, name and context limit)."""
        out = {}
        for key, shared, _, _ in self._pairs(configs, classes):
            found, simulated = self._cache.get(key), self._simulated.get(key)
            if simulated is not None and found is not None and found.capacity is not None and found.capacity.max_rps > 0:
                out[shared] = simulated / found.capacity.max_rps
        return out

    def calibrate(self, calibration: dict[tuple[str, str, int], float], classes: dict[str, list[TrafficClass]],
                  measured: dict[tuple, float] | None = None, configs: Sequence[Config] = ()) -> None:
        """Take a class_calibration for these classes (what simulation showed of the model there),
        and the measured_ratios of `configs`' pairs: a pair certification measured is scaled by its
        own ratio, not by its class's least. Under other targets (a TTFT sweep) a plan's pool then
        keeps the share of its model capacity it held in simulation, so a looser target never
        prices the plan's own pools below the capacities it was certified at."""
        for tcs in classes.values():
            for tc in tcs:
                factor = calibration.get(self._shared_class_key(tc))
                if factor is not None:
                    self._calibration[self._class_key(tc)] = factor
        for key, shared, _, _ in self._pairs(configs, classes) if measured else ():
            if shared in measured:
                self._pair_calibration[key] = measured[shared]

    def known(self, configs: Sequence[Config], classes: dict[str, list[TrafficClass]]) -> dict[tuple, tuple]:
        """The model evaluations and proven upper bounds held for the pairs of `configs` and
        `classes`, keyed by config and (option, name, context limit), which copies of the classes
        (a worker's) share: what an evaluator of the same scenario in a worker starts from
        (take_known), as this process's TTFT sweep starts from the plan's evaluator."""
        out = {}
        for key, shared, _, _ in self._pairs(configs, classes):
            found, upper = self._cache.get(key), self.upper.get(key)
            if found is not None or upper is not None:
                out[shared] = (None if found is None else (found.capacity, found.problem), upper)
        return out

    def take_known(self, known: dict[tuple, tuple], configs: Sequence[Config], classes: dict[str, list[TrafficClass]]) -> None:
        """Hold another evaluator's `known` evaluations and bounds as this one's own."""
        for key, shared, cfg, tc in self._pairs(configs, classes):
            found, upper = known.get(shared, (None, None))
            if found is not None:
                self._cache[key] = Evaluation(cfg, tc, *found)
            if upper is not None:
                self.upper[key] = upper

    def _pairs(self, configs: Sequence[Config], classes: dict[str, list[TrafficClass]]):
        """(this evaluator's key, the key copies of the classes share, config, class) per pair."""
        for tcs in classes.values():
            for tc in tcs:
                for cfg in configs:
                    yield self.pair_key(cfg, tc), (cfg.key, self._shared_class_key(tc)), cfg, tc

    def deployment(self, cfg: Config, limit: int) -> Deployment:
        """The config's deployment at this context limit, built once: a lazy search asks it of every
        pair each time one starts, and most pairs' replica models are known by then."""
        key = (cfg.key, limit)
        dep = self._deployments.get(key)
        if dep is None:
            dep = self._deployments[key] = self._new_deployment(cfg, limit)
        return dep

    def _new_deployment(self, cfg: Config, limit: int) -> Deployment:
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
        key = self.pair_key(cfg, tc)
        evaluation = self._model_evaluation(key, cfg, tc)
        simulated, factor = self._simulated.get(key), self.factor_of(cfg, tc)
        if simulated is None and factor == 1.0:
            return evaluation
        return dataclasses.replace(evaluation, simulated_rps=simulated, calibration=factor,
                                   simulated_by=self._simulated_by.get(key, "simulation"))

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
            evaluation = Evaluation(cfg, tc, cap, problem)
        except InputError as exc:
            evaluation = Evaluation(cfg, tc, None, str(exc))
        self._cache[key] = evaluation
        return evaluation

    def evaluate_all(self, classes: dict[str, list[TrafficClass]], configs: Sequence[Config]) -> list[Evaluation]:
        """Every config for every class of every split option.

        Dtype variants on the same GPUs (same GPU type, price and tp) cost the same, and the ILP
        keeps only the one of highest capacity (undominated_evaluations). So within such a group a variant
        whose capacity is certainly below the best found so far is not searched: one latency
        point proves it (capacity.capacity_below), and its evaluation names the variant above it.
        The ILP's candidates are then exactly those of evaluating every variant."""
        pairs = [(cfg, tc) for tcs in classes.values() for tc in tcs for cfg in configs]
        groups: dict[tuple, list[tuple[Config, TrafficClass]]] = {}
        for cfg, tc in pairs:
            groups.setdefault((self._class_key(tc), *cfg.same_gpus), []).append((cfg, tc))
        with stage("candidates evaluated", len(pairs), " pairs") as step:
            found = self._evaluate_groups(list(groups.values()), step.advance)
        return [found[self.pair_key(cfg, tc)] for cfg, tc in pairs]

    def evaluate_pairs(self, pairs: Sequence[tuple[Config, TrafficClass]]) -> list[Evaluation]:
        """evaluate() of each pair (the pairs not evaluated yet shared with a worker, when there are many)."""
        found = self._evaluate_groups([[pair] for pair in pairs], lambda n: None)
        return [found[self.pair_key(cfg, tc)] for cfg, tc in pairs]

    def _evaluate_groups(self, groups: list[list[tuple[Config, TrafficClass]]], advance) -> dict[tuple, Evaluation]:
        """_evaluate_group of each group; the groups with nothing evaluated yet are shared with a
        worker when there are enough of them (its answers are this process's: a group's depends on
        the group alone), the rest use this evaluator's own results."""
        found: dict[tuple, Evaluation] = {}
        fresh = [g for g in groups if not any(self.pair_key(cfg, tc) in self._cache for cfg, tc in g)]
        shared = {id(g) for g in fresh} if len(fresh) >= SHARED_MIN_GROUPS else set()
        for group in groups:
            if id(group) not in shared:
                found.update(self._evaluate_group(group))
                advance(len(group))
        if shared:
            shares = _shares(fresh, sum(map(len, fresh)))
            found.update(self._share(shares, advance))
        return found

    def pair_key(self, cfg: Config, tc: TrafficClass) -> tuple:
        """The key of a (config, class) pair in this evaluator's caches."""
        return (*cfg.key, *self._class_key(tc))

    def _share(self, shares: list[list[list[tuple[Config, TrafficClass]]]], advance) -> dict[tuple, Evaluation]:
        """Shares of fresh groups, from the front here and from the back by a worker
        (worker_pool.shared_map). The worker is first sent what it needs to stand in for this
        evaluator (the scenario, catalog, model, and the shares' configs and classes, pickled once
        a call); a share names its pairs by config and class."""
        configs = {cfg.key: cfg for share in shares for group in share for cfg, _ in group}
        classes = {self._class_key(tc): tc for share in shares for group in share for _, tc in group}
        setup = ("evaluator:stand_in", {"token": self._token, "context": self._context(),
                                        "configs": list(configs.values()), "classes": list(classes.items())})
        items = [{"token": self._token, "groups": [[(cfg.key, self._class_key(tc)) for cfg, tc in group] for group in share],
                  "index": i} for i, share in enumerate(shares)]

        def here(item: dict) -> list[list[tuple]]:
            return self._records_of(shares[item["index"]])

        found: dict[tuple, Evaluation] = {}
        for share, records in zip(shares, shared_map("evaluator:evaluate_groups", items, here, setup=setup), strict=True):
            for group, group_records in zip(share, records, strict=True):
                found.update(self._install(group, group_records))
                advance(len(group))
        return found

    def _context(self) -> bytes:
        """The scenario, catalog and model, pickled once."""
        if self._pickled is None:
            self._pickled = pickle.dumps((self.scn, self.catalog, self.model), protocol=pickle.HIGHEST_PROTOCOL)
        return self._pickled

    def _records_of(self, share: list[list[tuple[Config, TrafficClass]]]) -> list[list[tuple]]:
        """A share of groups evaluated by this evaluator, as a worker's records."""
        return [self._records(group, self._evaluate_group(group)) for group in share]

    def _records(self, group, found: dict[tuple, Evaluation]) -> list[tuple]:
        """A group's evaluations as they travel between processes (ids in keys do not)."""
        records = []
        for cfg, tc in group:
            key = self.pair_key(cfg, tc)
            e = found[key]
            records.append((e.capacity, e.problem, e.dominated_by, self.upper.get(key)))
        return records

    def _install(self, group, records: list[tuple]) -> dict[tuple, Evaluation]:
        """A group's records taken as this evaluator's own evaluations (as _evaluate_group leaves them)."""
        out = {}
        keys = {cfg.label(tc.max_model_len): self.pair_key(cfg, tc) for cfg, tc in group}
        for (cfg, tc), (capacity, problem, dominated_by, upper) in zip(group, records, strict=True):
            key = self.pair_key(cfg, tc)
            if dominated_by:
                self.upper[key] = min(self.upper.get(key, math.inf), upper)
                self.dominated[key] = keys[dominated_by]
                out[key] = Evaluation(cfg, tc, None, problem, dominated_by=dominated_by)
            else:
                self._cache.setdefault(key, Evaluation(cfg, tc, capacity, problem))
                out[key] = self.evaluate(cfg, tc)
        return out

    def _evaluate_group(self, group: list[tuple[Config, TrafficClass]]) -> dict[tuple, Evaluation]:
        keyed = [(self.pair_key(cfg, tc), cfg, tc) for cfg, tc in group]
        out = {key: self.evaluate(cfg, tc) for key, cfg, tc in keyed if key in self._cache}
        # Compared at the rates they are planned at: the variants of a group share their class's
        # ratio, save those a TTFT sweep gives their own (Evaluator.factor_of), and a model capacity
        # below best / factor is then planned below the best.
        best = max((e.capacity.max_rps * self.factor_of(e.config, e.traffic_class) for e in out.values()
                    if e.capacity is not None), default=0.0)
        best_key, best_label = next(((key, e.config.label(e.traffic_class.max_model_len)) for key, e in out.items()
                                     if e.capacity is not None
                                     and e.capacity.max_rps * self.factor_of(e.config, e.traffic_class) == best),
                                    (None, ""))
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
            factor = self.factor_of(cfg, tc)
            if models[key] is not None and best > 0:
                below = capacity_below(models[key], best / factor, sizing=sizing, quantile=quantile)
                guess = below.start_n
                if below.below:
                    # A bound of 0 (a target missed unloaded) would have a lazy search evaluate the pair
                    # at once, to no use: it is held below the sibling, and a search proves the 0 again.
                    upper = below.upper_rps if below.upper_rps > 0 else best / factor
                    self.upper[key] = min(self.upper.get(key, math.inf), upper)
                    self.dominated[key] = best_key
                    out[key] = Evaluation(cfg, tc, None, f"capacity below {best_label}'s {best:,.3f} req/s on the "
                                          "same GPUs", dominated_by=best_label)
                    continue
            evaluation = self._model_evaluation(key, cfg, tc, guess=guess)
            out[key] = self.evaluate(cfg, tc)
            if evaluation.capacity is not None and evaluation.capacity.max_rps * factor > best:
                best, best_key, best_label = evaluation.capacity.max_rps * factor, key, cfg.label(tc.max_model_len)
        return out

# Evaluations shared with a worker: at least this many fresh groups (fewer cost more to send than
# they save), in about this many shares (the two processes wait on each other for one share at most).
SHARED_MIN_GROUPS = 8
SHARES = 12


def _shares(groups: list, pairs: int) -> list[list]:
    """Consecutive runs of groups of about pairs / SHARES pairs each."""
    size = max(1, pairs // SHARES)
    out, run, n = [], [], 0
    for group in groups:
        run.append(group)
        n += len(group)
        if n >= size:
            out.append(run)
            run, n = [], 0
    return [*out, run] if run else out


class _StandIn:
    """A worker's evaluator standing in for one of the planner's, with the configs and classes it
    was sent, by the planner's keys (a class sent again keeps its first copy, and so the stand-in's
    profiles and replica models), and every histogram the worker received for it, each once: the
    worker's jobs for that evaluator (job_evaluator) share its profiles and replica models too."""

    def __init__(self, scn: Scenario, catalog: Catalog, model: Model):
        self.evaluator = Evaluator(scn, catalog, model)
        self.configs: dict[tuple, Config] = {}
        self.classes: dict[tuple, TrafficClass] = {}
        self.hists: list = []

    def same_hist(self, tc: TrafficClass) -> TrafficClass:
        """The class with the first copy of an equal histogram received (equal requests: the same
        profile and replica models, which are keyed by the histogram's identity)."""
        for hist in self.hists:
            if hist is tc.hist or hist == tc.hist:
                return tc if hist is tc.hist else dataclasses.replace(tc, hist=hist)
        self.hists.append(tc.hist)
        return tc


_standing_in: dict[str, _StandIn] = {}  # by the token of the planner's evaluator, the least recently used first
# A fleet's services each have their own: the worker keeps a few, the ones used last.
STAND_INS = 8


def _stand_in_for(token: str, context: Callable[[], tuple[Scenario, Catalog, Model]]) -> _StandIn:
    """The worker's stand-in for the planner's evaluator `token`, made from context() if it has none."""
    mine = _standing_in.pop(token, None)
    if mine is None:
        if len(_standing_in) >= STAND_INS:  # the least recently used goes
            del _standing_in[next(iter(_standing_in))]
        mine = _StandIn(*context())
    _standing_in[token] = mine
    return mine


def stand_in(token: str, context: bytes, configs: list[Config], classes: list[tuple[tuple, TrafficClass]]) -> None:
    """A worker's job before its shares of an evaluation (worker_pool.shared_map's setup)."""
    mine = _stand_in_for(token, lambda: pickle.loads(context))
    # Only its profiles and replica models carry over: an answer of an earlier call that the planner
    # did not take (an error cut it short) must not stand in for a group's own search.
    mine.evaluator._cache.clear()
    mine.evaluator.upper.clear()
    for cfg in configs:
        mine.configs.setdefault(cfg.key, cfg)
    for key, tc in classes:
        if key not in mine.classes:
            mine.classes[key] = mine.same_hist(tc)


def job_evaluator(token: str, scn: Scenario, catalog: Catalog, model: Model,
                  classes: dict[str, list[TrafficClass]]) -> tuple[Evaluator, dict[str, list[TrafficClass]]]:
    """In a worker, for a job of the planner's evaluator `token` (an exploration's): an evaluator of
    `scn` of its own, sharing the token profiles and replica models the worker built before for that
    evaluator (its shares of an evaluation, its earlier jobs), and `classes` with the histograms the
    worker holds for it, so that their pairs find those models. Building them again was most of a
    job's time: the full candidate set's TTFT x0.5 took 0.8 s in the worker, 0.2 s here."""
    mine = _stand_in_for(token, lambda: (scn, catalog, model))
    same = {k: [mine.same_hist(tc) for tc in tcs] for k, tcs in classes.items()}
    return Evaluator(scn, catalog, model, like=mine.evaluator), same


def evaluate_groups(token: str, groups: list[list[tuple[tuple, tuple]]], index: int) -> list[list[tuple]]:
    """A worker's share of an evaluation: the records of fresh groups, named by the planner's
    config and class keys. A group's answer depends on the group alone, so it is the planner's own."""
    mine = _standing_in[token]
    return mine.evaluator._records_of([[(mine.configs[c], mine.classes[k]) for c, k in group] for group in groups])
