"""The joint length histogram: the workload as the models consume it.

One row per non-empty cell of (prompt bin, output bin, total bin), with the exact
request count and exact per-cell sums of prompt, output, prompt², prompt×output
and output², so every mean the models need is exact rather than a bin-centre
guess. Beside the cells, fine 1-D marginals of the prompt, output and total length
(counts per fine bin, per total bin) carry the quantiles. Histograms add: merging two
is adding the rows of equal cells and equal marginal bins, which is what makes a log
too large for one machine histogrammable where it lives.

Bins (public constants, so Spark/SQL can reproduce them):
- prompt and output: log-spaced, quarter-octave edges LENGTH_EDGES; bin i holds
  edges[i] <= n < edges[i+1]; the last bin is open-ended.
- total (prompt + output): TOTAL_EDGES, the thresholds a split or a context
  limit may use; bin j holds TOTAL_EDGES[j-1] < total <= TOTAL_EDGES[j] (bin 0 is
  total <= TOTAL_EDGES[0]); so "total <= T" is exact for every T in TOTAL_EDGES.
- fine (the marginals): FINE_EDGES, 1/64-octave edges, a refinement of LENGTH_EDGES;
  fine bin f holds FINE_EDGES[f] <= n < FINE_EDGES[f+1] for n the prompt, the output or
  the total; the last bin is open-ended. Each marginal is kept per total bin, so
  selecting requests by total (a context limit, a split) keeps its marginals exact.

The file format (Parquet) lives in planner.workload.histfile.

Length statistics (`quantiles`, `max_tokens`, `mean_tokens`, `share_above`): means and
shares above a TOTAL_EDGES value are exact. Quantiles place each order statistic in its
fine bin (its range narrowed by the exact sums of the quarter-octave bin or total bin
around it, Samuelson's inequality; planner.order_stats), so each is within one fine bin
of numpy's on the raw rows: at most FINE_RELATIVE_WIDTH (1.09%) of the exact value, for
lengths below 2**24.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planner.order_stats import (
    exact_group_sums,
    exact_sum,
    exact_total,
    max_of_groups,
    passes_int64,
    quantiles_of_groups,
    samuelson_range,
)


def _log_edges(steps_per_octave: int) -> np.ndarray:
    steps = np.arange(0, steps_per_octave * 24 + 1) / steps_per_octave
    return np.concatenate([[0], np.unique(np.round(2.0**steps).astype(np.int64))])


LENGTH_EDGES = _log_edges(4)  # 0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 13, 16, ... 2**24
PROMPT_EDGES = LENGTH_EDGES
OUTPUT_EDGES = LENGTH_EDGES
TOTAL_EDGES = np.array(
    sorted({2**k for k in range(7, 25)} | {3 * 2**k for k in range(7, 24)}), dtype=np.int64
)  # 128, 192, 256, 384, ..., 8192, 12288, 16384, ..., 131072, ..., 2**24
FINE_EDGES = _log_edges(64)  # 0, 1, ..., 92, 93, 94, 95, 97, 98, ... 2**24: 1/64 octave
# The widest fine bin, as a share of its smallest length: (largest - smallest) / smallest.
FINE_RELATIVE_WIDTH = float(np.max((FINE_EDGES[2:] - 1 - FINE_EDGES[1:-1]) / FINE_EDGES[1:-1]))

CELL_KEYS = ("prompt_bin", "output_bin", "total_bin")
SUM_COLUMNS = ("count", "sum_prompt", "sum_output", "sum_prompt_sq", "sum_prompt_output", "sum_output_sq")
LENGTH_OF = ("prompt", "output", "total")  # also the order of the marginals in `fine_index`


def length_bin(n: np.ndarray) -> np.ndarray:
    """Prompt/output bin index: edges[i] <= n < edges[i+1] (last bin open)."""
    return np.searchsorted(LENGTH_EDGES, n, side="right").astype(np.int32) - 1


def total_bin(total: np.ndarray) -> np.ndarray:
    """Total bin index: TOTAL_EDGES[j-1] < total <= TOTAL_EDGES[j]."""
    return np.minimum(np.searchsorted(TOTAL_EDGES, total, side="left"), len(TOTAL_EDGES) - 1).astype(np.int32)


def fine_bin(n: np.ndarray) -> np.ndarray:
    """Fine bin index of a prompt, output or total length: FINE_EDGES[f] <= n < FINE_EDGES[f+1]."""
    return np.searchsorted(FINE_EDGES, n, side="right").astype(np.int32) - 1


@dataclass(frozen=True, eq=False)
class Histogram:
    """Cells as parallel numpy arrays, sorted by (total_bin, prompt_bin, output_bin).

    `fine_index` / `fine_count`: the fine marginals, one entry per non-empty (length of,
    total bin, fine bin), indexed by `fine_index_of`, sorted; each of the three marginals
    counts every request once. `minute` / `minute_count`: arrivals per wall-clock minute
    (minute = floor(epoch s / 60)), sorted by minute; empty when the source had no timestamps.
    `minute_bin_key` / `minute_bin_count`: the same arrivals per (minute, total bin), keyed by
    `minute_bin_key_of`, sorted: what a traffic class's own busiest minutes are read from (a split
    or a context limit selects whole total bins). Built with the minutes, they count every arrival
    or none (empty: a source that counted minutes without lengths, a histogram file written before
    they were kept); `select_total` keeps the selected bins' rows and the whole's `minute` arrays.
    """

    prompt_bin: np.ndarray
    output_bin: np.ndarray
    total_bin: np.ndarray
    count: np.ndarray
    sum_prompt: np.ndarray
    sum_output: np.ndarray
    sum_prompt_sq: np.ndarray
    sum_prompt_output: np.ndarray
    sum_output_sq: np.ndarray
    fine_index: np.ndarray
    fine_count: np.ndarray
    minute: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    minute_count: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    minute_bin_key: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    minute_bin_count: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    minute_bins_kept: bool = False  # whether the minutes by bin count every arrival the minutes count

    def __post_init__(self) -> None:
        of, _, _ = fine_index_parts(self.fine_index)
        per_marginal = exact_group_sums(of, self.fine_count, len(LENGTH_OF))
        if any(int(n) != self.requests for n in per_marginal):
            raise ValueError(
                f"fine marginals count {[int(n) for n in per_marginal]} requests, the cells {self.requests}"
            )

    # ---- construction -------------------------------------------------------
    @classmethod
    def from_arrays(
        cls, prompt: np.ndarray, output: np.ndarray, timestamps_s: np.ndarray | None = None
    ) -> Histogram:
        """Exact histogram of raw per-request lengths (and optional arrival times in seconds): lengths
        as a log's usable rows have them (planner.workload.rows), each and their sum at most 2**24,
        where the total lengths' bins end; past it their percentiles read nothing."""
        p = np.asarray(prompt, dtype=np.int64)
        o = np.asarray(output, dtype=np.int64)
        if p.shape != o.shape:
            raise ValueError("prompt and output arrays differ in length")
        t_bin = total_bin(p + o)
        index = cell_index(t_bin, length_bin(p), length_bin(o))
        sums = dict(zip(SUM_COLUMNS, (np.ones_like(p), p, o, p * p, p * o, o * o), strict=True))
        fine = np.concatenate([fine_index_of(k, t_bin, fine_bin(x)) for k, x in enumerate((p, o, p + o))])
        minutes = np.zeros(0, np.int64)
        if timestamps_s is not None and len(timestamps_s):
            minutes = np.floor_divide(np.asarray(timestamps_s, dtype=np.float64), 60).astype(np.int64)
        keys = minute_bin_key_of(minutes, t_bin) if minutes.size else minutes
        return histogram_from_rows(
            index, sums, (fine, np.ones_like(fine)), (minutes, np.ones_like(minutes)), "requests",
            minute_bins=(keys, np.ones_like(keys)),
        )

    @classmethod
    def constant(cls, prompt_tokens: int, output_tokens: int, requests: int = 1) -> Histogram:
        """A class where every request has the same lengths (how benchmarks are run)."""
        return cls.from_arrays(np.full(requests, prompt_tokens), np.full(requests, output_tokens))

    def merge(self, other: Histogram) -> Histogram:
        """The histogram of the union of both sources' requests (exact)."""
        both = (self, other)
        return histogram_from_rows(
            np.concatenate([cell_index(h.total_bin, h.prompt_bin, h.output_bin) for h in both]),
            {name: np.concatenate([getattr(h, name) for h in both]) for name in SUM_COLUMNS},
            tuple(np.concatenate([getattr(h, k) for h in both]) for k in ("fine_index", "fine_count")),
            tuple(np.concatenate([getattr(h, k) for h in both]) for k in ("minute", "minute_count")),
            "merged histograms",
            minute_bins=tuple(np.concatenate([getattr(h, k) for h in both]) for k in ("minute_bin_key", "minute_bin_count")),
        )

    # ---- selection ----------------------------------------------------------
    def select_total(self, above: int | None = None, at_most: int | None = None) -> Histogram:
        """Requests with above < prompt+output <= at_most; both bounds must be TOTAL_EDGES."""
        keep = np.ones(N_TOTAL_BINS, bool)  # per total bin
        for bound in (above, at_most):
            if bound is not None and bound not in TOTAL_EDGES:
                raise ValueError(f"total-length bound {bound} is not a histogram edge (TOTAL_EDGES)")
        if above is not None:
            keep &= above < TOTAL_EDGES
        if at_most is not None:
            keep &= at_most >= TOTAL_EDGES
        cells = {name: getattr(self, name)[keep[self.total_bin]] for name in (*CELL_KEYS, *SUM_COLUMNS)}
        fine = keep[fine_index_parts(self.fine_index)[1]]
        by_bin = keep[minute_bin_parts(self.minute_bin_key)[1]]
        return Histogram(
            **cells,
            fine_index=self.fine_index[fine],
            fine_count=self.fine_count[fine],
            minute=self.minute,
            minute_count=self.minute_count,
            minute_bin_key=self.minute_bin_key[by_bin],
            minute_bin_count=self.minute_bin_count[by_bin],
            minute_bins_kept=self.minute_bins_kept,
        )

    def own_minute_counts(self) -> np.ndarray | None:
        """This histogram's own arrivals in every minute of `minute`'s span (its first minute's to its
        last's, zeros included), where a selection (`select_total`) keeps the whole's span: a class's
        quiet minutes count. None where the source kept no minutes by total bin."""
        if not self.minute.size or not self.minute_bins_kept:
            return None
        minute, _ = minute_bin_parts(self.minute_bin_key)
        first = int(self.minute[0])
        return np.bincount(minute - first, weights=self.minute_bin_count,
                           minlength=int(self.minute[-1]) - first + 1).astype(np.float64)

    # ---- moments ------------------------------------------------------------
    @property
    def requests(self) -> int:
        return exact_total(self.count)

    @property
    def is_empty(self) -> bool:
        return self.requests == 0

    def mean(self, column: str) -> float:
        """Exact mean of a summed column per request, e.g. mean('sum_output_sq') = E[o²]."""
        n = self.requests
        return exact_total(getattr(self, column)) / n if n else 0.0

    # ---- length statistics (see _length_groups) -------------------------------
    def mean_tokens(self, of: str) -> float:
        """Exact mean length of `of` in LENGTH_OF ('prompt', 'output', 'total')."""
        _check_of(of)
        if of == "total":
            return self.mean("sum_prompt") + self.mean("sum_output")
        return self.mean(f"sum_{of}")

    def quantiles(self, of: str, qs) -> np.ndarray:
        """Quantiles of the prompt, output or total length, numpy's default ('linear') definition.

        Each order statistic is placed in its fine bin (`_length_groups`), so each result is
        within FINE_RELATIVE_WIDTH of `numpy.quantile` on the raw lengths (below 2**24).
        """
        return quantiles_of_groups(*_length_groups(self, of), qs)

    def max_tokens(self, of: str) -> int:
        """Largest length of `of`: exact when the narrowed top group holds one distinct length
        (one request, say), otherwise an upper bound within its fine bin."""
        return max_of_groups(_length_groups(self, of)[2])

    def max_is_exact(self, of: str) -> bool:
        """Whether max_tokens(of) is the longest request's own length, not the top of its range."""
        _, low, high = _length_groups(self, of)
        top = int(np.argmax(high))
        return bool(low[top] == high[top])

    def quantiles_and_max(self, of: str, qs) -> tuple[np.ndarray, int]:
        """`quantiles(of, qs)` and `max_tokens(of)` from one grouping of the cells."""
        groups = _length_groups(self, of)
        return quantiles_of_groups(*groups, qs), max_of_groups(groups[2])

    def share_above(self, total_tokens: int) -> float:
        """Exact share of requests with prompt + output > total_tokens (a TOTAL_EDGES value)."""
        n = self.requests
        return self.select_total(above=total_tokens).requests / n if n else 0.0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Histogram):
            return NotImplemented
        names = (*CELL_KEYS, *SUM_COLUMNS, "fine_index", "fine_count", "minute", "minute_count", "minute_bin_key",
                 "minute_bin_count")
        return all(np.array_equal(getattr(self, k), getattr(other, k)) for k in names)

    __hash__ = None  # type: ignore[assignment]


