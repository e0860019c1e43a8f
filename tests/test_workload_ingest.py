"""Logs → histograms: exact counts and sums, formats agree, garbage counted per reason, merges add."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from planner.errors import InputError
from planner.histogram import (
    LENGTH_EDGES,
    SUM_COLUMNS,
    TOTAL_EDGES,
    Histogram,
    length_bin,
    total_bin,
)
from planner.workload.columns import PRESETS, resolve_columns
from planner.workload.histfile import read_histogram
from planner.workload.ingest import ingest, write_histogram_file
from planner.workload.synth import generate

LOGS = Path(__file__).parent / "fixtures" / "logs"
PLANNER = PRESETS["planner"]


def cells(hist: Histogram) -> dict[tuple[int, int], dict[str, int]]:
    """{(prompt_bin, output_bin): sums} for the hand-made log (its totals have one bin each)."""
    return {
        (int(p), int(o)): {n: int(getattr(hist, n)[i]) for n in SUM_COLUMNS}
        for i, (p, o) in enumerate(zip(hist.prompt_bin, hist.output_bin, strict=True))
    }


def test_handmade_log_exact_counts_sums_and_minutes():
    result = ingest([LOGS / "handmade.csv"], PLANNER)
    hist = result.histogram
    assert hist.requests == 6
    assert result.excluded_rows == {"null": 0, "negative": 0, "non_numeric": 0, "too_long": 0, "empty_prompt": 0}
    # the two (100, 20) requests share a cell; sums are exact, not bin centres
    got = cells(hist)
    assert got[int(length_bin(100)), int(length_bin(20))] == {
        "count": 2,
        "sum_prompt": 200,
        "sum_output": 40,
        "sum_prompt_sq": 20_000,
        "sum_prompt_output": 4_000,
        "sum_output_sq": 800,
    }
    assert got[int(length_bin(40_000)), int(length_bin(1_000))] == {
        "count": 1,
        "sum_prompt": 40_000,
        "sum_output": 1_000,
        "sum_prompt_sq": 1_600_000_000,
        "sum_prompt_output": 40_000_000,
        "sum_output_sq": 1_000_000,
    }
    assert int(hist.sum_prompt.sum()) == 100 + 100 + 5000 + 1 + 40_000 + 7
    assert int(hist.sum_output.sum()) == 20 + 20 + 300 + 1 + 1000 + 7
    # bins follow the documented rules
    assert LENGTH_EDGES[length_bin(100)] <= 100 < LENGTH_EDGES[length_bin(100) + 1]
    assert TOTAL_EDGES[total_bin(41_000) - 1] < 41_000 <= TOTAL_EDGES[total_bin(41_000)]
    # minute = floor(epoch s / 60): 1699999980000 ms is exactly minute 28333333
    assert hist.minute.tolist() == [28_333_333, 28_333_334, 28_333_335]
    assert hist.minute_count.tolist() == [3, 1, 2]
    assert result.time_unit_assumed == "ms"


def _rows() -> dict[str, np.ndarray]:
    log = generate("chat_long_tail", 3_000, seed=5)
    return {
        "timestamp_ms": log.timestamp_ms,
        "prompt_tokens": log.prompt_tokens,
        "output_tokens": log.output_tokens,
    }


def test_csv_parquet_jsonl_and_partitioned_folder_give_identical_histograms(tmp_path):
    rows = _rows()
    table = pa.table(rows)
    pq.write_table(table, tmp_path / "log.parquet", row_group_size=1000)
    pacsv.write_csv(table, tmp_path / "log.csv")
    with (tmp_path / "log.jsonl").open("w") as f:
        for t, p, o in zip(*rows.values(), strict=True):
            f.write(
                json.dumps(
                    {"timestamp_ms": int(t), "prompt_tokens": int(p), "output_tokens": int(o)}
                )
                + "\n"
            )
    folder = tmp_path / "parts"
    for part in range(3):  # hive-partitioned folder of Parquet files
        (folder / f"part={part}").mkdir(parents=True)
        pq.write_table(table.slice(part * 1000, 1000), folder / f"part={part}" / "data.parquet")
    expected = Histogram.from_arrays(
        rows["prompt_tokens"], rows["output_tokens"], rows["timestamp_ms"] / 1000
    )
    for name in ("log.parquet", "log.csv", "log.jsonl", "parts"):
        assert ingest([tmp_path / name], PLANNER).histogram == expected, name


def test_folder_file_lacking_the_time_column_counts_its_rows_as_null(tmp_path):
    # The folder's columns are its files' together; a file without the time column has it
    # read as nulls.
    rows = _rows()
    table = pa.table(rows)
    (tmp_path / "parts").mkdir()
    pq.write_table(table.slice(0, 1000), tmp_path / "parts" / "a.parquet")
    pq.write_table(table.slice(1000, 500).drop(["timestamp_ms"]), tmp_path / "parts" / "b.parquet")
    result = ingest([tmp_path / "parts"], PLANNER)
    timed = table.slice(0, 1000).to_pydict()
    assert result.histogram == Histogram.from_arrays(
        np.array(timed["prompt_tokens"]),
        np.array(timed["output_tokens"]),
        np.array(timed["timestamp_ms"]) / 1000,
    )
    assert result.excluded_rows == {"null": 500, "negative": 0, "non_numeric": 0, "too_long": 0, "empty_prompt": 0}
    assert any(
        "b.parquet: no column timestamp_ms; its rows are counted as null" in n for n in result.notes
    )


def _write_part(table: pa.Table, path: Path) -> None:
    if path.suffix == ".parquet":
        pq.write_table(table, path)
    elif path.suffix == ".csv":
        pacsv.write_csv(table, path)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in table.to_pylist()))


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
@pytest.mark.parametrize("untimed", ["a", "b"])
def test_a_folder_reads_the_same_whichever_of_its_files_lacks_the_time_column(tmp_path, fmt, untimed):
    """400 rows with times and 400 without, in a.EXT and b.EXT either way round: the folder's columns
    were its first file's, so one order read the times and counted the untimed file's rows as null,
    and the other read no times at all, without a word. Now both orders give the first answer, and
    a note names the file without the column."""
    rows = pa.table(_rows()).slice(0, 800)
    folder = tmp_path / "logs"
    folder.mkdir()
    timed = "b" if untimed == "a" else "a"
    _write_part(rows.slice(0, 400), folder / f"{timed}.{fmt}")
    _write_part(rows.slice(400, 400).drop(["timestamp_ms"]), folder / f"{untimed}.{fmt}")
    result = ingest([folder], PLANNER)
    first = rows.slice(0, 400).to_pydict()
    assert result.histogram == Histogram.from_arrays(
        np.array(first["prompt_tokens"]), np.array(first["output_tokens"]), np.array(first["timestamp_ms"]) / 1000
    )
    assert result.excluded_rows == {"null": 400, "negative": 0, "non_numeric": 0, "too_long": 0, "empty_prompt": 0}
    assert result.notes == (f"{folder / f'{untimed}.{fmt}'}: no column timestamp_ms; its rows are counted as null "
                            "(excluded)",)
    # without times, every row of both files counts
    assert ingest([folder], resolve_columns(no_time=True)).histogram.requests == 800


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_a_column_only_a_later_file_has_is_read(tmp_path, fmt):
    """The prompt column named by --prompt-col is in b only: the folder has it (a's rows count as
    null), where the first file's columns alone refused the folder for lacking it."""
    rows = pa.table(_rows()).slice(0, 200).drop(["timestamp_ms"])
    folder = tmp_path / "logs"
    folder.mkdir()
    _write_part(rows.slice(0, 100), folder / f"a.{fmt}")
    _write_part(rows.slice(100, 100).rename_columns(["prompt", "output_tokens"]), folder / f"b.{fmt}")
    result = ingest([folder], resolve_columns(prompt_col="prompt"))
    assert result.histogram.requests == 100
    assert result.excluded_rows["null"] == 100
    assert result.notes == (f"{folder / f'a.{fmt}'}: no column prompt; its rows are counted as null (excluded)",)


