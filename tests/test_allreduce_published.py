"""Published nccl-tests all-reduce curves and the latency ranges derived from them."""

from __future__ import annotations

import csv
import math
import re

import numpy as np
import pytest

from planner.calibration.allreduce_published import (
    BULK_MIN_BYTES,
    NCCL_FILE,
    PLATEAU_SHARE,
    RANGE_SE,
    SMALL_MAX_BYTES,
    NcclRow,
    alpha_beta_fit,
    bulk_region,
    bus_bytes,
    load_nccl_rows,
    published_bulk_ranges,
    published_small_ranges,
)
from planner.calibration.joint_fit import (
    bulk_at_tp2_us,
    interconnect_family,
    published_bulk_by_tp,
)
from planner.calibration.measured import measured_dir
from planner.roofline import allreduce_call_latency, bulk_latency_at_tp2_us

SIZES = [2**k for k in range(20, 29)]  # 1 MiB to 256 MiB


def _rows(gpu, n, times_us, sizes=SIZES, family="NVLink4", algorithm="Ring", url="https://example.org/t"):
    return [
        NcclRow(line=i + 1, gpu=gpu, n_gpus=n, interconnect_family=family, message_bytes=s,
                busbw_gb_s=float(bus_bytes(s, n)) / t / 1e3, time_us=t, algorithm=algorithm, nccl_version="2.x",
                cuda_graphs="n", source_url=url, source_ref="synthetic")
        for i, (s, t) in enumerate(zip(sizes, times_us, strict=True))
    ]  # fmt: skip


def _alpha_beta_times(alpha_us, busbw_gb_s, n, sizes=SIZES):
    return [alpha_us + float(bus_bytes(s, n)) / (busbw_gb_s * 1e3) for s in sizes]


def test_bus_bytes_is_the_nccl_tests_allreduce_factor():
    """nccl-tests' PERFORMANCE.md: busbw = algbw x 2(n-1)/n for all-reduce."""
    assert bus_bytes(1000, 2) == 1000.0
    assert bus_bytes(1000, 4) == 1500.0
    assert bus_bytes(1000, 8) == 1750.0


def test_alpha_beta_fit_recovers_a_known_intercept_and_bandwidth_exactly():
    """time = 37.5 us + bus_bytes / 400 GB/s at 8 GPUs over 1-256 MiB: the fit returns both, with
    no error on its intercept (the points lie on the line)."""
    ab = alpha_beta_fit(SIZES, _alpha_beta_times(37.5, 400.0, 8), 8)
    assert ab.alpha_us == pytest.approx(37.5, rel=1e-9)
    assert ab.busbw_gb_s == pytest.approx(400.0, rel=1e-9)
    assert ab.alpha_se_us == pytest.approx(0.0, abs=1e-6)
    assert (ab.n_points, ab.first_bytes, ab.last_bytes) == (9, 2**20, 2**28)


def test_alpha_beta_fit_error_is_the_weighted_standard_error():
    """Three points, the middle one 1 us high: the line of least relative squares and its intercept's
    standard error, by hand from the weighted normal equations (weights 1/t^2)."""
    sizes = [2**20, 2**21, 2**22]
    times = _alpha_beta_times(20.0, 100.0, 2, sizes)
    times[1] += 1.0
    ab = alpha_beta_fit(sizes, times, 2)
    t = np.asarray(times)
    x = np.column_stack([np.ones(3), np.asarray(sizes, float)])
    w = np.diag(1.0 / t**2)
    coef = np.linalg.solve(x.T @ w @ x, x.T @ w @ t)
    resid = (t - x @ coef) / t
    se = math.sqrt(np.linalg.inv(x.T @ w @ x)[0, 0] * float(resid @ resid) / 1)
    assert ab.alpha_us == pytest.approx(coef[0], rel=1e-9)
    assert ab.alpha_se_us == pytest.approx(se, rel=1e-9)
    assert ab.alpha_us > 20.0  # the high middle point lifts the intercept
    assert ab.shortest_us == pytest.approx(t.min(), rel=1e-15)


def test_the_fixed_cost_is_not_set_by_the_largest_messages():
    """A curve whose bandwidth still climbs at its largest sizes (time = 20 us + bytes / 300 GB/s,
    the last two points 10% and 20% quicker): plain least squares puts the intercept above the
    quickest call, which no fixed cost can be; relative residuals keep it below, near 20 us."""
    sizes = [2**k for k in range(20, 29)]
    times = _alpha_beta_times(20.0, 300.0, 8, sizes)
    times[-2] *= 0.9
    times[-1] *= 0.8
    x = np.column_stack([np.ones(len(sizes)), np.asarray(sizes, float)])
    plain = np.linalg.lstsq(x, np.asarray(times), rcond=None)[0][0]
    ab = alpha_beta_fit(sizes, times, 8)
    assert plain > min(times) > ab.alpha_us
    assert ab.alpha_us == pytest.approx(20.0, rel=0.2)


