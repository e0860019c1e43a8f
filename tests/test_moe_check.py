"""The MoE speed check: published MoE throughput predicted and fitted on by nothing, its committed
summary in step with the data, and the warning a plan on a mixture of experts carries."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from planner.calibration.measured import load_trtllm_rows, measured_dir
from planner.calibration.moe_check import (
    CHECK_FILE,
    MOE_FILE,
    MoeCheck,
    committed_moe_check,
    moe_predictions,
)


def test_every_moe_row_is_built_and_none_is_in_the_fitted_file(catalog):
    rows = load_trtllm_rows(measured_dir() / MOE_FILE)
    assert len(rows) == 110 and all(r.skip_reason is None for r in rows)
    assert len(moe_predictions(catalog)) == len(rows)
    moe_ids = {r.model for r in rows}
    assert all(catalog.model(m).num_experts for m in {"qwen3-30b-a3b", "qwen3-235b-a22b", "llama-4-scout",
                                                       "llama-4-maverick"})
    # the efficiency factors stay fitted on dense models only: no MoE label in the fitted file
    assert not moe_ids & {r.model for r in load_trtllm_rows()}


def test_per_gpu_column_is_the_total_over_the_gpus():
    for r in load_trtllm_rows(measured_dir() / MOE_FILE):
        assert r.line and r.measured_tok_s_per_gpu > 0
    text = (measured_dir() / MOE_FILE).read_text(encoding="utf-8").splitlines()[1:]
    for line in text:
        fields = line.split(",")
        total, per_gpu, tp = float(fields[10]), float(fields[11]), int(fields[4])
        assert per_gpu == round(total / tp, 2)


def test_the_committed_summary_is_this_data_predicted_by_this_catalog(catalog):
    """data/measured/moe_check.yaml is what bench/calibration.py --write computes now: new rows or new
    factors without --write fail here."""
    fresh = MoeCheck.of(moe_predictions(catalog))
    assert committed_moe_check() == fresh
    assert (measured_dir() / CHECK_FILE).read_text(encoding="utf-8") == fresh.yaml_text()
    # one-GPU rows only: expert and attention data parallelism are not the replica the planner models
    assert fresh.rows == sum(1 for r in load_trtllm_rows(measured_dir() / MOE_FILE) if r.tp == 1)


def test_summary_is_the_median_and_range_of_the_one_gpu_errors(catalog):
    preds = moe_predictions(catalog)
    one = sorted(p.error_pct for p in preds if p.row.tp == 1)
    check = MoeCheck.of(preds)
    assert check.low_error_pct == round(one[0], 1) and check.high_error_pct == round(one[-1], 1)
    middle = len(one) // 2
    assert check.median_error_pct == round((one[middle - 1] + one[middle]) / 2 if len(one) % 2 == 0 else one[middle], 1)
    # the rows show the model optimistic for MoE on one GPU, which is what the warning says
    assert check.median_error_pct > 0 and "more throughput than measured" in check.finding()


def test_a_plan_on_a_mixture_of_experts_warns_and_a_dense_one_does_not(catalog):
    from test_planning import scenario, traffic

    from planner.plan_json import plan_json
    from planner.planning import make_plan
    from planner.report import render

    scn = scenario(context_limit=8192, gpus=["h100-sxm"], tp=[1])
    load = traffic(1000, (1000, 200), 0, (1000, 200))
    moe = make_plan(scn, catalog, catalog.model("qwen3-30b-a3b"), load, 5.0)
    decision = render(moe).split("## Decision", 1)[1].split("\n## ", 1)[0]
    assert "**UNVERIFIED: qwen3-30b-a3b is a mixture of experts, whose speed is not calibrated**" in decision
    assert committed_moe_check().finding() in decision
    entries = json.loads(json.dumps(plan_json(moe)))["speed_unverified"]
    assert [(e["kind"], e["id"]) for e in entries] == [("model", "qwen3-30b-a3b")]

    dense = make_plan(scn, catalog, catalog.model("llama-3.1-8b"), load, 5.0)
    assert "UNVERIFIED" not in render(dense) and plan_json(dense)["speed_unverified"] == []


def _moe_plan(catalog, peak_rps: float = 40.0):
    from test_planning import scenario, traffic

    from planner.planning import make_plan

    scn = scenario(context_limit=8192, gpus=["h100-sxm"], tp=[1])
    return make_plan(scn, catalog, catalog.model("qwen3-30b-a3b"), traffic(1000, (1000, 200), 0, (1000, 200)), peak_rps)


def test_the_exposure_is_what_the_slowdown_adds_at_the_cheapest_pool_per_request():
    """k more replicas of the pool that adds a request/s most cheaply cover the rate when
    sum(n·c)/f + k·c_b/f >= rate; what the class lacked before any slowdown is not the error's."""
    from planner.verification import PoolSupply, replicas_short

    one = PoolSupply(replicas=1, capacity_rps=14.41, gpus_per_replica=1, usd_per_gpu_hour=2.99)
    assert replicas_short(48.0, [one], 1.0) == (one, 0)
    # a stated fleet already 3 short (48 / 14.41 = 3.33 replicas over the one it has): 6 short at
    # 1.809 (48 x 1.809 / 14.41 = 6.03 replicas), so the error adds 3, not 6
    assert replicas_short(48.0, [one], 1.809) == (one, 3)
    # two pools of a class: one more replica of either covers 10 req/s at 1.2 (12 needed, 11 held);
    # the 2.5 req/s pool adds a request/s more cheaply at the same price per replica
    small = PoolSupply(replicas=3, capacity_rps=2.0, gpus_per_replica=1, usd_per_gpu_hour=1.0)
    large = PoolSupply(replicas=2, capacity_rps=2.5, gpus_per_replica=1, usd_per_gpu_hour=1.0)
    assert replicas_short(10.0, [small, large], 1.2) == (large, 1)
    # ... unless its GPUs cost more per request/s
    dear = PoolSupply(replicas=2, capacity_rps=2.5, gpus_per_replica=2, usd_per_gpu_hour=1.0)
    assert replicas_short(10.0, [small, dear], 1.2) == (small, 1)
    assert replicas_short(10.0, [small, dear], 1.5) == (small, 2)  # 15 needed, 11 held: 2 x 2.0


