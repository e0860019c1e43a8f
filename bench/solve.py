"""Time `planner solve` end to end in fresh processes, with a breakdown, on three cases (issue 15):

1. the shipped 128k rollout without simulation (--no-verify): target 1 s; and certified by
   simulation as shipped (issue 11: 3 s); and, as its floor, the same scenario narrowed to one
   config (one_config): what the command costs beyond evaluating many configs (the imports, the
   worker's matplotlib, loading, the report and its figures), an upper bound on what no faster
   evaluation removes (it still evaluates that config and its explorations: about 180 latency points);
2. its full candidate set: 10 GPUs x tp 1-8 x 3 weight dtypes x 2 KV dtypes x 4 split thresholds,
   without simulation: target 3 s;
3. the shipped fleet (8 services) with every service offered every catalog GPU, without
   simulation: target 15 s; and its ILP solved by CBC and by HiGHS.

    python bench/solve.py [--runs 3] [--backends highs,cbc]

Each headline figure is the median of fresh processes running the command line, report included,
with a baseline measured in the same run: the same command with every job in one process
(PLANNER_WORKERS=0), so the gain of the worker process shows as a ratio. On Linux the CPU seconds
of the command and its worker are counted too (the bench adopts the worker, which the command
leaves to end on its own, and its exit takes a little more after the command's): a run on c cores,
from the command's start to its worker's end, takes no less than their CPU over c, so a run whose
time is near that keeps every core busy to its end, and only less work, not another division of it,
makes it faster. The command's own CPU and its worker's are printed apart (the worker's as
os.wait4 reports it when the bench reaps it): where each keeps about one core busy, the one with
more to do sets the end. A worker's start (its interpreter and imports; it gets no job and ends) is timed
once, in fresh processes.
The breakdown comes from one more run in process: loading, capacity evaluation (with the plan's
bookkeeping), ILP model build, solver, certification (with its replays: how many, their simulated
steps, their time and their compiled loop's), report writing, and the work done in that process
(capacity searches, latency points), which load does not change. Prints figures; asserts
nothing. Machine load (os.getloadavg) is printed with every case: on a shared machine it inflates
every time. A fixed reference workload is timed before the cases and after each (reference_s):
the same code runs slower when the machine runs that workload slower (by a quarter or more between
hours of one day here, and within minutes).

Fresh processes load planner's compiled bytecode, as an installed package does (pip compiles
every module at install; a checkout run once writes its __pycache__): the bench compiles the
package first, which matters where PYTHONDONTWRITEBYTECODE is set and nothing would otherwise
be cached (compiling planner's sources on every import costs 0.3-0.5 s a process here).
"""

from __future__ import annotations

import argparse
import compileall
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.in_process import solve_in_process  # noqa: E402
from planner.startup import prepare_process  # noqa: E402

prepare_process()  # the in-process breakdown runs as the command line does (planner.entry)

ISSUE_GPUS = ["h100-sxm", "h100-pcie", "h200", "b200", "a100-80gb", "a100-40gb", "l40s", "l4", "a10g", "mi300x"]


def load() -> str:
    """The machine's state after a case: its load average, and how long the reference workload
    takes now (the machine's speed drifts within minutes, not only between days)."""
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg()) + f"; reference {reference_s():.3f} s"


def reference_s() -> float:
    """Seconds of a fixed workload that no change to the planner touches, the kind the planner's
    own time is made of (interpreted Python, numpy calls on small arrays): the best of three, so
    that figures taken on different days can be read against how fast the machine ran then (a
    shared virtual machine's speed drifts by a quarter from hour to hour)."""
    import numpy as np

    def once() -> float:
        t0 = time.perf_counter()
        total = 0
        for i in range(2_000_000):
            total += i
        x = np.linspace(0.0, 1.0, 64)
        for _ in range(20_000):
            x = np.cumsum(np.sqrt(x)) / 64.0
        return time.perf_counter() - t0

    return min(once() for _ in range(3))


def children_cpu_s() -> float:
    """CPU seconds (user and system) of the child processes this one has waited for."""
    now = os.times()
    return now.children_user + now.children_system


# Whether adopt_orphans made this process the subreaper of its runs' orphans.
ADOPTING = [False]
# The longest a run's orphans (a worker finishing its last job) are waited for before they are named.
ORPHANS_WAIT_S = 120.0


def adopt_orphans() -> bool:
    """Make this process the one that orphaned descendants are handed to (Linux's child subreaper),
    so that a command's worker, which the command leaves to end on its own, is waited for here and
    its CPU counted with the command's (children_cpu_s). False where the system has no such call."""
    try:
        ADOPTING[0] = sys.platform.startswith("linux") and ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (AttributeError, OSError):
        ADOPTING[0] = False
    return ADOPTING[0]


