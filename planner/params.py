"""Parameter counts from a model's config fields: total (memory) and active (compute).

One function per formula. Every count is the number of tensors' elements in the
published checkpoint of that architecture, read off the Hugging Face `transformers`
modelling code for the family (the module that builds each weight), so the counts
are exact integers rather than the rounded "8B" of a model card. Biases and norm
weights are counted; rotary tables are buffers, not parameters, and are not.

Conventions shared by all formulas:
- `active` is what one token's forward pass touches: everything except the routed
  experts it is not sent to. The embedding table and the LM head are included in
  both, as models.csv's `params_*_computed_B` columns do (the roofline's
  `2 × active_params` FLOPs per token slightly overstates a lookup table; that is
  deliberate and small).
- A gated MLP (SwiGLU / GeGLU: gate, up, down projections, no bias) has
  `3 × hidden × intermediate` weights.
"""

from __future__ import annotations

from typing import NamedTuple


class ParamCount(NamedTuple):
    """Total parameters (all held in memory) and active ones (used per token)."""

    total: int
    active: int


def embedding_params(vocab_size: int, hidden_size: int, *, tie_word_embeddings: bool) -> int:
    """Input embedding `vocab × hidden`, plus an untied LM head of the same shape.

    Tied models (Llama 3.2 1B/3B, Gemma) reuse the embedding matrix as the head.
    """
    return vocab_size * hidden_size * (1 if tie_word_embeddings else 2)


def gqa_attention_params(
    hidden_size: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    head_dim: int,
    *,
    qkv_bias: bool = False,
    o_bias: bool = False,
    qk_norm: bool = False,
) -> int:
    """One grouped-query attention block: q, k, v and o projections.

    q: hidden × heads·head_dim; k and v: hidden × kv_heads·head_dim each;
    o: heads·head_dim × hidden (transformers `LlamaAttention`). Qwen2 adds biases
    on q, k, v (`qkv_bias`); Llama's `attention_bias` adds them on all four. Qwen3
    normalises q and k per head (`q_norm`, `k_norm`: one RMSNorm of head_dim each).
    """
    q_width = num_attention_heads * head_dim
    kv_width = num_key_value_heads * head_dim
    weights = hidden_size * q_width + 2 * hidden_size * kv_width + q_width * hidden_size
    biases = (q_width + 2 * kv_width if qkv_bias else 0) + (hidden_size if o_bias else 0)
    norms = 2 * head_dim if qk_norm else 0
    return weights + biases + norms


def gated_mlp_params(hidden_size: int, intermediate_size: int, *, bias: bool = False) -> int:
    """SwiGLU/GeGLU MLP: gate and up (hidden → intermediate), down (intermediate → hidden)."""
    weights = 3 * hidden_size * intermediate_size
    return weights + (2 * intermediate_size + hidden_size if bias else 0)


def dense_decoder_params(
    *,
    num_hidden_layers: int,
    hidden_size: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    head_dim: int,
    intermediate_size: int,
    vocab_size: int,
    tie_word_embeddings: bool = False,
    qkv_bias: bool = False,
    o_bias: bool = False,
    mlp_bias: bool = False,
    qk_norm: bool = False,
    norms_per_layer: int = 2,
) -> ParamCount:
    """A dense pre-norm GQA decoder: Llama, Mistral, Qwen2, Qwen3, Gemma 2.

    Per layer: attention (`gqa_attention_params`) + gated MLP + `norms_per_layer`
    RMSNorms of `hidden_size` (2 for Llama-style input/post-attention norms).
    Plus the final norm and the embeddings (`embedding_params`). Dense: active =
    total. Reproduces Llama 3.1 8B = 8,030,261,248 and 70B = 70,553,706,496 exactly.
    """
    per_layer = (
        gqa_attention_params(
            hidden_size,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            qkv_bias=qkv_bias,
            o_bias=o_bias,
            qk_norm=qk_norm,
        )
        + gated_mlp_params(hidden_size, intermediate_size, bias=mlp_bias)
        + norms_per_layer * hidden_size
    )
    total = (
        num_hidden_layers * per_layer
        + hidden_size  # final norm
        + embedding_params(vocab_size, hidden_size, tie_word_embeddings=tie_word_embeddings)
    )
    return ParamCount(total, total)


