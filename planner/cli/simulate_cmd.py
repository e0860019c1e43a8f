"""`planner simulate`: replay a plan's pools (or the scenario's own fleet) through the simulator."""

from __future__ import annotations

import click

from planner.bounds import MAX_SEED, MAX_SIMULATED_REQUESTS, MIN_RUN_REQUESTS
from planner.cli.options import GivenPath, catalog_option, echo_json, json_option

_STATS = ("p50", "p90", "p99")


@click.command()
@click.argument("scenario", type=GivenPath(dir_okay=False))
@click.option("--pool", default=None,
              help="Only the pool of this name, as the plan names its pools: 'all' without a split, 'short' and "
              "'long' with one (a name it lacks is refused with the names it has).")
@click.option("--requests", "n_requests", type=click.IntRange(MIN_RUN_REQUESTS, MAX_SIMULATED_REQUESTS), default=None,
              help="Sampled requests per pool, to replay the plan again [default: the certification's runs].")
@click.option("--seed", type=click.IntRange(0, MAX_SEED), default=None,
              help="Seed of that replay [default: the certification's].")
@click.option("--verify/--no-verify", default=None,
              help="Replay the plan `planner solve` certifies (--verify), or the model's plan uncertified, as "
                   "`planner solve --no-verify` reports it [default: the scenario's `verify`, true unless it says "
                   "otherwise].")
@catalog_option
@json_option
def simulate(scenario, pool, n_requests, seed, verify, catalog_files, as_json) -> None:
    """Plan SCENARIO (or take the fleet it states), then simulate one replica of each pool at its planned rate.

    Prints each band's targets beside the model's prediction and the simulated TTFT and TPOT
    percentiles, and the verdict (and, for a log with timestamps, the replay of its own arrivals,
    which the verdict counts). The plan is certified first, with the scenario's simulation
    settings, so its pools are the ones `planner solve` reports; without --requests and --seed the
    runs shown are the certification's own, and with either, each pool of that plan is replayed once
    more on the requests and seed asked for (a close call pooled over four seeds from it). With
    --no-verify, or a scenario that says `verify: false`, the plan is replayed as `planner solve`
    then reports it, uncertified, and the command exits 0 whatever the replay reads: a pool that
    misses is said on stderr (a note: line) or, with --json, by its `holds` (the JSON alone).

    \b
    Example:
      planner simulate scenarios/chat_8b_h100.yaml --requests 20000 --seed 1
    """
    from planner.cli.progress_bars import terminal_progress
    from planner.errors import located
    from planner.plan_json import bands_json, log_replay_json, queue_settling_json
    from planner.report_latency import NOT_DEALT_TEXT, replay_text, seeds_text, target_cells
    from planner.units import replicas_text

    with located(scenario), terminal_progress():
        scn, slo, checks, cert, missed = _checks(scenario, pool, n_requests, seed, verify, catalog_files)
    verify = scn.verify if verify is None else verify
    certified = None if cert is None else cert.certified  # None: not verified, the model's plan replayed
    if as_json:
        echo_json({
            "scenario": scn.name,
            "verify": verify,
            "certified": certified,
            "pools": [
                {"pool": c.pool, "config": c.config, "replicas": c.replicas, "rate_per_replica_rps": c.rate_rps,
                 "runs": c.runs, "seeds": c.seeds, "requests_per_run": c.requests,
                 "predicted": c.predicted, "simulated": c.simulated, "bands": _bands(c, slo),
                 "targets": bands_json(c.bands), "holds": c.holds, "problems": list(c.problems),
                 "queue_settling": queue_settling_json(c), "log_replay": log_replay_json(c)}
                for c in checks
            ],
        })
        _exit_uncertified(scenario, scn, certified)
        return
    if certified is None:
        why, solve, instead = (("the scenario says `verify: false`", "planner solve", "`verify: true`") if not scn.verify
                               else ("--no-verify", "planner solve --no-verify", "--verify"))
        click.echo(f"Not certified: {why}, so `{solve}` reports "
                   + ("the fleet it states unaudited; below, its pools replayed at the rates they carry"
                      if scn.fleet else
                      "the model's plan unreplayed; below, that plan's pools replayed at their planned rates (a pool "
                      f"that misses is not re-planned: {instead} would)"))
    elif not certified:  # said first: solve refuses such a plan (exit 3), and the pools below are its last try
        click.echo("Not certified: " + (
            f"the fleet the scenario states misses its targets in simulation, in pool{'s' if len(missed) > 1 else ''} "
            f"{', '.join(missed)} (an audit)"
            if scn.fleet else f"no plan holds its targets in simulation after {cert.rounds} re-plan{'s' if cert.rounds != 1 else ''} "
                 "(`planner solve` exits 3 and writes no report); below, the last re-plan's pools"))
    for c in checks:
        runs = (f"; {c.runs} runs pooled (seeds {seeds_text(c.seeds)}: {c.pooled_because})"
                if c.runs > 1 else "")
        click.echo(f"{c.label} — {c.config}, {replicas_text(c.replicas)} at {c.rate_rps:,.3f} req/s each{runs}: "
                   + ("holds" if c.holds else "misses: " + "; ".join(c.misses)))
        checked = {b.band.name: b for b in c.bands}
        for band in _bands(c, slo):
            ttft = " ".join(f"{s} {band[f'ttft_ms_{s}']:,.0f}" for s in _STATS if band[f"ttft_ms_{s}"] is not None)
            tpot = " ".join(f"{s} {band[f'tpot_ms_{s}']:,.1f}" for s in _STATS if band[f"tpot_ms_{s}"] is not None)
            click.echo(f"  {band['band']:<28} {band['requests']:>7,} requests  TTFT ms {ttft or '—'}  TPOT ms {tpot or '—'}"
                       f"  {'holds' if band['holds'] else 'misses'}")
            b = checked.get(band["band"])
            for target in b.checks if b is not None else ():  # each target beside the model's prediction
                what, predicted, simulated, verdict = target_cells(b, target)
                click.echo(f"    {what}: predicted {predicted}, simulated {simulated}: {verdict.replace('**', '')}")
        if c.queue_settling is not None:
            click.echo(f"  queue: {c.queue_settling.text()}")
        if c.replay is not None:  # certification judges it too (PoolCheck.holds): shown, not only counted
            click.echo(f"  {replay_text(c, scn.traffic.growth)}")
            for b in c.replay.bands:  # each target's verdict, with the report's caveats (few requests, say)
                for target in b.checks:
                    what, _, simulated, verdict = target_cells(b, target)
                    click.echo(f"    {b.band.label()}, {b.requests:,} requests: {what}: simulated {simulated}: "
                               f"{verdict.replace('**', '')}")
        elif any(other.replay is not None for other in checks):
            click.echo(f"  not replayed with {NOT_DEALT_TEXT}")
    if any(not c.holds for c in checks):
        click.echo("note: at least one pool misses its targets in simulation; see above", err=True)
    _exit_uncertified(scenario, scn, certified)


