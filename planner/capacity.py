"""Per-replica capacity of one deployment config for one traffic class, and which ceiling binds.

Derivation (continuous batching with chunked prefill, one replica):
- N sequences are resident on average; each decode step reads the weights once and
  all N caches, and does the FLOPs of N tokens (planner.roofline): t_dec(N).
- A decoding request's own steps hold it beside the others: t_own = t_dec(N + 1)
  (ReplicaModel.decode_seen_s; at most the decoders the engine holds), which at the N of a
  nearly idle long-context pool is a whole cache read more than t_dec(N). TPOT, per-token
  gaps and the request's residence are timed on these steps.
- Prefill work is E[T_pf] seconds of GPU time per request; at arrival rate λ it
  takes a share ρ = λ·E[T_pf] of every step, so a step lasts t = t_dec(N) / (1 - ρ)
  on average, and a request's own t_own / (1 - ρ) (chunks ride in decode steps; overlap of
  their compute with the decode's memory traffic is not credited, which is conservative).
- A request is resident for s = E[steps per request] of its own steps (prefill chunks plus
  one per output token), so Little's law gives N = λ·s·t_own / (1 - ρ). Solving for λ:
        λ(N) = N / (s·t_own + N·E[T_pf]),
  increasing in N (t_own/N falls as the weight read is shared), saturating at
  the roofline throughput. Every ceiling is therefore a bound on N:
    memory   N ≤ N_mem (budget / footprint, in the sizing mode),
    token_budget
             the step's token budget C (the engine's max_num_batched_tokens): a step carries
             the N decodes and at most C - N prompt tokens, so the prefill queue's load
             (prefill_load) reaches 1 at a finite N, past which prompts queue without end
             (without it, MLPerf's C = 1,024 on the Azure trace planned 4-6% above the
             simulator's saturation; tests/test_capacity.py),
    ttft     each band's TTFT target at its statistic, from the latency distributions
             of planner.latency (the prefill queue's waiting time by FFT, plus the
             request's own prefill): head-of-line blocking behind long prompts shows here,
    tpot     each band's per-request TPOT target at its statistic (planner.latency),
    itl      a per-token gap target, where a band states one,
    attainment  the share of requests meeting both their TTFT and TPOT targets,
    batch    N ≤ the engine's max_num_seqs; at that point the step is either
             bandwidth- or compute-bound, and the ceiling is labelled as such.
  Latencies grow with N, so each latency bound is the N where its target stops
  holding, found by bisection on the model's exact miss (planner.latency.excess).
  Capacity is λ at the knee: the smallest N reaching 99% of λ(min of the bounds)
  (see _knee). A target the model never misses below the other ceilings is reported as
  clamped, not as a tie. A target no load meets (its floor: TTFT's own prefill, a per-token
  target's own steps) stops the config at 0 and is named with its floor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache, partial

import numpy as np

from planner.backlog import Backlog, backlog_regime
from planner.deployment import Deployment
from planner.footprint import Footprint, footprint, memory_concurrency, percentile_count_bound
from planner.latency import LatencyModel, LatencyPoint, stretched_step_s
from planner.memo import shallow_copy
from planner.memory import (
    BudgetLadder,
    budget_ladder,
)
from planner.paged import (
    SIZING_MODES,
    SizingMode,
    TokenProfile,
)
from planner.roofline import StepModel
from planner.roots import grid_point_above, increasing_root, largest_on_grid
from planner.targets import SLO

NO_TARGETS = SLO()

__all__ = ["NO_TARGETS", "SLO", "Capacity", "OperatingPoint", "ReplicaModel", "replica_capacity"]

CEILINGS = ("memory", "token_budget", "bandwidth", "compute", "itl", "tpot", "ttft", "attainment")
LATENCY_CEILINGS = ("ttft", "tpot", "itl", "attainment")
_COST_ORDER = ("ttft", "itl", "tpot", "attainment")  # cheapest to check first
KNEE_SHARE = 0.99  # a replica is planned at 99% of the rate its binding bound allows
KNEE_FLAT = 0.9  # if 99% of that rate needs under 90% of the bound's batch, throughput has saturated
BOUND_REL_TOL = 1e-3  # latency bounds are bisected to this relative width in N
LEAST_RESIDENT_SEQS = 1e-6  # where a target no load meets is found to miss
PER_TOKEN = ("tpot", "itl")  # the targets of a config's own steps, which a floor of its steps can miss


@dataclass(frozen=True)
class OperatingPoint:
    """A replica at one mean resident count N."""

    rate_rps: float
    resident_batch: float
    step_ms: float  # mean step time
    itl_ms: float  # mean inter-token latency a token sees (>= the mean step; see ReplicaModel.itl_s)
    decode_ms: float  # step time before prefill chunks stretch it
    kv_utilisation: float
    output_tokens_per_s: float
    prefill_share: float  # fraction of GPU time spent in prefill
    # "bandwidth" or "compute": which resource the decode step at this batch spends more time on,
    # its memory time (weight and cache bytes) against its compute time (GEMM and attention FLOPs),
    # each summed over the step's phases (Roofline.decode_parts_s). A label for people only: the
    # step time is the roofline per phase (Roofline.decode_step_s), where the GEMMs may be
    # compute-bound while attention is bandwidth-bound.
    regime: str


@dataclass(frozen=True)
class TargetFloor:
    """A target below what the config can do with no queueing at all. TTFT: the band's own prefill
    (and one decode step per chunk) at the target's statistic (target_floors). TPOT, ITL: the
    statistic with the replica all but empty, its own decode steps (unloaded_floors)."""

    band: str
    kind: str  # "ttft", "tpot" or "itl"
    target_s: float
    floor_s: float
    stat: str

    def text(self) -> str:
        if self.kind == "ttft":
            return (f"band '{self.band}': TTFT {self.stat} ≤ {self.target_s:g} s is below the floor of "
                    f"{self.floor_s:.2f} s (the {self.stat} of the band's prefill time alone, with no queueing)")
        return (f"band '{self.band}': {self.kind.upper()} {self.stat} ≤ {self.target_s * 1e3:g} ms is below the floor of "
                f"{self.floor_s * 1e3:.2f} ms (its {self.stat} with the replica all but empty: the config's own steps)")

    @property
    def shortfall(self) -> float:
        """How many times the target the floor is: how far the config is from meeting it."""
        return self.floor_s / self.target_s


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
    bound_batch: float = 0.0  # resident sequences at the binding bound, before planning at the knee
    notes: tuple[str, ...] = field(default_factory=tuple)
    # latency targets that still hold at the other ceilings (no bound of their own); beside a TTFT floor, the
    # per-token ones met at no load (an attainment goal is then in neither: not judged, its note says)
    clamped: tuple[str, ...] = ()
    floors: tuple[TargetFloor, ...] = ()  # targets no load can meet on this config
    # the ceiling the knee is taken below: `binding`, or the bound below which throughput saturated
    # (binding then names the resource: compute or bandwidth); "roofline" at the engine's batch limit
    bound_kind: str = ""
    # the resident sequences each of ceilings_rps is λ(N) at (the same keys): the memory concurrency unfloored,
    # the token budget's, a latency bound's grid point, the engine's batch limit
    ceilings_batch: dict[str, float] = field(default_factory=dict)

    def past_batch_limit(self, max_num_seqs: int) -> list[str]:
        """The ceilings, the batch limit's own aside, whose N lies past the engine's max_num_seqs: λ(N)
        there is the formula's, at a batch no replica runs (the 128k rollout's token budget at N =
        1,253.56 read above the batch limit's rate)."""
        return [name for name in self.ceilings_rps
                if name != "roofline" and (self.ceilings_batch.get(name) or 0.0) > max_num_seqs]


