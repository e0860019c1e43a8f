"""The forecast as tidy tables — quarters, pools, the total — and their data dictionary.

Each table is one tuple of Columns: a column's name, Table Schema type, description and
value live together, so the CSV files and the data dictionary (`datapackage.json`, a
Frictionless Data Package with a Table Schema per file) come from one source and cannot
disagree. One grain per table:

- quarters: one row per quarter;
- pools: one row per pool per quarter, plus one per reserved GPU type a quarter leaves
  idle; a quarter's rows add up to its cost;
- total: one row, the sum of the quarters' additive columns (and ratios of those sums).
"""

from __future__ import annotations

import csv
import io
import json
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.capacity import KNEE_SHARE
from planner.commitments import (
    Lot,
    above_on_demand_text,
    after_end,
    after_end_usd,
    committed_after_end_usd,
    held,
    in_force,
    quarter_after,
    reserved_below_lines,
)
from planner.daily import CAPS_SET_ASIDE, POLICIES, floor_text, reserved_discount
from planner.files import output_folder, write_bytes_atomic, write_text_atomic
from planner.forecast import PoolRow, QuarterResult
from planner.plan_json import uncertified_message
from planner.plan_objects import Plan
from planner.report import (
    TOKEN_SPLIT_TEXT,
    peak_shortfall_text,
    peak_source_text,
    peak_text,
    pools_text,
    rejected_text,
)
from planner.units import (
    HOURS_PER_MONTH,
    HOURS_PER_QUARTER,
    gpus_text,
    hours_text,
    multiplier_text,
    quarters_text,
    share_text,
    usd_per_million_text,
    usd_per_million_tokens,
    usd_rate_text,
    usd_text,
    utilisation_text,
)
from planner.verification import UNVERIFIED_WHAT, unverified_speed
from planner.worker_pool import draw

DAYS_PER_QUARTER = HOURS_PER_QUARTER / 24

# A forecast's quarters share what certification measured (planner.evaluator.Measurements).
MEASURED_ONCE_TEXT = ("A capacity certification searched in one quarter (a config for a traffic class at one "
                      "context limit), and each class's simulated / model ratio, are kept by the quarters after it, "
                      "which search again only where their own replays miss: a config's planned capacity does not "
                      "move between quarters with where a search started. A quarter planned on its own (`planner "
                      "solve` at its demand) searches afresh, from another starting rate, and can land elsewhere "
                      "within the search's 2%: its plan, and the GPU type a comparison with no commitment names, can "
                      "then differ from that quarter's here.")


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # Table Schema: string, integer, number, boolean
    description: str  # "{period}" reads "quarter" in the quarters table and "forecast" in the total
    value: Callable[[Any], Any]
    digits: int | None = None  # numbers: decimals written [default: 8 for USD per million tokens, else 6]
    total: bool = False  # the total table holds its sum over the quarters

    @property
    def decimals(self) -> int:
        if self.digits is not None:
            return self.digits
        return 8 if "per_million" in self.name else 6


def item_column(name: str, type_: str, description: str, attr: str | None = None) -> Column:
    """A column of a table whose items are (quarter, row) pairs, read from the row's attribute
    `attr` (the column's own name unless given)."""
    getter = operator.attrgetter(attr or name)
    return Column(name, type_, description, lambda x: getter(x[1]))


def item_columns(table: str) -> tuple[Column, ...]:
    """item_column for each line of `table`: the column's name, its type, then its description."""
    rows = [line.split(maxsplit=2) for line in table.strip().splitlines()]
    return tuple(item_column(name, type_, description) for name, type_, description in rows)


def _by_kind(kind: str, per: float = 1.0) -> Callable[[QuarterResult], float]:
    return lambda r: r.usd_per_hour_by_kind[kind] * per


def _input_share(r: QuarterResult) -> float:
    """The share of the quarter's cost charged to input tokens (prefill's share of GPU time)."""
    return r.cost_per_million["input"] * r.plan.input_tokens_per_hour / 1e6 / r.cost_per_hour


def _tokens(r: QuarterResult, kind: str) -> int | None:
    """A quarter's tokens at the day's volume, whole: input and output each rounded, and "all" their
    sum, so that tokens = input_tokens + output_tokens in every row and in the totals (rounded on its
    own, the sum was a token or two off the two parts)."""
    day = r.day
    if day.mean_rps is None:
        return None
    if kind == "all":
        return _tokens(r, "input") + _tokens(r, "output")
    per_request = {"input": day.input_tokens_per_request, "output": day.output_tokens_per_request}[kind]
    return round(day.mean_rps * HOURS_PER_QUARTER * 3600 * per_request)


def _at_volume(kind: str) -> Callable[[QuarterResult], float | None]:
    return lambda r: None if r.cost_per_million_at_volume is None else r.cost_per_million_at_volume[kind]


def _idle_alternative(r: QuarterResult) -> float | None:
    return None if r.idle is None else r.idle.use_them_usd_per_hour


def _policy_columns() -> tuple[Column, ...]:
    out = []
    for key, name in POLICIES:
        out += [
            Column(f"{key}_usd_per_day", "number", f"the day's load curve, {name}: USD per day",
                   lambda r, k=key: r.day.policy(k).usd_per_day),
            Column(f"{key}_usd", "number",
                   f"the day's load curve, {name}: USD over the {{period}} ({DAYS_PER_QUARTER:g} days a quarter)",
                   lambda r, k=key: r.day.policy(k).usd_per_day * DAYS_PER_QUARTER, total=True),
            Column(f"{key}_gpu_hours", "number", f"GPU-hours over the {{period}}, {name}",
                   lambda r, k=key: r.day.policy(k).gpu_hours_per_day * DAYS_PER_QUARTER, digits=3, total=True),
            Column(f"{key}_usd_per_million_tokens", "number",
                   f"{name}: USD per million tokens at the day's real volume",
                   lambda r, k=key: r.day.usd_per_million_tokens(k)),
        ]
    return tuple(out)


