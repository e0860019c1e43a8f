"""The root of an increasing function on a bracket, without loading scipy.optimize, and the
largest point of a geometric grid where an increasing margin still holds (a latency bound).

scipy.optimize costs about half a second to import, more than a whole plan's root finding;
every root the planner needs is of a monotone function on a known bracket, where the
Illinois variant of regula falsi (Dowell & Jarratt, BIT 1971) converges superlinearly: halving
the weight of an end that stays put keeps the bracket closing from both sides. On the latency
bounds' integer grid, where every evaluation is a latency point, the Anderson-Björck variant
(BIT 1973) scales that weight by how far the new point moved the function instead of halving it.
"""

from __future__ import annotations

import math
from collections.abc import Callable


def increasing_root(f: Callable[[float], float], lo: float, hi: float, *, xtol: float = 1e-9,
                    rtol: float = 1e-12, max_iter: int = 200, f_lo: float | None = None,
                    f_hi: float | None = None) -> float:
    """x in [lo, hi] with f(x) = 0, for f increasing with f(lo) <= 0 <= f(hi), to within
    xtol + rtol·|x| (brentq's tolerance). f_lo, f_hi: f at the ends, when the caller has them."""
    f_lo = f(lo) if f_lo is None else f_lo
    f_hi = f(hi) if f_hi is None else f_hi
    _check_bracket(lo, hi, f_lo, f_hi)
    if f_lo == 0:
        return lo
    if f_hi == 0:
        return hi
    side = 0
    for _ in range(max_iter):
        if hi - lo <= xtol + rtol * abs(lo):
            break
        x = _interpolated(lo, hi, f_lo, f_hi)
        if not lo < x < hi:  # degenerate interpolation: bisect
            x = 0.5 * (lo + hi)
        fx = f(x)
        if fx <= 0:
            if fx == 0:
                return x
            lo, f_lo = x, fx
            if side == -1:
                f_hi /= 2
            side = -1
        else:
            hi, f_hi = x, fx
            if side == 1:
                f_lo /= 2
            side = 1
    return 0.5 * (lo + hi)


def largest_holding(f: Callable[[int], float], lo: int, hi: int, f_lo: float, f_hi: float) -> int:
    """The largest integer k in [lo, hi) with f(k) <= 0, for f increasing with f(lo) <= 0 < f(hi),
    every point tried an integer: regula falsi with the Anderson-Björck weight (Anderson & Björck,
    BIT 13, 1973). When an end stays put a second time its value is scaled by 1 - f(new) / f(old)
    of the end that moved (by 1/2 where that is not positive), not halved as Illinois does: on the
    full candidate set of the 128k rollout the latency bounds' searches took 1,042 points against
    Illinois' 1,146, each point the same and so each bound."""
    _check_bracket(lo, hi, f_lo, f_hi)
    side = 0
    while hi - lo > 1:
        x = min(max(round(_interpolated(lo, hi, f_lo, f_hi)), lo + 1), hi - 1)
        fx = f(x)
        if fx <= 0:
            if side == -1:
                m = 1.0 - fx / f_lo if f_lo < 0 else 0.0
                f_hi *= m if m > 0 else 0.5
            lo, f_lo, side = x, fx, -1
        else:
            if side == 1:
                m = 1.0 - fx / f_hi
                f_lo *= m if m > 0 else 0.5
            hi, f_hi, side = x, fx, 1
    return lo


def _check_bracket(lo: float, hi: float, f_lo: float, f_hi: float) -> None:
    if f_lo > 0 or f_hi < 0:
        raise ValueError(f"f does not change sign on [{lo}, {hi}]: f(lo) = {f_lo}, f(hi) = {f_hi}")


