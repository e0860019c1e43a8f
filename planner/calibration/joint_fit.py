"""The joint fit: every GPU's factors at once, with one all-reduce latency per interconnect
family and one per-layer overhead for every GPU (package docstring: why in two stages)."""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares, minimize_scalar

from planner.calibration.allreduce_published import load_nccl_rows, published_bulk_ranges
from planner.calibration.fit import (
    BOUNDS,
    FACTORS,
    NEUTRAL,
    STARTS,
    TRTLLM_PRIORS,
    FitResult,
    fit_efficiency,
    trtllm_log_errors,
)
from planner.calibration.predict import TrtllmCase
from planner.catalog import GPU, Catalog, Efficiency
from planner.latency_points import LATENCY_FILE, LatencyCase

# Per-interconnect all-reduce latency: one number per link family, shared by every GPU on it
# (prefix of GPU.interconnect -> family).
INTERCONNECT_FAMILIES = (("NVLink5", "NVLink5"), ("NVLink4", "NVLink4"), ("NVLink3", "NVLink3"),
                         ("PCIe", "PCIe"), ("Infinity Fabric", "InfinityFabric"))  # fmt: skip
# A family without latency rows takes the fitted latency of a family whose all-reduce kernels
# it shares (the small-message latency is launch- and synchronisation-bound, not link-bound).
ALLREDUCE_DONOR = {"NVLink5": "NVLink4"}
# Published small-message (decode-sized, <= 256 KB) all-reduce latency per call, microseconds,
# (low, high, citation). None where no published figure was found.
PUBLISHED_ALLREDUCE_US: dict[str, tuple[float, float, str] | None] = {
    "NVLink4": (
        3.7,
        26.0,
        "H100 SXM, tp 2/4/8, 512 B-256 KB: TensorRT-LLM-style custom all-reduce 3.7-16.7 us, vLLM custom "
        "all-reduce 8.5-24.1 us (sgl-project/sglang PR #2904, 2025-01); NCCL NVLSTree with CUDA graphs "
        "about 6 us at 2 GPUs (NVIDIA/nccl issue #1259, NCCL 2.20.5); NCCL's own tuner estimate for 4-8 KB "
        "on 8x H100: 25.9-26.5 us (NVIDIA/nccl issue #1453)",
    ),
    "NVLink3": (
        3.7,
        26.0,
        "A100: nccl-tests all_reduce_perf 32-128 B on 2x A100-SXM4 over NVLink3: 10.1-10.3 us (NVIDIA/nccl "
        "issue #583, no CUDA graphs); the custom-kernel floor is taken as NVLink4's (same kernels, "
        "launch-bound) - no A100 custom all-reduce table was found",
    ),
    "NVLink5": None,
    "PCIe": None,
    "InfinityFabric": (
        15.0,
        31.0,
        "RCCL all_reduce_perf 8 B-1 KB on MI250X before one-shot all-reduce: 24.9-31.3 us (ROCm/rccl PR "
        "#929); MSCCL++ 1 KB-256 KB all-reduce 15.1-20.1 us (microsoft/mscclpp PR #646); no MI300X "
        "figure was found",
    ),
}
# GPUs whose bandwidth, compute and interconnect factors are one set, fitted on the rows of all of
# them: member -> (the GPU whose set it shares, why). A GB200 NVL72 GPU is a B200 die run at a
# higher power limit (1200 W against HGX B200's 1000 W) with the same 8 TB/s of HBM3e; the
# catalog's datasheet peaks carry that difference (2500 against 2250 dense bf16 TFLOP/s), so
# the achieved fractions of those peaks are the die's. Fitted apart, each had one configuration
# per model (70B at tp 1, 405B at tp 4): holding one out left a fit that could not tell bandwidth
# from compute from interconnect, and its 70B rows were predicted 35-39% off from its 405B rows
# (bench/calibration.py, 2026-12-01).
SHARED_FIT = {"gb200": ("b200", "the same Blackwell B200 die at a higher power limit; the datasheet peaks carry the difference")}
ROUNDS = 4  # block-coordinate rounds: throughput stage, large-message all-reduce stage, then latency stage
# Fit the large-message all-reduce protocol's latency per interconnect family on the throughput
# rows (roofline.allreduce_call_s); False keeps one protocol (allreduce_bulk_latency_us None).
# bench/calibration.py --compare-forms prints the held-out error both ways.
BULK_ALLREDUCE = True
BULK_START_US = 30.0  # where its fit starts
# The families whose large-message latency is bounded to the range their published nccl-tests
# curves give (published_bulk_bounds); the others are left to BOUNDS. bench/calibration.py
# --compare-forms prints the held-out error with every family with a curve bounded. Empty: bounding
# all three (NVLink3, 4, 5) puts the held-out B200/GB200 tp-1 throughput rows 34.7% off (target 25%);
# NVLink3 and NVLink4 alone keep every target (bench/calibration.py, 2026-12-01), but choosing the
# families by the outcome is the lead's call, not the fit's.
BULK_WITHIN_PUBLISHED: frozenset[str] = frozenset()
# Fit one per-layer overhead for every GPU on the latency rows (bench/calibration.py --compare-forms
# prints the held-out error with and without it); False keeps layer_overhead_us at 0.
LAYER_OVERHEAD = True


