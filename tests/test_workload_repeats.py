"""Requests counted twice: rows that repeat another's arrival time and token counts exactly (a log
exported twice into one file, exports that overlap) are warned of, with their count and the file
they repeat; real traces and untimed logs are not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from clirun import run
from scenario_files import write_scenario

from planner.workload.columns import resolve_columns
from planner.workload.ingest import ingest
from planner.workload.repeats import REPEATS_SAID, RepeatCounter, row_keys

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
    where, how = (("another of its rows", "a log exported or appended twice into one file holds") if of is None else
                  (of, "exports that overlap (or a log given beside one that holds it) hold"))
    return (f"{path}: {rows:,} rows ({share}) repeat {where} exactly (arrival time and token counts), as copies do, in "
            f"runs of rows or each right after its original: {how} those requests twice, and every rate here, the "
            "peak's with them, counts them twice; if they are not distinct requests, remove the repeats (SELECT "
            "DISTINCT) and plan again")


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


def test_overlapping_exports_name_the_file_they_repeat(tmp_path):
    header, rows = _rows(CONV)
    first = _log(tmp_path / "monday.csv", header, rows[:5000])
    second = _log(tmp_path / "monday_late.csv", header, rows[4500:9000])
    assert ingest([first, second], AZURE).repeats == (_said(second, 500, "11.1%", of=f"rows of {first}"),)
    assert ingest([second, first], AZURE).repeats == (_said(first, 500, "10.0%", of=f"rows of {second}"),)
    apart = _log(tmp_path / "tuesday.csv", header, rows[9000:])
    assert ingest([first, apart], AZURE).repeats == ()


def test_a_copy_sorted_beside_its_original_is_warned_of_too(tmp_path):
    """A log doubled and then sorted by time (ORDER BY over a table loaded twice): each copy right
    after its original, no run of repeats longer than one."""
    header, rows = _rows(CODE)
    sorted_copy = _log(tmp_path / "sorted.csv", header, [r for row in rows for r in (row, row)])
    assert ingest([sorted_copy], AZURE).repeats == (_said(sorted_copy, len(rows), "50.0%"),)


def test_chance_repeats_of_a_coarse_clock_and_untimed_logs_are_not_said(tmp_path):
    """Rows alike in one tick of a coarse clock (the Azure trace stamped in whole minutes: 3.4% of its
    rows repeat another, each a distinct request) come one at a time among other rows: not said, while
    the same log with a stretch copied is. A few copies are below REPEATS_SAID; a log without times
    repeats (prompt, output) pairs by nature, and nothing is read of its rows."""
    header, rows = _rows(CONV)
    minutes = [f"{r.split(',')[0][:16]}:00,{r.split(',', 1)[1]}" for r in rows]  # 2023-11-16 18:15:00,...
    coarse = ingest([_log(tmp_path / "minutes.csv", header, minutes)], AZURE)
    assert coarse.repeats == () and coarse.histogram.requests == len(rows)
    keys = [(m.split(",")[0], m.split(",")[1], m.split(",")[2]) for m in minutes]
    assert len(keys) - len(set(keys)) > 0.03 * len(rows)  # the chance repeats the rule must not call copies
    copied = _log(tmp_path / "minutes_copied.csv", header, minutes + minutes[:2000])
    assert ingest([copied], AZURE).repeats == (_said(copied, 2000, "9.4%"),)
    header = "prompt_tokens,output_tokens,timestamp_ms"
    fine = [f"{100 + i % 97},{20 + i % 13},{1_700_000_000_000 + 37 * i}" for i in range(30_000)]
    few = _log(tmp_path / "few.csv", header, fine + fine[:REPEATS_SAID - 1])
    assert ingest([few], resolve_columns("planner")).repeats == ()
    enough = _log(tmp_path / "enough.csv", header, fine + fine[:REPEATS_SAID + 20])
    assert ingest([enough], resolve_columns("planner")).repeats == (_said(enough, REPEATS_SAID + 20, "0.1%"),)
    untimed = _log(tmp_path / "untimed.csv", "prompt_tokens,output_tokens", ["100,20"] * 5000)
    assert ingest([untimed], resolve_columns("planner")).repeats == ()
    assert ingest([enough], resolve_columns("planner", no_time=True)).repeats == ()


@pytest.mark.parametrize("kept", [1 << 12, 1 << 14])
def test_past_the_keys_kept_the_repeats_are_estimated_from_a_sample_of_keys(kept):
    """A log longer than the counter keeps: the keys whose low bits are zero are kept (a kept row's
    repeats with it), and their repeats, scaled, estimate the whole's; the text says so. A stretch
    copied is told in the sample too; repeats scattered by chance are not said however many."""
    rng = np.random.default_rng(7)
    times = np.cumsum(rng.integers(1, 1000, 200_000)).astype(np.int64)
    prompt, output = rng.integers(1, 8000, times.size), rng.integers(1, 2000, times.size)
    copied = np.r_[np.arange(times.size), np.arange(50_000, 80_000)]  # a stretch copied at the end
    # 30,000 repeats scattered instead: each after five new rows, repeating a row read long before
    scattered = np.insert(np.arange(times.size), np.arange(30_000) * 6 + 20_000,
                          rng.choice(np.arange(10_000), 30_000))
    for order, said in ((copied, True), (scattered, False)):
        counter = RepeatCounter(keys_kept=kept)
        for lo in range(0, order.size, 10_000):  # read in batches, as a log is
            rows = order[lo:lo + 10_000]
            counter.add(0, times[rows], prompt[rows], output[rows])
        found = counter.repeats(["big.csv"], [order.size])
        if not said:
            assert found == []
            continue
        (found,) = found
        assert found.sampled > 1 and found.rows == pytest.approx(30_000, rel=0.15)
        assert found.text().startswith(f"big.csv: about {found.rows:,} rows ({found.rows / 230_000:.1%}) (estimated "
                                       f"from the 1 in {found.sampled:,} of rows whose keys a log this long keeps) "
                                       "repeat")


def test_keys_tell_apart_what_a_row_holds():
    """One tick, one token apart, or the prompt and output swapped: another key; rows alike, one key,
    counted as following their like across the batches of a file."""
    keys, adjacent, last = row_keys(np.array([0, 1, 0, 0, 0], np.int64), np.array([5, 5, 6, 5, 7]),
                                    np.array([7, 7, 7, 8, 5]))
    assert np.unique(keys).size == 5 and adjacent == 0 and last == int(keys[-1])
    same, adjacent, _ = row_keys(np.array([1.5, 1.5]), np.array([5, 5]), np.array([7, 7]))
    assert same[0] == same[1] and adjacent == 1
    _, adjacent, _ = row_keys(np.array([1.5]), np.array([5]), np.array([7]), previous=int(same[1]))
    assert adjacent == 1


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