def test_a_jsonl_file_of_broken_lines_in_a_folder_is_counted_not_said_to_lack_columns(tmp_path):
    """No line of b.jsonl is an object: its rows are non_numeric, and it lacks no column (it has none
    to lack); a.jsonl's rows count."""
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"prompt_tokens": 100, "output_tokens": 10}\n')
    (folder / "b.jsonl").write_text("not json\n{broken\n")
    result = ingest([folder], PLANNER)
    assert result.histogram.requests == 1
    assert result.excluded_rows == {"null": 0, "negative": 0, "non_numeric": 2, "too_long": 0, "empty_prompt": 0}
    assert result.notes == ()


def test_folder_files_are_read_in_their_own_column_types(tmp_path):
    # a later file whose prompt column is text with junk: its junk rows count as
    # non_numeric, the rest are read, whether or not the file also lacks a column
    rows = _rows()
    table = pa.table(rows)
    (tmp_path / "parts").mkdir()
    pq.write_table(table.slice(0, 1000), tmp_path / "parts" / "a.parquet")
    for name, drop in (("b", []), ("c", ["timestamp_ms"])):
        part = table.slice(1000 if name == "b" else 1500, 500)
        text = [str(v) for v in part["prompt_tokens"].to_pylist()]
        text[:3] = ["x", "", "1.5"]
        column = part.column_names.index("prompt_tokens")
        part = part.set_column(column, "prompt_tokens", pa.array(text)).drop(drop)
        pq.write_table(part, tmp_path / "parts" / f"{name}.parquet")
    result = ingest([tmp_path / "parts"], PLANNER)
    # b: "" null, "x" and "1.5" non_numeric; c: every row null (no time, which outranks)
    assert result.excluded_rows == {"null": 1 + 500, "negative": 0, "non_numeric": 2, "too_long": 0, "empty_prompt": 0}
    assert result.histogram.requests == 1000 + 497


