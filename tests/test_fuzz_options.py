"""Generated command lines: every command's options with extreme or malformed values (nan, inf,
2**64, negative, empty, unknown names, missing files). The contract holds: exit 0, 2 or 3,
one line that names the option, argument or file at fault, no traceback, and --json output
that parses."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from clirun import run
from contract import FUZZ, check_contract, files_under
from hypothesis import event, given, settings
from hypothesis import strategies as st

from planner.errors import shorten

LOGS = Path(__file__).parent / "fixtures" / "logs"
NUMBERS = ["nan", "inf", "-inf", "-1", "0", "1", "2", "3", "0.5", "0.999", "1e300", "1e-300", "4096", "131072",
           "18446744073709551616", "abc", "", "1_000", "0x10"]
number = st.sampled_from(NUMBERS)


def either(*plausible: str) -> st.SearchStrategy:
    """A plausible value half the time (so that commands succeed and their arithmetic runs), else any."""
    return st.one_of(st.sampled_from(plausible), number)


MODELS = st.sampled_from(["llama-3.1-8b", "llama-3.1-8b", "llama-3.1-70b", "nope", "", "x" * 300])
GPUS = st.sampled_from(["h100-sxm", "h100-sxm", "l40s", "nope", ""])
DTYPES = st.sampled_from(["bf16", "bf16", "fp8", "int4", "fp9", ""])


def _options(draw, table: dict[str, st.SearchStrategy]) -> list[str]:
    """Up to three of the options in `table`, each with a drawn value (None: a flag)."""
    names = list(table)
    args: list[str] = []
    for _ in range(draw(st.integers(0, min(3, len(names))))):
        name = names.pop(draw(st.integers(0, len(names) - 1)))
        value = draw(table[name])
        args += [name] if value is None else [name, value]
    return args


@st.composite
def command_lines(draw) -> list[str]:
    command = draw(st.sampled_from(["kv", "capacity", "capacity", "synth", "histogram", "catalog", "solve", "other"]))
    if command == "kv":
        return ["kv", draw(MODELS), *_options(draw, {"--kv-dtype": DTYPES, "--tokens": either("8192", "1"),
                                                     "--tp": either("1", "8", "16"),
                                                     "--json": st.none()})]
    if command == "capacity":
        return ["capacity", draw(MODELS), draw(GPUS), *_options(draw, {
            "--tp": either("1", "2"), "--weight-dtype": DTYPES, "--kv-dtype": DTYPES,
            "--context-limit": either("8192", "4096", "131072"),
            "--engine": st.sampled_from(["vllm", "sglang", "nope"]), "--gpu-memory-utilization": either("0.9", "0.5"),
            "--overhead-gib": either("3", "0"), "--typical-tokens": either("2300", "1"),
            "--prompt-tokens": either("2000", "0", "1"), "--output-tokens": either("300", "1"),
            "--sizing": st.sampled_from(["worst_case", "expected", "percentile", "x"]),
            "--quantile": either("0.99", "0.5"), "--shared-prefix-tokens": either("0", "1000", "9000"),
            "--itl-ms": either("50", "5"), "--ttft-s": either("2", "0.05"), "--rate-rps": either("1", "10", "0"),
            "--histogram": st.sampled_from(["{tmp}/missing.parquet", str(LOGS / "handmade.csv")]),
            "--json": st.none(),
        })]
    if command == "synth":
        return ["synth", draw(st.sampled_from(["chat", "rag", "nope"])), "-n", draw(st.sampled_from(["1", "50", "0", "-5", "nan", "1e300"])),
                "-o", draw(st.sampled_from(["{tmp}/out/s.csv", "{tmp}/out/s.parquet", "{tmp}/out/s.txt", "{tmp}/nope/s.csv"])),
                *_options(draw, {"--seed": number, "--rate-rps": number, "--tail-share": number, "--json": st.none()})]
    if command == "histogram":
        log = draw(st.sampled_from(["handmade.csv", "garbage.csv", "garbage.jsonl", "mooncake_head.jsonl", "header_only.csv"]))
        return ["histogram", str(LOGS / log), *_options(draw, {
            "-o": st.sampled_from(["{tmp}/out/h.parquet", str(LOGS / log), "{tmp}/nope/h.parquet"]),
            "--preset": st.sampled_from(["azure", "mooncake", "planner", "nope"]),
            "--prompt-col": st.sampled_from(["prompt_tokens", "input_length", "", "x"]),
            "--time-col": st.sampled_from(["timestamp_ms", "timestamp", "x"]),
            "--no-time": st.none(), "--time-unit": st.sampled_from(["s", "ms", "ns", "days"]),
            "--format": st.sampled_from(["csv", "jsonl", "parquet", "xml"]), "--json": st.none(),
        })]
    if command == "catalog":
        return ["catalog", draw(st.sampled_from(["gpus", "models", "dtypes", "engines", "nope"])),
                *_options(draw, {"--catalog": st.sampled_from(["{tmp}/missing.yaml", str(LOGS / "handmade.csv")]),
                                 "--json": st.none()})]
    if command == "solve":
        return ["solve", draw(st.sampled_from(["{tmp}/missing.yaml", str(LOGS / "handmade.csv"), "{tmp}"])),
                *_options(draw, {"--out-dir": st.sampled_from(["{tmp}/out", "{tmp}/afile/x"]),
                                 "--write-lp": st.sampled_from(["{tmp}/out/m.lp", "{tmp}"]), "--json": st.none()})]
    return [draw(st.sampled_from(["", "nope", "--version", "--bogus", "catalog"]))]


@settings(FUZZ, max_examples=450)
@given(command_lines())
def test_any_command_line_keeps_the_contract(argv):
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "out").mkdir()
        (Path(tmp) / "afile").write_text("x")
        args = [a.replace("{tmp}", tmp) for a in argv]
        before = files_under(Path(tmp))
        r = run(*args)
        event(f"{argv[0]} exit {r.exit_code}")
        names = [a for a in args if a.startswith("-")] + [a for a in args[1:] if not a.startswith("-") and a]
        quoted = [f"'{shorten(a)}'" for a in args]  # an empty, unknown or cut name is named in quotes
        error = check_contract(r, places=(*names, *quoted, tmp))
        if error is not None:
            assert files_under(Path(tmp)) == before  # nothing written by a failed run
        elif "--json" in args:
            json.loads(r.stdout)
