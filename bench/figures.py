"""CPU time of drawing each report figure (planner.figures), against planner/figures.py as it was
at a git revision, the baseline, measured in the same run (issue 15):

    python bench/figures.py [--baseline REV] [--runs 10] [--scenario scenarios/128k_rollout.yaml ...]

The arguments of every figure come from solving each scenario in this process, without
simulation (PLANNER_WORKERS=0, so the figures are drawn here, where they are recorded). Each call
is then drawn --runs times by the current module and by the baseline, interleaved (old, new,
old, new: both see the same machine load), each draw timed by time.process_time. Prints, per
call and summed per figure kind, the median CPU-s of both and new/old. The baseline's module is
`git show REV:planner/figures.py`, loaded beside the current one (it imports planner.histogram
from this checkout). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["PLANNER_WORKERS"] = "0"  # before planner is imported: every figure drawn in this process

import planner.figures as current  # noqa: E402
from planner.cli import main as planner_main  # noqa: E402

KINDS = ("traffic_figure", "cost_figure", "target_figure")  # what `planner solve` draws


def baseline_module(rev: str, folder: Path):
    """planner/figures.py at `rev`, as a module of its own."""
    shown = subprocess.run(["git", "show", f"{rev}:planner/figures.py"], cwd=ROOT, check=False,
                           capture_output=True, text=True)
    if shown.returncode != 0:  # a checkout without history (an archive, a shallow clone) has no baseline to time
        raise SystemExit(f"bench/figures.py: the baseline is planner/figures.py at git revision {rev}, which this "
                         f"checkout cannot show ({shown.stderr.strip() or 'no git history'}); run it from a full clone, "
                         "or name another revision with --baseline")
    source = shown.stdout
    path = folder / "figures_baseline.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("figures_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recorded_calls(scenario: str, out_dir: str) -> list[tuple[str, dict]]:
    """(figure kind, keyword arguments) of every figure `planner solve SCENARIO --no-verify` draws."""
    calls, originals = [], {kind: getattr(current, kind) for kind in KINDS}

    def recorder(kind):
        def record(**kwargs):
            calls.append((kind, kwargs))
            return originals[kind](**kwargs)
        return record

    for kind in KINDS:
        setattr(current, kind, recorder(kind))
    try:
        planner_main(["solve", scenario, "--no-verify", "--out-dir", out_dir], standalone_mode=False)
    finally:
        for kind, function in originals.items():
            setattr(current, kind, function)
    return calls


def cpu_s(function, kwargs) -> float:
    start = time.process_time()
    function(**kwargs)
    return time.process_time() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default="e873875", help="git revision of the baseline planner/figures.py")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--scenario", action="append", help="[default: scenarios/128k_rollout.yaml]")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = baseline_module(args.baseline, Path(tmp))
        for scenario in args.scenario or [str(ROOT / "scenarios" / "128k_rollout.yaml")]:
            calls = recorded_calls(scenario, tmp)
            print(f"{Path(scenario).name}: {len(calls)} figures, {args.runs} draws each, baseline {args.baseline}, "
                  f"load average {os.getloadavg()[0]:.2f}")
            for kind, kwargs in calls[:3]:  # fonts and caches loaded before anything is timed
                getattr(old, kind)(**kwargs), getattr(current, kind)(**kwargs)
            totals = defaultdict(lambda: [0.0, 0.0, 0])
            for i, (kind, kwargs) in enumerate(calls):
                was, now = [], []
                for _ in range(args.runs):
                    was.append(cpu_s(getattr(old, kind), kwargs))
                    now.append(cpu_s(getattr(current, kind), kwargs))
                was_s, now_s = statistics.median(was), statistics.median(now)
                totals[kind][0] += was_s
                totals[kind][1] += now_s
                totals[kind][2] += 1
                print(f"  {i:2d} {kind:16s} baseline {was_s:.4f} s  now {now_s:.4f} s  now/baseline {now_s / was_s:.2f}")
            for kind, (was_s, now_s, n) in totals.items():
                print(f"  all {kind:16s} x{n}: baseline {was_s:.3f} s  now {now_s:.3f} s  now/baseline {now_s / was_s:.2f}")


if __name__ == "__main__":
    main()
