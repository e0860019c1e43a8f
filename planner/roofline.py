"""Roofline model of one replica: ridge point, decode step time, prefill time.

A decode step reads the weights once plus every resident sequence's whole cache
(seed 000: "the cache is not only stored, it is read — every active sequence's
entire cache, on every decode step, alongside the weights") and does about
2 x active params FLOPs per sequence plus attention over its context. The roofline
(Williams, Waterman & Patterson, "Roofline", CACM 2009) is applied per phase: the
GEMMs (weights read once, 2 x active params FLOPs per token) and the attention
kernels (every resident cache read, attention FLOPs) run one after the other, so
each phase takes the larger of its bytes / effective bandwidth and its FLOPs /
effective FLOP/s and the phases add (the per-operator roofline of Yuan et al.,
"LLM Inference Unveiled: Survey and Roofline Model Insights", 2024), the GEMMs' corner
rounded as measured GEMMs show (gemm_phase_s); then a fixed per-step overhead and the
tensor-parallel all-reduces (reduce-scatter + all-gather, the faster of a small- and a
large-message protocol: allreduce_call_s). Prefill is compute-bound and
quadratic in the prompt through its full-attention layers (AttentionFlops). Effective rates are datasheet peaks times the GPU
catalog's calibrated efficiency factors (bench/calibration.py); at tp > 1 a decode pass's memory
reads and weight GEMMs also wait for the slowest rank at every all-reduce (straggler_factor).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from planner.catalog import GPU, Dtype, Model
from planner.deployment import Deployment
from planner.memo import ObjectMemo
from planner.memory import kv_token_cap, moe_bytes_per_param, weight_bytes

ACTIVATION_BYTES = 2  # bf16 activations cross the all-reduce
# The exponent of gemm_phase_s's rounded corner: fitted to measured GEMMs, not to the end-to-end
# rows (bench/calibration.py prints the check on data/measured/vidur_linear_subset.csv). The
# evidence is A100's (rms 3.4% against 6.4% with the sharp max); on H100 the max is as good
# (2.2% against 2.3%).
GEMM_CORNER_P = 4.0


def ridge_point(gpu: GPU, compute_dtype: str) -> float:
    """Peak FLOP/s / HBM bytes/s (FLOP per byte): below it a kernel is bandwidth-bound.
    H100 SXM in bf16: 989e12 / 3.35e12 = 295 FLOP/byte (datasheet figures)."""
    return gpu.tflops(compute_dtype) * 1e12 / (gpu.hbm_bandwidth_gb_s * 1e9)


def gemm_phase_s(memory_s, compute_s):
    """Time of the weight GEMMs from their two roofline bounds: (m^p + c^p)^(1/p), p =
    GEMM_CORNER_P. A GEMM far from the ridge takes its larger bound (the roofline, Williams et al.
    2009); near it neither the weight loads nor the tensor cores run at their peak, and the
    measured time rounds the corner: vidur's profiles of the four GEMMs of a 70B layer on A100 and
    H100 (data/measured/vidur_linear_subset.csv, 1 to 8192 tokens) are fitted with an rms error of
    3.4% and 2.3% at p = 4, against 6.4% and 2.2% with the sharp max (worst row at 128 tokens on
    A100: -13% with the max, -6% at p = 4). At the ridge, p = 4 adds 19% (2^(1/4))."""
    m, c = np.asarray(memory_s, float), np.asarray(compute_s, float)
    return (m**GEMM_CORNER_P + c**GEMM_CORNER_P) ** (1.0 / GEMM_CORNER_P)


def allreduce_call_latency(latency_at_tp2: float, tp: int) -> float:
    """Fixed latency of one all-reduce over `tp` GPUs, in the unit of `latency_at_tp2`: log2(tp)
    times the latency of a call at tp 2 (StepModel.allreduce_s).

    An empirical law, fitted on the latency rows, not the count of any one algorithm's steps:
    recursive halving and doubling (Rabenseifner) has 2·log2(tp) latency stages, NCCL's ring
    2 (tp - 1), and the engines' one-shot and two-shot custom all-reduce kernels on NVSwitch one
    or two whatever tp. log2(tp) lies between flat and linear in tp; the held-out latency rows
    at tp 2, 4 and 8 (bench/calibration.py) are what it rests on."""
    return latency_at_tp2 * float(np.log2(tp)) if tp > 1 else 0.0


def bulk_latency_at_tp2_us(at_tp2_us: float | None, by_tp_us: dict[int, float] | None, tp: int) -> float | None:
    """The large-message protocol's latency at tp 2 that allreduce_call_latency scales to a call at
    `tp`: `by_tp_us[tp] / log2(tp)` where the catalog carries a measured latency at that GPU count
    (Efficiency.allreduce_bulk_latency_by_tp_us: the fixed cost of published nccl-tests curves, whose
    GPU counts need not follow the log2(tp) law: A100's 8-GPU curve costs less per call than its
    4-GPU one), `at_tp2_us` otherwise. None: one protocol."""
    if at_tp2_us is None:
        return None
    if by_tp_us and tp in by_tp_us:
        return by_tp_us[tp] / float(np.log2(tp))
    return at_tp2_us


def harmonic_number(n: int) -> float:
    """H_n = 1 + 1/2 + ... + 1/n."""
    return float(np.sum(1.0 / np.arange(1, n + 1)))


def straggler_factor(cv: float, tp: int) -> float:
    """How much longer the sharded work of a tensor-parallel pass takes than one rank's mean,
    1 + cv x (H_tp - 1): each all-reduce is a barrier, so every stretch of work between two of them
    (2 per layer) lasts as long as the slowest of the tp ranks doing its shard. With the ranks'
    times i.i.d. with mean m and an exponential tail of scale cv x m (kernel-time jitter, clock and
    power differences, launch skew), the expected maximum of tp of them exceeds the mean by
    cv x m x (H_tp - 1) (the maximum of n i.i.d. exponentials has mean H_n times their scale:
    Renyi's representation of exponential order statistics, David & Nagaraja, "Order Statistics",
    3rd ed. 2003, sec. 2.5), and the excesses add over the pass's stretches. tp 1 has no barrier
    (factor 1); H_2 - 1 = 0.5, H_4 - 1 = 1.083, H_8 - 1 = 1.718. cv is fitted on the tensor-parallel
    rows, throughput and latency (Efficiency.straggler_cv, planner.calibration.joint_fit).

    Its reach (StepModel.of) is what held-out error chose: the decode pass's memory reads and weight
    GEMMs, not prefill's FLOPs. Stretching prompts' FLOPs too left the TensorRT-LLM rows of
    Llama 3.1 405B over-predicted where decode dominates and under-predicted where prefill does on
    every GPU, and the B200's 70B tp-1 rows, held out, 30.7% off (bench/calibration.py,
    2026-12-02)."""
    return 1.0 + cv * (harmonic_number(tp) - 1.0)


# NCCL's LL protocol, the one its tuner picks for small messages, stores 4 bytes of data with a
# 4-byte flag in each 8-byte write, so it moves data at no more than half the link rate (25-50% of
# peak), against near peak for the Simple protocol it switches to for large messages (Hu, Shen,
# Bonato et al., "Demystifying NCCL", arXiv:2507.04786, 2025: LL ~1 us per hop, Simple ~6 us).
# The upper end of that range: the latency rows cannot see it, their messages are small.
SMALL_MESSAGE_BANDWIDTH_SHARE = 0.5


def allreduce_call_s(ring_s, latency_s: float, bulk_latency_s: float | None, tp: int):
    """Time of one all-reduce whose reduce-scatter + all-gather bytes take `ring_s` at the link's
    effective rate: the faster of two protocols, as NCCL's tuner picks per message size (the
    lowest latency + bytes / bandwidth over its algorithms and protocols: ncclTopoGetAlgoTime in
    NCCL's src/graph/tuning.cc; Hu et al., arXiv:2507.04786):
        small messages: allreduce_call_latency(latency_s) + ring_s / SMALL_MESSAGE_BANDWIDTH_SHARE
        large messages: allreduce_call_latency(bulk_latency_s) + ring_s
    The small-message latency is what the latency rows (decode-sized messages) fit; the larger
    fixed cost of the bandwidth protocol shows only on the throughput rows, whose batches send
    messages of megabytes. bulk_latency_s None: one protocol, latency_s + ring_s."""
    ring = np.asarray(ring_s, float)
    if bulk_latency_s is None:
        return allreduce_call_latency(latency_s, tp) + ring
    small = allreduce_call_latency(latency_s, tp) + ring / SMALL_MESSAGE_BANDWIDTH_SHARE
    return np.minimum(small, allreduce_call_latency(bulk_latency_s, tp) + ring)


def attention_flops_per_pair_per_layer(model: Model) -> float:
    """Decode's attention FLOPs of one layer per (query token, key token) pair it attends over.

    GQA/MHA: q·K and p·V, each 2 x head_dim FLOPs per query head per key token:
    4 x heads x head_dim. Latent attention with absorbed projections (DeepSeek-V2 sec. 2.1.2-2.1.3):
    scores over the latent+rope width and output over the latent: 2 x heads x (2 x kv_lora_rank
    + qk_rope_head_dim); DeepSeek-V3: 2 x 128 x (1,024 + 64) = 278,528.
    """
    if model.kv_lora_rank:
        return float(2 * model.num_attention_heads * (2 * model.kv_lora_rank + (model.qk_rope_head_dim or 0)))
    return float(4 * model.num_attention_heads * model.head_dim)


def prefill_attention_flops_per_pair_per_layer(model: Model) -> float:
    """Prefill's attention FLOPs of one layer per (query token, key token) pair.

    GQA/MHA: decode's (attention_flops_per_pair_per_layer). Latent attention prefills without
    absorbing: the latent is decompressed into keys of head_dim (qk_nope_head_dim +
    qk_rope_head_dim) and values of v_head_dim per head, and attended over as multi-head
    attention, the compute-friendly way, where decode takes the data-movement-friendly absorbed
    one (vLLM vllm/v1/attention/backends/mla/common.py, its module docstring; DeepSeek-V2 sec.
    2.1.2-2.1.3): 2 x heads x (head_dim + v_head_dim); DeepSeek-V3: 2 x 128 x (192 + 128) = 81,920,
    against the absorbed form's 278,528 (3.4 times as many). Not counted: decompressing the latents
    of the tokens before a chunk, again for each chunk (2 x kv_lora_rank x heads x (qk_nope_head_dim
    + v_head_dim) FLOPs a token; DeepSeek-V3: about 410 / chunk tokens of the pairs' FLOPs: 5% for
    chunks of 8,192, the budget the default vLLM profile gives GPUs of 70 GiB and more, the only
    ones these models fit on in numbers a replica holds; 2.5% for 16,384; 20% for 2,048)."""
    if model.kv_lora_rank:
        return float(2 * model.num_attention_heads * (model.head_dim + model.v_head_dim))
    return attention_flops_per_pair_per_layer(model)


@dataclass(frozen=True)
class AttentionFlops:
    """A model's attention FLOPs per (query, key) pair, all layers, by how far back its layers look
    (attention_flops): a full layer attends to every earlier token, a capped one to the last
    `window_tokens` only, so its work stops growing with the context past the window.

    full_per_pair: full and latent attention layers, and those that read another layer's cache
    (Gemma 3n's shared layers, counted as full: an upper bound). capped_per_pair: sliding-window
    layers (Mistral v0.1, Gemma 2/3, gpt-oss) and chunked-attention layers (Llama 4), these charged
    as a window of their chunk (a token attends within its chunk, at most that many tokens and half
    as many on average: the upper bound the cache is charged with, planner.memory._layer_kinds).
    Linear-attention and state-space layers (Qwen3-Next's Gated DeltaNet, Mamba) do work a token
    that no context length changes (their projections are in 2 x active params; the state update,
    about 1% of Qwen3-Next's FLOPs a token, is not counted), and blocks without attention none:
    neither is here. prefill_full_per_pair: the full layers' pair in prefill where it is not
    decode's: latent attention decodes absorbed and prefills decompressed
    (prefill_attention_flops_per_pair_per_layer); capped layers take one pair in both (no model
    has latent attention in windowed layers: the catalog refuses one)."""

    full_per_pair: float
    capped_per_pair: float = 0.0
    window_tokens: int = 0
    prefill_full_per_pair: float | None = None  # full layers' pair in prefill, where not decode's (latent attention)

    def __post_init__(self):
        if self.capped_per_pair and self.window_tokens <= 0:  # capped layers would cost nothing
            raise ValueError(f"capped attention layers need a positive window, not {self.window_tokens}")

    @property
    def prefill_per_pair(self) -> float:
        """The full layers' FLOPs a (query, key) pair in prefill (span, prompt): decode's
        full_per_pair unless prefill_full_per_pair says otherwise (latent attention)."""
        return self.full_per_pair if self.prefill_full_per_pair is None else self.prefill_full_per_pair

    def decode(self, batch, context_tokens):
        """FLOPs of one decode step's attention, `batch` sequences holding `context_tokens` in all
        (a new token per sequence, against its cached ones). A capped layer reads min(c, W) of a
        sequence's c tokens; from the total alone it is charged min(Σc, batch x W), which is never
        less than Σ min(c, W) (min(·, W) is concave)."""
        full = self.full_per_pair * np.asarray(context_tokens, float)
        if not self.capped_per_pair:
            return full
        held = np.minimum(np.asarray(context_tokens, float), np.asarray(batch, float) * self.window_tokens)
        return full + self.capped_per_pair * held

    def decode_one(self, batch: float, context_tokens: float) -> float:
        """decode of one step in Python floats (StepModel.decode_step_one_s): the same operations."""
        full = self.full_per_pair * context_tokens
        if not self.capped_per_pair:
            return full
        return full + self.capped_per_pair * min(context_tokens, batch * self.window_tokens)

    def span(self, start, end):
        """FLOPs of prefilling prompt positions [start, end), each attending causally to the tokens
        before it: a full layer's pairs are the lower triangle's (end² - start²) / 2 (causal_pairs),
        a capped layer's G(end) - G(start), G(x) = x² / 2 up to the window W and W·x - W² / 2 past it
        (Σ min(i, W) over the positions, taken as continuous as the triangle is)."""
        start, end = np.asarray(start, float), np.asarray(end, float)
        full = self.prefill_per_pair * (end * end - start * start) / 2.0
        if not self.capped_per_pair:
            return full
        return full + self.capped_per_pair * (self._capped_pairs(end) - self._capped_pairs(start))

    def prompt(self, prompt_tokens, prompt_tokens_sq, cached_prefix_tokens: int = 0):
        """span over a whole prompt after a cached prefix of S tokens, from E[p] and E[p²] (a
        histogram cell's means) or one prompt's p and p²: the full layers' causal_pairs(E[p²], S)
        is exact; a capped layer's E[G(p)] is E[p²] / 2 where E[p] <= W and W·E[p] - W² / 2 past it,
        exact for a cell wholly on one side of W (quarter-octave cells, whose edges include the
        powers of two windows are: 128, 512, 1,024, 4,096, 8,192), not for prompts on both sides
        (the first too high, the second too low): a class's mean is taken over its cells
        (capacity.mean_prefill_s)."""
        full = self.prefill_per_pair * causal_pairs(prompt_tokens_sq, cached_prefix_tokens)
        if not self.capped_per_pair:
            return full
        p, p2 = np.asarray(prompt_tokens, float), np.asarray(prompt_tokens_sq, float)
        w, s = float(self.window_tokens), float(cached_prefix_tokens)
        pairs = np.where(p <= w, p2 / 2.0, w * p - w * w / 2.0) - self._capped_pairs(s)
        return full + self.capped_per_pair * np.maximum(pairs, 0.0)

    def _capped_pairs(self, x):
        w = float(self.window_tokens)
        return np.where(x <= w, x * x / 2.0, w * x - w * w / 2.0)


def attention_flops(model: Model) -> AttentionFlops:
    """The model's AttentionFlops: attention_flops_per_pair_per_layer times its layers of each reach
    (the layer kinds of planner.memory._layer_kinds, whose cache holds what these layers read), and
    prefill's pair where it differs (prefill_attention_flops_per_pair_per_layer: latent attention)."""
    per_layer = attention_flops_per_pair_per_layer(model)
    capped = model.num_sliding_window_layers + model.num_chunked_attention_layers
    full = model.num_hidden_layers - capped - model.num_state_layers - model.num_cacheless_layers
    prefill = prefill_attention_flops_per_pair_per_layer(model)
    return AttentionFlops(per_layer * full, per_layer * capped, (kv_token_cap(model) or 0) if capped else 0,
                          None if prefill == per_layer else prefill * full)


def moe_weight_bytes_read(model: Model, weight_bytes_total: float, batch: np.ndarray,
                          bytes_per_param: tuple[float, float] | None = None) -> np.ndarray:
    """Weight bytes one decode step reads for `batch` sequences.

    Dense models read all weights. A mixture of experts reads the shared part plus
    the experts its tokens route to; with k of E experts chosen per token, uniformly,
    b tokens touch E x (1 - (1 - k/E)^b) distinct experts per layer in expectation.
    Per-expert and shared parameter counts follow from the catalog's totals:
    total = shared + E x e, active = shared + k x e. bytes_per_param: (a shared parameter's,
    an expert's), memory.moe_bytes_per_param [default: the weights' mean for both].
    """
    batch = np.asarray(batch, dtype=float)
    split = model.expert_split
    if split is None:
        return np.full_like(batch, weight_bytes_total)
    shared, per_expert = split
    n_exp, k = model.num_experts, model.num_experts_per_tok
    touched = n_exp * (1.0 - (1.0 - k / n_exp) ** np.maximum(batch, 1.0))
    shared_b, expert_b = bytes_per_param or (weight_bytes_total / model.params_total,) * 2
    return shared * shared_b + touched * per_expert * expert_b


def new_prompt_tokens(prompt_tokens, cached_prefix_tokens: int = 0) -> np.ndarray:
    """Prompt tokens prefill computes: max(p - S, 0), the first S coming from the prefix cache."""
    return np.maximum(np.asarray(prompt_tokens, float) - float(cached_prefix_tokens), 0.0)


def causal_pairs(prompt_tokens_sq, cached_prefix_tokens: int = 0) -> np.ndarray:
    """(query, key) pairs causal prefill attends over: the lower triangle, (p² - S²) / 2 for a
    prompt of p tokens whose first S come from the prefix cache: what a full attention layer
    computes (AttentionFlops.prompt, whose prefill_per_pair is the FLOPs of one pair, q·K and p·V)."""
    s = float(cached_prefix_tokens)
    return np.maximum(np.asarray(prompt_tokens_sq, float) - s * s, 0.0) / 2.0


@dataclass(frozen=True)
class DecodeWork:
    """Bytes and FLOPs of one decode step, per phase (StepModel.decode_work)."""

    weight_bytes: np.ndarray  # GEMM phase: weights read (the experts touched, for a MoE)
    gemm_flops: np.ndarray
    cache_bytes: np.ndarray  # attention phase: every resident cache read
    attn_flops: np.ndarray


@dataclass(frozen=True)
class StepModel:
    """Effective rates of one replica (tp GPUs), in SI units: bytes/s, FLOP/s, seconds."""

    # all tp GPUs, after efficiency and the ranks' wait for the slowest (straggler_factor)
    bandwidth_bytes_s: float
    # all tp GPUs, compute dtype of the weights, after efficiency: prefill's and attention's rate
    flops_s: float
    step_overhead_s: float
    layer_overhead_s: float  # per layer per forward pass
    weight_bytes: float
    params_active: float
    attention: AttentionFlops
    tp: int
    hidden_size: int
    num_layers: int
    interconnect_bytes_s: float  # per GPU, one direction, after efficiency
    allreduce_latency_s: float
    model: Model
    # of the large-message protocol (allreduce_call_s), at tp 2: bulk_latency_at_tp2_us
    allreduce_bulk_latency_s: float | None = None
    straggler: float = 1.0  # straggler_factor at this tp: the decode pass's weight GEMMs run at flops_s / it
    # a mixture of experts': (bytes of a shared parameter, of an expert's), memory.moe_bytes_per_param
    moe_bytes_per_param: tuple[float, float] | None = None

    @classmethod
    def of(cls, dep: Deployment) -> StepModel:
        """_step_model of the deployment's GPU, weight dtype, model and tp, remembered (planner.memo):
        every KV dtype, context limit and class of a config shares it, and its constants."""
        return _STEP_MODELS((dep.gpu, dep.weight_dtype, dep.model), (dep.tp,))

    @property
    def gemm_flops_s(self) -> float:
        """FLOP/s of a decode pass's weight GEMMs: flops_s stretched by the wait for the slowest rank."""
        return self.flops_s / self.straggler

    def allreduce_s(self, tokens: np.ndarray | float, *, with_latency: bool = True) -> np.ndarray | float:
        """Two all-reduces per layer (after attention and after the MLP, Megatron-LM tensor
        parallelism) of a pass over `tokens`, each allreduce_call_s: the faster of a small-message
        protocol (the fixed latency allreduce_call_latency of `Efficiency.allreduce_latency_us`,
        the bytes at SMALL_MESSAGE_BANDWIDTH_SHARE of the link) and, when the GPU has one
        (`Efficiency.allreduce_bulk_latency_us`), a large-message one (its own fixed latency, the
        bytes at the link's full effective rate). The bytes are 2 (tp-1)/tp x message, the
        bandwidth term of reduce-scatter + all-gather (Thakur, Rabenseifner & Gropp, "Optimization
        of Collective Communication Operations in MPICH", IJHPCA 2005), over the datasheet
        per-GPU rate its group drives (GPU.scale_up_gb_s) times the calibrated `Efficiency.interconnect`.
        `with_latency=False` gives what extra tokens add to a pass that already carries a
        prompt chunk (prefill_s): its messages are large, so their bytes go at the large-message
        protocol's rate, linear in tokens. Zero at tp = 1."""
        if self.tp == 1:
            return np.zeros_like(np.asarray(tokens, dtype=float)) if np.ndim(tokens) else 0.0
        message = np.asarray(tokens, dtype=float) * self.hidden_size * ACTIVATION_BYTES
        ring = 2 * (self.tp - 1) / self.tp * message / self.interconnect_bytes_s
        if not with_latency:
            return 2 * self.num_layers * ring
        call = allreduce_call_s(ring, self.allreduce_latency_s, self.allreduce_bulk_latency_s, self.tp)
        return 2 * self.num_layers * call

    def decode_work(self, batch, cache_bytes, context_tokens) -> DecodeWork:
        """Bytes and FLOPs of one decode step, per phase (see decode_step_s):
            GEMMs:     weight bytes read (moe_weight_bytes_read), 2 x active params x batch FLOPs
            attention: the resident caches' bytes, AttentionFlops.decode of the batch's context.

        batch: sequences decoding; cache_bytes: their cache in total; context_tokens:
        their cached tokens in total (for attention FLOPs)."""
        batch = np.asarray(batch, dtype=float)
        return DecodeWork(
            weight_bytes=moe_weight_bytes_read(self.model, self.weight_bytes, batch, self.moe_bytes_per_param),
            gemm_flops=2.0 * self.params_active * batch,
            cache_bytes=np.asarray(cache_bytes, float),
            attn_flops=self.attention.decode(batch, context_tokens),
        )

    def decode_parts_s(self, batch, cache_bytes, context_tokens) -> tuple[np.ndarray, np.ndarray]:
        """(memory time, compute time) of one decode step in total, before overhead and
        all-reduce: which resource dominates the step. decode_step_s applies the roofline
        to each phase separately."""
        w = self.decode_work(batch, cache_bytes, context_tokens)
        return (w.weight_bytes + w.cache_bytes) / self.bandwidth_bytes_s, w.gemm_flops / self.gemm_flops_s + w.attn_flops / self.flops_s

    def decode_step_s(self, batch, cache_bytes, context_tokens) -> np.ndarray:
        """One forward pass, seconds:
            GEMMs     = gemm_phase_s(weight bytes read / bandwidth, 2 x active params x batch / gemm_flops_s)
            attention = max(cache bytes / bandwidth, attention FLOPs / FLOP/s)
            fixed     = step overhead + layers x layer overhead
            + all-reduces (allreduce_s).
        The phases are separate kernels that run in sequence, so the cache read cannot
        hide under the GEMMs' FLOPs; one max over summed bytes and FLOPs would assume it
        can, and overstates throughput once a large batch makes the GEMMs compute-bound.
        The fixed part is the classic "latency + bytes /
        bandwidth" cost of a kernel (Hockney's model, as in LogP/roofline practice) summed
        over a pass: a per-step cost (scheduler, sampling, launch of the graph) and one per
        layer (the gaps and ramp-up/tail of each layer's dozen kernels), which is why a
        deeper model pays more at the same bytes."""
        return self._pass_s(self.decode_work(batch, cache_bytes, context_tokens), batch)

    def _pass_s(self, w: DecodeWork, tokens) -> np.ndarray:
        """decode_step_s of a pass's bytes and FLOPs, `tokens` crossing its all-reduces."""
        gemm = gemm_phase_s(w.weight_bytes / self.bandwidth_bytes_s, w.gemm_flops / self.gemm_flops_s)
        attn = np.maximum(w.cache_bytes / self.bandwidth_bytes_s, w.attn_flops / self.flops_s)
        fixed = self.step_overhead_s + self.num_layers * self.layer_overhead_s
        return gemm + attn + fixed + self.allreduce_s(np.asarray(tokens, dtype=float))

    def decode_step_one_s(self, batch: float, cache_bytes: float, context_tokens: float) -> float:
        """decode_step_s of one batch, in Python floats: the same operations in the same order (so the
        same float; tests/test_roofline_scalar.py checks it bit for bit), without numpy's cost per
        call on 0-d values. A capacity search asks one batch at a time, thousands of times."""
        moe, fixed, gemm_flops_s, ring_per_token, small_latency_s, bulk_latency_s = self._one_batch_constants
        if moe is None:
            weight = self.weight_bytes
        else:  # moe_weight_bytes_read
            n_exp, miss_one, per_expert, shared, shared_b, expert_b = moe
            weight = shared * shared_b + n_exp * (1.0 - miss_one ** max(batch, 1.0)) * per_expert * expert_b
        gemm = float(gemm_phase_s(weight / self.bandwidth_bytes_s, 2.0 * self.params_active * batch / gemm_flops_s))
        attn = max(cache_bytes / self.bandwidth_bytes_s, self.attention.decode_one(batch, context_tokens) / self.flops_s)
        if self.tp == 1:
            return gemm + attn + fixed + 0.0
        ring = ring_per_token * (batch * self.hidden_size * ACTIVATION_BYTES) / self.interconnect_bytes_s
        if bulk_latency_s is None:  # allreduce_call_s
            call = small_latency_s + ring
        else:
            call = min(small_latency_s + ring / SMALL_MESSAGE_BANDWIDTH_SHARE, bulk_latency_s + ring)
        return gemm + attn + fixed + 2 * self.num_layers * call

    @cached_property
    def _one_batch_constants(self) -> tuple:
        """What decode_step_one_s takes of the model and the replica at every batch."""
        m = self.model
        moe = None
        if m.expert_split is not None:
            shared, per_expert = m.expert_split
            moe = (m.num_experts, 1.0 - m.num_experts_per_tok / m.num_experts, per_expert, shared,
                   *(self.moe_bytes_per_param or (self.weight_bytes / m.params_total,) * 2))
        bulk = self.allreduce_bulk_latency_s
        return (moe, self.step_overhead_s + self.num_layers * self.layer_overhead_s, self.gemm_flops_s,
                2 * (self.tp - 1) / self.tp, allreduce_call_latency(self.allreduce_latency_s, self.tp),
                None if bulk is None else allreduce_call_latency(bulk, self.tp))

    def prefill_flops(self, prompt_tokens, prompt_tokens_sq, cached_prefix_tokens: int = 0):
        """2 x active params per new token, plus causal attention (AttentionFlops.prompt) for a
        prompt of p tokens whose first S come from the prefix cache. Takes E[p] and E[p²] (or one
        prompt's p and p²): a class's mean is exact without capped layers, a histogram cell's with
        them (capacity.mean_prefill_s)."""
        new_tokens = new_prompt_tokens(prompt_tokens, cached_prefix_tokens)
        return 2.0 * self.params_active * new_tokens + self.attention.prompt(prompt_tokens, prompt_tokens_sq,
                                                                             cached_prefix_tokens)

    def prefill_s(self, prompt_tokens, prompt_tokens_sq=None, cached_prefix_tokens: int = 0):
        """Prefill time: compute-bound FLOPs / effective FLOP/s plus the all-reduce bytes
        of its new tokens (not overlapped with compute: conservative). Weights are not
        re-read per prompt, nor is the all-reduces' fixed latency paid per prompt: with
        chunked prefill the chunk rides in a decode step that reads the weights and pays
        the per-pass latency anyway (decode_step_s)."""
        p = np.asarray(prompt_tokens, float)
        p2 = p * p if prompt_tokens_sq is None else np.asarray(prompt_tokens_sq, float)
        return self.prefill_flops(p, p2, cached_prefix_tokens) / self.flops_s + self.allreduce_s(
            new_prompt_tokens(p, cached_prefix_tokens), with_latency=False
        )

    def prompt_pass_s(self, batch, prompt_tokens):
        """A stand-alone forward pass over `batch` prompts of `prompt_tokens` each (a static batch's
        prefill): decode_step_s's phases over batch x prompt_tokens tokens, no cache read, each prompt's
        causal attention (AttentionFlops.span from 0), its weight GEMMs at the unstretched flops_s:
        prompts' FLOPs do not wait for the slowest rank (straggler_factor)."""
        tokens = np.asarray(batch, float) * np.asarray(prompt_tokens, float)
        plain = replace(self, straggler=1.0)
        w = plain.decode_work(tokens, 0.0, 0.0)
        w = replace(w, attn_flops=np.asarray(batch, float) * self.attention.span(0.0, prompt_tokens))
        return plain._pass_s(w, tokens)

    def ridge_batch(self) -> float:
        """Sequences per decode step at which the weight GEMMs turn compute-bound: reading the
        weights takes as long as 2 x active params FLOPs per sequence, b* = (W / BW) / (2A / F).

        Below b* more sequences ride the same weight read almost free; past it each one adds
        its own compute time, so per-token latency rises instead of throughput (seed 000's
        "second ceiling"). For a dense bf16 model it is the ridge point x bytes per param / 2,
        at effective rates. A mixture of experts reads only the experts its batch touches, so
        its b* is larger; this uses the all-experts read, a lower bound."""
        return (self.weight_bytes / self.bandwidth_bytes_s) / (2.0 * self.params_active / self.gemm_flops_s)


def _step_model(gpu: GPU, weight_dtype: Dtype, model: Model, tp: int) -> StepModel:
    """The rates of a replica: datasheet peaks x tp x the GPU's efficiency factors. The ranks' wait
    for the slowest at every all-reduce (straggler_factor) divides the bandwidth and the decode
    GEMMs' FLOP/s (gemm_flops_s): a decode pass's weight GEMMs and cache reads take that factor
    longer; prefill's FLOPs, the fixed costs and the all-reduces do not change."""
    eff = gpu.efficiency
    straggler = straggler_factor(eff.straggler_cv, tp)
    bulk_us = bulk_latency_at_tp2_us(eff.allreduce_bulk_latency_us, eff.allreduce_bulk_latency_by_tp_us, tp)
    return StepModel(
        bandwidth_bytes_s=tp * gpu.hbm_bandwidth_gb_s * 1e9 * eff.bandwidth / straggler,
        flops_s=tp * gpu.tflops(weight_dtype.compute_dtype) * 1e12 * eff.compute,
        step_overhead_s=eff.step_overhead_ms / 1e3,
        layer_overhead_s=eff.layer_overhead_us / 1e6,
        weight_bytes=float(weight_bytes(model, weight_dtype)),
        params_active=float(model.params_active),
        attention=attention_flops(model),
        tp=tp,
        hidden_size=model.hidden_size,
        num_layers=model.num_hidden_layers,
        interconnect_bytes_s=gpu.scale_up_gb_s(tp) * 1e9 * eff.interconnect,
        allreduce_latency_s=eff.allreduce_latency_us / 1e6,
        model=model,
        allreduce_bulk_latency_s=None if bulk_us is None else bulk_us / 1e6,
        straggler=straggler,
        moe_bytes_per_param=moe_bytes_per_param(model, weight_dtype, weight_bytes(model, weight_dtype)),
    )


_STEP_MODELS: ObjectMemo[StepModel] = ObjectMemo(_step_model)
