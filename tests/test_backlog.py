"""planner.backlog: the decoders a backlog accumulates, and the wait read at the state it reaches."""

import itertools
import math

import numpy as np
import pytest

from planner.backlog import backlog_regime, backlog_wait, level_waits
from planner.prefill_wait import mg1_wait


def _t_dec(n):
    return 0.01 + 1e-4 * n  # seconds: a step that grows with the batch


def _regime(**over):
    args = {"rate_rps": 5.0, "resident": 20.0, "chunk_tokens": 8192.0, "decode_s": _t_dec, "mean_prefill_s": 0.1,
            "mean_new_tokens": 2048.0, "mean_decode_steps": 200.0, "cap_decoders": 1e9, "rate_at_cap_rps": 1e9}
    args.update(over)
    return backlog_regime(**args)


def test_decoders_tend_to_a_full_budget_a_step_over_a_prompt_times_the_decode_steps():
    b = _regime()
    n_b = 200.0 * 8192 / (2048 + 200)  # the fixed point of n = E[D]·(C - n)/E[p]
    assert b.decoders == pytest.approx(200.0 * (8192 - n_b) / 2048, rel=1e-12)
    assert b.decoders == pytest.approx(n_b, rel=1e-12)
    assert b.decode_s == pytest.approx(_t_dec(n_b), rel=1e-12)
    assert b.stretch == 1.0
    # τ = (n_b - N) / (1/E[S(N)] - N / (E[D]·t_b(N))), t_b a full step of the backlog
    service = 0.1 + 2048 / (8192 - 20) * _t_dec(20)
    full_step = _t_dec(20) + (8192 - 20) * 0.1 / 2048
    assert b.fill_s == pytest.approx((n_b - 20) / (1 / service - 20 / (200 * full_step)), rel=1e-12)
    assert b.load == pytest.approx(5.0 * (0.1 + 2048 / (8192 - n_b) * _t_dec(n_b)), rel=1e-12)


def test_the_cache_caps_the_decoders_and_its_turnover_stretches_the_service():
    b = _regime(cap_decoders=300.0, rate_at_cap_rps=7.0)
    assert b.decoders == 300.0
    service = 0.1 + 2048 / (8192 - 300) * _t_dec(300)
    assert b.stretch == pytest.approx(1 / (7.0 * service), rel=1e-12)  # λ(n_cap) admissions a second at most
    assert b.load == pytest.approx(5.0 / 7.0, rel=1e-12)  # the regime's load is λ / λ(n_cap)
    assert _regime(cap_decoders=300.0, rate_at_cap_rps=100.0).stretch == 1.0  # turnover faster than the prefill


def test_at_the_cache_cap_the_regime_is_reached_not_dropped():
    """Just below the cap the decoders reach it ever faster (τ -> 0) and its turnover stretches the
    service; at the cap itself the same regime holds from the start, so the wait does not drop
    back to the unstretched queue's there."""
    below = _regime(resident=300.0 * (1 - 1e-6), cap_decoders=300.0, rate_at_cap_rps=7.0)
    at = _regime(resident=300.0, cap_decoders=300.0, rate_at_cap_rps=7.0)
    assert below.fill_s < 1e-3 and at.fill_s == 0.0
    assert (at.decoders, at.decode_s, at.stretch, at.load) == (below.decoders, below.decode_s, below.stretch, below.load)
    assert _regime(resident=300.0, cap_decoders=300.0, rate_at_cap_rps=100.0) is None  # no stretch: the queue at N
    assert _regime(resident=400.0, cap_decoders=300.0, rate_at_cap_rps=7.0) is None  # above the cap: no regime at it


def test_with_a_small_budget_the_decoders_leave_prompts_the_rest_of_it():
    # TensorRT-LLM's interactive runs use 256-768 token budgets: reading the prompts' share at N
    # (C - N) would pile up decoders until the prompts get almost none of it, and call a load
    # the engine serves (MLPerf v5.1, bench/published.py) a queue that never clears.
    b = _regime(rate_rps=5.0, resident=80.0, chunk_tokens=256.0, mean_new_tokens=220.0, mean_decode_steps=290.0)
    assert b.decoders == pytest.approx(290.0 * 256 / (220 + 290), rel=1e-12)
    assert 256 - b.decoders == pytest.approx(b.decoders * 220 / 290, rel=1e-12)  # prompts' tokens = what decoders leave
    assert b.load < 1.0


def test_no_backlog_regime_where_decoders_do_not_pile_up():
    assert _regime(resident=900.0) is None  # already more decoders than a backlog holds
    assert _regime(rate_rps=0.0) is None
    assert _regime(mean_decode_steps=0.0) is None


def _exponential(mean_s: float, cells: int = 4000) -> np.ndarray:
    """An exponential service as equally weighted quantiles."""
    return -mean_s * np.log1p(-(np.arange(cells) + 0.5) / cells)


