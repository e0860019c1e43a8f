"""`planner simulate` and `solve --verify`: predicted and simulated side by side, per pool."""

from __future__ import annotations

import json
import textwrap

import pytest
from click.testing import CliRunner

from planner.cli import main

SCENARIO = """
name: sim
model: llama-3.1-8b
context_limit: 8192
traffic:
  source: {constant: {prompt_tokens: 1000, output_tokens: 200}}
  peak: {method: explicit, rps: 6}
gpus: [h100-sxm]
tp: [1]
weight_dtypes: [bf16]
kv_dtypes: [bf16]
sizing: {mode: expected}
"""

KEYS = {"rate_rps", "resident_batch", "kv_utilisation", "itl_ms_p50", "itl_ms_p99", "ttft_ms_p99", "preemptions_per_1000"}


def write(tmp_path):
    path = tmp_path / "sim.yaml"
    path.write_text(textwrap.dedent(SCENARIO), encoding="utf-8")
    return path


def test_simulate_json_has_predicted_and_simulated_with_the_same_keys(tmp_path):
    args = ["simulate", str(write(tmp_path)), "--requests", "3000", "--seed", "3", "--json"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    (pool,) = out["pools"]
    assert set(pool["predicted"]) >= KEYS and set(pool["simulated"]) >= KEYS
    # The replica runs below capacity at its planned peak: arrivals and throughput agree with the plan.
    assert abs(pool["simulated"]["rate_rps"] / pool["predicted"]["rate_rps"] - 1) < 0.1
    assert pool["holds"] is True
    again = CliRunner().invoke(main, args)
    assert json.loads(again.output) == out  # same seed, same result


def test_unknown_pool_is_a_usage_error(tmp_path):
    r = CliRunner().invoke(main, ["simulate", str(write(tmp_path)), "--pool", "long"])
    assert r.exit_code == 2
    assert "not a pool of this plan" in r.output


def test_solve_verify_adds_the_table_to_the_report(tmp_path):
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["solve", str(write(tmp_path)), "--verify", "--out-dir", str(out)])
    assert r.exit_code == 0, r.output
    text = (out / "sim.md").read_text(encoding="utf-8")
    assert "## Verification by simulation" in text
    assert "| preemptions_per_1000 |" in text


def test_predicted_side_is_the_plans_own_operating_point(tmp_path):
    """The model's column is PoolDetail.at_peak, so it honours the scenario's TTFT prompt quantile (not 0.99)."""
    from planner.solve import plan_scenario
    from planner.verify import verify_plan

    text = SCENARIO.replace(
        "source: {constant: {prompt_tokens: 1000, output_tokens: 200}}",
        "source: {synthetic: {name: chat, requests: 20000, seed: 1, rate_rps: 5}}",
    ) + "slo: {ttft_prompt_quantile: 0.9}\n"
    path = tmp_path / "simq.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    plan = plan_scenario(path, explore=False)
    (pd,) = plan.pools
    (check,) = verify_plan(plan, requests=2000)
    pt = pd.at_peak
    assert (check.predicted["rate_rps"], check.predicted["resident_batch"], check.predicted["kv_utilisation"]) == (
        pt.rate_rps, pt.resident_batch, pt.kv_utilisation)
    assert (check.predicted["itl_ms_mean"], check.predicted["itl_ms_p50"]) == (pt.itl_ms, pt.step_ms)
    assert check.predicted["ttft_ms_p99"] == pt.ttft_ms  # at the p90 prompt, as the plan sized it
    assert check.predicted["rate_rps"] == pytest.approx(pd.rate_per_replica_rps)
