"""The calibration's factors as data/gpus.yaml's `efficiency:` blocks: rounded, each with a
source that says what it was fitted on (or borrowed from) and its held-out error, written
into the file with every other line kept byte for byte."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from planner.calibration.borrowed import borrowed_efficiency
from planner.calibration.calibrate import Calibration, folds_text, summarise
from planner.calibration.joint_fit import interconnect_family, shared_fit_note
from planner.calibration.measured import TRTLLM_FILE
from planner.catalog import Catalog, Efficiency
from planner.latency_points import LATENCY_FILE


def held_out_stats(cal: Calibration, gpu: str) -> tuple[int, float, float]:
    return summarise([p for p in cal.held_out if p.gpu == gpu])


def fitted_source(cal: Calibration, catalog: Catalog, gpu: str) -> str:
    j = cal.joint
    fam = interconnect_family(catalog.gpu(gpu))
    fit = j.throughput.get(gpu)
    at = f"; ended on a bound: {', '.join(fit.at_bounds)}" if fit and fit.at_bounds else ""
    n, med, worst = held_out_stats(cal, gpu)
    shared = shared_fit_note(gpu, [g for g, k in j.n_throughput.items() if k])
    return (
        f"joint fit by bench/calibration.py: bandwidth, compute, interconnect on data/measured/{TRTLLM_FILE} "
        f"(n={j.n_throughput[gpu]}{'; ' + shared if shared else ''}); step_overhead_ms on {j.overhead_basis[gpu]}; "
        f"allreduce_latency_us is the {fam} value, fitted on {j.allreduce_basis[fam]}; "
        + (f"allreduce_bulk_latency_us and allreduce_bulk_latency_by_tp_us (large messages) are the {fam} values, "
           f"from {j.allreduce_bulk_basis[fam]}; " if j.allreduce_bulk_us.get(fam) is not None else "")
        + f"straggler_cv on {j.straggler_basis}; layer_overhead_us on "
        f"{j.layer_basis}. Cross-validated by configuration ({folds_text(cal.folds)}, "
        f"no (model, GPU, tp) seen in its own fit{', nor its twin on the GPU it shares factors with' if shared else ''}): "
        f"held-out median abs error {med:.1f}% (worst {worst:.1f}%, n={n}){at}"
    )


def rounded(eff: Efficiency, source: str, borrowed_from: str | None = None,
            borrowed_check: str | None = None) -> Efficiency:
    return eff.model_copy(
        update={
            "bandwidth": round(eff.bandwidth, 3),
            "compute": round(eff.compute, 3),
            "step_overhead_ms": round(eff.step_overhead_ms, 2),
            "allreduce_latency_us": round(eff.allreduce_latency_us, 1),
            "allreduce_bulk_latency_us": None
            if eff.allreduce_bulk_latency_us is None
            else round(eff.allreduce_bulk_latency_us, 1),
            "interconnect": round(eff.interconnect, 3),
            "allreduce_bulk_latency_by_tp_us": None
            if eff.allreduce_bulk_latency_by_tp_us is None
            else {n: round(us, 1) for n, us in sorted(eff.allreduce_bulk_latency_by_tp_us.items())},
            "layer_overhead_us": round(eff.layer_overhead_us, 1),
            "straggler_cv": round(eff.straggler_cv, 4),
            "source": source,
            "borrowed_from": borrowed_from,
            "borrowed_check": borrowed_check,
        }
    )


def checked_text(signed_errors_pct: list[float]) -> str:
    """What borrowed factors predict of a GPU's measured times, in words a reader can act on: below
    the measured time is optimistic (capacity overstated, cost understated)."""
    lo, hi = min(signed_errors_pct), max(signed_errors_pct)
    if hi < 0:
        return (f"these factors predict {-hi:.0f}% to {-lo:.0f}% less time than measured (optimistic: they overstate "
                "its capacity and understate a plan's cost)")
    if lo > 0:
        return f"these factors predict {lo:.0f}% to {hi:.0f}% more time than measured (conservative)"
    return f"these factors predict from {-lo:.0f}% less to {hi:.0f}% more time than measured"


def catalog_efficiencies(cal: Calibration, catalog: Catalog) -> tuple[dict[str, Efficiency], list[str]]:
    """Efficiency block per catalog GPU: fitted where measured, borrowed (and marked so) otherwise.
    A borrowing GPU with published latency rows says how far its borrowed factors miss them.
    Returns (blocks, warnings); a GPU with neither keeps its block and gets a warning."""
    j = cal.joint
    measured = {g for g, n in j.n_throughput.items() if n}
    out = {g: rounded(j.efficiency[g], fitted_source(cal, catalog, g)) for g in sorted(measured)}
    warnings = []
    for gpu_id in catalog.gpus:
        if gpu_id in out:
            continue
        eff, why, ar = borrowed_efficiency(j, catalog, gpu_id)
        if eff is None:
            warnings.append(f"{gpu_id}: no measurements and no GPU to borrow from; efficiency left as it is")
            continue
        donor = eff.borrowed_from
        n, med, _ = held_out_stats(cal, donor)
        checked = [p for p in cal.borrowed_check if p.gpu == gpu_id]
        check, finding = "", None
        if checked:
            # which runs they are: a plan of another model and tp reads them as the nearest evidence there is
            runs = ", ".join(f"{model} at tp {tp}" for model, tp in sorted({(p.model, p.tp) for p in checked}))
            finding = (f"against {len(checked)} published latency rows of this GPU ({runs}; "
                       f"data/measured/{LATENCY_FILE}; fitted on by nothing), "
                       f"{checked_text([p.signed_error_pct for p in checked])}")
            check = f"; CHECKED {finding}"
        out[gpu_id] = rounded(
            eff,
            f"UNVERIFIED: borrowed from {donor} ({why}; no throughput measurements of this GPU): factors of the "
            f"joint fit by bench/calibration.py on {donor}'s rows (held-out median abs error {med:.1f}% on {donor}, "
            f"n={n}); {ar}{check}",
            borrowed_from=donor,
            borrowed_check=finding,
        )
    return dict(sorted(out.items())), warnings


def efficiency_lines(eff: Efficiency, indent: str = "    ") -> list[str]:
    return [
        f"{indent}bandwidth: {eff.bandwidth:g}\n",
        f"{indent}compute: {eff.compute:g}\n",
        f"{indent}step_overhead_ms: {eff.step_overhead_ms:g}\n",
        f"{indent}allreduce_latency_us: {eff.allreduce_latency_us:g}\n",
        *([] if eff.allreduce_bulk_latency_us is None else [f"{indent}allreduce_bulk_latency_us: {eff.allreduce_bulk_latency_us:g}\n"]),
        f"{indent}interconnect: {eff.interconnect:g}\n",
        *([] if eff.allreduce_bulk_latency_by_tp_us is None else [
            f"{indent}allreduce_bulk_latency_by_tp_us: {{{', '.join(f'{n}: {us:g}' for n, us in sorted(eff.allreduce_bulk_latency_by_tp_us.items()))}}}\n"
        ]),
        f"{indent}layer_overhead_us: {eff.layer_overhead_us:g}\n",
        f"{indent}straggler_cv: {eff.straggler_cv:g}\n",
        f"{indent}source: {json.dumps(eff.source, ensure_ascii=True)}\n",
        *([f"{indent}borrowed_from: {eff.borrowed_from}\n"] if eff.borrowed_from else []),
        *([f"{indent}borrowed_check: {json.dumps(eff.borrowed_check, ensure_ascii=True)}\n"] if eff.borrowed_check else []),
    ]


_TOP_KEY = re.compile(r"^([A-Za-z0-9][\w.\-]*):\s*(#.*)?$")
_EFFICIENCY = re.compile(r"^  efficiency:\s*(#.*)?$")


def rewrite_efficiency_blocks(text: str, blocks: Mapping[str, Efficiency]) -> str:
    """gpus.yaml text with the `efficiency:` block of each GPU in `blocks` replaced, every
    other line kept byte for byte. The block is the lines after `  efficiency:` indented
    deeper than two spaces. ValueError if a GPU or its block is not found."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    current = None
    done = set()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _TOP_KEY.match(line)
        if m:
            current = m.group(1)
        if current in blocks and current not in done and _EFFICIENCY.match(line):
            out.append(line)
            i += 1
            while i < len(lines) and lines[i].startswith("   ") and lines[i].strip():
                i += 1
            out.extend(efficiency_lines(blocks[current]))
            done.add(current)
            continue
        out.append(line)
        i += 1
    missing = sorted(set(blocks) - done)
    if missing:
        raise ValueError(f"no `efficiency:` block found for: {', '.join(missing)}")
    return "".join(out)
