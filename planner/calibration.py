"""Calibration of the roofline's efficiency factors against published measurements.

The measurements are copied into `data/measured/` (its README.md gives sources and
licences). Each row is predicted with the planner's own model, and the six factors of
`catalog.Efficiency` (bandwidth, compute, step_overhead_ms, allreduce_latency_us,
interconnect, layer_overhead_us) are fitted where each shows; the rows not fitted on are
reported separately, as the measurements' README asks.

What is predicted, per source
-----------------------------
- TensorRT-LLM offline maximum throughput (`trtllm_offline_throughput.csv`, output
  tokens/s per GPU; every request has the same ISL and OSL). The row becomes a
  Deployment on the `trtllm-offline` engine profile (data/engines.yaml: 0.95 of the
  memory free after weights, blocks of 32, up to 4,096 sequences) with
  max_model_len = ISL + OSL, and `capacity.replica_capacity` of
  `Histogram.constant(ISL, OSL)` with no SLO is evaluated in `worst_case` sizing:
  TensorRT-LLM's default admission policy, GUARANTEED_NO_EVICT, admits a request
  only when blocks for its whole ISL + OSL are free, so the resident count is the
  budget over ISL + OSL tokens, as in worst_case sizing at that limit. (`expected`
  sizing would credit the engine with about twice the batch it runs on long
  outputs.) Prediction = point.output_tokens_per_s / tp. Weights in the row's dtype,
  the KV cache in fp8 for fp8 and fp4 checkpoints (NVIDIA's ModelOpt fp4 checkpoints
  quantise the cache to fp8) and fp16 otherwise.
- Splitwise-sim's perf model (`splitwise_perf_model_summary.csv`, Llama 2 70B and
  BLOOM 176B in fp16 on DGX-A100/H100, a research stack): prefill_ms is one forward
  pass over `batch` prompts of `input_len` tokens, i.e. `StepModel.decode_step_s` of
  batch x input_len tokens attending over batch x input_len^2 / 2 pairs (the FLOPs
  of `StepModel.prefill_s`, plus the weight read, overhead and all-reduce latency a
  standalone pass pays); decode_ms_per_step is `decode_step_s` at `batch`
  sequences whose mean cached context is input_len + (output_len + 1) / 2. The
  power-capped H100 rows are skipped. Prefill comes only from rows whose
  end-to-end time is consistent (`e2e_consistent_10pct`); decode from all rows.

Fit and hold-out
----------------
- Latency points (`latency_published.csv`, predicted by planner.latency_points): per-token
  latency at low and mid concurrency, where the fixed per-step overhead and the per-call
  all-reduce latency show; offline maximum-throughput batches hide both (2 ms of
  overhead and 1% of bandwidth are indistinguishable there), which is how the old
  throughput-only fit reached 77-100 us per all-reduce and overstated tp > 1 latency by
  36-66%.
- fit_joint: block-coordinate least squares of log(predicted / measured), ROUNDS rounds
  of (1) bandwidth, compute and `interconnect` per GPU on the throughput rows, then (2)
  step_overhead_ms per GPU, allreduce_latency_us per interconnect FAMILY (one number
  for every GPU on NVLink4, one for NVLink3, ...) and one layer_overhead_us for every GPU
  on the latency rows. The physical form is the same for every GPU (roofline.StepModel);
  nothing is fitted per row. A family without latency rows takes ALLREDUCE_DONOR's value
  or, failing one, is fitted on the throughput rows (and says so). Every fit starts from
  NEUTRAL, not from the catalog.
- Hold-out is by configuration (config_folds, cross_validate): each (model, GPU, tp) of
  either source is predicted by a fit that never saw it. The headline leaves one
  configuration out at a time (FOLDS = 0): the catalog is fitted on every configuration and
  used for ones it has not seen, which is what this measures. A harsher check withholds a
  quarter of the configurations at once (KFOLD); dealt round-robin over the sorted list, a
  fold can hold every tp-1 configuration of a GPU, so it also measures extrapolating a GPU
  from its tensor-parallel rows alone. The catalog takes the fit on every row.
- Latency rows of a GPU without throughput rows (the MI300X) are fitted on by nothing: one
  configuration cannot separate bandwidth from fixed costs. They check the factors that GPU
  borrows (Calibration.borrowed_check), and its catalog source says by how much they miss.
- Splitwise rows are predicted with the joint factors as a cross-engine check, and fitted
  on their own (every third row held out) only to test the model's form: that research
  stack pays about 25 ms per step at tp 4 and tp 8 alike, far above production engines.
- GPUs without measurements borrow a measured GPU's factors (BORROWED) and are marked
  `borrowed_from` (GPU.verified is False): plans that use them say so.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from planner.capacity import SLO, ReplicaModel, replica_capacity
from planner.catalog import GPU, Catalog, Efficiency, Model, data_dir
from planner.deployment import Deployment, make_deployment
from planner.histogram import Histogram
from planner.latency_points import LATENCY_FILE, LatencyCase, latency_cases
from planner.memory import BudgetLadder, kv_bytes_per_token
from planner.paged import TokenProfile, token_profile
from planner.roofline import StepModel, causal_pairs
from planner.yamlio import load_yaml, validate

TRTLLM_FILE = "trtllm_offline_throughput.csv"
SPLITWISE_FILE = "splitwise_perf_model_summary.csv"
VIDUR_FILE = "vidur_linear_subset.csv"
TRTLLM_ENGINE = "trtllm-offline"

# Measured GPU label -> catalog id. GH200 rows are skipped: not in the catalog.
TRTLLM_GPUS = {
    "H100-80GB": "h100-sxm",
    "H200-141GB": "h200",
    "A100-SXM4-80GB": "a100-80gb",
    "A100-80GB": "a100-80gb",
    "L40S-48GB": "l40s",
    "B200-180GB": "b200",
    "GB200-192GB": "gb200",
}
# Measured model label -> catalog id. Llama 3.3 70B has Llama 3.1 70B's architecture
# (identical config.json layer, head, width and vocabulary fields); only the weights differ.
TRTLLM_MODELS = {
    "Llama-3.1-8B": "llama-3.1-8b",
    "Llama-3.1-70B": "llama-3.1-70b",
    "Llama-3.3-70B": "llama-3.1-70b",
    "Llama-3.1-405B": "llama-3.1-405b",
    "Mistral-7B": "mistral-7b",
}
KV_DTYPE = {"fp8": "fp8", "fp4": "fp8", "fp16": "fp16", "bf16": "bf16"}


SPLITWISE_GPUS = {"a100-80gb": "a100-80gb", "h100-80gb": "h100-sxm"}  # h100-80gb-pcap: power-capped, skipped

FACTORS = ("bandwidth", "compute", "step_overhead_ms", "allreduce_latency_us", "interconnect", "layer_overhead_us")
# Identifiable only from tensor-parallel rows (StepModel.allreduce_s is zero at tp = 1).
ALLREDUCE_FACTORS = ("allreduce_latency_us", "interconnect")
BOUNDS = {
    "bandwidth": (0.3, 0.95),
    "compute": (0.2, 0.95),
    "step_overhead_ms": (0.0, 10.0),
    "allreduce_latency_us": (0.0, 100.0),
    "interconnect": (0.2, 1.0),
    "layer_overhead_us": (0.0, 100.0),
}
STARTS = ((0.8, 0.6, 2.0, 10.0, 0.9, 0.0), (0.6, 0.4, 5.0, 50.0, 0.5, 10.0), (0.9, 0.8, 0.5, 2.0, 0.7, 20.0))
# Offline max-throughput rows run at large batches, where a fixed per-step cost and a
# slightly lower bandwidth are interchangeable: their held-out error is flat in
# step_overhead_ms from 0.5 to 10 ms (bench/calibration.py prints the profile). So
# the TensorRT-LLM fit carries a Gaussian prior on it, (mean, sd) in ms, as one more
# residual. At 2 ms the fitted bandwidth of A100 and H100 (0.77, 0.84) is close to what
# vidur measured for GEMMs alone at one token (0.78, 0.86; data/measured/vidur_linear_subset.csv).
TRTLLM_PRIORS = {"step_overhead_ms": (2.0, 1.0)}
SCALES = (0.1, 0.1, 1.0, 10.0, 0.1, 10.0)  # per factor, in FACTORS order, as STARTS

# GPUs without measurements -> (measured GPU, why that one).
BORROWED = {
    "h100-pcie": ("h100-sxm", "same Hopper architecture"),
    "a100-40gb": ("a100-80gb", "same Ampere A100"),
    "a10g": ("a100-80gb", "same Ampere architecture"),
    "l4": ("l40s", "same Ada architecture"),
    "mi300x": ("h100-sxm", "an HBM3 GPU of the same class stands in"),
    "b300": ("b200", "same Blackwell package"),
    # Blackwell, but a GDDR, PCIe-only card: the measured card like it is the L40S, not the B200
    "rtx-pro-6000": ("l40s", "a GDDR, PCIe-only data-center card like it"),
}


def measured_dir() -> Path:
    return data_dir() / "measured"


# ------------------------------------------------------------------ models the catalog lacks

@functools.cache
def splitwise_models() -> dict[str, Model]:
    """Models of the splitwise rows (data/measured/splitwise_models.yaml: calibration only, not in
    the catalog), keyed by the CSV's model label."""
    path = measured_dir() / "splitwise_models.yaml"
    raw = load_yaml(path)
    return {label: validate(Model, fields, where=str(path), prefix=label) for label, fields in raw.items()}



