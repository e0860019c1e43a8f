"""Streaming accumulation of the joint histogram: dense per-cell sums, sparse per-minute counts.

Memory is fixed (SUM_COLUMNS × N_CELLS int64, about 15 MiB) plus one entry per distinct
arrival minute, whatever the number of rows. A batch is added in two steps:
- `prepare` (no shared state, so it can run in a helper thread): bins by table lookup,
  one combined cell index (planner.histogram.cell_index), the products p², p·o, o²;
- `CellAccumulator.add_prepared`: one `np.add.at` per summed column into the dense
  arrays. numpy >= 2 has a fast path for it; it is exact in int64 (np.bincount's weights
  are float64) and several times faster than np.unique per batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.errors import InputError
from planner.histogram import (
    N_CELLS,
    N_LENGTH_BINS,
    SUM_COLUMNS,
    Histogram,
    cell_index,
    histogram_from_dense,
    length_bin,
    total_bin,
)

# Lookup tables give the bin of any length up to _LUT_MAX in one gather instead of a
# binary search (~20 ns a value). They are built from length_bin/total_bin themselves, so
# the bin rule stays defined in one place; int32 keeps them small enough for the CPU cache.
# Longer lengths (beyond the usual 128k context) take the binary search.
_LUT_MAX = 1 << 17
_PROMPT_PART = (length_bin(np.arange(_LUT_MAX + 1)) * N_LENGTH_BINS).astype(np.int32)
_OUTPUT_PART = length_bin(np.arange(_LUT_MAX + 1)).astype(np.int32)
_TOTAL_PART = (total_bin(np.arange(2 * _LUT_MAX + 1)).astype(np.int64) * N_LENGTH_BINS**2).astype(
    np.int32
)
_INT64_MAX = np.iinfo(np.int64).max


class Scratch:
    """Work arrays reused from batch to batch.

    Fresh arrays of a batch's size would each be new pages from the OS, and the page
    faults on their first touch cost as much as the arithmetic itself. A batch's
    arrays live until it is added, so a pipeline needs one Scratch per batch in flight.
    """

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}

    def get(self, name: str, n: int, dtype) -> np.ndarray:
        array = self._arrays.get(name)
        if array is None or array.size < n or array.dtype != dtype:
            array = self._arrays[name] = np.empty(max(n, 1), dtype)
        return array[:n]


def cells_of(
    prompt: np.ndarray,
    output: np.ndarray,
    prompt_max: int,
    output_max: int,
    scratch: Scratch | None = None,
    total: np.ndarray | None = None,
) -> np.ndarray:
    """`cell_index` of each request (prompt, output >= 0, with upper bounds of both known;
    `total` = prompt + output, if already computed)."""
    scratch = scratch or Scratch()
    n = prompt.size
    if total is None:
        total = np.add(prompt, output, out=scratch.get("total", n, np.int64))
    # mode='wrap' skips take's bounds check (2-4x faster): every index is in range here.
    # mode='clip' maps the lengths beyond a table to its last entry, corrected below.
    mode = "wrap" if prompt_max <= _LUT_MAX and output_max <= _LUT_MAX else "clip"
    cells32 = _TOTAL_PART.take(total, mode=mode, out=scratch.get("cells32", n, np.int32))
    part = scratch.get("part32", n, np.int32)
    cells32 += _PROMPT_PART.take(prompt, mode=mode, out=part)
    cells32 += _OUTPUT_PART.take(output, mode=mode, out=part)
    cells = scratch.get("cells", n, np.intp)
    cells[...] = cells32  # widened once here, not once per np.add.at
    if mode == "clip":
        # Only the (few) longer requests take the binary search; a total beyond the total
        # table implies a prompt or an output beyond the length tables.
        long = np.flatnonzero((prompt > _LUT_MAX) | (output > _LUT_MAX))
        cells[long] = cell_index(
            total_bin(total[long]), length_bin(prompt[long]), length_bin(output[long])
        )
    return cells


@dataclass(frozen=True, eq=False)
class PreparedBatch:
    """Requests binned and multiplied out, ready for `CellAccumulator.add_prepared`.

    `prompt_max`/`output_max` are upper bounds of the lengths, not necessarily attained.
    """

    cells: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    prompt_sq: np.ndarray
    prompt_output: np.ndarray
    output_sq: np.ndarray
    prompt_max: int
    output_max: int

    @property
    def size(self) -> int:
        return self.cells.size


def prepare(
    prompt: np.ndarray, output: np.ndarray, scratch: Scratch | None = None
) -> PreparedBatch:
    """Bin requests (int64 arrays of non-negative token counts); touches no shared state."""
    scratch = scratch or Scratch()
    n = prompt.size
    total = np.add(prompt, output, out=scratch.get("total", n, np.int64))
    # One reduction bounds both lengths (neither exceeds the total): the lookups and the
    # overflow guard need only bounds, and a max costs as much as a lookup.
    largest = int(total.max()) if n else 0
    return PreparedBatch(
        cells=cells_of(prompt, output, largest, largest, scratch, total=total),
        prompt=prompt,
        output=output,
        prompt_sq=np.multiply(prompt, prompt, out=scratch.get("prompt_sq", n, np.int64)),
        prompt_output=np.multiply(prompt, output, out=scratch.get("prompt_output", n, np.int64)),
        output_sq=np.multiply(output, output, out=scratch.get("output_sq", n, np.int64)),
        prompt_max=largest,
        output_max=largest,
    )


class CellAccumulator:
    """Dense per-cell count and sums over every request added so far."""

    def __init__(self) -> None:
        self._sums = {name: np.zeros(N_CELLS, np.int64) for name in SUM_COLUMNS}
        # Upper bounds of every cell's value, to refuse int64 overflow instead of wrapping.
        self._bound = dict.fromkeys(SUM_COLUMNS, 0)

    def add(self, prompt: np.ndarray, output: np.ndarray) -> None:
        """Add requests (int64 arrays of non-negative token counts)."""
        self.add_prepared(prepare(prompt, output))

    def add_prepared(self, batch: PreparedBatch) -> None:
        if not batch.size:
            return
        n, p_max, o_max = batch.size, batch.prompt_max, batch.output_max
        # (what any one cell can gain: n × the largest value, the values themselves)
        columns = {
            "count": (n, 1),
            "sum_prompt": (n * p_max, batch.prompt),
            "sum_output": (n * o_max, batch.output),
            "sum_prompt_sq": (n * p_max * p_max, batch.prompt_sq),
            "sum_prompt_output": (n * p_max * o_max, batch.prompt_output),
            "sum_output_sq": (n * o_max * o_max, batch.output_sq),
        }
        for name, (bound, values) in columns.items():  # every column checked before any is added
            self._reserve(name, bound, lambda v=values: np.atleast_1d(v))
        for name, (_, values) in columns.items():
            np.add.at(self._sums[name], batch.cells, values)

    def add_histogram(self, hist: Histogram) -> None:
        """Add a histogram's cells (a histogram file among the inputs)."""
        cells = cell_index(hist.total_bin, hist.prompt_bin, hist.output_bin)
        for name in SUM_COLUMNS:
            values = getattr(hist, name)
            self._reserve(name, int(values.max()) if values.size else 0, lambda v=values: v)
        for name in SUM_COLUMNS:
            np.add.at(self._sums[name], cells, getattr(hist, name))

    def _reserve(self, name: str, bound: int, values: Callable[[], np.ndarray]) -> None:
        """Refuse (InputError) to add a batch if some cell could pass the int64 range.

        `bound` bounds what any one cell gains from the batch. Only when the running bound
        says overflow is possible are exact figures computed: the cells' current maximum
        and the batch's total (Python ints throughout: the bound must not overflow itself).
        """
        if self._bound[name] + bound > _INT64_MAX:
            self._bound[name] = int(self._sums[name].max())
            # a float64 total, rounded up past its relative error, is still an upper bound
            bound = min(bound, int(float(np.sum(values(), dtype=np.float64)) * (1 + 1e-9)) + 1)
            if self._bound[name] + bound > _INT64_MAX:
                raise InputError(
                    f"a histogram cell's {name} would exceed the int64 range; split the log and "
                    "keep the parts' histograms apart"
                )
        self._bound[name] += bound

    @property
    def dense(self) -> dict[str, np.ndarray]:
        return self._sums


