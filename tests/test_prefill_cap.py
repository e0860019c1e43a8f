"""The prefill queue under vLLM's long-prefill cap θ (planner.prefill_cap)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.capacity import ReplicaModel
from planner.deployment import make_deployment
from planner.histogram import Histogram
from planner.paged import token_profile
from planner.prefill_cap import (
    CappedRegime,
    SlotStep,
    blocked_decay_s,
    capped_waits,
    occupancy,
    slot_hold_s,
    slot_speeds,
    stay_spread,
)
from planner.requests import sample_requests
from planner.simulate import simulate_replica
from planner.targets import SLO, Band, Target

# A step without a decode part: every state runs at full speed (φ = 1), the occupancy is geometric.
FREE = SlotStep(cap_tokens=100, budget_tokens=300, decode_s=0.0, compute_s_per_token=1e-4)
STEPS, COMPUTE = np.array([1.0, 3.0]), np.array([0.01, 0.05])


def test_slot_speeds_are_the_work_a_partly_filled_step_does():
    """θ = 100, C' = 250, t_dec = 10 ms, u = 0.1 ms: j in flight carry min(100j, 250) tokens in
    10 ms + that many tokens' compute, doing (u + t_dec/C') a token of work; three fill the step."""
    step = SlotStep(100, 250, 0.01, 1e-4)
    assert step.servers == 3
    per_token = 1e-4 + 0.01 / 250
    expected = [t * per_token / (0.01 + t * 1e-4) for t in (100, 200, 250)]
    assert slot_speeds(step) == pytest.approx(expected)
    assert slot_speeds(step)[-1] == pytest.approx(1.0)
    assert np.all(slot_speeds(FREE) == 1.0)


def test_the_occupancy_is_the_birth_death_chain_solved_directly():
    """P(n) against the balance equations of a chain truncated at 400 states: births λ, deaths
    φ(min(n, c))/E[S] with n present."""
    step = SlotStep(100, 450, 0.02, 1e-4)
    speeds, r, mean_s = slot_speeds(step), 0.85, 0.2
    rate = r / mean_s
    c, size = step.servers, 400
    death = np.array([0.0] + [speeds[min(n, c) - 1] / mean_s for n in range(1, size)])
    q = np.zeros((size, size))
    for n in range(size - 1):
        q[n, n + 1] = rate
        q[n + 1, n] = death[n + 1]
    q -= np.diag(q.sum(axis=1))
    a = np.vstack([q.T, np.ones(size)])
    pi = np.linalg.lstsq(a, np.r_[np.zeros(size), 1.0], rcond=None)[0]
    below, blocked = occupancy(r, speeds)
    assert below == pytest.approx(pi[:c], abs=1e-9)
    assert blocked == pytest.approx(pi[c:].sum(), abs=1e-9)
    geometric_below, geometric_blocked = occupancy(r, np.ones(c))
    assert geometric_blocked == pytest.approx(r**c)
    assert geometric_below == pytest.approx((1 - r) * r ** np.arange(c))
    assert blocked > geometric_blocked  # slower partly filled steps fill the slots


def test_the_blocked_wait_is_m_m_c_exact_and_pollaczek_khinchine_at_one_slot():
    """cv² = 1 (holds 0 and 2, equal shares): E[W | W > 0] = 1 / (c/E[H] - λ), M/M/c's; and the
    hold of a slot is its full steps plus its own compute."""
    hold, w = np.array([0.0, 2.0]), np.array([0.5, 0.5])
    c, rate = 4, 1.5
    r = rate * 1.0 / c
    assert blocked_decay_s(rate, r, hold, w) == pytest.approx(1.0 / (c / 1.0 - rate))
    s, ws = np.array([1.0, 4.0, 10.0]), np.array([0.5, 0.3, 0.2])
    rho = 0.08 * float(ws @ s)
    assert blocked_decay_s(0.08, rho, s, ws) == pytest.approx(float(ws @ s**2) / (2 * float(ws @ s) * (1 - rho)))
    step = SlotStep(100, 250, 0.01, 1e-4)
    assert slot_hold_s(step, STEPS, COMPUTE) == pytest.approx(STEPS * (0.01 + 150 * 1e-4) + COMPUTE)


def test_capped_waits_follow_the_occupancy():
    """At load r with c in service and full-speed steps a capped prompt waits with probability
    r^c, a mean of r^c·E[W | W > 0]; with negligible chunks, a short prompt waits the same."""
    rate, work = 2.0, np.array([0.2, 0.4])
    weight = np.array([0.5, 0.5])
    r = rate * 0.3
    long_wait, short_wait, _ = capped_waits(rate, work, weight, 0.0, FREE, STEPS, COMPUTE, np.array([1e-9]),
                                         np.array([1.0]))
    assert float(long_wait.survival(1e-9)) == pytest.approx(r**3, rel=1e-3)
    decay = blocked_decay_s(rate, r, slot_hold_s(FREE, STEPS, COMPUTE), weight)
    assert long_wait.mean_s == pytest.approx(r**3 * decay)
    grid_mean = float(np.sum(1.0 - short_wait.cdf) * short_wait.dt_s)
    assert grid_mean == pytest.approx(long_wait.mean_s, rel=0.02)
    assert capped_waits(4.0, work, weight, 0.0, FREE, STEPS, COMPUTE, np.array([0.01]), np.array([1.0])) is None  # r >= 1


def test_a_backlog_regime_equal_to_the_queue_at_n_changes_nothing():
    """Read at the state a wait reaches, a queue whose regime is itself keeps its waits."""
    rate, work, weight = 2.0, np.array([0.2, 0.4]), np.array([0.5, 0.5])
    step = SlotStep(100, 300, 0.01, 1e-4)
    args = (rate, work, weight, 0.1, step, STEPS, COMPUTE, np.array([0.01, 0.03]), np.array([1.0, 2.0]))
    plain = capped_waits(*args)
    read = capped_waits(*args, CappedRegime(work, 0.1, step, 5.0))
    for a, b in zip(plain[:2], read[:2], strict=True):
        assert b.dt_s == pytest.approx(a.dt_s)
        assert np.allclose(b.cdf, a.cdf, atol=1e-6)
        assert b.mean_s == pytest.approx(a.mean_s, rel=1e-3)


def test_a_long_wait_is_read_at_the_backlog_regime():
    """Past τ the capped prompt's wait is the regime's queue's: slower works, a heavier short load and
    one slot fewer give r_b^c_b·exp(-x / E[W_b | W_b > 0]); before τ it lies between N's and the
    regime's; a regime whose queue never clears makes the point unstable."""
    rate, work, weight = 2.0, np.array([0.2, 0.4]), np.array([0.5, 0.5])
    slow = work * 1.25
    step_b = SlotStep(100, 200, 0.0, 1e-4)
    regime = CappedRegime(slow, 0.05, step_b, 4.0)
    long_wait, _, _ = capped_waits(rate, work, weight, 0.0, FREE, STEPS, COMPUTE, np.array([1e-9]), np.array([1.0]),
                                regime)
    r_b = rate * 0.375 / 0.95
    decay_b = blocked_decay_s(rate, r_b, slot_hold_s(step_b, STEPS, COMPUTE), weight)
    for x in (4.0, 6.0, 9.0):
        assert float(long_wait.survival(x)) == pytest.approx(r_b**2 * np.exp(-x / decay_b), rel=2e-3)
    r = rate * 0.3
    at_n = r**3 * np.exp(-2.0 / blocked_decay_s(rate, r, slot_hold_s(FREE, STEPS, COMPUTE), weight))
    assert at_n < float(long_wait.survival(2.0)) < r_b**2 * np.exp(-2.0 / decay_b)
    assert capped_waits(rate, work, weight, 0.0, FREE, STEPS, COMPUTE, np.array([1e-9]), np.array([1.0]),
                        CappedRegime(work * 2.0, 0.0, FREE, 4.0)) is None  # r_b = 1.2


