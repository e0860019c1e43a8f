"""Requests to replay through the simulator: a log's own, or drawn from a histogram.

A log's requests keep their arrival times (trace-timed replay); requests drawn from a
Histogram get Poisson arrivals at a rate (`sample_requests`), and can be rescaled to
another rate with the same lengths (common random numbers across a bisection).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.histogram import LENGTH_EDGES, Histogram


@dataclass(frozen=True, eq=False)
class Requests:
    """Requests sorted by arrival: arrival time (s), prompt and output tokens.

    `poisson_rate_rps` is set when the arrivals are a Poisson process at that rate, so
    `at_rate` can rescale them (common random numbers across the rates a bisection tries).
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    poisson_rate_rps: float | None = None

    def __post_init__(self):
        a = np.asarray(self.arrival_s, dtype=np.float64)
        p = np.asarray(self.prompt_tokens, dtype=np.int64)
        o = np.asarray(self.output_tokens, dtype=np.int64)
        if not (a.shape == p.shape == o.shape) or a.ndim != 1:
            raise ValueError("arrival_s, prompt_tokens and output_tokens must be 1-D arrays of one length")
        if a.size == 0:
            raise ValueError("no requests to simulate")
        if (p < 1).any() or (o < 1).any():
            raise ValueError("every request needs at least 1 prompt token and 1 output token")
        if not np.isfinite(a).all() or (a < 0).any():
            raise ValueError("arrival times must be finite and >= 0")
        order = np.argsort(a, kind="stable")
        object.__setattr__(self, "arrival_s", a[order])
        object.__setattr__(self, "prompt_tokens", p[order])
        object.__setattr__(self, "output_tokens", o[order])

    @property
    def n(self) -> int:
        return int(self.arrival_s.size)

    def at_rate(self, rate_rps: float) -> Requests:
        """The same requests with Poisson arrivals rescaled to `rate_rps` (same lengths, same order)."""
        if self.poisson_rate_rps is None:
            raise ValueError("only Poisson-sampled requests can be rescaled to another rate")
        if rate_rps <= 0:
            raise ValueError("rate must be positive")
        scale = self.poisson_rate_rps / rate_rps
        return Requests(self.arrival_s * scale, self.prompt_tokens, self.output_tokens, rate_rps)


def sample_lengths(hist: Histogram, n_requests: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Draw (prompt, output) lengths from a histogram.

    Method: a cell is drawn with probability count / total; inside the cell each length
    is uniform on the cell's exact mean ± sd·√3 (sd from the per-cell sums of x and x²:
    the cell's variance), the half-width narrowed where needed so the interval stays
    inside the cell's bin while centred on the mean, then rounded. Quarter-octave bins
    are narrow (±9%), so the within-cell shape hardly matters: E[p] and E[o] match the
    histogram exactly in expectation, E[p²] and E[o²] to within the narrowing. Prompt and
    output are drawn independently inside a cell (the joint shape across cells is kept).
    A cell whose requests all have one length reproduces it exactly.
    """
    if hist.is_empty:
        raise ValueError("empty histogram")
    count = hist.count.astype(np.float64)
    cells = rng.choice(count.size, size=n_requests, p=count / count.sum())
    prompt = _within_cell(hist.sum_prompt, hist.sum_prompt_sq, count, hist.prompt_bin, cells, rng)
    output = _within_cell(hist.sum_output, hist.sum_output_sq, count, hist.output_bin, cells, rng)
    return np.maximum(prompt, 1), np.maximum(output, 1)


def _within_cell(sums, sums_sq, count, bins, cells, rng) -> np.ndarray:
    mean = sums / count
    sd = np.sqrt(np.maximum(sums_sq / count - mean * mean, 0.0))
    edges = np.append(LENGTH_EDGES, LENGTH_EDGES[-1] * 2)
    lo = edges[bins] - 0.5
    hi = edges[bins + 1] - 0.5  # a value v rounds into the bin when lo <= v < hi
    # Uniform on mean ± half, half = sd·√3 (the cell's variance), narrowed to stay
    # inside the bin and symmetric around the mean, so the mean is kept exactly.
    half = np.clip(np.minimum.reduce([sd * math.sqrt(3.0), mean - lo, hi - mean]), 0.0, None)
    u = rng.uniform(-1.0, 1.0, size=cells.size)
    x = np.floor(mean[cells] + half[cells] * u + 0.5)
    return np.clip(x, edges[bins[cells]], edges[bins[cells] + 1] - 1).astype(np.int64)


def shortest_prompt_tokens(shared_prefix_tokens: int, block_size: int) -> int:
    """Every prompt starts with the shared prefix, and the engine caches only its full blocks:
    a prompt is at least those blocks plus one token of its own (a log or histogram that
    disagrees with the scenario's prefix is lengthened to this, as the model charges it)."""
    return (shared_prefix_tokens // block_size) * block_size + 1 if shared_prefix_tokens > 0 else 1


def sample_requests(
    hist: Histogram, rate_rps: float, n_requests: int, seed: int = 0, *, max_total_tokens: int | None = None,
    min_prompt_tokens: int = 1,
) -> Requests:
    """`n_requests` requests with lengths from `hist` (see sample_lengths) and Poisson arrivals
    at `rate_rps` (exponential gaps; the first arrives after one gap). Requests longer than
    `max_total_tokens` have their output trimmed to fit (the engine would reject them);
    prompts shorter than `min_prompt_tokens` (a shared prefix every prompt starts with, plus
    one token) are lengthened to it."""
    if n_requests < 1:
        raise ValueError("n_requests must be >= 1")
    if rate_rps <= 0:
        raise ValueError("rate must be positive")
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0, n_requests)) / rate_rps
    prompt, output = sample_lengths(hist, n_requests, rng)
    prompt = np.maximum(prompt, min_prompt_tokens)
    if max_total_tokens is not None:
        prompt = np.minimum(prompt, max_total_tokens - 1)
        output = np.clip(output, 1, max_total_tokens - prompt)
    return Requests(arrival, prompt, output, float(rate_rps))