# ---- cell index: one integer per (total, prompt, output) cell -----------------
# Laid out so that sorting by the index is sorting by (total_bin, prompt_bin, output_bin),
# the Histogram's cell order; streaming ingestion accumulates dense arrays over it.
N_LENGTH_BINS = len(LENGTH_EDGES)  # bins of prompt or output length (the last one open-ended)
N_TOTAL_BINS = len(TOTAL_EDGES)  # bins of total length (the last one also holds totals > 2**24)
N_CELLS = N_TOTAL_BINS * N_LENGTH_BINS * N_LENGTH_BINS
N_FINE_BINS = len(FINE_EDGES)  # fine bins (the last one open-ended)
N_FINE = len(LENGTH_OF) * N_TOTAL_BINS * N_FINE_BINS  # entries of a dense fine-marginal array


def cell_index(total_bin: np.ndarray, prompt_bin: np.ndarray, output_bin: np.ndarray) -> np.ndarray:
    """The cell's integer index, `(total_bin * N_LENGTH_BINS + prompt_bin) * N_LENGTH_BINS + output_bin`."""
    t = np.asarray(total_bin, np.int64)
    p = np.asarray(prompt_bin, np.int64)
    return (t * N_LENGTH_BINS + p) * N_LENGTH_BINS + np.asarray(output_bin, np.int64)


