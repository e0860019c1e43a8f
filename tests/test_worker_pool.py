"""Figures drawn by worker processes (planner.worker_pool): the same bytes as drawn here, many at
once without a stall, a worker's failure raised here, a dead worker's figures drawn here."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from planner import worker_pool
from planner.plan_search import Resolver
from planner.worker_pool import draw, worker_processes


def _rows(i: int) -> dict:
    return {"rows": [(f"option {j}", 10.0 + i + j) for j in range(12)], "title": f"figure {i}"}


def _histogram():
    from planner.histogram import Histogram

    rng = np.random.default_rng(3)
    return Histogram.from_arrays(np.exp(rng.normal(6.5, 1.5, 2000)).astype(np.int64) + 1,
                                 np.exp(rng.normal(5.0, 1.0, 2000)).astype(np.int64) + 1)


# Every kind of figure, with a legend, a colour bar, a twin axis, text and log axes among them: the
# worker's matplotlib builds its artists' classes without their `set` help (worker_pool's
# _artists_without_set_signatures), which must not change a pixel.
_FIGURES = {
    "traffic_figure": lambda: {"hist": _histogram(), "limit": 131072, "thresholds": [8192, 16384]},
    "cost_figure": lambda: _rows(0),
    "target_figure": lambda: {"points": [(2.0, 77.7), (1.0, 143.8), (0.5, float("inf"))], "xlabel": "TTFT p99 (s)",
                              "title": "target"},
    "forecast_figure": lambda: {"quarters": ["2027Q1", "2027Q2"], "cpm": {"list": [1.5, 1.25], "gap": [1.0, None]},
                                "gpus": [8, 12], "title": "forecast"},
}


def test_worker_figures_are_the_bytes_drawn_in_process():
    here = {kind: draw(kind, **args())() for kind, args in _FIGURES.items()}
    with worker_processes():
        assert worker_pool._workers  # the figures below are a worker's
        there = {kind: draw(kind, **args())() for kind, args in _FIGURES.items()}
    assert there == here and all(png.startswith(b"\x89PNG") for png in there.values())


def test_a_worker_builds_matplotlibs_artists_without_their_set_help_and_this_process_with_it():
    code = ("from planner.worker_pool import _artists_without_set_signatures as skip; skip(); "
            "from matplotlib.lines import Line2D; print(Line2D.set.__doc__ is None)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "True\n"
    from matplotlib.lines import Line2D

    assert "linewidth" in Line2D.set.__doc__  # this process (the tests') keeps matplotlib's own


def test_many_figures_sent_before_any_is_read_all_come_back(monkeypatch):
    # Two dozen answers of ~30 kB each overflow any pipe buffer: the writer must never wait on a
    # worker that waits on its own answers (a fleet report sends three figures per service).
    monkeypatch.setattr(worker_pool, "MAX_WORKERS", 2)  # as on 3 cores or more, whatever this machine has
    with worker_processes():
        started = [draw("cost_figure", **_rows(i)) for i in range(24)]
        assert len(worker_pool._workers) == 2  # a queue that long gets a second
        pngs = [result() for result in started]
    assert pngs == [draw("cost_figure", **_rows(i))() for i in range(24)]


def test_a_job_that_fails_in_a_worker_raises_here_what_it_raises_in_process(monkeypatch):
    # A PlannerError raised in a worker's job must keep its type (its one-line message, exit code).
    ran_here = []
    run = worker_pool._run
    monkeypatch.setattr(worker_pool, "_run", lambda job, kwargs: ran_here.append(job) or run(job, kwargs))
    with worker_processes():
        assert worker_pool._workers  # the job is sent to a worker first
        with pytest.raises(TypeError, match="title"):
            draw("cost_figure", rows=[("a", 1.0)])()  # no title
    assert ran_here == ["figures:cost_figure"]  # raised by the run here, after the worker's failed


def test_a_dead_workers_figures_are_drawn_here():
    with worker_processes():
        for worker in worker_pool._workers:
            worker.proc.kill()
            worker.proc.wait()
        png = draw("cost_figure", **_rows(1))()
    assert png == draw("cost_figure", **_rows(1))()


def test_the_block_leaves_no_worker_and_an_error_in_it_kills_them():
    procs = []

    def plan_that_fails():
        with worker_processes():
            procs.extend(w.proc for w in worker_pool._workers)
            raise ValueError("planning failed")

    with pytest.raises(ValueError, match="planning failed"):
        plan_that_fails()
    assert procs and not worker_pool._workers
    for proc in procs:
        assert proc.wait(timeout=30) is not None


def test_a_worker_that_prints_before_its_answers_is_dropped_not_waited_on(monkeypatch):
    # A sitecustomize or .pth hook that prints on stdout must not leave the planner waiting.
    monkeypatch.setattr(worker_pool, "_SERVE", "print('cuda ready', flush=True); " + worker_pool._SERVE)
    with worker_processes():
        png = draw("cost_figure", **_rows(2))()
        assert all(w.gone for w in worker_pool._workers)
    assert png == draw("cost_figure", **_rows(2))()


def test_the_worker_runs_this_planner_whatever_the_current_folder(tmp_path, monkeypatch):
    # A folder holding another `planner` package must not change what the worker imports.
    fake = tmp_path / "planner"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('the wrong planner')\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with worker_processes():
        png = draw("cost_figure", **_rows(3))()
        assert not any(w.gone for w in worker_pool._workers)  # answered by the worker, not drawn here
    assert png == draw("cost_figure", **_rows(3))()


def _setup():
    from planner.catalog import load_catalog
    from planner.histogram import Histogram
    from planner.plan_setup import setup_plan
    from planner.scenario import Scenario

    catalog = load_catalog()
    scn = Scenario.model_validate({
        "name": "sweep", "model": "llama-3.1-8b", "context_limit": 8192,
        "traffic": {"source": {"constant": {"prompt_tokens": 1000, "output_tokens": 200}},
                    "peak": {"method": "explicit", "rps": 40}},
        "slo": {"bands": [{"ttft_s": 0.5, "tpot_ms": 60}]}, "gpus": ["h100-sxm", "l40s"], "tp": [1],
        "weight_dtypes": ["bf16"], "kv_dtypes": ["bf16"], "sizing": {"mode": "expected"},
    })
    return setup_plan(scn, catalog, catalog.model("llama-3.1-8b"), Histogram.constant(1000, 200, 100), 40.0)


def test_the_context_lever_a_worker_computes_is_the_one_computed_here():
    from planner.exploration import start_context_lever

    st = _setup()
    here = start_context_lever(st, Resolver(st.scn))()
    with worker_processes():
        there = start_context_lever(st, Resolver(st.scn))()
        assert not any(w.gone for w in worker_pool._workers)
    assert here.name.startswith("context limit 4,096") and here.feasible
    assert (there.name, there.cost_per_hour, there.gpus, there.summary) == (here.name, here.cost_per_hour, here.gpus,
                                                                           here.summary)


def test_a_workers_jobs_for_one_plan_share_its_replica_models(monkeypatch):
    # Each job arrives with its own copy of the plan's classes; the worker maps an equal histogram to
    # the copy it holds, so a later job finds the replica model an earlier one built, and its answer
    # is the one a fresh evaluator computes.
    from planner import evaluator as ev_module
    from planner.evaluator import Evaluator, job_evaluator

    st = _setup()
    built = []

    class Counted(ev_module.ReplicaModel):
        def __init__(self, *a, **kw):
            built.append(1)
            super().__init__(*a, **kw)

    monkeypatch.setattr(ev_module, "ReplicaModel", Counted)
    monkeypatch.setattr(ev_module, "_standing_in", {})
    cfg = st.configs[0]
    first, classes = job_evaluator("plan", st.scn, st.catalog, st.model, pickle.loads(pickle.dumps(st.classes)))
    answer = first.evaluate(cfg, classes["none"][0]).capacity_rps
    assert len(built) == 1
    again, same = job_evaluator("plan", st.scn, st.catalog, st.model, pickle.loads(pickle.dumps(st.classes)))
    assert same["none"][0].hist is classes["none"][0].hist
    assert again.evaluate(cfg, same["none"][0]).capacity_rps == answer
    assert len(built) == 1  # found, not built again
    fresh = Evaluator(st.scn, st.catalog, st.model).evaluate(cfg, st.classes["none"][0]).capacity_rps
    assert fresh == answer and len(built) == 2


def test_the_ttft_sweep_a_worker_computes_is_the_one_computed_here_calibration_included():
    from planner.exploration import start_ttft_sweep

    st = _setup()

    def rows(sweep):  # what the report shows (a solution's timings differ from run to run)
        return [(m, o.name, o.feasible, o.cost_per_hour, o.gpus, o.summary, o.why_not, o.solution.pools)
                for m, o in sweep]

    plain = start_ttft_sweep(st, Resolver(st.scn))()
    # What certification does when a pool misses: the class's capacities scale by simulated / model.
    measured = next(e for e in st.evals if e.capacity is not None and e.capacity.max_rps > 0)
    st.evaluator.record_simulated(measured, measured.capacity.max_rps * 0.6)
    here = start_ttft_sweep(st, Resolver(st.scn))()
    with worker_processes():
        there = start_ttft_sweep(st, Resolver(st.scn))()
        assert not any(w.gone for w in worker_pool._workers)  # answered by the worker
    assert rows(there) == rows(here)
    assert rows(here) != rows(plain)  # the calibration travelled


def test_a_job_started_again_shares_the_first_ones_answer(monkeypatch):
    # A command draws a figure ahead of its report; the report's own request must not draw it twice.
    sent = []
    submit = worker_pool._Worker.submit
    monkeypatch.setattr(worker_pool._Worker, "submit", lambda self, payload: sent.append(1) or submit(self, payload))
    with worker_processes():
        ahead = draw("cost_figure", **_rows(5))
        again = draw("cost_figure", **_rows(5))
        other = draw("cost_figure", **_rows(6))
        assert again is ahead and other is not ahead
        assert len(sent) == 2
        png = again()
    assert png == draw("cost_figure", **_rows(5))()
    assert not worker_pool._started  # nothing outlives the block


def test_a_prestarted_worker_is_the_next_blocks_and_one_no_block_takes_ends(monkeypatch):
    monkeypatch.delenv("PLANNER_WORKERS", raising=False)
    worker_pool.prestart()
    started = list(worker_pool._prestarted)
    assert len(started) == 1
    with worker_processes():
        assert worker_pool._workers == started and not worker_pool._prestarted
        assert draw("cost_figure", **_rows(3))().startswith(b"\x89PNG")
        assert not started[0].gone
    worker_pool.prestart()
    unused = worker_pool._prestarted[0]
    with worker_processes(False):  # a command that wants no worker (solve --no-report)
        assert not worker_pool._workers and not worker_pool._prestarted
    assert unused.proc.wait(timeout=60) == 0  # its stdin closed: it ends once its imports are done


@pytest.mark.parametrize(("args", "starts"), [
    (["solve", "scenarios/a.yaml"], True), (["--debug", "forecast", "a.yaml"], True),
    (["solve", "a.yaml", "--no-report"], False), (["solve", "--help"], False), (["workload", "show", "x"], False),
    ([], False),
])
def test_the_entry_point_prestarts_a_worker_for_commands_that_use_one(args, starts):
    from planner.entry import uses_workers

    assert uses_workers(args) is starts


def test_the_entry_point_imports_without_collections_and_freezes_what_they_made(monkeypatch):
    """The collector is off while the command line is imported (and a worker prestarted), and on
    again for the command, with the imported objects out of its generations (planner.startup)."""
    import gc

    import planner.cli
    from planner import entry

    seen = {}
    monkeypatch.setattr(worker_pool, "prestart", lambda: seen.setdefault("collecting while importing", gc.isenabled()))
    monkeypatch.setattr(planner.cli, "run", lambda: seen.update(collecting=gc.isenabled(), frozen=gc.get_freeze_count()))
    monkeypatch.setattr(sys, "argv", ["planner", "solve", "a.yaml"])
    try:
        entry.run()
    finally:
        gc.unfreeze()
        gc.enable()
    assert seen["collecting while importing"] is False
    assert seen["collecting"] is True and seen["frozen"] > 1000


def test_a_scenarios_figures_are_started_as_its_explorations_are_known(tmp_path, monkeypatch):
    """`planner solve` starts a scenario's figures once what they show is known, after the per-GPU
    plans' certification (which prices the explorations they show), with the arguments its report
    gives them: the report sends the worker no job, and its files are those drawn with no worker."""
    from click.testing import CliRunner
    from scenario_files import write_scenario

    from planner import exploration, report
    from planner.cli import main

    events = []
    submit, per_gpu, start_figures = worker_pool._Worker.submit, exploration._per_gpu, report.start_figures
    claimed_here = exploration.claimed_here

    def sent(self, payload, **kw):
        events.append(pickle.loads(payload)[0])
        return submit(self, payload, **kw)

    monkeypatch.setattr(worker_pool._Worker, "submit", sent)
    monkeypatch.setattr(exploration, "_per_gpu", lambda *a, **kw: events.append("per-GPU plans") or per_gpu(*a, **kw))
    monkeypatch.setattr(exploration, "claimed_here", lambda *a: events.append("sweep read") or claimed_here(*a))
    monkeypatch.setattr(report, "start_figures", lambda *a, **kw: events.append("figures") or start_figures(*a, **kw))
    path = write_scenario(tmp_path, """
        name: ahead
        model: llama-3.1-8b
        context_limit: 16384
        traffic:
          source: {constant: {prompt_tokens: 2000, output_tokens: 200}}
          peak: {method: explicit, rps: 4}
        slo: {bands: [{ttft_s: 2.0, tpot_ms: 60}]}
        gpus: [h100-sxm, l40s]
        tp: [1]
        weight_dtypes: [bf16]
        kv_dtypes: [fp8]
        simulation: {requests: 1000, band_requests: 1000}
    """)
    r = CliRunner().invoke(main, ["solve", str(path), "--out-dir", str(tmp_path / "ahead")])
    assert r.exit_code == 0, r.output
    jobs = [e for e in events if e.startswith("figures:")]
    assert sorted(jobs) == ["figures:cost_figure", "figures:target_figure", "figures:traffic_figure"]
    assert events.index("per-GPU plans") < events.index("figures")  # their replays price what the figures show
    # the cost figure as soon as the levers are known, the TTFT figure once the sweep is read
    assert events.index("figures:cost_figure") < events.index("sweep read") < events.index("figures:target_figure")
    report_call = len(events) - events[::-1].index("figures") - 1
    assert not [e for e in events[report_call:] if e.startswith("figures:")]  # the report's: all started
    monkeypatch.setenv("PLANNER_WORKERS", "0")
    r = CliRunner().invoke(main, ["solve", str(path), "--out-dir", str(tmp_path / "here")])
    assert r.exit_code == 0, r.output
    files = sorted(p.name for p in (tmp_path / "ahead").iterdir())
    assert len(files) == 4 and files == sorted(p.name for p in (tmp_path / "here").iterdir())
    assert all((tmp_path / "ahead" / f).read_bytes() == (tmp_path / "here" / f).read_bytes() for f in files)


def test_a_job_goes_to_the_worker_with_the_least_ahead_of_it():
    # Queued work counts first, then shared and claimable jobs: a figure sent to the worker holding
    # a fleet's TTFT sweeps would wait for all of them while the other worker idles.
    from concurrent.futures import Future

    def worker(*shared: bool) -> worker_pool._Worker:
        w = object.__new__(worker_pool._Worker)  # its bookkeeping only: no process
        w.lock, w.pending = worker_pool.threading.Lock(), []
        for flag in shared:
            w.pending.append(Future())
            w.pending[-1].shared = flag
        return w

    sweeps, idle = worker(*[True] * 16), worker()
    assert worker_pool._least_behind([sweeps, idle]) is idle
    assert worker_pool._least_behind([idle, sweeps]) is idle
    figure, more_sweeps = worker(False), worker(True, True)
    assert worker_pool._least_behind([figure, more_sweeps]) is more_sweeps
    assert worker_pool._least_behind([worker(False, True), worker(False, True, True)]).behind == (1, 2)


def test_planner_workers_0_runs_every_job_here(monkeypatch):
    monkeypatch.setenv("PLANNER_WORKERS", "0")
    with worker_processes():
        assert not worker_pool._workers
        png = draw("cost_figure", **_rows(7))()
    assert png.startswith(b"\x89PNG")


def _lazy_setup(monkeypatch, limit: int, thresholds: list[int], *, seed: int, requests: int, short_share: float,
                short_tokens: tuple[int, int], long_tokens: tuple[int, int]):
    """A plan's setup with short and long prompts and the lazy search forced: (scenario, catalog, setup)."""
    import numpy as np

    from planner import plan_search
    from planner.catalog import load_catalog
    from planner.histogram import Histogram
    from planner.plan_setup import setup_plan
    from planner.scenario import Scenario

    monkeypatch.setattr(plan_search, "LAZY_MIN_PAIRS", 0)
    catalog = load_catalog()
    scn = Scenario.model_validate({
        "name": "lazy", "model": "llama-3.1-8b", "context_limit": limit, "split_thresholds": thresholds,
        "traffic": {"source": {"constant": {"prompt_tokens": 1000, "output_tokens": 200}},
                    "peak": {"method": "explicit", "rps": 30}},
        "slo": {"bands": [{"ttft_s": 1.0, "tpot_ms": 60}]}, "gpus": ["h100-sxm", "h200", "l40s"], "tp": [1, 2],
        "weight_dtypes": ["bf16", "fp8"], "kv_dtypes": ["bf16"], "sizing": {"mode": "expected"},
    })
    rng = np.random.default_rng(seed)
    prompt = np.where(rng.random(requests) < short_share, rng.integers(*short_tokens, requests),
                      rng.integers(*long_tokens, requests))
    hist = Histogram.from_arrays(prompt, rng.integers(50, 400, requests))
    return scn, catalog, setup_plan(scn, catalog, catalog.model("llama-3.1-8b"), hist, 30.0)


