"""Calibrate the GPU catalog's efficiency factors on published measurements.

    python bench/calibration.py                  # fit, cross-validate and print; changes nothing
    python bench/calibration.py --write          # also rewrite the efficiency blocks of data/gpus.yaml
    python bench/calibration.py --compare-forms  # also the held-out error without the per-layer term,
                                                 # with one all-reduce protocol, and without the straggler term

Prints every measured row with its in-sample and held-out prediction, the factors per GPU
with what each was fitted on, the all-reduce latency per interconnect family beside its
published range and the straggler term of tensor parallelism beside it, and the held-out error by tensor-parallel degree, by model and for the
mixture-of-experts rows, against the targets (median <= 10%, worst <= 25%), the worst
held-out rows one by one, how far the same configuration measured by two TensorRT-LLM
releases disagrees (a floor no model of the hardware can go below), and the published offline
throughput of mixtures of experts against the model, fitted on by nothing (--write also writes that
check's summary to data/measured/moe_check.yaml, which a plan's warning quotes). Held out means
predicted by a fit that saw no row of that (model, GPU, tp) configuration. The
method is in planner/calibration/__init__.py's docstring; the data and their licences in
data/measured/README.md. Deterministic: no timings, no randomness.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import least_squares

from planner.calibration.allreduce_published import (
    BULK_MIN_BYTES,
    NCCL_FILE,
    PLATEAU_SHARE,
    RANGE_SE,
    SMALL_MAX_BYTES,
    NcclRow,
    bus_bytes,
    load_nccl_rows,
    published_bulk_ranges,
    published_small_ranges,
)
from planner.calibration.allreduce_small import SMALL_FILE, SMALL_MESSAGE_MAX_BYTES
from planner.calibration.calibrate import (
    FITTED_LATENCY_ENGINES,
    KFOLD,
    Calibration,
    Prediction,
    calibrate,
    cross_validate,
    folds_text,
    summarise,
)
from planner.calibration.efficiency_blocks import catalog_efficiencies, rewrite_efficiency_blocks
from planner.calibration.fit import BOUNDS, TRTLLM_PRIORS
from planner.calibration.joint_fit import (
    BULK_ALLREDUCE,
    LAYER_OVERHEAD,
    STRAGGLER,
    interconnect_family,
    published_small_allreduce,
    shared_fit_note,
    small_latency_bounds,
)
from planner.calibration.measured import (
    SPLITWISE_FILE,
    TRTLLM_FILE,
    VIDUR_FILE,
    load_trtllm_rows,
    measured_dir,
)
from planner.calibration.moe_check import (
    CHECK_FILE,
    MOE_FILE,
    MoeCheck,
    committed_moe_check,
    moe_predictions,
)
from planner.calibration.predict import trtllm_cases
from planner.catalog import Catalog, load_catalog
from planner.latency_points import LATENCY_FILE, latency_cases
from planner.roofline import (
    GEMM_CORNER_P,
    SMALL_MESSAGE_BANDWIDTH_SHARE,
    allreduce_call_latency,
    allreduce_call_s,
    bulk_latency_at_tp2_us,
    gemm_phase_s,
    harmonic_number,
    straggler_factor,
)

TARGET_MEDIAN_PCT = 10.0
TARGET_WORST_PCT = 25.0
GPUS_YAML = Path(__file__).resolve().parent.parent / "data" / "gpus.yaml"
TP_DEGREES = (2, 4, 8)  # the all-reduce figures printed


def fmt_stats(preds: list[Prediction]) -> str:
    n, med, worst = summarise(preds)
    if not n:
        return "n=  0"
    return f"n={n:3d}  median {med:5.1f}%  worst {worst:5.1f}%"


def verdict(preds: list[Prediction]) -> str:
    n, med, worst = summarise(preds)
    if not n:
        return "no data"
    ok = med <= TARGET_MEDIAN_PCT and worst <= TARGET_WORST_PCT
    return "meets" if ok else "MISSES"


def print_rows(cal: Calibration) -> None:
    held = {(p.source, p.line): p for p in cal.held_out}
    for source, title, unit, rows in (
        ("latency", f"Published latency at low/mid concurrency ({LATENCY_FILE})", "ms", cal.latency),
        ("trtllm", f"TensorRT-LLM offline max throughput ({TRTLLM_FILE})", "output tok/s per GPU", cal.trtllm),
    ):
        print(f"== {title}, {unit}")
        print("   'fit': joint fit on every row; 'held': the fold that never saw this (model, GPU, tp)")
        print(f"{'row':>4} {'configuration':<60} {'measured':>9} {'fit':>9} {'err':>7} {'held':>9} {'err':>7}")
        for p in rows:
            h = held.get((source, p.line))
            tail = f"{h.predicted:9.1f} {h.signed_error_pct:+6.1f}%" if h else f"{'-':>9} {'':>7}"
            print(f"{p.line:>4} {p.label:<60} {p.measured:9.1f} {p.predicted:9.1f} {p.signed_error_pct:+6.1f}% {tail}")
        print()
    if cal.engine_check:
        engines = ", ".join(sorted(FITTED_LATENCY_ENGINES))
        print(f"== Latency rows of other engines ({LATENCY_FILE}), ms: fitted on by nothing (the fit takes {engines} rows),")
        print("   predicted with the joint factors; they count as held out in the tables below")
        for p in cal.engine_check:
            print(f"{p.line:>4} {p.label:<60} {p.measured:9.1f} {p.predicted:9.1f} {p.signed_error_pct:+6.1f}%")
        print()
    if cal.borrowed_check:
        print(f"== Latency rows of GPUs with no throughput rows ({LATENCY_FILE}), ms: fitted on by nothing,")
        print("   predicted with the factors the GPU borrows (a check of the borrowing, not of a fit)")
        for p in cal.borrowed_check:
            print(f"{p.line:>4} {p.label:<60} {p.measured:9.1f} {p.predicted:9.1f} {p.signed_error_pct:+6.1f}%")
        print()


def print_splitwise(cal: Calibration) -> None:
    print(f"== Splitwise-sim perf model ({SPLITWISE_FILE}), ms: a research stack, cross-check only")
    for source, what in (("splitwise-prefill", "prefill_ms"), ("splitwise-decode", "decode_ms_per_step")):
        cat_rows = [p for p in cal.splitwise if p.source == source]
        own_rows = [p for p in cal.splitwise_own if p.source == source]
        print(f"  {what:<20} joint factors (nothing fitted)   {fmt_stats(cat_rows)}")
        print(f"  {'':<20} splitwise-only fit, held-out rows {fmt_stats([p for p in own_rows if p.held_out])}")
    print()


def print_factors(cal: Calibration, catalog: Catalog) -> None:
    j = cal.joint
    print("== Fitted efficiency factors per GPU (these go to data/gpus.yaml) and what they were fitted on")
    print("   bounds: " + ", ".join(f"{k} {lo:g}-{hi:g}" for k, (lo, hi) in BOUNDS.items()))
    print(f"layer_overhead_us {j.layer_overhead_us:.1f} for every GPU, fitted on {j.layer_basis}")
    print(f"straggler_cv {j.straggler_cv:.4f} for every GPU, fitted on {j.straggler_basis}")
    print(f"{'gpu':<10} {'bandwidth':>9} {'compute':>8} {'interconn':>9} {'overhead_ms':>11} {'allreduce_us':>12}  fitted on")
    for g, e in j.efficiency.items():
        fam = interconnect_family(catalog.gpu(g))
        bound = j.throughput[g].at_bounds if g in j.throughput else ()
        shared = shared_fit_note(g, [k for k, n in j.n_throughput.items() if n])
        print(
            f"{g:<10} {e.bandwidth:9.3f} {e.compute:8.3f} {e.interconnect:9.3f} {e.step_overhead_ms:11.2f} "
            f"{e.allreduce_latency_us:12.1f}  throughput rows n={j.n_throughput[g]} (bandwidth, compute, interconnect"
            f"{'; ended on a bound: ' + ', '.join(bound) if bound else ''}{'; ' + shared if shared else ''}); "
            f"overhead: {j.overhead_basis[g]}; "
            f"all-reduce: {fam}"
        )
    print(f"   prior on step_overhead_ms where no latency rows: N{TRTLLM_PRIORS['step_overhead_ms']}")
    blocks, _ = catalog_efficiencies(cal, catalog)
    cited = published_small_allreduce()
    for g, e in blocks.items():
        if e.borrowed_from:
            fam = interconnect_family(catalog.gpu(g))
            pub = cited.get(fam)
            lo, hi = small_latency_bounds(fam)
            # The catalog keeps 0.1 us: a value rounded from the bound counts as at it.
            state = ("no published range" if pub is None else
                     f"{'within' if lo - 0.05 <= e.allreduce_latency_us <= hi + 0.05 else 'OUTSIDE'} "
                     f"{fam}'s published {pub.low_us:g}-{pub.high_us:g} us at tp 2-8")
            print(f"{g:<10} UNVERIFIED: borrows {e.borrowed_from}'s factors; all-reduce {e.allreduce_latency_us:g} us "
                  f"({state})"
                  f"{'' if e.allreduce_bulk_latency_us is None else f', large messages {e.allreduce_bulk_latency_us:g} us'}")
    print()


def print_allreduce(cal: Calibration, catalog) -> None:
    nccl = load_nccl_rows()
    small = published_small_ranges(nccl)
    print("== All-reduce latency per call, per interconnect family, against published figures")
    print("   small messages (roofline.allreduce_call_latency: the fitted latency at tp 2 times log2(tp), reduce-scatter")
    print(f"   + all-gather), against (a) the cited range of engines' and NCCL's calls of up to {SMALL_MESSAGE_MAX_BYTES // 2**10} KiB")
    print(f"   (data/measured/{SMALL_FILE}, one row per figure) and (b) NCCL alone,")
    print(f"   nccl-tests all_reduce_perf up to {SMALL_MAX_BYTES // 2**10} KiB (data/measured/{NCCL_FILE}); an engine's custom")
    print("   all-reduce kernel beats NCCL at these sizes, so (b) bounds the engines from above")
    cited = published_small_allreduce()
    for fam, us in cal.joint.allreduce_us.items():
        pub = cited.get(fam)
        basis = cal.joint.allreduce_basis[fam]
        per_tp = {tp: allreduce_call_latency(us, tp) for tp in TP_DEGREES}
        calls = ", ".join(f"tp {tp} {v:.1f}" for tp, v in per_tp.items())
        if pub is None:
            print(f"{fam:<15} {calls} us  [{basis}]  (a) no published range")
        else:
            state = "within" if all(pub.low_us <= v <= pub.high_us for v in per_tp.values()) else "OUTSIDE"
            lo, hi = small_latency_bounds(fam)
            print(f"{fam:<15} {calls} us  [{basis}]  (a) published {pub.low_us:g}-{pub.high_us:g} us (tp 2-8): {state}; "
                  f"the fit keeps tp 2 in {lo:g}-{hi:.3g} us")
            print(f"{'':<15} source: {pub.citation}")
        for (f, n), r in small.items():
            if f != fam:
                continue
            v = allreduce_call_latency(us, n)
            where = ("within" if r.contains(v) else "below it, as an engine's custom kernel is" if v < r.low_us
                     else "ABOVE it: slower than NCCL alone")
            print(f"{'':<15} (b) NCCL alone at {n} GPUs: {r.low_us:.1f}-{r.high_us:.1f} us; fitted tp {n} {v:.1f} us: {where}")
            print(f"{'':<15}     source: {r.citation}")
    print_bulk_allreduce(cal, catalog, nccl)
    print_straggler(cal)
    print()


def print_straggler(cal: Calibration) -> None:
    """The rest of tensor parallelism's cost, beside the all-reduces: the ranks' wait for the slowest."""
    cv = cal.joint.straggler_cv
    print("   the rest of tensor parallelism's cost (roofline.straggler_factor): every all-reduce waits for the slowest")
    print("   rank, so a decode pass's memory reads and weight GEMMs take 1 + cv x (H_tp - 1) times one rank's mean")
    print("   (expected maximum of tp exponential-tailed times, David & Nagaraja, Order Statistics, 2003; prompts' FLOPs")
    print("   are not stretched); no published range: fitted, not checked")
    cells = ", ".join(f"tp {tp} x{straggler_factor(cv, tp):.3f} (H-1 {harmonic_number(tp) - 1:.3f})" for tp in TP_DEGREES)
    print(f"{'straggler':<15} cv {cv:.4f} [{cal.joint.straggler_basis}]: {cells}")


def print_bulk_allreduce(cal: Calibration, catalog, nccl: Sequence[NcclRow]) -> None:
    """The large-message protocol's fitted latency per family and tp against the alpha-beta intercept
    of published nccl-tests curves (allreduce_published.published_bulk_ranges), and the time the
    model gives one call beside the measured time, per GPU with a published curve."""
    j = cal.joint
    ranges = published_bulk_ranges(nccl)
    print("   large messages (roofline.allreduce_call_s: the faster of the two protocols per message; small messages move")
    print(f"   at {SMALL_MESSAGE_BANDWIDTH_SHARE:g} of the link rate, NCCL LL, Hu et al. arXiv:2507.04786), against the fixed cost")
    print("   of published nccl-tests curves: the intercept of time = alpha + bus_bytes / busbw, least relative squares on sizes")
    print(f"   from {BULK_MIN_BYTES // 2**20} MiB to the first at {PLATEAU_SHARE:g} of the curve's peak bus bandwidth, +- {RANGE_SE:g} standard"
          " errors within 0 and the quickest call")
    for fam, us in j.allreduce_bulk_us.items():
        basis = j.allreduce_bulk_basis[fam]
        if us is None:
            print(f"{fam:<15} one protocol [{basis}]")
            continue
        by_tp = j.allreduce_bulk_by_tp_us[fam]
        per_tp = {tp: allreduce_call_latency(bulk_latency_at_tp2_us(us, by_tp, tp), tp) for tp in TP_DEGREES}
        calls = ", ".join(f"tp {tp} {v:.1f}" for tp, v in per_tp.items())
        print(f"{fam:<15} {calls} us  [{basis}]")
        for tp in TP_DEGREES:
            r = ranges.get((fam, tp))
            v = per_tp[tp]
            if r is None:
                print(f"{'':<15} tp {tp}: no published curve found")
                continue
            where = "within" if r.contains(v) else f"OUTSIDE ({v / (r.high_us if v > r.high_us else r.low_us):.1f}x the {'top' if v > r.high_us else 'bottom'})"
            print(f"{'':<15} tp {tp}: measured {r.low_us:.1f}-{r.high_us:.1f} us, fitted {v:.1f} us: {where}")
            for t in r.tables:
                print(f"{'':<15}     {t.gpu} x{t.n_gpus} {t.algorithm}, NCCL {t.nccl_version}: alpha {t.fit.alpha_us:.1f} +- "
                      f"{t.fit.alpha_se_us:.1f} us, busbw {t.fit.busbw_gb_s:.0f} GB/s on {t.fit.first_bytes / 2**20:g}-"
                      f"{t.fit.last_bytes / 2**20:g} MiB ({t.source_url})")
    sizes = (2**20, 16 * 2**20, 256 * 2**20)
    print(f"   one call, model / measured time in us at {', '.join(f'{b / 2**20:g} MiB' for b in sizes)}, per GPU with a published curve")
    for g, e in j.efficiency.items():
        if e.allreduce_bulk_latency_us is None:
            continue
        for key in sorted({r.table for r in nccl if r.gpu == g}):
            n = key[1]
            link = catalog.gpu(g).scale_up_gb_s(n) * 1e9 * e.interconnect
            measured = {r.message_bytes: r.time_us for r in nccl if r.table == key}
            cells = []
            for size in sizes:
                bulk_us = bulk_latency_at_tp2_us(e.allreduce_bulk_latency_us, e.allreduce_bulk_latency_by_tp_us, n)
                t = float(allreduce_call_s(bus_bytes(size, n) / link, e.allreduce_latency_us / 1e6, bulk_us / 1e6, n))
                cells.append(f"{t * 1e6:.0f} / {measured[size]:.0f}" if size in measured else f"{t * 1e6:.0f} / -")
            print(f"   {g:<10} x{n} {', '.join(cells)}")


def print_by_tp(held: list[Prediction]) -> None:
    for source, title in (("latency", "latency rows"), ("trtllm", "throughput rows"), (None, "all rows")):
        mine = [p for p in held if source is None or p.source == source]
        print(f"-- {title}")
        for tp in (1, 2, 4, 8):
            rows = [p for p in mine if p.tp == tp]
            print(f"   tp {tp}            {fmt_stats(rows)}  {verdict(rows)}")
        moe = [p for p in mine if p.moe]
        print(f"   MoE rows        {fmt_stats(moe)}  {verdict(moe)}")
        for model in sorted({p.model for p in mine}):
            rows = [p for p in mine if p.model == model]
            print(f"   {model:<15} {fmt_stats(rows)}")
        for gpu in sorted({p.gpu for p in mine}):
            rows = [p for p in mine if p.gpu == gpu]
            print(f"   {gpu:<15} {fmt_stats(rows)}")


def release_key(p: Prediction) -> tuple[str, ...] | None:
    """(GPU, model, dtype, tp, lengths) of a TensorRT-LLM row, its release left out (Llama 3.3 70B
    read as 3.1 70B, the same architecture); None for other sources."""
    if p.source != "trtllm":
        return None
    _, _, rest = p.label.partition(" ")
    return tuple(rest.replace("Llama-3.3-70B", "Llama-3.1-70B").split())


def releases_grouped(preds: Sequence[Prediction]) -> list[Prediction]:
    """The predictions with the rows of one configuration measured by both TensorRT-LLM releases
    counted once: measured at the geometric mean of the two (the prediction is the same for both,
    one deployment in one fold), labelled with both releases. Other rows unchanged."""
    by_key: dict[tuple[str, ...], list[Prediction]] = {}
    out: list[Prediction] = []
    for p in preds:
        key = release_key(p)
        if key is None:
            out.append(p)
        else:
            by_key.setdefault(key, []).append(p)
    for key, group in by_key.items():
        if len(group) == 1:
            out.append(group[0])
            continue
        releases = "+".join(sorted(g.label.split(" ", 1)[0] for g in group))
        measured = float(np.exp(np.mean(np.log([g.measured for g in group]))))
        predicted = float(np.exp(np.mean(np.log([g.predicted for g in group]))))
        out.append(dataclasses.replace(group[0], label=f"{releases} {' '.join(key)}", measured=measured, predicted=predicted))
    return sorted(out, key=lambda p: (p.source, p.line))


def print_held_out(cal: Calibration) -> None:
    grouped = releases_grouped(cal.held_out)
    pairs = len(cal.held_out) - len(grouped)
    print(
        f"== Held-out absolute percentage error (cross-validation by configuration, {folds_text(cal.folds)}); "
        f"targets: median <= {TARGET_MEDIAN_PCT:g}%, worst <= {TARGET_WORST_PCT:g}%"
    )
    print(
        f"   a configuration measured by both TensorRT-LLM releases ({pairs} pairs) counts once, at the geometric "
        "mean of its two measurements (the releases disagree: see the pairs below); row by row after the table"
    )
    print_by_tp(grouped)
    print("Row by row (each release's row counted on its own), throughput rows:")
    rows = [p for p in cal.held_out if p.source == "trtllm"]
    print("   " + " | ".join(f"tp{tp} {fmt_short(tp_rows)} {verdict(tp_rows)}"
                            for tp in (1, 2, 4, 8) if (tp_rows := [p for p in rows if p.tp == tp])))
    print("In-sample (joint fit on every row):")
    print(f"   latency rows    {fmt_stats(cal.latency)}")
    print(f"   throughput rows {fmt_stats(cal.trtllm)}")
    if cal.held_out_kfold is not cal.held_out:
        print(f"Harsher check, {folds_text(KFOLD)} at once (a fold can hold every tp-1 configuration of a GPU):")
        for source in ("latency", "trtllm"):
            mine = [p for p in cal.held_out_kfold if p.source == source]
            cells = [f"tp{tp} {fmt_short([p for p in mine if p.tp == tp])}" for tp in (1, 2, 4, 8)]
            cells.append(f"MoE {fmt_short([p for p in mine if p.moe])}")
            print(f"   {source:<8} " + " | ".join(cells))
    print()


def fmt_short(preds: list[Prediction]) -> str:
    n, med, worst = summarise(preds)
    return "-" if not n else f"{med:.1f}/{worst:.1f}%"


def print_worst(cal: Calibration, n: int = 15) -> None:
    fit = {(p.source, p.line): p for p in cal.trtllm + cal.latency}
    print(f"== The {n} worst held-out rows ({folds_text(cal.folds)}), signed error, with the in-sample error beside")
    for p in sorted(cal.held_out, key=lambda p: -p.error_pct)[:n]:
        f = fit.get((p.source, p.line))  # other engines' rows are predicted, never fitted
        beside = f"in-sample {f.signed_error_pct:+6.1f}%" if f else "not fitted (another engine)"
        print(f"   {p.source:<8} {p.line:>4} {p.label:<60} held {p.signed_error_pct:+6.1f}%  {beside}")
    print()


def print_release_spread(cal: Calibration) -> None:
    """Rows measured by both TensorRT-LLM releases (v0.17, v1.0) for the same GPU, model, dtype, tp and
    lengths: their disagreement is engine change, which no model of the hardware can follow."""
    by_key: dict[tuple, dict[str, float]] = {}
    for p in cal.trtllm:
        by_key.setdefault(release_key(p), {})[p.label.split(" ", 1)[0]] = p.measured
    spread = [(k, v) for k, v in by_key.items() if len(v) == 2]
    if not spread:
        return
    ratios = np.array([max(v.values()) / min(v.values()) - 1 for _, v in spread]) * 100
    worst = spread[int(np.argmax(ratios))]
    print(
        f"== Same configuration, two TensorRT-LLM releases ({len(spread)} pairs): they differ by median "
        f"{np.median(ratios):.1f}%, at most {ratios.max():.1f}% ({' '.join(worst[0])}: "
        + ", ".join(f"{r} {v:g}" for r, v in sorted(worst[1].items()))
        + " tok/s/GPU)"
    )
    print()


def print_forms(catalog: Catalog) -> None:
    """Held-out error (leave one configuration out) without the per-layer overhead, with one
    all-reduce protocol, without the straggler term, and in the catalog's form."""
    thr = trtllm_cases(catalog, load_trtllm_rows())
    lat = [c for c in latency_cases(catalog) if c.gpu_id in {c.gpu_id for c in thr} and c.row.engine in FITTED_LATENCY_ENGINES]
    print("== Model form: held-out error (leave one configuration out), median/worst abs %")
    forms = (
        ("without per-layer overhead", False, BULK_ALLREDUCE, STRAGGLER),
        ("one all-reduce protocol", LAYER_OVERHEAD, False, STRAGGLER),
        ("without straggler term", LAYER_OVERHEAD, BULK_ALLREDUCE, False),
        ("the catalog's form", LAYER_OVERHEAD, BULK_ALLREDUCE, STRAGGLER),
    )
    for label, layer, bulk, straggler in forms:
        held = cross_validate(catalog, thr, lat, 0, layer, bulk, straggler)
        for source in ("latency", "trtllm"):
            mine = [p for p in held if p.source == source]
            cells = [f"tp{tp} {fmt_short([p for p in mine if p.tp == tp])}" for tp in (1, 2, 4, 8)]
            cells.append(f"MoE {fmt_short([p for p in mine if p.moe])}")
            print(f"   {label:<27} {source:<8} " + " | ".join(cells))
    print(f"   the catalog takes: per-layer overhead {LAYER_OVERHEAD}, two all-reduce protocols {BULK_ALLREDUCE} "
          f"(large-message latency from published nccl-tests curves), straggler term {STRAGGLER}")
    print()