# ------------------------------------------------------------------ rows


@dataclass(frozen=True)
class TrtllmRow:
    """One row of trtllm_offline_throughput.csv; `line` is its 1-based data row number."""

    line: int
    source: str
    gpu: str
    model: str
    dtype: str
    tp: int
    input_len: int
    output_len: int
    measured_tok_s_per_gpu: float

    @property
    def skip_reason(self) -> str | None:
        if self.gpu not in TRTLLM_GPUS:
            return f"GPU {self.gpu} not in the catalog"
        if self.model not in TRTLLM_MODELS:
            return f"model {self.model} not in the catalog"
        return None

    @property
    def label(self) -> str:
        return f"{self.source.replace('_perf_overview', '')} {self.gpu} {self.model} {self.dtype} tp{self.tp} {self.input_len}/{self.output_len}"


@dataclass(frozen=True)
class SplitwiseRow:
    """One row of splitwise_perf_model_summary.csv; `line` is its 1-based data row number."""

    line: int
    model: str
    gpu: str
    tp: int
    input_len: int
    batch: int
    output_len: int
    prefill_ms: float
    decode_ms_per_step: float
    e2e_consistent: bool

    @property
    def held_out(self) -> bool:
        """Every third row (for the splitwise-only fit)."""
        return self.line % 3 == 0

    @property
    def skip_reason(self) -> str | None:
        if self.gpu not in SPLITWISE_GPUS:
            return f"GPU {self.gpu} is not a catalog configuration (power-capped)"
        if self.model not in splitwise_models():
            return f"model {self.model} unknown"
        return None

    @property
    def label(self) -> str:
        return f"splitwise {self.gpu} {self.model} fp16 tp{self.tp} p{self.input_len} b{self.batch} o{self.output_len}"


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def load_trtllm_rows(path: Path | None = None) -> list[TrtllmRow]:
    rows = _read_csv(path or measured_dir() / TRTLLM_FILE)
    return [
        TrtllmRow(
            line=i,
            source=r["source"],
            gpu=r["gpu"],
            model=r["model"],
            dtype=r["dtype"],
            tp=int(r["tp"]),
            input_len=int(r["input_len"]),
            output_len=int(r["output_len"]),
            measured_tok_s_per_gpu=float(r["output_tok_s_per_gpu"]),
        )
        for i, r in enumerate(rows, start=1)
    ]


