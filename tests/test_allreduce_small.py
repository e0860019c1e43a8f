"""Published small-message all-reduce figures (data/measured/allreduce_small_published.csv) and the
per-family ranges the fit keeps its all-reduce latency in."""

from __future__ import annotations

import csv
import io
import math
import re

import pytest

from planner.calibration import joint_fit
from planner.calibration.allreduce_small import (
    COLUMNS,
    SMALL_FILE,
    SMALL_MESSAGE_MAX_BYTES,
    cited_ranges,
    load_small_rows,
)
from planner.calibration.borrowed import borrowed_efficiency
from planner.calibration.fit import BOUNDS, fit_efficiency
from planner.calibration.joint_fit import (
    INTERCONNECT_FAMILIES,
    SMALL_RANGE_BORROWS,
    fit_joint,
    interconnect_family,
    published_small_allreduce,
    small_latency_bounds,
)
from planner.calibration.measured import load_trtllm_rows, measured_dir
from planner.calibration.predict import trtllm_cases
from planner.catalog import Efficiency
from planner.latency_points import latency_cases

FAMILIES = [f for _, f in INTERCONNECT_FAMILIES]
SMALL_CSV = measured_dir() / SMALL_FILE


def _raw_rows() -> list[dict[str, str]]:
    with SMALL_CSV.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_each_family_range_is_the_least_and_greatest_time_of_its_cited_rows():
    """Read with the csv module alone: every family's (low, high) is the min and max of its rows'
    time_us, with the lender's rows for a family that borrows (SMALL_RANGE_BORROWS)."""
    raw = _raw_rows()
    ranges = published_small_allreduce()
    assert list(ranges) == FAMILIES
    for family in FAMILIES:
        counted = {family, SMALL_RANGE_BORROWS.get(family)}
        times = [float(r["time_us"]) for r in raw if r["family"] in counted]
        r = ranges[family]
        assert r is not None, family
        assert (r.low_us, r.high_us) == (min(times), max(times)), family
        assert len(r.rows) == len(times)


def test_the_shipped_ranges():
    """The cited figures' ends per family (the rows in data/measured/README.md): NVLink4 and, with its
    rows, NVLink3 from the H100 custom all-reduce of sgl-project/sglang PR #2904 (3.7 us) to NCCL's
    tuner estimate at 8 KiB on 8 GPUs (NVIDIA/nccl #1453, 26.55 us); NVLink5 from NCCL 2.27's tuned
    symmetric kernels on 8x B200 (nccl #1940, 3 us) to the same kernels at 4 GPUs (nccl-tests #333,
    22 us); PCIe from a one-shot push kernel on 4 GPUs in a CUDA graph (4.0 us) to NCCL on 8 RTX
    3090 (nccl #1439, 54.18 us)."""
    got = {f: (r.low_us, r.high_us) for f, r in published_small_allreduce().items() if r is not None}
    assert got == {
        "NVLink5": (3.0, 22.0),
        "NVLink4": (3.7, 26.55),
        "NVLink3": (3.7, 26.55),
        "PCIe": (4.0, 54.18),
        "InfinityFabric": (5.39, 31.25),
    }
    assert published_small_allreduce()["NVLink3"].borrowed_from == "NVLink4"
    assert published_small_allreduce()["PCIe"].borrowed_from is None


def test_shipped_rows_are_decode_sized_sourced_and_one_per_figure():
    raw = _raw_rows()
    rows = load_small_rows(families=FAMILIES)
    assert len(rows) == len(raw) > 0
    assert list(raw[0]) == list(COLUMNS)
    for r in rows:
        assert r.n_gpus >= 2 and 1 <= r.min_bytes <= r.max_bytes <= SMALL_MESSAGE_MAX_BYTES
        assert r.source_url.startswith("https://github.com/"), r.line
        assert r.licence and r.source_ref and r.kernel
    keys = [(r.family, r.gpu, r.n_gpus, r.min_bytes, r.max_bytes, r.kernel, r.source_url, r.time_us) for r in rows]
    assert len(set(keys)) == len(keys)


def test_small_latency_bounds_keep_tp_2_to_8_within_the_cited_range():
    """The tp-2 latency the fit may take: at least the range's low end, at most its high end over
    log2(8) = 3 (a tp-8 call costs 3 times the tp-2 latency), so calls at tp 2, 4 and 8 all lie in it."""
    for family in FAMILIES:
        r = published_small_allreduce()[family]
        lo, hi = small_latency_bounds(family)
        assert (lo, hi) == (max(BOUNDS["allreduce_latency_us"][0], r.low_us), min(BOUNDS["allreduce_latency_us"][1], r.high_us / 3))
    assert small_latency_bounds("PCIe") == (4.0, 18.06)


def test_a_family_without_figures_keeps_the_generic_bounds(monkeypatch):
    monkeypatch.setattr(joint_fit, "published_small_allreduce", lambda: {"PCIe": None})
    assert small_latency_bounds("PCIe") == BOUNDS["allreduce_latency_us"]
    assert cited_ranges(load_small_rows(), ["Imaginary"]) == {"Imaginary": None}


def test_catalog_all_reduce_latency_lies_in_its_links_range(catalog):
    """Every GPU whose factors the joint fit wrote or lent has a tp-2 latency the published range of
    its own interconnect admits at tp 2, 4 and 8 (to the catalog's 0.1 us): the B200/GB200 take
    NVLink4's value, inside NVLink5's range; the MI300X borrows the H100's, moved into Infinity
    Fabric's."""
    checked = []
    for gpu in catalog.gpus.values():
        eff = gpu.efficiency
        if not (eff.borrowed_from or eff.source.startswith("joint fit by bench/calibration.py")):
            continue
        family = interconnect_family(gpu)
        lo, hi = small_latency_bounds(family)
        assert lo - 0.05 <= eff.allreduce_latency_us <= hi + 0.05, (gpu.id, family)
        checked.append(family)
    assert {"NVLink5", "NVLink4", "NVLink3", "PCIe", "InfinityFabric"} <= set(checked)


