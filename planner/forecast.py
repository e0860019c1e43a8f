"""Quarterly fleet and cost-per-token forecasts: the ILP per quarter, with commitments carried forward."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass

from planner.errors import InfeasibleError, InputError
from planner.planning import Plan
from planner.scenario import GPUCandidate, QuarterSpec, Scenario
from planner.solve import Inputs, plan_inputs
from planner.units import HOURS_PER_MONTH


@dataclass(frozen=True)
class QuarterResult:
    """One quarter: its plan, what was committed, and what the plan does not hold itself
    (the change against the previous quarter, the figures at the mean rate)."""

    quarter: str
    demand_multiplier: float  # on the base scenario's peak
    plan: Plan
    reserved_gpus: dict[str, int]
    reserved_price: dict[str, float]
    gpus_by_type: dict[str, int]
    change_by_type: dict[str, int]  # against the previous quarter
    mean_tokens_per_hour: float | None
    cost_per_million_at_mean: dict[str, float] | None
    utilisation: dict[str, float | None]  # peak and mean rate / fleet capacity

    @property
    def gpus(self) -> int:
        """GPUs in the quarter's fleet, all types together."""
        return sum(self.gpus_by_type.values())

    @property
    def peak_rps(self) -> float:
        return self.plan.peak_rps

    @property
    def mean_rps(self) -> float | None:
        return self.plan.mean_rps

    @property
    def cost_per_hour(self) -> float:
        return self.plan.cost_per_hour

    @property
    def cost_per_month(self) -> float:
        return self.plan.cost_per_month

    @property
    def tokens_per_hour(self) -> float:
        """At the peak rate."""
        return self.plan.tokens_per_hour

    @property
    def cost_per_million(self) -> dict[str, float]:
        """At the peak rate."""
        return self.plan.cost_per_million


def _check_gpus(scn: Scenario, inputs: Inputs, q: QuarterSpec, i: int) -> None:
    known = {g.id for g in scn.gpu_candidates}
    for field_name in ("prices", "availability", "reserved"):
        for gpu in getattr(q, field_name):
            if gpu not in known:
                try:
                    inputs.catalog.gpu(gpu)
                except InputError as exc:
                    raise InputError(f"forecast.quarters[{i}].{field_name}: {exc}", where=str(inputs.path)) from None
                raise InputError(
                    f"forecast.quarters[{i}].{field_name}: GPU '{gpu}' is not among the scenario's candidate gpus "
                    f"({', '.join(sorted(known))})", where=str(inputs.path),
                )


def quarter_scenario(scn: Scenario, q: QuarterSpec, multiplier: float) -> Scenario:
    """The base scenario with this quarter's demand, limit, prices and availability."""
    gpus = []
    for cand in scn.gpu_candidates:
        update = {}
        if cand.id in q.prices:
            update["price_usd_per_hour"] = q.prices[cand.id]
        if cand.id in q.availability:
            update["max_gpus"] = q.availability[cand.id]
        gpus.append(GPUCandidate(**{**cand.model_dump(), **update}))
    traffic = scn.traffic.model_copy(update={"growth": scn.traffic.growth * multiplier})
    update = {"gpus": gpus, "traffic": traffic}
    if q.context_limit is not None:
        update["context_limit"] = q.context_limit
    return scn.model_copy(update=update)


def run_forecast(inputs: Inputs) -> list[QuarterResult]:
    scn = inputs.scenario
    fc = scn.forecast
    if fc is None:
        raise InputError("the scenario has no forecast section", where=str(inputs.path))
    results: list[QuarterResult] = []
    multiplier, previous = 1.0, None
    # Commitments as lots of (GPUs, price per GPU-hour): a lot keeps the price it was
    # committed at, whatever on-demand prices do later.
    lots: dict[str, list[tuple[int, float]]] = {}
    commit_price_before: dict[str, float] = {}
    for i, q in enumerate(fc.quarters):
        _check_gpus(scn, inputs, q, i)
        multiplier = multiplier * (1 + q.growth) if fc.growth_mode == "compound" else 1 + q.growth
        qscn = quarter_scenario(scn, q, multiplier)
        od_price = {g.id: g.price_per_hour(inputs.catalog.gpu(g.id).price_usd_per_hour) for g in qscn.gpu_candidates}
        commit_price = {g: fc.reserved_prices.get(g, od_price[g] * (1 - fc.reserved_discount)) for g in od_price}
        if fc.carry_forward and previous is not None:
            # Last quarter's fleet is committed: what ran on demand joins at last quarter's terms.
            for gpu, n in previous.gpus_by_type.items():
                extra = n - sum(k for k, _ in lots.get(gpu, []))
                if extra > 0:
                    lots.setdefault(gpu, []).append((extra, commit_price_before[gpu]))
        for gpu, n in q.reserved.items():
            extra = n - sum(k for k, _ in lots.get(gpu, []))
            if extra > 0:
                lots.setdefault(gpu, []).append((extra, commit_price[gpu]))
        reserved = {g: sum(k for k, _ in ls) for g, ls in sorted(lots.items())}
        price = {g: sum(k * p for k, p in ls) / reserved[g] for g, ls in sorted(lots.items())}
        plan = _quarter_plan(inputs, qscn, q, reserved, price)
        results.append(_quarter_result(q.quarter, multiplier, plan, reserved, price, previous))
        previous = results[-1]
        commit_price_before = commit_price
        if not fc.carry_forward:
            lots = {}
    return results


