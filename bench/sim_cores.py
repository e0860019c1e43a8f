"""Where a certified solve leaves a core idle: the simulator's runs over time, and what runs alone.

    python bench/sim_cores.py [scenario.yaml] [--runs 3]

Solves the scenario (default: the shipped 128k rollout) with certification, in this process as
`planner solve` runs (its worker too), timing every replica simulation (planner.simulate's
simulate_replica, as certification, the close calls' confirming runs and the capacity bisections
call it) and naming the step of certification that asked for it. The simulator's compiled loop
releases the GIL, so certification runs pools, seeds and confirming runs side by side in threads;
what it cannot run side by side shows as time with one run under way and a core free.

Prints, for the median solve by wall time (the lower middle of an even count): the solve's wall
time; the runs' count, their summed wall time and their summed CPU time (each in its own thread);
the time with no run under way (planning, explorations, the report), with exactly one and with two
or more; the time with one run alone by the step that asked for it; and the bound the runs' CPU sets
on the solve's wall time on this machine's cores, the rest as it is (the time with no run under way
plus the runs' CPU over the cores): a perfect packing, which no schedule reaches where runs depend
on each other (a bisection's). Certification is asked for (--verify) whatever the scenario says.
The solve's worker starts with the command, not ahead of its imports as `planner solve` starts it;
it runs no simulation. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import threading
import time
import traceback
from collections import Counter
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.in_process import solve_in_process  # noqa: E402
from planner.startup import prepare_process  # noqa: E402

prepare_process()  # one BLAS thread and the allocator's settings, as the command line runs (planner.entry)

from planner.worker_pool import usable_cores  # noqa: E402

# The modules of the planner that call simulate_replica by name, where solve() times it.
CALLERS = ("pool_check", "sim_capacity")


def step_of(callers: list[str]) -> str:
    """The step of certification a run was asked for, from the planner's function names on the stack
    of the thread that runs it (outermost first). A run in a thread of side_by_side sees only that
    thread's frames: the job's lambda outermost."""
    if "held_at" in callers:  # planner.pool_check.capacity_on_every_run's seeds, each bisected by max_sustainable_rate
        at = callers.index("held_at")
        if at > 0 and callers[at - 1] == "capacity_on_every_run":
            return "the first seed's bisection"  # in the caller's thread, from the pool's replayed rate
        if {"bisect", "down"} & set(callers):
            return "a later seed's bisection"
        return "a later seed at the rate found so far"
    if {"bisect", "down"} & set(callers):
        return "bisecting a rate"
    for name, step in (("settle_queue", "a longer run (a growing queue)"), ("replay_trace", "a log replayed"),
                       ("<lambda>", "confirming a close call")):
        if name in callers:
            return step
    if "check_pool" in callers:
        if "_measured_capacity" in callers:  # a missed pool's bisected rate, judged on fresh seeds
            return "judging a measured rate (its first run)"
        return "a pool's first run"
    return callers[-1] if callers else "?"


def concurrency(runs: list[tuple[float, float, str]], end_s: float) -> tuple[dict[int, float], Counter]:
    """From (start, end, step) of each run and the solve's end: the seconds of [0, end_s] with 0, 1
    and 2 or more runs under way (keys 0, 1, 2), and the seconds each step's run was the only one
    (a run is counted within [0, end_s] only)."""
    clipped = [(min(max(s, 0.0), end_s), min(max(e, 0.0), end_s), step) for s, e, step in runs]
    events = sorted([(s, 1, step) for s, _, step in clipped] + [(e, -1, step) for _, e, step in clipped],
                    key=lambda ev: ev[0])
    by_count = {0: 0.0, 1: 0.0, 2: 0.0}
    alone: Counter = Counter()
    running: Counter = Counter()
    at = 0.0
    for t, change, step in [*events, (end_s, 0, "")]:
        under_way = sum(running.values())
        by_count[min(under_way, 2)] += t - at
        if under_way == 1:
            alone[next(iter(+running))] += t - at
        at = t
        running[step] += change
    return by_count, alone


@contextlib.contextmanager
def timed_simulations(t0: float):
    """simulate_replica timed where the planner's modules call it (CALLERS) within the block: yields
    the list that each run's (start, end, CPU seconds, step) goes to, start and end in seconds from t0
    (time.perf_counter), its CPU the thread's that ran it (the simulator's loop runs in its caller's)."""
    import importlib

    from planner import simulate

    runs, lock = [], threading.Lock()
    real, planner_dir = simulate.simulate_replica, str(ROOT / "planner")

    def timed(*args, **kwargs):
        callers = [frame.name for frame in traceback.extract_stack()[:-1] if frame.filename.startswith(planner_dir)]
        start, cpu = time.perf_counter() - t0, time.thread_time()
        try:
            return real(*args, **kwargs)
        finally:
            with lock:
                runs.append((start, time.perf_counter() - t0, time.thread_time() - cpu, step_of(callers)))

    with contextlib.ExitStack() as stack:
        for module in CALLERS:
            stack.enter_context(mock.patch.object(importlib.import_module(f"planner.{module}"), "simulate_replica", timed))
        yield runs


def solve(scenario: Path) -> tuple[float, list[tuple[float, float, float, str]]]:
    """(wall seconds, the runs' (start, end, CPU seconds, step)) of one certified `planner solve` in process."""
    t0 = time.perf_counter()
    with timed_simulations(t0) as runs:
        solve_in_process(scenario, "--verify")
        wall_s = time.perf_counter() - t0  # the runs' times are from t0 too
    return wall_s, runs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", nargs="?", type=Path, default=ROOT / "scenarios" / "128k_rollout.yaml")
    ap.add_argument("--runs", type=int, default=3, choices=range(1, 100), metavar="N (1-99)")
    args = ap.parse_args()
    solve(args.scenario)  # the first solve pays the imports, numba's load and the caches of the process
    solves = sorted((solve(args.scenario) for _ in range(args.runs)), key=lambda s: s[0])
    wall_s, runs = solves[(len(solves) - 1) // 2]
    print(f"{args.scenario.name}: certified solve in process, the median of {args.runs} by wall time "
          f"({', '.join(f'{w:.2f}' for w, _ in solves)} s): {wall_s:.2f} s")
    if not runs:
        print("  no replica simulation")
        return
    by_count, alone = concurrency([(s, e, step) for s, e, _, step in runs], wall_s)
    cores = usable_cores()
    run_s, cpu_s = sum(e - s for s, e, _, _ in runs), sum(c for _, _, c, _ in runs)
    print(f"  {len(runs)} replica simulations: {run_s:.2f} s of them in all, {cpu_s:.2f} CPU-s "
          f"(median run {statistics.median(e - s for s, e, _, _ in runs) * 1e3:.0f} ms)")
    print(f"  no run under way {by_count[0]:.2f} s; one {by_count[1]:.2f} s; two or more {by_count[2]:.2f} s")
    for step, seconds in alone.most_common():
        print(f"    one alone, {step}: {seconds:.2f} s")
    print(f"  the bound the runs' CPU sets on {cores} cores, the rest as it is: {by_count[0] + cpu_s / cores:.2f} s")


if __name__ == "__main__":
    main()
