"""The prefill queue under vLLM's long-prefill cap θ (long_prefill_token_threshold).

Scheduler (vLLM v1, vllm/v1/core/sched/scheduler.py, which planner.simulate follows): each
step the prompts already prefilling take min(remaining, θ, budget left) tokens in admission
order, then waiting requests are admitted first come first served while budget is left. So
a prompt longer than θ never holds the whole budget: c = ceil(C'/θ) of them (C' = C - N, the
budget after the decodes) prefill side by side, sharing the steps' compute, and a request
waits for admission only when c are in flight. A prompt of at most θ tokens is done in the
step that admits it. vLLM's max_num_partial_prefills and max_long_partial_prefills belong to
the v0 scheduler: v1 refuses values other than 1 ("Concurrent Partial Prefill is not
supported") and vLLM PR #49244 removed them, so θ is the one setting modelled here.

The model: the capped prompts (more than θ new tokens) form a processor-sharing queue
limited to c in service. The work a prompt brings to the queue is S(p) = prefill(p) +
(p/C')·t_dec, its compute and its tokens' share of the decode part of full steps; the queue is
served at the share 1 - ρ_s the prompts of at most θ tokens leave (their load ρ_s), so at load
r = λ_c·E[S] / (1 - ρ_s) when its steps are full. A capped prompt's own stay (planner.latency)
is its compute plus the decode part of each of its ceil(p/θ) steps, over 1 - ρ with
ρ = λ·E[prefill compute]: the other prompts' compute is what it shares its steps with, and the
decode part of a step is counted once, in its own steps.
- Occupancy. With j < c prompts in flight a step carries only jθ of their tokens but pays the
  whole decode part: it does less work a second than a full one, φ(j) < 1 (slot_speeds), so
  prompts stay longer and more are present than at full speed. Processor sharing whose speed
  depends on the number present is insensitive to the distribution of the work (Cohen 1979,
  occupancy): P(n) ∝ Π_{j<=n} r/φ(j), geometric from c on. At φ = 1 this is the geometric
  (1 - r)·rⁿ of plain processor sharing; with 16 slots of θ = 512 and a decode part of half a
  chunk's compute, P(n >= c) at 95% of the simulated saturation goes from 2.8% to 4.3%.
- Decoders follow the slots (SlotStep.state_decode_s). Every running sequence decodes one token a
  step (vLLM v1 schedules the running requests first), so a request decodes for o - 1 steps
  whatever they last, and where steps last T the decoders settle at n = λ·E[o - 1]·T (Little's
  law): steps that carry many capped prompts' chunks hold more decoders, whose decode part slows
  those steps again. The mean model's N is the decoders a step carries on average; a moment in
  time sees more (the simulator at θ = 512, 95% load: 94 a step, 238 a second, 496 while requests
  wait for a slot, 181 otherwise). So φ(j) takes the decode part at the decoders j slots hold,
  T_j = (t_dec(n_j) + min(jθ, C')·u) / (1 - ρ_s) with ρ_s the compute share of the prompts of at
  most θ tokens and t_dec linear between N and the backlog regime's n_b (planner.backlog), n_j in
  [N, n_b]; φ(c) < 1 then, the tail beyond c is geometric with ratio r / φ(c) and the blocked
  wait below runs at load r / φ(c) (a queue whose full steps never clear the work is unstable). Without a backlog regime the decode part stays t_dec(N).
- A request arriving when n >= c waits for a slot, FCFS: M/G/c, whose wait given that it waits
  is about exponential with mean (1 + cv²)/2 · E[H] / (c(1 - r)) (Allen-Cunneen; Köllerström's
  heavy-traffic limit), H the time a prompt holds its slot (slot_hold_s): ceil(p/θ) full steps,
  whose length its own late chunks stretch. Long prompts hold their slots for hundreds of steps
  while short ones turn over in a few, so cv² (about 10 for the long-tail mix at θ = 512) and
  with it the wait is far above the memoryless one: P(W > x) = P(n >= c)·exp(-x / E[W | W > 0]).
- A capped prompt then takes S(p) / (1 - ρ) on average, spread by what is in service beside it
  (stay_spread): admitted with K others in flight (the occupancy's n, or c - 1 after a wait), which
  mostly hold their slots through its own ceil(p/θ) steps, each of its steps carries one chunk of
  each and the decode part at the decoders K + 1 slots hold, Z above t_dec; its stay is
  S(p) / (1 - ρ) · (a + Z) / (a + E[Z]), a its own work a step. The simulator's stays spread so (θ =
  512, 80% load, prompts of 3.5k-4.5k tokens: p90 2.0x and p99 3.2x the mean; 40k-60k: 1.9x, 2.9x);
  at its mean alone the model put every capped prompt's TTFT tail at its mean stay;
- a prompt of at most θ tokens arrives inside a step that carries one chunk of each of the
  K = min(n, c) prompts in service, and is prefilled in the next step, which carries their
  next chunks: about 1.5 chunks of each (the remainder of the step in flight, half on average,
  then a whole one). Each chunk is a draw over the capped prompts' chunks weighted by the time
  their steps last. W and these chunks come together by FFT on a time grid (as planner.prefill_wait).

In a backlog (planner.backlog) decoders pile up: every step's decode part grows, each prompt in
flight progresses slower, more are in flight and the slots fill. As planner.backlog does for the
FCFS queue, P(W > x) is read from the capped queue at the state a wait of x reaches: at each level
φ the queue whose works, short load ρ_s and step (budget, decode part) are φ of the way from those
at N to those at the regime's n_b decoders (c_b = ceil((C - n_b)/θ)), interpolated at
φ(x) = min(1, x / τ). The chance a request is blocked is then P(W > 0) from that reading; below c
the in-service count keeps the occupancy's shape, scaled to the rest.

bench/accuracy.py, θ = 512 on 16 slots (8B, 2 x H200, the long-tail mix) at 95% of the simulated
saturation: the short band's TTFT p90 went from -86% to -22% and its p99 from -66% to -11% when the
decoders came to follow the slots (every slot taken 15.6% of the time in the model, 18-20% in the
simulator, against 4.3% at a fixed decode part); with the stay's spread besides, the same pool at 80%
went from -55% to -22% (short band TTFT p99) and its long band's p99 from -30%/-42%/-48% to
+28%/+20%/-2% at 50/80/95%. Those were the figures when each term came in; the latency model has
grown since (the TTFT riders' tail, a decoder's own sequence in its steps), and the same bench reads
today (2026-12-04), on that pool: short band TTFT p90 -27%/-35%/-10% and p99 -25%/+5%/+31% at
50/80/95%, long band p99 +27%/+13%/+7%. Over the 81 θ points: median |error| about 17%, worst under
-44% (the 8B on one H100 with θ = 2,048 at 80%, short band TTFT p90, where admission waits for the
cache 12% of the time), worst over +226% (a split's short pool at θ = 1,024 and 95%, TTFT p99); the
long-tail mixes' points are within 50% save five at 95% load, all pessimistic: four TTFT p99 (+52%
to +75%) and the TPOT p99 of the 8B on one H100's long band at θ = 2,048 (+50.3%).

Where this departs from vLLM v1: with more than c capped prompts waiting, the ones in flight are
served in admission order, and a step's decode part moves with the decoders present; processor
sharing at a speed set by the count is the approximation that makes the counts tractable, and
bench/accuracy.py measures what it costs against the simulator, which follows v1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.backlog import BACKLOG_LEVELS, read_at_reached_state
from planner.prefill_wait import W_GRID, WaitDistribution, split_mass_rows, tilt

CHUNKS_SEEN = 1.5  # the remainder of the step in flight (half on average) and the request's own step


@dataclass(frozen=True)
class SlotStep:
    """A step of the capped queue: θ, the budget C' = C - n the decodes leave, their decode part
    t_dec(n), and the compute of a capped prompt's token (the capped prompts' mean, token-weighted).

    Decoders that follow the slots (state_decode_s): `decode_rate` (λ·E[o - 1], decode tokens a
    second), the `decoders` n at which decode_s holds, `decode_slope_s` (d t_dec / dn), `max_decoders`
    and `short_share` (the compute share of the prompts of at most θ tokens). 0 decode_rate: the
    decode part is decode_s whatever the slots hold."""

    cap_tokens: float
    budget_tokens: float
    decode_s: float
    compute_s_per_token: float
    decode_rate: float = 0.0
    decoders: float = 0.0
    decode_slope_s: float = 0.0
    max_decoders: float = 0.0
    short_share: float = 0.0

    @property
    def servers(self) -> int:
        """c = ceil(C'/θ): the prompts a full step carries θ tokens of."""
        return max(1, math.ceil(self.budget_tokens / self.cap_tokens - 1e-9))

    def state_decode_s(self, tokens: np.ndarray) -> np.ndarray:
        """t_dec at the decoders present while the steps carry `tokens` capped prompt tokens each.
        A decoder needs o - 1 steps, so where steps last T the decoders settle at n = λ·E[o - 1]·T
        (Little's law), T = (t_dec(n) + tokens·u) / (1 - ρ_s): steps full of long prompts' chunks hold
        more decoders, whose decode part slows those steps further. t_dec is linear in n here (the
        line through t_dec at `decoders` and at the backlog regime's), n at most max_decoders."""
        tokens = np.asarray(tokens, float)
        if self.decode_rate <= 0.0:
            return np.full(tokens.shape, self.decode_s)
        gain = self.decode_rate / max(1.0 - self.short_share, 1e-12)
        intercept = self.decode_s - self.decode_slope_s * self.decoders
        denom = 1.0 - gain * self.decode_slope_s
        n = np.full(tokens.shape, self.max_decoders)
        if denom > 0:
            n = np.minimum(gain * (intercept + tokens * self.compute_s_per_token) / denom, self.max_decoders)
        n = np.maximum(n, self.decoders)
        return self.decode_s + self.decode_slope_s * (n - self.decoders)

    def toward(self, other: SlotStep, phi: float) -> SlotStep:
        """The step φ of the way from this one to `other` (a level of the backlog reading)."""
        def mid(a: float, b: float) -> float:
            return a + phi * (b - a)
        return SlotStep(self.cap_tokens, mid(self.budget_tokens, other.budget_tokens), mid(self.decode_s, other.decode_s),
                        mid(self.compute_s_per_token, other.compute_s_per_token), self.decode_rate,
                        mid(self.decoders, other.decoders), self.decode_slope_s, self.max_decoders, self.short_share)


def slot_speeds(step: SlotStep) -> np.ndarray:
    """φ(j), j = 1..c: the capped queue's speed with j prompts in flight, relative to a full step.
    A step carries min(jθ, C') prompt tokens and lasts t_dec + min(jθ, C')·u, so it does
    min(jθ, C')·(u + t_dec/C') of the work S (module docstring) in that time; φ(c) = 1 where the
    decode part does not follow the slots, else below 1 where full steps hold more decoders
    (SlotStep.state_decode_s)."""
    tokens = np.minimum(np.arange(1, step.servers + 1) * step.cap_tokens, step.budget_tokens)
    per_token = step.compute_s_per_token + step.decode_s / step.budget_tokens
    return np.minimum(tokens * per_token / (step.state_decode_s(tokens) + tokens * step.compute_s_per_token), 1.0)


def occupancy(r: float, speeds: np.ndarray) -> tuple[np.ndarray, float]:
    """(P(n = k) for k < c, P(n >= c)) of processor sharing whose speed is φ(k) with k present
    (φ = 1 from c on) at load r: P(n) ∝ Π_{k<=n} r/φ(k), whatever the distribution of the work
    (generalised processor sharing is insensitive: Cohen, "The multiple phase service network
    with generalized processor sharing", Acta Informatica 12, 1979). With φ = 1 it is the
    geometric (1 - r)·rⁿ. The engine serves at most c at once, first come first served beyond:
    that queue is not insensitive, and with long-tailed holds its P(n >= c) lies above this one
    (the simulator's 20% against 4% at θ = 512, 95% load; module docstring)."""
    log_prod = np.concatenate([[0.0], np.cumsum(np.log(r / speeds))])  # n = 0..c
    prod = np.exp(log_prod - log_prod.max())
    beyond = r / speeds[-1]  # from c on the speed stays φ(c)
    total = prod.sum() + prod[-1] * beyond / (1.0 - beyond)
    return prod[:-1] / total, float(prod[-1] / (1.0 - beyond) / total)


def slot_hold_s(step: SlotStep, steps: np.ndarray, compute_s: np.ndarray) -> np.ndarray:
    """H(p): the seconds a capped prompt holds its slot when the c slots are taken: ceil(p/θ) full
    steps (`steps`), each lasting the decode part and the others' chunks, t_dec + (C' - θ)·u, plus
    its own chunks' compute (`compute_s`, its prefill). A long prompt's late chunks, costly in
    attention, lengthen the very steps it holds its slot in."""
    full = float(step.state_decode_s(np.array(step.budget_tokens)))
    return steps * (full + max(step.budget_tokens - step.cap_tokens, 0.0) * step.compute_s_per_token) + compute_s


def blocked_decay_s(rate_rps: float, r: float, hold_s: np.ndarray, weight: np.ndarray) -> float:
    """Mean wait of a capped prompt that finds the c slots taken, E[W | W > 0] of M/G/c:
    (1 + cv²)/2 · E[H] / (c(1 - r)), cv² that of the slot holds H (slot_hold_s), with E[H]/c read
    as r/λ, the work one slot clears per arrival at the queue's own load r. The two differ (a hold
    counts whole steps, r the work): E[H]/c itself moved bench/accuracy.py's θ pools from a median
    signed error of -10% to -14%, with the same worst point, so r/λ stays
    (Allen & Cunneen's approximation: A. O. Allen, "Probability, Statistics, and Queueing Theory
    with Computer Science Applications", 2nd ed., Academic Press 1990; exact for M/M/c and, for
    c = 1, Pollaczek-Khinchine's;
    the heavy-traffic limit of GI/G/c, Köllerström, "Heavy traffic theory for queues with several
    servers. I", J. Appl. Prob. 11, 1974)."""
    mean = float(np.dot(weight, hold_s))
    cv2 = float(np.dot(weight, hold_s**2)) / mean**2 - 1.0
    return (1.0 + cv2) / 2.0 * r / (rate_rps * (1.0 - r))


@dataclass(frozen=True)
class CappedRegime:
    """The capped queue in the backlog regime (planner.backlog): each capped prompt's work at n_b
    decoders (stretched by the cache's turnover limit), the load of the prompts of at most θ
    tokens there, the step at n_b (budget C - n_b, decode part t_dec(n_b)), and τ, the seconds
    the decoders take to grow from N to n_b in a backlog."""

    work_s: np.ndarray
    rho_short: float
    step: SlotStep
    fill_s: float


@dataclass(frozen=True)
class _Level:
    """The capped queue at one state: its load r, occupancy below c, P(n >= c) and blocked decay."""

    load: float
    below: np.ndarray
    blocked: float
    decay_s: float

    def survival(self, x_s: np.ndarray) -> np.ndarray:
        return self.blocked * np.exp(-x_s / self.decay_s)


def _level(rate_rps: float, work_s: np.ndarray, weight: np.ndarray, rho_short: float, step: SlotStep,
           steps: np.ndarray, compute_s: np.ndarray) -> _Level | None:
    """The capped queue with works `work_s` (cell shares `weight`, summing to 1), the short prompts'
    load and the step: r = λ_c·E[S] / (1 - ρ_s) (the time the short prompts leave), or None where
    r reaches 1."""
    r = rate_rps * float(np.dot(weight, work_s)) / max(1.0 - rho_short, 1e-12)
    if not r < 1.0:
        return None
    if r <= 0.0:  # no capped prompt arrives: none in flight, none waits (a queue that clears)
        return _Level(0.0, np.eye(1, step.servers)[0], 0.0, 1.0)
    speeds = slot_speeds(step)
    if not r < speeds[-1]:  # full steps, slowed by the decoders they hold, never clear the queue
        return None
    below, blocked = occupancy(r, speeds)
    return _Level(r, below, blocked, blocked_decay_s(rate_rps, r / speeds[-1], slot_hold_s(step, steps, compute_s), weight))


def _state_read_survival(x_s: np.ndarray, rate_rps: float, work_s: np.ndarray, weight: np.ndarray,
                         rho_short: float, step: SlotStep, steps: np.ndarray, compute_s: np.ndarray,
                         regime: CappedRegime) -> np.ndarray | None:
    """P(W > x) read at the state a wait of x reaches, as planner.backlog reads the FCFS queue's:
    at each level φ of BACKLOG_LEVELS the capped queue whose works, short load and step are φ of
    the way from those at N to the regime's, interpolated at φ(x) = min(1, x / τ). A long wait is
    spent in a busy period in which decoders piled up: every step's decode part grew, each prompt
    in flight progresses slower and the slots fill. None where a level's queue never clears."""
    rows = []
    for phi in (0.0, *BACKLOG_LEVELS):
        level = _level(rate_rps, work_s + phi * (regime.work_s - work_s), weight,
                       rho_short + phi * (regime.rho_short - rho_short), step.toward(regime.step, phi), steps, compute_s)
        if level is None:
            return None
        rows.append(level.survival(x_s))
    surv = np.array(rows)
    cols = np.arange(x_s.size)
    return read_at_reached_state(x_s, lambda level, _: surv[level, cols], regime.fill_s)


STAY_GRID = 1 << 10  # points of the grid of Z, the others' part of a step of a capped prompt's stay
# Levels of Z where a blocked wait is added to the stay: edges in probability, finer in the tail.
STAY_EDGES = np.array([0.0, 0.5, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 1.0])


@dataclass(frozen=True)
class StaySpread:
    """Z, what the other capped prompts in service add to each step of a capped prompt's stay: the
    survival P(Z > k·dt) on a grid, its mean, and representative values (the STAY_EDGES intervals'
    middles) with their probabilities."""

    survival: np.ndarray
    dt_s: float
    mean_s: float
    level_s: np.ndarray
    level_weight: np.ndarray

    def exceed(self, z_s: np.ndarray) -> np.ndarray:
        """P(Z > z), linear between grid points, 1 below zero."""
        x = np.asarray(z_s, float) / self.dt_s
        return np.where(x < 0, 1.0, np.interp(x, np.arange(self.survival.size), self.survival, right=0.0))


def stay_spread(below: np.ndarray, blocked: float, step: SlotStep, chunk_s: np.ndarray, chunk_weight: np.ndarray) -> StaySpread:
    """Z for a capped prompt admitted with K others in service: K = n < c with the occupancy's
    P(n) (below), K = c - 1 when it waited for a slot (blocked). Those others are long prompts
    more often than not (they hold their slots longest) and stay through much of its own
    ceil(p/θ) steps, so K is taken as fixed over its stay: each step carries one chunk of each
    (a draw weighted by the time their steps last, as in capped_waits) and the decode part at the
    decoders K + 1 slots hold (SlotStep.state_decode_s) above t_dec. The stay is then its own work a
    step plus Z, over its steps: processor sharing's mean S / (1 - ρ) spread as (a + Z)/(a + E[Z])."""
    servers = step.servers
    k = np.arange(servers)
    p_k = below.copy()
    p_k[-1] += blocked
    p_k = p_k / p_k.sum()
    tokens = np.minimum((k + 1) * step.cap_tokens, step.budget_tokens)
    extra_s = np.maximum(step.state_decode_s(tokens) - step.decode_s, 0.0)
    cw = chunk_weight / chunk_weight.sum()
    span = max((servers - 1) * float(chunk_s.max()) + float(extra_s.max()), 1e-9) * 1.05
    n = STAY_GRID
    dt = span / (n - 1)
    phi = np.fft.rfft(split_mass_rows(chunk_s, cw, np.array([dt]), n)[0])
    powers = np.empty((servers, phi.size), complex)
    powers[0] = 1.0
    for j in range(1, servers):  # powers of a transform that decays fast: flushed long before they go subnormal (slow)
        powers[j] = powers[j - 1] * phi
        powers[j][np.abs(powers[j]) < 1e-30] = 0.0
    rows = np.fft.irfft(powers * p_k[:, None], n, axis=1)  # j chunks: their sum's pmf, weighted
    rows[rows < 1e-30] = 0.0
    pmf = np.zeros(n)
    for j in range(servers):  # each shifted by the decode part's rise, split between two points
        sums = rows[j]
        shift = extra_s[j] / dt
        whole, frac = int(shift), shift - int(shift)
        pmf[whole:] += (1.0 - frac) * sums[: n - whole]
        pmf[whole + 1:] += frac * sums[: n - whole - 1]
    cdf = np.minimum(np.cumsum(pmf) / max(pmf.sum(), 1e-300), 1.0)
    mean = float(np.dot(p_k, k * float((cw * chunk_s).sum()) + extra_s))  # not BLAS: its threads cost ms on a busy host
    mids = 0.5 * (STAY_EDGES[1:] + STAY_EDGES[:-1])
    levels = np.searchsorted(cdf, mids - 1e-12) * dt
    return StaySpread(1.0 - cdf, dt, mean, levels, np.diff(STAY_EDGES))


def capped_waits(rate_rps: float, work_s: np.ndarray, weight: np.ndarray, rho_short: float, step: SlotStep,
                 steps: np.ndarray, compute_s: np.ndarray, chunk_s: np.ndarray, chunk_weight: np.ndarray,
                 regime: CappedRegime | None = None):
    """(wait of a capped prompt, wait of a prompt of at most θ tokens) as WaitDistributions, and the
    spread of a capped prompt's stay (stay_spread), or
    None when the capped prompts' load r reaches 1 (at N, or in the backlog regime when given).
    rate_rps and weight: the capped prompts' arrival rate and cell shares; work_s their work S;
    steps their steps in a slot, ceil(p/θ), compute_s their prefill compute; step: the step at N; chunk_s the seconds of
    their chunks; regime: the queue in the backlog regime, whose state a long wait reads
    (_state_read_survival)."""
    ws = weight / weight.sum()
    at_n = _level(rate_rps, work_s, ws, rho_short, step, steps, compute_s)
    if at_n is None:
        return None
    decay_s = at_n.decay_s
    if regime is not None:
        slowest = _level(rate_rps, regime.work_s, ws, regime.rho_short, regime.step, steps, compute_s)
        if slowest is None:
            return None
        decay_s = max(decay_s, slowest.decay_s)
    servers = step.servers
    jumps = CHUNKS_SEEN * chunk_s
    cw = chunk_weight / chunk_weight.sum()
    span = max(servers * float(jumps.max()) + 14.0 * decay_s, 1e-6)
    n = W_GRID
    dt = span / (n - 1)
    x = np.arange(n) * dt
    if regime is None:
        w_surv = at_n.survival(x)
    else:
        w_surv = _state_read_survival(x, rate_rps, work_s, ws, rho_short, step, steps, compute_s, regime)
        if w_surv is None:
            return None
    w_cdf = 1.0 - w_surv
    blocked = float(w_surv[0])  # P(n >= c): a request waits for a slot
    mean_s = at_n.blocked * at_n.decay_s if regime is None else float((np.sum(w_surv) - 0.5 * (w_surv[0] + w_surv[-1])) * dt)
    long_wait = WaitDistribution(w_cdf, dt, mean_s, at_n.load)
    # In service K = min(n, c): the occupancy below c (sharing 1 - P(n >= c)), P(n >= c) at c, where W > 0 too.
    damp = tilt(n)
    phi = np.fft.rfft(split_mass_rows(jumps, cw, np.array([dt]), n)[0] * damp)
    wait_pmf = np.diff(w_cdf, prepend=0.0) / max(blocked, 1e-300)  # W given n >= c
    wait_pmf[0] -= (1.0 - blocked) / max(blocked, 1e-300)
    phi_w = np.fft.rfft(np.clip(wait_pmf, 0.0, None) * damp)
    below = at_n.below * (1.0 - blocked) / max(1.0 - at_n.blocked, 1e-300)
    total = sum(below[k] * phi**k for k in range(servers)) + blocked * phi**servers * phi_w
    pmf = np.fft.irfft(total, n) / damp
    cdf = np.minimum(np.cumsum(np.clip(pmf, 0.0, None)), 1.0)
    in_service = float(np.dot(below, np.arange(servers))) + blocked * servers
    mean = long_wait.mean_s + in_service * float((cw * jumps).sum())
    spread = stay_spread(at_n.below, at_n.blocked, step, chunk_s, chunk_weight)
    return long_wait, WaitDistribution(cdf, dt, mean, at_n.load), spread
