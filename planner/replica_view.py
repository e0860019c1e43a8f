"""One replica described for a person: seed 000's budget ladder and the levers, and, given a
traffic class, the replica's capacity, its latency at the targets' statistic and its state at a
stated rate. `planner capacity` prints this; the library owns it so that the command only reads
options and the same numbers can be asked for from Python."""

from __future__ import annotations

import dataclasses
import math

from planner.capacity import KNEE_SHARE, Capacity, ReplicaModel, replica_capacity
from planner.catalog import Catalog
from planner.deployment import Deployment
from planner.memory import (
    ALREADY_IN_USE,
    BudgetLadder,
    kv_bytes_per_sequence,
    ladder_rule_steps,
    layer_kind_lines,
    memory_levers,
    paged_tokens,
    paged_users,
)
from planner.paged import TokenProfile
from planner.roofline import StepModel, ridge_point
from planner.targets import SLO
from planner.units import GiB, gib_text, resident_text, significant_text, utilisation_text


def ladder_payload(dep: Deployment, ladder: BudgetLadder, typical_tokens: int | None) -> dict:
    """The ladder's numbers, keyed as `planner capacity --json` prints them."""
    return {
        "model": dep.model.id,
        "gpu": dep.gpu.id,
        "tp": dep.tp,
        "weight_dtype": dep.weight_dtype.id,
        "kv_dtype": dep.kv_dtype.id,
        "engine": dep.engine.id,
        "context_limit": dep.max_model_len,
        "gpu_memory_utilization": dep.memory_fraction,
        "gpu_memory_gib": ladder.gpu_memory_gib,
        "usable_gib": ladder.usable_gib,
        "weights_gib": ladder.weights_gib,
        "overhead_gib": ladder.overhead_gib,
        "kv_budget_gib": ladder.kv_budget_gib,
        "kv_bytes_per_token": ladder.kv_bytes_per_token,
        "kv_layer_kinds": [dataclasses.asdict(k) for k in ladder.kv_layout.kinds],
        "kv_state_bytes_per_sequence": ladder.kv_layout.state_bytes_per_sequence,
        "kv_gib_per_user": ladder.kv_gib_per_user,
        "worst_case_users": ladder.worst_case_users,
        "paged_users": paged_users(dep, ladder, typical_tokens) if typical_tokens else None,
        "typical_tokens": typical_tokens,
        "ridge_point": ridge_point(dep.gpu, dep.weight_dtype.compute_dtype),
        "ridge_batch": StepModel.of(dep).ridge_batch(),
    }


@dataclasses.dataclass(frozen=True)
class ReplicaView:
    """A replica's capacity for one traffic class, and the payload keys that describe it."""

    capacity: Capacity
    payload: dict


def capacity_view(dep: Deployment, prof: TokenProfile, slo: SLO, ladder: BudgetLadder, *, sizing: str,
                  quantile: float, stat: str, rate_rps: float | None) -> ReplicaView:
    """replica_capacity for the class, with the latency at `stat` at capacity and, given a rate,
    the operating point at that rate (planner.capacity, planner.latency)."""
    model = ReplicaModel(dep, prof, slo, ladder)
    cap = replica_capacity(dep, prof, slo, sizing=sizing, quantile=quantile, ladder=ladder, model=model)
    pt = cap.point
    payload = {
        "shared_prefix_tokens": prof.shared_prefix_tokens,
        "sizing": sizing,
        "quantile": quantile,
        "concurrency": cap.concurrency,
        "max_rps_per_replica": cap.max_rps,
        "binding": cap.binding,
        "resident_batch": pt.resident_batch,
        "step_ms": pt.step_ms,
        "itl_ms": pt.itl_ms,
        "kv_utilisation": pt.kv_utilisation,
        "latency": _latency(model, pt.resident_batch, stat),
        "tokens_per_s": pt.output_tokens_per_s,
        "ceilings_rps": cap.ceilings_rps,
        "ceilings_resident_batch": {k: v if math.isfinite(v) else None for k, v in cap.ceilings_batch.items()},
        # the ceilings whose N lies past the engine's max_num_seqs: their rate is the formula's, at a batch no replica runs
        "max_num_seqs": dep.engine.max_num_seqs,
        "ceilings_past_batch_limit": cap.past_batch_limit(dep.engine.max_num_seqs),
        # the ceiling of ceilings_rps the max rate is planned below: `binding` names the resource instead
        # where throughput saturates below that ceiling (compute, bandwidth), which ceilings_rps has no key for
        "planned_below": cap.bound_kind or cap.binding,
        "clamped": list(cap.clamped),
        "notes": list(cap.notes),
    }
    if rate_rps is not None:
        payload["at_rate"] = _at_rate(model, dep, cap, rate_rps, stat, quantile)
    return ReplicaView(cap, payload)


