"""The prefill queue in a long backlog: decoders pile up, the queue slows, the wait's tail stretches.

planner.prefill_wait treats the prompts as an M/G/1 FCFS queue whose service times are
independent of the state: the decode part of each step a prompt rides is t_dec(N), N the
time-averaged resident batch. In a backlog that is not so. While prompts queue, every step
carries a full budget C' = C - n of prompt tokens, so prompts finish at 1 / E[S(n)] a second,
faster than they arrive, and each decodes for E[D] = E[o - 1] steps; a step of the backlog
lasts t_b(n) = t_dec(n) + C'·E[T_pf] / E[p] (its decode part and a full chunk), so a decoder
leaves at rate 1 / (E[D]·t_b(n)). The decoders grow towards the balance of the two,
    n_b = E[D]·(C - n_b) / E[p],  so  n_b = E[D]·C / (E[p] + E[D])
(t_b cancels: a full budget a step, E[p] tokens a prompt, E[D] steps each),
bounded by what the cache holds (n_cap = KV budget / mean bytes of a resident sequence, as the
memory ceiling of planner.capacity) and max_num_seqs. Each prompt served in the backlog then
pays the decode part at n_b: S_b(p) = prefill(p) + (p / (C - n_b))·t_dec(n_b). Where the cache
caps the decoders, admission waits for blocks that decoders free: the queue cannot admit
faster than the cache turns over, which by Little's law on the cache is the mean model's rate
at the cache's bound, λ(n_cap) = n_cap / (s·t_dec(n_cap) + n_cap·E[T_pf]) (planner.capacity).
So in a backlog the queue's load is
    ρ_b = max(λ·E[S_b], λ / λ(n_cap))   (the second only where the cache caps n_b),
applied by stretching S_b by ρ_b / (λ·E[S_b]) (admission stalls spread over the work).

A queue whose service speed depends on its state has no closed-form waiting time in general
(Bekker, Borst, Boxma & Kella, "Queues with workload-dependent arrival and service rates",
Queueing Systems 46, 2004, treat the speed as a function of the workload); this module
approximates it by reading the wait from the queue at the state the wait itself reaches. A wait
of x seconds is spent in a busy period at least x old, whose decoders have grown from N by
(1 / E[S(N)] - N / (E[D]·t_b(N)))·x (the initial net rate: prompts finishing minus decoders
leaving); φ(x) = min(1, x / τ) is how far they are on their way to the regime, τ the time they
take to reach n_b at that rate, and
    P(W > x) = P(W_φ(x) > x),
W_φ the M/G/1 FCFS wait with each prompt's service φ of the way from its service at N to its
service in the regime (at φ = 1, load ρ_b), interpolated between a few levels of φ
(BACKLOG_LEVELS). Short waits are the queue's at N; the tail, spent in long busy periods, is the
regime's. Where the regime's queue never clears, a backlog once formed never drains: the point is
unstable. Each level's wait is the queue at N's wait rescaled to the level's P(W > 0) = ρ_φ and
mean wait of those that wait (backlog_wait: exact in those, and in heavy traffic, where the
levels matter), so a level costs no transform of its own: one FFT per operating point, as
without the backlog (bench/capacity_speed.py times a capacity evaluation against its 10 ms target).
Under vLLM's long-prefill cap θ the capped queue is not an M/G/1 queue; planner.prefill_cap reads
its wait at the state a wait reaches the same way, level by level (φ(x) = min(1, x / τ)), with the
levels' works, short load and in-flight slots taken from this regime.

Evidence (bench/accuracy.py, the simulator as judge). With the cache unbounded, a Lindley
recursion whose service uses the decoders present when each prompt is served reproduces the
simulator's TTFT p50/p90/p99 within 2% (8B on one H100, the long-tail mix at 6.5 req/s; the
simulator's requests waiting past their p90 met about 500 decoders against the mean model's 81):
the mechanism this module approximates. When this regime came in, it took the median |error| of
the percentile cases without θ from 11.5% to 7.4%, and the long-tail mixes at 95% of the simulated
saturation from 33-62% under to within 40%. The latency model has grown since (the TTFT riders'
tail, a decoder's own sequence in its steps), and the same bench reads today (2026-12-04, the
simulator allocating blocks chunk by chunk as vLLM V1 does): median |error| 7.5% without θ, the
worst point +155% (8B on one A100 at 8k, the Azure conversations at 95% load: TTFT p99 17.0 s
against the simulator's 6.7 s). Where the cache does not fill, next to saturation this reading is
pessimistic (the 128k pools on H200 at 95%: TTFT p99 over by 60-65%): a plan sized there buys more
than the simulator needs, and certification, which replays at the planned rate, does not catch an
over-estimate. Where it fills (the 128k pools on H100, KV p99 100%), V1 admits a long prompt on its
first chunk's blocks and preempts when the cache runs out, and the recomputation is a load this
module does not see: at 80% of the simulated saturation the long-tail mixes' TTFT p99 is 62-66%
under the simulator's, and at 95% the simulator's queue does not settle (TTFT p99 over 800 s,
27-50 preemptions per 1,000 requests). There the reading is optimistic, and certification, which
replays every planned pool, is what catches it. (With a prompt's blocks all allocated at
admission, as the simulator did before, the median was 8.3% and the worst +306%, a pool whose
admission waited for a full cache.) What it does not capture: under θ the simulator shows rare
long episodes in which the in-flight slots fill with long prompts and everything queues behind
them (a metastable state the processor-sharing reading of planner.prefill_cap cannot produce, even
read at this regime); with θ = 512 (16 slots) the short band's TTFT p90 stays under-predicted
(-10% to -35%).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.prefill_wait import W_GRID, WaitDistribution, shares


@dataclass(frozen=True)
class Backlog:
    """The backlog regime of one operating point (module docstring)."""

    decoders: float  # n_b
    decode_s: float  # t_dec(n_b)
    stretch: float  # >= 1: the cache's turnover limit on admissions, as a factor on the service times
    fill_s: float  # τ: seconds the decoders take to grow from N to n_b in a backlog
    load: float  # ρ_b, the prefill queue's load in the regime


def prompt_service_s(prefill_s, new_tokens, chunk_tokens: float, decoders: float, decode_s: float):
    """A prompt's service with `decoders` resident: its compute plus its tokens' share of the decode
    part of the steps it rides, each step's budget being what the decoders leave, C - n (module
    docstring: S_b(p) at n = n_b)."""
    return prefill_s + new_tokens / max(chunk_tokens - decoders, 1.0) * decode_s


def regime_service_s(prefill_s, new_tokens, chunk_tokens: float, backlog: Backlog):
    """A prompt's service in the backlog regime: prompt_service_s at n_b, stretched by the cache's
    turnover (module docstring)."""
    return prompt_service_s(prefill_s, new_tokens, chunk_tokens, backlog.decoders, backlog.decode_s) * backlog.stretch


def backlog_regime(*, rate_rps: float, resident: float, chunk_tokens: float, decode_s, mean_prefill_s: float,
                   mean_new_tokens: float, mean_decode_steps: float, cap_decoders: float,
                   rate_at_cap_rps: float) -> Backlog | None:
    """The backlog regime at arrival rate λ and mean resident batch N, or None where decoders do not
    pile up (n_b <= N) and the cache does not stretch admissions. decode_s: t_dec as a function of
    the resident batch."""
    if rate_rps <= 0 or mean_new_tokens <= 0 or mean_decode_steps <= 0:
        return None
    n_cap = min(cap_decoders, chunk_tokens - 1.0)
    # The balance n = E[D]·(C - n) / E[p] at its fixed point: the budget left to prompts is the one
    # the piled-up decoders leave, not the one at N (with a small budget, C - N overstates it).
    n_b = min(mean_decode_steps * chunk_tokens / (mean_new_tokens + mean_decode_steps), n_cap)
    piles_up = n_b > resident * (1.0 + 1e-6)
    # Without a pile-up only a resident batch at the cache's own cap keeps a regime (below).
    at_cache_cap = cap_decoders <= chunk_tokens - 1.0 and n_b >= n_cap and resident <= n_cap * (1.0 + 1e-6)
    if not piles_up and not at_cache_cap:
        return None
    t_b = float(decode_s(n_b))

    def service_s(n: float, t_dec: float) -> float:  # E[S(n)]
        return prompt_service_s(mean_prefill_s, mean_new_tokens, chunk_tokens, n, t_dec)

    stretch = 1.0
    if n_b >= n_cap and rate_at_cap_rps > 0:
        stretch = max(1.0, 1.0 / (rate_at_cap_rps * service_s(n_b, t_b)))
    if not piles_up:
        # Decoders already at the cache's cap: nothing left to pile up, but its turnover limit still
        # stretches admissions as it does just below the cap, where the regime is reached ever faster
        # (τ -> 0): the regime from the start, so the wait does not drop back at the cap.
        return Backlog(n_b, t_b, stretch, 0.0, rate_rps * service_s(n_b, t_b) * stretch) if stretch > 1.0 else None
    t_n = float(decode_s(resident))
    full_step_s = t_n + (chunk_tokens - resident) * mean_prefill_s / mean_new_tokens
    growth = 1.0 / service_s(resident, t_n) - resident / (mean_decode_steps * full_step_s)
    if growth <= 0:
        return None
    return Backlog(n_b, t_b, stretch, (n_b - resident) / growth, rate_rps * service_s(n_b, t_b) * stretch)


BACKLOG_LEVELS = (0.25, 0.5, 1.0)  # shares of the way from the queue at N to the backlog regime, besides 0
BACKLOG_GRID = 1 << 8  # points of the mixed wait's grid per span of the base's, up to BACKLOG_SPANS (fewer past)
BACKLOG_SPANS = 8  # spans of the base's grid the mixed wait's grid covers at BACKLOG_GRID points each
# a base whose waits are all but none: its levels are read over a million of its spans at most (a level
# slower than that, read as far as the grid reaches, has mass left past it)
_MAX_SPANS = 1e6
_ALL_LEVELS = np.array((0.0, *BACKLOG_LEVELS))


def level_waits(rate_rps: float, base_s: np.ndarray, regime_s: np.ndarray, weight: np.ndarray,
                levels: tuple[float, ...] = BACKLOG_LEVELS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each level φ, the M/G/1 FCFS queue whose service is φ of the way from `base_s` to
    `regime_s` (per cell, cell shares `weight`): its load ρ_φ = λ·E[S_φ] and the mean wait of
    the requests that wait, E[W_φ | W_φ > 0] = E[W_φ] / ρ_φ = λ·E[S_φ²] / (2ρ_φ(1 - ρ_φ))
    (Pollaczek-Khinchine), from the two services' moments; and whether the queue clears (ρ_φ < 1)."""
    ws = shares(weight)
    delta = regime_s - base_s
    e0, ed = float(ws @ base_s), float(ws @ delta)
    e00, e0d, edd = float(ws @ base_s**2), float(ws @ (base_s * delta)), float(ws @ delta**2)
    # A few levels: Python floats, the same IEEE operations in the same order as on arrays, without
    # an array operation's overhead per term.
    rho, cond_mean = [], []
    for phi in levels:
        phi = float(phi)
        r = rate_rps * (e0 + phi * ed)
        second = e00 + 2 * phi * e0d + phi * phi * edd
        safe = r if 0 < r < 1.0 else 0.5
        rho.append(r)
        cond_mean.append(rate_rps * second / (2 * safe * (1 - safe)) if r < 1.0 else math.inf)
    rho_a = np.array(rho)
    return rho_a, np.array(cond_mean), rho_a < 1.0


