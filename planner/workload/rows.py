"""Which rows of a log are usable: token counts as exact non-negative integers.

A row is excluded, and counted under one reason, when a column it needs is
- 'null':        missing (null, NaN, an empty string or 'nan', a field absent from the line);
- 'non_numeric': not a whole number (text, 12.5, inf, true, a list, an unparsable
                 timestamp, a line that is not a JSON object, a JSON key named twice);
- 'negative':    a token count below zero;
- 'too_long':    a token count above MAX_TOKENS (2**24 = 16,777,216: longer than any model's
                 context window, and so long that one such row's square could pass the int64
                 range of a histogram cell's sums), or a prompt and output each within it whose
                 sum is not (the total lengths' bins end there: planner.workload.ingest);
- 'empty_prompt': a prompt of zero tokens, which no engine serves (vLLM: "The decoder prompt
                 cannot be empty"): a failed or mislogged request, not traffic to plan for.
A row with several problems counts once, under the first of null, non_numeric,
negative, too_long, empty_prompt (design.md, "Bad input": counted and reported, never
silently dropped).

Columns arrive as Arrow arrays of whatever type the reader produced. The fast path
(integer columns, no nulls) is zero-copy; anything else is coerced value by value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from planner.bounds import MAX_TOKENS

NULL, NON_NUMERIC, NEGATIVE, TOO_LONG, EMPTY_PROMPT = "null", "non_numeric", "negative", "too_long", "empty_prompt"
EXCLUSION_REASONS = (NULL, NEGATIVE, NON_NUMERIC, TOO_LONG, EMPTY_PROMPT)  # the order reports list them in

# Per-row codes; the larger code wins when a row has several problems.
OK, CODE_EMPTY_PROMPT, CODE_TOO_LONG, CODE_NEGATIVE, CODE_NON_NUMERIC, CODE_NULL = 0, 1, 2, 3, 4, 5
CODE_REASON = {CODE_EMPTY_PROMPT: EMPTY_PROMPT, CODE_TOO_LONG: TOO_LONG, CODE_NEGATIVE: NEGATIVE,
               CODE_NON_NUMERIC: NON_NUMERIC, CODE_NULL: NULL}

# Beyond 2**53 a float no longer holds every integer, so "whole number" cannot be checked.
_LARGEST_EXACT_FLOAT_INT = float(2**53)


@dataclass(frozen=True)
class Coerced:
    """One column as int64 values with a per-row problem code (None: every row is fine).

    Values at rows with a problem are 0 and meaningless.
    """

    values: np.ndarray
    codes: np.ndarray | None


def combine_codes(*codes: np.ndarray | None) -> np.ndarray | None:
    """The per-row code of a row needing all these columns (the larger code wins)."""
    present = [c for c in codes if c is not None]
    if not present:
        return None
    out = present[0]
    for c in present[1:]:
        out = np.maximum(out, c)
    return out


def count_reasons(codes: np.ndarray | None) -> dict[str, int]:
    """Excluded rows per reason, every reason present (0 when none)."""
    counts = dict.fromkeys(EXCLUSION_REASONS, 0)
    if codes is not None:
        tally = np.bincount(codes, minlength=CODE_NULL + 1)
        for code, reason in CODE_REASON.items():
            counts[reason] = int(tally[code])
    return counts


def prompt_counts(array: pa.Array | pa.ChunkedArray | np.ndarray) -> Coerced:
    """token_counts of a prompt column, a prompt of zero tokens coded empty_prompt."""
    coerced = token_counts(array)
    empty = coerced.values == 0
    if coerced.codes is not None:
        empty &= coerced.codes == OK  # (rows with another problem hold 0 too)
    return _coded(coerced, empty, CODE_EMPTY_PROMPT) if empty.any() else coerced


def token_counts(array: pa.Array | pa.ChunkedArray | np.ndarray) -> Coerced:
    """Token counts as int64: whole numbers from 0 to MAX_TOKENS are kept, everything else gets a code.

    `array` is an Arrow array, or an object array from the JSON line-by-line fallback.
    """
    coerced = _whole_numbers(array)
    if not coerced.values.size or coerced.values.max() <= MAX_TOKENS:
        return coerced
    return _coded(coerced, coerced.values > MAX_TOKENS, CODE_TOO_LONG)  # (rows with another problem hold 0)


def _coded(coerced: Coerced, rows: np.ndarray, code: int) -> Coerced:
    """`coerced` with `code` at `rows` (their values set to 0, as at every row with a problem)."""
    codes = np.zeros(rows.size, np.uint8) if coerced.codes is None else coerced.codes.copy()
    codes[rows] = code
    return Coerced(np.where(rows, 0, coerced.values), codes)


def _whole_numbers(array: pa.Array | pa.ChunkedArray | np.ndarray) -> Coerced:
    """Whole numbers >= 0 as int64 (those too large for int64 coded too_long); the rest coded."""
    if isinstance(array, np.ndarray):
        return from_objects(array)
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if pa.types.is_dictionary(array.type):  # Parquet writers dictionary-encode repeated values
        array = array.dictionary_decode()
    kind = array.type
    if pa.types.is_integer(kind):
        return _from_integers(array)
    if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        return _from_floats(array.cast(pa.float64()))
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        try:
            return _from_integers(decimal_int64(array))  # (the cast keeps nulls)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return _from_mixed_text(array)
    if pa.types.is_null(kind):
        return Coerced(np.zeros(len(array), np.int64), np.full(len(array), CODE_NULL, np.uint8))
    # Booleans, timestamps, lists, structs: present but not a token count.
    codes = np.where(array.is_null().to_numpy(zero_copy_only=False), CODE_NULL, CODE_NON_NUMERIC)
    return Coerced(np.zeros(len(array), np.int64), codes.astype(np.uint8))


def decimal_int64(array: pa.Array) -> pa.Array:
    """Text of decimal integers as int64; ArrowInvalid if any value is not one.

    pyarrow's cast also reads hexadecimal ('0x10' as 16), which no other reader here does:
    such a column is refused here, so that it goes value by value like any mixed column.
    """
    if pc.any(pc.match_substring(array, "x", ignore_case=True)).as_py():
        raise pa.ArrowInvalid("hexadecimal text is not a decimal integer")
    return pc.cast(array, pa.int64())


def _from_mixed_text(array: pa.Array) -> Coerced:
    """Text with some bad values: plain integers stay vectorised, only the rest go one by one."""
    plain = pc.fill_null(pc.match_substring_regex(array, r"^-?[0-9]{1,18}$"), False)
    coerced = _from_integers(pc.cast(pc.if_else(plain, array, None), pa.int64()))
    values = coerced.values.copy()
    codes = np.zeros(values.size, np.uint8) if coerced.codes is None else coerced.codes.copy()
    others = np.flatnonzero(~plain.to_numpy(zero_copy_only=False))
    slow = from_objects(np.asarray(array.take(pa.array(others)).to_pylist(), dtype=object))
    values[others] = slow.values
    codes[others] = OK if slow.codes is None else slow.codes
    return Coerced(values, codes if codes.any() else None)


def _from_integers(array: pa.Array) -> Coerced:
    if array.null_count:
        nulls = array.is_null().to_numpy(zero_copy_only=False)
        values = array.fill_null(0).to_numpy()
    else:
        nulls, values = None, array.to_numpy()
    if values.dtype == np.uint64 and values.size and values.max() > np.iinfo(np.int64).max:
        big = values > np.iinfo(np.int64).max
        values = np.where(big, 0, values).astype(np.int64)
        codes = np.where(big, CODE_TOO_LONG, OK).astype(np.uint8)
        return _merge(Coerced(values, codes), nulls)
    values = values.astype(np.int64, copy=False)
    codes = None
    if values.size and values.min() < 0:
        negative = values < 0
        codes = negative.astype(np.uint8) * CODE_NEGATIVE
        values = np.where(negative, 0, values)
    return _merge(Coerced(values, codes), nulls)


def _merge(coerced: Coerced, nulls: np.ndarray | None) -> Coerced:
    if nulls is None or not nulls.any():
        return coerced
    return _coded(coerced, nulls, CODE_NULL)


def _from_floats(array: pa.Array) -> Coerced:
    values = array.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)  # nulls -> NaN
    return _classify_floats(values, np.isnan(values))


def _classify_floats(
    values: np.ndarray, nulls: np.ndarray, non_numeric: np.ndarray | None = None
) -> Coerced:
    with np.errstate(invalid="ignore"):
        # a finite count of 2**53 or more is too long whether or not a float can say it is whole
        huge = np.isfinite(values) & (values >= _LARGEST_EXACT_FLOAT_INT)
        whole = (
            np.isfinite(values)
            & (np.floor(values) == values)
            & (np.abs(values) < _LARGEST_EXACT_FLOAT_INT)
        )
        negative = (whole | np.isfinite(values) & (values <= -_LARGEST_EXACT_FLOAT_INT)) & (values < 0)
    codes = np.where(
        nulls, CODE_NULL, np.where(negative, CODE_NEGATIVE, np.where(huge, CODE_TOO_LONG,
                                                                     np.where(~whole, CODE_NON_NUMERIC, OK)))
    ).astype(np.uint8)
    if non_numeric is not None:
        codes[non_numeric & ~nulls] = CODE_NON_NUMERIC
    ok = codes == OK
    return Coerced(np.where(ok, values, 0).astype(np.int64), codes if not ok.all() else None)


def from_objects(values: np.ndarray) -> Coerced:
    """The slow path: Python objects (text, JSON values of mixed types) one by one.

    Numbers and numeric text are accepted; None, NaN and blank text are null; booleans,
    lists, dicts and other text are non_numeric.
    """
    series = pd.Series(values, dtype=object)
    nulls = series.map(is_blank).to_numpy(dtype=bool)
    odd = series.map(lambda v: isinstance(v, bool | list | dict | tuple)).to_numpy(dtype=bool)
    numbers = pd.to_numeric(series.where(~odd, None), errors="coerce").astype(np.float64).to_numpy()
    coerced = _classify_floats(numbers, nulls, non_numeric=odd | (np.isnan(numbers) & ~nulls))
    # Integers (JSON ints, digit strings) are read exactly, as the vectorised paths read
    # them: through a float, one above 2**53 would be refused here and kept there.
    exact = [_exact_integer(v) for v in values]  # (not Series.map: it would make them floats)
    rows = [i for i, n in enumerate(exact) if n is not None]
    if not rows:
        return coerced
    values_out = coerced.values.copy()
    codes = np.zeros(values_out.size, np.uint8) if coerced.codes is None else coerced.codes.copy()
    for i in rows:
        n = exact[i]
        if n > _INT64_MAX:
            values_out[i], codes[i] = 0, CODE_TOO_LONG
        else:
            values_out[i], codes[i] = (0, CODE_NEGATIVE) if n < 0 else (n, OK)
    return Coerced(values_out, codes if codes.any() else None)


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_DIGITS = re.compile(r"\s*-?[0-9]{1,40}\s*")  # (longer: past int64 anyway, and int() is quadratic)


def _exact_integer(value: object) -> int | None:
    """`value` as an exact integer if it is a Python int or a string of digits, else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        return int(value)
    return None


def is_blank(value: object) -> bool:
    """None, NaN, text of only whitespace or the text 'nan': a missing value wherever a log
    holds it ('nan' is how pandas writes a missing number; pyarrow's CSV reader reads it as null)."""
    if value is None:
        return True
    if isinstance(value, float):
        return value != value  # NaN
    return isinstance(value, str) and (not value.strip() or value.strip().lower() == "nan")