def test_alpha_beta_fit_needs_two_sizes():
    with pytest.raises(ValueError, match=r"^an alpha-beta fit needs two message sizes or more, got \[1048576\]$"):
        alpha_beta_fit([2**20, 2**20], [10.0, 11.0], 8)
    assert math.isnan(alpha_beta_fit([2**20, 2**21], [10.0, 11.0], 8).alpha_se_us)


def test_bulk_region_runs_from_one_mib_to_where_the_plateau_is_reached():
    """Bus bandwidth 10, 50, 80, 95, 99, 100 GB/s on 512 KiB-16 MiB: the region starts at 1 MiB and
    ends at the first size at PLATEAU_SHARE (0.9) of the peak: 4 MiB (95)."""
    assert BULK_MIN_BYTES == 2**20 and PLATEAU_SHARE == 0.9
    sizes = [2**k for k in range(19, 25)]
    busbw = [10.0, 50.0, 80.0, 95.0, 99.0, 100.0]
    times = [float(bus_bytes(s, 8)) / b / 1e3 for s, b in zip(sizes, busbw, strict=True)]
    region = bulk_region(list(reversed(_rows("h100-sxm", 8, times, sizes))))
    assert [r.message_bytes for r in region] == [2**20, 2**21, 2**22]


def test_published_range_is_each_tables_intercept_widened_by_its_error():
    """Two exact curves of one family and GPU count (alpha 30 and 50 us, the second with a 4 us
    bump at 4 MiB): the range runs from the lower intercept (no error) to the other's intercept plus
    RANGE_SE standard errors. A curve of another count is its own range."""
    flat = _rows("h100-sxm", 8, _alpha_beta_times(30.0, 450.0, 8), url="https://example.org/a")
    bumped_t = _alpha_beta_times(50.0, 450.0, 8)
    bumped_t[2] += 4.0
    bumped = _rows("h200", 8, bumped_t, url="https://example.org/b")
    four = _rows("h100-sxm", 4, _alpha_beta_times(20.0, 300.0, 4), url="https://example.org/c")
    ranges = published_bulk_ranges(flat + bumped + four)
    assert set(ranges) == {("NVLink4", 8), ("NVLink4", 4)}
    eight = ranges[("NVLink4", 8)]
    region = bulk_region(bumped)  # the curve up to 90% of its peak bus bandwidth
    assert len(region) >= 3 and region[-1].message_bytes < SIZES[-1]
    b = alpha_beta_fit([r.message_bytes for r in region], [r.time_us for r in region], 8)
    assert b.alpha_se_us > 0
    assert eight.low_us == pytest.approx(30.0, abs=1e-6)
    assert eight.high_us == pytest.approx(min(b.alpha_us + RANGE_SE * b.alpha_se_us, b.shortest_us), rel=1e-12)
    assert [t.gpu for t in eight.tables] == ["h100-sxm", "h200"]
    assert ranges[("NVLink4", 4)].low_us == pytest.approx(20.0, abs=1e-6)
    assert eight.contains(40.0) and not eight.contains(29.0)


def test_small_ranges_take_nccl_chosen_algorithms_and_small_messages_only():
    sizes = [2**10, 2**12, 2**14, 2**16]
    ring = _rows("gb200", 4, [15.0, 15.5, 16.0, 30.0], sizes, family="NVLink5", algorithm="Ring")
    nvls = _rows("h100-sxm", 8, [25.0, 25.0, 26.0, 27.0], sizes, family="NVLink4", algorithm="NVLS")
    ranges = published_small_ranges(ring + nvls)
    assert SMALL_MAX_BYTES == 2**14
    assert list(ranges) == [("NVLink5", 4)]
    r = ranges[("NVLink5", 4)]
    assert (r.low_us, r.high_us) == (15.0, 16.0)
    assert r.citation.startswith("nccl-tests all_reduce_perf, 1024 B-16 KiB, no CUDA graphs: gb200 x4 Ring NCCL 2.x")


