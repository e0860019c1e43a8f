"""bench/sim_cores.py: its account of the simulator's runs over a certified solve (the time with none,
one and several under way, and what ran alone), the step each run is named for, and its timing of
the runs the planner makes."""

from __future__ import annotations

import re

import pytest
from bench_scripts import load_bench

from planner.deployment import make_deployment
from planner.histogram import Histogram
from planner.sim_capacity import max_sustainable_rate

bench = load_bench("sim_cores")


def test_time_is_split_by_the_runs_under_way_and_a_lone_run_is_charged_to_its_step():
    runs = [(0.0, 2.0, "x"), (1.0, 3.0, "y"), (4.0, 5.0, "x")]
    by_count, alone = bench.concurrency(runs, 6.0)
    assert by_count == {0: 2.0, 1: 3.0, 2: 1.0}
    assert alone == {"x": 2.0, "y": 1.0}


def test_runs_of_one_step_side_by_side_count_as_several():
    by_count, alone = bench.concurrency([(0.0, 2.0, "a"), (1.0, 3.0, "a")], 3.0)
    assert by_count == {0: 0.0, 1: 2.0, 2: 1.0}
    assert alone == {"a": 2.0}


def test_a_run_that_starts_as_another_ends_does_not_overlap_it():
    by_count, alone = bench.concurrency([(0.0, 2.0, "a"), (2.0, 4.0, "b"), (1.0, 1.5, "c")], 4.0)
    assert by_count == {0: 0.0, 1: 3.5, 2: 0.5}
    assert alone == {"a": 1.5, "b": 2.0}


def test_a_run_past_the_solves_end_counts_up_to_it():
    by_count, alone = bench.concurrency([(0.5, 2.0, "a")], 1.0)
    assert by_count == {0: 0.5, 1: 0.5, 2: 0.0}
    assert alone == {"a": 0.5}


@pytest.mark.parametrize(("callers", "step"), [
    (["solve", "certify_plans", "_replay_all", "_replay", "check_pool", "_run"], "a pool's first run"),
    (["certify_plans", "_measured_capacity", "check_pool", "_run"], "judging a measured rate (its first run)"),
    (["certify_plans", "_measured_capacity", "check_pool", "settle_queue", "_run"], "a longer run (a growing queue)"),
    (["_measured_capacity", "capacity_on_every_run", "held_at", "max_sustainable_rate", "evaluate", "simulated"],
     "the first seed's bisection"),
    (["_measured_capacity", "capacity_on_every_run", "held_at", "max_sustainable_rate", "bisect", "evaluate",
      "simulated"], "the first seed's bisection"),
    (["<lambda>", "held_at", "max_sustainable_rate", "evaluate", "simulated"], "a later seed at the rate found so far"),
    (["capacity_on_every_run", "side_by_side", "<listcomp>", "<lambda>", "held_at", "max_sustainable_rate", "evaluate",
      "simulated"], "a later seed at the rate found so far"),  # a lone seed runs in the caller's thread
    (["<lambda>", "held_at", "max_sustainable_rate", "down", "evaluate", "simulated"], "a later seed's bisection"),
    (["<lambda>", "held_at", "max_sustainable_rate", "bisect", "evaluate", "simulated"], "a later seed's bisection"),
    (["max_sustainable_rate", "bisect", "evaluate", "simulated"], "bisecting a rate"),
    (["<lambda>", "_run"], "confirming a close call"),
    (["check_pool", "replay_trace"], "a log replayed"),
    (["something", "new"], "new"),
])
def test_a_run_is_named_for_the_step_on_its_stack(callers, step):
    assert bench.step_of(callers) == step


def _names(constants) -> set[str]:
    """The identifiers among a function's constants (nested tuples and sets included)."""
    out = set()
    for c in constants:
        if isinstance(c, str) and c.isidentifier():
            out.add(c)
        elif isinstance(c, tuple | frozenset):
            out |= _names(c)
    return out


def test_every_function_name_step_of_reads_is_a_function_of_the_planner():
    """A function renamed in the planner would leave its runs unnamed: each name step_of compares
    with a stack's (read off its code, not kept in a list beside it) is still defined."""
    source = "".join((bench.ROOT / "planner" / f"{m}.py").read_text() for m in ("sim_capacity", "pool_check", "certification"))
    names = _names(bench.step_of.__code__.co_consts)
    assert {"held_at", "bisect", "check_pool"} <= names
    for name in names:
        assert re.search(rf"^\s*def {name}\(", source, re.M), name


def test_every_module_that_calls_the_simulator_is_one_the_bench_times():
    """solve() patches simulate_replica where the planner's modules look it up: a module that starts
    calling it (by any name) would go untimed."""
    planner = bench.ROOT / "planner"
    calling = {str(path.relative_to(planner).with_suffix("")) for path in planner.rglob("*.py")
               if "simulate_replica" in path.read_text() and path.name != "simulate.py"}
    assert calling == set(bench.CALLERS)


def test_the_runs_of_a_certified_solve_are_timed_and_named():
    wall_s, runs = bench.solve(bench.ROOT / "scenarios" / "chat_8b_h100.yaml")
    assert [step for *_, step in runs] == ["a pool's first run"]  # one pool, no close call
    (start, end, cpu_s, _), = runs
    assert 0 < start < end < wall_s and 0 < cpu_s <= (end - start) * 1.05


def test_every_run_of_a_capacity_bisection_is_timed(catalog):
    dep = make_deployment(catalog, model="llama-3.1-8b", gpu="h100-sxm", max_model_len=8192)
    with bench.timed_simulations(0.0) as runs:
        found = max_sustainable_rate(dep, Histogram.constant(1000, 250), n_requests=300, rel_tol=0.1)
    assert len(runs) == found.runs > 2
    assert {step for *_, step in runs} == {"simulated", "bisecting a rate"}  # the first rate, then the bisection's
