"""Capacities of (config, class) pairs, computed once and reused by every variant of a plan."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

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

    def class_calibration(self, classes: dict[str, list[TrafficClass]]) -> dict[tuple[str, str, int], float]:
        """The calibration of `classes` keyed by (option, name, context limit), which copies of the
        classes (another evaluator's, a worker's) share, where this evaluator's keys hold ids."""
        return {(tc.option, tc.name, tc.max_model_len): self._calibration[self._class_key(tc)]
                for tcs in classes.values() for tc in tcs if self._class_key(tc) in self._calibration}

    def calibrate(self, calibration: dict[tuple[str, str, int], float], classes: dict[str, list[TrafficClass]]) -> None:
        """Take a class_calibration for these classes (what simulation showed of the model there)."""
        for tcs in classes.values():
            for tc in tcs:
                factor = calibration.get((tc.option, tc.name, tc.max_model_len))
                if factor is not None:
                    self._calibration[self._class_key(tc)] = factor

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
        evaluation = self._model_evaluation(key, cfg, tc)
        simulated, factor = self._simulated.get(key), self._calibration.get(self._class_key(tc), 1.0)
        if simulated is None and factor == 1.0:
            return evaluation
        return dataclasses.replace(evaluation, simulated_rps=simulated, calibration=factor)

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
            groups.setdefault((self._class_key(tc), cfg.gpu.id, cfg.price_usd_per_hour, cfg.tp), []).append((cfg, tc))
        found: dict[tuple, Evaluation] = {}
        with stage("candidates evaluated", len(pairs), " pairs") as step:
            for group in groups.values():
                found.update(self._evaluate_group(group))
                step.advance(len(group))
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
            evaluation = self._model_evaluation(key, cfg, tc, guess=guess)
            out[key] = self.evaluate(cfg, tc)
            if evaluation.capacity is not None and evaluation.capacity.max_rps > best:
                best, best_label = evaluation.capacity.max_rps, cfg.label(tc.max_model_len)
        return out


