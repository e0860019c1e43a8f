"""The joint fit: every GPU's factors at once, with one all-reduce latency per interconnect
family and one per-layer overhead for every GPU (package docstring: why in two stages)."""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares, minimize_scalar

from planner.calibration.allreduce_published import load_nccl_rows, published_bulk_ranges
from planner.calibration.allreduce_small import (
    SMALL_FILE,
    CitedRange,
    cited_ranges,
    load_small_rows,
)
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
SMALL_LATENCY_MAX_TP = 8  # the largest tensor-parallel degree the fitted latency is kept in range for
# A family takes another's published small-message figures besides its own (family -> lender): the
# engines run the same custom and NCCL kernels on the A100 as on the H100, and at decode sizes their
# time is launch and synchronisation, not link bandwidth; the A100 rows alone (NCCL at 2 GPUs, two
# custom kernels at 2-8 GPUs, no CUDA graphs) have no figure of a graph-captured kernel, the floor.
SMALL_RANGE_BORROWS = {"NVLink3": "NVLink4"}
# GPUs whose bandwidth, compute and interconnect factors are one set, fitted on the rows of all of
# them: member -> (the GPU whose set it shares, why). A GB200 NVL72 GPU is a B200 die run at a
# higher power limit (1200 W against HGX B200's 1000 W) with the same 8 TB/s of HBM3e; the
# catalog's datasheet peaks carry that difference (2500 against 2250 dense bf16 TFLOP/s), so
# the achieved fractions of those peaks are the die's. Fitted apart, each had one configuration
# per model (70B at tp 1, 405B at tp 4): holding one out left a fit that could not tell bandwidth
# from compute from interconnect, and its 70B rows were predicted 35-39% off from its 405B rows
# (bench/calibration.py, 2026-12-01).
SHARED_FIT = {"gb200": ("b200", "the same Blackwell B200 die at a higher power limit; the datasheet peaks carry the difference")}
ROUNDS = 4  # block-coordinate rounds: throughput stage, straggler stage, then latency stage
# Two all-reduce protocols (roofline.allreduce_call_s), the large-message one's fixed cost taken from
# published nccl-tests curves (published_bulk_by_tp); False keeps one protocol (allreduce_bulk_latency_us
# None). bench/calibration.py --compare-forms prints the held-out error both ways.
BULK_ALLREDUCE = True
# Fit one straggler coefficient of variation for every GPU on the tensor-parallel rows, throughput and
# latency (roofline.straggler_factor: the ranks' wait for the slowest at each all-reduce); False keeps
# it 0. bench/calibration.py --compare-forms prints the held-out error both ways. Each source weighs
# the same (_fit_straggler): on the 156 throughput rows alone it reached 0.26 once prompts' FLOPs no
# longer carried it, and the latency rows at tp 4 and 8 (18 rows, low concurrency) missed their 10%
# median (11.1%, 11.3%; bench/calibration.py, 2026-12-02).
STRAGGLER = True
# Fit one per-layer overhead for every GPU on the latency rows (bench/calibration.py --compare-forms
# prints the held-out error with and without it); False keeps layer_overhead_us at 0.
LAYER_OVERHEAD = True
# The interconnect factor is the share of the datasheet link an all-reduce's bytes move at; the
# published curves measure it (published_link_share), so the throughput stage fits it under a
# Gaussian prior centred there, of this sd. Free, it took up cost of tensor parallelism that is not
# the link's (H100 0.547 against the curves' 0.91), and on a GPU whose only tensor-parallel rows are
# at one tp (B200 and GB200: 405B at tp 4) it traded against compute: holding out their 70B tp-1
# configuration gave compute 0.95, interconnect 0.27 and tp-1 rows predicted 100% high.
LINK_PRIOR_SD = 0.2


@functools.cache
def _published_ranges():
    """The shipped nccl-tests curves' ranges (allreduce_published.published_bulk_ranges), read once:
    every fit of a cross-validation asks for them."""
    return published_bulk_ranges(load_nccl_rows())


@functools.cache
def published_bulk_by_tp() -> dict[str, dict[int, float]]:
    """Family -> {GPU count: fixed cost of one large-message all-reduce call, us} from its published
    nccl-tests curves (allreduce_published.published_bulk_ranges): the mean of the curves' alpha-beta
    intercepts at that count, clipped to the range they give (an intercept can exceed the curve's
    quickest call, which no fixed cost does: GB200 x4's 21.6 us against a 19.5 us call). Not fitted
    to the throughput rows: those see every other cost of tensor parallelism too (the fit put up to
    3.9 times the measured value here before the straggler term carried that cost)."""
    out: dict[str, dict[int, float]] = {}
    for (family, n), r in _published_ranges().items():
        mean = float(np.mean([t.fit.alpha_us for t in r.tables]))
        out.setdefault(family, {})[n] = float(np.clip(mean, r.low_us, r.high_us))
    return out


