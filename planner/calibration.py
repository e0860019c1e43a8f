"""Calibration of the roofline's efficiency factors against published measurements.

The measurements are copied into `data/measured/` (its README.md gives sources and
licences). Each row is predicted with the planner's own model, and per GPU the five
factors of `catalog.Efficiency` (bandwidth, compute, step_overhead_ms,
allreduce_latency_us, interconnect) are fitted to one source of rows; the rows not
fitted on are reported separately, as the measurements' README asks.

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
Per GPU, scipy.optimize.least_squares minimises the squared log error
log(predicted / measured) over the FIT rows, within BOUNDS, from a fixed set of
starting points (deterministic). TensorRT-LLM rows are held out by whole
(ISL, OSL) scenario, HELD_OUT_SCENARIOS, so the v0.17 and v1.0 measurements of one
configuration never sit on both sides. The two all-reduce factors, the latency and
`interconnect` (achieved / datasheet link bandwidth in the all-reduces), are fitted
only where the fit rows include tensor parallelism: at tp = 1 there is no all-reduce,
so single-GPU rows say nothing about either, and a GPU whose fit rows all have tp = 1
keeps both pinned at the values its catalog block already holds (interconnect
defaults to 1.0, the datasheet link), as its efficiency source then says. The catalog
takes the TensorRT-LLM fit (a production engine); splitwise rows are predicted with
those factors as a cross-engine check, and fitted on their own (every third row held
out) only to test the model's form. GPUs without measurements borrow a measured GPU's
factors (BORROWED).
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
from planner.catalog import Catalog, Efficiency, Model, data_dir
from planner.deployment import Deployment, make_deployment
from planner.histogram import Histogram
from planner.memory import BudgetLadder, kv_bytes_per_token
from planner.paged import TokenProfile, token_profile
from planner.roofline import StepModel, causal_pairs
from planner.yamlio import load_yaml, validate

TRTLLM_FILE = "trtllm_offline_throughput.csv"
SPLITWISE_FILE = "splitwise_perf_model_summary.csv"
VIDUR_FILE = "vidur_linear_subset.csv"
TRTLLM_ENGINE = "trtllm-offline"

# Measured GPU label -> catalog id. GH200 and GB200 rows are skipped: not in the catalog.
TRTLLM_GPUS = {
    "H100-80GB": "h100-sxm",
    "H200-141GB": "h200",
    "A100-SXM4-80GB": "a100-80gb",
    "A100-80GB": "a100-80gb",
    "L40S-48GB": "l40s",
    "B200-180GB": "b200",
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

# The 2nd, 5th and 8th of the ten (ISL, OSL) scenarios in sorted order.
HELD_OUT_SCENARIOS = frozenset({(128, 2048), (1000, 1000), (2048, 2048)})

SPLITWISE_GPUS = {"a100-80gb": "a100-80gb", "h100-80gb": "h100-sxm"}  # h100-80gb-pcap: power-capped, skipped

FACTORS = ("bandwidth", "compute", "step_overhead_ms", "allreduce_latency_us", "interconnect")
# Identifiable only from tensor-parallel rows (StepModel.allreduce_s is zero at tp = 1).
ALLREDUCE_FACTORS = ("allreduce_latency_us", "interconnect")
BOUNDS = {
    "bandwidth": (0.3, 0.95),
    "compute": (0.2, 0.95),
    "step_overhead_ms": (0.0, 10.0),
    "allreduce_latency_us": (0.0, 100.0),
    "interconnect": (0.2, 1.0),
}
STARTS = ((0.8, 0.6, 2.0, 10.0, 0.9), (0.6, 0.4, 5.0, 50.0, 0.5), (0.9, 0.8, 0.5, 2.0, 0.7))
# Offline max-throughput rows run at large batches, where a fixed per-step cost and a
# slightly lower bandwidth are interchangeable: their held-out error is flat in
# step_overhead_ms from 0.5 to 10 ms (bench/calibration.py prints the profile). So
# the TensorRT-LLM fit carries a Gaussian prior on it, (mean, sd) in ms, as one more
# residual. At 2 ms the fitted bandwidth of A100 and H100 (0.77, 0.84) is close to what
# vidur measured for GEMMs alone at one token (0.78, 0.86; data/measured/vidur_linear_subset.csv).
TRTLLM_PRIORS = {"step_overhead_ms": (2.0, 1.0)}
SCALES = (0.1, 0.1, 1.0, 10.0, 0.1)  # per factor, in FACTORS order, as STARTS

# GPUs without measurements -> (measured GPU, why that one).
BORROWED = {
    "h100-pcie": ("h100-sxm", "same Hopper architecture"),
    "a100-40gb": ("a100-80gb", "same Ampere A100"),
    "a10g": ("a100-80gb", "same Ampere architecture"),
    "l4": ("l40s", "same Ada architecture"),
    "mi300x": ("h100-sxm", "no AMD measurements in data/measured; an HBM3 GPU of the same class stands in, UNVERIFIED"),
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
    def held_out(self) -> bool:
        return (self.input_len, self.output_len) in HELD_OUT_SCENARIOS

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
    fit_allreduce: bool = True,
    priors: Mapping[str, tuple[float, float]] | None = None,
) -> FitResult:
    """Bounded least squares of `log_errors(efficiency)` over the factors in FACTORS (the
    ALLREDUCE_FACTORS only if `fit_allreduce`; otherwise they keep `base`'s values), plus
    (value - mean) / sd for each factor with a prior. Every start in STARTS is tried and
    the lowest cost kept, first on ties: deterministic."""
    priors = dict(priors or {})
    free = FACTORS if fit_allreduce else tuple(f for f in FACTORS if f not in ALLREDUCE_FACTORS)
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
    for start in STARTS:
        res = least_squares(
            residuals,
            np.asarray([start[i] for i in index], float),
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


# ------------------------------------------------------------------ the whole calibration


@dataclass(frozen=True)
class Prediction:
    source: str  # "trtllm" | "splitwise-prefill" | "splitwise-decode"
    label: str
    line: int
    gpu: str  # catalog id
    held_out: bool
    measured: float
    predicted: float

    @property
    def error_pct(self) -> float:
        return abs_pct_error(self.predicted, self.measured)

    @property
    def signed_error_pct(self) -> float:
        return 100.0 * (self.predicted / self.measured - 1.0)


@dataclass(frozen=True)
class GpuFit:
    gpu: str
    labels: tuple[str, ...]  # measured GPU labels
    dtypes: tuple[str, ...]
    fit: FitResult
    n_fit: int
    n_held: int
    fit_median_pct: float
    held_median_pct: float
    held_worst_pct: float


@dataclass(frozen=True)
class Calibration:
    fits: dict[str, GpuFit]  # TensorRT-LLM fit per catalog GPU (what the catalog takes)
    trtllm: list[Prediction]  # with the fitted factors
    splitwise: list[Prediction]  # with the TensorRT-LLM factors: cross-engine check, nothing fitted
    splitwise_fits: dict[str, FitResult]  # splitwise-only fits (diagnostic)
    splitwise_own: list[Prediction]  # with the splitwise-only factors
    skipped: list[tuple[str, str]]  # (row label, reason)


def summarise(preds: Sequence[Prediction]) -> tuple[int, float, float]:
    """(n, median, worst) absolute percentage error; NaNs for no rows."""
    if not preds:
        return 0, math.nan, math.nan
    e = np.array([p.error_pct for p in preds])
    return len(e), float(np.median(e)), float(e.max())


def calibrate(catalog: Catalog, trtllm_rows=None, splitwise_rows=None) -> Calibration:
    trtllm_rows = load_trtllm_rows() if trtllm_rows is None else trtllm_rows
    splitwise_rows = load_splitwise_rows() if splitwise_rows is None else splitwise_rows
    skipped = [(r.label, r.skip_reason) for r in trtllm_rows if r.skip_reason]
    skipped += [(r.label, r.skip_reason) for r in splitwise_rows if r.skip_reason]
    cases = trtllm_cases(catalog, trtllm_rows)

    fits: dict[str, GpuFit] = {}
    trtllm: list[Prediction] = []
    for gpu_id in sorted({c.gpu_id for c in cases}):
        mine = [c for c in cases if c.gpu_id == gpu_id]
        fit_cases = [c for c in mine if not c.row.held_out]
        base = catalog.gpu(gpu_id).efficiency
        result = fit_efficiency(
            trtllm_log_errors(fit_cases),
            base,
            fit_allreduce=any(c.row.tp > 1 for c in fit_cases),
            priors=TRTLLM_PRIORS,
        )
        preds = [
            Prediction("trtllm", c.row.label, c.row.line, gpu_id, c.row.held_out, c.row.measured_tok_s_per_gpu, c.predict(result.efficiency))
            for c in mine
        ]
        trtllm += preds
        _, fit_med, _ = summarise([p for p in preds if not p.held_out])
        n_held, held_med, held_worst = summarise([p for p in preds if p.held_out])
        fits[gpu_id] = GpuFit(
            gpu=gpu_id,
            labels=tuple(sorted({c.row.gpu for c in mine})),
            dtypes=tuple(sorted({c.row.dtype for c in mine})),
            fit=result,
            n_fit=len(fit_cases),
            n_held=n_held,
            fit_median_pct=fit_med,
            held_median_pct=held_med,
            held_worst_pct=held_worst,
        )
    trtllm.sort(key=lambda p: p.line)

    sw_rows = [r for r in splitwise_rows if r.skip_reason is None]
    splitwise: list[Prediction] = []
    splitwise_own: list[Prediction] = []
    splitwise_fits: dict[str, FitResult] = {}
    for gpu_label in sorted({r.gpu for r in sw_rows}):
        gpu_id = SPLITWISE_GPUS[gpu_label]
        mine = [r for r in sw_rows if r.gpu == gpu_label]
        own = fit_efficiency(
            splitwise_log_errors(catalog, [r for r in mine if not r.held_out]), catalog.gpu(gpu_id).efficiency
        )
        splitwise_fits[gpu_id] = own
        catalog_eff = fits[gpu_id].fit.efficiency if gpu_id in fits else None
        # With the catalog's factors no splitwise row was fitted: all count as held out.
        for eff, out, own_fit in ((catalog_eff, splitwise, False), (own.efficiency, splitwise_own, True)):
            for r in mine:
                pf, dec = predict_splitwise(catalog, r, eff)
                is_held = r.held_out if own_fit else True
                if r.e2e_consistent:
                    out.append(Prediction("splitwise-prefill", r.label, r.line, gpu_id, is_held, r.prefill_ms, pf))
                out.append(Prediction("splitwise-decode", r.label, r.line, gpu_id, is_held, r.decode_ms_per_step, dec))
    return Calibration(fits, trtllm, splitwise, splitwise_fits, splitwise_own, skipped)


# ------------------------------------------------------------------ catalog efficiency blocks

HELD_OUT_TEXT = ", ".join(f"{i}/{o}" for i, o in sorted(HELD_OUT_SCENARIOS))


def fitted_source(fit: GpuFit) -> str:
    at = f"; ended on a bound: {', '.join(fit.fit.at_bounds)}" if fit.fit.at_bounds else ""
    eff = fit.fit.efficiency
    fixed = (
        ""
        if "interconnect" in fit.fit.free
        else f"; allreduce_latency_us ({eff.allreduce_latency_us:g}) and interconnect ({eff.interconnect:g}) not fitted "
        "(no tensor-parallel rows: unidentifiable), kept at the catalog's values"
    )
    return (
        f"fit by bench/calibration.py to data/measured/{TRTLLM_FILE} (TensorRT-LLM perf-overview v0.17/v1.0, "
        f"offline max throughput, {'/'.join(fit.dtypes)} weights) rows gpu={'/'.join(fit.labels)} "
        f"(n={fit.n_fit} fit; ISL/OSL scenarios {HELD_OUT_TEXT} held out, n={fit.n_held}): "
        f"held-out median abs error {fit.held_median_pct:.1f}% (worst {fit.held_worst_pct:.1f}%), "
        f"fit median {fit.fit_median_pct:.1f}%. compute is relative to the {'/'.join(fit.dtypes)} peak and "
        f"applied to every dtype{at}{fixed}"
    )


def rounded(eff: Efficiency, source: str) -> Efficiency:
    return eff.model_copy(
        update={
            "bandwidth": round(eff.bandwidth, 3),
            "compute": round(eff.compute, 3),
            "step_overhead_ms": round(eff.step_overhead_ms, 2),
            "allreduce_latency_us": round(eff.allreduce_latency_us, 1),
            "interconnect": round(eff.interconnect, 3),
            "source": source,
        }
    )


def catalog_efficiencies(cal: Calibration, catalog: Catalog) -> tuple[dict[str, Efficiency], list[str]]:
    """Efficiency block per catalog GPU: fitted where measured, borrowed otherwise.
    Returns (blocks, warnings); a GPU with neither keeps its block and gets a warning."""
    out = {g: rounded(f.fit.efficiency, fitted_source(f)) for g, f in cal.fits.items()}
    warnings = []
    for gpu_id, gpu in catalog.gpus.items():
        if gpu_id in out:
            continue
        donor, why = BORROWED.get(gpu_id, (None, ""))
        if donor is None:
            same_arch = sorted(g for g in cal.fits if catalog.gpu(g).arch == gpu.arch)
            donor, why = (same_arch[0], f"same {gpu.arch} architecture") if same_arch else (None, "")
        if donor not in out:
            warnings.append(f"{gpu_id}: no measurements and no GPU to borrow from; efficiency left as it is")
            continue
        d = cal.fits[donor]
        out[gpu_id] = rounded(
            d.fit.efficiency,
            f"borrowed from {donor} ({why}; no measurements of this GPU): factors fitted by bench/calibration.py "
            f"to data/measured/{TRTLLM_FILE} rows gpu={'/'.join(d.labels)} (n={d.n_fit} fit), held-out median abs "
            f"error {d.held_median_pct:.1f}% on {donor}",
        )
    return dict(sorted(out.items())), warnings


def efficiency_lines(eff: Efficiency, indent: str = "    ") -> list[str]:
    return [
        f"{indent}bandwidth: {eff.bandwidth:g}\n",
        f"{indent}compute: {eff.compute:g}\n",
        f"{indent}step_overhead_ms: {eff.step_overhead_ms:g}\n",
        f"{indent}allreduce_latency_us: {eff.allreduce_latency_us:g}\n",
        f"{indent}interconnect: {eff.interconnect:g}\n",
        f"{indent}source: {json.dumps(eff.source, ensure_ascii=True)}\n",
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