@functools.cache
def published_bulk_bounds() -> dict[str, tuple[float, float]]:
    """Family -> (low, high) of its large-message all-reduce latency at tp 2 that keeps the latency
    of a call, allreduce_call_latency (log2(tp) times it), within the published range at every GPU
    count with a curve (allreduce_published.published_bulk_ranges), intersected with BOUNDS. A
    family whose curves at two GPU counts no tp-2 latency meets both (the log2(tp) law does not
    hold between them: NVLink3's 4- and 8-GPU A100 curves) has no bound; bench/calibration.py says so."""
    lo0, hi0 = BOUNDS["allreduce_bulk_latency_us"]
    out: dict[str, tuple[float, float]] = {}
    for (family, n), r in published_bulk_ranges(load_nccl_rows()).items():
        lo, hi = out.get(family, (lo0, hi0))
        out[family] = (max(lo, r.low_us / float(np.log2(n))), min(hi, r.high_us / float(np.log2(n))))
    return {family: (lo, hi) for family, (lo, hi) in out.items() if lo <= hi}


def shared_fit_note(gpu: str, fitted: Iterable[str]) -> str:
    """'' or, for a GPU in a SHARED_FIT group with another fitted GPU, what it shares and why."""
    fitted = set(fitted)
    members = sorted(g for g in fitted if g != gpu and _group(g, fitted) == _group(gpu, fitted))
    if not members:
        return ""
    why = next(w for m, (_, w) in SHARED_FIT.items() if m in fitted | {gpu} and _group(m, fitted) == _group(gpu, fitted))
    return f"one set with {', '.join(members)}, fitted on the rows of both ({why})"


def fit_group(gpu: str) -> str:
    """The GPU whose factor set `gpu` shares (SHARED_FIT), itself if none."""
    return SHARED_FIT.get(gpu, (gpu, ""))[0]


def _group(gpu: str, gpus: set[str]) -> str:
    lead = fit_group(gpu)
    return lead if lead in gpus else gpu


def interconnect_family(gpu: GPU) -> str:
    for prefix, family in INTERCONNECT_FAMILIES:
        if gpu.interconnect.startswith(prefix):
            return family
    raise ValueError(f"GPU '{gpu.id}': interconnect '{gpu.interconnect}' is not in INTERCONNECT_FAMILIES")


