"""What the capacity search remembers answers what a fresh computation answers: the KV layout per
(model, dtype, tp), the bands' cells per class, and a with_slo copy's TPOT tables."""

from __future__ import annotations

import numpy as np

from planner.capacity import ReplicaModel
from planner.deployment import make_deployment
from planner.histogram import Histogram
from planner.latency import LatencyModel
from planner.memory import _layer_kinds, kv_bytes_per_token_by_layer_kind
from planner.paged import token_profile
from planner.targets import SLO, Band, Target


def test_a_remembered_kv_layout_is_a_fresh_one(catalog):
    for model_id in ("llama-3.1-8b", "gemma-2-27b", "qwen3-next-80b", "deepseek-v3"):
        model = catalog.model(model_id)
        for dtype in ("bf16", "fp8"):
            for tp in (1, 2, 8):
                first = kv_bytes_per_token_by_layer_kind(model, catalog.dtype(dtype), tp)
                again = kv_bytes_per_token_by_layer_kind(model, catalog.dtype(dtype), tp)
                assert again is first
                assert first == _layer_kinds(model, catalog.dtype(dtype), tp)


def test_the_kv_layout_memo_keys_on_the_model_not_its_name(catalog):
    """A copy of a model with other layers (another scenario's catalog entry of the same id)
    gets its own layout, while the first stays remembered."""
    model, bf16 = catalog.model("llama-3.1-8b"), catalog.dtype("bf16")
    deeper = model.model_copy(update={"num_hidden_layers": 2 * model.num_hidden_layers})
    base = kv_bytes_per_token_by_layer_kind(model, bf16)
    other = kv_bytes_per_token_by_layer_kind(deeper, bf16)
    assert other.bytes_per_token == 2 * base.bytes_per_token
    assert other == _layer_kinds(deeper, bf16, 1)
    assert kv_bytes_per_token_by_layer_kind(model, bf16) is base


def _two_bands(ttft_short: float, ttft_long: float, split: int = 2000) -> SLO:
    return SLO((Band("short", 0, split, ttft=Target("p99", ttft_short), tpot=Target("p99", 0.05)),
                Band("long", split, None, ttft=Target("p99", ttft_long), tpot=Target("p90", 0.08))))


def _rm(catalog) -> ReplicaModel:
    dep = make_deployment(catalog, model="llama-3.1-8b", gpu="h100-sxm", max_model_len=8192)
    rng = np.random.default_rng(3)
    prof = token_profile(Histogram.from_arrays(rng.integers(50, 6000, 2000), rng.integers(10, 800, 2000)))
    return ReplicaModel(dep, prof, _two_bands(1.0, 4.0))


def _tpot_static_equal(a: LatencyModel, b: LatencyModel, band: int) -> bool:
    x, y = a.tpot_static(band), b.tpot_static(band)
    if x is None or y is None:
        return x is y
    cells, d, bucket, tables, total, prob = x
    cells2, d2, bucket2, tables2, total2, prob2 = y
    return (np.array_equal(cells, cells2) and np.array_equal(d, d2) and np.array_equal(bucket, bucket2)
            and tables is tables2 and total == total2 and np.array_equal(prob, prob2))


def test_with_slo_shares_the_bands_cells_and_tpot_tables_only_where_the_bands_are_the_same(catalog):
    rm = _rm(catalog)
    base = rm.latency
    for band in (0, 1):
        base.tpot_static(band)
    looser = _two_bands(2.0, 8.0)  # other limits, the same prompt ranges
    moved = _two_bands(1.0, 4.0, split=4000)  # other ranges
    for slo, shared in ((looser, True), (moved, False)):
        copy = base.with_slo(slo)
        fresh = LatencyModel(rm.step, rm.prof, rm.latency.chunk_tokens, slo, rm.latency.cap)
        assert (copy._tpot_static is base._tpot_static) == shared
        assert len(copy.band_cells) == len(fresh.band_cells) == 2
        for band in (0, 1):
            assert np.array_equal(copy.band_cells[band], fresh.band_cells[band])
            assert np.array_equal(copy.band_cells[band], np.flatnonzero(slo.bands[band].holds(base.cells.prompt)))
            assert _tpot_static_equal(copy, fresh, band)
        assert copy.horizon_s == fresh.horizon_s == 2.0 * max(b.ttft.limit_s for b in slo.bands)
    assert not np.array_equal(base.with_slo(moved).band_cells[0], base.band_cells[0])


def test_a_with_slo_copy_answers_as_a_fresh_model(catalog):
    """Margins at the same points from a copy for other targets and from a model built for them."""
    rm = _rm(catalog)
    for n in (5.0, 40.0, 120.0):
        rm.margin(n)
    for slo in (_two_bands(2.0, 8.0), _two_bands(0.5, 3.0, split=1000)):
        copy, fresh = rm.with_slo(slo), ReplicaModel(rm.dep, rm.prof, slo)
        for n in (5.0, 40.0, 120.0):
            assert copy.margin(n) == fresh.margin(n)
            pt, pf = copy.latency_at(n), fresh.latency_at(n)
            for band in (0, 1):
                assert pt.tpot_exceed(band, 0.03) == pf.tpot_exceed(band, 0.03)
                assert pt.ttft_exceed(band, 0.7) == pf.ttft_exceed(band, 0.7)


def test_band_cells_are_read_only(catalog):
    """The bands' cells are shared by every model of the class: nobody may write into them."""
    cells = _rm(catalog).latency.band_cells
    assert all(not c.flags.writeable for c in cells)
