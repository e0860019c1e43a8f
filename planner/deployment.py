"""A deployment config: what one replica runs on, and the rules that make it valid."""

from __future__ import annotations

from dataclasses import dataclass

from planner.catalog import GPU, Catalog, Dtype, Engine, Model
from planner.errors import InputError

DEFAULT_OVERHEAD_GIB = 3.0  # seed 000: "about 3 GiB for activations, CUDA graphs and the logits buffer"


@dataclass(frozen=True)
class Deployment:
    """One replica's configuration: model on `tp` GPUs of one type, with dtypes and a context limit."""

    model: Model
    gpu: GPU
    tp: int
    weight_dtype: Dtype
    kv_dtype: Dtype
    max_model_len: int
    engine: Engine
    memory_fraction: float
    overhead_gib_per_gpu: float = DEFAULT_OVERHEAD_GIB

    @property
    def block_size(self) -> int:
        return self.engine.block_size

    @property
    def label(self) -> str:
        return (
            f"{self.gpu.id} tp{self.tp} w:{self.weight_dtype.id} kv:{self.kv_dtype.id} "
            f"ctx:{self.max_model_len}"
        )


def supported_problem(gpu: GPU, tp: int, weight_dtype: Dtype, kv_dtype: Dtype, model: Model) -> str | None:
    """Why this combination cannot run, or None. Shared by the CLI (as an error) and the ILP (as a filter)."""
    found = unsupported_choice(gpu, tp, weight_dtype, kv_dtype, model)
    return None if found is None else found[1]


def unsupported_choice(gpu: GPU, tp: int, weight_dtype: Dtype, kv_dtype: Dtype, model: Model) -> tuple[str, str] | None:
    """(the choice at fault: 'weight_dtypes', 'kv_dtypes' or 'tp', as a scenario names it; why the
    combination cannot run), or None: so that an error can name the field to change. The first of
    unsupported_choices."""
    return next(iter(unsupported_choices(gpu, tp, weight_dtype, kv_dtype, model)), None)


def unsupported_choices(gpu: GPU, tp: int, weight_dtype: Dtype, kv_dtype: Dtype, model: Model) -> list[tuple[str, str]]:
    """Every choice at fault, each with why, weights first: where two are, changing one is not enough."""
    faults = []
    weight_problem = _dtype_problem(
        gpu, weight_dtype, weight_dtype.weight, gpu.weight_dtypes, f"{weight_dtype.id} weights", "weight")
    if weight_problem:
        faults.append(("weight_dtypes", weight_problem))
    kv_problem = _dtype_problem(gpu, kv_dtype, kv_dtype.kv, gpu.kv_dtypes, f"{_article(kv_dtype.id)} {kv_dtype.id} KV cache",
                                "KV")
    if kv_problem:
        faults.append(("kv_dtypes", kv_problem))
    if tp < 1 or tp & (tp - 1):
        faults.append(("tp", f"tensor-parallel degree {tp} must be a power of two"))
    elif tp > gpu.gpus_per_node:
        faults.append(("tp", f"tensor-parallel degree {tp} exceeds the {gpu.gpus_per_node} GPUs of one '{gpu.id}' node"))
    elif problem := model_tp_problem(model, tp):
        faults.append(("tp", problem))
    return faults


def model_tp_problem(model: Model, tp: int) -> str | None:
    """Why `model`'s attention cannot be split over `tp` GPUs, or None (`planner kv` asks this alone)."""
    if model.num_attention_heads % tp:
        return f"tensor-parallel degree {tp} does not divide the {model.num_attention_heads} attention heads of '{model.id}'"
    if not model.kv_lora_rank and tp < model.num_key_value_heads and model.num_key_value_heads % tp:
        return (
            f"tensor-parallel degree {tp} does not divide the {model.num_key_value_heads} KV heads of '{model.id}' "
            "(engines shard KV heads evenly or replicate them when tp exceeds them)"
        )
    # Past the KV heads each is replicated on tp / heads GPUs, a whole number (vLLM's QKVParallelLinear:
    # num_kv_head_replicas = divide(tp_size, total_num_kv_heads), which asserts it).
    if not model.kv_lora_rank and tp > model.num_key_value_heads and tp % model.num_key_value_heads:
        return (
            f"tensor-parallel degree {tp} is not a multiple of the {model.num_key_value_heads} KV heads of "
            f"'{model.id}' (engines replicate each KV head on the same number of GPUs when tp exceeds them)"
        )
    return None


def _article(name: str) -> str:
    """'a' or 'an' before a dtype's name read letter by letter ("an fp8", "an int8", "a bf16")."""
    return "an" if name[:1].lower() in "aefhilmnorsx" else "a"


def _dtype_problem(gpu: GPU, dtype: Dtype, role_ok: bool, supported: list[str], use: str, kind: str) -> str | None:
    """Why `dtype` cannot serve as `use` ("fp8 weights", "an fp8 KV cache") on `gpu`, or None:
    the GPU must list it for that role and the dtype must allow the role (`role_ok`)."""
    if dtype.id in supported and role_ok:
        return None
    if not role_ok:  # the dtype's own entry refuses the role, whatever the GPU lists
        role = "weight" if kind == "weight" else "kv"
        return f"dtype '{dtype.id}' cannot serve as {use} (its catalog entry's `{role}` is false)"
    native = f" (needs native {dtype.needs_native}; {gpu.arch} has none)" if dtype.needs_native else ""
    return f"GPU '{gpu.id}' does not support {use}{native}; supported {kind} dtypes: {', '.join(supported)}"


def make_deployment(
    catalog: Catalog,
    *,
    model: str | Model,
    gpu: str | GPU,
    tp: int = 1,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    max_model_len: int | None = None,
    engine: str = "vllm",
    memory_fraction: float | None = None,
    overhead_gib_per_gpu: float = DEFAULT_OVERHEAD_GIB,
) -> Deployment:
    """Look names up in the catalog and validate the combination (InputError if it cannot run)."""
    m = catalog.model(model) if isinstance(model, str) else model
    g = catalog.gpu(gpu) if isinstance(gpu, str) else gpu
    w, kv, eng = catalog.dtype(weight_dtype), catalog.dtype(kv_dtype), catalog.engine(engine).for_gpu(g)
    problem = eng.runs_on_problem(g) or supported_problem(g, tp, w, kv, m)
    if problem:
        raise InputError(problem)
    limit = m.max_position_embeddings if max_model_len is None else max_model_len
    if limit <= 0:
        raise InputError(f"max_model_len must be positive (got {limit})")
    if limit > m.max_position_embeddings:
        raise InputError(
            f"max_model_len {limit} exceeds '{m.id}' max_position_embeddings {m.max_position_embeddings}"
        )
    fraction = eng.memory_fraction if memory_fraction is None else memory_fraction
    if not 0 < fraction <= 1:
        raise InputError(f"gpu_memory_utilization must be in (0, 1] (got {fraction})")
    if overhead_gib_per_gpu < 0:
        raise InputError(f"overhead_gib must be >= 0 (got {overhead_gib_per_gpu})")
    return Deployment(m, g, tp, w, kv, limit, eng, fraction, overhead_gib_per_gpu)