def test_each_level_is_the_queue_between_the_two_services():
    base = np.array([0.05, 0.2, 4.0])
    regime = np.array([0.08, 0.3, 5.0])
    weight = np.array([0.7, 0.28, 0.02])
    rho, cond_mean, clears = level_waits(0.5, base, regime, weight, (0.0, 0.5, 1.0))
    for phi, r, c, ok in zip((0.0, 0.5, 1.0), rho, cond_mean, clears, strict=True):
        s = base + phi * (regime - base)
        assert r == pytest.approx(0.5 * np.dot(weight, s), rel=1e-12)
        # Pollaczek-Khinchine: E[W] = λE[S²] / 2(1 - ρ), and P(W > 0) = ρ
        assert c == pytest.approx(0.5 * np.dot(weight, s**2) / (2 * (1 - r)) / r, rel=1e-12)
        assert ok
    rho, cond_mean, clears = level_waits(5.0, base, regime, weight, (0.0, 1.0))  # ρ 0.855 and 1.2
    assert clears.tolist() == [True, False] and cond_mean[1] == math.inf


def test_short_waits_are_the_queue_at_n_and_the_tail_the_regime_rescaled():
    service = np.array([0.05, 0.2, 4.0])
    weight = np.array([0.7, 0.28, 0.02])
    rate = 2.0
    base = mg1_wait(rate, service, weight)
    regime = service * 1.3
    fill_s = 5.0
    w = backlog_wait(base, rate, service, regime, weight, fill_s)
    assert w.survival(0.0) == pytest.approx(base.survival(0.0), abs=1e-9)  # φ(0) = 0: the queue at N
    rho, cond_mean, _ = level_waits(rate, service, regime, weight, (1.0,))
    shrink = base.mean_s / base.load / cond_mean[0]
    x = np.array([fill_s, 2 * fill_s, 4 * fill_s])  # φ = 1: the regime, the base's wait rescaled
    assert w.survival(x) == pytest.approx(rho[0] / base.load * base.survival(x * shrink), rel=2e-2, abs=1e-6)
    assert np.all(np.diff(w.survival(np.linspace(0, 60, 400))) <= 1e-12)  # a survival function
    assert base.survival(2 * fill_s) < w.survival(2 * fill_s)


def test_the_rescaled_wait_matches_the_regimes_own_transform_for_exponential_services():
    # M/M/1: the wait of those that wait is exponential, so rescaling the base's wait to the regime's
    # P(W > 0) and conditional mean gives the regime's wait, here computed by its own transform.
    service = _exponential(0.1)
    weight = np.ones(service.size)
    rate = 5.0
    base = mg1_wait(rate, service, weight)
    w = backlog_wait(base, rate, service, 1.3 * service, weight, 1.0)
    regime = mg1_wait(rate, 1.3 * service, weight)
    x = np.array([1.5, 2.0, 3.0])  # past the fill time: the regime
    assert w.survival(x) == pytest.approx(regime.survival(x), rel=3e-2)


def test_a_regime_that_never_clears_leaves_no_stable_wait():
    service = np.array([0.1, 1.0])
    weight = np.array([0.5, 0.5])
    base = mg1_wait(1.0, service, weight)
    assert backlog_wait(base, 1.0, service, service * 2.0, weight, 2.0) is None  # ρ_b = 1.1
    assert backlog_wait(base, 1.0, service, service * 1.5, weight, 2.0) is not None  # ρ_b = 0.825


def test_the_wait_grid_has_no_half_cell_bias():
    # M/M/1 at ρ = 0.9: p99 = ln(ρ / 0.01)·E[S] / (1 - ρ); leaving each equilibrium cell's mass at its
    # left end put it 5% low.
    service = _exponential(0.05)
    rate = 0.9 / float(service.mean())
    w = mg1_wait(rate, service, np.ones(service.size))
    exact = math.log(0.9 / 0.01) * float(service.mean()) / 0.1
    assert w.quantile(0.99) == pytest.approx(exact, rel=0.02)


def test_the_wait_levels_are_interval_means_that_keep_the_mean():
    service = np.array([0.05, 0.2, 4.0])
    weight = np.array([0.7, 0.28, 0.02])
    w = mg1_wait(2.0, service, weight)
    values, probs = w.levels()
    grid = np.arange(w.cdf.size) * w.dt_s
    assert float(np.dot(values, probs)) == pytest.approx(float(np.trapezoid(1.0 - w.cdf, grid)), rel=1e-9)
    assert np.all(np.diff(values) >= 0)
    # each interval's mean lies between the quantiles at its edges
    edges = np.concatenate([[0.0], np.cumsum(probs)])
    for (a, b), v in zip(itertools.pairwise(edges), values, strict=True):
        assert w.quantile(a) - w.dt_s <= v <= w.quantile(min(b, 1.0)) + w.dt_s
