"""Requests counted twice: rows that repeat other rows' arrival instant and token counts in ticks of
the log's clock where every request comes twice or more (a log exported twice into one file, exports
that overlap, whatever their order, sorting or time format) are warned of, with their count and the
files they repeat; real traces, a coarse clock's chance repeats and untimed logs are not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from clirun import run
from scenario_files import write_scenario

from planner.workload.columns import resolve_columns
from planner.workload.ingest import ingest
from planner.workload.repeats import REPEATS_SAID, RepeatCounter, instants_us, row_keys

SAMPLES = Path(__file__).resolve().parent.parent / "data" / "samples"
CONV, CODE = SAMPLES / "azure_conv_2023_sample.csv", SAMPLES / "azure_code_2023_sample.csv"
AZURE = resolve_columns("azure")


def _rows(path: Path) -> tuple[str, list[str]]:
    header, *rows = path.read_text(encoding="utf-8").splitlines()
    return header, rows


def _log(path: Path, header: str, rows: list[str]) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def _said(path, rows: int, share: str, of=None) -> str:
    where, how = (("another of its rows", "a log exported or appended twice") if of is None else
                  (of, "exports that overlap (or a log given beside one that holds it)"))
    return (f"{path}: {rows:,} rows ({share}) repeat {where} exactly (arrival instant and token counts), each tick "
            f"of the clock copied whole, as copies are: {how} {'counts' if of is None else 'count'} those requests twice, "
            "and every rate here, the peak's with them; if they are not distinct requests, remove the repeats "
            "(SELECT DISTINCT) and plan again")


def _azure(path: Path) -> pd.DataFrame:
    frame = pd.read_csv(path)
    return frame.assign(TIMESTAMP=pd.to_datetime(frame.TIMESTAMP))


def test_real_traces_repeat_no_row():
    """Azure's 2023 traces (times to 0.1 µs) hold no exact repeat: nothing is said of them."""
    for path in (CONV, CODE):
        result = ingest([path], AZURE)
        assert result.repeats == () and result.warnings == ()


def test_a_log_exported_twice_into_one_file_is_warned_of_with_its_count(tmp_path):
    header, rows = _rows(CONV)
    once = ingest([CONV], AZURE)
    doubled = ingest([_log(tmp_path / "doubled.csv", header, rows + rows)], AZURE)
    n = once.histogram.requests
    assert doubled.histogram.requests == 2 * n  # counted twice: what the warning is for
    assert doubled.histogram.minute_count.max() == 2 * once.histogram.minute_count.max()
    assert doubled.repeats == (_said(tmp_path / "doubled.csv", n, "50.0%"),)
    assert doubled.repeats[0] in doubled.warnings


def test_overlapping_exports_are_told_in_either_order(tmp_path):
    header, rows = _rows(CONV)
    first = _log(tmp_path / "monday.csv", header, rows[:5000])
    second = _log(tmp_path / "monday_late.csv", header, rows[4500:9000])
    assert ingest([first, second], AZURE).repeats == (_said(second, 500, "11.1%", of=f"rows of {first}"),)
    assert ingest([second, first], AZURE).repeats == (_said(first, 500, "10.0%", of=f"rows of {second}"),)
    apart = _log(tmp_path / "tuesday.csv", header, rows[9000:])
    assert ingest([first, apart], AZURE).repeats == ()
    # a day inside a week shuffled (a reading: the day read first was not said, the week first was)
    week = _log(tmp_path / "week.csv", header, list(np.random.default_rng(3).permutation(rows)))
    day = _log(tmp_path / "day.csv", header, rows[:3000])
    assert ingest([day, week], AZURE).repeats == (_said(week, 3000, "15.5%", of=f"rows of {day}"),)
    assert ingest([week, day], AZURE).repeats == (_said(day, 3000, "100.0%", of=f"rows of {week}"),)


def test_the_same_instants_in_other_formats_are_the_same_requests(tmp_path):
    """A day's Parquet export (timestamp[us]) beside the week's CSV (datetime text), or epoch seconds
    written 1700158546.0 in one file and 1700158546 in another: the same instants (a reading: nothing
    was said, the time's bits as read differing)."""
    frame = _azure(CONV)
    day = tmp_path / "day.parquet"
    pq.write_table(pa.table({"TIMESTAMP": pa.array(frame.TIMESTAMP[:5000].values.astype("datetime64[us]")),
                             "ContextTokens": frame.ContextTokens[:5000], "GeneratedTokens": frame.GeneratedTokens[:5000]}),
                   day)
    assert ingest([CONV, day], AZURE).repeats == (_said(day, 5000, "100.0%", of=f"rows of {CONV}"),)
    seconds = frame.TIMESTAMP.astype("int64") // 10**9
    epoch = pd.DataFrame({"prompt_tokens": frame.ContextTokens, "output_tokens": frame.GeneratedTokens,
                          "timestamp": seconds})
    (tmp_path / "day_int.csv").write_text(epoch[:5000].to_csv(index=False), encoding="utf-8")
    (tmp_path / "week_float.csv").write_text(epoch.assign(timestamp=seconds.astype(float)).to_csv(index=False),
                                             encoding="utf-8")
    spec = resolve_columns("planner", time_col="timestamp", time_unit="s")
    said = ingest([tmp_path / "week_float.csv", tmp_path / "day_int.csv"], spec).repeats
    assert len(said) == 1 and said[0].startswith(f"{tmp_path / 'day_int.csv'}: 5,000 rows (100.0%) repeat rows of")


