"""`planner histogram` and `planner synth` on the command line: JSON keys, summaries, and every
bad-input path exiting 2 with one line and no output file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from clirun import run
from contract import one_line_error
from scenario_files import write_scenario

from planner.units import tokens_text
from planner.workload.histfile import read_histogram

LOGS = Path(__file__).parent / "fixtures" / "logs"




def test_histogram_json_has_exactly_the_contract_keys(tmp_path):
    out = tmp_path / "h.parquet"
    r = run("histogram", LOGS / "handmade.csv", "-o", out, "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert list(summary) == [
        "requests",
        "excluded_rows",
        "prompt_tokens",
        "output_tokens",
        "total_tokens",
        "share_above",
        "rate_rps",
        "time_unit_assumed",
    ]
    assert summary["requests"] == 6
    assert summary["excluded_rows"] == {"null": 0, "negative": 0, "non_numeric": 0, "too_long": 0, "empty_prompt": 0}
    for key in ("prompt_tokens", "output_tokens", "total_tokens"):
        assert list(summary[key]) == ["mean", "p50", "p90", "p99", "max"]
    assert summary["prompt_tokens"]["mean"] == pytest.approx(45_208 / 6, abs=1e-3)
    assert summary["prompt_tokens"]["max"] == 40_000  # one request in the top bin: exact
    assert summary["share_above"] == {
        "8192": pytest.approx(1 / 6, abs=1e-6),
        "32768": pytest.approx(1 / 6, abs=1e-6),
        "131072": 0.0,
    }
    # 3, 1, 2 arrivals in three minutes: the first and last are partial, one whole minute measures no rate
    assert summary["rate_rps"] == {"minutes": 3, "mean": None, "p99_minute": None, "max_minute": None,
                                   "clock_step_minutes": 1}
    assert summary["time_unit_assumed"] == "ms"
    assert read_histogram(out).requests == 6


def test_histogram_text_summary_and_merge_of_histogram_files(tmp_path):
    a = tmp_path / "a.parquet"
    assert run("histogram", LOGS / "handmade.csv", "-o", a).exit_code == 0
    r = run(
        "histogram",
        a,
        LOGS / "azure_head.csv",
        "--preset",
        "azure",
        "--prompt-col",
        "ContextTokens",
    )
    # the azure preset names the log's columns; the histogram file needs none
    assert r.exit_code == 0, r.output
    assert "requests: 10  (no rows excluded)" in r.stdout
    assert "prompt " in r.stdout and "p99" in r.stdout
    assert "arrival rate (req/s)" in r.stdout
    assert "mixed" in r.stdout  # ms from the file, datetime from the log


def test_garbage_rows_are_reported_on_stderr_and_in_json():
    r = run("histogram", LOGS / "garbage.csv", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["excluded_rows"] == {"null": 3, "negative": 2, "non_numeric": 3, "too_long": 0, "empty_prompt": 0}
    assert (
        "warning: " in r.stderr
        and "excluded 8 rows (null 3, negative 2, non_numeric 3)" in r.stderr
    )


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _parquet_bytes(tmp_path: Path) -> bytes:
    pq.write_table(
        pa.table({"prompt_tokens": [1], "output_tokens": [2]}), tmp_path / "real.parquet"
    )
    return (tmp_path / "real.parquet").read_bytes()


BAD_INPUTS = {
    "missing column": (
        lambda d: LOGS / "azure_head.csv",
        "no column 'prompt_tokens' (prompt tokens); the file has: TIMESTAMP, ContextTokens, GeneratedTokens",
    ),
    "text named .parquet": (
        lambda d: _write(d / "log.parquet", b"prompt_tokens,output_tokens\n1,2\n"),
        "not a Parquet file (no PAR1 magic bytes); it looks like CSV",
    ),
    "parquet named .csv": (
        lambda d: _write(d / "log.csv", _parquet_bytes(d)),
        "is a Parquet file, not CSV text",
    ),
    "JSON array named .jsonl": (
        lambda d: _write(d / "log.jsonl", b'[{"prompt_tokens": 1}]\n'),
        "is a JSON array, not JSON Lines",
    ),
    "JSON named .csv": (
        lambda d: _write(d / "log.csv", b'{"prompt_tokens": 1}\n'),
        "looks like JSON, not CSV",
    ),
    "empty file": (lambda d: _write(d / "log.csv", b""), "file is empty"),
    "header only": (
        lambda d: LOGS / "header_only.csv",
        "no usable row (excluded rows: null 0, negative 0, non_numeric 0, too_long 0, empty_prompt 0)",
    ),
    "only garbage rows": (
        lambda d: _write(d / "log.csv", b"prompt_tokens,output_tokens\n-1,2\nx,3\n,4\n"),
        "no usable row (excluded rows: null 1, negative 1, non_numeric 1, too_long 0, empty_prompt 0; ",
    ),
    "no such file": (lambda d: d / "missing.csv", "no such file"),
    "unknown extension": (
        lambda d: _write(d / "log.txt", b"a,b\n"),
        "unknown log extension '.txt'",
    ),
    "gzip": (lambda d: _write(d / "log.csv", b"\x1f\x8b\x08\x00rest"), "gzip-compressed"),
}


def test_a_format_stated_against_the_content_says_so_not_to_rename_a_rightly_named_file(tmp_path):
    """`--format csv` on log.parquet was told "name it .parquet", the name it had: the option is what
    contradicts the content. A format read from the extension keeps the advice to rename."""
    parquet = _write(tmp_path / "log.parquet", _parquet_bytes(tmp_path))
    jsonl = _write(tmp_path / "log.jsonl", b'{"prompt_tokens": 1, "output_tokens": 2}\n')
    one_line_error(run("histogram", parquet, "--format", "csv"), 2, f"{parquet}: is a Parquet file, not CSV text; "
                   "--format csv contradicts the content: drop --format, or give --format parquet")
    one_line_error(run("histogram", jsonl, "--format", "parquet"), 2, f"{jsonl}: not a Parquet file (no PAR1 magic "
                   "bytes); it looks like JSON Lines; --format parquet contradicts the content: drop --format, or "
                   "give --format jsonl")
    line = one_line_error(run("histogram", jsonl, "--format", "csv"), 2, f"{jsonl}: looks like JSON, not CSV; "
                          "--format csv contradicts the content: drop --format, or give --format jsonl")
    assert "name it" not in line
    named = _write(tmp_path / "log.csv", jsonl.read_bytes())
    one_line_error(run("histogram", named), 2, f"{named}: looks like JSON, not CSV; name it .jsonl")
    # where the name says what --format says, dropping the option would not help: it says which format to give
    line = one_line_error(run("histogram", named, "--format", "csv"), 2, f"{named}: looks like JSON, not CSV; "
                          "--format csv contradicts the content: give --format jsonl")
    assert "drop" not in line


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_exits_2_with_one_line_and_leaves_no_output(tmp_path, case):
    make, expected = BAD_INPUTS[case]
    folder = tmp_path / "in"
    folder.mkdir()
    log = make(folder)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    r = run("histogram", log, "-o", out_dir / "h.parquet")
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    assert expected in r.stderr
    if case == "only garbage rows":  # which file's rows fail on which column
        assert f"; {log}: by column: prompt_tokens 3)" in r.stderr
    assert str(log.name) in r.stderr
    assert list(out_dir.iterdir()) == []  # neither the file nor a temporary one


def test_a_failing_second_input_leaves_an_existing_output_untouched(tmp_path):
    out = tmp_path / "h.parquet"
    out.write_bytes(b"previous")
    r = run("histogram", LOGS / "handmade.csv", tmp_path / "missing.csv", "-o", out)
    assert r.exit_code == 2
    assert out.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.parquet"]


def test_output_into_a_missing_folder_is_bad_input(tmp_path):
    r = run("histogram", LOGS / "handmade.csv", "-o", tmp_path / "nope" / "h.parquet")
    assert r.exit_code == 2
    assert "output folder" in r.stderr


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_synth_is_deterministic_and_histograms_back(tmp_path, suffix):
    a, b = tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"
    r = run("synth", "chat_long_tail", "-n", 2_000, "--seed", 3, "-o", a, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["tail_share"] == 0.02
    assert run("synth", "chat_long_tail", "-n", 2_000, "--seed", 3, "-o", b).exit_code == 0
    assert a.read_bytes() == b.read_bytes()
    h = run("histogram", a, "--json")
    assert h.exit_code == 0, h.output
    assert json.loads(h.stdout)["requests"] == 2_000
    assert json.loads(h.stdout)["time_unit_assumed"] == "ms"


def test_synth_options_and_errors(tmp_path):
    r = run(
        "synth",
        "chat",
        "-n",
        1_000,
        "--seed",
        1,
        "--tail-share",
        0.5,
        "--rate-rps",
        2,
        "-o",
        tmp_path / "l.parquet",
    )
    assert r.exit_code == 0, r.output
    table = pq.read_table(tmp_path / "l.parquet")
    total = np.asarray(table["prompt_tokens"]) + np.asarray(table["output_tokens"])
    assert 0.4 < (total > 32_768).mean() < 0.6
    assert run("synth", "chatty", "-n", 10, "-o", tmp_path / "x.csv").exit_code == 2
    bad = run("synth", "chat", "-n", 10, "-o", tmp_path / "x.txt")
    assert bad.exit_code == 2 and "unknown log extension" in bad.stderr
    assert not (tmp_path / "x.txt").exists()


def test_help_carries_real_examples():
    for command in ("histogram", "synth"):
        r = run(command, "--help")
        assert r.exit_code == 0
        assert f"planner {command} " in r.stdout


@pytest.mark.parametrize(("option", "value"), [("--time-col", "t"), ("--time-unit", "ms")])
def test_no_time_beside_an_option_that_reads_the_times_is_refused_not_one_of_them_ignored(tmp_path, option, value):
    log = tmp_path / "log.csv"
    log.write_text("prompt_tokens,output_tokens,t\n100,10,1\n")
    r = run("histogram", log, "--no-time", option, value)
    assert r.exit_code == 2, r.output
    assert r.output.strip() == (f"error: --no-time ignores arrival times; {option} names how to read them: give one or "
                                "the other (see 'planner histogram --help')")


def test_a_failed_run_says_one_line_its_error_not_the_warnings_before_it(tmp_path):
    """A log with a row left out, written over itself or into a missing folder: the warning about the
    row belongs to a histogram that was made, and none was (as `solve` does)."""
    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({"prompt_tokens": ["x", "100", "200"], "output_tokens": ["1", "2", "3"]}), log)
    one_line_error(run("histogram", log, "-o", log), 2, f"{log}: is also an input of this command")
    one_line_error(run("histogram", log, "-o", tmp_path / "nope" / "h.parquet"), 2, "output folder")
    r = run("histogram", log, "-o", tmp_path / "h.parquet")  # a run that succeeds warns
    assert r.exit_code == 0, r.output
    assert r.stderr == f"warning: {log}: excluded 1 row (non_numeric 1); by column: prompt_tokens 1\n"


def test_the_summary_keeps_its_columns_apart_at_ten_million_tokens(tmp_path):
    """Fixed widths ran p99 and max together ("49816,777,216") past 9,999,999 tokens: each line
    must split into its six fields, and those are the JSON's numbers."""
    log = tmp_path / "log.csv"
    # (the longest a request may be: 2**24 tokens, prompt and output together)
    log.write_text("prompt_tokens,output_tokens\n16077216,700000\n42000,300\n45000,461\n")
    r = run("histogram", log)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[1].split() == ["tokens", "mean", "p50", "p90", "p99", "max"]
    summary = json.loads(run("histogram", log, "--json").stdout)
    for line, key in zip(lines[2:5], ("prompt_tokens", "output_tokens", "total_tokens"), strict=True):
        fields = line.split()
        stats = summary[key]
        assert len(fields) == 6, line
        assert [float(f.replace(",", "")) for f in fields[1:]] == pytest.approx(
            [stats[k] for k in ("mean", "p50", "p90", "p99", "max")], abs=0.5)
        assert "  " + fields[5] in line  # two spaces at least before the max
    assert lines[2].split()[5] == "16,077,216" and lines[4].split()[5] == "16,777,216"


