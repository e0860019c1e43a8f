"""The model families planner reads from a Hugging Face config.json: their defaults, their
layer layout and their parameter-count formula.

One `Family` per architecture. A config names its family by `model_type` (the text model's,
when the text settings are nested). For keys a config leaves out, a family uses the default
its `model_type` had in the transformers release that introduced it (`Family.source` names the
release and the file, read from the released wheels); every default used becomes a line of the
import's notes, so none changes an answer silently.

`Family.layout_keys` are the attention-layout settings the family's reader interprets. Any
other attention-looking setting in a config (see ATTENTION_KEY) makes the import refuse,
naming it: a setting the code does not model would otherwise be ignored and the cache be wrong.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planner import params

LAYER_KINDS = (
    "full_attention", "sliding_attention", "chunked_attention", "kv_shared", "linear_attention", "mamba", "no_cache",
)
STATE_KINDS = ("linear_attention", "mamba")

# Settings whose name says they shape attention or a recurrent state. A key that matches, has a
# value that does something (not null/false/0/empty) and that neither the family reads nor
# HARMLESS_KEYS lists stops the import (hf_import._check_attention_keys).
ATTENTION_KEY = re.compile(
    r"attn|attention|window|chunk|sink|layer_types|linear_|mamba|ssm|conv|hybrid|pattern|block_config|index_"
    r"|kv_|key_value|head_dim|no_rope|nope|shared_layers|global_head|global_key|local_attn|local_attention|state_size|lora"
)
# Attention settings that change neither the cache nor the parameter count (rotary and
# scaling variants, dropout, soft-capping) or that every family reads.
HARMLESS_KEYS = frozenset({
    "num_attention_heads", "num_key_value_heads", "head_dim", "attention_dropout", "attention_bias",
    "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar", "rope_local_base_freq",
    "attn_temperature_tuning", "attn_scale", "attention_multiplier", "use_qk_norm", "qk_norm_type",
    "partial_rotary_factor", "cache_implementation", "max_window_layers", "use_sliding_window",
    "layer_types",  # read for every family: hf_import._read_layout checks it against the family's layout
})


@dataclass(frozen=True)
class Layout:
    """Layer counts by kind (LAYER_KINDS), with the window / chunk / state they need."""

    layers: Mapping[str, int]
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    state_bytes_per_layer: int | None = None


@dataclass(frozen=True)
class Family:
    """How planner reads one architecture."""

    name: str
    model_types: tuple[str, ...]
    source: str  # transformers release and file whose defaults apply
    defaults: Mapping[str, Any] = field(default_factory=dict)
    layout_keys: frozenset[str] = frozenset()
    layout: Callable[[Any], Layout] | None = None  # reader -> Layout; None: every layer full attention
    count: Callable[[Any, Mapping[str, Any]], params.ParamCount | None] | None = None  # None: no formula


# --- layouts -------------------------------------------------------------------------------


def _full(r: Any) -> Layout:
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


def _mistral_layout(r: Any) -> Layout:
    """Mistral / Mixtral: a non-null `sliding_window` applies to every layer (Mistral 7B v0.1)."""
    window = r.integer("sliding_window", nullable=True)
    if window is None:
        return _full(r)
    return Layout({"sliding_attention": r.layers}, sliding_window=window)


def _qwen_layout(r: Any) -> Layout:
    """Qwen2/Qwen3: sliding windows only with `use_sliding_window`, on the layers from
    `max_window_layers` up (transformers Qwen2Attention: layer_idx >= max_window_layers)."""
    counts = from_layer_types(r, SLIDING_NAMES)
    if counts is not None:
        return window_layout(r, counts)
    if not r.flag("use_sliding_window"):
        return _full(r)
    window = r.integer("sliding_window", nullable=True)
    if window is None:
        return _full(r)
    first = min(r.layers, r.integer("max_window_layers", minimum=0))
    return Layout({"full_attention": first, "sliding_attention": r.layers - first}, sliding_window=window)


def _even_layers_sliding(r: Any) -> Layout:
    """Gemma 2 and gpt-oss: `layer_types`, else layer i local when i is even (transformers
    4.42.0 Gemma2: layer_idx % 2 == 0; 4.55.0 GptOssConfig: (i + 1) % 2)."""
    counts = from_layer_types(r, SLIDING_NAMES)
    if counts is None:
        sliding = (r.layers + 1) // 2
        counts = {"full_attention": r.layers - sliding, "sliding_attention": sliding}
    return window_layout(r, counts)


def _gemma3_layout(r: Any) -> Layout:
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


def _llama4_layout(r: Any) -> Layout:
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
        return _full(r)
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


def _linear_hybrid_layout(r: Any) -> Layout:
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
    state = gated_deltanet_state_bytes(
        num_key_heads=r.integer("linear_num_key_heads"),
        num_value_heads=r.integer("linear_num_value_heads"),
        key_head_dim=r.integer("linear_key_head_dim"),
        value_head_dim=r.integer("linear_value_head_dim"),
        conv_kernel=r.integer("linear_conv_kernel_dim"),
        conv_bytes=conv_bytes,
        state_bytes=state_bytes,
    )
    return Layout(counts, state_bytes_per_layer=state if counts.get("linear_attention") else None)


def _nemotron_h_layout(r: Any) -> Layout:
    """Nemotron-H: `hybrid_override_pattern`, one character per block: M Mamba-2, * attention,
    - MLP and E MoE (neither attention nor state)."""
    pattern = r.cfg.text("hybrid_override_pattern")
    if pattern is None:
        raise r.cfg.error("hybrid_override_pattern", "required field is missing")
    if len(pattern) != r.layers:
        raise r.cfg.error("hybrid_override_pattern", f"has {len(pattern)} blocks for num_hidden_layers {r.layers}")
    unknown = sorted(set(pattern) - set("M*-E"))
    if unknown:
        raise r.cfg.error("hybrid_override_pattern", f"block '{unknown[0]}' is not modelled (known: M, *, -, E)")
    conv_bytes, state_bytes = _state_dtype_bytes(r)
    mamba = pattern.count("M")
    state = mamba2_state_bytes(
        num_heads=r.integer("mamba_num_heads"),
        head_dim=r.integer("mamba_head_dim"),
        n_groups=r.integer("n_groups"),
        state_size=r.integer("ssm_state_size"),
        conv_kernel=r.integer("conv_kernel"),
        conv_bytes=conv_bytes,
        state_bytes=state_bytes,
    )
    layers = {"full_attention": pattern.count("*"), "mamba": mamba, "no_cache": pattern.count("-") + pattern.count("E")}
    return Layout(layers, state_bytes_per_layer=state if mamba else None)


# --- parameter counts ----------------------------------------------------------------------


def _gqa(r: Any, e: Mapping[str, Any]) -> dict[str, int]:
    return {
        "num_hidden_layers": e["num_hidden_layers"], "hidden_size": e["hidden_size"],
        "num_attention_heads": e["num_attention_heads"], "num_key_value_heads": e["num_key_value_heads"],
        "head_dim": e["head_dim"], "vocab_size": e["vocab_size"],
    }


def _count_dense(qkv_bias: bool = False, qk_norm: bool = False) -> Callable[[Any, Mapping[str, Any]], params.ParamCount]:
    def count(r: Any, e: Mapping[str, Any]) -> params.ParamCount:
        attention_bias = r.flag("attention_bias")
        return params.dense_decoder_params(
            **_gqa(r, e), intermediate_size=e["intermediate_size"], tie_word_embeddings=r.flag("tie_word_embeddings"),
            qkv_bias=attention_bias or qkv_bias, o_bias=attention_bias, mlp_bias=r.flag("mlp_bias"), qk_norm=qk_norm,
        )
    return count


def _count_gemma2(r: Any, e: Mapping[str, Any]) -> params.ParamCount:
    return params.gemma2_params(**_gqa(r, e), intermediate_size=e["intermediate_size"])


def _count_gemma3(r: Any, e: Mapping[str, Any]) -> params.ParamCount:
    return params.gemma3_text_params(**_gqa(r, e), intermediate_size=e["intermediate_size"])


def _moe_layers(r: Any, step_key: str | None) -> int:
    """Layers with routed experts: every `decoder_sparse_step`-th one not in `mlp_only_layers`
    (transformers Qwen3MoeDecoderLayer / Qwen3NextDecoderLayer)."""
    step = r.integer(step_key) if step_key else 1
    dense = set(r.cfg.integers("mlp_only_layers"))
    outside = sorted(i for i in dense if not 0 <= i < r.layers)
    if outside:
        raise r.cfg.error("mlp_only_layers", f"layer {outside[0]} is outside 0..{r.layers - 1}")
    return sum(1 for i in range(r.layers) if i not in dense and (i + 1) % step == 0)


def _count_moe(qk_norm: bool, sparse_step: bool) -> Callable[[Any, Mapping[str, Any]], params.ParamCount]:
    def count(r: Any, e: Mapping[str, Any]) -> params.ParamCount:
        return params.moe_decoder_params(
            **_gqa(r, e), moe_intermediate_size=e["moe_intermediate_size"], num_experts=e["num_experts"],
            num_experts_per_tok=e["num_experts_per_tok"], tie_word_embeddings=r.flag("tie_word_embeddings"),
            qk_norm=qk_norm, num_moe_layers=_moe_layers(r, "decoder_sparse_step" if sparse_step else None),
            dense_intermediate_size=e["intermediate_size"],
        )
    return count


def _count_deepseek(r: Any, e: Mapping[str, Any]) -> params.ParamCount:
    first_dense = r.integer("first_k_dense_replace", minimum=0)
    if first_dense > r.layers:
        raise r.cfg.error("first_k_dense_replace", f"{first_dense} exceeds num_hidden_layers {r.layers}")
    if r.integer("moe_layer_freq") != 1:
        raise r.cfg.error("moe_layer_freq", "only 1 (every layer after first_k_dense_replace) is modelled; give --params-total")
    return params.deepseek_mla_moe_params(
        num_hidden_layers=r.layers, hidden_size=e["hidden_size"], num_attention_heads=e["num_attention_heads"],
        q_lora_rank=r.integer("q_lora_rank", nullable=True), kv_lora_rank=e["kv_lora_rank"],
        qk_nope_head_dim=r.integer("qk_nope_head_dim"), qk_rope_head_dim=e["qk_rope_head_dim"],
        v_head_dim=r.integer("v_head_dim"), intermediate_size=e["intermediate_size"],
        moe_intermediate_size=e["moe_intermediate_size"], n_routed_experts=e["num_experts"],
        n_shared_experts=r.integer("n_shared_experts", minimum=0), num_experts_per_tok=e["num_experts_per_tok"],
        first_k_dense_replace=first_dense, vocab_size=e["vocab_size"],
        tie_word_embeddings=r.flag("tie_word_embeddings"), router_bias=r.cfg.text("topk_method") == "noaux_tc",
    )


def _count_llama4(r: Any, e: Mapping[str, Any]) -> params.ParamCount:
    step = r.integer("interleave_moe_layer_step")
    moe = r.cfg.integers("moe_layers") or list(range(step - 1, r.layers, step))
    return params.llama4_text_params(
        **_gqa(r, e), intermediate_size=e["intermediate_size"], intermediate_size_mlp=r.integer("intermediate_size_mlp"),
        num_local_experts=e["num_experts"], num_experts_per_tok=e["num_experts_per_tok"], moe_layers=len(moe),
        tie_word_embeddings=r.flag("tie_word_embeddings"),
    )


def _count_gpt_oss(r: Any, e: Mapping[str, Any]) -> params.ParamCount:
    return params.gpt_oss_params(
        **_gqa(r, e), intermediate_size=e["intermediate_size"], num_local_experts=e["num_experts"],
        num_experts_per_tok=e["num_experts_per_tok"], tie_word_embeddings=r.flag("tie_word_embeddings"),
    )


def _count_qwen3_next(r: Any, e: Mapping[str, Any]) -> params.ParamCount:
    if r.cfg.has("attn_output_gate") and not r.flag("attn_output_gate"):
        raise r.cfg.error("attn_output_gate", "false (an ungated q_proj) is not modelled; give --params-total")
    kinds = r.layout.layers
    linear_block = params.gated_deltanet_params(
        hidden_size=e["hidden_size"], num_key_heads=r.integer("linear_num_key_heads"),
        num_value_heads=r.integer("linear_num_value_heads"), key_head_dim=r.integer("linear_key_head_dim"),
        value_head_dim=r.integer("linear_value_head_dim"), conv_kernel=r.integer("linear_conv_kernel_dim"),
    )
    moe = e.get("num_experts")
    return params.qwen3_next_params(
        hidden_size=e["hidden_size"], num_attention_heads=e["num_attention_heads"],
        num_key_value_heads=e["num_key_value_heads"], head_dim=e["head_dim"],
        full_attention_layers=kinds.get("full_attention", 0), linear_attention_layers=kinds.get("linear_attention", 0),
        # Qwen3.5's config classes have no decoder_sparse_step: every layer not in mlp_only_layers is MoE.
        linear_block=linear_block,
        moe_layers=_moe_layers(r, "decoder_sparse_step" if r.family.name == "qwen3_next" else None) if moe else 0,
        intermediate_size=e["intermediate_size"], moe_intermediate_size=e.get("moe_intermediate_size") or 1,
        shared_expert_intermediate_size=r.integer("shared_expert_intermediate_size") if moe else 1,
        num_experts=moe or 0, num_experts_per_tok=e.get("num_experts_per_tok") or 0, vocab_size=e["vocab_size"],
        tie_word_embeddings=r.flag("tie_word_embeddings"),
    )


def _count_glm4_moe(r: Any, e: Mapping[str, Any]) -> params.ParamCount:
    first_dense = r.integer("first_k_dense_replace", minimum=0)
    if first_dense > r.layers:
        raise r.cfg.error("first_k_dense_replace", f"{first_dense} exceeds num_hidden_layers {r.layers}")
    return params.glm4_moe_params(
        **_gqa(r, e), intermediate_size=e["intermediate_size"], moe_intermediate_size=e["moe_intermediate_size"],
        n_routed_experts=e["num_experts"], n_shared_experts=r.integer("n_shared_experts", minimum=0),
        num_experts_per_tok=e["num_experts_per_tok"], first_k_dense_replace=first_dense,
        attention_bias=r.flag("attention_bias"), use_qk_norm=r.flag("use_qk_norm"),
        tie_word_embeddings=r.flag("tie_word_embeddings"),
    )


# --- the families --------------------------------------------------------------------------

_GDN_DEFAULTS = {
    "head_dim": 256, "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "shared_expert_intermediate_size": 512,
}
_GDN_LAYOUT = frozenset({
    "layer_types", "full_attention_interval", "linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim",
    "linear_num_key_heads", "linear_num_value_heads", "attn_output_gate", "mamba_ssm_dtype",
})
_LLAMA_DEFAULTS = {"tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False}
_QWEN_WINDOW = {"use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 28}
_QWEN_LAYOUT = frozenset({"use_sliding_window", "sliding_window", "max_window_layers", "layer_types"})

FAMILIES: tuple[Family, ...] = (
    Family(
        "llama", ("llama",),
        "transformers 4.28.0 models/llama/configuration_llama.py (attention_bias as in 4.34.0, mlp_bias as in 4.41.0)",
        _LLAMA_DEFAULTS, count=_count_dense(),
    ),
    Family(
        "mistral", ("mistral",), "transformers 4.34.0 models/mistral/configuration_mistral.py",
        {"tie_word_embeddings": False, "sliding_window": 4096}, frozenset({"sliding_window"}), _mistral_layout, _count_dense(),
    ),
    Family(
        "qwen2", ("qwen2",), "transformers 4.37.0 models/qwen2/configuration_qwen2.py",
        {"tie_word_embeddings": False, **_QWEN_WINDOW}, _QWEN_LAYOUT, _qwen_layout, _count_dense(qkv_bias=True),
    ),
    Family(
        "qwen3", ("qwen3",), "transformers 4.51.0 models/qwen3/configuration_qwen3.py",
        {"tie_word_embeddings": False, "attention_bias": False, "head_dim": 128, **_QWEN_WINDOW},
        _QWEN_LAYOUT, _qwen_layout, _count_dense(qk_norm=True),
    ),
    Family(
        "qwen3_vl", ("qwen3_vl", "qwen3_vl_text"), "transformers 4.57.0 models/qwen3_vl/configuration_qwen3_vl.py",
        {"tie_word_embeddings": False, "attention_bias": False, "head_dim": 128}, count=_count_dense(qk_norm=True),
    ),
    Family(
        "gemma2", ("gemma2",), "transformers 4.42.0 models/gemma2/configuration_gemma2.py",
        {"tie_word_embeddings": True, "head_dim": 256, "sliding_window": 4096, "attention_bias": False},
        frozenset({"sliding_window", "layer_types"}), _even_layers_sliding, _count_gemma2,
    ),
    Family(
        "gemma3", ("gemma3", "gemma3_text"), "transformers 4.50.0 models/gemma3/configuration_gemma3.py",
        {"tie_word_embeddings": True, "head_dim": 256, "sliding_window": 4096, "sliding_window_pattern": 6,
         "num_key_value_heads": 4, "attention_bias": False},
        frozenset({"sliding_window", "sliding_window_pattern", "layer_types"}), _gemma3_layout, _count_gemma3,
    ),
    Family(
        "mixtral", ("mixtral",), "transformers 4.36.0 models/mixtral/configuration_mixtral.py",
        {"tie_word_embeddings": False, "sliding_window": 4096, "num_local_experts": 8, "num_experts_per_tok": 2},
        frozenset({"sliding_window"}), _mistral_layout, _count_moe(qk_norm=False, sparse_step=False),
    ),
    Family(
        "granitemoe", ("granitemoe",), "transformers 4.45.0 models/granitemoe/configuration_granitemoe.py",
        {"tie_word_embeddings": False, "attention_bias": False, "num_local_experts": 8, "num_experts_per_tok": 2},
        count=_count_moe(qk_norm=False, sparse_step=False),
    ),
    Family(
        "qwen3_moe", ("qwen3_moe",), "transformers 4.51.0 models/qwen3_moe/configuration_qwen3_moe.py",
        {"tie_word_embeddings": False, "attention_bias": False, "head_dim": 128, "decoder_sparse_step": 1,
         "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8, **_QWEN_WINDOW},
        _QWEN_LAYOUT, _qwen_layout, _count_moe(qk_norm=True, sparse_step=True),
    ),
    Family(
        "deepseek_v3", ("deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa"),
        "transformers 4.51.0 models/deepseek_v3/configuration_deepseek_v3.py",
        {"tie_word_embeddings": False, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
         "v_head_dim": 128, "n_shared_experts": 1, "first_k_dense_replace": 3, "moe_layer_freq": 1},
        frozenset({"kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "qk_head_dim"}),
        count=_count_deepseek,
    ),
    Family(
        "llama4", ("llama4", "llama4_text"), "transformers 4.51.0 models/llama4/configuration_llama4.py",
        {"tie_word_embeddings": False, "head_dim": 128, "attention_chunk_size": 8192, "no_rope_layer_interval": 4,
         "interleave_moe_layer_step": 1, "intermediate_size_mlp": 16384, "num_local_experts": 16,
         "num_experts_per_tok": 1},
        frozenset({"attention_chunk_size", "no_rope_layers", "no_rope_layer_interval"}), _llama4_layout, _count_llama4,
    ),
    Family(
        "gpt_oss", ("gpt_oss",), "transformers 4.55.0 models/gpt_oss/configuration_gpt_oss.py",
        {"tie_word_embeddings": False, "head_dim": 64, "sliding_window": 128, "num_local_experts": 128,
         "num_experts_per_tok": 4},
        frozenset({"sliding_window", "layer_types"}), _even_layers_sliding, _count_gpt_oss,
    ),
    Family(
        "qwen3_next", ("qwen3_next",), "transformers 4.57.0 models/qwen3_next/configuration_qwen3_next.py",
        {"tie_word_embeddings": False, **_GDN_DEFAULTS, "decoder_sparse_step": 1},
        _GDN_LAYOUT, _linear_hybrid_layout, _count_qwen3_next,
    ),
    Family(
        "qwen3_5", ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"),
        "transformers 5.2.0 models/qwen3_5/configuration_qwen3_5.py, models/qwen3_5_moe/configuration_qwen3_5_moe.py",
        {"tie_word_embeddings": False, **_GDN_DEFAULTS},
        _GDN_LAYOUT, _linear_hybrid_layout, _count_qwen3_next,
    ),
    Family(
        "glm4_moe", ("glm4_moe",), "transformers 4.54.0 models/glm4_moe/configuration_glm4_moe.py",
        {"tie_word_embeddings": False, "attention_bias": False, "use_qk_norm": False, "first_k_dense_replace": 1,
         "n_shared_experts": 1, "head_dim": 128},
        count=_count_glm4_moe,
    ),
    Family(
        "nemotron_h", ("nemotron_h",), "the config's own NemotronHConfig (auto_map; remote code)",
        {},
        frozenset({"hybrid_override_pattern", "attention_head_dim", "mamba_num_heads", "mamba_head_dim", "n_groups",
                   "ssm_state_size", "conv_kernel", "chunk_size", "use_conv_bias", "mamba_hidden_act",
                   "mamba_proj_bias", "use_mamba_kernels", "sliding_window"}),
        _nemotron_h_layout,
    ),
)
BY_MODEL_TYPE: dict[str, Family] = {mt: f for f in FAMILIES for mt in f.model_types}
COVERED_MODEL_TYPES = tuple(BY_MODEL_TYPE)

# Settings of architectures planner knows it does not model: a config carrying one is refused
# with the reason, before anything is read (hf_import._check_attention_keys).
NOT_MODELLED: dict[str, str] = {
    "index_topk": "DeepSeek sparse attention: a lightning indexer caches its own keys per token beside the latent",
    "attention_k_eq_v": "keys double as values on the global layers, with their own head count and width",
    "global_head_dim": "global layers have their own head width",
    "num_global_key_value_heads": "global layers have their own KV head count",
    "swa_num_key_value_heads": "sliding-window layers have their own KV head count",
    "hybrid_layer_pattern": "a per-layer attention pattern of its own",
    "block_configs": "every layer has its own attention shape (or none)",
    "attn_type_list": "lightning (linear) attention layers",
    "num_kv_shared_layers": "cross-layer KV sharing beside per-layer inputs (Gemma 3n)",
}