def load_splitwise_rows(path: Path | None = None) -> list[SplitwiseRow]:
    rows = _read_csv(path or measured_dir() / SPLITWISE_FILE)
    return [
        SplitwiseRow(
            line=i,
            model=r["model"],
            gpu=r["gpu"],
            tp=int(r["tp"]),
            input_len=int(r["input_len"]),
            batch=int(r["batch"]),
            output_len=int(r["output_len"]),
            prefill_ms=float(r["prefill_ms"]),
            decode_ms_per_step=float(r["decode_ms_per_step"]),
            e2e_consistent=r["e2e_consistent_10pct"].strip() == "True",
        )
        for i, r in enumerate(rows, start=1)
    ]


# ------------------------------------------------------------------ predictions


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
        cap = replica_capacity(dep, prof, SLO(), sizing="worst_case")
        return cls(row, dep, prof, cap.ladder, cap.bound_batch, cap.binding)

    @property
    def gpu_id(self) -> str:
        return self.dep.gpu.id

    def predict(self, efficiency: Efficiency | None = None) -> float:
        """Output tokens/s per GPU = λ(N) x mean output / tp, λ(N) from capacity.ReplicaModel."""
        dep = self.dep if efficiency is None else with_efficiency(self.dep, efficiency)
        rm = ReplicaModel(dep, self.prof, SLO(), self.ladder)
        return rm.rate(self.resident_batch) * self.prof.mean_output / dep.tp


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
    """(prefill ms, decode ms per step) of the row (see the module docstring)."""
    step = splitwise_step(catalog, row, efficiency)
    tokens = row.batch * row.input_len
    prefill_s = float(step.decode_step_s(tokens, 0.0, row.batch * causal_pairs(row.input_len**2)))
    context = row.input_len + (row.output_len + 1) / 2.0
    cache_bytes = row.batch * context * kv_bytes_per_token(step.model, catalog.dtype("fp16"), row.tp)
    decode_s = float(step.decode_step_s(row.batch, cache_bytes, row.batch * context))
    return prefill_s * 1e3, decode_s * 1e3


# ------------------------------------------------------------------ fitting


def abs_pct_error(predicted: float, measured: float) -> float:
    return 100.0 * abs(predicted / measured - 1.0)


@dataclass(frozen=True)
class FitResult:
    efficiency: Efficiency  # source left for the caller
    free: tuple[str, ...]  # factors that were fitted
    at_bounds: tuple[str, ...]  # fitted factors that ended on a bound
    cost: float


def fit_efficiency(
    log_errors: Callable[[Efficiency], np.ndarray],
    base: Efficiency,
    *,
    free: Sequence[str] = FACTORS,
    priors: Mapping[str, tuple[float, float]] | None = None,
    starts: Sequence[Sequence[float]] | None = None,
) -> FitResult:
    """Bounded least squares of `log_errors(efficiency)` over the factors in `free` (the
    others keep `base`'s values), plus (value - mean) / sd for each factor with a prior.
    Every start (full FACTORS-ordered tuples; default STARTS) is tried and the lowest cost
    kept, first on ties: deterministic."""
    priors = {f: v for f, v in (priors or {}).items() if f in free}
    free = tuple(f for f in FACTORS if f in free)
    index = [FACTORS.index(f) for f in free]
    lower = [BOUNDS[f][0] for f in free]
    upper = [BOUNDS[f][1] for f in free]

    def make(x: Sequence[float]) -> Efficiency:
        values = {f: float(v) for f, v in zip(free, x, strict=True)}
        return base.model_copy(update=values)

    def residuals(x: np.ndarray) -> np.ndarray:
        eff = make(x)
        prior = [(getattr(eff, f) - mean) / sd for f, (mean, sd) in priors.items()]
        return np.concatenate([log_errors(eff), prior])

    best = None
    for start in starts or STARTS:
        res = least_squares(
            residuals,
            np.clip(np.asarray([start[i] for i in index], float), lower, upper),
            bounds=(lower, upper),
            x_scale=np.asarray([SCALES[i] for i in index]),
            xtol=1e-10,
            ftol=1e-10,
            gtol=1e-10,
            max_nfev=2000,
        )
        if best is None or res.cost < best.cost - 1e-12:
            best = res
    assert best is not None
    x = np.clip(best.x, lower, upper)
    span = np.asarray(upper) - np.asarray(lower)
    at = tuple(f for f, v, lo, sp in zip(free, x, lower, span, strict=True) if min(v - lo, lo + sp - v) < 1e-3 * sp)
    return FitResult(make(x), free, at, float(best.cost))


