"""The published measurements as rows: the CSV files under data/measured/, and the labels
that map their GPUs and models to catalog ids (package docstring: what each source is)."""

from __future__ import annotations

import csv
import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from planner.catalog import Model, data_dir
from planner.yamlio import load_yaml, validate

T = TypeVar("T")

TRTLLM_FILE = "trtllm_offline_throughput.csv"
SPLITWISE_FILE = "splitwise_perf_model_summary.csv"
VIDUR_FILE = "vidur_linear_subset.csv"

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
    # Mixtures of experts: only in trtllm_moe_offline_throughput.csv, which nothing is fitted on
    # (moe_check).
    "Llama-4-Scout": "llama-4-scout",
    "Llama-4-Maverick": "llama-4-maverick",
    "Qwen3-30B-A3B": "qwen3-30b-a3b",
    "Qwen3-235B-A22B": "qwen3-235b-a22b",
}
SPLITWISE_GPUS = {"a100-80gb": "a100-80gb", "h100-80gb": "h100-sxm"}  # h100-80gb-pcap: power-capped, skipped


def measured_dir() -> Path:
    return data_dir() / "measured"


@functools.cache
def splitwise_models() -> dict[str, Model]:
    """Models of the splitwise rows (data/measured/splitwise_models.yaml: calibration only, not in
    the catalog), keyed by the CSV's model label."""
    path = measured_dir() / "splitwise_models.yaml"
    raw = load_yaml(path)
    return {label: validate(Model, fields, where=str(path), prefix=label) for label, fields in raw.items()}


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


# A field's CSV text -> its value, by the field's annotation.
_CONVERT: dict[str, Callable[[str], object]] = {"str": str, "int": int, "float": float, "bool": lambda t: t.strip() == "True"}


def _read_rows(cls: type[T], path: Path, columns: Mapping[str, str]) -> list[T]:
    """Every data row of the CSV file as a `cls`: each field from the column of its name (or
    the one `columns` gives for it), converted by its annotation; `line` is the 1-based row."""
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    fields = [f for f in dataclasses.fields(cls) if f.name != "line"]
    return [
        cls(line=i, **{f.name: _CONVERT[f.type](r[columns.get(f.name, f.name)]) for f in fields})
        for i, r in enumerate(rows, start=1)
    ]


def load_trtllm_rows(path: Path | None = None) -> list[TrtllmRow]:
    return _read_rows(TrtllmRow, path or measured_dir() / TRTLLM_FILE, {"measured_tok_s_per_gpu": "output_tok_s_per_gpu"})


def load_splitwise_rows(path: Path | None = None) -> list[SplitwiseRow]:
    return _read_rows(SplitwiseRow, path or measured_dir() / SPLITWISE_FILE, {"e2e_consistent": "e2e_consistent_10pct"})
