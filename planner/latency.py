"""Latency distributions of one replica at an operating point: TTFT, TPOT and per-token gaps per band.

The mean model (planner.capacity) fixes, for an arrival rate λ, the resident batch N and the
decode part of a step t_dec(N). This module turns those into distributions, because users
state targets as percentiles and the tail of a mixed pool is set by its longest prompts.

Scheduler (planner.simulate, vLLM's chunked-prefill scheduler): every step first decodes one
token for each running sequence, then spends the rest of the token budget C (the engine's
max_num_batched_tokens) on prompts, first come first served, each prompt taking at most
k tokens a step (k = the budget left, or vLLM's long_prefill_token_threshold θ when set).
A step lasts t_dec plus the compute of the prompt tokens it carries.

TTFT. Without θ the prompts form one first-come-first-served queue: an M/G/1 queue whose
service time is a prompt's prefill compute plus the decode part of the steps its tokens
ride, S(p) = prefill(p) + (p / C')·t_dec, C' = C - N. A request waits W (the queue's
waiting time), then its own prefill takes prefill(p) + ceil(p / C')·t_dec, plus the rest of the
step in flight, and the prompts that arrive meanwhile ride its step behind it (LatencyPoint.
ttft_survival: given W = w, compound Poisson with λ·(w + t_dec/2) expected prompts; in the mean,
one mean step's arrivals). W's distribution is the Pollaczek-Khinchine
transform (1 - ρ) / (1 - ρ·Ŝe), Ŝe the transform of the equilibrium (residual) service
distribution, inverted on a time grid by FFT with exponential tilting against wrap-around
(as planner.paged does for the compound-Poisson cache total; Abate & Whitt 1992 for the
damping). Its tail comes from prefill *times* (quadratic in attention), so a 2% share of
100k-token prompts can hold short requests for seconds: head-of-line blocking.
In a long backlog the queue is slower than at N: decoders pile up while prompts finish faster
than they arrive, and each step's decode part grows; W's tail is read from the queue at the
state a wait reaches (planner.backlog).
With θ, prompts longer than θ take θ tokens a step and share the steps, and shorter ones
pass them: planner.prefill_cap gives the waits there (a processor-sharing queue of the
capped prompts limited to ceil(C'/θ) in service, and the chunks in flight that stretch a
short prompt's step); a capped prompt's own prefill is stretched by the others' work, and spread
by how many are in flight beside it (planner.prefill_cap.stay_spread).
In the TPOT window, capped prompts admitted before a request that still prefill when it
decodes ride its steps (their remaining hold past its own time, E[(T - o)+²] / 2E[T]); of
the prompts arriving while a capped request waits and prefills, only capped ones still in
flight ride it (the rest are admitted beside it and pass it): their share of the window is
the capped prompts' share of prefill work times E[min(T, o)] / o. Each prompt's share of a
step is capped at θ in the TPOT and gap tables.

TPOT. A request's TPOT is its own decode step t_own plus the prefill compute that rides in its
D = o - 1 decode steps, divided by D. t_own is t_dec at the batch a decoding request sees, itself
and the others (planner.capacity.ReplicaModel.decode_seen_s), not at the time-average N: in a
long-context pool of N = 0.02-0.2 the two differ by a whole sequence's cache read, 17-20% of
t_dec in tests/test_latency.py's cases. FCFS puts every prompt that arrived before it ahead of
its own prefill, so only prompts arriving after it meet its decode: those that queued while it
waited and prefilled (W + own), and those arriving during its D steps. Their work Y in
the window [arrival, decode start + D·t_own] is compound Poisson, each prompt capped at
the compute of its first D·k tokens (no prompt can take more than k tokens of each of
the D steps); and each second of it stretches the life by the prompts arriving
meanwhile, which are served before the life ends too: the busy period an amount of work
Y starts in an M/G/1 queue of load ρ lasts about Y / (1 - ρ) (its mean exactly; its tail
for heavy-tailed work, Zwart, "Tail asymptotics for the busy period in the GI/G/1
queue", 2001). So
    TPOT > x  <=>  Y > (1 - ρ)·D·(x - t_own),
and never above t_own plus a full step's prefill: a busy step carries a budget of prompt
tokens, packed from as many prompts as it takes (LatencyModel.full_step_prefill_s; a cap
at one prompt's chunk put the p99 below the mean where prompts are short beside the
budget, bench/accuracy.py 2026-12-02). This is evaluated per histogram cell (its
D and prompt) and per level of W. The compound-Poisson tails come from FFT tables over a
grid of expected arrivals, in FLOPs, so one table serves every GPU, tensor-parallel degree
and dtype of a model and class. The simulator is the judge: bench/accuracy.py compares
both per percentile.

Per-token gaps. A step's gap is t_own plus the prefill it carries. The prompts that arrive while a
step runs ride the next one (their first chunks: compound Poisson with λ·T expected for a step of
length T), so step lengths form a chain whose stationary distribution is the token-weighted gap
distribution (LatencyPoint._step_chain); a prompt longer than a step's chunk fills steps of its own
with its later chunks, λ·t̄·Σ w_c·#{later chunks of c costing more than y} of a decoder's steps
(t̄ = t_own / (1 - ρ) the mean step it sees); and a request meets, right after its own prefill, the
prompts that queued behind it meanwhile, the mean ITL's backlog in full steps (_queued_above). Under
θ, where several prompts' capped chunks share a step, every step that carries prefill is taken as
full, a floor that errs high (_capped_share). Whatever the terms, the mean gap bounds the share of
steps that carry prefill from below, taking a full step's prefill as the most a step carries
(_mean_floor), which near capacity on long prompts, where the queue is seldom empty, sets the median.
bench/itl_tail.py compares the median and the tail with the simulator.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from planner.backlog import Backlog, backlog_wait, regime_service_s
from planner.memo import ObjectMemo, shallow_copy
from planner.paged import TokenProfile
from planner.prefill_cap import CappedRegime, SlotStep, capped_waits
from planner.prefill_wait import (
    W_LEVEL_EDGES,
    W_LEVEL_WEIGHTS,
    WaitDistribution,
    mg1_wait,
    split_mass_rows,
    tilt,
)
from planner.roofline import AttentionFlops, StepModel
from planner.targets import SLO, Band, Target

_D_RATIO = 1.25  # decode-step buckets of the TPOT tables
_M_GRID = np.geomspace(1e-3, 1e4, 26)  # expected prompts arriving in a window
_Y_GRID = 512
_LOG_M_STEP = math.log(_M_GRID[1] / _M_GRID[0])


@dataclass(frozen=True, eq=False)
class _Cells:
    """The class's histogram cells as the latency model uses them (dtype- and GPU-free)."""

    weight: np.ndarray  # share of requests
    prompt: np.ndarray  # mean prompt tokens
    prompt_sq: np.ndarray
    new_tokens: np.ndarray  # prompt tokens prefill computes (after the shared prefix)
    decode_steps: np.ndarray  # o - 1
    shared_prefix: int


# The wait levels' probability intervals as columns, [level, 1]: each level's lower edge and width
_LEVEL_FROM, _LEVEL_WIDTH = W_LEVEL_EDGES[:-1, None], W_LEVEL_WEIGHTS[:, None]
_ONE_STEP = np.zeros(1, np.int64)  # the TPOT tables' bucket of D = 1: one step's share of each prompt
_FCFS_WAITS_KEPT = 256  # FCFS waits a LatencyModel and its with_slo copies remember (LatencyModel.fcfs_wait)
_MERGE_RATIO = 1.25  # cells whose prompt and decode steps agree within 25% are one cell to the latency model
_STEP_LEVELS = 64  # bins of a step's length in the per-token gap's step chain (LatencyPoint._step_chain)
_STEP_EDGES = np.arange(_STEP_LEVELS + 1, dtype=float)


