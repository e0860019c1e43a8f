"""The histogram file: exact round trip, parts add, bad producers refused, the README's SQL, the
shipped sample, and quantiles within one bin of numpy."""

from __future__ import annotations

import dataclasses
import json
import re
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from clirun import run

from planner.errors import InputError
from planner.histogram import (
    FINE_EDGES,
    FINE_RELATIVE_WIDTH,
    LENGTH_EDGES,
    SUM_COLUMNS,
    TOTAL_EDGES,
    Histogram,
    fine_bin,
)
from planner.paged import token_profile
from planner.workload.accumulate import ArrivalCounter, CellAccumulator, to_histogram
from planner.workload.columns import resolve_columns
from planner.workload.histfile import (
    HISTOGRAM_FILE_COLUMNS,
    HISTOGRAM_FILE_METADATA_KEY,
    bin_tables,
    histogram_file_ddl,
    histogram_file_schema,
    histogram_from_table,
    histogram_table,
    read_histogram,
    read_histogram_and_metadata,
    write_histogram,
)
from planner.workload.ingest import ingest
from planner.workload.synth import generate

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "data" / "samples"


@pytest.fixture(scope="module")
def log():
    return generate("chat_long_tail", 5_000, seed=11)


def test_parquet_round_trip_is_exact(tmp_path, log):
    hist = log.histogram()
    write_histogram(hist, tmp_path / "h.parquet", {"sources": ["synthetic"]})
    back = read_histogram(tmp_path / "h.parquet")
    assert back == hist
    assert back.prompt_bin.dtype == np.int32 and back.sum_prompt_sq.dtype == np.int64
    assert read_histogram_and_metadata(tmp_path / "h.parquet")[1].sources == ["synthetic"]
    table = pq.read_table(tmp_path / "h.parquet")
    assert tuple(table.column_names) == HISTOGRAM_FILE_COLUMNS
    assert table.schema.equals(histogram_file_schema())
    no_times = Histogram.from_arrays(log.prompt_tokens, log.output_tokens)
    write_histogram(no_times, tmp_path / "n.parquet")
    assert read_histogram(tmp_path / "n.parquet") == no_times


def test_repeated_rows_from_parts_are_added(tmp_path, log):
    halves = [
        Histogram.from_arrays(
            log.prompt_tokens[s], log.output_tokens[s], log.timestamp_ms[s] / 1000
        )
        for s in (slice(0, 2_000), slice(2_000, None))
    ]
    folder = tmp_path / "parts"
    folder.mkdir()
    for i, half in enumerate(halves):
        pq.write_table(histogram_table(half), folder / f"part-{i}.parquet")
    (folder / "_SUCCESS").write_text("")  # what Spark leaves behind; ignored
    assert read_histogram(folder) == log.histogram()
    table = pa.concat_tables([histogram_table(h) for h in halves])
    assert histogram_from_table(table) == log.histogram()


def _bad(table: pa.Table, column: str, values) -> pa.Table:
    return table.set_column(
        table.column_names.index(column), column, pa.array(values, table.schema.field(column).type)
    )


def test_tables_no_bin_rule_could_produce_are_refused(log):
    table = histogram_table(log.histogram())
    n = table.num_rows
    with pytest.raises(InputError, match="no column"):
        histogram_from_table(table.drop_columns(["sum_output_sq"]))
    with pytest.raises(InputError, match="column 'kind'"):
        histogram_from_table(_bad(table, "kind", ["cells"] * n))
    with pytest.raises(InputError, match="outside 0"):
        histogram_from_table(
            _bad(
                table,
                "prompt_bin",
                [500 if v is not None else None for v in table["prompt_bin"].to_pylist()],
            )
        )
    # bins shifted by one, as a producer with side='left' would compute them
    shifted = [None if v is None else v + 1 for v in table["output_bin"].to_pylist()]
    with pytest.raises(InputError, match="sums lie outside its bins"):
        histogram_from_table(_bad(table, "output_bin", shifted))


