"""The histogram file: a Histogram on disk, as planner, Spark, Dask or SQL write it.

One Parquet table (or a folder of part files), long format, so that Spark or SQL can
write it with one UNION ALL (README.md, "Histograms at scale"); columns
HISTOGRAM_FILE_COLUMNS, schema `histogram_file_schema()` (Spark: `histogram_file_ddl()`):
- kind 'cell':   prompt_bin, output_bin, total_bin (int32); count, sum_prompt, sum_output,
                 sum_prompt_sq, sum_prompt_output, sum_output_sq (int64); minute, fine_bin null.
- kind 'prompt', 'output', 'total': a fine marginal (planner.histogram.FINE_EDGES):
                 total_bin, fine_bin (int32) and count = requests whose prompt, output or
                 total length lies in that fine bin, within that total bin; other columns null.
- kind 'minute': minute (int64, floor(epoch seconds / 60)); count = arrivals in that
                 minute; total_bin (int32): the total bin of the arrivals counted, or null
                 (arrivals of every length: files written before a traffic class's own
                 minutes were kept, or a producer that keeps none); the other columns null.
                 Either every minute row names its total bin or the file keeps no minutes
                 by bin; a reader that ignores total_bin adds a minute's rows, as before.
A cell, fine bin or minute may repeat (one row per partition): readers add the rows.
Schema metadata under HISTOGRAM_FILE_METADATA_KEY (optional; planner writes it) is JSON:
{"format": HISTOGRAM_FILE_FORMAT, "length_edges": [...], "total_edges": [...],
"fine_edges": [...], ...}, validated as a whole, part by part (histmeta.py); a file built with
other edges is refused rather than misread, and so is a file of the first format (no fine
marginals), with a line saying to rebuild it.
"""

from __future__ import annotations

import json
import os

import numpy as np

from planner.errors import InputError
from planner.files import arrow_readable_names, atomic_output, missing_text
from planner.histogram import (
    CELL_KEYS,
    FINE_EDGES,
    LENGTH_EDGES,
    LENGTH_OF,
    N_FINE_BINS,
    N_LENGTH_BINS,
    N_TOTAL_BINS,
    SUM_COLUMNS,
    TOTAL_EDGES,
    Histogram,
    cell_index,
    fine_bin_range,
    fine_index_of,
    fine_index_parts,
    histogram_from_rows,
    length_bin,
    length_bin_range,
    minute_bin_key_of,
    minute_bin_parts,
    total_bin_range,
)
from planner.order_stats import exact_group_sums
from planner.workload.histmeta import (
    HISTOGRAM_FILE_METADATA_KEY,
    READABLE_FORMATS,
    HistogramFileMetadata,
    combined,
    read_file_metadata,
)

HISTOGRAM_FILE_FORMAT = READABLE_FORMATS[-1]
HISTOGRAM_FILE_KINDS = ("cell", *LENGTH_OF, "minute")
HISTOGRAM_FILE_COLUMNS = ("kind", *CELL_KEYS, *SUM_COLUMNS, "minute", "fine_bin")
# The columns of every format so far: a Parquet file with these is a histogram file (of
# this format or an older one), not a log.
HISTOGRAM_FILE_CORE_COLUMNS = ("kind", *CELL_KEYS, *SUM_COLUMNS, "minute")
_INT32_COLUMNS = (*CELL_KEYS, "fine_bin")


def histogram_file_schema():
    """The Arrow schema of the histogram file, columns in HISTOGRAM_FILE_COLUMNS order."""
    import pyarrow as pa

    return pa.schema(
        [(name, pa.string() if name == "kind" else pa.int32() if name in _INT32_COLUMNS else pa.int64())
         for name in HISTOGRAM_FILE_COLUMNS]
    )


def histogram_file_ddl() -> str:
    """The schema as a Spark SQL DDL string, for `mapInArrow` (pyspark 4 takes no Arrow schema)."""
    names = {"string": "STRING", "int32": "INT", "int64": "BIGINT"}
    return ", ".join(f"{f.name} {names[str(f.type)]}" for f in histogram_file_schema())