@lru_cache(maxsize=256)
def _decode_steps(prof: TokenProfile) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The class's cells sorted by decode steps, the running sums of their request share and of
    share x steps (ReplicaModel._backlog_met), and the mean decode steps: read-only, shared by
    every deployment of the class."""
    share = prof.cell_requests / prof.cell_requests.sum()
    order = np.argsort(prof.cell_decode_steps, kind="stable")
    sorted_steps = prof.cell_decode_steps[order]
    cum_weight = np.cumsum(share[order])
    cum_weighted_steps = np.cumsum(share[order] * sorted_steps)
    for a in (sorted_steps, cum_weight, cum_weighted_steps):
        a.flags.writeable = False
    return sorted_steps, cum_weight, cum_weighted_steps, float(np.dot(share, prof.cell_decode_steps))


def mean_prefill_s(step: StepModel, prof: TokenProfile) -> float:
    """A request's mean prefill time in the class (StepModel.prefill_s). Full-attention FLOPs are a
    polynomial in p, so the class's E[p] and E[p²] give their mean exactly (where no prompt is
    shorter than a shared prefix, whose new tokens max(p - S, 0) are not); a capped layer's are
    not (AttentionFlops.prompt reads which side of the window a prompt is on from E[p]: a class
    whose mean is past the window and whose short prompts are not was charged 16% low by it, one
    whose mean is short and whose tail is long, 15% high), so with capped layers the mean is taken
    over the histogram's cells, each wholly on one side of a power-of-two window."""
    if not step.attention.capped_per_pair:
        return float(step.prefill_s(prof.mean_prompt, prof.mean_prompt_sq, prof.shared_prefix_tokens))
    per_cell = step.prefill_s(prof.cell_prompt_tokens, prof.cell_prompt_sq, prof.shared_prefix_tokens)
    return float(np.dot(prof.cell_requests, per_cell) / prof.cell_requests.sum())


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
        self.prefill_mean_s = mean_prefill_s(self.step, prof)
        chunk = dep.engine.max_num_batched_tokens
        self.chunk_s = float(self.step.prefill_s(chunk, chunk * chunk))  # one full chunk from a prompt's start
        self._sorted_steps, self._cum_weight, self._cum_weighted_steps, self.mean_decode_steps = _decode_steps(prof)
        self.latency = LatencyModel(self.step, prof, chunk, slo, dep.engine.long_prefill_token_threshold or None)
        # Moments of the prefill queue's service time (compute of the prompt plus the decode part
        # of the steps its tokens ride), which the mean wait needs (prefill_wait_s).
        cells = self.latency.cells
        new_tokens, prefill = cells.new_tokens, self.latency.prefill_s
        self._prefill_sq_mean = float(np.dot(cells.weight, prefill**2))
        self._prefill_cross = float(np.dot(cells.weight, prefill * new_tokens))
        self._new_tokens_mean = float(np.dot(cells.weight, new_tokens))
        self._new_tokens_sq = float(np.dot(cells.weight, new_tokens**2))
        self._points: dict[float, LatencyPoint] = {}
        self._decode: dict[float, float] = {}
        self._concurrency: dict[float, dict[str, float]] = {}
        self._batch_bounds: dict[tuple, float] = {}  # batch_bound's answers (shared, like _concurrency, across targets)
        self._floors: tuple[TargetFloor, ...] | None = None
        self._below: dict[tuple, Below] = {}  # capacity_below's answers
        self._empty: list[np.ndarray] = []  # empty_own_s's answer (shared, like _decode, across targets)

    def with_slo(self, slo: SLO) -> ReplicaModel:
        """The same replica and class against other latency targets: the memory, step and
        latency tables are shared (a sweep of TTFT limits re-searches only the bound)."""
        if slo == self.slo:
            return self
        other = shallow_copy(self)
        other.slo, other.latency = slo, self.latency.with_slo(slo)
        other._points = {}  # a point's waiting-time grid spans twice the TTFT limits
        other._floors = None
        other._below = {}
        return other

    def empty_own_s(self) -> np.ndarray:
        """Each cell's own time to its first token in an empty replica (its prefill, a decode step a
        chunk, no queueing): no target enters it, so the copies of with_slo share it (a TTFT sweep
        asked it again of every copy: 1,754 of the full candidate set's 5,987 latency points)."""
        if not self._empty:
            own_s = self.latency.at(0.0, self.decode_s(1.0), 1.0).own_s
            own_s.flags.writeable = False
            self._empty.append(own_s)
        return self._empty[0]

    def floors(self) -> tuple[TargetFloor, ...]:
        """target_floors, computed once."""
        if self._floors is None:
            self._floors = target_floors(self)
        return self._floors

    def concurrency(self, quantile: float) -> dict[str, float]:
        """memory_concurrency, computed once per quantile (it does not depend on the targets)."""
        if quantile not in self._concurrency:
            self._concurrency[quantile] = memory_concurrency(self.dep, self.prof, self.fp, quantile)
        return self._concurrency[quantile]

    def batch_bound(self, sizing: SizingMode, quantile: float) -> float:
        """An upper bound on the resident batch the memory and batch ceilings allow, without the
        percentile sizing's quantiles when they are not computed yet (percentile_count_bound).
        Remembered: the lazy search asks it of every pair it bounds, for every question."""
        key = self.batch_bound_key(sizing, quantile)
        if key not in self._batch_bounds:
            if key[2]:
                n_mem = percentile_count_bound(self.dep, self.prof, self.fp)
            else:
                n_mem = self.concurrency(quantile)[sizing]
            self._batch_bounds[key] = min(n_mem, float(self.dep.engine.max_num_seqs))
        return self._batch_bounds[key]

    def batch_bound_key(self, sizing: SizingMode, quantile: float) -> tuple:
        """What batch_bound's answer depends on: the sizing, the quantile, and whether the percentile
        sizing's quantiles are still to be computed (its bound is looser until they are)."""
        return sizing, quantile, sizing == "percentile" and quantile not in self._concurrency

    def decode_s(self, n: float) -> float:
        """One decode step at resident batch n (remembered: a search asks rate, step and latency
        of the same n, and sweeps of other targets share the table)."""
        t = self._decode.get(n)
        if t is None:
            x = float(n)
            t = self._decode[n] = float(self.step.decode_step_one_s(x, x * self.fp.read_bytes, x * self.prof.mean_context_tokens))
        return t

    def decode_seen_s(self, n: float) -> float:
        """One decode step as a decoding request sees it, at mean resident batch n: its own
        sequence beside the others, n + 1 (the others a resident request sees are, as in an
        M/G/∞ system, Poisson with the time-average mean n; E[N²]/E[N] = n + 1), at most the
        decoders the cache and max_num_seqs hold. TPOT and per-token gaps are timed on these
        steps. In a long-context pool of n = 0.02-0.2, t_dec(n) leaves out a whole sequence's
        cache read: timed at t_dec(n), the model's TPOT p50 was 15-21% under the simulator's and
        its mean ITL 15-16% (tests/test_latency.py's cases; 1-6% with this step), and the 128k
        rollout's long pool's mean ITL 8.81 ms against 10.09 simulated (9.98 with it)."""
        return self.decode_s(max(n, min(n + 1.0, self._decoder_count)))

    def rate(self, n: float, seen: float | None = None) -> float:
        """λ(N) = N / (s·t_own + N·E[T_pf]): Little's law, a request resident for its s steps (module
        docstring), each its own step t_own stretched by prefill's share of the GPU. t_own is the
        step a request's own decodes hold (decode_seen_s: N + 1 sequences for Poisson arrivals, at
        most the decoders the engine holds). seen: that batch, for a closed loop: an offline
        throughput run (the calibration's) holds its N sequences, the request among them, so seen = N.

        Over the time-average step t_dec(N) instead, the model's N ran under the simulator's in
        most shipped pools, most where N is small: the 128k rollout's long pool 0.12 against 0.18
        simulated (0.14 with t_own), its short pool 45.00 against 46.64 (45.22), finance_2027's
        pool 64.96 against 69.72 (65.55). Capacities moved by 0.2% or less, most down.
        """
        if n <= 0:
            return 0.0
        return n / (self.prof.steps_per_request * self._own_step_s(n, seen) + n * self.prefill_mean_s)

    def _own_step_s(self, n: float, seen: float | None) -> float:
        """The decode step a request's own decodes hold: decode_seen_s(n) in an open loop, t_dec(seen) in a closed one."""
        return self.decode_seen_s(n) if seen is None else self.decode_s(seen)

    def point(self, n: float) -> OperatingPoint:
        lam = self.rate(n)
        t_dec = self.decode_s(n)
        rho = lam * self.prefill_mean_s
        t_step = stretched_step_s(t_dec, rho)
        t_mem, t_flop = self.step.decode_parts_s(n, n * self.fp.read_bytes, n * self.prof.mean_context_tokens)
        held = n * self.fp.mean_bytes + self.fp.shared_prefix_bytes
        return OperatingPoint(
            rate_rps=lam,
            resident_batch=n,
            step_ms=t_step * 1e3,
            itl_ms=self.itl_s(n) * 1e3,  # at n = 0, the step a first request would see: t_dec(1)
            decode_ms=t_dec * 1e3,
            kv_utilisation=held / self.ladder.kv_budget_bytes,
            output_tokens_per_s=lam * self.prof.mean_output,
            prefill_share=rho,
            regime="compute" if float(t_flop) > float(t_mem) else "bandwidth",
        )

    def step_s(self, n: float) -> float:
        lam = self.rate(n)
        rho = lam * self.prefill_mean_s
        return stretched_step_s(self.decode_s(n), rho)

    def _prefill_queue(self, n: float, seen: float | None = None) -> tuple[float, float, float]:
        """(λ, the decode time a prompt token holds the prefill queue for, ρ_S) at mean resident
        count n (seen: as for rate): a step's decode part t_dec is shared by the C' = C - N prompt
        tokens the step's token budget C leaves after the decodes, and ρ_S = λ·E[S] (prefill_load)."""
        lam = self.rate(n, seen)
        per_token = self.decode_s(n) / max(self.dep.engine.max_num_batched_tokens - n, 1.0)
        return lam, per_token, lam * (self.prefill_mean_s + per_token * self._new_tokens_mean)

    def prefill_load(self, n: float) -> float:
        """ρ_S = λ·E[S], the prefill queue's load at mean resident count n, S = prefill compute +
        (new prompt tokens / C')·t_dec the time a prompt holds the queue (planner.latency). At 1
        the steps the prompts need, each carrying at most C' of their tokens, fill the GPU's time."""
        return self._prefill_queue(n)[2]

    def prefill_wait_s(self, n: float, seen: float | None = None) -> float:
        """Mean wait of the FCFS prefill queue (Pollaczek-Khinchine): λ·E[S²] / (2(1 - ρ_S)), with
        S and ρ_S as in prefill_load (seen: as for rate). The second moment of prefill *time*
        (quadratic in attention) sets it, not that of prompt length."""
        lam, per_token, rho = self._prefill_queue(n, seen)
        if rho >= 1:
            return math.inf
        second = self._prefill_sq_mean + 2 * per_token * self._prefill_cross + per_token**2 * self._new_tokens_sq
        return lam * second / (2.0 * (1.0 - rho))

    @cached_property
    def budget_bound(self) -> float:
        """The resident batch where the prefill queue's load reaches 1 (the token-budget ceiling):
        past it the steps cannot carry the prompts that arrive. Below C - 1, where the decodes
        alone leave one token a step; the load increases with N (λ(N), t_dec(N) and 1/(C - N) do)."""
        hi = max(float(self.dep.engine.max_num_batched_tokens) - 1.0, 1e-6)
        tiny = min(1e-6, hi)
        if self.prefill_load(hi) < 1.0:
            return hi
        if self.prefill_load(tiny) >= 1.0:
            return 0.0
        # In log form the load's steep rise towards C - 1 bends less: a third fewer evaluations.
        return increasing_root(lambda n: math.log(max(self.prefill_load(n), 1e-300)), tiny, hi)

    def itl_s(self, n: float, seen: float | None = None) -> float:
        """Mean inter-token latency a token sees, which exceeds the mean step. seen: the batch a
        decoding request's steps hold [default: decode_seen_s's, for Poisson arrivals; a closed
        loop of c users holds c, the request among them, and its rate is rate(c, seen=c)].

        A request starts decoding when its prefill ends; the prompts that queued behind it
        meanwhile (work B = ρ·(W_q + S), W_q the prefill queue's wait and S its own prefill
        sojourn) are prefilled during its decode, on top of the share ρ of every step that
        new arrivals take. Chunked prefill spends at most one chunk per step on it, so a
        request of o - 1 decode steps meets at most (o - 1)·c of it, c = one full chunk's
        prefill time. A request's decode time is then D = ((o-1)·t_own + min(B, (o-1)·c)) /
        (1 - ρ), t_own its own decode step (decode_seen_s), and averaged over tokens the gap is
        the mean step it sees, t = t_own / (1 - ρ), plus
        E[min(B, (o-1)·c)] / ((1-ρ)·E[o-1]). The term matters when prefill times are
        heavy-tailed (long prompts make W_q large): the simulator (bench/accuracy.py)
        showed the mean step alone understating the per-token ITL by up to half there.
        """
        rho = self.rate(n, seen) * self.prefill_mean_s
        t = stretched_step_s(self._own_step_s(n, seen), rho)
        if not math.isfinite(t) or self.mean_decode_steps <= 0:
            return t
        sojourn = self.prefill_mean_s + self.prof.prefill_steps_per_request * self.decode_s(n)
        backlog = rho * (self.prefill_wait_s(n, seen) + sojourn)
        return t + self._backlog_met(backlog) / ((1.0 - rho) * self.mean_decode_steps)

    def _backlog_met(self, backlog_s: float) -> float:
        """E[min(B, (o-1)·c)] over requests, from the cells sorted by decode steps (O(log cells))."""
        if not math.isfinite(backlog_s):  # the prefill queue never empties: every request meets a chunk a step
            return float(self._cum_weighted_steps[-1]) * self.chunk_s
        k = int(np.searchsorted(self._sorted_steps * self.chunk_s, backlog_s, side="left"))
        below = self._cum_weighted_steps[k - 1] * self.chunk_s if k else 0.0
        above = 1.0 - (self._cum_weight[k - 1] if k else 0.0)
        return below + backlog_s * above

    def latency_at(self, n: float) -> LatencyPoint:
        """The latency distributions at mean resident count n (cached: bisections revisit points)."""
        if n not in self._points:
            self._points[n] = self.latency.at(self.rate(n), self.decode_s(n), n, self.backlog(n), self.decode_seen_s(n),
                                              partial(self.itl_s, n))
        return self._points[n]

    def backlog(self, n: float, rate_rps: float | None = None) -> Backlog | None:
        """The prefill queue's backlog regime at mean resident count n and the rate λ(n) (or
        `rate_rps`) (planner.backlog): the decoders bounded by the cache's mean-footprint count
        and max_num_seqs."""
        return backlog_regime(rate_rps=self.rate(n) if rate_rps is None else rate_rps, resident=n,
                              chunk_tokens=float(self.dep.engine.max_num_batched_tokens),
                              decode_s=self.decode_s, mean_prefill_s=self.latency.mean_prefill_s,
                              mean_new_tokens=self.latency.mean_new_tokens, mean_decode_steps=self.mean_decode_steps,
                              cap_decoders=self._decoder_count, rate_at_cap_rps=self._rate_at_decoder_count)

    @cached_property
    def _decoder_count(self) -> float:
        """The most decoders the cache's mean-footprint count and max_num_seqs allow."""
        return min(self.fp.budget_bytes / self.fp.mean_bytes if self.fp.mean_bytes > 0 else math.inf,
                   float(self.dep.engine.max_num_seqs))

    @cached_property
    def _rate_at_decoder_count(self) -> float:
        """The rate where the most decoders run (what the backlog needs at every latency point; it
        does not depend on the targets)."""
        return self.rate(self._decoder_count)

    def failing(self, n: float, kinds: tuple[str, ...] = LATENCY_CEILINGS, *, first: bool = False) -> list[str]:
        """The kinds of target (of `kinds`) that miss at n; with `first`, stop at the first miss
        (the cheap TTFT check runs before the TPOT tables)."""
        pt = self.latency_at(n)
        out = []
        for kind in kinds:
            if kind == "attainment":
                miss = self.slo.attainment is not None and pt.attainment() < self.slo.attainment
            else:
                miss = any(pt.misses(i, kind, getattr(band, kind))
                           for i, band in enumerate(self.slo.bands) if getattr(band, kind) is not None)
            if miss:
                out.append(kind)
                if first:
                    break
        return out

    def margin(self, n: float, kinds: tuple[str, ...] = LATENCY_CEILINGS, *, exact: bool = True) -> float:
        """The largest miss margin of the targets of `kinds` at n (LatencyPoint.margin); <= 0: all hold.

        exact=False: stop at the first target that misses (cheap ones first: TTFT and ITL read a
        table, TPOT mixes its tails over the wait), returning a positive margin no larger than the
        largest. A search for the largest N that holds only needs the sign there."""
        pt = self.latency_at(n)
        worst = -math.inf
        for kind in (kinds if exact else sorted(kinds, key=_COST_ORDER.index)):
            if worst > 0 and not exact:
                break
            if kind == "attainment":
                if self.slo.attainment is not None:  # log of the share missing over the share allowed
                    missing, allowed = 1.0 - pt.attainment(), 1.0 - self.slo.attainment
                    worst = max(worst, math.log(max(missing, 1e-12) / allowed))
                continue
            for i, band in enumerate(self.slo.bands):
                if getattr(band, kind) is not None:
                    worst = max(worst, pt.margin(i, kind, getattr(band, kind)))
        return worst

    def resident_for_rate(self, rate_rps: float, n_max: float) -> float | None:
        """N at which the replica runs at `rate_rps`, or None if even n_max cannot carry it."""
        if rate_rps <= 0:
            return 0.0
        if self.rate(n_max) < rate_rps:
            return None
        floor_rps = self.rate(1e-9)
        if floor_rps >= rate_rps:  # a trickle (1e-300 req/s): N is below the bracket, where λ(N) is linear
            return 1e-9 * rate_rps / floor_rps
        return increasing_root(lambda n: self.rate(n) - rate_rps, 1e-9, n_max)