def test_csv_garbage_rows_are_counted_per_reason():
    result = ingest([LOGS / "garbage.csv"], PLANNER)
    assert result.histogram.requests == 2
    # null: an empty count, a row with too few fields, an empty timestamp;
    # negative: -5 and -1; non_numeric: 'abc', 12.5, 'notatime'
    assert result.excluded_rows == {"null": 3, "negative": 2, "non_numeric": 3, "too_long": 0, "empty_prompt": 0}
    assert result.files[0].rows_read == 10


def test_jsonl_garbage_rows_are_counted_per_reason():
    result = ingest([LOGS / "garbage.jsonl"], PLANNER)
    # kept: the first row and {"prompt_tokens": "300", "output_tokens": 30.0} (whole numbers)
    assert result.histogram.requests == 2
    assert int(result.histogram.sum_prompt.sum()) == 400
    # null: null, a missing key; negative: -5, -2;
    # non_numeric: "abc", 12.5, true, a list, a broken line
    assert result.excluded_rows == {"null": 2, "negative": 2, "non_numeric": 5, "too_long": 0, "empty_prompt": 0}


def test_log_split_in_parts_histogrammed_and_merged_equals_one_pass(tmp_path):
    rows = _rows()
    table = pa.table(rows)
    whole = ingest_table(table, tmp_path / "whole.parquet")
    bounds = [0, 700, 1900, 3000]
    part_files = []
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        log = tmp_path / f"part{i}.parquet"
        pq.write_table(table.slice(a, b - a), log)
        out = tmp_path / f"part{i}.hist.parquet"
        write_histogram_file(ingest([log], PLANNER), out)
        part_files.append(out)
    merged = ingest(part_files, PLANNER).histogram
    assert merged == whole
    # Histogram.merge of the parts agrees too, and so does a mix of logs and histogram files
    parts = [read_histogram(f) for f in part_files]
    assert parts[0].merge(parts[1]).merge(parts[2]) == whole
    assert (
        ingest([part_files[0], tmp_path / "part1.parquet", part_files[2]], PLANNER).histogram
        == whole
    )


def ingest_table(table: pa.Table, path: Path) -> Histogram:
    pq.write_table(table, path)
    return ingest([path], PLANNER).histogram


