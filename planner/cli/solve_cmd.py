"""`planner solve`: the main job — scenario in, cheapest fleet and its report out."""

from __future__ import annotations

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


@click.command()
@click.argument("scenarios", nargs=-1, required=True, type=GivenPath(dir_okay=False))
@click.option("--out-dir", type=GivenPath(file_okay=False), default="reports", show_default=True,
              help="Where reports (Markdown and PNG figures) are written.")
@click.option("--no-report", is_flag=True, help="Solve and print only; write no files.")
@click.option("--write-lp", type=GivenPath(dir_okay=False), default=None,
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
    from planner.worker_pool import worker_processes

    with worker_processes(not no_report):
        _solve_all(scenarios, out_dir, no_report, write_lp, verify, catalog_files, as_json)


def _solve_all(scenarios, out_dir, no_report, write_lp, verify, catalog_files, as_json) -> None:
    from planner.cli.progress_bars import terminal_progress
    from planner.errors import located

    # Every scenario is read and checked before any is planned, and every plan is made before any
    # file is written: a bad or infeasible scenario late in the list leaves no reports behind.
    loaded = [_load(path, catalog_files) for path in scenarios]
    if write_lp:
        _refuse_lp_of_stated_fleet(loaded[0])
    if not no_report:
        _refuse_same_names(loaded)
        if write_lp:
            _refuse_lp_over_report(Path(write_lp), Path(out_dir), loaded)
        _draw_traffic_ahead([inputs for _, kind, inputs in loaded if kind == "scenario"])
    planned = []
    for i, (path, kind, inputs) in enumerate(loaded):
        with located(str(path)), terminal_progress():
            first_lp = bool(write_lp) and i == 0
            planned.append((path, kind, _plan(kind, inputs, first_lp, verify, draw_ahead=not no_report)))
    # Nothing is printed until every file is made: a report refused late (its name is an input's)
    # must not follow a line saying an earlier one was written (files.outputs_together renames them
    # into place together when the command succeeds, or none).
    results = []
    for i, (path, kind, plan) in enumerate(planned):
        with located(str(path)):
            if write_lp and i == 0:
                _write_lp(plan[0].solution.lp_text if kind == "scenario" else plan.joint.lp_text, Path(write_lp))
            results.append(_write_one(plan, no_report, out_dir, as_json) if kind == "scenario"
                           else _write_fleet(plan, no_report, out_dir, as_json))
    # The logs' warnings once the command has succeeded: a failed run says one line, its error.
    _warn_traffic(loaded)
    for path, kind, plan in planned:
        for text in plan[1].warnings if kind == "scenario" else ():
            warn(str(path), text)
    if as_json:
        echo_json(results if len(results) > 1 else results[0])
        return
    for lines in results:
        click.echo("\n".join(lines))


def _warn_traffic(loaded) -> None:
    for path, kind, inputs in loaded:
        warn_traffic([(s.where, s.inputs) for s in inputs.services] if kind == "fleet" else [(str(path), inputs)])


def _load(path, catalog_files):
    """(path, 'fleet' or 'scenario', what it loads to), with errors naming the file."""
    from planner.errors import located
    from planner.fleet import is_fleet_file, load_fleet
    from planner.inputs import load_inputs

    with located(str(path)):
        if is_fleet_file(path):
            return path, "fleet", load_fleet(path, catalog_files=catalog_files)
        return path, "scenario", load_inputs(path, catalog_files=catalog_files)


def _draw_traffic_ahead(scenarios) -> None:
    """Start each scenario's traffic figure (the requests its context limit serves) now, in the
    worker that is otherwise idle until the report: the planner computes nothing it depends on.
    A scenario whose traffic cannot be served gets its error from planning, as before. (A fleet's
    are started later, by _fleet_figures_ahead: its worker shares its services' setups first.)"""
    from planner.errors import PlannerError
    from planner.plan_setup import served_traffic
    from planner.report import start_traffic_figure

    for inputs in scenarios:
        scn, t = inputs.scenario, inputs.traffic
        if scn.fleet:  # a stated fleet's pools set the limit: the report draws it
            continue
        try:
            limit, served, _ = served_traffic(scn, inputs.model, t.hist, t.peak_rps, scn.context_limit)
        except PlannerError:
            continue
        start_traffic_figure(served, limit, scn.thresholds)


def _refuse_same_names(loaded) -> None:
    """Two inputs whose reports write a file of one name would write one over the other: two
    scenarios of one name, or a scenario named m_a beside fleet m's service a (whose figures are
    m_a_*.png). Names are compared without case, as a case-insensitive file system (macOS,
    Windows) would."""
    from planner.errors import InputError

    first: dict[str, str] = {}  # a file's name, without case -> whose report writes it
    given: set[Path] = set()
    for path, kind, inputs in loaded:
        if Path(path).resolve() in given:
            raise InputError("is given twice on the command line; its report would be written twice", where=str(path))
        given.add(Path(path).resolve())
        for file, who in _report_files(kind, inputs):
            whose = f"{who}of {path}" if who else str(path)
            other = first.setdefault(file.casefold(), whose)
            if other != whose:
                raise InputError(f"{who}writes {file}, as {other} does; one report's files would overwrite the "
                                 "other's: rename one", where=str(path))


def _report_files(kind: str, inputs) -> list[tuple[str, str]]:
    """The names of the files a scenario's or a fleet's report may write in the output folder (a
    TTFT figure only where a band states a TTFT target), each with whose they are ('' for the
    report's own, "service 'x' " for a fleet service's figures)."""
    from planner.report import FIGURE_SUFFIXES, figure_kinds

    suffixes = [FIGURE_SUFFIXES[k] for k in figure_kinds(kind == "scenario" and bool(inputs.scenario.fleet))]
    if kind == "scenario":
        name = inputs.scenario.name
        stems = [(name, "")]
    else:
        name = inputs.spec.name
        stems = [(f"{name}_{svc.inputs.scenario.name}", f"service '{svc.inputs.scenario.name}' ")
                 for svc in inputs.services]
    return [(f"{name}.md", ""), *((stem + suffix, who) for stem, who in stems for suffix in suffixes)]


def _refuse_lp_of_stated_fleet(first) -> None:
    """--write-lp writes the first scenario's ILP: one that states its fleet is audited as it stands
    and solves none of its own (the file was written empty, without a word)."""
    from planner.errors import InputError

    path, kind, inputs = first
    if kind == "scenario" and inputs.scenario.fleet:
        raise InputError("states its fleet (fleet:), which is audited as it stands, not solved: there is no ILP for "
                         "--write-lp to write", where=str(path))


def _refuse_lp_over_report(lp: Path, out_dir: Path, loaded) -> None:
    """--write-lp naming a file the reports write: the last write would win (files.outputs_together
    renames every output into place together), and the LP or a report would be lost without a word.
    Names are compared without case, as _refuse_same_names does."""
    from planner.errors import InputError

    target = lp.resolve()  # a symbolic link is written through (files.atomic_output): compare where it lands
    if target.parent != out_dir.resolve():
        return
    for path, kind, inputs in loaded:
        for file, _ in _report_files(kind, inputs):
            if file.casefold() == target.name.casefold():
                raise InputError(f"is also {file}, a file the report of {path} writes; write the LP to another "
                                 "file", where=f"--write-lp {lp}")


def _fleet_figures_ahead():
    """make_fleet_plan's hooks that start the fleet report's figures in the worker while the plan
    is made, with the arguments the report gives them (planner.worker_pool shares each answer with
    the report's own request): every service's traffic figure once the services are set up (the
    worker then shares their evaluations, and draws while the joint ILP runs here), and a service's
    other figures once what they show is known (drawn while this process plans on)."""
    from planner.report import start_figures, start_traffic_figure

    def set_up(setups) -> None:
        for st in setups:
            start_traffic_figure(st.served, st.limit, st.scn.thresholds)

    return {"on_set_up": set_up, "figures_ready": start_figures}


def _plan(kind, inputs, keep_lp, verify, *, draw_ahead=False):
    """The scenario's plan with its report sections and the line saying why it is not certified,
    or the fleet's plan; InfeasibleError when a plan cannot be certified. draw_ahead: the report's
    figures are started while the plan is made, as soon as what each shows is known (a scenario's
    as its explorations are solved; a fleet's by _fleet_figures_ahead): the worker draws
    them while this process plans on, and the report finds them started."""
    from planner.errors import InfeasibleError
    from planner.inputs import plan_inputs, report_sections
    from planner.plan_json import uncertified_message, unsimulated_fleet_message

    if kind == "fleet":
        from planner.fleet_plan import make_fleet_plan

        fleet_plan = make_fleet_plan(inputs, certify=verify, keep_lp=keep_lp,
                                     **(_fleet_figures_ahead() if draw_ahead else {}))
        problems = [f"service '{p.scenario.name}': {m}" for p in fleet_plan.plans if (m := uncertified_message(p))]
        if problems:
            raise InfeasibleError("; ".join(problems))
        return fleet_plan
    from planner.report import start_figures

    plan = plan_inputs(inputs, keep_lp=keep_lp, certify=verify, figures_ready=start_figures if draw_ahead else None)
    problem = uncertified_message(plan)
    if problem and not plan.given_fleet:
        raise InfeasibleError(problem)
    return plan, report_sections(plan, inputs, certify=verify), problem or unsimulated_fleet_message(plan)


def _write_one(planned, no_report, out_dir, as_json):
    from planner.plan_json import plan_json
    from planner.report import write_report
    from planner.units import gpus_text, usd_text

    plan, sections, problem = planned
    written = None if no_report else write_report(plan, Path(out_dir), sections=sections.texts)
    if as_json:
        return plan_json(plan)
    sol = plan.solution
    pools = ", ".join(f"{p.traffic_class}: {p.replicas:,} x {p.config}" for p in sol.pools)
    verdict = f" [{problem}]" if problem else ""
    # a plan not replayed reads as a certified one in this line otherwise (an outside probe: a TPOT target
    # "held (model)" on 5 GPUs missed by 16% replayed; certified, the plan took 6)
    if plan.certification is None:
        verdict += (" [audited by the model alone: not simulated]" if plan.given_fleet
                    else " [by the model alone: not certified by simulation]")
    return [f"{plan.scenario.name}: {usd_text(plan.cost_per_hour)}/hour, {gpus_text(sol.gpus)}, "
            f"{sol.split_text} — {pools}{_rejected(plan)}{verdict}"
            + (f" -> {written}" if written else "")]


def _rejected(plan) -> str:
    """The requests the plan turns away, in the line a batch user reads: a context limit under most
    of a log's prompts was said in the report alone (97% rejected, exit 0)."""
    from planner.units import share_text

    if not plan.rejected_requests:
        return ""
    return (f"; rejects the {plan.rejected_requests:,} of the histogram's {plan.hist.requests:,} requests "
            f"({share_text(plan.rejected_share)}) longer than the {plan.context_limit:,}-token limit")


def _write_fleet(fleet_plan, no_report, out_dir, as_json):
    from planner.fleet_report import (
        fleet_json,
        gpus_in_use_text,
        idle_committed_text,
        write_fleet_report,
    )
    from planner.units import gpus_text, usd_text

    written = None if no_report else write_fleet_report(fleet_plan, Path(out_dir))
    if as_json:
        return fleet_json(fleet_plan)
    # the cost includes committed GPUs left idle: the line names them, as the report does
    status = fleet_plan.joint.status
    lines = [f"{fleet_plan.fleet.spec.name}: {usd_text(fleet_plan.cost_per_hour)}/hour, {gpus_in_use_text(fleet_plan)}, "
             f"{len(fleet_plan.plans)} service{'' if len(fleet_plan.plans) == 1 else 's'}{idle_committed_text(fleet_plan)}"
             + ("" if status == "Optimal" else f" ({status}: raise solver.time_limit_s)")
             + (f" -> {written}" if written else "")]
    for plan in fleet_plan.plans:
        sol = plan.solution
        pools = ", ".join(f"{p.traffic_class}: {p.replicas:,} x {p.config}" for p in sol.pools)
        lines.append(f"  {plan.scenario.name}: {gpus_text(sol.gpus)}, "
                     f"{sol.split_text} — {pools}{_rejected(plan)}"
                     + (" [by the model alone: not certified by simulation]" if plan.certification is None else ""))
    return lines


def _write_lp(text: str, path: Path) -> None:
    from planner.files import write_text_atomic

    write_text_atomic(path, text)


COMMANDS = [solve]