def trtllm_log_errors(cases: Sequence[TrtllmCase]) -> Callable[[Efficiency], np.ndarray]:
    measured = np.log([c.row.measured_tok_s_per_gpu for c in cases])
    return lambda eff: np.log([c.predict(eff) for c in cases]) - measured


def splitwise_log_errors(catalog: Catalog, rows: Sequence[SplitwiseRow]) -> Callable[[Efficiency], np.ndarray]:
    """Log errors of decode_ms_per_step on every row and prefill_ms on consistent rows."""

    def f(eff: Efficiency) -> np.ndarray:
        out = []
        for r in rows:
            pf, dec = predict_splitwise(catalog, r, eff)
            if r.e2e_consistent:
                out.append(math.log(pf / r.prefill_ms))
            out.append(math.log(dec / r.decode_ms_per_step))
        return np.asarray(out)

    return f


# ------------------------------------------------------------------ the joint fit

# Per-interconnect all-reduce latency: one number per link family, shared by every GPU on it
# (prefix of GPU.interconnect -> family).
INTERCONNECT_FAMILIES = (("NVLink5", "NVLink5"), ("NVLink4", "NVLink4"), ("NVLink3", "NVLink3"),
                         ("PCIe", "PCIe"), ("Infinity Fabric", "InfinityFabric"))  # fmt: skip
# A family without latency rows takes the fitted latency of a family whose all-reduce kernels
# it shares (the small-message latency is launch- and synchronisation-bound, not link-bound).
ALLREDUCE_DONOR = {"NVLink5": "NVLink4"}
# Published small-message (decode-sized, <= 256 KB) all-reduce latency per call, microseconds,
# (low, high, citation). None where no published figure was found.
PUBLISHED_ALLREDUCE_US: dict[str, tuple[float, float, str] | None] = {
    "NVLink4": (
        3.7,
        26.0,
        "H100 SXM, tp 2/4/8, 512 B-256 KB: TensorRT-LLM-style custom all-reduce 3.7-16.7 us, vLLM custom "
        "all-reduce 8.5-24.1 us (sgl-project/sglang PR #2904, 2025-01); NCCL NVLSTree with CUDA graphs "
        "about 6 us at 2 GPUs (NVIDIA/nccl issue #1259, NCCL 2.20.5); NCCL's own tuner estimate for 4-8 KB "
        "on 8x H100: 25.9-26.5 us (NVIDIA/nccl issue #1453)",
    ),
    "NVLink3": (
        3.7,
        26.0,
        "A100: nccl-tests all_reduce_perf 32-128 B on 2x A100-SXM4 over NVLink3: 10.1-10.3 us (NVIDIA/nccl "
        "issue #583, no CUDA graphs); the custom-kernel floor is taken as NVLink4's (same kernels, "
        "launch-bound) - no A100 custom all-reduce table was found",
    ),
    "NVLink5": None,
    "PCIe": None,
    "InfinityFabric": (
        15.0,
        31.0,
        "RCCL all_reduce_perf 8 B-1 KB on MI250X before one-shot all-reduce: 24.9-31.3 us (ROCm/rccl PR "
        "#929); MSCCL++ 1 KB-256 KB all-reduce 15.1-20.1 us (microsoft/mscclpp PR #646); no MI300X "
        "figure was found",
    ),
}
# Where every fit starts, so that no factor fitted on all rows leaks into a held-out fold.
NEUTRAL = Efficiency(
    bandwidth=0.8, compute=0.6, step_overhead_ms=2.0, allreduce_latency_us=10.0, interconnect=1.0, source="start"
)
LATENCY_FACTORS = ("step_overhead_ms", "allreduce_latency_us", "layer_overhead_us")
ROUNDS = 4  # block-coordinate rounds: throughput stage, then latency stage
FOLDS = 0  # cross-validation by configuration: 0 leaves one configuration out at a time
KFOLD = 4  # a second, harsher check: a quarter of the configurations withheld at once


# Fit one per-layer overhead for every GPU on the latency rows (bench/calibration.py --compare-forms
# prints the held-out error with and without it); False keeps layer_overhead_us at 0.
LAYER_OVERHEAD = True


def interconnect_family(gpu: GPU) -> str:
    for prefix, family in INTERCONNECT_FAMILIES:
        if gpu.interconnect.startswith(prefix):
            return family
    raise ValueError(f"GPU '{gpu.id}': interconnect '{gpu.interconnect}' is not in INTERCONNECT_FAMILIES")


@dataclass(frozen=True)
class JointFit:
    """Efficiency per GPU and all-reduce latency per interconnect family, from one fit."""

    efficiency: dict[str, Efficiency]
    allreduce_us: dict[str, float]  # family -> fitted latency per call
    allreduce_basis: dict[str, str]  # family -> what the latency was fitted on
    overhead_basis: dict[str, str]  # gpu -> what step_overhead_ms was fitted on
    throughput: dict[str, FitResult]  # gpu -> last throughput-stage fit
    n_throughput: dict[str, int]
    n_latency: dict[str, int]
    layer_overhead_us: float = 0.0  # one for every GPU; 0 when not fitted
    layer_basis: str = "not fitted (0)"


def _log_measured_ms(cases: Sequence[LatencyCase]) -> np.ndarray:
    return np.log([c.row.measured_ms for c in cases])


