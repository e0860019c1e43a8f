"""Scenario schema errors (exit 2 naming the YAML path) and infeasibility (exit 3 with the reason)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from scenario_files import write_scenario

from planner.cli import main

BASE = """
name: tiny
model: llama-3.1-8b
context_limit: 8192
traffic:
  source: {constant: {prompt_tokens: 1000, output_tokens: 200}}
  peak: {method: explicit, rps: 4}
gpus: [h100-sxm]
tp: [1]
"""


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    return write_scenario(tmp_path, text, name=name)


def solve(*args):
    return CliRunner().invoke(main, ["solve", *map(str, args)])


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ("gpuz: [h100-sxm]\n", "gpuz: unknown key; did you mean 'gpus'?"),
        # a key in the other unit: the hint gives the value in the key's own (ttft_s: 2000 was 33 minutes)
        ("slo: {bands: [{ttft_ms: 2000}]}\n", "slo.bands[0].ttft_ms: unknown key; did you mean 'ttft_s'? It is in "
         "seconds: ttft_s: 2. (valid keys:"),
        ("slo: {bands: [{tpot_s: 0.05}]}\n", "slo.bands[0].tpot_s: unknown key; did you mean 'tpot_ms'? It is in "
         "milliseconds: tpot_ms: 50. (valid keys:"),
        ("slo: {bands: [{ttft_ms: {p95: 2000}}]}\n", "slo.bands[0].ttft_ms: unknown key; did you mean 'ttft_s'? It "
         "is in seconds. (valid keys:"),
        ("tp: [3]\n", "tp: tensor-parallel degree 3 must be a power of two"),
        ("split_thresholds: [10000]\n", "split_thresholds: split threshold 10000 is not a histogram edge"),
        ("sizing: {mode: p99}\n", "sizing.mode: Input should be 'worst_case', 'expected' or 'percentile'"),
        ("sizing: {mode: worst_case, quantile: 0.9}\n",
         "sizing: quantile is read only with mode: percentile (mode is worst_case)"),
        ("slo: {bands: [{tpot_ms: -5}]}\n",
         "slo.bands[0].tpot_ms: a target must be a number of milliseconds above 0 and at most 60,000 (got -5)"),
        ("slo: {bands: [{ttft_s: {p90: 5000}}]}\n",
         "slo.bands[0].ttft_s: a target must be a number of seconds above 0 and at most 3,600"),
        ("simulation: {requests: 100000000}\n",
         "simulation.requests: Input should be less than or equal to 10000000"),
        ("slo: {bands: [{ttft_s: {p98: 2}}]}\n",
         "slo.bands[0].ttft_s: write one {statistic: seconds} pair, statistic one of mean, p50, p90, p95, p99"),
        ("slo: {bands: [{prompt_below: 8192, ttft_s: 1}]}\n",
         "slo: the last band has no prompt_below (it holds the longest prompts); got 8192"),
        ("slo: {bands: [{prompt_below: 8192}, {prompt_below: 4096}, {}]}\n",
         "slo: bands must be in increasing prompt_below order (got [8192, 4096])"),
        ("slo: {bands: [{prompt_below: 8000}, {}]}\n",
         "slo.bands[0].prompt_below: prompt_below 8000 is not a prompt-length histogram edge; nearest: 6889, 8192, 9742"),
        ("slo: {itl_ms: 50}\n", "slo: 'itl_ms' (a mean inter-token latency) is no longer read: targets are per "
         "band of prompt length, at a percentile, e.g. slo: {statistic: p99, bands: [{prompt_below: 8192, ttft_s: 2.0, "
         "tpot_ms: 50}, {ttft_s: 15, tpot_ms: 50}]}"),
        ("slo: {long_context: {above_tokens: 8192, ttft_s: 15}}\n",
         "slo: 'long_context' (a TTFT target for long requests) is no longer read"),
        ("fleet: [{gpu: h100-sxm, replicas: 0}]\n", "fleet[0].replicas: Input should be greater than or equal to 1"),
        ("traffic: {source: {constant: {prompt_tokens: 10, output_tokens: 5}}, peak: {method: explicit, rps: -1}}\n",
         "traffic.peak.rps: Input should be greater than or equal to 0.000001"),
        ("traffic: {source: {}}\n", "traffic.source: give exactly one of log, histogram, synthetic, constant"),
        # (they were ignored: a preset, columns or a time unit of a source that is no log)
        ("traffic: {source: {constant: {prompt_tokens: 10, output_tokens: 5}, preset: azure}}\n",
         "traffic.source: preset is read only with a log (the source is constant)"),
        ("traffic: {source: {histogram: h.parquet, time_unit: ms}}\n",
         "traffic.source: time_unit is read only with a log (the source is histogram)"),
        ("traffic: {source: {constant: {prompt_tokens: 10, output_tokens: 5}}, headroom: 0.5}\n",
         "traffic.headroom: Input should be greater than or equal to 1"),
        ("min_replicas_per_pool: 0\n", "min_replicas_per_pool: Input should be greater than or equal to 1"),
        # no combination runs: the message says why (it said only that none does), led by the field at
        # fault where every reason is one field's (an outside probe found neither `tp` nor `weight_dtypes` named)
        ("tp: [64]\n", ": tp: no candidate config: every GPU x tp x dtype combination is unsupported for this model: "
                       "tensor-parallel degree 64 exceeds the 8 GPUs of one 'h100-sxm' node"),
        ("weight_dtypes: [fp4]\n", ": weight_dtypes: no candidate config: every GPU x tp x dtype combination is "
                                   "unsupported for this model: GPU 'h100-sxm' does not support fp4 weights"),
    ],
)
def test_schema_errors_exit_2_with_the_yaml_path(tmp_path, patch, expected):
    lines = [ln for ln in BASE.strip().splitlines() if not ln.startswith(patch.split(":")[0] + ":")]
    key = patch.split(":")[0]
    if key == "traffic":  # replace the whole traffic block
        lines = [ln for ln in lines if not ln.startswith("  ")]
        lines = [ln for ln in lines if ln != "traffic:"]
    path = write(tmp_path, "\n".join(lines) + "\n" + patch)
    r = solve(path, "--out-dir", tmp_path / "out")
    assert r.exit_code == 2, r.output
    assert expected in r.output
    assert str(path) in r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "out").exists()


def test_missing_model_is_named(tmp_path):
    path = write(tmp_path, BASE.replace("model: llama-3.1-8b\n", ""))
    r = solve(path)
    assert r.exit_code == 2
    assert "model: required field is missing" in r.output


def test_broken_yaml_names_the_line(tmp_path):
    path = write(tmp_path, "name: x\nmodel: [unclosed\n")
    r = solve(path)
    assert r.exit_code == 2
    assert "line" in r.output and "invalid YAML" in r.output


def test_unknown_gpu_and_model_suggest_the_closest(tmp_path):
    r = solve(write(tmp_path, BASE.replace("[h100-sxm]", "[h100-sxmm]")))
    assert r.exit_code == 2 and "did you mean 'h100-sxm'" in r.output
    r = solve(write(tmp_path, BASE.replace("llama-3.1-8b", "llama-3.1-8"), "m.yaml"))
    assert r.exit_code == 2 and "did you mean 'llama-3.1-8b'" in r.output


@pytest.mark.parametrize(
    ("gpus", "message"),
    [
        ("[{id: h100-sxm, prise_usd_per_hour: 2.5}]",
         "gpus[0].prise_usd_per_hour: unknown key; did you mean 'price_usd_per_hour'? "
         "(valid keys: id, max_gpus, price_usd_per_hour)"),
        ("[{idd: h100-sxm}]", "gpus[0].idd: unknown key; did you mean 'id'? (valid keys: id, max_gpus, price_usd_per_hour)"),
        ("[h100-sxm, 3]", "gpus[1]: expected a string or a mapping with keys id, max_gpus, price_usd_per_hour (got 3)"),
        ("[[h100-sxm]]", "gpus[0]: expected a string or a mapping with keys id, max_gpus, price_usd_per_hour (got a list)"),
    ],
)
def test_a_gpus_entry_that_is_neither_a_name_nor_a_candidate_gets_one_line(tmp_path, gpus, message):
    """`gpus:` holds names or mappings: pydantic fails a bad entry once per member of the union
    ('str', 'GPUCandidate'); the line names the entry, never a member, and a typo gets a 'did
    you mean' even where the key it misspells is required."""
    path = write(tmp_path, BASE.replace("gpus: [h100-sxm]", f"gpus: {gpus}"))
    r = solve(path, "--out-dir", tmp_path / "out")
    assert r.exit_code == 2
    assert r.stderr == f"error: {path}: {message}\n"
    assert not (tmp_path / "out").exists()


