"""Certification by simulation: `planner simulate`, `solve --verify`, per-band verdicts, re-planning, given fleets."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from scenario_files import write_scenario

from planner.cli import main

ROOT = Path(__file__).resolve().parent.parent

SCENARIO = """
name: sim
model: llama-3.1-8b
context_limit: 8192
traffic:
  source: {constant: {prompt_tokens: 1000, output_tokens: 200}}
  peak: {method: explicit, rps: 6}
slo: {bands: [{ttft_s: 1.0, tpot_ms: 60}]}
gpus: [h100-sxm]
tp: [1]
weight_dtypes: [bf16]
kv_dtypes: [bf16]
sizing: {mode: expected}
simulation: {requests: 3000}
"""

KEYS = {"rate_rps", "resident_batch", "kv_utilisation", "itl_ms_mean", "itl_ms_p99", "preemptions_per_1000"}
BAND_KEYS = {"band", "requests", "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p90",
             "tpot_ms_p99", "itl_ms_p99", "attainment", "holds"}


def write(tmp_path, text=SCENARIO, name="sim.yaml"):
    return write_scenario(tmp_path, text, name=name)


def test_simulate_json_has_band_percentiles_and_the_verdict(tmp_path):
    args = ["simulate", str(write(tmp_path)), "--requests", "3000", "--seed", "3", "--json"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["certified"] is True
    (pool,) = out["pools"]
    assert set(pool["predicted"]) == KEYS and set(pool["simulated"]) == KEYS
    (band,) = pool["bands"]
    assert set(band) == BAND_KEYS
    assert band["ttft_ms_p50"] <= band["ttft_ms_p90"] <= band["ttft_ms_p99"] <= 1000
    assert band["tpot_ms_p99"] <= 60 and band["holds"] is True and band["attainment"] > 0.99
    (target,) = pool["targets"]
    assert target["ttft_s"]["stat"] == "p99" and target["ttft_s"]["target"] == 1.0
    assert target["ttft_s"]["simulated"] == pytest.approx(band["ttft_ms_p99"] / 1e3)
    # The replica runs below capacity at its planned peak: arrivals agree with the plan.
    assert abs(pool["simulated"]["rate_rps"] / pool["predicted"]["rate_rps"] - 1) < 0.1
    again = CliRunner().invoke(main, args)
    assert json.loads(again.output) == out  # same seed, same result


def test_an_itl_target_s_verdict_is_json_in_simulate_and_solve(tmp_path):
    """The per-token gap's simulated percentile came out a numpy float, its undecided flag a numpy
    bool, and --json stopped on it with a traceback (no shipped scenario has an ITL target)."""
    path = write(tmp_path, SCENARIO.replace("tpot_ms: 60}", "tpot_ms: 60, itl_ms: 200}"))
    r = CliRunner().invoke(main, ["simulate", str(path), "--requests", "3000", "--seed", "3", "--json"])
    assert r.exit_code == 0, r.output
    (target,) = json.loads(r.output)["pools"][0]["targets"]
    assert target["itl_ms"]["undecided"] is False and target["itl_ms"]["simulated"] > 0
    r = CliRunner().invoke(main, ["solve", str(path), "--no-report", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["certified"] is True


def test_a_plan_is_replayed_at_the_rate_it_covers_with_headroom_and_a_given_fleet_at_its_peak(tmp_path):
    """A plan sized for peak × headroom is certified at that rate per replica, so the headroom a
    report states is there in simulation (the model put capacity 3-14% above the simulator's in the
    shipped plans, which a replay at the bare peak hid); a stated fleet is audited at the peak."""
    text = SCENARIO.replace("peak: {method: explicit, rps: 6}", "peak: {method: explicit, rps: 6}\n  headroom: 1.5")
    r = CliRunner().invoke(main, ["solve", str(write(tmp_path, text)), "--no-report", "--json"])
    assert r.exit_code == 0, r.output
    (pool,) = json.loads(r.output)["plan"]
    assert pool["rate_rps"] == pytest.approx(9.0) and pool["rate_per_replica_rps"] == pytest.approx(6.0 / pool["replicas"])
    assert pool["replay_rps_per_replica"] == pytest.approx(9.0 / pool["replicas"])
    sim = CliRunner().invoke(main, ["simulate", str(write(tmp_path, text)), "--json"])
    (checked,) = json.loads(sim.output)["pools"]
    assert checked["rate_per_replica_rps"] == pytest.approx(9.0 / pool["replicas"])
    assert checked["predicted"]["rate_rps"] == pytest.approx(9.0 / pool["replicas"], rel=0.02)  # the model at that rate
    given = text + f"fleet: [{{gpu: h100-sxm, replicas: {pool['replicas']}}}]\n"
    sim = CliRunner().invoke(main, ["simulate", str(write(tmp_path, given)), "--json"])
    (checked,) = json.loads(sim.output)["pools"]
    assert checked["rate_per_replica_rps"] == pytest.approx(6.0 / pool["replicas"])


def test_simulate_shows_the_certification_s_runs_and_replays_the_reported_plan_at_another_seed(tmp_path):
    """Without --requests and --seed, simulate shows the runs the report's verdict rests on; a seed
    given replays the plan the report shows (it does not plan again with that seed)."""
    # (at the default simulation settings a run samples fewer requests than simulation.requests, the cap)
    path = str(write(tmp_path, SCENARIO.replace("simulation: {requests: 3000}\n", "")))
    solved = json.loads(CliRunner().invoke(main, ["solve", path, "--json", "--no-report"]).output)
    (planned,) = solved["plan"]
    (band,) = planned["bands"]
    (shown,) = json.loads(CliRunner().invoke(main, ["simulate", path, "--json"]).output)["pools"]
    config = "h100-sxm tp1 w:bf16 kv:bf16 ctx:8192"
    assert (shown["config"], shown["replicas"], shown["runs"]) == (config, planned["replicas"], planned["simulation_runs"])
    assert shown["targets"][0]["tpot_ms"]["simulated"] == band["tpot_ms"]["simulated"]
    assert shown["bands"][0]["requests"] == band["requests_simulated"]
    (replayed,) = json.loads(CliRunner().invoke(main, ["simulate", path, "--seed", "9", "--json"]).output)["pools"]
    assert (replayed["config"], replayed["replicas"]) == (config, planned["replicas"])
    assert replayed["seeds"][0] == 9 and replayed["requests_per_run"] == shown["requests_per_run"]
    assert replayed["targets"][0]["tpot_ms"]["simulated"] != band["tpot_ms"]["simulated"]


def test_simulate_prints_each_target_beside_the_model_s_prediction_and_the_simulated_value(tmp_path):
    """The command's text gave the simulated percentiles and a verdict, while its help and the README
    promised the targets beside the model's prediction (only --json had them): each target now has a
    line of its own, with the values --json gives."""
    path = str(write(tmp_path))
    text = CliRunner().invoke(main, ["simulate", path])
    assert text.exit_code == 0, text.output
    (pool,) = json.loads(CliRunner().invoke(main, ["simulate", path, "--json"]).output)["pools"]
    (band,) = pool["targets"]
    ttft, tpot = band["ttft_s"], band["tpot_ms"]
    lines = [line.strip() for line in text.output.splitlines() if line.startswith("    ")]
    assert lines == [
        f"TTFT {ttft['stat']} ≤ {ttft['target']:.2f} s: predicted {ttft['predicted']:.2f} s, simulated "
        f"{ttft['simulated']:.2f} s: {'holds' if ttft['simulated'] <= ttft['target'] else 'misses'}",
        f"TPOT {tpot['stat']} ≤ {tpot['target']:.1f} ms: predicted {tpot['predicted']:.1f} ms, simulated "
        f"{tpot['simulated']:.1f} ms: {'holds' if tpot['simulated'] <= tpot['target'] else 'misses'}",
    ]


def test_unknown_pool_is_a_usage_error(tmp_path):
    r = CliRunner().invoke(main, ["simulate", str(write(tmp_path)), "--pool", "long"])
    assert r.exit_code == 2
    assert "not a pool of this plan" in r.output


def _azure_log_scenario(tmp_path, rows: int, *, requests: int):
    """A scenario of one H100 pool certified on the Azure sample's first `rows` requests, with their
    timestamps (each pool also replayed with the log's own arrivals); its path."""
    lines = (ROOT / "data" / "samples" / "azure_conv_2023_sample.csv").read_text(encoding="utf-8").splitlines()
    (tmp_path / "log.csv").write_text("\n".join(lines[:rows + 1]) + "\n", encoding="utf-8")
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\nmodel: llama-3.1-8b\ncontext_limit: 8192\n"
        "traffic: {source: {log: log.csv, preset: azure}, peak: {method: quantile, quantile: 0.99}}\n"
        "slo: {statistic: p99, bands: [{ttft_s: 2.0, tpot_ms: 50}]}\n"
        "gpus: [h100-sxm]\ntp: [1]\nweight_dtypes: [fp8]\nkv_dtypes: [fp8]\nsplit_thresholds: []\n"
        f"simulation: {{requests: {requests}, band_requests: 1000}}\n", encoding="utf-8")
    return path


def test_simulate_shows_the_replay_of_the_log_s_own_arrivals_that_certification_judges(tmp_path):
    """A timestamped log's pool is also replayed with the log's own arrivals, and that verdict counts
    in the pool's: `planner simulate` prints it and --json gives it (log_replay), as solve's does."""
    path = _azure_log_scenario(tmp_path, 3000, requests=2000)
    r = CliRunner().invoke(main, ["simulate", str(path), "--json"])
    assert r.exit_code == 0, r.output
    (pool,) = json.loads(r.output)["pools"]
    replay = pool["log_replay"]
    assert replay["requests"] > 0 and replay["span_s"] > 0 and replay["targets"][0]["band"] == pool["targets"][0]["band"]
    assert pool["holds"] and replay["holds"] and not pool["problems"]  # certified: both verdicts hold
    solved = CliRunner().invoke(main, ["solve", str(path), "--json", "--no-report"])
    assert solved.exit_code == 0, solved.output
    assert json.loads(solved.output)["plan"][0]["log_replay"] == replay
    text = CliRunner().invoke(main, ["simulate", str(path)])
    assert text.exit_code == 0, text.output
    line = next(x for x in text.output.splitlines() if "the log's own arrivals" in x)
    mean = replay["requests"] / replay["span_s"]  # one replica: the log's whole rate
    shown = (f"({replay['requests']:,} requests over {replay['span_s'] / 60:,.1f} minutes, dealt in turn to the pool's "
             f"1 replica: {mean:,.3f} requests/s a replica on average, ")
    assert shown in line and " its sampled runs replay): " in line
    assert line.endswith("every target holds") == replay["holds"]


def test_a_pool_dealt_none_of_the_log_says_so_beside_a_pool_replayed_with_it(tmp_path):
    """A class's pools are dealt the log by their parts of its rate: a small part of a class with few
    logged requests can get none, and its replay is the sampled runs' alone. The report says so where a
    sibling's log replay would be, rather than leaving the pool without a word of the log."""
    import dataclasses

    from planner.inputs import load_inputs, plan_inputs
    from planner.report_latency import NOT_DEALT_TEXT, latency_section

    plan = plan_inputs(load_inputs(_azure_log_scenario(tmp_path, 1000, requests=1000)), explore=False, certify=True)
    (pool,) = plan.pools
    assert pool.check.replay is not None and NOT_DEALT_TEXT not in latency_section(plan)
    # a plan whose log was replayed does not say no log was; one none of whose pools was replayed does
    untested = "Every run has Poisson arrivals at the pool's rate, and no log's own arrivals were replayed"
    assert untested not in latency_section(plan)
    none_dealt = dataclasses.replace(pool, check=dataclasses.replace(pool.check, replay=None))
    assert (f"{untested} (a log is replayed where it has timestamps finer than whole minutes and at most 200,000 "
            "requests, each pool its part)") in latency_section(dataclasses.replace(plan, pools=[none_dealt]))
    dealt_none = dataclasses.replace(pool, check=dataclasses.replace(pool.check, replay=None))
    text = latency_section(dataclasses.replace(plan, pools=[pool, dealt_none]))
    assert text.count("Replayed with the log's own arrivals") == 1
    assert text.count(f"Not replayed with {NOT_DEALT_TEXT}.") == 1
    assert text.index("Replayed with the log's own") < text.index(f"Not replayed with {NOT_DEALT_TEXT}")


