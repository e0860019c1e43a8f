"""`planner solve`: the main job — scenario in, cheapest fleet and its report out."""

from __future__ import annotations

from pathlib import Path

import click

from planner.cli.options import catalog_option, echo_json, json_option


@click.command()
@click.argument("scenarios", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--out-dir", type=click.Path(file_okay=False), default="reports", show_default=True,
              help="Where reports (Markdown and PNG figures) are written.")
@click.option("--no-report", is_flag=True, help="Solve and print only; write no files.")
@click.option("--write-lp", type=click.Path(dir_okay=False), default=None,
              help="Also write the ILP (the first scenario's) as an .lp file a person can read.")
@click.option("--verify/--no-verify", default=None,
              help="Certify the plan by simulation (every pool replayed against its band targets; pools that miss "
                   "are re-planned) [default: the scenario's `verify`, true unless it says otherwise].")
@catalog_option
@json_option
def solve(scenarios, out_dir, no_report, write_lp, verify, catalog_files, as_json) -> None:
    """Solve SCENARIOS for the cheapest fleet that holds their latency targets; one report each.

    A plan that cannot be certified by simulation exits 3 and writes no report. A scenario
    that states its `fleet` gets that fleet checked and reported instead.

    \b
    Example:
      planner solve scenarios/128k_rollout.yaml
      planner solve scenarios/*.yaml --json
    """
    from planner.errors import InfeasibleError, located
    from planner.report import write_report
    from planner.solve import load_inputs, plan_inputs, plan_json, uncertified_message

    results = []
    for i, path in enumerate(scenarios):
        with located(str(path)):
            inputs = load_inputs(path, catalog_files=catalog_files)
            first_lp = bool(write_lp) and i == 0
            plan = plan_inputs(inputs, keep_lp=first_lp, certify=verify)
            problem = uncertified_message(plan)
            if problem and not plan.given_fleet:
                raise InfeasibleError(problem)
            sections = []
            if not inputs.traffic.profile.is_flat:
                from planner.daily import day_section

                sections.append(day_section(plan, inputs.traffic.profile))
            if inputs.scenario.forecast is not None:
                from planner.forecast import run_forecast
                from planner.forecast_outputs import forecast_markdown

                sections.append(
                    forecast_markdown(inputs.scenario.name, run_forecast(inputs), heading=2)
                    + "\nThe quarter-by-quarter CSV and figure come from `planner forecast` on this scenario.\n"
                )
            if first_lp:
                _write_lp(plan.solution.lp_text, Path(write_lp))
            written = None if no_report else write_report(plan, Path(out_dir), sections=tuple(sections))
            if as_json:
                results.append(plan_json(plan))
            else:
                sol = plan.solution
                pools = ", ".join(f"{p.traffic_class}: {p.replicas} x {p.config}" for p in sol.pools)
                verdict = f" [{problem}]" if problem else ""
                click.echo(
                    f"{plan.scenario.name}: ${plan.cost_per_hour:,.2f}/hour, {sol.gpus} GPUs, "
                    f"{'no split' if sol.threshold is None else f'split at {sol.threshold:,}'} — {pools}{verdict}"
                    + (f" -> {written}" if written else "")
                )
    if as_json:
        echo_json(results if len(results) > 1 else results[0])


def _write_lp(text: str, path: Path) -> None:
    from planner.files import write_text_atomic

    write_text_atomic(path, text)


COMMANDS = [solve]
