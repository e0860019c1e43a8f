"""The planning peak rate: quantile or max of per-minute rates, or explicit, times growth."""

from __future__ import annotations

import numpy as np
import pytest

from planner.errors import InputError
from planner.histogram import Histogram
from planner.workload.peaks import mean_rate_rps, peak_rate_rps, per_minute_counts


@pytest.fixture
def hist():
    # whole minutes 1-3: 120 arrivals, none, 60; minutes 0 and 4 are the log's partial ends (30 and 15)
    seconds = np.concatenate([np.linspace(30, 59, 30), np.linspace(60, 119, 120), np.linspace(180, 239, 60),
                              np.linspace(240, 254, 15)])
    return Histogram.from_arrays(np.full(225, 100), np.full(225, 10), seconds)


def test_quiet_minutes_count_as_zero(hist):
    assert per_minute_counts(hist).tolist() == [30, 120, 0, 60, 15]
    assert mean_rate_rps(hist) == pytest.approx(180 / 180)


def test_methods_and_growth(hist):
    assert peak_rate_rps(hist, "max") == 2.0
    assert peak_rate_rps(hist, "max", growth=1.5) == 3.0
    assert peak_rate_rps(hist, "quantile", quantile=0.5) == 1.0  # median of 2, 0, 1 req/s
    assert peak_rate_rps(hist, "quantile", quantile=0.99) == pytest.approx(
        np.quantile([120, 0, 60], 0.99) / 60
    )
    assert peak_rate_rps(None, "explicit", explicit_rps=40, growth=1.25) == 50.0
    assert peak_rate_rps([60, 120, 90, 30], "max") == 2.0  # plain per-minute counts


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"method": "peak"}, "unknown peak-rate method"),
        ({"method": "quantile", "quantile": 0}, "peak quantile"),
        ({"method": "quantile", "quantile": 1.5}, "peak quantile"),
        ({"method": "max", "growth": 0}, "growth factor"),
        ({"method": "max", "growth": -1}, "growth factor"),
        ({"method": "explicit"}, "needs a rate"),
        ({"method": "explicit", "explicit_rps": 0}, "explicit peak rate"),
        ({"method": "explicit", "explicit_rps": -3}, "explicit peak rate"),
    ],
)
def test_bad_parameters_are_input_errors(hist, args, message):
    with pytest.raises(InputError, match=message):
        peak_rate_rps(hist, **args)


def test_no_times_negative_counts_and_zero_rates_are_refused():
    untimed = Histogram.from_arrays(np.array([1]), np.array([1]))
    with pytest.raises(InputError, match="needs arrival times"):
        peak_rate_rps(untimed, "max")
    with pytest.raises(InputError, match=">= 0"):
        peak_rate_rps([5, -1], "max")
    with pytest.raises(InputError, match="0 req/s"):
        peak_rate_rps([5, 0, 0, 0, 5], "quantile", quantile=0.5)
    with pytest.raises(InputError, match=r"peak rate is 0 req/s: the 0.5 quantile of 3 whole minutes has no arrival "
                                         r"\(arrivals fall in 1 of them\); use a higher quantile or method 'max'"):
        peak_rate_rps([5, 0, 0, 60, 5], "quantile", quantile=0.5)
    # with method max, no quantile to raise: the whole minutes hold no arrival at all
    with pytest.raises(InputError, match=r"peak rate is 0 req/s: none of the log's 3 whole minutes has an arrival "
                                         r"\(the partial first and last minutes are not measured\)"):
        peak_rate_rps([5, 0, 0, 0, 5], "max")


@pytest.mark.parametrize("counts", [[20000], [10, 60, 3]])
def test_a_log_of_fewer_than_two_whole_minutes_has_no_measured_peak(counts):
    """20,000 requests in 20 s read as one minute would be 333 req/s, not 1,000: no rate is measured."""
    with pytest.raises(InputError, match=r"the arrivals span \d minute\(s\) of the clock, too short to measure a "
                                         r"per-minute peak"):
        peak_rate_rps(counts, "quantile", quantile=0.99)
    assert mean_rate_rps(counts) is None


def test_partial_first_and_last_minutes_are_left_out_of_rates():
    """A log starts and ends within a minute: counting those as full minutes understates the rate."""
    from planner.workload.peaks import mean_rate_rps, minute_rate_quantile_rps

    counts = [10, 60, 60, 60, 5]  # 10 s of traffic in the first minute, 5 s in the last
    assert mean_rate_rps(counts) == pytest.approx(1.0)
    assert minute_rate_quantile_rps(counts, 0.5) == pytest.approx(1.0)
