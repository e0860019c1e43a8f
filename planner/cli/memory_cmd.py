"""`planner kv`: KV bytes per token and per request."""

from __future__ import annotations

import click

from planner.bounds import MAX_TOKENS, MAX_TP
from planner.cli.options import PowerOfTwoRange, catalog_option, echo_json, get_catalog, json_option
from planner.memory import kv_bytes_for_tokens, kv_bytes_per_token, kv_heads_stored
from planner.units import GB, GiB, KiB


@click.command()
@click.argument("model")
@click.option("--kv-dtype", default="bf16", show_default=True, help="KV-cache dtype (bf16, fp16, fp8).")
@click.option("--tokens", type=click.IntRange(1, MAX_TOKENS), default=None, help="Sequence length [default: the model's limit].")
@click.option("--tp", type=PowerOfTwoRange(1, MAX_TP), default=1, show_default=True, help="Tensor-parallel degree (KV heads replicate when tp > kv heads).")
@catalog_option
@json_option
def kv(model: str, kv_dtype: str, tokens: int | None, tp: int, catalog_files, as_json: bool) -> None:
    """KV-cache bytes per token and per request of MODEL.

    \b
    Example:
      planner kv llama-3.1-8b --tokens 8192
    """
    catalog = get_catalog(catalog_files)
    m = catalog.model(model)
    dtype = catalog.dtype(kv_dtype)
    if not dtype.kv:
        kv_ok = ", ".join(sorted(d for d, v in catalog.dtypes.items() if v.kv))
        raise click.UsageError(f"'{kv_dtype}' is not a KV-cache dtype; choose from {kv_ok}")
    n = tokens or m.max_position_embeddings
    per_token = kv_bytes_per_token(m, dtype, tp)
    per_request = kv_bytes_for_tokens(m, n, dtype, tp)
    payload = {
        "model": m.id,
        "kv_dtype": dtype.id,
        "tp": tp,
        "attention": m.attention,
        "kv_bytes_per_token": per_token,
        "tokens": n,
        "kv_bytes_per_request": per_request,
        "kv_gib_per_request": per_request / GiB,
        "kv_gb_per_request": per_request / GB,
    }
    if as_json:
        echo_json(payload)
        return
    if m.attention == "mla":
        formula = (
            f"latent attention: {m.num_hidden_layers} layers x ({m.kv_lora_rank} latent + "
            f"{m.qk_rope_head_dim} rope) x {dtype.bytes_per_element:g} bytes"
        )
        if tp > 1:
            formula += f" x {tp} (latent replicated on every tp rank)"
    else:
        heads = kv_heads_stored(m, tp)
        formula = (
            f"2 x {m.num_hidden_layers} layers x {heads} KV heads x {m.head_dim} head_dim x "
            f"{dtype.bytes_per_element:g} bytes"
        )
        if heads != m.num_key_value_heads:
            formula += f" (tp {tp} > {m.num_key_value_heads} KV heads: replicated)"
    lines = [
        f"{m.id}, {dtype.id} cache",
        f"  per token   {formula} = {per_token:,} bytes ({per_token / KiB:,.1f} KiB)",
        f"  per request {n:,} tokens -> {per_request:,} bytes = {per_request / GiB:,.2f} GiB = {per_request / GB:,.2f} GB",
    ]
    if m.num_sliding_window_layers:
        lines.append(
            f"  note        {m.num_sliding_window_layers} of {m.num_hidden_layers} layers keep only the last "
            f"{m.sliding_window:,} tokens (sliding window)"
        )
    click.echo("\n".join(lines))


COMMANDS = [kv]