def _quarter_plan(inputs: Inputs, qscn: Scenario, q: QuarterSpec, reserved, price) -> Plan:
    """The quarter's plan; an infeasible quarter says which quarter, and flags reservations
    that the quarter's availability contradicts."""
    for gpu, n in reserved.items():
        cap = q.availability.get(gpu)
        if cap is not None and n > cap:
            raise InputError(
                f"forecast quarter {q.quarter}: {n} {gpu} GPUs are committed but availability is {cap}",
                where=str(inputs.path),
            )
    try:
        return plan_inputs(inputs, qscn, explore=False, reserved={g: (n, price[g]) for g, n in reserved.items()})
    except InfeasibleError as exc:
        raise InfeasibleError(f"forecast quarter {q.quarter}: {exc}") from None


def _quarter_result(quarter, multiplier, plan: Plan, reserved, price, previous) -> QuarterResult:
    by_type: dict[str, int] = {}
    for pd in plan.pools:
        by_type[pd.config.gpu.id] = by_type.get(pd.config.gpu.id, 0) + pd.gpus
    if previous is None:  # the first quarter is the baseline: nothing to compare with
        change = {}
    else:
        before = previous.gpus_by_type
        change = {g: by_type.get(g, 0) - before.get(g, 0) for g in sorted(set(by_type) | set(before))}
    mean = plan.mean_rps
    capacity = plan.capacity_rps
    mean_tph = None
    cpm_mean = None
    if mean is not None:
        scale = mean / plan.peak_rps
        mean_tph = plan.tokens_per_hour * scale
        cpm_mean = {k: v / scale for k, v in plan.cost_per_million.items()}
    return QuarterResult(
        quarter=quarter,
        demand_multiplier=multiplier,
        plan=plan,
        reserved_gpus=dict(sorted(reserved.items())),
        reserved_price=dict(sorted(price.items())),
        gpus_by_type=dict(sorted(by_type.items())),
        change_by_type=change,
        mean_tokens_per_hour=mean_tph,
        cost_per_million_at_mean=cpm_mean,
        utilisation={"peak": plan.peak_rps / capacity, "mean": None if mean is None else mean / capacity},
    )


# ------------------------------------------------------------------ outputs

CSV_COLUMNS = (
    ("quarter", "calendar quarter"),
    ("pool", "traffic class served by the pool (all, short, long)"),
    ("gpu", "GPU type"),
    ("tp", "tensor-parallel degree (GPUs per replica)"),
    ("weight_dtype", "weight dtype"),
    ("kv_dtype", "KV-cache dtype"),
    ("max_model_len", "context limit of the pool, tokens"),
    ("replicas", "replicas in the pool"),
    ("gpus", "GPUs in the pool"),
    ("pool_cost_per_hour_usd", "the pool's GPUs at on-demand price, USD per hour"),
    ("quarter_cost_per_hour_usd", "the whole fleet this quarter (reserved GPUs included, used or not), USD per hour"),
    ("quarter_cost_per_month_usd", f"the same per month ({HOURS_PER_MONTH} hours)"),
    ("reserved_gpus", "committed GPUs of this pool's type this quarter"),
    ("peak_rps", "peak arrival rate planned for, requests/s (before headroom)"),
    ("mean_rps", "mean arrival rate, requests/s (empty when unknown)"),
    ("tokens_per_hour_at_peak", "prompt + output tokens per hour at the peak rate"),
    ("usd_per_million_tokens_blended_at_peak", "fleet cost / tokens at the peak rate, USD per million tokens"),
    ("usd_per_million_input_tokens_at_peak", "prefill share of cost / prompt tokens at peak, USD per million"),
    ("usd_per_million_output_tokens_at_peak", "decode share of cost / output tokens at peak, USD per million"),
    ("usd_per_million_tokens_blended_at_mean", "fleet cost / tokens at the mean rate, USD per million tokens"),
    ("utilisation_at_peak", "peak rate / fleet capacity at its ceilings"),
    ("utilisation_at_mean", "mean rate / fleet capacity at its ceilings"),
)