def reap_orphans() -> float:
    """Wait for every child of this process, those handed to it included (a finished command's
    worker ends at the end of its input; a worker of an in-process run is closed, then ends); only
    where adopt_orphans holds. Returns the CPU seconds of those it waited for (os.wait4's usage of
    each: after a command, its worker's). One still running after ORPHANS_WAIT_S would have its CPU
    counted with a later command's: it is named, and CPU is no longer reported."""
    if not ADOPTING[0]:
        return 0.0
    deadline, cpu_s = time.monotonic() + ORPHANS_WAIT_S, 0.0
    with suppress(ChildProcessError):
        while True:
            pid, _, usage = os.wait4(-1, os.WNOHANG)
            if pid:
                cpu_s += usage.ru_utime + usage.ru_stime
                continue
            if time.monotonic() > deadline:
                print(f"  (a child process still runs {ORPHANS_WAIT_S:g} s after its command ended: CPU no longer reported)")
                ADOPTING[0] = False
                return cpu_s
            time.sleep(0.01)
    return cpu_s


@dataclass(frozen=True)
class CountedRun:
    """One command's run: its wall seconds, those until the last process it left behind ended (its
    worker, which ends after the command, where adopt_orphans holds), their CPU seconds, the CPU
    seconds of the processes it left behind alone (orphans_cpu_s: its worker's, where the command ended
    first, as `planner solve` does; a worker it waited for counts as its own), and the finished command."""

    wall_s: float
    until_all_s: float
    cpu_s: float
    orphans_cpu_s: float
    done: subprocess.CompletedProcess


def counted_run(command: list[str], env: dict | None = None) -> CountedRun:
    """One command run in ROOT, counted with its descendants, those it waited for and, where
    adopt_orphans holds, those it left to end on their own (waited for here, after it). Children
    of this process still ending (an in-process run's worker) are waited for first, so that their
    CPU is not counted as the command's."""
    reap_orphans()
    cpu0, t0 = children_cpu_s(), time.perf_counter()
    done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=ROOT, check=False,
                          env=None if env is None else {**os.environ, **env})
    wall_s = time.perf_counter() - t0
    orphans_cpu_s = reap_orphans()
    return CountedRun(wall_s, time.perf_counter() - t0, children_cpu_s() - cpu0, orphans_cpu_s, done)


def fresh(path: Path, flags: list[str], runs: int, env: dict | None = None) -> tuple[list[CountedRun], str]:
    """`planner solve PATH FLAGS` run `runs` times in fresh processes, and a status."""
    counted, status = [], "ok"
    with tempfile.TemporaryDirectory() as out:
        for _ in range(runs):
            run = counted_run([sys.executable, "-m", "planner", "solve", str(path), "--out-dir", out, *flags], env)
            counted.append(run)
            if run.done.returncode != 0:
                status = f"exit {run.done.returncode}: {run.done.stderr.strip()[:300]}"
    return counted, status


def worker_start_cpu_s(runs: int) -> float:
    """Median CPU seconds a worker process spends when it gets no job: its interpreter, the planner
    and matplotlib imported (planner.worker_pool._serve), then its exit at the end of its empty input."""
    from planner.worker_pool import worker_command

    return statistics.median(counted_run(worker_command()).cpu_s for _ in range(runs))


class Breakdown:
    """Wraps the ILP, certification and report writing to time them during one in-process run."""

    def __init__(self):
        self.build = self.solve = self.certify = self.report = 0.0
        self.ilps = self.capacities = self.points = 0
        self.replays = self.steps = 0
        self.replay_s = self.loop_s = 0.0
        self._replay_lock = threading.Lock()  # certification replays pools in threads

    def __enter__(self):
        from planner import (
            evaluator,
            exploration,
            fleet_plan,
            fleet_report,
            ilp,
            latency,
            planning,
            pool_check,
            report,
            sim_capacity,
        )

        self._saved = []

        def wrap(module, name, after):
            original = getattr(module, name)

            def timed(*args, **kwargs):
                t0 = time.perf_counter()
                result = original(*args, **kwargs)
                after(result, time.perf_counter() - t0)
                return result

            self._saved.append((module, name, original))
            setattr(module, name, timed)

        def on_ilp(result, _):
            self.build += result.build_s
            self.solve += result.solve_s
            self.ilps += 1

        def add(attr):
            return lambda _, dt: setattr(self, attr, getattr(self, attr) + dt)

        wrap(ilp, "solve_services", on_ilp)
        wrap(fleet_plan, "solve_services", on_ilp)  # the fleet's joint ILP, imported by name there
        for module in (planning, exploration, fleet_plan):  # where certify_plans is called by name
            wrap(module, "certify_plans", add("certify"))
        wrap(report, "write_report", add("report"))
        wrap(fleet_report, "write_fleet_report", add("report"))

        def count(attr):
            return lambda *_: setattr(self, attr, getattr(self, attr) + 1)

        def on_replay(result, dt):
            run = result[0] if isinstance(result, tuple) else result  # (result, trace) when traced
            with self._replay_lock:
                self.replays, self.steps = self.replays + 1, self.steps + run.steps
                self.replay_s, self.loop_s = self.replay_s + dt, self.loop_s + run.wall_s

        # Certification's replays, where they are called by name: their count, simulated steps, and
        # time (the whole replay, and its compiled loop alone; replays in threads overlap).
        for module in (pool_check, sim_capacity):
            wrap(module, "simulate_replica", on_replay)

        # The work itself, which a shared machine's load does not change: capacity searches and the
        # latency points (LatencyModel.at) they and the lazy search's proofs compute, in this process.
        wrap(evaluator, "replica_capacity", count("capacities"))
        wrap(latency.LatencyModel, "at", count("points"))
        return self

    def __exit__(self, *exc):
        for module, name, original in reversed(self._saved):
            setattr(module, name, original)