def test_squares_and_products_outside_the_bins_are_refused(log):
    table = histogram_table(log.histogram())
    for column in ("sum_prompt_sq", "sum_output_sq", "sum_prompt_output"):
        halved = [None if v is None else v // 2 for v in table[column].to_pylist()]
        with pytest.raises(InputError, match="sums lie outside its bins"):
            histogram_from_table(_bad(table, column, halved))


def test_repeated_rows_whose_sum_passes_int64_are_refused():
    # one cell in two rows, each valid; together their sum of prompt² passes int64
    cell = Histogram.from_arrays(np.array([100_003]), np.array([10]))
    row = histogram_table(
        dataclasses.replace(
            cell,
            fine_count=cell.fine_count * 500_000_000,
            **{name: getattr(cell, name) * 500_000_000 for name in SUM_COLUMNS},
        )
    )
    with pytest.raises(InputError, match="passes the int64 range"):
        histogram_from_table(pa.concat_tables([row, row]), where="parts/")


def test_a_file_with_other_edges_is_refused(tmp_path, log):
    table = histogram_table(log.histogram())
    meta = json.loads(table.schema.metadata[HISTOGRAM_FILE_METADATA_KEY.encode()])
    meta["length_edges"] = meta["length_edges"][:-1]
    pq.write_table(
        table.replace_schema_metadata({HISTOGRAM_FILE_METADATA_KEY: json.dumps(meta)}),
        tmp_path / "h.parquet",
    )
    with pytest.raises(InputError, match="other bin edges"):
        read_histogram(tmp_path / "h.parquet")


def test_spark_ddl_names_every_column_in_order_with_its_type():
    assert histogram_file_ddl() == (
        "kind STRING, prompt_bin INT, output_bin INT, total_bin INT, count BIGINT, "
        "sum_prompt BIGINT, sum_output BIGINT, sum_prompt_sq BIGINT, sum_prompt_output BIGINT, "
        "sum_output_sq BIGINT, minute BIGINT, fine_bin INT"
    )


def test_a_file_of_the_first_format_is_refused_in_one_line(tmp_path, log):
    # what planner wrote before the fine marginals: cells and minutes, no fine_bin column
    table = histogram_table(log.histogram())
    old = table.filter(pc.is_in(table["kind"], pa.array(["cell", "minute"]))).drop_columns(["fine_bin"])
    pq.write_table(old, tmp_path / "old.hist.parquet")
    r = run("histogram", tmp_path / "old.hist.parquet", "-o", tmp_path / "new.hist.parquet")
    assert r.exit_code == 2
    assert r.stderr == (
        f"error: {tmp_path / 'old.hist.parquet'}: histogram file of the first format (no fine_bin "
        "column, so no fine length marginals); rebuild it from the logs with planner histogram\n"
    )
    assert not (tmp_path / "new.hist.parquet").exists()


def test_fine_rows_that_do_not_count_the_cells_are_refused(log):
    table = histogram_table(log.histogram())
    kinds = table["kind"].to_pylist()
    with pytest.raises(InputError, match="the 'total' rows do not count the cells' requests"):
        histogram_from_table(table.filter(pa.array([k != "total" for k in kinds])))
    # a prompt row moved to the next fine bin across a quarter-octave edge
    fine = table["fine_bin"].to_pylist()
    first = next(
        i for i, (k, f) in enumerate(zip(kinds, fine, strict=True))
        if k == "prompt" and FINE_EDGES[f + 1] in LENGTH_EDGES
    )
    moved = [f + 1 if i == first else f for i, f in enumerate(fine)]
    with pytest.raises(InputError, match="the 'prompt' rows do not count the cells' requests"):
        histogram_from_table(_bad(table, "fine_bin", moved))


def test_minute_rows_that_count_more_arrivals_than_requests_are_refused():
    # (found by the external campaign: one minute row set to 1,000 arrivals planned 16.67 req/s for 3 requests;
    # a minute row per total bin: three rows of one arrival, the first set to 1,000)
    hist = Histogram.from_arrays(np.array([100, 200, 3000]), np.array([10, 20, 30]), np.array([0.0, 30.0, 90.0]))
    table = histogram_table(hist)
    first_minute = table["kind"].to_pylist().index("minute")
    count = [1000 if i == first_minute else c for i, c in enumerate(table["count"].to_pylist())]
    with pytest.raises(InputError, match="the 'minute' rows count 1,002 arrivals but the cells hold 3 requests"):
        histogram_from_table(_bad(table, "count", count))


def _readme_sql() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Histograms at scale (Spark, Dask, DuckDB, SQL)", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```sql\n(.*?)```", section, re.S).group(1)


def test_the_readme_sql_builds_the_same_histogram(log):
    db = sqlite3.connect(":memory:")
    db.execute(
        "CREATE TABLE requests (prompt_tokens INTEGER, output_tokens INTEGER, timestamp_ms INTEGER)"
    )
    db.executemany(
        "INSERT INTO requests VALUES (?, ?, ?)",
        zip(
            log.prompt_tokens.tolist(),
            log.output_tokens.tolist(),
            log.timestamp_ms.tolist(),
            strict=True,
        ),
    )
    for name, table in bin_tables().items():
        db.execute(f"CREATE TABLE {name} (bin INTEGER, lo INTEGER, hi INTEGER)")
        db.executemany(
            f"INSERT INTO {name} VALUES (?, ?, ?)", zip(*table.to_pydict().values(), strict=True)
        )
    cursor = db.execute(_readme_sql())
    names = [d[0] for d in cursor.description]
    assert tuple(names) == HISTOGRAM_FILE_COLUMNS
    rows = cursor.fetchall()
    table = pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)})
    assert histogram_from_table(table) == log.histogram()