def gemma2_params(
    *,
    num_hidden_layers: int,
    hidden_size: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    head_dim: int,
    intermediate_size: int,
    vocab_size: int,
) -> ParamCount:
    """Gemma 2: a dense GQA decoder with four norms per layer and tied embeddings.

    transformers `Gemma2DecoderLayer` has input_layernorm, post_attention_layernorm,
    pre_feedforward_layernorm and post_feedforward_layernorm (each `hidden_size`),
    no attention or MLP biases, and the LM head tied to the embedding. Sliding
    windows and logit soft-capping add no parameters. head_dim is read from the
    config (128 on 27B, where heads × head_dim = 4096 ≠ hidden 4608).
    """
    return dense_decoder_params(
        num_hidden_layers=num_hidden_layers,
        hidden_size=hidden_size,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        head_dim=head_dim,
        intermediate_size=intermediate_size,
        vocab_size=vocab_size,
        tie_word_embeddings=True,
        norms_per_layer=4,
    )


def moe_decoder_params(
    *,
    num_hidden_layers: int,
    hidden_size: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    head_dim: int,
    moe_intermediate_size: int,
    num_experts: int,
    num_experts_per_tok: int,
    vocab_size: int,
    tie_word_embeddings: bool = False,
    qk_norm: bool = False,
    num_moe_layers: int | None = None,
    dense_intermediate_size: int | None = None,
) -> ParamCount:
    """A GQA decoder whose MLPs are routed experts: Mixtral, Qwen3-MoE.

    Each MoE layer has a router (`gate`: hidden × num_experts, no bias) and
    `num_experts` gated-MLP experts of `moe_intermediate_size` (Mixtral's
    `intermediate_size` is the expert width). A token runs the router and
    `num_experts_per_tok` experts, so

        total  = shared + L_moe × (router + E × expert)
        active = shared + L_moe × (router + k × expert)

    where `shared` is embeddings, attention, norms and any dense-MLP layers
    (`num_moe_layers` < layers, e.g. Qwen3-MoE `mlp_only_layers`, then each of
    the others has a dense MLP of `dense_intermediate_size`).
    Mixtral 8x7B: 46,702,792,704 total, 12,879,925,248 active (models.csv: 46.70 / 12.88).
    """
    moe_layers = num_hidden_layers if num_moe_layers is None else num_moe_layers
    dense_layers = num_hidden_layers - moe_layers
    attention = gqa_attention_params(
        hidden_size, num_attention_heads, num_key_value_heads, head_dim, qk_norm=qk_norm
    )
    shared = (
        num_hidden_layers * (attention + 2 * hidden_size)
        + hidden_size
        + embedding_params(vocab_size, hidden_size, tie_word_embeddings=tie_word_embeddings)
    )
    if dense_layers:
        if dense_intermediate_size is None:
            raise ValueError("dense MLP layers need dense_intermediate_size")
        shared += dense_layers * gated_mlp_params(hidden_size, dense_intermediate_size)
    router = hidden_size * num_experts
    expert = gated_mlp_params(hidden_size, moe_intermediate_size)
    total = shared + moe_layers * (router + num_experts * expert)
    active = shared + moe_layers * (router + num_experts_per_tok * expert)
    return ParamCount(total, active)