def _knee(rm: ReplicaModel, n_bound: float) -> float:
    """The smallest N reaching KNEE_SHARE of the rate at the bound.

    Near a bound λ(N) is often nearly flat (prefill-heavy classes: halving N can cost
    1% of throughput), so the last 1% of rate costs a disproportionate share of
    latency and memory. (When the knee came in, the simulator found the analytical rate about
    2% optimistic there. `python bench/accuracy.py --part capacity` reads today (2026-12-04),
    with the simulator allocating blocks chunk by chunk as vLLM V1 does, a mean of +1.5% on the
    34 cases without targets: -3.8% to +2.7% where the cache is not what stops the replica, and
    up to +15.7% optimistic where it is (19 of the 34 reach the preemption budget: V1 admits a
    prompt on its first chunk's blocks and preempts when decodes fill the cache, churn the mean
    footprint does not see; certification measures it). With the whole prompt's blocks
    allocated at admission, as before, the mean was -1.9%.) Planning at the
    knee is the roofline's "second ceiling" (seed 000: past the ridge point more users raise
    latency, not throughput).
    """
    if n_bound <= 0:
        return 0.0
    target = KNEE_SHARE * rm.rate(n_bound)
    tiny = min(1e-6, n_bound)
    if rm.rate(tiny) >= target:
        return tiny
    return increasing_root(lambda n: rm.rate(n) - target, tiny, n_bound)


