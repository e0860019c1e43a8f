"""planner.backlog: the decoders a backlog accumulates, and the wait read at the state it reaches."""

import math

import numpy as np
import pytest

from planner.backlog import BACKLOG_LEVELS, backlog_regime, backlog_wait
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
    n_b = 200.0 * (8192 - 20) / 2048  # E[D]·C'/E[p]
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


def test_no_backlog_regime_where_decoders_do_not_pile_up():
    assert _regime(resident=900.0) is None  # already more decoders than a backlog holds
    assert _regime(rate_rps=0.0) is None
    assert _regime(mean_decode_steps=0.0) is None


def test_short_waits_are_the_queue_at_n_and_the_tail_the_regime():
    service = np.array([0.05, 0.2, 4.0])
    weight = np.array([0.7, 0.28, 0.02])
    base = mg1_wait(2.0, service, weight, 30.0)
    regime_service = service * 1.3
    waits = [base] + [mg1_wait(2.0, service + s * (regime_service - service), weight, 30.0) for s in BACKLOG_LEVELS]
    fill_s = 5.0
    w = backlog_wait(waits, fill_s)
    x = np.array([0.0, 0.01, fill_s, 2 * fill_s, 20.0])
    s = w.survival(x)
    assert s[0] == pytest.approx(base.survival(0.0), abs=2e-3)  # φ(0) = 0: the queue at N
    assert s[2:] == pytest.approx(waits[-1].survival(x[2:]), abs=2e-3)  # φ = 1 from fill_s on: the regime
    assert np.all(np.diff(w.survival(np.linspace(0, 30, 200))) <= 1e-12)  # a survival function
    assert base.quantile(0.99) < w.quantile(0.99) <= waits[-1].quantile(0.99) + w.dt_s


def test_a_regime_that_never_clears_waits_past_every_level():
    service = np.array([0.1, 1.0])
    weight = np.array([0.5, 0.5])
    base = mg1_wait(1.0, service, weight, 10.0)
    w = backlog_wait([base, None, None, None], 2.0)
    assert w.mean_s == math.inf and w.load == 1.0
    assert w.survival(2.0) == pytest.approx(1.0)
