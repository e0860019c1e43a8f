"""The commitments a forecast makes: lots of GPUs paid from a quarter on, for a term.

A lot is paid in every quarter of its term, used or not, from the quarter it starts in:
`forecast.commitment_term_quarters` quarters (four for a one-year reservation, twelve for three
years). With no term stated, a lot is held to the forecast's end with carry_forward, and in its own
quarter alone without it, and nothing is known of it after the end. A lot whose term ends inside
the forecast is no longer held after it: with carry_forward the GPUs the quarter before ran are
committed again at once, at that quarter's terms (a renewal at the price of its day); without it,
what a quarter runs beyond what is held runs on demand. A lot whose term runs past the last quarter
is spend the forecast has already committed to: `after_end` prices it, quarter by quarter at its
own price, so that a finance reader sees the obligation a forecast's total leaves out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from planner.scenario.forecast_section import quarter_index
from planner.units import HOURS_PER_QUARTER, usd_rate_text


@dataclass(frozen=True)
class Lot:
    """GPUs of one type committed from a quarter of the forecast on, at one price."""

    gpu: str
    gpus: int
    usd_per_gpu_hour: float
    start: int  # the index, among the forecast's quarters, of the first quarter it is paid in
    term_quarters: int | None  # None: no term stated (the forecast decides how long it is held)

    def held_in(self, quarter: int) -> bool:
        """Whether the lot is paid in the forecast's quarter of this index."""
        return self.start <= quarter and (self.term_quarters is None or quarter < self.start + self.term_quarters)

    def quarters_after(self, last: int) -> int:
        """Quarters of its term after the forecast's quarter `last` (0 with no term stated)."""
        if self.term_quarters is None:
            return 0
        return max(0, self.start + self.term_quarters - 1 - last)

    @property
    def usd_per_hour(self) -> float:
        return self.gpus * self.usd_per_gpu_hour


def reserved_below_held(quarter: str, where: str, stated: Mapping[str, int], held_now: Mapping[str, int]) -> tuple[str, ...]:
    """A sentence for each type a quarter states fewer GPUs reserved of (`where`: its field) than its
    commitments already hold (`held_now`, by type, before the quarter commits anything of its own): a
    commitment is not given back before its term ends, so the quarter commits none of that type and
    pays for what is held. (An outside probe: a quarter's `reserved` below what was held committed
    nothing, and the forecast said nothing of it.)"""
    return tuple(f"{quarter} states {n:,} {gpu} reserved ({where}), fewer than the {h:,} already held (owned or "
                 f"committed): a commitment is not given back before its term ends, so the quarter commits no more "
                 f"{gpu} and pays for the {h:,} held"
                 for gpu, n in stated.items() if n < (h := held_now[gpu]))


def reserved_below_lines(notes: Iterable[str]) -> list[str]:
    """A forecast's Markdown lines for its quarters' reserved_below_held sentences (a blank line, then one
    item each), or none."""
    items = [f"- {text}." for text in notes]
    return ["", *items] if items else []


def held(lots: Iterable[Lot], gpu: str) -> int:
    """GPUs of `gpu` the lots commit."""
    return sum(lot.gpus for lot in lots if lot.gpu == gpu)


def in_force(lots: Iterable[Lot], quarter: int) -> list[Lot]:
    """The lots paid in the forecast's quarter of this index, in the order they were made."""
    return [lot for lot in lots if lot.held_in(quarter)]


def after_end(lots: Sequence[Lot], last: int) -> list[tuple[Lot, int]]:
    """The lots held in the last quarter whose term runs past it, each with its quarters after it."""
    return [(lot, lot.quarters_after(last)) for lot in lots if lot.held_in(last) and lot.quarters_after(last) > 0]


def after_end_usd(lots: Sequence[Lot], last: int) -> float:
    """What the lots still cost after the forecast's last quarter: each lot's GPUs at its own price
    for every hour of its term's remaining quarters (HOURS_PER_QUARTER each)."""
    return sum(lot.usd_per_hour * HOURS_PER_QUARTER * quarters for lot, quarters in after_end(lots, last))


def committed_after_end_usd(lots: Sequence[Lot], last: int, term: int | None) -> float | None:
    """after_end_usd where a term is stated; None without one (nothing is known past the end)."""
    return None if term is None else after_end_usd(lots, last)


def quarter_after(quarter: str, quarters: int) -> str:
    """The calendar quarter `quarters` after `quarter` ("2027Q4", 2 -> "2028Q2")."""
    index = quarter_index(quarter) + quarters
    return f"{index // 4}Q{index % 4 + 1}"


class PaysLots(Protocol):
    """A forecast's quarter as commitments reads it (forecast.QuarterResult, fleet_forecast.FleetQuarter)."""

    quarter: str
    lots: Sequence[Lot]  # the commitments the forecast made, paid in the quarter
    on_demand_price: Mapping[str, float]  # per GPU-hour, each type's in the quarter


def above_on_demand_text(quarters: Sequence[PaysLots]) -> str:
    """Where a quarter pays committed GPUs above its own on-demand price for them, or '' (said in a
    forecast's report and on stderr; a fleet's inventory is the fleet file's own statement of what
    it holds, and is not among its quarters' lots). The arithmetic is right, a
    commitment is paid at its price for its term whatever on-demand prices do, but a committed price
    above on-demand is most often a slip (forecast.reserved_prices) or a price cut the commitment
    predates, and a finance reader should not find it out from the totals."""
    phrases = []
    for q in quarters:
        quarter, on_demand = q.quarter, q.on_demand_price
        above: dict[tuple[str, float], int] = {}
        for lot in q.lots:
            price = on_demand.get(lot.gpu)
            if price is not None and lot.usd_per_gpu_hour > price + 1e-9:
                above[(lot.gpu, lot.usd_per_gpu_hour)] = above.get((lot.gpu, lot.usd_per_gpu_hour), 0) + lot.gpus
        phrases += [f"{quarter} pays {n:,} {gpu} at {usd_rate_text(usd)} per GPU-hour against {usd_rate_text(on_demand[gpu])} "
                    "on demand" for (gpu, usd), n in sorted(above.items())]
    if not phrases:
        return ""
    return ("Committed above the on-demand price: " + "; ".join(phrases) + ". A commitment is paid at its own price "
            "for its term, used or not, whatever on-demand prices do: on demand those GPUs would cost less (check "
            "forecast.reserved_prices and the quarters' prices).")
