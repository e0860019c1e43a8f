"""Schema of the published serving measurements in data/measured/serving_percentiles*.csv.

The rows are transcribed from MLPerf logs, a benchmark README and a vendor table
(data/measured/README.md). These checks catch transcription slips: a missing
source or licence, a percentile out of order, a run that would not have been
valid under the latency targets it states, throughput that does not match its
own request rate and output length, an id the catalog does not know.
"""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
MEASURED = ROOT / "data" / "measured"

REQUIRED_COLUMNS = [
    "point_id", "source_id", "model", "catalog_model", "gpu", "num_gpus", "tp", "replicas",
    "weight_dtype", "kv_dtype", "engine", "engine_version", "arrival", "request_rate_rps",
    "concurrency", "prompt_tokens", "output_tokens", "length_distribution",
    "max_num_batched_tokens", "chunked_prefill",
    "ttft_ms_mean", "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99",
    "tpot_ms_mean", "tpot_ms_p50", "tpot_ms_p90", "tpot_ms_p99",
    "itl_ms_p99", "throughput_req_s", "throughput_output_tok_s", "slo", "source_ref", "notes",
]  # fmt: skip
SOURCE_COLUMNS = ["source_id", "title", "url", "date", "licence", "engines", "hardware", "method"]
PERCENTILES = ["p50", "p90", "p95", "p99"]
METRICS = ["ttft", "tpot", "itl", "e2e"]
# A value spelled like a catalog id claims to be one; anything else is the source's own label.
CATALOG_ID = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")


@pytest.fixture(scope="module")
def points() -> pd.DataFrame:
    return pd.read_csv(MEASURED / "serving_percentiles.csv", keep_default_na=False, na_values=[""])


@pytest.fixture(scope="module")
def sources() -> pd.DataFrame:
    return pd.read_csv(
        MEASURED / "serving_percentiles_sources.csv", keep_default_na=False, na_values=[""]
    )


def _given(row: pd.Series, column: str) -> bool:
    return column in row.index and not pd.isna(row[column])


def test_required_columns_present(points, sources):
    assert [c for c in REQUIRED_COLUMNS if c not in points.columns] == []
    assert [c for c in SOURCE_COLUMNS if c not in sources.columns] == []


def test_point_ids_unique(points):
    assert points.loc[points["point_id"].duplicated(), "point_id"].tolist() == []


def test_every_source_is_described_with_a_licence(points, sources):
    assert sources["source_id"].is_unique
    assert sorted(set(points["source_id"]) - set(sources["source_id"])) == []
    for column in SOURCE_COLUMNS:
        blank = sources.loc[
            sources[column].isna() | (sources[column].astype(str).str.strip() == "")
        ]
        assert blank["source_id"].tolist() == [], f"sources without {column}"


def test_arrival_kind_matches_its_load_column(points):
    assert set(points["arrival"]) <= {"poisson", "closed_loop", "burst"}
    for _, row in points.iterrows():
        if row["arrival"] == "poisson":
            assert row["request_rate_rps"] > 0 and pd.isna(row["concurrency"]), row["point_id"]
        elif row["arrival"] == "closed_loop":
            assert pd.isna(row["request_rate_rps"]), row["point_id"]
            assert row["concurrency"] >= 1 and float(row["concurrency"]).is_integer(), row[
                "point_id"
            ]


def test_numbers_are_positive(points):
    numeric = [
        c
        for c in points.columns
        if "_ms_" in c or c.startswith("throughput_") or c.endswith("_tokens")
        or c in ("num_gpus", "tp", "replicas", "request_rate_rps", "concurrency",
                 "max_num_batched_tokens", "max_num_seqs", "num_requests")
    ]  # fmt: skip
    for column in numeric:
        values = pd.to_numeric(points[column], errors="raise").dropna()
        assert (values > 0).all(), f"{column}: {values[values <= 0].to_dict()}"


def test_gpus_are_tp_times_replicas(points):
    # Every row is tensor parallel only; pipeline-parallel rows would need their own column.
    bad = points.loc[points["num_gpus"] != points["tp"] * points["replicas"], "point_id"]
    assert bad.tolist() == []


def test_percentiles_in_order(points):
    for _, row in points.iterrows():
        for metric in METRICS:
            given = [
                (p, row[f"{metric}_ms_{p}"]) for p in PERCENTILES if _given(row, f"{metric}_ms_{p}")
            ]
            for (lo_name, lo), (hi_name, hi) in itertools.pairwise(given):
                assert lo <= hi, f"{row['point_id']}: {metric} {lo_name} {lo} > {hi_name} {hi}"


def test_every_point_has_a_first_token_and_a_decode_latency(points):
    for _, row in points.iterrows():
        ttft = [c for c in points.columns if c.startswith("ttft_ms_") and _given(row, c)]
        decode = [
            c for c in points.columns if c.startswith(("tpot_ms_", "itl_ms_")) and _given(row, c)
        ]
        assert ttft and decode, row["point_id"]


def test_fixed_lengths_are_stated(points):
    fixed = points[points["length_distribution"] == "fixed"]
    assert not fixed.empty
    assert fixed[["prompt_tokens", "output_tokens"]].notna().all().all()
    assert points["length_distribution"].notna().all()


def test_valid_runs_meet_the_targets_they_state(points):
    """MLPerf accepts a run only if its p99 TTFT and p99 TPOT are within the targets."""
    stated = points[points["slo"].notna()]
    assert not stated.empty
    for _, row in stated.iterrows():
        targets = dict(
            re.fullmatch(r"(ttft_p99|tpot_p99)<=([0-9.]+)ms", term).groups()
            for term in row["slo"].split(";")
        )
        assert row["ttft_ms_p99"] <= float(targets["ttft_p99"]), row["point_id"]
        assert row["tpot_ms_p99"] <= float(targets["tpot_p99"]), row["point_id"]


def test_token_throughput_is_request_rate_times_output_length(points):
    both = points.dropna(subset=["throughput_req_s", "throughput_output_tok_s", "output_tokens"])
    assert len(both) > 0
    for _, row in both.iterrows():
        implied = row["throughput_req_s"] * row["output_tokens"]
        # output_tokens is rounded to 0.1 token
        assert math.isclose(
            implied, row["throughput_output_tok_s"], rel_tol=0.05 / row["output_tokens"] + 1e-4
        ), row["point_id"]


def test_catalog_ids_exist(points, catalog):
    for _, row in points.iterrows():
        if CATALOG_ID.match(row["model"]):
            assert row["model"] in catalog.models, row["point_id"]
        else:
            assert "/" in row["model"], (
                f"{row['point_id']}: model is neither a catalog id nor an HF id"
            )
        if _given(row, "catalog_model"):
            assert row["catalog_model"] in catalog.models, row["point_id"]
        if CATALOG_ID.match(row["gpu"]):
            assert row["gpu"] in catalog.gpus, row["point_id"]
        for column in ("weight_dtype", "kv_dtype"):
            if _given(row, column):
                assert row[column] in catalog.dtypes, f"{row['point_id']}: {column}"


def test_coverage_the_bench_needs(points):
    """Issue 11 asks for at least 40 points from 3 sources, tp 1 and tp > 1, both arrival kinds."""
    assert len(points) >= 40
    assert points["source_id"].nunique() >= 3
    assert {1} < set(points["tp"])
    assert {"poisson", "closed_loop"} <= set(points["arrival"])
