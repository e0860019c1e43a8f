"""The joint length histogram: the workload as the models consume it.

One row per non-empty cell of (prompt bin, output bin, total bin), with the exact
request count and exact per-cell sums of prompt, output, prompt², prompt×output
and output², so every mean the models need is exact rather than a bin-centre
guess. Histograms add: merging two is adding the rows of equal cells, which is
what makes a log too large for one machine histogrammable where it lives.

Bins (public constants, so Spark/SQL can reproduce them):
- prompt and output: log-spaced, quarter-octave edges PROMPT_EDGES; bin i holds
  edges[i] <= n < edges[i+1]; the last bin is open-ended.
- total (prompt + output): TOTAL_EDGES, the thresholds a split or a context
  limit may use; bin j holds TOTAL_EDGES[j-1] < total <= TOTAL_EDGES[j] (bin 0 is
  total <= TOTAL_EDGES[0]); so "total <= T" is exact for every T in TOTAL_EDGES.

The histogram file (Parquet; `Histogram.write_parquet` / `read_parquet`, schema
`histogram_file_schema()`, columns HISTOGRAM_FILE_COLUMNS) is one table with two kinds
of row, so that Spark or SQL can write it with one UNION ALL (README.md, "Histograms at
scale"):
- kind 'cell':   prompt_bin, output_bin, total_bin (int32); count, sum_prompt, sum_output,
                 sum_prompt_sq, sum_prompt_output, sum_output_sq (int64); minute null.
- kind 'minute': minute (int64, floor(epoch seconds / 60)); count = arrivals in that
                 minute; bins and sums null.
A cell or minute may repeat (one row per partition): readers add the rows. planner
writes the bin edges into the schema metadata and refuses a file built with others.

Length statistics (`quantiles`, `max_tokens`, `mean_tokens`, `share_above`): means and
shares above a TOTAL_EDGES value are exact. Quantiles interpolate within groups of
requests known to lie in an integer range — a prompt or output bin; for totals, a cell
(its prompt bin + its output bin, clipped to its total bin), which is finer than the
total bins and needs no extra field — each range narrowed by the exact per-cell sums
(Samuelson's inequality). So every quantile is within that range's width of numpy's on
the raw rows: one quarter-octave bin for prompt and output, about one for total.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def _length_edges() -> np.ndarray:
    quarter_octaves = np.unique(np.round(2.0 ** (np.arange(0, 4 * 24 + 1) / 4)).astype(np.int64))
    return np.concatenate([[0], quarter_octaves])


LENGTH_EDGES = _length_edges()  # 0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 13, 16, ... 2**24
PROMPT_EDGES = LENGTH_EDGES
OUTPUT_EDGES = LENGTH_EDGES
TOTAL_EDGES = np.array(
    sorted({2**k for k in range(7, 25)} | {3 * 2**k for k in range(7, 24)}), dtype=np.int64
)  # 128, 192, 256, 384, ..., 8192, 12288, 16384, ..., 131072, ..., 2**24

CELL_KEYS = ("prompt_bin", "output_bin", "total_bin")
SUM_COLUMNS = ("count", "sum_prompt", "sum_output", "sum_prompt_sq", "sum_prompt_output", "sum_output_sq")


def length_bin(n: np.ndarray) -> np.ndarray:
    """Prompt/output bin index: edges[i] <= n < edges[i+1] (last bin open)."""
    return np.searchsorted(LENGTH_EDGES, n, side="right").astype(np.int32) - 1


def total_bin(total: np.ndarray) -> np.ndarray:
    """Total bin index: TOTAL_EDGES[j-1] < total <= TOTAL_EDGES[j]."""
    return np.minimum(np.searchsorted(TOTAL_EDGES, total, side="left"), len(TOTAL_EDGES) - 1).astype(np.int32)


@dataclass(frozen=True, eq=False)
class Histogram:
    """Cells as parallel numpy arrays, sorted by (total_bin, prompt_bin, output_bin).

    `minute` / `minute_count`: arrivals per wall-clock minute (minute = floor(epoch s / 60)),
    sorted by minute; empty when the source had no timestamps.
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
    minute: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    minute_count: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    # ---- construction -------------------------------------------------------
    @classmethod
    def from_arrays(
        cls, prompt: np.ndarray, output: np.ndarray, timestamps_s: np.ndarray | None = None
    ) -> Histogram:
        """Exact histogram of raw per-request lengths (and optional arrival times in seconds)."""
        p = np.asarray(prompt, dtype=np.int64)
        o = np.asarray(output, dtype=np.int64)
        if p.shape != o.shape:
            raise ValueError("prompt and output arrays differ in length")
        index = cell_index(total_bin(p + o), length_bin(p), length_bin(o))
        sums = dict(zip(SUM_COLUMNS, (np.ones_like(p), p, o, p * p, p * o, o * o), strict=True))
        minutes = np.zeros(0, np.int64)
        if timestamps_s is not None and len(timestamps_s):
            minutes = np.floor_divide(np.asarray(timestamps_s, dtype=np.float64), 60).astype(np.int64)
        return _histogram_from_rows(index, sums, minutes, np.ones_like(minutes), "requests")

    @classmethod
    def constant(cls, prompt_tokens: int, output_tokens: int, requests: int = 1) -> Histogram:
        """A class where every request has the same lengths (how benchmarks are run)."""
        return cls.from_arrays(np.full(requests, prompt_tokens), np.full(requests, output_tokens))

    def merge(self, other: Histogram) -> Histogram:
        """The histogram of the union of both sources' requests (exact)."""
        both = (self, other)
        return _histogram_from_rows(
            np.concatenate([cell_index(h.total_bin, h.prompt_bin, h.output_bin) for h in both]),
            {name: np.concatenate([getattr(h, name) for h in both]) for name in SUM_COLUMNS},
            np.concatenate([h.minute for h in both]),
            np.concatenate([h.minute_count for h in both]),
            "merged histograms",
        )

    # ---- selection ----------------------------------------------------------
    def select_total(self, above: int | None = None, at_most: int | None = None) -> Histogram:
        """Requests with above < prompt+output <= at_most; both bounds must be TOTAL_EDGES."""
        mask = np.ones(self.count.size, bool)
        for bound in (above, at_most):
            if bound is not None and bound not in TOTAL_EDGES:
                raise ValueError(f"total-length bound {bound} is not a histogram edge (TOTAL_EDGES)")
        if above is not None:
            mask &= TOTAL_EDGES[self.total_bin] > above
        if at_most is not None:
            mask &= TOTAL_EDGES[self.total_bin] <= at_most
        return self._subset(mask)

    def _subset(self, mask: np.ndarray) -> Histogram:
        cells = {name: getattr(self, name)[mask] for name in (*CELL_KEYS, *SUM_COLUMNS)}
        return Histogram(**cells, minute=self.minute, minute_count=self.minute_count)

    # ---- moments ------------------------------------------------------------
    @property
    def requests(self) -> int:
        return _exact_total(self.count)

    @property
    def is_empty(self) -> bool:
        return self.requests == 0

    def mean(self, column: str) -> float:
        """Exact mean of a summed column per request, e.g. mean('sum_output_sq') = E[o²]."""
        n = self.requests
        return _exact_total(getattr(self, column)) / n if n else 0.0

    # ---- length statistics (exact-sum aware; see _length_groups) --------------
    def mean_tokens(self, of: str) -> float:
        """Exact mean length of `of` in LENGTH_OF ('prompt', 'output', 'total')."""
        if of not in LENGTH_OF:
            raise ValueError(f"length of {of!r}: expected one of {LENGTH_OF}")
        if of == "total":
            return self.mean("sum_prompt") + self.mean("sum_output")
        return self.mean(f"sum_{of}")

    def quantiles(self, of: str, qs) -> np.ndarray:
        """Quantiles of the prompt, output or total length, numpy's default ('linear') definition.

        Each order statistic is placed by spreading every group's requests evenly over the
        integer range they must lie in (`_length_groups`), so each result is within that
        range's width of `numpy.quantile` on the raw lengths: one length bin for prompt and
        output, one cell (prompt bin + output bin, clipped to the total bin) for total.
        """
        return _quantiles_of_groups(_length_groups(self, of), qs)

    def max_tokens(self, of: str) -> int:
        """Largest length of `of`: exact when the top group holds one distinct length (one
        request, say), otherwise an upper bound within that group's range."""
        return _max_of_groups(_length_groups(self, of))

    def quantiles_and_max(self, of: str, qs) -> tuple[np.ndarray, int]:
        """`quantiles(of, qs)` and `max_tokens(of)` from one grouping of the cells."""
        groups = _length_groups(self, of)
        return _quantiles_of_groups(groups, qs), _max_of_groups(groups)

    def share_above(self, total_tokens: int) -> float:
        """Exact share of requests with prompt + output > total_tokens (a TOTAL_EDGES value)."""
        n = self.requests
        return self.select_total(above=total_tokens).requests / n if n else 0.0

    # ---- the histogram file (schema: HISTOGRAM_FILE_COLUMNS, below) -----------
    def to_table(self, metadata: dict | None = None):
        """This histogram as an Arrow table in the histogram-file schema.

        `metadata` (JSON-serialisable) is stored beside the bin edges in the schema metadata
        under HISTOGRAM_FILE_METADATA_KEY.
        """
        return _histogram_to_table(self, metadata)

    @classmethod
    def from_table(cls, table, where: str = "histogram table") -> Histogram:
        """The Histogram of a table in the histogram-file schema; repeated cells/minutes add.

        Raises planner.errors.InputError naming `where` for a table that these bin edges
        could not have produced (another producer's bin rule, say).
        """
        return _histogram_from_table(table, where)

    def write_parquet(self, where, metadata: dict | None = None) -> None:
        """Write the histogram file to a path or a binary file object.

        Not atomic by itself: for a path someone will read, write through
        `planner.files.atomic_output` (temporary file in the same folder, renamed).
        """
        import pyarrow.parquet as pq

        # dictionary pages pay only for the text column; for the numbers they cost time and size
        pq.write_table(
            self.to_table(metadata), where, compression="zstd", use_dictionary=["kind"]
        )

    @classmethod
    def read_parquet(cls, path) -> Histogram:
        """Read a histogram file (one Parquet file, or a folder of part files) written by
        planner, Spark, Dask or SQL in the histogram-file schema."""
        return _read_histogram_file(path)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Histogram):
            return NotImplemented
        names = (*CELL_KEYS, *SUM_COLUMNS, "minute", "minute_count")
        return all(np.array_equal(getattr(self, k), getattr(other, k)) for k in names)

    __hash__ = None  # type: ignore[assignment]


