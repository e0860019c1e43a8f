"""`planner histogram` and `planner synth`: logs → histogram files; synthetic logs.

Thin: each command parses, calls one library function (planner.workload), formats.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from planner.bounds import MAX_RPS, MAX_SEED, MAX_SYNTHETIC_REQUESTS, MIN_RPS
from planner.cli.options import FiniteFloatRange, GivenPath, echo_json, json_option
from planner.workload.columns import FORMATS, PRESETS, TIME_UNITS, resolve_columns
from planner.workload.synth import DISTRIBUTIONS, distribution, generate, write_log

# Names that promise a text format a histogram file is not.
_TEXT_SUFFIXES = (".csv", ".tsv", ".txt", ".json", ".jsonl", ".ndjson", ".yaml", ".yml")


@click.command("histogram")
@click.argument("logs", nargs=-1, required=True, type=GivenPath(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=GivenPath(dir_okay=False, path_type=Path),
    help="Histogram file to write (Parquet; written only if every input reads).",
)
@click.option(
    "--preset",
    type=click.Choice(sorted(PRESETS)),
    help="Column names of a public trace: azure (Azure 2023), mooncake, burstgpt; "
    "default 'planner' (prompt_tokens, output_tokens, timestamp_ms).",
)
@click.option("--prompt-col", help="Column of prompt (input) token counts.")
@click.option("--output-col", help="Column of output (generated) token counts.")
@click.option(
    "--time-col", help="Column of arrival times (datetimes, or numbers: epoch times tell their unit by "
    "magnitude; times counted from the log's start need --time-unit)."
)
@click.option("--no-time", is_flag=True, help="Ignore arrival times (no per-minute rates).")
@click.option(
    "--time-unit",
    type=click.Choice(["auto", *TIME_UNITS]),
    default="auto",
    show_default=True,
    help="Unit of numeric timestamps; auto: the preset's for its own time column, else epoch times' "
    "magnitude (relative times, from 0, must be stated).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", *FORMATS]),
    default="auto",
    show_default=True,
    help="Log format; auto: from the extension (.parquet, .csv, .jsonl).",
)
@json_option
def histogram(
    logs: tuple[Path, ...],
    output: Path | None,
    preset: str | None,
    prompt_col: str | None,
    output_col: str | None,
    time_col: str | None,
    no_time: bool,
    time_unit: str,
    fmt: str,
    as_json: bool,
) -> None:
    """Histogram request logs (Parquet, CSV, JSON Lines) or histogram files into one file.

    Prints the request count, excluded rows per reason, mean/p50/p90/p99/max of prompt,
    output and total tokens (max is an upper bound, within 1.1%: the top of the longest
    request's fine bin, shown as "≤ N" unless that bin holds one length), the share above
    8k/32k/128k total tokens and the arrival rate (mean, p99 minute, max minute). Inputs
    may be histogram files (or folders of their parts) too: the result equals one pass
    over all the logs behind them. Warnings (rows excluded) follow a run that succeeds.

    \b
    Examples:
      planner histogram data/samples/azure_conv_2023_sample.csv --preset azure -o conv.hist.parquet
      planner histogram conv.hist.parquet data/samples/azure_code_2023_sample.csv --preset azure -o both.hist.parquet
    """
    # Imported here, not at the top: pyarrow's dataset machinery costs every other command start-up time.
    from planner.units import counted_text
    from planner.workload.ingest import ingest, write_histogram_file
    from planner.workload.summary import format_summary, summarize

    if output is not None and output.suffix.lower() in _TEXT_SUFFIXES:
        raise click.BadParameter(
            f"{output}: a histogram file is Parquet; name it with .parquet (a {output.suffix} name "
            "would hide the format)", param_hint="-o/--output")
    if no_time and (time_col is not None or time_unit != "auto"):  # one would be ignored
        raise click.UsageError(f"--no-time ignores arrival times; {'--time-col' if time_col else '--time-unit'} "
                               "names how to read them: give one or the other")
    columns = resolve_columns(preset, prompt_col, output_col, time_col, time_unit, no_time)
    with _progress_bar() as progress:
        result = ingest(logs, columns, fmt=fmt, progress=progress)
    # Summarised before writing: a summary that fails (arrival times spanning centuries)
    # must leave no output behind.
    summary = summarize(result.histogram, result.excluded_rows, result.time_unit_assumed)
    if output is not None:
        write_histogram_file(result, output)
    _warn(result)  # once the run has succeeded: a failed run says one line, its error
    if as_json:
        echo_json(summary.model_dump())
    else:
        click.echo(format_summary(summary))
        if output is not None:
            hist = result.histogram
            click.echo(
                f"wrote {output} ({counted_text(hist.count.size, 'cell')}, "
                f"{counted_text(hist.minute.size, 'minute')} with arrivals)"
            )


def _warn(result) -> None:
    """The inputs' excluded rows (a `warning:` line per input), times that contradict their stated
    unit (a `warning:` line each) and notes, on stderr."""
    from planner.units import counted_text

    for report in result.files:
        dropped = {r: n for r, n in report.excluded_rows.items() if n}
        if dropped:
            detail = ", ".join(f"{r} {n:,}" for r, n in dropped.items())
            columns = f"; {report.problems_text}" if report.problems_text else ""
            click.echo(
                f"warning: {report.path}: excluded {counted_text(sum(dropped.values()), 'row')} ({detail}){columns}",
                err=True,
            )
    # times that contradict their stated unit (every rate 1000× off), a grown log counted twice, and files
    # that drop arrivals by length: warnings, not notes
    for warning in (*result.warnings, *result.length_warnings):
        click.echo(f"warning: {warning}", err=True)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)


class _progress_bar:
    """A tqdm bar per log read, with its total and an ETA (rows of Parquet, bytes of text
    logs: planner.workload.progress), only when stderr is a terminal (never in pipes or tests)."""

    def __enter__(self):
        self._bar = None
        return self if sys.stderr.isatty() else None

    def start(self, label: str, total: int | None, unit: str) -> None:
        from tqdm import tqdm

        self.__exit__()
        self._bar = tqdm(
            desc=label,
            total=total,
            unit=" rows" if unit == "rows" else unit,
            unit_scale=True,
            unit_divisor=1024 if unit == "B" else 1000,
            file=sys.stderr,
            leave=False,
        )

    def advance(self, position: int) -> None:
        if self._bar is not None:
            self._bar.update(position - self._bar.n)

    def __exit__(self, *exc_info) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


@click.command("synth")
@click.argument("name", type=click.Choice(sorted(DISTRIBUTIONS)), metavar="NAME")
@click.option(
    "-n",
    "--requests",
    type=click.IntRange(1, MAX_SYNTHETIC_REQUESTS),
    required=True,
    help="Number of requests.",
)
@click.option(
    "--seed",
    type=click.IntRange(0, MAX_SEED),
    default=0,
    show_default=True,
    help="Random seed, >= 0 (same seed, same log).",
)
@click.option(
    "-o",
    "--output",
    type=GivenPath(dir_okay=False, path_type=Path),
    required=True,
    help="Log to write: .parquet, .csv or .jsonl (columns prompt_tokens, output_tokens, timestamp_ms).",
)
@click.option(
    "--rate-rps",
    type=FiniteFloatRange(min=MIN_RPS, max=MAX_RPS),
    help="Poisson arrival rate, requests/s [default: the distribution's own: "
         + ", ".join(f"{name} {model.rate_rps:g}" for name, model in DISTRIBUTIONS.items()) + "].",
)
@click.option(
    "--tail-share",
    type=FiniteFloatRange(0, 1, max_open=True),
    help="Share of requests in the long-context tail (totals above 32,768 tokens), in place of the "
         "distribution's own [default: "
         + ", ".join(f"{name} {model.tail_share:g}" for name, model in DISTRIBUTIONS.items()) + "].",
)
@json_option
def synth(
    name: str,
    requests: int,
    seed: int,
    output: Path,
    rate_rps: float | None,
    tail_share: float | None,
    as_json: bool,
) -> None:
    """Write a seeded synthetic request log from a named length distribution.

    Distributions: chat (fitted to Azure 2023 conversation), chat_long_tail (chat plus 2%
    of requests with 32k-128k total tokens), rag (fitted to Mooncake conversation), code
    (fitted to Azure 2023 code). Arrivals are Poisson. The fits are lognormal, matched to
    the traces' log means, spreads and correlation: their tails are heavier than the
    traces' (chat's prompt p99 about 7,500-7,800 tokens against the conversation trace's 4,145;
    code's totals above 8,192 tokens 6% against none), so plan a split from the log itself.

    \b
    Examples:
      planner synth chat_long_tail -n 100000 --seed 7 -o chat.parquet
      planner histogram chat.parquet -o chat.hist.parquet
    """
    model = distribution(name)
    if tail_share is not None:
        from dataclasses import replace

        model = replace(model, tail_share=tail_share)
    log = generate(model, requests, seed, rate_rps=rate_rps)
    write_log(log, output)
    payload = {
        "distribution": name,
        "requests": requests,
        "seed": seed,
        "rate_rps": rate_rps if rate_rps is not None else model.rate_rps,
        "tail_share": model.tail_share,
        "output": str(output),
    }
    if as_json:
        echo_json(payload)
    else:
        # a tail share set on chat, rag or code makes a long-tailed mix: said, not left to --json
        from planner.units import share_text

        tail = f", {share_text(model.tail_share)} of them in the 32k-128k tail" if model.tail_share else ""
        click.echo(
            f"wrote {requests:,} '{name}' requests (seed {seed}, {payload['rate_rps']} req/s{tail}) to {output}"
        )


COMMANDS = [histogram, synth]
