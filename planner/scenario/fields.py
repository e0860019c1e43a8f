"""What every section of the scenario schema shares: models that are frozen and refuse
unknown keys, and the check that a total-length cut is a histogram edge."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

from planner.histogram import TOTAL_EDGES


class Strict(BaseModel):
    """A section of the scenario: frozen, and a key it does not define is an error (with a
    'did you mean', planner.yamlio)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


# The longest a scenario's or a fleet's name may be: a fleet service's figure is named
# <fleet>_<service>_ttft_target.png and a forecast's table <name>_forecast_datapackage.json, and
# two such names with their decorations must stay within the 255 bytes most file systems allow.
MAX_NAME_CHARS = 100
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")


def _output_name(value: str) -> str:
    """A name that starts the report's file names: refused here, where the scenario says it, rather
    than when the files are written, after the plan."""
    if not _NAME.fullmatch(value) or len(value) > MAX_NAME_CHARS:
        raise ValueError(f"expected letters, digits, '_', '-' and '.', not starting with '.', at most "
                         f"{MAX_NAME_CHARS} characters: the name starts the report's file names")
    return value


OutputName = Annotated[str, AfterValidator(_output_name)]


def histogram_edge(value: int | None, what: str) -> int | None:
    """Total-length cuts must be histogram edges, so that "prompt + output <= T" is exact."""
    if value is None:
        return value
    allowed = {int(e) for e in TOTAL_EDGES}
    if value not in allowed:
        near = sorted(sorted(allowed, key=lambda e: abs(e - value))[:3])
        raise ValueError(f"{what} {value} is not a histogram edge; nearest: {', '.join(map(str, near))}")
    return value

