"""The replica simulator: hand-computed tiny cases, conservation, preemption, determinism."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.catalog import Model
from planner.deployment import make_deployment
from planner.histogram import Histogram
from planner.memory import kv_bytes_for_tokens
from planner.requests import Requests, sample_requests
from planner.roofline import StepModel
from planner.sim_capacity import Criterion, max_sustainable_rate, predicted_point, profile_for
from planner.sim_measures import COMPARE_KEYS
from planner.simulate import simulate_replica
from planner.targets import SLO


def tiny_dep(catalog, *, block_size=4, chunk=8, max_seqs=2):
    """Llama 3.1 8B on an H100 with a toy engine: 4-token blocks, 8-token chunks, 2 sequences."""
    dep = make_deployment(catalog, model="llama-3.1-8b", gpu="h100-sxm", max_model_len=8192)
    engine = dep.engine.model_copy(
        update={"block_size": block_size, "max_num_batched_tokens": chunk, "max_num_seqs": max_seqs}
    )
    return dataclasses.replace(dep, engine=engine)


def fixed(arrivals, prompt, output):
    n = len(arrivals)
    return Requests(np.asarray(arrivals, float), np.full(n, prompt), np.full(n, output))


def test_tiny_case_matches_hand_computation(catalog):
    """Three requests at t = 0, prompt 6, output 3; blocks of 4, chunks of 8 tokens, 2 sequences.

    step 0: admit r0 (2 blocks, 6-token chunk, done -> token 1), admit r1 (chunk [0, 2): the
            1 block it fills, vLLM V1 allocating as chunks are scheduled); budget spent. used 3.
    step 1: r0 decodes (cache 6 -> 7, no new block); r1 chunk [2, 6) takes its second block,
            done -> token 1; r2 not admitted (2 running = max_num_seqs). used 4.
    step 2: r0 (cache 7) and r1 (cache 6) decode; r0 emits token 3 and finishes (frees 2).
    step 3: r1 decodes (cache 7); r2 admitted (2 blocks), 6-token chunk done -> token 1;
            r1 emits token 3 and finishes.
    step 4: r2 decodes (cache 6). step 5: r2 decodes (cache 7), token 3, finishes.
    Step times: StepModel.decode_step_s(decoders, their blocks x block bytes, attended tokens)
    plus prefill_flops of each chunk [a, b) = prefill_flops(b, b², cached=a) / flops_s.
    """
    dep = tiny_dep(catalog)
    sm = StepModel.of(dep)
    blk = kv_bytes_for_tokens(dep.model, 4, dep.kv_dtype)

    def dec(d, blocks, ctx):
        return float(sm.decode_step_s(d, blocks * blk, ctx))

    def pf(b, a=0):
        return float(sm.prefill_flops(b, b * b, a)) / sm.flops_s

    t = [
        dec(0, 0, 0) + pf(6) + pf(2),
        dec(1, 2, 7) + pf(6, 2),
        dec(2, 4, 8 + 7),
        dec(1, 2, 8) + pf(6),
        dec(1, 2, 7),
        dec(1, 2, 8),
    ]
    end = np.cumsum(t)
    res, tr = simulate_replica(dep, fixed([0, 0, 0], 6, 3), kv_budget_bytes=100 * blk, trace=True)
    assert res.steps == 6
    assert tr.step_s == pytest.approx(t, rel=1e-12)
    assert tr.step_used_pages.tolist() == [3, 4, 4, 4, 2, 2]
    assert tr.step_decoding.tolist() == [0, 1, 2, 1, 1, 1]
    assert tr.step_running.tolist() == [2, 2, 2, 2, 1, 1]
    assert tr.step_prefill_tokens.tolist() == [8, 4, 0, 6, 0, 0]
    assert tr.first_token_s == pytest.approx([end[0], end[1], end[3]], rel=1e-12)
    assert tr.finish_s == pytest.approx([end[2], end[3], end[5]], rel=1e-12)
    assert tr.free_pages_at_end == tr.total_pages == 100
    assert res.preemptions == 0


def test_arrival_after_idle_starts_at_arrival(catalog):
    """A lone request arriving at 5 s: prefill step then 2 decode steps, from t = 5."""
    dep = tiny_dep(catalog)
    sm = StepModel.of(dep)
    blk = kv_bytes_for_tokens(dep.model, 4, dep.kv_dtype)
    t = [float(sm.decode_step_s(0, 0, 0)) + float(sm.prefill_flops(5, 25)) / sm.flops_s]
    t += [float(sm.decode_step_s(1, 2 * blk, 6)), float(sm.decode_step_s(1, 2 * blk, 7))]
    _, tr = simulate_replica(dep, fixed([5.0], 5, 3), kv_budget_bytes=100 * blk, trace=True)
    assert tr.step_start_s[0] == 5.0
    assert tr.finish_s[0] == pytest.approx(5.0 + sum(t), rel=1e-12)
    # cache 5 -> 6 needs no block; 6 -> 7 neither: blocks stay at ceil(5/4) = 2.
    assert tr.step_used_pages.tolist() == [2, 2, 2]


@pytest.mark.parametrize(("blocks", "preempted_at"), [(6, None), (5, 5), (4, 5)])
def test_preemption_exactly_when_free_blocks_run_out(catalog, blocks, preempted_at):
    """Two requests at t = 0, prompt 4, output 6, blocks of 4 tokens.

    step 0: both prefilled (1 block each, used 2), token 1 each.
    step 1: caches 4 -> 5: each needs block 2 (used 4).
    steps 2-4: caches 5..7, no new block.
    step 5: caches 8 -> 9: each needs block 3, 2 more blocks. With 6 blocks both fit; with
            5 or 4 only 1 or 0 are free, so the newest (r1) is preempted: its 2 blocks are
            freed and it no longer needs one, r0 takes 1 (used 3). r0 emits token 6, finishes.
    step 6: r1 readmitted with prompt 4 + 5 generated = 9 tokens (3 blocks), recomputed in
            one chunk, emits token 6 and finishes.
    """
    dep = tiny_dep(catalog, chunk=16, max_seqs=8)
    blk = kv_bytes_for_tokens(dep.model, 4, dep.kv_dtype)
    res, tr = simulate_replica(dep, fixed([0, 0], 4, 6), kv_budget_bytes=blocks * blk, trace=True)
    if preempted_at is None:
        assert tr.preemption_steps.size == 0
        assert tr.step_used_pages.tolist() == [2, 4, 4, 4, 4, 6]
        assert res.steps == 6
    else:
        assert tr.preemption_steps.tolist() == [preempted_at]
        assert tr.preemptions.tolist() == [0, 1]
        assert tr.admissions.tolist() == [1, 2]
        assert tr.step_used_pages.tolist() == [2, 4, 4, 4, 4, 3, 3]
        assert tr.step_prefill_tokens.tolist() == [8, 0, 0, 0, 0, 0, 9]
        assert res.steps == 7
        # r1's last token before preemption came at the end of step 4; its next at the end of step 6.
        assert tr.resume_gaps_s == pytest.approx([tr.step_s[5] + tr.step_s[6]])
        assert tr.finish_s[1] == pytest.approx(tr.step_s.sum())
    assert tr.free_pages_at_end == tr.total_pages


def test_blocks_are_allocated_chunk_by_chunk_as_vllm_v1_does(catalog):
    """One prompt of 20 tokens, output 2; blocks of 4, chunks of 8, a cache of 6 blocks. vLLM V1
    allocates the blocks a chunk fills as it schedules it (KVCacheManager.allocate_slots), not the
    whole prompt at admission: 2, 4, then 5 blocks as [0, 8), [8, 16) and [16, 20) are prefilled
    (token 1 at the third), and the 6th for token 2, whose cache of 20 fills the 5th."""
    dep = tiny_dep(catalog, max_seqs=8)
    blk = kv_bytes_for_tokens(dep.model, 4, dep.kv_dtype)
    _, tr = simulate_replica(dep, fixed([0.0], 20, 2), kv_budget_bytes=6 * blk, trace=True)
    assert tr.step_used_pages.tolist() == [2, 4, 5, 6]
    assert tr.step_prefill_tokens.tolist() == [8, 8, 4, 0]
    assert tr.preemption_steps.size == 0


def test_a_prefill_short_of_blocks_preempts_the_newest_running_request(catalog):
    """Blocks of 4, 8 tokens a step, at most 4 a prompt (long_prefill_token_threshold), a cache of 5
    blocks. r0 (prompt 16, output 1) and r1 (prompt 4, output 8) arrive at t = 0.

    step 0: r0 admitted with chunk [0, 4) (1 block), r1 with its whole prompt (1 block): token 1.
    step 1: r1 decodes (cache 4: a new block); r0 [4, 8) takes its 2nd block. used 4.
    step 2: r1 decodes (cache 5); r0 [8, 12), its 3rd block. used 5: the cache is full.
    step 3: r1 has its slot (cache 6); r0's [12, 16) needs a 4th block and none is free, so the
            newest running request, r1, is preempted (V1: running.pop()), giving back its 2 blocks
            and its token; r0 completes and finishes (output 1). Nothing is admitted in a step that
            preempted.
    step 4: r1 readmitted with 4 + 3 generated = 7 tokens to recompute: [0, 4), 1 block.
    step 5: [4, 7), its 2nd block: token 4. steps 6-9: tokens 5-8 (cache 8 takes a 3rd block at step 7).
    """
    dep = tiny_dep(catalog, max_seqs=8)
    dep = dataclasses.replace(dep, engine=dep.engine.model_copy(update={"long_prefill_token_threshold": 4}))
    blk = kv_bytes_for_tokens(dep.model, 4, dep.kv_dtype)
    req = Requests(np.zeros(2), np.array([16, 4]), np.array([1, 8]))
    _, tr = simulate_replica(dep, req, kv_budget_bytes=5 * blk, trace=True)
    assert tr.preemption_steps.tolist() == [3]
    assert tr.preemptions.tolist() == [0, 1] and tr.admissions.tolist() == [1, 2]
    assert tr.step_used_pages.tolist() == [2, 4, 5, 4, 1, 2, 2, 3, 3, 3]
    assert tr.step_prefill_tokens.tolist() == [8, 4, 4, 4, 4, 3, 0, 0, 0, 0]
    assert tr.step_decoding.tolist() == [0, 1, 1, 0, 0, 0, 1, 1, 1, 1]
    end = np.cumsum(tr.step_s)
    assert tr.first_token_s == pytest.approx([end[3], end[0]], rel=1e-12)
    assert tr.finish_s == pytest.approx([end[3], end[9]], rel=1e-12)
    assert tr.resume_gaps_s == pytest.approx([end[5] - end[2]], rel=1e-12)
    assert tr.free_pages_at_end == tr.total_pages == 5


def under_memory_pressure(catalog):
    """400 requests over 2 s on a cache of 120 blocks of 16 tokens: a case that preempts."""
    dep = tiny_dep(catalog, block_size=16, chunk=512, max_seqs=64)
    rng = np.random.default_rng(7)
    n = 400
    req = Requests(np.sort(rng.uniform(0, 2.0, n)), rng.integers(1, 300, n), rng.integers(1, 200, n))
    return dep, req, 120 * kv_bytes_for_tokens(dep.model, 16, dep.kv_dtype)


def test_conservation_under_memory_pressure(catalog):
    """Every request finishes exactly once, tokens add up, all blocks come back."""
    dep, req, budget_bytes = under_memory_pressure(catalog)
    n = req.n
    # the window past the first tenth alone (settled=False), which the time-weighted means below are read over
    res, tr = simulate_replica(dep, req, kv_budget_bytes=budget_bytes, settled=False, trace=True)
    assert tr.preemption_steps.size > 0  # the case does exercise preemption
    assert np.isfinite(tr.finish_s).all() and np.isfinite(tr.first_token_s).all()
    assert (tr.finish_s >= tr.first_token_s).all()
    assert (tr.first_token_s > req.arrival_s).all()
    assert (tr.admissions == 1 + tr.preemptions).all()
    # Each completed prefill emits one token, each decode step one per decoder.
    prefills_completed = n + tr.resume_gaps_s.size
    assert tr.step_decoding.sum() + prefills_completed == req.output_tokens.sum()
    assert tr.free_pages_at_end == tr.total_pages
    assert (tr.step_used_pages <= tr.total_pages).all()
    assert (tr.step_running <= 64).all()
    assert res.preemptions_per_1000 > 0
    # Steps run one after another, idle gaps included: the measures take their window as a slice, and
    # average over its time (idle gaps count as nothing running).
    assert (np.diff(tr.step_start_s) > 0).all()
    window = (tr.step_start_s >= req.arrival_s[40]) & (tr.step_start_s < req.arrival_s[-1])  # 10% warm-up
    window_s = max(req.arrival_s[-1] - req.arrival_s[40], tr.step_s[window].sum())
    assert res.running_batch == pytest.approx(np.dot(tr.step_running[window], tr.step_s[window]) / window_s, rel=1e-12)
    assert res.resident_batch == pytest.approx(np.dot(tr.step_decoding[window], tr.step_s[window]) / window_s, rel=1e-12)


def windowed_dep(catalog, *, window=8, capped_layers=16, **engine):
    """tiny_dep with `capped_layers` of Llama 3.1 8B's 32 layers attending to the last `window`
    tokens (sliding-window layers, as gpt-oss alternates them)."""
    dep = tiny_dep(catalog, **engine)
    model = dep.model.model_copy(update={"sliding_window": window, "num_sliding_window_layers": capped_layers})
    return dataclasses.replace(dep, model=model)


@pytest.mark.parametrize(("prompt", "output", "held"), [
    # (full-attention blocks, windowed blocks) at each step
    # prompt 6: 2 blocks, the window's 2 already full; a new full-attention block at cache 8 only
    (6, 6, [(2, 2), (2, 2), (2, 2), (3, 2), (3, 2), (3, 2)]),
    # prompt 2: 1 block; at cache 4 both kinds take their second block, the window is then full; at
    # cache 8 only the full-attention layers take a third
    (2, 9, [(1, 1), (1, 1), (1, 1), (2, 2), (2, 2), (2, 2), (2, 2), (3, 2), (3, 2)]),
])
def test_a_windowed_layer_holds_and_reads_its_window_only(catalog, prompt, output, held):
    """16 full-attention and 16 sliding-window layers of an 8-token window, blocks of 4 tokens: a
    page is a block of 16 layers, a sequence of b blocks holds b + min(b, 2) pages (vLLM's hybrid
    allocator frees the windowed layers' blocks before the window), and a decode step reads those
    pages: StepModel.decode_step_s(1, (b + min(b, 2)) x page bytes, attended tokens). (A window of
    ceil(8 / 4) = 2 blocks, as planner.paged charges it; vLLM keeps one more in most steps.)"""
    dep = windowed_dep(catalog)
    sm = StepModel.of(dep)
    page = kv_bytes_for_tokens(tiny_dep(catalog).model, 4, dep.kv_dtype) / 2  # a block of 16 of the 32 layers
    _, tr = simulate_replica(dep, fixed([0.0], prompt, output), kv_budget_bytes=int(200 * page), trace=True)
    assert tr.total_pages == 200
    assert tr.step_used_pages.tolist() == [f + w for f, w in held]
    decode_s = [float(sm.decode_step_s(1, (f + w) * page, prompt + k)) for k, (f, w) in enumerate(held[1:])]
    assert tr.step_s[1:] == pytest.approx(decode_s, rel=1e-12)
    assert tr.free_pages_at_end == tr.total_pages


def test_a_window_shorter_than_a_block_keeps_one_whole_block(catalog):
    """A 2-token window in blocks of 4: the windowed layers keep one block (a page is still a whole
    block of 16 layers, not the 2 tokens of it the window reads), so prompt 6 holds 2 + 1 pages."""
    dep = windowed_dep(catalog, window=2)
    page = kv_bytes_for_tokens(tiny_dep(catalog).model, 4, dep.kv_dtype) / 2
    _, tr = simulate_replica(dep, fixed([0.0], 6, 3), kv_budget_bytes=int(200 * page), trace=True)
    assert tr.total_pages == 200
    assert tr.step_used_pages.tolist() == [3, 3, 3]


def test_layers_are_paged_in_groups_of_the_smaller_kind_as_vllm_groups_them(catalog):
    """Gemma 3 27B: 10 full-attention and 52 windowed layers (1,024 tokens) are paged in groups of
    10 (vLLM's hybrid allocator: the smallest layer count, the last group padded), a page a block of
    10 layers, so a block takes 1 page of full attention and 6 of the window (8 layers of padding,
    which hold memory and are not read); gpt-oss-120b's 18 and 18 take one page each."""
    from planner.memory import kv_values_per_token_per_layer
    from planner.simulate import _cache_blocks

    for model, full, win, window_blocks, group in (("gemma-3-27b", 1, 6, 64, 10), ("gpt-oss-120b", 1, 1, 8, 18)):
        dep = make_deployment(catalog, model=model, gpu="h100-sxm", max_model_len=8192)
        layer_block = 16 * kv_values_per_token_per_layer(dep.model, 1) * dep.kv_dtype.bytes_per_element
        kv = _cache_blocks(dep, fixed([0.0], 100, 10), 10**9, 0)
        assert (kv.full_pages, kv.win_pages, kv.win_blocks) == (full, win, window_blocks)
        assert kv.page_bytes == group * layer_block
        assert kv.total_pages == 10**9 // kv.page_bytes
        capped = dep.model.num_sliding_window_layers
        assert (kv.full_read_bytes, kv.win_read_bytes) == ((dep.model.num_hidden_layers - capped) * layer_block,
                                                           capped * layer_block)
    # vLLM's exception: a larger count under 1.25 times the smaller is the group (17 full, 15 windowed
    # layers: groups of 17, the windowed one padded by 2), not the smaller (2 pages of 15 for the 17)
    dep = windowed_dep(catalog, capped_layers=15)
    kv = _cache_blocks(dep, fixed([0.0], 6, 3), 10**9, 0)
    assert (kv.full_pages, kv.win_pages) == (1, 1)
    assert kv.page_bytes == 17 * 4 * kv_values_per_token_per_layer(dep.model, 1) * dep.kv_dtype.bytes_per_element


def test_a_request_no_budget_can_hold_is_refused_in_the_units_it_is_counted_in(catalog):
    """Without capped layers in blocks, with them in pages, naming only the kinds of layer the model
    has; a budget the shared prefix fills holds no block for anything else."""
    page = kv_bytes_for_tokens(tiny_dep(catalog).model, 4, tiny_dep(catalog).kv_dtype)  # a block of 32 layers
    with pytest.raises(ValueError, match=r"a request of 40 tokens needs 10 blocks; the KV budget holds 5$"):
        simulate_replica(tiny_dep(catalog), fixed([0.0], 30, 10), kv_budget_bytes=5 * page)
    with pytest.raises(ValueError, match=r"needs 12 pages \(10 blocks on its full-attention layers, 2 on its capped "
                                         r"ones\); the KV budget holds 10 pages$"):
        simulate_replica(windowed_dep(catalog), fixed([0.0], 30, 10), kv_budget_bytes=5 * page)
    every_layer = windowed_dep(catalog, capped_layers=32)
    simulate_replica(every_layer, fixed([0.0], 30, 10), kv_budget_bytes=5 * page)  # 2 blocks a sequence: it fits
    with pytest.raises(ValueError, match=r"needs 2 pages \(2 blocks on its capped layers\); the KV budget holds 1 pages$"):
        simulate_replica(every_layer, fixed([0.0], 30, 10), kv_budget_bytes=page)
    with pytest.raises(ValueError, match="the KV budget holds no block beyond the shared prefix"):
        simulate_replica(tiny_dep(catalog), fixed([0.0], 30, 10), kv_budget_bytes=2 * page, shared_prefix_tokens=12)


def test_windowed_pages_all_come_back_under_memory_pressure(catalog):
    """The case of test_conservation_under_memory_pressure with half the layers windowed (2 blocks of
    16): decoders still filling their window at a preemption or at their end are struck from the
    table of those that grow, so every page comes back and none is held past the budget."""
    dep, req, budget_bytes = under_memory_pressure(catalog)
    windowed = dataclasses.replace(dep, model=dep.model.model_copy(
        update={"sliding_window": 32, "num_sliding_window_layers": 16}))
    _, tr = simulate_replica(windowed, req, kv_budget_bytes=budget_bytes // 2, settled=False, trace=True)
    assert tr.preemption_steps.size > 0
    assert np.isfinite(tr.finish_s).all()
    assert tr.free_pages_at_end == tr.total_pages
    assert (tr.step_used_pages <= tr.total_pages).all()
    # the same requests and budget with no window hold more pages: full blocks on every layer
    _, full = simulate_replica(dep, req, kv_budget_bytes=budget_bytes // 2, settled=False, trace=True)
    assert full.total_pages * 2 == tr.total_pages
    assert full.preemption_steps.size > tr.preemption_steps.size


@pytest.mark.parametrize("shared", [0, 3000])
def test_windowed_cache_agrees_with_the_model(catalog, shared):
    """gpt-oss-120b (18 of 36 layers windowed at 128 tokens): the simulator's mean cache held is the
    model's (planner.paged charges a windowed layer its window, the shared prefix's too), and its
    mean ITL too. Before the simulator paged windows it held 2.1 and 1.9 times the model's cache
    (0.0222 against 0.0105 without a prefix) and read 6% and 4% over its mean ITL."""
    dep = make_deployment(catalog, model="gpt-oss-120b", gpu="h100-sxm", max_model_len=16384, tp=2,
                          weight_dtype="mxfp4")
    hist = Histogram.constant(4000, 300)
    req = sample_requests(hist, 3.0, 1500, seed=1)
    sim = simulate_replica(dep, req, shared_prefix_tokens=shared)
    pred = predicted_point(dep, profile_for(dep, hist, shared_prefix_tokens=shared), sim.rate_rps)
    assert sim.kv_utilisation == pytest.approx(pred["kv_utilisation"], rel=0.05)
    assert sim.itl_ms_mean == pytest.approx(pred["itl_ms_mean"], rel=0.05)
    assert sim.stable and sim.preemptions == 0


def test_a_replay_whose_records_were_sized_short_is_run_again_with_the_same_answer(catalog, monkeypatch):
    """The per-step records are allocated before the loop runs; a replay that runs more steps than
    they hold (here records first sized for 5 steps, preemptions included) is run again with records
    for every step: the same trace and measures as records sized right at once."""
    import planner.simulate as simulate

    dep, req, budget_bytes = under_memory_pressure(catalog)
    res, tr = simulate_replica(dep, req, kv_budget_bytes=budget_bytes, trace=True)
    assert tr.preemption_steps.size > 0 and tr.step_s.size > 5
    monkeypatch.setattr(simulate, "FIRST_RECORDS_MAX_STEPS", 5)
    again, tr_again = simulate_replica(dep, req, kv_budget_bytes=budget_bytes, trace=True)
    for f in dataclasses.fields(tr):
        assert np.array_equal(getattr(tr, f.name), getattr(tr_again, f.name)), f.name
    assert dataclasses.replace(again, wall_s=0.0, latencies=None) == dataclasses.replace(res, wall_s=0.0, latencies=None)


def test_without_preemption_a_replay_runs_at_most_its_bound_of_steps(catalog):
    """Every step gives a decoding sequence a token or runs a prefill chunk: a lone request takes
    exactly its chunks and o - 1 decode steps, and requests sharing steps take fewer than the sum."""
    import planner.simulate as simulate

    dep = tiny_dep(catalog, block_size=4, chunk=8, max_seqs=8)
    blk = kv_bytes_for_tokens(dep.model, 4, dep.kv_dtype)
    _, lone = simulate_replica(dep, fixed([0.0], 21, 7), kv_budget_bytes=100 * blk, trace=True)
    assert lone.step_s.size == simulate._steps_at_most(fixed([0.0], 21, 7), 8) == 3 + 6
    rng = np.random.default_rng(11)
    req = Requests(np.sort(rng.uniform(0, 5.0, 200)), rng.integers(1, 60, 200), rng.integers(1, 40, 200))
    _, tr = simulate_replica(dep, req, kv_budget_bytes=10_000 * blk, trace=True)
    assert tr.preemption_steps.size == 0
    assert 0 < tr.step_s.size < simulate._steps_at_most(req, 8)


def test_shared_prefix_is_held_once_and_skipped(catalog):
    dep = tiny_dep(catalog)
    sm = StepModel.of(dep)
    blk = kv_bytes_for_tokens(dep.model, 4, dep.kv_dtype)
    # prefix of 9 tokens -> 2 full blocks (8 tokens) shared; prompt 10: 2 new tokens, 1 own block.
    res, tr = simulate_replica(
        dep, fixed([0.0], 10, 2), kv_budget_bytes=10 * blk, shared_prefix_tokens=9, trace=True
    )
    assert tr.total_pages == 8
    assert tr.step_used_pages.tolist() == [1, 1]
    t0 = float(sm.decode_step_s(0, 0, 0)) + float(sm.prefill_flops(10, 100, 8)) / sm.flops_s
    t1 = float(sm.decode_step_s(1, 1 * blk + 2 * blk, 11))
    assert tr.step_s == pytest.approx([t0, t1], rel=1e-12)
    assert res.total_blocks == 8 and res.kv_budget_bytes == 10 * blk


def test_same_seed_same_result_and_different_seed_different_arrivals(catalog):
    dep = make_deployment(catalog, model="llama-3.1-8b", gpu="h100-sxm", max_model_len=8192)
    rng = np.random.default_rng(1)
    hist = Histogram.from_arrays(rng.integers(50, 2000, 500), rng.integers(10, 500, 500))
    a = sample_requests(hist, 5.0, 300, seed=3)
    b = sample_requests(hist, 5.0, 300, seed=3)
    c = sample_requests(hist, 5.0, 300, seed=4)
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.prompt_tokens, b.prompt_tokens)
    assert not np.array_equal(a.arrival_s, c.arrival_s)
    ra, rb = simulate_replica(dep, a), simulate_replica(dep, b)
    va, vb = dataclasses.asdict(ra), dataclasses.asdict(rb)
    for v in (va, vb):
        v.pop("wall_s"), v.pop("latencies")
    assert va == vb
    assert np.array_equal(ra.latencies.ttft_s, rb.latencies.ttft_s)
    assert np.array_equal(ra.latencies.tpot_s, rb.latencies.tpot_s, equal_nan=True)
    assert simulate_replica(dep, c).ttft_ms_p99 != ra.ttft_ms_p99


def test_sampling_keeps_the_histogram_moments():
    rng = np.random.default_rng(0)
    p = np.clip(rng.lognormal(6.5, 1.0, 20000), 1, 8000).astype(int)
    o = np.clip(rng.lognormal(5.0, 0.8, 20000), 1, 2000).astype(int)
    hist = Histogram.from_arrays(p, o)
    req = sample_requests(hist, 1.0, 200_000, seed=1)
    assert req.prompt_tokens.mean() == pytest.approx(p.mean(), rel=0.01)
    assert (req.prompt_tokens.astype(float) ** 2).mean() == pytest.approx((p.astype(float) ** 2).mean(), rel=0.03)
    assert req.output_tokens.mean() == pytest.approx(o.mean(), rel=0.01)
    const = sample_requests(Histogram.constant(1000, 250), 1.0, 50, seed=2)
    assert set(const.prompt_tokens.tolist()) == {1000} and set(const.output_tokens.tolist()) == {250}
    assert np.mean(np.diff(req.arrival_s)) == pytest.approx(1.0, rel=0.01)


def test_simulation_agrees_with_the_model_below_capacity(catalog):
    """Well below every ceiling, Little's law holds in both: resident batch and mean ITL within 5%."""
    dep = make_deployment(catalog, model="llama-3.1-8b", gpu="h100-sxm", max_model_len=8192)
    hist = Histogram.constant(1000, 250)
    req = sample_requests(hist, 15.0, 3000, seed=1)
    sim = simulate_replica(dep, req)
    pred = predicted_point(dep, profile_for(dep, hist), sim.rate_rps)
    assert set(pred) == set(COMPARE_KEYS) == set(sim.compare_view())
    assert sim.resident_batch == pytest.approx(pred["resident_batch"], rel=0.05)
    assert sim.itl_ms_mean == pytest.approx(pred["itl_ms_mean"], rel=0.05)
    assert sim.kv_utilisation == pytest.approx(pred["kv_utilisation"], rel=0.05)
    assert sim.stable and sim.preemptions == 0


def test_a_lightly_loaded_replica_is_measured_over_its_idle_time_too(catalog):
    """At 0.2 requests/s the replica idles most of the time: the simulator's means are over the
    window's time, as Little's law puts the model's, so its decoding count, cache held and prefill
    share agree with the model's N, KV utilisation and λ·prefill_s (over the busy steps alone they
    read several times higher)."""
    dep = make_deployment(catalog, model="llama-3.1-8b", gpu="h100-sxm", max_model_len=8192)
    hist = Histogram.constant(1000, 250)
    sim = simulate_replica(dep, sample_requests(hist, 0.2, 3000, seed=1))
    pred = predicted_point(dep, profile_for(dep, hist), sim.rate_rps)
    assert pred["resident_batch"] < 0.5  # mostly idle
    assert sim.resident_batch == pytest.approx(pred["resident_batch"], rel=0.03)
    assert sim.kv_utilisation == pytest.approx(pred["kv_utilisation"], rel=0.05)
    assert sim.prefill_share == pytest.approx(sim.rate_rps * float(StepModel.of(dep).prefill_s(1000.0)), rel=0.02)
    # Running counts a request from its first prefill chunk: a little more than decoding.
    assert sim.resident_batch < sim.running_batch < 1.1 * sim.resident_batch


def test_max_sustainable_rate_brackets_and_respects_the_criterion(catalog):
    dep = make_deployment(catalog, model="llama-3.1-8b", gpu="h100-sxm", max_model_len=8192)
    hist = Histogram.constant(1000, 250)
    slo = SLO.single(tpot_ms=30.0)  # binds well below saturation (about 17 rps of 24)
    found = max_sustainable_rate(dep, hist, slo, n_requests=3000, rel_tol=0.05)
    assert found.rate_rps > 0 and found.result is not None
    assert Criterion(slo, 10.0).failures(found.result) == []
    lo, hi = found.bracket
    assert (hi - lo) <= 0.05 * hi
    assert "tpot" in found.binding
    assert found.result.latencies.statistic(slo.bands[0], "tpot", "p99") <= 0.030


def test_a_rate_read_before_the_longer_sample_was_drawn_is_read_again_on_it(catalog):
    """A stub replica whose backlog reads stable up to 10 rps on 1,000-request runs and up to 8 on
    runs four times as long (a short run's filling read as growth above 8): the search passes 6 and
    9 on the short sample, draws the longer one at 13.5 and fails every rate above 8 on it. The
    answer must hold on the longer sample: 9 is read again there, and the search goes on below it."""
    from types import SimpleNamespace

    dep = make_deployment(catalog, model="llama-3.1-8b", gpu="h100-sxm", max_model_len=8192)

    def stub(_dep, reqs, **_):
        holds_up_to = 10.0 if reqs.n == 1000 else 8.0
        return SimpleNamespace(stable=reqs.poisson_rate_rps <= holds_up_to, latencies=None, preemptions_per_1000=0.0,
                               requests=reqs.n)

    found = max_sustainable_rate(dep, Histogram.constant(1000, 250), n_requests=1000, rel_tol=0.01,
                                 initial_rate_rps=6.0, simulate=stub)
    assert found.longer_requests == 4000 and found.result.requests == 4000
    assert 8.0 * 0.99 <= found.rate_rps <= 8.0
    assert [rate for rate, _ in found.evaluations][:3] == [6.0, 9.0, 13.5]
    assert (9.0, ("unstable",)) in found.evaluations  # read again on the longer sample, where it fails


def test_a_search_no_longer_wanted_ends_at_its_next_run_with_no_answer(catalog):
    """max_sustainable_rate asks `wanted` before each run after the first (the first missed, below a
    rate searched no higher): False ends it there, its answer 0; True all along finds what no
    `wanted` finds; a first rate that holds is the answer without asking."""
    from types import SimpleNamespace

    dep = make_deployment(catalog, model="llama-3.1-8b", gpu="h100-sxm", max_model_len=8192)

    def stub(_dep, reqs, **_):
        return SimpleNamespace(stable=reqs.poisson_rate_rps <= 8.0, latencies=None, preemptions_per_1000=0.0,
                               requests=reqs.n)

    def search(initial, wanted=None):
        return max_sustainable_rate(dep, Histogram.constant(1000, 250), n_requests=1000, rel_tol=0.01,
                                    initial_rate_rps=initial, search_above=False, widen=1.25, simulate=stub,
                                    wanted=wanted)

    asked = []
    stopped = search(10.0, lambda: asked.append(1) or False)
    assert (stopped.rate_rps, stopped.binding, stopped.evaluations) == (0.0, "not wanted", ((10.0, ("unstable",)),))
    assert len(asked) == 1
    alone, asked = search(10.0), []
    wanted = search(10.0, lambda: asked.append(1) or True)
    assert wanted == alone and 8.0 * 0.99 <= wanted.rate_rps <= 8.0
    assert len(asked) == len(alone.evaluations) - 1  # before each run after the first
    asked = []
    assert search(6.0, lambda: asked.append(1) or True).rate_rps == 6.0 and not asked
    with pytest.raises(ValueError, match="search_above=False"):  # a search upwards asks after a rate that held
        max_sustainable_rate(dep, Histogram.constant(1000, 250), n_requests=1000, initial_rate_rps=6.0,
                             simulate=stub, wanted=lambda: True)


@pytest.mark.parametrize(("model", "tp", "weights"), [("llama-3.1-8b", 1, "bf16"), ("llama-3.1-70b", 4, "bf16"),
                                                      ("mixtral-8x7b", 2, "bf16"), ("gpt-oss-20b", 1, "fp8")])
def test_tabulated_step_time_is_the_step_model(catalog, model, tp, weights):
    """The simulator's fast step-time form reproduces StepModel.decode_step_s exactly, where the
    cache reads bind and where the attention FLOPs do (a few bytes a token), a windowed model's too."""
    from planner.simulate import _Costs

    dep = make_deployment(catalog, model=model, gpu="h100-sxm", tp=tp, weight_dtype=weights, max_model_len=8192)
    costs = _Costs.of(dep, dep.engine.max_num_seqs)
    sm = StepModel.of(dep)
    flop_bound = 0
    for d, cache, ctx in [(0, 0.0, 0.0), (1, 1e6, 10.0), (300, 3e11, 6e5), (1024, 8e10, 8e6), (1, 10.0, 5000.0),
                          (4, 100.0, 300.0), (64, 1e3, 64 * 6000.0)]:
        attn_flops = costs.attn * ctx + costs.attn_capped * min(ctx, d * costs.window)
        flop_bound += attn_flops / costs.flops_s > cache / costs.bandwidth
        form = costs.fixed_s[d] + max(cache / costs.bandwidth, attn_flops / costs.flops_s)
        assert form == pytest.approx(float(sm.decode_step_s(d, cache, ctx)), rel=1e-12)
    assert flop_bound >= 3
    assert costs.comm_per_token_s * 8192 == pytest.approx(float(sm.allreduce_s(8192.0, with_latency=False)), rel=1e-12)


def test_a_step_model_the_loop_does_not_reproduce_is_refused(catalog, monkeypatch):
    from planner.simulate import _Costs

    dep = make_deployment(catalog, model="llama-3.1-8b", gpu="h100-sxm", max_model_len=8192)
    original = StepModel.decode_step_s
    monkeypatch.setattr(StepModel, "decode_step_s", lambda self, b, c, x: original(self, b, c, x) + 1e-6 * np.asarray(x))
    with pytest.raises(RuntimeError, match=r"carry the change into planner\.sim_kernel"):
        _Costs.of(dep, 64)


def test_a_prefill_the_loop_does_not_reproduce_is_refused(catalog, monkeypatch):
    """The loop's chunk FLOPs are checked against StepModel.prefill_flops: a windowed model's spans
    charged as full attention by the step model would no longer be the loop's."""
    from planner.roofline import AttentionFlops
    from planner.simulate import _Costs

    dep = make_deployment(catalog, model="gpt-oss-20b", gpu="h100-sxm", weight_dtype="fp8", max_model_len=8192)
    _Costs.of(dep, 64)
    full = AttentionFlops.prompt
    monkeypatch.setattr(AttentionFlops, "prompt", lambda self, p, p2, s=0: full(
        AttentionFlops(self.full_per_pair + self.capped_per_pair), p, p2, s))
    with pytest.raises(RuntimeError, match=r"carry the change into planner\.sim_kernel"):
        _Costs.of(dep, 64)


def test_kernel_loads_without_scipy_and_leaves_blas_importable():
    """Loading the simulator's kernel skips numba's BLAS probe (scipy.linalg, 0.13 s), and the
    probe's block is lifted after: scipy's BLAS imports, and numba's np.dot compiles and is right."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "from planner.sim_kernel import run, _grow\n"
        "_grow(np.zeros(2), 1)\n"
        "print(sorted(m for m in sys.modules if m.startswith('scipy.linalg')))\n"
        "import scipy.linalg.cython_blas, numba\n"
        "print(numba.njit(lambda a, b: np.dot(a, b))(np.arange(3.0), np.arange(3.0)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "5.0"]


def test_the_requests_in_the_system_at_each_step_are_its_running_and_its_waiting(catalog):
    """The backlog trend reads the requests arrived and not finished at each step's start off the
    step's records (running + waiting): the same integers as counting arrivals and finishes at or
    before each start among the sorted times, with preemptions (recomputed requests wait again)
    and without."""
    dep, req, budget_bytes = under_memory_pressure(catalog)
    for kv_budget_bytes in (budget_bytes, None):
        _, tr = simulate_replica(dep, req, kv_budget_bytes=kv_budget_bytes, trace=True)
        start = tr.step_start_s
        counted = (np.searchsorted(np.sort(req.arrival_s), start, side="right")
                   - np.searchsorted(np.sort(tr.finish_s), start, side="right"))
        assert np.array_equal(tr.step_running + tr.step_waiting, counted)
    assert tr.preemption_steps.size == 0


def test_settling_time_is_where_the_mean_lifetime_past_it_falls_to_the_deficit():
    """E[(L - t)+] <= deficit · E[L]: exact on hand cases, e^(-t/μ) for exponential lifetimes
    (t = μ·ln(1/deficit)), weights counting as repeats, and nothing to settle without a lifetime."""
    from planner.sim_measures import settling_time_s

    # [1, 2, 3]: E[L] = 2. Half of it left: (0 + 1 + 2) / 3 = 1 at t = 1.
    assert settling_time_s(np.array([1.0, 2.0, 3.0]), 0.5) == pytest.approx(1.0, rel=1e-12)
    # Below the shortest: E[(L - t)+] = 1.5 - t for [1, 2]; three quarters of 1.5 left at t = 0.375.
    assert settling_time_s(np.array([2.0, 1.0]), 0.75) == pytest.approx(0.375, rel=1e-12)
    assert settling_time_s(np.array([1.0, 2.0, 3.0]), 0.0) == 3.0  # nothing left: the longest
    assert settling_time_s(np.array([1.0, 2.0, 2.0, 5.0]), 0.1) == pytest.approx(
        settling_time_s(np.array([1.0, 2.0, 5.0]), 0.1, weights=np.array([1.0, 2.0, 1.0])), rel=1e-12)
    lifetimes = np.random.default_rng(0).exponential(4.0, 200_000)
    t = settling_time_s(lifetimes, 0.001)
    assert np.maximum(lifetimes - t, 0).mean() == pytest.approx(0.001 * lifetimes.mean(), rel=1e-9)
    assert t == pytest.approx(4.0 * np.log(1000), rel=0.02)
    assert settling_time_s(np.array([np.inf, np.nan])) == 0.0
    # a weight that is not finite and positive does not count; none left: nothing to settle
    assert settling_time_s(np.array([1.0, 2.0, 3.0]), 0.5, weights=np.zeros(3)) == 0.0
    assert settling_time_s(np.array([1.0, np.inf]), 0.5, weights=np.array([0.0, 1.0])) == 0.0
    assert settling_time_s(np.array([1.0, 2.0, 3.0, 9.0]), 0.5, weights=np.array([1.0, 1.0, 1.0, np.nan])) == 1.0


def test_the_measured_requests_arrive_once_settled_and_a_settling_time_before_the_last():
    """100 arrivals a second apart, each living 10 s: settled 9.99 s after the first arrival (0.1%
    of the mean lifetime left), so the tenth cut alone decides the start, and the last measured
    arrives by 99 - 9.99 s. Living 50 s, either end trims at most 30% of the requests."""
    from types import SimpleNamespace

    from planner.sim_measures import settled_window

    arrival = np.arange(100.0)
    req = SimpleNamespace(n=100, arrival_s=arrival)
    for life, window in ((10.0, (10, 89)), (50.0, (30, 69))):
        tr = SimpleNamespace(finish_s=arrival + life)
        assert settled_window(req, tr, 0.1) == window
        assert settled_window(req, tr, 0.1, settled=False) == (10, 99)
    early = SimpleNamespace(finish_s=arrival + 3.0)  # settled at 2.997 s: the tenth decides, the end trims 3
    assert settled_window(req, early, 0.1) == (10, 96)
    # arrivals at one instant span no time to settle in: the warm-up share alone
    burst = SimpleNamespace(n=100, arrival_s=np.zeros(100))
    assert settled_window(burst, SimpleNamespace(finish_s=np.linspace(1.0, 50.0, 100)), 0.1) == (10, 99)


def test_requests_that_decode_on_into_the_drain_read_faster_and_are_not_measured(catalog):
    """After the last arrival nobody joins the batch: the requests that arrived shortly before it
    decode in a thinning batch and read TPOT below the run's settled middle. The settled window
    leaves them out, so its TPOT mean sits above that of the run measured to its last arrival."""
    from planner.sim_measures import settled_window

    dep = make_deployment(catalog, model="llama-3.1-8b", gpu="h100-sxm", max_model_len=8192)
    req = sample_requests(Histogram.constant(1000, 600), 8.0, 3000, seed=1)  # about 80 decoding, settled
    settled, tr = simulate_replica(dep, req, trace=True)
    whole = simulate_replica(dep, req, settled=False)
    first, last = settled_window(req, tr, 0.1)
    tpot = (tr.finish_s - tr.first_token_s) / (req.output_tokens - 1)
    assert last < req.n - 1 and (tr.finish_s[first:last + 1] <= req.arrival_s[-1]).mean() > 0.99
    assert tpot[last + 1:].mean() < 0.95 * tpot[first:last + 1].mean()
    assert settled.latencies.tpot_s.mean() > whole.latencies.tpot_s.mean()
    assert settled.measured_requests == last + 1 - first < whole.measured_requests


def state_only_dep(catalog, *, state_bytes_per_layer=1_000_000, **engine):
    """tiny_dep with every one of Llama 3.1 8B's 32 layers a Mamba layer: a fixed state per
    sequence, no token cached."""
    dep = tiny_dep(catalog, **engine)
    model = Model.model_validate({**dep.model.model_dump(), "num_state_layers": 32, "state_layer_kind": "mamba",
                                  "state_bytes_per_layer": state_bytes_per_layer})
    return dataclasses.replace(dep, model=model)


def test_a_model_of_fixed_states_runs_as_many_sequences_as_the_budget_holds_states(catalog):
    """No layer caches tokens, so no block fills the budget (it crashed on a page of 0 bytes): the
    states do. A budget of 3.5 states runs 3 sequences at once of the 8 max_num_seqs allows, as
    planner.footprint charges each resident sequence its state, and the cache held is theirs."""
    dep = state_only_dep(catalog, max_seqs=8)
    state = 32 * 1_000_000
    res, tr = simulate_replica(dep, fixed([0.0] * 6, 6, 3), kv_budget_bytes=int(3.5 * state), trace=True)
    assert tr.step_running.max() == 3
    assert res.notes == ()  # nothing left uncharged
    assert (tr.finish_s > 0).all() and res.preemptions == 0
    held = np.dot(tr.step_running, tr.step_s) / tr.step_s.sum()  # the run has no idle gap: every step is its time
    window_res = simulate_replica(dep, fixed([0.0] * 6, 6, 3), kv_budget_bytes=int(3.5 * state), warmup_fraction=0.0,
                                  settled=False)
    assert window_res.kv_utilisation == pytest.approx(held * state / int(3.5 * state), rel=1e-12)
    with pytest.raises(ValueError, match=r"holds no sequence's state \(32,000,000 bytes\)"):
        simulate_replica(dep, fixed([0.0], 6, 3), kv_budget_bytes=state - 1)


def test_a_decode_step_reads_each_decoder_s_fixed_state(catalog):
    """As planner.footprint's read bytes count it (the replay read none of it: a state-only model was
    certified on steps twice as fast as the plan's): one decoder of a 32 MB state and four tokens in
    the cache, StepModel.decode_step_s(1, 32 MB, attended tokens)."""
    from planner.roofline import StepModel

    dep = state_only_dep(catalog, max_seqs=8)
    sm = StepModel.of(dep)
    _, tr = simulate_replica(dep, fixed([0.0], 6, 4), kv_budget_bytes=10 * 32_000_000, trace=True)
    assert tr.step_decoding.tolist() == [0, 1, 1, 1]
    assert tr.step_s[1:] == pytest.approx([float(sm.decode_step_s(1, 32_000_000, 6 + k)) for k in range(3)], rel=1e-12)
