"""What in a plan's speed no measurement backs: a chosen GPU whose efficiency factors are borrowed
from another GPU, and a model that is a mixture of experts, whose speed the factors (fitted on
dense models) overstate by the amount planner.calibration.moe_check measured. The report leads
with these as warnings and the JSON lists them."""

from __future__ import annotations

from dataclasses import dataclass

from planner.calibration.moe_check import committed_moe_check
from planner.plan_objects import Plan


@dataclass(frozen=True)
class Unverified:
    kind: str  # "gpu" or "model"
    id: str
    headline: str  # bold, in the report
    detail: str

    def as_json(self) -> dict[str, str]:
        return {"kind": self.kind, "id": self.id, "why": f"{self.headline} — {self.detail}"}


def unverified_speed(plan: Plan) -> list[Unverified]:
    gpus = {pool.config.gpu.id: pool.config.gpu for pool in plan.pools}
    found = [
        Unverified(
            "gpu", g.id, f"UNVERIFIED: {g.id}'s speed is not measured",
            f"its efficiency factors are borrowed from {g.efficiency.borrowed_from} (data/gpus.yaml), so its "
            f"capacity, and this plan's cost, rest on another GPU's measurements"
            + (f"; checked {g.efficiency.borrowed_check}" if g.efficiency.borrowed_check else "")
            + ". Benchmark it, or set `verified_only: true` to plan without it.",
        )
        for g in sorted((g for g in gpus.values() if not g.verified), key=lambda g: g.id)
    ]
    if plan.model.num_experts and plan.pools:
        check = committed_moe_check()
        capacity, cost = ("overstated", "understated") if check.optimistic else ("understated", "overstated")
        found.append(Unverified(
            "model", plan.model.id, f"UNVERIFIED: {plan.model.id} is a mixture of experts, whose speed is not calibrated",
            f"the efficiency factors are fitted on dense models; {check.finding()}; MLPerf v4.1 Offline runs of "
            "Mixtral 8x7B on one H100 or H200 point the same way, well beyond their dense control "
            f"(`python bench/published.py`). This plan's capacity is likely {capacity} and its cost {cost}: "
            "benchmark the model on the engine you run, or raise `traffic.headroom` to cover the gap.",
        ))
    return found