def histogram_table(hist: Histogram, metadata: dict | None = None):
    """`hist` as an Arrow table in the histogram-file schema; `metadata` (JSON-serialisable)
    is stored beside the bin edges in the schema metadata under HISTOGRAM_FILE_METADATA_KEY."""
    import pyarrow as pa

    # a minute's rows by total bin where the histogram kept them for every arrival, else one row a minute
    by_bin = hist.minute_bins_kept and int(hist.minute_bin_count.sum()) == int(hist.minute_count.sum())
    minute, minute_count = (minute_bin_parts(hist.minute_bin_key)[0], hist.minute_bin_count) if by_bin else (
        hist.minute, hist.minute_count)
    minute_total = minute_bin_parts(hist.minute_bin_key)[1] if by_bin else None
    n_rows = (hist.count.size, hist.fine_index.size, minute.size)  # cells, marginal bins, minutes

    def column(dtype, *parts: np.ndarray | None) -> pa.Array:
        """A column from its values in the rows of each kind (cells, marginals, minutes); None: null."""
        values = [np.zeros(n, np.int64) if v is None else np.asarray(v, np.int64) for v, n in zip(parts, n_rows, strict=True)]
        null = [np.full(n, v is None) for v, n in zip(parts, n_rows, strict=True)]
        return pa.array(np.concatenate(values).astype(dtype.to_pandas_dtype()), dtype, mask=np.concatenate(null))

    of, fine_total, fine = fine_index_parts(hist.fine_index)
    kinds = np.concatenate([np.zeros(n_rows[0], np.int64), 1 + of, np.full(n_rows[2], len(HISTOGRAM_FILE_KINDS) - 1)])
    i32, i64 = pa.int32(), pa.int64()
    columns = {
        "kind": pa.array(np.array(HISTOGRAM_FILE_KINDS, object)[kinds], pa.string()),
        "prompt_bin": column(i32, hist.prompt_bin, None, None),
        "output_bin": column(i32, hist.output_bin, None, None),
        "total_bin": column(i32, hist.total_bin, fine_total, minute_total),
        "count": column(i64, hist.count, hist.fine_count, minute_count),
        **{name: column(i64, getattr(hist, name), None, None) for name in SUM_COLUMNS[1:]},
        "minute": column(i64, None, None, minute),
        "fine_bin": column(i32, None, fine, None),
    }
    meta = {
        "format": HISTOGRAM_FILE_FORMAT,
        "length_edges": LENGTH_EDGES.tolist(),
        "total_edges": TOTAL_EDGES.tolist(),
        "fine_edges": FINE_EDGES.tolist(),
        **(metadata or {}),
    }
    schema = histogram_file_schema().with_metadata({HISTOGRAM_FILE_METADATA_KEY: json.dumps(meta)})
    return pa.table(columns, schema=schema)


def histogram_from_table(table, where: str = "histogram table") -> Histogram:
    """The Histogram of a table in the histogram-file schema; repeated rows add.

    Raises InputError naming `where` for a table of the first format (no fine_bin), or one
    that these bin edges could not have produced (another producer's bin rule, say).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    _check_columns(table.column_names, where)
    kind = table.column("kind").cast(pa.string())
    found = set(pc.unique(pc.drop_null(kind)).to_pylist())
    if kind.null_count or found - set(HISTOGRAM_FILE_KINDS):
        shown = sorted(found - set(HISTOGRAM_FILE_KINDS)) + (["null"] if kind.null_count else [])
        raise InputError(
            f"column 'kind' holds {', '.join(map(str, shown))}; expected {', '.join(HISTOGRAM_FILE_KINDS)}",
            where=where,
        )
    parts = {k: table.filter(pc.equal(kind, k)) for k in HISTOGRAM_FILE_KINDS}

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
    fine = {of: {name: ints(of, name) for name in ("total_bin", "fine_bin", "count")} for of in LENGTH_OF}
    minute, minute_count = ints("minute", "minute"), ints("minute", "count")
    _check_cells(bins, sums, where)
    _check_marginals(bins, sums["count"], fine, where)
    empty = int(sums["count"][bins["prompt_bin"] == 0].sum())
    if empty:  # a file written before logs' empty prompts were excluded, or by another producer
        raise InputError(f"{empty:,} request(s) with an empty prompt (0 tokens), which no engine serves; rebuild "
                         "the file from the logs with planner histogram, which excludes and counts them", where=where)
    if (minute_count < 1).any():
        raise InputError("a 'minute' row has count < 1", where=where)
    # Arrivals are requests with a time: a merge with an untimed log may count fewer, never more.
    arrivals, requests = sum(minute_count.tolist()), sum(sums["count"].tolist())
    if arrivals > requests:
        raise InputError(f"the 'minute' rows count {arrivals:,} arrivals but the cells hold {requests:,} requests",
                         where=where)
    index = cell_index(bins["total_bin"], bins["prompt_bin"], bins["output_bin"])
    fine_index = np.concatenate(
        [fine_index_of(k, fine[of]["total_bin"], fine[of]["fine_bin"]) for k, of in enumerate(LENGTH_OF)]
    )
    fine_count = np.concatenate([fine[of]["count"] for of in LENGTH_OF])
    minute_bins = _minute_bins(parts["minute"], minute, minute_count, bins["total_bin"], sums["count"], where)
    return histogram_from_rows(index, sums, (fine_index, fine_count), (minute, minute_count), where,
                               minute_bins=minute_bins)


def _minute_bins(rows, minute: np.ndarray, count: np.ndarray, cell_total_bin: np.ndarray, cell_count: np.ndarray,
                 where: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The minute rows' (minute_bin_key, count) where every one names its total bin, None where none
    does (a file that keeps no minutes by bin). A file in which some do and some do not (parts of two
    producers) keeps none: its classes' own minutes would miss arrivals. Raises InputError naming
    `where` for a bin out of range, or a bin that counts more arrivals than its cells hold requests."""
    import pyarrow as pa

    column = rows.column("total_bin")
    if column.null_count:  # none names its bin, or only some do
        return None
    total = column.cast(pa.int64()).to_numpy()
    if ((total < 0) | (total >= N_TOTAL_BINS)).any():
        raise InputError(f"a 'minute' row's total_bin is outside 0-{N_TOTAL_BINS - 1}", where=where)
    arrivals = exact_group_sums(total, count, N_TOTAL_BINS)
    requests = exact_group_sums(np.asarray(cell_total_bin, np.int64), cell_count, N_TOTAL_BINS)
    over = np.flatnonzero(arrivals > requests)
    if over.size:
        raise InputError(f"the 'minute' rows of total_bin {int(over[0])} count {int(arrivals[over[0]]):,} arrivals but "
                         f"its cells hold {int(requests[over[0]]):,} requests", where=where)
    return minute_bin_key_of(minute, total), count