@dataclass(frozen=True)
class JointFit:
    """Efficiency per GPU and all-reduce latency per interconnect family, from one fit."""

    efficiency: dict[str, Efficiency]
    allreduce_us: dict[str, float]  # family -> fitted latency per call
    allreduce_basis: dict[str, str]  # family -> what the latency was fitted on
    overhead_basis: dict[str, str]  # gpu -> what step_overhead_ms was fitted on
    throughput: dict[str, FitResult]  # gpu -> last throughput-stage fit
    n_throughput: dict[str, int]
    n_latency: dict[str, int]
    layer_overhead_us: float = 0.0  # one for every GPU; 0 when not fitted
    layer_basis: str = "not fitted (0)"
    # family -> large-message all-reduce latency at tp 2 (None: one protocol), and what it was fitted on
    allreduce_bulk_us: dict[str, float | None] = field(default_factory=dict)
    allreduce_bulk_basis: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Rows:
    """The rows grouped as the joint fit uses them."""

    thr: Sequence[TrtllmCase]
    lat: Sequence[LatencyCase]
    gpus: list[str]
    family: dict[str, str]  # gpu -> interconnect family
    thr_by: dict[str, list[TrtllmCase]]
    lat_by: dict[str, list[LatencyCase]]
    lat_families: list[str]  # families with tensor-parallel latency rows: their all-reduce latency is fitted there

    @classmethod
    def of(cls, catalog: Catalog, thr: Sequence[TrtllmCase], lat: Sequence[LatencyCase]) -> _Rows:
        gpus = sorted({c.gpu_id for c in thr} | {c.gpu_id for c in lat})
        family = {g: interconnect_family(catalog.gpu(g)) for g in gpus}
        present = set(gpus)
        return cls(
            thr, lat, gpus, family,
            thr_by={g: [c for c in thr if _group(c.gpu_id, present) == _group(g, present)] for g in gpus},
            lat_by={g: [c for c in lat if c.gpu_id == g] for g in gpus},
            lat_families=sorted({family[c.gpu_id] for c in lat if c.row.tp > 1}),
        )  # fmt: skip

    def leader(self, gpu: str) -> str:
        """The GPU whose throughput-stage factors `gpu` takes (SHARED_FIT), itself if none."""
        return _group(gpu, set(self.gpus))

    def donor(self, family: str) -> str | None:
        """The family whose fitted all-reduce latency `family` takes (ALLREDUCE_DONOR), if fitted."""
        d = ALLREDUCE_DONOR.get(family)
        return d if d in self.lat_families else None

    def allreduce_source(self, gpu: str) -> str:
        """The family whose all-reduce latency `gpu` takes: its donor's, else its own."""
        return self.donor(self.family[gpu]) or self.family[gpu]

    def bulk_families(self) -> list[str]:
        """Families whose large-message all-reduce latency is fitted: those with tensor-parallel
        throughput rows whose small-message latency is pinned by latency rows, their own or
        their donor's (a family without either keeps one protocol: its throughput rows alone
        cannot tell the two latencies apart)."""
        thr_families = {self.family[c.gpu_id] for c in self.thr if c.row.tp > 1}
        return sorted(f for f in thr_families if f in self.lat_families or self.donor(f))

    def bulk_source(self, family: str, fitted: Sequence[str]) -> str | None:
        """The family whose large-message latency `family` takes: its own where `fitted`, else its
        donor's where that is, else None (one protocol)."""
        if family in fitted:
            return family
        d = self.donor(family)
        return d if d in fitted else None

    def link_without_tp_rows(self, gpu: str, eff: dict[str, Efficiency]) -> dict[str, float]:
        """{} or, for a GPU with throughput rows but none at tp > 1 (nothing fits its link factor),
        the interconnect factor of the GPUs on the family whose all-reduce latency it takes that
        have such rows (their geometric mean): the fraction of the link the collectives achieve is
        the library's, not the die's, and a factor of 1 would give it the datasheet link."""
        if not self.thr_by[gpu] or any(c.row.tp > 1 for c in self.thr_by[gpu]):
            return {}
        src = self.allreduce_source(gpu)
        peers = [g for g in self.gpus if self.family[g] == src and any(c.row.tp > 1 for c in self.thr_by[g])]
        return {"interconnect": float(np.exp(np.mean([np.log(eff[g].interconnect) for g in peers])))} if peers else {}

    def bulk_rows(self, family: str) -> list[TrtllmCase]:
        """The tensor-parallel throughput rows of the GPUs on `family`."""
        return [c for c in self.thr if c.row.tp > 1 and self.family[c.gpu_id] == family]