@lru_cache(maxsize=256)
def _cells(prof: TokenProfile) -> _Cells:
    """The profile's cells, merged where prompt length and decode steps fall in the same 25%
    log-bucket (moments kept exact): the latency model's cost is per cell, and a histogram's
    cells split by total length too, which adds nothing here."""
    count = prof.cell_requests
    p_key = np.floor(np.log(np.maximum(prof.cell_prompt_tokens, 1.0)) / math.log(_MERGE_RATIO)).astype(np.int64)
    d_key = np.floor(np.log1p(prof.cell_decode_steps) / math.log(_MERGE_RATIO)).astype(np.int64)
    _, group = np.unique(np.stack([p_key, d_key]), axis=1, return_inverse=True)
    group = group.ravel()
    weight = np.bincount(group, count)

    def mean(x):
        return np.bincount(group, count * x) / weight

    s = prof.shared_prefix_tokens
    prompt = mean(prof.cell_prompt_tokens)
    cells = _Cells(weight / weight.sum(), prompt, mean(prof.cell_prompt_sq), np.maximum(prompt - s, 1.0),
                   mean(prof.cell_decode_steps), s)
    for a in (cells.weight, cells.prompt, cells.prompt_sq, cells.new_tokens, cells.decode_steps):
        a.flags.writeable = False  # shared by every model of the class
    return cells


# -------------------------------------------------------------------- TPOT tables


@dataclass(frozen=True, eq=False)
class _WorkTables:
    """P(Y > y) for Y compound Poisson: m expected prompts, each the FLOPs of its first D·k new
    tokens, per decode-step bucket (rows of D), m on _M_GRID, y on a grid per (D, m)."""

    bucket_d: np.ndarray  # representative decode steps per bucket (the last: every larger D too)
    survival: np.ndarray  # [bucket, m, y] flattened, each row ending in a 0 past the grid
    dy_flops: np.ndarray  # [bucket, m]
    mean_flops: np.ndarray  # E[J] per bucket


def _prefill_flops(tokens: np.ndarray, shared: int, params_active: float, attn: AttentionFlops) -> np.ndarray:
    """FLOPs of a prompt's first `tokens` positions after a shared prefix (span_flops of [S, S + tokens))."""
    return 2.0 * params_active * tokens + attn.span(float(shared), shared + tokens)


@lru_cache(maxsize=128)
def _work_tables(cells: _Cells, chunk_cap: int, params_active: float, attn: AttentionFlops) -> _WorkTables:
    d_max = max(float(cells.decode_steps.max()), 1.0)
    bucket_d = np.unique(np.round(_D_RATIO ** np.arange(0, math.ceil(math.log(d_max, _D_RATIO)) + 2)))
    longest = float(cells.new_tokens.max())
    # Past the first bucket whose D·k covers the longest prompt no prompt is capped any more: every
    # later bucket's table is that one's, so the last bucket kept stands for every larger D.
    covers = np.flatnonzero(bucket_d * chunk_cap >= longest)
    if covers.size:
        bucket_d = bucket_d[:covers[0] + 1]
    return _compound_tables(cells, bucket_d, chunk_cap, params_active, attn)


@lru_cache(maxsize=128)
def _rider_tables(cells: _Cells, chunk_cap: int, params_active: float, attn: AttentionFlops) -> _WorkTables:
    """_work_tables' first bucket alone (D = 1: each prompt at most one step's `chunk_cap` tokens),
    the riders' work of LatencyPoint.ttft_survival, built on its own: a class asked for a TTFT
    share may never need its TPOT tables, whose other buckets cost more."""
    return _compound_tables(cells, np.ones(1), chunk_cap, params_active, attn)


def _compound_tables(cells: _Cells, bucket_d: np.ndarray, chunk_cap: int, params_active: float,
                     attn: AttentionFlops) -> _WorkTables:
    nb, nm = bucket_d.size, _M_GRID.size
    survival = np.zeros((nb, nm, _Y_GRID + 1))
    dy = np.ones((nb, nm))
    mean = np.zeros(nb)
    w = cells.weight
    damp = tilt(_Y_GRID)
    for b, d in enumerate(bucket_d):
        jumps = _prefill_flops(np.minimum(cells.new_tokens, d * chunk_cap), cells.shared_prefix, params_active, attn)
        m1, m2 = float(np.dot(w, jumps)), float(np.dot(w, jumps**2))
        mean[b] = m1
        span = _M_GRID * m1 + 8 * np.sqrt(_M_GRID * m2) + float(jumps.max())
        dy[b] = span / (_Y_GRID - 1)
        pmf = split_mass_rows(jumps, w, dy[b], _Y_GRID)
        phi = np.fft.rfft(pmf * damp, axis=1) - 1.0
        total = np.fft.irfft(np.exp(_M_GRID[:, None] * phi), _Y_GRID, axis=1) / damp
        survival[b, :, :_Y_GRID] = np.clip(1.0 - np.cumsum(np.clip(total, 0, None), axis=1), 0.0, 1.0)
    return _WorkTables(bucket_d, survival.ravel(), dy, mean)


def _table_survival(t: _WorkTables, bucket: np.ndarray, m: np.ndarray, y_flops: np.ndarray) -> np.ndarray:
    """P(Y > y) from the tables: log-linear in m between grid rows; m below the grid scales
    the first row (P ≈ m·P(J > y) for rare arrivals); m above it uses the last row. bucket
    and y_flops broadcast against m (a cell's bucket and threshold are the same at every level)."""
    if not m.size:
        return np.zeros(np.broadcast_shapes(np.shape(bucket), m.shape, np.shape(y_flops)))
    m_min = m.min()
    below = m_min < _M_GRID[0]  # else lm >= 0, and the clamps from below change nothing
    lm = np.log((np.maximum(m, 1e-300) if m_min <= 1e-300 else m) / _M_GRID[0]) / _LOG_M_STEP
    i = lm.astype(np.int64)  # the floor where lm >= 0; where lm < 0 both clamp to 0
    if below:
        np.maximum(i, 0, out=i)
    np.minimum(i, _M_GRID.size - 2, out=i)
    frac = lm - i
    if below:
        np.maximum(frac, 0.0, out=frac)
    np.minimum(frac, 1.0, out=frac)
    row_at = bucket * _M_GRID.size + i  # the table row of (bucket, m's grid row)
    dy = t.dy_flops.ravel()
    positive = bool(y_flops.min() > 0)  # else k needs its clamp from below, and y <= 0 reads 1

    def row(j):
        k = y_flops / dy[j]
        if not positive:
            np.maximum(k, 0, out=k)
        np.minimum(k, _Y_GRID, out=k)
        return np.take(t.survival, j * (_Y_GRID + 1) + k.astype(np.int64))

    value = row(row_at) * (1 - frac)
    value += row(row_at + 1) * frac
    if below:
        value = value * np.where(m < _M_GRID[0], m / _M_GRID[0], 1.0)
    return value if positive else np.where(y_flops <= 0, 1.0, value)


@lru_cache(maxsize=512)
def _band_tpot_static(cells: _Cells, ranges: tuple[tuple[int, int | None], ...], band: int, table_cap: int,
                      params_active: float, attn: AttentionFlops):
    """A band's cells with a decode step, their decode steps and table buckets, the work tables,
    the cells' total weight and each cell's weight at each wait level (the same at every
    operating point, and, the tables being in FLOPs, on every GPU, tp and dtype of the model);
    None when no cell decodes. The arrays are read-only: every deployment of the class shares them."""
    held = _band_cells(cells, ranges)[band]
    held = held[cells.decode_steps[held] >= 1]
    if held.size == 0:
        return None
    tables = _work_tables(cells, table_cap, params_active, attn)
    d = cells.decode_steps[held]
    bucket = np.clip(np.searchsorted(tables.bucket_d, d, side="right") - 1, 0, tables.bucket_d.size - 1)
    w = cells.weight[held]
    # a cell's weight at each wait level (WaitDistribution.levels: the same weights for every wait)
    prob = w[:, None] * W_LEVEL_WEIGHTS[None, :]
    for a in (held, d, bucket, prob):
        a.flags.writeable = False
    return held, d, bucket, tables, float(w.sum()), prob


