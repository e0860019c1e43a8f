"""The latency model's short paths give the same floats as its general forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.backlog import backlog_wait, regime_service_s
from planner.capacity import ReplicaModel
from planner.deployment import make_deployment
from planner.histogram import Histogram
from planner.latency import _M_GRID, _Y_GRID, _table_survival
from planner.paged import token_profile
from planner.prefill_wait import mg1_wait
from planner.targets import SLO, Band, Target


@pytest.fixture(scope="module")
def long_tail(catalog) -> ReplicaModel:
    """A long-tail mix (2% of prompts 30k-100k tokens) under two bands, with a backlog regime."""
    dep = make_deployment(catalog, model="llama-3.1-8b", gpu="h100-sxm", max_model_len=131072)
    rng = np.random.default_rng(3)
    p = np.r_[rng.integers(50, 8000, 4900), rng.integers(30_000, 100_000, 100)]
    o = rng.integers(2, 900, p.size)
    slo = SLO((Band("short", 0, 8192, Target("p99", 2.0), Target("p99", 0.05)),
               Band("long", 8192, None, Target("p99", 30.0), Target("p99", 0.08))))
    return ReplicaModel(dep, token_profile(Histogram.from_arrays(p, o)), slo)


def _reference_survival(t, bucket, m, y_flops):
    """_table_survival as first written: every argument a full [cells, levels] array."""
    lm = np.log(np.maximum(m, 1e-300) / _M_GRID[0]) / math.log(_M_GRID[1] / _M_GRID[0])
    i = np.clip(np.floor(lm).astype(np.int64), 0, _M_GRID.size - 2)
    frac = np.clip(lm - i, 0.0, 1.0)

    def row(j):
        k = np.clip(y_flops / t.dy_flops[bucket, j], 0, _Y_GRID).astype(np.int64)
        return np.take(t.survival, (bucket * _M_GRID.size + j) * (_Y_GRID + 1) + k)

    value = row(i) * (1 - frac) + row(i + 1) * frac
    scale = np.where(m < _M_GRID[0], m / _M_GRID[0], 1.0)
    return np.where(y_flops <= 0, 1.0, value * scale)


@pytest.mark.parametrize(("low_m", "non_positive_y"), [(False, False), (True, False), (False, True), (True, True)])
def test_table_survival_per_cell_arguments_equal_the_full_grid(long_tail, low_m, non_positive_y):
    """Bucket and threshold given once per cell ([cells, 1]) read the tables exactly as full arrays
    do, with expected arrivals below the grid (scaled) or not, and thresholds at or below zero or not."""
    cells, _, bucket, tables, _, _ = long_tail.latency.tpot_static(0)
    rng = np.random.default_rng(7)
    levels = 9
    m = 10 ** rng.uniform(-2 if not low_m else -6, 5, (cells.size, levels))
    y = 10 ** rng.uniform(9, 15, (cells.size, 1))
    if non_positive_y:
        y[::5] = 0.0
        y[1::7] = -1e12
    got = _table_survival(tables, bucket[:, None], m, y)
    full = m.shape
    want = _reference_survival(tables, np.broadcast_to(bucket[:, None], full), m, np.broadcast_to(y, full))
    assert got.shape == want.shape
    assert np.array_equal(got, want)
    assert (m.min() < _M_GRID[0]) == low_m  # the low case does reach below the grid
    assert bool((y <= 0).any()) == non_positive_y


def test_tpot_without_a_cap_equals_the_general_per_wait_form(long_tail):
    """Without θ every cell sees the one FCFS wait; _tpot_terms' short path for that gives the same
    TPOT shares and means as its general form (one wait per cell, window factors and lookback)."""
    rm = long_tail
    n = rm.resident_for_rate(0.6 * rm.rate(rm.batch_bound("expected", 0.99)), 1024)
    pt = rm.latency_at(n)
    assert pt.spread is None and len(pt.waits) == 1 and rm.backlog(n) is not None
    limits = [pt.t_dec * f for f in (0.9, 1.05, 1.3, 2.0, 4.0)]
    short = [[pt.tpot_exceed(b, x) for x in limits] + [pt.tpot_mean(b)] for b in (0, 1)]
    pt.waits = (pt.wait, pt.wait)  # the general path: each cell's wait picked by cell_wait (all 0)
    general = [[pt.tpot_exceed(b, x) for x in limits] + [pt.tpot_mean(b)] for b in (0, 1)]
    assert short == general
    assert 0.0 < short[0][1] < 1.0  # a limit whose share is neither none nor all: the tables were read


def _fresh_fcfs_wait(rm: ReplicaModel, n: float):
    """The FCFS wait at n computed from scratch: mg1_wait, read in the backlog regime."""
    lat = rm.latency
    rate, t_dec, backlog = rm.rate(n), rm.decode_s(n), rm.backlog(n)
    service = lat.prefill_s + lat.cells.new_tokens / max(lat.chunk_tokens - n, 1.0) * t_dec
    base = mg1_wait(rate, service, lat.cells.weight)
    regime = regime_service_s(lat.prefill_s, lat.cells.new_tokens, lat.chunk_tokens, backlog)
    return backlog_wait(base, rate, service, regime, lat.cells.weight, backlog.fill_s)


def _bands(short_ttft_s: float, long_ttft_s: float) -> SLO:
    return SLO((Band("short", 0, 8192, Target("p99", short_ttft_s), Target("p99", 0.05)),
                Band("long", 8192, None, Target("p99", long_ttft_s), Target("p99", 0.08))))


def test_a_wait_remembered_for_other_targets_equals_a_fresh_one(long_tail):
    """Copies of a model for other targets share the FCFS waits (LatencyModel.fcfs_wait): no target
    enters a wait, and a remembered wait is the one a fresh computation gives."""
    n = long_tail.resident_for_rate(0.9 * long_tail.rate(long_tail.batch_bound("expected", 0.99)), 1024)
    first = long_tail.with_slo(_bands(0.5, 1.0)).latency_at(n).wait
    for short_s, long_s in ((0.25, 0.75), (2.0, 40.0), (2.0, 3600.0)):
        other = long_tail.with_slo(_bands(short_s, long_s))
        again = other.latency_at(n).wait
        assert again is first
        fresh = _fresh_fcfs_wait(other, n)
        assert np.array_equal(again.cdf, fresh.cdf)
        assert (again.dt_s, again.mean_s, again.load) == (fresh.dt_s, fresh.mean_s, fresh.load)


def test_a_lax_target_on_one_band_changes_no_prediction(long_tail):
    """The latency predicted at an operating point is the replica's, whatever the targets: a TTFT
    limit of an hour on the long band leaves every band's p99 TTFT and TPOT as they were. (The
    waiting-time grid once spanned twice the longest limit: an outside probe's long band at 600 s
    read the short band's p99 TTFT at 1.9 s where 15 s read 0.8 s, and planned 31 GPUs for 2.)"""
    n = long_tail.resident_for_rate(0.9 * long_tail.rate(long_tail.batch_bound("expected", 0.99)), 1024)
    strict, lax = long_tail.with_slo(_bands(2.0, 15.0)), long_tail.with_slo(_bands(2.0, 3600.0))
    a, b = strict.latency_at(n), lax.latency_at(n)
    for band in (0, 1):
        for kind in ("ttft", "tpot"):
            assert a.value(band, kind, "p99") == b.value(band, kind, "p99")
