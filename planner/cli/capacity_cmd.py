"""`planner capacity`: the budget ladder of one card, and one replica's capacity for a traffic class."""

from __future__ import annotations

import dataclasses

import click

from planner.bounds import (
    MAX_GPU_MEMORY_GIB,
    MAX_LATENCY_MS,
    MAX_RPS,
    MAX_TOKENS,
    MAX_TP,
    MAX_TTFT_S,
)
from planner.cli.options import (
    FiniteFloatRange,
    PowerOfTwoRange,
    catalog_option,
    echo_json,
    get_catalog,
    json_option,
)
from planner.deployment import DEFAULT_OVERHEAD_GIB, make_deployment
from planner.histogram import Histogram
from planner.memory import (
    budget_ladder,
    kv_bytes_per_sequence,
    kv_token_cap,
    layer_kind_lines,
    memory_levers,
    paged_tokens,
    paged_users,
    weight_bytes,
)
from planner.roofline import StepModel, ridge_point
from planner.units import GiB


class _SizingChoice(click.Choice):
    """click.Choice over planner.paged.SIZING_MODES, read only when click needs the choices:
    the other commands should not import the paged model at start-up."""

    def __init__(self) -> None:
        super().__init__(())

    @property
    def choices(self):
        from planner.paged import SIZING_MODES

        return SIZING_MODES

    @choices.setter
    def choices(self, _value) -> None:
        pass  # fixed: always planner.paged.SIZING_MODES


def _load_histogram(path: str) -> Histogram:
    from planner.workload.histfile import read_histogram

    return read_histogram(path)


@click.command()
@click.argument("model")
@click.argument("gpu")
@click.option("--tp", type=PowerOfTwoRange(1, MAX_TP), default=1, show_default=True, help="Tensor-parallel degree.")
@click.option("--weight-dtype", default=None, help="Weight dtype [default: the checkpoint's (catalog checkpoint_dtype), else bf16].")
@click.option("--kv-dtype", default="bf16", show_default=True)
@click.option("--max-model-len", type=click.IntRange(1, MAX_TOKENS), default=None, help="Context limit [default: the model's].")
@click.option("--engine", default="vllm", show_default=True, help="Engine profile (planner catalog engines).")
@click.option("--gpu-memory-utilization", type=FiniteFloatRange(0, 1, min_open=True), default=None, help="Fraction of memory the engine takes [default: the engine's].")
@click.option("--overhead-gib", type=FiniteFloatRange(0, MAX_GPU_MEMORY_GIB), default=DEFAULT_OVERHEAD_GIB, show_default=True, help="Activations, CUDA graphs, logits, per GPU.")
@click.option("--typical-tokens", type=click.IntRange(1, MAX_TOKENS), default=None, help="Typical conversation length for paged users.")
@click.option("--histogram", "histogram_file", type=click.Path(dir_okay=False), default=None, help="Traffic class from a histogram file (planner histogram).")
@click.option("--prompt-tokens", type=click.IntRange(0, MAX_TOKENS), default=None, help="Every request has this prompt length.")
@click.option("--output-tokens", type=click.IntRange(1, MAX_TOKENS), default=None, help="Every request has this output length.")
@click.option("--sizing", type=_SizingChoice(), default="expected", show_default=True)
@click.option("--quantile", type=FiniteFloatRange(0.5, 0.99999), default=0.99, show_default=True, help="For --sizing percentile.")
@click.option("--shared-prefix", type=click.IntRange(0, MAX_TOKENS), default=0, show_default=True, help="Tokens of a prefix every request shares (prefix caching).")
@click.option("--ttft-s", type=FiniteFloatRange(min=0, min_open=True, max=MAX_TTFT_S), default=None,
              help="Time-to-first-token target at --stat, seconds.")
@click.option("--tpot-ms", type=FiniteFloatRange(min=0, min_open=True, max=MAX_LATENCY_MS), default=None,
              help="Time-per-output-token target (per request) at --stat, ms.")
@click.option("--itl-ms", type=FiniteFloatRange(min=0, min_open=True, max=MAX_LATENCY_MS), default=None,
              help="Per-token gap target at --stat, ms.")
@click.option("--stat", type=click.Choice(["mean", "p50", "p90", "p95", "p99"]), default="p99", show_default=True,
              help="Statistic of the latency targets, over requests (tokens for --itl-ms).")