def test_the_lazy_sweep_from_a_fresh_evaluator_is_the_one_from_the_plans_evaluator(monkeypatch):
    # The worker's sweep starts from an empty evaluator; this process's from the plan's, whose
    # bounds and guesses steer the lazy search. With the lazy search forced and the unsplit class
    # calibrated (so that splitting competes), both must find the same plans.
    from planner.exploration import _ttft_sweep, ttft_sweep

    scn, catalog, st = _lazy_setup(monkeypatch, 16384, [4096], seed=3, requests=400, short_share=0.8,
                                   short_tokens=(200, 2000), long_tokens=(5000, 12000))
    whole = next(e for e in st.evals if e.traffic_class.option == "none" and e.capacity is not None
                 and e.capacity.max_rps > 0)
    st.evaluator.record_simulated(whole, whole.capacity.max_rps * 0.5)
    tc = whole.traffic_class
    calibration = {(tc.option, tc.name, tc.max_model_len): 0.5}

    def rows(sweep):
        return [(m, o.feasible, round(o.cost_per_hour, 9), o.gpus, o.summary) for m, o in sweep]

    from planner.latency import LatencyModel

    points = []  # latency points computed
    at = LatencyModel.at
    monkeypatch.setattr(LatencyModel, "at", lambda *a, **kw: points.append(1) or at(*a, **kw))

    def counted(sweep):
        points.clear()
        return rows(sweep()), len(points)

    here, _ = counted(lambda: _ttft_sweep(scn, catalog, st.model, st.configs, st.classes, {}, st.evaluator, calibration))
    fresh, fresh_points = counted(lambda: ttft_sweep(scn, catalog, st.model, st.configs, st.classes, {}, calibration))
    # The plan's evaluations and bounds handed to a worker (Evaluator.known) steer its searches only.
    known = st.evaluator.known(st.configs, st.classes)
    steered, steered_points = counted(lambda: ttft_sweep(scn, catalog, st.model, st.configs, st.classes, {}, calibration,
                                                           known=pickle.loads(pickle.dumps(known))))
    uncalibrated = rows(ttft_sweep(scn, catalog, st.model, st.configs, st.classes, {}, {}))
    assert fresh == here == steered
    assert steered_points < fresh_points
    assert fresh != uncalibrated


