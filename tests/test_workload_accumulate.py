"""The compiled accumulation loop against the definition: Histogram.from_arrays on the raw rows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import InputError
from planner.histogram import Histogram
from planner.workload import cell_kernel
from planner.workload.accumulate import _LUT_MAX, ArrivalCounter, CellAccumulator, to_histogram

# Lengths around every place the loop changes course: 0, the lookup tables' end, the
# total table's end (twice that), and beyond the last length edge (2**24).
EDGE_LENGTHS = [0, 1, 7, 8, 9, _LUT_MAX - 1, _LUT_MAX, _LUT_MAX + 1, 2 * _LUT_MAX, 2**24, 2**24 + 1]

lengths = st.one_of(
    st.integers(0, 300),
    st.integers(0, 2 * _LUT_MAX + 2),
    st.sampled_from(EDGE_LENGTHS),
)
batches = st.lists(
    st.lists(st.tuples(lengths, lengths), max_size=40), min_size=1, max_size=5
)


def _accumulated(parts: list[list[tuple[int, int]]]) -> Histogram:
    cells = CellAccumulator()
    for rows in parts:
        prompt = np.array([p for p, _ in rows], np.int64)
        output = np.array([o for _, o in rows], np.int64)
        cells.add(prompt, output)
    return to_histogram(cells, ArrivalCounter())


@settings(max_examples=200, deadline=None, derandomize=True)  # derandomized: same cases in CI
@given(batches)
def test_batches_add_up_to_the_histogram_of_all_rows(parts):
    rows = [row for part in parts for row in part]
    expected = Histogram.from_arrays(
        np.array([p for p, _ in rows], np.int64), np.array([o for _, o in rows], np.int64)
    )
    assert _accumulated(parts) == expected


def test_rows_beyond_the_tables_and_histograms_mix_with_table_rows():
    rng = np.random.default_rng(11)
    prompt = np.concatenate([rng.integers(0, 5_000, 1_000), [_LUT_MAX + 1, 3 * _LUT_MAX, 40]])
    output = np.concatenate([rng.integers(0, 900, 1_000), [2, 10, _LUT_MAX + 7]])
    earlier_prompt, earlier_output = rng.integers(0, 5_000, 300), rng.integers(0, 900, 300)
    cells = CellAccumulator()
    cells.add(prompt[:500], output[:500])
    cells.add_histogram(Histogram.from_arrays(earlier_prompt, earlier_output))
    cells.add(prompt[500:], output[500:])
    merged = to_histogram(cells, ArrivalCounter())
    everything = Histogram.from_arrays(
        np.concatenate([prompt, earlier_prompt]), np.concatenate([output, earlier_output])
    )
    assert merged == everything


def test_many_batches_of_long_requests_keep_every_cell():
    # each batch has rows beyond the tables, whose cells are noted outside the compiled
    # loop; with cells that the loop or earlier batches noted already, none may be lost
    rng = np.random.default_rng(5)
    prompt = rng.integers(_LUT_MAX - 50, 4 * _LUT_MAX, 3_000)
    output = rng.integers(0, 2_000, 3_000)
    cells = CellAccumulator()
    for part in range(150):
        cells.add(prompt[part * 20 : (part + 1) * 20], output[part * 20 : (part + 1) * 20])
    assert to_histogram(cells, ArrivalCounter()) == Histogram.from_arrays(prompt, output)


def test_read_only_arrays_and_other_integer_types_are_accepted():
    prompt = np.array([10, 2_000, 70_000], np.int32)
    output = np.array([5, 300, 1], np.uint16)
    frozen = np.array([10, 2_000, 70_000], np.int64)
    frozen.flags.writeable = False  # as Arrow hands its buffers to numpy
    cells = CellAccumulator()
    cells.add(prompt, output)
    cells.add(frozen, output.astype(np.int64))
    doubled = Histogram.from_arrays(np.tile(frozen, 2), np.tile(output.astype(np.int64), 2))
    assert to_histogram(cells, ArrivalCounter()) == doubled


def test_mismatched_arrays_are_refused():
    with pytest.raises(ValueError, match="one length"):
        CellAccumulator().add(np.array([5, 6]), np.array([1]))


def test_compiles_uncached_where_numba_finds_no_cache_folder(monkeypatch):
    calls = []

    def fake_njit(signature, cache, **options):
        calls.append(cache)
        if cache:  # numba's words when no cache folder is writable
            raise RuntimeError("cannot cache function 'f': no locator available for file 'x.py'")
        return lambda function: function

    monkeypatch.setattr(cell_kernel, "njit", fake_njit)
    compiled = cell_kernel._compiled("signature")(len)
    assert compiled is len
    assert calls == [True, False]


def test_other_compilation_errors_are_not_hidden(monkeypatch):
    def fake_njit(signature, cache, **options):
        raise RuntimeError("something else")

    monkeypatch.setattr(cell_kernel, "njit", fake_njit)
    with pytest.raises(RuntimeError, match="something else"):
        cell_kernel._compiled("signature")(len)


def test_lengths_whose_sum_wraps_int64_are_refused_not_binned():
    # prompt + output = 2**63 wraps to a negative total: the guard must not need that sum
    with pytest.raises(InputError, match="int64 range"):
        CellAccumulator().add(np.array([2**62]), np.array([2**62]))


def test_a_batch_whose_rough_bound_trips_but_exact_sums_fit_is_added():
    # 4 × (2**31)² passes int64, the exact sum of squares (2**62 + 110) does not
    prompt = np.array([2**31, 5, 6, 7])
    output = np.array([1, 2, 3, 4])
    cells = CellAccumulator()
    cells.add(prompt, output)
    assert to_histogram(cells, ArrivalCounter()) == Histogram.from_arrays(prompt, output)


def test_a_refused_batch_adds_nothing():
    cells = CellAccumulator()
    with pytest.raises(ValueError, match="negative"):
        cells.add(np.array([5, 700_000, -1]), np.array([1, 1, 1]))
    cells.add(np.array([40]), np.array([9]))
    assert to_histogram(cells, ArrivalCounter()) == Histogram.from_arrays([40], [9])


def test_token_counts_that_do_not_convert_exactly_are_refused():
    with pytest.raises(TypeError, match="integers"):
        CellAccumulator().add(np.array([1.9]), np.array([1.0]))
    with pytest.raises(TypeError, match="integers"):
        CellAccumulator().add(np.array([2**63], np.uint64), np.array([1], np.uint64))
