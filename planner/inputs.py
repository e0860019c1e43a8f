"""A scenario file's inputs (scenario, catalog, model, traffic) and the plan made from them;
the sections its report adds after the pools."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from planner.catalog import Catalog, Model, load_catalog
from planner.errors import InputError
from planner.evaluator import Measurements
from planner.files import path_is
from planner.memory import overhead_refusal
from planner.plan_objects import Plan, default_context_limit, default_limit_text
from planner.planning import make_plan
from planner.scenario import Forecast, Scenario, load_scenario, resolve
from planner.traffic import Traffic
from planner.yamlio import validate


def scenario_catalog(scn: Scenario, path: Path, extra_files: tuple[str, ...] = ()) -> Catalog:
    catalog = load_catalog(*extra_files)
    if scn.catalog:
        catalog = catalog.with_overrides(scn.catalog, where=f"{path}: catalog")
    checks = [(f"gpus[{i}]", catalog.gpu, c.id) for i, c in enumerate(scn.gpu_candidates)]
    # each among the dtypes its role allows (kv_dtypes: [nvfp4] suggested 'fp4', which is no KV-cache dtype)
    checks += [(f"weight_dtypes[{i}]", lambda d: catalog.dtype_for(d, "weight"), d) for i, d in enumerate(scn.weight_dtypes)]
    checks += [(f"kv_dtypes[{i}]", lambda d: catalog.dtype_for(d, "kv"), d) for i, d in enumerate(scn.kv_dtypes)]
    checks.append(("engine", catalog.engine, scn.engine))
    for field_path, lookup, name in checks:
        try:
            lookup(name)  # unknown name → InputError naming the closest match
        except InputError as exc:
            raise InputError(f"{field_path}: {exc}", where=str(path)) from None
    engine = catalog.engine(scn.engine)
    for i, candidate in enumerate(scn.gpu_candidates):  # a plan on a GPU its engine does not run on cannot be deployed
        if problem := engine.runs_on_problem(catalog.gpu(candidate.id)):
            raise InputError(f"engine: {problem} (gpus[{i}])", where=str(path))
    refusal = overhead_refusal(engine) if "overhead_gib" in scn.model_fields_set else None
    if refusal:  # it was ignored without a word
        raise InputError(f"overhead_gib: {refusal}", where=str(path))
    if scn.long_prefill_token_threshold is not None and engine.long_prefill_token_threshold is None:
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
        config = resolve(base, spec["config_json"])
        if not path_is(config, "file"):  # named by the scenario's field: the reader knows only the path
            raise InputError(f"model.config_json: '{spec['config_json']}' is no file (paths are relative to the "
                             "scenario's folder)", where=where)
        try:
            return model_from_hf_config(
                config, name=str(extra.get("name", "custom-model")),
                params_total=extra.get("params_total"), params_active=extra.get("params_active"),
                hf_id=extra.get("hf_id"),
            )
        except InputError as exc:  # named by the scenario's field; the reader names only the file
            hint = (" (a scenario's config_json takes no layer kinds: import the model with `planner catalog "
                    "import-hf` and give its entry in a catalog file)") if "--layer-kinds" in exc.message else ""
            raise InputError(f"model.config_json ({spec['config_json']}): {exc.message}{hint}", where=where) from None
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
                    where: str | None = None, day_priced: bool = False) -> Inputs:
    """A validated scenario's catalog, model and traffic; `base` is the folder its relative paths start
    from and `where` names it in messages [default: path] (a fleet's inline service: 'fleet.yaml: services[2]');
    day_priced: as for load_traffic."""
    from planner.traffic import load_traffic

    where = where or str(path)
    catalog = scenario_catalog(scn, Path(where), catalog_files)
    model = scenario_model(scn, catalog, base, where)
    conflict = limit_conflict(scn, model)
    if conflict:
        raise InputError(conflict, where=where)
    try:
        traffic = load_traffic(scn, base, day_priced=day_priced)
    except InputError as exc:
        if exc.where is not None:  # a log's own problem, named by its file, and by the scenario's field: with
            # `solve scenarios/*.yaml` the log alone did not say which scenario failed
            field = "histogram" if scn.traffic.source.histogram is not None else "log"
            raise InputError(f"traffic.source.{field}: {exc.where}: {exc.message}", where=where) from None
        raise InputError(f"traffic: {exc}", where=where) from None
    return Inputs(path, scn, catalog, model, traffic)


def limit_conflict(scn: Scenario, model: Model) -> str:
    """A setting that means something only below the context limit (the stated one, or the model's
    default_context_limit; for split thresholds, the highest a forecast quarter sets), stated at
    or above it; '' when there is none. Each was obeyed or
    dropped without a word: a lower-limit lever at or above the limit left its row out of the
    report, a split threshold past it was never analysed, and a running pool with a longer limit
    than the scenario's had its whole plan made at the pool's limit."""
    limit = scn.context_limit or default_context_limit(model)
    limit_text = (f"context_limit {limit}" if scn.context_limit else
                  f"the context limit {limit} ({default_limit_text(model)})")
    if scn.lower_context_limit is not None and scn.lower_context_limit >= limit:
        return (f"lower_context_limit {scn.lower_context_limit} must be below {limit_text}: it is the lower "
                "limit whose plan the report prices as a lever")
    # a forecast quarter may raise the limit, and a threshold below its limit splits its traffic
    quarters = [q.context_limit for q in (scn.forecast.quarters if scn.forecast else ()) if q.context_limit]
    highest = max([limit, *quarters])
    where = limit_text if highest == limit else f"the highest context limit of any forecast quarter ({highest})"
    past = [t for t in scn.split_thresholds or () if t >= highest]
    if past:
        return (f"split_thresholds: {', '.join(map(str, past))} {'is' if len(past) == 1 else 'are'} at or above "
                f"{where}; a split threshold must lie below the limit (requests longer than it are rejected)")
    for i, band in enumerate(scn.slo.bands):
        if band.prompt_below is not None and band.prompt_below >= highest:
            return (f"slo.bands[{i}].prompt_below {band.prompt_below} is at or above {where}: no request with so long "
                    "a prompt is served, so the bands after it would hold none; a band's cut must lie below the limit")
    for i, pool in enumerate(scn.fleet or ()):
        if pool.context_limit is not None and pool.context_limit > limit:
            return (f"fleet[{i}].context_limit {pool.context_limit} is above {limit_text}: the scenario rejects "
                    "longer requests; lower the pool's limit or raise the scenario's")
    return ""


def plan_inputs(
    inputs: Inputs, scn: Scenario | None = None, *, explore: bool = True, reserved=None, keep_lp: bool = False,
    certify: bool | None = None, use_reserved: bool = False, figures_ready: Callable[[Plan], None] | None = None,
    measurements: Measurements | None = None,
) -> Plan:
    """keep_lp: the plan's solution keeps the ILP's text (`plan.solution.lp_text`).
    certify: certify by simulation [default: the scenario's `verify`].
    use_reserved: every reserved GPU must run. figures_ready, measurements: as for make_plan."""
    t = inputs.traffic
    scn = scn or inputs.scenario
    return make_plan(
        scn, inputs.catalog, inputs.model, t.hist, t.peak_rps, explore=explore,
        traffic_notes=t.notes, measured_mean_rps=t.mean_rps, reserved=reserved, keep_lp=keep_lp,
        certify=certify, trace=t.requests_at_growth(scn.traffic.growth) if t.requests is not None else None,
        use_reserved=use_reserved, figures_ready=figures_ready, measurements=measurements,
    )


@dataclass(frozen=True)
class ReportSections:
    """The sections a plan's report adds after its pools, and what the command also says on stderr
    of them (a report names a quarter that pays commitments above on demand; --json or --no-report
    writes none that would)."""

    texts: tuple[str, ...]
    warnings: tuple[str, ...] = ()


def report_sections(plan: Plan, inputs: Inputs, *, forecast: bool = True, certify: bool | None = None,
                    fleet_forecast: Forecast | None = None) -> ReportSections:
    """The sections a plan's report adds after its pools: the day's load curve priced (a profile that
    is not flat, or a stated traffic.mean_rps: finance's mean load, at which a token of a fleet sized
    for the peak costs more than the decision's price at the peak) and, with `forecast`, the
    scenario's forecast, its quarters certified as the plan was (`certify`, as for plan_inputs).
    fleet_forecast: a fleet's service's, its fleet's forecast (the reserved terms of its day)."""
    sections, warnings = [], []
    if not inputs.traffic.profile.is_flat or inputs.scenario.traffic.mean_rps is not None:
        from planner.daily import day_section

        sections.append(day_section(plan, inputs.traffic.profile, fleet_forecast=fleet_forecast))
    if forecast and inputs.scenario.forecast is not None:
        from planner.commitments import above_on_demand_text
        from planner.daily import UncarriedClassError
        from planner.forecast import run_forecast
        from planner.forecast_outputs import forecast_markdown

        try:
            quarters = run_forecast(inputs, certify=certify)
        except UncarriedClassError as exc:  # a stated fleet's audit is reported all the same (exit 0)
            sections.append(f"## Forecast: {inputs.scenario.name}\n\nNot run: {exc.message}.\n")
        else:
            sections.append(forecast_markdown(inputs.scenario.name, quarters, heading=2)
                            + "\nThe quarter-by-quarter CSV and figure come from `planner forecast` on this scenario.\n")
            warnings += inputs.scenario.forecast.growth_warnings()
            warnings += [text for text in [above_on_demand_text(quarters)] if text]
    return ReportSections(tuple(sections), tuple(warnings))


def plan_scenario(path: str | Path, *, catalog_files: tuple[str, ...] = (), explore: bool = True) -> Plan:
    return plan_inputs(load_inputs(path, catalog_files=catalog_files), explore=explore)
