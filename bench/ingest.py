"""Benchmark: `planner histogram` against a bare pyarrow.dataset scan, rows/s and peak RSS.

    python bench/ingest.py --rows 1000000 10000000 [--format csv]

For each row count, a synthetic Parquet log ('chat_long_tail', planner.workload.synth;
columns prompt_tokens, output_tokens, timestamp_ms; zstd; row groups of --row-group-rows), or with
--format csv the same rows as CSV (where the histogram also counts the file's line breaks, to
refuse a log a quote left open reads short: planner.workload.readers._check_open_quote),
is generated in a temporary folder (deleted afterwards), then each measurement runs
--repeat times, each in a fresh Python process so that its peak RSS (getrusage
ru_maxrss of that process) is its own:
- histogram: `planner histogram LOG -o H --json`, run in-process through click (imports
  done before the clock starts), so the time is ingestion + summary + writing the file.
  Its imports include numba loading the compiled ingestion loop from its on-disk cache;
  that one-off start cost is timed apart and printed ("start-up");
- bare:      a pyarrow.dataset scan of the two token columns with pyarrow's defaults,
  touching nothing but the batch sizes.
Both processes import the same modules, so their baseline memory is the same.

Targets (issue 3): histogram throughput >= 0.5x the bare scan's, and peak RSS at the
largest size <= 1.2x that at the smallest. The script prints the figures and whether each
target is met; it never fails on them (times are not asserted anywhere). Besides each
size's end-to-end ratio it prints the marginal throughput between the smallest and largest
size (extra rows / extra seconds), which leaves out what a run costs whatever its length
(the summary, writing the file): at 1M rows those few milliseconds are as long as the
whole bare scan. A busy machine moves these sub-second figures by tens of percent, so each
line shows the spread of its runs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_THROUGHPUT_RATIO = 0.5
TARGET_RSS_RATIO = 1.2
CHUNK_ROWS = 1_000_000
# The bare scans: the target's baseline (the two token columns), and for information the
# three columns the histogram reads (the time column's decoding is part of its cost).
BARE_COLUMNS = {
    "bare": ["prompt_tokens", "output_tokens"],
    "bare_3_cols": ["prompt_tokens", "output_tokens", "timestamp_ms"],
}
MODES = ("bare", "bare_3_cols", "histogram")


def generate(
    rows: int, path: Path, row_group_rows: int, seed: int, timestamp_encoding: str
) -> None:
    """Write a synthetic log in chunks (bounded memory, deterministic per seed): Parquet, or CSV
    where the path says so."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from planner.workload.synth import START_MS
    from planner.workload.synth import generate as draw

    writer = None
    start_ms = START_MS
    for chunk, first in enumerate(range(0, rows, CHUNK_ROWS)):
        log = draw(
            "chat_long_tail", min(CHUNK_ROWS, rows - first), [seed, chunk], start_ms=start_ms
        )
        start_ms = int(log.timestamp_ms[-1])
        table = log.to_table()
        if path.suffix == ".csv":
            writer = writer or pacsv.CSVWriter(path, table.schema)
            writer.write_table(table)
            continue
        if writer is None:
            # pyarrow's defaults (snappy, dictionary pages) except, with 'delta', the sorted
            # time column, which Parquet v2 writers store as DELTA_BINARY_PACKED
            options = {}
            if timestamp_encoding == "delta":
                options = {
                    "use_dictionary": ["prompt_tokens", "output_tokens"],
                    "column_encoding": {"timestamp_ms": "DELTA_BINARY_PACKED"},
                }
            writer = pq.ParquetWriter(path, table.schema, **options)
        writer.write_table(table, row_group_size=row_group_rows)
    if writer is not None:
        writer.close()


def measure(mode: str, path: Path) -> dict:
    """One measurement in this (fresh) process; prints its JSON line."""
    import resource

    import pyarrow.dataset as ds

    # The command imports its pipeline lazily; import it before the clock starts, as the
    # bare scan's pyarrow.dataset is, so both figures time the scan and not the imports.
    began = time.perf_counter()
    import planner.workload.cell_kernel  # numba and the compiled loop, which ingest loads lazily
    import planner.workload.ingest
    import planner.workload.summary  # noqa: F401
    from planner.cli import main as planner_main

    start = time.perf_counter()
    startup_seconds = start - began
    if mode in BARE_COLUMNS:
        rows = 0
        for batch in ds.dataset(str(path), format=path.suffix[1:]).to_batches(columns=BARE_COLUMNS[mode]):
            rows += batch.num_rows
    else:
        out = path.with_suffix(".hist.parquet")
        with contextlib.redirect_stdout(io.StringIO()) as captured:
            planner_main(["histogram", str(path), "-o", str(out), "--json"], standalone_mode=False)
        rows = json.loads(captured.getvalue())["requests"]
    seconds = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {
        "mode": mode,
        "rows": rows,
        "seconds": seconds,
        "startup_seconds": startup_seconds,
        "peak_rss_bytes": peak_kib * 1024,
    }