def published_link_share(catalog: Catalog) -> dict[str, float]:
    """Family -> the share of the datasheet per-GPU link its published nccl-tests curves achieve in
    the large-message region (alpha-beta bus bandwidth / GPU.interconnect_gb_s of the curve's GPU,
    the mean over its curves): the centre of the prior on the interconnect factor (LINK_PRIOR_SD)."""
    out: dict[str, list[float]] = {}
    for (family, _), r in _published_ranges().items():
        for t in r.tables:
            out.setdefault(family, []).append(t.fit.busbw_gb_s / catalog.gpu(t.gpu).interconnect_gb_s)
    return {f: float(np.mean(v)) for f, v in out.items()}


def bulk_at_tp2_us(by_tp: dict[int, float]) -> float:
    """The tp-2 latency of the large-message protocol for the GPU counts no curve measures: the value
    at the smallest measured count scaled by log2 (roofline.allreduce_call_latency's law), the
    nearest measured count to tp 2."""
    n = min(by_tp)
    return by_tp[n] / float(np.log2(n))


@functools.cache
def published_small_allreduce() -> dict[str, CitedRange | None]:
    """Family -> the range of one small-message all-reduce's published time (allreduce_small.
    cited_ranges of data/measured/allreduce_small_published.csv, with SMALL_RANGE_BORROWS), None
    where no figure is published; read once."""
    families = [f for _, f in INTERCONNECT_FAMILIES]
    return cited_ranges(load_small_rows(families=families), families, SMALL_RANGE_BORROWS)


def small_latency_bounds(family: str) -> tuple[float, float]:
    """(low, high) of the small-message all-reduce latency at tp 2 the fit may take for `family`:
    the values that keep the call latency at tp 2, 4 and 8 (log2(tp) times it,
    roofline.allreduce_call_latency) within its published range (published_small_allreduce),
    intersected with BOUNDS; BOUNDS alone where nothing is published. The latency rows cannot
    tell this latency from the step and per-layer overheads well (one 70B pass pays it 160
    times, the per-layer overhead 80): unbounded, it moved from 0 to 45 us with the other terms;
    the throughput rows, which fit it where no latency rows do, hide it under large batches."""
    lo, hi = BOUNDS["allreduce_latency_us"]
    pub = published_small_allreduce().get(family)
    if pub is None:
        return lo, hi
    return max(lo, pub.low_us), min(hi, pub.high_us / float(np.log2(SMALL_LATENCY_MAX_TP)))


def within_small_range(latency_us: float, family: str) -> float:
    """Another link's small-message all-reduce latency (a donor family's, a borrowed GPU's) as
    `family` may take it: moved to the nearest end of small_latency_bounds(family), kept inside."""
    return float(np.clip(latency_us, *small_latency_bounds(family)))


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
    # family -> large-message all-reduce latency at tp 2 (None: one protocol), per measured GPU count,
    # and where it comes from
    allreduce_bulk_by_tp_us: dict[str, dict[int, float] | None] = field(default_factory=dict)
    allreduce_bulk_basis: dict[str, str] = field(default_factory=dict)
    straggler_cv: float = 0.0  # one for every GPU; 0 when not fitted
    straggler_basis: str = "not fitted (0)"

    @property
    def allreduce_bulk_us(self) -> dict[str, float | None]:
        """Family -> large-message all-reduce latency at tp 2 (bulk_at_tp2_us), None: one protocol."""
        return {f: None if b is None else bulk_at_tp2_us(b) for f, b in self.allreduce_bulk_by_tp_us.items()}


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

    def bulk_source(self, family: str, measured: Collection[str]) -> str | None:
        """The family whose large-message latency `family` takes: its own where a published curve
        measures it (`measured`), else its donor's (ALLREDUCE_DONOR) where one does, else None (one
        protocol)."""
        if family in measured:
            return family
        d = ALLREDUCE_DONOR.get(family)
        return d if d in measured else None

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

    def tp_rows(self) -> list[TrtllmCase]:
        """The tensor-parallel throughput rows of every GPU."""
        return [c for c in self.thr if c.row.tp > 1]

    def tp_latency_rows(self) -> list[LatencyCase]:
        """The tensor-parallel latency rows of every GPU."""
        return [c for c in self.lat if c.row.tp > 1]


