"""The pieces every architecture's count is built from: embeddings, attention blocks (grouped-
query, multi-head latent, Gated DeltaNet), gated MLPs, and the total/active split of routed
experts; and the shape a grouped-query decoder's formulas start from (package docstring: the
conventions)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple


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
    hidden_size: int, num_attention_heads: int, num_key_value_heads: int, head_dim: int, *,
    qkv_bias: bool = False, o_bias: bool = False, qk_norm: bool = False,
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


def mla_attention_params(
    *, hidden_size: int, num_attention_heads: int, q_lora_rank: int | None, kv_lora_rank: int,
    qk_nope_head_dim: int, qk_rope_head_dim: int, v_head_dim: int,
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


def routed_split(shared: int, moe_layers: int, num_experts: int, num_experts_per_tok: int, expert: int) -> ParamCount:
    """Total and active counts of a MoE model: every routed expert is held, `num_experts_per_tok`
    of them per MoE layer run for a token; `shared` is everything else (attention, norms,
    routers, shared experts, dense MLPs, embeddings)."""
    return ParamCount(shared + moe_layers * num_experts * expert, shared + moe_layers * num_experts_per_tok * expert)


def decoder_frame_params(
    num_hidden_layers: int, hidden_size: int, vocab_size: int, per_layer: int, *, tie_word_embeddings: bool
) -> int:
    """A pre-norm decoder without its MLPs: per layer, `per_layer` parameters (its attention
    block, and any router or always-on expert every layer holds) and two RMSNorms of
    hidden_size (input and post-attention, transformers `LlamaDecoderLayer`); then the final
    norm and the embeddings (`embedding_params`)."""
    return (
        num_hidden_layers * (per_layer + 2 * hidden_size)
        + hidden_size  # final norm
        + embedding_params(vocab_size, hidden_size, tie_word_embeddings=tie_word_embeddings)
    )


@dataclass(frozen=True)
class DecoderShape:
    """What every grouped-query decoder's count starts from, under config.json's names: the
    layers, the hidden width, the query and KV head counts, the head width and the vocabulary."""

    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> DecoderShape:
        """The shape's fields of a mapping of config fields (the others are left)."""
        return cls(**{f.name: config[f.name] for f in dataclasses.fields(cls)})

    def attention(self, *, qkv_bias: bool = False, o_bias: bool = False, qk_norm: bool = False) -> int:
        """One attention block of this shape (`gqa_attention_params`)."""
        return gqa_attention_params(
            self.hidden_size, self.num_attention_heads, self.num_key_value_heads, self.head_dim,
            qkv_bias=qkv_bias, o_bias=o_bias, qk_norm=qk_norm,
        )  # fmt: skip

    def frame(self, per_layer: int, *, tie_word_embeddings: bool) -> int:
        """The decoder without its MLPs (`decoder_frame_params`)."""
        return decoder_frame_params(
            self.num_hidden_layers, self.hidden_size, self.vocab_size, per_layer, tie_word_embeddings=tie_word_embeddings
        )
