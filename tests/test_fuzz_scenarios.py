"""Generated scenarios through `planner solve` and `planner forecast`: a valid scenario with one
or two fields set to hostile values (nan, inf, 2**64, booleans, wrong types, unknown names),
or its YAML text damaged. Whatever comes in, the command keeps the contract: exit 0, 2 or 3,
one line naming the scenario, no traceback, nothing written by a failed run; and a plan it
reports covers every class's rate at a positive, finite cost within the fleet bound."""

from __future__ import annotations

import copy
import json
import math
import tempfile
from pathlib import Path

import pytest
import yaml
from clirun import run
from contract import FUZZ, check_contract, files_under
from hypothesis import event, given, settings
from hypothesis import strategies as st

from planner.bounds import MAX_FLEET_GPUS

BASE = {
    "name": "fz",
    "model": "llama-3.1-8b",
    "context_limit": 8192,
    "traffic": {
        "source": {"constant": {"prompt_tokens": 1000, "output_tokens": 200}},
        "peak": {"method": "explicit", "rps": 4},
    },
    "gpus": ["h100-sxm"],
    "tp": [1],
    "weight_dtypes": ["bf16"],
    "kv_dtypes": ["bf16"],
}
FORECAST = {"quarters": [{"quarter": "2027Q1"}, {"quarter": "2027Q2", "growth": 0.2}], "carry_forward": True}

HOSTILE = [math.nan, math.inf, -math.inf, -1, 0, 0.5, 2, 3.7, 1e9, 1e300, 2**63, 2**64, 10**30, True, False,
           "12", "abc", None, [], {}, "1e3", -0.0, 1e-300]
hostile = st.sampled_from(HOSTILE)


def _plausible(*values):
    """Two times in three a plausible value (so that plans get made and checked), else a hostile one."""
    plausible = st.sampled_from(values)
    return st.one_of(plausible, plausible, hostile)


