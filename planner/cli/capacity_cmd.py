"""`planner capacity`: the budget ladder of one card, and one replica's capacity for a traffic class."""

from __future__ import annotations

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
    GivenPath,
    PowerOfTwoRange,
    catalog_option,
    dtype_for,
    echo_json,
    get_catalog,
    json_option,
)
from planner.deployment import DEFAULT_OVERHEAD_GIB, make_deployment, unsupported_choice
from planner.errors import InputError
from planner.histogram import Histogram
from planner.memory import (
    budget_ladder,
    kv_token_cap,
    overhead_refusal,
)


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
    """--histogram's histogram file. One that pyarrow cannot read is refused as a scenario's
    traffic.source.histogram is (planner.traffic reads it through the log readers' checks first), so
    that capacity and solve say the same of it (a file cut short has no PAR1 magic bytes; a folder
    holds a LICENSE file that is no log by its name), not pyarrow's words. Every refusal names the
    option, as solve's names the field."""
    from planner.workload.histfile import UnreadableHistogram, read_histogram
    from planner.workload.ingest import is_histogram_file

    try:
        try:
            return read_histogram(path)
        except UnreadableHistogram:
            if not is_histogram_file(path):  # (its checks raise their own refusal, where they have one)
                raise InputError("is a request log, not a histogram file; write its histogram with "
                                 "`planner histogram LOG -o FILE.parquet`", where=str(path)) from None
            raise
    except InputError as exc:
        raise InputError(f"--histogram: {exc}") from None


# The option that states each choice unsupported_choice can find at fault.
_CHOICE_OPTIONS = {"tp": "--tp", "weight_dtypes": "--weight-dtype", "kv_dtypes": "--kv-dtype"}


@click.command()
@click.argument("model")
@click.argument("gpu")
@click.option("--tp", type=PowerOfTwoRange(1, MAX_TP), default=1, show_default=True, help="Tensor-parallel degree.")
@click.option("--weight-dtype", default=None, help="Weight dtype [default: the checkpoint's (catalog checkpoint_dtype), else bf16].")
@click.option("--kv-dtype", default="bf16", show_default=True, help="KV-cache dtype (planner catalog dtypes).")
@click.option("--context-limit", "--max-model-len", "max_model_len", type=click.IntRange(1, MAX_TOKENS), default=None,
              help="Context limit, tokens: the scenario's context_limit, vLLM's --max-model-len [default: the model's; "
                   "with --histogram, the largest histogram edge within it].")
@click.option("--engine", default="vllm", show_default=True, help="Engine profile (planner catalog engines).")
@click.option("--gpu-memory-utilization", type=FiniteFloatRange(0, 1, min_open=True), default=None, help="Fraction of memory the engine takes [default: the engine's].")
@click.option("--overhead-gib", type=FiniteFloatRange(0, MAX_GPU_MEMORY_GIB), default=DEFAULT_OVERHEAD_GIB, show_default=True, help="Activations, CUDA graphs, logits, per GPU.")
@click.option("--typical-tokens", type=click.IntRange(1, MAX_TOKENS), default=None, help="Typical conversation length for paged users.")
@click.option("--histogram", "histogram_file", type=GivenPath(), default=None,
              help="Traffic class from a histogram file, or a folder of its part files (planner histogram).")
@click.option("--prompt-tokens", type=click.IntRange(1, MAX_TOKENS), default=None,
              help="Every request has this prompt length (at least 1: engines refuse an empty prompt).")
@click.option("--output-tokens", type=click.IntRange(1, MAX_TOKENS), default=None, help="Every request has this output length.")
@click.option("--sizing", type=_SizingChoice(), default="expected", show_default=True,
              help="Concurrency the cache holds: worst-case (every sequence at the limit), expected, or percentile.")
@click.option("--quantile", type=FiniteFloatRange(0.5, 0.99999), default=0.99, show_default=True, help="For --sizing percentile.")
@click.option("--shared-prefix-tokens", "--shared-prefix", "shared_prefix", type=click.IntRange(0, MAX_TOKENS), default=0, show_default=True,
              help="Tokens of a prefix every request shares (prefix caching; the scenario's shared_prefix_tokens).")
@click.option("--ttft-s", type=FiniteFloatRange(min=0, min_open=True, max=MAX_TTFT_S), default=None,
              help="Time-to-first-token target at --stat, seconds.")
@click.option("--tpot-ms", type=FiniteFloatRange(min=0, min_open=True, max=MAX_LATENCY_MS), default=None,
              help="Time-per-output-token target (per request) at --stat, ms.")