def test_missing_scenario_file(tmp_path):
    r = solve(tmp_path / "nope.yaml")
    assert r.exit_code == 2 and "file not found" in r.output


def test_a_tpot_target_no_config_meets_names_the_fastest_candidate_and_its_floor(tmp_path):
    """A TPOT target in seconds (0.06 for 60 ms) is met by no config even empty. Every candidate
    tied at no TTFT floor, and the error named the first by tp and label (h200 tp2 w:bf16), not
    the fastest, with no value beside the target."""
    text = BASE.replace("gpus: [h100-sxm]\ntp: [1]", "gpus: [l40s, h100-sxm, h200]\ntp: [1, 2]") + (
        "slo: {bands: [{ttft_s: 2, tpot_ms: 0.06}]}\n")
    r = solve(write(tmp_path, text), "--no-report")
    assert r.exit_code == 3, r.output
    named = ("the best candidate, h100-sxm tp2 w:fp8 kv:fp8 ctx:8192, is stopped by tpot: band 'every prompt': "
             "TPOT p99 ≤ 0.06 ms is below the floor of ")
    assert named in r.output
    floor_ms = float(r.output.split(named)[1].split(" ms")[0])
    # each other candidate's floor, from `planner capacity`, is higher
    for gpu, tp, dtype in [("h100-sxm", 1, "fp8"), ("h200", 2, "fp8"), ("h200", 2, "bf16"), ("l40s", 2, "fp8")]:
        other = CliRunner().invoke(main, ["capacity", "llama-3.1-8b", gpu, "--tp", str(tp), "--weight-dtype", dtype,
                                          "--kv-dtype", dtype, "--context-limit", "8192", "--prompt-tokens", "1000",
                                          "--output-tokens", "200", "--tpot-ms", "0.06"])
        assert other.exit_code == 0, other.output
        assert float(other.output.split("is below the floor of ")[1].split(" ms")[0]) > floor_ms, (gpu, tp, dtype)


