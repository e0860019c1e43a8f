"""The scenario's `traffic:` section: where the requests come from (a log, a histogram file,
a named synthetic distribution or constant lengths), how the planning peak is taken, growth,
headroom, a shared prefix, and the day's load curve."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictBool, field_validator, model_validator

from planner.bounds import (
    MAX_GROWTH,
    MAX_HEADROOM,
    MAX_SYNTHETIC_REQUESTS,
    Fraction,
    Growth,
    PositiveTokens,
    RateRps,
    Seed,
    Tokens,
    real,
    whole,
)
from planner.scenario.fields import Strict


class SyntheticSource(Strict):
    name: str = Field(description="named synthetic distribution (planner synth --help lists them)")
    requests: whole(gt=0, le=MAX_SYNTHETIC_REQUESTS) = 100_000
    seed: Seed = 0
    rate_rps: RateRps | None = Field(None, description="mean arrival rate of the synthetic log")


class Columns(Strict):
    prompt: str | None = None
    output: str | None = None
    time: str | None = None


class ConstantSource(Strict):
    """Every request has the same lengths (how published benchmarks, and seed 000, are run)."""

    # At least one prompt token: engines refuse an empty prompt (vLLM: "The decoder prompt cannot be empty").
    prompt_tokens: PositiveTokens
    output_tokens: PositiveTokens


class TrafficSource(Strict):
    """Exactly one of: a request log, a histogram file, a named synthetic distribution, constant lengths."""

    log: list[str] | str | None = None
    histogram: str | None = None
    synthetic: SyntheticSource | None = None
    constant: ConstantSource | None = None
    preset: str | None = Field(None, description="column preset of a public trace: azure, mooncake, burstgpt")
    columns: Columns | None = Field(None, description="column names of the log, overriding the preset")
    time_unit: Literal["auto", "s", "ms", "us", "ns"] = Field("auto", description="unit of numeric timestamps")

    @field_validator("log", "histogram")
    @classmethod
    def _paths_named(cls, v: list[str] | str | None) -> list[str] | str | None:
        """A blank path would read the scenario's own folder as the log (and complain of its YAML)."""
        if isinstance(v, list) and not v:
            raise ValueError("no path in the list: give at least one file or folder")
        for path in v if isinstance(v, list) else [v]:
            if path is not None and not path.strip():
                raise ValueError("a blank path: give a file or folder")
        return v

    @model_validator(mode="after")
    def _one(self) -> TrafficSource:
        given = [k for k in ("log", "histogram", "synthetic", "constant") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of log, histogram, synthetic, constant (got {given or 'none'})")
        # (values, not the keys given: a scenario dumped and read again states every default)
        read_from_a_log = [k for k, unset in (("preset", None), ("columns", None), ("time_unit", "auto"))
                           if getattr(self, k) != unset]
        if read_from_a_log and self.log is None:
            raise ValueError(f"{read_from_a_log[0]} is read only with a log (the source is {given[0]})")
        return self


DEFAULT_PEAK_QUANTILE = 0.99


class Peak(Strict):
    method: Literal["quantile", "max", "explicit"] = "quantile"
    quantile: Fraction = DEFAULT_PEAK_QUANTILE
    rps: RateRps | None = Field(None, description="explicit peak, requests/s (method: explicit)")

    @model_validator(mode="after")
    def _rps(self) -> Peak:
        if self.method == "explicit" and self.rps is None:
            raise ValueError("method 'explicit' needs rps")
        if self.method != "explicit" and self.rps is not None:
            raise ValueError(f"rps is read with method 'explicit' only (method is '{self.method}')")
        # (the default is let through: a dumped and re-read scenario carries it)
        if self.method != "quantile" and self.quantile != DEFAULT_PEAK_QUANTILE:
            raise ValueError(f"quantile is read with method 'quantile' only (method is '{self.method}')")
        return self


class LoadProfileSpec(Strict):
    """The day's load curve: exactly one of measured (from the log), hourly (stated) or shape (named)."""

    measured: StrictBool | None = Field(
        None, description="true: arrivals per hour of day from the log's timestamps (the log must span a day)"
    )
    by_weekday: StrictBool = Field(False, description="measured: one curve per hour of the week (the log must span a week)")
    hourly: list[real(ge=0, le=MAX_GROWTH)] | None = Field(
        None, description="24 multipliers, hour 0 first (or 168, Monday 00:00 first); scaled so the busiest hour is 1"
    )
    shape: Literal["flat", "diurnal"] | None = Field(None, description="a named shape (diurnal: a cosine day)")
    peak_to_trough: real(ge=1, le=MAX_GROWTH) | None = Field(None, description="diurnal: busiest hour's load / quietest hour's")
    peak_hour: whole(ge=0, le=23) = Field(12, description="diurnal: the busiest hour of the day (places the curve on the clock)")

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


class TrafficSpec(Strict):
    """The `traffic:` section as written; planner.traffic.load_traffic reads its source into the
    histogram and rates the plan uses (planner.traffic.Traffic)."""

    source: TrafficSource
    peak: Peak = Peak()
    growth: Growth = Field(1.0, description="multiplier on the measured peak (e.g. 1.3 for +30%)")
    headroom: real(ge=1.0, le=MAX_HEADROOM) = Field(1.2, description="capacity planned per unit of peak rate")
    shared_prefix_tokens: Tokens = Field(0, description="prefix every request shares (prefix caching)")
    mean_rps: RateRps | None = Field(
        None, description="mean arrival rate, for sources without timestamps [default: from the log's minutes]; "
        "with a stated profile, the busiest hour's"
    )
    profile: LoadProfileSpec | None = Field(
        None, description="the day's load curve [default: measured when the log spans a day, else flat]"
    )
