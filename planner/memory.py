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
from planner.memo import ObjectMemo
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


@dataclass(frozen=True)
class LayerKindCache:
    """What one kind of layer keeps for a sequence, summed over its layers and the replica's GPUs.

    kind: full_attention / latent_attention (grow with the sequence), sliding_attention /
    chunked_attention (capped at `token_cap` tokens), kv_shared (read another layer's cache,
    store none), linear_attention / mamba (a fixed state per sequence, nothing per token),
    no_cache (blocks with neither attention nor state).
    """

    kind: str
    layers: int
    bytes_per_token: float  # per cached token; 0 for the kinds that store none
    token_cap: int | None  # most tokens the kind keeps; None: all of them
    state_bytes: int  # fixed per sequence, whatever its length

    def bytes_for_tokens(self, tokens: int) -> float:
        """This kind's cache for a sequence of `tokens` tokens, the fixed state excluded."""
        held = tokens if self.token_cap is None else min(tokens, self.token_cap)
        return self.bytes_per_token * held


@dataclass(frozen=True)
class KVLayout:
    """A model's cache, layer kind by layer kind (kv_bytes_per_token_by_layer_kind)."""

    kinds: tuple[LayerKindCache, ...]

    @property
    def bytes_per_token(self) -> float:
        """Bytes one more token adds to a sequence shorter than every cap."""
        return sum(k.bytes_per_token for k in self.kinds)

    @property
    def uncapped_bytes_per_token(self) -> float:
        return sum(k.bytes_per_token for k in self.kinds if k.token_cap is None)

    @property
    def capped_bytes_per_token(self) -> float:
        return sum(k.bytes_per_token for k in self.kinds if k.token_cap is not None)

    @property
    def token_cap(self) -> int | None:
        """The cap of the capped layers (a model has at most one: catalog.Model checks it)."""
        caps = {k.token_cap for k in self.kinds if k.token_cap is not None and k.bytes_per_token}
        return caps.pop() if caps else None

    @property
    def state_bytes_per_sequence(self) -> int:
        return sum(k.state_bytes for k in self.kinds)


def kv_bytes_per_token_by_layer_kind(model: Model, kv_dtype: Dtype, tp: int = 1) -> KVLayout:
    """_layer_kinds of the model, dtype and tp, remembered (planner.memo): a capacity search asks
    it of every pair several times (footprint, ladder, percentile sizing)."""
    return _LAYOUTS((model, kv_dtype), (tp,))


def _layer_kinds(model: Model, kv_dtype: Dtype, tp: int) -> KVLayout:
    """The cache of every layer kind in `model`, summed per layer (seed 000's formula, layer by layer).

    - full / latent attention: every token, kv_values_per_token_per_layer x bytes per element.
    - sliding window: the same per token, but only the last `sliding_window` tokens (Mistral
      v0.1, Gemma 2/3, gpt-oss; vLLM's SlidingWindowSpec frees blocks outside the window).
    - chunked local attention (Llama 4): a token attends within its chunk of
      `attention_chunk_size`, so a layer keeps at most one chunk; charged as a window of that
      size (an upper bound: the chunk in progress is on average half full).
    - cross-layer KV sharing (Gemma 3n `num_kv_shared_layers`): the layer reads an earlier
      layer's cache and stores nothing.
    - linear attention (Gated DeltaNet) and state-space (Mamba) layers: a recurrent and a
      convolution state of fixed size per sequence (vLLM mamba_utils.MambaStateShapeCalculator),
      `state_bytes_per_layer` each, whatever the sequence length and the KV dtype (vLLM keeps it
      in mamba_cache_dtype, the model dtype by default, not kv_cache_dtype).
    - attention sinks: learned sink logits (gpt-oss `sinks`) are parameters, not cache; nothing to add.
    """
    per_layer = kv_values_per_token_per_layer(model, tp) * kv_dtype.bytes_per_element
    capped = model.num_sliding_window_layers + model.num_chunked_attention_layers
    full = model.num_hidden_layers - capped - model.num_kv_shared_layers - model.num_state_layers - model.num_cacheless_layers
    rows = [
        LayerKindCache("latent_attention" if model.kv_lora_rank else "full_attention", full, full * per_layer, None, 0),
        LayerKindCache(
            "sliding_attention", model.num_sliding_window_layers, model.num_sliding_window_layers * per_layer,
            model.sliding_window, 0,
        ),
        LayerKindCache(
            "chunked_attention", model.num_chunked_attention_layers, model.num_chunked_attention_layers * per_layer,
            model.attention_chunk_size, 0,
        ),
        LayerKindCache("kv_shared", model.num_kv_shared_layers, 0.0, None, 0),
        LayerKindCache(
            model.state_layer_kind or "linear_attention", model.num_state_layers, 0.0, None,
            model.num_state_layers * (model.state_bytes_per_layer or 0),
        ),
        LayerKindCache("no_cache", model.num_cacheless_layers, 0.0, None, 0),
    ]
    return KVLayout(tuple(r for r in rows if r.layers))