def fit_joint(
    catalog: Catalog,
    thr: Sequence[TrtllmCase],
    lat: Sequence[LatencyCase],
    *,
    rounds: int = ROUNDS,
    layer_overhead: bool = LAYER_OVERHEAD,
) -> JointFit:
    """Bandwidth, compute and interconnect efficiency per GPU on the throughput rows; step
    overhead per GPU and all-reduce latency per interconnect family on the latency rows;
    in `rounds` alternating stages (block-coordinate descent), each stage holding the
    other's factors. Large offline batches hide fixed per-step and per-call costs (the
    offline rows cannot tell 2 ms of overhead from 1% of bandwidth), so those two are
    fitted where they show: at low concurrency. A GPU without latency rows keeps the
    TRTLLM_PRIORS prior on its overhead in the throughput stage; a family without latency
    rows takes ALLREDUCE_DONOR's latency or, failing one, is fitted on the throughput rows.
    With `layer_overhead`, one per-layer overhead shared by every GPU joins the latency stage
    (roofline.StepModel.decode_step_s: a deeper model pays more fixed time per pass)."""
    gpus = sorted({c.gpu_id for c in thr} | {c.gpu_id for c in lat})
    family = {g: interconnect_family(catalog.gpu(g)) for g in gpus}
    thr_by = {g: [c for c in thr if c.gpu_id == g] for g in gpus}
    lat_by = {g: [c for c in lat if c.gpu_id == g] for g in gpus}
    lat_gpus = [g for g in gpus if lat_by[g]]
    lat_families = sorted({family[c.gpu_id] for c in lat if c.row.tp > 1})
    eff = dict.fromkeys(gpus, NEUTRAL)
    ar = dict.fromkeys(set(family.values()), NEUTRAL.allreduce_latency_us)
    layer_us = NEUTRAL.layer_overhead_us
    thr_fits: dict[str, FitResult] = {}

    def donor(f: str) -> str | None:
        d = ALLREDUCE_DONOR.get(f)
        return d if d in lat_families else None

    # The latency stage's unknowns: overhead per GPU with latency rows, latency per family with
    # tp > 1 ones, and (layer_overhead) one per-layer overhead for all.
    names = [("step_overhead_ms", g) for g in lat_gpus] + [("allreduce_latency_us", f) for f in lat_families]
    if layer_overhead and lat:
        names.append(("layer_overhead_us", "all"))
    lower = [BOUNDS[n][0] for n, _ in names]
    upper = [BOUNDS[n][1] for n, _ in names]
    measured = _log_measured_ms(lat)
    for r in range(rounds):
        for g in gpus:
            f = family[g]
            src = donor(f) or f
            eff[g] = eff[g].model_copy(update={"allreduce_latency_us": ar[src], "layer_overhead_us": layer_us})
            if not thr_by[g]:
                continue
            free = ["bandwidth", "compute"]
            if any(c.row.tp > 1 for c in thr_by[g]):
                free.append("interconnect")
                if src not in lat_families:
                    free.append("allreduce_latency_us")
            if not lat_by[g]:
                free.append("step_overhead_ms")
            starts = STARTS if r == 0 else [tuple(getattr(eff[g], k) for k in FACTORS)]
            fit = fit_efficiency(trtllm_log_errors(thr_by[g]), eff[g], free=free, priors=TRTLLM_PRIORS, starts=starts)
            thr_fits[g], eff[g] = fit, fit.efficiency
            if "allreduce_latency_us" in free:
                ar[f] = eff[g].allreduce_latency_us
        if not lat:
            break
        x0 = [getattr(eff[k], n) if n == "step_overhead_ms" else ar[k] if n == "allreduce_latency_us" else layer_us for n, k in names]

        def apply(x: Sequence[float]) -> dict[str, Efficiency]:
            values = {(n, k): float(v) for (n, k), v in zip(names, x, strict=True)}
            out = {}
            for g in lat_gpus:
                upd = {"step_overhead_ms": values[("step_overhead_ms", g)]}
                if ("allreduce_latency_us", family[g]) in values:
                    upd["allreduce_latency_us"] = values[("allreduce_latency_us", family[g])]
                if ("layer_overhead_us", "all") in values:
                    upd["layer_overhead_us"] = values[("layer_overhead_us", "all")]
                out[g] = eff[g].model_copy(update=upd)
            return out

        def residuals(x: np.ndarray) -> np.ndarray:
            e = apply(x)
            return np.log([c.predict_ms(e[c.gpu_id]) for c in lat]) - measured

        res = least_squares(
            residuals, np.clip(x0, lower, upper), bounds=(lower, upper),
            x_scale=[1.0 if n == "step_overhead_ms" else 10.0 for n, _ in names],
            xtol=1e-10, ftol=1e-10, gtol=1e-10, max_nfev=2000,
        )  # fmt: skip
        x = np.clip(res.x, lower, upper)
        eff.update(apply(x))
        for (n, k), v in zip(names, x, strict=True):
            if n == "allreduce_latency_us":
                ar[k] = float(v)
            elif n == "layer_overhead_us":
                layer_us = float(v)
    for g in gpus:  # the final latency stage moved the shared factors: every GPU takes them
        eff[g] = eff[g].model_copy(
            update={"allreduce_latency_us": ar[donor(family[g]) or family[g]], "layer_overhead_us": layer_us}
        )
    basis = {}
    for f in sorted(set(family.values())):
        n = sum(1 for c in lat if family[c.gpu_id] == f and c.row.tp > 1)
        if f in lat_families:
            basis[f] = f"latency rows (n={n} with tp > 1)"
        elif donor(f):
            basis[f] = f"no latency rows: takes {donor(f)}'s fitted value"
        elif any(c.row.tp > 1 for c in thr if family[c.gpu_id] == f):
            basis[f] = "no latency rows: fitted on offline-throughput rows only (large batches hide it)"
        else:
            basis[f] = "no tensor-parallel rows: not fitted"
    over_basis = {
        g: f"latency rows (n={len(lat_by[g])}) of data/measured/{LATENCY_FILE}"
        if lat_by[g]
        else f"throughput rows with prior N{TRTLLM_PRIORS['step_overhead_ms']}"
        for g in gpus
    }
    return JointFit(
        efficiency=eff,
        allreduce_us={f: ar[donor(f) or f] for f in sorted(set(family.values()))},
        allreduce_basis=basis,
        overhead_basis=over_basis,
        throughput=thr_fits,
        n_throughput={g: len(thr_by[g]) for g in gpus},
        n_latency={g: len(lat_by[g]) for g in gpus},
        layer_overhead_us=layer_us,
        layer_basis=f"latency rows (n={len(lat)}), one value for every GPU"
        if ("layer_overhead_us", "all") in names
        else "not fitted (0)",
    )