def test_the_summary_marks_a_max_that_is_an_upper_bound():
    """Azure conv's longest output is 1,000 tokens: its fine bin's top, 1,001, is what the summary can
    say, so it says "≤ 1,001" (the JSON's max is the same number); the longest prompt, alone in its
    bin, is exact."""
    sample = Path(__file__).resolve().parent.parent / "data" / "samples" / "azure_conv_2023_sample.hist.parquet"
    r = run("histogram", sample)
    assert r.exit_code == 0, r.output
    rows = {line.split()[0]: line for line in r.stdout.splitlines()[2:5]}
    assert rows["output"].endswith("  ≤ 1,001")
    assert rows["prompt"].endswith(" 14,050") and "≤" not in rows["prompt"]
    summary = json.loads(run("histogram", sample, "--json").stdout)
    assert (summary["output_tokens"]["max"], summary["prompt_tokens"]["max"]) == (1_001, 14_050)


def test_a_missing_column_suggests_only_a_preset_that_would_find_it(tmp_path):
    """--time-col timestamp_ms on a log without it suggested "--preset planner", the preset in use,
    whose time column is that one."""
    log = tmp_path / "log.csv"
    log.write_text("prompt_tokens,output_tokens\n100,10\n")
    line = one_line_error(run("histogram", log, "--time-col", "timestamp_ms"), 2,
                          f"{log}: no column 'timestamp_ms' (arrival time)")
    assert "--preset" not in line and line.endswith("name the columns with --prompt-col/--output-col/--time-col")
    one_line_error(run("histogram", log, "--preset", "azure"), 2,
                   "no column 'ContextTokens' (prompt tokens)", "try --preset planner")
    azure = tmp_path / "azure.csv"  # azure's length columns, but no TIMESTAMP: azure is in use and cannot help
    azure.write_text("ContextTokens,GeneratedTokens\n100,10\n")
    line = one_line_error(run("histogram", azure, "--preset", "azure"), 2, "no column 'TIMESTAMP' (arrival time)")
    assert "--preset" not in line