def mla_attention_params(
    *,
    hidden_size: int,
    num_attention_heads: int,
    q_lora_rank: int | None,
    kv_lora_rank: int,
    qk_nope_head_dim: int,
    qk_rope_head_dim: int,
    v_head_dim: int,
) -> int:
    """One multi-head latent attention block (DeepSeek-V2/V3, transformers `DeepseekV3Attention`).

    q: with `q_lora_rank`, q_a_proj (hidden → q_lora_rank) + q_a_layernorm +
       q_b_proj (q_lora_rank → heads·(nope + rope)); without (V2-Lite), one
       q_proj (hidden → heads·(nope + rope)).
    kv: kv_a_proj_with_mqa (hidden → kv_lora_rank + rope) + kv_a_layernorm
        (kv_lora_rank) + kv_b_proj (kv_lora_rank → heads·(nope + v)).
    o: o_proj (heads·v → hidden). No biases.
    """
    qk_head_dim = qk_nope_head_dim + qk_rope_head_dim
    if q_lora_rank:
        q = hidden_size * q_lora_rank + q_lora_rank + q_lora_rank * num_attention_heads * qk_head_dim
    else:
        q = hidden_size * num_attention_heads * qk_head_dim
    kv = (
        hidden_size * (kv_lora_rank + qk_rope_head_dim)
        + kv_lora_rank
        + kv_lora_rank * num_attention_heads * (qk_nope_head_dim + v_head_dim)
    )
    o = num_attention_heads * v_head_dim * hidden_size
    return q + kv + o


def deepseek_mla_moe_params(
    *,
    num_hidden_layers: int,
    hidden_size: int,
    num_attention_heads: int,
    q_lora_rank: int | None,
    kv_lora_rank: int,
    qk_nope_head_dim: int,
    qk_rope_head_dim: int,
    v_head_dim: int,
    intermediate_size: int,
    moe_intermediate_size: int,
    n_routed_experts: int,
    n_shared_experts: int,
    num_experts_per_tok: int,
    first_k_dense_replace: int,
    vocab_size: int,
    tie_word_embeddings: bool = False,
    router_bias: bool = True,
) -> ParamCount:
    """DeepSeek-V2/V3: MLA attention on every layer, dense MLP on the first
    `first_k_dense_replace` layers, MoE on the rest.

    MoE layer (transformers `DeepseekV3MoE`): router weight (n_routed_experts ×
    hidden) plus, for V3's `topk_method: noaux_tc`, an `e_score_correction_bias` of
    n_routed_experts (`router_bias`; V2's greedy routing has none);
    `n_routed_experts` experts and `n_shared_experts` always-on experts, each a
    gated MLP of `moe_intermediate_size`. Dense layer: gated MLP of
    `intermediate_size`. Two RMSNorms per layer, a final norm, untied embeddings.
    Active = everything but the `n_routed_experts − num_experts_per_tok` idle
    routed experts of each MoE layer.

    The multi-token-prediction module (`num_nextn_predict_layers`, 14B more on
    V3's Hugging Face checkpoint, 685B in all) is a speculative-decoding head
    that serving can leave unloaded; it is excluded, as in DeepSeek's 671B.
    DeepSeek-V3: 671,026,419,200 total, 37,552,297,472 active (models.csv 671.03 / 37.55; README_WEIGHTS:
    671B / 37B).
    """
    moe_layers = num_hidden_layers - first_k_dense_replace
    attention = mla_attention_params(
        hidden_size=hidden_size,
        num_attention_heads=num_attention_heads,
        q_lora_rank=q_lora_rank,
        kv_lora_rank=kv_lora_rank,
        qk_nope_head_dim=qk_nope_head_dim,
        qk_rope_head_dim=qk_rope_head_dim,
        v_head_dim=v_head_dim,
    )
    expert = gated_mlp_params(hidden_size, moe_intermediate_size)
    router = n_routed_experts * hidden_size + (n_routed_experts if router_bias else 0)
    shared = (
        num_hidden_layers * (attention + 2 * hidden_size)
        + first_k_dense_replace * gated_mlp_params(hidden_size, intermediate_size)
        + moe_layers * (router + n_shared_experts * expert)
        + hidden_size
        + embedding_params(vocab_size, hidden_size, tie_word_embeddings=tie_word_embeddings)
    )
    total = shared + moe_layers * n_routed_experts * expert
    active = shared + moe_layers * num_experts_per_tok * expert
    return ParamCount(total, active)
