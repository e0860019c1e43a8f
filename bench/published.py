"""Published serving percentiles replayed in the simulator and the model (issue 11, part 8).

Reads data/measured/serving_percentiles.csv and its sources (data/measured/README.md),
replays every row the project can represent, and prints per row and statistic the
published value, the simulator's (planner.simulate) and the model's (planner.latency
through planner.capacity.ReplicaModel), each with its error against the published value,
(x - published) / published; then the median and worst |error| per source and overall.
Rows that cannot be replayed are listed with the reason. It asserts nothing.

How a row is replayed (every departure from the published run is printed beside it):
- Model: the row's `catalog_model` from the catalog; Llama 2 70B (no catalog entry) from
  data/measured/splitwise_models.yaml, its exact config (planner.calibration.measured).
- GPU, tp, weight dtype: the row's. KV dtype: the row's; where empty, the weights' dtype
  (flagged).
- Engine: the catalog profile of the row's engine (vllm, trtllm; NIM, whose backend the
  source does not name, as trtllm, flagged), copied with model_copy(update=...) where the
  row states max_num_batched_tokens or max_num_seqs, or its notes give vLLM flags
  (--long-prefill-token-threshold, --gpu-memory-utilization, --max-model-len). vLLM >= 0.8
  (the V1 engine) with no stated budget gets the API server's defaults for its GPU (the
  profile's gpu_tiers: 2,048 tokens and 256 sequences on a GPU under 70 GiB or an A100;
  vllm/engine/arg_utils.py, get_batch_defaults, OPENAI_API_SERVER).
- Context limit: --max-model-len from the notes, else the model's.
- Lengths: 'fixed' rows as Histogram.constant(prompt, output). MLPerf rows draw prompt
  and output lengths from the benchmark's dataset (data/samples/mlperf/, see its README;
  DATASETS below), the outputs rescaled by the row's mean output tokens over the
  dataset's mean (the run's model writes other answers than the reference), except
  Llama 3.1 8B: its dataset file holds characters / 4, not tokens, and every run in the
  CSV reports 129.0 output tokens per sample, so outputs are the constant 129. These rows
  are flagged approximate. Requests longer than the context limit have their output
  trimmed.
- Arrival: Poisson rows at request_rate_rps / replicas on one replica (the MLPerf
  harnesses spread queries over their engines; an even split is assumed), --requests
  requests, the first 10% warm-up. Closed-loop rows (N clients each sending its next
  request when the last ends) are approximated by open-loop Poisson arrivals at the rate
  λ where λ·E[latency](λ) = N per replica (Little's law for the clients), found by
  bisection on log λ, separately for the simulator (E[latency] = its mean end-to-end
  time, --closed-loop-requests requests a run, common random numbers) and for the model
  (E[latency] = mean TTFT + (o - 1)·mean TPOT). Beyond saturation the open-loop run's
  backlog grows during the run: its mean matches the closed loop's, its percentiles
  spread wider. Where N exceeds the most sequences the model admits (its memory or batch
  ceiling) the model has no value: it does not model admission queueing.
- The model: ReplicaModel(dep, profile, one band with no target).latency_at(N), N the
  resident batch the mean model gives for the rate (resident_for_rate, up to the bound
  replica_capacity finds); no value above that rate.
- Statistics: TTFT and TPOT at mean, p50, p90, p95 and p99 where the row has them. The
  NIM rows' 'ITL' is AIPerf's per-request (e2e - TTFT) / (output - 1) averaged, a TPOT
  mean (data/measured/README.md), and is compared as one.
- Not replayable: engines run without chunked prefill (prefill-only steps) or with
  multi-step scheduling, vLLM before V1 where the row states no chunking, expert or
  attention data parallelism, and length distributions the source does not state.
The simulator's ± is half the difference between the statistic on the first and the
second half of the run's measured requests (about its sampling error).

Last, the model's capacity against MLPerf Offline throughput of the same systems
(data/measured/mlperf_offline_throughput.csv, print_offline_capacity): the most a replica
serves, which a Server replay bounds only from below, for two dense runs and two mixtures of
experts.

Usage:
    python bench/published.py            # every row (about 5 s on 2 cores)
    python bench/published.py --quick    # fewer requests per run
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from planner.calibration.measured import splitwise_models
from planner.capacity import ReplicaModel, replica_capacity
from planner.catalog import Catalog, load_catalog
from planner.deployment import Deployment, make_deployment
from planner.errors import InputError
from planner.histogram import Histogram
from planner.requests import Requests, sample_lengths
from planner.sim_capacity import profile_for
from planner.sim_measures import RequestLatencies
from planner.simulate import simulate_replica
from planner.targets import SLO, Band
from planner.workload.histfile import read_histogram

ROOT = Path(__file__).resolve().parent.parent
MEASURED = ROOT / "data" / "measured"
POINTS_FILE = MEASURED / "serving_percentiles.csv"
SOURCES_FILE = MEASURED / "serving_percentiles_sources.csv"
DATASET_DIR = ROOT / "data" / "samples" / "mlperf"

STATS = ("mean", "p50", "p90", "p95", "p99")
KINDS = ("ttft", "tpot")
ALL = Band("all", 0, None)
VLLM_V1 = (0, 8)  # vLLM's V1 engine (chunked prefill always on) is the default from 0.8.0
ENGINE_PROFILE = {"vllm": "vllm", "trtllm": "trtllm", "nim": "trtllm"}
ITL_IS_TPOT_MEAN = {"nim_benchmarking_llm_1.0"}  # AIPerf's per-request ITL average (data/measured/README.md)
LLAMA2_70B = "meta-llama/Llama-2-70b-chat-hf"


@dataclass(frozen=True)
class Dataset:
    """A benchmark's request lengths (data/samples/mlperf/<file>.hist.parquet) and how its outputs are used."""

    file: str
    output: str  # 'rescale': the dataset's outputs scaled to the row's mean; 'constant': the row's mean