def test_presets_read_the_public_traces_columns_and_time_units():
    azure = ingest([LOGS / "azure_head.csv"], resolve_columns("azure"))
    assert azure.histogram.requests == 4
    assert azure.time_unit_assumed == "datetime"
    assert azure.histogram.minute_count.tolist() == [3, 1]  # 18:15 and 18:16
    mooncake = ingest([LOGS / "mooncake_head.jsonl"], resolve_columns("mooncake"))
    assert mooncake.time_unit_assumed == "ms"  # relative milliseconds, from the preset
    assert mooncake.histogram.minute.tolist() == [0, 1]
    assert mooncake.histogram.minute_count.tolist() == [2, 1]
    burst = ingest([LOGS / "burstgpt_head.csv"], resolve_columns("burstgpt"))
    assert burst.time_unit_assumed == "s"
    assert burst.histogram.minute.tolist() == [0, 1]
    assert int(burst.histogram.sum_prompt.sum()) == 472 + 1087 + 417


def test_naming_a_presets_own_time_column_keeps_its_unit():
    """--preset mooncake --time-col timestamp (or a scenario's preset: mooncake with columns: {time:
    timestamp}) dropped the preset's milliseconds and guessed seconds: the real trace's hour read as
    41 days and its peak 25× too low, without a word. Naming the column a preset reads already is
    the preset; another column is the magnitude's (which refuses relative times, below)."""
    own = resolve_columns("mooncake", time_col="timestamp")
    assert own == PRESETS["mooncake"]  # its unit, ms, and its name: no column differs
    read = ingest([LOGS / "mooncake_head.jsonl"], own)
    assert read.time_unit_assumed == "ms"
    assert read.histogram.minute.tolist() == [0, 1] and read.histogram.minute_count.tolist() == [2, 1]
    assert read.warnings == () and read.notes == ()
    # the default preset's own time column, named: still its milliseconds, now required
    assert resolve_columns(time_col="timestamp_ms") == dataclasses.replace(PRESETS["planner"], time_required=True)
    other = resolve_columns("mooncake", time_col="arrival")
    assert (other.time, other.time_unit, other.name) == ("arrival", None, "mooncake (overridden)")
    assert resolve_columns("mooncake", time_col="arrival", time_unit="ms").time_unit == "ms"
    assert resolve_columns("mooncake", time_col="timestamp", time_unit="s").time_unit == "s"  # stated wins


def test_relative_numbers_without_a_unit_are_refused_with_both_readings():
    """Relative times (median before 2020 as epoch seconds) carry no magnitude of their unit: Mooncake's
    milliseconds read as seconds plan 1/1000 of the peak. The magnitude rule guessed seconds and said so
    in a note; a plan made from it, or a histogram file written, kept the 1000× error. Refused, with
    what each reading gives and how to state it; a stated unit reads them."""
    columns = resolve_columns(None, "input_length", "output_length", "timestamp")
    with pytest.raises(InputError) as err:
        ingest([LOGS / "mooncake_head.jsonl"], columns)
    assert str(err.value) == (
        f"{LOGS / 'mooncake_head.jsonl'}: column 'timestamp': its times count from the log's start (median 6e+04, "
        "before 2020 as epoch seconds, or epoch seconds older than any LLM serving log) and no unit is stated, so they may be seconds or milliseconds, 1000× apart "
        "in every rate planned for: the first 3 times read span 16.7 hours (about 0.0000500 requests/s) as seconds, "
        "60 s (about 0.0500 requests/s) as milliseconds; state which (--time-unit s or --time-unit ms)")
    forced = ingest(
        [LOGS / "mooncake_head.jsonl"],
        resolve_columns(None, "input_length", "output_length", "timestamp", time_unit="ms"),
    )
    assert forced.histogram.minute.tolist() == [0, 1]
    assert forced.time_unit_assumed == "ms" and forced.warnings == ()
    # BurstGPT's relative seconds, stated by its preset: read, nothing to warn of
    assert ingest([LOGS / "burstgpt_head.csv"], resolve_columns("burstgpt")).warnings == ()


