"""The day's load curve: profiles (stated, named, measured from a log) and the four ways to pay for a day."""

from __future__ import annotations

import math

import numpy as np
import pytest
from clirun import run
from scenario_files import write_scenario

from planner.daily import DayPool, day_costs, period_cost, scale_segments, scenario_terms
from planner.inputs import load_inputs, plan_inputs
from planner.load_profile import diurnal_multipliers

BASE = """
name: day
model: llama-3.1-8b
context_limit: 8192
traffic:
  source: {constant: {prompt_tokens: 1000, output_tokens: 200}}
  peak: {method: explicit, rps: 60}
  mean_rps: 50
  headroom: 1.2
gpus: [h100-sxm, l40s]
tp: [1]
weight_dtypes: [bf16]
kv_dtypes: [bf16]
"""


def scenario(tmp_path, extra: str, base: str = BASE):
    return write_scenario(tmp_path, base, extra, name="day.yaml")


def costs_of(path):
    inputs = load_inputs(path)
    plan = plan_inputs(inputs, explore=False)
    on_demand = {c.id: c.price_per_hour(plan.catalog.gpu(c.id).price_usd_per_hour) for c in plan.scenario.gpu_candidates}
    return plan, day_costs(plan, inputs.traffic.profile, scenario_terms(plan.scenario, on_demand))


def test_diurnal_shape_has_the_stated_peak_to_trough_ratio():
    m = diurnal_multipliers(3.0, 14)
    assert m[14] == 1.0
    assert m[2] == pytest.approx(1 / 3, rel=1e-15)
    assert max(m) / min(m) == pytest.approx(3.0, rel=1e-12)
    assert m[13] == pytest.approx(m[15], rel=1e-15)  # symmetric about the peak


THREE_TO_ONE = """
traffic:
  source: {constant: {prompt_tokens: 1000, output_tokens: 200}}
  peak: {method: explicit, rps: 60}
  mean_rps: 50
  headroom: 1.2
  profile: {shape: diurnal, peak_to_trough: 3, peak_hour: 15}
autoscaling: {scale_up_lead_min: 10, reserved_discount: 0.3}
"""


def three_to_one(tmp_path):
    base = BASE.split("traffic:")[0] + "gpus:" + BASE.split("gpus:")[1]
    return scenario(tmp_path, THREE_TO_ONE, base)


def test_reserved_plus_on_demand_costs_no_more_than_either_pure_policy(tmp_path):
    plan, c = costs_of(three_to_one(tmp_path))
    assert c.profile.peak_to_trough == pytest.approx(3.0)
    mixed, reserved, auto, on_demand = (c.policy(k).usd_per_day for k in ("mixed", "peak_reserved", "autoscaled", "peak_on_demand"))
    assert mixed <= reserved + 1e-9
    assert mixed <= auto + 1e-9
    assert mixed < on_demand
    # Strictly cheaper than both here: some replicas are needed all day, others only at the peak.
    assert mixed < min(reserved, auto) - 1.0
    # The peak-sized fleet all day at on-demand prices is what the plan costs.
    assert c.policy("peak_on_demand").usd_per_hour == pytest.approx(plan.cost_per_hour)
    assert c.policy("peak_reserved").usd_per_hour == pytest.approx(plan.cost_per_hour * 0.7)


def test_every_hour_holds_its_load_times_headroom(tmp_path):
    plan, c = costs_of(three_to_one(tmp_path))
    for pd in plan.pools:
        name = f"{pd.traffic_class.name}: {pd.config.label(pd.traffic_class.max_model_len)}"
        assert c.peak_replicas[name] == pd.replicas
    for key in ("peak_on_demand", "peak_reserved", "autoscaled", "mixed"):
        pol = c.policy(key)
        for hour, m in enumerate(c.profile.multipliers):
            for tc in {pd.traffic_class.name: pd.traffic_class for pd in plan.pools}.values():
                load = plan.peak_rps * tc.share * m * plan.scenario.traffic.headroom
                assert c.capacity_rps(key, tc.name, hour) >= load * (1 - 1e-9), (key, hour)
            for p in c.pools:
                assert p.capacity_rps * pol.serving(p.name, hour) >= c.loads_rps[p.name][hour] * (1 - 1e-9)
                assert pol.serving(p.name, hour) >= p.min_replicas


