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
    qk_norm: bool = False,
) -> ParamCount:
    """Gemma 2: a dense GQA decoder with four norms per layer and tied embeddings.

    transformers `Gemma2DecoderLayer` has input_layernorm, post_attention_layernorm,
    pre_feedforward_layernorm and post_feedforward_layernorm (each `hidden_size`),
    no attention or MLP biases, and the LM head tied to the embedding (`qk_norm`: Gemma 3's
    per-head q and k RMSNorms). Sliding
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
        qk_norm=qk_norm,
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


def routed_split(shared: int, moe_layers: int, num_experts: int, num_experts_per_tok: int, expert: int) -> ParamCount:
    """Total and active counts of a MoE model: every routed expert is held, `num_experts_per_tok`
    of them per MoE layer run for a token; `shared` is everything else (attention, norms,
    routers, shared experts, dense MLPs, embeddings)."""
    return ParamCount(shared + moe_layers * num_experts * expert, shared + moe_layers * num_experts_per_tok * expert)


def gemma3_text_params(
    *,
    num_hidden_layers: int,
    hidden_size: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    head_dim: int,
    intermediate_size: int,
    vocab_size: int,
) -> ParamCount:
    """Gemma 3's language model: Gemma 2's layer (four norms, tied embeddings) plus a q and a k
    RMSNorm of head_dim per layer (transformers `Gemma3Attention.q_norm/k_norm`, 4.50.0).

    The vision tower (SigLIP) and the projector of Gemma3ForConditionalGeneration are not
    counted: count them from the checkpoint files (--weights) or give --params-total.
    Gemma 3 27B: 27,009,346,304 (its published checkpoint holds 27,432,406,640 with the tower).
    """
    return gemma2_params(
        num_hidden_layers=num_hidden_layers,
        hidden_size=hidden_size,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        head_dim=head_dim,
        intermediate_size=intermediate_size,
        vocab_size=vocab_size,
        qk_norm=True,
    )


def llama4_text_params(
    *,
    num_hidden_layers: int,
    hidden_size: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    head_dim: int,
    intermediate_size: int,
    intermediate_size_mlp: int,
    num_local_experts: int,
    num_experts_per_tok: int,
    moe_layers: int,
    vocab_size: int,
    tie_word_embeddings: bool = False,
) -> ParamCount:
    """Llama 4's language model (transformers `Llama4TextDecoderLayer`, 4.51.0).

    Every layer: q, k, v, o without bias (its qk-norm is an L2 norm with no weight) and two
    RMSNorms. `moe_layers` of them (every `interleave_moe_layer_step`-th) hold a router
    (hidden x experts, no bias), `num_local_experts` gated experts of `intermediate_size` and one
    always-on shared expert of the same width; the others a dense gated MLP of
    `intermediate_size_mlp`. A token runs `num_experts_per_tok` routed experts.
    The vision tower is not counted. Scout: 107,769,861,120 total, 17,172,894,720 active.
    """
    attention = gqa_attention_params(hidden_size, num_attention_heads, num_key_value_heads, head_dim)
    expert = gated_mlp_params(hidden_size, intermediate_size)
    dense_layers = num_hidden_layers - moe_layers
    shared = (
        num_hidden_layers * (attention + 2 * hidden_size)
        + dense_layers * gated_mlp_params(hidden_size, intermediate_size_mlp)
        + moe_layers * (hidden_size * num_local_experts + expert)  # router + shared expert
        + hidden_size
        + embedding_params(vocab_size, hidden_size, tie_word_embeddings=tie_word_embeddings)
    )
    return routed_split(shared, moe_layers, num_local_experts, num_experts_per_tok, expert)


def gpt_oss_routed_expert_weights(*, num_hidden_layers: int, hidden_size: int, intermediate_size: int, num_local_experts: int) -> int:
    """gpt-oss's routed-expert weight matrices (biases excluded): gate_up (hidden x 2 x
    intermediate) and down (intermediate x hidden) per expert per layer. They are what its
    checkpoint stores in MXFP4 (quantization_config.modules_to_not_convert keeps the rest bf16)."""
    return num_hidden_layers * num_local_experts * 3 * hidden_size * intermediate_size


def gpt_oss_params(
    *,
    num_hidden_layers: int,
    hidden_size: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    head_dim: int,
    intermediate_size: int,
    num_local_experts: int,
    num_experts_per_tok: int,
    vocab_size: int,
    tie_word_embeddings: bool = False,
) -> ParamCount:
    """gpt-oss (transformers `GptOssDecoderLayer`, 4.55.0).

    Attention: q, k, v and o with biases (`attention_bias` true) and one learned sink logit
    per head (`sinks`: parameters, no cache). MoE: a router with bias (hidden x experts +
    experts) and `num_local_experts` experts, each gate_up (hidden -> 2 x intermediate, with
    bias) and down (intermediate -> hidden, with bias). Two RMSNorms per layer, a final norm,
    untied embeddings. gpt-oss-20b: 20,914,757,184 total (models.csv 20.92B).
    """
    attention = gqa_attention_params(
        hidden_size, num_attention_heads, num_key_value_heads, head_dim, qkv_bias=True, o_bias=True
    ) + num_attention_heads
    expert = 3 * hidden_size * intermediate_size + 2 * intermediate_size + hidden_size
    router = hidden_size * num_local_experts + num_local_experts
    shared = (
        num_hidden_layers * (attention + 2 * hidden_size + router)
        + hidden_size
        + embedding_params(vocab_size, hidden_size, tie_word_embeddings=tie_word_embeddings)
    )
    return routed_split(shared, num_hidden_layers, num_local_experts, num_experts_per_tok, expert)


def gated_deltanet_params(
    *, hidden_size: int, num_key_heads: int, num_value_heads: int, key_head_dim: int, value_head_dim: int, conv_kernel: int
) -> int:
    """One Gated DeltaNet linear-attention block (transformers `Qwen3NextGatedDeltaNet`, 4.57.0).

    in_proj_qkvz: hidden -> 2 x key_dim + 2 x value_dim; in_proj_ba: hidden -> 2 x value heads;
    a depthwise conv1d over q, k, v (conv_dim x kernel, no bias); dt_bias and A_log (one per
    value head); a gated RMSNorm of value_head_dim; out_proj: value_dim -> hidden. No biases.
    """
    key_dim = num_key_heads * key_head_dim
    value_dim = num_value_heads * value_head_dim
    conv_dim = 2 * key_dim + value_dim
    return (
        hidden_size * (2 * key_dim + 2 * value_dim)
        + hidden_size * 2 * num_value_heads
        + conv_dim * conv_kernel
        + 2 * num_value_heads
        + value_head_dim
        + value_dim * hidden_size
    )


def qwen3_next_params(
    *,
    hidden_size: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    head_dim: int,
    full_attention_layers: int,
    linear_attention_layers: int,
    linear_block: int,
    moe_layers: int,
    intermediate_size: int,
    moe_intermediate_size: int,
    shared_expert_intermediate_size: int,
    num_experts: int,
    num_experts_per_tok: int,
    vocab_size: int,
    tie_word_embeddings: bool = False,
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
        full_attention_layers * attention
        + linear_attention_layers * linear_block
        + layers * 2 * hidden_size
        + (layers - moe_layers) * gated_mlp_params(hidden_size, intermediate_size)
        + moe_layers * moe_shared
        + hidden_size
        + embedding_params(vocab_size, hidden_size, tie_word_embeddings=tie_word_embeddings)
    )
    return routed_split(shared, moe_layers, num_experts, num_experts_per_tok, expert)


def glm4_moe_params(
    *,
    num_hidden_layers: int,
    hidden_size: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    head_dim: int,
    intermediate_size: int,
    moe_intermediate_size: int,
    n_routed_experts: int,
    n_shared_experts: int,
    num_experts_per_tok: int,
    first_k_dense_replace: int,
    vocab_size: int,
    attention_bias: bool,
    use_qk_norm: bool,
    tie_word_embeddings: bool = False,
) -> ParamCount:
    """GLM-4.5 / 4.6 / 4.7 (transformers `Glm4MoeDecoderLayer`, 4.54.0): grouped-query
    attention (q, k, v biased when `attention_bias`, o never; q and k RMSNorms of head_dim when
    `use_qk_norm`), DeepSeek-V3's MoE layout: the first `first_k_dense_replace` layers a dense
    gated MLP of intermediate_size, the rest a router with an e_score_correction_bias
    (experts x hidden + experts), `n_routed_experts` routed and `n_shared_experts` shared
    experts of moe_intermediate_size. Two RMSNorms per layer, final norm, untied embeddings.
    The multi-token-prediction layer (num_nextn_predict_layers) is not counted.
    """
    attention = gqa_attention_params(
        hidden_size, num_attention_heads, num_key_value_heads, head_dim, qkv_bias=attention_bias, qk_norm=use_qk_norm
    )
    moe_layers = num_hidden_layers - first_k_dense_replace
    expert = gated_mlp_params(hidden_size, moe_intermediate_size)
    shared = (
        num_hidden_layers * (attention + 2 * hidden_size)
        + first_k_dense_replace * gated_mlp_params(hidden_size, intermediate_size)
        + moe_layers * (n_routed_experts * hidden_size + n_routed_experts + n_shared_experts * expert)
        + hidden_size
        + embedding_params(vocab_size, hidden_size, tie_word_embeddings=tie_word_embeddings)
    )
    return routed_split(shared, moe_layers, n_routed_experts, num_experts_per_tok, expert)
