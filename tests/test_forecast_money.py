"""The year's money: commitments never stranded silently, tidy tables that add up, a data
dictionary that describes every column (checked by the reference Data Package validator)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from clirun import run

from planner.forecast import run_forecast
from planner.inputs import load_inputs

ROOT = Path(__file__).resolve().parents[1]
CENT = 0.01


def finance_scenario(tmp_path: Path, *, reserved_pools: bool | None = None, h100_cap: int | None = 18) -> Path:
    """The shipped finance scenario with an H100 cap at 2027Q1's need (18 H100s): 2027Q2 outgrows it."""
    raw = yaml.safe_load((ROOT / "scenarios" / "finance_2027.yaml").read_text(encoding="utf-8"))
    raw["split_thresholds"] = []  # one pool per quarter: a homogeneous pool that outgrows the cap must switch types
    if h100_cap is not None:
        raw["gpus"] = [{"id": "h100-sxm", "max_gpus": h100_cap} if g == "h100-sxm" else g for g in raw["gpus"]]
    if reserved_pools is not None:
        raw["forecast"]["reserved_pools"] = reserved_pools
    path = tmp_path / "finance.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def strict_and_default(tmp_path_factory):
    strict = run_forecast(load_inputs(finance_scenario(tmp_path_factory.mktemp("strict"), reserved_pools=False)))
    default = run_forecast(load_inputs(finance_scenario(tmp_path_factory.mktemp("default"))))
    return strict, default


def test_reserved_gpus_stay_in_service_beside_a_new_type(strict_and_default):
    strict, default = strict_and_default
    q1, q2 = default[0], default[1]
    (n1,) = q1.gpus_by_type.values()
    assert q1.gpus_by_type == {"h100-sxm": n1}  # Q1's fleet, committed from Q2 on
    assert q2.reserved_gpus == {"h100-sxm": n1}
    # Q2 outgrows the 18-H100 cap: the plan keeps every reserved H100 and adds a pool of another type.
    assert q2.gpus_by_type["h100-sxm"] >= n1
    assert len(q2.gpus_by_type) == 2
    assert q2.idle is None
    # Homogeneous pools without the commitment rule switch types and strand the H100s.
    s2 = strict[1]
    assert "h100-sxm" not in s2.gpus_by_type
    assert s2.cost_per_hour > q2.cost_per_hour


def test_idle_reserved_gpus_are_named_with_their_cost_and_the_plan_that_uses_them(strict_and_default, tmp_path):
    strict, default = strict_and_default
    s2, q2 = strict[1], default[1]
    (n1,) = strict[0].gpus_by_type.values()  # Q1's H100s, committed from Q2 on
    assert s2.idle is not None
    assert s2.idle.gpus == {"h100-sxm": n1}
    price = s2.reserved_price["h100-sxm"]
    assert s2.idle.usd_per_hour == pytest.approx(n1 * price)
    # The cheapest plan that runs them is the one the default rule chooses.
    assert s2.idle.use_them_usd_per_hour == pytest.approx(q2.cost_per_hour)
    assert s2.idle.use_them_usd_per_hour < s2.cost_per_hour
    # The report and the command line say so.
    path = finance_scenario(tmp_path, reserved_pools=False)
    r = run("forecast", path, "--out-dir", tmp_path / "out")
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.strip().startswith(f"2027Q2: {n1} h100-sxm reserved GPU(s) idle"))
    assert f"${n1 * price:,.2f}/hour" in line
    assert f"the cheapest plan that runs them all: ${q2.cost_per_hour:,.2f}/hour" in line
    md = (tmp_path / "out" / "finance_2027_forecast.md").read_text(encoding="utf-8")
    assert f"**2027Q2: {n1} h100-sxm reserved GPU(s) idle**" in md
    assert f"costs ${q2.cost_per_hour:,.2f}/hour" in md


