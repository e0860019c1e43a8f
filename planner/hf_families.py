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

Modules: the layouts live in planner.hf_layouts, the parameter counts in planner.hf_counts; this
one holds the families themselves and the settings that decide what is read or refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.hf_counts import (
    count_deepseek,
    count_dense,
    count_gemma2,
    count_gemma3,
    count_glm4_moe,
    count_gpt_oss,
    count_llama4,
    count_moe,
    count_qwen3_next,
)
from planner.hf_layouts import (
    Layout,
    even_layers_sliding,
    gemma3_layout,
    linear_hybrid_layout,
    llama4_layout,
    mistral_layout,
    nemotron_h_layout,
    qwen_layout,
)
from planner.params.blocks import ParamCount

# Settings whose name says they shape attention or a recurrent state. A key that matches, has a
# value that does something (not null/false/0/empty) and that neither the family reads nor
# HARMLESS_KEYS lists stops the import (hf_import._refuse_unread_attention_keys).
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
    # Which attention kernel transformers runs (eager, sdpa, flash_attention_2): saved into real
    # config.json files (transformers 4.46-4.48 wrote `_attn_implementation_autoset`), and no
    # part of the cache or the parameter count.
    "_attn_implementation", "_attn_implementation_autoset", "attn_implementation",
})