_LAYOUTS: ObjectMemo[KVLayout] = ObjectMemo(_layer_kinds)


def layer_kind_lines(model: Model, kv_dtype: Dtype, tp: int = 1) -> list[str]:
    """One line per layer kind, with its arithmetic: what the ladder and the reports print."""
    bpe = kv_dtype.bytes_per_element
    if model.kv_lora_rank:
        shape = f"({model.kv_lora_rank} latent + {model.qk_rope_head_dim} rope)" + (f" x {tp} ranks" if tp > 1 else "")
    else:
        heads = kv_heads_stored(model, tp)
        replicated = f" (tp {tp} > {model.num_key_value_heads} KV heads: replicated)" if heads != model.num_key_value_heads else ""
        shape = f"2 (K, V) x {heads} KV heads{replicated} x {model.head_dim} head_dim"
    lines = []
    for k in kv_bytes_per_token_by_layer_kind(model, kv_dtype, tp).kinds:
        head = f"{k.kind:<18} {k.layers:>3} layers"
        if k.bytes_per_token:
            cap = f", capped at {k.token_cap:,} tokens" if k.token_cap is not None else ""
            lines.append(f"{head} x {shape} x {bpe:g} bytes = {k.bytes_per_token:,.0f} bytes/token{cap}")
        elif k.state_bytes:
            lines.append(
                f"{head} x {model.state_bytes_per_layer:,} bytes of state = {k.state_bytes:,} bytes per sequence "
                f"({k.state_bytes / 2**20:,.2f} MiB), whatever its length"
            )
        elif k.kind == "kv_shared":
            lines.append(f"{head} read an earlier layer's cache: 0 bytes")
        else:
            lines.append(f"{head} with neither attention nor state: 0 bytes")
    return lines


def kv_bytes_per_token(model: Model, kv_dtype: Dtype, tp: int = 1) -> int:
    """2 x layers x kv_heads x head_dim x bytes_per_element (seed 000, seed 003), over the
    layers that cache tokens (kv_bytes_per_token_by_layer_kind).

    Bytes one more token adds to a sequence shorter than any sliding window or chunk:
    every attention layer, full and capped, stores it; linear-attention and state-space
    layers do not (their state is per sequence). Llama 3.1 8B in bf16:
    2 x 32 x 8 x 128 x 2 = 131,072 bytes = 128 KiB.
    """
    return math.ceil(kv_bytes_per_token_by_layer_kind(model, kv_dtype, tp).bytes_per_token)


