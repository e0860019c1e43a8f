"""The benches' own code paths that take a planner API or count a run: bench/solve.py's joint ILP,
solved by each backend on the same candidates, and its count of a command's CPU with the worker the
command leaves behind; bench/latency_points.py's replay of a solve's latency points."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from bench_scripts import load_bench
from test_fleet import write_fleet


def test_the_joint_ilp_alone_is_solved_by_each_backend_at_the_same_cost(tmp_path, capsys):
    load_bench("solve").joint_ilp(write_fleet(tmp_path), ["highs", "cbc"])
    out = capsys.readouterr().out
    assert re.search(r"the fleet's ILP alone \(\d+ candidates after dominance\)", out)
    costs = dict(re.findall(r"^\s+(highs|cbc)\s*: median .* \$([\d,.]+)/hour", out, re.M))
    assert set(costs) == {"highs", "cbc"} and costs["highs"] == costs["cbc"], out


def test_the_floor_case_is_the_rollout_narrowed_to_one_config(tmp_path):
    from planner.scenario import load_scenario

    bench = load_bench("solve")
    shipped, _ = load_scenario(bench.ROOT / "scenarios" / "128k_rollout.yaml")
    narrowed, _ = load_scenario(bench.one_config(tmp_path))
    for key in ("tp", "weight_dtypes", "kv_dtypes", "split_thresholds"):
        assert getattr(narrowed, key) == getattr(shipped, key)[:1], key
    assert [g.id for g in narrowed.gpu_candidates] == [shipped.gpu_candidates[0].id]
    assert narrowed.slo == shipped.slo and narrowed.traffic == shipped.traffic


# Run in a process of its own (so that this test process adopts nothing), with bench/solve.py's
# counted_run: 'adopt' and 'leave' run a command that starts a child burning 0.4 CPU-s and ends at
# once, the child's streams its own, as `planner solve` leaves its worker; 'before' leaves such a
# child of this process itself, waited for by a thread (as an in-process run's closed worker is),
# and runs a command that does nothing.
_LEAVES_A_CHILD = """
import subprocess, sys, threading
sys.path.insert(0, sys.argv[1])
from bench_scripts import load_bench

bench = load_bench("solve")
how = sys.argv[2]
adopted = how != "leave" and bench.adopt_orphans()
burn = [sys.executable, "-c", "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.4:\\n    pass"]
quiet = "stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL"
if how == "before":
    child = subprocess.Popen(burn, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    threading.Thread(target=child.wait, daemon=True).start()
    run = bench.counted_run([sys.executable, "-c", "pass"])
else:
    run = bench.counted_run([sys.executable, "-c", f"import subprocess; subprocess.Popen({burn!r}, {quiet})"])
print(adopted, run.done.returncode, run.cpu_s, run.wall_s, run.until_all_s, run.orphans_cpu_s)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child subreaper is Linux's")
def test_a_run_counts_the_cpu_of_a_child_it_leaves_behind_once_orphans_are_adopted():
    def run(how: str) -> tuple[str, str, float, float, float, float]:
        done = subprocess.run([sys.executable, "-c", _LEAVES_A_CHILD, str(Path(__file__).parent), how],
                              capture_output=True, text=True, check=True)
        adopted, code, *seconds = done.stdout.split()
        return adopted, code, *map(float, seconds)

    adopted, code, cpu_s, wall_s, until_all_s, orphans_cpu_s = run("adopt")
    assert (adopted, code) == ("True", "0") and cpu_s >= 0.4, cpu_s
    assert until_all_s >= wall_s + 0.2  # the command ended long before the child it left
    # the child's CPU is the orphan's; the command's own, its interpreter's start
    assert orphans_cpu_s >= 0.4 and cpu_s - orphans_cpu_s < 0.3, (cpu_s, orphans_cpu_s)
    adopted, code, cpu_s, _, _, _ = run("leave")
    assert (adopted, code) == ("False", "0") and cpu_s < 0.3, cpu_s  # the starter's own start, not the child
    adopted, code, cpu_s, _, _, orphans_cpu_s = run("before")  # the child still ending is waited for before the command starts
    assert (adopted, code) == ("True", "0") and cpu_s < 0.3 and orphans_cpu_s == 0, cpu_s


def test_the_latency_points_replayed_from_scratch_are_the_solves_own(monkeypatch):
    from planner.latency import LatencyModel

    bench = load_bench("latency_points")
    workers = os.environ.get("PLANNER_WORKERS")
    _, asked, searches = bench.record(bench.ROOT / "scenarios" / "chat_8b_h100.yaml")
    assert os.environ.get("PLANNER_WORKERS") == workers  # the recording's setting is not left behind
    built, at = [], LatencyModel.at

    def counted(self, *args, **kwargs):
        built.append(args)
        return at(self, *args, **kwargs)

    monkeypatch.setattr(LatencyModel, "at", counted)
    for _ in range(2):  # the second replay forgets what the first built
        built.clear()
        _, _, points, differ = bench.replay(asked)
        assert searches > 0 and 0 < points <= len(asked) and differ == 0
        assert len(built) == points  # each point built once, none taken from a model's memory
