"""Generated logs in three formats through `planner histogram`: the command keeps the contract,
and its request and exclusion counts equal an independent, row-by-row reading of the rules
(planner/workload/rows.py and timestamps.py docstrings) written here in plain Python."""

from __future__ import annotations

import json
import math
import tempfile
from fractions import Fraction
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from clirun import run
from contract import FUZZ, check_contract, files_under
from hypothesis import event, given, settings
from hypothesis import strategies as st

INT64_MAX = 2**63 - 1
T0 = 1_700_000_000_000  # epoch ms
ISO = "2024-01-01T00:00:00Z"
# pyarrow's CSV reader reads these as null (its default null_values); JSON and Parquet text keep them
CSV_NULLS = {"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
             "N/A", "NA", "NULL", "NaN", "n/a", "nan", "null"}

tokens = st.one_of(
    st.integers(0, 200_000), st.integers(0, 200_000), st.integers(0, 200_000),
    st.integers(-1_000, -1),
    st.sampled_from([None, 12.0, 12.5, math.nan, math.inf, -3.0, True, 2**53 + 1, 2**63, 10**30, 3_000_000_000]),
    st.sampled_from([2**24, 9_000_000, 8_000_000]),  # each within the longest request, two together past it
    st.sampled_from(["abc", "12", "-4", "1e3", "NA", "", " ", "0x10", "7.0"]),
)
times = st.one_of(
    st.integers(T0, T0 + 86_400_000), st.integers(T0, T0 + 86_400_000),
    st.sampled_from([None, "abc", "", T0 + 0.5, math.nan, math.inf, 0, -5, 1e300, ISO, str(T0 + 1000)]),
)


@st.composite
def logs(draw):
    n = draw(st.integers(0, 25))
    with_time = draw(st.booleans())
    rows = []
    for _ in range(n):
        row = {"prompt_tokens": draw(tokens), "output_tokens": draw(tokens)}
        if with_time:
            row["timestamp_ms"] = draw(times)
        rows.append(row)
    return draw(st.sampled_from(["csv", "jsonl", "parquet"])), rows, with_time


