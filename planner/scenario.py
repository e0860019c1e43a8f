"""The scenario file: what a planner asks, as a validated YAML document.

Everything but `model` and `traffic` has a default. Unknown keys are errors with a
'did you mean'; every error names the file and the dotted YAML path. Relative
paths inside a scenario are relative to the scenario file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from planner.bounds import (
    MAX_GPU_MEMORY_GIB,
    MAX_GROWTH,
    MAX_HEADROOM,
    MAX_MIN_REPLICAS,
    MAX_SOLVER_SECONDS,
    MAX_SYNTHETIC_REQUESTS,
    MAX_TP,
    Fraction,
    GpuCount,
    Growth,
    Params,
    PositiveTokens,
    PriceUsdPerGpuHour,
    RateRps,
    Seed,
    Tokens,
    real,
    whole,
)
from planner.errors import InputError, did_you_mean
from planner.histogram import TOTAL_EDGES
from planner.yamlio import load_yaml, validate, validation_message


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SyntheticSource(_Strict):
    name: str = Field(description="named synthetic distribution (planner synth --help lists them)")
    requests: whole(gt=0, le=MAX_SYNTHETIC_REQUESTS) = 100_000
    seed: Seed = 0
    rate_rps: RateRps | None = Field(None, description="mean arrival rate of the synthetic log")


class Columns(_Strict):
    prompt: str | None = None
    output: str | None = None
    time: str | None = None


class ConstantSource(_Strict):
    """Every request has the same lengths (how published benchmarks, and seed 000, are run)."""

    prompt_tokens: Tokens
    output_tokens: PositiveTokens


class TrafficSource(_Strict):
    """Exactly one of: a request log, a histogram file, a named synthetic distribution, constant lengths."""

    log: list[str] | str | None = None
    histogram: str | None = None
    synthetic: SyntheticSource | None = None
    constant: ConstantSource | None = None
    preset: str | None = Field(None, description="column preset of a public trace: azure, mooncake, burstgpt")
    columns: Columns | None = Field(None, description="column names of the log, overriding the preset")
    time_unit: Literal["auto", "s", "ms", "us", "ns"] = Field("auto", description="unit of numeric timestamps")

    @model_validator(mode="after")
    def _one(self) -> TrafficSource:
        given = [k for k in ("log", "histogram", "synthetic", "constant") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of log, histogram, synthetic, constant (got {given or 'none'})")
        return self


class Peak(_Strict):
    method: Literal["quantile", "max", "explicit"] = "quantile"
    quantile: Fraction = 0.99
    rps: RateRps | None = Field(None, description="explicit peak, requests/s (method: explicit)")

    @model_validator(mode="after")
    def _rps(self) -> Peak:
        if self.method == "explicit" and self.rps is None:
            raise ValueError("method 'explicit' needs rps")
        return self


class Traffic(_Strict):
    source: TrafficSource
    peak: Peak = Peak()
    growth: Growth = Field(1.0, description="multiplier on the measured peak (e.g. 1.3 for +30%)")
    headroom: real(ge=1.0, le=MAX_HEADROOM) = Field(1.2, description="capacity planned per unit of peak rate")
    shared_prefix_tokens: Tokens = Field(0, description="prefix every request shares (prefix caching)")
    mean_rps: RateRps | None = Field(
        None, description="mean arrival rate, for sources without timestamps [default: from the log's minutes]"
    )


def _histogram_edge(value: int | None, what: str) -> int | None:
    """Total-length cuts must be histogram edges, so that "prompt + output <= T" is exact."""
    if value is None:
        return value
    allowed = {int(e) for e in TOTAL_EDGES}
    if value not in allowed:
        near = sorted(sorted(allowed, key=lambda e: abs(e - value))[:3])
        raise ValueError(f"{what} {value} is not a histogram edge; nearest: {', '.join(map(str, near))}")
    return value


class LongContextSLO(_Strict):
    above_tokens: int = Field(8192, gt=0, description="requests with prompt+output above this get these targets")
    itl_ms: float | None = Field(None, gt=0)
    ttft_s: float | None = Field(None, gt=0)

    @field_validator("above_tokens")
    @classmethod
    def _edge(cls, v: int) -> int:
        return _histogram_edge(v, "above_tokens")


class SLOSpec(_Strict):
    itl_ms: float | None = Field(50.0, gt=0, description="mean inter-token latency target, ms")
    ttft_s: float | None = Field(2.0, gt=0, description="time to first token at the prompt quantile, s")
    ttft_prompt_quantile: float = Field(0.99, gt=0.5, lt=1)
    long_context: LongContextSLO | None = None


class Sizing(_Strict):
    mode: Literal["worst_case", "expected", "percentile"] = "percentile"
    quantile: real(gt=0.5, lt=1) = 0.99


class GPUCandidate(_Strict):
    id: str
    price_usd_per_hour: PriceUsdPerGpuHour | None = Field(None, description="override, e.g. a negotiated price")
    max_gpus: GpuCount | None = Field(None, description="inventory cap for this GPU type")

    def price_per_hour(self, catalog_price_usd_per_hour: float) -> float:
        """USD per GPU-hour: this override if set, else the catalog's price."""
        if self.price_usd_per_hour is not None:
            return self.price_usd_per_hour
        return catalog_price_usd_per_hour


