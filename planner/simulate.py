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
   budget in admission order, in chunks; then waiting requests are admitted
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
events: arrivals, admissions, prefill chunks, completions and preemptions.

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

import heapq
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from planner.capacity import SLO, OperatingPoint, ReplicaModel, replica_capacity
from planner.deployment import Deployment
from planner.histogram import LENGTH_EDGES, Histogram
from planner.memory import budget_ladder, kv_bytes_for_tokens
from planner.paged import TokenProfile, token_profile
from planner.roofline import StepModel

DEFAULT_WARMUP_FRACTION = 0.1
DEFAULT_WATERMARK = 0.01  # vLLM v0 BlockSpaceManager watermark: 1% of the blocks kept free at admission
STABILITY_TOLERANCE = 0.02  # the backlog may grow by 2% of the arrival rate (least-squares trend)

# Keys a report shows side by side: predicted (planner.capacity) and simulated.
COMPARE_KEYS = (
    "rate_rps",
    "resident_batch",
    "kv_utilisation",
    "itl_ms_mean",
    "itl_ms_p50",
    "itl_ms_p99",
    "ttft_ms_p99",
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


def sample_requests(
    hist: Histogram, rate_rps: float, n_requests: int, seed: int = 0, *, max_total_tokens: int | None = None,
    shared_prefix_tokens: int = 0,
) -> Requests:
    """`n_requests` requests with lengths from `hist` (see sample_lengths) and Poisson arrivals
    at `rate_rps` (exponential gaps; the first arrives after one gap). Requests longer than
    `max_total_tokens` have their output trimmed to fit (the engine would reject them).

    Every prompt starts with the `shared_prefix_tokens` prefix, so a prompt drawn shorter
    (the log's lengths and the scenario's prefix disagree) is lengthened to the prefix plus
    one token: the analytical model charges it the prefix alone (paged.py), and the
    simulator needs each prompt past the prefix."""
    if n_requests < 1:
        raise ValueError("n_requests must be >= 1")
    if rate_rps <= 0:
        raise ValueError("rate must be positive")
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0, n_requests)) / rate_rps
    prompt, output = sample_lengths(hist, n_requests, rng)
    if shared_prefix_tokens > 0:
        prompt = np.maximum(prompt, shared_prefix_tokens + 1)
    if max_total_tokens is not None:
        prompt = np.minimum(prompt, max_total_tokens - 1)
        output = np.clip(output, 1, max_total_tokens - prompt)
    return Requests(arrival, prompt, output, float(rate_rps))


