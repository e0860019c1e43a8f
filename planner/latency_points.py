"""Published per-token latencies at low and mid concurrency, predicted with the planner's models.

The rows are in `data/measured/latency_published.csv` (sources, licences and engine
versions per row; data/measured/README.md). Two kinds of measurement, each predicted with
what the planner itself uses, so the fit checks the planner and not a side model:

- `batch_e2e_ms`: vLLM's latency benchmark (`benchmarks/benchmark_latency.py`): one static
  batch of `concurrency` prompts of `input_len` tokens generating `output_len` tokens each,
  mean wall time of the whole batch. Predicted as one forward pass over the batch's prompt
  tokens (StepModel.prompt_pass_s: decode_step_s's phases over c·p tokens, each prompt attending
  causally over its own p²/2 pairs, or its window's: the weights read, the prefill FLOPs, the
  overhead and the all-reduces a standalone pass pays) plus
  output_len - 1 decode steps of c sequences whose context grows from p + 1 to p + o - 1.
- `mean_itl_ms`: a serving benchmark's mean inter-token latency at a fixed number of
  concurrent requests (closed loop: each user sends its next request when the last one
  ends), constant prompt and output lengths. Predicted as capacity.ReplicaModel.itl_s(c, seen=c)
  of Histogram.constant(input_len, output_len): the mean step at c resident sequences (the
  request among them), stretched by the prefills of new requests that ride in decode steps,
  plus the prefill backlog a request meets, as the planner sizes replicas for a mean-ITL target
  (there with Poisson arrivals: the request's own step at N + 1).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from planner.capacity import SLO, ReplicaModel
from planner.catalog import Catalog, Efficiency, data_dir
from planner.deployment import Deployment, make_deployment
from planner.histogram import Histogram
from planner.memory import budget_ladder, kv_bytes_per_token
from planner.paged import TokenProfile, token_profile
from planner.roofline import StepModel

LATENCY_FILE = "latency_published.csv"
METRICS = ("batch_e2e_ms", "mean_itl_ms")
COLUMNS = (
    "config_source", "engine", "engine_version", "gpu", "model", "model_published", "weight_dtype",
    "kv_dtype", "tp", "concurrency", "input_len", "output_len", "metric", "measured_ms", "derivation",
    "source", "licence",
)  # fmt: skip
# The engine profile (data/engines.yaml) each measured engine is predicted with.
ENGINE_PROFILES = {"vllm": "vllm", "trtllm": "trtllm", "sglang": "sglang"}


@dataclass(frozen=True)
class LatencyRow:
    """One row of latency_published.csv; `line` is its 1-based data row number."""

    line: int
    config_source: str
    engine: str
    engine_version: str
    gpu: str
    model: str
    weight_dtype: str
    kv_dtype: str
    tp: int
    concurrency: int
    input_len: int
    output_len: int
    metric: str
    measured_ms: float
    derivation: str
    source: str
    licence: str

    @property
    def config(self) -> tuple[str, str, int]:
        """(model, GPU, tp): the unit of hold-out."""
        return (self.model, self.gpu, self.tp)

    @property
    def label(self) -> str:
        return (
            f"{self.config_source} {self.gpu} {self.model} {self.weight_dtype} tp{self.tp} "
            f"c{self.concurrency} {self.input_len}/{self.output_len}"
        )


def _parse(path: Path, line: int, raw: dict[str, str]) -> LatencyRow:
    where = f"{path.name} data row {line}"
    missing = [c for c in COLUMNS if not (raw.get(c) or "").strip()]
    if missing:
        raise ValueError(f"{where}: empty or missing {', '.join(missing)}")
    if raw["metric"] not in METRICS:
        raise ValueError(f"{where}: metric '{raw['metric']}' is not one of {', '.join(METRICS)}")
    if raw["engine"] not in ENGINE_PROFILES:
        raise ValueError(f"{where}: engine '{raw['engine']}' has no profile (known: {', '.join(ENGINE_PROFILES)})")
    try:
        ints = {k: int(raw[k]) for k in ("tp", "concurrency", "input_len", "output_len")}
        measured = float(raw["measured_ms"])
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if min(ints.values()) < 1 or not measured > 0:
        raise ValueError(f"{where}: tp, concurrency, lengths and measured_ms must be positive")
    text = {k: raw[k].strip() for k in COLUMNS if k not in ints and k != "measured_ms"}
    text.pop("model_published")
    return LatencyRow(line=line, measured_ms=measured, **ints, **text)


def load_latency_rows(path: Path | None = None) -> list[LatencyRow]:
    """Rows of the latency file; ValueError naming the file and row for a malformed one."""
    path = path or data_dir() / "measured" / LATENCY_FILE
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        absent = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if absent:
            raise ValueError(f"{path.name}: missing columns {', '.join(absent)}")
        return [_parse(path, i, r) for i, r in enumerate(reader, start=1)]


def _with_efficiency(dep: Deployment, efficiency: Efficiency) -> Deployment:
    return replace(dep, gpu=dep.gpu.model_copy(update={"efficiency": efficiency}))


@dataclass(frozen=True, eq=False)
class LatencyCase:
    """A latency row with its deployment (and token profile) built once."""

    row: LatencyRow
    dep: Deployment
    prof: TokenProfile

    @classmethod
    def of(cls, catalog: Catalog, row: LatencyRow) -> LatencyCase:
        dep = make_deployment(
            catalog, model=row.model, gpu=row.gpu, tp=row.tp, weight_dtype=row.weight_dtype,
            kv_dtype=row.kv_dtype, max_model_len=row.input_len + row.output_len,
            engine=ENGINE_PROFILES[row.engine],
        )  # fmt: skip
        prof = token_profile(
            Histogram.constant(row.input_len, row.output_len),
            block_size=dep.block_size,
            chunk_tokens=dep.engine.max_num_batched_tokens,
        )
        return cls(row, dep, prof)

    @property
    def gpu_id(self) -> str:
        return self.dep.gpu.id

    @property
    def is_moe(self) -> bool:
        return bool(self.dep.model.num_experts)

    def predict_ms(self, efficiency: Efficiency | None = None) -> float:
        dep = self.dep if efficiency is None else _with_efficiency(self.dep, efficiency)
        if self.row.metric == "batch_e2e_ms":
            return batch_e2e_s(dep, self.row.concurrency, self.row.input_len, self.row.output_len) * 1e3
        rm = ReplicaModel(dep, self.prof, SLO(), budget_ladder(dep))
        c = float(self.row.concurrency)
        return rm.itl_s(c, seen=c) * 1e3  # a closed loop: c sequences, the request's own among them


def batch_e2e_s(dep: Deployment, batch: int, prompt_tokens: int, output_tokens: int) -> float:
    """Wall time of one static batch (vLLM benchmark_latency): a prefill pass over batch x prompt
    tokens, then output_tokens - 1 decode steps of `batch` sequences, context p + j at step j."""
    step = StepModel.of(dep)
    prefill = step.prompt_pass_s(batch, prompt_tokens)
    context = prompt_tokens + np.arange(1, output_tokens, dtype=float)
    cache = batch * context * kv_bytes_per_token(dep.model, dep.kv_dtype, dep.tp)
    decode = step.decode_step_s(np.full_like(context, batch), cache, batch * context)
    return float(prefill + np.sum(decode))


def latency_cases(catalog: Catalog, rows: list[LatencyRow] | None = None) -> list[LatencyCase]:
    return [LatencyCase.of(catalog, r) for r in (load_latency_rows() if rows is None else rows)]
