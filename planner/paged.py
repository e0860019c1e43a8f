"""Paged-memory expectation model: what a traffic class holds in cache, on average and in the tail.

A sequence of n tokens holds ceil(n / B) x B tokens of cache (blocks of B = 16 in
vLLM; seed 000 "with paging, a user who has sent 500 tokens holds about 32 blocks").
A request is resident from admission to its last token: ceil(p / C) steps while its
prompt is prefilled in chunks of C tokens (holding its prompt; the step that
finishes the prefill emits the first output token, as in vLLM), then one decode
step for each further output token k = 1..o-1, holding p + k tokens (the last
token is returned, never cached). By Little's law the mean
resident cache of a replica is arrival rate x E[memory-time of one request], which
needs the joint (prompt, output) distribution: E[o·p] and E[o²] as well as the means.
The histogram's exact per-cell sums supply them.

Exactness: the unpaged part of memory-time, sum over k of (p + k), is computed
from the exact sums; the block rounding and the prefill chunk count are evaluated
at each cell's mean lengths, so a histogram whose requests all have the same
lengths is reproduced exactly.

Sizing modes (design.md, "Paged expectation model"):
- worst_case: every resident sequence charged the context limit (the guarantee).
- expected: the time-weighted mean footprint (the seed's "about 191").
- percentile: resident sequences are Poisson (M/G/inf), footprints drawn from the
  time-weighted footprint distribution; the budget covers the chosen quantile of
  the compound-Poisson total, computed exactly on a byte grid by FFT.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Literal

import numpy as np

from planner.histogram import Histogram
from planner.memory import paged_tokens

SizingMode = Literal["worst_case", "expected", "percentile"]
SIZING_MODES: tuple[str, ...] = ("worst_case", "expected", "percentile")


def _ceil_sum(n: np.ndarray, block: int) -> np.ndarray:
    """sum_{m=1..n} ceil(m / block), exactly: block·q(q+1)/2 + r(q+1) with n = q·block + r."""
    n = np.asarray(n, dtype=np.int64)
    q, r = np.divmod(n, block)
    return block * q * (q + 1) // 2 + r * (q + 1)


def paged_token_steps(p: np.ndarray, o: np.ndarray, block: int) -> np.ndarray:
    """sum_{k=1..o} ceil((p+k)/block)·block: token-steps of cache a request holds while decoding."""
    return block * (_ceil_sum(p + o, block) - _ceil_sum(p, block))


def windowed_token_steps(p: np.ndarray, o: np.ndarray, block: int, window: int) -> np.ndarray:
    """sum_{k=1..o} min(ceil((p+k)/block)·block, window) for a sliding-window layer
    (window a multiple of block, as 4,096 is of 16): tokens past the window stop growing."""
    capped = block * (_ceil_sum(np.minimum(p + o, window), block) - _ceil_sum(np.minimum(p, window), block))
    return capped + window * np.maximum(0, p + o - np.maximum(p, window))


@dataclass(frozen=True, eq=False)
class TokenProfile:
    """A traffic class as the memory and step models see it, in tokens (dtype-free).

    Memory-time is in token-steps; dividing by steps_per_request gives the time-weighted
    footprint of a resident sequence. `level_weight[j]` is the time-weighted share of
    resident sequences holding j blocks (after the shared prefix), for percentile sizing.
    """

    requests: int
    block_size: int
    chunk_tokens: int
    shared_prefix_tokens: int
    shared_prefix_blocks: int
    mean_prompt: float
    mean_prompt_sq: float
    mean_output: float
    prompt_quantile: float
    prompt_quantile_tokens: float
    steps_per_request: float
    prefill_steps_per_request: float
    mean_paged_tokens: float  # full-attention layers, per resident sequence, time-weighted
    mean_window_tokens: float  # sliding-window layers, likewise (0 without a window)
    mean_context_tokens: float  # unpaged tokens attended over, time-weighted
    level_weight: np.ndarray  # pmf over blocks held, time-weighted
    cell_requests: np.ndarray  # requests per histogram cell
    cell_decode_steps: np.ndarray  # mean decode steps (output tokens - 1) of a request in each cell
    cell_prompt_tokens: np.ndarray  # exact mean prompt length of each cell
    cell_prompt_sq: np.ndarray  # exact mean of the squared prompt length of each cell
    max_total_tokens: int


PREFIX_DISAGREEMENT_SHARE = 0.01  # prompts no longer than the stated shared prefix a workload may hold


def prefix_disagreement(hist: Histogram, shared_prefix_tokens: int) -> str | None:
    """Why a shared prefix does not fit the workload, or None. Every prompt starts with the
    prefix, so a prompt no longer than it means the log and the prefix disagree: a few such
    prompts (health checks) are planned as the prefix alone; more than 1% of them is refused,
    since capacity would then be sized for prompts the log does not have."""
    if shared_prefix_tokens <= 0 or hist.is_empty:
        return None
    low = float(hist.quantiles("prompt", [PREFIX_DISAGREEMENT_SHARE])[0])
    if low > shared_prefix_tokens:
        return None
    return (f"a shared prefix of {shared_prefix_tokens:,} tokens is at least as long as {PREFIX_DISAGREEMENT_SHARE:.0%} "
            f"or more of the prompts (the 1st-percentile prompt has {low:,.0f} tokens); every prompt starts with "
            "the prefix, so the workload and the prefix disagree")


def token_profile(
    hist: Histogram,
    *,
    block_size: int = 16,
    chunk_tokens: int = 8192,
    sliding_window: int | None = None,
    shared_prefix_tokens: int = 0,
    prompt_quantile: float = 0.99,
) -> TokenProfile:
    """Summarise a histogram class for the paged-memory and step models (see module doc)."""
    if hist.is_empty:
        raise ValueError("empty traffic class")
    c = hist.count.astype(np.float64)
    n = float(c.sum())
    p_mean = np.rint(hist.sum_prompt / hist.count).astype(np.int64)
    o_mean = np.maximum(np.rint(hist.sum_output / hist.count).astype(np.int64), 1)
    o_dec = o_mean - 1  # decode steps after the prefill step that emits the first token
    shared_blocks = shared_prefix_tokens // block_size
    shared = shared_blocks * block_size
    p_held = np.maximum(p_mean - shared, 0)  # prefix blocks are held once per replica, not per sequence

    prefill_steps = np.maximum(1, -(-p_mean // chunk_tokens))
    # A request with no output (o = 0, output bin 0) still occupies its prefill steps: for
    # residence it counts as o = 1, the token the prefill step would emit, and decodes no step.
    no_output = hist.output_bin == 0
    sum_o = np.where(no_output, hist.count, hist.sum_output)
    sum_o2 = np.where(no_output, hist.count, hist.sum_output_sq)
    sum_po = np.where(no_output, hist.sum_prompt, hist.sum_prompt_output)
    # Exact unpaged decode memory-time from the sums: sum_{k=1..o-1} (p+k) = (o-1)·p + (o-1)·o/2.
    exact_linear = sum_po - hist.sum_prompt + (sum_o2 - sum_o) / 2.0
    at_mean_linear = c * (o_dec * p_mean + o_dec * o_mean / 2.0)
    # The same for the prefill residency: sum of p, exact, against c·p̄ at the rounded mean.
    variance_correction = exact_linear - at_mean_linear + prefill_steps * (hist.sum_prompt - c * p_mean)

    decode_steps = (sum_o - hist.count).astype(np.float64)
    steps = float((c * prefill_steps).sum() + decode_steps.sum())

    held_prompt = paged_tokens(p_held, block_size)
    full_steps = c * (paged_token_steps(p_held, o_dec, block_size) + prefill_steps * held_prompt)
    full_steps = full_steps + variance_correction
    if sliding_window:
        window = paged_tokens(np.int64(sliding_window), block_size)
        win_steps = c * (
            windowed_token_steps(p_held, o_dec, block_size, int(window))
            + prefill_steps * np.minimum(held_prompt, window)
        )
        mean_window = float(win_steps.sum()) / steps
    else:
        mean_window = 0.0
    context_steps = exact_linear + prefill_steps * hist.sum_prompt

    level_weight = _level_weights(p_held, o_dec, c, prefill_steps, block_size) / steps
    quantile = float(hist.quantiles("prompt", [prompt_quantile])[0])
    return TokenProfile(
        requests=int(n),
        block_size=block_size,
        chunk_tokens=chunk_tokens,
        shared_prefix_tokens=shared_prefix_tokens,
        shared_prefix_blocks=shared_blocks,
        mean_prompt=float(hist.sum_prompt.sum()) / n,
        mean_prompt_sq=float(hist.sum_prompt_sq.sum()) / n,
        mean_output=float(hist.sum_output.sum()) / n,
        prompt_quantile=prompt_quantile,
        prompt_quantile_tokens=quantile,
        steps_per_request=steps / n,
        prefill_steps_per_request=float((c * prefill_steps).sum()) / n,
        mean_paged_tokens=float(full_steps.sum()) / steps,
        mean_window_tokens=mean_window,
        mean_context_tokens=float(context_steps.sum()) / steps,
        level_weight=level_weight,
        cell_requests=c,
        cell_decode_steps=decode_steps / c,
        cell_prompt_tokens=hist.sum_prompt / c,
        cell_prompt_sq=hist.sum_prompt_sq / c,
        max_total_tokens=int((p_mean + o_mean).max()),
    )


def _level_weights(p, o, c, prefill_steps, block) -> np.ndarray:
    """Token-steps spent at each block count j: prefill at ceil(p/B), decode k=1..o at ceil((p+k)/B)
    (o here is the number of decode steps, one less than the output tokens).

    The decode steps at level j number G(j) - G(j-1) with G(j) = clip(j·B - p, 0, o):
    B for interior blocks, partial at the two ends. Built with difference arrays.
    """
    lo = -(-(p + 1) // block)  # level after the first decode token
    hi = -(-(p + o) // block)
    top = int(hi.max()) + 2
    weight = np.zeros(top + 1, np.float64)
    first = np.minimum(lo * block - p, o)  # steps at level lo
    last = np.where(hi > lo, p + o - (hi - 1) * block, 0)  # steps at level hi when distinct
    np.add.at(weight, lo, c * first)
    np.add.at(weight, hi, c * last)
    interior = np.zeros(top + 2, np.float64)
    has_interior = hi - lo >= 2
    np.add.at(interior, lo[has_interior] + 1, c[has_interior] * block)
    np.add.at(interior, hi[has_interior], -c[has_interior] * block)
    weight += np.cumsum(interior)[: top + 1]
    np.add.at(weight, -(-p // block), c * prefill_steps)
    return weight


# ---------------------------------------------------------------- compound Poisson


def compound_poisson_quantile(mean_count: float, size_pmf: np.ndarray, q: float) -> int:
    """Smallest s with P(S <= s) >= q, for S = X_1 + ... + X_M, M ~ Poisson(mean_count),
    X_i iid with P(X = k) = size_pmf[k] (k in grid units).

    The pmf of S comes from its generating function exp(mean_count·(phi(z) - 1))
    evaluated by FFT (Panjer's recursion gives the same numbers in O(n²)). Aliasing
    from the circular FFT is suppressed by exponential tilting: the pmf is multiplied
    by theta^k before the transform and divided after (Grübel & Hermesmeier 1999).
    """
    if mean_count <= 0:
        return 0
    return _CompoundPoisson(np.asarray(size_pmf, float), mean_count).quantile(mean_count, q)


@lru_cache(maxsize=8)
def _tilt(n: int) -> np.ndarray:
    """theta^k on an n-point grid, theta = e^(-20/n): tail mass tilted down by e^-20 at the wrap point
    (Grübel & Hermesmeier 1999). Read-only: one per grid size, shared by every size distribution (a
    power per point costs more than the transform that uses it)."""
    theta = math.exp(-20.0 / n)
    weights = theta ** np.arange(n)
    weights.flags.writeable = False
    return weights


class _CompoundPoisson:
    """The tilted transform of one size distribution, reused for many Poisson means <= max_mean."""

    def __init__(self, size_pmf: np.ndarray, max_mean: float):
        k = np.arange(size_pmf.size)
        mean_size = float(np.dot(k, size_pmf))
        second = float(np.dot(k * k, size_pmf))
        span = max_mean * mean_size + 12.0 * math.sqrt(max_mean * second) + size_pmf.size
        self.n = n = 1 << max(10, math.ceil(math.log2(span + 1)))
        self.tilt = _tilt(n)
        x = np.zeros(n)
        m = min(size_pmf.size, n)
        x[:m] = size_pmf[:m]
        self.phi_minus_1 = np.fft.rfft(x * self.tilt) - 1.0

    def _cdf(self, mean_count: float, points: int) -> np.ndarray:
        """P(S <= k) for k < points: the running sum of the pmf's first `points` values (the
        running sum of a prefix is the prefix of the running sum: the same floats however many)."""
        transform = mean_count * self.phi_minus_1
        pmf = np.fft.irfft(np.exp(transform, out=transform), self.n)[:points]
        pmf /= self.tilt[:points]
        return np.cumsum(np.maximum(pmf, 0.0, out=pmf), out=pmf)

    def quantile(self, mean_count: float, q: float) -> int:
        cdf = self._cdf(mean_count, self.n)
        return int(min(np.searchsorted(cdf, q - 1e-12, side="left"), self.n - 1))

    def within(self, mean_count: float, q: float, limit_units: float) -> bool:
        """quantile(mean_count, q) <= limit_units, from the cdf up to the limit only: the cdf, a running
        sum of non-negative terms, rises, so the quantile is within the limit exactly where the cdf
        at the limit reaches q. A bisection asks this a dozen times of a total whose grid reaches
        2-8 times past the limit."""
        top = math.floor(limit_units)
        if top < 0:
            return False
        if top >= self.n - 1:
            return True
        return bool(self._cdf(mean_count, top + 1)[-1] >= q - 1e-12)


def max_mean_count_for_quantile(size_pmf: np.ndarray, q: float, limit_units: float) -> float:
    """Largest Poisson mean N with the q-quantile of the compound total <= limit_units.

    The quantile is non-decreasing in N. A normal approximation gives a first guess
    (N·m + z·sqrt(N·s) = limit, m and s the first two moments of a footprint); the
    exact quantile then brackets the answer around it and bisection narrows the
    bracket to a relative width of 1e-3. The guess only saves iterations: every
    decision is taken on the exact (FFT) quantile.
    """
    size_pmf = np.asarray(size_pmf, float)
    k = np.arange(size_pmf.size)
    m = float(np.dot(k, size_pmf))
    if m <= 0 or limit_units <= 0:
        return 0.0
    s2 = float(np.dot(k * k, size_pmf))
    upper = limit_units / m  # at N·m = limit the median already reaches the limit
    cp = _CompoundPoisson(size_pmf, upper)
    if cp.within(upper, q, limit_units):
        return upper

    def fits(n: float) -> bool:
        return cp.within(n, q, limit_units)

    z = NormalDist().inv_cdf(q)
    root = (-z * math.sqrt(s2) + math.sqrt(z * z * s2 + 4 * m * limit_units)) / (2 * m)
    guess = min(max(root * root, 1e-9), upper)
    lo, hi = 0.0, upper
    step = 0.02 * guess
    if fits(guess):
        lo = guess
        while lo + step < hi and fits(lo + step):
            lo, step = lo + step, step * 2
        hi = min(hi, lo + step)
    else:
        hi = guess
        while hi - step > 0 and not fits(hi - step):
            hi, step = hi - step, step * 2
        lo = max(0.0, hi - step)
    while hi - lo >= 1e-3 * max(hi, 1.0):
        mid = 0.5 * (lo + hi)
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo
