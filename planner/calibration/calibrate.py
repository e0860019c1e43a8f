"""The whole calibration: the joint fit on every row, each row predicted in-sample and by a
fit that never saw its (model, GPU, tp) configuration, the factors borrowing GPUs take
checked on their own latency rows, and the Splitwise rows as a cross-engine check."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from planner.calibration.borrowed import borrowed_efficiency
from planner.calibration.fit import NEUTRAL, FitResult, fit_efficiency, splitwise_log_errors
from planner.calibration.joint_fit import (
    BULK_ALLREDUCE,
    LAYER_OVERHEAD,
    STRAGGLER,
    JointFit,
    fit_group,
    fit_joint,
)
from planner.calibration.measured import (
    SPLITWISE_GPUS,
    SplitwiseRow,
    load_splitwise_rows,
    load_trtllm_rows,
)
from planner.calibration.predict import TrtllmCase, predict_splitwise, trtllm_cases
from planner.catalog import Catalog, Efficiency
from planner.latency_points import LatencyCase, latency_cases

FOLDS = 0  # cross-validation by configuration: 0 leaves one configuration out at a time
# Engines whose latency rows the fit uses. The step overhead is one number per GPU, so rows of a
# third engine would move the overhead every other engine's rows on that GPU are predicted with:
# fitted with them, the SGLang DeepSeek-R1 rows (latency_published.csv, InferenceX) raised the
# H200's overhead from 1.85 to 2.62 ms and its held-out vLLM Llama 3.1 8B row missed by 25-32%
# (bench/calibration.py, 2026-12-01). Rows of other engines are predicted with the joint
# factors and reported as held out: no row of their configuration, or engine, was fitted.
FITTED_LATENCY_ENGINES = frozenset({"vllm", "trtllm"})
KFOLD = 4  # a second, harsher check: a quarter of the configurations withheld at once


def folds_text(folds: int) -> str:
    return "leave one configuration out" if folds == 0 else f"{folds} folds"


def config_of_trtllm(case: TrtllmCase) -> tuple[str, str, int]:
    return held_out_config(case.dep.model.id, case.gpu_id, case.row.tp)


def config_of_latency(case: LatencyCase) -> tuple[str, str, int]:
    model, gpu, tp = case.row.config
    return held_out_config(model, gpu, tp)


def held_out_config(model: str, gpu: str, tp: int) -> tuple[str, str, int]:
    """The configuration a row is held out with: GPUs fitted as one set (joint_fit.SHARED_FIT)
    count as one GPU, or holding out a GB200 configuration would leave its B200 twin, the same
    model and tp on the same die, in the fit that predicts it."""
    return (model, fit_group(gpu), tp)


def config_folds(configs: Iterable[tuple[str, str, int]], folds: int = FOLDS) -> dict[tuple[str, str, int], int]:
    """Fold of each (model, GPU, tp) configuration: sorted, then dealt round-robin, so every
    configuration is held out exactly once and each fold mixes models, GPUs and tp degrees.
    folds=0: one fold per configuration (leave one configuration out)."""
    ordered = sorted(set(configs))
    return {cfg: i % (folds or len(ordered)) for i, cfg in enumerate(ordered)}


def abs_pct_error(predicted: float, measured: float) -> float:
    return 100.0 * abs(predicted / measured - 1.0)


@dataclass(frozen=True)
class Prediction:
    source: str  # "trtllm" | "latency" | "splitwise-prefill" | "splitwise-decode"
    label: str
    line: int
    gpu: str  # catalog id
    held_out: bool
    measured: float
    predicted: float
    tp: int = 1
    model: str = ""
    moe: bool = False

    @property
    def error_pct(self) -> float:
        return abs_pct_error(self.predicted, self.measured)

    @property
    def signed_error_pct(self) -> float:
        return 100.0 * (self.predicted / self.measured - 1.0)


@dataclass(frozen=True)
class Calibration:
    joint: JointFit  # fitted on every row: what the catalog takes
    trtllm: list[Prediction]  # with the joint fit (in-sample)
    latency: list[Prediction]  # with the joint fit (in-sample)
    held_out: list[Prediction]  # every row predicted by the fold that did not see its configuration
    splitwise: list[Prediction]  # with the joint fit: cross-engine check, nothing fitted
    splitwise_fits: dict[str, FitResult]  # splitwise-only fits (diagnostic)
    splitwise_own: list[Prediction]  # with the splitwise-only factors
    skipped: list[tuple[str, str]]  # (row label, reason)
    folds: int  # of held_out; 0: leave one configuration out
    held_out_kfold: list[Prediction]  # the same with KFOLD folds (a quarter of the configurations withheld at once)
    borrowed_check: list[Prediction]  # latency rows of GPUs without throughput rows, predicted with borrowed factors
    engine_check: list[Prediction] = ()  # latency rows of engines outside FITTED_LATENCY_ENGINES (in held_out too)


def summarise(preds: Sequence[Prediction]) -> tuple[int, float, float]:
    """(n, median, worst) absolute percentage error; NaNs for no rows."""
    if not preds:
        return 0, math.nan, math.nan
    e = np.array([p.error_pct for p in preds])
    return len(e), float(np.median(e)), float(e.max())


def _trtllm_prediction(c: TrtllmCase, eff: Efficiency, held: bool) -> Prediction:
    return Prediction(
        "trtllm", c.row.label, c.row.line, c.gpu_id, held, c.row.measured_tok_s_per_gpu, c.predict(eff),
        c.row.tp, c.dep.model.id, bool(c.dep.model.num_experts),
    )  # fmt: skip


def _latency_prediction(c: LatencyCase, eff: Efficiency, held: bool) -> Prediction:
    return Prediction(
        "latency", c.row.label, c.row.line, c.gpu_id, held, c.row.measured_ms, c.predict_ms(eff),
        c.row.tp, c.row.model, c.is_moe,
    )  # fmt: skip


def cross_validate(
    catalog: Catalog, thr: Sequence[TrtllmCase], lat: Sequence[LatencyCase], folds: int = FOLDS,
    layer_overhead: bool = LAYER_OVERHEAD, bulk_allreduce: bool = BULK_ALLREDUCE,
    straggler: bool = STRAGGLER,
) -> list[Prediction]:
    """Each row predicted by a fit that saw no row of its (model, GPU, tp) configuration, from
    either source. A row whose GPU has no rows left in its fold's fit is not predicted."""
    fold = config_folds([config_of_trtllm(c) for c in thr] + [config_of_latency(c) for c in lat], folds)
    out: list[Prediction] = []
    for k in sorted(set(fold.values())):
        thr_fit = [c for c in thr if fold[config_of_trtllm(c)] != k]
        lat_fit = [c for c in lat if fold[config_of_latency(c)] != k]
        fit = fit_joint(
            catalog, thr_fit, lat_fit, layer_overhead=layer_overhead, bulk_allreduce=bulk_allreduce,
            straggler=straggler,
        )  # fmt: skip
        for c in thr:
            if fold[config_of_trtllm(c)] == k and c.gpu_id in fit.efficiency and fit.n_throughput[c.gpu_id]:
                out.append(_trtllm_prediction(c, fit.efficiency[c.gpu_id], True))
        for c in lat:
            if fold[config_of_latency(c)] == k and c.gpu_id in fit.efficiency and fit.n_throughput[c.gpu_id]:
                out.append(_latency_prediction(c, fit.efficiency[c.gpu_id], True))
    return sorted(out, key=lambda p: (p.source, p.line))