def test_the_mix_is_the_cheapest_found_by_enumerating_every_reserved_count(tmp_path):
    _, c = costs_of(three_to_one(tmp_path))
    segments = scale_segments(c.profile.hours, c.terms.lead_min)
    best = math.inf
    counts = [range(c.peak_replicas[p.name] + 1) for p in c.pools]
    for reserved in np.array(np.meshgrid(*counts)).T.reshape(-1, len(c.pools)):
        res = {p.name: int(n) for p, n in zip(c.pools, reserved, strict=True)}
        od = {
            p.name: tuple(max(0, max(p.min_replicas, math.ceil(load / p.capacity_rps * (1 - 1e-9))) - res[p.name])
                          for load in c.loads_rps[p.name])
            for p in c.pools
        }
        best = min(best, period_cost(c.pools, res, od, segments)[0])
    assert c.policy("mixed").usd_per_period == pytest.approx(best, abs=1e-6)


@pytest.mark.parametrize("lead_min", [0, 10, 45, 60, 75, 150])
def test_scale_up_lead_time_is_paid_minute_by_minute(lead_min):
    rng = np.random.default_rng(lead_min)
    need = tuple(int(x) for x in rng.integers(0, 9, size=24))
    pool = DayPool("p", "p", "g", 2, 1.0, 0, 3.0, 2.0)
    usd, gpu_hours = period_cost([pool], {}, {"p": need}, scale_segments(24, lead_min))
    # A replica serving hour h runs from minute 60 h − lead (on the cyclic day) to 60 (h + 1).
    minutes = np.zeros(24 * 60)
    for h, n in enumerate(need):
        for t in range(60 * h - lead_min, 60 * (h + 1)):
            minutes[t % (24 * 60)] = max(minutes[t % (24 * 60)], n)
    assert gpu_hours == pytest.approx(2 * minutes.sum() / 60, rel=1e-12)
    assert usd == pytest.approx(3.0 * minutes.sum() / 60, rel=1e-12)


def test_cost_per_token_is_at_the_days_real_volume(tmp_path):
    _, c = costs_of(three_to_one(tmp_path))
    # The source is the busiest hour (50 req/s on average); the cosine day's mean is 2/3 of it.
    assert c.profile.mean_multiplier == pytest.approx((1 + 1 / 3) / 2, rel=1e-12)
    assert c.mean_rps == pytest.approx(50 * 2 / 3, rel=1e-12)
    assert c.tokens_per_day == pytest.approx(50 * 2 / 3 * 86_400 * 1200, rel=1e-12)
    for key in ("peak_on_demand", "autoscaled", "mixed"):
        pol = c.policy(key)
        assert c.usd_per_million_tokens(key) == pytest.approx(pol.usd_per_day / c.tokens_per_day * 1e6, rel=1e-12)
        assert pol.usd_per_month == pytest.approx(pol.usd_per_day / 24 * 730, rel=1e-12)


def test_the_days_mean_rate_is_printed_as_the_product_it_is(tmp_path):
    """The volume line shows the busiest hour's mean rate and the multipliers, so that a reader can
    multiply them back to the mean (finance_2027's 267.22 req/s came from a 400.83 it did not print).
    The factors carry six digits: here 50 × 0.6667 × 1.3 would read 43.34 where the mean is 43.33."""
    import re

    from planner.daily import day_markdown

    grown = three_to_one(tmp_path).read_text(encoding="utf-8").replace("  headroom: 1.2\n", "  headroom: 1.2\n  growth: 1.3\n")
    path = tmp_path / "grown.yaml"
    path.write_text(grown, encoding="utf-8")
    _, c = costs_of(path)
    line = next(x for x in day_markdown(c).splitlines() if x.startswith("The day's volume:"))
    found = re.search(r"\(([\d.,]+) requests/s on average: the busiest hour's mean rate, ([\d.,]+) requests/s "
                      r"\(traffic\.mean_rps\), × ([\d.]+) \(the period's mean ÷ its busiest hour's\), × growth "
                      r"([\d.]+)\)", line)
    assert found, line
    mean, busiest, multiplier, growth = (float(g.replace(",", "")) for g in found.groups())
    assert (busiest, growth) == (50.0, 1.3) and mean == round(c.mean_rps, 2) == 43.33
    assert round(busiest * multiplier * growth, 2) == mean  # the printed factors give the printed mean


def test_a_weekly_profile_prices_a_week_and_quotes_a_day(tmp_path):
    week = [1.0] * 120 + [0.25] * 48  # weekdays busy, the weekend at a quarter
    base = BASE.split("traffic:")[0] + "gpus:" + BASE.split("gpus:")[1]
    path = scenario(tmp_path, THREE_TO_ONE.replace("{shape: diurnal, peak_to_trough: 3, peak_hour: 15}", f"{{hourly: {week}}}"), base)
    _, c = costs_of(path)
    assert c.profile.hours == 168
    auto = c.policy("autoscaled")
    assert auto.usd_per_day == pytest.approx(auto.usd_per_period / 7)
    assert c.policy("peak_on_demand").usd_per_day == pytest.approx(c.policy("peak_on_demand").usd_per_period / 7)
    assert c.policy("mixed").usd_per_day <= auto.usd_per_day + 1e-9


