"""Hostile input (issue 17's fuzzing campaign): each case gets a one-line error naming the
place and the documented exit code, or the right answer, never a traceback or a confident
wrong one. One test per root cause the campaign found."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from clirun import run
from contract import one_line_error
from scenario_files import write_scenario

from planner.files import atomic_output
from planner.histogram import Histogram
from planner.requests import sample_requests, shortest_prompt_tokens
from planner.workload.histfile import write_histogram

ROOT = Path(__file__).resolve().parent.parent
HF = Path(__file__).resolve().parent / "fixtures" / "hf"
BASE = """\
name: tiny
model: llama-3.1-8b
context_limit: 8192
traffic:
  source: {constant: {prompt_tokens: 1000, output_tokens: 200}}
  peak: {method: explicit, rps: 4}
gpus: [h100-sxm]
tp: [1]
weight_dtypes: [bf16]
kv_dtypes: [bf16]
"""


def scenario(tmp_path: Path, text: str = BASE, name: str = "s.yaml") -> Path:
    return write_scenario(tmp_path, text, name=name)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*")) if folder.exists() else []


def planner_process(*args, **streams) -> subprocess.CompletedProcess:
    """`python -m planner ARGS` in a process of its own, run from the checkout: what the command line
    does where CliRunner's streams differ from a real one's (closed, full, or a name's bytes)."""
    return subprocess.run([sys.executable, "-m", "planner", *map(str, args)], cwd=ROOT, check=False, **streams)


# ---- timestamps: per row, not by the first row's luck --------------------------------------
TIMES = ["garbage", "1700000000000", "1700000060000", "1700000120000"]


def _log_rows(first_time: str) -> list[dict]:
    return [
        {"prompt_tokens": 100 + i, "output_tokens": 10, "timestamp_ms": t}
        for i, t in enumerate([first_time, *TIMES[1:]])
    ]


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_a_bad_timestamp_in_the_first_row_excludes_that_row_only(tmp_path, fmt):
    rows = _log_rows("garbage")
    path = tmp_path / f"log.{fmt}"
    if fmt == "csv":
        path.write_text("prompt_tokens,output_tokens,timestamp_ms\n"
                        + "".join(f"{r['prompt_tokens']},{r['output_tokens']},{r['timestamp_ms']}\n" for r in rows))
    elif fmt == "jsonl":  # numbers as numbers, the bad one as text: the column's type changes
        path.write_text("".join(
            json.dumps({**r, "timestamp_ms": r["timestamp_ms"] if i == 0 else int(r["timestamp_ms"])}) + "\n"
            for i, r in enumerate(rows)
        ))
    else:  # a Parquet text column
        pq.write_table(pa.table({k: [r[k] for r in rows] for k in rows[0]}), path)
    r = run("histogram", path, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["requests"] == 3
    assert out["excluded_rows"] == {"null": 0, "negative": 0, "non_numeric": 1, "too_long": 0, "empty_prompt": 0}
    assert out["time_unit_assumed"] == "ms"
    assert out["rate_rps"]["minutes"] == 3  # one arrival in each of three minutes


def test_one_wild_timestamp_does_not_decide_the_unit_of_the_rest(tmp_path):
    # the largest value (1e18) would say nanoseconds; the median says milliseconds
    path = tmp_path / "log.csv"
    times = [1_000_000_000_000_000_000] + [1_700_000_000_000 + 60_000 * i for i in range(5)]
    # (a column no preset names: a preset's own time column keeps its unit, and nothing is guessed)
    path.write_text("prompt_tokens,output_tokens,t\n" + "".join(f"10,5,{t}\n" for t in times))
    r = run("histogram", path, "--time-col", "t")
    one_line_error(r, 2, str(path), "arrival times span")


# ---- a folder of mixed parts ---------------------------------------------------------------
@pytest.mark.parametrize("order", [("a", "b"), ("b", "a")])
def test_a_folder_of_a_log_part_and_a_histogram_part_is_refused_in_either_order(tmp_path, order):
    log = tmp_path / "log.parquet"
    assert run("synth", "chat", "-n", 50, "-o", log).exit_code == 0
    hist = tmp_path / "h.parquet"
    assert run("histogram", log, "-o", hist).exit_code == 0
    folder = tmp_path / "parts"
    folder.mkdir()
    (folder / f"{order[0]}.parquet").write_bytes(log.read_bytes())
    (folder / f"{order[1]}.parquet").write_bytes(hist.read_bytes())
    r = run("histogram", folder, "--json")
    one_line_error(r, 2, str(folder), "both histogram files", "and logs")


# ---- forecast and catalog numbers -----------------------------------------------------------
FORECAST = BASE + """\
forecast:
  carry_forward: true
  reserved_prices: {PRICES}
  quarters: [{quarter: 2027Q1}, {quarter: 2027Q2, growth: 0.2}]
"""


@pytest.mark.parametrize(
    ("prices", "expected"),
    [
        ("{h100-sxm: -1}", "forecast.reserved_prices.h100-sxm: Input should be greater than or equal to 0.001"),
        ("{h100-sxm: .nan}", "forecast.reserved_prices.h100-sxm: Input should be a finite number"),
        ("{h100-sxm: 1e9}", "forecast.reserved_prices.h100-sxm: Input should be less than or equal to 1000"),
        ("{h100: 2.0}", "forecast.reserved_prices: GPU 'h100' is not among the scenario's candidate gpus; did you mean 'h100-sxm'?"),
        # a GPU of the catalog the scenario does not offer is not an unknown GPU
        ("{b200: 2.0}", "forecast.reserved_prices: GPU 'b200' is not among the scenario's candidate gpus; they are: h100-sxm "
                        "(a committed price needs the GPU among them)"),
    ],
)
def test_reserved_prices_are_validated(tmp_path, prices, expected):
    r = run("forecast", scenario(tmp_path, FORECAST.replace("{PRICES}", prices)), "--out-dir", tmp_path / "out")
    one_line_error(r, 2, "s.yaml", expected)
    assert leftovers(tmp_path / "out") == []


def test_a_committed_price_above_on_demand_is_priced_as_stated_and_said(tmp_path):
    """A committed price above the on-demand one is most often a slip: it is priced as stated (the
    commitment is the user's), and the report and stderr say which quarters pay it and how much."""
    out = tmp_path / "out"
    path = scenario(tmp_path, FORECAST.replace("{PRICES}", "{h100-sxm: 3.5}"))
    r = run("forecast", path, "--out-dir", out)
    assert r.exit_code == 0, r.output
    said = ("Committed above the on-demand price: 2027Q2 pays 1 h100-sxm at $3.50 per GPU-hour against $2.99 on demand. A "
            "commitment is paid at its own price for its term, used or not")
    assert f"warning: {path}: {said}" in r.stderr
    assert said in (out / "tiny_forecast.md").read_text(encoding="utf-8")
    # planner solve reports the scenario's forecast too, and says it on stderr as well: --json writes
    # no text that would
    solved = run("solve", path, "--no-verify", "--json", "--out-dir", tmp_path / "solved")
    assert solved.exit_code == 0, solved.output
    assert solved.stderr.count(said) == 1 and f"warning: {path}: {said}" in solved.stderr
    assert said in (tmp_path / "solved" / "tiny.md").read_text(encoding="utf-8")
    with (out / "tiny_forecast_quarters.csv").open(encoding="utf-8") as f:
        q2 = next(row for row in csv.DictReader(f) if row["quarter"] == "2027Q2")
    assert float(q2["reserved_used_usd_per_hour"]) + float(q2["reserved_idle_usd_per_hour"]) == 3.5  # as stated
    # at the on-demand price itself nothing is said
    fair = run("forecast", scenario(tmp_path, FORECAST.replace("{PRICES}", "{h100-sxm: 2.99}"), name="f.yaml"),
               "--out-dir", tmp_path / "fair")
    assert fair.exit_code == 0 and "Committed above" not in fair.stderr
    fair_solved = run("solve", tmp_path / "f.yaml", "--no-verify", "--no-report")
    assert fair_solved.exit_code == 0 and "Committed above" not in fair_solved.stderr
    assert "Committed above" not in (tmp_path / "fair" / "tiny_forecast.md").read_text(encoding="utf-8")


def test_forecast_takes_verify_from_the_command_line_as_solve_does(tmp_path):
    """`planner forecast` had no --no-verify: a scenario certified by default could only be forecast by
    the model after editing its file (an outside probe)."""
    path = scenario(tmp_path, FORECAST.replace("{PRICES}", "{}"))

    def planned_by(*flags):
        r = run("forecast", path, "--no-report", "--json", *flags)
        assert r.exit_code == 0, r.output
        said = json.loads(r.stdout)
        # and says which: a forecast by the model alone read as a certified one (an outside probe)
        assert said["certified"] is (None if "--no-verify" in flags else True)
        return {p["capacity_planned_by"] for q in said["quarters"] for p in q["pools"]}

    assert planned_by("--no-verify") == {"model"}
    assert planned_by() == planned_by("--verify") == {"replayed"}  # the scenario's own verify: true
    out = tmp_path / "out"
    r = run("forecast", path, "--no-verify", "--out-dir", out)
    assert r.exit_code == 0, r.output
    text = (out / "tiny_forecast.md").read_text(encoding="utf-8")
    assert "**Every quarter's plan is the model's alone**: certification by simulation is off" in text
    # and each quarter's line, all `--no-report` prints; a certified forecast's says nothing of it
    quarters = [line for line in r.stdout.splitlines() if not line.startswith("->")]
    assert quarters and all(line.endswith(" [by the model alone: not certified by simulation]") for line in quarters)
    assert "not certified" not in run("forecast", path, "--no-report").stdout


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("gpus: {h100-sxm: {dense_tflops: {bf16: -5}}}", "gpus.h100-sxm.dense_tflops.bf16: Input should be greater than or equal to 0.1"),
        ("gpus: {h100-sxm: {dense_tflops: {bf16: .inf}}}", "gpus.h100-sxm.dense_tflops.bf16: Input should be a finite number"),
        ("gpus: {h100-sxm: {weight_dtypes: [bf16, fp9]}}", "gpus.h100-sxm.weight_dtypes: unknown dtype 'fp9'"),
        ("gpus: {h100-sxm: {kv_dtypes: []}}", "gpus.h100-sxm.kv_dtypes: List should have at least 1 item"),
        ("gpus: {h100-sxm: {price_usd_per_hour: 1e300}}", "price_usd_per_hour: Input should be less than or equal to 1000"),
        ("dtypes: {bf16: {compute_dtype: fp4}}", "dense_tflops: no rate for 'fp4', which weight dtype 'bf16' computes in"),
        # a dtype no catalog has: blamed on the H100's rates (an outside probe), not on the field that names it
        ("dtypes: {bf16: {compute_dtype: fp6}}", "dtypes.bf16.compute_dtype: no GPU of the catalog has a dense_tflops "
                                                 "rate for 'fp6'"),
        # a share near zero overflowed the step times, with numpy's warnings on stderr before the error
        ("gpus: {h100-sxm: {efficiency: {bandwidth: 1.0e-300}}}",
         "gpus.h100-sxm.efficiency.bandwidth: Input should be greater than or equal to 0.01"),
        ("gpus: {h100-sxm: {efficiency: {compute: 0.001}}}",
         "gpus.h100-sxm.efficiency.compute: Input should be greater than or equal to 0.01"),
    ],
)
def test_catalog_overrides_are_validated(tmp_path, override, expected):
    r = run("solve", scenario(tmp_path, BASE + f"catalog:\n  {override}\n"), "--out-dir", tmp_path / "out")
    one_line_error(r, 2, "s.yaml: catalog:", expected)


@pytest.mark.parametrize(("value", "got"), [("null", "got null"), ("[1, 2]", "got a list"), ("5", "got 5")])
def test_a_section_that_is_no_mapping_is_told_so_not_named_by_its_class(tmp_path, value, got):
    """pydantic's message named the schema's class ('a valid dictionary or instance of TrafficSpec')."""
    text = BASE.replace("traffic:\n  source: {constant: {prompt_tokens: 1000, output_tokens: 200}}\n"
                        "  peak: {method: explicit, rps: 4}\n", f"traffic: {value}\n")
    r = run("solve", scenario(tmp_path, text), "--out-dir", tmp_path / "out")
    one_line_error(r, 2, "s.yaml", f"traffic: expected a mapping of keys ({got})")
    assert "TrafficSpec" not in r.output


def test_a_seed_past_64_bits_is_told_its_limit_in_whole_digits(tmp_path):
    """pydantic printed the bound 2**64 - 1 as a float, 18446744073709552000: not the limit."""
    r = run("solve", scenario(tmp_path, BASE + "simulation: {seed: 18446744073709551616}\n"), "--out-dir", tmp_path / "out")
    one_line_error(r, 2, "s.yaml", "simulation.seed: Input should be less than or equal to 18,446,744,073,709,551,615")
    assert leftovers(tmp_path / "out") == []


@pytest.mark.parametrize(("args", "name"), [
    (("solve", ""), "SCENARIOS..."),
    (("solve", "scenarios/chat_8b_h100.yaml", "--no-verify", "--out-dir", ""), "--out-dir"),
    (("forecast", ""), "SCENARIO"),
    (("histogram", ""), "LOGS..."),
    (("capacity", "llama-3.1-8b", "h100-sxm", "--histogram", ""), "--histogram"),
])
def test_an_empty_path_is_refused_not_read_as_the_current_folder(args, name, tmp_path, monkeypatch):
    """click reads '' as '.': `--out-dir ''` wrote the report into the current folder, and `solve ''`
    was told '.: cannot read as YAML text (IsADirectoryError)'."""
    monkeypatch.chdir(tmp_path)
    args = tuple(str(ROOT / a) if a.startswith("scenarios/") else a for a in args)
    one_line_error(run(*args), 2, f"Invalid value for '{name}'", "an empty path: give a file or folder name.")
    assert leftovers(tmp_path) == []


# ---- writing ---------------------------------------------------------------------------------
def test_an_out_dir_under_a_file_is_bad_input(tmp_path):
    (tmp_path / "afile").write_text("x")
    r = run("solve", scenario(tmp_path), "--out-dir", tmp_path / "afile" / "reports")
    one_line_error(r, 2, "afile/reports: cannot make the output folder: a part of the path is a file")


def test_an_output_folder_name_too_long_for_the_file_system_is_bad_input(tmp_path):
    # (a scenario's name is refused long before: test_a_name_that_cannot_start_the_report_files...)
    folder = tmp_path / ("d" * 300)
    r = run("solve", scenario(tmp_path), "--out-dir", folder)
    one_line_error(r, 2, f"{folder}: cannot make the output folder: the file name is too long")
    assert leftovers(tmp_path) == ["s.yaml"]


@pytest.mark.parametrize("command", ["solve", "forecast"])
def test_a_folder_that_refuses_writes_is_bad_input(tmp_path, monkeypatch, command):
    # (tests may run as root, whom a read-only mode does not stop: make the OS say no)
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("tempfile.mkstemp", refuse)
    text = FORECAST.replace("{PRICES}", "{}")
    r = run(command, scenario(tmp_path, text), "--out-dir", tmp_path / "out")
    one_line_error(r, 2, str(tmp_path / "out"), "cannot write: permission denied")
    assert leftovers(tmp_path / "out") == []


def test_a_folder_whose_file_system_takes_no_new_files_is_not_called_missing(tmp_path, monkeypatch):
    """/proc answers "no such file" to a file created in it: `-o /proc/h.parquet` was told that a folder
    on the path does not exist (an outside probe). The kernel's answer is stood in for, as above."""
    def refuse(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr("tempfile.mkstemp", refuse)
    (tmp_path / "out").mkdir()
    r = run("solve", scenario(tmp_path), "--out-dir", tmp_path / "out")
    one_line_error(r, 2, str(tmp_path / "out"), f"cannot write: the folder {tmp_path / 'out'} takes no new files "
                   "(its file system refused one)")
    assert leftovers(tmp_path / "out") == []
    # a folder that is not there is still said to be missing
    from planner.files import output_error

    gone = tmp_path / "gone" / "h.parquet"
    assert str(output_error(FileNotFoundError(2, "No such file"), gone)).endswith(
        "cannot write: a folder on the path does not exist")
    # a file being written that went before its rename (another process removed it) is said to have gone
    assert str(output_error(FileNotFoundError(2, "No such file"), tmp_path / "h.parquet")).endswith(
        "cannot write: the file being written was removed before it was put in place (by another process, or with "
        "its folder)")


def test_a_killed_runs_temporary_files_are_removed_by_the_next_run(tmp_path):
    from planner import files

    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = out / f".tiny.md.{files._HOST}.{int(dead.stdout)}.abc_123.tmp"
    live = out / f".tiny.md.{files._HOST}.{os.getppid()}.abc_456.tmp"  # a process still running
    foreign = out / ".notes.tmp"  # not a name planner makes
    for p in (stale, live, foreign):
        p.write_text("partial")
    assert run("solve", scenario(tmp_path), "--out-dir", out).exit_code == 0
    assert not stale.exists()
    assert live.exists() and foreign.exists()
    assert {p.name for p in out.iterdir() if p.name.endswith(".tmp")} == {live.name, foreign.name}


def test_atomic_output_turns_a_full_disk_into_bad_input(tmp_path):
    from planner.errors import InputError

    with pytest.raises(InputError, match="cannot write: no space left on the device"), atomic_output(tmp_path / "x.csv"):
        raise OSError(28, "No space left on device")
    assert leftovers(tmp_path) == []


def test_a_name_that_is_not_utf8_is_written_or_refused_by_name(tmp_path):
    """pyarrow takes paths as UTF-8 text: a log named with a Latin-1 byte failed with a traceback
    (UnicodeEncodeError), and so did writing a histogram or a synthetic log under such a name."""
    odd = os.fsdecode(b"\xfe")
    log = _small_log(tmp_path / "plain.csv")
    try:
        named = tmp_path / f"log{odd}.csv"
        named.write_bytes(log.read_bytes())
    except (OSError, UnicodeEncodeError):
        pytest.skip("the file system takes only UTF-8 names")
    one_line_error(run("histogram", named), 2, str(tmp_path / "log\\xfe.csv"),
                   "its name is not UTF-8, and the log and histogram readers (pyarrow) open only UTF-8 names: rename it")
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / f"b{odd}.csv").write_bytes(log.read_bytes())
    one_line_error(run("histogram", folder), 2, str(folder / "b\\xfe.csv"), "its name is not UTF-8")

    # real processes: their "wrote ..." line prints the name as a terminal takes it
    out = tmp_path / f"h{odd}.parquet"
    assert planner_process("histogram", log, "-o", out, capture_output=True).returncode == 0
    parts = tmp_path / "parts"
    parts.mkdir()
    out.rename(parts / "part0.parquet")
    (parts / f".part0{odd}.crc").write_bytes(b"checksum")  # a file pyarrow skips, as the readers do: no matter
    assert json.loads(run("histogram", parts, "--json").stdout)["requests"] == 20
    # what the file is comes first: a log given as a histogram is told so, whatever its name
    one_line_error(run("capacity", "llama-3.1-8b", "h100-sxm", "--histogram", named), 2, str(tmp_path),
                   "is not a Parquet file")
    for suffix in ("parquet", "csv"):
        done = planner_process("synth", "chat", "-n", "10", "-o", tmp_path / f"s{odd}.{suffix}", capture_output=True)
        assert done.returncode == 0 and (tmp_path / f"s{odd}.{suffix}").stat().st_size > 0, done.stderr


def test_histogram_output_equal_to_its_input_is_refused(tmp_path):
    log = tmp_path / "log.parquet"
    assert run("synth", "chat", "-n", 30, "-o", log).exit_code == 0
    before = log.read_bytes()
    r = run("histogram", log, "-o", log)
    one_line_error(r, 2, str(log), "is also an input of this command")
    assert log.read_bytes() == before


def test_histogram_output_named_as_a_text_format_is_refused(tmp_path):
    log = tmp_path / "log.parquet"
    assert run("synth", "chat", "-n", 30, "-o", log).exit_code == 0
    r = run("histogram", log, "-o", tmp_path / "h.csv")
    one_line_error(r, 2, "Invalid value for -o/--output:", "h.csv: a histogram file is Parquet; name it with .parquet")
    assert leftovers(tmp_path) == ["log.parquet"]


def test_an_output_onto_a_pipe_is_refused_and_the_pipe_stays(tmp_path):
    fifo = tmp_path / "out.lp"
    os.mkfifo(fifo)
    r = run("solve", scenario(tmp_path), "--no-report", "--write-lp", fifo)
    one_line_error(r, 2, str(fifo), "output path is a device, pipe or socket, not a file; give a file name")
    assert fifo.is_fifo()


def test_an_output_through_a_symlink_writes_the_file_it_names_and_keeps_the_link(tmp_path):
    target = tmp_path / "target.lp"
    target.write_text("old")
    link = tmp_path / "link.lp"
    link.symlink_to(target)
    with atomic_output(link) as tmp:
        tmp.write_text("new")
    assert link.is_symlink() and target.read_text() == "new"


def test_solve_write_lp_onto_the_scenario_is_refused(tmp_path):
    path = scenario(tmp_path)
    before = path.read_text()
    r = run("solve", path, "--no-report", "--write-lp", path)
    one_line_error(r, 2, "is also an input of this command")
    assert path.read_text() == before


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_device_read_as_an_input_file_is_refused_at_the_limit_not_read_whole():
    """A device states 0 bytes: the size limit holds by reading one byte past it (it filled the
    memory before: 6 GB in 8 s)."""
    r = run("kv", "llama-3.1-8b", "--catalog", "/dev/zero")
    one_line_error(r, 2, "/dev/zero: more than 16,777,216 bytes; a YAML file here is at most 16,777,216")


@pytest.mark.parametrize("value", ['"off"', '"n"', "0", '"false"'])
def test_a_boolean_is_true_or_false_not_a_string_or_number(tmp_path, value):
    """verify: "off" was read as false and switched certification off without a word."""
    r = run("solve", scenario(tmp_path, BASE + f"verify: {value}\n"), "--no-report")
    one_line_error(r, 2, "s.yaml: verify: Input should be a valid boolean")


def test_capacity_of_a_histogram_at_a_limit_inside_a_bin_is_refused(tmp_path):
    """--context-limit 6143 left out the whole (4096, 6144] bin (1,612 requests, not the 23 above
    6,143) while memory was sized at 6,143; a scenario's context_limit is refused the same way."""
    hist = tmp_path / "conv.hist.parquet"
    assert run("histogram", ROOT / "data" / "samples" / "azure_conv_2023_sample.csv", "--preset", "azure",
               "-o", hist).exit_code == 0
    r = run("capacity", "llama-3.1-8b", "h100-sxm", "--histogram", hist, "--context-limit", "6143")
    one_line_error(r, 2, "'--context-limit': with --histogram, the context limit 6143 is not a histogram edge; "
                   "nearest: 4096, 6144, 8192")
    r = run("capacity", "llama-3.1-8b", "h100-sxm", "--histogram", hist, "--context-limit", "6144")
    assert r.exit_code == 0 and "note: 23 request(s) exceed the 6,144-token limit" in r.stderr
    # a run that then fails says its error alone: the note of what it left out came before it (two lines)
    r = run("capacity", "llama-3.1-8b", "h100-sxm", "--histogram", hist, "--context-limit", "2048",
            "--shared-prefix-tokens", "1024")
    one_line_error(r, 2, "--shared-prefix-tokens")
    # the model's own limit, taken by default, is no stated cut: Qwen3's 40,960 serves the bins below it
    assert run("capacity", "qwen3-32b", "h100-sxm", "--tp", "2", "--histogram", hist).exit_code == 0


def test_a_command_started_with_stdout_closed_ends_without_a_traceback():
    """planner ... >&- : Python's sys.stdout is None, and the final flush raised AttributeError."""
    done = subprocess.run([sys.executable, "-m", "planner", "kv", "llama-3.1-8b"], cwd=ROOT, capture_output=False,
                          stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.close(1), check=False)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (a device whose writes fail: disk full)")
