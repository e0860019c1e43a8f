"""Seeded synthetic request logs and histograms, for tests, benchmarks and scenarios.

A named distribution (DISTRIBUTIONS) is a `LengthModel`: prompt and output lengths drawn
from a bivariate lognormal (log-means, log-sds and the correlation of the logs), whose
totals are truncated at `max_total` tokens, plus an optional long-context tail: a share
`tail_share` of requests whose total is log-uniform in (tail_above, tail_max] tokens.
Arrivals are a Poisson process at `rate_rps` requests/s (exponential gaps), in epoch
milliseconds from 2024-01-01T00:00:00Z.

Parameters are fitted (mean and sd of the log lengths, correlation of the logs) to the
public traces named in each model's `source`; the fits are rounded. Same name, request
count and seed ⇒ the same requests, on any machine (numpy's PCG64 Generator).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from planner.errors import InputError, did_you_mean
from planner.files import atomic_output
from planner.histogram import Histogram
from planner.workload.columns import PRESETS
from planner.workload.peaks import MAX_SPAN_MINUTES

START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z: synthetic logs start here
_COLUMNS = PRESETS["planner"]  # the column names synthetic logs are written with


@dataclass(frozen=True)
class LengthModel:
    """Joint prompt/output length distribution with a long-context tail; see the module doc."""

    prompt_log_mean: float
    prompt_log_sd: float
    output_log_mean: float
    output_log_sd: float
    log_correlation: float
    max_total: int  # the body's totals are at most this (tokens)
    tail_share: float = 0.0  # share of requests in the long-context tail
    tail_above: int = 32_768  # tail totals are > this (tokens) ...
    tail_max: int = 131_072  # ... and <= this (tokens)
    rate_rps: float = 1.0  # default Poisson arrival rate, requests/s
    source: str = ""

    def __post_init__(self) -> None:
        if not 0.0 <= self.tail_share < 1.0:
            raise InputError(f"tail share {self.tail_share}: expected 0 <= share < 1")
        if not self.tail_above < self.tail_max:
            raise InputError(f"tail bounds ({self.tail_above}, {self.tail_max}] are empty")
        if self.max_total < 2:
            raise InputError(f"max_total {self.max_total}: a request has at least 2 tokens")
        if not self.rate_rps > 0:
            raise InputError(f"arrival rate {self.rate_rps} req/s: expected > 0")
        if not -1.0 < self.log_correlation < 1.0:
            raise InputError(f"log correlation {self.log_correlation}: expected -1 < rho < 1")


_AZURE_CONV = "Azure LLM inference trace 2023, conversation (19,366 requests; Splitwise, ISCA 2024)"
_CHAT = LengthModel(
    6.63, 0.99, 5.02, 0.86, 0.09, max_total=32_768, rate_rps=5.4, source=_AZURE_CONV
)
DISTRIBUTIONS: dict[str, LengthModel] = {
    "chat": _CHAT,
    "chat_long_tail": replace(
        _CHAT,
        tail_share=0.02,
        source=_AZURE_CONV + ", plus 2% of requests log-uniform in 32k-128k total tokens",
    ),
    "rag": LengthModel(
        8.74,
        1.20,
        5.34,
        1.36,
        0.05,
        max_total=131_072,
        rate_rps=3.4,
        source="Mooncake conversation trace (12,031 requests, long documents in context; FAST 2025)",
    ),
    "code": LengthModel(
        7.00,
        1.36,
        2.79,
        0.85,
        0.0,
        max_total=32_768,
        rate_rps=2.6,
        source="Azure LLM inference trace 2023, code (8,819 requests; Splitwise, ISCA 2024)",
    ),
}


def distribution(name: str) -> LengthModel:
    """The named LengthModel (InputError listing the names if unknown)."""
    if name not in DISTRIBUTIONS:
        raise InputError(did_you_mean(name, DISTRIBUTIONS, what="synthetic distribution"))
    return DISTRIBUTIONS[name]


@dataclass(frozen=True, eq=False)
class SyntheticLog:
    """Per-request arrays: prompt and output tokens (int64), arrival time in epoch ms (int64)."""

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    timestamp_ms: np.ndarray

    def to_table(self):  # -> pyarrow.Table
        """As an Arrow table with the 'planner' preset's column names."""
        import pyarrow as pa  # only for writing logs: a synthetic histogram needs no Arrow

        return pa.table(
            {
                _COLUMNS.prompt: self.prompt_tokens,
                _COLUMNS.output: self.output_tokens,
                _COLUMNS.time: self.timestamp_ms,
            }
        )

    def histogram(self) -> Histogram:
        return Histogram.from_arrays(
            self.prompt_tokens, self.output_tokens, self.timestamp_ms / 1000.0
        )


_YEAR_S = 3.15576e7  # a Julian year (365.25 days), for the spans these messages give in years