@dataclass(frozen=True)
class Family:
    """How planner reads one architecture."""

    name: str
    model_types: tuple[str, ...]
    source: str  # transformers release and file whose defaults apply
    defaults: Mapping[str, Any] = field(default_factory=dict)
    layout_keys: frozenset[str] = frozenset()
    layout: Callable[[Any], Layout] | None = None  # reader -> Layout; None: every layer full attention
    count: Callable[[Any, Mapping[str, Any]], ParamCount | None] | None = None  # None: no formula
    experts_key: str | None = None  # where every model of the family routes tokens to experts: their count's key


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
_DEEPSEEK_LAYOUT = frozenset({"kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "qk_head_dim"})

FAMILIES: tuple[Family, ...] = (
    Family(
        "llama", ("llama",),
        "transformers 4.28.0 models/llama/configuration_llama.py (attention_bias as in 4.34.0, mlp_bias as in 4.41.0)",
        _LLAMA_DEFAULTS, count=count_dense(),
    ),
    Family(
        "mistral", ("mistral",), "transformers 4.34.0 models/mistral/configuration_mistral.py",
        {"tie_word_embeddings": False, "sliding_window": 4096, "num_key_value_heads": 8}, frozenset({"sliding_window"}),
        mistral_layout, count_dense(),
    ),
    Family(
        "qwen2", ("qwen2",), "transformers 4.37.0 models/qwen2/configuration_qwen2.py",
        {"tie_word_embeddings": False, "num_key_value_heads": 32, **_QWEN_WINDOW}, _QWEN_LAYOUT, qwen_layout,
        count_dense(qkv_bias=True),
    ),
    Family(
        "qwen3", ("qwen3",), "transformers 4.51.0 models/qwen3/configuration_qwen3.py",
        {"tie_word_embeddings": False, "attention_bias": False, "head_dim": 128, "num_key_value_heads": 32,
         **_QWEN_WINDOW},
        _QWEN_LAYOUT, qwen_layout, count_dense(qk_norm=True),
    ),
    Family(
        "qwen3_vl", ("qwen3_vl", "qwen3_vl_text"), "transformers 4.57.0 models/qwen3_vl/configuration_qwen3_vl.py",
        {"tie_word_embeddings": False, "attention_bias": False, "head_dim": 128, "num_key_value_heads": 32},
        count=count_dense(qk_norm=True),
    ),
    Family(
        "gemma2", ("gemma2",), "transformers 4.42.0 models/gemma2/configuration_gemma2.py",
        {"tie_word_embeddings": True, "head_dim": 256, "sliding_window": 4096, "attention_bias": False,
         "num_key_value_heads": 4},
        frozenset({"sliding_window", "layer_types"}), even_layers_sliding, count_gemma2,
    ),
    Family(
        "gemma3", ("gemma3", "gemma3_text"), "transformers 4.50.0 models/gemma3/configuration_gemma3.py",
        {"tie_word_embeddings": True, "head_dim": 256, "sliding_window": 4096, "sliding_window_pattern": 6,
         "num_key_value_heads": 4, "attention_bias": False},
        frozenset({"sliding_window", "sliding_window_pattern", "layer_types"}), gemma3_layout, count_gemma3,
    ),
    Family(
        "mixtral", ("mixtral",), "transformers 4.36.0 models/mixtral/configuration_mixtral.py",
        {"tie_word_embeddings": False, "sliding_window": 4096, "num_local_experts": 8, "num_experts_per_tok": 2,
         "num_key_value_heads": 8},
        frozenset({"sliding_window"}), mistral_layout, count_moe(qk_norm=False, sparse_step=False),
        experts_key="num_local_experts",
    ),
    Family(
        "granitemoe", ("granitemoe",), "transformers 4.45.0 models/granitemoe/configuration_granitemoe.py",
        {"tie_word_embeddings": False, "attention_bias": False, "num_local_experts": 8, "num_experts_per_tok": 2},
        count=count_moe(qk_norm=False, sparse_step=False), experts_key="num_local_experts",
    ),
    Family(
        "qwen3_moe", ("qwen3_moe",), "transformers 4.51.0 models/qwen3_moe/configuration_qwen3_moe.py",
        {"tie_word_embeddings": False, "attention_bias": False, "head_dim": 128, "decoder_sparse_step": 1,
         "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8, "num_key_value_heads": 4,
         **_QWEN_WINDOW},
        _QWEN_LAYOUT, qwen_layout, count_moe(qk_norm=True, sparse_step=True), experts_key="num_experts",
    ),
    Family(
        # DeepSeek-V2's class has defaults of its own (no leading dense layer, two shared experts, where
        # V3's has three and one): V2-Lite's config without those two keys counts 16.21B parameters by
        # them, 14.49B by V3's.
        "deepseek_v2", ("deepseek_v2",),
        "transformers commit 008e574 models/deepseek_v2/configuration_deepseek_v2.py",
        {"tie_word_embeddings": False, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
         "v_head_dim": 128, "n_shared_experts": 2, "first_k_dense_replace": 0, "moe_layer_freq": 1},
        _DEEPSEEK_LAYOUT, count=count_deepseek, experts_key="n_routed_experts",
    ),
    Family(
        "deepseek_v3", ("deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa"),
        "transformers 4.51.0 models/deepseek_v3/configuration_deepseek_v3.py",
        {"tie_word_embeddings": False, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
         "v_head_dim": 128, "n_shared_experts": 1, "first_k_dense_replace": 3, "moe_layer_freq": 1},
        _DEEPSEEK_LAYOUT, count=count_deepseek, experts_key="n_routed_experts",
    ),
    Family(
        "llama4", ("llama4", "llama4_text"), "transformers 4.51.0 models/llama4/configuration_llama4.py",
        {"tie_word_embeddings": False, "head_dim": 128, "attention_chunk_size": 8192, "no_rope_layer_interval": 4,
         "interleave_moe_layer_step": 1, "intermediate_size_mlp": 16384, "num_local_experts": 16,
         "num_experts_per_tok": 1, "num_key_value_heads": 8},
        frozenset({"attention_chunk_size", "no_rope_layers", "no_rope_layer_interval"}), llama4_layout, count_llama4,
        experts_key="num_local_experts",
    ),
    Family(
        "gpt_oss", ("gpt_oss",), "transformers 4.55.0 models/gpt_oss/configuration_gpt_oss.py",
        {"tie_word_embeddings": False, "head_dim": 64, "sliding_window": 128, "num_local_experts": 128,
         "num_experts_per_tok": 4, "num_key_value_heads": 8},
        frozenset({"sliding_window", "layer_types"}), even_layers_sliding, count_gpt_oss,
        experts_key="num_local_experts",
    ),
    Family(
        "qwen3_next", ("qwen3_next",), "transformers 4.57.0 models/qwen3_next/configuration_qwen3_next.py",
        {"tie_word_embeddings": False, **_GDN_DEFAULTS, "decoder_sparse_step": 1, "num_key_value_heads": 2},
        _GDN_LAYOUT, linear_hybrid_layout, count_qwen3_next,
    ),
    # Qwen3.5's dense and MoE classes are one architecture with their own num_key_value_heads default
    Family(
        "qwen3_5", ("qwen3_5", "qwen3_5_text"), "transformers 5.2.0 models/qwen3_5/configuration_qwen3_5.py",
        {"tie_word_embeddings": False, **_GDN_DEFAULTS, "num_key_value_heads": 4},
        _GDN_LAYOUT, linear_hybrid_layout, count_qwen3_next,
    ),
    Family(
        "qwen3_5_moe", ("qwen3_5_moe", "qwen3_5_moe_text"),
        "transformers 5.2.0 models/qwen3_5_moe/configuration_qwen3_5_moe.py (Qwen3NextConfig's defaults)",
        {"tie_word_embeddings": False, **_GDN_DEFAULTS, "num_key_value_heads": 2},
        _GDN_LAYOUT, linear_hybrid_layout, count_qwen3_next,
    ),
    Family(
        "glm4_moe", ("glm4_moe",), "transformers 4.54.0 models/glm4_moe/configuration_glm4_moe.py",
        {"tie_word_embeddings": False, "attention_bias": False, "use_qk_norm": False, "first_k_dense_replace": 1,
         "n_shared_experts": 1, "head_dim": 128, "num_key_value_heads": 8},
        count=count_glm4_moe, experts_key="n_routed_experts",
    ),
    Family(
        "nemotron_h", ("nemotron_h",), "the config's own NemotronHConfig (auto_map; remote code)",
        {},
        frozenset({"hybrid_override_pattern", "attention_head_dim", "mamba_num_heads", "mamba_head_dim", "n_groups",
                   "ssm_state_size", "conv_kernel", "chunk_size", "use_conv_bias", "mamba_hidden_act",
                   "mamba_proj_bias", "use_mamba_kernels", "sliding_window"}),
        nemotron_h_layout,
    ),
)
BY_MODEL_TYPE: dict[str, Family] = {mt: f for f in FAMILIES for mt in f.model_types}
COVERED_MODEL_TYPES = tuple(BY_MODEL_TYPE)

# Settings of architectures planner knows it does not model: a config carrying one is refused
# with the reason, before anything is read (hf_import._refuse_not_modelled).
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

