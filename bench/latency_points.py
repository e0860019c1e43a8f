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
a better first guess could save is bounded by more solves (perfect_guesses): each search that starts
with no guess (a pair's first, roots.largest_on_grid without one) is handed the answer it found in
the first solve (guessless_searches), the best guess there is, which changes no answer and leaves a
search the fewest points it can take.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Guessless:
    """The searches of a solve that start without a guess (roots.largest_on_grid without one, a pair's
    first search), in the order they came: their answers, the margins they asked, and how many found
    0 or their ceiling, where a guess is none to start from."""

    answers: tuple[float, ...]
    margins: int
    unguessable: int


def guessless_searches(scenario: Path) -> Guessless:
    """Guessless of one solve as record() runs it."""
    from planner import capacity

    search = capacity.largest_on_grid
    answers: list[float] = []
    tally = {"margins": 0, "unguessable": 0}

    def recording(margin, n_hi, rel_tol, *, guess=None):
        if guess is not None:
            return search(margin, n_hi, rel_tol, guess=guess)

        def counted(n):
            tally["margins"] += 1
            return margin(n)

        answers.append(search(counted, n_hi, rel_tol))
        tally["unguessable"] += not 0 < answers[-1] < n_hi
        return answers[-1]

    with mock.patch.object(capacity, "largest_on_grid", recording):
        record(scenario)
    return Guessless(tuple(answers), tally["margins"], tally["unguessable"])


@dataclass(frozen=True)
class GuessBound:
    """perfect_guesses' answer, best of its runs: the solve as it runs, and with each search that
    starts without a guess handed its own answer."""

    solve_s: float
    guessed_s: float
    guessed_margins: int  # the margins the solve asks with those answers handed in
    aligned: bool  # every guessed solve met the same searches in the same order, and found the same answers


def perfect_guesses(scenario: Path, runs: int, found: Guessless) -> GuessBound:
    """What the best first guesses would save: `runs` pairs of solves, alternating, time the solve as
    it is and with each search that starts without a guess handed its own answer (`found`), in the
    order they came. A guess never changes a search's answer, only its points: a guessed solve that
    meets another number of such searches, or another answer, is misaligned and says so."""
    from planner import capacity

    search = capacity.largest_on_grid
    met: list[float] = []

    def guessed(margin, n_hi, rel_tol, *, guess=None):
        if guess is None:
            own = found.answers[len(met)] if len(met) < len(found.answers) else None
            met.append(search(margin, n_hi, rel_tol, guess=own if own is not None and 0 < own < n_hi else None))
            return met[-1]
        return search(margin, n_hi, rel_tol, guess=guess)

    plain_s, guessed_s, guessed_margins, aligned = [], [], 0, True
    for _ in range(runs):
        plain_s.append(record(scenario)[0])
        met.clear()
        with mock.patch.object(capacity, "largest_on_grid", guessed):
            seconds, guessed_asked, _ = record(scenario)
        guessed_s.append(seconds)
        guessed_margins = len(guessed_asked)
        aligned = aligned and tuple(met) == found.answers
    return GuessBound(min(plain_s), min(guessed_s), guessed_margins, aligned)


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
    # the first solve pays the imports and the caches of the process, and records the searches without a guess
    found = guessless_searches(args.scenario)
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
    bound = perfect_guesses(args.scenario, args.runs, found)
    notes = [f"{found.unguessable:,} of them found 0 or their ceiling, no guess to start from"] if found.unguessable else []
    if not bound.aligned:
        notes.append("MISALIGNED: the guessed solves met other searches, so these figures are not the bound")
    print(f"  {len(found.answers):,} searches start without a guess, asking {found.margins:,} of the solve's "
          f"{len(asked):,} margins; each handed its own answer (the most a better first guess could save), the solve "
          f"asks {bound.guessed_margins:,} margins and takes {bound.guessed_s:.2f} s against {bound.solve_s:.2f} s (best "
          f"of {args.runs} alternating solves each)" + "".join(f"; {note}" for note in notes))

if __name__ == "__main__":
    main()
