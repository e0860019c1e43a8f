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
    that states its `fleet` gets that fleet checked and reported instead. A fleet file (one with
    `services:`) plans all its services in one ILP over the GPUs they share: one report, a section
    per service.

    \b
    Example:
      planner solve scenarios/128k_rollout.yaml
      planner solve scenarios/fleet_2027q1.yaml --json
    """
    from planner.fleet import is_fleet_file

    results = []
    for i, path in enumerate(scenarios):
        first_lp = bool(write_lp) and i == 0
        if is_fleet_file(path):
            results.append(_solve_fleet(path, catalog_files, first_lp, write_lp, verify, no_report, out_dir, as_json))
        else:
            results.append(_solve_one(path, catalog_files, first_lp, write_lp, verify, no_report, out_dir, as_json))
    if as_json:
        echo_json(results if len(results) > 1 else results[0])


def _solve_one(path, catalog_files, first_lp, write_lp, verify, no_report, out_dir, as_json):
    from planner.errors import InfeasibleError
    from planner.report import write_report
    from planner.solve import (
        load_inputs,
        plan_inputs,
        plan_json,
        report_sections,
        uncertified_message,
    )

    inputs = load_inputs(path, catalog_files=catalog_files)
    plan = plan_inputs(inputs, keep_lp=first_lp, certify=verify)
    problem = uncertified_message(plan)
    if problem and not plan.given_fleet:
        raise InfeasibleError(problem, where=str(path))
    sections = report_sections(plan, inputs)
    if first_lp:
        _write_lp(plan.solution.lp_text, Path(write_lp))
    written = None if no_report else write_report(plan, Path(out_dir), sections=sections)
    if as_json:
        return plan_json(plan)
    sol = plan.solution
    pools = ", ".join(f"{p.traffic_class}: {p.replicas} x {p.config}" for p in sol.pools)
    verdict = f" [{problem}]" if problem else ""
    click.echo(
        f"{plan.scenario.name}: ${plan.cost_per_hour:,.2f}/hour, {sol.gpus} GPUs, "
        f"{'no split' if sol.threshold is None else f'split at {sol.threshold:,}'} — {pools}{verdict}"
        + (f" -> {written}" if written else "")
    )
    return None


def _solve_fleet(path, catalog_files, first_lp, write_lp, verify, no_report, out_dir, as_json):
    from planner.errors import InfeasibleError
    from planner.fleet import load_fleet
    from planner.fleet_plan import make_fleet_plan
    from planner.fleet_report import fleet_json, write_fleet_report
    from planner.solve import uncertified_message

    fleet = load_fleet(path, catalog_files=catalog_files)
    fp = make_fleet_plan(fleet, certify=verify, keep_lp=first_lp)
    problems = [f"service '{p.scenario.name}': {m}" for p in fp.plans if (m := uncertified_message(p))]
    if problems:
        raise InfeasibleError("; ".join(problems), where=str(path))
    if first_lp:
        _write_lp(fp.joint.lp_text, Path(write_lp))
    written = None if no_report else write_fleet_report(fp, Path(out_dir))
    if as_json:
        return fleet_json(fp)
    types = ", ".join(f"{n} {g}" for g, n in fp.joint.gpus_by_type.items())
    click.echo(f"{fleet.spec.name}: ${fp.cost_per_hour:,.2f}/hour, {fp.gpus} GPUs ({types}), "
               f"{len(fp.plans)} services" + (f" -> {written}" if written else ""))
    for plan in fp.plans:
        sol = plan.solution
        pools = ", ".join(f"{p.traffic_class}: {p.replicas} x {p.config}" for p in sol.pools)
        click.echo(f"  {plan.scenario.name}: {sol.gpus} GPUs, "
                   f"{'no split' if sol.threshold is None else f'split at {sol.threshold:,}'} — {pools}")
    return None


def _write_lp(text: str, path: Path) -> None:
    from planner.errors import InputError
    from planner.files import write_text_atomic

    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise InputError(f"cannot write the LP file ({exc.strerror or exc})", where=str(path)) from None


COMMANDS = [solve]
