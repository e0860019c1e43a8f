"""The layer layout of a Hugging Face config, read per family: how many layers of each kind
(LAYER_KINDS: full, sliding-window, chunked, KV-shared, linear-attention, Mamba, cacheless), with
the window, chunk or per-sequence state those kinds need.

Each layout function takes the config's planner.hf_config.FamilyReader (a missing key takes
the family's default, noted) and names in its docstring the transformers (or vLLM) code its
rule comes from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LAYER_KINDS = (
    "full_attention", "sliding_attention", "chunked_attention", "kv_shared", "linear_attention", "mamba", "no_cache",
)
STATE_KINDS = ("linear_attention", "mamba")


@dataclass(frozen=True)
class Layout:
    """Layer counts by kind (LAYER_KINDS), with the window / chunk / state they need."""

    layers: Mapping[str, int]
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    state_bytes_per_layer: int | None = None


def full_layout(r: Any) -> Layout:
    return Layout({"full_attention": r.layers})


def from_layer_types(r: Any, names: Mapping[str, str]) -> dict[str, int] | None:
    """Counts by kind from `layer_types`, or None when the config has none. An entry that is not
    one of `names` (config value -> kind) is refused, naming its index."""
    types = r.cfg.texts("layer_types")
    if types is None:
        return None
    if len(types) != r.layers:
        raise r.cfg.error("layer_types", f"has {len(types)} entries for num_hidden_layers {r.layers}")
    counts = dict.fromkeys(LAYER_KINDS, 0)
    for i, t in enumerate(types):
        if t not in names:
            raise r.cfg.error(
                f"layer_types[{i}]", f"layer kind '{t}' is not modelled (known: {', '.join(sorted(names))}); "
                "give --layer-kinds to state the layout"
            )
        counts[names[t]] += 1
    return counts


SLIDING_NAMES = {"full_attention": "full_attention", "sliding_attention": "sliding_attention"}


def window_layout(r: Any, counts: dict[str, int]) -> Layout:
    window = r.integer("sliding_window") if counts.get("sliding_attention") else None
    return Layout(counts, sliding_window=window)


def mistral_layout(r: Any) -> Layout:
    """Mistral / Mixtral: a non-null `sliding_window` applies to every layer (Mistral 7B v0.1)."""
    window = r.integer("sliding_window", nullable=True)
    if window is None:
        return full_layout(r)
    return Layout({"sliding_attention": r.layers}, sliding_window=window)


def qwen_layout(r: Any) -> Layout:
    """Qwen2/Qwen3: sliding windows only with `use_sliding_window`, on the layers from
    `max_window_layers` up (transformers Qwen2Attention: layer_idx >= max_window_layers)."""
    counts = from_layer_types(r, SLIDING_NAMES)
    if counts is not None:
        return window_layout(r, counts)
    if not r.flag("use_sliding_window"):
        return full_layout(r)
    window = r.integer("sliding_window", nullable=True)
    if window is None:
        return full_layout(r)
    first = min(r.layers, r.integer("max_window_layers", minimum=0))
    return Layout({"full_attention": first, "sliding_attention": r.layers - first}, sliding_window=window)


def even_layers_sliding(r: Any) -> Layout:
    """Gemma 2 and gpt-oss: `layer_types`, else layer i local when i is even (transformers
    4.42.0 Gemma2: layer_idx % 2 == 0; 4.55.0 GptOssConfig: (i + 1) % 2)."""
    counts = from_layer_types(r, SLIDING_NAMES)
    if counts is None:
        sliding = (r.layers + 1) // 2
        counts = {"full_attention": r.layers - sliding, "sliding_attention": sliding}
    return window_layout(r, counts)


def gemma3_layout(r: Any) -> Layout:
    """Gemma 3: `layer_types`, else `sliding_window_pattern` (default 6): layer i is local unless
    (i + 1) is a multiple of the pattern (transformers 4.50.0 Gemma3DecoderLayer.is_sliding)."""
    counts = from_layer_types(r, SLIDING_NAMES)
    if counts is None:
        pattern = r.integer("sliding_window_pattern")
        full = r.layers // pattern
        counts = {"full_attention": full, "sliding_attention": r.layers - full}
    elif r.cfg.has("sliding_window_pattern"):
        pattern = r.integer("sliding_window_pattern")
        if counts["full_attention"] != r.layers // pattern:
            raise r.cfg.error(
                "sliding_window_pattern",
                f"{pattern} gives {r.layers // pattern} full-attention layers, layer_types {counts['full_attention']}",
            )
    return window_layout(r, counts)


def llama4_layout(r: Any) -> Layout:
    """Llama 4: layers that use RoPE attend within chunks of `attention_chunk_size`; the NoPE
    layers (no_rope_layers[i] == 0, every `no_rope_layer_interval`-th by default) attend to
    everything (transformers 4.51.0 Llama4TextConfig; vLLM Llama4Attention: chunked local
    attention when not nope)."""
    flags = r.cfg.integers("no_rope_layers")
    if flags:
        if len(flags) != r.layers:
            raise r.cfg.error("no_rope_layers", f"has {len(flags)} entries for num_hidden_layers {r.layers}")
        rope_layers = sum(1 for f in flags if f)
    else:
        interval = r.integer("no_rope_layer_interval")
        rope_layers = sum(1 for i in range(r.layers) if (i + 1) % interval)
    chunk = r.integer("attention_chunk_size", nullable=True)
    if chunk is None:
        return full_layout(r)
    return Layout({"full_attention": r.layers - rope_layers, "chunked_attention": rope_layers}, attention_chunk_size=chunk)


def gated_deltanet_state_bytes(
    *, num_key_heads: int, num_value_heads: int, key_head_dim: int, value_head_dim: int, conv_kernel: int,
    conv_bytes: float, state_bytes: float,
) -> int:
    """One Gated DeltaNet layer's state for one sequence (vLLM
    MambaStateShapeCalculator.gated_delta_net_state_shape): a convolution state of
    conv_dim x (kernel - 1), conv_dim = 2 x key heads x key dim + value heads x value dim, and a
    recurrent state of value heads x value dim x key dim. Split across tensor-parallel ranks,
    so the replica holds the same total."""
    conv_dim = 2 * num_key_heads * key_head_dim + num_value_heads * value_head_dim
    return round(conv_dim * (conv_kernel - 1) * conv_bytes + num_value_heads * value_head_dim * key_head_dim * state_bytes)


def mamba2_state_bytes(
    *, num_heads: int, head_dim: int, n_groups: int, state_size: int, conv_kernel: int, conv_bytes: float, state_bytes: float,
) -> int:
    """One Mamba-2 layer's state for one sequence (vLLM MambaStateShapeCalculator.mamba2_state_shape):
    a convolution state of (heads x head_dim + 2 x groups x state_size) x (kernel - 1) and an
    SSM state of heads x head_dim x state_size."""
    conv_dim = num_heads * head_dim + 2 * n_groups * state_size
    return round(conv_dim * (conv_kernel - 1) * conv_bytes + num_heads * head_dim * state_size * state_bytes)


def _state_dtype_bytes(r: Any) -> tuple[float, float]:
    """(conv, recurrent) state bytes per value: the model's dtype (vLLM mamba_cache_dtype 'auto'),
    the recurrent state in `mamba_ssm_dtype` when the config names one (Qwen3.5: float32)."""
    model = r.dtype_bytes or 2.0
    ssm = r.cfg.text("mamba_ssm_dtype")
    if ssm is None:
        return model, model
    sizes = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}
    if ssm not in sizes:
        raise r.cfg.error("mamba_ssm_dtype", f"unknown dtype '{ssm}' (known: {', '.join(sizes)})")
    r.note(f"{r.cfg.name('mamba_ssm_dtype')}: recurrent state kept in {ssm}")
    return model, sizes[ssm]


def linear_hybrid_layout(r: Any) -> Layout:
    """Qwen3-Next / Qwen3.5: `layer_types`, else every `full_attention_interval`-th layer is full
    attention and the rest Gated DeltaNet (transformers 4.57.0 Qwen3NextConfig)."""
    counts = from_layer_types(r, {"full_attention": "full_attention", "linear_attention": "linear_attention"})
    interval_given = r.cfg.has("full_attention_interval")
    interval = r.integer("full_attention_interval") if counts is None or interval_given else None
    if interval is not None:
        full = r.layers // interval
        if counts is not None and counts["full_attention"] != full:
            raise r.cfg.error(
                "full_attention_interval",
                f"{interval} gives {full} full-attention layers, layer_types {counts['full_attention']}",
            )
        counts = counts or {"full_attention": full, "linear_attention": r.layers - full}
    conv_bytes, state_bytes = _state_dtype_bytes(r)
    # (read in this order: a default each one takes is noted in this order)
    heads = {k: r.integer(f"linear_{k}") for k in ("num_key_heads", "num_value_heads", "key_head_dim", "value_head_dim")}
    kernel = r.integer("linear_conv_kernel_dim")
    state = gated_deltanet_state_bytes(**heads, conv_kernel=kernel, conv_bytes=conv_bytes, state_bytes=state_bytes)
    return Layout(counts, state_bytes_per_layer=state if counts.get("linear_attention") else None)


# Why a Nemotron-3 config is refused: its blocks are listed, not patterned (hf_config says it where its
# layer count is missing, nemotron_h_layout where its pattern is).
BLOCK_LIST_TEXT = "this config lists its blocks in layers_block_type instead, a layout planner does not read"


def nemotron_h_layout(r: Any) -> Layout:
    """Nemotron-H: `hybrid_override_pattern`, one character per block: M Mamba-2, * attention,
    - MLP and E MoE (neither attention nor state)."""
    pattern = r.cfg.text("hybrid_override_pattern")
    if pattern is None:
        raise r.cfg.error("hybrid_override_pattern", "required field is missing"
                          + (f": {BLOCK_LIST_TEXT}" if r.cfg.has("layers_block_type") else ""))
    if len(pattern) != r.layers:
        raise r.cfg.error("hybrid_override_pattern", f"has {len(pattern)} blocks for num_hidden_layers {r.layers}")
    unknown = sorted(set(pattern) - set("M*-E"))
    if unknown:
        raise r.cfg.error("hybrid_override_pattern", f"block '{unknown[0]}' is not modelled (known: M, *, -, E)")
    conv_bytes, state_bytes = _state_dtype_bytes(r)
    mamba = pattern.count("M")
    heads = {"num_heads": r.integer("mamba_num_heads"), "head_dim": r.integer("mamba_head_dim"),
             "n_groups": r.integer("n_groups"), "state_size": r.integer("ssm_state_size")}  # fmt: skip
    kernel = r.integer("conv_kernel")
    state = mamba2_state_bytes(**heads, conv_kernel=kernel, conv_bytes=conv_bytes, state_bytes=state_bytes)
    layers = {"full_attention": pattern.count("*"), "mamba": mamba, "no_cache": pattern.count("-") + pattern.count("E")}
    return Layout(layers, state_bytes_per_layer=state if mamba else None)