def test_throughput_stage_bounds_override_the_generic_ones():
    """fit_efficiency keeps a factor inside the bounds it is given: a truth of 30 us fitted within
    4-18.06 us ends at 18.06."""

    def log_errors(eff: Efficiency):
        return [math.log(eff.allreduce_latency_us / 30.0)]

    base = Efficiency(bandwidth=0.8, compute=0.6, step_overhead_ms=2.0, allreduce_latency_us=10.0, interconnect=1.0, source="t")
    free = fit_efficiency(log_errors, base, free=["allreduce_latency_us"])
    bounded = fit_efficiency(log_errors, base, free=["allreduce_latency_us"], bounds={"allreduce_latency_us": (4.0, 18.06)})
    assert free.efficiency.allreduce_latency_us == pytest.approx(30.0, rel=1e-6)
    assert bounded.efficiency.allreduce_latency_us == pytest.approx(18.06, abs=1e-9)
    assert bounded.at_bounds == ("allreduce_latency_us",)


def _write(tmp_path, edit):
    text = SMALL_CSV.read_text(encoding="utf-8").splitlines()
    path = tmp_path / SMALL_FILE
    path.write_text("\n".join([text[0], text[1], edit(text[2])]) + "\n", encoding="utf-8")
    return path


def _field(line: str, name: str, value: str) -> str:
    row = next(csv.DictReader([",".join(COLUMNS), line]))
    row[name] = value
    buf = io.StringIO()
    csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="").writerow(row)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("family", "NVLink9", "family 'NVLink9' is not one of NVLink5, NVLink4, NVLink3, PCIe, InfinityFabric"),
        ("time_us", "fast", "could not convert string to float: 'fast'"),
        ("time_us", "-1", "time_us must be a positive number, got '-1'"),
        ("time_us", "nan", "time_us must be a positive number, got 'nan'"),
        ("n_gpus", "1", "n_gpus must be 2 or more"),
        ("max_bytes", str(SMALL_MESSAGE_MAX_BYTES + 1), "must satisfy 1 <= min_bytes <= max_bytes <= 262144"),
        ("cuda_graphs", "maybe", "cuda_graphs 'maybe' is not one of y, n, unknown"),
        ("source_url", "", "empty or missing source_url"),
    ],
)
def test_bad_row_names_file_and_row(tmp_path, name, value, message):
    path = _write(tmp_path, lambda line: _field(line, name, value))
    with pytest.raises(ValueError, match=rf"^allreduce_small_published\.csv data row 2: .*{re.escape(message)}"):
        load_small_rows(path, families=FAMILIES)


def test_missing_column_names_file(tmp_path):
    text = SMALL_CSV.read_text(encoding="utf-8").splitlines()
    header = text[0].replace(",licence,", ",license,")
    path = tmp_path / SMALL_FILE
    path.write_text("\n".join([header, *text[1:3]]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"^allreduce_small_published\.csv: missing columns licence$"):
        load_small_rows(path)


def test_a_donor_value_outside_the_family_range_is_moved_to_its_nearest_end(catalog, monkeypatch):
    """B200 (NVLink5) takes NVLink4's fitted latency; were NVLink5's published range to start above
    it, the B200 would take the range's low end, and its basis would say so."""
    real = published_small_allreduce()
    nv5 = real["NVLink5"]
    fake = {**real, "NVLink5": type(nv5)("NVLink5", 30.0, 90.0, nv5.rows)}  # tp 2 kept within 30-30 us
    monkeypatch.setattr(joint_fit, "published_small_allreduce", lambda: fake)
    thr = [c for c in trtllm_cases(catalog, load_trtllm_rows()) if c.gpu_id in ("h100-sxm", "b200")]
    lat = [c for c in latency_cases(catalog) if c.gpu_id == "h100-sxm"]
    fit = fit_joint(catalog, thr, lat, rounds=1, straggler=False)
    assert fit.allreduce_us["NVLink4"] < 30.0
    assert fit.allreduce_us["NVLink5"] == 30.0
    assert fit.efficiency["b200"].allreduce_latency_us == 30.0
    assert fit.allreduce_basis["NVLink5"] == "no latency rows: takes NVLink4's fitted value, moved into NVLink5's published range"


def test_a_borrowing_gpu_takes_its_own_links_range_not_its_donors_latency(catalog):
    """The MI300X borrows the H100's factors, but its small-message all-reduce runs over Infinity
    Fabric: the H100's fitted NVLink4 latency, below Infinity Fabric's published low end, is moved
    to that end, and the source says so."""
    thr = [c for c in trtllm_cases(catalog, load_trtllm_rows()) if c.gpu_id == "h100-sxm"]
    lat = [c for c in latency_cases(catalog) if c.gpu_id == "h100-sxm"]
    fit = fit_joint(catalog, thr, lat, rounds=1, straggler=False)
    low, _ = small_latency_bounds("InfinityFabric")
    assert fit.allreduce_us["NVLink4"] < low
    eff, _, basis = borrowed_efficiency(fit, catalog, "mi300x")
    assert eff.allreduce_latency_us == low
    assert f"moved to {low:g}, the nearest end of InfinityFabric's published small-message range" in basis
