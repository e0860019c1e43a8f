"""How bench/published.py reads the published serving rows and decides each replay.

No simulation here: the plans (deployment, engine settings, arrivals, statistics) and
the pieces of the replay that are pure functions are checked against the CSV's own
values and against closed forms.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from bench_scripts import load_bench

from planner.catalog import load_catalog


@pytest.fixture(scope="module")
def published():
    return load_bench("published")


@pytest.fixture(scope="module")
def plans(published):
    cat = load_catalog()
    return {row["point_id"]: published.plan_row(row, cat) for row in published.read_rows()}


def test_every_row_is_planned_or_refused_with_a_reason(published, plans):
    assert len(plans) == len(published.read_rows()) == 41
    for point_id, plan in plans.items():
        assert plan.replayable == (plan.dep is not None), point_id
        assert plan.replayable or plan.reasons, point_id
    # every source the CSV names is in the sources file
    assert {p.row["source_id"] for p in plans.values()} <= set(published.read_sources())


def test_redhat_h100_row_carries_its_vllm_flags(plans):
    plan = plans["mlperf_inf_v5.1/RedHat/XE8640_4xH100_vLLM/llama3.1-8b/Server"]
    assert plan.replayable
    eng = plan.dep.engine
    assert (eng.id, eng.max_num_batched_tokens, eng.max_num_seqs, eng.long_prefill_token_threshold) == (
        "vllm", 1024, 512, 256)
    assert plan.dep.memory_fraction == 0.91
    assert (plan.dep.weight_dtype.id, plan.dep.kv_dtype.id, plan.dep.tp) == ("fp8", "bf16", 1)
    assert plan.rate_rps == 39.64 and plan.clients is None
    assert plan.targets[("ttft", "p99")] == pytest.approx(1.91117)
    assert plan.targets[("tpot", "p50")] == pytest.approx(0.02364)
    assert plan.targets[("ttft", "p95")] == pytest.approx(1.14345)
    assert len(plan.targets) == 10  # mean, p50, p90, p95 and p99 of each


def test_l40s_row_gets_vllm_v1_small_gpu_defaults(plans):
    plan = plans["mlperf_inf_v5.1/RedHat/IBM_Cloud_gx3-48x240x2l40s_vLLM/llama3.1-8b/Server"]
    eng = plan.dep.engine
    assert (eng.max_num_batched_tokens, eng.max_num_seqs, eng.long_prefill_token_threshold) == (2048, 256, 0)
    assert (plan.dep.max_model_len, plan.dep.memory_fraction) == (2668, 0.96)


def test_several_replicas_share_the_rate_evenly(plans):
    plan = plans["mlperf_inf_v5.1/HPE/HPE_Cray_XD670_H200_SXM_141GBx8_TRT/llama3.1-8b/Server"]
    assert plan.rate_rps == pytest.approx(504.93 / 8)
    assert (plan.dep.engine.id, plan.dep.engine.max_num_batched_tokens, plan.dep.engine.max_num_seqs) == (
        "trtllm", 12000, 2048)
    assert any("8 replicas" in a for a in plan.approximations)


def test_llama2_rows_use_the_splitwise_config(plans):
    plan = plans["mlperf_inf_v4.1/NVIDIA/DGX-H100_H100-SXM-80GBx8_TRT/llama2-70b-99/Server"]
    assert plan.replayable
    assert (plan.dep.model.id, plan.dep.model.vocab_size, plan.dep.max_model_len) == ("llama-2-70b", 32000, 4096)
    assert plan.rate_rps == pytest.approx(75.1 / 4)


def test_nim_rows_are_closed_loops_with_itl_read_as_tpot_mean(plans):
    plan = plans["nim_benchmarking_llm_1.0/llama-3.3-70b/nim-1.8.0/2xh100/isl5000-osl500/c100"]
    assert plan.clients == 100 and plan.rate_rps is None
    assert plan.targets == {("ttft", "mean"): pytest.approx(7.99625), ("tpot", "mean"): pytest.approx(0.09291)}
    assert (plan.dep.model.id, plan.dep.engine.id, plan.dep.kv_dtype.id, plan.dep.tp) == (
        "llama-3.1-70b", "trtllm", "fp8", 2)
    assert any("KV dtype not stated" in a for a in plan.approximations)


@pytest.mark.parametrize(("point_id", "reason"), [
    ("sglang_bench_vllm060/8b/sglang/rps4", "engine sglang"),
    ("sglang_bench_vllm060/70b/vllm/rps8", "multi-step scheduling"),
    ("sglang_bench_vllm060/70b/vllm/rps8", "lengths 'sharegpt'"),
    ("mlperf_inf_v4.1/AMD/1xMI300X_2xEPYC-9374F/llama2-70b-99/Server", "vLLM 0.4 (V0)"),
    ("mlperf_inf_v5.1/AMD/8xMI300X_2xEPYC_9575F/mixtral-8x7b/Server", "without chunked prefill"),
    ("mlperf_inf_v5.1/NVIDIA/B200-SXM-180GBx8_TRT/deepseek-r1/Server", "expert / attention data parallelism"),
])
def test_rows_the_simulator_cannot_represent_say_why(plans, point_id, reason):
    plan = plans[point_id]
    assert not plan.replayable
    assert any(reason in r for r in plan.reasons), plan.reasons


def test_lengths_follow_the_row(published, plans):
    fixed = plans["nim_benchmarking_llm_1.0/llama-3.3-70b/nim-1.8.0/2xh100/isl5000-osl500/c1"]
    prompt, output = published.row_lengths(fixed, 100, seed=0)
    assert set(prompt) == {5000} and set(output) == {500}
    cnndm = plans["mlperf_inf_v5.1/HPE/HPE_Cray_XD670_H200_SXM_141GBx8_TRT/llama3.1-8b/Server"]
    prompt, output = published.row_lengths(cnndm, 20_000, seed=0)
    assert set(output) == {129}
    assert prompt.mean() == pytest.approx(870.7, rel=0.02)  # the dataset's mean prompt (data/samples/README.md)
    orca = plans["mlperf_inf_v5.1/HPE/HPE_Cray_XD670_H200_SXM_141GBx8_TRT/llama2-70b-99/Server"]
    prompt, output = published.row_lengths(orca, 20_000, seed=0)
    assert output.mean() == pytest.approx(292.7, rel=0.02)  # rescaled to the run's mean output
    assert (prompt + output).max() <= orca.dep.max_model_len


def test_closed_loop_rate_solves_littles_law(published):
    # M/M/1 sojourn 1/(mu - lam): lam/(mu - lam) = N gives lam = N mu / (N + 1).
    mu, clients = 2.0, 5.0

    def latency(lam):
        return 1.0 / (mu - lam) if lam < mu else math.inf

    lam = published.closed_loop_rate(latency, clients, start_rps=clients * mu)
    assert lam == pytest.approx(clients * mu / (clients + 1), rel=0.01)
    # A ceiling below the rate the clients need: no answer.
    assert published.closed_loop_rate(lambda lam: 1.0, 10.0, start_rps=10.0, max_rps=5.0) is None


def test_e2e_mean_adds_decode_time(published):
    from planner.sim_measures import GapDistribution, RequestLatencies

    lat = RequestLatencies(np.array([10, 10]), np.array([1, 11]), np.array([0.5, 1.0]), np.array([np.nan, 0.1]),
                           GapDistribution.of(np.array([0.1]), np.array([1.0])))
    assert published.e2e_mean(lat) == pytest.approx((0.5 + 1.0 + 10 * 0.1) / 2)