def _num(x: float | None, digits: int = 6) -> str:
    return "" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def forecast_csv(results: list[QuarterResult]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([name for name, _ in CSV_COLUMNS])
    for r in results:
        for pd in r.plan.pools:
            writer.writerow([
                r.quarter, pd.traffic_class.name, pd.config.gpu.id, pd.config.tp, pd.config.weight_dtype,
                pd.config.kv_dtype, pd.traffic_class.max_model_len, pd.replicas, pd.gpus, _num(pd.cost_per_hour, 4),
                _num(r.cost_per_hour, 4), _num(r.cost_per_month, 2), r.reserved_gpus.get(pd.config.gpu.id, 0),
                _num(r.peak_rps), _num(r.mean_rps), _num(r.tokens_per_hour, 0),
                _num(r.cost_per_million["blended"]), _num(r.cost_per_million["input"]), _num(r.cost_per_million["output"]),
                _num(r.cost_per_million_at_mean["blended"] if r.cost_per_million_at_mean else None),
                _num(r.utilisation["peak"]), _num(r.utilisation["mean"]),
            ])
    return buf.getvalue()


def forecast_json(results: list[QuarterResult]) -> dict:
    return {
        "quarters": [
            {
                "quarter": r.quarter,
                "demand_multiplier": r.demand_multiplier,
                "pools": [
                    {"pool": pd.traffic_class.name, "gpu": pd.config.gpu.id, "tp": pd.config.tp,
                     "weight_dtype": pd.config.weight_dtype, "kv_dtype": pd.config.kv_dtype,
                     "max_model_len": pd.traffic_class.max_model_len, "replicas": pd.replicas, "gpus": pd.gpus}
                    for pd in r.plan.pools
                ],
                "gpus": r.gpus,
                "gpus_by_type": r.gpus_by_type,
                "gpus_change": r.change_by_type,
                "reserved_gpus": r.reserved_gpus,
                "cost_per_hour": r.cost_per_hour,
                "cost_per_month": r.cost_per_month,
                "tokens_per_hour": r.tokens_per_hour,
                "cost_per_million_tokens": r.cost_per_million,
                "cost_per_million_tokens_at_mean": r.cost_per_million_at_mean,
                "utilisation": r.utilisation,
            }
            for r in results
        ]
    }


def forecast_markdown(name: str, results: list[QuarterResult], *, figure: str | None = None, heading: int = 1) -> str:
    h = "#" * heading
    lines = [f"{h} Forecast: {name}", ""]
    first, last = results[0], results[-1]
    lines += [
        f"**{first.quarter} → {last.quarter}: fleet {first.gpus} → {last.gpus} GPUs, "
        f"${first.cost_per_month:,.2f} → ${last.cost_per_month:,.2f} per month, blended "
        f"${first.cost_per_million['blended']:,.4f} → ${last.cost_per_million['blended']:,.4f} per million tokens at peak.**",
        "",
        "| Quarter | Demand × base | Peak req/s | GPUs (change) | Reserved | $/hour | $/month | $/M tokens at peak (blended / input / output) | $/M tokens at mean | Utilisation peak / mean |",
        "|---|---:|---:|---|---|---:|---:|---|---:|---|",
    ]
    for r in results:
        gpus = ", ".join(f"{n} {g}" + (f" ({r.change_by_type[g]:+d})" if r.change_by_type.get(g) else "")
                         for g, n in r.gpus_by_type.items())
        removed = [f"0 {g} ({d:+d})" for g, d in r.change_by_type.items() if d < 0 and g not in r.gpus_by_type]
        gpus = ", ".join([gpus, *removed]) if removed else gpus
        reserved = ", ".join(f"{n} {g} @ ${r.reserved_price[g]:,.2f}" for g, n in r.reserved_gpus.items() if n) or "—"
        cpm = r.cost_per_million
        at_mean = f"${r.cost_per_million_at_mean['blended']:,.4f}" if r.cost_per_million_at_mean else "—"
        util_mean = f"{r.utilisation['mean']:.0%}" if r.utilisation["mean"] is not None else "—"
        lines.append(
            f"| {r.quarter} | {r.demand_multiplier:.3f} | {r.peak_rps:,.2f} | {gpus} | {reserved} | ${r.cost_per_hour:,.2f} | "
            f"${r.cost_per_month:,.2f} | ${cpm['blended']:,.4f} / ${cpm['input']:,.4f} / ${cpm['output']:,.4f} | {at_mean} | "
            f"{r.utilisation['peak']:.0%} / {util_mean} |"
        )
    lines += [
        "",
        "Cost per million tokens is quoted at the peak rate (the fleet is sized for it) and at the mean rate (what a "
        "month of traffic really pays per token). Reserved GPUs are paid whether used or not. Utilisation is the "
        "arrival rate over the fleet's capacity at its ceilings (headroom keeps the peak below 100%).",
    ]
    if figure:
        lines += ["", f"![Forecast]({figure})"]
    return "\n".join(lines) + "\n"