def _latency(model: ReplicaModel, resident_batch: float, stat: str) -> dict:
    """TTFT, TPOT (per request) and per-token gap at `stat` for the first band, ms (planner.latency)."""
    lat = model.latency_at(resident_batch)
    value = {k: lat.value(0, k, stat) * 1e3 for k in ("ttft", "tpot", "itl")}
    return {"stat": stat, "ttft_ms": value["ttft"], "tpot_ms": value["tpot"], "itl_ms": value["itl"]}


def _at_rate(model: ReplicaModel, dep: Deployment, cap: Capacity, rate_rps: float, stat: str, quantile: float) -> dict:
    n = model.resident_for_rate(rate_rps, float(dep.engine.max_num_seqs) * 4)
    if n is None:
        return {"rate_rps": rate_rps, "beyond_capacity": True, "stable": False,
                "why": "the roofline throughput ceiling is below this rate"}
    if n >= model.budget_bound:
        return {"rate_rps": rate_rps, "beyond_capacity": True, "stable": False,
                "why": f"the steps' token budget of {dep.engine.max_num_batched_tokens:,} tokens cannot carry the "
                       f"prompts at this rate (token-budget ceiling {model.rate(model.budget_bound):.3f} requests/s)"}
    pt = model.point(n)
    if pt.kv_utilisation > 1.0:  # past the mean footprint's budget: the engine preempts, no steady state is left
        full = model.rate(model.concurrency(quantile)["expected"])
        return {"rate_rps": rate_rps, "beyond_capacity": True, "stable": False,
                "why": f"its {n:,.0f} resident sequences would hold {utilisation_text(pt.kv_utilisation)} of the KV "
                       f"budget: the engine preempts and recomputes, and no steady state is left to read latencies "
                       f"from (the cache is full on average from {full:.3f} requests/s)"}
    if n > dep.engine.max_num_seqs:
        return {"rate_rps": rate_rps, "beyond_capacity": True, "stable": False,
                "why": f"it needs {n:,.0f} sequences running where the engine runs at most max_num_seqs = "
                       f"{dep.engine.max_num_seqs:,}: the rest wait, and the queue grows (batch ceiling "
                       f"{cap.ceilings_rps['roofline']:.3f} requests/s)"}
    return {
        "rate_rps": rate_rps,
        "resident_batch": pt.resident_batch,
        "step_ms": pt.step_ms,
        "itl_ms": pt.itl_ms,
        "latency": _latency(model, pt.resident_batch, stat),
        "kv_utilisation": pt.kv_utilisation,
        "output_tokens_per_s": pt.output_tokens_per_s,
        "beyond_capacity": rate_rps > cap.max_rps * (1 + 1e-9),
        "stable": True,
    }


def _division_texts(budget_gib: float, per_user_gib: float, users: int) -> tuple[str, str]:
    """The budget and the amount per user, to the fewest digits (two decimals at least, or three
    significant) whose quotient floors to `users`, the count computed from the unrounded amounts: to
    two decimals, floor(53.73 / 0.12) read 447 beside the 429 users printed, and floor(11.81 / 0.188)
    62 beside 63."""
    for digits in range(2, 8):
        budget = f"{budget_gib:.{digits}f}"
        per_user = f"{per_user_gib:.{digits}f}" if per_user_gib >= 1 else significant_text(per_user_gib, digits + 1)
        if float(per_user) > 0 and math.floor(float(budget) / float(per_user)) == users:
            break
    return budget, per_user


def _users(n: int, dep: Deployment, what: str) -> str:
    """A count of users the cache holds, saying `what` it is; where it passes the engine's max_num_seqs,
    that no more than those run at once (the cache's count is still the memory's answer)."""
    cap = dep.engine.max_num_seqs
    if n <= cap:
        return f"{n:,} user{'' if n == 1 else 's'} {what}"
    return f"{n:,} users fit, {cap:,} run at once (max_num_seqs) {what}"