def test_a_length_percentile_prints_the_same_in_the_histogram_table_and_the_report(tmp_path):
    """Azure conv's output p99 is 600.51 tokens: `histogram --json` gives 600.5, and its table printed
    600 (format's half-even on that tenth) where the solve report printed 601. Both round the unrounded
    value once, half up (planner.units.tokens_text)."""
    sample = Path(__file__).parent.parent / "data" / "samples" / "azure_conv_2023_sample.csv"
    r = run("histogram", sample, "--preset", "azure")
    assert r.exit_code == 0, r.output
    table = {line.split()[0]: line.split()[2:5] for line in r.stdout.splitlines()[2:5]}
    assert table["output"] == ["129", "424", "601"]
    assert json.loads(run("histogram", sample, "--preset", "azure", "--json").stdout)["output_tokens"]["p99"] == 600.5
    path = write_scenario(tmp_path, f"""\
        name: conv
        model: llama-3.1-8b
        context_limit: 16384
        traffic: {{source: {{log: {sample}, preset: azure}}}}
        gpus: [h100-sxm]
        tp: [1]
        weight_dtypes: [bf16]
        kv_dtypes: [bf16]
        split_thresholds: []
        """)
    r = run("solve", path, "--no-verify", "--out-dir", tmp_path / "out")
    assert r.exit_code == 0, r.output
    rows = [line.strip("|").split("|") for line in (tmp_path / "out" / "conv.md").read_text().splitlines()
            if line.startswith(("| prompt |", "| output |", "| total |"))]
    assert {row[0].strip(): [v.strip() for v in row[2:5]] for row in rows} == table  # nothing rejected at 16,384


def test_tokens_text_rounds_once_half_up():
    assert [tokens_text(v) for v in (600.5, 600.4999, 600.51, 1_234.5, 0.5, 64_544.497)] == [
        "601", "600", "601", "1,235", "1", "64,544"]
