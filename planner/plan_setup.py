"""A scenario ready to solve: the requests its context limit serves, its traffic classes, every
candidate's evaluation; and a solution's pools with their replica models (PoolDetail).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from planner.bounds import DEMAND_FIELDS, MIN_RPS
from planner.capacity import ReplicaModel
from planner.catalog import Catalog, Model
from planner.deployment import unsupported_choices
from planner.errors import InputError
from planner.evaluator import Evaluator, Measurements
from planner.histogram import Histogram
from planner.ilp import FleetSolution
from planner.plan_objects import (
    Config,
    Evaluation,
    PoolDetail,
    TrafficClass,
    candidate_configs,
    class_share,
    combinations,
    default_context_limit,
    default_limit_note,
    edge_at_most,
    traffic_classes,
)
from planner.requests import Requests
from planner.scenario import Scenario


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
    evaluator: Evaluator
    configs: list[Config]
    classes: dict[str, list[TrafficClass]]
    evals: list[Evaluation]
    traffic_notes: tuple[str, ...] = ()
    measured_mean_rps: float | None = None
    trace: Requests | None = None


def _no_candidate(scn: Scenario, catalog: Catalog, model: Model) -> str:
    """Why none of the scenario's combinations can run, the most common reason first (`tp: [64]`
    passes a node's GPUs), led by the field at fault where every fault of every combination is that
    one field's (`tp`, `weight_dtypes`, `kv_dtypes`) and verified_only took no GPU away (changing
    that field alone may then be the answer); or that verified_only leaves no GPU."""
    # every fault of each combination (its first is the problem `combinations` gives it)
    faults = [unsupported_choices(gpu, tp, catalog.dtype(w), catalog.dtype(kv), model)
              for gpu, _, tp, w, kv, _ in combinations(scn, catalog, model, scn.weight_dtypes, scn.kv_dtypes)]
    if not faults:
        return "verified_only: no GPU candidate has measured efficiency factors"
    ranked = [reason for reason, _ in Counter(found[0][1] for found in faults).most_common()]
    more = f" (and {len(ranked) - 1} other reason{'s' if len(ranked) > 2 else ''})" if len(ranked) > 1 else ""
    fields = {field for found in faults for field, _ in found}
    unverified_left_out = scn.verified_only and any(not catalog.gpu(c.id).verified for c in scn.gpu_candidates)
    lead = f"{fields.pop()}: " if len(fields) == 1 and not unverified_left_out else ""
    return f"{lead}no candidate config: every GPU x tp x dtype combination is unsupported for this model: {ranked[0]}{more}"


def _check_dtype_roles(scn: Scenario, catalog: Catalog) -> None:
    """A dtype the scenario lists for a role its catalog entry refuses, named where it is listed (kv_dtypes:
    [fp4] read "no candidate config: ... cannot serve as an fp4 KV cache", naming no field or choice).
    The commands refuse it first, where they read the scenario (inputs.scenario_catalog, the same
    Catalog.dtype_for); this guards a Scenario handed to setup_plan directly."""
    for field, role in (("weight_dtypes", "weight"), ("kv_dtypes", "kv")):
        for i, name in enumerate(getattr(scn, field)):
            try:
                catalog.dtype_for(name, role)
            except InputError as exc:
                raise InputError(f"{field}[{i}]: {exc.message}") from None


def setup_plan(scn: Scenario, catalog: Catalog, model: Model, hist: Histogram, measured_peak_rps: float, *,
               traffic_notes: Iterable[str] = (), measured_mean_rps: float | None = None,
               trace: Requests | None = None, evaluate: bool = True,
               measurements: Measurements | None = None) -> Setup:
    """The served traffic, its classes per split option, and every candidate config's capacity for
    each (none with evaluate=False: a lazy search (planner.plan_search.LazySearch) finds those it needs).
    measurements: what certification measured for earlier plans of a forecast (Measurements)."""
    limit, served, peak = served_traffic(scn, model, hist, measured_peak_rps, scn.context_limit)
    evaluator = Evaluator(scn, catalog, model, measurements=measurements)
    _check_dtype_roles(scn, catalog)
    configs = candidate_configs(scn, catalog, model, scn.weight_dtypes, scn.kv_dtypes)
    if not configs:
        raise InputError(_no_candidate(scn, catalog, model))
    classes = traffic_classes(scn, served, limit, peak)
    evaluator.take_measurements(configs, classes)
    evals = evaluator.evaluate_all(classes, configs) if evaluate else []
    return Setup(scn, catalog, model, hist, measured_peak_rps, limit, served, peak, evaluator, configs, classes, evals,
                 tuple(traffic_notes), measured_mean_rps, trace)


def served_traffic(scn: Scenario, model: Model, hist: Histogram, measured_peak_rps: float, limit: int | None):
    """The context limit, the requests it serves, and the peak they bring (requests above the
    limit are rejected, so they are not load to plan for)."""
    limit = limit or default_context_limit(model)
    if limit > model.max_position_embeddings:
        raise InputError(f"context_limit {limit} exceeds '{model.id}' max_position_embeddings {model.max_position_embeddings}")
    served = hist.select_total(at_most=edge_at_most(limit))
    if served.is_empty:
        # named by its field (a constant prompt of 9,000 tokens at an 8,192 limit read as no field's fault)
        raise InputError(f"context_limit: no request of the traffic fits the {limit:,}-token context limit"
                         + default_limit_note(model, limit, stated=bool(scn.context_limit)))
    if scn.traffic.shared_prefix_tokens >= limit:
        raise InputError(f"traffic.shared_prefix_tokens {scn.traffic.shared_prefix_tokens} must be below the context limit {limit}")
    grown_rps = measured_peak_rps * scn.traffic.growth
    if grown_rps < MIN_RPS:  # each factor is bounded on its own; their product can still vanish
        raise InputError(f"traffic.growth: the peak of {measured_peak_rps:,.6g} requests/s × growth {scn.traffic.growth:g} "
                         f"is {grown_rps:.3g} requests/s, below the bound of {MIN_RPS:g} (planner.bounds: a request "
                         f"every {1 / MIN_RPS / 86400:.1f} days); check {DEMAND_FIELDS}")
    return limit, served, grown_rps * served.requests / hist.requests


def pool_details(evaluator: Evaluator, evals, sol: FleetSolution, *, replay_covered: bool = True) -> list[PoolDetail]:
    """Each pool of the solution with its replica model, its operating point at the peak, and the
    rate its replay is judged at (PoolDetail.replay_rps): the rate the plan covers, peak × headroom,
    or with replay_covered=False (a stated fleet, audited as it stands) the peak itself."""
    by_label = {e.key: e for e in evals}
    out = []
    for p in sol.pools:
        e = by_label[(sol.option, p.traffic_class, p.config)]
        tc, cfg = e.traffic_class, e.config
        dep = evaluator.deployment(cfg, tc.max_model_len)
        rm = ReplicaModel(dep, evaluator.profile(tc, dep), tc.slo, e.capacity.ladder)
        share = class_share(p.replicas, p.capacity_rps,
                            [(q.replicas, q.capacity_rps) for q in sol.pools if q.traffic_class == p.traffic_class])
        per_replica = tc.peak_rps * share / p.replicas
        n = rm.resident_for_rate(per_replica, float(dep.engine.max_num_seqs))
        replay = tc.rate_rps * share / p.replicas if replay_covered else per_replica
        replay_n = n if replay == per_replica else rm.resident_for_rate(replay, float(dep.engine.max_num_seqs))
        out.append(PoolDetail(tc, cfg, dep, p.replicas, p.gpus, p.cost_per_hour, e.capacity, rm.point(n or 0.0),
                              per_replica, rm, n, e.capacity_rps, replay, replay_n,
                              planned_by=e.planned_by, calibration=e.calibration if e.planned_by == "calibration" else None,
                              class_part=share))
    return out