def test_a_full_standard_output_is_one_line_and_the_written_reports_stay_whole(tmp_path):
    """`solve --json > plan.json` on a full disk ended in a traceback (OSError, exit 1)."""
    def into_full(*args):
        with open("/dev/full", "w") as full:
            return planner_process(*args, stdout=full, stderr=subprocess.PIPE, text=True)

    done = into_full("solve", "scenarios/chat_8b_h100.yaml", "--no-verify", "--json", "--out-dir", str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert done.stderr == "error: standard output: cannot write what the command prints (No space left on device)\n"
    assert (tmp_path / "chat_8b_h100.md").read_text(encoding="utf-8").startswith("# Capacity plan: chat_8b_h100")
    assert into_full("kv", "llama-3.1-8b").returncode == 2


def test_a_command_started_with_stderr_closed_writes_its_report_and_keeps_errors_off_stdout(tmp_path):
    """planner ... 2>&- : Python's sys.stderr is None. The progress bars asked it whether it is a
    terminal (AttributeError: exit 1, no report), and print(..., file=None) and
    traceback.print_exc write to stdout (planner.startup.standard_streams)."""
    def closed_stderr(*args):
        return planner_process(*args, stdout=subprocess.PIPE, text=True, preexec_fn=lambda: os.close(2))

    done = closed_stderr("solve", "scenarios/chat_8b_h100.yaml", "--no-verify", "--out-dir", str(tmp_path))
    assert done.returncode == 0 and (tmp_path / "chat_8b_h100.md").is_file()
    assert done.stdout.startswith("chat_8b_h100: $")
    bad = closed_stderr("solve", str(tmp_path / "missing.yaml"))
    assert bad.returncode == 2 and bad.stdout == ""
    traced = closed_stderr("--debug", "solve", str(tmp_path / "missing.yaml"))  # the traceback asked for
    assert traced.returncode == 2 and traced.stdout == ""


def test_a_ctrl_c_outside_clicks_handling_ends_as_one_inside_it(monkeypatch, capsys):
    """A Ctrl-C before click parses the command line (or after the command) printed a traceback."""
    import planner.cli

    def interrupted():
        raise KeyboardInterrupt

    def leave(code):
        raise SystemExit(code)

    monkeypatch.setattr(planner.cli, "main", interrupted)
    monkeypatch.setattr(planner.cli.os, "_exit", leave)
    with pytest.raises(SystemExit) as ended:
        planner.cli.run()
    assert ended.value.code == 1 and capsys.readouterr().err == "\nAborted!\n"


@pytest.mark.skipif(not Path("/dev/stdin").exists(), reason="no /dev/stdin here")
def test_a_scenario_read_through_a_pipe_is_read_once():
    """`planner solve <(...)` and `... | planner solve /dev/stdin`: the command asks whether the file
    is a fleet file, then loads it; the pipe's second reading was empty ("a scenario is a YAML
    mapping"). A pipe's bytes are kept from its first reading."""
    done = planner_process("solve", "/dev/stdin", "--no-verify", "--no-report", input=BASE,
                           capture_output=True, text=True, env={**os.environ, "PLANNER_WORKERS": "0"})
    assert done.returncode == 0 and done.stdout.startswith("tiny: $"), done.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_pipe_s_bytes_are_kept_for_one_command_only(tmp_path):
    """Two commands in one process (a test's, a notebook's) reading the same named pipe each get what
    was written for them: the bytes a command keeps are forgotten when it ends."""
    import threading

    from click.testing import CliRunner

    from planner.cli import main

    fifo = tmp_path / "scenario.yaml"
    os.mkfifo(fifo)
    outputs = []
    for name in ("first", "second"):
        writer = threading.Thread(target=fifo.write_text, args=(BASE.replace("name: tiny", f"name: {name}"),))
        writer.start()
        outputs.append(CliRunner().invoke(main, ["solve", str(fifo), "--no-verify", "--no-report"]))
        writer.join(timeout=30)
    assert [r.exit_code for r in outputs] == [0, 0], [r.output for r in outputs]
    assert outputs[0].output.startswith("first: $") and outputs[1].output.startswith("second: $")


def test_a_ctrl_c_inside_compiled_code_ends_as_any_ctrl_c_does(monkeypatch, capsys):
    """numba reports a Ctrl-C inside the simulator's kernel as a SystemError raised from the
    KeyboardInterrupt: it printed sixty lines of traceback before exit 1."""
    import planner.cli
    import planner.cli.kv_cmd

    def kernel(*args, **kwargs):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise SystemError("CPUDispatcher(<function run>) returned a result with an exception set") from exc

    def leave(code):
        raise SystemExit(code)

    monkeypatch.setattr(planner.cli.kv_cmd, "model_tp_problem", kernel)
    monkeypatch.setattr(planner.cli.os, "_exit", leave)
    monkeypatch.setattr(sys, "argv", ["planner", "kv", "llama-3.1-8b", "--tokens", "1000"])
    with pytest.raises(SystemExit) as ended:
        planner.cli.run()
    err = capsys.readouterr().err
    assert ended.value.code == 1 and err.endswith("Aborted!\n") and "Traceback" not in err, err


def test_a_system_error_of_another_cause_keeps_its_traceback(monkeypatch):
    """Only an interrupt is read so: any other SystemError is a fault, and keeps its traceback."""
    import planner.cli.kv_cmd

    def broken(*args, **kwargs):
        raise SystemError("a fault")

    monkeypatch.setattr(planner.cli.kv_cmd, "model_tp_problem", broken)
    with pytest.raises(SystemError, match="a fault"):
        planner.cli.main(["kv", "llama-3.1-8b", "--tokens", "1000"])


_CTRL_C_IN_HIGHSPY = """
import importlib.machinery
import sys


class CtrlC:  # one Ctrl-C, landing while highspy's module runs (as its import takes a while)
    pressed = False

    def find_spec(self, name, path=None, target=None):
        if name != "highspy":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        load = spec.loader.exec_module

        def interrupted(module):
            if not CtrlC.pressed:
                CtrlC.pressed = True
                raise KeyboardInterrupt
            load(module)

        spec.loader.exec_module = interrupted
        return spec


sys.meta_path.insert(0, CtrlC())
sys.argv = ["planner", "solve", "scenarios/chat_8b_h100.yaml", "--no-verify", "--out-dir", sys.argv[1]]
from planner.entry import run
run()
"""


def test_a_ctrl_c_while_highspy_loads_ends_the_run_not_blames_a_missing_package(tmp_path):
    """PuLP imports highspy under a bare except: a Ctrl-C there read as "needs the highspy package"
    (exit 2). planner.pulp_import loads highspy first."""
    done = subprocess.run([sys.executable, "-c", _CTRL_C_IN_HIGHSPY, str(tmp_path / "out")], cwd=ROOT,
                          capture_output=True, text=True, check=False, env={**os.environ, "PLANNER_WORKERS": "0"})
    assert done.returncode == 1 and done.stderr.endswith("Aborted!\n") and "highspy" not in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def test_histogram_output_inside_an_input_folder_is_refused(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    assert run("synth", "chat", "-n", 30, "-o", folder / "part-0.parquet").exit_code == 0
    r = run("histogram", folder, "-o", folder / "h.parquet")
    one_line_error(r, 2, "inside the input folder 'logs'")
    assert leftovers(folder) == ["part-0.parquet"]


def test_a_failing_summary_leaves_no_histogram_file(tmp_path):
    log = tmp_path / "log.csv"
    log.write_text("prompt_tokens,output_tokens,timestamp_ms\n10,5,1\n10,5,1700000060000\n")
    r = run("histogram", log, "--time-unit", "ms", "-o", tmp_path / "h.parquet")
    one_line_error(r, 2, str(log), "arrival times span 54 years")
    assert leftovers(tmp_path) == ["log.csv"]


def test_import_hf_refuses_an_integer_past_float_range_before_writing(tmp_path):
    # (also before a loop over num_hidden_layers could run for ever)
    config = json.loads((HF / "llama-3.1-8b.json").read_text())
    config["hidden_size"] = 10**400
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    r = run("catalog", "import-hf", path, "--name", "x", "--output", tmp_path / "x.yaml")
    one_line_error(r, 2, "config.json: hidden_size: expected an integer <= 16,777,216 (got 100000000000... (401 digits))")
    assert leftovers(tmp_path) == ["config.json"]


# ---- numbers that pass `gt=0` but are not numbers of their kind -----------------------------
@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("gpus", "[{id: h100-sxm, price_usd_per_hour: .nan}]", "gpus[0].price_usd_per_hour: Input should be a finite number"),
        ("gpus", "[{id: h100-sxm, price_usd_per_hour: .inf}]", "gpus[0].price_usd_per_hour: Input should be a finite number"),
        ("gpus", "[{id: h100-sxm, max_gpus: -1}]", "gpus[0].max_gpus: Input should be greater than or equal to 0"),
        ("gpus", "[{id: h100-sxm, max_gpus: 18446744073709551616}]", "gpus[0].max_gpus: Input should be less than or equal to 100000000"),
        ("min_replicas_per_pool", "18446744073709551616", "min_replicas_per_pool: Input should be less than or equal to 10000"),
        ("min_replicas_per_pool", "on", "min_replicas_per_pool: Input should be a number, not true"),
        ("traffic", "{source: {constant: {prompt_tokens: 9223372036854775808, output_tokens: 1}}}",
         "traffic.source.constant.prompt_tokens: Input should be less than or equal to 16777216"),
        ("traffic", "{source: {constant: {prompt_tokens: 10, output_tokens: 1}}, growth: 1e12}",
         "traffic.growth: Input should be less than or equal to 1000"),
        ("traffic", "{source: {constant: {prompt_tokens: 10, output_tokens: 1}}, peak: {method: explicit, rps: 1e300}}",
         "traffic.peak.rps: Input should be less than or equal to 10000000"),
        ("traffic", "{source: {constant: {prompt_tokens: 10, output_tokens: 1}}, peak: {method: explicit, rps: .inf}}",
         "traffic.peak.rps: Input should be a finite number"),
        ("traffic", "{source: {synthetic: {name: chat, seed: -1}}}", "traffic.source.synthetic.seed: Input should be greater than or equal to 0"),
        ("overhead_gib", ".nan", "overhead_gib: Input should be a finite number"),
        ("tp", "[1099511627776]", "tp[0]: Input should be less than or equal to 1024"),
    ],
)
def test_numbers_must_be_finite_and_physically_bounded(tmp_path, field, value, expected):
    lines = BASE.splitlines()
    if field == "traffic":
        lines = [ln for ln in lines if ln != "traffic:" and not ln.startswith("  ")]
    else:
        lines = [ln for ln in lines if not ln.startswith(f"{field}:")]
    r = run("solve", scenario(tmp_path, "\n".join([*lines, f"{field}: {value}"]) + "\n"), "--out-dir", tmp_path / "out")
    one_line_error(r, 2, "s.yaml", expected)
    assert leftovers(tmp_path / "out") == []


def test_a_plan_larger_than_any_fleet_is_refused_quickly(tmp_path):
    text = BASE.replace("  peak: {method: explicit, rps: 4}", "  peak: {method: explicit, rps: 1e7}\n  growth: 1000")
    r = run("solve", scenario(tmp_path, text), "--out-dir", tmp_path / "out")
    one_line_error(r, 3, "class 'all' needs", "more than the 100,000,000 that bound any fleet")
    assert leftovers(tmp_path / "out") == []


def test_an_empty_prompt_is_refused_as_engines_refuse_it(tmp_path):
    path = scenario(tmp_path, BASE.replace("prompt_tokens: 1000", "prompt_tokens: 0"))
    r = run("solve", path, "--out-dir", tmp_path / "out")
    one_line_error(r, 2, f"{path}: traffic.source.constant.prompt_tokens: Input should be greater than or equal to 1 (got 0)")
    assert leftovers(tmp_path / "out") == []
    r = run("capacity", "llama-3.1-8b", "h100-sxm", "--prompt-tokens", 0, "--output-tokens", 1)
    one_line_error(r, 2, "Invalid value for '--prompt-tokens': 0 is not in the range 1<=x<=")


# ---- the simulator and a prefix longer than some prompts ---------------------------------
def test_sampled_prompts_are_longer_than_the_shared_prefix():
    hist = Histogram.from_arrays(np.array([100, 2_000, 6_000]), np.array([50, 50, 50]))
    reqs = sample_requests(hist, 1.0, 1_000, 0, max_total_tokens=8_192,
                           min_prompt_tokens=shortest_prompt_tokens(4_096, 16))
    assert int(reqs.prompt_tokens.min()) == 4_097
    assert int((reqs.prompt_tokens + reqs.output_tokens).max()) <= 8_192
    plain = sample_requests(hist, 1.0, 1_000, 0, max_total_tokens=8_192)
    assert set(np.unique(plain.prompt_tokens)) > {4_097} or int(plain.prompt_tokens.min()) < 4_096


def test_the_shipped_trace_with_a_few_prompts_shorter_than_the_prefix_verifies(tmp_path):
    # a 16-token prefix: about 0.5% of the trace's prompts are shorter (planned as the prefix
    # alone, simulated and replayed lengthened past it); 4,096 tokens is longer than half of them
    text = (ROOT / "scenarios" / "azure_conv_trace.yaml").read_text().replace("../data/", f"{ROOT / 'data'}/")
    r = run("simulate", scenario(tmp_path, text.replace("  growth: 1.5", "  growth: 1.5\n  shared_prefix_tokens: 16")),
            "--requests", 2_000, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["pools"]
    r = run("simulate", scenario(tmp_path, text.replace("  growth: 1.5", "  growth: 1.5\n  shared_prefix_tokens: 4096")))
    one_line_error(r, 2, "traffic: shared_prefix_tokens: a shared prefix of 4,096 tokens is at least as long as 1%")


# ---- parsers: nesting, size, duplicates ----------------------------------------------------
@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("description: " + "[" * 3000 + "]" * 3000, "line 11: invalid YAML: nested deeper than 64 levels"),
        ("min_replicas_per_pool: " + "1" * 5000, "line 11: invalid YAML: cannot read the value '11111111111111111111... (5,000 characters)'"),
        ("name: other", "line 11: invalid YAML: key 'name' appears twice in one mapping (first on line 1)"),
        ("x: &a [*a]", "line 11: invalid YAML: an alias refers to the value that contains it"),
        ("x: 2027-13-45", "line 11: invalid YAML: cannot read the value '2027-13-45': month must be in 1..12"),
        # half of PyYAML's sentence alone read "invalid YAML: but found another document"
        ("---\nname: again", "line 11: invalid YAML: expected a single document in the stream, but found another document"),
    ],
)
def test_yaml_that_parsers_choke_on_is_bad_input(tmp_path, extra, expected):
    r = run("solve", scenario(tmp_path, BASE + extra + "\n"), "--no-report")
    one_line_error(r, 2, f"s.yaml: {expected}")


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path):
    lines = ["bomb:", "  - &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"  - &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 9)]  # 10**9 values
    text = BASE.replace("model: llama-3.1-8b", "\n".join(lines) + "\nmodel: {config_json: c.json, name: *l8}")
    r = run("solve", scenario(tmp_path, text), "--no-report")
    one_line_error(r, 2, "s.yaml: line", "invalid YAML: aliases expand this to more than 1,000,000 values")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("{config_json: null}", "model: config_json: Input should be a valid string"),
        ("{config_json: c.json, name: [a, b]}", "model: name: Input should be a valid string"),
        ("{config_json: c.json, params_total: -3}", "model: params_total: Input should be greater than 0"),
    ],
)
def test_a_config_json_model_spec_is_validated(tmp_path, spec, expected):
    r = run("solve", scenario(tmp_path, BASE.replace("model: llama-3.1-8b", f"model: {spec}")), "--no-report")
    one_line_error(r, 2, f"s.yaml: {expected}")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": ' + "[" * 5000 + "]" * 5000 + "}", "config.json: invalid JSON: nested too deeply"),
        ('{"hidden_size": ' + "1" * 5000 + "}", "config.json: invalid JSON: Exceeds the limit (4300 digits)"),
    ],
)
def test_config_json_that_parsers_choke_on_is_bad_input(tmp_path, text, expected):
    (tmp_path / "config.json").write_text(text)
    one_line_error(run("catalog", "import-hf", tmp_path / "config.json", "--name", "x"), 2, expected)


def test_a_jsonl_line_nested_past_pyarrows_stack_is_one_excluded_row(tmp_path):
    # pyarrow's JSON parser crashed the process (SIGSEGV) at this depth: run it in a child
    path = tmp_path / "log.jsonl"
    deep = "[" * 100_000 + "]" * 100_000
    path.write_text(
        '{"prompt_tokens": 10, "output_tokens": 5}\n'
        f'{{"prompt_tokens": 10, "output_tokens": 5, "x": {deep}}}\n'
        '{"prompt_tokens": ' + "1" * 5000 + ', "output_tokens": 5}\n'
    )
    done = subprocess.run([sys.executable, "-m", "planner", "histogram", str(path), "--json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["requests"] == 1
    assert out["excluded_rows"] == {"null": 0, "negative": 0, "non_numeric": 2, "too_long": 0, "empty_prompt": 0}


def test_a_jsonl_row_naming_a_column_twice_is_excluded_not_read_as_its_last_value(tmp_path):
    # The json module would keep the last value (a 999,999-token prompt here); pyarrow refuses the
    # chunk. A key the planner does not read, named twice, leaves its row usable.
    path = tmp_path / "log.jsonl"
    path.write_text(
        '{"prompt_tokens": 10, "output_tokens": 5}\n'
        '{"prompt_tokens": 12, "output_tokens": 5, "prompt_tokens": 999999}\n'
        '{"prompt_tokens": 14, "output_tokens": 5, "user": "a", "user": "b"}\n'
        '{"prompt_tokens": 16, "output_tokens": 5, "meta": {"k": 1, "k": 2}}\n'
    )
    r = run("histogram", path, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["requests"] == 3
    assert out["excluded_rows"] == {"null": 0, "negative": 0, "non_numeric": 1, "too_long": 0, "empty_prompt": 0}
    assert out["prompt_tokens"]["max"] == 16


@pytest.mark.parametrize("values", [["10", "20", "10"], [10, 20, 10]])
def test_a_dictionary_encoded_parquet_token_column_is_numeric(tmp_path, values):
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"prompt_tokens": pa.array(values).dictionary_encode(),
                             "output_tokens": pa.array(["5", "5", "5"]).dictionary_encode()}), path)
    r = run("histogram", path, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["requests"] == 3 and out["prompt_tokens"]["max"] == 20


# ---- messages --------------------------------------------------------------------------------
def test_a_bad_field_of_a_gpu_entry_is_named_not_the_union_member(tmp_path):
    r = run("solve", scenario(tmp_path, BASE.replace("gpus: [h100-sxm]", "gpus: [{id: h100-sxm, max_gpus: -2}]")),
            "--no-report")
    line = one_line_error(r, 2, "s.yaml: gpus[0].max_gpus: Input should be greater than or equal to 0 (got -2)")
    assert ".str" not in line and "GPUCandidate" not in line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["solve", "--bogus", "x.yaml"], "error: No such option '--bogus'. (see 'planner solve --help')"),
        (["synth", "chat", "-n", "10", "--seed", "-1", "-o", "x.csv"],
         "error: Invalid value for '--seed': -1 is not in the range 0<=x<=18446744073709551615."),
        (["synth", "chat", "-n", "10", "--rate-rps", "nan", "-o", "x.csv"], "error: Invalid value for '--rate-rps': 'nan' is not a finite number."),
        (["capacity", "llama-3.1-8b", "h100-sxm", "--gpu-memory-utilization", "inf"], "error: Invalid value for '--gpu-memory-utilization'"),
        (["kv"], "error: Missing argument 'MODEL'. (see 'planner kv --help')"),
        # click's parser raises these without the command's context: they pointed to 'planner --help'
        (["solve", "--out-dir"], "error: Option '--out-dir' requires an argument. (see 'planner solve --help')"),
        (["solve", "x.yaml", "--no-verify=1"], "error: Option '--no-verify' does not take a value. (see 'planner solve --help')"),
        (["catalog", "gpus", "--catalog"], "error: Option '--catalog' requires an argument. (see 'planner catalog gpus --help')"),
    ],
)
def test_usage_errors_are_one_line(args, expected):
    r = run(*args)
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [r.stderr.strip()] and r.stderr.startswith(expected), r.stderr


def test_the_infeasible_message_names_the_class_and_never_empty_caps(tmp_path):
    from planner.inputs import plan_scenario
    from planner.plan_search import infeasible_message

    plan = plan_scenario(scenario(tmp_path), explore=False)
    message = infeasible_message(plan.classes, plan.evaluations, {})
    assert "()" not in message and "'all (≤ 8,192 tokens)' 4.8 req/s" in message
    capped = infeasible_message(plan.classes, plan.evaluations, {"h100-sxm": 0})
    assert capped == ("class 'all (≤ 8,192 tokens)' needs 4.8 req/s but the inventory caps (h100-sxm ≤ 0 GPUs) "
                      "allow at most 0 req/s")
    # a cap on a type that serves nothing here (no config of it in the candidates) is not named
    capped = infeasible_message(plan.classes, plan.evaluations, {"h100-sxm": 0, "a100-80gb": 4})
    assert capped == ("class 'all (≤ 8,192 tokens)' needs 4.8 req/s but the inventory caps (h100-sxm ≤ 0 GPUs) "
                      "allow at most 0 req/s")
    # a cap of some GPUs, below what one replica takes, is named as the reason (not the load)
    sed = BASE.replace("gpus: [h100-sxm]", "gpus: [{id: h100-sxm, max_gpus: 3}]").replace("tp: [1]", "tp: [4]")
    one_line_error(run("solve", scenario(tmp_path, sed, name="wide.yaml"), "--no-verify", "--no-report"), 3,
                   "the inventory caps (h100-sxm ≤ 3 GPUs) allow at most 0 req/s; one replica takes more GPUs than its "
                   "type's cap: h100-sxm tp 4 > 3 GPUs (lower tp or raise the cap)")
    # where a narrower tp was offered and serves nothing (a 70B model on one GPU), only the cap can move
    seventy = sed.replace("model: llama-3.1-8b", "model: llama-3.1-70b").replace("max_gpus: 3", "max_gpus: 1")
    one_line_error(run("solve", scenario(tmp_path, seventy.replace("tp: [4]", "tp: [1, 2]"), name="w70.yaml"),
                       "--no-verify", "--no-report"), 3,
                   "h100-sxm tp 2 > 1 GPU (raise the cap: no narrower tp offered serves the class)")
    # each capped type its own advice: b200 offered no tp within its cap, h100-sxm's tp 2 cannot hold the model
    two = seventy.replace("gpus: [{id: h100-sxm, max_gpus: 1}]",
                          "gpus: [{id: b200, max_gpus: 1}, {id: h100-sxm, max_gpus: 3}]").replace("tp: [4]", "tp: [2, 4]")
    one_line_error(run("solve", scenario(tmp_path, two.replace("context_limit: 8192", "context_limit: 32768"),
                                         name="two.yaml"), "--no-verify", "--no-report"), 3,
                   "b200 tp 2 > 1 GPU (lower tp or raise the cap), h100-sxm tp 4 > 3 GPUs (raise the cap: no narrower "
                   "tp offered serves the class)")


# ---- found by the property tests (tests/test_fuzz_*.py) ------------------------------------
@pytest.mark.parametrize(
    ("text", "requests", "excluded", "prompt_max"),
    [
        ("prompt_tokens,output_tokens\n16777216,0\n", 1, {"null": 0, "negative": 0, "non_numeric": 0, "too_long": 0, "empty_prompt": 0}, 16_777_216),
        # each count within 2**24, their sum past it: no request is that long either
        ("prompt_tokens,output_tokens\n16777216,5\n9,5\n", 1,
         {"null": 0, "negative": 0, "non_numeric": 0, "too_long": 1, "empty_prompt": 0}, 9),
        # longer than any context window: one such row's square alone would overflow a cell's sums
        ("prompt_tokens,output_tokens\n5000000000,5\n16777217,5\n9,5\n", 1,
         {"null": 0, "negative": 0, "non_numeric": 0, "too_long": 2, "empty_prompt": 0}, 9),
        ("prompt_tokens,output_tokens\n0x10,5\n7,5\n", 1, {"null": 0, "negative": 0, "non_numeric": 1, "too_long": 0, "empty_prompt": 0}, 7),
        ("prompt_tokens,output_tokens\n0x10,5\n", 0, None, None),  # hex alone: no decimal integer
    ],
)
def test_token_counts_are_exact_and_decimal(tmp_path, text, requests, excluded, prompt_max):
    path = tmp_path / "log.csv"
    path.write_text(text)
    r = run("histogram", path, "--json")
    if requests == 0:
        one_line_error(r, 2, "no usable row (excluded rows: null 0, negative 0, non_numeric 1, too_long 0, empty_prompt 0; "
                             f"{path}: by column: prompt_tokens 1)")
        return
    out = json.loads(r.stdout)
    assert (out["requests"], out["excluded_rows"], out["prompt_tokens"]["max"]) == (requests, excluded, prompt_max)


def test_jsonl_integers_past_2_53_stay_exact_beside_fractions(tmp_path):
    # pyarrow reads the column as float64 (9007199254740993 -> ...992, refused as inexact);
    # the json module keeps the integer, whatever the other rows hold
    path = tmp_path / "log.jsonl"
    # (the exact integer is fine, so the row counts under its negative output, not as non_numeric)
    path.write_text('{"prompt_tokens": 9007199254740993, "output_tokens": -1}\n{"prompt_tokens": 12.0, "output_tokens": 1}\n')
    r = run("histogram", path, "--json")
    assert json.loads(r.stdout)["excluded_rows"] == {"null": 0, "negative": 1, "non_numeric": 0, "too_long": 0, "empty_prompt": 0}, r.output


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_nan_text_is_missing_in_every_format(tmp_path, fmt):
    path = tmp_path / f"log.{fmt}"
    rows = {"prompt_tokens": ["nan", "5", "6"], "output_tokens": ["1", "1", "1"],
            "timestamp_ms": ["1700000000000", "nan", "1700000000000"]}
    if fmt == "jsonl":
        path.write_text("".join(json.dumps({k: v[i] for k, v in rows.items()}) + "\n" for i in range(3)))
    else:
        pq.write_table(pa.table(rows), path)
    out = json.loads(run("histogram", path, "--json").stdout)
    assert out["excluded_rows"] == {"null": 2, "negative": 0, "non_numeric": 0, "too_long": 0, "empty_prompt": 0}