def target_floors(rm: ReplicaModel) -> tuple[TargetFloor, ...]:
    """Targets the config cannot meet even empty: a band's TTFT at its statistic below that of the
    band's own prefill (with one decode step per chunk and no queueing)."""
    floors = []
    own_s = rm.empty_own_s()
    weight = rm.latency.cells.weight
    for index, band in enumerate(rm.slo.bands):
        cells = rm.latency.band_cells[index]
        if band.ttft is None or cells.size == 0:
            continue
        own, w = own_s[cells], weight[cells] / weight[cells].sum()
        q = band.ttft.quantile
        if q is None:
            floor = float(np.dot(w, own))
        else:
            order = np.argsort(own, kind="stable")
            floor = float(own[order][min(int(np.searchsorted(np.cumsum(w[order]), q - 1e-12)), own.size - 1)])
        if floor >= band.ttft.limit_s:
            floors.append(TargetFloor(band.name, "ttft", band.ttft.limit_s, floor, band.ttft.stat))
    return tuple(floors)


def unloaded_floors(rm: ReplicaModel, kinds: Sequence[str], n: float) -> tuple[TargetFloor, ...]:
    """The TPOT and ITL targets of `kinds` that miss at n resident sequences (a replica all but
    empty, where replica_capacity finds a target no load meets), each with its value there: a
    config's own steps, which no planning can shorten."""
    pt = rm.latency_at(n)
    floors = []
    for kind in (k for k in kinds if k in PER_TOKEN):
        for index, band in enumerate(rm.slo.bands):
            target = getattr(band, kind)
            if target is not None and pt.misses(index, kind, target):
                floors.append(TargetFloor(band.name, kind, target.limit_s, pt.value(index, kind, target.stat), target.stat))
    return tuple(floors)


