"""The prefill queue under vLLM's long-prefill cap θ (planner.prefill_cap)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from planner.capacity import ReplicaModel
from planner.deployment import make_deployment
from planner.histogram import Histogram
from planner.paged import token_profile
from planner.prefill_cap import CappedRegime, _residual_min_s, capped_waits
from planner.requests import sample_requests
from planner.simulate import simulate_replica
from planner.targets import SLO, Band, Target


def test_the_mean_residual_is_the_equilibrium_mean():
    """One residual service: E[R] = E[S²] / 2E[S]."""
    s = np.array([1.0, 4.0, 10.0])
    w = np.array([0.5, 0.3, 0.2])
    assert _residual_min_s(s, w, 1) == pytest.approx(np.dot(w, s**2) / (2 * np.dot(w, s)))


def test_the_least_of_c_residuals_of_a_fixed_service():
    """Service a: residuals are uniform on [0, a], their least of c has mean a / (c + 1)."""
    for c in (1, 2, 4, 7):
        assert _residual_min_s(np.array([3.0]), np.array([1.0]), c) == pytest.approx(3.0 / (c + 1))


def test_capped_waits_follow_the_geometric_occupancy():
    """At load r with c in service a capped prompt waits with probability r^c, a mean of
    r^c·d / (1 - r); with negligible chunks, a short prompt waits the same."""
    rate, work = 2.0, np.array([0.2, 0.4])
    weight = np.array([0.5, 0.5])
    r = rate * 0.3
    long_wait, short_wait = capped_waits(rate, work, weight, 0.0, 3, np.array([1e-9]), np.array([1.0]), 10.0)
    assert float(long_wait.survival(1e-9)) == pytest.approx(r**3, rel=1e-3)
    gap = 3 * _residual_min_s(work, weight, 3)
    assert long_wait.mean_s == pytest.approx(r**3 * gap / (1 - r))
    grid_mean = float(np.sum(1.0 - short_wait.cdf) * short_wait.dt_s)
    assert grid_mean == pytest.approx(long_wait.mean_s, rel=0.02)
    assert capped_waits(4.0, work, weight, 0.0, 3, np.array([0.01]), np.array([1.0]), 10.0) is None  # r >= 1


def test_a_backlog_regime_equal_to_the_queue_at_n_changes_nothing():
    """Read at the state a wait reaches, a queue whose regime is itself keeps its waits."""
    rate, work, weight = 2.0, np.array([0.2, 0.4]), np.array([0.5, 0.5])
    args = (rate, work, weight, 0.1, 3, np.array([0.01, 0.03]), np.array([1.0, 2.0]), 10.0)
    plain = capped_waits(*args)
    read = capped_waits(*args, CappedRegime(work, 0.1, 3, 5.0))
    for a, b in zip(plain, read, strict=True):
        assert b.dt_s == pytest.approx(a.dt_s)
        assert np.allclose(b.cdf, a.cdf, atol=1e-6)
        assert b.mean_s == pytest.approx(a.mean_s, rel=1e-3)


def test_a_long_wait_is_read_at_the_backlog_regime():
    """Past τ the capped prompt's wait is the regime's queue's: slower works, a heavier short load and
    one slot fewer give r_b^c_b·exp(-(1 - r_b)·x / d_b); before τ it lies between N's and the regime's;
    a regime whose queue never clears makes the point unstable."""
    rate, work, weight = 2.0, np.array([0.2, 0.4]), np.array([0.5, 0.5])
    slow = work * 1.25
    regime = CappedRegime(slow, 0.05, 2, 4.0)
    long_wait, _ = capped_waits(rate, work, weight, 0.0, 3, np.array([1e-9]), np.array([1.0]), 30.0, regime)
    r_b = rate * 0.375 / 0.95
    d_b = 2 * _residual_min_s(slow, weight, 2) / 0.95
    for x in (4.0, 6.0, 9.0):
        assert float(long_wait.survival(x)) == pytest.approx(r_b**2 * np.exp(-(1 - r_b) * x / d_b), rel=2e-3)
    r, d = rate * 0.3, 3 * _residual_min_s(work, weight, 3)
    at_n = r**3 * np.exp(-(1 - r) * 2.0 / d)
    assert at_n < float(long_wait.survival(2.0)) < r_b**2 * np.exp(-(1 - r_b) * 2.0 / d_b)
    assert capped_waits(rate, work, weight, 0.0, 3, np.array([1e-9]), np.array([1.0]), 30.0,
                        CappedRegime(work * 2.0, 0.0, 3, 4.0)) is None  # r_b = 1.2


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