def fit_joint(
    catalog: Catalog,
    thr: Sequence[TrtllmCase],
    lat: Sequence[LatencyCase],
    *,
    rounds: int = ROUNDS,
    layer_overhead: bool = LAYER_OVERHEAD,
    bulk_allreduce: bool = BULK_ALLREDUCE,
    bulk_within_published: Collection[str] = BULK_WITHIN_PUBLISHED,
) -> JointFit:
    """Bandwidth, compute and interconnect efficiency per GPU on the throughput rows; step
    overhead per GPU and all-reduce latency per interconnect family on the latency rows;
    in `rounds` alternating stages (block-coordinate descent), each stage holding the
    other's factors. Large offline batches hide fixed per-step and per-call costs (the
    offline rows cannot tell 2 ms of overhead from 1% of bandwidth), so those two are
    fitted where they show: at low concurrency. A GPU without latency rows keeps the
    TRTLLM_PRIORS prior on its overhead in the throughput stage; a family without latency
    rows takes ALLREDUCE_DONOR's latency or, failing one, is fitted on the throughput rows.
    With `layer_overhead`, one per-layer overhead shared by every GPU joins the latency stage
    (roofline.StepModel.decode_step_s: a deeper model pays more fixed time per pass). With
    `bulk_allreduce`, each round also fits, per family, the large-message all-reduce latency
    on its GPUs' tensor-parallel throughput rows (_fit_bulk,
    roofline.allreduce_call_s), where its small-message latency is pinned by latency rows (its own
    or its donor's), within its published range for the families in `bulk_within_published`
    (published_bulk_bounds); a family without tensor-parallel throughput rows takes its donor's. A GPU
    without tensor-parallel throughput rows takes its peers' interconnect factor
    (_Rows.link_without_tp_rows)."""
    rows = _Rows.of(catalog, thr, lat)
    eff = dict.fromkeys(rows.gpus, NEUTRAL)
    ar = dict.fromkeys(set(rows.family.values()), NEUTRAL.allreduce_latency_us)
    layer_us = NEUTRAL.layer_overhead_us
    bulk_fams = rows.bulk_families() if bulk_allreduce else []
    bulk: dict[str, float | None] = {f: (BULK_START_US if f in bulk_fams else None) for f in set(rows.family.values())}
    thr_fits: dict[str, FitResult] = {}
    stage = _LatencyStage.of(rows, layer_overhead)

    def bulk_of(family: str) -> float | None:  # the family's large-message latency: its own or its donor's
        src = rows.bulk_source(family, bulk_fams)
        return None if src is None else bulk[src]

    def shared_of(g: str) -> dict[str, float | None]:
        return {"allreduce_latency_us": ar[rows.allreduce_source(g)], "layer_overhead_us": layer_us,
                "allreduce_bulk_latency_us": bulk_of(rows.family[g])}

    for r in range(rounds):
        for g in rows.gpus:
            shared = shared_of(g)
            eff[g] = eff[g].model_copy(update=shared)
            if not rows.thr_by[g]:
                continue
            lead = rows.leader(g)
            if lead != g and lead in thr_fits:  # its set is fitted with the leader's rows: take it
                thr_fits[g] = thr_fits[lead]
                take = [k for k in thr_fits[lead].free if k in _THROUGHPUT_STAGE]
                if rows.lat_by[g]:  # its own latency rows fit its step overhead
                    take = [k for k in take if k != "step_overhead_ms"]
                eff[g] = eff[g].model_copy(update={k: getattr(eff[lead], k) for k in take})
                continue
            fit = _throughput_fit(rows, g, eff[g], first_round=r == 0)
            thr_fits[g], eff[g] = fit, fit.efficiency
            if "allreduce_latency_us" in fit.free:
                ar[rows.family[g]] = eff[g].allreduce_latency_us
        for g in rows.gpus:
            eff[g] = eff[g].model_copy(update=rows.link_without_tp_rows(g, eff))
        for f in bulk_fams:
            bulk[f] = _fit_bulk(rows, f, eff, published_bulk_bounds().get(f) if f in bulk_within_published else None)
            for g in rows.gpus:
                if rows.bulk_source(rows.family[g], bulk_fams) == f:
                    eff[g] = eff[g].model_copy(update={"allreduce_bulk_latency_us": bulk[f]})
        if not lat:
            break
        layer_us = stage.fit(eff, ar, layer_us)
    for g in rows.gpus:  # the final latency stage moved the shared factors: every GPU takes them
        eff[g] = eff[g].model_copy(update=shared_of(g))
    return JointFit(
        efficiency=eff,
        allreduce_us={f: ar[rows.donor(f) or f] for f in sorted(set(rows.family.values()))},
        allreduce_basis=_allreduce_basis(rows),
        overhead_basis=_overhead_basis(rows),
        throughput=thr_fits,
        n_throughput={g: len(rows.thr_by[g]) for g in rows.gpus},
        n_latency={g: len(rows.lat_by[g]) for g in rows.gpus},
        layer_overhead_us=layer_us,
        layer_basis=f"latency rows (n={len(lat)}), one value for every GPU"
        if stage.fits_layer_overhead
        else "not fitted (0)",
        allreduce_bulk_us={f: bulk_of(f) for f in sorted(set(rows.family.values()))},
        allreduce_bulk_basis=_bulk_basis(rows, bulk_fams, bulk_within_published),
    )


