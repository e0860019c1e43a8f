"""How often does certification pass a pool that misses its target, and fail one that holds it?

One shipped pool (by default finance_2027's, whose TPOT p99 comes in long bursts) is simulated at a
fixed per-replica rate on --truth-runs runs of --truth-requests requests: their pooled TPOT p99 is
the pool's long-run value. Then planner.pool_check.check_pool itself, with the scenario's own
`simulation:` settings and first-run length (planner.certification.run_requests), judges the pool
against TPOT p99 limits set 8%, 5% and 3% under that value and as far over it, each on --blocks
blocks of seeds (block i starts at --seed + 16·i, so no two blocks share a run). Prints, per limit,
the share of blocks certified, with its 95% Wilson interval, and the requests simulated a verdict.
A pool whose long-run value lies over its limit should rarely be certified; one under it, mostly.

    python bench/certification_error.py [--scenario finance_2027] [--pool 0] [--rate 28.577835]
                                        [--blocks 150] [--truth-runs 6] [--truth-requests 2000000]

Asserts nothing. About 4 minutes at the defaults on one core (the truth's 12 million requests take
7 s; a verdict near its limit pools up to sixteen half-hour runs).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.startup import prepare_process  # noqa: E402

prepare_process()

from planner.certification import pool_setting, run_requests  # noqa: E402
from planner.inputs import load_inputs, plan_inputs  # noqa: E402
from planner.pool_check import _run, check_pool  # noqa: E402
from planner.sim_measures import merged_latencies  # noqa: E402
from planner.targets import SLO  # noqa: E402

OFFSETS = (0.08, 0.05, 0.03, -0.03, -0.05, -0.08)  # (long-run value - limit) / limit


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a share k / n (Wilson 1927)."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="finance_2027", help="a shipped scenario (default finance_2027)")
    ap.add_argument("--pool", type=int, default=0, help="the plan's pool, by its order (default 0)")
    ap.add_argument("--rate", type=float, default=28.577835294117648,
                    help="req/s a replica (default 28.5778: the rate finance_2027's pool was certified at "
                         "with runs of 5,556 requests; 0: the plan's own)")
    ap.add_argument("--blocks", type=int, default=150, help="blocks of seeds a limit (default 150)")
    ap.add_argument("--truth-runs", type=int, default=6)
    ap.add_argument("--truth-requests", type=int, default=2_000_000)
    ap.add_argument("--seed", type=int, default=5_000_000, help="the first block's first seed")
    args = ap.parse_args()

    inputs = load_inputs(ROOT / "scenarios" / f"{args.scenario}.yaml")
    scn = inputs.scenario
    plan = plan_inputs(inputs, scn, explore=False)
    detail = plan.pools[args.pool]
    setting = pool_setting(detail, scn, plan.pools, None)
    if args.rate > 0:
        setting = dataclasses.replace(setting, rate_rps=args.rate)
    band = scn.slo.to_slo().bands[0]
    ttft = band.ttft.limit_s if band.ttft is not None else None
    t0 = time.perf_counter()
    longs = [_run(setting, args.truth_requests, 3 * 10**9 + k).latencies for k in range(args.truth_runs)]
    truth_s = merged_latencies(longs).statistic(band, "tpot", "p99")
    per_run = ", ".join(f"{run.statistic(band, 'tpot', 'p99') * 1e3:.2f}" for run in longs)
    requests = run_requests(setting, scn.slo.to_slo(), scn.simulation)
    print(f"{args.scenario} pool {args.pool}: {setting.config}, {setting.rate_rps:.3f} req/s a replica; first runs of "
          f"{requests:,} requests")
    print(f"long-run TPOT p99: {truth_s * 1e3:.2f} ms over {args.truth_runs} x {args.truth_requests:,} requests "
          f"(runs: {per_run} ms; {time.perf_counter() - t0:.0f} s)")
    for offset in OFFSETS:
        limit_s = truth_s / (1 + offset)
        slo = SLO.single(ttft_s=ttft, tpot_ms=limit_s * 1e3)
        t0 = time.perf_counter()
        held, simulated = 0, 0
        for block in range(args.blocks):
            check = check_pool(setting, slo, requests=requests, seed=args.seed + 16 * block)
            held += check.holds
            simulated += check.requests * check.runs
        lo, hi = wilson(held, args.blocks)
        side = "over" if offset > 0 else "under"
        print(f"  long-run value {abs(offset):.0%} {side} a {limit_s * 1e3:.2f} ms limit: certified {held}/{args.blocks} "
              f"= {held / args.blocks:.1%} [{lo:.1%}, {hi:.1%}]; {simulated / args.blocks:,.0f} requests simulated a "
              f"verdict ({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
