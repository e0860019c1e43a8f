"""The prefill queue's waiting time: an M/G/1 FCFS queue's W by the Pollaczek-Khinchine transform,
inverted on a time grid by FFT with exponential tilting against wrap-around (planner.latency
states the model; Abate & Whitt 1992 for the damping).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

W_GRID = 1 << 12  # points of the waiting-time grid
TILT_DECADES = 20.0  # the tilt damps the wrapped-around tail by e^-20
# Probability intervals that represent W when it is mixed with the TPOT tail or the TTFT riders,
# finer towards the tail that percentiles read, each represented by W's mean inside it.
W_LEVEL_EDGES = np.array([0.0, 0.5, 0.75, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 1.0])
W_LEVEL_WEIGHTS = np.diff(W_LEVEL_EDGES)


def _split_mass(values: np.ndarray, weights: np.ndarray, unit: float, size: int,
                length: int | None = None) -> np.ndarray:
    """pmf on the grid 0, unit, 2·unit, ... with each value's mass split between its two
    neighbours in proportion to distance, so the mean is kept exactly (values past the grid
    are clipped to its last point); `length`: its first `length` points only (a caller that reads
    no further is spared the zeros of the rest)."""
    x = np.minimum(values / unit, size - 1.0)
    lo = x.astype(np.int64)  # the floor: values are non-negative (bincount takes no negative index)
    frac = x - lo
    hi = np.minimum(lo + 1, size - 1)
    keep = size if length is None else length
    pmf = np.bincount(lo, weights * (1 - frac), minlength=keep)[:keep]
    pmf += np.bincount(hi, weights * frac, minlength=keep)[:keep]
    return pmf


def split_mass_rows(values: np.ndarray, weights: np.ndarray, units: np.ndarray, size: int) -> np.ndarray:
    """_split_mass for several grid units at once: one row per unit."""
    x = np.minimum(values[None, :] / units[:, None], size - 1.0)
    lo = np.floor(x).astype(np.int64)
    frac = x - lo
    hi = np.minimum(lo + 1, size - 1)
    offset = (np.arange(units.size) * size)[:, None]
    w = np.broadcast_to(weights, x.shape)
    flat = np.bincount((lo + offset).ravel(), (w * (1 - frac)).ravel(), minlength=units.size * size)
    flat += np.bincount((hi + offset).ravel(), (w * frac).ravel(), minlength=units.size * size)
    return flat.reshape(units.size, size)


def _centred(eq: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The equilibrium pmf (last axis) normalised, each cell's mass moved to the cell's middle by
    halving it between its point and the next. Se of a grid-valued S is uniform inside the cell
    [k, k+1) that eq[k] weighs; left at k, every one of W's geometric number of Se terms would lose
    half a cell (W biased low by E[K]·dt/2, E[K] = ρ/(1 - ρ): 5% at a p99 on 4,096 points, ρ = 0.9).
    `out`: where to write it (may be `eq` itself)."""
    half = np.divide(eq, eq.sum(axis=-1, keepdims=True), out=out)
    last = half[..., -1] * 0.5
    half *= 0.5
    half[..., 1:] += half[..., :-1]  # numpy reads an overlapping input as it was before the add
    half[..., -1] += last
    return half


_last_shares: tuple = (None, None)  # the last read-only weights shares() normalised, and its answer


def shares(weight: np.ndarray) -> np.ndarray:
    """weight / weight.sum(). A latency point normalises its class's cell weights three times (the
    grid, the wait, the backlog's levels): for a read-only array (a class's cells) the last answer
    is remembered, keyed on the array itself (held, so its id names it), which cannot change."""
    global _last_shares
    last, answer = _last_shares
    if weight is last:
        return answer
    answer = weight / weight.sum()
    if not weight.flags.writeable:
        answer.flags.writeable = False
        _last_shares = (weight, answer)
    return answer


@lru_cache(maxsize=8)
def tilt(n: int) -> np.ndarray:
    """Exponential damping e^(-TILT_DECADES·k/n) of an n-point grid against FFT wrap-around (Abate & Whitt 1992)."""
    weights = np.exp(-TILT_DECADES / n * np.arange(n))
    weights.flags.writeable = False  # shared by every caller
    return weights


