"""What every section of the scenario schema shares: models that are frozen and refuse
unknown keys, and the check that a total-length cut is a histogram edge."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from planner.histogram import TOTAL_EDGES


class Strict(BaseModel):
    """A section of the scenario: frozen, and a key it does not define is an error (with a
    'did you mean', planner.yamlio)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def histogram_edge(value: int | None, what: str) -> int | None:
    """Total-length cuts must be histogram edges, so that "prompt + output <= T" is exact."""
    if value is None:
        return value
    allowed = {int(e) for e in TOTAL_EDGES}
    if value not in allowed:
        near = sorted(sorted(allowed, key=lambda e: abs(e - value))[:3])
        raise ValueError(f"{what} {value} is not a histogram edge; nearest: {', '.join(map(str, near))}")
    return value