def kv_bytes_for_tokens(model: Model, tokens: int, kv_dtype: Dtype, tp: int = 1) -> int:
    """Cache bytes of one sequence's `tokens` tokens, per-sequence state excluded.

    Linear in length (seed 000: "linear in length, with no compression or decay"),
    except sliding-window and chunked layers, which keep only the last `sliding_window`
    tokens or one chunk (Gemma 2: every other layer, window 4,096; HF Gemma2 `layer_types`).
    kv_bytes_per_sequence adds the fixed state of linear-attention and state-space layers.
    """
    layout = kv_bytes_per_token_by_layer_kind(model, kv_dtype, tp)
    return math.ceil(sum(k.bytes_for_tokens(tokens) for k in layout.kinds))


def kv_state_bytes_per_sequence(model: Model) -> int:
    """Fixed state of the linear-attention / state-space layers of one sequence (0 for a transformer)."""
    return model.num_state_layers * (model.state_bytes_per_layer or 0)


def kv_bytes_per_sequence(model: Model, tokens: int, kv_dtype: Dtype, tp: int = 1) -> int:
    """Everything one sequence of `tokens` tokens holds: its tokens' cache plus the fixed state."""
    return kv_bytes_for_tokens(model, tokens, kv_dtype, tp) + kv_state_bytes_per_sequence(model)


def kv_token_cap(model: Model) -> int | None:
    """The window or chunk that caps the capped layers' cache, None when no layer is capped:
    what planner.paged.token_profile takes as `sliding_window`."""
    if model.num_sliding_window_layers:
        return model.sliding_window
    if model.num_chunked_attention_layers:
        return model.attention_chunk_size
    return None


