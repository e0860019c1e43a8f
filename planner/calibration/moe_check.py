"""The speed model against published throughput of mixtures of experts, fitted on by nothing.

The efficiency factors are fitted on dense models only (data/measured/trtllm_offline_throughput.csv
holds no MoE row). TensorRT-LLM's perf-overview page also publishes offline maximum throughput of
four MoE models (data/measured/trtllm_moe_offline_throughput.csv); each row is predicted exactly as a
dense row is (predict.TrtllmCase: the row's configuration on the trtllm-offline profile, the
resident count where memory or the sequence cap binds). Only the one-GPU rows count in the summary
a plan's report quotes: on several GPUs the page ran MoE models with expert parallelism and
attention data parallelism (`--ep`, `enable_attention_dp`), which is not the tensor-parallel replica
the planner models, so those rows mix two differences; bench/calibration.py prints them apart.

The summary is data, not code: `bench/calibration.py --write` writes it to
data/measured/moe_check.yaml and a test recomputes it (tests/test_moe_check.py)."""

from __future__ import annotations

import dataclasses
import functools
import statistics
from dataclasses import dataclass

import yaml

from planner.calibration.measured import TrtllmRow, load_trtllm_rows, measured_dir
from planner.calibration.predict import TrtllmCase
from planner.catalog import Catalog
from planner.yamlio import load_yaml

MOE_FILE = "trtllm_moe_offline_throughput.csv"
CHECK_FILE = "moe_check.yaml"


@dataclass(frozen=True)
class MoePrediction:
    row: TrtllmRow
    predicted_tok_s_per_gpu: float

    @property
    def error_pct(self) -> float:
        """Signed: positive where the model predicts more throughput than was measured (optimistic)."""
        return 100.0 * (self.predicted_tok_s_per_gpu / self.row.measured_tok_s_per_gpu - 1.0)


def moe_predictions(catalog: Catalog) -> list[MoePrediction]:
    """Every row of the MoE file the catalog can build, predicted with the catalog's factors."""
    rows = load_trtllm_rows(measured_dir() / MOE_FILE)
    return [MoePrediction(r, TrtllmCase.of(catalog, r).predict()) for r in rows if r.skip_reason is None]


@dataclass(frozen=True)
class MoeCheck:
    """What the one-GPU MoE rows say of the speed model (module docstring)."""

    rows: int
    models: tuple[str, ...]
    gpus: tuple[str, ...]
    median_error_pct: float
    low_error_pct: float
    high_error_pct: float

    @classmethod
    def of(cls, predictions: list[MoePrediction]) -> MoeCheck:
        one_gpu = [p for p in predictions if p.row.tp == 1]
        errors = [p.error_pct for p in one_gpu]
        return cls(
            rows=len(one_gpu),
            models=tuple(sorted({p.row.model for p in one_gpu})),
            gpus=tuple(sorted({p.row.gpu for p in one_gpu})),
            median_error_pct=round(statistics.median(errors), 1),
            low_error_pct=round(min(errors), 1),
            high_error_pct=round(max(errors), 1),
        )

    def as_yaml_fields(self) -> dict:
        return {**dataclasses.asdict(self), "models": list(self.models), "gpus": list(self.gpus)}

    @property
    def optimistic(self) -> bool:
        """The model predicts more throughput than was measured, at the median."""
        return self.median_error_pct > 0

    def yaml_text(self) -> str:
        """data/measured/moe_check.yaml as bench/calibration.py --write writes it."""
        return ("# Written by `python bench/calibration.py --write` (planner/calibration/moe_check.py): the speed\n"
                f"# model against the one-GPU rows of {MOE_FILE}, fitted on by nothing.\n"
                "# Errors are predicted / measured - 1 in percent: positive overstates the throughput.\n"
                + yaml.safe_dump(self.as_yaml_fields(), sort_keys=False))

    def finding(self) -> str:
        """The check in one clause, for a plan's warning."""
        direction = "more" if self.optimistic else "less"
        return (f"on {self.rows} published offline-throughput rows of MoE models on one GPU "
                f"({', '.join(self.models)} on {', '.join(self.gpus)}: TensorRT-LLM's perf overview, "
                f"data/measured/{MOE_FILE}; fitted on by nothing) the speed model predicts a median "
                f"{abs(self.median_error_pct):.0f}% {direction} throughput than measured "
                f"({self.low_error_pct:+.0f}% to {self.high_error_pct:+.0f}%)")


@functools.cache
def committed_moe_check() -> MoeCheck:
    """The summary bench/calibration.py --write last wrote (data/measured/moe_check.yaml)."""
    raw = load_yaml(measured_dir() / CHECK_FILE, builtin=True)
    return MoeCheck(**{**raw, "models": tuple(raw["models"]), "gpus": tuple(raw["gpus"])})