class MinuteCounter:
    """Arrivals per minute, kept sparse (one entry per distinct minute)."""

    _CONSOLIDATE_EVERY = 64  # pending pieces before they are merged into one sorted array

    def __init__(self) -> None:
        self._minute = np.zeros(0, np.int64)
        self._count = np.zeros(0, np.int64)
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []

    def add_counts(self, minute: np.ndarray, count: np.ndarray) -> None:
        if not np.size(minute):
            return
        self._pending.append((np.asarray(minute, np.int64), np.asarray(count, np.int64)))
        if len(self._pending) >= self._CONSOLIDATE_EVERY:
            self._consolidate()

    def _consolidate(self) -> None:
        if not self._pending:
            return
        minute = np.concatenate([self._minute, *(m for m, _ in self._pending)])
        count = np.concatenate([self._count, *(c for _, c in self._pending)])
        self._pending = []
        self._minute, inverse = np.unique(minute, return_inverse=True)
        self._count = np.zeros(self._minute.size, np.int64)
        np.add.at(self._count, inverse.reshape(-1), count)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(minute, count), sorted by minute."""
        self._consolidate()
        return self._minute, self._count


def to_histogram(cells: CellAccumulator, minutes: MinuteCounter) -> Histogram:
    return histogram_from_dense(cells.dense, *minutes.arrays())