def paged_tokens(tokens, block_size: int):
    """Tokens of cache a paged sequence holds: ceil(n / block_size) x block_size (vLLM blocks of 16).
    Works element-wise on integer numpy arrays too."""
    return -(-tokens // block_size) * block_size


def weight_bytes(model: Model, weight_dtype: Dtype) -> int:
    """params x bits per weight / 8, scale storage included in the dtype's bits (seed 000:
    "8.03 billion parameters times two bytes, so 14.96 GiB"). All parameters are
    counted, MoE experts included: memory holds every expert, compute uses the active ones.

    A checkpoint published pre-quantized and read from its safetensors files
    (`checkpoint_weight_bytes`, planner.hf_import) weighs what its files hold when served in
    its own dtype: gpt-oss keeps attention, router and embeddings in bf16 beside MXFP4 experts,
    which no single bits-per-weight figure describes.
    """
    if model.checkpoint_weight_bytes and weight_dtype.id == model.checkpoint_dtype:
        return model.checkpoint_weight_bytes
    return math.ceil(model.params_total * weight_dtype.bits_per_element / 8)


def moe_bytes_per_param(model: Model, weight_dtype: Dtype, weights_bytes: float) -> tuple[float, float]:
    """(bytes a shared parameter takes, bytes a routed expert's parameter takes) of a mixture of
    experts' weights as served, `weights_bytes` in all (weight_bytes). One figure for both, the
    weights' mean, except for a checkpoint served in its own MXFP4: it quantizes the routed experts
    only and keeps attention, router and embeddings in bf16 (hf_weights.mxfp4_checkpoint_bytes),
    so a shared parameter is 2 bytes and the experts hold the rest. A decode step at a small batch
    reads mostly shared weights: at the mean, gpt-oss-120b's read 3.2 GB a step where its files'
    split reads 6.2 GB (an outside audit: its TPOT at low load 21-30% low)."""
    mean = weights_bytes / model.params_total
    split = model.expert_split
    if split is None or not (weight_dtype.id == "mxfp4" and model.checkpoint_dtype == "mxfp4"
                             and model.checkpoint_weight_bytes):
        return mean, mean
    shared, per_expert = split
    experts_bytes = weights_bytes - 2.0 * shared
    if experts_bytes <= 0:  # counts that do not split so: the mean, as for any other checkpoint
        return mean, mean
    return 2.0, experts_bytes / (model.num_experts * per_expert)


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
    kv_bytes_per_user: int  # at the context limit, fixed per-sequence state included
    kv_layout: KVLayout | None = None  # the cache by layer kind (kv_bytes_per_token_by_layer_kind)

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


def _no_budget_text(dep: Deployment, rule: str, memory_gib: float, f: float, weights_gib: float, overhead_gib: float,
                    budget_gib: float) -> str:
    """Why a deployment has no KV budget, with the engine rule's own arithmetic (budget_ladder), and the
    settings that could give it one: the weights alone past the GPUs' memory can only be split, quantised
    or moved; otherwise raising the fraction helps where the rule applies it to the whole memory (vLLM's,
    up to 1; SGLang's), not where it applies it to what weights and overhead leave (TensorRT-LLM's), and
    lowering the overhead helps where the rule subtracts it (vLLM's, TensorRT-LLM's)."""
    if rule == "fraction_of_total":
        arithmetic = (f"{memory_gib:.2f} GiB x {f:.2f} = {memory_gib * f:.2f} GiB usable - {weights_gib:.2f} GiB weights "
                      f"- {overhead_gib:.2f} GiB overhead = {budget_gib:.2f} GiB KV budget")
        fraction_helps, overhead_helps = weights_gib + overhead_gib < memory_gib, weights_gib < memory_gib * f
    elif rule == "fraction_of_free_after_weights":
        arithmetic = (f"({memory_gib:.2f} GiB - {weights_gib:.2f} GiB weights - {overhead_gib:.2f} GiB overhead) x "
                      f"{f:.2f} = {budget_gib:.2f} GiB KV budget")
        fraction_helps, overhead_helps = False, weights_gib < memory_gib
    else:  # the engine keeps the rest of memory for itself: no overhead of the user's is subtracted
        arithmetic = (f"{memory_gib:.2f} GiB x {f:.2f} = {memory_gib * f:.2f} GiB for weights and cache - "
                      f"{weights_gib:.2f} GiB weights = {budget_gib:.2f} GiB KV budget")
        fraction_helps, overhead_helps = weights_gib < memory_gib, False
    remedies = "try more tensor parallelism, fp8/int4 weights or a larger GPU"
    if weights_gib >= memory_gib:
        return (f"'{dep.model.id}' {dep.weight_dtype.id} weights do not fit on {dep.tp} x {dep.gpu.id}: {arithmetic}; "
                f"{remedies}")
    settings = (["raise the memory fraction (gpu_memory_utilization, --gpu-memory-utilization)"] if fraction_helps
                else []) + (["lower the overhead (overhead_gib, --overhead-gib)"] if overhead_helps else [])
    return (f"'{dep.model.id}' on {dep.tp} x {dep.gpu.id}: no memory is left for a KV cache: {arithmetic}; "
            + (" or ".join(settings) + f", or {remedies}" if settings else remedies))


def takes_overhead(engine) -> bool:
    """Whether the engine's memory rule subtracts an overhead of its own (vLLM's, TensorRT-LLM's): under
    SGLang's the memory fraction covers weights and cache, and the overhead is whatever it leaves
    (budget_ladder)."""
    return engine.rule != "static_fraction_weights_and_kv"


def overhead_refusal(engine, fraction_name: str = "gpu_memory_utilization") -> str | None:
    """Why an overhead stated for this engine would be ignored, or None where it takes one."""
    if takes_overhead(engine):
        return None
    return (f"engine '{engine.id}' takes no overhead of its own: its memory fraction covers weights and KV cache, and "
            f"the rest of the memory is the overhead; set {fraction_name} instead")


def budget_ladder(dep: Deployment) -> BudgetLadder:
    """Reported memory x utilisation - weights - overhead = KV budget (seed 000, steps 1-8).

    The engine decides what the fraction applies to (data/engines.yaml):
    - fraction_of_total (vLLM): usable = memory x f; budget = usable - weights - overhead.
    - fraction_of_free_after_weights (TensorRT-LLM): budget = f x (memory - weights - overhead).
    - static_fraction_weights_and_kv (SGLang): weights + KV = memory x f; activations
      and graphs live in the remainder, so no separate overhead is subtracted.
    Raises InputError, with the ladder's numbers, when no memory is left for a KV cache (_no_budget_text).
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
        raise InputError(_no_budget_text(dep, rule, memory_gib, f, weights_gib, overhead_gib, budget_gib))
    ladder = BudgetLadder(
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
        kv_bytes_per_user=kv_bytes_per_sequence(dep.model, dep.max_model_len, dep.kv_dtype, dep.tp),
        kv_layout=kv_bytes_per_token_by_layer_kind(dep.model, dep.kv_dtype, dep.tp),
    )
    if ladder.worst_case_users < 1:
        # vLLM refuses to start such an engine (its check that the cache holds one sequence of
        # max_model_len); planning on shorter typical requests would plan a server that never runs.
        raise InputError(
            f"'{dep.model.id}' on {dep.tp} x {dep.gpu.id}: the {budget_gib:.2f} GiB KV budget holds no sequence at the "
            f"{dep.max_model_len:,}-token context limit ({ladder.kv_gib_per_user:.2f} GiB each), and an engine will not "
            "start so; try a lower context limit, an fp8 cache, more tensor parallelism or a larger GPU"
        )
    return ladder


@dataclass(frozen=True)
class LadderStep:
    """One rung between the reported memory and the KV budget, as a person reads it."""

    label: str
    gib: float | None  # None: a step that scales what follows and has no value of its own


def weights_source(dep: Deployment) -> str:
    """Where step 3's weight bytes come from: the checkpoint's own size when the catalog has
    it for this dtype, else parameters x bytes per element (weight_bytes)."""
    m = dep.model
    if m.checkpoint_weight_bytes and weight_bytes(m, dep.weight_dtype) == m.checkpoint_weight_bytes:
        return f"{m.checkpoint_weight_bytes / 1e9:.2f} GB, the {dep.weight_dtype.id} checkpoint"
    return f"{m.params_total / 1e9:.2f} B params × {dep.weight_dtype.bytes_per_element:g} bytes ({dep.weight_dtype.id})"


def ladder_rule_steps(dep: Deployment, ladder: BudgetLadder) -> tuple[LadderStep, LadderStep, LadderStep]:
    """Steps 2-4 of seed 000's ladder in the order the engine's rule applies them (budget_ladder
    computes them; this names them for the report and `planner capacity`)."""
    f = ladder.memory_fraction
    weights = LadderStep(f"− weights: {weights_source(dep)}", ladder.weights_gib)
    overhead = LadderStep("− overhead (activations, CUDA graphs, logits)", ladder.overhead_gib)
    if ladder.rule == "fraction_of_total":
        return LadderStep(f"× gpu_memory_utilization {f:.2f}", ladder.usable_gib), weights, overhead
    if ladder.rule == "fraction_of_free_after_weights":
        return weights, overhead, LadderStep(f"× free_gpu_memory_fraction {f:.2f} of what is left", None)
    return (LadderStep(f"× mem_fraction_static {f:.2f} (weights + KV)", ladder.usable_gib), weights,
            LadderStep(f"(activations and graphs live in the other {ladder.overhead_gib:.2f} GiB)", None))


def users_that_fit(budget_bytes: float, per_user_bytes: float) -> int:
    """floor(budget / per-user): counts are floored, never rounded (design.md, golden numbers)."""
    return math.floor(budget_bytes / per_user_bytes)


def paged_users(dep: Deployment, ladder: BudgetLadder, typical_tokens: int) -> int:
    """Users that fit when each holds only its paged length, not the limit (seed 000:
    "a typical 2,300-token conversation is 0.28 GiB with paging ... nearer 191")."""
    held = paged_tokens(min(typical_tokens, dep.max_model_len), dep.block_size)
    return users_that_fit(ladder.kv_budget_bytes, kv_bytes_per_sequence(dep.model, held, dep.kv_dtype, dep.tp))


ALREADY_IN_USE = "already in use"  # a lever's why_not where the deployment has pulled it


@dataclass(frozen=True)
class LeverEffect:
    """What one memory lever would change (seed 000, "Drive every control"); the amounts are None
    where the lever is not available (why_not says why), not zeros a script would read as 0 users.
    kind names it whatever its label says: fp8_cache, lower_limit, fp8_weights, or together (the
    levers that apply, at once)."""

    kind: str
    lever: str
    available: bool
    why_not: str
    kv_budget_gib: float | None
    kv_gib_per_user: float | None
    worst_case_users: int | None


def memory_levers(dep: Deployment, fp8: Dtype, lower_limit: int) -> list[LeverEffect]:
    """The ladder re-run with each serving-time lever: fp8 cache, a lower limit, fp8 weights; then
    every one of them that applies, together.

    They are independent, so they multiply (seed 000: "a stack rather than a menu"). A lever the
    deployment has pulled, one its GPU cannot pull, a "lower" limit that is not lower (a limit of
    one block) and fp8 weights larger than a checkpoint already below 8 bits are not available;
    the stack then holds the others, and says which (with fp8 weights out, gpt-oss's MXFP4 had no
    stack at all)."""
    from planner.deployment import supported_problem

    levers = [
        ("fp8_cache", "fp8 cache", "fp8 KV cache", {"kv_dtype": fp8}),
        ("lower_limit", f"{lower_limit:,}", f"context limit {lower_limit:,}", {"max_model_len": lower_limit}),
        ("fp8_weights", "fp8 weights", "fp8 weights", {"weight_dtype": fp8}),
    ]
    out, pulled = [], []

    def unavailable(kind: str, name: str, why: str) -> LeverEffect:
        return LeverEffect(kind, name, False, why, None, None, None)

    def effect(kind: str, name: str, alt: Deployment) -> LeverEffect:
        try:
            lad = budget_ladder(alt)
        except InputError as exc:
            return unavailable(kind, name, str(exc))
        return LeverEffect(kind, name, True, "", lad.kv_budget_gib, lad.kv_gib_per_user, lad.worst_case_users)

    for kind, short, name, change in levers:
        alt = dataclasses.replace(dep, **change)
        if kind == "lower_limit" and lower_limit >= dep.max_model_len:
            tokens = f"{dep.max_model_len:,} token{'' if dep.max_model_len == 1 else 's'}"
            out.append(unavailable(kind, "lower context limit",
                                   f"the limit of {tokens} is one block already: none lower is offered"))
            continue
        if alt == dep:  # an fp8 cache or fp8 weights already chosen: nothing to pull
            out.append(unavailable(kind, name, ALREADY_IN_USE))
            continue
        problem = supported_problem(alt.gpu, alt.tp, alt.weight_dtype, alt.kv_dtype, alt.model)
        if not problem and weight_bytes(alt.model, alt.weight_dtype) > weight_bytes(dep.model, dep.weight_dtype):
            # A checkpoint already below 8 bits (gpt-oss's MXFP4) grows in fp8: not a lever.
            problem = f"{alt.weight_dtype.id} weights are larger than the {dep.weight_dtype.id} weights already in use"
        if problem:
            out.append(unavailable(kind, name, problem))
            continue
        lever = effect(kind, name, alt)
        out.append(lever)
        if lever.available:
            pulled.append((short, change))
    if len(pulled) < 2:
        out.append(unavailable("together", "all together", "fewer than two of the levers apply"))
    else:
        together = dataclasses.replace(dep, **{k: v for _, change in pulled for k, v in change.items()})
        names = " + ".join(short for short, _ in pulled)
        out.append(effect("together", f"all three ({names})" if len(pulled) == 3 else f"both that apply ({names})",
                          together))
    return out
