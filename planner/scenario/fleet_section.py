"""The scenario's hardware: the candidate GPUs (`gpus:`, a catalog id or a mapping with a
negotiated price and an inventory cap) and a fleet that runs today (`fleet:`)."""

from __future__ import annotations

from pydantic import Field, field_validator

from planner.bounds import MAX_TP, GpuCount, PositiveTokens, PriceUsdPerGpuHour, whole
from planner.scenario.fields import Strict, histogram_edge


class GPUCandidate(Strict):
    id: str
    price_usd_per_hour: PriceUsdPerGpuHour | None = Field(None, description="override, e.g. a negotiated price")
    max_gpus: GpuCount | None = Field(None, description="inventory cap for this GPU type")

    def price_per_hour(self, catalog_price_usd_per_hour: float) -> float:
        """USD per GPU-hour: this override if set, else the catalog's price."""
        if self.price_usd_per_hour is not None:
            return self.price_usd_per_hour
        return catalog_price_usd_per_hour


class FleetPool(Strict):
    """One pool of a fleet that runs today: what each replica runs on, and how many there are."""

    gpu: str
    tp: whole(ge=1, le=MAX_TP) = 1
    weight_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    context_limit: PositiveTokens | None = Field(None, description="its pool's limit [default: the scenario's]")
    replicas: GpuCount = Field(ge=1)

    @field_validator("context_limit")
    @classmethod
    def _limit_edge(cls, v: int | None) -> int | None:
        return histogram_edge(v, "context limit")