def test_under_the_cap_short_prompts_pass_long_ones_in_model_and_simulation(catalog):
    """2% of 60k-token prompts among 1k-token ones at θ = 2,048: the short band's p90 TTFT drops
    well below the first-come-first-served one, and the model follows the simulator."""
    dep = make_deployment(catalog, model="llama-3.1-8b", gpu="h100-sxm", max_model_len=131072)
    capped = dataclasses.replace(dep, engine=dep.engine.model_copy(update={"long_prefill_token_threshold": 2048}))
    n = 5000
    hist = Histogram.from_arrays(np.r_[np.full(n - 100, 1000), np.full(100, 60_000)], np.full(n, 200))
    slo = SLO((Band("short", 0, 8192, Target("p99", 2.0)), Band("long", 8192, None, Target("p99", 30.0))))
    rate = 2.0
    reqs = sample_requests(hist, rate, 20_000, seed=1)
    p90 = {}
    for name, d in (("fcfs", dep), ("capped", capped)):
        rm = ReplicaModel(d, token_profile(hist), slo)
        model = rm.latency_at(rm.resident_for_rate(rate, 1024)).value(0, "ttft", "p90")
        sim = simulate_replica(d, reqs).latencies.statistic(slo.bands[0], "ttft", "p90")
        p90[name] = (model, sim)
    assert p90["capped"][1] < 0.3 * p90["fcfs"][1]
    assert p90["capped"][0] < 0.5 * p90["fcfs"][0]
    assert p90["capped"][0] == pytest.approx(p90["capped"][1], rel=0.3)