def test_the_context_lever_starts_from_the_plans_evaluations_of_the_classes_it_shares(monkeypatch):
    # At the lower limit, a threshold below it keeps its short class as it was (the same requests,
    # limit and targets): the plan's evaluations of that class steer the lever's search, never its answer.
    from planner.exploration import _same_classes, context_lever
    from planner.latency import LatencyModel
    from planner.plan_objects import traffic_classes

    scn, catalog, st = _lazy_setup(monkeypatch, 32768, [4096, 8192, 16384], seed=5, requests=600, short_share=0.7,
                                   short_tokens=(200, 3000), long_tokens=(5000, 28000))
    lower = traffic_classes(scn, st.served.select_total(at_most=16384), 16384, 15.0)
    assert {k: [tc.name for tc in tcs] for k, tcs in _same_classes(lower, st.classes).items()} == {
        "4096": ["short"], "8192": ["short"]}
    known = st.evaluator.known(st.configs, st.classes)
    points = []
    at = LatencyModel.at
    monkeypatch.setattr(LatencyModel, "at", lambda *a, **kw: points.append(1) or at(*a, **kw))

    def lever(**kw):
        points.clear()
        o = context_lever(scn, catalog, st.model, st.served, st.limit, st.peak_rps, st.configs, {}, **kw)
        return (o.name, o.feasible, round(o.cost_per_hour, 9), o.gpus, o.summary), len(points)

    fresh, fresh_points = lever()
    steered, steered_points = lever(classes=st.classes, known=pickle.loads(pickle.dumps(known)))
    assert fresh[0].startswith("context limit 16,384") and fresh[1]
    assert steered == fresh
    assert steered_points < fresh_points