_PER_HOUR = "USD per hour"
QUARTER_COLUMNS: tuple[Column, ...] = (
    Column("quarter", "string", "calendar quarter, e.g. 2027Q1", lambda r: r.quarter),
    Column("demand_multiplier", "number", "demand over the base scenario's", lambda r: r.demand_multiplier),
    Column("peak_rps", "number", "planning peak of the busiest hour, served requests/s (growth included, before headroom)",
           lambda r: r.peak_rps),
    Column("mean_rps", "number", "the day's mean served arrival rate, requests/s (the load profile's mean; empty when unknown)",
           lambda r: r.mean_rps),
    Column("context_limit_tokens", "integer", "the quarter's context limit, tokens", lambda r: r.plan.context_limit),
    Column("rejected_share", "number", "share of the log's requests longer than the quarter's context limit: not served, "
           "so in neither the peak, the tokens nor the cost", lambda r: r.plan.rejected_share),
    Column("profile_peak_to_trough", "number", "busiest hour's load over the quietest hour's (empty when the quietest has none)",
           lambda r: r.day.profile.peak_to_trough),
    Column("gpus", "integer", "GPUs the plan runs", lambda r: r.gpus),
    Column("on_demand_gpus", "integer", "of those, GPUs paid on demand", lambda r: sum(x.on_demand_gpus for x in r.pool_rows)),
    Column("reserved_gpus", "integer", "committed GPUs, in use or idle", lambda r: sum(r.reserved_gpus.values())),
    Column("reserved_idle_gpus", "integer", "committed GPUs no pool uses (paid all the same)",
           lambda r: sum(x.gpus for x in r.pool_rows if x.kind == "idle_reserved")),
    Column("on_demand_usd_per_hour", "number", f"on-demand GPUs at on-demand prices, {_PER_HOUR}", _by_kind("on_demand")),
    Column("reserved_used_usd_per_hour", "number", f"committed GPUs in use at their committed prices, {_PER_HOUR}",
           _by_kind("reserved_used")),
    Column("reserved_idle_usd_per_hour", "number", f"idle committed GPUs at their committed prices, {_PER_HOUR}",
           _by_kind("reserved_idle")),
    Column("total_usd_per_hour", "number", f"the fleet's cost: the three above together, {_PER_HOUR}",
           lambda r: r.cost_per_hour),
    Column("on_demand_usd_per_month", "number", f"on-demand cost per month ({HOURS_PER_MONTH} hours), USD",
           _by_kind("on_demand", HOURS_PER_MONTH)),
    Column("reserved_used_usd_per_month", "number", "committed GPUs in use, USD per month", _by_kind("reserved_used", HOURS_PER_MONTH)),
    Column("reserved_idle_usd_per_month", "number", "idle committed GPUs, USD per month", _by_kind("reserved_idle", HOURS_PER_MONTH)),
    Column("total_usd_per_month", "number", "the fleet's cost, USD per month", lambda r: r.cost_per_month),
    Column("on_demand_usd", "number", f"on-demand cost over the {{period}} ({HOURS_PER_QUARTER:,} hours a quarter), USD",
           _by_kind("on_demand", HOURS_PER_QUARTER), total=True),
    Column("reserved_used_usd", "number", "committed GPUs in use over the {period}, USD",
           _by_kind("reserved_used", HOURS_PER_QUARTER), total=True),
    Column("reserved_idle_usd", "number", "idle committed GPUs over the {period}, USD",
           _by_kind("reserved_idle", HOURS_PER_QUARTER), total=True),
    Column("total_usd", "number", "the fleet's cost over the {period}, USD",
           lambda r: r.cost_per_hour * HOURS_PER_QUARTER, total=True),
    Column("input_usd", "number", "the part of total_usd charged to input tokens: each pool's cost (idle committed GPUs "
           "spread over the pools in proportion to their cost) times its share of GPU time in prefill at the peak, USD",
           lambda r: r.cost_per_hour * HOURS_PER_QUARTER * _input_share(r), total=True),
    Column("output_usd", "number", "the rest of total_usd, charged to output tokens (decode and idle time alike), USD",
           lambda r: r.cost_per_hour * HOURS_PER_QUARTER * (1 - _input_share(r)), total=True),
    Column("use_reserved_usd_per_hour", "number",
           "when committed GPUs sit idle: the cheapest plan that runs them all, USD per hour (empty otherwise, or when none can)",
           _idle_alternative),
    Column("input_tokens_per_hour_at_peak", "number", "prompt tokens per hour at the peak rate",
           lambda r: r.plan.input_tokens_per_hour, digits=0),
    Column("output_tokens_per_hour_at_peak", "number", "output tokens per hour at the peak rate",
           lambda r: r.plan.output_tokens_per_hour, digits=0),
    Column("usd_per_million_tokens_blended_at_peak", "number", "total cost / all tokens at the peak rate, USD per million",
           lambda r: r.cost_per_million["blended"]),
    Column("usd_per_million_input_tokens_at_peak", "number", "input cost / prompt tokens at the peak rate, USD per million",
           lambda r: r.cost_per_million["input"]),
    Column("usd_per_million_output_tokens_at_peak", "number", "output cost / output tokens at the peak rate, USD per million",
           lambda r: r.cost_per_million["output"]),
    Column("input_tokens", "number", "prompt tokens over the {period} at the day's real volume",
           lambda r: _tokens(r, "input"), digits=0, total=True),
    Column("output_tokens", "number", "output tokens over the {period} at the day's real volume",
           lambda r: _tokens(r, "output"), digits=0, total=True),
    Column("tokens", "number", "prompt + output tokens over the {period} at the day's real volume",
           lambda r: _tokens(r, "all"), digits=0, total=True),
    Column("usd_per_million_tokens_blended", "number", "total_usd / tokens: USD per million tokens at the real volume",
           _at_volume("blended")),
    Column("usd_per_million_input_tokens", "number", "input_usd / input_tokens, USD per million", _at_volume("input")),
    Column("usd_per_million_output_tokens", "number", "output_usd / output_tokens, USD per million", _at_volume("output")),
    Column("utilisation_at_peak", "number",
           f"peak rate / the fleet's planned capacity (each replica at its planned capacity: {KNEE_SHARE:.0%} of its "
           "lowest ceiling by the model, or the capacity certification measured in simulation; not the pools' "
           "capacity_rps_per_replica where that is 'replayed': set by the rate certification replayed the pool at)",
           lambda r: r.utilisation["peak"]),
    Column("utilisation_at_mean", "number", "the day's mean rate / the fleet's capacity", lambda r: r.utilisation["mean"]),
    *_policy_columns(),
)

POOL_COLUMNS: tuple[Column, ...] = (
    Column("quarter", "string", "calendar quarter (quarters.quarter)", lambda x: x[0]),
    *item_columns("""
        kind                        string   serving: a pool of the plan; idle_reserved: committed GPUs of one type that no pool uses
        pool                        string   traffic class the pool serves (all, short, long; empty for idle GPUs)
        gpu                         string   GPU type
        tp                          integer  tensor-parallel degree, GPUs per replica
        weight_dtype                string   weight dtype
        kv_dtype                    string   KV-cache dtype
        context_limit               integer  context limit of the pool, tokens
        replicas                    integer  replicas in the pool
        gpus                        integer  GPUs in the row
        reserved_gpus               integer  of those, committed GPUs (a type's commitments fill its pools in order)
        on_demand_gpus              integer  of those, GPUs paid on demand
        on_demand_usd_per_gpu_hour  number   the quarter's on-demand price of the GPU type, USD per GPU-hour
    """),
    Column("reserved_usd_per_gpu_hour", "number",
           "mean committed price of the type's commitments, USD per GPU-hour, where the row holds committed GPUs "
           "(empty otherwise: its GPUs are paid on demand)",
           lambda x: x[1].reserved_usd_per_gpu_hour if x[1].reserved_gpus else None),
    item_column("usd_per_hour", "number", "the row's GPUs at the prices they are paid, USD per hour; a quarter's rows add up "
           "to quarters.total_usd_per_hour"),
    Column("usd_per_month", "number", f"the same per month ({HOURS_PER_MONTH} hours), USD", lambda x: x[1].usd_per_hour * HOURS_PER_MONTH),
    Column("usd", "number", f"the same over the quarter ({HOURS_PER_QUARTER:,} hours), USD",
           lambda x: x[1].usd_per_hour * HOURS_PER_QUARTER),
    item_column("capacity_rps_per_replica", "number", "requests/s one replica is planned for, within every target "
                "(where it comes from: capacity_planned_by)"),
    item_column("capacity_planned_by", "string",
                "model: the model's capacity; calibration: the model's, scaled by the simulated / model ratio "
                "certification measured on another config of the class; simulation: certification's simulated capacity "
                "of this config (bisected, then judged at that rate as certification judges a pool, on other seeds); held: the rate its pool held every target at in simulation (a "
                "floor: its limit was not searched); log: a replica's share lowered after the log's own arrivals "
                "missed; bound: a proven upper bound, not searched; replayed: the rate its replicas held every target "
                "at when certification replayed the plan, where the capacity it was solved with was not a rate held there "
                "(the model's, a bound, the model's × a ratio, or a log's share); the day's "
                "scaling plans no replica above it (for a stated fleet, replayed at its peak, that rate × "
                "headroom where the model has room for it, and at least that rate)"),
    Column("mixed_reserved_replicas", "integer",
           "the day's reserved + on-demand mix: replicas of the pool reserved all day (the rest run on demand per hour)",
           lambda x: x[1].mixed_reserved_replicas),
    Column("planned_rps_per_replica", "number",
           "requests/s one replica was planned at when the quarter's plan was solved: quarters.utilisation_at_peak is "
           "the peak over replicas × this, summed over the quarter's serving rows; it differs from "
           "capacity_rps_per_replica only where that is 'replayed' (empty for idle GPUs)",
           lambda x: x[1].planned_rps_per_replica),
)