def generate(
    model: LengthModel | str,
    requests: int,
    seed: int | list[int],
    *,
    rate_rps: float | None = None,
    start_ms: int = START_MS,
) -> SyntheticLog:
    """`requests` synthetic requests from `model` (a LengthModel or a DISTRIBUTIONS name).

    `seed` may be a list (e.g. [seed, chunk]) to draw a long log in independent chunks.
    """
    model = distribution(model) if isinstance(model, str) else model
    if requests < 0:
        raise InputError(f"request count {requests}: expected >= 0")
    rate = model.rate_rps if rate_rps is None else rate_rps
    if not rate > 0:
        raise InputError(f"arrival rate {rate} req/s: expected > 0")
    span_s = MAX_SPAN_MINUTES * 60.0
    # The last arrival is a sum of n exponential gaps: mean n/rate, sd sqrt(n)/rate. Ten sd past the
    # longest span a log may have, no draw can come back under it: refused before drawing, which for
    # 10^8 requests took 15-30 s and 7 GB of memory.
    ten_sd = 10.0 * math.sqrt(requests)  # in mean gaps
    if (requests - ten_sd) / rate > span_s:
        # the rate suggested leaves ten sd of room below the span, so that a draw fits
        raise InputError(
            f"{requests:,} requests at {rate:g} req/s span about {requests / rate / _YEAR_S:,.1f} years, more than "
            f"a log may ({span_s / _YEAR_S:.1f} years): raise the rate to {(requests + ten_sd) / span_s:.3g} req/s "
            "or more, or lower the count"
        )
    rng = np.random.default_rng(seed)
    in_tail = rng.random(requests) < model.tail_share
    prompt = np.empty(requests, np.int64)
    output = np.empty(requests, np.int64)
    body = np.flatnonzero(~in_tail)
    prompt[body], output[body] = _body_lengths(model, body.size, rng)
    tail = np.flatnonzero(in_tail)
    prompt[tail], output[tail] = _tail_lengths(model, tail.size, rng)
    gaps_ms = rng.exponential(1000.0 / rate, requests)
    arrival_ms = np.cumsum(gaps_ms)
    if arrival_ms.size and arrival_ms[-1] > span_s * 1e3:
        raise InputError(
            f"{requests:,} requests at {rate:g} req/s span {arrival_ms[-1] / 1e3 / _YEAR_S:,.1f} years, more than a log "
            f"may ({span_s / _YEAR_S:.1f} years): raise the rate or lower the count"
        )
    timestamp_ms = start_ms + np.floor(arrival_ms).astype(np.int64)
    return SyntheticLog(prompt, output, timestamp_ms)


def _body_lengths(
    model: LengthModel, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Bivariate lognormal lengths (>= 1 token each), redrawn until prompt + output <= max_total."""
    prompt = np.empty(n, np.int64)
    output = np.empty(n, np.int64)
    todo = np.arange(n)
    while todo.size:
        z_prompt = rng.standard_normal(todo.size)
        z_output = model.log_correlation * z_prompt + np.sqrt(
            1 - model.log_correlation**2
        ) * rng.standard_normal(todo.size)
        p = _lengths(model.prompt_log_mean + model.prompt_log_sd * z_prompt)
        o = _lengths(model.output_log_mean + model.output_log_sd * z_output)
        prompt[todo], output[todo] = p, o
        todo = todo[p + o > model.max_total]  # truncation by rejection keeps the body's shape
    return prompt, output


def _tail_lengths(
    model: LengthModel, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Totals log-uniform in (tail_above, tail_max]; the output drawn as in the body, capped."""
    log_total = rng.uniform(np.log(model.tail_above + 1), np.log(model.tail_max), n)
    total = np.clip(
        np.round(np.exp(log_total)).astype(np.int64), model.tail_above + 1, model.tail_max
    )
    z = rng.standard_normal(n)
    output = np.minimum(_lengths(model.output_log_mean + model.output_log_sd * z), total // 2)
    return total - output, output


def _lengths(log_values: np.ndarray) -> np.ndarray:
    # Cap at 2**24 tokens (the largest histogram edge) so exp() never overflows int64.
    return np.clip(np.round(np.exp(np.minimum(log_values, 24 * np.log(2)))), 1, 2**24).astype(
        np.int64
    )


def synthetic_histogram(
    name: str, requests: int, seed: int, *, rate_rps: float | None = None
) -> Histogram:
    """The Histogram of `generate(name, requests, seed)`: what a scenario's named workload uses."""
    return generate(name, requests, seed, rate_rps=rate_rps).histogram()


def tail_share_above(log: SyntheticLog, total_tokens: int) -> float:
    """Share of requests with prompt + output > total_tokens."""
    total = log.prompt_tokens + log.output_tokens
    return float((total > total_tokens).mean()) if total.size else 0.0


LOG_FORMATS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "jsonl"}


def write_log(log: SyntheticLog, path: str | os.PathLike) -> None:
    """Write a synthetic log as Parquet, CSV or JSON Lines (by extension), atomically."""
    target = Path(path)
    fmt = LOG_FORMATS.get(target.suffix.lower())
    if fmt is None:
        raise InputError(
            f"unknown log extension '{target.suffix}'; expected one of {', '.join(LOG_FORMATS)}",
            where=str(path),
        )
    table = log.to_table()
    with atomic_output(target) as tmp:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            with open(tmp, "wb") as sink:  # an open file: pyarrow takes a path only as UTF-8 text
                pq.write_table(table, sink, compression="zstd")
        elif fmt == "csv":
            import pyarrow.csv as pacsv

            with open(tmp, "wb") as sink:
                pacsv.write_csv(table, sink)
        else:
            table.to_pandas().to_json(tmp, orient="records", lines=True)
