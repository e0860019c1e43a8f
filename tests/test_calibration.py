"""Calibration of the efficiency factors on the measurements in data/measured/."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from planner.calibration.efficiency_blocks import rewrite_efficiency_blocks
from planner.calibration.fit import (
    BOUNDS,
    FACTORS,
    TRTLLM_PRIORS,
    fit_efficiency,
    trtllm_log_errors,
)
from planner.calibration.measured import load_splitwise_rows, load_trtllm_rows
from planner.calibration.predict import (
    TrtllmCase,
    predict_splitwise,
    splitwise_step,
    trtllm_cases,
    trtllm_deployment,
    trtllm_profile,
    with_efficiency,
)
from planner.capacity import SLO, ReplicaModel, replica_capacity
from planner.catalog import Efficiency
from planner.deployment import make_deployment
from planner.roofline import (
    GEMM_CORNER_P,
    SMALL_MESSAGE_BANDWIDTH_SHARE,
    StepModel,
    allreduce_call_latency,
    gemm_phase_s,
    straggler_factor,
)
from planner.units import GiB

ROOT = Path(__file__).resolve().parent.parent


def full_path_prediction(catalog, row, eff):
    """Offline max throughput, output tokens/s per GPU, through replica_capacity with the factors
    applied from the start (no SLO, worst_case sizing; the max-throughput benchmark runs at the
    bound, not at the knee): what TrtllmCase.predict short-cuts."""
    dep = with_efficiency(trtllm_deployment(catalog, row), eff)
    prof = trtllm_profile(dep, row)
    cap = replica_capacity(dep, prof, SLO(), sizing="worst_case")
    return ReplicaModel(dep, prof, SLO(), cap.ladder).rate(cap.bound_batch, seen=cap.bound_batch) * prof.mean_output / dep.tp


@pytest.fixture(scope="module")
def rows():
    return load_trtllm_rows()


@pytest.fixture(scope="module")
def cases(catalog, rows):
    return trtllm_cases(catalog, rows)


def _row(rows, gpu, model, tp, isl, osl, source="trtllm_v0.17_perf_overview"):
    (row,) = [
        r
        for r in rows
        if (r.source, r.gpu, r.model, r.tp, r.input_len, r.output_len) == (source, gpu, model, tp, isl, osl)
    ]
    return row


def test_prediction_reproduces_hand_computed_roofline(catalog, rows):
    """Llama 3.1 8B fp16 on one A100 80GB, ISL 2048 / OSL 128, on the trtllm-offline profile
    (0.95 of the memory free after weights and 3 GiB, blocks of 32), worst-case admission at
    ISL + OSL, with bandwidth 0.8, compute 0.7 and 1 ms per step, derived here by hand."""
    row = _row(rows, "A100-SXM4-80GB", "Llama-3.1-8B", 1, 2048, 128)
    eff = Efficiency(bandwidth=0.8, compute=0.7, step_overhead_ms=1.0, source="test")
    gpu, model = catalog.gpu("a100-80gb"), catalog.model("llama-3.1-8b")
    weight_bytes = math.ceil(model.params_total * 16 / 8)
    budget = math.floor(0.95 * (gpu.memory_gib - weight_bytes / GiB - 3.0) * GiB)
    kv_per_token = 2 * 32 * 8 * 128 * 2  # K and V x layers x KV heads x head_dim x fp16 bytes
    n = budget // (2176 * kv_per_token)  # every sequence reserves ISL + OSL = 68 blocks of 32
    steps = 1 + 127  # one prefill step (2048 <= 8192-token chunks) emits token 1, then one per further token
    # cache held, time-weighted: paged(2048) while prefilling, then 2048 + 32 x ceil(k/32)
    held_tokens = (2048 + sum(2048 + 32 * math.ceil(k / 32) for k in range(1, 128))) / steps
    context_tokens = (2048 + sum(2048 + k for k in range(1, 128))) / steps
    bandwidth = gpu.hbm_bandwidth_gb_s * 1e9 * 0.8
    flops = gpu.tflops("fp16") * 1e12 * 0.7
    attn = 4 * 32 * 128 * 32  # q.K and p.V: 4 x heads x head_dim per layer, 32 layers
    m, c = weight_bytes / bandwidth, 2 * model.params_active * n / flops
    gemm_s = (m**4 + c**4) ** 0.25  # the GEMMs' rounded corner, p = 4 (roofline.gemm_phase_s)
    attn_s = max(n * held_tokens * kv_per_token / bandwidth, attn * n * context_tokens / flops)
    decode_s = gemm_s + attn_s + 1e-3
    prefill_s = (2 * model.params_active * 2048 + attn * 2048**2 / 2) / flops
    rate = n / (steps * decode_s + n * prefill_s)  # Little's law with prefill's share of the GPU
    expected = rate * 128

    assert full_path_prediction(catalog, row, eff) == pytest.approx(expected, rel=1e-9)
    assert TrtllmCase.of(catalog, row).predict(eff) == pytest.approx(expected, rel=1e-9)


def test_fast_path_matches_replica_capacity(catalog, rows, cases):
    """TrtllmCase.predict (used by the fit) equals the full replica_capacity path, tp > 1 too."""
    eff = Efficiency(
        bandwidth=0.7, compute=0.5, step_overhead_ms=3.0, allreduce_latency_us=40.0, interconnect=0.6, source="test"
    )
    picked = [c for c in cases if c.row.line % 37 == 0 or (c.row.tp == 8 and c.row.line % 5 == 0)]
    assert any(c.row.tp == 8 for c in picked)
    for c in picked:
        assert c.predict(eff) == pytest.approx(full_path_prediction(catalog, c.row, eff), rel=1e-9)


def test_allreduce_bandwidth_time_scales_inversely_with_interconnect_factor(catalog):
    """At tp > 1 the ring part of the all-reduces is message / (datasheet link x interconnect):
    halving the factor doubles it, the fixed latency (log2(4) = 2 stages of the tp-2 latency
    per call) is unchanged; at tp = 1 it is zero."""
    base = Efficiency(bandwidth=0.8, compute=0.6, step_overhead_ms=2.0, allreduce_latency_us=50.0, source="test")
    tokens = np.array([1.0, 64.0, 4096.0])
    dep = make_deployment(catalog, model="llama-3.1-70b", gpu="h100-sxm", tp=4, max_model_len=8192)
    gpu, model = dep.gpu, dep.model

    def step(factor: float) -> StepModel:
        return StepModel.of(with_efficiency(dep, base.model_copy(update={"interconnect": factor})))

    # 2 all-reduces per layer, ring: 2 (tp-1)/tp x tokens x hidden x 2 bytes / (link x factor)
    ring_at_1 = 2 * model.num_hidden_layers * 2 * 3 / 4 * tokens * model.hidden_size * 2 / (gpu.interconnect_gb_s * 1e9)
    latency = 2 * model.num_hidden_layers * 2 * 50e-6
    for factor in (1.0, 0.5, 0.25):
        s = step(factor)
        np.testing.assert_allclose(s.allreduce_s(tokens, with_latency=False), ring_at_1 / factor, rtol=1e-12)
        np.testing.assert_allclose(s.allreduce_s(tokens), latency + ring_at_1 / factor, rtol=1e-12)
    np.testing.assert_allclose(
        step(0.5).allreduce_s(tokens, with_latency=False), 2 * step(1.0).allreduce_s(tokens, with_latency=False), rtol=1e-12
    )

    tp1 = make_deployment(catalog, model="llama-3.1-8b", gpu="h100-sxm", tp=1, max_model_len=8192)
    for factor in (1.0, 0.3):
        s = StepModel.of(with_efficiency(tp1, base.model_copy(update={"interconnect": factor})))
        assert s.allreduce_s(64.0) == 0.0
        np.testing.assert_array_equal(s.allreduce_s(tokens), np.zeros(3))


def test_gemm_phase_rounds_the_roofline_corner_and_keeps_its_arms(catalog):
    """At the ridge the weight read and the FLOPs take as long: the GEMMs take 2^(1/4) of either
    (GEMM_CORNER_P = 4); ten times off the ridge they take the larger bound within 0.003%; a decode
    step's GEMM phase is that function of its two bounds."""
    assert GEMM_CORNER_P == 4.0
    assert gemm_phase_s(2.0, 2.0) == pytest.approx(2.0 * 2**0.25, rel=1e-12)
    assert gemm_phase_s(1.0, 10.0) == pytest.approx(10.0, rel=3e-5)
    assert gemm_phase_s(0.0, 3.0) == 3.0
    dep = make_deployment(catalog, model="llama-3.1-8b", gpu="h100-sxm", tp=1, max_model_len=8192)
    eff = Efficiency(bandwidth=0.8, compute=0.6, step_overhead_ms=1.0, allreduce_latency_us=0.0, source="test")
    s = StepModel.of(with_efficiency(dep, eff))
    b = s.ridge_batch()
    at_ridge = s.weight_bytes / s.bandwidth_bytes_s
    assert s.decode_step_s(b, 0.0, 0.0) == pytest.approx(at_ridge * 2**0.25 + s.step_overhead_s, rel=1e-12)


