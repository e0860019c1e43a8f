"""What the planner's unit of work costs: a latency point (planner.latency.LatencyPoint, the waits
and tails of one replica at one resident batch) and the targets judged on it. Every capacity search
of `planner solve` is a sequence of them, and most of a solve's planning time is theirs.

    python bench/latency_points.py [scenario.yaml] [--runs 5]

Solves the scenario (default: the shipped 128k rollout) in this process without simulation, every
job here (PLANNER_WORKERS=0), recording each margin the searches and proofs ask of a replica model
(capacity.ReplicaModel.margin). Then replays them from scratch, every point, decode step and wait
the replica models had remembered forgotten, in two passes: building the points (their waits: the
M/G/1 queue's transform and the backlog regime's reading, planner.prefill_wait and
planner.backlog), then judging the targets on the points built (the TTFT and TPOT tails). What a
replica model holds for all its points (its memory and work tables) stays built, as it does for a
search's points; the points no margin asks for (an empty replica's, the report's) are not replayed.
Prints the solve's own time, the points' count, each pass's best time of --runs replays (a shared
machine's load only ever adds), and how many margins the replay found unlike the solve (0: the
replay did the solve's work, no more or less). Prints figures; asserts nothing.

The replay times the work the solve did, not its bookkeeping: the share of the solve it shows is
what a faster latency point could save, and points per search what a better search could. How much
a better search could save is bounded by one more solve (perfect_guesses): each search that starts
with no guess (a pair's first, roots.largest_on_grid without one) is handed its own answer, the
best guess there is, which changes no answer and leaves a search the fewest points it can take.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.in_process import solve_in_process  # noqa: E402
from planner.startup import prepare_process  # noqa: E402

prepare_process()  # one BLAS thread and the allocator's settings, as the command line runs (planner.entry)


def record(scenario: Path) -> tuple[float, list, int]:
    """(seconds, margins asked, capacity searches) of one `planner solve --no-verify` in process."""
    from planner import capacity, evaluator

    asked, searches = [], [0]
    margin, search = capacity.ReplicaModel.margin, evaluator.replica_capacity

    def recorded(self, n, kinds=capacity.LATENCY_CEILINGS, *, exact=True):
        value = margin(self, n, kinds, exact=exact)
        asked.append((self, n, kinds, exact, value))
        return value

    def counted(*args, **kwargs):
        searches[0] += 1
        return search(*args, **kwargs)

    # every job in this process, where the recorder sees it
    with (mock.patch.object(capacity.ReplicaModel, "margin", recorded),
          mock.patch.object(evaluator, "replica_capacity", counted),
          mock.patch.dict(os.environ, {"PLANNER_WORKERS": "0"})):
        solve_s = solve_in_process(scenario, "--no-verify")
    return solve_s, asked, searches[0]


def perfect_guesses(scenario: Path) -> tuple[float, int, float, int, int, int, int]:
    """(seconds, margins asked) of one solve as record() runs it, then of one in which each latency
    bound searched without a guess is handed the bound that solve found, in the order they came;
    and the searches without a guess, their margins in the first solve, and the answers the second
    found unlike the first (0: the same searches, in the same order)."""
    from planner import capacity

    search = capacity.largest_on_grid
    found: list[float] = []
    tally = {"searches": 0, "margins": 0, "unlike": 0}

    def recording(margin, n_hi, rel_tol, *, guess=None):
        if guess is not None:
            return search(margin, n_hi, rel_tol, guess=guess)

        def counted(n):
            tally["margins"] += 1
            return margin(n)

        tally["searches"] += 1
        found.append(search(counted, n_hi, rel_tol))
        return found[-1]

    answers = iter([])

    def guessed(margin, n_hi, rel_tol, *, guess=None):
        if guess is None:
            own = next(answers, None)
            guess = own if own is not None and own > 0 else None
            bound = search(margin, n_hi, rel_tol, guess=guess)
            tally["unlike"] += own is not None and bound != own
            return bound
        return search(margin, n_hi, rel_tol, guess=guess)

    with mock.patch.object(capacity, "largest_on_grid", recording):
        first_s, first, _ = record(scenario)
    answers = iter(found)
    with mock.patch.object(capacity, "largest_on_grid", guessed):
        second_s, second, _ = record(scenario)
    return first_s, len(first), second_s, len(second), tally["searches"], tally["margins"], tally["unlike"]


def replay(asked: list) -> tuple[float, float, int, int]:
    """(seconds building the points, seconds judging the targets, points built, margins that differ
    from the solve's), from scratch."""
    for rm, *_ in asked:  # every point, decode step and FCFS wait the models remember, forgotten
        rm._points.clear()
        rm._decode.clear()
        rm.latency._fcfs_waits.clear()
    t0 = time.perf_counter()
    for rm, n, *_ in asked:
        rm.latency_at(n)
    built_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    values = [rm.margin(n, kinds, exact=exact) for rm, n, kinds, exact, _ in asked]
    judged_s = time.perf_counter() - t0
    differ = sum(v != found for v, (*_, found) in zip(values, asked, strict=True))
    return built_s, judged_s, len({(id(rm), n) for rm, n, *_ in asked}), differ


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", nargs="?", type=Path, default=ROOT / "scenarios" / "128k_rollout.yaml")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    record(args.scenario)  # the first solve pays the imports and the caches of the process
    solve_s, asked, searches = record(args.scenario)
    runs = [replay(asked) for _ in range(args.runs)]
    built_s, judged_s = min(r[0] for r in runs), min(r[1] for r in runs)
    points, differ = runs[0][2], max(r[3] for r in runs)
    both = built_s + judged_s
    print(f"{args.scenario.name}: solve in process, without simulation, every job here: {solve_s:.2f} s "
          f"(the second solve of this process: imports and first-call caches not counted)")
    print(f"  {searches:,} capacity searches; {len(asked):,} margins asked on {points:,} latency points "
          f"({points / max(searches, 1):.1f} a search, the proofs of the lazy search included)")
    print(f"  replayed from scratch, best of {args.runs}: building the points {built_s:.3f} s, judging the targets on "
          f"them {judged_s:.3f} s; {both * 1e3 / max(points, 1):.3f} ms a point; {both / solve_s:.0%} of the solve; "
          f"margins unlike the solve's: {differ}")
    first_s, first, second_s, second, unguessed, their_margins, unlike = perfect_guesses(args.scenario)
    print(f"  {unguessed:,} searches start without a guess, {their_margins:,} of the solve's {first:,} margins; each handed "
          f"its own answer (the most a better first guess could save): {second:,} margins, the solve {first_s:.2f} s -> "
          f"{second_s:.2f} s; answers unlike the solve's: {unlike}")


if __name__ == "__main__":
    main()