def test_the_window_helpers_match_brute_force():
    """E[min(T, a)] and Σ w·(T - a)+², which size the TPOT window under θ, against direct sums."""
    from planner.latency import _min_mean, _past_square

    rng = np.random.default_rng(3)
    t, w = rng.exponential(2.0, 200), rng.random(200)
    a = np.r_[0.0, rng.exponential(2.0, 30), 100.0]
    assert _min_mean(t, w, a) == pytest.approx((np.minimum(t[None, :], a[:, None]) @ w) / w.sum())
    assert _past_square(t, w, a) == pytest.approx(np.maximum(t[None, :] - a[:, None], 0.0) ** 2 @ w, abs=1e-9)


def test_an_idle_capped_replica_waits_nothing(catalog):
    """At zero load nothing is in flight: the point is stable and a request's TTFT is its own
    prefill, as without θ (target_floors reads this point)."""
    dep = make_deployment(catalog, model="llama-3.1-8b", gpu="h100-sxm", max_model_len=131072)
    capped = dataclasses.replace(dep, engine=dep.engine.model_copy(update={"long_prefill_token_threshold": 2048}))
    hist = Histogram.from_arrays(np.r_[np.full(900, 1000), np.full(100, 60_000)], np.full(1000, 200))
    slo = SLO((Band("short", 0, 8192, Target("p99", 2.0)), Band("long", 8192, None, Target("p99", 30.0))))
    rm = ReplicaModel(capped, token_profile(hist), slo)
    pt = rm.latency.at(0.0, rm.decode_s(1.0), 1.0)
    assert pt.stable and all(w.mean_s == 0.0 for w in pt.waits)
    for band in (0, 1):
        cells = rm.latency.band_cells[band]
        assert pt.ttft_mean(band) == pytest.approx(float(np.dot(rm.latency.cells.weight[cells], pt.own_s[cells])
                                                         / rm.latency.cells.weight[cells].sum()), rel=1e-12)