# A total table's first columns (a scenario's forecast's and a fleet's): the quarters it sums.
SPAN_COLUMNS: tuple[Column, ...] = (
    Column("first_quarter", "string", "the forecast's first quarter", lambda t: t["first_quarter"]),
    Column("last_quarter", "string", "the forecast's last quarter", lambda t: t["last_quarter"]),
    Column("quarters", "integer", "quarters summed, first_quarter to last_quarter (four make a year)", lambda t: t["quarters"]),
    Column("hours", "number", f"hours summed ({HOURS_PER_QUARTER:,} a quarter)", lambda t: t["hours"], digits=0),
)
# A total table's last column: what its sums leave out.
COMMITTED_AFTER_END = Column(
    "committed_after_end_usd", "number",
    "what the commitments the forecast made (its reservations and the GPUs it carried forward) and held in the "
    "last quarter still cost after it, each at its own price for the quarters its term has left "
    "(forecast.commitment_term_quarters), USD; not in total_usd (empty: no term stated). A fleet inventory's own "
    "owned and reserved GPUs are not in it: they are held in every quarter and state no end",
    lambda t: t["committed_after_end_usd"])


def span_totals(quarter_rows: list[list[str]], columns: Sequence[Column], after_end_usd: float | None) -> dict[str, Any]:
    """A total table's row from a quarters table as written (its header first): the span, each of
    `columns` (those marked total) summed from its written cells, so that the file's rows add up to
    the total exactly (None where a quarter has no value), and what is committed after the end."""
    head, body = quarter_rows[0], quarter_rows[1:]
    t: dict[str, Any] = {"first_quarter": body[0][0], "last_quarter": body[-1][0], "quarters": len(body),
                         "hours": len(body) * HOURS_PER_QUARTER, "committed_after_end_usd": after_end_usd}
    for c in columns:
        if c.total:
            cells = [row[head.index(c.name)] for row in body]
            t[c.name] = None if "" in cells else sum(float(x) for x in cells)
    return t


def summed(columns: Sequence[Column]) -> tuple[Column, ...]:
    """The total table's column for each quarters column marked total: the sum of its cells."""
    return tuple(Column(c.name, c.type, c.description, lambda t, n=c.name: t[n], c.digits, True) for c in columns if c.total)


TOTAL_COLUMNS: tuple[Column, ...] = (
    *SPAN_COLUMNS,
    *summed(QUARTER_COLUMNS),
    Column("usd_per_million_tokens_blended", "number",
           "total_usd / tokens, USD per million tokens (empty where a quarter's fleet cannot carry its peak: it does "
           "not serve those tokens)", lambda t: _blended_per_million(t)),
    Column("usd_per_million_input_tokens", "number", "input_usd / input_tokens, USD per million",
           lambda t: _per_million(t, "input_usd", "input_tokens")),
    Column("usd_per_million_output_tokens", "number", "output_usd / output_tokens, USD per million",
           lambda t: _per_million(t, "output_usd", "output_tokens")),
    *(Column(f"{k}_usd_per_million_tokens", "number", f"{k}_usd / tokens: {name}, USD per million tokens",
             lambda t, k=k: _per_million(t, f"{k}_usd", "tokens")) for k, name in POLICIES),
    COMMITTED_AFTER_END,  # last, so that the columns before it keep the places they had before it came
)


def _per_million(t: dict, usd: str, tokens: str) -> float | None:
    return None if t[usd] is None else usd_per_million_tokens(t[usd], t[tokens])


def _blended_per_million(t: dict) -> float | None:
    """The plans' cost over every quarter's tokens; none where a quarter's fleet cannot carry its peak
    (a stated fleet), whose own price per token is none: its cost does not buy its quarter's tokens."""
    return None if t["unpriced"] else _per_million(t, "total_usd", "tokens")


# ------------------------------------------------------------------ writing