def test_allreduce_latency_grows_as_log2_of_tp(catalog):
    """Reduce-scatter + all-gather: one all-reduce pays the tp-2 latency log2(tp) times, so a pass
    of 80 layers (160 all-reduces) at 10 us pays 1.6, 3.2 and 4.8 ms at tp 2, 4 and 8."""
    eff = Efficiency(bandwidth=0.8, compute=0.6, step_overhead_ms=2.0, allreduce_latency_us=10.0, source="test")
    for tp, want_ms in ((2, 1.6), (4, 3.2), (8, 4.8)):
        dep = make_deployment(catalog, model="llama-3.1-70b", gpu="h100-sxm", tp=tp, max_model_len=8192)
        s = StepModel.of(with_efficiency(dep, eff))
        latency_ms = (s.allreduce_s(0.0) - s.allreduce_s(0.0, with_latency=False)) * 1e3
        assert latency_ms == pytest.approx(want_ms, rel=1e-12)
    assert allreduce_call_latency(10.0, 1) == 0.0


def test_allreduce_takes_the_faster_protocol_per_message_size(catalog):
    """Llama 3.1 70B at tp 4 on H100 (hidden 8192, 80 layers, link 450 GB/s x 0.5): a one-token
    message (16 KiB) goes by the small-message protocol (2 x 5 us + its bytes at half the rate), a
    4096-token one (64 MiB) by the large-message one (2 x 40 us + its bytes at the full rate); the
    two cross at 641 tokens, where 70 us buys the small protocol's extra bytes. Without a large-message latency
    the call is the one-protocol form. with_latency=False is the bytes at the full rate either way."""
    base = Efficiency(bandwidth=0.8, compute=0.6, step_overhead_ms=2.0, allreduce_latency_us=5.0, interconnect=0.5,
                      source="test")  # fmt: skip
    dep = make_deployment(catalog, model="llama-3.1-70b", gpu="h100-sxm", tp=4, max_model_len=8192)
    two = StepModel.of(with_efficiency(dep, base.model_copy(update={"allreduce_bulk_latency_us": 40.0})))
    one = StepModel.of(with_efficiency(dep, base))
    link = 450e9 * 0.5
    calls = 2 * 80

    def ring_s(tokens: float) -> float:
        return 2 * 3 / 4 * tokens * 8192 * 2 / link

    crossover = 70e-6 / (1 / SMALL_MESSAGE_BANDWIDTH_SHARE - 1) / ring_s(1.0)  # tokens
    assert SMALL_MESSAGE_BANDWIDTH_SHARE == 0.5 and crossover == pytest.approx(640.87, rel=1e-4)  # 10 MiB
    for tokens in (1.0, 64.0, crossover, 4096.0):
        small = 2 * 5e-6 + ring_s(tokens) / SMALL_MESSAGE_BANDWIDTH_SHARE
        large = 2 * 40e-6 + ring_s(tokens)
        assert two.allreduce_s(tokens) == pytest.approx(calls * min(small, large), rel=1e-12)
        assert one.allreduce_s(tokens) == pytest.approx(calls * (2 * 5e-6 + ring_s(tokens)), rel=1e-12)
        assert two.allreduce_s(tokens, with_latency=False) == pytest.approx(calls * ring_s(tokens), rel=1e-12)
    assert two.allreduce_s(1.0) == pytest.approx(calls * (2 * 5e-6 + 2 * ring_s(1.0)), rel=1e-12)
    assert two.allreduce_s(4096.0) == pytest.approx(calls * (2 * 40e-6 + ring_s(4096.0)), rel=1e-12)
    np.testing.assert_allclose(
        two.allreduce_s(np.array([1.0, 4096.0])), [two.allreduce_s(1.0), two.allreduce_s(4096.0)], rtol=1e-12
    )