def _interpolated(lo: float, hi: float, f_lo: float, f_hi: float) -> float:
    """The regula falsi point of the bracket. An infinite end (a latency target past the
    token-budget ceiling, where the prefill queue never empties) gives no slope: interpolating
    would creep from the other end one step at a time and run out of iterations far below the
    root, so the bracket is bisected until both ends are finite."""
    if math.isfinite(f_lo) and math.isfinite(f_hi) and f_hi > f_lo:
        return lo + (hi - lo) * (-f_lo) / (f_hi - f_lo)
    return 0.5 * (lo + hi)


def largest_on_grid(margin, n_hi: float, rel_tol: float, *, guess: float | None = None) -> float:
    """Largest N in [0, n_hi] with margin(N) <= 0, for a margin that increases with N.

    The answer is n_hi, or a point of the fixed grid N_k = (1 + rel_tol)^k: the largest k whose
    margin holds, so the bound is the same whatever n_hi is and a config with more memory (a
    higher n_hi) never gets a lower latency bound from another search path. Without a guess the
    search steps down by factors of 64 to bracket the crossing; from a guess (a bound found for
    nearby targets, or a point known to hold) it steps away from it by factors that grow from 2%
    (upwards from a guess on the grid, the next grid point first).
    Either way it then finds the crossing by regula falsi in k (largest_holding), which needs a
    handful of evaluations where bisection needs a dozen. For a margin that increases with N every
    bracket gives the same grid point, so a guess changes the cost, never the answer."""
    log_r = math.log1p(rel_tol)

    def at(k: float) -> float:
        return margin(math.exp(k * log_r))

    top = math.floor(math.log(n_hi) / log_r)  # N_top <= n_hi
    step = math.ceil(math.log(64.0) / log_r)
    # The lowest point tried: 64^3 below the top; a bound under it counts as none (0).
    floor_k = top - step * (math.ceil(math.log(1e7) / log_r) // step)

    def at_top() -> float:
        return n_hi if margin(n_hi) <= 0 else math.exp(top * log_r)

    if guess is not None and 0 < guess < n_hi:
        x = math.log(guess) / log_r
        # A guess on the grid (a bound found before, N_k itself) is read as its own point: floored, the
        # k of N_k came out k - 1 as often as not (log rounds), and the search tried the point below it.
        on_grid = abs(x - round(x)) <= 1e-9 * max(1.0, abs(x))
        k = min(max(round(x) if on_grid else math.floor(x), floor_k), top)
        step = math.ceil(math.log(1.02) / log_r)  # 2%, growing fourfold a step
        f = at(k)
        if f <= 0:
            lo, f_lo = k, f
            # Above a bound found before, the next grid point first: most often that bound is this one
            # too (the binding target is not the one that moved), which the next point proves.
            up = 1 if on_grid else step
            while True:
                if lo == top:
                    return at_top()
                hi = min(lo + up, top)
                f_hi = at(hi)
                if f_hi > 0:
                    break
                lo, f_lo = hi, f_hi
                up = step if up == 1 else up * 4
        else:
            hi, f_hi = k, f
            while True:
                if hi == floor_k:
                    return 0.0
                lo = max(hi - step, floor_k)
                f_lo = at(lo)
                if f_lo <= 0:
                    break
                hi, f_hi, step = lo, f_lo, step * 4
        return math.exp(largest_holding(at, lo, hi, f_lo, f_hi) * log_r)

    hi = top
    f_hi = at(hi)
    if f_hi <= 0:
        return at_top()
    lo = hi - step
    f_lo = at(lo)
    while f_lo > 0:
        hi, f_hi, lo = lo, f_lo, lo - step
        if lo < floor_k:
            return 0.0
        f_lo = at(lo)
    return math.exp(largest_holding(at, lo, hi, f_lo, f_hi) * log_r)


def grid_point_above(n: float, rel_tol: float) -> float:
    """N_(k+1) for a point N_k of largest_on_grid's grid: above a bound it found on the grid, the
    point it tried and saw miss (the same float: the same k times the same log_r)."""
    log_r = math.log1p(rel_tol)
    return math.exp((round(math.log(n) / log_r) + 1) * log_r)
