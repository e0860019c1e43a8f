"""Arrival times → arrivals per wall-clock minute (minute = floor(epoch seconds / 60)).

Logs give times as datetimes (Azure 2023: "2023-11-16 18:15:46.6805900"), or as numbers
in seconds or milliseconds, from the Unix epoch or from the trace's start (Mooncake:
milliseconds from 0; BurstGPT: seconds from 0). Datetimes without a zone are read as UTC.

Numbers need a unit. A ColumnSpec may name it (presets do; so does `--time-unit`);
otherwise it is guessed from the median magnitude in the first batch that has numbers
(the median, so that one wild value cannot decide for every row), since epoch times
today are ~1.7e9 s, ~1.7e12 ms, ~1.7e15 µs, ~1.7e18 ns:
    < 1e11 → s,  < 1e14 → ms,  < 1e17 → us,  else ns.
That holds for epoch times only. Numbers whose median is below FIRST_SERVING_S (2020-01-01
as epoch seconds; no LLM serving log is older) count from a trace's start, and relative
times carry no magnitude of their unit: an hour is 3.6e3 in seconds and 3.6e6 in
milliseconds, both below 1e11, and the two readings differ 1000× in every rate the fleet
is sized for. So relative numbers without a stated unit are refused, with what each
reading would give, rather than guessed (a warning would be lost where a histogram file
is written: the file keeps the minutes, not the doubt).

Numbers read as epoch seconds after today are refused the same way (relative milliseconds
past a trace's 21st day read so): which numbers are refused depends on the day of the run.
A stated unit is checked against the magnitude the same way: where the values are epoch
times in another unit (from FIRST_SERVING_S to today read in their magnitude's unit) and
the stated unit puts them elsewhere, the file's TimeAssumption carries a warning with
both readings (epoch seconds in a column stated as milliseconds land in January 1970,
and every rate is 1000× too high). A stated unit coarser than the values' lands them
after 2200, which planner.workload.peaks.check_span refuses; a finer one lands them in
1970, which a relative log's times also are, so that is warned of, not refused.

A text column (CSV, JSON values of mixed types, Parquet strings) holds numbers or
datetimes. Which, is decided once per file by the majority of a sample of the first
batch with parsable values, never by its first row; every row is then parsed on its
own, and one that is not of the column's kind is counted as non_numeric, as is a number
too large to be a time (its minute past int64: 1e300 ms).

Minutes are exact floors (no float rounding at minute boundaries), and a sorted batch
(logs usually are) is counted by binary search of the minute boundaries, without a
per-row minute at all.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from planner.errors import InputError
from planner.histogram import minute_bin_key_of
from planner.units import significant_text
from planner.workload.columns import suggested
from planner.workload.peaks import minute_text
from planner.workload.rows import CODE_NON_NUMERIC, CODE_NULL, OK, decimal_int64, is_blank

# An ISO 8601 time zone after a datetime's time of day: Z, or an offset (+02:00, -0530, +02); a
# date alone (2023-11-16) has none.
_ZONE_AT_END = r"\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?\s*(?:Z|[+-]\d{2}(?::?\d{2})?)\s*$"

UNITS_PER_MINUTE = {"s": 60, "ms": 60_000, "us": 60_000_000, "ns": 60_000_000_000}
DATETIME = "datetime"
# (upper bound of the median |value|, unit): the magnitude heuristic above
_MAGNITUDE_UNITS = ((1e11, "s"), (1e14, "ms"), (1e17, "us"), (float("inf"), "ns"))
UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}
# 2020-01-01 as epoch seconds: no LLM serving log is dated before it, so numbers below it without a stated
# unit count from a trace's start (up to 18 days of milliseconds; a reading found 4 hours of relative
# milliseconds from day 12, 1.04e9, read as 5.5 months of 2002 at 1/1000 of their rate, silently).
FIRST_SERVING_S = 1_577_836_800
_EXACT_IN_FLOAT = 2**53  # below it, floor(v / d) in float64 equals integer floor division
_EMPTY = np.zeros(0, np.int64)


def guess_unit(typical_abs: float) -> str:
    """The epoch unit implied by the median |timestamp| (see the module docstring)."""
    return next(unit for bound, unit in _MAGNITUDE_UNITS if typical_abs < bound)


@dataclass(frozen=True)
class TimeAssumption:
    """How one file's timestamps were read: unit ('datetime', 's', 'ms', 'us', 'ns') and why."""

    unit: str
    reason: str  # 'column type', 'preset/option', 'histogram file' or 'magnitude: ...'
    # what the values say against a stated unit (both readings), said as a warning; "" when nothing
    doubt: str = ""


