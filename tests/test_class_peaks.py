"""A traffic class's own busiest minutes: kept by length in histograms and their files, and the rate
they set for a class that comes in bursts of its own (plan_objects.class_peak_rps)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from clirun import run
from scenario_files import write_scenario
from scipy.special import betaincinv, gammaincinv
from scipy.stats import poisson

from planner.errors import InputError
from planner.histogram import Histogram
from planner.inputs import load_inputs
from planner.plan_objects import traffic_classes
from planner.plan_setup import served_traffic
from planner.workload.histfile import histogram_from_table, histogram_table, read_histogram
from planner.workload.peaks import (
    binomial_tail_reached,
    class_bursts,
    minutes_at_or_above,
    poisson_rate_reaching,
)

ROOT = Path(__file__).resolve().parents[1]
AZURE = ROOT / "data" / "samples" / "azure_conv_2023_sample.csv"


@pytest.mark.parametrize("count", [1, 2, 3.5, 5, 12.5, 30, 49.9, 50, 61.8, 101.7, 402, 5000])
@pytest.mark.parametrize("tail", [1e-8, 1e-6, 1.7e-4, 0.01, 0.0172, 0.05, 0.3])
def test_the_poisson_rate_is_the_gamma_quantile(count, tail):
    # P(N >= c) = P(c, rate): the exact inverse, within 1% down to the busiest minute's tails of a long log
    # (a reading found Wilson-Hilferty alone 42% low at 5 arrivals and a tail of 1e-6)
    assert poisson_rate_reaching(count, tail) == pytest.approx(gammaincinv(count, tail), rel=0.01)
    if count == int(count) and count >= 30 and tail >= 1e-4:
        assert poisson.sf(count - 1, poisson_rate_reaching(count, tail)) == pytest.approx(tail, rel=0.05)


def test_a_minute_of_no_arrivals_asks_for_no_rate():
    assert poisson_rate_reaching(0, 0.01) == 0.0


@pytest.mark.parametrize(("n", "k"), [(19, 1), (58, 1), (100, 3), (1438, 15), (43_200, 432)])
def test_the_binomial_tail_is_the_beta_quantile(n, k):
    # P(Bin(n, p) >= k) = I_p(k, n - k + 1)
    assert binomial_tail_reached(n, k, 0.01) == pytest.approx(betaincinv(k, n - k + 1, 0.01), rel=1e-6)


def _fewest_minutes_reaching(n: int, q: float) -> int:
    """By brute force: the fewest of n minutes at or above a count for numpy's q-quantile of them to reach it
    (those minutes as far above it as may be, the others at 0)."""
    return next(m for m in range(1, n + 1) if np.quantile(np.r_[np.zeros(n - m), np.full(m, 1e12)], q) >= 1)


@pytest.mark.parametrize("n", [2, 19, 58, 100, 101, 1438])
@pytest.mark.parametrize("q", [0.9, 0.95, 0.99, 1.0])
def test_a_quantile_reaches_a_count_only_where_that_many_minutes_do(n, q):
    assert minutes_at_or_above(n, "quantile", q) == _fewest_minutes_reaching(n, q)
    assert minutes_at_or_above(n, "max", 1.0) == 1


def _timed(rng, n=4000):
    prompt = rng.integers(1, 30_000, n)
    output = rng.integers(1, 2_000, n)
    seconds = np.sort(rng.uniform(0, 3_600 * 3, n)) + 1.7e9
    return prompt, output, seconds


def test_a_selection_keeps_its_own_minutes_over_the_whole_span():
    prompt, output, seconds = _timed(np.random.default_rng(1))
    hist = Histogram.from_arrays(prompt, output, seconds)
    minutes = np.floor(seconds / 60).astype(np.int64)
    for above, at_most in ((None, 4096), (4096, 16384), (8192, None)):
        total = prompt + output
        mine = np.ones(total.size, bool)
        if above is not None:
            mine &= total > above
        if at_most is not None:
            mine &= total <= at_most
        expected = np.bincount(minutes[mine] - minutes.min(), minlength=minutes.max() - minutes.min() + 1)
        assert np.array_equal(hist.select_total(above=above, at_most=at_most).own_minute_counts(), expected)
    assert np.array_equal(hist.own_minute_counts(), np.bincount(minutes - minutes.min()))


def test_a_merge_with_a_source_without_minutes_by_length_keeps_none():
    prompt, output, seconds = _timed(np.random.default_rng(2))
    timed = Histogram.from_arrays(prompt, output, seconds)
    table = histogram_table(timed)
    is_minute = pa.compute.equal(table["kind"], "minute")
    unbinned = table.set_column(table.column_names.index("total_bin"), "total_bin",
                                pa.compute.if_else(is_minute, pa.scalar(None, pa.int32()), table["total_bin"]))
    old = histogram_from_table(unbinned)
    assert np.array_equal(old.minute_count, timed.minute_count) and not old.minute_bins_kept
    assert old.select_total(above=4096).own_minute_counts() is None
    merged = timed.merge(old)
    assert not merged.minute_bins_kept and merged.select_total(above=4096).own_minute_counts() is None
    assert timed.merge(timed).minute_bins_kept


def test_the_file_keeps_minutes_by_length(tmp_path):
    prompt, output, seconds = _timed(np.random.default_rng(3))
    hist = Histogram.from_arrays(prompt, output, seconds)
    back = histogram_from_table(histogram_table(hist))
    assert back == hist and back.minute_bins_kept


def test_a_bin_that_counts_more_arrivals_than_its_cells_is_refused():
    hist = Histogram.from_arrays(np.array([100, 200, 3000]), np.array([10, 20, 30]), np.array([0.0, 30.0, 90.0]))
    table = histogram_table(hist)
    kinds, bins = table["kind"].to_pylist(), table["total_bin"].to_pylist()
    # the third request's minute row moved to the first request's bin: 3 arrivals, each total as before
    last_minute = len(kinds) - 1
    moved = [bins[kinds.index("minute")] if i == last_minute else b for i, b in enumerate(bins)]
    bad = table.set_column(table.column_names.index("total_bin"), "total_bin", pa.array(moved, pa.int32()))
    with pytest.raises(InputError, match=r"the 'minute' rows of total_bin 0 count 2 arrivals but its cells hold 1 "
                                         r"requests"):
        histogram_from_table(bad)


def _azure_scenario(folder: Path, source: str, peak: str = "{method: quantile, quantile: 0.99}") -> Path:
    return write_scenario(folder, f"""\
        name: azure
        model: llama-3.1-8b
        traffic:
          source: {source}
          peak: {peak}
        gpus: [h100-sxm]
        tp: [1]
        weight_dtypes: [bf16]
        kv_dtypes: [bf16]
        split_thresholds: [4096]
        """)


def _classes(path: Path) -> dict[str, list]:
    inputs = load_inputs(path)
    limit, served, peak = served_traffic(inputs.scenario, inputs.model, inputs.traffic.hist, inputs.traffic.peak_rps,
                                         inputs.scenario.context_limit)
    return traffic_classes(inputs.scenario, served, limit, peak)


def test_the_azure_logs_long_requests_are_planned_at_their_own_bursts(tmp_path):
    shutil.copy(AZURE, tmp_path / "log.csv")
    classes = _classes(_azure_scenario(tmp_path, "{log: log.csv, preset: azure}"))
    long = next(tc for tc in classes["4096"] if tc.name == "long")
    # by hand from the log: its requests over 4,096 tokens, per minute over the log's whole minutes
    import csv
    with open(AZURE, newline="") as f:
        rows = list(csv.DictReader(f))
    import datetime
    minute = np.array([int(datetime.datetime.fromisoformat(r["TIMESTAMP"]).timestamp() // 60) for r in rows])
    total = np.array([int(r["ContextTokens"]) + int(r["GeneratedTokens"]) for r in rows])
    per_minute = np.bincount(minute - minute.min())[1:-1]
    per_minute_long = np.bincount(minute[total > 4096] - minute.min(), minlength=minute.max() - minute.min() + 1)[1:-1]
    own = np.quantile(per_minute_long, 0.99)
    share_peak = np.quantile(per_minute, 0.99) / 60 * np.count_nonzero(total > 4096) / total.size
    assert long.bursts.own_minute_rps == pytest.approx(own / 60)
    assert long.share_peak_rps == pytest.approx(share_peak)
    tail = max(0.01, 1 / per_minute_long.size)
    assert long.peak_rps == pytest.approx(poisson_rate_reaching(own, tail) / 60)
    # as many of 58 minutes as its p99 needs reach it in 1% of logs only at a rate above its share: bursts of its
    # own (by scipy's inverses, not the code's)
    n = per_minute_long.size
    k = _fewest_minutes_reaching(n, 0.99)
    least = gammaincinv(own, betaincinv(k, n - k + 1, 0.01)) / 60
    assert long.bursts.least_rps == pytest.approx(least, rel=0.01) and least > 1.5 * share_peak
    assert long.own_bursts and long.peak_rps > 1.9 * long.share_peak_rps
    assert long.rate_rps == pytest.approx(long.peak_rps * 1.2)
    # the whole's own minutes are its peak: no class of all the served requests is raised
    assert not classes["none"][0].own_bursts and not next(tc for tc in classes["4096"] if tc.name == "short").own_bursts


def test_a_log_and_its_histogram_file_plan_the_same_classes(tmp_path):
    shutil.copy(AZURE, tmp_path / "log.csv")
    result = run("histogram", tmp_path / "log.csv", "--preset", "azure", "-o", tmp_path / "log.hist.parquet")
    assert result.exit_code == 0, result.output
    from_log = _classes(_azure_scenario(tmp_path, "{log: log.csv, preset: azure}"))
    from_file = _classes(_azure_scenario(tmp_path, "{histogram: log.hist.parquet}"))
    for option, classes in from_log.items():
        assert [tc.peak_rps for tc in classes] == [tc.peak_rps for tc in from_file[option]]


@pytest.mark.parametrize("scenario", ["128k_rollout", "finance_2027", "70b_enterprise"])
def test_a_poisson_source_keeps_every_class_at_its_share(scenario):
    """A thin class's own p99 minute is mostly its own Poisson noise, above its share of the whole's (the
    128k rollout's 2% over 16,384 tokens: 1.03 requests/s against 0.85; finance_2027's 0.09% over 16,384,
    over 3 minutes: 0.43 against 0.36), which no log of 100 would call bursts of its own."""
    classes = [tc for option in _classes(ROOT / "scenarios" / f"{scenario}.yaml").values() for tc in option]
    assert any(tc.bursts.own_minute_rps > 1.1 * tc.share_peak_rps for tc in classes) == (scenario != "70b_enterprise")
    for tc in classes:
        assert tc.bursts is not None and not tc.own_bursts
        assert tc.peak_rps == tc.share_peak_rps


def test_a_stated_peak_keeps_every_class_at_its_share(tmp_path):
    shutil.copy(AZURE, tmp_path / "log.csv")
    classes = _classes(_azure_scenario(tmp_path, "{log: log.csv, preset: azure}", "{method: explicit, rps: 10}"))
    long = next(tc for tc in classes["4096"] if tc.name == "long")
    assert long.bursts is None and long.peak_rps == pytest.approx(10 * long.share)


def test_the_report_says_which_class_its_own_bursts_set(tmp_path):
    shutil.copy(AZURE, tmp_path / "log.csv")
    path = _azure_scenario(tmp_path, "{log: log.csv, preset: azure}")
    result = run("solve", path, "--no-verify", "--out-dir", tmp_path / "out")
    assert result.exit_code == 0, result.output
    report = (tmp_path / "out" / "azure.md").read_text()
    long = next(tc for tc in _classes(path)["4096"] if tc.name == "long")
    assert (f"  - split at 4,096 tokens, {long.label}: its own p99 minute {long.bursts.own_minute_rps:,.3f} "
            f"requests/s, Poisson arrivals' at {long.bursts.poisson_rps:,.3f} requests/s (reached in at most 1% of logs "
            f"at {long.bursts.least_rps:,.3f}); its share of the peak {long.share_peak_rps:,.3f}: planned at "
            f"{long.bursts.poisson_rps:,.3f} × growth 1 = {long.peak_rps:,.3f} requests/s") in report


def test_documents_sent_together_size_their_own_pool(tmp_path):
    """A chat service at 10 requests/s, long documents at 0.2 a second, and 100 more sent within one minute
    every hour (the outside probe's log: planned from its histogram, the long pool was certified at a
    twentieth of its bursts)."""
    rng = np.random.default_rng(5)
    chat = np.sort(rng.uniform(0, 3 * 3600, 3 * 3600 * 10))
    docs = np.concatenate([hour * 3600 + 1800 + rng.uniform(0, 60, 100) for hour in range(3)]
                          + [rng.uniform(0, 3 * 3600, int(3 * 3600 * 0.2))])
    seconds = np.concatenate([chat, docs]) + 1_700_000_040.0  # a whole minute: each burst within one
    prompt = np.concatenate([rng.integers(200, 2000, chat.size), rng.integers(20_000, 28_000, docs.size)])
    output = np.concatenate([rng.integers(50, 300, chat.size), rng.integers(100, 400, docs.size)])
    lines = ["prompt_tokens,output_tokens,timestamp_ms"] + [
        f"{p},{o},{int(t * 1000)}" for p, o, t in sorted(zip(prompt, output, seconds, strict=True), key=lambda r: r[2])]
    (tmp_path / "log.csv").write_text("\n".join(lines) + "\n")
    path = write_scenario(tmp_path, """\
        name: docs
        model: llama-3.1-8b
        context_limit: 32768
        traffic:
          source: {log: log.csv}
          peak: {method: max}
        slo: {bands: [{name: chat, prompt_below: 8192, ttft_s: 0.3, tpot_ms: 20}, {name: docs, ttft_s: 15, tpot_ms: 100}]}
        gpus: [h100-sxm]
        tp: [1]
        weight_dtypes: [bf16]
        kv_dtypes: [bf16]
        split_thresholds: [8192]
        verify: false
        """)
    long = next(tc for tc in _classes(path)["8192"] if tc.name == "long")
    assert long.bursts.own_minute_rps > 100 / 60
    assert long.own_bursts and long.peak_rps > 3 * long.share_peak_rps
    result = run("solve", path, "--json", "--out-dir", tmp_path / "out")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    decision = (tmp_path / "out" / "docs.md").read_text().split("## ", 2)[1]
    assert plan["split_threshold"] == 8192  # the chat band's TTFT keeps documents out of its pool
    [row] = [p for p in plan["plan"] if p["class_rate_rps"] > p["class_share_rate_rps"] * 1.0001]
    assert row["class_rate_rps"] == pytest.approx(long.peak_rps * 1.2)
    assert row["class_share_rate_rps"] == pytest.approx(long.share_peak_rps * 1.2)
    assert row["replicas"] * row["capacity_rps"] >= row["class_rate_rps"]
    assert (f"**Planned for its own bursts (the Traffic section): {long.label} at {long.peak_rps:,.3f} requests/s, "
            f"not its share, {long.share_peak_rps:,.3f}.**") in decision
    # the rate each pool is judged at says so too (a reading: it said "its share of the peak" of every pool)
    assert (f"(its share of the peak × headroom 1.2; for the {long.label} pool, its class's own bursts' rate instead of "
            "its share)") in (tmp_path / "out" / "docs.md").read_text()

    # and a forecast of it, whose quarters plan the same class at its bursts
    path.write_text(path.read_text() + "forecast:\n  quarters:\n    - {quarter: 2027Q1}\n    - {quarter: 2027Q2, growth: 0.1}\n")
    result = run("forecast", path, "--out-dir", tmp_path / "fc")
    assert result.exit_code == 0, result.output
    grown = 1.1  # 2027Q2's demand: the bursts are measured before growth
    assert (f"The {long.label} pool is planned at its class's own bursts' rate, above its share of that peak (2027Q1 "
            f"{long.peak_rps:,.3f} requests/s against {long.share_peak_rps:,.3f}; 2027Q2 {long.peak_rps * grown:,.3f} "
            f"requests/s against {long.share_peak_rps * grown:,.3f}; the rule is the scenario's report's, Traffic "
            "section).") in (tmp_path / "fc" / "docs_forecast.md").read_text()


def test_a_histogram_file_without_minutes_by_length_is_warned_of(tmp_path):
    prompt, output, seconds = _timed(np.random.default_rng(4), 20_000)
    table = histogram_table(Histogram.from_arrays(prompt, output, seconds))
    is_minute = pa.compute.equal(table["kind"], "minute")
    table = table.set_column(table.column_names.index("total_bin"), "total_bin",
                             pa.compute.if_else(is_minute, pa.scalar(None, pa.int32()), table["total_bin"]))
    import pyarrow.parquet as pq
    pq.write_table(table, tmp_path / "old.hist.parquet")
    assert not read_histogram(tmp_path / "old.hist.parquet").minute_bins_kept
    path = _azure_scenario(tmp_path, "{histogram: old.hist.parquet}")
    result = run("solve", path, "--no-verify", "--out-dir", tmp_path / "out")
    assert result.exit_code == 0, result.output
    warning = ("old.hist.parquet counts arrivals per minute without their lengths (written before planner kept them "
               "by length): the histogram keeps none, so each traffic class is planned at its share of the peak and a "
               "class's own bursts (long documents sent together) are not seen; rebuild it from the logs with "
               "`planner histogram`")
    assert result.stderr.count(warning) == 1 and warning in (tmp_path / "out" / "azure.md").read_text()
    long = next(tc for tc in _classes(path)["4096"] if tc.name == "long")
    assert long.bursts is None and long.peak_rps == long.share_peak_rps
    # merged with a log where a user can still rebuild it (a reading: the merge dropped the log's minutes by
    # length too, and only a later solve said so)
    (tmp_path / "log.csv").write_text("prompt_tokens,output_tokens,timestamp_ms\n" + "".join(
        f"100,10,{1_700_000_040_000 + 500 * i}\n" for i in range(600)))
    result = run("histogram", tmp_path / "old.hist.parquet", tmp_path / "log.csv", "-o", tmp_path / "merged.hist.parquet")
    assert result.exit_code == 0, result.output
    assert f"warning: {tmp_path / 'old.hist.parquet'} counts arrivals per minute without their lengths" in result.stderr
    assert not read_histogram(tmp_path / "merged.hist.parquet").minute_bins_kept
    fresh = run("histogram", tmp_path / "log.csv", "-o", tmp_path / "new.hist.parquet")
    assert fresh.exit_code == 0 and "warning" not in fresh.stderr, fresh.stderr
    # a stated peak is shared out whatever the file keeps: nothing to rebuild for
    stated = _azure_scenario(tmp_path, "{histogram: old.hist.parquet}", "{method: explicit, rps: 8}")
    result = run("solve", stated, "--no-verify", "--no-report")
    assert result.exit_code == 0 and "without their lengths" not in result.stderr, result.stderr


def test_class_bursts_of_a_busiest_minute_use_one_minute_in_n():
    seconds = np.concatenate([np.arange(0, 600, 1.0), np.full(50, 330.0)]) + 1.7e9
    prompt = np.concatenate([np.full(600, 100), np.full(50, 20_000)])
    hist = Histogram.from_arrays(prompt, np.full(650, 10), seconds)
    bursts = class_bursts(hist.select_total(above=16384), "max", 1.0)
    counts = hist.select_total(above=16384).own_minute_counts()[1:-1]
    assert bursts.own_minute_rps == pytest.approx(50 / 60)
    assert bursts.poisson_rps == pytest.approx(poisson_rate_reaching(50, 1 / counts.size) / 60)
    assert bursts.least_rps == pytest.approx(gammaincinv(50, 1 - 0.99 ** (1 / counts.size)) / 60, rel=0.01)


def test_a_class_held_above_its_share_for_hours_is_planned_at_its_own_rate():
    """(A reading: documents at 1 request/s through a 12-hour night, chat busy by day: the long class's p99
    minute, 1.28 requests/s, was tested against the busiest of 1,438 Poisson minutes at its share, 0.84, which
    reaches far higher, and was planned at its share with "no class's own minutes beyond its share".)"""
    rng = np.random.default_rng(5)
    day = 86_400

    def poisson_times(rate, start, end):
        return rng.uniform(start, end, rng.poisson(rate * (end - start)))

    chat = np.concatenate([poisson_times(10, 8 * 3600, 20 * 3600), poisson_times(2, 0, 8 * 3600),
                           poisson_times(2, 20 * 3600, day)])
    docs = np.concatenate([poisson_times(1, 0, 8 * 3600), poisson_times(1, 20 * 3600, day)])
    prompt = np.concatenate([rng.integers(200, 2000, chat.size), rng.integers(9000, 14000, docs.size)])
    hist = Histogram.from_arrays(prompt, np.full(prompt.size, 300), np.concatenate([chat, docs]) + 1_700_000_040.0)
    from planner.plan_objects import class_peak_rps
    from planner.workload.peaks import peak_rate_rps

    long = hist.select_total(above=8192)
    share_peak = peak_rate_rps(hist) * long.requests / hist.requests
    bursts = class_bursts(long, "quantile", 0.99)
    assert bursts.least_rps > share_peak  # its p99 minute is beyond Poisson arrivals at its share
    assert class_peak_rps(share_peak, bursts, 1.0) == bursts.poisson_rps == pytest.approx(1.0, rel=0.05)


def test_a_peak_at_a_low_quantile_shares_out_to_every_class():
    """(A reading: with peak quantile 0.3, a stationary Poisson day had nearly every class raised, the whole
    too, one whose own minute was below its share: a low quantile of Poisson minutes lies under their mean.)"""
    prompt, output, seconds = _timed(np.random.default_rng(6), 3 * 3600 * 2)
    hist = Histogram.from_arrays(prompt, output, seconds)
    for cut in ({"at_most": 4096}, {"above": 4096}, {}):
        assert class_bursts(hist.select_total(**cut), "quantile", 0.3) is None
        assert class_bursts(hist.select_total(**cut), "quantile", 0.89) is None
        assert class_bursts(hist.select_total(**cut), "quantile", 0.9) is not None


def test_a_peak_below_the_burst_quantile_says_each_class_takes_its_share(tmp_path):
    shutil.copy(AZURE, tmp_path / "log.csv")
    path = _azure_scenario(tmp_path, "{log: log.csv, preset: azure}", "{method: quantile, quantile: 0.5}")
    assert all(tc.bursts is None and not tc.own_bursts for option in _classes(path).values() for tc in option)
    result = run("solve", path, "--no-verify", "--out-dir", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert ("- Each traffic class is planned at its share of the served peak: a peak at the p50 minute is a level, "
            "not a burst, and a class's own minutes are tested against Poisson arrivals only for a peak at the p90 "
            "minute or above.") in (tmp_path / "out" / "azure.md").read_text()
