"""The memory model: KV bytes per token, weight bytes, and the budget ladder.

Sources: seed 000 ("The machine and the two phases": the formula, the eight-step
ladder, the H100 worked example) and seed 003 ("KV cache": the per-request sizes).
Each formula is one function; the ladder composes them in the seed's order.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from planner.catalog import Dtype, Model
from planner.deployment import Deployment
from planner.errors import InputError
from planner.units import GiB


def kv_heads_stored(model: Model, tp: int) -> int:
    """KV heads held across the `tp` GPUs of one replica.

    Each GPU needs at least one KV head for its query heads, so when tp exceeds
    num_key_value_heads the heads are replicated and the replica's cache grows
    (seed 000: "if the parallelism degree exceeds the KV head count, heads must be
    replicated across devices and the aggregate cache goes up"; vLLM assigns
    max(1, kv_heads // tp) heads per rank).
    """
    return tp * max(1, model.num_key_value_heads // tp)


def kv_values_per_token_per_layer(model: Model, tp: int = 1) -> int:
    """Cached values per token per layer, summed over the replica's GPUs.

    GQA/MHA: 2 (key and value) x KV heads x head_dim (seed 000: "the formula starts
    with a 2 rather than a 3"; kv_heads is num_key_value_heads, never the query heads).
    Latent attention (DeepSeek MLA): one compressed latent of kv_lora_rank plus the
    decoupled RoPE key of qk_rope_head_dim, no factor 2 (DeepSeek-V2 paper, sec. 2.1;
    vLLM caches 576 values per token per layer for V3); every tensor-parallel rank
    holds the whole latent, so it is replicated tp times.
    """
    if model.kv_lora_rank:
        return tp * (model.kv_lora_rank + (model.qk_rope_head_dim or 0))
    return 2 * kv_heads_stored(model, tp) * model.head_dim


def kv_bytes_per_token(model: Model, kv_dtype: Dtype, tp: int = 1) -> int:
    """2 x layers x kv_heads x head_dim x bytes_per_element (seed 000, seed 003).

    Bytes one more token adds to a sequence shorter than any sliding window:
    every layer, full-attention and sliding, stores it. Llama 3.1 8B in bf16:
    2 x 32 x 8 x 128 x 2 = 131,072 bytes = 128 KiB.
    """
    return math.ceil(model.num_hidden_layers * kv_values_per_token_per_layer(model, tp) * kv_dtype.bytes_per_element)


def kv_bytes_for_tokens(model: Model, tokens: int, kv_dtype: Dtype, tp: int = 1) -> int:
    """Cache bytes of one sequence of `tokens` tokens.

    Linear in length (seed 000: "linear in length, with no compression or decay"),
    except sliding-window layers, which keep only the last `sliding_window` tokens
    (Gemma 2: every other layer, window 4,096; HF Gemma2 `layer_types`).
    """
    per_layer = kv_values_per_token_per_layer(model, tp) * kv_dtype.bytes_per_element
    sliding = model.num_sliding_window_layers
    full = model.num_hidden_layers - sliding
    capped = min(tokens, model.sliding_window) if sliding else 0
    return math.ceil(per_layer * (full * tokens + sliding * capped))


def kv_bytes_per_token_by_layer_kind(model: Model, kv_dtype: Dtype, tp: int = 1) -> tuple[float, float]:
    """(bytes per cached token in full-attention layers, in sliding-window layers): a one-token
    sequence's bytes (kv_bytes_for_tokens) split in proportion to the layer counts, so a
    length-dependent footprint can cap only the sliding part at the window (seed 000's formula
    per layer; Gemma 2's sliding layers from HF Gemma2 `layer_types`)."""
    per_layer = kv_bytes_for_tokens(model, 1, kv_dtype, tp) / model.num_hidden_layers
    sliding = model.num_sliding_window_layers
    return per_layer * (model.num_hidden_layers - sliding), per_layer * sliding


def paged_tokens(tokens, block_size: int):
    """Tokens of cache a paged sequence holds: ceil(n / block_size) x block_size (vLLM blocks of 16).
    Works element-wise on integer numpy arrays too."""
    return -(-tokens // block_size) * block_size


def weight_bytes(model: Model, weight_dtype: Dtype) -> int:
    """params x bits per weight / 8, scale storage included in the dtype's bits (seed 000:
    "8.03 billion parameters times two bytes, so 14.96 GiB"). All parameters are
    counted, MoE experts included: memory holds every expert, compute uses the active ones."""
    return math.ceil(model.params_total * weight_dtype.bits_per_element / 8)


@dataclass(frozen=True)
class BudgetLadder:
    """Seed 000's eight steps for one replica (tp GPUs), in GiB unless named otherwise."""

    engine: str
    rule: str
    memory_fraction: float
    tp: int
    gpu_memory_gib: float  # reported capacity, all tp GPUs
    usable_gib: float  # what the engine lets itself use
    weights_gib: float
    overhead_gib: float  # activations, CUDA graphs, logits buffer
    kv_budget_gib: float
    kv_bytes_per_token: int
    max_model_len: int
    kv_bytes_per_user: int  # at the context limit

    @property
    def kv_budget_bytes(self) -> int:
        return math.floor(self.kv_budget_gib * GiB)

    @property
    def kv_gib_per_user(self) -> float:
        return self.kv_bytes_per_user / GiB

    @property
    def worst_case_users(self) -> int:
        """floor(budget / per-user at the limit): the guarantee (seed 000, step 8)."""
        return users_that_fit(self.kv_budget_bytes, self.kv_bytes_per_user)


def budget_ladder(dep: Deployment) -> BudgetLadder:
    """Reported memory x utilisation - weights - overhead = KV budget (seed 000, steps 1-8).

    The engine decides what the fraction applies to (data/engines.yaml):
    - fraction_of_total (vLLM): usable = memory x f; budget = usable - weights - overhead.
    - fraction_of_free_after_weights (TensorRT-LLM): budget = f x (memory - weights - overhead).
    - static_fraction_weights_and_kv (SGLang): weights + KV = memory x f; activations
      and graphs live in the remainder, so no separate overhead is subtracted.
    Raises InputError, with the ladder's numbers, when the weights do not fit.
    """
    memory_gib = dep.gpu.memory_gib * dep.tp
    weights_gib = weight_bytes(dep.model, dep.weight_dtype) / GiB
    overhead_gib = dep.overhead_gib_per_gpu * dep.tp
    f = dep.memory_fraction
    rule = dep.engine.rule
    if rule == "fraction_of_total":
        usable_gib = memory_gib * f
        budget_gib = usable_gib - weights_gib - overhead_gib
    elif rule == "fraction_of_free_after_weights":
        free_gib = memory_gib - weights_gib - overhead_gib
        budget_gib = f * free_gib
        usable_gib = weights_gib + overhead_gib + budget_gib
    else:
        usable_gib = memory_gib * f
        overhead_gib = memory_gib - usable_gib
        budget_gib = usable_gib - weights_gib
    if budget_gib <= 0:
        raise InputError(
            f"'{dep.model.id}' {dep.weight_dtype.id} weights do not fit on {dep.tp} x {dep.gpu.id}: "
            f"{memory_gib:.2f} GiB x {f:.2f} = {usable_gib:.2f} GiB usable - {weights_gib:.2f} GiB weights "
            f"- {overhead_gib:.2f} GiB overhead = {budget_gib:.2f} GiB KV budget; "
            "try more tensor parallelism, fp8/int4 weights or a larger GPU"
        )
    return BudgetLadder(
        engine=dep.engine.id,
        rule=rule,
        memory_fraction=f,
        tp=dep.tp,
        gpu_memory_gib=memory_gib,
        usable_gib=usable_gib,
        weights_gib=weights_gib,
        overhead_gib=overhead_gib,
        kv_budget_gib=budget_gib,
        kv_bytes_per_token=kv_bytes_per_token(dep.model, dep.kv_dtype, dep.tp),
        max_model_len=dep.max_model_len,
        kv_bytes_per_user=kv_bytes_for_tokens(dep.model, dep.max_model_len, dep.kv_dtype, dep.tp),
    )


def users_that_fit(budget_bytes: float, per_user_bytes: float) -> int:
    """floor(budget / per-user): counts are floored, never rounded (design.md, golden numbers)."""
    return math.floor(budget_bytes / per_user_bytes)


def paged_users(dep: Deployment, ladder: BudgetLadder, typical_tokens: int) -> int:
    """Users that fit when each holds only its paged length, not the limit (seed 000:
    "a typical 2,300-token conversation is 0.28 GiB with paging ... nearer 191")."""
    held = paged_tokens(min(typical_tokens, dep.max_model_len), dep.block_size)
    return users_that_fit(ladder.kv_budget_bytes, kv_bytes_for_tokens(dep.model, held, dep.kv_dtype, dep.tp))


@dataclass(frozen=True)
class LeverEffect:
    """What one memory lever would change (seed 000, "Drive every control")."""

    lever: str
    available: bool
    why_not: str
    kv_budget_gib: float
    kv_gib_per_user: float
    worst_case_users: int


def memory_levers(dep: Deployment, fp8: Dtype, lower_limit: int) -> list[LeverEffect]:
    """The ladder re-run with each serving-time lever: fp8 cache, a lower limit, fp8 weights.

    They are independent, so they multiply (seed 000: "a stack rather than a menu")."""
    from planner.deployment import supported_problem

    options = [
        ("fp8 KV cache", dataclasses.replace(dep, kv_dtype=fp8)),
        (f"context limit {lower_limit:,}", dataclasses.replace(dep, max_model_len=lower_limit)),
        ("fp8 weights", dataclasses.replace(dep, weight_dtype=fp8)),
        (
            f"all three (fp8 cache + {lower_limit:,} + fp8 weights)",
            dataclasses.replace(dep, kv_dtype=fp8, weight_dtype=fp8, max_model_len=lower_limit),
        ),
    ]
    out = []
    for name, alt in options:
        problem = supported_problem(alt.gpu, alt.tp, alt.weight_dtype, alt.kv_dtype, alt.model)
        if problem:
            out.append(LeverEffect(name, False, problem, 0.0, 0.0, 0))
            continue
        lad = budget_ladder(alt)
        out.append(LeverEffect(name, True, "", lad.kv_budget_gib, lad.kv_gib_per_user, lad.worst_case_users))
    return out