# ---- cell index: one integer per (total, prompt, output) cell -----------------
# Laid out so that sorting by the index is sorting by (total_bin, prompt_bin, output_bin),
# the Histogram's cell order; streaming ingestion accumulates dense arrays over it.
N_LENGTH_BINS = len(LENGTH_EDGES)  # bins of prompt or output length (the last one open-ended)
N_TOTAL_BINS = len(TOTAL_EDGES)  # bins of total length (the last one also holds totals > 2**24)
N_CELLS = N_TOTAL_BINS * N_LENGTH_BINS * N_LENGTH_BINS


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


def histogram_from_dense(
    dense: dict[str, np.ndarray],
    minute: np.ndarray,
    minute_count: np.ndarray,
    cells: np.ndarray | None = None,
) -> Histogram:
    """A Histogram from dense per-cell arrays (SUM_COLUMNS, each of length N_CELLS, indexed
    by `cell_index`) and sorted unique minutes. Cells with a zero count are dropped, so the
    result equals `Histogram.from_arrays` on the same requests. `cells` (sorted, unique)
    may name the only cells that can be non-zero, to spare a pass over every cell."""
    count = np.asarray(dense["count"])
    index = np.flatnonzero(count) if cells is None else cells[count[cells] != 0]
    t, p, o = cell_bins(index)
    return Histogram(
        prompt_bin=p,
        output_bin=o,
        total_bin=t,
        minute=np.asarray(minute, np.int64),
        minute_count=np.asarray(minute_count, np.int64),
        **{name: np.asarray(dense[name], np.int64)[index] for name in SUM_COLUMNS},
    )