def _check_columns(names, where: str) -> None:
    missing = [c for c in HISTOGRAM_FILE_COLUMNS if c not in names]
    if missing == ["fine_bin"]:
        raise InputError(
            "histogram file of the first format (no fine_bin column, so no fine length marginals); "
            "rebuild it from the logs with planner histogram",
            where=where,
        )
    if missing:
        raise InputError(
            f"not a histogram file: no column(s) {', '.join(missing)}; "
            f"a histogram file has {', '.join(HISTOGRAM_FILE_COLUMNS)}",
            where=where,
        )


def _check_in_range(values: np.ndarray, name: str, n_bins: int, where: str) -> None:
    if values.size and (values.min() < 0 or values.max() >= n_bins):
        raise InputError(f"column '{name}' outside 0..{n_bins - 1}", where=where)


def _check_cells(bins: dict[str, np.ndarray], sums: dict[str, np.ndarray], where: str) -> None:
    """Refuse cells these bin edges cannot produce: a producer that used another bin rule
    (side='left', other edges) would otherwise be misread silently."""
    for name, n_bins in (("prompt_bin", N_LENGTH_BINS), ("output_bin", N_LENGTH_BINS), ("total_bin", N_TOTAL_BINS)):
        _check_in_range(bins[name], name, n_bins, where)
    count = sums["count"].astype(np.float64)
    if (count < 1).any():
        raise InputError("a 'cell' row has count < 1", where=where)
    p_lo, p_hi = length_bin_range(bins["prompt_bin"])
    o_lo, o_hi = length_bin_range(bins["output_bin"])
    t_lo, t_hi = total_bin_range(bins["total_bin"])
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


def _check_marginals(bins: dict[str, np.ndarray], count: np.ndarray, fine: dict, where: str) -> None:
    """Refuse fine marginals that do not count the cells' requests bin by bin.

    The fine bins refine the quarter-octave ones, so a prompt (output) marginal summed over
    the fine bins of each (total bin, prompt bin) must give the cells' count there; the
    total marginal must give each total bin's count, in fine bins that meet the total bin.
    """
    rule = "fine_bin: FINE_EDGES[f] <= length < FINE_EDGES[f+1]"
    for of in LENGTH_OF:
        rows = fine[of]
        _check_in_range(rows["total_bin"], "total_bin", N_TOTAL_BINS, where)
        _check_in_range(rows["fine_bin"], "fine_bin", N_FINE_BINS, where)
        if (rows["count"] < 1).any():
            raise InputError(f"a '{of}' row has count < 1", where=where)
        if of == "total":
            keys = [bins["total_bin"], rows["total_bin"]]
            lo, hi = fine_bin_range(rows["fine_bin"])
            t_lo, t_hi = total_bin_range(rows["total_bin"])
            if ((hi < t_lo) | (lo > t_hi)).any():
                raise InputError(f"a 'total' row's fine bin lies outside its total bin ({rule})", where=where)
        else:
            coarse = length_bin(FINE_EDGES[rows["fine_bin"]])
            keys = [
                cell_index(bins["total_bin"], bins[f"{of}_bin"], 0),
                cell_index(rows["total_bin"], coarse, 0),
            ]
        both, inverse = np.unique(np.concatenate(keys), return_inverse=True)
        signed = np.concatenate([count, -rows["count"]])
        if (exact_group_sums(inverse.reshape(-1), signed, both.size) != 0).any():
            raise InputError(
                f"the '{of}' rows do not count the cells' requests bin by bin ({rule})", where=where
            )


