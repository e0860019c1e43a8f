"""The scenario's `slo:` section: latency targets per band of prompt length, each at a
statistic over the band's requests, turned into the domain object planner.targets.SLO."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from planner.bounds import MAX_LATENCY_MS, MAX_TTFT_S, Label, PositiveTokens, real
from planner.histogram import LENGTH_EDGES
from planner.scenario.fields import Strict
from planner.targets import DEFAULT_TPOT_MS, DEFAULT_TTFT_S, SLO, Band, Target

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


def _target(value: Any, unit: str, most: float) -> tuple[str | None, float] | None:
    """A target as written, as (statistic, limit): a number is at slo.statistic (None here),
    a one-pair mapping {p90: 1.5} names its own."""
    if value is None:
        return None
    if isinstance(value, tuple) and len(value) == 2 and (value[0] is None or value[0] in STATISTIC_NAMES):
        return value[0], _positive(value[1], unit, most)  # the validated form itself (a model_dump round trip)
    if isinstance(value, dict):
        if len(value) != 1 or next(iter(value)) not in STATISTIC_NAMES:
            raise ValueError(f"write one {{statistic: {unit}}} pair, statistic one of {', '.join(STATISTIC_NAMES)} "
                             f"(got {value!r})")
        stat, limit = next(iter(value.items()))
        return stat, _positive(limit, unit, most)
    return None, _positive(value, unit, most)


def _positive(value: Any, unit: str, most: float) -> float:
    if isinstance(value, str):
        # YAML 1.1 reads 1e3 and 1.5e3 as text (its floats need a dot and a signed exponent); read as
        # a number, as a typed field (a rate) reads it, and as YAML 1.2 and JSON would. Only here: a
        # name or an id written 8e1 must stay text.
        value = _number_text(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"a target is a number of {unit} or one {{statistic: {unit}}} pair (got {value!r})")
    if not (0 < value <= most):
        raise ValueError(f"a target must be a number of {unit} above 0 and at most {most:,g}")
    return float(value)


def _number_text(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


class BandSpec(Strict):
    """Requests whose prompt is shorter than `prompt_below` (and not in an earlier band)."""

    name: Label | None = Field(None, description="label in reports [default: the prompt range]")
    prompt_below: PositiveTokens | None = Field(None, description="exclusive upper bound on prompt tokens; omit on the last band")
    ttft_s: Any = Field(None, description="time to first token, s: a number (at slo.statistic) or {p90: 1.5}")
    tpot_ms: Any = Field(None, description="time per output token of a request, ms")
    itl_ms: Any = Field(None, description="per-token gap (every decode token's wait), ms")

    @field_validator("ttft_s")
    @classmethod
    def _ttft(cls, v: Any) -> tuple[str | None, float] | None:
        return _target(v, "seconds", MAX_TTFT_S)

    @field_validator("tpot_ms", "itl_ms")
    @classmethod
    def _ms(cls, v: Any) -> tuple[str | None, float] | None:
        return _target(v, "milliseconds", MAX_LATENCY_MS)

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


class SLOSpec(Strict):
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
    attainment: real(gt=0, lt=1) | None = Field(
        None, description="share of requests that must meet both their TTFT and TPOT targets"
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
            raise ValueError(f"bands[{cuts.index(None)}]: every band but the last needs prompt_below (the prompt "
                             "length below which a request is in that band)")
        if any(b <= a for a, b in itertools.pairwise(cuts)):
            raise ValueError(f"bands must be in increasing prompt_below order (got {cuts})")
        names = [b.name for b in self.bands if b.name is not None]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            first, second = [i for i, b in enumerate(self.bands) if b.name == twice[0]][:2]
            raise ValueError(f"bands[{second}]: band name '{twice[0]}' is given to two bands (first to bands[{first}]); "
                             "reports and results name bands by it")
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
