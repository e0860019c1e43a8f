"""Discrete-step simulation of one replica: continuous batching over a paged KV cache.

This is the check on planner.capacity: the analytical model reasons about means
(Little's law, a time-weighted footprint, a Pollaczek-Khinchine wait); the
simulator replays individual requests through a vLLM-style scheduler with the
same step-time physics and measures what actually happens.

Inputs: a Deployment, and requests (arrival s, prompt and output tokens) either
sampled from a Histogram with Poisson arrivals (`sample_requests`) or taken from a
log as they are (`Requests(arrival_s, prompt_tokens, output_tokens)`, trace-timed);
the KV budget is the ladder's (or given), in blocks of `engine.block_size` tokens.

Scheduler (one iteration = one engine step; vLLM v0 chunked-prefill scheduler,
vllm/core/scheduler.py `_schedule_chunked_prefill`, with recompute preemption):
1. Decode. Every running sequence whose prompt is fully prefilled decodes one
   token; each takes one token of the step's budget (`max_num_batched_tokens`)
   first. A sequence holding c cached tokens needs block ceil((c+1)/B) for the
   token it writes, a new block when c is a multiple of B.
2. Preemption. If the new blocks needed exceed the free blocks, the newest
   running sequence (latest admission) is preempted, repeatedly, until they fit:
   its blocks are freed and it goes back to the head of the waiting queue; its
   generated tokens become part of its prompt, recomputed when it is admitted
   again (vLLM's PreemptionMode.RECOMPUTE). No new request is admitted in a step
   that preempted (as vLLM v0).
3. Prefill. Sequences admitted earlier and still prefilling get the remaining
   budget in admission order, in chunks of at most the engine's
   long_prefill_token_threshold when it sets one (vLLM, v1/core/sched/scheduler.py:
   `if 0 < long_prefill_token_threshold < num_new_tokens`); then waiting requests are admitted
   FCFS (no skipping) while the budget lasts, fewer than `max_num_seqs` run, and
   the free blocks minus the whole prompt's blocks stay at or above the
   watermark (vLLM v0 BlockSpaceManager: allocation of the full prompt at
   admission, watermark 1% of blocks by default).
4. The step that computes the last prompt chunk emits the first output token
   (TTFT = its end - arrival); a request of o output tokens then decodes o - 1
   steps. Its blocks are freed at its last token.

Step time mirrors planner.capacity's composition (its module docstring):
    t = StepModel.decode_step_s(d, cache_bytes, context_tokens)              decode part
      + prefill_flops(chunk) / flops_s + all-reduce bytes of the chunk tokens  prefill part
with d the decoding sequences, cache_bytes their paged cache (blocks x bytes per
block, plus the shared prefix each reads) and context_tokens their attended
tokens. A chunk covering prompt tokens [a, b) costs 2·A·(b - a) + attn·(b² - a²)/2
FLOPs, so a prompt's chunks add up to exactly StepModel.prefill_s(p, p²). The
batch-size terms (weights, MoE experts, overhead, all-reduce) are tabulated once
(see _Costs, which checks itself against StepModel.decode_step_s).

Speed: per-step work is O(1) amortised, with no loop over sequences. A decoding
sequence's cached tokens are c = step + off (one offset per sequence, fixed while
it decodes), so the blocks needed this step are the count of decoders with
off ≡ -step (mod B) (a table of B residue counts), the attended tokens are
n·(step + 1) + Σoff, and completion steps sit in a heap. Loops run only over
events: arrivals, admissions, prefill chunks, completions and preemptions. The loop
itself is compiled (planner.sim_kernel).

Measures (`SimResult`): the first `warmup_fraction` of requests (by arrival) is
the warm-up; the measurement window runs from the arrival of the first measured
request to the last arrival (the drain after it is excluded). Time-weighted means
(resident sequences, KV utilisation) and ITL are taken over the steps that start
in the window; TTFT over the measured requests. ITL samples are per-token gaps:
every decode token's gap is its step's duration, and a preempted request's first
token after recompute adds the gap since its last token before preemption.

Not modelled: sliding-window layers are charged as full-attention layers (one block
pool); swapping to CPU; speculative decoding; prefix caching beyond one shared prefix.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from planner.capacity import NO_TARGETS, OperatingPoint, ReplicaModel, replica_capacity
from planner.deployment import Deployment
from planner.histogram import LENGTH_EDGES, Histogram
from planner.memory import (
    budget_ladder,
    kv_bytes_for_tokens,
    kv_state_bytes_per_sequence,
    kv_token_cap,
)
from planner.paged import TokenProfile, token_profile
from planner.roofline import StepModel
from planner.targets import SLO, Band, statistic_quantile

DEFAULT_WARMUP_FRACTION = 0.1
DEFAULT_WATERMARK = 0.01  # vLLM v0 BlockSpaceManager watermark: 1% of the blocks kept free at admission
STABILITY_TOLERANCE = 0.02  # the backlog may grow by 2% of the arrival rate (least-squares trend)

# Keys a report shows side by side: predicted (planner.capacity) and simulated.
COMPARE_KEYS = (
    "rate_rps",
    "resident_batch",
    "kv_utilisation",
    "itl_ms_mean",
    "preemptions_per_1000",
)
PREEMPTION_BUDGET_PER_1000 = 10.0  # preemptions per 1,000 requests a replica may take and still hold the load


# ---------------------------------------------------------------------- requests


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


# ----------------------------------------------------------------------- results


@dataclass(frozen=True, eq=False)
class RequestLatencies:
    """Per-request latencies of the measured requests, and the per-token gaps, of one run.

    TTFT = first token - arrival; TPOT = (last token - first token) / (output tokens - 1)
    (vLLM's benchmark_serving and MLPerf), NaN for one-token outputs; gaps are the steps'
    durations weighted by the tokens they emitted (planner.targets)."""

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    gaps: GapDistribution

    def of(self, band: Band, kind: str) -> np.ndarray:
        """The band's TTFT or TPOT samples (seconds), NaN-free."""
        values = (self.ttft_s if kind == "ttft" else self.tpot_s)[band.holds(self.prompt_tokens)]
        return values[np.isfinite(values)]

    def statistic(self, band: Band, kind: str, stat: str) -> float:
        """The band's TTFT, TPOT or per-token ITL (seconds) at a statistic; NaN without samples.
        Percentiles interpolate linearly between order statistics (numpy's default, as vLLM's
        benchmark reports them); ITL is over every decode token of the replica."""
        q = statistic_quantile(stat)
        if kind == "itl":
            return self.gaps.mean_s if q is None else self.gaps.quantile(q)
        values = self.of(band, kind)
        if values.size == 0:
            return math.nan
        return float(values.mean()) if q is None else float(np.quantile(values, q))

    def requests_in(self, band: Band) -> int:
        return int(np.count_nonzero(band.holds(self.prompt_tokens)))

    def meets(self, band: Band) -> np.ndarray:
        """Mask of the measured requests that are in the band and meet both its TTFT and TPOT limits."""
        good = band.holds(self.prompt_tokens)
        if band.ttft is not None:
            good = good & (self.ttft_s <= band.ttft.limit_s)
        if band.tpot is not None:
            good = good & ~(self.tpot_s > band.tpot.limit_s)  # a one-token output has no TPOT to miss
        return good

    def attainment(self, slo: SLO, band: Band | None = None) -> float:
        """Share of measured requests (of one band, or all) meeting both their band's TTFT and TPOT limits."""
        bands = slo.bands if band is None else (band,)
        ok = np.zeros(self.prompt_tokens.size, bool)
        for b in bands:
            ok |= self.meets(b)
        total = self.prompt_tokens.size if band is None else self.requests_in(band)
        return float(ok.sum() / total) if total else math.nan


def merged_latencies(parts: list[RequestLatencies]) -> RequestLatencies:
    """The requests and gaps of several replicas' runs as one sample."""
    return RequestLatencies(
        *(np.concatenate([getattr(p, f) for p in parts]) for f in ("prompt_tokens", "output_tokens", "ttft_s", "tpot_s")),
        GapDistribution.merged([p.gaps for p in parts]),
    )


@dataclass(frozen=True)
class SimResult:
    """What one replica did with the requests (module docstring: window and definitions)."""

    rate_rps: float  # offered: arrivals in the window / window length
    throughput_rps: float  # completions in the window / window length
    output_tokens_per_s: float  # tokens emitted in the window / window length
    resident_batch: float  # time-weighted mean of running sequences (admitted, not finished)
    decode_batch: float  # time-weighted mean of sequences decoding in a step
    waiting: float  # time-weighted mean of the waiting queue
    kv_utilisation: float  # time-weighted mean of held cache bytes / KV budget bytes
    kv_utilisation_p99: float  # time-weighted 99th percentile of the same
    itl_ms_mean: float  # per-token gaps, token-weighted
    itl_ms_p50: float
    itl_ms_p99: float
    ttft_ms_mean: float
    ttft_ms_p50: float
    ttft_ms_p99: float
    step_ms_mean: float  # time per step (unweighted)
    prefill_share: float  # fraction of window time spent on prefill chunks
    preemptions: int  # in the window
    preemptions_per_1000: float  # preemptions in the window per 1,000 arrivals in the window
    stable: bool  # backlog_growth <= STABILITY_TOLERANCE
    backlog_growth: float  # trend of requests in the system (requests/s) / arrival rate, over the window
    steps: int  # all steps, warm-up and drain included
    requests: int
    measured_requests: int
    simulated_s: float  # simulated time until the last request finished
    wall_s: float
    total_blocks: int
    block_bytes: int
    kv_budget_bytes: int
    notes: tuple[str, ...] = field(default_factory=tuple)
    latencies: RequestLatencies | None = field(default=None, repr=False, compare=False)

    def compare_view(self) -> dict[str, float | None]:
        """The COMPARE_KEYS of this result (what `predicted_point` gives for the model)."""
        return {k: getattr(self, k) for k in COMPARE_KEYS}


@dataclass(frozen=True)
class Trace:
    """Per-request and per-step records of one run, for tests and diagnostics."""

    first_token_s: np.ndarray  # end of the step that emitted the first token (nan if never)
    finish_s: np.ndarray  # end of the step that emitted the last token
    preemptions: np.ndarray  # times each request was preempted
    admissions: np.ndarray  # times each request was admitted (1 + its preemptions)
    step_start_s: np.ndarray
    step_s: np.ndarray
    step_running: np.ndarray  # after admissions, before completions
    step_decoding: np.ndarray
    step_used_blocks: np.ndarray  # after this step's allocations (shared prefix excluded)
    step_prefill_tokens: np.ndarray
    step_prefill_s: np.ndarray  # the prefill part of the step time
    step_waiting: np.ndarray
    preemption_steps: np.ndarray  # step index of each preemption
    resume_gaps_s: np.ndarray  # gap before the first token after each recompute
    resume_steps: np.ndarray  # step index that emitted that token
    free_blocks_at_end: int
    total_blocks: int


# ------------------------------------------------------------------- step costs


@dataclass(frozen=True)
class _Costs:
    """Step-time coefficients of one deployment, tabulated so a step costs a few float ops.

    decode_step_s(d, cache, ctx) = fixed[d] + max(cache / bandwidth, attn · ctx / FLOP/s),
    with fixed[d] = decode_step_s(d, 0, 0) (weights/GEMMs, overhead, all-reduce): the
    roofline per phase of planner.roofline. The prefill part of a step is its FLOPs at the
    effective rate plus the all-reduce bytes of its tokens (linear in them). `of` checks the
    form against StepModel on a grid of points from tiny batches to far past the ridge point,
    and refuses a step model it no longer reproduces (a change to planner.roofline must be
    carried into the simulator's loop, planner.sim_kernel).
    """

    fixed_s: np.ndarray
    bandwidth: float
    flops_s: float
    two_active: float
    attn: float
    comm_per_token_s: float

    @classmethod
    def of(cls, dep: Deployment, max_batch: int) -> _Costs:
        step = StepModel.of(dep)
        d = np.arange(max_batch + 1, dtype=np.float64)
        fixed = np.asarray(step.decode_step_s(d, np.zeros_like(d), np.zeros_like(d)), dtype=np.float64)
        costs = cls(
            fixed_s=fixed,
            bandwidth=step.bandwidth_bytes_s,
            flops_s=step.flops_s,
            two_active=2.0 * step.params_active,
            attn=step.attn_flops_per_ctx_token,
            comm_per_token_s=float(step.allreduce_s(1.0, with_latency=False)),
        )
        rng = np.random.default_rng(0)
        b = rng.integers(0, max_batch + 1, 64)
        ctx = b * rng.uniform(1.0, 2.0e5, 64)
        cache = ctx * rng.uniform(1.0e3, 1.0e6, 64)
        want = np.asarray(step.decode_step_s(b.astype(float), cache, ctx), dtype=np.float64)
        got = fixed[b] + np.maximum(cache / costs.bandwidth, costs.attn * ctx / costs.flops_s)
        tokens = rng.integers(1, 100_000, 16).astype(float)
        if not (np.allclose(got, want, rtol=1e-9, atol=0.0) and np.allclose(
                tokens * costs.comm_per_token_s, step.allreduce_s(tokens, with_latency=False), rtol=1e-9, atol=0.0)):
            raise RuntimeError("planner.roofline.StepModel no longer has the step-time form the simulator's loop "
                               "computes (planner.simulate._Costs): carry the change into planner.sim_kernel")
        return costs


# --------------------------------------------------------------------- simulator


def simulate_replica(
    dep: Deployment,
    requests: Requests,
    *,
    kv_budget_bytes: int | None = None,
    shared_prefix_tokens: int = 0,
    watermark: float = DEFAULT_WATERMARK,
    warmup_fraction: float = DEFAULT_WARMUP_FRACTION,
    trace: bool = False,
) -> SimResult | tuple[SimResult, Trace]:
    """Replay `requests` through one replica of `dep` (module docstring: scheduler, step time, measures).

    kv_budget_bytes: the cache budget (default: the deployment's budget ladder); it holds
    kv_budget_bytes // bytes-per-block blocks of `dep.block_size` tokens.
    shared_prefix_tokens: a prefix every prompt shares (system prompt); its full blocks are
    held once and skipped in prefill (prefix caching), as in planner.paged.
    The scheduler is deterministic given the requests; randomness lives in `sample_requests`.
    trace: also return a Trace of per-request and per-step records.
    """
    if not 0.0 <= warmup_fraction < 1.0:
        raise ValueError("warmup_fraction must be in [0, 1)")
    engine = dep.engine
    block = int(dep.block_size)
    budget_bytes = int(budget_ladder(dep).kv_budget_bytes if kv_budget_bytes is None else kv_budget_bytes)
    block_bytes = int(kv_bytes_for_tokens(dep.model, block, dep.kv_dtype, dep.tp))
    shared_blocks = max(int(shared_prefix_tokens), 0) // block
    shared = shared_blocks * block
    shared_bytes = shared_blocks * block_bytes
    total_blocks = budget_bytes // block_bytes - shared_blocks
    watermark_blocks = int(watermark * (budget_bytes // block_bytes))
    notes = []
    if kv_token_cap(dep.model):
        notes.append("sliding-window and chunked layers are charged as full-attention layers (the simulator pages one pool)")
    if kv_state_bytes_per_sequence(dep.model):
        notes.append("the fixed per-sequence state of linear-attention / state-space layers is not charged (blocks only)")

    if shared and int(requests.prompt_tokens.min()) <= shared:
        raise ValueError(
            f"a prompt of {int(requests.prompt_tokens.min())} tokens is not longer than the shared prefix "
            f"({shared} tokens in full blocks); every prompt must start with the prefix"
        )
    longest = int(np.max(requests.prompt_tokens + requests.output_tokens - 1))
    need_max = -(-max(longest - shared, 1) // block)
    if need_max > total_blocks - watermark_blocks:
        raise ValueError(
            f"a request of {longest + 1} tokens needs {need_max} blocks; the KV budget holds "
            f"{total_blocks} (watermark {watermark_blocks})"
        )
    if total_blocks <= 0:
        raise ValueError("the KV budget holds no block beyond the shared prefix")

    max_seqs = int(engine.max_num_seqs)
    costs = _Costs.of(dep, max_seqs)
    from planner.sim_kernel import run  # numba loads only when a replica is simulated

    wall0 = time.perf_counter()
    (first_tok, finish, n_preempt, n_admit, rec_start, rec_dt, rec_run, rec_dec, rec_used, rec_pf, rec_pf_s,
     rec_wait, preempt_steps, resume_gaps, resume_steps, free_at_end) = run(
        requests.arrival_s, requests.prompt_tokens, requests.output_tokens, block, total_blocks, watermark_blocks,
        shared, max_seqs, int(engine.max_num_batched_tokens),
        # vLLM's long_prefill_token_threshold: no request takes more prompt tokens than this in a step
        int(engine.long_prefill_token_threshold or engine.max_num_batched_tokens),
        costs.fixed_s, costs.bandwidth, costs.flops_s, costs.two_active, costs.attn,
        block_bytes, shared_bytes, costs.comm_per_token_s,
    )
    wall = time.perf_counter() - wall0
    tr = Trace(
        first_token_s=first_tok,
        finish_s=finish,
        preemptions=n_preempt,
        admissions=n_admit,
        step_start_s=rec_start,
        step_s=rec_dt,
        step_running=rec_run,
        step_decoding=rec_dec,
        step_used_blocks=rec_used,
        step_prefill_tokens=rec_pf,
        step_prefill_s=rec_pf_s,
        step_waiting=rec_wait,
        preemption_steps=preempt_steps,
        resume_gaps_s=resume_gaps,
        resume_steps=resume_steps,
        free_blocks_at_end=int(free_at_end),
        total_blocks=total_blocks,
    )
    result = _measure(
        requests, tr, warmup_fraction, wall,
        block_bytes=block_bytes, shared_bytes=shared_bytes, budget_bytes=budget_bytes, notes=tuple(notes),
    )
    return (result, tr) if trace else result


GAP_BIN_RATIO = 1.001  # per-token gaps are binned 0.1% wide on a log scale: a run has millions of steps


@dataclass(frozen=True, eq=False)
class GapDistribution:
    """Token-weighted step durations on a log grid (bins GAP_BIN_RATIO wide from 1 µs), with the
    exact weighted mean. Quantiles are exact to a bin (0.1%); sorting millions of steps is not needed."""

    bins: np.ndarray  # occupied bin indices, increasing
    cum_weight: np.ndarray  # cumulative weight over them
    mean_s: float

    @classmethod
    def of(cls, gaps_s: np.ndarray, weights: np.ndarray) -> GapDistribution:
        keep = (weights > 0) & (gaps_s > 0)
        g, w = gaps_s[keep], weights[keep]
        if not g.size:
            return cls(np.zeros(0, np.int64), np.zeros(0), math.nan)
        k = np.floor(np.log(g / 1e-6) / math.log(GAP_BIN_RATIO)).astype(np.int64)
        low = int(k.min())
        counts = np.bincount(k - low, weights=w)
        occupied = np.flatnonzero(counts)
        return cls(occupied + low, np.cumsum(counts[occupied]), float(np.dot(g, w) / w.sum()))

    @classmethod
    def merged(cls, parts: list[GapDistribution]) -> GapDistribution:
        bins = np.concatenate([p.bins for p in parts])
        weights = np.concatenate([np.diff(p.cum_weight, prepend=0.0) for p in parts])
        if not bins.size:
            return cls(bins, weights, math.nan)
        unique, index = np.unique(bins, return_inverse=True)
        cum = np.cumsum(np.bincount(index, weights=weights))
        mean = sum(p.mean_s * p.cum_weight[-1] for p in parts if p.cum_weight.size) / cum[-1]
        return cls(unique, cum, float(mean))

    def quantile(self, q: float) -> float:
        """Smallest gap with (weight at or below it) >= q · total, at its bin's geometric middle."""
        if not self.bins.size:
            return math.nan
        i = min(int(np.searchsorted(self.cum_weight, q * self.cum_weight[-1], side="left")), self.bins.size - 1)
        return 1e-6 * GAP_BIN_RATIO ** (self.bins[i] + 0.5)


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """Smallest v with (weight of samples <= v) >= q · total weight."""
    keep = weights > 0
    values, weights = values[keep], weights[keep]
    if not values.size:
        return math.nan
    order = np.argsort(values)
    cum = np.cumsum(weights[order])
    return float(values[order][min(int(np.searchsorted(cum, q * cum[-1], side="left")), values.size - 1)])


def _measure(req: Requests, tr: Trace, warmup_fraction: float, wall: float, *,
             block_bytes: int, shared_bytes: int, budget_bytes: int, notes: tuple[str, ...]) -> SimResult:
    n = req.n
    cut = min(math.ceil(warmup_fraction * n), n - 1)
    t0 = float(req.arrival_s[cut])
    t1 = float(req.arrival_s[-1])
    if t1 <= t0:  # a single burst: measure over all steps
        t1 = float(tr.step_start_s[-1] + tr.step_s[-1]) if tr.step_s.size else t0
    span = max(t1 - t0, 1e-12)
    start, dt = tr.step_start_s, tr.step_s
    win = (start >= t0) & (start < t1)
    w = dt[win]
    wsum = float(w.sum())

    def tmean(x: np.ndarray) -> float:
        return float(np.dot(x[win], w) / wsum) if wsum > 0 else math.nan

    util = (tr.step_used_blocks * block_bytes + shared_bytes) / budget_bytes
    dec = tr.step_decoding[win]
    resumed = tr.resume_gaps_s[win[tr.resume_steps]] if tr.resume_steps.size else tr.resume_gaps_s
    gaps = GapDistribution.of(np.concatenate([w, resumed]), np.concatenate([dec.astype(np.float64), np.ones(resumed.size)]))
    firsts = np.sum((tr.first_token_s >= t0) & (tr.first_token_s < t1))
    tokens_out = float(dec.sum()) + float(firsts) + float(resumed.size)
    ttft = (tr.first_token_s - req.arrival_s)[cut:]
    ttft = ttft[np.isfinite(ttft)]
    arrived_in = int(np.sum((req.arrival_s >= t0) & (req.arrival_s <= t1)))
    done_in = int(np.sum((tr.finish_s >= t0) & (tr.finish_s < t1)))
    # Backlog trend: least-squares slope of requests in the system (arrived - finished)
    # against time over the window's steps, as a fraction of the arrival rate.
    in_system = np.searchsorted(req.arrival_s, start[win], side="right") - np.searchsorted(
        np.sort(tr.finish_s[np.isfinite(tr.finish_s)]), start[win], side="right"
    )
    growth = 0.0
    if in_system.size > 2 and wsum > 0:
        ts = start[win]
        tc = ts - np.dot(ts, w) / wsum
        var = float(np.dot(tc * tc, w))
        slope = float(np.dot(tc, in_system * w)) / var if var > 0 else 0.0
        growth = slope / max(arrived_in / span, 1e-12)
    preempt_in = int(np.sum(win[tr.preemption_steps])) if tr.preemption_steps.size else 0
    used_win = tr.step_used_blocks[win]
    used_weight = np.bincount(used_win, weights=w) if used_win.size else np.zeros(1)
    used_p99 = int(np.searchsorted(np.cumsum(used_weight), 0.99 * used_weight.sum(), side="left"))
    return SimResult(
        rate_rps=arrived_in / span,
        throughput_rps=done_in / span,
        output_tokens_per_s=tokens_out / span,
        resident_batch=tmean(tr.step_running.astype(np.float64)),
        decode_batch=tmean(tr.step_decoding.astype(np.float64)),
        waiting=tmean(tr.step_waiting.astype(np.float64)),
        kv_utilisation=tmean(util),
        kv_utilisation_p99=(used_p99 * block_bytes + shared_bytes) / budget_bytes if wsum > 0 else math.nan,
        itl_ms_mean=gaps.mean_s * 1e3,
        itl_ms_p50=gaps.quantile(0.50) * 1e3,
        itl_ms_p99=gaps.quantile(0.99) * 1e3,
        ttft_ms_mean=float(ttft.mean()) * 1e3 if ttft.size else math.nan,
        ttft_ms_p50=float(np.quantile(ttft, 0.50)) * 1e3 if ttft.size else math.nan,
        ttft_ms_p99=float(np.quantile(ttft, 0.99)) * 1e3 if ttft.size else math.nan,
        step_ms_mean=float(w.mean()) * 1e3 if w.size else math.nan,
        prefill_share=float(tr.step_prefill_s[win].sum()) / wsum if wsum > 0 else math.nan,
        preemptions=preempt_in,
        preemptions_per_1000=1000.0 * preempt_in / max(arrived_in, 1),
        stable=growth <= STABILITY_TOLERANCE,
        backlog_growth=growth,
        steps=int(dt.size),
        requests=n,
        measured_requests=n - cut,
        simulated_s=float(np.nanmax(tr.finish_s)),
        wall_s=wall,
        total_blocks=tr.total_blocks,
        block_bytes=block_bytes,
        kv_budget_bytes=budget_bytes,
        notes=notes,
        latencies=RequestLatencies(
            prompt_tokens=req.prompt_tokens[cut:],
            output_tokens=req.output_tokens[cut:],
            ttft_s=(tr.first_token_s - req.arrival_s)[cut:],
            tpot_s=np.where(req.output_tokens[cut:] > 1,
                            (tr.finish_s - tr.first_token_s)[cut:] / np.maximum(req.output_tokens[cut:] - 1, 1), np.nan),
            gaps=gaps,
        ),
    )


# ------------------------------------------------------------- analytical side


def profile_for(dep: Deployment, hist: Histogram, *, shared_prefix_tokens: int = 0) -> TokenProfile:
    """The class profile planner.capacity uses, with this deployment's block size and chunk budget."""
    return token_profile(
        hist,
        block_size=dep.block_size,
        chunk_tokens=dep.engine.max_num_batched_tokens,
        sliding_window=kv_token_cap(dep.model),
        shared_prefix_tokens=shared_prefix_tokens,
    )


def predicted_point(
    dep: Deployment,
    prof: TokenProfile | Histogram,
    rate_rps: float,
    slo: SLO | None = None,
    *,
    kv_budget_bytes: int | None = None,
) -> dict[str, float | None]:
    """The analytical mean model at `rate_rps`, with COMPARE_KEYS (None where it predicts nothing).

    N from ReplicaModel.resident_for_rate (Little's law fixed point), then
    ReplicaModel.point(N); expected sizing has no preemption figure. Latency percentiles
    per band are planner.latency's (planner.certify puts them beside the simulator's).
    """
    ladder = budget_ladder(dep)
    if kv_budget_bytes is not None:
        from dataclasses import replace

        from planner.units import GiB

        ladder = replace(ladder, kv_budget_gib=kv_budget_bytes / GiB)
    rm = ReplicaModel(dep, prof, slo or NO_TARGETS, ladder)
    n = rm.resident_for_rate(rate_rps, float(dep.engine.max_num_seqs))
    if n is None:
        return {"rate_rps": rate_rps, **dict.fromkeys(COMPARE_KEYS[1:])}
    return point_view(rm.point(n))


def point_view(pt: OperatingPoint) -> dict[str, float | None]:
    """An analytical operating point as COMPARE_KEYS (None where the model predicts nothing)."""
    return {
        "rate_rps": pt.rate_rps,
        "resident_batch": pt.resident_batch,
        "kv_utilisation": pt.kv_utilisation,
        "itl_ms_mean": pt.itl_ms,
        "preemptions_per_1000": None,
    }


# ------------------------------------------------------ maximum sustainable rate


@dataclass(frozen=True)
class Criterion:
    """When a simulated run counts as holding the load (the simulator's meaning of capacity).

    - stable: the backlog (requests arrived, not finished) does not trend upwards by
      more than STABILITY_TOLERANCE of the arrival rate over the window - the
      throughput/roofline ceiling, and at a full cache the memory ceiling, where
      admission waits for blocks and the queue grows;
    - every band's TTFT, TPOT and ITL at its statistic within its limit (planner.targets);
    - the attainment goal, when the SLO states one;
    - preemptions per 1,000 requests <= the budget - the memory ceiling: expected sizing
      lets the mean footprint fill the budget, and what that costs is preemptions
      (and queueing at admission, which TTFT sees).
    """

    slo: SLO = NO_TARGETS
    preemption_budget_per_1000: float = PREEMPTION_BUDGET_PER_1000

    def failures(self, r: SimResult) -> list[str]:
        out = []
        if not r.stable:
            out.append("unstable")
        lat = r.latencies
        for band in self.slo.bands:
            for kind in ("ttft", "tpot", "itl"):
                target = getattr(band, kind)
                if target is not None and lat is not None:
                    value = lat.statistic(band, kind, target.stat)
                    if value > target.limit_s:  # NaN (no request of the band) is no miss
                        out.append(kind if len(self.slo.bands) == 1 else f"{kind} ({band.name})")
        if self.slo.attainment is not None and lat is not None and lat.attainment(self.slo) < self.slo.attainment:
            out.append("attainment")
        if not r.preemptions_per_1000 <= self.preemption_budget_per_1000:
            out.append("preemption")
        return out


@dataclass(frozen=True)
class SustainableRate:
    """The highest simulated rate that held (bisection), with the runs that decided it."""

    rate_rps: float
    result: SimResult | None  # the run at rate_rps
    binding: str  # what failed just above it
    evaluations: tuple[tuple[float, tuple[str, ...]], ...]  # (rate, failures) in the order tried
    bracket: tuple[float, float]


def max_sustainable_rate(
    dep: Deployment,
    hist: Histogram,
    slo: SLO | None = None,
    *,
    preemption_budget_per_1000: float = PREEMPTION_BUDGET_PER_1000,
    n_requests: int = 20000,
    seed: int = 0,
    rel_tol: float = 0.02,
    initial_rate_rps: float | None = None,
    kv_budget_bytes: int | None = None,
    shared_prefix_tokens: int = 0,
    warmup_fraction: float = DEFAULT_WARMUP_FRACTION,
    max_evaluations: int = 24,
    simulate: Callable[..., SimResult] | None = None,
) -> SustainableRate:
    """Bisection on the simulator for the highest rate that meets the Criterion.

    One set of requests is sampled (seed) and its Poisson arrivals rescaled to each rate
    tried (common random numbers), so the pass/fail outcome is close to monotone in the
    rate. The bracket starts at the analytical capacity (or `initial_rate_rps`) and is
    widened by factors of 1.5 until it holds a pass and a fail; bisection stops when
    its width is below rel_tol of the upper end.
    """
    slo = slo or NO_TARGETS
    crit = Criterion(slo, preemption_budget_per_1000)
    if initial_rate_rps is None:
        initial_rate_rps = replica_capacity(dep, profile_for(dep, hist, shared_prefix_tokens=shared_prefix_tokens), slo).max_rps
    guess = float(initial_rate_rps) if initial_rate_rps > 0 else 1.0  # the model found none: start at 1 rps
    base = sample_requests(hist, 1.0, n_requests, seed, max_total_tokens=dep.max_model_len,
                           min_prompt_tokens=shortest_prompt_tokens(shared_prefix_tokens, dep.block_size))
    run = simulate or simulate_replica
    cache: dict[float, tuple[SimResult, list[str]]] = {}
    order: list[tuple[float, tuple[str, ...]]] = []

    def evaluate(rate: float) -> list[str]:
        if rate not in cache:
            r = run(dep, base.at_rate(rate), kv_budget_bytes=kv_budget_bytes,
                    shared_prefix_tokens=shared_prefix_tokens, warmup_fraction=warmup_fraction)
            cache[rate] = (r, crit.failures(r))
            order.append((rate, tuple(cache[rate][1])))
        return cache[rate][1]

    lo, hi = guess, guess
    if evaluate(guess):
        while evaluate(lo) and len(order) < max_evaluations:
            hi, lo = lo, lo / 1.5
        if evaluate(lo):
            return SustainableRate(0.0, None, ",".join(cache[lo][1]), tuple(order), (0.0, lo))
    else:
        while not evaluate(hi) and len(order) < max_evaluations:
            lo, hi = hi, hi * 1.5
    while hi - lo > rel_tol * hi and len(order) < max_evaluations:
        mid = 0.5 * (lo + hi)
        if evaluate(mid):
            hi = mid
        else:
            lo = mid
    return SustainableRate(
        rate_rps=lo,
        result=cache[lo][0],
        binding=",".join(cache[hi][1]) if hi in cache and cache[hi][1] else "not bracketed",
        evaluations=tuple(order),
        bracket=(lo, hi),
    )
