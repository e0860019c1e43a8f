"""`planner kv`: KV bytes per token and per request."""

from __future__ import annotations

import dataclasses

import click

from planner.bounds import MAX_TOKENS, MAX_TP
from planner.cli.options import (
    PowerOfTwoRange,
    catalog_option,
    dtype_for,
    echo_json,
    get_catalog,
    json_option,
)
from planner.deployment import model_tp_problem
from planner.memory import (
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_bytes_per_token_by_layer_kind,
    layer_kind_lines,
)
from planner.units import GB, GiB, KiB, gib_text


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
    dtype = dtype_for(catalog, kv_dtype, "kv", "--kv-dtype")
    problem = model_tp_problem(m, tp)
    if problem:
        raise click.BadParameter(problem, param_hint="--tp")
    if tokens is not None and tokens > m.max_position_embeddings:
        raise click.BadParameter(f"{tokens:,} exceeds the {m.max_position_embeddings:,} tokens '{m.id}' takes "
                                 "(max_position_embeddings)", param_hint="--tokens")
    n = tokens or m.max_position_embeddings
    per_token = kv_bytes_per_token(m, dtype, tp)
    per_request = kv_bytes_per_sequence(m, n, dtype, tp)
    layout = kv_bytes_per_token_by_layer_kind(m, dtype, tp)
    payload = {
        "model": m.id,
        "kv_dtype": dtype.id,
        "tp": tp,
        "attention": m.attention,
        "kv_bytes_per_token": per_token,
        # each GPU's share of a token's bytes, as the text says "N on each" (latent attention: the replica's
        # bytes count each GPU's whole copy)
        "kv_bytes_per_token_per_gpu": per_token // tp if per_token % tp == 0 else per_token / tp,
        # whole bytes as integers, as kv_bytes_per_token is ("bytes are integers")
        "kv_layer_kinds": [{**dataclasses.asdict(k), "bytes_per_token": _whole(k.bytes_per_token)} for k in layout.kinds],
        "kv_state_bytes_per_sequence": layout.state_bytes_per_sequence,
        "tokens": n,
        "kv_bytes_per_request": per_request,
        "kv_gib_per_request": per_request / GiB,
        "kv_gb_per_request": per_request / GB,
    }
    if as_json:
        echo_json(payload)
        return
    # with tp > 1 the bytes are the replica's, over its GPUs: each holds its share (latent attention: a whole copy)
    summed = f" over the {tp} GPUs, {per_token / tp:,.0f} on each" if tp > 1 else ""
    lines = [
        f"{m.id}, {dtype.id} cache" + (f", tp {tp}" if tp > 1 else ""),
        f"  per token   {per_token:,} bytes ({per_token / KiB:,.1f} KiB){summed}, by layer kind:",
        *(f"    {line}" for line in layer_kind_lines(m, dtype, tp)),
        f"  per request {n:,} token{'' if n == 1 else 's'} -> {per_request:,} bytes = {gib_text(per_request / GiB)} GiB = {gib_text(per_request / GB)} GB",
    ]
    click.echo("\n".join(lines))


def _whole(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


COMMANDS = [kv]