def test_unreachable_ttft_target_exits_3_naming_band_target_and_floor(tmp_path):
    text = BASE.replace("context_limit: 8192", "context_limit: 131072").replace(
        "{constant: {prompt_tokens: 1000, output_tokens: 200}}", "{constant: {prompt_tokens: 120000, output_tokens: 200}}"
    ) + "slo: {bands: [{name: chat, prompt_below: 8192, ttft_s: 2}, {name: documents, ttft_s: 3}]}\nweight_dtypes: [bf16]\n"
    out = tmp_path / "out"
    r = solve(write(tmp_path, text), "--out-dir", out)
    assert r.exit_code == 3, r.output
    assert "cannot be served" in r.output
    assert "band 'documents': TTFT p99 ≤ 3 s is below the floor of" in r.output
    assert "(the p99 of the band's prefill time alone, with no queueing)" in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert not out.exists()


CAPPED_TWO_TYPES = """\
name: capped
model: llama-3.1-8b
context_limit: 16384
traffic:
  source:
    synthetic: {name: chat, requests: 20000, seed: 21, rate_rps: 60}
  peak: {method: quantile, quantile: 0.99}
slo: {bands: [{ttft_s: 2.0, tpot_ms: 50}]}
gpus: [{id: h100-sxm, max_gpus: 2}, {id: l40s, max_gpus: 5}]
tp: [1]
weight_dtypes: [fp8]
kv_dtypes: [fp8]
split_thresholds: []
verify: false
"""


def test_caps_that_one_config_per_pool_cannot_meet_name_homogeneous_pools(tmp_path):
    """(An outside probe: "the caps leave no fleet" read as a reason to buy GPUs, where a pool mixing the two
    capped types covers the load.)"""
    from planner.inputs import load_inputs
    from planner.plan_objects import traffic_classes
    from planner.plan_setup import served_traffic

    out = tmp_path / "out"
    path = write(tmp_path, CAPPED_TWO_TYPES)
    inputs = load_inputs(path)
    scn = inputs.scenario
    limit, served, peak = served_traffic(scn, inputs.model, inputs.traffic.hist, inputs.traffic.peak_rps,
                                         scn.context_limit)
    [every] = traffic_classes(scn, served, limit, peak)["none"]
    r = solve(path, "--out-dir", out)
    assert r.exit_code == 3, r.output
    assert r.output.strip().endswith(f"leave no fleet that covers every class at once ('{every.label}' "
                                     f"{every.rate_rps:,.4g} req/s); a pool runs one config (homogeneous_pools: true): "
                                     "homogeneous_pools: false lets a class's pool mix the capped GPU types"), r.output
    assert not out.exists()
    r = solve(write(tmp_path, CAPPED_TWO_TYPES + "homogeneous_pools: false\n"), "--no-report")
    assert r.exit_code == 0, r.output
    assert "h100-sxm" in r.output and "l40s" in r.output