def config_of_trtllm(case: TrtllmCase) -> tuple[str, str, int]:
    return (case.dep.model.id, case.gpu_id, case.row.tp)


def config_folds(configs: Iterable[tuple[str, str, int]], folds: int = FOLDS) -> dict[tuple[str, str, int], int]:
    """Fold of each (model, GPU, tp) configuration: sorted, then dealt round-robin, so every
    configuration is held out exactly once and each fold mixes models, GPUs and tp degrees.
    folds=0: one fold per configuration (leave one configuration out)."""
    ordered = sorted(set(configs))
    return {cfg: i % (folds or len(ordered)) for i, cfg in enumerate(ordered)}


# ------------------------------------------------------------------ the whole calibration


@dataclass(frozen=True)
class Prediction:
    source: str  # "trtllm" | "latency" | "splitwise-prefill" | "splitwise-decode"
    label: str
    line: int
    gpu: str  # catalog id
    held_out: bool
    measured: float
    predicted: float
    tp: int = 1
    model: str = ""
    moe: bool = False

    @property
    def error_pct(self) -> float:
        return abs_pct_error(self.predicted, self.measured)

    @property
    def signed_error_pct(self) -> float:
        return 100.0 * (self.predicted / self.measured - 1.0)


@dataclass(frozen=True)
class Calibration:
    joint: JointFit  # fitted on every row: what the catalog takes
    trtllm: list[Prediction]  # with the joint fit (in-sample)
    latency: list[Prediction]  # with the joint fit (in-sample)
    held_out: list[Prediction]  # every row predicted by the fold that did not see its configuration
    splitwise: list[Prediction]  # with the joint fit: cross-engine check, nothing fitted
    splitwise_fits: dict[str, FitResult]  # splitwise-only fits (diagnostic)
    splitwise_own: list[Prediction]  # with the splitwise-only factors
    skipped: list[tuple[str, str]]  # (row label, reason)
    folds: int  # of held_out; 0: leave one configuration out
    held_out_kfold: list[Prediction]  # the same with KFOLD folds (a quarter of the configurations withheld at once)
    borrowed_check: list[Prediction]  # latency rows of GPUs without throughput rows, predicted with borrowed factors


def summarise(preds: Sequence[Prediction]) -> tuple[int, float, float]:
    """(n, median, worst) absolute percentage error; NaNs for no rows."""
    if not preds:
        return 0, math.nan, math.nan
    e = np.array([p.error_pct for p in preds])
    return len(e), float(np.median(e)), float(e.max())


def _trtllm_prediction(c: TrtllmCase, eff: Efficiency, held: bool) -> Prediction:
    return Prediction(
        "trtllm", c.row.label, c.row.line, c.gpu_id, held, c.row.measured_tok_s_per_gpu, c.predict(eff),
        c.row.tp, c.dep.model.id, bool(c.dep.model.num_experts),
    )  # fmt: skip


def _latency_prediction(c: LatencyCase, eff: Efficiency, held: bool) -> Prediction:
    return Prediction(
        "latency", c.row.label, c.row.line, c.gpu_id, held, c.row.measured_ms, c.predict_ms(eff),
        c.row.tp, c.row.model, c.is_moe,
    )  # fmt: skip


def cross_validate(
    catalog: Catalog,
    thr: Sequence[TrtllmCase],
    lat: Sequence[LatencyCase],
    folds: int = FOLDS,
    layer_overhead: bool = LAYER_OVERHEAD,
) -> list[Prediction]:
    """Each row predicted by a fit that saw no row of its (model, GPU, tp) configuration, from
    either source. A row whose GPU has no rows left in its fold's fit is not predicted."""
    fold = config_folds([config_of_trtllm(c) for c in thr] + [c.row.config for c in lat], folds)
    out: list[Prediction] = []
    for k in sorted(set(fold.values())):
        thr_fit = [c for c in thr if fold[config_of_trtllm(c)] != k]
        lat_fit = [c for c in lat if fold[c.row.config] != k]
        fit = fit_joint(catalog, thr_fit, lat_fit, layer_overhead=layer_overhead)
        for c in thr:
            if fold[config_of_trtllm(c)] == k and c.gpu_id in fit.efficiency and fit.n_throughput[c.gpu_id]:
                out.append(_trtllm_prediction(c, fit.efficiency[c.gpu_id], True))
        for c in lat:
            if fold[c.row.config] == k and c.gpu_id in fit.efficiency and fit.n_throughput[c.gpu_id]:
                out.append(_latency_prediction(c, fit.efficiency[c.gpu_id], True))
    return sorted(out, key=lambda p: (p.source, p.line))


