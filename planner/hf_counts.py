"""Each family's parameter count from the config's fields: the reader's values (and defaults)
handed to the formula in planner.params that matches the architecture."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from planner.params.blocks import DecoderShape, ParamCount, gated_deltanet_params
from planner.params.dense import dense_decoder_params, gemma2_params, gemma3_text_params
from planner.params.moe import (
    deepseek_mla_moe_params,
    glm4_moe_params,
    gpt_oss_params,
    llama4_text_params,
    moe_decoder_params,
    qwen3_next_params,
)


def count_dense(qkv_bias: bool = False, qk_norm: bool = False) -> Callable[[Any, Mapping[str, Any]], ParamCount]:
    def count(r: Any, e: Mapping[str, Any]) -> ParamCount:
        attention_bias = r.flag("attention_bias")
        return dense_decoder_params(
            DecoderShape.of(e), intermediate_size=e["intermediate_size"], tie_word_embeddings=r.flag("tie_word_embeddings"),
            qkv_bias=attention_bias or qkv_bias, o_bias=attention_bias, mlp_bias=r.flag("mlp_bias"), qk_norm=qk_norm,
        )
    return count


def count_gemma2(r: Any, e: Mapping[str, Any]) -> ParamCount:
    return gemma2_params(DecoderShape.of(e), intermediate_size=e["intermediate_size"])


def count_gemma3(r: Any, e: Mapping[str, Any]) -> ParamCount:
    return gemma3_text_params(DecoderShape.of(e), intermediate_size=e["intermediate_size"])


def _moe_layers(r: Any, step_key: str | None) -> int:
    """Layers with routed experts: every `decoder_sparse_step`-th one not in `mlp_only_layers`
    (transformers Qwen3MoeDecoderLayer / Qwen3NextDecoderLayer)."""
    step = r.integer(step_key) if step_key else 1
    dense = set(r.cfg.integers("mlp_only_layers"))
    outside = sorted(i for i in dense if not 0 <= i < r.layers)
    if outside:
        raise r.cfg.error("mlp_only_layers", f"layer {outside[0]} is outside 0..{r.layers - 1}")
    return sum(1 for i in range(r.layers) if i not in dense and (i + 1) % step == 0)


def count_moe(qk_norm: bool, sparse_step: bool) -> Callable[[Any, Mapping[str, Any]], ParamCount]:
    def count(r: Any, e: Mapping[str, Any]) -> ParamCount:
        return moe_decoder_params(
            DecoderShape.of(e), moe_intermediate_size=e["moe_intermediate_size"], num_experts=e["num_experts"],
            num_experts_per_tok=e["num_experts_per_tok"], tie_word_embeddings=r.flag("tie_word_embeddings"),
            qk_norm=qk_norm, num_moe_layers=_moe_layers(r, "decoder_sparse_step" if sparse_step else None),
            dense_intermediate_size=e["intermediate_size"],
        )
    return count


def count_deepseek(r: Any, e: Mapping[str, Any]) -> ParamCount:
    first_dense = r.integer("first_k_dense_replace", minimum=0)
    if first_dense > r.layers:
        raise r.cfg.error("first_k_dense_replace", f"{first_dense} exceeds num_hidden_layers {r.layers}")
    if r.integer("moe_layer_freq") != 1:
        raise r.cfg.error("moe_layer_freq", "only 1 (every layer after first_k_dense_replace) is modelled; give --params-total")
    return deepseek_mla_moe_params(
        num_hidden_layers=r.layers, hidden_size=e["hidden_size"], num_attention_heads=e["num_attention_heads"],
        q_lora_rank=r.integer("q_lora_rank", nullable=True), kv_lora_rank=e["kv_lora_rank"],
        qk_nope_head_dim=r.integer("qk_nope_head_dim"), qk_rope_head_dim=e["qk_rope_head_dim"],
        v_head_dim=r.integer("v_head_dim"), intermediate_size=e["intermediate_size"],
        moe_intermediate_size=e["moe_intermediate_size"], n_routed_experts=e["num_experts"],
        n_shared_experts=r.integer("n_shared_experts", minimum=0), num_experts_per_tok=e["num_experts_per_tok"],
        first_k_dense_replace=first_dense, vocab_size=e["vocab_size"],
        tie_word_embeddings=r.flag("tie_word_embeddings"), router_bias=r.cfg.text("topk_method") == "noaux_tc",
    )


def count_llama4(r: Any, e: Mapping[str, Any]) -> ParamCount:
    step = r.integer("interleave_moe_layer_step")
    moe = r.cfg.integers("moe_layers") or list(range(step - 1, r.layers, step))
    return llama4_text_params(
        DecoderShape.of(e), intermediate_size=e["intermediate_size"], intermediate_size_mlp=r.integer("intermediate_size_mlp"),
        num_local_experts=e["num_experts"], num_experts_per_tok=e["num_experts_per_tok"], moe_layers=len(moe),
        tie_word_embeddings=r.flag("tie_word_embeddings"),
    )


def count_gpt_oss(r: Any, e: Mapping[str, Any]) -> ParamCount:
    return gpt_oss_params(
        DecoderShape.of(e), intermediate_size=e["intermediate_size"], num_local_experts=e["num_experts"],
        num_experts_per_tok=e["num_experts_per_tok"], tie_word_embeddings=r.flag("tie_word_embeddings"),
    )


def count_qwen3_next(r: Any, e: Mapping[str, Any]) -> ParamCount:
    if r.cfg.has("attn_output_gate") and not r.flag("attn_output_gate"):
        raise r.cfg.error("attn_output_gate", "false (an ungated q_proj) is not modelled; give --params-total")
    kinds = r.layout.layers
    linear_block = gated_deltanet_params(
        hidden_size=e["hidden_size"], num_key_heads=r.integer("linear_num_key_heads"),
        num_value_heads=r.integer("linear_num_value_heads"), key_head_dim=r.integer("linear_key_head_dim"),
        value_head_dim=r.integer("linear_value_head_dim"), conv_kernel=r.integer("linear_conv_kernel_dim"),
    )
    moe = e.get("num_experts")
    return qwen3_next_params(
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


def count_glm4_moe(r: Any, e: Mapping[str, Any]) -> ParamCount:
    first_dense = r.integer("first_k_dense_replace", minimum=0)
    if first_dense > r.layers:
        raise r.cfg.error("first_k_dense_replace", f"{first_dense} exceeds num_hidden_layers {r.layers}")
    return glm4_moe_params(
        DecoderShape.of(e), intermediate_size=e["intermediate_size"], moe_intermediate_size=e["moe_intermediate_size"],
        n_routed_experts=e["num_experts"], n_shared_experts=r.integer("n_shared_experts", minimum=0),
        num_experts_per_tok=e["num_experts_per_tok"], first_k_dense_replace=first_dense,
        attention_bias=r.flag("attention_bias"), use_qk_norm=r.flag("use_qk_norm"),
        tie_word_embeddings=r.flag("tie_word_embeddings"),
    )