def test_epoch_numbers_are_read_in_their_magnitude_s_unit_with_a_note(tmp_path):
    """Epoch times tell their unit by magnitude (~1.7e9 s, ~1.7e12 ms): guessed, and nothing is doubted
    (another unit would put them in 1970 or past 2200, which is refused); a note says seconds were read,
    which milliseconds from a trace's start past its 18th day read as too."""
    path = tmp_path / "epoch_s.csv"
    path.write_text("p,o,t\n" + "".join(f"100,10,{1_700_000_000 + i}\n" for i in range(600)))
    result = ingest([path], resolve_columns(None, "p", "o", "t"))
    assert result.time_unit_assumed == "s"
    assert result.files[0].time.reason == "magnitude: median value 1.7e+09 < 1e+11"
    assert result.notes == (f"{path}: timestamps read as epoch seconds (magnitude: median value 1.7e+09 < 1e+11); "
                            "if they are milliseconds counted from the log's start, say so (--time-unit ms)",)
    assert result.warnings == ()
    assert result.histogram.minute.tolist() == list(range(28_333_333, 28_333_344))  # 2023-11-14 22:13:20 on, 600 s


def test_negative_numbers_are_not_read_as_epoch_seconds_by_their_size(tmp_path):
    """-1.7e9 (1916 as epoch seconds) was read as this decade's epoch seconds, by the median of the
    values' sizes, with only a note (an outside probe): numbers before 2020, relative ones, ask for a unit."""
    path = tmp_path / "negative.csv"
    path.write_text("p,o,t\n" + "".join(f"100,10,{-1_700_000_000 + i}\n" for i in range(600)))
    with pytest.raises(InputError, match=r"column 't': its times count from the log's start \(median -1\.7e\+09, before "
                                         r"2020 as epoch seconds, or epoch seconds older than any LLM serving log\) and "
                                         r"no unit is stated"):
        ingest([path], resolve_columns(None, "p", "o", "t"))
    # with a unit stated, negated epoch milliseconds are still doubted by their size, as they were
    millis = tmp_path / "negative_ms.csv"
    millis.write_text("p,o,t\n" + "".join(f"100,10,{-1_700_000_000_000 + 200 * i}\n" for i in range(600)))
    stated = ingest([millis], resolve_columns(None, "p", "o", "t", time_unit="s"))
    assert len(stated.warnings) == 1 and "have the magnitude of epoch milliseconds" in stated.warnings[0]


def test_relative_milliseconds_past_a_traces_11th_day_are_refused_too(tmp_path):
    """(A reading: 4 hours of relative milliseconds from day 12, 1.04e9, read as 5.5 months of 2002 at 1/1000
    of their rate, with nothing said: the refusal stopped at 2000 as epoch seconds. A second: stated as
    milliseconds, as the refusal asks, they were doubted as 2002's seconds; from day 30, read as 2052.)"""
    for day, when in ((12, r"before 2020 as epoch seconds, or epoch seconds older than any LLM serving log"),
                      (30, r"after today as epoch seconds")):
        path = tmp_path / f"day{day}.csv"
        start = day * 86_400_000
        path.write_text("p,o,t\n" + "".join(f"100,10,{start + 720 * i}\n" for i in range(20_000)))
        with pytest.raises(InputError, match=rf"column 't': its times count from the log's start \(median "
                                             rf"[0-9.e+]+, {when}\) and no unit is stated"):
            ingest([path], resolve_columns(None, "p", "o", "t"))
        stated = ingest([path], resolve_columns(None, "p", "o", "t", time_unit="ms"))
        assert stated.histogram.minute.size == 240 and stated.warnings == ()