def calibrate(
    catalog: Catalog,
    trtllm_rows=None,
    splitwise_rows=None,
    latency_rows=None,
    folds: int = FOLDS,
    layer_overhead: bool = LAYER_OVERHEAD,
) -> Calibration:
    trtllm_rows = load_trtllm_rows() if trtllm_rows is None else trtllm_rows
    splitwise_rows = load_splitwise_rows() if splitwise_rows is None else splitwise_rows
    skipped = [(r.label, r.skip_reason) for r in trtllm_rows if r.skip_reason]
    skipped += [(r.label, r.skip_reason) for r in splitwise_rows if r.skip_reason]
    thr = trtllm_cases(catalog, trtllm_rows)
    # A GPU with latency rows but no throughput rows has no bandwidth or compute of its own to fit
    # (one configuration cannot separate them from its overheads): its rows check the factors it
    # borrows instead, and are fitted on by nothing.
    measured = {c.gpu_id for c in thr}
    lat_all = latency_cases(catalog, latency_rows)
    lat = [c for c in lat_all if c.gpu_id in measured]
    joint = fit_joint(catalog, thr, lat, layer_overhead=layer_overhead)
    trtllm = [_trtllm_prediction(c, joint.efficiency[c.gpu_id], False) for c in thr]
    latency = [_latency_prediction(c, joint.efficiency[c.gpu_id], False) for c in lat]
    held = cross_validate(catalog, thr, lat, folds, layer_overhead)
    kfold = cross_validate(catalog, thr, lat, KFOLD, layer_overhead) if KFOLD and folds != KFOLD else held
    borrowed_check = []
    for c in lat_all:
        if c.gpu_id not in measured:
            eff, _, _ = borrowed_efficiency(joint, catalog, c.gpu_id)
            if eff is not None:
                borrowed_check.append(_latency_prediction(c, eff, True))

    sw_rows = [r for r in splitwise_rows if r.skip_reason is None]
    splitwise: list[Prediction] = []
    splitwise_own: list[Prediction] = []
    splitwise_fits: dict[str, FitResult] = {}
    for gpu_label in sorted({r.gpu for r in sw_rows}):
        gpu_id = SPLITWISE_GPUS[gpu_label]
        mine = [r for r in sw_rows if r.gpu == gpu_label]
        own = fit_efficiency(splitwise_log_errors(catalog, [r for r in mine if not r.held_out]), NEUTRAL)
        splitwise_fits[gpu_id] = own
        catalog_eff = joint.efficiency.get(gpu_id)
        # With the catalog's factors no splitwise row was fitted: all count as held out.
        for eff, out, own_fit in ((catalog_eff, splitwise, False), (own.efficiency, splitwise_own, True)):
            for r in mine:
                pf, dec = predict_splitwise(catalog, r, eff)
                is_held = r.held_out if own_fit else True
                if r.e2e_consistent:
                    out.append(Prediction("splitwise-prefill", r.label, r.line, gpu_id, is_held, r.prefill_ms, pf, r.tp, r.model))
                out.append(Prediction("splitwise-decode", r.label, r.line, gpu_id, is_held, r.decode_ms_per_step, dec, r.tp, r.model))
    return Calibration(
        joint, trtllm, latency, held, splitwise, splitwise_fits, splitwise_own, skipped, folds, kfold, borrowed_check
    )


# ------------------------------------------------------------------ catalog efficiency blocks

def folds_text(folds: int) -> str:
    return "leave one configuration out" if folds == 0 else f"{folds} folds"


def held_out_stats(cal: Calibration, gpu: str) -> tuple[int, float, float]:
    return summarise([p for p in cal.held_out if p.gpu == gpu])


def fitted_source(cal: Calibration, catalog: Catalog, gpu: str) -> str:
    j = cal.joint
    fam = interconnect_family(catalog.gpu(gpu))
    fit = j.throughput.get(gpu)
    at = f"; ended on a bound: {', '.join(fit.at_bounds)}" if fit and fit.at_bounds else ""
    n, med, worst = held_out_stats(cal, gpu)
    return (
        f"joint fit by bench/calibration.py: bandwidth, compute, interconnect on data/measured/{TRTLLM_FILE} "
        f"(n={j.n_throughput[gpu]}); step_overhead_ms on {j.overhead_basis[gpu]}; "
        f"allreduce_latency_us is the {fam} value, fitted on {j.allreduce_basis[fam]}; layer_overhead_us on "
        f"{j.layer_basis}. Cross-validated by configuration ({folds_text(cal.folds)}, "
        f"no (model, GPU, tp) seen in its own fit): held-out median abs error {med:.1f}% (worst {worst:.1f}%, n={n}){at}"
    )


def rounded(eff: Efficiency, source: str, borrowed_from: str | None = None) -> Efficiency:
    return eff.model_copy(
        update={
            "bandwidth": round(eff.bandwidth, 3),
            "compute": round(eff.compute, 3),
            "step_overhead_ms": round(eff.step_overhead_ms, 2),
            "allreduce_latency_us": round(eff.allreduce_latency_us, 1),
            "interconnect": round(eff.interconnect, 3),
            "layer_overhead_us": round(eff.layer_overhead_us, 1),
            "source": source,
            "borrowed_from": borrowed_from,
        }
    )