@dataclass(frozen=True, eq=False)
class Times:
    """One batch's arrival times: numbers in some unit, `per_minute` units to a minute.

    `values` is int64 (exact) or float64 (fractional seconds); it is 0 where `codes`
    (per-row problem codes, None if none) marks a row unusable.
    """

    values: np.ndarray
    per_minute: int
    codes: np.ndarray | None

    def minute_counts(self, keep: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(minute, arrivals) over the rows in `keep` (all rows if None), minutes sorted."""
        values = self.values if keep is None else self.values[keep]
        if not values.size:
            return _EMPTY, _EMPTY
        first, last = (
            _floor_minute(values[:1], self.per_minute)[0],
            _floor_minute(values[-1:], self.per_minute)[0],
        )
        if first <= last and last - first < values.size and bool(np.all(values[1:] >= values[:-1])):
            # Sorted: each minute's arrivals lie between two boundaries found by binary search.
            boundaries = np.arange(first + 1, last + 1, dtype=np.int64) * self.per_minute
            if values.dtype.kind == "f":
                boundaries = boundaries.astype(np.float64)
            edges = np.concatenate(
                [[0], np.searchsorted(values, boundaries, side="left"), [values.size]]
            )
            counts = np.diff(edges)
            minutes = np.arange(first, last + 1, dtype=np.int64)
            present = counts > 0
            return minutes[present], counts[present]
        minutes = _floor_minute(values, self.per_minute)
        low, high = int(minutes.min()), int(minutes.max())
        if high - low < 4 * values.size:  # a dense count is cheaper than sorting
            counts = np.bincount(minutes - low)
            present = np.flatnonzero(counts)
            return present + low, counts[present]
        return np.unique(minutes, return_counts=True)

    def minute_bin_counts(self, keep: np.ndarray | None, total_bin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(minute_bin_key, arrivals) over the rows in `keep`, `total_bin` the kept rows' total bins:
        arrivals per minute and total length, from which a traffic class's own minutes are read."""
        values = self.values if keep is None else self.values[keep]
        if not values.size:
            return _EMPTY, _EMPTY
        return np.unique(minute_bin_key_of(_floor_minute(values, self.per_minute), total_bin), return_counts=True)


def _floor_minute(values: np.ndarray, per_minute: int) -> np.ndarray:
    """floor(values / per_minute) exactly, as int64."""
    if values.dtype.kind == "f":
        minutes = np.floor(values / per_minute)
        # The rounded quotient may land on the far side of a boundary: step back or on.
        minutes -= values < minutes * per_minute
        minutes += values >= (minutes + 1) * per_minute
        return minutes.astype(np.int64)
    if max(-int(values.min()), int(values.max())) < _EXACT_IN_FLOAT:
        # float64 holds these exactly and the correctly rounded quotient of two exact
        # integers never crosses an integer, so this is floor division, ~4x faster
        return np.floor(values / per_minute).astype(np.int64)
    return np.floor_divide(values, per_minute)


class MinuteConverter:
    """Reads one file's time column batch by batch; the unit is fixed by the first batch.
    zones: whether the datetimes read so far carry a time zone, shared by the logs read together
    (a zoned log beside an unzoned one mixes them as a mixed column does)."""

    def __init__(self, unit: str | None = None, zones: set[bool] | None = None, column: str | None = None):
        self._unit = unit
        self._column = column  # its name, for messages
        self._text_kind: str | None = None  # 'numeric' or 'datetime' for text columns
        self._zones = set() if zones is None else zones
        self._assumption: TimeAssumption | None = (
            TimeAssumption(unit, "preset/option") if unit else None
        )
        self._magnitude_seen = False  # whether the numbers' magnitude was looked at (once, first batch)
        self._doubt: _Doubt | None = None  # a stated unit the values contradict, and their extent

    @property
    def assumption(self) -> TimeAssumption | None:
        """How the file's times were read, with the doubt about a stated unit over all its rows read."""
        if self._assumption is None or self._doubt is None:
            return self._assumption
        return dataclasses.replace(self._assumption, doubt=self._doubt.text(self._column))

    def times(self, array: pa.Array | pa.ChunkedArray | np.ndarray) -> Times:
        """One batch's times; `array` may be an object array from the JSON fallback."""
        times = self._times(array)
        if self._doubt is not None:
            self._doubt.add(times)
        return times

    def _times(self, array: pa.Array | pa.ChunkedArray | np.ndarray) -> Times:
        if isinstance(array, np.ndarray):
            # JSON values of mixed types: as text, numbers and datetimes parse as they would
            # in a CSV; anything else (true, a list, a broken line) is non_numeric there.
            # (NaN is missing, as it is in a token column, not the text 'nan')
            array = pa.array([None if is_blank(v) else str(v) for v in array], pa.string())
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        if pa.types.is_dictionary(array.type):  # Parquet writers dictionary-encode repeated values
            array = array.dictionary_decode()
        kind = array.type
        if pa.types.is_timestamp(kind) or pa.types.is_date(kind):
            return self._from_datetimes(array)
        if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind):
            return self._from_numbers(array)
        if (
            pa.types.is_string(kind)
            or pa.types.is_large_string(kind)
            or pa.types.is_string_view(kind)
        ):
            return self._from_text(array)
        nulls = array.is_null().to_numpy(zero_copy_only=False)
        codes = np.where(nulls, CODE_NULL, CODE_NON_NUMERIC).astype(np.uint8)
        return Times(np.zeros(len(array), np.int64), 60, codes)

    # ---- by column type -------------------------------------------------------
    def _from_datetimes(self, array: pa.Array) -> Times:
        if self._assumption is None or self._assumption.unit != DATETIME:
            self._assumption = TimeAssumption(DATETIME, "column type")
        self._saw_zones({pa.types.is_timestamp(array.type) and array.type.tz is not None})
        if pa.types.is_date(array.type):
            array = array.cast(pa.timestamp("s"))
        per_minute = UNITS_PER_MINUTE[array.type.unit]
        array = array.cast(pa.int64())
        if not array.null_count:
            return Times(array.to_numpy(), per_minute, None)
        nulls = array.is_null().to_numpy(zero_copy_only=False)
        return Times(array.fill_null(0).to_numpy(), per_minute, _codes(nulls, None))

    def _from_numbers(self, array: pa.Array) -> Times:
        if pa.types.is_decimal(array.type):
            array = array.cast(pa.float64())
        nulls = array.is_null().to_numpy(zero_copy_only=False) if array.null_count else None
        if pa.types.is_integer(array.type):
            raw = (array.fill_null(0) if nulls is not None else array).to_numpy()
            beyond = raw > _INT64_MAX if raw.dtype == np.uint64 else None  # would wrap to negative
            if beyond is not None and beyond.any():
                raw = np.where(beyond, 0, raw)
            values = raw.astype(np.int64, copy=False)
            unit = self._numeric_unit(values, nulls if beyond is None else _or(nulls, beyond))
            return Times(values, UNITS_PER_MINUTE[unit], _codes(nulls, beyond if beyond is not None and beyond.any() else None))
        values = array.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        if (
            nulls is None
            and self._unit is not None
            and values.size
            and max(-values.min(), values.max()) < _far(self._unit)
        ):
            # min/max propagate NaN, and inf is not below _far: every value is usable
            return Times(values, UNITS_PER_MINUTE[self._numeric_unit(values, None)], None)
        return self._from_floats(
            values, np.isnan(values) if nulls is None else nulls | np.isnan(values)
        )

    def _from_floats(
        self, values: np.ndarray, nulls: np.ndarray, unparsed: np.ndarray | None = None
    ) -> Times:
        """Times from floats; `unparsed` marks text that was not a number (NaN here)."""
        bad = ~np.isfinite(values) & ~nulls
        if unparsed is not None:
            nulls = nulls & ~unparsed
            bad = bad | unparsed
        values = np.where(nulls | bad, 0.0, values)
        unit = self._numeric_unit(values, nulls | bad)
        far = np.abs(values) >= _far(unit)
        if far.any():  # a minute past int64: no time at all (1e300 ms)
            bad, values = bad | far, np.where(far, 0.0, values)
        return Times(
            values,
            UNITS_PER_MINUTE[unit],
            _codes(nulls if nulls.any() else None, bad if bad.any() else None),
        )

    def _from_text(self, array: pa.Array) -> Times:
        if self._text_kind is None:
            self._text_kind = _text_kind(array)
        if self._text_kind is None:  # nothing parsable yet: every row is null or non_numeric
            nulls = pd.Series(array.to_pylist(), dtype=object).map(is_blank).to_numpy(bool)
            return Times(np.zeros(len(array), np.int64), 60, _codes(nulls, ~nulls))
        if self._text_kind == "numeric":
            for cast in (decimal_int64, lambda a: pc.cast(a, pa.float64())):
                try:
                    return self._from_numbers(cast(array))
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    continue
            series = pd.Series(array.to_pylist(), dtype=object)
            blank = series.map(is_blank).to_numpy(bool)
            numbers = (
                pd.to_numeric(series.where(~blank, None), errors="coerce")
                .astype(np.float64)
                .to_numpy()
            )
            return self._from_floats(numbers, blank, unparsed=np.isnan(numbers) & ~blank)
        for target in (pa.timestamp("ns"), pa.timestamp("ns", tz="UTC")):
            try:
                return self._from_datetimes(pc.cast(array, target))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
        return self._from_mixed_datetimes(array)

    def _from_mixed_datetimes(self, array: pa.Array) -> Times:
        """Text datetimes of mixed forms (some zoned, some not, some broken), one by one."""
        series = pd.Series(array.to_pylist(), dtype=object)
        nulls = series.map(is_blank).to_numpy(bool)
        parsed = pd.to_datetime(
            series.where(~nulls, None), utc=True, errors="coerce", format="ISO8601"
        )
        bad = parsed.isna().to_numpy() & ~nulls
        read = series[~(nulls | bad)].astype(str)
        self._saw_zones(set(read.str.contains(_ZONE_AT_END, regex=True).unique().tolist()))
        ns = parsed.dt.tz_convert(None).to_numpy(dtype="datetime64[ns]").astype(np.int64)
        ns = np.where(nulls | bad, 0, ns)
        self._assumption = TimeAssumption(DATETIME, "column type")
        return Times(
            ns,
            UNITS_PER_MINUTE["ns"],
            _codes(nulls if nulls.any() else None, bad if bad.any() else None),
        )

    def _saw_zones(self, zoned: set[bool]) -> None:
        """Refuse a column of datetimes some with a time zone and some without: those without are
        read as UTC, and most often they are local times (a log's span and peak would be wrong)."""
        self._zones |= zoned
        if len(self._zones) > 1:
            raise InputError("datetimes with a time zone and datetimes without one, which would be read as UTC, "
                             "in this log's time column or between it and a log read before: give every time its "
                             "zone, or none")

    def _numeric_unit(self, values: np.ndarray, unusable: np.ndarray | None) -> str:
        """The unit of the file's numbers: the stated one (checked against the first batch's
        magnitude), or the one its magnitude implies; relative numbers without one are refused."""
        if self._magnitude_seen:
            return self._unit
        usable = values if unusable is None else values[~unusable]
        if not usable.size:
            return self._unit or "s"  # nothing to convert in this batch; decide on the next one
        self._magnitude_seen = True
        typical = float(np.median(np.abs(usable)))
        guessed = guess_unit(typical)
        if self._unit is None:
            # signed: negative numbers (before 1970 as epoch times) read by their size were taken for this year's
            signed = float(np.median(usable))
            if signed < FIRST_SERVING_S or (guessed == "s" and typical > _latest_epoch_s()):
                raise InputError(_relative_text(usable, signed, self._column))
            self._unit = guessed
            bound = next(b for b, u in _MAGNITUDE_UNITS if u == self._unit)
            self._assumption = TimeAssumption(
                self._unit, f"magnitude: median value {typical:.3g} < {bound:.0e}"
            )
        elif guessed != self._unit and FIRST_SERVING_S <= typical * 60 / UNITS_PER_MINUTE[guessed] <= _latest_epoch_s():
            # epoch times in another unit than the one stated (the median, as the guess reads it), where that
            # reading is a serving log's date: not one refused above (relative milliseconds from day 12 read as
            # seconds in 2002 were doubted, once the refusal had asked for milliseconds)
            self._doubt = _Doubt(self._unit, guessed, typical)
        return self._unit


