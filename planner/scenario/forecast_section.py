"""The scenario's `forecast:` section (quarters of growth, prices, availability and
commitments, for `planner forecast`) and `autoscaling:` (how a fleet may follow the day's
curve: the settings of the day's cost policies)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictBool, field_validator, model_validator

from planner.bounds import (
    MAX_GROWTH,
    MAX_LEAD_MIN,
    MAX_MIN_REPLICAS,
    MAX_TERM_QUARTERS,
    GpuCount,
    PositiveTokens,
    PriceUsdPerGpuHour,
    real,
    whole,
)
from planner.scenario.fields import Strict, histogram_edge


class QuarterSpec(Strict):
    """One quarter of a forecast: demand growth and what changes (limit, prices, availability, commitments)."""

    quarter: str = Field(pattern=r"^[0-9]{4}Q[1-4]$", description="e.g. 2027Q1")
    growth: real(gt=-1.0, le=MAX_GROWTH) = Field(0.0, description="demand change: 0.25 = +25% (see growth_mode)")
    context_limit: PositiveTokens | None = None

    @field_validator("context_limit")
    @classmethod
    def _limit_edge(cls, v: int | None) -> int | None:
        return histogram_edge(v, "context limit")
    prices: dict[str, PriceUsdPerGpuHour] = Field(default_factory=dict, description="on-demand $/GPU-hour per GPU type")
    availability: dict[str, GpuCount] = Field(default_factory=dict, description="most GPUs of a type that can be had")
    reserved: dict[str, GpuCount] = Field(default_factory=dict, description="GPUs committed in total from this quarter on, per type: the quarter commits what earlier "
        "commitments (and a fleet's inventory) lack of it; a count they already reach commits none. A commitment "
        "lasts its term (commitment_term_quarters), else to the forecast's end with carry_forward and this quarter "
        "alone without it")


# A quarter whose demand grows more than this on the quarter before's is warned of: +300% in one quarter
# is most likely a percentage written where the fraction goes.
GROWTH_WARNING = 3.0


class Forecast(Strict):
    growth_mode: Literal["compound", "relative"] = Field(
        "compound", description="compound: each quarter's growth applies to the previous quarter; relative: to the base"
    )
    carry_forward: StrictBool = Field(
        False,
        description="each quarter's fleet is committed (reserved) from the next quarter on, at the terms of the "
        "quarter it was committed in; commitments last their term (commitment_term_quarters), else to the end of "
        "the forecast",
    )
    commitment_term_quarters: whole(ge=1, le=MAX_TERM_QUARTERS) | None = Field(
        None,
        description="quarters each commitment the forecast makes is paid for, from the quarter it starts (4: a "
        "one-year reservation); the report prices what runs past the last quarter [default: no term: to the "
        "forecast's end with carry_forward, the quarter alone without it, and no cost shown after the end]",
    )
    reserved_discount: real(ge=0, lt=1) = Field(0.0, description="committed price = on-demand x (1 - discount)")
    reserved_prices: dict[str, PriceUsdPerGpuHour] = Field(
        default_factory=dict, description="committed $/GPU-hour per GPU type"
    )
    reserved_pools: StrictBool = Field(
        True,
        description="reserved GPUs are already paid: each reserved type may hold a pool of its own beside a "
        "homogeneous pool's type, so that a new type never strands them",
    )
    quarters: list[QuarterSpec] = Field(min_length=1)

    @property
    def unpriced_after_end(self) -> bool:
        """Whether the commitments the forecast makes run on past its last quarter unpriced: carried
        forward with no term (without carry_forward a quarter's reservations are its own)."""
        return self.carry_forward and self.commitment_term_quarters is None

    def growth_warnings(self) -> list[str]:
        """Each quarter whose growth reads as a percentage written as the fraction (25 for 0.25), which
        planned demand 26 times the quarter before's without a word (an outside probe): judged by the
        step from the quarter before (relative growth is against the base, so a steady +50% a quarter
        reaches 4.06 by its fourth)."""
        out, before = [], 1.0
        for i, (q, multiplier) in enumerate(zip(self.quarters, self.demand_multipliers(), strict=True)):
            if multiplier / before - 1 > GROWTH_WARNING:
                out.append(f"forecast.quarters[{i}].growth {q.growth:g} takes demand to {multiplier / before:,.3g}× the "
                           "quarter before's: a quarter's growth is a fraction (0.25 for +25%), where traffic.growth is a "
                           "multiplier")
            before = multiplier
        return out

    def demand_multipliers(self) -> list[float]:
        """Each quarter's demand over the base: its growth compounded on the quarter before's
        (growth_mode compound), or applied to the base (relative)."""
        out, multiplier = [], 1.0
        for q in self.quarters:
            multiplier = multiplier * (1 + q.growth) if self.growth_mode == "compound" else 1 + q.growth
            out.append(multiplier)
        return out

    @model_validator(mode="after")
    def _bounded_demand(self) -> Forecast:
        """Each quarter's growth is bounded; compounded, the quarters' demand must be too."""
        for q, multiplier in zip(self.quarters, self.demand_multipliers(), strict=True):
            if multiplier > 1 + MAX_GROWTH:
                raise ValueError(f"quarters: growth compounds to {multiplier:,.6g} × the base demand by {q.quarter}, "
                                 f"above the bound of {1 + MAX_GROWTH:,.6g} × (planner.bounds)")
        return self

    @field_validator("quarters")
    @classmethod
    def _ordered(cls, v: list[QuarterSpec]) -> list[QuarterSpec]:
        keys = [q.quarter for q in v]
        for i in range(1, len(keys)):
            if keys[i] in keys[:i]:
                raise ValueError(f"quarter {keys[i]} appears twice")
            if keys[i] < keys[i - 1]:
                raise ValueError(f"quarters out of order: {keys[i]} after {keys[i - 1]}")
            # every quarter of the span is costed, and carried commitments run through it: a gap would
            # leave quarters out of the total without a word
            if quarter_index(keys[i]) != quarter_index(keys[i - 1]) + 1:
                raise ValueError(f"quarters must follow one another: {keys[i]} after {keys[i - 1]} leaves "
                                 f"{quarter_index(keys[i]) - quarter_index(keys[i - 1]) - 1} out")
        return v


def quarter_index(quarter: str) -> int:
    """2027Q1 -> 4 x 2027: quarters counted from year 0, so that consecutive quarters differ by one."""
    return int(quarter[:4]) * 4 + int(quarter[5]) - 1


class Autoscaling(Strict):
    """How a fleet may follow the day's curve: the settings of the day's cost policies."""

    scale_up_lead_min: real(ge=0, le=MAX_LEAD_MIN) = Field(
        10.0, description="minutes from asking for a replica to its serving (node start, weights load); an assumption: state yours"
    )
    min_replicas: whole(ge=1, le=MAX_MIN_REPLICAS) | None = Field(
        None, description="replicas each pool keeps in every hour [default: min_replicas_per_pool]"
    )
    reserved_discount: real(ge=0, lt=1) | None = Field(
        None,
        description="a replica reserved for the whole day costs on-demand x (1 - discount) "
        "[default: the forecast section's reserved terms, else 0]",
    )