@click.option("--rate", type=FiniteFloatRange(0, MAX_RPS), default=None, help="Also evaluate the replica at this arrival rate (requests/s).")
@catalog_option
@json_option
def capacity(
    model, gpu, tp, weight_dtype, kv_dtype, max_model_len, engine, gpu_memory_utilization, overhead_gib,
    typical_tokens, histogram_file, prompt_tokens, output_tokens, sizing, quantile, shared_prefix,
    ttft_s, tpot_ms, itl_ms, stat, rate, catalog_files, as_json,
) -> None:
    """How many users fit on one replica of MODEL on GPU, and how many requests/s it serves.

    Walks seed 000's budget ladder step by step and names the levers. With a traffic
    class (--histogram, or --prompt-tokens/--output-tokens) it adds the replica's
    capacity and the ceiling that binds.

    \b
    Examples:
      planner capacity llama-3.1-8b h100-sxm --max-model-len 8192 --typical-tokens 2300
      planner capacity llama-3.1-8b h100-sxm --prompt-tokens 1000 --output-tokens 200 --tpot-ms 50 --json
    """
    # The capacity model loads only when a command needs it.
    from planner.capacity import replica_capacity
    from planner.paged import token_profile
    from planner.planning import edge_at_most
    from planner.targets import SLO

    catalog = get_catalog(catalog_files)
    if weight_dtype is None:
        weight_dtype = catalog.model(model).checkpoint_dtype or "bf16"
    dep = make_deployment(
        catalog, model=model, gpu=gpu, tp=tp, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
        max_model_len=max_model_len, engine=engine, memory_fraction=gpu_memory_utilization,
        overhead_gib_per_gpu=overhead_gib,
    )
    ladder = budget_ladder(dep)
    if (prompt_tokens is None) != (output_tokens is None):
        raise click.UsageError("--prompt-tokens and --output-tokens go together")
    if histogram_file and prompt_tokens is not None:
        raise click.UsageError("give either --histogram or --prompt-tokens/--output-tokens, not both")
    hist = None
    if histogram_file:
        hist = _load_histogram(histogram_file)
        served = hist.select_total(at_most=edge_at_most(dep.max_model_len))
        too_long = hist.requests - served.requests
        if too_long:
            click.echo(f"note: {too_long:,} request(s) exceed the {dep.max_model_len:,}-token limit and are left out", err=True)
            hist = served
    elif prompt_tokens is not None:
        if prompt_tokens + output_tokens > dep.max_model_len:
            raise click.UsageError(
                f"--prompt-tokens + --output-tokens = {prompt_tokens + output_tokens} exceeds the context limit {dep.max_model_len}"
            )
        hist = Histogram.constant(prompt_tokens, output_tokens)
    payload = {
        "model": dep.model.id,
        "gpu": dep.gpu.id,
        "tp": dep.tp,
        "weight_dtype": dep.weight_dtype.id,
        "kv_dtype": dep.kv_dtype.id,
        "engine": dep.engine.id,
        "max_model_len": dep.max_model_len,
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
    cap = None
    if hist is not None:
        if hist.is_empty:
            raise click.UsageError("the traffic class has no request within the context limit")
        prof = token_profile(
            hist, block_size=dep.block_size, chunk_tokens=dep.engine.max_num_batched_tokens,
            sliding_window=kv_token_cap(dep.model), shared_prefix_tokens=shared_prefix,
        )
        slo = SLO.single(ttft_s=ttft_s, tpot_ms=tpot_ms, itl_ms=itl_ms, stat=stat)
        cap = replica_capacity(dep, prof, slo, sizing=sizing, quantile=quantile, ladder=ladder)
        if payload["paged_users"] is None:
            payload["paged_users"] = cap.concurrency["expected"]
        payload.update(
            sizing=sizing,
            concurrency=cap.concurrency,
            max_rps_per_replica=cap.max_rps,
            binding=cap.binding,
            resident_batch=cap.point.resident_batch,
            step_ms=cap.point.step_ms,
            itl_ms=cap.point.itl_ms,
            kv_utilisation=cap.point.kv_utilisation,
            latency=_latency(cap.point, slo, dep, prof, ladder, stat),
            tokens_per_s=cap.point.output_tokens_per_s,
            ceilings_rps=cap.ceilings_rps,
            clamped=list(cap.clamped),
            notes=list(cap.notes),
        )
        if rate is not None:
            payload["at_rate"] = _at_rate(dep, prof, slo, cap, rate, ladder, stat)
    elif rate is not None:
        raise click.UsageError("--rate needs a traffic class (--histogram or --prompt-tokens/--output-tokens)")
    if as_json:
        echo_json(payload)
        return
    click.echo(_ladder_text(catalog, dep, ladder, payload, typical_tokens))
    if cap is not None:
        click.echo(_capacity_text(payload, cap, quantile))


def _latency(pt, slo, dep, prof, ladder, stat) -> dict:
    """TTFT, TPOT (per request) and per-token gap at `stat` at an operating point, ms (planner.latency)."""
    from planner.capacity import ReplicaModel

    rm = ReplicaModel(dep, prof, slo, ladder)
    lat = rm.latency_at(pt.resident_batch)
    value = {k: lat.value(0, k, stat) * 1e3 for k in ("ttft", "tpot", "itl")}
    return {"stat": stat, "ttft_ms": value["ttft"], "tpot_ms": value["tpot"], "itl_ms": value["itl"]}


def _at_rate(dep, prof, slo, cap, rate, ladder, stat) -> dict:
    from planner.capacity import ReplicaModel

    rm = ReplicaModel(dep, prof, slo, ladder)
    n = rm.resident_for_rate(rate, float(dep.engine.max_num_seqs) * 4)
    if n is None:
        return {"rate_rps": rate, "beyond_capacity": True, "stable": False,
                "why": "the roofline throughput ceiling is below this rate"}
    pt = rm.point(n)
    return {
        "rate_rps": rate,
        "resident_batch": pt.resident_batch,
        "step_ms": pt.step_ms,
        "itl_ms": pt.itl_ms,
        "latency": _latency(pt, slo, dep, prof, ladder, stat),
        "kv_utilisation": pt.kv_utilisation,
        "output_tokens_per_s": pt.output_tokens_per_s,
        "beyond_capacity": rate > cap.max_rps * (1 + 1e-9),
        "stable": True,
    }


def _ladder_text(catalog, dep, ladder, payload, typical_tokens) -> str:
    n = dep.tp
    per = f" ({n} GPUs)" if n > 1 else ""
    m = dep.model
    if m.checkpoint_weight_bytes and weight_bytes(m, dep.weight_dtype) == m.checkpoint_weight_bytes:
        weights_src = f"{m.checkpoint_weight_bytes / 1e9:.2f} GB, the {dep.weight_dtype.id} checkpoint"
    else:
        weights_src = f"{m.params_total / 1e9:.2f} B params x {dep.weight_dtype.bytes_per_element:g} bytes ({dep.weight_dtype.id})"
    rule = dep.engine.rule
    lines = [
        f"{dep.model.id} on {n} x {dep.gpu.id} — {dep.engine.name}, {dep.weight_dtype.id} weights, {dep.kv_dtype.id} cache, limit {dep.max_model_len:,} tokens",
        "",
        "Budget ladder (seed 000, eight steps):",
        f"  1. reported memory{per}                  {ladder.gpu_memory_gib:8.2f} GiB",
    ]
    if rule == "fraction_of_total":
        lines.append(f"  2. x gpu_memory_utilization {dep.memory_fraction:.2f}      {ladder.usable_gib:8.2f} GiB usable")
        lines.append(f"  3. - weights: {weights_src:<24} {ladder.weights_gib:8.2f} GiB")
        lines.append(f"  4. - overhead (activations, graphs, logits) {ladder.overhead_gib:5.2f} GiB")
    elif rule == "fraction_of_free_after_weights":
        lines.append(f"  2. - weights: {weights_src:<24} {ladder.weights_gib:8.2f} GiB")
        lines.append(f"  3. - overhead (activations, graphs, logits) {ladder.overhead_gib:5.2f} GiB")
        lines.append(f"  4. x free_gpu_memory_fraction {dep.memory_fraction:.2f} of what is left")
    else:
        lines.append(f"  2. x mem_fraction_static {dep.memory_fraction:.2f} (weights + KV)  {ladder.usable_gib:8.2f} GiB")
        lines.append(f"  3. - weights: {weights_src:<24} {ladder.weights_gib:8.2f} GiB")
        lines.append(f"  4. (activations and graphs live in the other {ladder.overhead_gib:.2f} GiB)")
    lines += [
        f"  5. = KV budget                          {ladder.kv_budget_gib:8.2f} GiB",
        f"  6. cache per token                      {ladder.kv_bytes_per_token:8,} bytes ({ladder.kv_bytes_per_token / 1024:,.1f} KiB)",
        *(f"       {line}" for line in layer_kind_lines(m, dep.kv_dtype, dep.tp)),
        f"  7. per user at the {dep.max_model_len:,}-token limit   {ladder.kv_gib_per_user:8.2f} GiB" + _per_user_note(ladder),
        f"  8. worst case: floor({ladder.kv_budget_gib:.2f} / {ladder.kv_gib_per_user:.2f}) = {ladder.worst_case_users} users (the guarantee)",
    ]
    if typical_tokens:
        held = paged_tokens(min(typical_tokens, dep.max_model_len), dep.block_size)
        per_user = payload["paged_users"]
        gib = kv_bytes_per_sequence(dep.model, held, dep.kv_dtype, dep.tp) / GiB
        lines.append(
            f"     paged: a {typical_tokens:,}-token conversation holds {held:,} tokens "
            f"({held // dep.block_size} blocks of {dep.block_size}) = {gib:.2f} GiB -> {per_user} users (what we observe)"
        )
    lines.append(
        f"  ridge point ({dep.weight_dtype.compute_dtype}): {payload['ridge_point']:.0f} FLOP/byte; decode GEMMs turn "
        f"compute-bound past {payload['ridge_batch']:.0f} sequences per step (at calibrated efficiencies)"
    )
    lines += ["", "Levers (independent, so they multiply):"]
    lower = max(dep.max_model_len // 2, dep.block_size)
    for lever in memory_levers(dep, catalog.dtype("fp8"), lower):
        if not lever.available:
            lines.append(f"  {lever.lever:<44} not available: {lever.why_not}")
            continue
        delta = lever.kv_budget_gib - ladder.kv_budget_gib
        extra = f", budget {delta:+.2f} GiB ({delta / ladder.kv_budget_gib:+.0%})" if abs(delta) > 1e-9 else ""
        lines.append(
            f"  {lever.lever:<44} {lever.kv_gib_per_user:6.2f} GiB/user -> {lever.worst_case_users} users worst case{extra}"
        )
    return "\n".join(lines)


def _per_user_note(ladder) -> str:
    """What step 7 includes beyond tokens x bytes per token: capped layers, a fixed state."""
    layout = ladder.kv_layout
    parts = []
    if layout.token_cap is not None and layout.token_cap < ladder.max_model_len:
        parts.append(f"capped layers hold {layout.token_cap:,} tokens")
    if layout.state_bytes_per_sequence:
        parts.append(f"+ {layout.state_bytes_per_sequence / 2**20:,.2f} MiB of fixed state")
    return f" ({'; '.join(parts)})" if parts else ""


def _capacity_text(payload, cap, quantile) -> str:

    pt = cap.point
    c = cap.concurrency
    lines = [
        "",
        f"Capacity of one replica ({cap.sizing} sizing):",
        f"  concurrency by memory: worst_case {c['worst_case']}, expected {c['expected']}, "
        + f"percentile {c['percentile']}  (quoting {cap.sizing})",
        f"  max rate          {cap.max_rps:10.3f} requests/s   binding ceiling: {cap.binding}",
        f"  resident batch    {pt.resident_batch:10.1f} sequences",
        f"  mean ITL          {pt.itl_ms:10.2f} ms   (mean step {pt.step_ms:.2f} ms; {pt.regime}-bound decode {pt.decode_ms:.2f} ms, prefill share {pt.prefill_share:.0%})",
        f"  {payload['latency']['stat']} latency       TTFT {payload['latency']['ttft_ms']:,.1f} ms, "
        f"TPOT {payload['latency']['tpot_ms']:,.2f} ms, per-token gap {payload['latency']['itl_ms']:,.2f} ms",
        f"  KV utilisation    {pt.kv_utilisation:10.1%}",
        f"  output tokens/s   {pt.output_tokens_per_s:10.1f}",
        "  each ceiling alone (requests/s): "
        + ", ".join(f"{k} {v:.3f}" for k, v in cap.ceilings_rps.items())
        + "".join(f", {k} holds up to the {cap.binding} ceiling" for k in cap.clamped),
    ]
    lines += [f"  note: {n}" for n in cap.notes]
    if "at_rate" in payload:
        a = payload["at_rate"]
        if not a["stable"]:
            lines.append(f"  at {a['rate_rps']:g} requests/s: unstable — {a['why']}")
        else:
            verdict = "BEYOND capacity" if a["beyond_capacity"] else "within capacity"
            lines.append(
                f"  at {a['rate_rps']:g} requests/s ({verdict}): batch {a['resident_batch']:.1f}, mean ITL {a['itl_ms']:.2f} ms, "
                f"{a['latency']['stat']} TTFT {a['latency']['ttft_ms']:,.0f} ms, {a['latency']['stat']} TPOT "
                f"{a['latency']['tpot_ms']:,.1f} ms, KV {a['kv_utilisation']:.0%}, {a['output_tokens_per_s']:.0f} output tokens/s"
            )
    return "\n".join(lines)


COMMANDS = [capacity]