def test_a_stopped_worker_is_given_up_a_queue_that_keeps_being_answered_is_not(monkeypatch):
    import os
    import signal

    ran_here = []
    run = worker_pool._run
    monkeypatch.setattr(worker_pool, "_run", lambda job, kwargs: ran_here.append(job) or run(job, kwargs))
    monkeypatch.setattr(worker_pool, "MAX_WORKERS", 1)
    with worker_processes():
        (worker,) = worker_pool._workers
        draw("cost_figure", **_rows(8))()  # the worker has started and answers
        monkeypatch.setattr(worker_pool, "JOB_TIMEOUT_S", 0.5)
        queued = [draw("cost_figure", **_rows(10 + i)) for i in range(12)]  # more than 0.5 s of work in all
        pngs = [result() for result in reversed(queued)][::-1]  # the last first: it waits for all the others
        assert not worker.gone and ran_here == []  # answered one after another: all by the worker
        os.kill(worker.proc.pid, signal.SIGSTOP)
        png = draw("cost_figure", **_rows(30))()  # given up after 0.5 s without an answer
        assert worker.gone and ran_here == ["figures:cost_figure"]
    assert pngs == [draw("cost_figure", **_rows(10 + i))() for i in range(12)]
    assert png == draw("cost_figure", **_rows(30))()