_INDEX = np.arange(max(W_GRID, BACKLOG_GRID * BACKLOG_SPANS + 2), dtype=float)  # the base's grid and the longest mixed one
_INDEX.flags.writeable = False


def _index(n: int) -> np.ndarray:
    """0, 1, ..., n - 1 as floats (exact: the floats np.arange(n) * dt multiplies), read-only: for the
    grids of backlog_wait a view of one array, not a new array and its cast per grid."""
    return _INDEX[:n] if n <= _INDEX.size else np.arange(n, dtype=float)


def backlog_wait(base: WaitDistribution, rate_rps: float, base_s: np.ndarray, regime_s: np.ndarray,
                 weight: np.ndarray, fill_s: float) -> WaitDistribution | None:
    """P(W > x) read from the queue at the state a wait of x reaches (module docstring): the queue at
    N (`base`, whose services are `base_s`) for φ = 0, and at each level φ of BACKLOG_LEVELS the
    queue whose services are φ of the way to `regime_s`, interpolated at φ(x) = min(1, x / fill_s);
    None where the regime's queue never clears (a backlog, once formed, grows without bound).

    A level's wait is the base's, rescaled: P(W_φ > x) = (ρ_φ / ρ_0)·P(W_0 > x·c_0 / c_φ), c the
    mean wait of the requests that wait (level_waits). In an M/G/1 queue P(W > 0) = ρ exactly, and
    the wait of those that wait is, in heavy traffic, exponential whatever the service (Kingman,
    "On queues in heavy traffic", JRSS B 24, 1962), so the rescaling is exact in its mean and in
    heavy traffic, where the levels matter; it costs no transform per level (planner.prefill_wait's
    FFT is the cost of a latency point)."""
    rho0 = base.load
    rho, cond_mean, clears = level_waits(rate_rps, base_s, regime_s, weight)
    if not clears.all():
        return None
    # Each level (the base first) as (x-scale, survival factor): P(W_φ > x) = scale_φ·P(W_0 > x·shrink_φ).
    shrink = np.concatenate([[1.0], np.minimum(base.mean_s / max(rho0, 1e-300) / cond_mean, 1.0)])
    factor = np.concatenate([[1.0], rho / max(rho0, 1e-300)])
    grid_end = base.dt_s * (base.cdf.size - 1)
    # The grid reaches where the slowest level has decayed as far as the base has at the end of its
    # grid, at BACKLOG_GRID points per span of the base's grid up to BACKLOG_SPANS spans, and past
    # them at a longer step: a level slower than that is read to its end, at its own scale. (Stopped
    # at BACKLOG_SPANS, a slow level's grid ended with mass left where the base's own grid was short,
    # and every limit past its end read that mass: a TTFT-bound capacity flat at any limit from 20 s.)
    spans = min(1.0 / max(float(shrink.min()), 1e-300), _MAX_SPANS)
    dt = grid_end / (BACKLOG_GRID - 1) * max(1.0, spans / BACKLOG_SPANS)
    x = _index(math.ceil(grid_end * spans / dt) + 1) * dt
    grid = _index(base.cdf.size) * base.dt_s
    base_survival = 1.0 - base.cdf

    def level_survival(level: np.ndarray, x_s: np.ndarray) -> np.ndarray:
        out = np.interp(x_s * shrink[level], grid, base_survival)
        out *= factor[level]
        return np.minimum(out, 1.0, out=out)

    survival = read_at_reached_state(x, level_survival, fill_s)
    return WaitDistribution(1.0 - survival, dt, float(np.sum(survival) * dt), float(rho[-1]))


def read_at_reached_state(x_s: np.ndarray, level_survival, fill_s: float) -> np.ndarray:
    """P(W > x) read at the state a wait of x reaches (module docstring): level_survival(levels, x),
    the survival at each x of the queue at its level (an index into (0, *BACKLOG_LEVELS)),
    interpolated between the two levels around φ(x) = min(1, x / τ). W > y implies W > x for
    x < y: where the mix rises with x (the state outrunning the decay), the survival at x is at
    least the largest beyond it."""
    levels = _ALL_LEVELS
    phi = np.minimum(1.0, x_s / max(fill_s, 1e-12))
    hi = np.searchsorted(levels, phi, side="left")
    hi = np.minimum(np.maximum(hi, 1, out=hi), levels.size - 1, out=hi)
    lo = hi - 1
    frac = (phi - levels[lo]) / (levels[hi] - levels[lo])
    mixed = level_survival(lo, x_s) * (1.0 - frac)
    mixed += level_survival(hi, x_s) * frac
    return np.maximum.accumulate(mixed[::-1])[::-1]
