"""`planner solve` run in the bench's own process, for the benches that patch the planner's
functions to record what a solve does (bench/solve.py, latency_points.py, sim_cores.py)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path


def solve_in_process(scenario: Path, *flags: str) -> float:
    """Seconds of one `planner solve SCENARIO FLAGS` run by the command line's own code in this
    process, its outputs written to a folder removed after it; a failed solve ends the bench with
    its exit code and output."""
    from click.testing import CliRunner

    from planner.cli import main

    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        done = CliRunner().invoke(main, ["solve", str(scenario), "--out-dir", out, *flags])
        seconds = time.perf_counter() - t0
    if done.exit_code != 0:
        raise SystemExit(f"{scenario}: exit {done.exit_code}: {done.output}")
    return seconds
