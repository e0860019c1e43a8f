"""Discrete-step simulation of one replica: continuous batching over a paged KV cache.

This is the check on planner.capacity: the analytical model reasons about means
(Little's law, a time-weighted footprint, a Pollaczek-Khinchine wait); the
simulator replays individual requests through a vLLM-style scheduler with the
same step-time physics and measures what actually happens.

Inputs: a Deployment, and requests (arrival s, prompt and output tokens) either
sampled from a Histogram with Poisson arrivals (`sample_requests`) or taken from a
log as they are (`Requests(arrival_s, prompt_tokens, output_tokens)`, trace-timed);
the KV budget is the ladder's (or given), in blocks of `engine.block_size` tokens, paged as
vLLM's hybrid allocator pages it (_CacheBlocks): a sliding-window or chunked layer keeps the
blocks of its last window or chunk only, as planner.paged charges it.

Scheduler (one iteration = one engine step; vLLM V1's, vllm/v1/core/sched/scheduler.py
`Scheduler.schedule`, with recompute preemption, the only kind V1 has):
1. Decode. Every running sequence whose prompt is fully prefilled decodes one
   token; each takes one token of the step's budget (`max_num_batched_tokens`)
   first. A sequence holding c cached tokens needs block ceil((c+1)/B) for the
   token it writes, a new block when c is a multiple of B.
2. Preemption. If the new blocks needed exceed the free blocks, the newest
   running sequence (latest admission) is preempted, repeatedly, until they fit:
   its blocks are freed and it goes back to the head of the waiting queue; its
   generated tokens become part of its prompt, recomputed when it is admitted
   again (vLLM's PreemptionMode.RECOMPUTE). No new request is admitted in a step
   that preempted (as V1: its waiting requests wait while `preempted_reqs` is not empty).
3. Prefill. Sequences admitted earlier and still prefilling get the remaining
   budget in admission order, in chunks of at most the engine's
   long_prefill_token_threshold when it sets one (vLLM, v1/core/sched/scheduler.py:
   `if 0 < long_prefill_token_threshold < num_new_tokens`). Each chunk takes the blocks
   the tokens it computes fill (KVCacheManager.allocate_slots: blocks are allocated as
   chunks are scheduled, never a whole prompt ahead); where they are not free, the
   newest running sequence is preempted as in 2 (one scheduled this step gives its token
   and its block back), until they are, or until the sequence itself is the one
   preempted, which ends the step's prefills. Then, in a step that preempted nothing,
   waiting requests are admitted FCFS (no skipping) while the budget lasts, fewer
   than `max_num_seqs` run, and the blocks of a request's first chunk are free (V1 keeps
   no watermark).
4. The step that computes the last prompt chunk emits the first output token
   (TTFT = its end - arrival); a request of o output tokens then decodes o - 1
   steps. Its blocks are freed at its last token.

Step time mirrors planner.capacity's composition (its module docstring):
    t = StepModel.decode_step_s(d, cache_bytes, context_tokens)              decode part
      + prefill_flops(chunk) / flops_s + all-reduce bytes of the chunk tokens  prefill part
with d the decoding sequences, cache_bytes their paged cache (pages x bytes per
page: a capped layer reads its window's blocks only; plus the shared prefix each reads) and context_tokens their attended
tokens. A chunk covering prompt tokens [a, b) costs 2·A·(b - a) + AttentionFlops.span(a, b)
FLOPs (attn_prefill·(b² - a²)/2 over the full layers, prefill's pair: latent attention prefills
decompressed; and the window's share over the capped ones), so a
prompt's chunks add up to exactly StepModel.prefill_s(p, p²). The
batch-size terms (weights, MoE experts, overhead, all-reduce) are tabulated once
(see _Costs, which checks itself against StepModel.decode_step_s).

Speed: per-step work is O(1) amortised, with no loop over sequences. A decoding
sequence's cached tokens are c = step + off (one offset per sequence, fixed while
it decodes), so the blocks needed this step are the count of decoders with
off ≡ -step (mod B) (a table of B residue counts); a capped layer's, the count of
those among them whose window is not yet full (a second table, and the step at which each
fills it), the attended tokens are n·(step + 1) + Σoff, and completion steps sit in a heap. Loops run only over
events: arrivals, admissions, prefill chunks, completions and preemptions. The loop
itself is compiled (planner.sim_kernel).

Measures: planner.sim_measures (the window, time-weighted means, per-token gaps).

Departure from V1's order: V1 walks its running requests in admission order, decodes and
prefills alike, each taking its tokens and blocks in turn; here every decode goes first (1-2),
then the prefills. The two differ only where a prefill admitted before a decoder leaves that
decoder no budget or no block, which V1 then skips or preempts for the step.
Not modelled: the blocks vLLM keeps of a capped layer beyond ceil(window / block): one more in
most steps (it frees only blocks wholly before the window), and while a prompt's chunk is
computed, that chunk's (freed the next step); swapping to CPU;
speculative decoding; prefix caching beyond one shared prefix.
(Until 2026-12-07 a capped layer's cache was charged, held and read as a full-attention layer's: gpt-oss-120b's
pool in the shipped fleet read twice the cache bytes a decode step the step model reads, its simulated
TPOT p99 23.4 ms against 20.2 predicted, its KV use 3% against 1%.)
(Until 2026-12 the blocks of a whole prompt were allocated at its admission, above a 1%
watermark: vLLM V0's BlockSpaceManager, which vLLM 0.11 removed with the V0 engine.)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, fields

import numpy as np

from planner.deployment import Deployment
from planner.memory import (
    budget_ladder,
    kv_bytes_for_tokens,
    kv_bytes_per_token_by_layer_kind,
    kv_token_cap,
    paged_tokens,
)
from planner.requests import Requests
from planner.roofline import StepModel
from planner.sim_measures import SimResult, Trace, measure

DEFAULT_WARMUP_FRACTION = 0.1


# A replay's per-step records are allocated before its loop runs, for at most this many steps
# (eight arrays of 8 bytes a step: 256 MiB of address space, of which only the steps run are
# written). Grown by doubling inside the compiled loop, they were most of a long-context replay's
# time, measured on the 128k rollout's long pool (1.1 million steps): 0.18 s of 0.23 s, against
# 0.06 s for the whole replay with records allocated at once. Each doubling took fresh memory,
# which the system maps in on first write, and copied what was written; records of one size are
# reused from one replay to the next by the allocator.
FIRST_RECORDS_MAX_STEPS = 1 << 22
# _CacheBlocks.total_pages where no layer caches tokens: past any run's pages (int64 in the kernel)
_NO_PAGE_LIMIT = 1 << 62


def _steps_at_most(requests: Requests, chunk_tokens: int) -> int:
    """The steps a replay of `requests` runs when none is preempted, at most: every step with a
    decoding sequence gives it one of its o - 1 decoded tokens, and every other step runs a chunk of
    the first prefill, which ends it or takes chunk_tokens of it."""
    decoded = int(np.maximum(requests.output_tokens - 1, 0).sum())
    chunks = int((-(-requests.prompt_tokens // chunk_tokens)).sum())
    return decoded + chunks


@dataclass(frozen=True)
class _StepRecords:
    """The per-step records the simulator's loop writes, named as planner.sim_measures.Trace's fields
    and in the loop's order."""

    step_start_s: np.ndarray
    step_s: np.ndarray
    step_running: np.ndarray
    step_decoding: np.ndarray
    step_used_pages: np.ndarray
    step_prefill_tokens: np.ndarray
    step_prefill_s: np.ndarray
    step_waiting: np.ndarray

    @classmethod
    def empty(cls, steps: int) -> _StepRecords:
        floats = {"step_start_s", "step_s", "step_prefill_s"}
        return cls(**{f.name: np.empty(steps, np.float64 if f.name in floats else np.int64)
                      for f in fields(cls)})

    def first(self, steps: int | None = None) -> dict[str, np.ndarray]:
        """The records by name, in the loop's order, the first `steps` of each (all when None)."""
        return {f.name: getattr(self, f.name)[:steps] for f in fields(self)}