def test_a_copy_sorted_beside_its_original_is_counted_whole_on_any_clock(tmp_path):
    """A log doubled and sorted by time (ORDER BY over a table loaded twice): on a clock of seconds or
    Mooncake's milliseconds, where ticks hold several requests, a tick's copies follow its originals;
    every copy counts (a reading: 7,123 of 19,366 were said), and a chance pair inside a copied tick is
    two requests, not a request and its copy (a second reading: 19,375 were said)."""
    frame = _azure(CONV)
    for clock in ("s", "ms"):
        stamped = frame.assign(TIMESTAMP=frame.TIMESTAMP.dt.floor(clock))
        doubled = pd.concat([stamped, stamped]).sort_values("TIMESTAMP", kind="stable")
        path = tmp_path / f"sorted_{clock}.csv"
        path.write_text(doubled.assign(TIMESTAMP=doubled.TIMESTAMP.astype(str)).to_csv(index=False), encoding="utf-8")
        # every copy, and no chance pair of a doubled tick (two requests alike, four rows: two copies)
        assert ingest([path], AZURE).repeats == (_said(path, len(frame), "50.0%"),)


def test_chance_repeats_of_a_coarse_clock_and_untimed_logs_are_not_said(tmp_path):
    """Rows alike in one tick of a coarse clock (the Azure trace stamped in whole minutes: 3.4% of its
    rows repeat another, each a distinct request) leave the other requests of their tick single: not
    said, in the log's order or ordered by time and tokens (a reading: the sorted one was said), while
    the same log with a stretch copied is. A few copies are below REPEATS_SAID; a log without times
    repeats (prompt, output) pairs by nature, and nothing is read of its rows."""
    frame = _azure(CONV)
    minutes = frame.assign(TIMESTAMP=frame.TIMESTAMP.dt.floor("min"))
    assert len(minutes) - len(minutes.drop_duplicates()) > 0.03 * len(frame)  # the chance repeats
    for name, rows in (("natural", minutes), ("sorted", minutes.sort_values(list(minutes.columns)))):
        path = tmp_path / f"minutes_{name}.csv"
        path.write_text(rows.assign(TIMESTAMP=rows.TIMESTAMP.astype(str)).to_csv(index=False), encoding="utf-8")
        assert ingest([path], AZURE).repeats == ()
    first_ten = minutes.TIMESTAMP.lt(minutes.TIMESTAMP.min() + pd.Timedelta("10min"))
    copied = pd.concat([minutes, minutes[first_ten]])
    path = tmp_path / "minutes_copied.csv"
    path.write_text(copied.assign(TIMESTAMP=copied.TIMESTAMP.astype(str)).to_csv(index=False), encoding="utf-8")
    n = int(first_ten.sum())
    assert n > 1000 and ingest([path], AZURE).repeats == (_said(path, n, f"{n / len(copied):.1%}"),)
    header = "prompt_tokens,output_tokens,timestamp_ms"
    fine = [f"{100 + i % 97},{20 + i % 13},{1_700_000_000_000 + 37 * i}" for i in range(30_000)]
    few = _log(tmp_path / "few.csv", header, fine + fine[:REPEATS_SAID - 1])
    assert ingest([few], resolve_columns("planner")).repeats == ()
    enough = _log(tmp_path / "enough.csv", header, fine + fine[:REPEATS_SAID + 20])
    assert ingest([enough], resolve_columns("planner")).repeats == (_said(enough, REPEATS_SAID + 20, "0.1%"),)
    untimed = _log(tmp_path / "untimed.csv", "prompt_tokens,output_tokens", ["100,20"] * 5000)
    assert ingest([untimed], resolve_columns("planner")).repeats == ()
    assert ingest([enough], resolve_columns("planner", no_time=True)).repeats == ()


def test_a_log_beside_one_that_holds_it_is_counted_whole_on_a_coarse_clock(tmp_path):
    """The conversation log stamped in whole minutes beside the two services' log that holds it: the
    union's minutes hold more requests than the copied ones, and were skipped (a reading: 4,227 of
    19,366 said); and a chance pair of the conversation log inside a copied minute was called a copy
    of its own rows (143 rows, "exported twice")."""
    conv, code = _azure(CONV), _azure(CODE)
    minute = {"TIMESTAMP": lambda f: f.TIMESTAMP.dt.floor("min").astype(str)}
    conv_min = tmp_path / "conv_min.csv"
    conv_min.write_text(conv.assign(**minute).to_csv(index=False), encoding="utf-8")
    both = pd.concat([conv, code]).sort_values("TIMESTAMP", kind="stable")
    both_min = tmp_path / "both_min.csv"
    both_min.write_text(both.assign(**minute).to_csv(index=False), encoding="utf-8")
    assert ingest([conv_min], AZURE).repeats == ()
    assert ingest([conv_min, both_min], AZURE).repeats == (
        _said(both_min, len(conv), f"{len(conv) / len(both):.1%}", of=f"rows of {conv_min}"),)
    assert ingest([both_min, conv_min], AZURE).repeats == (_said(conv_min, len(conv), "100.0%", of=f"rows of {both_min}"),)