def fit_joint(
    catalog: Catalog,
    thr: Sequence[TrtllmCase],
    lat: Sequence[LatencyCase],
    *,
    rounds: int = ROUNDS,
    layer_overhead: bool = LAYER_OVERHEAD,
    bulk_allreduce: bool = BULK_ALLREDUCE,
    straggler: bool = STRAGGLER,
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
    `bulk_allreduce`, a family with published nccl-tests curves has a large-message all-reduce
    protocol whose fixed cost is theirs (published_bulk_by_tp, roofline.allreduce_call_s; measured,
    not fitted), a family without takes its donor's or keeps one protocol. With `straggler`, each
    round fits one straggler coefficient of variation for every GPU (roofline.straggler_factor) on
    the tensor-parallel throughput and latency rows (_fit_straggler), between the throughput and latency stages.
    A GPU without tensor-parallel throughput rows takes its peers' interconnect factor
    (_Rows.link_without_tp_rows)."""
    rows = _Rows.of(catalog, thr, lat)
    eff = dict.fromkeys(rows.gpus, NEUTRAL)
    ar = dict.fromkeys(set(rows.family.values()), NEUTRAL.allreduce_latency_us)
    layer_us = NEUTRAL.layer_overhead_us
    measured = published_bulk_by_tp() if bulk_allreduce else {}
    link_share = published_link_share(catalog) if LINK_PRIOR_SD else {}
    cv = 0.0
    thr_fits: dict[str, FitResult] = {}
    stage = _LatencyStage.of(rows, layer_overhead)

    def bulk_of(family: str) -> dict[int, float] | None:  # its large-message latencies: its own or its donor's
        src = rows.bulk_source(family, measured)
        return None if src is None else measured[src]

    def latency_of(family: str) -> float:  # its own fitted latency, or its donor's within its own published range
        src = rows.donor(family) or family
        return ar[src] if src == family else within_small_range(ar[src], family)

    def shared_of(g: str) -> dict[str, object]:
        by_tp = bulk_of(rows.family[g])
        return {"allreduce_latency_us": latency_of(rows.family[g]), "layer_overhead_us": layer_us,
                "allreduce_bulk_latency_us": None if by_tp is None else bulk_at_tp2_us(by_tp),
                "allreduce_bulk_latency_by_tp_us": by_tp, "straggler_cv": cv}

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
            fit = _throughput_fit(rows, g, eff[g], first_round=r == 0, link_share=link_share.get(rows.family[g]))
            thr_fits[g], eff[g] = fit, fit.efficiency
            if "allreduce_latency_us" in fit.free:
                ar[rows.family[g]] = eff[g].allreduce_latency_us
        for g in rows.gpus:
            eff[g] = eff[g].model_copy(update=rows.link_without_tp_rows(g, eff))
        if straggler and rows.tp_rows():
            cv = _fit_straggler(rows, eff)
            for g in rows.gpus:
                eff[g] = eff[g].model_copy(update={"straggler_cv": cv})
        if not lat:
            break
        layer_us = stage.fit(eff, ar, layer_us)
    for g in rows.gpus:  # the final latency stage moved the shared factors: every GPU takes them
        eff[g] = eff[g].model_copy(update=shared_of(g))
    return JointFit(
        efficiency=eff,
        allreduce_us={f: latency_of(f) for f in sorted(set(rows.family.values()))},
        allreduce_basis=_allreduce_basis(rows, {f for f in rows.family.values() if latency_of(f) != ar[rows.donor(f) or f]}),
        overhead_basis=_overhead_basis(rows),
        throughput=thr_fits,
        n_throughput={g: len(rows.thr_by[g]) for g in rows.gpus},
        n_latency={g: len(rows.lat_by[g]) for g in rows.gpus},
        layer_overhead_us=layer_us,
        layer_basis=f"latency rows (n={len(lat)}), one value for every GPU"
        if stage.fits_layer_overhead
        else "not fitted (0)",
        allreduce_bulk_by_tp_us={f: bulk_of(f) for f in sorted(set(rows.family.values()))},
        allreduce_bulk_basis=_bulk_basis(rows, measured),
        straggler_cv=cv,
        straggler_basis=f"tensor-parallel rows, throughput (n={len(rows.tp_rows())}) and latency "
        f"(n={len(rows.tp_latency_rows())}) weighed alike, one value for every GPU"
        if straggler and rows.tp_rows()
        else "not fitted (0)",
    )


def _fit_straggler(rows: _Rows, eff: dict[str, Efficiency]) -> float:
    """One straggler coefficient of variation for every GPU (roofline.straggler_factor) on the
    tensor-parallel rows, every other factor held, within BOUNDS: the mean squared log error of the
    throughput rows plus that of the latency rows (STRAGGLER: why each source weighs the same)."""
    cases = rows.tp_rows()
    measured = np.log([c.row.measured_tok_s_per_gpu for c in cases])
    lat = rows.tp_latency_rows()
    lat_measured = np.log([c.row.measured_ms for c in lat])
    lo, hi = BOUNDS["straggler_cv"]

    def cost(x: float) -> float:
        upd = {"straggler_cv": float(x)}
        thr = np.log([c.predict(eff[c.gpu_id].model_copy(update=upd)) for c in cases]) - measured
        if not lat:
            return float(np.mean(thr**2))
        low = np.log([c.predict_ms(eff[c.gpu_id].model_copy(update=upd)) for c in lat]) - lat_measured
        return float(np.mean(thr**2) + np.mean(low**2))

    # One unknown: a bounded scalar search needs a fraction of least_squares' evaluations.
    res = minimize_scalar(cost, bounds=(lo, hi), method="bounded", options={"xatol": 1e-4})
    return float(np.clip(res.x, lo, hi))


def _bulk_basis(rows: _Rows, measured: dict[str, dict[int, float]]) -> dict[str, str]:
    """Family -> where its large-message all-reduce latency comes from."""
    basis = {}
    ranges = _published_ranges()
    for f in sorted(set(rows.family.values())):
        src = rows.bulk_source(f, measured)
        if src == f:
            counts = ", ".join(
                f"{n} GPUs {us:.1f} us (within {ranges[(f, n)].low_us:.1f}-{ranges[(f, n)].high_us:.1f})"
                for n, us in sorted(measured[f].items())
            )
            basis[f] = (f"published nccl-tests curves, mean alpha-beta intercept per GPU count: {counts}; other counts "
                        f"log2(tp) x the {min(measured[f])}-GPU value / {np.log2(min(measured[f])):g}")
        elif src is not None:
            basis[f] = f"no published curve: takes {src}'s (ALLREDUCE_DONOR)"
        else:
            basis[f] = "no published curve: one protocol"
    return basis


# The factors the throughput stage fits (a GPU without latency rows also its step overhead).
_THROUGHPUT_STAGE = ("bandwidth", "compute", "interconnect", "step_overhead_ms")


def _throughput_fit(rows: _Rows, gpu: str, eff: Efficiency, *, first_round: bool, link_share: float | None = None) -> FitResult:
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
    priors = dict(TRTLLM_PRIORS)
    if link_share is not None:
        priors["interconnect"] = (link_share, LINK_PRIOR_SD)
    bounds = {"allreduce_latency_us": small_latency_bounds(rows.family[gpu])}
    return fit_efficiency(trtllm_log_errors(cases), eff, free=free, priors=priors, starts=starts, bounds=bounds)


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
        lower, upper = zip(*(small_latency_bounds(k) if n == "allreduce_latency_us" else BOUNDS[n] for n, k in names),
                           strict=True)
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


def _allreduce_basis(rows: _Rows, clipped: Collection[str] = ()) -> dict[str, str]:
    """Family -> what its all-reduce latency was fitted on (`clipped`: the families whose donor's
    value lay outside their own published range and were moved to its nearest end)."""
    basis = {}
    for f in sorted(set(rows.family.values())):
        n = sum(1 for c in rows.lat if rows.family[c.gpu_id] == f and c.row.tp > 1)
        if f in rows.lat_families:
            basis[f] = f"latency rows (n={n} with tp > 1)"
        elif rows.donor(f):
            within = f", moved into {f}'s published range" if f in clipped else ""
            basis[f] = f"no latency rows: takes {rows.donor(f)}'s fitted value{within}"
        elif any(c.row.tp > 1 for c in rows.thr if rows.family[c.gpu_id] == f):
            basis[f] = "no latency rows: fitted on offline-throughput rows only (large batches hide it)"
            if published_small_allreduce().get(f) is not None:
                lo, hi = small_latency_bounds(f)
                basis[f] += f", within {lo:g}-{hi:.4g} us by its published small-message range (data/measured/{SMALL_FILE})"
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