def _duration_text(seconds: float) -> str:
    """A span in the largest unit that keeps it readable: '42 s', '43.2 minutes', '1.0 hours', '41.7 days'."""
    for least, size, word in ((2 * 86_400, 86_400, "days"), (3_600, 3_600, "hours"), (120, 60, "minutes")):
        if seconds >= least:
            return f"{seconds / size:,.1f} {word}"
    return f"{seconds:.3g} s"


def _reading_text(count: int, low: float, high: float, unit: str) -> str:
    """count times from low to high (numbers in `unit`) as one reading: their span and mean rate."""
    span = (high - low) * 60 / UNITS_PER_MINUTE[unit]
    if span <= 0:
        return "all at one instant"
    return f"{_duration_text(span)} (about {significant_text(count / span, 3)} requests/s)"


def _latest_epoch_s() -> float:
    """The latest epoch second a log's time may be: now, and a day for clocks set ahead. Relative
    milliseconds past a trace's 21st day read as seconds after today (a reading: day 30 read as 2052, at
    1/1000 of its rate, with a note only)."""
    return time.time() + 86_400


def _relative_text(usable: np.ndarray, typical: float, column: str | None) -> str:
    """Why relative numbers without a unit are refused, with both readings of the batch read."""
    low, high = float(usable.min()), float(usable.max())
    s, ms = (_reading_text(usable.size, low, high, unit) for unit in ("s", "ms"))
    when = ("before 2020 as epoch seconds, or epoch seconds older than any LLM serving log" if typical < FIRST_SERVING_S
            else "after today as epoch seconds")
    return (f"column '{column}': its times count from the log's start (median {typical:.3g}, {when}) and no unit is "
            "stated, so they may be seconds or milliseconds, 1000× apart in every "
            f"rate planned for: the first {usable.size:,} times read span {s} as seconds, {ms} as milliseconds; state "
            f"which ({suggested('time_unit', 's')} or {suggested('time_unit', 'ms')})")