# ----------------------------------------------------------------------- results


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
    roofline per phase of planner.roofline. `exact` records that this form reproduces
    StepModel.decode_step_s on a grid of points; when it does not (the step model was
    changed), the simulator calls StepModel.decode_step_s every step instead: slower, right.
    """

    fixed_s: list[float]
    bandwidth: float
    flops_s: float
    two_active: float
    attn: float
    exact: bool
    step: StepModel

    @classmethod
    def of(cls, dep: Deployment, max_batch: int) -> _Costs:
        step = StepModel.of(dep)
        d = np.arange(max_batch + 1, dtype=np.float64)
        fixed = np.asarray(step.decode_step_s(d, np.zeros_like(d), np.zeros_like(d)), dtype=np.float64)
        costs = cls(
            fixed_s=fixed.tolist(),
            bandwidth=step.bandwidth_bytes_s,
            flops_s=step.flops_s,
            two_active=2.0 * step.params_active,
            attn=step.attn_flops_per_ctx_token,
            exact=True,
            step=step,
        )
        # Self-check on batches, caches and contexts from tiny to far past the ridge point.
        rng = np.random.default_rng(0)
        b = rng.integers(0, max_batch + 1, 64)
        ctx = b * rng.uniform(1.0, 2.0e5, 64)
        cache = ctx * rng.uniform(1.0e3, 1.0e6, 64)
        want = np.asarray(step.decode_step_s(b.astype(float), cache, ctx), dtype=np.float64)
        got = np.array([costs.decode_s(int(bi), ci, xi) for bi, ci, xi in zip(b, cache, ctx, strict=True)])
        if not np.allclose(got, want, rtol=1e-9, atol=0.0):
            object.__setattr__(costs, "exact", False)
        return costs

    def decode_s(self, d: int, cache_bytes: float, context_tokens: float) -> float:
        if not self.exact:
            return float(self.step.decode_step_s(d, cache_bytes, context_tokens))
        t_mem = cache_bytes / self.bandwidth
        t_flop = self.attn * context_tokens / self.flops_s
        return self.fixed_s[d] + (t_mem if t_mem > t_flop else t_flop)

    def prefill_comm_s(self, tokens: int) -> float:
        """All-reduce bytes of a chunk's tokens (its latency is the decode part's, once per pass)."""
        return float(self.step.allreduce_s(float(tokens), with_latency=False))


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
    if dep.model.num_sliding_window_layers:
        notes.append("sliding-window layers are charged as full-attention layers (the simulator pages one pool)")

    prompt = requests.prompt_tokens.tolist()
    output = requests.output_tokens.tolist()
    arrival = requests.arrival_s.tolist()
    n = requests.n
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
    chunk_budget = int(engine.max_num_batched_tokens)
    costs = _Costs.of(dep, max_seqs)
    fixed_s, exact = costs.fixed_s, costs.exact
    bw, fl, two_a, attn = costs.bandwidth, costs.flops_s, costs.two_active, costs.attn

    # Per-request state (Python lists: scalar access is what the loop does).
    gen = [0] * n  # tokens generated so far
    off = [0] * n  # decoding: cached tokens (beyond the shared prefix) = step + off
    held = [0] * n  # prefilling: blocks allocated at admission
    pf_pos = [0] * n  # prefilling: tokens of its (re)prefill computed so far, shared prefix included
    pf_len = [0] * n  # prefilling: tokens to hold when done (prompt + generated)
    epoch = [0] * n  # invalidates heap entries of preempted sequences
    decoding = [False] * n
    first_tok = [math.nan] * n
    finish = [math.nan] * n
    last_emit = [math.nan] * n
    n_preempt = [0] * n
    n_admit = [0] * n

    running: dict[int, None] = {}  # admission order: the last key is the newest
    prefilling: list[int] = []  # running and prefilling, admission order
    waiting: deque[int] = deque()
    heap: list[tuple[int, int, int]] = []  # (finish step, request, epoch)
    residue = [0] * block  # decoders by off mod B
    n_dec = 0
    sum_off = 0
    dec_blocks = 0  # blocks held by decoders
    used = 0  # blocks held by all running sequences (shared prefix excluded)

    rec_start: list[float] = []
    rec_dt: list[float] = []
    rec_run: list[int] = []
    rec_dec: list[int] = []
    rec_used: list[int] = []
    rec_pf: list[int] = []
    rec_wait: list[int] = []
    rec_pf_s: list[float] = []
    preempt_steps: list[int] = []
    resume_gaps: list[float] = []
    resume_steps: list[int] = []

    wall0 = time.perf_counter()
    now = 0.0
    s = 0  # index of the step being built
    nxt = 0  # next request to arrive
    done = 0
    while done < n:
        while nxt < n and arrival[nxt] <= now:
            waiting.append(nxt)
            nxt += 1
        if not running and not waiting:
            now = arrival[nxt]
            continue

        # 1-2. Decode blocks, preempting the newest until they fit.
        need = residue[-s % block]
        free = total_blocks - used
        preempted = False
        while need > free:
            v = next(reversed(running))
            del running[v]
            if decoding[v]:
                c = s + off[v]
                if c % block == 0:
                    need -= 1
                blocks_v = -(-c // block)
                gen[v] = c - (prompt[v] - shared) + 1
                decoding[v] = False
                n_dec -= 1
                sum_off -= off[v]
                residue[off[v] % block] -= 1
                dec_blocks -= blocks_v
                epoch[v] += 1
                last_emit[v] = now
            else:
                blocks_v = held[v]
                prefilling.remove(v)
            used -= blocks_v
            free += blocks_v
            waiting.appendleft(v)
            n_preempt[v] += 1
            preempt_steps.append(s)
            preempted = True
        used += need
        dec_blocks += need
        budget = chunk_budget - n_dec

        # 3. Prefill chunks: running prefills first, then FCFS admissions.
        pf_tokens = 0
        pf_flops = 0.0
        completed: list[int] = []
        for i in prefilling:
            if budget <= 0:
                break
            a = pf_pos[i]
            c = min(pf_len[i] - a, budget)
            b = a + c
            pf_flops += two_a * c + attn * (b * b - a * a) * 0.5
            pf_pos[i] = b
            budget -= c
            pf_tokens += c
            if b == pf_len[i]:
                completed.append(i)
        if not preempted:
            while waiting and budget > 0 and len(running) < max_seqs:
                h = waiting[0]
                length = prompt[h] + gen[h]
                req = -(-(length - shared) // block)
                if total_blocks - used - req < watermark_blocks:
                    break
                waiting.popleft()
                running[h] = None
                prefilling.append(h)
                n_admit[h] += 1
                used += req
                held[h] = req
                pf_len[h] = length
                a = min(shared, length - 1)  # a full prefix hit still computes the last token
                c = min(length - a, budget)
                b = a + c
                pf_flops += two_a * c + attn * (b * b - a * a) * 0.5
                pf_pos[h] = b
                budget -= c
                pf_tokens += c
                if b == length:
                    completed.append(h)

        # Step time: decode part + prefill part (module docstring).
        cache_bytes = dec_blocks * block_bytes + n_dec * shared_bytes
        ctx = n_dec * (s + 1 + shared) + sum_off
        if exact:
            t_mem = cache_bytes / bw
            t_flop = attn * ctx / fl
            dt = fixed_s[n_dec] + (t_mem if t_mem > t_flop else t_flop)
        else:
            dt = costs.decode_s(n_dec, cache_bytes, ctx)
        pf_s = 0.0
        if pf_tokens:
            pf_s = pf_flops / fl + costs.prefill_comm_s(pf_tokens)
            dt += pf_s
        end = now + dt
        rec_start.append(now)
        rec_dt.append(dt)
        rec_run.append(len(running))
        rec_dec.append(n_dec)
        rec_used.append(used)
        rec_pf.append(pf_tokens)
        rec_pf_s.append(pf_s)
        rec_wait.append(len(waiting))

        # 4. Tokens out: decoders that finish this step, then prefills that completed.
        while heap and heap[0][0] == s:
            _, i, ep = heapq.heappop(heap)
            if ep != epoch[i] or not decoding[i]:
                continue
            c = s + off[i] + 1
            blocks_i = -(-c // block)
            decoding[i] = False
            n_dec -= 1
            sum_off -= off[i]
            residue[off[i] % block] -= 1
            dec_blocks -= blocks_i
            used -= blocks_i
            del running[i]
            gen[i] = output[i]
            finish[i] = end
            done += 1
        for i in completed:
            prefilling.remove(i)
            if gen[i] == 0:
                first_tok[i] = end
            else:
                resume_gaps.append(end - last_emit[i])
                resume_steps.append(s)
            gen[i] += 1
            if gen[i] >= output[i]:
                used -= held[i]
                del running[i]
                finish[i] = end
                done += 1
                continue
            decoding[i] = True
            o_i = pf_len[i] - shared - (s + 1)
            off[i] = o_i
            n_dec += 1
            sum_off += o_i
            residue[o_i % block] += 1
            dec_blocks += held[i]
            heapq.heappush(heap, (s + output[i] - gen[i], i, epoch[i]))
        now = end
        s += 1
    wall = time.perf_counter() - wall0

    tr = Trace(
        first_token_s=np.asarray(first_tok),
        finish_s=np.asarray(finish),
        preemptions=np.asarray(n_preempt, dtype=np.int64),
        admissions=np.asarray(n_admit, dtype=np.int64),
        step_start_s=np.asarray(rec_start),
        step_s=np.asarray(rec_dt),
        step_running=np.asarray(rec_run, dtype=np.int64),
        step_decoding=np.asarray(rec_dec, dtype=np.int64),
        step_used_blocks=np.asarray(rec_used, dtype=np.int64),
        step_prefill_tokens=np.asarray(rec_pf, dtype=np.int64),
        step_prefill_s=np.asarray(rec_pf_s),
        step_waiting=np.asarray(rec_wait, dtype=np.int64),
        preemption_steps=np.asarray(preempt_steps, dtype=np.int64),
        resume_gaps_s=np.asarray(resume_gaps),
        resume_steps=np.asarray(resume_steps, dtype=np.int64),
        free_blocks_at_end=total_blocks - used,
        total_blocks=total_blocks,
    )
    result = _measure(
        requests, tr, warmup_fraction, wall,
        block_bytes=block_bytes, shared_bytes=shared_bytes, budget_bytes=budget_bytes, notes=tuple(notes),
    )
    return (result, tr) if trace else result


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """Smallest v with (weight of samples <= v) >= q · total weight."""
    if values.size == 0 or weights.sum() <= 0:
        return math.nan
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    i = int(np.searchsorted(cum, q * cum[-1], side="left"))
    return float(values[order][min(i, values.size - 1)])


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
    gaps = np.concatenate([w, resumed])
    gap_w = np.concatenate([dec.astype(np.float64), np.ones(resumed.size)])
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
    gw = float(gap_w.sum())
    return SimResult(
        rate_rps=arrived_in / span,
        throughput_rps=done_in / span,
        output_tokens_per_s=tokens_out / span,
        resident_batch=tmean(tr.step_running.astype(np.float64)),
        decode_batch=tmean(tr.step_decoding.astype(np.float64)),
        waiting=tmean(tr.step_waiting.astype(np.float64)),
        kv_utilisation=tmean(util),
        kv_utilisation_p99=_weighted_quantile(util[win], w, 0.99),
        itl_ms_mean=float(np.dot(gaps, gap_w) / gw) * 1e3 if gw > 0 else math.nan,
        itl_ms_p50=_weighted_quantile(gaps, gap_w, 0.50) * 1e3,
        itl_ms_p99=_weighted_quantile(gaps, gap_w, 0.99) * 1e3,
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
    )


# ------------------------------------------------------------- analytical side


def profile_for(dep: Deployment, hist: Histogram, *, shared_prefix_tokens: int = 0) -> TokenProfile:
    """The class profile planner.capacity uses, with this deployment's block size and chunk budget."""
    return token_profile(
        hist,
        block_size=dep.block_size,
        chunk_tokens=dep.engine.max_num_batched_tokens,
        sliding_window=dep.model.sliding_window if dep.model.num_sliding_window_layers else None,
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
    """The analytical model at `rate_rps`, with COMPARE_KEYS (None where it predicts nothing).

    N from ReplicaModel.resident_for_rate (Little's law fixed point), then
    ReplicaModel.point(N). The model gives the mean step time only, which is its ITL
    (itl_ms_mean and itl_ms_p50 both carry it; no p99); its TTFT is at the class's prompt
    quantile with the mean queueing wait; expected sizing has no preemption figure.
    """
    ladder = budget_ladder(dep)
    if kv_budget_bytes is not None:
        from dataclasses import replace

        from planner.units import GiB

        ladder = replace(ladder, kv_budget_gib=kv_budget_bytes / GiB)
    rm = ReplicaModel(dep, prof, slo or SLO(), ladder)
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
        "itl_ms_p50": pt.step_ms,  # the model's typical gap is the mean step (most steps carry no long chunk)
        "itl_ms_p99": None,
        "ttft_ms_p99": pt.ttft_ms,
        "preemptions_per_1000": None,
    }