def _histogram_from_rows(
    index: np.ndarray,
    sums: dict[str, np.ndarray],
    minute: np.ndarray,
    minute_count: np.ndarray,
    where: str,
) -> Histogram:
    """A Histogram from per-cell and per-minute rows in which a cell or minute may repeat
    (added). Raises InputError naming `where` if a sum of repeated rows passes int64."""
    from planner.errors import InputError

    def merged(groups: np.ndarray, values: np.ndarray, n_groups: int, name: str) -> np.ndarray:
        total = _exact_group_sums(groups, values, n_groups)
        if total.dtype == object and any(abs(v) > _INT64_MAX for v in total):
            raise InputError(
                f"a {name} summed over a cell's or minute's rows passes the int64 range", where=where
            )
        return total.astype(np.int64)

    uniq, inverse = np.unique(np.asarray(index, np.int64), return_inverse=True)
    added = {name: merged(inverse.reshape(-1), sums[name], uniq.size, name) for name in SUM_COLUMNS}
    t, p, o = cell_bins(uniq)
    m_uniq, m_inverse = np.unique(np.asarray(minute, np.int64), return_inverse=True)
    m_count = merged(m_inverse.reshape(-1), minute_count, m_uniq.size, "minute count")
    return Histogram(
        prompt_bin=p, output_bin=o, total_bin=t, minute=m_uniq, minute_count=m_count, **added
    )