@pytest.mark.parametrize("which", ["strict", "default"])
def test_pool_rows_and_idle_rows_add_up_to_the_quarter(strict_and_default, tmp_path, which):
    results = strict_and_default[0 if which == "strict" else 1]
    for r in results:
        assert sum(row.usd_per_hour for row in r.pool_rows) == pytest.approx(r.cost_per_hour, abs=CENT)
        k = r.usd_per_hour_by_kind
        assert k["on_demand"] + k["reserved_used"] + k["reserved_idle"] == pytest.approx(r.cost_per_hour, abs=CENT)
        # Every committed GPU is in exactly one row.
        for g, n in r.reserved_gpus.items():
            assert sum(row.reserved_gpus for row in r.pool_rows if row.gpu == g) == n


def test_the_written_tables_add_up(tmp_path):
    path = finance_scenario(tmp_path, reserved_pools=False)
    out = tmp_path / "out"
    assert run("forecast", path, "--out-dir", out, "--no-report").exit_code == 0
    assert not out.exists()
    assert run("forecast", path, "--out-dir", out).exit_code == 0
    quarters = pd.read_csv(out / "finance_2027_forecast_quarters.csv")
    pools = pd.read_csv(out / "finance_2027_forecast_pools.csv")
    total = pd.read_csv(out / "finance_2027_forecast_total.csv")
    assert list(quarters["quarter"]) == ["2027Q1", "2027Q2", "2027Q3", "2027Q4"]
    assert quarters["quarter"].is_unique  # one row per quarter: no grain mixed in
    # Pool rows (idle ones included) add up to each quarter's cost, per hour and per quarter.
    by_quarter = pools.groupby("quarter")[["usd_per_hour", "usd"]].sum()
    for _, q in quarters.iterrows():
        assert by_quarter.loc[q["quarter"], "usd_per_hour"] == pytest.approx(q["total_usd_per_hour"], abs=CENT)
        assert by_quarter.loc[q["quarter"], "usd"] == pytest.approx(q["total_usd"], abs=CENT)
        parts = q["on_demand_usd"] + q["reserved_used_usd"] + q["reserved_idle_usd"]
        assert parts == pytest.approx(q["total_usd"], abs=CENT)
    assert (pools["kind"] == "idle_reserved").any()
    # The quarters summed are the total, for every column the dictionary says is a sum.
    package = json.loads((out / "finance_2027_forecast_datapackage.json").read_text(encoding="utf-8"))
    summed = [f["name"] for f in _resource(package, "total")["schema"]["fields"]
              if f["description"].endswith("(sum of the quarters' column of this name)")]
    assert {"total_usd", "reserved_idle_usd", "tokens", "mixed_usd", "autoscaled_usd", "peak_on_demand_usd"} <= set(summed)
    for name in summed:
        assert quarters[name].sum() == pytest.approx(total.loc[0, name], rel=1e-12, abs=1e-6), name
    assert total.loc[0, "usd_per_million_tokens_blended"] == pytest.approx(
        total.loc[0, "total_usd"] / total.loc[0, "tokens"] * 1e6, rel=1e-6)
    assert total.loc[0, "quarters"] == 4


def _resource(package: dict, name: str) -> dict:
    return next(r for r in package["resources"] if r["name"] == name)


def undescribed_columns(folder: Path, package: dict) -> list[str]:
    """Columns of the package's CSV files that its dictionary does not describe (or describes
    without words), and dictionary fields that no file has."""
    problems = []
    for res in package["resources"]:
        header = list(pd.read_csv(folder / res["path"], nrows=0).columns)
        fields = {f["name"]: f.get("description", "") for f in res["schema"]["fields"]}
        problems += [f"{res['name']}.{c}: not in the dictionary" for c in header if c not in fields]
        problems += [f"{res['name']}.{c}: no description" for c in header if c in fields and not fields[c].strip()]
        problems += [f"{res['name']}.{c}: in the dictionary, not in the file" for c in fields if c not in header]
    return problems


