"""One set of efficiency factors fitted to measured rows: bounded least squares of
log(predicted / measured), from several starts, with Gaussian priors as extra residuals."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from planner.calibration.measured import SplitwiseRow
from planner.calibration.predict import TrtllmCase, predict_splitwise
from planner.catalog import Catalog, Efficiency

FACTORS = ("bandwidth", "compute", "step_overhead_ms", "allreduce_latency_us", "interconnect", "layer_overhead_us")
BOUNDS = {
    "bandwidth": (0.3, 0.95),
    "compute": (0.2, 0.95),
    "step_overhead_ms": (0.0, 10.0),
    "allreduce_latency_us": (0.0, 100.0),
    "interconnect": (0.2, 1.0),
    "layer_overhead_us": (0.0, 100.0),
    "straggler_cv": (0.0, 1.0),  # joint_fit._fit_straggler, not in FACTORS
}
STARTS = ((0.8, 0.6, 2.0, 10.0, 0.9, 0.0), (0.6, 0.4, 5.0, 50.0, 0.5, 10.0), (0.9, 0.8, 0.5, 2.0, 0.7, 20.0))
# Offline max-throughput rows run at large batches, where a fixed per-step cost and a
# slightly lower bandwidth are interchangeable: their held-out error is flat in
# step_overhead_ms from 0.5 to 10 ms (bench/calibration.py prints the profile). So
# the TensorRT-LLM fit carries a Gaussian prior on it, (mean, sd) in ms, as one more
# residual. At 2 ms the fitted bandwidth of A100 and H100 (0.77, 0.84) is close to what
# vidur measured for GEMMs alone at one token (0.78, 0.86; data/measured/vidur_linear_subset.csv).
TRTLLM_PRIORS = {"step_overhead_ms": (2.0, 1.0)}
SCALES = (0.1, 0.1, 1.0, 10.0, 0.1, 10.0)  # per factor, in FACTORS order, as STARTS
# Where every fit starts, so that no factor fitted on all rows leaks into a held-out fold.
NEUTRAL = Efficiency(
    bandwidth=0.8, compute=0.6, step_overhead_ms=2.0, allreduce_latency_us=10.0, interconnect=1.0, source="start"
)


@dataclass(frozen=True)
class FitResult:
    efficiency: Efficiency  # source left for the caller
    free: tuple[str, ...]  # factors that were fitted
    at_bounds: tuple[str, ...]  # fitted factors that ended on a bound
    cost: float


def fit_efficiency(
    log_errors: Callable[[Efficiency], np.ndarray],
    base: Efficiency,
    *,
    free: Sequence[str] = FACTORS,
    priors: Mapping[str, tuple[float, float]] | None = None,
    starts: Sequence[Sequence[float]] | None = None,
    bounds: Mapping[str, tuple[float, float]] | None = None,
) -> FitResult:
    """Bounded least squares of `log_errors(efficiency)` over the factors in `free` (the
    others keep `base`'s values), plus (value - mean) / sd for each factor with a prior;
    within BOUNDS, or `bounds` for the factors it names.
    Every start (full FACTORS-ordered tuples; default STARTS) is tried and the lowest cost
    kept, first on ties: deterministic."""
    priors = {f: v for f, v in (priors or {}).items() if f in free}
    free = tuple(f for f in FACTORS if f in free)
    index = [FACTORS.index(f) for f in free]
    bounds = {**BOUNDS, **(bounds or {})}
    lower = [bounds[f][0] for f in free]
    upper = [bounds[f][1] for f in free]

    def make(x: Sequence[float]) -> Efficiency:
        values = {f: float(v) for f, v in zip(free, x, strict=True)}
        return base.model_copy(update=values)

    def residuals(x: np.ndarray) -> np.ndarray:
        eff = make(x)
        prior = [(getattr(eff, f) - mean) / sd for f, (mean, sd) in priors.items()]
        return np.concatenate([log_errors(eff), prior])

    best = None
    for start in starts or STARTS:
        res = least_squares(
            residuals,
            np.clip(np.asarray([start[i] for i in index], float), lower, upper),
            bounds=(lower, upper),
            x_scale=np.asarray([SCALES[i] for i in index]),
            xtol=1e-10,
            ftol=1e-10,
            gtol=1e-10,
            max_nfev=2000,
        )
        if best is None or res.cost < best.cost - 1e-12:
            best = res
    assert best is not None
    x = np.clip(best.x, lower, upper)
    span = np.asarray(upper) - np.asarray(lower)
    at = tuple(f for f, v, lo, sp in zip(free, x, lower, span, strict=True) if min(v - lo, lo + sp - v) < 1e-3 * sp)
    return FitResult(make(x), free, at, float(best.cost))


def trtllm_log_errors(cases: Sequence[TrtllmCase]) -> Callable[[Efficiency], np.ndarray]:
    measured = np.log([c.row.measured_tok_s_per_gpu for c in cases])
    return lambda eff: np.log([c.predict(eff) for c in cases]) - measured


def splitwise_log_errors(catalog: Catalog, rows: Sequence[SplitwiseRow]) -> Callable[[Efficiency], np.ndarray]:
    """Log errors of decode_ms_per_step on every row and prefill_ms on consistent rows."""

    def f(eff: Efficiency) -> np.ndarray:
        out = []
        for r in rows:
            pf, dec = predict_splitwise(catalog, r, eff)
            if r.e2e_consistent:
                out.append(math.log(pf / r.prefill_ms))
            out.append(math.log(dec / r.decode_ms_per_step))
        return np.asarray(out)

    return f

