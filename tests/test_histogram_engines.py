"""README.md's recipes for histogram files at scale, run as written on real engines: Spark
(local mode), Dask and DuckDB each histogram a log in parts, and `planner histogram` on the
parts gives the histogram file that `planner histogram` gives on the log itself.

The code is taken from README.md's code blocks, with the two placeholder locations
(s3://logs/, s3://hist/) replaced by folders of the test, so the README cannot drift from
what runs. CI installs the engines ('.[test,engines]', .ci/run) and the Java runtime Spark
needs; elsewhere a missing engine skips its test, and so does a missing `java` for Spark.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from clirun import run

from planner.workload.histfile import read_histogram
from planner.workload.synth import generate

README = Path(__file__).resolve().parent.parent / "README.md"
SECTION = "## Histograms at scale (Spark, Dask, DuckDB, SQL)"


def _engine(module: str):
    """The engine's module; in CI (which installs them) a missing one fails, elsewhere it skips."""
    if os.environ.get("CI"):
        return importlib.import_module(module)
    return pytest.importorskip(module, reason="pip install '.[engines]' to run the README's engine recipes")


def readme_blocks() -> list[tuple[str, str]]:
    """(language, code) of each fenced block of the README's section on histograms at scale."""
    section = README.read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", section, re.S)


def readme_code(first_line: str) -> str:
    """The README's Python block that starts with `first_line`."""
    found = [code for lang, code in readme_blocks() if lang == "python" and code.startswith(first_line)]
    assert len(found) == 1, f"README.md, {SECTION}: {len(found)} python blocks start with {first_line!r}"
    return found[0]


def readme_sql() -> str:
    (sql,) = [code for lang, code in readme_blocks() if lang == "sql"]
    return sql


@pytest.fixture(scope="module")
def log_and_single(tmp_path_factory):
    """A synthetic log in three Parquet files (so engines see several partitions), and the
    histogram file `planner histogram` makes of it on one machine."""
    root = tmp_path_factory.mktemp("engines")
    logs = root / "logs"
    logs.mkdir()
    table = generate("chat_long_tail", 6_000, seed=5).to_table()
    for i, start in enumerate((0, 2_500, 4_000)):
        stop = (2_500, 4_000, 6_000)[i]
        pq.write_table(table.slice(start, stop - start), logs / f"part-{i}.parquet", row_group_size=1_000)
    single = root / "single.hist.parquet"
    result = run("histogram", logs, "-o", single)
    assert result.exit_code == 0, result.output
    return logs, read_histogram(single)


def run_recipe(name: str, logs: Path, out: Path, **namespace) -> None:
    """Run the README's helper block and the engine's block, pointed at `logs` and `out`."""
    code = readme_code("from planner.histogram import Histogram") + readme_code(f"# {name}")
    assert "s3://logs/" in code and "s3://hist/" in code
    code = code.replace("s3://logs/", f"{logs}/").replace("s3://hist/", f"{out}/")
    exec(compile(code, f"README.md ({name} recipe)", "exec"), namespace)


def assert_merges_to_single(parts: Path, out: Path, single) -> None:
    merged = out / "merged.hist.parquet"
    result = run("histogram", parts, "-o", merged)
    assert result.exit_code == 0, result.output
    assert read_histogram(merged) == single
    rate_line = next(line for line in result.output.splitlines() if line.startswith("arrival rate"))
    assert rate_line.endswith("  (per-minute counts of histogram files)"), rate_line


def test_readme_duckdb_recipe_gives_the_single_machine_histogram(log_and_single, tmp_path):
    _engine("duckdb")
    logs, single = log_and_single
    run_recipe("DuckDB", logs, tmp_path, sql=readme_sql())
    assert_merges_to_single(tmp_path / "duckdb.parquet", tmp_path, single)
    # merged with a log that has times, its minute counts count too: the run said "no arrival times in
    # duckdb.parquet", its metadata naming no time unit, while its minutes were in the rates
    timed = tmp_path / "timed.csv"
    timed.write_text("prompt_tokens,output_tokens,timestamp_ms\n" + "".join(f"{100 + i},10,{1_704_067_200_000 + i * 1000}\n" for i in range(60)))
    result = run("histogram", tmp_path / "duckdb.parquet", timed)
    assert result.exit_code == 0, result.output
    assert "no arrival times" not in result.output, result.output


# dask's Parquet reader and writer pass inplace=True, which pandas 3.1 deprecates: theirs, not ours
@pytest.mark.filterwarnings("ignore:The inplace keyword in DataFrame:DeprecationWarning")
def test_readme_dask_recipe_gives_the_single_machine_histogram(log_and_single, tmp_path):
    _engine("dask.dataframe")
    logs, single = log_and_single
    run_recipe("Dask", logs, tmp_path)
    assert len(list((tmp_path / "parts").glob("*.parquet"))) >= 2  # one part per partition
    assert_merges_to_single(tmp_path / "parts", tmp_path, single)


@pytest.mark.long
# pyspark 4.3 warns on import under pandas 3; the recipe passes Arrow batches, no pandas
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")
@pytest.mark.skipif(shutil.which("java") is None, reason="no Java runtime (java) for Spark; .ci/run installs one")
def test_readme_spark_recipe_gives_the_single_machine_histogram(log_and_single, tmp_path, monkeypatch):
    sql = _engine("pyspark.sql")
    logs, single = log_and_single
    # Spark's Python workers must run this interpreter, which has planner installed
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    session = (
        sql.SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()  # the README's getOrCreate() then returns this local session
    )
    try:
        run_recipe("Spark", logs, tmp_path)
    finally:
        session.stop()
    assert len(list((tmp_path / "parts").glob("*.parquet"))) >= 2
    assert_merges_to_single(tmp_path / "parts", tmp_path, single)