def test_solve_json_has_the_contract_keys(tmp_path):
    r = solve(write(tmp_path, BASE), "--json", "--no-report")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    for key in ("plan", "cost_usd_per_hour", "cost_usd_per_million_tokens", "split_threshold", "solver_status", "candidates"):
        assert key in out
    pool = out["plan"][0]
    for key in ("gpu", "tp", "weight_dtype", "kv_dtype", "context_limit", "replicas", "gpus", "capacity_rps",
                "rate_rps", "cost_usd_per_hour"):
        assert key in pool
    # The plan can be checked from the candidates alone: replicas cover the rate.
    assert pool["replicas"] * pool["capacity_rps"] >= pool["rate_rps"]
    assert out["split_threshold"] is None
    assert out["solver_status"] == "Optimal"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("lower_context_limit: 5000\n", "lower_context_limit: context limit 5000 is not a histogram edge; nearest"),
    ],
)
def test_total_length_cuts_must_be_histogram_edges(tmp_path, extra, expected):
    r = solve(write(tmp_path, BASE + extra))
    assert r.exit_code == 2, r.output
    assert expected in r.output


def test_context_limit_must_be_a_histogram_edge(tmp_path):
    r = solve(write(tmp_path, BASE.replace("context_limit: 8192", "context_limit: 10000")))
    assert r.exit_code == 2
    assert "context_limit: context limit 10000 is not a histogram edge; nearest: 6144, 8192, 12288" in r.output


def test_shared_prefix_must_be_below_the_limit(tmp_path):
    text = BASE.replace("  peak: {method: explicit, rps: 4}", "  peak: {method: explicit, rps: 4}\n  shared_prefix_tokens: 9000")
    r = solve(write(tmp_path, text))
    assert r.exit_code == 2
    assert "shared_prefix_tokens 9000 must be below the context limit 8192" in r.output


def test_traffic_errors_name_the_scenario_and_the_section(tmp_path):
    text = BASE.replace("{method: explicit, rps: 4}", "{method: quantile}")
    path = write(tmp_path, text)
    r = solve(path)
    assert r.exit_code == 2
    assert f"{path}: traffic: peak-rate method 'quantile' needs arrival times" in r.output


def test_requests_above_the_limit_are_not_planned_for(tmp_path):
    """Half the requests exceed the limit: the rate to cover is the served half's."""
    log = tmp_path / "log.csv"
    rows = ["prompt_tokens,output_tokens"] + ["1000,200"] * 50 + ["9000,200"] * 50
    log.write_text("\n".join(rows) + "\n", encoding="utf-8")
    text = BASE.replace("{constant: {prompt_tokens: 1000, output_tokens: 200}}", "{log: log.csv}")
    r = solve(write(tmp_path, text), "--json", "--no-report")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["peak_rps"] == pytest.approx(2.0)
    assert out["plan"][0]["rate_rps"] == pytest.approx(2.0 * 1.2)
    # the JSON says so, as the report's decision does
    assert (out["context_limit"], out["rejected_requests"], out["rejected_share"]) == (8192, 50, 0.5)


def test_write_lp_prints_the_model_with_named_constraints(tmp_path):
    lp = tmp_path / "model.lp"
    r = solve(write(tmp_path, BASE), "--no-report", "--write-lp", lp)
    assert r.exit_code == 0, r.output
    text = lp.read_text(encoding="utf-8")
    assert text.startswith("\\ planner's fleet ILP, its cost stage") and "\n\\* fleet *\\\n" in text
    for name in ("cost_per_hour:", "one_split:", "cover_none_all:", "replicas_if_pool_none_all_h100_sxm_tp1"):
        assert name in text


def test_write_lp_with_two_scenarios_writes_the_first_scenarios_model(tmp_path):
    lp = tmp_path / "model.lp"
    first = write(tmp_path, BASE, "first.yaml")
    second = write(tmp_path, BASE.replace("name: tiny", "name: other").replace("gpus: [h100-sxm]", "gpus: [l40s]"),
                   "second.yaml")
    r = solve(first, second, "--no-report", "--write-lp", lp)
    assert r.exit_code == 0, r.output
    assert "l40s" in r.output  # the second scenario was solved
    text = lp.read_text(encoding="utf-8")
    assert "replicas_if_pool_none_all_h100_sxm_tp1" in text
    assert "l40s" not in text
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".model.lp")] == []  # no temporary file left


def test_write_lp_that_cannot_be_written_exits_2_with_one_line(tmp_path):
    lp = tmp_path / ("x" * 300 + ".lp")  # a name longer than the filesystem allows
    r = solve(write(tmp_path, BASE), "--no-report", "--write-lp", lp)
    assert r.exit_code == 2, r.output
    assert "cannot write: the file name is too long" in r.output and "Traceback" not in r.output