def calibrate(
    catalog: Catalog, trtllm_rows=None, splitwise_rows=None, latency_rows=None, folds: int = FOLDS,
    layer_overhead: bool = LAYER_OVERHEAD,
) -> Calibration:
    """Every step of the calibration on the measured rows (the files under data/measured/ when
    none are given); `folds` of the headline hold-out (0: leave one configuration out)."""
    trtllm_rows = load_trtllm_rows() if trtllm_rows is None else trtllm_rows
    splitwise_rows = load_splitwise_rows() if splitwise_rows is None else splitwise_rows
    skipped = [(r.label, r.skip_reason) for r in trtllm_rows if r.skip_reason]
    skipped += [(r.label, r.skip_reason) for r in splitwise_rows if r.skip_reason]
    thr = trtllm_cases(catalog, trtllm_rows)
    # A GPU with latency rows but no throughput rows has no bandwidth or compute of its own to fit
    # (one configuration cannot separate them from its overheads): its rows check the factors it
    # borrows instead, and are fitted on by nothing.
    measured = {c.gpu_id for c in thr}
    lat_all = latency_cases(catalog, latency_rows)
    lat = [c for c in lat_all if c.gpu_id in measured and c.row.engine in FITTED_LATENCY_ENGINES]
    joint = fit_joint(catalog, thr, lat, layer_overhead=layer_overhead)
    trtllm = [_trtllm_prediction(c, joint.efficiency[c.gpu_id], False) for c in thr]
    latency = [_latency_prediction(c, joint.efficiency[c.gpu_id], False) for c in lat]
    held = cross_validate(catalog, thr, lat, folds, layer_overhead)
    kfold = cross_validate(catalog, thr, lat, KFOLD, layer_overhead) if KFOLD and folds != KFOLD else held
    engine_check = [
        _latency_prediction(c, joint.efficiency[c.gpu_id], True)
        for c in lat_all
        if c.gpu_id in measured and c.row.engine not in FITTED_LATENCY_ENGINES
    ]
    held = sorted([*held, *engine_check], key=lambda p: (p.source, p.line))
    kfold = sorted([*kfold, *engine_check], key=lambda p: (p.source, p.line))
    borrowed_check = []
    for c in lat_all:
        if c.gpu_id not in measured:
            eff, _, _ = borrowed_efficiency(joint, catalog, c.gpu_id)
            if eff is not None:
                borrowed_check.append(_latency_prediction(c, eff, True))
    splitwise, splitwise_fits, splitwise_own = _splitwise_check(catalog, joint, splitwise_rows)
    return Calibration(
        joint, trtllm, latency, held, splitwise, splitwise_fits, splitwise_own, skipped, folds, kfold, borrowed_check,
        engine_check,
    )