def test_shipped_sample_histogram_equals_a_fresh_build():
    """Its metadata too: a sample built before histograms recorded their logs' fingerprints let
    `planner histogram SAMPLE.hist.parquet SAMPLE.csv` count the log's requests twice."""
    from planner.workload.fingerprint import log_fingerprint
    from planner.workload.histfile import read_histogram_and_metadata

    fresh = ingest([SAMPLES / "azure_conv_2023_sample.csv"], resolve_columns("azure")).histogram
    assert fresh.requests == 19_366
    shipped, meta = read_histogram_and_metadata(SAMPLES / "azure_conv_2023_sample.hist.parquet")
    assert shipped == fresh
    assert meta.source_fingerprints == [log_fingerprint(SAMPLES / "azure_conv_2023_sample.csv", "csv")]
    assert (SAMPLES / "azure_conv_2023_sample.csv").stat().st_size <= 2 * 2**20


def test_fine_bins_refine_the_quarter_octaves_and_are_at_most_1_1_percent_wide():
    assert set(LENGTH_EDGES.tolist()) <= set(FINE_EDGES.tolist())
    lo, hi = FINE_EDGES[1:-1], FINE_EDGES[2:] - 1  # each bin's smallest and largest length
    assert ((hi - lo) / lo).max() == FINE_RELATIVE_WIDTH
    assert 0.0108 < FINE_RELATIVE_WIDTH < 0.0109  # 2**(1/64) - 1, rounded to integers
    assert FINE_EDGES[-1] == 2**24


def _assert_within_fine_bin(hist: Histogram, prompt: np.ndarray, output: np.ndarray) -> None:
    qs = [0.0, 0.01, 0.1, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0]
    for of, raw in (("prompt", prompt), ("output", output), ("total", prompt + output)):
        exact = np.quantile(raw, qs)
        estimate = hist.quantiles(of, qs)
        assert np.all(np.abs(estimate - exact) <= FINE_RELATIVE_WIDTH * exact), (of, estimate, exact)
        assert raw.max() <= hist.max_tokens(of) <= raw.max() * (1 + FINE_RELATIVE_WIDTH)
        if hist.max_is_exact(of):  # what a report then prints without "≤"
            assert hist.max_tokens(of) == raw.max()
        assert hist.mean_tokens(of) == pytest.approx(raw.mean(), rel=1e-12)


@pytest.mark.parametrize(
    ("name", "seed"), [("chat", 1), ("chat_long_tail", 2), ("rag", 3), ("code", 4)]
)
def test_quantiles_within_one_fine_bin_of_numpy(name, seed):
    log = generate(name, 4_000, seed=seed)
    _assert_within_fine_bin(log.histogram(), log.prompt_tokens, log.output_tokens)
    # selecting by total keeps the marginals exact: the served part below a context limit
    served = log.prompt_tokens + log.output_tokens <= 8_192
    _assert_within_fine_bin(
        log.histogram().select_total(at_most=8_192), log.prompt_tokens[served], log.output_tokens[served]
    )


@pytest.mark.parametrize("trace", ["azure_conv_2023_sample.csv", "azure_code_2023_sample.csv"])
def test_shipped_traces_quantiles_within_2_percent_of_numpy(trace):
    """Issue 16: p50/p90/p99 of prompt, output and total within 2% of numpy on the raw rows,
    and the prompt quantile the TTFT check reads (token_profile) too."""
    raw = pd.read_csv(SAMPLES / trace)
    prompt, output = raw["ContextTokens"].to_numpy(), raw["GeneratedTokens"].to_numpy()
    hist = ingest([SAMPLES / trace], resolve_columns("azure")).histogram
    assert hist.requests == len(raw)
    qs = [0.5, 0.9, 0.99]
    for of, lengths in (("prompt", prompt), ("output", output), ("total", prompt + output)):
        exact = np.quantile(lengths, qs)
        assert np.all(np.abs(hist.quantiles(of, qs) / exact - 1) <= 0.02), (of, hist.quantiles(of, qs), exact)
    for q in (0.5, 0.9, 0.99):
        ttft_prompt = token_profile(hist, prompt_quantile=q).prompt_quantile_tokens
        assert abs(ttft_prompt / np.quantile(prompt, q) - 1) <= 0.02
    _assert_within_fine_bin(hist, prompt, output)


