"""Which columns of a log hold prompt tokens, output tokens and the arrival time.

Public traces name them differently, so a log is read through a `ColumnSpec`: one of
PRESETS or one built from `--prompt-col/--output-col/--time-col` (or a scenario's
`traffic.columns`). Presets (sources in data/samples/README.md and the trace READMEs):
- planner:  what `planner synth` writes — prompt_tokens, output_tokens, timestamp_ms.
- azure:    Azure LLM inference trace 2023 (Splitwise, ISCA 2024) — TIMESTAMP
            (a datetime), ContextTokens, GeneratedTokens.
- mooncake: Mooncake traces (FAST 2025) — timestamp (milliseconds from the trace start),
            input_length, output_length.
- burstgpt: BurstGPT (Wang et al. 2024) — Timestamp (seconds from the trace start),
            Request tokens, Response tokens.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass, replace

from planner.errors import InputError, did_you_mean

FORMATS = ("parquet", "csv", "jsonl")  # log formats the readers take
TIME_UNITS = ("s", "ms", "us", "ns")  # units of numeric timestamps; datetimes carry their own

# Whether the log being read is a scenario's (traffic.source), whose settings are fields of the
# scenario, not options of the command line: messages suggest the one the user can set.
_FOR_A_SCENARIO = contextvars.ContextVar("planner_log_of_a_scenario", default=False)


@contextlib.contextmanager
def read_for_a_scenario() -> Iterator[None]:
    """Within the block, messages about a log suggest a scenario's fields, not `planner histogram`'s options."""
    token = _FOR_A_SCENARIO.set(True)
    try:
        yield
    finally:
        _FOR_A_SCENARIO.reset(token)


def suggested(setting: str, value: str = "") -> str | None:
    """How a message suggests `setting` ('preset', 'columns', 'time_col', 'time_unit' or 'format'), set to `value`
    if given: the command line's option, or the scenario's field; None where a scenario has none (it
    reads a log by its extension)."""
    if _FOR_A_SCENARIO.get():
        field = {"preset": "traffic.source.preset", "columns": "traffic.source.columns (prompt, output, time)",
                 "time_col": "traffic.source.columns.time", "time_unit": "traffic.source.time_unit",
                 "format": None}[setting]
        return field if field is None or not value else f"{field}: {value}"
    option = {"preset": "--preset", "columns": "--prompt-col/--output-col/--time-col", "time_col": "--time-col",
              "time_unit": "--time-unit", "format": "--format"}[setting]
    return f"{option} {value}".rstrip()


@dataclass(frozen=True)
class ColumnSpec:
    """Column names of one log format, and the unit of numeric timestamps if known.

    `time` None: the log has no usable arrival times (no per-minute rates).
    `time_required` False: use `time` only if the file has it (the default spec).
    `time_unit` None: decide from the values' magnitude (planner.workload.timestamps).
    `preset` the preset it starts from, overridden or not (None: none).
    """

    prompt: str
    output: str
    time: str | None
    time_unit: str | None = None
    time_required: bool = True
    name: str = "custom"
    preset: str | None = None

    def __post_init__(self) -> None:
        if self.time_unit is not None and self.time_unit not in TIME_UNITS:
            raise InputError(
                f"time unit '{self.time_unit}': expected one of {', '.join(TIME_UNITS)}"
            )
        if not self.prompt or not self.output:
            raise InputError("prompt and output column names must not be empty")
        roles = [("prompt", self.prompt), ("output", self.output), ("time", self.time)]
        for i, (role, name) in enumerate(roles):
            for other, other_name in roles[i + 1 :]:
                if name is not None and name == other_name:
                    raise InputError(f"column '{name}' is named for both {role} and {other}; each role needs its own column")

    @property
    def names(self) -> tuple[str, ...]:
        return (
            (self.prompt, self.output)
            if self.time is None
            else (self.prompt, self.output, self.time)
        )


PRESETS: dict[str, ColumnSpec] = {
    "planner": ColumnSpec("prompt_tokens", "output_tokens", "timestamp_ms", "ms", False, "planner", "planner"),
    "azure": ColumnSpec("ContextTokens", "GeneratedTokens", "TIMESTAMP", None, True, "azure", "azure"),
    "mooncake": ColumnSpec("input_length", "output_length", "timestamp", "ms", True, "mooncake", "mooncake"),
    "burstgpt": ColumnSpec("Request tokens", "Response tokens", "Timestamp", "s", True, "burstgpt", "burstgpt"),
}
DEFAULT_PRESET = "planner"


def resolve_columns(
    preset: str | None = None,
    prompt_col: str | None = None,
    output_col: str | None = None,
    time_col: str | None = None,
    time_unit: str | None = None,
    no_time: bool = False,
) -> ColumnSpec:
    """The ColumnSpec for a preset (default: 'planner') with any column or unit overridden.

    An explicitly named time column is required to exist; the default preset's is optional.
    `time_unit` 'auto' or None keeps the preset's unit where the time column is the preset's own
    (named or not): naming the column a trace uses is what a careful user does, and must not turn
    Mooncake's milliseconds into a guess. Another column's unit is the magnitude heuristic's
    (planner.workload.timestamps), which refuses relative times: the preset's unit belongs to its
    column, not to whatever else a log holds.
    """
    name = preset or DEFAULT_PRESET
    if name not in PRESETS:
        raise InputError(did_you_mean(name, PRESETS, what="preset"))
    spec = PRESETS[name]
    changes: dict = {}
    if prompt_col:
        changes["prompt"] = prompt_col
    if output_col:
        changes["output"] = output_col
    if time_col:
        changes.update(time=time_col, time_required=True)
        if time_col != spec.time:
            changes["time_unit"] = None
    if time_unit and time_unit != "auto":
        changes["time_unit"] = time_unit
    if no_time:
        changes.update(time=None, time_unit=None)
    # named for what differs from the preset: its own columns named again are still its columns
    # (requiring the default preset's optional time column changes no name)
    if any(getattr(spec, k) != v for k, v in changes.items() if k != "time_required"):
        changes["name"] = f"{name} (overridden)" if preset else "custom"
    return replace(spec, **changes)


def matching_presets(columns: list[str], *, role: str = "prompt", in_use: str | None = None) -> list[str]:
    """Presets whose prompt and output columns a file has, and its column for `role` ('prompt',
    'output' or 'time': the one found missing), but for the preset `in_use` (for 'did you mean
    --preset X'): a preset that names the missing column too, or the one in use, would not help."""
    have = set(columns)
    return [n for n, s in PRESETS.items()
            if n != in_use and {s.prompt, s.output, getattr(s, role)} <= have]