def _until_the_worker_claims(folder) -> None:
    """Wait (at most a minute) until the worker has claimed an item of shared_map, from within this
    process's first item (which it takes without a claim, so any claim is the worker's): the
    claims folder lies under `folder` (tempfile.tempdir in the test). Each side's share is then
    decided by the claims, not by how fast the machine runs."""
    import time

    deadline = time.monotonic() + 60.0
    while not list(folder.glob("planner-claims-*/claims/*")):
        assert time.monotonic() < deadline, "the worker claimed no item in a minute"
        time.sleep(0.01)


def test_a_shared_list_is_worked_from_both_ends_each_item_once(monkeypatch, tmp_path):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ran_here = []

    def here(item):
        ran_here.append(item["title"])
        if len(ran_here) == 1:  # the worker takes the items at the back meanwhile
            _until_the_worker_claims(tmp_path)
        return worker_pool._run("figures:cost_figure", item)

    items = [_rows(i) for i in range(12)]
    with worker_processes():
        draw("cost_figure", **_rows(99))()  # the worker has started and answers
        pngs = list(worker_pool.shared_map("figures:cost_figure", items, here))
    assert pngs == [draw("cost_figure", **item)() for item in items]
    # this process took a run from the front, the worker the rest: each drawn once
    assert ran_here == [f"figure {i}" for i in range(len(ran_here))] and 0 < len(ran_here) < len(items)