def _cell(col: Column, value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    if col.type == "boolean":
        return "true" if value else "false"
    if col.type == "integer":
        return str(int(value))
    if col.type == "number":
        return f"{value:.{col.decimals}f}"
    return str(value)


def _table(columns: Sequence[Column], items: Sequence[Any]) -> list[list[str]]:
    names = [c.name for c in columns]
    if len(set(names)) != len(names):
        raise ValueError(f"a column appears twice in {names}")
    return [names] + [[_cell(c, c.value(item)) for c in columns] for item in items]


def _csv(rows: list[list[str]]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def _totals(quarter_rows: list[list[str]], results: Sequence[QuarterResult]) -> dict[str, Any]:
    """Sums of the additive columns as written, and what the commitments cost after the last
    quarter (None without a stated term)."""
    fc = results[-1].plan.scenario.forecast
    after = committed_after_end_usd(results[-1].lots, len(results) - 1, None if fc is None else fc.commitment_term_quarters)
    return {**span_totals(quarter_rows, QUARTER_COLUMNS, after),
            "unpriced": any(not math.isfinite(r.cost_per_million["blended"]) for r in results)}


def forecast_tables(results: Sequence[QuarterResult]) -> dict[str, str]:
    """The three CSV texts: {"quarters": ..., "pools": ..., "total": ...}."""
    quarters = _table(QUARTER_COLUMNS, results)
    pools: list[tuple[str, PoolRow]] = [(r.quarter, row) for r in results for row in r.pool_rows]
    return {
        "quarters": _csv(quarters),
        "pools": _csv(_table(POOL_COLUMNS, pools)),
        "total": _csv(_table(TOTAL_COLUMNS, [_totals(quarters, results)])),
    }


TABLES = {"quarters": QUARTER_COLUMNS, "pools": POOL_COLUMNS, "total": TOTAL_COLUMNS}
_PERIOD = {"quarters": "quarter", "pools": "quarter", "total": "forecast's quarters together"}


def table_file(name: str, table: str) -> str:
    return f"{name}_forecast_{table}.csv"


def datapackage(name: str, tables: dict[str, tuple[Column, ...]] | None = None, *,
                description: str | None = None) -> dict:
    """The data dictionary of the tables (by default the three of a scenario's forecast): a
    Frictionless Data Package (Table Schema). Every table but `quarters` and `total` refers to
    `quarters` by its quarter."""
    resources = []
    for table, columns in (tables or TABLES).items():
        fields = []
        for c in columns:
            field = {"name": c.name, "type": c.type, "description": c.description.format(period=_PERIOD.get(table, "quarter"))}
            if table == "total" and c.total:
                field["description"] += " (sum of the quarters' column of this name)"
            fields.append(field)
        schema: dict[str, Any] = {"fields": fields, "missingValues": [""]}
        if table == "quarters":
            schema["primaryKey"] = ["quarter"]
        elif table != "total":
            schema["foreignKeys"] = [{"fields": ["quarter"], "reference": {"resource": "quarters", "fields": ["quarter"]}}]
        resources.append({
            "name": table, "path": table_file(name, table), "profile": "tabular-data-resource", "format": "csv",
            "mediatype": "text/csv", "encoding": "utf-8", "schema": schema,
        })
    return {
        "profile": "tabular-data-package",
        "name": f"{name.lower()}-forecast",
        "title": f"Forecast: {name}",
        "description": description or "Quarterly fleet, cost and cost per token (planner forecast). quarters: one row "
        "per quarter; pools: one row per pool per quarter plus idle committed GPUs, adding up to the quarter's cost; "
        "total: the quarters' additive columns summed.",
        "resources": resources,
    }


def datapackage_json(name: str) -> str:
    return json.dumps(datapackage(name), indent=2, ensure_ascii=False) + "\n"


# ------------------------------------------------------------------ report and JSON


def _idle_lines(results: Sequence[QuarterResult]) -> list[str]:
    lines = []
    for r in results:
        if r.idle is None:
            continue
        idle = r.idle
        gpus = ", ".join(f"{n:,} {g}" for g, n in idle.gpus.items())
        text = (f"- **{r.quarter}: {gpus} reserved GPU(s) idle**, {usd_text(idle.usd_per_hour)}/hour "
                f"({usd_text(idle.usd_per_hour * HOURS_PER_QUARTER)} over the quarter), paid whether used or not. ")
        if idle.use_them_usd_per_hour is None and r.plan.given_fleet:
            text += f"{idle.use_them_summary[:1].upper()}{idle.use_them_summary[1:]}."
        elif idle.use_them_usd_per_hour is None:
            text += f"No plan runs them all: {idle.use_them_summary}."
        else:
            d = idle.use_them_usd_per_hour - r.cost_per_hour
            if abs(d) < 0.005:
                vs = "the same as the plan: they are surplus to this quarter's demand"
            else:
                vs = f"{usd_text(abs(d))}/hour {'more' if d > 0 else 'less'} than the plan"
            text += (f"The cheapest plan that runs them all costs {usd_text(idle.use_them_usd_per_hour)}/hour ({vs}): "
                     f"{idle.use_them_summary}.")
        lines.append(text)
    return lines


def after_end_headline(usd: float | None, last_quarter: str, unpriced_usd_per_hour: float = 0.0) -> str:
    """The headline's clause on what the forecast's own reservations commit past its last quarter:
    spend already signed for, which the quarters' total does not hold (the text below breaks it down,
    and adds what carry_forward would commit next). usd: priced over their terms; without a term,
    unpriced_usd_per_hour is what they run at when the forecast ends (with neither, nothing is said)."""
    if usd:
        return f"; the forecast's reservations already commit {usd_text(usd)} more after {last_quarter}"
    if unpriced_usd_per_hour:
        return (f"; the forecast's reservations, {usd_text(unpriced_usd_per_hour)}/hour at the end of {last_quarter}, "
                "run on past it, unpriced (no forecast.commitment_term_quarters)")
    return ""


def _held_usd_per_hour(last: QuarterResult) -> float:
    """What the commitments held in a quarter cost per hour."""
    return sum(n * last.reserved_price[g] for g, n in last.reserved_gpus.items() if n)


def _unpriced_at_the_end(results: Sequence[QuarterResult]) -> float:
    """What the forecast's reservations cost per hour at its end where they run on unpriced
    (Forecast.unpriced_after_end)."""
    fc = results[-1].plan.scenario.forecast
    return _held_usd_per_hour(results[-1]) if fc is not None and fc.unpriced_after_end else 0.0


def _peak_lines(results: Sequence[QuarterResult]) -> list[str]:
    """Where the quarters' peak comes from: what it is a peak of (measured, drawn or stated), how it
    was taken as the plan's report says it (Traffic; a quantile of few minutes said so), and what
    multiplies it. A quarter changes growth, context limit, prices and commitments, never the
    traffic source: its peak is the first's."""
    first = results[0].plan
    served = " × the share of requests served" if any(r.plan.rejected_requests for r in results) else ""
    growth = first.scenario.traffic.growth / results[0].demand_multiplier  # the base scenario's
    name, note = peak_source_text(first.scenario)
    # a pool planned at its class's own bursts (plan_objects.class_peak_rps), above its share of that peak
    own: dict[str, list[str]] = {}
    for r in results:
        for tc in r.plan.own_burst_classes:
            own.setdefault(tc.label, []).append(f"{r.quarter} {tc.peak_rps:,.3f} requests/s against "
                                                f"{tc.share_peak_rps:,.3f}")
    # each quarter's figures here: a quarter's own context limit makes classes the scenario's report has not
    bursts = "".join(f" The {label} pool is planned at its class's own bursts' rate, above its share of that peak "
                     f"({'; '.join(quarters)}; the rule is the scenario's report's, Traffic section)."
                     for label, quarters in own.items())
    return ["", f"Peak req/s is {name}, {first.measured_peak_rps:,.3f} requests/s ({peak_text(first)}"
            f"{'; ' + note if note else ''}), "
            f"× traffic.growth {growth:g} × the quarter's Demand × base{served}; capacity is planned for × headroom "
            f"{first.scenario.traffic.headroom:g}.{bursts}"]


def _rejected_lines(results: Sequence[QuarterResult]) -> list[str]:
    """The requests each quarter turns away (longer than its context limit): served traffic only is
    in the costs and tokens, so a quarter that lowers the limit would otherwise read as cheaper
    demand without a word."""
    rejected = [f"{r.quarter} {rejected_text(r.plan)} (limit {r.plan.context_limit:,} tokens)"
                for r in results if r.plan.rejected_requests]
    if not rejected:
        return []
    return ["", "Not served, so in neither the costs nor the tokens: the requests over a quarter's context limit ("
            + ", ".join(rejected) + ")."]


def _stated_prices_lines(results: Sequence[QuarterResult]) -> list[str]:
    """The on-demand prices the quarters state (forecast.quarters[].prices), against the price the
    others pay: a change of price moves the table's costs, so the report says which and when."""
    spec = {q.quarter: q for q in results[0].plan.scenario.forecast.quarters}
    quarters = [spec[r.quarter] for r in results]
    gpus = sorted({g for q in quarters for g in q.prices})
    if not gpus:
        return []
    parts = []
    for g in gpus:
        stated = "; ".join(f"{q.quarter} {usd_rate_text(q.prices[g])}" for q in quarters if g in q.prices)
        other = next((r for r, q in zip(results, quarters, strict=True) if g not in q.prices), None)
        cand = None if other is None else next((c for c in other.plan.scenario.gpu_candidates if c.id == g), None)
        if cand is not None:
            stated += f" (other quarters {usd_rate_text(cand.price_per_hour(other.plan.catalog.gpu(g).price_usd_per_hour))})"
        parts.append(f"{g}: {stated}")
    return ["", "On-demand prices the quarters state, per GPU-hour: " + "; ".join(parts) + "."]


def _price_basis_lines(results: Sequence[QuarterResult]) -> list[str]:
    """The prices behind the quarters' costs that no quarter states: each GPU type the quarters run
    at its on-demand price (the scenario's `gpus:`, else the catalog's as loaded, which the plan's
    report sources), and how a commitment is priced. Without them the table's dollars cannot be traced."""
    first = results[0].plan
    scn, catalog = first.scenario, first.catalog
    fc = scn.forecast
    stated = {g for q in fc.quarters for g in q.prices}
    paid = {p.config.gpu.id: p.config.price_usd_per_hour for r in results for p in r.plan.pools}  # as the pools CSV
    prices = [f"{g} {usd_rate_text(usd)} ({'the catalog' if usd == catalog.gpu(g).price_usd_per_hour else 'the scenario'}'s)"
              for g, usd in sorted(paid.items()) if g not in stated]
    lines = []
    if prices:
        lines.append("On-demand prices, per GPU-hour, in every quarter: " + ", ".join(prices)
                     + "; the plan's report gives each catalog price's source.")
    if any(any(r.reserved_gpus.values()) for r in results) or fc.carry_forward:
        discount, where = reserved_discount(scn)
        rule = (f" × (1 − {discount:g}) ({where}, the scenario's assumption)" if where.endswith("reserved_discount")
                else f", {where}")
        own = "; ".join(f"{g} at {usd_rate_text(v)}" for g, v in sorted(fc.reserved_prices.items()))
        lines.append("A committed GPU is priced " + (f"{own} (forecast.reserved_prices); any other type " if own else "")
                     + "at the on-demand price of the quarter that commits it ("
                     + ("the quarter whose fleet carry_forward carries, or the one that states `reserved:`"
                        if fc.carry_forward else "the one that states `reserved:`") + ")" + rule + ".")
    above = above_on_demand_text(results)
    if above:
        lines.append(above)
    return ["", " ".join(lines)] if lines else []


def _unused_price_lines(results: Sequence[QuarterResult]) -> list[str]:
    """Why a stated price changes no plan (forecast.UnusedPrice), quarter by quarter: the cheapest
    plans with no commitment, beside what the quarter's plan pays with the commitments it carries."""
    rows = []
    for r in results:
        for u in r.unused_prices:
            if u.alone is None:
                alone = f"no plan on {u.gpu} alone carries it ({u.why_none})"
            else:
                d = u.alone.cost_per_hour - u.cheapest.cost_per_hour
                than = ("the same as" if abs(d) < 0.005 else
                        f"{usd_text(abs(d))}/hour {'more' if d > 0 else 'less'} than")
                alone = (f"{u.gpu} alone takes {pools_text(u.alone)}, {usd_text(u.alone.cost_per_hour)}/hour ({than} "
                         f"the cheapest plan, {pools_text(u.cheapest)}, {usd_text(u.cheapest.cost_per_hour)}/hour)")
            committed = ", ".join(f"{n:,} {g}" for g, n in r.reserved_gpus.items() if n)
            if r.plan.given_fleet:
                why = "the quarter runs the fleet the scenario states"
            elif committed and any(p.gpu == u.gpu for p in u.cheapest.pools):
                why = (f"with no commitment {u.gpu} would be chosen, but the quarter's plan keeps the {committed} it "
                       f"has committed (paid whether used or not), {usd_text(r.cost_per_hour)}/hour in all")
            elif committed:
                why = f"the quarter's plan, with the {committed} it has committed, costs {usd_text(r.cost_per_hour)}/hour"
            else:
                why = f"the quarter's plan costs {usd_text(r.cost_per_hour)}/hour"
            rows.append(f"- {r.quarter}, {u.gpu} at {usd_rate_text(u.usd_per_gpu_hour)}: not in the plan. For this "
                        f"quarter's load at its on-demand prices, with no commitment, {alone}; {why}.")
    if not rows:
        return []
    cert = results[0].plan.certification
    how = ("by the model alone, as the quarter's is" if cert is None else
           "certified as the quarter's is" if cert.certified else "replayed as the quarter's is")
    return ["", f"A stated price the plan does not use, and why (each plan {how}):", "", *rows]


def _short_lines(results: Sequence[QuarterResult]) -> list[str]:
    """A stated fleet that cannot carry a quarter's peak, said where the quarter's numbers are: its
    cost per token has no tokens to divide by, and a day's curve sized for the load costs more than it."""
    out = []
    for r in results:
        if short := peak_shortfall_text(r.plan) if r.plan.given_fleet else "":
            out.append(f"- **{r.quarter}: the stated fleet does NOT carry this quarter's peak** ({short}): it cannot "
                       "serve the load, so no cost per token is quoted for it, and the day's policies below, sized for "
                       "the load, are no comparison with it.")
        if r.plan.given_fleet and (missed := uncertified_message(r.plan)):  # its audit, as `planner solve` prints it
            out.append(f"- **{r.quarter}: {missed}**.")
    return out


def model_only_lines(plans: Sequence, *, services: bool = False) -> list[str]:
    """A line and a blank one where a forecast's plans were not certified by simulation (`verify:
    false`, `--no-verify`), or nothing: such a forecast read as a certified one does (an outside
    probe: finance_2027 with --no-verify, 17 -> 25 GPUs and 5.8% below the certified forecast's cost,
    said "certified" in words and had no `certified` key). services: a fleet's (whose services
    certify all or none: fleet.refuse_mixed_verify)."""
    if not any(p.certification is None for p in plans):
        return []
    whose = "Every service's plan in every quarter" if services else "Every quarter's plan"
    if all(p.given_fleet for p in plans):  # audited, not planned: nothing is re-planned
        whose, then = "Every quarter's audit of the stated fleet", "a replay can read a target the model holds missed"
    else:
        then = "where a replay reads a target missed, certification plans the pool at a lower rate, and a certified "
        then += "forecast can need more GPUs"
    return [f"**{whose} is the model's alone**: certification by simulation is off (`verify: false` or "
            f"`--no-verify`), so no pool was replayed; {then}.", ""]


def unverified_speed_lines(quarters: Sequence[tuple[str, Plan]], *, services: bool = False) -> list[str]:
    """A line and a blank one naming what in the quarters' plans (quarter, plan) no measurement backs
    (planner.verification: a GPU with borrowed efficiency factors, a mixture of experts), with the
    quarters where not in all, or nothing: those quarters' GPUs and cost rest on the speed model there.
    The plans' reports lead with it; the forecast said nothing of it (an outside reading of
    fleet_2027q1's, whose fleet report warns that two services' speed may be overstated by 81%, at 3
    GPUs more). A mixture of experts' error is sized in the plan's report at the base demand; a
    borrowed GPU's has no measurement to size it. services: a fleet's, each service named."""
    every = list(dict.fromkeys(q for q, _ in quarters))
    found: dict[tuple, tuple[str, list[str]]] = {}
    for quarter, plan in quarters:
        for u in unverified_speed(plan):
            whose = f"{plan.scenario.name} ({u.id}, {UNVERIFIED_WHAT[u.kind]}" if services else (
                f"{u.id} ({UNVERIFIED_WHAT[u.kind]}")
            seen = found.setdefault((plan.scenario.name if services else "", u.kind, u.id), (whose, []))[1]
            if quarter not in seen:
                seen.append(quarter)
    if not found:
        return []
    named = ", ".join(whose + ("" if len(seen) == len(every) else f"; {', '.join(seen)}") + ")"
                      for whose, seen in found.values())
    kinds = {kind for _, kind, _ in found}
    report = "the fleet's report (`planner solve` on the fleet file)" if services else "the plan's report (`planner solve`)"
    sized = []
    if "model" in kinds:
        sized.append(f"a mixture of experts' speed may be overstated by the median error measured on published rows, "
                     f"and {report} says what that would need more at the base demand")
    if "gpu" in kinds:
        sized.append("a GPU's borrowed factors have no measurement of its own to size the error: benchmark it")
    return [f"**Speed not backed by a measurement of its own**, in the quarters' plans: {named}; those quarters' GPUs "
            f"and cost rest on the speed model there: {'; '.join(sized)}.", ""]


def certified_flag(plans: Sequence) -> bool | None:
    """`certified` of a forecast's --json: whether every quarter's plan held in simulation (false only
    for a stated fleet's audit that missed: a planned quarter that cannot be certified stops the forecast,
    exit 3), or None where certification was off."""
    if any(p.certification is None for p in plans):
        return None
    return all(p.certification.certified for p in plans)


def forecast_markdown(name: str, results: Sequence[QuarterResult], *, figure: str | None = None, heading: int = 1) -> str:
    h = "#" * heading
    total = _totals(_table(QUARTER_COLUMNS, results), results)
    first, last = results[0], results[-1]
    span = f"{first.quarter} → {last.quarter}"
    cpm_total = _blended_per_million(total)
    lines = [
        f"{h} Forecast: {name}",
        "",
        (f"**{first.quarter}: fleet {gpus_text(first.gpus)}, {usd_text(total['total_usd'])} for the quarter"
         if len(results) == 1 else
         f"**{span}: fleet {first.gpus:,} → {gpus_text(last.gpus)}, {usd_text(first.cost_per_hour * HOURS_PER_QUARTER)} → "
         f"{usd_text(last.cost_per_hour * HOURS_PER_QUARTER)} per quarter; {quarters_text(total['quarters'])} cost "
         f"{usd_text(total['total_usd'])}")
        + (f", {usd_per_million_text(cpm_total)} per million tokens at the day's real volume" if cpm_total is not None else "")
        + after_end_headline(total["committed_after_end_usd"], last.quarter, _unpriced_at_the_end(results)) + ".**",
        "",
        *model_only_lines([r.plan for r in results]),
        *unverified_speed_lines([(r.quarter, r.plan) for r in results]),
        "| Quarter | Demand × base | Peak req/s | Deployment | GPUs (change) | Reserved: in use / idle | $/hour: on demand + "
        "reserved + idle = total | $/quarter | $/M tokens at peak (blended / input / output) | $/M tokens at the day's "
        "volume (blended / input / output) | Utilisation peak / mean |",
        "|---|---:|---:|---|---|---|---|---:|---|---|---|",
    ]
    for r in results:
        gpus = ", ".join(f"{n:,} {g}" + (f" ({r.change_by_type[g]:+,d})" if r.change_by_type.get(g) else "")
                         for g, n in r.gpus_by_type.items())
        removed = [f"0 {g} ({d:+,d})" for g, d in r.change_by_type.items() if d < 0 and g not in r.gpus_by_type]
        gpus = ", ".join([gpus, *removed]) if removed else gpus
        idle = r.idle.gpus if r.idle else {}
        reserved = ", ".join(
            f"{n - idle.get(g, 0)} / {idle.get(g, 0)} {g} @ {usd_rate_text(r.reserved_price[g])}/GPU-hour"
            for g, n in r.reserved_gpus.items() if n
        ) or "—"
        k = r.usd_per_hour_by_kind
        cpm, vol = r.cost_per_million, r.cost_per_million_at_volume
        at_vol = " / ".join(usd_per_million_text(vol[x]) for x in ("blended", "input", "output")) if vol else "—"
        util_mean = utilisation_text(r.utilisation["mean"]) if r.utilisation["mean"] is not None else "—"
        lines.append(
            f"| {r.quarter} | {multiplier_text(r.demand_multiplier)} | {r.peak_rps:,.2f} | {r.plan.solution.split_text} | "
            f"{gpus} | {reserved} | "
            f"{usd_text(k['on_demand'])} + {usd_text(k['reserved_used'])} + {usd_text(k['reserved_idle'])} = {usd_text(r.cost_per_hour)} | "
            f"{usd_text(r.cost_per_hour * HOURS_PER_QUARTER)} | "
            f"{usd_per_million_text(cpm['blended'])} / {usd_per_million_text(cpm['input'])} / {usd_per_million_text(cpm['output'])} | {at_vol} | "
            f"{utilisation_text(r.utilisation['peak'])} / {util_mean} |"
        )
    # as the total's CSV columns: none where a quarter's fleet cannot carry its peak (it would divide by tokens not served)
    tot_vol = " / ".join(usd_per_million_text(x) for x in (_blended_per_million(total),
                                                           _per_million(total, "input_usd", "input_tokens"),
                                                           _per_million(total, "output_usd", "output_tokens")))
    # The parts go with the total, in the $/quarter column: under $/hour they read as an hourly rate.
    lines.append(f"| **Total** ({quarters_text(total['quarters'])}) | | | | | | | **{usd_text(total['total_usd'])}** = "
                 f"{usd_text(total['on_demand_usd'])} on demand + {usd_text(total['reserved_used_usd'])} reserved + "
                 f"{usd_text(total['reserved_idle_usd'])} idle | | {tot_vol} | |")
    lines += (_peak_lines(results) + _rejected_lines(results) + _price_basis_lines(results)
              + _stated_prices_lines(results) + _unused_price_lines(results))
    idle = _idle_lines(results)
    if idle:
        lines += ["", *idle]
    lines += reserved_below_lines(text for r in results for text in r.reserved_below)
    lines += ["", _held_at_the_end(results)]
    short = _short_lines(results)
    if short:
        lines += ["", *short]
    lines += ["", *_policies_markdown(results, total, heading + 1)]
    lines += [
        "",
        "Cost per million tokens is quoted at the peak rate (the fleet is sized for the busiest hour) and at the day's "
        "real volume (what a quarter of traffic really pays per token: the load profile's mean rate). "
        f"{TOKEN_SPLIT_TEXT}. Reserved GPUs are "
        "paid whether used or not; idle ones are priced at their type's mean committed price. Utilisation is the arrival "
        f"rate over the fleet's planned capacity, each replica at its planned capacity ({KNEE_SHARE:.0%} of its lowest "
        f"ceiling by the model, or the capacity certification measured in simulation; headroom keeps the peak below 100%)."
        + (f" {MEASURED_ONCE_TEXT}" if results[0].plan.certification is not None and not results[0].plan.given_fleet
           else "")
        + f" {hours_text(quarters=True)} Amounts are US dollars. Demand × base is the base "
        f"peak's multiplier, the quarters' growth {growth_text(results[0].plan.scenario.forecast)}. The tables are in `{table_file(name, 'quarters')}`, "
        f"`{table_file(name, 'pools')}` and `{table_file(name, 'total')}`, their columns described in "
        f"`{name}_forecast_datapackage.json`.",
    ]
    if figure:
        lines += ["", f"![Forecast]({figure})"]
    return "\n".join(lines) + "\n"


def growth_text(forecast) -> str:
    """How a forecast's quarters' growth makes their demand multiplier (a scenario's or a fleet's), and
    any growth that reads as a percentage written as the fraction (Forecast.growth_warnings)."""
    mode = "compounded" if forecast is None or forecast.growth_mode == "compound" else "each against the base"
    warnings = [] if forecast is None else forecast.growth_warnings()
    return mode + (f" (note: {'; '.join(warnings)})" if warnings else "")


def _held_at_the_end(results: Sequence[QuarterResult]) -> str:
    """What the last quarter leaves committed, and what carry_forward would commit next: spend that
    runs past the forecast, which its total does not count."""
    last = results[-1]
    holding = {g: n for g, n in last.reserved_gpus.items() if n}
    usd = _held_usd_per_hour(last)
    fc = last.plan.scenario.forecast
    carried = fc is not None and fc.carry_forward
    term = None if fc is None else fc.commitment_term_quarters
    if holding:
        # With a term the holding falls away lot by lot after the end: no quarter's run rate to quote.
        text = (f"Held at the end of {last.quarter}: " + ", ".join(
            f"{n:,} {g} at {usd_rate_text(last.reserved_price[g])}" for g, n in holding.items())
            + f", {usd_text(usd)}/hour" + ("" if term else f" ({usd_text(usd * HOURS_PER_QUARTER)} a quarter)") + ". ")
        if term is not None:
            text += after_end_text([r.quarter for r in results], last.lots, term)
        else:
            text += (("A commitment, once made, is paid in every later quarter of the forecast, used or not; "
                      if carried else "Without carry_forward a quarter's reservations are priced in that quarter only; ")
                     + f"the total above counts none past {last.quarter}, so whatever term one runs beyond it is spend "
                     "this forecast does not show (forecast.commitment_term_quarters states the term and prices it).")
    else:
        text = f"Nothing is committed at the end of {last.quarter}."
    # What stays committed into the next quarter: every lot without a term, those still in theirs with one.
    staying = in_force(last.lots, len(results))
    beyond = {g: n - held(staying, g) for g, n in last.gpus_by_type.items() if n > held(staying, g)}
    if carried and beyond:
        price = last.day.terms.reserved_usd_per_gpu_hour
        more = sum(n * price[g] for g, n in beyond.items())
        text += next_commitments_text(last.quarter, [(n, g, usd_rate_text(price[g])) for g, n in beyond.items()],
                                      more, sum(lot.usd_per_hour for lot in staying) + more, term=term)
    return text


def after_end_text(quarters: Sequence[str], lots: Sequence[Lot], term: int) -> str:
    """The commitments' term, and what the lots held in the last of `quarters` still cost after it:
    each lot's GPUs at its own price for the quarters its term has left (planner.commitments)."""
    last = quarters[-1]
    running = after_end(lots, len(quarters) - 1)
    text = (f"Each commitment the forecast makes is paid for {term} quarter{'s' if term != 1 else ''} from the quarter "
            "it starts, used or not (forecast.commitment_term_quarters)")
    if not running:
        return text + f"; none runs past {last}."
    parts = [f"{lot.gpus:,} {lot.gpu} at {usd_rate_text(lot.usd_per_gpu_hour)} from {quarters[lot.start]} to "
             f"{quarter_after(last, more)} ({more} quarter{'s' if more != 1 else ''} more)" for lot, more in running]
    return (text + f"; after {last} these still run: " + ", ".join(parts)
            + f": {usd_text(after_end_usd(lots, len(quarters) - 1))} committed after {last}, which the total above "
            "does not count.")


def next_commitments_text(quarter: str, lots: Sequence[tuple[int, str, str]], added_usd_per_hour: float,
                          usd_per_hour: float, *, term: int | None = None) -> str:
    """What carry_forward commits after the last quarter: lots of (GPUs, type, price per GPU-hour as
    printed), what they add per hour, and the committed $/hour they bring the total to. term: the
    commitments' term in quarters (None: no term), so the lots are what the quarter runs beyond those
    still in their term after it (the ones whose term ends with it renewed, and what it ran on
    demand), and they are paid for that term."""
    what = "runs beyond the commitments still in their term after it" if term is not None else "runs on demand"
    over = (f", {usd_text(added_usd_per_hour * HOURS_PER_QUARTER * term)} over a {term}-quarter term"
            if term is not None else "")
    # With a term, what it adds to: the commitments still in their term, not all held at the end (an outside
    # probe read "held ... $63.37/hour", "$9.22/hour more" and "$67.42/hour in all", the lots whose term
    # ends with the quarter unsaid).
    staying = usd_per_hour - added_usd_per_hour  # (a fleet's: its inventory's too)
    on = f", on the {usd_text(staying)}/hour still committed after it" if term is not None and staying >= 0.005 else ""
    # The last quarter's terms: a price stated for a later quarter is outside the forecast.
    return (" With carry_forward, the " + ", ".join(f"{n:,} {g}" for n, g, _ in lots) + f" that {quarter} {what} "
            f"would be committed from the next quarter at {quarter}'s terms (" + ", ".join(p for *_, p in lots)
            + f" per GPU-hour): {usd_text(added_usd_per_hour)}/hour more{over}" + on + f"; {usd_text(usd_per_hour)}/hour "
            "committed in all.")



def reserved_replicas_text(reserved, pools) -> str:
    """The day mix's reserved replicas, counted by GPU type where its pools run more than one:
    " (5 reserved replicas: 3 h100-sxm, 2 h200)"; reserved: pool name -> replicas."""
    by_gpu: dict[str, int] = {}
    for pool in pools:
        by_gpu[pool.gpu] = by_gpu.get(pool.gpu, 0) + reserved.get(pool.name, 0)
    kinds = [f"{n:,} {g}" for g, n in by_gpu.items() if n]
    return f" ({sum(reserved.values()):,} reserved replicas" + (f": {', '.join(kinds)}" if len(kinds) > 1 else "") + ")"

def _policies_markdown(results: Sequence[QuarterResult], total: dict, heading: int) -> list[str]:
    day = results[0].day
    prof, terms = day.profile, day.terms
    flat = prof.is_flat
    lines = [
        f"{'#' * heading} The day's load curve, by quarter",
        "",
        f"Profile: {prof.source}"
        + ("" if flat else f" (busiest hour {prof.peak_to_trough:,.2f}× the quietest, mean {prof.mean_multiplier:.0%} of the busiest hour's)"
           if math.isfinite(prof.peak_to_trough) else f" (the quietest hour has no load; mean {prof.mean_multiplier:.0%} of the busiest hour's)")
        + f". Each quarter's pools priced four ways over the curve, each as if the quarter carried no commitment in: "
        "what the four ways of buying the same fleet would cost, not what the plan pays (the table above, with the "
        f"commitments it carries): scale-up lead time {terms.lead_min:g} min, "
        f"{floor_text(terms.min_replicas, [(f'{r.quarter} {p.name}', p) for r in results for p in r.day.pools])}, "
        f"reserved at {terms.reserved_terms}. Each cell: USD over the "
        "quarter · USD per million tokens at the day's volume"
        + (" (the Total row sums the quarters' amounts before rounding: it can differ from the sum of the cents shown "
           "by a cent or so)." if len(results) > 1 else "."),
        "",
        "| Quarter | " + " | ".join(name for _, name in POLICIES) + " |",
        "|---|" + "---:|" * len(POLICIES),
    ]
    for r in results:
        cells = []
        for key, _ in POLICIES:
            pol = r.day.policy(key)
            cpm = r.day.usd_per_million_tokens(key)
            cell = f"{usd_text(pol.usd_per_day * DAYS_PER_QUARTER)} · {usd_per_million_text(cpm)}"
            if key == "mixed":
                cell += reserved_replicas_text(pol.reserved, r.day.pools)
            cells.append(cell)
        lines.append(f"| {r.quarter} | " + " | ".join(cells) + " |")
    lines.append("| **Total** | " + " | ".join(
        f"{usd_text(total[f'{k}_usd'])} · {usd_per_million_text(_per_million(total, f'{k}_usd', 'tokens'))}" for k, _ in POLICIES) + " |")
    lines += plan_beside_cheapest_way(results, total)
    short = [f"{r.quarter} {r.day.short_pools_text}" for r in results if r.day.short_pools]
    if short:
        lines += ["", "The stated fleet cannot carry the busiest hour of some quarters: their policies hold "
                  "what it needs (" + "; ".join(short) + ")."]
    over = [f"{r.quarter} {need} {gpu} against a cap of {cap}" for r in results
            for gpu, (cap, need) in r.day.caps_set_aside.items()]
    if over:
        lines += ["", f"{CAPS_SET_ASIDE}: " + "; ".join(over) + "."]
    return lines


def plan_beside_cheapest_way(results: Sequence[QuarterResult], total: dict) -> list[str]:
    """What the forecast's plans pay over the quarters beside the cheapest of the four ways of buying
    their fleets over the day (the table's Total row): the table prices the ways and says it is not what
    the plans pay, and the difference is what an analyst weighs a buying policy by. A blank line and a
    line; nothing where a plan's cost buys no quarter's tokens (a stated fleet short of its peak) or a
    fleet is stated (sized by whoever stated it, not for the peak: the gap would be its size, not how it
    is bought)."""
    plan_usd = total["total_usd"]
    if total["unpriced"] or plan_usd is None or plan_usd <= 0 or any(r.plan.given_fleet for r in results):
        return []
    key, name = min(POLICIES, key=lambda kp: total[f"{kp[0]}_usd"])
    way_usd = total[f"{key}_usd"]
    gap = plan_usd - way_usd
    many = len(results) > 1
    span, plans, whose, their = ("these quarters", "plans", "plans'", "their") if many else (
        results[0].quarter, "plan", "plan's", "its")
    if abs(gap) < 0.005:  # a cent, as the amounts show
        compared = f"the cheapest way here, {name}, costs the same"
    else:
        compared = (f"the cheapest way here, {name}, costs {usd_text(way_usd)}: {usd_text(abs(gap))} "
                    f"({share_text(abs(gap) / plan_usd)} of the {whose}) {'less' if gap > 0 else 'more'}")
    last = results[-1].quarter
    after, running = total["committed_after_end_usd"], _unpriced_at_the_end(results)
    later = (f", and {their} reservations commit {usd_text(after)} more after {last}" if after else
             f", and {their} reservations, {usd_text(running)}/hour at the end of {last}, run on past it, unpriced"
             if running else "")
    reserving = ("; the cheapest way pays for its reservations in their own quarter alone, at the price of a "
                 "commitment for the whole term, so what they would commit after it is not in its amount"
                 if any(n for r in results for n in r.day.policy(key).reserved.values()) else "")
    return ["", f"The forecast's {plans} {'pay' if many else 'pays'} {usd_text(plan_usd)} over {span}; {compared}. "
            f"The {plans} {'pay' if many else 'pays'} for {'each quarter' if many else 'the quarter'}'s peak-sized "
            f"fleet all day, on demand or at the commitments {'they carry' if many else 'it carries'}{later}; the ways "
            f"here follow the day's curve where the column says so, with no commitment carried in{reserving}."]


def forecast_json(results: Sequence[QuarterResult]) -> dict:
    """Every table's rows, as data (the same values as the CSV files, unrounded)."""

    def row(columns, item) -> dict:
        values = {c.name: c.value(item) for c in columns}
        return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in values.items()}

    quarters = []
    for r in results:
        q = row(QUARTER_COLUMNS, r)
        q["pools"] = [row(POOL_COLUMNS, (r.quarter, x)) for x in r.pool_rows]
        q["gpus_by_type"], q["gpus_change"], q["reserved_by_type"] = r.gpus_by_type, r.change_by_type, r.reserved_gpus
        q["idle_reserved"] = None if r.idle is None else {
            "gpus": r.idle.gpus, "usd_per_hour": r.idle.usd_per_hour,
            "use_them_usd_per_hour": r.idle.use_them_usd_per_hour, "use_them": r.idle.use_them_summary,
        }
        q["reserved_notes"] = list(r.reserved_below)  # a stated reservation below what is held (the Markdown's)
        # what of the quarter's speed no measurement backs, as `planner solve --json` lists it (the Markdown's line)
        q["speed_unverified"] = [u.as_json() for u in unverified_speed(r.plan)]
        quarters.append(q)
    return {"quarters": quarters, "total": row(TOTAL_COLUMNS, _totals(_table(QUARTER_COLUMNS, results), results)),
            "certified": certified_flag([r.plan for r in results]),
            # what the traffic's source left out or counts as idle, as `planner solve --json` gives it
            "traffic_notes": list(results[0].plan.traffic_notes)}


def write_texts(out_dir: Path, texts: dict[str, str]) -> list[Path]:
    """Write outputs already made (file name -> text) into out_dir, each atomically; their paths."""
    for file, text in texts.items():
        write_text_atomic(out_dir / file, text)
    return [out_dir / file for file in texts]


def write_forecast(name: str, results: Sequence[QuarterResult], out_dir: Path) -> list[Path]:
    """The forecast's report, tables, data dictionary and figure in out_dir, and their paths (the figure
    last); every output is made before the first is written, so a failure leaves none half-made."""
    output_folder(out_dir)
    figure = f"{name}_forecast.png"
    texts = {f"{name}_forecast.md": forecast_markdown(name, results, figure=figure)}
    texts.update({table_file(name, t): text for t, text in forecast_tables(results).items()})
    texts[f"{name}_forecast_datapackage.json"] = datapackage_json(name)
    png = draw(
        "forecast_figure", quarters=[r.quarter for r in results],
        cpm={"plan, at peak": [r.cost_per_million["blended"] for r in results],
             "plan, day's volume": [(r.cost_per_million_at_volume or {}).get("blended") for r in results],
             "autoscaled, day's volume": [r.day.usd_per_million_tokens("autoscaled") for r in results],
             "reserved + on demand, day's volume": [r.day.usd_per_million_tokens("mixed") for r in results]},
        gpus=[r.gpus_paid_for for r in results], title=f"{name}: cost per token and fleet",
    )
    write_bytes_atomic(out_dir / figure, png())
    return [*write_texts(out_dir, texts), out_dir / figure]
