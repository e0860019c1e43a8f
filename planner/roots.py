"""The root of an increasing function on a bracket, without loading scipy.optimize.

scipy.optimize costs about half a second to import, more than a whole plan's root finding;
every root the planner needs is of a monotone function on a known bracket, where the
Illinois variant of regula falsi (Dowell & Jarratt, BIT 1971) converges superlinearly: halving
the weight of an end that stays put keeps the bracket closing from both sides.
"""

from __future__ import annotations

from collections.abc import Callable


def increasing_root(f: Callable[[float], float], lo: float, hi: float, *, xtol: float = 1e-9,
                    rtol: float = 1e-12, max_iter: int = 200, f_lo: float | None = None,
                    f_hi: float | None = None, integer: bool = False) -> float:
    """x in [lo, hi] with f(x) = 0, for f increasing with f(lo) <= 0 <= f(hi), to within
    xtol + rtol·|x| (brentq's tolerance). f_lo, f_hi: f at the ends, when the caller has them.
    integer: lo and hi are integers and so is every point tried; returns the largest integer
    whose f is <= 0."""
    f_lo = f(lo) if f_lo is None else f_lo
    f_hi = f(hi) if f_hi is None else f_hi
    if f_lo > 0 or f_hi < 0:
        raise ValueError(f"f does not change sign on [{lo}, {hi}]: f(lo) = {f_lo}, f(hi) = {f_hi}")
    if not integer and f_lo == 0:
        return lo
    if f_hi == 0 and not integer:
        return hi
    side = 0
    for _ in range(max_iter):
        if (hi - lo <= 1) if integer else (hi - lo <= xtol + rtol * abs(lo)):
            break
        x = lo + (hi - lo) * (-f_lo) / (f_hi - f_lo) if f_hi > f_lo else 0.5 * (lo + hi)
        if integer:
            x = min(max(round(x), lo + 1), hi - 1)
        elif not lo < x < hi:  # degenerate interpolation: bisect
            x = 0.5 * (lo + hi)
        fx = f(x)
        if fx <= 0:
            if fx == 0 and not integer:
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
    return lo if integer else 0.5 * (lo + hi)
