"""`planner catalog ...`: list the GPUs, models, dtypes and engines the planner knows,
and import a model from a Hugging Face config.json."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import click

from planner.bounds import MAX_PARAMS
from planner.catalog import Catalog
from planner.cli.options import GivenPath, catalog_option, echo_json, get_catalog, json_option
from planner.files import write_text_atomic
from planner.hf_import import catalog_yaml, model_from_hf_config, parse_layer_kinds


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def catalog() -> None:
    """List the catalogs (GPUs, models, dtypes, engines) or import a model.

    Every number in the catalogs carries its source; `--catalog FILE` merges a
    YAML file of your own entries or overrides (e.g. a negotiated price) over the
    built-in ones.

    \b
    Examples:
      planner catalog gpus
      planner catalog models --json
      planner catalog import-hf config.json --name my-model -o my-model.yaml
    """


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Left-aligned text columns, two spaces apart, with a header rule."""
    cells = [[str(h) for h in headers], *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return str(value)


def _select(table: Mapping[str, Any], names: Sequence[str], lookup: Callable[[str], Any]) -> list[Any]:
    """The named entries, each once (unknown names are an error with a 'did you mean'), else all."""
    return [lookup(n) for n in dict.fromkeys(names)] if names else list(table.values())


def _show(entries: Iterable[Any], as_json: bool, headers: list[str], row: Callable[[Any], list[Any]]) -> None:
    """Catalog entries as JSON (every field), or as a table: `headers`, then row(entry) for each."""
    if as_json:
        echo_json([e.model_dump() for e in entries])
        return
    click.echo(_table(headers, (row(e) for e in entries)))


def _billions(n: int) -> str:
    return f"{n / 1e9:.2f}"


@catalog.command("gpus")
@click.argument("names", nargs=-1)
@json_option
@catalog_option
def gpus_cmd(names: tuple[str, ...], as_json: bool, catalog_files: tuple[str, ...]) -> None:
    """GPU types: memory (GiB, as the runtime reports it), bandwidth, dense TFLOP/s,
    supported dtypes and price. Give NAMES to show only those.

    \b
    Examples:
      planner catalog gpus
      planner catalog gpus h100-sxm h200 --json
      planner catalog gpus --catalog negotiated_prices.yaml
    """
    cat: Catalog = get_catalog(catalog_files)
    entries = _select(cat.gpus, names, cat.gpu)
    _show(entries, as_json, ["id", "memory_GiB", "HBM_GB/s", "bf16_TFLOPS", "fp8_TFLOPS", "weights", "kv", "link_GB/s", "USD/GPU-h"],
          lambda g: [
              g.id,
              f"{g.memory_gib:.2f}",
              g.hbm_bandwidth_gb_s,
              g.dense_tflops.get("bf16"),
              g.dense_tflops.get("fp8"),
              g.weight_dtypes,
              g.kv_dtypes,
              g.interconnect_gb_s if g.interconnect_link_gb_s is None else
              f"{g.interconnect_gb_s:g} ({g.interconnect_link_gb_s:g}/peer)",
              g.price_usd_per_hour,
          ])


@catalog.command("models")
@click.argument("names", nargs=-1)
@json_option
@catalog_option
def models_cmd(names: tuple[str, ...], as_json: bool, catalog_files: tuple[str, ...]) -> None:
    """Models: layers, attention shape (heads, KV heads, head_dim, latent or
    sliding-window), experts and parameter counts. Give NAMES to show only those.

    \b
    Examples:
      planner catalog models
      planner catalog models llama-3.1-70b deepseek-v3 --json
    """
    cat = get_catalog(catalog_files)
    entries = _select(cat.models, names, cat.model)
    _show(entries, as_json, ["id", "layers", "hidden", "heads", "kv_heads", "head_dim", "attention", "experts", "params_B", "active_B", "max_len"],
          lambda m: [
              m.id,
              m.num_hidden_layers,
              m.hidden_size,
              m.num_attention_heads,
              m.num_key_value_heads,
              m.head_dim,
              _attention(m),
              f"{m.num_experts_per_tok}/{m.num_experts}" if m.num_experts else None,
              _billions(m.params_total),
              _billions(m.params_active),
              m.max_position_embeddings,
          ])


def _attention(m: Any) -> str:
    """The attention layout in a few characters: mla(latent+rope), gqa, and the layers that
    differ: +swa(window x layers), +chunk(size x layers), +linear(layers) / +mamba(layers)."""
    base = f"mla({m.kv_lora_rank}+{m.qk_rope_head_dim})" if m.attention == "mla" else "gqa"
    if m.num_sliding_window_layers:
        base += f"+swa({m.sliding_window}x{m.num_sliding_window_layers})"
    if m.num_chunked_attention_layers:
        base += f"+chunk({m.attention_chunk_size}x{m.num_chunked_attention_layers})"
    if m.num_state_layers:
        base += f"+{'linear' if m.state_layer_kind == 'linear_attention' else 'mamba'}({m.num_state_layers})"
    if m.num_kv_shared_layers:
        base += f"+shared({m.num_kv_shared_layers})"
    return base


@catalog.command("dtypes")
@json_option
@catalog_option
def dtypes_cmd(as_json: bool, catalog_files: tuple[str, ...]) -> None:
    """Number formats for weights and KV cache: bits per element (scales
    included), the tensor-core rate they run at, and the GPU feature they need.

    \b
    Example:
      planner catalog dtypes --json
    """
    cat = get_catalog(catalog_files)
    _show(cat.dtypes.values(), as_json, ["id", "bits", "compute", "weights", "kv", "needs"],
          lambda d: [d.id, d.bits_per_element, d.compute_dtype, "yes" if d.weight else "no", "yes" if d.kv else "no", d.needs_native])


@catalog.command("engines")
@json_option
@catalog_option
def engines_cmd(as_json: bool, catalog_files: tuple[str, ...]) -> None:
    """Serving-engine profiles: how each sizes the KV cache (rule and memory
    fraction), its block size, its step limits (token budget and sequences),
    by GPU where the engine's defaults depend on it (tokens/sequences), and the
    GPU makers it runs on where it runs on some only (TensorRT-LLM: NVIDIA).

    \b
    Example:
      planner catalog engines
    """
    cat = get_catalog(catalog_files)
    _show(cat.engines.values(), as_json,
          ["id", "rule", "fraction", "block_size", "max_batched_tokens", "max_seqs", "by_gpu", "runs_on", "name"],
          lambda e: [e.id, e.rule, e.memory_fraction, e.block_size, e.max_num_batched_tokens, e.max_num_seqs,
                     _tiers(e), ", ".join(e.vendors) if e.vendors else "any", e.name])


def _tiers(engine: Any) -> str:
    """Engine.gpu_tiers as 'tokens/sequences' per tier, first match first."""
    def when(t: Any) -> str:
        held = [f">= {t.min_memory_gib:g} GiB" if t.min_memory_gib else "",
                f"not named {t.unless_named}" if t.unless_named else ""]
        return " and ".join(h for h in held if h) or "other GPUs"
    return "; ".join(f"{when(t)}: {'/'.join(map(str, t.limits(engine)))}" for t in engine.gpu_tiers) or "-"


# A catalog id is a word a command line and a YAML key take as they are (a letter or digit, then
# letters, digits and . _ / + -): a name with a colon, a newline or nothing at all would write a
# catalog file its own loader refuses, or an id no one can type.
_CATALOG_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/+-]{0,99}")