def in_process(path: Path, verify: bool) -> tuple[float, float, Breakdown]:
    """One run of the CLI in this process: (load seconds, total seconds, breakdown)."""
    from planner.fleet import is_fleet_file, load_fleet
    from planner.inputs import load_inputs

    t0 = time.perf_counter()
    (load_fleet if is_fleet_file(path) else load_inputs)(path)
    load_s = time.perf_counter() - t0
    with Breakdown() as b:
        total = solve_in_process(path, "--verify" if verify else "--no-verify")
    return load_s, total, b


def case(title: str, path: Path, target: float | None, runs: int, verify: bool = False) -> None:
    from planner.worker_pool import usable_cores

    flags = [] if verify else ["--no-verify"]
    counted, status = fresh(path, flags, runs)
    times = [r.wall_s for r in counted]
    median = statistics.median(times)
    verdict = "" if target is None else f"; target <= {target:g} s: {'met' if median <= target else 'NOT met'}"
    print(f"{title}\n  end to end, fresh processes: median {median:.2f} s of {runs} "
          f"({', '.join(f'{t:.2f}' for t in times)}; {status}){verdict}   [{load()}]")
    alone_counted, alone_status = fresh(path, flags, runs, env={"PLANNER_WORKERS": "0"})
    alone = statistics.median(r.wall_s for r in alone_counted)
    print(f"  baseline, everything in one process (PLANNER_WORKERS=0): median {alone:.2f} s ({alone_status}); "
          f"the worker process makes it {alone / median:.2f}x faster")
    if ADOPTING[0]:  # how far the run is from the least time its CPU allows on these cores
        # (the command's own threads, certification's replays and a fleet's re-solves, may use every core)
        cpu, cores = statistics.median(r.cpu_s for r in counted), usable_cores()
        own = statistics.median(r.cpu_s - r.orphans_cpu_s for r in counted)
        worker = statistics.median(r.orphans_cpu_s for r in counted)
        print(f"  CPU of the command and its worker: median {cpu:.2f} s (the command's own {own:.2f} s, its "
              f"worker's {worker:.2f} s; in one process: "
              f"{statistics.median(r.cpu_s for r in alone_counted):.2f} s); the least time on {cores} cores: "
              f"{cpu / cores:.2f} s, against {statistics.median(r.until_all_s for r in counted):.2f} s from the "
              "command's start to its worker's end")
    load_s, total, b = in_process(path, verify)
    evaluation = total - b.build - b.solve - b.certify - b.report
    print(f"  in process: {total:.2f} s = loading, evaluation and bookkeeping {evaluation:.2f} + model build {b.build:.2f} + "
          f"solver {b.solve:.2f} ({b.ilps} ILPs) + certification {b.certify:.2f} + report {b.report:.2f} "
          f"(loading the inputs alone: {load_s:.2f} s); work: {b.capacities:,} capacity searches, "
          f"{b.points:,} latency points")
    if b.replays:
        print(f"  certification's replays: {b.replays} ({b.steps / 1e6:,.1f} million simulated steps), "
              f"{b.replay_s:.2f} s replaying, of which {b.loop_s:.2f} s in the compiled loop")


def _rollout_variant(tmp: Path, name: str, levers) -> Path:
    """The shipped 128k rollout with its candidate lists changed by `levers` (the scenario's dict to
    its new lists), written as `name`.yaml in tmp."""
    scn = yaml.safe_load((ROOT / "scenarios" / "128k_rollout.yaml").read_text(encoding="utf-8"))
    scn.update(levers(scn), name=name)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(scn, sort_keys=False), encoding="utf-8")
    return path


def full_candidate_set(tmp: Path) -> Path:
    return _rollout_variant(tmp, "rollout_full_set", lambda _: {
        "gpus": ISSUE_GPUS, "tp": [1, 2, 4, 8], "weight_dtypes": ["bf16", "fp8", "int4"], "kv_dtypes": ["bf16", "fp8"],
        "split_thresholds": [8192, 16384, 32768, 65536]})