def cell_bins(index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inverse of `cell_index`: (total_bin, prompt_bin, output_bin) as int32 arrays."""
    rest, output = np.divmod(np.asarray(index, np.int64), N_LENGTH_BINS)
    total, prompt = np.divmod(rest, N_LENGTH_BINS)
    return total.astype(np.int32), prompt.astype(np.int32), output.astype(np.int32)


def fine_index_of(of: int | np.ndarray, total_bin: np.ndarray, fine_bin: np.ndarray) -> np.ndarray:
    """A fine-marginal entry's index, `(of * N_TOTAL_BINS + total_bin) * N_FINE_BINS + fine_bin`,
    `of` the position in LENGTH_OF (0 prompt, 1 output, 2 total)."""
    t = np.asarray(total_bin, np.int64)
    return (np.asarray(of, np.int64) * N_TOTAL_BINS + t) * N_FINE_BINS + np.asarray(fine_bin, np.int64)


def fine_index_parts(index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inverse of `fine_index_of`: (of, total_bin, fine_bin) as int32 arrays."""
    rest, fine = np.divmod(np.asarray(index, np.int64), N_FINE_BINS)
    of, total = np.divmod(rest, N_TOTAL_BINS)
    return of.astype(np.int32), total.astype(np.int32), fine.astype(np.int32)


def minute_bin_key_of(minute: np.ndarray, total_bin: np.ndarray) -> np.ndarray:
    """A (minute, total bin) entry's key, `minute * N_TOTAL_BINS + total_bin`: sorting by it is sorting
    by minute, then bin (a minute before 1970 is negative; `minute_bin_parts` floors)."""
    return np.asarray(minute, np.int64) * N_TOTAL_BINS + np.asarray(total_bin, np.int64)


def minute_bin_parts(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of `minute_bin_key_of`: (minute as int64, total_bin as int32)."""
    minute, total = np.divmod(np.asarray(key, np.int64), N_TOTAL_BINS)
    return minute, total.astype(np.int32)


def _minute_bins(minute_count: np.ndarray, minute_bins: tuple[np.ndarray, np.ndarray] | None) -> dict:
    """The Histogram fields of minutes by bin (keys, counts, sorted unique) beside `minute_count`: kept
    where they count the same arrivals, else dropped (a merge with a source that had none)."""
    keys, counts = (np.zeros(0, np.int64),) * 2 if minute_bins is None else minute_bins
    kept = exact_total(counts) == exact_total(minute_count)
    if not kept:
        keys, counts = np.zeros(0, np.int64), np.zeros(0, np.int64)
    return {"minute_bin_key": np.asarray(keys, np.int64), "minute_bin_count": np.asarray(counts, np.int64),
            "minute_bins_kept": kept}


def histogram_from_dense(
    dense: dict[str, np.ndarray],
    fine_count: np.ndarray,
    minutes: tuple[np.ndarray, np.ndarray],
    cells: np.ndarray | None = None,
    minute_bins: tuple[np.ndarray, np.ndarray] | None = None,
) -> Histogram:
    """A Histogram from dense per-cell arrays (SUM_COLUMNS, each of length N_CELLS, indexed
    by `cell_index`), a dense fine-marginal count (length N_FINE, indexed by `fine_index_of`)
    and sorted unique (minute, count). Empty cells and bins are dropped, so the result
    equals `Histogram.from_arrays` on the same requests. `cells` (sorted, unique) may name
    the only cells that can be non-zero, to spare a pass over every cell. `minute_bins`: sorted
    unique (minute_bin_key, count), or None where the source kept none."""
    count = np.asarray(dense["count"])
    index = np.flatnonzero(count) if cells is None else cells[count[cells] != 0]
    fine = np.flatnonzero(fine_count)
    t, p, o = cell_bins(index)
    return Histogram(
        prompt_bin=p,
        output_bin=o,
        total_bin=t,
        fine_index=fine.astype(np.int64),
        fine_count=np.asarray(fine_count, np.int64)[fine],
        minute=np.asarray(minutes[0], np.int64),
        minute_count=np.asarray(minutes[1], np.int64),
        **_minute_bins(np.asarray(minutes[1], np.int64), minute_bins),
        **{name: np.asarray(dense[name], np.int64)[index] for name in SUM_COLUMNS},
    )


def histogram_from_rows(
    index: np.ndarray,
    sums: dict[str, np.ndarray],
    fine: tuple[np.ndarray, np.ndarray],
    minutes: tuple[np.ndarray, np.ndarray],
    where: str,
    minute_bins: tuple[np.ndarray, np.ndarray] | None = None,
) -> Histogram:
    """A Histogram from rows in which a cell (`index`, `sums`), a fine bin (index, count), a
    minute (minute, count) or a minute's bin (minute_bin_key, count; None: the source kept none)
    may repeat: repeats are added. Raises InputError naming
    `where` if a sum of repeated rows passes int64, ValueError if the marginals do not
    count the cells' requests."""
    from planner.errors import InputError

    def added(keys: np.ndarray, values: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        uniq, inverse = np.unique(np.asarray(keys, np.int64), return_inverse=True)
        out = {}
        for name, v in values.items():
            total = exact_group_sums(inverse.reshape(-1), v, uniq.size)
            if passes_int64(total):
                raise InputError(
                    f"a {name} summed over a cell's, bin's or minute's rows passes the int64 range", where=where
                )
            out[name] = total.astype(np.int64)
        return uniq, out

    uniq, cell_sums = added(index, sums)
    fine_index, fine_count = added(fine[0], {"fine count": fine[1]})
    minute, minute_count = added(minutes[0], {"minute count": minutes[1]})
    if minute_bins is not None:
        bin_key, bin_count = added(minute_bins[0], {"minute count": minute_bins[1]})
        minute_bins = (bin_key, bin_count["minute count"])
    t, p, o = cell_bins(uniq)
    return Histogram(
        prompt_bin=p,
        output_bin=o,
        total_bin=t,
        fine_index=fine_index,
        fine_count=fine_count["fine count"],
        minute=minute,
        minute_count=minute_count["minute count"],
        **_minute_bins(minute_count["minute count"], minute_bins),
        **cell_sums,
    )


def length_bin_range(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Smallest and largest integer length in prompt/output bins b (largest: inf for the last bin)."""
    return _bin_range(LENGTH_EDGES, b)


def fine_bin_range(f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Smallest and largest integer length in fine bins f (largest: inf for the last bin)."""
    return _bin_range(FINE_EDGES, f)


def _bin_range(edges: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    b = np.asarray(b, np.int64)
    largest = np.append(edges[1:] - 1, 0).astype(np.float64)
    return edges[b].astype(np.float64), np.where(b == len(edges) - 1, np.inf, largest[b])


def total_bin_range(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Smallest and largest integer total in total bins t (0 in the first; inf in the last,
    which also holds totals above its edge)."""
    t = np.asarray(t, np.int64)
    smallest = np.where(t == 0, 0, TOTAL_EDGES[np.maximum(t - 1, 0)] + 1).astype(np.float64)
    return smallest, np.where(t == N_TOTAL_BINS - 1, np.inf, TOTAL_EDGES[t].astype(np.float64))


# ---- length statistics --------------------------------------------------------
def _check_of(of: str) -> None:
    if of not in LENGTH_OF:
        raise ValueError(f"length of {of!r}: expected one of {LENGTH_OF}")


def _length_groups(hist: Histogram, of: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint groups of requests whose `of` length lies in a known integer range: (count, low, high).

    One group per fine bin of the marginal (per total bin and fine bin, for total). Each
    range is the fine bin's, intersected with the range of the coarse group holding it —
    its quarter-octave bin (prompt, output) or its total bin (total) — narrowed by that
    group's exact sums (`samuelson_range`), so a group of identical lengths is exact.
    """
    _check_of(of)
    kind, t_bin, f_bin = fine_index_parts(hist.fine_index)
    mine = kind == LENGTH_OF.index(of)
    count, t_bin, f_bin = hist.fine_count[mine], t_bin[mine], f_bin[mine]
    if of == "total":
        s1 = exact_sum(hist.sum_prompt, hist.sum_output)
        s2 = exact_sum(hist.sum_prompt_sq, hist.sum_prompt_output, hist.sum_prompt_output, hist.sum_output_sq)
        parent_of_cell, parent_of_group = hist.total_bin, t_bin
        parent_range = total_bin_range
    else:
        s1, s2 = getattr(hist, f"sum_{of}"), getattr(hist, f"sum_{of}_sq")
        parent_of_cell = getattr(hist, f"{of}_bin")
        used, inverse = np.unique(f_bin, return_inverse=True)  # one group per fine bin
        count = exact_group_sums(inverse.reshape(-1), count, used.size).astype(np.int64)
        f_bin, parent_of_group = used, length_bin(FINE_EDGES[used])
        parent_range = length_bin_range
    parents, where = np.unique(np.asarray(parent_of_cell, np.int64), return_inverse=True)
    sums = (exact_group_sums(where.reshape(-1), v, parents.size) for v in (hist.count, s1, s2))
    p_lo, p_hi = samuelson_range(*sums, *parent_range(parents))
    k = np.searchsorted(parents, parent_of_group)
    lo, hi = fine_bin_range(f_bin)
    lo = np.maximum(lo, p_lo[k])
    return count.astype(np.float64), lo, np.maximum(np.minimum(hi, p_hi[k]), lo)