# ---- writing each format, and what each value is in it -------------------------------------
def _csv_text(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


def _parquet_column(values: list) -> tuple[pa.Array, str]:
    """An Arrow column for the values, and its kind: 'int', 'float' or 'text'."""
    present = [v for v in values if v is not None]
    if all(isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v <= INT64_MAX for v in present):
        return pa.array(values, pa.int64()), "int"
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return pa.array([None if v is None else float(v) for v in values], pa.float64()), "float"
    return pa.array([None if v is None else str(v) for v in values], pa.string()), "text"


def write_log(folder: Path, fmt: str, rows: list[dict], with_time: bool) -> tuple[Path, dict[str, str]]:
    """The log file, and each column's kind as the reader sees it: 'text', or numbers
    ('number'; Parquet says which: 'int' or 'float')."""
    names = ["prompt_tokens", "output_tokens"] + (["timestamp_ms"] if with_time else [])
    path = folder / f"log.{fmt}"
    if fmt == "csv":
        path.write_text(",".join(names) + "\n" + "".join(",".join(_csv_text(r[k]) for k in names) + "\n" for r in rows))
        return path, dict.fromkeys(names, "text")
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        # pyarrow reads a column of JSON numbers as numbers; strings anywhere make it text
        kinds = {k: "text" if any(isinstance(r[k], str) for r in rows) else "number" for k in names}
        return path, kinds
    columns = {k: _parquet_column([r[k] for r in rows]) for k in names}
    pq.write_table(pa.table({k: c for k, (c, _) in columns.items()}), path)
    return path, {k: "text" if kind == "text" else kind for k, (_, kind) in columns.items()}


# ---- the oracle ------------------------------------------------------------------------------
NULL, NON_NUMERIC, NEGATIVE, TOO_LONG, EMPTY_PROMPT = "null", "non_numeric", "negative", "too_long", "empty_prompt"
RANK = {None: 0, EMPTY_PROMPT: 1, TOO_LONG: 2, NEGATIVE: 3, NON_NUMERIC: 4, NULL: 5}  # a row counts under its worst problem
MAX_TOKENS = 2**24  # longer than any context window


def _number(text: str) -> float | int | None:
    """What numeric text means: an exact integer for digit strings, else a float, else None."""
    s = text.strip()
    if s.lstrip("-").isdigit():
        return int(s)
    if "_" in s:  # Python's float() reads '1_0'; pandas and pyarrow do not
        return None
    try:
        return float(s)
    except ValueError:
        return None


def _is_missing(v, fmt: str) -> bool:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return True
    if isinstance(v, str):
        return not v.strip() or v.strip().lower() == "nan" or (fmt == "csv" and v in CSV_NULLS)
    return False


def token(v, fmt: str, kind: str) -> tuple[str | None, int]:
    """(problem or None, value) of one token count."""
    if _is_missing(v, fmt):
        return NULL, 0
    if isinstance(v, bool):
        return NON_NUMERIC, 0
    if isinstance(v, str):
        v = _number(v)
        if v is None:
            return NON_NUMERIC, 0
    if kind == "float" and isinstance(v, int):
        v = float(v)  # (a Parquet float64 column: the writer made it a float)
    if isinstance(v, float):
        if not math.isfinite(v):
            return NON_NUMERIC, 0
        if abs(v) >= 2**53:  # a float this large says nothing of wholeness, only of size
            return (NEGATIVE, 0) if v < 0 else (TOO_LONG, 0)
        if v != math.floor(v):
            return NON_NUMERIC, 0
        v = int(v)
    if v < 0:
        return NEGATIVE, 0
    return (TOO_LONG, 0) if v > MAX_TOKENS else (None, v)


def time_kind(values: list, fmt: str, kind: str) -> str:
    """'numeric' or 'datetime': the majority of the parsable values of a text column."""
    if kind != "text":
        return "numeric"
    texts = [str(v) for v in values if not _is_missing(v, fmt)]
    numeric = sum(_number(t) is not None for t in texts)
    dated = sum(t == ISO for t in texts)
    return "numeric" if numeric >= dated else "datetime"


def arrival(v, fmt: str, kind: str, column_kind: str) -> tuple[str | None, Fraction | None]:
    """(problem or None, arrival time in ms) of one timestamp."""
    if _is_missing(v, fmt):
        return NULL, None
    if kind == "text" or isinstance(v, str):
        if column_kind == "datetime":
            return (None, Fraction(1_704_067_200_000)) if str(v) == ISO else (NON_NUMERIC, None)
        v = _number(str(v))
        if v is None:
            return NON_NUMERIC, None
    if isinstance(v, bool) or (isinstance(v, float) and not math.isfinite(v)):
        return NON_NUMERIC, None
    if abs(v) >= 2**62 * 60_000:  # its minute would not fit in int64: not a time
        return NON_NUMERIC, None
    return None, Fraction(v)


def expected(fmt: str, rows: list[dict], kinds: dict[str, str], with_time: bool) -> dict:
    excluded = {NULL: 0, NEGATIVE: 0, NON_NUMERIC: 0, TOO_LONG: 0, EMPTY_PROMPT: 0}
    kept: list[tuple[int, int, Fraction | None]] = []
    column_kind = time_kind([r["timestamp_ms"] for r in rows], fmt, kinds["timestamp_ms"]) if with_time else None
    for r in rows:
        (p_problem, p), (o_problem, o) = token(r["prompt_tokens"], fmt, kinds["prompt_tokens"]), token(
            r["output_tokens"], fmt, kinds["output_tokens"])
        if p_problem is None and p == 0:  # no engine serves an empty prompt
            p_problem = EMPTY_PROMPT
        if p_problem is None and o_problem is None and p + o > MAX_TOKENS:  # each within it, the total past it
            p_problem = TOO_LONG
        t_problem, t = arrival(r["timestamp_ms"], fmt, kinds["timestamp_ms"], column_kind) if with_time else (None, None)
        worst = max((p_problem, o_problem, t_problem), key=RANK.__getitem__)
        if worst is None:
            kept.append((p, o, t))
        else:
            excluded[worst] += 1
    return {"excluded": excluded, "kept": kept, "column_kind": column_kind}


@settings(FUZZ, max_examples=400)
@given(logs())
def test_histogram_counts_rows_as_the_rules_say(log):
    fmt, rows, with_time = log
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path, kinds = write_log(folder, fmt, rows, with_time)
        out = folder / "out" / "h.parquet"
        out.parent.mkdir()
        r = run("histogram", path, "-o", out, "--json")
        error = check_contract(r, places=(str(path),))
        event(f"{fmt} exit {r.exit_code}")
        want = expected(fmt, rows, kinds, with_time)
        kept = want["kept"]
        if error is not None:
            assert files_under(out.parent) == []  # nothing written by a failed run
        if not rows and fmt == "jsonl":
            assert "no column 'prompt_tokens'" in error or "file is empty" in error
            return
        if not kept:
            assert error is not None and ("no usable row" in error or "file is empty" in error), r.output
            return
        # A cell's sums are int64: refused (naming the log) when a row's square leaves it, fine
        # when even the sums over all rows stay in it, either way in between (cells decide).
        largest = max(max(p * p, o * o, p * o) for p, o, _ in kept)
        totals = max(sum(p * p for p, _, _ in kept), sum(o * o for _, o, _ in kept), sum(p * o for p, o, _ in kept))
        if largest > INT64_MAX or (totals > INT64_MAX and error is not None):
            assert error is not None and "would exceed the int64 range" in error, r.output
            return
        if with_time:
            minutes = [math.floor(t / 60_000) for _, _, t in kept]
            if max(minutes) - min(minutes) + 1 > 1 << 23:
                assert error is not None and "arrival times span" in error, r.output
                return
        assert error is None, error
        summary = json.loads(r.stdout)
        assert summary["requests"] == len(kept)
        assert summary["excluded_rows"] == want["excluded"]
        assert summary["prompt_tokens"]["max"] == max(p for p, _, _ in kept)
        assert summary["output_tokens"]["max"] == max(o for _, o, _ in kept)
        if with_time:
            # the busiest whole minute: the first and last the log touches are partial
            first, last = min(minutes), max(minutes)
            whole = [sum(1 for m in minutes if m == k) for k in range(first + 1, last)]
            assert summary["rate_rps"]["minutes"] == last - first + 1
            assert summary["rate_rps"]["max_minute"] == (round(max(whole) / 60, 4) if len(whole) >= 2 else None)
        else:
            assert summary["rate_rps"]["max_minute"] is None and summary["rate_rps"]["minutes"] == 0
        assert files_under(out.parent) == ["h.parquet"]
        again = run("histogram", out, "--json")  # the file holds what was read
        assert again.exit_code == 0 and json.loads(again.stdout)["requests"] == len(kept)
