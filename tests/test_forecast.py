"""Quarterly forecasts: flat equals single solve, token accounting, commitments, bad input."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from clirun import run
from contract import one_line_error
from scenario_files import write_scenario

from planner.cli import main
from planner.forecast import run_forecast
from planner.forecast_outputs import POOL_COLUMNS, QUARTER_COLUMNS, forecast_tables
from planner.inputs import load_inputs, plan_inputs
from planner.units import usd_text

ROOT = Path(__file__).resolve().parent.parent

BASE = """
name: fc
model: llama-3.1-8b
context_limit: 8192
traffic:
  source: {constant: {prompt_tokens: 1000, output_tokens: 200}}
  peak: {method: explicit, rps: 60}
  mean_rps: 30
gpus: [h100-sxm, l40s]
tp: [1]
weight_dtypes: [bf16]
kv_dtypes: [bf16]
"""

H100_ONLY = BASE.replace("gpus: [h100-sxm, l40s]", "gpus: [h100-sxm]")


def scenario(tmp_path, forecast: str, base: str = BASE):
    return write_scenario(tmp_path, base, forecast, name="fc.yaml")


def test_flat_forecast_reproduces_the_single_solve_every_quarter(tmp_path):
    path = scenario(tmp_path, """
        forecast:
          quarters: [{quarter: 2027Q1}, {quarter: 2027Q2}, {quarter: 2027Q3}, {quarter: 2027Q4}]
    """)
    inputs = load_inputs(path)
    single = plan_inputs(inputs, explore=False)
    results = run_forecast(inputs)
    assert [r.quarter for r in results] == ["2027Q1", "2027Q2", "2027Q3", "2027Q4"]
    for r in results:
        assert r.cost_per_hour == single.cost_per_hour
        assert [(p.config, p.replicas) for p in r.plan.solution.pools] == [(p.config, p.replicas) for p in single.solution.pools]
        assert r.cost_per_million == single.cost_per_million


def test_token_accounting_closes(tmp_path):
    path = scenario(tmp_path, """
        forecast:
          quarters: [{quarter: 2027Q1}, {quarter: 2027Q2, growth: 0.5}]
    """)
    for r in run_forecast(load_inputs(path)):
        assert r.cost_per_million["blended"] * r.tokens_per_hour / 1e6 == pytest.approx(r.cost_per_hour, rel=1e-12)
        input_cost = r.cost_per_million["input"] * r.plan.input_tokens_per_hour / 1e6
        output_cost = r.cost_per_million["output"] * r.plan.output_tokens_per_hour / 1e6
        assert input_cost + output_cost == pytest.approx(r.cost_per_hour, rel=1e-12)
        # Without a load profile every hour carries the mean rate: 30 req/s of 1,200 tokens.
        assert r.tokens_per_hour_at_volume == pytest.approx(30 * r.demand_multiplier * 3600 * 1200, rel=1e-12)
        mean = r.cost_per_million_at_volume["blended"] * r.tokens_per_hour_at_volume / 1e6
        assert mean == pytest.approx(r.cost_per_hour, rel=1e-12)


def test_cost_per_token_falls_with_demand_at_fixed_prices_and_rises_with_price(tmp_path):
    # Two replicas minimum (N+1) leave room: more demand fills them, so each token costs less.
    base = BASE.replace("rps: 60", "rps: 2").replace("mean_rps: 30", "mean_rps: 1") + "min_replicas_per_pool: 2\n"
    path = scenario(tmp_path, """
        forecast:
          quarters:
            - {quarter: 2027Q1}
            - {quarter: 2027Q2, growth: 1.0}
            - {quarter: 2027Q3, prices: {h100-sxm: 4.50, l40s: 2.10}}
    """, base)
    q1, q2, q3 = run_forecast(load_inputs(path))
    assert q2.cost_per_hour == q1.cost_per_hour
    assert q2.cost_per_million["blended"] < q1.cost_per_million["blended"]
    assert q2.utilisation["peak"] > q1.utilisation["peak"]
    assert q3.cost_per_hour > q2.cost_per_hour
    assert q3.cost_per_million["blended"] > q2.cost_per_million["blended"]
    # the report says which quarter pays which price, and what the others pay
    from planner.forecast_outputs import forecast_markdown

    assert ("On-demand prices the quarters state, per GPU-hour: h100-sxm: 2027Q3 $4.50 (other quarters $2.99); "
            "l40s: 2027Q3 $2.10 (other quarters $1.40).") in forecast_markdown("t", [q1, q2, q3])
    assert "On-demand prices the quarters state" not in forecast_markdown("t", [q1, q2])


def test_reserved_capacity_is_paid_whether_used_or_not(tmp_path, monkeypatch):
    path = scenario(tmp_path, """
        forecast:
          carry_forward: true
          reserved_discount: 0.4
          quarters:
            - {quarter: 2027Q1}
            - {quarter: 2027Q2, growth: -0.75}
            - {quarter: 2027Q3, growth: 7.0}
    """)
    q1, q2, q3 = run_forecast(load_inputs(path))
    assert q2.reserved_gpus == q1.gpus_by_type
    floor = sum(n * q2.reserved_price[g] for g, n in q2.reserved_gpus.items())
    assert q2.cost_per_hour >= floor - 1e-9  # never cheaper than the commitment
    assert q2.cost_per_hour == pytest.approx(floor)  # demand fell: the reserved GPUs cover it, and are paid in full
    # The idle ones are paid, and the forecast's figure counts them: it drew the GPUs in use alone
    assert q2.idle is not None and q2.gpus_paid_for == q2.gpus + sum(q2.idle.gpus.values()) == q1.gpus
    import planner.forecast_outputs as outputs

    drawn = {}
    monkeypatch.setattr(outputs, "draw", lambda job, **kw: drawn.update(kw) or (lambda: b"png"))
    outputs.write_forecast("fc", [q1, q2, q3], tmp_path / "out")
    assert drawn["gpus"] == [q1.gpus, q1.gpus, q3.gpus_paid_for]
    # Commitments do not lapse when demand falls: Q3 still holds Q1's lot, at Q1's price.
    assert q3.reserved_gpus == q1.gpus_by_type
    # Growth beyond the commitment (twice the base demand) is paid on demand at the full price.
    on_demand = sum(n for n in q3.plan.solution.on_demand_gpus.values())
    assert on_demand > 0
    assert q3.cost_per_hour > sum(n * q3.reserved_price[g] for g, n in q3.reserved_gpus.items())


def test_committed_gpus_keep_the_price_they_were_committed_at(tmp_path):
    base = H100_ONLY
    path = scenario(tmp_path, """
        forecast:
          carry_forward: true
          reserved_discount: 0.5
          quarters:
            - {quarter: 2027Q1}
            - {quarter: 2027Q2, prices: {h100-sxm: 1.00}}
            - {quarter: 2027Q3, prices: {h100-sxm: 1.00}, growth: 1.0}
    """, base)
    q1, q2, q3 = run_forecast(load_inputs(path))
    n1 = q1.gpus_by_type["h100-sxm"]
    assert q2.reserved_price["h100-sxm"] == pytest.approx(2.99 * 0.5)  # committed at Q1's terms
    # Q3 adds Q2's on-demand GPUs (none) and keeps Q1's lot at Q1's price; growth runs on demand at $1.00.
    assert q3.reserved_price["h100-sxm"] == pytest.approx(2.99 * 0.5)
    extra = q3.gpus_by_type["h100-sxm"] - n1
    assert q3.cost_per_hour == pytest.approx(n1 * 2.99 * 0.5 + max(extra, 0) * 1.00)


def test_forecast_cli_writes_markdown_tables_dictionary_and_json(tmp_path):
    path = scenario(tmp_path, """
        forecast:
          quarters: [{quarter: 2027Q1}, {quarter: 2027Q2, growth: 0.2}]
    """)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["forecast", str(path), "--out-dir", str(out), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    q = data["quarters"][0]
    assert [c.name for c in QUARTER_COLUMNS] == list(q)[: len(QUARTER_COLUMNS)]
    assert [c.name for c in POOL_COLUMNS] == list(q["pools"][0])
    assert data["total"]["quarters"] == 2
    assert q["speed_unverified"] == []  # measured GPUs, a dense model
    quarters = list(csv.DictReader(io.StringIO((out / "fc_forecast_quarters.csv").read_text())))
    assert [row["quarter"] for row in quarters] == ["2027Q1", "2027Q2"]  # one row per quarter
    pools = list(csv.DictReader(io.StringIO((out / "fc_forecast_pools.csv").read_text())))
    assert {row["quarter"] for row in pools} == {"2027Q1", "2027Q2"}
    assert (out / "fc_forecast.md").read_text().startswith("# Forecast: fc")
    assert (out / "fc_forecast.png").stat().st_size > 0
    assert json.loads((out / "fc_forecast_datapackage.json").read_text())["resources"][0]["path"] == "fc_forecast_quarters.csv"
    # without --json the command's last line lists every file it wrote, the figure too
    r = CliRunner().invoke(main, ["forecast", str(path), "--out-dir", str(out)])
    assert r.exit_code == 0, r.output
    listed = r.output.splitlines()[-1].removeprefix("-> ").split(", ")
    assert sorted(listed) == sorted(str(p) for p in out.iterdir())
    # The CSV files are what the library computes, not a re-formatting of the Markdown.
    tables = forecast_tables(run_forecast(load_inputs(path)))
    for table, text in tables.items():
        assert (out / f"fc_forecast_{table}.csv").read_text() == text


def test_a_forecast_says_how_it_prices_a_commitment_and_what_runs_on_unpriced_past_its_end(tmp_path):
    """Cases an outside review found the first wording got wrong: reserved_prices replace the discount
    for their types (and the line says so); carry_forward with no term commits GPUs that run on past the
    end, unpriced, which the headline says (it had said nothing, as for a forecast committing nothing);
    a scenario's own price is named as the scenario's; a synthetic source with no rate states the
    distribution's default rate its peak was drawn at."""
    from planner.forecast_outputs import forecast_markdown
    from planner.units import usd_rate_text

    base = (BASE.replace("source: {constant: {prompt_tokens: 1000, output_tokens: 200}}",
                         "source: {synthetic: {name: chat, requests: 20000, seed: 1}}")
            .replace("peak: {method: explicit, rps: 60}", "peak: {method: quantile, quantile: 0.99}")
            .replace("  mean_rps: 30\n", "")
            .replace("gpus: [h100-sxm, l40s]", "gpus: [{id: h100-sxm, price_usd_per_hour: 2.5}, l40s]"))
    path = scenario(tmp_path, """
        forecast:
          carry_forward: true
          reserved_discount: 0.3
          reserved_prices: {h100-sxm: 2.0}
          quarters: [{quarter: 2027Q1}, {quarter: 2027Q2, growth: 0.5}]
    """, base=base)
    results = run_forecast(load_inputs(path))
    md = forecast_markdown("fc", results)
    last = results[-1]
    held = sum(n * last.reserved_price[g] for g, n in last.reserved_gpus.items() if n)
    assert held > 0 and md.splitlines()[2].endswith(
        f"; the forecast's reservations, {usd_text(held)}/hour at the end of 2027Q2, run on past it, unpriced "
        "(no forecast.commitment_term_quarters).**")
    assert set(last.reserved_price) == {"h100-sxm"} and last.reserved_price["h100-sxm"] == 2.0  # not 2.5 × 0.7
    assert ("A committed GPU is priced h100-sxm at $2.00 (forecast.reserved_prices); any other type at the on-demand "
            "price of the quarter that commits it" in md and "× (1 − 0.3) (forecast.reserved_discount" in md)
    assert {p.config.gpu.id for r in results for p in r.plan.pools} == {"h100-sxm"}
    assert f"in every quarter: h100-sxm {usd_rate_text(2.5)} (the scenario's);" in md
    assert ("Peak req/s is the synthetic sample's peak" in md
            and "a sample of Poisson arrivals at 5.4 requests/s on average, the 'chat' distribution's default, "
                "not a measurement" in md)


