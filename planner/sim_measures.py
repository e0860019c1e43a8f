"""What one simulated run measured: per-request latencies, per-token gaps, time-weighted means.

Measures (`SimResult`): the requests measured are those that arrive once the replica has
settled and before arrivals thin out (`settled_window`): past the first `warmup_fraction` of
requests and past the settling time from the first arrival (settling_time_s, from the run's own
request lifetimes), and no later than the settling time before the last arrival, so that the
measured requests decode while arrivals go on (requests whose decode ran on into the drain after
the last arrival, with no one arriving behind them, had read TPOT low); either end trims at most
MOST_SETTLING_SHARE of the run's requests.
The measurement window runs from the arrival of the first measured request to that of the last
one. Time-weighted means
(sequences decoding and running, the waiting queue, KV utilisation, the prefill share)
are over the window's time, idle gaps included (nothing runs then, and the cache holds
only the shared prefix), as the model's are (Little's law over all time): over the steps
alone they would be means over the busy time, several times the model's for a replica that
idles most of the time (a long-context pool). They and ITL are taken over the steps that
start in the window; TTFT over the measured requests. ITL samples are per-token gaps:
every decode token's gap is its step's duration, and a preempted request's first
token after recompute adds the gap since its last token before preemption.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from planner.bounds import MAX_SIMULATED_REQUESTS
from planner.requests import Requests
from planner.targets import SLO, Band, statistic_quantile

STABILITY_TOLERANCE = 0.02  # the backlog may grow by 2% of the arrival rate (least-squares trend)
# A replica started empty fills its batch and its queue before its backlog levels off, and near its
# saturation that takes longer than a short run's warm-up (a tenth of its requests): the trend of such a
# run reads the filling as growth. fleet_2027q1's moe_chat replica (one H200), whose backlog levels off
# up to 1.30x its planned rate (120,000-request runs), read over the tolerance on 23% of 5,556-request
# runs at that rate and on 66% at 1.1x; on runs four times as long, on none of 40 up to 1.2x, on 25% at
# 1.3x, and on 95% at 1.35x, where the backlog truly grows by 4%. So a run that reads a growing queue
# is read again on one SETTLE_FACTOR times as long (a warm-up as many times longer), which decides.
SETTLE_FACTOR = 4
# settling_time_s: a replica counts as settled once its batch is within 0.1% of its settled level. On
# finance_2027's pool (28.6 req/s, 4.4 s mean lifetime, one request in a hundred living over 21 s),
# the share of requests over the TPOT p99 of 2-million-request runs, read by 5% slices of 1,500 runs
# of 5,556 requests, was 0.27-0.78% of them until 19-39 s in and 0.59% in the last 5%, where the
# settled middle read about 1% (with the tenth cut alone, a run's p99 read 7% low). Settled here at 54 s, the
# share over the long runs' p99 read 1.02%, against 0.97% with the tenth cut alone (600 runs of 8,000).
SETTLING_DEFICIT = 0.001
MOST_SETTLING_SHARE = 0.3  # of a run's requests, either end trims at most this many


def settle_requests(requests: int) -> int | None:
    """The requests of the run that reads a growing queue again: SETTLE_FACTOR times as many, at
    most MAX_SIMULATED_REQUESTS; None where that is no longer (the short runs' trend then decides)."""
    n = min(SETTLE_FACTOR * requests, MAX_SIMULATED_REQUESTS)
    return n if n > requests else None

# Keys a report shows side by side: predicted (planner.capacity) and simulated.
COMPARE_KEYS = (
    "rate_rps",
    "resident_batch",
    "kv_utilisation",
    "itl_ms_mean",
    "itl_ms_p99",
    "preemptions_per_1000",
)


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
    resident_batch: float  # time-weighted mean of sequences decoding: what the model's resident batch N counts
    running_batch: float  # time-weighted mean of running sequences (admitted, not finished: prefilling too)
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
    prefill_share: float  # fraction of the window's time spent on prefill chunks
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
    step_start_s: np.ndarray  # increasing: steps run one after another (measure reads windows as slices)
    step_s: np.ndarray
    step_running: np.ndarray  # after admissions, before completions
    step_decoding: np.ndarray
    step_used_pages: np.ndarray  # after this step's allocations (shared prefix excluded; simulate._CacheBlocks: pages)
    step_prefill_tokens: np.ndarray
    step_prefill_s: np.ndarray  # the prefill part of the step time
    step_waiting: np.ndarray
    preemption_steps: np.ndarray  # step index of each preemption
    resume_gaps_s: np.ndarray  # gap before the first token after each recompute
    resume_steps: np.ndarray  # step index that emitted that token
    free_pages_at_end: int
    total_pages: int


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
        # floor(log(g / 1 µs) / log(ratio)), each step in place: a long-context replay has a million gaps
        x = g / 1e-6
        np.log(x, out=x)
        np.divide(x, math.log(GAP_BIN_RATIO), out=x)
        np.floor(x, out=x)
        k = x.astype(np.int64)
        low = int(k.min())
        k -= low
        counts = np.bincount(k, weights=w)
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
        return float(1e-6 * GAP_BIN_RATIO ** (self.bins[i] + 0.5))  # a Python float: it reaches --json


def settling_time_s(lifetimes_s: np.ndarray, deficit: float = SETTLING_DEFICIT,
                    weights: np.ndarray | None = None) -> float:
    """The time a replica started empty takes to settle: the least t with E[(L - t)+] <= deficit ·
    E[L], L a request's lifetime (arrival to last token), over the finite ones given, each counted
    by its weight [default: once; a weight that is not finite and positive does not count] (0 for none).

    Requests arriving at rate λ to a system that holds each for its lifetime L, started empty, number
    λ·(E[L] - E[(L - t)+]) on average at time t: the M/G/∞ queue's transient (Eick, Massey and Whitt,
    "The physics of the Mt/G/∞ queue", Operations Research 41(4), 1993, Theorem 1), so E[(L - t)+]
    / E[L] is how far short of its settled level the replica's batch still is. By symmetry, a request
    arriving within t of the last arrival shares its decode, that far, with as few arrivals behind it.
    The decoders of a replica are such a system (each holds its slot for its lifetime); the prefill
    queue's wait settles within it (a lifetime counts the wait)."""
    lifetimes_s = np.asarray(lifetimes_s, float)
    w = np.ones(lifetimes_s.size) if weights is None else np.asarray(weights, float)
    counted = np.isfinite(lifetimes_s) & np.isfinite(w) & (w > 0)
    life, w = lifetimes_s[counted], w[counted]
    if life.size == 0:
        return 0.0
    allowed = deficit * float(np.dot(w, life))
    # The answer lies among the longest lifetimes: sort only the longest few percent where they hold
    # it (what lies above the shortest of them is more than allowed), not a million-request run's all.
    k = min(life.size, max(256, life.size // 32))
    if k < life.size:
        top = np.argpartition(life, life.size - k)[life.size - k:]
        if float(np.dot(w[top], life[top] - life[top].min())) > allowed:
            life, w = life[top], w[top]
    order = np.argsort(life, kind="stable")
    life, w = life[order], w[order]
    # From the top: the weighted lifetime and the weight of life[j:], for each j
    life_above = np.cumsum((w * life)[::-1])[::-1]
    weight_above = np.cumsum(w[::-1])[::-1]
    # E[(L - t)+]·Σw = life_above[j] - weight_above[j]·t on life[j-1] <= t <= life[j]; at t = life[j]
    # it falls with j: the first j where it is within `allowed` brackets the answer below life[j].
    at_points = life_above - weight_above * life
    j = int(np.searchsorted(-at_points, -allowed, side="left"))
    if j >= life.size:
        return float(life[-1])
    return max(float((life_above[j] - allowed) / weight_above[j]), 0.0)


def settled_window(req: Requests, tr: Trace, warmup_fraction: float, settled: bool = True) -> tuple[int, int]:
    """The measured requests, by index in arrival order: [first, last]. Past the first
    warmup_fraction of them; where `settled`, also past settling_time_s of the run's lifetimes from
    the first arrival and no later than as long before the last arrival, each end trimming at most
    MOST_SETTLING_SHARE of the requests (a replica that never settles, its queue growing, keeps the
    middle of its run, which shows it). The settled window is one of arrival times: requests that all
    arrive at one instant have none, and keep the warm-up share alone."""
    n = req.n
    first = min(math.ceil(warmup_fraction * n), n - 1)
    last = n - 1
    arrival = req.arrival_s
    if settled and n > 1 and arrival[-1] > arrival[0]:
        settle_s = settling_time_s(tr.finish_s - arrival)
        most = math.floor(MOST_SETTLING_SHARE * n)
        first = max(first, min(int(np.searchsorted(arrival, arrival[0] + settle_s, side="left")), most))
        last = max(int(np.searchsorted(arrival, arrival[-1] - settle_s, side="right")) - 1, n - 1 - most, first)
    return first, last


def _window(req: Requests, tr: Trace, warmup_fraction: float,
            settled: bool = True) -> tuple[int, int, float, float, float, slice, np.ndarray]:
    """The measured window (settled_window): (its first and last request, start, end, span, the
    window's steps as a slice, their durations)."""
    cut, last = settled_window(req, tr, warmup_fraction, settled)
    t0 = float(req.arrival_s[cut])
    t1 = float(req.arrival_s[last])
    if t1 <= t0:  # a single burst: measure over all steps
        t1 = float(tr.step_start_s[-1] + tr.step_s[-1]) if tr.step_s.size else t0
    # Steps start in time order, so the window's steps are a slice: views, where a mask would copy
    # each of a long-context replay's million-step records.
    lo, hi = np.searchsorted(tr.step_start_s, [t0, t1], side="left")
    win = slice(int(lo), int(hi))
    return cut, last, t0, t1, max(t1 - t0, 1e-12), win, tr.step_s[win]


def backlog_growth(req: Requests, tr: Trace, warmup_fraction: float, settled: bool = True) -> float:
    """The backlog's trend over the measured window (SimResult.backlog_growth of a run measured with
    that warm-up), from a trace measured with another one."""
    _, _, t0, t1, span, win, w = _window(req, tr, warmup_fraction, settled)
    arrived_in = int(np.sum((req.arrival_s >= t0) & (req.arrival_s <= t1)))
    return _backlog_growth(tr, win, w, arrived_in / span)


def measure(req: Requests, tr: Trace, warmup_fraction: float, wall: float, *,
             total_blocks: int, block_bytes: int, page_bytes: float, shared_bytes: int, budget_bytes: int,
             notes: tuple[str, ...],
             settled: bool = True, state_bytes: int = 0) -> SimResult:
    """The run's measures. The cache held is its pages (page_bytes each) and the shared prefix; where
    no layer caches tokens (page_bytes 0), the running sequences' fixed states (state_bytes each)."""
    n = req.n
    cut, last, t0, t1, span, win, w = _window(req, tr, warmup_fraction, settled)
    lo, hi = win.start, win.stop
    wsum = float(w.sum())
    # The window's time: its steps and the idle gaps between them (a saturated replica's last step may
    # run past the window's end, so never less than the steps' own time).
    window_s = max(span, wsum)

    def tmean(x: np.ndarray) -> float:
        """Mean over the window's time of a per-step count that is 0 while the replica idles."""
        return float(np.dot(x, w) / window_s) if wsum > 0 else math.nan

    def in_window(steps: np.ndarray) -> np.ndarray:
        return (steps >= lo) & (steps < hi)

    dec = tr.step_decoding[win]
    decoding = dec.astype(np.float64)
    resumed = tr.resume_gaps_s[in_window(tr.resume_steps)]
    gaps = (GapDistribution.of(np.concatenate([w, resumed]), np.concatenate([decoding, np.ones(resumed.size)]))
            if resumed.size else GapDistribution.of(w, decoding))
    firsts = np.sum((tr.first_token_s >= t0) & (tr.first_token_s < t1))
    tokens_out = float(dec.sum()) + float(firsts) + float(resumed.size)
    ttft = (tr.first_token_s - req.arrival_s)[cut:last + 1]
    ttft = ttft[np.isfinite(ttft)]
    arrived_in = int(np.sum((req.arrival_s >= t0) & (req.arrival_s <= t1)))
    done_in = int(np.sum((tr.finish_s >= t0) & (tr.finish_s < t1)))
    growth = _backlog_growth(tr, win, w, arrived_in / span)
    preempt_in = int(np.sum(in_window(tr.preemption_steps)))
    used_win, held_bytes = (tr.step_used_pages[win], page_bytes) if page_bytes else (tr.step_running[win], state_bytes)
    used_weight = np.bincount(used_win, weights=w) if used_win.size else np.zeros(1)
    used_weight[0] += window_s - wsum  # idle: no block beyond the shared prefix is held
    used_p99 = int(np.searchsorted(np.cumsum(used_weight), 0.99 * used_weight.sum(), side="left"))
    return SimResult(
        rate_rps=arrived_in / span,
        throughput_rps=done_in / span,
        output_tokens_per_s=tokens_out / span,
        resident_batch=tmean(decoding),
        running_batch=tmean(tr.step_running[win].astype(np.float64)),
        waiting=tmean(tr.step_waiting[win].astype(np.float64)),
        kv_utilisation=(tmean(used_win.astype(np.float64)) * held_bytes + shared_bytes) / budget_bytes,
        kv_utilisation_p99=(used_p99 * held_bytes + shared_bytes) / budget_bytes if wsum > 0 else math.nan,
        itl_ms_mean=gaps.mean_s * 1e3,
        itl_ms_p50=gaps.quantile(0.50) * 1e3,
        itl_ms_p99=gaps.quantile(0.99) * 1e3,
        ttft_ms_mean=float(ttft.mean()) * 1e3 if ttft.size else math.nan,
        ttft_ms_p50=float(np.quantile(ttft, 0.50)) * 1e3 if ttft.size else math.nan,
        ttft_ms_p99=float(np.quantile(ttft, 0.99)) * 1e3 if ttft.size else math.nan,
        step_ms_mean=float(w.mean()) * 1e3 if w.size else math.nan,
        prefill_share=float(tr.step_prefill_s[win].sum()) / window_s if wsum > 0 else math.nan,
        preemptions=preempt_in,
        preemptions_per_1000=1000.0 * preempt_in / max(arrived_in, 1),
        stable=growth <= STABILITY_TOLERANCE,
        backlog_growth=growth,
        steps=int(tr.step_s.size),
        requests=n,
        measured_requests=last + 1 - cut,
        simulated_s=float(np.nanmax(tr.finish_s)),
        wall_s=wall,
        total_blocks=total_blocks,
        block_bytes=block_bytes,
        kv_budget_bytes=budget_bytes,
        notes=notes,
        latencies=_request_latencies(req, tr, slice(cut, last + 1), gaps),
    )


def _request_latencies(req: Requests, tr: Trace, measured: slice, gaps: GapDistribution) -> RequestLatencies:
    """TTFT and TPOT of the measured requests (RequestLatencies' definitions)."""
    output = req.output_tokens[measured]
    return RequestLatencies(
        prompt_tokens=req.prompt_tokens[measured],
        output_tokens=output,
        ttft_s=(tr.first_token_s - req.arrival_s)[measured],
        tpot_s=np.where(output > 1, (tr.finish_s - tr.first_token_s)[measured] / np.maximum(output - 1, 1), np.nan),
        gaps=gaps,
    )


def _backlog_growth(tr: Trace, win: slice, w: np.ndarray, arrival_rps: float) -> float:
    """Least-squares slope of requests in the system (arrived - finished) against time over the
    window's steps (weighted by their durations), as a fraction of the arrival rate."""
    start = tr.step_start_s[win]
    wsum = float(w.sum())
    if start.size <= 2 or wsum <= 0:
        return 0.0
    # arrived and not finished at each step's start: the running and the waiting the step recorded
    in_system = tr.step_running[win] + tr.step_waiting[win]
    tc = start - np.dot(start, w) / wsum
    var = float(np.dot(tc * tc, w))
    slope = float(np.dot(tc, in_system * w)) / var if var > 0 else 0.0
    return slope / max(arrival_rps, 1e-12)