def test_straggler_factor_is_one_plus_cv_times_the_harmonic_excess():
    """tp 1 has no barrier; at tp 8, H_8 - 1 = 1/2 + ... + 1/8 = 481/280, so cv 0.1 stretches the
    sharded work by 1 + 48.1/280."""
    assert straggler_factor(0.3, 1) == 1.0
    assert straggler_factor(0.1, 8) == pytest.approx(1 + 0.1 * 481 / 280, rel=1e-15)
    assert straggler_factor(0.1, 2) == pytest.approx(1.05, rel=1e-15)


def test_straggler_stretches_the_decode_pass_and_not_prefill(catalog):
    """Llama 3.1 70B at tp 8 on H100: with cv 0.1 a decode step's GEMMs and cache reads take
    1 + 0.1 x 481/280 times as long (attention's FLOPs, a prompt's FLOPs, the fixed costs and the
    all-reduces do not change); at tp 1 nothing changes."""
    base = Efficiency(bandwidth=0.8, compute=0.6, step_overhead_ms=2.0, allreduce_latency_us=5.0, source="test")
    factor = 1 + 0.1 * 481 / 280
    for tp, want in ((8, factor), (1, 1.0)):
        dep = make_deployment(catalog, model="llama-3.1-70b", gpu="h100-sxm", tp=tp, max_model_len=8192)
        plain = StepModel.of(with_efficiency(dep, base))
        slow = StepModel.of(with_efficiency(dep, base.model_copy(update={"straggler_cv": 0.1})))
        assert slow.straggler == pytest.approx(want, rel=1e-15)
        # cache reads well above attention's FLOPs at these sizes: the phase is memory-bound
        batch, cache, ctx = np.array([1.0, 64.0, 512.0]), np.array([1e8, 6e9, 5e10]), np.array([2e3, 1e5, 1e6])
        fixed = plain.step_overhead_s + plain.num_layers * plain.layer_overhead_s + plain.allreduce_s(batch)
        work = plain.decode_step_s(batch, cache, ctx) - fixed
        np.testing.assert_allclose(slow.decode_step_s(batch, cache, ctx), fixed + want * work, rtol=1e-12)
        assert slow.prefill_s(4096.0) == plain.prefill_s(4096.0)
        assert slow.flops_s == plain.flops_s and slow.gemm_flops_s == pytest.approx(plain.flops_s / want, rel=1e-15)
        # attention's FLOPs, where they bind, run at the unstretched rate
        assert slow.decode_step_s(1.0, 0.0, 1e9) - plain.decode_step_s(1.0, 0.0, 1e9) == pytest.approx(
            (want - 1) * (plain.decode_step_s(1.0, 0.0, 0.0) - plain.step_overhead_s
                          - plain.num_layers * plain.layer_overhead_s - plain.allreduce_s(1.0)), rel=1e-9)


