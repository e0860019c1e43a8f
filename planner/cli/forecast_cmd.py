"""`planner forecast`: quarters, fleet, cost per token — Markdown, tidy CSV tables with their data dictionary, a figure."""

from __future__ import annotations

from pathlib import Path

import click

from planner.cli.options import catalog_option, echo_json, json_option


def write_forecast(name: str, results, out_dir: Path) -> list[Path]:
    """Every output is made before the first is written, so a failure leaves none half-made."""
    from planner.figures import forecast_figure
    from planner.files import output_folder, write_text_atomic
    from planner.forecast_outputs import (
        datapackage_json,
        forecast_markdown,
        forecast_tables,
        table_file,
    )

    output_folder(out_dir)
    figure = f"{name}_forecast.png"
    texts = {f"{name}_forecast.md": forecast_markdown(name, results, figure=figure)}
    texts.update({table_file(name, t): text for t, text in forecast_tables(results).items()})
    texts[f"{name}_forecast_datapackage.json"] = datapackage_json(name)
    forecast_figure(
        [r.quarter for r in results],
        {"plan, at peak": [r.cost_per_million["blended"] for r in results],
         "plan, day's volume": [(r.cost_per_million_at_volume or {}).get("blended") for r in results],
         "autoscaled, day's volume": [r.day.usd_per_million_tokens("autoscaled") for r in results],
         "reserved + on demand, day's volume": [r.day.usd_per_million_tokens("mixed") for r in results]},
        [r.gpus for r in results], out_dir / figure, title=f"{name}: cost per token and fleet",
    )
    for file, text in texts.items():
        write_text_atomic(out_dir / file, text)
    return [out_dir / file for file in texts]


def _idle_text(r) -> str:
    idle = r.idle
    gpus = ", ".join(f"{n} {g}" for g, n in idle.gpus.items())
    text = f"  {r.quarter}: {gpus} reserved GPU(s) idle, ${idle.usd_per_hour:,.2f}/hour paid while idle; "
    if idle.use_them_usd_per_hour is None:
        return text + idle.use_them_summary
    return text + f"the cheapest plan that runs them all: ${idle.use_them_usd_per_hour:,.2f}/hour ({idle.use_them_summary})"


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--out-dir", type=click.Path(file_okay=False), default="reports", show_default=True)
@click.option("--no-report", is_flag=True, help="Print only; write no files.")
@catalog_option
@json_option
def forecast(scenario, out_dir, no_report, catalog_files, as_json) -> None:
    """Per-quarter fleet and cost-per-token forecast of SCENARIO's forecast section.

    Writes <name>_forecast.md, <name>_forecast_quarters.csv (one row per quarter),
    <name>_forecast_pools.csv (one row per pool per quarter, plus idle reserved GPUs),
    <name>_forecast_total.csv (the quarters summed), <name>_forecast_datapackage.json
    (what every column means) and a figure.

    SCENARIO may be a fleet file (with `services:`): every quarter is then one ILP over the whole
    fleet, commitments shared; the tables are <name>_forecast_quarters.csv, _services.csv (one row
    per service per quarter) and _types.csv (one row per GPU type per quarter), with their data
    dictionary.

    \b
    Example:
      planner forecast scenarios/finance_2027.yaml
      planner forecast scenarios/fleet_2027q1.yaml
    """
    from planner.errors import located
    from planner.fleet import is_fleet_file

    with located(scenario):
        fleet = is_fleet_file(scenario)
    if fleet:
        with located(scenario):
            _fleet_forecast(scenario, out_dir, no_report, catalog_files, as_json)
        return
    from planner.forecast import run_forecast
    from planner.forecast_outputs import forecast_json
    from planner.inputs import load_inputs

    with located(scenario):
        inputs = load_inputs(scenario, catalog_files=catalog_files)
        results = run_forecast(inputs)
        written = None if no_report else write_forecast(inputs.scenario.name, results, Path(out_dir))
    if as_json:
        echo_json(forecast_json(results))
        return
    for r in results:
        mix = r.day.policy("mixed")
        click.echo(
            f"{r.quarter}: {r.gpus} GPUs, ${r.cost_per_hour:,.2f}/hour, "
            f"${r.cost_per_million['blended']:,.4f} per million tokens at peak; the day's curve: "
            f"${r.day.policy('peak_on_demand').usd_per_day:,.2f}/day peak-sized on demand, "
            f"${r.day.policy('autoscaled').usd_per_day:,.2f} autoscaled, ${mix.usd_per_day:,.2f} reserved + on demand"
        )
    for r in results:
        if r.idle is not None:
            click.echo(_idle_text(r))
    if written:
        click.echo("-> " + ", ".join(str(p) for p in written))


def _fleet_forecast(path, out_dir, no_report, catalog_files, as_json) -> None:
    from planner.fleet import load_fleet
    from planner.fleet_forecast import fleet_forecast_json, run_fleet_forecast, write_fleet_forecast

    fleet = load_fleet(path, catalog_files=catalog_files)
    results = run_fleet_forecast(fleet)
    written = None if no_report else write_fleet_forecast(fleet.spec.name, results, Path(out_dir))
    if as_json:
        echo_json(fleet_forecast_json(results))
        return
    for r in results:
        types = ", ".join(f"{t.used} {t.gpu}" for t in r.plan.types if t.used)
        idle = ", ".join(f"{t.idle_committed} {t.gpu}" for t in r.plan.types if t.idle_committed)
        click.echo(f"{r.quarter}: {r.plan.gpus} GPUs ({types}), ${r.cost_per_hour:,.2f}/hour"
                   + (f"; committed idle: {idle}" if idle else ""))
    if written:
        click.echo("-> " + ", ".join(str(p) for p in written))


COMMANDS = [forecast]