def _fit_bulk(rows: _Rows, family: str, eff: dict[str, Efficiency], bounds: tuple[float, float] | None = None) -> float:
    """The large-message all-reduce latency of `family` (roofline.allreduce_call_s) on the
    tensor-parallel throughput rows of its GPUs, every other factor held, within `bounds` (BOUNDS
    when None)."""
    cases = rows.bulk_rows(family)
    measured = np.log([c.row.measured_tok_s_per_gpu for c in cases])
    lo, hi = bounds or BOUNDS["allreduce_bulk_latency_us"]

    def cost(x: float) -> float:
        upd = {"allreduce_bulk_latency_us": float(x)}
        return float(np.sum((np.log([c.predict(eff[c.gpu_id].model_copy(update=upd)) for c in cases]) - measured) ** 2))

    # One unknown: a bounded scalar search needs a fraction of least_squares' evaluations.
    res = minimize_scalar(cost, bounds=(lo, hi), method="bounded", options={"xatol": 1e-3})
    return float(np.clip(res.x, lo, hi))


def _bulk_basis(rows: _Rows, bulk_fams: Sequence[str], within_published: Collection[str] = ()) -> dict[str, str]:
    """Family -> what its large-message all-reduce latency was fitted on."""
    basis = {}
    for f in sorted(set(rows.family.values())):
        src = rows.bulk_source(f, bulk_fams)
        if src == f:
            pinned = "its own latency rows" if f in rows.lat_families else f"{rows.donor(f)}'s latency rows"
            bound = published_bulk_bounds().get(f) if f in within_published else None
            within = f"; bounded to {bound[0]:.1f}-{bound[1]:.1f} us by published nccl-tests curves" if bound else ""
            basis[f] = f"throughput rows (n={len(rows.bulk_rows(f))} with tp > 1; small-message latency from {pinned}{within})"
        elif src is not None:
            basis[f] = f"no tensor-parallel throughput rows: takes {src}'s fitted value"
        else:
            basis[f] = "not fitted: one protocol (no tensor-parallel latency rows to tell the two apart)"
    return basis


# The factors the throughput stage fits (a GPU without latency rows also its step overhead).
_THROUGHPUT_STAGE = ("bandwidth", "compute", "interconnect", "step_overhead_ms")


def _throughput_fit(rows: _Rows, gpu: str, eff: Efficiency, *, first_round: bool) -> FitResult:
    """The throughput stage for one GPU: bandwidth and compute on its throughput rows; its
    interconnect too when it has tensor-parallel rows (and the all-reduce latency, when no
    latency rows fit it), and its step overhead, under TRTLLM_PRIORS, when it has no latency
    rows. The first round tries every start; later ones start where the last ended."""
    cases = rows.thr_by[gpu]
    free = ["bandwidth", "compute"]
    if any(c.row.tp > 1 for c in cases):
        free.append("interconnect")
        if rows.allreduce_source(gpu) not in rows.lat_families:
            free.append("allreduce_latency_us")
    if not rows.lat_by[gpu]:
        free.append("step_overhead_ms")
    starts = STARTS if first_round else [tuple(getattr(eff, k) for k in FACTORS)]
    return fit_efficiency(trtllm_log_errors(cases), eff, free=free, priors=TRTLLM_PRIORS, starts=starts)