def write_two_day_log(path, days: int = 2):
    """Arrivals at (hour of day + 1) per minute, for `days` days and two minutes (the first and last
    minutes of a log are partial and dropped), from a midnight."""
    start = 1_700_006_400  # 2023-11-15 00:00:00 UTC, a Wednesday
    rows = ["p,o,t"]
    for minute in range(-1, days * 1440 + 1):
        hour = (minute // 60) % 24
        for i in range(hour + 1):
            rows.append(f"100,10,{start + 60 * minute + i * 60 / (hour + 1):.3f}")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")


LOG = """
name: logged
model: llama-3.1-8b
context_limit: 8192
traffic:
  source: {{log: two_days.csv, columns: {{prompt: p, output: o, time: t}}, time_unit: s}}
  peak: {{method: max}}
{profile}gpus: [h100-sxm]
tp: [1]
weight_dtypes: [bf16]
kv_dtypes: [bf16]
"""


@pytest.mark.parametrize("profile", ["", "  profile: {measured: true}\n"])
def test_a_log_that_spans_a_day_gives_its_own_profile(tmp_path, profile):
    write_two_day_log(tmp_path / "two_days.csv")
    path = tmp_path / "logged.yaml"
    path.write_text(LOG.format(profile=profile), encoding="utf-8")
    prof = load_inputs(path).traffic.profile
    assert prof.hours == 24
    assert prof.multipliers == pytest.approx([(h + 1) / 24 for h in range(24)], rel=1e-12)
    assert prof.busiest_hour_rps == pytest.approx(24 / 60, rel=1e-12)
    assert "measured" in prof.source


def test_a_weekday_profile_needs_a_week_of_log(tmp_path):
    write_two_day_log(tmp_path / "two_days.csv")
    path = tmp_path / "logged.yaml"
    path.write_text(LOG.format(profile="  profile: {measured: true, by_weekday: true}\n"), encoding="utf-8")
    r = run("forecast", path)
    assert r.exit_code == 2
    assert r.output.strip() == (
        f"error: {path}: traffic: profile: a measured profile needs a log spanning a week or more "
        "(48.0 hours of whole minutes)"
    )


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        ("{hourly: [1, 2, 3]}", "traffic.profile: hourly needs 24 values (or 168, a week), got 3"),
        ("{shape: diurnal}", "traffic.profile: shape 'diurnal' needs peak_to_trough"),
        ("{shape: flat, hourly: [1]}", "traffic.profile: give exactly one of measured: true, hourly, shape"),
        ("{shape: weekly}", "traffic.profile.shape: Input should be 'flat' or 'diurnal'"),
        # it read "a measured profile needs a log spanning a day or more": the source is no log
        ("{measured: true}", "traffic: profile: measured: a constant source has no arrival times to measure a day "
                             "from; state the day"),
    ],
)
def test_bad_profiles_exit_2_naming_the_field(tmp_path, profile, expected):
    path = scenario(tmp_path, "", BASE.replace("  headroom: 1.2\n", f"  headroom: 1.2\n  profile: {profile}\n"))
    r = run("solve", path, "--out-dir", tmp_path / "out")
    assert r.exit_code == 2, r.output
    assert expected in r.output
    assert not (tmp_path / "out").exists()


def test_reserved_terms_are_stated_once(tmp_path):
    path = scenario(tmp_path, """
        autoscaling: {reserved_discount: 0.3}
        forecast: {reserved_discount: 0.4, quarters: [{quarter: 2027Q1}]}
    """)
    r = run("solve", path, "--no-report")
    assert r.exit_code == 2
    assert "give reserved terms once: forecast.reserved_discount / reserved_prices, or autoscaling.reserved_discount" in r.output