def test_every_column_is_in_the_data_dictionary_and_the_check_fails_when_one_is_missing(tmp_path):
    path = finance_scenario(tmp_path, reserved_pools=False)
    out = tmp_path / "out"
    assert run("forecast", path, "--out-dir", out).exit_code == 0
    dictionary = out / "finance_2027_forecast_datapackage.json"
    package = json.loads(dictionary.read_text(encoding="utf-8"))
    assert [r["name"] for r in package["resources"]] == ["quarters", "pools", "total"]
    assert undescribed_columns(out, package) == []
    # The reference validator agrees: a valid Data Package whose schemas match the files' headers and types.
    from frictionless import Package

    report = Package(str(dictionary)).validate()
    assert report.valid, report.flatten(["rowNumber", "fieldName", "type", "note"])
    # Take one column's entry out of the dictionary: the check names it.
    fields = _resource(package, "quarters")["schema"]["fields"]
    fields.remove(next(f for f in fields if f["name"] == "reserved_idle_usd"))
    assert undescribed_columns(out, package) == ["quarters.reserved_idle_usd: not in the dictionary"]
    dictionary.write_text(json.dumps(package), encoding="utf-8")
    assert not Package(str(dictionary)).validate().valid


def test_a_stated_price_the_plan_leaves_unused_says_why_by_the_model(tmp_path):
    """finance_2027 halves H200's price from 2027Q3, and no quarter's plan runs an H200: the report
    said which prices the quarters state and nothing of why the cut changed nothing. Each such
    quarter now names the cheapest plan on the type alone beside the cheapest of all, by the model
    at the quarter's prices with no commitment."""
    from planner.forecast_outputs import _unused_price_lines
    from planner.units import usd_text

    raw = yaml.safe_load((ROOT / "scenarios" / "finance_2027.yaml").read_text(encoding="utf-8"))
    raw["verify"] = False  # the comparison is the model's either way
    path = tmp_path / "finance.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    results = run_forecast(load_inputs(path))
    assert [r.unused_prices for r in results[:2]] == [(), ()]  # no price stated there
    lines = _unused_price_lines(results)
    for r in results[2:]:
        assert "h200" not in r.gpus_by_type
        (u,) = r.unused_prices
        assert (u.gpu, u.usd_per_gpu_hour) == ("h200", 3.2)
        assert {p.gpu for p in u.alone.pools} == {"h200"}
        # the cheapest plan of all may run h200 too: it costs no more than the plan on h200 alone
        assert u.cheapest.cost_per_hour <= u.alone.cost_per_hour + 1e-9
        line = next(x for x in lines if x.startswith(f"- {r.quarter}, h200 at $3.20: not in the plan."))
        more = usd_text(u.alone.cost_per_hour - u.cheapest.cost_per_hour)
        assert f"{usd_text(u.alone.cost_per_hour)}/hour ({more}/hour more than the cheapest plan" in line


def test_a_stated_fleet_s_unused_price_is_explained_by_the_cheapest_plans_not_its_own_pools(tmp_path):
    """A scenario that states the fleet it runs (30 H100s): its quarters' plans are those pools, and
    the explanation solved for them too, reading "h200 alone takes 30 × h100-sxm". Both plans it
    names are the model's cheapest, whatever fleet the scenario states."""
    from planner.forecast_outputs import _unused_price_lines

    raw = yaml.safe_load((ROOT / "scenarios" / "finance_2027.yaml").read_text(encoding="utf-8"))
    raw["verify"] = False
    raw["fleet"] = [{"gpu": "h100-sxm", "tp": 1, "weight_dtype": "fp8", "kv_dtype": "fp8", "replicas": 30}]
    path = tmp_path / "stated.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    results = run_forecast(load_inputs(path))
    q3 = results[2]
    assert q3.gpus_by_type == {"h100-sxm": 30}  # the stated fleet
    (u,) = q3.unused_prices
    assert {p.gpu for p in u.alone.pools} == {"h200"}
    assert u.cheapest.gpus < 30 and u.cheapest.cost_per_hour <= u.alone.cost_per_hour + 1e-9
    assert any(line.startswith("- 2027Q3, h200 at $3.20: not in the plan.") and "h200 alone takes " in line
               and " × h200 " in line for line in _unused_price_lines(results))