def test_a_time_too_large_to_have_a_minute_is_one_excluded_row(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("prompt_tokens,output_tokens,timestamp_ms\n1,1,1e300\n1,1,1700000000000\n")
    r = run("histogram", path, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["excluded_rows"] == {"null": 0, "negative": 0, "non_numeric": 1, "too_long": 0, "empty_prompt": 0}


def test_a_row_with_an_empty_prompt_is_excluded_and_counted_not_planned(tmp_path):
    """No engine serves a prompt of zero tokens (vLLM: "The decoder prompt cannot be empty"): a log's
    row with one is a failed or mislogged request, counted under empty_prompt. A row with another
    problem as well counts under that one; an empty output stays a request."""
    path = tmp_path / "log.csv"
    path.write_text("prompt_tokens,output_tokens\n0,5\n0,-1\n10,0\n12,3\n")
    out = json.loads(run("histogram", path, "--json").stdout)
    assert out["requests"] == 2
    assert out["excluded_rows"] == {"null": 0, "negative": 1, "non_numeric": 0, "too_long": 0, "empty_prompt": 1}
    only = tmp_path / "only.csv"
    only.write_text("prompt_tokens,output_tokens\n0,5\n")
    one_line_error(run("histogram", only, "--json"), 2, "no usable row (excluded rows: null 0, negative 0, "
                   "non_numeric 0, too_long 0, empty_prompt 1")
    # A histogram file written before (or by another producer) may hold them: refused, not planned.
    hist = tmp_path / "old.hist.parquet"
    write_histogram(Histogram.from_arrays(np.array([0, 0, 12]), np.array([5, 6, 3])), hist)
    one_line_error(run("histogram", hist, "--json"), 2, f"{hist}: 2 request(s) with an empty prompt (0 tokens), "
                   "which no engine serves; rebuild the file from the logs with planner histogram")
    one_line_error(run("capacity", "llama-3.1-8b", "h100-sxm", "--histogram", hist), 2, "2 request(s) with an empty prompt")


def test_a_histogram_file_with_a_zero_length_and_the_open_bin_reads_back(tmp_path):
    log, hist = tmp_path / "log.csv", tmp_path / "h.parquet"
    log.write_text("prompt_tokens,output_tokens\n16777216,0\n")
    assert run("histogram", log, "-o", hist).exit_code == 0
    r = run("histogram", hist, "--json")
    assert r.exit_code == 0, repr(r.exception)
    assert json.loads(r.stdout)["prompt_tokens"]["max"] == 16_777_216


def test_an_infeasible_scenario_among_several_is_named(tmp_path):
    good = scenario(tmp_path, name="good.yaml")
    bad = scenario(tmp_path, BASE.replace("model: llama-3.1-8b", "model: llama-3.1-70b"), name="bad.yaml")
    r = run("solve", good, bad, "--no-report")
    one_line_error(r, 3, f"{bad}: class 'all (≤ 8,192 tokens)' without a split cannot be served")


def test_an_infeasible_scenario_after_a_good_one_leaves_no_report(tmp_path):
    good = scenario(tmp_path, name="good.yaml")
    bad = scenario(tmp_path, BASE.replace("name: tiny", "name: big").replace("model: llama-3.1-8b", "model: llama-3.1-70b"),
                   name="bad.yaml")
    r = run("solve", good, bad, "--out-dir", tmp_path / "out")
    one_line_error(r, 3, f"{bad}: class 'all (≤ 8,192 tokens)' without a split cannot be served")
    assert leftovers(tmp_path / "out") == []


def test_a_histogram_of_which_nothing_fits_the_context_limit_is_one_line_saying_so(tmp_path):
    hist = tmp_path / "long.hist.parquet"
    write_histogram(Histogram.from_arrays(np.array([200_000, 150_000]), np.array([10, 10])), hist)
    one_line_error(run("capacity", "llama-3.1-8b", "h100-sxm", "--histogram", hist), 2,
                   f"{hist}: no request within the context limit: all 2 exceed 131,072 tokens")


# Compared without case: a case-insensitive file system (macOS, Windows) would merge Tiny.md and tiny.md.
@pytest.mark.parametrize("second_name", ["tiny", "Tiny"])
def test_two_scenarios_of_one_name_are_refused_before_one_report_overwrites_the_other(tmp_path, second_name):
    first = scenario(tmp_path, name="a.yaml")
    second = scenario(tmp_path, BASE.replace("rps: 4", "rps: 8").replace("name: tiny", f"name: {second_name}"),
                      name="b.yaml")
    r = run("solve", first, second, "--out-dir", tmp_path / "out")
    one_line_error(r, 2, f"{second}: writes {second_name}.md, as {first} does; one report's files would overwrite the "
                         "other's: rename one")
    assert leftovers(tmp_path / "out") == []


def test_one_scenario_given_twice_is_refused_before_its_report_is_written_twice(tmp_path):
    path = scenario(tmp_path)
    r = run("solve", path, tmp_path / "." / path.name, "--out-dir", tmp_path / "out")
    one_line_error(r, 2, f"{tmp_path / '.' / path.name}: is given twice on the command line")
    assert leftovers(tmp_path / "out") == []


def test_a_scenario_named_like_a_fleet_service_is_refused_before_its_figures_overwrite_the_services(tmp_path):
    """Fleet m's service a draws m_a_*.png, the names of scenario m_a's figures."""
    service = BASE.replace("name: tiny", "name: a").replace("\n", "\n    ").rstrip()
    fleet = scenario(tmp_path, f"name: m\nservices:\n  - {service}\n", name="m.yaml")
    alone = scenario(tmp_path, BASE.replace("name: tiny", "name: m_a"), name="m_a.yaml")
    r = run("solve", fleet, alone, "--out-dir", tmp_path / "out")
    one_line_error(r, 2, f"{alone}: writes m_a_ttft_target.png, as service 'a' of {fleet} does; one report's files "
                         "would overwrite the other's: rename one")
    assert leftovers(tmp_path / "out") == []


@pytest.mark.parametrize("name", ["..", ".hidden", "x" * 101, "a/b"])
def test_a_name_that_cannot_start_the_report_files_is_refused_where_the_scenario_says_it(tmp_path, name):
    path = scenario(tmp_path, BASE.replace("name: tiny", f"name: '{name}'"))
    r = run("solve", path, "--out-dir", tmp_path / "out")
    one_line_error(r, 2, f"{path}: name: expected letters, digits, '_', '-' and '.', not starting with "
                         "'.', at most 100 characters: the name starts the report's file names")
    assert leftovers(tmp_path / "out") == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("  peak: {method: explicit, rps: 1e-300}", "traffic.peak.rps: Input should be greater than or equal to 0.000001"),
        ("catalog: {gpus: {h100-sxm: {dense_tflops: {bf16: 1e-300}}}}",
         "gpus.h100-sxm.dense_tflops.bf16: Input should be greater than or equal to 0.1"),
    ],
)
def test_vanishing_rates_are_refused(tmp_path, change, expected):
    text = BASE.replace("  peak: {method: explicit, rps: 4}", change) if change.startswith("  ") else BASE + change + "\n"
    one_line_error(run("solve", scenario(tmp_path, text), "--no-report"), 2, expected)


def test_a_trickle_of_traffic_is_planned_not_a_root_finder_error(tmp_path):
    """The least peak the bounds allow (4 requests/s x growth 2.5e-7 = 1e-6) lies far below the smallest
    batch the root finder brackets, and is planned; growth 1e-300, once planned too (at $1e300 per
    million tokens), is past the bound and refused (test_demand_grown_below_the_least_rate_is_refused)."""
    for growth, code in (("2.5e-7", 0), ("1e-300", 2)):
        text = BASE.replace("  peak: {method: explicit, rps: 4}", f"  peak: {{method: explicit, rps: 4}}\n  growth: {growth}")
        r = run("solve", scenario(tmp_path, text), "--no-report", "--json")
        assert r.exit_code == code, repr(r.exception)
        if code == 0:
            assert json.loads(r.stdout)["gpus"] == 1


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["synth", "chat", "-n", "1", "--rate-rps", "1e-300", "-o", "x.csv"], "error: Invalid value for '--rate-rps'"),
        (["capacity", "llama-3.1-8b", "h100-sxm", "--tp", "1_000"],
         "error: Invalid value for '--tp': 1000 is not a power of two."),
    ],
)
def test_option_values_found_by_the_property_tests(args, expected):
    r = run(*args)
    assert r.exit_code == 2 and r.stderr.startswith(expected) and len(r.stderr.splitlines()) == 1, r.stderr


def test_a_command_group_alone_prints_its_help():
    r = run("catalog")
    assert r.exit_code == 0 and "Commands:" in r.stdout and r.stderr == ""


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_a_missing_log_with_an_explicit_format_is_bad_input(tmp_path, fmt):
    # (found by the external campaign: --format skipped the existence check, and the sniff raised)
    one_line_error(run("histogram", tmp_path / "nope.log", "--format", fmt), 2, "nope.log: no such file")


