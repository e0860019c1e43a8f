"""A histogram file's schema metadata (planner.workload.histmeta): checked whole, naming the file
and the key, by `planner histogram` and by a scenario's traffic.source.histogram; and every part of
a folder read, not its first file's alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from clirun import run
from contract import one_line_error
from scenario_files import write_scenario

from planner.workload.histfile import HISTOGRAM_FILE_METADATA_KEY

KEY = HISTOGRAM_FILE_METADATA_KEY.encode()


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """A histogram file as planner writes it: 500 synthetic chat requests (no row excluded)."""
    folder = tmp_path_factory.mktemp("written")
    assert run("synth", "chat", "-n", 500, "--seed", 1, "-o", folder / "x.csv").exit_code == 0
    assert run("histogram", folder / "x.csv", "-o", folder / "h.parquet").exit_code == 0
    return folder / "h.parquet"


def metadata(path: Path) -> dict:
    return json.loads(pq.read_schema(path).metadata[KEY])


def with_metadata(source: Path, target: Path, raw: bytes | dict) -> Path:
    """`source`'s table written to `target` with its planner.histogram metadata replaced by `raw`."""
    table = pq.read_table(source)
    value = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
    pq.write_table(table.replace_schema_metadata({KEY: value}), target)
    return target


def of_another_log(base: dict, k: int) -> dict:
    """Metadata as if the part were built from another log (its fingerprint k): parts of one log are
    refused, their requests counted twice."""
    return {**base, "source_fingerprints": [f"{k:064x}"]}


def scenario_from(tmp_path: Path, histogram: Path) -> Path:
    return write_scenario(tmp_path, f"""\
        name: h
        model: llama-3.1-8b
        context_limit: 8192
        traffic:
          source: {{histogram: {histogram.name}}}
          peak: {{method: explicit, rps: 4}}
        gpus: [h100-sxm]
        tp: [1]
        weight_dtypes: [bf16]
        kv_dtypes: [bf16]
        split_thresholds: []
        verify: false
        """)


# Each once crashed with a traceback (exit 1) or, the last, printed "excluded -5 rows".
MALFORMED = [
    (b"[1,2]", "is an array, not a JSON object of keys"),
    (b"{not json", "is not JSON"),
    ({"excluded_rows": "lots"}, "excluded_rows: Input should be a valid dictionary (got 'lots')"),
    ({"excluded_rows": {"null": "x"}}, "excluded_rows.null: Input should be a valid integer (got 'x')"),
    ({"excluded_rows": {"null": -5}}, "excluded_rows.null: Input should be greater than or equal to 0 (got -5)"),
    ({"excluded_rows": {"nul": 5}}, "excluded_rows.nul (as a key): Input should be 'null', 'negative'"),
    ({"length_edges": 5}, "length_edges: Input should be a valid list (got 5)"),
    ({"time_unit_assumed": 5}, "time_unit_assumed: Input should be a valid string (got 5)"),
    ({"sources": "x.csv"}, "sources: Input should be a valid list (got 'x.csv')"),
    # a traceback (RecursionError), then strings that printed lines of their own or an unknown unit
    (b"[" * 100_000, "is nested too deeply to be planner's metadata"),
    ({"time_unit_assumed": "ms\nerror: fake"}, "time_unit_assumed: expected one of datetime, s, ms, us"),
    ({"time_unit_assumed": "parsecs"}, "time_unit_assumed: expected one of datetime, s, ms, us, ns or "
                                       "'mixed (...)'"),
    ({"sources": ["a.csv\nerror: fake"]}, "sources[0]: must be one line of printable text"),
    # read as a histogram of this format, whatever it said (an outside probe)
    ({"format": "not-a-planner-histogram"}, "format 'not-a-planner-histogram' is not a format planner has written "
                                            "(planner.histogram/1, planner.histogram/2)"),
    ({"format": "planner.histogram/99"}, "format 'planner.histogram/99' is not a format planner has written"),
]


@pytest.mark.parametrize(("raw", "problem"), MALFORMED, ids=[str(i) for i in range(len(MALFORMED))])
def test_malformed_metadata_is_refused_naming_the_file_and_the_key(tmp_path, written, raw, problem):
    base = metadata(written)
    value = raw if isinstance(raw, bytes) else {**base, **raw}
    bad = with_metadata(written, tmp_path / "bad.parquet", value)
    expected = f"{bad}: schema metadata 'planner.histogram'"
    out = tmp_path / "out.parquet"
    one_line_error(run("histogram", bad, "-o", out), 2, expected, problem)
    assert not out.exists()
    one_line_error(run("capacity", "llama-3.1-8b", "h100-sxm", "--histogram", bad), 2, expected, problem)
    path = scenario_from(tmp_path, bad)
    one_line_error(run("solve", path, "--out-dir", tmp_path / "reports"), 2, expected, problem)
    assert not (tmp_path / "reports").exists()