def test_efficiency_block_round_trips_through_gpus_yaml():
    """The new fields are written by efficiency_lines and read back as they were."""
    eff = Efficiency(bandwidth=0.8, compute=0.6, step_overhead_ms=1.5, allreduce_latency_us=3.7,
                     allreduce_bulk_latency_us=28.1, allreduce_bulk_latency_by_tp_us={4: 56.3, 8: 48.2},
                     straggler_cv=0.1469, source="test")  # fmt: skip
    text = "a:\n  name: A\n  efficiency:\n    bandwidth: 0.5\n    compute: 0.5\n    step_overhead_ms: 1.0\n    source: old\n"
    back = Efficiency(**yaml.safe_load(rewrite_efficiency_blocks(text, {"a": eff}))["a"]["efficiency"])
    assert back == eff
    assert back.allreduce_bulk_latency_by_tp_us == {4: 56.3, 8: 48.2} and back.straggler_cv == 0.1469


def test_committed_factors_meet_the_target_on_decode_throughput(cases):
    """Outcome test of the shipped catalog: data/gpus.yaml's factors give median absolute
    error <= 15% on every committed TensorRT-LLM row the catalog can express."""
    errors = [100 * abs(c.predict() / c.row.measured_tok_s_per_gpu - 1) for c in cases]
    # every committed row but those of the GPUs the catalog lacks (data/measured/README.md)
    with (ROOT / "data" / "measured" / "trtllm_offline_throughput.csv").open() as f:
        expressible = [r for r in csv.DictReader(f) if r["gpu"] != "GH200-480GB"]
    assert len(errors) == len(expressible) == 294
    assert np.median(errors) <= 15.0


def test_committed_factors_name_their_rows_and_stay_in_bounds(catalog):
    for gpu in catalog.gpus.values():
        eff = gpu.efficiency
        assert "bench/calibration.py" in eff.source and ("trtllm_offline_throughput.csv" in eff.source or eff.borrowed_from), (
            f"{gpu.id}: efficiency not calibrated; run python bench/calibration.py --write"
        )
        for f in FACTORS:
            lo, hi = BOUNDS[f]
            assert lo <= getattr(eff, f) <= hi, (gpu.id, f)