def replica_capacity(
    dep: Deployment,
    prof: TokenProfile,
    slo: SLO = NO_TARGETS,
    *,
    sizing: SizingMode = "expected",
    quantile: float = 0.99,
    ladder: BudgetLadder | None = None,
    model: ReplicaModel | None = None,
    guess: float | None = None,
    token_budget: bool = True,
) -> Capacity:
    """The largest arrival rate (requests/s) one replica serves for this class, and the binding ceiling.

    model: a ReplicaModel of this deployment and class already built (for other targets, say),
    whose memory and step tables are then reused. guess: a resident batch near the latency bound
    (the bound for nearby targets), where its search starts; the answer is the same without it.
    token_budget=False leaves the token-budget ceiling out, for runs whose budget was tuned to
    their batch rather than set to the profile's (trtllm-bench's offline runs, in calibration)."""
    if sizing not in SIZING_MODES:
        raise ValueError(f"unknown sizing mode {sizing!r}; choose from {SIZING_MODES}")
    rm = ReplicaModel(dep, prof, slo, ladder) if model is None else model.with_slo(slo)
    conc = rm.concurrency(quantile)
    n_mem = conc[sizing]
    n_batch = float(dep.engine.max_num_seqs)
    n_cap = min(n_mem, n_batch)
    bounds: dict[str, float] = {"memory": n_mem}
    if token_budget:
        bounds["token_budget"] = rm.budget_bound
    clamped: list[str] = []
    floors = ttft_floors = rm.floors()
    kinds = tuple(k for k in LATENCY_CEILINGS if _has_target(slo, k))
    if kinds:
        if floors or n_cap <= 0:
            n_lat = 0.0
            if floors and n_cap > 0:
                # The per-token targets no load meets either, beside the TTFT floor: so that they are not
                # said to hold, and the candidate a plan's error names as the closest is (a TPOT target in
                # seconds had every TTFT-floored config named before the fastest).
                floors = (*floors, *unloaded_floors(rm, kinds, min(LEAST_RESIDENT_SEQS, n_cap)))
            failing = [k for k in kinds if k in {f.kind for f in floors}] if floors else list(kinds)
        else:
            n_lat = largest_on_grid(lambda n: rm.margin(n, kinds, exact=False), n_cap, BOUND_REL_TOL, guess=guess)
            if n_lat <= 0:  # no load meets them (a floor at the limit, within the grid): every miss binds at 0
                failing = rm.failing(min(LEAST_RESIDENT_SEQS, n_cap), kinds) or list(kinds)
            else:
                # read where the search saw them miss: the grid's next point (or the ceiling), whose
                # latency point the search built (a point of its own, 0.2% above, was one more a search)
                failing = rm.failing(min(grid_point_above(n_lat, BOUND_REL_TOL), n_cap), kinds) if n_lat < n_cap else []
        # The latency bound is shared by the targets that fail just above it; the others hold up
        # to it (their own bound, if any, lies higher and is not searched). Beside a floor only the
        # per-token targets were tried (at no load, by unloaded_floors): an attainment goal is not said
        # to hold there (it was, up to 0 req/s), and a note says it was not judged.
        for kind in kinds:
            if kind in failing:
                bounds[kind] = n_lat
            elif not floors or (kind in PER_TOKEN and n_cap > 0):
                clamped.append(kind)
    n_bound = min([n_cap, *bounds.values()])
    binding = min(bounds, key=lambda k: (bounds[k], CEILINGS.index(k)))
    missed = [] if ttft_floors or n_cap <= 0 else [k for k in kinds if bounds.get(k) == 0.0]
    if missed:  # below what the config reaches unloaded: say so, with the value there, as a TTFT floor does
        floors = unloaded_floors(rm, missed, min(LEAST_RESIDENT_SEQS, n_cap))
    # the binding target's floor first: "stopped by tpot: band ...: TPOT ..." (tpot ties before ttft at 0)
    notes = [f.text() for f in sorted(floors, key=lambda f: f.kind != binding)]
    if ttft_floors and "attainment" in kinds:
        notes.append("attainment goal not judged: a target no load meets stops the config before any load is tried")
    unvalued = [k for k in missed if k not in {f.kind for f in floors}]
    if unvalued:  # the attainment goal, or a miss within the grid's tolerance of its limit
        notes.append(f"{' and '.join(k.upper() if k != 'attainment' else k for k in unvalued)} "
                     f"target{'s' if len(unvalued) > 1 else ''} missed even with no load: the config's own steps are "
                     "slower than the target allows")
    bound_kind = binding
    if n_batch < bounds[binding] or (n_batch <= n_bound and binding == "memory" and n_batch < n_mem):
        binding, bound_kind = rm.point(n_batch).regime, "roofline"
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
    point = rm.point(n_star) if n_star > 0 else rm.point(0.0)
    ceilings_batch = {**bounds, "roofline": n_batch}
    ceilings = {k: rm.rate(v) for k, v in ceilings_batch.items()}
    return Capacity(
        max_rps=point.rate_rps if n_star > 0 else 0.0,
        binding=binding,
        sizing=sizing,
        point=point,
        ceilings_rps=ceilings,
        concurrency={k: math.floor(v) if math.isfinite(v) else 10**9 for k, v in conc.items()},
        ladder=rm.ladder,
        footprint=rm.fp,
        bound_batch=n_bound,
        notes=tuple(notes),
        clamped=tuple(clamped),
        floors=floors,
        bound_kind=bound_kind,
        ceilings_batch=ceilings_batch,
    )