def test_evaluations_shared_with_a_worker_are_the_ones_computed_here(monkeypatch, tmp_path):
    import tempfile

    from planner import evaluator as evaluator_module
    from planner.catalog import load_catalog
    from planner.evaluator import Evaluator
    from planner.histogram import Histogram
    from planner.plan_objects import candidate_configs, traffic_classes
    from planner.scenario import Scenario

    catalog = load_catalog()
    scn = Scenario.model_validate({
        "name": "shared", "model": "llama-3.1-8b", "context_limit": 8192,
        "traffic": {"source": {"constant": {"prompt_tokens": 1000, "output_tokens": 200}},
                    "peak": {"method": "explicit", "rps": 40}},
        "slo": {"bands": [{"ttft_s": 0.5, "tpot_ms": 60}]},
        "gpus": ["h100-sxm", "h200", "a100-80gb", "l40s", "l4", "a10g"], "tp": [1, 2],
        "weight_dtypes": ["bf16", "fp8"], "kv_dtypes": ["bf16", "fp8"], "sizing": {"mode": "expected"},
    })
    model = catalog.model("llama-3.1-8b")
    classes = traffic_classes(scn, Histogram.constant(1000, 200, 100), 8192, 40.0)
    configs = candidate_configs(scn, catalog, model, scn.weight_dtypes, scn.kv_dtypes)

    def evaluations():
        ev = Evaluator(scn, catalog, model)
        found = ev.evaluate_all(classes, configs)
        return ev, [(e.config.label(8192), e.capacity.max_rps if e.capacity else None, e.problem, e.dominated_by)
                    for e in found]

    here_ev, here = evaluations()
    shares_here = []
    records_of = Evaluator._records_of

    def slowly_here(self, share):  # the first share waits for the worker to take the last one
        shares_here.append(1)
        if len(shares_here) == 1:
            _until_the_worker_claims(tmp_path)
        return records_of(self, share)

    monkeypatch.setattr(Evaluator, "_records_of", slowly_here)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with worker_processes():
        draw("cost_figure", **_rows(0))()  # the worker has started and answers
        there_ev, there = evaluations()
    assert there == here and there_ev.upper == here_ev.upper
    assert any(d for *_, d in here) and any(c for _, c, *_ in here)  # both kinds of result travelled
    assert 0 < len(shares_here) < evaluator_module.SHARES  # the worker took a share


