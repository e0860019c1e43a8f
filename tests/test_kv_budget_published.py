"""The memory ladder against vLLM's own start-up logs (data/measured/vllm_kv_budget_published.csv).

Each row is a published run's memory profile: the GPU's total, the utilisation, the weights, the
memory outside PyTorch and the activation peak, and what vLLM left for the KV cache. Given a row's
own figures, budget_ladder's rule for vLLM (fraction_of_total) must give that cache, to the 0.01 GiB
the logs print: the formula is vLLM's, whatever the catalog's defaults make of it
(bench/kv_budget.py prints how far those defaults are).
"""

from __future__ import annotations

import contextlib
import io

import pytest
from bench_scripts import load_bench

from planner.catalog import load_catalog


@pytest.fixture(scope="module")
def bench():
    return load_bench("kv_budget")


def test_the_ladder_given_a_log_s_own_figures_gives_its_kv_cache(bench):
    cat = load_catalog()
    rows = bench.read_rows()
    assert len(rows) == 9 and len({r["row_id"] for r in rows}) == 9
    for row in rows:
        tp = int(row["tp"])
        ladder = bench.own_inputs_ladder(row, cat)
        assert ladder.rule == "fraction_of_total" and ladder.tp == tp
        assert ladder.weights_gib / tp == pytest.approx(float(row["model_weights_gib"]), abs=1e-9)
        # each printed figure is rounded to 0.01 GiB: the sum of five can be off by 0.025
        assert abs(ladder.kv_budget_gib / tp - float(row["kv_cache_gib"])) <= 0.025, row["row_id"]


def test_the_bench_prints_every_row_and_the_planner_s_error(bench):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert bench.main() == 0
    text = out.getvalue()
    for row in bench.read_rows():
        assert row["row_id"] in text
    cat = load_catalog()
    row = next(r for r in bench.read_rows() if r["row_id"] == "llmd-llama-3.1-8b")
    # seed 000's ladder (79.65 GiB x 0.90 - 14.96 - 3) against the 51.38 GiB vLLM gave the cache
    assert bench.planner_ladder(row, cat).kv_budget_gib == pytest.approx(53.73, abs=0.005)
    assert "+4.6%" in text.split("llmd-llama-3.1-8b", 1)[1].splitlines()[0]