class _Doubt:
    """Epoch-magnitude times read in another unit than theirs: the extent of every usable value
    read, so that the warning gives both readings of the whole file."""

    def __init__(self, stated: str, guessed: str, typical: float):
        self.stated, self.guessed, self.typical = stated, guessed, typical
        self.count, self.low, self.high = 0, math.inf, -math.inf

    def add(self, times: Times) -> None:
        values = times.values if times.codes is None else times.values[times.codes == OK]
        if values.size:
            self.count += values.size
            self.low, self.high = min(self.low, float(values.min())), max(self.high, float(values.max()))

    def text(self, column: str | None) -> str:
        def dates(unit: str) -> str:
            minutes = (math.floor(v / UNITS_PER_MINUTE[unit]) for v in (self.low, self.high))
            return " to ".join(minute_text(m) for m in minutes)

        return (f"column '{column}' is read in {UNIT_WORDS[self.stated]}, the unit stated (by the preset, or "
                f"{suggested('time_unit')}), which puts its times from {dates(self.stated)} UTC, "
                f"{_reading_text(self.count, self.low, self.high, self.stated)}; but its values have the magnitude of "
                f"epoch {UNIT_WORDS[self.guessed]} (median {self.typical:.3g}), which put them from "
                f"{dates(self.guessed)} UTC, {_reading_text(self.count, self.low, self.high, self.guessed)}. If they "
                f"are {UNIT_WORDS[self.guessed]}, state it ({suggested('time_unit', self.guessed)})")