def test_a_plan_on_a_mixture_of_experts_carries_its_exposure_in_report_and_json(catalog):
    from planner.plan_json import plan_json
    from planner.report import render
    from planner.verification import throughput_exposure, unverified_speed

    moe = _moe_plan(catalog)
    e = committed_moe_check().median_error_pct
    (pool,) = moe.pools
    held_rps = pool.replicas * pool.planned_rps
    more = math.ceil((pool.traffic_class.rate_rps * (1 + e / 100) - held_rps) / pool.planned_rps)
    assert more > 0  # an 81% slower replica: this plan's spare capacity does not cover it
    exposure = throughput_exposure(moe, e)
    assert (exposure.extra_replicas, exposure.extra_gpus, exposure.unsized_classes) == (more, more * pool.config.tp, 0)
    assert exposure.extra_usd_per_hour == pytest.approx(more * pool.config.tp * catalog.gpu("h100-sxm").price_usd_per_hour)
    assert unverified_speed(moe)[0].exposure == exposure
    assert (f"takes {more} more replicas (where a class runs short, on its pool that costs least per request/s)"
            in render(moe))
    entry = json.loads(json.dumps(plan_json(moe)))["speed_unverified"][0]
    assert entry["exposure"] == {"speed_overstated_pct": e, "extra_replicas": more, "extra_gpus": more * pool.config.tp,
                                 "extra_usd_per_hour": exposure.extra_usd_per_hour, "unsized_classes": 0,
                                 "held_classes": 0}
    assert "that is throughput alone, a floor: slower steps" in exposure.text() and "may need" not in exposure.text()
    # a pool counted at a rate it held its targets at (its limit, above, not searched): the count may overstate
    held = dataclasses.replace(moe, pools=[dataclasses.replace(pool, planned_by="held")])
    assert throughput_exposure(held, e).held_classes == 1
    assert ("a floor where a pool is counted at its limit: slower steps also lengthen TTFT and TPOT, which can need "
            "more; one class short is counted at the rate its pool held its targets at in simulation, below a limit no "
            "search found, and may need fewer") in throughput_exposure(held, e).text()
    assert throughput_exposure(held, 0.0).held_classes == 0  # (not short: nothing to qualify)
    # a speed model that is right needs nothing more; a worse error never needs less
    assert throughput_exposure(moe, 0.0).extra_replicas == 0
    assert "the plan's spare capacity still covers the rates it plans for" in throughput_exposure(moe, 0.0).text()
    needs = [throughput_exposure(moe, pct).extra_replicas for pct in (0.0, 20.0, e, 200.0, 545.0)]
    assert needs == sorted(needs) and needs[-1] > more