def test_the_model_predicts_the_same_numbers_with_certification_on_or_off(tmp_path):
    """Without simulation the report and --json predict each pool at the rate certification replays it
    at (peak × headroom a replica), not at the bare peak: the same predictions either way, the rate named."""
    text = BASE + "slo: {bands: [{ttft_s: 2, tpot_ms: 60}]}\nsimulation: {requests: 1000}\n"
    path = write(tmp_path, text)
    runs = {}
    for flag in ("--verify", "--no-verify"):
        r = solve(path, flag, "--json", "--out-dir", tmp_path / flag)
        assert r.exit_code == 0, r.output
        [pool] = json.loads(r.output)["plan"]
        runs[flag] = pool
    certified, modelled = runs["--verify"], runs["--no-verify"]
    assert certified["replay_rps_per_replica"] == modelled["replay_rps_per_replica"] > modelled["rate_per_replica_rps"]
    [band_c], [band_m] = certified["bands"], modelled["bands"]
    assert (band_m["judged_by"], band_c["judged_by"]) == ("model", "simulation")
    for key in ("ttft_s", "tpot_ms"):
        assert band_m[key]["predicted"] == band_c[key]["predicted"]
    report = (tmp_path / "--no-verify" / "tiny.md").read_text()
    assert f", {modelled['replay_rps_per_replica']:,.3f} requests/s a replica:" in report
    assert "| Band | Target | Predicted | Verdict |" in report and "Requests measured" not in report
    ttft = band_m["ttft_s"]["predicted"]
    assert f"| every prompt | TTFT p99 ≤ 2.00 s | {ttft:.2f} s | holds (model) |" in report


def test_a_stated_mean_rate_prices_a_token_at_the_day_s_volume_in_the_report(tmp_path):
    """traffic.mean_rps is finance's mean load: a flat day at it. The decision prices a token at the
    peak rate; the report gave no price at the day's volume, which a flat profile left out, 2.5x
    the decision's on chat_8b_h100 (12 of 30 requests/s)."""
    path = write(tmp_path, BASE.replace("rps: 4}", "rps: 4}\n  mean_rps: 1") + "verify: false\n")
    r = solve(path, "--json", "--out-dir", tmp_path / "out")
    assert r.exit_code == 0, r.output
    cost = json.loads(r.output)["cost_usd_per_hour"]
    report = (tmp_path / "out" / "tiny.md").read_text()
    day_tokens = 1 * 86_400 * (1000 + 200)
    assert "## The day's load curve" in report
    assert (f"The day's volume: {day_tokens:,.0f} tokens (1.00 requests/s on average: the busiest hour's mean rate, "
            "1 requests/s (traffic.mean_rps), × 1 (the period's mean ÷ its busiest hour's)).") in report
    assert (f"| peak-sized fleet all day, on demand | ${cost * 24:,.2f} | ${cost * 730:,.2f} | "
            f"{24 * json.loads(r.output)['gpus']:.1f} | ${cost * 24 / day_tokens * 1e6:.4f} | — |") in report
    # without it, the source's mean is the peak's: no day to price
    path.write_text(path.read_text().replace("\n  mean_rps: 1", ""))
    assert solve(path, "--out-dir", tmp_path / "out2").exit_code == 0
    assert "## The day's load curve" not in (tmp_path / "out2" / "tiny.md").read_text()


def test_no_candidate_names_a_field_only_where_every_reason_is_that_field_s(tmp_path):
    """Two fields at fault, so neither leads the message (either alone would read as the one to
    change): fp4 weights stop the H100 and tp 16 the B200 (which runs fp4, on 8 GPUs a node); and both
    stop the H100 alone, whose message gives the first. Nor does a field lead where verified_only
    left a GPU out (the B300, which runs fp4, has no measured factors)."""
    for gpus, verified_only in (("[h100-sxm, b200]", False), ("[h100-sxm]", False), ("[h100-sxm, b300]", True)):
        tp = "[1]" if verified_only else "[16]"
        path = write(tmp_path, BASE.replace("tp: [1]", f"tp: {tp}").replace("gpus: [h100-sxm]", f"gpus: {gpus}")
                     + "weight_dtypes: [fp4]\n" + ("verified_only: true\n" if verified_only else ""))
        r = solve(path, "--out-dir", tmp_path / "out")
        assert r.exit_code == 2, r.output
        assert r.output.startswith(f"error: {path}: no candidate config: every GPU x tp x dtype combination is "
                                   "unsupported for this model: GPU 'h100-sxm' does not support fp4 weights"), r.output