@dataclass(frozen=True)
class Below:
    """capacity_below's answer. below: replica_capacity is certainly below the rate asked. upper_rps:
    then a proven upper bound on that capacity, below the rate asked (the rate at the grid point
    under the one that missed, or at the memory, batch or token-budget ceiling); else infinite.
    start_n: when not below, a point known to hold where an exact search may start, or None."""

    below: bool
    upper_rps: float = math.inf
    start_n: float | None = None


def capacity_below(model: ReplicaModel, rate_rps: float, *, sizing: SizingMode, quantile: float) -> Below:
    """Whether replica_capacity(model) is certainly below `rate_rps`, from one latency point at most,
    and a bound on it below that rate when it is.

    Capacity is the rate at a resident batch no larger than the binding bound, and the rate
    increases with N, so it is below λ(n_cap) (the memory and batch ceilings) and λ at the
    token-budget ceiling; and when a latency
    target misses at the grid point N_x at or below the N where the replica runs at `rate_rps`, the
    latency bound (the largest grid point that holds, for a margin increasing with N) lies at the
    grid point below N_x or lower, so capacity is at most λ there, below rate_rps. (With percentile
    sizing before its quantiles are computed, n_cap here is an upper bound on the replica's own, which
    may lie between those two grid points and then be the latency bound itself; capacity is taken at
    the knee, KNEE_SHARE of λ at the bound, and since λ/N does not rise with N (each sequence added
    slows every step), KNEE_SHARE x (1 + BOUND_REL_TOL) < 1 keeps it under λ at the grid point below:
    tests/test_capacity.py -k knee checks both.) That bound, not
    rate_rps itself, is what a pair proved below stands in with: at rate_rps a plan could cover a
    class with replicas the pair cannot carry it with (the lazy search's rounds chose such pairs,
    searched them and found them dearer, a round each).

    Remembered per model: the lazy search asks again of the pairs it proved below a rate in an
    earlier round (the same rate while its incumbent stands). The answer depends on whether the
    percentile sizing's quantiles are computed yet (batch_bound), so that is part of the question."""
    key = (rate_rps, *model.batch_bound_key(sizing, quantile))
    if key not in model._below:
        model._below[key] = _capacity_below(model, rate_rps, sizing, quantile)
    return model._below[key]