@dataclass(frozen=True)
class WaitDistribution:
    """The FCFS prefill queue's waiting time W on a grid of `dt_s` seconds."""

    cdf: np.ndarray
    dt_s: float
    mean_s: float
    load: float  # ρ of the queue (its busy share)

    def survival(self, x_s: np.ndarray | float) -> np.ndarray:
        """P(W > x), linear between grid points; 1 below zero; the last grid point's value beyond."""
        x = np.asarray(x_s, float) / self.dt_s
        # truncation is the floor where x >= 0, and below 0 both clamp to 0
        i = np.minimum(np.maximum(x.astype(np.int64), 0), self.cdf.size - 2)
        frac = np.minimum(np.maximum(x - i, 0.0), 1.0)
        cdf = self.cdf[i] * (1 - frac) + self.cdf[i + 1] * frac
        return np.where(x < 0, 1.0, np.minimum(np.maximum(1.0 - cdf, 0.0), 1.0))

    def quantile(self, q: float) -> float:
        return float(np.searchsorted(self.cdf, q - 1e-12) * self.dt_s)

    def levels(self) -> tuple[np.ndarray, np.ndarray]:
        """Representative values and their probabilities (the W_LEVEL_EDGES intervals)."""
        return self._interval_means, W_LEVEL_WEIGHTS

    @cached_property
    def _interval_means(self) -> np.ndarray:
        """E[W | q_a < F(W) <= q_b] for each interval [q_a, q_b] of W_LEVEL_EDGES on the cdf linear between
        grid points: ∫ Q(u) du over it is b·Q(b) - a·Q(a) - ∫ F(x) dx from Q(a) to Q(b), with
        ∫ F exact for the piecewise-linear F. Unlike the quantile at an interval's middle, it moves
        continuously with the operating point even where W has a gap (a flat cdf), and keeps E[W]."""
        q = self._inverse(W_LEVEL_EDGES)
        cdf, dt = self.cdf, self.dt_s
        i = np.minimum(np.maximum(np.floor(q / dt).astype(np.int64), 0), cdf.size - 2)
        frac = np.minimum(np.maximum(q / dt - i, 0.0), 1.0)
        top = int(i.max())  # the area is read up to the top edge's cell only
        area = np.concatenate([[0.0], np.cumsum(0.5 * (cdf[1:top + 1] + cdf[:top])) * dt])
        f_at = cdf[i] + (cdf[i + 1] - cdf[i]) * frac
        integral = area[i] + 0.5 * (cdf[i] + f_at) * frac * dt
        # at the top edge the cdf may stop short of 1 on the grid: Q(1) is the grid's end
        uq = W_LEVEL_EDGES * q
        return (np.diff(uq) - np.diff(integral)) / W_LEVEL_WEIGHTS

    def _inverse(self, q: np.ndarray) -> np.ndarray:
        """x with P(W <= x) = q on the cdf linear between grid points (as survival reads it), so the
        levels move continuously with the operating point and a root search sees no steps of dt."""
        last = self.cdf.size - 1
        idx = np.minimum(np.searchsorted(self.cdf, q), last)
        below = np.maximum(idx - 1, 0)
        lo, hi = self.cdf[below], self.cdf[idx]
        frac = np.where(hi > lo, (q - lo) / np.where(hi > lo, hi - lo, 1.0), 1.0)
        return np.where(idx == 0, 0.0, below + np.minimum(np.maximum(frac, 0.0), 1.0)) * self.dt_s


def mg1_wait(rate_rps: float, service_s: np.ndarray, weight: np.ndarray) -> WaitDistribution | None:
    """Waiting time of an M/G/1 FCFS queue (Pollaczek-Khinchine), or None when ρ >= 1.

    The transform of W is (1 - ρ) / (1 - ρ·Ŝe(z)), Se the equilibrium distribution of the
    service time, P(Se = k) = P(S > k) / E[S] on the grid (exact for a grid-valued S). The grid
    spans E[W] + 12 sd(W) (moments from Takács' formulas: E[W] = λE[S²] / 2(1-ρ), E[W²] = 2E[W]²
    + λE[S³] / 3(1-ρ)), and four times the longest service: the queue's own scale, never the
    targets'. (A span of twice the longest TTFT limit made the grid coarser as a limit grew, so a
    lax limit on one band inflated every band's predicted latency and looser targets bought more
    GPUs.) A reading past the grid's end is the mass left there, twelve standard deviations past
    the mean: a limit beyond it holds.
    """
    ws = shares(weight)
    mean_service_s = float(np.dot(ws, service_s))
    rho = rate_rps * mean_service_s
    if rho >= 1.0 or not math.isfinite(rho):
        return None
    if rho <= 0:
        return WaitDistribution(np.ones(2), 1.0, 0.0, 0.0)
    m2, m3 = float(np.dot(ws, service_s**2)), float(np.dot(ws, service_s**3))
    mean_w = rate_rps * m2 / (2 * (1 - rho))
    sd_w = math.sqrt(max(2 * mean_w**2 + rate_rps * m3 / (3 * (1 - rho)) - mean_w**2, 0.0))
    span_s = max(mean_w + 12 * sd_w, 4 * float(service_s.max()))
    n = W_GRID
    dt = span_s / (n - 1)
    # The cdf stops rising at the longest service (a quarter of the grid at most): the running sum
    # adds zeros past it, which leave it as it is, so it is summed up to there only. _split_mass
    # puts no mass past the point after the longest service's (a quotient rises with its dividend).
    used = min(int(min(float(service_s.max()) / dt, n - 1.0)) + 2, n - 1)
    pmf = _split_mass(service_s, ws, dt, n, used)
    surv = np.empty(n)  # P(S > k - 1): 1, then 1 - the cdf
    surv[0] = 1.0
    head = np.cumsum(pmf, out=surv[1:used + 1])
    surv[used + 1:] = head[-1]
    np.subtract(1.0, surv[1:], out=surv[1:])
    eq = _centred(surv, out=surv)
    damp = tilt(n)
    transform = np.fft.rfft(np.multiply(eq, damp, out=eq))
    transform *= rho
    np.subtract(1, transform, out=transform)
    w_pmf = np.fft.irfft(np.divide(1 - rho, transform, out=transform), n)
    w_pmf /= damp
    cdf = np.cumsum(np.maximum(w_pmf, 0.0, out=w_pmf), out=w_pmf)
    return WaitDistribution(np.minimum(cdf, 1.0, out=cdf), dt, mean_w, rho)
