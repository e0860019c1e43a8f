"""Check a solved plan by replaying its traffic through the simulator, one replica per pool.

Each pool's replica is simulated at the rate it carries at the peak (before
headroom), with requests sampled from the pool's own traffic class; the analytical
model's prediction at the same rate sits beside it, with the same keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.planning import Plan, PoolDetail
from planner.simulate import (
    COMPARE_KEYS,
    PREEMPTION_BUDGET_PER_1000,
    point_view,
    sample_requests,
    simulate_replica,
)

ITL_GAP = 1.15  # a simulated mean ITL this far above the model's earns a note in the report


@dataclass(frozen=True)
class PoolCheck:
    pool: str
    label: str
    config: str
    predicted: dict[str, float | None]
    simulated: dict[str, float | None]
    problems: tuple[str, ...]  # empty when the simulated replica meets the pool's targets

    @property
    def holds(self) -> bool:
        return not self.problems


def check_pool(plan: Plan, pd: PoolDetail, *, requests: int = 20_000, seed: int = 0) -> PoolCheck:
    tc = pd.traffic_class
    rate = pd.rate_per_replica_rps
    prefix = plan.scenario.traffic.shared_prefix_tokens
    reqs = sample_requests(tc.hist, rate, requests, seed, max_total_tokens=tc.max_model_len, shared_prefix_tokens=prefix)
    sim = simulate_replica(pd.deployment, reqs, shared_prefix_tokens=prefix)
    problems = []
    if tc.slo.itl_ms is not None and sim.itl_ms_mean is not None and sim.itl_ms_mean > tc.slo.itl_ms:
        problems.append(f"mean ITL {sim.itl_ms_mean:.1f} ms > {tc.slo.itl_ms:g} ms")
    if sim.preemptions_per_1000 > PREEMPTION_BUDGET_PER_1000:
        problems.append(f"{sim.preemptions_per_1000:.1f} preemptions per 1,000 requests > {PREEMPTION_BUDGET_PER_1000:g}")
    if not sim.stable:
        problems.append("the queue grows: the replica cannot keep up")
    # The model's side is the plan's own operating point at this rate (PoolDetail.at_peak).
    return PoolCheck(tc.name, tc.label, pd.config.label(tc.max_model_len),
                     point_view(pd.at_peak), sim.compare_view(), tuple(problems))


def verify_plan(plan: Plan, *, pool: str | None = None, requests: int = 20_000, seed: int = 0) -> list[PoolCheck]:
    pools = [pd for pd in plan.pools if pool is None or pd.traffic_class.name == pool]
    return [check_pool(plan, pd, requests=requests, seed=seed) for pd in pools]


def _fmt(v: float | None, key: str) -> str:
    if v is None:
        return "—"
    if key == "kv_utilisation":
        return f"{v:.0%}"
    return f"{v:,.2f}" if abs(v) < 1000 else f"{v:,.0f}"


def verification_markdown(checks: list[PoolCheck], *, requests: int, seed: int) -> str:
    lines = [
        "## Verification by simulation",
        "",
        f"One replica of each pool replayed at its peak rate through the paged-cache scheduler simulator "
        f"(planner/simulate.py; {requests:,} sampled requests, seed {seed}, the first 10% as warm-up). The model "
        "predicts mean latencies (its ITL is the mean step plus the prefill backlog a request meets; its TTFT is at the class's prompt quantile with the "
        "mean queueing wait), so p99 figures are the simulator's alone.",
    ]
    for c in checks:
        verdict = "holds" if c.holds else "does NOT hold: " + "; ".join(c.problems)
        lines += ["", f"**{c.label}** ({c.config}) — the plan {verdict}.", "",
                  "| | Predicted | Simulated |", "|---|---:|---:|"]
        for k in COMPARE_KEYS:
            lines.append(f"| {k} | {_fmt(c.predicted.get(k), k)} | {_fmt(c.simulated.get(k), k)} |")
        model_itl, sim_itl = c.predicted.get("itl_ms_mean"), c.simulated.get("itl_ms_mean")
        if model_itl and sim_itl and sim_itl > ITL_GAP * model_itl:
            lines += ["", f"The simulated mean ITL is {sim_itl / model_itl - 1:.0%} above the model's: bursts of long "
                      "prefills stretch steps while decoding requests pile up, more than the model's prefill-backlog "
                      "term (capacity.ReplicaModel.itl_s) accounts for. Keep headroom for it."]
    return "\n".join(lines) + "\n"


def verification_section(plan: Plan, *, requests: int = 20_000, seed: int = 0) -> str:
    return verification_markdown(verify_plan(plan, requests=requests, seed=seed), requests=requests, seed=seed)
