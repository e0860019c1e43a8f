"""How long one capacity evaluation takes: the ILP calls replica_capacity for every
(config, traffic class, threshold), thousands of times, so it must run in well under
10 ms for a realistic histogram.

    python bench/capacity_speed.py [--calls N]

Builds a 100,000-request histogram (lognormal prompt and output lengths, seeded), then
times token_profile and replica_capacity in each sizing mode, with and without SLOs,
for two configs. Prints the median and 90th percentile of many calls; asserts nothing.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from planner.capacity import SLO, replica_capacity
from planner.catalog import load_catalog
from planner.deployment import make_deployment
from planner.histogram import Histogram
from planner.paged import SIZING_MODES, token_profile

TARGET_MS = 10.0
REQUESTS = 100_000
MAX_MODEL_LEN = 32768


def realistic_histogram(seed: int = 0) -> Histogram:
    """Prompts: lognormal, median 1,000 tokens, sigma 1.0 (p99 about 10k); outputs: median
    250, sigma 0.8; clipped so every request fits a 32k context."""
    rng = np.random.default_rng(seed)
    prompt = np.clip(np.rint(rng.lognormal(np.log(1000), 1.0, REQUESTS)), 1, 28_000).astype(np.int64)
    output = np.clip(np.rint(rng.lognormal(np.log(250), 0.8, REQUESTS)), 1, 4_096).astype(np.int64)
    return Histogram.from_arrays(prompt, output)


def time_ms(fn, calls: int) -> tuple[float, float]:
    """(median, p90) wall time of one call in ms, after three warm-up calls."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times)), float(np.percentile(times, 90))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200, help="timed calls per figure (default 200)")
    args = parser.parse_args(argv)
    catalog = load_catalog()

    t0 = time.perf_counter()
    hist = realistic_histogram()
    build_ms = (time.perf_counter() - t0) * 1e3
    print(
        f"histogram: {hist.requests:,} requests in {hist.count.size} cells, built in {build_ms:.0f} ms (once per log); "
        f"mean prompt {hist.mean('sum_prompt'):.0f}, mean output {hist.mean('sum_output'):.0f} tokens"
    )
    med, p90 = time_ms(lambda: token_profile(hist), args.calls)
    print(f"token_profile (once per traffic class)       median {med:6.2f} ms   p90 {p90:6.2f} ms")
    prof = token_profile(hist)

    configs = [
        {"model": "llama-3.1-8b", "gpu": "h100-sxm", "tp": 1, "weight_dtype": "bf16", "kv_dtype": "bf16"},
        {"model": "llama-3.1-70b", "gpu": "h100-sxm", "tp": 4, "weight_dtype": "fp8", "kv_dtype": "fp8"},
    ]
    slos = {"no SLO": SLO(), "TTFT p99 2 s + TPOT p99 50 ms": SLO.single(ttft_s=2.0, tpot_ms=50.0)}
    worst = 0.0
    for cfg in configs:
        dep = make_deployment(catalog, max_model_len=MAX_MODEL_LEN, **cfg)
        print(f"\nreplica_capacity, {dep.model.id} on {dep.label}")
        for slo_name, slo in slos.items():
            for mode in SIZING_MODES:
                cap = replica_capacity(dep, prof, slo, sizing=mode)
                med, p90 = time_ms(lambda dep=dep, slo=slo, mode=mode: replica_capacity(dep, prof, slo, sizing=mode), args.calls)
                worst = max(worst, med)
                print(
                    f"  {mode:<11} {slo_name:<30} median {med:6.2f} ms   p90 {p90:6.2f} ms   "
                    f"({cap.max_rps:7.2f} req/s, binding {cap.binding})"
                )
    print(f"\nslowest median {worst:.2f} ms per capacity evaluation; target: well under {TARGET_MS:g} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
