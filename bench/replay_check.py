"""Replay every shipped plan on runs its certification never saw: does a plan the report calls good
hold when replayed?

Each shipped scenario (and each service of the shipped fleet) is planned and certified as `planner
solve` plans it; then every pool's replica is replayed at the rate the plan has it carry (its share of
the peak x headroom, as certification replays it) on --runs runs of --requests sampled requests or
--hours of arrivals at that rate, whichever is more (certification's own span half an hour), seeds
from --seed (far from the seeds certification pools: the scenario's, and up to fifteen after).
The runs are pooled as certification pools them (planner.pool_check): per band and target, the
pooled value, its standard error from the runs' own values, and its limit; the attainment against
its goal where the SLO sets one; the runs' mean backlog trend (2% of the arrival rate allowed) and
preemptions per 1,000 requests. A value over its limit is a miss; one within two standard errors of
it, on either side, is undecided (certification counts that as a miss). The runs' mean backlog
trend is read as it is, with no longer run to settle it: at four hours of arrivals or 40,000
requests a run, several times certification's own, a replica has filled long before the run ends.

    python bench/replay_check.py [--runs 4] [--requests 40000] [--hours 4] [--seed 1000] [FILE ...]

Prints figures, one line a target, and a count of the verdicts that hold, miss and are undecided;
asserts nothing. Where a plan misses here, certification's own runs read it otherwise: the seeds
its verdict rests on, or the runs' length (fewer requests), made the difference.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.startup import prepare_process  # noqa: E402

prepare_process()

from planner.bounds import MAX_SIMULATED_REQUESTS  # noqa: E402
from planner.certification import pool_setting  # noqa: E402
from planner.fleet import is_fleet_file, load_fleet  # noqa: E402
from planner.fleet_plan import make_fleet_plan  # noqa: E402
from planner.inputs import load_inputs, plan_inputs  # noqa: E402

# _run, _mean_growth and _units: a pool's replica on sampled requests, its runs' trend and a latency's unit,
# as certification has them
from planner.pool_check import (  # noqa: E402
    _mean_growth,
    _preemption_problems,
    _queue_problems,
    _run,
    _units,
    band_checks,
    standard_error,
    undecided,
)
from planner.sim_capacity import PREEMPTION_BUDGET_PER_1000  # noqa: E402
from planner.sim_measures import STABILITY_TOLERANCE, merged_latencies  # noqa: E402
from planner.units import replicas_text  # noqa: E402

SHIPPED = sorted(p for p in (ROOT / "scenarios").glob("*.yaml"))


def plans_of(path: Path):
    """(name, scenario, plan, traffic) per plan the file's report shows: a scenario's, or each service's."""
    if is_fleet_file(path):
        fleet = load_fleet(path)
        fp = make_fleet_plan(fleet, explore=False)
        return [(f"{path.stem}/{svc.name}", svc.inputs.scenario, plan, svc.inputs.traffic)
                for svc, plan in zip(fleet.services, fp.plans, strict=True)]
    inputs = load_inputs(path)
    return [(path.stem, inputs.scenario, plan_inputs(inputs, inputs.scenario, explore=False), inputs.traffic)]


def replay(name, scn, plan, traffic, args) -> list[str]:
    """Print each pool's targets replayed on the runs; the verdicts: one a target, the attainment's
    where the SLO sets a goal, and one a pool for its queue and preemptions."""
    slo = scn.slo.to_slo()
    trace = traffic.requests_at_growth(scn.traffic.growth)
    verdicts = []
    certified = "certified" if plan.certification is not None and plan.certification.certified else "NOT certified"
    print(f"{name}: {plan.cost_per_hour:,.2f} $/hour, {certified}")
    for detail in plan.pools:
        p = pool_setting(detail, scn, plan.pools, trace)
        t0 = time.perf_counter()
        requests = min(max(args.requests, math.ceil(args.hours * 3600 * p.rate_rps)), MAX_SIMULATED_REQUESTS)
        sims = [_run(p, requests, seed) for seed in range(args.seed, args.seed + args.runs)]
        parts = tuple(s.latencies for s in sims)
        pooled = merged_latencies(list(parts))
        bands = band_checks(slo, None, None, pooled, parts)  # the simulated values only: no model is printed
        growth = _mean_growth(sims)
        preempted = sum(s.preemptions_per_1000 for s in sims) / len(sims)
        # judged by certification's own rules for runs pooled for a verdict (their mean trend, their mean preemptions)
        runs_verdict = "MISSES" if _queue_problems(None, sims) or _preemption_problems(sims) else "holds"
        verdicts.append(runs_verdict)
        print(f"  {p.label} on {p.config}, {replicas_text(p.replicas)} at {p.rate_rps:,.3f} "
              f"req/s each: {args.runs} runs x {requests:,} requests ({time.perf_counter() - t0:.1f} s)")
        print(f"    backlog trend {growth:+.2%} of the arrival rate ({STABILITY_TOLERANCE:.0%} allowed), {preempted:.1f} "
              f"preemptions per 1,000 requests ({PREEMPTION_BUDGET_PER_1000:g} allowed): {runs_verdict}")
        if slo.attainment is not None:
            got = pooled.attainment(slo)
            error = standard_error([part.attainment(slo) for part in parts])
            verdict = ("undecided" if undecided(got, slo.attainment, error) else "holds" if got >= slo.attainment
                       else "MISSES")
            verdicts.append(verdict)
            print(f"    attainment {got:.2%} ± {error:.2%} against a {slo.attainment:.1%} goal: {verdict}")
        for b in bands:
            for c in b.checks:
                _, scale, unit = _units(c.kind)
                if math.isnan(c.simulated_s):
                    continue  # no request of the band in the runs
                verdict = "undecided" if c.undecided else "holds" if c.holds else "MISSES"
                verdicts.append(verdict)
                error = f" ± {c.standard_error_s * scale:,.2g}" if math.isfinite(c.standard_error_s) else ""
                print(f"    {b.band.name}: {c.kind.upper()} {c.stat} {c.simulated_s * scale:,.4g}{error} {unit} "
                      f"against {c.limit_s * scale:g} {unit} "
                      f"({c.simulated_s / c.limit_s:.0%} of it): {verdict}")
    return verdicts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path, help="scenario or fleet files (default: every shipped one)")
    ap.add_argument("--runs", type=int, default=4, help="runs pooled per pool (default 4)")
    ap.add_argument("--requests", type=int, default=40_000, help="requests per run at least (default 40,000)")
    ap.add_argument("--hours", type=float, default=4.0, help="hours of arrivals per run at least (default 4)")
    ap.add_argument("--seed", type=int, default=1000, help="the first run's seed (default 1000)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    verdicts = []
    for path in args.files or SHIPPED:
        for name, scn, plan, traffic in plans_of(path):
            verdicts += replay(name, scn, plan, traffic, args)
    counts = {v: verdicts.count(v) for v in ("holds", "undecided", "MISSES")}
    print(f"\n{len(verdicts)} verdicts (targets, and each pool's queue and preemptions): " + ", ".join(f"{n} {v}" for v, n in counts.items())
          + f"; total runtime {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