@dataclass(frozen=True)
class _LatencyStage:
    """The latency stage's unknowns, `names` as (factor, whose): step overhead per GPU with
    latency rows, all-reduce latency per family with tp > 1 ones, and (layer_overhead) one
    per-layer overhead for all ("all")."""

    rows: _Rows
    lat_gpus: list[str]
    names: list[tuple[str, str]]
    log_measured_ms: np.ndarray

    @classmethod
    def of(cls, rows: _Rows, layer_overhead: bool) -> _LatencyStage:
        lat_gpus = [g for g in rows.gpus if rows.lat_by[g]]
        names = [("step_overhead_ms", g) for g in lat_gpus] + [("allreduce_latency_us", f) for f in rows.lat_families]
        if layer_overhead and rows.lat:
            names.append(("layer_overhead_us", "all"))
        return cls(rows, lat_gpus, names, np.log([c.row.measured_ms for c in rows.lat]))

    @property
    def fits_layer_overhead(self) -> bool:
        return ("layer_overhead_us", "all") in self.names

    def _apply(self, eff: dict[str, Efficiency], x: Sequence[float]) -> dict[str, Efficiency]:
        """The factors of every GPU with latency rows, with the unknowns set to `x`."""
        values = {(n, k): float(v) for (n, k), v in zip(self.names, x, strict=True)}
        out = {}
        for g in self.lat_gpus:
            upd = {"step_overhead_ms": values[("step_overhead_ms", g)]}
            if ("allreduce_latency_us", self.rows.family[g]) in values:
                upd["allreduce_latency_us"] = values[("allreduce_latency_us", self.rows.family[g])]
            if ("layer_overhead_us", "all") in values:
                upd["layer_overhead_us"] = values[("layer_overhead_us", "all")]
            out[g] = eff[g].model_copy(update=upd)
        return out

    def fit(self, eff: dict[str, Efficiency], ar: dict[str, float], layer_us: float) -> float:
        """One latency stage from the current factors: `eff` and `ar` (family -> all-reduce
        latency) are updated in place; returns the per-layer overhead."""
        names = self.names
        lower = [BOUNDS[n][0] for n, _ in names]
        upper = [BOUNDS[n][1] for n, _ in names]
        x0 = [getattr(eff[k], n) if n == "step_overhead_ms" else ar[k] if n == "allreduce_latency_us" else layer_us for n, k in names]

        def residuals(x: np.ndarray) -> np.ndarray:
            e = self._apply(eff, x)
            return np.log([c.predict_ms(e[c.gpu_id]) for c in self.rows.lat]) - self.log_measured_ms

        res = least_squares(
            residuals, np.clip(x0, lower, upper), bounds=(lower, upper),
            x_scale=[1.0 if n == "step_overhead_ms" else 10.0 for n, _ in names],
            xtol=1e-10, ftol=1e-10, gtol=1e-10, max_nfev=2000,
        )  # fmt: skip
        x = np.clip(res.x, lower, upper)
        eff.update(self._apply(eff, x))
        for (n, k), v in zip(names, x, strict=True):
            if n == "allreduce_latency_us":
                ar[k] = float(v)
            elif n == "layer_overhead_us":
                layer_us = float(v)
        return layer_us


def _allreduce_basis(rows: _Rows) -> dict[str, str]:
    """Family -> what its all-reduce latency was fitted on."""
    basis = {}
    for f in sorted(set(rows.family.values())):
        n = sum(1 for c in rows.lat if rows.family[c.gpu_id] == f and c.row.tp > 1)
        if f in rows.lat_families:
            basis[f] = f"latency rows (n={n} with tp > 1)"
        elif rows.donor(f):
            basis[f] = f"no latency rows: takes {rows.donor(f)}'s fitted value"
        elif any(c.row.tp > 1 for c in rows.thr if rows.family[c.gpu_id] == f):
            basis[f] = "no latency rows: fitted on offline-throughput rows only (large batches hide it)"
        else:
            basis[f] = "no tensor-parallel rows: not fitted"
    return basis


def _overhead_basis(rows: _Rows) -> dict[str, str]:
    """GPU -> what its step_overhead_ms was fitted on."""
    return {
        g: f"latency rows (n={len(rows.lat_by[g])}) of data/measured/{LATENCY_FILE}"
        if rows.lat_by[g]
        else f"throughput rows with prior N{TRTLLM_PRIORS['step_overhead_ms']}"
        for g in rows.gpus
    }