def _catalog_id(value: str) -> str:
    if not _CATALOG_ID.fullmatch(value):
        raise click.BadParameter(f"{value!r} is not a catalog id: a letter or digit, then letters, digits and . _ / + - "
                                 "(at most 100), e.g. qwen2.5-7b")
    return value


@catalog.command("import-hf")
@click.argument("config_json", metavar="CONFIG.json", type=GivenPath(dir_okay=False))
@click.option("--name", required=True, callback=lambda ctx, param, value: _catalog_id(value),
              help="Catalog id for the model, e.g. qwen2.5-7b.")
@click.option("-o", "--output", "--out", "out", type=GivenPath(dir_okay=False), help="Write the YAML here instead of printing it.")
@click.option("--weights", type=GivenPath(), help="The checkpoint: a model folder (.safetensors files) or its "
              "model.safetensors.index.json; parameters and bytes are then read from it, exactly.")
@click.option("--params-total", type=click.IntRange(1, MAX_PARAMS), help="Total parameter count (overrides the counted one).")
@click.option("--params-active", type=click.IntRange(1, MAX_PARAMS), help="Active parameters per token (MoE; overrides).")
@click.option("--layer-kinds", help="State the layer layout instead of reading it: KIND=COUNT,... with KIND among "
              "full_attention, sliding_attention, chunked_attention, kv_shared, linear_attention, mamba, no_cache.")