@pytest.mark.parametrize(("unit", "values", "stated", "span", "rate", "dates", "other"), [
    # epoch seconds in the planner preset's timestamp_ms: 1970-01-20, every rate 1000× too high
    ("ms", [1_700_000_000 + i for i in range(600)], "milliseconds", "0.599 s", "1,000",
     "1970-01-20 16:13 to 1970-01-20 16:13", "seconds"),
    # epoch milliseconds stated as microseconds: the same 1000×
    ("us", [1_700_000_000_000 + 1000 * i for i in range(600)], "microseconds", "0.599 s", "1,000",
     "1970-01-20 16:13 to 1970-01-20 16:13", "milliseconds"),
])
def test_a_stated_unit_that_puts_epoch_times_in_1970_is_warned_of(tmp_path, unit, values, stated, span, rate, dates,
                                                                   other):
    """A unit stated by a preset or --time-unit was never checked: epoch seconds in a column stated as
    milliseconds landed in January 1970 and planned 1000× the traffic, with no note at all. The file's
    warning gives both readings over all its rows and the unit to state; the right unit reads quietly."""
    path = tmp_path / "log.csv"
    path.write_text("prompt_tokens,output_tokens,timestamp_ms\n" + "".join(f"100,10,{v}\n" for v in values))
    result = ingest([path], resolve_columns(time_unit=unit))
    assert result.time_unit_assumed == unit
    assert result.warnings == (
        f"{path}: column 'timestamp_ms' is read in {stated}, the unit stated (by the preset, or --time-unit), which "
        f"puts its times from {dates} UTC, {span} (about {rate} requests/s); but its values have the magnitude of "
        f"epoch {other} (median 1.7e+{'09' if other == 'seconds' else '12'}), which put them from 2023-11-14 22:13 "
        f"to 2023-11-14 22:23 UTC, 10.0 minutes (about 1.00 requests/s). If they are {other}, state it "
        f"(--time-unit {'s' if other == 'seconds' else 'ms'})",)
    assert result.notes == ()
    right = ingest([path], resolve_columns(time_unit="s" if other == "seconds" else "ms"))
    assert right.warnings == () and right.histogram.minute[0] == 28_333_333


def test_default_time_column_is_optional_and_no_time_drops_rates(tmp_path):
    path = tmp_path / "no_time.csv"
    path.write_text("prompt_tokens,output_tokens\n10,5\n20,6\n")
    result = ingest([path], PLANNER)
    assert result.histogram.requests == 2
    assert result.histogram.minute.size == 0
    assert result.time_unit_assumed is None
    no_time = ingest([LOGS / "handmade.csv"], resolve_columns(no_time=True))
    assert no_time.histogram.minute.size == 0
    # A histogram file's arrivals too (an outside probe: `histogram --no-time` of one printed its rates
    # and kept its minutes), alone or beside a log; its requests all count.
    timed = ingest([LOGS / "handmade.csv"], PLANNER)
    assert timed.histogram.minute.size > 0
    hist_file = tmp_path / "timed.hist.parquet"
    write_histogram_file(timed, hist_file)
    for inputs in ([hist_file], [hist_file, path]):
        untimed = ingest(inputs, resolve_columns(no_time=True))
        assert untimed.histogram.minute.size == 0 and untimed.histogram.minute_bin_key.size == 0
        assert untimed.histogram.requests == timed.histogram.requests + (2 if path in inputs else 0)
        assert not any(f.timed for f in untimed.files)
    assert ingest([hist_file], PLANNER).histogram.minute.tolist() == timed.histogram.minute.tolist()


def test_missing_column_error_lists_the_columns_and_suggests_a_preset():
    with pytest.raises(InputError) as err:
        ingest([LOGS / "azure_head.csv"], PLANNER)
    message = str(err.value)
    assert "azure_head.csv" in message
    assert "no column 'prompt_tokens'" in message
    assert "TIMESTAMP, ContextTokens, GeneratedTokens" in message
    assert "--preset azure" in message


def test_explicit_time_column_must_exist():
    with pytest.raises(InputError, match="no column 'when'"):
        ingest([LOGS / "handmade.csv"], resolve_columns(time_col="when"))


def test_lengths_beyond_the_lookup_tables_bin_like_the_definition(tmp_path):
    prompt = np.array([2, 1, 131_072, 131_073, 2**24 - 1, 2**24, 2**24 + 5, 50_000_000])
    output = np.array([1, 0, 131_072, 5, 2**20, 0, 3, 3])
    path = tmp_path / "long.parquet"
    pq.write_table(pa.table({"prompt_tokens": prompt, "output_tokens": output}), path)
    result = ingest([path], PLANNER)
    # 2**24 itself is in the open bin; 2**24 - 1 prompt tokens and 2**20 output are each within it, their
    # sum is not: the total lengths end there too
    kept = [0, 1, 2, 3, 5]
    assert result.histogram == Histogram.from_arrays(prompt[kept], output[kept])
    assert result.excluded_rows["too_long"] == 3
    assert result.files[0].problems_by_column == {"prompt_tokens": 2, "output_tokens": 0,
                                                  "prompt_tokens + output_tokens": 1}


