"""Per-replica capacity of one deployment config for one traffic class, and which ceiling binds.

Derivation (continuous batching with chunked prefill, one replica):
- N sequences are resident on average; each decode step reads the weights once and
  all N caches, and does the FLOPs of N tokens (planner.roofline): t_dec(N).
- Prefill work is E[T_pf] seconds of GPU time per request; at arrival rate λ it
  takes a share ρ = λ·E[T_pf] of every step, so a step lasts t = t_dec(N) / (1 - ρ)
  (chunks ride in decode steps; overlap of their compute with the decode's memory
  traffic is not credited, which is conservative).
- A request is resident for s = E[steps per request] steps (prefill chunks plus
  one per output token), so Little's law gives N = λ·s·t. Solving for λ:
        λ(N) = N / (s·t_dec(N) + N·E[T_pf]),
  increasing in N (t_dec(N)/N falls as the weight read is shared), saturating at
  the roofline throughput. Every ceiling is therefore a bound on N:
    memory   N ≤ N_mem (budget / footprint, in the sizing mode),
    itl      ITL(N) ≤ target, the mean inter-token latency a token sees (itl_s): the
             mean step t(N) plus the prefill backlog a request meets as it starts to
             decode, spread over its output tokens (see itl_s),
    ttft     W_q + T_pf(p_q) + ceil(p_q / C)·t_dec(N) + R(N) ≤ TTFT target, p_q the
             class's prompt quantile (its chunks ride one step each), R the mean
             residual of the step in flight at arrival (residual_step_s), and W_q
             the Pollaczek-Khinchine mean wait of an M/G/1 prefill
             queue, ρ/(1-ρ)·E[T_pf]·(1 + cv²)/2, with cv² of prefill time taken as
             that of prompt length (E[p²]/E[p]² - 1); it grows without bound as
             prefill saturates the GPU, which is what stops a prefill-heavy class,
    batch    N ≤ the engine's max_num_seqs; at that point the step is either
             bandwidth- or compute-bound, and the ceiling is labelled as such.
  Capacity is λ at the knee: the smallest N reaching 99% of λ(min of the bounds)
  (see _knee). Each bound comes from a bracketed root (scipy.optimize.brentq) of a
  monotone function, so nothing stops early silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import brentq

from planner.deployment import Deployment
from planner.memory import (
    BudgetLadder,
    budget_ladder,
    kv_bytes_for_tokens,
    kv_bytes_per_token_by_layer_kind,
    paged_tokens,
    users_that_fit,
)
from planner.paged import (
    SIZING_MODES,
    SizingMode,
    TokenProfile,
    max_mean_count_for_quantile,
)
from planner.roofline import StepModel
from planner.units import quantile_label

CEILINGS = ("memory", "bandwidth", "compute", "itl", "ttft")
KNEE_SHARE = 0.99  # a replica is planned at 99% of the rate its binding bound allows
KNEE_FLAT = 0.9  # if 99% of that rate needs under 90% of the bound's batch, throughput has saturated
PERCENTILE_GRID_UNITS = 1024  # byte-grid resolution of the compound-Poisson total


@dataclass(frozen=True)
class SLO:
    """Latency targets of a traffic class; None means no target."""

    itl_ms: float | None = None
    ttft_s: float | None = None
    # (prompt tokens, TTFT target s) pairs checked instead of (the class's prompt quantile, ttft_s):
    # a pool mixing short and long requests owes each band its own target.
    ttft_checks: tuple[tuple[float, float], ...] = ()

    def checks(self, prompt_quantile_tokens: float) -> tuple[tuple[float, float], ...]:
        if self.ttft_checks:
            return self.ttft_checks
        return ((prompt_quantile_tokens, self.ttft_s),) if self.ttft_s is not None else ()


@dataclass(frozen=True)
class Footprint:
    """Bytes a resident sequence of the class holds, per sizing mode."""

    mean_bytes: float  # time-weighted mean (expected mode)
    worst_case_bytes: float  # at the context limit
    read_bytes: float  # bytes a decode step reads per sequence (shared prefix included)
    shared_prefix_bytes: float  # held once per replica
    budget_bytes: float  # KV budget left for sequences after the shared prefix


@dataclass(frozen=True)
class OperatingPoint:
    """A replica at one mean resident count N."""

    rate_rps: float
    resident_batch: float
    step_ms: float  # mean step time
    itl_ms: float  # mean inter-token latency a token sees (>= the mean step; see ReplicaModel.itl_s)
    decode_ms: float  # step time before prefill chunks stretch it
    ttft_ms: float
    kv_utilisation: float
    output_tokens_per_s: float
    prefill_share: float  # fraction of GPU time spent in prefill
    regime: str  # "bandwidth" or "compute" at this batch


@dataclass(frozen=True)
class Capacity:
    """The largest arrival rate one replica serves, and why it cannot serve more."""

    max_rps: float
    binding: str
    sizing: str
    point: OperatingPoint
    ceilings_rps: dict[str, float]  # each bound on its own
    concurrency: dict[str, int]  # max resident sequences by memory, in every sizing mode
    ladder: BudgetLadder
    footprint: Footprint
    prefill_s_at_quantile: float
    bound_batch: float = 0.0  # resident sequences at the binding bound, before planning at the knee
    notes: tuple[str, ...] = field(default_factory=tuple)


def footprint(dep: Deployment, prof: TokenProfile, ladder: BudgetLadder) -> Footprint:
    """Convert the class's token profile to bytes for this deployment's dtype, tp and window."""
    per_token_full, per_token_window = kv_bytes_per_token_by_layer_kind(dep.model, dep.kv_dtype, dep.tp)
    shared_tokens = prof.shared_prefix_blocks * prof.block_size
    shared_bytes = float(kv_bytes_for_tokens(dep.model, shared_tokens, dep.kv_dtype, dep.tp)) if shared_tokens else 0.0
    mean = prof.mean_paged_tokens * per_token_full + prof.mean_window_tokens * per_token_window
    held_limit = paged_tokens(dep.max_model_len, prof.block_size)
    worst = float(kv_bytes_for_tokens(dep.model, held_limit, dep.kv_dtype, dep.tp)) - shared_bytes
    return Footprint(
        mean_bytes=mean,
        worst_case_bytes=worst,
        read_bytes=mean + shared_bytes,
        shared_prefix_bytes=shared_bytes,
        budget_bytes=ladder.kv_budget_bytes - shared_bytes,
    )


def memory_concurrency(dep: Deployment, prof: TokenProfile, fp: Footprint, quantile: float) -> dict[str, float]:
    """Most resident sequences the KV budget holds, in each sizing mode (continuous; floor for users)."""
    if fp.budget_bytes <= 0:
        return dict.fromkeys(SIZING_MODES, 0.0)
    worst = users_that_fit(fp.budget_bytes, fp.worst_case_bytes) if fp.worst_case_bytes > 0 else math.inf
    expected = fp.budget_bytes / fp.mean_bytes if fp.mean_bytes > 0 else math.inf
    return {"worst_case": float(worst), "expected": expected, "percentile": _percentile_count(dep, prof, fp, quantile)}


def _percentile_count(dep: Deployment, prof: TokenProfile, fp: Footprint, quantile: float) -> float:
    per_token_full, per_token_window = kv_bytes_per_token_by_layer_kind(dep.model, dep.kv_dtype, dep.tp)
    levels = np.arange(prof.level_weight.size)
    tokens = levels * prof.block_size
    window = dep.model.sliding_window or 0
    level_bytes = tokens * per_token_full + np.minimum(tokens, window) * per_token_window
    unit = max(fp.budget_bytes / PERCENTILE_GRID_UNITS, float(level_bytes[1]) if levels.size > 1 else 1.0)
    # Mean-preserving discretisation: each footprint's mass is split between the two grid
    # points around it in proportion to its distance, so E[X] is exact on the grid.
    scaled = level_bytes / unit
    lower = np.floor(scaled).astype(np.int64)
    frac = scaled - lower
    size = int(lower.max()) + 2
    pmf = np.bincount(lower, weights=prof.level_weight * (1 - frac), minlength=size)
    pmf += np.bincount(lower + 1, weights=prof.level_weight * frac, minlength=size)
    pmf = pmf / pmf.sum()
    return max_mean_count_for_quantile(pmf, quantile, math.floor(fp.budget_bytes / unit))


class ReplicaModel:
    """The step and memory models of one (deployment, class) pair, as functions of N."""

    def __init__(self, dep: Deployment, prof: TokenProfile, slo: SLO, ladder: BudgetLadder | None = None):
        if prof.max_total_tokens > dep.max_model_len:
            raise ValueError(
                f"class holds requests of {prof.max_total_tokens} tokens, above the context limit {dep.max_model_len}"
            )
        self.dep, self.prof, self.slo = dep, prof, slo
        self.ladder = ladder or budget_ladder(dep)
        self.fp = footprint(dep, prof, self.ladder)
        self.step = StepModel.of(dep)
        self.prefill_mean_s = float(
            self.step.prefill_s(prof.mean_prompt, prof.mean_prompt_sq, prof.shared_prefix_tokens)
        )
        mean_p = max(prof.mean_prompt, 1.0)
        self.prompt_cv2 = max(prof.mean_prompt_sq / (mean_p * mean_p) - 1.0, 0.0)
        self.prefill_q_s, self.chunks_q = self._prompt_cost(prof.prompt_quantile_tokens)
        chunk = dep.engine.max_num_batched_tokens
        self.chunk_s = float(self.step.prefill_s(chunk, chunk * chunk))  # one full chunk from a prompt's start
        share = prof.cell_requests / prof.cell_requests.sum()
        order = np.argsort(prof.cell_decode_steps, kind="stable")
        self._sorted_steps = prof.cell_decode_steps[order]
        self._cum_weight = np.cumsum(share[order])
        self._cum_weighted_steps = np.cumsum(share[order] * self._sorted_steps)
        self.mean_decode_steps = float(np.dot(share, prof.cell_decode_steps))
        # (prefill s, chunks, target s, prompt tokens) per TTFT check
        self.ttft_targets = [(*self._prompt_cost(p), target, p) for p, target in slo.checks(prof.prompt_quantile_tokens)]

    def _prompt_cost(self, prompt_tokens: float) -> tuple[float, int]:
        s = self.prof.shared_prefix_tokens
        prefill = float(self.step.prefill_s(prompt_tokens, prompt_tokens * prompt_tokens, s))
        chunks = max(1, math.ceil(max(prompt_tokens - s, 0) / self.dep.engine.max_num_batched_tokens))
        return prefill, chunks

    def decode_s(self, n: float) -> float:
        return float(
            self.step.decode_step_s(n, n * self.fp.read_bytes, n * (self.prof.mean_context_tokens))
        )

    def rate(self, n: float) -> float:
        """λ(N) = N / (s·t_dec(N) + N·E[T_pf])."""
        if n <= 0:
            return 0.0
        return n / (self.prof.steps_per_request * self.decode_s(n) + n * self.prefill_mean_s)

    def point(self, n: float) -> OperatingPoint:
        lam = self.rate(n)
        t_dec = self.decode_s(n)
        rho = lam * self.prefill_mean_s
        t_step = self.step_s(n)
        t_mem, t_flop = self.step.decode_parts_s(n, n * self.fp.read_bytes, n * self.prof.mean_context_tokens)
        held = n * self.fp.mean_bytes + self.fp.shared_prefix_bytes
        return OperatingPoint(
            rate_rps=lam,
            resident_batch=n,
            step_ms=t_step * 1e3,
            itl_ms=self.itl_s(n) * 1e3 if n > 0 else t_step * 1e3,
            decode_ms=t_dec * 1e3,
            ttft_ms=self.ttft_s(n) * 1e3,
            kv_utilisation=held / self.ladder.kv_budget_bytes,
            output_tokens_per_s=lam * self.prof.mean_output,
            prefill_share=rho,
            regime="compute" if float(t_flop) > float(t_mem) else "bandwidth",
        )

    def step_s(self, n: float) -> float:
        lam = self.rate(n)
        rho = lam * self.prefill_mean_s
        return self.decode_s(n) / (1.0 - rho) if rho < 1 else math.inf

    def prefill_wait_s(self, n: float) -> float:
        """Pollaczek-Khinchine mean wait of the FCFS prefill queue: ρ/(1-ρ)·E[T_pf]·(1+cv²)/2."""
        rho = self.rate(n) * self.prefill_mean_s
        if rho >= 1:
            return math.inf
        return rho / (1.0 - rho) * self.prefill_mean_s * (1.0 + self.prompt_cv2) / 2.0

    def itl_s(self, n: float) -> float:
        """Mean inter-token latency a token sees, which exceeds the mean step.

        A request starts decoding when its prefill ends; the prompts that queued behind it
        meanwhile (work B = ρ·(W_q + S), W_q the prefill queue's wait and S its own prefill
        sojourn) are prefilled during its decode, on top of the share ρ of every step that
        new arrivals take. Chunked prefill spends at most one chunk per step on it, so a
        request of o - 1 decode steps meets at most (o - 1)·c of it, c = one full chunk's
        prefill time. A request's decode time is then D = ((o-1)·t_dec + min(B, (o-1)·c)) /
        (1 - ρ), and averaged over tokens the gap is the mean step t plus
        E[min(B, (o-1)·c)] / ((1-ρ)·E[o-1]). The term matters when prefill times are
        heavy-tailed (long prompts make W_q large): the simulator (bench/accuracy.py)
        showed the mean step alone understating the per-token ITL by up to half there.
        """
        t = self.step_s(n)
        rho = self.rate(n) * self.prefill_mean_s
        if not math.isfinite(t) or self.mean_decode_steps <= 0:
            return t
        sojourn = self.prefill_mean_s + self.prof.prefill_steps_per_request * self.decode_s(n)
        backlog = rho * (self.prefill_wait_s(n) + sojourn)
        return t + self._backlog_met(backlog) / ((1.0 - rho) * self.mean_decode_steps)

    def _backlog_met(self, backlog_s: float) -> float:
        """E[min(B, (o-1)·c)] over requests, from the cells sorted by decode steps (O(log cells))."""
        k = int(np.searchsorted(self._sorted_steps * self.chunk_s, backlog_s, side="left"))
        below = self._cum_weighted_steps[k - 1] * self.chunk_s if k else 0.0
        above = 1.0 - (self._cum_weight[k - 1] if k else 0.0)
        return below + backlog_s * above

    def ttft_s(self, n: float, prefill_s: float | None = None, chunks: int | None = None) -> float:
        """TTFT of a prompt (default: the class's quantile prompt) at mean resident count n:
        the prefill queue's wait, the prompt's own prefill and one decode step per chunk,
        plus the residual of the step in flight when it arrives."""
        lam = self.rate(n)
        rho = lam * self.prefill_mean_s
        if rho >= 1:
            return math.inf
        wait = self.prefill_wait_s(n)
        prefill = self.prefill_q_s if prefill_s is None else prefill_s
        steps = self.chunks_q if chunks is None else chunks
        return wait + prefill + steps * self.decode_s(n) + self.residual_step_s(n)

    def residual_step_s(self, n: float) -> float:
        """Mean remaining time of the step in flight at a random arrival: E[t²] / (2 E[t])
        (the inspection paradox). Steps are decode-only (t_dec) or carry a prefill chunk
        (t_dec + c); a share f = min(1, λ·E[chunks]·t) of steps carries one, and f·c = ρ·t
        keeps the mean step t = t_dec / (1 - ρ)."""
        t_dec = self.decode_s(n)
        lam = self.rate(n)
        rho = lam * self.prefill_mean_s
        t = t_dec / (1.0 - rho)
        f = min(1.0, lam * self.prof.prefill_steps_per_request * t)
        if f <= 0:
            return t_dec / 2.0
        chunk = rho * t / f
        second_moment = (1.0 - f) * t_dec**2 + f * (t_dec + chunk) ** 2
        return second_moment / (2.0 * t)

    def ttft_excess(self, n: float) -> float:
        """max over TTFT checks of (TTFT - target), seconds; <= 0 when every check holds."""
        return max(self.ttft_s(n, pf, ch) - target for pf, ch, target, _ in self.ttft_targets)

    def resident_for_rate(self, rate_rps: float, n_max: float) -> float | None:
        """N at which the replica runs at `rate_rps`, or None if even n_max cannot carry it."""
        if rate_rps <= 0:
            return 0.0
        if self.rate(n_max) < rate_rps:
            return None
        floor_rps = self.rate(1e-9)
        if floor_rps >= rate_rps:  # a trickle (1e-300 req/s): N is below the bracket, where λ(N) is linear
            return 1e-9 * rate_rps / floor_rps
        return brentq(lambda n: self.rate(n) - rate_rps, 1e-9, n_max, xtol=1e-9, rtol=1e-12)


def _knee(rm: ReplicaModel, n_bound: float) -> float:
    """The smallest N reaching KNEE_SHARE of the rate at the bound.

    Near a bound λ(N) is often nearly flat (prefill-heavy classes: halving N can cost
    1% of throughput), so the last 1% of rate costs a disproportionate share of
    latency and memory; and the simulator (bench/accuracy.py) finds the analytical
    rate about 2% optimistic there. Planning at the knee is the roofline's "second
    ceiling" (seed 000: past the ridge point more users raise latency, not throughput).
    """
    if n_bound <= 0:
        return 0.0
    target = KNEE_SHARE * rm.rate(n_bound)
    tiny = min(1e-6, n_bound)
    if rm.rate(tiny) >= target:
        return tiny
    return brentq(lambda n: rm.rate(n) - target, tiny, n_bound, xtol=1e-9, rtol=1e-12)


def _largest_n(pred_excess, n_hi: float) -> float:
    """Largest N in [0, n_hi] with pred_excess(N) <= 0, for pred_excess increasing in N."""
    if pred_excess(n_hi) <= 0:
        return n_hi
    tiny = min(1e-6, n_hi)
    if pred_excess(tiny) > 0:
        return 0.0
    return brentq(pred_excess, tiny, n_hi, xtol=1e-9, rtol=1e-12)


def replica_capacity(
    dep: Deployment,
    prof: TokenProfile,
    slo: SLO = SLO(),
    *,
    sizing: SizingMode = "expected",
    quantile: float = 0.99,
    ladder: BudgetLadder | None = None,
) -> Capacity:
    """The largest arrival rate (requests/s) one replica serves for this class, and the binding ceiling."""
    if sizing not in SIZING_MODES:
        raise ValueError(f"unknown sizing mode {sizing!r}; choose from {SIZING_MODES}")
    rm = ReplicaModel(dep, prof, slo, ladder)
    conc = memory_concurrency(dep, prof, rm.fp, quantile)
    n_mem = conc[sizing]
    n_batch = float(dep.engine.max_num_seqs)
    n_cap = min(n_mem, n_batch)
    bounds: dict[str, float] = {"memory": n_mem}
    if slo.itl_ms is not None:
        target = slo.itl_ms / 1e3
        bounds["itl"] = _largest_n(lambda n: rm.itl_s(n) - target, n_cap) if n_cap > 0 else 0.0
    if rm.ttft_targets:
        bounds["ttft"] = _largest_n(rm.ttft_excess, n_cap) if n_cap > 0 else 0.0
    n_bound = min([n_cap, *bounds.values()])
    binding = min(bounds, key=lambda k: (bounds[k], CEILINGS.index(k)))
    notes = []
    if n_batch < bounds[binding] or (n_batch <= n_bound and binding == "memory" and n_batch < n_mem):
        binding = rm.point(n_batch).regime
        notes.append(f"batch capped at the engine's max_num_seqs = {dep.engine.max_num_seqs}")
    n_star = _knee(rm, n_bound)
    if n_star < KNEE_FLAT * n_bound:
        # Throughput had saturated well before the bound: say so rather than blame the bound.
        pt = rm.point(n_star)
        limit = binding
        binding = "compute" if pt.prefill_share >= 0.5 or pt.regime == "compute" else "bandwidth"
        notes.append(
            f"throughput saturates at {n_star:,.0f} resident sequences: up to the {limit} limit of "
            f"{n_bound:,.0f} more concurrency adds latency, not requests/s (<{1 - KNEE_SHARE:.0%} more)"
        )
    for prefill_s, _, target, prompt in rm.ttft_targets:
        if prefill_s > target:
            notes.append(
                f"prefill of a {prompt:,.0f}-token prompt (the {quantile_label(prof.prompt_quantile)} of its band) "
                f"alone takes {prefill_s:.2f} s > TTFT target {target:g} s"
            )
    point = rm.point(n_star) if n_star > 0 else rm.point(0.0)
    ceilings = {k: rm.rate(v) for k, v in bounds.items()}
    ceilings["roofline"] = rm.rate(n_batch)
    return Capacity(
        max_rps=point.rate_rps if n_star > 0 else 0.0,
        binding=binding,
        sizing=sizing,
        point=point,
        ceilings_rps=ceilings,
        concurrency={k: math.floor(v) if math.isfinite(v) else 10**9 for k, v in conc.items()},
        ladder=rm.ladder,
        footprint=rm.fp,
        prefill_s_at_quantile=rm.prefill_q_s,
        bound_batch=n_bound,
        notes=tuple(notes),
    )

