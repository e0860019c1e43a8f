"""`planner forecast`: quarters, fleet, cost per token — Markdown, tidy CSV tables with their data dictionary, a figure."""

from __future__ import annotations

import math
from pathlib import Path

import click

from planner.cli.options import (
    GivenPath,
    catalog_option,
    echo_json,
    json_option,
    warn,
    warn_traffic,
)
from planner.units import usd_per_million_text, usd_text


def _idle_text(r) -> str:
    idle = r.idle
    gpus = ", ".join(f"{n:,} {g}" for g, n in idle.gpus.items())
    text = f"  {r.quarter}: {gpus} reserved GPU(s) idle, {usd_text(idle.usd_per_hour)}/hour paid while idle; "
    if idle.use_them_usd_per_hour is None:
        return text + idle.use_them_summary
    return text + f"the cheapest plan that runs them all: {usd_text(idle.use_them_usd_per_hour)}/hour ({idle.use_them_summary})"


@click.command()
@click.argument("scenario", type=GivenPath(dir_okay=False))
@click.option("--out-dir", type=GivenPath(file_okay=False), default="reports", show_default=True,
              help="Where the forecast's Markdown, CSV tables, data package and figure are written.")
@click.option("--no-report", is_flag=True, help="Print only; write no files.")
@click.option("--verify/--no-verify", default=None,
              help="Certify each quarter's plan by simulation, as `planner solve` does [default: the scenario's "
                   "`verify`; a fleet's services'].")
@catalog_option
@json_option
def forecast(scenario, out_dir, no_report, verify, catalog_files, as_json) -> None:
    """Per-quarter fleet and cost-per-token forecast of SCENARIO's forecast section.

    Writes <name>_forecast.md, <name>_forecast_quarters.csv (one row per quarter),
    <name>_forecast_pools.csv (one row per pool per quarter, plus idle reserved GPUs),
    <name>_forecast_total.csv (the quarters summed), <name>_forecast_datapackage.json
    (what every column means) and a figure.

    SCENARIO may be a fleet file (with `services:`): every quarter is then one ILP over the whole
    fleet, commitments shared; the tables are <name>_forecast_quarters.csv, _services.csv (one row
    per service per quarter, its tokens and cost per token at its day's volume among them),
    _types.csv (one row per GPU type per quarter), _limits.csv (one row per shared limit per
    quarter, with what relaxing it saves) and _total.csv (the quarters summed), with their data
    dictionary, and no figure.

    \b
    Example:
      planner forecast scenarios/finance_2027.yaml
      planner forecast scenarios/fleet_2027q1.yaml
    """
    from planner.commitments import above_on_demand_text
    from planner.errors import located
    from planner.fleet import is_fleet_file
    from planner.forecast import run_forecast
    from planner.forecast_outputs import forecast_json, write_forecast
    from planner.inputs import load_inputs
    from planner.worker_pool import worker_processes

    with located(scenario), worker_processes(not no_report):
        if is_fleet_file(scenario):
            _fleet_forecast(scenario, out_dir, no_report, verify, catalog_files, as_json)
            return
        inputs = load_inputs(scenario, catalog_files=catalog_files)
        results = run_forecast(inputs, certify=verify)
        written = None if no_report else write_forecast(inputs.scenario.name, results, Path(out_dir))
    warn_traffic([(str(scenario), inputs)])  # once it has succeeded: a failed run says one line, its error
    for text in inputs.scenario.forecast.growth_warnings():
        warn(str(scenario), text)
    warn(str(scenario), above_on_demand_text(results))
    lines = [_quarter_text(r) for r in results] + [_idle_text(r) for r in results if r.idle is not None]
    _show(as_json, lambda: forecast_json(results), lines, written)


def _quarter_text(r) -> str:
    from planner.units import gpus_text

    mix = r.day.policy("mixed")
    blended = r.cost_per_million["blended"]
    per_token = (f"{usd_per_million_text(blended)} per million tokens at peak" if math.isfinite(blended)
                 else "no cost per token (the stated fleet cannot carry the peak)")
    return (f"{r.quarter}: {gpus_text(r.gpus)}, {usd_text(r.cost_per_hour)}/hour, "
            f"{per_token}; the day's curve: "
            f"{usd_text(r.day.policy('peak_on_demand').usd_per_day)}/day peak-sized on demand, "
            f"{usd_text(r.day.policy('autoscaled').usd_per_day)} autoscaled, {usd_text(mix.usd_per_day)} reserved + on demand"
            + _model_alone([r.plan]))


def _model_alone(plans) -> str:
    """The mark of a quarter planned without certification: with --no-report its line is all a user
    reads, and it read as a certified quarter's (the report and --json say so: model_only_lines)."""
    if not any(p.certification is None for p in plans):
        return ""
    return (" [audited by the model alone: not simulated]" if all(p.given_fleet for p in plans)
            else " [by the model alone: not certified by simulation]")


def _show(as_json: bool, data, lines: list[str], written) -> None:
    """The forecast as JSON (data() builds it), or its lines and the files written."""
    if as_json:
        echo_json(data())
        return
    for line in lines:
        click.echo(line)
    if written:
        click.echo("-> " + ", ".join(str(p) for p in written))


def _fleet_forecast(path, out_dir, no_report, verify, catalog_files, as_json) -> None:
    from planner.commitments import above_on_demand_text
    from planner.fleet import load_fleet
    from planner.fleet_forecast import fleet_forecast_json, run_fleet_forecast, write_fleet_forecast

    fleet = load_fleet(path, catalog_files=catalog_files)
    results = run_fleet_forecast(fleet, certify=verify)
    written = None if no_report else write_fleet_forecast(fleet, results, Path(out_dir))
    warn_traffic([(s.where, s.inputs) for s in fleet.services])  # once it has succeeded
    for text in fleet.spec.forecast.growth_warnings():
        warn(str(path), text)
    warn(str(path), above_on_demand_text(results))
    _show(as_json, lambda: fleet_forecast_json(results), [_fleet_quarter_text(r) for r in results], written)


def _fleet_quarter_text(r) -> str:
    from planner.fleet_report import gpus_in_use_text, idle_committed_text

    return (f"{r.quarter}: {gpus_in_use_text(r.plan)}, {usd_text(r.cost_per_hour)}/hour{idle_committed_text(r.plan)}"
            + _model_alone(r.plan.plans))


COMMANDS = [forecast]