def print_vidur(cal: Calibration, catalog: Catalog) -> None:
    path = measured_dir() / VIDUR_FILE
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    print(f"== Cross-check: GEMMs alone, fp16, one layer of a 70B model at tp 1 ({VIDUR_FILE})")
    for label, gpu_id in (("a100", "a100-80gb"), ("h100", "h100-sxm")):
        mine = [r for r in rows if r["gpu"] == label]
        gpu = catalog.gpu(gpu_id)
        bw = np.mean([float(r["achieved_TBps_weights"]) for r in mine if int(r["num_tokens"]) == 1]) * 1e3
        e = cal.joint.efficiency[gpu_id]
        print(
            f"{gpu_id:<10} vidur bandwidth at 1 token {bw / gpu.hbm_bandwidth_gb_s:.2f} of {gpu.hbm_bandwidth_gb_s:g} GB/s "
            f"| fitted end to end: bandwidth {e.bandwidth:.2f}, compute {e.compute:.2f}"
        )
        print(f"{'':<10} GEMM time at 1-8192 tokens, bandwidth and compute fitted to these rows alone: {corner_check(mine, gpu)}")
    print()


def corner_check(rows: list[dict[str, str]], gpu) -> str:
    """rms and worst error of the measured GEMM times under the sharp roofline (max) and under
    roofline.gemm_phase_s (the rounded corner the step model uses), each with its own best
    bandwidth and compute fractions: the evidence for GEMM_CORNER_P."""
    weight = np.array([float(r["weight_bytes_per_gpu"]) for r in rows])
    flops = np.array([float(r["flops_per_gpu"]) for r in rows])
    measured_s = np.array([float(r["linear_ms"]) for r in rows]) / 1e3
    peak_bw, peak_flops = gpu.hbm_bandwidth_gb_s * 1e9, gpu.tflops("fp16") * 1e12
    out = []
    for name, phase in (("max", np.maximum), (f"p={GEMM_CORNER_P:g}", gemm_phase_s)):
        fit = least_squares(
            lambda x, phase=phase: np.log(phase(weight / (peak_bw * x[0]), flops / (peak_flops * x[1])) / measured_s),
            [0.8, 0.7], bounds=([0.1, 0.1], [1.5, 1.5]),
        )  # fmt: skip
        err = 100 * np.expm1(fit.fun)
        out.append(f"{name} rms {np.sqrt(np.mean(err**2)):.1f}% worst {np.abs(err).max():.1f}%")
    return " | ".join(out)


