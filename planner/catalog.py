"""Catalogs of GPUs, models, dtypes and serving engines, loaded from `data/*.yaml`.

The catalogs are data, not code: every number carries a source in its YAML entry.
They ship inside the wheel (as `planner/data`) and are found from a checkout too.
A scenario or `--catalog FILE` can add entries or override fields of existing ones.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.bounds import (
    MAX_BLOCK_TOKENS,
    MAX_GPU_MEMORY_GIB,
    MAX_LATENCY_MS,
    MAX_TOKENS,
    MAX_TP,
    MAX_WIDTH,
    BandwidthGBs,
    BitsPerElement,
    EfficiencyShare,
    Fraction,
    Label,
    Layers,
    Params,
    PositiveTokens,
    PriceUsdPerGpuHour,
    Tflops,
    Width,
    real,
    whole,
)
from planner.errors import InputError, did_you_mean
from planner.yamlio import load_yaml, validate


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Dtype(_Frozen):
    """A number format for weights or KV cache (data/dtypes.yaml)."""

    id: Label
    bits_per_element: BitsPerElement = Field(description="storage bits per element, scale overhead included")
    compute_dtype: str = Field(description="dtype whose tensor-core rate a matmul with these weights runs at")
    weight: bool = True
    kv: bool = False
    needs_native: str | None = Field(None, description="GPU feature required (fp8, fp4) or None")
    description: str = ""

    @property
    def bytes_per_element(self) -> float:
        return self.bits_per_element / 8


class Efficiency(_Frozen):
    """Achievable fractions of datasheet peaks, calibrated on published measurements."""

    bandwidth: EfficiencyShare = Field(description="achieved / datasheet HBM bandwidth on decode")
    compute: EfficiencyShare = Field(description="achieved / datasheet dense FLOP/s on prefill GEMMs")
    step_overhead_ms: real(ge=0, le=MAX_LATENCY_MS) = Field(description="fixed per decode step: launches, sampling, scheduler")
    allreduce_latency_us: real(ge=0, le=MAX_LATENCY_MS * 1000) = Field(
        10.0, description="fixed latency of one all-reduce at tp 2 (an override means the latency at tp 2); log2(tp) times it at larger tp (roofline.allreduce_call_latency)"
    )
    interconnect: EfficiencyShare = Field(
        1.0, description="achieved / datasheet per-GPU link bandwidth in tensor-parallel all-reduces"
    )
    allreduce_bulk_latency_us: real(ge=0, le=MAX_LATENCY_MS * 1000) | None = Field(
        None,
        description="fixed latency at tp 2 of the large-message all-reduce protocol, which moves bytes at the full "
        "interconnect rate (roofline.allreduce_call_s), at GPU counts allreduce_bulk_latency_by_tp_us lacks; None: one "
        "protocol, allreduce_latency_us",
    )
    allreduce_bulk_latency_by_tp_us: dict[whole(ge=2, le=MAX_TP), real(ge=0, le=MAX_LATENCY_MS * 1000)] | None = Field(
        None,
        description="fixed latency of one large-message all-reduce call at the GPU counts a published nccl-tests "
        "curve measures (roofline.bulk_latency_at_tp2_us); other counts: allreduce_bulk_latency_us x log2(tp)",
    )
    layer_overhead_us: real(ge=0, le=MAX_LATENCY_MS * 1000) = Field(
        0.0, description="fixed per layer per forward pass: kernel launch gaps, ramp-up and tail of its kernels"
    )
    straggler_cv: real(ge=0, le=10) = Field(
        0.0,
        description="coefficient of variation of the tp ranks' time between two all-reduces: every all-reduce waits "
        "for the slowest rank, so a decode pass's memory reads and weight GEMMs take 1 + straggler_cv x (H_tp - 1) "
        "times as long (roofline.straggler_factor; prompts' FLOPs are not stretched); no effect at tp 1",
    )
    source: str
    borrowed_from: str | None = Field(
        None, description="GPU whose fitted factors these are, when this GPU has no measurements (UNVERIFIED)"
    )
    borrowed_check: str | None = Field(
        None, description="with borrowed_from: what these factors predict of this GPU's own published latencies, "
        "when it has some (they are fitted on by nothing): a plan that uses it repeats it"
    )


class GPU(_Frozen):
    """One accelerator type (data/gpus.yaml)."""

    id: Label
    name: str
    vendor: str
    arch: str
    memory_gib: real(gt=0, le=MAX_GPU_MEMORY_GIB) = Field(description="capacity the runtime reports (nvidia-smi MiB / 1024)")
    memory_source: str
    hbm_bandwidth_gb_s: BandwidthGBs = Field(description="datasheet HBM bandwidth, GB/s (10^9)")
    dense_tflops: dict[str, Tflops] = Field(description="dense (no sparsity) tensor TFLOP/s per compute dtype")
    weight_dtypes: list[str] = Field(min_length=1, description="dtypes it serves weights in")
    kv_dtypes: list[str] = Field(min_length=1, description="dtypes it holds the KV cache in")
    gpus_per_node: whole(ge=1, le=MAX_TP)
    interconnect: str
    interconnect_gb_s: BandwidthGBs = Field(description="per-GPU scale-up bandwidth, one direction, GB/s")
    interconnect_link_gb_s: BandwidthGBs | None = Field(
        None, description="where a node's GPUs connect directly, one link to each peer and no switch (AMD's xGMI "
        "mesh): one link's rate, one direction, GB/s; a tensor-parallel group drives only the links among its own GPUs "
        "[default: none; a switch gives every GPU interconnect_gb_s whatever its group]")
    price_usd_per_hour: PriceUsdPerGpuHour = Field(description="on-demand price per GPU-hour")
    price_source: str
    price_date: str
    spec_source: str
    efficiency: Efficiency
    notes: str = ""

    @property
    def verified(self) -> bool:
        """False when the efficiency factors are borrowed from another GPU (no measurements of this one)."""
        return self.efficiency.borrowed_from is None

    def scale_up_gb_s(self, tp: int) -> float:
        """The scale-up bandwidth one GPU of a tensor-parallel group of `tp` drives, one direction:
        interconnect_gb_s behind a switch (NVSwitch gives every GPU its full rate to any peer); on a
        mesh, its links to the group's other tp - 1 GPUs (an 8-GPU MI300X board joins each pair by
        one xGMI link of 128 GB/s both ways, seven a GPU, no switch: Wheeler's Network, "AMD Looks to
        Infinity for AI Interconnects", 2024-01). A two-shot all-reduce over such a group sends each
        GPU's share on all its links at once, and takes 2 (tp - 1) / tp x message / this, the ring's
        time at this rate (roofline.StepModel.allreduce_s)."""
        if self.interconnect_link_gb_s is None or tp <= 1:  # (at tp 1 nothing crosses a link)
            return self.interconnect_gb_s
        return min(self.interconnect_gb_s, (tp - 1) * self.interconnect_link_gb_s)

    def tflops(self, compute_dtype: str) -> float:
        try:
            return self.dense_tflops[compute_dtype]
        except KeyError:
            raise InputError(
                f"GPU '{self.id}' has no dense {compute_dtype} rate in the catalog "
                f"(has: {', '.join(sorted(self.dense_tflops))})"
            ) from None


def grouped_heads_problem(kv_heads: int, heads: int) -> str | None:
    """Why `kv_heads` key/value heads cannot serve `heads` query heads, or None."""
    if kv_heads <= heads and not heads % kv_heads:
        return None
    return (f"must divide num_attention_heads {heads}: the query heads share the key/value heads in equal groups "
            "(grouped-query attention, arXiv 2305.13245; one each in multi-head and latent attention)")


class Model(_Frozen):
    """One model's architecture, as in its published config.json, plus parameter counts."""

    id: Label
    hf_id: str
    architecture: str
    num_hidden_layers: Layers
    hidden_size: Width
    num_attention_heads: Width
    num_key_value_heads: Width
    head_dim: Width
    intermediate_size: Width
    vocab_size: Width
    max_position_embeddings: PositiveTokens
    sliding_window: PositiveTokens | None = None
    num_sliding_window_layers: whole(ge=0, le=MAX_WIDTH) = Field(0, description="layers whose cache is capped at sliding_window")
    attention_chunk_size: PositiveTokens | None = Field(None, description="chunked local attention (Llama 4): tokens a chunk holds")
    num_chunked_attention_layers: whole(ge=0, le=MAX_WIDTH) = Field(0, description="layers whose cache is capped at attention_chunk_size")
    num_kv_shared_layers: whole(ge=0, le=MAX_WIDTH) = Field(0, description="layers that reuse an earlier layer's cache and store none")
    num_state_layers: whole(ge=0, le=MAX_WIDTH) = Field(0, description="linear-attention or state-space layers: a fixed state per sequence")
    state_layer_kind: Literal["linear_attention", "mamba"] | None = Field(None, description="what the state layers are")
    state_bytes_per_layer: Params | None = Field(
        None, description="one state layer's recurrent + convolution state for one sequence, bytes (all tp ranks)"
    )
    num_cacheless_layers: whole(ge=0, le=MAX_WIDTH) = Field(0, description="blocks with neither attention nor state (MLP-only blocks)")
    kv_lora_rank: Width | None = Field(None, description="latent attention (MLA) compressed KV width")
    qk_rope_head_dim: whole(ge=0, le=MAX_WIDTH) | None = Field(None, description="MLA decoupled RoPE key width, cached too")
    v_head_dim: Width | None = Field(
        None, description="MLA value head width: prefill attends over values decompressed from the latent to this width"
    )
    num_experts: Width | None = None
    num_experts_per_tok: Width | None = None
    moe_intermediate_size: Width | None = None
    params_total: Params = Field(description="all parameters (memory)")
    params_active: Params = Field(description="parameters used per token (compute; MoE < total)")
    checkpoint_dtype: str | None = Field(None, description="dtype of the published weights when pre-quantized (the default weight dtype)")
    checkpoint_weight_bytes: Params | None = Field(
        None, description="bytes of the published weights, read from their safetensors files (used for checkpoint_dtype)"
    )
    config_source: str
    params_source: str = ""
    notes: str = ""

    @property
    def attention(self) -> Literal["mla", "gqa"]:
        return "mla" if self.kv_lora_rank else "gqa"

    @property
    def expert_split(self) -> tuple[float, float] | None:
        """(shared parameters, parameters of one routed expert) of a mixture of experts, from the
        totals: total = shared + E x e, active = shared + k x e, k of E experts a token; None for a
        dense model (or one whose every parameter is active)."""
        if not self.num_experts or not self.num_experts_per_tok or self.params_active >= self.params_total:
            return None
        per_expert = (self.params_total - self.params_active) / (self.num_experts - self.num_experts_per_tok)
        return self.params_total - self.num_experts * per_expert, per_expert

    @model_validator(mode="after")
    def _consistent(self) -> Model:
        special = (
            self.num_sliding_window_layers + self.num_chunked_attention_layers + self.num_kv_shared_layers
            + self.num_state_layers + self.num_cacheless_layers
        )
        if special > self.num_hidden_layers:
            raise ValueError(
                "num_sliding_window_layers + num_chunked_attention_layers + num_kv_shared_layers + num_state_layers "
                f"+ num_cacheless_layers = {special} exceeds num_hidden_layers {self.num_hidden_layers}"
            )
        # Layers that store a cache of their own: full, sliding-window and chunked attention.
        caching = self.num_hidden_layers - self.num_kv_shared_layers - self.num_state_layers - self.num_cacheless_layers
        if self.num_kv_shared_layers and not caching:
            raise ValueError(
                f"num_kv_shared_layers {self.num_kv_shared_layers}: kv_shared layers read the cache of an earlier "
                f"attention layer, and none of the {self.num_hidden_layers} layers stores one (all are kv_shared, "
                "state or no_cache layers)"
            )
        if not caching and not self.num_state_layers:
            raise ValueError(
                f"num_cacheless_layers {self.num_cacheless_layers}: no layer holds a cache or a state, so a sequence "
                "would take no memory; planner plans for models whose attention or state layers hold one"
            )
        # Every layer holds at least one hidden x hidden matrix (attention's output projection, a
        # state-space layer's out_proj); real models have 10x to 300x this (data/models.yaml).
        floor = self.num_hidden_layers * self.hidden_size**2
        for name in ("params_active", "params_total"):
            if getattr(self, name) < floor:
                raise ValueError(
                    f"{name} {getattr(self, name):,} is below num_hidden_layers x hidden_size^2 = {floor:,}: each of "
                    "the layers holds at least one hidden x hidden projection; check the parameter counts"
                )
        problem = grouped_heads_problem(self.num_key_value_heads, self.num_attention_heads)
        if problem:
            raise ValueError(f"num_key_value_heads {self.num_key_value_heads} {problem}")
        if self.num_sliding_window_layers and not self.sliding_window:
            raise ValueError("num_sliding_window_layers given without sliding_window")
        if self.num_chunked_attention_layers and not self.attention_chunk_size:
            raise ValueError("num_chunked_attention_layers given without attention_chunk_size")
        if self.num_sliding_window_layers and self.num_chunked_attention_layers:
            raise ValueError("sliding-window and chunked layers in one model are not modelled (one token cap per model)")
        if bool(self.num_state_layers) != bool(self.state_bytes_per_layer and self.state_layer_kind):
            raise ValueError("num_state_layers, state_layer_kind and state_bytes_per_layer go together")
        if self.checkpoint_weight_bytes and not self.checkpoint_dtype:
            raise ValueError("checkpoint_weight_bytes needs checkpoint_dtype (the dtype those bytes are in)")
        if self.params_active > self.params_total:
            raise ValueError("params_active exceeds params_total")
        if (self.num_experts is None) != (self.num_experts_per_tok is None):
            raise ValueError("num_experts and num_experts_per_tok go together (a mixture of experts states both)")
        if self.num_experts is None and self.params_active < self.params_total / 2:
            # The speed model runs a dense model's FLOPs at params_active: a dense llama-3.1-8b stated at 1B
            # active planned 18.1 requests/s a replica against 8.7. A text token may skip a vision tower
            # (gemma-3-27b's 1.5%, a Llama 3.2 Vision's fifth), never most of a dense model.
            raise ValueError(f"params_active {self.params_active:,} is under half of params_total {self.params_total:,} "
                             "in a dense model: only a mixture of experts (num_experts, num_experts_per_tok) leaves most "
                             "parameters idle for a token; a vision tower is a small part of a model")
        if self.num_experts is not None and self.num_experts_per_tok >= self.num_experts:
            raise ValueError(f"num_experts_per_tok {self.num_experts_per_tok} is not below num_experts {self.num_experts}: "
                             "a token would run every expert, which makes the model dense (leave both out)")
        if self.sliding_window and not self.num_sliding_window_layers:
            raise ValueError(f"sliding_window {self.sliding_window} given without num_sliding_window_layers: state how "
                             f"many of the {self.num_hidden_layers} layers are windowed (all of them for a model whose "
                             "config windows every layer, as Mistral 7B v0.1's does)")
        if self.attention_chunk_size and not self.num_chunked_attention_layers:
            raise ValueError(f"attention_chunk_size {self.attention_chunk_size} given without num_chunked_attention_layers")
        if self.kv_lora_rank and self.qk_rope_head_dim is None:
            raise ValueError("latent attention needs qk_rope_head_dim")
        if self.kv_lora_rank and self.v_head_dim is None:
            raise ValueError("latent attention needs v_head_dim (the config's v_head_dim: 128 for DeepSeek-V3 and "
                             "Kimi K2), the width of the values its prefill attends over")
        if self.kv_lora_rank and (self.num_sliding_window_layers or self.num_chunked_attention_layers):
            raise ValueError("latent attention in sliding-window or chunked layers is not modelled (their prefill would "
                             "be charged decode's absorbed FLOPs): no published model has it")
        if self.v_head_dim is not None and not self.kv_lora_rank:
            raise ValueError("v_head_dim is for latent attention (kv_lora_rank); other attention's values are head_dim wide")
        return self