def test_groups_of_identical_lengths_give_exact_quantiles_and_max():
    hist = Histogram.from_arrays(np.array([1000] * 50 + [9000] * 50), np.array([500] * 100))
    assert hist.quantiles("output", [0.5, 0.99]).tolist() == [500.0, 500.0]
    assert hist.max_tokens("prompt") == 9000
    assert hist.max_tokens("total") == 9500
    assert hist.quantiles("prompt", [0.0, 1.0]).tolist() == [1000.0, 9000.0]
    assert hist.max_is_exact("prompt") and hist.max_is_exact("total")


def test_a_maximum_among_several_lengths_of_one_fine_bin_is_an_upper_bound_and_says_so():
    hist = Histogram.from_arrays(np.array([1000, 9000, 9050]), np.array([500, 500, 500]))
    assert not hist.max_is_exact("prompt")
    assert 9050 <= hist.max_tokens("prompt") <= 9050 * (1 + FINE_RELATIVE_WIDTH)


def test_groups_too_large_for_int64_products_stay_exact():
    # 3M requests of one length: n·Σx² is past int64, and in floats n·Σx² − (Σx)² leaves a
    # rounding residue that would widen the group; the small group takes the int64 path
    n = 3_000_017  # with total 250,001 the float residue is +67,108,864: max would read 250,005
    prompt = np.concatenate([np.full(n, 125_001), np.full(10, 1_000)])
    output = np.concatenate([np.full(n, 125_000), np.full(10, 500)])
    cells = CellAccumulator()  # (Histogram.from_arrays would take seconds on 3M rows)
    cells.add(prompt, output)
    hist = to_histogram(cells, ArrivalCounter())
    assert hist.quantiles("total", [0.0, 0.5, 1.0]).tolist() == [1_500.0, 250_001.0, 250_001.0]
    assert hist.max_tokens("total") == 250_001
    assert hist.max_tokens("prompt") == 125_001


def test_a_length_bin_whose_sums_pass_int64_across_cells_stays_exact():
    # Two cells of one prompt bin [92,682, 110,218), other output bins, each within int64;
    # their sums of prompt² add up past it (2 × 5e8 × ~1.1e10). Wrapped, the bin's
    # variance would read as 0 and squeeze its range to the mean (105,001.5).
    one = Histogram.from_arrays(np.array([100_003, 110_000]), np.array([10, 5_000]))
    requests_per_cell = 500_000_000
    scaled = dataclasses.replace(
        one,
        fine_count=one.fine_count * requests_per_cell,
        **{name: getattr(one, name) * requests_per_cell for name in SUM_COLUMNS},
    )
    assert scaled.sum_prompt_sq.sum(dtype=np.float64) > 2.0**63
    # each request is placed in its fine bin, within the quarter-octave bin's range
    top_fine = int(fine_bin(np.array([110_000]))[0])
    assert scaled.max_tokens("prompt") == min(FINE_EDGES[top_fine + 1] - 1, 110_217)
    low_fine = int(fine_bin(np.array([100_003]))[0])
    assert scaled.quantiles("prompt", [0.0])[0] == pytest.approx(FINE_EDGES[low_fine], abs=0.5)
    # the means add the cells in Python integers too
    exact = requests_per_cell * (100_003**2 + 110_000**2) / (2 * requests_per_cell)
    assert scaled.mean("sum_prompt_sq") == exact
    assert scaled.requests == 2 * requests_per_cell


def test_share_above_is_exact_at_total_edges(log):
    hist = log.histogram()
    total = log.prompt_tokens + log.output_tokens
    for threshold in (8_192, 32_768, 131_072):
        assert threshold in TOTAL_EDGES
        assert hist.share_above(threshold) == (total > threshold).mean()


def test_total_bins_whose_squared_totals_pass_int64_stay_exact():
    # each cell's sums fit int64, but Σ(prompt + output)² of the total bin does not: the
    # total's groups add the cells' sums in Python integers (this once raised OverflowError)
    hist = Histogram.from_arrays(
        np.array([2_000_000_000, 2_000_000_001]), np.array([2_000_000_000, 2_000_000_000])
    )
    # Samuelson narrows the total bin to [4,000,000,000, 4,000,000,001]; two requests spread over it
    assert hist.quantiles("total", [0.0, 1.0]).tolist() == [4_000_000_000.25, 4_000_000_000.75]
    assert hist.max_tokens("total") == 4_000_000_001