def _exit_uncertified(scenario, scn, certified: bool) -> None:
    """Exit 3, as `planner solve` does, where no plan can be certified, once the runs asked for are
    printed (they are this command's answer; with --pool, --seed or --requests they need not be the
    runs that missed); a fleet the scenario states is audited, not
    planned, and its misses are reported with exit 0, as solve reports them."""
    if certified is False and not scn.fleet:
        click.echo(f"error: {scenario}: not certified: no plan holds its targets in simulation (`planner solve` "
                   "refuses it)", err=True)
        raise click.exceptions.Exit(3)


def _checks(scenario, pool, n_requests, seed, verify, catalog_files):
    """The plan's pool checks: the certification's, or replays with the options' requests and seed. The
    plan is the one `planner solve` reports: certified with the scenario's own settings (a seed given
    here must not re-plan: the point is another look at the plan the report shows), or, where the
    scenario says `verify: false` or `verify` is False (--no-verify), the model's plan, each pool
    replayed at its planned rate (a certified plan shown there had 18 replicas where solve reported 17)."""
    from planner.certification import pool_setting, run_requests
    from planner.inputs import load_inputs, plan_inputs
    from planner.pool_check import check_pool
    from planner.progress import stage

    inputs = load_inputs(scenario, catalog_files=catalog_files)
    scn = inputs.scenario
    plan = plan_inputs(inputs, scn, explore=False, certify=scn.verify if verify is None else verify)
    names = [detail.traffic_class.name for detail in plan.pools]
    if pool is not None and pool not in names:
        raise click.BadParameter(f"'{pool}' is not a pool of this plan (pools: {', '.join(sorted(set(names)))})",
                                 param_hint="--pool")
    slo = scn.slo.to_slo()
    trace = inputs.traffic.requests_at_growth(scn.traffic.growth)
    checks = []
    chosen = [p for p in plan.pools if pool is None or p.traffic_class.name == pool]
    with stage("pools simulated", len(chosen), " pools") as step:
        for detail in chosen:
            c = detail.check
            if c is None or n_requests is not None or seed is not None:
                setting = pool_setting(detail, scn, plan.pools, trace)
                # as long as the certification's runs
                requests = n_requests or run_requests(setting, slo, scn.simulation)
                c = check_pool(setting, slo, requests=requests, seed=scn.simulation.seed if seed is None else seed)
            checks.append(c)
            step.advance()
    # the pools certification found missing, whichever --pool shows
    missed = sorted({f"'{p.traffic_class.name}'" for p in plan.pools if p.check is not None and not p.check.holds})
    return scn, slo, checks, plan.certification, missed


def _bands(c, slo) -> list[dict]:
    """Simulated percentiles per band (TTFT and TPOT in ms), attainment, and whether its targets hold."""
    lat = c.latencies
    holds = {b.band.name: b.holds for b in c.bands}
    out = []
    for band in slo.bands:
        entry = {"band": band.name, "requests": lat.requests_in(band)}
        for kind in ("ttft", "tpot"):
            for s in _STATS:
                value = lat.statistic(band, kind, s) * 1e3
                entry[f"{kind}_ms_{s}"] = value if value == value else None
        entry["itl_ms_p99"] = lat.statistic(band, "itl", "p99") * 1e3
        attained = lat.attainment(slo, band)
        entry["attainment"] = attained if attained == attained else None
        entry["holds"] = holds.get(band.name, True)
        out.append(entry)
    return out


COMMANDS = [simulate]