def _splitwise_check(
    catalog: Catalog, joint: JointFit, rows: Sequence[SplitwiseRow]
) -> tuple[list[Prediction], dict[str, FitResult], list[Prediction]]:
    """The Splitwise rows predicted with the joint factors (nothing fitted on them: all held
    out), and with factors fitted per GPU on every row but each third (a test of the model's
    form): (joint predictions, the Splitwise-only fits, their predictions)."""
    sw_rows = [r for r in rows if r.skip_reason is None]
    splitwise: list[Prediction] = []
    splitwise_own: list[Prediction] = []
    splitwise_fits: dict[str, FitResult] = {}
    for gpu_label in sorted({r.gpu for r in sw_rows}):
        gpu_id = SPLITWISE_GPUS[gpu_label]
        mine = [r for r in sw_rows if r.gpu == gpu_label]
        own = fit_efficiency(splitwise_log_errors(catalog, [r for r in mine if not r.held_out]), NEUTRAL)
        splitwise_fits[gpu_id] = own
        catalog_eff = joint.efficiency.get(gpu_id)
        # With the catalog's factors no splitwise row was fitted: all count as held out.
        for eff, out, own_fit in ((catalog_eff, splitwise, False), (own.efficiency, splitwise_own, True)):
            for r in mine:
                pf, dec = predict_splitwise(catalog, r, eff)
                is_held = r.held_out if own_fit else True
                if r.e2e_consistent:
                    out.append(Prediction("splitwise-prefill", r.label, r.line, gpu_id, is_held, r.prefill_ms, pf, r.tp, r.model))
                out.append(Prediction("splitwise-decode", r.label, r.line, gpu_id, is_held, r.decode_ms_per_step, dec, r.tp, r.model))
    return splitwise, splitwise_fits, splitwise_own
