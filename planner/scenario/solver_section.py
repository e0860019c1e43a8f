"""How the scenario's plan is made and checked: the sizing of each replica's concurrency
(`sizing:`), the ILP solver (`solver:`) and the certification by simulation (`simulation:`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from planner.bounds import (
    MAX_SIMULATED_REQUESTS,
    MAX_SOLVER_SECONDS,
    MIN_BAND_REQUESTS,
    Seed,
    real,
    whole,
)
from planner.scenario.fields import Strict

DEFAULT_SIZING_QUANTILE = 0.99


class Sizing(Strict):
    mode: Literal["worst_case", "expected", "percentile"] = "percentile"
    quantile: real(gt=0.5, lt=1) = DEFAULT_SIZING_QUANTILE

    @model_validator(mode="after")
    def _quantile_read(self) -> Sizing:
        # a quantile of its own beside another mode would be ignored without a word (the default is
        # no one's choice: a scenario's model_dump carries it, and must validate again)
        if self.mode != "percentile" and self.quantile != DEFAULT_SIZING_QUANTILE:
            raise ValueError(f"quantile is read only with mode: percentile (mode is {self.mode})")
        return self


class Solver(Strict):
    backend: Literal["cbc", "highs"] = Field("highs", description="highs (in process, the default) or cbc (PuLP's bundled solver)")
    time_limit_s: real(gt=0, le=MAX_SOLVER_SECONDS) = 60.0


class Simulation(Strict):
    """How plans are certified by simulation (planner.pool_check)."""

    requests: whole(ge=1000, le=MAX_SIMULATED_REQUESTS) = Field(100_000, description="most sampled requests per pool and rate")
    band_requests: whole(ge=MIN_BAND_REQUESTS, le=MAX_SIMULATED_REQUESTS) = Field(
        5_000,
        description="measured requests sought in every band of a pool (fewer runs when one band fills the pool)",
    )
    seed: Seed = 0
    max_rounds: whole(ge=1, le=20) = Field(4, description="re-plans after pools miss their targets in simulation")
