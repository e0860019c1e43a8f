"""The scenario file: what a planner asks, as a validated YAML document.

Everything but `model` and `traffic` has a default. Unknown keys are errors with a
'did you mean'; every error names the file and the dotted YAML path. Relative
paths inside a scenario are relative to the scenario file.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from planner.errors import InputError
from planner.histogram import LENGTH_EDGES, TOTAL_EDGES
from planner.targets import DEFAULT_TPOT_MS, DEFAULT_TTFT_S, SLO, Band, Target
from planner.yamlio import load_yaml, validate


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SyntheticSource(_Strict):
    name: str = Field(description="named synthetic distribution (planner synth --help lists them)")
    requests: int = Field(100_000, gt=0)
    seed: int = 0
    rate_rps: float | None = Field(None, gt=0, description="mean arrival rate of the synthetic log")


class Columns(_Strict):
    prompt: str | None = None
    output: str | None = None
    time: str | None = None


class ConstantSource(_Strict):
    """Every request has the same lengths (how published benchmarks, and seed 000, are run)."""

    prompt_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=1)


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
    quantile: float = Field(0.99, gt=0, le=1)
    rps: float | None = Field(None, gt=0, description="explicit peak, requests/s (method: explicit)")

    @model_validator(mode="after")
    def _rps(self) -> Peak:
        if self.method == "explicit" and self.rps is None:
            raise ValueError("method 'explicit' needs rps")
        return self


class LoadProfileSpec(_Strict):
    """The day's load curve: exactly one of measured (from the log), hourly (stated) or shape (named)."""

    measured: bool | None = Field(
        None, description="true: arrivals per hour of day from the log's timestamps (the log must span a day)"
    )
    by_weekday: bool = Field(False, description="measured: one curve per hour of the week (the log must span a week)")
    hourly: list[float] | None = Field(
        None, description="24 multipliers, hour 0 first (or 168, Monday 00:00 first); scaled so the busiest hour is 1"
    )
    shape: Literal["flat", "diurnal"] | None = Field(None, description="a named shape (diurnal: a cosine day)")
    peak_to_trough: float | None = Field(None, ge=1, description="diurnal: busiest hour's load / quietest hour's")
    peak_hour: int = Field(12, ge=0, le=23, description="diurnal: the busiest hour of the day (places the curve on the clock)")

    @model_validator(mode="after")
    def _one(self) -> LoadProfileSpec:
        given = [k for k in ("measured", "hourly", "shape") if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise ValueError(f"give exactly one of measured: true, hourly, shape (got {given or 'none'})")
        if self.by_weekday and not self.measured:
            raise ValueError("by_weekday applies to a measured profile")
        if self.hourly is not None:
            if len(self.hourly) not in (24, 168):
                raise ValueError(f"hourly needs 24 values (or 168, a week), got {len(self.hourly)}")
            if min(self.hourly) < 0 or max(self.hourly) <= 0:
                raise ValueError("hourly values must be >= 0 with at least one above 0")
        if self.shape == "diurnal" and self.peak_to_trough is None:
            raise ValueError("shape 'diurnal' needs peak_to_trough (e.g. 3 for a peak three times the night's load)")
        if self.shape != "diurnal" and self.peak_to_trough is not None:
            raise ValueError("peak_to_trough applies to shape 'diurnal'")
        return self


class Autoscaling(_Strict):
    """How a fleet may follow the day's curve: the settings of the day's cost policies."""

    scale_up_lead_min: float = Field(
        10.0, ge=0, description="minutes from asking for a replica to its serving (node start, weights load); an assumption: state yours"
    )
    min_replicas: int | None = Field(
        None, ge=1, description="replicas each pool keeps in every hour [default: min_replicas_per_pool]"
    )
    reserved_discount: float | None = Field(
        None, ge=0, lt=1,
        description="a replica reserved for the whole day costs on-demand x (1 - discount) "
        "[default: the forecast section's reserved terms, else 0]",
    )


class Traffic(_Strict):
    source: TrafficSource
    peak: Peak = Peak()
    growth: float = Field(1.0, gt=0, description="multiplier on the measured peak (e.g. 1.3 for +30%)")
    headroom: float = Field(1.2, ge=1.0, description="capacity planned per unit of peak rate")
    shared_prefix_tokens: int = Field(0, ge=0, description="prefix every request shares (prefix caching)")
    mean_rps: float | None = Field(
        None, gt=0, description="mean arrival rate, for sources without timestamps [default: from the log's minutes]; "
        "with a stated profile, the busiest hour's"
    )
    profile: LoadProfileSpec | None = Field(
        None, description="the day's load curve [default: measured when the log spans a day, else flat]"
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


STATISTIC_NAMES = ("mean", "p50", "p90", "p95", "p99")
_LEGACY_SLO_KEYS = {
    "itl_ms": "a mean inter-token latency",
    "ttft_s": "a TTFT at a prompt quantile with the mean queueing wait",
    "ttft_prompt_quantile": "the prompt quantile of the TTFT check",
    "long_context": "a TTFT target for long requests",
}
_SLO_EXAMPLE = (
    "slo: {statistic: p99, bands: [{prompt_below: 8192, ttft_s: 2.0, tpot_ms: 50}, {ttft_s: 15, tpot_ms: 50}]}"
)


def _target(value: Any, unit: str) -> tuple[str | None, float] | None:
    """A target as written, as (statistic, limit): a number is at slo.statistic (None here),
    a one-pair mapping {p90: 1.5} names its own."""
    if value is None:
        return None
    if isinstance(value, tuple) and len(value) == 2 and (value[0] is None or value[0] in STATISTIC_NAMES):
        return value[0], _positive(value[1], unit)  # the validated form itself (a model_dump round trip)
    if isinstance(value, dict):
        if len(value) != 1 or next(iter(value)) not in STATISTIC_NAMES:
            raise ValueError(f"write one {{statistic: {unit}}} pair, statistic one of {', '.join(STATISTIC_NAMES)} "
                             f"(got {value!r})")
        stat, limit = next(iter(value.items()))
        return stat, _positive(limit, unit)
    return None, _positive(value, unit)


def _positive(value: Any, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"a target is a number of {unit} or one {{statistic: {unit}}} pair (got {value!r})")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"a target must be a positive finite number of {unit} (got {value!r})")
    return float(value)


class BandSpec(_Strict):
    """Requests whose prompt is shorter than `prompt_below` (and not in an earlier band)."""

    name: str | None = Field(None, description="label in reports [default: the prompt range]")
    prompt_below: int | None = Field(None, gt=0, description="exclusive upper bound on prompt tokens; omit on the last band")
    ttft_s: Any = Field(None, description="time to first token, s: a number (at slo.statistic) or {p90: 1.5}")
    tpot_ms: Any = Field(None, description="time per output token of a request, ms")
    itl_ms: Any = Field(None, description="per-token gap (every decode token's wait), ms")

    @field_validator("ttft_s")
    @classmethod
    def _ttft(cls, v: Any) -> tuple[str | None, float] | None:
        return _target(v, "seconds")

    @field_validator("tpot_ms", "itl_ms")
    @classmethod
    def _ms(cls, v: Any) -> tuple[str | None, float] | None:
        return _target(v, "milliseconds")

    @field_validator("prompt_below")
    @classmethod
    def _edge(cls, v: int | None) -> int | None:
        if v is None:
            return v
        allowed = {int(e) for e in LENGTH_EDGES[1:]}
        if v not in allowed:
            near = sorted(sorted(allowed, key=lambda e: abs(e - v))[:3])
            raise ValueError(f"prompt_below {v} is not a prompt-length histogram edge; nearest: {', '.join(map(str, near))}")
        return v


class SLOSpec(_Strict):
    """Latency targets per band of prompt length, each at a statistic over the band's requests."""

    statistic: Literal["mean", "p50", "p90", "p95", "p99"] = Field(
        "p99", description="statistic of every target written as a plain number"
    )
    bands: list[BandSpec] = Field(
        default_factory=lambda: [BandSpec(ttft_s=DEFAULT_TTFT_S, tpot_ms=DEFAULT_TPOT_MS)],
        min_length=1,
        description="in order of prompt length; the last has no prompt_below [default: one band, TTFT p99 2 s, "
        "TPOT p99 100 ms: MLPerf Inference's server constraints for Llama 3.1 8B]",
    )
    attainment: float | None = Field(
        None, gt=0, lt=1, description="share of requests that must meet both their TTFT and TPOT targets"
    )

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, meaning in _LEGACY_SLO_KEYS.items():
                if key in data:
                    raise ValueError(
                        f"'{key}' ({meaning}) is no longer read: targets are per band of prompt length, at a "
                        f"percentile, e.g. {_SLO_EXAMPLE}"
                    )
        return data

    @model_validator(mode="after")
    def _ordered(self) -> SLOSpec:
        *cuts, last = [b.prompt_below for b in self.bands]
        if last is not None:
            raise ValueError(f"the last band has no prompt_below (it holds the longest prompts); got {last}")
        if None in cuts:
            raise ValueError("every band but the last needs prompt_below")
        if any(b <= a for a, b in itertools.pairwise(cuts)):
            raise ValueError(f"bands must be in increasing prompt_below order (got {cuts})")
        return self

    def to_slo(self) -> SLO:
        """The domain object (planner.targets.SLO), limits in seconds."""
        bands, lo = [], 0
        for spec in self.bands:
            def target(t: tuple[str | None, float] | None, scale: float) -> Target | None:
                return None if t is None else Target(t[0] or self.statistic, t[1] * scale)

            band = Band("", lo, spec.prompt_below, target(spec.ttft_s, 1.0), target(spec.tpot_ms, 1e-3),
                        target(spec.itl_ms, 1e-3))
            bands.append(replace(band, name=spec.name or band.range_text))
            lo = spec.prompt_below or lo
        return SLO(tuple(bands), self.attainment)


class Sizing(_Strict):
    mode: Literal["worst_case", "expected", "percentile"] = "percentile"
    quantile: float = Field(0.99, gt=0.5, lt=1)


class GPUCandidate(_Strict):
    id: str
    price_usd_per_hour: float | None = Field(None, gt=0, description="override, e.g. a negotiated price")
    max_gpus: int | None = Field(None, ge=0, description="inventory cap for this GPU type")

    def price_per_hour(self, catalog_price_usd_per_hour: float) -> float:
        """USD per GPU-hour: this override if set, else the catalog's price."""
        if self.price_usd_per_hour is not None:
            return self.price_usd_per_hour
        return catalog_price_usd_per_hour


class Solver(_Strict):
    backend: Literal["cbc", "highs"] = Field("highs", description="highs (in process, the default) or cbc (PuLP's bundled solver)")
    time_limit_s: float = Field(60.0, gt=0)


class QuarterSpec(_Strict):
    """One quarter of a forecast: demand growth and what changes (limit, prices, availability, commitments)."""

    quarter: str = Field(pattern=r"^[0-9]{4}Q[1-4]$", description="e.g. 2027Q1")
    growth: float = Field(0.0, gt=-1.0, description="demand change: 0.25 = +25% (see growth_mode)")
    context_limit: int | None = Field(None, gt=0)

    @field_validator("context_limit")
    @classmethod
    def _limit_edge(cls, v: int | None) -> int | None:
        return _histogram_edge(v, "context limit")
    prices: dict[str, float] = Field(default_factory=dict, description="on-demand $/GPU-hour per GPU type")
    availability: dict[str, int] = Field(default_factory=dict, description="most GPUs of a type that can be had")
    reserved: dict[str, int] = Field(default_factory=dict, description="GPUs committed this quarter, per type")

    @field_validator("prices")
    @classmethod
    def _positive(cls, v: dict[str, float]) -> dict[str, float]:
        for gpu, price in v.items():
            if price <= 0:
                raise ValueError(f"price of {gpu} must be positive (got {price})")
        return v

    @field_validator("availability", "reserved")
    @classmethod
    def _counts(cls, v: dict[str, int]) -> dict[str, int]:
        for gpu, n in v.items():
            if n < 0:
                raise ValueError(f"GPU count of {gpu} must be >= 0 (got {n})")
        return v


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
    reserved_prices: dict[str, float] = Field(default_factory=dict, description="committed $/GPU-hour per GPU type")
    reserved_pools: bool = Field(
        True,
        description="reserved GPUs are already paid: each reserved type may hold a pool of its own beside a "
        "homogeneous pool's type, so that a new type never strands them",
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


DEFAULT_SPLIT_THRESHOLDS = (4096, 8192, 16384, 32768, 65536)  # the standard edges between 4k and 64k tokens


class FleetPool(_Strict):
    """One pool of a fleet that runs today: what each replica runs on, and how many there are."""

    gpu: str
    tp: int = Field(1, ge=1)
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    context_limit: int | None = Field(None, gt=0, description="its pool's limit [default: the scenario's]")
    replicas: int = Field(ge=1)

    @field_validator("context_limit")
    @classmethod
    def _limit_edge(cls, v: int | None) -> int | None:
        return _histogram_edge(v, "context limit")


class Simulation(_Strict):
    """How plans are certified by simulation (planner.certify)."""

    requests: int = Field(20_000, ge=1000, le=2_000_000, description="most sampled requests per pool and rate")
    band_requests: int = Field(
        5_000, ge=500, le=2_000_000,
        description="measured requests sought in every band of a pool (fewer runs when one band fills the pool)",
    )
    seed: int = Field(0, ge=0)
    max_rounds: int = Field(4, ge=1, le=20, description="re-plans after pools miss their targets in simulation")


class Scenario(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    model: str | dict[str, Any] = Field(description="catalog id, an inline model entry, or {config_json: path}")
    catalog: dict[str, Any] | None = Field(None, description="catalog overrides: {gpus: {id: {field: value}}, ...}")
    traffic: Traffic
    context_limit: int | None = Field(None, gt=0, description="longest prompt+output served [default: the model's]")
    slo: SLOSpec = SLOSpec()
    sizing: Sizing = Sizing()
    gpus: list[str | GPUCandidate] = Field(default_factory=lambda: ["h100-sxm", "h200", "a100-80gb", "l40s"])
    verified_only: bool = Field(
        False, description="consider only GPUs whose efficiency factors were fitted on their own measurements"
    )
    weight_dtypes: list[str] = Field(default_factory=lambda: ["bf16", "fp8"])
    kv_dtypes: list[str] = Field(default_factory=lambda: ["bf16", "fp8"])
    tp: list[int] = Field(default_factory=lambda: [1, 2, 4, 8])
    engine: str = "vllm"
    long_prefill_token_threshold: int | None = Field(
        None, ge=0, description="vLLM's per-request cap on prompt tokens a step (0: off) [default: the engine's]"
    )
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    overhead_gib: float = Field(3.0, ge=0)
    split_thresholds: list[int] | None = Field(
        None, description="total-token thresholds to try; no split is always tried [default: 4k, 8k, 16k, 32k, "
        "64k below the limit]; [] for no split"
    )
    min_replicas_per_pool: int = Field(1, ge=1, description="2 or more for N+1 redundancy")
    homogeneous_pools: bool = Field(True, description="one config per pool")
    lower_context_limit: int | None = Field(None, gt=0, description="the 'lower limit' lever [default: half the limit]")
    solver: Solver = Solver()
    verify: bool = Field(
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
    def _one_reserved_discount(self) -> Scenario:
        fc = self.forecast
        if self.autoscaling.reserved_discount is not None and fc is not None and (
            "reserved_discount" in fc.model_fields_set or fc.reserved_prices
        ):
            raise ValueError(
                "give reserved terms once: forecast.reserved_discount / reserved_prices, or autoscaling.reserved_discount"
            )
        return self

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
    def thresholds(self) -> list[int]:
        """Split thresholds to try: the scenario's, or the standard edges when it names none."""
        return list(DEFAULT_SPLIT_THRESHOLDS) if self.split_thresholds is None else self.split_thresholds

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
