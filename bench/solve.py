"""Time `planner solve`: evaluation, model build and solver time, for the shipped 128k rollout and a large
synthetic candidate set (all catalog GPUs x tp 1-8 x all dtypes x 6 thresholds).

    python bench/solve.py

Prints figures; asserts nothing. Target: the shipped scenario, certification by simulation included,
end to end in a fresh process within 3 s on a 2-core machine (issue 11).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner import optimize  # noqa: E402
from planner.solve import load_inputs, plan_inputs  # noqa: E402


def timed_plan(inputs, scn=None, explore=True):
    """Run a plan while accumulating the ILP's build and solve times."""
    build = solve = 0.0
    calls = 0
    original = optimize.solve_fleet

    def wrapped(*args, **kwargs):
        nonlocal build, solve, calls
        sol = original(*args, **kwargs)
        build += sol.build_s
        solve += sol.solve_s
        calls += 1
        return sol

    import planner.planning as planning

    planning.solve_fleet = wrapped
    try:
        t0 = time.perf_counter()
        plan = plan_inputs(inputs, scn, explore=explore)
        total = time.perf_counter() - t0
    finally:
        planning.solve_fleet = original
    return plan, total, build, solve, calls


def report(name: str, inputs, scn=None) -> None:
    plan, total, build, solve, calls = timed_plan(inputs, scn)
    evaluations = len({(e.config.key, e.traffic_class.option, e.traffic_class.name) for e in plan.evaluations})
    evaluate = total - build - solve
    print(f"{name}")
    print(f"  candidates evaluated (main set) {evaluations:6d}")
    print(f"  ILP solves                      {calls:6d}")
    print(f"  evaluation + bookkeeping        {evaluate * 1e3:9.0f} ms")
    print(f"  model build                     {build * 1e3:9.0f} ms")
    print(f"  solver                          {solve * 1e3:9.0f} ms")
    print(f"  plan total (in process)         {total * 1e3:9.0f} ms   -> ${plan.cost_per_hour:,.2f}/hour, {plan.solution.gpus} GPUs")


def main() -> None:
    rollout = ROOT / "scenarios" / "128k_rollout.yaml"
    t0 = time.perf_counter()
    inputs = load_inputs(rollout)
    load_s = time.perf_counter() - t0
    print(f"loading the 128k rollout (scenario, catalog, {inputs.traffic.hist.requests:,}-request synthetic histogram): {load_s * 1e3:.0f} ms")
    report("128k_rollout (shipped)", inputs)

    import statistics
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for label, flags, target in (("certified by simulation (as shipped)", [], 3.0),
                                     ("without certification (--no-verify)", ["--no-verify"], None)):
            times, status = [], "ok"
            for _ in range(3):
                t0 = time.perf_counter()
                out = subprocess.run(
                    [sys.executable, "-m", "planner", "solve", str(rollout), "--out-dir", tmp, *flags],
                    capture_output=True, text=True, cwd=ROOT, check=False,
                )
                times.append(time.perf_counter() - t0)
                if out.returncode != 0:
                    status = f"exit {out.returncode}: {out.stderr.strip()}"
            cli_s = statistics.median(times)
            verdict = "" if target is None else f"   target <= {target:g} s: {'met' if cli_s <= target else 'NOT met'}"
            print(f"  end to end, `planner solve` in a fresh process, {label}: median {cli_s:.2f} s of 3 "
                  f"({', '.join(f'{t:.2f}' for t in times)}; {status}){verdict}")

    gpus = sorted(inputs.catalog.gpus)
    big = inputs.scenario.model_copy(update={
        "gpus": gpus, "tp": [1, 2, 4, 8], "weight_dtypes": sorted(d for d, v in inputs.catalog.dtypes.items() if v.weight),
        "kv_dtypes": sorted(d for d, v in inputs.catalog.dtypes.items() if v.kv),
        "split_thresholds": [4096, 8192, 16384, 32768, 65536, 98304],
    })
    report(f"large candidate set ({len(gpus)} GPUs x tp 1-8 x all dtypes x 6 thresholds)", inputs, big)


if __name__ == "__main__":
    main()