def test_an_item_is_claimed_once_and_a_claim_after_the_end_fails(tmp_path, monkeypatch):
    claim = str(tmp_path / "3")
    assert worker_pool._claim(claim) is True
    assert worker_pool._claim(claim) is False  # the other process's now
    assert worker_pool._claim(str(tmp_path / "over" / "4")) is False  # the claims folder is gone: the list is done
    ran = []
    monkeypatch.setattr(worker_pool, "_run", lambda job, kwargs: ran.append(job) or "drawn")
    job = pickle.dumps(("figures:cost_figure", {}))
    assert worker_pool._claimed(claim, job) is None and ran == []  # not the worker's to do
    assert worker_pool._claimed(str(tmp_path / "5"), job) == "drawn"
    # the message a worker is sent runs that function on those arguments
    name, kwargs = pickle.loads(worker_pool._claimed_payload(str(tmp_path / "6"), ("figures:cost_figure", {})))
    assert name == "worker_pool:_claimed" and worker_pool._claimed(**kwargs) == "drawn" and ran == ["figures:cost_figure"] * 2


def test_a_claimable_job_the_worker_has_not_begun_runs_here_once(tmp_path, monkeypatch):
    # A job queued behind others is this process's when its answer is asked for first: the worker,
    # reaching it later, finds it claimed and answers None; the folder of claims goes with the block.
    import os
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ran_here = []
    with worker_processes():
        ahead = [draw("cost_figure", **_rows(i)) for i in range(3)]  # the worker's queue
        late = worker_pool.start_claimable("figures:cost_figure", here=lambda: ran_here.append(1) or b"here", **_rows(9))
        assert late() == b"here" and late() == b"here" and ran_here == [1]  # claimed here, asked twice, run once
        [folder] = os.listdir(tmp_path)
        assert len(os.listdir(tmp_path / folder / "claims")) == 1
        assert [f() for f in ahead] == [draw("cost_figure", **_rows(i))() for i in range(3)]
        worker = worker_pool._workers[0]
        assert not worker.gone
    assert os.listdir(tmp_path) == []


