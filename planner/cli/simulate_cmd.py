"""`planner simulate`: replay a solved plan's traffic through the paged-cache scheduler simulator."""

from __future__ import annotations

import click

from planner.bounds import MAX_SEED, MAX_SIMULATED_REQUESTS
from planner.cli.options import catalog_option, echo_json, json_option


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option("--pool", default=None, help="Only this pool (all, short or long).")
@click.option("--requests", "n_requests", type=click.IntRange(100, MAX_SIMULATED_REQUESTS), default=20_000, show_default=True,
              help="Sampled requests per pool.")
@click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True)
@catalog_option
@json_option
def simulate(scenario, pool, n_requests, seed, catalog_files, as_json) -> None:
    """Solve SCENARIO, then simulate one replica of each pool at its planned peak rate.

    Prints predicted (the analytical model) and simulated figures side by side:
    rate, resident batch, KV utilisation, p50/p99 ITL, p99 TTFT, preemptions.

    \b
    Example:
      planner simulate scenarios/chat_8b_h100.yaml --requests 20000 --seed 1
    """
    from planner.errors import located
    from planner.simulate import COMPARE_KEYS
    from planner.solve import plan_scenario
    from planner.verify import verify_plan

    with located(scenario):
        plan = plan_scenario(scenario, catalog_files=catalog_files, explore=False)
    names = [pd.traffic_class.name for pd in plan.pools]
    if pool is not None and pool not in names:
        raise click.BadParameter(f"'{pool}' is not a pool of this plan (pools: {', '.join(sorted(set(names)))})",
                                 param_hint="--pool")
    checks = verify_plan(plan, pool=pool, requests=n_requests, seed=seed)
    if as_json:
        echo_json({
            "scenario": plan.scenario.name,
            "pools": [
                {"pool": c.pool, "config": c.config, "predicted": c.predicted, "simulated": c.simulated,
                 "holds": c.holds, "problems": list(c.problems)}
                for c in checks
            ],
        })
        return
    for c in checks:
        click.echo(f"{c.label} — {c.config}: {'holds' if c.holds else 'does NOT hold: ' + '; '.join(c.problems)}")
        click.echo(f"  {'':24} {'predicted':>12} {'simulated':>12}")
        for k in COMPARE_KEYS:
            p, s = c.predicted.get(k), c.simulated.get(k)
            click.echo(f"  {k:24} {'—' if p is None else f'{p:12,.3f}':>12} {'—' if s is None else f'{s:12,.3f}':>12}")
    if any(not c.holds for c in checks):
        click.echo("note: at least one pool does not hold in simulation; see above", err=True)


COMMANDS = [simulate]