class SchedulerTier(_Frozen):
    """The scheduler defaults an engine picks for a class of GPU (vLLM's get_batch_defaults):
    a GPU is in the tier when it reports at least `min_memory_gib` and its name does not
    contain `unless_named`."""

    min_memory_gib: real(ge=0, le=MAX_GPU_MEMORY_GIB) = 0.0
    unless_named: str | None = Field(None, min_length=1, description="text (any case) a GPU's name must not hold")
    # None: the profile's own value (a catalog override that states it sets it on every GPU)
    max_num_batched_tokens: PositiveTokens | None = None
    max_num_seqs: whole(gt=0, le=MAX_TOKENS) | None = None

    def limits(self, engine: Engine) -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs) of `engine` in this tier: the tier's, else the profile's."""
        return (self.max_num_batched_tokens or engine.max_num_batched_tokens, self.max_num_seqs or engine.max_num_seqs)

    def gpus_text(self, first: bool) -> str:
        """The GPUs in this tier, in words (for an error message); first: no tier comes before it."""
        rules = ([f"with at least {self.min_memory_gib:g} GiB"] if self.min_memory_gib else []) + (
            [f"not named '{self.unless_named}'"] if self.unless_named is not None else [])
        if not rules:
            return "every GPU" if first else "the GPUs no earlier tier holds"
        return "GPUs " + " and ".join(rules) + ("" if first else " that no earlier tier holds")

    @property
    def holds_every_gpu(self) -> bool:
        return not self.min_memory_gib and self.unless_named is None

    def holds(self, gpu: GPU) -> bool:
        return gpu.memory_gib >= self.min_memory_gib and not (
            self.unless_named is not None and self.unless_named.lower() in gpu.name.lower())


class Engine(_Frozen):
    """How a serving engine sizes its KV cache and batches its steps (data/engines.yaml)."""

    id: Label
    name: str
    rule: Literal["fraction_of_total", "fraction_of_free_after_weights", "static_fraction_weights_and_kv"]
    memory_fraction: Fraction
    # vLLM offers 8-256 tokens a block (--block-size), TensorRT-LLM tokens_per_block 32-128, SGLang a page of 1;
    # a block as long as a context would make every sequence hold one whole context.
    block_size: whole(gt=0, le=MAX_BLOCK_TOKENS)
    max_num_batched_tokens: PositiveTokens = Field(description="prefill chunk budget per step")
    max_num_seqs: whole(gt=0, le=MAX_TOKENS) = Field(description="most sequences the scheduler runs in one step")
    long_prefill_token_threshold: whole(ge=0, le=MAX_TOKENS) | None = Field(
        None, description="most prompt tokens one request takes in a step (vLLM's setting; 0: off); "
        "absent where the engine has no such setting"
    )
    # Defaults that depend on the GPU, first match wins; the fields above are the profile's own
    # (a GPU no tier holds keeps them).
    gpu_tiers: tuple[SchedulerTier, ...] = ()
    vendors: tuple[Label, ...] | None = Field(
        None, min_length=1, description="the only GPU vendors the engine runs on, each found by its words in a GPU's `vendor` "
        "(TensorRT-LLM: NVIDIA) [default: any; vLLM and SGLang run on several makers' devices, some through "
        "plugins]")
    source: str

    def runs_on_problem(self, gpu: GPU) -> str | None:
        """Why this engine cannot serve on `gpu` (its `vendor` holds the words of none the engine runs on),
        or None: a plan of TensorRT-LLM on an AMD GPU cannot be deployed, whatever its numbers. Words, so
        that a catalog entry's 'NVIDIA Corporation' or 'Nvidia-Corp' is NVIDIA's."""
        if self.vendors is None or any(set(_words(v)) <= set(_words(gpu.vendor)) for v in self.vendors):
            return None
        return (f"engine '{self.id}' ({self.name}) runs on {' and '.join(self.vendors)} GPUs only; {gpu.id} is "
                f"{gpu.vendor}'s (the GPU's `vendor` and the engine's `vendors` in the catalog say so)")

    @model_validator(mode="after")
    def _starts(self) -> Engine:
        """vLLM refuses to start when a step's tokens are fewer than its sequences
        (SchedulerConfig's check: "max_num_batched_tokens (…) must be greater than or equal to
        max_num_seqs (…)"): a plan for such a profile could not be deployed. vLLM's profiles are
        the ones with long_prefill_token_threshold (the check is vLLM's; other engines' profiles are
        not held to it). The profile's own limits apply where no tier holds a GPU."""
        if self.long_prefill_token_threshold is None:
            return self
        own = [] if any(t.holds_every_gpu for t in self.gpu_tiers) else [("", None)]
        for where, tier in (*own, *((f" on {t.gpus_text(i == 0)} (gpu_tiers[{i}])", t) for i, t in enumerate(self.gpu_tiers))):
            tokens, seqs = (self.max_num_batched_tokens, self.max_num_seqs) if tier is None else tier.limits(self)
            if tokens < seqs:
                raise ValueError(f"max_num_batched_tokens {tokens} is below max_num_seqs {seqs}{where}: "
                                 "vLLM refuses to start with fewer step tokens than sequences")
        return self

    def for_gpu(self, gpu: GPU) -> Engine:
        """The profile as it runs on `gpu`: the scheduler defaults of the first tier that holds it."""
        tier = next((t for t in self.gpu_tiers if t.holds(gpu)), None)
        return self if tier is None else _in_tier(self, tier)


def _words(text: str) -> list[str]:
    """The words of a maker's name, in lower case ("NVIDIA®", "Nvidia-Corp", "NVIDIA Corporation": nvidia ...)."""
    return re.findall(r"[0-9a-z]+", text.casefold())


@functools.lru_cache(maxsize=256)
def _in_tier(engine: Engine, tier: SchedulerTier) -> Engine:
    """`engine` with `tier`'s limits, made once per pair (a plan builds a deployment per candidate)."""
    tokens, seqs = tier.limits(engine)
    return engine.model_copy(update={"max_num_batched_tokens": tokens, "max_num_seqs": seqs, "gpu_tiers": ()})


_STEP_LIMITS = {"max_num_batched_tokens", "max_num_seqs"}  # what an Engine's gpu_tiers set
_SECTIONS = {"gpus": GPU, "models": Model, "dtypes": Dtype, "engines": Engine}


def data_dir() -> Path:
    """Where the catalogs live: inside the installed package, else the checkout's data/."""
    packaged = importlib.resources.files("planner") / "data"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parent.parent / "data"


@dataclass(frozen=True)
class Catalog:
    gpus: Mapping[str, GPU]
    models: Mapping[str, Model]
    dtypes: Mapping[str, Dtype]
    engines: Mapping[str, Engine]

    def gpu(self, name: str) -> GPU:
        return _lookup(self.gpus, name, "GPU", "planner catalog gpus")

    def model(self, name: str) -> Model:
        return _lookup(self.models, name, "model", "planner catalog models")

    def dtype(self, name: str) -> Dtype:
        return _lookup(self.dtypes, name, "dtype", "planner catalog dtypes")

    def dtype_for(self, name: str, role: str) -> Dtype:
        """The dtype `name` for `role` ("weight" or "kv"), or InputError naming only the dtypes that role
        allows: `kv --kv-dtype nvfp4` suggested 'fp4', which it then refused as no KV-cache dtype."""
        allowed = sorted(d for d, v in self.dtypes.items() if getattr(v, role))
        what = "KV-cache dtype" if role == "kv" else "weight dtype"
        if name in allowed:
            return self.dtypes[name]
        if name in self.dtypes:
            raise InputError(f"'{name}' is not a {what} (its catalog entry's `{role}` is false); choose from "
                             f"{', '.join(allowed)}")
        raise InputError(f"{did_you_mean(name, allowed, what=what)} (list them with `planner catalog dtypes`)")

    def engine(self, name: str) -> Engine:
        return _lookup(self.engines, name, "engine", "planner catalog engines")

    def with_overrides(self, overrides: Mapping[str, Any], *, where: str) -> Catalog:
        """A catalog with entries added or fields replaced, e.g. a negotiated price.

        `overrides` has the shape of the catalog files: {"gpus": {id: {field: value}}, ...}.
        A known id merges field by field (`catalog import-hf` writes every field of its model, unset
        ones as null or 0, so that an import under a catalog id keeps nothing of it); an unknown id
        must be a complete entry.
        """
        if not isinstance(overrides, Mapping):
            raise InputError("catalog overrides must be a mapping of gpus/models/dtypes/engines", where=where)
        sections: dict[str, dict[str, Any]] = {
            "gpus": dict(self.gpus),
            "models": dict(self.models),
            "dtypes": dict(self.dtypes),
            "engines": dict(self.engines),
        }
        for section, entries in overrides.items():
            if section not in _SECTIONS:
                raise InputError(did_you_mean(str(section), _SECTIONS, what="catalog section"), where=where)
            if not isinstance(entries, Mapping):
                raise InputError(f"{section}: expected a mapping of id -> fields", where=where)
            for entry_id, fields in entries.items():
                if not isinstance(fields, Mapping):
                    raise InputError(f"{section}.{entry_id}: expected a mapping of fields", where=where)
                base = sections[section].get(entry_id)
                merged = _merge(base.model_dump() if base else {}, dict(fields))
                merged["id"] = entry_id
                if section == "gpus" and base is not None and _price_restated(base, fields):
                    # the quote the catalog cites is not the price now paid: name where this one comes from
                    # (each of source and date the override does not state: neither is the catalog quote's)
                    for key, stated in (("price_source", f"override in {where}"), ("price_date", "undated")):
                        if key not in fields:
                            merged[key] = stated
                if section == "engines" and "gpu_tiers" not in fields:  # a stated flag holds on every GPU
                    stated = dict.fromkeys(_STEP_LIMITS & set(fields))
                    merged["gpu_tiers"] = [{**tier, **stated} for tier in merged.get("gpu_tiers", ())]
                sections[section][entry_id] = validate(
                    _SECTIONS[section], merged, where=where, prefix=f"{section}.{entry_id}"
                )
        catalog = Catalog(**sections)
        catalog.check_references(where=where)
        return catalog

    def check_references(self, where: str = "catalog") -> None:
        """Every dtype a GPU names must exist, and so must the compute rate each of its
        weight dtypes runs at (else the GPU would silently drop out of every plan)."""
        for gpu in self.gpus.values():
            for field, names in (("weight_dtypes", gpu.weight_dtypes), ("kv_dtypes", gpu.kv_dtypes)):
                for d in names:
                    if d not in self.dtypes:
                        raise InputError(
                            f"gpus.{gpu.id}.{field}: {did_you_mean(d, self.dtypes, what='dtype')}", where=where
                        )
        # A weight dtype computing in a rate no GPU lists is its own entry's fault, not the first GPU's
        # (`compute_dtype: nope` read "gpus.h100-sxm.dense_tflops: no rate for 'nope'"). The name is a key
        # of dense_tflops, not necessarily a dtype of the catalog.
        rates = {rate for gpu in self.gpus.values() for rate in gpu.dense_tflops}
        for dtype in self.dtypes.values():
            if dtype.weight and dtype.compute_dtype not in rates:
                raise InputError(f"dtypes.{dtype.id}.compute_dtype: no GPU of the catalog has a dense_tflops rate for "
                                 f"{dtype.compute_dtype!r} (they have: {', '.join(sorted(rates))})", where=where)
        for model in self.models.values():
            if model.checkpoint_dtype and model.checkpoint_dtype not in self.dtypes:
                raise InputError(f"models.{model.id}.checkpoint_dtype: unknown dtype '{model.checkpoint_dtype}'", where=where)
        for gpu in self.gpus.values():
            for d in gpu.weight_dtypes:
                compute = self.dtypes[d].compute_dtype
                if compute not in gpu.dense_tflops:
                    raise InputError(
                        f"gpus.{gpu.id}.dense_tflops: no rate for '{compute}', which weight dtype '{d}' "
                        f"computes in (has: {', '.join(sorted(gpu.dense_tflops)) or 'none'})",
                        where=where,
                    )


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), dict(value))
        else:
            out[key] = value
    return out


