"""The scenario file: what a planner asks, as a validated YAML document.

Everything but `model` and `traffic` has a default. Unknown keys are errors with a
'did you mean'; every error names the file and the dotted YAML path. Relative
paths inside a scenario are relative to the scenario file.

Sections live in their own modules: `traffic_section` (traffic:), `slo_section` (slo:),
`fleet_section` (gpus:, fleet:), `solver_section` (sizing:, solver:, simulation:) and
`forecast_section` (forecast:, autoscaling:); this module holds the document itself, the model
section's `{config_json: ...}` form, and loading. Every schema class is importable from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from planner.bounds import (
    MAX_GPU_MEMORY_GIB,
    MAX_MIN_REPLICAS,
    MAX_TOKENS,
    MAX_TP,
    Fraction,
    Label,
    Params,
    PositiveTokens,
    real,
    whole,
)
from planner.errors import InputError, closest, did_you_mean
from planner.scenario.fields import OutputName, Strict, histogram_edge
from planner.scenario.fleet_section import FleetPool, GPUCandidate
from planner.scenario.forecast_section import Autoscaling, Forecast, QuarterSpec
from planner.scenario.slo_section import STATISTIC_NAMES, BandSpec, SLOSpec
from planner.scenario.solver_section import Simulation, Sizing, Solver
from planner.scenario.traffic_section import (
    Columns,
    ConstantSource,
    LoadProfileSpec,
    Peak,
    SyntheticSource,
    TrafficSource,
    TrafficSpec,
)
from planner.yamlio import load_yaml, validate, validation_message

__all__ = [
    "DEFAULT_SPLIT_THRESHOLDS",
    "STATISTIC_NAMES",
    "Autoscaling",
    "BandSpec",
    "Columns",
    "ConfigJsonModel",
    "ConstantSource",
    "FleetPool",
    "Forecast",
    "GPUCandidate",
    "LoadProfileSpec",
    "Peak",
    "QuarterSpec",
    "SLOSpec",
    "Scenario",
    "Simulation",
    "Sizing",
    "Solver",
    "SyntheticSource",
    "TrafficSource",
    "TrafficSpec",
    "load_scenario",
    "resolve",
]

DEFAULT_SPLIT_THRESHOLDS = (4096, 8192, 16384, 32768, 65536)  # the standard edges between 4k and 64k tokens


class ConfigJsonModel(Strict):
    """`model: {config_json: path, ...}`: a model read from a Hugging Face config.json."""

    config_json: str = Field(min_length=1, description="path of the config.json, relative to the scenario")
    name: Label = Field("custom-model", description="catalog id to give the model")
    params_total: Params | None = None
    params_active: Params | None = None
    hf_id: str | None = None


class Scenario(Strict):
    name: OutputName
    description: str = ""
    model: str | dict[str, Any] = Field(description="catalog id, an inline model entry, or {config_json: path}")
    catalog: dict[str, Any] | None = Field(None, description="catalog overrides: {gpus: {id: {field: value}}, ...}")
    traffic: TrafficSpec
    context_limit: PositiveTokens | None = Field(None, description="longest prompt+output served [default: the largest histogram edge within the model's]")
    slo: SLOSpec = SLOSpec()
    sizing: Sizing = Sizing()
    gpus: list[str | GPUCandidate] = Field(default_factory=lambda: ["h100-sxm", "h200", "a100-80gb", "l40s"])
    verified_only: StrictBool = Field(
        False, description="consider only GPUs whose efficiency factors were fitted on their own measurements"
    )
    weight_dtypes: list[str] = Field(default_factory=lambda: ["bf16", "fp8"])
    kv_dtypes: list[str] = Field(default_factory=lambda: ["bf16", "fp8"])
    tp: list[whole(ge=1, le=MAX_TP)] = Field(default_factory=lambda: [1, 2, 4, 8])
    engine: str = "vllm"
    long_prefill_token_threshold: whole(ge=0, le=MAX_TOKENS) | None = Field(
        None, description="vLLM's per-request cap on prompt tokens a step (0: off) [default: the engine's]"
    )
    gpu_memory_utilization: Fraction | None = None
    overhead_gib: real(ge=0, le=MAX_GPU_MEMORY_GIB) = 3.0
    split_thresholds: list[PositiveTokens] | None = Field(
        None, description="total-token thresholds to try; no split is always tried [default: 4k, 8k, 16k, 32k, "
        "64k below the limit]; [] for no split"
    )
    min_replicas_per_pool: whole(ge=1, le=MAX_MIN_REPLICAS) = Field(1, description="2 or more for N+1 redundancy")
    homogeneous_pools: StrictBool = Field(True, description="one config per pool")
    lower_context_limit: PositiveTokens | None = Field(None, description="the 'lower limit' lever [default: half the limit]")
    solver: Solver = Solver()
    verify: StrictBool = Field(
        True, description="certify the plan: replay every pool through the simulator against its band targets, "
        "and re-plan a pool that misses at its simulated capacity"
    )
    simulation: Simulation = Simulation()
    fleet: list[FleetPool] | None = Field(
        None, min_length=1, description="a fleet that runs today: check and report it instead of solving for one"
    )
    forecast: Forecast | None = Field(None, description="quarterly forecast section (planner forecast)")
    autoscaling: Autoscaling = Field(Autoscaling(), description="settings of the day's cost policies (traffic.profile)")

    @field_validator("split_thresholds")
    @classmethod
    def _edges(cls, v: list[int] | None) -> list[int] | None:
        if v is None:
            return v
        for t in v:
            histogram_edge(t, "split threshold")
        if len(set(v)) != len(v):
            raise ValueError("split thresholds repeat")
        return sorted(v)

    @field_validator("context_limit", "lower_context_limit")
    @classmethod
    def _limit_edge(cls, v: int | None) -> int | None:
        return histogram_edge(v, "context limit")

    @model_validator(mode="after")
    def _prefix_below_limit(self) -> Scenario:
        limit = self.context_limit
        if limit is not None and self.traffic.shared_prefix_tokens >= limit:
            raise ValueError(
                f"traffic.shared_prefix_tokens {self.traffic.shared_prefix_tokens} must be below the context limit {limit}"
            )
        return self

    @model_validator(mode="after")
    def _one_reserved_discount(self) -> Scenario:
        fc = self.forecast
        if self.autoscaling.reserved_discount is not None and fc is not None and (
            "reserved_discount" in fc.model_fields_set or fc.reserved_prices
        ):
            raise ValueError(
                "give reserved terms once: forecast.reserved_discount / reserved_prices, or autoscaling.reserved_discount"
            )
        return self

    @model_validator(mode="after")
    def _forecast_prices_for_candidates(self) -> Scenario:
        """A committed price for a GPU the scenario never plans with would be ignored: refuse it."""
        if self.forecast is None:
            return self
        known = [g.id for g in self.gpu_candidates]
        for gpu in self.forecast.reserved_prices:
            if gpu not in known:
                missing = did_you_mean(gpu, known, what="GPU", among="the scenario's candidate gpus")
                raise ValueError(f"forecast.reserved_prices: {missing} (a committed price needs the GPU among them)")
        return self

    @field_validator("model")
    @classmethod
    def _config_json_spec(cls, v: str | dict[str, Any]) -> str | dict[str, Any]:
        """`{config_json: path, ...}` has its own keys and types; other mappings are inline entries
        (validated as catalog models once the catalog is known)."""
        if isinstance(v, dict) and "config_json" in v:
            try:
                ConfigJsonModel.model_validate(v)
            except ValidationError as exc:
                raise ValueError(validation_message(exc, ConfigJsonModel)) from None
        return v

    @field_validator("gpus")
    @classmethod
    def _one_entry_per_gpu(cls, v: list[str | GPUCandidate]) -> list[str | GPUCandidate]:
        """Two entries for one GPU type would give it two caps and two prices, one of them ignored; two
        types whose names differ only in '-', '_' or '.' (a catalog's `h100_sxm` beside `h100-sxm`) name
        the same rows of the ILP, which PuLP refused with a traceback."""
        from planner.ilp_solver import lp_name_clash

        ids = [g if isinstance(g, str) else g.id for g in v]
        for i, gpu in enumerate(ids):
            if gpu in ids[:i]:
                raise ValueError(f"gpus[{i}]: {gpu} is listed twice (first as gpus[{ids.index(gpu)}]); give one entry "
                                 "per GPU type, with its cap and price")
        clash = lp_name_clash(ids)
        if clash is not None:
            j, i = clash
            raise ValueError(f"gpus[{i}]: '{ids[i]}' and '{ids[j]}' differ only in characters the ILP's names (and "
                             "its .lp file) do not keep ('-', '_', '.', spaces): rename one in its catalog")
        return v

    @field_validator("tp")
    @classmethod
    def _tp(cls, v: list[int]) -> list[int]:
        for t in v:
            if t < 1 or t & (t - 1):
                raise ValueError(f"tensor-parallel degree {t} must be a power of two")
        return sorted(set(v))

    @field_validator("gpus", "tp", "weight_dtypes", "kv_dtypes")
    @classmethod
    def _nonempty(cls, v: list) -> list:
        if not v:
            raise ValueError("must list at least one")
        return v

    @field_validator("tp", "weight_dtypes", "kv_dtypes", mode="before")
    @classmethod
    def _each_once(cls, v, info: ValidationInfo):
        """A choice listed twice, refused as a GPU listed twice is (`tp: [1, 1]` passed without a word)."""
        if isinstance(v, list):
            for i, x in enumerate(v):
                if x in v[:i]:
                    raise ValueError(f"{info.field_name}[{i}]: {x} is listed twice (first as "
                                     f"{info.field_name}[{v.index(x)}]); list each choice once")
        return v

    @property
    def thresholds(self) -> list[int]:
        """Split thresholds to try: the scenario's, or the standard edges when it names none."""
        return list(DEFAULT_SPLIT_THRESHOLDS) if self.split_thresholds is None else self.split_thresholds

    @property
    def gpu_candidates(self) -> list[GPUCandidate]:
        return [GPUCandidate(id=g) if isinstance(g, str) else g for g in self.gpus]


def load_scenario(path: str | Path) -> tuple[Scenario, Path]:
    """Read and validate a scenario file; returns it and the folder its relative paths start from."""
    path = Path(path)
    return scenario_from_document(load_yaml(path), path), path.parent


def is_fleet_document(raw: Any) -> bool:
    """A fleet file is a YAML mapping with `services:` (a scenario has `model:` and `traffic:`)."""
    return isinstance(raw, dict) and "services" in raw


# Keys only a fleet file has (planner.fleet.FleetSpec's beyond a scenario's; a test keeps them equal).
FLEET_ONLY_KEYS = ("services", "inventory", "max_gpu_types", "budget_usd_per_month")


def scenario_from_document(raw: Any, path: Path) -> Scenario:
    """The scenario a file's parsed YAML states; InputError naming the file when it is none."""
    if not isinstance(raw, dict):
        raise InputError("a scenario is a YAML mapping (name:, model:, traffic:, ...)", where=str(path))
    if is_fleet_document(raw):
        raise InputError("this is a fleet file (it lists services:), where one scenario is expected: give one of its "
                         "services' scenario files (which plans that service alone, not its share of the fleet), or "
                         "use `planner solve` / `planner forecast` on the fleet (`solve` certifies the fleet's own "
                         "pools in simulation)", where=str(path))
    if "model" not in raw:
        _refuse_a_fleet_without_services(raw, path)
    return validate(Scenario, raw, where=str(path))


def _refuse_a_fleet_without_services(raw: dict, path: Path) -> None:
    """A fleet file whose services: is misspelt or missing is read as a scenario, which would be told
    its model: is missing: it is told about services: instead."""
    unknown = [k for k in raw if isinstance(k, str) and k not in Scenario.model_fields]
    typo = next((k for k in unknown if closest(k, ["services"]) is not None), None)
    if typo is not None:
        raise InputError(f"{typo}: unknown key; did you mean 'services'? (a fleet file lists its services under "
                         "services:, a scenario states model: and traffic:)", where=str(path))
    fleet_keys = [k for k in unknown if k in FLEET_ONLY_KEYS]
    if fleet_keys:
        raise InputError(f"services: required field is missing ({fleet_keys[0]}: is a fleet file's key; a fleet "
                         "file lists its services under services:)", where=str(path))


def resolve(base: Path, p: str) -> Path:
    q = Path(p)
    return q if q.is_absolute() else base / q
