"""`planner forecast`: quarters, fleet, cost per token — Markdown, CSV and a figure."""

from __future__ import annotations

from pathlib import Path

import click

from planner.cli.options import catalog_option, echo_json, json_option


def write_forecast(name: str, results, out_dir: Path) -> tuple[Path, Path]:
    from planner.figures import forecast_figure
    from planner.files import output_folder, write_text_atomic
    from planner.forecast import forecast_csv, forecast_markdown

    output_folder(out_dir)
    figure = f"{name}_forecast.png"
    forecast_figure(
        [r.quarter for r in results], [r.cost_per_million["blended"] for r in results],
        [r.cost_per_million_at_mean["blended"] if r.cost_per_million_at_mean else None for r in results],
        [r.gpus for r in results], out_dir / figure, title=f"{name}: cost per token and fleet",
    )
    md, csv_path = out_dir / f"{name}_forecast.md", out_dir / f"{name}_forecast.csv"
    for path, text in ((md, forecast_markdown(name, results, figure=figure)), (csv_path, forecast_csv(results))):
        write_text_atomic(path, text)
    return md, csv_path


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--out-dir", type=click.Path(file_okay=False), default="reports", show_default=True)
@click.option("--no-report", is_flag=True, help="Print only; write no files.")
@catalog_option
@json_option
def forecast(scenario, out_dir, no_report, catalog_files, as_json) -> None:
    """Per-quarter fleet and cost-per-token forecast of SCENARIO's forecast section.

    Writes <name>_forecast.md, <name>_forecast.csv (one row per quarter and pool) and a figure.

    \b
    Example:
      planner forecast scenarios/finance_2027.yaml
    """
    from planner.errors import located
    from planner.forecast import forecast_json, run_forecast
    from planner.solve import load_inputs

    with located(scenario):
        inputs = load_inputs(scenario, catalog_files=catalog_files)
        results = run_forecast(inputs)
        written = None if no_report else write_forecast(inputs.scenario.name, results, Path(out_dir))
    if as_json:
        echo_json(forecast_json(results))
        return
    for r in results:
        click.echo(
            f"{r.quarter}: {r.gpus} GPUs, ${r.cost_per_hour:,.2f}/hour, "
            f"${r.cost_per_million['blended']:,.4f} per million tokens at peak"
        )
    if written:
        click.echo(f"-> {written[0]}, {written[1]}")


COMMANDS = [forecast]