def test_dollar_figures_round_the_amount_the_arithmetic_denotes_half_a_cent_up():
    """115 GPUs at $2.093, 30 at $4.445, 32 at $0.70 and 8 at $0.98 cost $404.285 an hour, held as
    404.28499999999997: shown as $404.29, the cent a hand calculation gives, not $404.28 (the
    fleet forecast's "held at the end" read so). A price of 133.35 / 30 reads $4.445 every
    quarter, and a half cent rounds away from zero, a negative amount too."""
    from decimal import Decimal

    from planner.units import rounded_usd, usd_per_million_text, usd_rate_text, usd_text

    held = 115 * 2.093 + 30 * 4.445 + 32 * 0.70 + 8 * 0.98
    assert f"{held:.2f}" == "404.28"  # Python rounds the binary float
    assert usd_text(held) == "$404.29"
    assert usd_rate_text(133.35 / 30) == "$4.445" and usd_text(133.35 / 30) == "$4.45"
    assert rounded_usd(449.135) == Decimal("449.14") and rounded_usd(-0.125) == Decimal("-0.13")
    assert usd_text(1_234_567.891) == "$1,234,567.89" and usd_text(0.0) == "$0.00"
    # a negative amount (a saving that is a cost) reads as one, every digit kept; under half a cent, as none
    assert usd_text(-1_234.564) == "−$1,234.56" and usd_text(-0.125) == "−$0.13" and usd_text(-0.004) == "$0.00"
    assert usd_text(-1e30).startswith("−$1,000,000,000,000,000,0")
    assert usd_rate_text(2.093) == "$2.093" and usd_rate_text(2.2425) == "$2.2425" and usd_rate_text(2.99) == "$2.99"
    # fleet_2027q1's 2027Q4 H100s: 115 committed at $2.093 and 14 on demand at $2.99 average $2.190349, which
    # three digits read 2.190 and two "$2.19": shown to four digits, as its other rows are (129 GPUs times a
    # rounded price can still miss their cost by a cent: the cost column is the sum, not that product)
    assert usd_rate_text((115 * 2.093 + 14 * 2.99) / 129) == "$2.1903" and usd_rate_text(2.1900004) == "$2.19"
    assert f"{0.10035:.4f}" == "0.1003" and usd_per_million_text(0.10035) == "$0.1004"
    # under a cent, three significant digits: $0.0093 and $0.0094 read a quarter's change coarsely
    assert usd_per_million_text(0.00926338) == "$0.00926" and usd_per_million_text(0.00937924) == "$0.00938"
    assert usd_per_million_text(0.02701898) == "$0.0270" and usd_per_million_text(0.000042) == "$0.0000420"
    assert usd_per_million_text(0.0) == "$0.0000"
    # every dollar figure writes a negative amount alike, its sign before the dollar sign (Python's "$-0.00500" did not)
    assert usd_per_million_text(-0.005) == "−$0.00500" and usd_per_million_text(-0.10035) == "−$0.1004"
    assert usd_rate_text(-2.093) == "−$2.093" and usd_rate_text(-2.99) == "−$2.99" and usd_rate_text(-0.00004) == "$0.00"
    # in fixed notation however small, and three digits where rounding carries to the next power of ten
    assert usd_per_million_text(9.9e-7) == "$0.000000990" and usd_per_million_text(1e-9) == "$0.00000000100"
    assert usd_per_million_text(0.0099996) == "$0.0100" and usd_per_million_text(0.00099996) == "$0.00100"
    assert f"{2.675:.2f}" == "2.67" and usd_text(2.675) == "$2.68"
    assert usd_text(float("nan")) == usd_text(None) == usd_rate_text(float("inf")) == "—"
    # past $10 billion every cent shown is the amount's (12 significant digits would invent them)
    assert usd_text(1_234_567_890_123.45) == "$1,234,567,890,123.45" and usd_text(12_345_678_901.23) == "$12,345,678,901.23"
    assert usd_text(1e30).startswith("$1,000,000,000,000,000,0")  # past Decimal's default 28 digits: no error