def test_metadata_keys_planner_does_not_write_are_kept_and_none_is_needed(tmp_path, written):
    """Another producer may record more, or nothing: neither is refused."""
    extra = with_metadata(written, tmp_path / "extra.parquet", {**metadata(written), "producer": "spark"})
    r = run("histogram", extra, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["requests"] == 500
    bare = tmp_path / "bare.parquet"
    pq.write_table(pq.read_table(written).replace_schema_metadata(None), bare)
    r = run("histogram", bare, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["excluded_rows"]["null"] == 0


def test_every_part_of_a_folder_counts_its_excluded_rows(tmp_path, written):
    """Three parts, the first with none excluded: their counts add up (the first part's metadata
    alone said no row was excluded), in the summary and in a scenario's notes."""
    parts = tmp_path / "parts"
    parts.mkdir()
    base = metadata(written)
    shutil.copy(written, parts / "a.parquet")
    with_metadata(written, parts / "b.parquet", {**of_another_log(base, 1), "excluded_rows": {"non_numeric": 4}})
    with_metadata(written, parts / "c.parquet", {**of_another_log(base, 2), "excluded_rows": {"negative": 2, "empty_prompt": 1}})
    r = run("histogram", parts, "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["requests"] == 1_500
    assert summary["excluded_rows"] == {"null": 0, "negative": 2, "non_numeric": 4, "too_long": 0, "empty_prompt": 1}
    assert r.stderr == f"warning: {parts}: excluded 7 rows (negative 2, non_numeric 4, empty_prompt 1)\n"
    r = run("solve", scenario_from(tmp_path, parts), "--no-report", "--json")
    assert r.exit_code == 0, r.output
    assert "Excluded rows: 2 negative, 4 non_numeric, 1 empty_prompt (of 1,507 read)." in json.loads(r.stdout)["traffic_notes"]


def test_a_part_built_with_other_edges_is_refused_by_name(tmp_path, written):
    """The second part's edges differ: the first part's agreeing must not let it through."""
    parts = tmp_path / "parts"
    parts.mkdir()
    shutil.copy(written, parts / "a.parquet")
    base = metadata(written)
    with_metadata(written, parts / "b.parquet", {**base, "fine_edges": base["fine_edges"][:-1]})
    one_line_error(run("histogram", parts), 2, f"{parts / 'b.parquet'}: built with other bin edges (fine_edges)")
    with_metadata(written, parts / "b.parquet", {**base, "excluded_rows": {"null": -1}})
    one_line_error(run("histogram", parts), 2, f"{parts / 'b.parquet'}: schema metadata 'planner.histogram': "
                                               "excluded_rows.null: Input should be greater than or equal to 0")


def test_parts_that_read_their_times_in_other_units_say_so(tmp_path, written):
    parts = tmp_path / "parts"
    parts.mkdir()
    base = metadata(written)
    shutil.copy(written, parts / "a.parquet")
    with_metadata(written, parts / "b.parquet", {**of_another_log(base, 1), "time_unit_assumed": "s"})
    r = run("histogram", parts, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["time_unit_assumed"] == "mixed (a.parquet: ms; b.parquet: s)"


def test_hive_parts_of_one_name_are_told_apart_by_their_folders(tmp_path, written):
    """day=1/part-0.parquet and day=2/part-0.parquet both read as 'part-0.parquet: ...' before."""
    base = metadata(written)
    for day, unit in ((1, "ms"), (2, "s")):
        (tmp_path / "hive" / f"day={day}").mkdir(parents=True)
        with_metadata(written, tmp_path / "hive" / f"day={day}" / "part-0.parquet",
                      {**of_another_log(base, day), "time_unit_assumed": unit})
    r = run("histogram", tmp_path / "hive", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["time_unit_assumed"] == "mixed (day=1/part-0.parquet: ms; day=2/part-0.parquet: s)"


def test_capacity_takes_a_folder_of_histogram_parts(tmp_path, written):
    """As `histogram` and a scenario's source.histogram do; the parts read as one histogram."""
    parts = tmp_path / "parts"
    parts.mkdir()
    shutil.copy(written, parts / "a.parquet")
    args = ("capacity", "llama-3.1-8b", "h100-sxm", "--context-limit", 8192, "--json")
    r = run(*args, "--histogram", parts)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == json.loads(run(*args, "--histogram", written).stdout)
    one_line_error(run(*args, "--histogram", tmp_path / "missing"), 2, f"{tmp_path / 'missing'}: no such file")
