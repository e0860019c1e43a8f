"""Calibrate the GPU catalog's efficiency factors on published measurements.

    python bench/calibration.py            # fit and print; changes nothing
    python bench/calibration.py --write    # also rewrite the efficiency blocks of data/gpus.yaml

Prints every measured row with its prediction and absolute percentage error, the
fitted factors per GPU, and the median and worst error on the rows each fit used and
on the rows it did not, per source. The method is in planner/calibration.py's
docstring; the data and their licences in data/measured/README.md. Deterministic:
no timings, no randomness.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

import numpy as np
import yaml

from planner.calibration import (
    BOUNDS,
    HELD_OUT_TEXT,
    SPLITWISE_FILE,
    TRTLLM_ENGINE,
    TRTLLM_FILE,
    TRTLLM_PRIORS,
    VIDUR_FILE,
    Calibration,
    Prediction,
    calibrate,
    catalog_efficiencies,
    fit_efficiency,
    load_trtllm_rows,
    measured_dir,
    rewrite_efficiency_blocks,
    summarise,
    trtllm_cases,
    trtllm_log_errors,
)
from planner.catalog import Catalog, load_catalog

TARGET_PCT = 15.0
GPUS_YAML = Path(__file__).resolve().parent.parent / "data" / "gpus.yaml"


def fmt_stats(preds: list[Prediction]) -> str:
    n, med, worst = summarise(preds)
    if not n:
        return "n=  0"
    return f"n={n:3d}  median {med:5.1f}%  worst {worst:5.1f}%"


def print_trtllm_rows(cal: Calibration) -> None:
    print(f"== TensorRT-LLM offline max throughput ({TRTLLM_FILE}), output tokens/s per GPU")
    print(f"   engine profile {TRTLLM_ENGINE}, worst_case sizing at max_model_len = ISL+OSL, no SLO;")
    print(f"   held out: whole ISL/OSL scenarios {HELD_OUT_TEXT}")
    print(f"{'row':>4} {'set':<5} {'configuration':<52} {'measured':>9} {'predicted':>9} {'err':>7}")
    for p in cal.trtllm:
        print(
            f"{p.line:>4} {'held' if p.held_out else 'fit':<5} {p.label:<52} "
            f"{p.measured:9.1f} {p.predicted:9.1f} {p.signed_error_pct:+6.1f}%"
        )
    print()


def print_splitwise_rows(cal: Calibration) -> None:
    print(f"== Splitwise-sim perf model ({SPLITWISE_FILE}), milliseconds")
    print("   'catalog': predicted with the TensorRT-LLM-fitted factors (cross-engine, no splitwise row fitted);")
    print("   'own': predicted with factors fitted to the splitwise rows themselves (every third row held out)")
    own = {(p.source, p.line): p for p in cal.splitwise_own}
    print(f"{'row':>4} {'what':<8} {'own set':<7} {'configuration':<46} {'measured':>9} {'catalog':>9} {'err':>7} {'own':>9} {'err':>7}")
    for p in sorted(cal.splitwise, key=lambda p: (p.line, not p.source.endswith("prefill"))):
        o = own[(p.source, p.line)]
        what = "prefill" if p.source.endswith("prefill") else "decode"
        print(
            f"{p.line:>4} {what:<8} {'held' if o.held_out else 'fit':<7} {p.label:<46} {p.measured:9.1f} "
            f"{p.predicted:9.1f} {p.signed_error_pct:+6.1f}% {o.predicted:9.1f} {o.signed_error_pct:+6.1f}%"
        )
    print()


def print_factors(cal: Calibration) -> None:
    print("== Fitted efficiency factors (TensorRT-LLM rows; these go to data/gpus.yaml)")
    print("   bounds: " + ", ".join(f"{k} {lo:g}-{hi:g}" for k, (lo, hi) in BOUNDS.items()))
    print("   prior: " + ", ".join(f"{k} ~ N({m:g}, {sd:g})" for k, (m, sd) in TRTLLM_PRIORS.items()))
    print(
        f"{'gpu':<10} {'rows':<16} {'dtype':<5} {'bandwidth':>9} {'compute':>8} {'overhead_ms':>11} {'allreduce_us':>12} "
        f"{'interconnect':>12}  n fit/held  ended on a bound"
    )
    for g, f in cal.fits.items():
        e = f.fit.efficiency
        print(
            f"{g:<10} {'/'.join(f.labels):<16} {'/'.join(f.dtypes):<5} {e.bandwidth:9.3f} {e.compute:8.3f} "
            f"{e.step_overhead_ms:11.2f} {e.allreduce_latency_us:12.1f} {e.interconnect:12.3f}  {f.n_fit:4d}/{f.n_held:<4d}  "
            f"{', '.join(f.fit.at_bounds) or '-'}"
        )
    print("   splitwise-only fits (diagnostic, not written):")
    for g, f in cal.splitwise_fits.items():
        e = f.efficiency
        print(
            f"{g:<10} {'splitwise':<16} {'fp16':<5} {e.bandwidth:9.3f} {e.compute:8.3f} "
            f"{e.step_overhead_ms:11.2f} {e.allreduce_latency_us:12.1f} {e.interconnect:12.3f}  {'':9}  "
            f"{', '.join(f.at_bounds) or '-'}"
        )
    print()


def print_summary(cal: Calibration) -> None:
    print("== Absolute percentage error, fit rows and held-out rows")
    t = cal.trtllm
    print("TensorRT-LLM decode throughput (catalog factors):")
    print(f"  fit rows       {fmt_stats([p for p in t if not p.held_out])}")
    print(f"  held-out rows  {fmt_stats([p for p in t if p.held_out])}")
    print(f"  all rows       {fmt_stats(t)}")
    for g in cal.fits:
        mine = [p for p in t if p.gpu == g]
        print(
            f"    {g:<10} fit {fmt_stats([p for p in mine if not p.held_out])} | "
            f"held-out {fmt_stats([p for p in mine if p.held_out])}"
        )
    for source, what in (("splitwise-prefill", "prefill_ms"), ("splitwise-decode", "decode_ms_per_step")):
        cat_rows = [p for p in cal.splitwise if p.source == source]
        own_rows = [p for p in cal.splitwise_own if p.source == source]
        print(f"Splitwise {what}:")
        print(f"  catalog factors (no splitwise row fitted)  {fmt_stats(cat_rows)}")
        print(f"  splitwise-only fit, fit rows               {fmt_stats([p for p in own_rows if not p.held_out])}")
        print(f"  splitwise-only fit, held-out rows          {fmt_stats([p for p in own_rows if p.held_out])}")
    _, held_med, _ = summarise([p for p in t if p.held_out])
    _, all_med, _ = summarise(t)
    ok = "meets" if max(held_med, all_med) <= TARGET_PCT else "MISSES"
    print(
        f"Target: median abs error <= {TARGET_PCT:g}% on decode throughput: held-out {held_med:.1f}%, "
        f"all rows {all_med:.1f}% -> {ok} the target"
    )
    print()


def print_overhead_profile(catalog: Catalog) -> None:
    """Held-out median error with step_overhead_ms pinned: why the fit carries a prior."""
    print("== Held-out median error with step_overhead_ms pinned (other factors refitted)")
    cases = trtllm_cases(catalog, load_trtllm_rows())
    pins = (0.5, 2.0, 5.0, 10.0)
    print(f"{'gpu':<10} " + " ".join(f"{f'{v:g} ms':>9}" for v in pins))
    for g in sorted({c.gpu_id for c in cases}):
        mine = [c for c in cases if c.gpu_id == g]
        fit = [c for c in mine if not c.row.held_out]
        held = [c for c in mine if c.row.held_out]
        cells = []
        for v in pins:
            r = fit_efficiency(trtllm_log_errors(fit), catalog.gpu(g).efficiency, priors={"step_overhead_ms": (v, 1e-4)})
            errs = [100 * abs(c.predict(r.efficiency) / c.row.measured_tok_s_per_gpu - 1) for c in held]
            cells.append(f"{np.median(errs):8.1f}%")
        print(f"{g:<10} " + " ".join(cells))
    print()


def print_vidur(cal: Calibration, catalog: Catalog) -> None:
    path = measured_dir() / VIDUR_FILE
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    print(f"== Cross-check: GEMMs alone, fp16, one layer of a 70B model at tp 1 ({VIDUR_FILE})")
    for label, gpu_id in (("a100", "a100-80gb"), ("h100", "h100-sxm")):
        mine = [r for r in rows if r["gpu"] == label]
        if not mine:
            continue
        gpu = catalog.gpu(gpu_id)
        bw = np.mean([float(r["achieved_TBps_weights"]) for r in mine if int(r["num_tokens"]) == 1]) * 1e3
        big = [float(r["achieved_TFLOPs"]) for r in mine if int(r["num_tokens"]) >= 2048]
        fit = cal.fits.get(gpu_id)
        fitted = (
            f"fitted end to end: bandwidth {fit.fit.efficiency.bandwidth:.2f}, compute {fit.fit.efficiency.compute:.2f} "
            f"of the {'/'.join(fit.dtypes)} peak"
            if fit
            else ""
        )
        print(
            f"{gpu_id:<10} bandwidth at 1 token {bw / gpu.hbm_bandwidth_gb_s:.2f} of {gpu.hbm_bandwidth_gb_s:g} GB/s; "
            f"compute at >= 2048 tokens {np.median(big) / gpu.tflops('fp16'):.2f} of {gpu.tflops('fp16'):g} fp16 TFLOP/s | {fitted}"
        )
    print()


def print_committed(cal: Calibration, catalog: Catalog) -> None:
    cases = trtllm_cases(catalog, load_trtllm_rows())
    errs = [100 * abs(c.predict() / c.row.measured_tok_s_per_gpu - 1) for c in cases]
    drift = max(
        max(
            abs(catalog.gpu(g).efficiency.bandwidth - f.fit.efficiency.bandwidth),
            abs(catalog.gpu(g).efficiency.compute - f.fit.efficiency.compute),
            abs(catalog.gpu(g).efficiency.step_overhead_ms - f.fit.efficiency.step_overhead_ms) / 10,
            abs(catalog.gpu(g).efficiency.allreduce_latency_us - f.fit.efficiency.allreduce_latency_us) / 100,
            abs(catalog.gpu(g).efficiency.interconnect - f.fit.efficiency.interconnect),
        )
        for g, f in cal.fits.items()
    )
    state = "in step with this fit" if drift < 0.01 else "NOT in step with this fit: run with --write"
    print(
        f"== Factors committed in data/gpus.yaml: median abs error {np.median(errs):.1f}% (worst {max(errs):.1f}%) "
        f"on the {len(errs)} TensorRT-LLM rows; {state}"
    )
    reasons: dict[str, int] = {}
    for _, why in cal.skipped:
        reasons[why] = reasons.get(why, 0) + 1
    print("Skipped rows: " + "; ".join(f"{why} ({n})" for why, n in sorted(reasons.items())))
    print()


def write_catalog(cal: Calibration, catalog: Catalog) -> None:
    blocks, warnings = catalog_efficiencies(cal, catalog)
    for w in warnings:
        print(f"warning: {w}")
    old_text = GPUS_YAML.read_text(encoding="utf-8")  # read now: others may have edited it
    new_text = rewrite_efficiency_blocks(old_text, blocks)
    old, new = yaml.safe_load(old_text), yaml.safe_load(new_text)
    for gpu_id in old:  # nothing but the efficiency blocks may change
        rest_old = {k: v for k, v in old[gpu_id].items() if k != "efficiency"}
        rest_new = {k: v for k, v in new[gpu_id].items() if k != "efficiency"}
        if rest_old != rest_new or (gpu_id not in blocks and old[gpu_id].get("efficiency") != new[gpu_id].get("efficiency")):
            sys.exit(f"refusing to write: {gpu_id} would change outside its efficiency block")
    for gpu_id, eff in blocks.items():
        if new[gpu_id]["efficiency"] != eff.model_dump():
            sys.exit(f"refusing to write: {gpu_id}'s new efficiency block does not read back")
    if new_text == old_text:
        print(f"--write: {GPUS_YAML.name} already holds these factors")
        return
    GPUS_YAML.write_text(new_text, encoding="utf-8")
    print(f"--write: efficiency blocks rewritten in data/{GPUS_YAML.name} for {', '.join(blocks)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="rewrite the efficiency blocks of data/gpus.yaml")
    args = parser.parse_args(argv)
    np.set_printoptions(precision=4)
    catalog = load_catalog()
    cal = calibrate(catalog)
    print_trtllm_rows(cal)
    print_splitwise_rows(cal)
    print_factors(cal)
    print_overhead_profile(catalog)
    print_vidur(cal, catalog)
    print_summary(cal)
    print_committed(cal, catalog)
    if args.write:
        write_catalog(cal, catalog)
    _, med, _ = summarise(cal.trtllm)
    return 0 if math.isfinite(med) else 1


if __name__ == "__main__":
    sys.exit(main())