# Where to put a value, and what to try there (hostile values and a few plausible ones).
FIELDS: dict[tuple, st.SearchStrategy] = {
    ("traffic", "peak", "rps"): _plausible(1, 40, 1e4, 1e7),
    ("traffic", "peak", "method"): st.sampled_from(["quantile", "max", "explicit", "p99", 5]),
    ("traffic", "peak", "quantile"): _plausible(0.5, 0.99, 1.0),
    ("traffic", "growth"): _plausible(1.3, 1000, 1e12),
    ("traffic", "headroom"): _plausible(1.0, 1.5, 100),
    ("traffic", "shared_prefix_tokens"): _plausible(100, 999, 1000, 4096, 8191, 8192),
    ("traffic", "mean_rps"): _plausible(1, 3),
    ("traffic", "source", "constant", "prompt_tokens"): _plausible(1, 8000, 9000, 2**24),
    ("traffic", "source", "constant", "output_tokens"): _plausible(1, 300, 8192),
    ("traffic", "source"): st.sampled_from([
        {"synthetic": {"name": "chat", "requests": 2000, "seed": 1}},
        {"synthetic": {"name": "chat", "requests": 0}},
        {"synthetic": {"name": "nope"}},
        {"log": "missing.csv"},
        {"histogram": "missing.parquet"},
        {},
        {"constant": {"prompt_tokens": 10, "output_tokens": 5}, "log": "x.csv"},
        {"constant": {"prompt_tokens": 0, "output_tokens": 1}},
    ]),
    ("context_limit",): _plausible(4096, 8192, 10000, 131072, 2**24),
    ("min_replicas_per_pool",): _plausible(1, 2, 10_000),
    ("tp",): st.sampled_from([[1, 2], [1, 2, 4], [2], [3], [], [0], [2**40], "1", [True]]),
    ("gpus",): st.sampled_from([
        ["h100-sxm", "h200"], ["a100-80gb", "l40s"], ["h200"], ["h100"], [], "h100-sxm", [5],
        [{"id": "h100-sxm", "max_gpus": 1}], [{"id": "h100-sxm", "max_gpus": -2}],
        [{"id": "h100-sxm", "price_usd_per_hour": math.nan}], [{"id": "h100-sxm", "price_usd_per_hour": 0.01}],
        [{"id": "h100-sxm", "bogus": 1}], [{"id": "h100-sxm", "max_gpus": 2**64}],
    ]),
    ("weight_dtypes",): st.sampled_from([["bf16", "fp8"], ["fp8"], ["fp9"], [], "bf16", ["int4"]]),
    ("kv_dtypes",): st.sampled_from([["fp8"], ["bf16", "fp8"], ["fp9"], [], [None]]),
    ("split_thresholds",): st.sampled_from([[4096], [2048, 4096], [10000], [4096, 4096], [-1], [8192, 4096]]),
    ("overhead_gib",): _plausible(0, 3, 70, 5000),
    ("gpu_memory_utilization",): _plausible(0.5, 0.9, 1.0),
    ("engine",): st.sampled_from(["vllm", "sglang", "trtllm", "nope", 3]),
    ("sizing",): st.sampled_from([{"mode": "worst_case"}, {"mode": "percentile", "quantile": 0.999},
                                  {"mode": "percentile", "quantile": math.nan}, {"mode": "x"}]),
    ("solver", "time_limit_s"): _plausible(1, 60),
    ("slo", "itl_ms"): _plausible(5, 50, 1e6),
    ("slo", "ttft_s"): _plausible(0.01, 2, 1e6),
    ("catalog",): st.one_of(
        st.builds(lambda f, v: {"gpus": {"h100-sxm": {f: v}}},
                  st.sampled_from(["price_usd_per_hour", "memory_gib", "hbm_bandwidth_gb_s", "gpus_per_node",
                                   "interconnect_gb_s", "weight_dtypes"]), hostile),
        st.builds(lambda v: {"gpus": {"h100-sxm": {"dense_tflops": {"bf16": v}}}}, hostile),
        st.builds(lambda v: {"models": {"llama-3.1-8b": {"num_key_value_heads": v}}}, hostile),
        st.builds(lambda v: {"engines": {"vllm": {"block_size": v}}}, hostile),
        st.sampled_from([{"nope": {}}, "text", {"gpus": {"h100-sxm": {"weight_dtypes": ["fp9"]}}},
                         {"dtypes": {"bf16": {"compute_dtype": "fp6"}}}]),
    ),
    ("forecast",): st.one_of(
        st.builds(lambda g, v: {**FORECAST, "reserved_prices": {g: v}}, st.sampled_from(["h100-sxm", "h100"]), hostile),
        st.builds(lambda v: {**FORECAST, "quarters": [{"quarter": "2027Q1", "growth": v}]}, hostile),
        st.builds(lambda f, v: {**FORECAST, "quarters": [{"quarter": "2027Q1", f: {"h100-sxm": v}}]},
                  st.sampled_from(["prices", "availability", "reserved"]), hostile),
        st.sampled_from([FORECAST, {"quarters": []}, {"quarters": [{"quarter": "2027Q5"}]}]),
    ),
    ("model",): st.sampled_from(["llama-3.1-70b", "nope", {"config_json": None}, {"config_json": "missing.json"},
                                 {"config_json": 5}, {"num_hidden_layers": 2}, [], None]),
    ("name",): st.sampled_from(["a" * 300, "bad name", "", None, "x.y-z"]),
    ("bogus_key",): hostile,
}
# Values a planner could mean, for plans that are made and then checked.
PLAUSIBLE: dict[tuple, list] = {
    ("traffic", "peak", "rps"): [0.5, 4, 40, 400],
    ("traffic", "growth"): [1.0, 1.5, 3.0],
    ("traffic", "headroom"): [1.0, 1.2, 2.0],
    ("traffic", "shared_prefix_tokens"): [0, 500, 999, 2000],
    ("traffic", "source", "constant", "prompt_tokens"): [1, 100, 4000],
    ("traffic", "source", "constant", "output_tokens"): [1, 300, 2000],
    ("traffic", "source"): [{"synthetic": {"name": "chat", "requests": 2000, "seed": 1}}],
    ("gpus",): [["h100-sxm", "h200"], ["a100-80gb"], [{"id": "h100-sxm", "max_gpus": 64}],
                [{"id": "h100-sxm", "price_usd_per_hour": 1.5}]],
    ("tp",): [[1, 2], [2]],
    ("weight_dtypes",): [["bf16", "fp8"]],
    ("kv_dtypes",): [["bf16", "fp8"], ["fp8"]],
    ("split_thresholds",): [[4096], [2048, 4096]],
    ("min_replicas_per_pool",): [1, 2, 3],
    ("sizing",): [{"mode": "worst_case"}, {"mode": "expected"}, {"mode": "percentile", "quantile": 0.999}],
    ("context_limit",): [4096, 8192, 16384],
    ("engine",): ["sglang", "trtllm", "vllm-0.20"],
    ("forecast",): [FORECAST, {**FORECAST, "reserved_prices": {"h100-sxm": 2.0}},
                    {"quarters": [{"quarter": "2027Q1", "prices": {"h100-sxm": 2.5}, "availability": {"h100-sxm": 100}}]}],
}
TEXT_DAMAGE = ["name: again\n", "traffic: [\n", "\t- x\n", "x: &a [*a]\n", "y: 2027-13-45\n", "z: " + "[" * 200 + "\n"]