@dataclass(frozen=True)
class _Costs:
    """Step-time coefficients of one deployment, tabulated so a step costs a few float ops.

    decode_step_s(d, cache, ctx) = fixed[d] + max(cache / bandwidth, attention FLOPs / FLOP/s),
    attention FLOPs = attn · ctx + attn_capped · min(ctx, d · window) (AttentionFlops.decode),
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
    attn: float  # AttentionFlops.full_per_pair (decode steps)
    attn_prefill: float  # AttentionFlops.prefill_per_pair (a prompt chunk's full layers)
    attn_capped: float  # AttentionFlops.capped_per_pair, over its window_tokens
    window: int
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
            attn=step.attention.full_per_pair,
            attn_prefill=step.attention.prefill_per_pair,
            attn_capped=step.attention.capped_per_pair,
            window=step.attention.window_tokens,
            comm_per_token_s=float(step.allreduce_s(1.0, with_latency=False)),
        )
        rng = np.random.default_rng(0)
        b = rng.integers(0, max_batch + 1, 64)
        # contexts a sequence from a token to 200,000, half of them within three windows; cache bytes a
        # token from 10^-3 (the attention FLOPs bind) to 10^6 (the reads do)
        window = max(costs.window, 1)
        per_sequence = np.where(np.arange(64) % 2 == 0, rng.uniform(1.0, 2.0e5, 64), rng.uniform(1.0, 3.0 * window, 64))
        ctx = b * np.floor(per_sequence)
        cache = ctx * 10.0 ** rng.uniform(-3.0, 6.0, 64)
        want = np.asarray(step.decode_step_s(b.astype(float), cache, ctx), dtype=np.float64)
        attn_flops = costs.attn * ctx + costs.attn_capped * np.minimum(ctx, b * costs.window)
        got = fixed[b] + np.maximum(cache / costs.bandwidth, attn_flops / costs.flops_s)
        tokens = rng.integers(1, 100_000, 16).astype(float)
        if not (np.allclose(got, want, rtol=1e-9, atol=0.0) and np.allclose(
                tokens * costs.comm_per_token_s, step.allreduce_s(tokens, with_latency=False), rtol=1e-9, atol=0.0)
                and _spans_agree(step, costs, rng)):
            raise RuntimeError("planner.roofline.StepModel no longer has the step-time form the simulator's loop "
                               "computes (planner.simulate._Costs): carry the change into planner.sim_kernel")
        return costs


def _spans_agree(step: StepModel, costs: _Costs, rng: np.random.Generator) -> bool:
    """Whether the loop's FLOPs of a prompt chunk [a, b), 2·A·(b - a) + attn_prefill·(b² - a²)/2 plus the capped
    layers' sim_kernel._capped_pairs (its Python source: what it compiles), are StepModel.prefill_flops',
    on chunks from within the window to far past it."""
    from planner.sim_kernel import _capped_pairs

    window = max(costs.window, 1)
    start = rng.integers(0, 4 * window, 16)
    end = start + rng.integers(1, 4 * window, 16)
    chunks = list(zip(start.tolist(), end.tolist(), strict=True))
    loop = [costs.two_active * (e - a) + costs.attn_prefill * (e * e - a * a) * 0.5
            + (costs.attn_capped * (_capped_pairs.py_func(e, costs.window) - _capped_pairs.py_func(a, costs.window))
               if costs.attn_capped else 0.0) for a, e in chunks]
    want = [float(step.prefill_flops(e, e * e, a)) for a, e in chunks]
    return bool(np.allclose(loop, want, rtol=1e-9, atol=0.0))


@dataclass(frozen=True)
class _CacheBlocks:
    """The KV budget in pages: what the shared prefix holds once, what is left, and the bytes a
    block of each kind of layer holds and a decode step reads.

    vLLM's hybrid allocator (docs/design/hybrid_kv_cache_manager.md, vllm/v1/core/kv_cache_utils.py)
    pages every layer from one pool of equal pages: layers of one kind are grouped by the smallest
    layer count of the kinds, or the largest where it is under 1.25 times the smallest
    (_get_kv_cache_groups_uniform_page_size; the last group of a kind padded), and a page is a block
    of one group. A sequence of b blocks holds full_pages x b pages of its full-attention groups and
    win_pages x min(b, win_blocks) of its capped ones (sliding window, chunk: SlidingWindowManager
    and ChunkedLocalAttentionManager free the blocks before the window). gpt-oss: 18 full and 18
    windowed layers, one group each; Gemma 3: 10 full and 52 windowed, groups of 10, 1 and 6 pages
    a block (8 padding layers, which planner.memory does not charge: the simulator holds 14% more
    than the model for Gemma 3, 1,500 requests of 4,000 and 300 tokens at 1 per second on an H100,
    against 6% with the padding left out). Without capped layers a page is a block of every layer.
    win_blocks is ceil(window / block), as planner.paged charges a window: vLLM frees only blocks
    wholly before the window, and holds one block more in most steps (the window's edges rarely
    fall on a block's). A chunked layer (Llama 4) is charged a window of its chunk, an upper bound
    (vLLM keeps the current chunk's blocks only), as planner.memory charges it. The shared prefix's
    capped layers hold and read their window of it (planner.footprint's kv_bytes_for_tokens);
    vLLM's read a window of the prefix and the sequence's own tokens together."""

    budget_bytes: int
    block: int  # tokens a block
    block_bytes: int  # a block of every layer that caches tokens
    page_bytes: int  # a block of one group of layers
    shared_blocks: int  # the prefix's full blocks
    full_pages: int  # pages a block of full-attention layers takes
    win_pages: int  # pages a block of capped layers takes (0: none)
    win_blocks: int  # blocks a capped layer keeps at most: ceil(window / block) (0: none)
    full_read_bytes: int  # a block of the full-attention layers, as a decode step reads it
    win_read_bytes: int  # a block of the capped layers (padding holds memory and is not read)
    state_bytes: int = 0  # a sequence's fixed state (linear-attention / state-space layers), read every decode step

    def pages(self, blocks: int) -> int:
        """Pages a sequence of `blocks` blocks holds: the kernel's own count (sim_kernel._pages), in Python."""
        from planner.sim_kernel import _pages

        return int(_pages.py_func(blocks, self.full_pages, self.win_pages, self.win_blocks))

    @property
    def shared_tokens(self) -> int:
        return self.shared_blocks * self.block

    @property
    def shared_pages(self) -> int:
        """What the prefix holds, once."""
        return self.pages(self.shared_blocks)

    @property
    def shared_read_bytes(self) -> int:
        """The prefix a decoder reads, its capped layers' at most their window: pages counted in the bytes a
        decode step reads of a block of each kind of layer."""
        from planner.sim_kernel import _pages

        return int(_pages.py_func(self.shared_blocks, self.full_read_bytes, self.win_read_bytes, self.win_blocks))

    @property
    def total_pages(self) -> int:
        """Pages beyond the shared prefix; where no layer caches tokens (every layer a fixed state:
        Mamba, linear attention), more than any run holds, since no block ever fills the budget."""
        if not self.page_bytes:
            return _NO_PAGE_LIMIT
        return self.budget_bytes // self.page_bytes - self.shared_pages

    @property
    def total_blocks(self) -> int:
        """The budget beyond the shared prefix in blocks of every group, padding included (SimResult's)."""
        return self.total_pages // (self.full_pages + self.win_pages)


def _cache_blocks(dep: Deployment, requests: Requests, kv_budget_bytes: int | None,
                  shared_prefix_tokens: int) -> _CacheBlocks:
    """The budget in pages; refuses requests the cache can never hold or that skip the prefix."""
    block = int(dep.block_size)
    budget_bytes = int(budget_ladder(dep).kv_budget_bytes if kv_budget_bytes is None else kv_budget_bytes)
    shared_blocks = max(int(shared_prefix_tokens), 0) // block
    layout = kv_bytes_per_token_by_layer_kind(dep.model, dep.kv_dtype, dep.tp)
    cached = [k for k in layout.kinds if k.bytes_per_token]
    full = sum(k.layers for k in cached if k.token_cap is None)
    capped = sum(k.layers for k in cached if k.token_cap is not None)
    if not cached:  # every layer a fixed state or none: blocks hold nothing (the state caps the batch: _state_seqs)
        full_pages, win_pages, win_blocks, page_bytes, block_bytes, full_read, win_read = 1, 0, 0, 0, 0, 0, 0
    elif not capped:  # one group of every layer: a page is a block
        block_bytes = int(kv_bytes_for_tokens(dep.model, block, dep.kv_dtype, dep.tp))
        full_pages, win_pages, win_blocks, page_bytes = 1, 0, 0, block_bytes
        full_read, win_read = block_bytes, 0
    else:
        layer_block = block * cached[0].bytes_per_token / cached[0].layers  # every attention layer caches alike
        group = min(full, capped) if full else capped
        if full and max(full, capped) < 1.25 * group:  # vLLM's exception: fewer padding layers
            group = max(full, capped)
        full_pages, win_pages = -(-full // group), -(-capped // group)
        win_blocks = paged_tokens(int(kv_token_cap(dep.model)), block) // block
        page_bytes = math.ceil(group * layer_block)
        block_bytes = math.ceil((full + capped) * layer_block)
        full_read, win_read = math.ceil(full * layer_block), math.ceil(capped * layer_block)
    cache = _CacheBlocks(budget_bytes, block, block_bytes, page_bytes, shared_blocks, full_pages, win_pages, win_blocks,
                         full_read, win_read, math.ceil(layout.state_bytes_per_sequence))
    shared = cache.shared_tokens
    if shared and int(requests.prompt_tokens.min()) <= shared:
        raise ValueError(
            f"a prompt of {int(requests.prompt_tokens.min())} tokens is not longer than the shared prefix "
            f"({shared} tokens in full blocks); every prompt must start with the prefix"
        )
    if cache.total_pages <= 0:
        raise ValueError("the KV budget holds no block beyond the shared prefix")
    longest = int(np.max(requests.prompt_tokens + requests.output_tokens - 1))
    need_max = -(-max(longest - shared, 1) // block)
    if cache.pages(need_max) > cache.total_pages:
        capped_blocks = min(need_max, win_blocks)
        if not win_pages:
            need = f"{need_max} blocks"
        elif full_pages:
            need = (f"{cache.pages(need_max)} pages ({need_max} blocks on its full-attention layers, "
                    f"{capped_blocks} on its capped ones)")
        else:
            need = f"{cache.pages(need_max)} pages ({capped_blocks} blocks on its capped layers)"
        holds = f"{cache.total_pages}" + (" pages" if win_pages else "")
        raise ValueError(f"a request of {longest + 1} tokens needs {need}; the KV budget holds {holds}")
    return cache


def _state_seqs(dep: Deployment, kv: _CacheBlocks) -> int:
    """The sequences the replica runs at once: max_num_seqs, and where no layer caches tokens (so
    blocks never fill the budget) at most as many as the budget holds fixed states of, as
    planner.footprint charges them (vLLM allocates a state slot a running sequence)."""
    max_seqs = int(dep.engine.max_num_seqs)
    if kv.page_bytes or not kv.state_bytes:
        return max_seqs
    held = kv.budget_bytes // kv.state_bytes
    if held < 1:
        raise ValueError(f"the KV budget ({kv.budget_bytes:,} bytes) holds no sequence's state ({kv.state_bytes:,} bytes)")
    return min(max_seqs, held)


def simulate_replica(
    dep: Deployment,
    requests: Requests,
    *,
    kv_budget_bytes: int | None = None,
    shared_prefix_tokens: int = 0,
    warmup_fraction: float = DEFAULT_WARMUP_FRACTION,
    settled: bool = True,
    trace: bool = False,
) -> SimResult | tuple[SimResult, Trace]:
    """Replay `requests` through one replica of `dep` (module docstring: scheduler, step time, measures).

    kv_budget_bytes: the cache budget (default: the deployment's budget ladder); it holds
    kv_budget_bytes // page bytes pages (_CacheBlocks: without sliding-window or chunked layers, a
    page is a block of `dep.block_size` tokens on every layer).
    shared_prefix_tokens: a prefix every prompt shares (system prompt); its full blocks are
    held once and skipped in prefill (prefix caching), as in planner.paged.
    The scheduler is deterministic given the requests; randomness lives in `sample_requests`.
    warmup_fraction, settled: which requests are measured (planner.sim_measures.settled_window):
    past that share of them, and where `settled`, only those that arrive once the replica has
    settled and no later than as long before the last arrival, so that they decode while arrivals
    go on (a log's own requests are all judged).
    trace: also return a Trace of per-request and per-step records.
    """
    if not 0.0 <= warmup_fraction < 1.0:
        raise ValueError("warmup_fraction must be in [0, 1)")
    engine = dep.engine
    kv = _cache_blocks(dep, requests, kv_budget_bytes, shared_prefix_tokens)
    notes = []
    if kv.state_bytes and kv.page_bytes:
        notes.append("the fixed per-sequence state of linear-attention / state-space layers is read by every decode "
                     "step but holds none of the cache's blocks")

    max_seqs = _state_seqs(dep, kv)
    costs = _Costs.of(dep, max_seqs)
    from planner.sim_kernel import run  # numba loads only when a replica is simulated

    batched_tokens = int(engine.max_num_batched_tokens)
    # vLLM's long_prefill_token_threshold: no request takes more prompt tokens than this in a step
    chunk_tokens = int(engine.long_prefill_token_threshold or batched_tokens)
    steps = min(_steps_at_most(requests, min(chunk_tokens, batched_tokens)), FIRST_RECORDS_MAX_STEPS)
    while True:
        records = _StepRecords.empty(steps)
        wall0 = time.perf_counter()
        (first_tok, finish, n_preempt, n_admit, steps_run, preempt_steps, resume_gaps, resume_steps,
         free_at_end) = run(
            requests.arrival_s, requests.prompt_tokens, requests.output_tokens, int(dep.block_size), kv.total_pages,
            kv.shared_tokens, max_seqs, batched_tokens, chunk_tokens,
            costs.fixed_s, costs.bandwidth, costs.flops_s, costs.two_active, costs.attn, costs.attn_prefill,
            costs.attn_capped, costs.window, kv.full_pages, kv.win_pages, kv.win_blocks,
            # a decoder's fixed reads: the shared prefix's and its own state's (as planner.footprint reads both)
            kv.full_read_bytes, kv.win_read_bytes, kv.shared_read_bytes + kv.state_bytes, costs.comm_per_token_s,
            *records.first().values(),
        )
        wall = time.perf_counter() - wall0  # the loop's own time, in the run whose records are kept
        if steps_run <= steps:
            break
        steps = steps_run  # the replay is deterministic: run again, recording every step
    tr = Trace(
        first_token_s=first_tok,
        finish_s=finish,
        preemptions=n_preempt,
        admissions=n_admit,
        **records.first(steps_run),
        preemption_steps=preempt_steps,
        resume_gaps_s=resume_gaps,
        resume_steps=resume_steps,
        free_pages_at_end=int(free_at_end),
        total_pages=kv.total_pages,
    )
    result = measure(
        requests, tr, warmup_fraction, wall, total_blocks=kv.total_blocks, block_bytes=kv.block_bytes,
        page_bytes=kv.page_bytes, shared_bytes=kv.shared_pages * kv.page_bytes, budget_bytes=kv.budget_bytes,
        notes=tuple(notes), state_bytes=0 if kv.page_bytes else kv.state_bytes,
        settled=settled,
    )
    return (result, tr) if trace else result