def test_a_jsonl_log_with_a_byte_order_mark_reads(tmp_path):
    # (found by the external campaign: Windows tools write one; the sniff called the file not JSON Lines)
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"prompt_tokens": 5, "output_tokens": 3}\n{"prompt_tokens": 6, "output_tokens": 3}\n')
    r = run("histogram", path, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["requests"] == 2


def test_the_span_error_shows_the_first_and_last_arrival(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("prompt_tokens,output_tokens,timestamp_ms\n1,1,0\n1,1,1700000000000\n")
    one_line_error(run("histogram", path), 2, "arrival times span 54 years (1970-01-01 00:00 to 2023-11-14 22:13)")


def test_import_hf_bounds_the_layer_count_before_counting_layers(tmp_path):
    config = json.loads((HF / "llama-3.1-8b.json").read_text())
    config.update(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], num_hidden_layers=10**12,
                  num_experts=8, num_experts_per_tok=2, moe_intermediate_size=768)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    r = run("catalog", "import-hf", path, "--name", "x")
    one_line_error(r, 2, "config.json: num_hidden_layers: expected an integer <= 10,000 (got 1000000000000)")


@pytest.mark.parametrize(("option", "value", "roles"), [("--prompt-col", "output_tokens", "prompt and output"),
                                                        ("--time-col", "prompt_tokens", "prompt and time")])
def test_one_column_named_for_two_roles_is_bad_input(tmp_path, option, value, roles):
    # (found by the external campaign: pyarrow raised KeyError on the doubled column)
    path = tmp_path / "log.csv"
    path.write_text("prompt_tokens,output_tokens,timestamp_ms\n1,1,1700000000000\n")
    one_line_error(run("histogram", path, option, value), 2, f"column '{value}' is named for both {roles}")


def test_a_huge_unknown_name_is_shortened_in_the_message(tmp_path):
    # (found by the external campaign: a 5,000-character GPU id made a 5,199-character error line)
    r = run("solve", scenario(tmp_path, BASE.replace("gpus: [h100-sxm]", f"gpus: [{'x' * 5000}]")), "--no-report")
    line = one_line_error(r, 2, "gpus[0]: unknown GPU 'xxxxxxxxxx", "... (5,000 characters)'")
    assert len(line) < 600


def test_a_csv_value_that_is_not_utf8_is_one_excluded_row(tmp_path):
    # (found by the external campaign: it aborted the scan, and a malformed row of such bytes
    # printed an ignored-exception traceback from pyarrow's row handler)
    path = tmp_path / "log.csv"
    path.write_bytes(b"prompt_tokens,output_tokens\n1,2\n3,\xca\xfe\n5,6\n")
    r = run("histogram", path, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["excluded_rows"] == {"null": 0, "negative": 0, "non_numeric": 1, "too_long": 0, "empty_prompt": 0}


def test_a_malformed_csv_row_that_is_not_utf8_prints_no_traceback(tmp_path):
    path = tmp_path / "log.csv"
    path.write_bytes(b"prompt_tokens,output_tokens\n" + b"1,2\n" * 5000 + b"\xca\xfe\xba\xbe\n" + b"1,2\n")
    done = subprocess.run([sys.executable, "-m", "planner", "histogram", str(path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Row #5002" in done.stderr, done.stderr


@pytest.mark.parametrize(("args", "code"), [(["kv", "llama-3.1-8b", "--json"], 0), (["kv", "nope"], 2)])
def test_the_console_entry_flushes_its_output_and_keeps_the_exit_code(args, code):
    # `planner` leaves with os._exit (planner.cli.run: Arrow's threads may abort a normal
    # teardown, found by the external campaign), so what it printed must be flushed first
    done = subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == code, done.stderr
    if code == 0:
        assert json.loads(done.stdout)["model"] == "llama-3.1-8b"
    else:
        assert done.stderr.startswith("error: unknown model 'nope'") and done.stderr.count("\n") == 1


# ---- second campaign (external): rates of short logs -----------------------------------------
def _synthetic_scenario(tmp_path: Path, synthetic: str) -> Path:
    """The base scenario planning from a synthetic source at its p99 minute."""
    return scenario(tmp_path, BASE.replace(
        "  source: {constant: {prompt_tokens: 1000, output_tokens: 200}}\n  peak: {method: explicit, rps: 4}",
        f"  source: {{synthetic: {synthetic}}}\n  peak: {{method: quantile, quantile: 0.99}}"))


def test_a_source_shorter_than_four_minutes_is_refused_not_planned_for_a_third_of_its_load(tmp_path):
    # 20,000 requests at 1,000 req/s span 20 s: one minute of the clock read as 333 req/s. (An audit: the
    # refusal spoke of a log, "give a longer log ... (see --time-unit)", to a source with neither: it names
    # the draw's count, and the count that spans the minutes needed.)
    r = run("solve", _synthetic_scenario(tmp_path, "{name: chat, requests: 20000, rate_rps: 1000}"), "--no-report")
    line = one_line_error(r, 2, "traffic: the synthetic source's 20,000 requests at 1000 requests/s span 1 minute(s) "
                          "of the clock, too short to measure a per-minute peak", "draw more, "
                          "traffic.source.synthetic.requests: 184,294 or more at this rate",
                          "peak: {method: explicit, rps: ...}")
    assert "log" not in line and "time-unit" not in line and "time_unit" not in line, line
    # the count it names spans them
    r = run("solve", _synthetic_scenario(tmp_path, "{name: chat, requests: 184294, rate_rps: 1000}"), "--no-verify",
            "--no-report", "--json")
    assert r.exit_code == 0, r.output


def test_a_synthetic_source_too_slow_for_its_peak_quantile_names_its_rate_not_a_gap_in_a_log(tmp_path):
    """(An audit: 2,000 requests at 1e-4 requests/s, a minute in 170 with an arrival, read "the log holds no
    request for ... hours ... from 2024-..: a gap in the logging or a stray row": no log, and its silences
    are its Poisson draw's.) The refusal names the rate field and the rate whose minutes hold arrivals."""
    r = run("solve", _synthetic_scenario(tmp_path, "{name: chat, requests: 2000, rate_rps: 0.0001}"), "--no-report")
    line = one_line_error(r, 2, "traffic: peak rate is 0 req/s: the synthetic source's 2,000 requests at 0.0001 "
                          "requests/s arrive in ", "too few for their 0.99 quantile to hold an arrival",
                          "raise traffic.source.synthetic.rate_rps well above 0.000168 requests/s",
                          "peak: {method: explicit, rps: ...}")
    assert "log" not in line and "gap" not in line and "stray" not in line, line
    # two requests, both in the partial first and last minutes: the draw is too small
    r = run("solve", _synthetic_scenario(tmp_path, "{name: chat, requests: 2, rate_rps: 0.001}"), "--no-report")
    line = one_line_error(r, 2, "traffic: peak rate is 0 req/s: none of the ", " whole minutes of the synthetic "
                          "source's 2 requests at 0.001 requests/s has an arrival", "draw more, "
                          "traffic.source.synthetic.requests")
    assert "log" not in line, line
    # a rate already above that threshold, by a little, is not told to rise above it (an audit: 0.012 req/s at q 0.5,
    # whose threshold is 0.0116, read "raise ... above 0.0116"); nor is a draw too short at a rate under it told
    # to draw more at that rate, which would then read a peak of 0
    near = scenario(tmp_path, BASE.replace(
        "  source: {constant: {prompt_tokens: 1000, output_tokens: 200}}\n  peak: {method: explicit, rps: 4}",
        "  source: {synthetic: {name: chat, requests: 2000, rate_rps: 0.0117, seed: 1}}\n"
        "  peak: {method: quantile, quantile: 0.5}"), name="near.yaml")
    one_line_error(run("solve", near, "--no-report", "--no-verify"), 2,  # (seed 1's draw reads 0; seed 2's holds)
                   "at 0.0117 requests/s, near 0.0116, a draw's minutes with an arrival fall short of it by chance",
                   "well above 0.0116")
    shy = scenario(tmp_path, BASE.replace(
        "  source: {constant: {prompt_tokens: 1000, output_tokens: 200}}\n  peak: {method: explicit, rps: 4}",
        "  source: {synthetic: {name: chat, requests: 2, rate_rps: 0.0125, seed: 1}}\n"
        "  peak: {method: quantile, quantile: 0.5}"), name="shy.yaml")
    one_line_error(run("solve", shy, "--no-report", "--no-verify"), 2, "traffic.source.synthetic.requests: 106 or more "
                   "at this rate (at 0.0125 requests/s, near 0.0116, where its peak at the 0.5 quantile can still read 0")
    short = run("solve", _synthetic_scenario(tmp_path, "{name: chat, requests: 1, rate_rps: 0.0001}"), "--no-report")
    line = one_line_error(short, 2, "raise traffic.source.synthetic.rate_rps well above 0.000168 requests/s")
    assert "requests: " not in line.split("):")[-1].split(", or state")[0], line
    # a draw slow enough for hours without an arrival, yet measurable, plans without a log's warning of them
    r = run("solve", _synthetic_scenario(tmp_path, "{name: chat, requests: 2000, rate_rps: 0.0002}"), "--no-report",
            "--no-verify")
    assert r.exit_code == 0 and "holds no request" not in r.output and "gap" not in r.stderr, r.output


def test_synth_refuses_a_log_longer_than_a_log_may_span(tmp_path):
    r = run("synth", "chat", "-n", 1000, "--rate-rps", 1e-6, "-o", tmp_path / "slow.csv")
    one_line_error(r, 2, "1,000 requests at 1e-06 req/s span about 31.7 years, more than a log may (15.9 years): raise "
                   "the rate to 2.62e-06 req/s or more, or lower the count")
    assert leftovers(tmp_path) == []
    # the rate it suggests fits, whatever the seed (it leaves ten standard deviations of room)
    from planner.workload.synth import generate

    for seed in range(20):
        assert generate("chat", 1000, seed, rate_rps=2.62e-6).timestamp_ms.size == 1000
    # near the limit (19 years expected, 11 at ten standard deviations) the drawn arrivals decide
    r = run("synth", "chat", "-n", 600, "--rate-rps", 1e-6, "-o", tmp_path / "slow.csv")
    one_line_error(r, 2, "600 requests at 1e-06 req/s span 18.6 years, more than a log may (15.9 years)")
    assert leftovers(tmp_path) == []


def test_a_gpu_listed_twice_is_refused_whatever_the_order(tmp_path):
    # one entry's cap or price was silently ignored, which one depending on the order
    for gpus in ("[{id: h100-sxm, max_gpus: 1}, {id: h100-sxm, max_gpus: 100, price_usd_per_hour: 0.5}]",
                 "[h100-sxm, {id: h100-sxm, max_gpus: 1}]"):
        r = run("solve", scenario(tmp_path, BASE.replace("gpus: [h100-sxm]", f"gpus: {gpus}")), "--no-report")
        line = one_line_error(r, 2, "s.yaml: gpus[1]: h100-sxm is listed twice (first as gpus[0])")
        assert "gpus: gpus" not in line  # the entry named once


# A chat service near the bound on a fleet's GPUs: ten million requests/s, times its growth.
NEAR_THE_BOUND = """\
name: {name}
model: llama-3.1-8b
context_limit: 16384
traffic:
  source: {{synthetic: {{name: chat, requests: 100000, seed: 3, rate_rps: 500}}}}
  peak: {{method: explicit, rps: 1.0e7}}
  growth: {growth}
slo: {{statistic: p99, bands: [{{ttft_s: 2.0, tpot_ms: 50}}]}}
gpus: [h100-sxm]
tp: [1]
weight_dtypes: [fp8]
kv_dtypes: [fp8]
split_thresholds: {thresholds}
verify: {verify}
"""


def test_a_split_whose_classes_pass_the_bound_on_gpus_together_is_refused(tmp_path):
    # each class within the bound the ILP checks a class against, the plan not: 111.7 million GPUs, exit 0
    text = NEAR_THE_BOUND.format(name="split_over", growth=280, thresholds="[2048, 4096]", verify="false")
    r = run("solve", scenario(tmp_path, text), "--out-dir", tmp_path / "out")
    line = one_line_error(r, 3, "s.yaml: the plan needs ")
    assert re.search(r"needs ([\d,]+) GPUs \(split at [\d,]+\), more than the 100,000,000 that bound any fleet", line)
    assert leftovers(tmp_path / "out") == []


def test_a_plan_that_certification_takes_past_the_bound_is_refused_for_the_bound(tmp_path):
    # within the bound by the model (96.9 million GPUs, reported with its digits grouped), past it at
    # the capacities the replays measure: this read "no plan holds its targets in simulation"
    text = NEAR_THE_BOUND.format(name="one_over", growth=246, thresholds="[]", verify="true")
    path = scenario(tmp_path, text)
    r = run("solve", path, "--no-verify", "--out-dir", tmp_path / "model")
    assert r.exit_code == 0, r.output
    gpus = re.search(r"all: ([\d,]+) x h100-sxm", r.stdout).group(1)
    assert 90_000_000 < int(gpus.replace(",", "")) <= 100_000_000 and "," in gpus
    assert f"| **{gpus}** |" in (tmp_path / "model" / "one_over.md").read_text(encoding="utf-8")
    r = run("solve", path, "--out-dir", tmp_path / "out")
    line = one_line_error(r, 3, "s.yaml: at the capacities simulation measured, class 'all' needs ")
    assert re.search(r"needs ([\d,]+) GPUs to serve .* more than the 100,000,000 that bound any fleet", line), line
    assert leftovers(tmp_path / "out") == []


def test_a_forecast_quarter_holding_reservations_past_the_bound_together_is_refused(tmp_path):
    # each type's count is within the bound, their sum is not: 180 million GPUs held, exit 0
    text = BASE.replace("gpus: [h100-sxm]", "gpus: [h100-sxm, l40s]") + """\
forecast:
  reserved_discount: 0.3
  quarters:
    - {quarter: 2027Q1}
    - {quarter: 2027Q2, reserved: {h100-sxm: 90000000, l40s: 90000000}}
"""
    r = run("forecast", scenario(tmp_path, text), "--out-dir", tmp_path / "out")
    line = one_line_error(r, 3, "s.yaml: forecast quarter 2027Q2: the fleet holds 180,000,000 GPUs (",
                          "committed and idle), more than the 100,000,000 that bound any fleet",
                          "check forecast.quarters[].reserved")
    in_use = int(re.search(r"\(([\d,]+) in use", line).group(1).replace(",", ""))
    assert f"({in_use:,} in use and {180_000_000 - in_use:,} committed and idle)" in line
    assert leftovers(tmp_path / "out") == []
    # the earlier quarter's reservations still in their term hold the other half
    text = BASE.replace("gpus: [h100-sxm]", "gpus: [h100-sxm, l40s]") + """\
forecast:
  commitment_term_quarters: 4
  quarters:
    - {quarter: 2027Q1, reserved: {h100-sxm: 60000000}}
    - {quarter: 2027Q2, reserved: {l40s: 60000000}}
"""
    r = run("forecast", scenario(tmp_path, text), "--out-dir", tmp_path / "out")
    one_line_error(r, 3, "forecast quarter 2027Q2: the fleet holds 120,000,000 GPUs (",
                   "check forecast.quarters[].reserved, forecast.commitment_term_quarters")


@pytest.mark.parametrize(("field", "listed", "shown"), [("tp", "[1, 2, 1]", "tp[2]: 1 is listed twice (first as tp[0])"),
                                                     ("weight_dtypes", "[bf16, bf16]",
                                                      "weight_dtypes[1]: bf16 is listed twice (first as weight_dtypes[0])")])
def test_a_choice_listed_twice_is_refused_as_a_gpu_listed_twice_is(tmp_path, field, listed, shown):
    # `tp: [1, 1]` and repeated dtypes passed without a word, where repeated GPUs and thresholds are refused
    old = {"tp": "tp: [1]", "weight_dtypes": "weight_dtypes: [bf16]"}[field]
    path = scenario(tmp_path, BASE.replace(old, f"{field}: {listed}"))
    one_line_error(run("solve", path, "--no-report"), 2, f"s.yaml: {shown}; list each choice once")


def test_gpu_types_whose_names_differ_only_in_punctuation_are_refused_not_a_traceback(tmp_path):
    """A catalog's `h100_sxm` beside `h100-sxm` named the same ILP rows: PuLP's traceback, exit 1."""
    clone = tmp_path / "clone.yaml"
    r = run("catalog", "gpus", "--json")
    entry = next(g for g in json.loads(r.stdout) if g["id"] == "h100-sxm")
    entry.pop("id")
    clone.write_text(yaml.safe_dump({"gpus": {"h100_sxm": entry | {"name": "a clone"}}}), encoding="utf-8")
    path = scenario(tmp_path, BASE.replace("gpus: [h100-sxm]", "gpus: [h100-sxm, h100_sxm]"))
    one_line_error(run("solve", path, "--catalog", clone, "--no-report"), 2,
                   "s.yaml: gpus[1]: 'h100_sxm' and 'h100-sxm' differ only in characters the ILP's names")
    # across a fleet's services, with the inventory naming both
    other = yaml.safe_load(BASE) | {"name": "other", "gpus": ["h100_sxm"]}
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump({"name": "f", "services": [yaml.safe_load(BASE), other],
                                     "inventory": {"h100-sxm": {"max_new": 40}, "h100_sxm": {"max_new": 40}}}),
                     encoding="utf-8")
    one_line_error(run("solve", fleet, "--catalog", clone, "--no-report"), 2,
                   "fleet.yaml: GPU types 'h100-sxm' and 'h100_sxm' (of the services' `gpus` and the inventory) differ")


def test_a_gpu_listed_twice_in_a_fleets_service_is_named_once_under_the_service(tmp_path):
    # the path read "services[0].gpus: gpus[1]: ...": a list's own check was matched without the prefix
    service = yaml.safe_load(BASE) | {"gpus": ["h100-sxm", "h100-sxm"]}
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump({"name": "f", "services": [service]}), encoding="utf-8")
    r = run("solve", fleet, "--no-report")
    one_line_error(r, 2, "fleet.yaml: services[0].gpus[1]: h100-sxm is listed twice (first as gpus[0])")


def test_a_mean_rate_above_the_peak_is_refused(tmp_path):
    # utilisation at the mean was 354% and the cost per token 25 times too low
    text = BASE.replace("  peak: {method: explicit, rps: 4}", "  peak: {method: explicit, rps: 4}\n  mean_rps: 100")
    r = run("solve", scenario(tmp_path, text), "--no-report")
    one_line_error(r, 2, "traffic: mean_rps: 100 req/s is above the peak, 4 req/s")


def test_a_stated_peak_below_the_source_s_own_rate_is_refused(tmp_path):
    """The day's volume is read from the source (its mean rate, 40 requests/s) while the plan is sized
    for the stated peak of 10: the day's cost per token came out a third of the peak's, priced on
    traffic the plan cannot carry (an outside probe). A stated mean above the peak was refused already."""
    text = BASE.replace("  source: {constant: {prompt_tokens: 1000, output_tokens: 200}}",
                        "  source: {synthetic: {name: chat, requests: 20000, seed: 1, rate_rps: 40}}")
    text = text.replace("rps: 4}", "rps: 10}\n  profile: {shape: diurnal, peak_to_trough: 2, peak_hour: 14}")
    r = run("solve", scenario(tmp_path, text), "--out-dir", tmp_path / "out")
    one_line_error(r, 2, "traffic: peak: 10 req/s is below the source's own rate, 40.08 req/s (its mean over its whole "
                   "minutes), which the day's volume is read from: state traffic.mean_rps (the busiest hour's mean at "
                   "this peak), or a peak at or above the source's rate")
    assert leftovers(tmp_path / "out") == []
    stated = text.replace("rps: 10}", "rps: 10}\n  mean_rps: 8")
    assert run("solve", scenario(tmp_path, stated, "m.yaml"), "--no-report", "--no-verify").exit_code == 0
    # a flat day without a forecast reads no day's volume: nothing to refuse
    flat = text.replace("\n  profile: {shape: diurnal, peak_to_trough: 2, peak_hour: 14}", "")
    assert run("solve", scenario(tmp_path, flat, "f.yaml"), "--no-report", "--no-verify").exit_code == 0
    # a peak stated at the source's own rate, which its sample reads 0.8% above: the day is the peak's, said so
    own = text.replace("rate_rps: 40}", "rate_rps: 10}")
    r = run("solve", scenario(tmp_path, own, "o.yaml"), "--no-verify", "--out-dir", tmp_path / "own")
    assert r.exit_code == 0, r.output
    report = (tmp_path / "own" / "tiny.md").read_text(encoding="utf-8")
    assert re.search(r"The source's own rate, 10\.\d+ req/s \(its mean over its whole minutes\), is 0\.\d% above the stated "
                     r"peak, 10 req/s, within a sample's spread: the day's busiest hour is taken at the peak", report)
    assert ("the busiest hour's mean rate, 10 requests/s (the stated peak: the source's own rate lies within a "
            "sample's spread above it)") in report


def test_a_lower_context_limit_no_request_fits_gets_a_row_that_says_so(tmp_path):
    """The lever's row had vanished without a word when every request was longer than the lower limit."""
    text = BASE.replace("context_limit: 8192", "context_limit: 8192\nlower_context_limit: 1024")
    r = run("solve", scenario(tmp_path, text), "--no-verify", "--out-dir", tmp_path / "out")
    assert r.exit_code == 0, r.output
    report = (tmp_path / "out" / "tiny.md").read_text(encoding="utf-8")
    assert ("| context limit 1,024 (rejects every request) | infeasible | — | — | no request fits 1,024 tokens: every "
            "one served at 8,192 is longer |") in report


@pytest.mark.parametrize("prefix", [1000, 4000])
def test_a_shared_prefix_as_long_as_the_prompts_is_refused(tmp_path, prefix):
    # capacity fell as the prefix grew past the prompts: 116 req/s at 999 tokens, 39 at 4,000
    text = BASE.replace("  peak: {method: explicit, rps: 4}", f"  peak: {{method: explicit, rps: 4}}\n  shared_prefix_tokens: {prefix}")
    r = run("solve", scenario(tmp_path, text), "--no-report")
    one_line_error(r, 2, f"traffic: shared_prefix_tokens: a shared prefix of {prefix:,} tokens is at least as long as "
                   "1% or more of the prompts (the 1st-percentile prompt has 1,000 tokens)")


def test_capacity_refuses_a_shared_prefix_longer_than_the_prompt_or_the_limit():
    args = ("capacity", "llama-3.1-8b", "h100-sxm", "--prompt-tokens", 2000, "--output-tokens", 100, "--max-model-len", 8192)
    one_line_error(run(*args, "--shared-prefix-tokens", 100_000), 2,
                   "Invalid value for --shared-prefix-tokens: 100,000 tokens is not below the context limit 8,192")
    one_line_error(run(*args, "--shared-prefix-tokens", 5_000), 2,
                   "Invalid value for --shared-prefix-tokens: a shared prefix of 5,000 tokens is at least as long as 1% or more")
    assert run(*args, "--shared-prefix-tokens", 1_999).exit_code == 0


# ---- second outside fuzz campaign ------------------------------------------------------------
@pytest.mark.parametrize(("written", "why"), [
    ("036", "'036' has a leading zero, which YAML 1.1 reads as octal (036 is 30); write it without the zero"),
    ("1:30", "'1:30' is a base-60 number in YAML 1.1 (1:30 reads as 90); write it in decimal, or quote it"),
    ("0x1E", "'0x1E' is hexadecimal or binary; write it in decimal"),
])
def test_a_yaml_11_number_form_that_reads_as_another_number_is_refused(tmp_path, written, why):
    path = scenario(tmp_path, BASE.replace("rps: 4", f"rps: {written}"))
    r = run("solve", path, "--out-dir", tmp_path / "out")
    one_line_error(r, 2, f"{path}: line 6: invalid YAML: {why}")
    assert leftovers(tmp_path / "out") == []


def _client_log(path, rows: int, client=lambda i: f"client{i}") -> None:
    path.write_text("prompt_tokens,output_tokens,timestamp_ms,client\n" + "".join(
        f"{100 + i},10,{1_700_000_000_000 + i * 500},{client(i)}\n" for i in range(rows)))


@pytest.mark.parametrize(("case", "rows", "opened", "lost"), [
    ("in a counted column", 2000, 12, 1989),
    ("in an unread text column", 2000, 1001, 1000),
    ("past Python's 128 KiB field limit", 12000, 12, 11989),
    ("two stray quotes, an even count", 2000, 12, 1490),
    ("paired with a later quoted value's", 2000, 12, 1490),
    ("counts written as floats (a column that held a NaN)", 2000, 12, 1989),
    ("two stray quotes, the second where a value ends: well quoted", 2000, 12, 490),
    ("in a file of several of the reader's blocks", 60000, 12, 59989),
])
def test_a_quote_left_open_in_a_csv_is_refused_not_read_as_a_short_log(tmp_path, case, rows, opened, lost):
    """An opening '"' not closed where its value ends made every line up to the next quote (or the
    reader's block's end) one value: 10 requests of 2,000 and one row excluded, or, in a column the
    planner does not read, 1,000 requests and not a word, exit 0. A reading found a count of quotes
    blind to two stray ones and Python's strict reader to a long value or a later quoted one."""
    log = tmp_path / "log.csv"
    if case == "in a counted column":
        log.write_text("prompt_tokens,output_tokens,timestamp_ms,client\n" + "".join(
            ('"' if i == 10 else "") + f"{100 + i},10,{1_700_000_000_000 + i * 500},client{i}\n" for i in range(rows)))
    elif case.startswith("counts written as floats"):
        log.write_text("prompt_tokens,output_tokens,timestamp_ms,client\n" + "".join(
            f"{100 + i}.0,10.0,{1_700_000_000_000 + i * 500}," + ('"' if i == 10 else "") + f"client{i}\n"
            for i in range(rows)))
    else:
        stray = {"in an unread text column": {999}, "two stray quotes, an even count": {10, 1500}}.get(case, {10})
        quoted = 1500 if case == "paired with a later quoted value's" else None
        closed = 500 if case.startswith("two stray quotes, the second") else None  # 'client500"': a value's end
        _client_log(log, rows, lambda i: '"client' if i in stray else '"a, b"' if i == quoted else
                    'client500"' if i == closed else f"client{i}")
    r = run("histogram", log, "-o", tmp_path / "h.parquet")
    one_line_error(r, 2, f"{log}: a '\"' opened on line {opened:,} is not closed where its value ends: {lost:,} lines "
                   "after it that read as rows of the file are read as its text")
    assert leftovers(tmp_path) == ["log.csv"]


def test_quoted_values_over_several_lines_and_a_quote_of_a_value_s_own_are_read_whole(tmp_path):
    """A quoted prompt over two lines, one quoting a table of the log's own shape, an inch mark inside an
    unquoted value, and a quote left open in the last row (which holds no row after it) lose no row,
    and are not refused; nor are quoted values over lines across the reader's 1 MiB blocks (pyarrow
    read such a log "out of sync with chunker")."""
    log = tmp_path / "log.csv"
    table = '"sum this:\n1,2,3,4\n5,6,7,8\n9,10,11,12"'
    _client_log(log, 2000, lambda i: {5: '"a ""quoted""\nname"', 6: '24" screen', 7: table, 1999: '"open'}.get(i, "x"))
    r = run("histogram", log, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["requests"] == 2000
    _client_log(log, 60000, lambda i: '"line one\nline two"' if i % 10 == 0 else f"client{i}")
    r = run("histogram", log, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["requests"] == 60000


def test_microsecond_times_read_as_milliseconds_are_refused_with_the_unit_hint(tmp_path):
    log = tmp_path / "us.csv"
    start_us = 1_700_000_000_000_000
    log.write_text("prompt_tokens,output_tokens,timestamp_ms\n"
                   + "".join(f"100,10,{start_us + i * 50_000}\n" for i in range(3000)))
    r = run("histogram", log, "-o", tmp_path / "h.parquet")
    one_line_error(r, 2, f"{log}: arrival times fall after 2200", "microseconds as milliseconds? (see --time-unit)")
    assert leftovers(tmp_path) == ["us.csv"]
    assert run("histogram", log, "--time-unit", "us", "-o", tmp_path / "h.parquet").exit_code == 0
    # the same log as a scenario's is pointed at the scenario's field
    path = scenario(tmp_path, BASE.replace("{constant: {prompt_tokens: 1000, output_tokens: 200}}", "{log: us.csv}"))
    one_line_error(run("solve", path, "--no-report"), 2, "microseconds as milliseconds? (see "
                   "traffic.source.time_unit)")


def test_a_log_given_twice_is_refused_rather_than_counted_twice(tmp_path):
    log = tmp_path / "log.csv"
    assert run("synth", "chat", "-n", 300, "-o", log).exit_code == 0
    r = run("histogram", log, tmp_path / "." / "log.csv", "-o", tmp_path / "h.parquet")
    one_line_error(r, 2, "log.csv: given twice (as input 1 and input 2); its requests would count twice")
    assert leftovers(tmp_path) == ["log.csv"]
    # in a scenario, the line names the scenario and its field, as every other scenario error does
    path = scenario(tmp_path, BASE.replace("{constant: {prompt_tokens: 1000, output_tokens: 200}}",
                                           "{log: [log.csv, ./log.csv]}"))
    one_line_error(run("solve", path, "--no-report"), 2, f"{path}: traffic: source.log: './log.csv' is the file of "
                   "entry 1 again (entry 2); its requests would count twice")
    os.link(log, tmp_path / "again.csv")  # a hard link is the same file too
    path = scenario(tmp_path, BASE.replace("{constant: {prompt_tokens: 1000, output_tokens: 200}}",
                                           "{log: [log.csv, again.csv]}"))
    one_line_error(run("solve", path, "--no-report"), 2, f"{path}: traffic: source.log: 'again.csv' is the file of "
                   "entry 1 again (entry 2); its requests would count twice")


def test_a_replica_floor_above_the_peak_size_is_reported_as_applied(tmp_path):
    text = BASE.replace("rps: 4}", "rps: 3}\n  profile: {shape: diurnal, peak_to_trough: 3, peak_hour: 14}") + (
        "autoscaling: {scale_up_lead_min: 10, min_replicas: 5}\nverify: false\n")
    r = run("solve", scenario(tmp_path, text), "--out-dir", tmp_path / "out")
    assert r.exit_code == 0, r.output
    report = (tmp_path / "out" / "tiny.md").read_text()
    assert ("at least 5 replica(s) per pool (at most each pool's peak size: all: h100-sxm tp1 w:bf16 kv:bf16 "
            "ctx:8192 keeps 1; plan N+1 with min_replicas_per_pool to keep more) in every hour") in report


def test_a_catalog_override_with_too_few_parameters_for_its_layers_is_refused(tmp_path):
    text = BASE + "catalog: {models: {llama-3.1-8b: {params_total: 1, params_active: 1}}}\n"
    path = scenario(tmp_path, text)
    r = run("solve", path, "--out-dir", tmp_path / "out")
    one_line_error(r, 2, f"{path}: catalog: models.llama-3.1-8b: params_active 1 is below "
                         "num_hidden_layers x hidden_size^2 = 536,870,912")
    assert leftovers(tmp_path / "out") == []


@pytest.mark.parametrize(("change", "expected"), [
    ("  peak: {method: explicit, rps: 4, quantile: 0.5}",
     "traffic.peak: quantile is read with method 'quantile' only (method is 'explicit')"),
    ("  peak: {method: max, rps: 4}", "traffic.peak: rps is read with method 'explicit' only (method is 'max')"),
])
def test_a_peak_field_its_method_does_not_read_is_refused(tmp_path, change, expected):
    path = scenario(tmp_path, BASE.replace("  peak: {method: explicit, rps: 4}", change))
    one_line_error(run("solve", path, "--no-report"), 2, f"{path}: {expected}")


def test_two_bands_of_one_name_are_refused(tmp_path):
    text = BASE + ("slo:\n  bands:\n    - {name: chat, prompt_below: 4096, ttft_s: 1}\n"
                   "    - {name: chat, ttft_s: 5}\n")
    path = scenario(tmp_path, text)
    one_line_error(run("solve", path, "--no-report"), 2,
                   f"{path}: slo: bands[1]: band name 'chat' is given to two bands (first to bands[0])")
    text = BASE + ("slo:\n  bands:\n    - {name: a, prompt_below: 4096, ttft_s: 1}\n"
                   "    - {name: b, ttft_s: 2}\n    - {name: c, ttft_s: 5}\n")
    one_line_error(run("solve", scenario(tmp_path, text), "--no-report"), 2,
                   "slo: bands[1]: every band but the last needs prompt_below")


def test_a_config_json_with_a_key_given_twice_is_refused(tmp_path):
    config = tmp_path / "config.json"
    config.write_text((HF / "llama-3.1-8b.json").read_text().replace("{", '{"num_hidden_layers": 16,', 1))
    r = run("catalog", "import-hf", config, "--name", "x")
    one_line_error(r, 2, f"{config}: invalid JSON: key 'num_hidden_layers' appears twice in one object")


def test_a_typical_conversation_longer_than_the_limit_is_refused():
    r = run("capacity", "llama-3.1-8b", "h100-sxm", "--context-limit", 8192, "--typical-tokens", 100_000)
    one_line_error(r, 2, "Invalid value for --typical-tokens: 100,000 tokens is longer than the context limit 8,192")


def test_a_stated_fleet_that_cannot_carry_its_peak_quotes_no_price_per_token(tmp_path):
    text = BASE.replace("rps: 4}", "rps: 40}") + (
        "simulation: {requests: 2000, band_requests: 500}\n"
        "fleet:\n  - {gpu: h100-sxm, tp: 1, weight_dtype: bf16, kv_dtype: bf16, replicas: 1}\n")
    r = run("solve", scenario(tmp_path, text), "--out-dir", tmp_path / "out", "--json")
    assert r.exit_code == 0, r.output
    cost = json.loads(r.stdout)["cost_usd_per_million_tokens"]
    assert cost == {"blended": None, "input": None, "output": None}
    report = (tmp_path / "out" / "tiny.md").read_text()
    assert "$2.99 per hour, $2,182.70 per month, — per million tokens** (input —, output —;" in report
    assert "No price per token (—): the fleet cannot carry the peak, so it would not serve these tokens." in report
    assert "**This fleet does NOT carry its peak** (all (≤ 8,192 tokens): 40 req/s to cover (peak), capacity " in report


def test_a_forecast_of_a_stated_fleet_that_cannot_carry_its_peak_says_so_and_quotes_no_nan(tmp_path):
    text = BASE.replace("rps: 4}", "rps: 40}") + (
        "verify: false\nforecast: {quarters: [{quarter: 2027Q1}]}\n"
        "fleet:\n  - {gpu: h100-sxm, tp: 1, weight_dtype: bf16, kv_dtype: bf16, replicas: 1}\n")
    r = run("forecast", scenario(tmp_path, text), "--out-dir", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert "nan" not in r.stdout and "no cost per token (the stated fleet cannot carry the peak)" in r.stdout
    report = (tmp_path / "out" / "tiny_forecast.md").read_text()
    assert "- **2027Q1: the stated fleet does NOT carry this quarter's peak** (all (≤ 8,192 tokens): 40 req/s to cover" in report


def test_a_file_in_a_log_folder_that_is_not_of_its_format_is_refused_not_read(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    assert run("synth", "chat", "-n", 300, "-o", logs / "p1.csv").exit_code == 0
    (logs / "notes.txt").write_text("prompt_tokens,output_tokens\n50000,10\n")  # a header like the logs'
    one_line_error(run("histogram", logs, "--json"), 2, f"{logs}: folder holds notes.txt, which is not a log file by its name")
    (logs / "notes.txt").rename(logs / "_notes.txt")  # skipped, as Spark's _SUCCESS is
    r = run("histogram", logs, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["requests"] == 300
    one_line_error(run("histogram", logs, "--format", "jsonl", "--json"), 2,
                   f"{logs}: folder holds p1.csv, a csv file, where --format says jsonl")


@pytest.mark.parametrize("name", ["a: b\nc", "", "-x", "x y"])
def test_import_hf_refuses_a_name_that_is_no_catalog_id(tmp_path, name):
    r = run("catalog", "import-hf", HF / "llama-3.1-8b.json", "--name", name, "-o", tmp_path / "m.yaml")
    one_line_error(r, 2, "is not a catalog id")
    assert leftovers(tmp_path) == []


def test_a_stated_fleet_past_its_roofline_misses_every_target_by_the_model(tmp_path):
    """No operating point at 200 req/s on one replica: the model predicts nothing, and the report said
    "no request of the band in this pool" where the same plan's JSON says the band does not hold."""
    text = BASE.replace("rps: 4}", "rps: 200}") + (
        "slo: {bands: [{ttft_s: 2, tpot_ms: 100}]}\nverify: false\n"
        "fleet:\n  - {gpu: h100-sxm, tp: 1, weight_dtype: bf16, kv_dtype: bf16, replicas: 1}\n")
    r = run("solve", scenario(tmp_path, text), "--out-dir", tmp_path / "out", "--json")
    assert r.exit_code == 0, r.output
    [band] = json.loads(r.stdout)["plan"][0]["bands"]
    assert band["holds"] is False and band["judged_by"] == "model"
    report = (tmp_path / "out" / "tiny.md").read_text()
    for target in ("TTFT p99 ≤ 2.00 s", "TPOT p99 ≤ 100.0 ms"):
        assert f"| every prompt | {target} | — | **misses** (model): past the roofline at this rate |" in report
    assert "no request of the band" not in report


def test_a_stated_fleet_that_carries_its_peak_but_not_the_headroom_says_so(tmp_path):
    text = BASE.replace("rps: 4}", "rps: 20}") + (
        "verify: false\nfleet:\n  - {gpu: h100-sxm, tp: 1, weight_dtype: bf16, kv_dtype: bf16, replicas: 1}\n")
    r = run("solve", scenario(tmp_path, text), "--out-dir", tmp_path / "out", "--json")
    assert r.exit_code == 0, r.output
    capacity = json.loads(r.stdout)["plan"][0]["capacity_rps"]
    assert 20 <= capacity < 24  # the test's premise: one replica covers the peak, not peak x headroom 1.2
    report = (tmp_path / "out" / "tiny.md").read_text()
    assert (f"The fleet carries its peak but not the headroom asked for (all (≤ 8,192 tokens): 24 req/s to cover "
            f"(peak × headroom), capacity {capacity:,.4g} req/s).") in report
    assert "NOT carry its peak" not in report and "— per million tokens" not in report


def test_a_stated_fleet_certified_at_its_peak_says_its_headroom_is_the_model_s(tmp_path):
    """A stated fleet is replayed at its peak, not at peak x headroom: that it carries the headroom
    is the model's estimate (an outside probe's fleet was certified with its headroom read from the
    model, where the same config simulated at peak x headroom missed TPOT p99 by 30%)."""
    text = BASE.replace("rps: 4}", "rps: 20}") + (
        "fleet:\n  - {gpu: h100-sxm, tp: 1, weight_dtype: bf16, kv_dtype: bf16, replicas: 1}\n")
    r = run("solve", scenario(tmp_path, text), "--out-dir", tmp_path / "out", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["certified"]
    report = (tmp_path / "out" / "tiny.md").read_text()
    assert (f"The replay was at the peak, not at peak × headroom 1.2: by the model the fleet does not carry the "
            f"headroom asked for (all (≤ 8,192 tokens): 24 req/s to cover (peak × headroom), capacity "
            f"{out['plan'][0]['capacity_rps']:,.4g} req/s).") in report
    one = text.replace("rps: 20}", "rps: 10}")  # one replica covers peak x headroom by the model
    r = run("solve", scenario(tmp_path, one, "one.yaml"), "--out-dir", tmp_path / "one", "--no-report", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["certified"], r.output


def test_a_stated_fleet_short_by_the_model_but_holding_when_replayed_at_its_peak_carries_it(tmp_path):
    """The model put this fleet 0.2% short of its peak (capacity 10.35 req/s against 10.37): the report
    read "does NOT carry its peak ... its targets cannot hold" and priced no token beside "Certified by
    simulation", whose replay at the peak held TPOT p99 at 54.6 ms against 60 (an outside probe)."""
    text = ("name: s\nmodel: qwen3-32b\ncontext_limit: 16384\n"
            "traffic: {source: {synthetic: {name: code, requests: 20000, seed: 35, rate_rps: 8}}, "
            "peak: {method: explicit, rps: 10.5441}, headroom: 1.0}\n"
            "slo: {statistic: p99, bands: [{ttft_s: 3.0, tpot_ms: 60, itl_ms: 120}]}\n"
            "sizing: {mode: percentile, quantile: 0.99}\ngpus: [h100-sxm]\ntp: [2]\nweight_dtypes: [fp8]\n"
            "kv_dtypes: [fp8]\nsplit_thresholds: []\n"
            "fleet: [{gpu: h100-sxm, tp: 2, weight_dtype: fp8, kv_dtype: fp8, replicas: 6}]\n")
    text = text.replace("headroom: 1.0}", "headroom: 1.0, profile: {shape: diurnal, peak_to_trough: 3, peak_hour: 14}}")
    r = run("solve", scenario(tmp_path, text), "--out-dir", tmp_path / "out", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    capacity = 6 * out["plan"][0]["capacity_rps"]
    assert out["certified"] and capacity < out["peak_rps"]  # the premise: short by the model, held in simulation
    report = (tmp_path / "out" / "s.md").read_text()
    assert "NOT carry its peak" not in report and "No price per token" not in report
    assert (f"By the model's capacities alone it falls short of its peak (all (≤ 16,384 tokens): "
            f"{out['peak_rps']:,.4g} req/s to cover (peak), capacity {capacity:,.4g} req/s); replayed at the peak, "
            "every pool held its targets.") in report
    # the day's busiest hour (headroom 1) is the load that held: the fleet's own 6 replicas, at the rate replayed
    assert "cannot carry the busiest hour" not in report and ", 6 replicas at the peak" in report


def test_a_cache_block_longer_than_any_engine_offers_is_refused(tmp_path):
    path = scenario(tmp_path, BASE + "catalog: {engines: {vllm: {block_size: 100000}}}\n")
    one_line_error(run("solve", path, "--no-report"), 2,
                   f"{path}: catalog: engines.vllm.block_size: Input should be less than or equal to 1024 (got 100000)")


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        # a stated flag holds on every tier, and the tiers hold every GPU
        ("{max_num_batched_tokens: 900}", "max_num_batched_tokens 900 is below max_num_seqs 1024 on GPUs with at "
                                          "least 70 GiB and not named 'a100' (gpu_tiers[0]):"),
        ("{max_num_batched_tokens: 900, gpu_tiers: []}", "max_num_batched_tokens 900 is below max_num_seqs 1024:"),
        ("{gpu_tiers: [{min_memory_gib: 100}, {min_memory_gib: 70, max_num_seqs: 9000}]}",
         "max_num_batched_tokens 8192 is below max_num_seqs 9000 on GPUs with at least 70 GiB that no earlier tier "
         "holds (gpu_tiers[1]):"),
        # a stated max_num_seqs holds on every GPU; the small GPUs' default 2048 tokens stay
        ("{max_num_seqs: 4096}", "max_num_batched_tokens 2048 is below max_num_seqs 4096 on the GPUs no earlier tier "
                                 "holds (gpu_tiers[1]):"),
        ("{gpu_tiers: [{min_memory_gib: 70, unless_named: a100, max_num_seqs: 9000}]}",
         "max_num_batched_tokens 8192 is below max_num_seqs 9000 on GPUs with at least 70 GiB and not named 'a100' "
         "(gpu_tiers[0]):"),
    ],
)
def test_a_vllm_profile_with_fewer_step_tokens_than_sequences_is_refused(tmp_path, override, expected):
    path = scenario(tmp_path, BASE + f"catalog: {{engines: {{vllm: {override}}}}}\n")
    one_line_error(run("solve", path, "--out-dir", tmp_path / "out"), 2, f"{path}: catalog: engines.vllm: "
                   f"{expected} vLLM refuses to start with fewer step tokens than sequences")
    assert leftovers(tmp_path / "out") == []


def test_a_vllm_profiles_own_limits_are_not_checked_where_a_tier_holds_every_gpu(tmp_path):
    # Its last tier states no rule, so every GPU takes a tier's limits and never the profile's 900.
    path = scenario(tmp_path, BASE + "catalog: {engines: {vllm: {max_num_batched_tokens: 900, "
                                     "gpu_tiers: [{max_num_batched_tokens: 8192}]}}}\n")
    r = run("solve", path, "--no-report")
    assert r.exit_code == 0, r.output


def test_a_batch_may_outgrow_the_step_tokens_of_an_engine_that_allows_it(tmp_path):
    path = scenario(tmp_path, BASE.replace("gpus:", "engine: trtllm\ngpus:")
                    + "catalog: {engines: {trtllm: {max_num_batched_tokens: 900}}}\n")
    r = run("solve", path, "--no-report")
    assert r.exit_code == 0, r.output


def test_a_config_whose_cache_holds_no_sequence_at_the_limit_is_not_planned(tmp_path):
    path = scenario(tmp_path, BASE.replace("rps: 4}", "rps: 0.1}") + "catalog: {gpus: {h100-sxm: {memory_gib: 20}}}\n")
    one_line_error(run("solve", path, "--no-report"), 3,
                   "is stopped by 'llama-3.1-8b' on 1 x h100-sxm: the 0.04 GiB KV budget holds no sequence at the "
                   "8,192-token context limit (1.00 GiB each), and an engine will not start so")
    r = run("capacity", "llama-3.1-8b", "l4", "--prompt-tokens", 1000, "--output-tokens", 200)
    one_line_error(r, 2, "'llama-3.1-8b' on 1 x l4: the 2.28 GiB KV budget holds no sequence at the 131,072-token "
                         "context limit (16.00 GiB each)")


def test_a_candidate_the_search_did_not_size_has_no_capacity_in_the_json(tmp_path):
    text = BASE.replace("weight_dtypes: [bf16]", "weight_dtypes: [bf16, fp8]").replace("kv_dtypes: [bf16]", "kv_dtypes: [bf16, fp8]")
    r = run("solve", scenario(tmp_path, text + "verify: false\n"), "--no-report", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    rows = {(c["weight_dtype"], c["kv_dtype"]): c for c in out["candidates"]}
    assert rows[("fp8", "fp8")]["capacity_rps"] > 0 and rows[("fp8", "fp8")]["dominated_by"] is None
    # One replica of the most precise variant covers 4.8 req/s: the plan runs it, so it was sized;
    # the two variants between were never asked.
    [pool] = out["plan"]
    assert (pool["weight_dtype"], pool["kv_dtype"], pool["replicas"]) == ("bf16", "bf16", 1)
    assert rows[("bf16", "bf16")]["capacity_rps"] == pool["capacity_rps"] >= pool["rate_rps"]
    for key in (("bf16", "fp8"), ("fp8", "bf16")):
        assert rows[key]["capacity_rps"] is None and rows[key]["model_capacity_rps"] is None
        assert rows[key]["dominated_by"] == "h100-sxm tp1 w:fp8 kv:fp8 ctx:8192"


def test_capacity_says_the_shared_prefix_is_held_once_where_step_8_counts_it_per_sequence():
    r = run("capacity", "llama-3.1-8b", "h100-sxm", "--context-limit", 16384, "--prompt-tokens", 2000,
            "--output-tokens", 500, "--shared-prefix-tokens", 1500)
    assert r.exit_code == 0, r.output
    assert "  concurrency by memory (the 1,500-token shared prefix held once, unlike step 8): worst_case " in r.output


# ---- third campaign (a reviewer's, 115 cases): what a refused run leaves, and where errors point ----
def test_a_report_refused_late_leaves_none_of_the_run_s_files_and_prints_no_success(tmp_path):
    # the second scenario is named after its own file: its Markdown report would overwrite it, which
    # is refused only when written, after the first scenario's report and its own figures
    first = scenario(tmp_path, name="first.yaml")
    clash = scenario(tmp_path, BASE.replace("name: tiny", "name: clash"), name="clash.md")
    r = run("solve", first, clash, "--out-dir", tmp_path, "--no-verify")
    one_line_error(r, 2, f"{tmp_path / 'clash.md'}: is also an input of this command")
    assert r.stdout == ""
    assert leftovers(tmp_path) == ["clash.md", "first.yaml"]  # no report, no figure, no temporary file


def test_an_output_that_is_a_link_to_an_input_is_named_with_where_it_leads(tmp_path):
    """The report's path, a link to the scenario, was refused naming the scenario alone, as if the input
    were wrong; the output path is named, and the input it leads to. Nothing is written."""
    clash = scenario(tmp_path, BASE.replace("name: tiny", "name: clash"), name="clash.yaml")
    out = tmp_path / "out"
    out.mkdir()
    (out / "clash.md").symlink_to(clash)
    before = clash.read_text()
    r = run("solve", clash, "--out-dir", out, "--no-verify")
    one_line_error(r, 2, f"{out / 'clash.md'}: is a link to {clash}, which is an input of this command")
    assert clash.read_text() == before and (out / "clash.md").is_symlink()
    assert leftovers(out) == ["clash.md"]


def test_requests_with_no_output_token_are_planned_and_said_to_be_left_out_of_the_log_replay(tmp_path):
    # The simulator replays requests that decode: a log's rows with an empty output stay in the
    # histogram (their prefill is work) and the report says the replay leaves them out.
    assert run("synth", "chat", "-n", 2000, "--seed", 1, "-o", tmp_path / "full.csv").exit_code == 0
    lines = (tmp_path / "full.csv").read_text().splitlines()
    header = lines[0].split(",")
    out_col = header.index('"output_tokens"')
    for i in (5, 6, 7):
        fields = lines[i].split(",")
        fields[out_col] = "0"
        lines[i] = ",".join(fields)
    (tmp_path / "log.csv").write_text("\n".join(lines) + "\n")
    path = scenario(tmp_path, BASE.replace("{constant: {prompt_tokens: 1000, output_tokens: 200}}", "{log: log.csv}"))
    r = run("solve", path, "--out-dir", tmp_path / "out", "--no-verify")
    assert r.exit_code == 0, r.output
    report = (tmp_path / "out" / "tiny.md").read_text()
    assert ("3 request(s) with no output token are planned, but left out of the replay of the log's own arrivals "
            "(the simulator replays requests that decode).") in report


def test_an_output_folder_made_for_a_run_that_fails_is_taken_away(tmp_path):
    # the reports would go inside the folder of logs the scenario reads: refused when the first is
    # written, after the output folder was made for them
    logs = tmp_path / "logs"
    logs.mkdir()
    assert run("synth", "chat", "-n", 2000, "--seed", 1, "-o", logs / "part-0.csv").exit_code == 0
    path = scenario(tmp_path, BASE.replace("{constant: {prompt_tokens: 1000, output_tokens: 200}}", "{log: logs}"))
    r = run("solve", path, "--out-dir", logs / "out" / "deeper", "--no-verify")
    one_line_error(r, 2, "is inside the input folder 'logs'")
    assert leftovers(logs) == ["part-0.csv"]
    # a folder that was there before is not one the run made, however the path reaches it
    (logs / "kept").mkdir()
    r = run("solve", path, "--out-dir", logs / "new" / ".." / "kept", "--no-verify")
    one_line_error(r, 2, "is inside the input folder 'logs'")
    assert leftovers(logs) == ["kept", "part-0.csv"]


def test_debug_shows_the_traceback_and_keeps_the_documented_exit_code(tmp_path):
    r = run("--debug", "solve", scenario(tmp_path, BASE.replace("tp: [1]", "tp: [3]")), "--no-report")
    assert r.exit_code == 2 and "Traceback" in r.output and "power of two" in r.output


def test_a_missing_log_is_named_by_the_scenario_and_its_field(tmp_path):
    path = scenario(tmp_path, BASE.replace("{constant: {prompt_tokens: 1000, output_tokens: 200}}", "{log: nolog.csv}"))
    one_line_error(run("solve", path, "--no-report"), 2,
                   f"{path}: traffic: source.log: 'nolog.csv' does not exist (paths are relative to the scenario's folder)")


@pytest.mark.parametrize(("log", "text", "fragment", "option"), [
    ("log.csv", "a\n1\n", "no column 'prompt_tokens' (prompt tokens); the file has: a — name the columns with "
                          "traffic.source.columns (prompt, output, time)", "--prompt-col/--output-col/--time-col"),
    ("log.txt", "prompt_tokens,output_tokens\n10,5\n",
     "unknown log extension '.txt'; expected one of .parquet, .pq, .csv, .jsonl, .ndjson, .json (rename it to one of "
     "them)", "(or pass --format)"),
])
def test_a_scenario_s_log_is_told_what_to_set_in_the_scenario_not_on_a_command_line(tmp_path, log, text, fragment,
                                                                                    option):
    (tmp_path / log).write_text(text)
    path = scenario(tmp_path, BASE.replace("{constant: {prompt_tokens: 1000, output_tokens: 200}}", f"{{log: {log}}}"))
    line = one_line_error(run("solve", path, "--no-report"), 2, f"{tmp_path / log}: {fragment}")
    assert "--" not in line.replace(" — ", "")  # no option of `planner histogram`
    # the same log given to `planner histogram` is told its option
    one_line_error(run("histogram", tmp_path / log, "--output", tmp_path / "h.parquet"), 2, option)


def test_a_missing_config_json_is_named_by_the_scenario_and_its_field(tmp_path):
    path = scenario(tmp_path, BASE.replace("model: llama-3.1-8b", "model: {config_json: none.json}"))
    one_line_error(run("solve", path, "--no-report"), 2,
                   f"{path}: model.config_json: 'none.json' is no file (paths are relative to the scenario's folder)")


@pytest.mark.parametrize("command", ["solve", "histogram"])
def test_a_log_name_longer_than_the_file_system_allows_is_a_missing_log(tmp_path, command):
    # Python 3.11's exists() raises for such a name (ENAMETOOLONG) where it returns False for a missing one.
    log = "x" * 300 + ".csv"
    if command == "solve":
        path = scenario(tmp_path, BASE.replace("{constant: {prompt_tokens: 1000, output_tokens: 200}}", f"{{log: {log}}}"))
        one_line_error(run("solve", path, "--no-report"), 2, f"{path}: traffic: source.log: '{log}' does not exist")
    else:
        for fmt in ("auto", "csv"):
            one_line_error(run("histogram", tmp_path / log, "--format", fmt, "--output", tmp_path / "h.parquet"), 2,
                           f"{tmp_path / log}: no such file")


def test_a_path_the_system_refuses_where_no_check_asked_first_is_one_line_of_bad_input(tmp_path, monkeypatch):
    log = tmp_path / "log.csv"
    log.write_text("prompt_tokens,output_tokens,timestamp_ms\n10,5,1\n")

    def refuse(path, kind):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr("planner.workload.readers.path_is", refuse)
    one_line_error(run("histogram", log, "--output", tmp_path / "h.parquet"), 2, f"{log}: cannot read: permission denied")
    assert leftovers(tmp_path) == [log.name]
    r = run("--debug", "histogram", log, "--output", tmp_path / "h.parquet")
    assert r.exit_code == 2 and "Traceback" in r.output and "PermissionError" in r.output


@pytest.mark.parametrize(("written", "seconds"), [("1e3", 1000.0), ("2.5e1", 25.0), ("1.5E+1", 15.0)])
def test_a_target_in_exponent_form_is_a_number(tmp_path, written, seconds):
    # YAML 1.1 would read 1e3 as text; here it is 1000, as for every other reader (and for a rate)
    from planner.scenario import load_scenario

    path = scenario(tmp_path, BASE + f"slo: {{statistic: p99, bands: [{{ttft_s: {written}, tpot_ms: 50}}]}}\n")
    assert load_scenario(path)[0].slo.to_slo().bands[0].ttft.limit_s == seconds
    r = run("solve", path, "--no-report", "--no-verify")
    assert r.exit_code == 0, r.output


def test_a_name_written_like_a_number_in_exponent_form_stays_a_name(tmp_path):
    # only targets read 1e3 as a number: a scenario (or a model imported under --name 8e1) keeps its name
    r = run("solve", scenario(tmp_path, BASE.replace("name: tiny", "name: 8e1")), "--no-report", "--no-verify", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["scenario"] == "8e1"


def test_a_refused_target_says_once_what_it_got(tmp_path):
    text = BASE + "slo: {statistic: p99, bands: [{ttft_s: 'soon', tpot_ms: 50}]}\n"
    line = one_line_error(run("solve", scenario(tmp_path, text), "--no-report"), 2, "slo.bands[0].ttft_s: ")
    assert line.count("(got 'soon')") == 1


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--typical-tokens", 100, "--prompt-tokens", 5, "--output-tokens", 5],
         "give one of --typical-tokens, --histogram or --prompt-tokens/--output-tokens"),
        (["--typical-tokens", 100, "--shared-prefix-tokens", 50], "--shared-prefix-tokens needs a traffic class"),
        (["--tpot-ms", 50, "--ttft-s", 1], "--ttft-s, --tpot-ms needs a traffic class"),
    ],
)
def test_capacity_refuses_options_it_would_ignore_or_answer_twice(args, expected):
    one_line_error(run("capacity", "llama-3.1-8b", "h100-sxm", *args), 2, expected)


def test_a_log_given_as_a_histogram_file_is_told_what_a_histogram_file_is(tmp_path):
    log = tmp_path / "chat.csv"
    log.write_text("prompt_tokens,output_tokens\n100,10\n")
    one_line_error(run("capacity", "llama-3.1-8b", "h100-sxm", "--histogram", log), 2,
                   f"{log}: is not a Parquet file; a histogram file is what `planner histogram LOG... -o FILE.parquet` "
                   "writes from logs")


def test_a_histogram_file_pyarrow_cannot_read_is_told_as_solve_tells_it(tmp_path):
    """capacity --histogram printed pyarrow's text ("Error creating dataset. Could not read schema ...")
    for a file cut short and for a folder holding a LICENSE file, where solve's traffic.source.histogram
    says what is wrong in the readers' words; now both say the same, capacity naming its option."""
    whole = ROOT / "data" / "samples" / "azure_conv_2023_sample.hist.parquet"
    cut = tmp_path / "cut.hist.parquet"
    cut.write_bytes(whole.read_bytes()[:5000])
    folder = tmp_path / "parts"
    folder.mkdir()
    (folder / "a.parquet").write_bytes(whole.read_bytes())
    (folder / "LICENSE.txt").write_text("CC BY 4.0\n")
    cases = [(cut, "not a Parquet file (no PAR1 magic bytes)"),
             (folder, "folder holds LICENSE.txt, which is not a log file by its name")]
    for path, problem in cases:
        line = one_line_error(run("capacity", "llama-3.1-8b", "h100-sxm", "--histogram", path), 2,
                              f"--histogram: {path}: {problem}")
        assert "Could not read schema" not in line
        solved = scenario(tmp_path, BASE.replace("{constant: {prompt_tokens: 1000, output_tokens: 200}}",
                                                 f"{{histogram: {path}}}"))
        one_line_error(run("solve", solved, "--no-report"), 2, f"traffic.source.histogram: {path}: {problem}")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.csv").write_text("prompt_tokens,output_tokens\n100,10\n")
    one_line_error(run("capacity", "llama-3.1-8b", "h100-sxm", "--histogram", logs), 2,
                   f"--histogram: {logs}: is a request log, not a histogram file")


def test_a_missing_histogram_file_is_missing_not_unreadable(tmp_path):
    r = run("capacity", "llama-3.1-8b", "h100-sxm", "--histogram", tmp_path / "nope.parquet")
    one_line_error(r, 2, f"{tmp_path / 'nope.parquet'}: no such file")


def test_rows_excluded_for_their_time_alone_are_named_by_column_with_the_way_to_keep_their_lengths(tmp_path):
    log = tmp_path / "log.csv"
    log.write_text("prompt_tokens,output_tokens,timestamp_ms\n"
                   "100,10,1700000000000\n50000,10,\n100,10,1700000060000\n50000,10,\n100,10,1700000120000\n")
    r = run("histogram", log, "--json")
    assert r.exit_code == 0, r.output
    assert (f"warning: {log}: excluded 2 rows (null 2); by column: timestamp_ms 2; 2 of them fail on their time "
            "alone, and their lengths are left out too (`planner histogram --no-time` reads every row's lengths)") in r.stderr
    kept = run("histogram", log, "--no-time", "--json")
    assert json.loads(kept.stdout)["prompt_tokens"]["max"] == 50000
    # a row whose length fails too gets no such promise: --no-time would not bring it back
    log.write_text("prompt_tokens,output_tokens,timestamp_ms\n100,10,1700000000000\nx,10,\n100,10,1700000060000\n")
    r = run("histogram", log, "--json")
    assert f"warning: {log}: excluded 1 row (null 1); by column: prompt_tokens 1, timestamp_ms 1\n" in r.stderr


def test_an_output_folder_that_cannot_be_looked_at_is_a_one_line_error(tmp_path, monkeypatch):
    # (as a user without search permission on a parent: Path.exists raises for EACCES; root cannot
    # be refused, so the refusal is stood in for)
    from planner.errors import InputError
    from planner.files import output_folder

    def refused(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "exists", refused)
    with pytest.raises(InputError, match="cannot make the output folder: permission denied"):
        output_folder(tmp_path / "locked" / "out")


def test_a_long_value_in_a_message_counts_its_characters_not_its_quotes(tmp_path):
    path = scenario(tmp_path, BASE.replace("name: tiny", "name: " + "é" * 100))
    one_line_error(run("solve", path, "--no-report"), 2, f"(got '{'é' * 59}... (100 characters))")


# ---- settings that mean something only below the context limit ------------------------------
@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("lower_context_limit: 16384\n", "lower_context_limit 16384 must be below context_limit 8192: it is the lower "
                                         "limit whose plan the report prices as a lever"),
        ("lower_context_limit: 8192\n", "lower_context_limit 8192 must be below context_limit 8192"),
        ("split_thresholds: [4096, 8192, 16384]\n",
         "split_thresholds: 8192, 16384 are at or above context_limit 8192; a split threshold must lie below the limit"),
        ("fleet: [{gpu: h100-sxm, context_limit: 32768, replicas: 2}]\n",
         "fleet[0].context_limit 32768 is above context_limit 8192: the scenario rejects longer requests"),
    ],
)
def test_a_setting_at_or_past_the_context_limit_is_refused_not_dropped(tmp_path, extra, expected):
    path = scenario(tmp_path, BASE + extra)
    out = tmp_path / "out"
    one_line_error(run("solve", path, "--out-dir", out), 2, f"{path}: {expected}")
    assert leftovers(out) == []


def test_cbc_stopped_by_its_time_limit_is_not_read_as_an_infeasible_scenario(tmp_path):
    """CBC given 1 ms said "Integer infeasible" on inventory_mixed (which 5 ms solves), and the message
    blamed the inventory caps, though L40S is uncapped; it is the time limit that stopped it."""
    text = (ROOT / "scenarios" / "inventory_mixed.yaml").read_text() + "\nsolver: {backend: cbc, time_limit_s: 0.001}\n"
    path = tmp_path / "tight.yaml"
    path.write_text(text)  # (its traffic is synthetic: no file beside it)
    one_line_error(run("solve", path, "--no-verify", "--no-report"), 3,
                   f"{path}: no plan found within the solver's time limit of 0.001 s; raise solver.time_limit_s")


def test_a_re_solve_the_time_limit_stopped_blames_the_time_limit_not_the_caps():
    """An exploration's row (a lever, the TTFT sweep, a GPU type alone) whose re-solve the time limit
    stopped named what the caps allow, as for a re-solve proved infeasible."""
    import dataclasses

    from planner.ilp import Candidate, SplitOption, solve_fleet
    from planner.plan_search import TIME_LIMIT_WHY, outcome_of

    infeasible = solve_fleet([SplitOption("none", None, {"all": 10.0})], [Candidate("none", "all", "c", "h", 1, 3.0, 1.0)],
                             inventory={"h": 5})
    assert infeasible.status == "Infeasible"
    assert outcome_of("lever", infeasible, "the caps allow at most 5 req/s").why_not == "the caps allow at most 5 req/s"
    stopped = dataclasses.replace(infeasible, status="Not Solved")
    assert outcome_of("lever", stopped, "the caps allow at most 5 req/s").why_not == TIME_LIMIT_WHY


def test_caps_too_small_for_min_replicas_name_that_setting_not_the_load(tmp_path):
    """Three H100s carry the load; a pool of at least four replicas does not fit them. The message
    blamed the caps and the load, which they do carry."""
    text = BASE.replace("gpus: [h100-sxm]", "gpus: [{id: h100-sxm, max_gpus: 3}]") + "min_replicas_per_pool: 4\n"
    path = scenario(tmp_path, text)
    one_line_error(run("solve", path, "--no-verify", "--out-dir", tmp_path / "out"), 3,
                   f"{path}: class 'all (≤ 8,192 tokens)': min_replicas_per_pool 4 asks for 4 replicas in a pool, but "
                   "the inventory caps (h100-sxm ≤ 3 GPUs) allow at most 3 of any config that serves it; lower "
                   "min_replicas_per_pool or raise the caps")
    assert leftovers(tmp_path / "out") == []
    assert run("solve", scenario(tmp_path, text.replace("min_replicas_per_pool: 4", "min_replicas_per_pool: 3"),
                                 name="three.yaml"), "--no-verify", "--no-report").exit_code == 0


@pytest.mark.parametrize(("entry", "expected"), [
    ("{gpu: h900, replicas: 1}", "fleet[1].gpu: unknown GPU 'h900'; did you mean 'h200'?"),
    ("{gpu: h100-sxm, weight_dtype: bf17, replicas: 1}", "fleet[1].weight_dtype: unknown dtype 'bf17'; did you mean 'bf16'?"),
    ("{gpu: h100-sxm, kv_dtype: fp9, replicas: 1}", "fleet[1].kv_dtype: unknown dtype 'fp9'"),
])
def test_an_unknown_name_in_a_stated_fleet_names_its_entry_and_field(tmp_path, entry, expected):
    """With several entries, 'unknown GPU' alone does not say which one is wrong."""
    path = scenario(tmp_path, BASE + f"fleet: [{{gpu: h100-sxm, replicas: 2}}, {entry}]\n")
    one_line_error(run("solve", path, "--out-dir", tmp_path / "out"), 2, f"{path}: {expected}")
    assert leftovers(tmp_path / "out") == []


def test_a_setting_past_the_models_own_limit_names_that_limit(tmp_path):
    path = scenario(tmp_path, BASE.replace("context_limit: 8192\n", "") + "lower_context_limit: 131072\n")
    one_line_error(run("solve", path, "--no-report"), 2,
                   "lower_context_limit 131072 must be below the context limit 131072 ('llama-3.1-8b' "
                   "max_position_embeddings)")


# ---- names the reports print in their tables -------------------------------------------------
@pytest.mark.parametrize("name", ["chat|x", "docs\nlong", "tab\there"])
def test_a_band_name_that_would_break_the_reports_tables_is_refused(tmp_path, name):
    path = scenario(tmp_path, BASE + f"slo:\n  bands:\n    - {{name: {json.dumps(name)}, ttft_s: 2.0, tpot_ms: 50}}\n")
    one_line_error(run("solve", path, "--no-report"), 2,
                   "slo.bands[0].name: a name the reports print in their tables may not hold '|', a newline or "
                   f"another control character (got {name!r})")


def test_a_catalog_id_that_would_break_the_reports_tables_is_refused(tmp_path):
    path = scenario(tmp_path, BASE.replace("gpus: [h100-sxm]", "gpus: [h100-sxm]\ncatalog:\n  dtypes:\n"
                                           "    'fp|4': {bits_per_element: 4, source: test}"))
    one_line_error(run("solve", path, "--no-report"), 2, "a name the reports print in their tables may not hold '|'")


# ---- --write-lp onto a report's own file ----------------------------------------------------
@pytest.mark.parametrize("file", ["tiny.md", "TINY_split.png"])
def test_write_lp_onto_a_file_the_report_writes_is_refused_before_planning(tmp_path, file):
    path, out = scenario(tmp_path), tmp_path / "out"
    one_line_error(run("solve", path, "--out-dir", out, "--write-lp", out / file), 2,
                   f"--write-lp {out / file}: is also {file.lower() if file.startswith('TINY') else file}, a file the "
                   f"report of {path} writes; write the LP to another file")
    assert leftovers(out) == []


# ---- a log where a histogram file belongs -----------------------------------------------------
def test_a_request_log_given_as_the_scenarios_histogram_is_refused_with_the_way_to_use_it(tmp_path):
    log = tmp_path / "chat.csv"
    log.write_text("prompt_tokens,output_tokens\n100,10\n200,20\n")
    path = scenario(tmp_path, BASE.replace("source: {constant: {prompt_tokens: 1000, output_tokens: 200}}",
                                           "source: {histogram: chat.csv}"))
    one_line_error(run("solve", path, "--no-report"), 2,
                   f"{path}: traffic: source.histogram: 'chat.csv' is a request log, not a histogram file; give it as "
                   "source.log (with its preset or columns), or write its histogram with `planner histogram LOG -o "
                   "FILE.parquet`")


# ---- a forecast quarter's own problem names the quarter -----------------------------------------
def test_a_forecast_quarters_context_limit_past_the_model_names_the_quarter(tmp_path):
    path = scenario(tmp_path, BASE + "verify: false\nforecast:\n  quarters:\n    - {quarter: 2027Q1}\n"
                                     "    - {quarter: 2027Q2, context_limit: 262144}\n")
    out = tmp_path / "out"
    one_line_error(run("forecast", path, "--out-dir", out), 2,
                   f"{path}: forecast quarter 2027Q2: context_limit 262144 exceeds 'llama-3.1-8b' "
                   "max_position_embeddings 131072")
    assert leftovers(out) == []


# ---- a config.json without model_type ------------------------------------------------------------
def test_a_config_json_without_model_type_says_the_field_is_missing_and_names_the_scenarios_field(tmp_path):
    config = json.loads((HF / "llama-3.1-8b.json").read_text())
    del config["model_type"]
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps(config))
    r = run("catalog", "import-hf", tmp_path / "cfg" / "config.json", "--name", "mine")
    one_line_error(r, 2, "model_type: required field is missing (architectures: LlamaForCausalLM)")
    path = scenario(tmp_path, BASE.replace("model: llama-3.1-8b", "model: {config_json: cfg/config.json}"))
    one_line_error(run("solve", path, "--no-report"), 2,
                   f"{path}: model.config_json (cfg/config.json): model_type: required field is missing")
    assert "a scenario's config_json takes no layer kinds" in run("solve", path, "--no-report").stderr


# ---- a synthetic log that could never fit the span a log may have --------------------------------
def test_an_impossible_synthetic_span_is_refused_before_anything_is_drawn(tmp_path, monkeypatch):
    from planner.workload import synth

    monkeypatch.setattr(synth.np.random, "default_rng", lambda *a: pytest.fail("drew before refusing"))
    path = scenario(tmp_path, BASE.replace("source: {constant: {prompt_tokens: 1000, output_tokens: 200}}",
                                           "source: {synthetic: {name: chat, requests: 20000000, rate_rps: 0.03}}"))
    one_line_error(run("solve", path, "--no-report"), 2,
                   "traffic: 20,000,000 requests at 0.03 req/s span about 21.1 years, more than a log may (15.9 "
                   "years): raise the rate to 0.0398 req/s or more, or lower the count")


# ---- a stated fleet judged by the model alone -------------------------------------------------
def test_a_stated_fleet_not_simulated_says_what_the_model_finds_it_misses(tmp_path):
    path = scenario(tmp_path, BASE.replace("peak: {method: explicit, rps: 4}", "peak: {method: explicit, rps: 30}")
                    + "slo: {bands: [{ttft_s: 1.0, tpot_ms: 8}]}\nfleet: [{gpu: h100-sxm, replicas: 2}]\n")
    r = run("solve", path, "--no-verify", "--no-report")
    assert r.exit_code == 0, r.output
    assert "[the fleet does not carry its peak (all (≤ 8,192 tokens): 30 req/s at the peak, capacity " in r.stdout
    assert "the model predicts it misses (all (≤ 8,192 tokens): every prompt: TPOT p99 " in r.stdout
    out = json.loads(run("solve", path, "--no-verify", "--no-report", "--json").stdout)
    assert out["given_fleet_problem"].startswith("the fleet does not carry its peak")
    [band] = out["plan"][0]["bands"]
    assert band["judged_by"] == "model" and band["holds"] is False and band["tpot_ms"]["predicted"] > 8.0


# ---- a dtype whose own entry refuses the role a plan asks of it ---------------------------------
def test_a_dtype_whose_entry_refuses_the_kv_role_is_named_not_listed_as_supported(tmp_path):
    # it was refused as "GPU 'h100-sxm' does not support a bf16 KV cache; supported KV dtypes: bf16, ..."
    # and then as "no candidate config: ... cannot serve as a bf16 KV cache", naming neither field nor choice
    path = scenario(tmp_path, BASE + "catalog: {dtypes: {bf16: {kv: false}}}\n")
    one_line_error(run("solve", path, "--no-report"), 2,
                   "s.yaml: kv_dtypes[0]: 'bf16' is not a KV-cache dtype (its catalog entry's `kv` is false); "
                   "choose from fp16, fp8")
    path = scenario(tmp_path, BASE.replace("kv_dtypes: [bf16]", "kv_dtypes: [fp4]"))
    one_line_error(run("solve", path, "--no-report"), 2,
                   "s.yaml: kv_dtypes[0]: 'fp4' is not a KV-cache dtype (its catalog entry's `kv` is false); "
                   "choose from bf16, fp16, fp8")
    # an unknown name is matched among the dtypes the role allows: 'nvfp4' suggested 'fp4', refused above
    path = scenario(tmp_path, BASE.replace("kv_dtypes: [bf16]", "kv_dtypes: [nvfp4]"))
    one_line_error(run("solve", path, "--no-report"), 2,
                   "s.yaml: kv_dtypes[0]: unknown KV-cache dtype 'nvfp4'; did you mean 'fp8'? known: bf16, fp16, fp8")


def test_traffic_that_no_request_of_fits_the_context_limit_names_the_field(tmp_path):
    path = scenario(tmp_path, BASE.replace("prompt_tokens: 1000", "prompt_tokens: 9000"))
    one_line_error(run("solve", path, "--no-report"), 2,
                   "s.yaml: context_limit: no request of the traffic fits the 8,192-token context limit")


# ---- a per-token target no load meets -------------------------------------------------------------
@pytest.mark.parametrize("option", ["--tpot-ms", "--itl-ms"])
def test_capacity_says_when_a_per_token_target_is_missed_with_no_load(option):
    r = run("capacity", "llama-3.1-8b", "h100-sxm", option, 0.001, "--prompt-tokens", 100, "--output-tokens", 10)
    assert r.exit_code == 0, r.output
    kind = option[2:].split("-")[0].upper()
    said = f"note: band 'all': {kind} p99 ≤ 0.001 ms is below the floor of "
    assert said in r.stdout and "ms (its p99 with the replica all but empty: the config's own steps)" in r.stdout
    assert float(r.stdout.split(said)[1].split(" ms")[0]) > 1.0  # an 8B's decode step on an H100: milliseconds


def test_a_usage_error_under_python_m_names_the_planner_command():
    r = subprocess.run([sys.executable, "-m", "planner", "kv", "--bogus"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2
    assert r.stderr.strip().endswith("(see 'planner kv --help')"), r.stderr


# ---- found by reading the change again ------------------------------------------------------------
def test_a_split_threshold_below_a_forecast_quarters_raised_limit_is_accepted(tmp_path):
    """A quarter may raise the context limit; a threshold below its limit splits that quarter's
    traffic, so it is checked against the highest limit, not refused against the base one."""
    text = BASE + ("verify: false\nsplit_thresholds: [16384]\nforecast:\n  quarters:\n    - {quarter: 2027Q1}\n"
                   "    - {quarter: 2027Q2, context_limit: 32768}\n")
    r = run("solve", scenario(tmp_path, text), "--no-report")
    assert r.exit_code == 0, r.output
    one_line_error(run("solve", scenario(tmp_path, text.replace("[16384]", "[32768]"), name="t.yaml"), "--no-report"), 2,
                   "split_thresholds: 32768 is at or above the highest context limit of any forecast quarter (32768)")


def test_an_unsimulated_plans_empty_band_holds_in_json_as_an_unmeasured_one_does(tmp_path):
    # a band no request of a pool falls in has no prediction: it holds vacuously, not "misses"
    text = BASE + "slo: {bands: [{prompt_below: 512, ttft_s: 1.0, tpot_ms: 60}, {ttft_s: 5.0, tpot_ms: 60}]}\n"
    out = json.loads(run("solve", scenario(tmp_path, text), "--no-verify", "--no-report", "--json").stdout)
    empty, full = out["plan"][0]["bands"]
    assert empty["ttft_s"]["predicted"] is None and empty["holds"] is True and empty["judged_by"] == "model"
    assert full["holds"] is True and out["given_fleet_problem"] is None


# ---- a second audit (2026-12-04): one test per root cause ------------------------------------
def test_a_refused_rename_puts_every_output_back_and_prints_no_success_line(tmp_path, monkeypatch):
    """The report's Markdown cannot replace its destination (an immutable file, say): the figures
    already renamed into place are taken back, an older figure is restored, and the line saying the
    report was written is not printed before the error."""
    import planner.files

    path, out = scenario(tmp_path), tmp_path / "out"
    out.mkdir()
    (out / "tiny_split.png").write_bytes(b"an older figure")
    replace = os.replace

    def refusing(src, dst):
        if Path(dst).name == "tiny.md":
            raise PermissionError(13, "Permission denied", str(dst))
        return replace(src, dst)

    monkeypatch.setattr(planner.files.os, "replace", refusing)
    r = run("solve", path, "--no-verify", "--out-dir", out)
    one_line_error(r, 2, f"{out / 'tiny.md'}: cannot write")
    assert r.stdout == ""
    assert leftovers(out) == ["tiny_split.png"] and (out / "tiny_split.png").read_bytes() == b"an older figure"


@pytest.mark.parametrize("interruption", [PermissionError(13, "Permission denied"), KeyboardInterrupt()])
def test_outputs_put_in_place_are_put_back_when_a_later_one_fails(tmp_path, monkeypatch, interruption):
    """Renames refused part-way, or interrupted: the file already replaced gets its former contents
    back, the new one is taken away with the folder made for it, no temporary file stays; no
    destination is ever missing meanwhile (the former file is kept by a second link, not moved)."""
    from planner.files import InputError, output_folder, outputs_together, write_text_atomic

    (tmp_path / "a.md").write_text("former")
    replace = os.replace
    seen_a = []

    def refusing(src, dst):
        if Path(dst).name == "b.md":
            seen_a.append((tmp_path / "a.md").read_text())  # a is in place: new, and never missing
            raise interruption
        return replace(src, dst)

    def write_both():
        with outputs_together():
            write_text_atomic(tmp_path / "a.md", "new a")
            write_text_atomic(output_folder(tmp_path / "new" / "deep") / "b.md", "new b")

    monkeypatch.setattr(os, "replace", refusing)
    with pytest.raises(InputError if isinstance(interruption, OSError) else KeyboardInterrupt):
        write_both()
    assert seen_a == ["new a"]
    assert leftovers(tmp_path) == ["a.md"] and (tmp_path / "a.md").read_text() == "former"


@pytest.mark.parametrize(("text", "field"), [
    ("simulation: {max_rounds: true}\n", "simulation.max_rounds"),
    ("simulation: {requests: yes}\n", "simulation.requests"),
    ("simulation: {band_requests: on}\n", "simulation.band_requests"),
])
def test_a_boolean_where_a_whole_number_belongs_is_refused(tmp_path, text, field):
    one_line_error(run("solve", scenario(tmp_path, BASE + text), "--no-report"), 2,
                   f"{field}: Input should be a number, not true")


def test_a_boolean_peak_hour_is_refused(tmp_path):
    text = BASE.replace("peak: {method: explicit, rps: 4}",
                        "peak: {method: explicit, rps: 4}\n  profile: {shape: diurnal, peak_to_trough: 3, peak_hour: true}")
    one_line_error(run("solve", scenario(tmp_path, text), "--no-report"), 2,
                   "traffic.profile.peak_hour: Input should be a number, not true")


def test_a_band_cut_at_the_context_limit_is_refused(tmp_path):
    """Prompts of 8,192 tokens or more are never served at an 8,192-token limit: the band after the
    cut would hold no request, and every prompt would be held to the first band's targets."""
    text = BASE + "slo: {bands: [{prompt_below: 8192, ttft_s: 2.0}, {ttft_s: 20.0}]}\n"
    one_line_error(run("solve", scenario(tmp_path, text), "--no-report"), 2,
                   "slo.bands[0].prompt_below 8192 is at or above context_limit 8192: no request with so long a "
                   "prompt is served")


@pytest.mark.parametrize("text", ["0\n", "false\n", "[]\n"])
def test_a_catalog_file_that_is_no_mapping_is_refused(tmp_path, text):
    catalog = tmp_path / "c.yaml"
    catalog.write_text(text)
    one_line_error(run("kv", "llama-3.1-8b", "--catalog", catalog), 2,
                   f"{catalog}: catalog overrides must be a mapping")


def test_an_empty_catalog_file_overrides_nothing(tmp_path):
    catalog = tmp_path / "c.yaml"
    catalog.write_text("")
    assert run("kv", "llama-3.1-8b", "--catalog", catalog).stdout == run("kv", "llama-3.1-8b").stdout


def test_a_header_with_spaces_around_its_names_says_so(tmp_path):
    log = tmp_path / "log.csv"
    log.write_text("prompt_tokens, output_tokens\n100, 10\n")
    one_line_error(run("histogram", log), 2,
                   "no column 'output_tokens' (output tokens); the file has: prompt_tokens, ' output_tokens' "
                   "('output_tokens' with spaces around it: a header's names are read as written)")


def test_a_scenario_description_stays_inside_its_quote():
    from planner.report import block_quote

    assert block_quote("line one\n# a heading\n| a | b |\x1b[31m\n\nGPUs:\th100\n") == (
        "> line one\n> # a heading\n> | a | b |[31m\n>\n> GPUs: h100")


def test_write_lp_through_a_link_onto_a_report_file_is_refused(tmp_path):
    path, out, links = scenario(tmp_path), tmp_path / "out", tmp_path / "links"
    out.mkdir()
    links.mkdir()
    (links / "plan.lp").symlink_to(Path("..") / "out" / "tiny.md")
    one_line_error(run("solve", path, "--out-dir", out, "--write-lp", links / "plan.lp"), 2,
                   f"--write-lp {links / 'plan.lp'}: is also tiny.md, a file the report of {path} writes")
    assert leftovers(out) == []


def _small_log(path: Path) -> Path:
    path.write_text("prompt_tokens,output_tokens\n" + "".join(f"{100 + i},10\n" for i in range(20)))
    return path


def test_two_parts_of_a_histogram_folder_built_from_the_same_log_are_refused(tmp_path):
    # a part copied into the folder counted every request twice (40 of 20), and sized for twice the peak
    log = _small_log(tmp_path / "log.csv")
    parts = tmp_path / "parts"
    parts.mkdir()
    assert run("histogram", log, "-o", parts / "a.parquet").exit_code == 0
    (parts / "b.parquet").write_bytes((parts / "a.parquet").read_bytes())
    one_line_error(run("histogram", parts), 2, f"{parts}: part b.parquet was built from a log with the same contents "
                   "as a log part a.parquet was built from; its requests would count twice")
    other = tmp_path / "other.csv"
    other.write_text("prompt_tokens,output_tokens\n" + "".join(f"{300 + i},20\n" for i in range(20)))
    assert run("histogram", other, "-o", parts / "b.parquet").exit_code == 0
    r = run("histogram", parts, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["requests"] == 40, r.output


def test_a_log_given_again_by_a_hard_link_is_refused(tmp_path):
    log = _small_log(tmp_path / "log.csv")
    os.link(log, tmp_path / "again.csv")
    one_line_error(run("histogram", log, tmp_path / "again.csv"), 2,
                   f"{tmp_path / 'again.csv'}: is the same file as {log} (a link to it); its requests would count twice")


def test_a_folder_holding_a_link_to_one_of_its_own_logs_is_refused(tmp_path):
    parts = tmp_path / "parts"
    parts.mkdir()
    _small_log(parts / "a.csv")
    (parts / "b.csv").symlink_to("a.csv")
    one_line_error(run("histogram", parts), 2, "b.csv: is the same file as ", "a.csv (a link to it)")
    assert json.loads(run("histogram", parts / "a.csv", "--json").stdout)["requests"] == 20
    (parts / "b.csv").unlink()
    one_line_error(run("histogram", parts, parts / "a.csv"), 2,
                   f"{parts / 'a.csv'}: is read twice, in {parts} and in {parts / 'a.csv'}; its requests would count twice")


def test_a_log_counted_already_by_a_copy_or_by_a_histogram_built_from_it_is_refused(tmp_path):
    """The same requests by two routes: a copy of a log beside it, or last quarter's histogram given
    again with a log it was built from, counted its requests twice (a reviewer's 2,000-row log read
    as 4,000). A histogram records its logs' content fingerprints; either order is refused, and a
    histogram of other logs is summed as before."""
    from planner.workload.fingerprint import log_fingerprint
    from planner.workload.histfile import read_histogram_and_metadata

    log = _small_log(tmp_path / "jan.csv")
    copy = tmp_path / "copy.csv"
    copy.write_bytes(log.read_bytes())
    one_line_error(run("histogram", log, copy), 2,
                   f"{copy}: holds the same contents as {log}; its requests would count twice")
    last = tmp_path / "last.parquet"
    assert run("histogram", log, "-o", last).exit_code == 0
    assert read_histogram_and_metadata(last)[1].source_fingerprints == [log_fingerprint(log, "csv")]
    one_line_error(run("histogram", last, copy), 2,
                   f"{copy}: holds the same contents as a log {last} was built from; its requests would count twice")
    one_line_error(run("histogram", copy, last), 2,
                   f"{last}: was built from a log with the same contents as {copy}; its requests would count twice")
    other = tmp_path / "feb.csv"
    other.write_text("prompt_tokens,output_tokens\n" + "".join(f"{300 + i},20\n" for i in range(20)))
    both = tmp_path / "both.parquet"
    r = run("histogram", last, other, "--json", "-o", both)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["requests"] == 40
    # the chain: a histogram built from a histogram keeps the fingerprints of the logs under it
    assert read_histogram_and_metadata(both)[1].source_fingerprints == [log_fingerprint(f, "csv") for f in (log, other)]
    one_line_error(run("histogram", both, log), 2, f"{log}: holds the same contents as a log {both} was built from")


def test_a_log_with_excluded_rows_warns_on_the_command_line_and_in_the_json(tmp_path):
    """A plan made from 2 of a log's 20 rows must not pass for one made from all of them where no
    report is written to say so."""
    log = tmp_path / "log.csv"
    log.write_text("prompt_tokens,output_tokens\n" + "".join(f"{'x' if i % 10 else 100 + i},10\n" for i in range(20)))
    path = scenario(tmp_path, BASE.replace("source: {constant: {prompt_tokens: 1000, output_tokens: 200}}",
                                           f"source: {{log: {log.name}}}"))
    r = run("solve", path, "--no-verify", "--no-report", "--json")
    assert r.exit_code == 0, r.output
    note = "Excluded rows: 18 non_numeric (of 20 read). log.csv: by column: prompt_tokens 18."
    assert r.stderr == f"warning: {path}: {note}\n"
    assert note in json.loads(r.stdout)["traffic_notes"]
    # from the log's histogram file: the rows read when it was written
    assert run("histogram", log, "-o", tmp_path / "h.parquet").exit_code == 0
    path = scenario(tmp_path, BASE.replace("source: {constant: {prompt_tokens: 1000, output_tokens: 200}}",
                                           "source: {histogram: h.parquet}"), name="h.yaml")
    r = run("solve", path, "--no-verify", "--no-report")
    assert r.exit_code == 0, r.output
    assert r.stderr == f"warning: {path}: Excluded rows: 18 non_numeric (of 20 read).\n"
    # a run that fails says one line, its error: the warning belongs to a plan, and none was made
    failing = scenario(tmp_path, path.read_text(encoding="utf-8") + "slo: {bands: [{ttft_s: 0.001}]}\n", name="f.yaml")
    one_line_error(run("solve", failing, "--no-verify", "--out-dir", tmp_path / "out"), 3, f"{failing}: ")
    assert not (tmp_path / "out").exists()


SILENCE = ("The log holds no request for 35.8 hours in a row, from 2023-11-16 18:10 to 2023-11-18 06:00 UTC, of its "
           "1.5 days of whole minutes: its mean rate is 0.0004169 requests/s over its whole minutes, 0.1 requests/s "
           "without those hours.")


def _stray_row_scenario(tmp_path: Path, traffic: str = "") -> tuple[Path, Path, list[str]]:
    """Rows over ten minutes and one stray row a day and a half later; the scenario, its log and the rows."""
    rows = [f"2023-11-16 18:{m // 6:02d}:{m % 6 * 10:02d},1000,200\n" for m in range(60)]
    log = tmp_path / "log.csv"
    log.write_text("timestamp,prompt_tokens,output_tokens\n" + "".join(rows) + "2023-11-18 06:00:00,100,10\n")
    path = scenario(tmp_path, BASE.replace("source: {constant: {prompt_tokens: 1000, output_tokens: 200}}",
                                           f"source: {{log: {log.name}, columns: {{prompt: prompt_tokens, "
                                           "output: output_tokens, time: timestamp}}").replace(
                                               "peak: {method: explicit, rps: 4}", "peak: {method: max}" + traffic)
                    + "forecast: {quarters: [{quarter: 2027Q1}]}\n")
    return path, log, rows


def test_a_measured_day_with_hours_of_silence_warns_that_it_counts_them_idle(tmp_path):
    """The log spans a day, so its day is measured, and 35 hours without a request count as idle hours
    (the audit's log: the cost per million tokens at the day's volume went from about $0.05 to $29.77).
    The warning says where the silence lies and the mean rate with and without it. A log without such
    a silence says nothing."""
    path, log, rows = _stray_row_scenario(tmp_path)
    r = run("solve", path, "--no-verify", "--no-report", "--json")
    assert r.exit_code == 0, r.output
    note = (f"{SILENCE} The measured day counts them as idle, which lowers the day's volume and raises its cost per "
            "million tokens; if the log has a gap or a stray row, plan from the log without it, or state the busiest "
            "hour's mean rate (traffic.mean_rps) with the day's curve (traffic.profile: hourly or a shape).")
    assert r.stderr == f"warning: {path}: {note}\n"
    assert note in json.loads(r.stdout)["traffic_notes"]
    # a forecast prices the measured day too, and says so as well
    r = run("forecast", path, "--no-report", "--json")
    assert r.exit_code == 0 and r.stderr == f"warning: {path}: {note}\n", r.output
    assert note in json.loads(r.stdout)["traffic_notes"]

    log.write_text("timestamp,prompt_tokens,output_tokens\n" + "".join(rows))  # ten minutes: a flat day, no warning
    r = run("solve", path, "--no-verify", "--no-report")
    assert r.exit_code == 0 and r.stderr == "", r.output


@pytest.mark.parametrize(("profile", "mean_multiplier"), [
    ("{shape: flat}", 1.0),
    ("{shape: diurnal, peak_to_trough: 3, peak_hour: 14}", 2 / 3),  # 1/3 + (1 - 1/3)/2: the cosine averages 0
    ("{hourly: [" + ", ".join(["2"] * 12 + ["1"] * 12) + "]}", 0.75),
])
def test_a_stated_day_whose_mean_rate_spans_hours_of_silence_warns_too(tmp_path, profile, mean_multiplier):
    """A stated profile takes the day's volume from the log's mean rate over its span, which the stray
    row dilutes 240-fold (0.1 requests/s to 0.0004169), as it did the measured day's; it said nothing.
    Advising a stated profile was wrong here: the scenario states one. traffic.mean_rps, stated, sets
    the volume instead of the span, and the warning goes."""
    path, _, _ = _stray_row_scenario(tmp_path, f"\n  profile: {profile}")
    note = (f"{SILENCE} The day's volume is read from that mean rate, so it counts them as idle too, which lowers "
            "the day's volume and raises its cost per million tokens; if the log has a gap or a stray row, plan from "
            "the log without it, or state the busiest hour's mean rate (traffic.mean_rps).")
    r = run("solve", path, "--no-verify", "--no-report", "--json")
    assert r.exit_code == 0, r.output
    assert r.stderr == f"warning: {path}: {note}\n"
    assert note in json.loads(r.stdout)["traffic_notes"]
    r = run("forecast", path, "--no-report", "--json")
    assert r.exit_code == 0 and r.stderr == f"warning: {path}: {note}\n", r.output
    forecast = json.loads(r.stdout)
    assert note in forecast["traffic_notes"]
    assert forecast["quarters"][0]["mean_rps"] == pytest.approx(54 / 2159 / 60 * mean_multiplier, rel=1e-9)

    stated = path.read_text(encoding="utf-8").replace("peak: {method: max}", "peak: {method: max}\n  mean_rps: 0.1")
    path.write_text(stated, encoding="utf-8")
    r = run("forecast", path, "--no-report", "--json")
    assert r.exit_code == 0 and r.stderr == "", r.output
    forecast = json.loads(r.stdout)
    assert not any("no request for" in n for n in forecast["traffic_notes"])
    assert forecast["quarters"][0]["mean_rps"] == pytest.approx(0.1 * mean_multiplier, rel=1e-9)


def test_a_peak_quantile_that_counts_hours_of_silence_says_so_with_the_peak_without_them(tmp_path):
    """Twenty busy minutes around seven silent hours, the day's volume stated (traffic.mean_rps), so
    only the peak reads the span: its 0.99 quantile of per-minute rates takes the silent minutes as
    minutes of no traffic and lands lower among the busy ones. A gap in the logging would size the
    fleet for less than the service's peak: the warning gives the peak with and without the silence."""
    per_minute = {m: 30 + m for m in range(10)} | {m: 40 + m - 430 for m in range(430, 440)}
    rows = [f"{m * 60_000 + 60_000 * i // n},1000,200\n" for m, n in per_minute.items() for i in range(n)]
    (tmp_path / "log.csv").write_text("t_ms,prompt_tokens,output_tokens\n" + "".join(rows))
    path = scenario(tmp_path, BASE.replace("source: {constant: {prompt_tokens: 1000, output_tokens: 200}}",
                                           "source: {log: log.csv, columns: {prompt: prompt_tokens, output: "
                                           "output_tokens, time: t_ms}, time_unit: ms}").replace(
                                               "peak: {method: explicit, rps: 4}",
                                               "peak: {method: quantile, quantile: 0.99}\n  profile: {shape: flat}"
                                               "\n  mean_rps: 0.5"))
    whole = [per_minute.get(m, 0) for m in range(1, 439)]  # the log's whole minutes: not its first and last
    busy = [c for c in whole if c]
    peak, without = np.quantile(whole, 0.99) / 60, np.quantile(busy, 0.99) / 60
    r = run("solve", path, "--no-verify", "--no-report", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["peak_rps"] == pytest.approx(peak, rel=1e-12) and peak < without
    note = (f"The peak, the 0.99 quantile of its per-minute rates, counts them too: {peak:,.4g} requests/s, "
            f"{without:,.4g} without those hours; if they are a gap in the logging, the fleet is sized for less than "
            "the service's peak: plan from the log without it, or state the peak (traffic.peak: {method: explicit, "
            "rps: ...}).")
    # relative timestamps: where the silence lies on the log's own clock, not as a date in January 1970
    assert r.stderr.startswith(f"warning: {path}: The log holds no request for 7.0 hours in a row, from 0:10 to 7:10 "
                               "on its own clock (h:mm from its time 0), of its 0.3 days") and r.stderr.endswith(
        note + "\n") and "day's volume" not in r.stderr
    assert json.loads(r.stdout)["traffic_notes"][-1].endswith(note)
    # the busiest minute is no quantile of them: nothing to say
    path.write_text(path.read_text().replace("{method: quantile, quantile: 0.99}", "{method: max}"))
    r = run("solve", path, "--no-verify", "--no-report")
    assert r.exit_code == 0 and r.stderr == "", r.output


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_datetimes_with_and_without_a_time_zone_in_one_column_are_refused(tmp_path, fmt):
    """Half the rows at +02:00 and half without a zone (read as UTC): the log's span tripled and its
    peak halved without a word. Every row zoned, or none, reads as before. (JSON Lines: arrow's reader
    would type the column itself and convert each zoned time to UTC, so it is read as text.)"""
    times = [f"2023-11-16 18:{m:02d}:00" for m in range(10)]

    def write(rows: list[str]) -> Path:
        path = tmp_path / f"log_{len(list(tmp_path.iterdir()))}.{fmt}"
        if fmt == "csv":
            path.write_text("time,prompt_tokens,output_tokens\n" + "".join(f"{t},100,10\n" for t in rows))
        else:
            path.write_text("".join(json.dumps({"time": t, "prompt_tokens": 100, "output_tokens": 10}) + "\n"
                                    for t in rows))
        return path

    mixed = write([t + "+02:00" if i % 2 else t for i, t in enumerate(times)])
    one_line_error(run("histogram", mixed, "--time-col", "time"), 2,
                   f"{mixed}: datetimes with a time zone and datetimes without one, which would be read as UTC")
    zoned, local = write([t + "+02:00" for t in times]), write(times)  # each alone is fine; together, mixed
    one_line_error(run("histogram", zoned, local, "--time-col", "time"), 2,
                   f"{local}: datetimes with a time zone and datetimes without one")
    for rows in ([t + "+02:00" for t in times], times, [t[:10] for t in times]):
        r = run("histogram", write(rows), "--time-col", "time", "--json")
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["requests"] == 10


def test_a_destination_that_cannot_be_kept_is_still_replaced(tmp_path, monkeypatch):
    """A destination this process may replace but neither link nor read (another user's private
    file) is replaced as before the files were kept for a put-back; the run does not fail on it."""
    import shutil

    from planner.files import outputs_together, write_text_atomic

    (tmp_path / "a.md").write_text("former")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "link", refuse)
    monkeypatch.setattr(shutil, "copy2", refuse)
    with outputs_together():
        write_text_atomic(tmp_path / "a.md", "new a")
    assert leftovers(tmp_path) == ["a.md"] and (tmp_path / "a.md").read_text() == "new a"


def test_an_interruption_right_after_a_rename_still_puts_the_former_file_back(tmp_path, monkeypatch):
    from planner.files import outputs_together, write_text_atomic

    for name in ("a.md", "b.md"):
        (tmp_path / name).write_text(f"former {name}")
    replace, interrupted = os.replace, []

    def interrupted_after(src, dst):
        replace(src, dst)
        if Path(dst).name == "b.md" and not interrupted:  # the new b.md is in place; the put-back's own rename passes
            interrupted.append(dst)
            raise KeyboardInterrupt

    def write_both():
        with outputs_together():
            write_text_atomic(tmp_path / "a.md", "new a")
            write_text_atomic(tmp_path / "b.md", "new b")

    monkeypatch.setattr(os, "replace", interrupted_after)
    with pytest.raises(KeyboardInterrupt):
        write_both()
    assert leftovers(tmp_path) == ["a.md", "b.md"]
    assert [(tmp_path / n).read_text() for n in ("a.md", "b.md")] == ["former a.md", "former b.md"]


@pytest.mark.parametrize(("old", "new", "message"), [
    ("name: tiny", "name: !!binary aGVsbG8=", "line 1: invalid YAML: a !!binary value where text or a number belongs"),
    ("gpus: [h100-sxm]", "gpus: !!set {h100-sxm, l40s}", "line 7: invalid YAML: a !!set value where a list belongs"),
    ("tp: [1]", "tp: !!omap [{a: 1}]", "line 8: invalid YAML: a !!omap value where a mapping belongs"),
])
def test_yaml_tags_that_build_what_no_field_holds_are_refused(tmp_path, old, new, message):
    """`name: !!binary aGVsbG8=` was read as the bytes of "hello", and the report named hello.md; a
    !!set of GPUs became a list in hash order."""
    one_line_error(run("solve", scenario(tmp_path, BASE.replace(old, new)), "--no-report"), 2, message)


def test_stdout_is_held_only_once_a_file_waits_to_be_put_in_place(tmp_path):
    """Lines printed before any output file waits pass at once, in order with stderr's notes
    (`planner simulate`'s "see above"); from the first waiting file on, they wait for the files."""
    import io

    from planner.cli import _HeldWithFiles
    from planner.files import outputs_together, write_text_atomic

    real = io.StringIO()
    held = _HeldWithFiles(real)
    with outputs_together():
        held.write("at once\n")
        assert real.getvalue() == "at once\n"
        write_text_atomic(tmp_path / "a.md", "a")
        held.write("report written\n")
        assert real.getvalue() == "at once\n" and not (tmp_path / "a.md").exists()
    assert held.held == ["report written\n"] and (tmp_path / "a.md").read_text() == "a"


def test_a_stdout_that_says_ascii_still_gets_the_plan_in_utf8(tmp_path):
    """click writes UTF-8 where stdout claims ASCII (a C locale); the held stdout passes lines through
    click too, so the plan's "—" and "≤" do not end the command with a UnicodeEncodeError."""
    done = subprocess.run([sys.executable, "-m", "planner", "solve", str(scenario(tmp_path)), "--no-verify", "--no-report"],
                          cwd=ROOT, capture_output=True, env={**os.environ, "PYTHONIOENCODING": "ascii"}, check=False)
    assert done.returncode == 0, done.stderr
    assert "—".encode() in done.stdout and b"Traceback" not in done.stderr


def test_a_stated_mean_rate_beside_a_measured_day_is_refused_not_ignored(tmp_path):
    """A log spanning two days, its day measured, and traffic.mean_rps stated: the measured busiest
    hour set the day's mean and the stated rate was read nowhere, without a word."""
    log = tmp_path / "log.csv"
    start = 1_704_067_200  # 2024-01-01 00:00 UTC
    log.write_text("prompt,output,time\n" + "".join(f"1000,200,{start + 30 * i}\n" for i in range(2 * 24 * 120)))
    path = tmp_path / "s.yaml"
    path.write_text(f"""
name: s
model: llama-3.1-8b
context_limit: 8192
traffic:
  source: {{log: {log.name}, columns: {{prompt: prompt, output: output, time: time}}, time_unit: s}}
  profile: {{measured: true}}
  mean_rps: 0.03
slo:
  bands:
    - {{ttft_s: 2.0, tpot_ms: 50}}
gpus: [h100-sxm]
verify: false
""", encoding="utf-8")
    one_line_error(run("solve", path, "--no-report"), 2, str(path), "mean_rps: the profile is measured from the log",
                   "state the profile too (hourly or shape)")


def test_a_relative_log_s_clock_before_its_time_0_reads_signed():
    """A stray row 5,000,000 s before a relative log's time 0 fell in minute -83,334, which the
    silence warning printed as -1389:06 (floor division and remainder of a negative minute)."""
    from planner.silence import _clock_text

    assert [_clock_text(m) for m in (-83_334, -5, 0, 430)] == ["-1388:54", "-0:05", "0:00", "7:10"]


@pytest.mark.parametrize(("log", "expected"), [
    ("''", "traffic.source.log: a blank path: give a file or folder (got '')"),
    ("[]", "traffic.source.log: no path in the list: give at least one file or folder"),
    ("[a.csv, ' ']", "traffic.source.log: a blank path: give a file or folder"),
])
def test_a_blank_log_path_is_told_so_not_read_as_the_scenario_s_folder(tmp_path, log, expected):
    """`log: ''` read the scenario's own folder as a folder of log parts, and complained of the
    scenario's YAML in it."""
    text = BASE.replace("source: {constant: {prompt_tokens: 1000, output_tokens: 200}}", f"source: {{log: {log}}}")
    r = run("solve", scenario(tmp_path, text), "--out-dir", tmp_path / "out")
    assert one_line_error(r, 2, "s.yaml").endswith(expected)
    assert leftovers(tmp_path / "out") == []


def test_a_null_key_is_named_by_its_line(tmp_path):
    """A key of ~ read as None, which pydantic named 'None: Keys should be strings', with no line."""
    text = BASE.replace("  peak: {method: explicit, rps: 4}\n", "  peak: {method: explicit, rps: 4}\n  ~: 3\n")
    line = text.splitlines().index("  ~: 3") + 1
    r = run("solve", scenario(tmp_path, text), "--out-dir", tmp_path / "out")
    one_line_error(r, 2, f"s.yaml: line {line}: invalid YAML: a null key (~, null, or nothing before the colon)")
    for merged in ("{~: 3}", "[{~: 3}]"):  # merged into a mapping, which PyYAML builds without its own keys
        text = BASE.replace("  peak: {method: explicit, rps: 4}\n", f"  peak: {{method: explicit, rps: 4, <<: {merged}}}\n")
        line = next(i for i, t in enumerate(text.splitlines(), 1) if t.startswith("  peak:"))
        r = run("solve", scenario(tmp_path, text), "--out-dir", tmp_path / "out")
        one_line_error(r, 2, f"s.yaml: line {line}: invalid YAML: a null key", "(merged in with <<)")


def test_a_link_that_leads_nowhere_is_named_so_not_a_missing_file(tmp_path):
    """A symbolic link in a loop (or to a file gone) was 'no such file' as a log and 'no scenario
    file' as a fleet's service, which sent the user looking for a file that is there."""
    loop = tmp_path / "loop.csv"
    loop.symlink_to(loop.name)
    r = run("histogram", loop, "-o", tmp_path / "h.parquet")
    one_line_error(r, 2, f"{loop}: a symbolic link that leads nowhere (a loop of links, or its target is missing)")
    gone = tmp_path / "gone.yaml"
    gone.symlink_to(tmp_path / "deleted.yaml")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("name: f\nservices: [gone.yaml]\n", encoding="utf-8")
    r = run("solve", fleet, "--out-dir", tmp_path / "out")
    one_line_error(r, 2, "services[0]: gone.yaml is a symbolic link that leads nowhere")


def test_capacity_of_an_empty_histogram_names_the_file(tmp_path):
    """A histogram of no request was 'the traffic class has no request within the context limit',
    naming neither the file nor the real reason."""
    path = tmp_path / "empty.parquet"
    write_histogram(Histogram.from_arrays(np.array([], dtype=np.int64), np.array([], dtype=np.int64)), path)
    r = run("capacity", "llama-3.1-8b", "h100-sxm", "--histogram", path)
    one_line_error(r, 2, f"{path}: holds no request: there is no traffic class to size")


def test_parts_that_hold_no_request_are_alike_and_are_not_refused_as_counted_twice(tmp_path):
    """Byte-identical parts of one folder that hold no row (empty Parquet parts of one schema, CSVs of
    their header alone: hours with no traffic) count nothing, and were refused as the same requests
    twice; two sorted logs that share their first and last stretches but not their middle are two."""
    from planner.workload.fingerprint import WHOLE_BYTES, log_fingerprint

    parts = tmp_path / "parts"
    parts.mkdir()
    _small_log(parts / "h00.csv")
    for hour in ("h01.csv", "h02.csv"):
        (parts / hour).write_text("prompt_tokens,output_tokens\n")
    assert json.loads(run("histogram", parts, "--json").stdout)["requests"] == 20
    table = pa.table({"prompt_tokens": pa.array([], pa.int64()), "output_tokens": pa.array([], pa.int64())})
    pq_parts = tmp_path / "pq"
    pq_parts.mkdir()
    pq.write_table(pa.table({"prompt_tokens": [100, 200], "output_tokens": [10, 20]}), pq_parts / "part-0.parquet")
    for name in ("part-1.parquet", "part-2.parquet"):
        pq.write_table(table, pq_parts / name)
    assert (pq_parts / "part-1.parquet").read_bytes() == (pq_parts / "part-2.parquet").read_bytes()
    assert json.loads(run("histogram", pq_parts, "--json").stdout)["requests"] == 2
    # two logs past WHOLE_BYTES, sorted alike, equal in their first and last thirds (a sample's
    # spacing is a fifteenth of the file: a stretch longer than that is read)
    rows = [f"{100 + i // 1000},{10 + i % 7}\n" for i in range(2 * WHOLE_BYTES // 8)]
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("prompt_tokens,output_tokens\n" + "".join(rows))
    third = len(rows) // 3
    rows[third:2 * third] = [row.replace(",1", ",2") for row in rows[third:2 * third]]
    b.write_text("prompt_tokens,output_tokens\n" + "".join(rows))
    assert a.stat().st_size == b.stat().st_size > WHOLE_BYTES
    assert log_fingerprint(a, "csv") != log_fingerprint(b, "csv")


def test_a_capped_plan_that_no_split_can_rescue_blames_the_cap(tmp_path):
    """With H100s capped at 8, the no-split class needs more than the cap allows; a split option's
    long class cannot meet its 1 s TTFT on any config. The error named that split class's TTFT floor,
    though the cap is what stops the plan (20 GPUs solve it with 9)."""
    body = """
        name: capped
        model: llama-3.1-8b
        context_limit: 32768
        traffic:
          source:
            synthetic: {name: chat_long_tail, requests: 50000, seed: 1, rate_rps: 40}
          peak: {method: max}
          growth: 1.44
        slo:
          statistic: p99
          bands:
            - {name: short, prompt_below: 4096, ttft_s: 0.6, tpot_ms: 25}
            - {name: long, ttft_s: 1.0, tpot_ms: 28}
        gpus: [{id: h100-sxm, max_gpus: %d}]
        tp: [1]
        weight_dtypes: [bf16]
        kv_dtypes: [bf16]
        split_thresholds: [2048, 8192, 16384]
        verify: false
    """
    path = write_scenario(tmp_path, body % 8)
    line = one_line_error(run("solve", path, "--no-report"), 3, "class 'all (≤ 32,768 tokens)' needs",
                          "the inventory caps (h100-sxm ≤ 8 GPUs) allow at most")
    assert "under split" not in line and "floor" not in line
    # the message names the no-split class, and says the split options fail too (a reader would try one)
    assert line.endswith(" req/s (every split option fails too)"), line
    assert run("solve", write_scenario(tmp_path, body % 20, name="wider.yaml"), "--no-report").exit_code == 0
    # without split options there is none to fail
    alone = write_scenario(tmp_path, (body % 8).replace("split_thresholds: [2048, 8192, 16384]", "split_thresholds: []"),
                           name="alone.yaml")
    line = one_line_error(run("solve", alone, "--no-report"), 3, "class 'all (≤ 32,768 tokens)' needs")
    assert line.endswith(" req/s"), line


# ---------------------------------------------------------------- an outside probe of the log readers


def _timed_log(path: Path, rows: int = 600, *, start_ms: int = 1_704_067_200_000, every_ms: int = 1_000) -> Path:
    path.write_text("prompt_tokens,output_tokens,timestamp_ms\n"
                    + "".join(f"{100 + i % 50},20,{start_ms + i * every_ms}\n" for i in range(rows)))
    return path


def test_a_link_to_a_folder_inside_a_log_folder_is_refused(tmp_path):
    # pyarrow's CSV reader followed it where the checks that no log is read twice did not: a link back
    # to the folder read a log 41 times over (246,000 requests of 6,000), a link to another input twice
    logs = tmp_path / "logs"
    logs.mkdir()
    _timed_log(logs / "a.csv")
    (logs / "self").symlink_to(logs)
    one_line_error(run("histogram", logs), 2, f"{logs}: holds 'self', a link to a folder, which the CSV reader would "
                   "follow where the checks against reading a log twice do not: remove the link (or start its name "
                   "with '_' to have it skipped)")
    # a Parquet folder's links are followed by pyarrow's listing, which its checks use too: a partition
    # linked in from elsewhere reads, and a link back to the folder is refused as the same files
    parts, elsewhere = tmp_path / "parts", tmp_path / "elsewhere"
    parts.mkdir()
    elsewhere.mkdir()
    pq.write_table(pa.table({"prompt_tokens": [100] * 10, "output_tokens": [20] * 10}), parts / "a.parquet")
    pq.write_table(pa.table({"prompt_tokens": [200] * 5, "output_tokens": [20] * 5}), elsewhere / "b.parquet")
    (parts / "more").symlink_to(elsewhere)
    r = run("histogram", parts, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["requests"] == 15, r.output
    (logs / "self").unlink()
    r = run("histogram", logs, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["requests"] == 600, r.output


@pytest.mark.parametrize(("name", "content", "problem"), [
    ("b.csv", b"\x1f\x8b\x08\x00gzip", "b.csv: file is gzip-compressed, not csv; decompress it first"),
    ("b.csv", b"PAR1 not text PAR1", "b.csv: is a Parquet file, not CSV text; name it .parquet"),
    ("b.csv", b"", "b.csv: file is empty"),
])
def test_a_bad_file_in_a_log_folder_is_named(tmp_path, name, content, problem):
    # its bytes were printed under the folder's name ("cannot read as csv: ... Row #2: ...\x8b..."), or,
    # in a JSON Lines folder, its lines were read as unusable rows, exit 0
    logs = tmp_path / "logs"
    logs.mkdir()
    _timed_log(logs / "a.csv")
    (logs / name).write_bytes(content)
    one_line_error(run("histogram", logs), 2, f"{logs / problem}")


def test_a_json_lines_key_first_written_past_the_first_chunk_is_read(tmp_path, monkeypatch):
    # the columns were the first chunk's keys (8 MiB): a time key logging began to write later was
    # dropped without a word, or named as missing when asked for
    import planner.workload.readers as readers

    monkeypatch.setattr(readers, "_JSONL_CHUNK_BYTES", 2048)
    log = tmp_path / "late.jsonl"
    lines = [json.dumps({"prompt_tokens": 100 + i, "output_tokens": 20}) for i in range(300)]
    lines += [json.dumps({"prompt_tokens": 100, "output_tokens": 20, "timestamp_ms": 1_704_067_200_000 + i * 1000})
              for i in range(600)]
    log.write_text("\n".join(lines) + "\n")
    for args in ((), ("--time-col", "timestamp_ms")):
        r = run("histogram", log, *args, "--json")
        assert r.exit_code == 0, r.output
        summary = json.loads(r.stdout)
        assert summary["requests"] == 600 and summary["excluded_rows"]["null"] == 300  # as a small file reads
        assert summary["rate_rps"]["minutes"] == 10


def test_a_clock_rounded_to_the_hour_is_warned_of(tmp_path):
    # each hour's requests fell in its first minute: a per-minute p99 of 11.9 requests/s for 0.35, and a
    # date-only column planned 33.9 requests/s for 0.023, without a word. Traffic in bursts on a schedule
    # falls on the same lattice and its minutes are right, so this warns and refuses nothing
    log = _timed_log(tmp_path / "hourly.csv", rows=24 * 60, every_ms=60_000)
    text = log.read_text().splitlines()
    rounded = [text[0]] + [f"{line.rsplit(',', 1)[0]},{int(line.rsplit(',', 1)[1]) // 3_600_000 * 3_600_000}"
                           for line in text[1:]]
    log.write_text("\n".join(rounded) + "\n")
    r = run("histogram", log, "--json")
    assert r.exit_code == 0, r.output
    rate = json.loads(r.stdout)["rate_rps"]
    assert rate["clock_step_minutes"] == 60 and rate["max_minute"] == pytest.approx(1.0)  # 60 requests in a minute
    note = ("all arrivals fall on a lattice of 60 minutes (60, 120, ... minutes apart): if the log's clock was "
            "rounded, each step's requests land in one minute, and its per-minute rates read up to 60 times too high")
    assert f"note: {note}; if the traffic comes in bursts on that schedule, they are right" in run("histogram", log).output
    quantile = BASE.replace("source: {constant: {prompt_tokens: 1000, output_tokens: 200}}",
                            f"source: {{log: {log}}}").replace("peak: {method: explicit, rps: 4}",
                                                               "peak: {method: quantile, quantile: 0.99}")
    r = run("solve", scenario(tmp_path, quantile), "--no-report", "--json")
    assert r.exit_code == 0 and f"warning: {tmp_path / 's.yaml'}: In the log, {note} (state the peak with peak: " in r.stderr, r.stderr
    assert any(n.startswith(f"In the log, {note}") for n in json.loads(r.stdout)["traffic_notes"])
    # an explicit peak reads no minute, and a day measured by the hour is the same on an hour's lattice
    explicit = quantile.replace("peak: {method: quantile, quantile: 0.99}", "peak: {method: explicit, rps: 4}")
    r = run("solve", scenario(tmp_path, explicit, name="e.yaml"), "--no-report")
    assert r.exit_code == 0 and "lattice" not in r.stderr, r.stderr
    # a log at whole minutes (every minute busy) is on no lattice of a quarter hour: nothing to say
    assert "note:" not in run("histogram", _timed_log(tmp_path / "minutes.csv", rows=600, every_ms=60_000)).output


def test_a_scenario_s_notes_name_its_logs_as_it_does_not_by_this_machine_s_paths(tmp_path):
    # "no arrival times in /home/.../logs/../notime.csv": the report promises never a path of this machine
    (tmp_path / "logs").mkdir()
    _timed_log(tmp_path / "logs" / "timed.csv")
    (tmp_path / "logs" / "notime.csv").write_text("prompt_tokens,output_tokens\n" + "120,20\n" * 50)
    text = BASE.replace("source: {constant: {prompt_tokens: 1000, output_tokens: 200}}",
                        "source: {log: [logs/timed.csv, logs/notime.csv]}")
    r = run("solve", scenario(tmp_path, text), "--no-report", "--json")
    assert r.exit_code == 0, r.output
    notes = json.loads(r.stdout)["traffic_notes"]
    assert any(n.startswith("no arrival times in logs/notime.csv: ") for n in notes), notes
    assert not any(str(tmp_path) in n for n in notes), notes


def test_a_peak_of_nothing_from_a_mostly_silent_log_names_the_silence(tmp_path):
    # one row three years before the rest: the quantile peak read 0 and advised method 'max', which plans
    # from a log mostly idle; the silence, which the warning names where the peak is not 0, went unsaid
    log = _timed_log(tmp_path / "stray.csv")
    log.write_text(log.read_text() + "120,20,1600000000000\n")
    text = BASE.replace("source: {constant: {prompt_tokens: 1000, output_tokens: 200}}",
                        f"source: {{log: {log}}}").replace("peak: {method: explicit, rps: 4}",
                                                           "peak: {method: quantile, quantile: 0.99}")
    one_line_error(run("solve", scenario(tmp_path, text), "--no-report"), 2,
                   "traffic: peak rate is 0 req/s: the 0.99 quantile of ",
                   "; but the log holds no request for 28,", "hours in a row, from 2020-09-13 12:2",
                   "which the peak counts as idle minutes: a gap in the logging or a stray row far from the rest")


@pytest.mark.parametrize(("header", "problem"), [
    ("a,a,prompt_tokens,output_tokens", "its header names column 'a' twice; every column needs a name of its own"),
    ("prompt_tokens,output_tokens,,", "its header has columns without a name (commas at the end of its line?)"),
])
def test_a_csv_header_naming_a_column_twice_says_which(tmp_path, header, problem):
    # "CSV file contained multiple columns named " ended in nothing for Excel's blank trailing columns
    log = tmp_path / "dup.csv"
    width = header.count(",") + 1
    log.write_text(header + "\n" + "".join(",".join(["120", "20"] + ["1"] * (width - 2)) + "\n" for _ in range(20)))
    one_line_error(run("histogram", log), 2, f"dup.csv: cannot read as csv: {problem}")


def test_a_csv_header_separated_by_semicolons_says_so(tmp_path):
    # "no column 'prompt_tokens'; the file has: prompt_tokens;output_tokens — name the columns with ...":
    # naming them could not help; a JSON Lines key with a semicolon in it is no header
    log = tmp_path / "semi.csv"
    log.write_text("prompt_tokens;output_tokens\n120;20\n")
    one_line_error(run("histogram", log), 2, "semi.csv: no column 'prompt_tokens' (prompt tokens); the file has: "
                   "prompt_tokens;output_tokens — its header is separated by semicolons, and CSV is read comma-separated")
    other = tmp_path / "semi.jsonl"
    other.write_text(json.dumps({"a;b": 1}) + "\n")
    assert "separated by" not in one_line_error(run("histogram", other), 2, "semi.jsonl: no column 'prompt_tokens'")


def test_a_csv_row_longer_than_the_reader_s_block_is_named_for_what_it_is(tmp_path):
    # pyarrow's "straddling object straddles two block boundaries (try to increase block size?)"
    log = tmp_path / "text.csv"
    rows = [f"120,20,short{i}" for i in range(20)] + ["120,20," + "x" * (2 << 20)]
    log.write_text("prompt_tokens,output_tokens,text\n" + "\n".join(rows) + "\n")
    one_line_error(run("histogram", log), 2, "text.csv: cannot read as csv: a row is longer than the reader's 1 MiB "
                   "blocks (a logged prompt text, say); drop that column, or give the log as Parquet or JSON Lines")


def test_a_histogram_file_in_a_scenario_s_log_list_is_named_as_one(tmp_path):
    # the report read "Source: log h.parquet" of a histogram file
    _timed_log(tmp_path / "a.csv")
    b = _timed_log(tmp_path / "b.csv", start_ms=1_704_067_200_000 + 700_000)
    assert run("histogram", b, "-o", tmp_path / "h.parquet").exit_code == 0
    text = BASE.replace("source: {constant: {prompt_tokens: 1000, output_tokens: 200}}", "source: {log: [a.csv, h.parquet]}")
    r = run("solve", scenario(tmp_path, text), "--no-report", "--json")
    assert r.exit_code == 0, r.output
    assert "Source: log a.csv, histogram file h.parquet (planner columns)." in json.loads(r.stdout)["traffic_notes"]


def test_a_pipe_named_as_a_log_is_refused_not_waited_on(tmp_path):
    # opening a pipe waits for a writer: `planner histogram x.csv` hung
    pipe = tmp_path / "x.csv"
    os.mkfifo(pipe)
    one_line_error(run("histogram", pipe), 2, "x.csv: is not a regular file (a pipe or a device); give the log as a file")


def test_an_empty_json_lines_part_counts_nothing_and_a_broken_one_counts_its_lines(tmp_path):
    # checking every part's bytes must not refuse what a folder read before: an empty part (log rotation
    # leaves them) counts nothing; a part of broken lines counts them as unusable rows
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.jsonl").write_text("".join(json.dumps({"prompt_tokens": 100 + i, "output_tokens": 20}) + "\n"
                                          for i in range(5)))
    (logs / "b.jsonl").write_text("")
    r = run("histogram", logs, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["requests"] == 5, r.output
    (logs / "c.jsonl").write_text("not json\n")
    r = run("histogram", logs, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["excluded_rows"]["non_numeric"] == 1, r.output


# ---- an overhead SGLang's memory rule has no place for ------------------------------------------
def test_an_overhead_stated_for_sglang_is_refused_not_ignored(tmp_path):
    """SGLang's memory fraction covers weights and cache, the rest being its overhead (memory.budget_ladder):
    a stated overhead changed nothing, without a word (`capacity --overhead-gib`, a scenario's overhead_gib)."""
    r = run("capacity", "llama-3.1-8b", "h100-sxm", "--engine", "sglang", "--overhead-gib", 5)
    one_line_error(r, 2, "--overhead-gib: engine 'sglang' takes no overhead of its own: its memory fraction covers "
                   "weights and KV cache, and the rest of the memory is the overhead; set --gpu-memory-utilization instead")
    path = scenario(tmp_path, BASE + "engine: sglang\noverhead_gib: 5\n")
    one_line_error(run("solve", path, "--out-dir", tmp_path / "out"), 2, "s.yaml",
                   "overhead_gib: engine 'sglang' takes no overhead of its own", "set gpu_memory_utilization instead")
    assert leftovers(tmp_path / "out") == []
    # the engine's own default, and an overhead under vLLM, are planned as before; SGLang's report states
    # no overhead it does not take (it read "Runtime overhead 3 GiB per GPU")
    assert run("capacity", "llama-3.1-8b", "h100-sxm", "--engine", "sglang").exit_code == 0
    own = run("solve", scenario(tmp_path, BASE + "engine: sglang\n", name="own.yaml"), "--no-verify", "--out-dir",
              tmp_path / "own")
    assert own.exit_code == 0, own.output
    report = (tmp_path / "own" / "tiny.md").read_text(encoding="utf-8")
    assert "- Runtime overhead: what SGLang's memory fraction leaves of each GPU's memory" in report
    assert "Runtime overhead 3 GiB" not in report
    vllm = run("capacity", "llama-3.1-8b", "h100-sxm", "--overhead-gib", 5, "--json")
    assert vllm.exit_code == 0 and json.loads(vllm.stdout)["overhead_gib"] == 5


# ---- a headroom written as a percentage ---------------------------------------------------------
def test_a_headroom_that_reads_as_a_percentage_is_warned_of(tmp_path):
    """`headroom: 20` (meant as 20%) planned 20 times the peak's capacity without a word (an outside probe)."""
    text = BASE.replace("  peak: {method: explicit, rps: 4}\n", "  peak: {method: explicit, rps: 4}\n  headroom: 20\n")
    r = run("solve", scenario(tmp_path, text), "--no-verify", "--no-report")
    assert r.exit_code == 0, r.output
    assert r.stderr == (f"warning: {tmp_path / 's.yaml'}: traffic.headroom 20 plans capacity for 20× the peak: headroom "
                        "is the capacity planned per unit of peak (1.2 for 20% spare), not a percentage\n")
    three = run("solve", scenario(tmp_path, text.replace("headroom: 20", "headroom: 3"), name="t.yaml"), "--no-verify",
                "--no-report")
    assert three.exit_code == 0 and three.stderr == ""


def test_a_quarter_s_growth_that_reads_as_a_percentage_is_warned_of(tmp_path):
    """`growth: 25` in a quarter (meant as 25%) planned demand 26 times the quarter before's without a
    word: a quarter's growth is a fraction where traffic.growth is a multiplier (an outside probe)."""
    path = scenario(tmp_path, FORECAST.replace("{PRICES}", "{}").replace("growth: 0.2", "growth: 25"))
    r = run("forecast", path, "--no-verify", "--out-dir", tmp_path / "out")
    assert r.exit_code == 0, r.output
    said = ("forecast.quarters[1].growth 25 takes demand to 26× the quarter before's: a quarter's growth is a "
            "fraction (0.25 for +25%), where traffic.growth is a multiplier")
    assert f"warning: {path}: {said}" in r.stderr
    assert f"the quarters' growth compounded (note: {said})" in (tmp_path / "out" / "tiny_forecast.md").read_text(
        encoding="utf-8")
    # and where `planner solve` reports the scenario's forecast
    solved = run("solve", path, "--no-verify", "--json", "--out-dir", tmp_path / "solved")
    assert solved.exit_code == 0 and solved.stderr.count(said) == 1, solved.output
    fair = run("forecast", scenario(tmp_path, FORECAST.replace("{PRICES}", "{}"), name="f.yaml"), "--no-verify",
               "--no-report")
    assert fair.exit_code == 0 and "growth" not in fair.stderr
    # relative growth is against the base: a steady +50% a quarter reaches 4.06 by the fourth, not a warning
    from planner.scenario.forecast_section import Forecast

    steady = Forecast.model_validate({"growth_mode": "relative", "quarters": [
        {"quarter": f"2027Q{i + 1}", "growth": 1.5 ** (i + 1) - 1} for i in range(4)]})
    assert steady.growth_warnings() == []
    typo = Forecast.model_validate({"growth_mode": "relative", "quarters": [
        {"quarter": "2027Q1", "growth": 0.5}, {"quarter": "2027Q2", "growth": 25}]})
    assert typo.growth_warnings() == ["forecast.quarters[1].growth 25 takes demand to 17.3× the quarter before's: a "
                                      "quarter's growth is a fraction (0.25 for +25%), where traffic.growth is a "
                                      "multiplier"]


# ---- the unit of a log's times (an outside probe: a 1000× plan, exit 0, nothing on stderr) ----------
def _unit_scenario(tmp_path: Path, source: str, extra: str = "") -> Path:
    """The base scenario planning from `source` at its p99 minute, with a quarter to forecast."""
    return scenario(tmp_path, BASE.replace("source: {constant: {prompt_tokens: 1000, output_tokens: 200}}",
                                           f"source: {source}").replace(
                                               "peak: {method: explicit, rps: 4}",
                                               "peak: {method: quantile, quantile: 0.99}" + extra)
                    + "forecast: {quarters: [{quarter: 2027Q1}]}\n")


def test_a_presets_own_time_column_named_again_keeps_its_milliseconds(tmp_path):
    """`preset: mooncake` with `columns: {time: timestamp}` (and --preset mooncake --time-col timestamp)
    read Mooncake's milliseconds as seconds: the real trace's hour as 41 days, its peak 25× too low, the
    cost per token 25× too high. It plans as the preset alone does."""
    log = tmp_path / "trace.jsonl"  # Mooncake's columns: 2 requests/s for 10 minutes, in ms from 0
    log.write_text("".join(json.dumps({"timestamp": 500 * i, "input_length": 1000, "output_length": 200}) + "\n"
                           for i in range(1200)))
    for columns in ("", ", columns: {time: timestamp}"):
        path = _unit_scenario(tmp_path, f"{{log: trace.jsonl, preset: mooncake{columns}}}")
        r = run("solve", path, "--no-verify", "--no-report", "--json")
        assert r.exit_code == 0 and r.stderr == "", r.output
        assert json.loads(r.stdout)["peak_rps"] == 2.0
        assert "Timestamps read as ms." in json.loads(r.stdout)["traffic_notes"]
    alone = run("histogram", log, "--preset", "mooncake", "--json")
    named = run("histogram", log, "--preset", "mooncake", "--time-col", "timestamp", "--json")
    assert named.exit_code == 0 and named.stderr == "" and named.stdout == alone.stdout
    assert json.loads(named.stdout)["rate_rps"] == {"minutes": 10, "mean": 2.0, "p99_minute": 2.0, "max_minute": 2.0,
                                                    "clock_step_minutes": 1}


def test_relative_times_without_a_unit_are_refused_with_both_readings(tmp_path):
    """Milliseconds from 0 under a column no preset names were read as seconds by their magnitude (every
    relative time is below 1e11): an hour's log as 41.6 days, the fleet sized for 1/1000 of its peak,
    exit 0, a note in the report's last lines only. Relative times hold no sign of their unit, so a
    capacity planner refuses to guess: one line with what each reading plans, and the setting to state;
    nothing written. Stated, they plan."""
    log = tmp_path / "rel.csv"  # 2 requests/s for 10 minutes, in ms from 0
    log.write_text("ts,prompt_tokens,output_tokens\n" + "".join(f"{500 * i},1000,200\n" for i in range(1200)))
    said = ("column 'ts': its times count from the log's start (median 3e+05, before 2020 as epoch seconds, or epoch seconds older than any LLM serving log) and no "
            "unit is stated, so they may be seconds or milliseconds, 1000× apart in every rate planned for: the "
            "first 1,200 times read span 6.9 days (about 0.00200 requests/s) as seconds, 10.0 minutes (about 2.00 "
            "requests/s) as milliseconds; state which ")
    out = tmp_path / "out"
    r = run("histogram", log, "--time-col", "ts", "-o", out / "h.parquet")
    assert r.stderr == f"error: {log}: {said}(--time-unit s or --time-unit ms)\n"
    one_line_error(r, 2)
    assert not out.exists()
    path = _unit_scenario(tmp_path, "{log: rel.csv, columns: {prompt: prompt_tokens, output: output_tokens, time: ts}}")
    for command in ("solve", "forecast"):
        r = run(command, path, "--out-dir", out)
        one_line_error(r, 2, f"{said}(traffic.source.time_unit: s or traffic.source.time_unit: ms)")
        assert not out.exists()
    stated = path.read_text(encoding="utf-8").replace("time: ts}", "time: ts}, time_unit: ms")
    path.write_text(stated, encoding="utf-8")
    r = run("solve", path, "--no-verify", "--no-report", "--json")
    assert r.exit_code == 0 and r.stderr == "", r.output
    assert json.loads(r.stdout)["peak_rps"] == 2.0


def test_epoch_seconds_stated_as_milliseconds_are_warned_of_with_both_readings(tmp_path):
    """A stated unit (a preset's, --time-unit, time_unit) was never checked: epoch seconds in the planner
    preset's timestamp_ms landed in January 1970, the peak 1000× too high, exit 0, no note at all.
    histogram, solve and forecast warn on stderr (and in the notes) with both readings; the unit stated
    right reads quietly."""
    log = tmp_path / "log.csv"  # one request every 500 s for 3.5 days, in epoch seconds
    log.write_text("prompt_tokens,output_tokens,timestamp_ms\n"
                   + "".join(f"1000,200,{1_700_000_000 + 500 * i}\n" for i in range(600)))

    def said(place: str, suggestion: str) -> str:
        return (f"{place}: column 'timestamp_ms' is read in milliseconds, the unit stated (by the preset, or "
                f"{suggestion}), which puts its times from 1970-01-20 16:13 to 1970-01-20 16:18 UTC, 5.0 minutes "
                "(about 2.00 requests/s); but its values have the magnitude of epoch seconds (median 1.7e+09), which "
                "put them from 2023-11-14 22:13 to 2023-11-18 09:25 UTC, 3.5 days (about 0.00200 requests/s). If "
                f"they are seconds, state it ({suggestion}{' s' if suggestion[0] == '-' else ': s'})")

    r = run("histogram", log, "--json")
    assert r.exit_code == 0 and r.stderr == f"warning: {said(str(log), '--time-unit')}\n", r.output
    assert json.loads(r.stdout)["rate_rps"]["p99_minute"] == 2.0  # read as stated: the warning says why not
    path = _unit_scenario(tmp_path, "{log: log.csv}")
    note = said("log.csv", "traffic.source.time_unit")
    for command in ("solve", "forecast"):
        r = run(command, path, *(("--no-verify",) if command == "solve" else ()), "--no-report", "--json")
        assert r.exit_code == 0 and r.stderr == f"warning: {path}: {note}\n", r.output
        assert note in json.loads(r.stdout)["traffic_notes"]
    path.write_text(path.read_text(encoding="utf-8").replace("{log: log.csv}", "{log: log.csv, time_unit: s}"),
                    encoding="utf-8")
    r = run("solve", path, "--no-verify", "--no-report", "--json")
    assert r.exit_code == 0 and r.stderr == "", r.output
    assert json.loads(r.stdout)["peak_rps"] == pytest.approx(1 / 60)  # one request in its busiest minutes


def test_epoch_seconds_stated_as_milliseconds_too_short_to_measure_give_both_readings_in_the_error(tmp_path):
    """(An audit: an hour of epoch seconds in the planner preset's timestamp_ms, read as 3.6 s of 1970, failed
    the peak with "(see --time-unit)", an option a scenario cannot set, and without the readings the README
    promises: a failed run prints no warning.) The error names traffic.source.time_unit and gives both
    readings; `planner histogram` of the same log, which succeeds, warns naming --time-unit."""
    log = tmp_path / "log.csv"  # one request every 2 s for an hour, in epoch seconds
    log.write_text("prompt_tokens,output_tokens,timestamp_ms\n"
                   + "".join(f"1000,200,{1_700_000_000 + 2 * i}\n" for i in range(1800)))
    path = _unit_scenario(tmp_path, "{log: log.csv}")
    for command in ("solve", "forecast"):
        r = run(command, path, *(("--no-verify",) if command == "solve" else ()), "--no-report")
        line = one_line_error(r, 2, "traffic: the arrivals span 1 minute(s) of the clock, too short to measure",
                              "seconds read as milliseconds? (see traffic.source.time_unit); log.csv: column "
                              "'timestamp_ms' is read in milliseconds, the unit stated (by the preset, or "
                              "traffic.source.time_unit)", "which put them from 2023-11-14 22:13 to 2023-11-14 23:13 "
                              "UTC, 60.0 minutes", "If they are seconds, state it (traffic.source.time_unit: s)")
        assert "--time-unit" not in line, line
    r = run("histogram", log)
    assert r.exit_code == 0 and r.stderr.startswith(f"warning: {log}: column 'timestamp_ms' is read in "), r.output
    assert "(--time-unit s)" in r.stderr and "traffic.source" not in r.stderr, r.stderr


def test_a_log_read_beside_a_histogram_built_from_a_log_of_its_name_is_warned_of(tmp_path):
    """(An outside probe: last quarter's histogram merged with the log it was built from, appended to since,
    counted its first half twice: 29,049 requests for 19,366, the p99 minute 15.4 requests/s for 8.2.)"""
    rows = ["prompt_tokens,output_tokens,timestamp_ms"] + [f"{100 + i % 50},{20 + i % 7},{1_700_000_040_000 + 500 * i}"
                                                           for i in range(600)]
    log = tmp_path / "serving.csv"
    log.write_text("\n".join(rows[:301]) + "\n")
    assert run("histogram", log, "-o", tmp_path / "q1.hist.parquet").exit_code == 0
    log.write_text("\n".join(rows) + "\n")  # appended to since
    result = run("histogram", tmp_path / "q1.hist.parquet", log)
    assert result.exit_code == 0, result.output
    assert (f"warning: {tmp_path / 'q1.hist.parquet'} was built from a log named serving.csv, as is {log} read with it, "
            "and their arrivals share minutes: if that log has grown since, its requests up to then count twice; give "
            "the histogram file with only the log's newer rows, or the log alone") in result.stderr
    other = tmp_path / "other.csv"
    other.write_text("\n".join([rows[0], *rows[301:]]) + "\n")
    result = run("histogram", tmp_path / "q1.hist.parquet", other)
    assert result.exit_code == 0 and "warning" not in result.stderr, result.stderr
    # the next day's log of the same name, in its own folder: no minute shared, nothing said (a reading: a
    # date-partitioned layout, day2/serving.csv beside day 1's histogram, was warned of on every merge)
    (tmp_path / "day2").mkdir()
    later = ["prompt_tokens,output_tokens,timestamp_ms"] + [f"100,20,{1_700_086_440_000 + 500 * i}" for i in range(300)]
    (tmp_path / "day2" / "serving.csv").write_text("\n".join(later) + "\n")
    result = run("histogram", tmp_path / "q1.hist.parquet", tmp_path / "day2" / "serving.csv")
    assert result.exit_code == 0 and "warning" not in result.stderr, result.stderr
    # a partition sharing one boundary minute with the file's last is no grown log either
    (tmp_path / "day1b").mkdir()
    last = 1_700_000_040_000 + 500 * 300 - 1  # the file's last row's minute, then on
    (tmp_path / "day1b" / "serving.csv").write_text("\n".join(
        [rows[0]] + [f"100,20,{last + 30_000 * i}" for i in range(100)]) + "\n")
    result = run("histogram", tmp_path / "q1.hist.parquet", tmp_path / "day1b" / "serving.csv")
    assert result.exit_code == 0 and "warning" not in result.stderr, result.stderr
    # without times on either side nothing tells them apart: the name alone is warned of (a reading: --no-time
    # counted 900 requests for 600, silently)
    (tmp_path / "early").mkdir()
    (tmp_path / "early" / "serving.csv").write_text("\n".join(rows[:301]) + "\n")  # the log as it was
    assert run("histogram", tmp_path / "early" / "serving.csv", "--no-time", "-o",
               tmp_path / "untimed.hist.parquet").exit_code == 0
    result = run("histogram", tmp_path / "untimed.hist.parquet", log, "--no-time")
    assert result.exit_code == 0 and "was built from a log named serving.csv" in result.stderr, result.stderr
    # through a chain of files: q1 and another log merged into q2 pass on serving.csv's name (a reading: q2
    # beside the grown log said nothing, 10,000 requests counted for 7,000)
    assert run("histogram", tmp_path / "q1.hist.parquet", other, "-o", tmp_path / "q2.hist.parquet").exit_code == 0
    result = run("histogram", tmp_path / "q2.hist.parquet", log)
    assert result.exit_code == 0 and (f"{tmp_path / 'q2.hist.parquet'} was built from a log named serving.csv"
                                      in result.stderr), result.stderr


def test_a_time_past_int64_is_refused_in_one_line_with_no_numpy_warning_before_it(tmp_path):
    """An outside probe: a time of 1e22 (ms) printed numpy's "invalid value encountered in cast", with
    the planner's own source line, before the one-line error."""
    import numpy as np

    from planner.workload.repeats import instants_us

    with np.errstate(all="raise"):  # the cast's warning, raised
        assert instants_us(np.array([1e22, -1e22, 1.5]), 60_000).tolist() == [2**62, -(2**62), 1500]
    log = tmp_path / "far.csv"
    log.write_text("prompt_tokens,output_tokens,timestamp_ms\n5,3,1e22\n", encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "planner", "histogram", str(log)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"error: {log}: arrival times fall after 2200"), r.stderr


def test_synth_says_a_tail_share_it_was_given_and_its_help_the_defaults(tmp_path):
    """An outside probe: `--tail-share` made a long-tailed mix of chat, rag or code and the line said
    nothing of it; --help gave no distribution's default rate."""
    r = run("synth", "chat", "-n", 200, "--seed", 3, "--tail-share", 0.5, "-o", tmp_path / "t.parquet")
    assert r.exit_code == 0 and r.stdout.strip().endswith(
        f"(seed 3, 5.4 req/s, 50.0% of them in the 32k-128k tail) to {tmp_path / 't.parquet'}"), r.output
    r = run("synth", "chat", "-n", 200, "-o", tmp_path / "c.parquet")
    assert r.exit_code == 0 and "of them in the" not in r.stdout, r.output
    helped = " ".join(run("synth", "--help").stdout.split())
    assert "chat 5.4, chat_long_tail 5.4, rag 3.4, code 2.6" in helped and "chat_long_tail 0.02" in helped


# ---- an engine on a GPU it does not run on ------------------------------------------------------
def test_an_engine_on_another_vendor_s_gpu_is_refused(tmp_path, catalog):
    """TensorRT-LLM runs on NVIDIA GPUs only (data/SOURCES.md, "Serving engines"): a scenario naming it with
    an MI300X was planned, 3 x mi300x under TensorRT-LLM, a fleet no one can deploy. vLLM and SGLang run
    on AMD's GPUs too, and an engine that states no vendors (a user's own profile) runs on any GPU."""
    path = scenario(tmp_path, BASE.replace("gpus: [h100-sxm]", "gpus: [h100-sxm, mi300x]") + "engine: trtllm\n")
    one_line_error(run("solve", path, "--no-verify", "--out-dir", tmp_path / "out"), 2, "s.yaml",
                   "engine: engine 'trtllm' (TensorRT-LLM) runs on NVIDIA GPUs only; mi300x is AMD's (the GPU's "
                   "`vendor` and the engine's `vendors` in the catalog say so) (gpus[1])")
    assert leftovers(tmp_path / "out") == []
    one_line_error(run("capacity", "llama-3.1-8b", "mi300x", "--engine", "trtllm"), 2,
                   "engine 'trtllm' (TensorRT-LLM) runs on NVIDIA GPUs only; mi300x is AMD's")
    for engine in ("vllm", "sglang"):
        assert run("capacity", "llama-3.1-8b", "mi300x", "--engine", engine).exit_code == 0, engine
    assert run("capacity", "llama-3.1-8b", "h100-sxm", "--engine", "trtllm").exit_code == 0
    mi300x, h100 = catalog.gpu("mi300x"), catalog.gpu("h100-sxm")
    assert catalog.engine("trtllm").runs_on_problem(h100) is None
    assert catalog.engine("trtllm").model_copy(update={"vendors": None}).runs_on_problem(mi300x) is None
    # a word of the GPU's vendor, in any case: a catalog entry's "NVIDIA Corporation" is NVIDIA's
    assert catalog.engine("trtllm").runs_on_problem(h100.model_copy(update={"vendor": "nvidia Corporation"})) is None
    # vLLM and SGLang run on several makers' devices (some through plugins): a GPU a user adds is not refused
    assert catalog.engine("vllm").runs_on_problem(h100.model_copy(update={"vendor": "Intel"})) is None
    listed = run("catalog", "engines").output
    assert re.search(r"^trtllm .* NVIDIA +TensorRT-LLM$", listed, re.M) and re.search(r"^vllm .* any +vLLM", listed, re.M)
    # an engine that runs on no maker is no profile
    override = tmp_path / "none.yaml"
    override.write_text("engines: {trtllm: {vendors: []}}\n")
    one_line_error(run("capacity", "llama-3.1-8b", "h100-sxm", "--engine", "trtllm", "--catalog", override), 2,
                   "engines.trtllm.vendors")


def test_import_hf_that_fails_prints_its_error_alone(tmp_path):
    """The notes of the defaults a config relies on come once the entry is out: a run refused its
    output (the config itself, a folder that is not there) printed two notes before its error."""
    config = tmp_path / "config.json"
    fields = json.loads((HF / "llama-3.1-8b.json").read_text(encoding="utf-8"))
    config.write_text(json.dumps({k: v for k, v in fields.items() if k not in ("attention_bias", "mlp_bias")}))
    ok = run("catalog", "import-hf", config, "--name", "x", "-o", tmp_path / "x.yaml")
    assert ok.exit_code == 0 and "note: " in ok.stderr, ok.output
    one_line_error(run("catalog", "import-hf", config, "--name", "x", "-o", config), 2, "is also an input")
    one_line_error(run("catalog", "import-hf", config, "--name", "x", "-o", tmp_path / "none" / "x.yaml"), 2,
                   "none")


def test_a_forecast_on_a_gpu_with_borrowed_factors_says_no_measurement_sizes_the_error(tmp_path):
    """The forecast's warning pointed every item to the plan's report for what it would need more, which a
    GPU with borrowed factors has no figure for (an audit's l4 forecast): it says to benchmark it."""
    from planner.forecast_outputs import unverified_speed_lines
    from planner.inputs import plan_scenario

    plan = plan_scenario(scenario(tmp_path, BASE.replace("gpus: [h100-sxm]", "gpus: [l4]")), explore=False)
    (line, _) = unverified_speed_lines([("2027Q1", plan)])
    assert line == ("**Speed not backed by a measurement of its own**, in the quarters' plans: l4 (GPU with borrowed "
                    "efficiency factors); those quarters' GPUs and cost rest on the speed model there: a GPU's borrowed "
                    "factors have no measurement of its own to size the error: benchmark it."), line


def test_vendor_words_match_however_a_catalog_spells_the_maker(catalog):
    """Vendors are matched by their words: "Nvidia-Corp", "NVIDIA®" are NVIDIA's, and a vendors entry of
    several words matches a GPU whose vendor holds them all."""
    trt, h100 = catalog.engine("trtllm"), catalog.gpu("h100-sxm")
    for spelled in ("Nvidia-Corp", "NVIDIA®", "NVIDIA(R)", "NVIDIA/Mellanox"):
        assert trt.runs_on_problem(h100.model_copy(update={"vendor": spelled})) is None, spelled
    corporate = trt.model_copy(update={"vendors": ("NVIDIA Corporation",)})
    assert corporate.runs_on_problem(h100.model_copy(update={"vendor": "NVIDIA Corporation"})) is None
    assert corporate.runs_on_problem(h100) is not None  # "NVIDIA" alone holds no "corporation"
    assert trt.runs_on_problem(h100.model_copy(update={"vendor": "NVIDIAN"})) is not None  # a word, not a prefix


# ---- demand that vanishes: each factor within its bound, their product not (an outside probe) --------
@pytest.mark.parametrize(("text", "command", "said"), [
    # traffic.growth above 0 but its peak a request in 8,000 years: a report of $1.2e10 per million tokens, exit 0
    (BASE.replace("  peak: {method: explicit, rps: 4}", "  peak: {method: explicit, rps: 4}\n  growth: 1e-12"),
     "solve", "traffic.growth: the peak of 4 requests/s × growth 1e-12 is 4e-12 requests/s, below the bound of 1e-06"),
    # a quarter's growth just above -1: its quarters at 0 requests/s priced at $1.7e8 per million tokens, exit 0
    (FORECAST.replace("{PRICES}", "{}").replace("growth: 0.2", "growth: -0.9999999999"), "forecast",
     "forecast quarter 2027Q2: traffic.growth: the peak of 4 requests/s × growth 1e-10 is 4e-10 requests/s, below the "
     "bound of 1e-06"),
])
def test_demand_grown_below_the_least_rate_is_refused(tmp_path, text, command, said):
    path = scenario(tmp_path, text)
    out = tmp_path / "out"
    r = run(command, path, "--no-verify", "--out-dir", out)
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and leftovers(out) == []
    line = r.stderr.strip()
    assert line.startswith(f"error: {path}: {said} (planner.bounds: a request every 11.6 days); check traffic.peak, "
                           "traffic.growth and traffic.headroom"), line
    assert "\n" not in line
    assert line.endswith("(in a forecast, the quarters' growth too: forecast.quarters[].growth)") == (command == "forecast")