# Decoders that follow the slots: 2,000 decode tokens a second, t_dec = 10 ms at N = 50 rising
# 0.05 ms a decoder, at most 400 decoders; the prompts of at most θ tokens take 20% of the compute.
FOLLOWING = SlotStep(100, 450, 0.01, 1e-4, decode_rate=2000.0, decoders=50.0, decode_slope_s=5e-5,
                     max_decoders=400.0, short_share=0.2)


def test_decoders_settle_where_littles_law_meets_the_steps_they_slow():
    """n = λ·E[o - 1]·T with T = (t_dec(n) + tokens·u) / (1 - ρ_s): solved here by iterating the
    map, against state_decode_s's closed form; clamped to [N, n_b]; fixed without a decode rate."""
    tokens = np.array([0.0, 100.0, 300.0, 450.0])
    got = FOLLOWING.state_decode_s(tokens)
    for t_tokens, t_dec in zip(tokens, got, strict=True):
        n = 50.0
        for _ in range(2000):
            n = 2000.0 * (0.01 + 5e-5 * (n - 50.0) + t_tokens * 1e-4) / 0.8
        n = min(max(n, 50.0), 400.0)
        assert t_dec == pytest.approx(0.01 + 5e-5 * (n - 50.0), rel=1e-9)
    assert got[0] == pytest.approx(0.01)  # 2000 · 10 ms / 0.8 = 25 decoders, below N: N's
    # A tighter cap binds; a slope at which the decoders never settle takes the cap too.
    assert dataclasses.replace(FOLLOWING, max_decoders=60.0).state_decode_s(tokens)[-1] == pytest.approx(0.0105)
    assert dataclasses.replace(FOLLOWING, decode_slope_s=1e-3).state_decode_s(tokens)[-1] == pytest.approx(0.01 + 1e-3 * 350)
    assert np.all(dataclasses.replace(FOLLOWING, decode_rate=0.0).state_decode_s(tokens) == 0.01)


def test_full_steps_that_hold_more_decoders_slow_the_tail_of_the_occupancy():
    """With the decoders following the slots φ(c) < 1, and the occupancy is still the birth-death
    chain's (deaths φ(min(n, c))/E[S]); a load at or past φ(c) has no level (None)."""
    speeds = slot_speeds(FOLLOWING)
    fixed = slot_speeds(dataclasses.replace(FOLLOWING, decode_rate=0.0))
    assert fixed[-1] == pytest.approx(1.0)
    assert np.all(speeds <= fixed) and speeds[-1] < 1.0  # one chunk a step holds no more than N
    full_dec = float(FOLLOWING.state_decode_s(np.array(450.0)))
    assert speeds[-1] == pytest.approx(450 * (1e-4 + 0.01 / 450) / (full_dec + 450 * 1e-4))
    r, mean_s, size, c = 0.7, 0.2, 600, FOLLOWING.servers
    death = np.array([0.0] + [speeds[min(n, c) - 1] / mean_s for n in range(1, size)])
    q = np.zeros((size, size))
    for n in range(size - 1):
        q[n, n + 1] = r / mean_s
        q[n + 1, n] = death[n + 1]
    q -= np.diag(q.sum(axis=1))
    pi = np.linalg.lstsq(np.vstack([q.T, np.ones(size)]), np.r_[np.zeros(size), 1.0], rcond=None)[0]
    below, blocked = occupancy(r, speeds)
    assert below == pytest.approx(pi[:c], abs=1e-9)
    assert blocked == pytest.approx(pi[c:].sum(), abs=1e-9)
    work, weight = np.array([0.1, 0.3]), np.array([0.5, 0.5])
    rate = speeds[-1] / 0.2 * 1.001  # r = λ·E[S] just past φ(c): full steps never clear it
    chunks = np.array([0.01]), np.array([1.0])
    assert capped_waits(rate, work, weight, 0.0, FOLLOWING, STEPS, COMPUTE, *chunks) is None
    assert capped_waits(rate / 1.002 * 0.999, work, weight, 0.0, FOLLOWING, STEPS, COMPUTE, *chunks) is not None