class Solver(_Strict):
    backend: Literal["cbc", "highs"] = "cbc"
    time_limit_s: real(gt=0, le=MAX_SOLVER_SECONDS) = 60.0


class QuarterSpec(_Strict):
    """One quarter of a forecast: demand growth and what changes (limit, prices, availability, commitments)."""

    quarter: str = Field(pattern=r"^[0-9]{4}Q[1-4]$", description="e.g. 2027Q1")
    growth: real(gt=-1.0, le=MAX_GROWTH) = Field(0.0, description="demand change: 0.25 = +25% (see growth_mode)")
    context_limit: PositiveTokens | None = None

    @field_validator("context_limit")
    @classmethod
    def _limit_edge(cls, v: int | None) -> int | None:
        return _histogram_edge(v, "context limit")
    prices: dict[str, PriceUsdPerGpuHour] = Field(default_factory=dict, description="on-demand $/GPU-hour per GPU type")
    availability: dict[str, GpuCount] = Field(default_factory=dict, description="most GPUs of a type that can be had")
    reserved: dict[str, GpuCount] = Field(default_factory=dict, description="GPUs committed this quarter, per type")


class Forecast(_Strict):
    growth_mode: Literal["compound", "relative"] = Field(
        "compound", description="compound: each quarter's growth applies to the previous quarter; relative: to the base"
    )
    carry_forward: bool = Field(
        False,
        description="each quarter's fleet is committed (reserved) from the next quarter on, at the terms of the "
        "quarter it was committed in; commitments last to the end of the forecast",
    )
    reserved_discount: float = Field(0.0, ge=0, lt=1, description="committed price = on-demand x (1 - discount)")
    reserved_prices: dict[str, PriceUsdPerGpuHour] = Field(
        default_factory=dict, description="committed $/GPU-hour per GPU type"
    )
    quarters: list[QuarterSpec] = Field(min_length=1)

    @field_validator("quarters")
    @classmethod
    def _ordered(cls, v: list[QuarterSpec]) -> list[QuarterSpec]:
        keys = [q.quarter for q in v]
        for i in range(1, len(keys)):
            if keys[i] in keys[:i]:
                raise ValueError(f"quarter {keys[i]} appears twice")
            if keys[i] < keys[i - 1]:
                raise ValueError(f"quarters out of order: {keys[i]} after {keys[i - 1]}")
        return v


class ConfigJsonModel(_Strict):
    """`model: {config_json: path, ...}`: a model read from a Hugging Face config.json."""

    config_json: str = Field(min_length=1, description="path of the config.json, relative to the scenario")
    name: str = Field("custom-model", min_length=1, max_length=200, description="catalog id to give the model")
    params_total: Params | None = None
    params_active: Params | None = None
    hf_id: str | None = None