def test_fitted_factors_stay_within_bounds(catalog, cases):
    fit_rows = [c for c in cases if c.gpu_id == "b200"]
    result = fit_efficiency(trtllm_log_errors(fit_rows), catalog.gpu("b200").efficiency, priors=TRTLLM_PRIORS)
    for f in FACTORS:
        lo, hi = BOUNDS[f]
        assert lo <= getattr(result.efficiency, f) <= hi
    assert set(result.at_bounds) <= set(result.free)
    errors = [abs(c.predict(result.efficiency) / c.row.measured_tok_s_per_gpu - 1) for c in fit_rows]
    assert np.median(errors) < 0.15


def test_splitwise_prefill_is_prefill_s_plus_what_a_standalone_pass_pays(catalog):
    """A long prompt's pass is compute-bound: prefill_s plus the fixed costs of a pass (the step
    overhead, the per-layer overhead and the all-reduces' latency, 2 per layer: that of the
    large-message protocol, which the pass's 128 MiB messages go by), which prefill_s leaves to
    the decode step, and the sliver of weight-read time the GEMMs' rounded corner keeps."""
    (row,) = [
        r
        for r in load_splitwise_rows()
        if (r.model, r.gpu, r.tp, r.input_len, r.batch) == ("llama2-70b", "h100-80gb", 8, 8192, 1)
    ]
    step = splitwise_step(catalog, row)
    prefill_ms, _ = predict_splitwise(catalog, row)
    assert step.layer_overhead_s > 0  # the committed factors carry one: the test covers it
    assert step.tp == 8  # log2(8) = 3 stages of the tp-2 latency per all-reduce
    assert step.allreduce_bulk_latency_s > step.allreduce_latency_s  # the committed factors carry both
    fixed_s = step.step_overhead_s + step.num_layers * (step.layer_overhead_s + 2 * 3 * step.allreduce_bulk_latency_s)
    # the GEMMs' rounded corner (gemm_phase_s) adds what the weight read leaves showing
    gemm_compute_s = 2 * step.params_active * 8192 / step.flops_s  # a prompt's FLOPs: not stretched
    memory_s = step.weight_bytes / step.bandwidth_bytes_s
    corner_s = (memory_s**4 + gemm_compute_s**4) ** 0.25 - gemm_compute_s  # (m^4 + c^4)^(1/4), by hand
    assert 0 < corner_s < 1e-3 * gemm_compute_s
    assert prefill_ms == pytest.approx((float(step.prefill_s(8192)) + fixed_s + corner_s) * 1e3, rel=1e-9)


def test_rewrite_touches_only_efficiency_blocks():
    text = (
        "# header\n"
        "a:\n"
        "  name: A\n"
        "  efficiency:\n"
        "    bandwidth: 0.5\n"
        "    compute: 0.5\n"
        "    step_overhead_ms: 1.0\n"
        "    source: >-\n"
        "      old, folded\n"
        "  notes: keep\n"
        "\n"
        "b:\n"
        "  efficiency:\n"
        "    bandwidth: 0.6\n"
        "    compute: 0.6\n"
        "    step_overhead_ms: 1.0\n"
        "    source: untouched\n"
    )
    eff = Efficiency(bandwidth=0.9, compute=0.4, step_overhead_ms=2.0, allreduce_latency_us=50.0, source='new "quoted"')
    out = rewrite_efficiency_blocks(text, {"a": eff})
    assert yaml.safe_load(out)["a"] == {"name": "A", "efficiency": eff.model_dump(exclude_none=True), "notes": "keep"}
    assert out.startswith("# header\na:\n  name: A\n  efficiency:\n")
    assert out.endswith(text[text.index("  notes: keep") :])
    with pytest.raises(ValueError, match="c"):
        rewrite_efficiency_blocks(text, {"c": eff})


def test_offline_throughput_cases_are_not_held_to_the_profiles_token_budget(catalog):
    """trtllm-bench sets each offline run's max_num_tokens for its batch, so the trtllm-offline
    profile's 8,192 (a middle value) is not a budget those runs had: their resident batch is
    the memory or batch ceiling's. The profile's budget would cut 18 of them (the 8B on an
    H200 from 929 to 482 sequences)."""
    cases = trtllm_cases(catalog, load_trtllm_rows())
    cut = 0
    for case in cases:
        assert case.resident_batch == replica_capacity(case.dep, case.prof, SLO(), sizing="worst_case",
                                                       token_budget=False).bound_batch
        with_budget = replica_capacity(case.dep, case.prof, SLO(), sizing="worst_case").bound_batch
        cut += with_budget < case.resident_batch * (1 - 1e-9)
    assert cut == 18
