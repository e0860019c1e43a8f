"""The planner's KV-cache budget against what vLLM printed at start-up.

Reads data/measured/vllm_kv_budget_published.csv (sources in data/measured/README.md): vLLM's
memory-profiling lines of real runs, each giving the GPU's total memory as CUDA reports it, the
utilisation, the weights, the memory outside PyTorch (non_torch: CUDA context, NCCL buffers), the
peak of the profiling forward pass's activations and what is left for the KV cache, per GPU. For
each row it prints:

- own inputs: planner.memory.budget_ladder given the row's own total, utilisation, weights and
  overhead (non_torch + activation peak): vLLM's rule (fraction_of_total) must give the row's KV
  cache, to the 0.01 GiB vLLM prints (tests/test_kv_budget_published.py holds it);
- planner: the ladder as a plan builds it for the row's catalog model, GPU, tp and weight dtype
  (the catalog's memory and weight bytes, the vLLM profile's 0.90, or the row's utilisation, and
  seed 000's 3 GiB overhead per GPU), and its error against the row's KV cache;
- the overhead that would have given the row's KV cache from the catalog's memory and weights,
  and what the row's own overhead was.

Then the median error and overhead over the V1 rows on an H100. Prints figures; asserts nothing.

    python bench/kv_budget.py
"""

from __future__ import annotations

import csv
import dataclasses
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.catalog import load_catalog  # noqa: E402
from planner.deployment import DEFAULT_OVERHEAD_GIB, Deployment, make_deployment  # noqa: E402
from planner.memory import BudgetLadder, GiB, budget_ladder  # noqa: E402

LOGS_FILE = ROOT / "data" / "measured" / "vllm_kv_budget_published.csv"


def read_rows(path: Path = LOGS_FILE) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def _deployment(row: dict[str, str], cat, model: str) -> Deployment:
    """The row's replica as a plan builds it: the catalog's model and GPU, the row's tp, weight
    dtype, utilisation and context limit, vLLM's profile and the default overhead."""
    return make_deployment(cat, model=model, gpu=row["catalog_gpu"], tp=int(row["tp"]),
                           weight_dtype=row["weight_dtype"], max_model_len=int(row["max_model_len"]),
                           memory_fraction=float(row["gpu_memory_utilization"]))


def own_inputs_ladder(row: dict[str, str], cat) -> BudgetLadder:
    """budget_ladder with the row's own figures in place of the catalog's: its total memory, its
    weights (as a checkpoint's size, which the ladder takes as it stands) and its overhead
    (non_torch + activation peak), each per GPU as vLLM prints them."""
    tp = int(row["tp"])
    dep = _deployment(row, cat, row["catalog_model"] or "llama-3.1-8b")  # the model's size is replaced
    weights = round(float(row["model_weights_gib"]) * tp * GiB)
    model = dep.model.model_copy(update={"checkpoint_weight_bytes": weights, "checkpoint_dtype": row["weight_dtype"]})
    gpu = dep.gpu.model_copy(update={"memory_gib": float(row["total_gpu_memory_gib"])})
    overhead = float(row["non_torch_gib"]) + float(row["activation_peak_gib"])
    return budget_ladder(dataclasses.replace(dep, model=model, gpu=gpu, overhead_gib_per_gpu=overhead))


def planner_ladder(row: dict[str, str], cat) -> BudgetLadder | None:
    """The ladder a plan builds for the row (None: no catalog model)."""
    if not row["catalog_model"]:
        return None
    return budget_ladder(_deployment(row, cat, row["catalog_model"]))


def main() -> int:
    cat = load_catalog()
    rows = read_rows()
    print(f"KV-cache budget per GPU against vLLM's start-up logs ({LOGS_FILE.relative_to(ROOT)}), GiB; "
          f"the planner's default overhead is {DEFAULT_OVERHEAD_GIB:g} GiB per GPU (seed 000)")
    print()
    print(f"{'row':32s} {'engine':10s} {'log KV':>7s} {'own inputs':>10s} {'planner':>8s} {'error':>7s} "
          f"{'overhead: log':>14s} {'would fit':>10s}")
    errors, fits = [], []
    for row in rows:
        tp = int(row["tp"])
        log_kv = float(row["kv_cache_gib"])
        own = own_inputs_ladder(row, cat).kv_budget_gib / tp
        planned = planner_ladder(row, cat)
        overhead = float(row["non_torch_gib"]) + float(row["activation_peak_gib"])
        engine = row["vllm_engine"].split(" ")[0]
        if planned is None:
            print(f"{row['row_id']:32s} {engine:10s} {log_kv:7.2f} {own:10.2f} {'—':>8s} {'—':>7s} {overhead:14.2f} "
                  f"{'—':>10s}  (no catalog model)")
            continue
        kv = planned.kv_budget_gib / tp
        error = kv / log_kv - 1
        # the overhead per GPU that gives the log's KV from the catalog's memory and weights
        fit = (planned.usable_gib - planned.weights_gib) / tp - log_kv
        print(f"{row['row_id']:32s} {engine:10s} {log_kv:7.2f} {own:10.2f} {kv:8.2f} {error:+7.1%} {overhead:14.2f} "
              f"{fit:10.2f}")
        if engine == "V1" and row["catalog_gpu"] == "h100-sxm":
            errors.append(error)
            fits.append(fit)
    if errors:
        print()
        print(f"vLLM V1 on an H100, {len(errors)} rows: the planner's KV budget is off what vLLM gave the cache by "
              f"{statistics.median(errors):+.1%} (median; {min(errors):+.1%} to {max(errors):+.1%}); the overhead that "
              f"would fit each row is {statistics.median(fits):.2f} GiB per GPU (median; {min(fits):.2f} to "
              f"{max(fits):.2f}), against {DEFAULT_OVERHEAD_GIB:g}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