DATASETS = {
    "mlperf-openorca-24576": Dataset("llama2-70b-99.hist.parquet", "rescale"),
    "mlperf-mixtral-15000": Dataset("mixtral-8x7b.hist.parquet", "rescale"),
    "mlperf-405b-8313": Dataset("llama3-1-405b.hist.parquet", "rescale"),
    # The file's outputs are characters / 4; every Llama 3.1 8B run reports 129.0 tokens per sample.
    "mlperf-cnndm-13368": Dataset("llama3-1-8b-datacenter.hist.parquet", "constant"),
}


# ------------------------------------------------------------------ rows and plans


def read_rows(path: Path = POINTS_FILE) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def read_sources(path: Path = SOURCES_FILE) -> dict[str, dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return {r["source_id"]: r for r in csv.DictReader(f)}


def number(row: dict[str, str], column: str) -> float | None:
    text = row.get(column, "").strip()
    return float(text) if text else None


def published(row: dict[str, str]) -> dict[tuple[str, str], float]:
    """The row's TTFT and TPOT statistics in seconds, keyed (kind, stat)."""
    out = {}
    for kind in KINDS:
        for stat in STATS:
            value = number(row, f"{kind}_ms_{stat}")
            if value is not None:
                out[(kind, stat)] = value / 1e3
    itl = number(row, "itl_ms_mean")
    if row["source_id"] in ITL_IS_TPOT_MEAN and itl is not None:
        out.setdefault(("tpot", "mean"), itl / 1e3)
    return out


def note_flag(notes: str, name: str) -> str | None:
    """The value of a command-line flag quoted in a row's notes ('--name 256' or '--name=256')."""
    m = re.search(rf"--{re.escape(name)}[ =]([0-9.]+)", notes)
    return m.group(1) if m else None


def engine_version(row: dict[str, str]) -> tuple[int, int] | None:
    m = re.search(r"vLLM (\d+)\.(\d+)", row["engine_version"])
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass
class Plan:
    """How one published row is replayed (module docstring), or why it cannot be."""

    row: dict[str, str]
    reasons: list[str] = field(default_factory=list)  # non-empty: not replayable
    approximations: list[str] = field(default_factory=list)
    dep: Deployment | None = None
    dataset: Dataset | None = None
    rate_rps: float | None = None  # per replica, Poisson
    clients: float | None = None  # per replica, closed loop
    targets: dict[tuple[str, str], float] = field(default_factory=dict)

    @property
    def replayable(self) -> bool:
        return not self.reasons


def plan_row(row: dict[str, str], cat: Catalog) -> Plan:
    """Decide how a row is replayed: deployment, lengths, arrivals; or the reasons it cannot be."""
    plan = Plan(row, targets=published(row))
    notes = row["notes"]
    reasons, approx = plan.reasons, plan.approximations
    model = None
    if row["catalog_model"] in cat.models:
        model = cat.model(row["catalog_model"])
        if row["catalog_model"] != row["model"]:
            approx.append(f"model {row['catalog_model']} (same architecture)")
    elif row["model"] == LLAMA2_70B:
        model = splitwise_models()["llama2-70b"]
        approx.append("Llama 2 70B from data/measured/splitwise_models.yaml (not in the catalog)")
    else:
        reasons.append(f"model {row['model']} not in the catalog")
    if row["gpu"] not in cat.gpus:
        reasons.append(f"GPU {row['gpu']} not in the catalog")
    if re.search(r"expert parallelism|attention data-parallel|enable_attention_dp", notes):
        reasons.append("expert / attention data parallelism, not tensor parallelism")
    if row["engine"] not in ENGINE_PROFILE:
        reasons.append(f"engine {row['engine']}: its scheduler is not modelled")
    if row["chunked_prefill"] == "no":
        reasons.append("run without chunked prefill (prefill-only steps pause the decodes; the simulator chunks)")
    version = engine_version(row)
    if row["engine"] == "vllm" and version is not None and version < VLLM_V1 and row["chunked_prefill"] != "yes":
        reasons.append(f"vLLM {version[0]}.{version[1]} (V0) with chunked prefill not stated, off by default")
    steps = note_flag(notes, "num-scheduler-steps") or re.search(r"num_scheduler_steps (\d+)", notes)
    if steps:
        reasons.append("multi-step scheduling (several decode steps per schedule) is not modelled")
    lengths = row["length_distribution"]
    if lengths == "fixed":
        if number(row, "prompt_tokens") is None or number(row, "output_tokens") is None:
            reasons.append("fixed lengths without their values")
    elif lengths in DATASETS:
        plan.dataset = DATASETS[lengths]
        if number(row, "output_tokens") is None:
            reasons.append("no mean output length")
        out = "the constant 129" if plan.dataset.output == "constant" else "rescaled to the run's mean"
        approx.append(f"lengths: {lengths} dataset, outputs {out}")
    else:
        reasons.append(f"lengths '{lengths}': no length distribution for it in data/samples/mlperf/ and no stated "
                       "mean input length")
    if row["arrival"] == "poisson" and number(row, "request_rate_rps"):
        plan.rate_rps = number(row, "request_rate_rps") / float(row["replicas"])
        if int(row["replicas"]) > 1:
            approx.append(f"{row['replicas']} replicas behind one dispatcher: one replica at rate / {row['replicas']}")
    elif row["arrival"] == "closed_loop" and number(row, "concurrency"):
        plan.clients = number(row, "concurrency") / float(row["replicas"])
        approx.append("closed loop as open-loop Poisson at λ with λ·E[latency] = clients")
    else:
        reasons.append(f"arrival '{row['arrival']}' without its rate or concurrency")
    if not plan.targets:
        reasons.append("no TTFT or TPOT statistic")
    if reasons or model is None:
        return plan
    plan.dep = _deployment(row, cat, model, approx, reasons)
    return plan


def _deployment(row, cat: Catalog, model, approx: list[str], reasons: list[str]) -> Deployment | None:
    notes = row["notes"]
    profile = ENGINE_PROFILE[row["engine"]]
    if row["engine"] == "nim":
        approx.append("NIM backend not named: TensorRT-LLM profile")
    version = engine_version(row)
    # vLLM V1's batching defaults by GPU are the catalog profile's gpu_tiers; other engines and
    # older vLLM keep the profile's own values.
    v1 = row["engine"] == "vllm" and version is not None and version >= VLLM_V1
    engine = cat.engine(profile).for_gpu(cat.gpu(row["gpu"])) if v1 else cat.engine(profile)
    update: dict[str, int] = {}
    for column in ("max_num_batched_tokens", "max_num_seqs"):
        if number(row, column) is not None:
            update[column] = int(number(row, column))
    theta = note_flag(notes, "long-prefill-token-threshold")
    if theta:
        update["long_prefill_token_threshold"] = int(theta)
    if update:
        engine = engine.model_copy(update=update)
    kv = row["kv_dtype"]
    if not kv:
        kv = row["weight_dtype"]
        approx.append(f"KV dtype not stated: {kv} assumed")
    fraction = note_flag(notes, "gpu-memory-utilization")
    limit = note_flag(notes, "max-model-len")
    try:
        dep = make_deployment(cat, model=model, gpu=row["gpu"], tp=int(row["tp"]), weight_dtype=row["weight_dtype"],
                              kv_dtype=kv, max_model_len=int(limit) if limit else None, engine=profile,
                              memory_fraction=float(fraction) if fraction else None)
    except InputError as exc:
        reasons.append(f"cannot run here: {exc}")
        return None
    return replace(dep, engine=engine)


# ------------------------------------------------------------------------ replay


def row_lengths(plan: Plan, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths of `n` requests of the row (module docstring)."""
    row, limit = plan.row, plan.dep.max_model_len
    if plan.dataset is None:
        prompt = np.full(n, int(number(row, "prompt_tokens")), np.int64)
        output = np.full(n, int(number(row, "output_tokens")), np.int64)
    else:
        hist = read_histogram(DATASET_DIR / plan.dataset.file)
        prompt, output = sample_lengths(hist, n, np.random.default_rng(seed))
        mean_out = number(row, "output_tokens")
        if plan.dataset.output == "constant":
            output = np.full(n, round(mean_out), np.int64)
        else:
            output = np.maximum(np.rint(output * mean_out / hist.mean_tokens("output")), 1).astype(np.int64)
    prompt = np.minimum(prompt, limit - 1)
    return prompt, np.clip(output, 1, limit - prompt)


def poisson(prompt: np.ndarray, output: np.ndarray, rate_rps: float, seed: int) -> Requests:
    arrival = np.cumsum(np.random.default_rng(seed + 1).exponential(1.0, prompt.size)) / rate_rps
    return Requests(arrival, prompt, output, rate_rps)


def e2e_mean(lat: RequestLatencies) -> float:
    """Mean end-to-end latency of a run's measured requests: TTFT + (o - 1)·TPOT."""
    decode = np.where(lat.output_tokens > 1, np.nan_to_num(lat.tpot_s) * (lat.output_tokens - 1), 0.0)
    return float(np.mean(lat.ttft_s + decode))


def closed_loop_rate(latency_at, clients: float, start_rps: float, max_rps: float | None = None,
                     rel_tol: float = 0.01) -> float | None:
    """λ with λ·E[latency](λ) = clients, by bisection on log λ (the product grows with λ).

    `latency_at(λ)` gives the mean latency (inf where the system cannot carry λ). `start_rps`
    is an upper guess: clients over the latency of an empty system; `max_rps`, where given,
    the highest rate the system carries. None if even the highest rate leaves fewer than
    `clients` in the system (the model's ceiling)."""
    hi = start_rps if max_rps is None else min(start_rps, max_rps)
    for _ in range(20):
        if hi * latency_at(hi) >= clients:
            break
        if max_rps is not None:
            return None
        hi *= 2
    lo = hi
    for _ in range(40):
        lo /= 2
        if lo * latency_at(lo) < clients:
            break
    while hi - lo > rel_tol * hi:
        mid = math.sqrt(lo * hi)
        if mid * latency_at(mid) < clients:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


@dataclass
class Replay:
    plan: Plan
    sim_rate_rps: float
    model_rate_rps: float | None
    sim: dict[tuple[str, str], float]
    sim_spread: dict[tuple[str, str], float]
    model: dict[tuple[str, str], float]
    model_note: str
    context: str


def _stat(lat: RequestLatencies, kind: str, stat: str) -> float:
    return lat.statistic(ALL, kind, stat)


def _half(lat: RequestLatencies, which: int) -> RequestLatencies:
    mid = lat.prompt_tokens.size // 2
    cut = slice(0, mid) if which == 0 else slice(mid, None)
    return RequestLatencies(lat.prompt_tokens[cut], lat.output_tokens[cut], lat.ttft_s[cut], lat.tpot_s[cut], lat.gaps)


def replay(plan: Plan, args) -> Replay:
    dep = plan.dep
    closed = plan.clients is not None
    n = args.closed_loop_requests if closed else args.requests
    prompt, output = row_lengths(plan, n, args.seed)
    hist = Histogram.from_arrays(prompt, output)
    prof = profile_for(dep, hist)
    rm = ReplicaModel(dep, prof, SLO((ALL,)))
    cap = replica_capacity(dep, prof)
    n_max = cap.bound_batch

    def model_point(rate):
        nn = rm.resident_for_rate(rate, n_max)
        return (rm.latency_at(nn), nn) if nn is not None else (None, None)

    if closed:
        empty = float(np.mean(output - 1)) * rm.decode_s(1.0) + rm.latency.at(1e-9, rm.decode_s(1.0), 1.0).ttft_mean(0)
        cache: dict[float, float] = {}

        def sim_latency(rate):
            if rate not in cache:
                cache[rate] = e2e_mean(simulate_replica(dep, poisson(prompt, output, rate, args.seed)).latencies)
            return cache[rate]

        def model_latency(rate):
            pt, _ = model_point(rate)
            if pt is None:
                return math.inf
            return pt.ttft_mean(0) + float(np.mean(output - 1)) * pt.tpot_mean(0)

        sim_rate = closed_loop_rate(sim_latency, plan.clients, plan.clients / empty)
        model_rate = closed_loop_rate(model_latency, plan.clients, plan.clients / empty, max_rps=rm.rate(n_max))
    else:
        sim_rate = model_rate = plan.rate_rps
    res = simulate_replica(dep, poisson(prompt, output, sim_rate, args.seed))
    lat = res.latencies
    halves = (_half(lat, 0), _half(lat, 1))
    sim = {k: _stat(lat, *k) for k in plan.targets}
    spread = {k: abs(_stat(halves[0], *k) - _stat(halves[1], *k)) / sim[k] * 100 / 2 for k in plan.targets}
    model: dict[tuple[str, str], float] = {}
    note = ""
    pt, nn = model_point(model_rate) if model_rate is not None else (None, None)
    if pt is None:
        if closed:
            note = (f"model: {plan.clients:g} clients exceed the {n_max:.0f} sequences it admits "
                    f"({cap.binding} ceiling); admission queueing is not modelled")
        else:
            note = f"model: the rate is above its capacity of {rm.rate(n_max):.3f} rps ({cap.binding} ceiling)"
    else:
        model = {k: pt.value(0, *k) for k in plan.targets}
    load = sim_rate / cap.max_rps if cap.max_rps > 0 else math.inf
    context = (f"sim {sim_rate:.3f} rps per replica ({load:.0%} of the model's capacity {cap.max_rps:.3f}, "
               f"{cap.binding}); N model {nn if nn is None else round(nn, 1)} sim {res.resident_batch:.1f}; "
               f"KV {res.kv_utilisation:.0%}; {res.preemptions_per_1000:.1f} preemptions/1k; "
               f"{'stable' if res.stable else 'UNSTABLE'}; {lat.prompt_tokens.size:,} measured requests")
    if closed:
        context += f"; closed-loop rate: sim {sim_rate:.3f}, model " + (
            f"{model_rate:.3f}" if model_rate is not None else "none") + " rps"
    return Replay(plan, sim_rate, model_rate, sim, spread, model, note, context)


# ----------------------------------------------------------------------- report


def error(x: float | None, ref: float) -> float | None:
    return None if x is None or not math.isfinite(x) else (x / ref - 1.0) * 100


def fmt_ms(x: float | None) -> str:
    return f"{'-':>9s}" if x is None or not math.isfinite(x) else f"{x * 1e3:9.1f}"


def fmt_err(e: float | None) -> str:
    return f"{'-':>6s}" if e is None else f"{e:+5.0f}%"


SHAPES = (("p90", "p50"), ("p99", "p50"))  # tail over median: independent of the step time's scale


def shape_errors(r: Replay) -> list[tuple[str, str, float | None, float | None, float, float | None, float | None]]:
    """(kind, 'p99/p50', sim error, model error, published ratio, sim ratio, model ratio) per ratio the row has."""
    out = []
    for kind in KINDS:
        for top, base in SHAPES:
            a, b = (kind, top), (kind, base)
            if a not in r.plan.targets or b not in r.plan.targets:
                continue
            ref = r.plan.targets[a] / r.plan.targets[b]
            sim = r.sim[a] / r.sim[b]
            finite = a in r.model and math.isfinite(r.model[a]) and math.isfinite(r.model[b]) and r.model[b] > 0
            model = r.model[a] / r.model[b] if finite else None
            out.append((kind, f"{top}/{base}", error(sim, ref), error(model, ref), ref, sim, model))
    return out


def print_replay(r: Replay) -> list[tuple[str, str, str, float | None, float | None]]:
    """Print one row's comparison; return (source, kind, stat, sim error, model error) per statistic,
    and per tail ratio (stat 'p99/p50', ...)."""
    row = r.plan.row
    print(f"{row['point_id']}")
    print(f"  {r.plan.dep.label}, engine {r.plan.dep.engine.id} (C={r.plan.dep.engine.max_num_batched_tokens}, "
          f"max_num_seqs={r.plan.dep.engine.max_num_seqs}, θ={r.plan.dep.engine.long_prefill_token_threshold or '-'}, "
          f"block {r.plan.dep.block_size}); {r.context}")
    if r.plan.approximations:
        print(f"  approximate: {'; '.join(r.plan.approximations)}")
    if r.model_note:
        print(f"  {r.model_note}")
    out = []
    for (kind, stat), ref in r.plan.targets.items():
        sim, model = r.sim.get((kind, stat)), r.model.get((kind, stat))
        es, em = error(sim, ref), error(model, ref)
        out.append((row["source_id"], kind, stat, es, em))
        print(f"    {kind.upper():4s} {stat:4s} ms: published {ref * 1e3:9.1f}  sim {fmt_ms(sim)} {fmt_err(es)} "
              f"(±{r.sim_spread[(kind, stat)]:2.0f}%)  model {fmt_ms(model)} {fmt_err(em)}")
    for kind, ratio, es, em, ref, sim, model in shape_errors(r):
        out.append((row["source_id"], kind, ratio, es, em))
        model_text = f"{model:9.2f}" if model is not None else f"{'-':>9s}"
        print(f"    {kind.upper():4s} {ratio}: published {ref:9.2f}  sim {sim:9.2f} {fmt_err(es)}        model "
              f"{model_text} {fmt_err(em)}")
    return out


def summary_line(label: str, errors: list[float | None]) -> str:
    finite = [abs(e) for e in errors if e is not None]
    if not finite:
        return f"{label}: no value"
    signed = statistics.median(e for e in errors if e is not None)
    return (f"{label}: {len(finite):3d} points, median |error| {statistics.median(finite):6.1f}%, worst "
            f"{max(finite):6.0f}%, median signed {signed:+6.1f}%, within 25%: "
            f"{sum(e <= 25 for e in finite) / len(finite):4.0%}" + (
                f" ({len(errors) - len(finite)} without a value)" if len(finite) < len(errors) else ""))


def print_summary(results: list[tuple[str, str, str, float | None, float | None]]) -> None:
    print()
    print("Summary: error against the published value, (x - published) / published. Values: every statistic; "
          "tail ratios: p90/p50 and p99/p50 of the same run, which a wrong step time scales away")
    values = [r for r in results if "/" not in r[2]]
    ratios = [r for r in results if "/" in r[2]]
    for what, rows in (("values", values), ("tail ratios", ratios)):
        for name, index in (("simulator", 3), ("model", 4)):
            print(f"  {what}, {name}")
            for source in dict.fromkeys(r[0] for r in rows):
                print("    " + summary_line(f"{source:26s}", [r[index] for r in rows if r[0] == source]))
            for kind in KINDS:
                print("    " + summary_line(f"{kind.upper() + ' (all sources)':26s}",
                                            [r[index] for r in rows if r[1] == kind]))
            print("    " + summary_line(f"{'overall':26s}", [r[index] for r in rows]))


OFFLINE_FILE = ROOT / "data" / "measured" / "mlperf_offline_throughput.csv"


def print_offline_capacity(cat: Catalog, rows_by_id: dict[str, dict[str, str]], args) -> None:
    """The model's capacity (replica_capacity, no targets) against MLPerf Offline throughput of the
    same systems (data/measured/mlperf_offline_throughput.csv): the most a replica serves, which the
    Server replays above only bound from below. Each Offline run is its Server row's deployment and
    lengths with the Offline configuration's batch and token budget, in the replays' expected sizing
    (worst-case sizing would reserve the model's whole context for every sequence); dense rows are
    the control for the mixtures of experts (planner/calibration/moe_check.py)."""
    with OFFLINE_FILE.open(newline="", encoding="utf-8") as f:
        offline = list(csv.DictReader(f))
    print(f"Capacity against MLPerf Offline ({OFFLINE_FILE.relative_to(ROOT)}): the model's most requests/s a "
          "replica serves, no targets, against the Offline run's samples/s / replicas; positive = optimistic")
    for o in offline:
        plan = plan_row(rows_by_id[o["server_point_id"]], cat)
        if plan.dep is None:
            print(f"  {o['point_id']}: not representable ({'; '.join(plan.reasons)})")
            continue
        engine = plan.dep.engine.model_copy(update={"max_num_seqs": int(o["max_num_seqs"]),
                                                    "max_num_batched_tokens": int(o["max_num_batched_tokens"])})
        dep = replace(plan.dep, engine=engine)
        prompt, output = row_lengths(plan, args.requests, args.seed)
        prof = profile_for(dep, Histogram.from_arrays(prompt, output))
        measured = float(o["throughput_req_s"]) / int(o["replicas"])
        cap = replica_capacity(dep, prof)
        kind = "MoE" if dep.model.num_experts else "dense"
        print(f"  {o['point_id']} [{kind}]: {dep.gpu.id} tp{dep.tp} w:{dep.weight_dtype.id}, batch <= "
              f"{engine.max_num_seqs}, {engine.max_num_batched_tokens:,} tokens a step; measured {measured:.2f} rps "
              f"a replica; model {cap.max_rps:.2f} ({cap.max_rps / measured - 1:+.0%}, {cap.binding} ceiling)")
    print()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=20_000, help="requests per Poisson replay (default 20,000)")
    ap.add_argument("--closed-loop-requests", type=int, default=3_000,
                    help="requests per run of a closed-loop bisection (default 3,000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="5,000 requests per Poisson replay, 1,000 per closed-loop run")
    args = ap.parse_args(argv)
    if args.quick:
        args.requests, args.closed_loop_requests = 5_000, 1_000
    t_start = time.perf_counter()
    cat = load_catalog()
    sources = read_sources()
    plans = [plan_row(row, cat) for row in read_rows()]
    print(f"Published serving measurements ({POINTS_FILE.relative_to(ROOT)}): {len(plans)} rows from "
          f"{len(sources)} sources; replayed {sum(p.replayable for p in plans)}")
    print(f"Poisson rows: {args.requests:,} requests a run; closed-loop rows: {args.closed_loop_requests:,} a run "
          f"(bisection for the rate); warm-up 10%; seed {args.seed}. ± = the simulator's noise (halves of the run).")
    print()
    results = []
    for plan in plans:
        if plan.replayable:
            results += print_replay(replay(plan, args))
    print()
    print("Not replayed:")
    for plan in plans:
        if not plan.replayable:
            print(f"  {plan.row['point_id']}: {'; '.join(plan.reasons)}")
    print_summary(results)
    print()
    print_offline_capacity(cat, {p.row["point_id"]: p.row for p in plans}, args)
    print(f"total runtime {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