class UnreadableHistogram(InputError):
    """A histogram file that pyarrow could not read, in pyarrow's words: a caller that reads its input
    through the log readers' checks only now (planner.cli.capacity_cmd) tells their clearer ones."""


def read_histogram(path: str | os.PathLike) -> Histogram:
    """The Histogram in a histogram file (a Parquet file, or a folder of part files).

    Raises planner.errors.InputError naming the file when it is not one.
    """
    return read_histogram_and_metadata(path)[0]


def _starts_as_parquet(path: str) -> bool:
    """Whether the file starts with Parquet's magic bytes (the format puts PAR1 at both ends)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"PAR1"
    except OSError:
        return True  # let the reader say what is wrong


def read_histogram_and_metadata(path: str | os.PathLike) -> tuple[Histogram, HistogramFileMetadata]:
    """`read_histogram`, and the metadata planner wrote into the file (sources, excluded rows,
    time unit; empty if none), from one reading. Every part file's metadata is read and
    validated (a folder's excluded rows add up; a part built with other edges is refused by name)."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    where = str(path)
    if not os.path.exists(where):
        raise InputError(missing_text(where), where=where)
    if os.path.isfile(where) and not _starts_as_parquet(where):  # (a log given where its histogram belongs)
        raise InputError("is not a Parquet file; a histogram file is what `planner histogram LOG... -o FILE.parquet` "
                         "writes from logs", where=where)
    arrow_readable_names(where)
    try:
        dataset = ds.dataset(where, format="parquet")
        table = dataset.to_table()
        parts = {file: read_file_metadata(file) for file in dataset.files}
    except (pa.ArrowInvalid, OSError, ValueError) as exc:
        raise UnreadableHistogram(f"cannot read as a Parquet histogram file: {exc}", where=where) from None
    meta = combined(parts, where) if parts else HistogramFileMetadata()
    return histogram_from_table(table, where), meta


def write_histogram(hist: Histogram, path: str | os.PathLike, metadata: dict | None = None) -> None:
    """Write `hist` as a histogram file, all or nothing (temporary file, then rename)."""
    import pyarrow.parquet as pq

    # An open file, not the path: pyarrow takes a path only as UTF-8 text
    with atomic_output(path) as tmp, open(tmp, "wb") as sink:
        # dictionary pages pay only for the text column; for the numbers they cost time and size
        pq.write_table(histogram_table(hist, metadata), sink, compression="zstd", use_dictionary=["kind"])


def bin_tables() -> dict:
    """The bins as Arrow tables, for producing histogram files in SQL (README.md,
    "Histograms at scale"): `length_bins` and `fine_bins` (bin, lo, hi): lo <= n < hi;
    `total_bins` (bin, lo, hi): lo < prompt + output <= hi. A null bound is open (the
    last bins; the first total bin has no lower bound)."""
    import pyarrow as pa

    def left_closed(edges: np.ndarray):
        n = len(edges)
        hi = pa.array(np.append(edges[1:], 0), pa.int64(), mask=np.arange(n) == n - 1)
        return pa.table({"bin": pa.array(np.arange(n), pa.int32()), "lo": pa.array(edges, pa.int64()), "hi": hi})

    total_lo = pa.array(np.concatenate([[0], TOTAL_EDGES[:-1]]), pa.int64(), mask=np.arange(N_TOTAL_BINS) == 0)
    total_hi = pa.array(TOTAL_EDGES, pa.int64(), mask=np.arange(N_TOTAL_BINS) == N_TOTAL_BINS - 1)
    return {
        "length_bins": left_closed(LENGTH_EDGES),
        "total_bins": pa.table({"bin": pa.array(np.arange(N_TOTAL_BINS), pa.int32()), "lo": total_lo, "hi": total_hi}),
        "fine_bins": left_closed(FINE_EDGES),
    }