def _length_bin_range(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Smallest and largest integer length in prompt/output bins b (largest: inf for the last bin)."""
    b = np.asarray(b, np.int64)
    largest = np.append(LENGTH_EDGES[1:] - 1, 0).astype(np.float64)
    return LENGTH_EDGES[b].astype(np.float64), np.where(b == N_LENGTH_BINS - 1, np.inf, largest[b])


def _total_bin_range(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Smallest and largest integer total in total bins t (0 in the first; inf in the last,
    which also holds totals above its edge)."""
    t = np.asarray(t, np.int64)
    smallest = np.where(t == 0, 0, TOTAL_EDGES[np.maximum(t - 1, 0)] + 1).astype(np.float64)
    return smallest, np.where(t == N_TOTAL_BINS - 1, np.inf, TOTAL_EDGES[t].astype(np.float64))


# ---- the histogram file (Parquet) ---------------------------------------------
# One table, two kinds of row (long format, so Spark or SQL writes it with one UNION ALL):
#   kind = "cell":   prompt_bin, output_bin, total_bin (int32), count and the five sums
#                    (int64); minute is null.
#   kind = "minute": minute (int64, floor(epoch seconds / 60)) and count = arrivals in that
#                    minute; the bin and sum columns are null.
# A cell or minute may repeat (one row per partition, say): readers add the rows.
# Schema metadata under HISTOGRAM_FILE_METADATA_KEY (optional; planner writes it) is JSON:
#   {"format": HISTOGRAM_FILE_FORMAT, "length_edges": [...], "total_edges": [...], ...};
# a file whose edges differ from this module's is refused rather than misread.
HISTOGRAM_FILE_FORMAT = "planner.histogram/1"
HISTOGRAM_FILE_METADATA_KEY = "planner.histogram"
HISTOGRAM_FILE_KINDS = ("cell", "minute")
HISTOGRAM_FILE_COLUMNS = ("kind", *CELL_KEYS, *SUM_COLUMNS, "minute")


def histogram_file_schema():
    """The Arrow schema of the histogram file, columns in HISTOGRAM_FILE_COLUMNS order."""
    import pyarrow as pa

    return pa.schema(
        [("kind", pa.string())]
        + [(name, pa.int32()) for name in CELL_KEYS]
        + [(name, pa.int64()) for name in SUM_COLUMNS]
        + [("minute", pa.int64())]
    )


def _histogram_to_table(hist: Histogram, metadata: dict | None):
    import json

    import pyarrow as pa

    n_cells, n_minutes = hist.count.size, hist.minute.size
    is_minute_row = np.arange(n_cells + n_minutes) >= n_cells
    columns = {"kind": pa.array(["cell"] * n_cells + ["minute"] * n_minutes, pa.string())}
    for name in CELL_KEYS:
        values = np.concatenate([getattr(hist, name), np.zeros(n_minutes)]).astype(np.int32)
        columns[name] = pa.array(values, pa.int32(), mask=is_minute_row)
    for name in SUM_COLUMNS:
        tail = hist.minute_count if name == "count" else np.zeros(n_minutes)
        values = np.concatenate([getattr(hist, name), tail]).astype(np.int64)
        columns[name] = pa.array(values, pa.int64(), mask=None if name == "count" else is_minute_row)
    minutes = np.concatenate([np.zeros(n_cells), hist.minute]).astype(np.int64)
    columns["minute"] = pa.array(minutes, pa.int64(), mask=~is_minute_row)
    meta = {
        "format": HISTOGRAM_FILE_FORMAT,
        "length_edges": LENGTH_EDGES.tolist(),
        "total_edges": TOTAL_EDGES.tolist(),
        **(metadata or {}),
    }
    schema = histogram_file_schema().with_metadata({HISTOGRAM_FILE_METADATA_KEY: json.dumps(meta)})
    return pa.table(columns, schema=schema)


def _histogram_from_table(table, where: str) -> Histogram:
    import pyarrow as pa
    import pyarrow.compute as pc

    from planner.errors import InputError

    missing = [c for c in HISTOGRAM_FILE_COLUMNS if c not in table.column_names]
    if missing:
        raise InputError(
            f"not a histogram file: no column(s) {', '.join(missing)}; "
            f"a histogram file has {', '.join(HISTOGRAM_FILE_COLUMNS)}",
            where=where,
        )
    kind = table.column("kind").cast(pa.string())
    found = set(pc.unique(pc.drop_null(kind)).to_pylist())
    if kind.null_count or found - set(HISTOGRAM_FILE_KINDS):
        shown = sorted(found - set(HISTOGRAM_FILE_KINDS)) + (["null"] if kind.null_count else [])
        raise InputError(
            f"column 'kind' holds {', '.join(map(str, shown))}; expected {' or '.join(HISTOGRAM_FILE_KINDS)}",
            where=where,
        )
    is_cell = pc.equal(kind, "cell")
    parts = {"cell": table.filter(is_cell), "minute": table.filter(pc.invert(is_cell))}

    def ints(kind_name: str, name: str) -> np.ndarray:
        column = parts[kind_name].column(name)
        if column.null_count:
            raise InputError(f"column '{name}' is null in a '{kind_name}' row", where=where)
        try:
            return column.cast(pa.int64()).to_numpy()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise InputError(f"column '{name}' is {column.type}, not an integer", where=where) from None

    bins = {name: ints("cell", name) for name in CELL_KEYS}
    sums = {name: ints("cell", name) for name in SUM_COLUMNS}
    minute, minute_count = ints("minute", "minute"), ints("minute", "count")
    _check_cells(bins, sums, where)
    if (minute_count < 1).any():
        raise InputError("a 'minute' row has count < 1", where=where)
    index = cell_index(bins["total_bin"], bins["prompt_bin"], bins["output_bin"])
    return _histogram_from_rows(index, sums, minute, minute_count, where)


def _check_cells(bins: dict[str, np.ndarray], sums: dict[str, np.ndarray], where: str) -> None:
    """Refuse cells these bin edges cannot produce: a producer that used another bin rule
    (side='left', other edges) would otherwise be misread silently."""
    from planner.errors import InputError

    for name, n_bins in (("prompt_bin", N_LENGTH_BINS), ("output_bin", N_LENGTH_BINS), ("total_bin", N_TOTAL_BINS)):
        values = bins[name]
        if values.size and (values.min() < 0 or values.max() >= n_bins):
            raise InputError(f"column '{name}' outside 0..{n_bins - 1}", where=where)
    count = sums["count"].astype(np.float64)
    if (count < 1).any():
        raise InputError("a 'cell' row has count < 1", where=where)
    p_lo, p_hi = _length_bin_range(bins["prompt_bin"])
    o_lo, o_hi = _length_bin_range(bins["output_bin"])
    t_lo, t_hi = _total_bin_range(bins["total_bin"])
    prompt_rule = "prompt_bin: LENGTH_EDGES[i] <= prompt < LENGTH_EDGES[i+1]"
    output_rule = "output_bin: LENGTH_EDGES[i] <= output < LENGTH_EDGES[i+1]"
    # Every request of a cell lies in the cell's bins, so each sum lies in count × the bin
    # range (of the lengths, their squares or their products). Floats round large sums and
    # products, by far less than the tolerance; it keeps an exact sum from being refused.
    tolerance = 1e-12
    with np.errstate(invalid="ignore"):  # 0 × inf (a 0-token length and the open-ended bin) is 0
        po_hi = np.where((p_hi == 0) | (o_hi == 0), 0.0, p_hi * o_hi)
    for values, lo, hi, rule in (
        (sums["sum_prompt"], p_lo, p_hi, prompt_rule),
        (sums["sum_output"], o_lo, o_hi, output_rule),
        (
            sums["sum_prompt"].astype(np.float64) + sums["sum_output"],
            t_lo,
            t_hi,
            "total_bin: TOTAL_EDGES[j-1] < prompt+output <= TOTAL_EDGES[j]",
        ),
        (sums["sum_prompt_sq"], p_lo**2, p_hi**2, prompt_rule),
        (sums["sum_output_sq"], o_lo**2, o_hi**2, output_rule),
        (sums["sum_prompt_output"], p_lo * o_lo, po_hi, f"{prompt_rule}; {output_rule}"),
    ):
        v = np.asarray(values, np.float64)
        with np.errstate(invalid="ignore"):  # inf × 0 in an open-ended bin: no upper bound
            low, high = count * lo * (1 - tolerance), count * hi * (1 + tolerance)
        if ((v < low) | (v > high)).any():
            raise InputError(
                f"some cell's sums lie outside its bins; bins must follow planner.histogram ({rule})",
                where=where,
            )


def read_histogram_file_metadata(path) -> dict:
    """The JSON metadata in a histogram file's schema ({} when its producer wrote none)."""
    import json

    import pyarrow.parquet as pq

    raw = (pq.read_schema(path).metadata or {}).get(HISTOGRAM_FILE_METADATA_KEY.encode())
    return json.loads(raw) if raw else {}


def _read_histogram_file(path) -> Histogram:
    return read_histogram_file_and_metadata(path)[0]


def read_histogram_file_and_metadata(path) -> tuple[Histogram, dict]:
    """A histogram file's Histogram and the JSON metadata its producer wrote ({} if none)."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    from planner.errors import InputError

    where = str(path)
    try:
        dataset = ds.dataset(where, format="parquet")
        table = dataset.to_table()
        meta = read_histogram_file_metadata(dataset.files[0]) if dataset.files else {}
    except (pa.ArrowInvalid, OSError, ValueError) as exc:
        raise InputError(f"cannot read as a Parquet histogram file: {exc}", where=where) from None
    for key, edges in (("length_edges", LENGTH_EDGES), ("total_edges", TOTAL_EDGES)):
        if key in meta and list(meta[key]) != edges.tolist():
            raise InputError(
                f"built with other bin edges ({key}) than planner.histogram has; rebuild it from the logs",
                where=where,
            )
    return _histogram_from_table(table, where), meta


# ---- length statistics --------------------------------------------------------
LENGTH_OF = ("prompt", "output", "total")


def _length_groups(hist: Histogram, of: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Groups of requests whose `of` length lies in a known integer range: (count, low, high).

    prompt/output: one group per bin of the marginal. total: one group per cell, whose
    totals lie in its prompt bin + its output bin, clipped to its total bin. Each range is
    then narrowed by Samuelson's inequality (each of n values lies within sd·sqrt(n − 1)
    of their mean; Samuelson 1968), computed from the exact sums, so a group of one request
    or of identical lengths is exact.
    """
    if of not in LENGTH_OF:
        raise ValueError(f"length of {of!r}: expected one of {LENGTH_OF}")
    if of == "total":
        count = hist.count
        s1 = _exact_sum(hist.sum_prompt, hist.sum_output)
        s2 = _exact_sum(hist.sum_prompt_sq, hist.sum_prompt_output, hist.sum_prompt_output, hist.sum_output_sq)
        p_lo, p_hi = _length_bin_range(hist.prompt_bin)
        o_lo, o_hi = _length_bin_range(hist.output_bin)
        t_lo, t_hi = _total_bin_range(hist.total_bin)
        lo, hi = np.maximum(p_lo + o_lo, t_lo), np.minimum(p_hi + o_hi, t_hi)
    else:
        bins = getattr(hist, f"{of}_bin").astype(np.int64)
        first, second = (
            (hist.sum_prompt, hist.sum_prompt_sq) if of == "prompt" else (hist.sum_output, hist.sum_output_sq)
        )
        used, where = np.unique(bins, return_inverse=True)
        count, s1, s2 = (_exact_group_sums(where.reshape(-1), v, used.size) for v in (hist.count, first, second))
        lo, hi = _length_bin_range(used)
    n_sq_var = _n_squared_variance(count, s1, s2)
    count = np.asarray(count, np.float64)  # exact sums done; what follows is float arithmetic
    n = np.maximum(count, 1.0)
    mean = np.asarray(s1, np.float64) / n
    reach = np.sqrt(np.maximum(n_sq_var, 0.0) * np.maximum(count - 1, 0.0)) / n
    # absorbs float rounding of the bound (a few ulps, 1e-16 each), not its mathematics; small
    # enough that mean + slack never floors to the next integer (lengths are at most ~3e9:
    # a cell's sum of squares is int64), so a group of identical lengths stays exact
    slack = 1e-12 * np.maximum(mean + reach, 1.0)
    lo = np.maximum(lo, np.ceil(mean - reach - slack))
    hi = np.maximum(np.minimum(hi, np.floor(mean + reach + slack)), lo)
    return count, lo, hi


_INT64_MAX = np.iinfo(np.int64).max


def _exact_total(values: np.ndarray) -> int:
    """The exact sum of an int64 array, as a Python int."""
    return int(_exact_group_sums(np.zeros(len(values), np.intp), values, 1)[0])


def _exact_group_sums(groups: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Σ of int64 `values` per group: int64 where every sum stays below 2**62, which float
    estimates tell, else Python integers (an object array), which cannot wrap."""
    estimate = np.zeros(n_groups)
    np.add.at(estimate, groups, np.abs(np.asarray(values, np.float64)))
    dtype = np.int64 if (estimate < 2.0**62).all() else object
    out = np.zeros(n_groups, dtype)
    np.add.at(out, groups, np.asarray(values, np.int64).astype(dtype))
    return out


def _exact_sum(*terms: np.ndarray) -> np.ndarray:
    """The element-wise sum of int64 arrays of one length, exact (see `_exact_group_sums`)."""
    n = len(terms[0])
    return _exact_group_sums(np.tile(np.arange(n), len(terms)), np.concatenate(terms), n)


def _n_squared_variance(count: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
    """n·Σx² − (Σx)² per group, computed exactly in integers, returned as float64.

    In floats it cancels, and a group of identical lengths must come out as exactly 0.
    int64 is exact where both products stay below 2**62; float estimates of the products,
    within about 1e-15 of them, pick those groups. Python integers take the rest (and any
    group whose sums are already Python integers, from `_exact_sum`).
    """
    n_f, s1_f, s2_f = (np.asarray(a, np.float64) for a in (count, s1, s2))
    fits = (np.abs(n_f * s2_f) < 2.0**62) & (s1_f * s1_f < 2.0**62)
    if any(np.asarray(a).dtype == object for a in (count, s1, s2)):
        fits[:] = False
    out = np.empty(n_f.size, np.float64)
    if fits.any():
        c, a, b = (np.asarray(x[fits], np.int64) for x in (count, s1, s2))
        out[fits] = c * b - a * a
    rest = np.flatnonzero(~fits)
    out[rest] = [int(count[i]) * int(s2[i]) - int(s1[i]) ** 2 for i in rest]
    return out


def _order_statistics(count: np.ndarray, lo: np.ndarray, hi: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Invert the mixture CDF of the groups (each uniform on [lo, hi]; a point mass if lo == hi)
    at `ranks` (rank k + 0.5 places the k-th smallest request, 0-based)."""
    points = np.unique(np.concatenate([lo, hi]))
    spread = hi > lo
    density = np.zeros(count.size)
    density[spread] = count[spread] / (hi[spread] - lo[spread])
    slope_change = np.zeros(points.size)
    np.add.at(slope_change, np.searchsorted(points, lo[spread]), density[spread])
    np.add.at(slope_change, np.searchsorted(points, hi[spread]), -density[spread])
    jump = np.zeros(points.size)
    np.add.at(jump, np.searchsorted(points, lo[~spread]), count[~spread])
    slope = np.cumsum(slope_change)  # on (points[k], points[k+1])
    rise = np.concatenate([[0.0], slope[:-1] * np.diff(points)])
    cdf = np.cumsum(rise + jump)  # right-continuous, at each point
    k = np.minimum(np.searchsorted(cdf, ranks, side="left"), points.size - 1)
    prev = np.maximum(k - 1, 0)
    on_slope = (k > 0) & (ranks <= cdf[k] - jump[k]) & (slope[prev] > 0)
    along = np.where(on_slope, (ranks - cdf[prev]) / np.where(on_slope, slope[prev], 1.0), 0.0)
    return np.where(on_slope, points[prev] + along, points[k])


def _max_of_groups(groups: tuple[np.ndarray, np.ndarray, np.ndarray]) -> int:
    _, _, hi = groups
    if not hi.size:
        raise ValueError("an empty histogram has no maximum")
    return int(hi.max())


def _quantiles_of_groups(groups: tuple[np.ndarray, np.ndarray, np.ndarray], qs) -> np.ndarray:
    q = np.atleast_1d(np.asarray(qs, dtype=np.float64))
    if ((q < 0) | (q > 1)).any():
        raise ValueError(f"quantiles must lie in [0, 1], got {q.tolist()}")
    count, lo, hi = groups
    n = int(count.sum())
    if n == 0:
        return np.full(q.shape, np.nan)
    # numpy's 'linear' definition: position h = q·(n − 1) between two order statistics.
    h = q * (n - 1)
    below = np.floor(h)
    x_below = _order_statistics(count, lo, hi, below + 0.5)
    x_above = _order_statistics(count, lo, hi, np.minimum(below + 1, n - 1) + 0.5)
    return x_below + (h - below) * (x_above - x_below)


def bin_tables() -> dict:
    """The bins as Arrow tables, for producing histogram files in SQL (README.md,
    "Histograms at scale"): `length_bins` (bin, lo, hi): lo <= n < hi; `total_bins`
    (bin, lo, hi): lo < prompt + output <= hi. A null bound is open (the last bins;
    the first total bin has no lower bound)."""
    import pyarrow as pa

    length_hi = pa.array(np.append(LENGTH_EDGES[1:], 0), pa.int64(), mask=np.arange(N_LENGTH_BINS) == N_LENGTH_BINS - 1)
    total_lo = pa.array(np.concatenate([[0], TOTAL_EDGES[:-1]]), pa.int64(), mask=np.arange(N_TOTAL_BINS) == 0)
    total_hi = pa.array(TOTAL_EDGES, pa.int64(), mask=np.arange(N_TOTAL_BINS) == N_TOTAL_BINS - 1)
    return {
        "length_bins": pa.table(
            {"bin": pa.array(np.arange(N_LENGTH_BINS), pa.int32()), "lo": pa.array(LENGTH_EDGES, pa.int64()), "hi": length_hi}
        ),
        "total_bins": pa.table({"bin": pa.array(np.arange(N_TOTAL_BINS), pa.int32()), "lo": total_lo, "hi": total_hi}),
    }
