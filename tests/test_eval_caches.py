"""What the capacity search remembers answers what a fresh computation answers: the KV layout per
(model, dtype, tp), the step model per config, the bands' cells, TPOT statics, prefill rates and
decode steps per class, the percentile bound's level bytes, and a with_slo copy's tables."""

from __future__ import annotations

import math

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


def test_remembered_tpot_tables_are_fresh_ones_on_every_gpu(catalog):
    """The TPOT statics are in FLOPs: another GPU's model of the class (with the same token budget,
    which sets the tables' cap) gets the remembered ones, which equal a fresh computation for it."""
    from planner.latency import _band_ranges, _band_tpot_static

    rm = _rm(catalog)
    other = ReplicaModel(make_deployment(catalog, model="llama-3.1-8b", gpu="h200", max_model_len=8192),
                         rm.prof, rm.slo)
    for band in (0, 1):
        mine, theirs = rm.latency.tpot_static(band), other.latency.tpot_static(band)
        assert theirs is mine
        step = other.latency.step
        fresh = _band_tpot_static.__wrapped__(other.latency.cells, _band_ranges(rm.slo), band, other.latency.table_cap,
                                              step.params_active, step.attention)
        for a, b in zip(mine, fresh, strict=True):
            if isinstance(a, np.ndarray):
                assert np.array_equal(a, b) and not a.flags.writeable
            elif isinstance(a, float):
                assert a == b
            else:  # the work tables, themselves remembered per class and cap
                assert a is b


def test_object_memo_answers_per_object_not_per_equal_value():
    from planner.memo import ObjectMemo

    calls = []

    def compute(a, b, n):
        calls.append((a, b, n))
        return (tuple(a), tuple(b), n)

    memo = ObjectMemo(compute, kept=3)
    x, y, x_twin = [1], [2], [1]
    assert memo((x, y), (5,)) == ((1,), (2,), 5)
    assert memo((x, y), (5,)) is memo((x, y), (5,))
    assert len(calls) == 1
    assert memo((x_twin, y), (5,)) == ((1,), (2,), 5) and len(calls) == 2  # equal, not the same object
    assert memo((x, y), (6,)) == ((1,), (2,), 6) and len(calls) == 3
    memo((y, x), (5,))  # a fourth entry: the memo was full and starts again
    assert memo((x, y), (5,)) == compute(x, y, 5)


def test_a_step_model_is_shared_by_a_configs_kv_dtypes_and_equals_a_fresh_one(catalog):
    from planner.roofline import StepModel, _step_model

    deps = [make_deployment(catalog, model="llama-3.1-70b", gpu="h100-sxm", tp=2, weight_dtype="fp8",
                            kv_dtype=kv, max_model_len=limit) for kv in ("bf16", "fp8") for limit in (8192, 32768)]
    steps = [StepModel.of(d) for d in deps]
    assert all(s is steps[0] for s in steps)
    assert steps[0] == _step_model(deps[0].gpu, deps[0].weight_dtype, deps[0].model, 2)
    other = make_deployment(catalog, model="llama-3.1-70b", gpu="h100-sxm", tp=4, weight_dtype="fp8")
    assert StepModel.of(other) == _step_model(other.gpu, other.weight_dtype, other.model, 4) != steps[0]


def test_remembered_prefill_rates_and_decode_steps_are_fresh_ones(catalog):
    from planner.capacity import _decode_steps
    from planner.latency import _prefill_rates

    rm = _rm(catalog)
    lm = rm.latency
    prefill_s, flops_per_s, mean_prefill_s, mean_new_tokens = _prefill_rates(lm.step, lm.cells)
    assert np.array_equal(lm.prefill_s, prefill_s) and not lm.prefill_s.flags.writeable
    assert (lm.flops_per_s, lm.mean_prefill_s, lm.mean_new_tokens) == (flops_per_s, mean_prefill_s, mean_new_tokens)
    again = ReplicaModel(rm.dep, rm.prof, rm.slo)
    assert again.latency.prefill_s is lm.prefill_s
    fresh = _decode_steps.__wrapped__(rm.prof)
    for mine, theirs in zip((rm._sorted_steps, rm._cum_weight, rm._cum_weighted_steps, rm.mean_decode_steps),
                            fresh, strict=True):
        assert np.array_equal(mine, theirs)
    assert again._cum_weight is rm._cum_weight and not rm._cum_weight.flags.writeable