# ------------------------------------------------------ maximum sustainable rate


@dataclass(frozen=True)
class Criterion:
    """When a simulated run counts as holding the load (the simulator's meaning of capacity).

    Chosen to match what the analytical capacity bounds (planner.capacity):
    - stable: the backlog (requests arrived, not finished) does not trend upwards by
      more than STABILITY_TOLERANCE of the arrival rate over the window - the
      throughput/roofline ceiling, and at a full cache the memory ceiling, where
      admission waits for blocks and the queue grows;
    - mean ITL <= slo.itl_ms - the model's ITL bound is on the mean step time;
    - p99 TTFT <= slo.ttft_s - the model bounds TTFT at the prompt quantile (with the
      mean wait; the simulator's p99 includes the tail of the wait, so it is stricter);
    - preemptions per 1,000 requests <= the budget - the memory ceiling: expected sizing
      lets the mean footprint fill the budget, and what that costs is preemptions
      (and queueing at admission, which only TTFT sees).
    """

    slo: SLO = field(default_factory=SLO)
    preemption_budget_per_1000: float = PREEMPTION_BUDGET_PER_1000

    def failures(self, r: SimResult) -> list[str]:
        out = []
        if not r.stable:
            out.append("unstable")
        if self.slo.itl_ms is not None and not r.itl_ms_mean <= self.slo.itl_ms:
            out.append("itl")
        if self.slo.ttft_s is not None and not r.ttft_ms_p99 <= self.slo.ttft_s * 1e3:
            out.append("ttft")
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
    slo = slo or SLO()
    crit = Criterion(slo, preemption_budget_per_1000)
    if initial_rate_rps is None:
        initial_rate_rps = replica_capacity(dep, profile_for(dep, hist, shared_prefix_tokens=shared_prefix_tokens), slo).max_rps
    guess = float(initial_rate_rps) if initial_rate_rps > 0 else 1.0  # the model found none: start at 1 rps
    base = sample_requests(hist, 1.0, n_requests, seed, max_total_tokens=dep.max_model_len,
                           shared_prefix_tokens=shared_prefix_tokens)
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
