"""`planner solve` as a library call: scenario file → Plan → report (and JSON)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.catalog import Catalog, Model, load_catalog
from planner.errors import InputError
from planner.plan_objects import Plan
from planner.planning import make_plan
from planner.scenario import Scenario, load_scenario, resolve
from planner.traffic import Traffic
from planner.yamlio import validate


def scenario_catalog(scn: Scenario, path: Path, extra_files: tuple[str, ...] = ()) -> Catalog:
    catalog = load_catalog(*extra_files)
    if scn.catalog:
        catalog = catalog.with_overrides(scn.catalog, where=f"{path}: catalog")
    checks = [(f"gpus[{i}]", catalog.gpu, c.id) for i, c in enumerate(scn.gpu_candidates)]
    checks += [(f"weight_dtypes[{i}]", catalog.dtype, d) for i, d in enumerate(scn.weight_dtypes)]
    checks += [(f"kv_dtypes[{i}]", catalog.dtype, d) for i, d in enumerate(scn.kv_dtypes)]
    checks.append(("engine", catalog.engine, scn.engine))
    for field_path, lookup, name in checks:
        try:
            lookup(name)  # unknown name → InputError naming the closest match
        except InputError as exc:
            raise InputError(f"{field_path}: {exc}", where=str(path)) from None
    if scn.long_prefill_token_threshold is not None and catalog.engine(scn.engine).long_prefill_token_threshold is None:
        raise InputError(f"long_prefill_token_threshold: engine '{scn.engine}' has no such setting (vLLM's profiles do)",
                         where=str(path))
    return catalog


def scenario_model(scn: Scenario, catalog: Catalog, base: Path, where: str) -> Model:
    spec = scn.model
    if isinstance(spec, str):
        try:
            return catalog.model(spec)
        except InputError as exc:
            raise InputError(f"model: {exc}", where=where) from None
    if "config_json" in spec:
        from planner.hf_import import model_from_hf_config

        extra = {k: v for k, v in spec.items() if k != "config_json"}
        unknown = set(extra) - {"name", "params_total", "params_active", "hf_id"}
        if unknown:
            raise InputError(f"model: unknown keys {sorted(unknown)} beside config_json", where=where)
        return model_from_hf_config(
            resolve(base, spec["config_json"]), name=str(extra.get("name", "custom-model")),
            params_total=extra.get("params_total"), params_active=extra.get("params_active"), hf_id=extra.get("hf_id"),
        )
    return validate(Model, {"id": spec.get("id", "inline-model"), **spec}, where=where, prefix="model")


@dataclass(frozen=True)
class Inputs:
    """Everything a scenario file resolves to, before any solving."""

    path: Path
    scenario: Scenario
    catalog: Catalog
    model: Model
    traffic: Traffic


def load_inputs(path: str | Path, *, catalog_files: tuple[str, ...] = ()) -> Inputs:
    path = Path(path)
    scn, base = load_scenario(path)
    return scenario_inputs(scn, path, base, catalog_files=catalog_files)


def scenario_inputs(scn: Scenario, path: Path, base: Path, *, catalog_files: tuple[str, ...] = (),
                    where: str | None = None) -> Inputs:
    """A validated scenario's catalog, model and traffic; `base` is the folder its relative paths start
    from and `where` names it in messages [default: path] (a fleet's inline service: 'fleet.yaml: services[2]')."""
    from planner.traffic import load_traffic

    where = where or str(path)
    catalog = scenario_catalog(scn, Path(where), catalog_files)
    model = scenario_model(scn, catalog, base, where)
    try:
        traffic = load_traffic(scn, base)
    except InputError as exc:
        if exc.where is not None:  # already names its log file
            raise
        raise InputError(f"traffic: {exc}", where=where) from None
    return Inputs(path, scn, catalog, model, traffic)


def plan_inputs(
    inputs: Inputs, scn: Scenario | None = None, *, explore: bool = True, reserved=None, keep_lp: bool = False,
    certify: bool | None = None, use_reserved: bool = False,
) -> Plan:
    """keep_lp: the plan's solution keeps the ILP's text (`plan.solution.lp_text`).
    certify: certify by simulation [default: the scenario's `verify`].
    use_reserved: every reserved GPU must run."""
    t = inputs.traffic
    scn = scn or inputs.scenario
    return make_plan(
        scn, inputs.catalog, inputs.model, t.hist, t.peak_rps, explore=explore,
        traffic_notes=t.notes, measured_mean_rps=t.mean_rps, reserved=reserved, keep_lp=keep_lp,
        certify=certify, trace=t.requests_at_growth(scn.traffic.growth) if t.requests is not None else None,
        use_reserved=use_reserved,
    )


def report_sections(plan: Plan, inputs: Inputs, *, forecast: bool = True) -> tuple[str, ...]:
    """The sections a plan's report adds after its pools: the day's load curve priced (a profile that
    is not flat) and, with `forecast`, the scenario's forecast."""
    sections = []
    if not inputs.traffic.profile.is_flat:
        from planner.daily import day_section

        sections.append(day_section(plan, inputs.traffic.profile))
    if forecast and inputs.scenario.forecast is not None:
        from planner.forecast import run_forecast
        from planner.forecast_outputs import forecast_markdown

        sections.append(
            forecast_markdown(inputs.scenario.name, run_forecast(inputs), heading=2)
            + "\nThe quarter-by-quarter CSV and figure come from `planner forecast` on this scenario.\n"
        )
    return tuple(sections)


def uncertified_message(plan: Plan) -> str | None:
    """One line naming the pools that miss their targets in simulation, or None when the plan holds."""
    cert = plan.certification
    if cert is None or cert.certified:
        return None
    misses = "; ".join(
        f"{pd.traffic_class.label} on {pd.config.label(pd.traffic_class.max_model_len)}: "
        + ", ".join(pd.check.problems or (pd.check.replay.problems if pd.check.replay else ()))
        for pd in plan.pools if not pd.check.holds
    )
    what = "the fleet" if plan.given_fleet else f"no plan holds its targets in simulation after {cert.rounds} re-plans;"
    return f"{what} misses in simulation: {misses}" if plan.given_fleet else f"{what} {misses}"


def _target_json(check, unit_scale: float) -> dict[str, Any]:
    return {"stat": check.stat, "target": check.limit_s * unit_scale, "predicted": _finite(check.predicted_s * unit_scale),
            "simulated": _finite(check.simulated_s * unit_scale)}


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def bands_json(bands) -> list[dict[str, Any]]:
    """Per band: each target (TTFT in s, TPOT and ITL in ms) with predicted and simulated values."""
    out = []
    for b in bands:
        entry: dict[str, Any] = {"band": b.band.name, "requests_simulated": b.requests}
        for c in b.checks:
            key = {"ttft": "ttft_s", "tpot": "tpot_ms", "itl": "itl_ms"}[c.kind]
            entry[key] = _target_json(c, 1.0 if c.kind == "ttft" else 1e3)
        entry["holds"] = b.holds
        out.append(entry)
    return out


def _pool_bands(pd) -> list[dict[str, Any]]:
    from planner.pool_check import band_checks

    if pd.check is not None:
        return bands_json(pd.check.bands)
    return bands_json(band_checks(pd.traffic_class.slo, pd.model, pd.resident, None))


def plan_scenario(path: str | Path, *, catalog_files: tuple[str, ...] = (), explore: bool = True) -> Plan:
    return plan_inputs(load_inputs(path, catalog_files=catalog_files), explore=explore)


def plan_json(plan: Plan) -> dict[str, Any]:
    """The plan as data: pools, totals, status, and every evaluated candidate (to check it independently)."""
    sol = plan.solution
    pools = [
        {
            "pool": pd.traffic_class.name,
            "label": pd.traffic_class.label,
            "gpu": pd.config.gpu.id,
            "tp": pd.config.tp,
            "weight_dtype": pd.config.weight_dtype,
            "kv_dtype": pd.config.kv_dtype,
            "max_model_len": pd.traffic_class.max_model_len,
            "replicas": pd.replicas,
            "gpus": pd.gpus,
            "capacity_rps": pd.capacity.max_rps,
            "rate_rps": pd.traffic_class.rate_rps,
            "binding": pd.capacity.binding,
            "cost_per_hour": pd.cost_per_hour,
            "planned_rps": pd.planned_rps,
            "rate_per_replica_rps": pd.rate_per_replica_rps,
            "bands": _pool_bands(pd),
            "holds": pd.check.holds if pd.check is not None else None,
        }
        for pd in plan.pools
    ]
    candidates = [
        {
            "split_threshold": None if ev.traffic_class.option == "none" else int(ev.traffic_class.option),
            "class": ev.traffic_class.name,
            "gpu": ev.config.gpu.id,
            "tp": ev.config.tp,
            "weight_dtype": ev.config.weight_dtype,
            "kv_dtype": ev.config.kv_dtype,
            "max_model_len": ev.traffic_class.max_model_len,
            "price_per_gpu_hour": ev.config.price_usd_per_hour,
            "capacity_rps": ev.capacity_rps,
            "model_capacity_rps": ev.capacity.max_rps if ev.capacity else 0.0,
            "binding": ev.capacity.binding if ev.capacity else None,
            "problem": ev.problem or None,
            "class_rate_rps": ev.traffic_class.rate_rps,
        }
        for ev in plan.evaluations
    ]
    return {
        "scenario": plan.scenario.name,
        "plan": pools,
        "cost_per_hour": plan.cost_per_hour,
        "cost_per_month": plan.cost_per_month,
        "cost_per_million_tokens": plan.cost_per_million,
        "split_threshold": sol.threshold,
        "gpus": sol.gpus,
        "peak_rps": plan.peak_rps,
        "headroom": plan.scenario.traffic.headroom,
        "solver_status": sol.status,
        "solver": sol.solver,
        "certified": plan.certification.certified if plan.certification else None,
        "certification_rounds": plan.certification.rounds if plan.certification else None,
        "certification_changes": list(plan.certification.changes) if plan.certification else [],
        "given_fleet": plan.given_fleet,
        "candidates": candidates,
    }