def borrowed_efficiency(joint: JointFit, catalog: Catalog, gpu_id: str) -> tuple[Efficiency | None, str, str]:
    """The factors a GPU without throughput rows borrows: BORROWED's donor, or the first measured
    GPU of its architecture, with its own interconnect family's all-reduce latency where the fit
    has one. Returns (efficiency, why this donor, where the all-reduce latency comes from) with the
    source left to the caller; (None, "", "") when there is no donor."""
    measured = sorted(g for g, n in joint.n_throughput.items() if n)
    gpu = catalog.gpu(gpu_id)
    donor, why = BORROWED.get(gpu_id, (None, ""))
    if donor is None:
        same_arch = [g for g in measured if catalog.gpu(g).arch == gpu.arch]
        donor, why = (same_arch[0], f"same {gpu.arch} architecture") if same_arch else (None, "")
    if donor not in measured:
        return None, "", ""
    fam = interconnect_family(gpu)
    eff = joint.efficiency[donor].model_copy(update={"borrowed_from": donor})
    if fam in joint.allreduce_us and joint.allreduce_basis[fam] != "no tensor-parallel rows: not fitted":
        eff = eff.model_copy(update={"allreduce_latency_us": joint.allreduce_us[fam]})
        ar = f"allreduce_latency_us is the {fam} value ({joint.allreduce_basis[fam]})"
    else:
        ar = f"allreduce_latency_us is {donor}'s too: no {fam} measurement"
    return eff, why, ar


def catalog_efficiencies(cal: Calibration, catalog: Catalog) -> tuple[dict[str, Efficiency], list[str]]:
    """Efficiency block per catalog GPU: fitted where measured, borrowed (and marked so) otherwise.
    A borrowing GPU with published latency rows says how far its borrowed factors miss them.
    Returns (blocks, warnings); a GPU with neither keeps its block and gets a warning."""
    j = cal.joint
    measured = {g for g, n in j.n_throughput.items() if n}
    out = {g: rounded(j.efficiency[g], fitted_source(cal, catalog, g)) for g in sorted(measured)}
    warnings = []
    for gpu_id in catalog.gpus:
        if gpu_id in out:
            continue
        eff, why, ar = borrowed_efficiency(j, catalog, gpu_id)
        if eff is None:
            warnings.append(f"{gpu_id}: no measurements and no GPU to borrow from; efficiency left as it is")
            continue
        donor = eff.borrowed_from
        n, med, _ = held_out_stats(cal, donor)
        checked = [p for p in cal.borrowed_check if p.gpu == gpu_id]
        check = ""
        if checked:
            signed = [p.signed_error_pct for p in checked]
            check = (
                f"; CHECKED against {len(checked)} published latency rows of this GPU in data/measured/{LATENCY_FILE} "
                f"(fitted on by nothing): these factors predict {min(signed):+.0f}% to {max(signed):+.0f}% of the "
                f"measured time{' (optimistic)' if max(signed) < 0 else ''}"
            )
        out[gpu_id] = rounded(
            eff,
            f"UNVERIFIED: borrowed from {donor} ({why}; no throughput measurements of this GPU): factors of the "
            f"joint fit by bench/calibration.py on {donor}'s rows (held-out median abs error {med:.1f}% on {donor}, "
            f"n={n}); {ar}{check}",
            borrowed_from=donor,
        )
    return dict(sorted(out.items())), warnings


def efficiency_lines(eff: Efficiency, indent: str = "    ") -> list[str]:
    return [
        f"{indent}bandwidth: {eff.bandwidth:g}\n",
        f"{indent}compute: {eff.compute:g}\n",
        f"{indent}step_overhead_ms: {eff.step_overhead_ms:g}\n",
        f"{indent}allreduce_latency_us: {eff.allreduce_latency_us:g}\n",
        f"{indent}interconnect: {eff.interconnect:g}\n",
        f"{indent}layer_overhead_us: {eff.layer_overhead_us:g}\n",
        f"{indent}source: {json.dumps(eff.source, ensure_ascii=True)}\n",
        *([f"{indent}borrowed_from: {eff.borrowed_from}\n"] if eff.borrowed_from else []),
    ]


_TOP_KEY = re.compile(r"^([A-Za-z0-9][\w.\-]*):\s*(#.*)?$")
_EFFICIENCY = re.compile(r"^  efficiency:\s*(#.*)?$")


def rewrite_efficiency_blocks(text: str, blocks: Mapping[str, Efficiency]) -> str:
    """gpus.yaml text with the `efficiency:` block of each GPU in `blocks` replaced, every
    other line kept byte for byte. The block is the lines after `  efficiency:` indented
    deeper than two spaces. ValueError if a GPU or its block is not found."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    current = None
    done = set()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _TOP_KEY.match(line)
        if m:
            current = m.group(1)
        if current in blocks and current not in done and _EFFICIENCY.match(line):
            out.append(line)
            i += 1
            while i < len(lines) and lines[i].startswith("   ") and lines[i].strip():
                i += 1
            out.extend(efficiency_lines(blocks[current]))
            done.add(current)
            continue
        out.append(line)
        i += 1
    missing = sorted(set(blocks) - done)
    if missing:
        raise ValueError(f"no `efficiency:` block found for: {', '.join(missing)}")
    return "".join(out)