# -------------------------------------------------------------------- the model


@dataclass(frozen=True)
class _Chunks:
    """Every prefill chunk of the class, by cost, for the per-token gap distribution."""

    flops_desc: np.ndarray
    cum_weight: np.ndarray  # Σ request share of chunks costing at least flops_desc[i]


def chunk_spans(cells: _Cells, which: np.ndarray, chunk_cap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every chunk of `chunk_cap` tokens of the cells `which`: the cell of each, and its first and
    end token positions in the prompt."""
    n_chunks = np.ceil(cells.new_tokens[which] / chunk_cap).astype(np.int64)
    owner = np.repeat(which, n_chunks)
    j = np.arange(owner.size) - np.repeat(np.cumsum(n_chunks) - n_chunks, n_chunks)
    start = cells.shared_prefix + j * chunk_cap
    end = np.minimum(start + chunk_cap, cells.shared_prefix + cells.new_tokens[owner])
    return owner, start, end


def span_flops(start: np.ndarray, end: np.ndarray, params_active: float, attn: AttentionFlops) -> np.ndarray:
    """FLOPs of prefilling a prompt's tokens [start, end): 2 x active params a token, plus causal
    attention over the tokens before each (AttentionFlops.span; roofline.StepModel.prefill_flops, per chunk)."""
    return 2.0 * params_active * (end - start) + attn.span(start, end)


def chunk_flops(cells: _Cells, which: np.ndarray, chunk_cap: int, params_active: float,
                attn: AttentionFlops) -> tuple[np.ndarray, np.ndarray]:
    """Every chunk of `chunk_cap` tokens of the cells `which`: the cell of each and its FLOPs."""
    owner, start, end = chunk_spans(cells, which, chunk_cap)
    return owner, span_flops(start, end, params_active, attn)


def _by_cost(flops: np.ndarray, weight: np.ndarray) -> _Chunks:
    """Chunks from the costliest, with the running sum of their weights."""
    order = np.argsort(-flops, kind="stable")
    return _Chunks(flops[order], np.cumsum(weight[order]))


@lru_cache(maxsize=128)
def _gap_chunks(cells: _Cells, chunk_cap: int, params_active: float, attn: AttentionFlops) -> tuple[_Chunks, _Chunks]:
    """The class's chunks for the per-token gap tail (LatencyPoint.itl_exceed), by cost: those after
    each prompt's first, each weighted by its prompt's share of requests (the steps a prompt longer
    than a step's chunk fills on its own once its first chunk has ridden in with the other arrivals);
    and every chunk, weighted by its share of all prefill work, cum_weight ending at 1 (a chunk drawn
    from a backlog of prefill seconds: LatencyPoint._queued_above)."""
    owner, start, end = chunk_spans(cells, np.arange(cells.weight.size), chunk_cap)
    flops = span_flops(start, end, params_active, attn)
    later = start > cells.shared_prefix  # a prompt's chunk j > 0
    work = cells.weight[owner] * flops
    return (_by_cost(flops[later], cells.weight[owner[later]]),
            _by_cost(flops, work / max(float(work.sum()), 1e-300)))


def _min_mean(values: np.ndarray, weight: np.ndarray, at: np.ndarray) -> np.ndarray:
    """E[min(value, a)] for each a in `at` (weights normalised), by sorted prefix sums (a stable
    sort: the sums' order among equal values is then the same on every CPU, whose sort numpy picks)."""
    order = np.argsort(values, kind="stable")
    v, w = values[order], weight[order] / weight.sum()
    below = np.concatenate([[0.0], np.cumsum(w * v)])
    mass = np.concatenate([[0.0], np.cumsum(w)])
    i = np.searchsorted(v, at, side="right")
    return below[i] + at * (1.0 - mass[i])


def _past_square(values: np.ndarray, weight: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Σ weight·(value - a)+² for each a in `at`, by suffix sums over the sorted values (stably, as
    _min_mean)."""
    order = np.argsort(values, kind="stable")
    v, w = values[order], weight[order]
    suffix = [np.concatenate([np.cumsum((w * v**k)[::-1])[::-1], [0.0]]) for k in (0, 1, 2)]
    i = np.searchsorted(v, at, side="right")
    return np.maximum(suffix[2][i] - 2 * at * suffix[1][i] + at**2 * suffix[0][i], 0.0)


def _band_ranges(slo: SLO) -> tuple[tuple[int, int | None], ...]:
    """The prompt ranges of the bands: all of the targets that LatencyModel.band_cells depends on."""
    return tuple((b.prompt_min_tokens, b.prompt_below_tokens) for b in slo.bands)


@lru_cache(maxsize=256)
def _band_cells(cells: _Cells, ranges: tuple[tuple[int, int | None], ...]) -> tuple[np.ndarray, ...]:
    """The cells whose mean prompt falls in each band's range (Band.holds), read-only: every
    deployment of a class and every set of targets with these bands shares them."""
    out = []
    for lo, below in ranges:
        held = np.flatnonzero(Band("", lo, below).holds(cells.prompt))
        held.flags.writeable = False
        out.append(held)
    return tuple(out)


@lru_cache(maxsize=256)
def _band_weights(cells: _Cells, ranges: tuple[tuple[int, int | None], ...]) -> tuple[tuple[np.ndarray, float], ...]:
    """Each band's cell weights (read-only) and their total, which every TTFT share of the band divides
    by: constants of the class and bands, asked at every operating point."""
    out = []
    for held in _band_cells(cells, ranges):
        w = cells.weight[held]
        w.flags.writeable = False
        out.append((w, float(w.sum())))
    return tuple(out)


def _prefill_rates(step: StepModel, cells: _Cells) -> tuple[np.ndarray, float, float, float]:
    """Each cell's prefill seconds (read-only), the class's FLOPs-to-seconds rate, and the mean
    prefill seconds and new prompt tokens: constants of every operating point (LatencyPoint),
    the same for every KV dtype, context limit and set of targets of a replica and class."""
    prefill_s = np.asarray(step.prefill_s(cells.prompt, cells.prompt_sq, cells.shared_prefix), float)
    prefill_s.flags.writeable = False
    flops = _prefill_flops(cells.new_tokens, cells.shared_prefix, step.params_active, step.attention)
    # One table serves every GPU: FLOPs to seconds at the class's effective rate (the
    # all-reduce bytes of prefill are a few percent, folded in proportionally).
    flops_per_s = float(np.dot(cells.weight, flops) / max(np.dot(cells.weight, prefill_s), 1e-30))
    return (prefill_s, flops_per_s, float(np.dot(cells.weight, prefill_s)),
            float(np.dot(cells.weight, cells.new_tokens)))


_PREFILL_RATES = ObjectMemo(_prefill_rates)


def stretched_step_s(decode_s: float, prefill_share: float) -> float:
    """The mean length of a step whose decode part takes decode_s, when prefill chunks ride in
    the steps and take the share ρ = prefill_share of GPU time (λ·E[T_pf]; planner.capacity's
    module docstring): decode_s / (1 - ρ); inf from ρ = 1, where the prefill queue never empties."""
    return decode_s / (1.0 - prefill_share) if prefill_share < 1 else math.inf


class LatencyModel:
    """Latency distributions of one (deployment, class) pair; `at` gives them at one operating point."""

    def __init__(self, step: StepModel, prof: TokenProfile, chunk_tokens: int, slo: SLO,
                 long_prefill_cap_tokens: int | None = None):
        self.step, self.prof, self.slo = step, prof, slo
        self.chunk_tokens = int(chunk_tokens)
        self.cap = int(long_prefill_cap_tokens) if long_prefill_cap_tokens else None
        self.cells = _cells(prof)
        c = self.cells
        self.prefill_s, self.flops_per_s, self.mean_prefill_s, self.mean_new_tokens = _PREFILL_RATES((step, c))
        self.band_ranges = _band_ranges(slo)
        self.band_cells = _band_cells(c, self.band_ranges)
        self.band_weights = _band_weights(c, self.band_ranges)
        self._tpot_static: dict[int, tuple | None] = {}
        self._full_step_prefill_s: float | None = None
        self._capped: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._fcfs_waits: dict[tuple, WaitDistribution | None] = {}  # shared by the copies of with_slo

    @property
    def full_step_prefill_s(self) -> float:
        """The prefill a busy decode step carries: a full budget of prompt tokens (chunk_tokens),
        whatever θ (θ caps one prompt's share of a step, and the prompts queued behind it fill the
        rest), short prompts packed several to a step. Which prompt tokens is a draw weighted by
        prefill work (a long prompt's late chunks cost most a token, its early ones little): a
        request whose every step is full sees their work-weighted mean cost a token, not the
        costliest one. No request's TPOT exceeds t_own + this (LatencyPoint.tpot_exceed). The whole
        budget, not the budget less the decoders' tokens, and a cost a token weighted by work, not by
        tokens: both put the cut a little higher, where it can only let more of the tail through."""
        if self._full_step_prefill_s is None:
            owner, start, end = chunk_spans(self.cells, np.arange(self.cells.weight.size), self.chunk_tokens)
            tokens = end - start
            flops = span_flops(start, end, self.step.params_active, self.step.attention)
            work = self.cells.weight[owner] * flops
            if work.sum() > 0:
                per_token = float(np.dot(work, flops / np.maximum(tokens, 1)) / work.sum())
                self._full_step_prefill_s = self.chunk_tokens * per_token / self.flops_per_s
            else:
                self._full_step_prefill_s = 0.0
        return self._full_step_prefill_s

    def tpot_static(self, band: int):
        """_band_tpot_static of this model's class, band and step FLOPs (remembered here too)."""
        if band not in self._tpot_static:
            self._tpot_static[band] = _band_tpot_static(self.cells, self.band_ranges, band, self.table_cap,
                                                        self.step.params_active, self.step.attention)
        return self._tpot_static[band]

    def with_slo(self, slo: SLO) -> LatencyModel:
        """The same replica and class judged against other targets (a sweep of TTFT limits): the
        cells and prefill times are shared, only the bands' cells are recomputed."""
        if slo == self.slo:
            return self
        other = shallow_copy(self)
        other.slo = slo
        ranges = _band_ranges(slo)
        if ranges != self.band_ranges:
            other.band_ranges, other.band_cells = ranges, _band_cells(self.cells, ranges)
            other.band_weights = _band_weights(self.cells, ranges)
            other._tpot_static = {}
        # else the bands hold the same cells, and tpot_static, which no limit enters, is shared
        return other

    def capped_chunks(self, cap: int) -> tuple[np.ndarray, np.ndarray]:
        """The chunks of the prompts longer than `cap` (θ): the cell of each and its FLOPs."""
        if cap not in self._capped:
            self._capped[cap] = chunk_flops(self.cells, np.flatnonzero(self.cells.new_tokens > cap), cap,
                                            self.step.params_active, self.step.attention)
        return self._capped[cap]

    @cached_property
    def rider_tables(self) -> _WorkTables:
        """The riders' work tables (LatencyPoint.ttft_survival): D = 1 of the TPOT tables."""
        return _rider_tables(self.cells, self.table_cap, self.step.params_active, self.step.attention)

    @property
    def table_cap(self) -> int:
        """Prompt tokens one prompt takes in a busy step, for the TPOT and gap tables: θ, or the
        whole budget (the decodes' share of it is small beside a chunk, and one table then
        serves every operating point)."""
        return min(self.cap, self.chunk_tokens) if self.cap else self.chunk_tokens

    def fcfs_wait(self, rate_rps: float, budget: float, decode_s: float, service_s: np.ndarray,
                  backlog: Backlog | None) -> WaitDistribution | None:
        """The FCFS prefill queue's wait at an operating point (mg1_wait; with a Backlog, read in its
        regime by backlog_wait), service_s = prefill_s + new_tokens / budget · decode_s. Remembered
        across the copies of with_slo, which meet the same points again (a sweep of TTFT targets, other
        targets): no target enters the wait (prefill_wait.mg1_wait)."""
        key = (rate_rps, budget, decode_s, backlog)
        if key in self._fcfs_waits:
            return self._fcfs_waits[key]
        wait = mg1_wait(rate_rps, service_s, self.cells.weight)
        if wait is not None and backlog is not None and wait.mean_s > 0:
            regime = regime_service_s(self.prefill_s, self.cells.new_tokens, self.chunk_tokens, backlog)
            wait = backlog_wait(wait, rate_rps, service_s, regime, self.cells.weight, backlog.fill_s)
        if len(self._fcfs_waits) >= _FCFS_WAITS_KEPT:  # the oldest goes: a search revisits recent points
            del self._fcfs_waits[next(iter(self._fcfs_waits))]
        self._fcfs_waits[key] = wait
        return wait

    def at(self, rate_rps: float, decode_s: float, resident: float, backlog: Backlog | None = None,
           own_decode_s: float | None = None, itl_mean: Callable[[], float] | None = None) -> LatencyPoint:
        return LatencyPoint(self, rate_rps, decode_s, resident, backlog, own_decode_s, itl_mean)


@lru_cache(maxsize=64)
def _fcfs_cells(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A point's per-cell wait index, lookback and window openness where every cell sees the FCFS
    wait (0, 0 and 1 for each of n cells), read-only: shared by every such point."""
    out = (np.zeros(n, np.int64), np.zeros(n), np.ones(n))
    for a in out:
        a.flags.writeable = False
    return out


class LatencyPoint:
    """The distributions at arrival rate λ, decode part t_dec and mean resident batch N; with a
    Backlog, the FCFS wait's tail is the backlog regime's (planner.backlog). own_decode_s: the
    decode part of the steps a decoding request sees, with its own sequence in them (t_own, for
    TPOT and gaps) [default: t_dec]. itl_mean: the mean per-token gap, computed when asked
    (planner.capacity.ReplicaModel.itl_s, which adds the prompts queued behind a request to the
    mean step it sees) [default: that mean step alone]."""

    def __init__(self, model: LatencyModel, rate_rps: float, decode_s: float, resident: float,
                 backlog: Backlog | None = None, own_decode_s: float | None = None,
                 itl_mean: Callable[[], float] | None = None):
        self.m, self.rate, self.t_dec = model, float(rate_rps), float(decode_s)
        self.t_own = self.t_dec if own_decode_s is None else float(own_decode_s)
        self._itl_mean = itl_mean
        c = model.cells
        budget = max(model.chunk_tokens - resident, 1.0)
        k = min(model.table_cap, budget)
        self.k = model.table_cap
        # The tokens a step takes of each prompt: θ for the capped ones, else the budget (all of
        # them without θ, where k is the budget).
        per_step = budget if k == budget else np.where(c.new_tokens > k, k, budget)
        per_budget = c.new_tokens / budget  # each prompt's tokens in budgets
        steps_own = np.maximum(1.0, np.ceil(per_budget if k == budget else c.new_tokens / per_step))
        self.residual_s = self._residual_step(steps_own)
        self.own_s = model.prefill_s + steps_own * self.t_dec + self.residual_s
        self._add_packed(budget, per_step, steps_own)
        self.rho = self.rate * model.mean_prefill_s  # prefill's share of time
        # Which wait each cell sees: the FCFS queue's, or under θ the capped prompts' shared-step wait,
        # plus the in-flight chunks for prompts of at most θ tokens (planner.prefill_cap).
        # window_open: whether a cell's wait and own prefill open its TPOT window (read-only: _capped_waits
        # replaces the three)
        self.cell_wait, self.lookback_s, self.window_open = _fcfs_cells(c.weight.size)
        self.spread = None  # under θ: the spread of a capped prompt's stay (planner.prefill_cap.stay_spread)
        self.random_riders = False  # whether the TTFT tail draws the riders (ttft_survival), or takes their mean
        capped = c.new_tokens > k if model.cap and k < budget else None
        if capped is not None and capped.any() and self.rho < 1:
            self._capped_waits(budget, k, steps_own, capped, backlog)
        else:
            service = model.prefill_s + per_budget * self.t_dec
            self.wait = model.fcfs_wait(self.rate, budget, self.t_dec, service, backlog)
            self.waits = (self.wait,)
            self.random_riders = True
        self.stable = self.wait is not None
        self.mean_step = stretched_step_s(self.t_dec, self.rho)
        self.own_mean_step = stretched_step_s(self.t_own, self.rho)  # as a decoder sees it
        self.full_step_prefill_s = model.full_step_prefill_s

    def _capped_waits(self, budget: float, k: float, steps_own: np.ndarray, capped: np.ndarray,
                      backlog: Backlog | None) -> None:
        """Waits under vLLM's long-prefill cap θ (planner.prefill_cap states the model); with a
        Backlog, a long wait is read from the capped queue at the state it reaches."""
        c, m = self.m.cells, self.m
        # Work a prompt brings: its compute and its tokens' share of the decode part of full steps.
        work_s = m.prefill_s + c.new_tokens / budget * self.t_dec
        share = c.weight[capped]
        rho_short = self.rate * float(np.dot(c.weight[~capped], work_s[~capped]))
        # A step's cost: the capped prompts' compute a token (token-weighted) and the decode part.
        per_token_s = float(np.dot(share, m.prefill_s[capped]) / max(np.dot(share, c.new_tokens[capped]), 1e-300))
        regime = None
        step = SlotStep(k, budget, self.t_dec, per_token_s)
        if backlog is not None:
            # Decoders follow the slots (SlotStep.state_decode_s), on the line from N to the regime's n_b.
            resident = m.chunk_tokens - budget
            slope = (backlog.decode_s - self.t_dec) / (backlog.decoders - resident) if backlog.decoders > resident else 0.0
            step = SlotStep(k, budget, self.t_dec, per_token_s,
                            decode_rate=self.rate * float(np.dot(c.weight, c.decode_steps)), decoders=resident,
                            decode_slope_s=slope, max_decoders=max(backlog.decoders, resident),
                            short_share=self.rate * float(np.dot(c.weight[~capped], m.prefill_s[~capped])))
            work_b = regime_service_s(m.prefill_s, c.new_tokens, m.chunk_tokens, backlog)
            step_b = dataclasses.replace(step, budget_tokens=max(m.chunk_tokens - backlog.decoders, 1.0),
                                         decode_s=backlog.decode_s, decoders=max(backlog.decoders, resident))
            regime = CappedRegime(work_b[capped], self.rate * float(np.dot(c.weight[~capped], work_b[~capped])),
                                  step_b, backlog.fill_s)
        owner, chunk_flops = m.capped_chunks(int(k))
        chunk_s = chunk_flops / m.flops_per_s
        waits = capped_waits(self.rate * float(share.sum()), work_s[capped], share, rho_short,
                             step, np.ceil(c.new_tokens[capped] / k),
                             m.prefill_s[capped], chunk_s, c.weight[owner] * (chunk_s + self.t_dec), regime)
        if waits is None:
            self.wait, self.waits = None, (None,)
            return
        self.wait, short_wait, self.spread = waits
        self.waits = (self.wait, short_wait)
        self.cell_wait = np.where(capped, 0, 1)
        # A capped prompt stays S / (1 - ρ) in the shared steps (processor sharing), its S counting
        # the decode part of each of its ceil(p/θ) steps, which it rides however few prompts share them.
        hold_s = (m.prefill_s[capped] + steps_own[capped] * self.t_dec) / max(1.0 - self.rho, 1e-12)
        own = self.own_s.copy()
        own[capped] = hold_s + self.residual_s
        self.own_s = own
        # The stay's spread (ttft_exceed): its own work a step, a = (compute + steps·t_dec) / steps.
        self.spread_hold_s = np.where(capped, np.concatenate([[0.0], hold_s])[np.cumsum(capped)], 0.0)
        self.spread_own_step_s = np.where(capped, (m.prefill_s + steps_own * self.t_dec) / steps_own, 0.0)
        # Capped prompts in flight when a request arrives may still prefill when it decodes, its
        # own time o later: their remaining hold R is equilibrium-distributed (the inspection
        # paradox), and the part of it past o, E[(R - o)+] = E[(T - o)+²] / 2E[T], widens the
        # window of prompts whose work rides its decode steps.
        self.lookback_s = _past_square(hold_s, share, self.own_s) / (2 * float(np.dot(share, hold_s)))
        # Prompts arriving while a capped prompt waits and prefills are admitted beside it and are
        # done before it decodes (shorter ones pass it), save the capped ones still in flight: for
        # a capped prompt only those (the lookback) and the arrivals during its decode ride it.
        # Capped prompts arriving during its wait and prefill that are still in flight when it decodes
        # do ride it: a share of the window, the capped prompts' share of prefill work times the
        # mean part of a window of length o that such a prompt's hold covers, E[min(T, o)] / o.
        work_share = float(np.dot(share, m.prefill_s[capped]) / max(np.dot(c.weight, m.prefill_s), 1e-300))
        own = self.own_s[capped]
        covered = _min_mean(hold_s, share, own) / np.maximum(own, 1e-12)
        open_ = np.ones(c.weight.size)
        open_[capped] = work_share * covered
        self.window_open = open_

    def _add_packed(self, budget: float, per_step: np.ndarray | float, steps_own: np.ndarray) -> None:
        """The step that emits a request's first token also carries the prompts queued behind it
        (the riders, ttft_survival), up to the budget its own last chunk leaves: in the mean, the
        tokens that arrived during about one mean step, λ·E[p]·t̄ (the queue the step in flight
        builds), at the class's mean cost a token. own_s holds that mean; packed_s is what it adds,
        and room_s the most the riders can add, in seconds of prefill."""
        c, m = self.m.cells, self.m
        self.packed_s, self.room_s = np.zeros(c.weight.size), np.zeros(c.weight.size)
        self.own_alone_s = self.own_s  # own_s without the riders' mean, which replaces own_s below
        rho = self.rate * m.mean_prefill_s
        if rho >= 1:
            return
        mean_step = stretched_step_s(self.t_dec, rho)
        tokens = self.rate * m.mean_new_tokens * mean_step
        last_chunk = c.new_tokens - (steps_own - 1) * per_step
        room = np.maximum(budget - last_chunk, 0.0)
        per_token_s = m.mean_prefill_s / m.mean_new_tokens
        self.packed_s, self.room_s = np.minimum(tokens, room) * per_token_s, room * per_token_s
        self.own_s = self.own_s + self.packed_s

    def _residual_step(self, steps_own: np.ndarray) -> float:
        """Mean remaining time of the step in flight when a request arrives, E[t²] / 2E[t] (the
        inspection paradox): a share f of steps carries prefill, f·c = ρ·t̄ with t̄ = t_dec / (1 - ρ)
        the mean step, f = min(1, λ·E[steps a prompt's prefill takes]·t̄)."""
        c = self.m.cells
        rho = self.rate * self.m.mean_prefill_s
        if rho >= 1:
            return math.inf
        mean = stretched_step_s(self.t_dec, rho)
        f = min(1.0, self.rate * float(np.dot(c.weight, steps_own)) * mean)
        if f <= 0:
            return 0.5 * self.t_dec
        chunk = rho * mean / f
        return ((1 - f) * self.t_dec**2 + f * (self.t_dec + chunk) ** 2) / (2 * mean)

    # ---- per band
    def ttft_exceed(self, band: int, limit_s: float) -> float:
        """Share of the band's requests with TTFT above limit_s."""
        if not self.stable:
            return 1.0
        cells = self.m.band_cells[band]
        if cells.size == 0:
            return 0.0
        w, total = self.m.band_weights[band]
        return float(np.dot(w, self.ttft_survival(cells, limit_s))) / total

    def _capped_ttft_exceed(self, cells: np.ndarray, limit_s: float) -> np.ndarray:
        """P(W + H·F > x) for capped cells: H the stay's mean, F = (a + Z) / (a + E[Z]) its spread
        (planner.prefill_cap.stay_spread), W the wait for a slot; W = 0 with probability 1 - P(W > 0),
        and beside a wait F is taken at Z's levels."""
        sp, hold, a = self.spread, self.spread_hold_s[cells], self.spread_own_step_s[cells]
        x = limit_s - (self.own_s[cells] - hold)  # past the residual step
        scale = a + sp.mean_s
        blocked = float(self.waits[0].survival(0.0))
        safe = np.maximum(hold, 1e-300)
        free = (1.0 - blocked) * sp.exceed(x / safe * scale - a)
        f = (a[:, None] + sp.level_s[None, :]) / scale[:, None]
        waiting = self.waits[0].survival(np.maximum(x[:, None] - hold[:, None] * f, 0.0)) @ sp.level_weight
        return np.minimum(free + waiting, 1.0)

    def ttft_survival(self, cells: np.ndarray, limit_s: float) -> np.ndarray:
        """P(TTFT > limit_s) for each cell; 1 where the queue never clears.

        A request's first token waits W, its own prefill, and the riders: prompts that arrive after
        it, before the step that prefills it starts, and are packed into that step behind it (vLLM
        fills a step's budget first come first served). Their mean, at most the room the request's
        own last chunk leaves, is in own_s (_add_packed). Where every prompt waits in the one FCFS
        queue (no prompt capped by θ at this point) the tail takes them as they come, because a mean
        misses the tail they make; under θ the capped prompts' queue (_capped_ttft_exceed for the
        capped cells) keeps the mean. The riders arrive while the request waits: W, and the decode
        part of the step in flight, t_dec / 2 on average, so given W = w they are compound Poisson
        with λ·(w + t_dec / 2) expected prompts, each its prefill (at most one step's tokens: the
        D = 1 row of the TPOT tables). Then
            P(TTFT > x + own) = P(W > x) + E[P(min(R_W, r) > x - W); W <= x],
        r the room. min(R, r) > x - W needs x - r < W <= x: the second term is taken at W's levels
        (WaitDistribution.levels), each counting its share of that range of W (read off W's cdf),
        with the riders expected at the level itself and the threshold x - W at the level clipped
        into the range. Every level's term then falls as x grows while its mass moves to P(W > x),
        so the share falls with the limit and, the levels and the room moving with N, rises with the
        load, as the capacity searches need (tests/test_latency.py holds both).
        In the replayed Azure conversation trace, 86-94% of the requests in the TTFT p99 tail had a
        rider, most of them a short prompt behind a long one, and the model with the riders' mean
        alone was 17-26% under the simulator's TTFT p99 (bench/accuracy.py, 2026-12-02). The mean
        TTFT keeps one mean step's arrivals (own_s): against the simulator's mean, on that trace on
        an H100, an A100 and an L40S and with constant prompts at 50-95% load, it is the closer of
        the two windows (the riders' tie to W matters in the tail, where W is long)."""
        if not self.stable:
            return np.ones(len(cells))
        if not self.random_riders:
            p = self._wait_survival(cells, limit_s - self.own_s[cells])
            if self.spread is not None:
                p = np.where(self.cell_wait[cells] == 0, self._capped_ttft_exceed(cells, limit_s), p)
            return p
        x = limit_s - self.own_alone_s[cells]
        n = x.size
        lo = x - self.room_s[cells]
        waited = self.wait.survival(np.concatenate([x, lo]))  # P(W > x), then P(W > x - r)
        # each level's share of x - r < W <= x: its probability interval cut at F(x - r) and F(x),
        # laid out [level, cell] so that numpy's inner loops run along the cells, not the few levels
        share = np.minimum(np.maximum((1.0 - waited[:n]) - _LEVEL_FROM, 0.0), _LEVEL_WIDTH)
        share -= np.minimum(np.maximum((1.0 - waited[n:]) - _LEVEL_FROM, 0.0), _LEVEL_WIDTH)
        pair = np.flatnonzero(share > 0)  # a 2-d nonzero costs several times this and the divmod
        if not pair.size:
            return waited[:n]
        level, cell = np.divmod(pair, n)
        levels, _ = self.wait.levels()
        at = np.minimum(np.maximum(levels[level], lo[cell]), x[cell])
        np.maximum(at, 0.0, out=at)
        ride = _table_survival(self.m.rider_tables, _ONE_STEP, self.rate * (levels[level] + 0.5 * self.t_dec),
                               np.maximum(x[cell] - at, 1e-300) * self.m.flops_per_s)
        ride *= np.take(share, pair)
        # bincount adds in the order given: each cell's terms level by level, as they always were
        return np.minimum(waited[:n] + np.bincount(cell, ride, minlength=n), 1.0)

    def _wait_survival(self, cells: np.ndarray, x_s: np.ndarray) -> np.ndarray:
        """P(wait > x) for each cell, from the wait its cell sees (self.cell_wait)."""
        if len(self.waits) == 1:
            return self.wait.survival(x_s)
        which = self.cell_wait[cells]
        return np.where(which == 0, self.waits[0].survival(x_s), self.waits[1].survival(x_s))

    def ttft_mean(self, band: int) -> float:
        if not self.stable:
            return math.inf
        cells = self.m.band_cells[band]
        w = self.m.cells.weight[cells]
        waits = np.array([x.mean_s for x in self.waits])[self.cell_wait[cells]]
        return float(np.dot(w, self.own_s[cells] + waits) / w.sum()) if cells.size else 0.0

    def _tpot_terms(self, band: int):
        """Per (cell with a decode step, W level): probability weight, D, expected arrivals in the
        window [arrival, decode start + D·t_own], and the table bucket of D ([cells, 1] where the
        same at every level)."""
        static = self.m.tpot_static(band)
        if static is None:
            return None
        cells, d, bucket, tables, total, prob = static
        levels = self.wait.levels()[0][None, :] if self._one_open_wait else self._wait_levels(cells)[0]
        return (prob, d[:, None], self._tpot_window(cells, levels, d), bucket[:, None]), tables, total

    @property
    def _one_open_wait(self) -> bool:
        """One FCFS wait for every cell, every TPOT window open, nothing looked back on."""
        return self.spread is None and len(self.waits) == 1

    def _tpot_window(self, cells: np.ndarray, levels: np.ndarray, d: np.ndarray) -> np.ndarray:
        """Expected arrivals in each cell's TPOT window [arrival, decode start + D·t_own] at each
        W level ([cells, levels]; levels [1, levels] where every cell shares them)."""
        if self._one_open_wait:  # the general form with its unit factors and zero terms left out (the same floats)
            return self.rate * ((levels + self.own_s[cells][:, None]) + (d * self.t_own)[:, None])
        open_ = self.window_open[cells]
        return self.rate * (open_[:, None] * (levels + self.own_s[cells][:, None])
                            + (self.lookback_s[cells] + d * self.t_own)[:, None])

    def _riding_flops_allowed(self, d, limit_s: float):
        """The prefill work (FLOPs) riding a request of D decode steps before its TPOT passes
        limit_s: TPOT > x <=> Y > (1 - ρ)·D·(x - t_own) (module docstring)."""
        return (1 - self.rho) * d * (limit_s - self.t_own) * self.m.flops_per_s

    @property
    def tpot_most_s(self) -> float:
        """No request's TPOT exceeds its own step and a full step's prefill (full_step_prefill_s)."""
        return self.t_own + self.full_step_prefill_s

    def _wait_levels(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each cell's wait at the representative levels ([cells, levels], from the wait its cell
        sees: under θ a short prompt's differs from a capped one's) and the levels' weights."""
        per_wait = [wait.levels() for wait in self.waits]
        levels = np.stack([lv for lv, _ in per_wait])[self.cell_wait[cells]]
        return levels, per_wait[0][1]

    def tpot_exceed(self, band: int, limit_s: float) -> float:
        """Share of the band's requests (with two or more output tokens) whose TPOT exceeds limit_s:
        none where no request has a second token, whatever the load (the TTFT bounds that)."""
        if self.m.tpot_static(band) is None:
            return 0.0
        if not self.stable or self.rho >= 1:
            return 1.0
        if limit_s >= self.tpot_most_s:
            return 0.0
        terms = self._tpot_terms(band)
        (prob, d, window, bucket), tables, total = terms
        p = _table_survival(tables, bucket, window, self._riding_flops_allowed(d, limit_s))
        return float((prob * p).sum()) / total

    def tpot_mean(self, band: int) -> float:
        """NaN where no request of the band has a second output token (TPOT is undefined)."""
        if self.m.tpot_static(band) is None:
            return math.nan
        if not self.stable or self.rho >= 1:
            return math.inf
        terms = self._tpot_terms(band)
        (prob, d, window, bucket), tables, total = terms
        work_s = window * tables.mean_flops[bucket] / self.m.flops_per_s
        return float((prob * (self.t_own + work_s / ((1 - self.rho) * d))).sum()) / total

    def itl_exceed(self, limit_s: float) -> float:
        """Share of decode tokens whose gap (their step) exceeds limit_s: the steps the arrivals'
        first chunks ride (_step_chain), and on top of them those a long prompt's later chunks fill
        and those of the prompts queued behind a request's own prefill (_queued_above); each term
        rises with the load and falls with the limit, and so does their sum; at least the floors
        under θ (_capped_share) and from the mean gap (_mean_floor), which do too."""
        if not self.stable:
            return 1.0
        m = self.m
        if not m.cells.decode_steps.any():  # no request has a second token: no gap to exceed
            return 0.0
        if limit_s <= self.t_own:
            return 1.0
        later, _ = _gap_chunks(m.cells, self.k, m.step.params_active, m.step.attention)
        y = (limit_s - self.t_own) * m.flops_per_s
        i = int(np.searchsorted(-later.flops_desc, -y, side="left"))
        heavier = float(later.cum_weight[i - 1]) if i > 0 else 0.0
        share = self._riding_above(limit_s) + self.rate * self.own_mean_step * heavier + self._queued_above(y)
        if self._capped_share and limit_s < self.tpot_most_s:
            share = max(share, self._capped_share)
        return min(1.0, max(share, self._mean_floor(limit_s - self.t_own)))

    def _mean_floor(self, y_s: float) -> float:
        """A floor under P(gap > t_own + y) from the mean gap, taking a full step's prefill F as the
        most a step carries, as tpot_most_s does (F is a full budget at the work-weighted mean cost a
        token, not the costliest chunk: a 128k prompt's last chunk costs more): for X = gap - t_own in
        [0, F], E[X] <= y + (F - y)·P(X > y), so P(X > y) >= (E[X] - y) / (F - y) (Markov's inequality
        reversed, for a bounded variable). Where chunks cost more than F it errs high, and so does the
        mean it reads near saturation: where that mean passes t_own + F, every step counts as carrying
        a full step's prefill, and the median reads t_own + F. Near capacity on long prompts the queue is seldom empty and
        nearly every step carries a chunk of a long prompt, which the chain, the arrivals of one step
        riding the next, does not see: the long class of a 32k split of 'chat_long_tail' on two H100s
        at 90% of capacity had 58% of its decode tokens in steps that carry prefill in the simulator,
        24% by the other terms (its ITL p50 9 ms against 185 simulated; 144 ms with this floor, 345
        against 252 at 95%: bench/itl_tail.py). At or past the mean (a p99, say) it is 0: the tail is
        the terms' own."""
        span = self.m.full_step_prefill_s
        if span <= 0 or y_s >= span:
            return 0.0
        excess = min(self._mean_gap_s - self.t_own, span) if math.isfinite(self._mean_gap_s) else span
        return max(0.0, (excess - y_s) / (span - y_s))

    @cached_property
    def _capped_share(self) -> float:
        """Under θ (a prompt's tokens a step capped below the budget), the share of steps that carry
        prefill, each taken as full (t_own plus a full step's prefill: several prompts' capped chunks
        share a step, which the chain, one first chunk a prompt, does not see), from the mean gap:
        E[gap] - t_own = that share x a full step's prefill; a floor under the tail. 0 without θ.
        It errs high, as a plan should, and by as much as a step holds capped chunks: MLPerf's θ = 256
        in 1,024-token steps on the Azure trace read 34-56% under the simulator's ITL p99 without it
        (below its own mean), 3-6% over with it; θ = 2,048 in 8,192-token steps on 'chat_long_tail'
        within 3% from 80% of capacity, 40% over at half; θ = 1,024 in 8,192-token steps, a step full
        only with eight prompts in flight, 83-256% over below 80% (bench/itl_tail.py); θ = 512 in
        16,384-token steps on 6,000-token prompts about five times over at 30% (a reading's case)."""
        m = self.m
        span = m.full_step_prefill_s
        if not (m.cap and m.cap < m.chunk_tokens) or span <= 0 or not self.stable:
            return 0.0
        mean = self._mean_gap_s
        return min(1.0, max(0.0, (mean - self.t_own) / span)) if math.isfinite(mean) else 1.0

    def _queued_above(self, y_flops: float) -> float:
        """Share of decode tokens in the steps a request meets right after its own prefill, full of
        the prompts that queued behind it meanwhile: the mean gap's excess over the mean step
        (ReplicaModel.itl_s, the backlog B a request meets) in steps of a full budget's prefill,
        each as heavy as a chunk drawn by work (B is seconds of prefill), those heavier than y_flops.
        Long-context pools were 10-46% under the simulator's ITL p99 without it (a request's own
        long prefill lets prompts queue behind it, and its first gaps are theirs), 2-5% under with
        it (bench/itl_tail.py); short-context pools, where B is small, move by 1% or less."""
        steps = self._queued_steps
        if steps <= 0:
            return 0.0
        m = self.m
        _, chunks = _gap_chunks(m.cells, self.k, m.step.params_active, m.step.attention)
        i = int(np.searchsorted(-chunks.flops_desc, -y_flops, side="left"))
        return steps * (float(chunks.cum_weight[i - 1]) if i > 0 else 0.0)

    @cached_property
    def _queued_steps(self) -> float:
        """Full-budget steps of queued prompts a decode token meets (_queued_above), 0 without the mean ITL."""
        span = self.m.full_step_prefill_s
        if self._itl_mean is None or not self.stable or span <= 0 or self.rho >= 1:
            return 0.0
        extra = self._mean_gap_s - self.own_mean_step
        # at most one a token (the mean model's chunk and a full step's prefill are not the same seconds)
        return min(1.0, extra * (1.0 - self.rho) / span) if extra > 0 and math.isfinite(extra) else 0.0

    @cached_property
    def _mean_gap_s(self) -> float:
        """The mean per-token gap (the mean ITL given, ReplicaModel.itl_s; else the mean step a decoder
        sees), computed once a point: the gap tail's terms and value('itl', 'mean') read it."""
        return self.own_mean_step if self._itl_mean is None or not self.stable else self._itl_mean()

    def _riding_above(self, limit_s: float) -> float:
        """P(step > limit_s) in the stationary step chain (_step_chain), for limit_s > t_own: linear
        between its bins' edges, the steps that carry no prompt at t_own itself."""
        span = self.m.full_step_prefill_s
        if span <= 0:
            return 0.0
        x = (limit_s - self.t_own) / span * _STEP_LEVELS
        if x >= _STEP_LEVELS:
            return 0.0
        return float(np.interp(x, _STEP_EDGES, self._step_chain))

    @cached_property
    def _step_chain(self) -> np.ndarray:
        """P(step > edge), edge j of the _STEP_LEVELS bins from t_own to t_own plus a full step's
        prefill (the most prompt tokens a step takes), from the stationary distribution of a step's
        length; at edge 0 the steps that carry a prompt at all (those that carry none last t_own
        exactly: an atom, not spread over the first bin, which put a median above t_own at no load).

        The prompts that arrive while a step runs ride the next one: compound Poisson with λ·T
        expected prompts for a step of length T (none with probability e^-λT), each its first chunk
        (at most one step's tokens: the D = 1 row of the TPOT tables), so a long step brings a long
        one after it. That chain of step lengths has one stationary distribution, found by solving
        for it on the bins; each step gives every decoder one token, so it is the token-weighted gap
        distribution. A mean count of arrivals (Poisson at λ·t̄, or one chunk each, as before) misses
        the chain: on constant 1,000-token prompts on an H100 the model's ITL p99 was 43-74% under the
        simulator's, and below its own mean at 95% load (a probe's `planner capacity --itl-ms`: a p99
        target looser than a mean one); with the chain it is within 11% of it on the short-context
        pools of bench/itl_tail.py at 50-95% of capacity (20,000 requests a run), and with the
        queued prompts a request meets after its own prefill (_queued_above) within 5% on the
        long-context ones. Under θ (a prompt's tokens a step capped), where several prompts' capped
        chunks share a step, the chain reads 34-56% under, and a floor of full steps
        (_capped_share) takes its place."""
        m = self.m
        span = m.full_step_prefill_s
        n = _STEP_LEVELS
        if span <= 0 or self.rate <= 0:  # every step is its decode part alone
            return np.zeros(n + 1)
        edges = self.t_own + span * np.arange(n + 1) / n
        # the steps' lengths, state 0 the atom at t_own, then the bins' middles; the arrivals each brings
        expected = self.rate * np.r_[self.t_own, 0.5 * (edges[:-1] + edges[1:])]
        above = _table_survival(m.rider_tables, _ONE_STEP, expected[:, None],
                                ((edges[1:-1] - self.t_own) * m.flops_per_s)[None, :])
        some = -np.expm1(-expected)  # P(at least one prompt rides the next step)
        survival = np.concatenate([np.ones((n + 1, 1)), some[:, None], np.minimum(above, some[:, None]),
                                   np.zeros((n + 1, 1))], axis=1)  # past the top: the top bin
        move = np.maximum(survival[:, :-1] - survival[:, 1:], 0.0)
        move /= move.sum(axis=1, keepdims=True)
        # π·P = π with Σπ = 1: the balance equations with one of them replaced by the sum
        system = move.T - np.eye(n + 1)
        system[-1, :] = 1.0
        rhs = np.zeros(n + 1)
        rhs[-1] = 1.0
        try:
            pi = np.linalg.solve(system, rhs)
        except np.linalg.LinAlgError:  # a chain that never leaves a state: its stationary state by iteration
            pi = np.full(n + 1, 1.0 / (n + 1))
            for _ in range(1000):
                pi = pi @ move
        pi = np.maximum(pi, 0.0)
        tail = np.cumsum((pi / pi.sum())[::-1])[::-1]  # P(in state j or above)
        return np.minimum(np.r_[tail[1:], 0.0], 1.0)  # at edge j: the bins past it, state j + 1 on

    # ---- statistics
    def value(self, band: int, kind: str, stat: str) -> float:
        """The band's TTFT, TPOT or ITL (seconds) at a statistic ('mean', 'p50', ... 'p99')."""
        from planner.targets import statistic_quantile

        q = statistic_quantile(stat)
        if kind != "itl" and self.m.band_cells[band].size == 0:
            return math.nan
        if kind == "itl" and not self.m.cells.decode_steps.any():  # no request has a second token: no gap
            return math.nan
        if kind == "tpot" and self.m.tpot_static(band) is None:  # no request has a second token: no TPOT
            return math.nan
        if q is None:
            if kind == "ttft":
                return self.ttft_mean(band)
            if kind == "tpot":
                return self.tpot_mean(band)
            return self._mean_gap_s
        exceed = {"ttft": lambda x: self.ttft_exceed(band, x), "tpot": lambda x: self.tpot_exceed(band, x),
                  "itl": self.itl_exceed}[kind]
        if not self.stable:
            return math.inf
        lo, hi = 0.0, 1.0
        while exceed(hi) > 1 - q:
            lo, hi = hi, hi * 2
            if hi > 1e6:
                return math.inf
        for _ in range(50):
            mid = 0.5 * (lo + hi)
            if exceed(mid) > 1 - q:
                lo = mid
            else:
                hi = mid
            if hi - lo < 1e-4 * hi:
                break
        return hi

    def margin(self, band: int, kind: str, target: Target) -> float:
        """How far the band's `kind` latency misses `target` (> 0) or holds it (<= 0), on a log
        scale: for a mean, log(mean / limit); for a percentile, log(share of requests (tokens,
        for ITL) above the limit / share allowed). Increasing with load; the log makes the
        exponential tails of waiting times close to linear, which a root search likes."""
        allowed = target.exceed_share
        if kind == "tpot" and self.m.tpot_static(band) is None:  # no TPOT, so no bound: holds, by far
            return math.log(1e-12)
        if allowed is None:
            return math.log(max(self.value(band, kind, "mean"), 1e-300) / target.limit_s)
        if kind == "ttft":
            share = self.ttft_exceed(band, target.limit_s)
        elif kind == "tpot":
            share = self.tpot_exceed(band, target.limit_s)
        else:
            share = self.itl_exceed(target.limit_s)
        return math.log(max(share, 1e-12) / allowed)

    def misses(self, band: int, kind: str, target: Target) -> bool:
        return self.margin(band, kind, target) > 0

    def attainment(self) -> float:
        """Share of all requests that meet both their band's TTFT and TPOT targets."""
        if not self.stable:
            return 0.0
        m = self.m
        total = 0.0
        for index, band in enumerate(m.slo.bands):
            cells = m.band_cells[index]
            if cells.size == 0:
                continue
            w = m.cells.weight[cells]
            ok = np.ones(cells.size)
            if band.ttft is not None:
                ok = 1.0 - self.ttft_survival(cells, band.ttft.limit_s)
            if band.tpot is not None:
                d = m.cells.decode_steps[cells]
                tp = np.array([self._tpot_cell_exceed(c, band.tpot.limit_s) if d[i] >= 1 else 0.0
                               for i, c in enumerate(cells)])
                ok = ok * (1.0 - tp)
            total += float(np.dot(w, ok))
        return total

    def _tpot_cell_exceed(self, cell: int, limit_s: float) -> float:
        m = self.m
        if limit_s >= self.tpot_most_s:
            return 0.0
        tables = _work_tables(m.cells, self.k, m.step.params_active, m.step.attention)
        cells = np.array([cell])
        levels, probs = self._wait_levels(cells)
        d = m.cells.decode_steps[cells].astype(float)
        window = self._tpot_window(cells, levels, d)[0]
        bucket = np.full(window.shape, int(np.clip(np.searchsorted(tables.bucket_d, d[0], side="right") - 1, 0, None)))
        threshold = np.full(window.shape, self._riding_flops_allowed(float(d[0]), limit_s))
        return float(np.dot(probs, _table_survival(tables, bucket, window, threshold)))
