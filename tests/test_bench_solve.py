"""bench/solve.py's own code paths that take a planner API (the rest runs the command line): the
fleet's joint ILP, solved by each backend on the same candidates."""

from __future__ import annotations

import re

from bench_scripts import load_bench
from test_fleet import write_fleet


def test_the_joint_ilp_alone_is_solved_by_each_backend_at_the_same_cost(tmp_path, capsys):
    load_bench("solve").joint_ilp(write_fleet(tmp_path), ["highs", "cbc"])
    out = capsys.readouterr().out
    assert re.search(r"the fleet's ILP alone \(\d+ candidates after dominance\)", out)
    costs = dict(re.findall(r"^\s+(highs|cbc)\s*: median .* \$([\d,.]+)/hour", out, re.M))
    assert set(costs) == {"highs", "cbc"} and costs["highs"] == costs["cbc"], out


def test_the_floor_case_is_the_rollout_narrowed_to_one_config(tmp_path):
    from planner.scenario import load_scenario

    bench = load_bench("solve")
    shipped, _ = load_scenario(bench.ROOT / "scenarios" / "128k_rollout.yaml")
    narrowed, _ = load_scenario(bench.one_config(tmp_path))
    for key in ("tp", "weight_dtypes", "kv_dtypes", "split_thresholds"):
        assert getattr(narrowed, key) == getattr(shipped, key)[:1], key
    assert [g.id for g in narrowed.gpu_candidates] == [shipped.gpu_candidates[0].id]
    assert narrowed.slo == shipped.slo and narrowed.traffic == shipped.traffic
