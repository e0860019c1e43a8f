"""Synthetic workloads: deterministic per seed, the requested long-context tail, Poisson arrivals."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from planner.errors import InputError
from planner.histogram import Histogram
from planner.workload.synth import (
    DISTRIBUTIONS,
    distribution,
    generate,
    synthetic_histogram,
    tail_share_above,
)


def test_same_seed_same_requests_other_seed_other_requests():
    a, b, c = (generate("chat_long_tail", 5_000, seed=s) for s in (7, 7, 8))
    for name in ("prompt_tokens", "output_tokens", "timestamp_ms"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.prompt_tokens, c.prompt_tokens)
    assert synthetic_histogram("chat_long_tail", 5_000, seed=7) == a.histogram()


def test_the_long_context_tail_has_the_requested_share_within_sampling_error():
    n = 50_000
    log = generate("chat_long_tail", n, seed=1)
    share = tail_share_above(log, 32_768)
    sd = np.sqrt(0.02 * 0.98 / n)
    assert abs(share - 0.02) < 4 * sd
    total = log.prompt_tokens + log.output_tokens
    assert total.max() <= 131_072
    assert Histogram.from_arrays(log.prompt_tokens, log.output_tokens).share_above(32_768) == share
    wider = generate(replace(distribution("chat"), tail_share=0.10), n, seed=2)
    assert abs(tail_share_above(wider, 32_768) - 0.10) < 4 * np.sqrt(0.1 * 0.9 / n)


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_every_distribution_respects_its_bounds(name):
    model = DISTRIBUTIONS[name]
    log = generate(name, 20_000, seed=3)
    total = log.prompt_tokens + log.output_tokens
    assert log.prompt_tokens.min() >= 1 and log.output_tokens.min() >= 1
    body = total <= model.max_total
    assert body.mean() >= 1 - model.tail_share - 0.01
    assert total.max() <= max(model.max_total, model.tail_max if model.tail_share else 0)
    assert model.source


def test_arrivals_are_poisson_at_the_rate():
    log = generate("chat", 20_000, seed=4, rate_rps=10.0)
    gaps_s = np.diff(log.timestamp_ms) / 1000
    assert np.all(gaps_s >= 0)
    assert gaps_s.mean() == pytest.approx(0.1, rel=0.03)
    assert np.std(gaps_s) == pytest.approx(0.1, rel=0.05)  # exponential: sd = mean


def test_unknown_names_and_bad_parameters_are_input_errors():
    with pytest.raises(InputError, match="did you mean 'chat'"):
        distribution("chatt")
    with pytest.raises(InputError, match="tail share"):
        replace(distribution("chat"), tail_share=1.5)
    with pytest.raises(InputError, match="arrival rate"):
        generate("chat", 10, seed=1, rate_rps=0)