def test_the_fleet_headline_adds_up_the_exposure_of_its_mixtures_of_experts(catalog):
    from planner.fleet_report import fleet_exposure, unverified_services
    from planner.verification import throughput_exposure, unverified_speed

    moe = _moe_plan(catalog)
    plans = [dataclasses.replace(moe, scenario=moe.scenario.model_copy(update={"name": name})) for name in ("a", "b")]
    one = unverified_speed(moe)[0].exposure
    (line, _) = unverified_services(plans)
    assert line.startswith("**Speed not backed by a measurement of its own**: a (qwen3-30b-a3b, a mixture of experts), "
                           "b (qwen3-30b-a3b, a mixture of experts); if the speed model overstates the throughput of a, b")
    assert fleet_exposure(plans) == {"services": ["a", "b"], "speed_overstated_pct": one.overstated_pct,
                                     "extra_gpus": 2 * one.extra_gpus, "extra_usd_per_hour": 2 * one.extra_usd_per_hour,
                                     "held_classes": 0}
    assert (f"covering the rates they plan for takes {2 * one.extra_gpus} GPUs more "
            f"(+${2 * one.extra_usd_per_hour:,.2f}/hour at on-demand prices) on throughput alone;") in line
    held = [dataclasses.replace(p, pools=[dataclasses.replace(p.pools[0], planned_by="held")]) for p in plans]
    (line, _) = unverified_services(held)
    assert ("on throughput alone (fewer where a class is counted at the rate its pool held its targets at in "
            "simulation, below a limit no search found);") in line
    # where their spare capacity covers the slowdown, the line says so rather than "0 GPUs more"
    at_ease = _moe_plan(catalog, 5.0)
    assert throughput_exposure(at_ease, committed_moe_check().median_error_pct).extra_gpus == 0
    (line, _) = unverified_services([at_ease])
    assert "their spare capacity still covers the rates they plan for on throughput alone" in line
    assert "0 GPUs" not in line


def test_a_forecast_names_the_speed_its_quarters_rest_on(catalog):
    """A forecast priced every quarter on a speed no measurement backs without a word, where the plan's
    report leads with it (fleet_2027q1's forecast, its fleet report warning of 3 GPUs more at the median
    MoE error): its Markdown says so, once per service and model, with the quarters where not in all."""
    from planner.forecast_outputs import unverified_speed_lines

    moe = _moe_plan(catalog)
    assert unverified_speed_lines([("2027Q1", moe), ("2027Q2", moe)]) == [
        "**Speed not backed by a measurement of its own**, in the quarters' plans: qwen3-30b-a3b (a mixture of "
        "experts); those quarters' GPUs and cost rest on the speed model there: a mixture of experts' speed may be "
        "overstated by the median error measured on published rows, and the plan's report (`planner solve`) says "
        "what that would need more at the base demand.", ""]
    named = [dataclasses.replace(moe, scenario=moe.scenario.model_copy(update={"name": n})) for n in ("a", "b", "a")]
    (line, _) = unverified_speed_lines(list(zip(("2027Q1", "2027Q1", "2027Q2"), named, strict=True)), services=True)
    assert ("in the quarters' plans: a (qwen3-30b-a3b, a mixture of experts), b (qwen3-30b-a3b, a mixture of experts; "
            "2027Q1); those quarters'") in line and "the fleet's report (`planner solve` on the fleet file)" in line
    assert unverified_speed_lines([("2027Q1", dataclasses.replace(moe, pools=[]))]) == []