def test_the_solve_report_prices_the_day(tmp_path):
    path = three_to_one(tmp_path)
    r = run("solve", path, "--out-dir", tmp_path / "out")
    assert r.exit_code == 0, r.output
    md = (tmp_path / "out" / "day.md").read_text(encoding="utf-8")
    _, c = costs_of(path)
    assert "## The day's load curve" in md
    for key in ("peak_on_demand", "peak_reserved", "autoscaled", "mixed"):
        pol = c.policy(key)
        assert f"| {pol.name} | ${pol.usd_per_day:,.2f} | ${pol.usd_per_month:,.2f} |" in md
    # A flat day (no profile) has nothing to add, unless a mean rate below the peak is stated: finance's
    # mean load, at which a token costs more than at the peak (tests/test_scenario.py checks the price)
    flat = scenario(tmp_path, "", BASE.replace("  mean_rps: 50\n", ""))
    assert run("solve", flat, "--out-dir", tmp_path / "flat").exit_code == 0
    assert "The day's load curve" not in (tmp_path / "flat" / "day.md").read_text(encoding="utf-8")
    stated = scenario(tmp_path, "")
    assert run("solve", stated, "--out-dir", tmp_path / "stated").exit_code == 0
    assert "A flat day reaches its peak in every hour" in (tmp_path / "stated" / "day.md").read_text(encoding="utf-8")


def test_an_equal_cost_reads_same_not_minus_zero():
    from planner.daily import _versus

    assert [_versus(x) for x in (-1e-9, 0.0, 0.1234, -0.25)] == ["same", "same", "+12.3%", "−25.0%"]


def test_a_stated_fleet_that_carries_none_of_a_class_is_audited_without_a_day_or_forecast(tmp_path):
    """A stated fleet whose every replica holds nothing within the targets (capacity 0) under a priced
    day divided by zero; its audit is reported (exit 0) with the day and the forecast named as not
    priced, and `planner forecast`, which must price them, says why in one line (exit 3). A pool of
    capacity 0 beside one that carries the class takes no share of the load."""
    fleet = ("slo: {bands: [{ttft_s: 0.001}]}\nverify: false\n"
             "fleet:\n  - {gpu: l4, tp: 1, weight_dtype: bf16, kv_dtype: bf16, replicas: 4}\n"
             "forecast:\n  quarters:\n    - {quarter: 2027Q1, growth: 0.0}\n")
    path = scenario(tmp_path, fleet, BASE.replace("gpus: [h100-sxm, l40s]", "gpus: [h100-sxm, l40s, l4]"))
    r = run("solve", path, "--out-dir", tmp_path / "out")
    assert r.exit_code == 0, r.output
    report = (tmp_path / "out" / "day.md").read_text(encoding="utf-8")
    why = ("no replica of the fleet carries any of class 'all' within the targets (capacity 0 req/s), so no number "
           "of them holds an hour's load")
    assert f"## The day's load curve\n\nThe day's policies cannot be priced: {why}." in report
    assert f"## Forecast: day\n\nNot run: the day's policies cannot be priced: {why}." in report
    r = run("forecast", path, "--out-dir", tmp_path / "fc")
    assert r.exit_code == 3 and r.output.strip().endswith(f"the day's policies cannot be priced: {why}"), r.output
    assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "fc").exists()

    from planner.daily import _needed

    assert _needed(0.0, 0.0, 2) == 2 and _needed(10.0, 4.0, 1) == 3


def test_a_day_mix_without_an_answer_names_the_time_limit(tmp_path, monkeypatch):
    """The mix always exists (every hour needs no more than the plan's peak): a solve that ends
    without one ran out of time, whatever status the solver gives (this one reads 'Infeasible')."""
    import planner.daily as daily
    from planner.day_mix_ilp import DayMixSolution
    from planner.errors import InfeasibleError

    path = three_to_one(tmp_path)
    monkeypatch.setattr(daily, "solve_day_mix",
                        lambda *a, **k: DayMixSolution("Infeasible", {}, {}, math.inf, 0.0, "PULP_CBC_CMD"))
    with pytest.raises(InfeasibleError, match=r"ended with status 'Infeasible' within solver.time_limit_s = 60 s; "
                                              r"raise solver.time_limit_s$"):
        costs_of(path)


