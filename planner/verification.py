"""What in a plan's speed no measurement backs: a chosen GPU whose efficiency factors are borrowed
from another GPU, and a model that is a mixture of experts, whose speed the factors (fitted on
dense models) overstate by the amount planner.calibration.moe_check measured, and what the plan
would need more if they do. The report leads with these as warnings and the JSON lists them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.calibration.moe_check import committed_moe_check
from planner.plan_objects import Plan, class_share
from planner.units import gpus_text


@dataclass(frozen=True)
class Exposure:
    """What a plan's pools would need more to carry their rates if every replica served
    1 / (1 + overstated_pct / 100) of the requests/s it is planned at."""

    overstated_pct: float
    extra_replicas: int
    extra_gpus: int
    extra_usd_per_hour: float  # at the plan's on-demand price per GPU-hour of each pool's type

    def as_json(self) -> dict[str, float | int]:
        return {"speed_overstated_pct": self.overstated_pct, "extra_replicas": self.extra_replicas,
                "extra_gpus": self.extra_gpus, "extra_usd_per_hour": round(self.extra_usd_per_hour, 2)}

    def text(self) -> str:
        if not self.extra_replicas:
            return (f"At the median error the pools' headroom still carries their rates on throughput alone "
                    f"(each replica at 1/{1 + self.overstated_pct / 100:.2f} of its planned requests/s)")
        one = self.extra_replicas == 1
        return (f"At the median error (each replica carrying 1/{1 + self.overstated_pct / 100:.2f} of its planned "
                f"requests/s) the pools need at least {self.extra_replicas} more replica{'' if one else 's'} to carry "
                "their rates: "
                f"+{gpus_text(self.extra_gpus)}, +${self.extra_usd_per_hour:,.2f}/hour at on-demand prices; that is "
                "throughput alone, and slower steps also lengthen TTFT and TPOT, which can need more")


def throughput_exposure(plan: Plan, overstated_pct: float) -> Exposure:
    """The replicas each pool needs to carry its share of its class's rate (the rate the plan covers,
    headroom included) when a replica serves its planned requests/s divided by 1 + overstated_pct/100:
    throughput is the reciprocal of step time at
    a given batch (seed 000's roofline), so a speed model that overstates throughput by e% plans
    replicas 1 + e/100 times too fast. A floor on the shortfall: latency targets bind sooner on
    slower steps. Pools planned at no capacity (a stated fleet's unsized configs) are left out."""
    factor = 1.0 + overstated_pct / 100.0
    extra_replicas = extra_gpus = 0
    extra_usd = 0.0
    for pool in plan.pools:
        if pool.planned_rps <= 0:
            continue
        members = [(q.replicas, q.planned_rps) for q in plan.pools if q.traffic_class.name == pool.traffic_class.name]
        rate_rps = pool.traffic_class.rate_rps * class_share(pool.replicas, pool.planned_rps, members)
        more = max(0, math.ceil(rate_rps * factor / pool.planned_rps - 1e-9) - pool.replicas)
        extra_replicas += more
        extra_gpus += more * pool.config.tp
        extra_usd += more * pool.config.tp * pool.config.price_usd_per_hour
    return Exposure(overstated_pct, extra_replicas, extra_gpus, extra_usd)


@dataclass(frozen=True)
class Unverified:
    kind: str  # "gpu" or "model"
    id: str
    headline: str  # bold, in the report
    detail: str
    exposure: Exposure | None = None  # a mixture of experts at the measured median error

    def as_json(self) -> dict:
        out = {"kind": self.kind, "id": self.id, "why": f"{self.headline} — {self.detail}"}
        if self.exposure is not None:
            out["exposure"] = self.exposure.as_json()
        return out


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
        exposure = throughput_exposure(plan, check.median_error_pct) if check.optimistic else None
        found.append(Unverified(
            "model", plan.model.id, f"UNVERIFIED: {plan.model.id} is a mixture of experts, whose speed is not calibrated",
            f"the efficiency factors are fitted on dense models; {check.finding()}; MLPerf v4.1 Offline runs of "
            "Mixtral 8x7B on one H100 or H200 point the same way, well beyond their dense control "
            f"(`python bench/published.py`). This plan's capacity is likely {capacity} and its cost {cost}"
            + (f". {exposure.text()}" if exposure else "")
            + ". Benchmark the model on the engine you run, or raise `traffic.headroom` to cover the gap.",
            exposure,
        ))
    return found