def test_the_remembered_percentile_bound_is_a_fresh_one(catalog):
    from planner.footprint import _layout_level_bytes, percentile_count_bound
    from planner.memory import _layer_kinds

    rm = _rm(catalog)
    dep, prof = rm.dep, rm.prof
    level_bytes, mean = _layout_level_bytes(_layer_kinds(dep.model, dep.kv_dtype, dep.tp), prof)
    assert mean == float(np.dot(prof.level_weight, level_bytes) / prof.level_weight.sum())
    for _ in range(2):
        assert percentile_count_bound(dep, prof, rm.fp) == rm.fp.budget_bytes / mean * (1 + 1e-6)


def test_the_work_tables_stop_at_the_first_bucket_no_prompt_is_capped_in(catalog):
    """Every D past the last bucket kept would have had the same capped jumps, so the same table."""
    from planner.latency import _D_RATIO, _M_GRID, _Y_GRID, _work_tables

    lm = _rm(catalog).latency
    cells = lm.cells
    for cap in (512, 2048, lm.table_cap):
        t = _work_tables(cells, cap, lm.step.params_active, lm.step.attention)
        d_max = max(float(cells.decode_steps.max()), 1.0)
        every = np.unique(np.round(_D_RATIO ** np.arange(0, math.ceil(math.log(d_max, _D_RATIO)) + 2)))
        assert np.array_equal(every[:t.bucket_d.size], t.bucket_d)
        assert t.survival.size == t.bucket_d.size * _M_GRID.size * (_Y_GRID + 1)
        for d in every:
            kept = t.bucket_d[min(int(np.searchsorted(t.bucket_d, d, side="right")) - 1, t.bucket_d.size - 1)]
            assert np.array_equal(np.minimum(cells.new_tokens, d * cap), np.minimum(cells.new_tokens, kept * cap))


def test_shallow_copy_is_copy_copy_of_a_replica_model(catalog):
    import copy

    from planner.memo import shallow_copy

    rm = _rm(catalog)
    rm.margin(20.0)
    for original in (rm, rm.latency):
        mine, theirs = shallow_copy(original), copy.copy(original)
        assert type(mine) is type(theirs) is type(original) and mine is not original
        assert mine.__dict__.keys() == theirs.__dict__.keys()
        assert all(mine.__dict__[k] is theirs.__dict__[k] for k in theirs.__dict__)


def test_shares_remembers_only_read_only_weights():
    from planner.prefill_wait import shares

    w = np.array([1.0, 3.0, 4.0])
    first = shares(w)
    assert np.array_equal(first, w / w.sum())
    w[0] = 8.0  # a writable array may change: never remembered
    assert np.array_equal(shares(w), w / w.sum())
    frozen = np.array([2.0, 2.0, 6.0])
    frozen.flags.writeable = False
    hit = shares(frozen)
    assert shares(frozen) is hit and np.array_equal(hit, frozen / frozen.sum()) and not hit.flags.writeable
    assert np.array_equal(shares(np.array([2.0, 2.0, 6.0])), hit)  # an equal array: computed afresh, same floats


def test_the_empty_replicas_times_a_with_slo_copy_shares_are_a_fresh_models(catalog):
    """target_floors reads each cell's own time in an empty replica, which no target enters: a copy
    for other targets reads the original's, and its floors are those of a model built afresh for
    those targets (a limit below the long band's empty-replica p99 shows as a floor)."""
    rm = _rm(catalog)
    tight = rm.with_slo(_two_bands(1.0, 0.05))
    assert tight.empty_own_s() is rm.empty_own_s()
    fresh = ReplicaModel(rm.dep, rm.prof, _two_bands(1.0, 0.05))
    assert np.array_equal(fresh.empty_own_s(), rm.empty_own_s())
    assert tight.floors() == fresh.floors() and [f.band for f in tight.floors()] == ["long"]
    assert rm.floors() == ()