def run_child(*args: str) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        sys.exit(f"child {' '.join(args)} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument(
        "--repeat", type=int, default=3, help="fresh processes per measurement (median)"
    )
    parser.add_argument("--row-group-rows", type=int, default=131_072)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--timestamp-encoding",
        choices=("delta", "plain"),
        default="delta",
        help="Parquet encoding of the time column: delta (DELTA_BINARY_PACKED) or plain (pyarrow's default)",
    )
    parser.add_argument("--format", choices=("parquet", "csv"), default="parquet", help="the log's format")
    parser.add_argument("--_generate", nargs=2, metavar=("ROWS", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--_measure", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._generate:
        generate(
            int(args._generate[0]),
            Path(args._generate[1]),
            args.row_group_rows,
            args.seed,
            args.timestamp_encoding,
        )
        return
    if args._measure:
        print(json.dumps(measure(args._measure[0], Path(args._measure[1]))))
        return

    results: dict[tuple[int, str], dict] = {}
    with tempfile.TemporaryDirectory(prefix="planner-bench-") as tmp:
        for rows in args.rows:
            log = Path(tmp) / f"log_{rows}.{args.format}"
            begin = time.perf_counter()
            run_child(
                "--_generate",
                str(rows),
                str(log),
                "--row-group-rows",
                str(args.row_group_rows),
                "--seed",
                str(args.seed),
                "--timestamp-encoding",
                args.timestamp_encoding,
            )
            print(
                f"generated {rows:,} rows ({log.stat().st_size / 2**20:.1f} MiB) in {time.perf_counter() - begin:.1f} s",
                file=sys.stderr,
            )
            runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
            for _ in range(args.repeat):  # interleaved, so a busy moment hits every mode alike
                for mode in MODES:
                    runs[mode].append(run_child("--_measure", mode, str(log)))
            for mode, done in runs.items():
                if any(r["rows"] != rows for r in done):
                    sys.exit(f"{mode} at {rows} rows counted {[r['rows'] for r in done]}")
                results[rows, mode] = {
                    "seconds": statistics.median(r["seconds"] for r in done),
                    "seconds_min": min(r["seconds"] for r in done),
                    "seconds_max": max(r["seconds"] for r in done),
                    "startup_seconds": statistics.median(r["startup_seconds"] for r in done),
                    "peak_rss_bytes": statistics.median(r["peak_rss_bytes"] for r in done),
                }
    report(results, args)


def report(results: dict, args: argparse.Namespace) -> None:
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; median of {args.repeat} fresh processes; "
        + (f"Parquet, row groups of {args.row_group_rows:,} rows; time column {args.timestamp_encoding}-encoded"
           if args.format == "parquet" else "CSV (its bare scan infers the columns' types; the histogram reads text)")
    )
    print(
        f"{'rows':>12}  {'measurement':<12}  {'seconds':>8}  {'(min-max)':>13}  {'rows/s':>13}  {'peak RSS MiB':>12}"
    )
    for (rows, mode), r in results.items():
        rate = rows / r["seconds"]
        spread = f"{r['seconds_min']:.3f}-{r['seconds_max']:.3f}"
        print(
            f"{rows:>12,}  {mode:<12}  {r['seconds']:>8.3f}  {spread:>13}  {rate:>13,.0f}  {r['peak_rss_bytes'] / 2**20:>12.1f}"
        )
    startup = statistics.median(r["startup_seconds"] for (_, m), r in results.items() if m == "histogram")
    print(f"start-up of the histogram command (imports, numba's cached code), not timed above: {startup:.2f} s")
    print()
    for rows in args.rows:
        ratio = results[rows, "bare"]["seconds"] / results[rows, "histogram"]["seconds"]
        verdict = "met" if ratio >= TARGET_THROUGHPUT_RATIO else "NOT met"
        print(
            f"throughput at {rows:>12,} rows: histogram / bare scan = {ratio:.2f}x  (target >= {TARGET_THROUGHPUT_RATIO}x: {verdict})"
        )
    small, large = min(args.rows), max(args.rows)
    if small != large:
        added = {
            mode: results[large, mode]["seconds"] - results[small, mode]["seconds"]
            for mode in ("bare", "histogram")
        }
        if min(added.values()) <= 0:  # noise larger than the work the extra rows add
            print(f"marginal throughput {small:,} -> {large:,} rows: not measurable in this run")
        else:
            extra = {mode: (large - small) / seconds for mode, seconds in added.items()}
            ratio = extra["histogram"] / extra["bare"]
            verdict = "met" if ratio >= TARGET_THROUGHPUT_RATIO else "NOT met"
            print(
                f"marginal throughput {small:,} -> {large:,} rows: histogram {extra['histogram']:,.0f} rows/s, "
                f"bare {extra['bare']:,.0f} rows/s = {ratio:.2f}x  (target >= {TARGET_THROUGHPUT_RATIO}x: {verdict})"
            )
        ratio = (
            results[large, "histogram"]["peak_rss_bytes"]
            / results[small, "histogram"]["peak_rss_bytes"]
        )
        verdict = "met" if ratio <= TARGET_RSS_RATIO else "NOT met"
        print(
            f"peak RSS of histogram, {large:,} / {small:,} rows = {ratio:.2f}x  (target <= {TARGET_RSS_RATIO}x: {verdict})"
        )


if __name__ == "__main__":
    main()
