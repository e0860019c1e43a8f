"""Order statistics of grouped integers: quantiles and maxima from counts, ranges and exact sums.

A histogram knows, for each group of requests, how many there are, an integer range their
lengths must lie in, and (for some groups) the exact sum and sum of squares of the lengths.
This module turns that into numpy's quantiles ('linear' definition) and a maximum, each
order statistic placed inside the range of the group that holds it, so every result is
within that group's range width of the exact value. It also does the exact integer
arithmetic on the sums (int64 where it cannot wrap, Python integers where it could).
Nothing here knows the bins: planner.histogram builds the groups.
"""

from __future__ import annotations

import numpy as np

_INT64_MAX = np.iinfo(np.int64).max


def exact_total(values: np.ndarray) -> int:
    """The exact sum of an int64 array, as a Python int."""
    return int(exact_group_sums(np.zeros(len(values), np.intp), values, 1)[0])


def exact_group_sums(groups: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Σ of integer `values` (int64, or Python integers in an object array) per group: int64
    where every sum stays below 2**62, which float estimates tell, else Python integers (an
    object array), which cannot wrap."""
    values = np.asarray(values)
    estimate = np.zeros(n_groups)
    np.add.at(estimate, groups, np.abs(values.astype(np.float64)))
    dtype = np.int64 if (estimate < 2.0**62).all() and values.dtype != object else object
    out = np.zeros(n_groups, dtype)
    np.add.at(out, groups, values.astype(dtype) if values.dtype == object else values.astype(np.int64).astype(dtype))
    return out


def exact_sum(*terms: np.ndarray) -> np.ndarray:
    """The element-wise sum of int64 arrays of one length, exact (see `exact_group_sums`)."""
    n = len(terms[0])
    return exact_group_sums(np.tile(np.arange(n), len(terms)), np.concatenate(terms), n)


def passes_int64(total: np.ndarray) -> bool:
    """Whether any of `exact_group_sums`' results lies outside the int64 range."""
    return total.dtype == object and any(abs(v) > _INT64_MAX for v in total)


def _n_squared_variance(count: np.ndarray, s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
    """n·Σx² − (Σx)² per group, computed exactly in integers, returned as float64.

    In floats it cancels, and a group of identical lengths must come out as exactly 0.
    int64 is exact where both products stay below 2**62; float estimates of the products,
    within about 1e-15 of them, pick those groups. Python integers take the rest (and any
    group whose sums are already Python integers, from `exact_sum`).
    """
    n_f, s1_f, s2_f = (np.asarray(a, np.float64) for a in (count, s1, s2))
    fits = (np.abs(n_f * s2_f) < 2.0**62) & (s1_f * s1_f < 2.0**62)
    if any(np.asarray(a).dtype == object for a in (count, s1, s2)):
        fits[:] = False
    out = np.empty(n_f.size, np.float64)
    if fits.any():
        c, a, b = (np.asarray(x[fits], np.int64) for x in (count, s1, s2))
        out[fits] = c * b - a * a
    rest = np.flatnonzero(~fits)
    out[rest] = [int(count[i]) * int(s2[i]) - int(s1[i]) ** 2 for i in rest]
    return out


def samuelson_range(
    count: np.ndarray, s1: np.ndarray, s2: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each group's integer range [lo, hi] narrowed by its exact sums Σx (s1) and Σx² (s2).

    Samuelson's inequality: each of n values lies within sd·sqrt(n − 1) of their mean
    (Samuelson 1968). A group of one value, or of identical values, narrows to that value.
    """
    n_sq_var = _n_squared_variance(count, s1, s2)
    count = np.asarray(count, np.float64)  # exact sums done; what follows is float arithmetic
    n = np.maximum(count, 1.0)
    mean = np.asarray(s1, np.float64) / n
    reach = np.sqrt(np.maximum(n_sq_var, 0.0) * np.maximum(count - 1, 0.0)) / n
    # absorbs float rounding of the bound (a few ulps, 1e-16 each), not its mathematics; small
    # enough that mean + slack never floors to the next integer (lengths are at most ~3e9:
    # a cell's sum of squares is int64), so a group of identical lengths stays exact
    slack = 1e-12 * np.maximum(mean + reach, 1.0)
    lo = np.maximum(lo, np.ceil(mean - reach - slack))
    hi = np.maximum(np.minimum(hi, np.floor(mean + reach + slack)), lo)
    return lo, hi


def _order_statistics(count: np.ndarray, lo: np.ndarray, hi: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Invert the mixture CDF of the groups (each uniform on [lo, hi]; a point mass if lo == hi)
    at `ranks` (rank k + 0.5 places the k-th smallest value, 0-based).

    With disjoint groups the k-th smallest value's group is known from the counts, and the
    result lies within that group's [lo, hi]."""
    points = np.unique(np.concatenate([lo, hi]))
    spread = hi > lo
    density = np.zeros(count.size)
    density[spread] = count[spread] / (hi[spread] - lo[spread])
    slope_change = np.zeros(points.size)
    np.add.at(slope_change, np.searchsorted(points, lo[spread]), density[spread])
    np.add.at(slope_change, np.searchsorted(points, hi[spread]), -density[spread])
    jump = np.zeros(points.size)
    np.add.at(jump, np.searchsorted(points, lo[~spread]), count[~spread])
    slope = np.cumsum(slope_change)  # on (points[k], points[k+1])
    rise = np.concatenate([[0.0], slope[:-1] * np.diff(points)])
    cdf = np.cumsum(rise + jump)  # right-continuous, at each point
    k = np.minimum(np.searchsorted(cdf, ranks, side="left"), points.size - 1)
    prev = np.maximum(k - 1, 0)
    on_slope = (k > 0) & (ranks <= cdf[k] - jump[k]) & (slope[prev] > 0)
    along = np.where(on_slope, (ranks - cdf[prev]) / np.where(on_slope, slope[prev], 1.0), 0.0)
    return np.where(on_slope, points[prev] + along, points[k])


def max_of_groups(hi: np.ndarray) -> int:
    """The largest value: the top of the highest range (exact when that range is one value)."""
    if not hi.size:
        raise ValueError("an empty histogram has no maximum")
    return int(hi.max())


def quantiles_of_groups(count: np.ndarray, lo: np.ndarray, hi: np.ndarray, qs) -> np.ndarray:
    """numpy's 'linear' quantiles of the values the groups hold (NaN for no values).

    Position h = q·(n − 1) lies between two order statistics, each placed in its group's
    range; for disjoint ranges of relative width at most w (width / lowest value), the
    result is within w of numpy's on the raw values, since interpolation keeps the bound.
    """
    q = np.atleast_1d(np.asarray(qs, dtype=np.float64))
    if ((q < 0) | (q > 1)).any():
        raise ValueError(f"quantiles must lie in [0, 1], got {q.tolist()}")
    count = np.asarray(count, np.float64)
    n = int(count.sum())
    if n == 0:
        return np.full(q.shape, np.nan)
    h = q * (n - 1)
    below = np.floor(h)
    x_below = _order_statistics(count, lo, hi, below + 0.5)
    x_above = _order_statistics(count, lo, hi, np.minimum(below + 1, n - 1) + 0.5)
    return x_below + (h - below) * (x_above - x_below)
