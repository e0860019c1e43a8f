"""Accuracy of the analytical models against the replica simulator (issues 7 and 11).

Part 1, capacity (issue 7). For a grid of deployments x traffic histograms x SLOs it compares
    model: planner.capacity.replica_capacity(..., sizing="expected").max_rps
    sim:   planner.sim_capacity.max_sustainable_rate (bisection on the simulator)
and prints the error per case, (model - sim) / sim, positive when the model promises
more than the simulated replica holds, with the median and worst absolute error.
Beside each case it shows the model's and the simulator's resident batch, mean ITL
and KV utilisation at the simulated maximum rate, which is where a disagreement is
traced to a term. Then a term check and the time of a replica-hour of traffic.
SLOs: none, and a mean per-token ITL of 50 ms (SLO.single(itl_ms=50, stat="mean")).

Simulated capacity criterion (planner.sim_capacity.Criterion): the backlog does not grow
(least-squares trend <= 2% of the arrival rate), every target met, preemptions <=
the budget per 1,000 requests; bisection to a relative width of --rel-tol.

Histograms of part 1:
- constant: every request 1,000 prompt + 250 output tokens;
- lognormal chat: synthetic, prompt median 800 (log-sd 1.3), output median 250
  (log-sd 0.8), independent, output capped at 4,096; built with numpy (seeded);
- trace: the first CSV found in data/samples/ (columns ContextTokens/GeneratedTokens,
  prompt_tokens/output_tokens or input_length/output_length), or, where that folder
  does not exist, a bivariate lognormal fitted to the Azure LLM inference trace 2023
  (conversation; Azure/AzurePublicDataset, CC-BY-4.0; Splitwise, ISCA 2024): 19,366
  requests, log prompt mean 6.633 sd 0.985, log output mean 5.019 sd 0.859,
  correlation 0.087, output at most 1,000. The output says which was used;
- long-tail: synthetic 'chat_long_tail' (2% of requests past 32k tokens), where the
  context limit is at least 64k.
Requests longer than a deployment's context limit are dropped from its histograms
(they would be served by a long-context pool).

Part 2, percentiles (issue 11). PERCENTILE_POOLS lists pools (a deployment, the class it
serves, its bands, engine settings): long-tail mixes in one pool with two bands (prompt
< 8,192 tokens and the rest), the short and the long class of a split at 32k on their
own pools, the Azure conversation trace, tp 1/2/4 on H100, H200 and A100, and vLLM's
long-prefill threshold θ (512, 1,024 and 2,048 on long-tail mixes and a split's short pool,
and MLPerf v5.1 Red Hat's settings, budget 1,024 and θ = 256).
Each pool runs at 50%, 80% and 95% of its simulated saturation (the highest rate whose
backlog does not grow, no targets; --load-basis model takes the model's capacity
instead). At each load the model's TTFT p90, TTFT p99 and TPOT p99 per band
(planner.latency at the N the mean model gives for the rate: ReplicaModel.latency_at(
resident_for_rate(rate))) are printed against the simulator's, with the error, the
simulator's own noise (± = half the range of the statistic across --seeds runs, 3 by
default, whose measured requests are pooled for the reference value; each seed's requests
are drawn once and rescaled to every load, common random numbers) and, as a diagnostic,
the error when planner.latency is evaluated at the simulator's mean resident batch
instead (@N). Each load's line also gives, from the simulator, the mean number decoding in
the steps that carry prompt tokens (next to the mean model's N: where the queue is busy, more
sequences decode than on average, which slows the prefill queue), the model's backlog regime
(planner.backlog: the decoders n_b a long backlog accumulates, the prefill queue's load there
and the seconds τ the decoders take to get there; under θ too, planner.prefill_cap) and the share of time admission waits for a
full cache. Runs are sized so every band has 2,000 requests per seed past the warm-up tenth,
within --min-requests and --max-requests (the settled window, planner.sim_measures.settled_window,
trims a few more); each output line says how many each band had
(all seeds together). Then the median and worst
|error| over all percentile points against the issue's targets (median <= 15%, worst <=
50%), and the same per load, statistic, band and kind of pool. The bench asserts nothing.

Workloads of part 2: the synthetic 'chat_long_tail' (planner.workload.synth, 200,000
requests, seed 7); data/samples/azure_conv_2023_sample.hist.parquet; and, with
--mooncake FILE, a Mooncake trace (kvcache-ai/Mooncake, JSON Lines with input_length and
output_length), whose pool is skipped otherwise.

Usage:
    python bench/accuracy.py                       # both parts (about 40 s on 2 cores)
    python bench/accuracy.py --part percentiles    # the percentile cases only (about 30 s)
    python bench/accuracy.py --quick               # fewer requests per run (about 15 s)
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from planner.capacity import ReplicaModel, replica_capacity
from planner.catalog import load_catalog
from planner.deployment import make_deployment
from planner.histogram import Histogram
from planner.requests import sample_requests
from planner.sim_capacity import max_sustainable_rate, profile_for
from planner.sim_measures import RequestLatencies, settled_window
from planner.simulate import DEFAULT_WARMUP_FRACTION, simulate_replica
from planner.startup import prepare_process
from planner.targets import SLO, Band
from planner.workload.histfile import read_histogram
from planner.workload.synth import generate, synthetic_histogram

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "data" / "samples"

prepare_process()  # one BLAS thread and the allocator's settings, as the command line runs (planner.entry)

# (model, gpu, tp, kv dtype, context limit); weights bf16 everywhere.
CONFIGS = [
    ("llama-3.1-8b", "h100-sxm", 1, "bf16", 8192),
    ("llama-3.1-8b", "h100-sxm", 1, "fp8", 8192),
    ("llama-3.1-8b", "h100-sxm", 1, "bf16", 32768),
    ("llama-3.1-8b", "h100-sxm", 1, "fp8", 32768),
    ("llama-3.1-8b", "a100-80gb", 1, "bf16", 8192),  # A100: no fp8 cache
    ("llama-3.1-8b", "a100-80gb", 1, "bf16", 32768),
    ("llama-3.1-70b", "h100-sxm", 4, "bf16", 8192),
    ("llama-3.1-70b", "h100-sxm", 4, "fp8", 8192),
    ("llama-3.1-70b", "h100-sxm", 4, "bf16", 32768),
    ("llama-3.1-70b", "h100-sxm", 4, "fp8", 32768),
    # The long-context case of the 128k rollout: 2% of requests past 32k tokens (the 'long-tail' histogram).
    ("llama-3.1-8b", "h100-sxm", 2, "fp8", 131072),
]
LONG_TAIL_MIN_CONTEXT = 65536  # the long-tail histogram is only meaningful where its tail fits
SLOS = {"none": SLO(), "itl50": SLO.single(itl_ms=50.0, stat="mean")}

AZURE_CONV_FIT = {"log_prompt": (6.633, 0.985), "log_output": (5.019, 0.859), "corr": 0.087, "output_max": 1000}
COLUMN_PAIRS = [("ContextTokens", "GeneratedTokens"), ("prompt_tokens", "output_tokens"), ("input_length", "output_length")]


def lognormal_lengths(rng, n, log_prompt, log_output, corr=0.0, output_max=None):
    cov = [[1.0, corr], [corr, 1.0]]
    z = rng.multivariate_normal([0.0, 0.0], cov, n)
    prompt = np.maximum(np.rint(np.exp(log_prompt[0] + log_prompt[1] * z[:, 0])), 1).astype(np.int64)
    output = np.maximum(np.rint(np.exp(log_output[0] + log_output[1] * z[:, 1])), 1).astype(np.int64)
    if output_max:
        output = np.minimum(output, output_max)
    return prompt, output


def trace_lengths(rng) -> tuple[np.ndarray, np.ndarray, str]:
    """(prompt, output, description) from data/samples/*.csv, else the Azure conversation fit."""
    for path in sorted(SAMPLES.glob("*.csv")) if SAMPLES.is_dir() else []:
        head = pd.read_csv(path, nrows=0).columns
        for p_col, o_col in COLUMN_PAIRS:
            if p_col in head and o_col in head:
                df = pd.read_csv(path, usecols=[p_col, o_col])
                df = df.apply(pd.to_numeric, errors="coerce").dropna()
                df = df[(df[p_col] >= 1) & (df[o_col] >= 1)]
                rel = path.relative_to(ROOT)
                return df[p_col].to_numpy(np.int64), df[o_col].to_numpy(np.int64), f"real trace {rel} ({len(df):,} rows)"
    p, o = lognormal_lengths(rng, 50_000, AZURE_CONV_FIT["log_prompt"], AZURE_CONV_FIT["log_output"],
                             AZURE_CONV_FIT["corr"], AZURE_CONV_FIT["output_max"])
    return p, o, "lognormal fit to the Azure LLM inference trace 2023 (conversation); data/samples/ has no CSV"


def histograms(ctx: int, raw: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, Histogram]:
    out = {"constant": Histogram.constant(1000, 250, requests=100)}
    for name, (p, o) in raw.items():
        if name == "long-tail" and ctx < LONG_TAIL_MIN_CONTEXT:
            continue
        keep = p + o <= ctx
        out[name] = Histogram.from_arrays(p[keep], o[keep])
    return out


def fmt(x, spec=".1f"):
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def term_check(cat, raw, args) -> None:
    """Where the model and the simulator part: each term of the model at one well-conditioned point.

    At 95% of the model's ITL-50 capacity (below the memory ceiling): Little's law
    N = λ·s·t, steps per request s, prefill share ρ, decode part of a step t_dec, the
    mean step t = t_dec/(1 - ρ) and the mean inter-token latency a token sees.
    """
    print()
    print("Term check at 95% of the model's ITL-50 capacity (model | sim); ITL_tok/step = the per-token mean ITL over "
          "the mean step, N/Little = time-averaged running sequences over λ·s·(mean step)")
    head = (f"{'deployment':34s} {'histogram':10s} {'rate':>6s} {'N':>11s} {'s':>9s} {'rho':>11s} {'t_dec ms':>11s} "
            f"{'step ms':>11s} {'ITL_tok/step':>12s} {'N/Little':>8s} {'tokens/seq':>11s}")
    print(head)
    print("-" * len(head))
    for model, gpu, tp, kv, ctx in (CONFIGS[0], CONFIGS[4], CONFIGS[6]):
        dep = make_deployment(cat, model=model, gpu=gpu, tp=tp, kv_dtype=kv, max_model_len=ctx)
        label = f"{model.removeprefix('llama-3.1-')} {gpu} tp{tp} kv:{kv} ctx:{ctx // 1024}k"
        for hname in ("constant", "trace"):
            hist = histograms(ctx, raw)[hname]
            prof = profile_for(dep, hist)
            rm = ReplicaModel(dep, prof, SLOS["itl50"])
            rate = 0.95 * replica_capacity(dep, prof, SLOS["itl50"]).max_rps
            req = sample_requests(hist, rate, args.requests * 2, seed=args.seed, max_total_tokens=ctx)
            res, tr = simulate_replica(dep, req, trace=True)
            first, last = settled_window(req, tr, DEFAULT_WARMUP_FRACTION)  # the window res was measured over
            win = (tr.step_start_s >= req.arrival_s[first]) & (tr.step_start_s < req.arrival_s[last])
            dt, pf = tr.step_s[win], tr.step_prefill_s[win]
            n_model = rm.resident_for_rate(res.rate_rps, dep.engine.max_num_seqs)
            s_sim = (tr.step_decoding.sum() + req.n) / req.n  # decode tokens + first tokens, per request
            step_sim = dt.mean()
            # the cache holds the prompts being prefilled too: per running sequence
            tokens_per_seq = res.kv_utilisation * res.kv_budget_bytes / (res.block_bytes / dep.block_size) / res.running_batch
            print(f"{label:34s} {hname:10s} {res.rate_rps:6.2f} {n_model:5.1f}|{res.resident_batch:5.1f} "
                  f"{prof.steps_per_request:4.0f}|{s_sim:4.0f} {rm.prefill_mean_s * res.rate_rps:5.3f}|{res.prefill_share:5.3f} "
                  f"{rm.decode_s(n_model) * 1e3:5.2f}|{(dt - pf).mean() * 1e3:5.2f} {rm.step_s(n_model) * 1e3:5.2f}|{step_sim * 1e3:5.2f} "
                  f"{res.itl_ms_mean / (step_sim * 1e3) - 1:+12.1%} {res.running_batch / (res.rate_rps * s_sim * step_sim):8.3f} "
                  f"{prof.mean_paged_tokens:5.0f}|{tokens_per_seq:5.0f}")


# ---------------------------------------------------------------- percentile cases
#
# A case is one pool (a deployment, the traffic class it serves, the bands its targets
# would use, engine settings) at one load: a share of the model's capacity without
# targets. PERCENTILE_POOLS is the data; every pool runs at each share in LOADS.

SHORT_LONG = (("short", 0, 8192), ("long", 8192, None))  # the two bands: prompt < 8,192 and the rest
ONE_BAND = (("all", 0, None),)
LOADS = (0.5, 0.8, 0.95)
PERCENTILE_POINTS = (("ttft", "p90"), ("ttft", "p99"), ("tpot", "p99"))
BAND_TARGET_REQUESTS = 2000  # measured requests wanted in each band of a case
MEDIAN_TARGET_PCT, WORST_TARGET_PCT = 15.0, 50.0  # issue 11, "What it must show"


@dataclass(frozen=True)
class Pool:
    """One pool of the percentile cases. `workload` names a histogram (percentile_workloads);
    `take` is the class of it the pool serves: 'all', 'short' (total <= split tokens) or
    'long' (total > split), as a split plan's two pools would."""

    kind: str
    model: str
    gpu: str
    tp: int
    kv: str
    ctx: int
    workload: str
    bands: tuple = SHORT_LONG
    take: str = "all"
    split: int = 32768
    engine: tuple = ()  # (field, value) overrides of the vLLM profile

    @property
    def label(self) -> str:
        short = {"long_prefill_token_threshold": "θ", "max_num_batched_tokens": "C"}
        eng = "".join(f" {short.get(k, k)}={v}" for k, v in self.engine)
        cls = "" if self.take == "all" else f" {self.take}{self.split // 1024}k"
        return (f"{self.model.removeprefix('llama-3.1-')} {self.gpu} tp{self.tp} {self.kv} ctx{self.ctx // 1024}k "
                f"{self.workload}{cls}{eng}")


THETA_2K = (("long_prefill_token_threshold", 2048),)
REDHAT_MLPERF = (("max_num_batched_tokens", 1024), ("long_prefill_token_threshold", 256), ("max_num_seqs", 512))
PERCENTILE_POOLS = [
    # Long-tail mixes in one pool, two bands: short requests queue behind 32k-128k prompts.
    Pool("long-tail mix", "llama-3.1-8b", "h100-sxm", 1, "fp8", 131072, "chat_long_tail"),
    Pool("long-tail mix", "llama-3.1-8b", "h100-sxm", 2, "fp8", 131072, "chat_long_tail"),
    Pool("long-tail mix", "llama-3.1-8b", "h200", 2, "fp8", 131072, "chat_long_tail"),
    Pool("long-tail mix", "llama-3.1-70b", "h100-sxm", 4, "fp8", 131072, "chat_long_tail"),
    Pool("long-tail mix", "llama-3.1-70b", "h200", 4, "fp8", 131072, "chat_long_tail"),
    # The same mix with vLLM's long-prefill threshold capping a prompt's tokens per step.
    Pool("long-tail mix θ", "llama-3.1-8b", "h100-sxm", 1, "fp8", 131072, "chat_long_tail", engine=THETA_2K),
    Pool("long-tail mix θ", "llama-3.1-70b", "h100-sxm", 4, "fp8", 131072, "chat_long_tail", engine=THETA_2K),
    Pool("long-tail mix θ", "llama-3.1-8b", "h200", 2, "fp8", 131072, "chat_long_tail",
         engine=(("long_prefill_token_threshold", 512),)),
    # Split pools: the short class (total <= 32k) and the long class (> 32k) on their own.
    Pool("split short", "llama-3.1-8b", "h100-sxm", 1, "fp8", 32768, "chat_long_tail", take="short"),
    Pool("split short", "llama-3.1-70b", "h100-sxm", 4, "fp8", 32768, "chat_long_tail", take="short"),
    Pool("split short θ", "llama-3.1-8b", "h100-sxm", 1, "fp8", 32768, "chat_long_tail", take="short",
         engine=(("long_prefill_token_threshold", 1024),)),
    Pool("split long", "llama-3.1-8b", "h100-sxm", 2, "fp8", 131072, "chat_long_tail", ONE_BAND, "long"),
    Pool("split long", "llama-3.1-70b", "h200", 4, "fp8", 131072, "chat_long_tail", ONE_BAND, "long"),
    # A real trace (Azure conversation 2023), one band, across GPUs and tp.
    Pool("trace", "llama-3.1-8b", "h100-sxm", 1, "bf16", 8192, "azure_conv", ONE_BAND),
    Pool("trace", "llama-3.1-8b", "a100-80gb", 1, "bf16", 8192, "azure_conv", ONE_BAND),
    Pool("trace", "llama-3.1-70b", "h100-sxm", 4, "bf16", 8192, "azure_conv", ONE_BAND),
    # MLPerf v5.1 Red Hat vLLM settings (data/measured/serving_percentiles.csv): budget 1,024, θ = 256.
    Pool("trace θ", "llama-3.1-8b", "h100-sxm", 1, "fp8", 8192, "azure_conv", ONE_BAND, engine=REDHAT_MLPERF),
    # Mooncake's long-document conversations: only with --mooncake FILE.
    Pool("long-tail mix", "llama-3.1-8b", "h100-sxm", 2, "fp8", 131072, "mooncake"),
]


def percentile_workloads(mooncake: Path | None) -> dict[str, tuple[Histogram, str]]:
    """Histograms the percentile pools draw from, with what each is."""
    out = {
        "chat_long_tail": (synthetic_histogram("chat_long_tail", 200_000, seed=7),
                           "synthetic 'chat_long_tail' (planner.workload.synth: the Azure conversation fit plus 2% of "
                           "requests log-uniform in 32k-128k total tokens), 200,000 requests, seed 7"),
        "azure_conv": (read_histogram(SAMPLES / "azure_conv_2023_sample.hist.parquet"),
                       "data/samples/azure_conv_2023_sample.hist.parquet (Azure LLM inference trace 2023, conversation, "
                       "19,366 requests)"),
    }
    if mooncake is not None:
        rows = pd.read_json(mooncake, lines=True)
        out["mooncake"] = (Histogram.from_arrays(rows["input_length"].to_numpy(np.int64),
                                                 np.maximum(rows["output_length"].to_numpy(np.int64), 1)),
                           f"Mooncake trace {mooncake.name} ({len(rows):,} requests; kvcache-ai/Mooncake, FAST 2025)")
    return out


def pool_class(pool: Pool, hist: Histogram) -> Histogram:
    if pool.take == "short":
        hist = hist.select_total(at_most=pool.split)
    elif pool.take == "long":
        hist = hist.select_total(above=pool.split)
    return hist.select_total(at_most=pool.ctx)


def band_shares(hist: Histogram, bands: tuple[Band, ...]) -> list[float]:
    """Share of the class's requests in each band (cells never straddle the bands' power-of-two edges)."""
    prompt = hist.sum_prompt / np.maximum(hist.count, 1)
    return [float(hist.count[b.holds(prompt)].sum() / hist.count.sum()) for b in bands]


@dataclass
class PercentilePoint:
    pool: Pool
    load: float
    band: str
    kind: str
    stat: str
    model_s: float  # planner.latency at the mean model's N for the rate
    sim_s: float
    sim_spread: float  # range of the statistic across the seeds' runs, percent of the pooled value
    model_at_sim_n_s: float  # planner.latency at the simulator's mean resident batch (diagnostic)

    @property
    def error(self) -> float:
        """(model - sim) / sim, percent; inf where the model has no finite value."""
        return _error(self.model_s, self.sim_s)

    @property
    def error_at_sim_n(self) -> float:
        return _error(self.model_at_sim_n_s, self.sim_s)


def _error(model_s: float, sim_s: float) -> float:
    return (model_s / sim_s - 1.0) * 100 if math.isfinite(model_s) else math.inf


def pool_deployment(cat, pool: Pool):
    """The pool's deployment on the vLLM profile as it runs on its GPU, with the pool's engine overrides."""
    dep = make_deployment(cat, model=pool.model, gpu=pool.gpu, tp=pool.tp, kv_dtype=pool.kv, max_model_len=pool.ctx)
    return replace(dep, engine=dep.engine.model_copy(update=dict(pool.engine)))


def run_percentile_pool(cat, pool: Pool, hist: Histogram, args) -> list[PercentilePoint]:
    """The pool at each load of LOADS: the model's and the simulator's percentiles per band."""
    dep = pool_deployment(cat, pool)
    bands = tuple(Band(name, lo, hi) for name, lo, hi in pool.bands)
    prof = profile_for(dep, hist)
    rm = ReplicaModel(dep, prof, SLO(bands))
    model_cap = replica_capacity(dep, prof).max_rps
    basis = model_cap
    sat_text = ""
    if args.load_basis == "sim":
        t0 = time.perf_counter()
        sat = max_sustainable_rate(dep, hist, SLO(), n_requests=args.saturation_requests, seed=args.seed,
                                   rel_tol=args.rel_tol, initial_rate_rps=model_cap)
        basis = sat.rate_rps
        sat_text = f", simulated saturation {basis:.3f} rps ({sat.runs} runs, {time.perf_counter() - t0:.1f} s)"
    print(f"{pool.label}: model capacity without targets {model_cap:.3f} rps{sat_text}", flush=True)
    shares = [s for s in band_shares(hist, bands) if s > 0]
    want = math.ceil(BAND_TARGET_REQUESTS / min(shares) / (1 - DEFAULT_WARMUP_FRACTION))
    n_req = int(min(max(want, args.min_requests), args.max_requests))
    # Common random numbers: each seed's requests are drawn once at 1 rps and rescaled to every load.
    seeds = [args.seed + j for j in range(args.seeds)]
    bases = [sample_requests(hist, 1.0, n_req, seed=seed, max_total_tokens=pool.ctx) for seed in seeds]
    points = []
    for load in LOADS:
        rate = load * basis
        n = rm.resident_for_rate(rate, float(dep.engine.max_num_seqs))
        pt = rm.latency_at(n) if n is not None else None
        t0 = time.perf_counter()
        traced = [simulate_replica(dep, base.at_rate(rate), trace=True) for base in bases]
        sim_wall = time.perf_counter() - t0
        runs = [r for r, _ in traced]
        blocked = statistics.fmean(_blocked_share(dep, base.at_rate(rate), tr) for base, (_, tr) in zip(bases, traced, strict=True))
        busy_n = statistics.fmean(float(tr.step_decoding[tr.step_prefill_tokens > 0].mean()) for _, tr in traced)
        lat = _pooled([r.latencies for r in runs])
        sim_n = statistics.fmean(r.resident_batch for r in runs)
        at_sim_n = rm.latency.at(rate, rm.decode_s(sim_n), sim_n, rm.backlog(sim_n, rate), rm.decode_seen_s(sim_n))
        regime = rm.backlog(n) if n is not None else None
        regime_text = "none"
        if regime is not None:
            regime_text = f"n_b {regime.decoders:.0f}, load {regime.load:.2f}, τ {regime.fill_s:.0f} s"
        print(f"  load {load:.0%} = {rate:.3f} rps ({rate / model_cap:.0%} of the model's capacity) | N model "
              f"{fmt(n, '.1f')} sim {sim_n:.1f}, decoding in the steps that carry prompts {busy_n:.1f}, model backlog "
              f"regime {regime_text} | sim "
              f"{'stable' if all(r.stable for r in runs) else 'UNSTABLE'}, "
              f"waiting {statistics.fmean(r.waiting for r in runs):.1f}, KV mean "
              f"{statistics.fmean(r.kv_utilisation for r in runs):.0%} p99 {max(r.kv_utilisation_p99 for r in runs):.0%}, "
              f"{statistics.fmean(r.preemptions_per_1000 for r in runs):.1f} preemptions/1k, admission blocked by "
              f"the cache {blocked:.1%} of the time, {len(runs)} seeds x "
              f"{n_req:,} requests in {sim_wall:.1f} s", flush=True)
        for i, band in enumerate(bands):
            measured = lat.requests_in(band)
            if measured == 0:
                continue
            cells = []
            for kind, stat in PERCENTILE_POINTS:
                model_s = pt.value(i, kind, stat) if pt is not None else math.inf
                sim_s = lat.statistic(band, kind, stat)
                per_seed = [r.latencies.statistic(band, kind, stat) for r in runs]
                p = PercentilePoint(pool, load, band.name, kind, stat, model_s, sim_s,
                                    (max(per_seed) - min(per_seed)) / sim_s * 100, at_sim_n.value(i, kind, stat))
                points.append(p)
                spec = "7.3f" if kind == "ttft" else "7.1f"
                scale, unit = (1.0, "s") if kind == "ttft" else (1e3, "ms")
                model_text = format(model_s * scale, spec) if math.isfinite(model_s) else f"{'none':>7s}"
                cells.append(f"{kind.upper()} {stat} {model_text}|{sim_s * scale:{spec}} {unit} {p.error:+5.0f}% "
                             f"(±{p.sim_spread / 2:2.0f}%, @N {p.error_at_sim_n:+4.0f}%)")
            print(f"    {band.name:5s} {measured:6,d} measured  " + "  ".join(cells))
    return points


def _blocked_share(dep, req, tr) -> float:
    """Share of the measured time (the run's settled window: planner.sim_measures.settled_window) in
    steps where requests wait, the step's prompt budget is not used up and fewer than max_num_seqs
    run: the head of the queue does not find the blocks of its first chunk free, a loss of prefill
    capacity the model does not have (a diagnostic)."""
    first, last = settled_window(req, tr, DEFAULT_WARMUP_FRACTION)
    win = (tr.step_start_s >= req.arrival_s[first]) & (tr.step_start_s < req.arrival_s[last])
    budget = dep.engine.max_num_batched_tokens - tr.step_decoding[win]
    idle = ((tr.step_waiting[win] > 0) & (tr.step_prefill_tokens[win] < budget - dep.block_size)
            & (tr.step_running[win] < dep.engine.max_num_seqs))
    dt = tr.step_s[win]
    return float(dt[idle].sum() / max(dt.sum(), 1e-300))


def _pooled(lats: list[RequestLatencies]) -> RequestLatencies:
    """The measured requests of several runs as one sample (TTFT and TPOT; the per-token gaps
    are the first run's, which the percentile points do not read)."""
    return RequestLatencies(*(np.concatenate([getattr(x, f) for x in lats])
                              for f in ("prompt_tokens", "output_tokens", "ttft_s", "tpot_s")), lats[0].gaps)


def summarise_points(points: list[PercentilePoint]) -> None:
    def line(label, sub):
        if not sub:
            return
        errs = [abs(p.error) for p in sub]
        finite = [e for e in errs if math.isfinite(e)]
        worst = max(sub, key=lambda p: abs(p.error))
        bias = statistics.median(p.error for p in sub if math.isfinite(p.error)) if finite else math.nan
        print(f"  {label:28s} {len(sub):4d} points  median |error| {statistics.median(errs):6.1f}%  worst "
              f"{worst.error:+7.0f}%  median signed {bias:+6.1f}%  within 15%: {sum(e <= 15 for e in errs) / len(errs):4.0%}"
              f"  within 50%: {sum(e <= 50 for e in errs) / len(errs):4.0%}")

    errs = [abs(p.error) for p in points]
    worst = max(points, key=lambda p: abs(p.error))
    noise = statistics.median(p.sim_spread / 2 for p in points)
    print()
    print(f"Percentile cases: {len({(p.pool, p.load) for p in points})} cases, {len(points)} percentile points "
          f"(TTFT p90, TTFT p99, TPOT p99 per band); error = (model - sim) / sim")
    print(f"  median |error| {statistics.median(errs):.1f}% (target <= {MEDIAN_TARGET_PCT:g}%); worst {worst.error:+.0f}% "
          f"(target <= {WORST_TARGET_PCT:g}%): {worst.pool.label}, load {worst.load:.0%}, band {worst.band}, "
          f"{worst.kind} {worst.stat}; model without a finite value at {sum(not math.isfinite(e) for e in errs)} points")
    plain = [p for p in points if "θ" not in p.pool.kind]
    if plain and len(plain) < len(points):
        worst_plain = max(plain, key=lambda p: abs(p.error))
        print(f"  without the θ pools (vLLM's long-prefill cap, modelled by planner.prefill_cap): median |error| "
              f"{statistics.median(abs(p.error) for p in plain):.1f}%, worst {worst_plain.error:+.0f}%: "
              f"{worst_plain.pool.label}, load {worst_plain.load:.0%}, band {worst_plain.band}, {worst_plain.kind} "
              f"{worst_plain.stat}")
    print(f"  simulator noise (± = half the range of the statistic across the seeds' runs): median ±{noise:.1f}%; "
          f"{sum(abs(p.error) <= p.sim_spread for p in points)} of {len(points)} errors within 2 × ±")
    at_n = [abs(p.error_at_sim_n) for p in points]
    print(f"  planner.latency at the simulator's resident batch (@N): median |error| {statistics.median(at_n):.1f}%, "
          f"worst {max((p.error_at_sim_n for p in points), key=abs):+.0f}%")
    for load in LOADS:
        line(f"load {load:.0%}", [p for p in points if p.load == load])
    for kind, stat in PERCENTILE_POINTS:
        line(f"{kind.upper()} {stat}", [p for p in points if (p.kind, p.stat) == (kind, stat)])
    for band in dict.fromkeys(p.band for p in points):
        line(f"band {band}", [p for p in points if p.band == band])
    for kind in dict.fromkeys(p.pool.kind for p in points):
        line(kind, [p for p in points if p.pool.kind == kind])


def percentile_cases(cat, args) -> list[PercentilePoint]:
    workloads = percentile_workloads(args.mooncake)
    print()
    basis = ("the simulated saturation (planner.sim_capacity.max_sustainable_rate without targets: the highest rate whose "
             f"backlog does not grow, {args.saturation_requests:,} requests, bisection to {args.rel_tol:.0%})"
             if args.load_basis == "sim" else
             "the model's capacity without targets (planner.capacity.replica_capacity, expected sizing)")
    print("Percentile latencies per band: model (planner.latency at the mean model's N for the rate) | simulator; "
          "error = (model - sim) / sim")
    print(f"loads: {', '.join(f'{x:.0%}' for x in LOADS)} of {basis}")
    print(f"vLLM profile unless overridden (C = max_num_batched_tokens, θ = long_prefill_token_threshold); bands "
          f"short = prompt < 8,192 tokens, long = the rest, all = one band; each run sized for >= "
          f"{BAND_TARGET_REQUESTS:,} requests in every band past the warm-up tenth, between {args.min_requests:,} and "
          f"{args.max_requests:,} requests (the same requests at every load); measured over each run's settled "
          f"window (planner.sim_measures.settled_window); seed {args.seed}")
    print(f"simulator: {args.seeds} runs per load (seeds {args.seed}..{args.seed + args.seeds - 1}, the same requests "
          "rescaled at every load: common random numbers), their measured requests pooled")
    print("± = the simulator's own noise (half the range of the statistic across the seeds' runs); @N = the error of "
          "planner.latency evaluated at the simulator's resident batch instead of the mean model's (a diagnostic)")
    for name, (_, desc) in workloads.items():
        print(f"workload {name}: {desc}")
    if args.mooncake is None:
        print("workload mooncake: not given (--mooncake FILE adds its pools)")
    print()
    points: list[PercentilePoint] = []
    for index, pool in enumerate(PERCENTILE_POOLS):
        if pool.workload not in workloads or (args.pools and index not in args.pools):
            continue
        points += run_percentile_pool(cat, pool, pool_class(pool, workloads[pool.workload][0]), args)
    summarise_points(points)
    return points


def capacity_cases(cat, raw, trace_desc, args) -> None:
    """The mean model's capacity against the simulated maximum rate, per config x histogram x SLO."""
    print("Analytical capacity (planner.capacity, sizing 'expected') vs simulated maximum rate (planner.simulate)")
    print(f"requests per run {args.requests:,}; bisection to {args.rel_tol:.0%}; preemption budget "
          f"{args.preemption_budget:g} per 1,000; measured over each run's settled window; blocks allocated chunk by chunk "
          f"(vLLM V1); seed {args.seed}")
    print(f"trace histogram: {trace_desc}")
    print("slo: none = no latency target; itl50 = mean per-token ITL <= 50 ms (SLO.single(itl_ms=50, stat='mean'))")
    print("error = (model - sim) / sim: positive when the model promises more than the simulated replica holds; "
          "the sim rate is the highest that passed, so errors are resolved to the bisection width")
    print("at capacity, model | sim: N = resident batch, ITL = mean inter-token latency in ms (the model's mean step; "
          "the sim's per-token mean), KV = mean KV utilisation")
    print()
    head = (f"{'deployment':34s} {'histogram':14s} {'slo':5s} {'model rps':>9s} {'binds':7s} {'sim rps':>8s} "
            f"{'sim fails above':22s} {'error':>7s}  {'N':>9s} {'ITL':>11s} {'KV':>9s} {'runs':>4s} {'s':>4s}")
    print(head)
    print("-" * len(head))
    errors: list[tuple[float, str]] = []
    for model, gpu, tp, kv, ctx in CONFIGS:
        dep = make_deployment(cat, model=model, gpu=gpu, tp=tp, kv_dtype=kv, max_model_len=ctx)
        label = f"{model.removeprefix('llama-3.1-')} {gpu} tp{tp} kv:{kv} ctx:{ctx // 1024}k"
        for hname, hist in histograms(ctx, raw).items():
            prof = profile_for(dep, hist)
            for sname, slo in SLOS.items():
                t0 = time.perf_counter()
                cap = replica_capacity(dep, prof, slo, sizing="expected")
                found = max_sustainable_rate(
                    dep, hist, slo, preemption_budget_per_1000=args.preemption_budget, n_requests=args.requests,
                    seed=args.seed, rel_tol=args.rel_tol, initial_rate_rps=cap.max_rps,
                )
                wall = time.perf_counter() - t0
                err = (cap.max_rps / found.rate_rps - 1.0) * 100 if found.rate_rps > 0 else math.inf
                errors.append((err, f"{label} {hname} {sname}"))
                r, pt = found.result, cap.point
                pairs = ("-", "-", "-")
                if r is not None:
                    pairs = (f"{pt.resident_batch:.0f}|{r.resident_batch:.0f}", f"{pt.itl_ms:.1f}|{r.itl_ms_mean:.1f}",
                             f"{pt.kv_utilisation:.2f}|{r.kv_utilisation:.2f}")
                print(f"{label:34s} {hname:14s} {sname:5s} {cap.max_rps:9.3f} {cap.binding:7s} {found.rate_rps:8.3f} "
                      f"{found.binding:22s} {err:+6.1f}%  {pairs[0]:>9s} {pairs[1]:>11s} {pairs[2]:>9s} "
                      f"{found.runs:4d} {wall:4.1f}", flush=True)
    abs_err = [abs(e) for e, _ in errors]
    worst = max(errors, key=lambda e: abs(e[0]))
    print()
    print(f"capacity cases: {len(errors)}; median |error| {statistics.median(abs_err):.1f}% (target <= 10%); "
          f"worst {worst[0]:+.1f}% ({worst[1]}) (target <= 25%); "
          f"mean error {statistics.fmean(e for e, _ in errors):+.1f}%")
    for slo_name in SLOS:
        sub = [e for e, n in errors if n.endswith(" " + slo_name)]
        print(f"  slo {slo_name}: median |error| {statistics.median(abs(e) for e in sub):.1f}%, "
              f"worst {max(sub, key=abs):+.1f}%, mean {statistics.fmean(sub):+.1f}%")


def speed_check(cat, raw, args) -> None:
    print()
    print("Simulation speed: one replica-hour of Poisson traffic at 90% of the analytical capacity (trace histogram)")
    for model, gpu, tp, kv, ctx in (CONFIGS[0], CONFIGS[6]):
        dep = make_deployment(cat, model=model, gpu=gpu, tp=tp, kv_dtype=kv, max_model_len=ctx)
        hist = histograms(ctx, raw)["trace"]
        rate = 0.9 * replica_capacity(dep, profile_for(dep, hist)).max_rps
        req = sample_requests(hist, rate, round(rate * 3600), seed=args.seed, max_total_tokens=ctx)
        t0 = time.perf_counter()
        res = simulate_replica(dep, req)
        wall = time.perf_counter() - t0
        print(f"  {dep.label}: {req.n:,} requests at {rate:.2f} rps, {res.steps:,} steps, {res.simulated_s:,.0f} s simulated "
              f"in {wall:.2f} s wall (step loop {res.wall_s:.2f} s): {res.simulated_s / wall:,.0f} simulated s per wall s, "
              f"{res.steps / wall:,.0f} steps/s ({res.steps / res.wall_s:,.0f} in the loop)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("all", "capacity", "percentiles"), default="all",
                    help="run the mean-capacity grid, the percentile cases, or both (default)")
    ap.add_argument("--requests", type=int, default=20_000, help="requests per simulated capacity run (default 20,000)")
    ap.add_argument("--rel-tol", type=float, default=0.01, help="bisection stops at this relative width (default 0.01)")
    ap.add_argument("--preemption-budget", type=float, default=10.0, help="preemptions per 1,000 requests (default 10)")
    ap.add_argument("--min-requests", type=int, default=40_000, help="fewest requests per percentile case (default 40,000)")
    ap.add_argument("--max-requests", type=int, default=100_000,
                    help="most requests per percentile case (default 100,000): a rarer band gets fewer than 2,000")
    ap.add_argument("--load-basis", choices=("sim", "model"), default="sim",
                    help="percentile loads are shares of the simulated saturation (default) or of the model's capacity")
    ap.add_argument("--saturation-requests", type=int, default=20_000,
                    help="requests per run of the saturation search (default 20,000)")
    ap.add_argument("--mooncake", type=Path, default=None,
                    help="a Mooncake trace (JSON Lines with input_length, output_length) to add its pools")
    ap.add_argument("--pools", type=int, nargs="*", default=None,
                    help="run only these percentile pools (indices into PERCENTILE_POOLS; while iterating on one)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=3,
                    help="simulator runs per percentile case, seeds --seed onwards, pooled (default 3)")
    ap.add_argument("--quick", action="store_true",
                    help="capacity: 5,000 requests per run, rel-tol 0.02; percentiles: 10,000-20,000 requests per case")
    args = ap.parse_args(argv)
    if args.quick:
        args.requests, args.rel_tol, args.min_requests, args.max_requests = 5000, 0.02, 10_000, 20_000
        args.saturation_requests = 10_000
    t_start = time.perf_counter()
    cat = load_catalog()
    if args.part in ("all", "capacity"):
        rng = np.random.default_rng(2024)
        synth = lognormal_lengths(rng, 50_000, (math.log(800), 1.3), (math.log(250), 0.8), 0.0, 4096)
        tp_, to_, trace_desc = trace_lengths(rng)
        long_tail = generate("chat_long_tail", 50_000, 7)
        raw = {"lognormal-chat": synth, "trace": (tp_, to_), "long-tail": (long_tail.prompt_tokens, long_tail.output_tokens)}
        capacity_cases(cat, raw, trace_desc, args)
        term_check(cat, raw, args)
        speed_check(cat, raw, args)
    if args.part in ("all", "percentiles"):
        percentile_cases(cat, args)
    print()
    print(f"total runtime {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