def ladder_text(catalog: Catalog, dep: Deployment, ladder: BudgetLadder, payload: dict) -> str:
    """Seed 000's eight steps, the paged users of a typical conversation, and the memory levers."""
    per = f" ({dep.tp} GPUs)" if dep.tp > 1 else ""
    budget, per_user = _division_texts(ladder.kv_budget_gib, ladder.kv_gib_per_user, ladder.worst_case_users)
    lines = [
        f"{dep.model.id} on {dep.tp} x {dep.gpu.id} — {dep.engine.name}, {dep.weight_dtype.id} weights, "
        f"{dep.kv_dtype.id} cache, limit {dep.max_model_len:,} tokens",
        "",
        "Budget ladder (seed 000, eight steps):",
        f"  1. {'reported memory' + per:<46} {ladder.gpu_memory_gib:8.2f} GiB",
    ]
    for i, step in enumerate(ladder_rule_steps(dep, ladder), start=2):
        value = "" if step.gib is None else f" {step.gib:8.2f} GiB"
        lines.append(f"  {i}. {step.label:<46}{value}")
    lines += [
        f"  5. {'= KV budget':<46} {ladder.kv_budget_gib:8.2f} GiB",
        f"  6. {'cache per token':<46} {ladder.kv_bytes_per_token:8,} bytes ({ladder.kv_bytes_per_token / 1024:,.1f} KiB)",
        *(f"       {line}" for line in layer_kind_lines(dep.model, dep.kv_dtype, dep.tp)),
        f"  7. {f'per user at the {dep.max_model_len:,}-token limit':<46} {gib_text(ladder.kv_gib_per_user):>8} GiB"
        + _per_user_note(ladder),
        f"  8. worst case: floor({budget} / {per_user}) = {_users(ladder.worst_case_users, dep, '(the guarantee)')}",
    ]
    typical_tokens = payload["typical_tokens"]
    if typical_tokens:
        held = paged_tokens(min(typical_tokens, dep.max_model_len), dep.block_size)
        gib = kv_bytes_per_sequence(dep.model, held, dep.kv_dtype, dep.tp) / GiB
        lines.append(
            f"     paged: a {typical_tokens:,}-token conversation holds {held:,} tokens "
            f"({held // dep.block_size} blocks of {dep.block_size}) = "
            f"{_division_texts(ladder.kv_budget_gib, gib, payload['paged_users'])[1]} GiB -> "
            f"{_users(payload['paged_users'], dep, '(what we observe)')}"
        )
    lines.append(
        f"  ridge point ({dep.weight_dtype.compute_dtype}): {payload['ridge_point']:.0f} FLOP/byte; decode GEMMs turn "
        f"compute-bound past {payload['ridge_batch']:.0f} sequences per step (at calibrated efficiencies)"
    )
    lines += ["", "Levers (independent, so they multiply):"]
    for lever in levers(catalog, dep):
        if not lever.available:
            lines.append(f"  {lever.lever:<44} {'' if lever.why_not == ALREADY_IN_USE else 'not available: '}{lever.why_not}")
            continue
        delta = lever.kv_budget_gib - ladder.kv_budget_gib
        extra = f", budget {delta:+.2f} GiB ({delta / ladder.kv_budget_gib:+.0%})" if abs(delta) > 1e-9 else ""
        lines.append(
            f"  {lever.lever:<44} {gib_text(lever.kv_gib_per_user):>6} GiB/user -> {_users(lever.worst_case_users, dep, 'worst case')}{extra}"
        )
    return "\n".join(lines)


