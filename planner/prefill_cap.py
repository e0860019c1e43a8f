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
r = λ_c·E[S] / (1 - ρ_s). Processor sharing is insensitive (Kleinrock, "Time-shared systems: a
theoretical treatment", JACM 14(2), 1967): the number of capped prompts present is geometric,
P(n) = (1 - r)·rⁿ, and a job of work S stays S / (1 - ρ) on average. A capped prompt's own stay
(planner.latency) is its compute plus the decode part of each of its ceil(p/θ) steps, over
1 - ρ with ρ = λ·E[prefill compute]: the other prompts' compute is what it shares its steps with,
and the decode part of a step is counted once, in its own steps. The limit c is applied to the
count (a limited processor-sharing queue read as the unlimited one's occupancy):
- a request arriving when n >= c waits for n - c + 1 departures, FCFS; with c in service
  a departure comes every d = c·E[min of c residual works] / (1 - ρ_s) on average (the works
  of the jobs present in a PS queue are residual, equilibrium-distributed), and a geometric
  number of exponential gaps is exponential: P(W > x) = r^c·exp(-(1 - r)·x / d);
- a capped prompt then takes S(p) / (1 - ρ);
- a prompt of at most θ tokens arrives inside a step that carries one chunk of each of the
  K = min(n, c) prompts in service, and is prefilled in the next step, which carries their
  next chunks: about 1.5 chunks of each (the remainder of the step in flight, half on average,
  then a whole one). Each chunk is a draw over the capped prompts' chunks weighted by the time
  their steps last. W and these chunks come together by FFT on a time grid (as planner.prefill_wait).

In a backlog (planner.backlog) decoders pile up: every step's decode part grows, each prompt in
flight progresses slower, more are in flight and the slots fill. As planner.backlog does for the
FCFS queue, P(W > x) is read from the capped queue at the state a wait of x reaches: at each level
φ the queue whose works, short load ρ_s and slots c are φ of the way from those at N to those at
the regime's n_b decoders (c_b = ceil((C - n_b)/θ)), interpolated at φ(x) = min(1, x / τ). The
chance a request is blocked is then P(W > 0) from that reading; below c the in-service count keeps
its geometric shape, scaled to the rest. bench/accuracy.py: at 95% of the simulated saturation,
θ = 2,048, the short band's TTFT p90/p99 go from -73%/-59% to +5%/+26% (8B, H100) and from
-63%/-49% to -7%/+18% (70B, 4 x H100); θ = 512 (16 slots) stays at -94%: there the wait's
decay (about a second) is far shorter than τ (about 47 s), so the levels are never reached, and
even at the regime P(W > x) = 0.21·exp(-x / 1.4 s) puts the p99 near 4 s against the simulator's 19 s.

Where this departs from vLLM v1: with fewer than c capped prompts in flight each still gets θ
tokens a step (not an equal share of the budget), and with more waiting, the ones in flight are
served in admission order; processor sharing is the approximation that makes the counts
tractable, and bench/accuracy.py measures what it costs against the simulator, which follows v1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.backlog import BACKLOG_LEVELS, read_at_reached_state
from planner.prefill_wait import W_GRID, WaitDistribution, split_mass_rows, tilt

CHUNKS_SEEN = 1.5  # the remainder of the step in flight (half on average) and the request's own step


def _residual_min_s(service_s: np.ndarray, weight: np.ndarray, count: int) -> float:
    """E[min of `count` independent residual (equilibrium-distributed) services]:
    ∫ P(R > x)^count dx, with P(R > x) = E[(S - x)+] / E[S], piecewise linear between the sorted services."""
    order = np.argsort(service_s)
    s, w = service_s[order], weight[order] / weight.sum()
    mean = float(np.dot(w, s))
    knots = np.concatenate([[0.0], s])
    tail_w = np.concatenate([[1.0], 1.0 - np.cumsum(w)])  # P(S > knot)
    tail_ws = np.concatenate([[mean], mean - np.cumsum(w * s)])  # E[S; S > knot]
    surv = np.clip((tail_ws - knots * tail_w) / mean, 0.0, 1.0)
    # P(R > x) is linear between knots, so each piece's integral of its power is exact:
    # ∫ u^c dx = L·(u0^(c+1) - u1^(c+1)) / ((c + 1)(u0 - u1)), L·u0^c where u0 = u1.
    u0, u1, length = surv[:-1], surv[1:], np.diff(knots)
    du = u0 - u1
    flat = np.abs(du) < 1e-12
    piece = np.where(flat, u0**count, (u0 ** (count + 1) - u1 ** (count + 1)) / ((count + 1) * np.where(flat, 1.0, du)))
    return float(np.dot(length, piece))


@dataclass(frozen=True)
class CappedRegime:
    """The capped queue in the backlog regime (planner.backlog): each capped prompt's work at n_b
    decoders (stretched by the cache's turnover limit), the load of the prompts of at most θ
    tokens there, the in-flight slots ceil((C - n_b)/θ), and τ, the seconds the decoders take to
    grow from N to n_b in a backlog."""

    work_s: np.ndarray
    rho_short: float
    servers: int
    fill_s: float


def _load_and_gap(rate_rps: float, work_s: np.ndarray, weight: np.ndarray, rho_short: float,
                  servers: int) -> tuple[float, float] | None:
    """The capped prompts' load r (in the time the short prompts leave) and the departure gap d of
    the c slots (module docstring), or None where r reaches 1. weight: cell shares summing to 1."""
    r = rate_rps * float(np.dot(weight, work_s)) / max(1.0 - rho_short, 1e-12)
    if not (0.0 <= r < 1.0):
        return None
    return r, servers * _residual_min_s(work_s, weight, servers) / max(1.0 - rho_short, 1e-12)


def _level_wait_survival(x_s: np.ndarray, rate_rps: float, work_s: np.ndarray, weight: np.ndarray,
                         rho_short: float, servers: int) -> tuple[np.ndarray, float] | None:
    """P(W > x) of a capped prompt, r^c·exp(-(1 - r)·x / d) (module docstring), and its decay
    time d / (1 - r), or None where the load r reaches 1."""
    load = _load_and_gap(rate_rps, work_s, weight, rho_short, servers)
    if load is None:
        return None
    r, gap_s = load
    return r**servers * np.exp(-(1.0 - r) * x_s / gap_s), gap_s / (1.0 - r)


def _state_read_survival(x_s: np.ndarray, rate_rps: float, work_s: np.ndarray, weight: np.ndarray,
                         rho_short: float, servers: int, regime: CappedRegime) -> np.ndarray | None:
    """P(W > x) read at the state a wait of x reaches, as planner.backlog reads the FCFS queue's:
    at each level φ of BACKLOG_LEVELS the capped queue whose works, short load and slots are φ of
    the way from those at N to the regime's, interpolated at φ(x) = min(1, x / τ). A long wait is
    spent in a busy period in which decoders piled up: every step's decode part grew, each prompt
    in flight progresses slower, more are in flight and the slots fill (r^c rises). None where a
    level's queue never clears."""
    levels = np.array((0.0, *BACKLOG_LEVELS))
    rows = []
    for phi in levels:
        slots = max(1, round(servers + phi * (regime.servers - servers)))
        level = _level_wait_survival(x_s, rate_rps, work_s + phi * (regime.work_s - work_s), weight,
                                     rho_short + phi * (regime.rho_short - rho_short), slots)
        if level is None:
            return None
        rows.append(level[0])
    surv = np.array(rows)
    cols = np.arange(x_s.size)
    return read_at_reached_state(x_s, lambda level, _: surv[level, cols], regime.fill_s)


def capped_waits(rate_rps: float, work_s: np.ndarray, weight: np.ndarray, rho_short: float, servers: int,
                 chunk_s: np.ndarray, chunk_weight: np.ndarray, horizon_s: float,
                 regime: CappedRegime | None = None):
    """(wait of a capped prompt, wait of a prompt of at most θ tokens) as WaitDistributions, or
    None when the capped prompts' load r reaches 1 (at N, or in the backlog regime when given).
    rate_rps and weight: the capped prompts' arrival rate and cell shares; work_s their work S;
    chunk_s the seconds of their chunks; regime: the queue in the backlog regime, whose state a
    long wait reads (_state_read_survival)."""
    ws = weight / weight.sum()
    load = _load_and_gap(rate_rps, work_s, ws, rho_short, servers)
    if load is None:
        return None
    r, gap_s = load
    decay_s = gap_s / (1.0 - r)
    if regime is not None:
        slowest = _level_wait_survival(np.zeros(1), rate_rps, regime.work_s, ws, regime.rho_short, regime.servers)
        if slowest is None:
            return None
        decay_s = max(decay_s, slowest[1])
    jumps = CHUNKS_SEEN * chunk_s
    cw = chunk_weight / chunk_weight.sum()
    span = max(horizon_s, servers * float(jumps.max()) + 14.0 * decay_s, 1e-6)
    n = W_GRID
    dt = span / (n - 1)
    x = np.arange(n) * dt
    if regime is None:
        w_surv = r**servers * np.exp(-(1.0 - r) * x / gap_s)
    else:
        w_surv = _state_read_survival(x, rate_rps, work_s, ws, rho_short, servers, regime)
        if w_surv is None:
            return None
    w_cdf = 1.0 - w_surv
    blocked = float(w_surv[0])  # P(n >= c): a request waits for a slot
    mean_s = r**servers * decay_s if regime is None else float((np.sum(w_surv) - 0.5 * (w_surv[0] + w_surv[-1])) * dt)
    long_wait = WaitDistribution(w_cdf, dt, mean_s, r)
    # In service K = min(n, c): P(K = k) ∝ (1 - r)·r^k below c (sharing 1 - P(n >= c)), P(n >= c) at c, where W > 0 too.
    damp = tilt(n)
    phi = np.fft.rfft(split_mass_rows(jumps, cw, np.array([dt]), n)[0] * damp)
    wait_pmf = np.diff(w_cdf, prepend=0.0) / max(blocked, 1e-300)  # W given n >= c
    wait_pmf[0] -= (1.0 - blocked) / max(blocked, 1e-300)
    phi_w = np.fft.rfft(np.clip(wait_pmf, 0.0, None) * damp)
    free = (1.0 - blocked) / max(1.0 - r**servers, 1e-300)
    total = sum(free * (1.0 - r) * r**k * phi**k for k in range(servers)) + blocked * phi**servers * phi_w
    pmf = np.fft.irfft(total, n) / damp
    cdf = np.minimum(np.cumsum(np.clip(pmf, 0.0, None)), 1.0)
    in_service = sum(free * (1.0 - r) * r**k * k for k in range(servers)) + blocked * servers
    mean = long_wait.mean_s + in_service * float(np.dot(cw, jumps))
    return long_wait, WaitDistribution(cdf, dt, mean, r)