_KIND_SAMPLE = 4096  # text values looked at to decide a column's kind


def _text_kind(array: pa.Array) -> str | None:
    """'numeric' or 'datetime': what most of (a sample of) the parsable values are; None if none is."""
    values = pd.Series(pc.drop_null(array).slice(0, _KIND_SAMPLE).to_pylist(), dtype=object)
    values = values[~values.map(is_blank)]
    if values.empty:
        return None
    numeric = pd.to_numeric(values, errors="coerce").notna()
    others = values[~numeric.to_numpy()]
    dated = pd.to_datetime(others, utc=True, errors="coerce", format="ISO8601").notna().sum() if len(others) else 0
    if not numeric.any() and not dated:
        return None
    return "numeric" if int(numeric.sum()) >= int(dated) else DATETIME


_INT64_MAX = np.iinfo(np.int64).max


def _far(unit: str) -> float:
    """The |time| from which a number is unusable as a time in `unit`: its minute would not
    fit in int64 (2**62 minutes is 8.8e12 years either side of the epoch)."""
    return float(2**62) * UNITS_PER_MINUTE[unit]


def _or(a: np.ndarray | None, b: np.ndarray) -> np.ndarray:
    return b if a is None else a | b


def _codes(nulls: np.ndarray | None, bad: np.ndarray | None) -> np.ndarray | None:
    if nulls is None and bad is None:
        return None
    size = (nulls if nulls is not None else bad).size
    codes = np.full(size, OK, np.uint8)
    if bad is not None:
        codes[bad] = CODE_NON_NUMERIC
    if nulls is not None:
        codes[nulls] = CODE_NULL
    return codes