def test_a_log_whose_times_all_start_at_zero_is_sampled_without_end():
    """The tick hash maps no instant to itself: a log of requests all at instant 0 (times counted from a
    batch's start) kept its tick in every sample, added sample bits without end and raised OverflowError
    past the rows kept (a reading: 530,000 requests at timestamp_ms 0)."""
    rng = np.random.default_rng(11)
    counter = RepeatCounter(keys_kept=64)
    for _ in range(5):
        counter.add(0, np.zeros(1000, np.int64), rng.integers(1, 8000, 1000), rng.integers(1, 2000, 1000))
    assert counter.repeats(["batch.csv"], [5000]) == []


@pytest.mark.parametrize("kept", [1 << 12, 1 << 14])
def test_past_the_rows_kept_the_repeats_are_estimated_from_a_sample_of_instants(kept):
    """A log longer than the counter keeps: only the ticks whose instant's hash has its low bits zero
    are kept, each whole, and their repeats, scaled, estimate the whole's; the text says so, and the
    estimate is never more than the file's rows."""
    rng = np.random.default_rng(7)
    times = np.cumsum(rng.integers(1, 1000, 200_000)).astype(np.int64)
    prompt, output = rng.integers(1, 8000, times.size), rng.integers(1, 2000, times.size)
    order = np.r_[np.arange(times.size), np.arange(50_000, 80_000)]  # a stretch copied at the end
    counter = RepeatCounter(keys_kept=kept)
    for lo in range(0, order.size, 10_000):  # read in batches, as a log is
        rows = order[lo:lo + 10_000]
        counter.add(0, times[rows], prompt[rows], output[rows])
    (found,) = counter.repeats(["big.csv"], [order.size])
    assert found.sampled > 1 and found.rows == pytest.approx(30_000, rel=0.15)
    assert found.text().startswith(f"big.csv: about {found.rows:,} rows ({found.rows / 230_000:.1%}, estimated from "
                                   f"the 1 in {found.sampled:,} of instants a log this long keeps) repeat another")
    small = RepeatCounter(keys_kept=kept)
    small.add(0, times, prompt, output)
    small.add(1, times[:600], prompt[:600], output[:600])
    (said,) = [r for r in small.repeats(["big.csv", "small.csv"], [times.size, 600]) if r.path == "small.csv"]
    assert said.sampled > 1 and 0 < said.rows <= 600 and said.of == ("big.csv",)


def test_an_instant_is_one_key_however_it_is_written():
    """Microseconds from seconds (integer or fractional), milliseconds and nanoseconds (rounded half to
    even); one tick, one token apart, or the prompt and output swapped: another key."""
    assert instants_us(np.array([1_700_158_546, 2]), 60).tolist() == [1_700_158_546_000_000, 2_000_000]
    assert instants_us(np.array([1_700_158_546.5, 0.0000015]), 60).tolist() == [1_700_158_546_500_000, 2]
    assert instants_us(np.array([1_700_158_546_500]), 60_000).tolist() == [1_700_158_546_500_000]
    assert instants_us(np.array([1_500, 2_500, 2_501, -1_500]), 60_000_000_000).tolist() == [2, 2, 3, -2]
    instants, keys = row_keys(np.array([0, 1, 0, 0, 0]), np.array([5, 5, 6, 5, 7]), np.array([7, 7, 7, 8, 5]))
    assert instants.tolist() == [0, 1, 0, 0, 0] and np.unique(keys).size == 5
    _, same = row_keys(np.array([15, 15]), np.array([5, 5]), np.array([7, 7]))
    assert same[0] == same[1]


def test_a_plan_from_a_doubled_log_says_so_on_stderr_and_in_its_report(tmp_path):
    header, rows = _rows(CONV)
    _log(tmp_path / "doubled.csv", header, rows + rows)
    path = write_scenario(tmp_path, """
        name: doubled
        model: llama-3.1-8b
        context_limit: 16384
        traffic:
          source: {log: doubled.csv, preset: azure}
          peak: {method: quantile, quantile: 0.99}
        slo: {bands: [{ttft_s: 2.0, tpot_ms: 60}]}
        gpus: [h100-sxm]
        tp: [1]
        weight_dtypes: [bf16]
        kv_dtypes: [bf16]
    """)
    said = _said("doubled.csv", len(rows), "50.0%")
    r = run("solve", path, "--no-verify", "--no-report", "--json")
    assert r.exit_code == 0 and r.stderr == f"warning: {path}: {said}\n", r.output
    assert said in json.loads(r.stdout)["traffic_notes"]
    r = run("solve", path, "--no-verify", "--out-dir", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert said in (tmp_path / "out" / "doubled.md").read_text(encoding="utf-8")