def test_a_forecast_of_one_quarter_or_without_carry_forward_says_only_what_holds_for_it(tmp_path):
    """An outside finance review: one quarter read "2027Q1 → 2027Q1: fleet 2 → 2 GPUs ... 1 quarters cost";
    a forecast without carry_forward priced its commitments at "the quarter whose fleet carry_forward carries,
    or the one that states `reserved:`"; the total table's `quarters` column was "four quarters of one year:
    the year's total" for any length; the day table's Total, summed before rounding, did not say why it can
    differ from its cells by a cent."""
    from planner.forecast_outputs import forecast_markdown

    one = run_forecast(load_inputs(scenario(tmp_path, """
        forecast:
          quarters: [{quarter: 2027Q1}]
    """)))
    md = forecast_markdown("fc", one)
    gpus = one[0].gpus
    assert md.splitlines()[2].startswith(f"**2027Q1: fleet {gpus} GPU{'s' if gpus > 1 else ''}, "
                                         f"{usd_text(one[0].cost_per_hour * 2190)} for the quarter")
    assert "| **Total** (1 quarter) |" in md and "quarters" not in md.splitlines()[2]
    assert "the Total row sums" not in md  # one quarter: its Total is its cells

    reserved = tmp_path / "reserved"
    reserved.mkdir()
    results = run_forecast(load_inputs(scenario(reserved, """
        forecast:
          reserved_discount: 0.3
          commitment_term_quarters: 4
          quarters: [{quarter: 2027Q1}, {quarter: 2027Q2, growth: 0.5, reserved: {h100-sxm: 2}}]
    """)))
    md = forecast_markdown("fc", results)
    assert "at the on-demand price of the quarter that commits it (the one that states `reserved:`) × (1 − 0.3)" in md
    assert "carry_forward carries" not in md
    assert "| **Total** (2 quarters) |" in md and " 2 quarters cost " in md.splitlines()[2]
    assert ("(the Total row sums the quarters' amounts before rounding: it can differ from the sum of the cents "
            "shown by a cent or so)") in md
    r = CliRunner().invoke(main, ["forecast", str(reserved / "fc.yaml"), "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    package = json.loads((tmp_path / "out" / "fc_forecast_datapackage.json").read_text(encoding="utf-8"))
    total = next(res for res in package["resources"] if res["path"] == "fc_forecast_total.csv")
    quarters = next(f for f in total["schema"]["fields"] if f["name"] == "quarters")
    assert quarters["description"] == "quarters summed, first_quarter to last_quarter (four make a year)"
    # a committed price only on rows that hold committed GPUs; each capacity says where it comes from
    pools = list(csv.DictReader(io.StringIO((tmp_path / "out" / "fc_forecast_pools.csv").read_text(encoding="utf-8"))))
    assert [(p["quarter"], p["reserved_gpus"] != "0", p["reserved_usd_per_gpu_hour"] != "") for p in pools] == [
        (p["quarter"], p["reserved_gpus"] != "0", p["reserved_gpus"] != "0") for p in pools]
    assert any(p["reserved_gpus"] != "0" for p in pools) and any(p["reserved_gpus"] == "0" for p in pools)
    documented = next(res for res in package["resources"] if res["path"] == "fc_forecast_pools.csv")["schema"]["fields"]
    words = next(f for f in documented if f["name"] == "capacity_planned_by")["description"]
    assert all(p["capacity_planned_by"] and f"{p['capacity_planned_by']}: " in words for p in pools)


def test_the_forecast_says_where_its_peak_comes_from_and_keeps_hourly_and_summed_dollars_apart(tmp_path):
    """The Peak req/s column is traced to the peak as the plan's report takes it (here stated: an
    explicit peak is no measurement); the Total row's parts (dollars over the quarters) stand with
    its total, not under the $/hour header."""
    from planner.forecast_outputs import forecast_markdown

    path = scenario(tmp_path, """
        forecast:
          quarters: [{quarter: 2027Q1}, {quarter: 2027Q2, growth: 0.2}]
    """)
    results = run_forecast(load_inputs(path))
    md = forecast_markdown("fc", results)
    plan = results[0].plan
    assert plan.scenario.traffic.peak.method == "explicit"
    assert (f"Peak req/s is the stated peak, {plan.measured_peak_rps:,.3f} requests/s (explicit)" in md
            and "× traffic.growth 1 × the quarter's Demand × base; capacity is planned for × headroom" in md)
    assert [f"{r.peak_rps:,.2f}" for r in results] == [
        f"{plan.measured_peak_rps * r.demand_multiplier:,.2f}" for r in results]
    def cells(start):
        return [c.strip() for c in next(line for line in md.splitlines() if line.startswith(start))[1:-1].split("|")]

    header, total = cells("| Quarter |"), cells("| **Total**")
    assert header[6].startswith("$/hour") and total[6] == ""
    assert header[7] == "$/quarter" and total[7].startswith("**$") and " on demand + " in total[7]
    usd = [float(x) for x in re.findall(r"\$([\d,.]+)", total[7].replace(",", ""))]
    assert usd[0] == pytest.approx(sum(usd[1:]), abs=0.015)  # the total is its three parts, to the cent


@pytest.mark.parametrize(
    ("forecast", "expected"),
    [
        ("forecast: {quarters: [{quarter: 2027Q2}, {quarter: 2027Q1}]}\n", "forecast.quarters: quarters out of order"),
        ("forecast: {quarters: [{quarter: 2027Q1}, {quarter: 2027Q1}]}\n", "quarter 2027Q1 appears twice"),
        ("forecast: {quarters: [{quarter: 2027Q4}, {quarter: 2028Q3}]}\n",
         "forecast.quarters: quarters must follow one another: 2028Q3 after 2027Q4 leaves 2 out"),
        ("forecast: {quarters: [{quarter: 2027Q1, growth: -1.5}]}\n", "forecast.quarters[0].growth: Input should be greater than -1"),
        ("forecast: {quarters: [{quarter: 2027Q5}]}\n", "forecast.quarters[0].quarter: String should match pattern"),
        ("forecast: {quarters: [{quarter: 2027Q1, prices: {h100-sxmm: 2.0}}]}\n",
         "forecast.quarters[0].prices: unknown GPU 'h100-sxmm'; did you mean 'h100-sxm'?"),
        ("forecast: {quarters: [{quarter: 2027Q1, prices: {h200: 2.0}}]}\n",
         "forecast.quarters[0].prices: GPU 'h200' is not among the scenario's candidate gpus"),
        ("forecast: {quarters: []}\n", "forecast.quarters: List should have at least 1 item"),
        # each quarter's growth within its bound, compounded past it (peaks past any bound otherwise)
        ("forecast: {quarters: [{quarter: 2027Q1, growth: 999}, {quarter: 2027Q2, growth: 999}]}\n",
         "forecast: quarters: growth compounds to 1e+06 × the base demand by 2027Q2, above the bound of "
         "1,001 × (planner.bounds)"),
        # a later quarter's unknown GPU is named before the earlier quarters are planned (here the first
        # is infeasible, which would have exited 3 first)
        ("forecast: {quarters: [{quarter: 2027Q1, availability: {h100-sxm: 0, l40s: 0}}, "
         "{quarter: 2027Q2, prices: {h999: 1.0}}]}\n", "forecast.quarters[1].prices: unknown GPU 'h999'"),
    ],
)
def test_bad_forecast_input_exits_2_with_the_yaml_path(tmp_path, forecast, expected):
    path = scenario(tmp_path, forecast)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["forecast", str(path), "--out-dir", str(out)])
    assert r.exit_code == 2, r.output
    assert expected in r.output
    assert str(path) in r.output
    assert not out.exists()


def test_a_carried_commitment_above_a_later_availability_names_carry_forward(tmp_path):
    base = H100_ONLY
    path = scenario(tmp_path, """
        forecast:
          carry_forward: true
          quarters:
            - {quarter: 2027Q1}
            - {quarter: 2027Q2, availability: {h100-sxm: 1}}
    """, base)
    one_line_error(run("forecast", path, "--no-report"), 2, f"{path}: forecast quarter 2027Q2:",
                   "carried forward from earlier quarters, forecast.carry_forward: true, and 0 reserved in this "
                   "quarter) but availability is 1; a commitment is not given back: raise this quarter's availability "
                   "or set forecast.carry_forward: false")


def test_autoscaling_reserved_discount_prices_the_forecast_as_it_prices_the_day(tmp_path):
    base = H100_ONLY + "autoscaling: {reserved_discount: 0.5}\n"
    path = scenario(tmp_path, """
        forecast:
          quarters:
            - {quarter: 2027Q1}
    """, base)
    (q1,) = run_forecast(load_inputs(path))
    assert q1.day.terms.reserved_usd_per_gpu_hour["h100-sxm"] == pytest.approx(2.99 * 0.5)
    assert "on-demand × (1 − 0.5)" in q1.day.terms.reserved_terms


def test_the_report_says_what_stays_committed_past_the_last_quarter(tmp_path):
    """Commitments run past the forecast's end, which its total does not count: the report says
    what is held at the end, and what carry_forward would commit next at the last quarter's terms."""
    from planner.forecast_outputs import forecast_markdown

    path = scenario(tmp_path, """
        forecast:
          carry_forward: true
          reserved_discount: 0.5
          quarters:
            - {quarter: 2027Q1}
            - {quarter: 2027Q2, growth: 1.0}
    """, H100_ONLY)
    q1, q2 = run_forecast(load_inputs(path))
    n1, n2 = q1.gpus_by_type["h100-sxm"], q2.gpus_by_type["h100-sxm"]
    assert n2 > n1 and q2.reserved_gpus == {"h100-sxm": n1}
    price = 2.99 * 0.5  # the catalog's on-demand price, less the reserved discount
    held = n1 * price
    text = forecast_markdown("fc", [q1, q2])
    assert (f"Held at the end of 2027Q2: {n1} h100-sxm at ${price:.3f}, ${held:,.2f}/hour (${held * 2190:,.2f} a quarter). "
            "A commitment, once made, is paid in every later quarter of the forecast, used or not; the total above "
            "counts none past 2027Q2") in text
    assert (f"With carry_forward, the {n2 - n1} h100-sxm that 2027Q2 runs on demand would be committed from the next "
            f"quarter at 2027Q2's terms (${price:.3f} per GPU-hour): ${(n2 - n1) * price:,.2f}/hour more; "
            f"${n2 * price:,.2f}/hour committed in all.") in text


def test_commitments_above_the_scenario_s_own_cap_are_refused_naming_it(tmp_path):
    """Committed GPUs a type's max_gpus keeps idle would be paid while the plan buys others on demand:
    refused, as commitments above a quarter's availability are."""
    base = BASE.replace("gpus: [h100-sxm, l40s]", "gpus: [{id: h100-sxm, max_gpus: 2}, l40s]")
    path = scenario(tmp_path, "forecast: {quarters: [{quarter: 2027Q1, reserved: {h100-sxm: 5}}]}\n", base)
    one_line_error(run("forecast", path, "--out-dir", tmp_path / "out"), 2, f"{path}: forecast quarter 2027Q1:",
                   "5 h100-sxm GPUs are committed but its max_gpus (the scenario's gpus) is 2; a commitment is not "
                   "given back: raise h100-sxm's max_gpus or state this quarter's availability or reserve fewer")
    assert not (tmp_path / "out").exists()


def test_a_stated_fleet_s_quarter_is_priced_with_its_commitments_and_its_parts_add_up(tmp_path):
    """A scenario that states its fleet, with reservations: the quarter's cost is its committed GPUs at
    their committed price (idle ones too) and the rest on demand, as its pool rows and the table's parts
    say (the total counted every GPU at its on-demand price and left the idle ones out)."""
    base = BASE + "fleet: [{gpu: h100-sxm, tp: 1, weight_dtype: bf16, kv_dtype: bf16, replicas: 3}]\n"
    path = scenario(tmp_path, """
        forecast:
          reserved_discount: 0.3
          quarters: [{quarter: 2027Q1, reserved: {h100-sxm: 2, l40s: 1}}]
    """, base)
    (q,) = run_forecast(load_inputs(path))
    h100, l40s = 2.99, 1.40  # the catalog's on-demand prices
    expected = 2 * h100 * 0.7 + 1 * l40s * 0.7 + 1 * h100
    assert q.cost_per_hour == pytest.approx(expected)
    k = q.usd_per_hour_by_kind
    assert k["on_demand"] + k["reserved_used"] + k["reserved_idle"] == pytest.approx(q.cost_per_hour)
    assert sum(row.usd_per_hour for row in q.pool_rows) == pytest.approx(q.cost_per_hour)
    assert q.idle is not None and q.idle.gpus == {"l40s": 1} and q.idle.use_them_usd_per_hour is None
    assert "states its fleet" in q.idle.use_them_summary


def test_the_report_and_tables_name_the_requests_a_quarter_s_context_limit_turns_away(tmp_path):
    """The Markdown names them; the CSV and JSON rows showed the peak falling at 'demand x 1.0' with
    nothing to say why (a probe's finding): they carry each quarter's limit and the share it turns away."""
    from planner.forecast_outputs import forecast_json, forecast_markdown

    base = BASE.replace("source: {constant: {prompt_tokens: 1000, output_tokens: 200}}",
                        "source: {synthetic: {name: chat, requests: 20000, seed: 5}}").replace("context_limit: 8192",
                                                                                               "context_limit: 16384")
    path = scenario(tmp_path, """
        forecast:
          quarters: [{quarter: 2027Q1}, {quarter: 2027Q2, context_limit: 2048}]
    """, base)
    q1, q2 = run_forecast(load_inputs(path))
    assert q2.plan.rejected_requests > q1.plan.rejected_requests
    text = forecast_markdown("fc", [q1, q2])
    share = q2.plan.rejected_requests / q2.plan.hist.requests
    assert "Not served, so in neither the costs nor the tokens: the requests over a quarter's context limit (" in text
    assert share > 0.001 and f"2027Q2 {share:.1%} (limit 2,048 tokens)" in text
    rows = forecast_json([q1, q2])["quarters"]
    assert [r["context_limit_tokens"] for r in rows] == [16384, 2048]
    assert [r["rejected_share"] for r in rows] == [q.plan.rejected_requests / q.plan.hist.requests for q in (q1, q2)]


def test_a_stated_fleet_that_cannot_carry_a_quarter_quotes_no_total_cost_per_token(tmp_path):
    """Its quarters over their peak quote no $/M, nor does the total's CSV; the Markdown's Total row
    still divided the whole cost by tokens the fleet cannot serve ($0.0238/M for $0.0303 on the quarters
    it serves), and printed a fleet 0.4% over its peak as '100%'."""
    from planner.forecast_outputs import forecast_markdown

    base = BASE + "fleet: [{gpu: h100-sxm, tp: 1, weight_dtype: bf16, kv_dtype: bf16, replicas: 3}]\n"
    path = scenario(tmp_path, """
        forecast:
          quarters: [{quarter: 2027Q1}, {quarter: 2027Q2, growth: 2.0}]
    """, base)
    q1, q2 = run_forecast(load_inputs(path))
    assert math.isfinite(q1.cost_per_million["blended"]) and not math.isfinite(q2.cost_per_million["blended"])
    total_row = next(line for line in forecast_markdown("fc", [q1, q2]).splitlines() if line.startswith("| **Total**"))
    assert total_row.endswith("| — / — / — | |")
    assert q2.utilisation["peak"] > 1 and f"| {q2.utilisation['peak']:.1%} / " in forecast_markdown("fc", [q1, q2])


def test_a_solve_report_s_forecast_is_certified_as_its_plan_is(tmp_path):
    """`solve --no-verify` on finance_2027 (verify by default) embedded the forecast its quarters
    give certified ($451,818.90 over four quarters), under an uncertified plan; `--verify` on a copy
    with verify: false embedded the uncertified one. The embedded forecast now follows the flag: it
    is the forecast of the same scenario with `verify` set as the flag says."""
    from pathlib import Path

    import yaml

    scn = yaml.safe_load((Path(__file__).resolve().parent.parent / "scenarios" / "finance_2027.yaml").read_text(encoding="utf-8"))
    given = tmp_path / "given.yaml"
    given.write_text(yaml.safe_dump(scn), encoding="utf-8")
    unverified = tmp_path / "unverified.yaml"
    unverified.write_text(yaml.safe_dump({**scn, "verify": False}), encoding="utf-8")
    r = CliRunner().invoke(main, ["solve", str(given), "--no-verify", "--out-dir", str(tmp_path / "solved")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["forecast", str(unverified), "--out-dir", str(tmp_path / "forecast")])
    assert r.exit_code == 0, r.output

    def headline(path):
        return next(line for line in path.read_text(encoding="utf-8").splitlines() if " quarters cost " in line)

    expected = headline(next((tmp_path / "forecast").glob("*.md")))
    assert headline(tmp_path / "solved" / f"{scn['name']}.md") == expected


def test_a_quarter_s_tokens_are_its_input_and_output_tokens(tmp_path):
    """finance_2027 with a quarter that loses nearly all its traffic: the CSVs' `tokens` was rounded
    on its own and came out a token under input_tokens + output_tokens (307,681,535 against
    261,732,767 + 45,948,769), and the total two under, where the data dictionary defines it as their sum."""
    from pathlib import Path

    import yaml

    scn = yaml.safe_load((Path(__file__).resolve().parent.parent / "scenarios" / "finance_2027.yaml").read_text(encoding="utf-8"))
    scn.update(name="tiny", verify=False)
    scn["forecast"] = {"carry_forward": True, "commitment_term_quarters": 2, "reserved_discount": 0.30,
                       "quarters": [{"quarter": "2027Q1"}, {"quarter": "2027Q2", "growth": -0.9999},
                                    {"quarter": "2027Q3", "growth": 0}]}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(scn), encoding="utf-8")
    r = CliRunner().invoke(main, ["forecast", str(path), "--out-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    checked = 0
    for name in ("tiny_forecast_quarters.csv", "tiny_forecast_total.csv"):
        for row in csv.DictReader(io.StringIO((tmp_path / name).read_text(encoding="utf-8"))):
            assert int(row["tokens"]) == int(row["input_tokens"]) + int(row["output_tokens"]), row
            checked += 1
    assert checked == 4


STATED_SHORT = """
name: short
model: llama-3.1-8b
context_limit: 32768
traffic:
  source:
    synthetic: {name: chat, requests: 100000, seed: 5, rate_rps: 400}
  peak: {method: quantile, quantile: 0.99}
  headroom: 1.2
  profile: {shape: diurnal, peak_to_trough: 3, peak_hour: 14}
slo:
  statistic: p99
  bands:
    - {ttft_s: 2.0, tpot_ms: 50}
sizing: {mode: percentile, quantile: 0.99}
gpus: [h100-sxm, h200, l40s]
tp: [1, 2]
weight_dtypes: [bf16, fp8]
kv_dtypes: [bf16, fp8]
autoscaling: {scale_up_lead_min: 10, min_replicas: 2}
verify: false
fleet:
  - {gpu: h100-sxm, tp: 1, weight_dtype: fp8, kv_dtype: fp8, replicas: 17}
forecast:
  carry_forward: true
  commitment_term_quarters: 4
  reserved_discount: 0.30
  quarters:
    - {quarter: 2027Q1, growth: 0.0}
    - {quarter: 2027Q2, growth: 0.5}
"""


def test_a_stated_fleet_short_of_a_quarter_s_peak_prices_no_token_and_sizes_the_peak_policies_to_it(tmp_path):
    """17 stated H100s carry 2027Q1 and not 2027Q2 (503.8 req/s against 607.3). Q2 had no price per
    token, but the total divided the whole cost by Q2's tokens too ($0.0246 per million), and the day's
    peak-sized policies priced the 17 GPUs all day, below the autoscaled and mixed policies that carry
    each hour (the mix "never costs more than either" failed). The total's blended price is now blank,
    and a peak-sized policy holds the busiest hour's need, which the report names."""
    path = tmp_path / "short.yaml"
    path.write_text(STATED_SHORT, encoding="utf-8")
    r = CliRunner().invoke(main, ["forecast", str(path), "--json", "--out-dir", str(tmp_path / "json")])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    q1, q2 = out["quarters"]
    assert q1["usd_per_million_tokens_blended"] is not None and q2["usd_per_million_tokens_blended"] is None
    assert out["total"]["usd_per_million_tokens_blended"] is None
    for q in (q1, q2):
        assert q["mixed_usd"] <= min(q["peak_on_demand_usd"], q["peak_reserved_usd"]) + 1e-6
    from planner.catalog import load_catalog

    h100_usd_per_hour = load_catalog().gpu("h100-sxm").price_usd_per_hour
    assert q2["peak_on_demand_usd_per_day"] > 17 * h100_usd_per_hour * 24  # more than the stated 17 GPUs all day
    r = CliRunner().invoke(main, ["forecast", str(path), "--out-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "short_forecast.md").read_text(encoding="utf-8")
    assert "per million tokens at the day's real volume" not in text.splitlines()[2]
    assert "The stated fleet cannot carry the busiest hour of some quarters" in text
    assert "replicas where the fleet states 17" in text


def test_a_profile_with_an_idle_hour_is_not_called_infinitely_peaked(tmp_path):
    """An hourly profile with idle hours: the forecast said "busiest hour inf× the quietest"."""
    from pathlib import Path

    import yaml

    scn = yaml.safe_load((Path(__file__).resolve().parent.parent / "scenarios" / "finance_2027.yaml").read_text(encoding="utf-8"))
    scn.update(name="idle", verify=False)
    scn["traffic"]["profile"] = {"hourly": [0] * 6 + [0.5] * 6 + [1] * 6 + [0.5] * 6}
    scn["forecast"]["quarters"] = [{"quarter": "2027Q1"}]
    path = tmp_path / "idle.yaml"
    path.write_text(yaml.safe_dump(scn), encoding="utf-8")
    r = CliRunner().invoke(main, ["forecast", str(path), "--out-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "idle_forecast.md").read_text(encoding="utf-8")
    assert "inf×" not in text
    assert "(the quietest hour has no load; mean 50% of the busiest hour's)" in text


def _chat_8b_stated(tmp_path, fleet: list[dict], **update):
    """The shipped chat_8b_h100 scenario (its mean_rps prices the day's curve) with a stated fleet."""
    from pathlib import Path

    import yaml

    raw = yaml.safe_load((Path(__file__).resolve().parent.parent / "scenarios" / "chat_8b_h100.yaml").read_text(encoding="utf-8"))
    raw.update(verify=False, fleet=fleet, **update)
    path = tmp_path / "stated.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


L40S_FLEET = {"gpu": "l40s", "tp": 1, "weight_dtype": "bf16", "kv_dtype": "bf16", "replicas": 8}
H100_FLEET = {"gpu": "h100-sxm", "tp": 1, "weight_dtype": "bf16", "kv_dtype": "bf16", "replicas": 2}


def test_a_stated_fleet_on_a_type_the_scenario_does_not_plan_with_prices_its_day_at_that_type_s_price(tmp_path):
    """chat_8b_h100 plans with H100s; a stated fleet of 8 L40S is audited, and its day's curve (and a
    forecast's) priced the L40S by the scenario's GPU list, which has none: a KeyError. The day is now
    priced at the L40S's own price, the one the fleet's cost uses."""
    from planner.catalog import load_catalog

    l40s = load_catalog().gpu("l40s").price_usd_per_hour
    path = _chat_8b_stated(tmp_path, [L40S_FLEET], forecast={"quarters": [{"quarter": "2027Q1"}]})
    for command in ("solve", "forecast"):
        r = CliRunner().invoke(main, [command, str(path), "--json", "--out-dir", str(tmp_path / command)])
        assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["solve", str(path), "--out-dir", str(tmp_path / "md")])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "md" / "chat_8b_h100.md").read_text(encoding="utf-8")
    need = int(text.split("l40s tp1 w:bf16 kv:bf16 ctx:8192: ")[1].split(" replicas where the fleet states 8")[0])
    assert need > 8
    row = next(line for line in text.splitlines() if line.startswith("| peak-sized fleet all day, on demand |"))
    assert row.split(" | ")[1] == usd_text(need * l40s * 24)


def test_a_stated_fleet_over_a_cap_is_audited_with_the_cap_set_aside_in_its_day(tmp_path):
    """Two H100s stated under a cap of two cannot carry the peak: the day's reserved + on-demand mix,
    held to the cap, had no answer and the audit exited 3 naming no key. A stated fleet is an
    audit (exit 0): every policy prices what the busiest hour needs, and the report says the cap
    was set aside."""
    from planner.daily import CAPS_SET_ASIDE

    path = _chat_8b_stated(tmp_path, [H100_FLEET], gpus=[{"id": "h100-sxm", "max_gpus": 2}])
    r = CliRunner().invoke(main, ["solve", str(path), "--out-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "chat_8b_h100.md").read_text(encoding="utf-8")
    need = int(text.split("h100-sxm tp1 w:bf16 kv:bf16 ctx:8192: ")[1].split(" replicas where the fleet states 2")[0])
    assert f"{CAPS_SET_ASIDE}: {need} h100-sxm against a cap of 2." in text
    # a forecast of it says so per quarter
    path = _chat_8b_stated(tmp_path, [H100_FLEET], gpus=[{"id": "h100-sxm", "max_gpus": 2}],
                           forecast={"quarters": [{"quarter": "2027Q1"}]})
    r = CliRunner().invoke(main, ["forecast", str(path), "--out-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "chat_8b_h100_forecast.md").read_text(encoding="utf-8")
    assert f"{CAPS_SET_ASIDE}: 2027Q1 {need} h100-sxm against a cap of 2." in text
    # twelve stated over a cap of six, whose busiest hour needs fewer than six: no cap is set aside
    path = _chat_8b_stated(tmp_path, [{**H100_FLEET, "replicas": 12}], gpus=[{"id": "h100-sxm", "max_gpus": 6}])
    r = CliRunner().invoke(main, ["solve", str(path), "--out-dir", str(tmp_path / "twelve")])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "twelve" / "chat_8b_h100.md").read_text(encoding="utf-8")
    assert "cannot carry the busiest hour" not in text and CAPS_SET_ASIDE not in text


def test_two_stated_pools_of_one_config_are_one_pool_and_told_so(tmp_path):
    """Two identical entries in fleet: made two pools whose day-mix variables clashed (a PuLP
    traceback); they are one pool, and the error says so, naming the entry."""
    path = _chat_8b_stated(tmp_path, [H100_FLEET, {**H100_FLEET, "replicas": 3}, {**H100_FLEET, "context_limit": 8192}])
    r = CliRunner().invoke(main, ["solve", str(path), "--out-dir", str(tmp_path / "out")])
    assert r.exit_code == 2, r.output
    # the third states the scenario's own limit: the same pool; the replicas to give are all three's
    assert r.output.strip() == (f"error: {path}: fleet[1]: the same GPU, tp, dtypes and context limit as fleet[0]; "
                                "give one entry with 7 replicas")
    assert not (tmp_path / "out").exists()
    different = _chat_8b_stated(tmp_path, [H100_FLEET, {**H100_FLEET, "kv_dtype": "fp8"}])
    assert CliRunner().invoke(main, ["solve", str(different), "--no-report"]).exit_code == 0


def test_a_capacity_measured_in_one_quarter_is_kept_by_the_quarters_after_it(tmp_path, monkeypatch):
    """Each quarter bisected its own simulated capacity, from the rate its own plan missed at, and
    found another within the bisection's 2%: finance_2027's H100 pool was planned at 28.006, 28.302,
    28.120 and 28.447 req/s per replica. The model is made optimistic here (x1.6), so the first
    quarter's pool misses and its capacity is measured; the quarters after it plan at that capacity
    and measure nothing again, as their replays at or below it hold."""
    import dataclasses

    import yaml

    from planner.evaluator import Evaluator
    from planner.forecast import run_forecast
    from planner.inputs import load_inputs

    scn = {"name": "kept", "model": "llama-3.1-8b", "context_limit": 8192,
           "traffic": {"source": {"constant": {"prompt_tokens": 1000, "output_tokens": 200}},
                       "peak": {"method": "explicit", "rps": 20}, "headroom": 1.0},
           "slo": {"bands": [{"tpot_ms": 40}]}, "gpus": ["h100-sxm"], "tp": [1], "weight_dtypes": ["bf16"],
           "kv_dtypes": ["bf16"], "sizing": {"mode": "expected"}, "simulation": {"requests": 3000},
           "forecast": {"quarters": [{"quarter": "2027Q1"}, {"quarter": "2027Q2", "growth": 0.5},
                                     {"quarter": "2027Q3", "growth": 0.5}]}}
    path = tmp_path / "kept.yaml"
    path.write_text(yaml.safe_dump(scn), encoding="utf-8")
    original = Evaluator._model_evaluation

    def optimistic(self, key, cfg, tc, **kw):
        e = original(self, key, cfg, tc, **kw)
        return e if e.capacity is None else dataclasses.replace(
            e, capacity=dataclasses.replace(e.capacity, max_rps=e.capacity.max_rps * 1.6))

    monkeypatch.setattr(Evaluator, "_model_evaluation", optimistic)
    first, *later = run_forecast(load_inputs(path), certify=True)
    assert first.plan.certification.rounds >= 1  # the first quarter measured its pool's capacity
    [pool] = first.plan.pools
    assert pool.planned_by == "simulation" and pool.planned_rps < pool.capacity.max_rps
    for quarter in later:
        [kept] = quarter.plan.pools
        assert quarter.plan.certification.certified and quarter.plan.certification.rounds == 0
        assert (kept.planned_by, kept.planned_rps) == ("simulation", pool.planned_rps)
    assert later[-1].plan.pools[0].replicas > pool.replicas  # the demand grew; the capacity a replica carries did not


def test_a_forecast_keeps_searched_capacities_and_ratios_only(catalog):
    """What a later quarter starts from: a searched capacity and its class's ratio. A rate lowered
    after a log's own arrivals missed, or one a challenger's pool held at, is its quarter's own (its
    replicas, its part of the rate); a quarter at another context limit has other classes."""
    import numpy as np

    from planner.evaluator import Measurements
    from planner.histogram import Histogram
    from planner.plan_setup import setup_plan
    from planner.scenario import Scenario

    def scn(limit: int, growth: float = 1.0) -> Scenario:
        return Scenario.model_validate({
            "name": "kept", "model": "llama-3.1-8b", "context_limit": limit,
            "traffic": {"source": {"constant": {"prompt_tokens": 1000, "output_tokens": 200}},
                        "peak": {"method": "explicit", "rps": 30}, "headroom": 1.0, "growth": growth},
            "slo": {"bands": [{"tpot_ms": 50}]}, "gpus": ["h100-sxm"], "tp": [1], "weight_dtypes": ["bf16"],
            "kv_dtypes": ["bf16"], "sizing": {"mode": "expected"}, "verify": False})

    hist = Histogram.from_arrays(np.random.default_rng(3).integers(100, 3000, 2000),
                                 np.random.default_rng(4).integers(2, 600, 2000))
    model, kept = catalog.model("llama-3.1-8b"), Measurements()

    def pair(limit: int, growth: float = 1.0):
        st = setup_plan(scn(limit, growth), catalog, model, hist, 30.0, measurements=kept)
        (cfg,), (tc,) = st.configs, st.classes["none"]
        return st.evaluator, st.evaluator.evaluate(cfg, tc)

    ev, e = pair(8192)
    assert e.planned_by == "model" and e.capacity.max_rps > 8
    ev.record_simulated(e, 8.0)  # a bisection's capacity: kept, with the class's ratio
    ev.record_simulated(e, 7.0, calibrates=False, from_log=True)  # the log's arrivals: this quarter's
    ev.record_simulated(e, 6.0, calibrates=False, from_log=False, held=True)  # a held rate: this quarter's
    key = (e.config.key, ("none", e.traffic_class.name, 8192))
    assert kept.rates == {key: 8.0}
    assert kept.ratios == {key[1]: pytest.approx(8.0 / e.capacity.max_rps)}
    later, e2 = pair(8192, growth=1.5)
    assert (e2.planned_by, e2.capacity_rps) == ("simulation", 8.0) and later.knows_simulated(e2.config, e2.traffic_class)
    other, e3 = pair(4096)  # another context limit: nothing measured applies
    assert e3.planned_by == "model" and e3.calibration == 1.0 and not other.knows_simulated(e3.config, e3.traffic_class)


def test_the_day_mix_s_reserved_replicas_are_named_by_gpu_type_where_its_pools_run_several():
    """The shipped forecasts reserve one GPU type a quarter: the cell that names several is tested here."""
    from planner.day_mix_ilp import DayPool
    from planner.forecast_outputs import reserved_replicas_text

    def pool(name, gpu):
        return DayPool(name, name, gpu, 1, 10.0, 1, 2.99, 2.09)

    pools = [pool("short", "l40s"), pool("long", "h100-sxm"), pool("long2", "h100-sxm")]
    assert reserved_replicas_text({"short": 2, "long": 3, "long2": 1}, pools) == (
        " (6 reserved replicas: 2 l40s, 4 h100-sxm)")
    assert reserved_replicas_text({"long": 3, "long2": 1}, pools) == " (4 reserved replicas)"


def test_a_quarter_stating_fewer_reserved_than_are_held_says_it_commits_none_and_pays_for_them(tmp_path):
    """A quarter's `reserved` tops its commitments up to the count stated; one below what earlier
    quarters committed (a commitment is not given back before its term ends) commits nothing, and was
    silent (an outside probe): the forecast says so in its Markdown and its JSON."""
    from planner.forecast_outputs import forecast_json, forecast_markdown

    results = run_forecast(load_inputs(scenario(tmp_path, """
        forecast:
          reserved_discount: 0.3
          commitment_term_quarters: 4
          quarters: [{quarter: 2027Q1, reserved: {h100-sxm: 12}}, {quarter: 2027Q2, reserved: {h100-sxm: 5}},
                     {quarter: 2027Q3, reserved: {h100-sxm: 12}}]
    """)))
    held = results[1].reserved_gpus["h100-sxm"]
    assert held >= 12 and results[0].reserved_below == results[2].reserved_below == ()
    said = (f"2027Q2 states 5 h100-sxm reserved (forecast.quarters[1].reserved), fewer than the {held:,} already "
            "held (owned or committed): a commitment is not given back before its term ends, so the quarter commits "
            f"no more h100-sxm and pays for the {held:,} held")
    assert results[1].reserved_below == (said,)
    assert f"- {said}." in forecast_markdown("fc", results).splitlines()
    assert [q["reserved_notes"] for q in forecast_json(results)["quarters"]] == [[], [said], []]


def test_a_forecast_made_without_certification_says_so_in_its_report_and_json():
    """`planner forecast --no-verify` sized every quarter by the model alone and read as a certified
    forecast does (an outside probe: 17 -> 25 GPUs, 5.8% below the certified forecast's cost, "each
    plan certified as the quarter's is", no `certified` key)."""
    from types import SimpleNamespace

    from planner.forecast_outputs import certified_flag, model_only_lines

    certified = SimpleNamespace(certification=SimpleNamespace(certified=True), scenario=SimpleNamespace(name="a"),
                                given_fleet=False)
    off = SimpleNamespace(certification=None, scenario=SimpleNamespace(name="b"), given_fleet=False)
    assert model_only_lines([certified, certified]) == [] and certified_flag([certified]) is True
    assert certified_flag([certified, off]) is None
    [line, blank] = model_only_lines([off, off])
    assert blank == "" and line.startswith("**Every quarter's plan is the model's alone**: certification by "
                                           "simulation is off (`verify: false` or `--no-verify`), so no pool was "
                                           "replayed; where a replay reads a target missed, certification plans")
    assert model_only_lines([off, off], services=True)[0].startswith(
        "**Every service's plan in every quarter is the model's alone**")
    stated = SimpleNamespace(certification=None, scenario=off.scenario, given_fleet=True)  # audited, not planned
    assert model_only_lines([stated])[0].startswith("**Every quarter's audit of the stated fleet is the model's alone**")
    assert "certification plans" not in model_only_lines([stated])[0]


def test_a_quarter_no_plan_of_which_holds_in_simulation_stops_the_forecast(tmp_path, monkeypatch):
    """`planner solve` refuses a plan certification could not certify (exit 3); a forecast priced such a
    quarter as any other, and its stated-price sentence called the plan certified (a reviewer)."""
    import dataclasses

    import planner.forecast

    path = scenario(tmp_path, """
        forecast:
          quarters: [{quarter: 2027Q1}, {quarter: 2027Q2}]
    """)
    original = planner.forecast.plan_inputs

    def missed(*args, **kwargs):  # the plan as certification leaves one whose rounds are spent
        plan = original(*args, **kwargs)
        return dataclasses.replace(plan, certification=dataclasses.replace(plan.certification, certified=False))

    monkeypatch.setattr(planner.forecast, "plan_inputs", missed)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["forecast", str(path), "--out-dir", str(out)])
    assert r.exit_code == 3, r.output
    assert "forecast quarter 2027Q1: no plan holds its targets in simulation" in r.output
    assert not out.exists()


def test_a_forecast_s_json_lists_the_speed_each_quarter_rests_on(tmp_path):
    """--json carried no word of a quarter's unverified speed, which the Markdown names: each quarter lists
    it as `planner solve --json` does (a GPU with borrowed factors here: the L4's are the L40S's)."""
    path = write_scenario(tmp_path, BASE.replace("gpus: [h100-sxm, l40s]", "gpus: [l4]"), """
        forecast:
          quarters: [{quarter: 2027Q1}, {quarter: 2027Q2, growth: 0.2}]
    """, name="fc.yaml")
    r = CliRunner().invoke(main, ["forecast", str(path), "--no-report", "--no-verify", "--json"])
    assert r.exit_code == 0, r.output
    for q in json.loads(r.output)["quarters"]:
        assert [(u["kind"], u["id"]) for u in q["speed_unverified"]] == [("gpu", "l4")], q["speed_unverified"]


@pytest.mark.skipif(not (ROOT / "reports" / "finance_2027_forecast_pools.csv").is_file(), reason="no shipped reports")
def test_each_quarter_s_utilisation_is_rebuilt_from_its_pools_rows():
    """A finance reading could not rebuild 2027Q4's utilisation from the CSV files: its 'replayed' rows
    show the rate certification replayed them at, not the capacity the plan divided by. The pools
    table now gives that capacity too (planned_rps_per_replica), and the two differ only there. The
    shipped files are read: test_report's test of the shipped forecasts keeps them what the code writes."""
    reports = ROOT / "reports"
    pools = list(csv.DictReader(io.StringIO((reports / "finance_2027_forecast_pools.csv").read_text(encoding="utf-8"))))
    quarters = list(csv.DictReader(io.StringIO((reports / "finance_2027_forecast_quarters.csv").read_text(encoding="utf-8"))))
    serving = [row for row in pools if row["kind"] == "serving"]
    assert any(row["capacity_planned_by"] == "replayed" for row in serving)  # the case the reading met
    for row in serving:
        if row["capacity_planned_by"] != "replayed":
            assert row["planned_rps_per_replica"] == row["capacity_rps_per_replica"]
    for quarter in quarters:
        capacity = sum(int(row["replicas"]) * float(row["planned_rps_per_replica"])
                       for row in serving if row["quarter"] == quarter["quarter"])
        assert float(quarter["peak_rps"]) / capacity == pytest.approx(float(quarter["utilisation_at_peak"]), abs=1e-6)
