"""A commitment's term (forecast.commitment_term_quarters): lots paid for their term and then no
longer held, renewed by carry_forward at the terms of their day, and what they still cost after
the forecast's last quarter priced, in a scenario's forecast and in a fleet's."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from clirun import run

from planner.commitments import (
    Lot,
    above_on_demand_text,
    after_end,
    after_end_usd,
    in_force,
    quarter_after,
)
from planner.forecast import run_forecast
from planner.inputs import load_inputs

HOURS_PER_QUARTER = 2190  # the price sheets' 8,760-hour year over four quarters


def test_a_lot_is_paid_for_its_term_from_the_quarter_it_starts():
    lot = Lot("h100-sxm", 3, 2.0, start=1, term_quarters=2)
    assert [lot.held_in(i) for i in range(5)] == [False, True, True, False, False]
    assert [lot.quarters_after(last) for last in range(4)] == [2, 1, 0, 0]
    forever = Lot("h100-sxm", 3, 2.0, start=1, term_quarters=None)
    assert [forever.held_in(i) for i in range(5)] == [False, True, True, True, True]
    assert forever.quarters_after(3) == 0  # no term stated: nothing known past the end


def test_what_lots_cost_after_the_last_quarter_is_each_at_its_own_price_for_its_remaining_quarters():
    lots = [Lot("h100-sxm", 17, 2.093, 1, 4), Lot("h100-sxm", 2, 2.093, 2, 4), Lot("h200", 3, 4.445, 3, 4),
            Lot("l40s", 5, 0.7, 0, 4)]  # the last ends with the forecast's last quarter (index 3)
    assert [(lot.gpu, more) for lot, more in after_end(lots, 3)] == [("h100-sxm", 1), ("h100-sxm", 2), ("h200", 3)]
    assert after_end_usd(lots, 3) == pytest.approx(HOURS_PER_QUARTER * (17 * 2.093 * 1 + 2 * 2.093 * 2 + 3 * 4.445 * 3))
    assert [lot.gpus for lot in in_force(lots, 1)] == [17, 5]
    assert quarter_after("2027Q4", 2) == "2028Q2" and quarter_after("2027Q1", 0) == "2027Q1"
    assert quarter_after("2027Q3", 5) == "2028Q4"


def small_forecast(tmp_path: Path, term: int | None, *, carry_forward: bool = True, name: str = "terms") -> Path:
    """An 8B chat service on H100s alone, growing 20% a quarter for five quarters, unverified (fast)."""
    raw = {
        "name": name, "model": "llama-3.1-8b", "context_limit": 8192,
        "traffic": {"source": {"constant": {"prompt_tokens": 1500, "output_tokens": 200}},
                    "peak": {"method": "explicit", "rps": 40.0}},
        "slo": {"bands": [{"ttft_s": 2.0, "tpot_ms": 60}]}, "sizing": {"mode": "expected"},
        "gpus": ["h100-sxm"], "tp": [1], "weight_dtypes": ["fp8"], "kv_dtypes": ["fp8"], "split_thresholds": [],
        "verify": False, "solver": {"backend": "highs"},
        "forecast": {"carry_forward": carry_forward, "reserved_discount": 0.3,
                     "quarters": [{"quarter": "2027Q1"}, *({"quarter": f"2027Q{q}", "growth": 0.2} for q in (2, 3, 4)),
                                  {"quarter": "2028Q1", "growth": 0.2}]},
    }
    if term is not None:
        raw["forecast"]["commitment_term_quarters"] = term
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


def test_a_lot_ends_with_its_term_and_carry_forward_commits_again_at_that_quarter_s_terms(tmp_path):
    results = run_forecast(load_inputs(small_forecast(tmp_path, term=2)))
    for i, r in enumerate(results):
        assert all(lot.held_in(i) for lot in r.lots)
        assert sum(lot.gpus for lot in r.lots) == sum(r.reserved_gpus.values())
        if i:  # carry_forward: last quarter's whole fleet is committed now
            assert r.reserved_gpus == results[i - 1].gpus_by_type
    # The lot 2027Q2 made (Q1's fleet) is paid in Q2 and Q3; in Q4 it is gone and Q3's fleet is
    # committed again beside what Q3 added (a renewal, at Q3's terms).
    q2_lot = next(lot for lot in results[1].lots if lot.start == 1)
    assert q2_lot.gpus == results[0].gpus
    assert q2_lot in results[2].lots and q2_lot not in results[3].lots
    renewed = [lot for lot in results[3].lots if lot.start == 3]
    assert sum(lot.gpus for lot in renewed) == results[2].gpus - sum(lot.gpus for lot in results[3].lots if lot.start == 2)
    # Without a term every lot is held to the forecast's end.
    forever = run_forecast(load_inputs(small_forecast(tmp_path, term=None, name="forever")))
    made = {lot for r in forever for lot in r.lots}
    assert set(forever[-1].lots) == made and any(lot.start == 1 for lot in made)


def test_the_report_and_the_total_table_price_what_runs_past_the_last_quarter(tmp_path):
    out = tmp_path / "out"
    r = run("forecast", small_forecast(tmp_path, term=3), "--out-dir", out)
    assert r.exit_code == 0, r.output
    results = run_forecast(load_inputs(small_forecast(tmp_path, term=3)))
    last = results[-1]
    expected = sum(lot.gpus * lot.usd_per_gpu_hour * HOURS_PER_QUARTER * (lot.start + 3 - 1 - 4) for lot in last.lots
                   if lot.start + 3 - 1 > 4)
    assert expected > 0
    with open(out / "terms_forecast_total.csv", encoding="utf-8") as f:
        (total,) = csv.DictReader(f)
    assert float(total["committed_after_end_usd"]) == pytest.approx(expected, abs=1e-6)
    assert float(total["total_usd"]) == pytest.approx(sum(q.cost_per_hour for q in results) * HOURS_PER_QUARTER, abs=0.05)
    md = (out / "terms_forecast.md").read_text(encoding="utf-8")
    assert ("Each commitment the forecast makes is paid for 3 quarters from the quarter it starts, used or not "
            "(forecast.commitment_term_quarters); after 2028Q1 these still run: ") in md
    for lot, more in after_end(last.lots, 4):
        start = results[lot.start].quarter
        assert (f"{lot.gpus} h100-sxm at ${lot.usd_per_gpu_hour:,.3f} from {start} to {quarter_after('2028Q1', more)} "
                f"({more} quarter{'s' if more != 1 else ''} more)") in md
    assert f": ${expected:,.2f} committed after 2028Q1, which the total above does not count." in md
    # Without a term the cell is empty and the report says the term is not known.
    r = run("forecast", small_forecast(tmp_path, term=None, name="forever"), "--out-dir", out)
    assert r.exit_code == 0, r.output
    with open(out / "forever_forecast_total.csv", encoding="utf-8") as f:
        (total,) = csv.DictReader(f)
    assert total["committed_after_end_usd"] == ""
    assert "whatever term one runs beyond it is spend this forecast does not show" in (
        out / "forever_forecast.md").read_text(encoding="utf-8")


def test_with_a_term_and_no_carry_forward_a_stated_reservation_is_paid_for_its_term(tmp_path):
    path = small_forecast(tmp_path, term=2, carry_forward=False)
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    raw["forecast"]["quarters"][1]["reserved"] = {"h100-sxm": 4}
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    results = run_forecast(load_inputs(path))
    assert [r.reserved_gpus.get("h100-sxm", 0) for r in results] == [0, 4, 4, 0, 0]


def test_a_term_out_of_bounds_is_refused_naming_the_field(tmp_path):
    path = small_forecast(tmp_path, term=2)
    for bad, words in ((0, "greater than or equal to 1"), (41, "less than or equal to 40"), (2.5, "integer")):
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        raw["forecast"]["commitment_term_quarters"] = bad
        path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
        r = run("forecast", path, "--out-dir", tmp_path / "out")
        assert r.exit_code == 2, r.output
        assert "forecast.commitment_term_quarters" in r.output and words in r.output
        assert len(r.output.strip().splitlines()) == 1
        assert not (tmp_path / "out").exists()


def test_what_carry_forward_commits_next_counts_the_lots_whose_term_ends_with_the_last_quarter(tmp_path):
    """After the last quarter, carry_forward commits what it ran beyond the lots still in their term:
    the ones ending with it are renewed too, not only what it ran on demand."""
    from planner.commitments import in_force
    from planner.forecast_outputs import forecast_markdown

    results = run_forecast(load_inputs(small_forecast(tmp_path, term=2)))
    last = results[-1]
    staying = in_force(last.lots, len(results))
    renewed = last.gpus - sum(lot.gpus for lot in staying)
    assert renewed > last.gpus - sum(last.reserved_gpus.values())  # more than what ran on demand
    price = 2.99 * 0.7  # the last quarter's terms: the catalog's on-demand price less the discount
    in_all = sum(lot.usd_per_hour for lot in staying) + renewed * price
    text = forecast_markdown("terms", results)
    assert (f"With carry_forward, the {renewed} h100-sxm that 2028Q1 runs beyond the commitments still in their term "
            f"after it would be committed from the next quarter at 2028Q1's terms (${price:.3f} per GPU-hour): "
            f"${renewed * price:,.2f}/hour more, ${renewed * price * 2190 * 2:,.2f} over a 2-quarter term; "
            f"${in_all:,.2f}/hour committed in all.") in text
    assert not staying  # every lot's term ends with the quarter: nothing it adds to ("on the $0.00/hour" is not said)
    assert "a quarter)" not in text.split("Held at the end of 2028Q1:")[1].split(".")[0]  # no run rate to quote


def test_a_commitment_still_in_its_term_above_a_later_cap_names_the_term(tmp_path):
    path = small_forecast(tmp_path, term=3, carry_forward=False)
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    raw["forecast"]["quarters"][1]["reserved"] = {"h100-sxm": 6}
    raw["forecast"]["quarters"][2]["availability"] = {"h100-sxm": 4}
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    r = run("forecast", path, "--out-dir", tmp_path / "out")
    assert r.exit_code == 2, r.output
    assert ("forecast quarter 2027Q3: 6 h100-sxm GPUs are committed (6 committed in earlier quarters and still in "
            "their term, forecast.commitment_term_quarters: 3, and 0 reserved in this quarter) but availability is 4; "
            "a commitment is not given back: raise this quarter's availability or shorten the term") in r.output
    assert not (tmp_path / "out").exists()


def test_a_lot_above_its_quarters_on_demand_price_is_named_with_its_gpus_and_prices():
    """Lots paid above the quarter's own on-demand price are named, each quarter, summed by type and
    price; a lot at or below it, or of a type the quarter has no on-demand price for, is not."""
    lots = [Lot("h100-sxm", 4, 3.5, 0, 4), Lot("h100-sxm", 2, 3.5, 1, 4), Lot("h100-sxm", 3, 2.99, 1, 4),
            Lot("l40s", 2, 1.0, 0, 4), Lot("b200", 1, 99.0, 0, 4)]
    on_demand = {"h100-sxm": 2.99, "l40s": 1.40}
    def quarter(name, paid, prices):
        return SimpleNamespace(quarter=name, lots=paid, on_demand_price=prices)

    text = above_on_demand_text([quarter("2027Q1", lots[:1], on_demand),
                                 quarter("2027Q2", lots, {**on_demand, "h100-sxm": 3.6}),
                                 quarter("2027Q3", lots[:4], on_demand)])
    assert text.startswith("Committed above the on-demand price: 2027Q1 pays 4 h100-sxm at $3.50 per GPU-hour "
                           "against $2.99 on demand; 2027Q3 pays 6 h100-sxm at $3.50 per GPU-hour against $2.99 on demand. ")
    assert above_on_demand_text([quarter("2027Q1", lots[2:4], on_demand)]) == ""


def test_what_carry_forward_commits_next_says_what_it_adds_to(tmp_path):
    """With a term, "held at the end ... $63.37/hour", "$9.22/hour more" and "$67.42/hour in all" did not
    add up where lots' terms end with the last quarter (an outside probe): the sentence names the
    commitments still in their term after it, which the lots it adds join."""
    from planner.commitments import in_force
    from planner.forecast_outputs import forecast_markdown

    results = run_forecast(load_inputs(small_forecast(tmp_path, term=3)))
    staying = sum(lot.usd_per_hour for lot in in_force(results[-1].lots, len(results)))
    assert staying > 0  # the case: some lots run past the end
    text = forecast_markdown("terms", results)
    added, in_all = (float(x.replace(",", "")) for x in re.search(
        r"\$([\d,.]+)/hour more, \$[\d,.]+ over a 3-quarter term, on the \$[\d,.]+/hour still committed after it; "
        r"\$([\d,.]+)/hour committed in all\.", text).groups())
    assert f"on the ${staying:,.2f}/hour still committed after it" in text
    assert abs(staying + added - in_all) <= 0.011  # each rounded to the cent on its own