def test_a_request_whose_prompt_and_output_pass_the_longest_total_is_too_long(tmp_path):
    """Each count within 2**24 and their sum past it: such totals fell past the last total edge, and a
    log of them read a total p50 of 45M tokens, above any row's sum."""
    prompt = np.full(200, 9_000_000)
    output = np.arange(8_000_000, 8_000_200)
    path = tmp_path / "huge.parquet"
    pq.write_table(pa.table({"prompt_tokens": np.r_[prompt, 1000], "output_tokens": np.r_[output, 100]}), path)
    result = ingest([path], PLANNER)
    assert result.excluded_rows["too_long"] == 200
    assert result.histogram == Histogram.from_arrays(np.array([1000]), np.array([100]))


def test_a_log_without_the_time_column_but_with_one_named_like_it_is_noted(tmp_path):
    """A `timestamp` header where the preset reads `timestamp_ms` read as a log without times, silently."""
    path = tmp_path / "log.csv"
    path.write_text("prompt_tokens,output_tokens,timestamp\n10,5,1700000000000\n20,6,1700000060000\n")
    result = ingest([path], PLANNER)
    assert result.histogram.minute.size == 0
    assert result.notes == (f"{path}: no column 'timestamp_ms' (arrival times), so no arrival rate is read from it; "
                            "it has 'timestamp': to read it as its time, name it (--time-col timestamp)",)
    # not a word of a name that says arrival time ('date' in 'candidate'), nor a latency's
    quiet = tmp_path / "quiet.csv"
    quiet.write_text("prompt_tokens,output_tokens,candidate_id,response_time_ms,first_token_time,inference_time,"
                     "queue_time\n10,5,a,3,4,5,6\n")
    assert ingest([quiet], PLANNER).notes == ()
    two = tmp_path / "two.csv"
    two.write_text("prompt_tokens,output_tokens,createdAt,request_start_time\n10,5,1,2\n")
    assert ingest([two], PLANNER).notes == (f"{two}: no column 'timestamp_ms' (arrival times), so no arrival rate is "
                                            "read from it; it has 'createdAt', 'request_start_time': to read one as "
                                            "its time, name it (--time-col)",)


def test_int64_overflow_is_refused_not_wrapped(tmp_path):
    # 2**15 rows at the longest length a row may have (its prompt alone) fill one cell's sum of squares past 2**63
    big = np.full(2**15 + 1, 2**24, np.int64)
    path = tmp_path / "huge.parquet"
    pq.write_table(pa.table({"prompt_tokens": big, "output_tokens": np.zeros_like(big)}), path)
    with pytest.raises(InputError, match="int64 range"):
        ingest([path], PLANNER)


class _Recorder:
    """A progress sink that keeps what ingest told it."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def start(self, label, total, unit) -> None:
        self.calls.append(("start", label, total, unit))

    def advance(self, position) -> None:
        self.calls.append(("advance", position))


def _positions(calls: list[tuple], label: str) -> tuple[tuple, list[int]]:
    """The start call of log `label` and the positions reported after it, up to the next log."""
    i = next(k for k, c in enumerate(calls) if c[:2] == ("start", label))
    rest = list(itertools.takewhile(lambda c: c[0] == "advance", calls[i + 1 :]))
    return calls[i], [c[1] for c in rest]


def test_progress_totals_are_parquet_rows_and_text_bytes_and_end_at_the_total(tmp_path):
    table = generate("chat", 300_000, seed=3).to_table()
    pq.write_table(table, tmp_path / "log.parquet", row_group_size=50_000)
    pacsv.write_csv(table, tmp_path / "log.csv")
    recorder = _Recorder()
    ingest([tmp_path / "log.parquet", tmp_path / "log.csv"], PLANNER, progress=recorder)
    start, positions = _positions(recorder.calls, "log.parquet")
    assert start[2:] == (300_000, "rows")
    assert positions[-1] == 300_000 and positions == sorted(positions) and len(positions) > 2
    size = (tmp_path / "log.csv").stat().st_size
    start, positions = _positions(recorder.calls, "log.csv")
    assert start[2:] == (size, "B")
    # rows × the mean row length of the head: below the total until the log is done
    assert positions[-1] == size and positions == sorted(positions) and positions[-2] < size
    assert positions[-2] > 0.5 * size
