"""Decoders with routed experts: a token runs `num_experts_per_tok` of each MoE layer's
experts, so active < total; and the Qwen3-Next / Qwen3.5 hybrids, whose dense variants use the
same formula with no MoE layers (package docstring: the conventions)."""

from __future__ import annotations

from planner.params.blocks import (
    DecoderShape,
    ParamCount,
    decoder_frame_params,
    gated_mlp_params,
    mla_attention_params,
    routed_split,
)


def moe_decoder_params(
    shape: DecoderShape, *, moe_intermediate_size: int, num_experts: int, num_experts_per_tok: int,
    tie_word_embeddings: bool = False, qk_norm: bool = False, num_moe_layers: int | None = None,
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
    layers, hidden = shape.num_hidden_layers, shape.hidden_size
    moe_layers = layers if num_moe_layers is None else num_moe_layers
    dense_layers = layers - moe_layers
    shared = shape.frame(shape.attention(qk_norm=qk_norm), tie_word_embeddings=tie_word_embeddings)
    if dense_layers:
        if dense_intermediate_size is None:
            raise ValueError("dense MLP layers need dense_intermediate_size")
        shared += dense_layers * gated_mlp_params(hidden, dense_intermediate_size)
    router = hidden * num_experts
    expert = gated_mlp_params(hidden, moe_intermediate_size)
    return routed_split(shared + moe_layers * router, moe_layers, num_experts, num_experts_per_tok, expert)


def deepseek_mla_moe_params(
    *, num_hidden_layers: int, hidden_size: int, num_attention_heads: int, q_lora_rank: int | None,
    kv_lora_rank: int, qk_nope_head_dim: int, qk_rope_head_dim: int, v_head_dim: int, intermediate_size: int,
    moe_intermediate_size: int, n_routed_experts: int, n_shared_experts: int, num_experts_per_tok: int,
    first_k_dense_replace: int, vocab_size: int, tie_word_embeddings: bool = False, router_bias: bool = True,
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
        hidden_size=hidden_size, num_attention_heads=num_attention_heads, q_lora_rank=q_lora_rank,
        kv_lora_rank=kv_lora_rank, qk_nope_head_dim=qk_nope_head_dim, qk_rope_head_dim=qk_rope_head_dim,
        v_head_dim=v_head_dim,
    )
    expert = gated_mlp_params(hidden_size, moe_intermediate_size)
    router = n_routed_experts * hidden_size + (n_routed_experts if router_bias else 0)
    shared = (
        decoder_frame_params(num_hidden_layers, hidden_size, vocab_size, attention, tie_word_embeddings=tie_word_embeddings)
        + first_k_dense_replace * gated_mlp_params(hidden_size, intermediate_size)
        + moe_layers * (router + n_shared_experts * expert)
    )
    return routed_split(shared, moe_layers, n_routed_experts, num_experts_per_tok, expert)


def llama4_text_params(
    shape: DecoderShape, *, intermediate_size: int, intermediate_size_mlp: int, num_local_experts: int,
    num_experts_per_tok: int, moe_layers: int, tie_word_embeddings: bool = False,
) -> ParamCount:
    """Llama 4's language model (transformers `Llama4TextDecoderLayer`, 4.51.0).

    Every layer: q, k, v, o without bias (its qk-norm is an L2 norm with no weight) and two
    RMSNorms. `moe_layers` of them (every `interleave_moe_layer_step`-th) hold a router
    (hidden x experts, no bias), `num_local_experts` gated experts of `intermediate_size` and one
    always-on shared expert of the same width; the others a dense gated MLP of
    `intermediate_size_mlp`. A token runs `num_experts_per_tok` routed experts.
    The vision tower is not counted. Scout: 107,769,861,120 total, 17,172,894,720 active.
    """
    hidden = shape.hidden_size
    expert = gated_mlp_params(hidden, intermediate_size)
    dense_layers = shape.num_hidden_layers - moe_layers
    shared = (
        shape.frame(shape.attention(), tie_word_embeddings=tie_word_embeddings)
        + dense_layers * gated_mlp_params(hidden, intermediate_size_mlp)
        + moe_layers * (hidden * num_local_experts + expert)  # router + shared expert
    )
    return routed_split(shared, moe_layers, num_local_experts, num_experts_per_tok, expert)


def gpt_oss_routed_expert_weights(*, num_hidden_layers: int, hidden_size: int, intermediate_size: int, num_local_experts: int) -> int:
    """gpt-oss's routed-expert weight matrices (biases excluded): gate_up (hidden x 2 x
    intermediate) and down (intermediate x hidden) per expert per layer. They are what its
    checkpoint stores in MXFP4 (quantization_config.modules_to_not_convert keeps the rest bf16)."""
    return num_hidden_layers * num_local_experts * 3 * hidden_size * intermediate_size


def gpt_oss_params(
    shape: DecoderShape, *, intermediate_size: int, num_local_experts: int, num_experts_per_tok: int,
    tie_word_embeddings: bool = False,
) -> ParamCount:
    """gpt-oss (transformers `GptOssDecoderLayer`, 4.55.0).

    Attention: q, k, v and o with biases (`attention_bias` true) and one learned sink logit
    per head (`sinks`: parameters, no cache). MoE: a router with bias (hidden x experts +
    experts) and `num_local_experts` experts, each gate_up (hidden -> 2 x intermediate, with
    bias) and down (intermediate -> hidden, with bias). Two RMSNorms per layer, a final norm,
    untied embeddings. gpt-oss-20b: 20,914,757,184 total (models.csv 20.92B).
    """
    hidden = shape.hidden_size
    attention = shape.attention(qkv_bias=True, o_bias=True) + shape.num_attention_heads  # + a sink per head
    expert = 3 * hidden * intermediate_size + 2 * intermediate_size + hidden
    router = hidden * num_local_experts + num_local_experts
    shared = shape.frame(attention + router, tie_word_embeddings=tie_word_embeddings)
    return routed_split(shared, shape.num_hidden_layers, num_local_experts, num_experts_per_tok, expert)


def qwen3_next_params(
    *, hidden_size: int, num_attention_heads: int, num_key_value_heads: int, head_dim: int,
    full_attention_layers: int, linear_attention_layers: int, linear_block: int, moe_layers: int,
    intermediate_size: int, moe_intermediate_size: int, shared_expert_intermediate_size: int, num_experts: int,
    num_experts_per_tok: int, vocab_size: int, tie_word_embeddings: bool = False,
) -> ParamCount:
    """Qwen3-Next / Qwen3.5 language models (transformers `Qwen3NextDecoderLayer`, 4.57.0).

    Full-attention layers: gated attention, so q_proj is twice as wide (queries and their
    output gate), k, v, o without bias, q and k RMSNorms of head_dim. Linear-attention layers:
    `linear_block` parameters each (gated_deltanet_params). MoE layers: router (hidden x
    experts), `num_experts` gated experts of moe_intermediate_size, one shared expert of
    shared_expert_intermediate_size and its sigmoid gate (hidden x 1); the other layers a dense
    gated MLP of intermediate_size (Qwen3.5's dense models). Two RMSNorms per layer, a final
    norm, untied embeddings. The multi-token-prediction module (mtp.*) is not counted.
    Qwen3-Next-80B-A3B: 79,674,391,296 total (model card: 80B, 79B non-embedding).
    """
    layers = full_attention_layers + linear_attention_layers
    q_width = num_attention_heads * head_dim
    attention = (
        hidden_size * 2 * q_width + 2 * hidden_size * num_key_value_heads * head_dim + q_width * hidden_size + 2 * head_dim
    )
    expert = gated_mlp_params(hidden_size, moe_intermediate_size)
    moe_shared = hidden_size * num_experts + gated_mlp_params(hidden_size, shared_expert_intermediate_size) + hidden_size
    shared = (
        decoder_frame_params(layers, hidden_size, vocab_size, 0, tie_word_embeddings=tie_word_embeddings)
        + full_attention_layers * attention
        + linear_attention_layers * linear_block
        + (layers - moe_layers) * gated_mlp_params(hidden_size, intermediate_size)
        + moe_layers * moe_shared
    )
    return routed_split(shared, moe_layers, num_experts, num_experts_per_tok, expert)


def glm4_moe_params(
    shape: DecoderShape, *, intermediate_size: int, moe_intermediate_size: int, n_routed_experts: int,
    n_shared_experts: int, num_experts_per_tok: int, first_k_dense_replace: int, attention_bias: bool,
    use_qk_norm: bool, tie_word_embeddings: bool = False,
) -> ParamCount:
    """GLM-4.5 / 4.6 / 4.7 (transformers `Glm4MoeDecoderLayer`, 4.54.0): grouped-query
    attention (q, k, v biased when `attention_bias`, o never; q and k RMSNorms of head_dim when
    `use_qk_norm`), DeepSeek-V3's MoE layout: the first `first_k_dense_replace` layers a dense
    gated MLP of intermediate_size, the rest a router with an e_score_correction_bias
    (experts x hidden + experts), `n_routed_experts` routed and `n_shared_experts` shared
    experts of moe_intermediate_size. Two RMSNorms per layer, final norm, untied embeddings.
    The multi-token-prediction layer (num_nextn_predict_layers) is not counted.
    """
    hidden = shape.hidden_size
    attention = shape.attention(qkv_bias=attention_bias, qk_norm=use_qk_norm)
    moe_layers = shape.num_hidden_layers - first_k_dense_replace
    expert = gated_mlp_params(hidden, moe_intermediate_size)
    shared = (
        shape.frame(attention, tie_word_embeddings=tie_word_embeddings)
        + first_k_dense_replace * gated_mlp_params(hidden, intermediate_size)
        + moe_layers * (n_routed_experts * hidden + n_routed_experts + n_shared_experts * expert)
    )
    return routed_split(shared, moe_layers, n_routed_experts, num_experts_per_tok, expert)