@click.option("--state-bytes-per-layer", type=click.IntRange(1, MAX_PARAMS),
              help="With --layer-kinds: bytes of one linear_attention/mamba layer's state per sequence.")
@click.option("--hf-id", help="Hub id (default: the config's _name_or_path, else --name).")
@click.option("--source", "config_source", help="Where the config came from, e.g. its Hub URL (recorded as config_source).")
def import_hf_cmd(
    config_json: str,
    name: str,
    out: str | None,
    weights: str | None,
    params_total: int | None,
    params_active: int | None,
    layer_kinds: str | None,
    state_bytes_per_layer: int | None,
    hf_id: str | None,
    config_source: str | None,
) -> None:
    """Make a catalog model entry from a Hugging Face config.json on disk.

    Reads the architecture (nested text_config included): heads, KV heads, head_dim and
    every layer's kind (full, sliding-window, chunked, latent, linear-attention, state-space),
    experts, and a pre-quantized checkpoint's dtype. Parameters come from the checkpoint
    files with --weights (exact), else from the family's formula (planner/params/). A
    model_type or an attention setting planner does not model is refused by name, never
    guessed; every default the config relies on is printed as a note. The output is a
    `--catalog` file (`models: {ID: ...}`); the entry under `models:` has the shape of
    data/models.yaml.

    \b
    Example:
      planner catalog import-hf Qwen2.5-7B-Instruct/config.json --name qwen2.5-7b \\
          --weights Qwen2.5-7B-Instruct/model.safetensors.index.json \\
          --source https://huggingface.co/Qwen/Qwen2.5-7B-Instruct/blob/main/config.json \\
          -o qwen.yaml
      planner capacity qwen2.5-7b h100-sxm --catalog qwen.yaml
    """
    if state_bytes_per_layer and layer_kinds is None:
        raise click.UsageError("--state-bytes-per-layer goes with --layer-kinds")
    model = model_from_hf_config(
        config_json,
        name=name,
        params_total=params_total,
        params_active=params_active,
        hf_id=hf_id,
        config_source=config_source,
        weights=weights,
        layer_kinds=parse_layer_kinds(layer_kinds) if layer_kinds is not None else None,
        state_bytes_per_layer=state_bytes_per_layer,
    )
    text = catalog_yaml(model)
    if out:
        done = f"wrote {out}: model '{name}' ({_billions(model.params_total)}B parameters)"  # before writing: all or nothing
        write_text_atomic(out, text)
        click.echo(done)
    else:
        click.echo(text, nl=False)
    # once the entry is out: a run that fails prints its error alone, one line
    for line in filter(None, model.notes.split("; ")):
        click.echo(f"note: {line}", err=True)


COMMANDS = [catalog]