def test_published_file_agrees_with_itself_and_the_catalog(catalog):
    """Every row: its time and bus bandwidth agree to the rounding of the published figure (one of
    the two is derived from the other: data/measured/README.md); its family is the catalog GPU's;
    its source is pinned to a commit; one row per (curve, size), sizes doubling."""
    rows = load_nccl_rows()
    with (measured_dir() / NCCL_FILE).open(newline="", encoding="utf-8") as f:
        raw = list(csv.DictReader(f))
    assert len(rows) == len(raw) == 114
    for r, text in zip(rows, raw, strict=True):
        implied = float(bus_bytes(r.message_bytes, r.n_gpus)) / r.time_us / 1e3
        # half a unit in the last printed digit of either figure
        time_half_ulp = 0.5 * 10.0 ** -len(text["time_us"].partition(".")[2])
        tol = 0.005 + 1e-9 + r.busbw_gb_s * time_half_ulp / r.time_us
        assert implied == pytest.approx(r.busbw_gb_s, abs=tol), (r.line, implied)
        assert interconnect_family(catalog.gpu(r.gpu)) == r.interconnect_family
        assert re.search(r"/blob/[0-9a-f]{40}/", r.source_url), r.source_url
        assert text["placement"] in ("in-place", "out-of-place") and text["cuda_graphs"] == "n"
    by_table: dict[tuple, list[int]] = {}
    for r in rows:
        by_table.setdefault(r.table, []).append(r.message_bytes)
    for sizes in by_table.values():
        assert sizes == [sizes[0] * 2**i for i in range(len(sizes))]
    assert len(by_table) == 5


def test_published_ranges_of_the_shipped_file():
    """The ranges bench/calibration.py prints, from the shipped curves (nothing typed in): H100 and
    H200 x8 (NVLS), A100 x8 and x4, GB200 x4 (ring)."""
    rows = load_nccl_rows()
    bulk = published_bulk_ranges(rows)
    assert sorted(bulk) == [("NVLink3", 4), ("NVLink3", 8), ("NVLink4", 8), ("NVLink5", 4)]
    nv4 = bulk[("NVLink4", 8)]
    assert [round(t.fit.alpha_us, 1) for t in nv4.tables] == [39.4, 33.5]
    assert (round(nv4.low_us, 1), round(nv4.high_us, 1)) == (28.7, 42.0)
    nv5 = bulk[("NVLink5", 4)]
    assert round(nv5.tables[0].fit.alpha_us, 1) == 21.6  # above its quickest call: the range stops there
    assert (round(nv5.low_us, 1), round(nv5.high_us, 1)) == (17.0, 19.5)
    small = published_small_ranges(rows)
    assert {k: (v.low_us, v.high_us) for k, v in small.items()} == {("NVLink3", 4): (14.5, 16.29), ("NVLink5", 4): (15.36, 16.83)}


def test_bulk_latency_per_gpu_count_is_the_curves_intercept_within_their_range():
    """The large-message latency the fit takes (not fits): per (family, GPU count) the mean intercept
    of its curves clipped to their range (GB200 x4's 21.6 us stops at its 19.5 us quickest call),
    and at counts without a curve log2(tp) times the value at the smallest count with one."""
    ranges = published_bulk_ranges(load_nccl_rows())
    by_tp = published_bulk_by_tp()
    assert {f: sorted(v) for f, v in by_tp.items()} == {"NVLink3": [4, 8], "NVLink4": [8], "NVLink5": [4]}
    nv4 = ranges[("NVLink4", 8)]
    assert by_tp["NVLink4"][8] == pytest.approx((nv4.tables[0].fit.alpha_us + nv4.tables[1].fit.alpha_us) / 2, rel=1e-12)
    assert by_tp["NVLink5"][4] == ranges[("NVLink5", 4)].high_us
    for (family, n), r in ranges.items():
        assert r.contains(by_tp[family][n])
    assert bulk_at_tp2_us(by_tp["NVLink3"]) == by_tp["NVLink3"][4] / 2
    assert bulk_at_tp2_us(by_tp["NVLink4"]) == pytest.approx(by_tp["NVLink4"][8] / 3, rel=1e-15)


def test_committed_bulk_latency_lies_within_the_published_range(catalog):
    """Every catalog GPU with a large-message protocol pays, per call at each GPU count a published
    curve of its family measures, a fixed cost inside that curve's range (read from the CSV)."""
    ranges = published_bulk_ranges(load_nccl_rows())
    checked = 0
    for gpu in catalog.gpus.values():
        e = gpu.efficiency
        if e.allreduce_bulk_latency_us is None:
            continue
        for (family, n), r in ranges.items():
            if family == interconnect_family(gpu):
                at_tp2 = bulk_latency_at_tp2_us(e.allreduce_bulk_latency_us, e.allreduce_bulk_latency_by_tp_us, n)
                assert r.contains(allreduce_call_latency(at_tp2, n)), (gpu.id, n)
                checked += 1
    assert checked >= 6  # H100, H200, A100 x4 and x8, B200, GB200 at least