def test_a_stated_split_s_few_requests_of_a_band_are_said_with_the_fleet_not_under_other_plans(tmp_path):
    """The shipped 128k rollout as a stated fleet split at 8,192: its long pool serves 45 requests of
    the short band and is held to that band's targets, which can be why the fleet misses. The note
    saying so is about the fleet's own split: it stands under the fleet, before its latencies, not
    in the section on the plans the report does not explore."""
    text = (ROOT / "scenarios" / "128k_rollout.yaml").read_text(encoding="utf-8")
    path = tmp_path / "128k_rollout.yaml"
    path.write_text(text + "fleet:\n"
                    "  - {gpu: h100-sxm, tp: 2, weight_dtype: bf16, kv_dtype: bf16, replicas: 2, context_limit: 8192}\n"
                    "  - {gpu: h100-sxm, tp: 2, weight_dtype: bf16, kv_dtype: fp8, replicas: 11}\n", encoding="utf-8")
    r = CliRunner().invoke(main, ["solve", str(path), "--no-verify", "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    report = (tmp_path / "out" / "128k_rollout.md").read_text(encoding="utf-8")
    note = report.index("Every pool is held to the targets of every band it serves")
    assert report.index("## The fleet as given") < note < report.index("## Latency targets") < report.index("## Other plans")
    # the same note the shipped report's split analysis gives for that split (its 45 short-band requests)
    shipped = (ROOT / "reports" / "128k_rollout.md").read_text(encoding="utf-8")
    assert next(line for line in shipped.splitlines() if line.startswith("- split at 8,192 tokens: its pool long")) in report
    assert report.count("Every pool is held to the targets of every band it serves") == 1


def test_a_stated_split_fleet_s_pool_dealt_none_of_the_log_says_so_in_the_report_and_simulate(tmp_path):
    """End to end: a stated split whose long class (10 of the log's 200 requests) runs on 6 H100s
    and one L40S, whose part of the class's rate comes to none of them. The report and `planner
    simulate` say it was not replayed with the log; --json's log_replay is null. The report names
    that one-replica pool by its GPU (its class has two pools) and says the fleet's split routes the
    requests."""
    from planner.report_latency import NOT_DEALT_TEXT

    lines = (ROOT / "data" / "samples" / "azure_conv_2023_sample.csv").read_text(encoding="utf-8").splitlines()
    (tmp_path / "log.csv").write_text("\n".join(lines[:201]) + "\n", encoding="utf-8")
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\nmodel: llama-3.1-8b\ncontext_limit: 8192\n"
        "traffic: {source: {log: log.csv, preset: azure}, peak: {method: explicit, rps: 4}}\n"
        "slo: {statistic: p99, bands: [{ttft_s: 2.0, tpot_ms: 50}]}\n"
        "gpus: [h100-sxm, l40s]\ntp: [1]\nweight_dtypes: [fp8]\nkv_dtypes: [fp8]\nsplit_thresholds: [4096]\n"
        "simulation: {requests: 2000, band_requests: 1000}\n"
        "fleet:\n"
        "  - {gpu: h100-sxm, tp: 1, weight_dtype: fp8, kv_dtype: fp8, replicas: 2, context_limit: 4096}\n"
        "  - {gpu: h100-sxm, tp: 1, weight_dtype: fp8, kv_dtype: fp8, replicas: 6}\n"
        "  - {gpu: l40s, tp: 1, weight_dtype: fp8, kv_dtype: fp8, replicas: 1}\n", encoding="utf-8")
    r = CliRunner().invoke(main, ["solve", str(path), "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    report = (tmp_path / "out" / "s.md").read_text(encoding="utf-8")
    assert report.count("Replayed with the log's own arrivals") == 2
    assert report.count(f"Not replayed with {NOT_DEALT_TEXT}.") == 1
    assert "**Pool long on l40s tp1 runs one replica**" in report
    assert "- Split routing: the fleet sends a request to the pool whose context limit" in report
    text = CliRunner().invoke(main, ["simulate", str(path)])
    assert text.exit_code == 0, text.output
    assert text.output.count(f"  not replayed with {NOT_DEALT_TEXT}") == 1
    # each replay's targets with the report's verdicts: 10 requests' p99 is said to be about their largest
    assert ("    every prompt, 10 requests: TTFT p99 ≤ 2.00 s: simulated " in text.output
            and "holds, on few requests (the p99 of 10 is about their largest)" in text.output)
    pools = json.loads(CliRunner().invoke(main, ["simulate", str(path), "--json"]).output)["pools"]
    assert [p["log_replay"] is None for p in pools] == [False, False, True]


def test_a_pool_that_misses_only_under_the_log_s_arrivals_names_that_miss():
    """A pool whose runs hold but whose log replay misses: its misses name the replay's problems (the
    report's, --json's and simulate's "misses:" had been empty), and the replay's own line says so."""
    from types import SimpleNamespace

    from planner.pool_check import PoolCheck
    from planner.report_latency import replay_text

    replay = SimpleNamespace(requests=1200, span_s=600.0, holds=False,
                             problems=("all: TPOT p99 61.2 ms > 50 ms", "replica 2: the queue grows"))
    check = SimpleNamespace(problems=(), replay=replay, replicas=2, rate_rps=1.25)
    assert PoolCheck.misses.fget(check) == ("the log's own arrivals: all: TPOT p99 61.2 ms > 50 ms",
                                            "the log's own arrivals: replica 2: the queue grows")
    # 1,200 requests in 600 s over 2 replicas: 1 request/s each, against the 1.25 its sampled runs replay
    assert replay_text(check, 1.5) == (
        "the log's own arrivals (1,200 requests over 10.0 minutes, its time compressed × 1.5 for the scenario's "
        "growth, dealt in turn to the pool's 2 replicas: 1.000 requests/s a replica on average, 80% of the 1.250 "
        "its sampled runs replay): misses: all: TPOT p99 61.2 ms > 50 ms; replica 2: the queue grows")
    # a log of one instant (a stated fleet's one request) has no rate to compare
    instant = SimpleNamespace(problems=(), replay=SimpleNamespace(requests=1, span_s=0.0, holds=True, problems=()),
                              replicas=9, rate_rps=2.0)
    assert replay_text(instant, 1.0) == ("the log's own arrivals (1 request over 0.0 minutes, dealt in turn to the "
                                         "pool's 9 replicas): every target holds")
    assert PoolCheck.misses.fget(SimpleNamespace(problems=("x",), replay=None)) == ("x",)


def test_solve_reports_target_predicted_and_simulated_per_band(tmp_path):
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["solve", str(write(tmp_path)), "--out-dir", str(out)])
    assert r.exit_code == 0, r.output
    text = (out / "sim.md").read_text(encoding="utf-8")
    assert "## Latency targets, certified by simulation" in text
    assert "Certified by simulation: every pool meets every band's targets" in text
    # 3,000 sampled (the scenario's most), the first 300 the warm-up, and those arriving within the
    # replica's settling time of the last arrival not measured either
    (measured,) = set(re.findall(r"\| every prompt \| ([\d,]+) \| TTFT p99 ≤ 1.00 s \|", text))
    assert 2_500 < int(measured.replace(",", "")) < 2_700
    assert "| preemptions_per_1000 |" in text


def test_solve_json_carries_bands_and_the_verdict(tmp_path):
    r = CliRunner().invoke(main, ["solve", str(write(tmp_path)), "--json", "--no-report"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["certified"] is True and out["certification_rounds"] == 0
    (band,) = out["plan"][0]["bands"]
    assert set(band) == {"band", "requests_simulated", "ttft_s", "tpot_ms", "holds", "judged_by"}
    assert band["judged_by"] == "simulation"
    assert set(band["tpot_ms"]) == {"stat", "target", "predicted", "simulated", "simulated_standard_error",
                                    "undecided"}
    assert band["tpot_ms"]["target"] == 60
    pool = out["plan"][0]
    assert pool["simulation_runs"] in (1, 4, 8, 12, 16) and pool["holds"] is True
    # one run has no spread to estimate a standard error from; pooled runs do
    assert (band["tpot_ms"]["simulated_standard_error"] is None) == (pool["simulation_runs"] == 1)


def test_a_pool_that_misses_in_simulation_is_replanned_at_its_simulated_capacity(catalog, tmp_path):
    """Make the model optimistic (its capacity scaled up) so the first plan misses in simulation:
    certification must measure the simulated capacity, re-plan with it, and end certified."""
    from planner.certification import pool_setting
    from planner.evaluator import Evaluator
    from planner.histogram import Histogram
    from planner.planning import make_plan
    from planner.pool_check import check_pool
    from planner.scenario import Scenario

    scn = Scenario.model_validate({
        "name": "opt", "model": "llama-3.1-8b", "context_limit": 8192,
        "traffic": {"source": {"constant": {"prompt_tokens": 1000, "output_tokens": 200}},
                    "peak": {"method": "explicit", "rps": 40}, "headroom": 1.0},
        "slo": {"bands": [{"tpot_ms": 40}]}, "gpus": ["h100-sxm"], "tp": [1], "weight_dtypes": ["bf16"],
        "kv_dtypes": ["bf16"], "sizing": {"mode": "expected"}, "simulation": {"requests": 3000},
    })
    original = Evaluator._model_evaluation

    def optimistic(self, key, cfg, tc, **kw):
        import dataclasses

        e = original(self, key, cfg, tc, **kw)
        return dataclasses.replace(e, capacity=dataclasses.replace(e.capacity, max_rps=e.capacity.max_rps * 1.6))

    Evaluator._model_evaluation = optimistic
    try:
        plan = make_plan(scn, catalog, catalog.model("llama-3.1-8b"), Histogram.constant(1000, 200, 100), 40.0,
                         explore=False, keep_lp=True)
    finally:
        Evaluator._model_evaluation = original
    cert = plan.certification
    assert cert.certified and cert.rounds >= 1
    # --write-lp's text is the model the re-planned plan was solved with: a re-plan's solution kept none,
    # and the file was written empty (a second reading); HiGHS reads it to the plan's cost
    import highspy

    lp = tmp_path / "replanned.lp"
    lp.write_text(plan.solution.lp_text, encoding="utf-8")
    highs = highspy.Highs()
    highs.setOptionValue("output_flag", False)
    assert highs.readModel(str(lp)) == highspy.HighsStatus.kOk
    highs.run()
    assert highs.getInfo().objective_function_value == pytest.approx(plan.cost_per_hour)
    assert "missed" in cert.changes[0] and "TPOT p99" in cert.changes[0]
    (pd,) = plan.pools
    assert pd.planned_rps < pd.capacity.max_rps  # planned at the simulated capacity, below the (inflated) model's
    assert pd.check.holds
    again = check_pool(pool_setting(pd, scn, plan.pools, None), scn.slo.to_slo(), requests=3000, seed=0)
    assert again.holds


def test_uncertifiable_plan_exits_3_and_writes_nothing(tmp_path):
    """With no re-plan allowed, a plan the model gets wrong cannot be certified: exit 3, no report."""
    text = SCENARIO.replace("simulation: {requests: 3000}", "simulation: {requests: 3000, max_rounds: 1}").replace(
        "tpot_ms: 60", "tpot_ms: 60, itl_ms: 1")  # no step is 1 ms: no rate holds the per-token gap
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["solve", str(write(tmp_path, text)), "--out-dir", str(out)])
    assert r.exit_code == 3, r.output
    assert len(r.output.strip().splitlines()) == 1
    assert not out.exists()


def test_a_given_fleet_is_checked_and_reported_beside_the_cheapest_plan(tmp_path):
    text = SCENARIO + "fleet: [{gpu: h100-sxm, replicas: 3}]\n"
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["solve", str(write(tmp_path, text)), "--out-dir", str(out), "--json"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output)
    assert plan["given_fleet"] is True and plan["gpus"] == 3 and plan["plan"][0]["replicas"] == 3
    report = (out / "sim.md").read_text(encoding="utf-8")
    assert "## The fleet as given" in report
    # its runs are Poisson too, which its latency section says as a planned fleet's does
    assert ("Every run has Poisson arrivals at the pool's rate, and no log's own arrivals were replayed (only a "
            "log's are, and the source is no log)") in report
    assert "For comparison, the cheapest plan the model finds for the same targets" in report
    assert "Not analysed" not in report  # a given fleet is checked, not explored: no split was tried
    # nor anything else: no section of the explorations, and no table left with a header alone
    assert "## Other plans" in report and "re-solves nothing around it" in report
    assert not {"## Split analysis", "## Levers", "## Sensitivity to the peak rate"} & set(report.splitlines())
    lines = report.splitlines()
    headers = [i for i, line in enumerate(lines) if line.startswith("|---")]
    assert headers and all(lines[i + 1].startswith("|") for i in headers)
    assert sorted(p.name for p in out.iterdir()) == ["sim.md", "sim_traffic.png"]  # no cost figure of no plans
    assert "the scenario planned without `fleet:` gets a report of its own" in report  # the optimiser's plan's
    # a fleet no plan can beat, since none holds these targets: the section says so, not "quoted above"
    impossible = text.replace("tpot_ms: 60", "tpot_ms: 1")
    r = CliRunner().invoke(main, ["solve", str(write(tmp_path, impossible)), "--out-dir", str(tmp_path / "none")])
    assert r.exit_code == 0, r.output  # an audit: reported, however it fares
    report = (tmp_path / "none" / "sim.md").read_text(encoding="utf-8")
    assert "For comparison, the optimiser finds no plan for the same targets" in report
    assert "The optimiser finds no plan for the same targets (above), so there are no other plans to show" in report
    assert "quoted above" not in report
    # and it solves no ILP: --write-lp is refused, naming the scenario, before anything is written
    lp = tmp_path / "fleet.lp"
    r = CliRunner().invoke(main, ["solve", str(write(tmp_path, text)), "--no-report", "--write-lp", str(lp)])
    assert r.exit_code == 2 and "states its fleet (fleet:)" in r.output and "--write-lp" in r.output
    assert not lp.exists()
    sim = CliRunner().invoke(main, ["simulate", str(write(tmp_path, text)), "--json"])
    assert sim.exit_code == 0, sim.output
    (pool,) = json.loads(sim.output)["pools"]
    assert pool["replicas"] == 3 and pool["rate_per_replica_rps"] == pytest.approx(2.0)


def test_a_fleet_with_two_limits_is_a_split_and_pools_can_be_simulated_by_name(tmp_path):
    text = SCENARIO.replace("context_limit: 8192", "context_limit: 16384").replace(
        "source: {constant: {prompt_tokens: 1000, output_tokens: 200}}",
        "source: {synthetic: {name: chat, requests: 20000, seed: 1, rate_rps: 6}}",
    ) + "fleet: [{gpu: h100-sxm, replicas: 2, context_limit: 4096}, {gpu: h100-sxm, replicas: 2}]\n"
    r = CliRunner().invoke(main, ["simulate", str(write(tmp_path, text)), "--pool", "long", "--json"])
    assert r.exit_code == 0, r.output
    (pool,) = json.loads(r.output)["pools"]
    assert pool["pool"] == "long" and pool["replicas"] == 2


def test_a_stated_split_fleet_whose_long_configs_cannot_meet_the_target_is_audited_not_a_crash(tmp_path):
    """No config of the long pool meets the 1 s TTFT on 8k-32k prompts: its class has no capacity, and
    its requests are dealt to the pools by replicas (it divided by the class's capacity, 0)."""
    text = SCENARIO.replace("context_limit: 8192", "context_limit: 32768").replace(
        "source: {constant: {prompt_tokens: 1000, output_tokens: 200}}",
        "source: {synthetic: {name: chat_long_tail, requests: 20000, seed: 1, rate_rps: 3}}",
    ).replace("rps: 6}", "rps: 3}").replace("tpot_ms: 60", "tpot_ms: 50") + (
        "fleet: [{gpu: h100-sxm, replicas: 1, context_limit: 8192}, {gpu: h100-sxm, replicas: 1}]\n")
    path = str(write(tmp_path, text))
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["solve", path, "--out-dir", str(out), "--no-verify"])
    assert r.exit_code == 0, r.output
    report = (out / "sim.md").read_text(encoding="utf-8")
    assert "**This fleet does NOT carry its peak**" in report and "capacity 0 req/s" in report
    assert "| long (8,192 < tokens ≤ 32,768) | 0.9% | h100-sxm |" in report
    sim = CliRunner().invoke(main, ["simulate", path, "--pool", "long", "--json"])
    assert sim.exit_code == 0, sim.output
    (pool,) = json.loads(sim.output)["pools"]
    assert pool["holds"] is False
    # shown alone, the pool that holds is not taken for the one that missed
    short = CliRunner().invoke(main, ["simulate", path, "--pool", "short"])
    assert short.exit_code == 0, short.output
    assert short.stdout.splitlines()[0] == ("Not certified: the fleet the scenario states misses its targets in "
                                            "simulation, in pool 'long' (an audit)")


def test_a_fleet_with_three_limits_is_refused(tmp_path):
    text = SCENARIO.replace("context_limit: 8192", "context_limit: 16384") + (
        "fleet: [{gpu: h100-sxm, replicas: 1, context_limit: 4096}, {gpu: h100-sxm, replicas: 1, context_limit: 8192},"
        " {gpu: h100-sxm, replicas: 1}]\n")
    r = CliRunner().invoke(main, ["solve", str(write(tmp_path, text)), "--no-report"])
    assert r.exit_code == 2
    assert "fleet: pools have 3 context limits (4096, 8192, 16384)" in r.output


def test_a_replay_of_a_log_is_keyed_by_the_share_of_it_the_pool_is_dealt(catalog):
    """The same pool (config, replicas, rate) alone in its class and beside a sibling takes
    different requests of a log: the two must not share one replay. Beside it, the pool is dealt its
    part of the class's rate (PoolDetail.class_part), interleaved with the sibling's, as the report
    tells the operator to route: an even deal over every replica of the class had overloaded a mixed
    class's slower pool and planned it lower round after round. Without a log both replay the same
    Poisson sample."""
    import dataclasses

    import numpy as np

    from planner.certification import _replay_key, pool_setting
    from planner.histogram import Histogram
    from planner.planning import make_plan
    from planner.requests import Requests
    from planner.scenario import Scenario

    scn = Scenario.model_validate({
        "name": "share", "model": "llama-3.1-8b", "context_limit": 8192,
        "traffic": {"source": {"constant": {"prompt_tokens": 1000, "output_tokens": 200}},
                    "peak": {"method": "explicit", "rps": 6}},
        "slo": {"bands": [{"tpot_ms": 60}]}, "gpus": ["h100-sxm"], "tp": [1], "weight_dtypes": ["bf16"],
        "kv_dtypes": ["bf16"], "sizing": {"mode": "expected"},
    })
    plan = make_plan(scn, catalog, catalog.model("llama-3.1-8b"), Histogram.constant(1000, 200, 100), 6.0,
                     explore=False, certify=False)
    (pool,) = plan.pools
    # another pool of the class, ahead of it, sized for 70% of the class's rate
    sibling = dataclasses.replace(pool, replicas=pool.replicas + 1, class_part=0.7)
    mine = dataclasses.replace(pool, class_part=0.3)
    alone, beside = [pool], [sibling, mine]
    n = 600
    trace = Requests(np.arange(n) * 0.1, np.full(n, 1000), np.full(n, 200))

    assert _replay_key(pool, alone, None) == _replay_key(mine, beside, None)
    assert _replay_key(pool, alone, trace) != _replay_key(mine, beside, trace)
    assert pool_setting(pool, scn, alone, trace).trace.arrival_s.size == n  # every request of the class
    dealt = np.rint(pool_setting(mine, scn, beside, trace).trace.arrival_s / 0.1).astype(int)
    other = np.rint(pool_setting(sibling, scn, beside, trace).trace.arrival_s / 0.1).astype(int)
    assert abs(dealt.size - 0.3 * n) <= 2 and dealt.size + other.size == n  # its part, each request once
    assert not np.intersect1d(dealt, other).size
    assert np.diff(dealt).max() <= 2 / 0.3  # interleaved: never a run of the sibling's twice its mean length
    # a log of two requests: the small part's share rounds to none, and it is replayed without the log
    pair = Requests(np.array([0.0, 0.1]), np.full(2, 1000), np.full(2, 200))
    assert pool_setting(mine, scn, beside, pair).trace is None
    assert pool_setting(sibling, scn, beside, pair).trace.arrival_s.size == 2


def test_a_close_call_is_judged_on_four_runs_pooled_and_a_clear_one_on_one(catalog):
    """The first run's TPOT p99 within 15% of the limit: the verdict is the p99 of seeds 0-3's
    measured requests together, with its standard error from the four runs' own p99s; far from it,
    the first run decides alone."""
    import math

    import numpy as np

    from planner.pool_check import (
        CONFIRM_RUNS,
        MOST_CLOSE,
        TAIL_WINDOW,
        UNDECIDED_ERRORS,
        _attainment_window,
        _close_attainment,
        _run,
        check_pool,
        close_window,
    )
    from planner.sim_measures import merged_latencies
    from planner.targets import SLO

    p = _close_pool(catalog)
    (band,) = SLO.single(tpot_ms=50).bands
    runs = [_run(p, 3000, s).latencies for s in range(1, 1 + CONFIRM_RUNS)]
    first = runs[0].statistic(band, "tpot", "p99")
    pooled = merged_latencies(runs).statistic(band, "tpot", "p99")
    error = np.std([r.statistic(band, "tpot", "p99") for r in runs], ddof=1) / math.sqrt(CONFIRM_RUNS)
    # a limit the first run comes within 15% of, and the pooled value lies clear of (three errors)
    limit_s = pooled + (UNDECIDED_ERRORS + 1) * error
    assert 0.85 * limit_s <= first <= 1.15 * limit_s

    close = check_pool(p, SLO.single(tpot_ms=limit_s * 1e3), requests=3000, seed=1)
    (check,) = close.bands[0].checks
    assert close.runs == CONFIRM_RUNS and close.seeds == [1, 2, 3, 4] and close.requests == 3000
    # its p99 rests on the few requests beyond it, so the window is wider than 15%
    beyond = runs[0].of(band, "tpot").size * 0.01
    window = close_window("p99", runs[0].of(band, "tpot").size)
    assert window == pytest.approx(TAIL_WINDOW / math.sqrt(beyond)) and window > 0.15
    assert close.pooled_because == f"the first came within {window:.0%} of a limit"
    assert close.bands[0].requests == merged_latencies(runs).requests_in(band)
    assert check.simulated_s == pooled != first and check.holds
    assert check.standard_error_s == pytest.approx(error, rel=1e-12) and not check.undecided

    clear = check_pool(p, SLO.single(tpot_ms=first * 1e3 / 0.5), requests=3000, seed=1)
    assert clear.runs == 1 and clear.bands[0].checks[0].simulated_s == first and clear.holds
    # a first reading 20% under its limit, outside CLOSE_SHARE's 15% but inside the tail's window, is read
    # again: the 128k rollout's long pool, 2% over its limit in the long run, was certified on one run
    # reading 15.3% under it (an outside audit)
    assert 1 - window < 0.8
    wide = check_pool(p, SLO.single(tpot_ms=first * 1e3 / 0.8), requests=3000, seed=1)
    assert wide.runs >= CONFIRM_RUNS and wide.pooled_because == f"the first came within {window:.0%} of a limit"
    # the window is bounded: a band of 500 requests (5 beyond its p99) re-read every reading, "within 133%"
    assert close_window("p99", 500) == MOST_CLOSE and close_window("p99", 20_000) == pytest.approx(0.15)
    # an attainment goal rests on the misses it allows as a p99 on the requests beyond it: the same window
    import dataclasses

    goal = dataclasses.replace(SLO.single(tpot_ms=first * 1e3), attainment=0.99)
    missing = 1 - runs[0].attainment(goal)
    assert _attainment_window(goal, runs[0]) == pytest.approx(
        min(MOST_CLOSE, TAIL_WINDOW / math.sqrt(runs[0].prompt_tokens.size * 0.01)))
    # the share missing read 20% under the share allowed: past 15%, within the window of the ~34 misses
    # allowed; 40% under: past it
    near, far = (dataclasses.replace(goal, attainment=1 - missing / under) for under in (0.8, 0.6))
    assert _attainment_window(near, runs[0]) > 0.2 and _close_attainment(near, runs[0])
    assert _attainment_window(far, runs[0]) < 0.4 and not _close_attainment(far, runs[0])
    assert math.isnan(clear.bands[0].checks[0].standard_error_s)


def test_an_undecided_close_call_pools_four_more_runs_at_a_time_up_to_sixteen(catalog):
    """Four runs pooled within two standard errors of the limit: four runs more at a time, until
    the pooled value is clear of the limit by two of its (new) standard errors, or sixteen runs.
    A limit at sixteen runs' pooled value leaves that value
    undecided: the verdict takes sixteen runs where the fewer runs' values lay within two of their
    errors of it too, and a value that cannot be told from its limit is a miss, named so, though
    it does not exceed the limit."""
    import math

    import numpy as np

    from planner.pool_check import CONFIRM_RUNS, MOST_RUNS, UNDECIDED_ERRORS, _run, check_pool
    from planner.sim_measures import merged_latencies
    from planner.targets import SLO

    p = _close_pool(catalog)
    (band,) = SLO.single(tpot_ms=50).bands
    runs = [_run(p, 3000, s).latencies for s in range(MOST_RUNS)]
    values = [r.statistic(band, "tpot", "p99") for r in runs]

    def pooled(k):
        return merged_latencies(runs[:k]).statistic(band, "tpot", "p99")

    def error(k):
        return np.std(values[:k], ddof=1) / math.sqrt(k)

    # a limit one error above the four runs' pooled value: undecided after four
    limit_s = pooled(CONFIRM_RUNS) + error(CONFIRM_RUNS)
    expected = next((k for k in range(2 * CONFIRM_RUNS, MOST_RUNS + 1, CONFIRM_RUNS)
                     if abs(pooled(k) - limit_s) > UNDECIDED_ERRORS * error(k)), MOST_RUNS)
    check = check_pool(p, SLO.single(tpot_ms=limit_s * 1e3), requests=3000, seed=0)
    (target,) = check.bands[0].checks
    assert check.runs == expected > CONFIRM_RUNS and check.seeds == list(range(expected))
    assert target.simulated_s == pooled(expected) and target.holds == (pooled(expected) <= limit_s)
    assert target.standard_error_s == pytest.approx(error(expected), rel=1e-12)

    limit_s = pooled(MOST_RUNS)
    expected = next((k for k in range(CONFIRM_RUNS, MOST_RUNS, CONFIRM_RUNS)
                     if abs(pooled(k) - limit_s) > UNDECIDED_ERRORS * error(k)), MOST_RUNS)
    at_the_value = check_pool(p, SLO.single(tpot_ms=limit_s * 1e3), requests=3000, seed=0)
    # (this pool's runs: each pooled value lies within two of its errors of the sixteen runs')
    assert at_the_value.runs == expected == MOST_RUNS
    (target,) = at_the_value.bands[0].checks
    assert target.holds and target.undecided  # equal to its limit: not over it, and undecided
    assert at_the_value.undecided and not at_the_value.holds  # so the pool misses: certification re-plans it
    assert not target.passes and not at_the_value.bands[0].holds  # the band says what the pool says
    assert at_the_value.problems == (
        f"all: TPOT p99 {limit_s * 1e3:,.1f} ± {target.standard_error_s * 1e3:,.1f} ms cannot be told from its "
        f"{limit_s * 1e3:g} ms limit, within {UNDECIDED_ERRORS:g} standard errors of it after {MOST_RUNS} runs",)
    # Clear of the limit by more than two errors after sixteen runs: it holds.
    clear_s = limit_s + 2.5 * target.standard_error_s
    assert check_pool(p, SLO.single(tpot_ms=clear_s * 1e3), requests=3000, seed=0).holds


def test_the_report_shows_a_pooled_value_s_error_and_a_verdict_still_undecided_after_the_most_runs():
    """'79.0 ± 1.6 ms' against 80 ms after sixteen runs read as a plain 'holds'; the row now says the
    value is undecided and counted as a miss (a value over its limit and that close stays a miss).
    Seeds of more than four runs read as a range."""
    from planner.bounds import MAX_SEED
    from planner.pool_check import BandCheck, TargetCheck, confirm_seeds
    from planner.report_latency import band_rows, seeds_text
    from planner.targets import SLO

    (band,) = SLO.single(tpot_ms=80).bands
    close = TargetCheck("tpot", "p99", 0.080, 0.070, 0.079, 0.0016)
    clear = TargetCheck("tpot", "p99", 0.080, 0.070, 0.070, 0.0016)
    one_run = TargetCheck("tpot", "p99", 0.080, 0.070, 0.079)
    over = TargetCheck("tpot", "p99", 0.080, 0.070, 0.081, 0.0016)
    rows = band_rows((BandCheck(band, 80_000, (close, clear, one_run, over)),))[2:]
    assert rows[0].endswith("| 70.0 ms | 79.0 ± 1.6 ms | **undecided**: within 2 standard errors of its limit after "
                            "16 runs, counted as a miss |")
    assert rows[1].endswith("| 70.0 ms | 70.0 ± 1.6 ms | holds |")
    assert rows[2].endswith("| 70.0 ms | 79.0 ms | holds |")
    assert rows[3].endswith("| 70.0 ms | 81.0 ± 1.6 ms | **misses**: within 2 standard errors of its limit after 16 runs |")
    assert seeds_text([0, 1, 2, 3]) == "0, 1, 2, 3" and seeds_text(list(range(5, 21))) == "5–20"
    wrapped = confirm_seeds(MAX_SEED - 1, 8)  # seeds wrap within what a scenario may name: listed
    assert seeds_text(wrapped) == f"{MAX_SEED - 1}, {MAX_SEED}, 0, 1, 2, 3, 4, 5"


def test_an_undecided_attainment_is_a_miss_and_a_miss_reads_apart_from_its_limit():
    """An attainment that sixteen runs leave within two standard errors of its goal is a miss, as an
    undecided target is, and its line in the report says so; a goal missed outright is a miss with
    its own words. A missed value shows the digits that tell it from its limit ("50 ms > 50 ms" was
    a miss of 50.04 ms)."""
    import dataclasses
    from types import SimpleNamespace

    from planner.pool_check import MOST_RUNS, UNDECIDED_ERRORS, TargetCheck, _problems, miss_text
    from planner.targets import SLO

    slo = dataclasses.replace(SLO.single(tpot_ms=50), attainment=0.95)
    lat = SimpleNamespace(attainment=lambda _slo: 0.953)
    assert _problems(slo, (), lat, attainment_error=0.002) == [
        f"attainment 95.3% ± 0.2% cannot be told from its 95.0% goal, within {UNDECIDED_ERRORS:g} standard errors "
        f"of it after {MOST_RUNS} runs"]
    assert _problems(slo, (), lat, attainment_error=0.001) == []  # three errors clear: it holds
    assert _problems(slo, (), SimpleNamespace(attainment=lambda _slo: 0.94), attainment_error=0.002) == [
        "attainment 94.0% < 95.0%"]

    def missed(value_ms, limit_ms=50.0, kind="tpot"):
        scale = 1.0 if kind == "ttft" else 1e3
        return miss_text("chat", TargetCheck(kind, "p99", limit_ms / scale, 0.0, value_ms / scale), value_ms / scale)

    assert missed(50.04) == "chat: TPOT p99 50.04 ms > 50 ms"
    assert missed(154.3, 150) == "chat: TPOT p99 154.3 ms > 150 ms"
    assert missed(2.013, 2.0, "ttft") == "chat: TTFT p99 2.01 s > 2 s"
    assert missed(0.2501, 0.25, "ttft") == "chat: TTFT p99 0.2501 s > 0.25 s"  # never fewer decimals than the limit
    assert missed(50.0000001) == "chat: TPOT p99 just over 50 ms > 50 ms"


def test_runs_pooled_for_a_verdict_judge_preemptions_on_their_mean(catalog):
    """Preemptions are judged on the runs pooled for a verdict together (their mean per 1,000
    arrivals), not failed by one run's reading; one run alone on its own."""
    import dataclasses

    from planner.pool_check import _preemption_problems, _run
    from planner.sim_capacity import PREEMPTION_BUDGET_PER_1000

    run = _run(_close_pool(catalog), 3000, 0)

    def runs(*preempted):
        return [dataclasses.replace(run, preemptions_per_1000=x) for x in preempted]

    budget = PREEMPTION_BUDGET_PER_1000
    assert _preemption_problems(runs(1.5 * budget, 0.0, 0.0, 0.0)) == []  # their mean is under the budget
    assert _preemption_problems(runs(1.5 * budget)) == [f"{1.5 * budget:.1f} preemptions per 1,000 requests > {budget:g}"]
    assert _preemption_problems(runs(1.5 * budget, 1.5 * budget)) == [
        f"{1.5 * budget:.1f} preemptions per 1,000 requests > {budget:g} (the mean of 2 runs)"]


# fleet_2027q1's moe_chat replica: Qwen3-30B-A3B in fp8 on one H200, synthetic chat traffic at its
# planned 49.5 requests/s, where its backlog levels off up to about 1.3x on runs of 120,000 requests
# (planner.sim_measures); targets far from its latencies, so that its queue alone is judged.
FILLING = {
    "name": "filling", "model": "qwen3-30b-a3b", "context_limit": 32768,
    "traffic": {"source": {"synthetic": {"name": "chat", "requests": 50000, "seed": 24, "rate_rps": 40}},
                "peak": {"method": "explicit", "rps": 49.5192}, "headroom": 1.0},
    "slo": {"bands": [{"ttft_s": 60, "tpot_ms": 1000}]}, "gpus": ["h200"],
    "fleet": [{"gpu": "h200", "tp": 1, "replicas": 1, "weight_dtype": "fp8", "kv_dtype": "fp8"}],
}


def _filling_pool(catalog, scale: float = 1.0):
    """The FILLING replica's pool at `scale` times its planned rate."""
    import dataclasses

    from planner.certification import pool_setting
    from planner.planning import make_plan
    from planner.scenario import Scenario
    from planner.workload.synth import synthetic_histogram

    scn = Scenario.model_validate({**FILLING, "verify": False})
    rps = scn.traffic.peak.rps
    hist = synthetic_histogram("chat", 50000, 24, rate_rps=40)
    plan = make_plan(scn, catalog, catalog.model("qwen3-30b-a3b"), hist, rps, explore=False)
    p = pool_setting(plan.pools[0], scn, plan.pools, None)
    return dataclasses.replace(p, rate_rps=p.rate_rps * scale)


def _growing_seed(p) -> int:
    """The first seed whose 5,556-request run reads the pool's queue as growing."""
    from planner.pool_check import _run
    from planner.sim_measures import STABILITY_TOLERANCE

    return next(s for s in range(16) if _run(p, 5556, s).backlog_growth > STABILITY_TOLERANCE)


def test_a_queue_a_short_run_reads_as_growing_is_decided_on_a_run_four_times_as_long(catalog):
    """A replica started empty is still filling when a short run's warm-up ends: at its planned
    rate (targets far from its latencies) a 5,556-request run reads its backlog rising over the
    tolerance on some seeds, where the run four times as long at the same seed reads it levelled
    off. The pool holds on the first run, read again on the longer one (no runs pooled: more runs as
    short would read the filling as often); at 1.5x the rate, past its saturation, the longer run
    reads the growth too and the pool misses on it."""
    from planner.pool_check import _run, _trend_text, check_pool
    from planner.sim_measures import SETTLE_FACTOR, STABILITY_TOLERANCE
    from planner.targets import SLO

    p = _filling_pool(catalog)
    slo = SLO.single(ttft_s=60, tpot_ms=1000)  # FILLING's
    seed = _growing_seed(p)
    longer = _run(p, SETTLE_FACTOR * 5556, seed)
    assert longer.backlog_growth < STABILITY_TOLERANCE / 4
    check = check_pool(p, slo, requests=5556, seed=seed)
    assert check.holds and check.runs == 1 and not check.pooled_because
    settled = check.queue_settling
    assert settled.runs_growth > STABILITY_TOLERANCE and settled.runs == 1
    assert (settled.runs_requests, settled.longer_requests) == (5556, SETTLE_FACTOR * 5556)
    assert settled.longer_growth == longer.backlog_growth and not settled.grows and settled.misses == ()
    assert settled.text() == (
        f"the backlog rose at {_trend_text(settled.runs_growth)} of the arrival rate, over the 2% allowed, which a replica "
        f"still filling from empty can also show; a run of 22,224 requests, 4 times as long, read "
        f"{_trend_text(longer.backlog_growth)}: it levels off")

    past = _filling_pool(catalog, 1.5)
    check = check_pool(past, slo, requests=5556, seed=0)
    settled = check.queue_settling
    assert settled.grows and settled.longer_growth > 5 * STABILITY_TOLERANCE and settled.misses == ()
    assert check.problems == (f"the queue grows: the replica cannot keep up (its backlog rising at "
                              f"{settled.longer_growth:.2%} of the arrival rate over a run of 22,224 requests, 4 times "
                              "as long; 2% allowed)",)
    assert settled.text().endswith(f", read {settled.longer_growth:.2%}: the queue grows")


def test_the_longer_run_that_settles_a_queue_judges_its_targets_too(catalog):
    """At 1.15x the filling replica's rate, a short run that reads its queue as growing has not
    settled its percentiles either: on a seed where its TTFT p99 lies clear of a limit (no close
    call) and the run four times as long reads over it, the pool misses, and says on which run."""
    from planner.pool_check import _run, band_checks, check_pool, close_window
    from planner.sim_measures import SETTLE_FACTOR, STABILITY_TOLERANCE
    from planner.targets import SLO

    p = _filling_pool(catalog, 1.15)
    far = SLO.single(ttft_s=60, tpot_ms=1000)

    def ttft_p99(sim):
        return band_checks(far, None, None, sim.latencies)[0].checks[0].simulated_s

    def limit_only_the_longer_run_misses(seed: int) -> float | None:
        """A TTFT limit 2% past the close band of the seed's short run (close_window, for the requests
        its p99 rests on), where that run reads a growing queue and the longer one misses the limit;
        None where either does not."""
        short = _run(p, 5556, seed)
        window = close_window("p99", short.latencies.ttft_s.size)
        limit_s = round(ttft_p99(short) / (1 - window) * 1.02, 3)
        growing = short.backlog_growth > STABILITY_TOLERANCE
        return limit_s if growing and ttft_p99(_run(p, SETTLE_FACTOR * 5556, seed)) > limit_s else None

    seed, limit_s = next((s, limit) for s in range(16) if (limit := limit_only_the_longer_run_misses(s)) is not None)
    check = check_pool(p, SLO.single(ttft_s=limit_s, tpot_ms=1000), requests=5556, seed=seed)
    assert check.runs == 1 and all(c.holds for b in check.bands for c in b.checks)  # the short run holds, clear
    assert not check.holds and not check.queue_settling.grows
    (miss,) = check.queue_settling.misses
    assert miss.startswith("all: TTFT p99 ") and miss.endswith(f" s > {limit_s:g} s")
    assert check.problems == (f"a run of 22,224 requests, 4 times as long: {miss}",)
    assert check.queue_settling.text().endswith(f": it levels off, but that run misses: {miss}")


def test_a_queue_no_longer_run_can_settle_is_judged_on_the_runs_mean(catalog, monkeypatch):
    """At the simulator's request limit no longer run can be sampled: the verdict's runs' mean trend
    decides, as it did before the longer run."""
    from planner import pool_check, sim_measures
    from planner.targets import SLO

    past = _filling_pool(catalog, 1.5)
    monkeypatch.setattr(sim_measures, "MAX_SIMULATED_REQUESTS", 5556)
    check = pool_check.check_pool(past, SLO.single(ttft_s=60, tpot_ms=1000), requests=5556, seed=0)
    assert check.queue_settling is None and not check.holds
    growth = pool_check._run(past, 5556, 0).backlog_growth
    assert check.problems[-1] == (f"the queue grows: the replica cannot keep up (its backlog rising at {growth:.2%} of "
                                  "the arrival rate; 2% allowed)")


def test_simulate_solve_and_the_report_show_the_longer_run_that_decided_the_queue(catalog, tmp_path):
    """The filling replica's scenario, at a seed whose first run reads its queue as growing: `planner
    simulate` prints both readings and --json gives them (queue_settling), as solve's --json and its
    report do; the pool holds."""
    from planner.pool_check import _trend_text
    from planner.sim_measures import STABILITY_TOLERANCE

    seed = _growing_seed(_filling_pool(catalog))
    simulation = {"requests": 5556, "band_requests": 5000, "seed": seed}
    path = write(tmp_path, json.dumps({**FILLING, "name": "moe", "simulation": simulation}), name="moe.yaml")
    r = CliRunner().invoke(main, ["simulate", str(path), "--json"])
    assert r.exit_code == 0, r.output
    (pool,) = json.loads(r.output)["pools"]
    settled = pool["queue_settling"]
    assert pool["holds"] and pool["requests_per_run"] == 5556 and pool["runs"] == 1
    assert settled["runs_backlog_growth"] > STABILITY_TOLERANCE >= settled["longer_run_backlog_growth"]
    assert not settled["longer_run_grows"] and settled["longer_run_misses"] == [] and settled["runs"] == 1
    assert settled["longer_run_requests"] == 4 * 5556 and settled["requests_per_run"] == 5556
    text = CliRunner().invoke(main, ["simulate", str(path)])
    assert f"  queue: the backlog rose at {_trend_text(settled['runs_backlog_growth'])} of the arrival rate" in text.output
    solved = CliRunner().invoke(main, ["solve", str(path), "--json", "--out-dir", str(tmp_path / "out")])
    assert solved.exit_code == 0, solved.output
    assert json.loads(solved.output)["plan"][0]["queue_settling"] == settled
    report = (tmp_path / "out" / "moe.md").read_text(encoding="utf-8")
    assert f"Queue: the backlog rose at {_trend_text(settled['runs_backlog_growth'])} of the arrival rate" in report
    assert (f"a run of 22,224 requests, 4 times as long, read {_trend_text(settled['longer_run_backlog_growth'])}: it levels "
            "off.") in report


def test_saturation_found_on_short_runs_is_found_on_long_ones(catalog):
    """Without targets the simulated capacity is the highest rate whose backlog does not grow. On
    5,556-request runs the filling replica read as growing put it at 1.05-1.11x the planned rate; a
    rate that fails on its backlog alone is read again on a run four times as long, and the short
    runs' saturation is within 3% of that of runs eight times as long (1.32x, within 2%)."""
    import statistics

    from planner.sim_capacity import max_sustainable_rate
    from planner.targets import SLO

    p = _filling_pool(catalog)

    def searches(requests):
        return [max_sustainable_rate(p.deployment, p.hist, SLO(), n_requests=requests, seed=seed, rel_tol=0.01,
                                     initial_rate_rps=p.rate_rps) for seed in range(3)]

    short_runs = searches(5556)
    short, long = (statistics.median(f.rate_rps for f in found) for found in (short_runs, searches(8 * 5556)))
    assert long == pytest.approx(1.32 * p.rate_rps, rel=0.02)
    assert short == pytest.approx(long, rel=0.03)
    found = short_runs[0]
    assert found.longer_requests == 4 * 5556 and found.result.requests == 4 * 5556  # the longer sample judged it


def _close_inputs():
    """_close_pool's scenario and histogram."""
    import numpy as np

    from planner.histogram import Histogram
    from planner.scenario import Scenario

    scn = Scenario.model_validate({
        "name": "close", "model": "llama-3.1-8b", "context_limit": 8192,
        "traffic": {"source": {"constant": {"prompt_tokens": 1000, "output_tokens": 200}},
                    "peak": {"method": "explicit", "rps": 30}, "headroom": 1.0},
        "slo": {"bands": [{"tpot_ms": 50}]}, "gpus": ["h100-sxm"], "tp": [1], "weight_dtypes": ["bf16"],
        "kv_dtypes": ["bf16"], "sizing": {"mode": "expected"}, "verify": False,
    })
    hist = Histogram.from_arrays(np.random.default_rng(3).integers(100, 4000, 2000), np.random.default_rng(4).integers(2, 600, 2000))
    return scn, hist


def _close_pool(catalog):
    """An 8B pool on an H100 with prompts of 100-4,000 and outputs of 2-600 tokens, planned at
    30 req/s: its TPOT p99 moves from run to run by a few percent."""
    from planner.certification import pool_setting
    from planner.planning import make_plan

    scn, hist = _close_inputs()
    plan = make_plan(scn, catalog, catalog.model("llama-3.1-8b"), hist, 30.0, explore=False)
    return pool_setting(plan.pools[0], scn, plan.pools, None)


def _near_capacity(catalog, seed: int, max_rounds: int = 2):
    """8B on an H100 (TensorRT-LLM), 1,000 + 200 tokens, TPOT p99 <= 50 ms, one replica planned at
    99.9% of the model's capacity: the simulator's verdict there is a close call."""
    from planner.histogram import Histogram
    from planner.scenario import Scenario

    def scn(rps, verify):
        return Scenario.model_validate({
            "name": "near", "model": "llama-3.1-8b", "context_limit": 8192, "engine": "trtllm",
            "traffic": {"source": {"constant": {"prompt_tokens": 1000, "output_tokens": 200}},
                        "peak": {"method": "explicit", "rps": rps}, "headroom": 1.0},
            "slo": {"bands": [{"tpot_ms": 50}]}, "gpus": ["h100-sxm"], "tp": [1], "weight_dtypes": ["bf16"],
            "kv_dtypes": ["bf16"], "sizing": {"mode": "expected"}, "verify": verify,
            "simulation": {"requests": 3000, "band_requests": 2000, "max_rounds": max_rounds, "seed": seed},
        })

    from planner.planning import make_plan

    hist, model = Histogram.constant(1000, 200), catalog.model("llama-3.1-8b")
    cap = make_plan(scn(18.9, False), catalog, model, hist, 18.9, explore=False).pools[0].capacity.max_rps
    return scn(cap * 0.999, True), hist, model, cap * 0.999


def test_a_pool_that_misses_on_the_pooled_runs_is_replanned_below_the_rate_that_missed(catalog):
    """Seed 3: the first run holds at the planned rate, the four runs pooled do not. The re-plan's
    capacity must hold on each of those runs and lie below the rate that missed; planned at that
    rate again, the pool met the same check every round and certification ran out of rounds."""
    from planner.planning import make_plan

    scn, hist, model, rps = _near_capacity(catalog, seed=3)
    plan = make_plan(scn, catalog, model, hist, rps, explore=False)
    cert = plan.certification
    assert cert.certified and cert.rounds == 1
    planned = float(cert.changes[0].split("planned at ")[1].split(" ")[0])
    assert planned <= rps * 0.98 + 5e-4  # the text rounds to 3 decimals (18.50861 shows as 18.509)
    assert all(pool.check.holds for pool in plan.pools)


def test_a_log_whose_load_rises_at_its_end_is_judged_on_its_trend_past_the_first_tenth(catalog):
    """A log's load need not be steady: 6,000 requests at 10 req/s, then 4,000 at 60 (the replica
    carries about 30). Its replay reads the backlog's trend past the share's first tenth, which
    grows 11.6% of the arrival rate; the settled window a Poisson run is read over leaves the busy
    end out and would have read 1.7%, under the 2% allowed."""
    import dataclasses

    import numpy as np

    from planner.pool_check import replay_trace
    from planner.requests import Requests
    from planner.sim_measures import STABILITY_TOLERANCE, backlog_growth
    from planner.simulate import simulate_replica
    from planner.targets import SLO

    p = _close_pool(catalog)
    rng = np.random.default_rng(0)
    arrival = np.cumsum(np.concatenate([rng.exponential(1 / 10, 6000), rng.exponential(1 / 60, 4000)]))
    log = Requests(arrival - arrival[0], np.full(10_000, 1000), np.full(10_000, 200))
    _, trace = simulate_replica(p.deployment, log, warmup_fraction=0.0, settled=False, trace=True)
    past_tenth = backlog_growth(log, trace, 0.1, settled=False)
    assert backlog_growth(log, trace, 0.1) < STABILITY_TOLERANCE < past_tenth
    replay = replay_trace(dataclasses.replace(p, trace=log, replicas=1), SLO.single(tpot_ms=1000))
    # The overload preempts too: the budget is judged first, as a Poisson run's is.
    assert replay.problems[1:] == (f"replica 1's queue grows (its backlog rising at {past_tenth:.2%} of the arrival "
                                   f"rate; {STABILITY_TOLERANCE:.0%} allowed)",)
    assert replay.problems[0].endswith(" preemptions per 1,000 requests > 10")


def test_a_log_whose_bursts_preempt_over_the_budget_misses_though_its_latencies_hold(catalog):
    """The log replay holds a pool to the preemption budget its Poisson runs are held to: requests of
    4,000 + 4,000 tokens arriving fast fill the 8B replica's cache, and their preemptions per 1,000
    requests over the budget fail the replay, while a TPOT limit of 10 s holds and the share is too
    short for its queue's trend to be judged (both passed before). Every preemption counts, those
    while the backlog drains after the last arrival too: 300 requests at 40 req/s preempt only then."""
    import dataclasses

    import numpy as np

    from planner.pool_check import MIN_TREND_REQUESTS, replay_trace
    from planner.requests import Requests
    from planner.sim_capacity import PREEMPTION_BUDGET_PER_1000
    from planner.simulate import simulate_replica
    from planner.targets import SLO

    p = _close_pool(catalog)

    def log_of(n: int, rate_rps: float) -> Requests:
        arrival = np.cumsum(np.random.default_rng(0).exponential(1 / rate_rps, n))
        return Requests(arrival - arrival[0], np.full(n, 4000), np.full(n, 4000))

    def preemptions(log: Requests) -> tuple[int, int]:
        """(every preemption of the replay, those up to the last arrival)"""
        sim, trace = simulate_replica(p.deployment, log, warmup_fraction=0.0, settled=False, trace=True)
        return int(trace.preemption_steps.size), sim.preemptions

    def text(per_1000: float) -> str:
        return f"{per_1000:.1f} preemptions per 1,000 requests > {PREEMPTION_BUDGET_PER_1000:g}"

    for n, rate in ((600, 20.0), (300, 40.0)):
        log = log_of(n, rate)
        assert log.n < MIN_TREND_REQUESTS
        every, windowed = preemptions(log)
        assert 1000.0 * every / n > PREEMPTION_BUDGET_PER_1000
        replay = replay_trace(dataclasses.replace(p, trace=log, replicas=1), SLO.single(tpot_ms=10_000))
        assert all(c.holds for b in replay.bands for c in b.checks)
        assert replay.problems == (text(1000.0 * every / n),)
    assert windowed == 0  # the 300 requests preempt only once arrivals have stopped
    # Two replicas share a log in turn: their preemptions together, per request of the log.
    log = log_of(600, 20.0)
    halves = [preemptions(Requests(log.arrival_s[i::2] - log.arrival_s[i], log.prompt_tokens[i::2],
                                   log.output_tokens[i::2]))[0] for i in (0, 1)]
    two = replay_trace(dataclasses.replace(p, trace=log, replicas=2), SLO.single(tpot_ms=10_000))
    assert two.problems == (text(1000.0 * sum(halves) / log.n),)


def test_a_replay_started_ahead_confirms_its_close_call_and_is_the_one_certification_keeps(catalog):
    """Replays started ahead (the per-GPU plans') judge a close call on the pooled runs as the plan's
    own do, and certification keeps that answer without replaying."""
    from planner.certification import _replay_key, certify_plans, replay_ahead
    from planner.plan_search import LazySearch, Resolver
    from planner.plan_setup import pool_details, setup_plan
    from planner.pool_check import CONFIRM_RUNS

    scn, hist, model, rps = _near_capacity(catalog, seed=0)
    st = setup_plan(scn, catalog, model, hist, rps)
    search = LazySearch(st.evaluator, Resolver(scn), st.classes, st.configs)
    sol = search.solve()
    pools = pool_details(st.evaluator, search.evaluations(), sol)
    replay_ahead([(st, pools)])
    (ahead,) = [future.result() for future in st.evaluator.replays.values()]
    assert ahead.runs >= CONFIRM_RUNS  # a close call, confirmed on runs pooled
    certify_plans([(st, search.evaluations(), sol, pools)], lambda _: [(search.solve(), search.evaluations())], rounds=2)
    assert st.evaluator.checks[_replay_key(pools[0], pools, None)] is ahead


def _alpha_beta_fleet(tmp_path, monkeypatch):
    """Two 8B services on an H100, certified together, the model overstating alpha's capacity (x1.6):
    alpha's pool misses in simulation and beta's holds. The fleet's inputs."""
    import dataclasses

    import yaml

    from planner.evaluator import Evaluator
    from planner.fleet import load_fleet

    def svc(name, tpot_ms):
        return {"name": name, "model": "llama-3.1-8b", "context_limit": 8192,
                "traffic": {"source": {"constant": {"prompt_tokens": 1000, "output_tokens": 200}},
                            "peak": {"method": "explicit", "rps": 20}, "headroom": 1.0},
                "slo": {"bands": [{"tpot_ms": tpot_ms}]}, "gpus": ["h100-sxm"], "tp": [1], "weight_dtypes": ["bf16"],
                "kv_dtypes": ["bf16"], "sizing": {"mode": "expected"}, "simulation": {"requests": 3000}}

    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({"name": "pair", "services": [svc("alpha", 40), svc("beta", 200)]}), encoding="utf-8")
    original = Evaluator._model_evaluation

    def optimistic_for_alpha(self, key, cfg, tc, **kw):
        e = original(self, key, cfg, tc, **kw)
        if self.scn.name != "alpha" or e.capacity is None:
            return e
        return dataclasses.replace(e, capacity=dataclasses.replace(e.capacity, max_rps=e.capacity.max_rps * 1.6))

    monkeypatch.setattr(Evaluator, "_model_evaluation", optimistic_for_alpha)
    return load_fleet(path)


def test_a_fleet_service_whose_pools_held_claims_no_re_plan_of_its_own(tmp_path, monkeypatch):
    """Two services certified together: the model overstates alpha's capacity (x1.6), so its pool
    misses and the fleet's ILP is re-solved; beta's pool holds at its model capacity. Each service
    counts its own re-plans (beta none), both the joint re-solves, and beta's verdict says why the
    fleet was re-solved rather than claiming re-plans of its own."""
    import dataclasses

    from planner.certification import _replaced_text
    from planner.fleet_plan import make_fleet_plan
    from planner.report import render

    fp = make_fleet_plan(_alpha_beta_fleet(tmp_path, monkeypatch), explore=False, certify=True)
    alpha, beta = (p.certification for p in fp.plans)
    assert alpha.certified and beta.certified
    assert alpha.rounds >= 1 and alpha.changes and beta.rounds == 0 and not beta.changes
    assert alpha.joint_rounds == beta.joint_rounds == alpha.rounds
    assert fp.plans[0].pools[0].planned_by == "simulation"  # alpha's capacity was searched in simulation
    from planner.plan_json import plan_json

    assert fp.certification_rounds == alpha.joint_rounds
    a_json, b_json = (plan_json(p) for p in fp.plans)
    assert a_json["certification_rounds"] == alpha.rounds and b_json["certification_rounds"] == 0
    assert a_json["plan"][0]["planned_by"] == "simulation" and a_json["plan"][0]["planned_calibration"] is None
    # The pool's capacity_rps is what the ILP planned, as the candidates' and the report's; the model's apart
    pool, simulated = fp.plans[0].pools[0], a_json["plan"][0]
    assert simulated["capacity_rps"] == pool.planned_rps < simulated["model_capacity_rps"] == pool.capacity.max_rps
    [candidate] = [c for c in a_json["candidates"] if c["capacity_rps"] is not None and c["class"] == pool.traffic_class.name]
    assert (candidate["capacity_rps"], candidate["model_capacity_rps"]) == (simulated["capacity_rps"],
                                                                           simulated["model_capacity_rps"])
    assert f"| {pool.planned_rps:,.3f} |" in render(fp.plans[0])
    text = render(fp.plans[1])
    assert "Certification re-planned" not in text and "re-plan at simulated" not in text
    times = "time" if beta.joint_rounds == 1 else "times"
    assert f"the fleet's ILP was re-solved {beta.joint_rounds} {times} in all, as pools of other services missed" in text
    # A challenger's line is shown in a section with no round of its own, as --json's certification_changes
    # shows it: six services of the shipped fleet had one there and none in their report.
    line = _replaced_text(2, 37.8, 37.8)
    challenged = dataclasses.replace(fp.plans[1], certification=dataclasses.replace(beta, challenges=(line,)))
    assert plan_json(challenged)["certification_changes"] == [line]
    text = render(challenged)
    assert f"\n- {line}\n" in text and "Certification then challenged the plan" in text
    assert "Certification re-planned" not in text
    both = dataclasses.replace(fp.plans[0], certification=dataclasses.replace(alpha, challenges=(line,)))
    text = render(both)
    assert text.index("Certification re-planned") < text.index(f"- {alpha.changes[0]}") < text.index(
        "Certification then challenged the plan") < text.index(f"- {line}")


def test_the_model_s_itl_p99_is_shown_beside_the_simulated_one_except_under_a_long_prefill_cap(tmp_path):
    """The model's ITL tail read 6 ms against a simulated 258 ms in the 128k rollout's long pool, so
    reports showed none; from the chain of step lengths it lies within 13% in every shipped pool, and
    is shown, save where θ caps a prompt's tokens a step (there it takes every busy step as full)."""
    out = json.loads(CliRunner().invoke(main, ["simulate", str(write(tmp_path)), "--json"]).output)
    (pool,) = out["pools"]
    assert pool["predicted"]["itl_ms_p99"] == pytest.approx(pool["simulated"]["itl_ms_p99"], rel=0.10)
    capped = write(tmp_path, SCENARIO + "long_prefill_token_threshold: 256\n", name="capped.yaml")
    out = json.loads(CliRunner().invoke(main, ["simulate", str(capped), "--json"]).output)
    assert out["pools"][0]["predicted"]["itl_ms_p99"] is None


def test_simulate_replays_the_plan_solve_reports_where_the_scenario_says_verify_false(tmp_path):
    """With `verify: false`, solve reports the model's plan, uncertified; simulate certified another
    (finance_2027: 18 replicas "hold", where solve planned 17, which certification rejects). It replays
    the plan solve reports now, and says that nothing certified it."""
    path = write(tmp_path, SCENARIO + "verify: false\n")
    planned = json.loads(CliRunner().invoke(main, ["solve", str(path), "--no-report", "--json"]).output)
    r = CliRunner().invoke(main, ["simulate", str(path), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert (out["verify"], out["certified"]) == (False, None)
    assert [p["replicas"] for p in out["pools"]] == [p["replicas"] for p in planned["plan"]]
    assert [p["config"] for p in out["pools"]] == [f"{p['gpu']} tp{p['tp']} w:{p['weight_dtype']} kv:{p['kv_dtype']} "
                                                   f"ctx:{p['context_limit']}" for p in planned["plan"]]
    text = CliRunner().invoke(main, ["simulate", str(path)]).output
    assert text.startswith("Not certified: the scenario says `verify: false`, so `planner solve` reports the model's plan")


def test_simulate_no_verify_replays_the_plan_solve_no_verify_reports(tmp_path):
    """--no-verify replays the model's plan, as `planner solve --no-verify` reports it, whatever the
    scenario says; --verify certifies a scenario's plan that says `verify: false`."""
    path = write(tmp_path, SCENARIO)
    planned = json.loads(CliRunner().invoke(main, ["solve", str(path), "--no-report", "--no-verify", "--json"]).output)
    r = CliRunner().invoke(main, ["simulate", str(path), "--no-verify", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert (out["verify"], out["certified"]) == (False, None)
    assert [p["replicas"] for p in out["pools"]] == [p["replicas"] for p in planned["plan"]]
    text = CliRunner().invoke(main, ["simulate", str(path), "--no-verify"]).output
    assert text.startswith("Not certified: --no-verify, so `planner solve --no-verify` reports the model's plan")
    assert "--verify would" in text.splitlines()[0]
    unverified = write(tmp_path, SCENARIO + "verify: false\n", name="unverified.yaml")
    out = json.loads(CliRunner().invoke(main, ["simulate", str(unverified), "--verify", "--json"]).output)
    assert out["verify"] is True and out["certified"] is True


def test_simulate_takes_the_fewest_requests_a_certification_run_can_use(tmp_path):
    """simulation.band_requests may be 500, and a pool whose one band holds every request then runs
    556 a seed: the count the report shows must be one --requests takes (it refused under 1,000)."""
    from planner.bounds import MIN_BAND_REQUESTS, MIN_RUN_REQUESTS
    from planner.histogram import Histogram
    from planner.pool_check import requests_for
    from planner.simulate import DEFAULT_WARMUP_FRACTION
    from planner.targets import SLO

    slo = SLO.single(ttft_s=1.0, stat="p99")
    assert requests_for(Histogram.constant(1000, 200), slo, most=10**7, per_band=MIN_BAND_REQUESTS,
                        warmup_fraction=DEFAULT_WARMUP_FRACTION) == MIN_RUN_REQUESTS
    path = write(tmp_path)
    r = CliRunner().invoke(main, ["simulate", str(path), "--requests", str(MIN_RUN_REQUESTS), "--seed", "3", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["pools"][0]["requests_per_run"] == MIN_RUN_REQUESTS
    r = CliRunner().invoke(main, ["simulate", str(path), "--requests", str(MIN_RUN_REQUESTS - 1)])
    assert r.exit_code == 2 and f"{MIN_RUN_REQUESTS - 1} is not in the range {MIN_RUN_REQUESTS}<=x" in r.output


def test_a_config_priced_by_another_s_ratio_is_challenged_and_the_cheaper_certified_plan_wins(tmp_path):
    """finance_2027's third quarter with H200s at $3.20: an H100 pool misses (the model optimistic on
    it), and the class's ratio (0.91) then priced every H200 config too, which the model was not
    optimistic on. The plan certified at 23 x H100 for $68.77/hour, where 21 x H200 at $67.20/hour
    certifies planned alone (with gpus [h200]). Certification now solves again without the ratio,
    replays that plan, and keeps it where every pool holds: the plan costs no more than the H200
    plan certified alone, and says why it changed."""
    import yaml

    scn = yaml.safe_load((ROOT / "scenarios" / "finance_2027.yaml").read_text(encoding="utf-8"))
    scn.pop("forecast")
    scn["traffic"]["growth"] = 1.3225  # 1.15 a quarter, two quarters on
    scn["gpus"] = ["h100-sxm", {"id": "h200", "price_usd_per_hour": 3.20}, "l40s"]
    costs = {}
    for name, gpus in (("mixed", scn["gpus"]), ("alone", [{"id": "h200", "price_usd_per_hour": 3.20}])):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({**scn, "name": name, "gpus": gpus}), encoding="utf-8")
        r = CliRunner().invoke(main, ["solve", str(path), "--json", "--out-dir", str(tmp_path / name)])
        assert r.exit_code == 0, r.output
        out = json.loads(r.output)
        assert all(pool["holds"] for pool in out["plan"])
        costs[name] = out["cost_usd_per_hour"]
    assert costs["mixed"] == pytest.approx(costs["alone"], abs=1e-9)  # no more than the H200 plan certified alone
    report = (tmp_path / "mixed" / "mixed.md").read_text(encoding="utf-8")
    assert ("challenger 1: with no class's simulated / model ratio the plan costs $67.20/hour against $68.77/hour, "
            "and every pool holds in simulation at its rate: it replaces the plan") in report


def test_a_challenger_that_leaves_no_plan_keeps_the_certified_plan(monkeypatch):
    """A challenger's pool misses and is measured on a pair the certified plan runs too, and the
    re-solve with that measurement finds no plan (an inventory cap): the certified plan, which held
    in simulation, stands, and the report says why, rather than the run failing with "no plan
    holds"."""
    from contextlib import nullcontext
    from types import SimpleNamespace

    import planner.certification as cert

    recorded = []
    evaluator = SimpleNamespace(without_ratios=nullcontext, record_simulated=lambda e, rps, **kw: recorded.append(rps))
    st = SimpleNamespace(evaluator=evaluator)
    tc = SimpleNamespace(label="class 'all'", max_model_len=8192)
    pool = SimpleNamespace(traffic_class=tc, config=SimpleNamespace(label=lambda limit: "h200 tp1"))
    certified = SimpleNamespace(pools=["certified pool"], cost_per_hour=10.0)
    challenger = SimpleNamespace(pools=[pool], cost_per_hour=9.0)
    nothing = SimpleNamespace(pools=[], cost_per_hour=0.0, problem="")
    answers = iter([[(challenger, ["challenger evals"])], [(nothing, ["no evals"])]])
    monkeypatch.setattr(cert, "_priced_by_ratio", lambda *a: True)
    monkeypatch.setattr(cert, "pool_details", lambda ev, evals, sol: [pool] if sol is challenger else [])
    monkeypatch.setattr(cert, "_replay_all", lambda state, label: ([[]], [[(pool, SimpleNamespace(problems=["TTFT p99"], misses=("TTFT p99",), rate_rps=5.0))]]))
    monkeypatch.setattr(cert, "_measured_capacity", lambda *a: 0.5)
    monkeypatch.setattr(cert, "_evaluation", lambda evals, p: "evaluation")
    state = [[st, ["certified evals"], certified, ["certified pools"], []]]
    keyed = [[("certified pool", "its replay")]]

    assert cert._challenge(state, lambda evals: next(answers), keyed) is keyed
    assert state[0][:4] == [st, ["certified evals"], certified, ["certified pools"]]
    assert recorded == [0.5]
    assert state[0][4][-1] == "challenger 1: with what was measured no plan is found; the certified plan stands"


@pytest.mark.long
def test_a_looser_ttft_target_never_costs_more_than_the_certified_plan(tmp_path):
    """inventory_mixed certifies pools on three GPU types, each measured at its own simulated /
    model ratio (0.86 to 0.98). The TTFT sweep scaled every config by its class's least ratio, so
    the plan's own H100 and H200 pools lost capacity they held in simulation, and the rows x 1.5
    and x 2 priced one more L40S than the plan ($111.12 against $105.52), though a looser target
    is met by the plan itself. A measured config now keeps its own ratio."""
    import re

    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["solve", str(ROOT / "scenarios" / "inventory_mixed.yaml"), "--json", "--out-dir", str(out)])
    assert r.exit_code == 0, r.output
    cost = json.loads(r.output)["cost_usd_per_hour"]
    report = (out / "inventory_mixed.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| × ([\d.]+) \| \$([\d,.]+) \|", report, flags=re.M))
    assert set(rows) == {"0.5", "0.75", "1.5", "2"}
    for m in ("1.5", "2"):
        assert float(rows[m].replace(",", "")) <= round(cost, 2), (m, rows[m], cost)


def _azure_slice(tmp_path, name, keep):
    """The Azure conversation log's sample cut or altered by `keep` (rows -> rows), as a scenario."""
    import pandas as pd

    rows = pd.read_csv(ROOT / "data" / "samples" / "azure_conv_2023_sample.csv")
    keep(rows).to_csv(tmp_path / f"{name}.csv", index=False)
    text = (ROOT / "scenarios" / "azure_conv_trace.yaml").read_text(encoding="utf-8")
    text = text.replace("log: ../data/samples/azure_conv_2023_sample.csv", f"log: {name}.csv")
    assert f"log: {name}.csv" in text
    path = tmp_path / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_log_of_minutes_is_certified_on_its_latencies_not_its_filling(tmp_path):
    """The first three minutes of the Azure log (785 requests; its peak check accepts four clock
    minutes): each replica's share of the log's own arrivals was judged on its queue's trend from
    its empty start, whose filling read as growth at any number of replicas, and solve exited 3.
    The trend is now read past the share's first tenth, and on shares of 1,000 requests or more."""
    import pandas as pd

    def first_minutes(rows):
        t = pd.to_datetime(rows.TIMESTAMP)
        return rows[(t - t.min()).dt.total_seconds() < 180]

    path = _azure_slice(tmp_path, "az3", first_minutes)
    r = CliRunner().invoke(main, ["solve", str(path), "--json", "--no-report"])
    assert r.exit_code == 0, r.output
    (pool,) = json.loads(r.output)["plan"]
    assert pool["holds"] and pool["log_replay"]["holds"] and pool["log_replay"]["requests"] == 785


def test_a_log_stamped_in_whole_minutes_is_not_replayed_as_bursts(tmp_path):
    """Timestamps floored to the minute: the log's own arrivals put each minute's requests at one
    instant (333 on average), a burst the service never saw, and solve exited 3 on it. Such a log
    is not replayed, and the report says why; its per-minute peak is the same either way."""
    import pandas as pd

    def by_minute(rows):
        return rows.assign(TIMESTAMP=pd.to_datetime(rows.TIMESTAMP).dt.floor("min").astype(str))

    path = _azure_slice(tmp_path, "azmin", by_minute)
    r = CliRunner().invoke(main, ["solve", str(path), "--json", "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    (pool,) = json.loads(r.output)["plan"]
    assert pool["log_replay"] is None and pool["holds"]
    report = (tmp_path / "out" / "azure_conv_trace.md").read_text(encoding="utf-8")
    assert "The log's timestamps fall on whole minutes: its own arrivals are not replayed" in report


def test_a_rate_a_challenger_s_pool_held_at_is_planned_there_and_not_called_its_limit(catalog):
    """A challenger that replaces the plan records each ratio-priced pool's rate as the rate its config
    held at: the config is planned there, and the pools table says "held in simulation", not
    "simulated targets", which a bisection's limit earns (the 128k rollout's long pool, and the fleet's,
    read "simulated targets" at exactly their replay rates). Recorded again as a searched capacity, it is one."""
    from planner.plan_setup import setup_plan
    from planner.report import _bound_phrase, planned_binding

    scn, hist = _close_inputs()
    st = setup_plan(scn, catalog, catalog.model("llama-3.1-8b"), hist, 30.0)
    (cfg,), (tc,) = st.configs, st.classes["none"]
    ev = st.evaluator
    model = ev.evaluate(cfg, tc)
    assert model.planned_by == "model"
    ev.record_simulated(model, 12.5, calibrates=False, from_log=False, held=True)
    held = ev.evaluate(cfg, tc)
    assert (held.planned_by, held.capacity_rps) == ("held", 12.5)
    assert planned_binding("tpot", "held", None) == "held in simulation"
    assert _bound_phrase(held) == "at the rate it held its targets in simulation"
    ev.record_simulated(model, 11.0, calibrates=False, from_log=False)  # a bisection's: no longer a held rate
    assert ev.evaluate(cfg, tc).planned_by == "simulation"


def test_a_fleet_challenger_that_leaves_a_service_s_cost_as_it_was_says_so():
    """A fleet's services are solved again together when one's plan gets cheaper without the ratios:
    summarise_3b's section read "the plan costs $37.80/hour against $37.80/hour ... it replaces the
    plan", a change for nothing; a service whose cost stays, or rises while the fleet's falls, is
    told why its plan changed."""
    from planner.certification import _replaced_text

    tail = "and every pool holds in simulation at its rate: it replaces the plan"
    assert _replaced_text(1, 77.74, 83.72) == ("challenger 1: with no class's simulated / model ratio the plan costs "
                                               f"$77.74/hour against $83.72/hour, {tail}")
    fleet = ("challenger 2: the fleet was solved again with no class's simulated / model ratio, for another service's "
             "cheaper plan; this one's plan costs ")
    assert _replaced_text(2, 37.8, 37.8) == fleet + f"the same, $37.80/hour, {tail}"
    assert _replaced_text(2, 40.0, 37.8) == fleet + f"$40.00/hour against $37.80/hour, {tail}"


def test_a_fleet_forecast_s_quarters_keep_each_service_s_measured_capacity(tmp_path, monkeypatch):
    """make_fleet_plan with the forecast's store (planner.evaluator.Measurements, one per service): a
    quarter after the one that measured a service's pool plans it at that capacity, with no round."""


    from planner.fleet_plan import make_fleet_plan

    fleet, kept = _alpha_beta_fleet(tmp_path, monkeypatch), {}
    first = make_fleet_plan(fleet, explore=False, certify=True, measurements=kept)
    assert first.plans[0].certification.rounds >= 1 and set(kept) == {0, 1} and kept[0].rates and not kept[1].rates
    [measured] = first.plans[0].pools
    later = make_fleet_plan(fleet, explore=False, certify=True, growth=1.5, measurements=kept)
    [pool] = later.plans[0].pools
    assert later.plans[0].certification.rounds == 0 and later.plans[0].certification.certified
    assert (pool.planned_by, pool.planned_rps) == ("simulation", measured.planned_rps)


def test_a_challenger_that_misses_under_the_log_alone_names_the_target():
    """A challenger's pool that held its Poisson runs but missed under the log's own arrivals read
    "(the log replay)", naming no target, where a round's line names it; both now read the pool's
    misses (PoolCheck.misses)."""
    from types import SimpleNamespace

    from planner.certification import challenger_text
    from planner.pool_check import PoolCheck

    replay = SimpleNamespace(problems=("every prompt: TPOT p99 50.4 ms > 50 ms",))
    check = SimpleNamespace(problems=(), replay=replay, rate_rps=4.1)
    check.misses = PoolCheck.misses.fget(check)
    # and the rate the miss was read at, which is not the capacity the pool was planned at (replicas round up)
    assert challenger_text(1, "long (2,048 < tokens ≤ 16,384)", "h100-sxm tp1 w:fp8 kv:fp8 ctx:16384", check, 3.693) == (
        "challenger 1: long (2,048 < tokens ≤ 16,384) on h100-sxm tp1 w:fp8 kv:fp8 ctx:16384, planned at its model "
        "capacity, missed (the log's own arrivals: every prompt: TPOT p99 50.4 ms > 50 ms) replayed at 4.100 req/s a "
        "replica; measured 3.693 req/s per replica; the certified plan stands")


def test_a_pool_that_misses_only_under_the_log_s_bursts_gets_a_replica_more_each_round(tmp_path):
    """Held with Poisson arrivals at its planned rate, missed with the log's own (bursts of 60% of
    the arrivals in half a second every 20 s): each round plans the pool a replica's share below the
    rate its replicas carried, so the next round runs one more. A share below the capacity left a pool
    with slack at its count (an outside probe: 2 replicas planned at 11.845 and at 7.897 alike, the
    same miss each round) and exited 3 where a plan of 6 replicas holds."""
    import numpy as np

    rng = np.random.default_rng(20)
    n, span_s = 12_000, 960.0
    bursty = rng.random(n) < 0.6
    at_s = np.where(bursty, np.floor(rng.random(n) * span_s / 20) * 20 + rng.random(n) * 0.5, rng.random(n) * span_s)
    order = np.argsort(at_s)
    prompt, output = rng.integers(200, 1500, n)[order], rng.integers(20, 300, n)[order]
    stamps = (1_704_067_200_000 + at_s[order] * 1000).astype(np.int64)
    (tmp_path / "bursty.csv").write_text("prompt_tokens,output_tokens,timestamp_ms\n" + "".join(
        f"{p},{o},{t}\n" for p, o, t in zip(prompt, output, stamps, strict=True)), encoding="utf-8")
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\nmodel: llama-3.1-8b\ncontext_limit: 16384\n"
        "traffic: {source: {log: bursty.csv}, peak: {method: quantile, quantile: 0.99}, headroom: 1.2}\n"
        "slo: {statistic: p99, bands: [{ttft_s: 1.05, tpot_ms: 40}]}\nsizing: {mode: percentile, quantile: 0.99}\n"
        "gpus: [h100-sxm]\ntp: [1]\nweight_dtypes: [bf16]\nkv_dtypes: [bf16]\nsplit_thresholds: []\n", encoding="utf-8")
    r = CliRunner().invoke(main, ["solve", str(path), "--json", "--no-report"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    rounds = [c for c in out["certification_changes"] if "the log's own arrivals" in c]
    assert rounds and out["certified"] and out["certification_rounds"] == len(rounds)
    assert sum(p["replicas"] for p in out["plan"]) > len(rounds)  # one replica at least, and one more a round
    misses = [c.split(" missed (")[1].split("); planned at")[0] for c in rounds]
    assert len(set(misses)) == len(misses)  # every round changed the plan, so its replay


def test_a_log_far_busier_than_the_stated_peak_is_warned_of_and_simulate_says_its_plan_is_not_certified(tmp_path):
    """The Azure code sample's own p99 minute is 3.1 times a stated peak of 3 requests/s: a plan made
    without simulation was sized for the statement without a word; certification's replay of the
    log's arrivals refuses every re-plan (solve exits 3), and `planner simulate` printed the last
    re-plan's pools with exit 0 and nothing saying the plan is not certified (an outside probe)."""
    log = ROOT / "data" / "samples" / "azure_code_2023_sample.csv"
    path = tmp_path / "s.yaml"
    path.write_text(
        f"name: s\nmodel: llama-3.1-8b\ncontext_limit: 8192\n"
        f"traffic: {{source: {{log: {log}, preset: azure}}, peak: {{method: explicit, rps: 3.0}}, growth: 5.0, "
        "headroom: 1.1}\nslo: {statistic: p99, bands: [{ttft_s: 0.6, tpot_ms: 20}]}\n"
        "sizing: {mode: percentile, quantile: 0.99}\ngpus: [h100-sxm, l40s]\ntp: [1]\nweight_dtypes: [bf16, fp8]\n"
        "kv_dtypes: [bf16, fp8]\nsplit_thresholds: []\n", encoding="utf-8")
    r = CliRunner().invoke(main, ["solve", str(path), "--no-verify", "--no-report"])
    assert r.exit_code == 0, r.output
    assert re.search(r"warning: .*s\.yaml: The source's own p99 minute, 9\.\d+ req/s, is 3\.1× the stated peak, 3 req/s, "
                     r"far past what Poisson arrivals at the peak reach in theirs \(3\.\d+ req/s\): the plan is sized for the "
                     r"stated one", r.stderr)
    refused = CliRunner().invoke(main, ["solve", str(path), "--no-report"])
    assert refused.exit_code == 3
    # the Poisson runs held: the error says where the misses come from and what would plan past them
    assert refused.stderr.rstrip().endswith(
        "the log's own arrivals: every prompt: TPOT p99 " + refused.stderr.split("TPOT p99 ")[-1].split(" ms")[0]
        + " ms > 20 ms (its Poisson runs held: the log's own arrivals come in bursts above the planned peak, and each "
        "re-plan adds one replica; raise the peak planned for, traffic.peak, or allow more re-plans, simulation.max_rounds)")
    # Poisson arrivals at 0.1 req/s reach 2.1 times that in their own p99 minute: planned for, not warned of
    quiet = tmp_path / "q.yaml"
    quiet.write_text(path.read_text(encoding="utf-8").replace(
        f"{{log: {log}, preset: azure}}", "{synthetic: {name: chat, requests: 3000, seed: 1, rate_rps: 0.1}}").replace(
        "rps: 3.0}", "rps: 0.1}"), encoding="utf-8")
    r = CliRunner().invoke(main, ["solve", str(quiet), "--no-verify", "--no-report"])
    assert r.exit_code == 0 and "p99 minute" not in r.stderr, r.output
    # and exits 3 as solve does, once it has printed the runs that show why (a script gating on it stops)
    sim = CliRunner().invoke(main, ["simulate", str(path)])
    assert sim.exit_code == 3, sim.output
    assert sim.stdout.splitlines()[0].startswith(
        "Not certified: no plan holds its targets in simulation after 4 re-plans (`planner solve` exits 3 and writes "
        "no report); below, the last re-plan's pools")
    assert sim.stderr.endswith(f"error: {path}: not certified: no plan holds its targets in simulation (`planner "
                               "solve` refuses it)\n")
    as_json = CliRunner().invoke(main, ["simulate", str(path), "--json"])
    assert as_json.exit_code == 3 and json.loads(as_json.stdout)["certified"] is False


def test_a_tail_part_is_a_close_call_within_15_percent_whatever_few_requests_it_rests_on():
    """A part's "close call" is a label, not a re-read: fleet_2027q1's code_32b part, 60.2 ms against its
    50 ms limit on 1,299 requests (13 beyond its p99), and 109.3 ms by the model, read "a close call"
    when the label took the re-read's widened window (a second reading)."""
    from planner.pool_check import TailPart
    from planner.targets import SLO

    (band,) = SLO.single(tpot_ms=50).bands

    def part(simulated_s):
        return TailPart(band, band, 0.063, "tpot", "p99", 0.05, 0.1093, simulated_s, 1_299, True)

    assert part(0.0602).measured and not part(0.0602).close_call and part(0.0602).misses
    assert part(0.056).close_call and part(0.0440).close_call and not part(0.040).close_call


def test_the_line_solve_prints_says_when_nothing_was_simulated(tmp_path):
    """Without certification a plan's one line read as a certified plan's (an outside probe: a TPOT
    target "held (model)" on 5 GPUs missed by 16% replayed), and a stated fleet's as an audit that held."""
    planned = write(tmp_path, SCENARIO)
    r = CliRunner().invoke(main, ["solve", str(planned), "--no-verify", "--no-report"])
    assert r.exit_code == 0 and r.stdout.rstrip().endswith(" [by the model alone: not certified by simulation]"), r.output
    given = tmp_path / "given"
    given.mkdir()
    stated = write(given, SCENARIO + "fleet: [{gpu: h100-sxm, replicas: 3}]\n")
    r = CliRunner().invoke(main, ["solve", str(stated), "--no-verify", "--no-report"])
    assert r.exit_code == 0 and r.stdout.rstrip().endswith(" [audited by the model alone: not simulated]"), r.output
    r = CliRunner().invoke(main, ["solve", str(stated), "--no-report"])
    assert r.exit_code == 0 and "[" not in r.stdout, r.output


def test_a_simulated_capacity_is_lowered_until_the_pooled_verdict_holds_there(monkeypatch):
    """Runs judged alone read a p99 low: chat_8b_h100 at a peak of 36 was planned at a bisected 8.154
    a replica, where sixteen pooled runs read TPOT p99 52.6 ms against 50, and its report and day took
    that capacity for one that holds. The bisected rate is judged as certification judges a pool, and
    lowered by REPLAN_STEP while that verdict misses."""
    from types import SimpleNamespace

    import planner.certification as cert

    judged = []
    monkeypatch.setattr(cert, "pool_setting", lambda *a: SimpleNamespace(rate_rps=9.0, resident=1.0, name="p"))
    monkeypatch.setattr(cert, "run_requests", lambda *a: 1000)
    monkeypatch.setattr(cert, "capacity_on_every_run", lambda *a, **kw: 8.5)
    monkeypatch.setattr(cert.dataclasses, "replace", lambda s, **kw: SimpleNamespace(**{**vars(s), **kw}))

    seeds = []

    def check_pool(p, slo, *, requests, seed):
        judged.append(p.rate_rps)
        seeds.append(seed)
        return SimpleNamespace(holds=p.rate_rps < 8.1, seeds=list(range(seed, seed + 16)))

    monkeypatch.setattr(cert, "check_pool", check_pool)
    scn = SimpleNamespace(slo=SimpleNamespace(to_slo=lambda: None), simulation=SimpleNamespace(seed=0))
    pool = SimpleNamespace(replay_rps=9.0, deployment=SimpleNamespace(engine=SimpleNamespace(max_num_seqs=256)),
                           model=SimpleNamespace(resident_for_rate=lambda rate, n: rate))
    rate = cert._measured_capacity(SimpleNamespace(scn=scn), pool, [pool], SimpleNamespace(seeds=(0, 1, 2, 3)))
    step = 1 - cert.REPLAN_STEP
    assert judged == pytest.approx([8.5, 8.5 * step, 8.5 * step**2, 8.5 * step**3])
    assert rate == judged[-1] < 8.1 <= judged[-2]
    # judged on seeds the verdict (0-3) and the bisection did not run, and each lower rate on seeds
    # past the sixteen that missed above it: no seeds both stop the descent and confirm where it stops
    assert seeds == [4, 20, 36, 52]


def test_a_fresh_seed_is_past_every_seed_used_and_wraps_within_the_seeds_a_scenario_names():
    """A rate chosen because some seeds' runs held there is confirmed on seeds past them, which a
    scenario's `simulation.seed` or `planner simulate --seed` can name to replay it."""
    from planner.bounds import MAX_SEED
    from planner.pool_check import confirm_seeds, fresh_seed

    assert fresh_seed(confirm_seeds(0, 16)) == 16
    assert fresh_seed([7]) == 8
    assert fresh_seed(confirm_seeds(MAX_SEED - 1, 2)) == 0
    assert fresh_seed(confirm_seeds(MAX_SEED, 2)) == 1
    with pytest.raises(ValueError, match="seeds used"):
        fresh_seed([])


@pytest.mark.parametrize("draw", range(20))
def test_the_seeds_give_the_answer_of_running_them_one_by_one_and_only_later_misses_stop(monkeypatch, draw):
    """capacity_on_every_run: the first seed bisected from the pool's rate, each next one run at the
    rate found so far and bisected below it where it misses, the answer the least. The seeds of a
    round run side by side, and one that misses stops bisecting once an earlier one has missed (its
    bisection is never read): the answer is still the one-by-one answer, however the threads
    interleave, and the earliest seed to miss in a round is never stopped."""
    import random
    import threading
    import time
    from types import SimpleNamespace

    from planner import pool_check

    rng = random.Random(draw)
    seeds = tuple(range(rng.randint(1, 6)))
    capacity = {seed: rng.choice([4.0, 5.0, 6.0, 7.0, 9.0, 12.0]) for seed in seeds}
    stopped, finished, lock = [], [], threading.Lock()

    def bisected(_dep, _hist, _slo, *, seed, initial_rate_rps, wanted=None, **_):
        if capacity[seed] >= initial_rate_rps:  # holds at the rate it is asked first
            return SimpleNamespace(rate_rps=initial_rate_rps)
        for _ in range(4):  # a bisection's runs, each after asking whether it is still wanted
            if wanted is not None and not wanted():
                with lock:
                    stopped.append((initial_rate_rps, seed))
                return SimpleNamespace(rate_rps=0.0)
            time.sleep(0.001 * rng.random())
        with lock:
            finished.append((initial_rate_rps, seed))
        return SimpleNamespace(rate_rps=capacity[seed])

    monkeypatch.setattr(pool_check, "max_sustainable_rate", bisected)
    pool = SimpleNamespace(deployment=None, hist=None, rate_rps=10.0, shared_prefix_tokens=0)
    found = pool_check.capacity_on_every_run(pool, None, requests=100, seeds=seeds)

    one_by_one = pool.rate_rps
    for seed in seeds:
        one_by_one = min(one_by_one, capacity[seed])
    assert found == one_by_one
    for rate, seed in stopped:  # an earlier seed of the same round missed, and was bisected
        assert any(other < seed and capacity[other] < rate for other in seeds), (rate, seed)


def test_a_seed_is_told_to_stop_once_an_earlier_one_has_missed_and_the_earliest_never_is():
    from planner.pool_check import _EarliestMiss

    earliest = _EarliestMiss()
    asked = [(2, True), (1, True), (2, False), (3, False), (1, True), (0, True), (1, False)]
    assert [earliest.still(index) for index, _ in asked] == [answer for _, answer in asked]
