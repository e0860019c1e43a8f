"""The inner loop of log ingestion, compiled with numba: one pass adds each request to its cell
and to its fine marginal bins.

Why compiled: in numpy the same work takes a dozen whole-array passes (bin lookups, the
three products, one `np.add.at` per summed column), about 12 ns a row, twice the cost of
decoding the Parquet it comes from. This loop does it in one pass, about 3 ns a row,
and releases the GIL, so the next row group decodes meanwhile (`bench/ingest.py`). The
three fine-marginal counts (issue 16) about double the loop's time (measured on a busy
2-CPU machine: 7 to 14 ns a row); the whole `planner histogram` of 5M Parquet rows did
not change beyond the run-to-run spread there.

No bin rule lives here. The lookup tables are built by accumulate.py from
planner.histogram's `length_bin`, `total_bin` and `fine_bin`. A row longer than the tables is handed
back to numpy code that uses those functions directly.

The functions are compiled when this module is imported, with their signatures given.
numba caches the machine code on disk (beside this file, else in the user's cache
folder), so later processes only load it: a few tenths of a second with numba's own
import, against about a second to compile. Where no cache folder is writable, each process compiles.
numba's bounds checks are off; `add_rows` makes its own: every index is compared with
the size of the array it indexes (a table, `sums`, `touched`) before use.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit, types

# Inputs are typed read-only: Arrow hands its buffers to numpy read-only, and numba
# passes a writable array where a read-only one is declared, not the other way round.
_I64_VECTOR = types.Array(types.int64, 1, "C", readonly=True)
_I32_VECTOR = types.Array(types.int32, 1, "C", readonly=True)
_I16_VECTOR = types.Array(types.int16, 1, "C", readonly=True)
_I8_VECTOR = types.Array(types.int8, 1, "C", readonly=True)
_U64_VECTOR = types.Array(types.uint64, 1, "C", readonly=True)
_OPTIONS = {"nogil": True, "boundscheck": False}


def _compiled(signature) -> Callable[[Callable], Callable]:
    def compile_(function: Callable) -> Callable:
        try:
            return njit(signature, cache=True, **_OPTIONS)(function)
        except RuntimeError as exc:
            if "no locator available" not in str(exc):  # numba's words for "nowhere to cache"
                raise
            return njit(signature, cache=False, **_OPTIONS)(function)

    return compile_


@_compiled(types.UniTuple(types.int64, 3)(_I64_VECTOR, _I64_VECTOR))
def extremes(prompt, output):
    """(smallest of either length, largest prompt, largest output); (0, 0, 0) for no rows.

    No sum is formed, so no value of int64 can make it wrap: the overflow guard rests on it.
    """
    if output.size != prompt.size:
        raise ValueError("prompt and output differ in length")
    smallest = 0
    largest_prompt = 0
    largest_output = 0
    for i in range(prompt.size):
        p = prompt[i]
        o = output[i]
        smallest = min(smallest, p, o)
        largest_prompt = max(largest_prompt, p)
        largest_output = max(largest_output, o)
    return smallest, largest_prompt, largest_output


@_compiled(
    types.int64(
        _I64_VECTOR,
        _I64_VECTOR,
        types.int64[:, ::1],
        types.int64[::1],
        _I32_VECTOR,
        _I32_VECTOR,
        _I8_VECTOR,
        _I16_VECTOR,
        types.int64,
        types.int64,
        types.int64[::1],
        types.int32[::1],
        types.int64[::1],
    )
)
def add_rows(
    prompt,
    output,
    sums,
    fine,
    prompt_part,
    output_part,
    total_bins,
    fine_bins,
    cells_per_total_bin,
    fine_per_total_bin,
    beyond_tables,
    touched,
    n_touched,
):
    """Add each request to `sums[cell]` (count, prompt, output, prompt², prompt·output,
    output²) and to the fine marginals `fine` (prompt, output and total, in thirds).

    cell = total_bins[prompt + output] · cells_per_total_bin + prompt_part[prompt] +
    output_part[output] (`planner.histogram.cell_index`, by table); the marginal entries
    are third · N + total bin · fine_per_total_bin + fine_bins[length], N = fine.size / 3
    (`planner.histogram.fine_index_of`). A cell whose count leaves 0 is appended to
    `touched` (as long as `sums`), at `n_touched[0]`, which counts them: reading the
    result then needs only these cells, not a pass over all of `sums`. Counts never fall
    back to 0 while they are only added to, so each cell is appended once. A full list
    raises IndexError rather than writing past it.

    A row whose prompt or output is beyond the length tables, or negative, is not added.
    Its index goes into `beyond_tables`, which must hold as many entries as there are
    rows. Returns how many rows were put there.
    """
    # the largest length every table covers (the total tables, the sum of two of them)
    limit = min(prompt_part.size, output_part.size, (total_bins.size + 1) // 2, (fine_bins.size + 1) // 2) - 1
    if output.size != prompt.size or beyond_tables.size < prompt.size:
        raise ValueError("prompt, output and beyond_tables must hold one entry per row")
    if sums.shape[1] < 6 or n_touched.size < 1:
        raise ValueError("sums needs six columns, n_touched one entry")
    third = fine.size // 3
    beyond = 0
    for i in range(prompt.size):
        p = prompt[i]
        o = output[i]
        if p < 0 or o < 0 or p > limit or o > limit:
            beyond_tables[beyond] = i
            beyond += 1
            continue
        t = total_bins[p + o]
        cell = t * cells_per_total_bin + prompt_part[p] + output_part[o]
        if cell < 0 or cell >= sums.shape[0]:
            raise IndexError("lookup tables name a cell outside sums")
        row = t * fine_per_total_bin
        fp = fine_bins[p]
        fo = fine_bins[o]
        ft = fine_bins[p + o]
        if min(row, fp, fo, ft) < 0 or row + max(fp, fo, ft) >= third or max(fp, fo, ft) >= fine_per_total_bin:
            raise IndexError("lookup tables name a fine bin outside the marginals")
        if sums[cell, 0] == 0:
            if n_touched[0] < 0 or n_touched[0] >= touched.size:
                raise IndexError("touched-cell list full: a cell's count was not positive")
            touched[n_touched[0]] = cell
            n_touched[0] += 1
        sums[cell, 0] += 1
        sums[cell, 1] += p
        sums[cell, 2] += o
        sums[cell, 3] += p * p
        sums[cell, 4] += p * o
        sums[cell, 5] += o * o
        fine[row + fp] += 1
        fine[third + row + fo] += 1
        fine[2 * third + row + ft] += 1
    return beyond


# row_keys' constants, as uint64 globals (numba reads a global as a constant of its type; a plain int
# beside a uint64 would make the arithmetic float64): two odd multipliers that spread the token counts
# (the golden ratio's and another odd 64-bit constant) and splitmix64's finaliser (Steele, Lea & Flood,
# OOPSLA 2014).
_PROMPT_MIX, _OUTPUT_MIX = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xD6E8FEB86659FD93)
_FINAL_1, _FINAL_2, _SHIFT = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53), np.uint64(33)
# added to an instant before it is mixed: the finaliser maps 0 to 0, and the tick at instant 0 (a log whose
# times count from its start) was then in every sample, however many bits (a reading: 530,000 requests at 0
# raised OverflowError)
_INSTANT_SEED = np.uint64(0x2545F4914F6CDD1D)


@_compiled(types.uint64(types.uint64))  # cached as the others are: compiled in every process, it cost 0.05 s
def _mixed(k):
    k ^= k >> _SHIFT
    k *= _FINAL_1
    k ^= k >> _SHIFT
    k *= _FINAL_2
    k ^= k >> _SHIFT
    return k


@_compiled(types.uint64(types.int64))
def _tick_hash(instant):
    """The hash of an instant that ticks are sampled by (row_keys, instant_hashes) and keys start from."""
    return _mixed(np.uint64(instant) + _INSTANT_SEED)


@_compiled(types.int64(_I64_VECTOR, _I64_VECTOR, _I64_VECTOR, types.uint64, types.int64[::1], types.uint64[::1]))
def row_keys(instants, prompt, output, sample_mask, kept_instants, kept_keys):
    """For each row whose instant's hash has its bits under `sample_mask` all zero (every row for a
    mask of 0: a tick is kept whole or not at all), its instant into `kept_instants` and a 64-bit key
    of its instant and token counts into `kept_keys` (planner.workload.repeats), in row order; returns
    how many. One pass, where numpy took a dozen and slowed the 5M-row `planner histogram` by a quarter."""
    if prompt.size != instants.size or output.size != instants.size or kept_keys.size < instants.size \
            or kept_instants.size < instants.size:
        raise ValueError("instants, prompt and output must hold one entry per row, and the outputs room for each")
    kept = 0
    for i in range(instants.size):
        tick = _tick_hash(instants[i])
        if tick & sample_mask != 0:
            continue
        kept_instants[kept] = instants[i]
        kept_keys[kept] = _mixed(tick ^ (np.uint64(prompt[i]) * _PROMPT_MIX) ^ (np.uint64(output[i]) * _OUTPUT_MIX))
        kept += 1
    return kept


@_compiled(types.uint64[::1](_I64_VECTOR))
def instant_hashes(instants):
    """The hash of each instant that row_keys samples ticks by (its `sample_mask` bits all zero: kept)."""
    out = np.empty(instants.size, np.uint64)
    for i in range(instants.size):
        out[i] = _tick_hash(instants[i])
    return out