def test_a_certified_plan_s_day_loads_no_replica_past_the_rate_it_held_in_simulation(tmp_path):
    """Certification replays each pool at its share of the peak × headroom; where the capacity is not
    a rate held in simulation, a quiet hour's replicas carry at most that rate, not the model's capacity
    (an outside replay of a plan certified at 7.20 requests/s a replica put the model's 8.65 on a
    replica in the busy hours of the day and missed TPOT p99 by a third)."""
    from planner.daily import capacity_planned_by, day_markdown

    plan, c = costs_of(three_to_one(tmp_path))
    assert plan.certification is not None and plan.certification.certified
    assert any(pd.planned_by == "model" for pd in plan.pools)  # the case tested (a bisected one: the test below)
    for pd in plan.pools:
        name = f"{pd.traffic_class.name}: {pd.config.label(pd.traffic_class.max_model_len)}"
        [pool] = [p for p in c.pools if p.name == name]
        if pd.held_where_planned:
            assert pool.capacity_rps == pd.planned_rps
            continue
        if pd.planned_by != "model":  # (the text below is the model's; a bisected one's: the test below)
            continue
        assert pd.replay_rps < pd.planned_rps  # the model's capacity is above what was replayed
        assert pool.capacity_rps == pd.replay_rps
        for hour, load in enumerate(c.loads_rps[name]):
            assert load / c.policy("autoscaled").serving(name, hour) <= pd.replay_rps * (1 + 1e-9)
        assert (f"{pd.replay_rps:,.3f} req/s per replica (the rate its replicas held their targets at in simulation; "
                f"the model's capacity, {pd.planned_rps:,.3f}, was not simulated)") in day_markdown(c)
        assert capacity_planned_by(pd, plan) == "replayed"  # the forecast's pools CSV says so


def test_a_stated_fleet_s_quiet_hours_put_no_replica_past_the_rate_it_held_at_its_peak(tmp_path):
    """A stated fleet is replayed at its peak, without the headroom: its day carries each hour's load
    x headroom at up to that rate x headroom (the headroom the model's estimate, as its verdict
    says), so an hour's real load puts no replica past what held. Its quiet hours had packed
    replicas to the model's capacity, 40% past the replayed rate (a second reading of 3024180)."""
    from planner.daily import day_markdown

    text = BASE.replace("tp: [1]", "tp: [1]\nfleet: [{gpu: h100-sxm, tp: 1, weight_dtype: bf16, kv_dtype: bf16, replicas: 6}]")
    plan, c = costs_of(scenario(tmp_path, THREE_TO_ONE, text.split("traffic:")[0] + "gpus:" + text.split("gpus:")[1]))
    assert plan.certification is not None and plan.certification.certified and plan.scenario.fleet
    (pd,) = plan.pools
    (pool,) = c.pools
    headroom = plan.scenario.traffic.headroom
    assert pd.replay_rps * headroom < pd.planned_rps  # the premise: room past the headroom, by the model
    assert pool.capacity_rps == pytest.approx(pd.replay_rps * headroom)
    auto = c.policy("autoscaled")
    for hour, load in enumerate(c.loads_rps[pool.name]):  # load x headroom: the real load is 1 / headroom of it
        assert load / headroom / auto.serving(pool.name, hour) <= pd.replay_rps * (1 + 1e-9)
    assert (f"{pool.capacity_rps:,.3f} req/s per replica (the rate its replicas held their targets at in simulation "
            f"at the peak, {pd.replay_rps:,.3f}, × headroom {headroom:g}, the model's estimate; the model's capacity, "
            f"{pd.planned_rps:,.3f}, was not simulated)") in day_markdown(c)


def test_the_day_loads_a_replica_to_its_capacity_only_where_that_rate_held_as_certification_judges():
    """The model's capacity, a bound, a ratio's, or a log's share worked out below a miss were never
    replayed at that rate: the day sizes such a pool by the rate it held (an outside replay put the
    model's 8.65 on replicas certified at 7.2 and missed TPOT p99 by a third). A rate held, or a
    simulated capacity, which certification confirms on runs pooled at that rate, was."""
    from types import SimpleNamespace

    from planner.daily import capacity_planned_by, capacity_source, replica_capacity_rps
    from planner.plan_objects import PoolDetail

    def pool_of(planned_by: str) -> SimpleNamespace:
        pool = SimpleNamespace(planned_by=planned_by, planned_rps=8.154, replay_rps=7.2)
        pool.held_where_planned = PoolDetail.held_where_planned.fget(pool)
        return pool

    plan = SimpleNamespace(certification=SimpleNamespace(certified=True), scenario=SimpleNamespace(fleet=None))
    for held in ("held", "simulation"):
        assert replica_capacity_rps(pool_of(held), plan) == 8.154
    for untested in ("model", "calibration", "bound", "log"):
        assert replica_capacity_rps(pool_of(untested), plan) == 7.2
    log = pool_of("log")
    assert capacity_planned_by(log, plan) == "replayed"
    assert capacity_source(log, plan) == (" (the rate its replicas held their targets at in simulation; a replica's share "
                                          "below the rate the log's arrivals missed at, 8.154, was not judged at that "
                                          "rate as certification judges a pool)")
    assert replica_capacity_rps(log, SimpleNamespace(certification=None, scenario=plan.scenario)) == 8.154
