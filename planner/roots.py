"""The root of an increasing function on a bracket, without loading scipy.optimize.

scipy.optimize costs about half a second to import, more than a whole plan's root finding;
every root the planner needs is of a monotone function on a known bracket, where the
Illinois variant of regula falsi (Dowell & Jarratt, BIT 1971) converges superlinearly and
bisection steps keep it safe.
"""

from __future__ import annotations

from collections.abc import Callable


def increasing_root(f: Callable[[float], float], lo: float, hi: float, *, xtol: float = 1e-9,
                    rtol: float = 1e-12, max_iter: int = 200) -> float:
    """x in [lo, hi] with f(x) = 0, for f increasing with f(lo) <= 0 <= f(hi), to within
    xtol + rtol·|x| (brentq's tolerance)."""
    f_lo, f_hi = f(lo), f(hi)
    if f_lo > 0 or f_hi < 0:
        raise ValueError(f"f does not change sign on [{lo}, {hi}]: f(lo) = {f_lo}, f(hi) = {f_hi}")
    if f_lo == 0:
        return lo
    if f_hi == 0:
        return hi
    side = 0
    for i in range(max_iter):
        if hi - lo <= xtol + rtol * abs(lo):
            break
        # Alternate interpolation with bisection every fourth step: a safe bound on the iterations.
        x = lo + (hi - lo) * (-f_lo) / (f_hi - f_lo) if i % 4 != 3 else 0.5 * (lo + hi)
        if not lo < x < hi:
            x = 0.5 * (lo + hi)
        fx = f(x)
        if fx == 0:
            return x
        if fx < 0:
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
