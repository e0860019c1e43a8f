"""Each measured row predicted by the planner's own model, for a given set of efficiency
factors (package docstring: what is predicted, per source)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from planner.calibration.measured import (
    SPLITWISE_GPUS,
    TRTLLM_GPUS,
    TRTLLM_MODELS,
    SplitwiseRow,
    TrtllmRow,
    splitwise_models,
)
from planner.capacity import SLO, ReplicaModel, replica_capacity
from planner.catalog import Catalog, Efficiency
from planner.deployment import Deployment, make_deployment
from planner.histogram import Histogram
from planner.memory import BudgetLadder, kv_bytes_per_token
from planner.paged import TokenProfile, token_profile
from planner.roofline import StepModel

TRTLLM_ENGINE = "trtllm-offline"
# The row's weight dtype -> its KV-cache dtype: fp8 for fp8 and fp4 checkpoints (NVIDIA's ModelOpt
# fp4 checkpoints quantise the cache to fp8), else the weights' own.
KV_DTYPE = {"fp8": "fp8", "fp4": "fp8", "fp16": "fp16", "bf16": "bf16"}


def with_efficiency(dep: Deployment, efficiency: Efficiency) -> Deployment:
    """The same deployment on a GPU whose efficiency factors are replaced."""
    return replace(dep, gpu=dep.gpu.model_copy(update={"efficiency": efficiency}))


def trtllm_deployment(catalog: Catalog, row: TrtllmRow) -> Deployment:
    """The row's configuration on the trtllm-offline engine profile, limit = ISL + OSL."""
    if row.skip_reason:
        raise ValueError(f"row {row.line}: {row.skip_reason}")
    return make_deployment(
        catalog,
        model=TRTLLM_MODELS[row.model],
        gpu=TRTLLM_GPUS[row.gpu],
        tp=row.tp,
        weight_dtype=row.dtype,
        kv_dtype=KV_DTYPE[row.dtype],
        max_model_len=row.input_len + row.output_len,
        engine=TRTLLM_ENGINE,
    )


def trtllm_profile(dep: Deployment, row: TrtllmRow) -> TokenProfile:
    return token_profile(
        Histogram.constant(row.input_len, row.output_len),
        block_size=dep.block_size,
        chunk_tokens=dep.engine.max_num_batched_tokens,
    )


@dataclass(frozen=True, eq=False)
class TrtllmCase:
    """A TensorRT-LLM row with everything that does not depend on the efficiency factors
    computed once: without an SLO the resident count is set by memory or the batch cap
    alone, so a new set of factors only changes the step model (`predict`)."""

    row: TrtllmRow
    dep: Deployment
    prof: TokenProfile
    ladder: BudgetLadder
    resident_batch: float
    binding: str

    @classmethod
    def of(cls, catalog: Catalog, row: TrtllmRow) -> TrtllmCase:
        dep = trtllm_deployment(catalog, row)
        prof = trtllm_profile(dep, row)
        # trtllm-bench sets each run's max_num_tokens for its batch (data/engines.yaml,
        # trtllm-offline): the profile's budget is not the run's, so it sets no ceiling here.
        cap = replica_capacity(dep, prof, SLO(), sizing="worst_case", token_budget=False)
        return cls(row, dep, prof, cap.ladder, cap.bound_batch, cap.binding)

    @property
    def gpu_id(self) -> str:
        return self.dep.gpu.id

    def predict(self, efficiency: Efficiency | None = None) -> float:
        """Output tokens/s per GPU = λ(N) x mean output / tp, λ(N) from capacity.ReplicaModel: a
        closed loop, every one of the N slots full, so a request's steps hold N (not N + 1)."""
        dep = self.dep if efficiency is None else with_efficiency(self.dep, efficiency)
        rm = ReplicaModel(dep, self.prof, SLO(), self.ladder)
        return rm.rate(self.resident_batch, seen=self.resident_batch) * self.prof.mean_output / dep.tp


def trtllm_cases(catalog: Catalog, rows: Iterable[TrtllmRow]) -> list[TrtllmCase]:
    return [TrtllmCase.of(catalog, r) for r in rows if r.skip_reason is None]


def splitwise_step(catalog: Catalog, row: SplitwiseRow, efficiency: Efficiency | None = None) -> StepModel:
    """StepModel of the row's fp16 deployment (the model is not in the catalog, so the
    Deployment is built directly; nothing here depends on the context limit)."""
    model = splitwise_models()[row.model]
    fp16 = catalog.dtype("fp16")
    gpu = catalog.gpu(SPLITWISE_GPUS[row.gpu])
    dep = Deployment(model, gpu, row.tp, fp16, fp16, model.max_position_embeddings, catalog.engine("vllm"), 0.9)
    return StepModel.of(dep if efficiency is None else with_efficiency(dep, efficiency))


def predict_splitwise(catalog: Catalog, row: SplitwiseRow, efficiency: Efficiency | None = None) -> tuple[float, float]:
    """(prefill ms, decode ms per step) of the row (the package docstring derives both)."""
    step = splitwise_step(catalog, row, efficiency)
    prefill_s = float(step.prompt_pass_s(row.batch, row.input_len))
    context = row.input_len + (row.output_len + 1) / 2.0
    cache_bytes = row.batch * context * kv_bytes_per_token(step.model, catalog.dtype("fp16"), row.tp)
    decode_s = float(step.decode_step_s(row.batch, cache_bytes, row.batch * context))
    return prefill_s * 1e3, decode_s * 1e3