def _capacity_below(rm: ReplicaModel, rate_rps: float, sizing: SizingMode, quantile: float) -> Below:
    n_cap = rm.batch_bound(sizing, quantile)  # an upper bound serves as well as the ceiling itself
    if n_cap <= 0:
        return Below(True, 0.0)
    ceiling_rps = min(rm.rate(n_cap), rm.rate(rm.budget_bound))
    if ceiling_rps < rate_rps:
        return Below(True, ceiling_rps)
    kinds = tuple(k for k in LATENCY_CEILINGS if _has_target(rm.slo, k))
    if not kinds or rate_rps <= 0:
        return Below(False)
    if rm.floors():
        return Below(True, 0.0)  # capacity 0
    tiny = min(1e-6, n_cap)
    if rm.rate(tiny) >= rate_rps:
        return Below(False)
    log_r = math.log1p(BOUND_REL_TOL)
    k_x = math.floor(math.log(increasing_root(lambda n: rm.rate(n) - rate_rps, tiny, n_cap)) / log_r)
    n_x = math.exp(k_x * log_r)
    if rm.margin(n_x, kinds, exact=False) > 0:
        return Below(True, min(ceiling_rps, rm.rate(math.exp((k_x - 1) * log_r))))
    return Below(False, start_n=n_x)


def _has_target(slo: SLO, kind: str) -> bool:
    if kind == "attainment":
        return slo.attainment is not None
    return any(getattr(b, kind) is not None for b in slo.bands)
