"""Attention FLOPs by layer reach (roofline.AttentionFlops): full layers grow with the context,
sliding-window and chunked layers stop at their window, linear-attention layers do not grow at all."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.deployment import make_deployment
from planner.memory import kv_bytes_for_tokens
from planner.requests import Requests
from planner.roofline import AttentionFlops, StepModel, attention_flops
from planner.simulate import simulate_replica


def midpoint_pairs(start: int, end: int, window: int | None) -> float:
    """An independent count of a layer's (query, key) pairs over positions [start, end): position i
    attends to the i tokens before it, or the last `window` of them, plus half of its own (the
    triangle's convention, p² / 2 pairs for a whole prompt under full attention): Σ min(i + ½, W)."""
    i = np.arange(start, end, dtype=float) + 0.5
    return float(np.sum(i if window is None else np.minimum(i, window)))


def test_a_full_attention_model_counts_every_layer(catalog):
    """Llama 3.1 8B: 32 heads x head_dim 128 x 4 FLOPs (q·K and p·V) on each of its 32 layers."""
    a = attention_flops(catalog.model("llama-3.1-8b"))
    assert a == AttentionFlops(4 * 32 * 128 * 32, 0.0, 0)
    assert float(a.span(0, 1000)) == 4 * 32 * 128 * 32 * 1000**2 / 2


def test_gemma2_alternates_full_and_window_layers(catalog):
    """Gemma 2 27B: 23 of its 46 layers attend to the last 4,096 tokens only (HF `layer_types`)."""
    a = attention_flops(catalog.model("gemma-2-27b"))
    per_layer = 4 * 32 * 128
    assert (a.full_per_pair, a.capped_per_pair, a.window_tokens) == (23 * per_layer, 23 * per_layer, 4096)
    # below the window every layer is a full one
    assert float(a.span(0, 4096)) == 46 * per_layer * 4096**2 / 2
    # past it the capped layers add W per token: 8,192 tokens, 23·16,384·(4,096·8,192 - 4,096²/2) more
    assert float(a.span(0, 8192)) == 23 * per_layer * (8192**2 / 2 + 4096 * 8192 - 4096**2 / 2)


@pytest.mark.parametrize(("start", "end"), [(0, 100), (0, 4096), (0, 9000), (3000, 5000), (4096, 7000), (5000, 9000)])
def test_spans_match_a_position_by_position_count(catalog, start, end):
    a = attention_flops(catalog.model("gemma-2-27b"))
    per_layer = 4 * 32 * 128
    want = 23 * per_layer * (midpoint_pairs(start, end, None) + midpoint_pairs(start, end, 4096))
    assert float(a.span(start, end)) == pytest.approx(want, rel=1e-12)


def test_linear_attention_layers_do_no_work_that_grows_with_the_context(catalog):
    """Qwen3-Next 80B: 36 of 48 layers are Gated DeltaNet, a fixed state per sequence; 12 attend."""
    m = catalog.model("qwen3-next-80b")
    a = attention_flops(m)
    assert m.num_state_layers == 36
    assert a.full_per_pair == 12 * 4 * m.num_attention_heads * m.head_dim and a.capped_per_pair == 0


def test_gpt_oss_at_128k_does_about_half_the_attention_of_all_full_layers(catalog):
    """gpt-oss-120b: 18 of 36 layers with a 128-token window; a 131,072-token prompt's attention is
    (18·p²/2 + 18·(128p - 128²/2)) / (36·p²/2) of every layer attending fully: 50.1%."""
    a = attention_flops(catalog.model("gpt-oss-120b"))
    every = AttentionFlops(a.full_per_pair + a.capped_per_pair)
    p = 131_072
    assert float(a.span(0, p) / every.span(0, p)) == pytest.approx(0.5 + 128 / p - 128**2 / (2 * p * p), rel=1e-12)


def test_decode_charges_capped_layers_at_most_the_window_a_sequence(catalog):
    """From the batch's total context alone, min(Σc, batch·W): exact while every sequence is inside
    the window, never below Σ min(c, W) otherwise."""
    a = attention_flops(catalog.model("gemma-2-27b"))
    inside = [100, 2000, 4000]
    assert float(a.decode(3, sum(inside))) == (a.full_per_pair + a.capped_per_pair) * sum(inside)
    mixed = [100, 9000, 200]
    exact = a.full_per_pair * sum(mixed) + a.capped_per_pair * sum(min(c, 4096) for c in mixed)
    charged = float(a.decode(3, sum(mixed)))
    assert charged >= exact and charged == a.full_per_pair * 9300 + a.capped_per_pair * 9300
    assert float(a.decode(1, 9000)) == a.full_per_pair * 9000 + a.capped_per_pair * 4096
    assert a.decode_one(3.0, 9300.0) == charged


@pytest.mark.parametrize(("p", "s"), [(1000, 0), (4096, 0), (6000, 0), (6000, 1000), (9000, 5000)])
def test_a_prompt_from_its_means_is_its_span_after_the_prefix(catalog, p, s):
    a = attention_flops(catalog.model("gemma-2-27b"))
    assert float(a.prompt(p, p * p, s)) == pytest.approx(float(a.span(s, p)), rel=1e-12)


def test_a_histogram_cell_past_the_window_is_exact_from_its_means(catalog):
    """A capped layer's pairs are linear in p past the window: E[G(p)] = G(E[p]) whatever the spread."""
    a = attention_flops(catalog.model("gemma-2-27b"))
    prompts = np.array([5000, 5500, 6100])
    mean, mean_sq = prompts.mean(), (prompts.astype(float) ** 2).mean()
    assert float(a.prompt(mean, mean_sq)) == pytest.approx(float(np.mean(a.span(0, prompts))), rel=1e-12)


def test_the_simulator_prefills_a_windowed_model_as_the_step_model_does(catalog):
    """gpt-oss-20b (a 128-token window on 12 of 24 layers), a lone 600-token prompt in chunks of 256:
    each prefill step is the fixed step plus its chunk's FLOPs, so the chunks add up to the prompt's."""
    dep = make_deployment(catalog, model="gpt-oss-20b", gpu="h100-sxm", weight_dtype="fp8", max_model_len=4096)
    dep = dataclasses.replace(dep, engine=dep.engine.model_copy(
        update={"block_size": 16, "max_num_batched_tokens": 256, "max_num_seqs": 2}))
    sm = StepModel.of(dep)
    assert sm.attention.capped_per_pair > 0 and sm.attention.window_tokens == 128
    fixed = float(sm.decode_step_s(0, 0, 0))
    _, tr = simulate_replica(dep, Requests(np.array([0.0]), np.array([600]), np.array([2])), trace=True)
    chunks = [(0, 256), (256, 512), (512, 600)]
    want = [fixed + float(sm.prefill_flops(b, b * b, a)) / sm.flops_s for a, b in chunks]
    assert tr.step_s[:3] == pytest.approx(want, rel=1e-12)
    assert sum(want) == pytest.approx(3 * fixed + float(sm.prefill_s(600)), rel=1e-12)
    full = dataclasses.replace(sm, attention=AttentionFlops(sm.attention.full_per_pair + sm.attention.capped_per_pair))
    assert float(sm.prefill_s(600)) < float(full.prefill_s(600))


def test_the_simulator_decodes_a_windowed_model_as_the_step_model_does(catalog):
    """With reads made nearly free (the bandwidth x 10^4), a decode step's attention is FLOP-bound, so
    the loop's charge for the capped layers shows: min(context, decoders x window), as the step model's."""
    dep = make_deployment(catalog, model="gpt-oss-20b", gpu="h100-sxm", weight_dtype="fp8", max_model_len=4096)
    gpu = dep.gpu.model_copy(update={"hbm_bandwidth_gb_s": dep.gpu.hbm_bandwidth_gb_s * 1e4})
    dep = dataclasses.replace(dep, gpu=gpu, engine=dep.engine.model_copy(
        update={"block_size": 16, "max_num_batched_tokens": 1024, "max_num_seqs": 2}))
    sm = StepModel.of(dep)
    blk = kv_bytes_for_tokens(dep.model, 16, dep.kv_dtype, dep.tp)
    _, tr = simulate_replica(dep, Requests(np.array([0.0]), np.array([600]), np.array([3])), trace=True)
    # step 0 prefills the prompt and emits the first token; steps 1 and 2 decode over 601 and 602 tokens
    cache = -(-601 // 16) * blk  # the blocks of 601 and of 602 tokens: 38
    want = [float(sm.decode_step_s(1, cache, 601)), float(sm.decode_step_s(1, cache, 602))]
    assert tr.step_s[1:3] == pytest.approx(want, rel=1e-12)
    work = sm.decode_work(1.0, cache, 601.0)
    assert float(work.attn_flops) / sm.flops_s > float(work.cache_bytes) / sm.bandwidth_bytes_s
    assert float(work.attn_flops) == sm.attention.full_per_pair * 601 + sm.attention.capped_per_pair * 128
    full = dataclasses.replace(sm, attention=AttentionFlops(sm.attention.full_per_pair + sm.attention.capped_per_pair))
    assert want[0] < float(full.decode_step_s(1, cache, 601))


def test_a_static_batch_prefills_each_prompt_within_its_window(catalog):
    """prompt_pass_s (a static batch's prefill, the calibration rows' and latency points'): its
    attention is each prompt's span from 0, not the whole batch's tokens as one sequence."""
    dep = make_deployment(catalog, model="gpt-oss-20b", gpu="h100-sxm", weight_dtype="fp8", max_model_len=8192)
    sm = StepModel.of(dep)
    plain = dataclasses.replace(sm, straggler=1.0)
    w = plain.decode_work(8 * 2000.0, 0.0, 0.0)
    want = plain._pass_s(dataclasses.replace(w, attn_flops=8 * sm.attention.span(0.0, 2000.0)), 8 * 2000.0)
    assert float(sm.prompt_pass_s(8, 2000)) == pytest.approx(float(want), rel=1e-15)
    full = dataclasses.replace(sm, attention=AttentionFlops(sm.attention.full_per_pair + sm.attention.capped_per_pair))
    assert float(sm.prompt_pass_s(8, 2000)) < float(full.prompt_pass_s(8, 2000))


def test_llama4_chunked_layers_are_charged_as_a_window_of_their_chunk(catalog):
    """Llama 4 Scout: 36 of 48 layers attend within 8,192-token chunks (no RoPE on the other 12)."""
    m = catalog.model("llama-4-scout")
    a = attention_flops(m)
    per_layer = 4 * m.num_attention_heads * m.head_dim
    assert (a.full_per_pair, a.capped_per_pair, a.window_tokens) == (12 * per_layer, 36 * per_layer, 8192)


def test_latent_attention_decodes_absorbed_and_prefills_decompressed(catalog):
    """DeepSeek-V3, 61 layers of 128 heads. Decode, absorbed (DeepSeek-V2 sec. 2.1.2-2.1.3): scores over
    the latent and rope widths, output over the latent, 2 x 128 x (2 x 512 + 64) a pair. Prefill,
    decompressed (vLLM's MLA backend: the compute-friendly way for prefill): keys of head_dim 192
    (128 + 64) and values of v_head_dim 128, 2 x 128 x (192 + 128) a pair, 3.4 times fewer."""
    a = attention_flops(catalog.model("deepseek-v3"))
    assert a == AttentionFlops(2 * 128 * (2 * 512 + 64) * 61, 0.0, 0, 2 * 128 * (192 + 128) * 61)
    assert a.full_per_pair / a.prefill_per_pair == pytest.approx(1088 / 320, rel=1e-15)
    assert float(a.span(1000, 3000)) == 2 * 128 * 320 * 61 * (3000**2 - 1000**2) / 2
    assert float(a.prompt(3000, 3000**2, 1000)) == float(a.span(1000, 3000))
    assert float(a.decode(4, 3000)) == 2 * 128 * 1088 * 61 * 3000 == a.decode_one(4, 3000)
    kimi = attention_flops(catalog.model("kimi-k2"))  # 64 heads
    assert (kimi.full_per_pair, kimi.prefill_per_pair) == (2 * 64 * 1088 * 61, 2 * 64 * 320 * 61)
    assert attention_flops(catalog.model("llama-3.1-8b")).prefill_full_per_pair is None  # the same pair in both


def test_the_simulator_prefills_latent_attention_decompressed_and_decodes_it_absorbed(catalog):
    """A DeepSeek-V3 replica (8 x H200, fp8) replays a 600-token prompt in chunks of 256 at the
    step model's prefill FLOPs, decompressed; with reads made nearly free, its decode steps are
    FLOP-bound at the absorbed pair's."""
    dep = make_deployment(catalog, model="deepseek-v3", gpu="h200", tp=8, weight_dtype="fp8", max_model_len=4096)
    gpu = dep.gpu.model_copy(update={"hbm_bandwidth_gb_s": dep.gpu.hbm_bandwidth_gb_s * 1e4})
    dep = dataclasses.replace(dep, gpu=gpu, engine=dep.engine.model_copy(
        update={"block_size": 16, "max_num_batched_tokens": 256, "max_num_seqs": 2}))
    sm = StepModel.of(dep)
    a = sm.attention
    assert (a.full_per_pair, a.prefill_per_pair) == (2 * 128 * 1088 * 61, 2 * 128 * 320 * 61)
    _, tr = simulate_replica(dep, Requests(np.array([0.0]), np.array([600]), np.array([3])), trace=True)
    fixed = float(sm.decode_step_s(0, 0, 0))
    chunks = [(0, 256), (256, 512), (512, 600)]
    want = [fixed + (2 * sm.params_active * (b - a) + 2 * 128 * 320 * 61 * (b * b - a * a) / 2) / sm.flops_s
            + float(sm.allreduce_s(b - a, with_latency=False)) for a, b in chunks]
    assert tr.step_s[:3] == pytest.approx(want, rel=1e-12)
    blk = kv_bytes_for_tokens(dep.model, 16, dep.kv_dtype, dep.tp)
    cache = -(-601 // 16) * blk
    work = sm.decode_work(1.0, cache, 601.0)
    assert float(work.attn_flops) == 2 * 128 * 1088 * 61 * 601
    assert float(work.attn_flops) / sm.flops_s > float(work.cache_bytes) / sm.bandwidth_bytes_s
    assert tr.step_s[3] == pytest.approx(float(sm.decode_step_s(1, cache, 601)), rel=1e-12)


def test_a_class_straddling_the_window_is_averaged_over_its_cells(catalog):
    """capacity.mean_prefill_s: half the prompts at 1,000 tokens and half at 7,000 (gemma-2's window
    4,096 between them) take the mean of their own prefill times, where the class's E[p] of 4,000,
    inside the window, would charge the long ones' capped layers as full attention (20% high on those layers)."""
    from planner.capacity import mean_prefill_s
    from planner.histogram import Histogram
    from planner.sim_capacity import profile_for

    dep = make_deployment(catalog, model="gemma-2-27b", gpu="h200", weight_dtype="fp8", max_model_len=8192)
    sm = StepModel.of(dep)
    prof = profile_for(dep, Histogram.from_arrays(np.array([1000, 7000] * 50), np.array([100] * 100)))
    want = (float(sm.prefill_s(1000)) + float(sm.prefill_s(7000))) / 2
    assert mean_prefill_s(sm, prof) == pytest.approx(want, rel=1e-12)
    assert float(sm.prefill_s(prof.mean_prompt, prof.mean_prompt_sq)) > want
    a = sm.attention
    capped_only = AttentionFlops(0.0, a.capped_per_pair, a.window_tokens)
    exact = float(capped_only.span(0, 1000) + capped_only.span(0, 7000)) / 2
    # E[p²] / 2 pairs a capped layer, as if every prompt were inside the window: 20% over the exact
    as_full = a.capped_per_pair * (1000**2 + 7000**2) / 2 / 2
    assert float(capped_only.prompt(prof.mean_prompt, prof.mean_prompt_sq)) == pytest.approx(as_full, rel=1e-12)
    assert as_full / exact == pytest.approx(1.203, abs=1e-3)


def test_capped_layers_without_a_window_are_refused():
    with pytest.raises(ValueError, match="positive window"):
        AttentionFlops(1.0, 2.0, 0)
