"""What in a plan's speed no measurement backs: a chosen GPU whose efficiency factors are borrowed
from another GPU, and a model that is a mixture of experts, whose speed the factors (fitted on
dense models) overstate by the amount planner.calibration.moe_check measured, and what the plan
would need more if they do. The report leads with these as warnings and the JSON lists them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.calibration.moe_check import committed_moe_check
from planner.plan_objects import Plan
from planner.units import delta_text, gpus_text, usd_text


@dataclass(frozen=True)
class Exposure:
    """What a plan would need more to cover the rates it plans for if every replica served
    1 / (1 + overstated_pct / 100) of the requests/s it is planned at (throughput_exposure)."""

    overstated_pct: float
    extra_replicas: int
    extra_gpus: int
    extra_usd_per_hour: float  # at the plan's on-demand price per GPU-hour of each pool's type
    unsized_classes: int = 0  # classes whose pools are planned at no capacity (a stated fleet's): left out
    # classes short only where a pool is counted at a rate it held its targets at, below a limit no search
    # found (PoolDetail.planned_by "held"): their replicas may carry more, and the count may overstate
    held_classes: int = 0

    def as_json(self) -> dict[str, float | int]:
        return {"speed_overstated_pct": self.overstated_pct, "extra_replicas": self.extra_replicas,
                "extra_gpus": self.extra_gpus, "extra_usd_per_hour": self.extra_usd_per_hour,
                "unsized_classes": self.unsized_classes, "held_classes": self.held_classes}

    def text(self) -> str:
        slower = f"At the median error (each replica carrying 1/{1 + self.overstated_pct / 100:.2f} of its planned requests/s),"
        left_out = (f" ({self.unsized_classes} class{'' if self.unsized_classes == 1 else 'es'} planned at no capacity "
                    "left out)") if self.unsized_classes else ""
        if not self.extra_replicas:
            return (f"{slower} the plan's spare capacity still covers the rates it plans for (peak × traffic.headroom) "
                    f"on throughput alone{left_out}")
        one = self.extra_replicas == 1
        held = ""
        if self.held_classes == 1:
            held = ("; one class short is counted at the rate its pool held its targets at in simulation, below a "
                    "limit no search found, and may need fewer")
        elif self.held_classes:
            held = (f"; {self.held_classes} classes short are counted at the rates their pools held their targets at "
                    "in simulation, below limits no search found, and may need fewer")
        return (f"{slower} covering the rates it plans for (peak × traffic.headroom) takes {self.extra_replicas} more "
                f"replica{'' if one else 's'} (where a class runs short, on its pool that costs least per request/s)"
                f"{left_out}: "
                f"+{gpus_text(self.extra_gpus)}, +{usd_text(self.extra_usd_per_hour)}/hour at on-demand prices; that is "
                f"throughput alone, a floor{' where a pool is counted at its limit' if held else ''}: slower steps also "
                f"lengthen TTFT and TPOT, which can need more{held}")


@dataclass(frozen=True)
class PoolSupply:
    """One pool of a class as the exposure counts it."""

    replicas: int
    capacity_rps: float  # per replica, as planned
    gpus_per_replica: int
    usd_per_gpu_hour: float

    @property
    def usd_per_rps_hour(self) -> float:
        return self.gpus_per_replica * self.usd_per_gpu_hour / self.capacity_rps


def replicas_short(rate_rps: float, pools: list[PoolSupply], factor: float) -> tuple[PoolSupply, int]:
    """The class's pool that adds a request/s most cheaply, and the replicas of it that a slowdown
    by `factor` makes the class lack beyond what it lacked already (a stated fleet can be short
    before any slowdown): with every replica at capacity / factor, k more of pool b cover the rate
    when sum(n·c) / factor + k·c_b / factor >= rate, k >= (rate·factor - sum(n·c)) / c_b.
    `pools` are those with capacity."""
    best = min(pools, key=lambda p: p.usd_per_rps_hour)
    capacity_rps = sum(p.replicas * p.capacity_rps for p in pools)

    def lacking(f: float) -> int:
        return max(0, math.ceil((rate_rps * f - capacity_rps) / best.capacity_rps - 1e-9))

    return best, lacking(factor) - lacking(1.0)


def throughput_exposure(plan: Plan, overstated_pct: float) -> Exposure:
    """The replicas, GPUs and on-demand $/hour that each class of the plan needs more to cover the
    rate the plan covers for it (peak × headroom) when a replica serves its planned requests/s
    divided by 1 + overstated_pct/100 (replicas_short): throughput is the reciprocal of step time at
    a given batch (seed 000's roofline), so a speed model that overstates throughput by e% plans
    replicas 1 + e/100 times too fast. A floor on the shortfall where a pool is planned at its limit:
    latency targets bind sooner on slower steps. A pool planned at a rate it held its targets at
    (planned_by "held": its limit, somewhere above, was not searched) is counted at that rate, which
    can overstate its class's shortfall (fleet_2027q1's agent_120b, held at the 6.824 requests/s it
    plans for, its model capacity 15.6): such classes are counted (held_classes) and the text says so.
    Classes whose pools are planned at no capacity (a stated fleet's configs that cannot meet the
    targets) are left out and counted."""
    factor = 1.0 + overstated_pct / 100.0
    extra_replicas = extra_gpus = unsized = 0
    extra_usd = 0.0
    by_class: dict[str, list] = {}
    for pool in plan.pools:
        by_class.setdefault(pool.traffic_class.name, []).append(pool)
    held = 0
    for pools in by_class.values():
        supply = [PoolSupply(p.replicas, p.planned_rps, p.config.tp, p.config.price_usd_per_hour)
                  for p in pools if p.planned_rps > 0]
        if not supply:
            unsized += 1
            continue
        best, more = replicas_short(pools[0].traffic_class.rate_rps, supply, factor)
        extra_replicas += more
        extra_gpus += more * best.gpus_per_replica
        extra_usd += more * best.gpus_per_replica * best.usd_per_gpu_hour
        held += bool(more) and any(p.planned_by == "held" for p in pools if p.planned_rps > 0)
    return Exposure(overstated_pct, extra_replicas, extra_gpus, extra_usd, unsized, held)


# How a warning names what is unverified, by Unverified.kind (the fleet report's headline, a forecast's).
UNVERIFIED_WHAT = {"gpu": "GPU with borrowed efficiency factors", "model": "a mixture of experts"}


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


def _without_text(plan: Plan, gpu_id: str) -> str:
    """What planning without the GPU costs, from its lever (the plan re-solved by the model without the
    type), where the plan's levers were explored: the price of not trusting the borrowed factors. A
    lever that moves to another unverified GPU is named so: its price is no verified plan's."""
    lever = next((o for o in plan.levers if o.name == f"without {gpu_id}"), None)
    if lever is None:
        return ""
    if not lever.feasible:
        return f"; without it no plan is found (the Levers' 'without {gpu_id}': {lever.why_not})"
    others = sorted({p.gpu for p in lever.solution.pools if not plan.catalog.gpu(p.gpu).verified}
                    if lever.solution is not None else ())
    also = f", {' and '.join(others)} among them, whose speed is not measured either" if others else ""
    return (f"; without it the plan costs {usd_text(lever.cost_per_hour)} per hour, "
            f"{delta_text(lever.cost_per_hour, plan.compared_usd_per_hour)}, on {gpus_text(lever.gpus)}{also} "
            f"(the Levers' 'without {gpu_id}', by the model)")


def unverified_speed(plan: Plan) -> list[Unverified]:
    gpus = {pool.config.gpu.id: pool.config.gpu for pool in plan.pools}
    found = [
        Unverified(
            "gpu", g.id, f"UNVERIFIED: {g.id}'s speed is not measured",
            f"its efficiency factors are borrowed from {g.efficiency.borrowed_from} (data/gpus.yaml), so its "
            f"capacity, and this plan's cost, rest on another GPU's measurements"
            + (f"; checked {g.efficiency.borrowed_check}" if g.efficiency.borrowed_check else "")
            + ". Benchmark it, or set `verified_only: true` to plan without it" + _without_text(plan, g.id) + ".",
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