def levers(catalog: Catalog, dep: Deployment) -> list:
    """The memory levers the ladder lists (memory.memory_levers): an fp8 cache, half the context
    limit (at least a block), fp8 weights."""
    return memory_levers(dep, catalog.dtype("fp8"), max(dep.max_model_len // 2, dep.block_size))


def levers_payload(catalog: Catalog, dep: Deployment) -> list[dict]:
    """The levers as `planner capacity --json` prints them, as the text lists them."""
    return [dataclasses.asdict(lever) for lever in levers(catalog, dep)]


def _per_user_note(ladder: BudgetLadder) -> str:
    """What step 7 includes beyond tokens x bytes per token: capped layers, a fixed state."""
    layout = ladder.kv_layout
    parts = []
    if layout.token_cap is not None and layout.token_cap < ladder.max_model_len:
        parts.append(f"capped layers hold {layout.token_cap:,} tokens")
    if layout.state_bytes_per_sequence:
        parts.append(f"+ {layout.state_bytes_per_sequence / 2**20:,.2f} MiB of fixed state")
    return f" ({'; '.join(parts)})" if parts else ""


def _prefix_note(payload: dict) -> str:
    """The ladder's step 8 counts every sequence's prefix; with prefix caching it is held once."""
    n = payload.get("shared_prefix_tokens") or 0
    return f" (the {n:,}-token shared prefix held once, unlike step 8)" if n else ""


def _tpot_text(tpot_ms: float, digits: int) -> str:
    """A TPOT in ms; a class whose requests all have one output token has none (NaN)."""
    return "n/a (no request has a second output token)" if math.isnan(tpot_ms) else f"{tpot_ms:,.{digits}f} ms"


def capacity_text(view: ReplicaView) -> str:
    """The replica's capacity for its class, each ceiling alone, and the state at a stated rate."""
    cap, payload = view.capacity, view.payload
    pt, c, lat = cap.point, cap.concurrency, payload["latency"]
    lines = [
        "",
        f"Capacity of one replica ({cap.sizing} sizing):",
        f"  concurrency by memory{_prefix_note(payload)}: worst_case {c['worst_case']}, expected {c['expected']}, "
        f"percentile {c['percentile']}  (quoting {cap.sizing})",
        "    (worst_case: sequences at the full limit, a hard count; expected and percentile: the mean resident "
        f"count whose cache fits on average, or {payload['quantile'] * 100:g}% of the time, so percentile can read below "
        "worst_case)",
        f"  max rate          {cap.max_rps:10.3f} requests/s   binding ceiling: {cap.binding}",
        f"  resident batch    {pt.resident_batch:10.1f} sequences",
        f"  mean ITL          {pt.itl_ms:10.2f} ms   (mean step {pt.step_ms:.2f} ms; {pt.regime}-bound decode "
        f"{pt.decode_ms:.2f} ms, prefill share {pt.prefill_share:.0%})",
        f"  {lat['stat']} latency       TTFT {lat['ttft_ms']:,.1f} ms, TPOT {_tpot_text(lat['tpot_ms'], 2)}, "
        f"per-token gap {lat['itl_ms']:,.2f} ms",
        f"  KV utilisation    {pt.kv_utilisation:10.1%}",
        f"  output tokens/s   {pt.output_tokens_per_s:10.1f}",
        "  each ceiling alone (requests/s, at N resident): "
        + ", ".join(f"{k} {v:.3f} (N {resident_text(cap.ceilings_batch.get(k))})" for k, v in cap.ceilings_rps.items())
        + "".join(f", {k} holds up to the {cap.binding} ceiling" for k in cap.clamped),
    ]
    bound = cap.bound_kind or cap.binding  # (binding: a resource, where throughput saturates below this ceiling)
    ceiling = cap.ceilings_rps.get(bound)
    if ceiling is not None and 0 < cap.max_rps < ceiling * (1 - 1e-9):
        lines.append(f"  note: the max rate is planned at {cap.max_rps / ceiling:.0%} of the {bound} ceiling's "
                     f"{ceiling:.3f} requests/s (a replica is planned at {KNEE_SHARE:.0%} of the rate its binding bound "
                     "allows; the latencies above are there)")
    seqs, past = payload["max_num_seqs"], payload["ceilings_past_batch_limit"]
    if past:
        lines.append(f"  note: {' and '.join(past)} N past max_num_seqs = {seqs:,}: λ(N) there is the formula's, at a "
                     "batch no replica runs; the lowest ceiling binds")
    lines += [f"  note: {n}" for n in cap.notes]
    if "at_rate" in payload:
        a = payload["at_rate"]
        if not a["stable"]:
            lines.append(f"  at {a['rate_rps']:g} requests/s: unstable — {a['why']}")
        else:
            verdict = "BEYOND capacity" if a["beyond_capacity"] else "within capacity"
            lines.append(
                f"  at {a['rate_rps']:g} requests/s ({verdict}): batch {a['resident_batch']:.1f}, mean ITL "
                f"{a['itl_ms']:.2f} ms, {a['latency']['stat']} TTFT {a['latency']['ttft_ms']:,.0f} ms, "
                f"{a['latency']['stat']} TPOT {_tpot_text(a['latency']['tpot_ms'], 1)}, KV {a['kv_utilisation']:.0%}, "
                f"{a['output_tokens_per_s']:.0f} output tokens/s"
            )
    return "\n".join(lines)