@click.option("--itl-ms", type=FiniteFloatRange(min=0, min_open=True, max=MAX_LATENCY_MS), default=None,
              help="Per-token gap target at --stat, ms.")
@click.option("--stat", type=click.Choice(["mean", "p50", "p90", "p95", "p99"]), default="p99", show_default=True,
              help="Statistic of the latency targets, over requests (tokens for --itl-ms).")
@click.option("--rate-rps", "--rate", "rate", type=FiniteFloatRange(0, MAX_RPS), default=None,
              help="Also evaluate the replica at this arrival rate, requests/s.")
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
      planner capacity llama-3.1-8b h100-sxm --context-limit 8192 --typical-tokens 2300
      planner capacity llama-3.1-8b h100-sxm --prompt-tokens 1000 --output-tokens 200 --tpot-ms 50 --json
    """
    # The capacity model loads only when a command needs it.
    from planner.replica_view import (
        capacity_text,
        capacity_view,
        ladder_payload,
        ladder_text,
        levers_payload,
    )
    from planner.targets import SLO

    given = click.get_current_context().get_parameter_source("quantile") is click.core.ParameterSource.COMMANDLINE
    if given and sizing != "percentile":  # as a scenario's sizing: section refuses it
        raise click.BadParameter(f"is read only with --sizing percentile (sizing is {sizing})", param_hint="--quantile")
    catalog = get_catalog(catalog_files)
    stated = click.get_current_context().get_parameter_source("overhead_gib") is click.core.ParameterSource.COMMANDLINE
    if stated and (refusal := overhead_refusal(catalog.engine(engine), "--gpu-memory-utilization")):  # it was ignored without a word
        raise click.BadParameter(refusal, param_hint="--overhead-gib")
    taken = catalog.model(model).max_position_embeddings
    if max_model_len is not None and max_model_len > taken:  # in the option's name, as `kv --tokens` is told
        raise click.BadParameter(f"{max_model_len:,} exceeds the {taken:,} tokens '{model}' takes (max_position_embeddings)",
                                 param_hint="--context-limit")
    if weight_dtype is None:
        weight_dtype = catalog.model(model).checkpoint_dtype or "bf16"
    else:
        dtype_for(catalog, weight_dtype, "weight", "--weight-dtype")
    dtype_for(catalog, kv_dtype, "kv", "--kv-dtype")
    stated_limit = max_model_len
    if histogram_file and max_model_len is None:  # its bins are served up to an edge, as a scenario's are
        from planner.plan_objects import default_context_limit

        max_model_len = default_context_limit(catalog.model(model))
    fault = unsupported_choice(catalog.gpu(gpu), tp, catalog.dtype(weight_dtype), catalog.dtype(kv_dtype),
                               catalog.model(model))
    if fault:  # named by the option to change, as `kv --tp` is (make_deployment's error names none)
        raise click.BadParameter(fault[1], param_hint=_CHOICE_OPTIONS[fault[0]])
    dep = make_deployment(
        catalog, model=model, gpu=gpu, tp=tp, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
        max_model_len=max_model_len, engine=engine, memory_fraction=gpu_memory_utilization,
        overhead_gib_per_gpu=overhead_gib,
    )
    _one_traffic_source(typical_tokens, histogram_file, prompt_tokens, shared_prefix, ttft_s, tpot_ms, itl_ms)
    if typical_tokens is not None and typical_tokens > dep.max_model_len:
        raise click.BadParameter(f"{typical_tokens:,} tokens is longer than the context limit {dep.max_model_len:,}",
                                 param_hint="--typical-tokens")
    ladder = budget_ladder(dep)
    payload = ladder_payload(dep, ladder, typical_tokens)
    payload["levers"] = levers_payload(catalog, dep)
    notes: list[str] = []  # said once the command has succeeded: a failed run's one line is its error
    prof = _traffic_class(dep, histogram_file, prompt_tokens, output_tokens, shared_prefix, stated_limit, notes)
    view = None
    if prof is not None:
        slo = SLO.single(ttft_s=ttft_s, tpot_ms=tpot_ms, itl_ms=itl_ms, stat=stat)
        view = capacity_view(dep, prof, slo, ladder, sizing=sizing, quantile=quantile, stat=stat, rate_rps=rate)
        if payload["paged_users"] is None:
            payload["paged_users"] = view.capacity.concurrency["expected"]
        payload.update(view.payload)
    elif rate is not None:
        raise click.UsageError("--rate-rps needs a traffic class (--histogram or --prompt-tokens/--output-tokens)")
    if as_json:
        echo_json(payload)
    else:
        click.echo(ladder_text(catalog, dep, ladder, payload))
        if view is not None:
            click.echo(capacity_text(view))
    for note in notes:
        click.echo(f"note: {note}", err=True)


def _one_traffic_source(typical_tokens, histogram_file, prompt_tokens, shared_prefix, ttft_s, tpot_ms, itl_ms) -> None:
    """Options that would be ignored, or answer two questions at once, are refused: --typical-tokens
    sizes the ladder's paged users, a traffic class sizes them from its own lengths (and the two
    disagree in one answer), and a shared prefix or a latency target means something only for a class."""
    if typical_tokens is not None and (histogram_file or prompt_tokens is not None):
        raise click.UsageError("give one of --typical-tokens, --histogram or --prompt-tokens/--output-tokens: "
                               "a traffic class sets the users' lengths itself")
    if histogram_file or prompt_tokens is not None:
        return
    given = [name for name, value in (("--shared-prefix-tokens", shared_prefix or None), ("--ttft-s", ttft_s),
                                      ("--tpot-ms", tpot_ms), ("--itl-ms", itl_ms)) if value is not None]
    if given:
        raise click.UsageError(f"{', '.join(given)} needs a traffic class (--histogram or "
                               "--prompt-tokens/--output-tokens)")


def _traffic_class(dep, histogram_file, prompt_tokens, output_tokens, shared_prefix, stated_limit,
                   notes: list[str]):
    """The token profile of --histogram or --prompt-tokens/--output-tokens within the context
    limit, or None without a class; usage errors name the option. What it leaves out is added to
    `notes`, which the command prints once it has succeeded."""
    from planner.paged import prefix_disagreement, token_profile
    from planner.plan_objects import default_limit_note, edge_at_most

    if (prompt_tokens is None) != (output_tokens is None):
        raise click.UsageError("--prompt-tokens and --output-tokens go together")
    if histogram_file and prompt_tokens is not None:
        raise click.UsageError("give either --histogram or --prompt-tokens/--output-tokens, not both")
    if histogram_file:
        from planner.scenario.fields import histogram_edge

        # A stated limit inside a bin would leave out the whole bin's requests while memory is sized at
        # the limit; a scenario's context_limit is refused the same way. Without one, the limit is the
        # largest edge within the model's (default_context_limit), as a scenario's is.
        try:
            histogram_edge(stated_limit, "with --histogram, the context limit")
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--context-limit'") from None
        hist = _load_histogram(histogram_file)
        if hist.is_empty:
            raise InputError("holds no request: there is no traffic class to size", where=str(histogram_file))
        served = hist.select_total(at_most=edge_at_most(dep.max_model_len))
        too_long = hist.requests - served.requests
        source = default_limit_note(dep.model, dep.max_model_len, stated=stated_limit is not None)
        if too_long and served.is_empty:  # the error alone, one line, says why
            raise InputError(f"no request within the context limit: all {too_long:,} exceed {dep.max_model_len:,} "
                             f"tokens{source}", where=str(histogram_file))
        if too_long:
            notes.append(f"{too_long:,} request(s) exceed the {dep.max_model_len:,}-token limit{source} and are "
                         "left out")
            hist = served
    elif prompt_tokens is not None:
        if prompt_tokens + output_tokens > dep.max_model_len:
            raise click.UsageError(
                f"--prompt-tokens + --output-tokens = {prompt_tokens + output_tokens} exceeds the context limit {dep.max_model_len}"
            )
        hist = Histogram.constant(prompt_tokens, output_tokens)
    else:
        return None
    if hist.is_empty:
        raise click.UsageError("the traffic class has no request within the context limit")
    if shared_prefix >= dep.max_model_len:
        raise click.BadParameter(f"{shared_prefix:,} tokens is not below the context limit {dep.max_model_len:,}",
                                 param_hint="--shared-prefix-tokens")
    disagreement = prefix_disagreement(hist, shared_prefix)
    if disagreement:
        raise click.BadParameter(disagreement, param_hint="--shared-prefix-tokens")
    return token_profile(
        hist, block_size=dep.block_size, chunk_tokens=dep.engine.max_num_batched_tokens,
        sliding_window=kv_token_cap(dep.model), shared_prefix_tokens=shared_prefix,
    )


COMMANDS = [capacity]