def one_config(tmp: Path) -> Path:
    """The 128k rollout with only the first of its GPUs, tp degrees, dtypes and split thresholds: the
    same command, traffic, targets and explorations over one config (and the fp8 levers' variants)."""
    return _rollout_variant(tmp, "rollout_one_config", lambda scn: {
        key: scn[key][:1] for key in ("gpus", "tp", "weight_dtypes", "kv_dtypes", "split_thresholds")})


def fleet_full_catalog(tmp: Path, backend: str) -> Path:
    from planner.catalog import load_catalog

    gpus = sorted(load_catalog().gpus)
    fleet = yaml.safe_load((ROOT / "scenarios" / "fleet_2027q1.yaml").read_text(encoding="utf-8"))
    services = []
    for entry in fleet["services"]:
        scn = yaml.safe_load((ROOT / "scenarios" / entry).read_text(encoding="utf-8")) if isinstance(entry, str) else entry
        services.append({**scn, "gpus": gpus})
    fleet.update(name=f"fleet_full_catalog_{backend}", services=services, solver={"backend": backend})
    fleet.pop("forecast", None)
    path = tmp / f"fleet_full_catalog_{backend}.yaml"
    path.write_text(yaml.safe_dump(fleet, sort_keys=False), encoding="utf-8")
    return path


def joint_ilp(path: Path, backends: list[str]) -> None:
    """The fleet's ILP alone, by each solver, on the same candidates."""
    from planner.fleet import load_fleet
    from planner.fleet_plan import _setup
    from planner.ilp import solve_services
    from planner.plan_search import scenario_caps, service_model

    fleet = load_fleet(path)
    setups = [_setup(svc, 1.0, None) for svc in fleet.services]
    models = [service_model(st.scn, st.classes, st.evals, name=svc.name, inventory=scenario_caps(st.scn))
              for svc, st in zip(fleet.services, setups, strict=True)]
    print(f"  the fleet's ILP alone ({sum(len(m.candidates) for m in models)} candidates after dominance):")
    for backend in backends:
        times, cost = [], None
        for _ in range(3):
            j = solve_services(models, inventory=fleet.shared_caps, reserved=fleet.commitments,
                               max_gpu_types=fleet.spec.max_gpu_types, backend=backend)
            times.append(j.solve_s + j.build_s)
            cost = j.cost_per_hour
        print(f"    {backend:5s}: median {statistics.median(times):.2f} s of 3 "
              f"({', '.join(f'{t:.2f}' for t in times)}), ${cost:,.2f}/hour   [{load()}]")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--backends", default="highs,cbc",
                    help="solvers for case 3 (CBC takes minutes a run on the full catalog): highs,cbc")
    args = ap.parse_args()
    backends = [b for b in args.backends.split(",") if b]
    rollout = ROOT / "scenarios" / "128k_rollout.yaml"
    compileall.compile_dir(ROOT / "planner", quiet=1)
    print(f"planner's bytecode compiled (as pip install leaves it); PYTHONDONTWRITEBYTECODE="
          f"{os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}")
    print(f"machine speed, before: a fixed reference workload takes {reference_s():.3f} s (reference_s; lower is faster; "
          "printed again after each case)")
    from planner.worker_pool import MAX_WORKERS, usable_cores

    # The workers a run may start depend on the cores (planner.worker_pool): figures from machines
    # with different counts compare different parallelism, not only different speeds.
    print(f"cores this process may use: {usable_cores()}; worker processes a run may start: {MAX_WORKERS}")
    adopt_orphans()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        print(f"a worker process's start (the interpreter, the planner and matplotlib imported): "
              f"{worker_start_cpu_s(args.runs):.2f} CPU-s, median of {args.runs}")
        case("1. 128k rollout (shipped), without simulation", rollout, 1.0, args.runs)
        case("   floor: the 128k rollout narrowed to one config, without simulation", one_config(tmp), None, args.runs)
        case("   128k rollout (shipped), certified by simulation (issue 11)", rollout, 3.0, args.runs, verify=True)
        case("2. its full candidate set (10 GPUs x tp 1-8 x 3 weight x 2 KV dtypes x 4 thresholds), without simulation",
             full_candidate_set(tmp), 3.0, args.runs)
        for backend in backends:
            path = fleet_full_catalog(tmp, backend)
            case(f"3. the shipped fleet, 8 services on the full catalog, without simulation (solver: {backend})",
                 path, 15.0, args.runs)
        joint_ilp(fleet_full_catalog(tmp, "highs"), backends)
    print(f"machine speed, after: the reference workload takes {reference_s():.3f} s")


if __name__ == "__main__":
    main()