class Scenario(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    model: str | dict[str, Any] = Field(description="catalog id, an inline model entry, or {config_json: path}")
    catalog: dict[str, Any] | None = Field(None, description="catalog overrides: {gpus: {id: {field: value}}, ...}")
    traffic: Traffic
    context_limit: PositiveTokens | None = Field(None, description="longest prompt+output served [default: the model's]")
    slo: SLOSpec = SLOSpec()
    sizing: Sizing = Sizing()
    gpus: list[str | GPUCandidate] = Field(default_factory=lambda: ["h100-sxm", "h200", "a100-80gb", "l40s"])
    weight_dtypes: list[str] = Field(default_factory=lambda: ["bf16", "fp8"])
    kv_dtypes: list[str] = Field(default_factory=lambda: ["bf16", "fp8"])
    tp: list[whole(ge=1, le=MAX_TP)] = Field(default_factory=lambda: [1, 2, 4, 8])
    engine: str = "vllm"
    gpu_memory_utilization: Fraction | None = None
    overhead_gib: real(ge=0, le=MAX_GPU_MEMORY_GIB) = 3.0
    split_thresholds: list[PositiveTokens] = Field(default_factory=list, description="total-token thresholds to try; no split is always tried")
    min_replicas_per_pool: whole(ge=1, le=MAX_MIN_REPLICAS) = Field(1, description="2 or more for N+1 redundancy")
    homogeneous_pools: bool = Field(True, description="one config per pool")
    lower_context_limit: PositiveTokens | None = Field(None, description="the 'lower limit' lever [default: half the limit]")
    solver: Solver = Solver()
    verify: bool = Field(False, description="replay each pool through the simulator and add the check to the report")
    forecast: Forecast | None = Field(None, description="quarterly forecast section (planner forecast)")

    @field_validator("split_thresholds")
    @classmethod
    def _edges(cls, v: list[int]) -> list[int]:
        for t in v:
            _histogram_edge(t, "split threshold")
        if len(set(v)) != len(v):
            raise ValueError("split thresholds repeat")
        return sorted(v)

    @field_validator("context_limit", "lower_context_limit")
    @classmethod
    def _limit_edge(cls, v: int | None) -> int | None:
        return _histogram_edge(v, "context limit")

    @model_validator(mode="after")
    def _prefix_below_limit(self) -> Scenario:
        limit = self.context_limit
        if limit is not None and self.traffic.shared_prefix_tokens >= limit:
            raise ValueError(
                f"traffic.shared_prefix_tokens {self.traffic.shared_prefix_tokens} must be below the context limit {limit}"
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
                raise ValueError(
                    f"forecast.reserved_prices: {did_you_mean(gpu, known, what='GPU')} "
                    "(a committed price needs the GPU among the scenario's gpus)"
                )
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

    @field_validator("tp")
    @classmethod
    def _tp(cls, v: list[int]) -> list[int]:
        for t in v:
            if t < 1 or t & (t - 1):
                raise ValueError(f"tensor-parallel degree {t} must be a power of two")
        return sorted(set(v))

    @field_validator("gpus", "weight_dtypes", "kv_dtypes")
    @classmethod
    def _nonempty(cls, v: list) -> list:
        if not v:
            raise ValueError("must list at least one")
        return v

    @property
    def gpu_candidates(self) -> list[GPUCandidate]:
        return [GPUCandidate(id=g) if isinstance(g, str) else g for g in self.gpus]


def load_scenario(path: str | Path) -> tuple[Scenario, Path]:
    """Read and validate a scenario file; returns it and the folder its relative paths start from."""
    path = Path(path)
    raw = load_yaml(path)
    if not isinstance(raw, dict):
        raise InputError("a scenario is a YAML mapping (name:, model:, traffic:, ...)", where=str(path))
    return validate(Scenario, raw, where=str(path)), path.parent


def resolve(base: Path, p: str) -> Path:
    q = Path(p)
    return q if q.is_absolute() else base / q