def _put(tree: dict, path: tuple, value) -> None:
    node = tree
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value


def _distinct(draw, keys: list, most: int) -> list:
    """One to `most` distinct keys, drawn without rejection (so no example is thrown away)."""
    pool = list(keys)
    return [pool.pop(draw(st.integers(0, len(pool) - 1))) for _ in range(draw(st.integers(1, most)))]


@st.composite
def scenarios(draw) -> tuple[str, bool]:
    """A scenario's YAML text, and whether it has a forecast section."""
    tree = copy.deepcopy(BASE)
    if draw(st.booleans()):  # plausible: a plan should come out, and is checked
        for path in _distinct(draw, sorted(PLAUSIBLE, key=str), 3):
            _put(tree, path, draw(st.sampled_from(PLAUSIBLE[path])))
    else:
        for path in _distinct(draw, sorted(FIELDS, key=str), 2):
            _put(tree, path, draw(FIELDS[path]))
    text = yaml.safe_dump(tree, sort_keys=False)
    if draw(st.integers(0, 9)) == 0:
        text += draw(st.sampled_from(TEXT_DAMAGE))
    return text, "forecast" in tree


def _covers_every_class(plan: dict) -> None:
    """What a reported plan must be: positive finite cost, a fleet that exists, and for each
    class, replicas × capacity at least its rate."""
    assert math.isfinite(plan["cost_usd_per_hour"]) and plan["cost_usd_per_hour"] > 0, plan["cost_usd_per_hour"]
    assert 1 <= plan["gpus"] <= MAX_FLEET_GPUS
    served: dict[str, float] = {}
    for pool in plan["plan"]:
        assert pool["replicas"] >= 1 and pool["cost_usd_per_hour"] > 0
        served[pool["pool"]] = served.get(pool["pool"], 0.0) + pool["replicas"] * pool["capacity_rps"]
    parts: dict[str, float] = {}
    for pool in plan["plan"]:
        assert served[pool["pool"]] >= pool["class_rate_rps"] * (1 - 1e-9), (pool, served)
        parts[pool["pool"]] = parts.get(pool["pool"], 0.0) + pool["rate_rps"]
    for pool in plan["plan"]:  # a class's pools cover its rate between them, each its own part
        assert math.isclose(parts[pool["pool"]], pool["class_rate_rps"], rel_tol=1e-9), (pool, parts)


@pytest.mark.long
@settings(FUZZ, max_examples=150)
@given(scenarios(), st.booleans(), st.integers(0, 3))
def test_any_scenario_keeps_the_contract(scenario, forecast, write):
    text, has_forecast = scenario
    command = "forecast" if has_forecast and forecast else "solve"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = folder / "s.yaml"
        path.write_text(text, encoding="utf-8")
        out = folder / "out"
        args = ["--out-dir", out] if write == 0 else ["--no-report"]  # (figures cost 0.3 s a report)
        r = run(command, path, *args, "--json")
        error = check_contract(r, places=(str(folder),))  # the scenario, or a file it names
        event(f"{command} exit {r.exit_code}")
        if error is not None:
            assert files_under(out) == [], files_under(out)
            return
        result = json.loads(r.stdout)
        if command == "solve":
            _covers_every_class(result)
            if write == 0:
                assert f"{result['scenario']}.md" in files_under(out)
        else:
            for quarter in result["quarters"] if isinstance(result, dict) else result:
                assert quarter["gpus"] >= 1
        assert not [f for f in files_under(out) if f.endswith(".tmp")]