def test_a_claimable_job_claimed_before_it_is_asked_for_is_skipped_by_the_worker(tmp_path, monkeypatch):
    # claimed_here: a job the worker has not begun is this process's at once (the worker, stopped
    # meanwhile so that it cannot begin it, skips it and answers the job behind it); one the worker has
    # answered is its; a job started with no worker runs here.
    import signal
    import tempfile
    import time

    from planner import figures

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ran_here = []
    with worker_processes():
        done = worker_pool.start_claimable("figures:cost_figure", here=lambda: pytest.fail("run here"), **_rows(5))
        worker = worker_pool._workers[0]
        deadline = time.monotonic() + 120
        while worker.pending and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not worker.pending
        os.kill(worker.proc.pid, signal.SIGSTOP)
        try:
            mine = worker_pool.start_claimable("figures:cost_figure", here=lambda: ran_here.append(1) or b"here",
                                               **_rows(10))
            behind = draw("cost_figure", **_rows(11))
            assert worker_pool.claimed_here(mine) and worker_pool.claimed_here(mine)  # once claimed, mine
            assert not worker_pool.claimed_here(done)  # answered by the worker: its
        finally:
            os.kill(worker.proc.pid, signal.SIGCONT)
        assert behind() == figures.cost_figure(**_rows(11))  # the worker went on past the claimed job
        assert ran_here == [] and mine() == b"here" and ran_here == [1]
        assert done() == figures.cost_figure(**_rows(5))
    monkeypatch.setenv("PLANNER_WORKERS", "0")
    with worker_processes():
        alone = worker_pool.start_claimable("figures:cost_figure", **_rows(2))
        assert worker_pool.claimed_here(alone) and alone() == figures.cost_figure(**_rows(2))


def test_a_claimable_job_the_worker_has_done_is_its_answer(tmp_path, monkeypatch):
    import tempfile
    import time

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with worker_processes():
        job = worker_pool.start_claimable("figures:cost_figure", here=lambda: pytest.fail("run here"), **_rows(4))
        worker = worker_pool._workers[0]
        deadline = time.monotonic() + 120
        while worker.pending and time.monotonic() < deadline:  # the worker answers it before it is asked for
            time.sleep(0.05)
        png = job()
    assert png == draw("cost_figure", **_rows(4))()


def test_claimable_jobs_without_a_worker_run_here(monkeypatch):
    monkeypatch.setenv("PLANNER_WORKERS", "0")
    with worker_processes():
        job = worker_pool.start_claimable("figures:cost_figure", **_rows(2))
        assert job() == draw("cost_figure", **_rows(2))()


def test_a_killed_runs_claims_folder_is_removed_by_the_next_run_and_a_live_ones_is_kept():
    ended = subprocess.Popen([sys.executable, "-c", "pass"])  # a process that has ended, as a killed run's has
    ended.wait()
    stale = tempfile.mkdtemp(prefix=f"planner-claims-{ended.pid}-")
    live = tempfile.mkdtemp(prefix=worker_pool._claims_prefix())
    worker_pool._remove_stale_claims.cache_clear()  # (once a process: an earlier test may have run it)
    try:
        worker_pool._remove_stale_claims()
        assert not os.path.exists(stale) and os.path.isdir(live)
    finally:
        shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(live, ignore_errors=True)


def test_jobs_side_by_side_answer_in_the_items_order_whoever_ends_first(monkeypatch):
    """The first item's job waits for the second's to end: its answer still comes first."""
    import threading

    monkeypatch.setattr(worker_pool, "usable_cores", lambda: 2)
    second_done = threading.Event()

    def job(item: int) -> int:
        if item == 0:
            assert second_done.wait(30)
        else:
            second_done.set()
        return item * 10

    assert worker_pool.side_by_side(job, [0, 1]) == [0, 10]


def test_a_ctrl_c_side_by_side_does_not_wait_for_the_jobs_still_running(monkeypatch):
    """A Ctrl-C while jobs run (a fleet's re-solves, each allowed its time limit) reaches the main
    thread, which waits on them: the call raises at once, and the jobs still running are left to end
    by themselves."""
    import signal
    import threading
    import time

    monkeypatch.setattr(worker_pool, "usable_cores", lambda: 2)
    release, ended = threading.Event(), []
    main = threading.main_thread().ident

    def job(item: int) -> int:
        if item == 0:
            time.sleep(0.2)  # the main thread waits on the answers by then
            signal.pthread_kill(main, signal.SIGINT)  # as a terminal's Ctrl-C: to the main thread
        release.wait(5)  # waited for, the call would return only after this
        ended.append(item)
        return item

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            worker_pool.side_by_side(job, [0, 1])
        assert ended == []
    finally:
        release.set()
        signal.signal(signal.SIGINT, previous)