def print_moe_check(catalog: Catalog) -> MoeCheck:
    """The MoE rows, fitted on by nothing (planner/calibration/moe_check.py), by configuration."""
    predictions = moe_predictions(catalog)
    check = MoeCheck.of(predictions)
    print(f"== Mixtures of experts, fitted on by nothing ({MOE_FILE}): predicted / measured - 1, "
          "positive = the model overstates the throughput")
    configs: dict[tuple[str, str, str, int], list[float]] = {}
    for p in predictions:
        configs.setdefault((p.row.model, p.row.gpu, p.row.dtype, p.row.tp), []).append(p.error_pct)
    for (model, gpu, dtype, tp), errors in configs.items():
        where = "one GPU" if tp == 1 else "expert / attention data parallelism likely (the page's MoE command)"
        print(f"   {model:<17} {gpu:<12} {dtype} tp{tp}: {len(errors):2d} rows, median {np.median(errors):+6.1f}% "
              f"({min(errors):+.1f}% to {max(errors):+.1f}%)  [{where}]")
    committed = committed_moe_check()
    state = "in step with this check" if committed == check else "NOT in step with this check: run with --write"
    print(f"   one-GPU rows (what a plan's warning quotes): {check.finding()}")
    print(f"   data/measured/{CHECK_FILE}: {state}")
    print()
    return check