def test_the_stay_spread_counts_one_chunk_of_each_other_prompt_in_service():
    """Chunks of one cost δ and a fixed decode part: Z = K·δ, K = n others in service when admitted
    (P(n) for n < c) or c - 1 after a wait for a slot; with the decoders following the slots each
    state adds its decode part's rise above t_dec."""
    step, delta = SlotStep(100, 300, 0.01, 1e-4), 0.02
    spread = stay_spread(np.array([0.5, 0.3, 0.1]), 0.1, step, np.array([delta]), np.array([1.0]))
    assert spread.exceed(np.array([-1e-9, 0.5 * delta, 1.5 * delta, 2.5 * delta])) == pytest.approx([1.0, 0.5, 0.2, 0.0], abs=1e-9)
    assert spread.mean_s == pytest.approx((0.3 + 2 * 0.2) * delta)
    assert spread.level_s == pytest.approx([0.0, delta, *[2 * delta] * 7], abs=2 * spread.dt_s)  # mass split over two points
    assert spread.level_weight.sum() == pytest.approx(1.0)
    p_k = np.array([0.5, 0.3, 0.1, 0.0, 0.1])  # five slots: n = 0, 1, 2 on admission, 0.1 waited (K = 4)
    rising = stay_spread(np.array([0.5, 0.3, 0.1, 0.0, 0.0]), 0.1, FOLLOWING, np.array([delta]), np.array([1.0]))
    rise = FOLLOWING.state_decode_s(np.array([100.0, 200.0, 300.0, 400.0, 450.0])) - FOLLOWING.decode_s
    assert rise[-1] > rise[0] >= 0.0
    assert rising.mean_s == pytest.approx(float(np.dot(p_k, np.arange(5) * delta + rise)), rel=1e-9)


def test_a_capped_prompts_ttft_is_its_wait_plus_its_spread_stay(catalog):
    """P(W + H·F > x) for a capped cell against sampling W and Z independently from their grids
    (θ = 512 on the long-tail mix, 2 x H200, near saturation: both a wait and a spread)."""
    dep = make_deployment(catalog, model="llama-3.1-8b", gpu="h200", tp=2, kv_dtype="fp8", max_model_len=131072)
    dep = dataclasses.replace(dep, engine=dep.engine.model_copy(update={"long_prefill_token_threshold": 512}))
    from planner.workload.synth import synthetic_histogram
    prof = token_profile(synthetic_histogram("chat_long_tail", 50_000, seed=7), block_size=dep.block_size,
                         chunk_tokens=dep.engine.max_num_batched_tokens)
    rm = ReplicaModel(dep, prof, SLO((Band("all", 0, None),)))
    pt = rm.latency_at(rm.resident_for_rate(11.0, 1024.0))
    sp, wait = pt.spread, pt.waits[0]
    assert 0.01 < float(wait.survival(0.0)) < 0.5 and sp.mean_s > 0
    cell = int(np.flatnonzero((pt.cell_wait == 0) & (rm.latency.cells.prompt > 3000))[0])
    hold, a = pt.spread_hold_s[cell], pt.spread_own_step_s[cell]
    rng = np.random.default_rng(0)
    z = np.interp(rng.uniform(size=400_000), 1.0 - sp.survival, np.arange(sp.survival.size) * sp.dt_s)
    w = np.interp(rng.uniform(size=400_000), wait.cdf, np.arange(wait.cdf.size) * wait.dt_s, left=0.0)
    ttft = pt.own_s[cell] - hold + w + hold * (a + z) / (a + sp.mean_s)
    for q in (0.5, 0.9, 0.99):
        x = float(np.quantile(ttft, q))
        assert float(pt._capped_ttft_exceed(np.array([cell]), x)[0]) == pytest.approx(1.0 - q, abs=0.03 * (1 - q) + 0.003)
