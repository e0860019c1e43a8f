"""Progress of the slow stages: reported with a total to whoever listens, and never printed
when stderr is not a terminal."""

from __future__ import annotations

from click.testing import CliRunner
from golden_files import GOLDEN

from planner.cli import main
from planner.inputs import load_inputs, plan_inputs
from planner.progress import listening, stage


class Recorder:
    def __init__(self):
        self.bars = []

    def __call__(self, label, total, unit):
        bar = {"label": label, "total": total, "unit": unit, "done": 0, "closed": False}
        self.bars.append(bar)

        class Bar:
            def update(self, n):
                bar["done"] += n

            def close(self):
                bar["closed"] = True

        return Bar()


def test_a_plan_reports_each_stage_with_its_total_and_finishes_it():
    seen = Recorder()
    with listening(seen):
        plan_inputs(load_inputs(GOLDEN / "tiny.yaml"))
    labels = [b["label"] for b in seen.bars]
    assert labels[0] == "candidates evaluated"  # every pair: the certified plan's per-GPU plans ask for them
    assert "certification" in labels and "explorations" in labels
    assert all(b["closed"] and b["done"] == b["total"] for b in seen.bars)
    first = seen.bars[0]
    assert (first["total"], first["unit"]) == (8, " pairs")  # 2 GPUs x tp 1, 2 x kv bf16, fp8; one class

    seen = Recorder()
    with listening(seen):
        plan_inputs(load_inputs(GOLDEN / "tiny.yaml"), certify=False)
    first = seen.bars[0]
    assert (first["label"], first["total"], first["unit"]) == ("candidates searched", 8, " pairs")
    assert all(b["closed"] and b["done"] == b["total"] for b in seen.bars)


def test_nobody_listening_means_no_bar_and_a_stage_without_items_draws_none():
    seen = Recorder()
    with stage("unheard", 3, " items") as step:
        step.advance()
    with listening(seen), stage("empty", 0, " items") as step:
        step.advance()
    assert seen.bars == []


def test_solve_prints_no_progress_when_stderr_is_not_a_terminal(tmp_path):
    r = CliRunner().invoke(main, ["solve", str(GOLDEN / "tiny.yaml"), "--no-report"])
    assert r.exit_code == 0, r.output
    assert r.output.count("\n") == 1 and "%|" not in r.output