def print_committed(cal: Calibration, catalog: Catalog) -> None:
    blocks, _ = catalog_efficiencies(cal, catalog)
    keys = (
        "bandwidth", "compute", "step_overhead_ms", "allreduce_latency_us", "interconnect", "layer_overhead_us",
        "allreduce_bulk_latency_us", "allreduce_bulk_latency_by_tp_us", "straggler_cv", "borrowed_from",
    )  # fmt: skip
    stale = [g for g, e in blocks.items() if any(getattr(catalog.gpu(g).efficiency, k) != getattr(e, k) for k in keys)]
    state = "in step with this fit" if not stale else f"NOT in step with this fit ({', '.join(stale)}): run with --write"
    print(f"== Factors committed in data/gpus.yaml: {state}")
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
        if new[gpu_id]["efficiency"] != eff.model_dump(exclude_none=True):
            sys.exit(f"refusing to write: {gpu_id}'s new efficiency block does not read back")
    if new_text == old_text:
        print(f"--write: {GPUS_YAML.name} already holds these factors")
        return
    GPUS_YAML.write_text(new_text, encoding="utf-8")
    print(f"--write: efficiency blocks rewritten in data/{GPUS_YAML.name} for {', '.join(blocks)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="rewrite the efficiency blocks of data/gpus.yaml")
    parser.add_argument(
        "--compare-forms", action="store_true", help="also print the held-out error without the per-layer term, with one all-reduce protocol and without the "
        "straggler term"
    )
    args = parser.parse_args(argv)
    catalog = load_catalog()
    cal = calibrate(catalog)
    print_rows(cal)
    print_splitwise(cal)
    print_factors(cal, catalog)
    print_allreduce(cal, catalog)
    print_vidur(cal, catalog)
    print_held_out(cal)
    print_worst(cal)
    print_release_spread(cal)
    if args.compare_forms:
        print_forms(catalog)
    moe = print_moe_check(catalog)
    print_committed(cal, catalog)
    if args.write:
        write_catalog(cal, catalog)
        path = measured_dir() / CHECK_FILE
        if path.exists() and path.read_text(encoding="utf-8") == moe.yaml_text():
            print(f"--write: data/measured/{CHECK_FILE} already holds this check")
        else:
            path.write_text(moe.yaml_text(), encoding="utf-8")
            print(f"--write: data/measured/{CHECK_FILE} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
