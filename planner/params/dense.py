"""Dense decoders: every MLP runs for every token, so active = total (package docstring: the
conventions)."""

from __future__ import annotations

from planner.params.blocks import DecoderShape, ParamCount, gated_mlp_params


def dense_decoder_params(
    shape: DecoderShape, *, intermediate_size: int, tie_word_embeddings: bool = False, qkv_bias: bool = False,
    o_bias: bool = False, mlp_bias: bool = False, qk_norm: bool = False, norms_per_layer: int = 2,
) -> ParamCount:
    """A dense pre-norm GQA decoder: Llama, Mistral, Qwen2, Qwen3, Gemma 2.

    Per layer: attention (`gqa_attention_params`) + gated MLP + `norms_per_layer`
    RMSNorms of `hidden_size` (2 for Llama-style input/post-attention norms).
    Plus the final norm and the embeddings (`embedding_params`). Dense: active =
    total. Reproduces Llama 3.1 8B = 8,030,261,248 and 70B = 70,553,706,496 exactly.
    """
    per_layer = (
        shape.attention(qkv_bias=qkv_bias, o_bias=o_bias, qk_norm=qk_norm)
        + gated_mlp_params(shape.hidden_size, intermediate_size, bias=mlp_bias)
        + (norms_per_layer - 2) * shape.hidden_size  # the frame holds two
    )
    total = shape.frame(per_layer, tie_word_embeddings=tie_word_embeddings)
    return ParamCount(total, total)


def gemma2_params(shape: DecoderShape, *, intermediate_size: int, qk_norm: bool = False) -> ParamCount:
    """Gemma 2: a dense GQA decoder with four norms per layer and tied embeddings.

    transformers `Gemma2DecoderLayer` has input_layernorm, post_attention_layernorm,
    pre_feedforward_layernorm and post_feedforward_layernorm (each `hidden_size`),
    no attention or MLP biases, and the LM head tied to the embedding (`qk_norm`: Gemma 3's
    per-head q and k RMSNorms). Sliding
    windows and logit soft-capping add no parameters. head_dim is read from the
    config (128 on 27B, where heads × head_dim = 4096 ≠ hidden 4608).
    """
    return dense_decoder_params(
        shape, intermediate_size=intermediate_size, tie_word_embeddings=True, qk_norm=qk_norm, norms_per_layer=4
    )


def gemma3_text_params(shape: DecoderShape, *, intermediate_size: int) -> ParamCount:
    """Gemma 3's language model: Gemma 2's layer (four norms, tied embeddings) plus a q and a k
    RMSNorm of head_dim per layer (transformers `Gemma3Attention.q_norm/k_norm`, 4.50.0).

    The vision tower (SigLIP) and the projector of Gemma3ForConditionalGeneration are not
    counted: count them from the checkpoint files (--weights) or give --params-total.
    Gemma 3 27B: 27,009,346,304 (its published checkpoint holds 27,432,406,640 with the tower).
    """
    return gemma2_params(shape, intermediate_size=intermediate_size, qk_norm=True)