def _lookup(table: Mapping[str, Any], name: str, what: str, hint_cmd: str) -> Any:
    try:
        return table[name]
    except KeyError:
        raise InputError(f"{did_you_mean(name, table, what=what)} (list them with `{hint_cmd}`)") from None


def _load_section(path: Path, section: str) -> dict[str, Any]:
    raw = load_yaml(path, builtin=True)
    if not isinstance(raw, Mapping):
        raise InputError("expected a mapping of id -> fields", where=str(path))
    out = {}
    for entry_id, fields in raw.items():
        if not isinstance(fields, Mapping):
            raise InputError(f"{entry_id}: expected a mapping of fields", where=str(path))
        out[entry_id] = validate(_SECTIONS[section], {**fields, "id": entry_id}, where=str(path), prefix=str(entry_id))
    return out


@functools.cache
def _builtin() -> Catalog:
    root = data_dir()
    catalog = Catalog(
        **{section: _load_section(root / f"{section}.yaml", section) for section in _SECTIONS}
    )
    catalog.check_references()
    return catalog


def _price_restated(base: GPU, fields: Mapping[str, Any]) -> bool:
    """An override that changes a GPU's price."""
    price = fields.get("price_usd_per_hour")
    return price is not None and price != base.price_usd_per_hour


def load_catalog(*extra_files: str | Path) -> Catalog:
    """The built-in catalog, with each extra YAML file's entries merged over it in order."""
    catalog = _builtin()
    for path in extra_files:
        overrides = load_yaml(path)  # an empty file overrides nothing; `0` or `[]` is no mapping either
        catalog = catalog.with_overrides({} if overrides is None else overrides, where=str(path))
    catalog.check_references()
    return catalog
