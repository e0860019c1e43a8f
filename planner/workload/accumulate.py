"""Streaming accumulation of the joint histogram: dense per-cell sums, sparse per-minute counts.

Memory is fixed (N_CELLS × SUM_COLUMNS int64, about 15 MiB, and N_FINE int64 marginal
counts, 1 MiB) plus one entry per distinct arrival minute, whatever the number of rows. A batch is added in one compiled pass over
its rows (cell_kernel.py). Bins come from lookup tables built here from
planner.histogram's bin functions, so the rule stays defined in one place. The sums are
exact int64, and a batch that could push a cell past the int64 range is refused first.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from planner.errors import InputError
from planner.histogram import (
    N_CELLS,
    N_FINE,
    N_FINE_BINS,
    N_LENGTH_BINS,
    SUM_COLUMNS,
    Histogram,
    cell_index,
    fine_bin,
    fine_index_of,
    histogram_from_dense,
    length_bin,
    total_bin,
)

# Lookup tables give the bin of any length up to _LUT_MAX in one gather instead of a
# binary search (~20 ns a value); the smallest integer type that holds each keeps them
# small enough for the CPU cache. Longer lengths (beyond the usual 128k context) take the
# binary search.
_LUT_MAX = 1 << 17
_PROMPT_PART = (length_bin(np.arange(_LUT_MAX + 1)) * N_LENGTH_BINS).astype(np.int32)
_OUTPUT_PART = length_bin(np.arange(_LUT_MAX + 1)).astype(np.int32)
_TOTAL_BINS = total_bin(np.arange(2 * _LUT_MAX + 1)).astype(np.int8)
_FINE_BINS = fine_bin(np.arange(2 * _LUT_MAX + 1)).astype(np.int16)
_INT64_MAX = np.iinfo(np.int64).max


def _int64_vector(values) -> np.ndarray:
    """A 1-D C-contiguous int64 array of `values`, refusing types that do not convert exactly."""
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError("prompt and output must be 1-D arrays of one length")
    if not np.can_cast(array.dtype, np.int64, "safe"):
        raise TypeError(f"token counts must be integers that fit int64, got {array.dtype}")
    return np.ascontiguousarray(array, np.int64)


def _row_values(prompt: np.ndarray, output: np.ndarray) -> dict[str, np.ndarray]:
    """Each summed column's per-row values, in SUM_COLUMNS order (int64 in, int64 out, float64 in,
    float64 out: the float products bound sums whose int64 products could wrap)."""
    return {
        "count": np.ones_like(prompt),
        "sum_prompt": prompt,
        "sum_output": output,
        "sum_prompt_sq": prompt * prompt,
        "sum_prompt_output": prompt * output,
        "sum_output_sq": output * output,
    }


class CellAccumulator:
    """Dense per-cell count and sums, and dense fine marginals, over every request added so far."""

    def __init__(self) -> None:
        # a cell's six sums side by side: one request touches one or two cache lines
        self._sums = np.zeros((N_CELLS, len(SUM_COLUMNS)), np.int64)
        self.fine = np.zeros(N_FINE, np.int64)  # indexed by planner.histogram.fine_index_of
        # Upper bounds of every cell's value, to refuse int64 overflow instead of wrapping.
        self._bound = dict.fromkeys(SUM_COLUMNS, 0)
        self._beyond_tables = np.empty(0, np.int64)
        # Each cell the first time its count leaves 0, in order: all the result needs to
        # read, and at most N_CELLS of them.
        self._touched = np.empty(N_CELLS, np.int32)
        self._n_touched = np.zeros(1, np.int64)

    def add(self, prompt: np.ndarray, output: np.ndarray) -> None:
        """Add requests (integer arrays of non-negative token counts, one per request).

        Raises InputError, before adding anything, if a cell's sum could pass the int64
        range, and ValueError/TypeError for arrays no log reader passes (negative counts,
        other lengths or shapes, non-integer types).
        """
        from planner.workload import cell_kernel  # numba loads only when a log is read

        prompt, output = _int64_vector(prompt), _int64_vector(output)
        if prompt.shape != output.shape:
            raise ValueError("prompt and output must be 1-D arrays of one length")
        n = prompt.size
        if not n:
            return
        smallest, p_max, o_max = cell_kernel.extremes(prompt, output)
        if smallest < 0:
            raise ValueError("negative token counts reached the accumulator")
        # What any one cell can gain: n × the largest value (Python ints: exact). Every
        # column is checked before any is added; only if overflow is near are the exact
        # per-row values computed, in floats, which cannot wrap.
        bounds = {
            "count": n,
            "sum_prompt": n * p_max,
            "sum_output": n * o_max,
            "sum_prompt_sq": n * p_max * p_max,
            "sum_prompt_output": n * p_max * o_max,
            "sum_output_sq": n * o_max * o_max,
        }
        for name, bound in bounds.items():
            self._reserve(
                name,
                bound,
                lambda name=name: _row_values(prompt.astype(np.float64), output.astype(np.float64))[name],
            )
        if self._beyond_tables.size < n:
            self._beyond_tables = np.empty(n, np.int64)
        beyond = cell_kernel.add_rows(
            prompt,
            output,
            self._sums,
            self.fine,
            _PROMPT_PART,
            _OUTPUT_PART,
            _TOTAL_BINS,
            _FINE_BINS,
            N_LENGTH_BINS**2,
            N_FINE_BINS,
            self._beyond_tables,
            self._touched,
            self._n_touched,
        )
        if beyond:
            rows = self._beyond_tables[:beyond]
            self._add_by_search(prompt[rows], output[rows])

    def _add_by_search(self, prompt: np.ndarray, output: np.ndarray) -> None:
        """Add requests longer than the lookup tables, binning them by binary search."""
        t_bin = total_bin(prompt + output)
        cells = cell_index(t_bin, length_bin(prompt), length_bin(output))
        for k, length in enumerate((prompt, output, prompt + output)):
            np.add.at(self.fine, fine_index_of(k, t_bin, fine_bin(length)), 1)
        self._touch(cells)
        for k, values in enumerate(_row_values(prompt, output).values()):
            np.add.at(self._sums[:, k], cells, values)

    def add_histogram(self, hist: Histogram) -> None:
        """Add a histogram's cells and marginals (a histogram file among the inputs)."""
        cells = cell_index(hist.total_bin, hist.prompt_bin, hist.output_bin)
        for name in SUM_COLUMNS:
            values = getattr(hist, name)
            if name == "count":  # a fine bin may count more requests than any cell
                values = np.concatenate([values, hist.fine_count])
            self._reserve(name, int(values.max()) if values.size else 0, lambda v=values: v)
        np.add.at(self.fine, hist.fine_index, hist.fine_count)
        self._touch(cells)
        for k, name in enumerate(SUM_COLUMNS):
            np.add.at(self._sums[:, k], cells, getattr(hist, name))

    def _touch(self, cells: np.ndarray) -> None:
        """Note, before they are added to, the cells whose count is still 0 (the rule the
        compiled loop follows for its own rows)."""
        new = np.unique(cells[self._sums[cells, 0] == 0])
        start = int(self._n_touched[0])
        self._touched[start : start + new.size] = new
        self._n_touched[0] = start + new.size

    def _reserve(self, name: str, bound: int, values: Callable[[], np.ndarray]) -> None:
        """Refuse (InputError) to add a batch if some cell could pass the int64 range.

        `bound` bounds what any one cell gains from the batch. Only when the running bound
        says overflow is possible are exact figures computed: the cells' current maximum
        and the batch's total (Python ints throughout: the bound must not overflow itself).
        """
        if self._bound[name] + bound > _INT64_MAX:
            self._bound[name] = int(self.dense[name].max())
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
        """Each summed column over all N_CELLS cells, indexed by `cell_index`."""
        return {name: self._sums[:, k] for k, name in enumerate(SUM_COLUMNS)}

    @property
    def touched_cells(self) -> np.ndarray:
        """Sorted indices of every cell added to so far (the only ones that can be non-zero)."""
        return np.sort(self._touched[: int(self._n_touched[0])].astype(np.int64))


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


class ArrivalCounter:
    """Arrivals per minute, and per (minute, total bin) (Histogram.minute_bin_key), kept sparse."""

    def __init__(self) -> None:
        self.by_minute, self.by_bin = MinuteCounter(), MinuteCounter()

    def add(self, by_minute: tuple[np.ndarray, np.ndarray], by_bin: tuple[np.ndarray, np.ndarray] | None) -> None:
        """A source's arrivals; by_bin None where it kept none by bin (an older histogram file): the
        histogram then keeps none (histogram_from_dense), as its bins would miss these arrivals."""
        self.by_minute.add_counts(*by_minute)
        if by_bin is not None:
            self.by_bin.add_counts(*by_bin)


def to_histogram(cells: CellAccumulator, arrivals: ArrivalCounter) -> Histogram:
    return histogram_from_dense(cells.dense, cells.fine, arrivals.by_minute.arrays(), cells=cells.touched_cells,
                                minute_bins=arrivals.by_bin.arrays())
