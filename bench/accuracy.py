"""Accuracy of the analytical capacity model against the replica simulator (issue 7).

For a grid of deployments x traffic histograms x SLOs it compares
    model: planner.capacity.replica_capacity(..., sizing="expected").max_rps
    sim:   planner.simulate.max_sustainable_rate (bisection on the simulator)
and prints the error per case, (model - sim) / sim, positive when the model promises
more than the simulated replica holds, with the median and worst absolute error.
Beside each case it shows the model's and the simulator's resident batch, mean ITL
and KV utilisation at the simulated maximum rate, which is where a disagreement is
traced to a term. Then it times a replica-hour of traffic.

Simulated capacity criterion (planner.simulate.Criterion): the backlog does not grow
(least-squares trend <= 2% of the arrival rate), mean ITL <= target, preemptions <=
the budget per 1,000 requests; bisection to a relative width of --rel-tol.

Histograms:
- constant: every request 1,000 prompt + 250 output tokens;
- lognormal chat: synthetic, prompt median 800 (log-sd 1.3), output median 250
  (log-sd 0.8), independent, output capped at 4,096; built with numpy (seeded);
- trace: the first CSV found in data/samples/ (columns ContextTokens/GeneratedTokens,
  prompt_tokens/output_tokens or input_length/output_length), or, where that folder
  does not exist, a bivariate lognormal fitted to the Azure LLM inference trace 2023
  (conversation; Azure/AzurePublicDataset, CC-BY-4.0; Splitwise, ISCA 2024): 19,366
  requests, log prompt mean 6.633 sd 0.985, log output mean 5.019 sd 0.859,
  correlation 0.087, output at most 1,000. The output says which was used.
Requests longer than a deployment's context limit are dropped from its histograms
(they would be served by a long-context pool).

Usage:
    python bench/accuracy.py                # the full grid (about 1-2 minutes on 2 cores)
    python bench/accuracy.py --quick        # 5,000 requests per run, bisection to 2% (about 30 s)
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from planner.capacity import SLO, ReplicaModel, replica_capacity
from planner.catalog import load_catalog
from planner.deployment import make_deployment
from planner.histogram import Histogram
from planner.simulate import (
    max_sustainable_rate,
    profile_for,
    sample_requests,
    simulate_replica,
)
from planner.workload.synth import generate

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "data" / "samples"

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
SLOS = {"none": SLO(), "itl50": SLO(itl_ms=50.0)}

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
          "the mean step, N/Little = time-averaged N over λ·s·(mean step)")
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
            win = (tr.step_start_s >= req.arrival_s[req.n // 10]) & (tr.step_start_s < req.arrival_s[-1])
            dt, pf = tr.step_s[win], tr.step_prefill_s[win]
            n_model = rm.resident_for_rate(res.rate_rps, dep.engine.max_num_seqs)
            s_sim = (tr.step_decoding.sum() + req.n) / req.n  # decode tokens + first tokens, per request
            step_sim = dt.mean()
            tokens_per_seq = res.kv_utilisation * res.kv_budget_bytes / (res.block_bytes / dep.block_size) / res.resident_batch
            print(f"{label:34s} {hname:10s} {res.rate_rps:6.2f} {n_model:5.1f}|{res.resident_batch:5.1f} "
                  f"{prof.steps_per_request:4.0f}|{s_sim:4.0f} {rm.step.prefill_s(prof.mean_prompt, prof.mean_prompt_sq) * res.rate_rps:5.3f}|{res.prefill_share:5.3f} "
                  f"{rm.decode_s(n_model) * 1e3:5.2f}|{(dt - pf).mean() * 1e3:5.2f} {rm.step_s(n_model) * 1e3:5.2f}|{step_sim * 1e3:5.2f} "
                  f"{res.itl_ms_mean / (step_sim * 1e3) - 1:+12.1%} {res.resident_batch / (res.rate_rps * s_sim * step_sim):8.3f} "
                  f"{prof.mean_paged_tokens:5.0f}|{tokens_per_seq:5.0f}")


def ttft_check(cat, raw, args) -> None:
    """The model's TTFT (its quantile prompt with the mean queueing wait) against the simulator."""
    print()
    print("TTFT check (not in the accuracy targets): model TTFT of the p99 prompt | sim mean TTFT of prompts within "
          "10% of it | sim p99 TTFT of all requests; and the mean residual of the step in flight at an arrival")
    head = f"{'deployment':34s} {'histogram':10s} {'load':>5s} {'p99 prompt':>10s} {'TTFT ms model|sim(p99 prompt)|sim p99':>40s} {'residual ms':>11s}"
    print(head)
    print("-" * len(head))
    for model, gpu, tp, kv, ctx in (CONFIGS[0], CONFIGS[6]):
        dep = make_deployment(cat, model=model, gpu=gpu, tp=tp, kv_dtype=kv, max_model_len=ctx)
        label = f"{model.removeprefix('llama-3.1-')} {gpu} tp{tp} kv:{kv} ctx:{ctx // 1024}k"
        for hname in ("constant", "trace"):
            hist = histograms(ctx, raw)[hname]
            prof = profile_for(dep, hist)
            rm = ReplicaModel(dep, prof, SLO())
            cap = replica_capacity(dep, prof).max_rps
            pq = prof.prompt_quantile_tokens
            for load in (0.3, 0.6, 0.9):
                req = sample_requests(hist, load * cap, args.requests, seed=args.seed, max_total_tokens=ctx)
                res, tr = simulate_replica(dep, req, trace=True)
                cut = req.n // 10
                ttft = (tr.first_token_s - req.arrival_s)[cut:]
                near = np.abs(req.prompt_tokens[cut:] / pq - 1.0) <= 0.1
                n_model = rm.resident_for_rate(res.rate_rps, dep.engine.max_num_seqs)
                model_ms = rm.ttft_s(n_model) * 1e3 if n_model is not None else math.inf
                residual = np.sum(tr.step_s**2) / (2 * np.sum(tr.step_s))
                sims = f"{model_ms:8.1f}|{ttft[near].mean() * 1e3:8.1f}|{res.ttft_ms_p99:8.1f}"
                print(f"{label:34s} {hname:10s} {load:5.0%} {pq:10,.0f} {sims:>40s} {residual * 1e3:11.1f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=20_000, help="requests per simulated run (default 20,000)")
    ap.add_argument("--rel-tol", type=float, default=0.01, help="bisection stops at this relative width (default 0.01)")
    ap.add_argument("--preemption-budget", type=float, default=10.0, help="preemptions per 1,000 requests (default 10)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="5,000 requests per run, rel-tol 0.02")
    args = ap.parse_args(argv)
    if args.quick:
        args.requests, args.rel_tol = 5000, 0.02
    t_start = time.perf_counter()
    cat = load_catalog()
    rng = np.random.default_rng(2024)
    synth = lognormal_lengths(rng, 50_000, (math.log(800), 1.3), (math.log(250), 0.8), 0.0, 4096)
    tp_, to_, trace_desc = trace_lengths(rng)
    long_tail = generate("chat_long_tail", 50_000, 7)
    raw = {"lognormal-chat": synth, "trace": (tp_, to_), "long-tail": (long_tail.prompt_tokens, long_tail.output_tokens)}

    print("Analytical capacity (planner.capacity, sizing 'expected') vs simulated maximum rate (planner.simulate)")
    print(f"requests per run {args.requests:,}; bisection to {args.rel_tol:.0%}; preemption budget "
          f"{args.preemption_budget:g} per 1,000; warm-up 10% of requests; watermark 1% of blocks; seed {args.seed}")
    print(f"trace histogram: {trace_desc}")
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
                      f"{len(found.evaluations):4d} {wall:4.1f}", flush=True)
    abs_err = [abs(e) for e, _ in errors]
    worst = max(errors, key=lambda e: abs(e[0]))
    print()
    print(f"cases: {len(errors)}; median |error| {statistics.median(abs_err):.1f}% (target <= 10%); "
          f"worst {worst[0]:+.1f}% ({worst[1]}) (target <= 25%); "
          f"mean error {statistics.fmean(e for e, _ in errors):+.1f}%")
    for slo_name in SLOS:
        sub = [e for e, n in errors if n.endswith(" " + slo_name)]
        print(f"  slo {slo_name}: median |error| {statistics.median(abs(e) for e in sub):.1f}%, "
              f"worst {max(sub, key=abs):+.1f}%, mean {statistics.fmean(sub):+.1f}%")

    term_check(cat, raw, args)
    ttft_check(cat, raw, args)
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
    print()
    print(f"total runtime {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
