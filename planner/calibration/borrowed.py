"""The factors a GPU without throughput measurements takes from a measured one, marked
`borrowed_from` so that plans using it say so (GPU.verified is False)."""

from __future__ import annotations

from planner.calibration.joint_fit import JointFit, interconnect_family, within_small_range
from planner.catalog import Catalog, Efficiency

# GPUs without measurements -> (measured GPU, why that one).
BORROWED = {
    "h100-pcie": ("h100-sxm", "same Hopper architecture"),
    "a100-40gb": ("a100-80gb", "same Ampere A100"),
    "a10g": ("a100-80gb", "same Ampere architecture"),
    "l4": ("l40s", "same Ada architecture"),
    "mi300x": ("h100-sxm", "an HBM3 GPU of the same class stands in"),
    "mi325x": ("h100-sxm", "an HBM3 GPU of the same class stands in, as for the MI300X"),
    "b300": ("b200", "same Blackwell package"),
    # Blackwell, but a GDDR, PCIe-only card: the measured card like it is the L40S, not the B200
    "rtx-pro-6000": ("l40s", "a GDDR, PCIe-only data-center card like it"),
}


def borrowed_efficiency(joint: JointFit, catalog: Catalog, gpu_id: str) -> tuple[Efficiency | None, str, str]:
    """The factors a GPU without throughput rows borrows: BORROWED's donor, or the first measured
    GPU of its architecture, with its own interconnect family's all-reduce latency where the fit
    has one. Returns (efficiency, why this donor, where the all-reduce latency comes from) with the
    source left to the caller; (None, "", "") when there is no donor."""
    measured = sorted(g for g, n in joint.n_throughput.items() if n)
    gpu = catalog.gpu(gpu_id)
    donor, why = BORROWED.get(gpu_id, (None, ""))
    if donor is None:
        same_arch = [g for g in measured if catalog.gpu(g).arch == gpu.arch]
        donor, why = (same_arch[0], f"same {gpu.arch} architecture") if same_arch else (None, "")
    if donor not in measured:
        return None, "", ""
    fam = interconnect_family(gpu)
    eff = joint.efficiency[donor].model_copy(update={"borrowed_from": donor})
    if fam in joint.allreduce_us and joint.allreduce_basis[fam] != "no tensor-parallel rows: not fitted":
        bulk = joint.allreduce_bulk_us.get(fam)
        eff = eff.model_copy(update={"allreduce_latency_us": joint.allreduce_us[fam], "allreduce_bulk_latency_us": bulk,
                                     "allreduce_bulk_latency_by_tp_us": joint.allreduce_bulk_by_tp_us.get(fam)})
        ar = f"allreduce_latency_us is the {fam} value ({joint.allreduce_basis[fam]})"
        if bulk is not None:
            ar += f", allreduce_bulk_latency_us and allreduce_bulk_latency_by_tp_us too ({joint.allreduce_bulk_basis[fam]})"
    else:
        ar = f"allreduce_latency_us{'' if eff.allreduce_bulk_latency_us is None else ' and allreduce_bulk_latency_us'} are {donor}'s too: no {fam} measurement"
        # The donor's small-message latency is its own link's; the borrower's link has its own
        # published range, and a value outside it is no estimate for this GPU.
        clipped = within_small_range(eff.allreduce_latency_us, fam)
        if clipped != eff.allreduce_latency_us:
            ar += (f"; allreduce_latency_us {eff.allreduce_latency_us:g} moved to {clipped:g}, the nearest end of "
                   f"{fam}'s published small-message range at tp 2")
            eff = eff.model_copy(update={"allreduce_latency_us": clipped})
    return eff, why, ar

